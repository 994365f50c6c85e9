/*
 * engine_load.cu — the weights of a model view uploaded to one device allocation (q|k|v and
 * gate|up concatenated row-wise, gate|up interleaved for the SwiGLU epilogue), and the checks of
 * the view's shapes before it.
 */
#include "engine_int.h"

/* Copy `rows` rows of tensor t (cols elements, its row stride) into dst, contiguous. */
static void stage_rows(const tdm_tensor_t *t, size_t es, uint8_t *dst)
{
    for (uint32_t r = 0; r < t->rows; r++)
        memcpy(dst + (size_t)r * t->cols * es,
               (const uint8_t *)t->data + (size_t)r * t->row_stride * es, (size_t)t->cols * es);
}

/* gate|up with rows interleaved (gate_0, up_0, gate_1, ...): the SwiGLU epilogue's layout */
static void stage_rows_pairs(const tdm_tensor_t *g, const tdm_tensor_t *u, size_t es, uint8_t *dst)
{
    const size_t rb = (size_t)g->cols * es;
    for (uint32_t r = 0; r < g->rows; r++) {
        memcpy(dst + 2 * r * rb, (const uint8_t *)g->data + (size_t)r * g->row_stride * es, rb);
        memcpy(dst + (2 * r + 1) * rb, (const uint8_t *)u->data + (size_t)r * u->row_stride * es,
               rb);
    }
}

static void stage_f32(const tdm_tensor_t *t, float *dst)
{
    if (t->rows == 1) {
        tdm_tensor_row_to_f32(t, 0, dst);
        return;
    }
    for (uint32_t r = 0; r < t->rows; r++)
        tdm_tensor_row_to_f32(t, r, dst + (size_t)r * t->cols);
}

typedef struct wplan {
    uint64_t off;
} wplan_t;

tdm_status_t tdm_cuda_engine_upload(tdm_cuda_engine_t *e, const tdm_model_view_t *v)
{
    tdm_status_t st = TDM_OK;
    const size_t es = e->wes;
    const uint32_t d = e->d, I = e->I, qd = e->H * e->hd, kd = e->KV * e->hd;
    const int has_bias = v->layers[0].q_bias.data != NULL;
    const int has_qkn = v->layers[0].q_norm.data != NULL; /* check_view: every layer or none */
    const int tied = v->lm_head.data == v->embed.data;
    uint64_t off = 0, per_layer[8], o_embed, o_lm, o_fn, o_freq;
    uint8_t *stage = NULL;
    size_t stage_bytes;
    tdm_rope_t rope;

    TDM_TRY(tdm_rope_init(&e->cfg, &rope));
    /* sizes: qkv, o, gu, down, bias, attn_norm, mlp_norm, q_norm|k_norm */
    uint64_t sz[8] = {align256((uint64_t)e->qkvd * d * es),
                      align256((uint64_t)d * qd * es),
                      align256((uint64_t)2 * I * d * es),
                      align256((uint64_t)d * I * es),
                      has_bias ? align256((uint64_t)e->qkvd * 4) : 0,
                      align256((uint64_t)d * 4),
                      align256((uint64_t)d * 4),
                      has_qkn ? align256((uint64_t)2 * e->hd * 4) : 0};
    uint64_t lbytes = 0;
    for (int i = 0; i < 8; i++) {
        per_layer[i] = lbytes;
        lbytes += sz[i];
    }
    off = lbytes * e->L;
    o_embed = off;
    off += align256((uint64_t)e->vr * d * es);
    o_lm = off;
    if (!tied)
        off += align256((uint64_t)e->vr * d * es);
    o_fn = off;
    off += align256((uint64_t)d * 4);
    o_freq = off;
    off += align256((uint64_t)e->hd / 2 * 4);
    e->wbytes = off;
    TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->wbuf, off), st, out);

    stage_bytes = (size_t)e->vr * d * es;
    if ((size_t)2 * I * d * es > stage_bytes)
        stage_bytes = (size_t)2 * I * d * es;
    if ((size_t)e->qkvd * d * es > stage_bytes)
        stage_bytes = (size_t)e->qkvd * d * es;
    stage = (uint8_t *)malloc(stage_bytes);
    if (!stage) {
        st = TDM_ERR_NOMEM;
        goto out;
    }
