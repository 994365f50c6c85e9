/*
 * tdm/chat.h — chat template renderers: OpenAI-style messages → the prompt text a model was
 * trained on, byte for byte what transformers' apply_chat_template(tokenize=False) produces.
 *
 * There is no Jinja engine here. A checkpoint's tokenizer_config.json `chat_template` is matched
 * against the templates we implement in C; anything else is TDM_ERR_UNSUPPORTED with a message
 * telling the user to send raw prompts to /v1/completions instead.
 *
 * Matching rule: both the checkpoint's template and each known template are canonicalised —
 * inside `{{ }}` / `{% %}` tags, whitespace outside string literals is dropped (kept as one space
 * only between two identifier characters) and every string literal is unescaped and re-emitted
 * in one quoting style; text outside tags (which Jinja outputs) is kept verbatim — and the
 * canonical forms must be equal. So `'\n'` and a literal newline inside a quoted string match,
 * reformatting the Jinja code matches, but any change to what the template outputs does not.
 * Known templates: the bundled demo model's (DSML tool calls), ChatML as shipped with Qwen2
 * instruct models, Llama-3 instruct, Llama-2 chat. When `chat_template` is a list of
 * {name, template}, the entry named "default" is used.
 *
 * Messages are a JSON array of {"role", "content", "tool_calls"?}. Roles: system, user,
 * assistant, tool (rendered as each template renders them; Llama-2 only accepts alternating
 * user/assistant after an optional system message and fails like the template does otherwise).
 * `content` is a string, null/absent (rendered as ""), or an array of {"type":"text","text"}
 * parts (concatenated). `tool_calls` is [{"type":"function","function":{"name","arguments"}}]
 * where arguments is an object or a JSON string holding one (OpenAI's form); the demo template
 * renders them in DSML, each value as Python's str() of it (what `{{ value }}` prints). `tools`
 * (null or an array of OpenAI tool objects) is rendered by the demo template, one `tojson` line
 * per tool (Python json.dumps spacing, key order kept, non-ASCII unescaped). ChatML, Llama-3 and
 * Llama-2 as shipped render neither tools nor tool_calls: tdm_chat_renders_tools() says so, and
 * the caller decides whether to refuse a request that offers tools.
 *
 * Threading: a template object is immutable after load; render may run concurrently.
 * Errors: every failure returns a status and a one-line reason in `err` naming the message and
 * field ("messages[2].tool_calls[0].function.arguments: not a JSON object").
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
    TDM_CHAT_FORMAT_MAX
} tdm_chat_format_t;

typedef struct tdm_chat_template tdm_chat_template_t;

/* Bounds on what a request can make us render. */
#define TDM_CHAT_MAX_MESSAGES 4096
#define TDM_CHAT_MAX_OUTPUT_BYTES ((size_t)16 << 20)

/* "demo", "chatml", "llama3", "llama2"; "?" out of range. */
const char *tdm_chat_format_name(tdm_chat_format_t f);

/* Which known template `template_text` is (see the matching rule above). TDM_ERR_UNSUPPORTED
 * with the /v1/completions hint in `err` if none. */
tdm_status_t tdm_chat_template_match(const char *template_text, tdm_chat_format_t *ret_format,
                                     char *err, size_t errlen);

/* From a parsed tokenizer_config.json: chat_template (string or list), bos_token, eos_token
 * (strings or {"content": ...} objects). A missing chat_template is TDM_ERR_NOTFOUND. */
tdm_status_t tdm_chat_template_from_config(const json_t *tokenizer_config,
                                           tdm_chat_template_t **ret, char *err, size_t errlen);
/* Reads <model_dir>/tokenizer_config.json (integers beyond 64 bits read as reals); without a
 * chat_template key there, <model_dir>/chat_template.jinja (transformers 5) is the template. */
tdm_status_t tdm_chat_template_load(const char *model_dir, tdm_chat_template_t **ret, char *err,
                                    size_t errlen);
void tdm_chat_template_free(tdm_chat_template_t *t);

tdm_chat_format_t tdm_chat_template_format(const tdm_chat_template_t *t);
/* 1 if the template shows the model the tools list and renders assistant tool_calls. */
int tdm_chat_renders_tools(const tdm_chat_template_t *t);

/* Render. `tools` may be NULL. *ret_text is tdm_malloc'd, NUL-terminated. */
tdm_status_t tdm_chat_render(const tdm_chat_template_t *t, const json_t *messages,
                             const json_t *tools, int add_generation_prompt, char **ret_text,
                             size_t *ret_len, char *err, size_t errlen);

#endif
