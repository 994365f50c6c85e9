/*
 * test-openai.c — the OpenAI endpoint (dataplane/api/openai*.c) on a real h2o loop against a
 * scripted in-test scheduler (openai-fakesched.h), with the demo model's real tokenizer and chat
 * template.
 *
 * Covers: /v1/models and the API key; completions with a string prompt (tokenized with specials)
 * and with token ids (verbatim, usage.prompt_tokens == their count); the parameters handed to the
 * scheduler (sampling, seed, stop strings, max_tokens, text wanted); legacy and chat logprobs
 * shapes, the stop token left out; chat rendered by the template; tool calls from DSML whole
 * (ids call_…, arguments coerced by the schema, finish_reason tool_calls, content null) and
 * streamed (index/id/name first, arguments in pieces, never markup as content);
 * tool_choice required / named / none; stream_options.include_usage; an error mid-stream;
 * malformed markup counted (tandem_dsml_leak_total, dsml_leak event, output_stats); a client that
 * leaves mid-stream is aborted. The response builder is also driven directly.
 */
#include "openai-fakesched.h"

/* Split an SSE body into its data payloads; returns the count, *ret_done when the last is [DONE].
 */
static size_t sse_parse(const char *body, json_t **ret, size_t max, int *ret_done)
{
    size_t n = 0;
    *ret_done = 0;
    for (const char *p = body; p && *p;) {
        const char *e = strstr(p, "\n\n");
        if (strncmp(p, "data: ", 6) != 0 || !e)
            break;
        if (strncmp(p + 6, "[DONE]", 6) == 0) {
            *ret_done = e[2] == '\0';
            break;
        }
        if (n < max)
            ret[n++] = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        p = e + 2;
    }
    return n;
}

static const char *choice_str(json_t *j, const char *k1, const char *k2)
{
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *v = json_object_get(c, k1);
    if (k2)
        v = json_object_get(v, k2);
    return json_string_value(v);
}

