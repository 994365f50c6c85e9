/*
 * chat_py.c — the few Python value semantics chat templates depend on, over jansson values.
 *
 * transformers renders templates with Jinja in Python, so a prompt's bytes depend on how Python
 * prints things: `tojson` is json.dumps(ensure_ascii=False) (", " and ": " separators, floats by
 * repr, lowercase \u00XX escapes for control characters only), `{{ value }}` is str(value)
 * (True/False/None, "100.0", dicts as "{'k': 1}"), and `| trim` / `.strip()` strip Unicode
 * whitespace. Reproducing exactly these is what makes the renderers byte-exact.
 */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_int.h"

void tdm_py_float_repr(double v, char buf[32])
{
    char tmp[40], digits[24];
    int prec, exp10, nd = 0, neg;

    if (isnan(v)) {
        strcpy(buf, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(buf, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (v == 0) {
        strcpy(buf, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    /* Shortest precision that round-trips: the digits Python's repr (David Gay's mode 0) picks. */
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    neg = tmp[0] == '-';
    for (const char *p = tmp + neg; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    digits[nd] = '\0';
    while (nd > 1 && digits[nd - 1] == '0')
        digits[--nd] = '\0';
    exp10 = atoi(strchr(tmp, 'e') + 1);
    int decpt = exp10 + 1; /* value = 0.DIGITS × 10^decpt */

    char *o = buf;
    if (neg)
        *o++ = '-';
    if (decpt <= -4 || decpt > 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        snprintf(o, 8, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10) % 1000);
        return;
    }
    if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++)
            *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else {
        for (int i = 0; i < decpt; i++)
            *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > decpt) {
            memcpy(o, digits + decpt, (size_t)(nd - decpt));
            o += nd - decpt;
        } else {
            *o++ = '0';
        }
    }
    *o = '\0';
}

tdm_status_t tdm_py_json_escape(tdm_sbuf_t *b, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char hex[8];
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            if (c < 0x20) {
                snprintf(hex, sizeof(hex), "\\u%04x", c);
                esc = hex;
            }
        }
        if (!esc)
            continue;
        TDM_TRY(tdm_sbuf_add(b, s + run, i - run));
        TDM_TRY(tdm_sbuf_puts(b, esc));
        run = i + 1;
    }
    return tdm_sbuf_add(b, s + run, n - run);
}

static tdm_status_t indent_line(tdm_sbuf_t *b, int indent, int level)
{
    TDM_TRY(tdm_sbuf_puts(b, "\n"));
    for (int i = 0; i < indent * level; i++)
        TDM_TRY(tdm_sbuf_add(b, " ", 1));
    return TDM_OK;
}

static int key_cmp(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

tdm_status_t tdm_py_json_dumps_ex(tdm_sbuf_t *b, const json_t *v, int indent, int sort_keys,
                                  int level, int max_level)
{
    char num[32];
    const char *sep = indent < 0 ? ", " : ",";
    if (level > max_level)
        return TDM_ERR_RANGE;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        const char *k;
        json_t *x;
        if (!n)
            return tdm_sbuf_puts(b, "{}");
        const char **keys = tdm_malloc(n * sizeof(*keys));
        json_object_foreach((json_t *)v, k, x) keys[i++] = k;
        if (sort_keys)
            qsort(keys, n, sizeof(*keys), key_cmp);
        tdm_status_t st = tdm_sbuf_puts(b, "{");
        for (i = 0; i < n && st == TDM_OK; i++) {
            if (i)
                st = tdm_sbuf_puts(b, sep);
            if (st == TDM_OK && indent >= 0)
                st = indent_line(b, indent, level + 1);
            if (st == TDM_OK)
                st = tdm_sbuf_puts(b, "\"");
            if (st == TDM_OK)
                st = tdm_py_json_escape(b, keys[i], strlen(keys[i]));
            if (st == TDM_OK)
                st = tdm_sbuf_puts(b, "\": ");
            if (st == TDM_OK)
                st = tdm_py_json_dumps_ex(b, json_object_get(v, keys[i]), indent, sort_keys,
                                          level + 1, max_level);
        }
        tdm_free(keys);
        TDM_TRY(st);
        if (indent >= 0)
            TDM_TRY(indent_line(b, indent, level));
        return tdm_sbuf_puts(b, "}");
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (!n)
            return tdm_sbuf_puts(b, "[]");
        TDM_TRY(tdm_sbuf_puts(b, "["));
        for (size_t i = 0; i < n; i++) {
            if (i)
                TDM_TRY(tdm_sbuf_puts(b, sep));
            if (indent >= 0)
                TDM_TRY(indent_line(b, indent, level + 1));
            TDM_TRY(tdm_py_json_dumps_ex(b, json_array_get(v, i), indent, sort_keys, level + 1,
                                         max_level));
        }
        if (indent >= 0)
            TDM_TRY(indent_line(b, indent, level));
        return tdm_sbuf_puts(b, "]");
    }
    case JSON_STRING:
        TDM_TRY(tdm_sbuf_puts(b, "\""));
        TDM_TRY(tdm_py_json_escape(b, json_string_value(v), json_string_length(v)));
        return tdm_sbuf_puts(b, "\"");
    case JSON_REAL:
        tdm_py_float_repr(json_real_value(v), num);
        return tdm_sbuf_puts(b, num);
    case JSON_TRUE:
        return tdm_sbuf_puts(b, "true");
    case JSON_FALSE:
        return tdm_sbuf_puts(b, "false");
    case JSON_NULL:
        return tdm_sbuf_puts(b, "null");
    default:
        return tdm_py_str(b, v);
    }
}

