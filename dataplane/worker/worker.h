/*
 * dataplane/worker/worker.h — how a serving worker group is assembled (docs/serving.md
 * "Processes" and "Threads"), and what the HTTP layer and the telemetry reporter get from it.
 *
 * main.c builds one tdm_worker_t per process (tdm_worker_new) with explicit hook tables — the
 * HTTP layer (http_hooks.c over dataplane/api), the rank's reporter and the launcher's rank-exit
 * report (report_hooks.c over dataplane/report) — and runs it (tdm_worker_run). Each table carries
 * its own context; a NULL function is "none" (a build or a test without that part).
 *
 * tandem-worker without --rank is the launcher (launcher.c): it creates the group's shared
 * files (/dev/shm/tandem-<pid>-{progress,tensor,plan,group}), calls launch.group_created with
 * the group id, posix_spawns the binary N times with `--rank r` (every other flag passed
 * through; the shm prefix travels in the environment variable TDM_GROUP_SHM because it is not a
 * user tunable), supervises, and on the first abnormal rank exit logs `rank R exited (code C |
 * signal S)`, calls launch.rank_exit (the reporter posts `worker_lost` from it), sets the page's
 * abort word, SIGTERMs the others, SIGKILLs after 2 s, removes the shm files and exits 1. A rank
 * whose start failed exits 1 with its reason in the shared area: the launcher logs `group failed
 * to start: rank R: why` and exits 1. A clean exit of every rank (after a SHUTDOWN plan) exits 0.
 * SIGTERM/SIGINT are forwarded to the ranks.
 *
 * tandem-worker --rank r is a rank (rank.c), started phase by phase: signals, the group's shared
 * files, the reporter (report.rank_start), the model, the KV sizing, the PD pools, the executor;
 * then followers run the loop and rank 0 owns the transfer engine (rank_pd.c), the scheduler
 * (dataplane/sched/sched.h) and starts the HTTP layer (api.serve) once the scheduler accepts
 * requests. When the loop ends (SIGTERM on rank 0 → SHUTDOWN plan; abort word; a dead peer) the
 * rank calls api.stop, report.rank_stop, frees everything and returns its exit code. The ready
 * file (--ready-file) is written by api.serve after bind.
 *
 * Everything an accessor returns lives until api.stop has returned. The scheduler's
 * submit/abort/drain/stats are thread-safe (sched.h); the progress page and the shared area are
 * read lock-free; the tokenizer and the model config are immutable.
 */
#ifndef TDM_WORKER_WORKER_H
#define TDM_WORKER_WORKER_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include <tdm/config.h>
#include <tdm/model.h>
#include <tdm/progress.h>
#include <tdm/status.h>
#include <tdm/telemetry.h>
#include <tdm/tokenizer.h>

#include "dataplane/sched/fault.h"
#include "dataplane/sched/sched.h"

#define TDM_WORKER_SHARED_MAGIC 0x52485354u /* "TSHR" */
#define TDM_WORKER_SHARED_VERSION 2

/* The group's shared area (one small shm file beside the progress page): what every rank
 * publishes once and what rank 0's HTTP thread reads for /metrics and /admin. */
typedef struct tdm_worker_shared {
    uint32_t magic;
    uint16_t version;
    uint16_t n_ranks;
    tdm_fault_table_t faults;
    _Atomic uint64_t resident_weight_bytes[TDM_PROGRESS_MAX_RANKS]; /* 0 until loaded */
    _Atomic uint64_t kv_pool_bytes[TDM_PROGRESS_MAX_RANKS];
    _Atomic uint32_t ranks_loaded; /* ranks that finished loading */
    /* The first rank whose start failed (before it served: its model, its KV pool, a listener it
     * could not bind) says why here before it exits 1, for the launcher's log and `worker_lost`:
     * start_error_rank claims the text (0 → rank + 1), start_error_set publishes it. */
    _Atomic uint32_t start_error_rank;
    _Atomic uint32_t start_error_set;
    char start_error[384];
} tdm_worker_shared_t;

typedef struct tdm_worker tdm_worker_t;
struct json_t;

/* ---- hooks: what main.c plugs into the runtime ---- */

/* The HTTP layer (rank 0): serve once the scheduler accepts requests — bind, write the ready
 * file, run on threads of its own — on the rank's main thread (a failure fails the rank's start:
 * err says why, e.g. the address, port and errno of a bind); stop once, before teardown. */
typedef struct tdm_worker_api_hooks {
    void *ctx;
    tdm_status_t (*serve)(void *ctx, tdm_worker_t *w, char *err, size_t err_len);
    void (*stop)(void *ctx, tdm_worker_t *w);
} tdm_worker_api_hooks_t;

/* A source of the rank's serving statistics (the HTTP layer's, set while it serves). */
typedef void (*tdm_worker_stats_fn)(void *ctx, tdm_tm_sample_t *s);

/* The rank's telemetry reporter: rank_start after the page is mapped (a failure is logged and
 * the rank serves without it), rank_stop at teardown before the page is unmapped (`clean`: the
 * rank leaves on purpose, so the `shutdown` event goes first). event queues one event
 * (docs/contracts.md §c) from any thread and takes `data` (freed when no reporter runs);
 * set_stats installs the statistics source (fn NULL clears it; a call in progress finishes
 * first). */
