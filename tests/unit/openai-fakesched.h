/*
 * tests/unit/openai-fakesched.h — an in-test scheduler implementing dataplane/sched/sched.h for
 * the OpenAI endpoint tests, plus the server fixture (real h2o loop on the main thread, the demo
 * model's real tokenizer and chat template, clients on a second thread).
 *
 * The fake plays a script: each submitted request gets the pieces of the current script, one
 * TOKEN event per piece (token id, text, logprob and top logprobs) from its own thread every
 * couple of ms, then FINISH with the script's finish reason (and matched stop token), or ERROR.
 * It honours max_new_tokens (FINISH(LENGTH)) and aborts (FINISH(ABORT)), and records the last
 * submitted parameters so tests can check what the API asked for.
 */
#ifndef TDM_TESTS_OPENAI_FAKESCHED_H
#define TDM_TESTS_OPENAI_FAKESCHED_H

#include "config.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include <tdm/chat.h>
#include <tdm/json.h>
#include <tdm/mem.h>
#include <tdm/time.h>
#include <tdm/tokenizer.h>

#include "api-testutil.h"
#include "dataplane/api/api_int.h"
#include "tap.h"

#define FAKE_MAX 32
#define SCRIPT_MAX 64

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
    unsigned delay_us;  /* between tokens */
} fake_script_t;

typedef struct fake_req {
    int used, aborted;
    uint64_t id;
    int next;
    uint32_t max_new, n_prompt;
    fake_script_t sc;
    tdm_req_cb cb;
    void *ctx;
} fake_req_t;

struct tdm_sched {
    pthread_mutex_t mu;
    pthread_t th;
    int stop;
    uint64_t next_id, aborts_seen;
    fake_req_t r[FAKE_MAX];
    fake_script_t script; /* what the next request plays */
    /* the last submit */
    int32_t last_prompt[4096];
    uint32_t last_n_prompt, last_max_new, last_n_stop;
    char last_stop[TDM_SAMPLE_MAX_STOP][TDM_SAMPLE_MAX_STOP_LEN + 1];
    tdm_sample_params_t last_sp;
    int last_want_text, last_skip_special, last_ignore_eos, submits;
};

const char *tdm_finish_reason_name(tdm_finish_reason_t r)
{
    static const char *const n[] = {"length", "stop", "abort", "error"};
    return (unsigned)r < TDM_FINISH_MAX ? n[r] : "?";
}

tdm_status_t tdm_sched_submit(tdm_sched_t *s, const tdm_req_params_t *p, uint64_t *ret_id,
                              char *err, size_t err_len)
{
    if (p->n_prompt == 0) {
        snprintf(err, err_len, "empty prompt");
        return TDM_ERR_RANGE;
    }
    pthread_mutex_lock(&s->mu);
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
    for (int i = 0; i < FAKE_MAX; i++) {
        fake_req_t *f = &s->r[i];
        if (f->used)
            continue;
        memset(f, 0, sizeof(*f));
        f->used = 1;
        f->id = ++s->next_id;
        f->max_new = p->max_new_tokens;
        f->n_prompt = p->n_prompt;
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
    (void)s;
}

void tdm_sched_stats(tdm_sched_t *s, tdm_sched_stats_t *ret)
{
    memset(ret, 0, sizeof(*ret));
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < FAKE_MAX; i++)
        ret->running += (uint32_t)s->r[i].used;
    ret->pages_total = 64;
    ret->pages_free = 64 - ret->running;
    pthread_mutex_unlock(&s->mu);
}

static void fake_end(fake_req_t *f, tdm_req_event_kind_t kind, tdm_finish_reason_t fin,
                     int32_t stop_tok)
{
    tdm_req_event_t ev = {0};
    ev.kind = kind;
    ev.req_id = f->id;
    ev.finish = fin;
    ev.matched_stop_token = stop_tok;
    ev.status = kind == TDM_REQ_ERROR ? TDM_ERR_TIMEOUT : TDM_OK;
    ev.message = kind == TDM_REQ_ERROR ? "deadline passed" : NULL;
    ev.prompt_tokens = f->n_prompt;
    ev.completion_tokens = (uint32_t)f->next;
    ev.text = "";
    f->cb(f->ctx, &ev);
    f->used = 0;
}

