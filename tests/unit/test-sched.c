/*
 * test-sched.c — the leader's scheduler driven in-process at TP=1 on a fixture model, in both
 * loops: every request's tokens equal a scheduler-less reference (the one-shot engine with the
 * same (seed, step) sampling) whatever the batching, chunking, retraction and prefix sharing;
 * every request gets exactly one terminal event; aborts, deadlines, refusals and drain behave;
 * after drain every page is free again. PD: a prefill scheduler and a decode scheduler,
 * each with its own executor and transfer engine over UCX on loopback, in both loops: every
 * request sent to decode equals the reference, decode computes no prompt token, prefill takes
 * one room per request and refuses submissions; a decode without a prefill answers BUSY.
 * Overlap loop: a request aborted while iteration N runs is dropped from the already-built plan
 * N+1 (the other request's tokens unchanged, no page lost, its prefix reused bit-exactly).
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tdm/mem.h>
#include <tdm/progress.h>
#include <tdm/time.h>

#include "dataplane/oneshot_engine.h"
#include "dataplane/sched/sched_int.h"
#include "tap.h"

#define MAX_GEN 48

typedef struct rec {
    pthread_mutex_t *mu;
    tdm_sched_t *s;
    uint64_t id;
    int32_t toks[MAX_GEN];
    uint32_t n;
    int n_terminal, n_after_terminal;
    tdm_req_event_kind_t kind;
    tdm_finish_reason_t fin;
    tdm_status_t status;
    uint32_t cached, completion;
    int32_t stop_tok;
    char text[4096];
    size_t tlen;
    uint32_t abort_after; /* abort from the callback after this many tokens (0 = never) */
} rec_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static tdm_fault_table_t *g_faults; /* the executor's fault table (NULL: none) */

static void on_event(void *ctx, const tdm_req_event_t *ev)
{
    rec_t *r = ctx;
    pthread_mutex_lock(&g_mu);
    if (r->n_terminal)
        r->n_after_terminal++;
    if (ev->text_len && r->tlen + ev->text_len < sizeof(r->text)) {
        memcpy(r->text + r->tlen, ev->text, ev->text_len);
        r->tlen += ev->text_len;
    }
    if (ev->kind == TDM_REQ_TOKEN) {
        if (r->n < MAX_GEN)
            r->toks[r->n] = ev->token;
        r->n++;
        if (r->abort_after && r->n == r->abort_after)
            tdm_sched_abort(r->s, r->id);
    } else {
        r->n_terminal++;
        r->kind = ev->kind;
        r->fin = ev->finish;
        r->status = ev->status;
        r->cached = ev->cached_tokens;
        r->completion = ev->completion_tokens;
        r->stop_tok = ev->matched_stop_token;
    }
    pthread_mutex_unlock(&g_mu);
}

typedef struct eng {
    tdm_progress_page_t *page;
    void *rt, *rp;
    tdm_comm_t ct, cp;
    tdm_exec_t *x;
    tdm_sched_t *s;
    pthread_t th;
    tdm_status_t run_st;
    tdm_xfer_t *xf;              /* PD engines only */
    _Atomic(tdm_sched_t *) kick; /* what the engine's events wake */
} eng_t;

static void pd_kick(void *ctx, const tdm_xfer_event_t *ev)
{
    eng_t *e = ctx;
    (void)ev;
    tdm_sched_t *s = atomic_load(&e->kick);
    if (s)
        tdm_sched_kick(s);
}

static void *run_main(void *arg)
{
    eng_t *e = arg;
    e->run_st = tdm_sched_run(e->s);
    return NULL;
}

