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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "cuda_int.h"

#define WARP 32

static __device__ __forceinline__ float bf16_bits_to_f32(uint32_t b)
{
    return __uint_as_float(b << 16);
}

static __device__ __forceinline__ uint16_t f32_to_bf16_rne(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* fp8 e4m3 "fn" encode, the same bit manipulation as tdm_kv_fp8_encode (include/tdm/kv.h). */
static __device__ uint8_t fp8_encode(float x)
{
    uint32_t u = __float_as_uint(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    float a = fabsf(x);
    if (a != a)
        return 0x7f;
    if (a >= TDM_KV_FP8_MAX)
        return (uint8_t)(sign | 0x7e);
    u = __float_as_uint(a);
    int e = (int)(u >> 23) - 127;
    if (e < -6) {
        float m = rintf(a * 512.0f);
        return (uint8_t)(sign | (uint8_t)m);
    }
    uint32_t lsb = (u >> 20) & 1u;
    u += 0x7ffffu + lsb;
    u &= ~0xfffffu;
    e = (int)(u >> 23) - 127;
    uint32_t mant = (u >> 20) & 7u;
    uint32_t code = ((uint32_t)(e + 7) << 3) | mant;
    if (code > 0x7e)
        code = 0x7e;
    return (uint8_t)(sign | code);
}

static __device__ __forceinline__ float fp8_decode(uint32_t v)
{
    uint32_t e = (v >> 3) & 0xfu, m = v & 7u;
    float r;
    if ((v & 0x7f) == 0x7f)
        return __int_as_float(0x7fc00000);
    if (e == 0)
        r = (float)m * (1.0f / 512.0f);
    else
        r = __uint_as_float(((e + 120u) << 23) | (m << 20)); /* (1 + m/8) 2^(e-7) */
    return (v & 0x80) ? -r : r;
}

/* ---------------------------------------------------------------- embedding */

template <typename T> static __device__ __forceinline__ float ld_elem(const T *p, size_t i);
template <> __device__ __forceinline__ float ld_elem<uint16_t>(const uint16_t *p, size_t i)
{
    return bf16_bits_to_f32(p[i]);
}
template <> __device__ __forceinline__ float ld_elem<__half>(const __half *p, size_t i)
{
    return __half2float(p[i]);
}
template <> __device__ __forceinline__ float ld_elem<float>(const float *p, size_t i)
{
    return p[i];
}

/* out (n, d); one block per row */
template <typename T>
__global__ void embed_kernel(const T *table, const int32_t *ids, uint32_t d, float *out)
{
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
        embed_kernel<<<n, 256, 0, stream>>>((const uint16_t *)table, ids, d, out);
        break;
    case TDM_DTYPE_F16:
        embed_kernel<<<n, 256, 0, stream>>>((const __half *)table, ids, d, out);
        break;
    case TDM_DTYPE_F32:
        embed_kernel<<<n, 256, 0, stream>>>((const float *)table, ids, d, out);
        break;
    default:
        return TDM_ERR_UNSUPPORTED;
    }
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- RMSNorm */

static __device__ float block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < nw; i++)
        t += sh[i];
    return t;
}

