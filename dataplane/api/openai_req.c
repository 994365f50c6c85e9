/*
 * openai_req.c — OpenAI request bodies → scheduler inputs (openai_int.h has the contract).
 *
 * Everything a client sends is checked here, once, with an error naming the parameter; the
 * handler only submits what comes out. Fields are read through small getters that treat JSON null
 * as absent (clients send null for "not given"), read strings with their length, and refuse an
 * embedded NUL. Chat messages are rendered by the model's template (tdm/chat.h) and tokenized
 * without adding specials (the template writes BOS itself); a completions string prompt gets the
 * tokenizer's specials as transformers would add them; token-id prompts are used verbatim.
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/api/openai_int.h"

static const char *const kind_names[] = {"completions", "chat"};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == TDM_OAI_KIND_MAX, "kind names");

const char *tdm_oai_kind_name(tdm_oai_kind_t k)
{
    return (unsigned)k < TDM_OAI_KIND_MAX ? kind_names[k] : "?";
}

static tdm_status_t fail(tdm_oai_err_t *e, int http, const char *code, const char *param,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static tdm_status_t fail(tdm_oai_err_t *e, int http, const char *code, const char *param,
                         const char *fmt, ...)
{
    e->http = http;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return http == 404 ? TDM_ERR_NOTFOUND : TDM_ERR_INVAL;
}

#define BAD(param, ...) fail(e, 400, "invalid_request", param, __VA_ARGS__)
#define UNSUPPORTED(param, ...) fail(e, 400, "unsupported_parameter", param, __VA_ARGS__)

/* The member, or NULL when absent or null. */
static json_t *get(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static tdm_status_t get_number(const json_t *o, const char *key, double lo, double hi, float *ret,
                               tdm_oai_err_t *e)
{
    json_t *v = get(o, key);
    if (!v)
        return TDM_OK;
    double d = json_number_value(v);
    if (!json_is_number(v) || !(d >= lo && d <= hi))
        return BAD(key, "%s: expected a number in [%g, %g]", key, lo, hi);
    *ret = (float)d;
    return TDM_OK;
}

/* 1 if present (and *ret set), 0 if absent. */
static tdm_status_t get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *ret,
                            int *present, tdm_oai_err_t *e)
{
    json_t *v = get(o, key);
    *present = 0;
    if (!v)
        return TDM_OK;
    /* 16.0 is an integer to JavaScript clients */
    double d = json_is_real(v) ? json_real_value(v) : 0;
    if (json_is_real(v) && d == floor(d) && d >= -9e15 && d <= 9e15)
        *ret = (int64_t)d;
    else if (json_is_integer(v))
        *ret = json_integer_value(v);
    else
        return BAD(key, "%s: expected an integer", key);
    if (*ret < lo || *ret > hi)
        return BAD(key, "%s: %lld is outside [%lld, %lld]", key, (long long)*ret, (long long)lo,
                   (long long)hi);
    *present = 1;
    return TDM_OK;
}

static tdm_status_t get_bool(const json_t *o, const char *key, int *ret, tdm_oai_err_t *e)
{
    json_t *v = get(o, key);
    if (!v)
        return TDM_OK;
    if (!json_is_boolean(v))
        return BAD(key, "%s: expected a boolean", key);
    *ret = json_is_true(v);
    return TDM_OK;
}

/* A string read with its length; NUL bytes refused. */
static tdm_status_t str_of(const json_t *v, const char *param, const char *what, const char **ret,
                           size_t *ret_len, tdm_oai_err_t *e)
{
    if (!json_is_string(v))
        return BAD(param, "%s: expected a string", what);
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n > TDM_OAI_MAX_STRING)
        return BAD(param, "%s: longer than %zu bytes", what, TDM_OAI_MAX_STRING);
    if (memchr(s, '\0', n))
        return BAD(param, "%s: contains a NUL byte", what);
    *ret = s;
    *ret_len = n;
    return TDM_OK;
}

