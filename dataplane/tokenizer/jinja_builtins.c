/*
 * jinja_builtins.c — the filters, tests, methods and globals chat templates call, each with
 * the Python/jinja2 behaviour transformers gets (tdm/jinja.h lists them).
 *
 * Case mapping (upper, lower, title, capitalize) covers ASCII only; every other character is
 * kept as it is. Anything a template calls that is not here is an error naming it, never a
 * silent empty string. Work proportional to input size (joins, splits, ranges) is counted
 * against the render's work limit so a template cannot loop unboundedly inside a built-in.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/mem.h>

#include "jinja_int.h"

#define STR(v) json_string_value((v).j)
#define SLEN(v) json_string_length((v).j)

static jv_t mkstr(const char *s, size_t n)
{
    return jv_take(json_stringn_nocheck(s ? s : "", n));
}

static jv_t sbuf_take(tdm_sbuf_t *b)
{
    jv_t v = mkstr(b->p, b->len);
    tdm_sbuf_free(b);
    return v;
}

static int is_obj(jv_t v)
{
    return (v.k == JV_DATA && json_is_object(v.j)) || v.k == JV_NS;
}

static int is_list(jv_t v)
{
    return v.k == JV_DATA && json_is_array(v.j);
}

/* Keyword argument `name`, or positional `pos` (-1: keyword only); NULL-kind undefined if absent.
 */
static jv_t arg(jv_t *args, char **kw, size_t n, int pos, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (kw && kw[i] && name && !strcmp(kw[i], name))
            return args[i];
    int p = 0;
    for (size_t i = 0; i < n; i++) {
        if (kw && kw[i])
            continue;
        if (p++ == pos)
            return args[i];
    }
    return jv_undef();
}

static int npos(char **kw, size_t n)
{
    int p = 0;
    for (size_t i = 0; i < n; i++)
        p += !(kw && kw[i]);
    return p;
}

/* ---- strings ---- */

static void ascii_case(char *s, size_t n, int mode) /* 0 lower, 1 upper, 2 title, 3 capitalize */
{
    int prev_alpha = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int up = mode == 1 || (mode == 2 && !prev_alpha) || (mode == 3 && i == 0);
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (alpha)
            s[i] = up ? (char)(c & ~0x20) : (char)(c | 0x20);
        prev_alpha = alpha || (unsigned char)c >= 0x80;
    }
}

static tdm_status_t str_case(jv_t s, int mode, jv_t *ret)
{
    char *p = tdm_malloc(SLEN(s) + 1);
    memcpy(p, STR(s), SLEN(s) + 1);
    ascii_case(p, SLEN(s), mode);
    *ret = mkstr(p, SLEN(s));
    tdm_free(p);
    return TDM_OK;
}

static int in_set(uint32_t cp, const char *chars, size_t n)
{
    size_t l;
    for (size_t i = 0; i < n; i += l)
        if (tdm_py_utf8_decode(chars, n, i, &l) == cp)
            return 1;
    return 0;
}

/* Python str.strip/lstrip/rstrip(chars=None); which: 1 left, 2 right, 3 both. */
static jv_t str_strip(jv_t s, jv_t chars, int which)
{
    const char *p = STR(s);
    size_t n = SLEN(s), a = 0, z = n, l;
    int ws = !jv_is_str(chars);
    const char *cs = ws ? NULL : STR(chars);
    size_t cn = ws ? 0 : SLEN(chars);
    while ((which & 1) && a < z) {
        uint32_t cp = tdm_py_utf8_decode(p, n, a, &l);
        if (ws ? !tdm_py_isspace(cp) : !in_set(cp, cs, cn))
            break;
        a += l;
    }
    while ((which & 2) && z > a) {
        size_t st = z - 1;
        while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80)
            st--;
        uint32_t cp = tdm_py_utf8_decode(p, n, st, &l);
        if (ws ? !tdm_py_isspace(cp) : !in_set(cp, cs, cn))
            break;
        z = st;
    }
    return mkstr(p + a, z - a);
}

