/*
 * hicache.c — the host KV tier (contract in include/tdm/hicache.h): the host pool built from the
 * device pool's descriptor and checked against it, the index of host pages (chained token hash,
 * tokens verified, LRU over pages no load holds), stores with per-layer checksums of the device
 * source, and the job table the copy thread (hicache_copy.c) drains.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/hash.h>
#include <tdm/mem.h>

#include "dataplane/kv/hicache_int.h"

#define NONE (-1)

static const char *const policy_names[] = {"write_through", "write_back",
                                           "write_through_selective"};
_Static_assert(sizeof(policy_names) / sizeof(policy_names[0]) == TDM_HICACHE_POLICY_MAX,
               "one name per policy");
static const char *const layout_names[] = {"layer_first", "page_first"};
_Static_assert(sizeof(layout_names) / sizeof(layout_names[0]) == TDM_HICACHE_MEM_LAYOUT_MAX,
               "one name per host layout");
static const char *const io_names[] = {"kernel", "direct"};
_Static_assert(sizeof(io_names) / sizeof(io_names[0]) == TDM_HICACHE_IO_MAX,
               "one name per copy path");

static tdm_status_t parse(const char *s, const char *const *names, int n, int *ret)
{
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) {
            *ret = i;
            return TDM_OK;
        }
    return TDM_ERR_INVAL;
}

tdm_status_t tdm_hicache_policy_parse(const char *s, tdm_hicache_policy_t *ret)
{
    int v;
    TDM_TRY(parse(s, policy_names, TDM_HICACHE_POLICY_MAX, &v));
    *ret = (tdm_hicache_policy_t)v;
    return TDM_OK;
}

tdm_status_t tdm_hicache_mem_layout_parse(const char *s, tdm_hicache_mem_layout_t *ret)
{
    int v;
    TDM_TRY(parse(s, layout_names, TDM_HICACHE_MEM_LAYOUT_MAX, &v));
    *ret = (tdm_hicache_mem_layout_t)v;
    return TDM_OK;
}

tdm_status_t tdm_hicache_io_parse(const char *s, tdm_hicache_io_t *ret)
{
    int v;
    TDM_TRY(parse(s, io_names, TDM_HICACHE_IO_MAX, &v));
    *ret = (tdm_hicache_io_t)v;
    return TDM_OK;
}

const char *tdm_hicache_policy_name(tdm_hicache_policy_t p)
{
    return (unsigned)p < TDM_HICACHE_POLICY_MAX ? policy_names[p] : "?";
}

static const char *const sub_names[] = {"K", "V", "K_SCALE", "V_SCALE"};

/* I6: every sub-buffer of the two descriptors, with both sizes named on a difference. */
static int layouts_agree(const tdm_kv_layout_t *d, const tdm_kv_layout_t *h, char *err,
                         size_t err_len)
{
    uint32_t n = d->n_sub > h->n_sub ? d->n_sub : h->n_sub;
    for (uint32_t s = 0; s < n && s < TDM_KV_SUB_MAX; s++) {
        const tdm_kv_layout_sub_t *a = &d->sub[s], *b = &h->sub[s];
        if (s < d->n_sub && s < h->n_sub && a->dtype == b->dtype &&
            a->bytes_per_token == b->bytes_per_token && a->page_stride == b->page_stride)
            continue;
        snprintf(err, err_len,
                 "HiCache host pool layout differs from the device pool in sub-buffer %s: "
                 "device %u bytes/token, page stride %llu; host %u bytes/token, page stride %llu",
                 sub_names[s], s < d->n_sub ? a->bytes_per_token : 0,
                 (unsigned long long)(s < d->n_sub ? a->page_stride : 0),
                 s < h->n_sub ? b->bytes_per_token : 0,
                 (unsigned long long)(s < h->n_sub ? b->page_stride : 0));
        return 0;
    }
    return 1;
}

/* Host page count: the configurator over the host descriptor for a byte budget, else the ratio. */
static tdm_status_t size_host(const tdm_hicache_cfg_t *cfg, const tdm_kv_layout_t *hl,
                              uint32_t *ret_pages)
{
    if (cfg->size_bytes > 0)
        return tdm_kv_pool_configure(hl, cfg->size_bytes, 0, ret_pages);
    double n = cfg->ratio * (double)cfg->device_pages;
    if (!(n >= 1.0))
        return TDM_ERR_INVAL;
    *ret_pages = n > (double)(UINT32_MAX - 1) ? UINT32_MAX - 1 : (uint32_t)n;
    return TDM_OK;
}

