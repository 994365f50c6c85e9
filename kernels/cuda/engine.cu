/*
 * engine.cu — the GPU forward of one rank: weights and the paged KV pool resident on the device,
 * the layer loop of dataplane/model/forward.c on the kernels of ops.cu, decode steps replayed as
 * CUDA graphs per batch-size bucket.
 *
 * Per layer, small batches (n <= gemv_max_rows, or non-bf16 weights) run 7 launches:
 *   qkv = GEMV[norm](x; attn_norm, Wqkv) + b;  (Qwen3: RMSNorm of each q and k head, one
 *   launch);  rope + KV write;  attention split; combine;
 *   x += GEMV(attn; Wo);  gu = GEMV[norm](x; mlp_norm, Wgu);  x += GEMV[silu](gu; Wdown)
 * and wide batches run RMSNorm → bf16 → cuBLAS (beta = 1 folds the residual add) instead.
 * The plan of a call (ids, positions, page-table offsets, active rows, logit rows, page tables)
 * is one host staging block copied with one cudaMemcpyAsync into a fixed device block, so a
 * captured graph reads each step's plan from the same addresses.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "engine.h"

extern "C" {
#include <tdm/mem.h>

#include "../backend.h"
}

#define MAX_BUCKETS 12

typedef struct layer_dev {
    const void *qkv, *o, *gu, *down;
    const float *qkv_bias; /* NULL when the model has none */
    const float *attn_norm, *mlp_norm;
    const float *qk_norm; /* (2, hd): q_norm | k_norm (Qwen3); NULL when the model has none */
} layer_dev_t;

struct tdm_cuda_engine {
    tdm_cuda_engine_opts_t o;
    tdm_model_config_t cfg;
    uint32_t d, H, KV, hd, I, V, L, qkvd;
    int wdt;
    size_t wes;
    /* weights: one allocation */
    uint8_t *wbuf;
    uint64_t wbytes;
    layer_dev_t *layers;
    const void *embed, *lm_head;
    const float *final_norm, *inv_freq;
    /* KV pool */
    tdm_kv_layout_t layout;
    tdm_kv_buffers_t kvb;
    tdm_cuda_kv_t kv;
    uint8_t *kv_base;
    /* activations: T rows each */
    uint32_t T, rowsplits;
    uint32_t prow; /* plan row stride of the current call: T, or max_batch for decode calls (run
                    * 11: a decode step copies ~1 KB of plan instead of ~66 KB at T 4096) */
    uint8_t *abuf;
    float *x, *qkv, *attn, *gu, *hsel, *logits, *part_o, *part_ml;
    uint16_t *xb;
    int32_t *d_ids_out;
    void *am_ws; /* the lm_head GEMV's fused argmax (TDM_CUDA_ARGMAX_WS bytes, zeroed) */
    int gu_il;   /* gate|up rows interleaved: the one-row SwiGLU epilogue is on (run 11) */
    /* plan: device block and pinned host staging of the same layout */
    size_t plan_bytes, pages_cap;
    uint32_t tiles_cap, ntiles; /* prefill attention tiles of the current call (0: split-K) */
    uint32_t *d_plan, *h_plan;
    int32_t *h_ids_out;
    int ids_mapped; /* argmax writes h_ids_out itself (mapped pinned memory): no copy-back op */
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *cublas_ws;
    cudaGraphExec_t graph[MAX_BUCKETS];
};

static int gemv_fusable(const tdm_cuda_engine_t *e, uint32_t n, uint32_t K);

/* plan block layout, in uint32 units */
enum { P_IDS = 0, P_POS = 1, P_PTOFF = 2, P_OUT = 3, P_NACT = 4, P_TILES = 5, P_PAGES = 6 };
static size_t plan_off(const tdm_cuda_engine_t *e, int part)
{
    return part < P_NACT     ? (size_t)part * e->prow
           : part == P_NACT  ? 4 * (size_t)e->prow
           : part == P_TILES ? 4 * (size_t)e->prow + 32
                             : 4 * (size_t)e->prow + 32 + e->tiles_cap;
}

/* A 0/1 knob from the environment: a value starting with 0 or 1 sets it, anything else leaves the
 * default. */
#define PDL_EARLY_ROWS 8 /* pdl_early: decode calls of at most this many rows */

static void env_bool(const char *name, int *v)
{
    const char *s = getenv(name);
    if (s && (*s == '0' || *s == '1'))
        *v = *s == '1';
}