static tdm_status_t str_replace(jctx_t *c, jv_t s, jv_t old, jv_t new_, jv_t count, jv_t *ret)
{
    if (!jv_is_str(old) || !jv_is_str(new_))
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "replace() arguments must be strings");
    int64_t left =
        count.k == JV_DATA && json_is_integer(count.j) ? json_integer_value(count.j) : -1;
    const char *p = STR(s), *o = STR(old);
    size_t n = SLEN(s), on = SLEN(old), i = 0;
    tdm_sbuf_t b = {.cap_limit = c->lim.max_output};
    tdm_status_t st = tdm_sbuf_add(&b, "", 0);
    while (st == TDM_OK && i <= n) {
        const char *hit = left != 0 ? (on ? memmem(p + i, n - i, o, on) : p + i) : NULL;
        if (!hit) {
            st = tdm_sbuf_add(&b, p + i, n - i);
            break;
        }
        size_t h = (size_t)(hit - p);
        st = tdm_sbuf_add(&b, p + i, h - i);
        if (st == TDM_OK)
            st = tdm_sbuf_add(&b, STR(new_), SLEN(new_));
        if (on == 0) { /* "ab".replace("", "-") == "-a-b-" */
            size_t l = 1;
            if (h < n) {
                tdm_py_utf8_decode(p, n, h, &l);
                if (st == TDM_OK)
                    st = tdm_sbuf_add(&b, p + h, l);
            }
            i = h + l;
        } else {
            i = h + on;
        }
        if (left > 0)
            left--;
        if (st == TDM_OK)
            st = tdm_jctx_work(c, 1);
    }
    if (st != TDM_OK) {
        tdm_sbuf_free(&b);
        return st == TDM_ERR_OVERFLOW
                   ? tdm_jctx_fail(c, TDM_ERR_RANGE, "replace() result too large")
                   : st;
    }
    *ret = sbuf_take(&b);
    return TDM_OK;
}

/* Python str.split(sep=None, maxsplit=-1). */
static tdm_status_t str_split(jctx_t *c, jv_t s, jv_t sep, jv_t maxs, jv_t *ret)
{
    const char *p = STR(s);
    size_t n = SLEN(s), i = 0, l;
    int64_t max = maxs.k == JV_DATA && json_is_integer(maxs.j) ? json_integer_value(maxs.j) : -1;
    json_t *out = json_array();
    if (jv_is_str(sep)) {
        const char *d = STR(sep);
        size_t dn = SLEN(sep);
        if (!dn) {
            json_decref(out);
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "split(): empty separator");
        }
        for (;;) {
            const char *hit = max != 0 ? memmem(p + i, n - i, d, dn) : NULL;
            if (!hit)
                break;
            json_array_append_new(out, json_stringn_nocheck(p + i, (size_t)(hit - p) - i));
            i = (size_t)(hit - p) + dn;
            if (max > 0)
                max--;
            TDM_TRY(tdm_jctx_work(c, 1));
        }
        json_array_append_new(out, json_stringn_nocheck(p + i, n - i));
    } else {
        while (i < n) {
            while (i < n && tdm_py_isspace(tdm_py_utf8_decode(p, n, i, &l)))
                i += l;
            if (i >= n)
                break;
            size_t a = i;
            if (max == 0) {
                size_t z = n;
                while (z > a) { /* the rest, right-stripped */
                    size_t st = z - 1;
                    while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80)
                        st--;
                    if (!tdm_py_isspace(tdm_py_utf8_decode(p, n, st, &l)))
                        break;
                    z = st;
                }
                json_array_append_new(out, json_stringn_nocheck(p + a, z - a));
                break;
            }
            while (i < n && !tdm_py_isspace(tdm_py_utf8_decode(p, n, i, &l)))
                i += l;
            json_array_append_new(out, json_stringn_nocheck(p + a, i - a));
            if (max > 0)
                max--;
            TDM_TRY(tdm_jctx_work(c, 1));
        }
    }
    *ret = jv_take(out);
    return TDM_OK;
}

static int prefix_test(jv_t s, jv_t x, int suffix)
{
    if (is_list(x)) {
        for (size_t i = 0; i < json_array_size(x.j); i++)
            if (prefix_test(s, jv_take(json_array_get(x.j, i)), suffix))
                return 1;
        return 0;
    }
    if (!jv_is_str(x) || SLEN(x) > SLEN(s))
        return 0;
    return !memcmp(STR(s) + (suffix ? SLEN(s) - SLEN(x) : 0), STR(x), SLEN(x));
}