tdm_status_t tdm_hicache_host_layout(const tdm_hicache_cfg_t *cfg, tdm_kv_layout_t *ret)
{
    if (!cfg || !cfg->layout || !ret)
        return TDM_ERR_INVAL;
    return tdm_kv_layout_with_dtype(
        cfg->layout, cfg->fp8_formula ? TDM_DTYPE_FP8_E4M3 : cfg->layout->kv_dtype, ret);
}

tdm_status_t tdm_hicache_init(const tdm_hicache_cfg_t *cfg, const tdm_kv_buffers_t *device,
                              tdm_hicache_t **ret, char *err, size_t err_len)
{
    tdm_status_t st;
    tdm_kv_layout_t hl;
    uint32_t n;
    uint64_t bytes;

    if (!cfg || !cfg->layout || !device || !device->base || !ret || cfg->max_jobs == 0) {
        snprintf(err, err_len, "HiCache: bad configuration");
        return TDM_ERR_INVAL;
    }
    st = tdm_hicache_host_layout(cfg, &hl);
    if (st != TDM_OK) {
        snprintf(err, err_len, "HiCache host layout: %s", tdm_status_str(st));
        return st;
    }
    if (!layouts_agree(cfg->layout, &hl, err, err_len) && !cfg->force_layout)
        return TDM_ERR_FORMAT;
    st = size_host(cfg, &hl, &n);
    if (st == TDM_OK)
        st = tdm_kv_layout_pool_bytes(&hl, n, &bytes);
    if (st != TDM_OK) {
        snprintf(err, err_len,
                 "HiCache host pool size (--hicache-ratio %.2f, --hicache-size %llu "
                 "bytes): %s",
                 cfg->ratio, (unsigned long long)cfg->size_bytes, tdm_status_str(st));
        return st;
    }
    tdm_hicache_t *hc = tdm_calloc(1, sizeof(*hc));
    hc->cfg = *cfg;
    hc->dlayout = *cfg->layout;
    hc->hlayout = hl;
    hc->dev = *device;
    hc->dev.layout = &hc->dlayout;
    hc->n = n;
    hc->bytes = bytes;
    hc->L = hl.num_layers;
    hc->ps = hl.page_size;
    hc->dv = cfg->dev;
    hc->base = hc->dv ? hc->dv->host_alloc(bytes) : aligned_alloc(TDM_KV_REGION_ALIGN, bytes);
    hc->toks = calloc((size_t)n * hc->ps, sizeof(int32_t));
    hc->S = hc->dlayout.n_sub;
    hc->ck = calloc((size_t)n * hc->L * hc->S, sizeof(uint64_t));
    hc->ents = calloc(n, sizeof(hent_t));
    hc->free_list = calloc(n, sizeof(uint32_t));
    if (!hc->base || !hc->toks || !hc->ck || !hc->ents || !hc->free_list) {
        snprintf(err, err_len, "HiCache: no memory for a host pool of %u pages (%llu bytes)", n,
                 (unsigned long long)bytes);
        st = TDM_ERR_NOMEM;
        goto err_free;
    }
    if (!hc->dv)
        memset(hc->base, 0, bytes);
    for (uint32_t i = 0; i < n; i++)
        hc->free_list[i] = n - 1 - i;
    hc->n_free = n;
    uint32_t nb = 16;
    while (nb < 2 * n && nb < (1u << 30))
        nb <<= 1;
    hc->mask = nb - 1;
    hc->bucket = tdm_calloc(nb, sizeof(int32_t));
    for (uint32_t i = 0; i < nb; i++)
        hc->bucket[i] = NONE;
    hc->mru = hc->lru = NONE;
    /* host addresses: layer-first is the device pool's shape; page-first packs one page */
    hc->h_layer_bytes = tdm_kv_layout_region_offset(&hl, n, 1, TDM_KV_SUB_K);
    uint64_t off = 0;
    for (uint32_t s = 0; s < hl.n_sub; s++) {
        hc->h_sub_off[s] = tdm_kv_layout_region_offset(&hl, n, 0, (tdm_kv_sub_t)s);
        hc->h_in_page[s] = off;
        off += hl.sub[s].page_stride;
    }
    hc->h_page_layer = off;
    hc->h_page_bytes = off * hc->L;
    hc->n_copy_sub = hl.n_sub < hc->dlayout.n_sub ? hl.n_sub : hc->dlayout.n_sub;
    for (uint32_t s = 0; s < hc->n_copy_sub; s++)
        hc->copy_bytes[s] = hl.sub[s].page_stride < hc->dlayout.sub[s].page_stride
                                ? hl.sub[s].page_stride
                                : hc->dlayout.sub[s].page_stride;
    st = tdm_kv_gate_init(device, cfg->poison, &hc->gate);
    if (st != TDM_OK) {
        snprintf(err, err_len, "HiCache gate: %s", tdm_status_str(st));
        goto err_free;
    }
    if (hc->dv) {
        tdm_hicache_geom_t g;
        memset(&g, 0, sizeof(g));
        g.num_layers = hc->L;
        g.n_sub = hc->dlayout.n_sub;
        g.n_copy_sub = hc->n_copy_sub;
        g.page_first = cfg->mem_layout == TDM_HICACHE_PAGE_FIRST;
        g.kv_dtype = (uint32_t)hc->dlayout.kv_dtype;
        g.dev_pages = device->num_pages;
        g.host_pages = n;
        g.dev_base = device->base;
        g.d_layer_bytes = device->layer_bytes;
        g.host_base = hc->base;
        g.h_layer_bytes = hc->h_layer_bytes;
        g.h_page_bytes = hc->h_page_bytes;
        g.h_page_layer = hc->h_page_layer;
        for (uint32_t s = 0; s < TDM_KV_SUB_MAX; s++) {
            g.d_off[s] = s < g.n_sub ? device->sub_offset[s] : 0;
            g.d_stride[s] = s < g.n_sub ? hc->dlayout.sub[s].page_stride : 0;
            g.h_off[s] = hc->h_sub_off[s];
            g.h_stride[s] = s < hl.n_sub ? hl.sub[s].page_stride : 0;
            g.h_in_page[s] = hc->h_in_page[s];
            g.copy_bytes[s] = hc->copy_bytes[s];
        }
        st = hc->dv->open(&g, cfg->max_jobs, &hc->dh);
        if (st != TDM_OK) {
            snprintf(err, err_len, "HiCache copy stream: %s", tdm_status_str(st));
            goto err_free;
        }
        tdm_kv_gate_set_events(tdm_hicache_gate(hc), tdm_hicache_layer_event, hc);
    }
    hc->jobs = tdm_calloc(cfg->max_jobs, sizeof(hjob_t));
    hc->next_ticket = 1;
    hc->proc_ticket = 1;
    st = tdm_hicache_copy_start(hc);
    if (st != TDM_OK) {
        snprintf(err, err_len, "HiCache copy thread: %s", tdm_status_str(st));
        goto err_free;
    }
    *ret = hc;
    return TDM_OK;
err_free:
    tdm_hicache_free(hc);
    return st;
}