void tdm_cuda_engine_opts_default(tdm_cuda_engine_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->mem_fraction_static = 0.9;
    o->max_tokens = 4096;
    o->max_batch = 32;
    o->max_pages_per_seq = 256;
    o->max_logit_rows = 256;
    o->gemv_max_rows = 1;
    o->use_graphs = 1;
    o->use_pdl = 1;
    o->use_skinny = 1;
    o->use_mma_attn = 1;
    o->gemv_ksplit = 3;
    o->attn_cluster = 1;
    o->swiglu_fused = 1;
    o->argmax_fused = 1;
    o->embed_fused = 1;
    o->pdl_early = 1;
    o->kv_dtype = TDM_DTYPE_BF16;
    o->page_size = TDM_KV_PAGE_SIZE_DEFAULT;
    const char *s = getenv("TDM_CUDA_GEMV_ROWS");
    if (s && *s)
        o->gemv_max_rows = (uint32_t)strtoul(s, NULL, 10);
    env_bool("TDM_CUDA_GRAPHS", &o->use_graphs);
    env_bool("TDM_CUDA_PDL", &o->use_pdl);
    env_bool("TDM_CUDA_SKINNY", &o->use_skinny);
    env_bool("TDM_CUDA_MMA_ATTN", &o->use_mma_attn);
    s = getenv("TDM_CUDA_GEMV_KSPLIT"); /* out of range: tdm_cuda_engine_init refuses it */
    if (s && *s >= '0' && *s <= '9' && (s[1] == 0 || (s[1] >= '0' && s[1] <= '9' && s[2] == 0)))
        o->gemv_ksplit = atoi(s);
    env_bool("TDM_CUDA_ATTN_CLUSTER", &o->attn_cluster);
    s = getenv("TDM_CUDA_ATTN_SPLITS");
    if (s && *s >= '1' && *s <= '8' && s[1] == 0)
        o->attn_splits = (uint32_t)(*s - '0');
    env_bool("TDM_CUDA_SWIGLU", &o->swiglu_fused);
    env_bool("TDM_CUDA_ARGMAX_FUSED", &o->argmax_fused);
    env_bool("TDM_CUDA_PDL_EARLY", &o->pdl_early);
    env_bool("TDM_CUDA_EMBED_FUSED", &o->embed_fused);
    /* L2 prefetch knobs: out-of-range values reach tdm_cuda_engine_init, which refuses them */
    s = getenv("TDM_CUDA_L2_PREFETCH");
    if (s && *s)
        o->l2pf_mb = (uint32_t)strtoul(s, NULL, 10);
    s = getenv("TDM_CUDA_L2_PREFETCH_TAIL");
    if (s && *s)
        o->l2pf_tail_mb = (uint32_t)strtoul(s, NULL, 10);
    s = getenv("TDM_CUDA_L2_PREFETCH_OP");
    if (s && *s)
        o->l2pf_op = atoi(s);
    env_bool("TDM_CUDA_L2_PREFETCH_EARLY", &o->l2pf_early);
}

static size_t dtype_size(int dt)
{
    return dt == TDM_DTYPE_F32 ? 4 : 2;
}

static uint64_t align256(uint64_t x)
{
    return (x + 255) & ~(uint64_t)255;
}

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

