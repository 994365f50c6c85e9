/*
 * model-testutil.h — builds small checkpoints on disk for the model tests: a list of tensors with
 * deterministic values, written as one safetensors file or as shards with an index, next to a
 * config.json. Everything lives in a mkdtemp directory removed at the end.
 */
#ifndef TDM_TESTS_MODEL_TESTUTIL_H
#define TDM_TESTS_MODEL_TESTUTIL_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <tdm/model.h>

typedef struct tu_tensor {
    char name[128];
    char dtype[16];
    uint32_t ndim;
    uint64_t shape[2];
    size_t nbytes;
    uint8_t *data;
} tu_tensor_t;

typedef struct tu_ckpt {
    tu_tensor_t t[256];
    size_t n;
} tu_ckpt_t;

/* Value of element (i, j) of tensor k: small multiples of 1/8, exact in bf16, f16 and f32. */
static inline float tu_value(size_t k, uint64_t i, uint64_t j)
{
    return (float)((int)((k * 7 + i * 3 + j) % 17) - 8) / 8.0f;
}

static inline size_t tu_esize(const char *dt)
{
    if (strcmp(dt, "F32") == 0 || strcmp(dt, "I32") == 0)
        return 4;
    if (strcmp(dt, "F64") == 0 || strcmp(dt, "I64") == 0)
        return 8;
    return 2;
}

static inline tu_tensor_t *tu_add(tu_ckpt_t *c, const char *name, const char *dtype, uint32_t ndim,
                                  uint64_t d0, uint64_t d1)
{
    tu_tensor_t *t = &c->t[c->n];
    size_t k = c->n++;
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    snprintf(t->dtype, sizeof(t->dtype), "%s", dtype);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    uint64_t rows = ndim == 2 ? d0 : 1, cols = ndim == 2 ? d1 : d0;
    size_t es = tu_esize(dtype);
    t->nbytes = (size_t)(rows * cols) * es;
    t->data = calloc(t->nbytes ? t->nbytes : 1, 1);
    for (uint64_t i = 0; i < rows; i++) {
        for (uint64_t j = 0; j < cols; j++) {
            float v = tu_value(k, i, j);
            uint8_t *p = t->data + (i * cols + j) * es;
            if (strcmp(dtype, "F32") == 0) {
                memcpy(p, &v, 4);
            } else if (strcmp(dtype, "BF16") == 0) {
                uint16_t h = tdm_f32_to_bf16(v);
                memcpy(p, &h, 2);
            } else if (strcmp(dtype, "F16") == 0) {
                uint16_t h = tdm_f32_to_f16(v);
                memcpy(p, &h, 2);
            }
        }
    }
    return t;
}

static inline tu_tensor_t *tu_get(tu_ckpt_t *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return &c->t[i];
    return NULL;
}

/* Regenerate tensor `name` in place (same index, so the same values) with another dtype/shape. */
static inline void tu_replace(tu_ckpt_t *c, const char *name, const char *dtype, uint32_t ndim,
                              uint64_t d0, uint64_t d1)
{
    tu_tensor_t *t = tu_get(c, name);
    if (!t)
        abort();
    size_t n = c->n;
    free(t->data);
    c->n = (size_t)(t - c->t); /* tu_add fills slot c->n and derives values from it */
    tu_add(c, name, dtype, ndim, d0, d1);
    c->n = n;
}

static inline void tu_remove(tu_ckpt_t *c, const char *name)
{
    tu_tensor_t *t = tu_get(c, name);
    if (!t)
        return;
    free(t->data);
    t->data = NULL;
    t->name[0] = '\0'; /* skipped by the writers */
}

static inline void tu_free(tu_ckpt_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->t[i].data);
    c->n = 0;
}

