/*
 * chat_int.h — internals shared by the chat renderers (chat.c), the Python value formatting they
 * need (chat_py.c) and the DSML parser (dsml.c): a growable byte buffer and Python's str(),
 * json.dumps() and str.strip() semantics over jansson values.
 */
#ifndef TDM_TOKENIZER_CHAT_INT_H
#define TDM_TOKENIZER_CHAT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include <tdm/mem.h>
#include <tdm/status.h>

/* A growable byte buffer, always NUL-terminated once anything was appended. `cap_limit` (0 = no
 * limit) bounds what a client can make us build: appends past it fail with TDM_ERR_OVERFLOW and
 * leave the buffer unchanged. */
typedef struct tdm_sbuf {
    char *p;
    size_t len, cap, cap_limit;
} tdm_sbuf_t;

static inline tdm_status_t tdm_sbuf_add(tdm_sbuf_t *b, const char *s, size_t n)
{
    size_t need;
    if (tdm_size_add(b->len, n, &need) != TDM_OK || need == SIZE_MAX)
        return TDM_ERR_OVERFLOW;
    if (b->cap_limit && need > b->cap_limit)
        return TDM_ERR_OVERFLOW;
    need++; /* the NUL */
    if (need > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < need)
            nc = nc > SIZE_MAX / 2 ? need : nc * 2;
        b->p = tdm_realloc(b->p, nc);
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return TDM_OK;
}

static inline tdm_status_t tdm_sbuf_puts(tdm_sbuf_t *b, const char *s)
{
    return tdm_sbuf_add(b, s, strlen(s));
}

static inline void tdm_sbuf_free(tdm_sbuf_t *b)
{
    tdm_free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* Python float.__repr__ of v (shortest round-trip digits, "1e-05", "100.0", "1e+16"). buf needs
 * 32 bytes. Non-finite values print as Python's json does: NaN, Infinity, -Infinity. */
void tdm_py_float_repr(double v, char buf[32]);
/* Python json.dumps(v, ensure_ascii=False) with default separators (", ", ": "), keys in
 * insertion order: what transformers' `tojson` filter emits. */
tdm_status_t tdm_py_json_dumps(tdm_sbuf_t *b, const json_t *v);
/* The same with indent (<0: none, separators ", " ": "; >=0: newlines, "," ": ") and sort_keys,
 * at nesting `level`; deeper than max_level: TDM_ERR_RANGE (jinja's `tojson`). */
tdm_status_t tdm_py_json_dumps_ex(tdm_sbuf_t *b, const json_t *v, int indent, int sort_keys,
                                  int level, int max_level);
/* JSON string body escaping as Python's json.dumps(ensure_ascii=False) does (no quotes added). */
tdm_status_t tdm_py_json_escape(tdm_sbuf_t *b, const char *s, size_t n);
/* Python str(v) of the value json.loads would give: strings as-is, True/False/None, float repr,
 * dicts and lists as Python's repr. */
tdm_status_t tdm_py_str(tdm_sbuf_t *b, const json_t *v);
/* Python str.strip() with no argument (Unicode whitespace) on UTF-8 text: [*ret_off, +*ret_len). */
/* UTF-8 decode the code point at s[i] (valid UTF-8 assumed: jansson validated it); *len gets its
 * byte length (1 for a sequence cut short by n). */
uint32_t tdm_py_utf8_decode(const char *s, size_t n, size_t i, size_t *len);
/* str.isspace() for one code point: Unicode White_Space minus U+180E plus the C0 separators
 * 0x1c..0x1f, i.e. bidi class WS/B/S or category Zs. */
int tdm_py_isspace(uint32_t cp);
void tdm_py_strip(const char *s, size_t n, size_t *ret_off, size_t *ret_len);

#endif