void tdm_hicache_free(tdm_hicache_t *hc)
{
    if (!hc)
        return;
    tdm_hicache_copy_stop(hc);
    if (hc->jobs)
        for (uint32_t j = 0; j < hc->cfg.max_jobs; j++) {
            tdm_free(hc->jobs[j].host);
            tdm_free(hc->jobs[j].dev);
        }
    tdm_free(hc->jobs);
    if (hc->dh)
        hc->dv->close(hc->dh);
    tdm_kv_gate_free(hc->gate);
    if (hc->dv && hc->base)
        hc->dv->host_free(hc->base);
    else
        free(hc->base);
    free(hc->vck);
    tdm_free(hc->jr);
    free(hc->toks);
    free(hc->ck);
    free(hc->ents);
    free(hc->free_list);
    tdm_free(hc->bucket);
    tdm_free(hc);
}

tdm_kv_gate_t *tdm_hicache_gate(tdm_hicache_t *hc)
{
    return hc->gate;
}

tdm_hicache_policy_t tdm_hicache_policy(const tdm_hicache_t *hc)
{
    return hc->cfg.policy;
}

void tdm_hicache_records(const tdm_hicache_t *hc, tdm_layout_record_t *ret_device,
                         tdm_layout_record_t *ret_host)
{
    tdm_kv_layout_record(&hc->dlayout, hc->dev.num_pages, ret_device);
    tdm_kv_layout_record(&hc->hlayout, hc->n, ret_host);
}

