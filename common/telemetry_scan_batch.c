/*
 * telemetry_scan_batch.c — a telemetry batch on the strict scanner (telemetry_scan.c): samples,
 * events with their data kept as text, and the batch with its limits (docs/contracts.md §c).
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

static int sc_sample(scan_t *s, tdm_tm_sample_t *x)
{
    unsigned seen = 0;
    int first = 1, k, bad;
    memset(x, 0, sizeof(*x));
    if (sc_eat(s, '{'))
        return -1;
    while ((k = tdm_tmi_sc_member(s, &first, tdm_tmi_sample_keys, &seen)) > 0) {
        switch (k) {
        case 1:
            bad = tdm_tmi_sc_i64(s, INT64_C(1) << 62, &x->ts_us);
            break;
        case 2:
            bad = tdm_tmi_sc_uint(s, JSON_UINT_MAX, &x->iter);
            break;
        case 3:
            bad = tdm_tmi_sc_field(s, x->path, TDM_TM_PATH_MAX);
            break;
        case 4:
            bad = tdm_tmi_sc_hex64(s, &x->plan_hash);
            break;
        case 5:
            bad = tdm_tmi_sc_uint(s, JSON_UINT_MAX, &x->coll_seq);
            break;
        case 6:
            bad = tdm_tmi_sc_hex64(s, &x->coll_hash);
            break;
        case 7:
            x->in_coll_valid = !tdm_tmi_sc_null(s);
            bad = x->in_coll_valid ? tdm_tmi_sc_in_coll(s, &x->in_coll) : 0;
            break;
        case 8:
            bad = tdm_tmi_sc_u32(s, &x->bs);
            break;
        case 9:
            bad = tdm_tmi_sc_u32(s, &x->waiting);
            break;
        case 10:
            bad = tdm_tmi_sc_u32(s, &x->running);
            break;
        default: {
            uint64_t v;
            size_t st = (size_t)k - 1 - SAMPLE_REQUIRED;
            bad = tdm_tmi_sc_uint(s, tdm_tmi_stat_max(st), &v);
            if (!bad)
                tdm_tmi_stat_set(x, st, v);
            break;
        }
        }
        if (bad)
            return -1;
    }
    /* the required members are all there; the statistics may be absent */
    return k < 0 || (seen & 0x3FFu) != 0x3FFu ? -1 : 0;
}

/* The bytes of the object that starts at s->p: brackets counted outside strings, strings
 * skipped by their escapes. Validity is json_loadb's to judge. */
static int sc_object_span(scan_t *s, size_t *ret_len)
{
    const unsigned char *p = s->p, *end = s->end;
    int depth = 0;
    if (p >= end || *p != '{')
        return -1;
    while (p < end) {
        unsigned c = *p++;
        if (c == '"') {
            while (p < end && *p != '"') {
                if (*p == '\\' && end - p < 2)
                    return -1;
                p += *p == '\\' ? 2 : 1;
            }
            if (p >= end)
                return -1;
            p++;
        } else if (c == '{' || c == '[') {
            if (++depth > SC_DATA_DEPTH)
                return -1;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) {
                *ret_len = (size_t)(p - s->p);
                return 0;
            }
        }
    }
    return -1;
}

/* A string (whitespace before it skipped) written at *io as json_dumpb writes its value: ", \ and
 * control characters escaped (\b \f \n \r \t by name, the others as \u00XX), everything else
 * as UTF-8 ('/' included). Accepts exactly what tdm_tmi_sc_str accepts, without its length cap.
 * Never writes more bytes than it reads: each escape it writes replaces one at least as long. */
