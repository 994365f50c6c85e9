/*
 * config.c — config.json (+ generation_config.json) → tdm_model_config_t.
 *
 * The architecture comes from architectures[0] (model_type as fallback; the two must agree when
 * both are present). Structural sizes are required; the rest default the way transformers'
 * LlamaConfig / Qwen2Config do (num_key_value_heads = num_attention_heads, rms_norm_eps 1e-6,
 * rope_theta 10000, Llama bos/eos 1/2, max_position_embeddings 2048 / 32768). rope_scaling (or
 * transformers 5's rope_parameters) may be absent, null, default, linear or llama3. Anything the
 * engine would compute differently from transformers — another activation, mlp_bias, sliding
 * windows, quantization, another rope type — is TDM_ERR_UNSUPPORTED naming the field and value,
 * never silently ignored. EOS ids are the union of config.json's and generation_config.json's.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "model_int.h"

#define CFG "config.json"
#define GEN "generation_config.json"

/* Caps well above any real model; they keep every size product of the loader far from overflow. */
#define MAX_DIM (1u << 24)
#define MAX_LAYERS 4096u
#define MAX_HEADS 4096u
#define MAX_HEAD_DIM 4096u

typedef struct cfg_ctx {
    char *err;
    size_t err_len;
} cfg_ctx_t;

static tdm_status_t get_u32(cfg_ctx_t *c, json_t *o, const char *key, int required, uint32_t def,
                            uint32_t max, uint32_t *ret)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) {
            tdm_model_seterr(c->err, c->err_len, CFG ": missing %s", key);
            return TDM_ERR_FORMAT;
        }
        *ret = def;
        return TDM_OK;
    }
    if (!json_is_integer(v)) {
        tdm_model_seterr(c->err, c->err_len, CFG ": %s is not an integer", key);
        return TDM_ERR_FORMAT;
    }
    json_int_t x = json_integer_value(v);
    if (x < 1 || (unsigned long long)x > max) {
        tdm_model_seterr(c->err, c->err_len, CFG ": %s %lld outside [1, %u]", key, (long long)x,
                         max);
        return TDM_ERR_RANGE;
    }
    *ret = (uint32_t)x;
    return TDM_OK;
}

static tdm_status_t get_num(cfg_ctx_t *c, json_t *o, const char *where, const char *key,
                            int required, double def, double *ret)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) {
            tdm_model_seterr(c->err, c->err_len, CFG ": %s needs %s", where, key);
            return TDM_ERR_FORMAT;
        }
        *ret = def;
        return TDM_OK;
    }
    if (!json_is_number(v)) {
        tdm_model_seterr(c->err, c->err_len, CFG ": %s%s%s is not a number", where,
                         where[0] ? "." : "", key);
        return TDM_ERR_FORMAT;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x <= 0) {
        tdm_model_seterr(c->err, c->err_len, CFG ": %s%s%s %g must be positive", where,
                         where[0] ? "." : "", key, x);
        return TDM_ERR_RANGE;
    }
    *ret = x;
    return TDM_OK;
}

static tdm_status_t get_bool(cfg_ctx_t *c, json_t *o, const char *key, int def, int *ret)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *ret = def;
        return TDM_OK;
    }
    if (!json_is_boolean(v)) {
        tdm_model_seterr(c->err, c->err_len, CFG ": %s is not a boolean", key);
        return TDM_ERR_FORMAT;
    }
    *ret = json_is_true(v);
    return TDM_OK;
}

const char *tdm_arch_name(tdm_arch_t a)
{
    static const char *const names[] = {"llama", "qwen2", "qwen3"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == TDM_ARCH_MAX, "one name per architecture");
    return (unsigned)a < TDM_ARCH_MAX ? names[a] : "?";
}

