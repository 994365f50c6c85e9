/*
 * bench/gpu_model.h — the model of the GPU benchmarks (gpu_decode.c, gpu_hicache.c): the
 * TinyLlama-1.1B shape (hidden 2048, intermediate 5632, BENCH_LAYERS (22) layers, 32 heads / 4 KV
 * heads of 64, vocab 32000) with random bf16 weights from a fixed xorshift seed (uniform, standard
 * deviation 1/sqrt(fan-in); norms 1.0), so every run and both benchmarks see the same weights.
 * Static functions: included by one translation unit each.
 */
#ifndef TDM_BENCH_GPU_MODEL_H
#define TDM_BENCH_GPU_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/kv.h>
#include <tdm/model.h>

#define BENCH_LAYERS 22

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rs = 0x243f6a8885a308d3ull;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}

/* n bf16 values, uniform with standard deviation s */
static void fill(uint16_t *p, size_t n, float s)
{
    const float a = s * 1.7320508f / 32768.0f;
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rnd();
        p[i] = tdm_f32_to_bf16((float)(int32_t)((r >> 16) - 32768u) * a);
    }
}

static tdm_tensor_t mat(uint16_t **cur, uint32_t rows, uint32_t cols, float s)
{
    tdm_tensor_t t = {TDM_DTYPE_BF16, rows, cols, cols, *cur};
    if (s > 0)
        fill(*cur, (size_t)rows * cols, s);
    else
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            (*cur)[i] = 0x3f80; /* 1.0 */
    *cur += (size_t)rows * cols;
    return t;
}

typedef struct model {
    tdm_model_config_t cfg;
    tdm_model_view_t view;
    tdm_layer_weights_t layers[BENCH_LAYERS];
    uint16_t *mem;
} model_t;

static int model_init(model_t *m, uint32_t max_pos)
{
    tdm_model_config_t *c = &m->cfg;
    memset(m, 0, sizeof(*m));
    c->arch = TDM_ARCH_LLAMA;
    c->vocab_size = 32000;
    c->hidden_size = 2048;
    c->intermediate_size = 5632;
    c->num_layers = BENCH_LAYERS;
    c->num_heads = 32;
    c->num_kv_heads = 4;
    c->head_dim = 64;
    c->max_position_embeddings = max_pos;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->rope_type = TDM_ROPE_DEFAULT;
    c->weight_dtype = TDM_DTYPE_BF16;
    c->bos_token_id = 1;
    const size_t d = 2048, I = 5632, V = 32000, qd = 2048, kd = 256;
    size_t per_layer = qd * d + 2 * kd * d + d * qd + 3 * I * d + 2 * d;
    size_t total = per_layer * BENCH_LAYERS + 2 * V * d + d;
    m->mem = malloc(total * 2);
    if (!m->mem)
        return 0;
    uint16_t *cur = m->mem;
    const float sd = 1.0f / sqrtf((float)d), si = 1.0f / sqrtf((float)I);
    for (int l = 0; l < BENCH_LAYERS; l++) {
        tdm_layer_weights_t *w = &m->layers[l];
        w->attn_norm = mat(&cur, 1, d, 0);
        w->q = mat(&cur, qd, d, sd);
        w->k = mat(&cur, kd, d, sd);
        w->v = mat(&cur, kd, d, sd);
        w->o = mat(&cur, d, qd, sd);
        w->mlp_norm = mat(&cur, 1, d, 0);
        w->gate = mat(&cur, I, d, sd);
        w->up = mat(&cur, I, d, sd);
        w->down = mat(&cur, d, I, si);
    }
    m->view.embed = mat(&cur, V, d, 1.0f);
    m->view.lm_head = mat(&cur, V, d, 3.0f * sd);
    m->view.final_norm = mat(&cur, 1, d, 0);
    m->view.cfg = c;
    m->view.tp_size = 1;
    m->view.tp_rank = 0;
    m->view.vocab_lo = 0;
    m->view.vocab_r = (uint32_t)V;
    m->view.heads_r = 32;
    m->view.kv_heads_r = 4;
    m->view.inter_r = 5632;
    m->view.layers = m->layers;
    m->view.resident_bytes = total * 2 - V * d * 2 + d * 2; /* embedding: one row per token */
    return 1;
}

#endif