static json_t *usage_of(json_t *j, const char *k)
{
    return json_object_get(json_object_get(j, "usage"), k);
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void test_models_and_auth(void)
{
    http_resp_t r;
    http_do(port, "GET", "/v1/models", "", NULL, &r);
    ok(r.status == 401, "/v1/models without the key → 401");
    http_resp_free(&r);
    http_do(port, "GET", "/v1/models", AUTH, NULL, &r);
    json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    ok(r.status == 200 && !strcmp(json_string_value(json_object_get(j, "object")), "list") &&
           !strcmp(json_string_value(json_object_get(m, "id")), MODEL_NAME),
       "/v1/models lists --served-model-name");
    json_decref(j);
    http_resp_free(&r);
}

static const fake_script_t hello = {
    .p = {{200, "Hello"}, {201, ","}, {202, " world"}, {1, ""}},
    .n = 4,
    .finish = TDM_FINISH_STOP,
    .stop_token = 1,
};

static void test_completions(void)
{
    http_resp_t r;
    set_script(&hello);
    json_t *j =
        post("/v1/completions",
             "{\"model\":\"demo\",\"prompt\":\"Hi there\",\"max_tokens\":7,\"temperature\":"
             "0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"seed\":1234,"
             "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"stop\":[\"END\",\"\\n\\n\"],"
             "\"some_future_field\":{\"x\":1}}",
             &r);
    uint32_t *ids = NULL;
    size_t n = 0;
    tdm_tok_encode(tok, "Hi there", 8, 1, &ids, &n);
    ok(r.status == 200 && !strcmp(choice_str(j, "text", NULL), "Hello, world") &&
           !strcmp(choice_str(j, "finish_reason", NULL), "stop") &&
           !strcmp(json_string_value(json_object_get(j, "object")), "text_completion"),
       "completions: text, finish_reason, object (unknown field ignored)");
    ok(json_integer_value(usage_of(j, "prompt_tokens")) == (json_int_t)n &&
           sched.last_n_prompt == n && !memcmp(sched.last_prompt, ids, n * sizeof(int32_t)) &&
           json_integer_value(usage_of(j, "completion_tokens")) == 4 &&
           json_integer_value(usage_of(j, "total_tokens")) == (json_int_t)n + 4,
       "string prompt tokenized with the tokenizer's specials; usage counts");
    tdm_free(ids);
    ok(sched.last_max_new == 7 && sched.last_sp.seed == 1234 && sched.last_sp.temperature == 0.5f &&
           sched.last_sp.top_p == 0.9f && sched.last_sp.top_k == 40 &&
           sched.last_sp.min_p == 0.05f && sched.last_sp.presence_penalty == 0.5f &&
           sched.last_sp.frequency_penalty == -0.5f && sched.last_n_stop == 2 &&
           !strcmp(sched.last_stop[0], "END") && !strcmp(sched.last_stop[1], "\n\n") &&
           sched.last_want_text && sched.last_skip_special,
       "sampling, seed, max_tokens and stop strings reach the scheduler");
    ok(json_is_null(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs")),
       "no logprobs unless asked");
    json_decref(j);
    http_resp_free(&r);

    /* token ids: verbatim, no BOS */
    j = post("/v1/completions", "{\"model\":\"demo\",\"prompt\":[5,17,1000,3],\"max_tokens\":4}",
             &r);
    ok(r.status == 200 && sched.last_n_prompt == 4 && sched.last_prompt[0] == 5 &&
           sched.last_prompt[3] == 3 && json_integer_value(usage_of(j, "prompt_tokens")) == 4,
       "token-id prompt used verbatim; usage.prompt_tokens == 4");
    json_decref(j);
    http_resp_free(&r);
    j = post("/v1/completions", "{\"prompt\":[[7,8,9]],\"max_tokens\":2}", &r);
    ok(r.status == 200 && sched.last_n_prompt == 3 && sched.last_prompt[0] == 7 &&
           !strcmp(choice_str(j, "finish_reason", NULL), "length") &&
           !strcmp(choice_str(j, "text", NULL), "Hello,"),
       "[[ids]] prompt; max_tokens → finish_reason length");
    json_decref(j);
    http_resp_free(&r);
    /* max_tokens absent: the rest of the context */
    j = post("/v1/completions", "{\"prompt\":[7,8,9]}", &r);
    ok(r.status == 200 && sched.last_max_new == 2048 - 3, "default max_tokens = context - prompt");
    json_decref(j);
    http_resp_free(&r);
}

static void test_completions_logprobs(void)
{
    http_resp_t r;
    set_script(&hello);
    json_t *j = post("/v1/completions", "{\"prompt\":[5,6],\"logprobs\":2,\"max_tokens\":9}", &r);
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    json_t *toks = json_object_get(lp, "tokens"), *tl = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs"), *off = json_object_get(lp, "text_offset");
    ok(r.status == 200 && json_array_size(toks) == 3 && json_array_size(tl) == 3 &&
           json_array_size(top) == 3 && json_array_size(off) == 3,
       "legacy logprobs: 3 entries (the stop token left out)");
    ok(sched.last_sp.logprobs && sched.last_sp.top_logprobs == 2 &&
           json_object_size(json_array_get(top, 0)) <= 2 &&
           json_real_value(json_array_get(tl, 1)) == -0.5 &&
           json_integer_value(json_array_get(off, 0)) == 0,
       "legacy logprobs: token_logprobs, top_logprobs dicts, text_offset");
    json_decref(j);
    http_resp_free(&r);
}

static const char *weather_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"zone\":{\"type\":\"string\"}}}}}]";

static const fake_script_t call_script = {
    .p = {{300, "<tool_"},
          {301, "calls><invoke name=\"get_weather\">"},
          {302, "<parameter name=\"city\">Par"},
          {303, "is</parameter><parameter name=\"days\">3"},
          {304, "</parameter></invoke></tool_calls>"},
          {1, ""}},
    .n = 6,
    .finish = TDM_FINISH_STOP,
    .stop_token = 1,
};

static void test_chat(void)
{
    http_resp_t r;
    set_script(&hello);
    const char *msgs = "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
                       "\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}]}]";
    char body[4096];
    snprintf(body, sizeof(body),
             "{\"model\":\"demo\",\"messages\":%s,\"logprobs\":true,\"top_logprobs\":2}", msgs);
    json_t *j = post("/v1/chat/completions", body, &r);
    json_t *m = json_loadb(msgs, strlen(msgs), 0, NULL);
    char *text = NULL, err[256];
    size_t len = 0, n = 0;
    uint32_t *ids = NULL;
    tdm_chat_render(chat, m, NULL, 1, &text, &len, err, sizeof(err));
    tdm_tok_encode(tok, text, len, 0, &ids, &n);
    ok(r.status == 200 && n > 0 && sched.last_n_prompt == n &&
           !memcmp(sched.last_prompt, ids, n * sizeof(int32_t)),
       "chat: messages rendered by the model's template, tokenized without extra specials");
    ok(!strcmp(choice_str(j, "message", "content"), "Hello, world") &&
           !strcmp(choice_str(j, "message", "role"), "assistant") &&
           !strcmp(choice_str(j, "finish_reason", NULL), "stop") &&
           !strncmp(json_string_value(json_object_get(j, "id")), "chatcmpl-", 9),
       "chat: message, finish_reason, id");
    json_t *lc = json_object_get(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"), "content");
    json_t *e0 = json_array_get(lc, 0);
    ok(json_array_size(lc) == 3 && json_is_string(json_object_get(e0, "token")) &&
           json_real_value(json_object_get(e0, "logprob")) == -0.25 &&
           json_is_array(json_object_get(e0, "bytes")) &&
           json_array_size(json_object_get(e0, "top_logprobs")) == 2 &&
           json_is_string(
               json_object_get(json_array_get(json_object_get(e0, "top_logprobs"), 0), "token")),
       "chat logprobs: content[].{token,logprob,bytes,top_logprobs}, stop token left out");
    tdm_free(text);
    tdm_free(ids);
    json_decref(m);
    json_decref(j);
    http_resp_free(&r);

    /* assistant tool_calls and a tool result round-trip through the template */
    set_script(&hello);
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
             "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
             "\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
             "\"call_1\",\"content\":\"{\\\"temp\\\": 21}\"}],\"tools\":%s}",
             weather_tools);
    j = post("/v1/chat/completions", body, &r);
    uint32_t plen = sched.last_n_prompt;
    char *dec = NULL;
    size_t dl = 0;
    tdm_tok_decode(tok, (const uint32_t *)sched.last_prompt, plen, 0, &dec, &dl);
    ok(r.status == 200 && dec && strstr(dec, "<invoke name=\"get_weather\">") &&
           strstr(dec, "{\"temp\": 21}") && strstr(dec, "\"get_time\""),
       "assistant tool_calls, tool results and tools rendered into the prompt");
    tdm_free(dec);
    json_decref(j);
    http_resp_free(&r);
}

/* tool_choice required/named: the prompt ends at a token boundary inside the forced prefix;
 * returns the part of `prefix` the prompt does not cover (what the model must still write). */
static const char *prefix_rest(const char *body, const char *prefix)
{
    static const fake_script_t eos = {
        .p = {{1, ""}}, .n = 1, .finish = TDM_FINISH_STOP, .stop_token = 1};
    http_resp_t r;
    set_script(&eos);
    json_decref(post("/v1/chat/completions", body, &r));
    http_resp_free(&r);
    char *dec = NULL;
    size_t dl = 0;
    tdm_tok_decode(tok, (const uint32_t *)sched.last_prompt, sched.last_n_prompt, 0, &dec, &dl);
    /* the longest head of prefix the decoded prompt ends with */
    size_t pl = strlen(prefix), best = 0;
    for (size_t k = 1; k <= pl && k <= dl; k++)
        if (!memcmp(dec + dl - k, prefix, k))
            best = k;
    tdm_free(dec);
    return prefix + best;
}

static void test_tool_calls(void)
{
    http_resp_t r;
    char body[4096];
    set_script(&call_script);
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris for 3 days?\"}],"
             "\"tools\":%s}",
             weather_tools);
    json_t *j = post("/v1/chat/completions", body, &r);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    json_t *tc = json_array_get(json_object_get(msg, "tool_calls"), 0);
    const char *args =
        json_string_value(json_object_get(json_object_get(tc, "function"), "arguments"));
    ok(r.status == 200 && !strcmp(choice_str(j, "finish_reason", NULL), "tool_calls") &&
           json_is_null(json_object_get(msg, "content")) &&
           json_array_size(json_object_get(msg, "tool_calls")) == 1,
       "tool call: finish_reason tool_calls, content null, one call");
    ok(tc && !strncmp(json_string_value(json_object_get(tc, "id")), "call_", 5) &&
           !strcmp(json_string_value(json_object_get(tc, "type")), "function") &&
           !strcmp(json_string_value(json_object_get(json_object_get(tc, "function"), "name")),
                   "get_weather") &&
           args && !strcmp(args, "{\"city\": \"Paris\", \"days\": 3}"),
       "tool call: id call_…, name, arguments coerced by the schema (%s)", args ? args : "-");
    json_decref(j);
    http_resp_free(&r);

    /* streamed */
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":%s,"
             "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             weather_tools);
    post("/v1/chat/completions", body, &r);
    json_t *ev[64];
    int done;
    size_t n = sse_parse(r.body, ev, 64, &done);
    int role_first = n > 0 && !strcmp(choice_str(ev[0], "delta", "role"), "assistant");
    int first_call = -1, markup = 0, content_after = 0;
    char argbuf[256] = "";
    const char *fin = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_object_get(json_array_get(json_object_get(ev[i], "choices"), 0), "delta");
        const char *c = json_string_value(json_object_get(d, "content"));
        if (c && strchr(c, '<'))
            markup = 1;
        if (c && *c && first_call >= 0)
            content_after = 1;
        json_t *t = json_array_get(json_object_get(d, "tool_calls"), 0);
        if (t) {
            json_t *f = json_object_get(t, "function");
            if (first_call < 0) {
                first_call = (int)i;
                ok(json_integer_value(json_object_get(t, "index")) == 0 &&
                       !strncmp(json_string_value(json_object_get(t, "id")), "call_", 5) &&
                       !strcmp(json_string_value(json_object_get(f, "name")), "get_weather"),
                   "stream: the first tool_calls delta has index, id and name");
            } else {
                ok(json_object_get(t, "id") == NULL || i == (size_t)first_call,
                   "stream: later deltas carry arguments only (chunk %zu)", i);
            }
            const char *a = json_string_value(json_object_get(f, "arguments"));
            if (a)
                snprintf(argbuf + strlen(argbuf), sizeof(argbuf) - strlen(argbuf), "%s", a);
        }
        const char *fr = choice_str(ev[i], "finish_reason", NULL);
        if (fr)
            fin = fr;
    }
    ok(role_first && first_call > 0 && !markup && !content_after,
       "stream: role first, no markup as content");
    ok(!strcmp(argbuf, "{\"city\": \"Paris\"}") || strstr(argbuf, "\"city\""),
       "stream: argument pieces concatenate to the JSON (%s)", argbuf);
    ok(fin && !strcmp(fin, "tool_calls") && done, "stream: finish_reason tool_calls, [DONE]");
    json_t *last = n ? ev[n - 1] : NULL;
    ok(last && json_array_size(json_object_get(last, "choices")) == 0 &&
           json_integer_value(usage_of(last, "completion_tokens")) == 6,
       "stream_options.include_usage: a last chunk with usage and no choices");
    for (size_t i = 0; i < n; i++)
        json_decref(ev[i]);
    http_resp_free(&r);

    /* tool_choice required: the prompt ends inside a block; named: only that tool */
    char piece[256];
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Time?\"}],\"tools\":%s,"
             "\"tool_choice\":\"required\"}",
             weather_tools);
    const char *rest_of = prefix_rest(body, "<tool_calls>");
    ok(strlen(rest_of) < strlen("<tool_calls>"),
       "tool_choice required: the prompt ends inside <tool_calls> (left to the model: '%s')",
       rest_of);
    snprintf(piece, sizeof(piece),
             "%s<invoke name=\"get_time\"><parameter name=\"zone\">UTC</parameter>", rest_of);
    fake_script_t rest = {
        .p = {{302, piece}, {304, "</invoke></tool_calls>"}},
        .n = 2,
        .finish = TDM_FINISH_STOP,
        .stop_token = -1,
    };
    set_script(&rest);
    j = post("/v1/chat/completions", body, &r);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    tc = json_array_get(json_object_get(msg, "tool_calls"), 0);
    ok(r.status == 200 &&
           !strcmp(json_string_value(json_object_get(json_object_get(tc, "function"), "name")),
                   "get_time") &&
           !strcmp(choice_str(j, "finish_reason", NULL), "tool_calls"),
       "tool_choice required: the call is parsed from the prefix + the model's output");
    json_decref(j);
    http_resp_free(&r);

    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":%s,\"tool_choice\":"
             "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}",
             weather_tools);
    rest_of = prefix_rest(body, "<tool_calls><invoke name=\"get_weather\">");
    ok(strlen(rest_of) < 3, "tool_choice named: the prompt opens that invoke (left: '%s')",
       rest_of);
    snprintf(piece, sizeof(piece),
             "%s<parameter name=\"city\">Oslo</parameter></invoke></tool_calls>", rest_of);
    fake_script_t named_rest = {
        .p = {{302, piece}},
        .n = 1,
        .finish = TDM_FINISH_STOP,
        .stop_token = -1,
    };
    set_script(&named_rest);
    j = post("/v1/chat/completions", body, &r);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    tc = json_array_get(json_object_get(msg, "tool_calls"), 0);
    args = json_string_value(json_object_get(json_object_get(tc, "function"), "arguments"));
    ok(r.status == 200 && args && !strcmp(args, "{\"city\": \"Oslo\"}") &&
           !strcmp(choice_str(j, "finish_reason", NULL), "tool_calls"),
       "tool_choice named: arguments %s", args ? args : "-");
    json_decref(j);
    http_resp_free(&r);

    /* none: a call the model makes anyway is dropped, never shown as content */
    set_script(&call_script);
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":%s,"
             "\"tool_choice\":\"none\"}",
             weather_tools);
    j = post("/v1/chat/completions", body, &r);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    ok(r.status == 200 && !json_object_get(msg, "tool_calls") &&
           !strcmp(json_string_value(json_object_get(msg, "content")), "") &&
           !strcmp(choice_str(j, "finish_reason", NULL), "stop"),
       "tool_choice none: no tool_calls, no markup in content");
    json_decref(j);
    http_resp_free(&r);
}

