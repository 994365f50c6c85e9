/*
 * generate.c — POST /generate: token ids in, token ids out (JSON, or SSE when "stream":true), on
 * top of the scheduler contract of dataplane/sched/sched.h.
 *
 *   {"input_ids":[1,2,3], "max_new_tokens":16, "stream":false, "ignore_eos":false,
 *    "stop_ids":[..], "sampling":{"temperature","top_k","top_p","min_p","repetition_penalty",
 *    "presence_penalty","frequency_penalty","seed"}}
 *   → {"output_ids":[..],"finish_reason":"length","usage":{"prompt_tokens","completion_tokens",
 *      "cached_tokens"},"ttft_us":N}
 *   stream → `data: {"index":i,"token_id":t}` per token, then `data: {"finish_reason":..,
 *      "usage":{..}}` (or `data: {"error":{..}}`), then `data: [DONE]`.
 * Prompt ids are used verbatim (no BOS added).
 *
 * Threads. The scheduler's callback (scheduler thread) appends to the request's token array under
 * the request's mutex and, unless a wake-up is already queued, posts the request's one embedded
 * h2o_multithread message to the loop; the loop drains the array and writes. So at most one
 * message per request is ever in flight and nothing is allocated per event beyond the array's
 * amortised growth. A request context is freed on the loop once both (a) its final scheduler
 * event was processed — after which the scheduler never touches it (sched.h) — and (b) h2o
 * disposed of the HTTP request. A client that goes away first (h2o's generator stop or the pool's
 * dispose) makes us call tdm_sched_abort(); the scheduler frees the pages and sends FINISH(ABORT).
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/api/api_int.h"

#define GEN_MAX_NEW_TOKENS (1u << 20)
#define GEN_MAX_STOP_IDS 64

struct tdm_api_gen {
    h2o_multithread_message_t msg; /* the wake-up; first member */
    h2o_linklist_t link;           /* in api->gens */
    tdm_api_t *api;
    const tdm_api_gen_ops_t *ops; /* NULL: /generate's own token-id format */
    void *ud;

    /* shared with the scheduler thread, under mu */
    pthread_mutex_t mu;
    int32_t *toks;
    uint32_t n_toks, cap;
    int queued;     /* msg is in the receiver's queue */
    int done;       /* the final event arrived (the scheduler's, or the loop's: see fail) */
    int sched_done; /* the scheduler's final event arrived: it never touches the request again */
    tdm_req_event_kind_t fin_kind;
    tdm_finish_reason_t finish;
    tdm_status_t fin_status;
    char fin_msg[256];
    uint32_t prompt_tokens, completion_tokens, cached_tokens;
    uint64_t ttft_us;
    uint64_t submit_us, last_tok_us; /* scheduler thread only after submit */

    /* loop thread only */
    h2o_req_t *req; /* NULL once h2o let go of the request */
    uint64_t id;
    int stream;
    int done_seen;           /* the final event was processed */
    int client_gone;         /* abort sent because the client left */
    tdm_httpd_watch_t watch; /* the client's socket, read for EOF while the request runs */
    uint32_t seen;           /* tokens taken from toks */
    h2o_generator_t gen;
    int sending, final_queued, final_sent;
    char *out, *pend;
    size_t out_len, out_cap, pend_len, pend_cap;
};

/* ---- scheduler thread ----------------------------------------------------------------------- */

/* An event for the request: the scheduler's (from_sched), or the error the loop ends a request
 * with when the group makes no progress (tdm_api_gen_check_progress). After the first final event
 * the others are dropped; the request is freed only once the scheduler's own final event came. */
