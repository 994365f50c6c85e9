/*
 * forward-testutil.h — synthetic in-memory checkpoints for the forward-graph tests: random bf16
 * weights held as full tensors, per-rank views built by the sharding contract of model.h
 * (column-parallel row slices, row-parallel column slices with row_stride), and an fp64
 * reference forward (dense, no cache) to check the graph against.
 */
#ifndef TDM_TESTS_FORWARD_TESTUTIL_H
#define TDM_TESTS_FORWARD_TESTUTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/model.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_int.h"

typedef struct synth_layer {
    uint16_t *attn_norm, *mlp_norm, *q, *k, *v, *o, *gate, *up, *down, *qb, *kb, *vb;
} synth_layer_t;

typedef struct synth {
    tdm_model_config_t cfg;
    uint16_t *embed, *lm_head, *final_norm;
    synth_layer_t *layers;
} synth_t;

static uint64_t synth_rng_ = 0x9e3779b97f4a7c15ull;

static float synth_rand(void)
{
    synth_rng_ ^= synth_rng_ << 13;
    synth_rng_ ^= synth_rng_ >> 7;
    synth_rng_ ^= synth_rng_ << 17;
    /* approx N(0,1): sum of 4 uniforms, scaled */
    double s = 0;
    for (int i = 0; i < 4; i++) {
        synth_rng_ ^= synth_rng_ << 13;
        synth_rng_ ^= synth_rng_ >> 7;
        synth_rng_ ^= synth_rng_ << 17;
        s += (double)(synth_rng_ >> 11) / 9007199254740992.0 - 0.5;
    }
    return (float)(s * 1.732);
}

static uint16_t *synth_mat(size_t n, float scale, float offset)
{
    uint16_t *p = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        p[i] = tdm_cpu_to_bf16(offset + synth_rand() * scale);
    return p;
}

static void synth_init(synth_t *s, const tdm_model_config_t *cfg)
{
    const tdm_model_config_t *c = cfg;
    uint32_t d = c->hidden_size, hd = c->head_dim, I = c->intermediate_size;
    size_t qd = (size_t)c->num_heads * hd, kd = (size_t)c->num_kv_heads * hd;
    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    s->embed = synth_mat((size_t)c->vocab_size * d, 1.0f, 0.0f);
    s->lm_head = c->tie_word_embeddings ? s->embed
                                        : synth_mat((size_t)c->vocab_size * d, 3.0f / sqrtf(d), 0);
    s->final_norm = synth_mat(d, 0.2f, 1.0f);
    s->layers = calloc(c->num_layers, sizeof(synth_layer_t));
    for (uint32_t l = 0; l < c->num_layers; l++) {
        synth_layer_t *L = &s->layers[l];
        L->attn_norm = synth_mat(d, 0.2f, 1.0f);
        L->mlp_norm = synth_mat(d, 0.2f, 1.0f);
        L->q = synth_mat(qd * d, 1.0f / sqrtf(d), 0);
        L->k = synth_mat(kd * d, 1.0f / sqrtf(d), 0);
        L->v = synth_mat(kd * d, 1.0f / sqrtf(d), 0);
        L->o = synth_mat(d * qd, 1.0f / sqrtf((float)qd), 0);
        L->gate = synth_mat((size_t)I * d, 1.0f / sqrtf(d), 0);
        L->up = synth_mat((size_t)I * d, 1.0f / sqrtf(d), 0);
        L->down = synth_mat((size_t)d * I, 1.0f / sqrtf(I), 0);
        if (c->attention_bias) {
            L->qb = synth_mat(qd, 0.5f, 0);
            L->kb = synth_mat(kd, 0.5f, 0);
            L->vb = synth_mat(kd, 0.5f, 0);
        }
    }
}

static void synth_free(synth_t *s)
{
    for (uint32_t l = 0; l < s->cfg.num_layers; l++) {
        synth_layer_t *L = &s->layers[l];
        uint16_t *all[] = {L->attn_norm, L->mlp_norm, L->q,    L->k,  L->v,  L->o,
                           L->gate,      L->up,       L->down, L->qb, L->kb, L->vb};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            free(all[i]);
    }
    free(s->layers);
    if (s->lm_head != s->embed)
        free(s->lm_head);
    free(s->embed);
    free(s->final_norm);
}

