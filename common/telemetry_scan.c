/*
 * telemetry_scan.c — the strict scanner's JSON primitives: whitespace, strings (UTF-8 checked,
 * escapes decoded), integers, hex ids, null, object members and array elements.
 */
#include "config.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/json.h>
#include <tdm/mem.h>
#include <tdm/telemetry.h>

#include "telemetry_int.h"

/*
 * The single-pass decoder: one scan over the text straight into the batch, no tree. It accepts
 * exactly what the jansson path accepts and yields the same batch (test-telemetry-diff checks
 * this on random batches and mutations of them); on anything else it declines without a
 * message and tdm_tm_batch_decode() runs the jansson path, whose message names the key path.
 * So rejected input costs what it always did and gets the same error, word for word.
 *
 * What jansson (json_loadb, JSON_REJECT_DUPLICATES) accepts, restated for the members we read:
 * whitespace is space, tab, CR, LF; strings are UTF-8 without overlongs, surrogates or code
 * points past U+10FFFF, no raw byte below 0x20, escapes \" \\ \/ \b \f \n \r \t \uXXXX (either
 * case) with a high surrogate followed by a low one, never \u0000; integers are -?(0|[1-9][0-9]*)
 * within int64 and a '.', 'e' or 'E' makes a real; no trailing commas, no duplicate keys,
 * nothing but whitespace after the root; one NUL byte right after a number or a null literal
 * is skipped (jansson's stream drops the NUL it pushes back after such a token). An event's `data`
 * is kept as text: a flat object is written compact as it is read (tdm_tmi_sc_data_flat), anything
 * else goes to json_loadb itself (its bytes found by a bracket scan) and is dumped back, so the
 * text is exactly the jansson path's.
 */

/* Skips whitespace, then consumes `c`; 0 when it is there. */

int tdm_tmi_sc_hex4(const unsigned char *p, uint32_t *ret)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = (v << 4) | d;
    }
    *ret = v;
    return 0;
}

/* Length of the UTF-8 sequence at p (1..4) as jansson's utf8_check_first/full judge it; 0 when
 * invalid or cut off by `end`. */
size_t tdm_tmi_sc_utf8(const unsigned char *p, const unsigned char *end)
{
    unsigned u = p[0];
    size_t n;
    uint32_t v;
    if (u < 0x80)
        return 1;
    if (u >= 0xC2 && u <= 0xDF)
        n = 2, v = u & 0x1F;
    else if (u >= 0xE0 && u <= 0xEF)
        n = 3, v = u & 0xF;
    else if (u >= 0xF0 && u <= 0xF4)
        n = 4, v = u & 0x7;
    else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) || (n == 3 && v < 0x800) ||
        (n == 4 && v < 0x10000))
        return 0;
    return n;
}

/* A string (whitespace before it skipped) decoded into dst[cap + 1]; -1 when jansson would
 * refuse it, it holds a NUL, or it is longer than cap bytes. */
