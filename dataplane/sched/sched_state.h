/*
 * dataplane/sched/sched_state.h — the scheduler's state, shared by its files (rank 0's scheduler
 * thread owns it; the fields "under mu" are also touched by submit/abort/stats on any thread):
 *   sched.c         requests in (submit, abort, drain, stats), init and free
 *   sched_batch.c   building a plan: intake, admission (prefix reuse), pages, retraction
 *   sched_events.c  results out: tokens, stop strings, the one terminal event, page release
 *   sched_pd.c      PD: prefill rooms taken, decode rooms polled (TRANSFERRING)
 *   loop.c          the lockstep and overlap loops around the executor
 * Not a contract (sched.h is).
 */
#ifndef TDM_SCHED_STATE_H
#define TDM_SCHED_STATE_H

#include <jansson.h>

#include "dataplane/sched/sched_int.h"

/* PD: how often TRANSFERRING requests and held rooms are polled when nothing else runs (the
 * engine's events wake the loop earlier). */
#define PD_POLL_US 2000u

typedef struct rlist {
    tdm_sreq_t *head, *tail;
    uint32_t n;
} rlist_t;

typedef struct iter_buf {
    tdm_exec_iter_t it;
    tdm_plan_builder_t pb;
} iter_buf_t;

struct tdm_sched {
    tdm_sched_cfg_t cfg;
    tdm_exec_t *x;
    tdm_kv_pool_t *pool;
    tdm_prefix_t *cache;
    tdm_hicache_t *hc;  /* HiCache host tier (NULL = off) */
    uint32_t *host_ids; /* admission scratch: host pages of a match */
    /* PD: the pd_prefix telemetry event (sched_pd.c): when it was last sent, and the transfer
     * engine's room_pages, room_bytes, prefix_pages_skipped, prefix_bytes_saved then */
    uint64_t pd_rep_us, pd_rep[4];
    uint32_t ps, num_pages, max_context, max_pages_per_seq, max_tokens, vocab;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    rlist_t inbox;             /* under mu */
    uint64_t taken;            /* under mu: requests moved from the inbox to the queues, ever */
    tdm_progress_page_t *page; /* the group's page (may be NULL): submissions counted there */
    uint64_t *aborts;          /* under mu */
    uint32_t n_aborts, cap_aborts;
    uint64_t next_id;      /* under mu */
    int draining, stop;    /* under mu */
    tdm_sched_stats_t pub; /* under mu */

    rlist_t waiting, running;
    rlist_t xferring; /* decode (PD): SREQ_XFER, polled once per iteration */
    int kick;         /* under mu: a transfer event since the loop last looked */
    tdm_sreq_t *ending;
    uint32_t *free_slots, n_free_slots;
    uint64_t iter, completed_iter, admit_seq;
    tdm_sched_stats_t st; /* scheduler-thread counters */
    uint32_t *tokbuf, *shared;
    tdm_sreq_t **snap; /* max_running */

    iter_buf_t ib[2];
    tdm_plan_builder_t pb_drop; /* overlap: a plan re-encoded without aborted rows (loop.c) */
    uint64_t *drop_ids;         /* its scratch: the abort list's ids */
    uint32_t cap_drop_ids;
    /* overlap: the executor thread and its depth-1 queue (under qmu) */
    pthread_t exec_thread;
    int exec_started;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    iter_buf_t *q_in, *q_done;
    int q_quit;
};

/* ---- intrusive request lists ---- */

static inline void rl_append(rlist_t *l, tdm_sreq_t *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    l->n++;
}

static inline void rl_prepend(rlist_t *l, tdm_sreq_t *r)
{
    r->prev = NULL;
    r->next = l->head;
    if (l->head)
        l->head->prev = r;
    else
        l->tail = r;
    l->head = r;
    l->n++;
}

static inline void rl_remove(rlist_t *l, tdm_sreq_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

/* ---- what the files call across ---- */

void tdm_sched_sreq_free(tdm_sched_t *s, tdm_sreq_t *r);
tdm_status_t tdm_sched_sreq_new(tdm_sched_t *s, const tdm_req_params_t *p, tdm_sreq_t **ret,
                                char *err, size_t err_len);
void tdm_sched_finish(tdm_sched_t *s, tdm_sreq_t *r, tdm_finish_reason_t why, tdm_status_t status,
                      const char *msg, int32_t stop_token, const char *text, size_t text_len);
int tdm_sched_in_flight(const tdm_sched_t *s, const tdm_sreq_t *r);
void tdm_sched_on_token(tdm_sched_t *s, tdm_sreq_t *r, const tdm_exec_result_t *res);
void tdm_sched_process_results(tdm_sched_t *s, tdm_exec_iter_t *it);
void tdm_sched_reap_ending(tdm_sched_t *s);
void tdm_sched_reap_ending_ex(tdm_sched_t *s, int force);
void tdm_sched_release_pages(tdm_sched_t *s, tdm_sreq_t *r);
int tdm_sched_room_released(tdm_sched_t *s, tdm_sreq_t *r, int force);
tdm_plan_kind_t tdm_sched_build(tdm_sched_t *s, iter_buf_t *ib, uint64_t iter);
void tdm_sched_intake(tdm_sched_t *s);
void tdm_sched_pd_abort_room(tdm_sched_t *s, tdm_sreq_t *r, const char *why);
void tdm_sched_pd_poll_decode(tdm_sched_t *s);
void tdm_sched_pd_poll_prefill(tdm_sched_t *s);
void tdm_sched_fail_all(tdm_sched_t *s, tdm_status_t why, const char *msg);

#endif