static tdm_tensor_t tview(const uint16_t *p, uint32_t rows, uint32_t cols, uint64_t stride)
{
    tdm_tensor_t t = {TDM_DTYPE_BF16, rows, cols, stride, p};
    return t;
}

/* Rank r of N, by the contract of include/tdm/model.h. */
static void synth_view(const synth_t *s, uint32_t N, uint32_t r, tdm_model_view_t *v)
{
    const tdm_model_config_t *c = &s->cfg;
    uint32_t d = c->hidden_size, hd = c->head_dim;
    uint32_t Hr = c->num_heads / N, KVr = c->num_kv_heads / N, Ir = c->intermediate_size / N;
    uint32_t qd = c->num_heads * hd;
    memset(v, 0, sizeof(*v));
    v->cfg = &s->cfg;
    v->tp_size = N;
    v->tp_rank = r;
    v->heads_r = Hr;
    v->kv_heads_r = KVr;
    v->inter_r = Ir;
    tdm_model_vocab_range(c->vocab_size, N, r, &v->vocab_lo, &v->vocab_r);
    v->embed = tview(s->embed + (size_t)v->vocab_lo * d, v->vocab_r, d, d);
    v->lm_head = tview(s->lm_head + (size_t)v->vocab_lo * d, v->vocab_r, d, d);
    v->final_norm = tview(s->final_norm, 1, d, d);
    v->layers = calloc(c->num_layers, sizeof(tdm_layer_weights_t));
    for (uint32_t l = 0; l < c->num_layers; l++) {
        const synth_layer_t *L = &s->layers[l];
        tdm_layer_weights_t *w = &v->layers[l];
        size_t q0 = (size_t)r * Hr * hd, k0 = (size_t)r * KVr * hd, i0 = (size_t)r * Ir;
        w->attn_norm = tview(L->attn_norm, 1, d, d);
        w->mlp_norm = tview(L->mlp_norm, 1, d, d);
        w->q = tview(L->q + q0 * d, Hr * hd, d, d);
        w->k = tview(L->k + k0 * d, KVr * hd, d, d);
        w->v = tview(L->v + k0 * d, KVr * hd, d, d);
        w->o = tview(L->o + q0, d, Hr * hd, qd);
        w->gate = tview(L->gate + i0 * d, Ir, d, d);
        w->up = tview(L->up + i0 * d, Ir, d, d);
        w->down = tview(L->down + i0, d, Ir, c->intermediate_size);
        if (L->qb) {
            w->q_bias = tview(L->qb + q0, 1, Hr * hd, Hr * hd);
            w->k_bias = tview(L->kb + k0, 1, KVr * hd, KVr * hd);
            w->v_bias = tview(L->vb + k0, 1, KVr * hd, KVr * hd);
        }
    }
}

static double bf(const uint16_t *p, size_t i)
{
    return (double)tdm_cpu_bf16(p[i]);
}

/* fp64 dense reference: logits (L, vocab) for tokens[0..L). */
static void ref_linear(const double *x, uint32_t n, const uint16_t *w, const uint16_t *b,
                       uint32_t M, uint32_t K, double *y)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < M; j++) {
            double s = b ? bf(b, j) : 0;
            for (uint32_t k = 0; k < K; k++)
                s += x[(size_t)i * K + k] * bf(w, (size_t)j * K + k);
            y[(size_t)i * M + j] = s;
        }
}

static void ref_rms(const double *x, uint32_t n, uint32_t d, const uint16_t *w, double eps,
                    double *y)
{
    for (uint32_t i = 0; i < n; i++) {
        double ss = 0;
        for (uint32_t c = 0; c < d; c++)
            ss += x[(size_t)i * d + c] * x[(size_t)i * d + c];
        double inv = 1.0 / sqrt(ss / d + eps);
        for (uint32_t c = 0; c < d; c++)
            y[(size_t)i * d + c] = bf(w, c) * x[(size_t)i * d + c] * inv;
    }
}

