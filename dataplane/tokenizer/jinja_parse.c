/*
 * jinja_parse.c — tokens → syntax tree, by recursive descent in jinja2's precedence order
 * (lowest first): a if c else b, or, and, not, comparisons and in, + -, ~, * / // %, **,
 * unary - +, then a primary with its postfixes (.name, [index or slice], (call)) and its filter
 * and test chain (| name(args), is [not] name arg). Nesting is bounded (PARSE_MAX_DEPTH) so a
 * hostile template cannot overflow the stack.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>

#include "jinja_int.h"

jnode_t *tdm_jp_node(parser_t *P, jnode_kind_t k, int line)
{
    tdm_jinja_tpl_t *t = P->t;
    if (t->n_nodes == t->cap_nodes) {
        t->cap_nodes = t->cap_nodes ? t->cap_nodes * 2 : 64;
        t->nodes = tdm_realloc(t->nodes, t->cap_nodes * sizeof(*t->nodes));
    }
    jnode_t *n = tdm_calloc(1, sizeof(*n));
    n->kind = k;
    n->line = line;
    t->nodes[t->n_nodes++] = n;
    return n;
}

void tdm_jp_vpush(jnode_t *n, jnode_t *child, const char *name)
{
    n->v = tdm_realloc(n->v, (n->nv + 1) * sizeof(*n->v));
    n->v[n->nv++] = child;
    if (name || n->names) {
        n->names = tdm_realloc(n->names, n->nv * sizeof(*n->names));
        for (size_t k = n->nnames; k + 1 < n->nv; k++)
            n->names[k] = NULL;
        n->names[n->nv - 1] = name ? tdm_strdup(name) : NULL;
        n->nnames = n->nv;
    }
}

void tdm_jp_npush(jnode_t *n, const char *name)
{
    n->names = tdm_realloc(n->names, (n->nnames + 1) * sizeof(*n->names));
    n->names[n->nnames++] = tdm_strdup(name);
}

jtok_t *tdm_jp_cur(parser_t *P)
{
    return &P->tok[P->i < P->n ? P->i : P->n - 1];
}

jtok_t *tdm_jp_peek(parser_t *P, size_t ahead)
{
    size_t k = P->i + ahead;
    return &P->tok[k < P->n ? k : P->n - 1];
}

void *tdm_jp_fail(parser_t *P, const char *what)
{
    if (!P->failed) {
        jtok_t *t = tdm_jp_cur(P);
        snprintf(P->err ? P->err : (char[1]){0}, P->err ? P->errlen : 1, "line %d: %s (at '%s')",
                 t->line, what, t->kind == JT_EOF ? "end of template" : t->s);
    }
    P->failed = 1;
    return NULL;
}

int tdm_jp_is_op(parser_t *P, const char *op)
{
    jtok_t *t = tdm_jp_cur(P);
    return t->kind == JT_OP && strcmp(t->s, op) == 0;
}

int tdm_jp_is_name(parser_t *P, const char *name)
{
    jtok_t *t = tdm_jp_cur(P);
    return t->kind == JT_NAME && strcmp(t->s, name) == 0;
}

int tdm_jp_accept_op(parser_t *P, const char *op)
{
    if (!tdm_jp_is_op(P, op))
        return 0;
    P->i++;
    return 1;
}

int tdm_jp_accept_name(parser_t *P, const char *name)
{
    if (!tdm_jp_is_name(P, name))
        return 0;
    P->i++;
    return 1;
}

int tdm_jp_expect_op(parser_t *P, const char *op)
{
    if (tdm_jp_accept_op(P, op))
        return 1;
    char msg[64];
    snprintf(msg, sizeof(msg), "expected '%s'", op);
    tdm_jp_fail(P, msg);
    return 0;
}

const char *tdm_jp_expect_ident(parser_t *P)
{
    jtok_t *t = tdm_jp_cur(P);
    if (t->kind != JT_NAME)
        return tdm_jp_fail(P, "expected a name");
    P->i++;
    return t->s;
}

static jnode_t *parse_unary(parser_t *P, int with_filter);
static jnode_t *parse_primary(parser_t *P);
static jnode_t *parse_postfix(parser_t *P, jnode_t *n);

/* (args) after the '(' : positional and name=value. */
int tdm_jp_parse_args(parser_t *P, jnode_t *call)
{
    while (!P->failed && !tdm_jp_is_op(P, ")")) {
        const char *kw = NULL;
        if (tdm_jp_cur(P)->kind == JT_NAME && tdm_jp_peek(P, 1)->kind == JT_OP &&
            !strcmp(tdm_jp_peek(P, 1)->s, "=")) {
            kw = tdm_jp_cur(P)->s;
            P->i += 2;
        }
        jnode_t *a = tdm_jp_parse_expr(P, 1);
        if (!a)
            return 0;
        tdm_jp_vpush(call, a, kw);
        if (!tdm_jp_accept_op(P, ","))
            break;
    }
    return tdm_jp_expect_op(P, ")");
}

