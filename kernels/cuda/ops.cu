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

#include <cooperative_groups.h>
#include <utility>

#include "cuda_int.h"

#define WARP 32

namespace cg = cooperative_groups;

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

/* ---------------------------------------------------------------- launches (PDL) */

static int g_pdl = 0;

void tdm_cuda_set_pdl(int on)
{
    g_pdl = on != 0;
}

/* Wait until the kernels this one depends on have completed and their writes are visible (a no-op
 * when launched without the PDL attribute); then let the next kernel launch once every block of
 * this one has started (it waits in turn before reading what this one writes). */
static __device__ __forceinline__ void pdl_wait()
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

static __device__ __forceinline__ void pdl_trigger()
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* run 12: 1 = every kernel lets its dependents launch before it waits (they still wait for it
 * to complete before they read what it writes); 0 = after (the default). */
__constant__ int c_pdl_early;

static __device__ __forceinline__ void pdl_sync()
{
    if (c_pdl_early) {
        pdl_trigger();
        pdl_wait();
    } else {
        pdl_wait();
        pdl_trigger();
    }
}

tdm_status_t tdm_cuda_set_pdl_early(int on, cudaStream_t s)
{
    static int cur = -1;
    const int v = on != 0;
    if (v == cur)
        return TDM_OK;
    if (cudaMemcpyToSymbolAsync(c_pdl_early, &v, sizeof v, 0, cudaMemcpyHostToDevice, s) !=
            cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
        return TDM_ERR_CUDA;
    cur = v;
    return TDM_OK;
}

template <typename... KArgs, typename... Args>
static void launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = g_pdl ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k, args...); /* errors surface through cudaGetLastError */
}

/* launch() for more than 48 KB of dynamic shared memory: the kernel's limit raised first (every
 * launch: not a stream operation, allowed during graph capture; a launch over the device's limit
 * fails and surfaces through cudaGetLastError). */
template <typename... KArgs, typename... Args>
static void launch_big(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       Args... args)
{
    /* the static shared memory counts too: raise it whenever the dynamic part is large */
    if (smem > 32u * 1024)
        (void)cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    launch(k, grid, block, smem, s, args...);
}

/* launch() with thread-block clusters of (1, 1, clz) blocks (clz 1: none). */
template <typename... KArgs, typename... Args>
static void launch_cl(void (*k)(KArgs...), dim3 grid, dim3 block, unsigned clz, cudaStream_t s,
                      Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    unsigned na = 0;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    if (g_pdl) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (clz > 1) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = 1;
        at[na].val.clusterDim.y = 1;
        at[na++].val.clusterDim.z = clz;
    }
    cfg.attrs = at;
    cfg.numAttrs = na;
    (void)cudaLaunchKernelEx(&cfg, k, args...);
}

/* ---------------------------------------------------------------- L2 prefetch (cuda_int.h) */

#define L2PF_CHUNK 8192u /* bytes per cp.async.bulk.prefetch instruction */

int tdm_cuda_l2pf_ok(const tdm_cuda_l2pf_t *pf)
{
    return !pf || pf->bytes == 0 ||
           (pf->p && (uintptr_t)pf->p % 16 == 0 && pf->bytes % 16 == 0 && pf->op >= 0 &&
            pf->op <= 3);
}

static int l2pf_on(const tdm_cuda_l2pf_t *pf)
{
    return pf && pf->bytes != 0;
}

/* Bytes [beg, end) of p (both multiples of 16, beg of 256) into L2 from thread tid of nthr:
 * fire and forget (no result, nothing waits for the lines). */
static __device__ __forceinline__ void l2pf_range(const uint8_t *p, uint64_t beg, uint64_t end,
                                                  uint32_t tid, uint32_t nthr, int op)
{
    const uint64_t g = (uint64_t)__cvta_generic_to_global(p);
    if (op & 2) {
        for (uint64_t o = beg + (uint64_t)tid * 128; o < end; o += (uint64_t)nthr * 128) {
            if (op & 1)
                asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(g + o) : "memory");
            else
                asm volatile("prefetch.global.L2 [%0];" ::"l"(g + o) : "memory");
        }
        return;
    }
    uint64_t pol = 0;
    if (op & 1)
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    for (uint64_t o = beg + (uint64_t)tid * L2PF_CHUNK; o < end; o += (uint64_t)nthr * L2PF_CHUNK) {
        const uint32_t sz = (uint32_t)min((uint64_t)L2PF_CHUNK, end - o);
        if (op & 1)
            asm volatile(
                "cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(g + o),
                "r"(sz), "l"(pol)
                : "memory");
        else
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(g + o), "r"(sz)
                         : "memory");
    }
}

/* Part `part` of `parts` equal 256-byte-aligned slices of pf's range, from thread tid of nthr. */
static __device__ __forceinline__ void l2pf_part(const tdm_cuda_l2pf_t &pf, uint32_t part,
                                                 uint32_t parts, uint32_t tid, uint32_t nthr)
{
    const uint64_t per = ((pf.bytes + parts - 1) / parts + 255) & ~(uint64_t)255;
    const uint64_t beg = (uint64_t)part * per;
    if (beg < pf.bytes)
        l2pf_range(static_cast<const uint8_t *>(pf.p), beg, min(pf.bytes, beg + per), tid, nthr,
                   pf.op);
}

/* A prefetch block of a latency-bound grid: early, before the PDL wait (the previous kernel may
 * still stream), or after it (the HBM is idle while this grid's own blocks run). */
