/*
 * test-api.c — the worker's HTTP surface (dataplane/api) on a real h2o loop, driven by raw-socket
 * clients, against the in-test scheduler of fakesched.h in its generated mode: a thread that
 * emits one deterministic token per request every few ms from its own thread (so callbacks really
 * cross threads), honours aborts with FINISH(ABORT), and can be told to fail or refuse.
 *
 * Covers: the route table; ready file; /health computed from the page on every request; /ready;
 * error objects for 404/405/400/401/403/413/429/5xx; /generate whole and SSE; a client that leaves
 * mid-stream gets its request aborted; /admin drain, config, faults; /metrics format; the http
 * thread's heartbeat.
 */
#include "config.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include <tdm/json.h>
#include <tdm/time.h>

#include "api-testutil.h"
#include "dataplane/api/api_int.h"
#include "fakesched.h"
#include "tap.h"

/* ---- fixture -------------------------------------------------------------------------------- */

static tdm_sched_t sched;
static tdm_progress_page_t *page;
static tdm_api_t *api;
static int port;
static tdm_api_fault_t last_fault;
static int faults_armed;

static tdm_status_t arm_fault(void *ctx, const tdm_api_fault_t *f, char *err, size_t err_len)
{
    (void)ctx;
    if (strcmp(f->name, "flip_kv_bits") == 0) {
        snprintf(err, err_len, "flip_kv_bits needs a transfer path");
        return TDM_ERR_UNSUPPORTED;
    }
    last_fault = *f;
    faults_armed++;
    return TDM_OK;
}

static uint64_t weight_bytes(void *ctx, uint16_t rank)
{
    (void)ctx;
    return 1000u + rank;
}

#define AUTH_ADMIN "Authorization: Bearer s3cret-admin\r\n"
#define AUTH_KEY "Authorization: Bearer k3y\r\n"

static json_t *body_json(const http_resp_t *r)
{
    return json_loadb(r->body, r->body_len, 0, NULL);
}

/* The status and the docs/design.md §6 error object with this code. */
static void is_error(const http_resp_t *r, int status, const char *code, const char *what)
{
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    const char *c = json_string_value(json_object_get(e, "code"));
    int shape = json_is_object(e) && json_is_string(json_object_get(e, "message")) &&
                json_is_string(json_object_get(e, "type")) && c && json_object_size(e) == 3;
    ok(r->status == status && shape && strcmp(c, code) == 0, "%s → %d %s", what, status, code);
    if (r->status != status || !shape || strcmp(c ? c : "", code) != 0)
        diag("  got %d %s", r->status, r->body ? r->body : "(none)");
    json_decref(j);
}

/* One request, answered with this status and error object. */
static void req_is_error(const char *method, const char *path, const char *extra, const char *body,
                         int status, const char *code, const char *what)
{
    http_resp_t r;
    http_do(port, method, path, extra, body, &r);
    is_error(&r, status, code, what);
    http_resp_free(&r);
}

static void test_routes(void)
{
    int dup = 0, admin_ok = 1, open_ok = 1;
    for (size_t i = 0; i < tdm_api_routes_count; i++) {
        const tdm_api_route_t *r = &tdm_api_routes[i];
        for (size_t k = i + 1; k < tdm_api_routes_count; k++)
            dup |= !strcmp(r->method, tdm_api_routes[k].method) &&
                   !strcmp(r->path, tdm_api_routes[k].path);
        if (!strncmp(r->path, "/admin/", 7))
            admin_ok &= r->auth == TDM_API_AUTH_ADMIN;
        if (!strcmp(r->path, "/health") || !strcmp(r->path, "/ready") ||
            !strcmp(r->path, "/metrics"))
            open_ok &= r->auth == TDM_API_AUTH_NONE;
    }
    ok(tdm_api_routes_count >= 8 && !dup, "route table: %zu unique routes", tdm_api_routes_count);
    ok(admin_ok, "every /admin route needs the admin token");
    ok(open_ok, "/health, /ready and /metrics need no credentials (routers, probes)");
}