int tdm_tmi_sc_str(scan_t *s, char *dst, size_t cap, size_t *ret_len)
{
    const unsigned char *p, *end = s->end;
    size_t n = 0;
    if (sc_eat(s, '"'))
        return -1;
    p = s->p;
    for (;;) {
        if (p >= end)
            return -1;
        unsigned c = *p;
        if (c == '"')
            break;
        if (c < 0x20)
            return -1;
        if (c < 0x80 && c != '\\') {
            if (n >= cap)
                return -1;
            dst[n++] = (char)c;
            p++;
            continue;
        }
        if (c != '\\') {
            size_t k = tdm_tmi_sc_utf8(p, end);
            if (!k || cap - n < k || n > cap)
                return -1;
            memcpy(dst + n, p, k);
            n += k;
            p += k;
            continue;
        }
        if (end - p < 2)
            return -1;
        char out;
        switch (p[1]) {
        case '"':
        case '\\':
        case '/':
            out = (char)p[1];
            break;
        case 'b':
            out = '\b';
            break;
        case 'f':
            out = '\f';
            break;
        case 'n':
            out = '\n';
            break;
        case 'r':
            out = '\r';
            break;
        case 't':
            out = '\t';
            break;
        case 'u': {
            uint32_t cp, lo;
            unsigned char u8[4];
            size_t k;
            if (end - p < 6 || tdm_tmi_sc_hex4(p + 2, &cp))
                return -1;
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || tdm_tmi_sc_hex4(p + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if ((cp >= 0xDC00 && cp <= 0xDFFF) || cp == 0) {
                return -1;
            }
            if (cp < 0x80) {
                u8[0] = (unsigned char)cp;
                k = 1;
            } else if (cp < 0x800) {
                u8[0] = (unsigned char)(0xC0 | (cp >> 6));
                u8[1] = (unsigned char)(0x80 | (cp & 0x3F));
                k = 2;
            } else if (cp < 0x10000) {
                u8[0] = (unsigned char)(0xE0 | (cp >> 12));
                u8[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                u8[2] = (unsigned char)(0x80 | (cp & 0x3F));
                k = 3;
            } else {
                u8[0] = (unsigned char)(0xF0 | (cp >> 18));
                u8[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                u8[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                u8[3] = (unsigned char)(0x80 | (cp & 0x3F));
                k = 4;
            }
            if (n > cap || cap - n < k)
                return -1;
            memcpy(dst + n, u8, k);
            n += k;
            continue;
        }
        default:
            return -1;
        }
        if (n >= cap)
            return -1;
        dst[n++] = out;
        p += 2;
    }
    dst[n] = '\0';
    s->p = p + 1;
    *ret_len = n;
    return 0;
}

/* A required string member: non-empty, at most cap bytes. */
int tdm_tmi_sc_field(scan_t *s, char *dst, size_t cap)
{
    size_t n;
    return tdm_tmi_sc_str(s, dst, cap, &n) || n == 0 ? -1 : 0;
}

int tdm_tmi_sc_hex64(scan_t *s, uint64_t *ret)
{
    char t[TDM_JSON_HEX64_LEN + 1];
    size_t n;
    sc_ws(s);
    if (s->end - s->p > TDM_JSON_HEX64_LEN + 1 && s->p[0] == '"' &&
        s->p[TDM_JSON_HEX64_LEN + 1] == '"') { /* the usual form: 16 plain digits */
        uint64_t v = 0;
        int i;
        for (i = 1; i <= TDM_JSON_HEX64_LEN; i++) {
            unsigned c = s->p[i];
            if (c >= '0' && c <= '9')
                v = (v << 4) | (c - '0');
            else if (c >= 'a' && c <= 'f')
                v = (v << 4) | (c - 'a' + 10);
            else
                break;
        }
        if (i > TDM_JSON_HEX64_LEN) {
            s->p += TDM_JSON_HEX64_LEN + 2;
            *ret = v;
            return 0;
        }
    }
    if (tdm_tmi_sc_str(s, t, TDM_JSON_HEX64_LEN, &n) || n != TDM_JSON_HEX64_LEN)
        return -1;
    return tdm_json_hex64_parse(t, ret) == TDM_OK ? 0 : -1;
}

/* An integer in [0, max] written as jansson reads an integer ("-0" is 0); -1 for a real, a
 * leading zero, a value outside int64, a negative one or one above max. */
int tdm_tmi_sc_uint(scan_t *s, uint64_t max, uint64_t *ret)
{
    const unsigned char *p, *end = s->end;
    uint64_t v = 0;
    int neg = 0;
    sc_ws(s);
    p = s->p;
    if (p < end && *p == '-')
        neg = 1, p++;
    if (p >= end || *p < '0' || *p > '9')
        return -1;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            unsigned d = *p - '0';
            if (v > (JSON_UINT_MAX - d) / 10)
                return -1; /* past int64 (jansson: too big) or past every max we use */
            v = v * 10 + d;
            p++;
        }
    }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9')))
        return -1;
    if ((neg && v != 0) || v > max)
        return -1;
    if (p < end && *p == '\0')
        p++; /* jansson's quirk: the byte that ends a number is pushed back, and a NUL there is
                dropped by its stream (one NUL; a second is an invalid token) */
    s->p = p;
    *ret = v;
    return 0;
}

int tdm_tmi_sc_i64(scan_t *s, int64_t max, int64_t *ret)
{
    uint64_t v;
    if (tdm_tmi_sc_uint(s, (uint64_t)max, &v))
        return -1;
    *ret = (int64_t)v;
    return 0;
}

int tdm_tmi_sc_u32(scan_t *s, uint32_t *ret)
{
    uint64_t v;
    if (tdm_tmi_sc_uint(s, UINT32_MAX, &v))
        return -1;
    *ret = (uint32_t)v;
    return 0;
}

/* 1 and consumes it when the next token is null. */
int tdm_tmi_sc_null(scan_t *s)
{
    sc_ws(s);
    if (s->end - s->p >= 4 && !memcmp(s->p, "null", 4)) {
        s->p += 4;
        if (s->p < s->end && *s->p == '\0')
            s->p++; /* as after a number */
        return 1;
    }
    return 0;
}

/* Whether the n bytes at p (no NUL among them) spell key k. */
static inline int key_is(const char *k, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (k[i] != p[i])
            return 0; /* also at k's end: p holds no NUL */
    return k[n] == '\0';
}

/* Steps to the next member of an object whose '{' was consumed: 1 with its index in `keys` (the
 * ':' consumed), 0 at the closing '}', -1 on a syntax error, an unknown or a repeated key. */
int tdm_tmi_sc_member(scan_t *s, int *first, const char *const *keys, unsigned *seen)
{
    char key[24]; /* the longest key we take is 16 bytes */
    const char *kp;
    size_t n;
    sc_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    if (!*first && sc_eat(s, ','))
        return -1;
    *first = 0;
    sc_ws(s);
    /* Writers (ours among them) send the members in the order of `keys`: the first key not seen
     * yet is tried first, as the bytes "<key>" in place (our keys are plain ASCII, so those bytes
     * are the key with no escape). */
    int i = __builtin_ctz(~*seen);
    if (keys[i] && s->p < s->end && *s->p == '"') {
        const char *k = keys[i];
        const unsigned char *q = s->p + 1;
        while (*k && q < s->end && *q == (unsigned char)*k)
            k++, q++;
        if (!*k && q < s->end && *q == '"') {
            s->p = q + 1;
            if (sc_eat(s, ':'))
                return -1;
            *seen |= 1u << i;
            return i + 1;
        }
    }
    /* Any other key: plain ASCII lowercase letters, digits and '_' up to the closing quote,
     * compared in place; anything else (escapes, other bytes) is decoded by tdm_tmi_sc_str first.
     */
    const unsigned char *q = s->p, *lim = s->end - s->p > 25 ? s->p + 25 : s->end;
    if (q < lim && *q == '"') {
        q++;
        while (q < lim && ((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_'))
            q++;
    }
    if (q > s->p && q < lim && *q == '"') {
        kp = (const char *)s->p + 1;
        n = (size_t)(q - s->p - 1);
        s->p = q + 1;
    } else if (tdm_tmi_sc_str(s, key, sizeof(key) - 1, &n)) {
        return -1;
    } else {
        kp = key;
    }
    if (sc_eat(s, ':'))
        return -1;
    for (i = 0; keys[i] && !key_is(keys[i], kp, n); i++)
        ;
    if (!keys[i] || (*seen & (1u << i)))
        return -1;
    *seen |= 1u << i;
    return i + 1;
}

/* Steps to the next element of an array whose '[' was consumed: 1 before an element, 0 after
 * the closing ']', -1 on a syntax error. */
int tdm_tmi_sc_elem(scan_t *s, int *first)
{
    sc_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    if (!*first && sc_eat(s, ','))
        return -1;
    *first = 0;
    return 1;
}

int tdm_tmi_sc_in_coll(scan_t *s, tdm_tm_in_coll_t *ic)
{
    static const char *const keys[] = {"op", "seq", "since_us", NULL};
    unsigned seen = 0;
    int first = 1, k;
    if (sc_eat(s, '{'))
        return -1;
    while ((k = tdm_tmi_sc_member(s, &first, keys, &seen)) > 0) {
        int bad = k == 1   ? tdm_tmi_sc_field(s, ic->op, TDM_TM_PATH_MAX)
                  : k == 2 ? tdm_tmi_sc_uint(s, JSON_UINT_MAX, &ic->seq)
                           : tdm_tmi_sc_i64(s, INT64_C(1) << 62, &ic->since_us);
        if (bad)
            return -1;
    }
    return k < 0 || seen != 7u ? -1 : 0;
}
