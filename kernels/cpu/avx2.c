/*
 * avx2.c — the AVX2 kernel table (tdm_cpu_ops_t), chosen at init when cpuid reports AVX2.
 *
 * Rule 1 of backend.h is written for this shape: within a 64-block, lane l of one 8-wide
 * accumulator sums the elements k ≡ l (mod 8) in order (mul, then add: no FMA — the file is
 * built for "avx2" only, and -ffp-contract=off forbids contraction anyway), and the block
 * partial is the lane tree ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)). lane_tree8() computes that tree
 * for eight accumulators at once with two rounds of hadd and one 128-bit swap, so a kernel
 * reduces a block of eight (row, token) outputs in six shuffles and adds instead of eight
 * horizontal sums. Microkernels: 8 rows × 1 token (decode) and 4 rows × 2 tokens (a weight
 * vector feeds two tokens); weights are read as fp32 or straight from bf16 (widen and shift,
 * exact). Every function here returns the same bits as its generic.c twin; the tests compare
 * them on odd shapes.
 */
#include "config.h"

#include "kernels/cpu/cpu_int.h"

#if defined(__x86_64__)

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2")

#define AVX2_FN __attribute__((target("avx2")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))

static int avx2_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

/* out[i] = lane tree of accumulator i. */
AVX2_INLINE __m256 lane_tree8(__m256 a, __m256 b, __m256 c, __m256 d, __m256 e, __m256 f, __m256 g,
                              __m256 h)
{
    /* hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7] */
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 ef = _mm256_hadd_ps(e, f), gh = _mm256_hadd_ps(g, h);
    /* [A0123, B0123, C0123, D0123 | A4567, B4567, C4567, D4567] */
    __m256 abcd = _mm256_hadd_ps(ab, cd), efgh = _mm256_hadd_ps(ef, gh);
    __m256 lo = _mm256_permute2f128_ps(abcd, efgh, 0x20);
    __m256 hi = _mm256_permute2f128_ps(abcd, efgh, 0x31);
    return _mm256_add_ps(lo, hi);
}

AVX2_INLINE __m256 load_w(const void *w, size_t idx, int bf16)
{
    if (bf16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + idx));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)w + idx);
}

#define MUL_ADD(acc, w, x) acc = _mm256_add_ps(acc, _mm256_mul_ps(w, x))

/* Rows r..r+8 × token t over every block of the chunk. */
AVX2_INLINE void k8x1(const tdm_cpu_mm_tile_t *a, uint32_t r, uint32_t t, int bf16)
{
    const float *x = a->x + (size_t)t * a->ldx;
    float *part = a->part + (size_t)t * a->part_ld + r;
    size_t ld = a->ldw, w0 = (size_t)r * ld;
    for (uint32_t k0 = 0; k0 < a->kc; k0 += TDM_DOT_BLOCK) {
        uint32_t k1 = a->kc - k0 < TDM_DOT_BLOCK ? a->kc : k0 + TDM_DOT_BLOCK;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
               s7 = s0;
        for (uint32_t k = k0; k < k1; k += 8) {
            __m256 xv = _mm256_loadu_ps(x + k);
            size_t o = w0 + k;
            MUL_ADD(s0, load_w(a->w, o, bf16), xv);
            MUL_ADD(s1, load_w(a->w, o + ld, bf16), xv);
            MUL_ADD(s2, load_w(a->w, o + 2 * ld, bf16), xv);
            MUL_ADD(s3, load_w(a->w, o + 3 * ld, bf16), xv);
            MUL_ADD(s4, load_w(a->w, o + 4 * ld, bf16), xv);
            MUL_ADD(s5, load_w(a->w, o + 5 * ld, bf16), xv);
            MUL_ADD(s6, load_w(a->w, o + 6 * ld, bf16), xv);
            MUL_ADD(s7, load_w(a->w, o + 7 * ld, bf16), xv);
        }
        _mm256_storeu_ps(part + (size_t)(k0 / TDM_DOT_BLOCK) * a->rows,
                         lane_tree8(s0, s1, s2, s3, s4, s5, s6, s7));
    }
}

/* Rows r..r+4 × tokens t, t+1 over every block of the chunk. */
AVX2_INLINE void k4x2(const tdm_cpu_mm_tile_t *a, uint32_t r, uint32_t t, int bf16)
{
    const float *x0 = a->x + (size_t)t * a->ldx, *x1 = x0 + a->ldx;
    float *p0 = a->part + (size_t)t * a->part_ld + r, *p1 = p0 + a->part_ld;
    size_t ld = a->ldw, w0 = (size_t)r * ld;
    for (uint32_t k0 = 0; k0 < a->kc; k0 += TDM_DOT_BLOCK) {
        uint32_t k1 = a->kc - k0 < TDM_DOT_BLOCK ? a->kc : k0 + TDM_DOT_BLOCK;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
               s7 = s0;
        for (uint32_t k = k0; k < k1; k += 8) {
            __m256 xa = _mm256_loadu_ps(x0 + k), xb = _mm256_loadu_ps(x1 + k);
            size_t o = w0 + k;
            __m256 wa = load_w(a->w, o, bf16), wb = load_w(a->w, o + ld, bf16);
            __m256 wc = load_w(a->w, o + 2 * ld, bf16), wd = load_w(a->w, o + 3 * ld, bf16);
            MUL_ADD(s0, wa, xa);
            MUL_ADD(s1, wb, xa);
            MUL_ADD(s2, wc, xa);
            MUL_ADD(s3, wd, xa);
            MUL_ADD(s4, wa, xb);
            MUL_ADD(s5, wb, xb);
            MUL_ADD(s6, wc, xb);
            MUL_ADD(s7, wd, xb);
        }
        __m256 v = lane_tree8(s0, s1, s2, s3, s4, s5, s6, s7);
        size_t po = (size_t)(k0 / TDM_DOT_BLOCK) * a->rows;
        _mm_storeu_ps(p0 + po, _mm256_castps256_ps128(v));
        _mm_storeu_ps(p1 + po, _mm256_extractf128_ps(v, 1));
    }
}