static void test_health(void)
{
    http_resp_t r;
    http_do(port, "GET", "/health", "", NULL, &r);
    ok(r.status == 200 && strcmp(r.body, "ok\n") == 0, "/health 200 ok on an idle page");
    http_resp_free(&r);

    /* work pending and rank 0 stuck inside an allreduce for 10 s */
    uint64_t now = tdm_time_mono_us();
    tdm_progress_slot_t *s0 = &page->slot[0];
    tdm_progress_write_begin(s0);
    s0->rec.pending = 1;
    s0->rec.iter = 812;
    s0->rec.progress_us = now - 10000000;
    s0->rec.in_coll_op = TDM_COLL_ALLREDUCE;
    s0->rec.in_coll_seq = 4410;
    s0->rec.in_coll_since_us = now - 9000000;
    tdm_progress_write_end(s0);
    http_do(port, "GET", "/health", "", NULL, &r);
    is_error(&r, 503, "unhealthy", "/health with a stalled rank");
    ok(strstr(r.body, "rank 0 no progress") && strstr(r.body, "allreduce"),
       "/health names the rank and the collective: %s", r.body);
    http_resp_free(&r);
    http_do(port, "GET", "/ready", "", NULL, &r);
    ok(r.status == 503, "/ready is 503 while unhealthy");
    http_resp_free(&r);

    /* the verdict follows the page at once: never cached */
    tdm_progress_write_begin(s0);
    s0->rec.progress_us = tdm_time_mono_us();
    s0->rec.in_coll_op = TDM_COLL_NONE;
    tdm_progress_write_end(s0);
    http_do(port, "GET", "/health", "", NULL, &r);
    ok(r.status == 200, "/health recovers on the next request once the rank advanced");
    http_resp_free(&r);

    atomic_store(&page->dead_rank_plus1, 2);
    http_do(port, "GET", "/health", "", NULL, &r);
    is_error(&r, 503, "unhealthy", "/health with a dead rank");
    ok(strstr(r.body, "rank 1 exited") != NULL, "reason names the dead rank");
    http_resp_free(&r);
    atomic_store(&page->dead_rank_plus1, 0);
    tdm_progress_write_begin(s0);
    s0->rec.pending = 0;
    tdm_progress_write_end(s0);

    req_is_error("GET", "/ready", "", NULL, 503, "not_loaded", "/ready before the model is loaded");
    atomic_store(&page->loaded, 1);
    http_do(port, "GET", "/ready", "", NULL, &r);
    ok(r.status == 200, "/ready 200 when loaded, healthy, not draining");
    http_resp_free(&r);
}

static void test_errors(void)
{
    http_resp_t r;
    char buf[128];
    req_is_error("GET", "/nope", "", NULL, 404, "not_found", "unknown route");
    http_do(port, "GET", "/generate", AUTH_KEY, NULL, &r);
    is_error(&r, 405, "method_not_allowed", "GET /generate");
    ok(http_header(&r, "allow", buf, sizeof(buf)) && strcmp(buf, "POST") == 0,
       "405 carries Allow: POST");
    http_resp_free(&r);
    req_is_error("POST", "/generate", AUTH_KEY, "{\"input_ids\":[1,2", 400, "invalid_json",
                 "truncated JSON");
    req_is_error("POST", "/generate", AUTH_KEY, "[1,2,3]", 400, "invalid_json",
                 "a JSON array body");
    req_is_error("POST", "/generate", AUTH_KEY, "", 400, "empty_body", "no body");
    req_is_error("POST", "/generate", AUTH_KEY, "{\"input_ids\":[]}", 400, "invalid_request",
                 "empty input_ids");
    http_do(port, "POST", "/generate", AUTH_KEY, "{\"input_ids\":[1,-3]}", &r);
    is_error(&r, 400, "invalid_request", "negative token id");
    ok(strstr(r.body, "input_ids[1]") != NULL, "the message names input_ids[1]");
    http_resp_free(&r);
    req_is_error("POST", "/generate", AUTH_KEY, "{\"input_ids\":[1],\"bogus\":1}", 400,
                 "invalid_request", "unknown member");
    req_is_error("POST", "/generate", AUTH_KEY, "{\"input_ids\":[1],\"sampling\":{\"top_p\":1.5}}",
                 400, "invalid_request", "top_p out of range");
    http_do(port, "POST", "/generate", AUTH_KEY, "{\"input_ids\":[999998]}", &r);
    is_error(&r, 429, "queue_full", "queue full");
    ok(http_header(&r, "retry-after", buf, sizeof(buf)), "429 carries Retry-After");
    http_resp_free(&r);
    req_is_error("POST", "/generate", AUTH_KEY, "{\"input_ids\":[999999]}", 504, "timeout",
                 "a request ending in ERROR(TIMEOUT)");

    /* credentials */
    req_is_error("POST", "/generate", "", "{\"input_ids\":[1]}", 401, "unauthorized",
                 "/generate without the api key");
    req_is_error("POST", "/admin/drain", "Authorization: Bearer s3cret-admim\r\n", "", 401,
                 "unauthorized", "/admin with a wrong token");
    req_is_error("POST", "/admin/drain", AUTH_KEY, "", 401, "unauthorized",
                 "/admin with the api key instead of the admin token");

    /* body limit: ours answers in JSON just over it; h2o's own limit is far above */
    size_t lim = 4096;
    char *big = malloc(3 * lim + 64);
    int n = snprintf(big, 64, "{\"input_ids\":[1],\"pad\":\"");
    memset(big + n, 'x', lim);
    strcpy(big + n + lim, "\"}");
    req_is_error("POST", "/generate", AUTH_KEY, big, 413, "body_too_large",
                 "body just over --max-request-bytes");
    memset(big + n, 'x', 3 * lim);
    strcpy(big + n + 3 * lim, "\"}");
    http_do(port, "POST", "/generate", AUTH_KEY, big, &r);
    ok(r.status == 413, "body far over the limit: 413 (h2o's own)");
    http_resp_free(&r);
    free(big);
}