static tdm_status_t to_list(jctx_t *c, jv_t v, jv_t *ret)
{
    json_t *out;
    if (is_list(v))
        return *ret = jv_take(json_copy(v.j)), TDM_OK;
    out = json_array();
    if (is_obj(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v.j, k, x) json_array_append_new(out, json_string(k));
    } else if (jv_is_str(v)) {
        size_t l;
        for (size_t i = 0; i < SLEN(v); i += l) {
            tdm_py_utf8_decode(STR(v), SLEN(v), i, &l);
            json_array_append_new(out, json_stringn_nocheck(STR(v) + i, l));
        }
    } else if (v.k != JV_UNDEF) {
        json_decref(out);
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "'%s' object is not iterable", tdm_jv_type_name(v));
    }
    *ret = jv_take(out);
    return TDM_OK;
}

static tdm_status_t join(jctx_t *c, jv_t seq, jv_t sep, jv_t attr, jv_t *ret)
{
    json_t *items = NULL;
    tdm_sbuf_t b = {.cap_limit = c->lim.max_output};
    tdm_status_t st = tdm_sbuf_add(&b, "", 0);
    if (is_list(seq)) {
        items = json_incref(seq.j);
    } else {
        jv_t l;
        tdm_sbuf_free(&b);
        TDM_TRY(to_list(c, seq, &l));
        items = l.j;
        st = tdm_sbuf_add(&b, "", 0);
    }
    for (size_t i = 0; st == TDM_OK && i < json_array_size(items); i++) {
        jv_t it = jv_take(json_array_get(items, i));
        if (i && jv_is_str(sep))
            st = tdm_sbuf_add(&b, STR(sep), SLEN(sep));
        if (jv_is_str(attr) && it.k == JV_DATA && json_is_object(it.j))
            it = jv_take(json_object_get(it.j, STR(attr)));
        if (st == TDM_OK)
            st = tdm_jv_str(&b, it);
        if (st == TDM_OK)
            st = tdm_jctx_work(c, 1);
    }
    json_decref(items);
    if (st != TDM_OK) {
        tdm_sbuf_free(&b);
        return st == TDM_ERR_OVERFLOW ? tdm_jctx_fail(c, TDM_ERR_RANGE, "join() result too large")
                                      : st;
    }
    *ret = sbuf_take(&b);
    return TDM_OK;
}

/* ---- tests ---- */

