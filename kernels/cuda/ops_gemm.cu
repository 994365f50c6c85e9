/*
 * ops_gemm.cu — the skinny tensor-core GEMM, the cuBLAS bf16 GEMM, and RoPE fused with the KV
 * write.
 */
#include "ops_int.cuh"

TDM_OPS_PDL_SETTER(gemm)

/* ---------------------------------------------------------------- skinny GEMM (tensor cores) */

#define SK_WARPS 8  /* warps per block, each a slice of K */
#define SK_UNROLL 4 /* 32-wide k steps per batch of loads */

/* mma.sync m16n8k16 with the weights as A (16 output features) and the activations as B (8 rows).
 * The dot product does not care about the order of k, so each lane loads 16 contiguous bytes of a
 * weight row (k = 32 s + 8 t .. + 7, t = lane % 4) and of an activation row, and both operands
 * map the same physical k to the same logical k: a fully coalesced weight stream with no
 * shuffles. 8 bf16 of x at k; SILU: x is fp32 gate|up (ldx = 2K) and silu(gate) * up is rounded
 * to bf16 here (what silu_mul writes on the cuBLAS path). */
template <bool SILU>
static __device__ __forceinline__ uint4 sk_x8(const void *x, uint32_t ldx, uint32_t row, uint32_t k,
                                              uint32_t K)
{
    if (!SILU)
        return __ldg(reinterpret_cast<const uint4 *>(reinterpret_cast<const uint16_t *>(x) +
                                                     (size_t)row * ldx + k));
    const float *xr = reinterpret_cast<const float *>(x) + (size_t)row * ldx;
    float4 g0 = __ldg(reinterpret_cast<const float4 *>(xr + k));
    float4 g1 = __ldg(reinterpret_cast<const float4 *>(xr + k + 4));
    float4 u0 = __ldg(reinterpret_cast<const float4 *>(xr + K + k));
    float4 u1 = __ldg(reinterpret_cast<const float4 *>(xr + K + k + 4));
    uint4 v;
    v.x = pack_bf16(silu(g0.x) * u0.x, silu(g0.y) * u0.y);
    v.y = pack_bf16(silu(g0.z) * u0.z, silu(g0.w) * u0.w);
    v.z = pack_bf16(silu(g1.x) * u1.x, silu(g1.y) * u1.y);
    v.w = pack_bf16(silu(g1.z) * u1.z, silu(g1.w) * u1.w);
    return v;
}

/* grid ceil(M / 16), block SK_WARPS warps: block b computes features 16 b .. 16 b + 15 for all
 * n <= 8 NT rows; warp w takes the k steps w, w + SK_WARPS, ...; the warps' partial sums meet in
 * shared memory (a fixed order: deterministic). */
