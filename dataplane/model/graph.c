/*
 * graph.c — building a rank's forward graph (validation of the view against the KV layout,
 * scratch for max_tokens rows) and the in-process TP collective.
 *
 * The collective is the plainest correct all-reduce: each rank publishes its buffer, waits for
 * the others, computes the rank-order tree sum of every element into private scratch, waits
 * again, and copies the sum back. Two barriers per call are enough: nobody writes its own buffer
 * before everyone has finished reading it, and nobody publishes the next buffer before everyone
 * has finished copying. The all-gather is the same two-barrier shape: publish, copy every rank's
 * buffer in rank order, wait.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>

#include "graph_int.h"

static int tensor_ok(const tdm_tensor_t *t, uint32_t rows, uint32_t cols)
{
    return t->data &&
           (t->dtype == TDM_DTYPE_BF16 || t->dtype == TDM_DTYPE_F16 || t->dtype == TDM_DTYPE_F32) &&
           t->rows == rows && t->cols == cols && t->row_stride >= cols;
}

static int vec_ok(const tdm_tensor_t *t, uint32_t n)
{
    return t->data && (uint64_t)t->rows * t->cols == n;
}

static int bias_ok(const tdm_tensor_t *t, uint32_t n)
{
    return !t->data || vec_ok(t, n);
}

static int is_pow2(uint32_t x)
{
    return x && (x & (x - 1)) == 0;
}

static tdm_status_t check_view(const tdm_model_view_t *v, const tdm_kv_layout_t *kl)
{
    const tdm_model_config_t *c = v->cfg;
    uint32_t d = c->hidden_size, hd = c->head_dim, qd = v->heads_r * hd, kd = v->kv_heads_r * hd;

    if (d == 0 || hd == 0 || v->heads_r == 0 || v->kv_heads_r == 0 || v->inter_r == 0 ||
        v->heads_r % v->kv_heads_r != 0 || !v->layers)
        return TDM_ERR_INVAL;
    if (kl->num_layers != c->num_layers || kl->num_kv_heads != v->kv_heads_r || kl->head_dim != hd)
        return TDM_ERR_INVAL;
    uint32_t vlo, vn;
    tdm_model_vocab_range(c->vocab_size, v->tp_size, v->tp_rank, &vlo, &vn);
    if (vn == 0 || v->vocab_lo != vlo || v->vocab_r != vn)
        return TDM_ERR_INVAL;
    if (!tensor_ok(&v->embed, vn, d) || !tensor_ok(&v->lm_head, vn, d) ||
        !vec_ok(&v->final_norm, d))
        return TDM_ERR_INVAL;
    for (uint32_t l = 0; l < c->num_layers; l++) {
        const tdm_layer_weights_t *w = &v->layers[l];
        if (!vec_ok(&w->attn_norm, d) || !vec_ok(&w->mlp_norm, d) || !tensor_ok(&w->q, qd, d) ||
            !tensor_ok(&w->k, kd, d) || !tensor_ok(&w->v, kd, d) || !tensor_ok(&w->o, d, qd) ||
            !tensor_ok(&w->gate, v->inter_r, d) || !tensor_ok(&w->up, v->inter_r, d) ||
            !tensor_ok(&w->down, d, v->inter_r) || !bias_ok(&w->q_bias, qd) ||
            !bias_ok(&w->k_bias, kd) || !bias_ok(&w->v_bias, kd))
            return TDM_ERR_INVAL;
    }
    return TDM_OK;
}

tdm_status_t tdm_graph_init(const tdm_model_view_t *view, const tdm_kv_buffers_t *kv,
                            const tdm_backend_t *be, const tdm_graph_coll_t *coll,
                            uint32_t max_tokens, tdm_graph_t **ret_graph)
{
    tdm_status_t st;
    tdm_graph_t *g;
    size_t T = max_tokens, d, qd, kd, total;

    if (!view || !view->cfg || !kv || !kv->layout || !be || !ret_graph || max_tokens == 0)
        return TDM_ERR_INVAL;
    if (view->tp_size > 1 && (!coll || !coll->allreduce_sum || !coll->allgather))
        return TDM_ERR_INVAL;
    TDM_TRY(check_view(view, kv->layout));

    g = tdm_calloc(1, sizeof(*g));
    g->view = view;
    g->cfg = view->cfg;
    st = tdm_kv_gate_init(kv, 0, &g->own_kv_gate);
    if (st != TDM_OK)
        goto err_free;
    g->kv_gate = g->own_kv_gate;
    g->kv_page_size = kv->layout->page_size;
    g->kv_num_pages = kv->num_pages;
    g->be = be;
    if (coll)
        g->coll = *coll;
    g->max_tokens = max_tokens;
    TDM_CHECK_GOTO(tdm_rope_init(view->cfg, &g->rope), st, err_free);

    d = g->cfg->hidden_size;
    qd = (size_t)view->heads_r * g->cfg->head_dim;
    kd = (size_t)view->kv_heads_r * g->cfg->head_dim;
    /* x, h, tmp (T,d); q, attn (T,qd); k, v (T,kd); gate, up (T,inter_r) */
    st = TDM_ERR_OVERFLOW;
    if (tdm_size_muladd(d, 3, 2 * qd + 2 * kd + 2 * (size_t)view->inter_r, &total) != TDM_OK ||
        tdm_size_mul(total, T, &total) != TDM_OK ||
        tdm_size_mul(total, sizeof(float), &total) != TDM_OK)
        goto err_free;
    g->arena = aligned_alloc(64, (total + 63) & ~(size_t)63);
    if (!g->arena) {
        st = TDM_ERR_NOMEM;
        goto err_free;
    }
    {
        float *p = g->arena;
        g->x = p, p += T * d;
        g->h = p, p += T * d;
        g->tmp = p, p += T * d;
        g->q = p, p += T * qd;
        g->attn = p, p += T * qd;
        g->k = p, p += T * kd;
        g->v = p, p += T * kd;
        g->gate = p, p += T * view->inter_r;
        g->up = p;
    }
    g->rows = tdm_calloc(T, sizeof(*g->rows));
    g->pos = tdm_calloc(T, sizeof(*g->pos));
    g->ids = tdm_calloc(T, sizeof(*g->ids));
    g->out_rows = tdm_calloc(T, sizeof(*g->out_rows));
    if (view->tp_size > 1) {
        /* the logits gather moves at most LG_BUDGET floats per collective */
        enum { LG_BUDGET = 1u << 22 };
        size_t N = view->tp_size, per_row;
        g->vcap = (uint32_t)(((uint64_t)g->cfg->vocab_size + N - 1) / N);
        per_row = N * g->vcap;
        g->lg_rows = per_row >= LG_BUDGET ? 1 : (uint32_t)(LG_BUDGET / per_row);
        if (g->lg_rows > max_tokens)
            g->lg_rows = max_tokens;
        g->lids = tdm_calloc(T, sizeof(*g->lids));
        g->lrow = tdm_calloc(T, sizeof(*g->lrow));
        g->lg_local = tdm_calloc((size_t)g->lg_rows * g->vcap, sizeof(float));
        g->lg_all = tdm_calloc((size_t)g->lg_rows * per_row, sizeof(float));
    }

    g->tp_exact = 1;
    if (view->tp_size > 1) {
        uint32_t n = view->tp_size;
        g->tp_exact = is_pow2(n) && qd % TDM_DOT_BLOCK == 0 && view->inter_r % TDM_DOT_BLOCK == 0;
    }
    *ret_graph = g;
    return TDM_OK;

