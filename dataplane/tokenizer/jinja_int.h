/*
 * jinja_int.h — internals of the Jinja engine (tdm/jinja.h): the token stream (jinja_lex.c),
 * the syntax tree (jinja_parse.c), values and their Python semantics (jinja_value.c), the
 * evaluator (jinja_eval.c) and the filters, tests and methods (jinja_builtins.c).
 *
 * Values: data is jansson (null, true/false, integer, real, string, array, object — objects keep
 * insertion order, as Python dicts do); a jv_t wraps one reference plus the kinds JSON lacks
 * (undefined, namespace, macro, built-in function). jv_t owns its reference: jv_free() drops it.
 */
#ifndef TDM_TOKENIZER_JINJA_INT_H
#define TDM_TOKENIZER_JINJA_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/jinja.h>

#include "chat_int.h"

/* ---- tokens ---- */

typedef enum jtok_kind {
    JT_TEXT = 0,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP,
    JT_EOF,
    JT_MAX
} jtok_kind_t;

typedef struct jtok {
    jtok_kind_t kind;
    int line;
    char *s; /* text, name, unescaped string, or operator; NUL-terminated */
    size_t len;
    int64_t i;
    double f;
} jtok_t;

tdm_status_t tdm_jinja_lex(const char *src, size_t len, jtok_t **ret, size_t *ret_n, char *err,
                           size_t errlen);
void tdm_jinja_toks_free(jtok_t *t, size_t n);

/* ---- syntax tree ---- */

typedef enum jnode_kind {
    /* statements */
    JN_BODY = 0,  /* v[]: statements */
    JN_TEXT,      /* s */
    JN_OUTPUT,    /* a */
    JN_IF,        /* a cond, b body, c else (JN_BODY or JN_IF for elif) */
    JN_FOR,       /* names[] targets, a iterable, b body, c else, d filter */
    JN_SET,       /* names[0] (+ names[1] attribute) or names[] tuple targets; a value */
    JN_SETBLOCK,  /* names[0]; b body */
    JN_MACRO,     /* s name, names[] params, v[] defaults (NULL entries), b body */
    JN_CALLBLK,   /* a call expression, names[] caller params, b body */
    JN_FILTERBLK, /* a filter chain applied to JN_NAME "__body__", b body */
    JN_BREAK,
    JN_CONTINUE,
    /* expressions */
    JN_LIT,    /* lit */
    JN_NAME,   /* s */
    JN_LIST,   /* v[] */
    JN_DICT,   /* v[] keys/values interleaved */
    JN_ATTR,   /* a obj, s name */
    JN_ITEM,   /* a obj, b index */
    JN_SLICE,  /* a obj, b start, c stop, d step (each may be NULL) */
    JN_CALL,   /* a callee, v[] args, names[] keyword names (NULL for positional) */
    JN_FILTER, /* a operand, s name, v[] args, names[] keyword names */
    JN_TEST,   /* a operand, s name, v[] args, op: negate */
    JN_UNARY,  /* op '-' '+' or 'n' (not), a */
    JN_BIN,    /* op, a, b */
    JN_AND,
    JN_OR,
    JN_COND, /* a cond, b then, c else (NULL → undefined) */
    JN_KIND_MAX
} jnode_kind_t;

/* Binary operators (JN_BIN.op). */
enum {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN,
};

typedef struct jnode jnode_t;
struct jnode {
    jnode_kind_t kind;
    int line;
    int op;
    jnode_t *a, *b, *c, *d;
    jnode_t **v;
    size_t nv;
    char **names;
    size_t nnames;
    char *s;
    size_t slen;
    json_t *lit;
};

struct tdm_jinja_tpl {
    jnode_t *root;
    jnode_t **nodes; /* every node, for freeing */
    size_t n_nodes, cap_nodes;
};

/* Parser state and the helpers jinja_parse.c (expressions) shares with jinja_stmt.c. */
#define PARSE_MAX_DEPTH 200
typedef struct parser {
    tdm_jinja_tpl_t *t;
    jtok_t *tok;
    size_t n, i;
    int depth;
    char *err;
    size_t errlen;
    int failed;
} parser_t;

jnode_t *tdm_jp_node(parser_t *P, jnode_kind_t k, int line);
void tdm_jp_vpush(jnode_t *n, jnode_t *child, const char *name);
void tdm_jp_npush(jnode_t *n, const char *name);
jtok_t *tdm_jp_cur(parser_t *P);
jtok_t *tdm_jp_peek(parser_t *P, size_t ahead);
void *tdm_jp_fail(parser_t *P, const char *what);
int tdm_jp_is_op(parser_t *P, const char *op);
int tdm_jp_is_name(parser_t *P, const char *name);
int tdm_jp_accept_op(parser_t *P, const char *op);
int tdm_jp_accept_name(parser_t *P, const char *name);
int tdm_jp_expect_op(parser_t *P, const char *op);
const char *tdm_jp_expect_ident(parser_t *P);
jnode_t *tdm_jp_parse_expr(parser_t *P, int with_cond);
jnode_t *tdm_jp_parse_or(parser_t *P);
int tdm_jp_parse_args(parser_t *P, jnode_t *call);

tdm_status_t tdm_jinja_parse_tokens(tdm_jinja_tpl_t *t, jtok_t *toks, size_t n, char *err,
                                    size_t errlen);

