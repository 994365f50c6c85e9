/*
 * cuda_ipc.c — the same-host GPU data mover (cuda_ipc.h): the decode pool exported as a CUDA IPC
 * handle in a versioned record, opened on prefill with lazy peer access, pages copied device to
 * device on a dedicated non-blocking stream and fenced by an event, and the KV checksums on the
 * GPU. The copy stream never synchronises with the forward's stream: prefill's pages of a room
 * were written by a forward that returned (the engine waits for its stream) before the scheduler
 * hands them over, and decode does not touch a room's pages before it commits the room.
 *
 * A room moves as its runs of pages (pages contiguous on both sides coalesced), in every layer and
 * sub-buffer: a few such region runs by one cudaMemcpyAsync each, more by the KV gather kernel
 * (xfer_ops.h), whose run list travels in its launch parameters: nothing is uploaded or staged,
 * so a room's list is the room's whatever is queued behind it. The room's event comes after
 * either, so its STATUS and ABORT_ACK still wait for every byte (I5). Fence events are kept for
 * reuse (creating one costs about a microsecond on the transfer thread).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <tdm/hash.h>
#include <tdm/log.h>
#include <tdm/mem.h>

#include "dataplane/xfer/cuda_ipc.h"
#include "kernels/cuda/xfer_ops.h"

#define XFER_CUDA_RANKS_MAX 64

/* A room of more region runs than this moves by the gather kernel, others by one cudaMemcpyAsync
 * per run. H200 (tests/gpu/test-xfer-cuda's "bench threshold" lines, host wall to the completed
 * event): each copy adds ~3.5 us, the kernel costs about one copy's time whatever the run count
 * (H200 run: 1 run 9.2 us by a copy, 8.9 by the kernel; 8 runs 35.9 against 9.4), so
 * the copies never win by much; they stay for rooms of one or two region runs. Not a knob: a
 * seam for tests/gpu/test-xfer-cuda.c (times both paths) and the unit test. */
uint32_t xfer_cuda_gather_min_runs = 2;

#define XFER_CUDA_EVENTS_KEPT 64

typedef struct xfer_cuda_peer {
    uint8_t *alloc; /* what cudaIpcOpenMemHandle returned; NULL when closed */
    uint8_t *base;  /* alloc + offset: the pool */
    uint64_t pool_bytes;
    uint32_t num_pages;
} xfer_cuda_peer_t;

struct xfer_cuda {
    int device;
    uint32_t n_ranks;
    cudaStream_t copy_stream, sum_stream;
    xfer_cuda_peer_t peer[XFER_CUDA_RANKS_MAX];
    /* the copy path: transfer thread only */
    tdm_cuda_page_run_t *runs; /* (runs_cap) the room being queued, host */
    size_t runs_cap;
    cudaEvent_t ev_free[XFER_CUDA_EVENTS_KEPT]; /* completed fence events for reuse */
    unsigned n_ev_free;
    cudaEvent_t ev_done; /* the last event a poll found completed (atomic: any poller) */
    /* checksum scratch, grown on demand; under mu */
    pthread_mutex_t mu;
    uint32_t *d_pages;
    uint64_t *d_seg, *h_seg;
    size_t pages_cap, seg_cap;
};

static tdm_status_t cu_fail(const char *what, cudaError_t e)
{
    tdm_err(TDM_SUB_XFER, "cuda ipc: %s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? TDM_ERR_NOMEM : TDM_ERR_CUDA;
}

#define CU_TRY(call, what)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cu_fail(what, e_);                                                              \
    } while (0)

/* Make the context's device current, calling cudaSetDevice only when another one is: the transfer
 * thread's device never changes (H200: cudaGetDevice 62 ns, cudaSetDevice of the
 * current device 119 ns, called 4-5 times a room before). */
