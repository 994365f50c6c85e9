/*
 * cp_server.c — the h2o side of tandemd: listener, dispatch through the route table, auth, error
 * bodies, the database reply receiver, /health, /metrics and sd_notify.
 *
 * The loop runs h2o_evloop_run in 100 ms slices so that the watchdog ping, STATUS= transitions and
 * the stop flag are handled from the loop itself: a wedged loop stops the watchdog, which is the
 * point of it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include <tdm/httpd.h>
#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/net.h>
#include <tdm/time.h>

#include "controlplane/http/cp_server.h"
#include "controlplane/http/stream.h"

#define RING_CAP_PER_RANK 3000 /* 10 min of 200 ms snapshots */
#define RING_MAX_RANKS 4096
#define HIST_CAP_PER_RANK 1024 /* persisted rows: 102 s at 10 Hz (grown on demand) */
#define HIST_MAX_RANKS 1024    /* the ranks past it are read from the database */

/* ---- jobs ----------------------------------------------------------------------------------- */

static void pending_dispose(void *p)
{
    tdm_cp_pending_t *pd = p;
    if (pd->job)
        pd->job->ctx = NULL; /* the request is gone; the job's reply will be dropped */
}

tdm_cp_job_t *tdm_cp_server_job(tdm_cp_server_t *s, h2o_req_t *req, const char *sql,
                                tdm_cp_job_done_fn done, const tdm_cp_token_t *who)
{
    tdm_cp_pending_t *pd = h2o_mem_alloc_shared(&req->pool, sizeof(*pd), pending_dispose);
    memset(pd, 0, sizeof(*pd));
    pd->req = req;
    pd->srv = s;
    if (who)
        snprintf(pd->actor, sizeof(pd->actor), "%s", who->name);
    tdm_cp_job_t *job = tdm_cp_job_new(sql, done, pd);
    pd->job = job;
    return job;
}

h2o_req_t *tdm_cp_job_req(tdm_cp_job_t *job)
{
    tdm_cp_pending_t *pd = job->ctx;
    if (!pd) {
        tdm_cp_job_free(job);
        return NULL;
    }
    pd->job = NULL;
    return pd->req;
}

void tdm_cp_job_send_error(h2o_req_t *req, const tdm_cp_job_t *job)
{
    if (job->st == TDM_ERR_DB && strcmp(job->err, "database unavailable") == 0)
        tdm_httpd_send_error(req, 503, "db_unavailable", "unavailable_error",
                             "the database is unavailable; retry later");
    else if (job->st == TDM_ERR_ABORTED)
        tdm_httpd_send_error(req, 503, "shutting_down", "unavailable_error", "tandemd is stopping");
    else if (strncmp(job->sqlstate, "22", 2) == 0 || strncmp(job->sqlstate, "23", 2) == 0)
        tdm_httpd_send_error(req, 400, "invalid_value", "invalid_request_error", "%s", job->err);
    else
        tdm_httpd_send_error(req, 500, "internal", "server_error", "database error: %s", job->err);
}

void tdm_cp_job_reply_json(tdm_cp_job_t *job)
{
    h2o_req_t *req = tdm_cp_job_req(job);
    if (!req)
        return;
    if (job->st != TDM_OK)
        tdm_cp_job_send_error(req, job);
    else if (!job->result)
        tdm_httpd_send_error(req, 404, "not_found", "not_found_error", "no such object");
    else
        tdm_httpd_send_json(req, 200, job->result, strlen(job->result));
    tdm_cp_job_free(job);
}

static void on_db_messages(h2o_multithread_receiver_t *rx, h2o_linklist_t *messages)
{
    (void)rx;
    while (!h2o_linklist_is_empty(messages)) {
        h2o_multithread_message_t *m =
            H2O_STRUCT_FROM_MEMBER(h2o_multithread_message_t, link, messages->next);
        h2o_linklist_unlink(&m->link);
        tdm_cp_job_t *job = (tdm_cp_job_t *)m;
        job->done(job);
    }
}

