/*
 * xfer_ops.cu — XXH64 on the GPU for the PD transfer's KV checksums (xfer_ops.h). One thread per
 * segment (one page of one layer and sub-buffer: 4 KiB for the demo model at page 16): XXH64 is
 * serial across its 32-byte stripes, and a room has n_pages × layers × sub-buffers segments, so
 * the parallelism is across segments. The algorithm is XXH64 as specified by xxHash (the
 * reference libxxhash implements): four lanes over 32-byte stripes, merge, tail of 8/4/1-byte
 * steps, avalanche; inputs read little-endian like the CPU on x86-64.
 *
 * The KV gather (xfer_ops.h): units of up to 4 KiB (one page of one region, or a 4 KiB piece of a
 * larger page), one warp each: every lane issues its 8 16-byte loads before the stores, so a warp
 * has the whole 4 KiB in flight; the grid is sized to what stays resident on the SMs and strides
 * over the units, consecutive warps on consecutive bytes. The runs come as __grid_constant__
 * parameters (read from the constant bank, no upload); a unit finds its run by a warp-uniform
 * binary search over the runs' first room pages.
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

#define KVG_THREADS 128
#define KVG_WARPS (KVG_THREADS / 32)
#define KVG_UNROLL 8
#define KVG_CHUNK (32 * KVG_UNROLL * 16) /* bytes of a unit: one pass of a warp's 16-byte loads */

int tdm_cuda_kv_gather_variant = 0;

/* The runs of one launch: first[r] is run r's first page in the room (room pages 0..n_pages-1). */
template <int CAP> struct kvg_args {
    const uint8_t *src;
    uint8_t *dst;
    tdm_cuda_kv_map_t m;
    uint32_t n_runs, n_pages, chunks_per_page, n_units; /* n_units < 2^31: the host splits */
    int streaming;
    uint32_t first[CAP], sp[CAP], dp[CAP];
};

template <typename V> __device__ __forceinline__ V kvg_ld(const V *p, int streaming)
{
    return streaming ? __ldcs(p) : __ldg(p);
}

template <typename V> __device__ __forceinline__ void kvg_st(V *p, V v, int streaming)
{
    if (streaming)
        __stcs(p, v);
    else
        *p = v;
}

/* One warp copies n bytes s -> d with loads of V where both are equally aligned mod sizeof(V):
 * a byte head to V's alignment, the vectors (KVG_UNROLL per lane in flight), a byte tail. */
template <typename V>
__device__ __forceinline__ void kvg_warp_copy(uint32_t lane, const uint8_t *__restrict__ s,
                                              uint8_t *__restrict__ d, uint32_t n, int streaming)
{
    uint32_t head = (uint32_t)(-(uintptr_t)s) & (sizeof(V) - 1);
    if (head > n)
        head = n;
    if (lane < head)
        d[lane] = s[lane];
    const uint32_t nv = (n - head) / sizeof(V);
    const V *__restrict__ vs = (const V *)(s + head);
    V *__restrict__ vd = (V *)(d + head);
    for (uint32_t b = 0; b < nv; b += 32 * KVG_UNROLL) {
        V v[KVG_UNROLL];
#pragma unroll
        for (int u = 0; u < KVG_UNROLL; u++) {
            uint32_t i = b + u * 32 + lane;
            if (i < nv)
                v[u] = kvg_ld(vs + i, streaming);
        }
#pragma unroll
        for (int u = 0; u < KVG_UNROLL; u++) {
            uint32_t i = b + u * 32 + lane;
            if (i < nv)
                kvg_st(vd + i, v[u], streaming);
        }
    }
    const uint32_t done = head + nv * (uint32_t)sizeof(V);
    if (lane < n - done)
        d[done + lane] = s[done + lane];
}

/* units: (num_layers, n_sub, n_pages, chunks_per_page), one warp each; a chunk past its
 * sub-buffer's page_stride (short scale pages) is empty. */
template <int CAP>
__global__ void __launch_bounds__(KVG_THREADS)
    kv_gather_kernel(const __grid_constant__ kvg_args<CAP> a)
{
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t warps = gridDim.x * KVG_WARPS;
    const uint32_t per_region = a.n_pages * a.chunks_per_page;
    for (uint32_t u = blockIdx.x * KVG_WARPS + threadIdx.x / 32; u < a.n_units; u += warps) {
        const uint32_t region = u / per_region, rem = u % per_region;
        const uint32_t p = rem / a.chunks_per_page, c = rem % a.chunks_per_page;
        const uint32_t layer = region / a.m.n_sub, sub = region % a.m.n_sub;
        const uint64_t stride = a.m.page_stride[sub], off = (uint64_t)c * KVG_CHUNK;
        if (off >= stride)
            continue;
        const uint32_t n = (uint32_t)(stride - off < KVG_CHUNK ? stride - off : KVG_CHUNK);
        uint32_t lo = 0, hi = a.n_runs - 1; /* the last run whose first page <= p */
        while (lo < hi) {
            uint32_t mid = (lo + hi + 1) / 2;
            if (a.first[mid] <= p)
                lo = mid;
            else
                hi = mid - 1;
        }
        const uint32_t k = p - a.first[lo];
        const uint8_t *s = a.src + layer * a.m.src_layer_bytes + a.m.src_sub_offset[sub] +
                           (uint64_t)(a.sp[lo] + k) * stride + off;
        uint8_t *d = a.dst + layer * a.m.dst_layer_bytes + a.m.dst_sub_offset[sub] +
                     (uint64_t)(a.dp[lo] + k) * stride + off;
        const uintptr_t x = (uintptr_t)s ^ (uintptr_t)d;
        if ((x & 15) == 0)
            kvg_warp_copy<uint4>(lane, s, d, n, a.streaming);
        else if ((x & 7) == 0)
            kvg_warp_copy<uint2>(lane, s, d, n, a.streaming);
        else if ((x & 3) == 0)
            kvg_warp_copy<unsigned int>(lane, s, d, n, a.streaming);
        else
            kvg_warp_copy<unsigned char>(lane, s, d, n, a.streaming);
    }
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

/* Resident blocks of one instance on this device: the grid's size (SMs x blocks per SM). */
template <int CAP> static tdm_status_t kvg_grid(uint32_t *ret_blocks)
{
    static int per_sm; /* the kernel's occupancy: the same on every call, racing writers agree */
    int dev, sms, occ = per_sm;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return launch_status("kv gather (device attributes)");
    if (occ == 0) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kv_gather_kernel<CAP>, KVG_THREADS,
                                                          0) != cudaSuccess ||
            occ < 1)
            return launch_status("kv gather (occupancy)");
        per_sm = occ;
    }
    *ret_blocks = (uint32_t)sms * (uint32_t)occ;
    return TDM_OK;
}

