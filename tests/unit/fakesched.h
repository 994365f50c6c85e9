/*
 * tests/unit/fakesched.h — the in-test scheduler the api unit tests link instead of
 * dataplane/sched (test-api, test-openai, test-openai-malformed): it implements sched.h with one
 * thread that steps every live request each pass, so callbacks really cross threads. Header-only;
 * include it once per test program, then start it with fake_start() and serve with fake_serve().
 *
 * A request plays one of two ways, chosen per scheduler by `scripted`:
 *  - generated (test-api): one deterministic token fake_token(seed, i) per pass, seed = sum of the
 *    prompt ids; FINISH(LENGTH) at max_new_tokens. A first prompt id PROMPT_FAIL ends the request
 *    in ERROR(TIMEOUT); PROMPT_REFUSE makes submit answer TDM_ERR_AGAIN (queue full).
 *  - scripted (the OpenAI tests): the pieces of the script current at submit, one TOKEN event per
 *    piece (id, text, logprob, top logprobs), then FINISH with the script's finish reason (and
 *    matched stop token) or ERROR(TIMEOUT); FINISH(LENGTH) when max_new_tokens cuts it short.
 * Both honour aborts with FINISH(ABORT) and refuse new work with TDM_ERR_BUSY after
 * tdm_sched_drain until tdm_sched_resume. Every submit's parameters are recorded (last_*) for the
 * tests to check.
 */
#ifndef TDM_TESTS_FAKESCHED_H
#define TDM_TESTS_FAKESCHED_H

#include "config.h"

#include <pthread.h>
#include <string.h>

#include <tdm/time.h>

#include "dataplane/api/api_int.h"
#include "tap.h"

#define FAKE_MAX 128
#define SCRIPT_MAX 64
#define PROMPT_FAIL 999999   /* generated: first prompt id that ends in ERROR(TIMEOUT) */
#define PROMPT_REFUSE 999998 /* first prompt id that submit refuses with TDM_ERR_AGAIN */

typedef struct fake_piece {
    int32_t id;
    const char *text;
} fake_piece_t;

typedef struct fake_script {
    fake_piece_t p[SCRIPT_MAX];
    int n;
    tdm_finish_reason_t finish;
    int32_t stop_token; /* -1, or the id of the last piece when it was a stop token */
    int error;          /* end in ERROR(TIMEOUT) after the pieces */
    unsigned delay_us;  /* between tokens (0: the scheduler's token_delay_us) */
} fake_script_t;

typedef struct fake_req {
    int used, aborted;
    uint64_t id;
    uint32_t n_prompt, max_new, emitted;
    int32_t seed_tok; /* generated */
    int fail;         /* generated */
    fake_script_t sc; /* scripted */
    tdm_req_cb cb;
    void *ctx;
} fake_req_t;

struct tdm_sched {
    pthread_mutex_t mu;
    pthread_t th;
    int stop, draining, scripted;
    uint64_t next_id, aborts_seen, finished, aborted_finished;
    unsigned token_delay_us; /* sleep between passes */
    fake_req_t r[FAKE_MAX];
    fake_script_t script; /* scripted: what the next request plays */
    /* the last submit */
    int32_t last_prompt[4096];
    uint32_t last_n_prompt, last_max_new, last_n_stop;
    char last_stop[TDM_SAMPLE_MAX_STOP][TDM_SAMPLE_MAX_STOP_LEN + 1];
    tdm_sample_params_t last_sp;
    int last_want_text, last_skip_special, last_ignore_eos, submits;
};

/* The i-th token a generated request with this seed emits. */
static inline int32_t fake_token(int32_t seed, uint32_t i)
{
    return (int32_t)((seed * 31 + (int32_t)i * 7) % 1000);
}

const char *tdm_finish_reason_name(tdm_finish_reason_t r)
{
    static const char *const n[] = {"length", "stop", "abort", "error"};
    return (unsigned)r < TDM_FINISH_MAX ? n[r] : "?";
}

