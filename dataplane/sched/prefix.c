/*
 * prefix.c — prefix reuse (docs/serving.md "Scheduler"): every full KV page of a finished or
 * retracted sequence is indexed by a chained hash h_i = xxh64(tokens of page i, seed h_{i-1}),
 * so a page is found only through the exact token prefix that produced it. The cache owns one
 * reference per indexed page; admissions share pages by taking references of their own; pages
 * referenced only by the cache are evicted least recently used when allocation needs them.
 * Entries are keyed by page id (a page is indexed at most once), so the cache never allocates
 * after init.
 */
#include "config.h"

#include <string.h>

#include <tdm/hash.h>
#include <tdm/mem.h>

#include "dataplane/sched/sched_int.h"

#define NONE (-1)

typedef struct pnode {
    uint64_t hash, parent;
    int32_t bnext;              /* bucket chain */
    int32_t lru_prev, lru_next; /* lru_prev toward the most recent end */
    int in;
    uint32_t hits; /* matches since indexed (write_through_selective) */
} pnode_t;

struct tdm_prefix {
    tdm_kv_pool_t *pool;
    uint32_t ps, num_pages, n;
    pnode_t *nodes; /* by page id */
    int32_t *toks;  /* num_pages * ps: the tokens of each indexed page */
    int32_t *bucket;
    uint32_t mask;
    int32_t mru, lru; /* list ends */
    tdm_hicache_t *hc;
};

tdm_status_t tdm_prefix_init(tdm_kv_pool_t *pool, uint32_t page_size, tdm_prefix_t **ret)
{
    if (!pool || page_size == 0 || !ret)
        return TDM_ERR_INVAL;
    tdm_prefix_t *c = tdm_calloc(1, sizeof(*c));
    c->pool = pool;
    c->ps = page_size;
    c->num_pages = tdm_kv_pool_num_pages(pool);
    c->nodes = tdm_calloc(c->num_pages, sizeof(pnode_t));
    c->toks = tdm_calloc((size_t)c->num_pages * page_size, sizeof(int32_t));
    uint32_t nb = 16;
    while (nb < 2 * c->num_pages)
        nb <<= 1;
    c->mask = nb - 1;
    c->bucket = tdm_calloc(nb, sizeof(int32_t));
    for (uint32_t i = 0; i < nb; i++)
        c->bucket[i] = NONE;
    c->mru = c->lru = NONE;
    *ret = c;
    return TDM_OK;
}

void tdm_prefix_set_tier(tdm_prefix_t *c, tdm_hicache_t *hc)
{
    c->hc = hc;
}

uint64_t tdm_prefix_chain(const int32_t *tokens, uint32_t n_pages, uint32_t page_size)
{
    uint64_t h = 0;
    for (uint32_t i = 0; i < n_pages; i++)
        h = tdm_hash_xxh64(tokens + (size_t)i * page_size, page_size * sizeof(int32_t), h);
    return h;
}

/* A copy to the host tier when the policy says `when`; a full tier only means no copy. */
static void tier_store(tdm_prefix_t *c, int32_t p, tdm_hicache_policy_t when)
{
    if (!c->hc || tdm_hicache_policy(c->hc) != when)
        return;
    const pnode_t *x = &c->nodes[p];
    (void)tdm_hicache_store(c->hc, (uint32_t)p, x->hash, x->parent, c->toks + (size_t)p * c->ps);
}

static void lru_unlink(tdm_prefix_t *c, int32_t p)
{
    pnode_t *x = &c->nodes[p];
    if (x->lru_prev != NONE)
        c->nodes[x->lru_prev].lru_next = x->lru_next;
    else
        c->mru = x->lru_next;
    if (x->lru_next != NONE)
        c->nodes[x->lru_next].lru_prev = x->lru_prev;
    else
        c->lru = x->lru_prev;
}

static void lru_push_mru(tdm_prefix_t *c, int32_t p)
{
    pnode_t *x = &c->nodes[p];
    x->lru_prev = NONE;
    x->lru_next = c->mru;
    if (c->mru != NONE)
        c->nodes[c->mru].lru_prev = p;
    c->mru = p;
    if (c->lru == NONE)
        c->lru = p;
}