static void ref_rope(double *x, uint32_t n, uint32_t heads, uint32_t hd, const tdm_rope_t *r)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t h = 0; h < heads; h++) {
            double *v = x + ((size_t)i * heads + h) * hd;
            for (uint32_t f = 0; f < hd / 2; f++) {
                double a = (double)i * r->inv_freq[f], cs = cos(a), sn = sin(a);
                double x1 = v[f], x2 = v[f + hd / 2];
                v[f] = x1 * cs - x2 * sn;
                v[f + hd / 2] = x2 * cs + x1 * sn;
            }
        }
}

static void ref_forward(const synth_t *s, const int32_t *tok, uint32_t L, double *logits)
{
    const tdm_model_config_t *c = &s->cfg;
    uint32_t d = c->hidden_size, hd = c->head_dim, H = c->num_heads, KV = c->num_kv_heads;
    uint32_t I = c->intermediate_size, qd = H * hd, kd = KV * hd;
    double *x = calloc((size_t)L * d, 8), *h = calloc((size_t)L * d, 8);
    double *q = calloc((size_t)L * qd, 8), *k = calloc((size_t)L * kd, 8);
    double *v = calloc((size_t)L * kd, 8), *a = calloc((size_t)L * qd, 8);
    double *t = calloc((size_t)L * d, 8), *g = calloc((size_t)L * I, 8);
    double *u = calloc((size_t)L * I, 8), *sc = calloc(L, 8);
    tdm_rope_t rope;
    tdm_rope_init(c, &rope);
    for (uint32_t i = 0; i < L; i++)
        for (uint32_t j = 0; j < d; j++)
            x[(size_t)i * d + j] = bf(s->embed, (size_t)tok[i] * d + j);
    for (uint32_t l = 0; l < c->num_layers; l++) {
        const synth_layer_t *W = &s->layers[l];
        ref_rms(x, L, d, W->attn_norm, c->rms_norm_eps, h);
        ref_linear(h, L, W->q, W->qb, qd, d, q);
        ref_linear(h, L, W->k, W->kb, kd, d, k);
        ref_linear(h, L, W->v, W->vb, kd, d, v);
        ref_rope(q, L, H, hd, &rope);
        ref_rope(k, L, KV, hd, &rope);
        for (uint32_t i = 0; i < L; i++)
            for (uint32_t hh = 0; hh < H; hh++) {
                uint32_t gk = hh / (H / KV);
                double mx = -1e300, sum = 0;
                for (uint32_t j = 0; j <= i; j++) {
                    double dot = 0;
                    for (uint32_t e = 0; e < hd; e++)
                        dot += q[((size_t)i * H + hh) * hd + e] * k[((size_t)j * KV + gk) * hd + e];
                    sc[j] = dot / sqrt((double)hd);
                    mx = fmax(mx, sc[j]);
                }
                for (uint32_t j = 0; j <= i; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (uint32_t e = 0; e < hd; e++) {
                    double o = 0;
                    for (uint32_t j = 0; j <= i; j++)
                        o += sc[j] / sum * v[((size_t)j * KV + gk) * hd + e];
                    a[((size_t)i * H + hh) * hd + e] = o;
                }
            }
        ref_linear(a, L, W->o, NULL, d, qd, t);
        for (size_t i = 0; i < (size_t)L * d; i++)
            x[i] += t[i];
        ref_rms(x, L, d, W->mlp_norm, c->rms_norm_eps, h);
        ref_linear(h, L, W->gate, NULL, I, d, g);
        ref_linear(h, L, W->up, NULL, I, d, u);
        for (size_t i = 0; i < (size_t)L * I; i++)
            g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        ref_linear(g, L, W->down, NULL, d, I, t);
        for (size_t i = 0; i < (size_t)L * d; i++)
            x[i] += t[i];
    }
    ref_rms(x, L, d, s->final_norm, c->rms_norm_eps, h);
    ref_linear(h, L, s->lm_head, NULL, c->vocab_size, d, logits);
    free(x), free(h), free(q), free(k), free(v), free(a), free(t), free(g), free(u), free(sc);
}

#endif
