/*
 * test-telemetry-diff.c — the single-pass telemetry decoder (tdm_tm_batch_scan) against the
 * jansson reference (tdm_tm_batch_decode_jansson), differentially: many random valid batches,
 * written with random member order, whitespace, string escapes (\uXXXX in either case, surrogate
 * pairs, \/), "-0", boundary numbers, optional members absent or null, random `data` trees and
 * random (sometimes tiny) limits, and random byte mutations of each (flips to JSON-significant
 * or invalid-UTF-8 bytes, deletions, insertions, truncations, repeated spans). For every text
 * both must accept or both refuse, accepted batches must be identical member by member, and
 * tdm_tm_batch_decode must return the reference's status and message word for word. It also
 * reports the decode time of a bench-shaped batch (64 samples, 17 events) on both paths.
 * TDM_TELEMETRY_DIFF_N sets the number of batches (3000); TDM_TELEMETRY_DIFF_DEBUG=FILE prints
 * every refusal and writes the last disagreement to FILE.
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/telemetry.h>
#include <tdm/time.h>

#include "tap.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static uint32_t rn(uint32_t n)
{
    return (uint32_t)(rnd() % n);
}

typedef struct sb {
    char *p;
    size_t len, cap;
} sb_t;

static void sb_put(sb_t *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = tdm_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sb_t *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sb_t *b, const char *fmt, ...)
{
    char t[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t, sizeof(t), fmt, ap);
    va_end(ap);
    sb_puts(b, t);
}

static void ws(sb_t *b)
{
    static const char w[] = " \t\n\r";
    while (rn(5) == 0)
        sb_put(b, &w[rn(4)], 1);
}

/* Random UTF-8 text of 0..max bytes (exactly max now and then), NUL-free. */
static void rand_text(char *dst, size_t max, int min1)
{
    static const uint32_t cps[] = {'a',   'Z',    '0',    '_',    '-',     ' ',     '"',     '\\',
                                   '/',   '\n',   '\t',   1,      0x1f,    0x7f,    0xe9,    0x7ff,
                                   0x800, 0x20ac, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x10ffff};
    size_t n = 0, want = rn(4) == 0 ? max : rn((uint32_t)max + 1);
    if (min1 && want == 0)
        want = 1;
    while (n < want) {
        uint32_t cp = rn(3) ? (uint32_t)('a' + rn(26)) : cps[rn(sizeof(cps) / sizeof(cps[0]))];
        unsigned char u[4];
        size_t k;
        if (cp < 0x80)
            u[0] = (unsigned char)cp, k = 1;
        else if (cp < 0x800)
            u[0] = (unsigned char)(0xC0 | (cp >> 6)), u[1] = (unsigned char)(0x80 | (cp & 0x3F)),
            k = 2;
        else if (cp < 0x10000)
            u[0] = (unsigned char)(0xE0 | (cp >> 12)),
            u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
            u[2] = (unsigned char)(0x80 | (cp & 0x3F)), k = 3;
        else
            u[0] = (unsigned char)(0xF0 | (cp >> 18)),
            u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
            u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
            u[3] = (unsigned char)(0x80 | (cp & 0x3F)), k = 4;
        if (n + k > want) {
            if (n + 1 > want)
                break;
            u[0] = 'x', k = 1;
        }
        memcpy(dst + n, u, k);
        n += k;
    }
    dst[n] = '\0';
}

static void uesc(sb_t *b, uint32_t v)
{
    sb_printf(b, rn(2) ? "\\u%04x" : "\\u%04X", (unsigned)v);
}

