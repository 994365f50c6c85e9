/*
 * telemetry.c — telemetry v1 (docs/contracts.md §c) to and from JSON. The decoder is the ingest
 * boundary of tandemd: it sees whatever reaches the HTTP port, so it checks every member's type,
 * range and length, refuses unknown members and bounds what a batch may make us allocate. The
 * encoder applies the same rules so a worker never sends what tandemd would refuse.
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

#define JSON_UINT_MAX ((uint64_t)INT64_MAX)

/* A sample's members: the first SAMPLE_REQUIRED are required, the serving statistics after them
 * optional (0 when absent), read and written through sample_stats (same order). */
#define SAMPLE_REQUIRED 10
#define SAMPLE_STATS 11
static const char *const sample_keys[] = {"ts_us",
                                          "iter",
                                          "path",
                                          "plan_hash",
                                          "coll_seq",
                                          "coll_hash",
                                          "in_coll",
                                          "bs",
                                          "waiting",
                                          "running",
                                          "tokens_out",
                                          "requests_done",
                                          "ttft_p50_us",
                                          "ttft_p99_us",
                                          "itl_p50_us",
                                          "itl_p99_us",
                                          "kv_pages_used",
                                          "kv_pages_total",
                                          "host_pages_used",
                                          "host_pages_total",
                                          "corruption_total",
                                          NULL};
_Static_assert(sizeof(sample_keys) / sizeof(sample_keys[0]) == SAMPLE_REQUIRED + SAMPLE_STATS + 1,
               "sample_keys and sample_stats disagree");

/* wide: a 63-bit counter (uint64_t); else a uint32_t */
#define STAT(f, w)                                                                                 \
    {                                                                                              \
        offsetof(tdm_tm_sample_t, f), w                                                            \
    }
static const struct {
    size_t off;
    int wide;
} sample_stats[SAMPLE_STATS] = {
    STAT(tokens_out, 1),       STAT(requests_done, 1),   STAT(ttft_p50_us, 0),
    STAT(ttft_p99_us, 0),      STAT(itl_p50_us, 0),      STAT(itl_p99_us, 0),
    STAT(kv_pages_used, 0),    STAT(kv_pages_total, 0),  STAT(host_pages_used, 0),
    STAT(host_pages_total, 0), STAT(corruption_total, 1)};
#undef STAT

static uint64_t stat_get(const tdm_tm_sample_t *s, size_t k)
{
    const char *p = (const char *)s + sample_stats[k].off;
    uint64_t w;
    uint32_t n;
    if (sample_stats[k].wide) {
        memcpy(&w, p, sizeof(w));
        return w;
    }
    memcpy(&n, p, sizeof(n));
    return n;
}

static void stat_set(tdm_tm_sample_t *s, size_t k, uint64_t v)
{
    char *p = (char *)s + sample_stats[k].off;
    uint32_t n = (uint32_t)v;
    if (sample_stats[k].wide)
        memcpy(p, &v, sizeof(v));
    else
        memcpy(p, &n, sizeof(n));
}

static uint64_t stat_max(size_t k)
{
    return sample_stats[k].wide ? JSON_UINT_MAX : UINT32_MAX;
}

void tdm_tm_limits_default(tdm_tm_limits_t *ret)
{
    ret->max_samples = 1024;
    ret->max_events = 1024;
    ret->max_data_bytes = 8192;
    ret->max_body_bytes = 4u << 20;
}

void tdm_tm_batch_clear(tdm_tm_batch_t *b)
{
    if (!b)
        return;
    for (uint32_t i = 0; b->events && i < b->n_events; i++)
        json_decref(b->events[i].data);
    tdm_free(b->samples);
    tdm_free(b->events);
    tdm_free(b->data_buf);
    b->samples = NULL;
    b->events = NULL;
    b->data_buf = NULL;
    b->n_samples = b->n_events = 0;
}

json_t *tdm_tm_event_data(const tdm_tm_event_t *e)
{
    if (e->data)
        return json_incref(e->data);
    if (!e->data_json)
        return NULL;
    json_t *d = json_loadb(e->data_json, e->data_len, JSON_REJECT_DUPLICATES, NULL);
    if (d && !json_is_object(d)) {
        json_decref(d);
        d = NULL;
    }
    return d;
}

/* The decoded events' data texts, built back to back in one buffer. Texts are placed by offset
 * (the buffer may move as it grows) and the events point into it once the batch is complete. */
