/*
 * server.c — the worker's h2o side: listener (port 0, SO_REUSEADDR, ready file), dispatch through
 * tdm_api_routes[], credentials, docs/design.md §6 error bodies, and the loop with its 100 ms tick
 * that publishes the http thread's heartbeat (I3/I8) — a wedged loop stops the heartbeat, which is
 * the point of it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tdm/httpd.h>
#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/net.h>
#include <tdm/time.h>
#include <tdm/toolcall.h>

#include "dataplane/api/api_int.h"

/* clang-format off */
const tdm_api_route_t tdm_api_routes[] = {
    {"GET",  "/health",       TDM_API_AUTH_NONE,    tdm_api_h_health},
    {"GET",  "/ready",        TDM_API_AUTH_NONE,    tdm_api_h_ready},
    {"GET",  "/metrics",      TDM_API_AUTH_NONE,    tdm_api_h_metrics},
    {"POST", "/generate",     TDM_API_AUTH_API_KEY, tdm_api_h_generate},
    {"POST", "/v1/completions",      TDM_API_AUTH_API_KEY, tdm_api_h_completions},
    {"POST", "/v1/chat/completions", TDM_API_AUTH_API_KEY, tdm_api_h_chat},
    {"GET",  "/v1/models",           TDM_API_AUTH_API_KEY, tdm_api_h_models},
    {"POST", "/admin/drain",  TDM_API_AUTH_ADMIN,   tdm_api_h_drain},
    {"POST", "/admin/resume", TDM_API_AUTH_ADMIN,   tdm_api_h_resume},
    {"GET",  "/admin/config", TDM_API_AUTH_ADMIN,   tdm_api_h_config_get},
    {"POST", "/admin/config", TDM_API_AUTH_ADMIN,   tdm_api_h_config_post},
    {"POST", "/admin/faults", TDM_API_AUTH_ADMIN,   tdm_api_h_faults},
};
/* clang-format on */
const size_t tdm_api_routes_count = sizeof(tdm_api_routes) / sizeof(tdm_api_routes[0]);

static const char *const auth_names[] = {"none", "api-key", "admin"};
_Static_assert(sizeof(auth_names) / sizeof(auth_names[0]) == TDM_API_AUTH_MAX, "auth names");

const char *tdm_api_auth_name(tdm_api_auth_t a)
{
    return (unsigned)a < TDM_API_AUTH_MAX ? auth_names[a] : "?";
}

/* ---- responses ------------------------------------------------------------------------------ */

void tdm_api_send_text(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    tdm_httpd_send(req, status, ctype, body, len);
}

void tdm_api_send_json(h2o_req_t *req, int status, const char *body, size_t len)
{
    tdm_httpd_send_json(req, status, body, len);
}

static void send_error_obj(tdm_api_t *a, h2o_req_t *req, int status, json_t *err)
{
    a->http_errors++;
    tdm_httpd_send_error_obj(req, status, err);
}

void tdm_api_send_error(tdm_api_t *a, h2o_req_t *req, int status, const char *code,
                        const char *type, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    send_error_obj(a, req, status, tdm_json_error(type, code, msg));
}

void tdm_api_send_status(tdm_api_t *a, h2o_req_t *req, tdm_status_t st, const char *message)
{
    int http;
    json_t *e = tdm_json_error_status(st, message, &http);
    send_error_obj(a, req, http, e);
}