tdm_status_t tdm_jinja_test(jctx_t *c, const char *name, jv_t v, jv_t *args, size_t nargs, int *ret)
{
    int data = v.k == JV_DATA;
    const json_t *j = v.j;
    jv_t a0 = nargs ? args[0] : jv_undef();
    tdm_status_t st = TDM_OK;
    if (!strcmp(name, "defined"))
        *ret = v.k != JV_UNDEF;
    else if (!strcmp(name, "undefined"))
        *ret = v.k == JV_UNDEF;
    else if (!strcmp(name, "none"))
        *ret = data && json_is_null(j);
    else if (!strcmp(name, "string"))
        *ret = data && json_is_string(j);
    else if (!strcmp(name, "mapping"))
        *ret = data && json_is_object(j);
    else if (!strcmp(name, "iterable"))
        *ret = v.k == JV_UNDEF ||
               (data && (json_is_string(j) || json_is_array(j) || json_is_object(j)));
    else if (!strcmp(name, "sequence"))
        *ret = v.k == JV_UNDEF ||
               (data && (json_is_string(j) || json_is_array(j) || json_is_object(j)));
    else if (!strcmp(name, "number"))
        *ret = data && (json_is_number(j) || json_is_boolean(j));
    else if (!strcmp(name, "integer"))
        *ret = data && json_is_integer(j);
    else if (!strcmp(name, "float"))
        *ret = data && json_is_real(j);
    else if (!strcmp(name, "boolean"))
        *ret = data && json_is_boolean(j);
    else if (!strcmp(name, "true"))
        *ret = data && json_is_true(j);
    else if (!strcmp(name, "false"))
        *ret = data && json_is_false(j);
    else if (!strcmp(name, "callable"))
        *ret = v.k == JV_MACRO || v.k == JV_FUNC;
    else if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") ||
             !strcmp(name, "sameas"))
        *ret = tdm_jv_equal(v, a0);
    else if (!strcmp(name, "ne") || !strcmp(name, "!="))
        *ret = !tdm_jv_equal(v, a0);
    else if (!strcmp(name, "lt") || !strcmp(name, "gt") || !strcmp(name, "le") ||
             !strcmp(name, "ge") || !strcmp(name, "lessthan") || !strcmp(name, "greaterthan")) {
        int cmp = tdm_jv_compare(v, a0, &st);
        if (st != TDM_OK)
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "test '%s': values do not order", name);
        *ret = name[0] == 'l' ? (name[1] == 'e' && !name[2] ? cmp <= 0 : cmp < 0)
                              : (name[1] == 'e' && !name[2] ? cmp >= 0 : cmp > 0);
    } else if (!strcmp(name, "in")) {
        if (jv_is_str(a0) && jv_is_str(v))
            *ret = memmem(STR(a0), SLEN(a0), STR(v), SLEN(v)) != NULL || !SLEN(v);
        else if (is_list(a0)) {
            *ret = 0;
            for (size_t i = 0; i < json_array_size(a0.j) && !*ret; i++)
                *ret = tdm_jv_equal(v, jv_take(json_array_get(a0.j, i)));
        } else if (is_obj(a0))
            *ret = jv_is_str(v) && json_object_get(a0.j, STR(v));
        else
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "test 'in': not a container");
    } else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (!(data && json_is_integer(j)))
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "test '%s' needs an integer", name);
        int64_t x = json_integer_value(j);
        if (name[0] == 'd') {
            int64_t d = a0.k == JV_DATA && json_is_integer(a0.j) ? json_integer_value(a0.j) : 0;
            if (!d)
                return tdm_jctx_fail(c, TDM_ERR_INVAL, "divisibleby 0");
            *ret = x % d == 0;
        } else {
            *ret = (x % 2 != 0) == (name[0] == 'o');
        }
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (!jv_is_str(v))
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "test '%s' needs a string", name);
        *ret = 1;
        for (size_t i = 0; i < SLEN(v); i++) {
            char ch = STR(v)[i];
            if (name[0] == 'l' ? (ch >= 'A' && ch <= 'Z') : (ch >= 'a' && ch <= 'z'))
                *ret = 0;
        }
    } else
        return tdm_jctx_fail(c, TDM_ERR_UNSUPPORTED, "no test named '%s'", name);
    return TDM_OK;
}

/* ---- filters ---- */

static tdm_status_t select_items(jctx_t *c, jv_t seq, jv_t *args, size_t nargs, int by_attr,
                                 int keep, jv_t *ret)
{
    if (seq.k == JV_UNDEF) {
        *ret = jv_take(json_array());
        return TDM_OK;
    }
    if (!is_list(seq))
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "select on '%s'", tdm_jv_type_name(seq));
    size_t skip = by_attr ? 1 : 0;
    if (by_attr && (!nargs || !jv_is_str(args[0])))
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "selectattr needs an attribute name");
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(seq.j); i++) {
        json_t *item = json_array_get(seq.j, i);
        jv_t v = jv_take(item);
        if (by_attr)
            v = json_is_object(item) ? jv_take(json_object_get(item, STR(args[0]))) : jv_undef();
        int r;
        tdm_status_t st =
            nargs > skip && jv_is_str(args[skip])
                ? tdm_jinja_test(c, STR(args[skip]), v, args + skip + 1, nargs - skip - 1, &r)
                : (r = tdm_jv_truthy(v), TDM_OK);
        if (st == TDM_OK)
            st = tdm_jctx_work(c, 1);
        if (st != TDM_OK) {
            json_decref(out);
            return st;
        }
        if (r == keep)
            json_array_append(out, item);
    }
    *ret = jv_take(out);
    return TDM_OK;
}