static int metric(const char *name)
{
    http_resp_t r;
    http_do(port, "GET", "/metrics", "", NULL, &r);
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = r.body ? strstr(r.body, pat) : NULL;
    int v = p ? atoi(p + strlen(pat)) : -1;
    http_resp_free(&r);
    return v;
}

static void test_leak(void)
{
    static const fake_script_t broken = {
        .p = {{300, "Sure. <tool_calls><invoke name=\"get_weather\"><parameter name=\"city\">"},
              {301, "Paris</invoke>"},
              {1, ""}},
        .n = 3,
        .finish = TDM_FINISH_STOP,
        .stop_token = 1,
    };
    http_resp_t r;
    char body[4096];
    int before = metric("tandem_dsml_leak_total"), ev_before = events_leak;
    set_script(&broken);
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":%s}", weather_tools);
    json_t *j = post("/v1/chat/completions", body, &r);
    const char *c = choice_str(j, "message", "content");
    ok(r.status == 200 && c && !strchr(c, '<') &&
           !strcmp(choice_str(j, "finish_reason", NULL), "stop"),
       "malformed markup: never content (%s)", c ? c : "-");
    json_decref(j);
    http_resp_free(&r);
    ok(metric("tandem_dsml_leak_total") == before + 1 && events_leak == ev_before + 1,
       "malformed markup: tandem_dsml_leak_total +1 and a dsml_leak telemetry event");
    tdm_api_openai_tick(api, tdm_time_mono_us() + 11000000);
    ok(events_stats == 1, "output_stats event after 10 s of serving");
}

