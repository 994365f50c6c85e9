/*
 * tdm/kv.h — the paged KV cache: layout descriptor, pool, page allocator, sequence page tables.
 *
 * Layout descriptor (invariant I6: the single source of truth). tdm_kv_layout_init() derives,
 * from the model config, the KV dtype, the page size and this rank's share of KV heads, every
 * size the cache has: per sub-buffer its element dtype, bytes per token and page stride. The
 * pool, the host mirror, the transfer code and the configurator never compute a KV size of their
 * own: they ask the descriptor (tdm_kv_layout_pool_bytes, tdm_kv_layout_region_offset) and it
 * fills the tdm_layout_record_t that is reported and compared (include/tdm/layout.h).
 *
 * Pool layout (host pool here; the CUDA device pool uses the same offsets on one cudaMalloc):
 *   one allocation, layer-major; inside a layer one region per sub-buffer, in tdm_kv_sub_t
 *   order, each region starting on a TDM_KV_REGION_ALIGN boundary:
 *     region(layer, sub) = base + layer * layer_bytes + sub_offset[sub]
 *   K and V regions:        [num_pages][page_size][kv_heads_r][head_dim]   elements of kv dtype
 *   K_SCALE/V_SCALE (fp8):  [num_pages][page_size][kv_heads_r]            fp32
 *   page_stride = page_size * bytes_per_token (no padding: every stride is a multiple of 4).
 *   So one page of one layer and one sub-buffer is contiguous: the unit the transfer moves.
 * Page size: default TDM_KV_PAGE_SIZE_DEFAULT (16 tokens), any value in [1, 1024]. Attention
 * walks keys in blocks of TDM_ATTN_BLOCK (16) absolute positions regardless of the page size.
 *
 * KV dtypes: bf16 (default; RNE from fp32), fp8 e4m3 (OCP "fn": bias 7, max 448, no inf,
 * 0x7f/0xff NaN; RNE and saturating to ±448) with one fp32 scale per token per KV head,
 * scale = amax/448 (1.0 when amax is 0 or not finite), stored value = e4m3(x / scale); f32 is
 * allowed for conformance tests, f16 is refused.
 *
 * Allocator: pages are ids in [0, num_pages); a LIFO free list; each page carries a refcount
 * (alloc gives 1; tdm_kv_page_ref adds sharers for prefix sharing; the page returns to the free
 * list when the count drops to 0). Allocation is all-or-nothing. Sequences own a page table
 * (tdm_kv_seq_t) capped at max_pages_per_seq.
 *
 * Threading: a pool's allocator and sequence functions are not thread-safe (the rank-0 leader
 * decides page ids and broadcasts them); the KV memory is written by the backend kernels.
 * Errors: TDM_ERR_INVAL (bad argument), TDM_ERR_UNSUPPORTED (dtype), TDM_ERR_OVERFLOW (size
 * math), TDM_ERR_NOMEM (pool memory, or no free pages: TDM_ERR_AGAIN), TDM_ERR_RANGE (page id,
 * sequence cap). Outputs are written only on success.
 */
#ifndef TDM_KV_H
#define TDM_KV_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tdm/layout.h>
#include <tdm/model.h>
#include <tdm/status.h>

#define TDM_KV_PAGE_SIZE_DEFAULT 16u
#define TDM_KV_PAGE_SIZE_MAX 1024u
#define TDM_KV_REGION_ALIGN 256u
#define TDM_KV_FP8_MAX 448.0f

typedef struct tdm_kv_layout_sub {
    tdm_dtype_t dtype;
    uint32_t bytes_per_token; /* one token, all of this rank's KV heads */
    uint64_t page_stride;     /* page_size * bytes_per_token */
} tdm_kv_layout_sub_t;

typedef struct tdm_kv_layout {
    tdm_dtype_t kv_dtype;
    uint32_t n_sub; /* 2, or 4 with fp8 scales */
    uint32_t tp_size, tp_rank;
    uint32_t num_layers;
    uint32_t num_kv_heads; /* this rank's KV heads */
    uint32_t head_dim;
    uint32_t page_size;
    tdm_kv_layout_sub_t sub[TDM_KV_SUB_MAX];
} tdm_kv_layout_t;

/* Build the descriptor. kv_dtype BF16, FP8_E4M3 or F32; page_size in [1, TDM_KV_PAGE_SIZE_MAX];
 * tp_size must divide cfg->num_kv_heads and tp_rank < tp_size. */
tdm_status_t tdm_kv_layout_init(const tdm_model_config_t *cfg, tdm_dtype_t kv_dtype,
                                uint32_t page_size, uint32_t tp_size, uint32_t tp_rank,
                                tdm_kv_layout_t *ret_layout);