tdm_status_t tdm_jinja_filter(jctx_t *c, const char *name, jv_t v, jv_t *args, char **kw,
                              size_t nargs, jv_t *ret)
{
    int data = v.k == JV_DATA;
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv_t dflt = arg(args, kw, nargs, 0, "default_value");
        jv_t boolean = arg(args, kw, nargs, 1, "boolean");
        int use = v.k == JV_UNDEF || (tdm_jv_truthy(boolean) && !tdm_jv_truthy(v));
        *ret = !use ? jv_copy(v) : dflt.k == JV_UNDEF ? jv_take(json_string("")) : jv_copy(dflt);
        return TDM_OK;
    }
    if (!strcmp(name, "safe"))
        return *ret = jv_copy(v), TDM_OK;
    if (!strcmp(name, "string"))
        return tdm_jv_to_string(v, ret);
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        size_t n = v.k == JV_UNDEF ? 0
                   : jv_is_str(v)  ? tdm_jv_utf8_count(STR(v), SLEN(v))
                   : is_list(v)    ? json_array_size(v.j)
                   : is_obj(v)     ? json_object_size(v.j)
                                   : (size_t)-1;
        if (n == (size_t)-1)
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "object of type '%s' has no len()",
                                 tdm_jv_type_name(v));
        return *ret = jv_take(json_integer((json_int_t)n)), TDM_OK;
    }
    if (!strcmp(name, "tojson")) {
        jv_t ind = arg(args, kw, nargs, 1, "indent"), sk = arg(args, kw, nargs, 3, "sort_keys");
        jv_t ea = arg(args, kw, nargs, 0, "ensure_ascii");
        if (tdm_jv_truthy(ea))
            return tdm_jctx_fail(c, TDM_ERR_UNSUPPORTED,
                                 "tojson(ensure_ascii=True) is not supported");
        if (v.k == JV_UNDEF || v.k == JV_MACRO || v.k == JV_FUNC)
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "Object of type %s is not JSON serializable",
                                 tdm_jv_type_name(v));
        int indent =
            ind.k == JV_DATA && json_is_integer(ind.j) ? (int)json_integer_value(ind.j) : -1;
        if (indent > 64)
            indent = 64;
        tdm_sbuf_t b = {.cap_limit = c->lim.max_output};
        tdm_status_t st = tdm_py_json_dumps_ex(&b, v.j, indent, tdm_jv_truthy(sk), 0, 64);
        if (st != TDM_OK) {
            tdm_sbuf_free(&b);
            return tdm_jctx_fail(c, TDM_ERR_RANGE, "tojson: value too large or too deep");
        }
        *ret = sbuf_take(&b);
        return TDM_OK;
    }
    if (!strcmp(name, "items")) {
        json_t *out = json_array();
        const char *k;
        json_t *x;
        if (v.k != JV_UNDEF && !is_obj(v)) {
            json_decref(out);
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "items of '%s'", tdm_jv_type_name(v));
        }
        if (v.k != JV_UNDEF)
            json_object_foreach(v.j, k, x) json_array_append_new(out, json_pack("[sO]", k, x));
        return *ret = jv_take(out), TDM_OK;
    }
    if (!strcmp(name, "list"))
        return to_list(c, v, ret);
    if (!strcmp(name, "join"))
        return join(c, v, arg(args, kw, nargs, 0, "d"), arg(args, kw, nargs, 1, "attribute"), ret);
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        jv_t l;
        TDM_TRY(to_list(c, v, &l));
        size_t n = json_array_size(l.j);
        *ret = n ? jv_borrow(json_array_get(l.j, name[0] == 'f' ? 0 : n - 1)) : jv_undef();
        jv_free(&l);
        return TDM_OK;
    }
    if (!strcmp(name, "reverse")) {
        if (jv_is_str(v) || is_list(v)) {
            jv_t l;
            TDM_TRY(to_list(c, v, &l));
            json_t *out = json_array();
            for (size_t i = json_array_size(l.j); i-- > 0;)
                json_array_append(out, json_array_get(l.j, i));
            jv_free(&l);
            if (jv_is_str(v)) {
                jv_t s;
                tdm_status_t st = join(c, jv_take(out), jv_undef(), jv_undef(), &s);
                json_decref(out);
                return st == TDM_OK ? (*ret = s, TDM_OK) : st;
            }
            return *ret = jv_take(out), TDM_OK;
        }
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "reverse of '%s'", tdm_jv_type_name(v));
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_items(c, v, args, nargs, 1, name[0] == 's', ret);
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return select_items(c, v, args, nargs, 0, name[0] == 's', ret);
    if (!strcmp(name, "map")) {
        jv_t attr = arg(args, kw, nargs, -1, "attribute");
        jv_t dflt = arg(args, kw, nargs, -1, "default");
        jv_t l;
        if (!jv_is_str(attr) && !(npos(kw, nargs) >= 1 && jv_is_str(args[0])))
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "map needs attribute= or a filter name");
        TDM_TRY(to_list(c, v, &l));
        json_t *out = json_array();
        for (size_t i = 0; i < json_array_size(l.j); i++) {
            json_t *item = json_array_get(l.j, i);
            jv_t r = jv_undef();
            tdm_status_t st = tdm_jctx_work(c, 1);
            if (st == TDM_OK && jv_is_str(attr)) {
                json_t *x = json_is_object(item) ? json_object_get(item, STR(attr)) : NULL;
                r = x ? jv_borrow(x) : jv_copy(dflt);
            } else if (st == TDM_OK) {
                st = tdm_jinja_filter(c, STR(args[0]), jv_take(item), args + 1, kw ? kw + 1 : NULL,
                                      nargs - 1, &r);
            }
            if (st != TDM_OK) {
                json_decref(out);
                jv_free(&l);
                return st;
            }
            json_array_append_new(out, tdm_jv_to_json(r));
            jv_free(&r);
        }
        jv_free(&l);
        return *ret = jv_take(out), TDM_OK;
    }
    if (!strcmp(name, "int") || !strcmp(name, "float")) {
        int as_int = name[0] == 'i';
        jv_t dflt = arg(args, kw, nargs, 0, "default");
        double f = 0;
        int ok = 1;
        if (data && (json_is_number(v.j) || json_is_boolean(v.j)))
            f = json_is_integer(v.j) ? (double)json_integer_value(v.j)
                : json_is_real(v.j)  ? json_real_value(v.j)
                                     : json_is_true(v.j);
        else if (jv_is_str(v)) {
            char *end;
            f = strtod(STR(v), &end);
            ok = end != STR(v) && *end == '\0';
        } else
            ok = 0;
        if (!ok)
            return *ret = dflt.k != JV_UNDEF ? jv_copy(dflt)
                                             : jv_take(as_int ? json_integer(0) : json_real(0)),
                   TDM_OK;
        if (as_int && data && json_is_integer(v.j))
            return *ret = jv_copy(v), TDM_OK;
        if (as_int && (f > 9.2e18 || f < -9.2e18))
            return tdm_jctx_fail(c, TDM_ERR_RANGE, "int() out of range");
        return *ret = jv_take(as_int ? json_integer((json_int_t)f) : json_real(f)), TDM_OK;
    }
    if (!strcmp(name, "abs")) {
        if (data && json_is_integer(v.j) && json_integer_value(v.j) != INT64_MIN)
            return *ret = jv_take(json_integer(llabs(json_integer_value(v.j)))), TDM_OK;
        if (data && json_is_real(v.j)) {
            double f = json_real_value(v.j);
            return *ret = jv_take(json_real(f < 0 ? -f : f)), TDM_OK;
        }
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "abs of '%s'", tdm_jv_type_name(v));
    }
    /* string filters take str(value) */
    jv_t s;
    tdm_status_t st;
    if (!strcmp(name, "trim") || !strcmp(name, "upper") || !strcmp(name, "lower") ||
        !strcmp(name, "capitalize") || !strcmp(name, "title") || !strcmp(name, "replace") ||
        !strcmp(name, "indent")) {
        TDM_TRY(tdm_jv_to_string(v, &s));
        if (name[0] == 't' && name[1] == 'r')
            *ret = str_strip(s, arg(args, kw, nargs, 0, "chars"), 3), st = TDM_OK;
        else if (!strcmp(name, "replace"))
            st = str_replace(c, s, arg(args, kw, nargs, 0, "old"), arg(args, kw, nargs, 1, "new"),
                             arg(args, kw, nargs, 2, "count"), ret);
        else if (!strcmp(name, "indent")) {
            jv_t w = arg(args, kw, nargs, 0, "width"), first = arg(args, kw, nargs, 1, "first");
            int64_t width = w.k == JV_DATA && json_is_integer(w.j) ? json_integer_value(w.j) : 4;
            tdm_sbuf_t b = {.cap_limit = c->lim.max_output};
            st = tdm_sbuf_add(&b, "", 0);
            for (size_t i = 0; i < SLEN(s) && st == TDM_OK; i++) {
                if ((i == 0 && tdm_jv_truthy(first)) ||
                    (i > 0 && STR(s)[i - 1] == '\n' && STR(s)[i] != '\n'))
                    for (int64_t k = 0; k < width && k < 256 && st == TDM_OK; k++)
                        st = tdm_sbuf_add(&b, " ", 1);
                if (st == TDM_OK)
                    st = tdm_sbuf_add(&b, STR(s) + i, 1);
            }
            if (st == TDM_OK)
                *ret = sbuf_take(&b);
            else
                tdm_sbuf_free(&b), st = tdm_jctx_fail(c, TDM_ERR_RANGE, "indent result too large");
        } else
            st = str_case(s, name[0] == 'u' ? 1 : name[0] == 'l' ? 0 : name[0] == 't' ? 2 : 3, ret);
        jv_free(&s);
        return st;
    }
    return tdm_jctx_fail(c, TDM_ERR_UNSUPPORTED, "no filter named '%s'", name);
}