static tdm_status_t parse_arch(cfg_ctx_t *c, json_t *cfg, tdm_arch_t *ret)
{
    static const struct {
        const char *cls, *type;
        tdm_arch_t arch;
    } archs[] = {
        {"LlamaForCausalLM", "llama", TDM_ARCH_LLAMA},
        {"Qwen2ForCausalLM", "qwen2", TDM_ARCH_QWEN2},
        {"Qwen3ForCausalLM", "qwen3", TDM_ARCH_QWEN3},
    };
    _Static_assert(sizeof(archs) / sizeof(archs[0]) == TDM_ARCH_MAX, "one row per architecture");
    json_t *ja = json_object_get(cfg, "architectures");
    json_t *jt = json_object_get(cfg, "model_type");
    const char *cls = NULL, *type = NULL;
    if (ja && !json_is_null(ja)) {
        if (!json_is_array(ja) || json_array_size(ja) == 0 ||
            !json_is_string(json_array_get(ja, 0))) {
            tdm_model_seterr(c->err, c->err_len, CFG ": architectures is not a list of strings");
            return TDM_ERR_FORMAT;
        }
        cls = json_string_value(json_array_get(ja, 0));
    }
    if (jt && !json_is_null(jt)) {
        if (!json_is_string(jt)) {
            tdm_model_seterr(c->err, c->err_len, CFG ": model_type is not a string");
            return TDM_ERR_FORMAT;
        }
        type = json_string_value(jt);
    }
    if (!cls && !type) {
        tdm_model_seterr(c->err, c->err_len, CFG ": neither architectures nor model_type is set");
        return TDM_ERR_FORMAT;
    }
    int by_cls = -1, by_type = -1;
    for (int i = 0; i < TDM_ARCH_MAX; i++) {
        if (cls && strcmp(cls, archs[i].cls) == 0)
            by_cls = i;
        if (type && strcmp(type, archs[i].type) == 0)
            by_type = i;
    }
    if (cls && by_cls < 0) {
        tdm_model_seterr(c->err, c->err_len,
                         CFG ": architectures[0] \"%s\" is not supported (LlamaForCausalLM, "
                             "Qwen2ForCausalLM, Qwen3ForCausalLM)",
                         cls);
        return TDM_ERR_UNSUPPORTED;
    }
    if (type && by_type < 0) {
        tdm_model_seterr(c->err, c->err_len,
                         CFG ": model_type \"%s\" is not supported (llama, qwen2, qwen3)", type);
        return TDM_ERR_UNSUPPORTED;
    }
    if (cls && type && by_cls != by_type) {
        tdm_model_seterr(c->err, c->err_len,
                         CFG ": architectures[0] \"%s\" contradicts model_type \"%s\"", cls, type);
        return TDM_ERR_FORMAT;
    }
    *ret = archs[by_cls >= 0 ? by_cls : by_type].arch;
    return TDM_OK;
}