/* A JSON string for UTF-8 `s`, each character raw or escaped at random. */
static void emit_str(sb_t *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    sb_puts(b, "\"");
    while (*p) {
        uint32_t cp;
        size_t k;
        if (*p < 0x80)
            cp = *p, k = 1;
        else if (*p < 0xE0)
            cp = (uint32_t)(*p & 0x1F) << 6 | (p[1] & 0x3F), k = 2;
        else if (*p < 0xF0)
            cp = (uint32_t)(*p & 0xF) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F), k = 3;
        else
            cp = (uint32_t)(*p & 0x7) << 18 | (uint32_t)(p[1] & 0x3F) << 12 |
                 (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F),
            k = 4;
        int esc = cp < 0x20 || cp == '"' || cp == '\\' || rn(6) == 0;
        if (!esc) {
            sb_put(b, p, k);
        } else if (cp == '"' && rn(2)) {
            sb_puts(b, "\\\"");
        } else if (cp == '\\' && rn(2)) {
            sb_puts(b, "\\\\");
        } else if (cp == '/' && rn(2)) {
            sb_puts(b, "\\/");
        } else if (cp == '\n' && rn(2)) {
            sb_puts(b, "\\n");
        } else if (cp == '\t' && rn(2)) {
            sb_puts(b, "\\t");
        } else if (cp >= 0x10000) {
            uesc(b, 0xD800 + ((cp - 0x10000) >> 10));
            uesc(b, 0xDC00 + ((cp - 0x10000) & 0x3FF));
        } else {
            uesc(b, cp);
        }
        p += k;
    }
    sb_puts(b, "\"");
}

static void emit_uint(sb_t *b, uint64_t v)
{
    if (v == 0 && rn(4) == 0)
        sb_puts(b, "-0");
    else
        sb_printf(b, "%" PRIu64, v);
}

static void emit_hex(sb_t *b, uint64_t v)
{
    char h[20];
    snprintf(h, sizeof(h), "%016" PRIx64, v);
    emit_str(b, h);
}

static uint64_t rand_u(uint64_t max)
{
    switch (rn(6)) {
    case 0:
        return 0;
    case 1:
        return max;
    case 2:
        return max - rn(3);
    case 3:
        return rn(1000);
    default:
        return max == UINT64_MAX ? rnd() : rnd() % (max + 1);
    }
}

