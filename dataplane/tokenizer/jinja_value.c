/*
 * jinja_value.c — Python semantics of template values: truth, str(), ==, ordering, and
 * json.dumps with indent/sort_keys as transformers' `tojson` calls it.
 *
 * Numbers follow Python: True == 1 == 1.0, bools take part in arithmetic and comparison as
 * 0/1; strings compare by code point (UTF-8 byte order is the same order); lists compare
 * lexicographically; dicts compare equal regardless of key order. Undefined equals only
 * undefined and prints nothing.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

int tdm_jv_truthy(jv_t v)
{
    if (v.k == JV_UNDEF)
        return 0;
    if (v.k != JV_DATA)
        return 1;
    switch (json_typeof(v.j)) {
    case JSON_NULL:
    case JSON_FALSE:
        return 0;
    case JSON_TRUE:
        return 1;
    case JSON_INTEGER:
        return json_integer_value(v.j) != 0;
    case JSON_REAL:
        return json_real_value(v.j) != 0;
    case JSON_STRING:
        return json_string_length(v.j) > 0;
    case JSON_ARRAY:
        return json_array_size(v.j) > 0;
    case JSON_OBJECT:
        return json_object_size(v.j) > 0;
    }
    return 0;
}

const char *tdm_jv_type_name(jv_t v)
{
    static const char *const names[] = {"dict",  "list", "str",  "int",
                                        "float", "bool", "bool", "NoneType"};
    switch (v.k) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NS:
        return "Namespace";
    case JV_MACRO:
        return "Macro";
    case JV_FUNC:
        return "function";
    default:
        return names[json_typeof(v.j)];
    }
}

tdm_status_t tdm_jv_str(tdm_sbuf_t *b, jv_t v)
{
    switch (v.k) {
    case JV_UNDEF:
        return TDM_OK;
    case JV_NS:
        return tdm_sbuf_puts(b, "<Namespace>");
    case JV_MACRO:
    case JV_FUNC:
        return tdm_sbuf_puts(b, "<function>");
    default:
        return tdm_py_str(b, v.j);
    }
}

tdm_status_t tdm_jv_to_string(jv_t v, jv_t *ret)
{
    if (jv_is_str(v)) {
        *ret = jv_copy(v);
        return TDM_OK;
    }
    tdm_sbuf_t b = {.cap_limit = TDM_JINJA_MAX_SOURCE * 16};
    tdm_status_t st = tdm_jv_str(&b, v);
    if (st == TDM_OK)
        *ret = jv_take(json_stringn_nocheck(b.p ? b.p : "", b.len));
    tdm_sbuf_free(&b);
    return st;
}

static int is_num(const json_t *j)
{
    return json_is_number(j) || json_is_boolean(j);
}

static double num_of(const json_t *j)
{
    return json_is_integer(j) ? (double)json_integer_value(j)
           : json_is_real(j)  ? json_real_value(j)
                              : (double)json_is_true(j);
}

static int json_py_equal(const json_t *a, const json_t *b, int depth)
{
    if (depth > 64)
        return 0;
    if (is_num(a) && is_num(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return json_integer_value(a) == json_integer_value(b);
        return num_of(a) == num_of(b);
    }
    if (json_typeof(a) != json_typeof(b))
        return 0;
    switch (json_typeof(a)) {
    case JSON_NULL:
        return 1;
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_py_equal(json_array_get(a, i), json_array_get(b, i), depth + 1))
                return 0;
        return 1;
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        if (json_object_size(a) != json_object_size(b))
            return 0;
        json_object_foreach((json_t *)a, k, x)
        {
            json_t *y = json_object_get(b, k);
            if (!y || !json_py_equal(x, y, depth + 1))
                return 0;
        }
        return 1;
    }
    default:
        return 0;
    }
}

int tdm_jv_equal(jv_t a, jv_t b)
{
    if (a.k != b.k)
        return 0;
    switch (a.k) {
    case JV_UNDEF:
        return 1;
    case JV_NS:
        return a.j == b.j;
    case JV_MACRO:
        return a.macro == b.macro;
    case JV_FUNC:
        return a.func == b.func;
    default:
        return json_py_equal(a.j, b.j, 0);
    }
}

static int json_py_compare(const json_t *a, const json_t *b, tdm_status_t *st, int depth)
{
    if (depth > 64) {
        *st = TDM_ERR_RANGE;
        return 0;
    }
    if (is_num(a) && is_num(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return (json_integer_value(a) > json_integer_value(b)) -
                   (json_integer_value(a) < json_integer_value(b));
        double x = num_of(a), y = num_of(b);
        return (x > y) - (x < y);
    }
    if (json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        int c = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
        return c ? (c > 0) - (c < 0) : (la > lb) - (la < lb);
    }
    if (json_is_array(a) && json_is_array(b)) {
        size_t la = json_array_size(a), lb = json_array_size(b);
        for (size_t i = 0; i < la && i < lb; i++) {
            const json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
            if (json_py_equal(x, y, 0))
                continue;
            return json_py_compare(x, y, st, depth + 1);
        }
        return (la > lb) - (la < lb);
    }
    *st = TDM_ERR_INVAL;
    return 0;
}

int tdm_jv_compare(jv_t a, jv_t b, tdm_status_t *st)
{
    *st = TDM_OK;
    if (a.k != JV_DATA || b.k != JV_DATA) {
        *st = TDM_ERR_INVAL;
        return 0;
    }
    return json_py_compare(a.j, b.j, st, 0);
}

json_t *tdm_jv_to_json(jv_t v)
{
    if (v.k == JV_DATA || v.k == JV_NS)
        return json_incref(v.j);
    return json_null();
}

size_t tdm_jv_utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

size_t tdm_jv_utf8_offset(const char *s, size_t n, size_t cp)
{
    size_t i = 0, c = 0;
    while (i < n) {
        if (((unsigned char)s[i] & 0xc0) != 0x80) {
            if (c == cp)
                return i;
            c++;
        }
        i++;
    }
    return n;
}
