/*
 * attn.c — KV write and causal paged attention on the CPU (backend.h rules 3 and 4).
 *
 * The write converts each token's K and V per head into the cache dtype (bf16 RNE, fp8 e4m3 with
 * an amax/448 scale per token per head, or f32). Attention never sees the fresh fp32 K/V: it
 * dequantises what the cache holds, so every way of splitting a prompt into chunks, and decode
 * one token at a time, read identical keys. Keys are visited in TDM_ATTN_BLOCK blocks of absolute
 * positions with an online softmax; the work is split over (row, head) pairs.
 */
#include "config.h"

#include <math.h>

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

/* Dequantise head h of token slot (page, slot) of sub-buffer `sub` into dst (hd floats). */
static void load_head(const tdm_kv_buffers_t *kv, const float *lut, uint32_t layer,
                      tdm_kv_sub_t sub, uint32_t page, uint32_t slot, uint32_t h, float *dst)
{
    const tdm_kv_layout_t *l = kv->layout;
    uint32_t hd = l->head_dim;
    const uint8_t *src = tdm_kv_slot(kv, layer, sub, page, slot);
    switch (l->kv_dtype) {
    case TDM_DTYPE_BF16: {
        const uint16_t *s = (const uint16_t *)src + (size_t)h * hd;
        for (uint32_t e = 0; e < hd; e++)
            dst[e] = tdm_cpu_bf16(s[e]);
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

typedef struct attn_job {
    const tdm_kv_buffers_t *kv;
    uint32_t layer, heads;
    const float *q;
    const tdm_attn_row_t *rows;
    float *out;
    tdm_cpu_pool_t *pool;
    int oom;
} attn_job_t;

static void attn_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    attn_job_t *j = arg;
    const tdm_kv_layout_t *l = j->kv->layout;
    uint32_t hd = l->head_dim, ps = l->page_size, H = j->heads, group = H / l->num_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    /* scratch: o[hd], kbuf[hd], vbuf[hd] */
    float *o = tdm_cpu_scratch(&j->pool->scratch[tid], 3 * (size_t)hd);
    float *kb, *vb, sc[TDM_ATTN_BLOCK];

    if (!o) {
        __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED);
        return;
    }
    kb = o + hd;
    vb = kb + hd;
    for (size_t it = lo; it < hi; it++) {
        size_t i = it / H;
        uint32_t h = (uint32_t)(it % H), g = h / group;
        const tdm_attn_row_t *row = &j->rows[i];
        const float *q = j->q + it * hd;
        float m = -INFINITY, lsum = 0.0f;

        memset(o, 0, (size_t)hd * sizeof(float));
        for (uint32_t s = 0; s <= row->pos; s += TDM_ATTN_BLOCK) {
            uint32_t e = row->pos + 1 - s < TDM_ATTN_BLOCK ? row->pos + 1 : s + TDM_ATTN_BLOCK;
            float bm = -INFINITY, c;
            for (uint32_t t = s; t < e; t++) {
                load_head(j->kv, j->pool->fp8_lut, j->layer, TDM_KV_SUB_K, row->pages[t / ps],
                          t % ps, g, kb);
                sc[t - s] = tdm_dot_f32(q, kb, hd) * scale;
                if (sc[t - s] > bm)
                    bm = sc[t - s];
            }
            float mn = bm > m ? bm : m;
            c = m == -INFINITY ? 0.0f : expf(m - mn);
            lsum = lsum * c;
            for (uint32_t d = 0; d < hd; d++)
                o[d] = o[d] * c;
            for (uint32_t t = s; t < e; t++) {
                float p = expf(sc[t - s] - mn);
                lsum = lsum + p;
                load_head(j->kv, j->pool->fp8_lut, j->layer, TDM_KV_SUB_V, row->pages[t / ps],
                          t % ps, g, vb);
                for (uint32_t d = 0; d < hd; d++)
                    o[d] = o[d] + p * vb[d];
            }
            m = mn;
        }
        float *dst = j->out + it * hd;
        for (uint32_t d = 0; d < hd; d++)
            dst[d] = o[d] / lsum;
    }
}

tdm_status_t tdm_cpu_attention(void *ctx, const tdm_kv_buffers_t *kv, uint32_t layer,
                               const float *q, uint32_t heads, const tdm_attn_row_t *rows,
                               uint32_t n, float *out)
{
    attn_job_t j;
    if (!ctx || !kv || !kv->layout || (n && (!q || !rows || !out)))
        return TDM_ERR_INVAL;
    if (heads == 0 || heads % kv->layout->num_kv_heads != 0)
        return TDM_ERR_INVAL;
    TDM_TRY(check_rows(kv, layer, rows, n));
    memset(&j, 0, sizeof(j));
    j.kv = kv;
    j.layer = layer;
    j.heads = heads;
    j.q = q;
    j.rows = rows;
    j.out = out;
    j.pool = ctx;
    tdm_cpu_parallel(ctx, (size_t)n * heads, 4, attn_range, &j);
    return j.oom ? TDM_ERR_NOMEM : TDM_OK;
}
