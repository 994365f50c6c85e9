/*
 * encode.c — text → ids, in the order HF `tokenizers` runs its pipeline:
 *   1. split out added tokens that match the raw text (normalized=false), leftmost-longest,
 *      applying single_word / lstrip / rstrip;
 *   2. normalize each remaining section, then split out normalized added tokens;
 *   3. pre-tokenize each remaining piece (Split / ByteLevel / Metaspace steps);
 *   4. BPE each piece: characters → ids (byte fallback, unk), then merges by rank with a binary
 *      heap over (rank, position) and stale-entry checks, exactly HF's Word::merge_all;
 *   5. the post-processor template around the sequence when add_special is set.
 * Empty pieces are dropped at every stage, as PreTokenizedString::split does. All temporaries
 * live in a per-call arena capped relative to the input; the tokenizer itself is read-only.
 */
#include "config.h"

#include <string.h>

#include <tdm/mem.h>

#include "tok_int.h"

typedef struct piece {
    const char *s;
    size_t len;
    int origin; /* starts at offset 0 of the original text (Metaspace prepend_scheme first) */
} piece_t;

typedef struct plist {
    piece_t *v;
    size_t n, cap;
} plist_t;

typedef struct sym {
    uint32_t id;
    int32_t prev, next;
    int alive;
} sym_t;

typedef struct heap_ent {
    uint32_t rank, pos, merged;
} heap_ent_t;

typedef struct enc {
    const tdm_tok_t *tok;
    tdm_arena_t arena;
    uint32_t *ids;
    size_t n_ids, cap_ids;
    sym_t *sym;
    size_t cap_sym;
    heap_ent_t *heap;
    size_t cap_heap;
    plist_t a, b;
} enc_t;

static void plist_push(plist_t *l, const char *s, size_t len, int origin)
{
    if (len == 0)
        return;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = tdm_realloc(l->v, l->cap * sizeof(piece_t));
    }
    l->v[l->n++] = (piece_t){.s = s, .len = len, .origin = origin};
}

static void push_id(enc_t *e, uint32_t id)
{
    if (e->n_ids == e->cap_ids) {
        e->cap_ids = e->cap_ids ? e->cap_ids * 2 : 64;
        e->ids = tdm_realloc(e->ids, e->cap_ids * sizeof(uint32_t));
    }
    e->ids[e->n_ids++] = id;
}

/* ---- normalizers ---- */

static char *replace_all(tdm_arena_t *a, const char *s, size_t len, const char *pat, size_t plen,
                         const char *rep, size_t rlen, size_t *ret_len)
{
    size_t count = 0;
    for (size_t i = 0; i + plen <= len;) {
        if (memcmp(s + i, pat, plen) == 0) {
            count++;
            i += plen;
        } else
            i++;
    }
    size_t cap;
    if (tdm_size_muladd(count, rlen, len + 1, &cap) != TDM_OK)
        return NULL;
    char *out = tdm_arena_alloc(a, cap);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        if (i + plen <= len && memcmp(s + i, pat, plen) == 0) {
            memcpy(out + o, rep, rlen);
            o += rlen;
            i += plen;
        } else
            out[o++] = s[i++];
    }
    out[o] = '\0';
    *ret_len = o;
    return out;
}

char *tdm_tok_normalize(const tdm_tok_t *tok, tdm_arena_t *a, const char *s, size_t len,
                        size_t *ret_len)
{
    const char *cur = s;
    size_t n = len;
    for (size_t i = 0; i < tok->n_norm; i++) {
        const tok_norm_t *st = &tok->norm[i];
        char *next = NULL;
        size_t nn = 0;
        switch (st->kind) {
        case TOK_NORM_NFC:
            next = tdm_tok_uc_nfc(a, cur, n, &nn);
            break;
        case TOK_NORM_PREPEND:
            if (n == 0)
                continue;
            next = tdm_arena_alloc(a, st->alen + n + 1);
            if (next) {
                memcpy(next, st->a, st->alen);
                memcpy(next + st->alen, cur, n);
                nn = st->alen + n;
                next[nn] = '\0';
            }
            break;
        case TOK_NORM_REPLACE:
            next = replace_all(a, cur, n, st->a, st->alen, st->b, st->blen, &nn);
            break;
        }
        if (!next)
            return NULL;
        cur = next;
        n = nn;
    }
    if (cur == s) {
        char *c = tdm_tok_arena_memdup(a, s, len);
        if (!c)
            return NULL;
        cur = c;
    }
    *ret_len = n;
    return (char *)cur;
}