/* ---- methods ---- */

tdm_status_t tdm_jinja_method(jctx_t *c, jv_t self, const char *name, jv_t *args, char **kw,
                              size_t nargs, jv_t *ret)
{
    jv_t a0 = arg(args, kw, nargs, 0, NULL), a1 = arg(args, kw, nargs, 1, NULL);
    if (jv_is_str(self)) {
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith"))
            return *ret = jv_take(json_boolean(prefix_test(self, a0, name[0] == 'e'))), TDM_OK;
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip"))
            return *ret = str_strip(self, a0, name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3), TDM_OK;
        if (!strcmp(name, "split"))
            return str_split(c, self, arg(args, kw, nargs, 0, "sep"),
                             arg(args, kw, nargs, 1, "maxsplit"), ret);
        if (!strcmp(name, "replace"))
            return str_replace(c, self, a0, a1, arg(args, kw, nargs, 2, "count"), ret);
        if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
            !strcmp(name, "capitalize"))
            return str_case(self,
                            name[0] == 'u'   ? 1
                            : name[0] == 'l' ? 0
                            : name[0] == 't' ? 2
                                             : 3,
                            ret);
        if (!strcmp(name, "join"))
            return join(c, a0, self, jv_undef(), ret);
        if (!strcmp(name, "find") || !strcmp(name, "count")) {
            if (!jv_is_str(a0))
                return tdm_jctx_fail(c, TDM_ERR_INVAL, "%s() needs a string", name);
            const char *h = STR(self), *hit;
            size_t n = SLEN(self), i = 0, cnt = 0;
            if (name[0] == 'f') {
                hit = SLEN(a0) ? memmem(h, n, STR(a0), SLEN(a0)) : h;
                return *ret = jv_take(json_integer(
                           hit ? (json_int_t)tdm_jv_utf8_count(h, (size_t)(hit - h)) : -1)),
                       TDM_OK;
            }
            while (SLEN(a0) && i <= n && (hit = memmem(h + i, n - i, STR(a0), SLEN(a0)))) {
                cnt++;
                i = (size_t)(hit - h) + SLEN(a0);
            }
            return *ret = jv_take(json_integer((json_int_t)cnt)), TDM_OK;
        }
        if (!strcmp(name, "format")) {
            tdm_sbuf_t b = {.cap_limit = c->lim.max_output};
            size_t k = 0;
            tdm_status_t st = tdm_sbuf_add(&b, "", 0);
            for (size_t i = 0; i < SLEN(self) && st == TDM_OK; i++) {
                const char *p = STR(self);
                if (p[i] == '{' && i + 1 < SLEN(self) && p[i + 1] == '}') {
                    st = k < nargs ? tdm_jv_str(&b, args[k++]) : TDM_ERR_INVAL;
                    i++;
                } else if ((p[i] == '{' || p[i] == '}') && i + 1 < SLEN(self) && p[i + 1] == p[i]) {
                    st = tdm_sbuf_add(&b, p + i++, 1);
                } else {
                    st = tdm_sbuf_add(&b, p + i, 1);
                }
            }
            if (st != TDM_OK) {
                tdm_sbuf_free(&b);
                return tdm_jctx_fail(c, TDM_ERR_INVAL, "format(): only '{}' fields are supported");
            }
            *ret = sbuf_take(&b);
            return TDM_OK;
        }
    }
    if (is_obj(self)) {
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            json_t *out = json_array();
            const char *k;
            json_t *x;
            json_object_foreach(self.j, k, x)
                json_array_append_new(out, name[0] == 'i'   ? json_pack("[sO]", k, x)
                                           : name[0] == 'k' ? json_string(k)
                                                            : json_incref(x));
            return *ret = jv_take(out), TDM_OK;
        }
        if (!strcmp(name, "get")) {
            json_t *x = jv_is_str(a0) ? json_object_get(self.j, STR(a0)) : NULL;
            return *ret = x                  ? jv_borrow(x)
                          : a1.k == JV_UNDEF ? jv_take(json_null())
                                             : jv_copy(a1),
                   TDM_OK;
        }
    }
    if (!strcmp(name, "append") || !strcmp(name, "pop") || !strcmp(name, "update") ||
        !strcmp(name, "extend") || !strcmp(name, "insert") || !strcmp(name, "clear"))
        return tdm_jctx_fail(c, TDM_ERR_PERM, "'%s' would modify a value; templates are immutable",
                             name);
    return TDM_ERR_NOTFOUND;
}

