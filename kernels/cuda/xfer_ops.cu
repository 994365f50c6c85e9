/*
 * xfer_ops.cu — XXH64 on the GPU for the PD transfer's KV checksums (xfer_ops.h). One thread per
 * segment (one page of one layer and sub-buffer: 4 KiB for the demo model at page 16): XXH64 is
 * serial across its 32-byte stripes, and a room has n_pages × layers × sub-buffers segments, so
 * the parallelism is across segments. The algorithm is XXH64 as specified by xxHash (the
 * reference libxxhash implements): four lanes over 32-byte stripes, merge, tail of 8/4/1-byte
 * steps, avalanche; inputs read little-endian like the CPU on x86-64.
 *
 * The KV gather (xfer_ops.h), default: a block of 128 threads per 8 KiB piece of one run of one
 * region, 4 16-byte loads per thread in flight before their stores, piece, run and region from
 * a 3-D grid (no search, no division); the runs come as __grid_constant__ parameters (read from
 * the constant bank, no upload), the launch's instance sized to its run count (one run: ~170
 * bytes of parameters). Where a run grid would be mostly empty (runs of very different lengths)
 * the blocks walk the region's room bytes and find their run by a binary search. The search-only
 * kernel and the warp kernel of runs 9-12 stay selectable by number
 * (tdm_cuda_kv_gather_variant) for the bench's A/B.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the KV gather ----
 * Variants (tdm_cuda_kv_gather_variant, a bench seam; xfer_ops.h lists them): the block kernels
 * with the run grid (default) or the search grid only, and the warp kernel of runs 9-12 (a
 * persistent grid of warps over 4 KiB page chunks). */

int tdm_cuda_kv_gather_variant = 0;

/* The runs of one launch: first[r] is run r's first page in the room (room pages 0..n_pages-1,
 * strictly increasing: runs of no page are dropped when packed). */
template <int CAP> struct kvg_runs {
    uint32_t n_runs, n_pages;
    uint32_t first[CAP], sp[CAP], dp[CAP];
};

/* Pack the runs from runs[*io_i] less its first *io_skip pages on: up to CAP runs and max_pages
 * room pages (a run that does not fit is cut, the rest left for the next launch). */
