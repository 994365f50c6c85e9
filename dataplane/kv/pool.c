/*
 * pool.c — the host KV pool, its page allocator and per-sequence page tables.
 *
 * The pool's memory is one aligned allocation of exactly tdm_kv_layout_pool_bytes(), or memory the
 * caller lends (tdm_kv_pool_init_mem: e.g. a region UCX allocated so a same-host peer can map it);
 * or none at all (tdm_kv_pool_init_pages: page accounting for KV that lives on the GPU);
 * region offsets come from the descriptor. Pages are handed out from a LIFO free list (recently
 * freed pages are still warm in cache), or lowest id first (TDM_KV_ALLOC_LOWEST: the free list is
 * a binary min-heap, so the live pages stay packed at the pool's start however requests come and
 * go; docs/cuda.md "Sampling on the device, and the serving bench" asks whether scattered pages
 * cost the GPU's decode attention), with a refcount per page, so prefix sharing only has to take
 * references. Allocation is all-or-nothing so a failed admission leaves nothing behind.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tdm/kv.h>
#include <tdm/mem.h>

struct tdm_kv_pool {
    tdm_kv_layout_t layout;
    tdm_kv_buffers_t buf;
    uint64_t bytes;
    uint32_t num_pages;
    uint32_t n_free;
    uint32_t *free_list; /* free page ids, n_free valid: a stack (LIFO) or a min-heap (LOWEST) */
    uint32_t *refcount;  /* per page; 0 = free */
    int owned;           /* buf.base is ours to free */
    tdm_kv_alloc_order_t order;
};

/* The min-heap of LOWEST over free_list[0, n_free). */
static void heap_push(tdm_kv_pool_t *p, uint32_t id)
{
    uint32_t i = p->n_free++;
    while (i > 0 && p->free_list[(i - 1) / 2] > id) {
        p->free_list[i] = p->free_list[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    p->free_list[i] = id;
}

static void heap_sift_down(uint32_t *h, uint32_t n, uint32_t i)
{
    const uint32_t id = h[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1] < h[c])
            c++;
        if (h[c] >= id)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = id;
}

static uint32_t heap_pop(tdm_kv_pool_t *p)
{
    const uint32_t top = p->free_list[0];
    p->free_list[0] = p->free_list[--p->n_free];
    if (p->n_free > 0)
        heap_sift_down(p->free_list, p->n_free, 0);
    return top;
}

/* base NULL + pages_only: no memory at all (the KV lives elsewhere, e.g. on the GPU). */
static tdm_status_t pool_init(const tdm_kv_layout_t *l, uint32_t num_pages, void *base,
                              uint64_t mem_bytes, int pages_only, tdm_kv_pool_t **ret_pool)
{
    tdm_status_t st;
    tdm_kv_pool_t *p;
    uint64_t bytes, lb;

    if (!l || !ret_pool || num_pages == 0 || num_pages == UINT32_MAX)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_kv_layout_pool_bytes(l, num_pages, &bytes));
    if (base && ((uintptr_t)base % TDM_KV_REGION_ALIGN != 0 || mem_bytes < bytes))
        return TDM_ERR_INVAL;
    p = tdm_calloc(1, sizeof(*p));
    p->layout = *l;
    p->num_pages = num_pages;
    p->bytes = bytes;
    p->owned = base == NULL && !pages_only;
    if (!pages_only) {
        p->buf.base = base ? base : aligned_alloc(TDM_KV_REGION_ALIGN, bytes);
        if (!p->buf.base) {
            st = TDM_ERR_NOMEM;
            goto err_free_pool;
        }
        memset(p->buf.base, 0, bytes);
    }
    p->free_list = calloc(num_pages, sizeof(uint32_t));
    p->refcount = calloc(num_pages, sizeof(uint32_t));
    if (!p->free_list || !p->refcount) {
        st = TDM_ERR_NOMEM;
        goto err_free_mem;
    }
    /* Pop order 0, 1, 2, ...: the stack holds the highest id at the bottom. */
    for (uint32_t i = 0; i < num_pages; i++)
        p->free_list[i] = num_pages - 1 - i;
    p->n_free = num_pages;

    p->buf.layout = &p->layout;
    p->buf.num_pages = num_pages;
    lb = tdm_kv_layout_region_offset(l, num_pages, 1, TDM_KV_SUB_K);
    p->buf.layer_bytes = lb;
    for (uint32_t s = 0; s < TDM_KV_SUB_MAX; s++)
        p->buf.sub_offset[s] =
            s < l->n_sub ? tdm_kv_layout_region_offset(l, num_pages, 0, (tdm_kv_sub_t)s) : 0;
    *ret_pool = p;
    return TDM_OK;

err_free_mem:
    free(p->free_list);
    free(p->refcount);
    if (p->owned)
        free(p->buf.base);
err_free_pool:
    tdm_free(p);
    return st;
}

tdm_status_t tdm_kv_pool_init(const tdm_kv_layout_t *l, uint32_t num_pages,
                              tdm_kv_pool_t **ret_pool)
{
    return pool_init(l, num_pages, NULL, 0, 0, ret_pool);
}

tdm_status_t tdm_kv_pool_init_pages(const tdm_kv_layout_t *l, uint32_t num_pages,
                                    tdm_kv_pool_t **ret_pool)
{
    return pool_init(l, num_pages, NULL, 0, 1, ret_pool);
}

tdm_status_t tdm_kv_pool_init_mem(const tdm_kv_layout_t *l, uint32_t num_pages, void *base,
                                  uint64_t bytes, tdm_kv_pool_t **ret_pool)
{
    if (!base)
        return TDM_ERR_INVAL;
    return pool_init(l, num_pages, base, bytes, 0, ret_pool);
}