uint8_t *tdm_hicache_host_addr(const tdm_hicache_t *hc, uint32_t hp, uint32_t layer, uint32_t sub)
{
    if (hc->cfg.mem_layout == TDM_HICACHE_PAGE_FIRST)
        return hc->base + (uint64_t)hp * hc->h_page_bytes + (uint64_t)layer * hc->h_page_layer +
               hc->h_in_page[sub];
    return hc->base + (uint64_t)layer * hc->h_layer_bytes + hc->h_sub_off[sub] +
           (uint64_t)hp * hc->hlayout.sub[sub].page_stride;
}

/* Per (page, layer, sub-buffer): XXH64 (seed 0) of the device sub-buffer's page, full device
 * stride — each sub-buffer on its own, so a mismatch names it (the same bytes, hashed once). */
uint64_t tdm_hicache_dev_checksum(const tdm_hicache_t *hc, uint32_t page, uint32_t layer,
                                  uint32_t sub)
{
    return tdm_hash_xxh64(tdm_kv_slot(&hc->dev, layer, (tdm_kv_sub_t)sub, page, 0),
                          hc->dlayout.sub[sub].page_stride, 0);
}

/* ---------------------------------------------------------------- index */

static void lru_unlink(tdm_hicache_t *hc, int32_t p)
{
    hent_t *x = &hc->ents[p];
    if (x->lru_prev != NONE)
        hc->ents[x->lru_prev].lru_next = x->lru_next;
    else
        hc->mru = x->lru_next;
    if (x->lru_next != NONE)
        hc->ents[x->lru_next].lru_prev = x->lru_prev;
    else
        hc->lru = x->lru_prev;
}

static void lru_push_mru(tdm_hicache_t *hc, int32_t p)
{
    hent_t *x = &hc->ents[p];
    x->lru_prev = NONE;
    x->lru_next = hc->mru;
    if (hc->mru != NONE)
        hc->ents[hc->mru].lru_prev = p;
    hc->mru = p;
    if (hc->lru == NONE)
        hc->lru = p;
}

void tdm_hicache_drop(tdm_hicache_t *hc, uint32_t hp)
{
    hent_t *x = &hc->ents[hp];
    if (!x->in)
        return;
    int32_t *link = &hc->bucket[x->hash & hc->mask];
    while (*link != (int32_t)hp)
        link = &hc->ents[*link].bnext;
    *link = x->bnext;
    lru_unlink(hc, (int32_t)hp);
    x->in = 0;
    hc->used--;
    hc->free_list[hc->n_free++] = hp;
}

static int32_t find(const tdm_hicache_t *hc, uint64_t h, uint64_t parent, const int32_t *toks)
{
    for (int32_t p = hc->bucket[h & hc->mask]; p != NONE; p = hc->ents[p].bnext) {
        const hent_t *x = &hc->ents[p];
        if (x->hash == h && x->parent == parent &&
            !memcmp(hc->toks + (size_t)p * hc->ps, toks, hc->ps * sizeof(int32_t)))
            return p;
    }
    return NONE;
}

int tdm_hicache_contains(tdm_hicache_t *hc, uint64_t hash, uint64_t parent, const int32_t *toks)
{
    return find(hc, hash, parent, toks) != NONE;
}

/* The device page's bytes into host page hp: checksums of the device source first, so a
 * wrongly sized host copy cannot hide. */
static tdm_status_t store_bytes(tdm_hicache_t *hc, uint32_t page, uint32_t hp)
{
    if (hc->dv)
        return hc->dv->store(hc->dh, page, hp, hc->ck + (size_t)hp * hc->L * hc->S);
    for (uint32_t l = 0; l < hc->L; l++) {
        for (uint32_t s = 0; s < hc->S; s++)
            hc->ck[((size_t)hp * hc->L + l) * hc->S + s] = tdm_hicache_dev_checksum(hc, page, l, s);
        for (uint32_t s = 0; s < hc->n_copy_sub; s++)
            memcpy(tdm_hicache_host_addr(hc, hp, l, s),
                   tdm_kv_slot(&hc->dev, l, (tdm_kv_sub_t)s, page, 0), hc->copy_bytes[s]);
    }
    return TDM_OK;
}

/* Index host page hp (taken from the free list) under (hash, parent, toks). */
static void index_page(tdm_hicache_t *hc, uint32_t hp, uint64_t hash, uint64_t parent,
                       const int32_t *toks)
{
    hent_t *x = &hc->ents[hp];
    x->hash = hash;
    x->parent = parent;
    x->in = 1;
    x->pin = 0;
    if (toks)
        memcpy(hc->toks + (size_t)hp * hc->ps, toks, hc->ps * sizeof(int32_t));
    else
        memset(hc->toks + (size_t)hp * hc->ps, 0, hc->ps * sizeof(int32_t));
    x->bnext = hc->bucket[hash & hc->mask];
    hc->bucket[hash & hc->mask] = (int32_t)hp;
    lru_push_mru(hc, (int32_t)hp);
    hc->used++;
    hc->stores++;
}

