/*
 * openai_resp.c — OpenAI response bodies: whole chat.completion / text_completion objects and the
 * SSE chunks of a stream, logprobs in the chat shape (choices[].logprobs.content[] with
 * top_logprobs) and the legacy completions shape (tokens, token_logprobs, top_logprobs,
 * text_offset), and the DSML tool-call stream of chat requests.
 *
 * One code path for both modes: generated text goes through the DSML parser (when the request
 * parses tool calls) and its events either accumulate (whole replies) or become deltas (streams):
 * content as delta.content, a call as a tool_calls delta carrying index, id, type and name first,
 * then its arguments in pieces. Markup is never content. MALFORMED events are counted for the
 * DSML-leak detector. Nothing here touches h2o or the scheduler, so the unit test drives it
 * directly.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <tdm/json.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/api/openai_int.h"

/* A JSON string from bytes that should be UTF-8; invalid bytes become '?' rather than failing. */
static json_t *jstr(const char *s, size_t n)
{
    json_t *v = json_stringn(s ? s : "", s ? n : 0);
    if (v)
        return v;
    char *c = tdm_malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)s[i] < 0x80 && s[i] != '\0' ? s[i] : '?';
    v = json_stringn(c, n);
    tdm_free(c);
    return v;
}

static void out_append(tdm_oai_resp_t *r, const char *s, size_t n)
{
    if (r->out_len + n > r->out_cap) {
        size_t c = r->out_cap ? r->out_cap : 512;
        while (c < r->out_len + n)
            c *= 2;
        r->out = tdm_realloc(r->out, c);
        r->out_cap = c;
    }
    memcpy(r->out + r->out_len, s, n);
    r->out_len += n;
}

static void sse_obj(tdm_oai_resp_t *r, json_t *o)
{
    char *t = tdm_json_dumps(o);
    json_decref(o);
    out_append(r, "data: ", 6);
    out_append(r, t, strlen(t));
    out_append(r, "\n\n", 2);
    free(t);
}

static void content_append(tdm_oai_resp_t *r, const char *s, size_t n)
{
    if (r->content_len + n + 1 > r->content_cap) {
        size_t c = r->content_cap ? r->content_cap : 256;
        while (c < r->content_len + n + 1)
            c *= 2;
        r->content = tdm_realloc(r->content, c);
        r->content_cap = c;
    }
    memcpy(r->content + r->content_len, s, n);
    r->content_len += n;
    r->content[r->content_len] = '\0';
}

/* ---- chunks --------------------------------------------------------------------------------- */

static json_t *chunk_head(tdm_oai_resp_t *r)
{
    int chat = r->req->kind == TDM_OAI_CHAT;
    return json_pack("{s:s,s:s,s:I,s:s}", "id", r->id, "object",
                     chat ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)r->created, "model", r->model);
}

/* The logprobs object of the pending entries (stolen), or null. */
static json_t *take_logprobs(tdm_oai_resp_t *r)
{
    json_t *lp;
    if (r->req->kind == TDM_OAI_CHAT) {
        if (!r->lp_content)
            return json_null();
        lp = json_pack("{s:o}", "content", r->lp_content);
        r->lp_content = r->stream ? json_array() : NULL;
        return lp;
    }
    if (!r->lp_legacy)
        return json_null();
    lp = r->lp_legacy;
    r->lp_legacy = r->stream ? json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs",
                                         "top_logprobs", "text_offset")
                             : NULL;
    return lp;
}

static int lp_pending(const tdm_oai_resp_t *r)
{
    if (r->lp_content)
        return json_array_size(r->lp_content) > 0;
    return r->lp_legacy && json_array_size(json_object_get(r->lp_legacy, "tokens")) > 0;
}

/* One chunk with `delta` (chat) or text (completions), the pending logprobs and finish_reason. */
static void emit_chunk(tdm_oai_resp_t *r, json_t *delta, const char *finish)
{
    json_t *o = chunk_head(r), *ch;
    json_t *fin = finish ? json_string(finish) : json_null();
    if (r->req->kind == TDM_OAI_CHAT)
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs",
                       take_logprobs(r), "finish_reason", fin);
    else
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "text", delta, "logprobs", take_logprobs(r),
                       "finish_reason", fin);
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    sse_obj(r, o);
}

