/*
 * ingest.c — POST /api/v1/telemetry (telemetry v1, docs/contracts.md §c) on the loop thread.
 *
 * Decode and validate the whole batch first with the shared strict decoder (tdm/telemetry.h;
 * nothing is kept from a batch with one bad field), then: push every sample into its rank's ring
 * (unless the batch is a replay the ring already holds), select the samples to persist (10 Hz per
 * rank), render rows as COPY text, and queue the batch for the ingest thread. The reply
 * {"acked_seq":N} is sent when the batch is committed, found to be a duplicate, or made durable in
 * the spool — never before. A live batch (seq 0: samples only, docs/contracts.md §c) is pushed
 * into the ring and answered at once, never stored: detection does not wait for the database.
 */
#include "config.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <tdm/json.h>
#include <tdm/mem.h>
#include <tdm/telemetry.h>
#include <tdm/time.h>

#include "controlplane/store/batch.h"
#include "controlplane/http/cp_server.h"

#define PERSIST_PERIOD_US 100000u /* 10 Hz per rank */

/* `prefix` is the row's constant "instance_id\trank\tgroup\t" (COPY text, escaped once). */
static void sample_row(tdm_cp_buf_t *b, const tdm_tm_sample_t *s, const tdm_cp_buf_t *prefix,
                       uint64_t seq, tdm_cp_buf_t *scratch)
{
    tdm_cp_buf_i64(b, s->ts_us);
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_append(b, prefix->data, prefix->len);
    tdm_cp_buf_u64(b, seq);
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_u64(b, s->iter);
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_copy_text(b, s->path);
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_i64(b, (int64_t)s->plan_hash);
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_u64(b, s->coll_seq);
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_i64(b, (int64_t)s->coll_hash);
    tdm_cp_buf_append(b, "\t", 1);
    if (s->in_coll_valid) {
        tdm_cp_buf_reset(scratch);
        tdm_cp_in_coll_json(scratch, &s->in_coll);
        tdm_cp_buf_copy_text(b, scratch->data);
    } else {
        tdm_cp_buf_append(b, "\\N", 2);
    }
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_u64(b, s->bs);
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_u64(b, s->waiting);
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_u64(b, s->running);
    const uint64_t stats[] = {s->tokens_out,       s->requests_done,   s->ttft_p50_us,
                              s->ttft_p99_us,      s->itl_p50_us,      s->itl_p99_us,
                              s->kv_pages_used,    s->kv_pages_total,  s->host_pages_used,
                              s->host_pages_total, s->corruption_total};
    for (size_t k = 0; k < sizeof(stats) / sizeof(stats[0]); k++) {
        tdm_cp_buf_append(b, "\t", 1);
        tdm_cp_buf_u64(b, stats[k]);
    }
    tdm_cp_buf_append(b, "\t", 1);
    tdm_cp_buf_i64(b, s->recv_us);
    tdm_cp_buf_append(b, "\n", 1);
}

/* A JSON string literal (as jansson writes it: ", \ and control characters escaped, other bytes
 * verbatim), COPY-escaped: every backslash doubled. */
static void copy_json_str(tdm_cp_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    tdm_cp_buf_reserve(b, n * 7 + 2);
    char *o = b->data + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = '\\';
            if (c == '\\') {
                *o++ = '\\';
                *o++ = '\\';
            } else {
                *o++ = '"';
            }
        } else if (c < 0x20) {
            const char *esc = c == '\n'   ? "n"
                              : c == '\t' ? "t"
                              : c == '\r' ? "r"
                              : c == '\b' ? "b"
                              : c == '\f' ? "f"
                                          : NULL;
            *o++ = '\\';
            *o++ = '\\';
            if (esc) {
                *o++ = *esc;
            } else {
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = hex[c >> 4];
                *o++ = hex[c & 15];
            }
        } else {
            *o++ = (char)c;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
}

/* `v` as compact JSON, escaped for COPY text, straight into b (the events' `data` column; what
 * json_dumps(JSON_COMPACT) + tdm_cp_buf_copy_text gave, without the intermediate string). JSON
 * output never holds a raw tab, newline or CR (control characters are escaped), so the only COPY
 * escape needed is the backslash of a JSON escape, written doubled. */
