/*
 * test-model-dtype.c — the bf16/f16 <-> f32 conversions, exhaustively.
 *
 * Widening is checked for all 65536 inputs of each format against a reference built from the
 * format's definition with ldexp (and, for f16, the compiler's _Float16 where it exists). Narrowing
 * is checked on every rounding boundary: for each pair of adjacent representable values, the exact
 * midpoint (ties to even) and the floats just below and above it, in both signs, plus the overflow
 * boundary to infinity and NaN handling.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include <tdm/model.h>

#include "tap.h"

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Reference values from the definitions (sign, biased exponent, fraction). */
static double ref_bf16(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    if (e == 0xff)
        v = m ? NAN : INFINITY;
    return s ? -v : v;
}

static double ref_f16(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    return s ? -v : v;
}

static void widen_bf16(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = tdm_bf16_to_f32((uint16_t)h);
        double ref = ref_bf16((uint16_t)h);
        if (isnan(ref))
            bad += !(isnan(got) && fbits(got) == h << 16);
        else
            bad += !((double)got == ref && !signbit(got) == !signbit(ref));
    }
    is_int(bad, 0, "bf16 -> f32 exact for all 65536 inputs (NaN payloads kept)");
}

static void widen_f16(void)
{
    int bad = 0, bad_cc = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = tdm_f16_to_f32((uint16_t)h);
        double ref = ref_f16((uint16_t)h);
        if (isnan(ref)) {
            uint32_t want = ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13);
            bad += fbits(got) != want;
            continue;
        }
        bad += !((double)got == ref && !signbit(got) == !signbit(ref));
#ifdef __FLT16_MANT_DIG__
        _Float16 x;
        uint16_t hh = (uint16_t)h;
        memcpy(&x, &hh, 2);
        bad_cc += fbits((float)x) != fbits(got);
#endif
    }
    is_int(bad, 0, "f16 -> f32 exact for all 65536 inputs, subnormals and NaN payloads included");
    is_int(bad_cc, 0, "f16 -> f32 equals the compiler's _Float16 conversion (when available)");
}

/* Narrowing on every boundary between adjacent values a, a+1 (both positive encodings; a+1 may
 * be +inf, whose "value" for the midpoint is the next power of two). */
static int boundaries(uint16_t (*narrow)(float), double (*ref)(uint16_t), uint16_t max_finite,
                      double inf_as, uint16_t sign_bit)
{
    int bad = 0;
    for (uint32_t a = 0; a <= max_finite; a++) {
        uint32_t b = a + 1;
        double va = ref((uint16_t)a), vb = b > max_finite ? inf_as : ref((uint16_t)b);
        float mid = (float)((va + vb) / 2); /* at most 12 significant bits: exact */
        if ((double)mid != (va + vb) / 2)
            bad++;
        uint32_t even = (a & 1) ? b : a;
        for (int neg = 0; neg <= 1; neg++) {
            float m = neg ? -mid : mid;
            uint16_t sb = neg ? sign_bit : 0;
            float below = nextafterf(m, 0.0f), above = nextafterf(m, neg ? -INFINITY : INFINITY);
            bad += narrow(m) != (uint16_t)(even | sb);
            bad += narrow(below) != (uint16_t)(a | sb);
            bad += narrow(above) != (uint16_t)(b | sb);
            bad += narrow(neg ? -(float)va : (float)va) != (uint16_t)(a | sb);
        }
    }
    return bad;
}

