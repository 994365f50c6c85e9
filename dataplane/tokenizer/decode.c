/*
 * decode.c — ids → text through the decoder chain (each step maps a list of token strings to a
 * list of strings, as HF's Decoder::decode_chain does; the result is their concatenation), the
 * streaming decoder (HF DecodeStream: re-decode a short window of context + pending ids and emit
 * only what extends the previous window's text, holding back text ending in U+FFFD), and the
 * id/token lookups.
 */
#include "config.h"

#include <string.h>

#include <tdm/mem.h>

#include "tok_int.h"

typedef struct slist {
    char **s;
    size_t *len;
    size_t n, cap;
} slist_t;

static void sl_push(slist_t *l, tdm_arena_t *a, const char *s, size_t len)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 32;
        l->s = tdm_realloc(l->s, l->cap * sizeof(char *));
        l->len = tdm_realloc(l->len, l->cap * sizeof(size_t));
    }
    l->s[l->n] = tdm_tok_arena_memdup(a, s, len);
    l->len[l->n++] = len;
}

static void sl_free(slist_t *l)
{
    tdm_free(l->s);
    tdm_free(l->len);
    memset(l, 0, sizeof(*l));
}

static void join(const slist_t *l, const char *sep, tok_buf_t *b)
{
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep)
            tdm_tok_buf_put(b, sep, strlen(sep));
        tdm_tok_buf_put(b, l->s[i], l->len[i]);
    }
}

/* "<0xNN>" as Rust's u8::from_str_radix(&t[3..5], 16) reads it (a leading '+' is accepted). */
static int byte_token(const char *t, size_t n, uint8_t *ret)
{
    if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>')
        return 0;
    unsigned v = 0;
    for (int i = 3; i < 5; i++) {
        char c = t[i];
        unsigned d;
        if (i == 3 && c == '+')
            continue;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            d = (unsigned)((c | 0x20) - 'a' + 10);
        else
            return 0;
        v = v * 16 + d;
    }
    *ret = (uint8_t)v;
    return 1;
}

static void dec_step(const tok_dec_t *d, tdm_arena_t *a, const slist_t *in, slist_t *out)
{
    out->n = 0;
    tok_buf_t b = {0};
    switch (d->kind) {
    case TOK_DEC_BYTELEVEL: {
        for (size_t i = 0; i < in->n; i++) {
            const uint8_t *s = (const uint8_t *)in->s[i];
            size_t n = in->len[i], start = b.len;
            int all = 1;
            for (size_t j = 0; j < n;) {
                uint32_t cp;
                size_t w = tdm_tok_utf8_next(s + j, n - j, &cp);
                int byte = tdm_tok_bytelevel_byte(cp);
                if (byte < 0) {
                    all = 0;
                    break;
                }
                uint8_t c = (uint8_t)byte;
                tdm_tok_buf_put(&b, &c, 1);
                j += w;
            }
            if (!all) {
                b.len = start;
                tdm_tok_buf_put(&b, s, n);
            }
        }
        size_t ln;
        char *lossy = tdm_tok_utf8_lossy((const uint8_t *)(b.p ? b.p : ""), b.len, &ln);
        sl_push(out, a, lossy, ln);
        tdm_free(lossy);
        break;
    }
    case TOK_DEC_METASPACE:
    case TOK_DEC_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            b.len = 0;
            const char *s = in->s[i];
            size_t n = in->len[i];
            for (size_t j = 0; j < n;) {
                if (j + d->alen <= n && memcmp(s + j, d->a, d->alen) == 0) {
                    if (d->kind == TOK_DEC_REPLACE)
                        tdm_tok_buf_put(&b, d->b, d->blen);
                    else if (!(i == 0 && d->scheme != TOK_SCHEME_NEVER))
                        tdm_tok_buf_put(&b, " ", 1);
                    j += d->alen;
                } else {
                    tdm_tok_buf_put(&b, s + j, 1);
                    j++;
                }
            }
            sl_push(out, a, b.p ? b.p : "", b.len);
        }
        break;
    case TOK_DEC_BYTEFALLBACK: {
        size_t pending = 0;
        for (size_t i = 0; i <= in->n; i++) {
            uint8_t byte;
            if (i < in->n && byte_token(in->s[i], in->len[i], &byte)) {
                tdm_tok_buf_put(&b, &byte, 1);
                pending++;
                continue;
            }
            if (pending) {
                if (tdm_tok_utf8_valid_prefix((const uint8_t *)b.p, b.len) == b.len)
                    sl_push(out, a, b.p, b.len);
                else
                    for (size_t k = 0; k < pending; k++)
                        sl_push(out, a, "\xEF\xBF\xBD", 3);
                b.len = 0;
                pending = 0;
            }
            if (i < in->n)
                sl_push(out, a, in->s[i], in->len[i]);
        }
        break;
    }
    case TOK_DEC_FUSE:
        join(in, NULL, &b);
        sl_push(out, a, b.p ? b.p : "", b.len);
        break;
    case TOK_DEC_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            const uint8_t *s = (const uint8_t *)in->s[i];
            size_t n = in->len[i], st = 0, en = n;
            for (size_t k = 0; k < d->start && st < n; k++) {
                uint32_t cp;
                size_t w = tdm_tok_utf8_next(s + st, n - st, &cp);
                if (cp != d->content)
                    break;
                st += w;
            }
            for (size_t k = 0; k < d->stop && en > st; k++) {
                size_t q = en - 1;
                while (q > st && (s[q] & 0xC0) == 0x80)
                    q--;
                uint32_t cp;
                tdm_tok_utf8_next(s + q, en - q, &cp);
                if (cp != d->content)
                    break;
                en = q;
            }
            sl_push(out, a, (const char *)s + st, en - st);
        }
        break;
    }
    tdm_tok_buf_free(&b);
}

