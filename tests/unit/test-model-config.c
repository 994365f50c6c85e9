/*
 * test-model-config.c — config.json / generation_config.json → tdm_model_config_t: every supported
 * feature (GQA, head_dim override, tied embeddings, rope llama3/linear, dtypes, bos/eos forms),
 * transformers' defaults, and one clear error naming the field for each unsupported value.
 */
#include "config.h"

#include <string.h>

#include "model_int.h"
#include "tap.h"

#define LLAMA_BASE                                                                                 \
    "\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":128,"        \
    "\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"                         \
    "\"num_attention_heads\":8"

static tdm_status_t parse(const char *cfg, const char *gen, tdm_model_config_t *ret, char *err,
                          size_t err_len)
{
    json_error_t je;
    json_t *c = json_loads(cfg, 0, &je);
    json_t *g = gen ? json_loads(gen, 0, &je) : NULL;
    if (!c || (gen && !g)) {
        diag("test JSON does not parse: %s", je.text);
        return TDM_ERR_MAX_;
    }
    err[0] = '\0';
    tdm_status_t st = tdm_model_config_from_json(c, g, ret, err, err_len);
    json_decref(c);
    json_decref(g);
    return st;
}

static void expect_err(const char *cfg, const char *gen, tdm_status_t want, const char *needle,
                       const char *what)
{
    tdm_model_config_t c;
    char err[512];
    memset(&c, 0x5a, sizeof(c));
    tdm_status_t st = parse(cfg, gen, &c, err, sizeof(err));
    int untouched = 1;
    const unsigned char *p = (const unsigned char *)&c;
    for (size_t i = 0; i < sizeof(c); i++)
        untouched &= p[i] == 0x5a;
    if (!ok(st == want && strstr(err, needle) != NULL && untouched, "%s", what))
        diag("  status %s, err \"%s\", wanted %s containing \"%s\"%s", tdm_status_name(st), err,
             tdm_status_name(want), needle, untouched ? "" : " (output clobbered)");
}

static void llama_defaults(void)
{
    tdm_model_config_t c;
    char err[512];
    tdm_status_t st = parse("{" LLAMA_BASE "}", NULL, &c, err, sizeof(err));
    is_int(st, TDM_OK, "minimal Llama config parses (%s)", err);
    is_int(c.arch, TDM_ARCH_LLAMA, "arch llama");
    is_int(c.num_kv_heads, 8, "num_key_value_heads defaults to num_attention_heads");
    is_int(c.head_dim, 8, "head_dim = hidden / heads");
    ok(c.rms_norm_eps == 1e-6f && c.rope_theta == 10000.0f, "eps 1e-6, theta 10000 by default");
    is_int(c.max_position_embeddings, 2048, "Llama max_position_embeddings default 2048");
    ok(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2 && c.eos_token_ids[1] == -1,
       "LlamaConfig default bos 1 / eos 2, -1 padded");
    ok(!c.tie_word_embeddings && !c.attention_bias && c.rope_type == TDM_ROPE_DEFAULT,
       "untied, no bias, default rope");
    is_int(c.weight_dtype, TDM_DTYPE_MAX, "weight dtype left to the loader when absent");
}

static void llama3_full(void)
{
    tdm_model_config_t c;
    char err[512];
    tdm_status_t st = parse(
        "{" LLAMA_BASE ",\"num_key_value_heads\":2,\"head_dim\":16,\"rms_norm_eps\":1e-5,"
        "\"rope_theta\":500000.0,\"max_position_embeddings\":131072,\"tie_word_embeddings\":true,"
        "\"torch_dtype\":\"bfloat16\",\"bos_token_id\":128000,\"eos_token_id\":[128001,128009],"
        "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
        "\"attention_bias\":false,\"hidden_act\":\"silu\",\"mlp_bias\":false}",
        "{\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009]}", &c, err, sizeof(err));
    is_int(st, TDM_OK, "Llama 3.1-style config parses (%s)", err);
    ok(c.num_kv_heads == 2 && c.head_dim == 16, "GQA 8/2 with head_dim override 16");
    ok(c.rope_type == TDM_ROPE_LLAMA3 && c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f &&
           c.rope_high_freq_factor == 4.0f && c.rope_original_max_pos == 8192,
       "llama3 rope scaling fields");
    ok(c.rope_theta == 500000.0f && c.rms_norm_eps == 1e-5f, "theta and eps");
    ok(c.tie_word_embeddings == 1 && c.weight_dtype == TDM_DTYPE_BF16, "tied, bf16");
    ok(c.bos_token_id == 128000 && c.n_eos == 3 && c.eos_token_ids[0] == 128001 &&
           c.eos_token_ids[1] == 128009 && c.eos_token_ids[2] == 128008,
       "eos = union of config and generation_config, config's first");
}

static void qwen2(void)
{
    tdm_model_config_t c;
    char err[512];
    tdm_status_t st =
        parse("{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\","
              "\"vocab_size\":151936,\"hidden_size\":896,\"intermediate_size\":4864,"
              "\"num_hidden_layers\":24,\"num_attention_heads\":14,\"num_key_value_heads\":2,"
              "\"rope_theta\":1000000.0,\"rope_scaling\":null,\"use_sliding_window\":false,"
              "\"sliding_window\":32768,\"tie_word_embeddings\":true,\"dtype\":\"float16\","
              "\"eos_token_id\":151645,\"bos_token_id\":null}",
              "{\"bos_token_id\":151643,\"eos_token_id\":[151645,151643]}", &c, err, sizeof(err));
    is_int(st, TDM_OK, "Qwen2.5-0.5B-style config parses (%s)", err);
    ok(c.arch == TDM_ARCH_QWEN2 && c.attention_bias == 1, "Qwen2 always has q/k/v bias");
    ok(c.head_dim == 64 && c.num_kv_heads == 2, "head_dim 896/14 = 64, 2 KV heads");
    is_int(c.weight_dtype, TDM_DTYPE_F16, "\"dtype\" key (transformers 5) read");
    is_int(c.max_position_embeddings, 32768, "Qwen2 max_position_embeddings default 32768");
    ok(c.bos_token_id == 151643, "null bos in config.json falls back to generation_config");
    ok(c.n_eos == 2 && c.eos_token_ids[0] == 151645 && c.eos_token_ids[1] == 151643,
       "eos int + generation list, deduplicated");
}

