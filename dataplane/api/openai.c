/*
 * openai.c — POST /v1/completions, POST /v1/chat/completions and GET /v1/models on the worker's
 * h2o server (docs/api.md). Parsing is openai_req.c, shaping openai_resp.c; this file binds them
 * to the scheduler through generate.c's transport (tdm_api_gen_start with ops), so wake-ups,
 * back-pressure, abort on client disconnect and the request's lifetime are the ones /generate
 * has.
 *
 * Per request: the scheduler thread appends each event's text (already detokenized, stop strings
 * excluded and a possible partial match held back by the scheduler) and the sampled token's
 * logprobs under the transport's lock; the loop takes them and feeds the response builder. The
 * logprob entry of a token is held back one event so that the stop token that ended a request
 * (EOS, a stop id) is left out, as OpenAI does. Chat responses of a template with DSML tool calls
 * count toward the DSML-leak detector: a response with malformed markup increments
 * tandem_dsml_leak_total, sends a `dsml_leak` telemetry event at once, and every 10 s the loop
 * sends an `output_stats` event (responses, dsml_leaks, samples) that tandemd's OUTPUT_ANOMALY
 * rule reads (docs/alerts.md).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/api/api_int.h"

#define OUTPUT_STATS_EVERY_US 10000000u
#define LEAK_SAMPLES_MAX 3
#define LEAK_SAMPLE_BYTES 200

typedef struct oai_buf {
    char *text;
    size_t len, cap;
    tdm_oai_tok_t *toks;
    size_t n, tcap;
} oai_buf_t;

typedef struct oai_gen {
    tdm_api_t *api;
    tdm_oai_req_t req;
    tdm_oai_resp_t resp;
    /* scheduler thread, under the transport's lock */
    oai_buf_t s;
    tdm_oai_tok_t last; /* the newest token's logprobs, held back one event */
    int have_last;
    int fin;
    tdm_req_event_kind_t fin_kind;
    tdm_finish_reason_t finish;
    tdm_status_t fin_status;
    char fin_msg[256];
    uint32_t prompt_tokens, completion_tokens, cached_tokens;
    /* loop thread */
    oai_buf_t l;
} oai_gen_t;

static void buf_text(oai_buf_t *b, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n)
            c *= 2;
        b->text = tdm_realloc(b->text, c);
        b->cap = c;
    }
    memcpy(b->text + b->len, s, n);
    b->len += n;
}

static void buf_tok(oai_buf_t *b, const tdm_oai_tok_t *t)
{
    if (b->n == b->tcap) {
        b->tcap = b->tcap ? 2 * b->tcap : 16;
        b->toks = tdm_realloc(b->toks, b->tcap * sizeof(*b->toks));
    }
    b->toks[b->n++] = *t;
}

/* ---- transport ops -------------------------------------------------------------------------- */

static void og_on_event(void *ud, const tdm_req_event_t *ev)
{
    oai_gen_t *og = ud;
    if (og->fin)
        return;
    buf_text(&og->s, ev->text, ev->text ? ev->text_len : 0);
    if (ev->kind == TDM_REQ_TOKEN) {
        if (og->req.logprobs) {
            if (og->have_last)
                buf_tok(&og->s, &og->last);
            og->last.s = ev->sample;
            og->last.s.id = ev->token;
            og->have_last = 1;
        }
        return;
    }
    if (og->have_last && ev->kind == TDM_REQ_FINISH && ev->matched_stop_token < 0)
        buf_tok(&og->s, &og->last);
    og->have_last = 0;
    og->fin = 1;
    og->fin_kind = ev->kind;
    og->finish = ev->finish;
    og->fin_status = ev->status;
    snprintf(og->fin_msg, sizeof(og->fin_msg), "%s", ev->message ? ev->message : "");
    og->prompt_tokens = ev->prompt_tokens;
    og->completion_tokens = ev->completion_tokens;
    og->cached_tokens = ev->cached_tokens;
}

