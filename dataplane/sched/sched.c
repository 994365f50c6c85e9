/*
 * sched.c — the leader's scheduler (docs/serving.md "Scheduler"; contract in sched.h).
 *
 * Requests enter through a locked inbox (submit, any thread) and a locked abort list; the
 * scheduler thread owns everything else. Each accepted request is also counted in the progress
 * page (tdm_progress_note_submitted) and each one taken from the inbox in `taken`, published with
 * the iteration's queue counters: work the loop has not seen yet still reads as pending. Each
 * iteration it applies aborts and deadlines, releases requests that have ended once no in-flight
 * iteration uses their pages, batches every running request's next step (one decode token, or a
 * prefill chunk within --chunked-prefill-size), admits waiting requests FIFO while pages suffice
 * (sharing the longest cached prefix), and writes the plan. Pages are reserved for exactly the
 * positions the plan writes; when the pool is short the prefix cache is evicted LRU, then the most
 * recently admitted request is retracted (pages back, request at the head of the queue with its
 * generated tokens; recomputed later, bit-identically since the CPU path is chunk-invariant).
 *
 * Bookkeeping that makes the overlap loop safe: n_gen_sched / n_computed_sched count what the
 * planned iterations will have produced, n_gen what the scheduler has seen; a decode whose input
 * token is still being sampled is a PREV_TOKEN entry. A request's pages and slot are released
 * only when its last planned iteration has completed (last_iter <= completed_iter).
 *
 * Events: TOKEN per generated token (text through the tokenizer's stream decoder and the stop
 * string matcher), then exactly one FINISH or ERROR, after which the request is forgotten.
 *
 * This file: requests in (submit, abort, drain, stats), init and free; the rest of the scheduler
 * is listed in sched_state.h.
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

/* ---------------------------------------------------------------- requests */

void tdm_sched_sreq_free(tdm_sched_t *s, tdm_sreq_t *r)
{
    if (!r)
        return;
    tdm_kv_seq_free(s->pool, &r->kv);
    tdm_tok_stream_free(r->stream);
    for (uint32_t i = 0; i < r->n_stop_strs; i++)
        tdm_free(r->stop_strs[i]);
    tdm_free(r->stop_strs);
    tdm_free(r->stop_ids);
    tdm_free(r->tokens);
    tdm_free(r->text);
    tdm_free(r);
}

const char *tdm_finish_reason_name(tdm_finish_reason_t r)
{
    static const char *const names[] = {"length", "stop", "abort", "error"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == TDM_FINISH_MAX, "one name per reason");
    return (unsigned)r < TDM_FINISH_MAX ? names[r] : "unknown";
}

#define SET_ERR(...) snprintf(err, err_len, __VA_ARGS__)

