/*
 * hicache.cu — the CUDA half of the HiCache host tier and the engine's side of the layer gate
 * (contract in kernels/cuda/hicache.h and include/tdm/hicache.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "hicache.h"

extern "C" {
#include <tdm/mem.h>
}

/* ------------------------------------------------------------------ addressing */

typedef struct hc_addr {
    uint8_t *dbase, *hbase; /* hbase: the host pool's device-mapped address */
    uint64_t dlb, doff[TDM_KV_SUB_MAX], dstr[TDM_KV_SUB_MAX];
    uint64_t hlb, hoff[TDM_KV_SUB_MAX], hstr[TDM_KV_SUB_MAX];
    uint64_t hpb, hpl, hin[TDM_KV_SUB_MAX];
    uint64_t cb[TDM_KV_SUB_MAX];
    uint32_t nsub, ncopy, page_first, L;
} hc_addr_t;

__host__ __device__ static inline uint8_t *hc_daddr(const hc_addr_t &a, uint32_t page, uint32_t l,
                                                    uint32_t s)
{
    return a.dbase + (uint64_t)l * a.dlb + a.doff[s] + (uint64_t)page * a.dstr[s];
}

__host__ __device__ static inline uint8_t *hc_haddr(const hc_addr_t &a, uint8_t *base, uint32_t hp,
                                                    uint32_t l, uint32_t s)
{
    if (a.page_first)
        return base + (uint64_t)hp * a.hpb + (uint64_t)l * a.hpl + a.hin[s];
    return base + (uint64_t)l * a.hlb + a.hoff[s] + (uint64_t)hp * a.hstr[s];
}

/* ------------------------------------------------------------------ kernels */

/* (page i, sub s) per block step, layer layer0 + blockIdx.y; host -> device, or device -> host
 * with to_host. Lists NULL: the single pages hp1 / dp1. vec: 16-byte words. */
__global__ void hc_copy_kernel(hc_addr_t a, const uint32_t *hl, const uint32_t *dl, uint32_t hp1,
                               uint32_t dp1, uint32_t n, uint32_t layer0, int to_host, int vec)
{
    const uint32_t l = layer0 + blockIdx.y;
    for (uint32_t ps = blockIdx.x; ps < n * a.ncopy; ps += gridDim.x) {
        const uint32_t i = ps / a.ncopy, s = ps % a.ncopy;
        uint8_t *d = hc_daddr(a, dl ? dl[i] : dp1, l, s);
        uint8_t *h = hc_haddr(a, a.hbase, hl ? hl[i] : hp1, l, s);
        uint8_t *dst = to_host ? h : d;
        const uint8_t *src = to_host ? d : h;
        const uint64_t b = a.cb[s];
        if (vec) {
            for (uint64_t w = threadIdx.x; w < b / 16; w += blockDim.x)
                ((uint4 *)dst)[w] = ((const uint4 *)src)[w];
        } else {
            for (uint64_t w = threadIdx.x; w < b; w += blockDim.x)
                dst[w] = src[w];
        }
    }
}

/* Poison of every layer and sub-buffer of pages dl[i] (blockIdx.x over (page, sub), y layer). */
__global__ void hc_poison_kernel(hc_addr_t a, const uint32_t *dl, uint32_t n, uint32_t dtype)
{
    const uint32_t l = blockIdx.y;
    for (uint32_t ps = blockIdx.x; ps < n * a.nsub; ps += gridDim.x) {
        const uint32_t i = ps / a.nsub, s = ps % a.nsub;
        uint8_t *d = hc_daddr(a, dl[i], l, s);
        const uint64_t b = a.dstr[s];
        if (dtype == TDM_DTYPE_BF16) {
            for (uint64_t w = threadIdx.x; w < b / 2; w += blockDim.x)
                ((uint16_t *)d)[w] = (uint16_t)TDM_KV_POISON_BF16;
        } else if (dtype == TDM_DTYPE_FP8_E4M3) {
            for (uint64_t w = threadIdx.x; w < b; w += blockDim.x)
                d[w] = (uint8_t)TDM_KV_POISON_FP8;
        } else {
            for (uint64_t w = threadIdx.x; w < b / 4; w += blockDim.x)
                ((uint32_t *)d)[w] = TDM_KV_POISON_F32;
        }
    }
}

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

__device__ static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

