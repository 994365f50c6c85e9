/*
 * loader.c — a checkpoint directory → tdm_model_t: config, mapped safetensors files, and the
 * validated full (unsharded) weights every rank view is cut from.
 *
 * model.safetensors wins if present; otherwise model.safetensors.index.json's weight_map names the
 * shards, each mapped once, and every weight_map entry must be found in the shard it names. Tensor
 * names are unique across files. For each weight the engine uses the loader checks presence, dtype
 * (BF16/F16/F32; mixed across tensors is fine, each view records its own) and the exact shape the
 * config implies, and reports the first problem in one line naming the tensor, what was expected
 * and what was found. Tensors the engine does not use (rotary inv_freq buffers, extra heads) are
 * ignored, as transformers ignores them.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "model_int.h"

#define ST_SINGLE "model.safetensors"
#define ST_INDEX "model.safetensors.index.json"
#define MAX_SHARDS 4096u

static void progress(const tdm_model_load_opts_t *o, const char *stage, uint64_t done,
                     uint64_t total)
{
    if (o && o->progress)
        o->progress(o->progress_arg, stage, done, total);
}

void tdm_model_progress_stderr(void *arg, const char *stage, uint64_t done, uint64_t total)
{
    const char *who = arg;
    fprintf(stderr, "%s%sloading model: %s %llu/%llu\n", who ? who : "", who ? ": " : "", stage,
            (unsigned long long)done, (unsigned long long)total);
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = tdm_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Load dir/name as JSON. A missing optional file is *ret = NULL and TDM_OK. */
static tdm_status_t load_json(const char *dir, const char *name, int required, json_t **ret,
                              char *err, size_t err_len)
{
    char *path = path_join(dir, name);
    tdm_status_t st = TDM_OK;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT && !required) {
            *ret = NULL;
            goto out;
        }
        tdm_model_seterr(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        st = errno == ENOENT ? TDM_ERR_NOTFOUND : TDM_ERR_IO;
        goto out;
    }
    json_error_t jerr;
    json_t *j = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!j) {
        tdm_model_seterr(err, err_len, "%s: invalid JSON: %s (line %d)", name, jerr.text,
                         jerr.line);
        st = TDM_ERR_FORMAT;
        goto out;
    }
    *ret = j;
out:
    tdm_free(path);
    return st;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    const tdm_st_tensor_t *x = *(const tdm_st_tensor_t *const *)a;
    const tdm_st_tensor_t *y = *(const tdm_st_tensor_t *const *)b;
    return strcmp(x->name, y->name);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

const tdm_st_tensor_t *tdm_model_find(const tdm_model_t *m, const char *name)
{
    size_t lo = 0, hi = m->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, m->by_name[mid]->name);
        if (c == 0)
            return m->by_name[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

static tdm_status_t open_file(tdm_model_t *m, const char *name, char *err, size_t err_len)
{
    char *path = path_join(m->dir, name);
    tdm_st_file_t *f = &m->files[m->n_files];
    tdm_status_t st = tdm_st_open(path, name, f, err, err_len);
    tdm_free(path);
    if (st != TDM_OK)
        return st;
    for (size_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].file = m->n_files;
    m->n_files++;
    return TDM_OK;
}

/* Map the shards named by the index's weight_map, each once, in order of first mention. */
static tdm_status_t open_sharded(tdm_model_t *m, json_t *index, const tdm_model_load_opts_t *o,
                                 char *err, size_t err_len)
{
    json_t *wm = json_is_object(index) ? json_object_get(index, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        tdm_model_seterr(err, err_len, ST_INDEX ": weight_map is missing or not an object");
        return TDM_ERR_FORMAT;
    }
    const char **names = tdm_calloc(json_object_size(wm) + 1, sizeof(*names));
    size_t n = 0;
    tdm_status_t st = TDM_OK;
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v)
    {
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        if (!s || !s[0] || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
            tdm_model_seterr(err, err_len,
                             ST_INDEX ": weight_map[\"%s\"] is not a file name in the directory",
                             key);
            st = TDM_ERR_FORMAT;
            goto out;
        }
        size_t i = 0;
        while (i < n && strcmp(names[i], s) != 0)
            i++;
        if (i == n) {
            if (n == MAX_SHARDS) {
                tdm_model_seterr(err, err_len, ST_INDEX ": more than %u shards", MAX_SHARDS);
                st = TDM_ERR_RANGE;
                goto out;
            }
            names[n++] = s;
        }
    }
    if (n == 0) {
        tdm_model_seterr(err, err_len, ST_INDEX ": weight_map is empty");
        st = TDM_ERR_FORMAT;
        goto out;
    }
    m->files = tdm_calloc(n, sizeof(*m->files));
    for (size_t i = 0; i < n; i++) {
        progress(o, "map", i, n);
        TDM_CHECK_GOTO(open_file(m, names[i], err, err_len), st, out);
    }
    progress(o, "map", n, n);
out:
    tdm_free(names);
    return st;
}