static void og_take(void *ud)
{
    oai_gen_t *og = ud;
    oai_buf_t t = og->l;
    og->l = og->s;
    og->s = t;
    og->s.len = 0;
    og->s.n = 0;
}

static void og_free(void *ud)
{
    oai_gen_t *og = ud;
    tdm_oai_resp_free(&og->resp);
    tdm_oai_req_free(&og->req);
    tdm_free(og->s.text);
    tdm_free(og->s.toks);
    tdm_free(og->l.text);
    tdm_free(og->l.toks);
    tdm_free(og);
}

static void send_event(tdm_api_t *a, const char *type, json_t *data)
{
    if (a->o.event)
        a->o.event(a->o.event_ctx, type, data);
    else
        json_decref(data);
}

/* DSML-leak accounting of one finished chat response. */
static void count_response(tdm_api_t *a, oai_gen_t *og)
{
    if (og->req.tool_parser == TDM_TC_NONE)
        return;
    a->dsml_responses++;
    a->out_responses++;
    if (og->resp.malformed == 0)
        return;
    a->dsml_leaks++;
    a->out_leaks++;
    const char *c = og->resp.content ? og->resp.content : "";
    size_t n = og->resp.content_len < LEAK_SAMPLE_BYTES ? og->resp.content_len : LEAK_SAMPLE_BYTES;
    char *sample = tdm_strndup(c, n);
    json_t *js = json_stringn(sample, n); /* NULL when the cut split a character */
    json_t *s = json_pack("{s:s,s:s,s:o}", "id", og->resp.id, "reason", og->resp.first_leak,
                          "sample", js ? js : json_string(""));
    if (!a->out_samples)
        a->out_samples = json_array();
    if (json_array_size(a->out_samples) < LEAK_SAMPLES_MAX)
        json_array_append(a->out_samples, s);
    tdm_free(sample);
    tdm_warn(TDM_SUB_API, "msg=\"DSML leak: malformed tool-call markup\" id=%s reason=\"%s\"",
             og->resp.id, og->resp.first_leak);
    send_event(a, "dsml_leak", s);
}

void tdm_api_openai_tick(tdm_api_t *a, uint64_t now_us)
{
    if (a->out_last_us == 0)
        a->out_last_us = now_us;
    if (now_us - a->out_last_us < OUTPUT_STATS_EVERY_US || a->out_responses == 0)
        return;
    json_t *d = json_pack("{s:i,s:i}", "responses", (json_int_t)a->out_responses, "dsml_leaks",
                          (json_int_t)a->out_leaks);
    if (a->out_samples)
        json_object_set_new(d, "samples", a->out_samples);
    a->out_samples = NULL;
    a->out_responses = a->out_leaks = 0;
    a->out_last_us = now_us;
    send_event(a, "output_stats", d);
}

void tdm_api_openai_fini(tdm_api_t *a)
{
    json_decref(a->out_samples);
    a->out_samples = NULL;
}

static const char *finish_name(tdm_finish_reason_t f)
{
    switch (f) {
    case TDM_FINISH_LENGTH:
        return "length";
    case TDM_FINISH_STOP:
        return "stop";
    default:
        return "abort";
    }
}

static void og_process(tdm_api_gen_t *g, void *ud, int done)
{
    oai_gen_t *og = ud;
    tdm_api_t *a = og->api;
    tdm_oai_resp_t *r = &og->resp;
    tdm_oai_resp_feed(r, og->l.text, og->l.len, og->l.toks, og->l.n);
    og->l.len = og->l.n = 0;
    h2o_req_t *req = tdm_api_gen_req(g);
    if (done && og->fin_kind == TDM_REQ_ERROR) {
        int http;
        json_t *e = tdm_json_error_status(og->fin_status != TDM_OK ? og->fin_status : TDM_ERR_IO,
                                          og->fin_msg[0] ? og->fin_msg : NULL, &http);
        if (r->stream) {
            tdm_oai_resp_stream_error(r, e);
        } else if (req) {
            char *t = tdm_json_dumps(e);
            a->http_errors++;
            tdm_api_send_json(req, http, t, strlen(t));
            free(t);
        }
        json_decref(e);
    } else if (done) {
        char *body = tdm_oai_resp_finish(r, finish_name(og->finish), og->prompt_tokens,
                                         og->completion_tokens, og->cached_tokens);
        count_response(a, og);
        if (body && req)
            tdm_api_send_json(req, 200, body, strlen(body));
        free(body);
    }
    if (r->stream) {
        tdm_api_gen_write(g, r->out, r->out_len, done);
        r->out_len = 0;
    }
}