/* Stream: send the content gathered so far (with the logprobs of its tokens). */
static void flush_content(tdm_oai_resp_t *r, int with_logprobs_only)
{
    if (!r->stream || (r->content_len == 0 && !(with_logprobs_only && lp_pending(r))))
        return;
    json_t *text = jstr(r->content, r->content_len);
    r->content_len = 0;
    if (r->req->kind == TDM_OAI_CHAT)
        emit_chunk(r, json_pack("{s:o}", "content", text), NULL);
    else
        emit_chunk(r, text, NULL);
}

static void emit_tool_delta(tdm_oai_resp_t *r, json_t *call_delta)
{
    flush_content(r, 0);
    emit_chunk(r, json_pack("{s:[o]}", "tool_calls", call_delta), NULL);
}

/* ---- the DSML stream ------------------------------------------------------------------------ */

static void call_id(char buf[40])
{
    uint8_t b[12];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        uint64_t t = tdm_time_mono_ns();
        memcpy(b, &t, 8);
        memcpy(b + 8, &t, 4);
    }
    int n = snprintf(buf, 40, "call_");
    for (size_t i = 0; i < sizeof(b); i++)
        n += snprintf(buf + n, 40 - (size_t)n, "%02x", b[i]);
}

static void on_dsml(void *ud, const tdm_dsml_event_t *ev)
{
    tdm_oai_resp_t *r = ud;
    int drop = r->req->tool_choice == TDM_OAI_TOOLS_NONE;
    char id[40];
    switch (ev->kind) {
    case TDM_DSML_CONTENT:
        content_append(r, ev->text, ev->len);
        break;
    case TDM_DSML_CALL_START:
        if (drop) {
            r->calls_dropped++;
            break;
        }
        call_id(id);
        r->n_calls++;
        if (r->stream) {
            emit_tool_delta(r, json_pack("{s:i,s:s,s:s,s:{s:o,s:s}}", "index", (int)ev->index, "id",
                                         id, "type", "function", "function", "name",
                                         jstr(ev->text, ev->len), "arguments", ""));
        } else {
            /* the slot of call `index`; arguments arrive with CALL_END */
            while (json_array_size(r->tool_calls) <= (size_t)ev->index)
                json_array_append_new(r->tool_calls, json_null());
            json_array_set_new(r->tool_calls, (size_t)ev->index,
                               json_pack("{s:s,s:s,s:{s:o,s:n}}", "id", id, "type", "function",
                                         "function", "name", jstr(ev->text, ev->len), "arguments"));
        }
        break;
    case TDM_DSML_CALL_ARGS:
        if (!drop && r->stream && ev->len > 0)
            emit_tool_delta(r, json_pack("{s:i,s:{s:o}}", "index", (int)ev->index, "function",
                                         "arguments", jstr(ev->text, ev->len)));
        break;
    case TDM_DSML_CALL_END:
        if (!drop && !r->stream) {
            json_t *c = json_array_get(r->tool_calls, (size_t)ev->index);
            if (json_is_object(c))
                json_object_set_new(json_object_get(c, "function"), "arguments",
                                    jstr(ev->text, ev->len));
        }
        break;
    case TDM_DSML_MALFORMED:
        if (r->malformed++ == 0)
            snprintf(r->first_leak, sizeof(r->first_leak), "%.*s",
                     (int)(ev->len > 120 ? 120 : ev->len), ev->text ? ev->text : "");
        if (!r->stream && ev->index >= 0 && (size_t)ev->index < json_array_size(r->tool_calls))
            json_array_set_new(r->tool_calls, (size_t)ev->index, json_null()); /* abandoned */
        break;
    default:
        break;
    }
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

tdm_status_t tdm_oai_resp_init(tdm_oai_resp_t *r, const tdm_oai_req_t *req, const tdm_tok_t *tok,
                               const char *model, uint64_t id)
{
    memset(r, 0, sizeof(*r));
    r->req = req;
    r->tok = tok;
    r->model = model;
    r->stream = req->stream;
    r->created = (int64_t)(tdm_time_wall_us() / 1000000);
    snprintf(r->id, sizeof(r->id), "%s-%016llx", req->kind == TDM_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)id);
    if (req->logprobs) {
        if (req->kind == TDM_OAI_CHAT)
            r->lp_content = json_array();
        else
            r->lp_legacy = json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs",
                                     "top_logprobs", "text_offset");
    }
    if (req->kind == TDM_OAI_CHAT && !r->stream)
        r->tool_calls = json_array();
    if (req->tool_parser != TDM_TC_NONE) {
        tdm_status_t st = tdm_tc_stream_init(req->tool_parser, req->tools, on_dsml, r, &r->tc);
        if (st != TDM_OK) {
            tdm_oai_resp_free(r);
            return st;
        }
        if (req->prefix)
            tdm_tc_stream_feed(r->tc, req->prefix, strlen(req->prefix));
    }
    if (r->stream && req->kind == TDM_OAI_CHAT) {
        r->role_sent = 1;
        emit_chunk(r, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL);
    }
    return TDM_OK;
}