static tdm_status_t upload_weights(tdm_cuda_engine_t *e, const tdm_model_view_t *v)
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
    off += align256((uint64_t)e->V * d * es);
    o_lm = off;
    if (!tied)
        off += align256((uint64_t)e->V * d * es);
    o_fn = off;
    off += align256((uint64_t)d * 4);
    o_freq = off;
    off += align256((uint64_t)e->hd / 2 * 4);
    e->wbytes = off;
    TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->wbuf, off), st, out);

    stage_bytes = (size_t)e->V * d * es;
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
    PUT(o_embed, (size_t)e->V * d * es);
    e->embed = e->wbuf + o_embed;
    if (!tied) {
        stage_rows(&v->lm_head, es, stage);
        PUT(o_lm, (size_t)e->V * d * es);
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

static tdm_status_t check_view(const tdm_model_view_t *v, int wdt)
{
    const tdm_model_config_t *c = v->cfg;
    uint32_t d = c->hidden_size, hd = c->head_dim, qd = v->heads_r * hd, kd = v->kv_heads_r * hd;
    if (v->tp_size != 1)
        return TDM_ERR_UNSUPPORTED;
    if (!v->layers || d == 0 || hd == 0 || v->kv_heads_r == 0 || v->heads_r % v->kv_heads_r)
        return TDM_ERR_INVAL;
    if (v->heads_r / v->kv_heads_r > TDM_CUDA_MAX_GROUP || hd > TDM_CUDA_MAX_HD || hd % 16 ||
        d % 8 || qd % 8 || v->inter_r % 8)
        return TDM_ERR_UNSUPPORTED;
#define T_OK(t, r, cc) ((t).data && (t).dtype == wdt && (t).rows == (r) && (t).cols == (cc))
    if (!T_OK(v->embed, c->vocab_size, d) || !T_OK(v->lm_head, c->vocab_size, d) ||
        (uint64_t)v->final_norm.rows * v->final_norm.cols != d)
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

static uint32_t splits_for(const tdm_cuda_engine_t *e, uint32_t n)
{
    uint32_t s = (2 * 132 + n * e->KV - 1) / (n * e->KV);
    if (s > TDM_CUDA_MAX_SPLITS)
        s = TDM_CUDA_MAX_SPLITS;
    if (s < 1)
        s = 1;
    while (s > 1 && (uint64_t)n * s > e->rowsplits)
        s--;
    return s;
}

tdm_status_t tdm_cuda_engine_init(const tdm_model_view_t *view, const tdm_cuda_engine_opts_t *opts,
                                  tdm_cuda_engine_t **ret_engine)
{
    tdm_status_t st = TDM_OK;
    tdm_cuda_engine_t *e;
    size_t free_b = 0, total_b = 0;
    uint64_t pool_bytes = 0, act_bytes, budget;
    uint32_t num_pages = 0, T;

    if (!view || !view->cfg || !ret_engine)
        return TDM_ERR_INVAL;
    e = (tdm_cuda_engine_t *)tdm_calloc(1, sizeof(*e));
    if (opts)
        e->o = *opts;
    else
        tdm_cuda_engine_opts_default(&e->o);
    if (e->o.l2pf_mb > 4096 || e->o.l2pf_tail_mb > 4096 || e->o.l2pf_op < 0 || e->o.l2pf_op > 3) {
        tdm_err(TDM_SUB_CUDA,
                "msg=\"L2 prefetch options out of range (TDM_CUDA_L2_PREFETCH and _TAIL: MiB <= "
                "4096; _OP: 0..3)\" mb=%u tail_mb=%u op=%d",
                e->o.l2pf_mb, e->o.l2pf_tail_mb, e->o.l2pf_op);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.attn_splits > 8) {
        tdm_err(TDM_SUB_CUDA, "msg=\"TDM_CUDA_ATTN_SPLITS out of range (1..8)\" splits=%u",
                e->o.attn_splits);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.gemv_ksplit < 0 || e->o.gemv_ksplit > 11) {
        tdm_err(TDM_SUB_CUDA, "msg=\"TDM_CUDA_GEMV_KSPLIT out of range (0..11)\" ksplit=%d",
                e->o.gemv_ksplit);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.max_tokens == 0 || e->o.max_batch == 0 || e->o.max_batch > 1024 ||
        e->o.max_pages_per_seq == 0 || e->o.max_logit_rows == 0 ||
        !(e->o.mem_fraction_static > 0.0 && e->o.mem_fraction_static <= 1.0)) {
        st = TDM_ERR_INVAL;
        goto err;
    }
    e->cfg = *view->cfg;
    e->wdt = view->embed.dtype;
    if (e->wdt != TDM_DTYPE_BF16 && e->wdt != TDM_DTYPE_F16 && e->wdt != TDM_DTYPE_F32) {
        st = TDM_ERR_UNSUPPORTED;
        goto err;
    }
    e->wes = dtype_size(e->wdt);
    if ((st = check_view(view, e->wdt)) != TDM_OK)
        goto err;
    e->d = e->cfg.hidden_size;
    e->H = view->heads_r;
    e->KV = view->kv_heads_r;
    e->hd = e->cfg.head_dim;
    e->I = view->inter_r;
    e->V = e->cfg.vocab_size;
    e->L = e->cfg.num_layers;
    e->qkvd = (e->H + 2 * e->KV) * e->hd;
    if (e->o.max_logit_rows < e->o.max_batch)
        e->o.max_logit_rows = e->o.max_batch;
    if ((st = tdm_kv_layout_init(&e->cfg, e->o.kv_dtype, e->o.page_size, 1, 0, &e->layout)) !=
        TDM_OK)
        goto err;
    e->layers = (layer_dev_t *)tdm_calloc(e->L, sizeof(layer_dev_t));

    TDM_CUDA_CHECK_GOTO(cudaMemGetInfo(&free_b, &total_b), st, err);
    /* Every initialising copy and memset goes to e->stream, never the legacy default stream: a
     * non-blocking stream does not wait for the legacy stream, and cudaMemset of device memory
     * returns before it has run, so the first forward raced the zeroing of a large pool (120 GB:
     * ~40 ms) and of the plan block queued behind it (docs/cuda.md, the second-engine finding) */
    TDM_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking), st, err);
    /* the SwiGLU epilogue needs gate|up interleaved: the layout follows the knob and the form */
    e->gu_il = e->o.swiglu_fused && e->wdt == TDM_DTYPE_BF16 && e->o.gemv_max_rows <= 1 &&
               gemv_fusable(e, 1, e->d);
    if ((st = upload_weights(e, view)) != TDM_OK)
        goto err;

    /* activations */
    T = e->o.max_tokens > e->o.max_batch ? e->o.max_tokens : e->o.max_batch;
    e->T = T;
    e->prow = T; /* the plan block is sized for the largest stride */
    e->rowsplits = T > 32 * e->o.max_batch ? T : 32 * e->o.max_batch;
    {
        uint64_t maxk = e->d;
        if (e->H * e->hd > maxk)
            maxk = e->H * e->hd;
        if (e->I > maxk)
            maxk = e->I;
        uint64_t sizes[9] = {
            align256((uint64_t)T * e->d * 4),                    /* x */
            align256((uint64_t)T * e->qkvd * 4),                 /* qkv */
            align256((uint64_t)T * e->H * e->hd * 4),            /* attn */
            align256((uint64_t)T * 2 * e->I * 4),                /* gu */
            align256((uint64_t)e->o.max_logit_rows * e->d * 4),  /* hsel */
            align256((uint64_t)e->o.max_logit_rows * e->V * 4),  /* logits */
            align256((uint64_t)e->rowsplits * e->H * e->hd * 4), /* part_o */
            align256((uint64_t)e->rowsplits * e->H * 2 * 4),     /* part_ml */
            align256((uint64_t)(T > e->o.max_logit_rows ? T : e->o.max_logit_rows) * maxk * 2)};
        act_bytes = 0;
        for (int i = 0; i < 9; i++)
            act_bytes += sizes[i];
        act_bytes += align256((uint64_t)e->o.max_logit_rows * 4) + align256(TDM_CUDA_ARGMAX_WS);
        TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->abuf, act_bytes), st, err);
        /* zeroed once: a read of scratch that no launch of this call wrote (padding rows, a
         * bucket's unused tail) then gives the same bits in every engine instance */
        TDM_CUDA_CHECK_GOTO(cudaMemsetAsync(e->abuf, 0, act_bytes, e->stream), st, err);
        uint8_t *p = e->abuf;
        float **fp[8] = {&e->x,    &e->qkv,    &e->attn,   &e->gu,
                         &e->hsel, &e->logits, &e->part_o, &e->part_ml};
        for (int i = 0; i < 8; i++) {
            *fp[i] = (float *)p;
            p += sizes[i];
        }
        e->xb = (uint16_t *)p;
        p += sizes[8];
        e->d_ids_out = (int32_t *)p;
        e->am_ws = p + align256((uint64_t)e->o.max_logit_rows * 4);
    }

    /* KV pool from the layout descriptor and the configurator */
    budget = (uint64_t)((double)free_b * e->o.mem_fraction_static);
    if (budget <= e->wbytes + act_bytes + (64u << 20)) {
        tdm_err(TDM_SUB_CUDA,
                "msg=\"no device memory left for the KV pool\" free=%zu fraction=%.2f "
                "weights=%llu scratch=%llu",
                free_b, e->o.mem_fraction_static, (unsigned long long)e->wbytes,
                (unsigned long long)act_bytes);
        st = TDM_ERR_NOMEM;
        goto err;
    }
    budget -= e->wbytes + act_bytes + (64u << 20); /* cuBLAS workspace, plan, graphs */
    if ((st = tdm_kv_pool_configure(&e->layout, budget, e->o.max_pages, &num_pages)) != TDM_OK)
        goto err;
    if ((st = tdm_kv_layout_pool_bytes(&e->layout, num_pages, &pool_bytes)) != TDM_OK)
        goto err;
    TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->kv_base, pool_bytes), st, err);
    TDM_CUDA_CHECK_GOTO(cudaMemsetAsync(e->kv_base, 0, pool_bytes, e->stream), st, err);
    e->kvb.layout = &e->layout;
    e->kvb.base = e->kv_base;
    e->kvb.num_pages = num_pages;
    e->kvb.layer_bytes =
        e->L > 1 ? tdm_kv_layout_region_offset(&e->layout, num_pages, 1, TDM_KV_SUB_K) : pool_bytes;
    for (uint32_t s = 0; s < e->layout.n_sub; s++)
        e->kvb.sub_offset[s] =
            tdm_kv_layout_region_offset(&e->layout, num_pages, 0, (tdm_kv_sub_t)s);
    if ((st = tdm_cuda_kv_from_buffers(&e->kvb, &e->kv)) != TDM_OK)
        goto err;

    /* plan buffers */
    e->pages_cap = (size_t)e->o.max_batch * e->o.max_pages_per_seq;
    e->tiles_cap = (T + 63) / 64 + e->o.max_batch + 1;
    e->plan_bytes = (plan_off(e, P_PAGES) + e->pages_cap) * 4;
    TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->d_plan, e->plan_bytes), st, err);
    TDM_CUDA_CHECK_GOTO(cudaMemsetAsync(e->d_plan, 0, e->plan_bytes, e->stream), st, err);
    TDM_CUDA_CHECK_GOTO(cudaMallocHost(&e->h_plan, e->plan_bytes), st, err);
    /* the ids land in mapped pinned memory straight from the argmax (run 11): the step's last
     * device operation is the argmax, not a copy behind it; else a device buffer and a copy */
    if (cudaHostAlloc((void **)&e->h_ids_out, (size_t)e->o.max_logit_rows * 4,
                      cudaHostAllocMapped) == cudaSuccess) {
        void *dp = NULL;
        if (cudaHostGetDevicePointer(&dp, e->h_ids_out, 0) == cudaSuccess && dp) {
            e->d_ids_out = (int32_t *)dp;
            e->ids_mapped = 1;
        }
    } else {
        (void)cudaGetLastError();
        TDM_CUDA_CHECK_GOTO(cudaMallocHost(&e->h_ids_out, (size_t)e->o.max_logit_rows * 4), st,
                            err);
    }
    memset(e->h_plan, 0, e->plan_bytes);

    TDM_CUBLAS_CHECK_GOTO(cublasCreate(&e->cublas), st, err);
    TDM_CUBLAS_CHECK_GOTO(cublasSetStream(e->cublas, e->stream), st, err);
    TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->cublas_ws, 32u << 20), st, err);
    TDM_CUBLAS_CHECK_GOTO(cublasSetWorkspace(e->cublas, e->cublas_ws, 32u << 20), st, err);
    TDM_CUDA_CHECK_GOTO(cudaStreamSynchronize(e->stream), st, err);
    tdm_info(TDM_SUB_CUDA,
             "msg=\"cuda engine ready\" weights_bytes=%llu kv_pages=%u kv_bytes=%llu free=%zu "
             "fraction=%.2f",
             (unsigned long long)e->wbytes, num_pages, (unsigned long long)pool_bytes, free_b,
             e->o.mem_fraction_static);
    *ret_engine = e;
    return TDM_OK;
