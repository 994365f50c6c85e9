/*
 * load_steps.c — tokenizer.json's pipeline sections → tdm_tok_t's step lists: the normalizer,
 * the pre-tokenizer, the decoder and the post-processor (its TemplateProcessing), each possibly
 * a "Sequence" of steps (load_int.h; load.c reads the model, the vocab and the added tokens).
 * Every field is validated; the first problem is reported as load.c's are.
 */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>

#include "load_int.h"

static const char PAT_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char PAT_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static tdm_status_t get_type(tok_load_t *c, json_t *o, const char *where, const char **ret)
{
    if (!json_is_object(o))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s: expected an object", where);
    json_t *t;
    TDM_TRY(tdm_tok_load_get_str(c, o, "type", where, 1, &t));
    *ret = json_string_value(t);
    return TDM_OK;
}

/* "String" pattern of Replace/Split; a Regex pattern is returned in *ret_regex. */
static tdm_status_t get_pattern(tok_load_t *c, json_t *o, const char *where, json_t **ret_str,
                                json_t **ret_regex)
{
    json_t *p = json_object_get(o, "pattern");
    if (!json_is_object(p))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.pattern: expected an object", where);
    json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    if (s && json_is_string(s)) {
        *ret_str = s;
        *ret_regex = NULL;
        return TDM_OK;
    }
    if (r && json_is_string(r)) {
        *ret_str = NULL;
        *ret_regex = r;
        return TDM_OK;
    }
    return tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                            "%s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", where);
}

static tdm_status_t get_scheme(tok_load_t *c, json_t *o, const char *where, tok_scheme_t *ret)
{
    json_t *ps = json_object_get(o, "prepend_scheme");
    if (ps && !json_is_null(ps)) {
        const char *v = json_string_value(ps);
        if (!v)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.prepend_scheme: expected a string",
                                    where);
        if (strcmp(v, "always") == 0)
            *ret = TOK_SCHEME_ALWAYS;
        else if (strcmp(v, "first") == 0)
            *ret = TOK_SCHEME_FIRST;
        else if (strcmp(v, "never") == 0)
            *ret = TOK_SCHEME_NEVER;
        else
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.prepend_scheme: unknown value \"%s\"",
                                    where, v);
        return TDM_OK;
    }
    int aps;
    TDM_TRY(tdm_tok_load_get_bool(c, o, "add_prefix_space", where, 1, &aps));
    *ret = aps ? TOK_SCHEME_ALWAYS : TOK_SCHEME_NEVER;
    return TDM_OK;
}

/* Metaspace replacement: exactly one character. */
static tdm_status_t get_repl(tok_load_t *c, json_t *o, const char *where, const char **ret,
                             size_t *ret_len)
{
    json_t *r;
    TDM_TRY(tdm_tok_load_get_str(c, o, "replacement", where, 1, &r));
    size_t n = json_string_length(r);
    const uint8_t *s = (const uint8_t *)json_string_value(r);
    uint32_t cp;
    if (n == 0 || tdm_tok_utf8_next(s, n, &cp) != n)
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.replacement: expected exactly one character",
                                where);
    *ret = tdm_tok_load_dup_str(c, r, ret_len);
    return TDM_OK;
}

/* The common head of the normalizer/pre-tokenizer/decoder/post-processor parsers: the depth cap,
 * the "type" field, and a {"type":"Sequence", KEY:[...]} whose items are parsed by `fn` one level
 * deeper (*ret_seq = 1 then); for a single step, the cap on the list it joins (n_have steps
 * already, `what` names them in the message; n_have < 0: no list). */
typedef tdm_status_t (*parse_step_fn)(tok_load_t *c, json_t *o, const char *where, int depth);

static tdm_status_t parse_head(tok_load_t *c, json_t *o, const char *where, int depth,
                               const char *key, parse_step_fn fn, int n_have, const char *what,
                               const char **ret_type, int *ret_seq)
{
    if (depth > TOK_MAX_DEPTH)
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s: nested too deeply", where);
    TDM_TRY(get_type(c, o, where, ret_type));
    *ret_seq = strcmp(*ret_type, "Sequence") == 0;
    if (!*ret_seq && n_have >= TOK_MAX_STEPS)
        return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED, "%s: more than %d %s steps", where,
                                TOK_MAX_STEPS, what);
    if (!*ret_seq)
        return TDM_OK;
    json_t *arr = json_object_get(o, key);
    if (!json_is_array(arr))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.%s: expected an array", where, key);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char sub[128];
        snprintf(sub, sizeof(sub), "%s.%s[%zu]", where, key, i);
        TDM_TRY(fn(c, json_array_get(arr, i), sub, depth + 1));
    }
    return TDM_OK;
}