typedef struct dtext {
    char *p;
    size_t len, cap;
    size_t *off; /* per event: offset + 1 of its text, 0 for none */
    size_t noff;
} dtext_t;

static char *dtext_reserve(dtext_t *d, size_t extra)
{
    if (d->cap - d->len < extra + 1) {
        size_t cap = d->cap ? d->cap : 1024;
        while (cap - d->len < extra + 1)
            cap *= 2;
        d->p = tdm_realloc(d->p, cap);
        d->cap = cap;
    }
    return d->p + d->len;
}

/* Event i's text is the one that ends at d->len (NUL-terminated there). */
static void dtext_close(dtext_t *d, size_t start, uint32_t i)
{
    if (i >= d->noff) {
        size_t n = d->noff ? d->noff : 256;
        while (n <= i)
            n *= 2;
        d->off = tdm_realloc(d->off, n * sizeof(*d->off));
        memset(d->off + d->noff, 0, (n - d->noff) * sizeof(*d->off));
        d->noff = n;
    }
    d->p[d->len] = '\0';
    d->off[i] = start + 1;
    d->len++;
}

/* A json_dumpb(JSON_COMPACT) of `data` as event i's text; -1 when it is over max_bytes. */
static int dtext_dump(dtext_t *d, const json_t *data, uint32_t i, size_t max_bytes)
{
    size_t n = json_dumpb(data, NULL, 0, JSON_COMPACT);
    if (n > max_bytes)
        return -1;
    size_t start = d->len;
    d->len += json_dumpb(data, dtext_reserve(d, n), n, JSON_COMPACT);
    dtext_close(d, start, i);
    return 0;
}

/* Points the batch's events at their texts and hands the buffer to the batch. */
static void dtext_finish(dtext_t *d, tdm_tm_batch_t *b)
{
    if (d->off) {
        for (uint32_t i = 0; i < b->n_events && i < d->noff; i++) {
            if (!d->off[i])
                continue;
            b->events[i].data_json = d->p + d->off[i] - 1;
            b->events[i].data_len = (uint32_t)strlen(b->events[i].data_json);
        }
    }
    b->data_buf = d->p;
    tdm_free(d->off);
    memset(d, 0, sizeof(*d));
}

static void dtext_free(dtext_t *d)
{
    tdm_free(d->p);
    tdm_free(d->off);
    memset(d, 0, sizeof(*d));
}

static int role_ok(const char *r)
{
    return !strcmp(r, "prefill") || !strcmp(r, "decode") || !strcmp(r, "null");
}

/* A bounded, NUL-terminated field of a caller-built struct. */
static tdm_status_t field_ok(const char *s, size_t cap, int required, const char *path, char *err,
                             size_t err_len)
{
    size_t n = strnlen(s, cap + 1);
    if (n > cap) {
        snprintf(err, err_len, "%s: not terminated within %zu bytes", path, cap);
        return TDM_ERR_RANGE;
    }
    if (required && n == 0) {
        snprintf(err, err_len, "%s: empty", path);
        return TDM_ERR_INVAL;
    }
    return TDM_OK;
}

static json_t *str_or_null(const char *s)
{
    return *s ? json_string(s) : json_null();
}

static size_t data_size(const json_t *data)
{
    return json_dumpb(data, NULL, 0, JSON_COMPACT);
}

