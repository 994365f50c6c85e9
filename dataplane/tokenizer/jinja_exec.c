/*
 * jinja_exec.c — statements and scopes: output, if, for (loop.*, filters, else, break and
 * continue), set (names, tuples, namespace attributes, blocks), macros, call and filter
 * blocks, and tdm_jinja_render(). Scoping follows jinja2 (see jinja_eval.c).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>

#include "jinja_int.h"

void tdm_jframe_set(jframe_t *f, const char *name, jv_t v)
{
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) {
            jv_free(&f->vals[i]);
            f->vals[i] = v;
            return;
        }
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 8;
        f->names = tdm_realloc(f->names, f->cap * sizeof(*f->names));
        f->vals = tdm_realloc(f->vals, f->cap * sizeof(*f->vals));
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

void tdm_jframe_clear(jframe_t *f)
{
    for (size_t i = 0; i < f->n; i++)
        jv_free(&f->vals[i]);
    tdm_free(f->names);
    tdm_free(f->vals);
    memset(f, 0, sizeof(*f));
}

/* Render `body` into a new string value (macros, {% set %} blocks, filter blocks). */
tdm_status_t tdm_jinja_capture(jctx_t *c, const jnode_t *body, jv_t *ret)
{
    tdm_sbuf_t b = {.cap_limit = c->out->cap_limit}, *saved = c->out;
    c->out = &b;
    tdm_status_t st = tdm_jinja_exec(c, body);
    c->out = saved;
    if (st == TDM_OK)
        *ret = jv_take(json_stringn_nocheck(b.p ? b.p : "", b.len));
    tdm_sbuf_free(&b);
    return st;
}

/* Loop items of an iterable: lists as they are, dicts by key, strings by character. */
static tdm_status_t iter_items(jctx_t *c, jv_t v, json_t **ret)
{
    if (v.k == JV_UNDEF) {
        *ret = json_array();
        return TDM_OK;
    }
    if (v.k == JV_DATA && json_is_array(v.j)) {
        *ret = json_incref(v.j);
        return TDM_OK;
    }
    if ((v.k == JV_DATA && json_is_object(v.j)) || v.k == JV_NS) {
        const char *k;
        json_t *x, *l = json_array();
        json_object_foreach(v.j, k, x) json_array_append_new(l, json_string(k));
        *ret = l;
        return TDM_OK;
    }
    if (jv_is_str(v)) {
        const char *s = json_string_value(v.j);
        size_t n = json_string_length(v.j), l;
        json_t *out = json_array();
        for (size_t i = 0; i < n; i += l) {
            tdm_py_utf8_decode(s, n, i, &l);
            json_array_append_new(out, json_stringn_nocheck(s + i, l));
        }
        *ret = out;
        return TDM_OK;
    }
    return tdm_jctx_fail(c, TDM_ERR_INVAL, "'%s' object is not iterable", tdm_jv_type_name(v));
}

static tdm_status_t bind_targets(jctx_t *c, jframe_t *f, char **names, size_t n, json_t *item)
{
    if (n == 1) {
        tdm_jframe_set(f, names[0], jv_borrow(item));
        return TDM_OK;
    }
    if (!json_is_array(item) || json_array_size(item) != n)
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "cannot unpack into %zu loop variables", n);
    for (size_t k = 0; k < n; k++)
        tdm_jframe_set(f, names[k], jv_borrow(json_array_get(item, k)));
    return TDM_OK;
}