json_t *tdm_api_body_object(tdm_api_t *a, h2o_req_t *req)
{
    char err[256];
    json_t *o = NULL;
    if (!req->entity.base || req->entity.len == 0) {
        tdm_api_send_error(a, req, 400, "empty_body", "invalid_request_error",
                           "a JSON object body is required");
        return NULL;
    }
    if (tdm_json_parse(req->entity.base, req->entity.len, req->entity.len, &o, err, sizeof(err)) !=
        TDM_OK) {
        tdm_api_send_error(a, req, 400, "invalid_json", "invalid_request_error", "%s", err);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        tdm_api_send_error(a, req, 400, "invalid_json", "invalid_request_error",
                           "the body must be a JSON object");
        return NULL;
    }
    return o;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

/* 1 when the request carries `Authorization: Bearer <want>`; else answers 401 and returns 0. */
static int check_bearer(tdm_api_t *a, h2o_req_t *req, const char *want, size_t want_len)
{
    h2o_iovec_t got;
    int present = tdm_httpd_bearer(req, &got);
    if (got.base && tdm_httpd_token_equal(want, want_len, got.base, got.len))
        return 1;
    a->http_errors++;
    tdm_httpd_send_unauthorized(req,
                                present ? "invalid bearer token" : "a bearer token is required");
    return 0;
}

static int authorize(tdm_api_t *a, h2o_req_t *req, tdm_api_auth_t auth)
{
    switch (auth) {
    case TDM_API_AUTH_NONE:
        return 1;
    case TDM_API_AUTH_API_KEY: {
        const char *key = a->o.cfg->api_key;
        if (!key || !*key)
            return 1;
        return check_bearer(a, req, key, strlen(key));
    }
    case TDM_API_AUTH_ADMIN:
        if (a->admin_token_len == 0) {
            tdm_api_send_error(a, req, 403, "admin_disabled", "permission_error",
                               "the admin API is disabled (no --admin-token-file)");
            return 0;
        }
        return check_bearer(a, req, a->admin_token, a->admin_token_len);
    default:
        return 0;
    }
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    tdm_api_t *a = tdm_httpd_self(self);
    a->http_requests++;
    tdm_api_access_begin(a, req);
    h2o_iovec_t path = req->path_normalized;
    const tdm_api_route_t *route = NULL;
    int path_found = 0;
    for (size_t i = 0; i < tdm_api_routes_count; i++) {
        const tdm_api_route_t *r = &tdm_api_routes[i];
        if (!h2o_memis(path.base, path.len, r->path, strlen(r->path)))
            continue;
        path_found = 1;
        if (h2o_memis(req->method.base, req->method.len, r->method, strlen(r->method))) {
            route = r;
            break;
        }
    }
    if (!route) {
        if (path_found) {
            char allow[64] = "";
            for (size_t i = 0; i < tdm_api_routes_count; i++)
                if (h2o_memis(path.base, path.len, tdm_api_routes[i].path,
                              strlen(tdm_api_routes[i].path)))
                    snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s",
                             allow[0] ? ", " : "", tdm_api_routes[i].method);
            h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL,
                           h2o_strdup(&req->pool, allow, SIZE_MAX).base, strlen(allow));
            tdm_api_send_error(a, req, 405, "method_not_allowed", "invalid_request_error",
                               "method %.*s not allowed on %.*s (allowed: %s)",
                               (int)req->method.len, req->method.base, (int)path.len, path.base,
                               allow);
        } else {
            tdm_api_send_error(a, req, 404, "not_found", "not_found_error", "no route %.*s",
                               (int)(path.len > 200 ? 200 : path.len), path.base);
        }
        return 0;
    }
    if (!authorize(a, req, route->auth))
        return 0;
    uint64_t max = (uint64_t)a->o.cfg->max_request_bytes;
    if (req->entity.base && req->entity.len > max) {
        tdm_api_send_error(a, req, 413, "body_too_large", "invalid_request_error",
                           "request body of %zu bytes exceeds --max-request-bytes %llu",
                           req->entity.len, (unsigned long long)max);
        return 0;
    }
    route->handler(a, req);
    return 0;
}

/* ---- listener ------------------------------------------------------------------------------- */

/* Run the loop until `pred` is false or `us` passed. */
static void run_while(tdm_api_t *a, int (*pred)(const tdm_api_t *), uint64_t us)
{
    uint64_t deadline = tdm_time_mono_us() + us;
    while (pred(a) && tdm_time_mono_us() < deadline)
        h2o_evloop_run(a->loop, 10);
}

static int gens_open(const tdm_api_t *a)
{
    return a->n_gens > 0;
}

/* End every connection (at a stop the ones left — idle keep-alive connections, a client that
 * stopped reading — must be ended before the context goes, or h2o_context_dispose finds their
 * timeouts still armed and asserts); 1 when none is left. */
static int close_conns(tdm_api_t *a)
{
    return tdm_httpd_close_conns(&a->http, 2000000) && a->n_gens == 0;
}

static tdm_status_t listen_on(tdm_api_t *a, const char *host, int port, char *err, size_t err_len)
{
    char portstr[16], what[320];
    snprintf(portstr, sizeof(portstr), "%d", port);
    snprintf(what, sizeof(what), "--host %s --port %d", host, port);
    tdm_status_t st =
        tdm_httpd_listen(&a->http, a->loop, &a->accept_ctx, host, portstr, what, err, err_len);
    a->port = a->http.port;
    return st;
}

static tdm_status_t write_ready_file(const char *path, int http, int bootstrap, char *err,
                                     size_t err_len)
{
    char body[64];
    snprintf(body, sizeof(body), "{\"http\":%d,\"bootstrap\":%d}\n", http, bootstrap);
    return tdm_httpd_write_ready_file(path, body, err, err_len);
}