/* ---- query strings -------------------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int tdm_cp_query_get(h2o_req_t *req, const char *key, char *buf, size_t len)
{
    if (req->query_at == SIZE_MAX || len == 0)
        return 0;
    const char *q = req->path.base + req->query_at + 1;
    const char *end = req->path.base + req->path.len;
    size_t klen = strlen(key);
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *pe = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(pe - q));
        const char *ke = eq ? eq : pe;
        if ((size_t)(ke - q) == klen && memcmp(q, key, klen) == 0) {
            size_t o = 0;
            for (const char *p = eq ? eq + 1 : pe; p < pe && o + 1 < len; p++) {
                if (*p == '%' && pe - p >= 3 && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
                    buf[o++] = (char)(hexval(p[1]) * 16 + hexval(p[2]));
                    p += 2;
                } else {
                    buf[o++] = *p == '+' ? ' ' : *p;
                }
            }
            buf[o] = '\0';
            return 1;
        }
        q = pe + 1;
    }
    return 0;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

/* Match `path` against a route pattern, filling captures. */
static int route_match(const char *pat, const char *path, size_t plen, tdm_cp_args_t *args)
{
    const char *p = path, *pend = path + plen;
    args->n = 0;
    while (*pat) {
        if (*pat == '{') {
            const char *close = strchr(pat, '}');
            const char *seg_end = memchr(p, '/', (size_t)(pend - p));
            if (!seg_end)
                seg_end = pend;
            if (seg_end == p || args->n >= TDM_CP_MAX_ARGS)
                return 0;
            args->v[args->n++] = h2o_iovec_init(p, (size_t)(seg_end - p));
            p = seg_end;
            pat = close + 1;
        } else {
            if (p >= pend || *p != *pat)
                return 0;
            p++;
            pat++;
        }
    }
    return p == pend;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    tdm_cp_server_t *s = tdm_httpd_self(self);
    s->http_requests++;
    size_t plen = req->path_normalized.len;
    const tdm_cp_route_t *route = NULL;
    int path_found = 0;
    tdm_cp_args_t args;
    for (size_t i = 0; !route && i < tdm_cp_routes_count; i++) {
        const tdm_cp_route_t *r = &tdm_cp_routes[i];
        if (!route_match(r->path, req->path_normalized.base, plen, &args))
            continue;
        path_found = 1;
        if (h2o_memis(req->method.base, req->method.len, r->method, strlen(r->method)))
            route = r;
    }
    if (!route) {
        s->http_errors++;
        if (path_found)
            tdm_httpd_send_error(req, 405, "method_not_allowed", "invalid_request_error",
                                 "method %.*s not allowed here", (int)req->method.len,
                                 req->method.base);
        else
            tdm_httpd_send_error(req, 404, "not_found", "not_found_error", "no route %.*s",
                                 (int)plen, req->path_normalized.base);
        return 0;
    }
    const tdm_cp_token_t *who = NULL;
    if (route->role != TDM_CP_ROLE_NONE) {
        ssize_t hi = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
        int present = hi >= 0;
        if (present)
            who = tdm_cp_auth_check(&s->auth, req->headers.entries[hi].value.base,
                                    req->headers.entries[hi].value.len);
        if (!who) {
            s->http_errors++;
            tdm_httpd_send_unauthorized(req, present ? "unknown or revoked token"
                                                     : "a bearer token is required");
            return 0;
        }
        if (who->role < route->role) {
            s->http_errors++;
            tdm_httpd_send_error(req, 403, "forbidden", "permission_error",
                                 "token '%s' has role %s; this needs %s", who->name,
                                 tdm_cp_role_name(who->role), tdm_cp_role_name(route->role));
            return 0;
        }
    }
    if (req->entity.base && req->entity.len > route->max_body) {
        s->http_errors++;
        tdm_httpd_send_error(req, 413, "body_too_large", "invalid_request_error",
                             "request body of %zu bytes exceeds the %zu-byte limit of this route",
                             req->entity.len, route->max_body);
        return 0;
    }
    if (!s->db) {
        /* shutting down: the DB threads are gone, so nothing may be queued to them */
        tdm_httpd_send_error(req, 503, "shutting_down", "unavailable_error", "tandemd is stopping");
        return 0;
    }
    route->handler(s, req, &args, who);
    return 0;
}

/* ---- listener ------------------------------------------------------------------------------- */

static tdm_status_t listen_on(tdm_cp_server_t *s, const char *spec, char *err, size_t err_len)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host) || !colon[1]) {
        snprintf(err, err_len, "--listen %s: expected host:port", spec);
        return TDM_ERR_INVAL;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    char what[300];
    snprintf(what, sizeof(what), "--listen %s", spec);
    tdm_status_t st =
        tdm_httpd_listen(&s->http, s->loop, &s->accept_ctx, host, colon + 1, what, err, err_len);
    s->port = s->http.port;
    return st;
}

