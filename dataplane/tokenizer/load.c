/*
 * load.c — tokenizer.json → tdm_tok_t. Validates every field it uses (types, ranges, references
 * between vocab, merges, added tokens and the post-processor template) and reports the first
 * problem as TDM_ERR_FORMAT (malformed) or TDM_ERR_UNSUPPORTED (valid but outside what
 * tokenizer.h lists), naming the field. Builds the vocab and merge hash maps, the id tables and
 * the added-token matchers; the result is immutable. The pipeline sections (normalizer,
 * pre-tokenizer, decoder, post-processor) are load_steps.c's; the field readers both use are here
 * (load_int.h).
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>

#include "load_int.h"

/* A file may not make us allocate id tables much larger than what it lists. */
#define TOK_ID_SLACK (1u << 18)

tdm_status_t tdm_tok_load_bad(tok_load_t *c, tdm_status_t st, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

const char *tdm_tok_load_dup_str(tok_load_t *c, json_t *s, size_t *ret_len)
{
    size_t n = json_string_length(s);
    if (ret_len)
        *ret_len = n;
    return tdm_tok_arena_memdup(&c->tok->pool, json_string_value(s), n);
}

/* Optional boolean: absent or null → def. */
tdm_status_t tdm_tok_load_get_bool(tok_load_t *c, json_t *o, const char *key, const char *where,
                                   int def, int *ret)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *ret = def;
        return TDM_OK;
    }
    if (!json_is_boolean(v))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.%s: expected a boolean", where, key);
    *ret = json_is_true(v);
    return TDM_OK;
}

tdm_status_t tdm_tok_load_get_str(tok_load_t *c, json_t *o, const char *key, const char *where,
                                  int required, json_t **ret)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.%s: missing", where, key);
        *ret = NULL;
        return TDM_OK;
    }
    if (!json_is_string(v))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.%s: expected a string", where, key);
    *ret = v;
    return TDM_OK;
}

tdm_status_t tdm_tok_load_get_id(tok_load_t *c, json_t *v, const char *where, uint32_t *ret)
{
    if (!json_is_integer(v))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s: expected an integer id", where);
    json_int_t id = json_integer_value(v);
    if (id < 0 || id >= (json_int_t)TDM_TOK_MAX_VOCAB)
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s: id %lld out of range [0, %u)", where,
                                (long long)id, TDM_TOK_MAX_VOCAB);
    *ret = (uint32_t)id;
    return TDM_OK;
}

