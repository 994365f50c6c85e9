/*
 * chat.c — chat template matching and the four renderers (contract in tdm/chat.h).
 *
 * Each renderer is the C transcription of one Jinja template, statement by statement, so the
 * output is the bytes transformers' apply_chat_template produces (the unit test checks every
 * committed golden). The template text itself is only used to decide which renderer applies:
 * both sides are canonicalised (tag code without insignificant whitespace, string literals
 * unescaped) and compared whole, so a template that prints anything differently never matches
 * and the user is sent to /v1/completions instead of getting a silently wrong prompt.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <tdm/chat.h>
#include <tdm/mem.h>

#include "chat_int.h"

struct tdm_chat_template {
    tdm_chat_format_t format;
    char *bos_token; /* "" when the config has none (Jinja prints an undefined as "") */
    char *eos_token;
};

#define SET_ERR(...) ((void)(err && errlen ? snprintf(err, errlen, __VA_ARGS__) : 0))

/* The templates as published with the models (Qwen2-*-Instruct, Meta-Llama-3-*-Instruct,
 * Llama-2-*-chat-hf) and models/demo's. */
static const char TPL_DEMO[] =
    "{{ bos_token }}{% if messages and messages[0]['role'] == 'system' %}{% set system = "
    "messages[0]['content'] %}{% set loop_messages = messages[1:] %}{% else %}{% set system = '' "
    "%}{% set loop_messages = messages %}{% endif %}{% if system or tools %}{{ '<|system|>\\n' + "
    "system }}{% if tools %}{% if system %}{{ '\\n\\n' }}{% endif %}{{ 'You can call these "
    "tools:\\n' }}{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor %}{{ 'To call "
    "one, reply with <tool_calls><invoke name=\"NAME\"><parameter "
    "name=\"ARG\">VALUE</parameter></invoke></tool_calls>' }}{% endif %}{{ '<|end|>\\n' }}{% "
    "endif %}{% for message in loop_messages %}{{ '<|' + message['role'] + '|>\\n' }}{% if "
    "message['content'] %}{{ message['content'] }}{% endif %}{% if message['tool_calls'] %}{{ "
    "'<tool_calls>' }}{% for call in message['tool_calls'] %}{{ '<invoke name=\"' + "
    "call['function']['name'] + '\">' }}{% for key, value in "
    "call['function']['arguments'].items() %}{{ '<parameter name=\"' + key + '\">' }}{{ value "
    "}}{{ '</parameter>' }}{% endfor %}{{ '</invoke>' }}{% endfor %}{{ '</tool_calls>' }}{% "
    "endif %}{{ '<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' "
    "}}{% endif %}";