static void copy_json(tdm_cp_buf_t *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        int first = 1;
        tdm_cp_buf_append(b, "{", 1);
        json_object_foreach((json_t *)v, k, x)
        {
            if (!first)
                tdm_cp_buf_append(b, ",", 1);
            first = 0;
            copy_json_str(b, k, strlen(k));
            tdm_cp_buf_append(b, ":", 1);
            copy_json(b, x);
        }
        tdm_cp_buf_append(b, "}", 1);
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        tdm_cp_buf_append(b, "[", 1);
        json_array_foreach((json_t *)v, i, x)
        {
            if (i)
                tdm_cp_buf_append(b, ",", 1);
            copy_json(b, x);
        }
        tdm_cp_buf_append(b, "]", 1);
        break;
    }
    case JSON_STRING:
        copy_json_str(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        tdm_cp_buf_i64(b, (int64_t)json_integer_value(v));
        break;
    case JSON_REAL: {
        /* what jansson writes: %.17g, with ".0" when that looks like an integer */
        char tmp[64];
        int n = snprintf(tmp, sizeof(tmp), "%.17g", json_real_value(v));
        tdm_cp_buf_append(b, tmp, (size_t)n);
        if (!strpbrk(tmp, ".eE") &&
            strspn(tmp + (tmp[0] == '-'), "0123456789") == (size_t)n - (tmp[0] == '-'))
            tdm_cp_buf_append(b, ".0", 2);
        break;
    }
    case JSON_TRUE:
        tdm_cp_buf_append(b, "true", 4);
        break;
    case JSON_FALSE:
        tdm_cp_buf_append(b, "false", 5);
        break;
    case JSON_NULL:
    default:
        tdm_cp_buf_append(b, "null", 4);
        break;
    }
}

/* Row writing into room reserved up front (event_row): COPY text of a NUL-terminated string
 * (what tdm_cp_buf_copy_text writes), of n bytes, and decimal numbers. */
static char *put_text(char *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' || c == '\t' || c == '\n' || c == '\r') {
            *o++ = '\\';
            *o++ = c == '\\' ? '\\' : c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
        } else {
            *o++ = c;
        }
    }
    return o;
}

/* COPY text of an optional string field: "" is NULL (\N). */
static char *put_opt(char *o, const char *s)
{
    if (!*s) {
        *o++ = '\\';
        *o++ = 'N';
        return o;
    }
    return put_text(o, s, strlen(s));
}

static char *put_i64(char *o, int64_t v)
{
    if (v < 0) {
        *o++ = '-';
        return tdm_json_put_u64(o, (uint64_t)0 - (uint64_t)v);
    }
    return tdm_json_put_u64(o, (uint64_t)v);
}

/* The most one event row takes besides its prefix and data: the numbers, separators and the
 * fixed-size strings with every byte escaped. */
#define EVENT_ROW_FIXED                                                                            \
    (3 * 21 + 16 + 2 * (TDM_TM_TYPE_MAX + 2 * TDM_TM_STATE_MAX + TDM_TM_REASON_MAX) + 16)

/* An event whose data must be rebuilt as a tree: a room-less event with from/to (kept in data, as
 * events has no state columns), or one built with a tree. Its `data` column rendered as compact
 * JSON, COPY-escaped, into b. */
static void event_data_tree(tdm_cp_buf_t *b, const tdm_tm_event_t *e)
{
    json_t *data = tdm_tm_event_data(e);
    if (!e->has_room && (e->from[0] || e->to[0])) {
        if (!data) {
            data = json_object();
        } else if (e->data) { /* the caller's tree: changed on a copy */
            json_t *copy = json_deep_copy(data);
            json_decref(data);
            data = copy;
        }
        if (e->from[0])
            json_object_set_new(data, "from", json_string(e->from));
        if (e->to[0])
            json_object_set_new(data, "to", json_string(e->to));
    }
    if (data)
        copy_json(b, data);
    else
        tdm_cp_buf_append(b, "\\N", 2);
    json_decref(data);
}