/* ---- added tokens ---- */

static int is_alnum_cp(uint32_t cp)
{
    int k = tdm_tok_uc_class(cp);
    return k == TOK_CLS_L || k == TOK_CLS_N;
}

/* last character of s[0..n) is alphanumeric */
static int ends_with_word(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    size_t i = n - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80)
        i--;
    uint32_t cp;
    tdm_tok_utf8_next((const uint8_t *)s + i, n - i, &cp);
    return is_alnum_cp(cp);
}

static int starts_with_word(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    uint32_t cp;
    tdm_tok_utf8_next((const uint8_t *)s, n, &cp);
    return is_alnum_cp(cp);
}

typedef void (*section_fn)(enc_t *e, const char *s, size_t len, int origin, tdm_status_t *st);

/* HF AddedVocabulary::find_matches over s; calls fn for text between tokens, pushes token ids. */
static void split_added(enc_t *e, const tok_amatch_t *m, const char *s, size_t len, int origin,
                        section_fn fn, tdm_status_t *st)
{
    const tdm_tok_t *tok = e->tok;
    size_t start_offset = 0, pos = 0;
    while (pos < len && *st == TDM_OK) {
        size_t i, mlen = 0;
        const tok_added_t *t = NULL;
        for (i = pos; i < len && !t; i++) {
            uint8_t c = (uint8_t)s[i];
            for (uint32_t k = m->start[c]; k < m->start[c + 1]; k++) {
                const tok_added_t *cand = &tok->added[m->idx[k]];
                const char *p = m->use_norm ? cand->norm : cand->content;
                size_t pl = m->use_norm ? cand->norm_len : cand->len;
                if (pl <= len - i && memcmp(s + i, p, pl) == 0) {
                    t = cand;
                    mlen = pl;
                    break;
                }
            }
        }
        if (!t)
            break;
        size_t start = i - 1, stop = start + mlen;
        pos = stop;
        if (t->single_word) {
            int start_space = start == 0 || !ends_with_word(s, start);
            int stop_space = stop == len || !starts_with_word(s + stop, len - stop);
            if (!start_space || !stop_space)
                continue;
        }
        if (t->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t q = ns - 1;
                while (q > 0 && ((uint8_t)s[q] & 0xC0) == 0x80)
                    q--;
                uint32_t cp;
                tdm_tok_utf8_next((const uint8_t *)s + q, ns - q, &cp);
                if (!tdm_tok_uc_is_ws(cp))
                    break;
                ns = q;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (t->rstrip) {
            while (stop < len) {
                uint32_t cp;
                size_t w = tdm_tok_utf8_next((const uint8_t *)s + stop, len - stop, &cp);
                if (!tdm_tok_uc_is_ws(cp))
                    break;
                stop += w;
            }
        }
        if (start > start_offset)
            fn(e, s + start_offset, start - start_offset, origin && start_offset == 0, st);
        push_id(e, t->id);
        start_offset = stop;
    }
    if (*st == TDM_OK && start_offset < len)
        fn(e, s + start_offset, len - start_offset, origin && start_offset == 0, st);
}

/* ---- pre-tokenizers ---- */

static tdm_status_t pre_step(enc_t *e, const tok_pre_t *p, const plist_t *in, plist_t *out)
{
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const piece_t *pc = &in->v[i];
        const char *s = pc->s;
        size_t len = pc->len;
        switch (p->kind) {
        case TOK_PRE_SPLIT:
            for (size_t pos = 0; pos < len;) {
                size_t n = tdm_tok_pat_match(p->pat, (const uint8_t *)s, len, pos);
                plist_push(out, s + pos, n, pc->origin && pos == 0);
                pos += n;
            }
            break;
        case TOK_PRE_BYTELEVEL: {
            if (p->add_prefix_space && s[0] != ' ') {
                char *ns = tdm_arena_alloc(&e->arena, len + 2);
                if (!ns)
                    return TDM_ERR_OVERFLOW;
                ns[0] = ' ';
                memcpy(ns + 1, s, len);
                s = ns;
                len++;
            }
            size_t first = out->n;
            if (p->use_regex) {
                for (size_t pos = 0; pos < len;) {
                    size_t n = tdm_tok_pat_match(TOK_PAT_GPT2, (const uint8_t *)s, len, pos);
                    plist_push(out, s + pos, n, pc->origin && pos == 0);
                    pos += n;
                }
            } else {
                plist_push(out, s, len, pc->origin);
            }
            for (size_t k = first; k < out->n; k++) {
                piece_t *q = &out->v[k];
                uint8_t *m = tdm_arena_alloc(&e->arena, q->len * 2 + 1);
                if (!m)
                    return TDM_ERR_OVERFLOW;
                size_t o = 0;
                for (size_t j = 0; j < q->len; j++)
                    o += tdm_tok_utf8_put(tdm_tok_bytelevel_char((uint8_t)q->s[j]), m + o);
                q->s = (const char *)m;
                q->len = o;
            }
            break;
        }
        case TOK_PRE_METASPACE: {
            size_t n;
            char *r = replace_all(&e->arena, s, len, " ", 1, p->repl, p->repl_len, &n);
            if (!r)
                return TDM_ERR_OVERFLOW;
            int starts = n >= p->repl_len && memcmp(r, p->repl, p->repl_len) == 0;
            if (!starts &&
                (p->scheme == TOK_SCHEME_ALWAYS || (p->scheme == TOK_SCHEME_FIRST && pc->origin))) {
                char *ns = tdm_arena_alloc(&e->arena, n + p->repl_len + 1);
                if (!ns)
                    return TDM_ERR_OVERFLOW;
                memcpy(ns, p->repl, p->repl_len);
                memcpy(ns + p->repl_len, r, n);
                r = ns;
                n += p->repl_len;
            }
            if (!p->split) {
                plist_push(out, r, n, pc->origin);
                break;
            }
            /* MergedWithNext: each replacement character starts a new piece */
            size_t st = 0;
            for (size_t j = 1; j + p->repl_len <= n; j++) {
                if (memcmp(r + j, p->repl, p->repl_len) == 0) {
                    plist_push(out, r + st, j - st, pc->origin && st == 0);
                    st = j;
                    j += p->repl_len - 1;
                }
            }
            plist_push(out, r + st, n - st, pc->origin && st == 0);
            break;
        }
        }
    }
    return TDM_OK;
}