static tdm_status_t write_ready_file(const char *path, int port, char *err, size_t err_len)
{
    char body[32];
    snprintf(body, sizeof(body), "{\"http\":%d}\n", port);
    return tdm_httpd_write_ready_file(path, body, err, err_len);
}

static void loop_tick(tdm_cp_server_t *s);

/* ---- startup: tokens ------------------------------------------------------------------------ */

static const char sql_tokens_load[] =
    "WITH up AS (INSERT INTO api_tokens (name, role, token_hash, created_us) "
    "  VALUES ($1, 'admin', decode($2, 'hex'), $3::bigint) ON CONFLICT (name) DO UPDATE "
    "  SET token_hash = EXCLUDED.token_hash, role = 'admin', revoked_us = NULL RETURNING 1) "
    "SELECT coalesce(json_agg(json_build_object('name', name, 'role', role, 'hash', "
    "  encode(token_hash, 'hex'))), '[]') FROM api_tokens "
    "WHERE revoked_us IS NULL AND name <> $1 AND (SELECT count(*) FROM up) = 1";

static void on_tokens_loaded(tdm_cp_job_t *job)
{
    tdm_cp_server_t *s = job->ctx;
    if (job->st != TDM_OK) {
        /* aborted at shutdown, or a real error: the latter leaves only admin usable */
        if (job->st != TDM_ERR_ABORTED)
            tdm_err(TDM_SUB_CP, "msg=\"loading API tokens failed\" err=\"%s\"", job->err);
        tdm_cp_job_free(job);
        return;
    }
    json_t *arr = json_loads(job->result ? job->result : "[]", 0, NULL);
    size_t i;
    json_t *t;
    json_array_foreach(arr, i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *role = json_string_value(json_object_get(t, "role"));
        const char *hex = json_string_value(json_object_get(t, "hash"));
        tdm_cp_role_t r;
        uint8_t h[32];
        if (!name || !role || !hex || strlen(hex) != 64 || tdm_cp_role_parse(role, &r) != TDM_OK)
            continue;
        for (int k = 0; k < 32; k++)
            h[k] = (uint8_t)(hexval(hex[2 * k]) * 16 + hexval(hex[2 * k + 1]));
        tdm_cp_auth_put(&s->auth, name, r, h);
    }
    json_decref(arr);
    tdm_cp_job_free(job);
    s->tokens_loaded = 1;
    loop_tick(s);
}

static void submit_token_load(tdm_cp_server_t *s)
{
    uint8_t h[32];
    char hex[65], now[32];
    tdm_cp_auth_sha256(s->admin_token, TDM_CP_TOKEN_LEN, h);
    tdm_cp_auth_hex(h, 32, hex);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)tdm_time_wall_us());
    tdm_cp_job_t *job = tdm_cp_job_new(sql_tokens_load, on_tokens_loaded, s);
    job->wait = 1;
    tdm_cp_job_param(job, TDM_CP_ADMIN_TOKEN_NAME);
    tdm_cp_job_param(job, hex);
    tdm_cp_job_param(job, now);
    tdm_cp_db_query(s->db, job);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

