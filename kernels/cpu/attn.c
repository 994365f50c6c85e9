/*
 * attn.c — KV write and causal paged attention on the CPU (backend.h rules 3 and 4).
 *
 * The write converts each token's K and V per head into the cache dtype (bf16 RNE, fp8 e4m3 with
 * an amax/448 scale per token per head, or f32). Attention never sees the fresh fp32 K/V: it
 * dequantises what the cache holds, so every way of splitting a prompt into chunks, and decode
 * one token at a time, read identical keys. Keys are visited in TDM_ATTN_BLOCK blocks of absolute
 * positions with an online softmax. The work is split over (row tile, KV head) pairs: a block of
 * K/V is dequantised once for a tile of up to 16 consecutive query rows of one sequence and all
 * the query heads that share the KV head (GQA), not once per (query, head).
 */
#include "config.h"

#include <math.h>

#include <tdm/hicache.h>

#include "kernels/cpu/cpu_int.h"

/* All pages a row touches must exist and be in the pool; checked before anything is written. */
static tdm_status_t check_rows(const tdm_kv_buffers_t *kv, uint32_t layer,
                               const tdm_attn_row_t *rows, uint32_t n)
{
    uint32_t ps = kv->layout->page_size;
    if (layer >= kv->layout->num_layers)
        return TDM_ERR_RANGE;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t last = rows[i].pos / ps;
        if (!rows[i].pages || last >= rows[i].n_pages)
            return TDM_ERR_RANGE;
        for (uint32_t p = 0; p <= last; p++)
            if (rows[i].pages[p] >= kv->num_pages)
                return TDM_ERR_RANGE;
    }
    return TDM_OK;
}

static void store_head(const tdm_kv_buffers_t *kv, uint8_t *dst, float *scale_dst, const float *x,
                       uint32_t hd)
{
    switch (kv->layout->kv_dtype) {
    case TDM_DTYPE_BF16: {
        uint16_t *d = (uint16_t *)dst;
        for (uint32_t e = 0; e < hd; e++)
            d[e] = tdm_cpu_to_bf16(x[e]);
        break;
    }
    case TDM_DTYPE_FP8_E4M3: {
        float s = tdm_kv_fp8_scale(x, hd);
        for (uint32_t e = 0; e < hd; e++)
            dst[e] = tdm_kv_fp8_encode(x[e] / s);
        *scale_dst = s;
        break;
    }
    default:
        memcpy(dst, x, (size_t)hd * sizeof(float));
        break;
    }
}

typedef struct kvw_job {
    const tdm_kv_buffers_t *kv;
    uint32_t layer;
    const float *k, *v;
    const tdm_attn_row_t *rows;
} kvw_job_t;

static void kvw_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    kvw_job_t *j = arg;
    const tdm_kv_layout_t *l = j->kv->layout;
    uint32_t kvh = l->num_kv_heads, hd = l->head_dim, ps = l->page_size;
    size_t elt = l->sub[TDM_KV_SUB_K].bytes_per_token / kvh;
    int fp8 = l->kv_dtype == TDM_DTYPE_FP8_E4M3;

    for (size_t i = lo; i < hi; i++) {
        uint32_t pos = j->rows[i].pos, page = j->rows[i].pages[pos / ps], slot = pos % ps;
        uint8_t *kd = tdm_kv_slot(j->kv, j->layer, TDM_KV_SUB_K, page, slot);
        uint8_t *vd = tdm_kv_slot(j->kv, j->layer, TDM_KV_SUB_V, page, slot);
        float *ks =
            fp8 ? (float *)tdm_kv_slot(j->kv, j->layer, TDM_KV_SUB_K_SCALE, page, slot) : NULL;
        float *vs =
            fp8 ? (float *)tdm_kv_slot(j->kv, j->layer, TDM_KV_SUB_V_SCALE, page, slot) : NULL;
        for (uint32_t h = 0; h < kvh; h++) {
            const float *kx = j->k + ((size_t)i * kvh + h) * hd;
            const float *vx = j->v + ((size_t)i * kvh + h) * hd;
            store_head(j->kv, kd + h * elt, ks ? ks + h : NULL, kx, hd);
            store_head(j->kv, vd + h * elt, vs ? vs + h : NULL, vx, hd);
        }
    }
}

tdm_status_t tdm_cpu_kv_write(void *ctx, const tdm_kv_buffers_t *kv, uint32_t layer, const float *k,
                              const float *v, const tdm_attn_row_t *rows, uint32_t n)
{
    kvw_job_t j = {kv, layer, k, v, rows};
    if (!ctx || !kv || !kv->layout || (n && (!k || !v || !rows)))
        return TDM_ERR_INVAL;
    TDM_TRY(check_rows(kv, layer, rows, n));
    tdm_cpu_parallel(ctx, n, 8, kvw_range, &j);
    return TDM_OK;
}

/* Canary mode: does head h of this slot hold the poison a HiCache load fills its destination
 * with (include/tdm/hicache.h)? Then the page was read before its load completed. */