static void deliver(tdm_api_gen_t *g, const tdm_req_event_t *ev, int from_sched)
{
    uint64_t now = tdm_time_mono_us();
    pthread_mutex_lock(&g->mu);
    if (from_sched && g->sched_done) { /* contract breach by the scheduler: never twice */
        pthread_mutex_unlock(&g->mu);
        return;
    }
    if (from_sched && ev->kind != TDM_REQ_TOKEN)
        g->sched_done = 1;
    if (g->done) { /* ended by the loop already: only wake it, which frees the request */
        if (g->sched_done && !g->queued) {
            g->queued = 1;
            h2o_multithread_send_message(&g->api->gen_rx, &g->msg);
        }
        pthread_mutex_unlock(&g->mu);
        return;
    }
    if (g->ops)
        g->ops->on_event(g->ud, ev);
    if (ev->kind == TDM_REQ_TOKEN) {
        if (g->n_toks == g->cap) {
            g->cap = g->cap ? 2 * g->cap : 16;
            g->toks = tdm_realloc(g->toks, (size_t)g->cap * sizeof(*g->toks));
        }
        g->toks[g->n_toks++] = ev->token;
        if (g->n_toks == 1)
            tdm_api_hist_observe_us(&g->api->ttft, now - g->submit_us);
        else
            tdm_api_hist_observe_us(&g->api->itl, now - g->last_tok_us);
        g->last_tok_us = now;
    } else {
        g->done = 1;
        g->fin_kind = ev->kind;
        g->finish = ev->finish;
        g->fin_status = ev->status;
        snprintf(g->fin_msg, sizeof(g->fin_msg), "%s", ev->message ? ev->message : "");
        g->prompt_tokens = ev->prompt_tokens;
        g->completion_tokens = ev->completion_tokens;
        g->cached_tokens = ev->cached_tokens;
        g->ttft_us = ev->ttft_us;
        if (ev->kind == TDM_REQ_FINISH) {
            tdm_api_hist_observe_us(&g->api->e2e, now - g->submit_us);
            if (ev->queue_us)
                tdm_api_hist_observe_us(&g->api->queue, ev->queue_us);
        }
    }
    if (!g->queued) {
        g->queued = 1;
        h2o_multithread_send_message(&g->api->gen_rx, &g->msg);
    }
    pthread_mutex_unlock(&g->mu);
}

static void on_event(void *ctx, const tdm_req_event_t *ev)
{
    deliver(ctx, ev, 1);
}

/* ---- loop thread ---------------------------------------------------------------------------- */

static void gen_free(tdm_api_gen_t *g)
{
    tdm_httpd_watch_stop(&g->watch);
    h2o_linklist_unlink(&g->link);
    g->api->n_gens--;
    pthread_mutex_destroy(&g->mu);
    if (g->ops)
        g->ops->free(g->ud);
    tdm_free(g->toks);
    tdm_free(g->out);
    tdm_free(g->pend);
    tdm_free(g);
}

static void maybe_free(tdm_api_gen_t *g)
{
    pthread_mutex_lock(&g->mu);
    int sched_done = g->sched_done;
    pthread_mutex_unlock(&g->mu);
    if (g->done_seen && !g->req && sched_done)
        gen_free(g);
}

/* The client left (stream stopped or request disposed) before the end: abort once. */
static void client_left(tdm_api_gen_t *g)
{
    tdm_httpd_watch_stop(&g->watch);
    g->req = NULL;
    if (!g->done_seen && !g->client_gone) {
        g->client_gone = 1;
        g->api->client_disconnects++;
        tdm_dbg(TDM_SUB_API, "msg=\"client gone, aborting\" req=%llu", (unsigned long long)g->id);
        tdm_sched_abort(g->api->o.sched, g->id);
    }
}

static void on_pool_dispose(void *p)
{
    tdm_api_gen_t *g = *(tdm_api_gen_t **)p;
    client_left(g);
    maybe_free(g);
}

static void buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n)
            c *= 2;
        *buf = tdm_realloc(*buf, c);
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
}

