/*
 * dataplane/api/api_int.h — the server object shared by server.c (loop, dispatch, errors),
 * handlers.c (health, ready, metrics, admin) and generate.c (POST /generate, SSE). Everything
 * here is touched only on the loop thread, except the fields marked otherwise.
 */
#ifndef TDM_API_INT_H
#define TDM_API_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include <h2o.h>

#include <tdm/httpd.h>

#include "dataplane/api/api.h"
#include "dataplane/api/openai_int.h"

#define TDM_API_TOKEN_MAX 256
#define TDM_API_STATUS_MAX 600

typedef struct tdm_api_gen tdm_api_gen_t;

struct tdm_api {
    tdm_api_opts_t o;
    h2o_globalconf_t config;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_evloop_t *loop;
    tdm_httpd_listener_t http; /* listener, open connections, lingering closes */
    int port;
    h2o_multithread_queue_t *mq;
    h2o_multithread_receiver_t gen_rx; /* scheduler → loop: a generate request has news */
    _Atomic int stop;                  /* any thread */
    char admin_token[TDM_API_TOKEN_MAX + 1];
    size_t admin_token_len;             /* 0: /admin disabled */
    _Atomic uint64_t health_timeout_us; /* POST /admin/config may change it */
    uint64_t started_us;
    /* open /generate requests (loop thread) */
    h2o_linklist_t gens;
    size_t n_gens;
    /* metrics; histograms are observed on the scheduler thread */
    tdm_api_hist_t ttft, itl, e2e, queue;
    tdm_api_hist_snap_t ttft_prev, itl_prev; /* tdm_api_server_sample_stats' caller only */
    uint64_t http_requests, http_errors, generate_requests, client_disconnects;
    uint64_t faults_armed;
    uint64_t http_by_code[TDM_API_STATUS_MAX]; /* access.c, when a response ends */
    uint64_t request_seq;                      /* request ids we make */
    /* OpenAI endpoint (openai.c) */
    tdm_oai_ctx_t oai;
    uint64_t oai_requests[TDM_OAI_KIND_MAX];
    uint64_t dsml_responses, dsml_leaks; /* chat responses parsed for tool calls */
    uint32_t out_responses, out_leaks;   /* since the last output_stats event */
    json_t *out_samples;                 /* leaked responses since then (a few) */
    uint64_t out_last_us;
};

/* server.c */
void tdm_api_send_json(h2o_req_t *req, int status, const char *body, size_t len);
void tdm_api_send_text(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len);
void tdm_api_send_error(tdm_api_t *a, h2o_req_t *req, int status, const char *code,
                        const char *type, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The HTTP status and error object of a tdm_status_t from the scheduler or a parser. */
void tdm_api_send_status(tdm_api_t *a, h2o_req_t *req, tdm_status_t st, const char *message);
/* The request body as a JSON object, or NULL after answering 400. */
json_t *tdm_api_body_object(tdm_api_t *a, h2o_req_t *req);

/* handlers.c */
void tdm_api_h_health(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_ready(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_metrics(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_drain(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_resume(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_config_get(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_config_post(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_faults(tdm_api_t *a, h2o_req_t *req);

/* access.c: the request log line, X-Request-Id, responses by status code */
void tdm_api_access_register(tdm_api_t *a, h2o_pathconf_t *pc);
void tdm_api_access_begin(tdm_api_t *a, h2o_req_t *req);
/* Tokens and TTFT of a generation, for its request's log line (loop thread). */
void tdm_api_access_usage(h2o_req_t *req, uint32_t prompt_tokens, uint32_t completion_tokens,
                          uint64_t ttft_us);
void tdm_api_access_metrics(tdm_api_t *a, FILE *f);

/* generate.c */
void tdm_api_h_generate(tdm_api_t *a, h2o_req_t *req);

/* The transport under /generate, shared with the OpenAI handlers: one scheduler request bound to
 * one HTTP request (wake-ups, SSE writes with back-pressure, abort on disconnect, freeing once
 * both sides are done). A handler with its own response format passes ops:
 *   on_event  scheduler thread, under the request's lock: keep what `ev` carries (no blocking);
 *   take      loop thread, under the lock: move what on_event kept to loop-side storage;
 *   process   loop thread, no lock: format it; stream → tdm_api_gen_write(), whole replies
 *             (done) → an ordinary send on tdm_api_gen_req(), which is NULL once the client left;
 *   free      when the request is freed (after the final event and h2o's dispose).
 * `done` is set exactly once, with the final (FINISH or ERROR) event taken. */
typedef struct tdm_api_gen_ops {
    void (*on_event)(void *ud, const tdm_req_event_t *ev);
    void (*take)(void *ud);
    void (*process)(tdm_api_gen_t *g, void *ud, int done);
    void (*free)(void *ud);
} tdm_api_gen_ops_t;

/* Submit `rp` (its cb/ctx are set here) and bind it to `req`; when `stream`, starts a
 * text/event-stream response. On failure nothing was sent, `ud` is not freed, and the caller
 * answers with the status and `err`. */
tdm_status_t tdm_api_gen_start(tdm_api_t *a, h2o_req_t *req, tdm_req_params_t *rp, int stream,
                               const tdm_api_gen_ops_t *ops, void *ud, char *err, size_t err_len);
h2o_req_t *tdm_api_gen_req(const tdm_api_gen_t *g);
uint64_t tdm_api_gen_id(const tdm_api_gen_t *g);
/* Stream: queue bytes (sent after process returns); `final` ends the response. */
void tdm_api_gen_write(tdm_api_gen_t *g, const char *s, size_t n, int final);
void tdm_api_gen_on_messages(h2o_multithread_receiver_t *rx, h2o_linklist_t *messages);
/* openai.c */
void tdm_api_h_completions(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_chat(tdm_api_t *a, h2o_req_t *req);
void tdm_api_h_models(tdm_api_t *a, h2o_req_t *req);
/* From the loop's tick: the output_stats telemetry event every 10 s while serving chat. */
void tdm_api_openai_tick(tdm_api_t *a, uint64_t now_us);
void tdm_api_openai_fini(tdm_api_t *a);

/* From the loop's tick: abort requests whose client socket is closed (EOF or reset). */
void tdm_api_gen_check_clients(tdm_api_t *a);

/* From the loop's tick: end open requests with an error after 2 x --health-progress-timeout
 * without progress (the group is stuck; its scheduler will not). */
void tdm_api_gen_check_progress(tdm_api_t *a, uint64_t now_us);

/* Ask the scheduler to end every open request (shutdown). */
void tdm_api_gen_abort_all(tdm_api_t *a);

#endif
