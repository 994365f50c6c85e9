/*
 * fuzz-openai.c — libFuzzer target for the OpenAI request parser (dataplane/api/openai_req.c)
 * and, for requests it accepts, the response builder (openai_resp.c) with the DSML stream.
 *
 * Input byte 0: bit 0 selects the endpoint (0 completions, 1 chat); bit 1 parses the body with
 * JSON_ALLOW_NUL (so the parser's own NUL checks are reached, as they would be for a body that
 * came from elsewhere). The rest is the body. The demo model's tokenizer and chat template are
 * loaded once from $TDM_SRCDIR/models/demo (default: the current directory).
 * Invariants checked on acceptance (abort on violation, a real bug): a non-empty prompt of ids
 * below the vocabulary, prompt + max_tokens within the context, max_tokens >= 1, at most
 * TDM_SAMPLE_MAX_STOP stop strings. The body text is then fed to a response builder of the
 * parsed request in uneven pieces and finished, streamed and whole.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/json.h>
#include <tdm/mem.h>

#include "dataplane/api/openai_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tdm_tok_t *tok;
static tdm_chat_template_t *chat;

static int setup(void)
{
    char path[2048], err[256];
    const char *s = getenv("TDM_SRCDIR");
    snprintf(path, sizeof(path), "%s/models/demo/tokenizer.json", s ? s : ".");
    if (tdm_tok_load(path, &tok, err, sizeof(err)) != TDM_OK) {
        fprintf(stderr, "fuzz-openai: %s: %s\n", path, err);
        abort();
    }
    snprintf(path, sizeof(path), "%s/models/demo", s ? s : ".");
    if (tdm_chat_template_load(path, &chat, err, sizeof(err)) != TDM_OK) {
        fprintf(stderr, "fuzz-openai: %s: %s\n", path, err);
        abort();
    }
    return 1;
}

static void drive_response(const tdm_oai_req_t *req, const char *text, size_t len)
{
    for (int stream = 0; stream < 2; stream++) {
        tdm_oai_req_t r = *req;
        r.stream = stream;
        tdm_oai_resp_t resp;
        if (tdm_oai_resp_init(&resp, &r, tok, "demo", 42) != TDM_OK)
            continue;
        tdm_oai_tok_t toks[2];
        memset(toks, 0, sizeof(toks));
        toks[0].s.id = 5;
        toks[0].s.n_top = 2;
        toks[0].s.top_ids[1] = 1839;
        toks[1].s.id = 1000;
        size_t off = 0, step = 1;
        while (off < len) {
            size_t n = len - off < step ? len - off : step;
            tdm_oai_resp_feed(&resp, text + off, n, toks, 2);
            off += n;
            step = step * 3 + 1;
        }
        char *body = tdm_oai_resp_finish(&resp, "stop", req->n_prompt, 2, 0);
        if (!stream && !body)
            abort();
        free(body);
        tdm_oai_resp_free(&resp);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready)
        ready = setup();
    if (size < 1)
        return 0;
    tdm_oai_kind_t kind = (data[0] & 1) ? TDM_OAI_CHAT : TDM_OAI_COMPLETIONS;
    size_t flags = JSON_REJECT_DUPLICATES | ((data[0] & 2) ? JSON_ALLOW_NUL : 0);
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data + 1, size - 1, flags, &jerr);
    if (!body)
        return 0;
    tdm_oai_ctx_t c = {.tok = tok,
                       .chat = chat,
                       .model_name = "demo",
                       .max_context = 2048,
                       .vocab = tdm_tok_vocab_size(tok)};
    tdm_oai_req_t r;
    tdm_oai_err_t e;
    memset(&e, 0, sizeof(e));
    if (tdm_oai_parse(&c, kind, body, &r, &e) == TDM_OK) {
        if (r.n_prompt == 0 || r.max_tokens == 0 ||
            (uint64_t)r.n_prompt + r.max_tokens > c.max_context || r.n_stop > TDM_SAMPLE_MAX_STOP)
            abort();
        for (uint32_t i = 0; i < r.n_prompt; i++)
            if (r.prompt[i] < 0 || (uint32_t)r.prompt[i] >= c.vocab)
                abort();
        drive_response(&r, (const char *)data + 1, size - 1);
        tdm_oai_req_free(&r);
    } else if (e.http == 0 || !e.code || !e.message[0]) {
        abort(); /* every refusal carries a status, a code and a message */
    }
    json_decref(body);
    return 0;
}