static __device__ __forceinline__ void l2pf_block(const tdm_cuda_l2pf_t &pf, uint32_t part,
                                                  uint32_t parts)
{
    if (!pf.early) {
        pdl_sync();
    }
    l2pf_part(pf, part, parts, threadIdx.x, blockDim.x);
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

tdm_status_t tdm_cuda_rmsnorm(float *resid, const float *add, const uint32_t *xrow, const float *w,
                              float eps, uint32_t n, uint32_t d, float *out_f32, uint16_t *out_bf16,
                              cudaStream_t stream)
{
    if ((!out_f32) == (!out_bf16) || (xrow && add))
        return TDM_ERR_INVAL;
    if (n == 0)
        return TDM_OK;
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

static __device__ __forceinline__ float silu(float g)
{
    return g / (1.0f + expf(-g));
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

tdm_status_t tdm_cuda_silu_mul(const float *gu, uint32_t n, uint32_t I, int interleaved,
                               float *out_f32, uint16_t *out_bf16, cudaStream_t stream)
{
    if ((!out_f32) == (!out_bf16))
        return TDM_ERR_INVAL;
    if ((size_t)n * I == 0)
        return TDM_OK;
    launch(silu_mul_kernel, grid_for((size_t)n * I, 256), 256, 0, stream, gu, n, I,
           interleaved != 0, out_f32, out_bf16);
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

static __device__ __forceinline__ void cp_async16(void *smem, const void *g, uint32_t bytes)
{
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(g), "r"(bytes)
                 : "memory");
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

/* KS 1: grid (ceil(M / (GEMV_WARPS * GEMV_RPW)), ceil(n / NR)); block GEMV_WARPS warps.
 * Warp w of block b computes output rows m0 = (b * GEMV_WARPS + w) * GEMV_RPW + {0, 1} for the
 * NR input rows r0 = blockIdx.y * NR + {0..NR).
 * KS = GEMV_WARPS (split K): grid (ceil(M / GEMV_RPW), ceil(n / NR)); the block's warps share the
 * rows m0 = b * GEMV_RPW + {0, 1}, warp w a quarter of K, summed in shared memory in warp order.
 * For the small matrices (o, down at bs1): 4x the warps, each with a quarter of the serial
 * weight stream. */
template <typename T, int NR, int FLAGS, int KS>
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
    const uint32_t m0 =
        KS == 1 ? (blockIdx.x * GEMV_WARPS + warp) * GEMV_RPW : blockIdx.x * GEMV_RPW;
    const bool two = m0 + 1 < M;
    const T *w0 = W + (size_t)(m0 < M ? m0 : 0) * K;
    const T *w1 = W + (size_t)(two ? m0 + 1 : (m0 < M ? m0 : 0)) * K;
    const uint32_t step = 32u * E;
    const uint32_t kchunk = KS == 1 ? K : ((K + KS - 1) / KS + 7) / 8 * 8;
    const uint32_t kbeg = KS == 1 ? 0 : min(K, warp * kchunk), kend = min(K, kbeg + kchunk);
    uint32_t k = kbeg + (uint32_t)lane * E;
    /* the first GEMV_UNROLL weight vectors of both rows are loaded before waiting for the
     * previous kernel: weights never depend on it, so with PDL they stream during its tail */
    bool have = k + (GEMV_UNROLL - 1) * step < kend;
    uint4 a[GEMV_UNROLL], b[GEMV_UNROLL];
    if (have && m0 < M) {
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            a[u] = ld_stream(w0 + k + u * step);
            b[u] = ld_stream(w1 + k + u * step);
        }
    }
    pdl_sync();
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
        for (uint32_t kk = threadIdx.x * 4; kk < K; kk += GEMV_WARPS * 32 * 4) {
            float4 v[NR];
#pragma unroll
            for (int r = 0; r < NR; r++)
                v[r] = __ldg(reinterpret_cast<const float4 *>(xr[r] + kk));
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
    float acc0[NR], acc1[NR];
#pragma unroll
    for (int r = 0; r < NR; r++)
        acc0[r] = acc1[r] = 0.0f;

    while (have) {
        /* next batch in flight while this one is multiplied */
        const uint32_t kn = k + GEMV_UNROLL * step;
        const bool nhave = kn + (GEMV_UNROLL - 1) * step < kend;
        uint4 na[GEMV_UNROLL], nb[GEMV_UNROLL];
        if (nhave) {
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                na[u] = ld_stream(w0 + kn + u * step);
                nb[u] = ld_stream(w1 + kn + u * step);
            }
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
        if (nhave) {
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                a[u] = na[u];
                b[u] = nb[u];
            }
        }
        k = kn;
        have = nhave;
    }
    for (; k < kend; k += step) {
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
    if (KS > 1) {
        __shared__ float s_red[KS][NR][2];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            float s0 = warp_sum(acc0[r]), s1 = warp_sum(acc1[r]);
            if (lane == 0) {
                s_red[warp][r][0] = s0;
                s_red[warp][r][1] = s1;
            }
        }
        __syncthreads();
        if (warp != 0)
            return;
#pragma unroll
        for (int r = 0; r < NR; r++) {
            acc0[r] = acc1[r] = 0.0f;
            if (lane == 0)
                for (int w = 0; w < KS; w++) {
                    acc0[r] += s_red[w][r][0];
                    acc1[r] += s_red[w][r][1];
                }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float s0 = KS > 1 ? acc0[r] : warp_sum(acc0[r]), s1 = KS > 1 ? acc1[r] : warp_sum(acc1[r]);
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

/* One-row streaming GEMV (ksplit 2): the rows are split over every warp of the grid in contiguous
 * runs, and since the rows of W are contiguous a warp's weights are one contiguous span read at
 * lane-consecutive 16-byte steps; with K % (32 * E) == 0 each step lies in one row for the whole
 * warp, so a row ends on a warp-uniform step and is reduced by shuffles with no second pass.
 * G1_U loads per lane (DEEP: 2 G1_U) are issued before the PDL wait and every batch of G1_U is
 * in flight while the previous one is multiplied (8..16 16-byte loads per lane). x, after the fused
 * RMSNorm or SiLU·mul, is staged once per block in shared memory (V2 without SiLU: by cp.async,
 * every piece in flight at once). Grid: about 2 blocks per SM (the rows per warp rounded up first
 * so every warp has the same number of rows). Run 11's epilogues (V2 only): SWIGLU (gate|up rows
 * interleaved, each output pair's silu(gate) * up written when its up row completes) and AM (the
 * argmax of y: each warp's candidate, the last block merges; am_finish). */
#define G1_WARPS 8
/* Argmax candidates of a warp / of the whole grid: (v, i) beats (best, bi) when i is a real index
 * and bi is none, v is larger, or v ties and i is smaller (argmax_kernel's rule: the first index
 * of the largest non-NaN value; NaN never beats a number). */
static __device__ __forceinline__ void am_merge(float v, int32_t i, float &best, int32_t &bi)
{
    if (i >= 0 && (bi < 0 || v > best || (v == best && i < bi))) {
        best = v;
        bi = i;
    }
}

/* The grid's argmax from each warp's candidate: every block stores its warps' (best, index) in
 * ws, then counts itself in; the last block in merges all nw candidates in a fixed order and
 * writes *out, then re-arms the counter. */
template <int NWP>
static __device__ void am_finish(float best, int32_t bi, uint32_t gw, uint32_t nw, void *ws,
                                 int32_t *out)
{
    __shared__ float s_v[NWP];
    __shared__ int32_t s_i[NWP];
    __shared__ uint32_t s_last;
    float *cv = (float *)ws;
    int32_t *ci = (int32_t *)(cv + TDM_CUDA_ARGMAX_CAP);
    uint32_t *cnt = (uint32_t *)(ci + TDM_CUDA_ARGMAX_CAP);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        cv[gw] = best;
        ci[gw] = bi;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        s_last = atomicAdd(cnt, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last)
        return;
    __threadfence();
    best = -INFINITY;
    bi = -1;
    for (uint32_t i = threadIdx.x; i < nw; i += blockDim.x)
        am_merge(__ldcg(cv + i), __ldcg(ci + i), best, bi);
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        am_merge(ov, oi, best, bi);
    }
    if (lane == 0) {
        s_v[warp] = best;
        s_i[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < NWP; w++)
            am_merge(s_v[w], s_i[w], best, bi);
        *out = bi < 0 ? 0 : bi;
        *cnt = 0;
    }
}

/* PIPE (V4, run 12): PIPE more batches of each lane's weights ride in a shared-memory ring
 * (cp.async, lane-private slots: no barrier), so 1 + PIPE batches are issued before the PDL wait
 * and PIPE are in flight while one is multiplied (V2: 1 and 1) without V3's registers; the sums
 * are the same, in the same order. Dynamic shared memory: x's staging (floats, rounded up to 16
 * bytes), then the ring (gemv1_ring_bytes). */
template <int NWP, int G1_U, int PIPE> static constexpr size_t gemv1_ring_bytes()
{
    return (size_t)NWP * PIPE * G1_U * 32 * 16;
}

template <typename T, int FLAGS, bool V2, int G1_U, bool DEEP, int MINB = 2, bool AM = false,
          int NWP = G1_WARPS, int PIPE = 0>
__global__ void __launch_bounds__(NWP * 32, MINB)
    gemv1_kernel(const float *__restrict__ x, uint32_t ldx, const uint32_t *__restrict__ xrow,
                 uint32_t K, uint32_t M, const T *__restrict__ W, const float *__restrict__ bias,
                 const float *__restrict__ norm_w, float eps, float *__restrict__ y,
                 tdm_cuda_l2pf_t tail, int32_t *am_out, void *am_ws, int stage_cpa,
                 const uint16_t *__restrict__ emb, float *__restrict__ emb_out)
{
    constexpr int E = wvec<T>::N;
    constexpr bool PAIR = (FLAGS & TDM_GEMV_SWIGLU) != 0;
    constexpr bool NORM2 = V2 && (FLAGS & TDM_GEMV_NORM);
    extern __shared__ float s_x[]; /* K floats (V2 with NORM: then norm_w, K more) */
    __shared__ float s_part[NWP];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t gw = blockIdx.x * NWP + warp, nw = gridDim.x * NWP;
    const uint32_t ra = (uint32_t)((uint64_t)M * gw / nw);
    const uint32_t rb = (uint32_t)((uint64_t)M * (gw + 1) / nw);
    const uint32_t vpl = K / (32u * E); /* steps per row */
    const uint32_t nsteps = (rb - ra) * vpl * (PAIR ? 2u : 1u);
    /* SWIGLU: rows interleaved gate_i, up_i: a warp's pairs are one contiguous span too */
    const T *wp = W + (size_t)ra * K * (PAIR ? 2u : 1u) + (uint32_t)lane * E;
    uint4 cur[G1_U], nx[G1_U];
#pragma unroll
    for (int u = 0; u < G1_U; u++)
        if ((uint32_t)u < nsteps)
            cur[u] = ld_stream(wp + (size_t)u * 32u * E);
    /* PIPE: this lane's slot u of stage st is ring[(st * G1_U + u) * 32]; batch b >= 1 rides in
     * stage (b - 1) % PIPE, one cp.async group per batch (committed even when empty) */
    uint4 *ring = NULL;
    if constexpr (PIPE > 0) {
        const uint32_t xfl = ((NORM2 ? 2u : 1u) * K + 3u) & ~3u;
        ring = reinterpret_cast<uint4 *>(s_x + xfl) + (size_t)warp * PIPE * G1_U * 32 + lane;
#pragma unroll
        for (int st = 0; st < PIPE; st++) {
#pragma unroll
            for (int u = 0; u < G1_U; u++) {
                const uint32_t j = (uint32_t)((1 + st) * G1_U + u);
                if (j < nsteps)
                    cp_async16(ring + (st * G1_U + u) * 32, wp + (size_t)j * 32u * E, 16u);
            }
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
    }
    if (DEEP) { /* the second batch too: HBM stays busy while x is staged after the wait */
#pragma unroll
        for (int u = 0; u < G1_U; u++)
            if ((uint32_t)(G1_U + u) < nsteps)
                nx[u] = ld_stream(wp + (size_t)(G1_U + u) * 32u * E);
    }
    if (NORM2) /* a weight too: staged before the wait, by the thread that uses it below */
        for (uint32_t k = threadIdx.x * 4; k < K; k += NWP * 32 * 4)
            *reinterpret_cast<float4 *>(s_x + K + k) =
                __ldg(reinterpret_cast<const float4 *>(norm_w + k));
    pdl_sync();
    /* DEEP: what each row's sum is added to (y with ACCUM, else the bias), read once per warp
     * right after the wait (lane i: row ra + i) instead of by a dependent load in the tail */
    const bool pre = DEEP && rb - ra <= 32u;
    float yo = 0.0f;
    if (pre && (uint32_t)lane < rb - ra)
        yo = (FLAGS & TDM_GEMV_ACCUM) ? y[ra + lane] : bias ? bias[ra + lane] : 0.0f;
    const float *xr = emb ? NULL : x + (size_t)(xrow ? xrow[0] : 0) * ldx;
    /* the folded embedding (bf16 row, exactly widened as embed_kernel does) */
    const uint16_t *er = emb ? emb + (size_t)xrow[0] * K : NULL;
    float ss = 0.0f, rs = 1.0f;
    /* V2 without SiLU (run 11): x lands in shared memory by cp.async, every 16-byte piece in
     * flight at once (one L2 round trip for any K, no registers), then each thread takes its
     * own pieces back for the norm; else loads in batches of 4 per thread */
    constexpr bool CPA = V2 && !(FLAGS & TDM_GEMV_SILU);
    /* PIPE: through registers (x's cp.async group would wait for the ring's older groups) */
    const bool cpa = CPA && !PIPE && !emb && stage_cpa && ((uintptr_t)xr & 15u) == 0;
    if (cpa) {
        for (uint32_t k = threadIdx.x * 4; k < K; k += NWP * 32 * 4)
            cp_async16(s_x + k, xr + k, 16u);
        asm volatile("cp.async.commit_group;" ::: "memory");
        /* groups complete in order: x's is the newest, so this waits for the ring's too
         * (issued before the wait, they have had the longest time) */
        asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
#pragma unroll 4
    for (uint32_t k = threadIdx.x * 4; k < K; k += NWP * 32 * 4) {
        if (CPA && cpa && !(FLAGS & TDM_GEMV_NORM))
            break; /* staged as it is */
        float4 v;
        if (emb) {
            const uint2 raw = __ldg(reinterpret_cast<const uint2 *>(er + k));
            v = make_float4(bf16_bits_to_f32(raw.x & 0xffffu), bf16_bits_to_f32(raw.x >> 16),
                            bf16_bits_to_f32(raw.y & 0xffffu), bf16_bits_to_f32(raw.y >> 16));
            if (blockIdx.x == 0)
                *reinterpret_cast<float4 *>(emb_out + k) = v;
        } else {
            v = cpa ? *reinterpret_cast<const float4 *>(s_x + k)
                    : __ldg(reinterpret_cast<const float4 *>(xr + k));
        }
        if (FLAGS & TDM_GEMV_SILU) {
            float4 u = __ldg(reinterpret_cast<const float4 *>(xr + K + k));
            v.x = silu(v.x) * u.x;
            v.y = silu(v.y) * u.y;
            v.z = silu(v.z) * u.z;
            v.w = silu(v.w) * u.w;
        }
        if (FLAGS & TDM_GEMV_NORM)
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        if (NORM2) {
            const float4 w = *reinterpret_cast<const float4 *>(s_x + K + k);
            v.x *= w.x;
            v.y *= w.y;
            v.z *= w.z;
            v.w *= w.w;
        }
        *reinterpret_cast<float4 *>(s_x + k) = v;
    }
    if (NORM2) {
        /* one barrier: every thread sums the warps' parts; rs scales each row's sum */
        float t = warp_sum(ss);
        if (lane == 0)
            s_part[warp] = t;
        __syncthreads();
        float a = 0.0f;
#pragma unroll
        for (int w = 0; w < NWP; w++)
            a += s_part[w];
        rs = rsqrtf(a / (float)K + eps);
    } else if (FLAGS & TDM_GEMV_NORM) {
        __shared__ float s_rs;
        float t = warp_sum(ss);
        if (lane == 0)
            s_part[warp] = t;
        __syncthreads();
        if (threadIdx.x == 0) {
            float a = 0.0f;
            for (int w = 0; w < NWP; w++)
                a += s_part[w];
            s_rs = rsqrtf(a / (float)K + eps);
        }
        __syncthreads();
        rs = s_rs;
        for (uint32_t k = threadIdx.x; k < K; k += NWP * 32)
            s_x[k] = s_x[k] * rs * norm_w[k];
        rs = 1.0f;
    }
    if (!NORM2)
        __syncthreads();
    float acc = 0.0f, gsum = 0.0f, best = -INFINITY;
    int32_t bi = -1;
    uint32_t row = ra, jr = 0;
    bool up = false; /* SWIGLU: the up row of `row` is the one being summed */
    for (uint32_t j0 = 0, b = 0; j0 < nsteps; j0 += G1_U, b++) {
        if (!DEEP && PIPE == 0) {
#pragma unroll
            for (int u = 0; u < G1_U; u++)
                if (j0 + G1_U + u < nsteps)
                    nx[u] = ld_stream(wp + (size_t)(j0 + G1_U + u) * 32u * E);
        }
#pragma unroll
        for (int u = 0; u < G1_U; u++) {
            if (j0 + u < nsteps) {
                float f[E];
                wvec<T>::get(cur[u], f);
                const float *xs = s_x + jr * 32u * E + (uint32_t)lane * E;
#pragma unroll
                for (int e = 0; e < E; e += 4) {
                    float4 xv = *reinterpret_cast<const float4 *>(xs + e);
                    acc = fmaf(f[e], xv.x, acc);
                    acc = fmaf(f[e + 1], xv.y, acc);
                    acc = fmaf(f[e + 2], xv.z, acc);
                    acc = fmaf(f[e + 3], xv.w, acc);
                }
                if (++jr == vpl) { /* warp-uniform: the row is complete */
                    float s = NORM2 ? warp_sum(acc) * rs : warp_sum(acc);
                    if (PAIR) {
                        /* the gate sum waits for its up row; the product is what silu_mul (or
                         * the down GEMV's SILU staging) computes from the stored pair */
                        if (!up)
                            gsum = s + 0.0f;
                        else if (lane == 0)
                            y[row] = silu(gsum) * (s + 0.0f);
                    } else {
                        if (AM) { /* rows in increasing order: a tie keeps the first */
                            const float v = s + (bias ? bias[row] : 0.0f);
                            if (v > best || (bi < 0 && v == v)) {
                                best = v;
                                bi = (int32_t)row;
                            }
                        }
                        if (pre) {
                            const float yv = __shfl_sync(0xffffffffu, yo, row - ra);
                            if (lane == 0)
                                y[row] = (FLAGS & TDM_GEMV_ACCUM) ? yv + s : s + yv;
                        } else if (lane == 0) {
                            if (FLAGS & TDM_GEMV_ACCUM)
                                y[row] += s;
                            else
                                y[row] = s + (bias ? bias[row] : 0.0f);
                        }
                    }
                    acc = 0.0f;
                    jr = 0;
                    if (!PAIR || up)
                        row++;
                    up = PAIR && !up;
                }
            }
        }
        if constexpr (PIPE > 0) {
            /* batch b + 1 from its stage, then the stage refilled with batch b + 1 + PIPE */
            if (j0 + G1_U < nsteps) {
                asm volatile("cp.async.wait_group %0;" ::"n"(PIPE - 1) : "memory");
                uint4 *sl = ring + (b % PIPE) * G1_U * 32;
#pragma unroll
                for (int u = 0; u < G1_U; u++)
                    cur[u] = sl[u * 32];
#pragma unroll
                for (int u = 0; u < G1_U; u++) {
                    const uint32_t j = j0 + (uint32_t)((1 + PIPE) * G1_U + u);
                    if (j < nsteps)
                        cp_async16(sl + u * 32, wp + (size_t)j * 32u * E, 16u);
                }
                asm volatile("cp.async.commit_group;" ::: "memory");
            }
        } else {
#pragma unroll
            for (int u = 0; u < G1_U; u++)
                cur[u] = nx[u];
            if (DEEP) { /* batch j0 + 2 U in flight while j0 + U is multiplied */
#pragma unroll
                for (int u = 0; u < G1_U; u++)
                    if (j0 + 2 * G1_U + u < nsteps)
                        nx[u] = ld_stream(wp + (size_t)(j0 + 2 * G1_U + u) * 32u * E);
            }
        }
    }
    /* this warp's rows are done: its slice of the next kernel's weights into L2 while the
     * slower warps still stream (the kernel's tail) */
    if (tail.bytes)
        l2pf_part(tail, gw, nw, (uint32_t)lane, 32u);
    if (AM)
        am_finish<NWP>(best, bi, gw, nw, am_ws, am_out);
}

/* The streaming form applies: one row, K a multiple of one warp step, x fits in shared memory. */
template <typename T> static bool gemv1_ok(const tdm_cuda_gemv_t *a)
{
    return a->n == 1 && a->ksplit >= 2 && a->K % (32u * wvec<T>::N) == 0 &&
           (size_t)a->K * 4 * (a->ksplit >= 3 && (a->flags & TDM_GEMV_NORM) ? 2 : 1) <= 48u * 1024;
}

static int sm_count(void)
{
    static int n;
    if (n == 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0)
            n = v;
        else
            return 132;
    }
    return n;
}

/* ksplit 2: run 5's kernel; 3: V2 (norm_w staged before the PDL wait, rs applied to each row's
 * sum, one barrier); 4: V2 on one block per SM, so that the next kernel's blocks fit beside this
 * one's and issue their first weight loads during its tail (run 8: slower); 5: V3 = V2 with two
 * batches of weight loads (16 per lane) issued before the PDL wait; 6: V2 compiled for 3
 * resident blocks per SM (<= 80 registers instead of 93) on the same grid of 2 blocks per SM, so
 * one block of the next GEMV fits beside them and issues its loads before its PDL wait (run 10:
 * 16-32 bytes of spills, bs1 900 tok/s against V2's 1092; not the default). */
template <typename T, int FLAGS> static void gemv1_launch(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    /* 16 warps per SM: 2 blocks of 8 (4: 1 block; 7: 4 blocks of 4; 8: 8 blocks of 2) */
    const uint32_t nwp = a->ksplit == 7 ? 4u : a->ksplit == 8 ? 2u : G1_WARPS;
    const uint32_t maxw = (uint32_t)sm_count() * (a->ksplit == 4 ? 8u : 16u);
    const uint32_t rpw = (a->M + maxw - 1) / maxw;
    const uint32_t warps = (a->M + rpw - 1) / rpw;
    const uint32_t blocks = (warps + nwp - 1) / nwp;
    const size_t smem = (size_t)a->K * 4 * (a->ksplit >= 3 && (FLAGS & TDM_GEMV_NORM) ? 2 : 1);
#define G1_ARGS                                                                                    \
    a->x, a->ldx, a->xrow, a->K, a->M, (const T *)a->w, a->bias, a->norm_w, a->eps, a->y, a->tail, \
        a->argmax, a->argmax_ws, a->ksplit != 9, a->embed, a->embed_out
    /* V4 (ksplit 10, 11): V2 with a ring of 2 or 1 weight batches per lane, every epilogue */
    const int pipe = a->ksplit == 10 ? 2 : a->ksplit == 11 ? 1 : 0;
    const size_t smem_p = ((smem + 15) & ~(size_t)15) + (size_t)G1_WARPS * pipe * 8 * 32 * 16;
    if constexpr ((FLAGS & ~TDM_GEMV_NORM) == 0) {
        if (a->argmax) { /* tdm_cuda_gemv checked: ksplit 3, 10 or 11 */
            if (pipe == 2)
                launch_big(gemv1_kernel<T, FLAGS, true, 8, false, 2, true, G1_WARPS, 2>,
                           dim3(blocks), G1_WARPS * 32, smem_p, s, G1_ARGS);
            else if (pipe == 1)
                launch_big(gemv1_kernel<T, FLAGS, true, 8, false, 2, true, G1_WARPS, 1>,
                           dim3(blocks), G1_WARPS * 32, smem_p, s, G1_ARGS);
            else
                launch(gemv1_kernel<T, FLAGS, true, 8, false, 2, true>, dim3(blocks), G1_WARPS * 32,
                       smem, s, G1_ARGS);
            return;
        }
    }
    if (pipe == 2)
        launch_big(gemv1_kernel<T, FLAGS, true, 8, false, 2, false, G1_WARPS, 2>, dim3(blocks),
                   G1_WARPS * 32, smem_p, s, G1_ARGS);
    else if (pipe == 1)
        launch_big(gemv1_kernel<T, FLAGS, true, 8, false, 2, false, G1_WARPS, 1>, dim3(blocks),
                   G1_WARPS * 32, smem_p, s, G1_ARGS);
    else if constexpr ((FLAGS & TDM_GEMV_SWIGLU) != 0) { /* ksplit 3 (tdm_cuda_gemv) */
        launch(gemv1_kernel<T, FLAGS, true, 8, false>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    } else if (a->ksplit == 2)
        launch(gemv1_kernel<T, FLAGS, false, 8, false>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 3 || a->ksplit == 9) /* 9: x staged through registers (run 11c) */
        launch(gemv1_kernel<T, FLAGS, true, 8, false>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 6) /* V2 held to 3 resident blocks' registers, grid of 2 per SM */
        launch(gemv1_kernel<T, FLAGS, true, 8, false, 3>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 7) /* V2 in blocks of 4 warps: a block leaves as 4 warps finish */
        launch(gemv1_kernel<T, FLAGS, true, 8, false, 4, false, 4>, dim3(blocks), 4 * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 8) /* V2 in blocks of 2 warps */
        launch(gemv1_kernel<T, FLAGS, true, 8, false, 8, false, 2>, dim3(blocks), 2 * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 4) /* one block per SM: 12 loads per lane, about two blocks' 8 */
        launch(gemv1_kernel<T, FLAGS, true, 12, false>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    else
        launch(gemv1_kernel<T, FLAGS, true, 8, true>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
#undef G1_ARGS
}

template <typename T, int NR, int FLAGS>
static void gemv_launch(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    if (NR == 1 && gemv1_ok<T>(a)) {
        gemv1_launch<T, FLAGS>(a, s);
        return;
    }
    /* SWIGLU: tdm_cuda_gemv takes it only where the form above applies */
    if constexpr ((FLAGS & TDM_GEMV_SWIGLU) == 0) {
        if (NR == 1 && a->ksplit) {
            dim3 grid((a->M + GEMV_RPW - 1) / GEMV_RPW, a->n);
            launch(gemv_kernel<T, NR, FLAGS, GEMV_WARPS>, grid, GEMV_WARPS * 32, 0, s, a->x, a->ldx,
                   a->xrow, a->n, a->K, a->M, (const T *)a->w, a->bias, a->norm_w, a->eps, a->y,
                   a->ldy);
            return;
        }
        dim3 grid((a->M + GEMV_WARPS * GEMV_RPW - 1) / (GEMV_WARPS * GEMV_RPW),
                  (a->n + NR - 1) / NR);
        launch(gemv_kernel<T, NR, FLAGS, 1>, grid, GEMV_WARPS * 32, 0, s, a->x, a->ldx, a->xrow,
               a->n, a->K, a->M, (const T *)a->w, a->bias, a->norm_w, a->eps, a->y, a->ldy);
    }
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
    case TDM_GEMV_NORM | TDM_GEMV_SWIGLU:
        if (NR == 1)
            gemv_launch<T, 1, TDM_GEMV_NORM | TDM_GEMV_SWIGLU>(a, s);
        return NR == 1;
    case TDM_GEMV_SWIGLU:
        if (NR == 1)
            gemv_launch<T, 1, TDM_GEMV_SWIGLU>(a, s);
        return NR == 1;
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

int tdm_cuda_gemv_fusable(const tdm_cuda_gemv_t *a)
{
    if (!a || a->n != 1 ||
        (a->ksplit != 3 && a->ksplit != 9 && a->ksplit != 10 && a->ksplit != 11) || a->K == 0)
        return 0;
    switch (a->wdtype) {
    case TDM_DTYPE_BF16:
        return gemv1_ok<uint16_t>(a);
    case TDM_DTYPE_F16:
        return gemv1_ok<__half>(a);
    case TDM_DTYPE_F32:
        return gemv1_ok<float>(a);
    }
    return 0;
}

tdm_status_t tdm_cuda_gemv(const tdm_cuda_gemv_t *a, cudaStream_t stream)
{
    int ok;
    if (!a || !a->x || !a->w || !a->y || a->K % 8 != 0 || a->K == 0 || a->M == 0 ||
        ((a->flags & TDM_GEMV_NORM) && !a->norm_w) ||
        ((a->flags & TDM_GEMV_SILU) && (a->flags & TDM_GEMV_NORM)) || !tdm_cuda_l2pf_ok(&a->tail))
        return TDM_ERR_INVAL;
    if ((a->flags & TDM_GEMV_SWIGLU) &&
        ((a->flags & (TDM_GEMV_SILU | TDM_GEMV_ACCUM)) || a->bias || a->argmax))
        return TDM_ERR_INVAL;
    if (a->argmax && (!a->argmax_ws || (a->flags & ~TDM_GEMV_NORM)))
        return TDM_ERR_INVAL;
    if (a->embed && (!a->embed_out || !a->xrow || a->flags != TDM_GEMV_NORM ||
                     a->wdtype != TDM_DTYPE_BF16 || a->argmax))
        return TDM_ERR_INVAL;
    if ((a->flags & TDM_GEMV_SWIGLU) || a->argmax || a->embed) {
        if (!tdm_cuda_gemv_fusable(a))
            return TDM_ERR_UNSUPPORTED;
        /* warps of the grid (gemv1_launch, 2 blocks per SM) vs the candidate slots */
        if (a->argmax && (uint64_t)sm_count() * 2u * G1_WARPS + G1_WARPS > TDM_CUDA_ARGMAX_CAP)
            return TDM_ERR_UNSUPPORTED;
    }
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

/* ---------------------------------------------------------------- skinny GEMM (tensor cores) */

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

static __device__ __forceinline__ void mma_bf16(float *c, const uint32_t *a, uint32_t b0,
                                                uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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

/* rotate_half of one pair, rounded the same in every kernel (no contraction into FMAs): the
 * fused decode attention writes the same K bits as rope_kv_kernel */
static __device__ __forceinline__ void rope_pair(float x0, float x1, float pos, float inv_freq,
                                                 float *o0, float *o1)
{
    float s, c;
    sincosf(pos * inv_freq, &s, &c);
    *o0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *o1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

/* one block (4 warps) per row; units: H q heads, KV k heads, KV v heads, one warp per unit */
__global__ void rope_kv_kernel(float *qkv, uint32_t H, const float *inv_freq, tdm_cuda_kv_t kv,
                               uint32_t layer, tdm_cuda_rows_t rows)
{
    const uint32_t r = blockIdx.x, KV = kv.kv_heads, hd = kv.hd, half = hd / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    pdl_sync();
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
    launch(rope_kv_kernel, n, 128, 0, stream, qkv, H, inv_freq, *kv, layer, *rows);
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
    pdl_sync();

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
                /* up to 8 loads of the row in flight at once (hd 64: all of it) */
                constexpr int KC = DPL * 4 < 8 ? DPL * 4 : 8;
                for (uint32_t c0 = 0; c0 < hd / 8; c0 += KC) {
                    uint4 kraw[KC];
#pragma unroll
                    for (int c = 0; c < KC; c++)
                        if (c0 + c < hd / 8)
                            kraw[c] = k4[c0 + c];
#pragma unroll
                    for (int c = 0; c < KC; c++) {
                        if (c0 + c >= hd / 8)
                            break;
                        float kf[8];
                        wvec<uint16_t>::get(kraw[c], kf);
#pragma unroll
                        for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++)
                            if ((uint32_t)g < G)
#pragma unroll
                                for (int e = 0; e < 8; e++)
                                    s[g] = fmaf(sq[g * hd + (c0 + c) * 8 + e], kf[e], s[g]);
                    }
                }
            } else {
                const float ks = reinterpret_cast<const float *>(
                    kv_slot(kv, layer, TDM_KV_SUB_K_SCALE, page, slot))[kvh];
                vscale = reinterpret_cast<const float *>(
                    kv_slot(kv, layer, TDM_KV_SUB_V_SCALE, page, slot))[kvh];
                const uint4 *k4 = reinterpret_cast<const uint4 *>(krow + (size_t)kvh * hd);
                constexpr int KC = DPL * 2 < 4 ? DPL * 2 : 4;
                for (uint32_t c0 = 0; c0 < hd / 16; c0 += KC) {
                    uint4 kraw[KC];
#pragma unroll
                    for (int c = 0; c < KC; c++)
                        if (c0 + c < hd / 16)
                            kraw[c] = k4[c0 + c];
#pragma unroll
                    for (int cc = 0; cc < KC; cc++) {
                        if (c0 + cc >= hd / 16)
                            break;
                        const uint32_t c = c0 + cc;
                        uint4 raw = kraw[cc];
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
    pdl_sync();
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
        launch(attn_split_kernel<1>, grid, ATT_WARPS * 32, 0, stream, qkv, H, *kv, layer, *rows,
               part_o, part_ml);
    else if (hd <= 64)
        launch(attn_split_kernel<2>, grid, ATT_WARPS * 32, 0, stream, qkv, H, *kv, layer, *rows,
               part_o, part_ml);
    else if (hd <= 128)
        launch(attn_split_kernel<4>, grid, ATT_WARPS * 32, 0, stream, qkv, H, *kv, layer, *rows,
               part_o, part_ml);
    else
        launch(attn_split_kernel<8>, grid, ATT_WARPS * 32, 0, stream, qkv, H, *kv, layer, *rows,
               part_o, part_ml);
    unsigned th = (hd + 31) / 32 * 32;
    launch(attn_combine_kernel, dim3(n, H), th, 0, stream, H, hd, splits, part_o, part_ml, out,
           out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- prefill attention (tensor cores)
 */

#define FA_ROWS 64 /* query rows per block: 4 warps x 16 */
#define FA_KT 64   /* positions per K/V tile */

/* Tile (64 positions from kt0) of K and V of head kvh into shared memory (rows of HD + 8 bf16);
 * positions >= len are zero-filled. */
template <int HD>
static __device__ __forceinline__ void fa_load(uint16_t *ks, uint16_t *vs, const tdm_cuda_kv_t &kv,
                                               uint32_t layer, const uint32_t *pt, uint32_t kvh,
                                               uint32_t kt0, uint32_t len)
{
    constexpr int LDS = HD + 8, CH = HD / 8; /* 16-byte chunks per row */
    for (int i = threadIdx.x; i < FA_KT * CH; i += blockDim.x) {
        const int r = i / CH, c = i % CH;
        const uint32_t t = kt0 + (uint32_t)r;
        const uint8_t *kp = kv.base, *vp = kv.base;
        uint32_t bytes = 0;
        if (t < len) {
            uint32_t page = pt[t / kv.page_size], slot = t % kv.page_size;
            kp = kv_slot(kv, layer, TDM_KV_SUB_K, page, slot) + ((size_t)kvh * HD + c * 8) * 2;
            vp = kv_slot(kv, layer, TDM_KV_SUB_V, page, slot) + ((size_t)kvh * HD + c * 8) * 2;
            bytes = 16;
        }
        cp_async16(ks + r * LDS + c * 8, kp, bytes);
        cp_async16(vs + r * LDS + c * 8, vp, bytes);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* grid (ntiles, H), block 128. Warp w owns tile rows 16 w .. 16 w + 15; lane (g = lane / 4,
 * t = lane % 4) holds rows g and g + 8 of the mma fragments. */
template <int HD>
__global__ void __launch_bounds__(128)
    flash_prefill_kernel(const float *__restrict__ qkv, uint32_t H, tdm_cuda_kv_t kv,
                         uint32_t layer, tdm_cuda_rows_t rows, const uint32_t *__restrict__ tiles,
                         float *__restrict__ out, uint16_t *__restrict__ out_bf16)
{
    constexpr int LDS = HD + 8, NKS = HD / 16, NDN = HD / 8, NSN = FA_KT / 8;
    extern __shared__ __align__(16) uint16_t fa_sm[];
    /* stage s: K at fa_sm + 2 s FA_KT LDS, V right after it */
    pdl_sync();
    const uint32_t tile = tiles[gridDim.x - 1 - blockIdx.x]; /* long tiles (late rows) first */
    const uint32_t row0 = tile & 0xffffffu, cnt = (tile >> 24) + 1;
    const uint32_t h = blockIdx.y, KV = kv.kv_heads, kvh = h / (H / KV);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t ld = (H + 2 * KV) * HD;
    const uint32_t p0 = rows.pos[row0], len = p0 + cnt;
    const uint32_t *pt = rows.pages + rows.ptoff[row0];
    const uint32_t ra = warp * 16 + g, rb = ra + 8;
    const uint32_t qpa = p0 + min(ra, cnt - 1), qpb = p0 + min(rb, cnt - 1);
    const uint32_t wlast = p0 + min((uint32_t)warp * 16 + 15, cnt - 1); /* warp's last position */
    const bool wactive = (uint32_t)warp * 16 < cnt;
    const float sl2 = rsqrtf((float)HD) * 1.4426950408889634f; /* scale * log2(e) */

    uint32_t qf[NKS][4];
    {
        const float *qa = qkv + (size_t)(row0 + min(ra, cnt - 1)) * ld + (size_t)h * HD + 2 * t;
        const float *qb = qkv + (size_t)(row0 + min(rb, cnt - 1)) * ld + (size_t)h * HD + 2 * t;
#pragma unroll
        for (int ks = 0; ks < NKS; ks++) {
            float2 x0 = *reinterpret_cast<const float2 *>(qa + ks * 16);
            float2 x1 = *reinterpret_cast<const float2 *>(qb + ks * 16);
            float2 x2 = *reinterpret_cast<const float2 *>(qa + ks * 16 + 8);
            float2 x3 = *reinterpret_cast<const float2 *>(qb + ks * 16 + 8);
            qf[ks][0] = pack_bf16(x0.x, x0.y);
            qf[ks][1] = pack_bf16(x1.x, x1.y);
            qf[ks][2] = pack_bf16(x2.x, x2.y);
            qf[ks][3] = pack_bf16(x3.x, x3.y);
        }
    }
    float o[NDN][4];
#pragma unroll
    for (int dn = 0; dn < NDN; dn++)
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

    const uint32_t nkt = (len + FA_KT - 1) / FA_KT;
    fa_load<HD>(fa_sm, fa_sm + FA_KT * LDS, kv, layer, pt, kvh, 0, len);
    for (uint32_t kt = 0; kt < nkt; kt++) {
        if (kt + 1 < nkt) {
            uint16_t *st = fa_sm + ((kt + 1) & 1) * 2 * FA_KT * LDS;
            fa_load<HD>(st, st + FA_KT * LDS, kv, layer, pt, kvh, (kt + 1) * FA_KT, len);
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        const uint32_t kt0 = kt * FA_KT;
        if (wactive && kt0 <= wlast) {
            const uint16_t *ks = fa_sm + (kt & 1) * 2 * FA_KT * LDS, *vs = ks + FA_KT * LDS;
            float sc[NSN][4];
#pragma unroll
            for (int sn = 0; sn < NSN; sn++) {
                sc[sn][0] = sc[sn][1] = sc[sn][2] = sc[sn][3] = 0.0f;
                const uint16_t *kr = ks + (sn * 8 + g) * LDS + 2 * t;
#pragma unroll
                for (int kk = 0; kk < NKS; kk++) {
                    uint32_t b0 = *reinterpret_cast<const uint32_t *>(kr + kk * 16);
                    uint32_t b1 = *reinterpret_cast<const uint32_t *>(kr + kk * 16 + 8);
                    mma_bf16(sc[sn], qf[kk], b0, b1);
                }
            }
            /* causal mask, scale, row maxima (rows g and g + 8; the 4 lanes of a row) */
            float mta = -INFINITY, mtb = -INFINITY;
#pragma unroll
            for (int sn = 0; sn < NSN; sn++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    uint32_t kp = kt0 + sn * 8 + 2 * t + (e & 1);
                    uint32_t qp = e < 2 ? qpa : qpb;
                    sc[sn][e] = kp <= qp ? sc[sn][e] * sl2 : -INFINITY;
                }
                mta = fmaxf(mta, fmaxf(sc[sn][0], sc[sn][1]));
                mtb = fmaxf(mtb, fmaxf(sc[sn][2], sc[sn][3]));
            }
#pragma unroll
            for (int off = 1; off < 4; off <<= 1) {
                mta = fmaxf(mta, __shfl_xor_sync(0xffffffffu, mta, off));
                mtb = fmaxf(mtb, __shfl_xor_sync(0xffffffffu, mtb, off));
            }
            /* position 0 is in every row's range, so after the first tile ma/mb are finite */
            const float mna = fmaxf(ma, mta), mnb = fmaxf(mb, mtb);
            const float aa = exp2f(ma - mna), ab = exp2f(mb - mnb);
            ma = mna;
            mb = mnb;
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (int sn = 0; sn < NSN; sn++) {
                sc[sn][0] = exp2f(sc[sn][0] - mna);
                sc[sn][1] = exp2f(sc[sn][1] - mna);
                sc[sn][2] = exp2f(sc[sn][2] - mnb);
                sc[sn][3] = exp2f(sc[sn][3] - mnb);
                sa += sc[sn][0] + sc[sn][1];
                sb += sc[sn][2] + sc[sn][3];
            }
            la = la * aa + sa;
            lb = lb * ab + sb;
#pragma unroll
            for (int dn = 0; dn < NDN; dn++) {
                o[dn][0] *= aa;
                o[dn][1] *= aa;
                o[dn][2] *= ab;
                o[dn][3] *= ab;
            }
            /* o += P V: P from the score accumulators (n-tiles 2j, 2j+1 = k-step j), V by
             * ldmatrix.trans (two d n-tiles per x4) */
#pragma unroll
            for (int j = 0; j < FA_KT / 16; j++) {
                uint32_t pa[4] = {pack_bf16(sc[2 * j][0], sc[2 * j][1]),
                                  pack_bf16(sc[2 * j][2], sc[2 * j][3]),
                                  pack_bf16(sc[2 * j + 1][0], sc[2 * j + 1][1]),
                                  pack_bf16(sc[2 * j + 1][2], sc[2 * j + 1][3])};
                const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
                for (int dp = 0; dp < NDN / 2; dp++) {
                    const uint16_t *vp =
                        vs + (j * 16 + (mi & 1) * 8 + ri) * LDS + dp * 16 + (mi >> 1) * 8;
                    uint32_t va = (uint32_t)__cvta_generic_to_shared(vp), r0, r1, r2, r3;
                    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                                 "{%0,%1,%2,%3}, [%4];"
                                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                                 : "r"(va));
                    mma_bf16(o[2 * dp], pa, r0, r1);
                    mma_bf16(o[2 * dp + 1], pa, r2, r3);
                }
            }
        }
        __syncthreads(); /* the stage read here is refilled next iteration */
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, off);
        lb += __shfl_xor_sync(0xffffffffu, lb, off);
    }
    const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
#pragma unroll
    for (int dn = 0; dn < NDN; dn++) {
        const uint32_t d = dn * 8 + 2 * t;
        if (ra < cnt) {
            size_t oi = ((size_t)(row0 + ra) * H + h) * HD + d;
            float2 v = make_float2(o[dn][0] * ia, o[dn][1] * ia);
            *reinterpret_cast<float2 *>(out + oi) = v;
            if (out_bf16)
                *reinterpret_cast<uint32_t *>(out_bf16 + oi) = pack_bf16(v.x, v.y);
        }
        if (rb < cnt) {
            size_t oi = ((size_t)(row0 + rb) * H + h) * HD + d;
            float2 v = make_float2(o[dn][2] * ib, o[dn][3] * ib);
            *reinterpret_cast<float2 *>(out + oi) = v;
            if (out_bf16)
                *reinterpret_cast<uint32_t *>(out_bf16 + oi) = pack_bf16(v.x, v.y);
        }
    }
}

/* ---------------------------------------------------------------- decode attention (tensor cores)
 */

#define DA_WARPS 4
#define DA_KT 32 /* positions per warp tile */
/* splits of the cluster form (part_o NULL): a portable cluster size */
#define TDM_CUDA_DECODE_CLUSTER_MAX 8u

/* The first (pre-wait) or a later tile of a warp: the page of each position p0 + lane, the V rows
 * into the warp's shared-memory tile by cp.async (zeros past end) and the K rows p0 + 8 sn + g as
 * B fragments. Position `skip` (the row's own, written by this kernel after the PDL wait) is left
 * out; da_tile_fix loads it once it is in the cache. */
template <int HD>
static __device__ __forceinline__ void
da_tile(const tdm_cuda_kv_t &kv, uint32_t layer, const uint32_t *pt, uint32_t kvh, uint32_t p0,
        uint32_t end, uint32_t skip, int lane, uint16_t *vs, uint4 (&kf)[DA_KT / 8][HD / 32])
{
    constexpr int LDS = HD + 8, NC = HD / 32, NSN = DA_KT / 8;
    const int g = lane >> 2, t = lane & 3;
    uint32_t mypage = 0;
    if (p0 + lane < end)
        mypage = pt[(p0 + lane) / kv.page_size];
    for (int i = lane; i < DA_KT * (HD / 8); i += 32) {
        const int rr = i / (HD / 8), cc = i % (HD / 8);
        const uint32_t tp = p0 + rr;
        const uint32_t pg = __shfl_sync(0xffffffffu, mypage, rr);
        if (tp == skip)
            continue;
        const uint8_t *src = kv.base;
        uint32_t bytes = 0;
        if (tp < end) {
            src = kv_slot(kv, layer, TDM_KV_SUB_V, pg, tp % kv.page_size) +
                  ((size_t)kvh * HD + cc * 8) * 2;
            bytes = 16;
        }
        cp_async16(vs + rr * LDS + cc * 8, src, bytes);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
#pragma unroll
    for (int sn = 0; sn < NSN; sn++) {
        const uint32_t tp = p0 + sn * 8 + g;
        const uint32_t pg = __shfl_sync(0xffffffffu, mypage, sn * 8 + g);
        const uint16_t *kr = reinterpret_cast<const uint16_t *>(
                                 kv_slot(kv, layer, TDM_KV_SUB_K, pg, tp % kv.page_size)) +
                             (size_t)kvh * HD + 8 * t;
#pragma unroll
        for (int c = 0; c < NC; c++)
            kf[sn][c] = tp < end && tp != skip ? *reinterpret_cast<const uint4 *>(kr + 32 * c)
                                               : make_uint4(0, 0, 0, 0);
    }
}

/* Position `skip` of a tile that da_tile issued without it: its K fragments and V row from the
 * block's shared-memory copy of what it has just written to the cache (sk, sv: hd bf16 each,
 * the same bits; read after the block barrier). */
template <int HD>
static __device__ __forceinline__ void da_tile_fix(const uint16_t *sk, const uint16_t *sv,
                                                   uint32_t p0, uint32_t skip, int lane,
                                                   uint16_t *vs, uint4 (&kf)[DA_KT / 8][HD / 32])
{
    constexpr int LDS = HD + 8, NC = HD / 32, NSN = DA_KT / 8;
    if (skip < p0 || skip >= p0 + DA_KT)
        return;
    const int g = lane >> 2, t = lane & 3;
    const uint32_t rr = skip - p0;
    for (int cc = lane; cc < HD / 8; cc += 32)
        *reinterpret_cast<uint4 *>(vs + rr * LDS + cc * 8) =
            *reinterpret_cast<const uint4 *>(sv + cc * 8);
#pragma unroll
    for (int sn = 0; sn < NSN; sn++)
        if (p0 + sn * 8 + g == skip) {
#pragma unroll
            for (int c = 0; c < NC; c++)
                kf[sn][c] = *reinterpret_cast<const uint4 *>(sk + 32 * c + 8 * t);
        }
}

/* Row r's positions [0, len) and split sp's share [beg, end) of them (whole DA_KT tiles), and
 * its page table. */
static __device__ __forceinline__ void da_range(const tdm_cuda_rows_t &rows, uint32_t r,
                                                uint32_t sp, uint32_t S, uint32_t &len,
                                                uint32_t &beg, uint32_t &end, const uint32_t *&pt)
{
    len = rows.pos[r] + 1;
    uint32_t chunk = (len + S - 1) / S;
    chunk = (chunk + DA_KT - 1) / DA_KT * DA_KT;
    beg = sp * chunk;
    end = min(len, beg + chunk);
    pt = rows.pages + rows.ptoff[r];
}

/* grid (n, KV, S), block DA_WARPS warps: row r, KV head kvh, split sp of positions [0, pos]. The
 * G <= 8 query heads of the group are the rows of an m16n8k16 tile (rows 8..15 stay zero); each
 * warp takes 32-position tiles of the split in turn. K goes straight from global memory into B
 * fragments: a lane loads 16 contiguous bytes of a K row and the q fragments use the same
 * permutation of d (the dot product does not care), V goes through the warp's own shared-memory
 * tile (cp.async) to ldmatrix.trans. Online softmax in log2 units per warp, then the warps merge
 * in shared memory; S == 1 writes out (and bf16). S > 1 without CL: the partials of
 * tdm_cuda_attention's combine (m in natural-log units). Blocks with blockIdx.x >= nrows only
 * prefetch their part of pf into L2 (l2pf_block) and exit.
 *
 * CL (the cluster form, run 8): the S blocks of a (row, KV head) are one thread-block cluster
 * (cluster dims (1, 1, S), S <= 8). Each block leaves its merged (m, l, o) in its own shared
 * memory; after a cluster barrier, block sp merges output elements sp, sp + S, ... of all S
 * partials through distributed shared memory (fixed split order: deterministic) and writes out;
 * a second barrier keeps every block's shared memory alive until the others have read it. No
 * combine launch, no global partials. With ROPE too, everything that does not depend on the
 * previous kernel is issued before the PDL wait: the row's plan entries, the page table, and
 * each warp's first tile of K (registers) and V (cp.async) for the positions before pos, which
 * earlier calls wrote (so in this form the cache at positions < pos must not be written by the
 * immediately preceding launch: one row per sequence, as in decode). */
template <int HD, bool ROPE, bool CL>
__global__ void __launch_bounds__(DA_WARPS * 32, HD == 64 ? 4 : 1)
    attn_decode_mma_kernel(const float *__restrict__ qkv, uint32_t H, tdm_cuda_kv_t kv,
                           uint32_t layer, tdm_cuda_rows_t rows, const float *__restrict__ inv_freq,
                           float *__restrict__ part_o, float *__restrict__ part_ml,
                           float *__restrict__ out, uint16_t *__restrict__ out_bf16, uint32_t nrows,
                           tdm_cuda_l2pf_t pf)
{
    if (blockIdx.x >= nrows) {
        l2pf_block(pf, ((blockIdx.x - nrows) * gridDim.y + blockIdx.y) * gridDim.z + blockIdx.z,
                   (gridDim.x - nrows) * gridDim.y * gridDim.z);
        return;
    }
    constexpr bool EARLY = CL && ROPE; /* tiles issued before the PDL wait */
    constexpr int LDS = HD + 8, NC = HD / 32, NDN = HD / 8, NSN = DA_KT / 8;
    __shared__ __align__(16) uint16_t vsm[DA_WARPS][DA_KT * LDS];
    __shared__ float smm[DA_WARPS][8], sml[DA_WARPS][8];
    __shared__ __align__(16) float sqr[EARLY ? 8 * HD : 1]; /* rotated q (EARLY) */
    __shared__ __align__(16) uint16_t skv[2 * HD];          /* the k, v row written (EARLY) */
    __shared__ float sbm[CL ? 8 : 1], sbl[CL ? 8 : 1];      /* the block's merged m, l (CL) */
    const uint32_t r = blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z, S = gridDim.z;
    const uint32_t KV = kv.kv_heads, G = H / KV;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const size_t pidx = ((size_t)r * H + kvh * G) * S + sp; /* head g: + g * S */
    uint16_t *vs = vsm[warp];
    uint4 kf[NSN][NC];
    uint32_t len = 0, beg = 0, end = 0;
    const uint32_t *pt = NULL;
    bool pad;
    if (EARLY) {
        pad = r >= *rows.nactive;
        if (!pad) {
            da_range(rows, r, sp, S, len, beg, end, pt);
            const uint32_t p0 = beg + (uint32_t)warp * DA_KT;
            if (p0 < end)
                da_tile<HD>(kv, layer, pt, kvh, p0, end, len - 1, lane, vs, kf);
        }
        pdl_sync();
    } else {
        pdl_sync();
        pad = r >= *rows.nactive;
    }
    if (pad) {
        /* padding row of a graph bucket: never reads the cache (uniform over a cluster) */
        for (uint32_t i = threadIdx.x; i < G * HD; i += blockDim.x) {
            const uint32_t gg = i / HD, d = i % HD;
            if (S == 1 || CL) {
                if (sp != 0)
                    continue;
                size_t oi = ((size_t)r * H + kvh * G + gg) * HD + d;
                out[oi] = 0.0f;
                if (out_bf16)
                    out_bf16[oi] = 0;
            } else {
                part_o[(pidx + (size_t)gg * S) * HD + d] = 0.0f;
                if (d == 0) {
                    part_ml[2 * (pidx + (size_t)gg * S)] = -INFINITY;
                    part_ml[2 * (pidx + (size_t)gg * S) + 1] = 0.0f;
                }
            }
        }
        return;
    }
    if (!EARLY)
        da_range(rows, r, sp, S, len, beg, end, pt);
    const float sl2 = rsqrtf((float)HD) * 1.4426950408889634f;
    const float *qrow = qkv + (size_t)r * (H + 2 * KV) * HD;
    if (ROPE) {
        /* RoPE of the group's q heads into shared memory (the V tiles' space, free until the
         * loop, or sqr when the tiles are already in flight), the same arithmetic as
         * rope_kv_kernel; the split that holds position pos also rotates this row's k of head
         * kvh and writes k and v to the cache (bf16, RNE) before any warp reads them */
        constexpr uint32_t half = HD / 2;
        const uint32_t pos = len - 1;
        float *sq = EARLY ? sqr : reinterpret_cast<float *>(&vsm[0][0]);
        for (uint32_t i = threadIdx.x; i < G * half; i += blockDim.x) {
            const uint32_t gg = i / half, j = i % half;
            const float *x = qrow + (size_t)(kvh * G + gg) * HD;
            rope_pair(x[j], x[j + half], (float)pos, inv_freq[j], &sq[gg * HD + j],
                      &sq[gg * HD + j + half]);
        }
        if (pos >= beg && pos < end) {
            const uint32_t page = pt[pos / kv.page_size], slot = pos % kv.page_size;
            uint16_t *kd =
                reinterpret_cast<uint16_t *>(kv_slot(kv, layer, TDM_KV_SUB_K, page, slot)) +
                (size_t)kvh * HD;
            uint16_t *vd =
                reinterpret_cast<uint16_t *>(kv_slot(kv, layer, TDM_KV_SUB_V, page, slot)) +
                (size_t)kvh * HD;
            const float *kx = qrow + (size_t)(H + kvh) * HD;
            const float *vx = qrow + (size_t)(H + KV + kvh) * HD;
            for (uint32_t j = threadIdx.x; j < HD; j += blockDim.x) {
                if (j < half) {
                    float o0, o1;
                    rope_pair(kx[j], kx[j + half], (float)pos, inv_freq[j], &o0, &o1);
                    const uint16_t b0 = f32_to_bf16_rne(o0), b1 = f32_to_bf16_rne(o1);
                    kd[j] = b0;
                    kd[j + half] = b1;
                    if (EARLY) {
                        skv[j] = b0;
                        skv[j + half] = b1;
                    }
                }
                const uint16_t bv = f32_to_bf16_rne(vx[j]);
                vd[j] = bv;
                if (EARLY)
                    skv[HD + j] = bv;
            }
            __threadfence_block();
        }
        __syncthreads();
    }

    /* q of head g (g < G), permuted like the K loads: k-step (c, half) covers d = 32 c + 8 t +
     * 4 half + {0, 1} (a0) and + {2, 3} (a2) */
    uint32_t qf[NC][2][4];
    {
        const float *q =
            ROPE ? (EARLY ? sqr : reinterpret_cast<const float *>(&vsm[0][0])) + (size_t)g * HD
                 : qrow + (size_t)(kvh * G + g) * HD;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            float4 lo = make_float4(0, 0, 0, 0), hi = lo;
            if ((uint32_t)g < G) {
                lo = *reinterpret_cast<const float4 *>(q + 32 * c + 8 * t);
                hi = *reinterpret_cast<const float4 *>(q + 32 * c + 8 * t + 4);
            }
            qf[c][0][0] = pack_bf16(lo.x, lo.y);
            qf[c][0][2] = pack_bf16(lo.z, lo.w);
            qf[c][1][0] = pack_bf16(hi.x, hi.y);
            qf[c][1][2] = pack_bf16(hi.z, hi.w);
            qf[c][0][1] = qf[c][0][3] = qf[c][1][1] = qf[c][1][3] = 0u;
        }
    }
    if (ROPE && !EARLY)
        __syncthreads(); /* q is in registers; the V tiles may overwrite it */
    float o[NDN][4];
#pragma unroll
    for (int dn = 0; dn < NDN; dn++)
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (uint32_t p0 = beg + (uint32_t)warp * DA_KT; p0 < end; p0 += DA_WARPS * DA_KT) {
        if (EARLY && p0 == beg + (uint32_t)warp * DA_KT)
            da_tile_fix<HD>(skv, skv + HD, p0, len - 1, lane, vs, kf);
        else
            da_tile<HD>(kv, layer, pt, kvh, p0, end, UINT32_MAX, lane, vs, kf);
        float sc[NSN][4];
#pragma unroll
        for (int sn = 0; sn < NSN; sn++) {
            sc[sn][0] = sc[sn][1] = sc[sn][2] = sc[sn][3] = 0.0f;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                mma_bf16(sc[sn], qf[c][0], kf[sn][c].x, kf[sn][c].y);
                mma_bf16(sc[sn], qf[c][1], kf[sn][c].z, kf[sn][c].w);
            }
        }
        float mt = -INFINITY;
#pragma unroll
        for (int sn = 0; sn < NSN; sn++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const uint32_t kp = p0 + sn * 8 + 2 * t + e;
                sc[sn][e] = kp < end ? sc[sn][e] * sl2 : -INFINITY;
            }
            sc[sn][2] = sc[sn][3] = -INFINITY; /* rows 8..15: no head */
            mt = fmaxf(mt, fmaxf(sc[sn][0], sc[sn][1]));
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        const float mn = fmaxf(m, mt); /* p0 < end: the tile's first position is valid */
        const float al = exp2f(m - mn);
        m = mn;
        float ssum = 0.0f;
#pragma unroll
        for (int sn = 0; sn < NSN; sn++) {
            sc[sn][0] = exp2f(sc[sn][0] - mn);
            sc[sn][1] = exp2f(sc[sn][1] - mn);
            sc[sn][2] = sc[sn][3] = 0.0f;
            ssum += sc[sn][0] + sc[sn][1];
        }
        l = l * al + ssum;
#pragma unroll
        for (int dn = 0; dn < NDN; dn++) {
            o[dn][0] *= al;
            o[dn][1] *= al;
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncwarp();
#pragma unroll
        for (int j = 0; j < DA_KT / 16; j++) {
            uint32_t pa[4] = {pack_bf16(sc[2 * j][0], sc[2 * j][1]), 0u,
                              pack_bf16(sc[2 * j + 1][0], sc[2 * j + 1][1]), 0u};
            const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
            for (int dp = 0; dp < NDN / 2; dp++) {
                const uint16_t *vp =
                    vs + (j * 16 + (mi & 1) * 8 + ri) * LDS + dp * 16 + (mi >> 1) * 8;
                uint32_t va = (uint32_t)__cvta_generic_to_shared(vp), r0, r1, r2, r3;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                             "{%0,%1,%2,%3}, [%4];"
                             : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                             : "r"(va));
                mma_bf16(o[2 * dp], pa, r0, r1);
                mma_bf16(o[2 * dp + 1], pa, r2, r3);
            }
        }
        __syncwarp(); /* the tile is refilled next round */
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    /* merge the warps: m, l per head, o (head g, d = 8 dn + 2 t + {0,1}) through shared memory
     * (the V tiles are free now) */
    __syncthreads();
    float *so = reinterpret_cast<float *>(&vsm[0][0]); /* [DA_WARPS][8][HD] */
    float *sbo = so + DA_WARPS * 8 * HD;               /* CL: the block's merged o [8][HD] */
    if (t == 0) {
        smm[warp][g] = m;
        sml[warp][g] = l;
    }
#pragma unroll
    for (int dn = 0; dn < NDN; dn++) {
        so[((size_t)warp * 8 + g) * HD + dn * 8 + 2 * t] = o[dn][0];
        so[((size_t)warp * 8 + g) * HD + dn * 8 + 2 * t + 1] = o[dn][1];
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G * HD; i += blockDim.x) {
        const uint32_t gg = i / HD, d = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DA_WARPS; w++)
            M = fmaxf(M, smm[w][gg]);
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int w = 0; w < DA_WARPS; w++) {
            const float f = smm[w][gg] == -INFINITY ? 0.0f : exp2f(smm[w][gg] - M);
            L += sml[w][gg] * f;
            O += so[((size_t)w * 8 + gg) * HD + d] * f;
        }
        if (S == 1) {
            const float v = L > 0.0f ? O / L : 0.0f;
            size_t oi = ((size_t)r * H + kvh * G + gg) * HD + d;
            out[oi] = v;
            if (out_bf16)
                out_bf16[oi] = f32_to_bf16_rne(v);
        } else if (CL) {
            sbo[i] = O;
            if (d == 0) {
                sbm[gg] = M;
                sbl[gg] = L;
            }
        } else {
            part_o[(pidx + (size_t)gg * S) * HD + d] = O;
            if (d == 0) {
                part_ml[2 * (pidx + (size_t)gg * S)] = M * 0.6931471805599453f; /* log2 -> ln */
                part_ml[2 * (pidx + (size_t)gg * S) + 1] = L;
            }
        }
    }
    if (!CL || S == 1)
        return;
    /* the cluster's S partials (block rank == split), merged in split order */
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    for (uint32_t i = sp * blockDim.x + threadIdx.x; i < G * HD; i += S * blockDim.x) {
        const uint32_t gg = i / HD, d = i % HD;
        float ms[8], ls[8], os[8], M = -INFINITY;
#pragma unroll
        for (uint32_t s = 0; s < 8; s++) {
            ms[s] = -INFINITY;
            ls[s] = os[s] = 0.0f;
            if (s < S) {
                ms[s] = *cl.map_shared_rank(&sbm[gg], s);
                ls[s] = *cl.map_shared_rank(&sbl[gg], s);
                os[s] = *cl.map_shared_rank(&sbo[i], s);
                M = fmaxf(M, ms[s]);
            }
        }
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (uint32_t s = 0; s < 8; s++) {
            const float f = ms[s] == -INFINITY ? 0.0f : exp2f(ms[s] - M);
            L += ls[s] * f;
            O += os[s] * f;
        }
        const float v = L > 0.0f ? O / L : 0.0f;
        const size_t oi = ((size_t)r * H + kvh * G + gg) * HD + d;
        out[oi] = v;
        if (out_bf16)
            out_bf16[oi] = f32_to_bf16_rne(v);
    }
    cl.sync(); /* the others' shared memory stays until every block has read it */
}

int tdm_cuda_decode_mma_supported(const tdm_cuda_kv_t *kv, uint32_t H)
{
    return !kv->fp8 && (kv->hd == 64 || kv->hd == 128) && kv->kv_heads > 0 &&
           H % kv->kv_heads == 0 && H / kv->kv_heads <= 8;
}

tdm_status_t tdm_cuda_attention_decode(const float *qkv, uint32_t n, uint32_t H,
                                       const tdm_cuda_kv_t *kv, uint32_t layer,
                                       const tdm_cuda_rows_t *rows, const float *inv_freq,
                                       uint32_t splits, float *part_o, float *part_ml, float *out,
                                       uint16_t *out_bf16, const tdm_cuda_l2pf_t *pf,
                                       cudaStream_t stream)
{
    if (!tdm_cuda_decode_mma_supported(kv, H) || splits == 0 || splits > TDM_CUDA_MAX_SPLITS)
        return TDM_ERR_UNSUPPORTED;
    if (!tdm_cuda_l2pf_ok(pf))
        return TDM_ERR_INVAL;
    if (n == 0)
        return TDM_OK;
    /* part_o NULL: the cluster form (splits merged in the kernel, <= 8 of them) */
    const bool cl = part_o == NULL;
    if (cl ? splits > TDM_CUDA_DECODE_CLUSTER_MAX : !part_ml)
        return TDM_ERR_INVAL;
    /* prefetch blocks: whole (KV, splits) planes past the n rows, about TDM_CUDA_L2PF_BLOCKS */
    const uint32_t plane = kv->kv_heads * splits;
    const uint32_t px = l2pf_on(pf) ? (TDM_CUDA_L2PF_BLOCKS + plane - 1) / plane : 0;
    const tdm_cuda_l2pf_t none = {NULL, 0, 0, 0}, p = l2pf_on(pf) ? *pf : none;
    dim3 grid(n + px, kv->kv_heads, splits);
    const dim3 block(DA_WARPS * 32);
    const unsigned clz = cl ? splits : 1;
#define DA_LAUNCH(HD, ROPE)                                                                        \
    do {                                                                                           \
        if (cl)                                                                                    \
            launch_cl(attn_decode_mma_kernel<HD, ROPE, true>, grid, block, clz, stream, qkv, H,    \
                      *kv, layer, *rows, inv_freq, part_o, part_ml, out, out_bf16, n, p);          \
        else                                                                                       \
            launch_cl(attn_decode_mma_kernel<HD, ROPE, false>, grid, block, 1u, stream, qkv, H,    \
                      *kv, layer, *rows, inv_freq, part_o, part_ml, out, out_bf16, n, p);          \
    } while (0)
    if (kv->hd == 64 && inv_freq)
        DA_LAUNCH(64, true);
    else if (kv->hd == 64)
        DA_LAUNCH(64, false);
    else if (inv_freq)
        DA_LAUNCH(128, true);
    else
        DA_LAUNCH(128, false);
#undef DA_LAUNCH
    if (splits > 1 && !cl)
        launch(attn_combine_kernel, dim3(n, H), (kv->hd + 31) / 32 * 32, 0, stream, H, kv->hd,
               splits, part_o, part_ml, out, out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

int tdm_cuda_flash_supported(const tdm_cuda_kv_t *kv)
{
    return !kv->fp8 && (kv->hd == 64 || kv->hd == 128) && kv->kv_heads > 0;
}

uint32_t tdm_cuda_flash_tiles(const uint32_t *pos, const uint32_t *ptoff, uint32_t n,
                              uint32_t *tiles, uint32_t cap)
{
    uint32_t nt = 0, r = 0;
    if (n >= (1u << 24))
        return 0;
    while (r < n) {
        uint32_t c = 1;
        while (r + c < n && c < FA_ROWS && ptoff[r + c] == ptoff[r] && pos[r + c] == pos[r] + c)
            c++;
        if (nt == cap)
            return 0;
        tiles[nt++] = r | ((c - 1) << 24);
        r += c;
    }
    return nt;
}

template <int HD>
static void flash_launch(dim3 grid, cudaStream_t stream, const float *qkv, uint32_t H,
                         const tdm_cuda_kv_t *kv, uint32_t layer, const tdm_cuda_rows_t *rows,
                         const uint32_t *tiles, float *out, uint16_t *out_bf16)
{
    const size_t smem = (size_t)4 * FA_KT * (HD + 8) * 2;
    static int attr_set = 0;
    if (!attr_set && smem > 48 * 1024) {
        (void)cudaFuncSetAttribute(flash_prefill_kernel<HD>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        attr_set = 1;
    }
    launch(flash_prefill_kernel<HD>, grid, 128, smem, stream, qkv, H, *kv, layer, *rows, tiles, out,
           out_bf16);
}

tdm_status_t tdm_cuda_flash_attention(const float *qkv, uint32_t n, uint32_t H,
                                      const tdm_cuda_kv_t *kv, uint32_t layer,
                                      const tdm_cuda_rows_t *rows, const uint32_t *tiles,
                                      uint32_t ntiles, float *out, uint16_t *out_bf16,
                                      cudaStream_t stream)
{
    if (!tdm_cuda_flash_supported(kv) || H % kv->kv_heads)
        return TDM_ERR_UNSUPPORTED;
    if (n == 0)
        return TDM_OK;
    if (ntiles == 0 || !tiles)
        return TDM_ERR_INVAL;
    dim3 grid(ntiles, H);
    if (kv->hd == 64)
        flash_launch<64>(grid, stream, qkv, H, kv, layer, rows, tiles, out, out_bf16);
    else
        flash_launch<128>(grid, stream, qkv, H, kv, layer, rows, tiles, out, out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- argmax */

/* one block (1024 threads) per row; ties and NaN: the first index of the largest non-NaN value.
 * Blocks past the m rows only prefetch their part of pf into L2. */
__global__ void argmax_kernel(const float *logits, uint32_t V, int32_t *ret, uint32_t m,
                              tdm_cuda_l2pf_t pf)
{
    __shared__ float sv[32];
    __shared__ int32_t si[32];
    if (blockIdx.x >= m) {
        l2pf_block(pf, blockIdx.x - m, gridDim.x - m);
        return;
    }
    pdl_sync();
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
                             const tdm_cuda_l2pf_t *pf, cudaStream_t stream)
{
    if (!tdm_cuda_l2pf_ok(pf))
        return TDM_ERR_INVAL;
    if (m == 0)
        return TDM_OK;
    /* prefetch blocks of 1024 threads: a quarter as many as the attention's 128-thread ones */
    const uint32_t px = l2pf_on(pf) ? TDM_CUDA_L2PF_BLOCKS / 4 : 0;
    const tdm_cuda_l2pf_t none = {NULL, 0, 0, 0}, p = l2pf_on(pf) ? *pf : none;
    launch(argmax_kernel, m + px, 1024, 0, stream, logits, V, ret_ids, m, p);
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
