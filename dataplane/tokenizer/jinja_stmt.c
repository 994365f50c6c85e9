/*
 * jinja_stmt.c — statements of the template ({% if %}, {% for %}, {% set %}, {% macro %},
 * {% call %}, {% filter %}, {% break %}, {% continue %}, {% generation %}) over the expression
 * parser of jinja_parse.c, and the public parse/free entry points.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>

#include "jinja_int.h"

/* ---- statements ---- */

static jnode_t *parse_body(parser_t *P, const char *const *ends);

static int block_end(parser_t *P)
{
    return tdm_jp_cur(P)->kind == JT_BLOCK_END ? (P->i++, 1) : (tdm_jp_fail(P, "expected '%}'"), 0);
}

static int end_tag(parser_t *P, const char *name)
{
    if (!tdm_jp_accept_name(P, name)) {
        char msg[64];
        snprintf(msg, sizeof(msg), "expected '%s'", name);
        tdm_jp_fail(P, msg);
        return 0;
    }
    return block_end(P);
}

static jnode_t *parse_if(parser_t *P, int line)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode_t *n = tdm_jp_node(P, JN_IF, line);
    if (!(n->a = tdm_jp_parse_expr(P, 1)) || !block_end(P) || !(n->b = parse_body(P, ends)))
        return NULL;
    int l2 = tdm_jp_cur(P)->line;
    if (tdm_jp_accept_name(P, "elif")) {
        n->c = parse_if(P, l2);
        return n->c ? n : NULL;
    }
    if (tdm_jp_accept_name(P, "else")) {
        static const char *const ends2[] = {"endif", NULL};
        if (!block_end(P) || !(n->c = parse_body(P, ends2)))
            return NULL;
    }
    return end_tag(P, "endif") ? n : NULL;
}

static jnode_t *parse_for(parser_t *P, int line)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    jnode_t *n = tdm_jp_node(P, JN_FOR, line);
    do {
        const char *name = tdm_jp_expect_ident(P);
        if (!name)
            return NULL;
        tdm_jp_npush(n, name);
    } while (tdm_jp_accept_op(P, ","));
    if (!tdm_jp_accept_name(P, "in"))
        return tdm_jp_fail(P, "expected 'in'");
    if (!(n->a = tdm_jp_parse_or(P)))
        return NULL;
    if (tdm_jp_accept_name(P, "if") && !(n->d = tdm_jp_parse_or(P)))
        return NULL;
    if (tdm_jp_accept_name(P, "recursive"))
        return tdm_jp_fail(P, "recursive loops are not supported");
    if (!block_end(P) || !(n->b = parse_body(P, ends)))
        return NULL;
    if (tdm_jp_accept_name(P, "else")) {
        static const char *const ends2[] = {"endfor", NULL};
        if (!block_end(P) || !(n->c = parse_body(P, ends2)))
            return NULL;
    }
    return end_tag(P, "endfor") ? n : NULL;
}

static jnode_t *parse_set(parser_t *P, int line)
{
    jnode_t *n = tdm_jp_node(P, JN_SET, line);
    const char *name = tdm_jp_expect_ident(P);
    if (!name)
        return NULL;
    tdm_jp_npush(n, name);
    if (tdm_jp_accept_op(P, ".")) { /* ns.attr */
        const char *attr = tdm_jp_expect_ident(P);
        if (!attr)
            return NULL;
        tdm_jp_npush(n, attr);
        n->op = 1;
    } else {
        while (tdm_jp_accept_op(P, ",")) {
            if (!(name = tdm_jp_expect_ident(P)))
                return NULL;
            tdm_jp_npush(n, name);
        }
    }
    if (tdm_jp_cur(P)->kind == JT_BLOCK_END && n->nnames == 1) {
        static const char *const ends[] = {"endset", NULL};
        n->kind = JN_SETBLOCK;
        P->i++;
        if (!(n->b = parse_body(P, ends)) || !end_tag(P, "endset"))
            return NULL;
        return n;
    }
    if (!tdm_jp_expect_op(P, "=") || !(n->a = tdm_jp_parse_expr(P, 1)))
        return NULL;
    if (tdm_jp_is_op(P, ",")) { /* a, b = 1, 2 */
        jnode_t *l = tdm_jp_node(P, JN_LIST, line);
        tdm_jp_vpush(l, n->a, NULL);
        while (tdm_jp_accept_op(P, ",")) {
            jnode_t *e = tdm_jp_parse_expr(P, 1);
            if (!e)
                return NULL;
            tdm_jp_vpush(l, e, NULL);
        }
        n->a = l;
    }
    return block_end(P) ? n : NULL;
}

