/*
 * report.c — the reporter thread: sample the rank's progress record every tick (also while a send
 * waits for tandemd's ack: the samples of the wait join the next batch), fold pending
 * events into a batch with the next seq, send queued batches in order over one keep-alive libcurl
 * handle, spool while tandemd is away and thin old samples when the spool is full (I9). The
 * contract is in report.h; the file format in report_int.h.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include <tdm/httpc.h>
#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/telemetry.h>
#include <tdm/time.h>

#include "dataplane/report/report.h"
#include "dataplane/report/report_int.h"

#define EVENTS_PER_BATCH 512
#define REPLY_MAX 4096
/* Samples taken while a send blocks (tandemd holds an ack until its commit, e.g. while the
 * database goes away: up to http_timeout_ms); they join the next batch. 1 s at 200 ms: 5. */
#define HELD_MAX 64

typedef struct pending_event {
    tdm_tm_event_t ev;
    struct pending_event *next;
} pending_event_t;

struct tdm_report {
    tdm_report_opts_t o;
    char url[2048];
    char dir[4096]; /* "" = memory only */
    char worker[TDM_TM_NAME_MAX + 1], group[TDM_TM_NAME_MAX + 1], role[TDM_TM_ROLE_MAX + 1];
    pthread_t th;
    CURL *curl;
    CURLM *multi; /* drives curl so that the tick's sample is taken while a send waits */
    struct curl_slist *headers;

    pthread_mutex_t mu; /* guards the event list, stop and the stats */
    pthread_cond_t cv;
    pending_event_t *ev_head, **ev_tail;
    uint64_t ev_pending;
    int stop;
    uint32_t flush_ms;
    tdm_report_stats_t st;

    /* reporter thread only */
    tdm_report_rec_t *q_head, **q_tail;
    uint64_t q_bytes, q_n, next_order, next_seq;
    uint64_t dropped_unreported; /* samples dropped, not yet announced */
    uint64_t next_tick;          /* mono: the next sample is due */
    tdm_tm_sample_t held[HELD_MAX], batch_samples[HELD_MAX + 1];
    uint32_t n_held; /* samples taken during a send, not yet in a batch */
    int warned_over;
    /* While the oldest batch waits for its ack (tandemd acknowledges after commit: a database
     * outage holds it), it is tried again every HEAD_RETRY_US only, and every tick's sample goes
     * out live (seq 0) meanwhile, so tandemd's detectors keep seeing the rank. */
    tdm_tm_sample_t live;
    int live_fresh;               /* taken since the last live send */
    uint64_t head_next_us;        /* mono; 0 = the head is not waiting */
    uint8_t hb_stale[TDM_HB_MAX]; /* last heartbeat state reported per thread (watch_heartbeats) */
};

#define HEAD_RETRY_US 2000000u

/* ---- events (any thread) -------------------------------------------------------------------- */

static int fits(const char *s, size_t max)
{
    return !s || strlen(s) <= max;
}

tdm_status_t tdm_report_event(tdm_report_t *r, const char *type, const uint64_t *room,
                              const char *from, const char *to, const char *reason, json_t *data)
{
    if (!type || !*type || !fits(type, TDM_TM_TYPE_MAX) || !fits(from, TDM_TM_STATE_MAX) ||
        !fits(to, TDM_TM_STATE_MAX) || !fits(reason, TDM_TM_REASON_MAX) ||
        (data && !json_is_object(data))) {
        json_decref(data);
        return TDM_ERR_INVAL;
    }
    pending_event_t *p = tdm_calloc(1, sizeof(*p));
    p->ev.ts_us = (int64_t)tdm_time_wall_us();
    snprintf(p->ev.type, sizeof(p->ev.type), "%s", type);
    if (room) {
        p->ev.has_room = 1;
        p->ev.room = *room;
    }
    snprintf(p->ev.from, sizeof(p->ev.from), "%s", from ? from : "");
    snprintf(p->ev.to, sizeof(p->ev.to), "%s", to ? to : "");
    snprintf(p->ev.reason, sizeof(p->ev.reason), "%s", reason ? reason : "");
    p->ev.data = data;
    pthread_mutex_lock(&r->mu);
    *r->ev_tail = p;
    r->ev_tail = &p->next;
    r->ev_pending++;
    pthread_cond_signal(&r->cv); /* events go out at once, not at the next tick */
    pthread_mutex_unlock(&r->mu);
    return TDM_OK;
}