void tdm_hicache_journal_put(tdm_hicache_t *hc, const uint32_t *w, uint32_t n)
{
    if (hc->jr_n + n > hc->jr_cap) {
        while (hc->jr_n + n > hc->jr_cap)
            hc->jr_cap = hc->jr_cap ? hc->jr_cap * 2 : 256;
        hc->jr = tdm_realloc(hc->jr, hc->jr_cap * sizeof(uint32_t));
    }
    memcpy(hc->jr + hc->jr_n, w, n * sizeof(uint32_t));
    hc->jr_n += n;
}

void tdm_hicache_journal(const tdm_hicache_t *hc, const uint32_t **ret_words, uint32_t *ret_n)
{
    *ret_words = hc->jr;
    *ret_n = hc->jr_n;
}

void tdm_hicache_journal_reset(tdm_hicache_t *hc)
{
    hc->jr_n = 0;
}

/* Replica: rank 0 stored device page `page` into host page hp (it evicted whatever hp held). */
static tdm_status_t replica_store(tdm_hicache_t *hc, uint32_t page, uint32_t hp)
{
    if (page >= hc->dev.num_pages || hp >= hc->n)
        return TDM_ERR_STATE;
    if (hc->ents[hp].in)
        tdm_hicache_drop(hc, hp);
    uint32_t i = 0;
    while (i < hc->n_free && hc->free_list[i] != hp)
        i++;
    if (i == hc->n_free)
        return TDM_ERR_STATE;
    hc->free_list[i] = hc->free_list[--hc->n_free];
    tdm_status_t st = store_bytes(hc, page, hp);
    if (st != TDM_OK) {
        hc->free_list[hc->n_free++] = hp;
        return st;
    }
    index_page(hc, hp, hp, 0, NULL); /* no tokens here: indexed by the host page id */
    return TDM_OK;
}

/* Replica: retire every load up to `upto`, the first verification failure kept pending. */
static void replica_retire_keep(tdm_hicache_t *hc, uint64_t upto)
{
    while (hc->rep_retired < upto && hc->rep_retired + 1 < hc->next_ticket) {
        uint32_t page = 0, layer = 0, sub = 0;
        uint64_t t = ++hc->rep_retired;
        if (tdm_hicache_wait(hc, t, &page, &layer, &sub) != TDM_OK && !hc->rep_bad_ticket) {
            hc->rep_bad_ticket = t;
            hc->rep_bad_page = page;
            hc->rep_bad_layer = layer;
            hc->rep_bad_sub = sub;
        }
    }
}

void tdm_hicache_replica_retire(tdm_hicache_t *hc, uint64_t upto, uint64_t *ret_ticket,
                                uint32_t *ret_page, uint32_t *ret_layer, uint32_t *ret_sub)
{
    replica_retire_keep(hc, upto);
    *ret_ticket = hc->rep_bad_ticket;
    *ret_page = hc->rep_bad_page;
    *ret_layer = hc->rep_bad_layer;
    *ret_sub = hc->rep_bad_sub;
    hc->rep_bad_ticket = 0;
}

tdm_status_t tdm_hicache_replay(tdm_hicache_t *hc, const uint32_t *w, uint32_t n)
{
    uint32_t i = 0;
    if (!hc->cfg.replica)
        return TDM_ERR_STATE;
    /* the loads of earlier plans end first: rank 0 reuses a load's device and host pages only
     * after its own wait, which this rank's copy thread must not outlive */
    replica_retire_keep(hc, UINT64_MAX);
    while (i < n) {
        if (w[i] == 1) {
            if (n - i < 3)
                return TDM_ERR_FORMAT;
            TDM_TRY(replica_store(hc, w[i + 1], w[i + 2]));
            i += 3;
        } else if (w[i] == 2) {
            if (n - i < 4)
                return TDM_ERR_FORMAT;
            uint32_t k = w[i + 1];
            uint64_t ticket = w[i + 2] | (uint64_t)w[i + 3] << 32, got = 0;
            if (k == 0 || (n - i - 4) / 2 < k)
                return TDM_ERR_FORMAT;
            if (ticket != hc->next_ticket)
                return TDM_ERR_STATE;
            /* the loads before this one retire first (a failure is kept for the gather): the
             * job slots rank 0 found free are free here too */
            replica_retire_keep(hc, ticket - 1);
            TDM_TRY(tdm_hicache_load(hc, w + i + 4, w + i + 4 + k, k, &got));
            if (got != ticket)
                return TDM_ERR_STATE;
            i += 4 + 2 * k;
        } else {
            return TDM_ERR_FORMAT;
        }
    }
    return TDM_OK;
}