static int parse_params(parser_t *P, jnode_t *n)
{
    if (!tdm_jp_expect_op(P, "("))
        return 0;
    while (!P->failed && !tdm_jp_is_op(P, ")")) {
        const char *name = tdm_jp_expect_ident(P);
        if (!name)
            return 0;
        tdm_jp_npush(n, name);
        jnode_t *def = NULL;
        if (tdm_jp_accept_op(P, "=") && !(def = tdm_jp_parse_expr(P, 1)))
            return 0;
        n->v = tdm_realloc(n->v, n->nnames * sizeof(*n->v));
        n->v[n->nnames - 1] = def;
        n->nv = n->nnames;
        if (!tdm_jp_accept_op(P, ","))
            break;
    }
    return tdm_jp_expect_op(P, ")");
}

static jnode_t *parse_stmt(parser_t *P)
{
    int line = tdm_jp_cur(P)->line;
    const char *kw = tdm_jp_expect_ident(P);
    if (!kw)
        return NULL;
    if (!strcmp(kw, "if"))
        return parse_if(P, line);
    if (!strcmp(kw, "for"))
        return parse_for(P, line);
    if (!strcmp(kw, "set"))
        return parse_set(P, line);
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        jnode_t *n = tdm_jp_node(P, kw[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
        return block_end(P) ? n : NULL;
    }
    if (!strcmp(kw, "generation")) { /* transformers' assistant-mask marker: prints its body */
        static const char *const ends[] = {"endgeneration", NULL};
        jnode_t *b;
        if (!block_end(P) || !(b = parse_body(P, ends)) || !end_tag(P, "endgeneration"))
            return NULL;
        return b;
    }
    if (!strcmp(kw, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        jnode_t *n = tdm_jp_node(P, JN_MACRO, line);
        const char *name = tdm_jp_expect_ident(P);
        if (!name)
            return NULL;
        n->s = tdm_strdup(name);
        if (!parse_params(P, n) || !block_end(P) || !(n->b = parse_body(P, ends)))
            return NULL;
        if (!tdm_jp_accept_name(P, "endmacro"))
            return tdm_jp_fail(P, "expected 'endmacro'");
        if (tdm_jp_cur(P)->kind == JT_NAME) /* {% endmacro name %} */
            P->i++;
        return block_end(P) ? n : NULL;
    }
    if (!strcmp(kw, "call")) {
        static const char *const ends[] = {"endcall", NULL};
        jnode_t *n = tdm_jp_node(P, JN_CALLBLK, line);
        if (tdm_jp_is_op(P, "(") && !parse_params(P, n))
            return NULL;
        if (!(n->a = tdm_jp_parse_expr(P, 1)) || n->a->kind != JN_CALL)
            return tdm_jp_fail(P, "{% call %} needs a macro call");
        if (!block_end(P) || !(n->b = parse_body(P, ends)) || !end_tag(P, "endcall"))
            return NULL;
        return n;
    }
    if (!strcmp(kw, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        jnode_t *n = tdm_jp_node(P, JN_FILTERBLK, line), *body = tdm_jp_node(P, JN_NAME, line),
                *f = body;
        body->s = tdm_strdup("__body__");
        do {
            jnode_t *fl = tdm_jp_node(P, JN_FILTER, tdm_jp_cur(P)->line);
            const char *name = tdm_jp_expect_ident(P);
            if (!name)
                return NULL;
            fl->a = f;
            fl->s = tdm_strdup(name);
            if (tdm_jp_accept_op(P, "(") && !tdm_jp_parse_args(P, fl))
                return NULL;
            f = fl;
        } while (tdm_jp_accept_op(P, "|"));
        n->a = f;
        if (!block_end(P) || !(n->b = parse_body(P, ends)) || !end_tag(P, "endfilter"))
            return NULL;
        return n;
    }
    P->i--;
    return tdm_jp_fail(P, "unknown statement");
}

/* Statements up to a {% NAME %} with NAME in `ends` (left as the current token), or EOF when
 * ends is NULL. */
static jnode_t *parse_body(parser_t *P, const char *const *ends)
{
    jnode_t *body = tdm_jp_node(P, JN_BODY, tdm_jp_cur(P)->line);
    if (++P->depth > PARSE_MAX_DEPTH)
        return tdm_jp_fail(P, "blocks nested too deeply");
    while (!P->failed) {
        jtok_t *t = tdm_jp_cur(P);
        int line = t->line;
        if (t->kind == JT_EOF) {
            if (ends)
                return tdm_jp_fail(P, "unexpected end of template (missing an end tag)");
            break;
        }
        if (t->kind == JT_TEXT) {
            jnode_t *n = tdm_jp_node(P, JN_TEXT, line);
            n->s = tdm_malloc(t->len + 1);
            memcpy(n->s, t->s, t->len + 1);
            n->slen = t->len;
            tdm_jp_vpush(body, n, NULL);
            P->i++;
            continue;
        }
        if (t->kind == JT_VAR_BEGIN) {
            P->i++;
            jnode_t *n = tdm_jp_node(P, JN_OUTPUT, line);
            if (!(n->a = tdm_jp_parse_expr(P, 1)))
                return NULL;
            if (tdm_jp_cur(P)->kind != JT_VAR_END)
                return tdm_jp_fail(P, "expected '}}'");
            P->i++;
            tdm_jp_vpush(body, n, NULL);
            continue;
        }
        if (t->kind != JT_BLOCK_BEGIN)
            return tdm_jp_fail(P, "unexpected token");
        jtok_t *k = tdm_jp_peek(P, 1);
        for (size_t e = 0; ends && ends[e]; e++)
            if (k->kind == JT_NAME && !strcmp(k->s, ends[e])) {
                P->i++;
                P->depth--;
                return body;
            }
        P->i++;
        jnode_t *s = parse_stmt(P);
        if (!s)
            return NULL;
        tdm_jp_vpush(body, s, NULL);
    }
    P->depth--;
    return P->failed ? NULL : body;
}

tdm_status_t tdm_jinja_parse_tokens(tdm_jinja_tpl_t *t, jtok_t *toks, size_t n, char *err,
                                    size_t errlen)
{
    parser_t P = {.t = t, .tok = toks, .n = n, .err = err, .errlen = errlen};
    t->root = parse_body(&P, NULL);
    return t->root && !P.failed ? TDM_OK : TDM_ERR_FORMAT;
}

tdm_status_t tdm_jinja_parse(const char *src, size_t len, tdm_jinja_tpl_t **ret, char *err,
                             size_t errlen)
{
    jtok_t *toks = NULL;
    size_t n = 0;
    tdm_status_t st;
    if (!src || !ret)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_jinja_lex(src, len, &toks, &n, err, errlen));
    tdm_jinja_tpl_t *t = tdm_calloc(1, sizeof(*t));
    st = tdm_jinja_parse_tokens(t, toks, n, err, errlen);
    tdm_jinja_toks_free(toks, n);
    if (st != TDM_OK) {
        tdm_jinja_free(t);
        return st;
    }
    *ret = t;
    return TDM_OK;
}

void tdm_jinja_free(tdm_jinja_tpl_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_nodes; i++) {
        jnode_t *n = t->nodes[i];
        for (size_t k = 0; k < n->nnames; k++)
            tdm_free(n->names[k]);
        tdm_free(n->names);
        tdm_free(n->v);
        tdm_free(n->s);
        json_decref(n->lit);
        tdm_free(n);
    }
    tdm_free(t->nodes);
    tdm_free(t);
}