/* ---- batches (reporter thread) -------------------------------------------------------------- */

static void stats_update(tdm_report_t *r, void (*fn)(tdm_report_stats_t *, uint64_t), uint64_t v)
{
    pthread_mutex_lock(&r->mu);
    fn(&r->st, v);
    r->st.queued_batches = r->q_n;
    r->st.queued_bytes = r->q_bytes;
    r->st.next_seq = r->next_seq;
    pthread_mutex_unlock(&r->mu);
}

static void add_formed(tdm_report_stats_t *s, uint64_t v)
{
    s->samples_formed += v;
}
static void add_dropped(tdm_report_stats_t *s, uint64_t v)
{
    s->samples_dropped += v;
}
static void add_failure(tdm_report_stats_t *s, uint64_t v)
{
    s->send_failures += v;
    s->connected = 0;
}
static void add_rejected(tdm_report_stats_t *s, uint64_t v)
{
    s->batches_rejected += v;
}
static void nothing(tdm_report_stats_t *s, uint64_t v)
{
    (void)s, (void)v;
}

static void take_sample(tdm_report_t *r, tdm_tm_sample_t *s)
{
    tdm_rank_record_t rec;
    tdm_progress_read(&r->o.page->slot[r->o.rank], &rec);
    uint64_t wall = tdm_time_wall_us(), mono = tdm_time_mono_us();
    memset(s, 0, sizeof(*s));
    s->ts_us = (int64_t)wall;
    s->iter = rec.iter;
    snprintf(s->path, sizeof(s->path), "%s", tdm_path_name((tdm_path_t)rec.path));
    s->plan_hash = rec.plan_hash;
    s->coll_seq = rec.coll_seq;
    s->coll_hash = rec.coll_hash;
    if (rec.in_coll_op != TDM_COLL_NONE) {
        s->in_coll_valid = 1;
        snprintf(s->in_coll.op, sizeof(s->in_coll.op), "%s",
                 tdm_coll_op_name((tdm_coll_op_t)rec.in_coll_op));
        s->in_coll.seq = rec.in_coll_seq;
        uint64_t age = mono > rec.in_coll_since_us ? mono - rec.in_coll_since_us : 0;
        s->in_coll.since_us = (int64_t)(wall > age ? wall - age : 0);
    }
    s->bs = rec.bs;
    s->waiting = rec.waiting;
    s->running = rec.running;
    /* rank 0 carries the queues: requests its loop has not taken yet wait too (WEDGE sees work
     * sent to a loop that hung between iterations) */
    if (r->o.rank == 0)
        s->waiting += tdm_progress_queued(r->o.page, &rec);
    if (r->o.stats)
        r->o.stats(r->o.stats_ctx, s);
}

/* Encode a batch; nothing is consumed on failure. */
static tdm_status_t encode(tdm_report_t *r, tdm_tm_batch_t *b, char **ret_text, size_t *ret_len)
{
    char err[256];
    tdm_status_t st = tdm_tm_batch_encode(b, NULL, ret_text, ret_len, err, sizeof(err));
    if (st != TDM_OK)
        tdm_err(TDM_SUB_REPORT, "msg=\"cannot encode a telemetry batch\" err=\"%s\"", err);
    (void)r;
    return st;
}

static void queue_push(tdm_report_t *r, tdm_report_rec_t *rec)
{
    rec->next = NULL;
    *r->q_tail = rec;
    r->q_tail = &rec->next;
    r->q_bytes += rec->len;
    r->q_n++;
}

static void queue_pop(tdm_report_t *r)
{
    tdm_report_rec_t *h = r->q_head;
    r->q_head = h->next;
    if (!r->q_head)
        r->q_tail = &r->q_head;
    r->q_bytes -= h->len;
    r->q_n--;
    if (r->dir[0])
        tdm_report_spool_remove(r->dir, h->order);
    tdm_report_rec_free(h);
}

/* I9: over the bound, the oldest batch still holding samples loses them (deleted when it holds
 * nothing else); never an event. */