static tdm_status_t build_index(tdm_model_t *m, json_t *index, char *err, size_t err_len)
{
    size_t total = 0;
    for (uint32_t i = 0; i < m->n_files; i++)
        total += m->files[i].n_tensors;
    m->by_name = tdm_calloc(total ? total : 1, sizeof(*m->by_name));
    for (uint32_t i = 0; i < m->n_files; i++)
        for (size_t j = 0; j < m->files[i].n_tensors; j++)
            m->by_name[m->n_tensors++] = &m->files[i].tensors[j];
    qsort(m->by_name, m->n_tensors, sizeof(*m->by_name), cmp_tensor_name);
    for (size_t i = 1; i < m->n_tensors; i++) {
        if (strcmp(m->by_name[i - 1]->name, m->by_name[i]->name) == 0) {
            tdm_model_seterr(err, err_len, "tensor %s: present in both %s and %s",
                             m->by_name[i]->name, base_name(m->files[m->by_name[i - 1]->file].path),
                             base_name(m->files[m->by_name[i]->file].path));
            return TDM_ERR_FORMAT;
        }
    }
    if (!index)
        return TDM_OK;
    json_t *wm = json_object_get(index, "weight_map");
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v)
    {
        const tdm_st_tensor_t *t = tdm_model_find(m, key);
        const char *want = json_string_value(v);
        if (!t) {
            tdm_model_seterr(err, err_len,
                             "tensor %s: weight_map names %s, but that shard does not contain it",
                             key, want);
            return TDM_ERR_FORMAT;
        }
        if (strcmp(base_name(m->files[t->file].path), want) != 0) {
            tdm_model_seterr(err, err_len, "tensor %s: weight_map names %s, but it is in %s", key,
                             want, base_name(m->files[t->file].path));
            return TDM_ERR_FORMAT;
        }
    }
    return TDM_OK;
}

typedef struct want_ctx {
    tdm_model_t *m;
    const char *where; /* for "missing" messages */
    char *err;
    size_t err_len;
} want_ctx_t;

