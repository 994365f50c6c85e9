/*
 * dtype.c — the exact bf16/f16 <-> f32 conversions every weight read goes through.
 *
 * Widening (bf16/f16 -> f32) is exact for every input, including subnormals, infinities and NaN
 * payloads. Narrowing (f32 -> bf16/f16) rounds to nearest, ties to even, overflows to infinity,
 * and maps NaN to a quiet NaN of the same sign keeping the payload's top bits, so a NaN never
 * turns into an infinity. Pure bit manipulation: no dependence on the FPU rounding mode.
 */
#include "config.h"

#include <string.h>

#include "model_int.h"

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float tdm_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t tdm_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign and top payload kept */
    /* adding 0x7fff + lsb carries into bit 16 exactly when the dropped half is > 0.5 ulp, or
     * == 0.5 ulp with an odd kept part; a carry out of the mantissa correctly yields inf */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float tdm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp != 0)
        return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0)
        return bits_f32(sign);
    /* subnormal: mant * 2^-24 = 1.f * 2^(top-24) where top is the highest set bit of mant */
    uint32_t top = 31u - (uint32_t)__builtin_clz(mant);
    return bits_f32(sign | ((top + 103u) << 23) | ((mant << (23u - top)) & 0x7fffffu));
}

uint16_t tdm_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t ax = u & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520, the tie above 65504 (odd), and inf: round to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal f16: >= 2^-14 */
        ax += 0xfffu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((ax - 0x38000000u) >> 13));
    }
    if (ax <= 0x33000000u) /* <= 2^-25: the tie at 2^-25 goes to even zero */
        return (uint16_t)sign;
    /* subnormal f16: value in units of 2^-24 is mant * 2^(e-126), e in [102, 112] */
    uint32_t e = ax >> 23;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;
    uint32_t r = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

void tdm_tensor_row_to_f32(const tdm_tensor_t *t, uint32_t row, float *out)
{
    const uint8_t *base = t->data;
    size_t esz = tdm_dtype_size(t->dtype);
    const uint8_t *p = base + (size_t)row * t->row_stride * esz;
    switch (t->dtype) {
    case TDM_DTYPE_F32:
        memcpy(out, p, (size_t)t->cols * sizeof(float));
        break;
    case TDM_DTYPE_BF16:
        for (uint32_t j = 0; j < t->cols; j++) {
            uint16_t h;
            memcpy(&h, p + 2 * (size_t)j, 2);
            out[j] = tdm_bf16_to_f32(h);
        }
        break;
    case TDM_DTYPE_F16:
        for (uint32_t j = 0; j < t->cols; j++) {
            uint16_t h;
            memcpy(&h, p + 2 * (size_t)j, 2);
            out[j] = tdm_f16_to_f32(h);
        }
        break;
    default:
        break;
    }
}
