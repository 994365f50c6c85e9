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
    /* overlap: the executor thread and its depth-1 queue (under qmu) */
    pthread_t exec_thread;
    int exec_started;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    iter_buf_t *q_in, *q_done;
    int q_quit;
};

/* ---------------------------------------------------------------- lists */

static void rl_append(rlist_t *l, tdm_sreq_t *r)
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

static void rl_prepend(rlist_t *l, tdm_sreq_t *r)
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

static void rl_remove(rlist_t *l, tdm_sreq_t *r)
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

/* ---------------------------------------------------------------- requests */

static void sreq_free(tdm_sched_t *s, tdm_sreq_t *r)
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
static tdm_status_t sreq_new(tdm_sched_t *s, const tdm_req_params_t *p, tdm_sreq_t **ret, char *err,
                             size_t err_len)
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
    sreq_free(s, r);
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
    TDM_TRY(sreq_new(s, p, &r, err, err_len));
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
    sreq_free(s, r);
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

/* ---------------------------------------------------------------- events */

static void text_append(tdm_sreq_t *r, const char *t, size_t n)
{
    if (r->text_len + n + 1 > r->text_cap) {
        r->text_cap = (r->text_len + n + 1) * 2;
        r->text = tdm_realloc(r->text, r->text_cap);
    }
    memcpy(r->text + r->text_len, t, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
}

static int in_flight(const tdm_sched_t *s, const tdm_sreq_t *r)
{
    return r->last_iter > s->completed_iter;
}

/* The one terminal event; the request stays (ENDING) until its pages can be released. */
static void finish(tdm_sched_t *s, tdm_sreq_t *r, tdm_finish_reason_t why, tdm_status_t status,
                   const char *msg, int32_t stop_token, const char *text, size_t text_len)
{
    tdm_req_event_t ev = {0};
    ev.kind = why == TDM_FINISH_ERROR ? TDM_REQ_ERROR : TDM_REQ_FINISH;
    ev.req_id = r->id;
    ev.finish = why;
    ev.matched_stop_token = stop_token;
    ev.status = status;
    ev.message = msg;
    ev.text = text ? text : "";
    ev.text_len = text ? text_len : 0;
    ev.prompt_tokens = r->n_prompt;
    ev.completion_tokens = r->n_gen;
    ev.cached_tokens = r->cached_tokens;
    ev.ttft_us = r->first_token_us ? r->first_token_us - r->submit_us : 0;
    ev.queue_us = r->admitted_us ? r->admitted_us - r->submit_us : 0;
    ev.token = -1;
    r->cb(r->ctx, &ev);
    if (why == TDM_FINISH_ABORT)
        s->st.requests_aborted++;
    else if (why == TDM_FINISH_ERROR)
        s->st.requests_failed++;
    else
        s->st.requests_finished++;
    if (r->state == SREQ_WAITING)
        rl_remove(&s->waiting, r);
    else if (r->state == SREQ_RUNNING)
        rl_remove(&s->running, r);
    else if (r->state == SREQ_XFER)
        rl_remove(&s->xferring, r);
    r->state = SREQ_ENDING;
    r->ending_next = s->ending;
    s->ending = r;
}

static void hc_event(tdm_sched_t *s, const char *type, const char *reason, json_t *data)
{
    if (s->cfg.on_event)
        s->cfg.on_event(s->cfg.on_event_ctx, type, reason, data);
    else
        json_decref(data);
}

/* Wait for r's host-tier load and its verification; a mismatch is CORRUPTION evidence
 * (hicache_load_mismatch naming the device page and the layer) and marks r's KV bad. Returns 0
 * when r's KV is bad. */
static int hc_retire(tdm_sched_t *s, tdm_sreq_t *r)
{
    uint32_t page = 0, layer = 0;
    if (!r->load_ticket)
        return !r->kv_bad;
    tdm_status_t st = tdm_hicache_wait(s->hc, r->load_ticket, &page, &layer);
    r->load_ticket = 0;
    if (st == TDM_OK)
        return !r->kv_bad;
    r->kv_bad = 1;
    s->st.corruption_events++;
    tdm_err(TDM_SUB_SCHED, "msg=\"HiCache load failed verification\" req=%llu page=%u layer=%u",
            (unsigned long long)r->id, page, layer);
    hc_event(s, "hicache_load_mismatch", "host tier load checksum mismatch",
             json_pack("{s:[i],s:i,s:s,s:I}", "pages", (json_int_t)page, "layer", (json_int_t)layer,
                       "tier", "host", "req", (json_int_t)r->id));
    return 0;
}

/* Give a request's pages back: full computed pages go to the prefix cache first. */
static void release_pages(tdm_sched_t *s, tdm_sreq_t *r)
{
    /* a load in flight writes these pages: it completes (and is checked) before they go back */
    hc_retire(s, r);
    uint32_t full = r->kv_bad ? 0 : r->n_computed_sched / s->ps;
    if (full > r->kv.n_pages)
        full = r->kv.n_pages;
    if (full)
        tdm_prefix_insert(s->cache, r->tokens, r->kv.pages, full);
    tdm_kv_seq_release(s->pool, &r->kv);
    if (r->slot != UINT32_MAX) {
        s->free_slots[s->n_free_slots++] = r->slot;
        r->slot = UINT32_MAX;
    }
    r->n_computed_sched = 0;
}

/* PD: may r's pages go back? Its room must be released first: prefill pages are read by puts
 * until the room is terminal and flushed, decode pages stay quarantined until ABORT_ACK (I5).
 * `force` (the loop is over, the engine is torn down next) drops the room without asking. */
static int room_released(tdm_sched_t *s, tdm_sreq_t *r, int force)
{
    if (!r->room)
        return 1;
    if (!force) {
        tdm_status_t st = tdm_xfer_release(s->cfg.xfer, r->room);
        if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
            return 0; /* BUSY (moving/quarantined) or STATE (not terminal yet) */
    }
    r->room = 0;
    return 1;
}

static void reap_ending_ex(tdm_sched_t *s, int force)
{
    tdm_sreq_t **link = &s->ending;
    while (*link) {
        tdm_sreq_t *r = *link;
        if (in_flight(s, r) || !room_released(s, r, force)) {
            link = &r->ending_next;
            continue;
        }
        *link = r->ending_next;
        release_pages(s, r);
        sreq_free(s, r);
    }
}

static void reap_ending(tdm_sched_t *s)
{
    reap_ending_ex(s, 0);
}

/* Prefill (PD): the room's first token is sampled and its KV is final (the iteration that wrote
 * the last prompt chunk has completed: results are processed only after that), so hand the pages
 * and the aux to the engine. The pages stay with the request until the room is released. */
static void pd_prefill_send(tdm_sched_t *s, tdm_sreq_t *r, const tdm_exec_result_t *res)
{
    tdm_xfer_aux_t aux = {0};
    aux.room = r->room;
    aux.first_token = (uint32_t)res->token;
    aux.first_logprob = res->sample.logprob;
    aux.n_top = res->sample.n_top < TDM_FRAME_MAX_TOP ? res->sample.n_top : TDM_FRAME_MAX_TOP;
    for (uint32_t i = 0; i < aux.n_top; i++) {
        aux.top[i].id = (uint32_t)res->sample.top_ids[i];
        aux.top[i].logprob = res->sample.top_logprobs[i];
    }
    uint32_t n_pages = (r->n_prompt + s->ps - 1) / s->ps;
    tdm_status_t st = n_pages <= r->kv.n_pages
                          ? tdm_xfer_prefill_send(s->cfg.xfer, r->room, r->kv.pages, n_pages, &aux)
                          : TDM_ERR_STATE;
    if (st != TDM_OK) {
        /* aborted by decode meanwhile, or refused: make the room terminal so it is released */
        tdm_dbg(TDM_SUB_SCHED, "msg=\"prefill send refused\" room=%llu status=%s",
                (unsigned long long)r->room, tdm_status_name(st));
        (void)tdm_xfer_abort(s->cfg.xfer, r->room, "prefill send failed");
    }
}

/* One processed token: TOKEN event, then stop checks. */
static void on_token(tdm_sched_t *s, tdm_sreq_t *r, const tdm_exec_result_t *res)
{
    uint64_t now = tdm_time_mono_us();
    if (res->status != TDM_OK) {
        finish(s, r, TDM_FINISH_ERROR, res->status, "sampling failed (non-finite logits)", -1, NULL,
               0);
        return;
    }
    r->n_gen++;
    s->st.tokens_generated++;
    if (!r->first_token_us)
        r->first_token_us = now;
    if (s->cfg.pd == TDM_SCHED_PD_PREFILL && r->room && r->n_gen == 1)
        pd_prefill_send(s, r, res);
    int32_t tok = res->token;
    int is_stop = tdm_sample_is_stop_id(r->stop_ids, r->n_stop_ids, tok);
    tdm_req_event_t ev = {0};
    ev.kind = TDM_REQ_TOKEN;
    ev.req_id = r->id;
    ev.token = tok;
    ev.sample = res->sample;
    ev.text = "";
    ev.matched_stop_token = -1;
    size_t emit_from = r->emitted;
    tdm_sample_stop_result_t sr = {TDM_STOP_NONE, r->emitted, 0};
    if (r->stream && !is_stop) {
        char *piece = NULL;
        size_t n = 0;
        if (tdm_tok_stream_step(r->stream, (uint32_t)tok, &piece, &n) == TDM_OK) {
            text_append(r, piece, n);
            tdm_free(piece);
        }
        if (tdm_sample_stop_scan(&r->stop, r->text, r->text_len, r->emitted, &sr) == TDM_OK)
            r->emitted = sr.emit;
    }
    if (r->want_text) {
        ev.text = r->text ? r->text + emit_from : "";
        ev.text_len = r->emitted - emit_from;
    }
    r->cb(r->ctx, &ev);
    if (sr.kind == TDM_STOP_MATCHED) {
        finish(s, r, TDM_FINISH_STOP, TDM_OK, NULL, -1, NULL, 0);
        return;
    }
    if (is_stop || r->n_gen >= r->max_new) {
        /* the held-back tail (a stop string that did not complete, an incomplete character) */
        const char *tail = NULL;
        size_t tail_len = 0;
        if (r->stream) {
            char *piece = NULL;
            size_t n = 0;
            if (tdm_tok_stream_flush(r->stream, &piece, &n) == TDM_OK) {
                text_append(r, piece, n);
                tdm_free(piece);
            }
            size_t start = r->emitted, end = r->text_len;
            if (tdm_sample_stop_scan(&r->stop, r->text, r->text_len, r->emitted, &sr) == TDM_OK &&
                sr.kind == TDM_STOP_MATCHED) {
                end = sr.emit;
                is_stop = 0;
            }
            if (r->want_text) {
                tail = r->text ? r->text + start : "";
                tail_len = end - start;
            }
            r->emitted = end;
            if (sr.kind == TDM_STOP_MATCHED) {
                finish(s, r, TDM_FINISH_STOP, TDM_OK, NULL, -1, tail, tail_len);
                return;
            }
        }
        if (is_stop)
            finish(s, r, TDM_FINISH_STOP, TDM_OK, NULL, tok, tail, tail_len);
        else
            finish(s, r, TDM_FINISH_LENGTH, TDM_OK, NULL, -1, tail, tail_len);
    }
}

/* Poison read or gate bypass during this iteration's forward: CORRUPTION evidence, and every
 * request of the batch that reads host-tier pages ends with an error (all of them when none
 * does: the read cannot be attributed). */
static void hc_check_iter(tdm_sched_t *s, tdm_exec_iter_t *it)
{
    if (!it->poison_reads && !it->gate_bypasses)
        return;
    int any = 0;
    s->st.corruption_events++;
    tdm_err(TDM_SUB_SCHED,
            "msg=\"KV read before its HiCache load\" iter=%llu poison=%llu bypass=%llu",
            (unsigned long long)it->hdr.iter, (unsigned long long)it->poison_reads,
            (unsigned long long)it->gate_bypasses);
    hc_event(s, "poisoned_page_read", "a layer was read before its host-tier load completed",
             json_pack("{s:I,s:I,s:I,s:s}", "iter", (json_int_t)it->hdr.iter, "poison_reads",
                       (json_int_t)it->poison_reads, "bypasses", (json_int_t)it->gate_bypasses,
                       "tier", "host"));
    for (uint32_t i = 0; i < it->n_reqs; i++)
        any |= it->reqs[i]->hc_loaded;
    for (uint32_t i = 0; i < it->n_reqs; i++) {
        tdm_sreq_t *r = it->reqs[i];
        if (r->state == SREQ_ENDING || (any && !r->hc_loaded))
            continue;
        r->kv_bad = 1;
        finish(s, r, TDM_FINISH_ERROR, TDM_ERR_CORRUPT,
               "KV was read before its host-tier load completed", -1, NULL, 0);
    }
}

static void process_results(tdm_sched_t *s, tdm_exec_iter_t *it)
{
    /* prefill (PD): the STATUS frames of the rooms this iteration finished leave in one write */
    tdm_xfer_cork(s->cfg.xfer);
    if (s->hc)
        hc_check_iter(s, it);
    for (uint32_t i = 0; i < it->n_results; i++) {
        tdm_exec_result_t *res = &it->results[i];
        if (res->req->state == SREQ_ENDING)
            continue; /* aborted or stopped while this iteration ran: the token is dropped */
        if (res->req->load_ticket && !hc_retire(s, res->req)) {
            finish(s, res->req, TDM_FINISH_ERROR, TDM_ERR_CORRUPT,
                   "KV loaded from the host tier failed verification", -1, NULL, 0);
            continue; /* no token computed from a bad page reaches the client */
        }
        on_token(s, res->req, res);
    }
    tdm_xfer_uncork(s->cfg.xfer);
    if (it->hdr.iter > s->completed_iter)
        s->completed_iter = it->hdr.iter;
}

/* ---------------------------------------------------------------- building a plan */

static void retract(tdm_sched_t *s, tdm_sreq_t *r)
{
    release_pages(s, r);
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
        if (in_flight(s, victim)) {
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
    r->n_computed_sched += n;
    if (flags & TDM_PLAN_LOGITS)
        r->n_gen_sched++;
    r->last_iter = iter;
    *budget -= n;
    if (want > 1) {
        *prefill_budget -= n;
        s->st.tokens_prefilled += n;
    }
    return n;
}

/* Decode (PD): allocate the pages the prompt's KV will land in and send TRANSFER_INFO; the
 * request waits in the TRANSFERRING list (no batch) until the room is SUCCESS or FAILED. No
 * prefix sharing here: prefill computes the whole prompt and writes every page. A request
 * retracted after its transfer (n_gen > 0) is recomputed locally like any other. */
static tdm_sreq_t *pd_admit_decode(tdm_sched_t *s, tdm_sreq_t *r)
{
    uint32_t need = (r->n_prompt + s->ps - 1) / s->ps;
    uint32_t free_now = tdm_kv_pool_free_pages(s->pool);
    if (need > free_now + tdm_prefix_evictable(s->cache))
        return NULL;
    if (need > free_now)
        (void)tdm_prefix_evict(s->cache, need - free_now);
    if (tdm_kv_seq_reserve(s->pool, &r->kv, r->n_prompt) != TDM_OK)
        return NULL;
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
    tdm_status_t st = tdm_xfer_decode_send_info(s->cfg.xfer, (const uint32_t *)r->tokens,
                                                r->n_prompt, r->kv.pages, need, &fs, &room);
    if (st == TDM_ERR_AGAIN) { /* rooms or aux slots exhausted: retry next iteration */
        tdm_kv_seq_release(s->pool, &r->kv);
        return NULL;
    }
    if (st != TDM_OK) {
        tdm_kv_seq_release(s->pool, &r->kv);
        s->st.pd_commit_failed++;
        /* no prefill registered: BUSY (HTTP 503, retry later) like a draining worker */
        finish(s, r, TDM_FINISH_ERROR, st == TDM_ERR_PEER ? TDM_ERR_BUSY : st,
               st == TDM_ERR_PEER ? "no prefill group is registered with this decode worker"
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
    uint32_t avail = tdm_kv_pool_free_pages(s->pool) + tdm_prefix_evictable(s->cache);
    for (uint32_t i = 0; i < k; i++) /* shared pages stop being evictable */
        avail -= tdm_kv_page_refcount(s->pool, s->shared[i]) == 1;
    if (need > avail) {
        tdm_hicache_unpin(s->hc, s->host_ids, m);
        return NULL;
    }
    if (!r->kv.pages)
        r->kv.pages = tdm_calloc(r->kv.cap_pages, sizeof(uint32_t));
    for (uint32_t i = 0; i < k; i++) {
        (void)tdm_kv_page_ref(s->pool, s->shared[i]);
        r->kv.pages[i] = s->shared[i];
    }
    r->kv.n_pages = k;
    r->kv.n_tokens = k * s->ps;
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
static void pd_abort_room(tdm_sched_t *s, tdm_sreq_t *r, const char *why)
{
    if (r->room && (r->state == SREQ_XFER || s->cfg.pd == TDM_SCHED_PD_PREFILL))
        (void)tdm_xfer_abort(s->cfg.xfer, r->room, why);
}

/* Take the inbox and the abort list, apply deadlines, reap. */
static void intake(tdm_sched_t *s)
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
                    pd_abort_room(s, r, "client abort");
                    finish(s, r, TDM_FINISH_ABORT, TDM_ERR_ABORTED, "aborted", -1, NULL, 0);
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
                pd_abort_room(s, r, "deadline exceeded");
                finish(s, r, TDM_FINISH_ERROR, TDM_ERR_TIMEOUT, "deadline exceeded", -1, NULL, 0);
            }
        }
    reap_ending(s);
    for (tdm_sreq_t *r = s->running.head, *nx; r; r = nx) {
        nx = r->next;
        if (r->retract_pending && !in_flight(s, r))
            retract(s, r);
    }
}

/* ---------------------------------------------------------------- PD */

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
    if (q->n_pages != (q->n_prompt + s->ps - 1) / s->ps) {
        snprintf(err, sizeof(err), "%u pages for %u prompt tokens at page size %u", q->n_pages,
                 q->n_prompt, s->ps);
        goto err_abort;
    }
    if (sreq_new(s, &p, &r, err, sizeof(err)) != TDM_OK)
        goto err_abort;
    r->room = q->room;
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

/* Prefill, once per iteration: take new rooms (the second intake, beside submit) while the queue
 * has room, and end requests whose room decode aborted meanwhile (no point computing them). */
static void pd_poll_prefill(tdm_sched_t *s)
{
    int draining;
    pthread_mutex_lock(&s->mu);
    draining = s->draining || s->stop;
    pthread_mutex_unlock(&s->mu);
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
                finish(s, r, TDM_FINISH_ABORT, TDM_ERR_ABORTED, "room aborted by decode", -1, NULL,
                       0);
        }
}

/* Decode, once per iteration: every TRANSFERRING request is polled; SUCCESS → verify (checksums
 * over our memory, aux room id) and the aux token becomes the first generated token, then the
 * request decodes normally; FAILED or a verification failure → ERROR. */
static void pd_poll_decode(tdm_sched_t *s)
{
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
            finish(s, r, TDM_FINISH_ERROR, st,
                   st == TDM_ERR_CORRUPT
                       ? "the transferred KV failed verification (checksum or aux mismatch)"
                       : "the KV transfer from the prefill group failed",
                   -1, NULL, 0);
            continue;
        }
        if (room_released(s, r, 0) == 0)
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
        on_token(s, r, &res);
    }
}

