/*
 * sched_batch.c — building a plan (sched_state.h): intake from the inbox and the abort list,
 * deadlines, FIFO admission while pages suffice (sharing the longest cached prefix; PD decode
 * admits into TRANSFERRING), exact page reservation with LRU eviction then retraction of the most
 * recently admitted request, and the batch of every running request's next step.
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

/* ---------------------------------------------------------------- building a plan */

static void retract(tdm_sched_t *s, tdm_sreq_t *r)
{
    tdm_sched_release_pages(s, r);
    r->retract_pending = 0;
    r->n_gen_sched = r->n_gen;
    rl_remove(&s->running, r);
    r->state = SREQ_WAITING;
    rl_prepend(&s->waiting, r);
    s->st.retractions++;
    tdm_dbg(TDM_SUB_SCHED, "msg=\"retracted\" req=%llu generated=%u", (unsigned long long)r->id,
            r->n_gen);
}

/* Make r's page table cover n_tokens positions: evict cached pages, then retract the newest
 * request admitted no earlier than r. 1 on success; 0 when r must wait this iteration. */
static int ensure_pages(tdm_sched_t *s, tdm_sreq_t *r, uint32_t n_tokens)
{
    for (;;) {
        tdm_status_t st = tdm_kv_seq_reserve(s->pool, &r->kv, n_tokens);
        if (st == TDM_OK)
            return 1;
        if (st != TDM_ERR_AGAIN)
            return 0;
        uint32_t need = (n_tokens + s->ps - 1) / s->ps - r->kv.n_pages;
        uint32_t free_now = tdm_kv_pool_free_pages(s->pool);
        if (tdm_prefix_evict(s->cache, need - free_now) > 0)
            continue;
        tdm_sreq_t *victim = NULL;
        for (tdm_sreq_t *q = s->running.head; q; q = q->next)
            if (!q->retract_pending && q->admit_seq >= r->admit_seq &&
                (!victim || q->admit_seq > victim->admit_seq))
                victim = q;
        if (!victim)
            return 0;
        if (tdm_sched_in_flight(s, victim)) {
            victim->retract_pending = 1; /* its pages come back after the in-flight iteration */
            return 0;
        }
        retract(s, victim);
        if (victim == r)
            return 0;
    }
}

/* Schedule r's next step into the plan; returns the tokens it takes (0 = nothing). */
static uint32_t schedule_one(tdm_sched_t *s, tdm_sreq_t *r, iter_buf_t *ib, uint32_t *budget,
                             uint32_t *prefill_budget, uint64_t iter)
{
    if (r->state != SREQ_RUNNING || r->retract_pending || r->n_gen_sched >= r->max_new)
        return 0;
    uint32_t len = r->n_prompt + r->n_gen_sched, c = r->n_computed_sched;
    uint32_t want = len - c, n = want;
    if (want > 1) {
        if (n > *prefill_budget)
            n = *prefill_budget;
    }
    if (n > *budget)
        n = *budget;
    if (n == 0 || ib->it.n_reqs >= s->cfg.max_running)
        return 0;
    if (!ensure_pages(s, r, c + n))
        return 0;
    uint32_t flags = c + n == len ? TDM_PLAN_LOGITS : 0;
    uint32_t i0 = 0;
    if (c >= r->n_prompt && c - r->n_prompt >= r->n_gen) {
        flags |= TDM_PLAN_PREV_TOKEN; /* being sampled by the iteration still running */
        s->tokbuf[0] = 0;
        i0 = 1;
    }
    for (uint32_t i = i0; i < n; i++)
        s->tokbuf[i] = (uint32_t)r->tokens[c + i];
    uint32_t n_pages = (c + n + s->ps - 1) / s->ps;
    if (tdm_plan_add(&ib->pb, r->slot, c, flags, s->tokbuf, n, r->kv.pages, n_pages) != TDM_OK)
        return 0;
    ib->it.reqs[ib->it.n_reqs++] = r;
    if (r->load_ticket > ib->it.kv_need)
        ib->it.kv_need = r->load_ticket;
    if (n == 1) { /* a one-token row attends positions [0, c] */
        ib->it.ctx_rows++;
        ib->it.ctx_sum += c + 1;
        if (c + 1 > ib->it.ctx_max)
            ib->it.ctx_max = c + 1;
    }
    r->n_computed_sched += n;
    if (flags & TDM_PLAN_LOGITS)
        r->n_gen_sched++;
    r->last_iter = iter;
    *budget -= n;
    if (want > 1)
        *prefill_budget -= n;
    /* a prompt's last token alone (a chunk boundary, or a cached prefix, one short of the prompt)
     * is prefill too: /metrics' prefill + cached tokens sum to the prompts (docs/contracts.md) */
    if (want > 1 || c < r->n_prompt)
        s->st.tokens_prefilled += n;
    return n;
}

