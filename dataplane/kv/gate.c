/*
 * gate.c — the layer gate of the KV pool (invariant I7; contract in include/tdm/hicache.h).
 *
 * The gate owns the only copy of the KV buffers the forward may read: tdm_kv_layer_acquire hands
 * them out per (batch, layer) once every load the batch needs has published that layer. Loads
 * complete in ticket order per layer (one copy thread, or one copy stream on the GPU), so one
 * high-water mark per layer is the whole state: done[layer] >= need means every page of every
 * load up to `need` has that layer in place. On the GPU the mark becomes one event per
 * (ticket, layer) recorded after the copy thread enqueued the layer's copies, and the wait is
 * this CPU wait (for the enqueue) plus a cudaStreamWaitEvent by the reader on the event
 * tdm_kv_layer_acquire_dev returns (kernels/cuda/hicache.cu).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <tdm/hicache.h>
#include <tdm/mem.h>

struct tdm_kv_gate {
    tdm_kv_buffers_t kv;
    tdm_kv_layout_t layout;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t *done; /* per layer, under mu */
    int (*skip)(void *ctx, uint64_t iter, uint32_t layer);
    void *skip_ctx;
    void *(*event)(void *ctx, uint64_t ticket, uint32_t layer);
    void *event_ctx;
    uint64_t bypasses, poison, waits; /* atomics */
};

tdm_status_t tdm_kv_gate_init(const tdm_kv_buffers_t *kv, int count_poison, tdm_kv_gate_t **ret)
{
    if (!kv || !kv->layout || !ret)
        return TDM_ERR_INVAL;
    tdm_kv_gate_t *g = tdm_calloc(1, sizeof(*g));
    g->layout = *kv->layout;
    g->kv = *kv;
    g->kv.layout = &g->layout;
    g->kv.poison_reads = count_poison ? &g->poison : NULL;
    g->done = tdm_calloc(g->layout.num_layers, sizeof(uint64_t));
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *ret = g;
    return TDM_OK;
}

void tdm_kv_gate_free(tdm_kv_gate_t *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    tdm_free(g->done);
    tdm_free(g);
}

const tdm_kv_layout_t *tdm_kv_gate_layout(const tdm_kv_gate_t *g)
{
    return &g->layout;
}

uint32_t tdm_kv_gate_num_pages(const tdm_kv_gate_t *g)
{
    return g->kv.num_pages;
}

void tdm_kv_gate_set_skip(tdm_kv_gate_t *g, int (*skip)(void *ctx, uint64_t iter, uint32_t layer),
                          void *ctx)
{
    g->skip = skip;
    g->skip_ctx = ctx;
}

void tdm_kv_gate_set_events(tdm_kv_gate_t *g,
                            void *(*event)(void *ctx, uint64_t ticket, uint32_t layer), void *ctx)
{
    g->event = event;
    g->event_ctx = ctx;
}

void tdm_kv_gate_publish(tdm_kv_gate_t *g, uint64_t ticket, uint32_t layer)
{
    if (layer >= g->layout.num_layers)
        return;
    pthread_mutex_lock(&g->mu);
    if (ticket > g->done[layer])
        g->done[layer] = ticket;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

const tdm_kv_buffers_t *tdm_kv_layer_acquire(tdm_kv_gate_t *g, const tdm_kv_batch_t *b,
                                             uint32_t layer)
{
    return tdm_kv_layer_acquire_dev(g, b, layer, NULL);
}

const tdm_kv_buffers_t *tdm_kv_layer_acquire_dev(tdm_kv_gate_t *g, const tdm_kv_batch_t *b,
                                                 uint32_t layer, void **ret_event)
{
    if (ret_event)
        *ret_event = NULL;
    if (!b || b->need == 0 || layer >= g->layout.num_layers)
        return &g->kv;
    int skipped = g->skip && g->skip(g->skip_ctx, b->iter, layer);
    pthread_mutex_lock(&g->mu);
#ifndef TDM_TEST_DROP_GATE_WAIT
    if (!skipped && g->done[layer] < b->need) {
        __atomic_fetch_add(&g->waits, 1, __ATOMIC_RELAXED);
        while (g->done[layer] < b->need)
            pthread_cond_wait(&g->cv, &g->mu);
    }
#endif
    int early = g->done[layer] < b->need;
    pthread_mutex_unlock(&g->mu);
    /* GPU: the copies of (need, layer) are enqueued and their event recorded; the reader's
     * stream waits on it. Skipped or early: no wait, the read races the copy. */
    if (ret_event && !early && !skipped && g->event)
        *ret_event = g->event(g->event_ctx, b->need, layer);
    if (early) {
        /* a read of a layer still loading: only a missing wait gets here */
        __atomic_fetch_add(&g->bypasses, 1, __ATOMIC_RELAXED);
#ifdef TDM_DEBUG
        if (!skipped) {
            fprintf(stderr, "tdm_kv_layer_acquire: layer %u read before load %llu completed\n",
                    layer, (unsigned long long)b->need);
            abort();
        }
#endif
    }
    return &g->kv;
}

uint64_t tdm_kv_gate_bypasses(const tdm_kv_gate_t *g)
{
    return __atomic_load_n(&g->bypasses, __ATOMIC_RELAXED);
}

uint64_t tdm_kv_gate_poison_reads(const tdm_kv_gate_t *g)
{
    return __atomic_load_n(&g->poison, __ATOMIC_RELAXED);
}

uint64_t tdm_kv_gate_waits(const tdm_kv_gate_t *g)
{
    return __atomic_load_n(&g->waits, __ATOMIC_RELAXED);
}