static void test_generate(void)
{
    http_resp_t r;
    http_do(port, "POST", "/generate", AUTH_KEY,
            "{\"input_ids\":[5,6,7],\"max_new_tokens\":9,\"sampling\":{\"temperature\":0}}", &r);
    json_t *j = body_json(&r);
    json_t *ids = json_object_get(j, "output_ids");
    int same = json_array_size(ids) == 9;
    for (size_t i = 0; same && i < 9; i++)
        same = json_integer_value(json_array_get(ids, i)) == fake_token(18, (uint32_t)i);
    ok(r.status == 200 && same, "/generate returns the scheduler's 9 tokens in order");
    is_str(json_string_value(json_object_get(j, "finish_reason")), "length", "finish_reason");
    is_int(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 3,
           "usage.prompt_tokens");
    json_decref(j);
    http_resp_free(&r);

    /* SSE */
    http_do(port, "POST", "/generate", AUTH_KEY,
            "{\"input_ids\":[5,6,7],\"max_new_tokens\":12,\"stream\":true}", &r);
    char ct[64] = "";
    http_header(&r, "content-type", ct, sizeof(ct));
    int events = 0, in_order = 1;
    for (char *p = r.body; (p = strstr(p, "data: {\"index\":")); p++) {
        unsigned idx;
        int tok;
        if (sscanf(p, "data: {\"index\":%u,\"token_id\":%d}", &idx, &tok) != 2 ||
            idx != (unsigned)events || tok != fake_token(18, idx))
            in_order = 0;
        events++;
    }
    ok(r.status == 200 && strcmp(ct, "text/event-stream") == 0, "stream: 200 text/event-stream");
    ok(events == 12 && in_order, "stream: 12 token events, in order, same ids (%d)", events);
    ok(strstr(r.body, "\"finish_reason\":\"length\"") &&
           strstr(r.body, "data: [DONE]\n\n") == r.body + r.body_len - 14,
       "stream: finish event then [DONE] last");
    http_resp_free(&r);

    /* an error in the middle of a stream becomes an error event */
    http_do(port, "POST", "/generate", AUTH_KEY, "{\"input_ids\":[999999],\"stream\":true}", &r);
    ok(r.status == 200 && strstr(r.body, "data: {\"error\":") && strstr(r.body, "[DONE]"),
       "stream: ERROR becomes a data: {\"error\":..} event");
    http_resp_free(&r);

    /* 16 concurrent requests from 16 sockets: each gets its own sequence */
    int fds[16], good = 0;
    for (int i = 0; i < 16; i++) {
        char body[96];
        snprintf(body, sizeof(body), "{\"input_ids\":[%d],\"max_new_tokens\":20,\"stream\":%s}",
                 100 + i, i % 2 ? "true" : "false");
        fds[i] = http_connect(port);
        http_send_req(fds[i], "POST", "/generate", AUTH_KEY, body, strlen(body));
    }
    for (int i = 0; i < 16; i++) {
        http_read_resp(fds[i], 10000, &r);
        close(fds[i]);
        char want[64];
        snprintf(want, sizeof(want), i % 2 ? "\"index\":19,\"token_id\":%d" : ",%d]",
                 fake_token(100 + i, 19));
        good += r.status == 200 && strstr(r.body, want) != NULL;
        http_resp_free(&r);
    }
    is_int(good, 16, "16 concurrent requests (whole and streamed) all complete correctly");
}

