/*
 * ops.cu — the CUDA kernels of the GPU forward (sm_90a): embedding, RMSNorm with the residual
 * add, RoPE fused with the KV write (bf16, fp8 e4m3 + scales), a memory-bound GEMV with RMSNorm,
 * SiLU·mul and the residual add fused into it, cuBLAS for the wide GEMMs, split-K paged
 * attention (flash-decoding, one block per (row, KV head, split) serving the whole GQA group, a
 * combine kernel), and argmax. Accumulation is fp32 everywhere; no kernel synchronises the host.
 *
 * The GEMV is what decode speed is made of: one warp per output row pair, 16-byte weight loads
 * (8 bf16), four in flight per lane, x read through L1 and shared by the two rows, a warp-shuffle
 * reduction at the end. Attention reads K/V back from the cache (never the fresh values), like the
 * CPU backend (backend.h rule 4), so prefill and decode see the same keys.
 */
#include <stdlib.h>
#include "ops_int.cuh"

TDM_OPS_PDL_SETTER(ops)

/* ---------------------------------------------------------------- launches (PDL) */

int tdm_cuda_g_pdl = 0;

void tdm_cuda_set_pdl(int on)
{
    tdm_cuda_g_pdl = on != 0;
}

/* TDM_CUDA_NARROW_V1=1 (a measurement knob, docs/cuda.md "Where a step's time goes"): RMSNorm,
 * SiLU·mul and RoPE + KV write in their first forms (a block per row looping over it, a
 * grid-stride loop with a division per element, a block of 4 warps per row looping over the
 * heads) instead of the register, four-column and warp-per-head forms. */
int tdm_cuda_narrow_v1(void)
{
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("TDM_CUDA_NARROW_V1");
        v = s && s[0] == '1' && s[1] == 0;
    }
    return v;
}