/* Validate p and build a request (not queued yet). */
tdm_status_t tdm_sched_sreq_new(tdm_sched_t *s, const tdm_req_params_t *p, tdm_sreq_t **ret,
                                char *err, size_t err_len)
{
    tdm_status_t st;
    if (!s || !p || !p->cb) {
        SET_ERR("request: missing parameters or callback");
        return TDM_ERR_INVAL;
    }
    if (p->n_prompt == 0 || !p->prompt) {
        SET_ERR("request: the prompt is empty");
        return TDM_ERR_RANGE;
    }
    if (p->max_new_tokens == 0) {
        SET_ERR("request: max_new_tokens must be at least 1");
        return TDM_ERR_RANGE;
    }
    if ((uint64_t)p->n_prompt + p->max_new_tokens > s->max_context) {
        SET_ERR("request: %u prompt tokens + %u new tokens exceed the context length %u",
                p->n_prompt, p->max_new_tokens, s->max_context);
        return TDM_ERR_RANGE;
    }
    for (uint32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= s->vocab) {
            SET_ERR("request: prompt token %d at index %u is outside the vocabulary [0, %u)",
                    p->prompt[i], i, s->vocab);
            return TDM_ERR_RANGE;
        }
    if (tdm_sample_params_validate(&p->sampling, err, err_len) != TDM_OK)
        return TDM_ERR_INVAL;
    if (p->want_text && !s->cfg.tok) {
        SET_ERR("request: text output needs a tokenizer");
        return TDM_ERR_INVAL;
    }
    if (p->n_stop_ids > 1024 || (p->n_stop_ids && !p->stop_ids)) {
        SET_ERR("request: at most 1024 stop token ids");
        return TDM_ERR_RANGE;
    }
    tdm_sreq_t *r = tdm_calloc(1, sizeof(*r));
    r->n_prompt = p->n_prompt;
    r->max_new = p->max_new_tokens;
    r->tokens = tdm_calloc((size_t)p->n_prompt + p->max_new_tokens, sizeof(int32_t));
    memcpy(r->tokens, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    r->sp = p->sampling;
    const tdm_model_config_t *mc = s->cfg.mc;
    uint32_t n_eos = (!p->ignore_eos && mc) ? mc->n_eos : 0;
    r->stop_ids = tdm_calloc((size_t)p->n_stop_ids + n_eos + 1, sizeof(int32_t));
    if (p->n_stop_ids)
        memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof(int32_t));
    r->n_stop_ids = p->n_stop_ids;
    for (uint32_t i = 0; i < n_eos; i++)
        if (mc->eos_token_ids[i] >= 0)
            r->stop_ids[r->n_stop_ids++] = mc->eos_token_ids[i];
    if (p->n_stop_strs) {
        if (p->n_stop_strs > TDM_SAMPLE_MAX_STOP || !p->stop_strs) {
            SET_ERR("request: at most %d stop strings", TDM_SAMPLE_MAX_STOP);
            st = TDM_ERR_RANGE;
            goto err_free;
        }
        r->stop_strs = tdm_calloc(p->n_stop_strs, sizeof(char *));
        for (uint32_t i = 0; i < p->n_stop_strs; i++) {
            if (!p->stop_strs[i]) {
                SET_ERR("request: stop string %u is missing", i);
                st = TDM_ERR_INVAL;
                goto err_free;
            }
            r->stop_strs[r->n_stop_strs++] = tdm_strdup(p->stop_strs[i]);
        }
        if (!s->cfg.tok) {
            SET_ERR("request: stop strings need a tokenizer");
            st = TDM_ERR_INVAL;
            goto err_free;
        }
    }
    TDM_CHECK_GOTO(tdm_sample_stop_init(&r->stop, (const char *const *)r->stop_strs, r->n_stop_strs,
                                        err, err_len),
                   st, err_free);
    r->want_text = p->want_text;
    r->skip_special = p->skip_special;
    if (r->want_text || r->n_stop_strs) {
        st = tdm_tok_stream_init(s->cfg.tok, r->skip_special, &r->stream);
        if (st != TDM_OK) {
            SET_ERR("request: cannot start the stream decoder");
            goto err_free;
        }
    }
    r->deadline_us = p->deadline_us;
    r->cb = p->cb;
    r->ctx = p->ctx;
    r->submit_us = tdm_time_mono_us();
    tdm_kv_seq_init(&r->kv, s->max_pages_per_seq);
    *ret = r;
    return TDM_OK;
err_free:
    tdm_sched_sreq_free(s, r);
    return st;
}

tdm_status_t tdm_sched_submit(tdm_sched_t *s, const tdm_req_params_t *p, uint64_t *ret_id,
                              char *err, size_t err_len)
{
    tdm_sreq_t *r = NULL;
    tdm_status_t st;
    if (s && s->cfg.pd == TDM_SCHED_PD_PREFILL) {
        SET_ERR("this is a prefill worker: use the decode port (generation requests go to the "
                "decode group, which fetches its KV from here)");
        return TDM_ERR_BUSY;
    }
    TDM_TRY(tdm_sched_sreq_new(s, p, &r, err, err_len));
    pthread_mutex_lock(&s->mu);
    if (s->draining || s->stop) {
        pthread_mutex_unlock(&s->mu);
        SET_ERR("the worker is draining");
        st = TDM_ERR_BUSY;
        goto err_free;
    }
    if (s->pub.waiting + s->inbox.n >= s->cfg.max_queued) {
        pthread_mutex_unlock(&s->mu);
        SET_ERR("the queue is full (%u waiting)", s->cfg.max_queued);
        st = TDM_ERR_AGAIN;
        goto err_free;
    }
    r->id = ++s->next_id;
    rl_append(&s->inbox, r);
    /* visible to /health and the reporter before the loop looks (it may be hung) */
    tdm_progress_note_submitted(s->page);
    uint64_t id = r->id;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *ret_id = id;
    return TDM_OK;
err_free:
    tdm_sched_sreq_free(s, r);
    return st;
}