static void test_disconnect(void)
{
    pthread_mutex_lock(&sched.mu);
    sched.token_delay_us = 5000;
    uint64_t aborts0 = sched.aborts_seen;
    pthread_mutex_unlock(&sched.mu);
    const char *body = "{\"input_ids\":[42],\"max_new_tokens\":100000,\"stream\":true}";
    int fd = http_connect(port);
    http_send_req(fd, "POST", "/generate", AUTH_KEY, body, strlen(body));
    char buf[8192];
    size_t len = 0;
    uint64_t deadline = tdm_time_mono_us() + 5000000;
    while (tdm_time_mono_us() < deadline && len < sizeof(buf) - 1) {
        ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "\"index\":5,"))
            break;
    }
    ok(strstr(buf, "\"index\":5,") != NULL, "stream running: 6 tokens received");
    close(fd);
    /* the next write fails; h2o stops the generator; we abort the request */
    deadline = tdm_time_mono_us() + 5000000;
    while (fake_active(&sched) > 0 && tdm_time_mono_us() < deadline)
        tdm_time_sleep_us(10000);
    pthread_mutex_lock(&sched.mu);
    uint64_t aborts = sched.aborts_seen - aborts0;
    sched.token_delay_us = 1000;
    pthread_mutex_unlock(&sched.mu);
    ok(aborts == 1 && fake_active(&sched) == 0,
       "client gone mid-stream → tdm_sched_abort, request ended (%llu aborts)",
       (unsigned long long)aborts);

    http_resp_t r;
    http_do(port, "POST", "/generate", AUTH_KEY, "{\"input_ids\":[5,6,7],\"max_new_tokens\":3}",
            &r);
    ok(r.status == 200 && strstr(r.body, "\"output_ids\""), "a request after that succeeds");
    http_resp_free(&r);
}