static const tdm_api_gen_ops_t oai_ops = {
    .on_event = og_on_event,
    .take = og_take,
    .process = og_process,
    .free = og_free,
};

/* ---- handlers ------------------------------------------------------------------------------- */

static void send_oai_error(tdm_api_t *a, h2o_req_t *req, const tdm_oai_err_t *e)
{
    json_t *o = tdm_json_error(e->http == 404 ? "not_found_error" : "invalid_request_error",
                               e->code, e->message);
    json_object_set_new(json_object_get(o, "error"), "param",
                        e->param[0] ? json_string(e->param) : json_null());
    char *t = tdm_json_dumps(o);
    json_decref(o);
    a->http_errors++;
    tdm_api_send_json(req, e->http, t, strlen(t));
    free(t);
}

static void handle(tdm_api_t *a, h2o_req_t *req, tdm_oai_kind_t kind)
{
    char err[512] = "";
    tdm_oai_err_t e;
    memset(&e, 0, sizeof(e));
    a->oai_requests[kind]++;
    if (!a->oai.tok) {
        tdm_api_send_status(a, req, TDM_ERR_STATE, "this worker has no tokenizer loaded");
        return;
    }
    json_t *body = tdm_api_body_object(a, req);
    if (!body)
        return;
    oai_gen_t *og = tdm_calloc(1, sizeof(*og));
    og->api = a;
    tdm_status_t st = tdm_oai_parse(&a->oai, kind, body, &og->req, &e);
    json_decref(body);
    if (st != TDM_OK) {
        send_oai_error(a, req, &e);
        og_free(og);
        return;
    }
    uint64_t rid;
    if (getrandom(&rid, sizeof(rid), 0) != (ssize_t)sizeof(rid))
        rid = tdm_time_mono_ns();
    st = tdm_oai_resp_init(&og->resp, &og->req, a->oai.tok, a->oai.model_name, rid);
    if (st != TDM_OK) {
        og_free(og);
        tdm_api_send_status(a, req, st, "cannot start the tool-call parser");
        return;
    }
    tdm_req_params_t rp = {
        .prompt = og->req.prompt,
        .n_prompt = og->req.n_prompt,
        .max_new_tokens = og->req.max_tokens,
        .sampling = og->req.sp,
        .stop_strs = (const char *const *)og->req.stop,
        .n_stop_strs = og->req.n_stop,
        .ignore_eos = og->req.ignore_eos,
        .want_text = 1,
        .skip_special = og->req.skip_special,
    };
    st = tdm_api_gen_start(a, req, &rp, og->req.stream, &oai_ops, og, err, sizeof(err));
    if (st != TDM_OK) {
        og_free(og);
        tdm_api_send_status(a, req, st, err[0] ? err : NULL);
    }
}

void tdm_api_h_completions(tdm_api_t *a, h2o_req_t *req)
{
    handle(a, req, TDM_OAI_COMPLETIONS);
}

void tdm_api_h_chat(tdm_api_t *a, h2o_req_t *req)
{
    handle(a, req, TDM_OAI_CHAT);
}

void tdm_api_h_models(tdm_api_t *a, h2o_req_t *req)
{
    char *t = tdm_oai_models_json(a->oai.model_name, (int64_t)(a->started_us / 1000000),
                                  a->oai.max_context);
    tdm_api_send_json(req, 200, t, strlen(t));
    free(t);
}
