/*
 * forward.c — one forward step of the Llama/Qwen2/Qwen3 decoder over a paged KV cache.
 *
 *   x = embed(ids)                      (TP: own vocab rows, -0.0 elsewhere, allreduce)
 *   per layer:  h = rmsnorm(x += mlp_prev) · attn_norm
 *               q, k, v = h·Wqᵀ+bq, h·Wkᵀ+bk, h·Wvᵀ+bv
 *               (Qwen3: q, k = rmsnorm per head · q_norm, k_norm);  rope(q), rope(k)
 *               cache[layer][pos] = k, v;  a = attention(q, cache[layer])
 *               o = allreduce(a·Woᵀ);  h = rmsnorm(x += o) · mlp_norm
 *               mlp_prev = allreduce((silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ)
 *   h = rmsnorm(x += mlp_prev) · final_norm;  logits = h[rows]·lm_headᵀ
 *                                       (TP: own vocab slice, allgather in rank order)
 *
 * Rows of all sequences are concatenated; each row carries its own page table and absolute
 * position, so no kernel looks at batch composition. Everything is validated before the first
 * kernel runs, so bad input never leaves a half-written cache.
 */
#include "config.h"

#include <string.h>

#include "graph_int.h"

static tdm_status_t allreduce(tdm_graph_t *g, float *buf, size_t n)
{
    if (g->view->tp_size <= 1)
        return TDM_OK;
    return g->coll.allreduce_sum(g->coll.ctx, buf, n);
}

/* Vocab-parallel embedding: rows of the ids in this rank's slice, -0.0 (the exact additive
 * identity: the tree sum then reproduces the owner's value bit for bit, -0.0 included) elsewhere,
 * summed across ranks. */
static tdm_status_t embed_tp(tdm_graph_t *g, uint32_t n)
{
    const tdm_backend_t *be = g->be;
    const tdm_model_view_t *v = g->view;
    uint32_t d = g->cfg->hidden_size, k = 0;

    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = (uint32_t)g->ids[i];
        if (id >= v->vocab_lo && id - v->vocab_lo < v->vocab_r) {
            g->lids[k] = (int32_t)(id - v->vocab_lo);
            g->lrow[k++] = i;
        }
    }
    if (k)
        TDM_TRY(be->embed(be->ctx, &v->embed, g->lids, k, g->h));
    for (size_t e = 0; e < (size_t)n * d; e++)
        g->x[e] = -0.0f;
    for (uint32_t j = 0; j < k; j++)
        memcpy(g->x + (size_t)g->lrow[j] * d, g->h + (size_t)j * d, d * sizeof(float));
    return g->coll.allreduce_sum(g->coll.ctx, g->x, (size_t)n * d);
}

/* Vocab-parallel logits: this rank's slice of m rows, all-gathered lg_rows rows at a time; rank
 * q's block holds its rows with stride vocab_r(q), padded to vcap. */
static tdm_status_t logits_tp(tdm_graph_t *g, uint32_t m, float *logits)
{
    const tdm_backend_t *be = g->be;
    const tdm_model_view_t *v = g->view;
    uint32_t d = g->cfg->hidden_size, V = g->cfg->vocab_size, N = v->tp_size;

    for (uint32_t j0 = 0; j0 < m; j0 += g->lg_rows) {
        uint32_t mb = m - j0 < g->lg_rows ? m - j0 : g->lg_rows;
        size_t blk = (size_t)mb * g->vcap;
        TDM_TRY(be->logits(be->ctx, g->h, d, g->out_rows + j0, mb, &v->lm_head, g->lg_local));
        TDM_TRY(g->coll.allgather(g->coll.ctx, g->lg_local, g->lg_all, blk));
        for (uint32_t q = 0; q < N; q++) {
            uint32_t lo, vn;
            tdm_model_vocab_range(V, N, q, &lo, &vn);
            for (uint32_t j = 0; j < mb; j++)
                memcpy(logits + (size_t)(j0 + j) * V + lo, g->lg_all + q * blk + (size_t)j * vn,
                       vn * sizeof(float));
        }
    }
    return TDM_OK;
}

/* Fill rows/pos/ids/out_rows; count rows and logit rows. */
static tdm_status_t plan_batch(tdm_graph_t *g, const tdm_graph_seq_t *seqs, uint32_t n_seqs,
                               uint32_t *ret_n, uint32_t *ret_m, int *ret_decode)
{
    uint32_t n = 0, m = 0, ps = g->kv_page_size, vocab = g->cfg->vocab_size;
    int decode = 1;

    for (uint32_t s = 0; s < n_seqs; s++) {
        const tdm_graph_seq_t *q = &seqs[s];
        uint64_t end = (uint64_t)q->pos0 + q->n_tokens;
        if (q->n_tokens == 0 || !q->tokens || !q->pages)
            return TDM_ERR_INVAL;
        if (q->n_tokens > g->max_tokens - n)
            return TDM_ERR_OVERFLOW;
        if (end > (uint64_t)q->n_pages * ps || end > UINT32_MAX)
            return TDM_ERR_RANGE;
        for (uint32_t p = 0; p < (end + ps - 1) / ps; p++)
            if (q->pages[p] >= g->kv_num_pages)
                return TDM_ERR_RANGE;
        if (q->n_tokens != 1)
            decode = 0;
        for (uint32_t t = 0; t < q->n_tokens; t++) {
            if (q->tokens[t] < 0 || (uint32_t)q->tokens[t] >= vocab)
                return TDM_ERR_RANGE;
            g->rows[n] = (tdm_attn_row_t){q->pages, q->n_pages, q->pos0 + t};
            g->pos[n] = q->pos0 + t;
            g->ids[n] = q->tokens[t];
            if (q->all_logits || t + 1 == q->n_tokens)
                g->out_rows[m++] = n;
            n++;
        }
    }
    *ret_n = n;
    *ret_m = m;
    *ret_decode = decode;
    return TDM_OK;
}

