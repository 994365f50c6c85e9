/*
 * xfer_ops.cu — XXH64 on the GPU for the PD transfer's KV checksums (xfer_ops.h). One thread per
 * segment (one page of one layer and sub-buffer: 4 KiB for the demo model at page 16): XXH64 is
 * serial across its 32-byte stripes, and a room has n_pages × layers × sub-buffers segments, so
 * the parallelism is across segments. The algorithm is XXH64 as specified by xxHash (the
 * reference libxxhash implements): four lanes over 32-byte stripes, merge, tail of 8/4/1-byte
 * steps, avalanche; inputs read little-endian like the CPU on x86-64.
 *
 * The gather copy: one block per segment (a run of pages of one region, split by the caller to at
 * most TDM_CUDA_GATHER_SEG_MAX bytes), 16-byte vectors, four loads in flight per thread before
 * their stores; a segment whose source and destination differ in alignment mod 16 falls back to
 * bytes (KV page strides are multiples of 16 and the pools 256-aligned, so that is the odd case).
 */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include <tdm/log.h>
}

#include "xfer_ops.h"

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

__device__ __forceinline__ uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

__device__ __forceinline__ uint64_t rd64(const uint8_t *p, bool aligned)
{
    if (aligned)
        return *(const uint64_t *)p;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

__device__ __forceinline__ uint32_t rd32(const uint8_t *p, bool aligned)
{
    if (aligned)
        return *(const uint32_t *)p;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

__device__ __forceinline__ uint64_t xround(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = rotl64(acc, 31);
    return acc * P1;
}

__device__ __forceinline__ uint64_t xmerge(uint64_t acc, uint64_t v)
{
    acc ^= xround(0, v);
    return acc * P1 + P4;
}

__device__ uint64_t dev_xxh64(const uint8_t *p, uint64_t len, uint64_t seed)
{
    /* aligned loads stay aligned: the stripes and the 8-byte tail steps advance by 8 */
    const bool al = ((uintptr_t)p & 7) == 0;
    const uint8_t *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        const uint8_t *limit = end - 32;
        do {
            v1 = xround(v1, rd64(p, al));
            v2 = xround(v2, rd64(p + 8, al));
            v3 = xround(v3, rd64(p + 16, al));
            v4 = xround(v4, rd64(p + 24, al));
            p += 32;
        } while (p <= limit);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xmerge(h, v1);
        h = xmerge(h, v2);
        h = xmerge(h, v3);
        h = xmerge(h, v4);
    } else {
        h = seed + P5;
    }
    h += len;
    while (end - p >= 8) {
        h ^= xround(0, rd64(p, al));
        h = rotl64(h, 27) * P1 + P4;
        p += 8;
    }
    if (end - p >= 4) {
        h ^= (uint64_t)rd32(p, al) * P1;
        h = rotl64(h, 23) * P2 + P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)(*p) * P5;
        h = rotl64(h, 11) * P1;
        p++;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

struct seg_args {
    const uint8_t *base;
    uint64_t layer_bytes;
    uint64_t sub_offset[TDM_KV_SUB_MAX];
    uint64_t page_stride[TDM_KV_SUB_MAX];
    uint32_t n_sub, num_layers, n_pages;
};

/* out: (n_pages, num_layers, n_sub); one thread per segment */
__global__ void seg_hash_kernel(seg_args a, const uint32_t *pages, uint64_t *out)
{
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t per_page = (uint64_t)a.num_layers * a.n_sub;
    if (i >= per_page * a.n_pages)
        return;
    uint32_t pg = (uint32_t)(i / per_page);
    uint32_t rem = (uint32_t)(i % per_page);
    uint32_t layer = rem / a.n_sub, s = rem % a.n_sub;
    const uint8_t *p = a.base + (uint64_t)layer * a.layer_bytes + a.sub_offset[s] +
                       (uint64_t)pages[pg] * a.page_stride[s];
    out[i] = dev_xxh64(p, a.page_stride[s], 0);
}

__global__ void one_hash_kernel(const uint8_t *p, uint64_t len, uint64_t seed, uint64_t *out)
{
    *out = dev_xxh64(p, len, seed);
}

#define GATHER_THREADS 256
#define GATHER_UNROLL 4
static_assert(TDM_CUDA_GATHER_SEG_MAX == GATHER_THREADS * GATHER_UNROLL * 16,
              "a split segment is one unrolled pass of a block");

/* segs: (gridDim.x); block b copies segment b */
__global__ void __launch_bounds__(GATHER_THREADS)
    gather_kernel(const uint8_t *__restrict__ src, uint8_t *__restrict__ dst,
                  const tdm_cuda_seg_t *__restrict__ segs)
{
    const tdm_cuda_seg_t sg = segs[blockIdx.x];
    const uint8_t *s = src + sg.src_off;
    uint8_t *d = dst + sg.dst_off;
    const uint64_t n = sg.bytes, bd = blockDim.x;
    uint64_t head = n, nvec = 0;
    if ((((uintptr_t)s ^ (uintptr_t)d) & 15) == 0) {
        head = (16 - ((uintptr_t)s & 15)) & 15;
        if (head > n)
            head = n;
        nvec = (n - head) / 16;
    }
    const uint4 *__restrict__ vs = (const uint4 *)(s + head);
    uint4 *__restrict__ vd = (uint4 *)(d + head);
    uint64_t i = threadIdx.x;
    for (; i + (GATHER_UNROLL - 1) * bd < nvec; i += GATHER_UNROLL * bd) {
        uint4 v[GATHER_UNROLL];
#pragma unroll
        for (int u = 0; u < GATHER_UNROLL; u++)
            v[u] = vs[i + u * bd];
#pragma unroll
        for (int u = 0; u < GATHER_UNROLL; u++)
            vd[i + u * bd] = v[u];
    }
    for (; i < nvec; i += bd)
        vd[i] = vs[i];
    /* the unaligned head (or the whole segment) and the tail after the vectors */
    for (uint64_t j = threadIdx.x; j < head; j += bd)
        d[j] = s[j];
    for (uint64_t j = head + nvec * 16 + threadIdx.x; j < n; j += bd)
        d[j] = s[j];
}

/* The status of the launch just queued: TDM_ERR_CUDA (logged, naming what) when it failed. */
static tdm_status_t launch_status(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        tdm_err(TDM_SUB_CUDA, "msg=\"%s launch failed\" err=\"%s\"", what, cudaGetErrorString(e));
        return TDM_ERR_CUDA;
    }
    return TDM_OK;
}

extern "C" tdm_status_t tdm_cuda_gather_copy(const uint8_t *src_base, uint8_t *dst_base,
                                             const tdm_cuda_seg_t *d_segs, uint32_t n_segs,
                                             cudaStream_t stream)
{
    if (n_segs && (!src_base || !dst_base || !d_segs))
        return TDM_ERR_INVAL;
    if (n_segs > 0x7fffffffu)
        return TDM_ERR_RANGE;
    if (n_segs == 0)
        return TDM_OK;
    gather_kernel<<<n_segs, GATHER_THREADS, 0, stream>>>(src_base, dst_base, d_segs);
    return launch_status("gather copy");
}

extern "C" tdm_status_t tdm_cuda_kv_segment_hashes(const tdm_kv_buffers_t *kv,
                                                   const uint32_t *d_pages, uint32_t n_pages,
                                                   uint64_t *d_out, cudaStream_t stream)
{
    if (!kv || !kv->layout || !kv->base || (!d_pages && n_pages) || (!d_out && n_pages) ||
        kv->layout->n_sub > TDM_KV_SUB_MAX)
        return TDM_ERR_INVAL;
    if (n_pages == 0)
        return TDM_OK;
    seg_args a;
    const tdm_kv_layout_t *l = kv->layout;
    a.base = kv->base;
    a.layer_bytes = kv->layer_bytes;
    for (uint32_t s = 0; s < TDM_KV_SUB_MAX; s++) {
        a.sub_offset[s] = s < l->n_sub ? kv->sub_offset[s] : 0;
        a.page_stride[s] = s < l->n_sub ? l->sub[s].page_stride : 0;
    }
    a.n_sub = l->n_sub;
    a.num_layers = l->num_layers;
    a.n_pages = n_pages;
    uint64_t n = (uint64_t)n_pages * l->num_layers * l->n_sub;
    const unsigned threads = 128;
    uint64_t blocks = (n + threads - 1) / threads;
    if (blocks == 0 || blocks > 0x7fffffffull)
        return TDM_ERR_RANGE;
    seg_hash_kernel<<<(unsigned)blocks, threads, 0, stream>>>(a, d_pages, d_out);
    return launch_status("segment hash");
}

extern "C" tdm_status_t tdm_cuda_xxh64_host(const void *buf, size_t len, size_t misalign,
                                            uint64_t seed, uint64_t *ret_hash)
{
    uint8_t *d = NULL;
    uint64_t *d_out = NULL, h = 0;
    tdm_status_t st = TDM_ERR_CUDA;
    cudaError_t e = cudaSuccess;
    if ((!buf && len) || misalign > 7 || !ret_hash)
        return TDM_ERR_INVAL;
    if ((e = cudaMalloc(&d, len + 8)) != cudaSuccess || (e = cudaMalloc(&d_out, 8)) != cudaSuccess)
        goto out;
    if (len && (e = cudaMemcpy(d + misalign, buf, len, cudaMemcpyHostToDevice)) != cudaSuccess)
        goto out;
    one_hash_kernel<<<1, 1>>>(d + misalign, len, seed, d_out);
    if ((e = cudaGetLastError()) != cudaSuccess ||
        (e = cudaMemcpy(&h, d_out, 8, cudaMemcpyDeviceToHost)) != cudaSuccess)
        goto out;
    *ret_hash = h;
    st = TDM_OK;
out:
    if (st != TDM_OK)
        tdm_err(TDM_SUB_CUDA, "msg=\"xxh64 test helper failed\" err=\"%s\"", cudaGetErrorString(e));
    cudaFree(d_out);
    cudaFree(d);
    return st;
}