/* ---- BPE ---- */

static int heap_less(const heap_ent_t *a, const heap_ent_t *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(enc_t *e, size_t *n, heap_ent_t v)
{
    if (*n == e->cap_heap) {
        e->cap_heap = e->cap_heap ? e->cap_heap * 2 : 64;
        e->heap = tdm_realloc(e->heap, e->cap_heap * sizeof(heap_ent_t));
    }
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&v, &e->heap[p]))
            break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = v;
}

static heap_ent_t heap_pop(enc_t *e, size_t *n)
{
    heap_ent_t top = e->heap[0], last = e->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const heap_ent_t *best = &last;
        if (l < *n && heap_less(&e->heap[l], best)) {
            m = l;
            best = &e->heap[l];
        }
        if (r < *n && heap_less(&e->heap[r], best))
            m = r;
        if (m == i)
            break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (*n > 0)
        e->heap[i] = last;
    return top;
}

static void bpe(enc_t *e, const char *s, size_t len)
{
    const tdm_tok_t *tok = e->tok;
    uint32_t id;
    if (tok->ignore_merges && tdm_tok_smap_get(&tok->vocab, s, len, &id)) {
        push_id(e, id);
        return;
    }
    if (len * 4 + 1 > e->cap_sym) {
        e->cap_sym = len * 4 + 1;
        e->sym = tdm_realloc(e->sym, e->cap_sym * sizeof(sym_t));
    }
    size_t n = 0;
    int last_unk = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t w = tdm_tok_utf8_next((const uint8_t *)s + i, len - i, &cp);
        if (tdm_tok_smap_get(&tok->vocab, s + i, w, &id)) {
            e->sym[n++] = (sym_t){.id = id};
            last_unk = 0;
        } else {
            int done = 0;
            if (tok->byte_fallback) {
                done = 1;
                for (size_t k = 0; k < w; k++)
                    if (tok->byte_id[(uint8_t)s[i + k]] == TDM_TOK_NO_ID)
                        done = 0;
                if (done) {
                    for (size_t k = 0; k < w; k++)
                        e->sym[n++] = (sym_t){.id = tok->byte_id[(uint8_t)s[i + k]]};
                    last_unk = 0;
                }
            }
            if (!done && tok->unk_id != TDM_TOK_NO_ID) {
                if (!(tok->fuse_unk && last_unk))
                    e->sym[n++] = (sym_t){.id = tok->unk_id};
                last_unk = 1;
            }
        }
        i += w;
    }
    for (size_t i = 0; i < n; i++) {
        e->sym[i].prev = (int32_t)i - 1;
        e->sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
        e->sym[i].alive = 1;
    }
    size_t hn = 0;
    uint32_t rank, merged;
    for (size_t i = 0; i + 1 < n; i++)
        if (tdm_tok_pmap_get(&tok->merges, e->sym[i].id, e->sym[i + 1].id, &rank, &merged))
            heap_push(e, &hn, (heap_ent_t){.rank = rank, .pos = (uint32_t)i, .merged = merged});
    while (hn > 0) {
        heap_ent_t top = heap_pop(e, &hn);
        sym_t *cur = &e->sym[top.pos];
        if (!cur->alive || cur->next < 0)
            continue;
        sym_t *right = &e->sym[cur->next];
        if (!tdm_tok_pmap_get(&tok->merges, cur->id, right->id, &rank, &merged) ||
            merged != top.merged)
            continue; /* stale entry */
        cur->id = top.merged;
        right->alive = 0;
        cur->next = right->next;
        if (right->next >= 0)
            e->sym[right->next].prev = (int32_t)top.pos;
        if (cur->prev >= 0 &&
            tdm_tok_pmap_get(&tok->merges, e->sym[cur->prev].id, cur->id, &rank, &merged))
            heap_push(e, &hn,
                      (heap_ent_t){.rank = rank, .pos = (uint32_t)cur->prev, .merged = merged});
        if (cur->next >= 0 &&
            tdm_tok_pmap_get(&tok->merges, cur->id, e->sym[cur->next].id, &rank, &merged))
            heap_push(e, &hn, (heap_ent_t){.rank = rank, .pos = top.pos, .merged = merged});
    }
    for (size_t i = 0; i < n; i++)
        if (e->sym[i].alive)
            push_id(e, e->sym[i].id);
}