/* Take the k pages of r's prompt prefix shared from the prefix cache, when the `need` pages it
 * wants beyond them are free or evictable (shared pages stop being evictable). Returns 0, with
 * the m host-tier pages matched after them unpinned, when they are not. */
static int share_prefix(tdm_sched_t *s, tdm_sreq_t *r, uint32_t k, uint32_t m, uint32_t need)
{
    uint32_t avail = tdm_kv_pool_free_pages(s->pool) + tdm_prefix_evictable(s->cache);
    for (uint32_t i = 0; i < k; i++)
        avail -= tdm_kv_page_refcount(s->pool, s->shared[i]) == 1;
    if (need > avail) {
        tdm_hicache_unpin(s->hc, s->host_ids, m);
        return 0;
    }
    if (!r->kv.pages)
        r->kv.pages = tdm_calloc(r->kv.cap_pages, sizeof(uint32_t));
    for (uint32_t i = 0; i < k; i++) {
        (void)tdm_kv_page_ref(s->pool, s->shared[i]);
        r->kv.pages[i] = s->shared[i];
    }
    r->kv.n_pages = k;
    r->kv.n_tokens = k * s->ps;
    return 1;
}

/* Decode (PD): the prompt's prefix this worker holds (pd_prefix: pages of its prefix cache
 * shared, pages continuing it in the HiCache tier loaded), pages for the rest, and TRANSFER_INFO
 * naming only those (docs/serving.md "Scheduler hooks"); the request waits in the TRANSFERRING
 * list (no batch) until the room is SUCCESS or FAILED. Prefill computes the whole prompt all the
 * same and sends at least the last page. A request retracted after its transfer (n_gen > 0) is
 * recomputed locally like any other. */
static tdm_sreq_t *pd_admit_decode(tdm_sched_t *s, tdm_sreq_t *r)
{
    const uint32_t all = (r->n_prompt + s->ps - 1) / s->ps;
    const uint32_t max_shared = (r->n_prompt - 1) / s->ps; /* prefill sends the last page */
    uint32_t k = 0, m = 0;
    if (s->cfg.pd_prefix) {
        k = tdm_prefix_match(s->cache, r->tokens, max_shared, s->shared);
        if (s->hc && k < max_shared)
            m = tdm_hicache_match(s->hc, r->tokens, k, max_shared - k,
                                  tdm_prefix_chain(r->tokens, k, s->ps), s->host_ids);
    }
    uint32_t need = all - k;
    if (!share_prefix(s, r, k, m, need))
        return NULL;
    uint32_t free_now = tdm_kv_pool_free_pages(s->pool); /* sharing took no free page */
    if (need > free_now)
        (void)tdm_prefix_evict(s->cache, need - free_now);
    if (tdm_kv_seq_reserve(s->pool, &r->kv, r->n_prompt) != TDM_OK) {
        tdm_hicache_unpin(s->hc, s->host_ids, m);
        tdm_kv_seq_release(s->pool, &r->kv);
        return NULL;
    }
    const uint32_t held = k + m;
    tdm_frame_sampling_t fs = {.seed = r->sp.seed,
                               .temperature = r->sp.temperature,
                               .top_p = r->sp.top_p,
                               .min_p = r->sp.min_p,
                               .top_k = r->sp.top_k,
                               .repetition_penalty = r->sp.repetition_penalty,
                               .presence_penalty = r->sp.presence_penalty,
                               .frequency_penalty = r->sp.frequency_penalty,
                               .top_logprobs = r->sp.top_logprobs};
    uint64_t room = 0;
    tdm_status_t st =
        tdm_xfer_decode_send_info(s->cfg.xfer, (const uint32_t *)r->tokens, r->n_prompt,
                                  r->kv.pages + held, all - held, &fs, &room);
    if (st != TDM_OK) {
        /* nothing was loaded yet (at TP > 1 nothing journaled): the pages simply go back */
        tdm_hicache_unpin(s->hc, s->host_ids, m);
        tdm_kv_seq_release(s->pool, &r->kv);
    }
    if (st == TDM_ERR_AGAIN) /* rooms or aux slots exhausted: retry next iteration */
        return NULL;
    if (st != TDM_OK) {
        s->st.pd_commit_failed++;
        /* no prefill registered: BUSY (HTTP 503, retry later) like a draining worker */
        tdm_sched_finish(s, r, TDM_FINISH_ERROR, st == TDM_ERR_PEER ? TDM_ERR_BUSY : st,
                         st == TDM_ERR_PEER
                             ? "no prefill group is registered with this decode worker"
                             : "the KV transfer could not be started",
                         -1, NULL, 0);
        return NULL;
    }
    r->room = room;
    rl_remove(&s->waiting, r);
    r->state = SREQ_XFER;
    r->slot = s->free_slots[--s->n_free_slots];
    r->admit_seq = ++s->admit_seq;
    if (!r->admitted_us) /* the first admission: a retracted request re-queues */
        r->admitted_us = tdm_time_mono_us();
    rl_append(&s->xferring, r);
    if (r->cached_tokens < held * s->ps)
        r->cached_tokens = held * s->ps;
    s->st.prompt_tokens_cached += (uint64_t)held * s->ps;
    if (m) {
        /* the host-tier pages load on the copy thread while the rest is transferred; the first
         * decode step waits for them through the gate. A load that cannot be queued (a job slot
         * is always free for a newly admitted request: max_jobs = slots + 1) ends the request:
         * the room already names only the other pages */
        st = tdm_hicache_load(s->hc, s->host_ids, r->kv.pages + k, m, &r->load_ticket);
        if (st != TDM_OK) {
            tdm_hicache_unpin(s->hc, s->host_ids, m);
            tdm_sched_pd_abort_room(s, r, "host-tier load could not be queued");
            tdm_sched_finish(s, r, TDM_FINISH_ERROR, st,
                             "the prompt's host-tier pages could not be loaded", -1, NULL, 0);
            return NULL;
        }
        r->hc_loaded = 1;
        r->hc_ticket = r->load_ticket;
        s->st.host_hit_tokens += (uint64_t)m * s->ps;
    }
    return r;
}

