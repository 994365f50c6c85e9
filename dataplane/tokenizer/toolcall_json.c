/*
 * toolcall_json.c — the JSON side of the tool-call parsers: the incremental scanner that finds a
 * call object's "name" and "arguments" members as their bytes arrive (so a name is announced as
 * soon as it is complete and an arguments object streams byte by byte), and the check of a
 * call's arguments against the offered tool's JSON schema.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/dsml.h>
#include <tdm/mem.h>

#include "toolcall_int.h"

enum { P_KEY0, P_KEY, P_COLON, P_VAL0, P_VAL, P_NEXT };

/* ---- schema check ---------------------------------------------------------------------------- */

static const json_t *find_tool(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const json_t *fn = json_object_get(t, "function");
        if (!fn)
            fn = t;
        const json_t *n = json_object_get(fn, "name");
        if (json_is_string(n) && !strcmp(json_string_value(n), name))
            return fn;
    }
    return NULL;
}

static int type_fits(const char *ty, const json_t *v)
{
    if (!strcmp(ty, "string"))
        return json_is_string(v);
    if (!strcmp(ty, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (!strcmp(ty, "number"))
        return json_is_number(v);
    if (!strcmp(ty, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(ty, "object"))
        return json_is_object(v);
    if (!strcmp(ty, "array"))
        return json_is_array(v);
    if (!strcmp(ty, "null"))
        return json_is_null(v);
    return 1;
}

void tdm_tc_check_schema(const json_t *tools, const char *name, const json_t *args, int *offered,
                         int *schema_ok, char *detail, size_t dlen)
{
    const json_t *fn = find_tool(tools, name), *params, *props, *req, *v;
    const char *k;
    size_t i;
    *offered = fn != NULL;
    *schema_ok = 0;
    detail[0] = '\0';
    if (!fn) {
        snprintf(detail, dlen, "%s: not one of the offered tools", name);
        return;
    }
    params = json_object_get(fn, "parameters");
    props = json_object_get(params, "properties");
    req = json_object_get(params, "required");
    json_array_foreach(req, i,
                       v) if (json_is_string(v) && !json_object_get(args, json_string_value(v)))
    {
        snprintf(detail, dlen, "missing required parameter '%s'", json_string_value(v));
        return;
    }
    json_object_foreach((json_t *)args, k, v)
    {
        const json_t *p = json_object_get(props, k), *ty;
        if (json_is_object(props) && !p) {
            snprintf(detail, dlen, "parameter '%s' is not declared", k);
            return;
        }
        ty = json_object_get(p, "type");
        int fits = !ty;
        if (json_is_string(ty))
            fits = type_fits(json_string_value(ty), v);
        for (size_t t = 0; json_is_array(ty) && t < json_array_size(ty) && !fits; t++)
            fits = json_is_string(json_array_get(ty, t)) &&
                   type_fits(json_string_value(json_array_get(ty, t)), v);
        if (!fits) {
            snprintf(detail, dlen, "parameter '%s' does not fit its declared type", k);
            return;
        }
    }
    *schema_ok = 1;
}

/* ---- the incremental call-object scanner ------------------------------------------------------
 */

int tdm_tc_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void tdm_tc_jcall_reset(jcall_t *j)
{
    tdm_sbuf_t t = j->text;
    t.len = 0;
    memset(j, 0, sizeof(*j));
    j->text = t;
}

static void value_done(jcall_t *j, size_t end)
{
    if (j->cur_key == 1 && !j->have_name) { /* a repeated "name" does not replace the first */
        j->name_a = j->val_a;
        j->name_b = end;
        j->have_name = 1;
    } else if (j->cur_key == 2 && !j->have_args) {
        j->args_a = j->val_a;
        j->args_b = end;
        j->have_args = 1;
        j->args_open = 0;
    }
}

/* 0 more, 1 the object closed, -1 not a call object. */
int tdm_tc_jcall_feed(jcall_t *j, char c)
{
    if (!j->started) {
        if (tdm_tc_is_ws(c))
            return 0;
        if (c != '{')
            return -1;
        j->started = 1;
        j->depth = 1;
        j->phase = P_KEY0;
        (void)tdm_sbuf_add(&j->text, &c, 1);
        return 0;
    }
    if (tdm_sbuf_add(&j->text, &c, 1) != TDM_OK || j->text.len > TDM_DSML_MAX_VALUE)
        return -1;
    size_t idx = j->text.len - 1;
    if (j->in_str) {
        if (j->esc)
            j->esc = 0;
        else if (c == '\\')
            j->esc = 1;
        else if (c == '"') {
            j->in_str = 0;
            if (j->depth == 1 && j->phase == P_KEY) {
                const char *k = j->text.p + j->key_a;
                size_t kl = idx - j->key_a;
                j->cur_key = (kl == 4 && !memcmp(k, "name", 4)) ? 1
                             : ((kl == 9 && !memcmp(k, "arguments", 9)) ||
                                (kl == 10 && !memcmp(k, "parameters", 10)))
                                 ? 2
                                 : 0;
                j->phase = P_COLON;
            } else if (j->depth == 1 && j->phase == P_VAL) {
                value_done(j, idx + 1);
                j->phase = P_NEXT;
            }
        }
        return 0;
    }
    if (j->depth > 1) {
        if (c == '"')
            j->in_str = 1;
        else if (c == '{' || c == '[')
            j->depth++;
        else if (c == '}' || c == ']') {
            if (--j->depth == 1) {
                value_done(j, idx + 1);
                j->phase = P_NEXT;
            }
        }
        return 0;
    }
    switch (j->phase) {
    case P_KEY0:
        if (tdm_tc_is_ws(c))
            return 0;
        if (c == '}')
            return 1;
        if (c != '"')
            return -1;
        j->in_str = 1;
        j->phase = P_KEY;
        j->key_a = idx + 1;
        return 0;
    case P_COLON:
        return tdm_tc_is_ws(c) ? 0 : c == ':' ? (j->phase = P_VAL0, 0) : -1;
    case P_VAL0:
        if (tdm_tc_is_ws(c))
            return 0;
        if (c == ',' || c == '}' || c == ']' || c == ':')
            return -1;
        j->val_a = idx;
        j->phase = P_VAL;
        j->val_str = c == '"';
        if (c == '"')
            j->in_str = 1;
        else if (c == '{' || c == '[')
            j->depth++;
        if (j->cur_key == 2 && !j->have_args && !j->args_open) {
            j->args_obj = c == '{';
            j->args_str = c == '"';
            j->args_open = 1;
            j->args_a = idx;
        }
        return 0;
    case P_VAL: /* a bare scalar at depth 1 */
        if (!tdm_tc_is_ws(c) && c != ',' && c != '}')
            return 0;
        value_done(j, idx);
        j->phase = P_NEXT;
        __attribute__((fallthrough)); /* the delimiter */
    case P_NEXT:
        if (tdm_tc_is_ws(c))
            return 0;
        if (c == ',') {
            j->phase = P_KEY0;
            j->cur_key = 0;
            return 0;
        }
        return c == '}' ? 1 : -1;
    default:
        return -1;
    }
}
