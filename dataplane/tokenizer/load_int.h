/*
 * load_int.h — internals of the tokenizer.json loader shared by load.c (the model, vocab, added
 * tokens, matchers and the public entry points) and load_steps.c (the normalizer, pre-tokenizer,
 * decoder and post-processor sections). Not a public interface.
 */
#ifndef TDM_TOK_LOAD_INT_H
#define TDM_TOK_LOAD_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "tok_int.h"

/* Sequences of steps nest at most this deep. */
#define TOK_MAX_DEPTH 8

/* One load: the object being built and where the first problem goes. */
typedef struct tok_load {
    tdm_tok_t *tok;
    char *err;
    size_t errlen;
} tok_load_t;

/* Write the problem into c->err; returns st. */
__attribute__((format(printf, 3, 4))) tdm_status_t tdm_tok_load_bad(tok_load_t *c, tdm_status_t st,
                                                                    const char *fmt, ...);
/* A copy of string s in the tokenizer's arena (*ret_len: its length, when asked). */
const char *tdm_tok_load_dup_str(tok_load_t *c, json_t *s, size_t *ret_len);
/* Optional boolean o[key]: absent or null → def. */
tdm_status_t tdm_tok_load_get_bool(tok_load_t *c, json_t *o, const char *key, const char *where,
                                   int def, int *ret);
/* String o[key] (*ret NULL when absent and not required). */
tdm_status_t tdm_tok_load_get_str(tok_load_t *c, json_t *o, const char *key, const char *where,
                                  int required, json_t **ret);
/* A token id (a non-negative integer below 2^32). */
tdm_status_t tdm_tok_load_get_id(tok_load_t *c, json_t *v, const char *where, uint32_t *ret);

/* The pipeline sections (load_steps.c): o is the section's object, `where` its path for the
 * messages, depth its Sequence nesting (0 at the top). Each appends to tok's step lists. */
tdm_status_t tdm_tok_load_norm(tok_load_t *c, json_t *o, const char *where, int depth);
tdm_status_t tdm_tok_load_pre(tok_load_t *c, json_t *o, const char *where, int depth);
tdm_status_t tdm_tok_load_dec(tok_load_t *c, json_t *o, const char *where, int depth);
tdm_status_t tdm_tok_load_post(tok_load_t *c, json_t *o, const char *where, int depth);

#endif
