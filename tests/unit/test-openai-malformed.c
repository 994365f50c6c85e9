/*
 * test-openai-malformed.c — every malformed-request case against the OpenAI endpoint
 * on a real h2o loop (openai-fakesched.h), each answered with the right status and an OpenAI
 * error object and never reaching the scheduler; then a valid request that succeeds on the same
 * server (nothing wedged, nothing leaked). Raw sockets, so bodies can carry anything.
 */
#include "openai-fakesched.h"

typedef struct bad_case {
    const char *path;
    const char *body; /* NULL: use body_len bytes of `raw` */
    int status;
    const char *code;
    const char *what;
} bad_case_t;

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define TOOL                                                                                       \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"    \
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]"
#define C "/v1/completions"
#define CH "/v1/chat/completions"

static const bad_case_t cases[] = {
    {C, "", 400, "empty_body", "empty body"},
    {C, "{\"prompt\":", 400, "invalid_json", "truncated JSON"},
    {C, "{\"prompt\":\"a\",}", 400, "invalid_json", "trailing comma"},
    {C, "[1,2,3]", 400, "invalid_json", "an array body"},
    {C, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, "invalid_json", "duplicate keys"},
    {C, "{\"prompt\":\"a\\u0000b\"}", 400, "invalid_json", "embedded NUL in a string"},
    {C, "{\"prompt\":\"\xff\xfe\"}", 400, "invalid_json", "invalid UTF-8"},
    {C, "{}", 400, "invalid_request", "prompt missing"},
    {C, "{\"prompt\":\"\"}", 400, "invalid_request", "empty prompt string"},
    {C, "{\"prompt\":[]}", 400, "invalid_request", "empty prompt array"},
    {C, "{\"prompt\":[1,-2]}", 400, "invalid_request", "negative token id"},
    {C, "{\"prompt\":[1,99999999]}", 400, "invalid_request", "token id over the vocabulary"},
    {C, "{\"prompt\":[1,2.5]}", 400, "invalid_request", "fractional token id"},
    {C, "{\"prompt\":[\"a\",\"b\"]}", 400, "unsupported_parameter", "batch of prompts"},
    {C, "{\"prompt\":{\"a\":1}}", 400, "invalid_request", "prompt of the wrong type"},
    {C, "{\"prompt\":\"a\",\"n\":2}", 400, "unsupported_parameter", "n > 1"},
    {C, "{\"prompt\":\"a\",\"best_of\":3}", 400, "unsupported_parameter", "best_of > 1"},
    {C, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":10}}", 400, "unsupported_parameter", "logit_bias"},
    {C, "{\"prompt\":\"a\",\"echo\":true}", 400, "unsupported_parameter", "echo"},
    {C, "{\"prompt\":\"a\",\"suffix\":\"z\"}", 400, "unsupported_parameter", "suffix"},
    {CH, "{" MSG ",\"response_format\":{\"type\":\"json_object\"}}", 400, "unsupported_parameter",
     "response_format json_object"},
    {CH, "{" MSG ",\"functions\":[]}", 400, "unsupported_parameter", "legacy functions"},
    {C, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", 400, "invalid_request",
     "temperature a string"},
    {C, "{\"prompt\":\"a\",\"temperature\":7}", 400, "invalid_request", "temperature > 2"},
    {C, "{\"prompt\":\"a\",\"top_p\":0}", 400, "invalid_request", "top_p 0"},
    {C, "{\"prompt\":\"a\",\"top_p\":1e999}", 400, "invalid_json", "a number out of range"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":0}", 400, "invalid_request", "max_tokens 0"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":-5}", 400, "invalid_request", "max_tokens negative"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":99999999999}", 400, "invalid_request", "max_tokens huge"},
    {C, "{\"prompt\":[1,2,3],\"max_tokens\":2046}", 400, "context_length_exceeded",
     "prompt + max_tokens over the context"},
    {C, "{\"prompt\":\"a\",\"seed\":\"x\"}", 400, "invalid_request", "seed a string"},
    {C, "{\"prompt\":\"a\",\"stop\":5}", 400, "invalid_request", "stop a number"},
    {C, "{\"prompt\":\"a\",\"stop\":[\"\"]}", 400, "invalid_request", "empty stop string"},
    {C,
     "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
     "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
     400, "invalid_request", "too many stop strings"},
    {C, "{\"prompt\":\"a\",\"logprobs\":21}", 400, "invalid_request", "logprobs over 20"},
    {C, "{\"prompt\":\"a\",\"stream\":\"yes\"}", 400, "invalid_request", "stream a string"},
    {C, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", 400, "invalid_request",
     "stream_options without stream"},
    {C, "{\"model\":\"gpt-4\",\"prompt\":\"a\"}", 404, "model_not_found", "unknown model"},
    {CH, "{}", 400, "invalid_request", "messages missing"},
    {CH, "{\"messages\":[]}", 400, "invalid_request", "messages empty"},
    {CH, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "invalid_request",
     "unknown role"},
    {CH, "{\"messages\":[{\"content\":\"x\"}]}", 400, "invalid_request", "role missing"},
    {CH, "{\"messages\":[\"hi\"]}", 400, "invalid_request", "a message that is not an object"},
    {CH, "{\"messages\":[{\"role\":\"user\",\"content\":42}]}", 400, "invalid_request",
     "content a number"},
    {CH, "{" MSG ",\"logprobs\":false,\"top_logprobs\":3}", 400, "invalid_request",
     "top_logprobs without logprobs"},
    {CH, "{" MSG ",\"tools\":{}}", 400, "invalid_request", "tools not an array"},
    {CH, "{" MSG ",\"tools\":[{\"type\":\"function\"}]}", 400, "invalid_request",
     "a tool without a function"},
    {CH, "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a<b\"}}]}", 400,
     "invalid_request", "a tool name with markup"},
    {CH, "{" MSG ",\"tool_choice\":\"required\"}", 400, "invalid_request",
     "tool_choice required without tools"},
    {CH, "{" MSG "," TOOL ",\"tool_choice\":\"sometimes\"}", 400, "invalid_request",
     "tool_choice unknown"},
    {CH,
     "{" MSG "," TOOL ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
     400, "invalid_request", "tool_choice naming a tool not offered"},
    {CH, "{" MSG ",\"max_completion_tokens\":5000}", 400, "context_length_exceeded",
     "chat over the context"},
};