/* rope_scaling / rope_parameters. `rs` is an object (the caller handled absent/null). */
static tdm_status_t parse_rope(cfg_ctx_t *c, json_t *rs, const char *where, tdm_model_config_t *m)
{
    json_t *jt = json_object_get(rs, "rope_type");
    const char *tkey = "rope_type";
    if (!jt || json_is_null(jt)) {
        jt = json_object_get(rs, "type");
        tkey = "type";
    }
    if (!jt || json_is_null(jt)) {
        m->rope_type = TDM_ROPE_DEFAULT;
        return TDM_OK;
    }
    if (!json_is_string(jt)) {
        tdm_model_seterr(c->err, c->err_len, CFG ": %s.%s is not a string", where, tkey);
        return TDM_ERR_FORMAT;
    }
    const char *t = json_string_value(jt);
    double x;
    if (strcmp(t, "default") == 0) {
        m->rope_type = TDM_ROPE_DEFAULT;
    } else if (strcmp(t, "linear") == 0) {
        m->rope_type = TDM_ROPE_LINEAR;
        TDM_TRY(get_num(c, rs, where, "factor", 1, 0, &x));
        m->rope_factor = (float)x;
    } else if (strcmp(t, "llama3") == 0) {
        m->rope_type = TDM_ROPE_LLAMA3;
        TDM_TRY(get_num(c, rs, where, "factor", 1, 0, &x));
        m->rope_factor = (float)x;
        TDM_TRY(get_num(c, rs, where, "low_freq_factor", 1, 0, &x));
        m->rope_low_freq_factor = (float)x;
        TDM_TRY(get_num(c, rs, where, "high_freq_factor", 1, 0, &x));
        m->rope_high_freq_factor = (float)x;
        if (m->rope_high_freq_factor <= m->rope_low_freq_factor) {
            tdm_model_seterr(c->err, c->err_len,
                             CFG ": %s.high_freq_factor %g must exceed low_freq_factor %g", where,
                             (double)m->rope_high_freq_factor, (double)m->rope_low_freq_factor);
            return TDM_ERR_RANGE;
        }
        json_t *jo = json_object_get(rs, "original_max_position_embeddings");
        if (!json_is_integer(jo) || json_integer_value(jo) < 1 ||
            json_integer_value(jo) > (json_int_t)UINT32_MAX) {
            tdm_model_seterr(c->err, c->err_len,
                             CFG ": %s needs a positive integer original_max_position_embeddings",
                             where);
            return TDM_ERR_FORMAT;
        }
        m->rope_original_max_pos = (uint32_t)json_integer_value(jo);
    } else {
        tdm_model_seterr(c->err, c->err_len,
                         CFG ": %s.%s \"%s\" is not supported (default, linear, llama3)", where,
                         tkey, t);
        return TDM_ERR_UNSUPPORTED;
    }
    return TDM_OK;
}

/* bos/eos: an integer, a list of integers, or null. Appends to ids (deduplicated). */
static tdm_status_t add_ids(cfg_ctx_t *c, const char *file, const char *key, json_t *v,
                            int32_t *ids, uint32_t cap, uint32_t *n)
{
    if (!v || json_is_null(v))
        return TDM_OK;
    size_t cnt = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < cnt; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX) {
            tdm_model_seterr(c->err, c->err_len,
                             "%s: %s must be a non-negative integer or a list of them", file, key);
            return TDM_ERR_FORMAT;
        }
        int32_t id = (int32_t)json_integer_value(e);
        int dup = 0;
        for (uint32_t j = 0; j < *n; j++)
            dup |= ids[j] == id;
        if (dup)
            continue;
        if (*n == cap) {
            tdm_model_seterr(c->err, c->err_len, "%s: %s has more than %u distinct ids", file, key,
                             cap);
            return TDM_ERR_RANGE;
        }
        ids[(*n)++] = id;
    }
    return TDM_OK;
}

static tdm_status_t parse_dtype(cfg_ctx_t *c, json_t *cfg, tdm_dtype_t *ret)
{
    const char *key = "torch_dtype";
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        key = "dtype";
        v = json_object_get(cfg, key);
    }
    if (!v || json_is_null(v)) {
        *ret = TDM_DTYPE_MAX;
        return TDM_OK;
    }
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (s && strncmp(s, "torch.", 6) == 0)
        s += 6;
    if (s && strcmp(s, "bfloat16") == 0)
        *ret = TDM_DTYPE_BF16;
    else if (s && (strcmp(s, "float16") == 0 || strcmp(s, "half") == 0))
        *ret = TDM_DTYPE_F16;
    else if (s && (strcmp(s, "float32") == 0 || strcmp(s, "float") == 0))
        *ret = TDM_DTYPE_F32;
    else {
        tdm_model_seterr(c->err, c->err_len,
                         CFG ": %s \"%s\" is not supported (bfloat16, float16, float32)", key,
                         s ? s : "(not a string)");
        return TDM_ERR_UNSUPPORTED;
    }
    return TDM_OK;
}

