/*
 * layout.c — the KV layout descriptor and the pool configurator (invariant I6).
 *
 * Everything that has a size in the KV cache is derived here from (model config, KV dtype, page
 * size, TP share) and nowhere else: bytes per token and page stride per sub-buffer, the region
 * offsets of the pool, the pool's total bytes, and — by searching over those same functions — the
 * page count a memory budget allows. The record handed to the codec is a copy of these numbers.
 */
#include "config.h"

#include <tdm/kv.h>
#include <tdm/mem.h>

static uint32_t dtype_bytes(tdm_dtype_t dt)
{
    switch (dt) {
    case TDM_DTYPE_F32:
        return 4;
    case TDM_DTYPE_F16:
    case TDM_DTYPE_BF16:
        return 2;
    case TDM_DTYPE_FP8_E4M3:
        return 1;
    default:
        return 0;
    }
}

tdm_status_t tdm_kv_layout_init(const tdm_model_config_t *cfg, tdm_dtype_t kv_dtype,
                                uint32_t page_size, uint32_t tp_size, uint32_t tp_rank,
                                tdm_kv_layout_t *ret_layout)
{
    tdm_kv_layout_t l;

    if (!cfg || !ret_layout || cfg->num_layers == 0 || cfg->num_kv_heads == 0 || cfg->head_dim == 0)
        return TDM_ERR_INVAL;
    if (page_size == 0 || page_size > TDM_KV_PAGE_SIZE_MAX)
        return TDM_ERR_RANGE;
    if (tp_size == 0 || tp_rank >= tp_size || cfg->num_kv_heads % tp_size != 0)
        return TDM_ERR_INVAL;
    if (kv_dtype != TDM_DTYPE_BF16 && kv_dtype != TDM_DTYPE_FP8_E4M3 && kv_dtype != TDM_DTYPE_F32)
        return TDM_ERR_UNSUPPORTED;

    memset(&l, 0, sizeof(l));
    l.tp_size = tp_size;
    l.tp_rank = tp_rank;
    l.num_layers = cfg->num_layers;
    l.num_kv_heads = cfg->num_kv_heads / tp_size;
    l.head_dim = cfg->head_dim;
    l.page_size = page_size;
    return tdm_kv_layout_with_dtype(&l, kv_dtype, ret_layout);
}

tdm_status_t tdm_kv_layout_with_dtype(const tdm_kv_layout_t *from, tdm_dtype_t kv_dtype,
                                      tdm_kv_layout_t *ret_layout)
{
    tdm_kv_layout_t l;
    size_t bpt;

    if (!from || !ret_layout)
        return TDM_ERR_INVAL;
    if (kv_dtype != TDM_DTYPE_BF16 && kv_dtype != TDM_DTYPE_FP8_E4M3 && kv_dtype != TDM_DTYPE_F32)
        return TDM_ERR_UNSUPPORTED;
    memset(&l, 0, sizeof(l));
    l.tp_size = from->tp_size;
    l.tp_rank = from->tp_rank;
    l.num_layers = from->num_layers;
    l.num_kv_heads = from->num_kv_heads;
    l.head_dim = from->head_dim;
    l.page_size = from->page_size;
    l.kv_dtype = kv_dtype;
    l.n_sub = kv_dtype == TDM_DTYPE_FP8_E4M3 ? 4 : 2;
    for (uint32_t s = 0; s < l.n_sub; s++) {
        tdm_kv_layout_sub_t *sub = &l.sub[s];
        int is_scale = s == TDM_KV_SUB_K_SCALE || s == TDM_KV_SUB_V_SCALE;
        sub->dtype = is_scale ? TDM_DTYPE_F32 : kv_dtype;
        TDM_TRY(tdm_size_mul(l.num_kv_heads, is_scale ? 1 : l.head_dim, &bpt));
        TDM_TRY(tdm_size_mul(bpt, dtype_bytes(sub->dtype), &bpt));
        if (bpt > UINT32_MAX)
            return TDM_ERR_OVERFLOW;
        sub->bytes_per_token = (uint32_t)bpt;
        sub->page_stride = (uint64_t)bpt * l.page_size;
    }
    *ret_layout = l;
    return TDM_OK;
}