static const char TPL_CHATML[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif "
    "%}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char TPL_LLAMA3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

static const char TPL_LLAMA2[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == "
    "0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
    "%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";

static const struct {
    const char *name;
    const char *text;
    int renders_tools;
} formats[] = {
    [TDM_CHAT_DEMO] = {"demo", TPL_DEMO, 1},
    [TDM_CHAT_CHATML] = {"chatml", TPL_CHATML, 0},
    [TDM_CHAT_LLAMA3] = {"llama3", TPL_LLAMA3, 0},
    [TDM_CHAT_LLAMA2] = {"llama2", TPL_LLAMA2, 0},
};
_Static_assert(sizeof(formats) / sizeof(formats[0]) == TDM_CHAT_FORMAT_MAX, "format table");

const char *tdm_chat_format_name(tdm_chat_format_t f)
{
    return (unsigned)f < TDM_CHAT_FORMAT_MAX ? formats[f].name : "?";
}

/* ---- matching ------------------------------------------------------------------------------ */

static int is_ident(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Canonical form (see tdm/chat.h). Jinja drops one trailing newline of the template
 * (keep_trailing_newline=False) and comments print nothing, so both go too. */
static tdm_status_t canonicalise(const char *t, tdm_sbuf_t *out)
{
    size_t n = strlen(t), i = 0;
    if (n && t[n - 1] == '\n')
        n--;
    while (i < n) {
        if (t[i] == '{' && i + 1 < n && t[i + 1] == '#') {
            const char *e = strstr(t + i + 2, "#}");
            i = e && (size_t)(e - t) + 2 <= n ? (size_t)(e - t) + 2 : n;
            continue;
        }
        if (!(t[i] == '{' && i + 1 < n && (t[i + 1] == '{' || t[i + 1] == '%'))) {
            TDM_TRY(tdm_sbuf_add(out, t + i, 1));
            i++;
            continue;
        }
        char close = t[i + 1] == '{' ? '}' : '%';
        TDM_TRY(tdm_sbuf_add(out, t + i, 2));
        i += 2;
        if (i < n && (t[i] == '-' || t[i] == '+'))
            TDM_TRY(tdm_sbuf_add(out, t + i++, 1));
        int pending_space = 0;
        while (i < n && !(t[i] == close && i + 1 < n && t[i + 1] == '}')) {
            char c = t[i];
            if (is_ws(c)) {
                pending_space = 1;
                i++;
                continue;
            }
            if (pending_space && out->len && is_ident(out->p[out->len - 1]) && is_ident(c))
                TDM_TRY(tdm_sbuf_puts(out, " "));
            pending_space = 0;
            if (c != '\'' && c != '"') {
                TDM_TRY(tdm_sbuf_add(out, &c, 1));
                i++;
                continue;
            }
            /* A string literal: unescape as Jinja does, re-emit double-quoted. */
            TDM_TRY(tdm_sbuf_puts(out, "\""));
            for (i++; i < n && t[i] != c; i++) {
                char ch = t[i];
                if (ch == '\\' && i + 1 < n) {
                    char e = t[++i];
                    ch = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
                    if (e != 'n' && e != 't' && e != 'r' && e != '\\' && e != '\'' && e != '"')
                        TDM_TRY(tdm_sbuf_puts(out, "\\\\"));
                }
                if (ch == '"' || ch == '\\')
                    TDM_TRY(tdm_sbuf_puts(out, "\\"));
                TDM_TRY(tdm_sbuf_add(out, &ch, 1));
            }
            TDM_TRY(tdm_sbuf_puts(out, "\""));
            i++;
        }
        if (i < n) {
            TDM_TRY(tdm_sbuf_add(out, t + i, 2));
            i += 2;
        }
    }
    return TDM_OK;
}

tdm_status_t tdm_chat_template_match(const char *template_text, tdm_chat_format_t *ret_format,
                                     char *err, size_t errlen)
{
    tdm_sbuf_t want = {0}, have = {0};
    tdm_status_t st = TDM_ERR_UNSUPPORTED;

    if (!template_text || !ret_format) {
        SET_ERR("chat template: bad arguments");
        return TDM_ERR_INVAL;
    }
    if (canonicalise(template_text, &have) != TDM_OK) {
        SET_ERR("chat template: too large");
        st = TDM_ERR_OVERFLOW;
        goto out;
    }
    for (int f = 0; f < TDM_CHAT_FORMAT_MAX; f++) {
        want.len = 0;
        if (canonicalise(formats[f].text, &want) != TDM_OK) {
            st = TDM_ERR_OVERFLOW;
            goto out;
        }
        if (want.len == have.len && memcmp(want.p, have.p, want.len) == 0) {
            *ret_format = (tdm_chat_format_t)f;
            st = TDM_OK;
            goto out;
        }
    }
    SET_ERR("this model's chat template is not one tandem implements (demo, ChatML/Qwen2, "
            "Llama-3, Llama-2); /v1/chat/completions is unavailable for it: render the prompt "
            "yourself and use /v1/completions");
out:
    tdm_sbuf_free(&want);
    tdm_sbuf_free(&have);
    return st;
}

/* ---- loading -------------------------------------------------------------------------------- */

/* bos_token/eos_token: a string, {"content": string} (older configs), or absent/null → "". */
static tdm_status_t special_token(const json_t *cfg, const char *key, char **ret, char *err,
                                  size_t errlen)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (v && !json_is_null(v) && !json_is_string(v)) {
        SET_ERR("tokenizer_config.%s: not a string", key);
        return TDM_ERR_FORMAT;
    }
    *ret = tdm_strdup(json_is_string(v) ? json_string_value(v) : "");
    return TDM_OK;
}

tdm_status_t tdm_chat_template_from_config(const json_t *cfg, tdm_chat_template_t **ret, char *err,
                                           size_t errlen)
{
    const json_t *ct, *item;
    const char *text = NULL;
    tdm_chat_format_t f;
    size_t i;
    tdm_status_t st;

    if (!json_is_object(cfg) || !ret) {
        SET_ERR("tokenizer_config: not a JSON object");
        return TDM_ERR_FORMAT;
    }
    ct = json_object_get(cfg, "chat_template");
    if (!ct || json_is_null(ct)) {
        SET_ERR("tokenizer_config has no chat_template; use /v1/completions with a prompt");
        return TDM_ERR_NOTFOUND;
    }
    if (json_is_string(ct)) {
        text = json_string_value(ct);
    } else if (json_is_array(ct)) {
        json_array_foreach(ct, i, item)
        {
            const json_t *name = json_object_get(item, "name");
            const json_t *tpl = json_object_get(item, "template");
            if (json_is_string(name) && strcmp(json_string_value(name), "default") == 0 &&
                json_is_string(tpl))
                text = json_string_value(tpl);
        }
        if (!text) {
            SET_ERR("tokenizer_config.chat_template: a list without a \"default\" template");
            return TDM_ERR_UNSUPPORTED;
        }
    } else {
        SET_ERR("tokenizer_config.chat_template: neither a string nor a list");
        return TDM_ERR_FORMAT;
    }
    TDM_TRY(tdm_chat_template_match(text, &f, err, errlen));

    tdm_chat_template_t *t = tdm_calloc(1, sizeof(*t));
    t->format = f;
    TDM_CHECK_GOTO(special_token(cfg, "bos_token", &t->bos_token, err, errlen), st, err_free);
    TDM_CHECK_GOTO(special_token(cfg, "eos_token", &t->eos_token, err, errlen), st, err_free);
    *ret = t;
    return TDM_OK;
err_free:
    tdm_chat_template_free(t);
    return st;
}

/* tokenizer_config.json as transformers writes it: integers beyond 64 bits (its default
 * "model_max_length": 1000000000000000019884624838656) are read as reals, not refused, so the
 * file's template and special tokens are not lost. Integer literals of more than 18 digits
 * (outside strings) get a ".0" appended before jansson parses the text. */
static json_t *load_hf_json(const char *path, json_error_t *jerr)
{
    FILE *f = fopen(path, "rb");
    tdm_sbuf_t in = {.cap_limit = (size_t)64 << 20}, out = {.cap_limit = (size_t)96 << 20};
    json_t *j = NULL;
    char chunk[65536];
    size_t n;
    if (!f)
        return json_load_file(path, 0, jerr); /* the same open error, reported by jansson */
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        if (tdm_sbuf_add(&in, chunk, n) != TDM_OK)
            goto out;
    for (size_t i = 0; i < in.len;) {
        char c = in.p[i];
        if (c == '"') {
            size_t k = i + 1;
            while (k < in.len && in.p[k] != '"')
                k += in.p[k] == '\\' ? 2 : 1;
            k = k < in.len ? k + 1 : in.len;
            if (tdm_sbuf_add(&out, in.p + i, k - i) != TDM_OK)
                goto out;
            i = k;
            continue;
        }
        if ((c >= '0' && c <= '9') || c == '-') {
            size_t k = i + (c == '-');
            while (k < in.len && in.p[k] >= '0' && in.p[k] <= '9')
                k++;
            int is_int = k == in.len || (in.p[k] != '.' && in.p[k] != 'e' && in.p[k] != 'E');
            if (tdm_sbuf_add(&out, in.p + i, k - i) != TDM_OK ||
                (is_int && k - i - (c == '-') > 18 && tdm_sbuf_puts(&out, ".0") != TDM_OK))
                goto out;
            i = k > i ? k : i + 1;
            continue;
        }
        if (tdm_sbuf_add(&out, &c, 1) != TDM_OK)
            goto out;
        i++;
    }
    j = json_loadb(out.p ? out.p : "", out.len, 0, jerr);
out:
    if (!j && (in.len >= in.cap_limit || out.len >= out.cap_limit))
        snprintf(jerr->text, sizeof(jerr->text), "file too large"), jerr->line = 0;
    fclose(f);
    tdm_sbuf_free(&in);
    tdm_sbuf_free(&out);
    return j;
}

tdm_status_t tdm_chat_template_load(const char *model_dir, tdm_chat_template_t **ret, char *err,
                                    size_t errlen)
{
    char path[PATH_MAX];
    json_error_t jerr;
    json_t *cfg;
    tdm_status_t st;

    if (!model_dir || !ret) {
        SET_ERR("chat template: bad arguments");
        return TDM_ERR_INVAL;
    }
    if ((size_t)snprintf(path, sizeof(path), "%s/tokenizer_config.json", model_dir) >=
        sizeof(path)) {
        SET_ERR("%s: path too long", model_dir);
        return TDM_ERR_RANGE;
    }
    cfg = load_hf_json(path, &jerr);
    if (!cfg) {
        SET_ERR("%s: %s (line %d)", path, jerr.text, jerr.line);
        return json_error_code(&jerr) == json_error_cannot_open_file ? TDM_ERR_NOTFOUND
                                                                     : TDM_ERR_FORMAT;
    }
    /* transformers 5 saves the template beside the config as chat_template.jinja */
    const json_t *ct = json_object_get(cfg, "chat_template");
    if ((!ct || json_is_null(ct)) &&
        (size_t)snprintf(path, sizeof(path), "%s/chat_template.jinja", model_dir) < sizeof(path)) {
        FILE *f = fopen(path, "rb");
        tdm_sbuf_t b = {.cap_limit = TDM_CHAT_MAX_OUTPUT_BYTES};
        char chunk[4096];
        size_t n;
        st = TDM_OK;
        while (f && st == TDM_OK && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
            st = tdm_sbuf_add(&b, chunk, n);
        if (f && (st != TDM_OK || ferror(f) || memchr(b.p ? b.p : "", '\0', b.len))) {
            SET_ERR("%s: unreadable or too large", path);
            fclose(f);
            tdm_sbuf_free(&b);
            json_decref(cfg);
            return TDM_ERR_FORMAT;
        }
        if (f) {
            fclose(f);
            json_object_set_new(cfg, "chat_template", json_string(b.p ? b.p : ""));
        }
        tdm_sbuf_free(&b);
    }
    st = tdm_chat_template_from_config(cfg, ret, err, errlen);
    json_decref(cfg);
    return st;
}

void tdm_chat_template_free(tdm_chat_template_t *t)
{
    if (!t)
        return;
    tdm_free(t->bos_token);
    tdm_free(t->eos_token);
    tdm_free(t);
}

tdm_chat_format_t tdm_chat_template_format(const tdm_chat_template_t *t)
{
    return t->format;
}

int tdm_chat_renders_tools(const tdm_chat_template_t *t)
{
    return formats[t->format].renders_tools;
}

/* ---- messages ------------------------------------------------------------------------------- */

typedef struct msg {
    const char *role;
    const char *content; /* never NULL */
    size_t content_len;
    char *owned; /* content joined from parts */
    const json_t *tool_calls;
} msg_t;

static void msgs_free(msg_t *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++)
        tdm_free(m[i].owned);
    tdm_free(m);
}

static tdm_status_t msgs_parse(const json_t *messages, msg_t **ret, size_t *ret_n, char *err,
                               size_t errlen)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    const json_t *m, *c, *part;
    size_t i, k, n;

    if (!json_is_array(messages)) {
        SET_ERR("messages: not an array");
        return TDM_ERR_INVAL;
    }
    n = json_array_size(messages);
    if (n > TDM_CHAT_MAX_MESSAGES) {
        SET_ERR("messages: %zu messages, at most %d", n, TDM_CHAT_MAX_MESSAGES);
        return TDM_ERR_RANGE;
    }
    msg_t *out = tdm_calloc(n ? n : 1, sizeof(*out));
    json_array_foreach(messages, i, m)
    {
        const json_t *role = json_object_get(m, "role");
        int known = 0;
        if (!json_is_object(m) || !json_is_string(role)) {
            SET_ERR("messages[%zu]: not an object with a string \"role\"", i);
            goto err_free;
        }
        out[i].role = json_string_value(role);
        for (k = 0; k < sizeof(roles) / sizeof(roles[0]); k++)
            known |= strcmp(out[i].role, roles[k]) == 0;
        if (!known) {
            SET_ERR("messages[%zu].role: \"%s\" is not one of system, user, assistant, tool", i,
                    out[i].role);
            goto err_free;
        }
        c = json_object_get(m, "content");
        out[i].content = "";
        if (json_is_string(c)) {
            out[i].content = json_string_value(c);
            out[i].content_len = json_string_length(c);
        } else if (json_is_array(c)) {
            tdm_sbuf_t b = {0};
            json_array_foreach(c, k, part)
            {
                const json_t *ty = json_object_get(part, "type");
                const json_t *tx = json_object_get(part, "text");
                if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") != 0 ||
                    !json_is_string(tx)) {
                    SET_ERR("messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} "
                            "parts are supported",
                            i, k);
                    tdm_sbuf_free(&b);
                    goto err_free;
                }
                if (tdm_sbuf_add(&b, json_string_value(tx), json_string_length(tx)) != TDM_OK) {
                    SET_ERR("messages[%zu].content: too large", i);
                    tdm_sbuf_free(&b);
                    goto err_free;
                }
            }
            out[i].owned = b.p;
            out[i].content = b.p ? b.p : "";
            out[i].content_len = b.len;
        } else if (c && !json_is_null(c)) {
            SET_ERR("messages[%zu].content: not a string, null or a list of text parts", i);
            goto err_free;
        }
        out[i].tool_calls = json_object_get(m, "tool_calls");
        if (out[i].tool_calls && !json_is_null(out[i].tool_calls) &&
            !json_is_array(out[i].tool_calls)) {
            SET_ERR("messages[%zu].tool_calls: not an array", i);
            goto err_free;
        }
    }
    *ret = out;
    *ret_n = n;
    return TDM_OK;
err_free:
    msgs_free(out, n);
    return TDM_ERR_INVAL;
}