tdm_status_t tdm_tok_load_norm(tok_load_t *c, json_t *o, const char *where, int depth)
{
    tdm_tok_t *tok = c->tok;
    const char *type;
    int seq;
    TDM_TRY(parse_head(c, o, where, depth, "normalizers", tdm_tok_load_norm, (int)tok->n_norm,
                       "normalizer", &type, &seq));
    if (seq)
        return TDM_OK;
    tok_norm_t *n = &tok->norm[tok->n_norm];
    memset(n, 0, sizeof(*n));
    if (strcmp(type, "NFC") == 0) {
        n->kind = TOK_NORM_NFC;
    } else if (strcmp(type, "Prepend") == 0) {
        json_t *p;
        TDM_TRY(tdm_tok_load_get_str(c, o, "prepend", where, 1, &p));
        n->kind = TOK_NORM_PREPEND;
        n->a = tdm_tok_load_dup_str(c, p, &n->alen);
    } else if (strcmp(type, "Replace") == 0) {
        json_t *s, *r, *content;
        TDM_TRY(get_pattern(c, o, where, &s, &r));
        if (!s)
            return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED,
                                    "%s.pattern: Regex patterns are not supported", where);
        TDM_TRY(tdm_tok_load_get_str(c, o, "content", where, 1, &content));
        if (json_string_length(s) == 0)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.pattern: empty string", where);
        n->kind = TOK_NORM_REPLACE;
        n->a = tdm_tok_load_dup_str(c, s, &n->alen);
        n->b = tdm_tok_load_dup_str(c, content, &n->blen);
    } else {
        return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED,
                                "%s.type: normalizer \"%s\" is not supported", where, type);
    }
    tok->n_norm++;
    return TDM_OK;
}

tdm_status_t tdm_tok_load_pre(tok_load_t *c, json_t *o, const char *where, int depth)
{
    tdm_tok_t *tok = c->tok;
    const char *type;
    int seq;
    TDM_TRY(parse_head(c, o, where, depth, "pretokenizers", tdm_tok_load_pre, (int)tok->n_pre,
                       "pre-tokenizer", &type, &seq));
    if (seq)
        return TDM_OK;
    tok_pre_t *p = &tok->pre[tok->n_pre];
    memset(p, 0, sizeof(*p));
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = TOK_PRE_BYTELEVEL;
        TDM_TRY(tdm_tok_load_get_bool(c, o, "add_prefix_space", where, 1, &p->add_prefix_space));
        TDM_TRY(tdm_tok_load_get_bool(c, o, "use_regex", where, 1, &p->use_regex));
    } else if (strcmp(type, "Split") == 0) {
        json_t *s, *r, *beh;
        int invert = 0;
        TDM_TRY(get_pattern(c, o, where, &s, &r));
        TDM_TRY(tdm_tok_load_get_str(c, o, "behavior", where, 1, &beh));
        TDM_TRY(tdm_tok_load_get_bool(c, o, "invert", where, 0, &invert));
        if (strcmp(json_string_value(beh), "Isolated") != 0 || invert)
            return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED,
                                    "%s.behavior: only Isolated, non-inverted splits are supported",
                                    where);
        const char *re = r ? json_string_value(r) : "";
        p->kind = TOK_PRE_SPLIT;
        if (r && strcmp(re, PAT_GPT2) == 0)
            p->pat = TOK_PAT_GPT2;
        else if (r && strcmp(re, PAT_LLAMA3) == 0)
            p->pat = TOK_PAT_LLAMA3;
        else if (r && strcmp(re, PAT_QWEN2) == 0)
            p->pat = TOK_PAT_QWEN2;
        else
            return tdm_tok_load_bad(
                c, TDM_ERR_UNSUPPORTED,
                "%s.pattern: only the GPT-2, Llama-3 and Qwen2 regexes are supported", where);
    } else if (strcmp(type, "Metaspace") == 0) {
        p->kind = TOK_PRE_METASPACE;
        TDM_TRY(get_repl(c, o, where, &p->repl, &p->repl_len));
        TDM_TRY(get_scheme(c, o, where, &p->scheme));
        TDM_TRY(tdm_tok_load_get_bool(c, o, "split", where, 1, &p->split));
    } else {
        return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED,
                                "%s.type: pre-tokenizer \"%s\" is not supported", where, type);
    }
    tok->n_pre++;
    return TDM_OK;
}

