/*
 * controlplane/http/cp_server.h — tandemd's HTTP side: the h2o loop, the route table, the glue that
 * turns database jobs back into responses.
 *
 * Every route is one row of tdm_cp_routes[] (routes.c: method, path, role, body limit, handler);
 * the dispatcher matches it, enforces the body limit and the role (no token → 401, too weak → 403),
 * and calls the handler on the loop thread. A handler either answers at once (health, ring reads)
 * or hands a job to the database threads (tdm_cp_server_submit) and answers when it comes back —
 * no handler ever blocks on the database. If the client goes away meanwhile the reply is dropped.
 * `tandemd --print-routes` prints the table (the auth test walks it).
 *
 * Errors are {"error":{"code","message","type"}} with a proper status (docs/design.md §6).
 * Everything here runs on the loop thread.
 */
#ifndef TDM_CP_SERVER_H
#define TDM_CP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <h2o.h>

#include <tdm/httpd.h>
#include <tdm/status.h>

#include "controlplane/act/act.h"      /* actions, supervisor, router */
#include "controlplane/detect/alert.h" /* detectors + alert store */
#include "controlplane/http/auth.h"
#include "controlplane/store/buf.h"
#include "controlplane/store/db.h"
#include "controlplane/store/hist.h"
#include "controlplane/store/ring.h"

#define TDM_CP_MAX_ARGS 4
#define TDM_CP_BODY_SMALL (64u << 10)
#define TDM_CP_BODY_TELEMETRY (4u << 20) /* tdm_tm_limits_t default */

typedef struct tdm_cp_server tdm_cp_server_t;

typedef struct tdm_cp_args {
    int n;
    h2o_iovec_t v[TDM_CP_MAX_ARGS]; /* path captures, in order */
} tdm_cp_args_t;

typedef void (*tdm_cp_handler_fn)(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                                  const tdm_cp_token_t *who);

typedef struct tdm_cp_route {
    const char *method;
    const char *path; /* "/api/v1/ranks/{instance_id}/{rank}/history" */
    tdm_cp_role_t role;
    size_t max_body;
    tdm_cp_handler_fn handler;
} tdm_cp_route_t;

extern const tdm_cp_route_t tdm_cp_routes[];
extern const size_t tdm_cp_routes_count;

typedef struct tdm_cp_server_opts {
    const char *listen; /* host:port */
    const char *ready_file;
    const char *state_dir;
    const char *alert_webhook; /* "" or NULL: no webhook */
    const char *alert_policy;  /* "CLASS=notify|auto,..." or "all=auto"; "" or NULL: notify */
    tdm_cp_db_opts_t db;
    /* worker groups (groups_config, worker_bin, canary/start/drain timing); the
     * server fills in state_dir, the DSN, its port and admin token */
    tdm_cp_act_opts_t act;
} tdm_cp_server_opts_t;

struct tdm_cp_server {
    h2o_globalconf_t config;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_evloop_t *loop;
    tdm_httpd_listener_t http; /* listener, open connections, lingering closes */
    int port;
    h2o_multithread_queue_t *mq;
    h2o_multithread_receiver_t db_rx;
    tdm_cp_db_t *db;
    tdm_cp_rings_t rings;
    /* the recent persisted samples per rank: history reads it covers skip the database */
    tdm_cp_hist_t hist;
    uint64_t hist_spool_replays; /* stats.spool_replayed when the cache last saw it */
    /* cached reads being fetched: requests that miss wait on the one query (rest_reads.c) */
    struct tdm_cp_flight {
        tdm_cp_server_t *srv;
        int busy;
        uint64_t gen;
        char key[TDM_CP_DB_CACHE_KEY];
        h2o_linklist_t waiters;
    } flights[TDM_CP_DB_CACHE];
    /* detectors over `rings`, ticked from loop_tick every 100 ms (detect.h, alert.h) */
    tdm_cp_detect_t *detect;
    tdm_cp_alerts_t *alerts;
    tdm_cp_findings_t findings;
    tdm_cp_webhook_t *webhook;
    tdm_cp_act_t *act;            /* groups, actions, router view */
    struct tdm_cp_stream *stream; /* GET /api/v1/stream subscribers (stream.h); NULL: none yet */
    tdm_cp_auth_t auth;
    char admin_token[TDM_CP_TOKEN_LEN + 1];
    int tokens_loaded; /* the token cache holds the database's tokens */
    int ready;         /* tokens loaded and both connections up: READY=1 sent */
    int last_db_up;    /* for STATUS= transitions */
    uint64_t started_us;
    uint64_t last_watchdog_us, watchdog_usec;
    /* counters for /metrics */
    uint64_t http_requests, http_errors;
    uint64_t v1_clients_gone; /* /v1 requests whose client left mid-response (v1_router.c) */
    uint64_t ingest_received, ingest_rejected, samples_received, events_received;
};

tdm_status_t tdm_cp_server_init(tdm_cp_server_t *s, const tdm_cp_server_opts_t *opts, char *err,
                                size_t err_len);
/* Run until *stop becomes nonzero (a signal handler sets it). */
/* Keep the history cache honest about rows the spool replayed behind it (loop thread). */
void tdm_cp_hist_sync(tdm_cp_server_t *s);

void tdm_cp_server_run(tdm_cp_server_t *s, volatile int *stop);
void tdm_cp_server_free(tdm_cp_server_t *s);

/* Responses: tdm_httpd_send_json / tdm_httpd_send_error (tdm/httpd.h). */

/* Hand `job` to the query thread; `job->done` runs later on the loop with job->ctx pointing at a
 * tdm_cp_pending_t (or NULL when the request is gone). */
typedef struct tdm_cp_pending {
    h2o_req_t *req;
    tdm_cp_job_t *job;
    tdm_cp_server_t *srv;
    char actor[TDM_CP_TOKEN_NAME_MAX];
} tdm_cp_pending_t;
tdm_cp_job_t *tdm_cp_server_job(tdm_cp_server_t *s, h2o_req_t *req, const char *sql,
                                tdm_cp_job_done_fn done, const tdm_cp_token_t *who);
/* Done callback for jobs whose result is the JSON body (NULL result → 404 when `not_found_msg`
 * of the pending is used). Maps database errors to 503/500. */
void tdm_cp_job_reply_json(tdm_cp_job_t *job);
/* Common prologue of done callbacks: the live request or NULL (then the job is freed). */
h2o_req_t *tdm_cp_job_req(tdm_cp_job_t *job);
/* Send the error matching a failed job. */
void tdm_cp_job_send_error(h2o_req_t *req, const tdm_cp_job_t *job);

/* Query string: value of `key` decoded into buf (NUL-terminated); 1 if present. */
int tdm_cp_query_get(h2o_req_t *req, const char *key, char *buf, size_t len);

/* A ring sample as the API's JSON object (/api/v1/ranks "latest", the event stream). */
void tdm_cp_sample_json(tdm_cp_buf_t *b, const tdm_cp_sample_t *x);

/* Telemetry v1 ingest (ingest.c). */
void tdm_cp_ingest_handle(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                          const tdm_cp_token_t *who);

#endif
