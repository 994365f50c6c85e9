/*
 * exec_cuda.c — the executor's CUDA forward (exec_cuda.h): the engine configured from the
 * serving configuration, tdm_graph_seq_t spans passed through unchanged (the two span types have
 * the same fields), logits copied back for the host sampler, or sampled on the device
 * (forward_sample: sample.h through the engine's post hook).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/layout.h>
#include <tdm/mem.h>

#include "device.h"
#include "engine.h"
#include "exec_cuda.h"

const tdm_hicache_dev_t *tdm_cuda_hicache_dev(void); /* hicache.cu */

struct tdm_exec_cuda {
    tdm_cuda_engine_t *e;
    tdm_cuda_sampler_t *sampler; /* forward_sample's, max_seqs rows */
    uint32_t vocab;
    tdm_cuda_seq_t *seqs; /* max_seqs */
    uint32_t max_seqs;
    /* launch_sample's PREV_TOKEN rows, written on the device by the pre hook */
    const uint32_t *prev_dst, *prev_src;
    uint32_t n_prev;
};

#define SET_ERR(...) snprintf(err, err_len, __VA_ARGS__)

tdm_status_t tdm_exec_cuda_init(const tdm_exec_cuda_cfg_t *cfg, tdm_exec_cuda_t **ret, char *err,
                                size_t err_len)
{
    tdm_cuda_engine_opts_t o;
    tdm_exec_cuda_t *x;
    tdm_status_t st;

    if (!cfg || !ret || !cfg->view || !cfg->view->cfg || cfg->max_seqs == 0 ||
        cfg->max_tokens < cfg->max_seqs || cfg->page_size == 0 || cfg->max_context == 0 ||
        !(cfg->mem_fraction_static > 0.0 && cfg->mem_fraction_static <= 1.0)) {
        SET_ERR("CUDA executor: bad configuration");
        return TDM_ERR_INVAL;
    }
    st = tdm_cuda_device_check(err, err_len);
    if (st != TDM_OK)
        return st;
    tdm_cuda_engine_opts_default(&o);
    o.mem_fraction_static = cfg->mem_fraction_static;
    o.max_tokens = cfg->max_tokens;
    o.max_batch = cfg->max_seqs;
    o.max_pages_per_seq = (cfg->max_context + cfg->page_size - 1) / cfg->page_size;
    o.max_pages = cfg->max_pages;
    o.max_logit_rows = cfg->max_seqs;
    o.kv_dtype = cfg->kv_dtype;
    o.page_size = cfg->page_size;
    x = tdm_calloc(1, sizeof(*x));
    x->max_seqs = cfg->max_seqs;
    x->seqs = tdm_calloc(cfg->max_seqs, sizeof(*x->seqs));
    st = tdm_cuda_engine_init(cfg->view, &o, &x->e);
    if (st != TDM_OK) {
        SET_ERR("CUDA engine (%u seqs, %u tokens, kv %s, page %u, mem-fraction %.2f): %s",
                cfg->max_seqs, cfg->max_tokens, tdm_dtype_name(cfg->kv_dtype), cfg->page_size,
                cfg->mem_fraction_static, tdm_status_str(st));
        tdm_exec_cuda_free(x);
        return st;
    }
    x->vocab = cfg->view->cfg->vocab_size;
    st = tdm_cuda_sampler_init(cfg->max_seqs, x->vocab, &x->sampler);
    if (st != TDM_OK) {
        SET_ERR("CUDA sampler (%u rows of %u): %s", cfg->max_seqs, x->vocab, tdm_status_str(st));
        tdm_exec_cuda_free(x);
        return st;
    }
    *ret = x;
    return TDM_OK;
}

void tdm_exec_cuda_free(tdm_exec_cuda_t *x)
{
    if (!x)
        return;
    tdm_cuda_sampler_free(x->sampler);
    tdm_cuda_engine_free(x->e);
    tdm_free(x->seqs);
    tdm_free(x);
}