void tdm_sched_abort(tdm_sched_t *s, uint64_t req_id)
{
    if (!s || !req_id)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->n_aborts == s->cap_aborts) {
        s->cap_aborts = s->cap_aborts ? s->cap_aborts * 2 : 64;
        s->aborts = tdm_realloc(s->aborts, s->cap_aborts * sizeof(uint64_t));
    }
    s->aborts[s->n_aborts++] = req_id;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void tdm_sched_drain(tdm_sched_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    s->pub.draining = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void tdm_sched_resume(tdm_sched_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->draining = 0;
    s->pub.draining = 0;
    s->pub.drained = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void tdm_sched_stats(tdm_sched_t *s, tdm_sched_stats_t *ret)
{
    pthread_mutex_lock(&s->mu);
    *ret = s->pub;
    pthread_mutex_unlock(&s->mu);
}

void tdm_sched_kick(tdm_sched_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->kick = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void tdm_sched_stop(tdm_sched_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- init */

tdm_status_t tdm_sched_init(const tdm_sched_cfg_t *cfg, tdm_exec_t *x, tdm_sched_t **ret, char *err,
                            size_t err_len)
{
    if (!cfg || !x || !cfg->mc || cfg->max_running == 0 || cfg->max_queued == 0 ||
        cfg->chunk_tokens == 0) {
        SET_ERR("scheduler: bad configuration");
        return TDM_ERR_INVAL;
    }
    if ((unsigned)cfg->pd >= TDM_SCHED_PD_MAX || (cfg->pd != TDM_SCHED_PD_NONE) != !!cfg->xfer) {
        SET_ERR("scheduler: a PD role needs a transfer engine (and only a PD role has one)");
        return TDM_ERR_INVAL;
    }
    const tdm_exec_cfg_t *xc = tdm_exec_cfg(x);
    if (cfg->max_running > xc->max_seqs) {
        SET_ERR("scheduler: %u running requests exceed the executor's %u slots", cfg->max_running,
                xc->max_seqs);
        return TDM_ERR_INVAL;
    }
    tdm_sched_t *s = tdm_calloc(1, sizeof(*s));
    s->cfg = *cfg;
    s->x = x;
    s->pool = tdm_exec_pool(x);
    s->page = xc->page;
    s->ps = xc->page_size;
    s->num_pages = xc->num_pages;
    s->max_tokens = xc->max_tokens;
    s->vocab = cfg->mc->vocab_size;
    s->max_context = xc->max_context;
    if (s->max_context > s->num_pages * s->ps)
        s->max_context = s->num_pages * s->ps; /* a request must fit the pool on its own */
    s->max_pages_per_seq = (s->max_context + s->ps - 1) / s->ps;
    if (tdm_prefix_init(s->pool, s->ps, &s->cache) != TDM_OK) {
        tdm_free(s);
        SET_ERR("scheduler: prefix cache");
        return TDM_ERR_NOMEM;
    }
    s->hc = tdm_exec_hicache(x);
    tdm_prefix_set_tier(s->cache, s->hc);
    s->host_ids = tdm_calloc(s->max_pages_per_seq + 1, sizeof(uint32_t));
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->qmu, NULL);
    pthread_cond_init(&s->qcv, NULL);
    s->free_slots = tdm_calloc(cfg->max_running, sizeof(uint32_t));
    for (uint32_t i = 0; i < cfg->max_running; i++)
        s->free_slots[s->n_free_slots++] = cfg->max_running - 1 - i;
    s->tokbuf = tdm_calloc(s->max_tokens, sizeof(uint32_t));
    s->snap = tdm_calloc(cfg->max_running, sizeof(tdm_sreq_t *));
    s->shared = tdm_calloc(s->max_pages_per_seq + 1, sizeof(uint32_t));
    tdm_plan_builder_init(&s->pb_drop);
    for (int i = 0; i < 2; i++) {
        tdm_plan_builder_init(&s->ib[i].pb);
        s->ib[i].it.reqs = tdm_calloc(cfg->max_running, sizeof(tdm_sreq_t *));
        s->ib[i].it.results = tdm_calloc(cfg->max_running, sizeof(tdm_exec_result_t));
    }
    s->pub.pages_total = s->num_pages;
    s->pub.pages_free = tdm_kv_pool_free_pages(s->pool);
    *ret = s;
    return TDM_OK;
}

void tdm_sched_free(tdm_sched_t *s)
{
    if (!s)
        return;
    /* requests never run (submitted after the loop ended) are dropped without events: the
     * loop's fail_all gave every request it saw its terminal event */
    while (s->inbox.head) {
        tdm_sreq_t *r = s->inbox.head;
        rl_remove(&s->inbox, r);
        tdm_sched_sreq_free(s, r);
    }
    tdm_prefix_free(s->cache);
    tdm_plan_builder_free(&s->pb_drop);
    tdm_free(s->drop_ids);
    for (int i = 0; i < 2; i++) {
        tdm_plan_builder_free(&s->ib[i].pb);
        tdm_free(s->ib[i].it.tier);
        tdm_free(s->ib[i].it.reqs);
        tdm_free(s->ib[i].it.results);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->qmu);
    pthread_cond_destroy(&s->qcv);
    tdm_free(s->free_slots);
    tdm_free(s->tokbuf);
    tdm_free(s->snap);
    tdm_free(s->shared);
    tdm_free(s->host_ids);
    tdm_free(s->aborts);
    tdm_free(s);
}
