/*
 * oneshot.c — the one-shot CLI of docs/contracts.md §f: load a checkpoint, tokenize (or take ids
 * verbatim), prefill, sample up to --max-tokens tokens on the CPU engine and print one JSON line
 * `{"ids":[..],"text":"..","steps":[{"id","logprob","top":[[id,logprob],..]}]}` last on stdout.
 *
 * Choices: the one-shot is the reference path, so KV "auto" means f32 here (a single prompt's
 * cache is small, and the transformers goldens keep K/V in fp32); bf16/fp8_e4m3 are honoured when
 * asked. It always runs on the CPU backend, as one rank (--tp-size 1): an explicit --device cuda
 * is refused (exit 2), the worker's default device is not consulted. Generation stops at an EOS
 * id of the model (unless --ignore-eos; the EOS id is part of `ids`), at --stop's string (the
 * string and what follows are not part of `text`) or after --max-tokens. `text` is the decode
 * of the generated ids without special tokens. Logprobs are the raw distribution's
 * (include/tdm/sample.h). Progress goes to stderr; exit 2 for bad flags, ids or paths.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/model.h>
#include <tdm/sample.h>
#include <tdm/time.h>
#include <tdm/tokenizer.h>

#include "oneshot.h"
#include "oneshot_engine.h"

/* clang-format off */
#define ONESHOT_PARAMS(P) \
    P(temperature, "TDM_ONESHOT_TEMPERATURE", "--temperature", DOUBLE, "0", "0..", "Sampling temperature (0 = greedy)") \
    P(top_k, "TDM_ONESHOT_TOP_K", "--top-k", INT64, "0", "-1..2147483647", "Sample among the k most likely tokens (<= 0 = all)") \
    P(top_p, "TDM_ONESHOT_TOP_P", "--top-p", DOUBLE, "1", "0..1", "Nucleus: smallest set with probability mass >= p, in (0, 1]") \
    P(min_p, "TDM_ONESHOT_MIN_P", "--min-p", DOUBLE, "0", "0..1", "Drop tokens below min_p times the top probability") \
    P(repetition_penalty, "TDM_ONESHOT_REPETITION_PENALTY", "--repetition-penalty", DOUBLE, "1", "0..", "HF repetition penalty over prompt + output (> 0)") \
    P(presence_penalty, "TDM_ONESHOT_PRESENCE_PENALTY", "--presence-penalty", DOUBLE, "0", "-2..2", "OpenAI presence penalty over output tokens") \
    P(frequency_penalty, "TDM_ONESHOT_FREQUENCY_PENALTY", "--frequency-penalty", DOUBLE, "0", "-2..2", "OpenAI frequency penalty over output tokens") \
    P(seed, "TDM_ONESHOT_SEED", "--seed", INT64, "0", "0..", "Sampling seed; token i draws from (seed, i)") \
    P(top_logprobs, "TDM_ONESHOT_TOP_LOGPROBS", "--top-logprobs", INT64, "0", "0..20", "Report the N most likely tokens of each step") \
    P(stop, "TDM_ONESHOT_STOP", "--stop", STRING, "", "", "Stop string: generation ends there, the text excludes it")
/* clang-format on */

TDM_PARAMS_STRUCT(oneshot_req, ONESHOT_PARAMS);
TDM_PARAMS_DEFS(oneshot_req, ONESHOT_PARAMS);

static const tdm_param_table_t oneshot_req_table = {
    "tandem-worker (one-shot request)",
    "oneshot",
    oneshot_req_defs,
    TDM_PARAMS_COUNT(oneshot_req_defs),
    NULL,
    0,
    sizeof(oneshot_req_t),
};

#define PROGRESS(...) fprintf(stderr, "tandem-worker: " __VA_ARGS__)

static int is_req_flag(const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    for (size_t i = 0; i < TDM_PARAMS_COUNT(oneshot_req_defs); i++)
        if (strlen(oneshot_req_defs[i].flag) == n && !strncmp(arg, oneshot_req_defs[i].flag, n))
            return eq ? 1 : 2; /* 2: the value is the next argument */
    return 0;
}