static void fake_record(tdm_sched_t *s, const tdm_req_params_t *p)
{
    s->submits++;
    s->last_n_prompt = p->n_prompt;
    memcpy(s->last_prompt, p->prompt, (p->n_prompt < 4096 ? p->n_prompt : 4096) * sizeof(int32_t));
    s->last_max_new = p->max_new_tokens;
    s->last_sp = p->sampling;
    s->last_n_stop = p->n_stop_strs;
    for (uint32_t i = 0; i < p->n_stop_strs && i < TDM_SAMPLE_MAX_STOP; i++)
        snprintf(s->last_stop[i], sizeof(s->last_stop[i]), "%s", p->stop_strs[i]);
    s->last_want_text = p->want_text;
    s->last_skip_special = p->skip_special;
    s->last_ignore_eos = p->ignore_eos;
}

tdm_status_t tdm_sched_submit(tdm_sched_t *s, const tdm_req_params_t *p, uint64_t *ret_id,
                              char *err, size_t err_len)
{
    if (p->n_prompt == 0) {
        snprintf(err, err_len, "empty prompt");
        return TDM_ERR_RANGE;
    }
    if (p->prompt[0] == PROMPT_REFUSE) {
        snprintf(err, err_len, "queue full");
        return TDM_ERR_AGAIN;
    }
    pthread_mutex_lock(&s->mu);
    if (s->draining) {
        pthread_mutex_unlock(&s->mu);
        snprintf(err, err_len, "draining");
        return TDM_ERR_BUSY;
    }
    fake_record(s, p);
    for (int i = 0; i < FAKE_MAX; i++) {
        fake_req_t *f = &s->r[i];
        if (f->used)
            continue;
        memset(f, 0, sizeof(*f));
        f->used = 1;
        f->id = ++s->next_id;
        int32_t sum = 0;
        for (uint32_t k = 0; k < p->n_prompt; k++)
            sum = (sum + p->prompt[k]) % 100003;
        f->seed_tok = sum;
        f->n_prompt = p->n_prompt;
        f->max_new = p->max_new_tokens;
        f->fail = !s->scripted && p->prompt[0] == PROMPT_FAIL;
        f->sc = s->script;
        f->cb = p->cb;
        f->ctx = p->ctx;
        *ret_id = f->id;
        pthread_mutex_unlock(&s->mu);
        return TDM_OK;
    }
    pthread_mutex_unlock(&s->mu);
    snprintf(err, err_len, "fake full");
    return TDM_ERR_AGAIN;
}

void tdm_sched_abort(tdm_sched_t *s, uint64_t id)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < FAKE_MAX; i++)
        if (s->r[i].used && s->r[i].id == id) {
            s->r[i].aborted = 1;
            s->aborts_seen++;
        }
    pthread_mutex_unlock(&s->mu);
}

void tdm_sched_drain(tdm_sched_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
}

void tdm_sched_resume(tdm_sched_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 0;
    pthread_mutex_unlock(&s->mu);
}

void tdm_sched_stats(tdm_sched_t *s, tdm_sched_stats_t *ret)
{
    memset(ret, 0, sizeof(*ret));
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < FAKE_MAX; i++)
        ret->running += (uint32_t)s->r[i].used;
    ret->pages_total = 64;
    ret->pages_free = 64 - ret->running;
    ret->requests_finished = s->finished;
    ret->requests_aborted = s->aborted_finished;
    ret->draining = s->draining;
    ret->drained = s->draining && ret->running == 0;
    pthread_mutex_unlock(&s->mu);
}

/* The request's last event (FINISH or ERROR); frees its slot. */
static void fake_end(tdm_sched_t *s, fake_req_t *f, tdm_req_event_kind_t kind,
                     tdm_finish_reason_t fin, int32_t stop_tok, uint64_t ttft_us)
{
    tdm_req_event_t ev = {0};
    ev.kind = kind;
    ev.req_id = f->id;
    ev.finish = fin;
    ev.matched_stop_token = stop_tok;
    ev.status = kind == TDM_REQ_ERROR ? TDM_ERR_TIMEOUT : TDM_OK;
    ev.message = kind == TDM_REQ_ERROR ? "deadline passed" : NULL;
    ev.prompt_tokens = f->n_prompt;
    ev.completion_tokens = f->emitted;
    ev.ttft_us = ttft_us;
    ev.text = s->scripted ? "" : NULL;
    f->cb(f->ctx, &ev);
    f->used = 0;
    s->finished += (uint64_t)(kind == TDM_REQ_FINISH && fin != TDM_FINISH_ABORT);
    s->aborted_finished += (uint64_t)(fin == TDM_FINISH_ABORT);
}

