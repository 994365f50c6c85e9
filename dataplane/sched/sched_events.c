/*
 * sched_events.c — the scheduler's results out (sched_state.h): each iteration's sampled tokens
 * become TOKEN events (text through the tokenizer's stream decoder and the stop-string matcher),
 * then exactly one FINISH or ERROR per request; ended requests keep their pages until no
 * in-flight iteration uses them (and, PD, until their room is released); HiCache evidence.
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

int tdm_sched_in_flight(const tdm_sched_t *s, const tdm_sreq_t *r)
{
    return r->last_iter > s->completed_iter;
}

/* The one terminal event; the request stays (ENDING) until its pages can be released. */
void tdm_sched_finish(tdm_sched_t *s, tdm_sreq_t *r, tdm_finish_reason_t why, tdm_status_t status,
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
 * (hicache_load_mismatch naming rank 0, the device page, the layer and the sub-buffer) and marks
 * r's KV bad. Returns 0 when r's KV is bad. */
static int hc_retire(tdm_sched_t *s, tdm_sreq_t *r)
{
    uint32_t page = 0, layer = 0, sub = 0;
    if (!r->load_ticket)
        return !r->kv_bad;
    tdm_status_t st = tdm_hicache_wait(s->hc, r->load_ticket, &page, &layer, &sub);
    r->load_ticket = 0;
    if (st == TDM_OK)
        return !r->kv_bad;
    r->kv_bad = 1;
    s->st.corruption_events++;
    const char *sn = tdm_kv_sub_name((tdm_kv_sub_t)sub);
    tdm_err(TDM_SUB_SCHED,
            "msg=\"HiCache load failed verification\" req=%llu rank=0 page=%u layer=%u sub=%s",
            (unsigned long long)r->id, page, layer, sn);
    hc_event(s, "hicache_load_mismatch", "host tier load checksum mismatch",
             json_pack("{s:[i],s:i,s:s,s:s,s:I,s:i}", "pages", (json_int_t)page, "layer",
                       (json_int_t)layer, "sub", sn, "tier", "host", "req", (json_int_t)r->id,
                       "rank", 0));
    return 0;
}

/* Give a request's pages back: full computed pages go to the prefix cache first. */
void tdm_sched_release_pages(tdm_sched_t *s, tdm_sreq_t *r)
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
int tdm_sched_room_released(tdm_sched_t *s, tdm_sreq_t *r, int force)
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

void tdm_sched_reap_ending_ex(tdm_sched_t *s, int force)
{
    tdm_sreq_t **link = &s->ending;
    while (*link) {
        tdm_sreq_t *r = *link;
        if (tdm_sched_in_flight(s, r) || !tdm_sched_room_released(s, r, force)) {
            link = &r->ending_next;
            continue;
        }
        *link = r->ending_next;
        tdm_sched_release_pages(s, r);
        tdm_sched_sreq_free(s, r);
    }
}

void tdm_sched_reap_ending(tdm_sched_t *s)
{
    tdm_sched_reap_ending_ex(s, 0);
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
    /* the prompt's pages after the ones decode holds (the room's) */
    uint32_t n_pages = (r->n_prompt + s->ps - 1) / s->ps;
    tdm_status_t st = n_pages <= r->kv.n_pages && r->pd_held < n_pages
                          ? tdm_xfer_prefill_send(s->cfg.xfer, r->room, r->kv.pages + r->pd_held,
                                                  n_pages - r->pd_held, &aux)
                          : TDM_ERR_STATE;
    if (st != TDM_OK) {
        /* aborted by decode meanwhile, or refused: make the room terminal so it is released */
        tdm_dbg(TDM_SUB_SCHED, "msg=\"prefill send refused\" room=%llu status=%s",
                (unsigned long long)r->room, tdm_status_name(st));
        (void)tdm_xfer_abort(s->cfg.xfer, r->room, "prefill send failed");
    }
}

/* One processed token: TOKEN event, then stop checks. */
void tdm_sched_on_token(tdm_sched_t *s, tdm_sreq_t *r, const tdm_exec_result_t *res)
{
    uint64_t now = tdm_time_mono_us();
    if (res->status != TDM_OK) {
        tdm_sched_finish(s, r, TDM_FINISH_ERROR, res->status, "sampling failed (non-finite logits)",
                         -1, NULL, 0);
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
        tdm_sched_finish(s, r, TDM_FINISH_STOP, TDM_OK, NULL, -1, NULL, 0);
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
                tdm_sched_finish(s, r, TDM_FINISH_STOP, TDM_OK, NULL, -1, tail, tail_len);
                return;
            }
        }
        if (is_stop)
            tdm_sched_finish(s, r, TDM_FINISH_STOP, TDM_OK, NULL, tok, tail, tail_len);
        else
            tdm_sched_finish(s, r, TDM_FINISH_LENGTH, TDM_OK, NULL, -1, tail, tail_len);
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
        tdm_sched_finish(s, r, TDM_FINISH_ERROR, TDM_ERR_CORRUPT,
                         "KV was read before its host-tier load completed", -1, NULL, 0);
    }
}