void tdm_oneshot_split_argv(int argc, char **argv, int *w_argc, char **w_argv, int *r_argc,
                            char **r_argv)
{
    int w = 0, r = 0;
    if (argc > 0) {
        w_argv[w++] = argv[0];
        r_argv[r++] = argv[0];
    }
    for (int a = 1; a < argc; a++) {
        int kind = strncmp(argv[a], "--", 2) == 0 ? is_req_flag(argv[a]) : 0;
        if (!kind) {
            w_argv[w++] = argv[a];
            continue;
        }
        r_argv[r++] = argv[a];
        /* a missing value is left for the request parser to report */
        if (kind == 2 && a + 1 < argc && strncmp(argv[a + 1], "--", 2) != 0)
            r_argv[r++] = argv[++a];
    }
    w_argv[w] = NULL;
    r_argv[r] = NULL;
    *w_argc = w;
    *r_argc = r;
}

int tdm_oneshot_wanted(const tdm_worker_config_t *cfg)
{
    return cfg->prompt[0] != '\0' || cfg->prompt_ids[0] != '\0';
}

void tdm_oneshot_usage(FILE *out)
{
    fprintf(out, "\nOne-shot mode: tandem-worker --model-path DIR (--prompt TEXT | --prompt-ids "
                 "1,2,3) --max-tokens N [--ignore-eos] [--json] [request options]\n\n");
    tdm_params_usage(&oneshot_req_table, out);
}

/* "1,2, 3" → ids; every id below `vocab`. */
static tdm_status_t parse_ids(const char *s, uint32_t vocab, int32_t **ret_ids, size_t *ret_n,
                              char *err, size_t err_len)
{
    size_t cap = 1, n = 0;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *ids = tdm_calloc(cap, sizeof(int32_t));
    const char *p = s;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p < '0' || *p > '9') {
            snprintf(err, err_len, "--prompt-ids: expected a token id at offset %zu of \"%.64s\"",
                     (size_t)(p - s), s);
            goto err_free;
        }
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno || v >= vocab) {
            snprintf(err, err_len, "--prompt-ids: id %.*s is outside the vocabulary [0, %u)",
                     (int)(end - p > 24 ? 24 : end - p), p, vocab);
            goto err_free;
        }
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',') {
            snprintf(err, err_len, "--prompt-ids: unexpected '%c' at offset %zu", *p,
                     (size_t)(p - s));
            goto err_free;
        }
        p++;
    }
    *ret_ids = ids;
    *ret_n = n;
    return TDM_OK;
err_free:
    tdm_free(ids);
    return TDM_ERR_INVAL;
}

static tdm_status_t sample_params_from(const oneshot_req_t *q, tdm_sample_params_t *ret, char *err,
                                       size_t err_len)
{
    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    p.temperature = (float)q->temperature;
    p.top_k = q->top_k > 0 ? (int32_t)q->top_k : 0;
    p.top_p = (float)q->top_p;
    p.min_p = (float)q->min_p;
    p.repetition_penalty = (float)q->repetition_penalty;
    p.presence_penalty = (float)q->presence_penalty;
    p.frequency_penalty = (float)q->frequency_penalty;
    p.seed = (uint64_t)q->seed;
    p.logprobs = 1;
    p.top_logprobs = (uint32_t)q->top_logprobs;
    TDM_TRY(tdm_sample_params_validate(&p, err, err_len));
    *ret = p;
    return TDM_OK;
}

/* The output text: decode(generated ids, skip_special_tokens) as HF does, replacing the previous
 * text. Ids beyond the tokenizer (padded vocabularies) decode to nothing. A one-shot run re-decodes
 * after each token only when a stop string must be watched; O(n^2) bytes, fine at CLI sizes. */
typedef struct text_buf {
    char *s;
    size_t len;
} text_buf_t;

