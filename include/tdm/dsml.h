/*
 * tdm/dsml.h — the DSML tool-call parser: model output text → content + tool calls.
 *
 * Grammar (what the demo model is trained to emit; ASCII whitespace is allowed between tags):
 *   block     := "<tool_calls>" invoke+ "</tool_calls>"
 *   invoke    := "<invoke name=\"" NAME "\">" parameter* "</invoke>"
 *   parameter := "<parameter name=\"" NAME "\">" VALUE "</parameter>"
 * NAME is 1..TDM_DSML_MAX_NAME bytes without '"', '<', '>'; VALUE is raw text (no escaping: the
 * template prints values with `{{ value }}`) up to the first "</parameter>", at most
 * TDM_DSML_MAX_VALUE bytes. Text outside blocks is content. Several blocks may appear.
 *
 * Arguments are emitted as a JSON object text in Python json.dumps spacing
 * ({"city": "Paris", "n": 3}), each value coerced by the offered tool's JSON schema
 * (function.parameters.properties[NAME].type): string (and unknown parameters, untyped
 * parameters, unknown tools) → JSON string; integer → integer ("3", "+3", "3.0"); number →
 * number; boolean → true/false ("true"/"True"/"false"/"False"); null → null; object/array →
 * the value parsed as JSON of that kind; a list of types → the first that fits. A value that
 * fits no declared type is kept as a string and the call is marked !schema_ok, as is a call
 * that misses a required parameter, repeats one, names one the schema does not declare, or
 * names a tool that was not offered (then also !offered).
 *
 * Malformed markup — markup that does not parse: a block that breaks the grammar or is not
 * closed when the stream ends, or a DSML tag (`<tool_calls`, `<invoke`, `<parameter` or their
 * closing forms, followed by a non-word character) outside a block — is reported as a
 * MALFORMED event and never as content. A broken block is dropped up to its "</tool_calls>"
 * (or the end); a stray tag is dropped up to its '>'. The DSML-leak detector counts responses
 * with at least one MALFORMED event.
 *
 * Streaming: feed text deltas in any split (byte boundaries included); the parser holds back
 * only what could still be markup ("<tool_c", "</param") and emits, in order:
 *   CONTENT(text)               plain text, never markup
 *   CALL_START(index, name)     a call began (index counts calls of the response from 0)
 *   CALL_ARGS(index, delta)     a piece of the arguments JSON; the pieces concatenate to the
 *                               CALL_END arguments (string values stream as they arrive, typed
 *                               values when complete)
 *   CALL_END(index, arguments, offered, schema_ok, detail)
 *   MALFORMED(index or -1, reason)   a started call (index ≥ 0) is abandoned; no CALL_END follows
 * The events of any split of a text equal those of the whole text, except that CONTENT and
 * CALL_ARGS pieces may be cut differently (their concatenations are equal).
 *
 * Ownership: event text is valid only during the callback. A stream is used by one thread.
 * `tools` (an OpenAI tools array, or NULL) is borrowed and must outlive the stream.
 */
#ifndef TDM_DSML_H
#define TDM_DSML_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/status.h>

#define TDM_DSML_MAX_NAME 256
#define TDM_DSML_MAX_VALUE ((size_t)1 << 20)
#define TDM_DSML_MAX_CALLS 128

typedef enum tdm_dsml_event_kind {
    TDM_DSML_CONTENT = 0,
    TDM_DSML_CALL_START,
    TDM_DSML_CALL_ARGS,
    TDM_DSML_CALL_END,
    TDM_DSML_MALFORMED,
    TDM_DSML_EVENT_MAX
} tdm_dsml_event_kind_t;

typedef struct tdm_dsml_event {
    tdm_dsml_event_kind_t kind;
    int32_t index;    /* call index; -1 for CONTENT and a MALFORMED outside a call */
    const char *text; /* content, name, arguments delta, full arguments, or the reason */
    size_t len;
    int offered;        /* CALL_END: the name is one of the offered tools */
    int schema_ok;      /* CALL_END: arguments valid against that tool's schema */
    const char *detail; /* CALL_END: first schema problem, "" if none */
} tdm_dsml_event_t;

typedef void (*tdm_dsml_cb_t)(void *ud, const tdm_dsml_event_t *ev);

typedef struct tdm_dsml_stream tdm_dsml_stream_t;

const char *tdm_dsml_event_name(tdm_dsml_event_kind_t k);

/* tools: NULL or a JSON array of {"type":"function","function":{name, parameters}} (a bare
 * {name, parameters} is accepted too). Anything else is TDM_ERR_INVAL. */
tdm_status_t tdm_dsml_stream_init(const json_t *tools, tdm_dsml_cb_t cb, void *ud,
                                  tdm_dsml_stream_t **ret);
tdm_status_t tdm_dsml_stream_feed(tdm_dsml_stream_t *s, const char *text, size_t len);
/* End of the response: flushes held-back content; an open block is MALFORMED. Feeding after
 * finish is TDM_ERR_STATE. */
tdm_status_t tdm_dsml_stream_finish(tdm_dsml_stream_t *s);
/* Totals so far. */
uint32_t tdm_dsml_stream_calls(const tdm_dsml_stream_t *s);
uint32_t tdm_dsml_stream_malformed(const tdm_dsml_stream_t *s);
void tdm_dsml_stream_free(tdm_dsml_stream_t *s);

/* Whole-text convenience over the stream. */
typedef struct tdm_dsml_call {
    char *name;
    char *arguments; /* JSON object text */
    int offered, schema_ok;
    char *detail;
} tdm_dsml_call_t;

typedef enum tdm_dsml_class {
    TDM_DSML_CLASS_TEXT = 0, /* no markup at all */
    TDM_DSML_CLASS_CALL,     /* at least one call, no malformed markup */
    TDM_DSML_CLASS_LEAK,     /* malformed markup (the DSML-leak detector's count) */
    TDM_DSML_CLASS_MAX
} tdm_dsml_class_t;

typedef struct tdm_dsml_result {
    char *content; /* concatenated CONTENT, NUL-terminated */
    size_t content_len;
    tdm_dsml_call_t *calls; /* completed calls */
    size_t n_calls;
    uint32_t n_malformed;
    char *first_malformed; /* reason of the first MALFORMED, NULL if none */
    tdm_dsml_class_t cls;
} tdm_dsml_result_t;

tdm_status_t tdm_dsml_parse(const json_t *tools, const char *text, size_t len,
                            tdm_dsml_result_t *ret);
void tdm_dsml_result_free(tdm_dsml_result_t *r);
const char *tdm_dsml_class_name(tdm_dsml_class_t c);

#endif