/* Admit the head of the queue if a slot is free and the pages its prompt needs are free or
 * evictable; shares the longest cached prefix. */
static tdm_sreq_t *admit_head(tdm_sched_t *s)
{
    tdm_sreq_t *r = s->waiting.head;
    if (!r || s->n_free_slots == 0)
        return NULL;
    if (s->cfg.pd == TDM_SCHED_PD_DECODE && r->n_gen == 0)
        return pd_admit_decode(s, r);
    uint32_t len = r->n_prompt + r->n_gen;
    uint32_t max_shared = (len - 1) / s->ps; /* keep at least one token to compute */
    uint32_t k = tdm_prefix_match(s->cache, r->tokens, max_shared, s->shared);
    uint32_t m = 0; /* pages continuing the prefix from the host tier */
    if (s->hc && k < max_shared)
        m = tdm_hicache_match(s->hc, r->tokens, k, max_shared - k,
                              tdm_prefix_chain(r->tokens, k, s->ps), s->host_ids);
    uint32_t need = (len + s->ps - 1) / s->ps - k;
    if (!share_prefix(s, r, k, m, need))
        return NULL;
    if (m) {
        /* device pages for the host pages, then their load on the copy thread; pages that
         * cannot be loaded are simply computed */
        uint32_t free_now = tdm_kv_pool_free_pages(s->pool);
        if (m > free_now)
            (void)tdm_prefix_evict(s->cache, m - free_now);
        if (tdm_kv_seq_reserve(s->pool, &r->kv, (k + m) * s->ps) != TDM_OK ||
            tdm_hicache_load(s->hc, s->host_ids, r->kv.pages + k, m, &r->load_ticket) != TDM_OK) {
            tdm_hicache_unpin(s->hc, s->host_ids, m);
            m = 0;
        } else {
            r->hc_loaded = 1;
            r->hc_ticket = r->load_ticket;
            s->st.host_hit_tokens += (uint64_t)m * s->ps;
        }
    }
    k += m;
    r->n_computed_sched = k * s->ps;
    r->n_gen_sched = r->n_gen;
    if (r->cached_tokens < k * s->ps)
        r->cached_tokens = k * s->ps;
    s->st.prompt_tokens_cached += (uint64_t)k * s->ps;
    rl_remove(&s->waiting, r);
    r->state = SREQ_RUNNING;
    r->slot = s->free_slots[--s->n_free_slots];
    r->admit_seq = ++s->admit_seq;
    if (!r->admitted_us) /* the first admission: a retracted request re-queues */
        r->admitted_us = tdm_time_mono_us();
    rl_append(&s->running, r);
    return r;
}

/* A request ends before its room did: abort the room (decode: ABORT frame, pages quarantined
 * until ABORT_ACK; prefill: STATUS FAILED after the flush). The room stays with the request
 * so its pages are freed only once tdm_xfer_release() lets them go. */
