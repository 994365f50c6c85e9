/*
 * generic.c — the portable C kernel table (tdm_cpu_ops_t): what runs where no SIMD table
 * applies, and the reference the AVX2 table is tested against bit for bit. Each dot product
 * keeps the 8 scalar lane sums of backend.h rule 1 per 64-block, so its rounding sequence is the
 * one an 8-wide vector accumulator performs.
 */
#include "config.h"

#include "kernels/cpu/cpu_int.h"

static int generic_supported(void)
{
    return 1;
}

/* Rule-1 partial of one block of n <= 64 elements. */
static float block_dot(const float *w, const uint16_t *wh, const float *x, uint32_t n)
{
    float s[TDM_DOT_LANES] = {0};
    for (uint32_t g = 0; g < n; g += TDM_DOT_LANES) {
        uint32_t m = n - g < TDM_DOT_LANES ? n - g : TDM_DOT_LANES;
        for (uint32_t l = 0; l < m; l++) {
            float wv = wh ? tdm_cpu_bf16(wh[g + l]) : w[g + l];
            s[l] = s[l] + wv * x[g + l];
        }
    }
    return tdm_cpu_lane_tree(s);
}

static void generic_mm_tile(const tdm_cpu_mm_tile_t *a)
{
    uint32_t nb = (a->kc + TDM_DOT_BLOCK - 1) / TDM_DOT_BLOCK;
    for (uint32_t t = 0; t < a->tokens; t++) {
        const float *x = a->x + (size_t)t * a->ldx;
        float *part = a->part + (size_t)t * a->part_ld;
        for (uint32_t r = 0; r < a->rows; r++) {
            const float *w = a->w_bf16 ? NULL : (const float *)a->w + (size_t)r * a->ldw;
            const uint16_t *wh = a->w_bf16 ? (const uint16_t *)a->w + (size_t)r * a->ldw : NULL;
            for (uint32_t b = 0; b < nb; b++) {
                uint32_t k0 = b * TDM_DOT_BLOCK;
                uint32_t n = a->kc - k0 < TDM_DOT_BLOCK ? a->kc - k0 : TDM_DOT_BLOCK;
                part[(size_t)b * a->rows + r] =
                    block_dot(w ? w + k0 : NULL, wh ? wh + k0 : NULL, x + k0, n);
            }
        }
    }
}

static void generic_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = tdm_cpu_bf16(src[i]);
}

static void generic_dots(const float *q, const float *k, uint32_t hd, uint32_t nt, float *out)
{
    for (uint32_t t = 0; t < nt; t++)
        out[t] = tdm_dot_f32(q, k + (size_t)t * hd, hd);
}

static void generic_attn_acc(float *o, float c, const float *p, const float *v, uint32_t hd,
                             uint32_t nt)
{
    for (uint32_t d = 0; d < hd; d++) {
        float acc = o[d] * c;
        for (uint32_t t = 0; t < nt; t++)
            acc = acc + p[t] * v[(size_t)t * hd + d];
        o[d] = acc;
    }
}

const tdm_cpu_ops_t tdm_cpu_ops_generic = {
    .name = "generic",
    .supported = generic_supported,
    .mm_tile = generic_mm_tile,
    .bf16_to_f32 = generic_bf16_to_f32,
    .dots = generic_dots,
    .attn_acc = generic_attn_acc,
};