template <int CAP>
static void kvg_pack(const tdm_cuda_page_run_t *runs, uint32_t n_runs, uint32_t *io_i,
                     uint32_t *io_skip, uint32_t max_pages, kvg_runs<CAP> *r)
{
    uint32_t i = *io_i, skip = *io_skip, n = 0, pages = 0;
    while (i < n_runs && n < CAP && pages < max_pages) {
        const uint32_t left = runs[i].n_pages - skip;
        const uint32_t take = left < max_pages - pages ? left : max_pages - pages;
        if (take) {
            r->first[n] = pages;
            r->sp[n] = runs[i].src_page + skip;
            r->dp[n] = runs[i].dst_page + skip;
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
    r->n_runs = n;
    r->n_pages = pages;
    *io_i = i;
    *io_skip = skip;
}

/* n bytes s -> d by the T threads of a block (or, with T = 32, one warp) with loads of V where
 * both are equally aligned mod sizeof(V): a byte head to V's alignment, the vectors (U per
 * thread in flight before their stores), a byte tail. */
template <typename V, int T, int U>
__device__ __forceinline__ void kvg_copy(uint32_t tid, const uint8_t *__restrict__ s,
                                         uint8_t *__restrict__ d, uint32_t n)
{
    uint32_t head = (uint32_t)(-(uintptr_t)s) & (sizeof(V) - 1);
    if (head > n)
        head = n;
    if (tid < head)
        d[tid] = s[tid];
    const uint32_t nv = (n - head) / sizeof(V);
    const V *__restrict__ vs = (const V *)(s + head);
    V *__restrict__ vd = (V *)(d + head);
    for (uint32_t b = 0; b < nv; b += T * U) {
        V v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint32_t i = b + u * T + tid;
            if (i < nv)
                v[u] = __ldg(vs + i);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint32_t i = b + u * T + tid;
            if (i < nv)
                vd[i] = v[u];
        }
    }
    const uint32_t done = head + nv * (uint32_t)sizeof(V);
    if (tid < n - done)
        d[done + tid] = s[done + tid];
}

/* The widest vector both pointers allow. */
template <int T, int U>
__device__ __forceinline__ void kvg_copy_any(uint32_t tid, const uint8_t *s, uint8_t *d, uint32_t n)
{
    const uintptr_t x = (uintptr_t)s ^ (uintptr_t)d;
    if ((x & 15) == 0)
        kvg_copy<uint4, T, U>(tid, s, d, n);
    else if ((x & 7) == 0)
        kvg_copy<uint2, T, U>(tid, s, d, n);
    else if ((x & 3) == 0)
        kvg_copy<unsigned int, T, U>(tid, s, d, n);
    else
        kvg_copy<unsigned char, T, U>(tid, s, d, n);
}

/* ---- the block kernels (variants 0, 2) ----
 * Blocks of KVB_T threads, each with KVB_U 16-byte loads in flight before its stores: a block
 * moves a piece of up to KVB_BYTES (8 KiB: one page of one region in the serving geometry).
 *
 * Search grid (x: pieces of a region's room bytes, y: sub-buffer, z: layer): a region's room
 * bytes are its runs back to back (run r from room byte first[r] * stride, contiguous on both
 * sides); block x copies [x * KVB_BYTES, + KVB_BYTES) of them, cut where a run ends (pages
 * shorter than a piece: several runs a block, one after the other). The run comes from a binary
 * search over first[] (none for one run): dependent loads from the parameters' constant bank.
 *
 * Run grid (x: pieces of one run, y: run, z: layer x n_sub + sub), for launches of several runs
 * whose pieces the grid does not over-count by more than half (empty blocks exit): a block's
 * run is its y, so its loads of the parameters (run, stride, offsets) do not wait on each other;
 * run 1 measured scattered rooms of 2-8 runs 0.3-0.6 us slower (GPU time) than one-run rooms of
 * the same bytes with the search. z / n_sub by a multiply (n_sub <= 4, z < 2^16: exact). */
#define KVB_T 128
#define KVB_U 4
#define KVB_BYTES (KVB_T * KVB_U * 16)

template <int CAP> struct kvb_args {
    const uint8_t *src;
    uint8_t *dst;
    tdm_cuda_kv_map_t m;
    kvg_runs<CAP> r;
};

template <int CAP> struct kvr_args {
    const uint8_t *src;
    uint8_t *dst;
    tdm_cuda_kv_map_t m;
    uint64_t nsub_magic; /* ceil(2^32 / n_sub) */
    struct {
        uint32_t sp, dp, n; /* one run's fields side by side: one constant-cache line */
    } run[CAP];
};

template <int CAP>
__global__ void __launch_bounds__(KVB_T) kvb_kernel(const __grid_constant__ kvb_args<CAP> a)
{
    const uint32_t sub = blockIdx.y, layer = blockIdx.z, tid = threadIdx.x;
    const uint64_t stride = a.m.page_stride[sub], total = (uint64_t)a.r.n_pages * stride;
    uint64_t o = (uint64_t)blockIdx.x * KVB_BYTES;
    if (o >= total)
        return; /* a shorter sub-buffer (fp8 scales) than the grid's widest */
    const uint64_t end = o + KVB_BYTES < total ? o + KVB_BYTES : total;
    const uint8_t *rs = a.src + layer * a.m.src_layer_bytes + a.m.src_sub_offset[sub];
    uint8_t *rd = a.dst + layer * a.m.dst_layer_bytes + a.m.dst_sub_offset[sub];
    uint32_t r = 0;
    if (CAP > 1) { /* the last run that starts at or before o */
        uint32_t hi = a.r.n_runs - 1;
        while (r < hi) {
            uint32_t mid = (r + hi + 1) / 2;
            if ((uint64_t)a.r.first[mid] * stride <= o)
                r = mid;
            else
                hi = mid - 1;
        }
    }
    for (;;) {
        const uint64_t rb = (uint64_t)a.r.first[r] * stride;
        const uint64_t re =
            CAP > 1 && r + 1 < a.r.n_runs ? (uint64_t)a.r.first[r + 1] * stride : total;
        const uint64_t se = re < end ? re : end;
        kvg_copy_any<KVB_T, KVB_U>(tid, rs + (uint64_t)a.r.sp[r] * stride + (o - rb),
                                   rd + (uint64_t)a.r.dp[r] * stride + (o - rb),
                                   (uint32_t)(se - o));
        o = se;
        if (CAP == 1 || o >= end)
            break;
        r++;
    }
}

template <int CAP>
__global__ void __launch_bounds__(KVB_T) kvr_kernel(const __grid_constant__ kvr_args<CAP> a)
{
    const uint32_t z = blockIdx.z, tid = threadIdx.x;
    const uint32_t layer = (uint32_t)((z * a.nsub_magic) >> 32), sub = z - layer * a.m.n_sub;
    const uint32_t r = blockIdx.y;
    const uint64_t stride = a.m.page_stride[sub], len = (uint64_t)a.run[r].n * stride;
    const uint64_t o = (uint64_t)blockIdx.x * KVB_BYTES;
    if (o >= len)
        return; /* a shorter run, or sub-buffer, than the grid's widest */
    kvg_copy_any<KVB_T, KVB_U>(tid,
                               a.src + layer * a.m.src_layer_bytes + a.m.src_sub_offset[sub] +
                                   (uint64_t)a.run[r].sp * stride + o,
                               a.dst + layer * a.m.dst_layer_bytes + a.m.dst_sub_offset[sub] +
                                   (uint64_t)a.run[r].dp * stride + o,
                               (uint32_t)(len - o < KVB_BYTES ? len - o : KVB_BYTES));
}

/* One launch of the next runs: the run grid where allowed and it fits, else the search grid. */
template <int CAP>
static tdm_status_t kvb_launch(const uint8_t *src, uint8_t *dst, const tdm_cuda_kv_map_t *m,
                               const tdm_cuda_page_run_t *runs, uint32_t n_runs, uint32_t *io_i,
                               uint32_t *io_skip, uint32_t max_pages, uint64_t max_stride,
                               int run_grid, cudaStream_t stream, uint32_t *io_launches)
{
    kvb_args<CAP> a;
    kvg_pack<CAP>(runs, n_runs, io_i, io_skip, max_pages, &a.r);
    const uint32_t n = a.r.n_runs;
    if (n == 0)
        return TDM_OK;
    uint64_t xmax = 0, pieces = 0;
    for (uint32_t r = 0; CAP > 1 && run_grid && r < n; r++) {
        const uint32_t np = (r + 1 < n ? a.r.first[r + 1] : a.r.n_pages) - a.r.first[r];
        const uint64_t x = ((uint64_t)np * max_stride + KVB_BYTES - 1) / KVB_BYTES;
        xmax = x > xmax ? x : xmax;
        pieces += x;
    }
    if (CAP > 1 && run_grid && xmax * n <= 2 * pieces && xmax <= 0x7fffffffull &&
        (uint64_t)m->num_layers * m->n_sub <= 65535) {
        kvr_args<CAP> b;
        b.src = src;
        b.dst = dst;
        b.m = *m;
        b.nsub_magic = ((1ull << 32) + m->n_sub - 1) / m->n_sub;
        for (uint32_t r = 0; r < n; r++) {
            b.run[r].sp = a.r.sp[r];
            b.run[r].dp = a.r.dp[r];
            b.run[r].n = (r + 1 < n ? a.r.first[r + 1] : a.r.n_pages) - a.r.first[r];
        }
        kvr_kernel<CAP><<<dim3((unsigned)xmax, n, m->num_layers * m->n_sub), KVB_T, 0, stream>>>(b);
    } else {
        a.src = src;
        a.dst = dst;
        a.m = *m;
        const uint64_t bx = ((uint64_t)a.r.n_pages * max_stride + KVB_BYTES - 1) / KVB_BYTES;
        kvb_kernel<CAP><<<dim3((unsigned)bx, m->n_sub, m->num_layers), KVB_T, 0, stream>>>(a);
    }
    TDM_TRY(launch_status("kv gather"));
    (*io_launches)++;
    return TDM_OK;
}

/* All runs by the block kernels: one launch per 256 runs, the parameters sized to the runs (one
 * run: ~170 bytes, no list; up to 16: ~350; up to 256: ~3.2 KiB; run 1: a contiguous room through
 * the 256-run instance took 0.3-0.5 us more GPU time than through the one-run one). */
static tdm_status_t kvb_gather(const uint8_t *src, uint8_t *dst, const tdm_cuda_kv_map_t *m,
                               const tdm_cuda_page_run_t *runs, uint32_t n_runs,
                               uint64_t max_stride, int run_grid, cudaStream_t stream,
                               uint32_t *io_launches)
{
    uint32_t i = 0, skip = 0;
    if (m->num_layers > 65535)
        return TDM_ERR_RANGE; /* gridDim.z of the search grid */
    /* a launch's pieces (room pages x max_stride / KVB_BYTES) stay below 2^31 */
    const uint64_t mp = 0x7fffffffull * KVB_BYTES / max_stride;
    const uint32_t max_pages = mp > UINT32_MAX ? UINT32_MAX : (uint32_t)mp;
    if (max_pages == 0)
        return TDM_ERR_RANGE;
    while (i < n_runs) {
        const uint32_t left = n_runs - i;
        tdm_status_t st =
            left > 16 ? kvb_launch<256>(src, dst, m, runs, n_runs, &i, &skip, max_pages, max_stride,
                                        run_grid, stream, io_launches)
            : left > 1 ? kvb_launch<16>(src, dst, m, runs, n_runs, &i, &skip, max_pages, max_stride,
                                        run_grid, stream, io_launches)
                       : kvb_launch<1>(src, dst, m, runs, n_runs, &i, &skip, max_pages, max_stride,
                                       run_grid, stream, io_launches);
        if (st != TDM_OK)
            return st;
    }
    return TDM_OK;
}

/* ---- the warp kernel (variant 1: runs 9-12's default) ----
 * units (num_layers, n_sub, n_pages, chunks_per_page) of up to 4 KiB of one page of one region,
 * one warp each, 8 16-byte loads a lane; a grid of the resident blocks strides over the units,
 * a unit finds its run by a binary search over first[]. */
#define KVW_THREADS 128
#define KVW_WARPS (KVW_THREADS / 32)
#define KVW_UNROLL 8
#define KVW_CHUNK (32 * KVW_UNROLL * 16)

template <int CAP> struct kvw_args {
    const uint8_t *src;
    uint8_t *dst;
    tdm_cuda_kv_map_t m;
    uint32_t chunks_per_page, n_units; /* n_units < 2^31: the host splits */
    kvg_runs<CAP> r;
};

template <int CAP>
__global__ void __launch_bounds__(KVW_THREADS) kvw_kernel(const __grid_constant__ kvw_args<CAP> a)
{
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t warps = gridDim.x * KVW_WARPS;
    const uint32_t per_region = a.r.n_pages * a.chunks_per_page;
    for (uint32_t u = blockIdx.x * KVW_WARPS + threadIdx.x / 32; u < a.n_units; u += warps) {
        const uint32_t region = u / per_region, rem = u % per_region;
        const uint32_t p = rem / a.chunks_per_page, c = rem % a.chunks_per_page;
        const uint32_t layer = region / a.m.n_sub, sub = region % a.m.n_sub;
        const uint64_t stride = a.m.page_stride[sub], off = (uint64_t)c * KVW_CHUNK;
        if (off >= stride)
            continue;
        const uint32_t n = (uint32_t)(stride - off < KVW_CHUNK ? stride - off : KVW_CHUNK);
        uint32_t lo = 0, hi = a.r.n_runs - 1; /* the last run whose first page <= p */
        while (lo < hi) {
            uint32_t mid = (lo + hi + 1) / 2;
            if (a.r.first[mid] <= p)
                lo = mid;
            else
                hi = mid - 1;
        }
        const uint32_t k = p - a.r.first[lo];
        kvg_copy_any<32, KVW_UNROLL>(lane,
                                     a.src + layer * a.m.src_layer_bytes + a.m.src_sub_offset[sub] +
                                         (uint64_t)(a.r.sp[lo] + k) * stride + off,
                                     a.dst + layer * a.m.dst_layer_bytes + a.m.dst_sub_offset[sub] +
                                         (uint64_t)(a.r.dp[lo] + k) * stride + off,
                                     n);
    }
}

/* Resident blocks of the warp kernel on this device (SMs x blocks per SM), asked once. */
template <int CAP> static tdm_status_t kvw_grid(uint32_t *ret_blocks)
{
    static int cached; /* the same on every call: racing writers agree */
    int dev, sms, occ, g = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (g == 0) {
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kvw_kernel<CAP>, KVW_THREADS, 0) !=
                cudaSuccess ||
            occ < 1)
            return launch_status("kv gather (occupancy)");
        g = sms * occ;
        __atomic_store_n(&cached, g, __ATOMIC_RELAXED);
    }
    *ret_blocks = (uint32_t)g;
    return TDM_OK;
}

