/*
 * chat.c — a checkpoint's chat template: found (tokenizer_config.json's chat_template as a string
 * or a list of named templates, chat_template.jinja, or --chat-template), parsed by the Jinja
 * engine (tdm/jinja.h) and rendered with the variables transformers' apply_chat_template passes
 * (messages, tools, add_generation_prompt, the special tokens). Contract in tdm/chat.h.
 *
 * The texts of the four templates tandem first transcribed by hand stay here: they name a
 * template's format (the demo model's marks DSML tool calls) and are the built-ins
 * --chat-template accepts by name.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <tdm/chat.h>
#include <tdm/jinja.h>
#include <tdm/mem.h>

#include "chat_int.h"

struct tdm_chat_template {
    tdm_chat_format_t format; /* the built-in text it is, or TDM_CHAT_JINJA */
    int renders_tools;
    char *bos_token; /* "" when the config has none (Jinja prints an undefined as "") */
    char *eos_token;
    json_t *specials;           /* {bos_token, eos_token, …}: what transformers passes */
    tdm_jinja_tpl_t *tpl;       /* "default" (or the only template) */
    tdm_jinja_tpl_t *tpl_tools; /* "tool_use", when the config names one */
    char *text;                 /* the tool_use text if any, else the default's */
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
    [TDM_CHAT_DEMO] = {"demo", TPL_DEMO, 1},       [TDM_CHAT_CHATML] = {"chatml", TPL_CHATML, 0},
    [TDM_CHAT_LLAMA3] = {"llama3", TPL_LLAMA3, 0}, [TDM_CHAT_LLAMA2] = {"llama2", TPL_LLAMA2, 0},
    [TDM_CHAT_JINJA] = {"jinja", NULL, 0},
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
    for (int f = 0; f < TDM_CHAT_JINJA; f++) {
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
static tdm_status_t special_token(const json_t *cfg, const char *key, json_t *specials, char **ret,
                                  char *err, size_t errlen)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (v && !json_is_null(v) && !json_is_string(v)) {
        SET_ERR("tokenizer_config.%s: not a string", key);
        return TDM_ERR_FORMAT;
    }
    if (json_is_string(v))
        json_object_set(specials, key, (json_t *)v);
    if (ret)
        *ret = tdm_strdup(json_is_string(v) ? json_string_value(v) : "");
    return TDM_OK;
}

static tdm_status_t parse_tpl(const char *text, const char *what, tdm_jinja_tpl_t **ret, char *err,
                              size_t errlen)
{
    char perr[384] = "";
    tdm_status_t st = tdm_jinja_parse(text, strlen(text), ret, perr, sizeof(perr));
    if (st != TDM_OK)
        SET_ERR("%s: %s", what, perr);
    return st;
}

/* A template from its text and the config's special tokens. */
static tdm_status_t template_new(const json_t *cfg, const char *text, const char *tools_text,
                                 tdm_chat_template_t **ret, char *err, size_t errlen)
{
    static const char *const more[] = {"unk_token", "pad_token", "sep_token", "cls_token",
                                       "mask_token"};
    tdm_status_t st;
    tdm_chat_template_t *t = tdm_calloc(1, sizeof(*t));
    t->specials = json_object();
    TDM_CHECK_GOTO(special_token(cfg, "bos_token", t->specials, &t->bos_token, err, errlen), st,
                   err_free);
    TDM_CHECK_GOTO(special_token(cfg, "eos_token", t->specials, &t->eos_token, err, errlen), st,
                   err_free);
    for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++)
        TDM_CHECK_GOTO(special_token(cfg, more[i], t->specials, NULL, err, errlen), st, err_free);
    TDM_CHECK_GOTO(parse_tpl(text, "chat_template", &t->tpl, err, errlen), st, err_free);
    if (tools_text)
        TDM_CHECK_GOTO(parse_tpl(tools_text, "chat_template tool_use", &t->tpl_tools, err, errlen),
                       st, err_free);
    t->text = tdm_strdup(tools_text ? tools_text : text);
    if (tdm_chat_template_match(text, &t->format, NULL, 0) != TDM_OK)
        t->format = TDM_CHAT_JINJA;
    /* A template that never names `tools` shows the model none (ChatML, Llama-2 as shipped). */
    t->renders_tools = tools_text != NULL || strstr(text, "tools") != NULL;
    *ret = t;
    return TDM_OK;