static void test_malformed(void)
{
    http_resp_t r;
    int submits = sched.submits;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const bad_case_t *c = &cases[i];
        json_t *j = post(c->path, c->body, &r);
        int good = is_oai_error(&r, j, c->status, c->code);
        ok(good, "%s: %s → %d %s", c->path, c->what, c->status, c->code);
        if (!good)
            diag("  got %d %s", r.status, r.body ? r.body : "(none)");
        if (!strcmp(c->code, "context_length_exceeded")) {
            const char *m =
                json_string_value(json_object_get(json_object_get(j, "error"), "message"));
            ok(m && strstr(m, "2048") &&
                   (strstr(m, "(3 in the prompt, 2046 for the completion)") ||
                    strstr(m, "for the completion")),
               "the context error names both counts: %s", m ? m : "-");
        }
        json_decref(j);
        http_resp_free(&r);
    }
    ok(sched.submits == submits, "no malformed request reached the scheduler");

    /* over --max-request-bytes (4096) → 413 with an OpenAI error object */
    size_t big = 6000;
    char *body = malloc(big + 1);
    memset(body, 'a', big);
    memcpy(body, "{\"prompt\":\"", 11);
    memcpy(body + big - 2, "\"}", 2);
    body[big] = '\0';
    json_t *j = post(C, body, &r);
    ok(is_oai_error(&r, j, 413, "body_too_large"), "body over --max-request-bytes → 413");
    json_decref(j);
    http_resp_free(&r);
    free(body);

    /* deeply nested JSON: refused, no crash */
    body = malloc(3000);
    size_t n = (size_t)sprintf(body, "{\"prompt\":\"a\",\"x\":");
    for (int i = 0; i < 1200; i++)
        body[n++] = '[';
    for (int i = 0; i < 1200; i++)
        body[n++] = ']';
    body[n++] = '}';
    body[n] = '\0';
    j = post(C, body, &r);
    ok(r.status == 200 || r.status == 400, "deeply nested body → %d, no crash", r.status);
    json_decref(j);
    http_resp_free(&r);
    free(body);

    /* wrong method, no key */
    http_do(port, "GET", C, AUTH, NULL, &r);
    j = json_loadb(r.body, r.body_len, 0, NULL);
    ok(is_oai_error(&r, j, 405, "method_not_allowed"), "GET /v1/completions → 405");
    json_decref(j);
    http_resp_free(&r);
    http_do(port, "POST", C, "Authorization: Bearer wrong\r\n", "{\"prompt\":\"a\"}", &r);
    j = json_loadb(r.body, r.body_len, 0, NULL);
    ok(is_oai_error(&r, j, 401, "unauthorized"), "wrong API key → 401");
    json_decref(j);
    http_resp_free(&r);

    /* a client that sends half a body and leaves */
    int fd = http_connect(port);
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" AUTH
                       "Content-Length: 100\r\n\r\n{\"prompt\":";
    http_send_all(fd, head, strlen(head));
    close(fd);

    /* then a valid request succeeds */
    static const fake_script_t sc = {
        .p = {{200, "fine"}, {1, ""}}, .n = 2, .finish = TDM_FINISH_STOP, .stop_token = 1};
    set_script(&sc);
    j = post(CH, "{\"model\":\"demo\"," MSG "}", &r);
    json_t *m = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    ok(r.status == 200 && !strcmp(json_string_value(json_object_get(m, "content")), "fine"),
       "after all that, a valid chat request succeeds");
    json_decref(j);
    http_resp_free(&r);
}

static void *run_tests(void *arg)
{
    (void)arg;
    test_malformed();
    tdm_api_server_stop(api);
    return NULL;
}

int main(void)
{
    return fixture_main();
}
