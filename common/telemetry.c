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

#include "telemetry_int.h"

const char *const tdm_tmi_sample_keys[] = {"ts_us",
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
_Static_assert(sizeof(tdm_tmi_sample_keys) / sizeof(tdm_tmi_sample_keys[0]) ==
                   SAMPLE_REQUIRED + SAMPLE_STATS + 1,
               "tdm_tmi_sample_keys and sample_stats disagree");

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

void tdm_tmi_stat_set(tdm_tm_sample_t *s, size_t k, uint64_t v)
{
    char *p = (char *)s + sample_stats[k].off;
    uint32_t n = (uint32_t)v;
    if (sample_stats[k].wide)
        memcpy(p, &v, sizeof(v));
    else
        memcpy(p, &n, sizeof(n));
}

uint64_t tdm_tmi_stat_max(size_t k)
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

char *tdm_tmi_dtext_reserve(dtext_t *d, size_t extra)
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
void tdm_tmi_dtext_close(dtext_t *d, size_t start, uint32_t i)
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
int tdm_tmi_dtext_dump(dtext_t *d, const json_t *data, uint32_t i, size_t max_bytes)
{
    size_t n = json_dumpb(data, NULL, 0, JSON_COMPACT);
    if (n > max_bytes)
        return -1;
    size_t start = d->len;
    d->len += json_dumpb(data, tdm_tmi_dtext_reserve(d, n), n, JSON_COMPACT);
    tdm_tmi_dtext_close(d, start, i);
    return 0;
}

/* Points the batch's events at their texts and hands the buffer to the batch. */
void tdm_tmi_dtext_finish(dtext_t *d, tdm_tm_batch_t *b)
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

void tdm_tmi_dtext_free(dtext_t *d)
{
    tdm_free(d->p);
    tdm_free(d->off);
    memset(d, 0, sizeof(*d));
}

int tdm_tmi_role_ok(const char *r)
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
    if (!tdm_tmi_role_ok(b->role)) {
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
        if (o) { /* the optional statistics, in the order of tdm_tmi_sample_keys */
            for (size_t k = 0; k < SAMPLE_STATS; k++)
                json_object_set_new(o, tdm_tmi_sample_keys[SAMPLE_REQUIRED + k],
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
    TDM_TRY(tdm_json_check_keys(o, p, tdm_tmi_sample_keys, err, err_len));
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
        TDM_TRY(get_uint_opt(o, p, tdm_tmi_sample_keys[SAMPLE_REQUIRED + k], tdm_tmi_stat_max(k),
                             &v, err, err_len));
        tdm_tmi_stat_set(s, k, v);
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
        if (tdm_tmi_dtext_dump(dt, data, i, lim->max_data_bytes)) {
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
    if (!tdm_tmi_role_ok(b.role)) {
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
    tdm_tmi_dtext_finish(&dt, &b);
    *ret = b;
    return TDM_OK;
err_clear:
    tdm_tmi_dtext_free(&dt);
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