__device__ static inline uint64_t xx_round(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = rotl64(acc, 31);
    return acc * P1;
}

__device__ static inline uint64_t xx_merge(uint64_t acc, uint64_t val)
{
    acc ^= xx_round(0, val);
    return acc * P1 + P4;
}

__device__ static inline uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = (v << 8) | p[k];
    return v;
}

#define HC_CHUNK 4096u
#define HC_CK_THREADS 128u

/* out[(blockIdx.x * L + l) * nsub + s] = XXH64 (seed 0) of device sub-buffer s of page dl[x] (dl
 * NULL: dp1), layer l = blockIdx.y, over its page stride (docs/contracts.md "HiCache"
 * Checksums): the 4 lanes of XXH64 on threads 0-3 over 4 KiB chunks staged in shared memory. */
__global__ void __launch_bounds__(HC_CK_THREADS)
    hc_cksum_kernel(hc_addr_t a, const uint32_t *dl, uint32_t dp1, uint64_t *out)
{
    __shared__ __align__(16) uint8_t buf[HC_CHUNK];
    __shared__ uint64_t v[4];
    const uint32_t l = blockIdx.y, page = dl ? dl[blockIdx.x] : dp1, t = threadIdx.x;
    for (uint32_t s = 0; s < a.nsub; s++) {
        const uint8_t *p = hc_daddr(a, page, l, s);
        const uint64_t len = a.dstr[s], full = len / 32 * 32;
        const uint64_t seed = 0; /* each sub-buffer its own hash: a mismatch names it */
        uint64_t acc = t == 0 ? seed + P1 + P2 : t == 1 ? seed + P2 : t == 2 ? seed : seed - P1;
        uint64_t clast = 0;
        for (uint64_t c = 0; c < len; c += HC_CHUNK) {
            const uint64_t m = len - c < HC_CHUNK ? len - c : HC_CHUNK;
            __syncthreads(); /* the previous chunk is consumed */
            if (((uintptr_t)(p + c) & 7) == 0) {
                for (uint64_t w = t; w < m / 8; w += blockDim.x)
                    ((uint64_t *)buf)[w] = ((const uint64_t *)(p + c))[w];
                for (uint64_t w = m / 8 * 8 + t; w < m; w += blockDim.x)
                    buf[w] = p[c + w];
            } else {
                for (uint64_t w = t; w < m; w += blockDim.x)
                    buf[w] = p[c + w];
            }
            __syncthreads();
            if (t < 4)
                for (uint64_t k = 0; c + k * 32 + 32 <= full && k * 32 + 32 <= m; k++)
                    acc = xx_round(acc, rd64(buf + k * 32 + t * 8));
            clast = c;
        }
        if (t < 4)
            v[t] = acc;
        __syncthreads();
        if (t == 0) {
            uint64_t h;
            if (len >= 32) {
                h = rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18);
                h = xx_merge(h, v[0]);
                h = xx_merge(h, v[1]);
                h = xx_merge(h, v[2]);
                h = xx_merge(h, v[3]);
            } else {
                h = seed + P5;
            }
            h += len;
            const uint8_t *q = buf + (full - clast);
            uint64_t r = len - full;
            while (r >= 8) {
                h ^= xx_round(0, rd64(q));
                h = rotl64(h, 27) * P1 + P4;
                q += 8;
                r -= 8;
            }
            if (r >= 4) {
                uint64_t w = (uint64_t)q[0] | (uint64_t)q[1] << 8 | (uint64_t)q[2] << 16 |
                             (uint64_t)q[3] << 24;
                h ^= w * P1;
                h = rotl64(h, 23) * P2 + P3;
                q += 4;
                r -= 4;
            }
            while (r > 0) {
                h ^= (uint64_t)(*q++) * P5;
                h = rotl64(h, 11) * P1;
                r--;
            }
            h ^= h >> 33;
            h *= P2;
            h ^= h >> 29;
            h *= P3;
            h ^= h >> 32;
            out[((uint64_t)blockIdx.x * a.L + l) * a.nsub + s] = h;
        }
        __syncthreads();
    }
}

/* Canary probe: for the last row of each sequence (rows of one sequence are consecutive and share
 * ptoff), every K and V head entry of positions [0, pos] of layer l that holds the poison
 * pattern counts once: what that sequence's attention reads at this stream position. */
