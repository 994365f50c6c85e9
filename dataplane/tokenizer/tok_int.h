/*
 * dataplane/tokenizer/tok_int.h — internals shared by the tokenizer's files: the loaded object,
 * its hash maps, the normalizer / pre-tokenizer / decoder / post-processor step lists, and the
 * Unicode helpers. Not a public interface (include/tdm/tokenizer.h is).
 */
#ifndef TDM_TOK_INT_H
#define TDM_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/arena.h>
#include <tdm/tokenizer.h>

/* ---- Unicode (unicode.c) ---- */

enum { TOK_CLS_OTHER = 0, TOK_CLS_L = 1, TOK_CLS_N = 2, TOK_CLS_WS = 3 };

/* Decode one scalar at s[0..len) that is known to be valid UTF-8; returns its byte length. */
size_t tdm_tok_utf8_next(const uint8_t *s, size_t len, uint32_t *ret_cp);
/* Length of the valid UTF-8 prefix of s (== len when all valid). */
size_t tdm_tok_utf8_valid_prefix(const uint8_t *s, size_t len);
size_t tdm_tok_utf8_put(uint32_t cp, uint8_t *out);
/* \p{L}, \p{N}, \s (Unicode White_Space) or other. */
int tdm_tok_uc_class(uint32_t cp);
int tdm_tok_uc_is_ws(uint32_t cp);
/* NFC of valid UTF-8 into an arena string; NULL if the arena cap is exceeded. */
char *tdm_tok_uc_nfc(tdm_arena_t *a, const char *s, size_t len, size_t *ret_len);
/* Rust's String::from_utf8_lossy: each maximal invalid subpart becomes U+FFFD. The result is
 * tdm_malloc'd and NUL-terminated. */
char *tdm_tok_utf8_lossy(const uint8_t *s, size_t len, size_t *ret_len);

/* ---- growable byte buffer (heap, tdm_malloc) ---- */

typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf_t;

void tdm_tok_buf_put(tok_buf_t *b, const void *s, size_t n);
/* Copies of n bytes that may contain NUL (tdm_*strndup stop at one), NUL-terminated. */
char *tdm_tok_arena_memdup(tdm_arena_t *a, const void *s, size_t n);
char *tdm_tok_memdup(const void *s, size_t n);
void tdm_tok_buf_free(tok_buf_t *b);

/* ---- maps (map.c) ---- */

/* string → uint32; keys point into memory owned elsewhere (the tokenizer's arena). */
typedef struct tok_smap {
    struct tok_smap_ent {
        const char *s;
        uint32_t len;
        uint32_t val;
    } * ent;
    uint32_t *slot; /* entry index + 1; 0 = empty */
    size_t n, cap_ent, mask;
} tok_smap_t;

void tdm_tok_smap_init(tok_smap_t *m, size_t expect);
/* 0 on insert, 1 if the key existed (its value is then replaced). */
int tdm_tok_smap_put(tok_smap_t *m, const char *s, size_t len, uint32_t val);
/* 1 and *ret_val if found. */
int tdm_tok_smap_get(const tok_smap_t *m, const char *s, size_t len, uint32_t *ret_val);
void tdm_tok_smap_free(tok_smap_t *m);

/* (id, id) → (rank, merged id) */
typedef struct tok_pmap {
    uint64_t *key; /* UINT64_MAX = empty */
    uint32_t *rank, *merged;
    size_t n, mask;
} tok_pmap_t;

void tdm_tok_pmap_init(tok_pmap_t *m, size_t expect);
void tdm_tok_pmap_put(tok_pmap_t *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged);
int tdm_tok_pmap_get(const tok_pmap_t *m, uint32_t a, uint32_t b, uint32_t *ret_rank,
                     uint32_t *ret_merged);
void tdm_tok_pmap_free(tok_pmap_t *m);

/* ---- the tokenizer ---- */

typedef enum tok_norm_kind { TOK_NORM_NFC, TOK_NORM_PREPEND, TOK_NORM_REPLACE } tok_norm_kind_t;
typedef struct tok_norm {
    tok_norm_kind_t kind;
    const char *a, *b; /* Prepend: a; Replace: a → b */
    size_t alen, blen;
} tok_norm_t;

