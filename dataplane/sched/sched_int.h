/*
 * dataplane/sched/sched_int.h — internals shared by the executor, the scheduler, the loops and
 * the worker assembly (docs/serving.md). Not a public contract: sched.h and worker.h are.
 *
 * Executor (exec.c, every rank): receives (followers) or sends (rank 0) the iteration's plan on
 * the plan channel, resolves PREV_TOKEN entries, runs the forward with the tensor collectives,
 * samples on rank 0 and records the iteration (I2). Rank 0 hands it, beside the plan bytes, one
 * tdm_sreq_t pointer per entry: the request whose sampling state it advances.
 *
 * Scheduler (sched.c and the files sched_state.h lists, rank 0): requests, queues, pages, prefix
 * cache, plans, results, events.
 * The loops (loop.c) connect the two: lockstep calls the executor inline; overlap runs it on its
 * own thread with a queue of depth 1.
 */
#ifndef TDM_SCHED_INT_H
#define TDM_SCHED_INT_H

#include <pthread.h>
#include <stdint.h>

#include <tdm/hicache.h>
#include <tdm/kv.h>
#include <tdm/model.h>
#include <tdm/progress.h>
#include <tdm/sample.h>
#include <tdm/tokenizer.h>
#include <tdm/xfer.h>

#include "dataplane/model/graph.h"
#include "dataplane/sched/fault.h"
#include "dataplane/sched/plan_codec.h"
#include "dataplane/sched/sched.h"
#include "dataplane/tp/comm.h"
#include "kernels/backend.h"

/* ---- requests (owned by the scheduler; the executor writes only the sampling fields) ---- */

typedef enum sreq_state {
    SREQ_WAITING = 0,
    SREQ_RUNNING,
    SREQ_ENDING, /* terminal event sent; pages released once no in-flight iteration uses them */
    SREQ_XFER,   /* decode (PD): pages allocated, TRANSFER_INFO sent, waiting for the KV */
} sreq_state_t;

typedef struct tdm_sreq tdm_sreq_t;
struct tdm_sreq {
    uint64_t id;
    sreq_state_t state;
    tdm_sreq_t *prev, *next; /* waiting queue or running list */
    tdm_sreq_t *ending_next;

    int32_t *tokens; /* prompt ++ generated: n_prompt + max_new capacity */
    uint32_t n_prompt, max_new;
    /* executor-owned: tokens sampled so far (tokens[n_prompt + i]) and the last result */
    uint32_t n_sampled;
    /* scheduler-owned */
    uint32_t n_gen;            /* generated tokens processed (known values) */
    uint32_t n_gen_sched;      /* generated tokens once every planned iteration completes */
    uint32_t n_computed_sched; /* KV positions written once every planned iteration completes */
    uint64_t last_iter;        /* last iteration whose plan includes this request (0 = none) */
    /* overlap loop (loop.c drop_aborted): aborted after its row was planned; the row's size */
    int plan_drop;
    uint32_t plan_drop_tokens, plan_drop_flags;
    int retract_pending;
    uint32_t slot;
    tdm_kv_seq_t kv;
    uint32_t cached_tokens;
    uint64_t admit_seq; /* admission order, for retraction (newest first) */

    tdm_sample_params_t sp;
    int32_t *stop_ids;
    uint32_t n_stop_ids;
    char **stop_strs;
    uint32_t n_stop_strs;
    tdm_sample_stop_t stop;
    int want_text, skip_special;
    uint64_t deadline_us, submit_us, first_token_us;
    uint64_t admitted_us; /* first admission to the batch (0 while waiting) */
    tdm_req_cb cb;
    void *ctx;
    int abort_requested;
    /* PD (docs/serving.md "Scheduler hooks"): the transfer room; while non-zero the pages stay
     * with the request after its end until tdm_xfer_release() lets them go (prefill: puts in
     * flight; decode: quarantined until ABORT_ACK) */
    uint64_t room;
    uint32_t pd_held; /* prefill: the room's leading prompt pages decode holds (not sent) */
    /* HiCache: the load of this request's host-tier pages not yet waited for (0 = none); set
     * when any of its pages came from the host tier; its KV failed verification */
    uint64_t load_ticket;
    uint64_t hc_ticket; /* the ticket of its newest load, kept after the wait (TP > 1 gather) */
    int hc_loaded, kv_bad;

    tdm_tok_stream_t *stream;
    char *text; /* all generated text (stop-string scan) */
    size_t text_len, text_cap, emitted;
};

/* ---- executor ---- */