/* TP > 1: a follower's shard of a host-tier load failed verification (gathered by the
 * executor before this iteration's tokens): CORRUPTION evidence naming the rank, page and
 * layer; the requests that read the load end with an error before any token of theirs is sent
 * (every request of the batch that reads host-tier pages when none can be named), and the tier
 * forgets every page no load holds, since the follower's copies of them are suspect. */
static void hc_check_followers(tdm_sched_t *s, tdm_exec_iter_t *it)
{
    uint64_t t = it->tier_bad_ticket;
    int found = 0;
    if (!t)
        return;
    s->st.corruption_events++;
    tdm_err(TDM_SUB_SCHED,
            "msg=\"HiCache load failed verification on a follower\" rank=%u ticket=%llu page=%u "
            "layer=%u sub=%s",
            it->tier_bad_rank, (unsigned long long)t, it->tier_bad_page, it->tier_bad_layer,
            tdm_kv_sub_name((tdm_kv_sub_t)it->tier_bad_sub));
    hc_event(s, "hicache_load_mismatch", "host tier load checksum mismatch",
             json_pack("{s:[i],s:i,s:s,s:s,s:i}", "pages", (json_int_t)it->tier_bad_page, "layer",
                       (json_int_t)it->tier_bad_layer, "sub",
                       tdm_kv_sub_name((tdm_kv_sub_t)it->tier_bad_sub), "tier", "host", "rank",
                       (int)it->tier_bad_rank));
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < it->n_reqs; i++) {
            tdm_sreq_t *r = it->reqs[i];
            if (r->state == SREQ_ENDING || !r->hc_loaded || (pass == 0 && r->hc_ticket != t))
                continue;
            found = 1;
            hc_retire(s, r); /* rank 0's own load done: its host pages unpinned */
            r->kv_bad = 1;
            tdm_sched_finish(s, r, TDM_FINISH_ERROR, TDM_ERR_CORRUPT,
                             "KV loaded from the host tier failed verification", -1, NULL, 0);
        }
        for (tdm_sreq_t *r = s->running.head, *nx; pass == 0 && r; r = nx) {
            nx = r->next;
            if (r->hc_ticket != t || !r->hc_loaded)
                continue;
            found = 1;
            hc_retire(s, r);
            r->kv_bad = 1;
            tdm_sched_finish(s, r, TDM_FINISH_ERROR, TDM_ERR_CORRUPT,
                             "KV loaded from the host tier failed verification", -1, NULL, 0);
        }
        if (found)
            break;
    }
    tdm_hicache_flush(s->hc); /* after the retires: the bad load's host pages are unpinned */
}

void tdm_sched_process_results(tdm_sched_t *s, tdm_exec_iter_t *it)
{
    /* prefill (PD): the STATUS frames of the rooms this iteration finished leave in one write */
    tdm_xfer_cork(s->cfg.xfer);
    if (it->hdr.kind == TDM_PLAN_BATCH) {
        if (it->hdr.n_tokens > it->hdr.n_seqs)
            s->st.iters_mixed++;
        else
            s->st.iters_decode++;
        if (it->ctx_rows) {
            s->st.ctx_rows += it->ctx_rows;
            s->st.ctx_positions += it->ctx_sum;
            s->st.ctx_iters++;
            s->st.ctx_longest += it->ctx_max;
        }
    }
    if (s->hc) {
        hc_check_iter(s, it);
        hc_check_followers(s, it);
    }
    for (uint32_t i = 0; i < it->n_results; i++) {
        tdm_exec_result_t *res = &it->results[i];
        if (res->req->state == SREQ_ENDING)
            continue; /* aborted or stopped while this iteration ran: the token is dropped */
        if (res->req->load_ticket && !hc_retire(s, res->req)) {
            tdm_sched_finish(s, res->req, TDM_FINISH_ERROR, TDM_ERR_CORRUPT,
                             "KV loaded from the host tier failed verification", -1, NULL, 0);
            continue; /* no token computed from a bad page reaches the client */
        }
        tdm_sched_on_token(s, res->req, res);
    }
    tdm_xfer_uncork(s->cfg.xfer);
    if (it->hdr.iter > s->completed_iter)
        s->completed_iter = it->hdr.iter;
}