err_free:
    tdm_kv_gate_free(g->own_kv_gate);
    tdm_free(g);
    return st;
}

tdm_status_t tdm_graph_use_gate(tdm_graph_t *g, tdm_kv_gate_t *gate)
{
    if (!g || !gate || tdm_kv_gate_num_pages(gate) != g->kv_num_pages ||
        tdm_kv_gate_layout(gate)->page_size != g->kv_page_size ||
        tdm_kv_gate_layout(gate)->num_layers != g->cfg->num_layers)
        return TDM_ERR_INVAL;
    g->kv_gate = gate;
    return TDM_OK;
}

void tdm_graph_set_batch(tdm_graph_t *g, const tdm_kv_batch_t *b)
{
    g->batch = b ? *b : (tdm_kv_batch_t){0, 0};
}

void tdm_graph_free(tdm_graph_t *g)
{
    if (!g)
        return;
    tdm_kv_gate_free(g->own_kv_gate);
    free(g->arena);
    tdm_free(g->rows);
    tdm_free(g->pos);
    tdm_free(g->ids);
    tdm_free(g->out_rows);
    tdm_free(g->lids);
    tdm_free(g->lrow);
    tdm_free(g->lg_local);
    tdm_free(g->lg_all);
    tdm_free(g);
}

int tdm_graph_tp_exact(const tdm_graph_t *g)
{
    return g->tp_exact;
}