static void test_admin(void)
{
    http_resp_t r;
    http_do(port, "GET", "/admin/config", AUTH_ADMIN, NULL, &r);
    json_t *j = body_json(&r);
    json_t *v = json_object_get(json_object_get(json_object_get(j, "params"), "tp_size"), "value");
    ok(r.status == 200 && json_integer_value(v) == 2,
       "GET /admin/config shows the resolved config");
    ok(strstr(r.body, "s3cret") == NULL && strstr(r.body, "\"k3y\"") == NULL,
       "secrets are masked in /admin/config");
    json_decref(j);
    http_resp_free(&r);
    http_do(port, "POST", "/admin/config", AUTH_ADMIN, "{\"health_progress_timeout\":0.5}", &r);
    ok(r.status == 200 && atomic_load(&api->health_timeout_us) == 500000,
       "POST /admin/config changes health_progress_timeout at run time");
    http_resp_free(&r);
    req_is_error("POST", "/admin/config", AUTH_ADMIN, "{\"disable_overlap_schedule\":true}", 409,
                 "restart_required", "overlap is restart-time");
    req_is_error("POST", "/admin/config", AUTH_ADMIN, "{\"no_such\":1}", 400, "unknown_key",
                 "unknown tunable");
    req_is_error("POST", "/admin/config", AUTH_ADMIN, "{\"health_progress_timeout\":-1}", 400,
                 "invalid_value", "timeout out of range");
    http_do(port, "POST", "/admin/config", AUTH_ADMIN, "{\"health_progress_timeout\":3}", &r);
    http_resp_free(&r);

    http_do(port, "POST", "/admin/faults", AUTH_ADMIN,
            "{\"name\":\"stall_loop\",\"rank\":1,\"count\":2,\"after_iter\":10,"
            "\"duration_ms\":4000}",
            &r);
    ok(r.status == 200 && faults_armed == 1 && strcmp(last_fault.name, "stall_loop") == 0 &&
           last_fault.rank == 1 && last_fault.count == 2 && last_fault.after_iter == 10 &&
           last_fault.duration_ms == 4000,
       "POST /admin/faults arms the parsed fault");
    http_resp_free(&r);
    http_do(port, "POST", "/admin/faults", AUTH_ADMIN,
            "{\"name\":\"kill_thread\",\"rank\":0,\"thread\":\"reporter\"}", &r);
    ok(r.status == 200 && strcmp(last_fault.thread, "reporter") == 0 && last_fault.count == 1,
       "kill_thread{thread} parsed, count defaults to 1");
    http_resp_free(&r);
    req_is_error("POST", "/admin/faults", AUTH_ADMIN, "{\"name\":\"melt\",\"rank\":0}", 400,
                 "invalid_fault", "unknown fault point");
    req_is_error("POST", "/admin/faults", AUTH_ADMIN, "{\"name\":\"stall_loop\",\"rank\":2}", 400,
                 "invalid_fault", "rank beyond the group");
    req_is_error("POST", "/admin/faults", AUTH_ADMIN, "{\"name\":\"flip_kv_bits\",\"rank\":0}", 501,
                 "unsupported", "fault table refuses");
    ((tdm_worker_config_t *)api->o.cfg)->enable_fault_injection = 0;
    req_is_error("POST", "/admin/faults", AUTH_ADMIN, "{\"name\":\"stall_loop\",\"rank\":0}", 403,
                 "faults_disabled", "faults without --enable-fault-injection");
    ok(faults_armed == 2, "refused faults were not armed");
}

/* Prometheus text format: families announced by HELP+TYPE, sample lines well formed,
 * histogram buckets cumulative with +Inf == _count. */
static void test_metrics(void)
{
    http_resp_t r;
    http_do(port, "GET", "/metrics", "", NULL, &r);
    char ct[96] = "";
    http_header(&r, "content-type", ct, sizeof(ct));
    ok(r.status == 200 && strncmp(ct, "text/plain; version=0.0.4", 25) == 0,
       "/metrics 200 in the text exposition format");
    int bad = 0, samples = 0;
    char family[128] = "", type[16] = "";
    uint64_t last_bucket = 0, inf = UINT64_MAX, count = 0;
    int monotone = 1, hist_seen = 0;
    char *save = NULL;
    for (char *line = strtok_r(r.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "# HELP ", 7)) {
            sscanf(line + 7, "%127s", family);
            last_bucket = 0;
            continue;
        }
        if (!strncmp(line, "# TYPE ", 7)) {
            char f2[128];
            if (sscanf(line + 7, "%127s %15s", f2, type) != 2 || strcmp(f2, family) != 0)
                bad++;
            continue;
        }
        char name[160];
        double val;
        if (sscanf(line, "%159[a-z0-9_]", name) != 1 || strncmp(name, "tandem_", 7) != 0 ||
            strncmp(name, family, strlen(family)) != 0) {
            bad++;
            diag("bad line: %s", line);
            continue;
        }
        const char *sp = strrchr(line, ' ');
        char *end;
        val = strtod(sp + 1, &end);
        if (*end)
            bad++;
        samples++;
        if (!strcmp(family, "tandem_ttft_seconds")) {
            hist_seen = 1;
            if (strstr(line, "_bucket{")) {
                monotone &= (uint64_t)val >= last_bucket;
                last_bucket = (uint64_t)val;
                if (strstr(line, "le=\"+Inf\""))
                    inf = (uint64_t)val;
            } else if (strstr(line, "_count ")) {
                count = (uint64_t)val;
            }
        }
    }
    ok(bad == 0 && samples > 30, "every line is HELP/TYPE or a tandem_ sample (%d samples)",
       samples);
    ok(hist_seen && monotone && inf == count && count >= 20,
       "TTFT histogram: cumulative buckets, +Inf == _count == %llu", (unsigned long long)count);
    http_resp_free(&r);
    http_do(port, "GET", "/metrics", "", NULL, &r);
    ok(strstr(r.body, "tandem_rank_iter{rank=\"1\"} ") &&
           strstr(r.body, "tandem_resident_weight_bytes{rank=\"1\"} 1001") &&
           strstr(r.body, "tandem_kv_pages_capacity 64") &&
           strstr(r.body, "tandem_client_disconnects_total 1") &&
           strstr(r.body, "tandem_itl_seconds_bucket"),
       "per-rank iter, weight bytes, pages, disconnects and ITL are exported");
    http_resp_free(&r);
}