/* one block per output row */
__global__ void rmsnorm_kernel(float *resid, const float *add, const uint32_t *xrow, const float *w,
                               float eps, uint32_t d, float *out_f32, uint16_t *out_bf16)
{
    __shared__ float sh[32];
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

tdm_status_t tdm_cuda_rmsnorm(float *resid, const float *add, const uint32_t *xrow, const float *w,
                              float eps, uint32_t n, uint32_t d, float *out_f32, uint16_t *out_bf16,
                              cudaStream_t stream)
{
    if ((!out_f32) == (!out_bf16) || (xrow && add))
        return TDM_ERR_INVAL;
    if (n == 0)
        return TDM_OK;
    rmsnorm_kernel<<<n, 256, 0, stream>>>(resid, add, xrow, w, eps, d, out_f32, out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- small elementwise */

__global__ void to_bf16_kernel(const float *x, size_t count, uint16_t *out)
{
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
    to_bf16_kernel<<<grid_for(count, 256), 256, 0, stream>>>(x, count, out);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

__global__ void add_bias_kernel(float *y, uint32_t n, uint32_t M, uint32_t ldy, const float *bias)
{
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
    add_bias_kernel<<<grid_for((size_t)n * M, 256), 256, 0, stream>>>(y, n, M, ldy, bias);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

static __device__ __forceinline__ float silu(float g)
{
    return g / (1.0f + expf(-g));
}

__global__ void silu_mul_kernel(const float *gu, uint32_t n, uint32_t I, float *out_f32,
                                uint16_t *out_bf16)
{
    size_t count = (size_t)n * I;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / I, c = i % I;
        float o = silu(gu[r * 2 * I + c]) * gu[r * 2 * I + I + c];
        if (out_f32)
            out_f32[i] = o;
        else
            out_bf16[i] = f32_to_bf16_rne(o);
    }
}

tdm_status_t tdm_cuda_silu_mul(const float *gu, uint32_t n, uint32_t I, float *out_f32,
                               uint16_t *out_bf16, cudaStream_t stream)
{
    if ((!out_f32) == (!out_bf16))
        return TDM_ERR_INVAL;
    if ((size_t)n * I == 0)
        return TDM_OK;
    silu_mul_kernel<<<grid_for((size_t)n * I, 256), 256, 0, stream>>>(gu, n, I, out_f32, out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- GEMV */

/* 16 bytes of weights widened: 8 bf16/f16 or 4 f32. */
template <typename T> struct wvec;
template <> struct wvec<uint16_t> {
    static constexpr int N = 8;
    static __device__ __forceinline__ void get(uint4 v, float *f)
    {
        uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(u[i] << 16);
            f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        }
    }
};
template <> struct wvec<__half> {
    static constexpr int N = 8;
    static __device__ __forceinline__ void get(uint4 v, float *f)
    {
        uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __half2 h = *reinterpret_cast<__half2 *>(&u[i]);
            float2 t = __half22float2(h);
            f[2 * i] = t.x;
            f[2 * i + 1] = t.y;
        }
    }
};
template <> struct wvec<float> {
    static constexpr int N = 4;
    static __device__ __forceinline__ void get(uint4 v, float *f)
    {
        f[0] = __uint_as_float(v.x);
        f[1] = __uint_as_float(v.y);
        f[2] = __uint_as_float(v.z);
        f[3] = __uint_as_float(v.w);
    }
};

static __device__ __forceinline__ uint4 ld_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

#define GEMV_WARPS 4 /* warps per block */
#define GEMV_RPW 2   /* output rows per warp */
#define GEMV_UNROLL 4

/* Effective input x[k..k+E) of row r (after the fused norm / silu). */
template <int E, int FLAGS>
static __device__ __forceinline__ void load_x(const float *xr, uint32_t k, uint32_t K,
                                              const float *norm_w, float rs, float *xv)
{
    if (FLAGS & TDM_GEMV_SILU) {
#pragma unroll
        for (int e = 0; e < E; e += 4) {
            float4 g = __ldg(reinterpret_cast<const float4 *>(xr + k + e));
            float4 u = __ldg(reinterpret_cast<const float4 *>(xr + K + k + e));
            xv[e] = silu(g.x) * u.x;
            xv[e + 1] = silu(g.y) * u.y;
            xv[e + 2] = silu(g.z) * u.z;
            xv[e + 3] = silu(g.w) * u.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < E; e += 4) {
            float4 a = __ldg(reinterpret_cast<const float4 *>(xr + k + e));
            xv[e] = a.x;
            xv[e + 1] = a.y;
            xv[e + 2] = a.z;
            xv[e + 3] = a.w;
        }
        if (FLAGS & TDM_GEMV_NORM) {
#pragma unroll
            for (int e = 0; e < E; e += 4) {
                float4 w = __ldg(reinterpret_cast<const float4 *>(norm_w + k + e));
                xv[e] = xv[e] * rs * w.x;
                xv[e + 1] = xv[e + 1] * rs * w.y;
                xv[e + 2] = xv[e + 2] * rs * w.z;
                xv[e + 3] = xv[e + 3] * rs * w.w;
            }
        }
    }
}

/* grid (ceil(M / (GEMV_WARPS * GEMV_RPW)), ceil(n / NR)); block GEMV_WARPS warps.
 * Warp w of block b computes output rows m0 = (b * GEMV_WARPS + w) * GEMV_RPW + {0, 1} for the
 * NR input rows r0 = blockIdx.y * NR + {0..NR). */
template <typename T, int NR, int FLAGS>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(const float *__restrict__ x, uint32_t ldx, const uint32_t *__restrict__ xrow,
                uint32_t n, uint32_t K, uint32_t M, const T *__restrict__ W,
                const float *__restrict__ bias, const float *__restrict__ norm_w, float eps,
                float *__restrict__ y, uint32_t ldy)
{
    constexpr int E = wvec<T>::N;
    __shared__ float s_rs[NR];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t r0 = blockIdx.y * NR;
    const uint32_t m0 = (blockIdx.x * GEMV_WARPS + warp) * GEMV_RPW;
    const float *xr[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        uint32_t rr = r0 + r < n ? r0 + r : n - 1; /* clamp: padding rows compute, never store */
        xr[r] = x + (size_t)(xrow ? xrow[rr] : rr) * ldx;
    }
    if (FLAGS & TDM_GEMV_NORM) {
        /* rsqrt(mean(x^2) + eps) of each of the NR rows, the whole block at once with float4
         * loads all issued before the sums (a serial per-warp loop here was latency-bound:
         * ~30 us per launch at K = 2048) */
        __shared__ float s_part[GEMV_WARPS][NR];
        float ss[NR];
#pragma unroll
        for (int r = 0; r < NR; r++)
            ss[r] = 0.0f;
        for (uint32_t k = threadIdx.x * 4; k < K; k += GEMV_WARPS * 32 * 4) {
            float4 v[NR];
#pragma unroll
            for (int r = 0; r < NR; r++)
                v[r] = __ldg(reinterpret_cast<const float4 *>(xr[r] + k));
#pragma unroll
            for (int r = 0; r < NR; r++)
                ss[r] += v[r].x * v[r].x + v[r].y * v[r].y + v[r].z * v[r].z + v[r].w * v[r].w;
        }
#pragma unroll
        for (int r = 0; r < NR; r++) {
            float t = warp_sum(ss[r]);
            if (lane == 0)
                s_part[warp][r] = t;
        }
        __syncthreads();
        if (threadIdx.x < NR) {
            float t = 0.0f;
            for (int w = 0; w < GEMV_WARPS; w++)
                t += s_part[w][threadIdx.x];
            s_rs[threadIdx.x] = rsqrtf(t / (float)K + eps);
        }
        __syncthreads();
    }
    if (m0 >= M)
        return;
    float rs[NR];
#pragma unroll
    for (int r = 0; r < NR; r++)
        rs[r] = (FLAGS & TDM_GEMV_NORM) ? s_rs[r] : 1.0f;
    const bool two = m0 + 1 < M;
    const T *w0 = W + (size_t)m0 * K;
    const T *w1 = W + (size_t)(two ? m0 + 1 : m0) * K;
    float acc0[NR], acc1[NR];
#pragma unroll
    for (int r = 0; r < NR; r++)
        acc0[r] = acc1[r] = 0.0f;

    const uint32_t step = 32u * E;
    uint32_t k = (uint32_t)lane * E;
    for (; k + (GEMV_UNROLL - 1) * step < K; k += GEMV_UNROLL * step) {
        uint4 a[GEMV_UNROLL], b[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            a[u] = ld_stream(w0 + k + u * step);
            b[u] = ld_stream(w1 + k + u * step);
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            float fa[E], fb[E];
            wvec<T>::get(a[u], fa);
            wvec<T>::get(b[u], fb);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                float xv[E];
                load_x<E, FLAGS>(xr[r], k + u * step, K, norm_w, rs[r], xv);
#pragma unroll
                for (int e = 0; e < E; e++) {
                    acc0[r] = fmaf(fa[e], xv[e], acc0[r]);
                    acc1[r] = fmaf(fb[e], xv[e], acc1[r]);
                }
            }
        }
    }
    for (; k < K; k += step) {
        float fa[E], fb[E];
        wvec<T>::get(ld_stream(w0 + k), fa);
        wvec<T>::get(ld_stream(w1 + k), fb);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            float xv[E];
            load_x<E, FLAGS>(xr[r], k, K, norm_w, rs[r], xv);
#pragma unroll
            for (int e = 0; e < E; e++) {
                acc0[r] = fmaf(fa[e], xv[e], acc0[r]);
                acc1[r] = fmaf(fb[e], xv[e], acc1[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float s0 = warp_sum(acc0[r]), s1 = warp_sum(acc1[r]);
        if (lane == 0 && r0 + r < n) {
            float *yr = y + (size_t)(r0 + r) * ldy;
            if (FLAGS & TDM_GEMV_ACCUM) {
                yr[m0] += s0;
                if (two)
                    yr[m0 + 1] += s1;
            } else {
                yr[m0] = s0 + (bias ? bias[m0] : 0.0f);
                if (two)
                    yr[m0 + 1] = s1 + (bias ? bias[m0 + 1] : 0.0f);
            }
        }
    }
}

template <typename T, int NR, int FLAGS>
static void gemv_launch(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    dim3 grid((a->M + GEMV_WARPS * GEMV_RPW - 1) / (GEMV_WARPS * GEMV_RPW), (a->n + NR - 1) / NR);
    gemv_kernel<T, NR, FLAGS><<<grid, GEMV_WARPS * 32, 0, s>>>(a->x, a->ldx, a->xrow, a->n, a->K,
                                                               a->M, (const T *)a->w, a->bias,
                                                               a->norm_w, a->eps, a->y, a->ldy);
}

template <typename T, int NR> static int gemv_flags(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    switch (a->flags) {
    case 0:
        gemv_launch<T, NR, 0>(a, s);
        return 1;
    case TDM_GEMV_NORM:
        gemv_launch<T, NR, TDM_GEMV_NORM>(a, s);
        return 1;
    case TDM_GEMV_ACCUM:
        gemv_launch<T, NR, TDM_GEMV_ACCUM>(a, s);
        return 1;
    case TDM_GEMV_SILU | TDM_GEMV_ACCUM:
        gemv_launch<T, NR, TDM_GEMV_SILU | TDM_GEMV_ACCUM>(a, s);
        return 1;
    case TDM_GEMV_SILU:
        gemv_launch<T, NR, TDM_GEMV_SILU>(a, s);
        return 1;
    }
    return 0;
}

template <typename T> static int gemv_rows(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    /* NR = rows sharing each weight load; beyond 8, more row groups (grid.y) */
    if (a->n == 1)
        return gemv_flags<T, 1>(a, s);
    if (a->n == 2)
        return gemv_flags<T, 2>(a, s);
    if (a->n <= 4)
        return gemv_flags<T, 4>(a, s);
    return gemv_flags<T, 8>(a, s);
}

tdm_status_t tdm_cuda_gemv(const tdm_cuda_gemv_t *a, cudaStream_t stream)
{
    int ok;
    if (!a || !a->x || !a->w || !a->y || a->K % 8 != 0 || a->K == 0 || a->M == 0 ||
        ((a->flags & TDM_GEMV_NORM) && !a->norm_w) ||
        ((a->flags & TDM_GEMV_SILU) && (a->flags & TDM_GEMV_NORM)))
        return TDM_ERR_INVAL;
    if (a->n == 0)
        return TDM_OK;
    switch (a->wdtype) {
    case TDM_DTYPE_BF16:
        ok = gemv_rows<uint16_t>(a, stream);
        break;
    case TDM_DTYPE_F16:
        ok = gemv_rows<__half>(a, stream);
        break;
    case TDM_DTYPE_F32:
        ok = gemv_rows<float>(a, stream);
        break;
    default:
        return TDM_ERR_UNSUPPORTED;
    }
    if (!ok)
        return TDM_ERR_INVAL;
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
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

static __device__ __forceinline__ uint8_t *kv_slot(const tdm_cuda_kv_t &kv, uint32_t layer, int sub,
                                                   uint32_t page, uint32_t slot)
{
    return kv.base + (uint64_t)layer * kv.layer_bytes + kv.off[sub] +
           (uint64_t)page * kv.page_stride[sub] + (uint64_t)slot * kv.bpt[sub];
}

/* Write one head's hd values (lane holds elements lane + 32 j) to the cache. */
static __device__ void write_head(const tdm_cuda_kv_t &kv, uint32_t layer, int sub, uint32_t page,
                                  uint32_t slot, uint32_t head, const float *v, int lane)
{
    const uint32_t hd = kv.hd;
    uint8_t *dst = kv_slot(kv, layer, sub, page, slot);
    if (!kv.fp8) {
        uint16_t *d16 = reinterpret_cast<uint16_t *>(dst) + (size_t)head * hd;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            uint32_t i = lane + 32u * j;
            if (i < hd)
                d16[i] = f32_to_bf16_rne(v[j]);
        }
        return;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        uint32_t i = lane + 32u * j;
        if (i < hd && fabsf(v[j]) > amax) /* NaN never raises amax, like the CPU loop */
            amax = fabsf(v[j]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float t = __shfl_xor_sync(0xffffffffu, amax, o);
        amax = t > amax ? t : amax;
    }
    float scale = (!(amax > 0.0f) || isinf(amax)) ? 1.0f : amax / TDM_KV_FP8_MAX;
    uint8_t *d8 = dst + (size_t)head * hd;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        uint32_t i = lane + 32u * j;
        if (i < hd)
            d8[i] = fp8_encode(v[j] / scale);
    }
    if (lane == 0) {
        int ssub = sub == TDM_KV_SUB_K ? TDM_KV_SUB_K_SCALE : TDM_KV_SUB_V_SCALE;
        reinterpret_cast<float *>(kv_slot(kv, layer, ssub, page, slot))[head] = scale;
    }
}

/* one block (4 warps) per row; units: H q heads, KV k heads, KV v heads, one warp per unit */
__global__ void rope_kv_kernel(float *qkv, uint32_t H, const float *inv_freq, tdm_cuda_kv_t kv,
                               uint32_t layer, tdm_cuda_rows_t rows)
{
    const uint32_t r = blockIdx.x, KV = kv.kv_heads, hd = kv.hd, half = hd / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const uint32_t ld = (H + 2 * KV) * hd, pos = rows.pos[r];
    const bool active = r < *rows.nactive;
    float *row = qkv + (size_t)r * ld;
    for (uint32_t u = warp; u < H + 2 * KV; u += nw) {
        float *x = row + (size_t)u * hd;
        float v[16];
        if (u < H + KV) {
            /* rotate_half: lane takes pairs (i, i + hd/2), i = lane + 32 j */
#pragma unroll
            for (int j = 0; j < 8; j++) {
                uint32_t i = lane + 32u * j;
                if (i < half) {
                    float a = (float)pos * inv_freq[i], s, c;
                    sincosf(a, &s, &c);
                    float x0 = x[i], x1 = x[i + half];
                    float o0 = x0 * c - x1 * s, o1 = x1 * c + x0 * s;
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
    rope_kv_kernel<<<n, 128, 0, stream>>>(qkv, H, inv_freq, *kv, layer, *rows);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- attention */

#define ATT_WARPS 4

/* grid (n, KV, splits), block ATT_WARPS warps. The block serves query heads [kvh*G, kvh*G + G)
 * of row r over its split of positions [0, pos]; each warp walks 32-position tiles (lane =
 * position for q·k, lane = dimension for p·v) with an online softmax, then the warps merge.
 * DPL = dimensions per lane (hd <= 32 DPL). Each lane resolves its position's page once; p·v
 * takes the V row addresses from the owning lanes by shuffle, ATT_VQ rows in flight. */
template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_split_kernel(const float *qkv, uint32_t H, tdm_cuda_kv_t kv, uint32_t layer,
                      tdm_cuda_rows_t rows, float *part_o, float *part_ml)
{
    const uint32_t r = blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z, S = gridDim.z;
    constexpr int ATT_VQ = DPL <= 2 ? 8 : 4; /* V rows in flight per lane in p·v */
    const uint32_t KV = kv.kv_heads, hd = kv.hd, G = H / KV;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ float sq[TDM_CUDA_MAX_GROUP * TDM_CUDA_MAX_HD];
    __shared__ float sm[ATT_WARPS][TDM_CUDA_MAX_GROUP], sl[ATT_WARPS][TDM_CUDA_MAX_GROUP];
    __shared__ float so[ATT_WARPS][TDM_CUDA_MAX_HD];
    const size_t pidx = ((size_t)r * H + kvh * G) * S + sp; /* head g: + g * S */

    if (r >= *rows.nactive) {
        for (uint32_t g = 0; g < G; g++)
            for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
                part_o[(pidx + (size_t)g * S) * hd + i] = 0.0f;
        if (threadIdx.x < G) {
            part_ml[2 * (pidx + (size_t)threadIdx.x * S)] = -INFINITY;
            part_ml[2 * (pidx + (size_t)threadIdx.x * S) + 1] = 0.0f;
        }
        return;
    }
    const uint32_t len = rows.pos[r] + 1;
    uint32_t chunk = (len + S - 1) / S;
    chunk = (chunk + 31) & ~31u;
    const uint32_t beg = sp * chunk, end = min(len, beg + chunk);
    const float scale = rsqrtf((float)hd);
    const float *q = qkv + (size_t)r * (H + 2 * KV) * hd + (size_t)kvh * G * hd;
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x)
        sq[i] = q[i];
    __syncthreads();

    float m[TDM_CUDA_MAX_GROUP], l[TDM_CUDA_MAX_GROUP], acc[TDM_CUDA_MAX_GROUP][DPL];
#pragma unroll
    for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < DPL; j++)
            acc[g][j] = 0.0f;
    }
    const uint32_t *pt = rows.pages + rows.ptoff[r];
    const size_t esz = kv.fp8 ? 1 : 2;
    for (uint32_t tile = beg + 32u * warp; tile < end; tile += 32u * ATT_WARPS) {
        const uint32_t t = tile + lane;
        const bool valid = t < end;
        float s[TDM_CUDA_MAX_GROUP];
        unsigned long long vaddr = 0;
        float vscale = 1.0f;
#pragma unroll
        for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++)
            s[g] = 0.0f;
        if (valid) {
            uint32_t page = pt[t / kv.page_size], slot = t % kv.page_size;
            const uint8_t *krow = kv_slot(kv, layer, TDM_KV_SUB_K, page, slot);
            vaddr = (unsigned long long)(kv_slot(kv, layer, TDM_KV_SUB_V, page, slot) +
                                         (size_t)kvh * hd * esz);
            if (!kv.fp8) {
                const uint4 *k4 = reinterpret_cast<const uint4 *>(
                    reinterpret_cast<const uint16_t *>(krow) + (size_t)kvh * hd);
                for (uint32_t c = 0; c < hd / 8; c++) {
                    float kf[8];
                    wvec<uint16_t>::get(k4[c], kf);
#pragma unroll
                    for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++)
                        if ((uint32_t)g < G)
#pragma unroll
                            for (int e = 0; e < 8; e++)
                                s[g] = fmaf(sq[g * hd + c * 8 + e], kf[e], s[g]);
                }
            } else {
                const float ks = reinterpret_cast<const float *>(
                    kv_slot(kv, layer, TDM_KV_SUB_K_SCALE, page, slot))[kvh];
                vscale = reinterpret_cast<const float *>(
                    kv_slot(kv, layer, TDM_KV_SUB_V_SCALE, page, slot))[kvh];
                const uint4 *k4 = reinterpret_cast<const uint4 *>(krow + (size_t)kvh * hd);
                for (uint32_t c = 0; c < hd / 16; c++) {
                    uint4 raw = k4[c];
                    uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
                    float kf[16];
#pragma unroll
                    for (int e = 0; e < 16; e++)
                        kf[e] = fp8_decode((u[e / 4] >> (8 * (e % 4))) & 0xffu) * ks;
#pragma unroll
                    for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++)
                        if ((uint32_t)g < G)
#pragma unroll
                            for (int e = 0; e < 16; e++)
                                s[g] = fmaf(sq[g * hd + c * 16 + e], kf[e], s[g]);
                }
            }
        }
#pragma unroll
        for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
            if ((uint32_t)g >= G)
                break;
            float sc = valid ? s[g] * scale : -INFINITY;
            float mnew = fmaxf(m[g], warp_max(sc)); /* lane 0 is always valid: finite */
            float p = valid ? expf(sc - mnew) : 0.0f;
            float alpha = expf(m[g] - mnew);
            l[g] = l[g] * alpha + warp_sum(p);
#pragma unroll
            for (int j = 0; j < DPL; j++)
                acc[g][j] *= alpha;
            m[g] = mnew;
            s[g] = p;
        }
        const uint32_t nvalid = min(32u, end - tile);
        for (uint32_t j0 = 0; j0 < nvalid; j0 += ATT_VQ) {
            float vd[ATT_VQ][DPL];
#pragma unroll
            for (int qq = 0; qq < ATT_VQ; qq++) {
                unsigned long long va = __shfl_sync(0xffffffffu, vaddr, (j0 + qq) & 31);
                float vs = __shfl_sync(0xffffffffu, vscale, (j0 + qq) & 31);
#pragma unroll
                for (int j = 0; j < DPL; j++) {
                    uint32_t d = lane + 32u * j;
                    vd[qq][j] = 0.0f;
                    if (j0 + qq < nvalid && d < hd)
                        vd[qq][j] =
                            kv.fp8 ? fp8_decode(reinterpret_cast<const uint8_t *>(va)[d]) * vs
                                   : bf16_bits_to_f32(reinterpret_cast<const uint16_t *>(va)[d]);
                }
            }
#pragma unroll
            for (int qq = 0; qq < ATT_VQ; qq++) {
#pragma unroll
                for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
                    if ((uint32_t)g >= G)
                        break;
                    /* p of an invalid lane is 0, so positions past nvalid add nothing */
                    float pj = __shfl_sync(0xffffffffu, s[g], (j0 + qq) & 31);
#pragma unroll
                    for (int j = 0; j < DPL; j++)
                        acc[g][j] = fmaf(pj, vd[qq][j], acc[g][j]);
                }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
        if (lane == 0 && (uint32_t)g < G) {
            sm[warp][g] = m[g];
            sl[warp][g] = l[g];
        }
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
        if ((uint32_t)g >= G)
            break;
        float M = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++)
            M = fmaxf(M, sm[w][g]);
        float f = (sm[warp][g] == -INFINITY) ? 0.0f : expf(sm[warp][g] - M);
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            uint32_t d = lane + 32u * j;
            if (d < hd)
                so[warp][d] = acc[g][j] * f;
        }
        __syncthreads();
        float *po = part_o + (pidx + (size_t)g * S) * hd;
        for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++)
                o += so[w][d];
            po[d] = o;
        }
        if (threadIdx.x == 0) {
            float L = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++)
                L += (sm[w][g] == -INFINITY) ? 0.0f : sl[w][g] * expf(sm[w][g] - M);
            part_ml[2 * (pidx + (size_t)g * S)] = M;
            part_ml[2 * (pidx + (size_t)g * S) + 1] = L;
        }
        __syncthreads();
    }
}