void tdm_sched_pd_abort_room(tdm_sched_t *s, tdm_sreq_t *r, const char *why)
{
    if (r->room && (r->state == SREQ_XFER || s->cfg.pd == TDM_SCHED_PD_PREFILL))
        (void)tdm_xfer_abort(s->cfg.xfer, r->room, why);
}

/* Take the inbox and the abort list, apply deadlines, reap. */
void tdm_sched_intake(tdm_sched_t *s)
{
    uint64_t *ab = NULL;
    uint32_t n_ab = 0;
    pthread_mutex_lock(&s->mu);
    while (s->inbox.head) {
        tdm_sreq_t *r = s->inbox.head;
        rl_remove(&s->inbox, r);
        r->state = SREQ_WAITING;
        r->slot = UINT32_MAX;
        rl_append(&s->waiting, r);
        s->taken++;
    }
    if (s->n_aborts) {
        ab = tdm_malloc(s->n_aborts * sizeof(uint64_t));
        memcpy(ab, s->aborts, s->n_aborts * sizeof(uint64_t));
        n_ab = s->n_aborts;
        s->n_aborts = 0;
    }
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < n_ab; i++) {
        rlist_t *lists[3] = {&s->waiting, &s->running, &s->xferring};
        for (int l = 0; l < 3; l++)
            for (tdm_sreq_t *r = lists[l]->head; r; r = r->next)
                if (r->id == ab[i]) {
                    tdm_sched_pd_abort_room(s, r, "client abort");
                    tdm_sched_finish(s, r, TDM_FINISH_ABORT, TDM_ERR_ABORTED, "aborted", -1, NULL,
                                     0);
                    l = 3;
                    break;
                }
    }
    tdm_free(ab);
    uint64_t now = tdm_time_mono_us();
    rlist_t *lists[3] = {&s->waiting, &s->running, &s->xferring};
    for (int l = 0; l < 3; l++)
        for (tdm_sreq_t *r = lists[l]->head, *nx; r; r = nx) {
            nx = r->next;
            if (r->deadline_us && now > r->deadline_us) {
                tdm_sched_pd_abort_room(s, r, "deadline exceeded");
                tdm_sched_finish(s, r, TDM_FINISH_ERROR, TDM_ERR_TIMEOUT, "deadline exceeded", -1,
                                 NULL, 0);
            }
        }
    tdm_sched_reap_ending(s);
    for (tdm_sreq_t *r = s->running.head, *nx; r; r = nx) {
        nx = r->next;
        if (r->retract_pending && !tdm_sched_in_flight(s, r))
            retract(s, r);
    }
}

/* Build the plan of iteration `iter` into ib; returns its kind. */
tdm_plan_kind_t tdm_sched_build(tdm_sched_t *s, iter_buf_t *ib, uint64_t iter)
{
    uint32_t budget = s->max_tokens, prefill_budget = s->cfg.chunk_tokens;
    /* decode (PD): the TRANSFER_INFO frames of the requests admitted here leave in one write */
    tdm_xfer_cork(s->cfg.xfer);
    tdm_sched_intake(s);
    if (s->cfg.pd == TDM_SCHED_PD_DECODE)
        tdm_sched_pd_poll_decode(s);
    else if (s->cfg.pd == TDM_SCHED_PD_PREFILL)
        tdm_sched_pd_poll_prefill(s);
    tdm_plan_begin(&ib->pb);
    ib->it.n_reqs = 0;
    ib->it.kv_need = 0;
    ib->it.poison_reads = ib->it.gate_bypasses = 0;
    ib->it.ctx_rows = ib->it.ctx_max = 0;
    ib->it.ctx_sum = 0;
    /* a snapshot: scheduling one request may retract later ones to the queue */
    uint32_t n_run = 0;
    for (tdm_sreq_t *r = s->running.head; r; r = r->next)
        s->snap[n_run++] = r;
    for (uint32_t i = 0; i < n_run; i++)
        if (s->snap[i]->state == SREQ_RUNNING)
            schedule_one(s, s->snap[i], ib, &budget, &prefill_budget, iter);
    while (budget > 0 && ib->it.n_reqs < s->cfg.max_running) {
        tdm_sreq_t *r = admit_head(s);
        if (!r)
            break;
        schedule_one(s, r, ib, &budget, &prefill_budget, iter);
    }
    tdm_xfer_uncork(s->cfg.xfer);
    tdm_plan_finish(&ib->pb, iter, TDM_PLAN_IDLE, &ib->it.plan, &ib->it.plan_len, &ib->it.hdr);
    ib->it.waiting = s->waiting.n;
    ib->it.running = s->running.n;
    ib->it.taken = s->taken; /* the scheduler thread is the only writer: no lock to read it */
    return (tdm_plan_kind_t)ib->it.hdr.kind;
}