typedef struct tdm_worker_report_hooks {
    void *ctx;
    tdm_status_t (*rank_start)(void *ctx, tdm_worker_t *w);
    void (*rank_stop)(void *ctx, tdm_worker_t *w, int clean);
    tdm_status_t (*event)(void *ctx, const char *type, const uint64_t *room, const char *from,
                          const char *to, const char *reason, struct json_t *data);
    void (*set_stats)(void *ctx, tdm_worker_stats_fn fn, void *fn_ctx);
} tdm_worker_report_hooks_t;

/* The launcher's exits: group_created once the shared files exist (the group id is known), then
 * rank_exit at most once, on the launcher's thread, for the first abnormal rank exit (`signal` 0
 * → `code` is the exit status; `stopping`: the launcher had been asked to stop the group, SIGTERM
 * or SIGINT, before it: the stop's own abort of a wedged rank, not a loss; `start_error`: the
 * group failed to start, "rank R: why" from the shared area, else NULL). */
typedef struct tdm_worker_launch_hooks {
    void *ctx;
    void (*group_created)(void *ctx, const tdm_worker_config_t *cfg, uint64_t group_id);
    void (*rank_exit)(void *ctx, uint32_t rank, int32_t pid, int code, int signal, int stopping,
                      const char *start_error);
} tdm_worker_launch_hooks_t;

typedef struct tdm_worker_hooks {
    tdm_worker_api_hooks_t api;
    tdm_worker_report_hooks_t report;
    tdm_worker_launch_hooks_t launch;
} tdm_worker_hooks_t;

/* The process's worker over `cfg` (kept by the caller until tdm_worker_free) and a copy of the
 * hook tables. */
tdm_worker_t *tdm_worker_new(const tdm_worker_config_t *cfg, const tdm_worker_hooks_t *hooks);
void tdm_worker_free(tdm_worker_t *w);
/* The launcher (cfg->rank == -1) or a rank. argc/argv are the worker's own flags (what the
 * launcher passes through to ranks). Returns the process exit code. */
int tdm_worker_run(tdm_worker_t *w, int argc, char **argv);

/* ---- accessors for the HTTP layer and the reporter (rank 0 unless noted) ---- */
const tdm_worker_config_t *tdm_worker_config(const tdm_worker_t *w);
uint32_t tdm_worker_rank(const tdm_worker_t *w);    /* any rank */
uint32_t tdm_worker_tp_size(const tdm_worker_t *w); /* any rank */
uint64_t tdm_worker_group_id(const tdm_worker_t *w);
tdm_sched_t *tdm_worker_sched(tdm_worker_t *w);            /* NULL on followers */
tdm_progress_page_t *tdm_worker_progress(tdm_worker_t *w); /* any rank */
tdm_worker_shared_t *tdm_worker_shared(tdm_worker_t *w);   /* any rank: faults, per-rank bytes */
const tdm_tok_t *tdm_worker_tokenizer(const tdm_worker_t *w);
const tdm_model_config_t *tdm_worker_model_config(const tdm_worker_t *w);
/* This rank's resident weight bytes (per rank r: tdm_worker_shared(w)->resident_weight_bytes[r]).
 */
uint64_t tdm_worker_weight_bytes(const tdm_worker_t *w);
/* PD (--disaggregation-mode prefill|decode; rank 0): the transfer engine over rank 0's KV pool
 * (NULL when colocated), the bound bootstrap port (prefill; 0 otherwise), readiness (decode: 1
 * once registered with its prefill group, else 0 and the reason in why; 1 for other roles), and
 * the tandem_xfer_* series for /metrics (room counts by KVPoll state, frame and abort counters,
 * quarantine). Safe from the HTTP thread while the worker serves. */
struct tdm_xfer *tdm_worker_xfer(tdm_worker_t *w);
int tdm_worker_bootstrap_port(const tdm_worker_t *w);
int tdm_worker_pd_ready(tdm_worker_t *w, char *why, size_t why_len);
void tdm_worker_pd_metrics(tdm_worker_t *w, FILE *f);
/* Corruption seen by the transfer engine, ever: rooms whose KV checksums or aux slot did not match
 * plus rooms whose ABORT_ACK timed out (pages at risk); 0 without PD. */
uint64_t tdm_worker_pd_corruption(tdm_worker_t *w);
/* Ask the worker to end (rank 0: SHUTDOWN plan after the HTTP layer stopped); any thread. */
void tdm_worker_request_stop(tdm_worker_t *w);

/* Self-test hook (for the TP/loop equivalence test): with TDM_SCHED_SELFTEST=FILE rank 0 reads
 * one request per line ("max_new_tokens seed temperature ignore_eos id,id,..."), submits them
 * all at once, writes one line per request in input order to TDM_SCHED_SELFTEST_OUT
 * ("finish_reason id,id,.."), and shuts the group down cleanly (rank_selftest.c). */

#endif