static int sc_str_dump(scan_t *s, char **io)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p, *end = s->end;
    char *o = *io;
    if (sc_eat(s, '"'))
        return -1;
    p = s->p;
    *o++ = '"';
    for (;;) {
        if (p >= end)
            return -1;
        unsigned c = *p;
        if (c == '"')
            break;
        if (c < 0x20)
            return -1;
        if (c < 0x80 && c != '\\') {
            *o++ = (char)c;
            p++;
            continue;
        }
        if (c != '\\') {
            size_t k = tdm_tmi_sc_utf8(p, end);
            if (!k)
                return -1;
            memcpy(o, p, k);
            o += k;
            p += k;
            continue;
        }
        if (end - p < 2)
            return -1;
        uint32_t cp, lo;
        switch (p[1]) {
        case '"':
        case '\\':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            *o++ = '\\';
            *o++ = (char)p[1];
            p += 2;
            continue;
        case '/':
            *o++ = '/';
            p += 2;
            continue;
        case 'u':
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
            break;
        default:
            return -1;
        }
        /* a \u escape: six bytes read (twelve for a pair) */
        if (cp < 0x20 || cp == '"' || cp == '\\') {
            const char *named = cp == '\b'   ? "b"
                                : cp == '\f' ? "f"
                                : cp == '\n' ? "n"
                                : cp == '\r' ? "r"
                                : cp == '\t' ? "t"
                                : cp == '"'  ? "\""
                                : cp == '\\' ? "\\"
                                             : NULL;
            *o++ = '\\';
            if (named) {
                *o++ = *named;
            } else {
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = hex[cp >> 4];
                *o++ = hex[cp & 15];
            }
        } else if (cp < 0x80) {
            *o++ = (char)cp;
        } else if (cp < 0x800) {
            *o++ = (char)(0xC0 | (cp >> 6));
            *o++ = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            *o++ = (char)(0xE0 | (cp >> 12));
            *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (char)(0x80 | (cp & 0x3F));
        } else {
            *o++ = (char)(0xF0 | (cp >> 18));
            *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
            *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    *o++ = '"';
    s->p = p + 1;
    *io = o;
    return 0;
}

#define SC_FLAT_KEYS 32 /* keys compared for repeats; an object with more takes jansson's path */

/* The usual `data`: one flat object of strings, non-negative integers, true, false and null,
 * written straight into event i's text as json_dumpb(JSON_COMPACT) writes what json_loadb builds
 * from it (members in their order, no whitespace, strings as sc_str_dump writes them) —
 * no tree, no parser stream. -1 (nothing kept) on anything else (nesting, reals, negative
 * numbers, a repeated key, a NUL, more than SC_FLAT_KEYS members, a text over max_bytes ...):
 * the caller then hands the same bytes to json_loadb, which judges them as before. The compact
 * text is never longer than the object's: room for n bytes is made once. */
int tdm_tmi_sc_data_flat(const unsigned char *p, size_t n, size_t max_bytes, dtext_t *d, uint32_t i)
{
    scan_t s = {p, p + n};
    size_t kstart[SC_FLAT_KEYS], klen[SC_FLAT_KEYS], nk = 0;
    char *base = tdm_tmi_dtext_reserve(d, n), *o = base;
    if (sc_eat(&s, '{'))
        return -1;
    *o++ = '{';
    for (;;) {
        sc_ws(&s);
        if (s.p < s.end && *s.p == '}') {
            s.p++;
            break;
        }
        if (nk && sc_eat(&s, ','))
            return -1;
        if (nk == SC_FLAT_KEYS)
            return -1;
        if (nk)
            *o++ = ',';
        /* keys compared as written: the dump of a string is a one-to-one function of it */
        char *k0 = o;
        if (sc_str_dump(&s, &o) || sc_eat(&s, ':'))
            return -1;
        kstart[nk] = (size_t)(k0 - base);
        klen[nk] = (size_t)(o - k0);
        for (size_t j = 0; j < nk; j++)
            if (klen[j] == klen[nk] && !memcmp(base + kstart[j], k0, klen[nk]))
                return -1;
        nk++;
        *o++ = ':';
        sc_ws(&s);
        if (s.p >= s.end)
            return -1;
        unsigned c = *s.p;
        uint64_t u;
        if (c == '"') {
            if (sc_str_dump(&s, &o))
                return -1;
        } else if (c >= '0' && c <= '9') {
            if (tdm_tmi_sc_uint(&s, JSON_UINT_MAX, &u))
                return -1;
            o = tdm_json_put_u64(o, u);
        } else if (s.end - s.p >= 4 && !memcmp(s.p, "true", 4)) {
            s.p += 4;
            memcpy(o, "true", 4);
            o += 4;
        } else if (s.end - s.p >= 5 && !memcmp(s.p, "false", 5)) {
            s.p += 5;
            memcpy(o, "false", 5);
            o += 5;
        } else if (s.end - s.p >= 4 && !memcmp(s.p, "null", 4)) {
            s.p += 4;
            memcpy(o, "null", 4);
            o += 4;
        } else {
            return -1;
        }
        /* what follows a value must be ',' or '}' (checked above on the next round); a NUL
         * after a literal or number is one of jansson's quirks: its own path judges it */
        if (s.p < s.end && *s.p == '\0')
            return -1;
    }
    *o++ = '}';
    sc_ws(&s);
    if (s.p != s.end || (size_t)(o - base) > max_bytes)
        return -1;
    size_t start = d->len;
    d->len += (size_t)(o - base);
    tdm_tmi_dtext_close(d, start, i);
    return 0;
}

static int sc_event(scan_t *s, const tdm_tm_limits_t *lim, dtext_t *dt, uint32_t i,
                    tdm_tm_event_t *e)
{
    static const char *const keys[] = {"ts_us", "type",   "room", "from",
                                       "to",    "reason", "data", NULL};
    unsigned seen = 0;
    int first = 1, k, bad;
    size_t n;
    memset(e, 0, sizeof(*e));
    if (sc_eat(s, '{'))
        return -1;
    while ((k = tdm_tmi_sc_member(s, &first, keys, &seen)) > 0) {
        switch (k) {
        case 1:
            bad = tdm_tmi_sc_i64(s, INT64_C(1) << 62, &e->ts_us);
            break;
        case 2:
            bad = tdm_tmi_sc_field(s, e->type, TDM_TM_TYPE_MAX);
            break;
        case 3:
            e->has_room = !tdm_tmi_sc_null(s);
            bad = e->has_room ? tdm_tmi_sc_hex64(s, &e->room) : 0;
            break;
        case 4:
            bad = tdm_tmi_sc_null(s) ? 0 : tdm_tmi_sc_str(s, e->from, TDM_TM_STATE_MAX, &n);
            break;
        case 5:
            bad = tdm_tmi_sc_null(s) ? 0 : tdm_tmi_sc_str(s, e->to, TDM_TM_STATE_MAX, &n);
            break;
        case 6:
            bad = tdm_tmi_sc_null(s) ? 0 : tdm_tmi_sc_str(s, e->reason, TDM_TM_REASON_MAX, &n);
            break;
        default:
            if (tdm_tmi_sc_null(s)) {
                bad = 0;
                break;
            }
            bad = -1;
            if (sc_object_span(s, &n))
                break;
            if (tdm_tmi_sc_data_flat(s->p, n, lim->max_data_bytes, dt, i) == 0) {
                s->p += n;
                bad = 0;
                break;
            }
            json_t *data = json_loadb((const char *)s->p, n, JSON_REJECT_DUPLICATES, NULL);
            if (data && json_is_object(data) &&
                tdm_tmi_dtext_dump(dt, data, i, lim->max_data_bytes) == 0) {
                s->p += n;
                bad = 0;
            }
            json_decref(data);
            break;
        }
        if (bad)
            return -1;
    }
    return k < 0 || (seen & 3u) != 3u ? -1 : 0;
}

/* Grows a batch array by one element within `max`; the new element's address or NULL. */
static void *sc_push(void **arr, uint32_t *n, uint32_t *cap, uint32_t max, size_t size)
{
    if (*n >= max)
        return NULL;
    if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 64;
        if (c > max)
            c = max;
        *arr = tdm_realloc(*arr, (size_t)c * size);
        *cap = c;
    }
    return (char *)*arr + (size_t)(*n)++ * size;
}