tdm_status_t tdm_tok_decode(const tdm_tok_t *tok, const uint32_t *ids, size_t n, int skip_special,
                            char **ret_text, size_t *ret_len)
{
    if (!tok || (!ids && n))
        return TDM_ERR_INVAL;
    tdm_arena_t a;
    tdm_arena_init(&a, 1 << 14, 0);
    slist_t l1 = {0}, l2 = {0};
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= tok->vocab_size || !tok->id_str[id])
            continue;
        if (skip_special && (tok->id_flags[id] & TOK_ID_SPECIAL))
            continue;
        sl_push(&l1, &a, tok->id_str[id], tok->id_len[id]);
    }
    slist_t *in = &l1, *out = &l2;
    for (size_t i = 0; i < tok->n_dec; i++) {
        dec_step(&tok->dec[i], &a, in, out);
        slist_t *t = in;
        in = out;
        out = t;
    }
    tok_buf_t b = {0};
    join(in, tok->has_decoder ? NULL : " ", &b);
    if (!b.p)
        tdm_tok_buf_put(&b, "", 0);
    sl_free(&l1);
    sl_free(&l2);
    tdm_arena_free(&a);
    *ret_text = b.p;
    *ret_len = b.len;
    return TDM_OK;
}

/* ---- streaming ---- */

struct tdm_tok_stream {
    const tdm_tok_t *tok;
    int skip_special;
    uint32_t *ids;
    size_t n, cap;
    size_t prefix_index;
    char *prefix;
    size_t prefix_len;
};

tdm_status_t tdm_tok_stream_init(const tdm_tok_t *tok, int skip_special, tdm_tok_stream_t **ret)
{
    if (!tok)
        return TDM_ERR_INVAL;
    tdm_tok_stream_t *s = tdm_calloc(1, sizeof(*s));
    s->tok = tok;
    s->skip_special = skip_special;
    s->prefix = tdm_strdup("");
    *ret = s;
    return TDM_OK;
}

static int ends_with_fffd(const char *s, size_t n)
{
    return n >= 3 && memcmp(s + n - 3, "\xEF\xBF\xBD", 3) == 0;
}