/* ---- renderers ------------------------------------------------------------------------------ */

#define ADD(b, s, n) TDM_CHECK_GOTO(tdm_sbuf_add((b), (s), (n)), st, out)
#define PUT(b, s) TDM_CHECK_GOTO(tdm_sbuf_puts((b), (s)), st, out)

static tdm_status_t render_dsml_calls(tdm_sbuf_t *b, const json_t *calls, size_t mi, char *err,
                                      size_t errlen)
{
    const json_t *call, *fn, *name, *args, *v;
    json_t *parsed = NULL;
    const char *key;
    tdm_status_t st = TDM_OK;
    size_t i;

    PUT(b, "<tool_calls>");
    json_array_foreach(calls, i, call)
    {
        fn = json_object_get(call, "function");
        name = json_object_get(fn, "name");
        if (!json_is_string(name)) {
            SET_ERR("messages[%zu].tool_calls[%zu].function.name: missing or not a string", mi, i);
            return TDM_ERR_INVAL;
        }
        args = json_object_get(fn, "arguments");
        if (json_is_string(args)) {
            /* OpenAI sends arguments as a JSON string; the template iterates a dict. */
            parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            args = parsed;
        }
        if (!json_is_object(args)) {
            SET_ERR("messages[%zu].tool_calls[%zu].function.arguments: not a JSON object", mi, i);
            st = TDM_ERR_INVAL;
            goto out;
        }
        PUT(b, "<invoke name=\"");
        ADD(b, json_string_value(name), json_string_length(name));
        PUT(b, "\">");
        json_object_foreach((json_t *)args, key, v)
        {
            PUT(b, "<parameter name=\"");
            PUT(b, key);
            PUT(b, "\">");
            TDM_CHECK_GOTO(tdm_py_str(b, v), st, out);
            PUT(b, "</parameter>");
        }
        PUT(b, "</invoke>");
        json_decref(parsed);
        parsed = NULL;
    }
    PUT(b, "</tool_calls>");
out:
    json_decref(parsed);
    return st;
}