tdm_status_t tdm_tm_batch_to_json(const tdm_tm_batch_t *b, const tdm_tm_limits_t *lim, json_t **ret,
                                  char *err, size_t err_len)
{
    tdm_tm_limits_t dl;
    char p[96];
    if (!lim) {
        tdm_tm_limits_default(&dl);
        lim = &dl;
    }
    TDM_TRY(field_ok(b->worker, TDM_TM_NAME_MAX, 1, "worker", err, err_len));
    TDM_TRY(field_ok(b->group, TDM_TM_NAME_MAX, 1, "group", err, err_len));
    TDM_TRY(field_ok(b->role, TDM_TM_ROLE_MAX, 1, "role", err, err_len));
    if (!role_ok(b->role)) {
        snprintf(err, err_len, "role: \"%s\" is not prefill, decode or null", b->role);
        return TDM_ERR_INVAL;
    }
    if (b->n_samples > lim->max_samples || b->n_events > lim->max_events) {
        snprintf(err, err_len, "batch of %u samples and %u events, limits %u and %u", b->n_samples,
                 b->n_events, lim->max_samples, lim->max_events);
        return TDM_ERR_RANGE;
    }
    if (b->seq > JSON_UINT_MAX) {
        snprintf(err, err_len, "seq: above 2^63-1");
        return TDM_ERR_RANGE;
    }
    for (uint32_t i = 0; i < b->n_samples; i++) {
        const tdm_tm_sample_t *s = &b->samples[i];
        snprintf(p, sizeof(p), "samples[%u]", i);
        TDM_TRY(field_ok(s->path, TDM_TM_PATH_MAX, 1, p, err, err_len));
        if (s->in_coll_valid)
            TDM_TRY(field_ok(s->in_coll.op, TDM_TM_PATH_MAX, 1, p, err, err_len));
        if (s->ts_us < 0 || s->iter > JSON_UINT_MAX || s->coll_seq > JSON_UINT_MAX ||
            (s->in_coll_valid && (s->in_coll.seq > JSON_UINT_MAX || s->in_coll.since_us < 0)) ||
            s->tokens_out > JSON_UINT_MAX || s->requests_done > JSON_UINT_MAX ||
            s->corruption_total > JSON_UINT_MAX) {
            snprintf(err, err_len, "%s: a counter or time is out of range", p);
            return TDM_ERR_RANGE;
        }
    }
    for (uint32_t i = 0; i < b->n_events; i++) {
        const tdm_tm_event_t *e = &b->events[i];
        snprintf(p, sizeof(p), "events[%u]", i);
        TDM_TRY(field_ok(e->type, TDM_TM_TYPE_MAX, 1, p, err, err_len));
        TDM_TRY(field_ok(e->from, TDM_TM_STATE_MAX, 0, p, err, err_len));
        TDM_TRY(field_ok(e->to, TDM_TM_STATE_MAX, 0, p, err, err_len));
        TDM_TRY(field_ok(e->reason, TDM_TM_REASON_MAX, 0, p, err, err_len));
        if (e->ts_us < 0) {
            snprintf(err, err_len, "%s.ts_us: negative", p);
            return TDM_ERR_RANGE;
        }
        if (e->data || e->data_json) {
            json_t *d = tdm_tm_event_data(e);
            int bad = !d || data_size(d) > lim->max_data_bytes;
            json_decref(d);
            if (bad) {
                snprintf(err, err_len, "%s.data: not an object or over %u bytes", p,
                         lim->max_data_bytes);
                return TDM_ERR_RANGE;
            }
        }
    }

    json_t *samples = json_array(), *events = json_array();
    for (uint32_t i = 0; i < b->n_samples; i++) {
        const tdm_tm_sample_t *s = &b->samples[i];
        json_t *in_coll = s->in_coll_valid ? json_pack("{s:s, s:I, s:I}", "op", s->in_coll.op,
                                                       "seq", (json_int_t)s->in_coll.seq,
                                                       "since_us", (json_int_t)s->in_coll.since_us)
                                           : json_null();
        json_t *o = json_pack("{s:I, s:I, s:s, s:o, s:I, s:o, s:o, s:I, s:I, s:I}", "ts_us",
                              (json_int_t)s->ts_us, "iter", (json_int_t)s->iter, "path", s->path,
                              "plan_hash", tdm_json_hex64(s->plan_hash), "coll_seq",
                              (json_int_t)s->coll_seq, "coll_hash", tdm_json_hex64(s->coll_hash),
                              "in_coll", in_coll, "bs", (json_int_t)s->bs, "waiting",
                              (json_int_t)s->waiting, "running", (json_int_t)s->running);
        if (o) { /* the optional statistics, in the order of sample_keys */
            for (size_t k = 0; k < SAMPLE_STATS; k++)
                json_object_set_new(o, sample_keys[SAMPLE_REQUIRED + k],
                                    json_integer((json_int_t)stat_get(s, k)));
        }
        json_array_append_new(samples, o);
    }
    for (uint32_t i = 0; i < b->n_events; i++) {
        const tdm_tm_event_t *e = &b->events[i];
        json_array_append_new(
            events,
            json_pack("{s:I, s:s, s:o, s:o, s:o, s:o, s:o}", "ts_us", (json_int_t)e->ts_us, "type",
                      e->type, "room", e->has_room ? tdm_json_hex64(e->room) : json_null(), "from",
                      str_or_null(e->from), "to", str_or_null(e->to), "reason",
                      str_or_null(e->reason), "data",
                      e->data || e->data_json ? tdm_tm_event_data(e) : json_null()));
    }
    json_t *root = json_pack("{s:i, s:s, s:s, s:s, s:o, s:I, s:I, s:o, s:o}", "v", TDM_TM_VERSION,
                             "worker", b->worker, "group", b->group, "role", b->role, "instance_id",
                             tdm_json_hex64(b->instance_id), "rank", (json_int_t)b->rank, "seq",
                             (json_int_t)b->seq, "samples", samples, "events", events);
    if (!root || json_array_size(samples) != b->n_samples ||
        json_array_size(events) != b->n_events) {
        /* json_pack only fails on invalid UTF-8 in a string field here */
        json_decref(root);
        snprintf(err, err_len, "a string field is not valid UTF-8");
        return TDM_ERR_INVAL;
    }
    *ret = root;
    return TDM_OK;
}