tdm_status_t tdm_exec_cuda_set_coll(tdm_exec_cuda_t *x, const tdm_cuda_coll_t *coll)
{
    return x ? tdm_cuda_engine_set_coll(x->e, coll) : TDM_ERR_INVAL;
}

uint32_t tdm_exec_cuda_num_pages(const tdm_exec_cuda_t *x)
{
    return tdm_cuda_engine_num_pages(x->e);
}

const tdm_kv_layout_t *tdm_exec_cuda_layout(const tdm_exec_cuda_t *x)
{
    return tdm_cuda_engine_layout(x->e);
}

uint64_t tdm_exec_cuda_kv_bytes(const tdm_exec_cuda_t *x)
{
    uint64_t b = 0;
    (void)tdm_kv_layout_pool_bytes(tdm_cuda_engine_layout(x->e), tdm_cuda_engine_num_pages(x->e),
                                   &b);
    return b;
}

const tdm_kv_buffers_t *tdm_exec_cuda_kv(const tdm_exec_cuda_t *x)
{
    return tdm_cuda_engine_kv(x->e);
}

uint64_t tdm_exec_cuda_weight_bytes(const tdm_exec_cuda_t *x)
{
    return tdm_cuda_engine_weight_bytes(x->e);
}

tdm_status_t tdm_exec_cuda_use_gate(tdm_exec_cuda_t *x, tdm_kv_gate_t *gate)
{
    return x ? tdm_cuda_engine_use_gate(x->e, gate) : TDM_ERR_INVAL;
}

void tdm_exec_cuda_set_batch(tdm_exec_cuda_t *x, const tdm_kv_batch_t *b)
{
    tdm_cuda_engine_set_batch(x->e, b);
}

const tdm_hicache_dev_t *tdm_exec_cuda_hicache_dev(void)
{
    return tdm_cuda_hicache_dev();
}

tdm_status_t tdm_exec_cuda_forward(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs, uint32_t n_seqs,
                                   float *logits, uint32_t cap_rows, uint32_t *ret_rows)
{
    if (!x || !seqs || !logits || !ret_rows || n_seqs == 0)
        return TDM_ERR_INVAL;
    if (n_seqs > x->max_seqs)
        return TDM_ERR_OVERFLOW;
    for (uint32_t i = 0; i < n_seqs; i++)
        x->seqs[i] = (tdm_cuda_seq_t){seqs[i].tokens, seqs[i].n_tokens, seqs[i].pos0,
                                      seqs[i].pages,  seqs[i].n_pages,  seqs[i].all_logits};
    return tdm_cuda_engine_forward(x->e, x->seqs, n_seqs, logits, NULL, cap_rows, ret_rows);
}

tdm_status_t tdm_exec_cuda_forward_sample(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs,
                                          uint32_t n_seqs, const tdm_cuda_sample_req_t *reqs,
                                          float *host_logits, tdm_cuda_sample_out_t *outs,
                                          uint32_t *ret_rows)
{
    if (!x || !seqs || !reqs || !outs || !ret_rows || n_seqs == 0)
        return TDM_ERR_INVAL;
    if (n_seqs > x->max_seqs)
        return TDM_ERR_OVERFLOW;
    for (uint32_t i = 0; i < n_seqs; i++) {
        if (seqs[i].all_logits)
            return TDM_ERR_INVAL; /* one logits row per sequence */
        x->seqs[i] = (tdm_cuda_seq_t){seqs[i].tokens, seqs[i].n_tokens, seqs[i].pos0,
                                      seqs[i].pages,  seqs[i].n_pages,  0};
    }
    memcpy(tdm_cuda_sampler_reqs(x->sampler), reqs, n_seqs * sizeof(*reqs));
    tdm_cuda_sampler_set_host_logits(x->sampler, host_logits);
    tdm_cuda_engine_set_post(x->e, tdm_cuda_sampler_enqueue, x->sampler);
    tdm_status_t st = tdm_cuda_engine_forward(x->e, x->seqs, n_seqs, NULL, NULL, n_seqs, ret_rows);
    tdm_cuda_engine_set_post(x->e, NULL, NULL);
    if (st == TDM_OK)
        memcpy(outs, tdm_cuda_sampler_outs(x->sampler), n_seqs * sizeof(*outs));
    return st;
}

