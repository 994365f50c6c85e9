/*
 * oneshot_engine.c — the CPU engine without a scheduler (contract in oneshot_engine.h): a TP-1
 * view, the CPU backend, a KV pool with one page table per sequence, and the forward graph.
 * Prompts longer than one graph call are prefilled in chunks, which the CPU backend makes
 * bit-identical to one call (docs/design.md §9), so the graph's scratch stays bounded by
 * PREFILL_CHUNK.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/kv.h>
#include <tdm/mem.h>

#include "dataplane/model/graph.h"
#include "oneshot_engine.h"

#define PREFILL_CHUNK 512u

struct tdm_oneshot_engine {
    tdm_model_view_t view;
    int have_view;
    tdm_backend_t be;
    int have_be;
    tdm_kv_pool_t *pool;
    tdm_kv_seq_t *seqs;
    uint32_t *pos; /* tokens already in the cache, per sequence */
    uint32_t n_seqs;
    size_t max_tokens;
    uint32_t vocab;
    tdm_graph_t *graph;
    tdm_graph_seq_t *gs;
    float *logits; /* n_seqs rows of vocab */
};

#define SET_ERR(...) snprintf(err, err_len, __VA_ARGS__)

tdm_status_t tdm_oneshot_engine_init(const tdm_model_t *m, tdm_dtype_t kv_dtype, uint32_t page_size,
                                     uint32_t n_seqs, size_t max_tokens, uint32_t threads,
                                     tdm_oneshot_engine_t **ret, char *err, size_t err_len)
{
    tdm_status_t st;
    tdm_kv_layout_t layout;
    size_t logits_bytes;
    uint32_t pages_per_seq, num_pages, chunk;

    if (!m || !ret || n_seqs == 0 || max_tokens == 0 || page_size == 0) {
        SET_ERR("engine: bad arguments");
        return TDM_ERR_INVAL;
    }
    if (max_tokens > UINT32_MAX - page_size) {
        SET_ERR("engine: %zu tokens per sequence is too many", max_tokens);
        return TDM_ERR_RANGE;
    }
    const tdm_model_config_t *c = tdm_model_config(m);
    tdm_oneshot_engine_t *e = tdm_calloc(1, sizeof(*e));
    e->n_seqs = n_seqs;
    e->max_tokens = max_tokens;
    e->vocab = c->vocab_size;

    TDM_CHECK_GOTO(tdm_model_view_init(m, 1, 0, &e->view, err, err_len), st, err_free);
    e->have_view = 1;
    st = tdm_backend_cpu_init(threads, &e->be);
    if (st != TDM_OK) {
        SET_ERR("CPU backend: %s", tdm_status_str(st));
        goto err_free;
    }
    e->have_be = 1;
    st = tdm_kv_layout_init(c, kv_dtype, page_size, 1, 0, &layout);
    if (st != TDM_OK) {
        SET_ERR("KV layout (dtype %s, page size %u): %s", tdm_dtype_name(kv_dtype), page_size,
                tdm_status_str(st));
        goto err_free;
    }
    pages_per_seq = (uint32_t)((max_tokens + page_size - 1) / page_size);
    if (__builtin_mul_overflow(pages_per_seq, n_seqs, &num_pages) ||
        __builtin_mul_overflow((size_t)n_seqs * sizeof(float), (size_t)e->vocab, &logits_bytes)) {
        SET_ERR("engine: %u sequences of %zu tokens overflow the KV pool", n_seqs, max_tokens);
        st = TDM_ERR_OVERFLOW;
        goto err_free;
    }
    st = tdm_kv_pool_init(&layout, num_pages, &e->pool);
    if (st != TDM_OK) {
        SET_ERR("KV pool of %u pages: %s", num_pages, tdm_status_str(st));
        goto err_free;
    }
    e->seqs = tdm_calloc(n_seqs, sizeof(tdm_kv_seq_t));
    e->pos = tdm_calloc(n_seqs, sizeof(uint32_t));
    e->gs = tdm_calloc(n_seqs, sizeof(tdm_graph_seq_t));
    for (uint32_t i = 0; i < n_seqs; i++)
        tdm_kv_seq_init(&e->seqs[i], pages_per_seq);
    e->logits = malloc(logits_bytes);
    if (!e->logits) {
        SET_ERR("engine: no memory for %zu bytes of logits", logits_bytes);
        st = TDM_ERR_NOMEM;
        goto err_free;
    }
    chunk = max_tokens < PREFILL_CHUNK ? (uint32_t)max_tokens : PREFILL_CHUNK;
    if (chunk < n_seqs)
        chunk = n_seqs;
    st = tdm_graph_init(&e->view, tdm_kv_pool_buffers(e->pool), &e->be, NULL, chunk, &e->graph);
    if (st != TDM_OK) {
        SET_ERR("forward graph for %u rows: %s", chunk, tdm_status_str(st));
        goto err_free;
    }
    *ret = e;
    return TDM_OK;

err_free:
    tdm_oneshot_engine_free(e);
    return st;
}

