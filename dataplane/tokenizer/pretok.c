/*
 * pretok.c — hand-written matchers for the three pre-tokenizer regexes tokenizer.json files use,
 * with the exact leftmost-first, greedy-with-backtracking semantics of the regex engine (onig)
 * that HF `tokenizers` runs:
 *
 *   GPT-2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama-3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   Qwen2   as Llama-3 with \p{N} instead of \p{N}{1,3}
 *
 * Every position matches some alternative (letters, numbers, whitespace and "other" are each
 * covered), so an Isolated split is simply the sequence of matches from the start.
 */
#include "config.h"

#include "tok_int.h"

typedef struct cur {
    const uint8_t *s;
    size_t len;
} cur_t;

/* Code point at pos (0 at end) and its byte length in *w. */
static uint32_t at(const cur_t *c, size_t pos, size_t *w)
{
    if (pos >= c->len) {
        *w = 0;
        return 0;
    }
    uint32_t cp;
    *w = tdm_tok_utf8_next(c->s + pos, c->len - pos, &cp);
    return cp;
}

static int cls_at(const cur_t *c, size_t pos, size_t *w)
{
    uint32_t cp = at(c, pos, w);
    if (*w == 0)
        return -1;
    return tdm_tok_uc_class(cp);
}

/* End of the run of class k starting at pos (pos itself if none). */
static size_t run(const cur_t *c, size_t pos, int k)
{
    size_t w;
    while (pos < c->len && cls_at(c, pos, &w) == k)
        pos += w;
    return pos;
}

static int is_other(int k)
{
    return k == TOK_CLS_OTHER;
}

/* 's 't 're 've 'm 'll 'd at pos (an apostrophe); ci: case-insensitive with Unicode simple
 * folding (so U+017F LONG S matches 's' as it does in onig). Returns the match length or 0. */
static size_t contraction(const cur_t *c, size_t pos, int ci)
{
    size_t w1, w2;
    uint32_t a = at(c, pos + 1, &w1);
    if (w1 == 0)
        return 0;
    uint32_t b = at(c, pos + 1 + w1, &w2);
    if (ci) {
        if (a < 0x80)
            a |= 0x20;
        else if (a == 0x17F)
            a = 's';
        if (b < 0x80 && w2)
            b |= 0x20;
        else if (b == 0x17F)
            b = 's';
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 1 + w1;
    if (w2 && ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')))
        return 1 + w1 + w2;
    return 0;
}

/* \s+(?!\S) then \s+ at pos, where pos is whitespace. */
static size_t ws_tail(const cur_t *c, size_t pos)
{
    size_t end = run(c, pos, TOK_CLS_WS);
    if (end >= c->len)
        return end - pos;
    /* followed by \S: back off one character, if that leaves at least one */
    size_t last = pos, w;
    for (size_t p = pos; p < end; p += w) {
        at(c, p, &w);
        last = p;
    }
    return last > pos ? last - pos : end - pos;
}

static size_t match_gpt2(const cur_t *c, size_t pos)
{
    size_t w0, w1;
    uint32_t c0 = at(c, pos, &w0);
    if (c0 == '\'') {
        size_t n = contraction(c, pos, 0);
        if (n)
            return n;
    }
    /* ` ?X+` for X in L, N, other */
    size_t p = c0 == ' ' ? pos + w0 : pos;
    int k = cls_at(c, p, &w1);
    if (k == TOK_CLS_L || k == TOK_CLS_N || is_other(k))
        return run(c, p, k) - pos;
    /* c0 is whitespace here (a space not followed by L, N or other included) */
    return ws_tail(c, pos);
}

static size_t match_llama(const cur_t *c, size_t pos, int max_digits)
{
    size_t w0, w1;
    uint32_t c0 = at(c, pos, &w0);
    if (c0 == '\'') {
        size_t n = contraction(c, pos, 1);
        if (n)
            return n;
    }
    int k0 = tdm_tok_uc_class(c0);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (k0 == TOK_CLS_L)
        return run(c, pos, TOK_CLS_L) - pos;
    if (c0 != '\r' && c0 != '\n' && k0 != TOK_CLS_N && cls_at(c, pos + w0, &w1) == TOK_CLS_L)
        return run(c, pos + w0, TOK_CLS_L) - pos;
    /* \p{N}{1,max} */
    if (k0 == TOK_CLS_N) {
        size_t p = pos, w;
        for (int i = 0; i < max_digits && p < c->len && cls_at(c, p, &w) == TOK_CLS_N; i++)
            p += w;
        return p - pos;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t p = pos;
    if (c0 == ' ' && is_other(cls_at(c, pos + w0, &w1)))
        p = pos + w0;
    if (is_other(cls_at(c, p, &w1))) {
        p = run(c, p, TOK_CLS_OTHER);
        while (p < c->len && (c->s[p] == '\r' || c->s[p] == '\n'))
            p++;
        return p - pos;
    }
    /* \s*[\r\n]+ : up to and including the last \r or \n of the whitespace run */
    size_t end = run(c, pos, TOK_CLS_WS), last_nl = 0;
    int have_nl = 0;
    for (size_t q = pos, w; q < end; q += w) {
        uint32_t cp = at(c, q, &w);
        if (cp == '\r' || cp == '\n') {
            last_nl = q + 1;
            have_nl = 1;
        }
    }
    if (have_nl)
        return last_nl - pos;
    return ws_tail(c, pos);
}

size_t tdm_tok_pat_match(tok_pat_t pat, const uint8_t *s, size_t len, size_t pos)
{
    cur_t c = {.s = s, .len = len};
    size_t n;
    switch (pat) {
    case TOK_PAT_GPT2:
        n = match_gpt2(&c, pos);
        break;
    case TOK_PAT_LLAMA3:
        n = match_llama(&c, pos, 3);
        break;
    case TOK_PAT_QWEN2:
    default:
        n = match_llama(&c, pos, 1);
        break;
    }
    if (n == 0 && pos < len) { /* cannot happen: every class is covered; stay total anyway */
        uint32_t cp;
        n = tdm_tok_utf8_next(s + pos, len - pos, &cp);
    }
    return n;
}