tdm_status_t tdm_py_json_dumps(tdm_sbuf_t *b, const json_t *v)
{
    return tdm_py_json_dumps_ex(b, v, -1, 0, 0, INT_MAX);
}

uint32_t tdm_py_utf8_decode(const char *str, size_t n, size_t i, size_t *len)
{
    const unsigned char *s = (const unsigned char *)str;
    unsigned char c = s[i];
    size_t l = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (i + l > n)
        l = 1;
    uint32_t cp = l == 1 ? c : l == 2 ? (c & 0x1fu) : l == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (size_t k = 1; k < l; k++)
        cp = (cp << 6) | (s[i + k] & 0x3fu);
    *len = l;
    return cp;
}

/* Characters Python's repr() escapes beyond ASCII: C1 controls and the common non-printable
 * format/space characters (Python consults the full Unicode database; these are the ones that
 * plausibly occur in tool arguments). */
static int py_nonprintable(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0xa0) || cp == 0xad || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
           (cp >= 0x205f && cp <= 0x2064) || cp == 0x3000 || cp == 0xfeff;
}

static tdm_status_t py_repr_str(tdm_sbuf_t *b, const char *s, size_t n)
{
    char quote = (memchr(s, '\'', n) && !memchr(s, '"', n)) ? '"' : '\'';
    char esc[16];
    size_t l;

    TDM_TRY(tdm_sbuf_add(b, &quote, 1));
    for (size_t i = 0; i < n; i += l) {
        uint32_t cp = tdm_py_utf8_decode(s, n, i, &l);
        if (cp == (uint32_t)quote || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            TDM_TRY(tdm_sbuf_add(b, esc, 2));
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            TDM_TRY(tdm_sbuf_puts(b, cp == '\n' ? "\\n" : cp == '\r' ? "\\r" : "\\t"));
        } else if (cp < 0x20 || cp == 0x7f || (cp <= 0xff && py_nonprintable(cp))) {
            snprintf(esc, sizeof(esc), "\\x%02x", cp);
            TDM_TRY(tdm_sbuf_puts(b, esc));
        } else if (py_nonprintable(cp)) {
            snprintf(esc, sizeof(esc), "\\u%04x", cp);
            TDM_TRY(tdm_sbuf_puts(b, esc));
        } else {
            TDM_TRY(tdm_sbuf_add(b, s + i, l));
        }
    }
    return tdm_sbuf_add(b, &quote, 1);
}

static tdm_status_t py_repr(tdm_sbuf_t *b, const json_t *v)
{
    const char *key;
    json_t *item;
    size_t i;
    int first = 1;

    switch (json_typeof(v)) {
    case JSON_STRING:
        return py_repr_str(b, json_string_value(v), json_string_length(v));
    case JSON_OBJECT:
        TDM_TRY(tdm_sbuf_puts(b, "{"));
        json_object_foreach((json_t *)v, key, item)
        {
            if (!first)
                TDM_TRY(tdm_sbuf_puts(b, ", "));
            first = 0;
            TDM_TRY(py_repr_str(b, key, strlen(key)));
            TDM_TRY(tdm_sbuf_puts(b, ": "));
            TDM_TRY(py_repr(b, item));
        }
        return tdm_sbuf_puts(b, "}");
    case JSON_ARRAY:
        TDM_TRY(tdm_sbuf_puts(b, "["));
        json_array_foreach((json_t *)v, i, item)
        {
            if (i)
                TDM_TRY(tdm_sbuf_puts(b, ", "));
            TDM_TRY(py_repr(b, item));
        }
        return tdm_sbuf_puts(b, "]");
    default:
        return tdm_py_str(b, v);
    }
}

tdm_status_t tdm_py_str(tdm_sbuf_t *b, const json_t *v)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_STRING:
        return tdm_sbuf_add(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" PRId64, (int64_t)json_integer_value(v));
        return tdm_sbuf_puts(b, num);
    case JSON_REAL: {
        double d = json_real_value(v);
        /* Python prints non-finite floats as nan/inf; jansson cannot hold them anyway. */
        tdm_py_float_repr(d, num);
        return tdm_sbuf_puts(b, num);
    }
    case JSON_TRUE:
        return tdm_sbuf_puts(b, "True");
    case JSON_FALSE:
        return tdm_sbuf_puts(b, "False");
    case JSON_NULL:
        return tdm_sbuf_puts(b, "None");
    case JSON_OBJECT:
    case JSON_ARRAY:
        return py_repr(b, v);
    }
    return TDM_ERR_INVAL;
}

int tdm_py_isspace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

void tdm_py_strip(const char *s, size_t n, size_t *ret_off, size_t *ret_len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t a = 0, z = n, l;

    while (a < z) {
        uint32_t cp = tdm_py_utf8_decode(s, n, a, &l);
        if (!tdm_py_isspace(cp))
            break;
        a += l;
    }
    while (z > a) {
        size_t st = z - 1;
        while (st > a && (u[st] & 0xc0) == 0x80)
            st--;
        uint32_t cp = tdm_py_utf8_decode(s, n, st, &l);
        if (!tdm_py_isspace(cp))
            break;
        z = st;
    }
    *ret_off = a;
    *ret_len = z - a;
}