/* The same descriptor (heads, head_dim, layers, page size, TP share) for another KV dtype: the
 * one derivation of every sub-buffer size, shared by tdm_kv_layout_init. */
tdm_status_t tdm_kv_layout_with_dtype(const tdm_kv_layout_t *from, tdm_dtype_t kv_dtype,
                                      tdm_kv_layout_t *ret_layout);
/* The record (include/tdm/layout.h) for a pool of num_pages pages. */
void tdm_kv_layout_record(const tdm_kv_layout_t *l, uint32_t num_pages, tdm_layout_record_t *ret);
/* Bytes of a pool of num_pages pages (all layers, all sub-buffers, alignment included). */
tdm_status_t tdm_kv_layout_pool_bytes(const tdm_kv_layout_t *l, uint64_t num_pages,
                                      uint64_t *ret_bytes);
/* Byte offset of region(layer, sub) from the pool base for a pool of num_pages pages. */
uint64_t tdm_kv_layout_region_offset(const tdm_kv_layout_t *l, uint32_t num_pages, uint32_t layer,
                                     tdm_kv_sub_t sub);
/* Pool configurator: the largest page count whose pool fits in budget_bytes, computed through
 * tdm_kv_layout_pool_bytes only, capped at max_pages (0 = UINT32_MAX - 1). TDM_ERR_NOMEM when
 * not even one page fits. */
tdm_status_t tdm_kv_pool_configure(const tdm_kv_layout_t *l, uint64_t budget_bytes,
                                   uint32_t max_pages, uint32_t *ret_num_pages);

/* What the kernels see: the descriptor, the pool base and the page count. Region addresses come
 * from precomputed offsets so a kernel never recomputes the layout. */
typedef struct tdm_kv_buffers {
    const tdm_kv_layout_t *layout;
    uint8_t *base;
    uint32_t num_pages;
    uint64_t layer_bytes;
    uint64_t sub_offset[TDM_KV_SUB_MAX];
    /* canary mode (include/tdm/hicache.h): attention adds 1 per K/V head it reads holding the
     * poison pattern; NULL = not counted */
    uint64_t *poison_reads;
} tdm_kv_buffers_t;

/* Address of token slot `slot` of page `page` in region(layer, sub). */
static inline uint8_t *tdm_kv_slot(const tdm_kv_buffers_t *b, uint32_t layer, tdm_kv_sub_t sub,
                                   uint32_t page, uint32_t slot)
{
    const tdm_kv_layout_sub_t *s = &b->layout->sub[sub];
    return b->base + (uint64_t)layer * b->layer_bytes + b->sub_offset[sub] +
           (uint64_t)page * s->page_stride + (uint64_t)slot * s->bytes_per_token;
}

typedef struct tdm_kv_pool tdm_kv_pool_t;

/* Allocate a zeroed pool of num_pages pages laid out by `l` (copied). */
tdm_status_t tdm_kv_pool_init(const tdm_kv_layout_t *l, uint32_t num_pages,
                              tdm_kv_pool_t **ret_pool);
/* The same over caller memory: `base` aligned to TDM_KV_REGION_ALIGN and at least
 * tdm_kv_layout_pool_bytes() long (`bytes`), else TDM_ERR_INVAL. The pool zeroes it;
 * tdm_kv_pool_free leaves the memory to the caller, who must keep it until then. */
tdm_status_t tdm_kv_pool_init_mem(const tdm_kv_layout_t *l, uint32_t num_pages, void *base,
                                  uint64_t bytes, tdm_kv_pool_t **ret_pool);
/* Page accounting only (ids, refcounts, the free list) for KV held elsewhere (the CUDA engine's
 * device pool): no host memory; tdm_kv_pool_buffers()->base is NULL and must not be used. */
tdm_status_t tdm_kv_pool_init_pages(const tdm_kv_layout_t *l, uint32_t num_pages,
                                    tdm_kv_pool_t **ret_pool);
void tdm_kv_pool_free(tdm_kv_pool_t *p);
const tdm_kv_buffers_t *tdm_kv_pool_buffers(const tdm_kv_pool_t *p);
const tdm_kv_layout_t *tdm_kv_pool_layout(const tdm_kv_pool_t *p);
uint32_t tdm_kv_pool_num_pages(const tdm_kv_pool_t *p);
uint32_t tdm_kv_pool_free_pages(const tdm_kv_pool_t *p);

/* Which free page is handed out next. LIFO (the default): the one freed last. LOWEST: the lowest
 * free id, so the live pages stay packed at the pool's start (a min-heap: O(log n) a page). */