static tdm_status_t read_admin_token(tdm_api_t *a, const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len, "--admin-token-file %s: %s", path, strerror(errno));
        return TDM_ERR_IO;
    }
    char buf[TDM_API_TOKEN_MAX + 2];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (n == 0 || n > TDM_API_TOKEN_MAX || memchr(buf, '\0', n) || strpbrk(buf, " \t\r\n")) {
        snprintf(err, err_len,
                 "--admin-token-file %s: expected one token of 1..%d bytes without whitespace",
                 path, TDM_API_TOKEN_MAX);
        return TDM_ERR_FORMAT;
    }
    memcpy(a->admin_token, buf, n + 1);
    a->admin_token_len = n;
    return TDM_OK;
}

/* Tear down the receiver, context, loop and config that tdm_api_server_init set up (the
 * listener already closed). */
static void loop_dispose(tdm_api_t *a)
{
    tdm_httpd_listener_close(&a->http);
    h2o_multithread_unregister_receiver(a->mq, &a->gen_rx);
    h2o_multithread_destroy_queue(a->mq);
    h2o_context_dispose(&a->ctx); /* destroys ctx.queue */
    /* socket closes are deferred to the loop: let them happen before it goes */
    h2o_evloop_run(a->loop, 0);
    tdm_httpd_free_queue(a->mq);
    tdm_httpd_free_queue(a->ctx.queue);
    h2o_evloop_destroy(a->loop);
    h2o_config_dispose(&a->config);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

static const double ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                     1,     2.5,  5,     10,   30,  60};
static const double e2e_bounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
static const double itl_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                    0.1,   0.25,   0.5,   1,    2.5,   5};

void tdm_api_server_sample_stats(tdm_api_t *a, tdm_tm_sample_t *s)
{
    tdm_sched_stats_t ss;
    tdm_api_hist_snap_t ttft, itl;
    tdm_sched_stats(a->o.sched, &ss);
    s->tokens_out = ss.tokens_generated;
    s->requests_done = ss.requests_finished;
    s->kv_pages_total = ss.pages_total;
    s->kv_pages_used = ss.pages_total > ss.pages_free ? ss.pages_total - ss.pages_free : 0;
    /* the HiCache host tier (0 without one) and its CORRUPTION evidence (load checksum
     * mismatches, poison reads, gate bypasses) */
    s->host_pages_used = ss.hicache_on ? ss.hicache.host_pages_used : 0;
    s->host_pages_total = ss.hicache_on ? ss.hicache.host_pages_total : 0;
    s->corruption_total = ss.corruption_events;
    tdm_api_hist_snap(&a->ttft, &ttft);
    tdm_api_hist_snap(&a->itl, &itl);
    uint64_t q[4] = {tdm_api_hist_quantile_us(&a->ttft, &a->ttft_prev, &ttft, 0.5),
                     tdm_api_hist_quantile_us(&a->ttft, &a->ttft_prev, &ttft, 0.99),
                     tdm_api_hist_quantile_us(&a->itl, &a->itl_prev, &itl, 0.5),
                     tdm_api_hist_quantile_us(&a->itl, &a->itl_prev, &itl, 0.99)};
    for (int i = 0; i < 4; i++)
        q[i] = q[i] > UINT32_MAX ? UINT32_MAX : q[i];
    s->ttft_p50_us = (uint32_t)q[0];
    s->ttft_p99_us = (uint32_t)q[1];
    s->itl_p50_us = (uint32_t)q[2];
    s->itl_p99_us = (uint32_t)q[3];
    a->ttft_prev = ttft;
    a->itl_prev = itl;
}