static void narrow_bf16(void)
{
    is_int(boundaries(tdm_f32_to_bf16, ref_bf16, 0x7f7f, ldexp(1, 128), 0x8000), 0,
           "f32 -> bf16: exact values, midpoints (ties to even), and both neighbours of every "
           "midpoint, both signs, overflow to inf");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tdm_bf16_to_f32((uint16_t)h);
        uint16_t back = tdm_f32_to_bf16(f);
        if (isnan(f))
            bad += !(isnan(tdm_bf16_to_f32(back)) && (back & 0x8000) == (h & 0x8000));
        else
            bad += back != h;
    }
    is_int(bad, 0, "bf16 -> f32 -> bf16 round trip for all 65536 inputs");
    /* payload only in the low 16 bits: truncation would give inf; must stay NaN */
    int nan_ok = 1;
    for (uint32_t low = 1; low < 0x10000; low += 7) {
        nan_ok &= isnan(tdm_bf16_to_f32(tdm_f32_to_bf16(bitsf(0x7f800000u | low))));
        nan_ok &= isnan(tdm_bf16_to_f32(tdm_f32_to_bf16(bitsf(0xff800000u | low))));
    }
    ok(nan_ok, "f32 NaNs with low-only payloads stay NaN in bf16");
    is_int(tdm_f32_to_bf16(INFINITY), 0x7f80, "+inf -> bf16 +inf");
    is_int(tdm_f32_to_bf16(-0.0f), 0x8000, "-0 keeps its sign");
}

static void narrow_f16(void)
{
    is_int(boundaries(tdm_f32_to_f16, ref_f16, 0x7bff, 65536.0, 0x8000), 0,
           "f32 -> f16: exact values, midpoints (ties to even), both neighbours, both signs, "
           "subnormals and overflow to inf");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tdm_f16_to_f32((uint16_t)h);
        uint16_t back = tdm_f32_to_f16(f);
        if (isnan(f))
            bad += back != (uint16_t)(h | 0x200); /* quieted, payload kept */
        else
            bad += back != h;
    }
    is_int(bad, 0, "f16 -> f32 -> f16 round trip for all 65536 inputs");
    is_int(tdm_f32_to_f16(ldexpf(1, -25)), 0, "2^-25 (tie) rounds to even zero");
    is_int(tdm_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 1, "just above 2^-25 rounds to 2^-24");
    is_int(tdm_f32_to_f16(1e-30f), 0, "tiny values flush to zero");
    is_int(tdm_f32_to_f16(1e30f), 0x7c00, "huge values overflow to inf");
    ok(isnan(tdm_f16_to_f32(tdm_f32_to_f16(bitsf(0x7f800001u)))), "signalling f32 NaN stays NaN");
#ifdef __FLT16_MANT_DIG__
    int bad_cc = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += 4093) {
        float f = bitsf((uint32_t)u);
        if (isnan(f))
            continue;
        _Float16 x = (_Float16)f;
        uint16_t hx;
        memcpy(&hx, &x, 2);
        bad_cc += tdm_f32_to_f16(f) != hx;
    }
    is_int(bad_cc, 0, "f32 -> f16 equals _Float16 on ~1M strided bit patterns");
#else
    skip("no _Float16 in this compiler");
#endif
}

static void row_convert(void)
{
    /* 2 x 3 column slice of a 2 x 5 bf16 matrix, starting at column 1 */
    uint16_t m[10];
    for (int i = 0; i < 10; i++)
        m[i] = tdm_f32_to_bf16((float)i * 0.5f);
    tdm_tensor_t t = {TDM_DTYPE_BF16, 2, 3, 5, m + 1};
    float out[3];
    tdm_tensor_row_to_f32(&t, 1, out);
    ok(out[0] == 3.0f && out[1] == 3.5f && out[2] == 4.0f, "row_to_f32 honours row_stride");
    uint16_t hm[4] = {tdm_f32_to_f16(1.5f), tdm_f32_to_f16(-2.0f), 0, 0};
    tdm_tensor_t th = {TDM_DTYPE_F16, 1, 2, 2, hm};
    tdm_tensor_row_to_f32(&th, 0, out);
    ok(out[0] == 1.5f && out[1] == -2.0f, "row_to_f32 widens f16");
}

int main(void)
{
    widen_bf16();
    widen_f16();
    narrow_bf16();
    narrow_f16();
    row_convert();
    return done_testing();
}