static void pend_printf(tdm_api_gen_t *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void pend_printf(tdm_api_gen_t *g, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    buf_append(&g->pend, &g->pend_len, &g->pend_cap, tmp,
               (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void stream_flush(tdm_api_gen_t *g)
{
    if (!g->req || g->sending || g->final_sent)
        return;
    if (g->pend_len == 0 && !g->final_queued)
        return;
    char *t = g->out;
    size_t tc = g->out_cap;
    g->out = g->pend, g->out_cap = g->pend_cap, g->out_len = g->pend_len;
    g->pend = t, g->pend_cap = tc, g->pend_len = 0;
    g->sending = 1;
    h2o_send_state_t state = H2O_SEND_STATE_IN_PROGRESS;
    if (g->final_queued) {
        state = H2O_SEND_STATE_FINAL;
        g->final_sent = 1;
        tdm_httpd_watch_stop(
            &g->watch); /* the socket is h2o's again once the last send completes */
    }
    h2o_iovec_t v = h2o_iovec_init(g->out, g->out_len);
    h2o_send(g->req, &v, 1, state); /* may call proceed re-entrantly: touch nothing after */
}

static void on_proceed(h2o_generator_t *self, h2o_req_t *req)
{
    (void)req;
    tdm_api_gen_t *g = H2O_STRUCT_FROM_MEMBER(tdm_api_gen_t, gen, self);
    g->sending = 0;
    g->out_len = 0;
    stream_flush(g);
}

static void on_stop(h2o_generator_t *self, h2o_req_t *req)
{
    (void)req;
    tdm_api_gen_t *g = H2O_STRUCT_FROM_MEMBER(tdm_api_gen_t, gen, self);
    client_left(g);
}

static json_t *usage_json(const tdm_api_gen_t *g)
{
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", (json_int_t)g->prompt_tokens,
                     "completion_tokens", (json_int_t)g->completion_tokens, "cached_tokens",
                     (json_int_t)g->cached_tokens);
}

static json_t *final_error(const tdm_api_gen_t *g, int *ret_http)
{
    return tdm_json_error_status(g->fin_status != TDM_OK ? g->fin_status : TDM_ERR_IO,
                                 g->fin_msg[0] ? g->fin_msg : NULL, ret_http);
}

static void stream_final(tdm_api_gen_t *g)
{
    json_t *o;
    if (g->fin_kind == TDM_REQ_ERROR) {
        o = final_error(g, NULL);
    } else {
        o = json_pack("{s:s,s:o,s:I}", "finish_reason", tdm_finish_reason_name(g->finish), "usage",
                      usage_json(g), "ttft_us", (json_int_t)g->ttft_us);
    }
    char *text = tdm_json_dumps(o);
    json_decref(o);
    buf_append(&g->pend, &g->pend_len, &g->pend_cap, "data: ", 6);
    buf_append(&g->pend, &g->pend_len, &g->pend_cap, text, strlen(text));
    free(text);
    buf_append(&g->pend, &g->pend_len, &g->pend_cap, "\n\ndata: [DONE]\n\n", 16);
    g->final_queued = 1;
}

static void reply_whole(tdm_api_gen_t *g, const int32_t *toks, uint32_t n)
{
    tdm_api_t *a = g->api;
    tdm_httpd_watch_stop(&g->watch);
    if (g->fin_kind == TDM_REQ_ERROR) {
        int http;
        json_t *e = final_error(g, &http);
        char *text = tdm_json_dumps(e);
        json_decref(e);
        a->http_errors++;
        tdm_api_send_json(g->req, http, text, strlen(text));
        free(text);
        return;
    }
    json_t *ids = json_array();
    for (uint32_t i = 0; i < n; i++)
        json_array_append_new(ids, json_integer(toks[i]));
    json_t *o = json_pack("{s:o,s:s,s:o,s:I}", "output_ids", ids, "finish_reason",
                          tdm_finish_reason_name(g->finish), "usage", usage_json(g), "ttft_us",
                          (json_int_t)g->ttft_us);
    char *text = tdm_json_dumps(o);
    json_decref(o);
    tdm_api_send_json(g->req, 200, text, strlen(text));
    free(text);
}

/* A request with ops: they take what their on_event kept (under the lock) and write it. */
static void gen_process_ops(tdm_api_gen_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->queued = 0;
    int done = g->done;
    if (!g->done_seen)
        g->ops->take(g->ud);
    pthread_mutex_unlock(&g->mu);
    if (g->done_seen) { /* a wake-up after the end: the scheduler's late final event */
        maybe_free(g);
        return;
    }
    g->done_seen = done;
    if (done && g->req)
        tdm_api_access_usage(g->req, g->prompt_tokens, g->completion_tokens, g->ttft_us);
    g->ops->process(g, g->ud, done);
    stream_flush(g);
    if (done)
        maybe_free(g);
}

static void gen_process(tdm_api_gen_t *g)
{
    int32_t *toks = NULL;
    if (g->ops) {
        gen_process_ops(g);
        return;
    }
    pthread_mutex_lock(&g->mu);
    g->queued = 0;
    int done = g->done;
    uint32_t from = g->seen, n = g->n_toks;
    /* streams write the new tokens; whole replies need every token, once, at the end */
    uint32_t lo = g->stream ? from : 0;
    int copy = g->req && n > lo && (g->stream || done);
    if (copy) {
        toks = tdm_malloc((size_t)(n - lo) * sizeof(*toks));
        memcpy(toks, g->toks + lo, (size_t)(n - lo) * sizeof(*toks));
    }
    pthread_mutex_unlock(&g->mu);
    if (g->done_seen) { /* a wake-up after the end: the scheduler's late final event */
        tdm_free(toks);
        maybe_free(g);
        return;
    }
    g->seen = n;
    g->done_seen = done;
    if (done && g->req)
        tdm_api_access_usage(g->req, g->prompt_tokens, g->completion_tokens, g->ttft_us);
    if (g->req && g->stream) {
        for (uint32_t i = from; i < n; i++)
            pend_printf(g, "data: {\"index\":%u,\"token_id\":%d}\n\n", i, toks[i - from]);
        if (done)
            stream_final(g);
        stream_flush(g);
    } else if (g->req && done) {
        reply_whole(g, toks, n);
    }
    tdm_free(toks);
    if (done)
        maybe_free(g);
}

void tdm_api_gen_on_messages(h2o_multithread_receiver_t *rx, h2o_linklist_t *messages)
{
    (void)rx;
    while (!h2o_linklist_is_empty(messages)) {
        h2o_multithread_message_t *m =
            H2O_STRUCT_FROM_MEMBER(h2o_multithread_message_t, link, messages->next);
        h2o_linklist_unlink(&m->link);
        gen_process((tdm_api_gen_t *)m);
    }
}

void tdm_api_gen_abort_all(tdm_api_t *a)
{
    for (h2o_linklist_t *l = a->gens.next; l != &a->gens; l = l->next) {
        tdm_api_gen_t *g = H2O_STRUCT_FROM_MEMBER(tdm_api_gen_t, link, l);
        if (!g->done_seen)
            tdm_sched_abort(a->o.sched, g->id);
    }
}

/* A group that makes no progress with work pending (a rank stuck in a collective, a wedged loop)
 * delivers no final event: once /health has failed on progress for 2 x --health-progress-timeout,
 * every open request at least that old is ended here with an error naming why (its stream: the
 * error event, then [DONE]) and aborted in the scheduler; /ready is failing already, so routers
 * send no new work. */
void tdm_api_gen_check_progress(tdm_api_t *a, uint64_t now_us)
{
    uint64_t pt = atomic_load(&a->health_timeout_us);
    char why[256], msg[400];
    if (h2o_linklist_is_empty(&a->gens) || !pt ||
        tdm_progress_healthy(a->o.page, now_us, 2 * pt, UINT64_MAX / 4, why, sizeof(why)))
        return;
    snprintf(msg, sizeof(msg),
             "the worker group made no progress for %.1f s (2 x --health-progress-timeout): %s",
             2.0 * (double)pt / 1e6, why);
    tdm_req_event_t ev = {.kind = TDM_REQ_ERROR, .status = TDM_ERR_TIMEOUT, .message = msg};
    for (h2o_linklist_t *l = a->gens.next; l != &a->gens; l = l->next) {
        tdm_api_gen_t *g = H2O_STRUCT_FROM_MEMBER(tdm_api_gen_t, link, l);
        /* the request itself has waited that long too (a stall it came late to may end) */
        if (g->done_seen || now_us - g->submit_us < 2 * pt)
            continue;
        pthread_mutex_lock(&g->mu);
        int done = g->done;
        pthread_mutex_unlock(&g->mu);
        if (done)
            continue;
        ev.req_id = g->id;
        deliver(g, &ev, 0);
        tdm_sched_abort(a->o.sched, g->id);
        tdm_warn(TDM_SUB_API, "msg=\"request ended: no progress\" req=%llu",
                 (unsigned long long)g->id);
    }
}

/* The client's socket read EOF or an error while the request runs (tdm/httpd.h's watch): the
 * client is gone and the request is aborted at once. */
static void on_client_gone(tdm_httpd_watch_t *w)
{
    tdm_api_gen_t *g = H2O_STRUCT_FROM_MEMBER(tdm_api_gen_t, watch, w);
    if (g->done_seen || g->client_gone)
        return;
    g->client_gone = 1;
    g->api->client_disconnects++;
    tdm_dbg(TDM_SUB_API, "msg=\"client socket closed, aborting\" req=%llu",
            (unsigned long long)g->id);
    tdm_sched_abort(g->api->o.sched, g->id);
}

/* h2o sees a vanished client only when it next writes to it: a request waiting for its first
 * token (a long prefill, or a PD request whose KV is still in transfer) would run to its first
 * token for nobody. So the client's socket is read while the request runs (on_client_gone), and,
 * for the sockets that are not (HTTP/2, a pipelining client), every tick the sockets of
 * unfinished requests are peeked at: EOF or a reset means the client is gone and the request is
 * aborted now (nginx's ngx_http_test_reading does the same; a client that half-closes after its
 * request is treated as gone, as there). h2o still owns the request and disposes of it as
 * usual. */
void tdm_api_gen_check_clients(tdm_api_t *a)
{
    for (h2o_linklist_t *l = a->gens.next; l != &a->gens; l = l->next) {
        tdm_api_gen_t *g = H2O_STRUCT_FROM_MEMBER(tdm_api_gen_t, link, l);
        if (!g->req || g->done_seen || g->client_gone || !g->req->conn ||
            !g->req->conn->callbacks->get_socket)
            continue;
        h2o_socket_t *sock = g->req->conn->callbacks->get_socket(g->req->conn);
        int fd = sock ? h2o_socket_get_fd(sock) : -1;
        if (fd < 0)
            continue;
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
            continue;
        g->client_gone = 1;
        a->client_disconnects++;
        tdm_dbg(TDM_SUB_API, "msg=\"client socket closed, aborting\" req=%llu",
                (unsigned long long)g->id);
        tdm_sched_abort(a->o.sched, g->id);
    }
}

/* ---- the request ---------------------------------------------------------------------------- */

typedef struct gen_parsed {
    int32_t *ids;
    uint32_t n_ids;
    int32_t stop_ids[GEN_MAX_STOP_IDS];
    uint32_t n_stop;
    uint64_t max_new;
    int stream, ignore_eos;
    tdm_sample_params_t sp;
} gen_parsed_t;

static tdm_status_t get_float(const json_t *o, const char *key, double lo, double hi, float *ret,
                              char *err, size_t err_len)
{
    double d;
    tdm_status_t st = tdm_json_get_number(o, "sampling", key, lo, hi, &d, err, err_len);
    if (st == TDM_OK)
        *ret = (float)d;
    return st == TDM_ERR_NOTFOUND ? TDM_OK : st;
}

static tdm_status_t parse_ids(const json_t *arr, const char *key, int32_t *out, uint32_t *ret_n,
                              char *err, size_t err_len)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            snprintf(err, err_len, "%s[%zu]: expected a token id (integer 0..%d)", key, i,
                     INT32_MAX);
            return TDM_ERR_INVAL;
        }
        out[i] = (int32_t)json_integer_value(v);
    }
    *ret_n = (uint32_t)json_array_size(arr);
    return TDM_OK;
}

