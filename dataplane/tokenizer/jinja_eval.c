/*
 * jinja_eval.c — the tree-walking evaluator and tdm_jinja_render().
 *
 * Scoping follows jinja2: `set` binds in the innermost scope; each loop iteration has a fresh
 * scope (so a `set` inside a loop neither leaks out nor survives to the next iteration — the
 * reason templates use namespace()); macros run in a scope whose parent is the template's
 * top-level one. Lookups fall back to the render variables, then the built-in globals, then
 * undefined. Every loop iteration and macro call counts against the work limit, and output
 * (including what macros and {% set %} blocks capture) against the output limit.
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>

#include "jinja_int.h"

tdm_status_t tdm_jctx_fail(jctx_t *c, tdm_status_t st, const char *fmt, ...)
{
    if (c->err && c->errlen && !c->err[0]) {
        va_list ap;
        int k = snprintf(c->err, c->errlen, "line %d: ", c->line);
        va_start(ap, fmt);
        if (k >= 0 && (size_t)k < c->errlen)
            vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return st;
}

tdm_status_t tdm_jctx_work(jctx_t *c, uint64_t n)
{
    c->work += n;
    if (c->work > c->lim.max_iterations)
        return tdm_jctx_fail(c, TDM_ERR_RANGE, "template work limit (%llu steps) exceeded",
                             (unsigned long long)c->lim.max_iterations);
    return TDM_OK;
}

jv_t tdm_jinja_lookup(jctx_t *c, const char *name)
{
    for (jframe_t *f = c->top; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->names[i], name))
                return jv_copy(f->vals[i]);
    const json_t *v = json_object_get(c->vars, name);
    if (v)
        return jv_borrow(v);
    static const struct {
        const char *name;
        int func;
    } g[] = {{"raise_exception", JF_RAISE},
             {"strftime_now", JF_STRFTIME},
             {"namespace", JF_NAMESPACE},
             {"range", JF_RANGE},
             {"dict", JF_DICT},
             {"caller", JF_CALLER}};
    for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++)
        if (!strcmp(g[i].name, name) && (g[i].func != JF_CALLER || c->caller_body)) {
            jv_t r = {JV_FUNC, NULL, NULL, g[i].func};
            return r;
        }
    return jv_undef();
}

static tdm_status_t eval_args(jctx_t *c, const jnode_t *n, jv_t **ret)
{
    jv_t *a = tdm_calloc(n->nv ? n->nv : 1, sizeof(*a));
    for (size_t i = 0; i < n->nv; i++) {
        tdm_status_t st = tdm_jinja_eval(c, n->v[i], &a[i]);
        if (st != TDM_OK) {
            for (size_t k = 0; k < i; k++)
                jv_free(&a[k]);
            tdm_free(a);
            return st;
        }
    }
    *ret = a;
    return TDM_OK;
}

static void free_args(jv_t *a, size_t n)
{
    for (size_t i = 0; a && i < n; i++)
        jv_free(&a[i]);
    tdm_free(a);
}

tdm_status_t tdm_jinja_call_macro(jctx_t *c, jv_t fn, jv_t *args, size_t nargs, char **kwnames,
                                  jv_t *ret)
{
    const jnode_t *m = fn.macro;
    jframe_t f = {.parent = c->root}, *saved_top = c->top;
    tdm_status_t st = TDM_OK;
    size_t npos = 0;

    if (c->depth >= c->lim.max_depth)
        return tdm_jctx_fail(c, TDM_ERR_RANGE, "macro calls nested deeper than %u",
                             c->lim.max_depth);
    TDM_TRY(tdm_jctx_work(c, 1));
    while (npos < nargs && !(kwnames && kwnames[npos]))
        npos++;
    if (npos > m->nnames)
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "macro '%s' takes %zu arguments, %zu given", m->s,
                             m->nnames, npos);
    c->top = &f;
    c->depth++;
    for (size_t p = 0; p < m->nnames && st == TDM_OK; p++) {
        jv_t v = jv_undef();
        int have = 0;
        if (p < npos) {
            v = jv_copy(args[p]);
            have = 1;
        }
        for (size_t k = npos; k < nargs && !have; k++)
            if (kwnames[k] && !strcmp(kwnames[k], m->names[p])) {
                v = jv_copy(args[k]);
                have = 1;
            }
        if (!have && m->v[p])
            st = tdm_jinja_eval(c, m->v[p], &v);
        tdm_jframe_set(&f, m->names[p], v);
    }
    for (size_t k = npos; k < nargs && st == TDM_OK; k++) {
        int known = 0;
        for (size_t p = 0; p < m->nnames; p++)
            known |= !strcmp(kwnames[k], m->names[p]);
        if (!known)
            st = tdm_jctx_fail(c, TDM_ERR_INVAL, "macro '%s' has no argument '%s'", m->s,
                               kwnames[k]);
    }
    if (st == TDM_OK)
        st = tdm_jinja_capture(c, m->b, ret);
    c->depth--;
    c->top = saved_top;
    tdm_jframe_clear(&f);
    return st;
}

static tdm_status_t call_caller(jctx_t *c, jv_t *args, size_t nargs, jv_t *ret)
{
    const jnode_t *blk = c->caller_body;
    jframe_t f = {.parent = c->caller_frame}, *saved_top = c->top;
    if (c->depth >= c->lim.max_depth)
        return tdm_jctx_fail(c, TDM_ERR_RANGE, "caller() nested deeper than %u", c->lim.max_depth);
    for (size_t p = 0; p < blk->nnames; p++)
        tdm_jframe_set(&f, blk->names[p], p < nargs ? jv_copy(args[p]) : jv_undef());
    c->top = &f;
    c->caller_body = NULL;
    c->depth++;
    tdm_status_t st = tdm_jinja_capture(c, blk->b, ret);
    c->depth--;
    c->caller_body = blk;
    c->top = saved_top;
    tdm_jframe_clear(&f);
    return st;
}

static tdm_status_t eval_call(jctx_t *c, const jnode_t *n, jv_t *ret)
{
    jv_t *args = NULL, fn = jv_undef(), self = jv_undef();
    tdm_status_t st;

    TDM_TRY(eval_args(c, n, &args));
    if (n->a->kind == JN_ATTR) { /* obj.method(args) */
        TDM_CHECK_GOTO(tdm_jinja_eval(c, n->a->a, &self), st, out);
        if (self.k == JV_UNDEF) {
            st = tdm_jctx_fail(c, TDM_ERR_INVAL, "'%s' called on an undefined value", n->a->s);
            goto out;
        }
        c->line = n->line;
        st = tdm_jinja_method(c, self, n->a->s, args, n->names, n->nv, ret);
        if (st != TDM_ERR_NOTFOUND)
            goto out;
        const json_t *member = self.k == JV_NS || (self.k == JV_DATA && json_is_object(self.j))
                                   ? json_object_get(self.j, n->a->s)
                                   : NULL;
        if (!member) {
            st = tdm_jctx_fail(c, TDM_ERR_INVAL, "'%s' object has no method '%s'",
                               tdm_jv_type_name(self), n->a->s);
            goto out;
        }
        fn = jv_borrow(member);
    } else {
        TDM_CHECK_GOTO(tdm_jinja_eval(c, n->a, &fn), st, out);
    }
    c->line = n->line;
    if (fn.k == JV_MACRO)
        st = tdm_jinja_call_macro(c, fn, args, n->nv, n->names, ret);
    else if (fn.k == JV_FUNC && fn.func == JF_CALLER)
        st = call_caller(c, args, n->nv, ret);
    else if (fn.k == JV_FUNC)
        st = tdm_jinja_global_call(c, fn.func, args, n->names, n->nv, ret);
    else
        st = tdm_jctx_fail(c, TDM_ERR_INVAL, "'%s' object is not callable", tdm_jv_type_name(fn));