typedef struct coll_rank {
    struct tdm_graph_coll_local *group;
    uint32_t rank;
    float *scratch;
    size_t cap;
} coll_rank_t;

struct tdm_graph_coll_local {
    uint32_t n_ranks;
    pthread_barrier_t bar;
    const float *bufs[64];
    size_t lens[64];
    coll_rank_t ranks[64];
};

static tdm_status_t local_allreduce(void *ctx, float *buf, size_t n)
{
    coll_rank_t *r = ctx;
    struct tdm_graph_coll_local *c = r->group;
    tdm_status_t st = TDM_OK;

    if (n > r->cap) {
        float *nb = realloc(r->scratch, n * sizeof(float));
        if (nb) {
            r->scratch = nb;
            r->cap = n;
        }
    }
    c->bufs[r->rank] = buf;
    c->lens[r->rank] = n <= r->cap ? n : 0;
    pthread_barrier_wait(&c->bar);
    for (uint32_t i = 0; i < c->n_ranks; i++)
        if (c->lens[i] != n)
            st = TDM_ERR_STATE; /* a rank out of memory or a mismatched call: everyone fails */
    if (st == TDM_OK)
        tdm_reduce_tree_combine(c->bufs, c->n_ranks, r->scratch, n);
    pthread_barrier_wait(&c->bar);
    if (st == TDM_OK)
        memcpy(buf, r->scratch, n * sizeof(float));
    return st;
}

static tdm_status_t local_allgather(void *ctx, const float *in, float *out, size_t n)
{
    coll_rank_t *r = ctx;
    struct tdm_graph_coll_local *c = r->group;
    tdm_status_t st = TDM_OK;

    c->bufs[r->rank] = in;
    c->lens[r->rank] = n;
    pthread_barrier_wait(&c->bar);
    for (uint32_t i = 0; i < c->n_ranks; i++)
        if (c->lens[i] != n)
            st = TDM_ERR_STATE; /* a mismatched call: everyone fails */
    if (st == TDM_OK)
        for (uint32_t i = 0; i < c->n_ranks; i++)
            memcpy(out + (size_t)i * n, c->bufs[i], n * sizeof(float));
    pthread_barrier_wait(&c->bar);
    return st;
}

tdm_status_t tdm_graph_coll_local_init(uint32_t n_ranks, tdm_graph_coll_local_t **ret)
{
    tdm_graph_coll_local_t *c;
    if (n_ranks == 0 || n_ranks > 64 || !ret)
        return TDM_ERR_INVAL;
    c = tdm_calloc(1, sizeof(*c));
    c->n_ranks = n_ranks;
    if (pthread_barrier_init(&c->bar, NULL, n_ranks) != 0) {
        tdm_free(c);
        return TDM_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < n_ranks; i++) {
        c->ranks[i].group = c;
        c->ranks[i].rank = i;
    }
    *ret = c;
    return TDM_OK;
}

void tdm_graph_coll_local_free(tdm_graph_coll_local_t *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->n_ranks; i++)
        free(c->ranks[i].scratch);
    pthread_barrier_destroy(&c->bar);
    tdm_free(c);
}

tdm_graph_coll_t tdm_graph_coll_local_rank(tdm_graph_coll_local_t *c, uint32_t rank)
{
    tdm_graph_coll_t h = {NULL, NULL, NULL};
    if (c && rank < c->n_ranks) {
        h.ctx = &c->ranks[rank];
        h.allreduce_sum = local_allreduce;
        h.allgather = local_allgather;
    }
    return h;
}