/* One event → a transfer_events row (it names a room) or an events row (from/to kept in data,
 * since events has no state columns). `prefix` is the row's constant
 * "instance_id\trank\tgroup\tseq\t" (COPY text, escaped once per batch). The row is written into
 * room reserved once; `data` is the decoded text itself, COPY-escaped (compact JSON holds no raw
 * tab, newline or CR: only its backslashes are doubled), without a tree. */
static void event_row(tdm_cp_buf_t *tev, tdm_cp_buf_t *ev, const tdm_tm_event_t *e, uint32_t idx,
                      const tdm_cp_buf_t *prefix)
{
    tdm_cp_buf_t *b = e->has_room ? tev : ev;
    int tree = e->data || (!e->has_room && (e->from[0] || e->to[0]));
    tdm_cp_buf_reserve(b, EVENT_ROW_FIXED + prefix->len + 2 * (size_t)e->data_len);
    char *o = b->data + b->len;
    o = put_i64(o, e->ts_us);
    if (e->has_room) {
        *o++ = '\t';
    } else {
        memcpy(o, "\tworker\t", 8);
        o += 8;
    }
    memcpy(o, prefix->data, prefix->len);
    o += prefix->len;
    o = tdm_json_put_u64(o, idx);
    *o++ = '\t';
    o = put_text(o, e->type, strlen(e->type));
    *o++ = '\t';
    if (e->has_room) {
        o = put_i64(o, (int64_t)e->room);
        *o++ = '\t';
        o = put_opt(o, e->from);
        *o++ = '\t';
        o = put_opt(o, e->to);
        *o++ = '\t';
    }
    o = put_opt(o, e->reason);
    *o++ = '\t';
    if (!tree) {
        if (e->data_json) {
            o = put_text(o, e->data_json, e->data_len);
        } else {
            *o++ = '\\';
            *o++ = 'N';
        }
    }
    b->len = (size_t)(o - b->data);
    if (tree)
        event_data_tree(b, e);
    tdm_cp_buf_append(b, "\n", 1);
}

/* The persisted samples of a batch, kept with its job for the history cache. */
typedef struct hist_rows {
    tdm_cp_server_t *srv; /* the reply may come after the client left */
    char instance_id[TDM_JSON_HEX64_LEN + 1];
    uint32_t rank;
    uint64_t seq;
    int64_t newest_ts;
    size_t n;
    tdm_tm_sample_t rows[];
} hist_rows_t;

void tdm_cp_hist_sync(tdm_cp_server_t *s)
{
    if (!s->db)
        return; /* stopping: the last replies are being drained */
    uint64_t n = atomic_load(&tdm_cp_db_stats(s->db)->spool_replayed);
    if (n != s->hist_spool_replays) {
        tdm_cp_hist_gap_all(&s->hist);
        s->hist_spool_replays = n;
    }
}

/* Only rows this reply proves committed now enter the history cache; rows that reach the database
 * any other way (spooled, an outcome not known) break its coverage; duplicates as hist.h says. */
static void hist_note(const tdm_cp_job_t *job)
{
    const hist_rows_t *h = job->hist;
    if (!h)
        return;
    tdm_cp_server_t *s = h->srv;
    tdm_cp_hist_sync(s);
    if (job->st == TDM_OK && !job->duplicate && !job->spooled)
        tdm_cp_hist_commit(&s->hist, h->instance_id, h->rank, h->seq, h->rows, h->n);
    else if (job->st == TDM_OK && job->duplicate && h->n)
        tdm_cp_hist_duplicate(&s->hist, h->instance_id, h->rank, h->seq, h->newest_ts);
    else if (h->n)
        tdm_cp_hist_gap(&s->hist, h->instance_id, h->rank, h->newest_ts);
}