template <int CAP>
static tdm_status_t kvw_launch(const uint8_t *src, uint8_t *dst, const tdm_cuda_kv_map_t *m,
                               const tdm_cuda_page_run_t *runs, uint32_t n_runs, uint32_t *io_i,
                               uint32_t *io_skip, uint32_t max_pages, uint32_t chunks_per_page,
                               cudaStream_t stream, uint32_t *io_launches)
{
    kvw_args<CAP> a;
    uint32_t grid = 0;
    kvg_pack<CAP>(runs, n_runs, io_i, io_skip, max_pages, &a.r);
    if (a.r.n_runs == 0)
        return TDM_OK;
    TDM_TRY(kvw_grid<CAP>(&grid));
    a.src = src;
    a.dst = dst;
    a.m = *m;
    a.chunks_per_page = chunks_per_page;
    a.n_units = a.r.n_pages * chunks_per_page * m->num_layers * m->n_sub;
    uint32_t blocks = (a.n_units + KVW_WARPS - 1) / KVW_WARPS;
    if (blocks > grid)
        blocks = grid;
    kvw_kernel<CAP><<<blocks, KVW_THREADS, 0, stream>>>(a);
    TDM_TRY(launch_status("kv gather"));
    (*io_launches)++;
    return TDM_OK;
}

