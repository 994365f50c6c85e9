/*
 * test-model-fixtures.c — the golden checkpoints of tests/fixtures (written by transformers'
 * save_pretrained) load with the config values their config.json/generation_config.json state,
 * every tensor the golden lists is found in the file it names with its dtype and shape, the
 * embedding rows equal transformers' embedding output bit for bit, the RoPE frequencies implied by
 * the parsed config equal transformers' inv_freq, and tp 2 views cut the weights consistently.
 */
#include "config.h"

#include <math.h>

#include "model_int.h"
#include "tap.h"

typedef struct expect {
    const char *name;
    uint32_t vocab, hidden, inter, heads, kv, head_dim;
    float eps, theta;
    tdm_rope_type_t rope;
    float factor;
    int tie, bias;
    tdm_dtype_t dtype;
    int32_t bos;
    int32_t eos[4];
    uint32_t n_eos;
    uint32_t n_files;
} expect_t;

static const expect_t models[] = {
    {"tiny-llama-gqa",
     601,
     64,
     128,
     4,
     2,
     16,
     1e-5f,
     1e4f,
     TDM_ROPE_DEFAULT,
     1,
     0,
     0,
     TDM_DTYPE_BF16,
     600,
     {600},
     1,
     1},
    {"tiny-llama-gqa-fp32",
     601,
     64,
     128,
     4,
     2,
     16,
     1e-5f,
     1e4f,
     TDM_ROPE_DEFAULT,
     1,
     0,
     0,
     TDM_DTYPE_F32,
     600,
     {600},
     1,
     1},
    {"tiny-llama2-fp16",
     636,
     64,
     128,
     4,
     4,
     16,
     1e-6f,
     1e4f,
     TDM_ROPE_LINEAR,
     2,
     0,
     0,
     TDM_DTYPE_F16,
     1,
     {2},
     1,
     1},
    {"tiny-llama3",
     911,
     64,
     128,
     4,
     2,
     64,
     1e-5f,
     5e5f,
     TDM_ROPE_LLAMA3,
     8,
     1,
     0,
     TDM_DTYPE_BF16,
     900,
     {909, 901, 908},
     3,
     1},
    {"tiny-qwen2-sharded",
     832,
     128,
     256,
     2,
     2,
     64,
     1e-6f,
     1e6f,
     TDM_ROPE_DEFAULT,
     1,
     0,
     1,
     TDM_DTYPE_BF16,
     760,
     {762, 760},
     2,
     3},
};

/* transformers' inv_freq for the config's rope type (default, linear, llama3). */
static double inv_freq(const tdm_model_config_t *c, uint32_t i)
{
    double f = 1.0 / pow((double)c->rope_theta, (double)(2 * i) / (double)c->head_dim);
    if (c->rope_type == TDM_ROPE_LINEAR)
        return f / c->rope_factor;
    if (c->rope_type != TDM_ROPE_LLAMA3)
        return f;
    double old = c->rope_original_max_pos, lo = c->rope_low_freq_factor,
           hi = c->rope_high_freq_factor, wavelen = 2 * M_PI / f;
    if (wavelen < old / hi)
        return f;
    if (wavelen > old / lo)
        return f / c->rope_factor;
    double s = (old / wavelen - lo) / (hi - lo);
    return (1 - s) * f / c->rope_factor + s * f;
}