out:
    jv_free(&fn);
    jv_free(&self);
    free_args(args, n->nv);
    return st;
}

static int64_t py_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static tdm_status_t arith(jctx_t *c, int op, jv_t a, jv_t b, jv_t *ret)
{
    const json_t *x = a.j, *y = b.j;
    int nums = a.k == JV_DATA && b.k == JV_DATA && (json_is_number(x) || json_is_boolean(x)) &&
               (json_is_number(y) || json_is_boolean(y));
    if (nums) {
        int ints = !json_is_real(x) && !json_is_real(y);
        int64_t i = json_is_integer(x) ? json_integer_value(x) : json_is_true(x);
        int64_t k = json_is_integer(y) ? json_integer_value(y) : json_is_true(y);
        double f = json_is_real(x) ? json_real_value(x) : (double)i;
        double g = json_is_real(y) ? json_real_value(y) : (double)k;
        int64_t r;
        switch (op) {
        case JOP_ADD:
            if (ints && !__builtin_add_overflow(i, k, &r))
                return *ret = jv_take(json_integer(r)), TDM_OK;
            return *ret = jv_take(json_real(f + g)), TDM_OK;
        case JOP_SUB:
            if (ints && !__builtin_sub_overflow(i, k, &r))
                return *ret = jv_take(json_integer(r)), TDM_OK;
            return *ret = jv_take(json_real(f - g)), TDM_OK;
        case JOP_MUL:
            if (ints && !__builtin_mul_overflow(i, k, &r))
                return *ret = jv_take(json_integer(r)), TDM_OK;
            return *ret = jv_take(json_real(f * g)), TDM_OK;
        case JOP_DIV:
            if (g == 0)
                return tdm_jctx_fail(c, TDM_ERR_INVAL, "division by zero");
            return *ret = jv_take(json_real(f / g)), TDM_OK;
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (g == 0)
                return tdm_jctx_fail(c, TDM_ERR_INVAL, "integer division or modulo by zero");
            if (ints && !(i == INT64_MIN && k == -1)) {
                int64_t q = py_floordiv(i, k);
                return *ret = jv_take(json_integer(op == JOP_MOD ? i - q * k : q)), TDM_OK;
            }
            if (op == JOP_FLOORDIV)
                return *ret = jv_take(json_real(floor(f / g))), TDM_OK;
            return *ret = jv_take(json_real(f - floor(f / g) * g)), TDM_OK;
        case JOP_POW:
            if (ints && k >= 0) {
                int64_t acc = 1;
                int ovf = 0;
                for (int64_t e = 0; e < k && !ovf; e++)
                    ovf = __builtin_mul_overflow(acc, i, &acc) || e > 64;
                if (!ovf)
                    return *ret = jv_take(json_integer(acc)), TDM_OK;
            }
            return *ret = jv_take(json_real(pow(f, g))), TDM_OK;
        }
    }
    if (a.k == JV_DATA && b.k == JV_DATA && op == JOP_ADD && json_is_string(x) &&
        json_is_string(y)) {
        tdm_sbuf_t s = {.cap_limit = c->lim.max_output};
        if (tdm_sbuf_add(&s, json_string_value(x), json_string_length(x)) != TDM_OK ||
            tdm_sbuf_add(&s, json_string_value(y), json_string_length(y)) != TDM_OK) {
            tdm_sbuf_free(&s);
            return tdm_jctx_fail(c, TDM_ERR_RANGE, "string larger than the output limit");
        }
        *ret = jv_take(json_stringn_nocheck(s.p, s.len));
        tdm_sbuf_free(&s);
        return TDM_OK;
    }
    if (a.k == JV_DATA && b.k == JV_DATA && op == JOP_ADD && json_is_array(x) && json_is_array(y)) {
        json_t *l = json_copy((json_t *)x);
        json_array_extend(l, (json_t *)y);
        *ret = jv_take(l);
        return TDM_OK;
    }
    if (a.k == JV_DATA && b.k == JV_DATA && op == JOP_MUL &&
        (json_is_string(x) || json_is_array(x)) && json_is_integer(y)) {
        int64_t k = json_integer_value(y);
        size_t unit = json_is_string(x) ? json_string_length(x) : json_array_size(x) * 16;
        if (k > 0 && unit && (uint64_t)k > c->lim.max_output / unit)
            return tdm_jctx_fail(c, TDM_ERR_RANGE, "repetition larger than the output limit");
        if (json_is_string(x)) {
            tdm_sbuf_t s = {0};
            (void)tdm_sbuf_add(&s, "", 0);
            for (int64_t i = 0; i < k; i++)
                (void)tdm_sbuf_add(&s, json_string_value(x), json_string_length(x));
            *ret = jv_take(json_stringn_nocheck(s.p, s.len));
            tdm_sbuf_free(&s);
        } else {
            json_t *l = json_array();
            for (int64_t i = 0; i < k; i++)
                json_array_extend(l, (json_t *)x);
            *ret = jv_take(l);
        }
        return TDM_OK;
    }
    static const char *const opn[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    return tdm_jctx_fail(c, TDM_ERR_INVAL, "unsupported operand types for %s: '%s' and '%s'",
                         op < (int)(sizeof(opn) / sizeof(opn[0])) ? opn[op] : "?",
                         tdm_jv_type_name(a), tdm_jv_type_name(b));
}

static tdm_status_t contains(jctx_t *c, jv_t item, jv_t seq, int *ret)
{
    if (seq.k == JV_UNDEF) {
        *ret = 0;
        return TDM_OK;
    }
    if (seq.k == JV_DATA && json_is_string(seq.j)) {
        if (!jv_is_str(item))
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "'in <string>' requires string as left operand");
        const char *h = json_string_value(seq.j), *nd = json_string_value(item.j);
        size_t hl = json_string_length(seq.j), nl = json_string_length(item.j);
        *ret = nl == 0 || (nl <= hl && memmem(h, hl, nd, nl) != NULL);
        return TDM_OK;
    }
    if (seq.k == JV_DATA && json_is_array(seq.j)) {
        *ret = 0;
        for (size_t i = 0; i < json_array_size(seq.j) && !*ret; i++)
            *ret = tdm_jv_equal(item, jv_take(json_array_get(seq.j, i)));
        return TDM_OK;
    }
    if ((seq.k == JV_DATA && json_is_object(seq.j)) || seq.k == JV_NS) {
        *ret = jv_is_str(item) && json_object_get(seq.j, json_string_value(item.j)) != NULL;
        return TDM_OK;
    }
    return tdm_jctx_fail(c, TDM_ERR_INVAL, "argument of type '%s' is not iterable",
                         tdm_jv_type_name(seq));
}

