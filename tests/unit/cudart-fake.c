/*
 * tests/unit/cudart-fake.c — a test double of the slice of the CUDA runtime that
 * dataplane/xfer/cuda_ipc.c calls, plus the launchers of the checksum and gather kernels, so the
 * transfer engine's GPU path (cfg.kv_cuda) runs end to end on a host without a GPU
 * (test-xfer-cudaipc.c). It is linked into that test only; the real runtime is exercised by
 * tests/gpu/.
 *
 * Model: "device memory" is host memory from mmap; an IPC handle names an allocation and opening
 * it (in this process: real CUDA refuses that, the double allows it) returns the same address.
 * Streams are FIFO queues. A device-to-device copy lands only `tdm_fake_cuda_copy_latency_us`
 * after it was queued (and after everything queued before it on its stream); an event completes
 * when everything before it landed; a host function runs when reached. A KV gather launch lands
 * like a copy; its run list is taken during the call, as the kernel's parameters are, so the
 * caller may reuse it at once. A host-to-device copy from pinned memory (cudaMallocHost) reads
 * its source when reached, while one from pageable memory is staged before the call returns. Work
 * advances
 * whenever the engine queries an event or synchronises a stream, so a STATUS sent before its event
 * completed would let decode read pages that were not written yet — which the test detects.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>

#include <tdm/hash.h>
#include <tdm/kv.h>
#include <tdm/time.h>

#include "kernels/cuda/xfer_ops.h"

uint64_t tdm_fake_cuda_copy_latency_us = 20000;
uint64_t tdm_fake_cuda_d2d_bytes;
uint64_t tdm_fake_cuda_gathers, tdm_fake_cuda_gather_segs; /* launches; region runs copied */

#define MAX_ALLOCS 64
#define MAX_PINNED 64
#define FAKE_MAGIC 0x454b4146u /* "FAKE" */

typedef struct falloc {
    uint8_t *base;
    size_t size;
    uint32_t id;
} falloc_t;

typedef struct fevent {
    int done;
} fevent_t;

enum { OP_COPY, OP_GATHER, OP_HOSTFN, OP_EVENT };

typedef struct fop {
    int kind;
    void *dst;
    const void *src;
    size_t len;
    uint64_t ready_us;
    cudaHostFn_t fn;
    void *arg;
    fevent_t *ev;
    tdm_cuda_kv_map_t map;     /* OP_GATHER: the regions, */
    tdm_cuda_page_run_t *runs; /* (len) runs, owned; dst/src the bases */
    struct fop *next;
} fop_t;

typedef struct fstream {
    fop_t *head, *tail;
    struct fstream *next_all;
} fstream_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static falloc_t allocs[MAX_ALLOCS];
static uint32_t next_id = 1;
static fstream_t *streams;
static struct {
    uint8_t *p;
    size_t n;
} pinned[MAX_PINNED];

static int is_pinned(const void *p)
{
    for (int i = 0; i < MAX_PINNED; i++)
        if (pinned[i].p && (const uint8_t *)p >= pinned[i].p &&
            (const uint8_t *)p < pinned[i].p + pinned[i].n)
            return 1;
    return 0;
}

static void run_gather(const fop_t *o)
{
    const tdm_cuda_kv_map_t *m = &o->map;
    for (uint32_t l = 0; l < m->num_layers; l++)
        for (uint32_t s = 0; s < m->n_sub; s++)
            for (size_t i = 0; i < o->len; i++) {
                const uint64_t st = m->page_stride[s], n = o->runs[i].n_pages * st;
                memcpy((uint8_t *)o->dst + l * m->dst_layer_bytes + m->dst_sub_offset[s] +
                           o->runs[i].dst_page * st,
                       (const uint8_t *)o->src + l * m->src_layer_bytes + m->src_sub_offset[s] +
                           o->runs[i].src_page * st,
                       n);
                tdm_fake_cuda_d2d_bytes += n;
            }
    tdm_fake_cuda_gather_segs += o->len * m->num_layers * m->n_sub;
}