typedef struct tdm_exec_cfg {
    const tdm_model_t *model;
    uint32_t tp_size, rank;
    tdm_dtype_t kv_dtype;
    uint32_t page_size, num_pages;
    uint32_t max_seqs;   /* entries per plan == slots */
    uint32_t max_tokens; /* tokens per plan */
    uint32_t max_context;
    uint32_t threads; /* CPU backend threads, 0 = default */
    tdm_comm_t *tensor, *plan;
    tdm_progress_page_t *page;
    tdm_fault_table_t *faults; /* may be NULL */
    /* optional: memory the KV pool lives in (tdm_kv_pool_init_mem) instead of the executor's own
     * allocation — PD at TP > 1 puts every rank's pool in shared memory that rank 0's transfer
     * engine maps; NULL = allocate */
    void *kv_mem;
    uint64_t kv_mem_bytes;
    /* HiCache (--enable-hierarchical-cache): the host tier over this rank's pool, NULL = off;
     * its fault hook is the executor's (slow_host_copy, flip_host_bits, skip_layer_gate) */
    const tdm_hicache_cfg_t *hicache;
    int device_cuda;            /* 1: the forward runs on the CUDA engine (--device cuda) */
    double mem_fraction_static; /* --device cuda: share of free GPU memory for weights + KV */
    const char *cuda_backend;   /* --device cuda without a linked runtime: backend-cuda.so
                                   (NULL/"" = the installed one, kernels/cuda/module.h) */
    uint64_t gpu_deadline_us;   /* --device cuda: a step's wait is aborted past it (2 x
                                   --health-progress-timeout; dataplane/tp/gpu.h) */
} tdm_exec_cfg_t;

typedef struct tdm_exec tdm_exec_t;

/* One iteration as rank 0 hands it to the executor and gets it back. */
typedef struct tdm_exec_result {
    tdm_sreq_t *req;
    int32_t token;
    tdm_status_t status; /* sampling failure (non-finite logits) */
    tdm_sample_result_t sample;
} tdm_exec_result_t;

typedef struct tdm_exec_iter {
    const uint8_t *plan; /* header + payload */
    size_t plan_len;
    tdm_plan_hdr_t hdr;
    tdm_sreq_t **reqs; /* one per entry (rank 0) */
    uint32_t n_reqs;
    uint32_t waiting, running;  /* recorded with the iteration */
    uint64_t taken;             /* requests taken from the inbox when they were counted */
    tdm_exec_result_t *results; /* out: one per LOGITS entry, in entry order */
    uint32_t n_results;
    uint64_t kv_need; /* the newest HiCache load ticket the batch reads (0 = none) */
    /* the one-token rows planned (decode rows, and a mixed step's): how many, the positions
     * they attend in all, the longest one's */
    uint32_t ctx_rows, ctx_max;
    uint64_t ctx_sum;
    uint64_t poison_reads; /* out: poison reads and gate bypasses during this forward */
    uint64_t gate_bypasses;
    /* HiCache at TP > 1: rank 0's tier journal since the previous plan (sent with this one),
     * and out: the first follower load that failed verification (ticket 0 = none), gathered
     * through the tensor comm before any token of this iteration is sent */
    uint32_t *tier;
    uint32_t tier_words, tier_cap;
    uint64_t tier_bad_ticket;
    uint32_t tier_bad_rank, tier_bad_page, tier_bad_layer, tier_bad_sub;
    tdm_status_t status;
} tdm_exec_iter_t;

tdm_status_t tdm_exec_init(const tdm_exec_cfg_t *cfg, tdm_exec_t **ret, char *err, size_t err_len);
void tdm_exec_free(tdm_exec_t *x);
tdm_kv_pool_t *tdm_exec_pool(tdm_exec_t *x);
uint64_t tdm_exec_weight_bytes(const tdm_exec_t *x);
uint64_t tdm_exec_kv_bytes(const tdm_exec_t *x);
/* --device cuda: the KV pool's device memory (base = the cudaMalloc; same layout and page count
 * as tdm_exec_pool's page ids), what the PD transfer engine moves by CUDA IPC; NULL otherwise. */
const tdm_kv_buffers_t *tdm_exec_kv_device(const tdm_exec_t *x);
const tdm_exec_cfg_t *tdm_exec_cfg(const tdm_exec_t *x);
/* The host tier (NULL when HiCache is off). */
tdm_hicache_t *tdm_exec_hicache(tdm_exec_t *x);
/* Rank 0: send the plan and run it; results in it->results. */
tdm_status_t tdm_exec_lead(tdm_exec_t *x, tdm_exec_iter_t *it);
/* The overlap loop's pipelined form (docs/serving.md "Loops"): 1 when this executor can launch
 * a plan on the device before the previous one completed (--device cuda, TP 1, device sampling,
 * no HiCache tier, TDM_CUDA_PIPELINE not 0; or --device cpu with TDM_CPU_PIPELINE=1). */
int tdm_exec_can_pipeline(const tdm_exec_t *x);
/* Send and launch `it` behind the iteration in flight (if any), then complete that one and
 * return it in *done (NULL: none) with its results; `it` stays in flight. A plan that cannot be
 * pipelined (not BATCH, penalties, no pipelining) runs after the older one completed, to its own
 * completion, and is handed back by the next call. */
tdm_status_t tdm_exec_lead_launch(tdm_exec_t *x, tdm_exec_iter_t *it, tdm_exec_iter_t **done);
/* Complete the iteration in flight, if any (*done; NULL: none). */
tdm_status_t tdm_exec_lead_complete(tdm_exec_t *x, tdm_exec_iter_t **done);
/* Followers: run plans until SHUTDOWN (TDM_OK) or an error (abort, dead peer, bad plan). */
tdm_status_t tdm_exec_follow(tdm_exec_t *x, volatile int *stop);

