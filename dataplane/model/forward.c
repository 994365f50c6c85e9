/*
 * forward.c — one forward step of the Llama/Qwen2 decoder over a paged KV cache.
 *
 *   x = embed(ids)
 *   per layer:  h = rmsnorm(x += mlp_prev) · attn_norm
 *               q, k, v = h·Wqᵀ+bq, h·Wkᵀ+bk, h·Wvᵀ+bv;  rope(q), rope(k)
 *               cache[layer][pos] = k, v;  a = attention(q, cache[layer])
 *               o = allreduce(a·Woᵀ);  h = rmsnorm(x += o) · mlp_norm
 *               mlp_prev = allreduce((silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ)
 *   h = rmsnorm(x += mlp_prev) · final_norm;  logits = h[rows]·lm_headᵀ
 *
 * Rows of all sequences are concatenated; each row carries its own page table and absolute
 * position, so no kernel looks at batch composition. Everything is validated before the first
 * kernel runs, so bad input never leaves a half-written cache.
 */
#include "config.h"

#include "graph_int.h"

static tdm_status_t allreduce(tdm_graph_t *g, float *buf, size_t n)
{
    if (g->view->tp_size <= 1)
        return TDM_OK;
    return g->coll.allreduce_sum(g->coll.ctx, buf, n);
}

/* Fill rows/pos/ids/out_rows; count rows and logit rows. */
static tdm_status_t plan_batch(tdm_graph_t *g, const tdm_graph_seq_t *seqs, uint32_t n_seqs,
                               uint32_t *ret_n, uint32_t *ret_m, int *ret_decode)
{
    uint32_t n = 0, m = 0, ps = g->kv->layout->page_size, vocab = g->cfg->vocab_size;
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
            if (q->pages[p] >= g->kv->num_pages)
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

    TDM_TRY(be->embed(be->ctx, &v->embed, g->ids, n, g->x));
    for (uint32_t l = 0; l < g->cfg->num_layers; l++) {
        const tdm_layer_weights_t *w = &v->layers[l];
        TDM_TRY(
            be->rmsnorm_add(be->ctx, g->x, add, &w->attn_norm, g->cfg->rms_norm_eps, n, d, g->h));
        TDM_TRY(be->matmul(be->ctx, g->h, n, &w->q, &w->q_bias, g->q));
        TDM_TRY(be->matmul(be->ctx, g->h, n, &w->k, &w->k_bias, g->k));
        TDM_TRY(be->matmul(be->ctx, g->h, n, &w->v, &w->v_bias, g->v));
        TDM_TRY(be->rope(be->ctx, &g->rope, g->q, g->pos, n, H));
        TDM_TRY(be->rope(be->ctx, &g->rope, g->k, g->pos, n, KV));
        TDM_TRY(be->kv_write(be->ctx, g->kv, l, g->k, g->v, g->rows, n));
        if (decode)
            TDM_TRY(be->attn_decode(be->ctx, g->kv, l, g->q, H, g->rows, n, g->attn));
        else
            TDM_TRY(be->attn_prefill(be->ctx, g->kv, l, g->q, H, g->rows, n, g->attn));
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
    TDM_TRY(be->logits(be->ctx, g->h, d, g->out_rows, m, &v->lm_head, logits));
    *ret_rows = m;
    return TDM_OK;
}