/* pd: the role; peer_port: decode's prefill bootstrap port (prefill listens on any port) */
static int eng_start_pd(eng_t *e, const tdm_model_t *m, const tdm_tok_t *tok, uint32_t num_pages,
                        uint32_t page_size, uint32_t max_running, uint32_t chunk, int overlap,
                        tdm_sched_pd_t pd, uint16_t peer_port)
{
    char err[256];
    memset(e, 0, sizeof(*e));
    tdm_shm_comm_cfg_t cc = {1, 4096, 100, 50};
    size_t rsz = tdm_shm_comm_region_size(&cc);
    e->rt = calloc(1, rsz);
    e->rp = calloc(1, rsz);
    if (tdm_progress_create_anon(1, 1, &e->page) != TDM_OK ||
        tdm_shm_comm_region_init(e->rt, &cc) != TDM_OK ||
        tdm_shm_comm_region_init(e->rp, &cc) != TDM_OK ||
        tdm_shm_comm_init(e->rt, 0, e->page, 0, &e->ct) != TDM_OK ||
        tdm_shm_comm_init(e->rp, 0, e->page, 1, &e->cp) != TDM_OK)
        return 0;
    tdm_exec_cfg_t xc = {.model = m,
                         .tp_size = 1,
                         .rank = 0,
                         .kv_dtype = TDM_DTYPE_F32,
                         .page_size = page_size,
                         .num_pages = num_pages,
                         .max_seqs = max_running,
                         .max_tokens = chunk + max_running,
                         .max_context = 512,
                         .threads = 1,
                         .tensor = &e->ct,
                         .plan = &e->cp,
                         .page = e->page,
                         .faults = g_faults};
    if (tdm_exec_init(&xc, &e->x, err, sizeof(err)) != TDM_OK) {
        diag("exec: %s", err);
        return 0;
    }
    if (pd != TDM_SCHED_PD_NONE) {
        tdm_xfer_cfg_t fc = {.role =
                                 pd == TDM_SCHED_PD_PREFILL ? TDM_XFER_PREFILL : TDM_XFER_DECODE,
                             .instance_id = 0x5000 + (uint64_t)pd,
                             .n_ranks = 1,
                             .kv = {tdm_kv_pool_buffers(tdm_exec_pool(e->x))},
                             .host = "127.0.0.1",
                             .port = peer_port,
                             .progress = &e->page->slot[0],
                             .on_event = pd_kick,
                             .ctx = e};
        tdm_status_t st = tdm_xfer_init(&fc, &e->xf);
        if (st != TDM_OK) {
            diag("xfer: %s", tdm_status_str(st));
            return 0;
        }
    }
    tdm_sched_cfg_t sc = {.max_running = max_running,
                          .max_queued = 64,
                          .chunk_tokens = chunk,
                          .overlap = overlap,
                          .idle_plan_us = 20000,
                          .tok = tok,
                          .mc = tdm_model_config(m),
                          .pd = pd,
                          .xfer = e->xf};
    if (tdm_sched_init(&sc, e->x, &e->s, err, sizeof(err)) != TDM_OK) {
        diag("sched: %s", err);
        return 0;
    }
    atomic_store(&e->kick, e->s);
    return pthread_create(&e->th, NULL, run_main, e) == 0;
}

static int eng_start(eng_t *e, const tdm_model_t *m, const tdm_tok_t *tok, uint32_t num_pages,
                     uint32_t page_size, uint32_t max_running, uint32_t chunk, int overlap)
{
    return eng_start_pd(e, m, tok, num_pages, page_size, max_running, chunk, overlap,
                        TDM_SCHED_PD_NONE, 0);
}

static void eng_stop(eng_t *e)
{
    tdm_sched_stop(e->s);
    pthread_join(e->th, NULL);
    tdm_xfer_free(e->xf); /* its threads kick the scheduler: gone first */
    tdm_sched_free(e->s);
    tdm_exec_free(e->x);
    tdm_comm_destroy(&e->ct);
    tdm_comm_destroy(&e->cp);
    tdm_progress_close(e->page);
    free(e->rt);
    free(e->rp);
}

/* Wait until every record has its terminal event (or 60 s). */
static int wait_all(rec_t *r, int n)
{
    for (int t = 0; t < 6000; t++) {
        int done = 0;
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < n; i++)
            done += r[i].n_terminal > 0;
        pthread_mutex_unlock(&g_mu);
        if (done == n)
            return 1;
        tdm_time_sleep_us(10000);
    }
    return 0;
}

typedef struct spec {
    int32_t prompt[160];
    uint32_t n_prompt, max_new;
    float temperature;
    uint64_t seed;
    int32_t ref[MAX_GEN];
    uint32_t n_ref;
} spec_t;