/* Settings that would change the numerics if we ignored them. */
static tdm_status_t check_unsupported(cfg_ctx_t *c, json_t *cfg)
{
    json_t *v = json_object_get(cfg, "hidden_act");
    if (v && !json_is_null(v) &&
        !(json_is_string(v) && strcmp(json_string_value(v), "silu") == 0)) {
        tdm_model_seterr(c->err, c->err_len, CFG ": hidden_act \"%s\" is not supported (silu)",
                         json_is_string(v) ? json_string_value(v) : "(not a string)");
        return TDM_ERR_UNSUPPORTED;
    }
    if (json_is_true(json_object_get(cfg, "mlp_bias"))) {
        tdm_model_seterr(c->err, c->err_len, CFG ": mlp_bias true is not supported");
        return TDM_ERR_UNSUPPORTED;
    }
    if (json_is_true(json_object_get(cfg, "use_sliding_window"))) {
        tdm_model_seterr(c->err, c->err_len, CFG ": use_sliding_window true is not supported");
        return TDM_ERR_UNSUPPORTED;
    }
    v = json_object_get(cfg, "quantization_config");
    if (v && !json_is_null(v)) {
        json_t *qm = json_object_get(v, "quant_method");
        tdm_model_seterr(c->err, c->err_len,
                         CFG ": quantization_config (quant_method \"%s\") is not supported",
                         json_is_string(qm) ? json_string_value(qm) : "?");
        return TDM_ERR_UNSUPPORTED;
    }
    return TDM_OK;
}

