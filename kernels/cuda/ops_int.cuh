/*
 * ops_int.cuh — what the kernel files of the GPU forward share (ops.cu, ops_gemv.cu, ops_gemm.cu,
 * ops_attn.cu, ops_attn_mma.cu): the warp helpers, the PDL launch wrappers, the L2 prefetch
 * device code, fp8 and bf16 conversions, the GEMV input staging, the tensor-core MMA and the KV
 * cache writes. Each file keeps its own copy of the PDL-early constant (c_pdl_early; no
 * relocatable device code): tdm_cuda_set_pdl_early (ops.cu) sets every copy through the
 * setters TDM_OPS_PDL_SETTER defines.
 */
#ifndef TDM_KERNELS_CUDA_OPS_INT_CUH
#define TDM_KERNELS_CUDA_OPS_INT_CUH

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
extern int tdm_cuda_g_pdl;    /* tdm_cuda_set_pdl (ops.cu) */
int tdm_cuda_narrow_v1(void); /* ops.cu: TDM_CUDA_NARROW_V1 */

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
static __constant__ int c_pdl_early;

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

/* The I2 mark a kernel carries (cuda_int.h tdm_cuda_mark_t): call after pdl_sync, so that it
 * lands once every kernel before this one has completed (a collective before it included). One
 * 4-byte store into host-mapped memory by one thread: no fence, the host polls it. */
static __device__ __forceinline__ void mark_store(const tdm_cuda_mark_t &mk)
{
    if (mk.p && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
        *(volatile uint32_t *)mk.p = mk.v;
}

/* Each kernel file's setter of its c_pdl_early (TDM_OPS_PDL_SETTER), called by
 * tdm_cuda_set_pdl_early. */
#define TDM_OPS_PDL_SETTER(name)                                                                   \
    cudaError_t tdm_cuda_pdl_early_##name(int v, cudaStream_t s)                                   \
    {                                                                                              \
        return cudaMemcpyToSymbolAsync(c_pdl_early, &v, sizeof v, 0, cudaMemcpyHostToDevice, s);   \
    }
cudaError_t tdm_cuda_pdl_early_ops(int v, cudaStream_t s);
cudaError_t tdm_cuda_pdl_early_gemv(int v, cudaStream_t s);
cudaError_t tdm_cuda_pdl_early_gemm(int v, cudaStream_t s);
cudaError_t tdm_cuda_pdl_early_attn(int v, cudaStream_t s);
cudaError_t tdm_cuda_pdl_early_attn_mma(int v, cudaStream_t s);

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
    cfg.numAttrs = tdm_cuda_g_pdl ? 1 : 0;
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

/* launch() with thread-block clusters of (1, 1, clz) blocks (clz 1: none) and smem bytes of
 * dynamic shared memory (past 48 KB the caller raises the kernel's limit first). */
template <typename... KArgs, typename... Args>
static void launch_cl_smem(void (*k)(KArgs...), dim3 grid, dim3 block, unsigned clz, size_t smem,
                           cudaStream_t s, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    unsigned na = 0;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    if (tdm_cuda_g_pdl) {
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

template <typename... KArgs, typename... Args>
static void launch_cl(void (*k)(KArgs...), dim3 grid, dim3 block, unsigned clz, cudaStream_t s,
                      Args... args)
{
    launch_cl_smem(k, grid, block, clz, 0, s, args...);
}

/* ---------------------------------------------------------------- L2 prefetch (cuda_int.h) */

#define L2PF_CHUNK 8192u /* bytes per cp.async.bulk.prefetch instruction */

static inline int l2pf_on(const tdm_cuda_l2pf_t *pf)
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
static __device__ inline uint8_t fp8_encode(float x)
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

static __device__ inline float block_sum(float v, float *sh)
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

static __device__ __forceinline__ float silu(float g)
{
    return g / (1.0f + expf(-g));
}

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

static inline int sm_count(void)
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

static __device__ __forceinline__ uint8_t *kv_slot(const tdm_cuda_kv_t &kv, uint32_t layer, int sub,
                                                   uint32_t page, uint32_t slot)
{
    return kv.base + (uint64_t)layer * kv.layer_bytes + kv.off[sub] +
           (uint64_t)page * kv.page_stride[sub] + (uint64_t)slot * kv.bpt[sub];
}

/* Write one head's hd values (lane holds elements lane + 32 j) to the cache. */
static __device__ inline void write_head(const tdm_cuda_kv_t &kv, uint32_t layer, int sub,
                                         uint32_t page, uint32_t slot, uint32_t head,
                                         const float *v, int lane)
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
/* ops_attn.cu: merges the splits of the split-K attentions (ops_attn.cu, ops_attn_mma.cu) */
__global__ void attn_combine_kernel(uint32_t H, uint32_t hd, uint32_t S, const float *part_o,
                                    const float *part_ml, float *out, uint16_t *out_bf16);

#endif