tdm_status_t tdm_tm_batch_encode(const tdm_tm_batch_t *b, const tdm_tm_limits_t *lim,
                                 char **ret_text, size_t *ret_len, char *err, size_t err_len)
{
    json_t *root;
    TDM_TRY(tdm_tm_batch_to_json(b, lim, &root, err, err_len));
    char *text = tdm_json_dumps(root);
    json_decref(root);
    if (!text) {
        snprintf(err, err_len, "out of memory serializing a batch");
        return TDM_ERR_NOMEM;
    }
    *ret_text = text;
    *ret_len = strlen(text);
    return TDM_OK;
}

/* Copy a bounded string member into a fixed field. */
static tdm_status_t get_str(const json_t *o, const char *path, const char *key, char *dst,
                            size_t cap, int optional, char *err, size_t err_len)
{
    const char *s;
    if (optional) {
        TDM_TRY(tdm_json_get_string_opt(o, path, key, cap, &s, err, err_len));
        if (!s) {
            dst[0] = '\0';
            return TDM_OK;
        }
    } else {
        TDM_TRY(tdm_json_get_string(o, path, key, cap, &s, err, err_len));
        if (!*s) {
            char p[128];
            snprintf(err, err_len, "%s: empty", tdm_json_path(p, sizeof(p), path, key));
            return TDM_ERR_INVAL;
        }
    }
    memcpy(dst, s, strlen(s) + 1);
    return TDM_OK;
}

static tdm_status_t get_u32(const json_t *o, const char *path, const char *key, uint32_t *ret,
                            char *err, size_t err_len)
{
    uint64_t v;
    TDM_TRY(tdm_json_get_uint(o, path, key, UINT32_MAX, &v, err, err_len));
    *ret = (uint32_t)v;
    return TDM_OK;
}

/* An optional unsigned member: 0 when absent, else what tdm_json_get_uint says. */
static tdm_status_t get_uint_opt(const json_t *o, const char *path, const char *key, uint64_t max,
                                 uint64_t *ret, char *err, size_t err_len)
{
    if (!json_object_get(o, key)) {
        *ret = 0;
        return TDM_OK;
    }
    return tdm_json_get_uint(o, path, key, max, ret, err, err_len);
}

static tdm_status_t decode_sample(const json_t *o, const char *p, tdm_tm_sample_t *s, char *err,
                                  size_t err_len)
{
    static const char *const ic_keys[] = {"op", "seq", "since_us", NULL};
    char ip[96];
    json_t *ic;
    TDM_TRY(tdm_json_check_keys(o, p, sample_keys, err, err_len));
    TDM_TRY(tdm_json_get_ts_us(o, p, "ts_us", &s->ts_us, err, err_len));
    TDM_TRY(tdm_json_get_uint(o, p, "iter", JSON_UINT_MAX, &s->iter, err, err_len));
    TDM_TRY(get_str(o, p, "path", s->path, TDM_TM_PATH_MAX, 0, err, err_len));
    TDM_TRY(tdm_json_get_hex64(o, p, "plan_hash", &s->plan_hash, err, err_len));
    TDM_TRY(tdm_json_get_uint(o, p, "coll_seq", JSON_UINT_MAX, &s->coll_seq, err, err_len));
    TDM_TRY(tdm_json_get_hex64(o, p, "coll_hash", &s->coll_hash, err, err_len));
    ic = json_object_get(o, "in_coll");
    if (!ic) {
        snprintf(err, err_len, "%s.in_coll: missing (null when outside a collective)", p);
        return TDM_ERR_NOTFOUND;
    }
    s->in_coll_valid = !json_is_null(ic);
    if (s->in_coll_valid) {
        tdm_json_path(ip, sizeof(ip), p, "in_coll");
        if (!json_is_object(ic)) {
            snprintf(err, err_len, "%s: expected an object or null", ip);
            return TDM_ERR_INVAL;
        }
        TDM_TRY(tdm_json_check_keys(ic, ip, ic_keys, err, err_len));
        TDM_TRY(get_str(ic, ip, "op", s->in_coll.op, TDM_TM_PATH_MAX, 0, err, err_len));
        TDM_TRY(tdm_json_get_uint(ic, ip, "seq", JSON_UINT_MAX, &s->in_coll.seq, err, err_len));
        TDM_TRY(tdm_json_get_ts_us(ic, ip, "since_us", &s->in_coll.since_us, err, err_len));
    }
    TDM_TRY(get_u32(o, p, "bs", &s->bs, err, err_len));
    TDM_TRY(get_u32(o, p, "waiting", &s->waiting, err, err_len));
    TDM_TRY(get_u32(o, p, "running", &s->running, err, err_len));
    for (size_t k = 0; k < SAMPLE_STATS; k++) {
        uint64_t v;
        TDM_TRY(
            get_uint_opt(o, p, sample_keys[SAMPLE_REQUIRED + k], stat_max(k), &v, err, err_len));
        stat_set(s, k, v);
    }
    return TDM_OK;
}