static tdm_status_t eval_bin(jctx_t *c, const jnode_t *n, jv_t *ret)
{
    jv_t a = jv_undef(), b = jv_undef();
    tdm_status_t st;
    int r = 0;

    TDM_CHECK_GOTO(tdm_jinja_eval(c, n->a, &a), st, out);
    TDM_CHECK_GOTO(tdm_jinja_eval(c, n->b, &b), st, out);
    c->line = n->line;
    switch (n->op) {
    case JOP_CONCAT: {
        tdm_sbuf_t s = {.cap_limit = c->lim.max_output};
        st = tdm_jv_str(&s, a);
        if (st == TDM_OK)
            st = tdm_jv_str(&s, b);
        if (st == TDM_OK)
            *ret = jv_take(json_stringn_nocheck(s.p ? s.p : "", s.len));
        else
            st = tdm_jctx_fail(c, TDM_ERR_RANGE, "string larger than the output limit");
        tdm_sbuf_free(&s);
        goto out;
    }
    case JOP_EQ:
    case JOP_NE:
        r = tdm_jv_equal(a, b) == (n->op == JOP_EQ);
        break;
    case JOP_LT:
    case JOP_LE:
    case JOP_GT:
    case JOP_GE: {
        int cmp = tdm_jv_compare(a, b, &st);
        if (st != TDM_OK) {
            st = tdm_jctx_fail(c, TDM_ERR_INVAL, "'<' not supported between '%s' and '%s'",
                               tdm_jv_type_name(a), tdm_jv_type_name(b));
            goto out;
        }
        r = n->op == JOP_LT   ? cmp < 0
            : n->op == JOP_LE ? cmp <= 0
            : n->op == JOP_GT ? cmp > 0
                              : cmp >= 0;
        break;
    }
    case JOP_IN:
    case JOP_NOTIN:
        TDM_CHECK_GOTO(contains(c, a, b, &r), st, out);
        r = r == (n->op == JOP_IN);
        break;
    default:
        st = arith(c, n->op, a, b, ret);
        goto out;
    }
    *ret = jv_take(json_boolean(r));
    st = TDM_OK;
out:
    jv_free(&a);
    jv_free(&b);
    return st;
}