err_free:
    tdm_chat_template_free(t);
    return st;
}

/* The built-in template called `name` ("demo", "chatml", "llama3", "llama2"), or NULL. */
static const char *builtin_text(const char *name)
{
    for (int f = 0; f < TDM_CHAT_JINJA; f++)
        if (!strcmp(formats[f].name, name))
            return formats[f].text;
    return NULL;
}

/* chat_template as a string, or as a list of {name, template}: "default" renders, "tool_use"
 * renders requests that offer tools; `override_name` picks another entry by name. */
static tdm_status_t config_texts(const json_t *cfg, const char *override_name, const char **ret,
                                 const char **ret_tools, char *err, size_t errlen)
{
    const json_t *ct = json_object_get(cfg, "chat_template"), *item;
    size_t i;
    *ret = *ret_tools = NULL;
    if (!ct || json_is_null(ct)) {
        SET_ERR("tokenizer_config has no chat_template; use /v1/completions with a prompt");
        return TDM_ERR_NOTFOUND;
    }
    if (json_is_string(ct)) {
        *ret = json_string_value(ct);
        return TDM_OK;
    }
    if (!json_is_array(ct)) {
        SET_ERR("tokenizer_config.chat_template: neither a string nor a list");
        return TDM_ERR_FORMAT;
    }
    json_array_foreach(ct, i, item)
    {
        const json_t *name = json_object_get(item, "name");
        const json_t *tpl = json_object_get(item, "template");
        if (!json_is_string(name) || !json_is_string(tpl)) {
            SET_ERR("tokenizer_config.chat_template[%zu]: not a {name, template} object", i);
            return TDM_ERR_FORMAT;
        }
        if (!strcmp(json_string_value(name), override_name ? override_name : "default"))
            *ret = json_string_value(tpl);
        if (!override_name && !strcmp(json_string_value(name), "tool_use"))
            *ret_tools = json_string_value(tpl);
    }
    if (!*ret) {
        SET_ERR("tokenizer_config.chat_template: a list without a \"%s\" template",
                override_name ? override_name : "default");
        return override_name ? TDM_ERR_NOTFOUND : TDM_ERR_UNSUPPORTED;
    }
    return TDM_OK;
}