static tdm_status_t decode_event(const json_t *o, const char *p, const tdm_tm_limits_t *lim,
                                 dtext_t *dt, uint32_t i, tdm_tm_event_t *e, char *err,
                                 size_t err_len)
{
    static const char *const keys[] = {"ts_us", "type",   "room", "from",
                                       "to",    "reason", "data", NULL};
    json_t *room, *data;
    TDM_TRY(tdm_json_check_keys(o, p, keys, err, err_len));
    TDM_TRY(tdm_json_get_ts_us(o, p, "ts_us", &e->ts_us, err, err_len));
    TDM_TRY(get_str(o, p, "type", e->type, TDM_TM_TYPE_MAX, 0, err, err_len));
    room = json_object_get(o, "room");
    e->has_room = room && !json_is_null(room);
    if (e->has_room)
        TDM_TRY(tdm_json_get_hex64(o, p, "room", &e->room, err, err_len));
    TDM_TRY(get_str(o, p, "from", e->from, TDM_TM_STATE_MAX, 1, err, err_len));
    TDM_TRY(get_str(o, p, "to", e->to, TDM_TM_STATE_MAX, 1, err, err_len));
    TDM_TRY(get_str(o, p, "reason", e->reason, TDM_TM_REASON_MAX, 1, err, err_len));
    data = json_object_get(o, "data");
    if (data && !json_is_null(data)) {
        if (!json_is_object(data)) {
            snprintf(err, err_len, "%s.data: expected an object or null", p);
            return TDM_ERR_INVAL;
        }
        /* kept as its compact text: the batch does not keep the request's document alive */
        if (dtext_dump(dt, data, i, lim->max_data_bytes)) {
            snprintf(err, err_len, "%s.data: %zu bytes, limit %u", p, data_size(data),
                     lim->max_data_bytes);
            return TDM_ERR_RANGE;
        }
    }
    return TDM_OK;
}

