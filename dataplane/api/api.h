/*
 * dataplane/api/api.h — the leader's HTTP surface (h2o evloop): /health, /ready, /metrics,
 * /admin/..., and the minimal token-id POST /generate (docs/serving.md, docs/design.md §3 I8, §6,
 * docs/contracts.md §b/e/g).
 *
 * One thread (the "http" thread of docs/serving.md) runs the h2o loop; everything in this module
 * except tdm_api_server_stop() runs on it. The loop never waits on the scheduler:
 * submit/abort/drain/stats are the non-blocking calls of dataplane/sched/sched.h, and scheduler
 * callbacks (which run on the scheduler thread) only append to the request's token buffer under its
 * lock and wake the loop through an h2o_multithread receiver; h2o_send runs only on the loop.
 *
 * Routes are one C array, tdm_api_routes[] (method, path, auth, handler); the dispatcher answers
 * 404 for an unknown path, 405 for a known path with another method, 401/403 for missing or bad
 * credentials, 413 for a body over --max-request-bytes, and every error body is docs/design.md §6's
 * {"error":{"code","message","type"}}. h2o's own body limit is set above ours (see server.c) so
 * that our handler, not h2o, answers the 413 for bodies near the limit.
 *
 * /health (I8) is computed on every request from the shared progress page through
 * tdm_progress_healthy(); nothing is cached. The http thread publishes TDM_HB_HTTP in the page
 * from the loop's 100 ms tick.
 *
 * Lifetime: the scheduler and the progress page must outlive the server. tdm_api_server_free()
 * aborts the requests still open and keeps the loop running (≤ 5 s) until their final scheduler
 * event arrived, so the scheduler must still be running when it is called.
 */
#ifndef TDM_API_H
#define TDM_API_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include <tdm/config.h>
#include <tdm/params.h>
#include <tdm/progress.h>
#include <tdm/status.h>
#include <tdm/telemetry.h>

#include "dataplane/sched/sched.h"

typedef struct tdm_api tdm_api_t;

/* A parsed POST /admin/faults body (docs/contracts.md §e). */
typedef struct tdm_api_fault {
    char name[32]; /* one of tdm_api_fault_names[] */
    uint32_t rank;
    uint32_t count;       /* how many times it fires (default 1); 0 = until disarmed */
    uint64_t after_iter;  /* fires only at iterations > after_iter */
    uint64_t duration_ms; /* stall faults */
    char thread[16];      /* kill_thread: a tdm_hb_thread_t name */
    int disarm;           /* {"name":..,"rank":..,"disarm":true} clears the point */
} tdm_api_fault_t;

extern const char *const tdm_api_fault_names[];
extern const size_t tdm_api_fault_names_count;

/* Arms a fault; returns TDM_OK, or an error with `err` set (→ 400/409 to the client). */
typedef tdm_status_t (*tdm_api_fault_fn)(void *ctx, const tdm_api_fault_t *f, char *err,
                                         size_t err_len);
/* A telemetry event (dataplane/report/report.h's tdm_report_event on the rank's reporter);
 * `data` is stolen. Called on the loop thread; must not block. */
typedef void (*tdm_api_event_fn)(void *ctx, const char *type, json_t *data);
/* Resident weight bytes of `rank` (0 = unknown: the series is left out). */
typedef uint64_t (*tdm_api_weight_fn)(void *ctx, uint16_t rank);

typedef struct tdm_api_opts {
    const tdm_worker_config_t *cfg; /* host, port, limits, api key, admin token file, ready file,
                                       fault switch, health timeout; must outlive the server */
    const tdm_params_t *params;     /* GET /admin/config with sources (NULL: values from cfg) */
    tdm_sched_t *sched;
    tdm_progress_page_t *page;
    uint16_t rank;              /* slot for the TDM_HB_HTTP heartbeat (the leader: 0) */
    int bootstrap_port;         /* written to the ready file (0 when this group has none) */
    tdm_api_fault_fn arm_fault; /* NULL: /admin/faults answers 501 */
    void *fault_ctx;
    tdm_api_weight_fn weight_bytes; /* NULL: no resident-weight series */
    void *weight_ctx;
    /* OpenAI endpoint (openai.c): all borrowed, must outlive the server */
    const struct tdm_tok *tok;            /* NULL: /v1/completions and chat answer 503 */
    const struct tdm_chat_template *chat; /* NULL: /v1/chat/completions answers 400 */
    uint32_t max_context;                 /* prompt + max_tokens must fit */
    tdm_api_event_fn event;               /* NULL: events are only logged */
    void *event_ctx;
    /* PD, both optional: /ready also needs pd_ready (decode: registered with its
     * prefill group; `why` is the 503 message), /metrics appends pd_metrics' series */
    int (*pd_ready)(void *ctx, char *why, size_t why_len);
    void (*pd_metrics)(void *ctx, FILE *f);
    void *pd_ctx;
} tdm_api_opts_t;