tdm_status_t tdm_chat_template_from_config(const json_t *cfg, tdm_chat_template_t **ret, char *err,
                                           size_t errlen)
{
    const char *text, *tools_text;
    if (!json_is_object(cfg) || !ret) {
        SET_ERR("tokenizer_config: not a JSON object");
        return TDM_ERR_FORMAT;
    }
    TDM_TRY(config_texts(cfg, NULL, &text, &tools_text, err, errlen));
    return template_new(cfg, text, tools_text, ret, err, errlen);
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

/* The whole of a small text file (templates), NUL-free; NULL with *ret_missing if absent. */
static char *read_text(const char *path, int *ret_missing)
{
    FILE *f = fopen(path, "rb");
    tdm_sbuf_t b = {.cap_limit = TDM_JINJA_MAX_SOURCE};
    char chunk[4096];
    size_t n;
    tdm_status_t st;
    *ret_missing = !f;
    if (!f)
        return NULL;
    st = tdm_sbuf_add(&b, "", 0);
    while (st == TDM_OK && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st = tdm_sbuf_add(&b, chunk, n);
    if (st != TDM_OK || ferror(f) || memchr(b.p, '\0', b.len)) {
        fclose(f);
        tdm_sbuf_free(&b);
        return NULL;
    }
    fclose(f);
    return b.p;
}

tdm_status_t tdm_chat_template_open(const char *model_dir, const char *override,
                                    tdm_chat_template_t **ret, char *err, size_t errlen)
{
    char path[PATH_MAX];
    json_error_t jerr;
    json_t *cfg;
    tdm_status_t st;
    int missing = 0;

    if (!model_dir || !ret) {
        SET_ERR("chat template: bad arguments");
        return TDM_ERR_INVAL;
    }
    if (override && !*override)
        override = NULL;
    if ((size_t)snprintf(path, sizeof(path), "%s/tokenizer_config.json", model_dir) >=
        sizeof(path)) {
        SET_ERR("%s: path too long", model_dir);
        return TDM_ERR_RANGE;
    }
    cfg = load_hf_json(path, &jerr);
    if (!cfg && !(override && json_error_code(&jerr) == json_error_cannot_open_file)) {
        SET_ERR("%s: %s (line %d)", path, jerr.text, jerr.line);
        return json_error_code(&jerr) == json_error_cannot_open_file ? TDM_ERR_NOTFOUND
                                                                     : TDM_ERR_FORMAT;
    }
    if (!cfg)
        cfg = json_object();
    if (override) { /* --chat-template FILE|NAME */
        char *text = read_text(override, &missing);
        const char *named = text ? text : builtin_text(override), *tools_text = NULL;
        if (!text && !missing) {
            SET_ERR("--chat-template %s: unreadable, larger than %zu bytes, or holds a NUL",
                    override, TDM_JINJA_MAX_SOURCE);
            st = TDM_ERR_FORMAT;
        } else if (!named && config_texts(cfg, override, &named, &tools_text, NULL, 0) != TDM_OK) {
            SET_ERR("--chat-template %s: neither a file, a built-in (demo, chatml, llama3, llama2) "
                    "nor a template named in tokenizer_config.json",
                    override);
            st = TDM_ERR_NOTFOUND;
        } else {
            st = template_new(cfg, named, NULL, ret, err, errlen);
        }
        tdm_free(text);
        json_decref(cfg);
        return st;
    }
    /* transformers 5 saves the template beside the config as chat_template.jinja */
    const json_t *ct = json_object_get(cfg, "chat_template");
    if ((!ct || json_is_null(ct)) &&
        (size_t)snprintf(path, sizeof(path), "%s/chat_template.jinja", model_dir) < sizeof(path)) {
        char *text = read_text(path, &missing);
        if (!text && !missing) {
            SET_ERR("%s: unreadable, larger than %zu bytes, or holds a NUL", path,
                    TDM_JINJA_MAX_SOURCE);
            json_decref(cfg);
            return TDM_ERR_FORMAT;
        }
        if (text)
            json_object_set_new(cfg, "chat_template", json_string(text));
        tdm_free(text);
    }
    st = tdm_chat_template_from_config(cfg, ret, err, errlen);
    json_decref(cfg);
    return st;
}

tdm_status_t tdm_chat_template_load(const char *model_dir, tdm_chat_template_t **ret, char *err,
                                    size_t errlen)
{
    return tdm_chat_template_open(model_dir, NULL, ret, err, errlen);
}

void tdm_chat_template_free(tdm_chat_template_t *t)
{
    if (!t)
        return;
    tdm_free(t->bos_token);
    tdm_free(t->eos_token);
    json_decref(t->specials);
    tdm_free(t->text);
    tdm_jinja_free(t->tpl);
    tdm_jinja_free(t->tpl_tools);
    tdm_free(t);
}

tdm_chat_format_t tdm_chat_template_format(const tdm_chat_template_t *t)
{
    return t->format;
}

const char *tdm_chat_template_text(const tdm_chat_template_t *t)
{
    return t->text;
}

int tdm_chat_renders_tools(const tdm_chat_template_t *t)
{
    return t->renders_tools;
}

/* ---- messages ------------------------------------------------------------------------------- */

/* The messages a template sees: validated, content parts joined into one string, and (when
 * `args_as_object`) each tool call's arguments given as a JSON string parsed into an object, as
 * SGLang and vLLM pass them. Everything else is passed through as sent. */
static tdm_status_t msgs_normalise(const json_t *messages, int args_as_object, json_t **ret,
                                   int *ret_had_string_args, char *err, size_t errlen)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    const json_t *m, *c, *part, *call;
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
    json_t *out = json_array();
    json_array_foreach(messages, i, m)
    {
        const json_t *role = json_object_get(m, "role");
        int known = 0;
        if (!json_is_object(m) || !json_is_string(role)) {
            SET_ERR("messages[%zu]: not an object with a string \"role\"", i);
            goto err_free;
        }
        for (k = 0; k < sizeof(roles) / sizeof(roles[0]); k++)
            known |= strcmp(json_string_value(role), roles[k]) == 0;
        if (!known) {
            SET_ERR("messages[%zu].role: \"%s\" is not one of system, user, assistant, tool", i,
                    json_string_value(role));
            goto err_free;
        }
        json_t *copy = json_deep_copy(m);
        json_array_append_new(out, copy);
        c = json_object_get(m, "content");
        if (json_is_array(c)) {
            tdm_sbuf_t b = {.cap_limit = TDM_CHAT_MAX_OUTPUT_BYTES};
            (void)tdm_sbuf_add(&b, "", 0);
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
            json_object_set_new(copy, "content", json_stringn(b.p, b.len));
            tdm_sbuf_free(&b);
        } else if (c && !json_is_null(c) && !json_is_string(c)) {
            SET_ERR("messages[%zu].content: not a string, null or a list of text parts", i);
            goto err_free;
        }
        const json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls) && !json_is_array(calls)) {
            SET_ERR("messages[%zu].tool_calls: not an array", i);
            goto err_free;
        }
        json_array_foreach(calls, k, call)
        {
            json_t *fn =
                json_object_get(json_array_get(json_object_get(copy, "tool_calls"), k), "function");
            const json_t *args = json_object_get(fn, "arguments");
            if (!json_is_string(json_object_get(fn, "name"))) {
                SET_ERR("messages[%zu].tool_calls[%zu].function.name: missing or not a string", i,
                        k);
                goto err_free;
            }
            if (json_is_string(args)) {
                json_t *parsed =
                    json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
                if (!json_is_object(parsed)) {
                    json_decref(parsed);
                    SET_ERR("messages[%zu].tool_calls[%zu].function.arguments: not a JSON object",
                            i, k);
                    goto err_free;
                }
                *ret_had_string_args = 1;
                if (args_as_object)
                    json_object_set_new(fn, "arguments", parsed);
                else
                    json_decref(parsed);
            } else if (args && !json_is_object(args)) {
                SET_ERR("messages[%zu].tool_calls[%zu].function.arguments: not a JSON object", i,
                        k);
                goto err_free;
            }
        }
    }
    *ret = out;
    return TDM_OK;