err:
    tdm_cuda_engine_free(e);
    return st;
}

void tdm_cuda_engine_free(tdm_cuda_engine_t *e)
{
    if (!e)
        return;
    for (int i = 0; i < MAX_BUCKETS; i++)
        if (e->graph[i])
            cudaGraphExecDestroy(e->graph[i]);
    if (e->cublas)
        cublasDestroy(e->cublas);
    cudaFree(e->cublas_ws);
    cudaFreeHost(e->h_ids_out);
    cudaFreeHost(e->h_plan);
    cudaFree(e->d_plan);
    cudaFree(e->kv_base);
    cudaFree(e->abuf);
    cudaFree(e->wbuf);
    if (e->stream)
        cudaStreamDestroy(e->stream);
    tdm_free(e->layers);
    tdm_free(e);
}

uint32_t tdm_cuda_engine_num_pages(const tdm_cuda_engine_t *e)
{
    return e->kvb.num_pages;
}

const tdm_kv_layout_t *tdm_cuda_engine_layout(const tdm_cuda_engine_t *e)
{
    return &e->layout;
}

const tdm_kv_buffers_t *tdm_cuda_engine_kv(const tdm_cuda_engine_t *e)
{
    return &e->kvb;
}

uint64_t tdm_cuda_engine_weight_bytes(const tdm_cuda_engine_t *e)
{
    return e->wbytes;
}

/* Splits of the tensor-core decode attention: enough (row, KV head, split) blocks to keep 64
 * blocks busy, at most 8; one split (no combine launch) from 64 (row, KV head) pairs on. */
static uint32_t decode_splits(const tdm_cuda_engine_t *e, uint32_t n)
{
    const uint32_t cap = e->o.attn_splits ? e->o.attn_splits : 8;
    uint32_t b = n * e->KV, s = b >= 64 ? 1 : 64 / b;
    if (s > cap)
        s = cap;
    while (s > 1 && (uint64_t)n * s > e->rowsplits)
        s--;
    return s;
}

static int use_gemv(const tdm_cuda_engine_t *e, uint32_t n)
{
    return n <= e->o.gemv_max_rows || e->wdt != TDM_DTYPE_BF16;
}

/* y (n, M) (+)= xb · Wᵀ on the bf16 path: the skinny tensor-core GEMM for decode-sized n, else
 * cuBLAS (beta 1 = accumulate). */