static int is_poison(const tdm_kv_layout_t *l, const uint8_t *src, uint32_t h)
{
    uint32_t hd = l->head_dim;
    switch (l->kv_dtype) {
    case TDM_DTYPE_BF16:
        for (uint32_t e = 0; e < hd; e++) {
            uint16_t v;
            memcpy(&v, src + ((size_t)h * hd + e) * 2, 2);
            if (v == TDM_KV_POISON_BF16)
                return 1;
        }
        return 0;
    case TDM_DTYPE_FP8_E4M3:
        for (uint32_t e = 0; e < hd; e++)
            if (src[(size_t)h * hd + e] == TDM_KV_POISON_FP8)
                return 1;
        return 0;
    default:
        for (uint32_t e = 0; e < hd; e++) {
            uint32_t v;
            memcpy(&v, src + ((size_t)h * hd + e) * 4, 4);
            if (v == TDM_KV_POISON_F32)
                return 1;
        }
        return 0;
    }
}

/* Dequantise head h of token slot (page, slot) of sub-buffer `sub` into dst (hd floats). */
static void load_head(const tdm_kv_buffers_t *kv, const tdm_cpu_ops_t *ops, const float *lut,
                      uint32_t layer, tdm_kv_sub_t sub, uint32_t page, uint32_t slot, uint32_t h,
                      float *dst)
{
    const tdm_kv_layout_t *l = kv->layout;
    uint32_t hd = l->head_dim;
    const uint8_t *src = tdm_kv_slot(kv, layer, sub, page, slot);
    if (kv->poison_reads && is_poison(l, src, h))
        __atomic_fetch_add(kv->poison_reads, 1, __ATOMIC_RELAXED);
    switch (l->kv_dtype) {
    case TDM_DTYPE_BF16: {
        ops->bf16_to_f32((const uint16_t *)src + (size_t)h * hd, dst, hd);
        break;
    }
    case TDM_DTYPE_FP8_E4M3: {
        tdm_kv_sub_t ssub = sub == TDM_KV_SUB_K ? TDM_KV_SUB_K_SCALE : TDM_KV_SUB_V_SCALE;
        float sc;
        memcpy(&sc, tdm_kv_slot(kv, layer, ssub, page, slot) + (size_t)h * 4, 4);
        const uint8_t *s = src + (size_t)h * hd;
        for (uint32_t e = 0; e < hd; e++)
            dst[e] = lut[s[e]] * sc;
        break;
    }
    default:
        memcpy(dst, src + (size_t)h * hd * sizeof(float), (size_t)hd * sizeof(float));
        break;
    }
}

/* Query rows per tile: consecutive positions of one sequence, which share every key block
 * below the first row's position. */
#define ATTN_ROWS 16u

typedef struct attn_job {
    const tdm_kv_buffers_t *kv;
    uint32_t layer, heads, group;
    const float *q;
    const tdm_attn_row_t *rows;
    const uint32_t *tiles; /* tile t = rows [tiles[t], tiles[t + 1]) */
    float *out;
    tdm_cpu_pool_t *pool;
    const tdm_cpu_ops_t *ops;
    int oom;
} attn_job_t;

/* One work item = (row tile, KV head): each key/value block is dequantised once and used by
 * every query row of the tile and every query head of the KV head's group. The per-(row, head)
 * sequence of operations is rule 4 exactly, whatever the tile: scores of the block (rule-1 dots
 * times scale), block max, rescale by exp(m_old - m_new), exp-weights summed and accumulated
 * in position order. */