static tdm_status_t parse_model(tok_load_t *c, json_t *m, json_t **ret_vocab)
{
    tdm_tok_t *tok = c->tok;
    if (!json_is_object(m))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "model: missing or not an object");
    json_t *type = json_object_get(m, "type");
    if (type && !json_is_string(type))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "model.type: expected a string");
    if (type && strcmp(json_string_value(type), "BPE") != 0)
        return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED,
                                "model.type: \"%s\" is not supported (BPE only)",
                                json_string_value(type));
    json_t *dropout = json_object_get(m, "dropout");
    if (dropout && !json_is_null(dropout) &&
        !(json_is_number(dropout) && json_number_value(dropout) == 0.0))
        return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED, "model.dropout: only null is supported");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(m, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return tdm_tok_load_bad(c, TDM_ERR_UNSUPPORTED, "model.%s: only null is supported",
                                    affixes[i]);
    }
    TDM_TRY(tdm_tok_load_get_bool(c, m, "fuse_unk", "model", 0, &tok->fuse_unk));
    TDM_TRY(tdm_tok_load_get_bool(c, m, "byte_fallback", "model", 0, &tok->byte_fallback));
    TDM_TRY(tdm_tok_load_get_bool(c, m, "ignore_merges", "model", 0, &tok->ignore_merges));

    json_t *vocab = json_object_get(m, "vocab");
    if (!json_is_object(vocab))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "model.vocab: missing or not an object");
    tdm_tok_smap_init(&tok->vocab, json_object_size(vocab));
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val)
    {
        uint32_t id;
        char where[96];
        snprintf(where, sizeof(where), "model.vocab[\"%.40s\"]", key);
        TDM_TRY(tdm_tok_load_get_id(c, val, where, &id));
        /* jansson keys are NUL-terminated: tokens containing U+0000 are not representable */
        size_t klen = strlen(key);
        const char *k = tdm_tok_arena_memdup(&tok->pool, key, klen);
        tdm_tok_smap_put(&tok->vocab, k, klen, id);
    }

    json_t *merges = json_object_get(m, "merges");
    if (merges && !json_is_null(merges) && !json_is_array(merges))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "model.merges: expected an array");
    size_t nm = json_array_size(merges);
    tdm_tok_pmap_init(&tok->merges, nm);
    char *tmp = NULL;
    size_t tmp_cap = 0;
    tdm_status_t st = TDM_OK;
    for (size_t i = 0; i < nm; i++) {
        json_t *e = json_array_get(merges, i);
        const char *a, *b;
        size_t alen, blen;
        if (json_is_string(e)) {
            a = json_string_value(e);
            const char *sp = memchr(a, ' ', json_string_length(e));
            if (!sp || memchr(sp + 1, ' ', json_string_length(e) - (size_t)(sp + 1 - a))) {
                st = tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                                      "model.merges[%zu]: expected \"left right\"", i);
                goto out;
            }
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = json_string_length(e) - alen - 1;
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            alen = json_string_length(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            blen = json_string_length(json_array_get(e, 1));
        } else {
            st = tdm_tok_load_bad(
                c, TDM_ERR_FORMAT,
                "model.merges[%zu]: expected \"left right\" or [\"left\", \"right\"]", i);
            goto out;
        }
        uint32_t ia, ib, im;
        if (!tdm_tok_smap_get(&tok->vocab, a, alen, &ia) ||
            !tdm_tok_smap_get(&tok->vocab, b, blen, &ib)) {
            st = tdm_tok_load_bad(c, TDM_ERR_FORMAT, "model.merges[%zu]: \"%.*s\" not in vocab", i,
                                  (int)(tdm_tok_smap_get(&tok->vocab, a, alen, &ia)
                                            ? (blen > 40 ? 40 : blen)
                                            : (alen > 40 ? 40 : alen)),
                                  tdm_tok_smap_get(&tok->vocab, a, alen, &ia) ? b : a);
            goto out;
        }
        if (alen + blen > tmp_cap) {
            tmp_cap = (alen + blen) * 2;
            tmp = tdm_realloc(tmp, tmp_cap);
        }
        memcpy(tmp, a, alen);
        memcpy(tmp + alen, b, blen);
        if (!tdm_tok_smap_get(&tok->vocab, tmp, alen + blen, &im)) {
            st = tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                                  "model.merges[%zu]: merged token \"%.*s\" not in vocab", i,
                                  (int)(alen + blen > 40 ? 40 : alen + blen), tmp);
            goto out;
        }
        tdm_tok_pmap_put(&tok->merges, ia, ib, (uint32_t)i, im);
    }

    json_t *unk;
    TDM_CHECK_GOTO(tdm_tok_load_get_str(c, m, "unk_token", "model", 0, &unk), st, out);
    tok->unk_id = TDM_TOK_NO_ID;
    if (unk && !tdm_tok_smap_get(&tok->vocab, json_string_value(unk), json_string_length(unk),
                                 &tok->unk_id)) {
        st = tdm_tok_load_bad(c, TDM_ERR_FORMAT, "model.unk_token: \"%.40s\" not in vocab",
                              json_string_value(unk));
        goto out;
    }
    for (int bt = 0; bt < 256; bt++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", bt);
        if (!tdm_tok_smap_get(&tok->vocab, name, 6, &tok->byte_id[bt]))
            tok->byte_id[bt] = TDM_TOK_NO_ID;
    }
    *ret_vocab = vocab;
out:
    tdm_free(tmp);
    return st;
}

