/*
 * jinja_lex.c — template source → tokens, with jinja2's whitespace rules as transformers
 * configures them.
 *
 * The source is first normalised the way jinja2 does (line endings to "\n", one trailing newline
 * dropped: keep_trailing_newline=False). Text between tags becomes one JT_TEXT token after
 * whitespace control: a "-" on the neighbouring tag strips all whitespace on that side;
 * otherwise trim_blocks drops the first newline after a block or comment tag, and lstrip_blocks
 * drops the spaces and tabs between the start of a line and a block or comment tag ("+" turns it
 * off for that tag). Inside tags, brackets are balanced so "}}" in a nested dict does not end
 * the tag; string literals are unescaped as Python's unicode-escape codec does.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>

#include "jinja_int.h"

#define SET_ERR(...) ((void)(err && errlen ? snprintf(err, errlen, __VA_ARGS__) : 0))

typedef struct lexer {
    const char *s;
    size_t n;
    jtok_t *t;
    size_t nt, cap;
    char *err;
    size_t errlen;
} lexer_t;

static jtok_t *push(lexer_t *L, jtok_kind_t k, int line, const char *s, size_t len)
{
    if (L->nt == L->cap) {
        L->cap = L->cap ? L->cap * 2 : 64;
        L->t = tdm_realloc(L->t, L->cap * sizeof(*L->t));
    }
    jtok_t *t = &L->t[L->nt++];
    memset(t, 0, sizeof(*t));
    t->kind = k;
    t->line = line;
    t->s = tdm_malloc(len + 1);
    if (len)
        memcpy(t->s, s, len);
    t->s[len] = '\0';
    t->len = len;
    return t;
}

void tdm_jinja_toks_free(jtok_t *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++)
        tdm_free(t[i].s);
    tdm_free(t);
}

static int is_sp(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static void put_utf8(tdm_sbuf_t *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    (void)tdm_sbuf_add(b, u, n);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A string literal starting at s[*i] (the quote); unescaped into a JT_STRING token. */
static int lex_string(lexer_t *L, size_t *i, int *line)
{
    char *err = L->err;
    size_t errlen = L->errlen;
    const char *s = L->s;
    char q = s[*i];
    size_t k = *i + 1;
    int line0 = *line;
    tdm_sbuf_t b = {0};
    (void)tdm_sbuf_add(&b, "", 0);
    while (k < L->n && s[k] != q) {
        if (s[k] == '\n')
            (*line)++;
        if (s[k] != '\\' || k + 1 >= L->n) {
            (void)tdm_sbuf_add(&b, s + k++, 1);
            continue;
        }
        char e = s[k + 1];
        static const char simple_in[] = "nrtabfv\\'\"0";
        static const char simple_out[] = "\n\r\t\a\b\f\v\\'\"";
        const char *p = e ? strchr(simple_in, e) : NULL;
        if (e == '\n') { /* backslash-newline continues the line */
            (*line)++;
            k += 2;
        } else if (p && e != '0') {
            (void)tdm_sbuf_add(&b, &simple_out[p - simple_in], 1);
            k += 2;
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < nd; d++) {
                int h = k + 2 + (size_t)d < L->n ? hexval(s[k + 2 + d]) : -1;
                if (h < 0) {
                    SET_ERR("line %d: truncated \\%c escape in a string literal", *line, e);
                    tdm_sbuf_free(&b);
                    return -1;
                }
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                SET_ERR("line %d: escape \\%c outside Unicode scalar values", *line, e);
                tdm_sbuf_free(&b);
                return -1;
            }
            put_utf8(&b, cp);
            k += 2 + (size_t)nd;
        } else if (e >= '0' && e <= '7') {
            uint32_t cp = 0;
            size_t d = 0;
            while (d < 3 && k + 1 + d < L->n && s[k + 1 + d] >= '0' && s[k + 1 + d] <= '7')
                cp = cp * 8 + (uint32_t)(s[k + 1 + d++] - '0');
            put_utf8(&b, cp);
            k += 1 + d;
        } else { /* unknown escape: kept as written */
            (void)tdm_sbuf_add(&b, s + k, 2);
            k += 2;
        }
    }
    if (k >= L->n) {
        SET_ERR("line %d: unterminated string literal", line0);
        tdm_sbuf_free(&b);
        return -1;
    }
    jtok_t *t = push(L, JT_STRING, line0, b.p, b.len);
    (void)t;
    tdm_sbuf_free(&b);
    *i = k + 1;
    return 0;
}

