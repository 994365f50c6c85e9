/*
 * toolcall_int.h — internals of the tool-call parsers shared by toolcall.c (streams) and
 * toolcall_json.c (the schema check and the incremental call-object scanner), and the result
 * collector shared with dsml.c.
 */
#ifndef TDM_TOKENIZER_TOOLCALL_INT_H
#define TDM_TOKENIZER_TOOLCALL_INT_H

#include <stddef.h>

#include <jansson.h>

#include <tdm/dsml.h>

#include "chat_int.h"

/* The whole-text parsers (tdm_dsml_parse, tdm_tc_parse) over their streams: tdm_tc_collect_cb
 * gathers the events into `r`; tdm_tc_collect_end takes the stream's status and on TDM_OK
 * classifies and moves the result into *ret, otherwise frees it. Returns st. (dsml.c) */
typedef struct tdm_tc_collect {
    tdm_dsml_result_t r;
    tdm_sbuf_t content;
    size_t cap;
    char *name;
} tdm_tc_collect_t;
void tdm_tc_collect_cb(void *ud, const tdm_dsml_event_t *ev);
tdm_status_t tdm_tc_collect_end(tdm_tc_collect_t *c, tdm_status_t st, tdm_dsml_result_t *ret);

/* One JSON call object {"name": …, "arguments"|"parameters": …}, scanned byte by byte: the
 * offsets of the name's and the arguments' value text in `text` as soon as each is complete
 * (arguments: also while an object value is still open). */
typedef struct jcall {
    int started, depth, in_str, esc, phase, cur_key, val_str;
    tdm_sbuf_t text; /* the object's bytes from '{' */
    size_t key_a, val_a, name_a, name_b, args_a, args_b, args_sent;
    int have_name, have_args, args_obj, args_str, args_open, announced;
} jcall_t;

void tdm_tc_jcall_reset(jcall_t *j);
/* 0 more, 1 the object closed, -1 not a call object. */
int tdm_tc_jcall_feed(jcall_t *j, char c);
int tdm_tc_is_ws(char c);
/* offered: `name` is among tools; schema_ok: required present, none undeclared, types fit;
 * detail: the first problem. */
void tdm_tc_check_schema(const json_t *tools, const char *name, const json_t *args, int *offered,
                         int *schema_ok, char *detail, size_t dlen);

#endif