static tdm_status_t parse_added(tok_load_t *c, json_t *arr)
{
    tdm_tok_t *tok = c->tok;
    if (!arr || json_is_null(arr))
        return TDM_OK;
    if (!json_is_array(arr))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "added_tokens: expected an array");
    size_t n = json_array_size(arr);
    tok->added = tdm_calloc(n + 1, sizeof(tok_added_t));
    tdm_tok_smap_init(&tok->added_map, n);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i), *content;
        char where[64];
        snprintf(where, sizeof(where), "added_tokens[%zu]", i);
        if (!json_is_object(o))
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s: expected an object", where);
        tok_added_t *t = &tok->added[i];
        int sw = 0, ls = 0, rs = 0, norm = 0, spec = 0;
        TDM_TRY(tdm_tok_load_get_id(c, json_object_get(o, "id"), where, &t->id));
        TDM_TRY(tdm_tok_load_get_str(c, o, "content", where, 1, &content));
        TDM_TRY(tdm_tok_load_get_bool(c, o, "single_word", where, 0, &sw));
        TDM_TRY(tdm_tok_load_get_bool(c, o, "lstrip", where, 0, &ls));
        TDM_TRY(tdm_tok_load_get_bool(c, o, "rstrip", where, 0, &rs));
        TDM_TRY(tdm_tok_load_get_bool(c, o, "special", where, 0, &spec));
        TDM_TRY(tdm_tok_load_get_bool(c, o, "normalized", where, !spec, &norm));
        t->content = tdm_tok_load_dup_str(c, content, &t->len);
        t->single_word = (uint8_t)sw;
        t->lstrip = (uint8_t)ls;
        t->rstrip = (uint8_t)rs;
        t->special = (uint8_t)spec;
        t->normalized = (uint8_t)norm;
        if (tdm_tok_utf8_valid_prefix((const uint8_t *)t->content, t->len) != t->len)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "%s.content: not valid UTF-8", where);
        tok->n_added++;
        tdm_tok_smap_put(&tok->added_map, t->content, t->len, t->id);
    }
    return TDM_OK;
}

/* id tables: vocab ids must be unique; an added token may share the id of its vocab entry. */
static tdm_status_t build_ids(tok_load_t *c, json_t *vocab)
{
    tdm_tok_t *tok = c->tok;
    uint32_t max = 0;
    int any = 0;
    for (size_t i = 0; i < tok->vocab.n; i++) {
        any = 1;
        if (tok->vocab.ent[i].val > max)
            max = tok->vocab.ent[i].val;
    }
    for (size_t i = 0; i < tok->n_added; i++) {
        any = 1;
        if (tok->added[i].id > max)
            max = tok->added[i].id;
    }
    size_t size = any ? (size_t)max + 1 : 0;
    if (size > tok->vocab.n + tok->n_added + TOK_ID_SLACK)
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                                "model.vocab: id %u out of range (only %zu tokens listed)", max,
                                tok->vocab.n + tok->n_added);
    tok->vocab_size = (uint32_t)size;
    tok->id_str = tdm_calloc(size + 1, sizeof(char *));
    tok->id_len = tdm_calloc(size + 1, sizeof(uint32_t));
    tok->id_flags = tdm_calloc(size + 1, 1);
    for (size_t i = 0; i < tok->vocab.n; i++) {
        const struct tok_smap_ent *e = &tok->vocab.ent[i];
        if (tok->id_flags[e->val] & TOK_ID_VOCAB)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                                    "model.vocab: id %u used by both \"%.40s\" and \"%.40s\"",
                                    e->val, tok->id_str[e->val], e->s);
        tok->id_str[e->val] = e->s;
        tok->id_len[e->val] = e->len;
        tok->id_flags[e->val] |= TOK_ID_VOCAB;
    }
    (void)vocab;
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added_t *t = &tok->added[i];
        if (tok->id_flags[t->id] & TOK_ID_ADDED)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "added_tokens[%zu].id: id %u used twice", i,
                                    t->id);
        tok->id_str[t->id] = t->content;
        tok->id_len[t->id] = (uint32_t)t->len;
        tok->id_flags[t->id] |= TOK_ID_ADDED | (t->special ? TOK_ID_SPECIAL : 0);
    }
    for (size_t i = 0; i < tok->n_tpl_pre; i++)
        if (tok->tpl_pre[i] >= size)
            return tdm_tok_load_bad(c, TDM_ERR_FORMAT,
                                    "post_processor: template id %u out of range", tok->tpl_pre[i]);
    for (size_t i = 0; i < tok->n_tpl_post; i++)
        if (tok->tpl_post[i] >= size)
            return tdm_tok_load_bad(
                c, TDM_ERR_FORMAT, "post_processor: template id %u out of range", tok->tpl_post[i]);
    return TDM_OK;
}

