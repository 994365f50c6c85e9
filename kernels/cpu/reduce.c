/*
 * reduce.c — the reduction contract of backend.h in its plainest form (the tree, the rank
 * combine, the blocked dot product) and the RoPE frequency table. Vectorised kernels elsewhere
 * must produce exactly what these produce; the tests hold them to it.
 */
#include "config.h"

#include <math.h>

#include "kernels/backend.h"

float tdm_reduce_tree(const float *p, uint32_t n)
{
    uint32_t h;
    if (n <= 1)
        return n ? p[0] : 0.0f;
    h = (n + 1) / 2;
    return tdm_reduce_tree(p, h) + tdm_reduce_tree(p + h, n - h);
}

static float combine_at(const float *const *parts, uint32_t lo, uint32_t n, size_t i)
{
    uint32_t h;
    if (n == 1)
        return parts[lo][i];
    h = (n + 1) / 2;
    return combine_at(parts, lo, h, i) + combine_at(parts, lo + h, n - h, i);
}

void tdm_reduce_tree_combine(const float *const *parts, uint32_t nparts, float *out, size_t n)
{
    if (nparts == 0)
        return;
    for (size_t i = 0; i < n; i++)
        out[i] = combine_at(parts, 0, nparts, i);
}

float tdm_dot_f32(const float *a, const float *b, uint32_t k)
{
    float parts[64];
    uint32_t nb = (k + TDM_DOT_BLOCK - 1) / TDM_DOT_BLOCK;

    if (nb > 64) {
        /* T(0, nb) = T(0, h) + T(h, nb - h): split on a block boundary and recurse, so long
         * vectors need no heap and follow the same tree. */
        uint32_t kh = (nb + 1) / 2 * TDM_DOT_BLOCK;
        return tdm_dot_f32(a, b, kh) + tdm_dot_f32(a + kh, b + kh, k - kh);
    }
    for (uint32_t bi = 0; bi < nb; bi++) {
        uint32_t k0 = bi * TDM_DOT_BLOCK, k1 = k0 + TDM_DOT_BLOCK < k ? k0 + TDM_DOT_BLOCK : k;
        float s[TDM_DOT_LANES] = {0};
        for (uint32_t j = k0; j < k1; j++)
            s[(j - k0) % TDM_DOT_LANES] = s[(j - k0) % TDM_DOT_LANES] + a[j] * b[j];
        parts[bi] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    }
    return tdm_reduce_tree(parts, nb);
}

tdm_status_t tdm_rope_init(const tdm_model_config_t *cfg, tdm_rope_t *ret_rope)
{
    tdm_rope_t r;
    uint32_t hd, half;

    if (!cfg || !ret_rope)
        return TDM_ERR_INVAL;
    hd = cfg->head_dim;
    if (hd == 0 || hd % 2 != 0 || hd / 2 > TDM_ROPE_MAX_HALF)
        return TDM_ERR_UNSUPPORTED;
    if (!(cfg->rope_theta > 0.0f))
        return TDM_ERR_INVAL;
    half = hd / 2;
    memset(&r, 0, sizeof(r));
    r.head_dim = hd;
    for (uint32_t i = 0; i < half; i++) {
        /* transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in fp32 */
        float expo = (float)(2 * i) / (float)hd;
        r.inv_freq[i] = 1.0f / powf(cfg->rope_theta, expo);
    }
    switch (cfg->rope_type) {
    case TDM_ROPE_DEFAULT:
        break;
    case TDM_ROPE_LINEAR:
        if (!(cfg->rope_factor > 0.0f))
            return TDM_ERR_INVAL;
        for (uint32_t i = 0; i < half; i++)
            r.inv_freq[i] = r.inv_freq[i] / cfg->rope_factor;
        break;
    case TDM_ROPE_LLAMA3: {
        float factor = cfg->rope_factor, lo = cfg->rope_low_freq_factor,
              hi = cfg->rope_high_freq_factor, old = (float)cfg->rope_original_max_pos;
        if (!(factor > 0.0f) || !(lo > 0.0f) || !(hi > lo) || !(old > 0.0f))
            return TDM_ERR_INVAL;
        float low_wl = old / lo, high_wl = old / hi;
        for (uint32_t i = 0; i < half; i++) {
            float f = r.inv_freq[i];
            float wl = 2.0f * (float)M_PI / f;
            float scaled = wl > low_wl ? f / factor : f;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                float smooth = (old / wl - lo) / (hi - lo);
                scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
            }
            r.inv_freq[i] = scaled;
        }
        break;
    }
    default:
        return TDM_ERR_UNSUPPORTED;
    }
    *ret_rope = r;
    return TDM_OK;
}
