/*
 * dataplane/api/openai_int.h — the OpenAI-compatible endpoint (docs/api.md): request parsing and
 * validation (openai_req.c, pure: no h2o, no scheduler; the fuzz target drives it), response
 * shaping (openai_resp.c: chunks, whole bodies, logprobs in both shapes, the DSML tool-call
 * stream) and the h2o handlers on the generate.c transport (openai.c).
 *
 * Parsing contract. tdm_oai_parse() turns one request body (a JSON object) into the scheduler's
 * inputs or an OpenAI error: HTTP status, code ("invalid_request", "unsupported_parameter",
 * "context_length_exceeded", "model_not_found"), the offending parameter and a message naming it.
 * Unknown fields are ignored; known fields with a value we do not implement (n > 1, logit_bias,
 * echo, best_of > 1, suffix, a response_format other than text, ...) are 400
 * unsupported_parameter. Strings are read with their length; an embedded NUL is a 400 naming the
 * field. Every allocation is bounded by the body (itself capped by --max-request-bytes) and the
 * caps below. Outputs are written only on success.
 *
 * Tool choice. With tools offered and a template that renders them: "auto" lets the model decide;
 * "required" and a named function append the start of a DSML block to the rendered prompt
 * ("<tool_calls>" or "<tool_calls><invoke name=\"NAME\">") so the model continues inside a call,
 * and the parser is fed that prefix first; a named function offers only that tool to the parser;
 * "none" renders the tools but drops calls the model makes anyway. Markup is never content.
 */
#ifndef TDM_API_OPENAI_INT_H
#define TDM_API_OPENAI_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/chat.h>
#include <tdm/dsml.h>
#include <tdm/toolcall.h>
#include <tdm/sample.h>
#include <tdm/status.h>
#include <tdm/tokenizer.h>

#define TDM_OAI_MAX_TOOLS 128
#define TDM_OAI_MAX_PROMPT_IDS (1u << 20)
#define TDM_OAI_MAX_STRING ((size_t)16 << 20)

typedef enum tdm_oai_kind {
    TDM_OAI_COMPLETIONS = 0, /* POST /v1/completions */
    TDM_OAI_CHAT,            /* POST /v1/chat/completions */
    TDM_OAI_KIND_MAX
} tdm_oai_kind_t;

typedef enum tdm_oai_tool_choice {
    TDM_OAI_TOOLS_AUTO = 0,
    TDM_OAI_TOOLS_NONE,
    TDM_OAI_TOOLS_REQUIRED,
    TDM_OAI_TOOLS_NAMED,
    TDM_OAI_TOOLS_MAX
} tdm_oai_tool_choice_t;

/* What parsing needs from the worker; all borrowed and immutable. */
typedef struct tdm_oai_ctx {
    const tdm_tok_t *tok;
    const tdm_chat_template_t *chat; /* NULL: /v1/chat/completions answers 400 */
    const char *model_name;          /* --served-model-name or the model path */
    uint32_t max_context;            /* prompt + max_tokens must fit */
    uint32_t vocab;                  /* token-id prompts must be below it */
    tdm_tc_format_t tool_parser;     /* --tool-call-parser, auto resolved from the template */
} tdm_oai_ctx_t;

typedef struct tdm_oai_req {
    tdm_oai_kind_t kind;
    int32_t *prompt; /* tdm_malloc'd */
    uint32_t n_prompt;
    uint32_t max_tokens;
    tdm_sample_params_t sp;
    char *stop[TDM_SAMPLE_MAX_STOP]; /* tdm_malloc'd copies */
    uint32_t n_stop;
    int stream, include_usage, ignore_eos, skip_special;
    int logprobs;          /* logprobs requested (chat: true; completions: an integer given) */
    uint32_t top_logprobs; /* chat top_logprobs, completions logprobs=N */
    /* chat tool calling */
    tdm_tc_format_t tool_parser; /* the tool-call format parsed out of the reply (NONE: none) */
    json_t *tools;               /* what the parser checks calls against (new reference) or NULL */
    tdm_oai_tool_choice_t tool_choice;
    char *prefix; /* text the prompt ends with that the parser must see first, or NULL */
} tdm_oai_req_t;

typedef struct tdm_oai_err {
    int http;
    const char *code;
    char param[64];
    char message[512];
} tdm_oai_err_t;

const char *tdm_oai_kind_name(tdm_oai_kind_t k); /* "completions", "chat" */

tdm_status_t tdm_oai_parse(const tdm_oai_ctx_t *c, tdm_oai_kind_t kind, const json_t *body,
                           tdm_oai_req_t *ret, tdm_oai_err_t *err);
void tdm_oai_req_free(tdm_oai_req_t *r);

/* ---- response shaping (openai_resp.c) -------------------------------------------------------- */

/* One generated token as the scheduler reported it. */
typedef struct tdm_oai_tok {
    tdm_sample_result_t s;
} tdm_oai_tok_t;

/* The response being built for one request; the loop thread feeds it. */
typedef struct tdm_oai_resp {
    const tdm_oai_req_t *req;
    const tdm_tok_t *tok;
    char id[48]; /* "chatcmpl-<hex>" / "cmpl-<hex>" */
    const char *model;
    int64_t created;
    int stream;
    /* accumulated (whole replies), or the pending delta (streams) */
    char *content;
    size_t content_len, content_cap;
    json_t *lp_content; /* chat: logprobs.content entries; legacy: NULL */
    json_t *lp_legacy;  /* completions: {tokens, token_logprobs, top_logprobs, text_offset} */
    size_t text_offset; /* completions: bytes of text before the next token */
    json_t *tool_calls; /* whole replies: finished calls; streams: pending deltas */
    uint32_t n_calls;   /* calls started (streams) / finished (whole) */
    int calls_dropped;  /* tool_choice none: calls the model made anyway */
    int role_sent;
    uint32_t malformed;   /* MALFORMED events: a DSML leak */
    char first_leak[128]; /* the first reason */
    tdm_tc_stream_t *tc;
    /* the SSE bytes to send next */
    char *out;
    size_t out_len, out_cap;
} tdm_oai_resp_t;

tdm_status_t tdm_oai_resp_init(tdm_oai_resp_t *r, const tdm_oai_req_t *req, const tdm_tok_t *tok,
                               const char *model, uint64_t id);
void tdm_oai_resp_free(tdm_oai_resp_t *r);
/* Feed generated text and the tokens that produced it (logprobs); a stream gets its chunks
 * appended to r->out. */
void tdm_oai_resp_feed(tdm_oai_resp_t *r, const char *text, size_t len, const tdm_oai_tok_t *toks,
                       size_t n_toks);
/* The end: the OpenAI finish_reason ("stop", "length", "tool_calls"). A stream gets its final
 * chunk, the usage chunk when asked and "data: [DONE]". Returns the whole body (free(3)) for
 * non-stream requests, NULL for streams. */
char *tdm_oai_resp_finish(tdm_oai_resp_t *r, const char *finish_reason, uint32_t prompt_tokens,
                          uint32_t completion_tokens, uint32_t cached_tokens);
/* A stream that ends in an error: `data: {"error":..}` then [DONE]. */
void tdm_oai_resp_stream_error(tdm_oai_resp_t *r, const json_t *error);

/* GET /v1/models body (free(3)). */
char *tdm_oai_models_json(const char *model_name, int64_t created, uint32_t max_context);

#endif