/* ---- globals ---- */

tdm_status_t tdm_jinja_global_call(jctx_t *c, int func, jv_t *args, char **kw, size_t nargs,
                                   jv_t *ret)
{
    switch (func) {
    case JF_RAISE: {
        tdm_sbuf_t b = {.cap_limit = 1024};
        if (nargs)
            (void)tdm_jv_str(&b, args[0]);
        tdm_status_t st = tdm_jctx_fail(c, TDM_ERR_INVAL, "raise_exception: %s", b.p ? b.p : "");
        tdm_sbuf_free(&b);
        return st;
    }
    case JF_STRFTIME: {
        char out[256];
        time_t now = c->lim.now_unix ? (time_t)c->lim.now_unix : time(NULL);
        struct tm tm;
        if (!nargs || !jv_is_str(args[0]))
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "strftime_now needs a format string");
        gmtime_r(&now, &tm);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        /* the template's format: strftime only reads it, and the output is bounded */
        size_t n = strftime(out, sizeof(out), STR(args[0]), &tm);
#pragma GCC diagnostic pop
        *ret = mkstr(out, n);
        return TDM_OK;
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        json_t *o = json_object();
        for (size_t i = 0; i < nargs; i++) {
            if (kw && kw[i]) {
                json_object_set_new(o, kw[i], tdm_jv_to_json(args[i]));
            } else if (is_obj(args[i])) {
                json_object_update(o, args[i].j);
            } else {
                json_decref(o);
                return tdm_jctx_fail(c, TDM_ERR_INVAL, "namespace()/dict() take key=value pairs");
            }
        }
        *ret = jv_take(o);
        if (func == JF_NAMESPACE)
            ret->k = JV_NS;
        return TDM_OK;
    }
    case JF_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (nargs < 1 || nargs > 3)
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "range() takes 1 to 3 integers");
        for (size_t i = 0; i < nargs; i++) {
            if (!(args[i].k == JV_DATA && json_is_integer(args[i].j)))
                return tdm_jctx_fail(c, TDM_ERR_INVAL, "range() takes integers");
            v[nargs == 1 ? 1 : i] = json_integer_value(args[i].j);
        }
        if (!v[2])
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "range() step must not be zero");
        json_t *out = json_array();
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) {
            if (tdm_jctx_work(c, 1) != TDM_OK) {
                json_decref(out);
                return TDM_ERR_RANGE;
            }
            json_array_append_new(out, json_integer(x));
            if ((v[2] > 0 && x > INT64_MAX - v[2]) || (v[2] < 0 && x < INT64_MIN - v[2]))
                break;
        }
        *ret = jv_take(out);
        return TDM_OK;
    }
    }
    return tdm_jctx_fail(c, TDM_ERR_STATE, "unknown built-in");
}