static tdm_status_t parse_generate(const json_t *o, gen_parsed_t *p, char *err, size_t err_len)
{
    static const char *const keys[] = {"input_ids", "max_new_tokens", "stream", "ignore_eos",
                                       "stop_ids",  "sampling",       NULL};
    static const char *const skeys[] = {
        "temperature",       "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
        "frequency_penalty", "seed",  NULL};
    json_t *arr, *s;
    tdm_status_t st;
    TDM_TRY(tdm_json_check_keys(o, "", keys, err, err_len));
    TDM_TRY(tdm_json_get_array(o, "", "input_ids", &arr, err, err_len));
    if (json_array_size(arr) == 0) {
        snprintf(err, err_len, "input_ids: must not be empty");
        return TDM_ERR_INVAL;
    }
    p->ids = tdm_malloc(json_array_size(arr) * sizeof(int32_t));
    TDM_TRY(parse_ids(arr, "input_ids", p->ids, &p->n_ids, err, err_len));
    st = tdm_json_get_uint(o, "", "max_new_tokens", GEN_MAX_NEW_TOKENS, &p->max_new, err, err_len);
    if (st == TDM_ERR_NOTFOUND)
        p->max_new = 16;
    else if (st != TDM_OK)
        return st;
    if (p->max_new == 0) {
        snprintf(err, err_len, "max_new_tokens: must be at least 1");
        return TDM_ERR_RANGE;
    }
    st = tdm_json_get_bool(o, "", "stream", &p->stream, err, err_len);
    if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
        return st;
    st = tdm_json_get_bool(o, "", "ignore_eos", &p->ignore_eos, err, err_len);
    if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
        return st;
    st = tdm_json_get_array(o, "", "stop_ids", &arr, err, err_len);
    if (st == TDM_OK) {
        if (json_array_size(arr) > GEN_MAX_STOP_IDS) {
            snprintf(err, err_len, "stop_ids: at most %d ids", GEN_MAX_STOP_IDS);
            return TDM_ERR_RANGE;
        }
        TDM_TRY(parse_ids(arr, "stop_ids", p->stop_ids, &p->n_stop, err, err_len));
    } else if (st != TDM_ERR_NOTFOUND) {
        return st;
    }
    tdm_sample_params_default(&p->sp);
    if (getrandom(&p->sp.seed, sizeof(p->sp.seed), 0) != (ssize_t)sizeof(p->sp.seed))
        p->sp.seed = tdm_time_mono_ns();
    st = tdm_json_get_object(o, "", "sampling", &s, err, err_len);
    if (st == TDM_ERR_NOTFOUND)
        return TDM_OK;
    if (st != TDM_OK)
        return st;
    TDM_TRY(tdm_json_check_keys(s, "sampling", skeys, err, err_len));
    TDM_TRY(get_float(s, "temperature", 0, 1e6, &p->sp.temperature, err, err_len));
    TDM_TRY(get_float(s, "top_p", 0, 1, &p->sp.top_p, err, err_len));
    TDM_TRY(get_float(s, "min_p", 0, 1, &p->sp.min_p, err, err_len));
    TDM_TRY(get_float(s, "repetition_penalty", 0, 1e6, &p->sp.repetition_penalty, err, err_len));
    TDM_TRY(get_float(s, "presence_penalty", -2, 2, &p->sp.presence_penalty, err, err_len));
    TDM_TRY(get_float(s, "frequency_penalty", -2, 2, &p->sp.frequency_penalty, err, err_len));
    int64_t k;
    st = tdm_json_get_int(s, "sampling", "top_k", -1, INT32_MAX, &k, err, err_len);
    if (st == TDM_OK)
        p->sp.top_k = (int32_t)k;
    else if (st != TDM_ERR_NOTFOUND)
        return st;
    st = tdm_json_get_uint(s, "sampling", "seed", UINT64_MAX >> 1, &p->sp.seed, err, err_len);
    if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
        return st;
    return tdm_sample_params_validate(&p->sp, err, err_len);
}