tdm_status_t tdm_cp_server_init(tdm_cp_server_t *s, const tdm_cp_server_opts_t *opts, char *err,
                                size_t err_len)
{
    /* --alert-policy is checked before anything is allocated */
    tdm_cp_alerts_cfg_t ac;
    tdm_cp_alerts_cfg_default(&ac);
    if (opts->alert_policy && opts->alert_policy[0] &&
        tdm_cp_policy_parse(opts->alert_policy, ac.policy, err, err_len) != TDM_OK)
        return TDM_ERR_INVAL;
    memset(s, 0, sizeof(*s));
    s->started_us = tdm_time_wall_us();
    tdm_cp_rings_init(&s->rings, RING_CAP_PER_RANK, RING_MAX_RANKS);
    tdm_cp_hist_init(&s->hist, HIST_CAP_PER_RANK, HIST_MAX_RANKS);
    tdm_cp_auth_init(&s->auth);
    /* detectors and the alert store (defaults: docs/design.md §4 thresholds, policy notify) */
    tdm_cp_detect_init(NULL, &s->detect);
    tdm_cp_alerts_init(&ac, &s->alerts);

    int created = 0;
    tdm_status_t st =
        tdm_cp_auth_admin_file(opts->state_dir, s->admin_token, &created, err, err_len);
    if (st != TDM_OK)
        goto err_free;
    if (created)
        tdm_info(TDM_SUB_CP, "msg=\"admin token written\" path=%s/admin.token", opts->state_dir);
    uint8_t h[32];
    tdm_cp_auth_sha256(s->admin_token, TDM_CP_TOKEN_LEN, h);
    tdm_cp_auth_put(&s->auth, TDM_CP_ADMIN_TOKEN_NAME, TDM_CP_ROLE_ADMIN, h);

    size_t max_body = 0;
    for (size_t i = 0; i < tdm_cp_routes_count; i++)
        if (tdm_cp_routes[i].max_body > max_body)
            max_body = tdm_cp_routes[i].max_body;
    /* h2o refuses bodies over its own limit with a plain-text 413 before a route sees them: its
     * limit is kept well above the largest route's, so that bodies near a limit get the routes'
     * JSON 413; only bodies past 2x the largest limit (+64 KiB) still get h2o's. */
    tdm_httpd_config(&s->config, 2 * max_body + (64u << 10), on_req, s);
    s->loop = tdm_httpd_loop(&s->config, &s->ctx, &s->accept_ctx);
    s->mq = h2o_multithread_create_queue(s->loop);
    h2o_multithread_register_receiver(s->mq, &s->db_rx, on_db_messages);

    st = listen_on(s, opts->listen, err, err_len);
    if (st != TDM_OK)
        goto err_loop;
    if (opts->ready_file && *opts->ready_file) {
        st = write_ready_file(opts->ready_file, s->port, err, err_len);
        if (st != TDM_OK)
            goto err_loop;
    }
    /* --alert-webhook (a bad URL refuses to start) */
    if (opts->alert_webhook && *opts->alert_webhook) {
        st = tdm_cp_webhook_start(opts->alert_webhook, 64, 5000, &s->webhook, err, err_len);
        if (st != TDM_OK)
            goto err_loop;
        tdm_cp_alerts_hook(s->alerts, tdm_cp_webhook_hook, s->webhook);
    }
    tdm_cp_db_opts_t dbo = opts->db;
    dbo.reply_to = &s->db_rx;
    st = tdm_cp_db_start(&dbo, &s->db, err, err_len);
    if (st != TDM_OK)
        goto err_loop;
    /* worker groups (supervisor, actions, router); nothing queued on the DB yet */
    tdm_cp_act_opts_t ao = opts->act;
    ao.state_dir = opts->state_dir;
    ao.pg_dsn = opts->db.dsn;
    ao.admin_token = s->admin_token;
    ao.tandemd_port = s->port;
    tdm_cp_act_env_t env = {&s->rings, s->detect, s->alerts, &s->findings, s->db, s->mq};
    st = tdm_cp_act_init(&env, &ao, &s->act, err, err_len);
    if (st != TDM_OK) {
        tdm_cp_db_stop(s->db);
        goto err_loop;
    }
    /* alerts go to the alerts table (and the webhook) as they open and resolve */
    tdm_cp_alert_persist_start(s->db, tdm_time_wall_us());
    tdm_cp_alerts_hook(s->alerts, tdm_cp_alert_persist_hook, s->db);
    submit_token_load(s);
    if (sd_watchdog_enabled(0, &s->watchdog_usec) <= 0)
        s->watchdog_usec = 0;
    sd_notifyf(0, "STATUS=listening on port %d, waiting for the database", s->port);
    tdm_info(TDM_SUB_CP, "msg=\"listening\" port=%d", s->port);
    return TDM_OK;

err_loop:
    tdm_cp_webhook_stop(s->webhook); /* NULL-safe */
    s->webhook = NULL;
    tdm_httpd_listener_close(&s->http);
    h2o_multithread_unregister_receiver(s->mq, &s->db_rx);
    h2o_multithread_destroy_queue(s->mq);
    h2o_context_dispose(&s->ctx);
    h2o_evloop_destroy(s->loop);
    h2o_config_dispose(&s->config);
err_free:
    tdm_cp_alerts_free(s->alerts);
    tdm_cp_detect_free(s->detect);
    tdm_cp_auth_free(&s->auth);
    tdm_cp_rings_free(&s->rings);
    tdm_cp_hist_free(&s->hist);
    return st;
}