tdm_status_t tdm_hicache_store(tdm_hicache_t *hc, uint32_t page, uint64_t hash, uint64_t parent,
                               const int32_t *toks)
{
    if (page >= hc->dev.num_pages)
        return TDM_ERR_RANGE;
    int32_t have = find(hc, hash, parent, toks);
    if (have != NONE) {
        lru_unlink(hc, have);
        lru_push_mru(hc, have);
        return TDM_OK;
    }
    if (hc->n_free == 0) {
        int32_t p = hc->lru;
        while (p != NONE && hc->ents[p].pin)
            p = hc->ents[p].lru_prev;
        if (p == NONE)
            return TDM_ERR_AGAIN;
        tdm_hicache_drop(hc, (uint32_t)p);
    }
    uint32_t hp = hc->free_list[--hc->n_free];
    tdm_status_t st = store_bytes(hc, page, hp);
    if (st != TDM_OK) {
        hc->free_list[hc->n_free++] = hp;
        return st;
    }
    if (hc->cfg.journal) {
        uint32_t w[3] = {1, page, hp};
        tdm_hicache_journal_put(hc, w, 3);
    }
    index_page(hc, hp, hash, parent, toks);
    return TDM_OK;
}

uint32_t tdm_hicache_match(tdm_hicache_t *hc, const int32_t *tokens, uint32_t first, uint32_t max,
                           uint64_t parent, uint32_t *ret_host)
{
    uint64_t h = parent;
    uint32_t k = 0;
    for (uint32_t i = first; k < max; i++) {
        const int32_t *t = tokens + (size_t)i * hc->ps;
        uint64_t nh = tdm_hash_xxh64(t, hc->ps * sizeof(int32_t), h);
        int32_t p = find(hc, nh, h, t);
        if (p == NONE)
            break;
        hc->ents[p].pin++;
        lru_unlink(hc, p);
        lru_push_mru(hc, p);
        ret_host[k++] = (uint32_t)p;
        h = nh;
    }
    return k;
}

void tdm_hicache_unpin(tdm_hicache_t *hc, const uint32_t *host, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (host[i] < hc->n && hc->ents[host[i]].pin)
            hc->ents[host[i]].pin--;
}

void tdm_hicache_flush(tdm_hicache_t *hc)
{
    for (int32_t p = hc->lru, up; p != NONE; p = up) {
        up = hc->ents[p].lru_prev;
        if (!hc->ents[p].pin)
            tdm_hicache_drop(hc, (uint32_t)p);
    }
}

void tdm_hicache_stats(tdm_hicache_t *hc, tdm_hicache_stats_t *ret)
{
    tdm_hicache_stats_t s;
    memset(&s, 0, sizeof(s));
    s.host_pages_total = hc->n;
    s.host_pages_used = hc->used;
    for (int32_t p = hc->mru; p != NONE; p = hc->ents[p].lru_next)
        s.host_pages_pinned += hc->ents[p].pin > 0;
    s.host_bytes = hc->bytes;
    s.stores = hc->stores;
    s.hits = hc->hits;
    s.loads = hc->loads;
    s.load_pages = hc->load_pages;
    s.load_bytes = __atomic_load_n(&hc->load_bytes, __ATOMIC_RELAXED);
    s.verified = __atomic_load_n(&hc->verified, __ATOMIC_RELAXED);
    s.verify_failures = __atomic_load_n(&hc->verify_failures, __ATOMIC_RELAXED);
    s.bypasses = tdm_kv_gate_bypasses(hc->gate);
    s.poison_reads = tdm_kv_gate_poison_reads(hc->gate);
    s.gate_waits = tdm_kv_gate_waits(hc->gate);
    for (uint32_t j = 0; j < hc->cfg.max_jobs; j++)
        s.loads_in_flight += hc->jobs[j].ticket != 0;
    *ret = s;
}