tdm_status_t tdm_api_server_init(const tdm_api_opts_t *o, tdm_api_t **ret, char *err,
                                 size_t err_len)
{
    tdm_status_t st;
    if (!o || !o->cfg || !o->sched || !o->page || o->rank >= o->page->n_ranks) {
        snprintf(err, err_len, "tdm_api_init: cfg, sched and page are required");
        return TDM_ERR_INVAL;
    }
    /* h2o writes with writev(2): a client that went away would kill us with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    tdm_api_t *a = tdm_calloc(1, sizeof(*a));
    a->o = *o;
    a->started_us = tdm_time_wall_us();
    atomic_store(&a->health_timeout_us, (uint64_t)(o->cfg->health_progress_timeout * 1e6));
    h2o_linklist_init_anchor(&a->gens);
    tdm_api_hist_init(&a->ttft, ttft_bounds, sizeof(ttft_bounds) / sizeof(ttft_bounds[0]));
    tdm_api_hist_init(&a->itl, itl_bounds, sizeof(itl_bounds) / sizeof(itl_bounds[0]));
    tdm_api_hist_init(&a->e2e, e2e_bounds, sizeof(e2e_bounds) / sizeof(e2e_bounds[0]));
    tdm_api_hist_init(&a->queue, ttft_bounds, sizeof(ttft_bounds) / sizeof(ttft_bounds[0]));
    a->oai.tok = o->tok;
    a->oai.chat = o->chat;
    a->oai.model_name = o->cfg->served_model_name && *o->cfg->served_model_name
                            ? o->cfg->served_model_name
                            : o->cfg->model_path;
    a->oai.max_context = o->max_context;
    a->oai.vocab = o->tok ? tdm_tok_vocab_size(o->tok) : 0;
    a->oai.tool_parser = TDM_TC_NONE;
    if (o->cfg->tool_call_parser && strcmp(o->cfg->tool_call_parser, "auto") != 0)
        (void)tdm_tc_format_parse(o->cfg->tool_call_parser, &a->oai.tool_parser);
    else if (o->chat)
        a->oai.tool_parser = tdm_tc_format_detect(tdm_chat_template_text(o->chat));
    if (o->cfg->admin_token_file && *o->cfg->admin_token_file)
        TDM_CHECK_GOTO(read_admin_token(a, o->cfg->admin_token_file, err, err_len), st, err_free);

    /* h2o answers bodies over its own limit with a plain-text 413 before we see them; keep its
     * limit well above ours so that bodies near --max-request-bytes get our JSON 413. Bodies
     * past 2× the limit (+64 KiB) still get h2o's 413, at the headers (the lingering close of
     * tdm/httpd.h lets the client read it): we never buffer more than that. */
    uint64_t max = (uint64_t)o->cfg->max_request_bytes;
    h2o_pathconf_t *pc = tdm_httpd_config(&a->config, (size_t)(2 * max + (64u << 10)), on_req, a);
    tdm_api_access_register(a, pc);
    a->loop = tdm_httpd_loop(&a->config, &a->ctx, &a->accept_ctx);
    a->mq = h2o_multithread_create_queue(a->loop);
    h2o_multithread_register_receiver(a->mq, &a->gen_rx, tdm_api_gen_on_messages);

    int port = tdm_worker_config_http_port(o->cfg);
    TDM_CHECK_GOTO(listen_on(a, o->cfg->host, port, err, err_len), st, err_loop);
    if (o->cfg->ready_file && *o->cfg->ready_file)
        TDM_CHECK_GOTO(
            write_ready_file(o->cfg->ready_file, a->port, o->bootstrap_port, err, err_len), st,
            err_loop);
    tdm_progress_heartbeat(&o->page->slot[o->rank], TDM_HB_HTTP, tdm_time_mono_us());
    tdm_info(TDM_SUB_API, "msg=\"listening\" host=%s port=%d", o->cfg->host, a->port);
    *ret = a;
    return TDM_OK;

err_loop:
    loop_dispose(a);
err_free:
    tdm_free(a);
    return st;
}

int tdm_api_server_port(const tdm_api_t *a)
{
    return a->port;
}

void tdm_api_server_run(tdm_api_t *a)
{
    tdm_progress_slot_t *slot = &a->o.page->slot[a->o.rank];
    while (!atomic_load(&a->stop)) {
        h2o_evloop_run(a->loop, 100);
        uint64_t now = tdm_time_mono_us();
        tdm_progress_heartbeat(slot, TDM_HB_HTTP, now);
        tdm_api_openai_tick(a, now);
        tdm_api_gen_check_clients(a);
        tdm_api_gen_check_progress(a, now);
    }
}

void tdm_api_server_stop(tdm_api_t *a)
{
    atomic_store(&a->stop, 1);
}

void tdm_api_server_free(tdm_api_t *a)
{
    if (!a)
        return;
    tdm_httpd_stop_accepting(&a->http);
    /* Every open request must see its final scheduler event before its context is freed, and
     * its client the end of its stream (an error event, then [DONE]) before the sockets go. */
    tdm_api_gen_abort_all(a);
    run_while(a, gens_open, 5000000);
    int closed = close_conns(a);
    if (!closed)
        tdm_err(TDM_SUB_API, "msg=\"connections still open at shutdown\" requests=%zu conns=%zu",
                a->n_gens, a->http.n_conns);
    /* clear the heartbeat: the thread is gone on purpose, not stale */
    atomic_store(&a->o.page->slot[a->o.rank].heartbeat_us[TDM_HB_HTTP], 0);
    if (!closed) {
        /* h2o_context_dispose would assert on the connections' timers: the process is exiting,
         * so the context is left to it rather than aborting the stop */
        tdm_api_openai_fini(a);
        return;
    }
    loop_dispose(a);
    tdm_api_openai_fini(a);
    tdm_free(a);
}