void tdm_api_h_generate(tdm_api_t *a, h2o_req_t *req)
{
    char err[256] = "";
    gen_parsed_t p;
    memset(&p, 0, sizeof(p));
    a->generate_requests++;
    json_t *o = tdm_api_body_object(a, req);
    if (!o)
        return;
    tdm_status_t st = parse_generate(o, &p, err, sizeof(err));
    json_decref(o);
    if (st != TDM_OK) {
        tdm_free(p.ids);
        tdm_api_send_error(a, req, 400, "invalid_request", "invalid_request_error", "%s", err);
        return;
    }

    tdm_req_params_t rp = {
        .prompt = p.ids,
        .n_prompt = p.n_ids,
        .max_new_tokens = (uint32_t)p.max_new,
        .sampling = p.sp,
        .stop_ids = p.stop_ids,
        .n_stop_ids = p.n_stop,
        .ignore_eos = p.ignore_eos,
        .want_text = 0,
    };
    st = tdm_api_gen_start(a, req, &rp, p.stream, NULL, NULL, err, sizeof(err));
    tdm_free(p.ids);
    if (st != TDM_OK)
        tdm_api_send_status(a, req, st, err[0] ? err : NULL);
}

tdm_status_t tdm_api_gen_start(tdm_api_t *a, h2o_req_t *req, tdm_req_params_t *rp, int stream,
                               const tdm_api_gen_ops_t *ops, void *ud, char *err, size_t err_len)
{
    /* a group stuck past 2 x --health-progress-timeout would only hold the request until
     * tdm_api_gen_check_progress ends it: refuse it now */
    uint64_t pt = atomic_load(&a->health_timeout_us);
    char why[256];
    if (pt && !tdm_progress_healthy(a->o.page, tdm_time_mono_us(), 2 * pt, UINT64_MAX / 4, why,
                                    sizeof(why))) {
        snprintf(err, err_len, "the worker group is stuck: %s", why);
        return TDM_ERR_BUSY;
    }
    /* decode without a registered prefill group would answer 200 and then an SSE error */
    why[0] = '\0';
    if (a->o.pd_ready && !strcmp(a->o.cfg->disaggregation_mode, "decode") &&
        !a->o.pd_ready(a->o.pd_ctx, why, sizeof(why))) {
        snprintf(err, err_len, "no prefill group is registered%s%s", why[0] ? ": " : "", why);
        return TDM_ERR_BUSY;
    }
    tdm_api_gen_t *g = tdm_calloc(1, sizeof(*g));
    g->api = a;
    g->stream = stream;
    g->ops = ops;
    g->ud = ud;
    pthread_mutex_init(&g->mu, NULL);
    rp->cb = on_event;
    rp->ctx = g;
    g->submit_us = tdm_time_mono_us();
    uint64_t id;
    tdm_status_t st = tdm_sched_submit(a->o.sched, rp, &id, err, err_len);
    if (st != TDM_OK) {
        pthread_mutex_destroy(&g->mu);
        tdm_free(g);
        return st;
    }
    g->id = id;
    g->req = req;
    h2o_linklist_insert(&a->gens, &g->link);
    a->n_gens++;
    tdm_api_gen_t **hold = h2o_mem_alloc_shared(&req->pool, sizeof(*hold), on_pool_dispose);
    *hold = g;
    tdm_httpd_watch_start(&g->watch, req, on_client_gone);
    if (g->stream) {
        g->gen.proceed = on_proceed;
        g->gen.stop = on_stop;
        req->res.status = 200;
        req->res.reason = "OK";
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                       H2O_STRLIT("text/event-stream"));
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
                       H2O_STRLIT("no-cache"));
        h2o_start_response(req, &g->gen);
        g->sending = 1; /* the headers go first; proceed() follows */
        h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS);
    }
    return TDM_OK;
}

h2o_req_t *tdm_api_gen_req(const tdm_api_gen_t *g)
{
    return g->req;
}

uint64_t tdm_api_gen_id(const tdm_api_gen_t *g)
{
    return g->id;
}

void tdm_api_gen_write(tdm_api_gen_t *g, const char *s, size_t n, int final)
{
    if (!g->req || g->final_queued)
        return;
    if (n > 0)
        buf_append(&g->pend, &g->pend_len, &g->pend_cap, s, n);
    if (final)
        g->final_queued = 1;
}