static void enforce_bound(tdm_report_t *r)
{
    tdm_report_rec_t **pp = &r->q_head;
    while (r->q_bytes > r->o.spool_max_bytes && *pp) {
        tdm_report_rec_t *rec = *pp;
        if (rec->n_samples == 0) {
            pp = &rec->next;
            continue;
        }
        uint64_t dropped = rec->n_samples;
        if (rec->n_events == 0) {
            *pp = rec->next;
            if (r->q_tail == &rec->next)
                r->q_tail = pp;
            r->q_bytes -= rec->len;
            r->q_n--;
            if (r->dir[0])
                tdm_report_spool_remove(r->dir, rec->order);
            tdm_report_rec_free(rec);
        } else {
            char err[256];
            tdm_tm_batch_t b;
            char *text;
            size_t len;
            if (tdm_tm_batch_decode(rec->text, rec->len, NULL, &b, err, sizeof(err)) != TDM_OK) {
                tdm_err(TDM_SUB_REPORT, "msg=\"queued batch unreadable\" err=\"%s\"", err);
                pp = &rec->next;
                continue;
            }
            tdm_free(b.samples);
            b.samples = NULL;
            b.n_samples = 0;
            tdm_status_t st = encode(r, &b, &text, &len);
            tdm_tm_batch_clear(&b);
            if (st != TDM_OK) {
                pp = &rec->next;
                continue;
            }
            r->q_bytes = r->q_bytes - rec->len + len;
            tdm_free(rec->text);
            rec->text = tdm_strndup(text, len);
            rec->len = len;
            free(text);
            rec->n_samples = 0;
            if (r->dir[0] && tdm_report_spool_write(r->dir, rec, err, sizeof(err)) != TDM_OK)
                tdm_err(TDM_SUB_REPORT, "msg=\"spool rewrite failed\" err=\"%s\"", err);
            pp = &rec->next;
        }
        r->dropped_unreported += dropped;
        stats_update(r, add_dropped, dropped);
    }
    if (r->q_bytes > r->o.spool_max_bytes && !r->warned_over) {
        r->warned_over = 1;
        tdm_warn(TDM_SUB_REPORT,
                 "msg=\"telemetry queue over its bound with events only; keeping them (I9)\" "
                 "bytes=%llu",
                 (unsigned long long)r->q_bytes);
    } else if (r->q_bytes <= r->o.spool_max_bytes) {
        r->warned_over = 0;
    }
}

/* Form batches from one sample (may be NULL) and the pending events, and queue them. */
static void form_batches(tdm_report_t *r, int with_sample)
{
    pthread_mutex_lock(&r->mu);
    pending_event_t *evs = r->ev_head;
    r->ev_head = NULL;
    r->ev_tail = &r->ev_head;
    r->ev_pending = 0;
    pthread_mutex_unlock(&r->mu);

    if (r->dropped_unreported) {
        pending_event_t *d = tdm_calloc(1, sizeof(*d));
        d->ev.ts_us = (int64_t)tdm_time_wall_us();
        snprintf(d->ev.type, sizeof(d->ev.type), "telemetry_dropped");
        snprintf(d->ev.reason, sizeof(d->ev.reason), "spool full: oldest samples dropped");
        d->ev.data = json_pack("{s:I}", "samples", (json_int_t)r->dropped_unreported);
        d->next = evs;
        evs = d;
        r->dropped_unreported = 0;
    }
    /* the samples taken while a send blocked, oldest first, then this tick's */
    uint32_t n_samples = r->n_held;
    memcpy(r->batch_samples, r->held, (size_t)r->n_held * sizeof(r->held[0]));
    r->n_held = 0;
    if (with_sample && r->o.page) {
        take_sample(r, &r->batch_samples[n_samples]);
        r->live = r->batch_samples[n_samples++];
        r->live_fresh = 1;
    }
    int first = 1;
    while (first || evs) {
        tdm_tm_event_t arr[EVENTS_PER_BATCH];
        uint32_t n = 0;
        while (evs && n < EVENTS_PER_BATCH) {
            pending_event_t *e = evs;
            evs = e->next;
            arr[n++] = e->ev; /* data moves into the array */
            tdm_free(e);
        }
        tdm_tm_batch_t b = {0};
        snprintf(b.worker, sizeof(b.worker), "%s", r->worker);
        snprintf(b.group, sizeof(b.group), "%s", r->group);
        snprintf(b.role, sizeof(b.role), "%s", r->role);
        b.instance_id = r->o.instance_id;
        b.rank = r->o.rank;
        b.seq = r->next_seq;
        b.samples = first && n_samples ? r->batch_samples : NULL;
        b.n_samples = first ? n_samples : 0;
        b.events = arr;
        b.n_events = n;
        first = 0;
        char *text;
        size_t len;
        tdm_status_t st = encode(r, &b, &text, &len);
        for (uint32_t i = 0; i < n; i++)
            json_decref(arr[i].data);
        if (st != TDM_OK)
            continue;
        if (b.n_samples == 0 && n == 0) {
            free(text);
            continue;
        }
        tdm_report_rec_t *rec = tdm_calloc(1, sizeof(*rec));
        rec->order = r->next_order++;
        rec->seq = r->next_seq++;
        rec->n_samples = b.n_samples;
        rec->n_events = n;
        rec->text = tdm_strndup(text, len);
        rec->len = len;
        free(text);
        if (r->dir[0]) {
            char err[256];
            if (tdm_report_spool_write(r->dir, rec, err, sizeof(err)) != TDM_OK)
                tdm_err(TDM_SUB_REPORT,
                        "msg=\"spool write failed; batch kept in memory\" "
                        "err=\"%s\"",
                        err);
        }
        queue_push(r, rec);
        stats_update(r, add_formed, b.n_samples);
    }
    enforce_bound(r);
}