void tdm_oai_resp_free(tdm_oai_resp_t *r)
{
    if (!r)
        return;
    tdm_tc_stream_free(r->tc);
    json_decref(r->lp_content);
    json_decref(r->lp_legacy);
    json_decref(r->tool_calls);
    tdm_free(r->content);
    tdm_free(r->out);
    memset(r, 0, sizeof(*r));
}

/* The token's text as the client sees it in logprobs (specials included). */
static json_t *token_json(const tdm_oai_resp_t *r, int32_t id, size_t *ret_len, json_t **ret_bytes)
{
    char *s = NULL;
    size_t n = 0;
    uint32_t u = (uint32_t)id;
    if (id < 0 || tdm_tok_decode(r->tok, &u, 1, 0, &s, &n) != TDM_OK) {
        tdm_free(s);
        s = NULL, n = 0;
    }
    if (ret_bytes) {
        *ret_bytes = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(*ret_bytes, json_integer((unsigned char)s[i]));
    }
    json_t *v = jstr(s ? s : "", n);
    tdm_free(s);
    if (ret_len)
        *ret_len = n;
    return v;
}

static void add_logprobs(tdm_oai_resp_t *r, const tdm_oai_tok_t *toks, size_t n_toks)
{
    for (size_t i = 0; i < n_toks; i++) {
        const tdm_sample_result_t *s = &toks[i].s;
        if (r->lp_content) {
            json_t *bytes, *top = json_array();
            json_t *tokj = token_json(r, s->id, NULL, &bytes);
            for (uint32_t k = 0; k < s->n_top && k < r->req->top_logprobs; k++) {
                json_t *tb, *tt = token_json(r, s->top_ids[k], NULL, &tb);
                json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", tt, "logprob",
                                                     (double)s->top_logprobs[k], "bytes", tb));
            }
            json_array_append_new(r->lp_content, json_pack("{s:o,s:f,s:o,s:o}", "token", tokj,
                                                           "logprob", (double)s->logprob, "bytes",
                                                           bytes, "top_logprobs", top));
        } else if (r->lp_legacy) {
            size_t len;
            json_t *tokj = token_json(r, s->id, &len, NULL);
            json_t *top = json_object();
            for (uint32_t k = 0; k < s->n_top && k < r->req->top_logprobs; k++) {
                json_t *tt = token_json(r, s->top_ids[k], NULL, NULL);
                json_object_set_new(top, json_string_value(tt),
                                    json_real((double)s->top_logprobs[k]));
                json_decref(tt);
            }
            json_array_append_new(json_object_get(r->lp_legacy, "tokens"), tokj);
            json_array_append_new(json_object_get(r->lp_legacy, "token_logprobs"),
                                  json_real((double)s->logprob));
            json_array_append_new(json_object_get(r->lp_legacy, "top_logprobs"), top);
            json_array_append_new(json_object_get(r->lp_legacy, "text_offset"),
                                  json_integer((json_int_t)r->text_offset));
            r->text_offset += len;
        }
    }
}

