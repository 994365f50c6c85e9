/*
 * dataplane/worker/worker.h — how a serving worker group is assembled (docs/serving.md
 * "Processes" and "Threads"), and what the HTTP layer (dataplane/api) and the telemetry reporter
 * (dataplane/report) get from it.
 *
 * tandem-worker without --rank is the launcher: tdm_worker_launch() creates the group's shared
 * files (/dev/shm/tandem-<pid>-{progress,tensor,plan,group}), posix_spawns the binary N times
 * with `--rank r` (every other flag passed through; the shm prefix travels in the environment
 * variable TDM_GROUP_SHM because it is not a user tunable), supervises, and on the first
 * abnormal rank exit logs `rank R exited (code C | signal S)`, calls the on_rank_exit hook (the
 * reporter posts `worker_lost` from it), sets the page's abort word, SIGTERMs the others,
 * SIGKILLs after 2 s, removes the shm files and exits 1. A clean exit of every rank (after a
 * SHUTDOWN plan) exits 0. SIGTERM/SIGINT to the launcher are forwarded to the ranks.
 *
 * tandem-worker --rank r is a rank: tdm_worker_rank_main() maps the shared files, loads the
 * model view of its TP share, builds the KV pool, the forward graph and the executor, and runs
 * the loop. Rank 0 also owns the scheduler (dataplane/sched/sched.h) and starts the HTTP layer
 * through the hook below once the scheduler accepts requests. When the loop ends (SIGTERM on
 * rank 0 → SHUTDOWN plan; abort word; a dead peer) the rank stops the HTTP layer, frees
 * everything and returns its exit code.
 *
 * HTTP hook (the API engineer implements it in dataplane/api/): rank 0 calls
 *     tdm_status_t tdm_api_serve(tdm_worker_t *w);   starts h2o on threads of its own and returns
 *     void tdm_api_stop(tdm_worker_t *w);            stops them (called once before teardown)
 * These are weak references: a build without dataplane/api serves no HTTP. A weak reference
 * does not pull an object out of a static library, so the api objects must be linked in on
 * their own (list them in tandem_worker_SOURCES, or add `-Wl,-u,tdm_api_serve` before the
 * library). The ready file (--ready-file) is written by tdm_api_serve after bind.
 *
 * Everything an accessor returns lives until tdm_api_stop has returned. The scheduler's
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
#include <tdm/tokenizer.h>

#include "dataplane/sched/fault.h"
#include "dataplane/sched/sched.h"

#define TDM_WORKER_SHARED_MAGIC 0x52485354u /* "TSHR" */
#define TDM_WORKER_SHARED_VERSION 1

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
} tdm_worker_shared_t;

typedef struct tdm_worker tdm_worker_t;

/* Entry from main(): launcher (cfg->rank == -1) or rank. argc/argv are the worker's own flags
 * (what the launcher passes through to ranks). Returns the process exit code. */
int tdm_worker_main(const tdm_worker_config_t *cfg, int argc, char **argv);
int tdm_worker_launch(const tdm_worker_config_t *cfg, int argc, char **argv);
int tdm_worker_rank_main(const tdm_worker_config_t *cfg);

/* Launcher hook for the reporter: called once, on the launcher's thread, when a rank exits
 * abnormally (`signal` 0 → `code` is the exit status). Set before tdm_worker_launch. */
typedef void (*tdm_worker_rank_exit_fn)(void *ctx, uint32_t rank, int32_t pid, int code,
                                        int signal);
void tdm_worker_set_rank_exit_hook(tdm_worker_rank_exit_fn fn, void *ctx);

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

/* The HTTP layer (weak; see the top of this file). */
tdm_status_t tdm_api_serve(tdm_worker_t *w) __attribute__((weak));
void tdm_api_stop(tdm_worker_t *w) __attribute__((weak));

/* Self-test hook (before /generate exists, and for the TP/loop equivalence test): with
 * TDM_SCHED_SELFTEST=FILE rank 0 reads one request per line ("max_new_tokens seed temperature
 * id,id,..."), submits them all at once, writes one line per request in input order to
 * TDM_SCHED_SELFTEST_OUT ("finish_reason id,id,.."), and shuts the group down cleanly. */

#endif