/* Build the plan of iteration `iter` into ib; returns its kind. */
static tdm_plan_kind_t build(tdm_sched_t *s, iter_buf_t *ib, uint64_t iter)
{
    uint32_t budget = s->max_tokens, prefill_budget = s->cfg.chunk_tokens;
    /* decode (PD): the TRANSFER_INFO frames of the requests admitted here leave in one write */
    tdm_xfer_cork(s->cfg.xfer);
    intake(s);
    if (s->cfg.pd == TDM_SCHED_PD_DECODE)
        pd_poll_decode(s);
    else if (s->cfg.pd == TDM_SCHED_PD_PREFILL)
        pd_poll_prefill(s);
    tdm_plan_begin(&ib->pb);
    ib->it.n_reqs = 0;
    ib->it.kv_need = 0;
    ib->it.poison_reads = ib->it.gate_bypasses = 0;
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

/* Ended requests whose pages wait only for their room's release (no iteration needed). */
static uint32_t rooms_held(const tdm_sched_t *s)
{
    uint32_t n = 0;
    for (const tdm_sreq_t *r = s->ending; r; r = r->ending_next)
        n += r->room != 0 && !in_flight(s, r);
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

static void exec_submit(tdm_sched_t *s, iter_buf_t *ib)
{
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

/* Run one plan to completion (inline in lockstep, on the executor thread in overlap). */
static tdm_status_t run_sync(tdm_sched_t *s, iter_buf_t *ib)
{
    if (!s->cfg.overlap)
        return tdm_exec_lead(s->x, &ib->it);
    exec_submit(s, ib);
    return exec_wait(s)->it.status;
}

static tdm_status_t loop_lockstep(tdm_sched_t *s)
{
    iter_buf_t *ib = &s->ib[0];
    while (!wait_for_work(s, s->cfg.idle_plan_us)) {
        build(s, ib, s->iter + 1);
        s->iter++;
        TDM_TRY(tdm_exec_lead(s->x, &ib->it));
        process_results(s, &ib->it);
        publish(s);
    }
    return TDM_OK;
}

/* Build N+1 while N runs; submit N+1 as soon as N is done; process N while N+1 runs. */
static tdm_status_t loop_overlap(tdm_sched_t *s)
{
    iter_buf_t *inflight = NULL;
    int k = 0;
    tdm_status_t st = TDM_OK;
    for (;;) {
        int stop;
        if (inflight) {
            pthread_mutex_lock(&s->mu);
            stop = s->stop;
            pthread_mutex_unlock(&s->mu);
        } else {
            stop = wait_for_work(s, s->cfg.idle_plan_us);
        }
        if (stop)
            break;
        iter_buf_t *next = &s->ib[k];
        tdm_plan_kind_t kind = build(s, next, s->iter + 1);
        if (inflight) {
            iter_buf_t *done = exec_wait(s);
            if (done->it.status != TDM_OK) {
                st = done->it.status;
                inflight = NULL;
                break;
            }
        }
        if (kind == TDM_PLAN_BATCH || !inflight) {
            s->iter++;
            exec_submit(s, next);
            k ^= 1;
        }
        if (inflight)
            process_results(s, &inflight->it);
        publish(s);
        inflight = (kind == TDM_PLAN_BATCH || !inflight) ? next : NULL;
        if (inflight && kind != TDM_PLAN_BATCH) {
            /* an IDLE heartbeat plan: nothing to overlap with */
            iter_buf_t *done = exec_wait(s);
            inflight = NULL;
            if (done->it.status != TDM_OK) {
                st = done->it.status;
                break;
            }
            process_results(s, &done->it);
            publish(s);
        }
    }
    if (inflight) {
        iter_buf_t *done = exec_wait(s);
        if (done->it.status == TDM_OK)
            process_results(s, &done->it);
        else if (st == TDM_OK)
            st = done->it.status;
    }
    return st;
}

/* End whatever is left with an explicit error (I9) and release it. */
static void fail_all(tdm_sched_t *s, tdm_status_t why, const char *msg)
{
    intake(s);
    while (s->xferring.head) {
        pd_abort_room(s, s->xferring.head, why == TDM_ERR_ABORTED ? "shutdown" : "group failed");
        finish(s, s->xferring.head, TDM_FINISH_ERROR, why, msg, -1, NULL, 0);
    }
    while (s->running.head)
        finish(s, s->running.head, TDM_FINISH_ERROR, why, msg, -1, NULL, 0);
    while (s->waiting.head)
        finish(s, s->waiting.head, TDM_FINISH_ERROR, why, msg, -1, NULL, 0);
    /* the loop is over: no iteration is in flight any more, whatever was planned ahead */
    s->completed_iter = UINT64_MAX;
    reap_ending_ex(s, 1); /* the engine goes next: held rooms are dropped with it */
    publish(s);
}

tdm_status_t tdm_sched_run(tdm_sched_t *s)
{
    tdm_status_t st;
    if (s->cfg.overlap) {
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
    fail_all(s, st == TDM_OK ? TDM_ERR_ABORTED : st,
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
        sreq_free(s, r);
    }
    tdm_prefix_free(s->cache);
    for (int i = 0; i < 2; i++) {
        tdm_plan_builder_free(&s->ib[i].pb);
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