__global__ void hc_probe_kernel(tdm_cuda_kv_t kv, uint32_t l, tdm_cuda_rows_t rows, uint32_t n,
                                unsigned long long *count)
{
    const uint32_t r = blockIdx.x, nact = *rows.nactive;
    if (r >= n || r >= nact || (r + 1 < nact && rows.ptoff[r + 1] == rows.ptoff[r]))
        return;
    const uint32_t *pt = rows.pages + rows.ptoff[r];
    const uint64_t items = (uint64_t)(rows.pos[r] + 1) * kv.kv_heads * 2;
    const uint32_t es = kv.fp8 ? 1 : 2;
    unsigned long long c = 0;
    for (uint64_t i = threadIdx.x; i < items; i += blockDim.x) {
        const uint32_t sub = (uint32_t)(i & 1), h = (uint32_t)((i >> 1) % kv.kv_heads);
        const uint32_t p = (uint32_t)((i >> 1) / kv.kv_heads);
        const uint8_t *src = kv.base + (uint64_t)l * kv.layer_bytes + kv.off[sub] +
                             (uint64_t)pt[p / kv.page_size] * kv.page_stride[sub] +
                             (uint64_t)(p % kv.page_size) * kv.bpt[sub] + (uint64_t)h * kv.hd * es;
        int hit = 0;
        for (uint32_t e = 0; e < kv.hd && !hit; e++)
            hit = kv.fp8 ? src[e] == TDM_KV_POISON_FP8
                         : ((const uint16_t *)src)[e] == (uint16_t)TDM_KV_POISON_BF16;
        c += hit;
    }
    if (c)
        atomicAdd(count, c);
}

/* ------------------------------------------------------------------ the tier's device half */

#define HC_CHECK(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            tdm_err(TDM_SUB_CUDA, "msg=\"%s failed\" err=\"%s\" at=%s:%d", #call,                  \
                    cudaGetErrorString(e_), __FILE__, __LINE__);                                   \
            return e_ == cudaErrorMemoryAllocation ? TDM_ERR_NOMEM : TDM_ERR_CUDA;                 \
        }                                                                                          \
    } while (0)

/* A device list with its pinned staging and checksum output, grown on demand (one per thread
 * that uses it: the scheduler's stores and poison, each job slot on the copy thread). */
typedef struct hc_scratch {
    uint32_t *d_list, *h_list; /* 2 cap: host ids then device ids */
    uint64_t *d_ck, *h_ck;     /* cap * L * nsub */
    uint32_t cap;
} hc_scratch_t;

typedef struct hc_dev {
    hc_addr_t a;
    int dev_id, vec;
    uint32_t max_jobs, L, dtype;
    uint8_t *hhost;      /* the host pool's host address (cudaMemcpyAsync sources) */
    cudaStream_t cs, ss; /* copy stream (loads), store stream (stores, poison) */
    cudaEvent_t *ev;     /* [slot * L + layer] */
    hc_scratch_t sched;  /* stores and poison */
    hc_scratch_t *slot;  /* per job slot */
} hc_dev_t;

static void scratch_free(hc_scratch_t *s)
{
    cudaFree(s->d_list);
    cudaFreeHost(s->h_list);
    cudaFree(s->d_ck);
    cudaFreeHost(s->h_ck);
    memset(s, 0, sizeof(*s));
}

static tdm_status_t scratch_fit(hc_scratch_t *s, uint32_t n, uint32_t L) /* L: values per page */
{
    if (n <= s->cap)
        return TDM_OK;
    scratch_free(s); /* its last user synchronised its stream */
    uint32_t cap = n < 64 ? 64 : n;
    HC_CHECK(cudaMalloc((void **)&s->d_list, (size_t)cap * 2 * sizeof(uint32_t)));
    HC_CHECK(cudaMallocHost((void **)&s->h_list, (size_t)cap * 2 * sizeof(uint32_t)));
    HC_CHECK(cudaMalloc((void **)&s->d_ck, (size_t)cap * L * sizeof(uint64_t)));
    HC_CHECK(cudaMallocHost((void **)&s->h_ck, (size_t)cap * L * sizeof(uint64_t)));
    s->cap = cap;
    return TDM_OK;
}

static void *hc_host_alloc(uint64_t bytes)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void hc_host_free(void *p)
{
    cudaFreeHost(p);
}