static tdm_status_t decode_text(const tdm_tok_t *tok, const int32_t *ids, size_t n, text_buf_t *ret)
{
    uint32_t *u = tdm_calloc(n ? n : 1, sizeof(uint32_t));
    for (size_t i = 0; i < n; i++)
        u[i] = (uint32_t)ids[i];
    char *s = NULL;
    size_t len = 0;
    tdm_status_t st = tdm_tok_decode(tok, u, n, 1, &s, &len);
    tdm_free(u);
    if (st != TDM_OK)
        return st;
    tdm_free(ret->s);
    ret->s = s;
    ret->len = len;
    return TDM_OK;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c < 0x80             ? 1
                 : (c & 0xe0) == 0xc0 ? 2
                 : (c & 0xf0) == 0xe0 ? 3
                 : (c & 0xf8) == 0xf0 ? 4
                                      : 0;
    if (len == 0 || len > n || (len == 2 && c < 0xc2) || (len == 4 && c > 0xf4))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (len == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0)))
        return 0; /* overlong, surrogate */
    if (len == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90)))
        return 0; /* overlong, beyond U+10FFFF */
    return len;
}

/* JSON strings must be UTF-8: each byte that does not start a valid sequence becomes U+FFFD
 * (the tokenizer already does this; this keeps the output line valid whatever reaches it). */
