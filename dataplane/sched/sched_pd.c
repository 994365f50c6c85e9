/*
 * sched_pd.c — PD in the scheduler (docs/serving.md "Prefill/decode disaggregation";
 * sched_state.h): prefill takes the rooms the transfer engine announces as requests; decode polls
 * its TRANSFERRING requests' rooms and commits or retracts them.
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

/* ---------------------------------------------------------------- PD */

#define PD_PREFIX_EVERY_US 10000000ull

/* Telemetry, both roles, at most every 10 s while rooms come: the pages the rooms named and the
 * leading pages decode held instead (docs/contracts.md §d), with their bytes, since the last
 * report — event pd_prefix (docs/alerts.md). */
static void pd_prefix_report(tdm_sched_t *s)
{
    uint64_t now = tdm_time_mono_us();
    if (!s->cfg.on_event || now - s->pd_rep_us < PD_PREFIX_EVERY_US)
        return;
    tdm_xfer_stats_t st;
    tdm_xfer_stats(s->cfg.xfer, &st);
    const uint64_t v[4] = {st.room_pages, st.room_bytes, st.prefix_pages_skipped,
                           st.prefix_bytes_saved};
    s->pd_rep_us = now;
    if (v[0] == s->pd_rep[0])
        return;
    json_t *d = json_pack("{s:I,s:I,s:I,s:I}", "pages_named", (json_int_t)(v[0] - s->pd_rep[0]),
                          "bytes_named", (json_int_t)(v[1] - s->pd_rep[1]), "pages_skipped",
                          (json_int_t)(v[2] - s->pd_rep[2]), "bytes_saved",
                          (json_int_t)(v[3] - s->pd_rep[3]));
    memcpy(s->pd_rep, v, sizeof(v));
    s->cfg.on_event(s->cfg.on_event_ctx, "pd_prefix", NULL, d);
}

static void pd_noop_cb(void *ctx, const tdm_req_event_t *ev)
{
    (void)ctx;
    (void)ev;
}

/* Prefill: one room taken from the engine becomes a request of max_new_tokens 1. A room that
 * cannot be served is aborted at once (decode sees STATUS FAILED with the reason). */
static void pd_take_room(tdm_sched_t *s, tdm_xfer_request_t *q)
{
    char err[256] = "";
    tdm_sreq_t *r = NULL;
    tdm_req_params_t p = {0};
    p.prompt = (const int32_t *)q->prompt_ids;
    p.n_prompt = q->n_prompt;
    p.max_new_tokens = 1;
    tdm_sample_params_default(&p.sampling);
    p.sampling.seed = q->sampling.seed;
    p.sampling.temperature = q->sampling.temperature;
    p.sampling.top_k = q->sampling.top_k;
    p.sampling.top_p = q->sampling.top_p;
    p.sampling.min_p = q->sampling.min_p;
    p.sampling.repetition_penalty = q->sampling.repetition_penalty;
    p.sampling.presence_penalty = q->sampling.presence_penalty;
    p.sampling.frequency_penalty = q->sampling.frequency_penalty;
    p.sampling.logprobs = 1; /* the aux carries the first token's logprob */
    p.sampling.top_logprobs = q->sampling.top_logprobs;
    p.ignore_eos = 1;
    p.cb = pd_noop_cb;
    s->st.pd_rooms_taken++;
    for (uint32_t i = 0; i < q->n_prompt; i++)
        if (q->prompt_ids[i] >= s->vocab) {
            snprintf(err, sizeof(err), "prompt token %u at index %u is outside the vocabulary",
                     q->prompt_ids[i], i);
            goto err_abort;
        }
    const uint32_t all = (q->n_prompt + s->ps - 1) / s->ps;
    if (q->n_pages == 0 || q->n_pages > all) {
        snprintf(err, sizeof(err), "%u pages for %u prompt tokens at page size %u", q->n_pages,
                 q->n_prompt, s->ps);
        goto err_abort;
    }
    if (tdm_sched_sreq_new(s, &p, &r, err, sizeof(err)) != TDM_OK)
        goto err_abort;
    r->room = q->room;
    r->pd_held = all - q->n_pages; /* computed here all the same: decode just has them */
    pthread_mutex_lock(&s->mu);
    r->id = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    r->state = SREQ_WAITING;
    r->slot = UINT32_MAX;
    rl_append(&s->waiting, r);
    return;
err_abort:
    tdm_warn(TDM_SUB_SCHED, "msg=\"prefill room refused\" room=%llu err=\"%s\"",
             (unsigned long long)q->room, err);
    (void)tdm_xfer_abort(s->cfg.xfer, q->room, err);
    (void)tdm_xfer_release(s->cfg.xfer, q->room);
}