static void hc_close(void *dp)
{
    hc_dev_t *d = (hc_dev_t *)dp;
    if (!d)
        return;
    cudaSetDevice(d->dev_id);
    if (d->cs)
        cudaStreamSynchronize(d->cs);
    if (d->ss)
        cudaStreamSynchronize(d->ss);
    if (d->ev)
        for (uint32_t i = 0; i < d->max_jobs * d->L; i++)
            if (d->ev[i])
                cudaEventDestroy(d->ev[i]);
    scratch_free(&d->sched);
    if (d->slot)
        for (uint32_t i = 0; i < d->max_jobs; i++)
            scratch_free(&d->slot[i]);
    if (d->cs)
        cudaStreamDestroy(d->cs);
    if (d->ss)
        cudaStreamDestroy(d->ss);
    tdm_free(d->ev);
    tdm_free(d->slot);
    tdm_free(d);
}

static tdm_status_t hc_open_(const tdm_hicache_geom_t *g, uint32_t max_jobs, hc_dev_t *d)
{
    void *hb = NULL;
    HC_CHECK(cudaGetDevice(&d->dev_id));
    HC_CHECK(cudaHostGetDevicePointer(&hb, g->host_base, 0));
    hc_addr_t *a = &d->a;
    a->dbase = g->dev_base;
    a->hbase = (uint8_t *)hb;
    a->dlb = g->d_layer_bytes;
    a->hlb = g->h_layer_bytes;
    a->hpb = g->h_page_bytes;
    a->hpl = g->h_page_layer;
    a->nsub = g->n_sub;
    a->ncopy = g->n_copy_sub;
    a->page_first = g->page_first;
    a->L = g->num_layers;
    uint64_t align = (uintptr_t)a->dbase | (uintptr_t)a->hbase | a->dlb | a->hlb | a->hpb | a->hpl;
    for (uint32_t s = 0; s < TDM_KV_SUB_MAX; s++) {
        a->doff[s] = g->d_off[s];
        a->dstr[s] = g->d_stride[s];
        a->hoff[s] = g->h_off[s];
        a->hstr[s] = g->h_stride[s];
        a->hin[s] = g->h_in_page[s];
        a->cb[s] = g->copy_bytes[s];
        align |= a->doff[s] | a->dstr[s] | a->hoff[s] | a->hstr[s] | a->hin[s] | a->cb[s];
    }
    d->vec = (align & 15) == 0;
    d->dtype = g->kv_dtype;
    d->hhost = g->host_base;
    d->L = g->num_layers;
    d->max_jobs = max_jobs;
    HC_CHECK(cudaStreamCreateWithFlags(&d->cs, cudaStreamNonBlocking));
    HC_CHECK(cudaStreamCreateWithFlags(&d->ss, cudaStreamNonBlocking));
    d->ev = (cudaEvent_t *)tdm_calloc((size_t)max_jobs * d->L, sizeof(cudaEvent_t));
    d->slot = (hc_scratch_t *)tdm_calloc(max_jobs, sizeof(hc_scratch_t));
    for (uint32_t i = 0; i < max_jobs * d->L; i++)
        HC_CHECK(cudaEventCreateWithFlags(&d->ev[i], cudaEventDisableTiming));
    return TDM_OK;
}

static tdm_status_t hc_open(const tdm_hicache_geom_t *g, uint32_t max_jobs, void **ret)
{
    if (!g || !ret || max_jobs == 0 || g->num_layers == 0 || g->n_sub > TDM_KV_SUB_MAX)
        return TDM_ERR_INVAL;
    hc_dev_t *d = (hc_dev_t *)tdm_calloc(1, sizeof(hc_dev_t));
    tdm_status_t st = hc_open_(g, max_jobs, d);
    if (st != TDM_OK) {
        hc_close(d);
        return st;
    }
    *ret = d;
    return TDM_OK;
}