#define PUT(dst_off, bytes)                                                                        \
    TDM_CUDA_CHECK_GOTO(                                                                           \
        cudaMemcpyAsync(e->wbuf + (dst_off), stage, (bytes), cudaMemcpyHostToDevice, e->stream),   \
        st, out)
    for (uint32_t l = 0; l < e->L; l++) {
        const tdm_layer_weights_t *w = &v->layers[l];
        uint64_t b = lbytes * l;
        layer_dev_t *ld = &e->layers[l];
        stage_rows(&w->q, es, stage);
        stage_rows(&w->k, es, stage + (size_t)qd * d * es);
        stage_rows(&w->v, es, stage + (size_t)(qd + kd) * d * es);
        PUT(b + per_layer[0], (size_t)e->qkvd * d * es);
        stage_rows(&w->o, es, stage);
        PUT(b + per_layer[1], (size_t)d * qd * es);
        if (e->gu_il) {
            stage_rows_pairs(&w->gate, &w->up, es, stage);
        } else {
            stage_rows(&w->gate, es, stage);
            stage_rows(&w->up, es, stage + (size_t)I * d * es);
        }
        PUT(b + per_layer[2], (size_t)2 * I * d * es);
        stage_rows(&w->down, es, stage);
        PUT(b + per_layer[3], (size_t)d * I * es);
        if (has_bias) {
            float *f = (float *)stage;
            memset(f, 0, (size_t)e->qkvd * 4);
            if (w->q_bias.data)
                stage_f32(&w->q_bias, f);
            if (w->k_bias.data)
                stage_f32(&w->k_bias, f + qd);
            if (w->v_bias.data)
                stage_f32(&w->v_bias, f + qd + kd);
            PUT(b + per_layer[4], (size_t)e->qkvd * 4);
        }
        stage_f32(&w->attn_norm, (float *)stage);
        PUT(b + per_layer[5], (size_t)d * 4);
        stage_f32(&w->mlp_norm, (float *)stage);
        PUT(b + per_layer[6], (size_t)d * 4);
        if (has_qkn) {
            stage_f32(&w->q_norm, (float *)stage);
            stage_f32(&w->k_norm, (float *)stage + e->hd);
            PUT(b + per_layer[7], (size_t)2 * e->hd * 4);
        }
        ld->qkv = e->wbuf + b + per_layer[0];
        ld->o = e->wbuf + b + per_layer[1];
        ld->gu = e->wbuf + b + per_layer[2];
        ld->down = e->wbuf + b + per_layer[3];
        ld->qkv_bias = has_bias ? (const float *)(e->wbuf + b + per_layer[4]) : NULL;
        ld->attn_norm = (const float *)(e->wbuf + b + per_layer[5]);
        ld->mlp_norm = (const float *)(e->wbuf + b + per_layer[6]);
        ld->qk_norm = has_qkn ? (const float *)(e->wbuf + b + per_layer[7]) : NULL;
    }
    stage_rows(&v->embed, es, stage);
    PUT(o_embed, (size_t)e->vr * d * es);
    e->embed = e->wbuf + o_embed;
    if (!tied) {
        stage_rows(&v->lm_head, es, stage);
        PUT(o_lm, (size_t)e->vr * d * es);
        e->lm_head = e->wbuf + o_lm;
    } else {
        e->lm_head = e->embed;
    }
    stage_f32(&v->final_norm, (float *)stage);
    PUT(o_fn, (size_t)d * 4);
    e->final_norm = (const float *)(e->wbuf + o_fn);
    memcpy(stage, rope.inv_freq, (size_t)e->hd / 2 * 4);
    PUT(o_freq, (size_t)e->hd / 2 * 4);
    e->inv_freq = (const float *)(e->wbuf + o_freq);
#undef PUT
    /* the copies read `stage` (pageable: staged by the driver, but wait before freeing it) */
    TDM_CUDA_CHECK_GOTO(cudaStreamSynchronize(e->stream), st, out);
out:
    free(stage);
    return st;
}

tdm_status_t tdm_cuda_engine_check_view(const tdm_model_view_t *v, int wdt)
{
    const tdm_model_config_t *c = v->cfg;
    uint32_t d = c->hidden_size, hd = c->head_dim, qd = v->heads_r * hd, kd = v->kv_heads_r * hd;
    if (!v->layers || d == 0 || hd == 0 || v->kv_heads_r == 0 || v->heads_r % v->kv_heads_r)
        return TDM_ERR_INVAL;
    if (v->heads_r / v->kv_heads_r > TDM_CUDA_MAX_GROUP || hd > TDM_CUDA_MAX_HD || hd % 16 ||
        d % 8 || qd % 8 || v->inter_r % 8)
        return TDM_ERR_UNSUPPORTED;
#define T_OK(t, r, cc) ((t).data && (t).dtype == wdt && (t).rows == (r) && (t).cols == (cc))
    if (v->tp_size == 0 || v->vocab_r == 0 || !T_OK(v->embed, v->vocab_r, d) ||
        !T_OK(v->lm_head, v->vocab_r, d) || (uint64_t)v->final_norm.rows * v->final_norm.cols != d)
        return TDM_ERR_INVAL;
    for (uint32_t l = 0; l < c->num_layers; l++) {
        const tdm_layer_weights_t *w = &v->layers[l];
        if (!T_OK(w->q, qd, d) || !T_OK(w->k, kd, d) || !T_OK(w->v, kd, d) || !T_OK(w->o, d, qd) ||
            !T_OK(w->gate, v->inter_r, d) || !T_OK(w->up, v->inter_r, d) ||
            !T_OK(w->down, d, v->inter_r) || (uint64_t)w->attn_norm.rows * w->attn_norm.cols != d ||
            (uint64_t)w->mlp_norm.rows * w->mlp_norm.cols != d)
            return TDM_ERR_INVAL;
        /* Qwen3's q_norm/k_norm (hd each): on every layer or on none */
        const int qkn = c->arch == TDM_ARCH_QWEN3 || v->layers[0].q_norm.data;
        if (qkn ? !w->q_norm.data || !w->k_norm.data ||
                      (uint64_t)w->q_norm.rows * w->q_norm.cols != hd ||
                      (uint64_t)w->k_norm.rows * w->k_norm.cols != hd
                : w->q_norm.data || w->k_norm.data)
            return TDM_ERR_INVAL;
    }
#undef T_OK
    return TDM_OK;
}