static void fake_step_generated(tdm_sched_t *s, fake_req_t *f)
{
    if (f->fail) {
        fake_end(s, f, TDM_REQ_ERROR, TDM_FINISH_ERROR, -1, 0);
        return;
    }
    tdm_req_event_t ev = {0};
    ev.kind = TDM_REQ_TOKEN;
    ev.req_id = f->id;
    ev.matched_stop_token = -1;
    ev.prompt_tokens = f->n_prompt;
    ev.completion_tokens = f->emitted;
    ev.token = fake_token(f->seed_tok, f->emitted++);
    f->cb(f->ctx, &ev);
    if (f->emitted == f->max_new)
        fake_end(s, f, TDM_REQ_FINISH, TDM_FINISH_LENGTH, -1, 1234);
}

static void fake_step_scripted(tdm_sched_t *s, fake_req_t *f)
{
    if ((int)f->emitted < f->sc.n && f->emitted < f->max_new) {
        const fake_piece_t *p = &f->sc.p[f->emitted++];
        tdm_req_event_t ev = {0};
        ev.kind = TDM_REQ_TOKEN;
        ev.req_id = f->id;
        ev.token = p->id;
        ev.text = p->text;
        ev.text_len = strlen(p->text);
        ev.matched_stop_token = -1;
        ev.sample.id = p->id;
        ev.sample.logprob = -0.25f * (float)f->emitted;
        ev.sample.n_top = 3;
        for (int k = 0; k < 3; k++) {
            ev.sample.top_ids[k] = p->id + k;
            ev.sample.top_logprobs[k] = -0.25f * (float)f->emitted - (float)k;
        }
        f->cb(f->ctx, &ev);
        return;
    }
    if (f->sc.error)
        fake_end(s, f, TDM_REQ_ERROR, TDM_FINISH_ERROR, -1, 0);
    else if (f->emitted >= f->max_new && (int)f->emitted < f->sc.n)
        fake_end(s, f, TDM_REQ_FINISH, TDM_FINISH_LENGTH, -1, 0);
    else
        fake_end(s, f, TDM_REQ_FINISH, f->sc.finish, f->sc.stop_token, 0);
}

static void *fake_loop(void *arg)
{
    tdm_sched_t *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        unsigned d = s->token_delay_us;
        for (int i = 0; i < FAKE_MAX; i++) {
            fake_req_t *f = &s->r[i];
            if (!f->used)
                continue;
            if (f->sc.delay_us)
                d = f->sc.delay_us;
            if (f->aborted)
                fake_end(s, f, TDM_REQ_FINISH, TDM_FINISH_ABORT, -1, 0);
            else if (s->scripted)
                fake_step_scripted(s, f);
            else
                fake_step_generated(s, f);
        }
        pthread_mutex_unlock(&s->mu);
        tdm_time_sleep_us(d);
    }
}

static inline int fake_active(tdm_sched_t *s)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < FAKE_MAX; i++)
        n += s->r[i].used;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Start the fake's thread: `scripted` picks how requests play, a pass every token_delay_us. */
static inline void fake_start(tdm_sched_t *s, int scripted, unsigned token_delay_us)
{
    pthread_mutex_init(&s->mu, NULL);
    s->scripted = scripted;
    s->token_delay_us = token_delay_us;
    pthread_create(&s->th, NULL, fake_loop, s);
}

/* Run the server's loop on this thread (h2o's per-thread recyclers stay reachable at exit) with
 * `clients` on a second one (it ends with tdm_api_server_stop); free the server, stop the fake
 * and check that no request was left behind. */
static inline void fake_serve(tdm_sched_t *s, tdm_api_t *a, void *(*clients)(void *))
{
    pthread_t th;
    pthread_create(&th, NULL, clients, NULL);
    tdm_api_server_run(a);
    pthread_join(th, NULL);
    tdm_api_server_free(a);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    ok(fake_active(s) == 0, "no request left behind");
}

#endif