void tdm_kv_pool_free(tdm_kv_pool_t *p)
{
    if (!p)
        return;
    free(p->free_list);
    free(p->refcount);
    if (p->owned)
        free(p->buf.base);
    tdm_free(p);
}

const tdm_kv_buffers_t *tdm_kv_pool_buffers(const tdm_kv_pool_t *p)
{
    return &p->buf;
}

const tdm_kv_layout_t *tdm_kv_pool_layout(const tdm_kv_pool_t *p)
{
    return &p->layout;
}

uint32_t tdm_kv_pool_num_pages(const tdm_kv_pool_t *p)
{
    return p->num_pages;
}

uint32_t tdm_kv_pool_free_pages(const tdm_kv_pool_t *p)
{
    return p->n_free;
}

tdm_status_t tdm_kv_pool_set_order(tdm_kv_pool_t *p, tdm_kv_alloc_order_t order)
{
    if (!p || (order != TDM_KV_ALLOC_LIFO && order != TDM_KV_ALLOC_LOWEST))
        return TDM_ERR_INVAL;
    if (order == p->order)
        return TDM_OK;
    if (order == TDM_KV_ALLOC_LOWEST) {
        /* heapify the stack's ids in place */
        for (uint32_t i = p->n_free / 2; i-- > 0;)
            heap_sift_down(p->free_list, p->n_free, i);
    } else {
        /* a stack popping lowest first: the ids in descending order */
        uint32_t n = p->n_free;
        while (n > 1) {
            const uint32_t top = p->free_list[0];
            p->free_list[0] = p->free_list[n - 1];
            heap_sift_down(p->free_list, n - 1, 0);
            p->free_list[--n] = top;
        }
    }
    p->order = order;
    return TDM_OK;
}

tdm_status_t tdm_kv_alloc_order_parse(const char *s, tdm_kv_alloc_order_t *ret)
{
    if (!s || !ret)
        return TDM_ERR_INVAL;
    if (!strcmp(s, "lifo"))
        *ret = TDM_KV_ALLOC_LIFO;
    else if (!strcmp(s, "lowest"))
        *ret = TDM_KV_ALLOC_LOWEST;
    else
        return TDM_ERR_INVAL;
    return TDM_OK;
}

tdm_status_t tdm_kv_page_alloc(tdm_kv_pool_t *p, uint32_t n, uint32_t *ret_ids)
{
    if (!p || (n && !ret_ids))
        return TDM_ERR_INVAL;
    if (n > p->n_free)
        return TDM_ERR_AGAIN;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = p->order == TDM_KV_ALLOC_LOWEST ? heap_pop(p) : p->free_list[--p->n_free];
        p->refcount[id] = 1;
        ret_ids[i] = id;
    }
    return TDM_OK;
}

tdm_status_t tdm_kv_page_ref(tdm_kv_pool_t *p, uint32_t page)
{
    if (!p || page >= p->num_pages)
        return TDM_ERR_RANGE;
    if (p->refcount[page] == 0)
        return TDM_ERR_STATE;
    if (p->refcount[page] == UINT32_MAX)
        return TDM_ERR_OVERFLOW;
    p->refcount[page]++;
    return TDM_OK;
}

tdm_status_t tdm_kv_page_unref(tdm_kv_pool_t *p, uint32_t page)
{
    if (!p || page >= p->num_pages)
        return TDM_ERR_RANGE;
    if (p->refcount[page] == 0)
        return TDM_ERR_STATE;
    if (--p->refcount[page] == 0) {
        if (p->order == TDM_KV_ALLOC_LOWEST)
            heap_push(p, page);
        else
            p->free_list[p->n_free++] = page;
    }
    return TDM_OK;
}

uint32_t tdm_kv_page_refcount(const tdm_kv_pool_t *p, uint32_t page)
{
    return page < p->num_pages ? p->refcount[page] : 0;
}

void tdm_kv_seq_init(tdm_kv_seq_t *s, uint32_t max_pages_per_seq)
{
    memset(s, 0, sizeof(*s));
    s->cap_pages = max_pages_per_seq;
}

tdm_status_t tdm_kv_seq_reserve(tdm_kv_pool_t *p, tdm_kv_seq_t *s, uint32_t n_tokens)
{
    uint32_t ps, need, add;

    if (!p || !s)
        return TDM_ERR_INVAL;
    ps = p->layout.page_size;
    need = (uint32_t)(((uint64_t)n_tokens + ps - 1) / ps);
    if (need > s->cap_pages)
        return TDM_ERR_RANGE;
    if (need > s->n_pages) {
        add = need - s->n_pages;
        if (!s->pages)
            s->pages = tdm_calloc(s->cap_pages, sizeof(uint32_t));
        TDM_TRY(tdm_kv_page_alloc(p, add, s->pages + s->n_pages));
        s->n_pages = need;
    }
    if (n_tokens > s->n_tokens)
        s->n_tokens = n_tokens;
    return TDM_OK;
}

void tdm_kv_seq_release(tdm_kv_pool_t *p, tdm_kv_seq_t *s)
{
    if (!p || !s)
        return;
    for (uint32_t i = 0; i < s->n_pages; i++)
        (void)tdm_kv_page_unref(p, s->pages[i]);
    s->n_pages = 0;
    s->n_tokens = 0;
}

void tdm_kv_seq_free(tdm_kv_pool_t *p, tdm_kv_seq_t *s)
{
    if (!s)
        return;
    tdm_kv_seq_release(p, s);
    tdm_free(s->pages);
    s->pages = NULL;
}