/* Python slice of a list or string. */
static tdm_status_t eval_slice(jctx_t *c, const jnode_t *n, jv_t obj, jv_t *ret)
{
    int64_t idx[3] = {0, 0, 1};
    int have[3] = {0, 0, 0};
    const jnode_t *parts[3] = {n->b, n->c, n->d};
    for (int k = 0; k < 3; k++) {
        jv_t v = jv_undef();
        if (!parts[k])
            continue;
        TDM_TRY(tdm_jinja_eval(c, parts[k], &v));
        if (v.k == JV_DATA && json_is_integer(v.j)) {
            idx[k] = json_integer_value(v.j);
            have[k] = 1;
        } else if (!(v.k == JV_UNDEF || json_is_null(v.j))) {
            jv_free(&v);
            return tdm_jctx_fail(c, TDM_ERR_INVAL, "slice indices must be integers");
        }
        jv_free(&v);
    }
    if (idx[2] == 0)
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "slice step cannot be zero");
    int is_str = jv_is_str(obj);
    if (!is_str && !(obj.k == JV_DATA && json_is_array(obj.j)))
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "'%s' object is not subscriptable",
                             tdm_jv_type_name(obj));
    const char *s = is_str ? json_string_value(obj.j) : NULL;
    size_t slen = is_str ? json_string_length(obj.j) : 0;
    int64_t len = is_str ? (int64_t)tdm_jv_utf8_count(s, slen) : (int64_t)json_array_size(obj.j);
    int64_t step = idx[2], lo, hi;
    if (step > 0) {
        lo = have[0] ? (idx[0] < 0 ? idx[0] + len : idx[0]) : 0;
        hi = have[1] ? (idx[1] < 0 ? idx[1] + len : idx[1]) : len;
        lo = lo < 0 ? 0 : lo > len ? len : lo;
        hi = hi < 0 ? 0 : hi > len ? len : hi;
    } else {
        lo = have[0] ? (idx[0] < 0 ? idx[0] + len : idx[0]) : len - 1;
        hi = have[1] ? (idx[1] < 0 ? idx[1] + len : idx[1]) : -1;
        lo = lo < -1 ? -1 : lo >= len ? len - 1 : lo;
        hi = hi < -1 ? -1 : hi >= len ? len - 1 : hi;
    }
    TDM_TRY(tdm_jctx_work(c, (uint64_t)len / 64));
    if (is_str) {
        tdm_sbuf_t b = {0};
        size_t *offs = tdm_malloc(((size_t)len + 1) * sizeof(*offs));
        size_t k = 0;
        for (size_t i = 0; i < slen; i++)
            if (((unsigned char)s[i] & 0xc0) != 0x80)
                offs[k++] = i;
        offs[k] = slen;
        (void)tdm_sbuf_add(&b, "", 0);
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
            (void)tdm_sbuf_add(&b, s + offs[i], offs[i + 1] - offs[i]);
        tdm_free(offs);
        *ret = jv_take(json_stringn_nocheck(b.p, b.len));
        tdm_sbuf_free(&b);
    } else {
        json_t *l = json_array();
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
            json_array_append(l, json_array_get(obj.j, (size_t)i));
        *ret = jv_take(l);
    }
    return TDM_OK;
}