typedef enum { TDM_KV_ALLOC_LIFO = 0, TDM_KV_ALLOC_LOWEST = 1 } tdm_kv_alloc_order_t;
/* Switch the order at any time (the free ids are rearranged in place); TDM_ERR_INVAL otherwise. */
tdm_status_t tdm_kv_pool_set_order(tdm_kv_pool_t *p, tdm_kv_alloc_order_t order);
/* "lifo" or "lowest" (TDM_KV_ALLOC, docs/contracts.md); TDM_ERR_INVAL for anything else. */
tdm_status_t tdm_kv_alloc_order_parse(const char *s, tdm_kv_alloc_order_t *ret);

/* All-or-nothing: n page ids into ret_ids (refcount 1 each), or TDM_ERR_AGAIN if fewer than n
 * pages are free. */
tdm_status_t tdm_kv_page_alloc(tdm_kv_pool_t *p, uint32_t n, uint32_t *ret_ids);
tdm_status_t tdm_kv_page_ref(tdm_kv_pool_t *p, uint32_t page);
/* Drop one reference; TDM_ERR_STATE if the page is not allocated. */
tdm_status_t tdm_kv_page_unref(tdm_kv_pool_t *p, uint32_t page);
uint32_t tdm_kv_page_refcount(const tdm_kv_pool_t *p, uint32_t page);

/* A sequence's page table: pages[i] holds absolute positions [i*page_size, (i+1)*page_size). */
typedef struct tdm_kv_seq {
    uint32_t *pages;
    uint32_t n_pages, cap_pages;
    uint32_t n_tokens; /* positions covered by reserve (written or about to be) */
} tdm_kv_seq_t;

void tdm_kv_seq_init(tdm_kv_seq_t *s, uint32_t max_pages_per_seq);
/* Make the table cover n_tokens positions, allocating the missing pages (all-or-nothing).
 * TDM_ERR_RANGE beyond max_pages_per_seq, TDM_ERR_AGAIN when the pool has too few pages. */
tdm_status_t tdm_kv_seq_reserve(tdm_kv_pool_t *p, tdm_kv_seq_t *s, uint32_t n_tokens);
/* Unref every page and empty the table (the table's memory is kept; seq_free releases it). */
void tdm_kv_seq_release(tdm_kv_pool_t *p, tdm_kv_seq_t *s);
void tdm_kv_seq_free(tdm_kv_pool_t *p, tdm_kv_seq_t *s);

/* fp8 e4m3 ("fn") conversions. Encode: round to nearest even, saturate to ±448, NaN → 0x7f. */
static inline uint8_t tdm_kv_fp8_encode(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    float a = fabsf(x);
    if (a != a)
        return 0x7f;
    if (a >= TDM_KV_FP8_MAX)
        return (uint8_t)(sign | 0x7e);
    /* Normal range: exponents -6..8 (bias 7), 3 mantissa bits. Below 2^-6 subnormals with step
     * 2^-9. Round by adding then truncating on the fp32 bit pattern (RNE). */
    memcpy(&u, &a, 4);
    int e = (int)(u >> 23) - 127;
    if (e < -6) {
        /* subnormal: value = m * 2^-9, m in [0, 8]; nearbyintf honours the default RNE mode */
        float m = nearbyintf(a * 512.0f);
        return (uint8_t)(sign | (uint8_t)m); /* m == 8 is the smallest normal, 0x08 */
    }
    uint32_t lsb = (u >> 20) & 1u;
    u += 0x7ffffu + lsb; /* round mantissa to 3 bits, ties to even */
    u &= ~0xfffffu;
    e = (int)(u >> 23) - 127;
    uint32_t mant = (u >> 20) & 7u;
    uint32_t code = ((uint32_t)(e + 7) << 3) | mant;
    if (code > 0x7e)
        code = 0x7e;
    return (uint8_t)(sign | code);
}

static inline float tdm_kv_fp8_decode(uint8_t v)
{
    uint32_t e = (v >> 3) & 0xfu, m = v & 7u;
    float r;
    if ((v & 0x7f) == 0x7f)
        return NAN;
    if (e == 0)
        r = (float)m * (1.0f / 512.0f);
    else
        r = ldexpf(1.0f + (float)m * 0.125f, (int)e - 7);
    return (v & 0x80) ? -r : r;
}

/* Per-token-per-head scale for n values: amax/448, or 1 when amax is 0 or not finite. */
static inline float tdm_kv_fp8_scale(const float *x, uint32_t n)
{
    float amax = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax)
            amax = a;
    }
    if (!(amax > 0.0f) || !isfinite(amax))
        return 1.0f;
    return amax / TDM_KV_FP8_MAX;
}

#endif