static tdm_status_t gemm(tdm_cuda_engine_t *e, uint32_t n, uint32_t K, const void *w, uint32_t M,
                         int accum, float *y)
{
    /* measured (docs/cuda.md, run 3): the skinny kernel beats cuBLAS up to 8 rows everywhere and
     * up to 32 rows on the small matrices; wider ones re-read x too often and lose */
    if (e->o.use_skinny && tdm_cuda_skinny_ok(n, K) && (n <= 8 || (uint64_t)M * K <= (6u << 20)))
        return tdm_cuda_gemm_skinny(e->xb, n, K, (const uint16_t *)w, M, NULL, accum, y, M,
                                    e->stream);
    return tdm_cuda_gemm_bf16(e->cublas, e->xb, n, K, (const uint16_t *)w, M, accum ? 1.0f : 0.0f,
                              y);
}

static tdm_cuda_gemv_t gemv_args(const tdm_cuda_engine_t *e, const float *x, uint32_t ldx,
                                 const uint32_t *xrow, uint32_t n, uint32_t K, const void *w,
                                 uint32_t M, const float *bias, const float *norm_w, int flags,
                                 float *y, uint32_t ldy, tdm_cuda_l2pf_t tail)
{
    /* one row: the streaming form (2), or (1, run 4) K split over the block's warps for the
     * small matrices (run 3: o and down at bs1 had ~8 us of fixed cost each, too few warps with
     * long serial weight streams) */
    const int ksplit = n != 1                  ? 0
                       : e->o.gemv_ksplit >= 2 ? e->o.gemv_ksplit
                                               : (e->o.gemv_ksplit && M <= 4096);
    tdm_cuda_gemv_t a = {
        x, ldx, xrow, n, K, M, e->wdt, w, bias, norm_w, e->cfg.rms_norm_eps, flags, y, ldy, ksplit};
    a.tail = tail;
    return a;
}

static tdm_status_t gemv(tdm_cuda_engine_t *e, const float *x, uint32_t ldx, const uint32_t *xrow,
                         uint32_t n, uint32_t K, const void *w, uint32_t M, const float *bias,
                         const float *norm_w, int flags, float *y, uint32_t ldy,
                         tdm_cuda_l2pf_t tail)
{
    const tdm_cuda_gemv_t a =
        gemv_args(e, x, ldx, xrow, n, K, w, M, bias, norm_w, flags, y, ldy, tail);
    return tdm_cuda_gemv(&a, e->stream);
}

/* 1 when the one-row GEMV of K inputs with the fused RMSNorm runs the streaming V2 form, the one
 * with the SwiGLU and argmax epilogues (ops.cu gemv1_kernel) */
static int gemv_fusable(const tdm_cuda_engine_t *e, uint32_t n, uint32_t K)
{
    const tdm_cuda_gemv_t a = gemv_args(e, e->x, K, NULL, n, K, e->wbuf, 1, NULL, e->x,
                                        TDM_GEMV_NORM, e->x, K, (tdm_cuda_l2pf_t){NULL, 0, 0, 0});
    return tdm_cuda_gemv_fusable(&a);
}

/* L2 prefetch of want bytes from p, clamped to lim (the end of the weights it belongs to) and
 * to whole 256-byte units; bytes 0 (none) when want is 0 or p is at or past lim. */
static tdm_cuda_l2pf_t l2pf_at(const tdm_cuda_engine_t *e, const void *p, uint64_t want,
                               const void *lim)
{
    const uint8_t *a = (const uint8_t *)p, *b = (const uint8_t *)lim;
    const uint64_t room = b > a ? (uint64_t)(b - a) : 0;
    tdm_cuda_l2pf_t r = {p, (want < room ? want : room) & ~(uint64_t)255, e->o.l2pf_op,
                         e->o.l2pf_early};
    return r;
}