tdm_status_t tdm_tm_batch_from_json(const json_t *root, const tdm_tm_limits_t *lim,
                                    tdm_tm_batch_t *ret, char *err, size_t err_len)
{
    static const char *const keys[] = {"v",    "worker", "group",   "role",   "instance_id",
                                       "rank", "seq",    "samples", "events", NULL};
    tdm_tm_limits_t dl;
    tdm_tm_batch_t b;
    json_t *samples, *events;
    dtext_t dt = {0};
    int64_t v;
    uint64_t u;
    char p[96];
    tdm_status_t st;

    if (!lim) {
        tdm_tm_limits_default(&dl);
        lim = &dl;
    }
    memset(&b, 0, sizeof(b));
    TDM_TRY(tdm_json_check_keys(root, "", keys, err, err_len));
    TDM_TRY(tdm_json_get_int(root, "", "v", INT64_MIN, INT64_MAX, &v, err, err_len));
    if (v != TDM_TM_VERSION) {
        snprintf(err, err_len, "v: version %lld, this build speaks %d", (long long)v,
                 TDM_TM_VERSION);
        return TDM_ERR_UNSUPPORTED;
    }
    TDM_TRY(get_str(root, "", "worker", b.worker, TDM_TM_NAME_MAX, 0, err, err_len));
    TDM_TRY(get_str(root, "", "group", b.group, TDM_TM_NAME_MAX, 0, err, err_len));
    TDM_TRY(get_str(root, "", "role", b.role, TDM_TM_ROLE_MAX, 0, err, err_len));
    if (!role_ok(b.role)) {
        snprintf(err, err_len, "role: \"%s\" is not prefill, decode or null", b.role);
        return TDM_ERR_INVAL;
    }
    TDM_TRY(tdm_json_get_hex64(root, "", "instance_id", &b.instance_id, err, err_len));
    TDM_TRY(tdm_json_get_uint(root, "", "rank", UINT16_MAX, &u, err, err_len));
    b.rank = (uint32_t)u;
    TDM_TRY(tdm_json_get_uint(root, "", "seq", JSON_UINT_MAX, &b.seq, err, err_len));
    TDM_TRY(tdm_json_get_array(root, "", "samples", &samples, err, err_len));
    TDM_TRY(tdm_json_get_array(root, "", "events", &events, err, err_len));
    if (json_array_size(samples) > lim->max_samples) {
        snprintf(err, err_len, "samples: %zu entries, limit %u", json_array_size(samples),
                 lim->max_samples);
        return TDM_ERR_RANGE;
    }
    if (json_array_size(events) > lim->max_events) {
        snprintf(err, err_len, "events: %zu entries, limit %u", json_array_size(events),
                 lim->max_events);
        return TDM_ERR_RANGE;
    }
    b.n_samples = (uint32_t)json_array_size(samples);
    b.samples = b.n_samples ? tdm_calloc(b.n_samples, sizeof(*b.samples)) : NULL;
    for (uint32_t i = 0; i < b.n_samples; i++) {
        tdm_json_path_idx(p, sizeof(p), "samples", i);
        TDM_CHECK_GOTO(decode_sample(json_array_get(samples, i), p, &b.samples[i], err, err_len),
                       st, err_clear);
    }
    b.n_events = (uint32_t)json_array_size(events);
    b.events = b.n_events ? tdm_calloc(b.n_events, sizeof(*b.events)) : NULL;
    for (uint32_t i = 0; i < b.n_events; i++) {
        tdm_json_path_idx(p, sizeof(p), "events", i);
        TDM_CHECK_GOTO(
            decode_event(json_array_get(events, i), p, lim, &dt, i, &b.events[i], err, err_len), st,
            err_clear);
    }
    dtext_finish(&dt, &b);
    *ret = b;
    return TDM_OK;
err_clear:
    dtext_free(&dt);
    tdm_tm_batch_clear(&b);
    return st;
}

tdm_status_t tdm_tm_batch_decode_jansson(const char *buf, size_t len, const tdm_tm_limits_t *lim,
                                         tdm_tm_batch_t *ret, char *err, size_t err_len)
{
    tdm_tm_limits_t dl;
    json_t *root;
    if (!lim) {
        tdm_tm_limits_default(&dl);
        lim = &dl;
    }
    TDM_TRY(tdm_json_parse(buf, len, lim->max_body_bytes, &root, err, err_len));
    tdm_status_t st = tdm_tm_batch_from_json(root, lim, ret, err, err_len);
    json_decref(root);
    return st;
}

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
 * is kept as text: a flat object is written compact as it is read (sc_data_flat), anything else
 * goes to json_loadb itself (its bytes found by a bracket scan) and is dumped back, so the text is
 * exactly the jansson path's.
 */
#define SC_DATA_DEPTH 256 /* deeper data is left to the jansson path (its limit is 2048) */
#define SC_EVENT_MIN 22   /* {"ts_us":0,"type":"a"} */

typedef struct scan {
    const unsigned char *p, *end;
} scan_t;

static inline void sc_ws(scan_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\t' || *s->p == '\r'))
        s->p++;
}

/* Skips whitespace, then consumes `c`; 0 when it is there. */
static inline int sc_eat(scan_t *s, unsigned char c)
{
    sc_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 0;
    }
    return -1;
}

static int sc_hex4(const unsigned char *p, uint32_t *ret)
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
static size_t sc_utf8(const unsigned char *p, const unsigned char *end)
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
static int sc_str(scan_t *s, char *dst, size_t cap, size_t *ret_len)
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
            size_t k = sc_utf8(p, end);
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
            if (end - p < 6 || sc_hex4(p + 2, &cp))
                return -1;
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || sc_hex4(p + 2, &lo) ||
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
static int sc_field(scan_t *s, char *dst, size_t cap)
{
    size_t n;
    return sc_str(s, dst, cap, &n) || n == 0 ? -1 : 0;
}