/* Tokens of one tag's inside, from *i up to and including its end marker. Returns the end
 * marker's '-' (strip after) / '+' flag through *ret_rstrip. */
static int lex_tag(lexer_t *L, size_t *i, int *line, char close, int *ret_rstrip)
{
    char *err = L->err;
    size_t errlen = L->errlen;
    static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
    const char *s = L->s;
    int depth = 0;
    size_t k = *i;
    int line0 = *line;
    while (k < L->n) {
        char c = s[k];
        if (is_sp(c)) {
            *line += c == '\n';
            k++;
            continue;
        }
        if (depth == 0) {
            size_t m = k + ((c == '-' || c == '+') ? 1 : 0);
            if (m + 1 < L->n && s[m] == close && s[m + 1] == '}' &&
                (m == k || c != '+' || close == '%')) {
                *ret_rstrip = m == k ? 0 : c;
                push(L, close == '}' ? JT_VAR_END : JT_BLOCK_END, *line, "", 0);
                *i = m + 2;
                return 0;
            }
        }
        if (is_alpha(c)) {
            size_t e = k;
            while (e < L->n && (is_alpha(s[e]) || is_digit(s[e])))
                e++;
            push(L, JT_NAME, *line, s + k, e - k);
            k = e;
            continue;
        }
        if (is_digit(c)) {
            size_t e = k;
            int is_float = 0;
            while (e < L->n && (is_digit(s[e]) || s[e] == '_'))
                e++;
            if (e + 1 < L->n && s[e] == '.' && is_digit(s[e + 1])) {
                is_float = 1;
                for (e++; e < L->n && (is_digit(s[e]) || s[e] == '_'); e++)
                    ;
            }
            if (e < L->n && (s[e] == 'e' || s[e] == 'E')) {
                size_t x = e + 1 + (e + 1 < L->n && (s[e + 1] == '+' || s[e + 1] == '-'));
                if (x < L->n && is_digit(s[x])) {
                    is_float = 1;
                    for (e = x; e < L->n && is_digit(s[e]); e++)
                        ;
                }
            }
            char num[64];
            size_t nn = 0;
            for (size_t q = k; q < e && nn < sizeof(num) - 1; q++)
                if (s[q] != '_')
                    num[nn++] = s[q];
            num[nn] = '\0';
            jtok_t *t = push(L, is_float ? JT_FLOAT : JT_INT, *line, s + k, e - k);
            if (is_float) {
                t->f = strtod(num, NULL);
            } else {
                char *endp;
                t->i = strtoll(num, &endp, 10);
                if (nn > 18) {
                    SET_ERR("line %d: integer literal out of range", *line);
                    return -1;
                }
            }
            k = e;
            continue;
        }
        if (c == '\'' || c == '"') {
            if (lex_string(L, &k, line) != 0)
                return -1;
            continue;
        }
        size_t oplen = 0;
        for (size_t o = 0; o < sizeof(ops2) / sizeof(ops2[0]); o++)
            if (k + 1 < L->n && s[k] == ops2[o][0] && s[k + 1] == ops2[o][1])
                oplen = 2;
        if (!oplen && strchr("+-*/%~<>=()[]{},.:|;!", c) && c)
            oplen = 1;
        if (!oplen) {
            SET_ERR("line %d: unexpected character '%c' in a tag", *line, c);
            return -1;
        }
        if (c == '(' || c == '[' || c == '{')
            depth++;
        if ((c == ')' || c == ']' || c == '}') && depth > 0)
            depth--;
        push(L, JT_OP, *line, s + k, oplen);
        k += oplen;
    }
    SET_ERR("line %d: tag not closed", line0);
    return -1;
}