/* ---- values ---- */

typedef enum jv_kind {
    JV_UNDEF = 0,
    JV_DATA,  /* j: any JSON value */
    JV_NS,    /* j: the namespace's object (mutable) */
    JV_MACRO, /* macro: the JN_MACRO node */
    JV_FUNC,  /* func: a built-in global (JF_*) */
    JV_KIND_MAX
} jv_kind_t;

enum { JF_RAISE = 1, JF_STRFTIME, JF_NAMESPACE, JF_RANGE, JF_DICT, JF_CALLER };

typedef struct jv {
    jv_kind_t k;
    json_t *j;
    const jnode_t *macro;
    int func;
} jv_t;

static inline jv_t jv_undef(void)
{
    jv_t v = {JV_UNDEF, NULL, NULL, 0};
    return v;
}
/* Takes the reference `j` (NULL → undefined). */
static inline jv_t jv_take(json_t *j)
{
    jv_t v = {j ? JV_DATA : JV_UNDEF, j, NULL, 0};
    return v;
}
static inline jv_t jv_borrow(const json_t *j)
{
    return jv_take(json_incref((json_t *)j));
}
static inline jv_t jv_copy(jv_t v)
{
    json_incref(v.j);
    return v;
}
static inline void jv_free(jv_t *v)
{
    json_decref(v->j);
    v->j = NULL;
    v->k = JV_UNDEF;
}
static inline int jv_is_str(jv_t v)
{
    return v.k == JV_DATA && json_is_string(v.j);
}

/* Python semantics (jinja_value.c). */
int tdm_jv_truthy(jv_t v);
const char *tdm_jv_type_name(jv_t v);
/* str(v) appended to b (undefined prints nothing). */
tdm_status_t tdm_jv_str(tdm_sbuf_t *b, jv_t v);
/* str(v) as a new string value. */
tdm_status_t tdm_jv_to_string(jv_t v, jv_t *ret);
int tdm_jv_equal(jv_t a, jv_t b);
/* <0, 0, >0; TDM_ERR_INVAL in *st when the types do not order. */
int tdm_jv_compare(jv_t a, jv_t b, tdm_status_t *st);
/* JSON data for v (undefined → null, a namespace → its object); new reference. */
json_t *tdm_jv_to_json(jv_t v);
/* Code points of a UTF-8 string; the byte offset of code point i (clamped to n). */
size_t tdm_jv_utf8_count(const char *s, size_t n);
size_t tdm_jv_utf8_offset(const char *s, size_t n, size_t cp);

/* ---- evaluation ---- */

typedef struct jframe jframe_t;
struct jframe {
    jframe_t *parent;
    size_t n, cap;
    const char **names;
    jv_t *vals;
};

void tdm_jframe_set(jframe_t *f, const char *name, jv_t v);
void tdm_jframe_clear(jframe_t *f);

typedef struct jctx {
    tdm_sbuf_t *out;
    const json_t *vars;
    jframe_t *top;  /* innermost scope */
    jframe_t *root; /* template scope */
    tdm_jinja_limits_t lim;
    uint64_t work;
    uint32_t depth;
    int line; /* of the node being evaluated, for errors */
    char *err;
    size_t errlen;
    int brk;                    /* 1 break, 2 continue pending */
    const jnode_t *caller_body; /* innermost {% call %} body, for caller() */
    jframe_t *caller_frame;
} jctx_t;

/* Record an error "line N: …" (first one wins) and return st. */
tdm_status_t tdm_jctx_fail(jctx_t *c, tdm_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Count work units; TDM_ERR_RANGE past the limit. */
tdm_status_t tdm_jctx_work(jctx_t *c, uint64_t n);

tdm_status_t tdm_jinja_eval(jctx_t *c, const jnode_t *n, jv_t *ret);
tdm_status_t tdm_jinja_exec(jctx_t *c, const jnode_t *n);
/* A name: innermost scope first, then the render variables, the globals, undefined. */
jv_t tdm_jinja_lookup(jctx_t *c, const char *name);
/* Render `body` into a new string value (macros, {% set %} blocks, filter blocks). */
tdm_status_t tdm_jinja_capture(jctx_t *c, const jnode_t *body, jv_t *ret);
tdm_status_t tdm_jinja_call_macro(jctx_t *c, jv_t fn, jv_t *args, size_t nargs, char **kwnames,
                                  jv_t *ret);

/* Built-ins (jinja_builtins.c). args[0..nargs): positional then keyword (kwnames[i] != NULL). */
tdm_status_t tdm_jinja_filter(jctx_t *c, const char *name, jv_t self, jv_t *args, char **kwnames,
                              size_t nargs, jv_t *ret);
tdm_status_t tdm_jinja_test(jctx_t *c, const char *name, jv_t self, jv_t *args, size_t nargs,
                            int *ret);
/* self.name(args); TDM_ERR_NOTFOUND if `self` has no such method. */
tdm_status_t tdm_jinja_method(jctx_t *c, jv_t self, const char *name, jv_t *args, char **kwnames,
                              size_t nargs, jv_t *ret);
tdm_status_t tdm_jinja_global_call(jctx_t *c, int func, jv_t *args, char **kwnames, size_t nargs,
                                   jv_t *ret);

#endif