tdm_status_t tdm_graph_forward(tdm_graph_t *g, const tdm_graph_seq_t *seqs, uint32_t n_seqs,
                               float *logits, uint32_t cap_rows, uint32_t *ret_rows)
{
    const tdm_backend_t *be;
    const tdm_model_view_t *v;
    uint32_t n, m, d, H, KV;
    int decode;
    const float *add = NULL;

    if (!g || !seqs || n_seqs == 0 || !logits || !ret_rows)
        return TDM_ERR_INVAL;
    be = g->be;
    v = g->view;
    TDM_TRY(plan_batch(g, seqs, n_seqs, &n, &m, &decode));
    if (m > cap_rows)
        return TDM_ERR_OVERFLOW;
    d = g->cfg->hidden_size;
    H = v->heads_r;
    KV = v->kv_heads_r;

    if (v->tp_size > 1)
        TDM_TRY(embed_tp(g, n));
    else
        TDM_TRY(be->embed(be->ctx, &v->embed, g->ids, n, g->x));
    for (uint32_t l = 0; l < g->cfg->num_layers; l++) {
        const tdm_layer_weights_t *w = &v->layers[l];
        TDM_TRY(
            be->rmsnorm_add(be->ctx, g->x, add, &w->attn_norm, g->cfg->rms_norm_eps, n, d, g->h));
        TDM_TRY(be->matmul(be->ctx, g->h, n, &w->q, &w->q_bias, g->q));
        TDM_TRY(be->matmul(be->ctx, g->h, n, &w->k, &w->k_bias, g->k));
        TDM_TRY(be->matmul(be->ctx, g->h, n, &w->v, &w->v_bias, g->v));
        if (w->q_norm.data) { /* Qwen3: RMSNorm over each head's hd values, in place */
            uint32_t hd = g->cfg->head_dim;
            TDM_TRY(be->rmsnorm_add(be->ctx, g->q, NULL, &w->q_norm, g->cfg->rms_norm_eps, n * H,
                                    hd, g->q));
            TDM_TRY(be->rmsnorm_add(be->ctx, g->k, NULL, &w->k_norm, g->cfg->rms_norm_eps, n * KV,
                                    hd, g->k));
        }
        TDM_TRY(be->rope(be->ctx, &g->rope, g->q, g->pos, n, H));
        TDM_TRY(be->rope(be->ctx, &g->rope, g->k, g->pos, n, KV));
        /* I7: the layer's KV only through the gate, which waits for its loads */
        const tdm_kv_buffers_t *kv = tdm_kv_layer_acquire(g->kv_gate, &g->batch, l);
        TDM_TRY(be->kv_write(be->ctx, kv, l, g->k, g->v, g->rows, n));
        if (decode)
            TDM_TRY(be->attn_decode(be->ctx, kv, l, g->q, H, g->rows, n, g->attn));
        else
            TDM_TRY(be->attn_prefill(be->ctx, kv, l, g->q, H, g->rows, n, g->attn));
        TDM_TRY(be->matmul(be->ctx, g->attn, n, &w->o, NULL, g->tmp));
        TDM_TRY(allreduce(g, g->tmp, (size_t)n * d));
        TDM_TRY(
            be->rmsnorm_add(be->ctx, g->x, g->tmp, &w->mlp_norm, g->cfg->rms_norm_eps, n, d, g->h));
        TDM_TRY(be->matmul(be->ctx, g->h, n, &w->gate, NULL, g->gate));
        TDM_TRY(be->matmul(be->ctx, g->h, n, &w->up, NULL, g->up));
        TDM_TRY(be->silu_mul(be->ctx, g->gate, g->up, (size_t)n * v->inter_r, g->gate));
        TDM_TRY(be->matmul(be->ctx, g->gate, n, &w->down, NULL, g->tmp));
        TDM_TRY(allreduce(g, g->tmp, (size_t)n * d));
        add = g->tmp;
    }
    TDM_TRY(be->rmsnorm_add(be->ctx, g->x, add, &v->final_norm, g->cfg->rms_norm_eps, n, d, g->h));
    if (v->tp_size > 1)
        TDM_TRY(logits_tp(g, m, logits));
    else
        TDM_TRY(be->logits(be->ctx, g->h, d, g->out_rows, m, &v->lm_head, logits));
    *ret_rows = m;
    return TDM_OK;
}