tdm_status_t tdm_jinja_lex(const char *src, size_t len, jtok_t **ret, size_t *ret_n, char *err,
                           size_t errlen)
{
    lexer_t L = {0};
    tdm_sbuf_t norm = {0};
    int line = 1, prev_rstrip = 0, prev_block = 0;
    size_t i = 0;

    if (len > TDM_JINJA_MAX_SOURCE) {
        SET_ERR("template larger than %zu bytes", TDM_JINJA_MAX_SOURCE);
        return TDM_ERR_RANGE;
    }
    for (size_t k = 0; k < len; k++) {
        char c = src[k];
        if (c == '\r') {
            c = '\n';
            if (k + 1 < len && src[k + 1] == '\n')
                k++;
        }
        (void)tdm_sbuf_add(&norm, &c, 1);
    }
    if (norm.len && norm.p[norm.len - 1] == '\n')
        norm.len--;
    L.s = norm.p ? norm.p : "";
    L.n = norm.len;
    L.err = err;
    L.errlen = errlen;

    while (i <= L.n) {
        /* next tag opener */
        size_t o = i;
        char kind = 0;
        while (o + 1 < L.n) {
            if (L.s[o] == '{' && (L.s[o + 1] == '{' || L.s[o + 1] == '%' || L.s[o + 1] == '#')) {
                kind = L.s[o + 1];
                break;
            }
            o++;
        }
        if (!kind)
            o = L.n;
        char mod = kind && o + 2 < L.n && (L.s[o + 2] == '-' || L.s[o + 2] == '+') ? L.s[o + 2] : 0;
        /* whitespace control on the text [a, b) */
        size_t a = i, b = o;
        if (prev_rstrip == '-') {
            while (a < b && is_sp(L.s[a]))
                a++;
        } else if (prev_block && prev_rstrip != '+' && a < b && L.s[a] == '\n') {
            a++;
        }
        if (kind && mod == '-') {
            while (b > a && is_sp(L.s[b - 1]))
                b--;
        } else if ((kind == '%' || kind == '#') && mod != '+') {
            size_t lp = b;
            while (lp > a && (L.s[lp - 1] == ' ' || L.s[lp - 1] == '\t'))
                lp--;
            int line_start = lp > a ? L.s[lp - 1] == '\n' : (a == 0 || L.s[a - 1] == '\n');
            if (line_start)
                b = lp;
        }
        int text_line = line;
        for (size_t k = i; k < o; k++)
            line += L.s[k] == '\n';
        if (b > a)
            push(&L, JT_TEXT, text_line, L.s + a, b - a);
        if (!kind)
            break;
        i = o + 2 + (mod ? 1 : 0);
        if (kind == '#') {
            const char *e = NULL;
            for (size_t k = i; k + 1 < L.n; k++)
                if (L.s[k] == '#' && L.s[k + 1] == '}') {
                    e = L.s + k;
                    break;
                }
            if (!e) {
                SET_ERR("line %d: comment not closed", line);
                goto err;
            }
            size_t end = (size_t)(e - L.s);
            for (size_t k = i; k < end; k++)
                line += L.s[k] == '\n';
            prev_rstrip = end > i && L.s[end - 1] == '-' ? '-' : 0;
            prev_block = 1;
            i = end + 2;
            continue;
        }
        push(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, line, "", 0);
        int rs = 0;
        if (lex_tag(&L, &i, &line, kind == '{' ? '}' : '%', &rs) != 0)
            goto err;
        prev_rstrip = rs;
        prev_block = kind == '%';
    }
    push(&L, JT_EOF, line, "", 0);
    tdm_sbuf_free(&norm);
    *ret = L.t;
    *ret_n = L.nt;
    return TDM_OK;
err:
    tdm_sbuf_free(&norm);
    tdm_jinja_toks_free(L.t, L.nt);
    return TDM_ERR_FORMAT;
}
