/*
 * dataplane/sched/sched.h — the leader's scheduler as the HTTP layer sees it (docs/serving.md).
 *
 * The HTTP thread submits requests and aborts; the scheduler thread owns everything else and
 * reports each request's progress through the request's callback. Callbacks run on the
 * scheduler thread and must not block: the HTTP layer copies the event and hands it to its own
 * loop (h2o_multithread), since h2o_send may only run there. Every request ends with exactly one
 * FINISH or ERROR event (invariant I9: tokens or an explicit error), after which the scheduler
 * forgets the callback context.
 *
 * Thread-safety: submit/abort/drain/stats are safe from any thread; the rest of the scheduler is
 * single-threaded by construction.
 */
#ifndef TDM_SCHED_H
#define TDM_SCHED_H

#include <stdint.h>

#include <tdm/hicache.h>
#include <tdm/sample.h>
#include <tdm/status.h>

typedef enum tdm_finish_reason {
    TDM_FINISH_LENGTH = 0, /* max_new_tokens reached */
    TDM_FINISH_STOP = 1,   /* stop token or stop string */
    TDM_FINISH_ABORT = 2,  /* client gone, admin, or drain timeout */
    TDM_FINISH_ERROR = 3,  /* see the event's status and message */
    TDM_FINISH_MAX
} tdm_finish_reason_t;

const char *tdm_finish_reason_name(tdm_finish_reason_t r); /* "length", "stop", ... */

typedef enum tdm_req_event_kind {
    TDM_REQ_TOKEN = 0,  /* one generated token (+ the text it completed, stop-filtered) */
    TDM_REQ_FINISH = 1, /* the end; carries the last held-back text and usage */
    TDM_REQ_ERROR = 2,  /* the end, with an error */
    TDM_REQ_EVENT_MAX
} tdm_req_event_kind_t;

typedef struct tdm_req_event {
    tdm_req_event_kind_t kind;
    uint64_t req_id;
    /* TOKEN */
    int32_t token;
    tdm_sample_result_t sample; /* logprob + top logprobs when requested */
    const char *text;           /* UTF-8 complete, stop strings excluded; may be "" */
    size_t text_len;
    /* FINISH / ERROR */
    tdm_finish_reason_t finish;
    int32_t matched_stop_token; /* -1 unless finished by a stop token */
    tdm_status_t status;        /* ERROR: why */
    const char *message;
    uint32_t prompt_tokens, completion_tokens, cached_tokens;
    uint64_t ttft_us;  /* submit → first token */
    uint64_t queue_us; /* submit → admitted to the batch (0 if never admitted) */
} tdm_req_event_t;

typedef void (*tdm_req_cb)(void *ctx, const tdm_req_event_t *ev);

typedef struct tdm_req_params {
    const int32_t *prompt; /* copied at submit */
    uint32_t n_prompt;
    uint32_t max_new_tokens;
    tdm_sample_params_t sampling;
    const int32_t *stop_ids; /* copied; EOS ids are added unless ignore_eos */
    uint32_t n_stop_ids;
    const char *const *stop_strs; /* copied */
    uint32_t n_stop_strs;
    int ignore_eos;
    int want_text;        /* detokenize (OpenAI) or ids only (/generate) */
    int skip_special;     /* detokenize without special tokens */
    uint64_t deadline_us; /* monotonic; 0 = none: past it the request ends with ERROR TIMEOUT */
    tdm_req_cb cb;
    void *ctx;
} tdm_req_params_t;

typedef struct tdm_sched tdm_sched_t;

/* TDM_OK and the request id; TDM_ERR_AGAIN queue full (HTTP 429); TDM_ERR_BUSY draining (503);
 * TDM_ERR_RANGE prompt + max_new_tokens over the context length, or an empty prompt (400);
 * TDM_ERR_INVAL bad sampling params (400, `err` says which). No callback fires on failure. */
tdm_status_t tdm_sched_submit(tdm_sched_t *s, const tdm_req_params_t *p, uint64_t *ret_id,
                              char *err, size_t err_len);
/* Ask for a request to end (client disconnect, admin); its FINISH(ABORT) follows. Unknown or
 * finished ids are ignored. */
void tdm_sched_abort(tdm_sched_t *s, uint64_t req_id);
/* Stop admitting; finished when tdm_sched_stats().drained. */
void tdm_sched_drain(tdm_sched_t *s);
/* Admit again after a drain (drained or not); requests refused meanwhile stay refused. */
void tdm_sched_resume(tdm_sched_t *s);

enum { TDM_SCHED_WAIT_IDLE = 0, TDM_SCHED_WAIT_DECODE = 1, TDM_SCHED_WAIT_MIXED = 2 };

typedef struct tdm_sched_stats {
    uint32_t waiting, running;
    uint32_t pages_free, pages_total, pages_cached;
    uint64_t iter;
    uint64_t tokens_generated, tokens_prefilled, prompt_tokens_cached;
    uint64_t requests_finished, requests_aborted, requests_failed, retractions;
    /* overlap loop: rows of aborted requests dropped from a plan built before the abort came */
    uint64_t aborted_rows_dropped;
    /* BATCH iterations completed: decode rows only, or with prefill chunks (mixed) */
    uint64_t iters_decode, iters_mixed;
    /* their one-token rows: how many, the positions they attended in all, and over the
     * iterations that had any, how many iterations and the sum of each one's longest row */
    uint64_t ctx_rows, ctx_positions, ctx_iters, ctx_longest;
    /* the loop thread's time (µs): building plans, waiting for the executor (lockstep: the whole
     * forward; overlap: what the build and the processing did not hide) by the kind of the
     * iteration waited for (TDM_SCHED_WAIT_*), processing results */
    uint64_t build_us, exec_wait_us[3], process_us;
    int draining, drained;
    /* PD: decode requests waiting for their KV; ended requests whose pages wait for the room's
     * release (prefill: puts in flight; decode: quarantined until ABORT_ACK) */
    uint32_t transferring, rooms_held;
    uint64_t pd_rooms_taken;   /* prefill: rooms taken from the engine */
    uint64_t pd_commit_failed; /* decode: rooms that failed or failed verification */
    /* HiCache: prompt tokens served from the host tier, CORRUPTION events raised (load
     * mismatch, poison read, gate bypass), and the tier's own counters when hicache_on */
    uint64_t host_hit_tokens, corruption_events;
    int hicache_on;
    tdm_hicache_stats_t hicache;
} tdm_sched_stats_t;

void tdm_sched_stats(tdm_sched_t *s, tdm_sched_stats_t *ret);

#endif