void tdm_kv_layout_record(const tdm_kv_layout_t *l, uint32_t num_pages, tdm_layout_record_t *ret)
{
    tdm_layout_record_t r;

    memset(&r, 0, sizeof(r));
    r.kv_dtype = (uint8_t)l->kv_dtype;
    r.n_sub = (uint8_t)l->n_sub;
    r.tp_size = (uint16_t)l->tp_size;
    r.tp_rank = (uint16_t)l->tp_rank;
    r.num_layers = l->num_layers;
    r.num_kv_heads = l->num_kv_heads;
    r.head_dim = l->head_dim;
    r.page_size = l->page_size;
    r.num_pages = num_pages;
    for (uint32_t s = 0; s < l->n_sub; s++) {
        r.sub[s].kind = (uint8_t)s;
        r.sub[s].dtype = (uint8_t)l->sub[s].dtype;
        r.sub[s].bytes_per_token = l->sub[s].bytes_per_token;
        r.sub[s].page_stride = l->sub[s].page_stride;
    }
    *ret = r;
}

/* Aligned size of one region and the running offsets inside a layer. */
static tdm_status_t region_bytes(const tdm_kv_layout_t *l, uint32_t sub, uint64_t num_pages,
                                 uint64_t *ret)
{
    size_t b;
    TDM_TRY(tdm_size_mul(l->sub[sub].page_stride, num_pages, &b));
    TDM_TRY(tdm_size_align(b, TDM_KV_REGION_ALIGN, &b));
    *ret = b;
    return TDM_OK;
}

static tdm_status_t layer_bytes(const tdm_kv_layout_t *l, uint64_t num_pages, uint64_t *ret)
{
    uint64_t total = 0, r;
    for (uint32_t s = 0; s < l->n_sub; s++) {
        TDM_TRY(region_bytes(l, s, num_pages, &r));
        size_t t;
        TDM_TRY(tdm_size_add(total, r, &t));
        total = t;
    }
    *ret = total;
    return TDM_OK;
}

tdm_status_t tdm_kv_layout_pool_bytes(const tdm_kv_layout_t *l, uint64_t num_pages,
                                      uint64_t *ret_bytes)
{
    uint64_t lb;
    size_t total;
    if (!l || !ret_bytes)
        return TDM_ERR_INVAL;
    TDM_TRY(layer_bytes(l, num_pages, &lb));
    TDM_TRY(tdm_size_mul(lb, l->num_layers, &total));
    *ret_bytes = total;
    return TDM_OK;
}

uint64_t tdm_kv_layout_region_offset(const tdm_kv_layout_t *l, uint32_t num_pages, uint32_t layer,
                                     tdm_kv_sub_t sub)
{
    uint64_t lb = 0, off = 0, r = 0;
    /* A pool that exists has passed tdm_kv_layout_pool_bytes, so nothing below overflows. */
    (void)layer_bytes(l, num_pages, &lb);
    for (uint32_t s = 0; s < (uint32_t)sub; s++) {
        (void)region_bytes(l, s, num_pages, &r);
        off += r;
    }
    return (uint64_t)layer * lb + off;
}

tdm_status_t tdm_kv_pool_configure(const tdm_kv_layout_t *l, uint64_t budget_bytes,
                                   uint32_t max_pages, uint32_t *ret_num_pages)
{
    uint64_t lo = 0, hi, bytes;

    if (!l || !ret_num_pages)
        return TDM_ERR_INVAL;
    hi = max_pages ? max_pages : UINT32_MAX - 1;
    /* Largest n with pool_bytes(n) <= budget: pool_bytes is monotonic in n, so bisect. */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (tdm_kv_layout_pool_bytes(l, mid, &bytes) == TDM_OK && bytes <= budget_bytes)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0)
        return TDM_ERR_NOMEM;
    *ret_num_pages = (uint32_t)lo;
    return TDM_OK;
}