static void loop_tick(tdm_cp_server_t *s)
{
    if (!s->db) /* shutting down (tdm_cp_server_free) */
        return;
    int up = atomic_load(&tdm_cp_db_stats(s->db)->up);
    if (!s->ready && s->tokens_loaded && up) {
        s->ready = 1;
        s->last_db_up = 1;
        tdm_info(TDM_SUB_CP, "msg=\"ready\" port=%d tokens=%zu", s->port, s->auth.n);
        sd_notifyf(0, "READY=1\nSTATUS=serving on port %d, database up", s->port);
    }
    uint64_t now = tdm_time_mono_us();
    /* the detector tick (it rate-limits itself to 100 ms) */
    if (tdm_cp_detect_tick(s->detect, &s->rings, now, &s->findings)) {
        tdm_cp_alerts_apply(s->alerts, &s->findings, now, tdm_time_wall_us());
        tdm_cp_alerts_mark_persist(s->alerts, &s->rings);
    }
    tdm_cp_act_tick(s->act, now); /* exits, remediation requests */
    tdm_cp_stream_tick(s, now);
    if (s->watchdog_usec && now - s->last_watchdog_us >= s->watchdog_usec / 2) {
        sd_notify(0, "WATCHDOG=1");
        s->last_watchdog_us = now;
    }
    if (s->ready && up != s->last_db_up) {
        const tdm_cp_db_stats_t *ds = tdm_cp_db_stats(s->db);
        if (up)
            sd_notifyf(0, "STATUS=serving on port %d, database up", s->port);
        else
            sd_notifyf(0,
                       "STATUS=serving on port %d, database DOWN: buffering ingest "
                       "(%llu batches in memory, %llu spooled)",
                       s->port, (unsigned long long)atomic_load(&ds->mem_batches),
                       (unsigned long long)atomic_load(&ds->spool_records));
        tdm_info(TDM_SUB_CP, "msg=\"database %s\"", up ? "up" : "down");
        s->last_db_up = up;
    }
}

void tdm_cp_server_run(tdm_cp_server_t *s, volatile int *stop)
{
    while (!*stop) {
        h2o_evloop_run(s->loop, 100);
        loop_tick(s);
    }
    sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}

/* No connection and no armed timer: h2o_context_dispose would assert otherwise. */
static int ctx_quiet(h2o_context_t *c)
{
    h2o_timeout_t *t[] = {&c->zero_timeout,
                          &c->one_sec_timeout,
                          &c->hundred_ms_timeout,
                          &c->handshake_timeout,
                          &c->http1.req_timeout,
                          &c->http2.idle_timeout,
                          &c->http2.graceful_shutdown_timeout,
                          &c->proxy.io_timeout};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (!h2o_linklist_is_empty(&t[i]->_entries))
            return 0;
    return h2o_linklist_is_empty(&c->http1._conns) && h2o_linklist_is_empty(&c->http2._conns);
}

void tdm_cp_server_free(tdm_cp_server_t *s)
{
    tdm_httpd_stop_accepting(&s->http);
    tdm_cp_act_stop(s->act); /* its last results are delivered by the runs below */
    tdm_cp_db_stop(s->db);
    s->db = NULL; /* requests that still arrive get 503 (on_req) instead of a freed queue */
    /* Deliver what the DB threads handed back (aborted jobs) so every job is freed, and let h2o
     * close its connections: idle ones at once, busy ones after their response. */
    tdm_cp_stream_close_all(s); /* open event streams end, so their connections can close */
    h2o_context_request_shutdown(&s->ctx);
    for (int i = 0; i < 5 || (i < 300 && !ctx_quiet(&s->ctx)); i++)
        h2o_evloop_run(s->loop, 10);
    if (!ctx_quiet(&s->ctx)) {
        /* h2o asserts when disposing a context with live connections or armed timers; the
         * process is exiting anyway */
        tdm_warn(TDM_SUB_CP, "msg=\"connections still open at exit; not disposing\"");
        return;
    }
    tdm_cp_act_free(s->act);
    tdm_httpd_listener_close(&s->http);
    h2o_multithread_unregister_receiver(s->mq, &s->db_rx);
    h2o_multithread_destroy_queue(s->mq);
    h2o_context_dispose(&s->ctx);
    h2o_evloop_destroy(s->loop);
    h2o_config_dispose(&s->config);
    tdm_cp_webhook_stop(s->webhook);
    tdm_cp_alerts_free(s->alerts);
    tdm_cp_detect_free(s->detect);
    tdm_cp_findings_free(&s->findings);
    tdm_cp_auth_free(&s->auth);
    tdm_cp_rings_free(&s->rings);
    tdm_cp_hist_free(&s->hist);
}