/* ---- pipeline ---- */

/* A normalized piece with no added token in it: pre-tokenize, then BPE. */
static void model_section(enc_t *e, const char *s, size_t len, int origin, tdm_status_t *st)
{
    const tdm_tok_t *tok = e->tok;
    e->a.n = 0;
    plist_push(&e->a, s, len, origin);
    for (size_t i = 0; i < tok->n_pre; i++) {
        *st = pre_step(e, &tok->pre[i], &e->a, &e->b);
        if (*st != TDM_OK)
            return;
        plist_t t = e->a;
        e->a = e->b;
        e->b = t;
    }
    for (size_t i = 0; i < e->a.n; i++)
        bpe(e, e->a.v[i].s, e->a.v[i].len);
}

/* A raw section between non-normalized added tokens: normalize, then split normalized ones. */
static void raw_section(enc_t *e, const char *s, size_t len, int origin, tdm_status_t *st)
{
    size_t nl;
    char *ns = tdm_tok_normalize(e->tok, &e->arena, s, len, &nl);
    if (!ns) {
        *st = TDM_ERR_OVERFLOW;
        return;
    }
    split_added(e, &e->tok->match_norm, ns, nl, origin, model_section, st);
}

tdm_status_t tdm_tok_encode(const tdm_tok_t *tok, const char *text, size_t len, int add_special,
                            uint32_t **ret_ids, size_t *ret_n)
{
    if (!tok || (!text && len))
        return TDM_ERR_INVAL;
    if (len > TDM_TOK_MAX_INPUT_BYTES)
        return TDM_ERR_OVERFLOW;
    if (tdm_tok_utf8_valid_prefix((const uint8_t *)text, len) != len)
        return TDM_ERR_INVAL;
    enc_t e = {.tok = tok};
    tdm_arena_init(&e.arena, 1 << 14, len * 16 + (1 << 20));
    tdm_status_t st = TDM_OK;
    if (add_special)
        for (size_t i = 0; i < tok->n_tpl_pre; i++)
            push_id(&e, tok->tpl_pre[i]);
    if (len)
        split_added(&e, &tok->match_raw, text, len, 1, raw_section, &st);
    if (add_special)
        for (size_t i = 0; i < tok->n_tpl_post; i++)
            push_id(&e, tok->tpl_post[i]);
    tdm_arena_free(&e.arena);
    tdm_free(e.sym);
    tdm_free(e.heap);
    tdm_free(e.a.v);
    tdm_free(e.b.v);
    if (st != TDM_OK) {
        tdm_free(e.ids);
        return st;
    }
    if (!e.ids)
        e.ids = tdm_malloc(sizeof(uint32_t));
    *ret_ids = e.ids;
    *ret_n = e.n_ids;
    return TDM_OK;
}