/* ---- scheduler ---- */

typedef enum tdm_sched_pd {
    TDM_SCHED_PD_NONE = 0, /* colocated */
    TDM_SCHED_PD_PREFILL,  /* rooms from tdm_xfer_prefill_next(), max_new_tokens 1, no HTTP */
    TDM_SCHED_PD_DECODE,   /* admission sends TRANSFER_INFO; the KV comes from prefill */
    TDM_SCHED_PD_MAX
} tdm_sched_pd_t;

typedef struct tdm_sched_cfg {
    uint32_t max_running; /* slots */
    uint32_t max_queued;
    uint32_t chunk_tokens; /* prefill tokens per iteration */
    int overlap;
    uint64_t idle_plan_us; /* an IDLE plan at least this often (heartbeats) */
    const tdm_tok_t *tok;  /* may be NULL: want_text refused */
    const tdm_model_config_t *mc;
    /* PD role (--disaggregation-mode) and its transfer engine (NULL when colocated) */
    tdm_sched_pd_t pd;
    tdm_xfer_t *xfer;
    /* decode: match the prompt's prefix against this worker's prefix cache and HiCache tier at
     * admission, so the room names only the pages it does not hold */
    int pd_prefix;
    /* called on the scheduler thread after each published iteration (NULL: none); the worker
     * pings systemd's watchdog from it, so only a loop that iterates keeps the unit alive */
    void (*on_iter)(void *ctx);
    void *on_iter_ctx;
    /* telemetry events (CORRUPTION evidence: hicache_load_mismatch, poisoned_page_read,
     * hicache_gate_bypass) on the scheduler thread; data (may be NULL) is stolen; NULL: none */
    void (*on_event)(void *ctx, const char *type, const char *reason, struct json_t *data);
    void *on_event_ctx;
} tdm_sched_cfg_t;

tdm_status_t tdm_sched_init(const tdm_sched_cfg_t *cfg, tdm_exec_t *x, tdm_sched_t **ret, char *err,
                            size_t err_len);
/* Run the loop on the calling thread until tdm_sched_stop; then broadcasts SHUTDOWN, ends every
 * request that is left with ERROR (ABORTED) and returns. An executor error ends the loop too
 * (the group is going down) with that status. */
tdm_status_t tdm_sched_run(tdm_sched_t *s);
void tdm_sched_stop(tdm_sched_t *s);
void tdm_sched_free(tdm_sched_t *s);
/* Wake the loop (any thread, no scheduler lock held by the caller's caller): the transfer
 * engine's event callback calls it on every room transition so a room that became SUCCESS,
 * FAILED or releasable is seen at once instead of at the next poll. */
void tdm_sched_kick(tdm_sched_t *s);

/* ---- prefix cache (prefix.c): full pages indexed by a chained hash of their tokens ----
 * The cache holds one reference on every page it indexes; a page whose only reference is the
 * cache's is evictable (LRU). Lookups verify the tokens, so a hash collision never shares a
 * wrong page. Not thread-safe: the scheduler thread only. */
typedef struct tdm_prefix tdm_prefix_t;
tdm_status_t tdm_prefix_init(tdm_kv_pool_t *pool, uint32_t page_size, tdm_prefix_t **ret);
void tdm_prefix_free(tdm_prefix_t *c); /* drops the cache's references */
/* HiCache: the host tier under the cache (NULL: none). Per its write policy a page is stored when
 * it is indexed (write_through), hit the second time (write_through_selective) or evicted
 * (write_back). */
void tdm_prefix_set_tier(tdm_prefix_t *c, tdm_hicache_t *hc);
/* The chain hash after the first n_pages pages of tokens (the parent of page n_pages). */
uint64_t tdm_prefix_chain(const int32_t *tokens, uint32_t n_pages, uint32_t page_size);
/* Longest cached chain for tokens[0..n_tokens) of at most max_pages pages: page ids into
 * ret_pages (not referenced yet), count returned; matched entries become most recently used. */
uint32_t tdm_prefix_match(tdm_prefix_t *c, const int32_t *tokens, uint32_t max_pages,
                          uint32_t *ret_pages);
/* Index the first n_pages full pages of a sequence (tokens + its page table); pages already
 * indexed (same chain) are skipped. */
void tdm_prefix_insert(tdm_prefix_t *c, const int32_t *tokens, const uint32_t *pages,
                       uint32_t n_pages);
/* Evict up to n least recently used evictable pages; returns how many were freed. */
uint32_t tdm_prefix_evict(tdm_prefix_t *c, uint32_t n);
uint32_t tdm_prefix_evictable(const tdm_prefix_t *c);
uint32_t tdm_prefix_count(const tdm_prefix_t *c);
/* Drop every entry (referenced pages stay with their sequences). */
void tdm_prefix_flush(tdm_prefix_t *c);

#endif
