/*
 * tdm/toolcall.h — tool-call parsers for the formats real models emit (SGLang's parser names):
 * model output text → content + OpenAI tool calls, streaming or whole.
 *
 *   dsml        the demo model's <tool_calls><invoke name=…> markup (tdm/dsml.h)
 *   hermes      Qwen2.5/Qwen3/Hermes: <tool_call>\n{"name": N, "arguments": {…}}\n</tool_call>,
 *               one block per call
 *   llama3      Llama 3.1–3.3 JSON calls: the reply is {"name": N, "parameters": {…}} (or
 *               "arguments"), optionally after <|python_tag|>, several separated by ";"
 *   mistral     [TOOL_CALLS] [{"name": N, "arguments": {…}}, …]
 *   deepseekv3
 * <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{…}\n```
 *               <｜tool▁call▁end｜>…<｜tool▁calls▁end｜> (V3/R1; V3.1's N<｜tool▁sep｜>{…} too)
 * `auto` picks the format from the chat template's text (the markup it prints for tool calls).
 *
 * Events are the DSML parser's (tdm_dsml_event_t): CONTENT, CALL_START(index, name), CALL_ARGS
 * (pieces of the arguments JSON as they arrive: for the JSON formats the object streams byte by
 * byte once the name is known), CALL_END(index, arguments, offered, schema_ok, detail),
 * MALFORMED(index or -1, reason). `arguments` is the model's JSON object text as written.
 * Whatever splits the text is fed in, the calls are the same (content pieces may be cut
 * differently); only text that could still be markup is held back.
 *
 * Malformed markup — markup of the active format that does not parse (a block that breaks the
 * format or is not closed at the end, arguments that are not a JSON object, an end marker outside
 * a block) — is a MALFORMED event (the leak detector's count) and its text is returned as
 * CONTENT, never dropped. A call started before the break is abandoned (no CALL_END follows).
 *
 * offered: the name is one of the request's tools; schema_ok: offered, and the arguments have
 * every required property, no undeclared one, and values of the declared JSON types.
 *
 * Ownership as in tdm/dsml.h: event text lives during the callback; `tools` is borrowed.
 */
#ifndef TDM_TOOLCALL_H
#define TDM_TOOLCALL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/dsml.h>
#include <tdm/status.h>

typedef enum tdm_tc_format {
    TDM_TC_NONE = 0, /* no tool-call parsing */
    TDM_TC_DSML,
    TDM_TC_HERMES,
    TDM_TC_LLAMA3,
    TDM_TC_MISTRAL,
    TDM_TC_DEEPSEEKV3,
    TDM_TC_FORMAT_MAX
} tdm_tc_format_t;

/* "none", "dsml", "hermes", "llama3", "mistral", "deepseekv3"; "?" out of range. */
const char *tdm_tc_format_name(tdm_tc_format_t f);
/* A --tool-call-parser value other than "auto"; TDM_ERR_INVAL for an unknown name. */
tdm_status_t tdm_tc_format_parse(const char *name, tdm_tc_format_t *ret);
/* The format a chat template prints tool calls in, from its text; TDM_TC_NONE if none. */
tdm_tc_format_t tdm_tc_format_detect(const char *template_text);
/* Text the prompt ends with to force a call (tool_choice "required": `name` NULL; named: that
 * function). tdm_malloc'd; NULL for TDM_TC_NONE. */
char *tdm_tc_forced_prefix(tdm_tc_format_t f, const char *name);

typedef struct tdm_tc_stream tdm_tc_stream_t;

tdm_status_t tdm_tc_stream_init(tdm_tc_format_t f, const json_t *tools, tdm_dsml_cb_t cb, void *ud,
                                tdm_tc_stream_t **ret);
tdm_status_t tdm_tc_stream_feed(tdm_tc_stream_t *s, const char *text, size_t len);
tdm_status_t tdm_tc_stream_finish(tdm_tc_stream_t *s);
uint32_t tdm_tc_stream_malformed(const tdm_tc_stream_t *s);
void tdm_tc_stream_free(tdm_tc_stream_t *s);

/* Whole text; free the result with tdm_dsml_result_free(). */
tdm_status_t tdm_tc_parse(tdm_tc_format_t f, const json_t *tools, const char *text, size_t len,
                          tdm_dsml_result_t *ret);

#endif