static int added_cmp_len(const void *pa, const void *pb, void *arg)
{
    const tdm_tok_t *tok = arg;
    const tok_added_t *a = &tok->added[*(const uint32_t *)pa],
                      *b = &tok->added[*(const uint32_t *)pb];
    size_t la = a->normalized ? a->norm_len : a->len, lb = b->normalized ? b->norm_len : b->len;
    if (la != lb)
        return la > lb ? -1 : 1;
    /* same length: the earlier token wins, as aho-corasick's pattern order does */
    return *(const uint32_t *)pa < *(const uint32_t *)pb ? -1 : 1;
}

static tdm_status_t build_matcher(tok_load_t *c, tok_amatch_t *m, int use_norm)
{
    tdm_tok_t *tok = c->tok;
    size_t cnt[256] = {0};
    m->use_norm = use_norm;
    m->idx = tdm_calloc(tok->n_added + 1, sizeof(uint32_t));
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added_t *t = &tok->added[i];
        if (t->normalized != use_norm)
            continue;
        size_t len = use_norm ? t->norm_len : t->len;
        const char *s = use_norm ? t->norm : t->content;
        if (len)
            cnt[(uint8_t)s[0]]++;
    }
    m->start[0] = 0;
    for (int b = 0; b < 256; b++)
        m->start[b + 1] = m->start[b] + (uint32_t)cnt[b];
    uint32_t fill[256];
    memcpy(fill, m->start, sizeof(fill));
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added_t *t = &tok->added[i];
        if (t->normalized != use_norm)
            continue;
        size_t len = use_norm ? t->norm_len : t->len;
        const char *s = use_norm ? t->norm : t->content;
        if (len)
            m->idx[fill[(uint8_t)s[0]]++] = (uint32_t)i;
    }
    for (int b = 0; b < 256; b++)
        qsort_r(m->idx + m->start[b], m->start[b + 1] - m->start[b], sizeof(uint32_t),
                added_cmp_len, tok);
    return TDM_OK;
}

static tdm_status_t parse_root(tok_load_t *c, json_t *root)
{
    tdm_tok_t *tok = c->tok;
    json_t *vocab = NULL, *v;
    if (!json_is_object(root))
        return tdm_tok_load_bad(c, TDM_ERR_FORMAT, "tokenizer.json: expected a JSON object");
    TDM_TRY(parse_model(c, json_object_get(root, "model"), &vocab));
    TDM_TRY(parse_added(c, json_object_get(root, "added_tokens")));
    if ((v = json_object_get(root, "normalizer")) && !json_is_null(v))
        TDM_TRY(tdm_tok_load_norm(c, v, "normalizer", 0));
    if ((v = json_object_get(root, "pre_tokenizer")) && !json_is_null(v))
        TDM_TRY(tdm_tok_load_pre(c, v, "pre_tokenizer", 0));
    if ((v = json_object_get(root, "decoder")) && !json_is_null(v)) {
        tok->has_decoder = 1;
        TDM_TRY(tdm_tok_load_dec(c, v, "decoder", 0));
    }
    if ((v = json_object_get(root, "post_processor")) && !json_is_null(v))
        TDM_TRY(tdm_tok_load_post(c, v, "post_processor", 0));
    TDM_TRY(build_ids(c, vocab));
    /* normalized added tokens match the normalized text, so their pattern is normalized too */
    tdm_arena_t scratch;
    tdm_arena_init(&scratch, 4096, 0);
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added_t *t = &tok->added[i];
        if (!t->normalized)
            continue;
        size_t nl;
        char *ns = tdm_tok_normalize(tok, &scratch, t->content, t->len, &nl);
        if (!ns) {
            tdm_arena_free(&scratch);
            return tdm_tok_load_bad(c, TDM_ERR_OVERFLOW,
                                    "added_tokens[%zu]: normalization too large", i);
        }
        t->norm = tdm_tok_arena_memdup(&tok->pool, ns, nl);
        t->norm_len = nl;
    }
    tdm_arena_free(&scratch);
    TDM_TRY(build_matcher(c, &tok->match_raw, 0));
    TDM_TRY(build_matcher(c, &tok->match_norm, 1));
    return TDM_OK;
}