static tdm_status_t hc_store(void *dp, uint32_t page, uint32_t hp, uint64_t *ck)
{
    hc_dev_t *d = (hc_dev_t *)dp;
    HC_CHECK(cudaSetDevice(d->dev_id));
    TDM_TRY(scratch_fit(&d->sched, 1, d->L * d->a.nsub));
    /* the checksums of the device source first, then the copy down (the gather kernel reversed) */
    hc_cksum_kernel<<<dim3(1, d->L), HC_CK_THREADS, 0, d->ss>>>(d->a, NULL, page, d->sched.d_ck);
    hc_copy_kernel<<<dim3(d->a.ncopy, d->L), 256, 0, d->ss>>>(d->a, NULL, NULL, hp, page, 1, 0, 1,
                                                              d->vec);
    HC_CHECK(cudaGetLastError());
    HC_CHECK(cudaMemcpyAsync(d->sched.h_ck, d->sched.d_ck,
                             (size_t)d->L * d->a.nsub * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                             d->ss));
    HC_CHECK(cudaStreamSynchronize(d->ss));
    memcpy(ck, d->sched.h_ck, (size_t)d->L * d->a.nsub * sizeof(uint64_t));
    return TDM_OK;
}

static uint32_t grid_of(uint64_t items)
{
    return items < 4096 ? (uint32_t)(items ? items : 1) : 4096u;
}

static tdm_status_t hc_poison(void *dp, const uint32_t *pages, uint32_t n)
{
    hc_dev_t *d = (hc_dev_t *)dp;
    if (n == 0)
        return TDM_OK;
    HC_CHECK(cudaSetDevice(d->dev_id));
    TDM_TRY(scratch_fit(&d->sched, n, d->L * d->a.nsub));
    memcpy(d->sched.h_list, pages, (size_t)n * sizeof(uint32_t));
    HC_CHECK(cudaMemcpyAsync(d->sched.d_list, d->sched.h_list, (size_t)n * sizeof(uint32_t),
                             cudaMemcpyHostToDevice, d->ss));
    hc_poison_kernel<<<dim3(grid_of((uint64_t)n * d->a.nsub), d->L), 256, 0, d->ss>>>(
        d->a, d->sched.d_list, n, d->dtype);
    HC_CHECK(cudaGetLastError());
    HC_CHECK(cudaStreamSynchronize(d->ss));
    return TDM_OK;
}

static tdm_status_t hc_load_layer(void *dp, uint32_t slot, const uint32_t *host,
                                  const uint32_t *dev, uint32_t n, uint32_t layer, int io_kernel)
{
    hc_dev_t *d = (hc_dev_t *)dp;
    if (slot >= d->max_jobs || layer >= d->L || n == 0)
        return TDM_ERR_INVAL;
    hc_scratch_t *sc = &d->slot[slot];
    HC_CHECK(cudaSetDevice(d->dev_id));
    if (layer == 0) {
        /* the slot's previous job was waited for (load_end): its lists are free */
        TDM_TRY(scratch_fit(sc, n, d->L * d->a.nsub));
        memcpy(sc->h_list, host, (size_t)n * sizeof(uint32_t));
        memcpy(sc->h_list + n, dev, (size_t)n * sizeof(uint32_t));
        HC_CHECK(cudaMemcpyAsync(sc->d_list, sc->h_list, (size_t)n * 2 * sizeof(uint32_t),
                                 cudaMemcpyHostToDevice, d->cs));
    }
    if (io_kernel) {
        hc_copy_kernel<<<dim3(grid_of((uint64_t)n * d->a.ncopy), 1), 256, 0, d->cs>>>(
            d->a, sc->d_list, sc->d_list + n, 0, 0, n, layer, 0, d->vec);
        HC_CHECK(cudaGetLastError());
    } else {
        const hc_addr_t *a = &d->a;
        uint8_t *hb = d->hhost;
        for (uint32_t s = 0; s < a->ncopy; s++) {
            const uint64_t b = a->cb[s];
            const int contiguous = !a->page_first && b == a->dstr[s] && b == a->hstr[s];
            for (uint32_t i = 0; i < n;) {
                uint32_t r = 1;
                while (contiguous && i + r < n && dev[i + r] == dev[i] + r &&
                       host[i + r] == host[i] + r)
                    r++;
                HC_CHECK(cudaMemcpyAsync(hc_daddr(*a, dev[i], layer, s),
                                         hc_haddr(*a, hb, host[i], layer, s), b * r,
                                         cudaMemcpyHostToDevice, d->cs));
                i += r;
            }
        }
    }
    HC_CHECK(cudaEventRecord(d->ev[(size_t)slot * d->L + layer], d->cs));
    return TDM_OK;
}