static int sc_hex64(scan_t *s, uint64_t *ret)
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
    if (sc_str(s, t, TDM_JSON_HEX64_LEN, &n) || n != TDM_JSON_HEX64_LEN)
        return -1;
    return tdm_json_hex64_parse(t, ret) == TDM_OK ? 0 : -1;
}

/* An integer in [0, max] written as jansson reads an integer ("-0" is 0); -1 for a real, a
 * leading zero, a value outside int64, a negative one or one above max. */
static int sc_uint(scan_t *s, uint64_t max, uint64_t *ret)
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

static int sc_i64(scan_t *s, int64_t max, int64_t *ret)
{
    uint64_t v;
    if (sc_uint(s, (uint64_t)max, &v))
        return -1;
    *ret = (int64_t)v;
    return 0;
}

static int sc_u32(scan_t *s, uint32_t *ret)
{
    uint64_t v;
    if (sc_uint(s, UINT32_MAX, &v))
        return -1;
    *ret = (uint32_t)v;
    return 0;
}

/* 1 and consumes it when the next token is null. */
static int sc_null(scan_t *s)
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
static int sc_member(scan_t *s, int *first, const char *const *keys, unsigned *seen)
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
     * compared in place; anything else (escapes, other bytes) is decoded by sc_str first. */
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
    } else if (sc_str(s, key, sizeof(key) - 1, &n)) {
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
static int sc_elem(scan_t *s, int *first)
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

static int sc_in_coll(scan_t *s, tdm_tm_in_coll_t *ic)
{
    static const char *const keys[] = {"op", "seq", "since_us", NULL};
    unsigned seen = 0;
    int first = 1, k;
    if (sc_eat(s, '{'))
        return -1;
    while ((k = sc_member(s, &first, keys, &seen)) > 0) {
        int bad = k == 1   ? sc_field(s, ic->op, TDM_TM_PATH_MAX)
                  : k == 2 ? sc_uint(s, JSON_UINT_MAX, &ic->seq)
                           : sc_i64(s, INT64_C(1) << 62, &ic->since_us);
        if (bad)
            return -1;
    }
    return k < 0 || seen != 7u ? -1 : 0;
}

static int sc_sample(scan_t *s, tdm_tm_sample_t *x)
{
    unsigned seen = 0;
    int first = 1, k, bad;
    memset(x, 0, sizeof(*x));
    if (sc_eat(s, '{'))
        return -1;
    while ((k = sc_member(s, &first, sample_keys, &seen)) > 0) {
        switch (k) {
        case 1:
            bad = sc_i64(s, INT64_C(1) << 62, &x->ts_us);
            break;
        case 2:
            bad = sc_uint(s, JSON_UINT_MAX, &x->iter);
            break;
        case 3:
            bad = sc_field(s, x->path, TDM_TM_PATH_MAX);
            break;
        case 4:
            bad = sc_hex64(s, &x->plan_hash);
            break;
        case 5:
            bad = sc_uint(s, JSON_UINT_MAX, &x->coll_seq);
            break;
        case 6:
            bad = sc_hex64(s, &x->coll_hash);
            break;
        case 7:
            x->in_coll_valid = !sc_null(s);
            bad = x->in_coll_valid ? sc_in_coll(s, &x->in_coll) : 0;
            break;
        case 8:
            bad = sc_u32(s, &x->bs);
            break;
        case 9:
            bad = sc_u32(s, &x->waiting);
            break;
        case 10:
            bad = sc_u32(s, &x->running);
            break;
        default: {
            uint64_t v;
            size_t st = (size_t)k - 1 - SAMPLE_REQUIRED;
            bad = sc_uint(s, stat_max(st), &v);
            if (!bad)
                stat_set(x, st, v);
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
 * as UTF-8 ('/' included). Accepts exactly what sc_str accepts, without its length cap. Never
 * writes more bytes than it reads: each escape it writes replaces one at least as long. */
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
            size_t k = sc_utf8(p, end);
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
            if (end - p < 6 || sc_hex4(p + 2, &cp))
                return -1;
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || sc_hex4(p + 2, &lo) ||
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
static int sc_data_flat(const unsigned char *p, size_t n, size_t max_bytes, dtext_t *d, uint32_t i)
{
    scan_t s = {p, p + n};
    size_t kstart[SC_FLAT_KEYS], klen[SC_FLAT_KEYS], nk = 0;
    char *base = dtext_reserve(d, n), *o = base;
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
            if (sc_uint(&s, JSON_UINT_MAX, &u))
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
    dtext_close(d, start, i);
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
    while ((k = sc_member(s, &first, keys, &seen)) > 0) {
        switch (k) {
        case 1:
            bad = sc_i64(s, INT64_C(1) << 62, &e->ts_us);
            break;
        case 2:
            bad = sc_field(s, e->type, TDM_TM_TYPE_MAX);
            break;
        case 3:
            e->has_room = !sc_null(s);
            bad = e->has_room ? sc_hex64(s, &e->room) : 0;
            break;
        case 4:
            bad = sc_null(s) ? 0 : sc_str(s, e->from, TDM_TM_STATE_MAX, &n);
            break;
        case 5:
            bad = sc_null(s) ? 0 : sc_str(s, e->to, TDM_TM_STATE_MAX, &n);
            break;
        case 6:
            bad = sc_null(s) ? 0 : sc_str(s, e->reason, TDM_TM_REASON_MAX, &n);
            break;
        default:
            if (sc_null(s)) {
                bad = 0;
                break;
            }
            bad = -1;
            if (sc_object_span(s, &n))
                break;
            if (sc_data_flat(s->p, n, lim->max_data_bytes, dt, i) == 0) {
                s->p += n;
                bad = 0;
                break;
            }
            json_t *data = json_loadb((const char *)s->p, n, JSON_REJECT_DUPLICATES, NULL);
            if (data && json_is_object(data) && dtext_dump(dt, data, i, lim->max_data_bytes) == 0) {
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
    while (!bad && (k = sc_member(&s, &first, keys, &seen)) > 0) {
        int f = 1;
        switch (k) {
        case 1:
            bad = sc_uint(&s, TDM_TM_VERSION, &u) || u != TDM_TM_VERSION;
            break;
        case 2:
            bad = sc_field(&s, b.worker, TDM_TM_NAME_MAX);
            break;
        case 3:
            bad = sc_field(&s, b.group, TDM_TM_NAME_MAX);
            break;
        case 4:
            bad = sc_field(&s, b.role, TDM_TM_ROLE_MAX) || !role_ok(b.role);
            break;
        case 5:
            bad = sc_hex64(&s, &b.instance_id);
            break;
        case 6:
            bad = sc_uint(&s, UINT16_MAX, &u);
            b.rank = (uint32_t)u;
            break;
        case 7:
            bad = sc_uint(&s, JSON_UINT_MAX, &b.seq);
            break;
        case 8:
            if ((bad = sc_eat(&s, '[')))
                break;
            while (!bad && (bad = sc_elem(&s, &f)) == 1) {
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
            while (!bad && (bad = sc_elem(&s, &f)) == 1) {
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
        dtext_free(&dt);
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
    dtext_finish(&dt, &b);
    *ret = b;
    return TDM_OK;
}

tdm_status_t tdm_tm_batch_decode(const char *buf, size_t len, const tdm_tm_limits_t *lim,
                                 tdm_tm_batch_t *ret, char *err, size_t err_len)
{
    if (tdm_tm_batch_scan(buf, len, lim, ret) == TDM_OK)
        return TDM_OK;
    return tdm_tm_batch_decode_jansson(buf, len, lim, ret, err, err_len);
}

tdm_status_t tdm_tm_ack_encode(uint64_t acked_seq, char *buf, size_t cap, size_t *ret_len)
{
    if (acked_seq > JSON_UINT_MAX)
        return TDM_ERR_RANGE;
    int n = snprintf(buf, cap, "{\"acked_seq\":%" PRIu64 "}", acked_seq);
    if (n < 0 || (size_t)n >= cap)
        return TDM_ERR_OVERFLOW;
    *ret_len = (size_t)n;
    return TDM_OK;
}

tdm_status_t tdm_tm_ack_decode(const char *buf, size_t len, uint64_t *ret_acked_seq, char *err,
                               size_t err_len)
{
    static const char *const keys[] = {"acked_seq", NULL};
    json_t *root;
    uint64_t v;
    TDM_TRY(tdm_json_parse(buf, len, 4096, &root, err, err_len));
    tdm_status_t st = tdm_json_check_keys(root, "", keys, err, err_len);
    if (st == TDM_OK)
        st = tdm_json_get_uint(root, "", "acked_seq", JSON_UINT_MAX, &v, err, err_len);
    json_decref(root);
    if (st == TDM_OK)
        *ret_acked_seq = v;
    return st;
}