static void test_drain(void)
{
    http_resp_t r;
    http_do(port, "POST", "/admin/drain", AUTH_ADMIN, "", &r);
    json_t *j = body_json(&r);
    ok(r.status == 200 && json_is_true(json_object_get(j, "draining")) && sched.draining &&
           atomic_load(&page->draining),
       "POST /admin/drain drains the scheduler and marks the page");
    json_decref(j);
    http_resp_free(&r);
    req_is_error("GET", "/ready", "", NULL, 503, "draining", "/ready while draining");
    http_do(port, "GET", "/health", "", NULL, &r);
    ok(r.status == 200, "/health stays 200 while draining");
    http_resp_free(&r);
    req_is_error("POST", "/generate", AUTH_KEY, "{\"input_ids\":[1]}", 503, "unavailable",
                 "/generate while draining");
}

static void test_heartbeat(void)
{
    uint64_t a = atomic_load(&page->slot[0].heartbeat_us[TDM_HB_HTTP]);
    tdm_time_sleep_us(300000);
    uint64_t b = atomic_load(&page->slot[0].heartbeat_us[TDM_HB_HTTP]);
    ok(a > 0 && b > a && tdm_time_mono_us() - b < 250000,
       "the http thread's heartbeat advances while idle");
}

/* Window quantiles of a histogram: over the observations between two snapshots, interpolated in
 * their bucket as histogram_quantile does. */
static void test_hist_quantile(void)
{
    static const double b[] = {0.001, 0.01, 0.1};
    tdm_api_hist_t h;
    tdm_api_hist_snap_t s0, s1, s2;
    tdm_api_hist_init(&h, b, 3);
    tdm_api_hist_snap(&h, &s0);
    is_u64(tdm_api_hist_quantile_us(&h, &s0, &s0, 0.5), 0, "no observations: 0");
    for (int i = 0; i < 100; i++) /* 100 old ones at 50 ms, outside the next window */
        tdm_api_hist_observe_us(&h, 50000);
    tdm_api_hist_snap(&h, &s1);
    for (int i = 0; i < 90; i++)
        tdm_api_hist_observe_us(&h, 5000); /* (1 ms, 10 ms] */
    for (int i = 0; i < 10; i++)
        tdm_api_hist_observe_us(&h, 500000); /* +Inf */
    tdm_api_hist_snap(&h, &s2);
    is_u64(tdm_api_hist_quantile_us(&h, &s1, &s2, 0.5), 6000,
           "p50 of the window: 1 ms + 9 ms * 50/90 (the older observations do not count)");
    is_u64(tdm_api_hist_quantile_us(&h, &s1, &s2, 0.99), 100000,
           "p99 in the +Inf bucket: the largest bound");
    is_u64(tdm_api_hist_quantile_us(&h, &s0, &s1, 0.99), 99100, "p99 of the older window");
    is_u64(tdm_api_hist_quantile_us(&h, &s2, &s1, 0.5), 0, "a snapshot going back counts as none");
}