static tdm_status_t exec_for(jctx_t *c, const jnode_t *n)
{
    jv_t it = jv_undef();
    json_t *all = NULL, *items = NULL;
    tdm_status_t st;
    jframe_t *outer = c->top;

    TDM_TRY(tdm_jinja_eval(c, n->a, &it));
    c->line = n->line;
    TDM_CHECK_GOTO(iter_items(c, it, &all), st, out);
    if (n->d) { /* {% for x in xs if cond %}: filtered before loop.* counts */
        items = json_array();
        for (size_t i = 0; i < json_array_size(all); i++) {
            jframe_t f = {.parent = outer};
            jv_t keep = jv_undef();
            c->top = &f;
            st = bind_targets(c, &f, n->names, n->nnames, json_array_get(all, i));
            if (st == TDM_OK)
                st = tdm_jinja_eval(c, n->d, &keep);
            c->top = outer;
            tdm_jframe_clear(&f);
            if (st == TDM_OK && tdm_jv_truthy(keep))
                json_array_append(items, json_array_get(all, i));
            jv_free(&keep);
            TDM_CHECK_GOTO(st == TDM_OK ? tdm_jctx_work(c, 1) : st, st, out);
        }
    } else {
        items = json_incref(all);
    }
    size_t len = json_array_size(items);
    for (size_t i = 0; i < len; i++) {
        jframe_t f = {.parent = outer};
        json_t *loop = json_object();
        TDM_CHECK_GOTO(tdm_jctx_work(c, 1), st, iter_fail);
        json_object_set_new(loop, "index", json_integer((json_int_t)i + 1));
        json_object_set_new(loop, "index0", json_integer((json_int_t)i));
        json_object_set_new(loop, "revindex", json_integer((json_int_t)(len - i)));
        json_object_set_new(loop, "revindex0", json_integer((json_int_t)(len - i - 1)));
        json_object_set_new(loop, "first", json_boolean(i == 0));
        json_object_set_new(loop, "last", json_boolean(i + 1 == len));
        json_object_set_new(loop, "length", json_integer((json_int_t)len));
        if (i > 0)
            json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (i + 1 < len)
            json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        tdm_jframe_set(&f, "loop", jv_take(loop));
        c->top = &f;
        st = bind_targets(c, &f, n->names, n->nnames, json_array_get(items, i));
        if (st == TDM_OK)
            st = tdm_jinja_exec(c, n->b);
    iter_fail:
        c->top = outer;
        tdm_jframe_clear(&f);
        if (st != TDM_OK)
            goto out;
        if (c->brk == 1) {
            c->brk = 0;
            break;
        }
        c->brk = 0;
    }
    st = len == 0 && n->c ? tdm_jinja_exec(c, n->c) : TDM_OK;
out:
    c->top = outer;
    json_decref(all);
    json_decref(items);
    jv_free(&it);
    return st;
}

static tdm_status_t exec_set(jctx_t *c, const jnode_t *n)
{
    jv_t v = jv_undef();
    tdm_status_t st = TDM_OK;
    TDM_TRY(tdm_jinja_eval(c, n->a, &v));
    c->line = n->line;
    if (n->op == 1) { /* {% set ns.attr = v %} */
        jv_t ns = tdm_jinja_lookup(c, n->names[0]);
        if (ns.k != JV_NS)
            st = tdm_jctx_fail(c, TDM_ERR_INVAL, "cannot assign attribute on non-namespace '%s'",
                               n->names[0]);
        else
            json_object_set_new(ns.j, n->names[1], tdm_jv_to_json(v));
        jv_free(&ns);
        jv_free(&v);
        return st;
    }
    if (n->nnames == 1) {
        tdm_jframe_set(c->top, n->names[0], v);
        return TDM_OK;
    }
    if (!(v.k == JV_DATA && json_is_array(v.j) && json_array_size(v.j) == n->nnames))
        st = tdm_jctx_fail(c, TDM_ERR_INVAL, "cannot unpack into %zu names", n->nnames);
    for (size_t k = 0; st == TDM_OK && k < n->nnames; k++)
        tdm_jframe_set(c->top, n->names[k], jv_borrow(json_array_get(v.j, k)));
    jv_free(&v);
    return st;
}