void tdm_oneshot_engine_free(tdm_oneshot_engine_t *e)
{
    if (!e)
        return;
    tdm_graph_free(e->graph);
    if (e->seqs)
        for (uint32_t i = 0; i < e->n_seqs; i++)
            tdm_kv_seq_free(e->pool, &e->seqs[i]);
    tdm_kv_pool_free(e->pool);
    if (e->have_be)
        tdm_backend_cpu_free(&e->be);
    if (e->have_view)
        tdm_model_view_free(&e->view);
    free(e->logits);
    tdm_free(e->seqs);
    tdm_free(e->pos);
    tdm_free(e->gs);
    tdm_free(e);
}

static tdm_status_t reserve(tdm_oneshot_engine_t *e, uint32_t seq, uint32_t n)
{
    if ((size_t)e->pos[seq] + n > e->max_tokens)
        return TDM_ERR_RANGE;
    return tdm_kv_seq_reserve(e->pool, &e->seqs[seq], e->pos[seq] + n);
}

static void graph_seq(tdm_oneshot_engine_t *e, uint32_t seq, const int32_t *ids, uint32_t n,
                      tdm_graph_seq_t *gs)
{
    gs->tokens = ids;
    gs->n_tokens = n;
    gs->pos0 = e->pos[seq];
    gs->pages = e->seqs[seq].pages;
    gs->n_pages = e->seqs[seq].n_pages;
    gs->all_logits = 0;
}

tdm_status_t tdm_oneshot_engine_prefill(tdm_oneshot_engine_t *e, uint32_t seq, const int32_t *ids,
                                        uint32_t n, const float **ret_logits)
{
    if (!e || !ids || n == 0 || seq >= e->n_seqs || !ret_logits)
        return TDM_ERR_INVAL;
    uint32_t chunk_cap = e->max_tokens < PREFILL_CHUNK ? (uint32_t)e->max_tokens : PREFILL_CHUNK;
    if (chunk_cap < e->n_seqs)
        chunk_cap = e->n_seqs;
    for (uint32_t done = 0; done < n;) {
        uint32_t chunk = n - done < chunk_cap ? n - done : chunk_cap, rows = 0;
        TDM_TRY(reserve(e, seq, chunk));
        tdm_graph_seq_t gs;
        graph_seq(e, seq, ids + done, chunk, &gs);
        TDM_TRY(tdm_graph_forward(e->graph, &gs, 1, e->logits, e->n_seqs, &rows));
        e->pos[seq] += chunk;
        done += chunk;
    }
    *ret_logits = e->logits;
    return TDM_OK;
}

tdm_status_t tdm_oneshot_engine_decode(tdm_oneshot_engine_t *e, const int32_t *ids, uint32_t n,
                                       const float **ret_logits)
{
    uint32_t rows = 0;
    if (!e || !ids || n == 0 || n > e->n_seqs || !ret_logits)
        return TDM_ERR_INVAL;
    for (uint32_t i = 0; i < n; i++) {
        TDM_TRY(reserve(e, i, 1));
        graph_seq(e, i, &ids[i], 1, &e->gs[i]);
    }
    TDM_TRY(tdm_graph_forward(e->graph, e->gs, n, e->logits, e->n_seqs, &rows));
    if (rows != n)
        return TDM_ERR_STATE;
    for (uint32_t i = 0; i < n; i++)
        e->pos[i]++;
    *ret_logits = e->logits;
    return TDM_OK;
}

void tdm_oneshot_engine_reset(tdm_oneshot_engine_t *e)
{
    if (!e)
        return;
    for (uint32_t i = 0; i < e->n_seqs; i++) {
        tdm_kv_seq_release(e->pool, &e->seqs[i]);
        e->pos[i] = 0;
    }
}

uint64_t tdm_oneshot_engine_weight_bytes(const tdm_oneshot_engine_t *e)
{
    return e->view.resident_bytes;
}

uint32_t tdm_oneshot_engine_threads(const tdm_oneshot_engine_t *e)
{
    return tdm_backend_cpu_threads(&e->be);
}