/* The engine's pre hook: the PREV_TOKEN rows' ids from the last sampler run, chunk by chunk; each
 * destination is the caller's row, mapped to the engine's (a mixed call reorders its rows). */
static tdm_status_t fix_prev(void *ctx, uint32_t *d_ids, const uint32_t *row_of, uint32_t n_rows,
                             void *stream)
{
    tdm_exec_cuda_t *x = ctx;
    tdm_cuda_prev_fix_t fix;
    for (uint32_t i = 0; i < x->n_prev; i += TDM_CUDA_PREV_FIX_MAX) {
        fix.n = x->n_prev - i < TDM_CUDA_PREV_FIX_MAX ? x->n_prev - i : TDM_CUDA_PREV_FIX_MAX;
        for (uint32_t j = 0; j < fix.n; j++) {
            const uint32_t k = x->prev_dst[i + j];
            if (k >= n_rows)
                return TDM_ERR_RANGE;
            fix.dst[j] = row_of ? row_of[k] : k;
        }
        memcpy(fix.src, x->prev_src + i, fix.n * sizeof(uint32_t));
        TDM_TRY(tdm_cuda_sampler_fix_ids(x->sampler, d_ids, &fix, stream));
    }
    return TDM_OK;
}

tdm_status_t tdm_exec_cuda_launch_sample(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs,
                                         uint32_t n_seqs, const tdm_cuda_sample_req_t *reqs,
                                         const uint32_t *prev_dst, const uint32_t *prev_src,
                                         uint32_t n_prev, uint32_t *ret_rows, int *ret_slot)
{
    if (!x || !seqs || !reqs || !ret_rows || !ret_slot || n_seqs == 0 ||
        (n_prev && (!prev_dst || !prev_src)))
        return TDM_ERR_INVAL;
    if (n_seqs > x->max_seqs)
        return TDM_ERR_OVERFLOW;
    for (uint32_t i = 0; i < n_seqs; i++) {
        if (seqs[i].all_logits || (reqs[i].host && !reqs[i].skip))
            return TDM_ERR_INVAL;
        x->seqs[i] = (tdm_cuda_seq_t){seqs[i].tokens, seqs[i].n_tokens, seqs[i].pos0,
                                      seqs[i].pages,  seqs[i].n_pages,  0};
    }
    int slot = tdm_cuda_sampler_flip(x->sampler);
    memcpy(tdm_cuda_sampler_reqs(x->sampler), reqs, n_seqs * sizeof(*reqs));
    tdm_cuda_sampler_set_host_logits(x->sampler, NULL);
    x->prev_dst = prev_dst;
    x->prev_src = prev_src;
    x->n_prev = n_prev;
    tdm_cuda_engine_set_pre(x->e, n_prev ? fix_prev : NULL, x);
    tdm_cuda_engine_set_post(x->e, tdm_cuda_sampler_enqueue, x->sampler);
    tdm_status_t st = tdm_cuda_engine_launch(x->e, x->seqs, n_seqs, n_seqs, ret_rows, slot);
    tdm_cuda_engine_set_post(x->e, NULL, NULL);
    tdm_cuda_engine_set_pre(x->e, NULL, NULL);
    x->n_prev = 0;
    if (st == TDM_OK)
        *ret_slot = slot;
    return st;
}

tdm_status_t tdm_exec_cuda_finish_sample(tdm_exec_cuda_t *x, int slot, tdm_cuda_sample_out_t *outs,
                                         uint32_t n)
{
    if (!x || !outs || n > x->max_seqs)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_cuda_engine_finish(x->e, slot));
    memcpy(outs, tdm_cuda_sampler_outs_of(x->sampler, slot), n * sizeof(*outs));
    return TDM_OK;
}