/* grid (n, H); block hd threads (rounded to 32): merge the splits, out = O / L */
__global__ void attn_combine_kernel(uint32_t H, uint32_t hd, uint32_t S, const float *part_o,
                                    const float *part_ml, float *out, uint16_t *out_bf16)
{
    const size_t base = ((size_t)blockIdx.x * H + blockIdx.y) * S;
    float M = -INFINITY;
    for (uint32_t s = 0; s < S; s++)
        M = fmaxf(M, part_ml[2 * (base + s)]);
    float L = 0.0f;
    for (uint32_t s = 0; s < S; s++) {
        float ms = part_ml[2 * (base + s)];
        if (ms != -INFINITY)
            L += part_ml[2 * (base + s) + 1] * expf(ms - M);
    }
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (uint32_t s = 0; s < S; s++) {
            float ms = part_ml[2 * (base + s)];
            if (ms != -INFINITY)
                o += part_o[(base + s) * hd + d] * expf(ms - M);
        }
        float v = L > 0.0f ? o / L : 0.0f;
        size_t oi = ((size_t)blockIdx.x * H + blockIdx.y) * hd + d;
        out[oi] = v;
        if (out_bf16)
            out_bf16[oi] = f32_to_bf16_rne(v);
    }
}

tdm_status_t tdm_cuda_attention(const float *qkv, uint32_t n, uint32_t H, const tdm_cuda_kv_t *kv,
                                uint32_t layer, const tdm_cuda_rows_t *rows, uint32_t splits,
                                float *part_o, float *part_ml, float *out, uint16_t *out_bf16,
                                cudaStream_t stream)
{
    uint32_t KV = kv->kv_heads, hd = kv->hd;
    if (KV == 0 || H % KV || H / KV > TDM_CUDA_MAX_GROUP || hd > TDM_CUDA_MAX_HD || hd % 16 ||
        splits == 0 || splits > TDM_CUDA_MAX_SPLITS)
        return TDM_ERR_UNSUPPORTED;
    if (n == 0)
        return TDM_OK;
    dim3 grid(n, KV, splits);
    if (hd <= 32)
        attn_split_kernel<1>
            <<<grid, ATT_WARPS * 32, 0, stream>>>(qkv, H, *kv, layer, *rows, part_o, part_ml);
    else if (hd <= 64)
        attn_split_kernel<2>
            <<<grid, ATT_WARPS * 32, 0, stream>>>(qkv, H, *kv, layer, *rows, part_o, part_ml);
    else if (hd <= 128)
        attn_split_kernel<4>
            <<<grid, ATT_WARPS * 32, 0, stream>>>(qkv, H, *kv, layer, *rows, part_o, part_ml);
    else
        attn_split_kernel<8>
            <<<grid, ATT_WARPS * 32, 0, stream>>>(qkv, H, *kv, layer, *rows, part_o, part_ml);
    unsigned th = (hd + 31) / 32 * 32;
    attn_combine_kernel<<<dim3(n, H), th, 0, stream>>>(H, hd, splits, part_o, part_ml, out,
                                                       out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- argmax */

/* one block (1024 threads) per row; ties and NaN: the first index of the largest non-NaN value */
__global__ void argmax_kernel(const float *logits, uint32_t V, int32_t *ret)
{
    __shared__ float sv[32];
    __shared__ int32_t si[32];
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
                             cudaStream_t stream)
{
    if (m == 0)
        return TDM_OK;
    argmax_kernel<<<m, 1024, 0, stream>>>(logits, V, ret_ids);
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