static tdm_status_t hc_load_end(void *dp, uint32_t slot, const uint32_t *dev, uint32_t n,
                                uint64_t *ck)
{
    hc_dev_t *d = (hc_dev_t *)dp;
    if (slot >= d->max_jobs)
        return TDM_ERR_INVAL;
    hc_scratch_t *sc = &d->slot[slot];
    HC_CHECK(cudaSetDevice(d->dev_id));
    if (ck && n && sc->cap >= n) {
        hc_cksum_kernel<<<dim3(n, d->L), HC_CK_THREADS, 0, d->cs>>>(d->a, sc->d_list + n, 0,
                                                                    sc->d_ck);
        HC_CHECK(cudaGetLastError());
        HC_CHECK(cudaMemcpyAsync(sc->h_ck, sc->d_ck,
                                 (size_t)n * d->L * d->a.nsub * sizeof(uint64_t),
                                 cudaMemcpyDeviceToHost, d->cs));
    }
    HC_CHECK(cudaStreamSynchronize(d->cs));
    if (ck && n) {
        if (sc->cap < n)
            return TDM_ERR_STATE;
        memcpy(ck, sc->h_ck, (size_t)n * d->L * d->a.nsub * sizeof(uint64_t));
    }
    (void)dev;
    return TDM_OK;
}

static void *hc_event(void *dp, uint32_t slot, uint32_t layer)
{
    hc_dev_t *d = (hc_dev_t *)dp;
    if (slot >= d->max_jobs || layer >= d->L)
        return NULL;
    return (void *)d->ev[(size_t)slot * d->L + layer];
}

static const tdm_hicache_dev_t hc_dev_ops = {
    hc_host_alloc, hc_host_free,  hc_open,     hc_close, hc_store,
    hc_poison,     hc_load_layer, hc_load_end, hc_event,
};

extern "C" const tdm_hicache_dev_t *tdm_cuda_hicache_dev(void)
{
    return &hc_dev_ops;
}

/* ------------------------------------------------------------------ the engine's side */

tdm_status_t tdm_cuda_hc_use_gate(tdm_cuda_hc_t *h, tdm_kv_gate_t *gate)
{
    h->gate = gate;
    memset(&h->batch, 0, sizeof(h->batch));
    if (gate && !h->d_poison) {
        HC_CHECK(cudaMalloc((void **)&h->d_poison, sizeof(unsigned long long)));
        HC_CHECK(cudaMemset(h->d_poison, 0, sizeof(unsigned long long)));
    }
    return TDM_OK;
}

int tdm_cuda_hc_pending(const tdm_cuda_hc_t *h)
{
    return h->gate && h->batch.need != 0;
}

tdm_status_t tdm_cuda_hc_layer(tdm_cuda_hc_t *h, const tdm_cuda_kv_t *kv, uint32_t layer,
                               const tdm_cuda_rows_t *rows, uint32_t n, cudaStream_t s)
{
    if (!tdm_cuda_hc_pending(h))
        return TDM_OK;
    void *ev = NULL;
    const tdm_kv_buffers_t *b = tdm_kv_layer_acquire_dev(h->gate, &h->batch, layer, &ev);
    if (ev)
        HC_CHECK(cudaStreamWaitEvent(s, (cudaEvent_t)ev, 0));
    h->poison_reads = b->poison_reads;
    if (h->poison_reads) {
        hc_probe_kernel<<<n, 256, 0, s>>>(*kv, layer, *rows, n, h->d_poison);
        HC_CHECK(cudaGetLastError());
        h->probed = 1;
    }
    return TDM_OK;
}

tdm_status_t tdm_cuda_hc_after(tdm_cuda_hc_t *h)
{
    if (!h->probed)
        return TDM_OK;
    unsigned long long c = 0;
    h->probed = 0;
    HC_CHECK(cudaMemcpy(&c, h->d_poison, sizeof(c), cudaMemcpyDeviceToHost));
    if (c) {
        HC_CHECK(cudaMemset(h->d_poison, 0, sizeof(c)));
        __atomic_fetch_add(h->poison_reads, (uint64_t)c, __ATOMIC_RELAXED);
    }
    return TDM_OK;
}

void tdm_cuda_hc_free(tdm_cuda_hc_t *h)
{
    cudaFree(h->d_poison);
    memset(h, 0, sizeof(*h));
}