tdm_status_t tdm_tok_load_dec(tok_load_t *c, json_t *o, const char *where, int depth)
{
    tdm_tok_t *tok = c->tok;
    const char *type;
    int seq;
    TDM_TRY(parse_head(c, o, where, depth, "decoders", tdm_tok_load_dec, (int)tok->n_dec, "decoder",
                       &type, &seq));
    if (seq)
        return TDM_OK;
    tok_dec_t *d = &tok->dec[tok->n_dec];
    memset(d, 0, sizeof(*d));
    if (strcmp(type, "ByteLevel") == 0) {
        d->kind = TOK_DEC_BYTELEVEL;
    } else if (strcmp(type, "Metaspace") == 0) {
        d->kind = TOK_DEC_METASPACE;
        TDM_TRY(get_repl(c, o, where, &d->a, &d->alen));
        TDM_TRY(get_scheme(c, o, where, &d->scheme));
    } else if (strcmp(type, "Replace") == 0) {
        json_t *s, *r, *content;
        TDM_TRY(get_pattern(c, o, where, &s, &r));
        if (!s)
            return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED,
                                    "%s.pattern: Regex patterns are not supported", where);
        TDM_TRY(tdm_tok_load_get_str(c, o, "content", where, 1, &content));
        if (json_string_length(s) == 0)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.pattern: empty string", where);
        d->kind = TOK_DEC_REPLACE;
        d->a = tdm_tok_load_dup_str(c, s, &d->alen);
        d->b = tdm_tok_load_dup_str(c, content, &d->blen);
    } else if (strcmp(type, "ByteFallback") == 0) {
        d->kind = TOK_DEC_BYTEFALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        d->kind = TOK_DEC_FUSE;
    } else if (strcmp(type, "Strip") == 0) {
        json_t *content;
        d->kind = TOK_DEC_STRIP;
        TDM_TRY(tdm_tok_load_get_str(c, o, "content", where, 1, &content));
        size_t n = json_string_length(content);
        if (n == 0 ||
            tdm_tok_utf8_next((const uint8_t *)json_string_value(content), n, &d->content) != n)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.content: expected exactly one character",
                                    where);
        json_t *st = json_object_get(o, "start"), *sp = json_object_get(o, "stop");
        if (!json_is_integer(st) || !json_is_integer(sp) || json_integer_value(st) < 0 ||
            json_integer_value(sp) < 0 || json_integer_value(st) > 1 << 20 ||
            json_integer_value(sp) > 1 << 20)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                                    "%s.start/stop: expected small non-negative integers", where);
        d->start = (size_t)json_integer_value(st);
        d->stop = (size_t)json_integer_value(sp);
    } else {
        return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED, "%s.type: decoder \"%s\" is not supported",
                                where, type);
    }
    tok->n_dec++;
    return TDM_OK;
}

static void push_ids(uint32_t **arr, size_t *n, const uint32_t *ids, size_t k)
{
    *arr = tdm_realloc(*arr, (*n + k + 1) * sizeof(uint32_t));
    memcpy(*arr + *n, ids, k * sizeof(uint32_t));
    *n += k;
}

static tdm_status_t parse_template(tok_load_t *c, json_t *o, const char *where)
{
    tdm_tok_t *tok = c->tok;
    json_t *single = json_object_get(o, "single"), *sp = json_object_get(o, "special_tokens");
    if (!json_is_array(single))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.single: expected an array", where);
    if (sp && !json_is_null(sp) && !json_is_object(sp))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.special_tokens: expected an object", where);
    if (tok->tpl_pre || tok->tpl_post || tok->n_tpl_pre || tok->n_tpl_post)
        return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED, "%s: more than one TemplateProcessing",
                                where);
    int seen_seq = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *it = json_array_get(single, i);
        json_t *seq = json_object_get(it, "Sequence"), *spt = json_object_get(it, "SpecialToken");
        if (json_is_object(seq)) {
            const char *id = json_string_value(json_object_get(seq, "id"));
            if (!id || strcmp(id, "A") != 0 || seen_seq)
                return tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                                        "%s.single[%zu].Sequence.id: expected one \"A\"", where, i);
            seen_seq = 1;
        } else if (json_is_object(spt)) {
            const char *name = json_string_value(json_object_get(spt, "id"));
            json_t *ent = name ? json_object_get(sp, name) : NULL;
            json_t *ids = json_object_get(ent, "ids");
            if (!json_is_array(ids))
                return tdm_tok_load_bad(
                    c, TDM_ERR_FORMAT,
                    "%s.single[%zu].SpecialToken: \"%s\" has no ids in special_tokens", where, i,
                    name ? name : "?");
            for (size_t k = 0; k < json_array_size(ids); k++) {
                uint32_t id;
                char sub[160];
                snprintf(sub, sizeof(sub), "%s.special_tokens[\"%.40s\"].ids[%zu]", where, name, k);
                TDM_TRY(tdm_tok_load_get_id(c, json_array_get(ids, k), sub, &id));
                if (seen_seq)
                    push_ids(&tok->tpl_post, &tok->n_tpl_post, &id, 1);
                else
                    push_ids(&tok->tpl_pre, &tok->n_tpl_pre, &id, 1);
            }
        } else {
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                                    "%s.single[%zu]: expected a Sequence or SpecialToken object",
                                    where, i);
        }
    }
    if (!seen_seq)
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.single: no Sequence \"A\"", where);
    return TDM_OK;
}

tdm_status_t tdm_tok_load_post(tok_load_t *c, json_t *o, const char *where, int depth)
{
    const char *type;
    int seq;
    TDM_TRY(parse_head(c, o, where, depth, "processors", tdm_tok_load_post, -1, "", &type, &seq));
    if (seq)
        return TDM_OK;
    if (strcmp(type, "ByteLevel") == 0)
        return TDM_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") == 0)
        return parse_template(c, o, where);
    return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED,
                            "%s.type: post-processor \"%s\" is not supported", where, type);
}