/* Every launch of one forward over n rows (m logit rows), from the device plan: capturable. */
static tdm_status_t enqueue(tdm_cuda_engine_t *e, uint32_t n, uint32_t m)
{
    const uint32_t *plan = e->d_plan;
    const int32_t *ids = (const int32_t *)(plan + plan_off(e, P_IDS));
    const uint32_t *outrows = plan + plan_off(e, P_OUT);
    tdm_cuda_rows_t rows = {plan + plan_off(e, P_POS), plan + plan_off(e, P_PTOFF),
                            plan + plan_off(e, P_PAGES), plan + plan_off(e, P_NACT)};
    const uint32_t d = e->d, qd = e->H * e->hd, I = e->I, S = splits_for(e, n);
    const float eps = e->cfg.rms_norm_eps;
    const int small = use_gemv(e, n);
    const int mma_attn = e->o.use_mma_attn && tdm_cuda_decode_mma_supported(&e->kv, e->H);
    cudaStream_t s = e->stream;
    /* L2 prefetch (docs/cuda.md): apf bytes of o|gate_up from each decode attention grid, tpf
     * bytes of the next GEMV's weights from each one-row GEMV's tail */
    const uint64_t apf = (uint64_t)e->o.l2pf_mb << 20, tpf = (uint64_t)e->o.l2pf_tail_mb << 20;
    const uint64_t wdown = (uint64_t)d * I * e->wes, wlm = (uint64_t)e->V * d * e->wes;
    const tdm_cuda_l2pf_t none = {NULL, 0, 0, 0};
    /* run 11: the MLP activation in the gate|up GEMV's epilogue, the argmax in lm_head's */
    const int swiglu = e->gu_il; /* then every one-row call is fusable (gemv_fusable) */
    const int am = use_gemv(e, m) && e->o.argmax_fused && !apf && gemv_fusable(e, m, d);

    /* run 12: one row's embedding lookup folded into layer 0's qkv GEMV (no embed node) */
    const int emb = small && e->o.embed_fused && e->wdt == TDM_DTYPE_BF16 && gemv_fusable(e, n, d);
    if (!emb)
        TDM_TRY(tdm_cuda_embed(e->embed, e->wdt, ids, n, d, e->x, s));
    for (uint32_t l = 0; l < e->L; l++) {
        const layer_dev_t *w = &e->layers[l];
        const uint8_t *o_b = (const uint8_t *)w->o, *gu_b = (const uint8_t *)w->gu;
        const uint8_t *down_b = (const uint8_t *)w->down; /* o|gate_up is [o_b, down_b) */
        const tdm_cuda_l2pf_t pf_attn = l2pf_at(e, o_b, apf, down_b);
        /* each GEMV's tail: o (when the attention does not), the rest of gate_up, down, and the
         * next layer's qkv (lm_head after the last layer) */
        const tdm_cuda_l2pf_t t_qkv = apf ? none : l2pf_at(e, o_b, tpf, down_b);
        const tdm_cuda_l2pf_t t_o = l2pf_at(
            e, o_b + (apf > (uint64_t)(gu_b - o_b) ? apf : (uint64_t)(gu_b - o_b)), tpf, down_b);
        const tdm_cuda_l2pf_t t_gu = l2pf_at(e, down_b, tpf, down_b + wdown);
        const tdm_cuda_l2pf_t t_down =
            l + 1 < e->L ? l2pf_at(e, e->layers[l + 1].qkv, tpf, e->layers[l + 1].o)
                         : l2pf_at(e, e->lm_head, tpf, (const uint8_t *)e->lm_head + wlm);
        if (small && l == 0 && emb) {
            tdm_cuda_gemv_t a =
                gemv_args(e, e->x, d, (const uint32_t *)ids, n, d, w->qkv, e->qkvd, w->qkv_bias,
                          w->attn_norm, TDM_GEMV_NORM, e->qkv, e->qkvd, t_qkv);
            a.embed = (const uint16_t *)e->embed;
            a.embed_out = e->x;
            TDM_TRY(tdm_cuda_gemv(&a, s));
        } else if (small) {
            TDM_TRY(gemv(e, e->x, d, NULL, n, d, w->qkv, e->qkvd, w->qkv_bias, w->attn_norm,
                         TDM_GEMV_NORM, e->qkv, e->qkvd, t_qkv));
        } else {
            TDM_TRY(tdm_cuda_rmsnorm(e->x, NULL, NULL, w->attn_norm, eps, n, d, NULL, e->xb, s));
            TDM_TRY(gemm(e, n, d, w->qkv, e->qkvd, 0, e->qkv));
            if (w->qkv_bias)
                TDM_TRY(tdm_cuda_add_bias(e->qkv, n, e->qkvd, e->qkvd, w->qkv_bias, s));
        }
        /* Qwen3: each q and k head RMS-normalised in place before every attention path's RoPE */
        if (w->qk_norm)
            TDM_TRY(tdm_cuda_qk_norm(e->qkv, n, e->qkvd, e->H, e->KV, e->hd, w->qk_norm,
                                     w->qk_norm + e->hd, eps, s));
        if (e->o.ablate & TDM_CUDA_ABLATE_ATTN)
            goto mlp;
        if (e->ntiles) {
            TDM_TRY(tdm_cuda_rope_kv_write(e->qkv, n, e->H, e->inv_freq, &e->kv, l, &rows, s));
            TDM_TRY(tdm_cuda_flash_attention(e->qkv, n, e->H, &e->kv, l, &rows,
                                             plan + plan_off(e, P_TILES), e->ntiles, e->attn,
                                             small ? NULL : e->xb, s));
        } else if (mma_attn) { /* RoPE and the KV write fused in */
            /* the cluster form (part_o NULL) merges its splits in the kernel: no combine node */
            const int cl = e->o.attn_cluster;
            TDM_TRY(tdm_cuda_attention_decode(e->qkv, n, e->H, &e->kv, l, &rows, e->inv_freq,
                                              decode_splits(e, n), cl ? NULL : e->part_o,
                                              cl ? NULL : e->part_ml, e->attn, small ? NULL : e->xb,
                                              &pf_attn, s));
        } else {
            TDM_TRY(tdm_cuda_rope_kv_write(e->qkv, n, e->H, e->inv_freq, &e->kv, l, &rows, s));
            TDM_TRY(tdm_cuda_attention(e->qkv, n, e->H, &e->kv, l, &rows, S, e->part_o, e->part_ml,
                                       e->attn, small ? NULL : e->xb, s));
        }
    mlp:
        if (e->o.ablate & TDM_CUDA_ABLATE_GEMM)
            continue;
        if (small) {
            TDM_TRY(gemv(e, e->attn, qd, NULL, n, qd, w->o, d, NULL, NULL, TDM_GEMV_ACCUM, e->x, d,
                         t_o));
            if (swiglu) { /* use_gemv: one row only */ /* gate|up writes silu(gate) * up: down reads
                                                          I floats, no SiLU */
                TDM_TRY(gemv(e, e->x, d, NULL, n, d, w->gu, I, NULL, w->mlp_norm,
                             TDM_GEMV_NORM | TDM_GEMV_SWIGLU, e->gu, I, t_gu));
                TDM_TRY(gemv(e, e->gu, I, NULL, n, I, w->down, d, NULL, NULL, TDM_GEMV_ACCUM, e->x,
                             d, t_down));
            } else {
                /* ABLATE_SILU (timing only): down stages I floats of the gate, no SiLU·up */
                const int ab = (e->o.ablate & TDM_CUDA_ABLATE_SILU) != 0;
                TDM_TRY(gemv(e, e->x, d, NULL, n, d, w->gu, 2 * I, NULL, w->mlp_norm, TDM_GEMV_NORM,
                             e->gu, 2 * I, t_gu));
                TDM_TRY(gemv(e, e->gu, 2 * I, NULL, n, I, w->down, d, NULL, NULL,
                             ab ? TDM_GEMV_ACCUM : TDM_GEMV_SILU | TDM_GEMV_ACCUM, e->x, d,
                             t_down));
            }
        } else {
            TDM_TRY(gemm(e, n, qd, w->o, d, 1, e->x));
            TDM_TRY(tdm_cuda_rmsnorm(e->x, NULL, NULL, w->mlp_norm, eps, n, d, NULL, e->xb, s));
            TDM_TRY(gemm(e, n, d, w->gu, 2 * I, 0, e->gu));
            /* silu·mul stays its own launch: fused into the skinny kernel's input every block
             * re-read the fp32 gate|up (run 3: bs32 3.8 ms/step against 2.3) */
            TDM_TRY(tdm_cuda_silu_mul(e->gu, n, I, e->gu_il, NULL, e->xb, s));
            TDM_TRY(gemm(e, n, I, w->down, d, 1, e->x));
        }
    }
    if (am) { /* the argmax in the epilogue: no argmax node */
        tdm_cuda_gemv_t a = gemv_args(e, e->x, d, outrows, m, d, e->lm_head, e->V, NULL,
                                      e->final_norm, TDM_GEMV_NORM, e->logits, e->V, none);
        a.argmax = e->d_ids_out;
        a.argmax_ws = e->am_ws;
        return tdm_cuda_gemv(&a, s);
    }
    if (use_gemv(e, m)) {
        TDM_TRY(gemv(e, e->x, d, outrows, m, d, e->lm_head, e->V, NULL, e->final_norm,
                     TDM_GEMV_NORM, e->logits, e->V, none));
    } else {
        TDM_TRY(tdm_cuda_rmsnorm(e->x, NULL, outrows, e->final_norm, eps, m, d, NULL, e->xb, s));
        TDM_TRY(gemm(e, m, d, e->lm_head, e->V, 0, e->logits));
    }
    /* the next step's first weights (layer 0's qkv, then apf more) during the host round trip */
    const uint8_t *qkv0 = (const uint8_t *)e->layers[0].qkv, *o0 = (const uint8_t *)e->layers[0].o;
    const tdm_cuda_l2pf_t pf_next =
        apf ? l2pf_at(e, qkv0, (uint64_t)(o0 - qkv0) + apf, e->layers[0].down) : none;
    TDM_TRY(tdm_cuda_argmax(e->logits, m, e->V, e->d_ids_out, &pf_next, s));
    return TDM_OK;
}