tdm_status_t tdm_cuda_set_pdl_early(int on, cudaStream_t s)
{
    static int cur = -1;
    const int v = on != 0;
    if (v == cur)
        return TDM_OK;
    /* every kernel file has its own copy of the constant (ops_int.cuh) */
    if (tdm_cuda_pdl_early_ops(v, s) != cudaSuccess ||
        tdm_cuda_pdl_early_gemv(v, s) != cudaSuccess ||
        tdm_cuda_pdl_early_gemm(v, s) != cudaSuccess ||
        tdm_cuda_pdl_early_attn(v, s) != cudaSuccess ||
        tdm_cuda_pdl_early_attn_mma(v, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
        return TDM_ERR_CUDA;
    cur = v;
    return TDM_OK;
}

int tdm_cuda_l2pf_ok(const tdm_cuda_l2pf_t *pf)
{
    return !pf || pf->bytes == 0 ||
           (pf->p && (uintptr_t)pf->p % 16 == 0 && pf->bytes % 16 == 0 && pf->op >= 0 &&
            pf->op <= 3);
}

/* ---------------------------------------------------------------- embedding */

/* out (n, d); one block per row */
template <typename T>
__global__ void embed_kernel(const T *table, const int32_t *ids, uint32_t d, float *out)
{
    pdl_sync();
    const T *row = table + (size_t)ids[blockIdx.x] * d;
    for (uint32_t j = threadIdx.x; j < d; j += blockDim.x)
        out[(size_t)blockIdx.x * d + j] = ld_elem<T>(row, j);
}

tdm_status_t tdm_cuda_embed(const void *table, int dtype, const int32_t *ids, uint32_t n,
                            uint32_t d, float *out, cudaStream_t stream)
{
    if (n == 0)
        return TDM_OK;
    switch (dtype) {
    case TDM_DTYPE_BF16:
        launch(embed_kernel<uint16_t>, n, 256, 0, stream, (const uint16_t *)table, ids, d, out);
        break;
    case TDM_DTYPE_F16:
        launch(embed_kernel<__half>, n, 256, 0, stream, (const __half *)table, ids, d, out);
        break;
    case TDM_DTYPE_F32:
        launch(embed_kernel<float>, n, 256, 0, stream, (const float *)table, ids, d, out);
        break;
    default:
        return TDM_ERR_UNSUPPORTED;
    }
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* Vocab-parallel: rows of ids in [lo, lo + cnt) from this rank's table slice, -0.0 (the exact
 * additive identity) elsewhere, so the all-reduce of every rank's rows is the full lookup. */
template <typename T>
__global__ void embed_range_kernel(const T *table, const int32_t *ids, uint32_t d, uint32_t lo,
                                   uint32_t cnt, float *out, tdm_cuda_mark_t mk)
{
    pdl_sync();
    mark_store(mk);
    const uint32_t id = (uint32_t)ids[blockIdx.x];
    const bool own = id >= lo && id - lo < cnt;
    const T *row = table + (size_t)(own ? id - lo : 0) * d;
    for (uint32_t j = threadIdx.x; j < d; j += blockDim.x)
        out[(size_t)blockIdx.x * d + j] = own ? ld_elem<T>(row, j) : -0.0f;
}

tdm_status_t tdm_cuda_embed_range(const void *table, int dtype, const int32_t *ids, uint32_t n,
                                  uint32_t d, uint32_t lo, uint32_t cnt, float *out,
                                  tdm_cuda_mark_t mark, cudaStream_t stream)
{
    if (n == 0)
        return TDM_OK;
    switch (dtype) {
    case TDM_DTYPE_BF16:
        launch(embed_range_kernel<uint16_t>, n, 256, 0, stream, (const uint16_t *)table, ids, d, lo,
               cnt, out, mark);
        break;
    case TDM_DTYPE_F16:
        launch(embed_range_kernel<__half>, n, 256, 0, stream, (const __half *)table, ids, d, lo,
               cnt, out, mark);
        break;
    case TDM_DTYPE_F32:
        launch(embed_range_kernel<float>, n, 256, 0, stream, (const float *)table, ids, d, lo, cnt,
               out, mark);
        break;
    default:
        return TDM_ERR_UNSUPPORTED;
    }
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* One 4-byte I2 mark into host-mapped memory (where the driver has no cuStreamWriteValue32). */
__global__ void mark_kernel(volatile uint32_t *p, uint32_t v)
{
    *p = v;
    __threadfence_system();
}

tdm_status_t tdm_cuda_mark(uint32_t *p, uint32_t v, cudaStream_t stream)
{
    mark_kernel<<<1, 1, 0, stream>>>(p, v);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- RMSNorm */

/* one block per output row */
__global__ void rmsnorm_kernel(float *resid, const float *add, const uint32_t *xrow, const float *w,
                               float eps, uint32_t d, float *out_f32, uint16_t *out_bf16)
{
    __shared__ float sh[32];
    pdl_sync();
    uint32_t j = blockIdx.x, r = xrow ? xrow[j] : j;
    float *x = resid + (size_t)r * d;
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < d; i += blockDim.x) {
        float v = x[i];
        if (add) {
            v += add[(size_t)r * d + i];
            x[i] = v;
        }
        ss += v * v;
    }
    float rs = rsqrtf(block_sum(ss, sh) / (float)d + eps);
    for (uint32_t i = threadIdx.x; i < d; i += blockDim.x) {
        float o = x[i] * rs * w[i];
        if (out_f32)
            out_f32[(size_t)j * d + i] = o;
        else
            out_bf16[(size_t)j * d + i] = f32_to_bf16_rne(o);
    }
}

/* one block per output row, d / (4 NV) threads (at most 1024, whole warps): each thread holds NV
 * float4 pieces (c = threadIdx.x + blockDim.x k) of the row in registers, its weights loaded
 * before the PDL wait, so the row is read once and every load is in flight at once (the block
 * form below loops; docs/cuda.md "Where a step's time goes"). The sum of squares is taken in an
 * order fixed by d alone, so a row's result does not depend on the batch it is in. */
template <int NV>
__global__ void __launch_bounds__(1024)
    rmsnorm_reg_kernel(float *resid, const float *add, const uint32_t *xrow, const float *w,
                       float eps, uint32_t d, float *out_f32, uint16_t *out_bf16)
{
    __shared__ float sh[32];
    const float4 *w4 = reinterpret_cast<const float4 *>(w);
    float4 g[NV], v[NV];
#pragma unroll
    for (int k = 0; k < NV; k++)
        g[k] = w4[threadIdx.x + blockDim.x * k];
    pdl_sync();
    const uint32_t j = blockIdx.x, r = xrow ? xrow[j] : j;
    float4 *x = reinterpret_cast<float4 *>(resid + (size_t)r * d);
#pragma unroll
    for (int k = 0; k < NV; k++)
        v[k] = x[threadIdx.x + blockDim.x * k];
    if (add) {
        const float4 *a = reinterpret_cast<const float4 *>(add + (size_t)r * d);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const uint32_t c = threadIdx.x + blockDim.x * k;
            const float4 b = a[c];
            v[k].x += b.x;
            v[k].y += b.y;
            v[k].z += b.z;
            v[k].w += b.w;
            x[c] = v[k];
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; k++)
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    const float rs = rsqrtf(block_sum(ss, sh) / (float)d + eps);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const uint32_t c = threadIdx.x + blockDim.x * k;
        const float4 o = make_float4(v[k].x * rs * g[k].x, v[k].y * rs * g[k].y,
                                     v[k].z * rs * g[k].z, v[k].w * rs * g[k].w);
        if (out_f32) {
            reinterpret_cast<float4 *>(out_f32 + (size_t)j * d)[c] = o;
        } else {
            const uint2 b =
                make_uint2((uint32_t)f32_to_bf16_rne(o.x) | ((uint32_t)f32_to_bf16_rne(o.y) << 16),
                           (uint32_t)f32_to_bf16_rne(o.z) | ((uint32_t)f32_to_bf16_rne(o.w) << 16));
            reinterpret_cast<uint2 *>(out_bf16 + (size_t)j * d)[c] = b;
        }
    }
}

tdm_status_t tdm_cuda_rmsnorm(float *resid, const float *add, const uint32_t *xrow, const float *w,
                              float eps, uint32_t n, uint32_t d, float *out_f32, uint16_t *out_bf16,
                              cudaStream_t stream)
{
    if ((!out_f32) == (!out_bf16) || (xrow && add))
        return TDM_ERR_INVAL;
    if (n == 0)
        return TDM_OK;
    /* the register form: d / 4 float4 pieces over whole warps of at most 1024 threads, NV
     * pieces a thread; else the looping block form */
    const uintptr_t al = (uintptr_t)resid | (uintptr_t)add | (uintptr_t)w | (uintptr_t)out_f32 |
                         ((uintptr_t)out_bf16 << 1);
    const uint32_t q = d / 4, nv = q <= 1024 ? 1 : q <= 2048 ? 2 : 4;
    const int reg = d % 4 == 0 && al % 16 == 0 && q % nv == 0 && (q / nv) % 32 == 0 &&
                    q / nv <= 1024 && q <= 4096 && !tdm_cuda_narrow_v1();
    if (reg && nv == 1)
        launch(rmsnorm_reg_kernel<1>, n, q, 0, stream, resid, add, xrow, w, eps, d, out_f32,
               out_bf16);
    else if (reg && nv == 2)
        launch(rmsnorm_reg_kernel<2>, n, q / 2, 0, stream, resid, add, xrow, w, eps, d, out_f32,
               out_bf16);
    else if (reg)
        launch(rmsnorm_reg_kernel<4>, n, q / 4, 0, stream, resid, add, xrow, w, eps, d, out_f32,
               out_bf16);
    else
        launch(rmsnorm_kernel, n, 256, 0, stream, resid, add, xrow, w, eps, d, out_f32, out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- small elementwise */

__global__ void to_bf16_kernel(const float *x, size_t count, uint16_t *out)
{
    pdl_sync();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = f32_to_bf16_rne(x[i]);
}

static unsigned grid_for(size_t count, unsigned threads)
{
    size_t b = (count + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 132 * 32 ? 132 * 32 : b);
}

tdm_status_t tdm_cuda_to_bf16(const float *x, size_t count, uint16_t *out, cudaStream_t stream)
{
    if (count == 0)
        return TDM_OK;
    launch(to_bf16_kernel, grid_for(count, 256), 256, 0, stream, x, count, out);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

__global__ void add_bias_kernel(float *y, uint32_t n, uint32_t M, uint32_t ldy, const float *bias)
{
    pdl_sync();
    size_t count = (size_t)n * M;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[(i / M) * ldy + i % M] += bias[i % M];
}

tdm_status_t tdm_cuda_add_bias(float *y, uint32_t n, uint32_t M, uint32_t ldy, const float *bias,
                               cudaStream_t stream)
{
    if ((size_t)n * M == 0)
        return TDM_OK;
    launch(add_bias_kernel, grid_for((size_t)n * M, 256), 256, 0, stream, y, n, M, ldy, bias);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* Qwen3's q_norm/k_norm: one warp per (row, head) over the first H + KV heads of each row of
 * qkv (n, ld), in place: x = x * rsqrt(mean(x^2) + eps) * w, w = qw (hd) for the H q heads, kw
 * (hd) for the KV k heads; v untouched. The CPU reference is rmsnorm_add over n * H rows of hd. */
__global__ void qk_norm_kernel(float *qkv, uint32_t n, uint32_t ld, uint32_t H, uint32_t KV,
                               uint32_t hd, const float *qw, const float *kw, float eps)
{
    pdl_sync();
    const uint32_t lane = threadIdx.x & 31, heads = H + KV;
    const size_t wid = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (wid >= (size_t)n * heads)
        return;
    const uint32_t r = (uint32_t)(wid / heads), h = (uint32_t)(wid % heads);
    float *x = qkv + (size_t)r * ld + (size_t)h * hd;
    const float *w = h < H ? qw : kw;
    float ss = 0.0f;
    for (uint32_t i = lane; i < hd; i += 32)
        ss += x[i] * x[i];
    const float rs = rsqrtf(warp_sum(ss) / (float)hd + eps);
    for (uint32_t i = lane; i < hd; i += 32)
        x[i] = w[i] * (x[i] * rs);
}

tdm_status_t tdm_cuda_qk_norm(float *qkv, uint32_t n, uint32_t ld, uint32_t H, uint32_t KV,
                              uint32_t hd, const float *qw, const float *kw, float eps,
                              cudaStream_t stream)
{
    if (!qkv || !qw || !kw || hd == 0 || (uint64_t)(H + 2 * KV) * hd > ld)
        return TDM_ERR_INVAL;
    const size_t warps = (size_t)n * (H + KV);
    if (warps == 0)
        return TDM_OK;
    launch(qk_norm_kernel, (unsigned)((warps + 7) / 8), 256, 0, stream, qkv, n, ld, H, KV, hd, qw,
           kw, eps);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

__global__ void silu_mul_kernel(const float *gu, uint32_t n, uint32_t I, int il, float *out_f32,
                                uint16_t *out_bf16)
{
    pdl_sync();
    size_t count = (size_t)n * I;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / I, c = i % I;
        const float *g = gu + r * 2 * I + (il ? 2 * c : c);
        float o = silu(g[0]) * g[il ? 1 : I];
        if (out_f32)
            out_f32[i] = o;
        else
            out_bf16[i] = f32_to_bf16_rne(o);
    }
}

/* grid (column blocks, n rows): 4 consecutive columns a thread, no division; I % 4 == 0 */
__global__ void silu_mul4_kernel(const float *gu, uint32_t I, int il, float *out_f32,
                                 uint16_t *out_bf16)
{
    pdl_sync();
    const uint32_t r = blockIdx.y, c = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= I)
        return;
    const float *row = gu + (size_t)r * 2 * I;
    float g[4], u[4];
    if (il) { /* g0 u0 g1 u1 ... */
        const float4 p = *reinterpret_cast<const float4 *>(row + 2 * c);
        const float4 q = *reinterpret_cast<const float4 *>(row + 2 * c + 4);
        g[0] = p.x, u[0] = p.y, g[1] = p.z, u[1] = p.w, g[2] = q.x, u[2] = q.y, g[3] = q.z,
        u[3] = q.w;
    } else {
        const float4 p = *reinterpret_cast<const float4 *>(row + c);
        const float4 q = *reinterpret_cast<const float4 *>(row + I + c);
        g[0] = p.x, g[1] = p.y, g[2] = p.z, g[3] = p.w, u[0] = q.x, u[1] = q.y, u[2] = q.z,
        u[3] = q.w;
    }
    float o[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        o[k] = silu(g[k]) * u[k];
    const size_t i = (size_t)r * I + c;
    if (out_f32) {
        *reinterpret_cast<float4 *>(out_f32 + i) = make_float4(o[0], o[1], o[2], o[3]);
    } else {
        *reinterpret_cast<uint2 *>(out_bf16 + i) =
            make_uint2((uint32_t)f32_to_bf16_rne(o[0]) | ((uint32_t)f32_to_bf16_rne(o[1]) << 16),
                       (uint32_t)f32_to_bf16_rne(o[2]) | ((uint32_t)f32_to_bf16_rne(o[3]) << 16));
    }
}

tdm_status_t tdm_cuda_silu_mul(const float *gu, uint32_t n, uint32_t I, int interleaved,
                               float *out_f32, uint16_t *out_bf16, cudaStream_t stream)
{
    if ((!out_f32) == (!out_bf16))
        return TDM_ERR_INVAL;
    if ((size_t)n * I == 0)
        return TDM_OK;
    if (I % 4 == 0 && n <= 65535 && !tdm_cuda_narrow_v1() &&
        ((uintptr_t)gu | (uintptr_t)out_f32 | ((uintptr_t)out_bf16 << 1)) % 16 == 0) {
        const uint32_t threads = I / 4 < 256 ? (I / 4 + 31) / 32 * 32 : 256;
        launch(silu_mul4_kernel, dim3((I / 4 + threads - 1) / threads, n), threads, 0, stream, gu,
               I, interleaved != 0, out_f32, out_bf16);
        return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
    }
    launch(silu_mul_kernel, grid_for((size_t)n * I, 256), 256, 0, stream, gu, n, I,
           interleaved != 0, out_f32, out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- argmax */

/* one block (1024 threads) per row; ties and NaN: the first index of the largest non-NaN value.
 * Blocks past the m rows only prefetch their part of pf into L2. */
__global__ void argmax_kernel(const float *logits, uint32_t V, int32_t *ret, uint32_t m,
                              tdm_cuda_l2pf_t pf, tdm_cuda_mark_t mk)
{
    __shared__ float sv[32];
    __shared__ int32_t si[32];
    if (blockIdx.x >= m) {
        l2pf_block(pf, blockIdx.x - m, gridDim.x - m);
        return;
    }
    pdl_sync();
    mark_store(mk);
    const float *x = logits + (size_t)blockIdx.x * V;
    float best = -INFINITY;
    int32_t bi = -1;
    for (uint32_t i = threadIdx.x; i < V; i += blockDim.x) {
        float v = x[i];
        if (v > best || (bi < 0 && v == v)) {
            best = v;
            bi = (int32_t)i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ov > best || (ov == best && oi < bi))) {
            best = ov;
            bi = oi;
        }
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) {
        sv[w] = best;
        si[w] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < (int)(blockDim.x >> 5); i++)
            if (si[i] >= 0 && (bi < 0 || sv[i] > best || (sv[i] == best && si[i] < bi))) {
                best = sv[i];
                bi = si[i];
            }
        ret[blockIdx.x] = bi < 0 ? 0 : bi;
    }
}

tdm_status_t tdm_cuda_argmax(const float *logits, uint32_t m, uint32_t V, int32_t *ret_ids,
                             const tdm_cuda_l2pf_t *pf, const tdm_cuda_mark_t *mark,
                             cudaStream_t stream)
{
    if (!tdm_cuda_l2pf_ok(pf))
        return TDM_ERR_INVAL;
    if (m == 0)
        return TDM_OK;
    /* prefetch blocks of 1024 threads: a quarter as many as the attention's 128-thread ones */
    const uint32_t px = l2pf_on(pf) ? TDM_CUDA_L2PF_BLOCKS / 4 : 0;
    const tdm_cuda_l2pf_t none = {NULL, 0, 0, 0}, p = l2pf_on(pf) ? *pf : none;
    const tdm_cuda_mark_t mk = mark ? *mark : tdm_cuda_mark_t{NULL, 0};
    launch(argmax_kernel, m + px, 1024, 0, stream, logits, V, ret_ids, m, p, mk);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

tdm_status_t tdm_cuda_kv_from_buffers(const tdm_kv_buffers_t *b, tdm_cuda_kv_t *ret)
{
    tdm_cuda_kv_t k;
    const tdm_kv_layout_t *l;
    if (!b || !b->layout || !ret)
        return TDM_ERR_INVAL;
    l = b->layout;
    if (l->kv_dtype != TDM_DTYPE_BF16 && l->kv_dtype != TDM_DTYPE_FP8_E4M3)
        return TDM_ERR_UNSUPPORTED;
    memset(&k, 0, sizeof(k));
    k.base = b->base;
    k.layer_bytes = b->layer_bytes;
    for (uint32_t s = 0; s < l->n_sub && s < TDM_KV_SUB_MAX; s++) {
        k.off[s] = b->sub_offset[s];
        k.page_stride[s] = l->sub[s].page_stride;
        k.bpt[s] = l->sub[s].bytes_per_token;
    }
    k.page_size = l->page_size;
    k.kv_heads = l->num_kv_heads;
    k.hd = l->head_dim;
    k.num_pages = b->num_pages;
    k.fp8 = l->kv_dtype == TDM_DTYPE_FP8_E4M3;
    *ret = k;
    return TDM_OK;
}