AVX2_INLINE void mm_tile_impl(const tdm_cpu_mm_tile_t *a, int bf16)
{
    /* Row quads outer: a quad's chunk (4 KB as fp32) stays in L1 while every token pair of
     * the tile streams past it. */
    uint32_t pairs = a->tokens / 2 * 2;
    for (uint32_t r = 0; r < a->rows; r += 4)
        for (uint32_t t = 0; t < pairs; t += 2)
            k4x2(a, r, t, bf16);
    if (pairs < a->tokens)
        for (uint32_t r = 0; r < a->rows; r += 8)
            k8x1(a, r, pairs, bf16);
}

AVX2_FN static void avx2_mm_tile(const tdm_cpu_mm_tile_t *a)
{
    if (a->w_bf16)
        mm_tile_impl(a, 1);
    else
        mm_tile_impl(a, 0);
}

AVX2_FN static void avx2_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_w(src, i, 1));
    for (; i < n; i++)
        dst[i] = tdm_cpu_bf16(src[i]);
}

/* Blocks [0, nb) of q·k for 8 keys at once: vector of the 8 rule-1 block partials, then the
 * tree over blocks, elementwise (each lane is one key). */
AVX2_FN static void dots8_tree(const float *q, const float *k, uint32_t hd, uint32_t lo,
                               uint32_t nb, float *out)
{
    if (nb == 1) {
        uint32_t k0 = lo * TDM_DOT_BLOCK, k1 = hd - k0 < TDM_DOT_BLOCK ? hd : k0 + TDM_DOT_BLOCK;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
               s7 = s0;
        for (uint32_t e = k0; e < k1; e += 8) {
            __m256 qv = _mm256_loadu_ps(q + e);
            MUL_ADD(s0, _mm256_loadu_ps(k + e), qv);
            MUL_ADD(s1, _mm256_loadu_ps(k + hd + e), qv);
            MUL_ADD(s2, _mm256_loadu_ps(k + 2 * (size_t)hd + e), qv);
            MUL_ADD(s3, _mm256_loadu_ps(k + 3 * (size_t)hd + e), qv);
            MUL_ADD(s4, _mm256_loadu_ps(k + 4 * (size_t)hd + e), qv);
            MUL_ADD(s5, _mm256_loadu_ps(k + 5 * (size_t)hd + e), qv);
            MUL_ADD(s6, _mm256_loadu_ps(k + 6 * (size_t)hd + e), qv);
            MUL_ADD(s7, _mm256_loadu_ps(k + 7 * (size_t)hd + e), qv);
        }
        _mm256_storeu_ps(out, lane_tree8(s0, s1, s2, s3, s4, s5, s6, s7));
        return;
    }
    uint32_t h = (nb + 1) / 2;
    float r[8];
    dots8_tree(q, k, hd, lo, h, out);
    dots8_tree(q, k, hd, lo + h, nb - h, r);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), _mm256_loadu_ps(r)));
}

AVX2_FN static void avx2_dots(const float *q, const float *k, uint32_t hd, uint32_t nt, float *out)
{
    uint32_t nb = (hd + TDM_DOT_BLOCK - 1) / TDM_DOT_BLOCK, t = 0;
    if (hd % 8 != 0) {
        tdm_cpu_ops_generic.dots(q, k, hd, nt, out);
        return;
    }
    for (; t + 8 <= nt; t += 8)
        dots8_tree(q, k + (size_t)t * hd, hd, 0, nb, out + t);
    if (t < nt) {
        /* Short tail: pad with copies of the last key (their results are dropped). */
        float kpad[8 * 2 * TDM_ROPE_MAX_HALF] __attribute__((aligned(32))), tmp[8];
        for (uint32_t i = 0; i < 8; i++)
            memcpy(kpad + (size_t)i * hd, k + (size_t)(t + (t + i < nt ? i : nt - 1 - t)) * hd,
                   (size_t)hd * sizeof(float));
        dots8_tree(q, kpad, hd, 0, nb, tmp);
        memcpy(out + t, tmp, (size_t)(nt - t) * sizeof(float));
    }
}

AVX2_FN static void avx2_attn_acc(float *o, float c, const float *p, const float *v, uint32_t hd,
                                  uint32_t nt)
{
    __m256 cv = _mm256_set1_ps(c);
    if (hd % 8 != 0) {
        tdm_cpu_ops_generic.attn_acc(o, c, p, v, hd, nt);
        return;
    }
    for (uint32_t d = 0; d < hd; d += 8) {
        __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(o + d), cv);
        for (uint32_t t = 0; t < nt; t++)
            MUL_ADD(acc, _mm256_set1_ps(p[t]), _mm256_loadu_ps(v + (size_t)t * hd + d));
        _mm256_storeu_ps(o + d, acc);
    }
}

#pragma GCC pop_options

const tdm_cpu_ops_t tdm_cpu_ops_avx2 = {
    .name = "avx2",
    .supported = avx2_supported,
    .mm_tile = avx2_mm_tile,
    .bf16_to_f32 = avx2_bf16_to_f32,
    .dots = avx2_dots,
    .attn_acc = avx2_attn_acc,
};

#endif