tdm_status_t tdm_tok_load_mem(const char *json, size_t len, tdm_tok_t **ret_tok, char *err,
                              size_t errlen)
{
    tok_load_t c = {.err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = '\0';
    if (len > TDM_TOK_MAX_FILE_BYTES)
        return tdm_tok_load_bad(&c, TDM_ERR_OVERFLOW,
                                "tokenizer.json: %zu bytes exceeds the %zu limit", len,
                                TDM_TOK_MAX_FILE_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return tdm_tok_load_bad(&c, TDM_ERR_FORMAT, "tokenizer.json: line %d column %d: %s",
                                jerr.line, jerr.column, jerr.text);
    tdm_tok_t *tok = tdm_calloc(1, sizeof(*tok));
    tdm_arena_init(&tok->pool, 1 << 16, 0);
    tok->unk_id = TDM_TOK_NO_ID;
    c.tok = tok;
    tdm_status_t st = parse_root(&c, root);
    json_decref(root);
    if (st != TDM_OK) {
        tdm_tok_free(tok);
        return st;
    }
    *ret_tok = tok;
    return TDM_OK;
}

tdm_status_t tdm_tok_load(const char *path, tdm_tok_t **ret_tok, char *err, size_t errlen)
{
    tok_load_t c = {.err = err, .errlen = errlen};
    FILE *f = fopen(path, "rb");
    if (!f)
        return tdm_tok_load_bad(&c, errno == ENOENT ? TDM_ERR_NOTFOUND : TDM_ERR_IO, "%s: %s", path,
                                strerror(errno));
    tdm_status_t st;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = tdm_tok_load_bad(&c, TDM_ERR_IO, "%s: cannot seek", path);
        goto err_close;
    }
    long n = ftell(f);
    if (n < 0) {
        st = tdm_tok_load_bad(&c, TDM_ERR_IO, "%s: cannot size", path);
        goto err_close;
    }
    if ((size_t)n > TDM_TOK_MAX_FILE_BYTES) {
        st = tdm_tok_load_bad(&c, TDM_ERR_OVERFLOW, "%s: %ld bytes exceeds the %zu limit", path, n,
                              TDM_TOK_MAX_FILE_BYTES);
        goto err_close;
    }
    rewind(f);
    buf = malloc((size_t)n + 1);
    if (!buf) {
        st = tdm_tok_load_bad(&c, TDM_ERR_NOMEM, "%s: cannot allocate %ld bytes", path, n);
        goto err_close;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        st = tdm_tok_load_bad(&c, TDM_ERR_IO, "%s: short read", path);
        goto err_free;
    }
    st = tdm_tok_load_mem(buf, (size_t)n, ret_tok, err, errlen);
err_free:
    free(buf);
err_close:
    fclose(f);
    return st;
}

void tdm_tok_free(tdm_tok_t *tok)
{
    if (!tok)
        return;
    tdm_tok_smap_free(&tok->vocab);
    tdm_tok_pmap_free(&tok->merges);
    tdm_tok_smap_free(&tok->added_map);
    tdm_free(tok->added);
    tdm_free(tok->match_raw.idx);
    tdm_free(tok->match_norm.idx);
    tdm_free(tok->id_str);
    tdm_free(tok->id_len);
    tdm_free(tok->id_flags);
    tdm_free(tok->tpl_pre);
    tdm_free(tok->tpl_post);
    tdm_arena_free(&tok->pool);
    tdm_free(tok);
}