/* Write an 8-byte length, `hdr` padded with spaces to a multiple of 8, then `data`. */
static inline int tu_write_raw(const char *path, const char *hdr, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    fwrite(lenb, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    for (size_t i = hl; i < padded; i++)
        fputc(' ', f);
    if (len)
        fwrite(data, 1, len, f);
    return fclose(f);
}

/* Write tensors whose index i satisfies i % nshard == shard into one safetensors file. */
static inline int tu_write_st(const char *path, const tu_ckpt_t *c, size_t shard, size_t nshard)
{
    json_t *h = json_object();
    size_t off = 0;
    for (size_t i = 0; i < c->n; i++) {
        const tu_tensor_t *t = &c->t[i];
        if (!t->name[0] || i % nshard != shard)
            continue;
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_object_set_new(h, t->name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", t->dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + t->nbytes)));
        off += t->nbytes;
    }
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *hdr = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    uint8_t *data = malloc(off ? off : 1);
    off = 0;
    for (size_t i = 0; i < c->n; i++) {
        const tu_tensor_t *t = &c->t[i];
        if (!t->name[0] || i % nshard != shard)
            continue;
        memcpy(data + off, t->data, t->nbytes);
        off += t->nbytes;
    }
    int rc = tu_write_raw(path, hdr, data, off);
    free(hdr);
    free(data);
    return rc;
}

static inline void tu_path(char *buf, size_t len, const char *dir, const char *name)
{
    if (snprintf(buf, len, "%s/%s", dir, name) >= (int)len)
        abort(); /* test paths are short */
}

/* nshard == 0: model.safetensors; else model-0000k-of-0000n.safetensors + the index. */
static inline int tu_write_weights(const char *dir, const tu_ckpt_t *c, size_t nshard)
{
    char p[512];
    if (nshard == 0) {
        tu_path(p, sizeof(p), dir, "model.safetensors");
        return tu_write_st(p, c, 0, 1);
    }
    json_t *wm = json_object();
    for (size_t s = 0; s < nshard; s++) {
        char name[64];
        snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, nshard);
        tu_path(p, sizeof(p), dir, name);
        if (tu_write_st(p, c, s, nshard) != 0)
            return -1;
        for (size_t i = s; i < c->n; i += nshard)
            if (c->t[i].name[0])
                json_object_set_new(wm, c->t[i].name, json_string(name));
    }
    json_t *idx = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", wm);
    tu_path(p, sizeof(p), dir, "model.safetensors.index.json");
    int rc = json_dump_file(idx, p, JSON_INDENT(1));
    json_decref(idx);
    return rc;
}

/* The tensor set a config implies (Llama/Qwen2 naming), all of dtype `dt`. */
static inline void tu_fill(tu_ckpt_t *c, json_t *cfg, const char *dt)
{
    uint64_t V = (uint64_t)json_integer_value(json_object_get(cfg, "vocab_size"));
    uint64_t H = (uint64_t)json_integer_value(json_object_get(cfg, "hidden_size"));
    uint64_t I = (uint64_t)json_integer_value(json_object_get(cfg, "intermediate_size"));
    uint64_t L = (uint64_t)json_integer_value(json_object_get(cfg, "num_hidden_layers"));
    uint64_t NH = (uint64_t)json_integer_value(json_object_get(cfg, "num_attention_heads"));
    uint64_t KV = (uint64_t)json_integer_value(json_object_get(cfg, "num_key_value_heads"));
    json_t *jhd = json_object_get(cfg, "head_dim");
    uint64_t HD = jhd ? (uint64_t)json_integer_value(jhd) : H / NH;
    int bias = json_is_true(json_object_get(cfg, "attention_bias")) ||
               strcmp(json_string_value(json_object_get(cfg, "model_type")), "qwen2") == 0;
    char n[128];
    tu_add(c, "model.embed_tokens.weight", dt, 2, V, H);
    for (uint64_t l = 0; l < L; l++) {
#define TU_ADD(suffix, nd, a, b)                                                                   \
    do {                                                                                           \
        snprintf(n, sizeof(n), "model.layers.%llu.%s", (unsigned long long)l, suffix);             \
        tu_add(c, n, dt, nd, a, b);                                                                \
    } while (0)
        TU_ADD("input_layernorm.weight", 1, H, 0);
        TU_ADD("self_attn.q_proj.weight", 2, NH * HD, H);
        TU_ADD("self_attn.k_proj.weight", 2, KV * HD, H);
        TU_ADD("self_attn.v_proj.weight", 2, KV * HD, H);
        if (bias) {
            TU_ADD("self_attn.q_proj.bias", 1, NH * HD, 0);
            TU_ADD("self_attn.k_proj.bias", 1, KV * HD, 0);
            TU_ADD("self_attn.v_proj.bias", 1, KV * HD, 0);
        }
        TU_ADD("self_attn.o_proj.weight", 2, H, NH * HD);
        TU_ADD("post_attention_layernorm.weight", 1, H, 0);
        TU_ADD("mlp.gate_proj.weight", 2, I, H);
        TU_ADD("mlp.up_proj.weight", 2, I, H);
        TU_ADD("mlp.down_proj.weight", 2, H, I);
#undef TU_ADD
    }
    tu_add(c, "model.norm.weight", dt, 1, H, 0);
    if (!json_is_true(json_object_get(cfg, "tie_word_embeddings")))
        tu_add(c, "lm_head.weight", dt, 2, V, H);
}

/* A tiny Llama config: vocab 40, hidden 16, 4 heads of 4 (2 KV heads), intermediate 24. */
static inline json_t *tu_llama_config(void)
{
    return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:s, s:i, "
                     "s:i, s:s}",
                     "architectures", "LlamaForCausalLM", "model_type", "llama", "vocab_size", 40,
                     "hidden_size", 16, "intermediate_size", 24, "num_hidden_layers", 2,
                     "num_attention_heads", 4, "num_key_value_heads", 2, "max_position_embeddings",
                     128, "rms_norm_eps", 1e-5, "rope_theta", 500000.0, "tie_word_embeddings", 0,
                     "torch_dtype", "bfloat16", "bos_token_id", 1, "eos_token_id", 2, "hidden_act",
                     "silu");
}

static inline int tu_write_config(const char *dir, json_t *cfg)
{
    char p[512];
    tu_path(p, sizeof(p), dir, "config.json");
    return json_dump_file(cfg, p, JSON_INDENT(2));
}

static inline int tu_rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void tu_rmtree(const char *dir)
{
    nftw(dir, tu_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh empty directory under $TMPDIR; returns a static-lifetime buffer owned by the caller. */
static inline char *tu_mkdtemp(char *buf, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/tdm-model-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(buf);
}

#endif