/* Run the stream's ready ops in order (mu held); force: everything. Host functions run unlocked
 * in real CUDA's thread; here they only write an eventfd, so under mu is fine. */
static void advance(fstream_t *s, int force)
{
    uint64_t now = tdm_time_mono_us();
    while (s->head) {
        fop_t *o = s->head;
        if (!force && (o->kind == OP_COPY || o->kind == OP_GATHER) && now < o->ready_us)
            return;
        if (o->kind == OP_COPY)
            memcpy(o->dst, o->src, o->len);
        else if (o->kind == OP_GATHER)
            run_gather(o);
        else if (o->kind == OP_HOSTFN)
            o->fn(o->arg);
        else
            o->ev->done = 1;
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        free(o->runs);
        free(o);
    }
}

static void push(fstream_t *s, fop_t *o)
{
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess ? "no error" : "fake CUDA error";
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    memset(p, 0, sizeof(*p));
    strcpy(p->name, "fake device");
    p->major = 9;
    for (int i = 0; i < 16; i++)
        p->uuid.bytes[i] = (char)(0xa0 + i);
    return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    void *m = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return cudaErrorMemoryAllocation;
    memset(m, 0xa5, n); /* device memory starts as garbage */
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (!allocs[i].base) {
            allocs[i] = (falloc_t){m, n ? n : 1, next_id++};
            pthread_mutex_unlock(&mu);
            *p = m;
            return cudaSuccess;
        }
    pthread_mutex_unlock(&mu);
    munmap(m, n ? n : 1);
    return cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base == p) {
            munmap(p, allocs[i].size);
            memset(&allocs[i], 0, sizeof(allocs[i]));
            pthread_mutex_unlock(&mu);
            return cudaSuccess;
        }
    pthread_mutex_unlock(&mu);
    return cudaErrorInvalidValue;
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
    *p = malloc(n ? n : 1);
    if (!*p)
        return cudaErrorMemoryAllocation;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_PINNED; i++)
        if (!pinned[i].p) {
            pinned[i].p = *p;
            pinned[i].n = n ? n : 1;
            pthread_mutex_unlock(&mu);
            return cudaSuccess;
        }
    pthread_mutex_unlock(&mu);
    free(*p);
    *p = NULL;
    return cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
    if (!p)
        return cudaSuccess;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_PINNED; i++)
        if (pinned[i].p == p)
            memset(&pinned[i], 0, sizeof(pinned[i]));
    pthread_mutex_unlock(&mu);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base && allocs[i].base == p) {
            uint32_t m = FAKE_MAGIC;
            memcpy(h->reserved, &m, 4);
            memcpy(h->reserved + 4, &allocs[i].id, 4);
            pthread_mutex_unlock(&mu);
            return cudaSuccess;
        }
    pthread_mutex_unlock(&mu);
    return cudaErrorInvalidValue; /* not the start of an allocation */
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int flags)
{
    uint32_t m, id;
    memcpy(&m, h.reserved, 4);
    memcpy(&id, h.reserved + 4, 4);
    if (m != FAKE_MAGIC || flags != cudaIpcMemLazyEnablePeerAccess)
        return cudaErrorInvalidValue;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base && allocs[i].id == id) {
            *p = allocs[i].base;
            pthread_mutex_unlock(&mu);
            return cudaSuccess;
        }
    pthread_mutex_unlock(&mu);
    return cudaErrorInvalidResourceHandle;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
    (void)p;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    fstream_t *f = calloc(1, sizeof(*f));
    pthread_mutex_lock(&mu);
    f->next_all = streams;
    streams = f;
    pthread_mutex_unlock(&mu);
    *s = (cudaStream_t)f;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    pthread_mutex_lock(&mu);
    advance((fstream_t *)s, 1);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    fstream_t *f = (fstream_t *)s;
    pthread_mutex_lock(&mu);
    advance(f, 1);
    for (fstream_t **pp = &streams; *pp; pp = &(*pp)->next_all)
        if (*pp == f) {
            *pp = f->next_all;
            break;
        }
    pthread_mutex_unlock(&mu);
    free(f);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t s)
{
    fop_t *o = calloc(1, sizeof(*o));
    o->kind = OP_COPY;
    o->dst = dst;
    o->src = src;
    o->len = n;
    pthread_mutex_lock(&mu);
    if (k == cudaMemcpyDeviceToDevice) {
        o->ready_us = tdm_time_mono_us() + tdm_fake_cuda_copy_latency_us;
        tdm_fake_cuda_d2d_bytes += n;
    }
    push((fstream_t *)s, o);
    if (k == cudaMemcpyHostToDevice && !is_pinned(src))
        advance((fstream_t *)s, 1); /* pageable host memory: staged before the call returns */
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = (cudaEvent_t)calloc(1, sizeof(fevent_t));
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    fop_t *o = calloc(1, sizeof(*o));
    o->kind = OP_EVENT;
    o->ev = (fevent_t *)e;
    pthread_mutex_lock(&mu);
    o->ev->done = 0;
    push((fstream_t *)s, o);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg)
{
    fop_t *o = calloc(1, sizeof(*o));
    o->kind = OP_HOSTFN;
    o->fn = fn;
    o->arg = arg;
    pthread_mutex_lock(&mu);
    push((fstream_t *)s, o);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    pthread_mutex_lock(&mu);
    for (fstream_t *f = streams; f; f = f->next_all)
        advance(f, 0);
    int done = ((fevent_t *)e)->done;
    pthread_mutex_unlock(&mu);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    for (;;) {
        pthread_mutex_lock(&mu);
        for (fstream_t *f = streams; f; f = f->next_all)
            advance(f, 0);
        int done = ((fevent_t *)e)->done;
        pthread_mutex_unlock(&mu);
        if (done)
            return cudaSuccess;
        tdm_time_sleep_us(200);
    }
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

/* The kernel's contract on the host: XXH64 (libxxhash) of every (page, layer, sub) segment. */
tdm_status_t tdm_cuda_kv_segment_hashes(const tdm_kv_buffers_t *kv, const uint32_t *d_pages,
                                        uint32_t n_pages, uint64_t *d_out, cudaStream_t stream)
{
    const tdm_kv_layout_t *l = kv->layout;
    pthread_mutex_lock(&mu);
    advance((fstream_t *)stream, 1);
    pthread_mutex_unlock(&mu);
    size_t k = 0;
    for (uint32_t i = 0; i < n_pages; i++)
        for (uint32_t layer = 0; layer < l->num_layers; layer++)
            for (uint32_t s = 0; s < l->n_sub; s++)
                d_out[k++] = tdm_hash_xxh64(tdm_kv_slot(kv, layer, (tdm_kv_sub_t)s, d_pages[i], 0),
                                            l->sub[s].page_stride, 0);
    return TDM_OK;
}

/* The KV gather kernel on the host: queued like a copy (lands after the latency), its runs taken
 * now (the real ones travel as launch parameters). */
tdm_status_t tdm_cuda_kv_gather(const uint8_t *src_base, uint8_t *dst_base,
                                const tdm_cuda_kv_map_t *map, const tdm_cuda_page_run_t *runs,
                                uint32_t n_runs, cudaStream_t stream, uint32_t *ret_launches)
{
    if (!map || map->n_sub > TDM_KV_SUB_MAX || (n_runs && (!src_base || !dst_base || !runs)))
        return TDM_ERR_INVAL;
    if (ret_launches)
        *ret_launches = n_runs ? 1 : 0;
    if (n_runs == 0)
        return TDM_OK;
    fop_t *o = calloc(1, sizeof(*o));
    o->kind = OP_GATHER;
    o->dst = dst_base;
    o->src = src_base;
    o->map = *map;
    o->runs = malloc(n_runs * sizeof(*runs));
    memcpy(o->runs, runs, n_runs * sizeof(*runs));
    o->len = n_runs;
    pthread_mutex_lock(&mu);
    o->ready_us = tdm_time_mono_us() + tdm_fake_cuda_copy_latency_us;
    tdm_fake_cuda_gathers++;
    push((fstream_t *)stream, o);
    pthread_mutex_unlock(&mu);
    return TDM_OK;
}
