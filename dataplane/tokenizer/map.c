/*
 * map.c — the tokenizer's two hash maps, open addressing with linear probing: token string →
 * id (vocabulary, added tokens) and (left id, right id) → (merge rank, merged id). Keys are
 * hashed with XXH3; tables are sized at load time for a load factor <= 1/2 and never shrink.
 */
#include "config.h"

#include <string.h>
#include <xxhash.h>

#include <tdm/mem.h>

#include "tok_int.h"

static size_t pow2_for(size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2 + 2)
        cap <<= 1;
    return cap;
}

void tdm_tok_smap_init(tok_smap_t *m, size_t expect)
{
    size_t cap = pow2_for(expect);
    m->slot = tdm_calloc(cap, sizeof(uint32_t));
    m->mask = cap - 1;
    m->cap_ent = expect > 0 ? expect : 1;
    m->ent = tdm_calloc(m->cap_ent, sizeof(*m->ent));
    m->n = 0;
}

static void smap_grow(tok_smap_t *m)
{
    size_t cap = (m->mask + 1) * 2;
    uint32_t *slot = tdm_calloc(cap, sizeof(uint32_t));
    for (size_t i = 0; i < m->n; i++) {
        size_t h = (size_t)XXH3_64bits(m->ent[i].s, m->ent[i].len) & (cap - 1);
        while (slot[h])
            h = (h + 1) & (cap - 1);
        slot[h] = (uint32_t)i + 1;
    }
    tdm_free(m->slot);
    m->slot = slot;
    m->mask = cap - 1;
}

int tdm_tok_smap_put(tok_smap_t *m, const char *s, size_t len, uint32_t val)
{
    size_t h = (size_t)XXH3_64bits(s, len) & m->mask;
    while (m->slot[h]) {
        struct tok_smap_ent *e = &m->ent[m->slot[h] - 1];
        if (e->len == len && memcmp(e->s, s, len) == 0) {
            e->val = val;
            return 1;
        }
        h = (h + 1) & m->mask;
    }
    if (m->n == m->cap_ent) {
        m->cap_ent *= 2;
        m->ent = tdm_realloc(m->ent, m->cap_ent * sizeof(*m->ent));
    }
    m->ent[m->n] = (struct tok_smap_ent){.s = s, .len = (uint32_t)len, .val = val};
    m->slot[h] = (uint32_t)++m->n;
    if (m->n * 2 > m->mask)
        smap_grow(m);
    return 0;
}

int tdm_tok_smap_get(const tok_smap_t *m, const char *s, size_t len, uint32_t *ret_val)
{
    if (!m->slot)
        return 0;
    size_t h = (size_t)XXH3_64bits(s, len) & m->mask;
    while (m->slot[h]) {
        const struct tok_smap_ent *e = &m->ent[m->slot[h] - 1];
        if (e->len == len && memcmp(e->s, s, len) == 0) {
            *ret_val = e->val;
            return 1;
        }
        h = (h + 1) & m->mask;
    }
    return 0;
}

void tdm_tok_smap_free(tok_smap_t *m)
{
    tdm_free(m->slot);
    tdm_free(m->ent);
    memset(m, 0, sizeof(*m));
}

static inline size_t pair_hash(uint64_t k, size_t mask)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k & mask;
}

void tdm_tok_pmap_init(tok_pmap_t *m, size_t expect)
{
    size_t cap = pow2_for(expect);
    m->key = tdm_malloc(cap * sizeof(uint64_t));
    memset(m->key, 0xFF, cap * sizeof(uint64_t));
    m->rank = tdm_malloc(cap * sizeof(uint32_t));
    m->merged = tdm_malloc(cap * sizeof(uint32_t));
    m->mask = cap - 1;
    m->n = 0;
}

/* The caller sizes the map for every merge up front (expect = number of merges). */
void tdm_tok_pmap_put(tok_pmap_t *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged)
{
    uint64_t k = ((uint64_t)a << 32) | b;
    size_t h = pair_hash(k, m->mask);
    while (m->key[h] != UINT64_MAX && m->key[h] != k)
        h = (h + 1) & m->mask;
    if (m->key[h] == UINT64_MAX)
        m->n++;
    m->key[h] = k;
    m->rank[h] = rank;
    m->merged[h] = merged;
}

int tdm_tok_pmap_get(const tok_pmap_t *m, uint32_t a, uint32_t b, uint32_t *ret_rank,
                     uint32_t *ret_merged)
{
    if (!m->key)
        return 0;
    uint64_t k = ((uint64_t)a << 32) | b;
    size_t h = pair_hash(k, m->mask);
    while (m->key[h] != UINT64_MAX) {
        if (m->key[h] == k) {
            *ret_rank = m->rank[h];
            *ret_merged = m->merged[h];
            return 1;
        }
        h = (h + 1) & m->mask;
    }
    return 0;
}

void tdm_tok_pmap_free(tok_pmap_t *m)
{
    tdm_free(m->key);
    tdm_free(m->rank);
    tdm_free(m->merged);
    memset(m, 0, sizeof(*m));
}

void tdm_tok_buf_put(tok_buf_t *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = tdm_realloc(b->p, cap);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void tdm_tok_buf_free(tok_buf_t *b)
{
    tdm_free(b->p);
    memset(b, 0, sizeof(*b));
}

char *tdm_tok_arena_memdup(tdm_arena_t *a, const void *s, size_t n)
{
    char *d = tdm_arena_alloc(a, n + 1);
    if (!d)
        return NULL;
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *tdm_tok_memdup(const void *s, size_t n)
{
    char *d = tdm_malloc(n + 1);
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}
