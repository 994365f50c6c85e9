/*
 * loop.c — the scheduler's loops around the executor (sched_state.h): lockstep calls the
 * executor inline; overlap runs it on its own thread with a queue of depth 1, building plan N+1
 * while N runs, or, on a GPU that can (tdm_exec_can_pipeline), launches N+1 on the device behind
 * N before waiting for N. Each iteration is published to the progress page; idle, the loop waits
 * for work, a transfer event or the idle-plan heartbeat.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/sched/sched_state.h"

/* Ended requests whose pages wait only for their room's release (no iteration needed). */
static uint32_t rooms_held(const tdm_sched_t *s)
{
    uint32_t n = 0;
    for (const tdm_sreq_t *r = s->ending; r; r = r->ending_next)
        n += r->room != 0 && !tdm_sched_in_flight(s, r);
    return n;
}

static uint32_t n_ending(const tdm_sched_t *s)
{
    uint32_t n = 0;
    for (const tdm_sreq_t *r = s->ending; r; r = r->ending_next)
        n++;
    return n;
}

/* Work that needs iterations now (PD waits — TRANSFERRING requests, held rooms — do not: the
 * loop polls them every PD_POLL_US and transfer events wake it). */
static int has_work(tdm_sched_t *s)
{
    return s->waiting.n || s->running.n || (s->ending && n_ending(s) > rooms_held(s));
}

static int pd_waiting(tdm_sched_t *s)
{
    return s->xferring.n || s->ending;
}

static void publish(tdm_sched_t *s)
{
    pthread_mutex_lock(&s->mu);
    int drained = s->draining && !s->inbox.n && !has_work(s) && !pd_waiting(s);
    if (drained && !s->pub.drained)
        tdm_prefix_flush(s->cache); /* a drained worker holds no pages */
    tdm_sched_stats_t *p = &s->pub;
    *p = s->st;
    p->waiting = s->waiting.n + s->inbox.n;
    p->running = s->running.n;
    p->pages_total = s->num_pages;
    p->pages_free = tdm_kv_pool_free_pages(s->pool);
    p->pages_cached = tdm_prefix_count(s->cache);
    p->iter = s->iter;
    p->draining = s->draining;
    p->drained = drained;
    p->transferring = s->xferring.n;
    p->rooms_held = rooms_held(s);
    if (s->hc) {
        p->hicache_on = 1;
        tdm_hicache_stats(s->hc, &p->hicache);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->cfg.on_iter)
        s->cfg.on_iter(s->cfg.on_iter_ctx);
}