static tdm_status_t render_demo(const tdm_chat_template_t *t, const msg_t *m, size_t n,
                                const json_t *tools, int agp, tdm_sbuf_t *b, char *err,
                                size_t errlen)
{
    tdm_status_t st = TDM_OK;
    size_t first = 0, i;
    const char *sys = "";
    size_t sys_len = 0;
    const json_t *tool;
    int have_tools = json_is_array(tools) && json_array_size(tools) > 0;

    PUT(b, t->bos_token);
    if (n && strcmp(m[0].role, "system") == 0) {
        sys = m[0].content;
        sys_len = m[0].content_len;
        first = 1;
    }
    if (sys_len || have_tools) {
        PUT(b, "<|system|>\n");
        ADD(b, sys, sys_len);
        if (have_tools) {
            if (sys_len)
                PUT(b, "\n\n");
            PUT(b, "You can call these tools:\n");
            json_array_foreach(tools, i, tool)
            {
                TDM_CHECK_GOTO(tdm_py_json_dumps(b, tool), st, out);
                PUT(b, "\n");
            }
            PUT(b, "To call one, reply with <tool_calls><invoke name=\"NAME\"><parameter "
                   "name=\"ARG\">VALUE</parameter></invoke></tool_calls>");
        }
        PUT(b, "<|end|>\n");
    }
    for (i = first; i < n; i++) {
        PUT(b, "<|");
        PUT(b, m[i].role);
        PUT(b, "|>\n");
        ADD(b, m[i].content, m[i].content_len);
        if (json_array_size(m[i].tool_calls) > 0)
            TDM_CHECK_GOTO(render_dsml_calls(b, m[i].tool_calls, i, err, errlen), st, out);
        PUT(b, "<|end|>\n");
    }
    if (agp)
        PUT(b, "<|assistant|>\n");
out:
    return st;
}