tdm_status_t tdm_jinja_exec(jctx_t *c, const jnode_t *n)
{
    jv_t v = jv_undef();
    tdm_status_t st = TDM_OK;
    c->line = n->line;
    switch (n->kind) {
    case JN_BODY:
        for (size_t i = 0; i < n->nv && st == TDM_OK && !c->brk; i++)
            st = tdm_jinja_exec(c, n->v[i]);
        return st;
    case JN_TEXT:
        st = tdm_sbuf_add(c->out, n->s, n->slen);
        break;
    case JN_OUTPUT:
        TDM_TRY(tdm_jinja_eval(c, n->a, &v));
        st = tdm_jv_str(c->out, v);
        jv_free(&v);
        break;
    case JN_IF:
        TDM_TRY(tdm_jinja_eval(c, n->a, &v));
        st = tdm_jv_truthy(v) ? tdm_jinja_exec(c, n->b) : n->c ? tdm_jinja_exec(c, n->c) : TDM_OK;
        jv_free(&v);
        return st;
    case JN_FOR:
        return exec_for(c, n);
    case JN_SET:
        return exec_set(c, n);
    case JN_SETBLOCK:
        TDM_TRY(tdm_jinja_capture(c, n->b, &v));
        tdm_jframe_set(c->top, n->names[0], v);
        return TDM_OK;
    case JN_MACRO: {
        jv_t m = {JV_MACRO, NULL, n, 0};
        tdm_jframe_set(c->top, n->s, m);
        return TDM_OK;
    }
    case JN_CALLBLK: {
        const jnode_t *saved_body = c->caller_body;
        jframe_t *saved_frame = c->caller_frame;
        c->caller_body = n;
        c->caller_frame = c->top;
        st = tdm_jinja_eval(c, n->a, &v);
        c->caller_body = saved_body;
        c->caller_frame = saved_frame;
        if (st == TDM_OK)
            st = tdm_jv_str(c->out, v);
        jv_free(&v);
        break;
    }
    case JN_FILTERBLK: {
        jframe_t f = {.parent = c->top};
        TDM_TRY(tdm_jinja_capture(c, n->b, &v));
        tdm_jframe_set(&f, "__body__", v);
        c->top = &f;
        st = tdm_jinja_eval(c, n->a, &v);
        c->top = f.parent;
        tdm_jframe_clear(&f);
        if (st == TDM_OK)
            st = tdm_jv_str(c->out, v);
        jv_free(&v);
        return st;
    }
    case JN_BREAK:
    case JN_CONTINUE:
        c->brk = n->kind == JN_BREAK ? 1 : 2;
        return TDM_OK;
    default:
        return tdm_jctx_fail(c, TDM_ERR_STATE, "expression used as a statement");
    }
    if (st == TDM_ERR_OVERFLOW)
        st = tdm_jctx_fail(c, TDM_ERR_RANGE, "rendered text exceeds %zu bytes", c->lim.max_output);
    return st;
}

tdm_status_t tdm_jinja_render(const tdm_jinja_tpl_t *t, const json_t *vars,
                              const tdm_jinja_limits_t *lim, char **ret_text, size_t *ret_len,
                              char *err, size_t errlen)
{
    jframe_t root = {0};
    tdm_sbuf_t out = {0};
    jctx_t c = {
        .out = &out, .vars = vars, .top = &root, .root = &root, .err = err, .errlen = errlen};
    if (!t || !ret_text || (vars && !json_is_object(vars)))
        return TDM_ERR_INVAL;
    if (err && errlen)
        err[0] = '\0';
    if (lim)
        c.lim = *lim;
    if (!c.lim.max_output)
        c.lim.max_output = (size_t)16 << 20;
    if (!c.lim.max_iterations)
        c.lim.max_iterations = 1000000;
    if (!c.lim.max_depth)
        c.lim.max_depth = 64;
    out.cap_limit = c.lim.max_output;
    tdm_status_t st = tdm_jinja_exec(&c, t->root);
    tdm_jframe_clear(&root);
    if (st != TDM_OK) {
        tdm_sbuf_free(&out);
        return st;
    }
    if (!out.p)
        out.p = tdm_strdup("");
    *ret_text = out.p;
    if (ret_len)
        *ret_len = out.len;
    return TDM_OK;
}