/* Sleep until there is something to do or `us` passed; returns 1 when asked to stop. */
static int wait_for_work(tdm_sched_t *s, uint64_t us)
{
    pthread_mutex_lock(&s->mu);
    if (!s->stop && !s->inbox.n && !s->n_aborts && !s->kick && !has_work(s)) {
        if (pd_waiting(s) && us > PD_POLL_US)
            us = PD_POLL_US;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + us * 1000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    int stop = s->stop;
    s->kick = 0;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* Whether to stop at the top of an overlap turn: with an iteration in flight there is work by
 * definition (only the stop flag is read), else the loop waits for work as lockstep does. */
static int turn_stop(tdm_sched_t *s, int inflight)
{
    if (!inflight)
        return wait_for_work(s, s->cfg.idle_plan_us);
    pthread_mutex_lock(&s->mu);
    int stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* ---------------------------------------------------------------- loops */

static void *exec_main(void *arg)
{
    tdm_sched_t *s = arg;
    pthread_mutex_lock(&s->qmu);
    for (;;) {
        while (!s->q_in && !s->q_quit)
            pthread_cond_wait(&s->qcv, &s->qmu);
        if (!s->q_in)
            break;
        iter_buf_t *ib = s->q_in;
        pthread_mutex_unlock(&s->qmu);
        ib->it.status = tdm_exec_lead(s->x, &ib->it);
        pthread_mutex_lock(&s->qmu);
        s->q_in = NULL;
        s->q_done = ib;
        pthread_cond_broadcast(&s->qcv);
    }
    pthread_mutex_unlock(&s->qmu);
    return NULL;
}

/* TP > 1: rank 0's tier journal since the last plan goes with the plan about to be sent. */
static void take_tier(tdm_sched_t *s, iter_buf_t *ib)
{
    const uint32_t *w = NULL;
    uint32_t n = 0;
    ib->it.tier_words = 0;
    if (!s->hc)
        return;
    tdm_hicache_journal(s->hc, &w, &n);
    if (n > ib->it.tier_cap) {
        ib->it.tier = tdm_realloc(ib->it.tier, (size_t)n * sizeof(uint32_t));
        ib->it.tier_cap = n;
    }
    if (n)
        memcpy(ib->it.tier, w, (size_t)n * sizeof(uint32_t));
    ib->it.tier_words = n;
    tdm_hicache_journal_reset(s->hc);
}

static void exec_submit(tdm_sched_t *s, iter_buf_t *ib)
{
    take_tier(s, ib);
    pthread_mutex_lock(&s->qmu);
    s->q_in = ib;
    s->q_done = NULL;
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
}

static iter_buf_t *exec_wait(tdm_sched_t *s)
{
    pthread_mutex_lock(&s->qmu);
    while (!s->q_done)
        pthread_cond_wait(&s->qcv, &s->qmu);
    iter_buf_t *ib = s->q_done;
    s->q_done = NULL;
    pthread_mutex_unlock(&s->qmu);
    return ib;
}

/* Run one plan to completion (inline in lockstep and the pipelined overlap loop, on the
 * executor thread in the threaded one). */
static tdm_status_t run_sync(tdm_sched_t *s, iter_buf_t *ib)
{
    if (!s->exec_started) {
        take_tier(s, ib);
        return tdm_exec_lead(s->x, &ib->it);
    }
    exec_submit(s, ib);
    return exec_wait(s)->it.status;
}

/* Adds the time since *t to *acc and moves *t to now. */
static void lap(uint64_t *acc, uint64_t *t)
{
    uint64_t now = tdm_time_mono_us();
    *acc += now - *t;
    *t = now;
}

/* lap() into the executor-wait counter of the iteration's kind (NULL: idle). */
static void lap_wait(tdm_sched_t *s, const tdm_exec_iter_t *it, uint64_t *t)
{
    int k = TDM_SCHED_WAIT_IDLE;
    if (it && it->hdr.kind == TDM_PLAN_BATCH)
        k = it->hdr.n_tokens > it->hdr.n_seqs ? TDM_SCHED_WAIT_MIXED : TDM_SCHED_WAIT_DECODE;
    lap(&s->st.exec_wait_us[k], t);
}

static tdm_status_t loop_lockstep(tdm_sched_t *s)
{
    iter_buf_t *ib = &s->ib[0];
    while (!wait_for_work(s, s->cfg.idle_plan_us)) {
        uint64_t t = tdm_time_mono_us();
        tdm_sched_build(s, ib, s->iter + 1);
        s->iter++;
        take_tier(s, ib);
        lap(&s->st.build_us, &t);
        TDM_TRY(tdm_exec_lead(s->x, &ib->it));
        lap_wait(s, &ib->it, &t);
        tdm_sched_process_results(s, &ib->it);
        lap(&s->st.process_us, &t);
        publish(s);
    }
    return TDM_OK;
}

/* Overlap: plan N+1 was built while N ran, so the rows of requests aborted meanwhile (a client
 * gone, an abort storm) would be computed once more for nobody. Before it is sent they are dropped
 * from it: rank 0 re-encodes the plan without them and the followers receive only that plan
 * (invariant I1, docs/serving.md "Plan"); the other rows are byte-for-byte what was built. The
 * dropped requests are ended by the next intake as usual; their pages stay theirs until this
 * iteration completed (their last_iter), as for any request in a plan. Returns the plan's kind:
 * IDLE when no row is left (then it is not run at all). */
static tdm_plan_kind_t drop_aborted(tdm_sched_t *s, iter_buf_t *ib, tdm_plan_kind_t kind)
{
    if (kind != TDM_PLAN_BATCH)
        return kind;
    pthread_mutex_lock(&s->mu);
    uint32_t n_ab = s->n_aborts;
    if (n_ab > s->cap_drop_ids) {
        s->drop_ids = tdm_realloc(s->drop_ids, (size_t)n_ab * sizeof(uint64_t));
        s->cap_drop_ids = n_ab;
    }
    if (n_ab)
        memcpy(s->drop_ids, s->aborts, (size_t)n_ab * sizeof(uint64_t));
    pthread_mutex_unlock(&s->mu); /* the list itself stays for the next intake */
    if (!n_ab)
        return kind;
    tdm_exec_iter_t *it = &ib->it;
    uint32_t drop = 0;
    for (uint32_t i = 0; i < it->n_reqs; i++) {
        it->reqs[i]->plan_drop = 0;
        for (uint32_t k = 0; k < n_ab; k++)
            if (it->reqs[i]->id == s->drop_ids[k]) {
                it->reqs[i]->plan_drop = 1;
                drop++;
                break;
            }
    }
    if (!drop)
        return kind;
    const uint8_t *payload = it->plan + TDM_PLAN_HDR_BYTES;
    size_t len = it->hdr.payload_bytes, off = 0;
    tdm_plan_begin(&s->pb_drop);
    uint32_t ctx_rows = 0, ctx_max = 0;
    uint64_t ctx_sum = 0;
    for (uint32_t i = 0; i < it->n_reqs; i++) {
        tdm_plan_entry_t e;
        if (tdm_plan_next(payload, len, &off, &e) != TDM_OK)
            return kind; /* not a plan this scheduler built: keep it whole */
        tdm_sreq_t *r = it->reqs[i];
        r->plan_drop_tokens = e.n_tokens;
        r->plan_drop_flags = e.flags;
        if (!r->plan_drop && tdm_plan_add(&s->pb_drop, e.slot, e.pos0, e.flags, e.tokens,
                                          e.n_tokens, e.pages, e.n_pages) != TDM_OK)
            return kind;
        if (!r->plan_drop && e.n_tokens == 1) { /* the kept one-token rows (sched_batch.c) */
            ctx_rows++;
            ctx_sum += e.pos0 + 1;
            if (e.pos0 + 1 > ctx_max)
                ctx_max = e.pos0 + 1;
        }
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < it->n_reqs; i++) {
        tdm_sreq_t *r = it->reqs[i];
        if (!r->plan_drop) {
            it->reqs[k++] = r;
            continue;
        }
        /* what schedule_one counted for the row is undone: the positions it would have written
         * are not, so they never reach the prefix cache (tdm_sched_release_pages) */
        r->n_computed_sched -= r->plan_drop_tokens;
        if (r->plan_drop_flags & TDM_PLAN_LOGITS)
            r->n_gen_sched--;
        if (r->n_prompt + r->n_gen_sched - r->n_computed_sched > 1 ||
            r->n_computed_sched < r->n_prompt) /* as schedule_one counted it */
            s->st.tokens_prefilled -= r->plan_drop_tokens;
        r->plan_drop = 0;
    }
    it->n_reqs = k;
    it->ctx_rows = ctx_rows;
    it->ctx_sum = ctx_sum;
    it->ctx_max = ctx_max;
    tdm_plan_builder_t t = ib->pb;
    ib->pb = s->pb_drop;
    s->pb_drop = t;
    tdm_plan_finish(&ib->pb, it->hdr.iter, TDM_PLAN_IDLE, &it->plan, &it->plan_len, &it->hdr);
    s->st.aborted_rows_dropped += drop;
    return (tdm_plan_kind_t)it->hdr.kind;
}

/* Build N+1 while N runs; submit N+1 as soon as N is done; process N while N+1 runs. */
static tdm_status_t loop_overlap(tdm_sched_t *s)
{
    iter_buf_t *inflight = NULL;
    int k = 0;
    tdm_status_t st = TDM_OK;
    for (;;) {
        if (turn_stop(s, inflight != 0))
            break;
        iter_buf_t *next = &s->ib[k];
        uint64_t t = tdm_time_mono_us();
        tdm_plan_kind_t kind = tdm_sched_build(s, next, s->iter + 1);
        lap(&s->st.build_us, &t);
        if (inflight) {
            iter_buf_t *done = exec_wait(s);
            lap_wait(s, &done->it, &t);
            if (done->it.status != TDM_OK) {
                st = done->it.status;
                inflight = NULL;
                break;
            }
            kind = drop_aborted(s, next, kind);
        }
        if (kind == TDM_PLAN_BATCH || !inflight) {
            s->iter++;
            exec_submit(s, next);
            k ^= 1;
        }
        lap(&s->st.build_us, &t);
        if (inflight)
            tdm_sched_process_results(s, &inflight->it);
        lap(&s->st.process_us, &t);
        publish(s);
        inflight = (kind == TDM_PLAN_BATCH || !inflight) ? next : NULL;
        if (inflight && kind != TDM_PLAN_BATCH) {
            /* an IDLE heartbeat plan: nothing to overlap with */
            t = tdm_time_mono_us();
            iter_buf_t *done = exec_wait(s);
            lap_wait(s, &done->it, &t);
            inflight = NULL;
            if (done->it.status != TDM_OK) {
                st = done->it.status;
                break;
            }
            tdm_sched_process_results(s, &done->it);
            publish(s);
        }
    }
    if (inflight) {
        iter_buf_t *done = exec_wait(s);
        if (done->it.status == TDM_OK)
            tdm_sched_process_results(s, &done->it);
        else if (st == TDM_OK)
            st = done->it.status;
    }
    return st;
}

/* The overlap loop on the GPU, pipelined (docs/serving.md "Loops"): plan N+1 is built while N
 * runs, then launched on the device behind N before N is waited for — its PREV_TOKEN ids are the
 * ones N samples, written on the device — and only then is N completed (one wait) and processed,
 * while N+1 runs. The GPU has the next step queued whenever the host is fast enough. Plans that
 * cannot be pipelined (IDLE, penalties) run in order (tdm_exec_lead_launch). */
static tdm_status_t loop_pipeline(tdm_sched_t *s)
{
    int k = 0, inflight = 0;
    tdm_status_t st = TDM_OK;
    tdm_exec_iter_t *done = NULL;
    for (;;) {
        if (turn_stop(s, inflight != 0))
            break;
        iter_buf_t *next = &s->ib[k];
        uint64_t t = tdm_time_mono_us();
        tdm_plan_kind_t kind = tdm_sched_build(s, next, s->iter + 1);
        if (inflight)
            kind = drop_aborted(s, next, kind);
        lap(&s->st.build_us, &t);
        if (kind == TDM_PLAN_BATCH || !inflight) {
            s->iter++;
            take_tier(s, next);
            st = tdm_exec_lead_launch(s->x, &next->it, &done);
            k ^= 1;
            inflight = 1;
        } else {
            /* nothing to launch behind the one in flight: complete it (the IDLE plan built
             * meanwhile is dropped; the next turn waits for work as usual) */
            st = tdm_exec_lead_complete(s->x, &done);
            inflight = 0;
        }
        lap_wait(s, done, &t);
        if (st != TDM_OK)
            break;
        if (done)
            tdm_sched_process_results(s, done);
        lap(&s->st.process_us, &t);
        publish(s);
        if (inflight && kind != TDM_PLAN_BATCH) {
            /* an IDLE heartbeat ran to completion: hand it back now */
            st = tdm_exec_lead_complete(s->x, &done);
            inflight = 0;
            if (st != TDM_OK)
                break;
            if (done)
                tdm_sched_process_results(s, done);
            publish(s);
        }
    }
    if (inflight) {
        tdm_status_t cst = tdm_exec_lead_complete(s->x, &done);
        if (cst == TDM_OK && done)
            tdm_sched_process_results(s, done);
        else if (st == TDM_OK)
            st = cst;
    }
    return st;
}

/* End whatever is left with an explicit error (I9) and release it. */
void tdm_sched_fail_all(tdm_sched_t *s, tdm_status_t why, const char *msg)
{
    tdm_sched_intake(s);
    while (s->xferring.head) {
        tdm_sched_pd_abort_room(s, s->xferring.head,
                                why == TDM_ERR_ABORTED ? "shutdown" : "group failed");
        tdm_sched_finish(s, s->xferring.head, TDM_FINISH_ERROR, why, msg, -1, NULL, 0);
    }
    while (s->running.head)
        tdm_sched_finish(s, s->running.head, TDM_FINISH_ERROR, why, msg, -1, NULL, 0);
    while (s->waiting.head)
        tdm_sched_finish(s, s->waiting.head, TDM_FINISH_ERROR, why, msg, -1, NULL, 0);
    /* the loop is over: no iteration is in flight any more, whatever was planned ahead */
    s->completed_iter = UINT64_MAX;
    tdm_sched_reap_ending_ex(s, 1); /* the engine goes next: held rooms are dropped with it */
    publish(s);
}

tdm_status_t tdm_sched_run(tdm_sched_t *s)
{
    tdm_status_t st;
    if (!s->cfg.overlap && tdm_exec_can_pipeline(s->x))
        tdm_info(TDM_SUB_SCHED, "msg=\"pipelined overlap loop not used\" why=\"the lockstep "
                                "loop was chosen (--disable-overlap-schedule)\"");
    if (s->cfg.overlap && tdm_exec_can_pipeline(s->x)) {
        st = loop_pipeline(s);
    } else if (s->cfg.overlap) {
        if (pthread_create(&s->exec_thread, NULL, exec_main, s) != 0)
            return TDM_ERR_NOMEM;
        s->exec_started = 1;
        st = loop_overlap(s);
    } else {
        st = loop_lockstep(s);
    }
    if (st == TDM_OK) {
        /* the last plan: followers return from their loops */
        iter_buf_t *ib = &s->ib[0];
        tdm_plan_begin(&ib->pb);
        ib->it.n_reqs = 0;
        tdm_plan_finish(&ib->pb, ++s->iter, TDM_PLAN_SHUTDOWN, &ib->it.plan, &ib->it.plan_len,
                        &ib->it.hdr);
        st = run_sync(s, ib);
    } else {
        tdm_err(TDM_SUB_SCHED, "msg=\"executor failed; ending every request\" status=%s",
                tdm_status_name(st));
    }
    /* pages of requests in a plan that never completed are released too: the group is over */
    pthread_mutex_lock(&s->mu);
    s->stop = 1; /* later submissions are refused (BUSY) */
    pthread_mutex_unlock(&s->mu);
    tdm_sched_fail_all(s, st == TDM_OK ? TDM_ERR_ABORTED : st,
                       st == TDM_OK ? "the worker is shutting down" : "the worker group failed");
    if (s->exec_started) {
        pthread_mutex_lock(&s->qmu);
        s->q_quit = 1;
        pthread_cond_broadcast(&s->qcv);
        pthread_mutex_unlock(&s->qmu);
        pthread_join(s->exec_thread, NULL);
        s->exec_started = 0;
    }
    return st;
}