/* The reference: the same request alone on the scheduler-less engine. */
static int reference(const tdm_model_t *m, spec_t *sp)
{
    char err[256];
    tdm_oneshot_engine_t *eng;
    uint32_t vocab = tdm_model_config(m)->vocab_size;
    if (tdm_oneshot_engine_init(m, TDM_DTYPE_F32, 16, 1, sp->n_prompt + sp->max_new, 1, &eng, err,
                                sizeof(err)) != TDM_OK)
        return 0;
    tdm_sample_scratch_t scratch;
    tdm_sample_scratch_init(&scratch, vocab);
    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    p.temperature = sp->temperature;
    p.seed = sp->seed;
    const float *logits;
    int good = tdm_oneshot_engine_prefill(eng, 0, sp->prompt, sp->n_prompt, &logits) == TDM_OK;
    for (uint32_t i = 0; good && i < sp->max_new; i++) {
        tdm_sample_history_t h = {sp->prompt, sp->n_prompt, sp->ref, i};
        tdm_sample_result_t res;
        good = tdm_sample_token(&p, logits, vocab, &h, i, &scratch, &res) == TDM_OK;
        sp->ref[i] = res.id;
        sp->n_ref = i + 1;
        if (good && i + 1 < sp->max_new)
            good = tdm_oneshot_engine_decode(eng, &res.id, 1, &logits) == TDM_OK;
    }
    tdm_sample_scratch_free(&scratch);
    tdm_oneshot_engine_free(eng);
    return good;
}

static tdm_status_t submit(tdm_sched_t *s, const spec_t *sp, rec_t *r, uint64_t deadline)
{
    char err[256];
    tdm_req_params_t p = {0};
    p.prompt = sp->prompt;
    p.n_prompt = sp->n_prompt;
    p.max_new_tokens = sp->max_new;
    tdm_sample_params_default(&p.sampling);
    p.sampling.temperature = sp->temperature;
    p.sampling.seed = sp->seed;
    p.ignore_eos = 1;
    p.deadline_us = deadline;
    p.cb = on_event;
    p.ctx = r;
    r->s = s;
    tdm_status_t st = tdm_sched_submit(s, &p, &r->id, err, sizeof(err));
    if (st != TDM_OK)
        diag("submit: %s", err);
    return st;
}

#define N_SPECS 12
static spec_t specs[N_SPECS];

static void make_specs(const tdm_model_t *m)
{
    uint32_t vocab = tdm_model_config(m)->vocab_size;
    uint64_t x = 12345;
    for (int i = 0; i < N_SPECS; i++) {
        spec_t *sp = &specs[i];
        /* lengths across page and chunk boundaries; specs 4..7 share a 40-token prefix with 0 */
        sp->n_prompt = (uint32_t)(5 + (i * 37) % 150);
        for (uint32_t k = 0; k < sp->n_prompt; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            sp->prompt[k] = (int32_t)((x >> 33) % (vocab - 1));
        }
        if (i >= 4 && i < 8) {
            if (sp->n_prompt < 48)
                sp->n_prompt = 48;
            memcpy(sp->prompt, specs[0].prompt, 40 * sizeof(int32_t));
        }
        sp->max_new = (uint32_t)(6 + (i * 5) % 20);
        sp->temperature = (i % 3 == 2) ? 0.8f : 0.0f;
        sp->seed = (uint64_t)(1000 + i);
    }
    specs[0].n_prompt = 60;
}

