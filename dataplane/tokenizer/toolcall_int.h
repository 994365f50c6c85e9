/*
 * toolcall_int.h — internals of the tool-call parsers shared by toolcall.c (streams) and
 * toolcall_json.c (the schema check and the incremental call-object scanner).
 */
#ifndef TDM_TOKENIZER_TOOLCALL_INT_H
#define TDM_TOKENIZER_TOOLCALL_INT_H

#include <stddef.h>

#include <jansson.h>

#include "chat_int.h"

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