tdm_status_t tdm_model_config_from_json(json_t *cfg, json_t *gen, tdm_model_config_t *ret_cfg,
                                        char *err, size_t err_len)
{
    cfg_ctx_t c = {err, err_len};
    tdm_model_config_t m;
    memset(&m, 0, sizeof(m));
    if (!json_is_object(cfg)) {
        tdm_model_seterr(err, err_len, CFG ": not a JSON object");
        return TDM_ERR_FORMAT;
    }
    if (gen && !json_is_object(gen)) {
        tdm_model_seterr(err, err_len, GEN ": not a JSON object");
        return TDM_ERR_FORMAT;
    }
    TDM_TRY(parse_arch(&c, cfg, &m.arch));
    TDM_TRY(check_unsupported(&c, cfg));
    TDM_TRY(get_u32(&c, cfg, "vocab_size", 1, 0, MAX_DIM, &m.vocab_size));
    TDM_TRY(get_u32(&c, cfg, "hidden_size", 1, 0, MAX_DIM, &m.hidden_size));
    TDM_TRY(get_u32(&c, cfg, "intermediate_size", 1, 0, MAX_DIM, &m.intermediate_size));
    TDM_TRY(get_u32(&c, cfg, "num_hidden_layers", 1, 0, MAX_LAYERS, &m.num_layers));
    TDM_TRY(get_u32(&c, cfg, "num_attention_heads", 1, 0, MAX_HEADS, &m.num_heads));
    TDM_TRY(get_u32(&c, cfg, "num_key_value_heads", 0, m.num_heads, MAX_HEADS, &m.num_kv_heads));
    if (m.num_kv_heads > m.num_heads || m.num_heads % m.num_kv_heads != 0) {
        tdm_model_seterr(err, err_len,
                         CFG ": num_attention_heads %u is not a multiple of num_key_value_heads %u",
                         m.num_heads, m.num_kv_heads);
        return TDM_ERR_INVAL;
    }
    if (m.hidden_size % m.num_heads != 0 && !json_is_integer(json_object_get(cfg, "head_dim"))) {
        tdm_model_seterr(err, err_len,
                         CFG ": hidden_size %u is not a multiple of num_attention_heads %u and "
                             "head_dim is not given",
                         m.hidden_size, m.num_heads);
        return TDM_ERR_INVAL;
    }
    TDM_TRY(
        get_u32(&c, cfg, "head_dim", 0, m.hidden_size / m.num_heads, MAX_HEAD_DIM, &m.head_dim));
    if (m.head_dim % 2 != 0) {
        tdm_model_seterr(err, err_len, CFG ": head_dim %u is odd (rotary needs pairs)", m.head_dim);
        return TDM_ERR_UNSUPPORTED;
    }
    TDM_TRY(get_u32(&c, cfg, "max_position_embeddings", 0,
                    m.arch == TDM_ARCH_QWEN2 ? 32768u : 2048u, UINT32_MAX,
                    &m.max_position_embeddings));
    double x;
    TDM_TRY(get_num(&c, cfg, "", "rms_norm_eps", 0, 1e-6, &x));
    m.rms_norm_eps = (float)x;

    /* transformers 5 moves rope_theta and the scaling into rope_parameters */
    json_t *rp = json_object_get(cfg, "rope_parameters");
    json_t *rs = json_object_get(cfg, "rope_scaling");
    const char *rwhere = "rope_scaling";
    double theta_def = 10000.0;
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp)) {
            tdm_model_seterr(err, err_len, CFG ": rope_parameters is not an object");
            return TDM_ERR_FORMAT;
        }
        TDM_TRY(get_num(&c, rp, "rope_parameters", "rope_theta", 0, theta_def, &theta_def));
        if (!rs || json_is_null(rs)) {
            rs = rp;
            rwhere = "rope_parameters";
        }
    }
    TDM_TRY(get_num(&c, cfg, "", "rope_theta", 0, theta_def, &x));
    m.rope_theta = (float)x;
    m.rope_type = TDM_ROPE_DEFAULT;
    m.rope_factor = 1.0f;
    if (rs && !json_is_null(rs)) {
        if (!json_is_object(rs)) {
            tdm_model_seterr(err, err_len, CFG ": %s is not an object", rwhere);
            return TDM_ERR_FORMAT;
        }
        TDM_TRY(parse_rope(&c, rs, rwhere, &m));
    }

    TDM_TRY(get_bool(&c, cfg, "tie_word_embeddings", 0, &m.tie_word_embeddings));
    if (m.arch == TDM_ARCH_QWEN2)
        m.attention_bias = 1; /* Qwen2's q/k/v projections always carry a bias */
    else
        TDM_TRY(get_bool(&c, cfg, "attention_bias", 0, &m.attention_bias));
    TDM_TRY(parse_dtype(&c, cfg, &m.weight_dtype));

    /* LlamaConfig defaults bos/eos to 1/2 when the keys are absent; Qwen2Config has none. */
    int llama = m.arch == TDM_ARCH_LLAMA;
    int32_t bos[1];
    uint32_t n_bos = 0;
    json_t *jb = json_object_get(cfg, "bos_token_id");
    if (!jb && llama)
        bos[n_bos++] = 1;
    else if (json_is_array(jb)) {
        tdm_model_seterr(err, err_len, CFG ": bos_token_id must be a single integer");
        return TDM_ERR_FORMAT;
    } else
        TDM_TRY(add_ids(&c, CFG, "bos_token_id", jb, bos, 1, &n_bos));
    if (n_bos == 0 && gen) {
        jb = json_object_get(gen, "bos_token_id");
        if (json_is_array(jb)) {
            tdm_model_seterr(err, err_len, GEN ": bos_token_id must be a single integer");
            return TDM_ERR_FORMAT;
        }
        TDM_TRY(add_ids(&c, GEN, "bos_token_id", jb, bos, 1, &n_bos));
    }
    m.bos_token_id = n_bos ? bos[0] : -1;

    uint32_t cap = sizeof(m.eos_token_ids) / sizeof(m.eos_token_ids[0]);
    json_t *je = json_object_get(cfg, "eos_token_id");
    if (!je && llama) {
        m.eos_token_ids[0] = 2;
        m.n_eos = 1;
    } else
        TDM_TRY(add_ids(&c, CFG, "eos_token_id", je, m.eos_token_ids, cap, &m.n_eos));
    if (gen)
        TDM_TRY(add_ids(&c, GEN, "eos_token_id", json_object_get(gen, "eos_token_id"),
                        m.eos_token_ids, cap, &m.n_eos));
    for (uint32_t i = m.n_eos; i < cap; i++)
        m.eos_token_ids[i] = -1;

    *ret_cfg = m;
    return TDM_OK;
}
