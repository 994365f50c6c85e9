/*
 * buf.c — growable byte buffer with the two escapers the control plane needs: PostgreSQL COPY text
 * and JSON string literals.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <tdm/json.h>
#include <tdm/mem.h>

#include "controlplane/store/buf.h"

void tdm_cp_buf_reserve(tdm_cp_buf_t *b, size_t extra)
{
    size_t need;
    if (tdm_size_add(b->len, extra, &need) != TDM_OK || tdm_size_add(need, 1, &need) != TDM_OK)
        need = SIZE_MAX; /* tdm_realloc aborts: the caller bounded its input, this cannot happen */
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b->data = tdm_realloc(b->data, cap);
    b->cap = cap;
}

void tdm_cp_buf_append(tdm_cp_buf_t *b, const void *p, size_t n)
{
    tdm_cp_buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void tdm_cp_buf_puts(tdm_cp_buf_t *b, const char *s)
{
    tdm_cp_buf_append(b, s, strlen(s));
}

void tdm_cp_buf_printf(tdm_cp_buf_t *b, const char *fmt, ...)
{
    /* One pass when the text fits the spare capacity (the common case), two otherwise. */
    tdm_cp_buf_reserve(b, 64);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->data[b->len] = '\0';
        return;
    }
    if ((size_t)n >= b->cap - b->len) {
        tdm_cp_buf_reserve(b, (size_t)n);
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void tdm_cp_buf_u64(tdm_cp_buf_t *b, uint64_t v)
{
    tdm_cp_buf_reserve(b, 20);
    b->len = (size_t)(tdm_json_put_u64(b->data + b->len, v) - b->data);
    b->data[b->len] = '\0';
}

void tdm_cp_buf_i64(tdm_cp_buf_t *b, int64_t v)
{
    if (v < 0) {
        tdm_cp_buf_append(b, "-", 1);
        tdm_cp_buf_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        tdm_cp_buf_u64(b, (uint64_t)v);
    }
}

void tdm_cp_buf_hex16(tdm_cp_buf_t *b, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    tdm_cp_buf_reserve(b, 16);
    char *o = b->data + b->len;
    for (int i = 15; i >= 0; i--) {
        o[i] = digits[v & 15u];
        v >>= 4;
    }
    b->len += 16;
    b->data[b->len] = '\0';
}

void tdm_cp_buf_copy_text(tdm_cp_buf_t *b, const char *s)
{
    if (!s) {
        tdm_cp_buf_append(b, "\\N", 2);
        return;
    }
    size_t n = strlen(s);
    tdm_cp_buf_reserve(b, n * 2);
    char *o = b->data + b->len;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        switch (c) {
        case '\\':
            *o++ = '\\';
            *o++ = '\\';
            break;
        case '\t':
            *o++ = '\\';
            *o++ = 't';
            break;
        case '\n':
            *o++ = '\\';
            *o++ = 'n';
            break;
        case '\r':
            *o++ = '\\';
            *o++ = 'r';
            break;
        default:
            *o++ = c;
        }
    }
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
}

void tdm_cp_buf_json_str(tdm_cp_buf_t *b, const char *s)
{
    size_t n = strlen(s);
    tdm_cp_buf_reserve(b, n * 6 + 2);
    char *o = b->data + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c < 0x20) {
            o += sprintf(o, "\\u%04x", c);
        } else {
            *o++ = (char)c;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
}

char *tdm_cp_buf_steal(tdm_cp_buf_t *b, size_t *ret_len)
{
    if (!b->data)
        tdm_cp_buf_reserve(b, 0);
    char *p = b->data;
    if (ret_len)
        *ret_len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void tdm_cp_buf_reset(tdm_cp_buf_t *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void tdm_cp_buf_free(tdm_cp_buf_t *b)
{
    tdm_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
