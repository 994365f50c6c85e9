/*
 * tdm/chat.h — chat templates: OpenAI-style messages → the prompt text a model was trained on,
 * byte for byte what transformers' apply_chat_template(tokenize=False) produces.
 *
 * Any template renders: the text is parsed by tandem's Jinja engine (tdm/jinja.h), which runs it
 * with transformers' settings. Where the template comes from, first match wins:
 *   --chat-template FILE|NAME (tdm_chat_template_open's `override`): a file's text; else a
 *     built-in by name (demo, chatml, llama3, llama2); else the entry of that name in the
 *     checkpoint's list of named templates;
 *   tokenizer_config.json `chat_template`: a string, or a list of {name, template} — "default"
 *     renders, "tool_use" (when present) renders requests that offer tools;
 *   chat_template.jinja beside it (what transformers 5 saves).
 * tokenizer_config.json is read with integers beyond 64 bits as reals (transformers' default
 * model_max_length), so the file is never dropped for them. Its bos/eos/unk/pad/sep/cls/mask
 * tokens (strings or {"content": ...} objects) are template variables, as in transformers.
 *
 * Render variables: messages, tools (null when none), add_generation_prompt and the special
 * tokens. Messages are a JSON array of {"role", "content", "tool_calls"?, ...}; roles are
 * system, user, assistant, tool; `content` is a string, null/absent, or an array of
 * {"type":"text","text"} parts (joined into one string); other keys pass through. A tool call's
 * `arguments` given as a JSON string (OpenAI's form) is parsed into an object, as SGLang and vLLM
 * do; if the template then fails and some arguments were strings, it is rendered once more with
 * them as sent (DeepSeek's templates concatenate the string). A template's own
 * raise_exception() is a TDM_ERR_INVAL whose message says so.
 *
 * The format names which built-in text a template is (canonicalised comparison: whitespace in
 * tags and quoting style do not matter, anything printed differently does); TDM_CHAT_JINJA is
 * every other template. The demo model's format emits DSML tool calls.
 *
 * Threading: a template object is immutable after load; render may run concurrently.
 * Errors: every failure returns a status and a one-line reason in `err` naming the message and
 * field ("messages[2].tool_calls[0].function.arguments: not a JSON object") or the template line.
 */
#ifndef TDM_CHAT_H
#define TDM_CHAT_H

#include <stddef.h>

#include <jansson.h>

#include <tdm/status.h>

typedef enum tdm_chat_format {
    TDM_CHAT_DEMO = 0, /* models/demo: <|role|> turns, tools as JSON lines, DSML tool calls */
    TDM_CHAT_CHATML,   /* Qwen2 instruct: <|im_start|>role\n...<|im_end|>\n */
    TDM_CHAT_LLAMA3,   /* Llama-3 instruct: <|start_header_id|>role<|end_header_id|>\n\n */
    TDM_CHAT_LLAMA2,   /* Llama-2 chat: <s>[INST] <<SYS>>...<</SYS>> ... [/INST] */
    TDM_CHAT_JINJA,    /* any other template */
    TDM_CHAT_FORMAT_MAX
} tdm_chat_format_t;

typedef struct tdm_chat_template tdm_chat_template_t;

/* Bounds on what a request can make us render. */
#define TDM_CHAT_MAX_MESSAGES 4096
#define TDM_CHAT_MAX_OUTPUT_BYTES ((size_t)16 << 20)

/* "demo", "chatml", "llama3", "llama2", "jinja"; "?" out of range. */
const char *tdm_chat_format_name(tdm_chat_format_t f);

/* Which built-in template `template_text` is (see the format rule above). TDM_ERR_UNSUPPORTED
 * if none. */
tdm_status_t tdm_chat_template_match(const char *template_text, tdm_chat_format_t *ret_format,
                                     char *err, size_t errlen);

/* From a parsed tokenizer_config.json: chat_template (string or list), bos_token, eos_token
 * (strings or {"content": ...} objects). A missing chat_template is TDM_ERR_NOTFOUND. */
tdm_status_t tdm_chat_template_from_config(const json_t *tokenizer_config,
                                           tdm_chat_template_t **ret, char *err, size_t errlen);
/* The template of the checkpoint in model_dir, or `override` (FILE or NAME; NULL or "" = none).
 * Without tokenizer_config.json an override still loads (no special tokens). */
tdm_status_t tdm_chat_template_open(const char *model_dir, const char *override,
                                    tdm_chat_template_t **ret, char *err, size_t errlen);
/* tdm_chat_template_open(model_dir, NULL, …). */
tdm_status_t tdm_chat_template_load(const char *model_dir, tdm_chat_template_t **ret, char *err,
                                    size_t errlen);
void tdm_chat_template_free(tdm_chat_template_t *t);

tdm_chat_format_t tdm_chat_template_format(const tdm_chat_template_t *t);
/* The text a request with tools renders with (the tool_use variant if any, else the default). */
const char *tdm_chat_template_text(const tdm_chat_template_t *t);
/* 1 if the template can show the model a tools list (it names `tools`, or has a tool_use
 * variant). */
int tdm_chat_renders_tools(const tdm_chat_template_t *t);

/* Render. `tools` may be NULL. *ret_text is tdm_malloc'd, NUL-terminated. */
tdm_status_t tdm_chat_render(const tdm_chat_template_t *t, const json_t *messages,
                             const json_t *tools, int add_generation_prompt, char **ret_text,
                             size_t *ret_len, char *err, size_t errlen);

#endif