static void rope_variants(void)
{
    tdm_model_config_t c;
    char err[512];
    tdm_status_t st = parse("{" LLAMA_BASE ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":4}}",
                            NULL, &c, err, sizeof(err));
    ok(st == TDM_OK && c.rope_type == TDM_ROPE_LINEAR && c.rope_factor == 4.0f,
       "linear rope via the older \"type\" key, integer factor");
    st = parse("{" LLAMA_BASE ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":"
               "250000.0}}",
               NULL, &c, err, sizeof(err));
    ok(st == TDM_OK && c.rope_type == TDM_ROPE_DEFAULT && c.rope_theta == 250000.0f,
       "transformers 5 rope_parameters: theta and type");
    st = parse("{" LLAMA_BASE ",\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2.0,"
               "\"rope_theta\":10000.0}}",
               NULL, &c, err, sizeof(err));
    ok(st == TDM_OK && c.rope_type == TDM_ROPE_LINEAR && c.rope_factor == 2.0f,
       "rope_parameters with linear scaling");
}

static void errors(void)
{
    expect_err("{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\"}", NULL,
               TDM_ERR_UNSUPPORTED, "architectures[0] \"GPT2LMHeadModel\" is not supported",
               "unknown architecture named");
    expect_err("{\"model_type\":\"mistral\",\"vocab_size\":1}", NULL, TDM_ERR_UNSUPPORTED,
               "model_type \"mistral\"", "unknown model_type named");
    expect_err("{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"qwen2\"}", NULL,
               TDM_ERR_FORMAT, "contradicts", "architectures vs model_type mismatch");
    expect_err("{}", NULL, TDM_ERR_FORMAT, "neither architectures nor model_type",
               "no architecture at all");
    expect_err("{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":8}", NULL, TDM_ERR_FORMAT,
               "missing hidden_size", "missing structural field named");
    expect_err("{" LLAMA_BASE ",\"num_key_value_heads\":3}", NULL, TDM_ERR_INVAL,
               "num_attention_heads 8 is not a multiple of num_key_value_heads 3", "bad GQA ratio");
    expect_err("{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":128,\"hidden_size\":64,"
               "\"intermediate_size\":96,\"num_hidden_layers\":0,\"num_attention_heads\":8}",
               NULL, TDM_ERR_RANGE, "num_hidden_layers 0", "zero layers");
    expect_err("{" LLAMA_BASE ",\"vocab_size\":\"big\"}", NULL, TDM_ERR_FORMAT,
               "vocab_size is not an integer", "mistyped field");
    expect_err("{" LLAMA_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}", NULL,
               TDM_ERR_UNSUPPORTED, "rope_scaling.rope_type \"yarn\" is not supported",
               "yarn rope named");
    expect_err("{" LLAMA_BASE ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}}", NULL,
               TDM_ERR_UNSUPPORTED, "rope_scaling.type \"dynamic\"", "dynamic rope named");
    expect_err("{" LLAMA_BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,"
               "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}}",
               NULL, TDM_ERR_FORMAT, "rope_scaling needs low_freq_factor",
               "llama3 rope without low_freq_factor");
    expect_err("{" LLAMA_BASE ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":-1}}", NULL,
               TDM_ERR_RANGE, "rope_scaling.factor -1 must be positive", "negative rope factor");
    expect_err("{" LLAMA_BASE ",\"torch_dtype\":\"int8\"}", NULL, TDM_ERR_UNSUPPORTED,
               "torch_dtype \"int8\" is not supported", "unsupported torch_dtype named");
    expect_err("{" LLAMA_BASE ",\"hidden_act\":\"gelu\"}", NULL, TDM_ERR_UNSUPPORTED,
               "hidden_act \"gelu\"", "other activation named");
    expect_err("{" LLAMA_BASE ",\"mlp_bias\":true}", NULL, TDM_ERR_UNSUPPORTED, "mlp_bias",
               "mlp_bias refused");
    expect_err("{" LLAMA_BASE ",\"quantization_config\":{\"quant_method\":\"gptq\"}}", NULL,
               TDM_ERR_UNSUPPORTED, "quant_method \"gptq\"", "quantized checkpoint refused");
    expect_err("{" LLAMA_BASE ",\"tie_word_embeddings\":\"yes\"}", NULL, TDM_ERR_FORMAT,
               "tie_word_embeddings is not a boolean", "mistyped boolean");
    expect_err("{" LLAMA_BASE ",\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", NULL, TDM_ERR_RANGE,
               "eos_token_id has more than 8", "too many eos ids");
    expect_err("{" LLAMA_BASE "}", "{\"eos_token_id\":\"x\"}", TDM_ERR_FORMAT,
               "generation_config.json: eos_token_id", "bad eos in generation_config named");
    expect_err("{" LLAMA_BASE ",\"head_dim\":7}", NULL, TDM_ERR_UNSUPPORTED, "head_dim 7 is odd",
               "odd head_dim");
    expect_err("[1]", NULL, TDM_ERR_FORMAT, "not a JSON object", "config not an object");
}

int main(void)
{
    llama_defaults();
    llama3_full();
    qwen2();
    rope_variants();
    errors();
    return done_testing();
}