/* Validate the batch and fill the host plan; returns rows n, logit rows m, pages used. */
static tdm_status_t plan_batch(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs, uint32_t n_seqs,
                               uint32_t *ret_n, uint32_t *ret_m, size_t *ret_pages, int *ret_decode)
{
    uint32_t n = 0, m = 0, ps = e->layout.page_size;
    size_t np = 0;
    int decode = 1;
    uint32_t *ids = e->h_plan + plan_off(e, P_IDS), *pos = e->h_plan + plan_off(e, P_POS);
    uint32_t *ptoff = e->h_plan + plan_off(e, P_PTOFF), *out = e->h_plan + plan_off(e, P_OUT);
    uint32_t *pages = e->h_plan + plan_off(e, P_PAGES);

    if (n_seqs > e->o.max_batch)
        return TDM_ERR_OVERFLOW;
    for (uint32_t s = 0; s < n_seqs; s++) {
        const tdm_cuda_seq_t *q = &seqs[s];
        uint64_t end = (uint64_t)q->pos0 + q->n_tokens, used;
        if (q->n_tokens == 0 || !q->tokens || !q->pages)
            return TDM_ERR_INVAL;
        if (q->n_tokens > e->o.max_tokens - n)
            return TDM_ERR_OVERFLOW;
        if (end > (uint64_t)q->n_pages * ps || end > UINT32_MAX)
            return TDM_ERR_RANGE;
        used = (end + ps - 1) / ps;
        if (used > e->o.max_pages_per_seq || np + used > e->pages_cap)
            return TDM_ERR_OVERFLOW;
        for (uint32_t p = 0; p < used; p++) {
            if (q->pages[p] >= e->kvb.num_pages)
                return TDM_ERR_RANGE;
            pages[np + p] = q->pages[p];
        }
        if (q->n_tokens != 1)
            decode = 0;
        for (uint32_t t = 0; t < q->n_tokens; t++) {
            if (q->tokens[t] < 0 || (uint32_t)q->tokens[t] >= e->V)
                return TDM_ERR_RANGE;
            if (q->all_logits || t + 1 == q->n_tokens) {
                if (m == e->o.max_logit_rows)
                    return TDM_ERR_OVERFLOW;
                out[m++] = n;
            }
            ids[n] = (uint32_t)q->tokens[t];
            pos[n] = q->pos0 + t;
            ptoff[n] = (uint32_t)np;
            n++;
        }
        np += used;
    }
    e->h_plan[plan_off(e, P_NACT)] = n;
    *ret_n = n;
    *ret_m = m;
    *ret_pages = np;
    *ret_decode = decode;
    return TDM_OK;
}

static int bucket_of(uint32_t n, uint32_t *ret_rows)
{
    uint32_t b = 1;
    int i = 0;
    while (b < n) {
        b <<= 1;
        i++;
    }
    *ret_rows = b;
    return i;
}