static void fmt_shape(const tdm_st_tensor_t *t, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (uint32_t i = 0; i < t->ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%llu", i ? ", " : "",
                                (unsigned long long)t->shape[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

static tdm_status_t tensor_view(const tdm_st_tensor_t *t, tdm_tensor_t *ret)
{
    tdm_dtype_t dt;
    TDM_TRY(tdm_st_dtype_to_engine(t->dtype, &dt));
    if (t->ndim != 1 && t->ndim != 2)
        return TDM_ERR_UNSUPPORTED;
    if (t->shape[0] > UINT32_MAX || (t->ndim == 2 && t->shape[1] > UINT32_MAX))
        return TDM_ERR_RANGE;
    ret->dtype = dt;
    ret->rows = t->ndim == 2 ? (uint32_t)t->shape[0] : 1;
    ret->cols = (uint32_t)(t->ndim == 2 ? t->shape[1] : t->shape[0]);
    ret->row_stride = ret->cols;
    ret->data = t->data;
    return TDM_OK;
}

/* Resolve one weight: present, float dtype, and shape == [rows, cols] (rows == 0: 1-D [cols]). */
static tdm_status_t want(want_ctx_t *c, const char *name, uint32_t rows, uint32_t cols,
                         tdm_tensor_t *ret)
{
    const tdm_st_tensor_t *t = tdm_model_find(c->m, name);
    if (!t) {
        tdm_model_seterr(c->err, c->err_len, "tensor %s: missing from %s", name, c->where);
        return TDM_ERR_NOTFOUND;
    }
    tdm_dtype_t dt;
    if (tdm_st_dtype_to_engine(t->dtype, &dt) != TDM_OK) {
        tdm_model_seterr(c->err, c->err_len, "tensor %s: dtype %s, expected BF16, F16 or F32", name,
                         tdm_st_dtype_name(t->dtype));
        return TDM_ERR_UNSUPPORTED;
    }
    int ok = rows ? (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols)
                  : (t->ndim == 1 && t->shape[0] == cols);
    if (!ok) {
        char got[128], exp[64];
        fmt_shape(t, got, sizeof(got));
        if (rows)
            snprintf(exp, sizeof(exp), "[%u, %u]", rows, cols);
        else
            snprintf(exp, sizeof(exp), "[%u]", cols);
        tdm_model_seterr(c->err, c->err_len, "tensor %s: shape %s, expected %s from config.json",
                         name, got, exp);
        return TDM_ERR_FORMAT;
    }
    return tensor_view(t, ret);
}

static tdm_status_t resolve_weights(tdm_model_t *m, const tdm_model_load_opts_t *o, char *err,
                                    size_t err_len)
{
    const tdm_model_config_t *c = &m->cfg;
    want_ctx_t w = {m,
                    m->n_files == 1 && m->files[0].path &&
                            strcmp(base_name(m->files[0].path), ST_SINGLE) == 0
                        ? ST_SINGLE
                        : "the shards of " ST_INDEX,
                    err, err_len};
    uint32_t H = c->hidden_size, qd = c->num_heads * c->head_dim,
             kvd = c->num_kv_heads * c->head_dim, I = c->intermediate_size;
    TDM_TRY(want(&w, "model.embed_tokens.weight", c->vocab_size, H, &m->embed));
    TDM_TRY(want(&w, "model.norm.weight", 0, H, &m->final_norm));
    if (c->tie_word_embeddings)
        m->lm_head = m->embed;
    else
        TDM_TRY(want(&w, "lm_head.weight", c->vocab_size, H, &m->lm_head));
    m->layers = tdm_calloc(c->num_layers, sizeof(*m->layers));
    char name[128];
#define W(suffix, r, cols, dst)                                                                    \
    do {                                                                                           \
        snprintf(name, sizeof(name), "model.layers.%u.%s", l, suffix);                             \
        TDM_TRY(want(&w, name, (r), (cols), (dst)));                                               \
    } while (0)
    for (uint32_t l = 0; l < c->num_layers; l++) {
        tdm_layer_weights_t *L = &m->layers[l];
        W("input_layernorm.weight", 0, H, &L->attn_norm);
        W("self_attn.q_proj.weight", qd, H, &L->q);
        W("self_attn.k_proj.weight", kvd, H, &L->k);
        W("self_attn.v_proj.weight", kvd, H, &L->v);
        if (c->attention_bias) {
            W("self_attn.q_proj.bias", 0, qd, &L->q_bias);
            W("self_attn.k_proj.bias", 0, kvd, &L->k_bias);
            W("self_attn.v_proj.bias", 0, kvd, &L->v_bias);
        }
        if (c->arch == TDM_ARCH_QWEN3) {
            W("self_attn.q_norm.weight", 0, c->head_dim, &L->q_norm);
            W("self_attn.k_norm.weight", 0, c->head_dim, &L->k_norm);
        }
        W("self_attn.o_proj.weight", H, qd, &L->o);
        W("post_attention_layernorm.weight", 0, H, &L->mlp_norm);
        W("mlp.gate_proj.weight", I, H, &L->gate);
        W("mlp.up_proj.weight", I, H, &L->up);
        W("mlp.down_proj.weight", H, I, &L->down);
        progress(o, "tensors", l + 1, c->num_layers);
    }
#undef W
    if (m->cfg.weight_dtype == TDM_DTYPE_MAX)
        m->cfg.weight_dtype = m->embed.dtype;
    return TDM_OK;
}

/* Touch every page of every mapping once, reporting progress in ~5% steps. */
static void prefault(tdm_model_t *m, const tdm_model_load_opts_t *o)
{
    uint64_t total = 0, done = 0, next = 0;
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    for (uint32_t i = 0; i < m->n_files; i++)
        total += m->files[i].map_len;
    volatile uint8_t sink = 0;
    const size_t chunk = (size_t)64 << 20;
    for (uint32_t i = 0; i < m->n_files; i++) {
        const uint8_t *p = m->files[i].map;
        size_t len = m->files[i].map_len;
        for (size_t off = 0; off < len; off += chunk) {
            size_t n = len - off < chunk ? len - off : chunk;
            (void)madvise((void *)(p + off), n, MADV_WILLNEED);
            for (size_t k = 0; k < n; k += page)
                sink ^= p[off + k];
            done += n;
            if (done >= next || done == total) {
                progress(o, "prefault", done, total);
                next = done + total / 20;
            }
        }
    }
    (void)sink;
}

tdm_status_t tdm_model_load_ex(const char *dir, const tdm_model_load_opts_t *opts,
                               tdm_model_t **ret_model, char *err, size_t err_len)
{
    tdm_status_t st;
    json_t *cfg = NULL, *gen = NULL, *index = NULL;
    tdm_model_t *m = tdm_calloc(1, sizeof(*m));
    m->dir = tdm_strdup(dir);

    progress(opts, "config", 0, 1);
    TDM_CHECK_GOTO(load_json(dir, "config.json", 1, &cfg, err, err_len), st, err_free);
    TDM_CHECK_GOTO(load_json(dir, "generation_config.json", 0, &gen, err, err_len), st, err_free);
    TDM_CHECK_GOTO(tdm_model_config_from_json(cfg, gen, &m->cfg, err, err_len), st, err_free);
    progress(opts, "config", 1, 1);

    char *single = path_join(dir, ST_SINGLE);
    FILE *probe = fopen(single, "rb");
    tdm_free(single);
    if (probe) {
        fclose(probe);
        m->files = tdm_calloc(1, sizeof(*m->files));
        progress(opts, "map", 0, 1);
        TDM_CHECK_GOTO(open_file(m, ST_SINGLE, err, err_len), st, err_free);
        progress(opts, "map", 1, 1);
    } else {
        TDM_CHECK_GOTO(load_json(dir, ST_INDEX, 0, &index, err, err_len), st, err_free);
        if (!index) {
            tdm_model_seterr(err, err_len, "%s: neither " ST_SINGLE " nor " ST_INDEX " exists",
                             dir);
            st = TDM_ERR_NOTFOUND;
            goto err_free;
        }
        TDM_CHECK_GOTO(open_sharded(m, index, opts, err, err_len), st, err_free);
    }
    TDM_CHECK_GOTO(build_index(m, index, err, err_len), st, err_free);
    TDM_CHECK_GOTO(resolve_weights(m, opts, err, err_len), st, err_free);
    if (opts && opts->prefault)
        prefault(m, opts);
    tdm_dbg(TDM_SUB_MODEL,
            "msg=\"model loaded\" dir=\"%s\" arch=%s layers=%u files=%u tensors=%zu "
            "weight_bytes=%llu",
            dir, tdm_arch_name(m->cfg.arch), m->cfg.num_layers, m->n_files, m->n_tensors,
            (unsigned long long)tdm_model_weight_bytes(m));

    json_decref(cfg);
    json_decref(gen);
    json_decref(index);
    *ret_model = m;
    return TDM_OK;

err_free:
    json_decref(cfg);
    json_decref(gen);
    json_decref(index);
    tdm_model_free(m);
    return st;
}

tdm_status_t tdm_model_load(const char *dir, tdm_model_t **ret_model, char *err, size_t err_len)
{
    return tdm_model_load_ex(dir, NULL, ret_model, err, err_len);
}

void tdm_model_free(tdm_model_t *m)
{
    if (!m)
        return;
    for (uint32_t i = 0; i < m->n_files; i++)
        tdm_st_close(&m->files[i]);
    tdm_free(m->files);
    tdm_free(m->by_name);
    tdm_free(m->layers);
    tdm_free(m->dir);
    tdm_free(m);
}

const tdm_model_config_t *tdm_model_config(const tdm_model_t *m)
{
    return &m->cfg;
}

tdm_status_t tdm_model_tensor(const tdm_model_t *m, const char *name, tdm_tensor_t *ret_tensor)
{
    const tdm_st_tensor_t *t = tdm_model_find(m, name);
    if (!t)
        return TDM_ERR_NOTFOUND;
    return tensor_view(t, ret_tensor);
}