template <int NT, bool SILU>
__global__ void __launch_bounds__(SK_WARPS * 32)
    skinny_kernel(const void *__restrict__ x, uint32_t ldx, uint32_t n, uint32_t K, uint32_t M,
                  const uint16_t *__restrict__ W, const float *__restrict__ bias, int accum,
                  float *__restrict__ y, uint32_t ldy)
{
    __shared__ float red[SK_WARPS][NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t m0 = blockIdx.x * 16, nsteps = K / 32;
    const uint16_t *wa = W + (size_t)min(m0 + g, M - 1) * K + 8 * t;
    const uint16_t *wb = W + (size_t)min(m0 + g + 8, M - 1) * K + 8 * t;
    uint4 A[SK_UNROLL][2];
    /* weights first: they never depend on the previous kernel (PDL) */
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++) {
        uint32_t st = warp + u * SK_WARPS;
        if (st < nsteps) {
            A[u][0] = ld_stream(wa + 32 * st);
            A[u][1] = ld_stream(wb + 32 * st);
        }
    }
    pdl_sync();
    uint32_t xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        xrow[nt] = min((uint32_t)(nt * 8 + g), n - 1); /* padding rows: computed, never stored */
    float c[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.0f;
    for (uint32_t base = warp; base < nsteps; base += SK_UNROLL * SK_WARPS) {
        const uint32_t nb = base + SK_UNROLL * SK_WARPS;
        uint4 An[SK_UNROLL][2];
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) {
            uint32_t st = nb + u * SK_WARPS;
            if (st < nsteps) {
                An[u][0] = ld_stream(wa + 32 * st);
                An[u][1] = ld_stream(wb + 32 * st);
            }
        }
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) {
            uint32_t st = base + u * SK_WARPS;
            if (st < nsteps) {
                const uint32_t k = 32 * st + 8 * t;
                const uint32_t a0[4] = {A[u][0].x, A[u][1].x, A[u][0].y, A[u][1].y};
                const uint32_t a1[4] = {A[u][0].z, A[u][1].z, A[u][0].w, A[u][1].w};
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    uint4 xv = sk_x8<SILU>(x, ldx, xrow[nt], k, K);
                    mma_bf16(c[nt], a0, xv.x, xv.y);
                    mma_bf16(c[nt], a1, xv.z, xv.w);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) {
            A[u][0] = An[u][0];
            A[u][1] = An[u][1];
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            red[warp][nt * 4 + e][lane] = c[nt][e];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < NT * 4 * 32; i += SK_WARPS * 32) {
        const uint32_t fe = i / 32, ln = i % 32, nt = fe / 4, e = fe % 4;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < SK_WARPS; w++)
            v += red[w][fe][ln];
        /* c[e]: feature g (+ 8 for e >= 2), row 2 t + (e & 1) of the n-tile */
        const uint32_t row = nt * 8 + 2 * (ln & 3) + (e & 1), m = m0 + (ln >> 2) + (e >= 2 ? 8 : 0);
        if (row < n && m < M) {
            float *yp = y + (size_t)row * ldy + m;
            if (accum)
                *yp += v;
            else
                *yp = v + (bias ? bias[m] : 0.0f);
        }
    }
}

template <bool SILU>
static tdm_status_t skinny_launch(const void *x, uint32_t ldx, uint32_t n, uint32_t K,
                                  const uint16_t *w, uint32_t M, const float *bias, int accum,
                                  float *y, uint32_t ldy, cudaStream_t s)
{
    const dim3 grid((M + 15) / 16), block(SK_WARPS * 32);
    switch ((n + 7) / 8) {
    case 1:
        launch(skinny_kernel<1, SILU>, grid, block, 0, s, x, ldx, n, K, M, w, bias, accum, y, ldy);
        break;
    case 2:
        launch(skinny_kernel<2, SILU>, grid, block, 0, s, x, ldx, n, K, M, w, bias, accum, y, ldy);
        break;
    case 3:
        launch(skinny_kernel<3, SILU>, grid, block, 0, s, x, ldx, n, K, M, w, bias, accum, y, ldy);
        break;
    case 4:
        launch(skinny_kernel<4, SILU>, grid, block, 0, s, x, ldx, n, K, M, w, bias, accum, y, ldy);
        break;
    default:
        return TDM_ERR_INVAL;
    }
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

int tdm_cuda_skinny_ok(uint32_t n, uint32_t K)
{
    return n >= 1 && n <= TDM_CUDA_SKINNY_MAX_ROWS && K % 32 == 0 && K > 0;
}

tdm_status_t tdm_cuda_gemm_skinny(const uint16_t *xb, uint32_t n, uint32_t K, const uint16_t *w,
                                  uint32_t M, const float *bias, int accum, float *y, uint32_t ldy,
                                  cudaStream_t stream)
{
    if (!tdm_cuda_skinny_ok(n, K) || M == 0 || !xb || !w || !y || (accum && bias))
        return TDM_ERR_INVAL;
    return skinny_launch<false>(xb, K, n, K, w, M, bias, accum, y, ldy, stream);
}

tdm_status_t tdm_cuda_gemm_skinny_silu(const float *gu, uint32_t n, uint32_t I, const uint16_t *w,
                                       uint32_t M, int accum, float *y, uint32_t ldy,
                                       cudaStream_t stream)
{
    if (!tdm_cuda_skinny_ok(n, I) || M == 0 || !gu || !w || !y)
        return TDM_ERR_INVAL;
    return skinny_launch<true>(gu, 2 * I, n, I, w, M, NULL, accum, y, ldy, stream);
}

tdm_status_t tdm_cuda_gemm_bf16(cublasHandle_t h, const uint16_t *xb, uint32_t n, uint32_t K,
                                const uint16_t *w, uint32_t M, float beta, float *y)
{
    const float alpha = 1.0f;
    if (n == 0)
        return TDM_OK;
    /* column-major: Y^T (M, n) = W (K, M)^T · X^T (K, n) */
    cublasStatus_t e = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)n, (int)K, &alpha, w,
                                    CUDA_R_16BF, (int)K, xb, CUDA_R_16BF, (int)K, &beta, y,
                                    CUDA_R_32F, (int)M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (e != CUBLAS_STATUS_SUCCESS) {
        tdm_err(TDM_SUB_CUDA, "msg=\"cublasGemmEx failed\" err=%d n=%u K=%u M=%u", (int)e, n, K, M);
        return TDM_ERR_CUDA;
    }
    return TDM_OK;
}