/* One launch of the runs from runs[*io_i] less its first *io_skip pages on: up to CAP runs and
 * max_pages room pages (a run that does not fit is cut, the rest left for the next launch). */
template <int CAP>
static tdm_status_t kvg_launch(const uint8_t *src, uint8_t *dst, const tdm_cuda_kv_map_t *m,
                               const tdm_cuda_page_run_t *runs, uint32_t n_runs, uint32_t *io_i,
                               uint32_t *io_skip, uint32_t max_pages, uint32_t chunks_per_page,
                               cudaStream_t stream, uint32_t *io_launches)
{
    kvg_args<CAP> a; /* 12 bytes a run: 3 KiB at most */
    uint32_t i = *io_i, skip = *io_skip, n = 0, pages = 0, grid = 0;
    while (i < n_runs && n < CAP && pages < max_pages) {
        const uint32_t left = runs[i].n_pages - skip;
        const uint32_t take = left < max_pages - pages ? left : max_pages - pages;
        if (take) {
            a.first[n] = pages;
            a.sp[n] = runs[i].src_page + skip;
            a.dp[n] = runs[i].dst_page + skip;
            n++;
            pages += take;
        }
        if (take == left) {
            i++;
            skip = 0;
        } else {
            skip += take;
        }
    }
    *io_i = i;
    *io_skip = skip;
    if (n == 0)
        return TDM_OK;
    TDM_TRY(kvg_grid<CAP>(&grid));
    a.src = src;
    a.dst = dst;
    a.m = *m;
    a.n_runs = n;
    a.n_pages = pages;
    a.chunks_per_page = chunks_per_page;
    a.n_units = pages * chunks_per_page * m->num_layers * m->n_sub;
    a.streaming = tdm_cuda_kv_gather_variant == 1;
    uint32_t blocks = (a.n_units + KVG_WARPS - 1) / KVG_WARPS;
    if (blocks > grid)
        blocks = grid;
    kv_gather_kernel<CAP><<<blocks, KVG_THREADS, 0, stream>>>(a);
    TDM_TRY(launch_status("kv gather"));
    (*io_launches)++;
    return TDM_OK;
}

extern "C" tdm_status_t tdm_cuda_kv_gather(const uint8_t *src_base, uint8_t *dst_base,
                                           const tdm_cuda_kv_map_t *map,
                                           const tdm_cuda_page_run_t *runs, uint32_t n_runs,
                                           cudaStream_t stream, uint32_t *ret_launches)
{
    uint64_t max_stride = 0;
    uint32_t launches = 0, i = 0, skip = 0;
    if (!map || map->n_sub > TDM_KV_SUB_MAX || (n_runs && (!src_base || !dst_base || !runs)))
        return TDM_ERR_INVAL;
    for (uint32_t s = 0; s < map->n_sub; s++)
        max_stride = map->page_stride[s] > max_stride ? map->page_stride[s] : max_stride;
    const uint64_t cpp = (max_stride + KVG_CHUNK - 1) / KVG_CHUNK;
    const uint64_t per_page = cpp * map->num_layers * map->n_sub;
    if (per_page > 0x7fffffffull)
        return TDM_ERR_RANGE;
    /* a launch's units (room pages x per_page) stay below 2^31: 32-bit index arithmetic */
    const uint32_t max_pages = per_page ? (uint32_t)(0x7fffffffull / per_page) : 0;
    static_assert(TDM_CUDA_KV_GATHER_RUNS == 256, "the largest instance below");
    while (per_page && i < n_runs) {
        tdm_status_t st = n_runs - i <= 16
                              ? kvg_launch<16>(src_base, dst_base, map, runs, n_runs, &i, &skip,
                                               max_pages, (uint32_t)cpp, stream, &launches)
                              : kvg_launch<256>(src_base, dst_base, map, runs, n_runs, &i, &skip,
                                                max_pages, (uint32_t)cpp, stream, &launches);
        if (st != TDM_OK)
            return st;
    }
    if (ret_launches)
        *ret_launches = launches;
    return TDM_OK;
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