/* A random data tree: integers at the int64 edges, reals, strings, nested containers. */
static json_t *rand_value(int depth)
{
    char t[40];
    switch (rn(depth > 2 ? 6 : 8)) {
    case 0:
        return json_integer(rn(2) ? (json_int_t)rnd() : (json_int_t)rn(100));
    case 1:
        return json_real((double)(int64_t)rnd() / (double)(rn(1000) + 1));
    case 2:
        rand_text(t, 12, 0);
        return json_string(t);
    case 3:
        return json_null();
    case 4:
        return rn(2) ? json_true() : json_false();
    case 5:
        return json_integer(rn(2) ? INT64_MAX : INT64_MIN);
    case 6: {
        json_t *a = json_array();
        for (uint32_t i = rn(4); i > 0; i--)
            json_array_append_new(a, rand_value(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (uint32_t i = rn(4); i > 0; i--) {
            rand_text(t, 8, 1);
            json_object_set_new(o, t, rand_value(depth + 1));
        }
        return o;
    }
    }
}

/* A flat `data` object as a writer might send it: keys and strings with random escapes
 * (emit_str), "-0", integers up to the int64 edge, literals, whitespace, now and then a repeated
 * key or a negative number (the scanner's flat path gives way to jansson's on those). */
static void flat_data(sb_t *b)
{
    char k[4][16], t[40];
    uint32_t nk = rn(5);
    sb_puts(b, "{");
    for (uint32_t i = 0; i < nk; i++) {
        ws(b);
        if (i) {
            sb_puts(b, ",");
            ws(b);
        }
        if (i && rn(8) == 0)
            memcpy(k[i], k[rn(i)], sizeof(k[i]));
        else
            rand_text(k[i], 8, 0);
        emit_str(b, k[i]);
        ws(b);
        sb_puts(b, ":");
        ws(b);
        switch (rn(7)) {
        case 0:
        case 1:
            rand_text(t, 12, 0);
            emit_str(b, t);
            break;
        case 2:
            emit_uint(b, rand_u(INT64_MAX));
            break;
        case 3:
            sb_puts(b, rn(2) ? "true" : "false");
            break;
        case 4:
            sb_puts(b, "null");
            break;
        case 5:
            emit_uint(b, rn(100));
            break;
        default:
            sb_printf(b, "-%u", 1 + rn(100));
            break;
        }
        ws(b);
    }
    sb_puts(b, "}");
}

typedef struct member {
    sb_t text; /* "key":value with whitespace */
} member_t;

/* Writes the members of an object in a random order. */
static void emit_object(sb_t *b, member_t *m, int n)
{
    sb_puts(b, "{");
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rn((uint32_t)i + 1);
        member_t t = m[i];
        m[i] = m[j];
        m[j] = t;
    }
    for (int i = 0; i < n; i++) {
        ws(b);
        if (i) {
            sb_puts(b, ",");
            ws(b);
        }
        sb_put(b, m[i].text.p, m[i].text.len);
        ws(b);
        tdm_free(m[i].text.p);
    }
    sb_puts(b, "}");
}

static sb_t *key(member_t *m, int *n, const char *k)
{
    sb_t *b = &m[(*n)++].text;
    memset(b, 0, sizeof(*b));
    emit_str(b, k);
    ws(b);
    sb_puts(b, ":");
    ws(b);
    return b;
}

static void emit_sample(sb_t *out)
{
    member_t m[21];
    int n = 0;
    char t[TDM_TM_PATH_MAX + 1];
    emit_uint(key(m, &n, "ts_us"), rand_u(UINT64_C(1) << 62));
    emit_uint(key(m, &n, "iter"), rand_u(INT64_MAX));
    rand_text(t, TDM_TM_PATH_MAX, 1);
    emit_str(key(m, &n, "path"), t);
    emit_hex(key(m, &n, "plan_hash"), rand_u(UINT64_MAX));
    emit_uint(key(m, &n, "coll_seq"), rand_u(INT64_MAX));
    emit_hex(key(m, &n, "coll_hash"), rand_u(UINT64_MAX));
    sb_t *ic = key(m, &n, "in_coll");
    if (rn(2)) {
        sb_puts(ic, "null");
    } else {
        member_t c[3];
        int k = 0;
        rand_text(t, TDM_TM_PATH_MAX, 1);
        emit_str(key(c, &k, "op"), t);
        emit_uint(key(c, &k, "seq"), rand_u(INT64_MAX));
        emit_uint(key(c, &k, "since_us"), rand_u(UINT64_C(1) << 62));
        emit_object(ic, c, k);
    }
    emit_uint(key(m, &n, "bs"), rand_u(UINT32_MAX));
    emit_uint(key(m, &n, "waiting"), rand_u(UINT32_MAX));
    emit_uint(key(m, &n, "running"), rand_u(UINT32_MAX));
    /* the optional statistics: each present or absent (emit_object may shuffle the members) */
    static const char *const stats[] = {"tokens_out",       "requests_done",   "ttft_p50_us",
                                        "ttft_p99_us",      "itl_p50_us",      "itl_p99_us",
                                        "kv_pages_used",    "kv_pages_total",  "host_pages_used",
                                        "host_pages_total", "corruption_total"};
    for (size_t k = 0; k < sizeof(stats) / sizeof(stats[0]); k++) {
        int wide = k < 2 || k == 10;
        if (rn(2))
            emit_uint(key(m, &n, stats[k]), rand_u(wide ? INT64_MAX : UINT32_MAX));
    }
    emit_object(out, m, n);
}

/* An optional string member: absent, null, or a string. */
static void opt_str(member_t *m, int *n, const char *k, size_t max)
{
    char t[TDM_TM_REASON_MAX + 1];
    switch (rn(3)) {
    case 0:
        return;
    case 1:
        sb_puts(key(m, n, k), "null");
        return;
    default:
        rand_text(t, max, 0);
        emit_str(key(m, n, k), t);
    }
}

static void emit_event(sb_t *out)
{
    member_t m[7];
    int n = 0;
    char t[TDM_TM_TYPE_MAX + 1];
    emit_uint(key(m, &n, "ts_us"), rand_u(UINT64_C(1) << 62));
    rand_text(t, TDM_TM_TYPE_MAX, 1);
    emit_str(key(m, &n, "type"), t);
    if (rn(3) == 0)
        sb_puts(key(m, &n, "room"), "null");
    else if (rn(2))
        emit_hex(key(m, &n, "room"), rand_u(UINT64_MAX));
    opt_str(m, &n, "from", TDM_TM_STATE_MAX);
    opt_str(m, &n, "to", TDM_TM_STATE_MAX);
    opt_str(m, &n, "reason", TDM_TM_REASON_MAX);
    uint32_t data_form = rn(6);
    if (data_form < 2) {
        sb_puts(key(m, &n, "data"), "null");
    } else if (data_form == 2) {
        flat_data(key(m, &n, "data"));
    } else if (data_form == 3) {
        json_t *o = json_object();
        char k[16];
        for (uint32_t i = rn(5); i > 0; i--) {
            rand_text(k, 8, 1);
            json_object_set_new(o, k, rand_value(1));
        }
        size_t flags = rn(2) ? JSON_COMPACT : JSON_INDENT(rn(3));
        if (rn(2))
            flags |= JSON_ENSURE_ASCII;
        char *d = json_dumps(o, flags);
        sb_puts(key(m, &n, "data"), d);
        free(d);
        json_decref(o);
    }
    emit_object(out, m, n);
}

static void emit_batch(sb_t *out)
{
    static const char *const roles[] = {"prefill", "decode", "null"};
    member_t m[9];
    int n = 0;
    char t[TDM_TM_NAME_MAX + 1];
    sb_puts(key(m, &n, "v"), "1");
    rand_text(t, TDM_TM_NAME_MAX, 1);
    emit_str(key(m, &n, "worker"), t);
    rand_text(t, TDM_TM_NAME_MAX, 1);
    emit_str(key(m, &n, "group"), t);
    emit_str(key(m, &n, "role"), roles[rn(3)]);
    emit_hex(key(m, &n, "instance_id"), rand_u(UINT64_MAX));
    emit_uint(key(m, &n, "rank"), rand_u(UINT16_MAX));
    emit_uint(key(m, &n, "seq"), rand_u(INT64_MAX));
    sb_t *a = key(m, &n, "samples");
    sb_puts(a, "[");
    for (uint32_t i = 0, k = rn(6); i < k; i++) {
        ws(a);
        if (i)
            sb_puts(a, ",");
        emit_sample(a);
    }
    ws(a);
    sb_puts(a, "]");
    a = key(m, &n, "events");
    sb_puts(a, "[");
    for (uint32_t i = 0, k = rn(5); i < k; i++) {
        ws(a);
        if (i)
            sb_puts(a, ",");
        emit_event(a);
    }
    ws(a);
    sb_puts(a, "]");
    ws(out);
    emit_object(out, m, n);
    ws(out);
}

static void mutate(sb_t *b)
{
    static const char inter[] = "\"{}[],:\\ -0123456789.eEnulltrf/\x01\x7f\x80\xbf\xc0\xc3\xed\xf0"
                                "\xf4\xf5\xff";
    for (uint32_t r = 1 + rn(2); r > 0 && b->len; r--) {
        size_t at = rn((uint32_t)b->len);
        char c = rn(4) ? inter[rn(sizeof(inter) - 1)] : (char)rn(256);
        switch (rn(6)) {
        case 0: /* replace */
            b->p[at] = c;
            break;
        case 1: /* delete */
            memmove(b->p + at, b->p + at + 1, b->len - at - 1);
            b->len--;
            break;
        case 2: /* insert */
            sb_put(b, "", 1);
            memmove(b->p + at + 1, b->p + at, b->len - at - 1);
            b->p[at] = c;
            break;
        case 3: /* truncate */
            b->len = at;
            break;
        case 4: { /* repeat a span (duplicate members, stray elements) */
            size_t n = 1 + rn(40);
            if (at + n > b->len)
                n = b->len - at;
            char *t = tdm_malloc(n);
            memcpy(t, b->p + at, n);
            size_t old = b->len;
            sb_put(b, t, n);
            memmove(b->p + at + 2 * n, b->p + at + n, old - at - n);
            memcpy(b->p + at + n, t, n);
            tdm_free(t);
            break;
        }
        default: /* a \u escape or a number form */ {
            static const char *const bits[] = {"\\u0000",    "\\ud800",
                                               "\\udc00",    "\\ud83d\\ude00",
                                               "\\u00",      "1e2",
                                               "1.0",        "01",
                                               "-1",         "9223372036854775808",
                                               "4294967296", "1E0",
                                               "\\x",        ",,",
                                               "null",       "\"\""};
            const char *s = bits[rn(sizeof(bits) / sizeof(bits[0]))];
            size_t n = strlen(s), old = b->len;
            sb_put(b, s, n);
            memmove(b->p + at + n, b->p + at, old - at);
            memcpy(b->p + at, s, n);
            break;
        }
        }
    }
}

static int same_batch(const tdm_tm_batch_t *a, const tdm_tm_batch_t *b)
{
    if (strcmp(a->worker, b->worker) || strcmp(a->group, b->group) || strcmp(a->role, b->role) ||
        a->instance_id != b->instance_id || a->rank != b->rank || a->seq != b->seq ||
        a->n_samples != b->n_samples || a->n_events != b->n_events || !a->samples != !b->samples ||
        !a->events != !b->events)
        return 0;
    for (uint32_t i = 0; i < a->n_samples; i++)
        if (memcmp(&a->samples[i], &b->samples[i], sizeof(a->samples[i])))
            return 0;
    for (uint32_t i = 0; i < a->n_events; i++) {
        const tdm_tm_event_t *x = &a->events[i], *y = &b->events[i];
        if (x->ts_us != y->ts_us || strcmp(x->type, y->type) || x->has_room != y->has_room ||
            x->room != y->room || strcmp(x->from, y->from) || strcmp(x->to, y->to) ||
            strcmp(x->reason, y->reason) || x->data || y->data || !x->data_json != !y->data_json ||
            x->data_len != y->data_len)
            return 0;
        /* the same text, byte for byte (COPY rows are rendered from it): the scanner's compact
         * form of a flat object is json_dumpb's, which the jansson path writes */
        if (x->data_json && (memcmp(x->data_json, y->data_json, x->data_len) ||
                             x->data_json[x->data_len] || y->data_json[y->data_len]))
            return 0;
    }
    return 1;
}

typedef struct tally {
    unsigned texts, accepted, mismatch_accept, mismatch_batch, mismatch_msg;
    char first_bad[200];
} tally_t;

static void check(tally_t *t, const char *buf, size_t len, const tdm_tm_limits_t *lim)
{
    char e1[512] = "", e2[512] = "";
    tdm_tm_batch_t ref, fast, comb;
    tdm_status_t sr = tdm_tm_batch_decode_jansson(buf, len, lim, &ref, e1, sizeof(e1));
    tdm_status_t sf = tdm_tm_batch_scan(buf, len, lim, &fast);
    tdm_status_t sc = tdm_tm_batch_decode(buf, len, lim, &comb, e2, sizeof(e2));
    t->texts++;
    if (getenv("TDM_TELEMETRY_DIFF_DEBUG") && ((sr == TDM_OK) != (sf == TDM_OK) || sr != TDM_OK))
        fprintf(stderr, "ref=%d scan=%d %s\n%.*s\n\n", sr, sf, e1, (int)len, buf);
    if (getenv("TDM_TELEMETRY_DIFF_DEBUG") && (sr == TDM_OK) != (sf == TDM_OK)) {
        FILE *f = fopen(getenv("TDM_TELEMETRY_DIFF_DEBUG"), "wb");
        if (f) {
            fwrite(buf, 1, len, f);
            fclose(f);
        }
    }
    if ((sr == TDM_OK) != (sf == TDM_OK)) {
        if (!t->mismatch_accept++)
            snprintf(t->first_bad, sizeof(t->first_bad), "ref %s (%s), scan %s: %.100s",
                     tdm_status_name(sr), e1, tdm_status_name(sf), buf);
    } else if (sr == TDM_OK) {
        t->accepted++;
        if (!same_batch(&ref, &fast) && !t->mismatch_batch++)
            snprintf(t->first_bad, sizeof(t->first_bad), "batches differ: %.150s", buf);
    }
    if (sc != sr || (sr != TDM_OK && strcmp(e1, e2)) ||
        (sr == TDM_OK && sc == TDM_OK && !same_batch(&ref, &comb))) {
        if (!t->mismatch_msg++)
            snprintf(t->first_bad, sizeof(t->first_bad), "decode \"%s\" vs ref \"%s\"", e2, e1);
    }
    if (sr == TDM_OK)
        tdm_tm_batch_clear(&ref);
    if (sf == TDM_OK)
        tdm_tm_batch_clear(&fast);
    if (sc == TDM_OK)
        tdm_tm_batch_clear(&comb);
}

static void report(const tally_t *t, const char *what, unsigned min_accepted)
{
    ok(t->mismatch_accept == 0, "%s: scan and jansson agree on accept/refuse (%u texts)%s%s", what,
       t->texts, t->mismatch_accept ? ": " : "", t->mismatch_accept ? t->first_bad : "");
    ok(t->mismatch_batch == 0, "%s: accepted batches identical (%u accepted)%s%s", what,
       t->accepted, t->mismatch_batch ? ": " : "", t->mismatch_batch ? t->first_bad : "");
    ok(t->mismatch_msg == 0, "%s: decode's status and message are the reference's%s%s", what,
       t->mismatch_msg ? ": " : "", t->mismatch_msg ? t->first_bad : "");
    ok(t->accepted >= min_accepted, "%s: %u accepted (at least %u: not vacuous)", what, t->accepted,
       min_accepted);
}

/* The bench's batch shape: 64 samples, 16 kvpoll events with rooms, one output_stats. */
static void bench_batch(sb_t *b)
{
    sb_puts(b,
            "{\"v\":1,\"worker\":\"bench-0\",\"group\":\"bench-7e01000000000000-0\",\"role\":"
            "\"decode\",\"instance_id\":\"7e01000000000000\",\"rank\":0,\"seq\":9,\"samples\":[");
    for (int k = 0; k < 64; k++) {
        int64_t ts = 1700000000000000 + (int64_t)k * 200000;
        sb_printf(b, "%s{\"ts_us\":%" PRId64 ",\"iter\":%d,\"path\":\"batch\",", k ? "," : "", ts,
                  1000 + k * 7);
        sb_printf(b, "\"plan_hash\":\"%016" PRIx64 "\",\"coll_seq\":%d,",
                  (uint64_t)0x9e3779b97f4a7c15u * (uint64_t)(k + 1), k * 56);
        sb_printf(b, "\"coll_hash\":\"%016" PRIx64 "\",",
                  (uint64_t)0xc2b2ae3d27d4eb4fu * (uint64_t)(k + 3));
        if (k % 4 == 1)
            sb_printf(b, "\"in_coll\":{\"op\":\"all_reduce\",\"seq\":%d,\"since_us\":%" PRId64 "},",
                      k * 56 + 3, ts - 150);
        else
            sb_puts(b, "\"in_coll\":null,");
        sb_printf(b, "\"bs\":%d,\"waiting\":%d,\"running\":%d}", 8 + k % 24, k % 5, 8 + k % 24);
    }
    sb_puts(b, "],\"events\":[");
    for (int r = 0; r < 16; r++)
        sb_printf(
            b,
            "%s{\"ts_us\":1700000000000%03d,\"type\":\"kvpoll\",\"room\":\"%016x\",\"from\":"
            "\"WAITING_FOR_INPUT\",\"to\":\"TRANSFERRING\",\"reason\":null,\"data\":{\"pages\":"
            "%d}}",
            r ? "," : "", r, 0x5bd1e995u + (unsigned)r, 16 + r);
    sb_puts(b, ",{\"ts_us\":1700000000000005,\"type\":\"output_stats\",\"data\":{\"responses\":3,"
               "\"dsml_leaks\":0}}]}");
}

int main(void)
{
    const char *env = getenv("TDM_TELEMETRY_DIFF_N");
    unsigned n = env ? (unsigned)atoi(env) : 3000;
    tally_t valid = {0}, mut = {0};
    tdm_tm_limits_t lim;

    plan(11);
    for (unsigned i = 0; i < n; i++) {
        sb_t b = {0};
        emit_batch(&b);
        tdm_tm_limits_default(&lim);
        if (rn(8) == 0) { /* limits the batch may just meet or miss */
            lim.max_samples = rn(6);
            lim.max_events = rn(5);
            lim.max_data_bytes = rn(60);
            lim.max_body_bytes = b.len - 2 + rn(4);
        }
        check(&valid, b.p, b.len, &lim);
        for (int m = 0; m < 8; m++) {
            sb_t c = {0};
            sb_put(&c, b.p, b.len);
            mutate(&c);
            check(&mut, c.p, c.len, &lim);
            tdm_free(c.p);
        }
        tdm_free(b.p);
    }
    report(&valid, "random valid batches", n / 2);
    report(&mut, "mutated batches", n / 20);

    /* Time of one bench-shaped batch on each path (reported, not asserted: the host is shared). */
    sb_t b = {0};
    bench_batch(&b);
    tdm_tm_batch_t x;
    char e[256];
    int reps = 300, good = 1;
    int64_t t0 = tdm_time_mono_us();
    for (int i = 0; i < reps; i++) {
        if (tdm_tm_batch_decode_jansson(b.p, b.len, NULL, &x, e, sizeof(e)) != TDM_OK) {
            good = 0;
            break;
        }
        tdm_tm_batch_clear(&x);
    }
    int64_t t1 = tdm_time_mono_us();
    for (int i = 0; i < reps; i++) {
        if (tdm_tm_batch_scan(b.p, b.len, NULL, &x) != TDM_OK) {
            good = 0;
            break;
        }
        tdm_tm_batch_clear(&x);
    }
    int64_t t2 = tdm_time_mono_us();
    ok(good, "bench-shaped batch (%zu bytes) decodes on both paths", b.len);
    diag("decode of a 64-sample 17-event batch: jansson %.1f us, scan %.1f us (%.1fx)",
         (double)(t1 - t0) / reps, (double)(t2 - t1) / reps,
         (double)(t1 - t0) / (double)(t2 - t1 > 0 ? t2 - t1 : 1));
    tdm_free(b.p);

    const char *fixed[] = {
        "{\"v\":1}",
        "",
        "   ",
        "[]",
        "{\"v\":1,\"worker\":\"w\",\"group\":\"g\",\"role\":\"decode\",\"instance_id\":"
        "\"0000000000000001\",\"rank\":0,\"seq\":1,\"samples\":[],\"events\":[]}x",
    };
    tally_t fx = {0}, nul = {0};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        check(&fx, fixed[i], strlen(fixed[i]), NULL);
    /* jansson drops one NUL byte right after a number or null (the byte it pushes back): the
     * scanner must accept the same texts, and refuse a second NUL or one elsewhere as it does */
    static const char nul_doc[] =
        "{\"v\":1@,\"worker\":\"w\",\"group\":\"g\",\"role\":\"decode\",\"instance_id\":"
        "\"0000000000000001\",\"rank\":0@,\"seq\":1,\"samples\":[{\"ts_us\":5@,\"iter\":1,"
        "\"path\":\"b\",\"plan_hash\":\"0000000000000002\",\"coll_seq\":3,\"coll_hash\":"
        "\"0000000000000004\",\"in_coll\":null@,\"bs\":1,\"waiting\":0,\"running\":1}],"
        "\"events\":[{\"ts_us\":6,\"type\":\"t\",\"room\":null@@}]@}";
    for (size_t at = 0; at < sizeof(nul_doc) - 1; at++) {
        if (nul_doc[at] != '@')
            continue;
        char d[sizeof(nul_doc)];
        size_t dn = 0;
        for (size_t i = 0; i < sizeof(nul_doc) - 1; i++)
            if (nul_doc[i] != '@' || i == at || (i == at + 1 && nul_doc[i] == '@'))
                d[dn++] = nul_doc[i] == '@' ? '\0' : nul_doc[i];
        check(&nul, d, dn, NULL);
    }
    ok(fx.mismatch_accept == 0 && fx.mismatch_msg == 0 && fx.accepted == 0,
       "fixed refusals agree, messages equal%s%s", fx.first_bad[0] ? ": " : "", fx.first_bad);
    ok(nul.mismatch_accept == 0 && nul.mismatch_batch == 0 && nul.mismatch_msg == 0 &&
           nul.accepted >= 4 && nul.accepted < nul.texts,
       "NUL after a token: %u of %u texts accepted by both%s%s", nul.accepted, nul.texts,
       nul.first_bad[0] ? ": " : "", nul.first_bad);
    return exit_status();
}