static void check_model(const char *base, const expect_t *e)
{
    char dir[1024], gpath[1024], err[512] = "";
    snprintf(dir, sizeof(dir), "%s/tests/fixtures/models/%s", base, e->name);
    snprintf(gpath, sizeof(gpath), "%s/tests/fixtures/goldens/%s.json", base, e->name);
    tdm_model_t *m;
    tdm_status_t st = tdm_model_load(dir, &m, err, sizeof(err));
    if (!ok(st == TDM_OK, "%s loads", e->name)) {
        diag("  %s: %s", tdm_status_name(st), err);
        return;
    }
    const tdm_model_config_t *c = tdm_model_config(m);
    ok(c->vocab_size == e->vocab && c->hidden_size == e->hidden &&
           c->intermediate_size == e->inter && c->num_layers == 2 && c->num_heads == e->heads &&
           c->num_kv_heads == e->kv && c->head_dim == e->head_dim,
       "%s: sizes", e->name);
    ok(c->rms_norm_eps == e->eps && c->rope_theta == e->theta && c->rope_type == e->rope &&
           c->rope_factor == e->factor && c->tie_word_embeddings == e->tie &&
           c->attention_bias == e->bias && c->weight_dtype == e->dtype,
       "%s: eps, theta, rope, tie, bias, dtype", e->name);
    int eos_ok = c->bos_token_id == e->bos && c->n_eos == e->n_eos;
    for (uint32_t i = 0; eos_ok && i < e->n_eos; i++)
        eos_ok = c->eos_token_ids[i] == e->eos[i];
    ok(eos_ok, "%s: bos %d and %u eos ids (config + generation_config)", e->name, e->bos, e->n_eos);
    is_int(m->n_files, e->n_files, "%s: files mapped", e->name);

    json_error_t je;
    json_t *g = json_load_file(gpath, JSON_ALLOW_NUL, &je);
    if (!ok(g != NULL, "%s: golden parses", e->name)) {
        diag("  %s (line %d)", je.text, je.line);
        tdm_model_free(m);
        return;
    }
    /* every stored tensor the golden lists: file, dtype, shape */
    json_t *w;
    size_t i;
    int listed = 0, match = 0;
    json_array_foreach(json_object_get(g, "weights"), i, w)
    {
        listed++;
        const char *name = json_string_value(json_object_get(w, "name"));
        const tdm_st_tensor_t *t = name ? tdm_model_find(m, name) : NULL;
        if (!t)
            continue;
        const char *file = strrchr(m->files[t->file].path, '/') + 1;
        json_t *shape = json_object_get(w, "shape");
        int good = strcmp(file, json_string_value(json_object_get(w, "file"))) == 0 &&
                   strcmp(tdm_st_dtype_name(t->dtype),
                          json_string_value(json_object_get(w, "dtype"))) == 0 &&
                   json_array_size(shape) == t->ndim;
        for (uint32_t d = 0; good && d < t->ndim; d++)
            good = (uint64_t)json_integer_value(json_array_get(shape, d)) == t->shape[d];
        match += good;
    }
    ok(listed > 0 && match == listed, "%s: %d/%d golden tensors in their file, dtype and shape",
       e->name, match, listed);

    /* embedding output of the last prefill position == the embedding row, exactly */
    json_t *pre = json_object_get(g, "prefill");
    json_t *ids = json_object_get(pre, "prompt_ids");
    json_t *emb = json_object_get(json_object_get(pre, "hidden_last_position"), "embed");
    int64_t tok = json_integer_value(json_array_get(ids, json_array_size(ids) - 1));
    tdm_model_view_t v;
    st = tdm_model_view_init(m, 1, 0, &v, err, sizeof(err));
    float *row = calloc(c->hidden_size, sizeof(float));
    int exact = st == TDM_OK && json_array_size(emb) == c->hidden_size && tok >= 0 &&
                (uint64_t)tok < c->vocab_size;
    if (exact) {
        tdm_tensor_row_to_f32(&v.embed, (uint32_t)tok, row);
        for (uint32_t j = 0; j < c->hidden_size; j++)
            exact &= row[j] == (float)json_real_value(json_array_get(emb, j));
    }
    ok(exact, "%s: embedding row of token %lld equals transformers' embedding output", e->name,
       (long long)tok);

    /* RoPE frequencies from the parsed config vs transformers */
    json_t *rf = json_object_get(json_object_get(g, "rope"), "inv_freq");
    int rope_ok = json_array_size(rf) == c->head_dim / 2;
    double worst = 0;
    for (uint32_t k = 0; rope_ok && k < c->head_dim / 2; k++) {
        double ref = json_real_value(json_array_get(rf, k)), got = inv_freq(c, k);
        double rel = fabs(got - ref) / fabs(ref);
        worst = rel > worst ? rel : worst;
    }
    ok(rope_ok && worst < 1e-6, "%s: inv_freq from the parsed rope config matches (rel %.1e)",
       e->name, worst);

    /* tp 2: rank 1's q starts at row heads/2*head_dim; bytes add up */
    tdm_model_view_t r0, r1;
    int tp_ok = tdm_model_view_init(m, 2, 0, &r0, err, sizeof(err)) == TDM_OK &&
                tdm_model_view_init(m, 2, 1, &r1, err, sizeof(err)) == TDM_OK;
    if (tp_ok) {
        uint32_t qd = r1.heads_r * c->head_dim;
        float *a = calloc(c->hidden_size, sizeof(float)),
              *b = calloc(c->hidden_size, sizeof(float));
        tdm_tensor_row_to_f32(&r1.layers[1].q, 0, a);
        tdm_tensor_row_to_f32(&v.layers[1].q, qd, b);
        tp_ok = memcmp(a, b, c->hidden_size * sizeof(float)) == 0;
        uint64_t repl = r0.resident_bytes + r1.resident_bytes - v.resident_bytes;
        /* what both ranks hold: final norm, 2 norms per layer (embed/lm_head are vocab rows) */
        uint64_t es = c->weight_dtype == TDM_DTYPE_F32 ? 4 : 2;
        uint64_t want = (uint64_t)c->hidden_size * 5 * es;
        tp_ok &= repl == want && r0.embed.rows + r1.embed.rows == c->vocab_size &&
                 r1.vocab_lo == r0.vocab_r && r1.lm_head.rows == r1.embed.rows &&
                 (c->vocab_size % 2 != 0 || r0.resident_bytes == r1.resident_bytes);
        diag("%s: %llu weight bytes; tp 2: %llu per rank", e->name,
             (unsigned long long)v.resident_bytes, (unsigned long long)r0.resident_bytes);
        free(a);
        free(b);
        tdm_model_view_free(&r0);
        tdm_model_view_free(&r1);
    }
    ok(tp_ok, "%s: tp 2 views slice q by heads, replicated bytes counted on both ranks", e->name);
    free(row);
    if (st == TDM_OK)
        tdm_model_view_free(&v);
    json_decref(g);
    tdm_model_free(m);
}

int main(void)
{
    const char *src = getenv("TDM_SRCDIR");
    char probe[1024];
    snprintf(probe, sizeof(probe), "%s/tests/fixtures/models/tiny-llama-gqa/config.json",
             src ? src : ".");
    FILE *f = fopen(probe, "r");
    if (!f)
        bail_out("tests/fixtures/models not present");
    fclose(f);
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        check_model(src ? src : ".", &models[i]);
    return done_testing();
}