static void on_ingested(tdm_cp_job_t *job)
{
    hist_note(job);
    h2o_req_t *req = tdm_cp_job_req(job);
    if (!req)
        return;
    if (job->st == TDM_OK) {
        char body[64];
        size_t n = 0;
        tdm_tm_ack_encode(job->acked_seq, body, sizeof(body), &n);
        tdm_httpd_send_json(req, 200, body, n);
    } else if (job->st == TDM_ERR_INVAL) {
        tdm_httpd_send_error(req, 422, "rejected", "invalid_request_error",
                             "the database rejected the batch: %s", job->err);
    } else {
        tdm_cp_job_send_error(req, job);
    }
    tdm_cp_job_free(job);
}

/* Into the ring unless a live batch brought it (or a newer one) already. */
static void push_new(tdm_cp_rank_t *rk, const tdm_tm_sample_t *x)
{
    const tdm_cp_sample_t *last = tdm_cp_rank_latest(rk);
    if (!last || x->ts_us > last->ts_us)
        tdm_cp_rank_push(rk, x);
}

void tdm_cp_ingest_handle(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                          const tdm_cp_token_t *who)
{
    (void)args;
    char err[512];
    tdm_tm_batch_t tb;
    s->ingest_received++;
    tdm_status_t st = tdm_tm_batch_decode(req->entity.base ? req->entity.base : "", req->entity.len,
                                          NULL, &tb, err, sizeof(err));
    if (st != TDM_OK) {
        s->ingest_rejected++;
        tdm_httpd_send_error(req, 400, "invalid_telemetry", "invalid_request_error", "%s", err);
        return;
    }
    if (tb.seq == 0 && tb.n_events) {
        s->ingest_rejected++;
        tdm_httpd_send_error(
            req, 400, "invalid_telemetry", "invalid_request_error",
            "seq: stored batches count from 1; a live batch (seq 0) carries samples "
            "only");
        tdm_tm_batch_clear(&tb);
        return;
    }
    char inst[TDM_JSON_HEX64_LEN + 1];
    tdm_json_hex64_format(tb.instance_id, inst);
    tdm_cp_buf_t sb = TDM_CP_BUF_INIT, tvb = TDM_CP_BUF_INIT, eb = TDM_CP_BUF_INIT;
    hist_rows_t *hr = NULL;
    tdm_cp_buf_t prefix = TDM_CP_BUF_INIT, scratch = TDM_CP_BUF_INIT;

    tdm_cp_rank_t *rk;
    st = tdm_cp_rings_rank(&s->rings, inst, tb.rank, 1, &rk);
    if (st != TDM_OK) {
        s->ingest_rejected++;
        tdm_httpd_send_error(req, 503, "too_many_ranks", "unavailable_error",
                             "tandemd tracks at most %zu ranks", s->rings.max_ranks);
        goto out;
    }
    snprintf(rk->group, sizeof(rk->group), "%s", tb.group);
    snprintf(rk->worker, sizeof(rk->worker), "%s", tb.worker);
    snprintf(rk->role, sizeof(rk->role), "%s", tb.role);
    rk->last_recv_mono_us = tdm_time_mono_us();
    if (tb.seq == 0) {
        /* live: the ring and the detectors now, nothing stored, answered at once; its samples
         * come again in their stored batch, which then skips them in the ring */
        for (uint32_t i = 0; i < tb.n_samples; i++)
            push_new(rk, &tb.samples[i]);
        s->samples_received += tb.n_samples;
        char body[64];
        size_t n = 0;
        tdm_tm_ack_encode(0, body, sizeof(body), &n);
        tdm_httpd_send_json(req, 200, body, n);
        goto out;
    }
    /* A replay the ring already holds is not pushed again; its rows are still offered to the
     * database (the mark decides), thinned on their own. */
    int replay = tb.seq <= rk->last_seq;
    uint64_t replay_last = 0;
    uint32_t persisted = 0;
    tdm_cp_buf_puts(&prefix, inst);
    tdm_cp_buf_append(&prefix, "\t", 1);
    tdm_cp_buf_u64(&prefix, tb.rank);
    tdm_cp_buf_append(&prefix, "\t", 1);
    tdm_cp_buf_copy_text(&prefix, tb.group);
    tdm_cp_buf_append(&prefix, "\t", 1);
    /* a batch's rows are about 250 bytes each: one allocation up front */
    tdm_cp_buf_reserve(&sb, (size_t)tb.n_samples * 288);
    hr = tdm_malloc(sizeof(*hr) + (size_t)tb.n_samples * sizeof(hr->rows[0]));
    hr->srv = s;
    memcpy(hr->instance_id, inst, sizeof(inst));
    hr->rank = tb.rank;
    hr->seq = tb.seq;
    hr->newest_ts = INT64_MIN;
    hr->n = 0;
    int64_t recv_us = (int64_t)tdm_time_wall_us(); /* the ingest lag's reference */
    for (uint32_t i = 0; i < tb.n_samples; i++) {
        tb.samples[i].recv_us = recv_us;
        const tdm_tm_sample_t *x = &tb.samples[i];
        uint64_t ts = (uint64_t)x->ts_us;
        int due;
        if (replay) {
            due = replay_last == 0 || ts < replay_last || ts - replay_last >= PERSIST_PERIOD_US;
            if (due)
                replay_last = ts;
        } else {
            push_new(rk, x);
            due = tdm_cp_rank_persist_due(rk, ts, PERSIST_PERIOD_US);
        }
        if (due) {
            sample_row(&sb, x, &prefix, tb.seq, &scratch);
            persisted++;
            hr->rows[hr->n++] = *x;
            if (x->ts_us > hr->newest_ts)
                hr->newest_ts = x->ts_us;
        }
    }
    if (!replay) {
        rk->last_seq = tb.seq;
        /* events of a new batch feed the detectors (replays were fed already) */
        uint64_t now = tdm_time_mono_us();
        for (uint32_t i = 0; i < tb.n_events; i++)
            tdm_cp_detect_event(s->detect, rk, &tb.events[i], now);
    }
    s->samples_received += tb.n_samples;
    s->events_received += tb.n_events;

    uint32_t n_tev = 0, n_ev = 0;
    /* the events' constant part: the samples' prefix and the batch seq */
    tdm_cp_buf_u64(&prefix, tb.seq);
    tdm_cp_buf_append(&prefix, "\t", 1);
    if (tb.n_events) {
        tdm_cp_buf_reserve(&tvb, (size_t)tb.n_events * 160);
    }
    for (uint32_t i = 0; i < tb.n_events; i++) {
        event_row(&tvb, &eb, &tb.events[i], i, &prefix);
        if (tb.events[i].has_room)
            n_tev++;
        else
            n_ev++;
    }
    tdm_cp_batch_parts_t parts = {
        .seq = tb.seq,
        .rank = tb.rank,
        .instance_id = inst,
        .group = tb.group,
        .samples = sb.data ? sb.data : "",
        .samples_len = sb.len,
        .tevents = tvb.data ? tvb.data : "",
        .tevents_len = tvb.len,
        .events = eb.data ? eb.data : "",
        .events_len = eb.len,
        .n_samples = persisted,
        .n_tevents = n_tev,
        .n_events = n_ev,
    };
    tdm_cp_batch_t *batch;
    if (tdm_cp_batch_encode(&parts, &batch) != TDM_OK) {
        s->ingest_rejected++;
        tdm_httpd_send_error(req, 413, "body_too_large", "invalid_request_error",
                             "batch too large");
        goto out;
    }
    tdm_cp_job_t *job = tdm_cp_server_job(s, req, NULL, on_ingested, who);
    job->batch = batch;
    job->hist = hr;
    hr = NULL;
    if (tdm_cp_db_ingest(s->db, job) != TDM_OK) {
        tdm_cp_pending_t *pd = job->ctx;
        pd->job = NULL;
        tdm_cp_job_free(job);
        s->ingest_rejected++;
        tdm_httpd_send_error(req, 503, "ingest_full", "unavailable_error",
                             "ingest buffer and spool are full; retry later");
    }
out:
    tdm_free(hr);
    tdm_tm_batch_clear(&tb);
    tdm_cp_buf_free(&sb);
    tdm_cp_buf_free(&tvb);
    tdm_cp_buf_free(&eb);
    tdm_cp_buf_free(&prefix);
    tdm_cp_buf_free(&scratch);
}