tdm_status_t tdm_cuda_engine_forward(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs,
                                     uint32_t n_seqs, float *logits, int32_t *ret_ids,
                                     uint32_t cap_rows, uint32_t *ret_rows)
{
    tdm_status_t st = TDM_OK;
    uint32_t n, m, rows_run;
    size_t np;
    int decode, bi = -1;

    if (!e || !seqs || n_seqs == 0 || !ret_rows)
        return TDM_ERR_INVAL;
    /* decode calls (one token per sequence, at most max_batch rows) lay the plan out on the
     * compact stride the graphs were captured with; others on T */
    e->prow = e->o.max_batch < e->T ? e->o.max_batch : e->T;
    for (uint32_t i = 0; i < n_seqs; i++)
        if (seqs[i].n_tokens != 1)
            e->prow = e->T;
    TDM_TRY(plan_batch(e, seqs, n_seqs, &n, &m, &np, &decode));
    if (m > cap_rows)
        return TDM_ERR_OVERFLOW;
    rows_run = n;
    tdm_cuda_set_pdl(e->o.use_pdl);
    /* run 12: early triggers measured faster at 1 and 8 rows of decode, slower at 32 */
    TDM_TRY(tdm_cuda_set_pdl_early(e->o.pdl_early && decode && n <= PDL_EARLY_ROWS, e->stream));
    e->ntiles = 0;
    if (!decode && tdm_cuda_flash_supported(&e->kv)) {
        /* prefill and mixed calls: tensor-core attention over tiles of consecutive rows */
        e->ntiles =
            tdm_cuda_flash_tiles(e->h_plan + plan_off(e, P_POS), e->h_plan + plan_off(e, P_PTOFF),
                                 n, e->h_plan + plan_off(e, P_TILES), e->tiles_cap);
    }
    if (decode && e->o.use_graphs) {
        uint32_t b;
        bi = bucket_of(n, &b);
        if (b <= e->o.max_batch && bi < MAX_BUCKETS && b <= e->T) {
            /* padding rows: token 0 at position 0 of the first table; never written (nactive) */
            uint32_t *ids = e->h_plan + plan_off(e, P_IDS), *pos = e->h_plan + plan_off(e, P_POS);
            uint32_t *ptoff = e->h_plan + plan_off(e, P_PTOFF);
            uint32_t *out = e->h_plan + plan_off(e, P_OUT);
            for (uint32_t r = n; r < b; r++) {
                ids[r] = 0;
                pos[r] = 0;
                ptoff[r] = 0;
                out[r] = r;
            }
            rows_run = b;
        } else {
            bi = -1;
        }
    }
    /* one copy: the whole header, then the used pages */
    TDM_CUDA_CHECK_GOTO(cudaMemcpyAsync(e->d_plan, e->h_plan, (plan_off(e, P_PAGES) + np) * 4,
                                        cudaMemcpyHostToDevice, e->stream),
                        st, out);
    if (bi >= 0) {
        if (!e->graph[bi]) {
            cudaGraph_t g = NULL;
            TDM_CUDA_CHECK_GOTO(cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal),
                                st, out);
            st = enqueue(e, rows_run, rows_run);
            cudaError_t ce = cudaStreamEndCapture(e->stream, &g);
            if (st != TDM_OK || ce != cudaSuccess) {
                if (g)
                    cudaGraphDestroy(g);
                if (st == TDM_OK) {
                    tdm_err(TDM_SUB_CUDA, "msg=\"graph capture failed\" err=\"%s\"",
                            cudaGetErrorString(ce));
                    st = TDM_ERR_CUDA;
                }
                goto out;
            }
            cudaError_t ie = cudaGraphInstantiate(&e->graph[bi], g, 0);
            cudaGraphDestroy(g);
            TDM_CUDA_CHECK_GOTO(ie, st, out);
        }
        TDM_CUDA_CHECK_GOTO(cudaGraphLaunch(e->graph[bi], e->stream), st, out);
    } else {
        if ((st = enqueue(e, n, m)) != TDM_OK)
            goto out;
    }
    if (ret_ids && !e->ids_mapped)
        TDM_CUDA_CHECK_GOTO(cudaMemcpyAsync(e->h_ids_out, e->d_ids_out, (size_t)m * 4,
                                            cudaMemcpyDeviceToHost, e->stream),
                            st, out);
    if (logits)
        TDM_CUDA_CHECK_GOTO(cudaMemcpyAsync(logits, e->logits, (size_t)m * e->V * 4,
                                            cudaMemcpyDeviceToHost, e->stream),
                            st, out);
    TDM_CUDA_CHECK_GOTO(cudaStreamSynchronize(e->stream), st, out);
    if (ret_ids)
        memcpy(ret_ids, e->h_ids_out, (size_t)m * 4);
    *ret_rows = m;
out:
    return st;
}

tdm_status_t tdm_cuda_engine_replay_us(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs,
                                       uint32_t n_seqs, uint32_t reps, double *ret_us)
{
    tdm_status_t st = TDM_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    uint32_t rows, b;
    int32_t ids[1024];
    float ms = 0;

    if (!e || !seqs || n_seqs == 0 || n_seqs > 1024 || reps == 0 || !ret_us || !e->o.use_graphs)
        return TDM_ERR_INVAL;
    /* one call through forward: validates the batch, fills the plan, captures the bucket */
    TDM_TRY(tdm_cuda_engine_forward(e, seqs, n_seqs, NULL, ids, n_seqs, &rows));
    const int bi = bucket_of(n_seqs, &b);
    if (bi >= MAX_BUCKETS || !e->graph[bi])
        return TDM_ERR_UNSUPPORTED;
    TDM_CUDA_CHECK_GOTO(cudaEventCreate(&ev[0]), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventCreate(&ev[1]), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventRecord(ev[0], e->stream), st, out);
    for (uint32_t r = 0; r < reps; r++)
        TDM_CUDA_CHECK_GOTO(cudaGraphLaunch(e->graph[bi], e->stream), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventRecord(ev[1], e->stream), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventSynchronize(ev[1]), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventElapsedTime(&ms, ev[0], ev[1]), st, out);
    *ret_us = 1e3 * ms / reps;
out:
    for (int i = 0; i < 2; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    return st;
}