static jnode_t *parse_filter_expr(parser_t *P, jnode_t *n)
{
    while (n && !P->failed) {
        int line = tdm_jp_cur(P)->line;
        if (tdm_jp_accept_op(P, "|")) {
            const char *name = tdm_jp_expect_ident(P);
            if (!name)
                return NULL;
            jnode_t *f = tdm_jp_node(P, JN_FILTER, line);
            f->a = n;
            f->s = tdm_strdup(name);
            if (tdm_jp_accept_op(P, "(") && !tdm_jp_parse_args(P, f))
                return NULL;
            n = f;
        } else if (tdm_jp_accept_name(P, "is")) {
            jnode_t *t = tdm_jp_node(P, JN_TEST, line);
            t->op = tdm_jp_accept_name(P, "not");
            const char *name = tdm_jp_expect_ident(P);
            if (!name)
                return NULL;
            t->a = n;
            t->s = tdm_strdup(name);
            jtok_t *k = tdm_jp_cur(P);
            if (tdm_jp_accept_op(P, "(")) {
                if (!tdm_jp_parse_args(P, t))
                    return NULL;
            } else if ((k->kind == JT_NAME && strcmp(k->s, "else") && strcmp(k->s, "or") &&
                        strcmp(k->s, "and") && strcmp(k->s, "if") && strcmp(k->s, "in") &&
                        strcmp(k->s, "not") && strcmp(k->s, "is")) ||
                       k->kind == JT_STRING || k->kind == JT_INT || k->kind == JT_FLOAT ||
                       (k->kind == JT_OP && (!strcmp(k->s, "[") || !strcmp(k->s, "{")))) {
                jnode_t *arg = parse_postfix(P, parse_primary(P));
                if (!arg)
                    return NULL;
                tdm_jp_vpush(t, arg, NULL);
            }
            n = t;
        } else if (tdm_jp_accept_op(P, "(")) {
            jnode_t *c = tdm_jp_node(P, JN_CALL, line);
            c->a = n;
            if (!tdm_jp_parse_args(P, c))
                return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static jnode_t *parse_postfix(parser_t *P, jnode_t *n)
{
    while (n && !P->failed) {
        int line = tdm_jp_cur(P)->line;
        if (tdm_jp_accept_op(P, ".")) {
            jtok_t *t = tdm_jp_cur(P);
            if (t->kind == JT_INT) { /* x.0 is x[0] */
                jnode_t *it = tdm_jp_node(P, JN_ITEM, line), *lit = tdm_jp_node(P, JN_LIT, line);
                lit->lit = json_integer(t->i);
                it->a = n;
                it->b = lit;
                P->i++;
                n = it;
                continue;
            }
            const char *name = tdm_jp_expect_ident(P);
            if (!name)
                return NULL;
            jnode_t *a = tdm_jp_node(P, JN_ATTR, line);
            a->a = n;
            a->s = tdm_strdup(name);
            n = a;
        } else if (tdm_jp_accept_op(P, "[")) {
            jnode_t *parts[3] = {NULL, NULL, NULL};
            int k = 0, is_slice = 0;
            while (!P->failed) {
                if (!tdm_jp_is_op(P, ":") && !tdm_jp_is_op(P, "]")) {
                    parts[k] = tdm_jp_parse_expr(P, 1);
                    if (!parts[k])
                        return NULL;
                }
                if (tdm_jp_is_op(P, ":") && k < 2) {
                    P->i++;
                    is_slice = 1;
                    k++;
                    continue;
                }
                break;
            }
            if (!tdm_jp_expect_op(P, "]"))
                return NULL;
            if (!is_slice && !parts[0])
                return tdm_jp_fail(P, "empty subscript");
            jnode_t *s = tdm_jp_node(P, is_slice ? JN_SLICE : JN_ITEM, line);
            s->a = n;
            s->b = parts[0];
            s->c = parts[1];
            s->d = parts[2];
            n = s;
        } else if (tdm_jp_accept_op(P, "(")) {
            jnode_t *c = tdm_jp_node(P, JN_CALL, line);
            c->a = n;
            if (!tdm_jp_parse_args(P, c))
                return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static jnode_t *lit(parser_t *P, json_t *j, int line)
{
    jnode_t *n = tdm_jp_node(P, JN_LIT, line);
    n->lit = j;
    return n;
}

static jnode_t *parse_primary(parser_t *P)
{
    jtok_t *t = tdm_jp_cur(P);
    int line = t->line;
    if (P->failed)
        return NULL;
    if (t->kind == JT_NAME) {
        P->i++;
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
            return lit(P, json_true(), line);
        if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
            return lit(P, json_false(), line);
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
            return lit(P, json_null(), line);
        jnode_t *n = tdm_jp_node(P, JN_NAME, line);
        n->s = tdm_strdup(t->s);
        return n;
    }
    if (t->kind == JT_STRING) {
        tdm_sbuf_t b = {0};
        (void)tdm_sbuf_add(&b, "", 0);
        while (tdm_jp_cur(P)->kind == JT_STRING) { /* adjacent literals concatenate */
            (void)tdm_sbuf_add(&b, tdm_jp_cur(P)->s, tdm_jp_cur(P)->len);
            P->i++;
        }
        jnode_t *n = lit(P, json_stringn_nocheck(b.p, b.len), line);
        tdm_sbuf_free(&b);
        return n;
    }
    if (t->kind == JT_INT) {
        P->i++;
        return lit(P, json_integer(t->i), line);
    }
    if (t->kind == JT_FLOAT) {
        P->i++;
        return lit(P, json_real(t->f), line);
    }
    if (tdm_jp_accept_op(P, "(")) {
        if (tdm_jp_accept_op(P, ")"))
            return tdm_jp_node(P, JN_LIST, line);
        jnode_t *e = tdm_jp_parse_expr(P, 1);
        if (!e)
            return NULL;
        if (!tdm_jp_is_op(P, ","))
            return tdm_jp_expect_op(P, ")") ? e : NULL;
        jnode_t *l = tdm_jp_node(P, JN_LIST, line);
        tdm_jp_vpush(l, e, NULL);
        while (tdm_jp_accept_op(P, ",") && !tdm_jp_is_op(P, ")")) {
            if (!(e = tdm_jp_parse_expr(P, 1)))
                return NULL;
            tdm_jp_vpush(l, e, NULL);
        }
        return tdm_jp_expect_op(P, ")") ? l : NULL;
    }
    if (tdm_jp_accept_op(P, "[")) {
        jnode_t *l = tdm_jp_node(P, JN_LIST, line);
        while (!P->failed && !tdm_jp_is_op(P, "]")) {
            jnode_t *e = tdm_jp_parse_expr(P, 1);
            if (!e)
                return NULL;
            tdm_jp_vpush(l, e, NULL);
            if (!tdm_jp_accept_op(P, ","))
                break;
        }
        return tdm_jp_expect_op(P, "]") ? l : NULL;
    }
    if (tdm_jp_accept_op(P, "{")) {
        jnode_t *d = tdm_jp_node(P, JN_DICT, line);
        while (!P->failed && !tdm_jp_is_op(P, "}")) {
            jnode_t *k = tdm_jp_parse_expr(P, 1);
            if (!k || !tdm_jp_expect_op(P, ":"))
                return NULL;
            jnode_t *v = tdm_jp_parse_expr(P, 1);
            if (!v)
                return NULL;
            tdm_jp_vpush(d, k, NULL);
            tdm_jp_vpush(d, v, NULL);
            if (!tdm_jp_accept_op(P, ","))
                break;
        }
        return tdm_jp_expect_op(P, "}") ? d : NULL;
    }
    return tdm_jp_fail(P, "expected an expression");
}

static jnode_t *bin(parser_t *P, jnode_kind_t k, int op, jnode_t *a, jnode_t *b, int line)
{
    if (!a || !b)
        return NULL;
    jnode_t *n = tdm_jp_node(P, k, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode_t *parse_unary(parser_t *P, int with_filter)
{
    int line = tdm_jp_cur(P)->line;
    jnode_t *n;
    if (++P->depth > PARSE_MAX_DEPTH)
        return tdm_jp_fail(P, "expression nested too deeply");
    if (tdm_jp_is_op(P, "-") || tdm_jp_is_op(P, "+")) {
        int op = tdm_jp_cur(P)->s[0];
        P->i++;
        jnode_t *a = parse_unary(P, 0);
        if (!a)
            return NULL;
        n = tdm_jp_node(P, JN_UNARY, line);
        n->op = op;
        n->a = a;
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter)
        n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode_t *parse_pow(parser_t *P)
{
    jnode_t *n = parse_unary(P, 1);
    while (n && tdm_jp_is_op(P, "**")) {
        int line = tdm_jp_cur(P)->line;
        P->i++;
        n = bin(P, JN_BIN, JOP_POW, n, parse_unary(P, 1), line);
    }
    return n;
}

static jnode_t *parse_math2(parser_t *P)
{
    jnode_t *n = parse_pow(P);
    for (;;) {
        int op = tdm_jp_is_op(P, "*")    ? JOP_MUL
                 : tdm_jp_is_op(P, "/")  ? JOP_DIV
                 : tdm_jp_is_op(P, "//") ? JOP_FLOORDIV
                 : tdm_jp_is_op(P, "%")  ? JOP_MOD
                                         : 0;
        if (!n || !op)
            return n;
        int line = tdm_jp_cur(P)->line;
        P->i++;
        n = bin(P, JN_BIN, op, n, parse_pow(P), line);
    }
}

static jnode_t *parse_concat(parser_t *P)
{
    jnode_t *n = parse_math2(P);
    while (n && tdm_jp_is_op(P, "~")) {
        int line = tdm_jp_cur(P)->line;
        P->i++;
        n = bin(P, JN_BIN, JOP_CONCAT, n, parse_math2(P), line);
    }
    return n;
}

static jnode_t *parse_math1(parser_t *P)
{
    jnode_t *n = parse_concat(P);
    while (n && (tdm_jp_is_op(P, "+") || tdm_jp_is_op(P, "-"))) {
        int line = tdm_jp_cur(P)->line, op = tdm_jp_cur(P)->s[0] == '+' ? JOP_ADD : JOP_SUB;
        P->i++;
        n = bin(P, JN_BIN, op, n, parse_concat(P), line);
    }
    return n;
}

static jnode_t *parse_compare(parser_t *P)
{
    jnode_t *n = parse_math1(P), *prev = n;
    jnode_t *chain = NULL;
    for (;;) {
        int line = tdm_jp_cur(P)->line, op = 0;
        if (tdm_jp_is_op(P, "=="))
            op = JOP_EQ;
        else if (tdm_jp_is_op(P, "!="))
            op = JOP_NE;
        else if (tdm_jp_is_op(P, "<"))
            op = JOP_LT;
        else if (tdm_jp_is_op(P, "<="))
            op = JOP_LE;
        else if (tdm_jp_is_op(P, ">"))
            op = JOP_GT;
        else if (tdm_jp_is_op(P, ">="))
            op = JOP_GE;
        else if (tdm_jp_is_name(P, "in"))
            op = JOP_IN;
        else if (tdm_jp_is_name(P, "not") && tdm_jp_peek(P, 1)->kind == JT_NAME &&
                 !strcmp(tdm_jp_peek(P, 1)->s, "in"))
            op = JOP_NOTIN, P->i++;
        if (!prev || !op)
            return chain ? chain : prev;
        P->i++;
        jnode_t *rhs = parse_math1(P);
        jnode_t *cmp = bin(P, JN_BIN, op, prev, rhs, line);
        if (!cmp)
            return NULL;
        /* a < b < c is (a < b) and (b < c), as in Python */
        chain = chain ? bin(P, JN_AND, 0, chain, cmp, line) : cmp;
        prev = rhs;
    }
}

static jnode_t *parse_not(parser_t *P)
{
    int line = tdm_jp_cur(P)->line;
    if (tdm_jp_accept_name(P, "not")) {
        if (++P->depth > PARSE_MAX_DEPTH)
            return tdm_jp_fail(P, "expression nested too deeply");
        jnode_t *a = parse_not(P);
        P->depth--;
        if (!a)
            return NULL;
        jnode_t *n = tdm_jp_node(P, JN_UNARY, line);
        n->op = 'n';
        n->a = a;
        return n;
    }
    return parse_compare(P);
}

static jnode_t *parse_and(parser_t *P)
{
    jnode_t *n = parse_not(P);
    while (n && tdm_jp_is_name(P, "and")) {
        int line = tdm_jp_cur(P)->line;
        P->i++;
        n = bin(P, JN_AND, 0, n, parse_not(P), line);
    }
    return n;
}

jnode_t *tdm_jp_parse_or(parser_t *P)
{
    jnode_t *n = parse_and(P);
    while (n && tdm_jp_is_name(P, "or")) {
        int line = tdm_jp_cur(P)->line;
        P->i++;
        n = bin(P, JN_OR, 0, n, parse_and(P), line);
    }
    return n;
}

jnode_t *tdm_jp_parse_expr(parser_t *P, int with_cond)
{
    if (++P->depth > PARSE_MAX_DEPTH)
        return tdm_jp_fail(P, "expression nested too deeply");
    jnode_t *n = tdm_jp_parse_or(P);
    while (n && with_cond && tdm_jp_is_name(P, "if")) {
        int line = tdm_jp_cur(P)->line;
        P->i++;
        jnode_t *c = tdm_jp_node(P, JN_COND, line);
        c->b = n;
        if (!(c->a = tdm_jp_parse_or(P)))
            return NULL;
        if (tdm_jp_accept_name(P, "else") && !(c->c = tdm_jp_parse_expr(P, 1)))
            return NULL;
        n = c;
    }
    P->depth--;
    return n;
}