static void *fake_loop(void *arg)
{
    tdm_sched_t *s = arg;
    for (;;) {
        unsigned d = 2000;
        pthread_mutex_lock(&s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        for (int i = 0; i < FAKE_MAX; i++) {
            fake_req_t *f = &s->r[i];
            if (!f->used)
                continue;
            if (f->sc.delay_us)
                d = f->sc.delay_us;
            if (f->aborted) {
                fake_end(f, TDM_REQ_FINISH, TDM_FINISH_ABORT, -1);
                continue;
            }
            if (f->next < f->sc.n && (uint32_t)f->next < f->max_new) {
                const fake_piece_t *p = &f->sc.p[f->next++];
                tdm_req_event_t ev = {0};
                ev.kind = TDM_REQ_TOKEN;
                ev.req_id = f->id;
                ev.token = p->id;
                ev.text = p->text;
                ev.text_len = strlen(p->text);
                ev.matched_stop_token = -1;
                ev.sample.id = p->id;
                ev.sample.logprob = -0.25f * (float)f->next;
                ev.sample.n_top = 3;
                for (int k = 0; k < 3; k++) {
                    ev.sample.top_ids[k] = p->id + k;
                    ev.sample.top_logprobs[k] = -0.25f * (float)f->next - (float)k;
                }
                f->cb(f->ctx, &ev);
                continue;
            }
            if (f->sc.error)
                fake_end(f, TDM_REQ_ERROR, TDM_FINISH_ERROR, -1);
            else if ((uint32_t)f->next >= f->max_new && f->next < f->sc.n)
                fake_end(f, TDM_REQ_FINISH, TDM_FINISH_LENGTH, -1);
            else
                fake_end(f, TDM_REQ_FINISH, f->sc.finish, f->sc.stop_token);
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

/* ---- fixture -------------------------------------------------------------------------------- */

static tdm_sched_t sched;
static tdm_progress_page_t *page;
static tdm_api_t *api;
static int port;
static tdm_tok_t *tok;
static tdm_chat_template_t *chat;
static char srcdir[1024];
static _Atomic int events_leak, events_stats;

static inline void set_script(const fake_script_t *sc)
{
    pthread_mutex_lock(&sched.mu);
    sched.script = *sc;
    pthread_mutex_unlock(&sched.mu);
}

static void on_event_hook(void *ctx, const char *type, json_t *data)
{
    (void)ctx;
    if (strcmp(type, "dsml_leak") == 0 && json_is_string(json_object_get(data, "reason")))
        events_leak++;
    if (strcmp(type, "output_stats") == 0)
        events_stats++;
    json_decref(data);
}

#define MODEL_NAME "demo"
#define AUTH "Authorization: Bearer k3y\r\n"

/* POST a JSON body with the API key; the parsed reply body (NULL if not JSON). */
static inline json_t *post(const char *path, const char *body, http_resp_t *r)
{
    http_do(port, "POST", path, AUTH "Content-Type: application/json\r\n", body, r);
    return json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
}

/* An OpenAI error object: status, error.code, and message/type strings. */
static inline int is_oai_error(const http_resp_t *r, json_t *j, int status, const char *code)
{
    json_t *e = json_object_get(j, "error");
    const char *c = json_string_value(json_object_get(e, "code"));
    return r->status == status && c && strcmp(c, code) == 0 &&
           json_is_string(json_object_get(e, "message")) &&
           json_is_string(json_object_get(e, "type"));
}

static void *run_tests(void *arg);

/* Start the fake, the server (loop on the main thread: h2o's per-thread recyclers stay
 * reachable at exit) and the client thread; tear everything down. */
static int fixture_main(void)
{
    char err[512] = "", path[1200];
    const char *s = getenv("TDM_SRCDIR");
    snprintf(srcdir, sizeof(srcdir), "%s", s ? s : ".");
    snprintf(path, sizeof(path), "%s/models/demo/tokenizer.json", srcdir);
    if (tdm_tok_load(path, &tok, err, sizeof(err)) != TDM_OK) {
        printf("Bail out! %s: %s\n", path, err);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/models/demo", srcdir);
    if (tdm_chat_template_load(path, &chat, err, sizeof(err)) != TDM_OK) {
        printf("Bail out! %s: %s\n", path, err);
        return 1;
    }
    tdm_worker_config_t cfg;
    tdm_params_t *params = NULL;
    const char *argv[] = {"tandem-worker",
                          "--port",
                          "0",
                          "--host",
                          "127.0.0.1",
                          "--api-key",
                          "k3y",
                          "--served-model-name",
                          MODEL_NAME,
                          "--max-request-bytes",
                          "4096",
                          NULL};
    if (tdm_params_init(&tdm_worker_config_table, &cfg, &params, err, sizeof(err)) != TDM_OK ||
        tdm_params_load(params, 11, (char *const *)argv, NULL, err, sizeof(err)) != TDM_OK) {
        printf("Bail out! params: %s\n", err);
        return 1;
    }
    pthread_mutex_init(&sched.mu, NULL);
    pthread_create(&sched.th, NULL, fake_loop, &sched);
    tdm_progress_create_anon(1, 7, &page);
    tdm_api_opts_t o = {.cfg = &cfg,
                        .params = params,
                        .sched = &sched,
                        .page = page,
                        .tok = tok,
                        .chat = chat,
                        .max_context = 2048,
                        .event = on_event_hook};
    if (tdm_api_server_init(&o, &api, err, sizeof(err)) != TDM_OK) {
        printf("Bail out! server: %s\n", err);
        return 1;
    }
    port = tdm_api_server_port(api);
    pthread_t th;
    pthread_create(&th, NULL, run_tests, NULL);
    tdm_api_server_run(api);
    pthread_join(th, NULL);
    tdm_api_server_free(api);
    pthread_mutex_lock(&sched.mu);
    sched.stop = 1;
    pthread_mutex_unlock(&sched.mu);
    pthread_join(sched.th, NULL);
    ok(fake_active(&sched) == 0, "no request left behind");
    tdm_progress_close(page);
    tdm_params_free(params);
    tdm_chat_template_free(chat);
    tdm_tok_free(tok);
    return done_testing();
}

#endif