static tdm_status_t render_chatml(const msg_t *m, size_t n, int agp, tdm_sbuf_t *b)
{
    tdm_status_t st = TDM_OK;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 && strcmp(m[0].role, "system") != 0)
            PUT(b, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
        PUT(b, "<|im_start|>");
        PUT(b, m[i].role);
        PUT(b, "\n");
        ADD(b, m[i].content, m[i].content_len);
        PUT(b, "<|im_end|>\n");
    }
    if (agp)
        PUT(b, "<|im_start|>assistant\n");
out:
    return st;
}

static tdm_status_t render_llama3(const tdm_chat_template_t *t, const msg_t *m, size_t n, int agp,
                                  tdm_sbuf_t *b)
{
    tdm_status_t st = TDM_OK;
    size_t off, len;
    for (size_t i = 0; i < n; i++) {
        if (i == 0)
            PUT(b, t->bos_token);
        PUT(b, "<|start_header_id|>");
        PUT(b, m[i].role);
        PUT(b, "<|end_header_id|>\n\n");
        tdm_py_strip(m[i].content, m[i].content_len, &off, &len);
        ADD(b, m[i].content + off, len);
        PUT(b, "<|eot_id|>");
    }
    if (agp)
        PUT(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
out:
    return st;
}

static tdm_status_t render_llama2(const tdm_chat_template_t *t, const msg_t *m, size_t n,
                                  tdm_sbuf_t *b, char *err, size_t errlen)
{
    tdm_status_t st = TDM_OK;
    tdm_sbuf_t c = {0};
    size_t first = 0, off, len;
    int have_sys = 0;

    if (n == 0) {
        SET_ERR("messages: the Llama-2 template needs at least one message");
        return TDM_ERR_INVAL;
    }
    if (strcmp(m[0].role, "system") == 0) {
        first = 1;
        have_sys = 1; /* an empty system message still renders: '' != false in Jinja */
    }
    for (size_t i = first; i < n; i++) {
        size_t k = i - first;
        int is_user = strcmp(m[i].role, "user") == 0;
        if (is_user != (k % 2 == 0)) {
            SET_ERR("messages[%zu]: Conversation roles must alternate "
                    "user/assistant/user/assistant/... (Llama-2 template)",
                    i);
            st = TDM_ERR_INVAL;
            goto out;
        }
        c.len = 0;
        if (k == 0 && have_sys) {
            PUT(&c, "<<SYS>>\n");
            ADD(&c, m[0].content, m[0].content_len);
            PUT(&c, "\n<</SYS>>\n\n");
        }
        ADD(&c, m[i].content, m[i].content_len);
        tdm_py_strip(c.p, c.len, &off, &len);
        if (is_user) {
            PUT(b, t->bos_token);
            PUT(b, "[INST] ");
            ADD(b, c.p + off, len);
            PUT(b, " [/INST]");
        } else if (strcmp(m[i].role, "assistant") == 0) {
            PUT(b, " ");
            ADD(b, c.p + off, len);
            PUT(b, " ");
            PUT(b, t->eos_token);
        }
    }
out:
    tdm_sbuf_free(&c);
    return st;
}

tdm_status_t tdm_chat_render(const tdm_chat_template_t *t, const json_t *messages,
                             const json_t *tools, int add_generation_prompt, char **ret_text,
                             size_t *ret_len, char *err, size_t errlen)
{
    msg_t *m = NULL;
    size_t n = 0;
    tdm_sbuf_t b = {.cap_limit = TDM_CHAT_MAX_OUTPUT_BYTES};
    tdm_status_t st;

    if (!t || !ret_text) {
        SET_ERR("chat render: bad arguments");
        return TDM_ERR_INVAL;
    }
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        SET_ERR("tools: not an array");
        return TDM_ERR_INVAL;
    }
    TDM_TRY(msgs_parse(messages, &m, &n, err, errlen));
    err &&errlen ? (void)(err[0] = '\0') : (void)0;
    switch (t->format) {
    case TDM_CHAT_DEMO:
        st = render_demo(t, m, n, tools, add_generation_prompt, &b, err, errlen);
        break;
    case TDM_CHAT_CHATML:
        st = render_chatml(m, n, add_generation_prompt, &b);
        break;
    case TDM_CHAT_LLAMA3:
        st = render_llama3(t, m, n, add_generation_prompt, &b);
        break;
    case TDM_CHAT_LLAMA2:
        st = render_llama2(t, m, n, &b, err, errlen);
        break;
    default:
        st = TDM_ERR_STATE;
    }
    if (st == TDM_ERR_OVERFLOW && (!err || !errlen || !err[0]))
        SET_ERR("rendered prompt exceeds %zu bytes", TDM_CHAT_MAX_OUTPUT_BYTES);
    msgs_free(m, n);
    if (st != TDM_OK) {
        tdm_sbuf_free(&b);
        return st;
    }
    if (!b.p)
        b.p = tdm_strdup("");
    *ret_text = b.p;
    if (ret_len)
        *ret_len = b.len;
    return TDM_OK;
}