/* ---- sending -------------------------------------------------------------------------------- */

typedef enum { SEND_OK, SEND_RETRY, SEND_REJECTED } send_result_t;

static void heartbeat(tdm_report_t *r);

/* A tick that falls due while a send waits: the sample is taken now (held for the next batch and
 * the live one), so a slow ack leaves no hole in the rank's samples (I9: samples are only
 * thinned). */
static void tick_in_send(tdm_report_t *r)
{
    uint64_t now = tdm_time_mono_us();
    if (!r->o.page || now < r->next_tick)
        return;
    r->next_tick = now + (uint64_t)r->o.interval_ms * 1000;
    heartbeat(r);
    if (r->n_held == HELD_MAX)
        return; /* a send is bounded by http_timeout_ms; the next batch takes the tick's */
    take_sample(r, &r->held[r->n_held]);
    r->live = r->held[r->n_held++];
    r->live_fresh = 1;
}

/* curl_easy_perform, with the ticks of the wait honoured (tick_in_send). */
static CURLcode perform(tdm_report_t *r)
{
    if (!r->multi || curl_multi_add_handle(r->multi, r->curl) != CURLM_OK)
        return curl_easy_perform(r->curl);
    CURLcode res = CURLE_COULDNT_CONNECT;
    int running = 1;
    while (running) {
        if (curl_multi_perform(r->multi, &running) != CURLM_OK)
            break;
        if (!running)
            break;
        tick_in_send(r);
        uint64_t now = tdm_time_mono_us();
        uint64_t wait_us = r->next_tick > now ? r->next_tick - now : 0;
        int wait_ms = (int)(wait_us / 1000) + 1;
        if (curl_multi_poll(r->multi, NULL, 0, wait_ms > 100 ? 100 : wait_ms, NULL) != CURLM_OK)
            break;
    }
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(r->multi, &left)) != NULL)
        if (m->msg == CURLMSG_DONE && m->easy_handle == r->curl)
            res = m->data.result;
    curl_multi_remove_handle(r->multi, r->curl);
    return res;
}

/* What tandemd's reply says of a batch it answered (code): sent, to retry, or refused. */
static send_result_t judge_reply(const tdm_report_rec_t *rec, long code, const char *body,
                                 size_t len)
{
    if (code == 400 || code == 413 || code == 422) {
        tdm_err(TDM_SUB_REPORT,
                "msg=\"telemetry batch refused; dropped\" seq=%llu code=%ld "
                "reply=\"%.200s\"",
                (unsigned long long)rec->seq, code, body);
        return SEND_REJECTED;
    }
    if (code != 200)
        return SEND_RETRY;
    char err[128];
    uint64_t acked;
    if (tdm_tm_ack_decode(body, len, &acked, err, sizeof(err)) != TDM_OK || acked < rec->seq) {
        tdm_warn(TDM_SUB_REPORT, "msg=\"bad telemetry ack\" seq=%llu reply=\"%.200s\"",
                 (unsigned long long)rec->seq, body);
        return SEND_RETRY;
    }
    return SEND_OK;
}