void tdm_oai_resp_feed(tdm_oai_resp_t *r, const char *text, size_t len, const tdm_oai_tok_t *toks,
                       size_t n_toks)
{
    add_logprobs(r, toks, n_toks);
    if (r->tc && len > 0)
        tdm_tc_stream_feed(r->tc, text, len);
    else if (len > 0)
        content_append(r, text, len);
    /* the tokens' logprobs travel with the next content; completions have no tool calls, so
     * their logprobs go out at once even when the text is still held back */
    flush_content(r, r->req->kind == TDM_OAI_COMPLETIONS);
}

static json_t *usage_json(uint32_t prompt, uint32_t completion, uint32_t cached)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", (json_int_t)prompt,
                     "completion_tokens", (json_int_t)completion, "total_tokens",
                     (json_int_t)prompt + completion, "prompt_tokens_details", "cached_tokens",
                     (json_int_t)cached);
}

/* Whole replies: the finished calls, abandoned slots removed. */
static json_t *finished_calls(tdm_oai_resp_t *r)
{
    json_t *out = json_array(), *c;
    size_t i;
    json_array_foreach(r->tool_calls, i, c)
    {
        if (json_is_object(c) &&
            json_is_string(json_object_get(json_object_get(c, "function"), "arguments")))
            json_array_append(out, c);
    }
    return out;
}

char *tdm_oai_resp_finish(tdm_oai_resp_t *r, const char *finish_reason, uint32_t prompt_tokens,
                          uint32_t completion_tokens, uint32_t cached_tokens)
{
    if (r->tc)
        tdm_tc_stream_finish(r->tc);
    int chat = r->req->kind == TDM_OAI_CHAT;
    json_t *calls = chat && !r->stream ? finished_calls(r) : NULL;
    uint32_t n_calls = calls ? (uint32_t)json_array_size(calls) : r->n_calls;
    if (chat && n_calls > 0 && strcmp(finish_reason, "stop") == 0)
        finish_reason = "tool_calls";
    if (r->stream) {
        flush_content(r, 0);
        emit_chunk(r, chat ? json_object() : json_string(""), finish_reason);
        if (r->req->include_usage) {
            json_t *o = chunk_head(r);
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage",
                                usage_json(prompt_tokens, completion_tokens, cached_tokens));
            sse_obj(r, o);
        }
        out_append(r, "data: [DONE]\n\n", 14);
        return NULL;
    }
    json_t *choice;
    if (chat) {
        json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                                r->content_len || n_calls == 0 ? jstr(r->content, r->content_len)
                                                               : json_null());
        if (n_calls > 0)
            json_object_set(msg, "tool_calls", calls);
        choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "message", msg, "logprobs",
                           take_logprobs(r), "finish_reason", finish_reason);
    } else {
        choice =
            json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "text", jstr(r->content, r->content_len),
                      "logprobs", take_logprobs(r), "finish_reason", finish_reason);
    }
    json_decref(calls);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", r->id, "object",
                          chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)r->created, "model", r->model, "choices", choice, "usage",
                          usage_json(prompt_tokens, completion_tokens, cached_tokens));
    char *text = tdm_json_dumps(o);
    json_decref(o);
    return text;
}

void tdm_oai_resp_stream_error(tdm_oai_resp_t *r, const json_t *error)
{
    flush_content(r, 0);
    char *t = tdm_json_dumps(error);
    out_append(r, "data: ", 6);
    out_append(r, t, strlen(t));
    out_append(r, "\n\ndata: [DONE]\n\n", 16);
    free(t);
}

char *tdm_oai_models_json(const char *model_name, int64_t created, uint32_t max_context)
{
    json_t *o = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:i}]}", "object", "list", "data", "id",
                          model_name, "object", "model", "created", (json_int_t)created, "owned_by",
                          "tandem", "max_model_len", (json_int_t)max_context);
    char *t = tdm_json_dumps(o);
    json_decref(o);
    return t;
}