tdm_status_t tdm_tok_stream_step(tdm_tok_stream_t *s, uint32_t id, char **ret_text, size_t *ret_len)
{
    if (!s)
        return TDM_ERR_INVAL;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->ids = tdm_realloc(s->ids, s->cap * sizeof(uint32_t));
    }
    s->ids[s->n++] = id;
    char *str;
    size_t len;
    TDM_TRY(tdm_tok_decode(s->tok, s->ids, s->n, s->skip_special, &str, &len));
    if (len <= s->prefix_len || ends_with_fffd(str, len)) {
        tdm_free(str);
        *ret_text = tdm_strdup("");
        *ret_len = 0;
        return TDM_OK;
    }
    if (memcmp(str, s->prefix, s->prefix_len) != 0) {
        tdm_free(str);
        return TDM_ERR_STATE; /* the decoder is not prefix-stable for these ids */
    }
    char *out = tdm_tok_memdup(str + s->prefix_len, len - s->prefix_len);
    size_t out_len = len - s->prefix_len;
    tdm_free(str);
    /* keep ids from prefix_index on as the context of the next step */
    size_t new_prefix_index = s->n - s->prefix_index;
    memmove(s->ids, s->ids + s->prefix_index, new_prefix_index * sizeof(uint32_t));
    s->n = new_prefix_index;
    tdm_free(s->prefix);
    tdm_status_t st =
        tdm_tok_decode(s->tok, s->ids, s->n, s->skip_special, &s->prefix, &s->prefix_len);
    if (st != TDM_OK) {
        s->prefix = tdm_strdup("");
        s->prefix_len = 0;
        tdm_free(out);
        return st;
    }
    s->prefix_index = new_prefix_index;
    *ret_text = out;
    *ret_len = out_len;
    return TDM_OK;
}

tdm_status_t tdm_tok_stream_flush(tdm_tok_stream_t *s, char **ret_text, size_t *ret_len)
{
    if (!s)
        return TDM_ERR_INVAL;
    char *str;
    size_t len;
    TDM_TRY(tdm_tok_decode(s->tok, s->ids, s->n, s->skip_special, &str, &len));
    if (len > s->prefix_len && memcmp(str, s->prefix, s->prefix_len) == 0) {
        *ret_len = len - s->prefix_len;
        *ret_text = tdm_tok_memdup(str + s->prefix_len, *ret_len);
        tdm_free(s->prefix);
        s->prefix = str;
        s->prefix_len = len;
        return TDM_OK;
    }
    tdm_free(str);
    *ret_text = tdm_strdup("");
    *ret_len = 0;
    return TDM_OK;
}

void tdm_tok_stream_free(tdm_tok_stream_t *s)
{
    if (!s)
        return;
    tdm_free(s->ids);
    tdm_free(s->prefix);
    tdm_free(s);
}

/* ---- lookups ---- */

uint32_t tdm_tok_token_id(const tdm_tok_t *tok, const char *token)
{
    uint32_t id;
    size_t n = strlen(token);
    if (tdm_tok_smap_get(&tok->added_map, token, n, &id) ||
        tdm_tok_smap_get(&tok->vocab, token, n, &id))
        return id;
    return TDM_TOK_NO_ID;
}

const char *tdm_tok_id_token(const tdm_tok_t *tok, uint32_t id)
{
    return id < tok->vocab_size ? tok->id_str[id] : NULL;
}

int tdm_tok_is_special(const tdm_tok_t *tok, uint32_t id)
{
    return id < tok->vocab_size && (tok->id_flags[id] & TOK_ID_SPECIAL) != 0;
}

uint32_t tdm_tok_vocab_size(const tdm_tok_t *tok)
{
    return tok->vocab_size;
}

uint32_t tdm_tok_bos_id(const tdm_tok_t *tok)
{
    return tok->n_tpl_pre ? tok->tpl_pre[0] : TDM_TOK_NO_ID;
}