static send_result_t send_one(tdm_report_t *r, const tdm_report_rec_t *rec)
{
    /* a reply past REPLY_MAX fails the transfer (tdm_httpc_collect): tandemd's are far smaller */
    tdm_httpc_body_t rp = {.max = REPLY_MAX};
    curl_easy_setopt(r->curl, CURLOPT_POSTFIELDS, rec->text);
    curl_easy_setopt(r->curl, CURLOPT_POSTFIELDSIZE, (long)rec->len);
    curl_easy_setopt(r->curl, CURLOPT_WRITEDATA, &rp);
    CURLcode cc = perform(r);
    long code = 0;
    if (cc != CURLE_OK) {
        if (tdm_log_enabled(TDM_SUB_REPORT, TDM_LOG_DEBUG))
            tdm_dbg(TDM_SUB_REPORT, "msg=\"telemetry send failed\" err=\"%s\"",
                    curl_easy_strerror(cc));
        free(rp.data);
        return SEND_RETRY;
    }
    curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &code);
    send_result_t res = judge_reply(rec, code, rp.data ? rp.data : "", rp.len);
    free(rp.data);
    return res;
}

static void heartbeat(tdm_report_t *r)
{
    if (r->o.page)
        tdm_progress_heartbeat(&r->o.page->slot[r->o.rank], TDM_HB_REPORTER, tdm_time_mono_us());
}

/* Send queued batches in order until one fails or `deadline_us` passes; a head that is waiting
 * (see live) only when its retry is due, or `force`. */
static void drain_queue(tdm_report_t *r, uint64_t deadline_us, int force)
{
    if (r->q_head && r->head_next_us && tdm_time_mono_us() < r->head_next_us && !force)
        return;
    while (r->q_head && tdm_time_mono_us() < deadline_us) {
        tdm_report_rec_t *h = r->q_head;
        uint32_t ns = h->n_samples, ne = h->n_events;
        send_result_t res = send_one(r, h);
        heartbeat(r);
        if (res == SEND_RETRY) {
            stats_update(r, add_failure, 1);
            r->head_next_us = tdm_time_mono_us() + HEAD_RETRY_US;
            return;
        }
        r->head_next_us = 0;
        if (res == SEND_REJECTED) {
            queue_pop(r);
            stats_update(r, add_rejected, 1);
            continue;
        }
        queue_pop(r);
        pthread_mutex_lock(&r->mu);
        r->st.batches_sent++;
        r->st.samples_sent += ns;
        r->st.events_sent += ne;
        r->st.connected = 1;
        pthread_mutex_unlock(&r->mu);
        stats_update(r, nothing, 0);
    }
}

/* The newest sample as a live batch (seq 0: samples only, never stored, answered at once;
 * docs/contracts.md §c). It comes again in its stored batch. */
static void send_live(tdm_report_t *r)
{
    tdm_tm_batch_t b = {0};
    snprintf(b.worker, sizeof(b.worker), "%s", r->worker);
    snprintf(b.group, sizeof(b.group), "%s", r->group);
    snprintf(b.role, sizeof(b.role), "%s", r->role);
    b.instance_id = r->o.instance_id;
    b.rank = r->o.rank;
    b.seq = 0;
    b.samples = &r->live;
    b.n_samples = 1;
    r->live_fresh = 0;
    tdm_report_rec_t rec = {0};
    if (encode(r, &b, &rec.text, &rec.len) != TDM_OK)
        return;
    send_result_t res = send_one(r, &rec);
    free(rec.text);
    heartbeat(r);
    if (res == SEND_OK) {
        pthread_mutex_lock(&r->mu);
        r->st.live_sent++;
        pthread_mutex_unlock(&r->mu);
    }
}

/* A control thread's heartbeat older than this is reported stale: the worker's /health heartbeat
 * timeout at the default --health-progress-timeout (dataplane/api/handlers.c). */
#define HB_STALE_US 3000000u

/* Edge-triggered heartbeat events (docs/alerts.md, TRANSFER_STALL): heartbeat_stale {thread,
 * age_us} when a control thread of this rank other than the loop (WEDGE's business) and this
 * reporter goes stale, heartbeat_fresh {thread} when it beats again or stops cleanly. Without
 * them a dead bootstrap, recv or transfer thread was visible on /health but never alerted. */
