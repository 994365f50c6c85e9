/*
 * dataplane/worker/hooks.h — the hook tables main.c hands the worker (worker.h): the HTTP layer
 * (http_hooks.c over dataplane/api) and the telemetry reporter with the launcher's worker_lost
 * (report_hooks.c over dataplane/report). Each is one record owned by main.c, which lives as long
 * as the worker; the tables carry it as their context.
 */
#ifndef TDM_WORKER_HOOKS_H
#define TDM_WORKER_HOOKS_H

#include "dataplane/worker/worker.h"

/* The reporter: report.* for a rank (one reporter per rank, started only with --control-plane)
 * and launch.* for the launcher (`worker_lost` for the first abnormal rank exit). Identity and
 * policy: dataplane/report/report.h. */
typedef struct tdm_worker_telemetry tdm_worker_telemetry_t;
tdm_worker_telemetry_t *tdm_worker_telemetry_new(void);
void tdm_worker_telemetry_free(tdm_worker_telemetry_t *t);
/* Fill hooks->report and hooks->launch with t's functions. */
void tdm_worker_telemetry_hooks(tdm_worker_telemetry_t *t, tdm_worker_hooks_t *hooks);

/* The HTTP layer: api.serve builds the server's options from the assembled worker (scheduler,
 * progress page, the shared area's fault table and per-rank weight bytes), binds and writes the
 * ready file on the caller's thread (a bind failure fails the start), then runs the h2o loop on
 * a thread of its own; api.stop stops and frees it. Its events and statistics go through
 * `report` (copied). */
typedef struct tdm_worker_http tdm_worker_http_t;
tdm_worker_http_t *tdm_worker_http_new(const tdm_worker_report_hooks_t *report);
void tdm_worker_http_free(tdm_worker_http_t *h);
/* Fill hooks->api with h's functions. */
void tdm_worker_http_hooks(tdm_worker_http_t *h, tdm_worker_hooks_t *hooks);

#endif