static void test_stream_misc(void)
{
    http_resp_t r;
    json_t *ev[64];
    int done;
    /* completions stream: text deltas, then [DONE] */
    set_script(&hello);
    post("/v1/completions", "{\"prompt\":[1,2],\"stream\":true,\"logprobs\":1}", &r);
    size_t n = sse_parse(r.body, ev, 64, &done);
    char text[128] = "";
    size_t n_lp = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t = choice_str(ev[i], "text", NULL);
        if (t)
            snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s", t);
        json_t *lp =
            json_object_get(json_array_get(json_object_get(ev[i], "choices"), 0), "logprobs");
        n_lp += json_array_size(json_object_get(lp, "tokens"));
        json_decref(ev[i]);
    }
    ok(r.status == 200 && done && !strcmp(text, "Hello, world") && n_lp == 3,
       "completions stream: text deltas concatenate, logprobs per token, [DONE]");
    http_resp_free(&r);

    /* an error after some tokens */
    fake_script_t bad = hello;
    bad.error = 1;
    bad.n = 2;
    set_script(&bad);
    post("/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true}", &r);
    n = sse_parse(r.body, ev, 64, &done);
    ok(done && n >= 2 && json_object_get(ev[n - 1], "error"),
       "stream: an error ends in data: {\"error\":..} then [DONE]");
    for (size_t i = 0; i < n; i++)
        json_decref(ev[i]);
    http_resp_free(&r);
    bad.n = 1;
    set_script(&bad);
    json_t *j = post("/v1/completions", "{\"prompt\":[1]}", &r);
    ok(r.status == 504 && json_object_get(j, "error"), "whole reply: an error is an error object");
    json_decref(j);
    http_resp_free(&r);

    /* a client that leaves mid-stream: the request is aborted */
    fake_script_t slow = hello;
    slow.delay_us = 200000;
    set_script(&slow);
    uint64_t aborts = sched.aborts_seen;
    int fd = http_connect(port);
    const char *b = "{\"prompt\":[1,2],\"stream\":true}";
    http_send_req(fd, "POST", "/v1/completions", AUTH, b, strlen(b));
    char buf[512];
    struct pollfd pfd = {fd, POLLIN, 0};
    poll(&pfd, 1, 2000);
    ssize_t got = recv(fd, buf, sizeof(buf), 0);
    close(fd);
    uint64_t deadline = tdm_time_mono_us() + 5000000;
    while (tdm_time_mono_us() < deadline && (sched.aborts_seen == aborts || fake_active(&sched)))
        tdm_time_sleep_us(10000);
    ok(got > 0 && sched.aborts_seen > aborts && fake_active(&sched) == 0,
       "client disconnect mid-stream → the request is aborted");
}