static void watch_heartbeats(tdm_report_t *r)
{
    if (!r->o.page)
        return;
    uint64_t now = tdm_time_mono_us();
    for (int t = TDM_HB_LOOP + 1; t < TDM_HB_MAX; t++) {
        if (t == TDM_HB_REPORTER)
            continue;
        uint64_t hb = atomic_load(&r->o.page->slot[r->o.rank].heartbeat_us[t]);
        int stale = hb && now > hb && now - hb > HB_STALE_US;
        if (stale == r->hb_stale[t])
            continue;
        r->hb_stale[t] = (uint8_t)stale;
        const char *name = tdm_hb_thread_name((tdm_hb_thread_t)t);
        if (stale)
            tdm_report_event(
                r, "heartbeat_stale", NULL, NULL, NULL, NULL,
                json_pack("{s:s,s:I}", "thread", name, "age_us", (json_int_t)(now - hb)));
        else
            tdm_report_event(r, "heartbeat_fresh", NULL, NULL, NULL, NULL,
                             json_pack("{s:s}", "thread", name));
    }
}

static void *report_thread(void *arg)
{
    tdm_report_t *r = arg;
    uint64_t interval = (uint64_t)r->o.interval_ms * 1000;
    r->next_tick = tdm_time_mono_us();
    for (;;) {
        heartbeat(r);
        uint64_t now = tdm_time_mono_us();
        int tick = now >= r->next_tick;
        if (tick)
            r->next_tick = now + interval;
        pthread_mutex_lock(&r->mu);
        int stop = r->stop, has_events = r->ev_pending > 0;
        pthread_mutex_unlock(&r->mu);
        if (tick)
            watch_heartbeats(r);
        if (tick || has_events || stop || r->n_held)
            form_batches(r, tick || stop);
        uint64_t budget = stop ? (uint64_t)r->flush_ms * 1000 : interval;
        drain_queue(r, tdm_time_mono_us() + budget, stop);
        if (stop)
            break;
        /* the newest sample goes out live while the head waits for its ack, and while a backlog
         * drains (tandemd back after an outage): the backlog's samples are older than what the
         * ring holds, so without this a rank whose backlog took over 2 s to commit read as
         * silent and healthy groups were restarted as WORKER_LOST (docs/contracts.md §c) */
        if (r->q_head && r->live_fresh && (r->head_next_us || r->q_n > 1))
            send_live(r);
        /* sleep until the next tick or an event */
        uint64_t wake = r->next_tick;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t wait = wake > tdm_time_mono_us() ? wake - tdm_time_mono_us() : 0;
        ts.tv_sec += (time_t)(wait / 1000000);
        ts.tv_nsec += (long)(wait % 1000000) * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&r->mu);
        if (!r->stop && r->ev_pending == 0 && wait > 0)
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        pthread_mutex_unlock(&r->mu);
    }
    if (r->q_head)
        tdm_warn(TDM_SUB_REPORT, "msg=\"reporter stopped with unsent batches\" n=%llu %s",
                 (unsigned long long)r->q_n, r->dir[0] ? "spooled=yes" : "lost=yes");
    return NULL;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_global(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

tdm_status_t tdm_report_start(const tdm_report_opts_t *o, tdm_report_t **ret, char *err,
                              size_t err_len)
{
    tdm_status_t st = TDM_ERR_INVAL;
    if (!o || !o->control_plane || !*o->control_plane || strlen(o->control_plane) > 1900 ||
        !o->worker || !o->group || !o->role || !fits(o->worker, TDM_TM_NAME_MAX) ||
        !fits(o->group, TDM_TM_NAME_MAX) || !fits(o->role, TDM_TM_ROLE_MAX) ||
        (o->page && o->rank >= o->page->n_ranks)) {
        snprintf(err, err_len,
                 "reporter: control plane URL, worker/group/role names (within "
                 "docs/contracts.md §c limits) and a rank inside the page are required");
        return TDM_ERR_INVAL;
    }
    tdm_report_t *r = tdm_calloc(1, sizeof(*r));
    r->o = *o;
    if (!r->o.interval_ms)
        r->o.interval_ms = 200;
    if (!r->o.spool_max_bytes)
        r->o.spool_max_bytes = 64ull << 20;
    if (!r->o.http_timeout_ms)
        r->o.http_timeout_ms = 1000;
    snprintf(r->worker, sizeof(r->worker), "%s", o->worker);
    snprintf(r->group, sizeof(r->group), "%s", o->group);
    snprintf(r->role, sizeof(r->role), "%s", o->role);
    const char *base = o->control_plane;
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    snprintf(r->url, sizeof(r->url), "%.*s/api/v1/telemetry", (int)bl, base);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->ev_tail = &r->ev_head;
    r->q_tail = &r->q_head;
    r->next_seq = o->first_seq ? o->first_seq : 1;
    if (o->spool_dir && *o->spool_dir) {
        snprintf(r->dir, sizeof(r->dir), "%s/rank-%u", o->spool_dir, o->rank);
        TDM_CHECK_GOTO(tdm_report_spool_load(r->dir, &r->q_head, &r->next_order, err, err_len), st,
                       err_free);
        for (tdm_report_rec_t *x = r->q_head; x; x = x->next) {
            r->q_bytes += x->len;
            r->q_n++;
            r->q_tail = &x->next;
        }
        if (r->q_n)
            tdm_info(TDM_SUB_REPORT, "msg=\"replaying spooled telemetry\" batches=%llu",
                     (unsigned long long)r->q_n);
    }
    pthread_once(&curl_once, curl_global);
    r->curl = curl_easy_init();
    r->multi = r->curl ? curl_multi_init() : NULL;
    if (!r->curl || !r->multi) {
        snprintf(err, err_len, "reporter: curl_easy_init or curl_multi_init failed");
        curl_multi_cleanup(r->multi);
        curl_easy_cleanup(r->curl);
        st = TDM_ERR_NOMEM;
        goto err_queue;
    }
    r->headers = curl_slist_append(NULL, "Content-Type: application/json");
    r->headers = curl_slist_append(r->headers, "Expect:");
    if (o->token && o->token[0]) {
        char auth[600];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %.512s", o->token);
        r->headers = curl_slist_append(r->headers, auth);
    }
    curl_easy_setopt(r->curl, CURLOPT_URL, r->url);
    curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(r->curl, CURLOPT_WRITEFUNCTION, tdm_httpc_collect);
    curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(r->curl, CURLOPT_TIMEOUT_MS, (long)r->o.http_timeout_ms);
    curl_easy_setopt(r->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)(r->o.http_timeout_ms / 5 + 1));
    r->st.next_seq = r->next_seq;
    if (pthread_create(&r->th, NULL, report_thread, r) != 0) {
        snprintf(err, err_len, "reporter: cannot start its thread");
        st = TDM_ERR_NOMEM;
        goto err_curl;
    }
    *ret = r;
    return TDM_OK;

err_curl:
    curl_slist_free_all(r->headers);
    curl_multi_cleanup(r->multi);
    curl_easy_cleanup(r->curl);
err_queue:
    while (r->q_head) {
        tdm_report_rec_t *h = r->q_head;
        r->q_head = h->next;
        tdm_report_rec_free(h);
    }
err_free:
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    tdm_free(r);
    return st;
}

void tdm_report_stop(tdm_report_t *r, uint32_t flush_ms)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    r->flush_ms = flush_ms;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    if (r->o.page)
        atomic_store(&r->o.page->slot[r->o.rank].heartbeat_us[TDM_HB_REPORTER], 0);
    while (r->q_head) {
        tdm_report_rec_t *h = r->q_head;
        r->q_head = h->next;
        tdm_report_rec_free(h); /* the spool files stay */
    }
    while (r->ev_head) { /* enqueued after the last batch: a caller bug, but never leak */
        pending_event_t *e = r->ev_head;
        r->ev_head = e->next;
        tdm_warn(TDM_SUB_REPORT, "msg=\"event enqueued after stop, lost\" type=%s", e->ev.type);
        json_decref(e->ev.data);
        tdm_free(e);
    }
    curl_slist_free_all(r->headers);
    curl_multi_cleanup(r->multi);
    curl_easy_cleanup(r->curl);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    tdm_free(r);
}

void tdm_report_stats(tdm_report_t *r, tdm_report_stats_t *ret)
{
    pthread_mutex_lock(&r->mu);
    *ret = r->st;
    ret->events_pending = r->ev_pending;
    pthread_mutex_unlock(&r->mu);
}