tdm_status_t tdm_tm_batch_scan(const char *buf, size_t len, const tdm_tm_limits_t *lim,
                               tdm_tm_batch_t *ret)
{
    static const char *const keys[] = {"v",    "worker", "group",   "role",   "instance_id",
                                       "rank", "seq",    "samples", "events", NULL};
    tdm_tm_limits_t dl;
    tdm_tm_batch_t b;
    dtext_t dt = {0};
    scan_t s = {(const unsigned char *)buf, (const unsigned char *)buf + len};
    unsigned seen = 0;
    uint32_t cap_s = 0, cap_e = 0;
    uint64_t u = 0;
    int first = 1, k = 0, bad = 0;

    if (!lim) {
        tdm_tm_limits_default(&dl);
        lim = &dl;
    }
    memset(&b, 0, sizeof(b));
    if (!buf || len > lim->max_body_bytes || sc_eat(&s, '{'))
        return TDM_ERR_FORMAT;
    while (!bad && (k = tdm_tmi_sc_member(&s, &first, keys, &seen)) > 0) {
        int f = 1;
        switch (k) {
        case 1:
            bad = tdm_tmi_sc_uint(&s, TDM_TM_VERSION, &u) || u != TDM_TM_VERSION;
            break;
        case 2:
            bad = tdm_tmi_sc_field(&s, b.worker, TDM_TM_NAME_MAX);
            break;
        case 3:
            bad = tdm_tmi_sc_field(&s, b.group, TDM_TM_NAME_MAX);
            break;
        case 4:
            bad = tdm_tmi_sc_field(&s, b.role, TDM_TM_ROLE_MAX) || !tdm_tmi_role_ok(b.role);
            break;
        case 5:
            bad = tdm_tmi_sc_hex64(&s, &b.instance_id);
            break;
        case 6:
            bad = tdm_tmi_sc_uint(&s, UINT16_MAX, &u);
            b.rank = (uint32_t)u;
            break;
        case 7:
            bad = tdm_tmi_sc_uint(&s, JSON_UINT_MAX, &b.seq);
            break;
        case 8:
            if ((bad = sc_eat(&s, '[')))
                break;
            while (!bad && (bad = tdm_tmi_sc_elem(&s, &f)) == 1) {
                tdm_tm_sample_t *x = sc_push((void **)&b.samples, &b.n_samples, &cap_s,
                                             lim->max_samples, sizeof(*x));
                bad = !x || sc_sample(&s, x) ? -1 : 0;
            }
            break;
        default:
            if ((bad = sc_eat(&s, '[')))
                break;
            if (!cap_e) {
                /* Room for as many events as the rest of the text can hold (the shortest is
                 * SC_EVENT_MIN bytes), within the limit: one allocation, never a copy on growth. */
                size_t room = (size_t)(s.end - s.p) / SC_EVENT_MIN + 1;
                cap_e = room < lim->max_events ? (uint32_t)room : lim->max_events;
                if (cap_e)
                    b.events = tdm_malloc((size_t)cap_e * sizeof(*b.events));
            }
            while (!bad && (bad = tdm_tmi_sc_elem(&s, &f)) == 1) {
                tdm_tm_event_t *e =
                    sc_push((void **)&b.events, &b.n_events, &cap_e, lim->max_events, sizeof(*e));
                bad = 0;
                if (!e) {
                    bad = -1;
                } else if (sc_event(&s, lim, &dt, b.n_events - 1, e)) {
                    b.n_events--; /* nothing of it is held */
                    bad = -1;
                }
            }
            break;
        }
    }
    sc_ws(&s);
    if (bad || k < 0 || seen != 0x1FFu || s.p != s.end) {
        tdm_tmi_dtext_free(&dt);
        tdm_tm_batch_clear(&b);
        return TDM_ERR_FORMAT;
    }
    if (b.n_samples == 0) {
        tdm_free(b.samples);
        b.samples = NULL;
    }
    if (b.n_events == 0) {
        tdm_free(b.events);
        b.events = NULL;
    }
    tdm_tmi_dtext_finish(&dt, &b);
    *ret = b;
    return TDM_OK;
}