/* The telemetry sample's statistics from a serving API: counters, pool, window percentiles. */
static void test_sample_stats(void)
{
    tdm_tm_sample_t s;
    memset(&s, 0, sizeof(s));
    tdm_api_server_sample_stats(api, &s);
    tdm_sched_stats_t ss;
    tdm_sched_stats(&sched, &ss);
    ok(s.tokens_out == ss.tokens_generated && s.requests_done == ss.requests_finished &&
           s.kv_pages_total == ss.pages_total &&
           s.kv_pages_used == ss.pages_total - ss.pages_free &&
           s.host_pages_total == (ss.hicache_on ? ss.hicache.host_pages_total : 0) &&
           s.host_pages_used == (ss.hicache_on ? ss.hicache.host_pages_used : 0) &&
           s.corruption_total == ss.corruption_events,
       "counters and KV pool from the scheduler (%llu tokens, %llu requests)",
       (unsigned long long)s.tokens_out, (unsigned long long)s.requests_done);
    ok(s.ttft_p50_us > 0 && s.ttft_p99_us >= s.ttft_p50_us && s.itl_p99_us >= s.itl_p50_us,
       "TTFT p50 %u us, p99 %u us over what was served so far", s.ttft_p50_us, s.ttft_p99_us);
    memset(&s, 0, sizeof(s));
    tdm_api_server_sample_stats(api, &s);
    ok(s.ttft_p50_us == 0 && s.ttft_p99_us == 0 && s.itl_p99_us == 0,
       "the next interval, nothing new observed: percentiles 0");
}

static void *run_tests(void *arg)
{
    (void)arg;
    test_health();
    test_errors();
    test_generate();
    test_disconnect();
    test_admin();
    test_metrics();
    test_sample_stats();
    test_heartbeat();
    test_drain();
    tdm_api_server_stop(api);
    return NULL;
}

int main(void)
{
    char err[512] = "", dir[] = "/tmp/test-api-XXXXXX", ready[600], tok[600];
    tdm_worker_config_t cfg;
    tdm_params_t *params = NULL;
    if (!mkdtemp(dir))
        return 1;
    snprintf(ready, sizeof(ready), "%s/ready.json", dir);
    snprintf(tok, sizeof(tok), "%s/admin.token", dir);
    FILE *f = fopen(tok, "w");
    fputs("s3cret-admin\n", f);
    fclose(f);
    const char *argv[] = {"tandem-worker",
                          "--port",
                          "0",
                          "--host",
                          "127.0.0.1",
                          "--ready-file",
                          ready,
                          "--admin-token-file",
                          tok,
                          "--max-request-bytes",
                          "4096",
                          "--api-key",
                          "k3y",
                          "--enable-fault-injection",
                          "--tp-size",
                          "2",
                          NULL};
    if (tdm_params_init(&tdm_worker_config_table, &cfg, &params, err, sizeof(err)) != TDM_OK ||
        tdm_params_load(params, 16, (char *const *)argv, NULL, err, sizeof(err)) != TDM_OK) {
        printf("Bail out! params: %s\n", err);
        return 1;
    }
    fake_start(&sched, 0, 1000);
    tdm_progress_create_anon(2, 7, &page);

    test_routes();
    test_hist_quantile();
    tdm_api_opts_t o = {.cfg = &cfg,
                        .params = params,
                        .sched = &sched,
                        .page = page,
                        .arm_fault = arm_fault,
                        .weight_bytes = weight_bytes};
    tdm_status_t st = tdm_api_server_init(&o, &api, err, sizeof(err));
    if (!ok(st == TDM_OK, "tdm_api_init on port 0")) {
        diag("%s", err);
        return 1;
    }
    port = tdm_api_server_port(api);
    f = fopen(ready, "r");
    char rb[128] = "";
    if (f) {
        if (!fgets(rb, sizeof(rb), f))
            rb[0] = '\0';
        fclose(f);
    }
    char want[64];
    snprintf(want, sizeof(want), "{\"http\":%d,\"bootstrap\":0}\n", port);
    ok(port > 0 && strcmp(rb, want) == 0, "ready file %s", rb);

    /* a second server on the same explicit port fails with a message naming the flag */
    tdm_worker_config_t cfg2 = cfg;
    cfg2.port = port;
    cfg2.ready_file = "";
    tdm_api_t *api2 = NULL;
    o.cfg = &cfg2;
    st = tdm_api_server_init(&o, &api2, err, sizeof(err));
    ok(st == TDM_ERR_IO && strstr(err, "--port"), "port in use → error naming --port (%s)", err);
    o.cfg = &cfg;

    /* The loop runs on the main thread (h2o's per-thread recyclers stay reachable at exit);
     * the tests are the clients. */
    fake_serve(&sched, api, run_tests);
    tdm_progress_close(page);
    tdm_params_free(params);
    unlink(ready);
    unlink(tok);
    rmdir(dir);
    return done_testing();
}