static tdm_status_t kvw_gather(const uint8_t *src, uint8_t *dst, const tdm_cuda_kv_map_t *m,
                               const tdm_cuda_page_run_t *runs, uint32_t n_runs,
                               uint64_t max_stride, cudaStream_t stream, uint32_t *io_launches)
{
    uint32_t i = 0, skip = 0;
    const uint64_t cpp = (max_stride + KVW_CHUNK - 1) / KVW_CHUNK;
    const uint64_t per_page = cpp * m->num_layers * m->n_sub;
    if (per_page > 0x7fffffffull)
        return TDM_ERR_RANGE;
    /* a launch's units (room pages x per_page) stay below 2^31: 32-bit index arithmetic */
    const uint32_t max_pages = (uint32_t)(0x7fffffffull / per_page);
    while (i < n_runs) {
        tdm_status_t st = n_runs - i <= 16
                              ? kvw_launch<16>(src, dst, m, runs, n_runs, &i, &skip, max_pages,
                                               (uint32_t)cpp, stream, io_launches)
                              : kvw_launch<256>(src, dst, m, runs, n_runs, &i, &skip, max_pages,
                                                (uint32_t)cpp, stream, io_launches);
        if (st != TDM_OK)
            return st;
    }
    return TDM_OK;
}

extern "C" tdm_status_t tdm_cuda_kv_gather(const uint8_t *src_base, uint8_t *dst_base,
                                           const tdm_cuda_kv_map_t *map,
                                           const tdm_cuda_page_run_t *runs, uint32_t n_runs,
                                           cudaStream_t stream, uint32_t *ret_launches)
{
    uint64_t max_stride = 0;
    uint32_t launches = 0;
    tdm_status_t st = TDM_OK;
    if (!map || map->n_sub > TDM_KV_SUB_MAX || (n_runs && (!src_base || !dst_base || !runs)))
        return TDM_ERR_INVAL;
    for (uint32_t s = 0; s < map->n_sub; s++)
        max_stride = map->page_stride[s] > max_stride ? map->page_stride[s] : max_stride;
    if (n_runs && max_stride && map->num_layers) {
        const uint8_t *s = src_base;
        uint8_t *d = dst_base;
        switch (tdm_cuda_kv_gather_variant) {
        case 1:
            st = kvw_gather(s, d, map, runs, n_runs, max_stride, stream, &launches);
            break;
        case 2:
            st = kvb_gather(s, d, map, runs, n_runs, max_stride, 0, stream, &launches);
            break;
        default:
            st = kvb_gather(s, d, map, runs, n_runs, max_stride, 1, stream, &launches);
            break;
        }
    }
    if (st == TDM_OK && ret_launches)
        *ret_launches = launches;
    return st;
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