/* Prefill, once per iteration: take new rooms (the second tdm_sched_intake, beside submit) while
 * the queue has room, and end requests whose room decode aborted meanwhile (no point computing
 * them). */
void tdm_sched_pd_poll_prefill(tdm_sched_t *s)
{
    int draining;
    pthread_mutex_lock(&s->mu);
    draining = s->draining || s->stop;
    pthread_mutex_unlock(&s->mu);
    pd_prefix_report(s);
    while (s->waiting.n < s->cfg.max_queued) {
        tdm_xfer_request_t q = {0};
        if (tdm_xfer_prefill_next(s->cfg.xfer, &q) != TDM_OK)
            break;
        if (draining) {
            (void)tdm_xfer_abort(s->cfg.xfer, q.room, "prefill worker draining");
            (void)tdm_xfer_release(s->cfg.xfer, q.room);
        } else {
            pd_take_room(s, &q);
        }
        tdm_xfer_request_clear(&q);
    }
    rlist_t *lists[2] = {&s->waiting, &s->running};
    for (int l = 0; l < 2; l++)
        for (tdm_sreq_t *r = lists[l]->head, *nx; r; r = nx) {
            nx = r->next;
            tdm_kvpoll_t k;
            if (!r->room || r->n_gen > 0)
                continue;
            if (tdm_xfer_poll(s->cfg.xfer, r->room, &k) != TDM_OK || k == TDM_KVPOLL_FAILED)
                tdm_sched_finish(s, r, TDM_FINISH_ABORT, TDM_ERR_ABORTED, "room aborted by decode",
                                 -1, NULL, 0);
        }
}

/* Decode, once per iteration: every TRANSFERRING request is polled; SUCCESS → verify (checksums
 * over our memory, aux room id) and the aux token becomes the first generated token, then the
 * request decodes normally; FAILED or a verification failure → ERROR. */
void tdm_sched_pd_poll_decode(tdm_sched_t *s)
{
    pd_prefix_report(s);
    for (tdm_sreq_t *r = s->xferring.head, *nx; r; r = nx) {
        nx = r->next;
        tdm_kvpoll_t k = TDM_KVPOLL_FAILED;
        tdm_status_t st = tdm_xfer_poll(s->cfg.xfer, r->room, &k);
        if (st == TDM_OK && k != TDM_KVPOLL_SUCCESS && k != TDM_KVPOLL_FAILED)
            continue;
        tdm_xfer_aux_t aux;
        if (st == TDM_OK && k == TDM_KVPOLL_SUCCESS)
            st = tdm_xfer_decode_commit(s->cfg.xfer, r->room, &aux);
        else if (st == TDM_OK)
            st = TDM_ERR_PEER;
        if (st == TDM_OK && aux.first_token >= s->vocab)
            st = TDM_ERR_CORRUPT;
        if (st != TDM_OK) {
            s->st.pd_commit_failed++;
            tdm_sched_finish(
                s, r, TDM_FINISH_ERROR, st,
                st == TDM_ERR_CORRUPT
                    ? "the transferred KV failed verification (checksum or aux mismatch)"
                    : "the KV transfer from the prefill group failed",
                -1, NULL, 0);
            continue;
        }
        if (tdm_sched_room_released(s, r, 0) == 0)
            tdm_dbg(TDM_SUB_SCHED, "msg=\"room not released after commit\" room=%llu",
                    (unsigned long long)r->room);
        rl_remove(&s->xferring, r);
        r->state = SREQ_RUNNING;
        rl_append(&s->running, r);
        r->tokens[r->n_prompt] = (int32_t)aux.first_token;
        r->n_sampled = 1;
        r->n_gen_sched = 1;
        r->n_computed_sched = r->n_prompt;
        tdm_exec_result_t res = {0};
        res.req = r;
        res.token = (int32_t)aux.first_token;
        res.status = TDM_OK;
        res.sample.id = res.token;
        res.sample.logprob = aux.first_logprob;
        res.sample.n_top =
            aux.n_top < TDM_SAMPLE_MAX_TOP_LOGPROBS ? aux.n_top : TDM_SAMPLE_MAX_TOP_LOGPROBS;
        for (uint32_t i = 0; i < res.sample.n_top; i++) {
            res.sample.top_ids[i] = (int32_t)aux.top[i].id;
            res.sample.top_logprobs[i] = aux.top[i].logprob;
        }
        tdm_sched_on_token(s, r, &res);
    }
}