static void attn_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    attn_job_t *j = arg;
    const tdm_kv_layout_t *l = j->kv->layout;
    const tdm_cpu_ops_t *ops = j->ops;
    uint32_t hd = l->head_dim, ps = l->page_size, H = j->heads, G = j->group;
    uint32_t kvh = l->num_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    size_t states = (size_t)ATTN_ROWS * G;
    /* scratch: o[states][hd], m[states], lsum[states], kb[16][hd], vb[16][hd] */
    float *o = tdm_cpu_scratch(&j->pool->scratch[tid],
                               states * (hd + 2) + 2 * (size_t)TDM_ATTN_BLOCK * hd);
    float *m, *lsum, *kb, *vb, sc[TDM_ATTN_BLOCK], pw[TDM_ATTN_BLOCK];

    if (!o) {
        __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED);
        return;
    }
    m = o + states * hd;
    lsum = m + states;
    kb = lsum + states;
    vb = kb + (size_t)TDM_ATTN_BLOCK * hd;
    for (size_t item = lo; item < hi; item++) {
        uint32_t tile = (uint32_t)(item / kvh), g = (uint32_t)(item % kvh);
        uint32_t i0 = j->tiles[tile], nr = j->tiles[tile + 1] - i0;
        const tdm_attn_row_t *r0 = &j->rows[i0];
        uint32_t last = r0->pos + nr - 1;

        memset(o, 0, (size_t)nr * G * hd * sizeof(float));
        for (size_t st = 0; st < (size_t)nr * G; st++) {
            m[st] = -INFINITY;
            lsum[st] = 0.0f;
        }
        for (uint32_t s = 0; s <= last; s += TDM_ATTN_BLOCK) {
            uint32_t be = last + 1 - s < TDM_ATTN_BLOCK ? last + 1 : s + TDM_ATTN_BLOCK;
            for (uint32_t t = s; t < be; t++) {
                load_head(j->kv, ops, j->pool->fp8_lut, j->layer, TDM_KV_SUB_K, r0->pages[t / ps],
                          t % ps, g, kb + (size_t)(t - s) * hd);
                load_head(j->kv, ops, j->pool->fp8_lut, j->layer, TDM_KV_SUB_V, r0->pages[t / ps],
                          t % ps, g, vb + (size_t)(t - s) * hd);
            }
            /* rows whose position reaches into this block: the first one is at s - r0->pos */
            uint32_t first = s > r0->pos ? s - r0->pos : 0;
            for (uint32_t ri = first; ri < nr; ri++) {
                uint32_t pos = r0->pos + ri;
                uint32_t nt = (pos + 1 - s < TDM_ATTN_BLOCK ? pos + 1 : s + TDM_ATTN_BLOCK) - s;
                for (uint32_t gh = 0; gh < G; gh++) {
                    size_t st = (size_t)ri * G + gh;
                    const float *q = j->q + ((size_t)(i0 + ri) * H + (size_t)g * G + gh) * hd;
                    float bm = -INFINITY, mn, c;
                    ops->dots(q, kb, hd, nt, sc);
                    for (uint32_t t = 0; t < nt; t++) {
                        sc[t] = sc[t] * scale;
                        if (sc[t] > bm)
                            bm = sc[t];
                    }
                    mn = bm > m[st] ? bm : m[st];
                    c = m[st] == -INFINITY ? 0.0f : expf(m[st] - mn);
                    lsum[st] = lsum[st] * c;
                    for (uint32_t t = 0; t < nt; t++) {
                        pw[t] = expf(sc[t] - mn);
                        lsum[st] = lsum[st] + pw[t];
                    }
                    ops->attn_acc(o + st * hd, c, pw, vb, hd, nt);
                    m[st] = mn;
                }
            }
        }
        for (uint32_t ri = 0; ri < nr; ri++)
            for (uint32_t gh = 0; gh < G; gh++) {
                size_t st = (size_t)ri * G + gh;
                float *dst = j->out + ((size_t)(i0 + ri) * H + (size_t)g * G + gh) * hd;
                for (uint32_t d = 0; d < hd; d++)
                    dst[d] = o[st * hd + d] / lsum[st];
            }
    }
}

tdm_status_t tdm_cpu_attention(void *ctx, const tdm_kv_buffers_t *kv, uint32_t layer,
                               const float *q, uint32_t heads, const tdm_attn_row_t *rows,
                               uint32_t n, float *out)
{
    tdm_cpu_pool_t *pool = ctx;
    attn_job_t j;
    uint32_t *tiles, ntiles = 0;

    if (!ctx || !kv || !kv->layout || (n && (!q || !rows || !out)))
        return TDM_ERR_INVAL;
    if (heads == 0 || heads % kv->layout->num_kv_heads != 0)
        return TDM_ERR_INVAL;
    TDM_TRY(check_rows(kv, layer, rows, n));
    if (n == 0)
        return TDM_OK;
    tiles = (uint32_t *)tdm_cpu_scratch(&pool->tiles, (size_t)n + 1);
    if (!tiles)
        return TDM_ERR_NOMEM;
    for (uint32_t i = 0; i < n; i++) {
        if (ntiles > 0) {
            uint32_t t0 = tiles[ntiles - 1];
            if (i - t0 < ATTN_ROWS && rows[i].pages == rows[t0].pages &&
                rows[i].pos == rows[t0].pos + (i - t0))
                continue;
        }
        tiles[ntiles++] = i;
    }
    tiles[ntiles] = n;
    memset(&j, 0, sizeof(j));
    j.kv = kv;
    j.layer = layer;
    j.heads = heads;
    j.group = heads / kv->layout->num_kv_heads;
    j.q = q;
    j.rows = rows;
    j.tiles = tiles;
    j.out = out;
    j.pool = pool;
    /* The SIMD dots need head_dim % 8 == 0 and <= 512; the tables fall back themselves, this
     * keeps the choice visible. */
    j.ops = kv->layout->head_dim % 8 == 0 && kv->layout->head_dim <= 2 * TDM_ROPE_MAX_HALF
                ? pool->ops
                : &tdm_cpu_ops_generic;
    tdm_cpu_parallel(pool, (size_t)ntiles * kv->layout->num_kv_heads, 1, attn_range, &j);
    return j.oom ? TDM_ERR_NOMEM : TDM_OK;
}