/* Every string (keys included) under v: no NUL bytes. Depth is bounded by jansson's parser. */
static tdm_status_t check_strings(const json_t *v, const char *param, char *path, size_t cap,
                                  tdm_oai_err_t *e)
{
    size_t len = strlen(path), i;
    const char *k;
    json_t *x;
    tdm_status_t st = TDM_OK;
    if (json_is_string(v)) {
        if (memchr(json_string_value(v), '\0', json_string_length(v)))
            return BAD(param, "%s: contains a NUL byte", path);
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x)
        {
            snprintf(path + len, cap - len, "[%zu]", i);
            if ((st = check_strings(x, param, path, cap, e)) != TDM_OK)
                return st;
        }
    } else if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, x)
        {
            snprintf(path + len, cap - len, ".%s", k);
            if ((st = check_strings(x, param, path, cap, e)) != TDM_OK)
                return st;
        }
    }
    path[len] = '\0';
    return st;
}

/* ---- parameters common to both endpoints ---------------------------------------------------- */

static tdm_status_t parse_unsupported(const json_t *o, tdm_oai_kind_t kind, tdm_oai_err_t *e)
{
    json_t *v;
    int64_t n;
    int present;
    TDM_TRY(get_int(o, "n", INT64_MIN, INT64_MAX, &n, &present, e));
    if (present && n != 1)
        return UNSUPPORTED("n", "n: only n=1 is supported (got %lld)", (long long)n);
    TDM_TRY(get_int(o, "best_of", INT64_MIN, INT64_MAX, &n, &present, e));
    if (present && n != 1)
        return UNSUPPORTED("best_of", "best_of: only 1 is supported (got %lld)", (long long)n);
    if ((v = get(o, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        return UNSUPPORTED("logit_bias", "logit_bias: not supported");
    if ((v = get(o, "echo")) && !json_is_false(v))
        return UNSUPPORTED("echo", "echo: not supported");
    if ((v = get(o, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
        return UNSUPPORTED("suffix", "suffix: not supported");
    if ((v = get(o, "functions")) || (v = get(o, "function_call")))
        return UNSUPPORTED("functions", "functions/function_call: use tools and tool_choice");
    if ((v = get(o, "response_format"))) {
        json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
            return UNSUPPORTED("response_format",
                               "response_format: only {\"type\":\"text\"} is supported");
    }
    if (kind == TDM_OAI_CHAT && (v = get(o, "audio")))
        return UNSUPPORTED("audio", "audio: not supported");
    if (kind == TDM_OAI_CHAT && (v = get(o, "modalities"))) {
        if (!json_is_array(v) || json_array_size(v) != 1 || !json_is_string(json_array_get(v, 0)) ||
            strcmp(json_string_value(json_array_get(v, 0)), "text") != 0)
            return UNSUPPORTED("modalities", "modalities: only [\"text\"] is supported");
    }
    return TDM_OK;
}

static tdm_status_t parse_sampling(const tdm_oai_ctx_t *c, const json_t *o, tdm_oai_req_t *r,
                                   tdm_oai_err_t *e)
{
    int64_t v;
    int present;
    tdm_sample_params_default(&r->sp);
    r->sp.temperature = 1.0f; /* OpenAI's default */
    TDM_TRY(get_number(o, "temperature", 0, 2, &r->sp.temperature, e));
    TDM_TRY(get_number(o, "top_p", 0, 1, &r->sp.top_p, e));
    if (!(r->sp.top_p > 0))
        return BAD("top_p", "top_p: must be greater than 0");
    TDM_TRY(get_number(o, "min_p", 0, 1, &r->sp.min_p, e));
    TDM_TRY(get_number(o, "presence_penalty", -2, 2, &r->sp.presence_penalty, e));
    TDM_TRY(get_number(o, "frequency_penalty", -2, 2, &r->sp.frequency_penalty, e));
    TDM_TRY(get_number(o, "repetition_penalty", 1e-3, 100, &r->sp.repetition_penalty, e));
    TDM_TRY(get_int(o, "top_k", -1, c->vocab ? c->vocab : INT32_MAX, &v, &present, e));
    if (present)
        r->sp.top_k = v == 0 ? -1 : (int32_t)v;
    TDM_TRY(get_int(o, "seed", INT64_MIN, INT64_MAX, &v, &present, e));
    if (present) {
        r->sp.seed = (uint64_t)v;
    } else if (getrandom(&r->sp.seed, sizeof(r->sp.seed), 0) != (ssize_t)sizeof(r->sp.seed)) {
        r->sp.seed = tdm_time_mono_ns();
    }
    TDM_TRY(get_bool(o, "ignore_eos", &r->ignore_eos, e));
    r->skip_special = 1;
    TDM_TRY(get_bool(o, "skip_special_tokens", &r->skip_special, e));
    return TDM_OK;
}

static tdm_status_t parse_stop(const json_t *o, tdm_oai_req_t *r, tdm_oai_err_t *e)
{
    json_t *v = get(o, "stop"), *x;
    const char *s;
    size_t n, i;
    char what[32];
    if (!v)
        return TDM_OK;
    if (json_is_string(v)) {
        TDM_TRY(str_of(v, "stop", "stop", &s, &n, e));
        if (n == 0)
            return BAD("stop", "stop: must not be empty");
        if (n > TDM_SAMPLE_MAX_STOP_LEN)
            return BAD("stop", "stop: longer than %d bytes", TDM_SAMPLE_MAX_STOP_LEN);
        r->stop[r->n_stop++] = tdm_strndup(s, n);
        return TDM_OK;
    }
    if (!json_is_array(v))
        return BAD("stop", "stop: expected a string or an array of strings");
    if (json_array_size(v) > TDM_SAMPLE_MAX_STOP)
        return BAD("stop", "stop: at most %d strings", TDM_SAMPLE_MAX_STOP);
    json_array_foreach(v, i, x)
    {
        snprintf(what, sizeof(what), "stop[%zu]", i);
        TDM_TRY(str_of(x, "stop", what, &s, &n, e));
        if (n == 0)
            return BAD("stop", "%s: must not be empty", what);
        if (n > TDM_SAMPLE_MAX_STOP_LEN)
            return BAD("stop", "%s: longer than %d bytes", what, TDM_SAMPLE_MAX_STOP_LEN);
        r->stop[r->n_stop++] = tdm_strndup(s, n);
    }
    return TDM_OK;
}

static tdm_status_t parse_stream(const json_t *o, tdm_oai_req_t *r, tdm_oai_err_t *e)
{
    TDM_TRY(get_bool(o, "stream", &r->stream, e));
    json_t *so = get(o, "stream_options");
    if (!so)
        return TDM_OK;
    if (!json_is_object(so))
        return BAD("stream_options", "stream_options: expected an object");
    if (!r->stream)
        return BAD("stream_options", "stream_options: only allowed when stream is true");
    json_t *iu = get(so, "include_usage");
    if (iu && !json_is_boolean(iu))
        return BAD("stream_options", "stream_options.include_usage: expected a boolean");
    r->include_usage = json_is_true(iu);
    return TDM_OK;
}

static tdm_status_t parse_logprobs(const json_t *o, tdm_oai_req_t *r, tdm_oai_err_t *e)
{
    int64_t v;
    int present;
    if (r->kind == TDM_OAI_CHAT) {
        TDM_TRY(get_bool(o, "logprobs", &r->logprobs, e));
        TDM_TRY(get_int(o, "top_logprobs", 0, TDM_SAMPLE_MAX_TOP_LOGPROBS, &v, &present, e));
        if (present && !r->logprobs)
            return BAD("top_logprobs", "top_logprobs: requires logprobs to be true");
        r->top_logprobs = present ? (uint32_t)v : 0;
    } else {
        TDM_TRY(get_int(o, "logprobs", 0, TDM_SAMPLE_MAX_TOP_LOGPROBS, &v, &present, e));
        r->logprobs = present;
        r->top_logprobs = present ? (uint32_t)v : 0;
    }
    r->sp.logprobs = r->logprobs;
    r->sp.top_logprobs = r->top_logprobs;
    return TDM_OK;
}

/* ---- prompts -------------------------------------------------------------------------------- */

static tdm_status_t encode(const tdm_oai_ctx_t *c, const char *param, const char *text, size_t len,
                           int add_special, tdm_oai_req_t *r, tdm_oai_err_t *e)
{
    uint32_t *ids = NULL;
    size_t n = 0;
    tdm_status_t st = tdm_tok_encode(c->tok, text, len, add_special, &ids, &n);
    if (st != TDM_OK)
        return BAD(param, "%s: cannot be tokenized (%s)", param,
                   st == TDM_ERR_OVERFLOW ? "too long" : "not valid UTF-8");
    if (n > TDM_OAI_MAX_PROMPT_IDS) {
        tdm_free(ids);
        return BAD(param, "%s: more than %u tokens", param, TDM_OAI_MAX_PROMPT_IDS);
    }
    /* uint32 ids below the vocabulary size (< 2^24) are valid int32 */
    r->prompt = (int32_t *)ids;
    r->n_prompt = (uint32_t)n;
    return TDM_OK;
}

static tdm_status_t parse_ids(const tdm_oai_ctx_t *c, const json_t *arr, tdm_oai_req_t *r,
                              tdm_oai_err_t *e)
{
    size_t i, n = json_array_size(arr);
    json_t *x;
    if (n > TDM_OAI_MAX_PROMPT_IDS)
        return BAD("prompt", "prompt: more than %u token ids", TDM_OAI_MAX_PROMPT_IDS);
    int32_t *ids = tdm_malloc((n ? n : 1) * sizeof(*ids));
    json_array_foreach(arr, i, x)
    {
        json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
        if (v < 0 || (c->vocab && v >= (json_int_t)c->vocab)) {
            tdm_free(ids);
            return BAD("prompt", "prompt[%zu]: expected a token id in [0, %u)", i, c->vocab);
        }
        ids[i] = (int32_t)v;
    }
    r->prompt = ids;
    r->n_prompt = (uint32_t)n;
    return TDM_OK;
}

static tdm_status_t parse_prompt(const tdm_oai_ctx_t *c, const json_t *o, tdm_oai_req_t *r,
                                 tdm_oai_err_t *e)
{
    json_t *p = get(o, "prompt");
    const char *s;
    size_t n;
    if (!p)
        return BAD("prompt", "prompt: required");
    if (json_is_array(p) && json_array_size(p) > 0 && !json_is_integer(json_array_get(p, 0))) {
        /* a batch: [string] or [[ids]] */
        if (json_array_size(p) > 1)
            return UNSUPPORTED("prompt", "prompt: batches of more than one prompt are not "
                                         "supported; send one request per prompt");
        p = json_array_get(p, 0);
        if (json_is_array(p) && json_array_size(p) > 0 && !json_is_integer(json_array_get(p, 0)))
            return BAD("prompt", "prompt[0]: expected a string or an array of token ids");
    }
    if (json_is_string(p)) {
        TDM_TRY(str_of(p, "prompt", "prompt", &s, &n, e));
        TDM_TRY(encode(c, "prompt", s, n, 1, r, e));
    } else if (json_is_array(p)) {
        TDM_TRY(parse_ids(c, p, r, e));
    } else {
        return BAD("prompt", "prompt: expected a string or an array of token ids");
    }
    if (r->n_prompt == 0)
        return BAD("prompt", "prompt: must not be empty");
    return TDM_OK;
}

/* ---- chat: tools, messages ------------------------------------------------------------------ */

static tdm_status_t parse_tools(const tdm_oai_ctx_t *c, const json_t *o, tdm_oai_req_t *r,
                                const json_t **ret_render, char **ret_named, tdm_oai_err_t *e)
{
    json_t *tools = get(o, "tools"), *tc = get(o, "tool_choice"), *x;
    size_t i;
    const char *s;
    size_t n;
    char what[64];
    if (tools && (!json_is_array(tools) || json_array_size(tools) > TDM_OAI_MAX_TOOLS))
        return BAD("tools", "tools: expected an array of at most %d tools", TDM_OAI_MAX_TOOLS);
    if (tools && json_array_size(tools) == 0)
        tools = NULL;
    json_array_foreach(tools, i, x)
    {
        json_t *fn = json_is_object(x) ? json_object_get(x, "function") : NULL;
        json_t *ty = json_is_object(x) ? json_object_get(x, "type") : NULL;
        snprintf(what, sizeof(what), "tools[%zu]", i);
        if (!json_is_object(fn) ||
            (ty && !(json_is_string(ty) && strcmp(json_string_value(ty), "function") == 0)))
            return BAD("tools", "%s: expected {\"type\":\"function\",\"function\":{...}}", what);
        snprintf(what, sizeof(what), "tools[%zu].function.name", i);
        TDM_TRY(str_of(json_object_get(fn, "name"), "tools", what, &s, &n, e));
        if (n == 0 || n > TDM_DSML_MAX_NAME || strpbrk(s, "\"<>"))
            return BAD("tools", "%s: 1..%d bytes without '\"', '<', '>'", what, TDM_DSML_MAX_NAME);
        json_t *params = json_object_get(fn, "parameters");
        if (params && !json_is_object(params) && !json_is_null(params)) {
            snprintf(what, sizeof(what), "tools[%zu].function.parameters", i);
            return BAD("tools", "%s: expected a JSON schema object", what);
        }
    }
    r->tool_choice = tools ? TDM_OAI_TOOLS_AUTO : TDM_OAI_TOOLS_NONE;
    if (tc) {
        if (json_is_string(tc)) {
            s = json_string_value(tc);
            if (strcmp(s, "auto") == 0)
                r->tool_choice = tools ? TDM_OAI_TOOLS_AUTO : TDM_OAI_TOOLS_NONE;
            else if (strcmp(s, "none") == 0)
                r->tool_choice = TDM_OAI_TOOLS_NONE;
            else if (strcmp(s, "required") == 0)
                r->tool_choice = TDM_OAI_TOOLS_REQUIRED;
            else
                return BAD("tool_choice",
                           "tool_choice: expected \"auto\", \"none\", \"required\" or "
                           "{\"type\":\"function\",\"function\":{\"name\":...}}");
        } else if (json_is_object(tc)) {
            json_t *fn = json_object_get(tc, "function");
            TDM_TRY(str_of(json_is_object(fn) ? json_object_get(fn, "name") : NULL, "tool_choice",
                           "tool_choice.function.name", &s, &n, e));
            r->tool_choice = TDM_OAI_TOOLS_NAMED;
            *ret_named = tdm_strndup(s, n);
        } else {
            return BAD("tool_choice", "tool_choice: expected a string or an object");
        }
        if (r->tool_choice >= TDM_OAI_TOOLS_REQUIRED && !tools)
            return BAD("tool_choice", "tool_choice: %s needs tools",
                       r->tool_choice == TDM_OAI_TOOLS_NAMED ? "a named function" : "required");
    }
    if (tools && r->tool_choice != TDM_OAI_TOOLS_NONE &&
        (!tdm_chat_renders_tools(c->chat) || c->tool_parser == TDM_TC_NONE))
        return UNSUPPORTED("tools",
                           !tdm_chat_renders_tools(c->chat)
                               ? "tools: this model's chat template does not render tools; "
                                 "send the request without tools or with tool_choice \"none\""
                               : "tools: no tool-call format is known for this model's chat "
                                 "template; start the worker with --tool-call-parser, or send "
                                 "tool_choice \"none\"");
    if (r->tool_choice == TDM_OAI_TOOLS_NAMED) {
        json_t *one = NULL;
        json_array_foreach(tools, i, x)
        {
            json_t *nm = json_object_get(json_object_get(x, "function"), "name");
            if (strcmp(json_string_value(nm), *ret_named) == 0)
                one = x;
        }
        if (!one)
            return BAD("tool_choice", "tool_choice: function '%s' is not among the tools",
                       *ret_named);
        r->tools = json_pack("[O]", one);
    } else if (tools && r->tool_choice != TDM_OAI_TOOLS_NONE) {
        r->tools = json_incref(tools);
    }
    *ret_render = tdm_chat_renders_tools(c->chat) ? tools : NULL;
    r->tool_parser = tdm_chat_renders_tools(c->chat) ? c->tool_parser : TDM_TC_NONE;
    return TDM_OK;
}

/* The prompt followed by the start of a tool-call block (tool_choice required or named), as the
 * model would have tokenized it while writing the block itself: encode text + prefix + "<" (what
 * always follows in DSML) and keep only the tokens that end inside text + prefix, so no token
 * straddles the point where the model takes over (`">` + `<parameter` is one merge in training
 * text, and a prompt ending in a bare `">` token derails the model). r->prefix becomes the part
 * of the prefix those tokens cover: what the parser must see before the model's output. */
static tdm_status_t encode_with_prefix(const tdm_oai_ctx_t *c, const char *text, size_t len,
                                       tdm_oai_req_t *r, tdm_oai_err_t *e)
{
    size_t pl = strlen(r->prefix), full_len = len + pl + 1;
    char *full = tdm_malloc(full_len + 1);
    memcpy(full, text, len);
    memcpy(full + len, r->prefix, pl);
    memcpy(full + len + pl, "<", 2);
    TDM_TRY(encode(c, "messages", full, full_len, 0, r, e));
    tdm_free(full);
    /* walk back until the tail that is cut off covers at least the "<" */
    uint32_t m = r->n_prompt;
    size_t boundary = full_len;
    while (m > 0 && boundary > len + pl) {
        char *tail = NULL;
        size_t tl = 0;
        m--;
        if (tdm_tok_decode(c->tok, (const uint32_t *)r->prompt + m, r->n_prompt - m, 0, &tail,
                           &tl) != TDM_OK ||
            tl > full_len) {
            tdm_free(tail);
            return BAD("messages", "messages: cannot place the tool-call prefix");
        }
        tdm_free(tail);
        boundary = full_len - tl;
    }
    if (boundary < len || m == 0)
        return BAD("messages", "messages: cannot place the tool-call prefix");
    r->n_prompt = m;
    r->prefix[boundary - len] = '\0';
    return TDM_OK;
}

static tdm_status_t parse_messages(const tdm_oai_ctx_t *c, const json_t *o, tdm_oai_req_t *r,
                                   tdm_oai_err_t *e)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    json_t *msgs = get(o, "messages"), *m;
    const json_t *render_tools = NULL;
    char *named = NULL, *text = NULL, err[256] = "", path[512];
    size_t i, len = 0;
    tdm_status_t st;
    if (!c->chat)
        return BAD("messages", "this model has no chat template we can render; use "
                               "/v1/completions with a raw prompt");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return BAD("messages", "messages: expected a non-empty array");
    if (json_array_size(msgs) > TDM_CHAT_MAX_MESSAGES)
        return BAD("messages", "messages: at most %d messages", TDM_CHAT_MAX_MESSAGES);
    json_array_foreach(msgs, i, m)
    {
        json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
        int known = 0;
        for (size_t k = 0; json_is_string(role) && k < sizeof(roles) / sizeof(roles[0]); k++)
            known |= strcmp(json_string_value(role), roles[k]) == 0;
        if (!known)
            return BAD("messages", "messages[%zu].role: expected system, user, assistant or tool",
                       i);
        snprintf(path, sizeof(path), "messages[%zu]", i);
        TDM_TRY(check_strings(m, "messages", path, sizeof(path), e));
    }
    st = parse_tools(c, o, r, &render_tools, &named, e);
    if (st == TDM_OK && render_tools) {
        snprintf(path, sizeof(path), "tools");
        st = check_strings(render_tools, "tools", path, sizeof(path), e);
    }
    if (st != TDM_OK)
        goto out;
    st = tdm_chat_render(c->chat, msgs, render_tools, 1, &text, &len, err, sizeof(err));
    if (st != TDM_OK) {
        st = BAD("messages", "%s", err);
        goto out;
    }
    if (r->tool_choice == TDM_OAI_TOOLS_REQUIRED || r->tool_choice == TDM_OAI_TOOLS_NAMED) {
        r->prefix = tdm_tc_forced_prefix(r->tool_parser,
                                         r->tool_choice == TDM_OAI_TOOLS_NAMED ? named : NULL);
        if (r->prefix && !r->prefix[0]) {
            tdm_free(r->prefix);
            r->prefix = NULL;
        }
    }
    if (r->prefix && r->tool_parser == TDM_TC_DSML) {
        st = encode_with_prefix(c, text, len, r, e);
        goto out;
    }
    if (r->prefix) { /* the other formats: the prompt text followed by the prefix, encoded whole */
        size_t pl = strlen(r->prefix);
        char *full = tdm_malloc(len + pl + 1);
        memcpy(full, text, len);
        memcpy(full + len, r->prefix, pl + 1);
        st = encode(c, "messages", full, len + pl, 0, r, e);
        tdm_free(full);
        goto out;
    }
    st = encode(c, "messages", text, len, 0, r, e);
    if (st == TDM_OK && r->n_prompt == 0)
        st = BAD("messages", "messages: the rendered prompt is empty");
out:
    tdm_free(text);
    tdm_free(named);
    return st;
}

/* ---- the whole request ---------------------------------------------------------------------- */

static tdm_status_t parse_max_tokens(const tdm_oai_ctx_t *c, const json_t *o, tdm_oai_req_t *r,
                                     tdm_oai_err_t *e)
{
    int64_t v;
    int present;
    const char *key = "max_tokens";
    TDM_TRY(get_int(o, key, 1, INT32_MAX, &v, &present, e));
    if (!present && r->kind == TDM_OAI_CHAT) {
        key = "max_completion_tokens";
        TDM_TRY(get_int(o, key, 1, INT32_MAX, &v, &present, e));
    }
    if ((uint64_t)r->n_prompt >= c->max_context ||
        (present && (uint64_t)r->n_prompt + (uint64_t)v > c->max_context))
        return fail(e, 400, "context_length_exceeded", present ? key : "messages",
                    "This model's maximum context length is %u tokens. However, you requested "
                    "%llu tokens (%u in the prompt, %llu for the completion). Please reduce the "
                    "prompt or %s.",
                    c->max_context, (unsigned long long)r->n_prompt + (present ? v : 0),
                    r->n_prompt, (unsigned long long)(present ? v : 0), key);
    r->max_tokens = present ? (uint32_t)v : c->max_context - r->n_prompt;
    return TDM_OK;
}

tdm_status_t tdm_oai_parse(const tdm_oai_ctx_t *c, tdm_oai_kind_t kind, const json_t *body,
                           tdm_oai_req_t *ret, tdm_oai_err_t *e)
{
    tdm_oai_req_t r;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    tdm_status_t st;
    const char *s;
    size_t n;
    if (!json_is_object(body)) {
        st = BAD("", "the body must be a JSON object");
        goto err;
    }
    json_t *model = get(body, "model");
    if (model) {
        if ((st = str_of(model, "model", "model", &s, &n, e)) != TDM_OK)
            goto err;
        if (n != strlen(c->model_name) || memcmp(s, c->model_name, n) != 0) {
            st = fail(e, 404, "model_not_found", "model",
                      "The model '%.*s' does not exist; this worker serves '%s'",
                      (int)(n > 200 ? 200 : n), s, c->model_name);
            goto err;
        }
    }
    if ((st = parse_unsupported(body, kind, e)) != TDM_OK ||
        (st = parse_sampling(c, body, &r, e)) != TDM_OK ||
        (st = parse_stop(body, &r, e)) != TDM_OK || (st = parse_stream(body, &r, e)) != TDM_OK ||
        (st = parse_logprobs(body, &r, e)) != TDM_OK)
        goto err;
    st = kind == TDM_OAI_CHAT ? parse_messages(c, body, &r, e) : parse_prompt(c, body, &r, e);
    if (st != TDM_OK || (st = parse_max_tokens(c, body, &r, e)) != TDM_OK)
        goto err;
    char verr[256];
    if (tdm_sample_params_validate(&r.sp, verr, sizeof(verr)) != TDM_OK) {
        st = BAD("", "%s", verr);
        goto err;
    }
    *ret = r;
    return TDM_OK;
err:
    tdm_oai_req_free(&r);
    return st;
}

void tdm_oai_req_free(tdm_oai_req_t *r)
{
    if (!r)
        return;
    tdm_free(r->prompt);
    for (uint32_t i = 0; i < r->n_stop; i++)
        tdm_free(r->stop[i]);
    json_decref(r->tools);
    tdm_free(r->prefix);
    memset(r, 0, sizeof(*r));
}