static json_t *json_text(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    char *buf = tdm_malloc(len * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq(s + i, len - i);
        if (k) {
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    json_t *j = json_stringn(buf, o);
    tdm_free(buf);
    return j;
}

static json_t *result_json(const int32_t *ids, size_t n, const char *text, size_t text_len,
                           const tdm_sample_result_t *steps)
{
    json_t *root = json_object(), *jids = json_array(), *jsteps = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(jids, json_integer(ids[i]));
        json_t *st = json_object(), *top = json_array();
        json_object_set_new(st, "id", json_integer(steps[i].id));
        json_object_set_new(st, "logprob", json_real(steps[i].logprob));
        for (uint32_t k = 0; k < steps[i].n_top; k++) {
            json_t *pair = json_array();
            json_array_append_new(pair, json_integer(steps[i].top_ids[k]));
            json_array_append_new(pair, json_real(steps[i].top_logprobs[k]));
            json_array_append_new(top, pair);
        }
        json_object_set_new(st, "top", top);
        json_array_append_new(jsteps, st);
    }
    json_object_set_new(root, "ids", jids);
    json_object_set_new(root, "text", json_text(text, text_len));
    json_object_set_new(root, "steps", jsteps);
    return root;
}

int tdm_oneshot_main(const tdm_worker_config_t *cfg, int device_given, int r_argc, char **r_argv)
{
    char err[512] = "", path[4096];
    int rc = 2;
    oneshot_req_t req;
    tdm_params_t *rp = NULL;
    tdm_sample_params_t sp;
    tdm_sample_stop_t stop;
    tdm_model_t *model = NULL;
    tdm_tok_t *tok = NULL;
    tdm_oneshot_engine_t *eng = NULL;
    tdm_sample_scratch_t scratch = {0};
    int32_t *prompt = NULL, *gen = NULL;
    tdm_sample_result_t *steps = NULL;
    size_t n_prompt = 0, n_gen = 0, emitted = 0;
    text_buf_t text = {0};
    tdm_status_t st;

    /* ---- usage: everything checkable before loading anything ---- */
    if (tdm_params_init(&oneshot_req_table, &req, &rp, err, sizeof(err)) != TDM_OK ||
        tdm_params_apply_argv(rp, r_argc, r_argv, err, sizeof(err)) != TDM_OK ||
        sample_params_from(&req, &sp, err, sizeof(err)) != TDM_OK)
        goto usage;
    const char *stops[1] = {req.stop};
    if (tdm_sample_stop_init(&stop, stops, req.stop[0] ? 1 : 0, err, sizeof(err)) != TDM_OK)
        goto usage;
    if (!tdm_oneshot_wanted(cfg)) {
        snprintf(err, sizeof(err), "request options need --prompt TEXT or --prompt-ids 1,2,3");
        goto usage;
    }
    if (cfg->prompt[0] && cfg->prompt_ids[0]) {
        snprintf(err, sizeof(err), "give --prompt or --prompt-ids, not both");
        goto usage;
    }
    if (!cfg->model_path[0]) {
        snprintf(err, sizeof(err), "--model-path DIR is required");
        goto usage;
    }
    if (device_given && strcmp(cfg->device, "cpu") != 0) {
        snprintf(err, sizeof(err),
                 "one-shot mode runs on the CPU engine only: --device %s is not supported here "
                 "(pass --device cpu, or serve the model with the worker for CUDA)",
                 cfg->device);
        goto usage;
    }
    if (cfg->tp_size != 1) {
        snprintf(err, sizeof(err),
                 "one-shot mode runs one rank: --tp-size must be 1 (got %" PRId64 ")",
                 cfg->tp_size);
        goto usage;
    }
    tdm_dtype_t kv_dtype = TDM_DTYPE_F32;
    if (strcmp(cfg->kv_cache_dtype, "auto") != 0 &&
        tdm_dtype_parse(cfg->kv_cache_dtype, &kv_dtype) != TDM_OK) {
        snprintf(err, sizeof(err), "--kv-cache-dtype %s is not known", cfg->kv_cache_dtype);
        goto usage;
    }

    /* ---- load ---- */
    uint64_t t0 = tdm_time_mono_us();
    PROGRESS("loading %s\n", cfg->model_path);
    st = tdm_model_load(cfg->model_path, &model, err, sizeof(err));
    if (st != TDM_OK) {
        PROGRESS("cannot load model from %s: %s (%s)\n", cfg->model_path, err, tdm_status_name(st));
        rc = 2;
        goto out;
    }
    const tdm_model_config_t *mc = tdm_model_config(model);
    snprintf(path, sizeof(path), "%s/tokenizer.json", cfg->model_path);
    st = tdm_tok_load(path, &tok, err, sizeof(err));
    if (st != TDM_OK) {
        PROGRESS("cannot load tokenizer %s: %s (%s)\n", path, err, tdm_status_name(st));
        rc = 2;
        goto out;
    }
    if (cfg->prompt_ids[0]) {
        if (parse_ids(cfg->prompt_ids, mc->vocab_size, &prompt, &n_prompt, err, sizeof(err)) !=
            TDM_OK)
            goto usage;
    } else {
        uint32_t *ids = NULL;
        size_t n = 0;
        st = tdm_tok_encode(tok, cfg->prompt, strlen(cfg->prompt), 1, &ids, &n);
        if (st != TDM_OK) {
            snprintf(err, sizeof(err), "--prompt cannot be tokenized (%s)", tdm_status_str(st));
            goto usage;
        }
        prompt = tdm_calloc(n ? n : 1, sizeof(int32_t));
        for (size_t i = 0; i < n; i++) {
            if (ids[i] >= mc->vocab_size) {
                tdm_free(ids);
                snprintf(err, sizeof(err),
                         "--prompt: token id %u is outside the model's "
                         "vocabulary [0, %u)",
                         ids[i], mc->vocab_size);
                goto usage;
            }
            prompt[i] = (int32_t)ids[i];
        }
        n_prompt = n;
        tdm_free(ids);
        if (n_prompt == 0) {
            snprintf(err, sizeof(err), "--prompt encodes to no tokens");
            goto usage;
        }
    }
    size_t max_tokens = (size_t)cfg->max_tokens;
    rc = 1;
    st = tdm_oneshot_engine_init(model, kv_dtype, (uint32_t)cfg->page_size, 1,
                                 n_prompt + max_tokens, 0, &eng, err, sizeof(err));
    if (st != TDM_OK) {
        PROGRESS("cannot start the CPU engine: %s (%s)\n", err, tdm_status_name(st));
        goto out;
    }
    PROGRESS("loaded %s: %u layers, hidden %u, vocab %u, %.1f MiB of weights, %u threads, "
             "in %.2f s\n",
             mc->arch == TDM_ARCH_QWEN3   ? "Qwen3ForCausalLM"
             : mc->arch == TDM_ARCH_QWEN2 ? "Qwen2ForCausalLM"
                                          : "LlamaForCausalLM",
             mc->num_layers, mc->hidden_size, mc->vocab_size,
             (double)tdm_oneshot_engine_weight_bytes(eng) / (1 << 20),
             tdm_oneshot_engine_threads(eng), (double)(tdm_time_mono_us() - t0) / 1e6);

    /* ---- generate ---- */
    if (tdm_sample_scratch_init(&scratch, mc->vocab_size) != TDM_OK) {
        PROGRESS("out of memory for the sampler\n");
        goto out;
    }
    gen = tdm_calloc(max_tokens, sizeof(int32_t));
    steps = tdm_calloc(max_tokens, sizeof(tdm_sample_result_t));
    const float *logits = NULL;
    t0 = tdm_time_mono_us();
    st = tdm_oneshot_engine_prefill(eng, 0, prompt, (uint32_t)n_prompt, &logits);
    if (st != TDM_OK) {
        PROGRESS("prefill failed: %s\n", tdm_status_str(st));
        goto out;
    }
    uint64_t t_prefill = tdm_time_mono_us() - t0;
    int done = 0;
    while (!done && n_gen < max_tokens) {
        tdm_sample_history_t h = {prompt, n_prompt, gen, n_gen};
        st = tdm_sample_token(&sp, logits, mc->vocab_size, &h, n_gen, &scratch, &steps[n_gen]);
        if (st != TDM_OK) {
            PROGRESS("sampling step %zu failed: %s (non-finite logits?)\n", n_gen,
                     tdm_status_str(st));
            goto out;
        }
        int32_t id = steps[n_gen].id;
        gen[n_gen++] = id;
        if (!cfg->ignore_eos && tdm_sample_is_stop_id(mc->eos_token_ids, mc->n_eos, id))
            done = 1;
        if (stop.n) {
            tdm_sample_stop_result_t sr;
            TDM_CHECK_GOTO(decode_text(tok, gen, n_gen, &text), st, err_decode);
            if (tdm_sample_stop_scan(&stop, text.s, text.len, emitted, &sr) == TDM_OK) {
                emitted = sr.emit;
                if (sr.kind == TDM_STOP_MATCHED) {
                    text.len = sr.emit;
                    text.s[text.len] = '\0';
                    done = 2;
                }
            }
        }
        if (!done && n_gen < max_tokens) {
            st = tdm_oneshot_engine_decode(eng, &id, 1, &logits);
            if (st != TDM_OK) {
                PROGRESS("decode step %zu failed: %s\n", n_gen, tdm_status_str(st));
                goto out;
            }
        }
    }
    if (done != 2)
        TDM_CHECK_GOTO(decode_text(tok, gen, n_gen, &text), st, err_decode);
    uint64_t t_total = tdm_time_mono_us() - t0;
    PROGRESS("prompt %zu tokens in %.3f s, generated %zu tokens in %.3f s\n", n_prompt,
             (double)t_prefill / 1e6, n_gen, (double)(t_total - t_prefill) / 1e6);

    if (cfg->json) {
        json_t *root = result_json(gen, n_gen, text.s, text.len, steps);
        char *line = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
        json_decref(root);
        if (!line) {
            PROGRESS("cannot encode the result as JSON\n");
            goto out;
        }
        printf("%s\n", line);
        free(line);
    } else {
        if (text.len)
            fwrite(text.s, 1, text.len, stdout);
        putchar('\n');
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
    goto out;

err_decode:
    PROGRESS("cannot decode the generated ids: %s\n", tdm_status_str(st));
    rc = 1;
    goto out;
usage:
    fprintf(stderr, "tandem-worker: %s\n", err);
    rc = 2;
out:
    tdm_sample_scratch_free(&scratch);
    tdm_oneshot_engine_free(eng);
    tdm_tok_free(tok);
    tdm_model_free(model);
    tdm_params_free(rp);
    tdm_free(prompt);
    tdm_free(gen);
    tdm_free(steps);
    tdm_free(text.s);
    return rc;
}