static cudaError_t use_device(const xfer_cuda_t *c)
{
    int d;
    if (cudaGetDevice(&d) == cudaSuccess && d == c->device)
        return cudaSuccess;
    return cudaSetDevice(c->device);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

tdm_status_t tdm_xfer_cuda_init(uint32_t n_ranks, xfer_cuda_t **ret)
{
    int dev;
    if (!ret || n_ranks == 0 || n_ranks > XFER_CUDA_RANKS_MAX)
        return TDM_ERR_INVAL;
    CU_TRY(cudaGetDevice(&dev), "cudaGetDevice");
    xfer_cuda_t *c = tdm_calloc(1, sizeof(*c));
    tdm_status_t st;
    cudaError_t e;
    c->device = dev;
    c->n_ranks = n_ranks;
    pthread_mutex_init(&c->mu, NULL);
    if ((e = cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->sum_stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = cu_fail("cudaStreamCreateWithFlags", e);
        tdm_xfer_cuda_free(c);
        return st;
    }
    *ret = c;
    return TDM_OK;
}

void tdm_xfer_cuda_free(xfer_cuda_t *c)
{
    if (!c)
        return;
    use_device(c);
    for (uint32_t r = 0; r < c->n_ranks; r++)
        tdm_xfer_cuda_close(c, r);
    if (c->copy_stream)
        cudaStreamSynchronize(c->copy_stream); /* host wakes queued behind the last copies */
    for (unsigned i = 0; i < c->n_ev_free; i++)
        cudaEventDestroy(c->ev_free[i]);
    free(c->runs);
    if (c->copy_stream)
        cudaStreamDestroy(c->copy_stream);
    if (c->sum_stream)
        cudaStreamDestroy(c->sum_stream);
    cudaFree(c->d_pages);
    cudaFree(c->d_seg);
    cudaFreeHost(c->h_seg);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

tdm_status_t tdm_xfer_cuda_export(xfer_cuda_t *c, const tdm_kv_buffers_t *kv,
                                  uint8_t ret_rec[XFER_CUDA_REC_BYTES])
{
    cudaIpcMemHandle_t h;
    struct cudaDeviceProp prop;
    uint64_t pool_bytes;
    if (!c || !kv || !kv->base || !kv->layout || !ret_rec)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_kv_layout_pool_bytes(kv->layout, kv->num_pages, &pool_bytes));
    CU_TRY(use_device(c), "cudaSetDevice");
    /* the pool must be a whole cudaMalloc allocation's start (engine.cu: one cudaMalloc) */
    CU_TRY(cudaIpcGetMemHandle(&h, kv->base), "cudaIpcGetMemHandle (decode KV pool)");
    CU_TRY(cudaGetDeviceProperties(&prop, c->device), "cudaGetDeviceProperties");
    _Static_assert(sizeof(h) == 64, "cudaIpcMemHandle_t is 64 bytes");
    memset(ret_rec, 0, XFER_CUDA_REC_BYTES);
    put_le(ret_rec, XFER_CUDA_REC_MAGIC, 4);
    put_le(ret_rec + 4, XFER_CUDA_REC_VERSION, 2);
    put_le(ret_rec + 6, XFER_CUDA_REC_BYTES, 2);
    memcpy(ret_rec + 8, &h, 64);
    put_le(ret_rec + 72, 0, 8);
    put_le(ret_rec + 80, pool_bytes, 8);
    memcpy(ret_rec + 88, prop.uuid.bytes, 16);
    return TDM_OK;
}

int tdm_xfer_cuda_record_check(const uint8_t *rec, size_t len, uint64_t pool_bytes, char *why,
                               size_t why_len)
{
    const char *bad = NULL;
    if (!rec || len != XFER_CUDA_REC_BYTES)
        bad = "length";
    else if (get_le(rec, 4) != XFER_CUDA_REC_MAGIC)
        bad = "magic";
    else if (get_le(rec + 4, 2) != XFER_CUDA_REC_VERSION)
        bad = "version";
    else if (get_le(rec + 6, 2) != XFER_CUDA_REC_BYTES)
        bad = "length";
    else if (get_le(rec + 72, 8) != 0)
        bad = "offset"; /* version 1: the pool is the allocation */
    else if (get_le(rec + 80, 8) != pool_bytes)
        bad = "pool_bytes";
    if (!bad)
        return 0;
    snprintf(why, why_len, "cuda_ipc record: %s", bad);
    return 1;
}

tdm_status_t tdm_xfer_cuda_open(xfer_cuda_t *c, uint32_t rank, const uint8_t *rec, size_t len,
                                uint32_t remote_num_pages)
{
    cudaIpcMemHandle_t h;
    void *p = NULL;
    char why[64];
    if (!c || rank >= c->n_ranks || !rec || len != XFER_CUDA_REC_BYTES ||
        tdm_xfer_cuda_record_check(rec, len, get_le(rec + 80, 8), why, sizeof(why)) != 0)
        return TDM_ERR_INVAL;
    tdm_xfer_cuda_close(c, rank);
    CU_TRY(use_device(c), "cudaSetDevice");
    memcpy(&h, rec + 8, 64);
    CU_TRY(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
           "cudaIpcOpenMemHandle (decode KV pool)");
    xfer_cuda_peer_t *pe = &c->peer[rank];
    pe->alloc = p;
    pe->base = (uint8_t *)p + get_le(rec + 72, 8);
    pe->pool_bytes = get_le(rec + 80, 8);
    pe->num_pages = remote_num_pages;
    tdm_info(TDM_SUB_XFER, "rank %u: decode KV pool opened by CUDA IPC (%llu bytes, %u pages)",
             rank, (unsigned long long)pe->pool_bytes, remote_num_pages);
    return TDM_OK;
}

void tdm_xfer_cuda_close(xfer_cuda_t *c, uint32_t rank)
{
    if (!c || rank >= c->n_ranks || !c->peer[rank].alloc)
        return;
    use_device(c);
    /* no copy may still target the mapping: the engine closes only with no room moving data */
    cudaStreamSynchronize(c->copy_stream);
    cudaError_t e = cudaIpcCloseMemHandle(c->peer[rank].alloc);
    if (e != cudaSuccess)
        tdm_warn(TDM_SUB_XFER, "cuda ipc: cudaIpcCloseMemHandle: %s", cudaGetErrorString(e));
    memset(&c->peer[rank], 0, sizeof(c->peer[rank]));
}

tdm_status_t tdm_xfer_cuda_copy(xfer_cuda_t *c, uint32_t rank, const tdm_kv_buffers_t *kv,
                                const uint32_t *src_pages, const uint32_t *dst_pages, uint32_t n,
                                uint64_t *ret_bytes, uint64_t *ret_copies)
{
    if (!c || rank >= c->n_ranks || !kv || !kv->layout || (n && (!src_pages || !dst_pages)))
        return TDM_ERR_INVAL;
    const xfer_cuda_peer_t *pe = &c->peer[rank];
    const tdm_kv_layout_t *l = kv->layout;
    uint64_t bytes = 0, rpool;
    size_t n_runs = 0;
    if (!pe->alloc)
        return TDM_ERR_PEER;
    for (uint32_t i = 0; i < n; i++)
        if (src_pages[i] >= kv->num_pages || dst_pages[i] >= pe->num_pages)
            return TDM_ERR_RANGE;
    TDM_TRY(tdm_kv_layout_pool_bytes(l, pe->num_pages, &rpool));
    if (rpool > pe->pool_bytes)
        return TDM_ERR_RANGE; /* the record's size does not hold the registered page count */
    CU_TRY(use_device(c), "cudaSetDevice");
    /* the page runs: pages contiguous on both sides coalesced */
    for (uint32_t i = 0; i < n;) {
        uint32_t k = 1;
        while (i + k < n && src_pages[i + k] == src_pages[i] + k &&
               dst_pages[i + k] == dst_pages[i] + k)
            k++;
        if (n_runs == c->runs_cap) {
            c->runs_cap = c->runs_cap ? 2 * c->runs_cap : 256;
            c->runs = tdm_realloc(c->runs, c->runs_cap * sizeof(*c->runs));
        }
        c->runs[n_runs++] = (tdm_cuda_page_run_t){src_pages[i], dst_pages[i], k};
        i += k;
    }
    tdm_cuda_kv_map_t m;
    memset(&m, 0, sizeof(m));
    m.num_layers = l->num_layers;
    m.n_sub = l->n_sub;
    m.src_layer_bytes = kv->layer_bytes;
    m.dst_layer_bytes = l->num_layers > 1 ? tdm_kv_layout_region_offset(l, pe->num_pages, 1, 0) : 0;
    for (uint32_t s = 0; s < l->n_sub; s++) {
        m.src_sub_offset[s] = kv->sub_offset[s];
        m.dst_sub_offset[s] = tdm_kv_layout_region_offset(l, pe->num_pages, 0, (tdm_kv_sub_t)s);
        m.page_stride[s] = l->sub[s].page_stride;
        bytes += (uint64_t)n * l->num_layers * m.page_stride[s];
    }
    const uint64_t region_runs = (uint64_t)n_runs * l->num_layers * l->n_sub;
    if (region_runs > xfer_cuda_gather_min_runs) {
        TDM_TRY(tdm_cuda_kv_gather(kv->base, pe->base, &m, c->runs, (uint32_t)n_runs,
                                   c->copy_stream, NULL));
    } else {
        for (uint32_t layer = 0; layer < l->num_layers; layer++)
            for (uint32_t s = 0; s < l->n_sub; s++)
                for (size_t i = 0; i < n_runs; i++) {
                    const uint64_t st = m.page_stride[s];
                    CU_TRY(cudaMemcpyAsync(pe->base + layer * m.dst_layer_bytes +
                                               m.dst_sub_offset[s] + c->runs[i].dst_page * st,
                                           kv->base + layer * m.src_layer_bytes +
                                               m.src_sub_offset[s] + c->runs[i].src_page * st,
                                           c->runs[i].n_pages * st, cudaMemcpyDeviceToDevice,
                                           c->copy_stream),
                           "cudaMemcpyAsync (KV pages to decode)");
                }
    }
    if (ret_bytes)
        *ret_bytes += bytes;
    if (ret_copies)
        *ret_copies += region_runs; /* runs, whichever way they moved */
    return TDM_OK;
}

/* Runs on a CUDA thread once the copies before it completed: no CUDA call here. */
static void CUDART_CB wake_cb(void *arg)
{
    uint64_t one = 1;
    ssize_t w = write((int)(intptr_t)arg, &one, sizeof(one));
    (void)w; /* a full eventfd is awake already */
}

tdm_status_t tdm_xfer_cuda_fence(xfer_cuda_t *c, int wake_fd, void **ret_ev)
{
    cudaEvent_t ev;
    cudaError_t e;
    if (!c || !ret_ev)
        return TDM_ERR_INVAL;
    CU_TRY(use_device(c), "cudaSetDevice");
    if (c->n_ev_free)
        ev = c->ev_free[--c->n_ev_free];
    else
        CU_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    if ((e = cudaEventRecord(ev, c->copy_stream)) != cudaSuccess) {
        cudaEventDestroy(ev);
        return cu_fail("cudaEventRecord", e);
    }
    /* best effort: without the wake the transfer thread still polls every millisecond */
    if (wake_fd >= 0 &&
        (e = cudaLaunchHostFunc(c->copy_stream, wake_cb, (void *)(intptr_t)wake_fd)) != cudaSuccess)
        tdm_warn(TDM_SUB_XFER, "cuda ipc: cudaLaunchHostFunc: %s", cudaGetErrorString(e));
    *ret_ev = ev;
    return TDM_OK;
}

void tdm_xfer_cuda_drain(xfer_cuda_t *c)
{
    if (!c)
        return;
    use_device(c);
    cudaStreamSynchronize(c->copy_stream);
}

int tdm_xfer_cuda_fence_poll(xfer_cuda_t *c, void *ev)
{
    if (!c || !ev)
        return -1;
    use_device(c);
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaSuccess) {
        __atomic_store_n(&c->ev_done, (cudaEvent_t)ev, __ATOMIC_RELAXED);
        return 1;
    }
    if (e == cudaErrorNotReady)
        return 0;
    cu_fail("cudaEventQuery (room copies)", e);
    return -1;
}

void tdm_xfer_cuda_fence_free(xfer_cuda_t *c, void *ev)
{
    if (!c || !ev)
        return;
    use_device(c);
    /* kept only once completed: a pending one may still be recorded for an aborted room. The
     * event of the poll that just said so needs no second query (nothing records a held event;
     * a query of a completed event took 1.65 us of host time on the H200) */
    cudaEvent_t polled = (cudaEvent_t)ev;
    int done = __atomic_compare_exchange_n(&c->ev_done, &polled, NULL, 0, __ATOMIC_RELAXED,
                                           __ATOMIC_RELAXED) ||
               cudaEventQuery((cudaEvent_t)ev) == cudaSuccess;
    if (c->n_ev_free < XFER_CUDA_EVENTS_KEPT && done)
        c->ev_free[c->n_ev_free++] = (cudaEvent_t)ev;
    else
        cudaEventDestroy((cudaEvent_t)ev);
}

void *tdm_xfer_cuda_stream(xfer_cuda_t *c)
{
    return c ? (void *)c->copy_stream : NULL;
}

/* Grow the checksum scratch (mu held). */
static tdm_status_t scratch(xfer_cuda_t *c, size_t pages, size_t segs)
{
    if (pages > c->pages_cap) {
        cudaFree(c->d_pages);
        c->d_pages = NULL;
        c->pages_cap = 0;
        CU_TRY(cudaMalloc((void **)&c->d_pages, pages * sizeof(uint32_t)), "cudaMalloc (pages)");
        c->pages_cap = pages;
    }
    if (segs > c->seg_cap) {
        cudaFree(c->d_seg);
        cudaFreeHost(c->h_seg);
        c->d_seg = c->h_seg = NULL;
        c->seg_cap = 0;
        CU_TRY(cudaMalloc((void **)&c->d_seg, segs * sizeof(uint64_t)), "cudaMalloc (hashes)");
        CU_TRY(cudaMallocHost((void **)&c->h_seg, segs * sizeof(uint64_t)),
               "cudaMallocHost (hashes)");
        c->seg_cap = segs;
    }
    return TDM_OK;
}

static tdm_status_t page_sums_locked(xfer_cuda_t *c, const tdm_kv_buffers_t *kv,
                                     const uint32_t *pages, uint32_t n, uint64_t *ret_sums,
                                     uint64_t *ret_seg)
{
    const tdm_kv_layout_t *l = kv->layout;
    const size_t per = (size_t)l->num_layers * l->n_sub;
    for (uint32_t i = 0; i < n; i++)
        if (pages[i] >= kv->num_pages)
            return TDM_ERR_RANGE;
    CU_TRY(use_device(c), "cudaSetDevice");
    TDM_TRY(scratch(c, n, per * n));
    CU_TRY(cudaMemcpyAsync(c->d_pages, pages, (size_t)n * sizeof(uint32_t), cudaMemcpyHostToDevice,
                           c->sum_stream),
           "cudaMemcpyAsync (page ids)");
    TDM_TRY(tdm_cuda_kv_segment_hashes(kv, c->d_pages, n, c->d_seg, c->sum_stream));
    CU_TRY(cudaMemcpyAsync(c->h_seg, c->d_seg, per * n * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                           c->sum_stream),
           "cudaMemcpyAsync (hashes)");
    CU_TRY(cudaStreamSynchronize(c->sum_stream), "cudaStreamSynchronize (checksums)");
    /* the folds of tdm_xfer_page_sums: per page layer-major, sub-buffer order, from 0; per
     * segment over the pages in order */
    if (ret_seg)
        memset(ret_seg, 0, per * sizeof(uint64_t));
    for (uint32_t i = 0; i < n; i++) {
        uint64_t h = 0;
        for (size_t k = 0; k < per; k++) {
            h = tdm_hash_combine(h, c->h_seg[(size_t)i * per + k]);
            if (ret_seg)
                ret_seg[k] = tdm_xfer_seg_fold(ret_seg[k], c->h_seg[(size_t)i * per + k]);
        }
        ret_sums[i] = h;
    }
    return TDM_OK;
}

tdm_status_t tdm_xfer_cuda_page_sums(xfer_cuda_t *c, const tdm_kv_buffers_t *kv,
                                     const uint32_t *pages, uint32_t n, uint64_t *ret_sums,
                                     uint64_t *ret_seg)
{
    if (!c || !kv || !kv->layout || !kv->base || (n && (!pages || !ret_sums)))
        return TDM_ERR_INVAL;
    if (n == 0) {
        if (ret_seg)
            memset(ret_seg, 0, (size_t)kv->layout->num_layers * kv->layout->n_sub * 8);
        return TDM_OK;
    }
    pthread_mutex_lock(&c->mu);
    tdm_status_t st = page_sums_locked(c, kv, pages, n, ret_sums, ret_seg);
    pthread_mutex_unlock(&c->mu);
    return st;
}

static tdm_status_t flip_locked(xfer_cuda_t *c, uint8_t *dev_byte, uint8_t mask)
{
    uint8_t b;
    CU_TRY(use_device(c), "cudaSetDevice");
    CU_TRY(cudaMemcpyAsync(&b, dev_byte, 1, cudaMemcpyDeviceToHost, c->sum_stream),
           "cudaMemcpyAsync (flip read)");
    CU_TRY(cudaStreamSynchronize(c->sum_stream), "cudaStreamSynchronize (flip)");
    b ^= mask;
    CU_TRY(cudaMemcpyAsync(dev_byte, &b, 1, cudaMemcpyHostToDevice, c->sum_stream),
           "cudaMemcpyAsync (flip write)");
    CU_TRY(cudaStreamSynchronize(c->sum_stream), "cudaStreamSynchronize (flip)");
    return TDM_OK;
}

tdm_status_t tdm_xfer_cuda_flip(xfer_cuda_t *c, uint8_t *dev_byte, uint8_t mask)
{
    if (!c || !dev_byte)
        return TDM_ERR_INVAL;
    pthread_mutex_lock(&c->mu);
    tdm_status_t st = flip_locked(c, dev_byte, mask);
    pthread_mutex_unlock(&c->mu);
    return st;
}
