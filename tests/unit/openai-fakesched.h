/*
 * tests/unit/openai-fakesched.h — the server fixture of the OpenAI endpoint tests: the shared
 * in-test scheduler (fakesched.h) in its scripted mode, a real h2o loop on the main thread, the
 * demo model's real tokenizer and chat template, clients on a second thread.
 *
 * The fake plays a script: each submitted request gets the pieces of the current script
 * (set_script), one TOKEN event per piece (token id, text, logprob and top logprobs) from its own
 * thread every couple of ms, then FINISH with the script's finish reason (and matched stop token),
 * or ERROR. It honours max_new_tokens (FINISH(LENGTH)) and aborts (FINISH(ABORT)), and records the
 * last submitted parameters so tests can check what the API asked for.
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
#include "fakesched.h"
#include "tap.h"

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
    fake_start(&sched, 1, 2000);
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
    fake_serve(&sched, api, run_tests);
    tdm_progress_close(page);
    tdm_params_free(params);
    tdm_chat_template_free(chat);
    tdm_tok_free(tok);
    return done_testing();
}

#endif
