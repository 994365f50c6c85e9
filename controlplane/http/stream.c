/*
 * stream.c — GET /api/v1/stream (server-sent events of the ring, the live alerts, the groups'
 * status); see controlplane/stream.h.
 *
 * Each subscriber keeps, per ring slot, the ts_us of the newest sample it was sent; a tick sends
 * it every newer sample the ring still holds. The alert list and the status are rendered once per
 * tick and compared with what each subscriber last got (a hash), so an unchanged list costs one
 * render per tick, not one per subscriber.
 */
#include "config.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/hash.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/http/cp_server.h"
#include "controlplane/http/stream.h"

#define RECENT_US 60000000u /* ranks heard from within this get the backlog */
#define STATUS_EVERY_US 1000000u
#define PING_AFTER_US 10000000u

typedef struct sub {
    h2o_generator_t gen; /* first: h2o hands it back to the callbacks */
    h2o_req_t *req;
    tdm_cp_stream_t *st;
    h2o_linklist_t link;
    int in_flight; /* an h2o_send waits for its proceed */
    int final;     /* end the stream at the next proceed */
    int started;   /* the backlog went out */
    int64_t *last_ts;
    size_t n_last;
    uint64_t alerts_hash, status_hash, health_hash, last_send_us;
    tdm_cp_buf_t out; /* the write in flight (h2o reads it until proceed) */
} sub_t;

struct tdm_cp_stream {
    h2o_linklist_t subs;
    size_t n;
    uint64_t last_tick_us, last_status_us;
    char *alerts, *status, *health; /* "event: …\ndata: …\n\n" of this tick */
    uint64_t alerts_hash, status_hash, health_hash;
};

static uint64_t text_hash(const char *p)
{
    return tdm_hash_xxh3(p, strlen(p));
}

static char *event_text(const char *name, json_t *o)
{
    char *data = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!data)
        return NULL;
    size_t n = strlen(name) + strlen(data) + 32;
    char *t = tdm_malloc(n);
    snprintf(t, n, "event: %s\ndata: %s\n\n", name, data);
    free(data);
    return t;
}

