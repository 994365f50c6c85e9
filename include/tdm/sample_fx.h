/*
 * tdm/sample_fx.h — the arithmetic the host sampler (dataplane/sample/sample.c) and the device
 * sampler (kernels/cuda/sample.cu) share, so both draw the same token from the same row: the
 * counter-based uniform, and probabilities as fixed-point integers. Every function is built from
 * operations IEEE 754 rounds the same way on the CPU and the GPU (+, -, *, /, explicit fmaf,
 * rintf, ldexpf, conversions) and 64-bit integer arithmetic, never from a library exp, so its
 * result is bit-identical on both; integer sums are exact in any order, so a parallel reduction
 * equals the host's sequential one.
 *
 * Probability of a candidate with scaled logit x = (logit - max) / T <= 0: q(x) = floor(2^40 e^x)
 * (the best token: exactly 2^40; x <= -28: 0, below one part in 2^40, never drawn). A vocabulary
 * of up to 2^22 candidates sums below 2^63.
 * Draw: r = floor(u53 * total / 2^53) with u53 the top 53 bits of the (seed, step) hash; the
 * chosen token is the first kept id, ascending, whose running sum of q exceeds r.
 */
#ifndef TDM_SAMPLE_FX_H
#define TDM_SAMPLE_FX_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TDM_FX_FN static __host__ __device__ __forceinline__
#else
#define TDM_FX_FN static inline
#endif

#define TDM_SAMPLE_FX_ONE (1ull << 40) /* q of the best candidate */
#define TDM_SAMPLE_FX_CUTOFF (-28.0f)  /* q(x) = 0 at and below */

TDM_FX_FN uint64_t tdm_sample_fx_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The top 53 bits of the (seed, step) hash; tdm_sample_uniform() is this times 2^-53. */
TDM_FX_FN uint64_t tdm_sample_fx_u53(uint64_t seed, uint64_t step)
{
    uint64_t h = tdm_sample_fx_mix64(tdm_sample_fx_mix64(seed) ^
                                     (step * 0xd1b54a32d192ed03ull + 0x8bb84b93962eacc9ull));
    return h >> 11;
}

/* floor(2^40 e^x) for x <= 0 (x > 0 is treated as 0; NaN as the cutoff). */
TDM_FX_FN uint64_t tdm_sample_fx_exp(float x)
{
    if (!(x > TDM_SAMPLE_FX_CUTOFF))
        return 0;
    if (x >= 0.0f)
        return TDM_SAMPLE_FX_ONE;
    /* x = n ln2 + r, |r| <= ln2/2 (Cody-Waite, ln2 split so n * hi is exact) */
    float t = x * 1.44269504f;
    float n = rintf(t);
    float r = fmaf(-n, 0.693145752f, x);
    r = fmaf(-n, 1.42860677e-6f, r);
    /* e^r by its Taylor polynomial of degree 7 (|error| < 2e-8 relative on the range) */
    float p = 1.98412698e-4f;
    p = fmaf(p, r, 1.38888889e-3f);
    p = fmaf(p, r, 8.33333333e-3f);
    p = fmaf(p, r, 4.16666667e-2f);
    p = fmaf(p, r, 1.66666667e-1f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    /* n >= -41 here, so the scale 2^(40 + n) is at least 2^-1 */
    return (uint64_t)ldexpf(p, 40 + (int)n);
}

/* floor(u53 * total / 2^53), exactly, from 32-bit limbs (no 128-bit type needed). */
TDM_FX_FN uint64_t tdm_sample_fx_scale(uint64_t u53, uint64_t total)
{
    uint64_t a0 = u53 & 0xffffffffu, a1 = u53 >> 32, b0 = total & 0xffffffffu, b1 = total >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    uint64_t lo = (p00 & 0xffffffffu) | (mid << 32);
    uint64_t hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    return (hi << 11) | (lo >> 53);
}

/* Top-p: a candidate whose better candidates (same top-k set) hold `ahead` of the set's `total`
 * is kept iff ahead < top_p * total, compared in double. */
TDM_FX_FN int tdm_sample_fx_top_p_keeps(uint64_t ahead, uint64_t total, float top_p)
{
    return (double)ahead < (double)top_p * (double)total;
}

/* Min-p: kept iff q >= min_p * q(best) (q(best) = 2^40), compared in double. */
TDM_FX_FN int tdm_sample_fx_min_p_keeps(uint64_t q, float min_p)
{
    return (double)q >= (double)min_p * (double)TDM_SAMPLE_FX_ONE;
}

/* The order of candidates, as 32-bit keys: larger key = larger float (no NaN here; -0 and +0,
 * equal as floats, get one key). */
TDM_FX_FN uint32_t tdm_sample_fx_key(float x)
{
    if (x == 0.0f)
        return 0x80000000u;
#ifdef __CUDA_ARCH__
    uint32_t u = __float_as_uint(x);
#else
    union {
        float f;
        uint32_t u;
    } v;
    v.f = x;
    uint32_t u = v.u;
#endif
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

#endif