/* Ignores SIGPIPE process-wide (h2o writes with writev(2); a vanished client must not kill the
 * worker). Binds --host:--port (port 0 = any; SO_REUSEADDR), reads the admin token file, writes
 * {"http":N,"bootstrap":N} to --ready-file (temp file + rename) and returns a server ready for
 * tdm_api_server_run(). On failure `err` names the flag and the reason. */
tdm_status_t tdm_api_server_init(const tdm_api_opts_t *o, tdm_api_t **ret, char *err,
                                 size_t err_len);
/* The bound HTTP port. */
int tdm_api_server_port(const tdm_api_t *a);
/* Run the loop on the calling thread until tdm_api_server_stop(). */
void tdm_api_server_run(tdm_api_t *a);
/* Thread-safe and async-signal-safe: make tdm_api_server_run() return after its current tick. */
void tdm_api_server_stop(tdm_api_t *a);
void tdm_api_server_free(tdm_api_t *a);
/* The serving statistics of a telemetry sample (tdm/telemetry.h) from the scheduler and the
 * latency histograms: counters as they stand, TTFT/ITL p50/p99 over what was observed since the
 * previous call. One caller thread (the rank's reporter); leaves the corruption counter alone. */
void tdm_api_server_sample_stats(tdm_api_t *a, tdm_tm_sample_t *s);

/* The worker process builds the opts from its assembled worker and runs the server on a thread
 * of its own (dataplane/worker/http_hooks.c). */

/* ---- route table (tests enumerate it) ------------------------------------------------------ */

typedef enum tdm_api_auth {
    TDM_API_AUTH_NONE = 0,
    TDM_API_AUTH_API_KEY, /* Bearer --api-key when one is set */
    TDM_API_AUTH_ADMIN,   /* Bearer token of --admin-token-file; no file → 403 */
    TDM_API_AUTH_MAX
} tdm_api_auth_t;

const char *tdm_api_auth_name(tdm_api_auth_t a);

struct st_h2o_req_t;
typedef struct tdm_api_route {
    const char *method;
    const char *path;
    tdm_api_auth_t auth;
    void (*handler)(tdm_api_t *a, struct st_h2o_req_t *req);
} tdm_api_route_t;

extern const tdm_api_route_t tdm_api_routes[];
extern const size_t tdm_api_routes_count;

/* ---- metrics (metrics.c) ------------------------------------------------------------------- */

#define TDM_API_HIST_BUCKETS 16

/* A fixed-bucket latency histogram, lock-free (relaxed atomics): observed from the scheduler's
 * callbacks, rendered by the loop. Bounds are in seconds, ascending; +Inf is implicit. */
typedef struct tdm_api_hist {
    const double *bounds;
    size_t n_bounds; /* <= TDM_API_HIST_BUCKETS */
    _Atomic uint64_t bucket[TDM_API_HIST_BUCKETS + 1];
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
} tdm_api_hist_t;

void tdm_api_hist_init(tdm_api_hist_t *h, const double *bounds, size_t n_bounds);
void tdm_api_hist_observe_us(tdm_api_hist_t *h, uint64_t us);

/* The bucket counts at one moment, so quantiles can be taken over the observations between two
 * snapshots (the telemetry interval). */
typedef struct tdm_api_hist_snap {
    uint64_t bucket[TDM_API_HIST_BUCKETS + 1];
} tdm_api_hist_snap_t;

void tdm_api_hist_snap(const tdm_api_hist_t *h, tdm_api_hist_snap_t *ret);
/* The q-quantile (0 < q <= 1), in µs, of the observations counted in `now` and not in `prev`,
 * linearly interpolated inside its bucket as Prometheus' histogram_quantile does (the first
 * bucket from 0; the +Inf bucket answers the largest bound); 0 when there are none. */
uint64_t tdm_api_hist_quantile_us(const tdm_api_hist_t *h, const tdm_api_hist_snap_t *prev,
                                  const tdm_api_hist_snap_t *now, double q);

/* The histogram as a Prometheus family (tdm_prom_hist: cumulative buckets, +Inf, _sum, _count). */
void tdm_api_hist_write(FILE *f, const char *name, const char *help, const tdm_api_hist_t *h);

#endif