static void remove_node(tdm_prefix_t *c, int32_t p)
{
    pnode_t *x = &c->nodes[p];
    int32_t *link = &c->bucket[x->hash & c->mask];
    while (*link != p)
        link = &c->nodes[*link].bnext;
    *link = x->bnext;
    lru_unlink(c, p);
    x->in = 0;
    c->n--;
    (void)tdm_kv_page_unref(c->pool, (uint32_t)p);
}

void tdm_prefix_free(tdm_prefix_t *c)
{
    if (!c)
        return;
    tdm_prefix_flush(c);
    tdm_free(c->nodes);
    tdm_free(c->toks);
    tdm_free(c->bucket);
    tdm_free(c);
}

void tdm_prefix_flush(tdm_prefix_t *c)
{
    while (c && c->lru != NONE)
        remove_node(c, c->lru);
}

static int32_t find(const tdm_prefix_t *c, uint64_t h, uint64_t parent, const int32_t *toks)
{
    for (int32_t p = c->bucket[h & c->mask]; p != NONE; p = c->nodes[p].bnext) {
        const pnode_t *x = &c->nodes[p];
        if (x->hash == h && x->parent == parent &&
            !memcmp(c->toks + (size_t)p * c->ps, toks, c->ps * sizeof(int32_t)))
            return p;
    }
    return NONE;
}

uint32_t tdm_prefix_match(tdm_prefix_t *c, const int32_t *tokens, uint32_t max_pages,
                          uint32_t *ret_pages)
{
    uint64_t h = 0;
    uint32_t i;
    for (i = 0; i < max_pages; i++) {
        const int32_t *t = tokens + (size_t)i * c->ps;
        uint64_t nh = tdm_hash_xxh64(t, c->ps * sizeof(int32_t), h);
        int32_t p = find(c, nh, h, t);
        if (p == NONE)
            break;
        ret_pages[i] = (uint32_t)p;
        if (++c->nodes[p].hits == 2)
            tier_store(c, p, TDM_HICACHE_WRITE_THROUGH_SELECTIVE);
        h = nh;
    }
    /* leaf first, so the root of a chain ends up most recent and leaves are evicted first */
    for (uint32_t k = i; k-- > 0;) {
        lru_unlink(c, (int32_t)ret_pages[k]);
        lru_push_mru(c, (int32_t)ret_pages[k]);
    }
    return i;
}

void tdm_prefix_insert(tdm_prefix_t *c, const int32_t *tokens, const uint32_t *pages,
                       uint32_t n_pages)
{
    uint64_t h = 0;
    for (uint32_t i = 0; i < n_pages; i++) {
        const int32_t *t = tokens + (size_t)i * c->ps;
        uint64_t nh = tdm_hash_xxh64(t, c->ps * sizeof(int32_t), h);
        int32_t p = (int32_t)pages[i];
        if (find(c, nh, h, t) == NONE && (uint32_t)p < c->num_pages && !c->nodes[p].in &&
            tdm_kv_page_ref(c->pool, (uint32_t)p) == TDM_OK) {
            pnode_t *x = &c->nodes[p];
            x->hash = nh;
            x->parent = h;
            x->in = 1;
            memcpy(c->toks + (size_t)p * c->ps, t, c->ps * sizeof(int32_t));
            x->hits = 0;
            x->bnext = c->bucket[nh & c->mask];
            c->bucket[nh & c->mask] = p;
            lru_push_mru(c, p);
            c->n++;
            tier_store(c, p, TDM_HICACHE_WRITE_THROUGH);
        }
        h = nh;
    }
}

uint32_t tdm_prefix_evict(tdm_prefix_t *c, uint32_t n)
{
    uint32_t done = 0;
    int32_t p = c->lru;
    while (p != NONE && done < n) {
        int32_t up = c->nodes[p].lru_prev;
        if (tdm_kv_page_refcount(c->pool, (uint32_t)p) == 1) {
            tier_store(c, p, TDM_HICACHE_WRITE_BACK); /* before the page can be reused */
            remove_node(c, p);
            done++;
        }
        p = up;
    }
    return done;
}

uint32_t tdm_prefix_evictable(const tdm_prefix_t *c)
{
    uint32_t n = 0;
    for (int32_t p = c->lru; p != NONE; p = c->nodes[p].lru_prev)
        n += tdm_kv_page_refcount(c->pool, (uint32_t)p) == 1;
    return n;
}

uint32_t tdm_prefix_count(const tdm_prefix_t *c)
{
    return c->n;
}