typedef enum tok_pat { TOK_PAT_GPT2, TOK_PAT_LLAMA3, TOK_PAT_QWEN2 } tok_pat_t;
typedef enum tok_scheme { TOK_SCHEME_ALWAYS, TOK_SCHEME_FIRST, TOK_SCHEME_NEVER } tok_scheme_t;

typedef enum tok_pre_kind { TOK_PRE_BYTELEVEL, TOK_PRE_SPLIT, TOK_PRE_METASPACE } tok_pre_kind_t;
typedef struct tok_pre {
    tok_pre_kind_t kind;
    int add_prefix_space; /* ByteLevel */
    int use_regex;        /* ByteLevel: split with the GPT-2 pattern first */
    tok_pat_t pat;        /* Split */
    const char *repl;     /* Metaspace replacement (UTF-8 of one char) */
    size_t repl_len;
    tok_scheme_t scheme; /* Metaspace */
    int split;           /* Metaspace */
} tok_pre_t;

typedef enum tok_dec_kind {
    TOK_DEC_BYTELEVEL,
    TOK_DEC_METASPACE,
    TOK_DEC_REPLACE,
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP
} tok_dec_kind_t;
typedef struct tok_dec {
    tok_dec_kind_t kind;
    const char *a, *b; /* Replace a → b; Metaspace replacement in a */
    size_t alen, blen;
    tok_scheme_t scheme; /* Metaspace */
    uint32_t content;    /* Strip: the character */
    size_t start, stop;  /* Strip */
} tok_dec_t;

typedef struct tok_added {
    const char *content;
    size_t len;
    const char *norm; /* content after the normalizer (normalized tokens only) */
    size_t norm_len;
    uint32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added_t;

/* Added-token matcher over one set (normalized or not): per first byte, indices of the tokens
 * starting with it, longest first. */
typedef struct tok_amatch {
    uint32_t *idx;       /* token indices grouped by first byte */
    uint32_t start[257]; /* idx[start[c] .. start[c+1]) start with byte c */
    int use_norm;        /* match against tok_added_t.norm */
} tok_amatch_t;

#define TOK_MAX_STEPS 16

struct tdm_tok {
    tdm_arena_t pool; /* every string the object holds */

    /* model: BPE */
    tok_smap_t vocab; /* token → id */
    tok_pmap_t merges;
    uint32_t unk_id; /* TDM_TOK_NO_ID if none */
    int fuse_unk, byte_fallback, ignore_merges;
    uint32_t byte_id[256]; /* <0xNN> ids, TDM_TOK_NO_ID where absent */

    /* id tables, vocab_size entries */
    uint32_t vocab_size;
    const char **id_str;
    uint32_t *id_len;
    uint8_t *id_flags; /* TOK_ID_* */

    tok_added_t *added;
    size_t n_added;
    tok_smap_t added_map; /* content → id */
    tok_amatch_t match_raw, match_norm;

    tok_norm_t norm[TOK_MAX_STEPS];
    size_t n_norm;
    tok_pre_t pre[TOK_MAX_STEPS];
    size_t n_pre;
    tok_dec_t dec[TOK_MAX_STEPS];
    size_t n_dec;
    int has_decoder;

    /* post_processor template (single): ids before and after the sequence */
    uint32_t *tpl_pre, *tpl_post;
    size_t n_tpl_pre, n_tpl_post;
};

enum { TOK_ID_ADDED = 1, TOK_ID_SPECIAL = 2, TOK_ID_VOCAB = 4 };

/* GPT-2 byte ↔ printable-char mapping of the ByteLevel pre-tokenizer/decoder. */
uint32_t tdm_tok_bytelevel_char(uint8_t b);
/* -1 if cp is not one of the 256 byte-level characters. */
int tdm_tok_bytelevel_byte(uint32_t cp);

/* Length in bytes of the pattern's match at s[pos..len) (always >= 1 char when pos < len).
 * s is valid UTF-8. */
size_t tdm_tok_pat_match(tok_pat_t pat, const uint8_t *s, size_t len, size_t pos);

/* Normalize one section into the arena (NULL on arena cap). */
char *tdm_tok_normalize(const tdm_tok_t *tok, tdm_arena_t *a, const char *s, size_t len,
                        size_t *ret_len);

#endif