static tdm_status_t eval_item(jctx_t *c, jv_t obj, jv_t key, const char *attr, jv_t *ret)
{
    if (obj.k == JV_UNDEF)
        return tdm_jctx_fail(c, TDM_ERR_INVAL, "'%s' of an undefined value",
                             attr             ? attr
                             : jv_is_str(key) ? json_string_value(key.j)
                                              : "[...]");
    if ((obj.k == JV_DATA && json_is_object(obj.j)) || obj.k == JV_NS) {
        const json_t *v = attr             ? json_object_get(obj.j, attr)
                          : jv_is_str(key) ? json_object_get(obj.j, json_string_value(key.j))
                                           : NULL;
        *ret = v ? jv_borrow(v) : jv_undef();
        return TDM_OK;
    }
    if (!attr && key.k == JV_DATA && json_is_integer(key.j) &&
        (json_is_array(obj.j) || json_is_string(obj.j))) {
        int64_t i = json_integer_value(key.j);
        int is_str = json_is_string(obj.j);
        const char *s = is_str ? json_string_value(obj.j) : NULL;
        size_t sl = is_str ? json_string_length(obj.j) : 0;
        int64_t len = is_str ? (int64_t)tdm_jv_utf8_count(s, sl) : (int64_t)json_array_size(obj.j);
        if (i < 0)
            i += len;
        if (i < 0 || i >= len) {
            *ret = jv_undef();
            return TDM_OK;
        }
        if (!is_str) {
            *ret = jv_borrow(json_array_get(obj.j, (size_t)i));
            return TDM_OK;
        }
        size_t a = tdm_jv_utf8_offset(s, sl, (size_t)i), l;
        tdm_py_utf8_decode(s, sl, a, &l);
        *ret = jv_take(json_stringn_nocheck(s + a, l));
        return TDM_OK;
    }
    *ret = jv_undef(); /* jinja2: a missing attribute or item is undefined, not an error */
    return TDM_OK;
}