/* Submit every spec at once; 1 when all match the reference with one terminal event each. */
static int run_all(eng_t *e, rec_t *recs, int n, const char *what)
{
    memset(recs, 0, sizeof(rec_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (submit(e->s, &specs[i], &recs[i], 0) != TDM_OK)
            return 0;
    int good = wait_all(recs, n);
    tdm_time_sleep_us(30000); /* late events would show up as n_after_terminal */
    pthread_mutex_lock(&g_mu);
    for (int i = 0; good && i < n; i++) {
        rec_t *r = &recs[i];
        if (r->n_terminal != 1 || r->n_after_terminal || r->kind != TDM_REQ_FINISH ||
            r->fin != TDM_FINISH_LENGTH || r->n != specs[i].n_ref ||
            memcmp(r->toks, specs[i].ref, r->n * sizeof(int32_t)) != 0) {
            diag("%s: request %d: terminal %d kind %d fin %d, %u tokens (ref %u)", what, i,
                 r->n_terminal, r->kind, r->fin, r->n, specs[i].n_ref);
            good = 0;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return good;
}

static int wait_drained(eng_t *e, tdm_sched_stats_t *st)
{
    tdm_sched_drain(e->s);
    for (int t = 0; t < 500; t++) {
        tdm_sched_stats(e->s, st);
        if (st->drained)
            return 1;
        tdm_time_sleep_us(10000);
    }
    return 0;
}

static void suite(const tdm_model_t *m, const tdm_tok_t *tok, int overlap, const char *loop)
{
    eng_t e;
    rec_t recs[N_SPECS + 8];
    tdm_sched_stats_t st;

    /* roomy pool, big chunks: continuous batching of mixed prefill/decode */
    ok(eng_start(&e, m, tok, 256, 16, 8, 256, overlap), "%s: engine up", loop);
    ok(run_all(&e, recs, N_SPECS, loop),
       "%s: 12 concurrent requests == reference, one terminal "
       "event each",
       loop);
    /* prefix reuse: the same prompts again share the cached pages */
    int good = run_all(&e, recs, N_SPECS, loop);
    uint32_t cached = 0;
    for (int i = 0; i < N_SPECS; i++)
        cached += recs[i].cached;
    ok(good && cached > 0,
       "%s: repeated prompts reuse cached prefixes (%u tokens) with equal output", loop, cached);
    tdm_sched_stats(e.s, &st);
    ok(st.prompt_tokens_cached >= cached && st.pages_cached > 0, "%s: stats count cached pages",
       loop);
    ok(wait_drained(&e, &st) && st.pages_free == st.pages_total && st.waiting == 0 &&
           st.running == 0,
       "%s: after drain free pages == total pages (%u/%u)", loop, st.pages_free, st.pages_total);
    rec_t late = {0};
    ok(submit(e.s, &specs[0], &late, 0) == TDM_ERR_BUSY, "%s: draining refuses submissions", loop);
    eng_stop(&e);

    /* roomy pool, 41-token chunks: spec 1's 42-token prompt ends in a one-token chunk; without
     * retraction the prefilled and cached tokens are the prompts, also when prefixes are shared
     * (what loadgen checks against /metrics) */
    {
        uint64_t sum = 0;
        for (int i = 0; i < N_SPECS; i++)
            sum += specs[i].n_prompt;
        ok(eng_start(&e, m, tok, 256, 16, 8, 41, overlap), "%s: 41-token-chunk engine up", loop);
        int good2 = run_all(&e, recs, N_SPECS, loop) && run_all(&e, recs, N_SPECS, loop);
        tdm_sched_stats(e.s, &st);
        ok(good2 && st.retractions == 0 && st.tokens_prefilled + st.prompt_tokens_cached == 2 * sum,
           "%s: 41-token chunks, twice: outputs == reference, prefilled %llu + cached %llu == "
           "prompts %llu (no retraction: %llu)",
           loop, (unsigned long long)st.tokens_prefilled,
           (unsigned long long)st.prompt_tokens_cached, (unsigned long long)(2 * sum),
           (unsigned long long)st.retractions);
        eng_stop(&e);
    }

    /* tight pool, small chunks: chunked prefill and retraction, same tokens */
    ok(eng_start(&e, m, tok, 24, 16, 6, 32, overlap), "%s: tight engine up", loop);
    ok(run_all(&e, recs, N_SPECS, loop), "%s: 24 pages, 32-token chunks: outputs == reference",
       loop);
    tdm_sched_stats(e.s, &st);
    ok(st.retractions > 0, "%s: the tight pool retracted requests (%llu)", loop,
       (unsigned long long)st.retractions);

    /* aborts: from the callback at a token, before admission, unknown ids */
    memset(recs, 0, sizeof(recs));
    for (int i = 0; i < N_SPECS; i++) {
        recs[i].abort_after = (i % 2) ? 1 + (uint32_t)i % 4 : 0;
        submit(e.s, &specs[i], &recs[i], 0);
    }
    tdm_sched_abort(e.s, recs[N_SPECS - 1].id);
    tdm_sched_abort(e.s, 999999);
    good = wait_all(recs, N_SPECS);
    tdm_time_sleep_us(30000);
    int aborted = 0;
    for (int i = 0; i < N_SPECS; i++) {
        rec_t *r = &recs[i];
        good = good && r->n_terminal == 1 && r->n_after_terminal == 0;
        if (r->fin == TDM_FINISH_ABORT)
            aborted++;
        else
            good = good && r->fin == TDM_FINISH_LENGTH && r->n == specs[i].n_ref &&
                   !memcmp(r->toks, specs[i].ref, r->n * sizeof(int32_t));
        if (recs[i].abort_after && i != N_SPECS - 1) /* the last one is aborted at submit */
            good = good && r->fin == TDM_FINISH_ABORT && r->n >= recs[i].abort_after;
        if (!good) {
            diag("%s: abort test: request %d: terminal %d (+%d) fin %d, %u tokens (ref %u, abort "
                 "after %u)",
                 loop, i, r->n_terminal, r->n_after_terminal, r->fin, r->n, specs[i].n_ref,
                 r->abort_after);
            break;
        }
    }
    ok(good && aborted >= 6, "%s: %d aborted, the rest == reference, one terminal event each", loop,
       aborted);

    /* a deadline already past ends with ERROR TIMEOUT */
    rec_t dl = {0};
    submit(e.s, &specs[1], &dl, tdm_time_mono_us() - 1);
    ok(wait_all(&dl, 1) && dl.kind == TDM_REQ_ERROR && dl.status == TDM_ERR_TIMEOUT &&
           dl.fin == TDM_FINISH_ERROR,
       "%s: a past deadline ends in ERROR TIMEOUT", loop);
    ok(wait_drained(&e, &st) && st.pages_free == st.pages_total,
       "%s: tight pool: after drain free pages == total pages (%u/%u)", loop, st.pages_free,
       st.pages_total);
    eng_stop(&e);

    /* shutdown with requests in flight: each still gets exactly one terminal event */
    ok(eng_start(&e, m, tok, 64, 16, 4, 64, overlap), "%s: engine up again", loop);
    memset(recs, 0, sizeof(recs));
    for (int i = 0; i < 8; i++)
        submit(e.s, &specs[i], &recs[i], 0);
    tdm_time_sleep_us(20000);
    eng_stop(&e);
    good = 1;
    for (int i = 0; i < 8; i++)
        good = good && recs[i].n_terminal == 1;
    ok(good, "%s: stopping the loop ends every request exactly once", loop);
}

static uint32_t rec_n(rec_t *r)
{
    pthread_mutex_lock(&g_mu);
    uint32_t n = r->n;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Overlap: two streams; iteration N stalled (stall_loop); one stream aborted during the stall,
 * after plan N+1 — with its row — was built. Its row is dropped from N+1 before N+1 is sent. */
static void drop_suite(const tdm_model_t *m, const tdm_tok_t *tok)
{
    static tdm_fault_table_t ft;
    static spec_t sp[2];
    char ferr[128];
    eng_t e;
    rec_t recs[2];
    tdm_sched_stats_t st;
    for (int i = 0; i < 2; i++) {
        sp[i] = specs[i];
        sp[i].max_new = 40;
        sp[i].temperature = 0.0f;
        if (!reference(m, &sp[i]))
            bail_out("reference of the drop test");
    }
    g_faults = &ft;
    int up = eng_start(&e, m, tok, 256, 16, 8, 256, 1);
    g_faults = NULL;
    if (!ok(up, "drop: engine up (overlap, fault table)"))
        return;
    memset(recs, 0, sizeof(recs));
    for (int i = 0; i < 2; i++)
        submit(e.s, &sp[i], &recs[i], 0);
    uint64_t t_end = tdm_time_mono_us() + 30000000;
    while ((rec_n(&recs[0]) < 2 || rec_n(&recs[1]) < 2) && tdm_time_mono_us() < t_end)
        tdm_time_sleep_us(1000);
    tdm_fault_spec_t fs = {.rank = 0, .count = 1, .after_iter = 0, .duration_ms = 3000};
    ok(tdm_fault_arm(&ft, 1, TDM_FAULT_STALL_LOOP, &fs, ferr, sizeof(ferr)) == TDM_OK,
       "drop: both streams running, stall_loop armed");
    /* stalled: no token for 300 ms (an iteration of this model takes about a millisecond) */
    uint32_t seen = rec_n(&recs[0]) + rec_n(&recs[1]);
    uint64_t quiet_since = tdm_time_mono_us();
    while (tdm_time_mono_us() - quiet_since < 300000 && tdm_time_mono_us() < t_end) {
        tdm_time_sleep_us(5000);
        uint32_t now = rec_n(&recs[0]) + rec_n(&recs[1]);
        if (now != seen) {
            seen = now;
            quiet_since = tdm_time_mono_us();
        }
    }
    tdm_sched_abort(e.s, recs[1].id);
    int good = wait_all(recs, 2);
    ok(good && recs[0].fin == TDM_FINISH_LENGTH && recs[0].n == sp[0].n_ref &&
           !memcmp(recs[0].toks, sp[0].ref, recs[0].n * sizeof(int32_t)) &&
           recs[1].fin == TDM_FINISH_ABORT && recs[1].n_terminal == 1,
       "drop: the stream left == reference, the aborted one ended ABORT (%u tokens)", recs[1].n);
    tdm_sched_stats(e.s, &st);
    ok(st.aborted_rows_dropped == 1,
       "drop: the aborted stream's row was dropped from the plan built before the abort (%llu)",
       (unsigned long long)st.aborted_rows_dropped);
    /* the aborted stream's pages went to the prefix cache: reused, they give the same tokens */
    memset(recs, 0, sizeof(recs));
    submit(e.s, &sp[1], &recs[1], 0);
    good = wait_all(&recs[1], 1);
    ok(good && recs[1].fin == TDM_FINISH_LENGTH && recs[1].cached > 0 && recs[1].n == sp[1].n_ref &&
           !memcmp(recs[1].toks, sp[1].ref, recs[1].n * sizeof(int32_t)),
       "drop: its prompt again reuses %u cached tokens and == reference", recs[1].cached);
    ok(wait_drained(&e, &st) && st.pages_free == st.pages_total,
       "drop: after drain free pages == total pages (%u/%u)", st.pages_free, st.pages_total);
    eng_stop(&e);
}

/* PD: prefill + decode schedulers in this process, connected by their engines over UCX. */
static void pd_suite(const tdm_model_t *m, const tdm_tok_t *tok, int overlap, const char *loop)
{
    eng_t pre, dec, lone;
    rec_t recs[N_SPECS];
    tdm_sched_stats_t sp, sd;
    char err[256];
    if (!ok(eng_start_pd(&pre, m, tok, 256, 16, 8, 64, overlap, TDM_SCHED_PD_PREFILL, 0) &&
                eng_start_pd(&dec, m, tok, 256, 16, 8, 64, overlap, TDM_SCHED_PD_DECODE,
                             tdm_xfer_port(pre.xf)),
            "%s: PD pair up", loop))
        return;
    ok(tdm_xfer_wait_ready(dec.xf, 10000000, err, sizeof(err)) == TDM_OK,
       "%s: decode registered with prefill", loop);
    ok(run_all(&dec, recs, N_SPECS, "pd"), "%s: PD: every request == reference (%d requests)", loop,
       N_SPECS);
    tdm_time_sleep_us(50000);
    tdm_sched_stats(pre.s, &sp);
    tdm_sched_stats(dec.s, &sd);
    ok(sd.tokens_prefilled == 0 && sp.tokens_prefilled > 0 && sp.pd_rooms_taken == N_SPECS &&
           sd.pd_commit_failed == 0,
       "%s: decode prefilled 0 tokens, prefill %llu tokens in %llu rooms", loop,
       (unsigned long long)sp.tokens_prefilled, (unsigned long long)sp.pd_rooms_taken);
    rec_t r0 = {0};
    ok(submit(pre.s, &specs[0], &r0, 0) == TDM_ERR_BUSY, "%s: prefill refuses submit (BUSY)", loop);
    ok(wait_drained(&dec, &sd) && sd.pages_free == sd.pages_total && wait_drained(&pre, &sp) &&
           sp.pages_free == sp.pages_total,
       "%s: drained: every page free on both sides", loop);
    eng_stop(&dec);
    eng_stop(&pre);

    /* a decode whose prefill never answers: BUSY errors, nothing hangs */
    if (!ok(eng_start_pd(&lone, m, tok, 64, 16, 4, 64, overlap, TDM_SCHED_PD_DECODE, 1),
            "%s: decode without a prefill up", loop))
        return;
    memset(&r0, 0, sizeof(r0));
    ok(submit(lone.s, &specs[1], &r0, 0) == TDM_OK && wait_all(&r0, 1) &&
           r0.kind == TDM_REQ_ERROR && r0.status == TDM_ERR_BUSY && r0.n == 0,
       "%s: no prefill registered: the request ends with ERROR BUSY", loop);
    tdm_sched_t *bad = NULL;
    tdm_sched_cfg_t sc = {.max_running = 4,
                          .max_queued = 4,
                          .chunk_tokens = 64,
                          .mc = tdm_model_config(m),
                          .pd = TDM_SCHED_PD_DECODE};
    ok(tdm_sched_init(&sc, lone.x, &bad, err, sizeof(err)) == TDM_ERR_INVAL && !bad,
       "%s: a PD role without an engine is refused: %s", loop, err);
    eng_stop(&lone);
}

int main(void)
{
    const char *src = getenv("TDM_SRCDIR");
    char dir[1024], path[1200], err[256];
    snprintf(dir, sizeof(dir), "%.900s/tests/fixtures/models/tiny-llama-gqa", src ? src : ".");
    tdm_model_t *m = NULL;
    tdm_tok_t *tok = NULL;
    if (tdm_model_load(dir, &m, err, sizeof(err)) != TDM_OK)
        bail_out("fixture model not found (set TDM_SRCDIR)");
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    if (tdm_tok_load(path, &tok, err, sizeof(err)) != TDM_OK)
        bail_out("fixture tokenizer not loadable");
    make_specs(m);
    int refs = 1;
    for (int i = 0; i < N_SPECS; i++)
        refs = refs && reference(m, &specs[i]);
    ok(refs, "references computed");

    suite(m, tok, 0, "lockstep");
    suite(m, tok, 1, "overlap");
    /* the overlap loop's pipelined protocol (tdm_exec_lead_launch), run on the CPU: samples
     * deferred one step, PREV_TOKEN ids from the deferred outputs (exec.c emu_launch) */
    setenv("TDM_CPU_PIPELINE", "1", 1);
    suite(m, tok, 1, "pipelined");
    unsetenv("TDM_CPU_PIPELINE");
    drop_suite(m, tok);
    pd_suite(m, tok, 0, "lockstep");
    pd_suite(m, tok, 1, "overlap");
    setenv("TDM_CPU_PIPELINE", "1", 1);
    pd_suite(m, tok, 1, "pipelined");
    unsetenv("TDM_CPU_PIPELINE");

    /* the fault table: arming rules, rank/iteration targeting, counts */
    static tdm_fault_table_t ft;
    tdm_fault_spec_t fs = {1, 2, 10, 50};
    uint32_t dur = 0;
    char ferr[128];
    ok(tdm_fault_arm(&ft, 2, TDM_FAULT_STALL_LOOP, &fs, ferr, sizeof(ferr)) == TDM_OK &&
           !tdm_fault_fire(&ft, TDM_FAULT_STALL_LOOP, 0, 20, NULL) &&
           !tdm_fault_fire(&ft, TDM_FAULT_STALL_LOOP, 1, 9, NULL) &&
           tdm_fault_fire(&ft, TDM_FAULT_STALL_LOOP, 1, 10, &dur) && dur == 50 &&
           tdm_fault_fire(&ft, TDM_FAULT_STALL_LOOP, 1, 11, NULL) &&
           !tdm_fault_fire(&ft, TDM_FAULT_STALL_LOOP, 1, 12, NULL),
       "stall_loop fires on its rank from after_iter, count times");
    fs.rank = 0;
    ok(tdm_fault_arm(&ft, 2, TDM_FAULT_RANK_IDLE_PATH, &fs, ferr, sizeof(ferr)) == TDM_ERR_INVAL,
       "rank_idle_path on rank 0 is refused: %s", ferr);
    fs.rank = 2;
    ok(tdm_fault_arm(&ft, 2, TDM_FAULT_RANK_SKIP_COLLECTIVE, &fs, ferr, sizeof(ferr)) ==
           TDM_ERR_RANGE,
       "a rank outside the group is refused");
    tdm_fault_point_t fp;
    ok(tdm_fault_point_parse("rank_skip_collective", &fp) == TDM_OK &&
           fp == TDM_FAULT_RANK_SKIP_COLLECTIVE &&
           tdm_fault_point_parse("nope", &fp) == TDM_ERR_NOTFOUND,
       "fault names parse");
    /* the transfer points: rank 0 only; kill_thread only of an engine thread, and it
     * fires only for the armed thread; host_layout_fp8_formula is armed at start only */
    tdm_fault_spec_t ts = {1, 1, 0, 5, TDM_HB_TRANSFER};
    ok(tdm_fault_arm(&ft, 2, TDM_FAULT_FLIP_KV_BITS, &ts, ferr, sizeof(ferr)) == TDM_ERR_INVAL,
       "flip_kv_bits on rank 1 is refused: %s", ferr);
    ts.rank = 0;
    ok(tdm_fault_arm(&ft, 2, TDM_FAULT_FLIP_KV_BITS, &ts, ferr, sizeof(ferr)) == TDM_OK &&
           tdm_fault_fire(&ft, TDM_FAULT_FLIP_KV_BITS, 0, 0, &dur) && dur == 5 &&
           !tdm_fault_fire(&ft, TDM_FAULT_FLIP_KV_BITS, 0, 1, NULL),
       "flip_kv_bits on rank 0 fires once with its argument");
    ok(tdm_fault_arm(&ft, 2, TDM_FAULT_KILL_THREAD, &ts, ferr, sizeof(ferr)) == TDM_OK &&
           !tdm_fault_fire_thread(&ft, 0, 0, TDM_HB_RECV) &&
           tdm_fault_fire_thread(&ft, 0, 0, TDM_HB_TRANSFER) &&
           !tdm_fault_fire_thread(&ft, 0, 0, TDM_HB_TRANSFER),
       "kill_thread{transfer} fires for the transfer thread only, once");
    ts.thread = TDM_HB_LOOP;
    ok(tdm_fault_arm(&ft, 2, TDM_FAULT_KILL_THREAD, &ts, ferr, sizeof(ferr)) == TDM_ERR_INVAL,
       "kill_thread{loop} is refused: %s", ferr);
    ok(tdm_fault_arm(&ft, 2, TDM_FAULT_HOST_LAYOUT_FP8_FORMULA, &ts, ferr, sizeof(ferr)) ==
               TDM_ERR_UNSUPPORTED &&
           strstr(ferr, "--fault-at-start"),
       "host_layout_fp8_formula at run time is refused, naming --fault-at-start: %s", ferr);

    /* refusals */
    eng_t e;
    ok(eng_start(&e, m, tok, 16, 16, 2, 32, 0), "engine for refusals");
    rec_t r = {0};
    spec_t bad = specs[0];
    bad.n_prompt = 0;
    ok(submit(e.s, &bad, &r, 0) == TDM_ERR_RANGE, "empty prompt: RANGE");
    bad = specs[0];
    bad.max_new = 500;
    ok(submit(e.s, &bad, &r, 0) == TDM_ERR_RANGE, "prompt + max_new over the context: RANGE");
    bad = specs[0];
    bad.temperature = -1;
    ok(submit(e.s, &bad, &r, 0) == TDM_ERR_INVAL, "bad sampling params: INVAL");
    bad = specs[0];
    bad.prompt[3] = 100000;
    ok(submit(e.s, &bad, &r, 0) == TDM_ERR_RANGE, "token outside the vocabulary: RANGE");
    eng_stop(&e);

    tdm_tok_free(tok);
    tdm_model_free(m);
    return done_testing();
}