/* ---------------------------------------------------------------- RoPE + KV write */

__global__ void rope_kv_kernel(float *qkv, uint32_t H, const float *inv_freq, tdm_cuda_kv_t kv,
                               uint32_t layer, tdm_cuda_rows_t rows)
{
    /* grid (n, ceil((H + 2 KV) / warps)): a warp per head of q, k or v of row blockIdx.x, so a
     * short call is not a few blocks looping over every head (docs/cuda.md "Where a step's time
     * goes") */
    const uint32_t r = blockIdx.x, KV = kv.kv_heads, hd = kv.hd, half = hd / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    pdl_sync();
    const uint32_t ld = (H + 2 * KV) * hd, pos = rows.pos[r];
    const bool active = r < *rows.nactive;
    float *row = qkv + (size_t)r * ld;
    for (uint32_t u = blockIdx.y * nw + warp; u < H + 2 * KV; u += nw * gridDim.y) {
        float *x = row + (size_t)u * hd;
        float v[16];
        if (u < H + KV) {
            /* rotate_half: lane takes pairs (i, i + hd/2), i = lane + 32 j */
#pragma unroll
            for (int j = 0; j < 8; j++) {
                uint32_t i = lane + 32u * j;
                if (i < half) {
                    float o0, o1;
                    rope_pair(x[i], x[i + half], (float)pos, inv_freq[i], &o0, &o1);
                    x[i] = o0;
                    x[i + half] = o1;
                }
            }
            __syncwarp();
        }
        if (u < H || !active)
            continue;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            uint32_t i = lane + 32u * j;
            v[j] = i < hd ? x[i] : 0.0f;
        }
        uint32_t page = rows.pages[rows.ptoff[r] + pos / kv.page_size], slot = pos % kv.page_size;
        bool isk = u < H + KV;
        write_head(kv, layer, isk ? TDM_KV_SUB_K : TDM_KV_SUB_V, page, slot,
                   isk ? u - H : u - H - KV, v, lane);
    }
}

tdm_status_t tdm_cuda_rope_kv_write(float *qkv, uint32_t n, uint32_t H, const float *inv_freq,
                                    const tdm_cuda_kv_t *kv, uint32_t layer,
                                    const tdm_cuda_rows_t *rows, cudaStream_t stream)
{
    if (kv->hd > 512 || kv->hd % 2)
        return TDM_ERR_UNSUPPORTED;
    if (n == 0)
        return TDM_OK;
    /* short calls (fewer rows than SMs: a mixed step's chunk, decode rows on the generic path):
     * a warp per head in blocks of 4 warps, so the rows' heads run side by side (32 rows: 5.6
     * against 10.8 us a layer under ncu, bench/results/gpu_step_profile*.json); longer ones a
     * block of 4 warps per row looping over its heads, which profiled faster at 400 rows
     * (docs/cuda.md "Where a step's time goes") */
    if (n >= 132 || tdm_cuda_narrow_v1())
        launch(rope_kv_kernel, n, 128, 0, stream, qkv, H, inv_freq, *kv, layer, *rows);
    else
        launch(rope_kv_kernel, dim3(n, (H + 2 * kv->kv_heads + 3) / 4), 128, 0, stream, qkv, H,
               inv_freq, *kv, layer, *rows);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}