tdm_status_t tdm_jinja_eval(jctx_t *c, const jnode_t *n, jv_t *ret)
{
    jv_t a = jv_undef(), b = jv_undef();
    tdm_status_t st = TDM_OK;
    c->line = n->line;
    switch (n->kind) {
    case JN_LIT:
        *ret = jv_borrow(n->lit);
        return TDM_OK;
    case JN_NAME:
        *ret = tdm_jinja_lookup(c, n->s);
        return TDM_OK;
    case JN_LIST: {
        json_t *l = json_array();
        for (size_t i = 0; i < n->nv && st == TDM_OK; i++) {
            if ((st = tdm_jinja_eval(c, n->v[i], &a)) == TDM_OK)
                json_array_append_new(l, tdm_jv_to_json(a));
            jv_free(&a);
        }
        *ret = jv_take(l);
        if (st != TDM_OK)
            jv_free(ret);
        return st;
    }
    case JN_DICT: {
        json_t *d = json_object();
        for (size_t i = 0; i + 1 < n->nv && st == TDM_OK; i += 2) {
            TDM_CHECK_GOTO(tdm_jinja_eval(c, n->v[i], &a), st, dict_out);
            TDM_CHECK_GOTO(tdm_jinja_eval(c, n->v[i + 1], &b), st, dict_out);
            if (!jv_is_str(a)) {
                st = tdm_jctx_fail(c, TDM_ERR_INVAL, "dict keys must be strings");
                goto dict_out;
            }
            json_object_setn_new_nocheck(d, json_string_value(a.j), json_string_length(a.j),
                                         tdm_jv_to_json(b));
        dict_out:
            jv_free(&a);
            jv_free(&b);
        }
        *ret = jv_take(d);
        if (st != TDM_OK)
            jv_free(ret);
        return st;
    }
    case JN_ATTR:
        TDM_TRY(tdm_jinja_eval(c, n->a, &a));
        c->line = n->line;
        st = eval_item(c, a, jv_undef(), n->s, ret);
        jv_free(&a);
        return st;
    case JN_ITEM:
        TDM_TRY(tdm_jinja_eval(c, n->a, &a));
        if ((st = tdm_jinja_eval(c, n->b, &b)) == TDM_OK) {
            c->line = n->line;
            st = eval_item(c, a, b, NULL, ret);
        }
        jv_free(&a);
        jv_free(&b);
        return st;
    case JN_SLICE:
        TDM_TRY(tdm_jinja_eval(c, n->a, &a));
        st = eval_slice(c, n, a, ret);
        jv_free(&a);
        return st;
    case JN_CALL:
        return eval_call(c, n, ret);
    case JN_FILTER: {
        jv_t *args = NULL;
        TDM_TRY(tdm_jinja_eval(c, n->a, &a));
        if ((st = eval_args(c, n, &args)) == TDM_OK) {
            c->line = n->line;
            st = tdm_jinja_filter(c, n->s, a, args, n->names, n->nv, ret);
            free_args(args, n->nv);
        }
        jv_free(&a);
        return st;
    }
    case JN_TEST: {
        jv_t *args = NULL;
        int r = 0;
        TDM_TRY(tdm_jinja_eval(c, n->a, &a));
        if ((st = eval_args(c, n, &args)) == TDM_OK) {
            c->line = n->line;
            st = tdm_jinja_test(c, n->s, a, args, n->nv, &r);
            free_args(args, n->nv);
        }
        jv_free(&a);
        if (st == TDM_OK)
            *ret = jv_take(json_boolean(n->op ? !r : r));
        return st;
    }
    case JN_UNARY:
        TDM_TRY(tdm_jinja_eval(c, n->a, &a));
        if (n->op == 'n') {
            *ret = jv_take(json_boolean(!tdm_jv_truthy(a)));
        } else if (a.k == JV_DATA && json_is_integer(a.j)) {
            int64_t v = json_integer_value(a.j);
            *ret = jv_take(json_integer(n->op == '-' && v != INT64_MIN ? -v : v));
        } else if (a.k == JV_DATA && (json_is_real(a.j) || json_is_boolean(a.j))) {
            double v = json_is_real(a.j) ? json_real_value(a.j) : json_is_true(a.j);
            *ret = json_is_real(a.j) ? jv_take(json_real(n->op == '-' ? -v : v))
                                     : jv_take(json_integer(n->op == '-' ? -(int)v : (int)v));
        } else {
            st = tdm_jctx_fail(c, TDM_ERR_INVAL, "bad operand type for unary %c: '%s'", n->op,
                               tdm_jv_type_name(a));
        }
        jv_free(&a);
        return st;
    case JN_BIN:
        return eval_bin(c, n, ret);
    case JN_AND:
    case JN_OR:
        TDM_TRY(tdm_jinja_eval(c, n->a, &a));
        if (tdm_jv_truthy(a) == (n->kind == JN_OR)) {
            *ret = a;
            return TDM_OK;
        }
        jv_free(&a);
        return tdm_jinja_eval(c, n->b, ret);
    case JN_COND:
        TDM_TRY(tdm_jinja_eval(c, n->a, &a));
        st = tdm_jv_truthy(a) ? tdm_jinja_eval(c, n->b, ret)
             : n->c           ? tdm_jinja_eval(c, n->c, ret)
                              : (*ret = jv_undef(), TDM_OK);
        jv_free(&a);
        return st;
    default:
        return tdm_jctx_fail(c, TDM_ERR_STATE, "statement used as an expression");
    }
}