static void stream_send(sub_t *u, int final)
{
    h2o_iovec_t v = h2o_iovec_init(u->out.data ? u->out.data : "", u->out.len);
    u->in_flight = 1;
    u->last_send_us = tdm_time_mono_us();
    h2o_send(u->req, &v, 1, final ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void on_proceed(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    sub_t *u = (sub_t *)g;
    u->in_flight = 0;
    tdm_cp_buf_reset(&u->out);
    if (u->final)
        stream_send(u, 1);
}

static void on_stop(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    ((sub_t *)g)->in_flight = 1; /* the client left: nothing more is sent */
}

/* Runs when the request's pool goes: the client left or the stream ended. */
static void sub_dispose(void *p)
{
    sub_t *u = p;
    if (u->st) {
        h2o_linklist_unlink(&u->link);
        u->st->n--;
    }
    tdm_cp_buf_free(&u->out);
    tdm_free(u->last_ts);
}

/* The samples of ring slot i newer than the subscriber's mark (at most `max` of them). */
static void rank_delta(sub_t *u, const tdm_cp_rank_t *rk, size_t i, uint64_t now, size_t max,
                       int *first_rank)
{
    if (i >= u->n_last) {
        size_t n = u->n_last ? u->n_last * 2 : 16;
        while (n <= i)
            n *= 2;
        u->last_ts = tdm_realloc(u->last_ts, n * sizeof(*u->last_ts));
        for (size_t k = u->n_last; k < n; k++)
            u->last_ts[k] = INT64_MIN;
        u->n_last = n;
    }
    size_t from = rk->count;
    while (from > 0 && rk->count - from < max) {
        const tdm_cp_sample_t *x = tdm_cp_rank_at(rk, from - 1);
        if (x->ts_us <= u->last_ts[i])
            break;
        from--;
    }
    if (from == rk->count)
        return;
    tdm_cp_buf_puts(&u->out, *first_rank ? "{\"instance_id\":" : ",{\"instance_id\":");
    *first_rank = 0;
    tdm_cp_buf_json_str(&u->out, rk->instance_id);
    tdm_cp_buf_printf(&u->out, ",\"rank\":%u,\"group\":", rk->rank);
    tdm_cp_buf_json_str(&u->out, rk->group);
    tdm_cp_buf_puts(&u->out, ",\"worker\":");
    tdm_cp_buf_json_str(&u->out, rk->worker);
    tdm_cp_buf_puts(&u->out, ",\"role\":");
    tdm_cp_buf_json_str(&u->out, rk->role);
    tdm_cp_buf_printf(&u->out, ",\"age_ms\":%" PRIu64 ",\"samples\":[",
                      (now - rk->last_recv_mono_us) / 1000u);
    for (size_t k = from; k < rk->count; k++) {
        if (k > from)
            tdm_cp_buf_puts(&u->out, ",");
        tdm_cp_sample_json(&u->out, tdm_cp_rank_at(rk, k));
    }
    tdm_cp_buf_puts(&u->out, "]}");
    u->last_ts[i] = tdm_cp_rank_latest(rk)->ts_us;
}

static void sub_tick(tdm_cp_server_t *s, sub_t *u, uint64_t now)
{
    tdm_cp_stream_t *st = u->st;
    size_t mark = u->out.len;
    tdm_cp_buf_puts(&u->out, "event: ranks\ndata: {\"ranks\":[");
    size_t empty = u->out.len;
    int first = 1;
    for (size_t i = 0; i < s->rings.n; i++) {
        const tdm_cp_rank_t *rk = s->rings.ranks[i];
        size_t max = TDM_CP_STREAM_BACKLOG;
        if (!u->started && now - rk->last_recv_mono_us > RECENT_US)
            max = 1;
        rank_delta(u, rk, i, now, max, &first);
    }
    if (u->out.len == empty)
        u->out.len = mark;
    else
        tdm_cp_buf_puts(&u->out, "]}\n\n");
    u->started = 1;
    if (st->alerts && u->alerts_hash != st->alerts_hash) {
        tdm_cp_buf_puts(&u->out, st->alerts);
        u->alerts_hash = st->alerts_hash;
    }
    if (st->status && u->status_hash != st->status_hash) {
        tdm_cp_buf_puts(&u->out, st->status);
        u->status_hash = st->status_hash;
    }
    if (st->health && u->health_hash != st->health_hash) {
        tdm_cp_buf_puts(&u->out, st->health);
        u->health_hash = st->health_hash;
    }
    if (!u->out.len && now - u->last_send_us >= PING_AFTER_US)
        tdm_cp_buf_puts(&u->out, ": ping\n\n");
    if (u->out.len)
        stream_send(u, 0);
}

static void render_shared(tdm_cp_server_t *s, tdm_cp_stream_t *st, uint64_t now)
{
    tdm_free(st->alerts);
    st->alerts = event_text("alerts", tdm_cp_alerts_to_json(s->alerts, NULL, NULL));
    st->alerts_hash = st->alerts ? text_hash(st->alerts) : 0;
    if (now - st->last_status_us < STATUS_EVERY_US && st->status)
        return;
    st->last_status_us = now;
    tdm_free(st->status);
    st->status =
        event_text("status", s->act ? tdm_cp_act_status(s->act) : json_pack("{s:[]}", "groups"));
    st->status_hash = st->status ? text_hash(st->status) : 0;
    tdm_free(st->health);
    st->health =
        event_text("health", json_pack("{s:s,s:b,s:s}", "status", "ok", "ready", s->ready, "db",
                                       atomic_load(&tdm_cp_db_stats(s->db)->up) ? "up" : "down"));
    st->health_hash = st->health ? text_hash(st->health) : 0;
}

void tdm_cp_stream_tick(tdm_cp_server_t *s, uint64_t now)
{
    tdm_cp_stream_t *st = s->stream;
    if (!st || !st->n || now - st->last_tick_us < TDM_CP_STREAM_TICK_US)
        return;
    st->last_tick_us = now;
    render_shared(s, st, now);
    for (h2o_linklist_t *l = st->subs.next; l != &st->subs; l = l->next) {
        sub_t *u = H2O_STRUCT_FROM_MEMBER(sub_t, link, l);
        if (!u->in_flight && !u->final)
            sub_tick(s, u, now);
    }
}

void tdm_cp_h_stream(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                     const tdm_cp_token_t *who)
{
    (void)args;
    (void)who;
    if (!s->stream) {
        s->stream = tdm_calloc(1, sizeof(*s->stream));
        h2o_linklist_init_anchor(&s->stream->subs);
    }
    tdm_cp_stream_t *st = s->stream;
    if (st->n >= TDM_CP_STREAM_MAX) {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL,
                       H2O_STRLIT("10"));
        tdm_httpd_send_error(req, 503, "too_many_streams", "unavailable_error",
                             "%d event streams are open; poll the REST API instead",
                             TDM_CP_STREAM_MAX);
        return;
    }
    sub_t *u = h2o_mem_alloc_shared(&req->pool, sizeof(*u), sub_dispose);
    memset(u, 0, sizeof(*u));
    u->gen.proceed = on_proceed;
    u->gen.stop = on_stop;
    u->req = req;
    u->st = st;
    u->out = (tdm_cp_buf_t)TDM_CP_BUF_INIT;
    h2o_linklist_insert(&st->subs, &u->link);
    st->n++;
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/event-stream; charset=utf-8"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
                   H2O_STRLIT("no-store"));
    h2o_start_response(req, &u->gen);
    /* the first tick for this subscriber sends the backlog at once */
    render_shared(s, st, tdm_time_mono_us());
    tdm_cp_buf_puts(&u->out, ": tandem event stream v1\n\n");
    sub_tick(s, u, tdm_time_mono_us());
}

void tdm_cp_stream_close_all(tdm_cp_server_t *s)
{
    tdm_cp_stream_t *st = s->stream;
    if (!st)
        return;
    for (h2o_linklist_t *l = st->subs.next; l != &st->subs;) {
        sub_t *u = H2O_STRUCT_FROM_MEMBER(sub_t, link, l);
        l = l->next;
        h2o_linklist_unlink(&u->link);
        u->st = NULL; /* the pool's dispose must not touch the list any more */
        u->final = 1;
        if (!u->in_flight) {
            tdm_cp_buf_reset(&u->out);
            stream_send(u, 1);
        }
    }
    tdm_free(st->alerts);
    tdm_free(st->status);
    tdm_free(st->health);
    tdm_free(st);
    s->stream = NULL;
}