/* The response builder without HTTP: every split of a tool call streams to the same call. */
static void test_resp_splits(void)
{
    const char *text = "Let me check. <tool_calls><invoke name=\"get_weather\"><parameter "
                       "name=\"city\">São Paulo</parameter><parameter name=\"days\">2"
                       "</parameter></invoke></tool_calls>";
    json_t *tools = json_loads(weather_tools, 0, NULL);
    tdm_oai_req_t req = {0};
    req.kind = TDM_OAI_CHAT;
    req.tool_parser = TDM_TC_DSML;
    req.tools = tools;
    req.stream = 1;
    size_t len = strlen(text);
    int all = 1;
    for (size_t cut = 1; cut < len; cut += 3) {
        tdm_oai_resp_t r;
        tdm_oai_resp_init(&r, &req, tok, "demo", 1);
        tdm_oai_resp_feed(&r, text, cut, NULL, 0);
        tdm_oai_resp_feed(&r, text + cut, len - cut, NULL, 0);
        tdm_oai_resp_finish(&r, "stop", 1, 2, 0);
        char *body = tdm_strndup(r.out, r.out_len);
        json_t *ev[64];
        int done;
        size_t n = sse_parse(body, ev, 64, &done);
        char args[256] = "", content[128] = "";
        const char *fin = NULL;
        for (size_t i = 0; i < n; i++) {
            json_t *d =
                json_object_get(json_array_get(json_object_get(ev[i], "choices"), 0), "delta");
            const char *c = json_string_value(json_object_get(d, "content"));
            if (c)
                snprintf(content + strlen(content), sizeof(content) - strlen(content), "%s", c);
            json_t *t = json_array_get(json_object_get(d, "tool_calls"), 0);
            const char *a =
                json_string_value(json_object_get(json_object_get(t, "function"), "arguments"));
            if (a)
                snprintf(args + strlen(args), sizeof(args) - strlen(args), "%s", a);
            if (choice_str(ev[i], "finish_reason", NULL))
                fin = choice_str(ev[i], "finish_reason", NULL);
        }
        int good = done && !strcmp(content, "Let me check. ") &&
                   !strcmp(args, "{\"city\": \"São Paulo\", \"days\": 2}") && fin &&
                   !strcmp(fin, "tool_calls");
        if (!good && all)
            diag("cut %zu: content '%s' args '%s'", cut, content, args);
        all &= good;
        for (size_t i = 0; i < n; i++)
            json_decref(ev[i]);
        tdm_free(body);
        tdm_oai_resp_free(&r);
    }
    ok(all, "response builder: every split streams the same content and call arguments");
    json_decref(tools);
}

static void *run_tests(void *arg)
{
    (void)arg;
    test_resp_splits();
    test_models_and_auth();
    test_completions();
    test_completions_logprobs();
    test_chat();
    test_tool_calls();
    test_leak();
    test_stream_misc();
    tdm_api_server_stop(api);
    return NULL;
}

int main(void)
{
    return fixture_main();
}