err_free:
    json_decref(out);
    return TDM_ERR_INVAL;
}

static tdm_status_t render_once(const tdm_chat_template_t *t, const json_t *messages,
                                const json_t *tools, int agp, int args_as_object,
                                int *ret_had_string_args, char **ret_text, size_t *ret_len,
                                char *err, size_t errlen)
{
    json_t *msgs = NULL;
    tdm_jinja_limits_t lim = {.max_output = TDM_CHAT_MAX_OUTPUT_BYTES};
    TDM_TRY(msgs_normalise(messages, args_as_object, &msgs, ret_had_string_args, err, errlen));
    json_t *vars = json_deep_copy(t->specials);
    json_object_set_new(vars, "messages", msgs);
    json_object_set_new(vars, "tools", tools ? json_incref((json_t *)tools) : json_null());
    json_object_set_new(vars, "add_generation_prompt", json_boolean(agp));
    int with_tools = json_is_array(tools) && json_array_size(tools) > 0;
    const tdm_jinja_tpl_t *tpl = with_tools && t->tpl_tools ? t->tpl_tools : t->tpl;
    tdm_status_t st = tdm_jinja_render(tpl, vars, &lim, ret_text, ret_len, err, errlen);
    json_decref(vars);
    return st;
}

tdm_status_t tdm_chat_render(const tdm_chat_template_t *t, const json_t *messages,
                             const json_t *tools, int add_generation_prompt, char **ret_text,
                             size_t *ret_len, char *err, size_t errlen)
{
    int had_string_args = 0, dummy = 0;
    if (!t || !ret_text) {
        SET_ERR("chat render: bad arguments");
        return TDM_ERR_INVAL;
    }
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        SET_ERR("tools: not an array");
        return TDM_ERR_INVAL;
    }
    if (json_is_null(tools))
        tools = NULL;
    tdm_status_t st = render_once(t, messages, tools, add_generation_prompt, 1, &had_string_args,
                                  ret_text, ret_len, err, errlen);
    /* Some templates (DeepSeek's) print the arguments string as sent: if the template failed on
     * the parsed form, render again with the strings. */
    if (st != TDM_OK && st != TDM_ERR_RANGE && had_string_args) {
        char err2[512] = "";
        if (render_once(t, messages, tools, add_generation_prompt, 0, &dummy, ret_text, ret_len,
                        err2, sizeof(err2)) == TDM_OK)
            return TDM_OK;
    }
    return st;
}
