/*
 * test-cuda-ops.c — every CUDA kernel of kernels/cuda/ops.cu against an fp64 CPU reference on
 * fresh random inputs (seeded from the clock, seed printed), outputs poisoned before each launch
 * (ops_host.cu): relative L2 error <= 1e-5 where the kernel computes in fp32 from exact inputs,
 * <= 1e-2 where it rounds to bf16; the bf16 and fp8 KV writes bit for bit against the CPU's
 * encoders (tdm_f32_to_bf16, tdm_kv_fp8_encode); argmax exactly (ties, NaN). Shapes cover odd
 * sizes (partial warps, a last output row without its pair), GQA groups of 1, 2 and 8, split-K
 * of 1, 7 and 32 partitions, pages in random order, llama3 RoPE scaling. The L2 prefetch forms
 * (the streaming GEMV's tail, prefetch blocks in the decode attention and argmax grids; every op,
 * before and after the PDL wait) must change no output bit. Then micro-benchmarks
 * (GEMV vs cuBLAS at TinyLlama shapes, the device copy), skipped under compute-sanitizer.
 * Without a device it skips with the reason.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/kv.h>
#include <tdm/model.h>

#include "kernels/backend.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/smoke.h"
#include "tap.h"

static uint64_t rng_state;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

/* roughly N(0, s^2) */
static float rndn(float s)
{
    float a = 0;
    for (int i = 0; i < 4; i++)
        a += (float)rnd() / 4294967296.0f - 0.5f;
    return a * 1.7320508f * s;
}

static double rel_l2(const float *got, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    if (den == 0)
        return sqrt(num);
    return sqrt(num / den); /* NaN anywhere makes this NaN: never <= tol */
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

/* weights of dtype dt from values v (rounded), and their exact fp64 values back */
static void *make_w(const float *v, size_t n, int dt, double *exact)
{
    void *w = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        if (dt == TDM_DTYPE_BF16) {
            ((uint16_t *)w)[i] = tdm_f32_to_bf16(v[i]);
            exact[i] = tdm_bf16_to_f32(((uint16_t *)w)[i]);
        } else if (dt == TDM_DTYPE_F16) {
            ((uint16_t *)w)[i] = tdm_f32_to_f16(v[i]);
            exact[i] = tdm_f16_to_f32(((uint16_t *)w)[i]);
        } else {
            ((float *)w)[i] = v[i];
            exact[i] = v[i];
        }
    }
    return w;
}

static double silu_d(double g)
{
    return g / (1.0 + exp(-g));
}

static void check_gemv(uint32_t n, uint32_t K, uint32_t M, int dt, int flags, int bias, int cublas)
{
    uint32_t ldx = (flags & 2) ? 2 * K : K;
    float *x = xmalloc((size_t)n * ldx * 4), *wv = xmalloc((size_t)M * K * 4);
    float *b = xmalloc((size_t)M * 4), *nw = xmalloc((size_t)K * 4);
    float *y = xmalloc((size_t)n * M * 4), *y0 = xmalloc((size_t)n * M * 4);
    double *we = xmalloc((size_t)M * K * 8), *ref = xmalloc((size_t)n * M * 8);
    double *xe = xmalloc((size_t)K * 8);
    for (size_t i = 0; i < (size_t)n * ldx; i++)
        x[i] = rndn(1.0f);
    for (size_t i = 0; i < (size_t)M * K; i++)
        wv[i] = rndn(0.05f);
    for (uint32_t i = 0; i < M; i++)
        b[i] = rndn(0.5f);
    for (uint32_t i = 0; i < K; i++)
        nw[i] = 1.0f + rndn(0.1f);
    for (size_t i = 0; i < (size_t)n * M; i++)
        y[i] = y0[i] = rndn(1.0f);
    void *w = make_w(wv, (size_t)M * K, dt, we);
    for (uint32_t r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * ldx;
        double rs = 1.0;
        if (flags & 1) {
            double ss = 0;
            for (uint32_t k = 0; k < K; k++)
                ss += (double)xr[k] * xr[k];
            rs = 1.0 / sqrt(ss / K + 1e-5);
        }
        for (uint32_t k = 0; k < K; k++) {
            if (flags & 2)
                xe[k] = silu_d(xr[k]) * xr[K + k];
            else if (cublas == 1 || cublas == 2 || cublas >= 18)
                xe[k] = tdm_bf16_to_f32(tdm_f32_to_bf16(xr[k]));
            else
                xe[k] = (flags & 1) ? xr[k] * rs * nw[k] : xr[k];
        }
        for (uint32_t m = 0; m < M; m++) {
            double s = 0;
            for (uint32_t k = 0; k < K; k++)
                s += we[(size_t)m * K + k] * xe[k];
            ref[(size_t)r * M + m] =
                (flags & 4) ? y0[(size_t)r * M + m] + s : s + (bias ? b[m] : 0.0);
        }
    }
    tdm_status_t st = tdm_cuda_test_gemv(x, n, K, M, dt, w, bias ? b : NULL,
                                         (flags & 1) ? nw : NULL, 1e-5f, flags, cublas, y);
    double e = st == TDM_OK ? rel_l2(y, ref, (size_t)n * M) : INFINITY;
    /* the tile GEMM: fp32 sums of bf16 products, as cuBLAS, but checked closer (its error is the
     * summation's, ~1e-6, not the bf16 rounding the reference already applies; one wrong element
     * of the smallest case moves rel L2 past 1e-2) */
    double tol = cublas >= 18 ? 1e-4 : cublas == 1 || cublas == 2 ? 1e-2 : 1e-5;
    ok(e <= tol, "%s n=%u K=%u M=%u w=%s flags=%d%s: rel L2 %.2e <= %.0e",
       cublas == 23   ? "tile mma, shallow form"
       : cublas == 20 ? "tile mma, 5 splits"
       : cublas == 19 ? "tile mma, 1 split"
       : cublas == 18 ? "tile mma"
       : cublas == 17 ? "GEMV streaming V4, ring of 1 batch"
       : cublas == 16 ? "GEMV streaming V4, ring of 2 batches"
       : cublas == 15 ? "GEMV streaming V2, x staged through registers"
       : cublas == 14 ? "GEMV streaming V2, blocks of 2 warps"
       : cublas == 13 ? "GEMV streaming V2, blocks of 4 warps"
       : cublas == 12 ? "GEMV streaming V2, 3 blocks/SM"
       : cublas == 11 ? "GEMV streaming V3"
       : cublas == 10 ? "GEMV streaming V2, 1 block/SM"
       : cublas == 9  ? "GEMV streaming V2"
       : cublas == 4  ? "GEMV streaming"
       : cublas == 3  ? "GEMV K-split"
       : cublas == 2  ? "skinny mma"
       : cublas       ? "cuBLAS"
                      : "GEMV",
       n, K, M,
       dt == TDM_DTYPE_BF16  ? "bf16"
       : dt == TDM_DTYPE_F16 ? "f16"
                             : "f32",
       flags, bias ? " +bias" : "", e, tol);
    free(x), free(wv), free(b), free(nw), free(y), free(y0), free(we), free(ref), free(xe), free(w);
}

/* Qwen3's per-head q/k RMSNorm against its CPU reference, the CPU backend's rmsnorm_add over the
 * n * H q heads and n * KV k heads (dataplane/model/forward.c); v and the padding past the heads
 * left untouched, bit for bit. */
static void check_qk_norm(uint32_t n, uint32_t H, uint32_t KV, uint32_t hd)
{
    tdm_backend_t be;
    const uint32_t ld = (H + 2 * KV) * hd + 8; /* a row stride past qkv: must stay untouched */
    float *qkv = xmalloc((size_t)n * ld * 4), *got = xmalloc((size_t)n * ld * 4);
    float *q = xmalloc((size_t)n * H * hd * 4), *k = xmalloc((size_t)n * KV * hd * 4);
    float *qw = xmalloc((size_t)hd * 4), *kw = xmalloc((size_t)hd * 4);
    double *ref = xmalloc((size_t)n * ld * 8);
    for (size_t i = 0; i < (size_t)n * ld; i++)
        qkv[i] = rndn(i % 7 == 0 ? 8.0f : 1.5f);
    for (uint32_t j = 0; j < hd; j++) {
        qw[j] = 1.0f + rndn(0.3f);
        kw[j] = 0.5f + rndn(0.3f);
    }
    for (uint32_t r = 0; r < n; r++) {
        memcpy(q + (size_t)r * H * hd, qkv + (size_t)r * ld, (size_t)H * hd * 4);
        memcpy(k + (size_t)r * KV * hd, qkv + (size_t)r * ld + (size_t)H * hd, (size_t)KV * hd * 4);
    }
    tdm_tensor_t tq = {TDM_DTYPE_F32, 1, hd, hd, qw}, tk = {TDM_DTYPE_F32, 1, hd, hd, kw};
    tdm_status_t st = tdm_backend_cpu_init(1, &be);
    if (st == TDM_OK) {
        st = be.rmsnorm_add(be.ctx, q, NULL, &tq, 1e-6f, n * H, hd, q);
        if (st == TDM_OK)
            st = be.rmsnorm_add(be.ctx, k, NULL, &tk, 1e-6f, n * KV, hd, k);
        tdm_backend_cpu_free(&be);
    }
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t c = 0; c < ld; c++) {
            size_t i = (size_t)r * ld + c;
            ref[i] = c < H * hd          ? q[(size_t)r * H * hd + c]
                     : c < (H + KV) * hd ? k[(size_t)r * KV * hd + c - H * hd]
                                         : qkv[i];
        }
    memcpy(got, qkv, (size_t)n * ld * 4);
    if (st == TDM_OK)
        st = tdm_cuda_test_qk_norm(got, n, ld, H, KV, hd, qw, kw, 1e-6f);
    double e = st == TDM_OK ? rel_l2(got, ref, (size_t)n * ld) : INFINITY, worst = 0;
    int rest_same = st == TDM_OK;
    for (uint32_t r = 0; r < n && st == TDM_OK; r++)
        for (uint32_t c = 0; c < ld; c++) {
            size_t i = (size_t)r * ld + c;
            if (c >= (H + KV) * hd)
                rest_same &= got[i] == qkv[i];
            else
                worst = fmax(worst, fabs(got[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
        }
    ok(st == TDM_OK && e <= 1e-6 && worst <= 1e-5 && rest_same,
       "qk_norm (n %u, H %u, KV %u, hd %u) == CPU rmsnorm_add: rel L2 %.2e, worst %.2e, v and "
       "padding %s (%s)",
       n, H, KV, hd, e, worst, rest_same ? "untouched" : "CHANGED", tdm_status_str(st));
    free(qkv), free(got), free(q), free(k), free(qw), free(kw), free(ref);
}

/* Random rows resid and add (n × d) and weights w, with the double references: rref = resid +
 * add, ref = RMSNorm(rref) · w (eps 1e-6). */
static void rmsnorm_case(uint32_t n, uint32_t d, float *resid, float *add, float *w, double *rref,
                         double *ref)
{
    for (size_t i = 0; i < (size_t)n * d; i++) {
        resid[i] = rndn(2.0f);
        add[i] = rndn(1.0f);
    }
    for (uint32_t j = 0; j < d; j++)
        w[j] = 1.0f + rndn(0.2f);
    for (uint32_t i = 0; i < n; i++) {
        double ss = 0;
        for (uint32_t j = 0; j < d; j++) {
            double v = (double)resid[(size_t)i * d + j] + add[(size_t)i * d + j];
            rref[(size_t)i * d + j] = v;
            ss += v * v;
        }
        double rs = 1.0 / sqrt(ss / d + 1e-6);
        for (uint32_t j = 0; j < d; j++)
            ref[(size_t)i * d + j] = rref[(size_t)i * d + j] * rs * w[j];
    }
}

/* The vector forms (d % 128 == 0: a warp per row; I % 4 == 0: four columns a thread) against
 * double references, and a row's bits independent of the batch it is in. */
static void check_norm_silu_vec(uint32_t n, uint32_t d, uint32_t I)
{
    float *resid = xmalloc((size_t)n * d * 4), *add = xmalloc((size_t)n * d * 4);
    float *w = xmalloc((size_t)d * 4), *r2 = xmalloc((size_t)n * d * 4);
    float *out = xmalloc((size_t)n * (d > I ? d : I) * 4), *one = xmalloc((size_t)d * 4);
    double *ref = xmalloc((size_t)n * (d > I ? d : I) * 8), *rref = xmalloc((size_t)n * d * 8);
    rmsnorm_case(n, d, resid, add, w, rref, ref);
    for (int bf = 0; bf < 2; bf++) {
        memcpy(r2, resid, (size_t)n * d * 4);
        tdm_status_t st = tdm_cuda_test_rmsnorm(r2, add, w, 1e-6f, n, d, bf, out);
        double e = st == TDM_OK ? rel_l2(out, ref, (size_t)n * d) : INFINITY;
        double er = st == TDM_OK ? rel_l2(r2, rref, (size_t)n * d) : INFINITY;
        /* the last row alone: the same bits as in the batch */
        const uint32_t last = n - 1;
        memcpy(r2, resid + (size_t)last * d, (size_t)d * 4);
        tdm_status_t s1 =
            tdm_cuda_test_rmsnorm(r2, add + (size_t)last * d, w, 1e-6f, 1, d, bf, one);
        int same = s1 == TDM_OK && !memcmp(one, out + (size_t)last * d, (size_t)d * 4);
        ok(e <= (bf ? 1e-2 : 1e-5) && er <= 1e-6 && same,
           "rmsnorm+add, warp per row (n %u, d %u, %s out): rel L2 %.2e, residual %.2e, a row "
           "alone %s",
           n, d, bf ? "bf16" : "fp32", e, er, same ? "bit for bit" : "DIFFERS");
    }
    float *gu = xmalloc((size_t)n * 2 * I * 4), *gi = xmalloc((size_t)n * 2 * I * 4);
    float *oi = xmalloc((size_t)n * I * 4);
    for (size_t i = 0; i < (size_t)n * 2 * I; i++)
        gu[i] = rndn(3.0f);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < I; j++) {
            ref[(size_t)i * I + j] =
                silu_d(gu[(size_t)i * 2 * I + j]) * gu[(size_t)i * 2 * I + I + j];
            gi[(size_t)i * 2 * I + 2 * j] = gu[(size_t)i * 2 * I + j];
            gi[(size_t)i * 2 * I + 2 * j + 1] = gu[(size_t)i * 2 * I + I + j];
        }
    tdm_status_t st = tdm_cuda_test_silu_mul(gu, n, I, 0, out);
    tdm_status_t si = tdm_cuda_test_silu_mul(gi, n, I, 1, oi);
    double e = st == TDM_OK ? rel_l2(out, ref, (size_t)n * I) : INFINITY;
    ok(e <= 1e-5 && si == TDM_OK && !memcmp(oi, out, (size_t)n * I * 4),
       "silu*mul, four columns a thread (n %u, I %u): rel L2 %.2e, interleaved %s", n, I, e,
       si == TDM_OK && !memcmp(oi, out, (size_t)n * I * 4) ? "bit for bit" : "DIFFERS");
    free(resid), free(add), free(w), free(r2), free(out), free(one), free(ref), free(rref);
    free(gu), free(gi), free(oi);
}

/* gemm_lt.h: the fastest cuBLASLt algorithm forced, y = x · Wᵀ (and y += on accum) against a
 * double reference; a wrong layout description gives garbage here. */
static void check_lt(uint32_t n, uint32_t K, uint32_t M, int accum)
{
    float *xv = xmalloc((size_t)n * K * 4), *wv = xmalloc((size_t)M * K * 4);
    float *y = xmalloc((size_t)n * M * 4);
    double *xe = xmalloc((size_t)n * K * 8), *we = xmalloc((size_t)M * K * 8);
    double *ref = xmalloc((size_t)n * M * 8);
    for (size_t i = 0; i < (size_t)n * K; i++)
        xv[i] = rndn(1.0f);
    for (size_t i = 0; i < (size_t)M * K; i++)
        wv[i] = rndn(0.05f);
    uint16_t *xb = make_w(xv, (size_t)n * K, TDM_DTYPE_BF16, xe);
    uint16_t *wb = make_w(wv, (size_t)M * K, TDM_DTYPE_BF16, we);
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t c = 0; c < M; c++) {
            double a = 0;
            for (uint32_t k = 0; k < K; k++)
                a += xe[(size_t)r * K + k] * we[(size_t)c * K + k];
            y[(size_t)r * M + c] = accum ? rndn(1.0f) : NAN;
            ref[(size_t)r * M + c] = a + (accum ? y[(size_t)r * M + c] : 0.0);
        }
    int kept = 0, cand = 0;
    tdm_status_t st = tdm_cuda_test_lt(xb, n, K, wb, M, accum, y, &kept, &cand);
    double e = st == TDM_OK ? rel_l2(y, ref, (size_t)n * M) : INFINITY;
    ok(st == TDM_OK && kept && cand > 0 && e <= 1e-5,
       "cuBLASLt GEMM, fastest of %d heuristics forced (n %u, K %u, M %u%s): rel L2 %.2e (%s)",
       cand, n, K, M, accum ? ", accumulate" : "", e, tdm_status_str(st));
    free(xv), free(wv), free(y), free(xe), free(we), free(ref), free(xb), free(wb);
}

static void check_small_ops(void)
{
    const uint32_t V = 1000, d = 520, n = 7, I = 333;
    float *tv = xmalloc((size_t)V * d * 4), *out = xmalloc((size_t)n * d * 4);
    double *te = xmalloc((size_t)V * d * 8), *ref = xmalloc((size_t)n * 2 * I * 8);
    int32_t ids[7];
    for (size_t i = 0; i < (size_t)V * d; i++)
        tv[i] = rndn(1.0f);
    void *table = make_w(tv, (size_t)V * d, TDM_DTYPE_BF16, te);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(rnd() % V);
    ids[0] = (int32_t)V - 1;
    tdm_status_t st = tdm_cuda_test_embed(table, TDM_DTYPE_BF16, V, d, ids, n, out);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < d; j++)
            ref[(size_t)i * d + j] = te[(size_t)ids[i] * d + j];
    ok(st == TDM_OK && rel_l2(out, ref, (size_t)n * d) == 0.0, "embed (bf16 table) exact");

    /* RMSNorm with the residual add */
    float *resid = xmalloc((size_t)n * d * 4), *add = xmalloc((size_t)n * d * 4);
    float *w = xmalloc((size_t)d * 4), *r2 = xmalloc((size_t)n * d * 4);
    double *rref = xmalloc((size_t)n * d * 8);
    rmsnorm_case(n, d, resid, add, w, rref, ref);
    for (int bf = 0; bf < 2; bf++) {
        memcpy(r2, resid, (size_t)n * d * 4);
        st = tdm_cuda_test_rmsnorm(r2, add, w, 1e-6f, n, d, bf, out);
        double e = st == TDM_OK ? rel_l2(out, ref, (size_t)n * d) : INFINITY;
        double er = st == TDM_OK ? rel_l2(r2, rref, (size_t)n * d) : INFINITY;
        ok(e <= (bf ? 1e-2 : 1e-5) && er <= 1e-6,
           "rmsnorm+add (%s out): rel L2 %.2e, residual %.2e", bf ? "bf16" : "fp32", e, er);
    }
    check_qk_norm(3, 4, 2, 32);    /* tiny-qwen3 */
    check_qk_norm(5, 32, 8, 128);  /* Qwen3-8B */
    check_qk_norm(2, 16, 16, 256); /* the largest head */
    check_qk_norm(1, 8, 1, 48);    /* hd not a multiple of 32 */

    float *gu = xmalloc((size_t)n * 2 * I * 4);
    for (size_t i = 0; i < (size_t)n * 2 * I; i++)
        gu[i] = rndn(3.0f);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < I; j++)
            ref[(size_t)i * I + j] =
                silu_d(gu[(size_t)i * 2 * I + j]) * gu[(size_t)i * 2 * I + I + j];
    st = tdm_cuda_test_silu_mul(gu, n, I, 0, out);
    double e = st == TDM_OK ? rel_l2(out, ref, (size_t)n * I) : INFINITY;
    ok(e <= 1e-5, "silu*mul: rel L2 %.2e", e);
    {
        /* the interleaved layout: the same pairs moved to columns 2j, 2j + 1 give the same bits */
        float *gi = xmalloc((size_t)n * 2 * I * 4), *oi = xmalloc((size_t)n * I * 4);
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < I; j++) {
                gi[(size_t)i * 2 * I + 2 * j] = gu[(size_t)i * 2 * I + j];
                gi[(size_t)i * 2 * I + 2 * j + 1] = gu[(size_t)i * 2 * I + I + j];
            }
        tdm_status_t si = tdm_cuda_test_silu_mul(gi, n, I, 1, oi);
        ok(st == TDM_OK && si == TDM_OK && !memcmp(oi, out, (size_t)n * I * 4),
           "silu*mul, gate|up interleaved: bit for bit the split layout's");
        free(gi), free(oi);
    }

    /* argmax: ties to the first index, NaN never wins, all-NaN row gives 0 */
    const uint32_t m = 4, vv = 32000;
    float *lg = xmalloc((size_t)m * vv * 4);
    int32_t got[4], want[4];
    for (size_t i = 0; i < (size_t)m * vv; i++)
        lg[i] = rndn(5.0f);
    for (uint32_t r = 0; r < m; r++) {
        uint32_t a = rnd() % vv, b = rnd() % vv;
        lg[(size_t)r * vv + a] = 100.0f;
        lg[(size_t)r * vv + b] = 100.0f;
        want[r] = (int32_t)(a < b ? a : b);
    }
    lg[(size_t)1 * vv + 0] = NAN;
    for (uint32_t i = 0; i < vv; i++)
        lg[(size_t)3 * vv + i] = NAN;
    lg[(size_t)3 * vv + 77] = -1.0f;
    want[3] = 77;
    st = tdm_cuda_test_argmax(lg, m, vv, -1, got);
    ok(st == TDM_OK && !memcmp(got, want, sizeof(got)), "argmax: first max, NaN never wins");
    /* with L2 prefetch blocks in the grid (over the logits): the same ids */
    int pf_same = 1;
    for (int pf = 0; pf < 8 && pf_same; pf += 3) {
        memset(got, 0xff, sizeof(got));
        pf_same =
            tdm_cuda_test_argmax(lg, m, vv, pf, got) == TDM_OK && !memcmp(got, want, sizeof(got));
    }
    ok(pf_same, "argmax with L2 prefetch blocks (ops 0 and 3, op 2 early, op 1 early): same ids");
    free(tv), free(out), free(te), free(ref), free(table), free(resid), free(add), free(w);
    free(r2), free(rref), free(gu), free(lg);
}

/* ---------------------------------------------------------------- RoPE + KV write, attention */

typedef struct kvcase {
    tdm_model_config_t cfg;
    tdm_kv_layout_t l;
    uint32_t H, num_pages;
    uint64_t pool_bytes;
} kvcase_t;

static int kv_setup(kvcase_t *c, uint32_t H, uint32_t KV, uint32_t hd, tdm_dtype_t dt, uint32_t ps)
{
    memset(c, 0, sizeof(*c));
    c->cfg.num_layers = 2;
    c->cfg.num_heads = H;
    c->cfg.num_kv_heads = KV;
    c->cfg.head_dim = hd;
    c->cfg.hidden_size = H * hd;
    c->cfg.rope_theta = 500000.0f;
    c->cfg.rope_type = TDM_ROPE_LLAMA3;
    c->cfg.rope_factor = 8.0f;
    c->cfg.rope_low_freq_factor = 1.0f;
    c->cfg.rope_high_freq_factor = 4.0f;
    c->cfg.rope_original_max_pos = 64;
    c->H = H;
    c->num_pages = 256;
    return tdm_kv_layout_init(&c->cfg, dt, ps, 1, 0, &c->l) == TDM_OK &&
           tdm_kv_layout_pool_bytes(&c->l, c->num_pages, &c->pool_bytes) == TDM_OK;
}

static uint8_t *slot_of(const kvcase_t *c, uint8_t *pool, uint32_t layer, tdm_kv_sub_t sub,
                        uint32_t page, uint32_t slot)
{
    return pool + tdm_kv_layout_region_offset(&c->l, c->num_pages, layer, sub) +
           (uint64_t)page * c->l.sub[sub].page_stride +
           (uint64_t)slot * c->l.sub[sub].bytes_per_token;
}

static double cache_val(const kvcase_t *c, uint8_t *pool, uint32_t layer, int v, uint32_t page,
                        uint32_t slot, uint32_t h, uint32_t i)
{
    uint32_t hd = c->l.head_dim;
    uint8_t *p = slot_of(c, pool, layer, v ? TDM_KV_SUB_V : TDM_KV_SUB_K, page, slot);
    if (c->l.kv_dtype == TDM_DTYPE_BF16)
        return tdm_bf16_to_f32(((uint16_t *)p)[h * hd + i]);
    float s = ((float *)slot_of(c, pool, layer, v ? TDM_KV_SUB_V_SCALE : TDM_KV_SUB_K_SCALE, page,
                                slot))[h];
    return (double)tdm_kv_fp8_decode(p[h * hd + i]) * s;
}

static void check_rope_kv(uint32_t H, uint32_t KV, uint32_t hd, tdm_dtype_t dt)
{
    kvcase_t c;
    tdm_rope_t rope;
    const uint32_t n = 37, nact = 33, layer = 1;
    if (!kv_setup(&c, H, KV, hd, dt, 16) || tdm_rope_init(&c.cfg, &rope) != TDM_OK) {
        ok(0, "kv setup");
        return;
    }
    const uint32_t ld = (H + 2 * KV) * hd, ps = c.l.page_size;
    uint8_t *pool = xmalloc(c.pool_bytes), *before = xmalloc(c.pool_bytes);
    float *qkv = xmalloc((size_t)n * ld * 4), *q0 = xmalloc((size_t)n * ld * 4);
    double *ref = xmalloc((size_t)n * ld * 8);
    uint32_t pos[37], ptoff[37], pages[256];
    memset(pool, 0x5a, c.pool_bytes);
    memcpy(before, pool, c.pool_bytes);
    for (uint32_t i = 0; i < c.num_pages; i++)
        pages[i] = i;
    for (uint32_t i = c.num_pages - 1; i > 0; i--) { /* random page order */
        uint32_t j = rnd() % (i + 1), t = pages[i];
        pages[i] = pages[j];
        pages[j] = t;
    }
    /* rows: distinct positions of one sequence (69 apart), up to ~2540, incl. past 64 */
    for (uint32_t r = 0; r < n; r++) {
        pos[r] = (r * 69 + rnd() % 60) % (c.num_pages * ps);
        ptoff[r] = 0;
    }
    for (size_t i = 0; i < (size_t)n * ld; i++)
        qkv[i] = q0[i] = rndn(2.0f);
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t u = 0; u < H + 2 * KV; u++) {
            const float *x = q0 + (size_t)r * ld + (size_t)u * hd;
            double *o = ref + (size_t)r * ld + (size_t)u * hd;
            for (uint32_t i = 0; i < hd / 2; i++) {
                if (u >= H + KV) {
                    o[i] = x[i];
                    o[i + hd / 2] = x[i + hd / 2];
                    continue;
                }
                double a = (double)((float)pos[r] * rope.inv_freq[i]);
                o[i] = x[i] * cos(a) - x[i + hd / 2] * sin(a);
                o[i + hd / 2] = x[i + hd / 2] * cos(a) + x[i] * sin(a);
            }
        }
    tdm_status_t st = tdm_cuda_test_rope_kv(&c.l, c.num_pages, pool, layer, qkv, n, H,
                                            rope.inv_freq, pos, ptoff, pages, c.num_pages, nact);
    double e = st == TDM_OK ? rel_l2(qkv, ref, (size_t)n * ld) : INFINITY;
    ok(e <= 1e-5, "rope (llama3, H=%u KV=%u hd=%u) q and k: rel L2 %.2e", H, KV, hd, e);

    /* cache: exactly the CPU encoding of the kernel's rotated k and of v; inactive rows untouched
     */
    long bad = 0;
    size_t touched = 0;
    for (uint32_t r = 0; r < n && st == TDM_OK; r++) {
        uint32_t page = pages[pos[r] / ps], slot = pos[r] % ps;
        for (int v = 0; v < 2; v++) {
            uint8_t *p = slot_of(&c, pool, layer, v ? TDM_KV_SUB_V : TDM_KV_SUB_K, page, slot);
            uint8_t *pb = slot_of(&c, before, layer, v ? TDM_KV_SUB_V : TDM_KV_SUB_K, page, slot);
            size_t bpt = c.l.sub[v ? TDM_KV_SUB_V : TDM_KV_SUB_K].bytes_per_token;
            if (r >= nact) {
                bad += memcmp(p, pb, bpt) != 0;
                continue;
            }
            for (uint32_t h = 0; h < KV; h++) {
                const float *x = qkv + (size_t)r * ld + (size_t)(H + v * KV + h) * hd;
                if (dt == TDM_DTYPE_BF16) {
                    for (uint32_t i = 0; i < hd; i++)
                        bad += ((uint16_t *)p)[h * hd + i] != tdm_f32_to_bf16(x[i]);
                } else {
                    float s = tdm_kv_fp8_scale(x, hd);
                    float gs = ((float *)slot_of(&c, pool, layer,
                                                 v ? TDM_KV_SUB_V_SCALE : TDM_KV_SUB_K_SCALE, page,
                                                 slot))[h];
                    bad += memcmp(&s, &gs, 4) != 0;
                    for (uint32_t i = 0; i < hd; i++)
                        bad += p[h * hd + i] != tdm_kv_fp8_encode(x[i] / s);
                }
            }
            touched += bpt;
        }
    }
    /* nothing else in the pool changed */
    size_t changed = 0;
    for (size_t i = 0; i < c.pool_bytes; i++)
        changed += pool[i] != before[i];
    ok(st == TDM_OK && bad == 0 && changed <= touched + (size_t)n * 2 * KV * 4,
       "kv write (%s): bit-exact vs the CPU encoder, %zu bytes changed, inactive rows untouched "
       "(%ld mismatches)",
       dt == TDM_DTYPE_BF16 ? "bf16" : "fp8 e4m3 + scales", changed, bad);
    free(pool), free(before), free(qkv), free(q0), free(ref);
}

static void check_attention(uint32_t H, uint32_t KV, uint32_t hd, tdm_dtype_t dt, uint32_t splits,
                            int mma)
{
    kvcase_t c;
    const uint32_t nseq = 5, layer = 1;
    const uint32_t lens[5] = {1, 17, 300, 1000, 2047};
    if (!kv_setup(&c, H, KV, hd, dt, 16)) {
        ok(0, "kv setup");
        return;
    }
    const uint32_t ld = (H + 2 * KV) * hd, ps = c.l.page_size, G = H / KV;
    uint8_t *pool = xmalloc(c.pool_bytes);
    uint32_t pages[256], pos[5], ptoff[5], np = 0;
    for (uint32_t i = 0; i < c.num_pages; i++)
        pages[i] = i;
    for (uint32_t i = c.num_pages - 1; i > 0; i--) {
        uint32_t j = rnd() % (i + 1), t = pages[i];
        pages[i] = pages[j];
        pages[j] = t;
    }
    /* random K/V everywhere: bf16 values, or fp8 codes (no NaN) with positive scales */
    for (size_t i = 0; i < c.pool_bytes; i++)
        pool[i] = (uint8_t)rnd();
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t p = 0; p < c.num_pages; p++)
            for (uint32_t s = 0; s < ps; s++)
                for (int v = 0; v < 2; v++) {
                    uint8_t *q = slot_of(&c, pool, l, v ? TDM_KV_SUB_V : TDM_KV_SUB_K, p, s);
                    for (uint32_t i = 0; i < KV * hd; i++) {
                        if (dt == TDM_DTYPE_BF16)
                            ((uint16_t *)q)[i] = tdm_f32_to_bf16(rndn(1.0f));
                        else if ((q[i] & 0x7f) == 0x7f)
                            q[i] = 0x10;
                    }
                    if (dt != TDM_DTYPE_BF16) {
                        float *sc = (float *)slot_of(
                            &c, pool, l, v ? TDM_KV_SUB_V_SCALE : TDM_KV_SUB_K_SCALE, p, s);
                        for (uint32_t h = 0; h < KV; h++)
                            sc[h] = 0.002f + (float)(rnd() % 1000) * 1e-5f;
                    }
                }
    for (uint32_t s = 0; s < nseq; s++) {
        pos[s] = lens[s] - 1;
        ptoff[s] = np;
        np += (lens[s] + ps - 1) / ps;
    }
    float *qkv = xmalloc((size_t)nseq * ld * 4), *out = xmalloc((size_t)nseq * H * hd * 4);
    double *ref = xmalloc((size_t)nseq * H * hd * 8), *sc = xmalloc(2048 * 8);
    for (size_t i = 0; i < (size_t)nseq * ld; i++)
        qkv[i] = rndn(1.0f);
    for (uint32_t s = 0; s < nseq; s++)
        for (uint32_t h = 0; h < H; h++) {
            const float *q = qkv + (size_t)s * ld + (size_t)h * hd;
            uint32_t kvh = h / G;
            double mx = -INFINITY, sum = 0;
            for (uint32_t t = 0; t < lens[s]; t++) {
                uint32_t page = pages[ptoff[s] + t / ps], slot = t % ps;
                double a = 0;
                for (uint32_t i = 0; i < hd; i++)
                    a += q[i] * cache_val(&c, pool, layer, 0, page, slot, kvh, i);
                sc[t] = a / sqrt((double)hd);
                if (sc[t] > mx)
                    mx = sc[t];
            }
            double *o = ref + ((size_t)s * H + h) * hd;
            for (uint32_t i = 0; i < hd; i++)
                o[i] = 0;
            for (uint32_t t = 0; t < lens[s]; t++) {
                uint32_t page = pages[ptoff[s] + t / ps], slot = t % ps;
                double p = exp(sc[t] - mx);
                sum += p;
                for (uint32_t i = 0; i < hd; i++)
                    o[i] += p * cache_val(&c, pool, layer, 1, page, slot, kvh, i);
            }
            for (uint32_t i = 0; i < hd; i++)
                o[i] /= sum;
        }
    /* the mma kernel also gets a padding row: the last sequence is past nactive and must read 0 */
    const uint32_t nact = mma ? nseq - 1 : nseq;
    tdm_status_t st = tdm_cuda_test_attention(&c.l, c.num_pages, pool, layer, qkv, nseq, H, pos,
                                              ptoff, pages, np, splits, mma, nact, out);
    int pad_zero = 1;
    for (size_t i = (size_t)nact * H * hd; i < (size_t)nseq * H * hd; i++)
        pad_zero &= out[i] == 0.0f;
    double e = st == TDM_OK ? rel_l2(out, ref, (size_t)nact * H * hd) : INFINITY;
    double tol = mma ? 1e-2 : 1e-5;
    ok(e <= tol && pad_zero,
       "paged attention %s(%s, H=%u KV=%u hd=%u, %u splits, lengths 1..%u): rel L2 %.2e <= %.0e%s",
       mma == 2 ? "tensor-core decode, cluster merge "
       : mma    ? "tensor-core decode "
                : "",
       dt == TDM_DTYPE_BF16 ? "bf16" : "fp8", H, KV, hd, splits, lens[nact - 1], e, tol,
       pad_zero ? "" : "; padding row NOT zero");
    free(pool), free(qkv), free(out), free(ref), free(sc);
}

/* The tensor-core prefill attention: spans of consecutive rows of several sequences (a fresh
 * prompt, a continued chunk, a lone decode row, exactly one tile, a chunk crossing tiles at an
 * unaligned start), each row over positions [0, pos]; bf16 KV in random page order. The kernel
 * rounds q and the probabilities to bf16: tolerance 1e-2. */
static void check_flash_attention(uint32_t H, uint32_t KV, uint32_t hd, uint32_t ps_want)
{
    kvcase_t c;
    const uint32_t nseq = 5, layer = 1;
    const uint32_t pos0[5] = {0, 37, 900, 0, 1000}, cnt[5] = {200, 70, 1, 64, 90};
    if (!kv_setup(&c, H, KV, hd, TDM_DTYPE_BF16, ps_want)) {
        ok(0, "kv setup");
        return;
    }
    const uint32_t ld = (H + 2 * KV) * hd, ps = c.l.page_size, G = H / KV;
    uint32_t n = 0, np = 0, pages[256];
    for (uint32_t s = 0; s < nseq; s++)
        n += cnt[s];
    uint8_t *pool = xmalloc(c.pool_bytes);
    uint32_t *pos = xmalloc(n * 4), *ptoff = xmalloc(n * 4);
    for (uint32_t i = 0; i < c.num_pages; i++)
        pages[i] = i;
    for (uint32_t i = c.num_pages - 1; i > 0; i--) {
        uint32_t j = rnd() % (i + 1), t = pages[i];
        pages[i] = pages[j];
        pages[j] = t;
    }
    for (size_t i = 0; i < c.pool_bytes / 2; i++)
        ((uint16_t *)pool)[i] = tdm_f32_to_bf16(rndn(1.0f));
    for (uint32_t s = 0, r = 0; s < nseq; s++) {
        for (uint32_t t = 0; t < cnt[s]; t++, r++) {
            pos[r] = pos0[s] + t;
            ptoff[r] = np;
        }
        np += (pos0[s] + cnt[s] + ps - 1) / ps;
    }
    float *qkv = xmalloc((size_t)n * ld * 4), *out = xmalloc((size_t)n * H * hd * 4);
    double *ref = xmalloc((size_t)n * H * hd * 8), *sc = xmalloc(2048 * 8);
    for (size_t i = 0; i < (size_t)n * ld; i++)
        qkv[i] = rndn(1.0f);
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t h = 0; h < H; h++) {
            const float *q = qkv + (size_t)r * ld + (size_t)h * hd;
            uint32_t kvh = h / G, len = pos[r] + 1;
            double mx = -INFINITY, sum = 0;
            for (uint32_t t = 0; t < len; t++) {
                uint32_t page = pages[ptoff[r] + t / ps], slot = t % ps;
                const uint16_t *kr =
                    (const uint16_t *)slot_of(&c, pool, layer, TDM_KV_SUB_K, page, slot) + kvh * hd;
                double a = 0;
                for (uint32_t i = 0; i < hd; i++)
                    a += q[i] * (double)tdm_bf16_to_f32(kr[i]);
                sc[t] = a / sqrt((double)hd);
                if (sc[t] > mx)
                    mx = sc[t];
            }
            double *o = ref + ((size_t)r * H + h) * hd;
            for (uint32_t i = 0; i < hd; i++)
                o[i] = 0;
            for (uint32_t t = 0; t < len; t++) {
                uint32_t page = pages[ptoff[r] + t / ps], slot = t % ps;
                const uint16_t *vr =
                    (const uint16_t *)slot_of(&c, pool, layer, TDM_KV_SUB_V, page, slot) + kvh * hd;
                double p = exp(sc[t] - mx);
                sum += p;
                for (uint32_t i = 0; i < hd; i++)
                    o[i] += p * (double)tdm_bf16_to_f32(vr[i]);
            }
            for (uint32_t i = 0; i < hd; i++)
                o[i] /= sum;
        }
    tdm_status_t st = tdm_cuda_test_flash_attention(&c.l, c.num_pages, pool, layer, qkv, n, H, pos,
                                                    ptoff, pages, np, 0, out);
    double e = st == TDM_OK ? rel_l2(out, ref, (size_t)n * H * hd) : INFINITY;
    ok(e <= 1e-2,
       "flash prefill attention (bf16, H=%u KV=%u hd=%u, page size %u, %u rows in 5 spans): rel "
       "L2 %.2e",
       H, KV, hd, ps, n, e);
    /* the plain form (mask on every tile, pages by division) gives the lean form's bits */
    float *out2 = xmalloc((size_t)n * H * hd * 4);
    memset(out2, 0xff, (size_t)n * H * hd * 4);
    tdm_status_t st2 = tdm_cuda_test_flash_attention(&c.l, c.num_pages, pool, layer, qkv, n, H, pos,
                                                     ptoff, pages, np, 1, out2);
    ok(st == TDM_OK && st2 == TDM_OK && !memcmp(out, out2, (size_t)n * H * hd * 4),
       "flash prefill attention, page size %u: the plain form's bits equal the lean form's", ps);
    free(out2);
    free(pool), free(pos), free(ptoff), free(qkv), free(out), free(ref), free(sc);
}

/* The streaming GEMV with the L2 tail prefetch (every op) gives the result of the plain streaming
 * GEMV bit for bit: the prefetch only touches the cache. */
/* Random GEMV inputs in one draw order: x (nx), weights (nwv, before rounding), norm weights (K).
 */
static void gemv_inputs(float *x, uint32_t nx, float *wv, size_t nwv, float *nw, uint32_t K)
{
    for (uint32_t i = 0; i < nx; i++)
        x[i] = rndn(1.0f);
    for (size_t i = 0; i < nwv; i++)
        wv[i] = rndn(0.05f);
    for (uint32_t i = 0; i < K; i++)
        nw[i] = 1.0f + rndn(0.1f);
}

static void check_gemv_l2pf(uint32_t K, uint32_t M, int flags)
{
    const uint32_t ldx = (flags & 2) ? 2 * K : K;
    float *x = xmalloc((size_t)ldx * 4), *wv = xmalloc((size_t)M * K * 4);
    float *nw = xmalloc((size_t)K * 4), *y0 = xmalloc((size_t)M * 4);
    float *ya = xmalloc((size_t)M * 4), *yb = xmalloc((size_t)M * 4);
    double *we = xmalloc((size_t)M * K * 8);
    gemv_inputs(x, ldx, wv, (size_t)M * K, nw, K);
    for (uint32_t i = 0; i < M; i++)
        y0[i] = rndn(1.0f);
    void *w = make_w(wv, (size_t)M * K, TDM_DTYPE_BF16, we);
    memcpy(ya, y0, (size_t)M * 4);
    tdm_status_t st = tdm_cuda_test_gemv(x, 1, K, M, TDM_DTYPE_BF16, w, NULL,
                                         (flags & 1) ? nw : NULL, 1e-5f, flags, 4, ya);
    int same = st == TDM_OK;
    for (int op = 0; op < 4 && same; op++) {
        memcpy(yb, y0, (size_t)M * 4);
        st = tdm_cuda_test_gemv(x, 1, K, M, TDM_DTYPE_BF16, w, NULL, (flags & 1) ? nw : NULL, 1e-5f,
                                flags, 5 + op, yb);
        same = st == TDM_OK && !memcmp(ya, yb, (size_t)M * 4);
        if (!same)
            diag("L2 tail prefetch op %d: %s", op, tdm_status_str(st));
    }
    ok(same,
       "GEMV streaming K=%u M=%u flags=%d with the L2 tail prefetch (ops 0-3): bit for bit "
       "the plain streaming result",
       K, M, flags);
    free(x), free(wv), free(nw), free(y0), free(ya), free(yb), free(we), free(w);
}

/* The embedding lookup folded into layer 0's qkv GEMV (run 12): y and the residual row bit for
 * bit embed_kernel + V2's. */
static void check_gemv_embed(uint32_t K, uint32_t M, int pipe)
{
    const uint32_t V = 97;
    const int32_t id = 61;
    float *tv = xmalloc((size_t)V * K * 4), *wv = xmalloc((size_t)M * K * 4);
    float *nw = xmalloc((size_t)K * 4), *x = xmalloc((size_t)K * 4), *xo = xmalloc((size_t)K * 4);
    float *yr = xmalloc((size_t)M * 4), *yf = xmalloc((size_t)M * 4);
    double *te = xmalloc((size_t)V * K * 8), *we = xmalloc((size_t)M * K * 8);
    gemv_inputs(x, K, wv, (size_t)M * K, nw, K);
    for (size_t i = 0; i < (size_t)V * K; i++)
        tv[i] = rndn(1.0f);
    uint16_t *table = make_w(tv, (size_t)V * K, TDM_DTYPE_BF16, te);
    uint16_t *w = make_w(wv, (size_t)M * K, TDM_DTYPE_BF16, we);
    tdm_status_t st = tdm_cuda_test_embed(table, TDM_DTYPE_BF16, V, K, &id, 1, x);
    if (st == TDM_OK)
        st = tdm_cuda_test_gemv(x, 1, K, M, TDM_DTYPE_BF16, w, NULL, nw, 1e-5f, 1, 9, yr);
    if (st == TDM_OK)
        st = tdm_cuda_test_gemv_embed(table, V, K, M, id, w, nw, 1e-5f, pipe, yf, xo);
    ok(st == TDM_OK && !memcmp(yf, yr, (size_t)M * 4) && !memcmp(xo, x, (size_t)K * 4),
       "GEMV %s with the embedding folded in K=%u M=%u: y and the residual row bit for bit "
       "embed + V2's (%s)",
       pipe ? "V4" : "V2", K, M, tdm_status_str(st));
    free(tv), free(wv), free(nw), free(x), free(xo), free(yr), free(yf), free(te), free(we);
    free(table), free(w);
}

/* The one-row form v (use_cublas) against V2 (9) on the same inputs: every output bit equal. */
static void check_gemv_same(uint32_t K, uint32_t M, int flags, int v)
{
    const uint32_t ldx = (flags & 2) ? 2 * K : K;
    float *x = xmalloc((size_t)ldx * 4), *wv = xmalloc((size_t)M * K * 4);
    float *nw = xmalloc((size_t)K * 4), *ya = xmalloc((size_t)M * 4), *yb = xmalloc((size_t)M * 4);
    double *we = xmalloc((size_t)M * K * 8);
    gemv_inputs(x, ldx, wv, (size_t)M * K, nw, K);
    void *w = make_w(wv, (size_t)M * K, TDM_DTYPE_BF16, we);
    for (uint32_t m = 0; m < M; m++)
        ya[m] = yb[m] = 0.25f * (float)(m % 7);
    tdm_status_t st = tdm_cuda_test_gemv(x, 1, K, M, TDM_DTYPE_BF16, w, NULL,
                                         (flags & 1) ? nw : NULL, 1e-5f, flags, 9, ya);
    if (st == TDM_OK)
        st = tdm_cuda_test_gemv(x, 1, K, M, TDM_DTYPE_BF16, w, NULL, (flags & 1) ? nw : NULL, 1e-5f,
                                flags, v, yb);
    ok(st == TDM_OK && !memcmp(ya, yb, (size_t)M * 4),
       "GEMV form %d K=%u M=%u flags=%d: bit for bit V2's (%s)", v, K, M, flags,
       tdm_status_str(st));
    free(x), free(wv), free(nw), free(ya), free(yb), free(we), free(w);
}

/* Run 11's fused epilogues of the streaming V2 GEMV. swiglu: w (2M, K) gate|up interleaved (rows
 * gate_0, up_0, ...) with the fused RMSNorm; y (M) must equal silu_mul (interleaved) over V2's own
 * (2M) output bit for bit (the same rows, the same device SiLU), and the fp64 reference within
 * 1e-5. argmax (swiglu 0): y bit for bit V2's,
 * the id the first index of y's largest value, over `calls` launches on one workspace; rows tie
 * (t1 < t2, the largest value, bit-equal by construction) when tie is set. */
static void check_gemv_fused(uint32_t K, uint32_t M, int dt, int swiglu, int tie, int pipe)
{
    const uint32_t rows = swiglu ? 2 * M : M;
    float *x = xmalloc((size_t)K * 4), *wv = xmalloc((size_t)rows * K * 4);
    float *nw = xmalloc((size_t)K * 4), *yr = xmalloc((size_t)rows * 4);
    float *yf = xmalloc((size_t)M * 4), *ys = xmalloc((size_t)M * 4);
    double *we = xmalloc((size_t)rows * K * 8), *ref = xmalloc((size_t)M * 8);
    const uint32_t t1 = M > 9 ? 5 : 0, t2 = M - 3;
    gemv_inputs(x, K, wv, (size_t)rows * K, nw, K);
    if (tie && !swiglu && t2 > t1)
        for (uint32_t k = 0; k < K; k++)
            wv[(size_t)t1 * K + k] = wv[(size_t)t2 * K + k] = x[k] < 0 ? -0.05f : 0.05f;
    void *w = make_w(wv, (size_t)rows * K, dt, we);
    int32_t id = -7;
    tdm_status_t st = tdm_cuda_test_gemv(x, 1, K, rows, dt, w, NULL, nw, 1e-5f, 1, 9, yr);
    if (st == TDM_OK)
        st = tdm_cuda_test_gemv_fused(x, K, M, dt, w, nw, 1e-5f, 1, swiglu, swiglu ? 1 : 3, pipe,
                                      yf, swiglu ? NULL : &id);
    if (st == TDM_OK && swiglu)
        st = tdm_cuda_test_silu_mul(yr, 1, M, 1, ys);
    if (st != TDM_OK)
        diag("fused GEMV K=%u M=%u: %s", K, M, tdm_status_str(st));
    const char *wn = dt == TDM_DTYPE_BF16 ? "bf16" : dt == TDM_DTYPE_F16 ? "f16" : "f32";
    if (swiglu) {
        double ss = 0, rs;
        for (uint32_t k = 0; k < K; k++)
            ss += (double)x[k] * x[k];
        rs = 1.0 / sqrt(ss / K + 1e-5);
        for (uint32_t m = 0; m < M; m++) {
            double g = 0, u = 0;
            for (uint32_t k = 0; k < K; k++) {
                const double xe = x[k] * rs * nw[k];
                g += we[(size_t)2 * m * K + k] * xe;
                u += we[(size_t)(2 * m + 1) * K + k] * xe;
            }
            ref[m] = silu_d(g) * u;
        }
        const double e = st == TDM_OK ? rel_l2(yf, ref, M) : INFINITY;
        ok(st == TDM_OK && !memcmp(yf, ys, (size_t)M * 4) && e <= 1e-5,
           "GEMV %s + SwiGLU epilogue K=%u M=%u w=%s: bit for bit silu_mul of V2's gate|up, rel "
           "L2 %.2e <= 1e-5",
           pipe ? "V4" : "V2", K, M, wn, e);
    } else {
        int32_t want = -1;
        float best = -INFINITY;
        for (uint32_t m = 0; m < M; m++)
            if (yr[m] > best || (want < 0 && yr[m] == yr[m])) {
                best = yr[m];
                want = (int32_t)m;
            }
        ok(st == TDM_OK && !memcmp(yf, yr, (size_t)M * 4) && id == want &&
               (!tie || want == (int32_t)t1),
           "GEMV %s + argmax epilogue K=%u M=%u w=%s%s, 3 launches: logits bit for bit V2's, id "
           "%d == %d",
           pipe ? "V4" : "V2", K, M, wn, tie ? " (two tied rows)" : "", id, want);
    }
    free(x), free(wv), free(nw), free(yr), free(yf), free(ys), free(we), free(ref), free(w);
}

/* One tdm_cuda_test_decode_rope call of check_decode_rope's case: pool, form, l2pf, out vary. */
typedef struct drope {
    const kvcase_t *c;
    uint32_t layer, n, H, np, splits;
    const float *qkv, *inv_freq;
    const uint32_t *pos, *ptoff, *pages;
} drope_t;

static tdm_status_t drope_run(const drope_t *d, uint8_t *pool, int form, int l2pf, float *out)
{
    return tdm_cuda_test_decode_rope(&d->c->l, d->c->num_pages, pool, d->layer, d->qkv, d->n, d->H,
                                     d->inv_freq, d->pos, d->ptoff, d->pages, d->np, d->n - 1,
                                     d->splits, form, l2pf, out);
}

/* The decode attention with RoPE and the KV write fused in must leave the same cache bits and
 * give the same output bits as rope_kv_write followed by the unfused kernel (one rotation
 * arithmetic): rows of different lengths and tables, split 1 and 4, a padding row. */
static void check_decode_rope(uint32_t H, uint32_t KV, uint32_t hd, uint32_t splits)
{
    kvcase_t c;
    tdm_rope_t rope;
    const uint32_t n = 6, layer = 1, lens[6] = {1, 2, 40, 333, 1000, 77};
    if (!kv_setup(&c, H, KV, hd, TDM_DTYPE_BF16, 16) || tdm_rope_init(&c.cfg, &rope) != TDM_OK) {
        ok(0, "kv setup");
        return;
    }
    const uint32_t ld = (H + 2 * KV) * hd, ps = c.l.page_size;
    uint32_t pos[6], ptoff[6], pages[256], np = 0;
    for (uint32_t i = 0; i < c.num_pages; i++)
        pages[i] = (i * 37u + 11u) % c.num_pages;
    for (uint32_t s = 0; s < n; s++) {
        pos[s] = lens[s] - 1;
        ptoff[s] = np;
        np += (lens[s] + ps - 1) / ps;
    }
    uint8_t *p0 = xmalloc(c.pool_bytes), *p1 = xmalloc(c.pool_bytes);
    for (size_t i = 0; i < c.pool_bytes / 2; i++)
        ((uint16_t *)p0)[i] = tdm_f32_to_bf16(rndn(1.0f));
    memcpy(p1, p0, c.pool_bytes);
    float *qkv = xmalloc((size_t)n * ld * 4), *o0 = xmalloc((size_t)n * H * hd * 4),
          *o1 = xmalloc((size_t)n * H * hd * 4);
    for (size_t i = 0; i < (size_t)n * ld; i++)
        qkv[i] = rndn(1.0f);
    const drope_t dr = {&c, layer, n, H, np, splits, qkv, rope.inv_freq, pos, ptoff, pages};
    tdm_status_t s0 = drope_run(&dr, p0, 0, -1, o0);
    tdm_status_t s1 = drope_run(&dr, p1, 1, -1, o1);
    int same_pool = s0 == TDM_OK && s1 == TDM_OK && !memcmp(p0, p1, c.pool_bytes);
    int same_out = s0 == TDM_OK && s1 == TDM_OK && !memcmp(o0, o1, (size_t)n * H * hd * 4);
    ok(same_pool && same_out,
       "decode attention with fused RoPE + KV write (H=%u KV=%u hd=%u, %u splits): cache %s, "
       "output %s the unfused path's",
       H, KV, hd, splits, same_pool ? "==" : "!=", same_out ? "==" : "!=");
    /* the same grid with L2 prefetch blocks (over the pool image) after the rows: every op,
     * after and before the PDL wait, leaves the same cache and output bits */
    int pf_same = s1 == TDM_OK;
    for (int pf = 0; pf < 8 && pf_same; pf++) {
        memcpy(p0, p1, c.pool_bytes); /* the fused run's cache, written again at the same slots */
        memset(o0, 0xff, (size_t)n * H * hd * 4);
        tdm_status_t s2 = drope_run(&dr, p0, 1, pf, o0);
        pf_same = s2 == TDM_OK && !memcmp(p0, p1, c.pool_bytes) &&
                  !memcmp(o0, o1, (size_t)n * H * hd * 4);
        if (!pf_same)
            diag("L2 prefetch blocks op %d%s: %s", pf & 3, pf & 4 ? " early" : "",
                 tdm_status_str(s2));
    }
    ok(pf_same,
       "decode attention with L2 prefetch blocks in the grid (H=%u KV=%u hd=%u, %u splits; ops "
       "0-3, after and before the PDL wait): cache and output bits unchanged",
       H, KV, hd, splits);
    /* the cluster form (splits <= 8 merged in the kernel): fused (first tiles issued before the
     * PDL wait) against unfused, the same cache and output bits; with one split its output is
     * the combine-kernel form's too (no merge) */
    if (splits <= 8) {
        memcpy(p0, p1, c.pool_bytes); /* the fused run's cache: the same K/V as the fresh one */
        float *o2 = xmalloc((size_t)n * H * hd * 4), *o3 = xmalloc((size_t)n * H * hd * 4);
        uint8_t *p2 = xmalloc(c.pool_bytes);
        memcpy(p2, p0, c.pool_bytes);
        tdm_status_t s2 = drope_run(&dr, p0, 2, -1, o2);
        tdm_status_t s3 = drope_run(&dr, p2, 3, -1, o3);
        int cp = s2 == TDM_OK && s3 == TDM_OK && !memcmp(p0, p2, c.pool_bytes);
        int co = s2 == TDM_OK && s3 == TDM_OK && !memcmp(o2, o3, (size_t)n * H * hd * 4);
        int c1 = splits != 1 || (co && !memcmp(o3, o1, (size_t)n * H * hd * 4));
        ok(cp && co && c1,
           "decode attention, cluster form (H=%u KV=%u hd=%u, %u splits): fused cache %s, output "
           "%s the unfused path's%s",
           H, KV, hd, splits, cp ? "==" : "!=", co ? "==" : "!=",
           splits == 1 ? (c1 ? "; == the combine form's (1 split)" : "; != the combine form's")
                       : "");
        free(o2), free(o3), free(p2);
    }
    free(p0), free(p1), free(qkv), free(o0), free(o1);
}

/* Counts one benchmark run; true when it reported a time. */
static int timed_ok(tdm_status_t st, int *runs, int *timed)
{
    ++*runs;
    *timed += st == TDM_OK;
    return st == TDM_OK;
}

static void bench(void)
{
    int runs = 0, timed = 0;
    static const struct {
        const char *name;
        uint32_t K, M;
    } shapes[] = {{"qkv", 2048, 2560},
                  {"o", 2048, 2048},
                  {"gate_up", 2048, 11264},
                  {"down", 5632, 2048},
                  {"lm_head", 2048, 32000}};
    static const uint32_t ns[] = {1, 8, 32, 2048};
    double ms = 0;
    size_t bytes = (size_t)2 << 30;
    if (timed_ok(tdm_cuda_bench_copy(bytes, 10, &ms), &runs, &timed))
        diag("bench copy d2d %zu MiB: %.3f ms = %.0f GB/s (read + write)", bytes >> 20, ms,
             2.0 * (double)bytes / (ms * 1e-3) / 1e9);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (size_t i = 0; i < 4; i++)
            for (int cb = ns[i] > 32; cb < (ns[i] == 1 ? 5 : ns[i] <= 32 ? 3 : 2); cb++) {
                if (!timed_ok(tdm_cuda_bench_gemv(ns[i], shapes[s].K, shapes[s].M, cb, 20, &ms),
                              &runs, &timed))
                    continue;
                double wb = 2.0 * shapes[s].K * shapes[s].M;
                diag("bench %s %s n=%u K=%u M=%u: %.1f us = %.0f GB/s of weights",
                     cb == 4   ? "gemv-stream"
                     : cb == 3 ? "gemv-ksplit"
                     : cb == 2 ? "skinny"
                     : cb      ? "cublas"
                               : "gemv",
                     shapes[s].name, ns[i], shapes[s].K, shapes[s].M, ms * 1e3,
                     wb / (ms * 1e-3) / 1e9);
            }
    /* the tile GEMM against cuBLAS at the decode and mixed-step row counts it takes over
     * (docs/cuda.md "A GEMM for 16-256 rows"): both HBM-bound over >= 160 MB of weight copies */
    static const uint32_t nt[] = {16, 32, 64, 128, 256};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (size_t i = 0; i < sizeof(nt) / sizeof(nt[0]); i++)
            for (int v = 0; v < 4; v++) {
                static const int cbs[4] = {1, 18, 21, 22};
                static const char *const names[4] = {"cublas", "tile", "tile-1split",
                                                     "tile-shallow"};
                const int cb = cbs[v];
                if (!timed_ok(tdm_cuda_bench_gemv(nt[i], shapes[s].K, shapes[s].M, cb, 20, &ms),
                              &runs, &timed))
                    continue;
                double wb = 2.0 * shapes[s].K * shapes[s].M;
                diag("bench %s %s n=%u K=%u M=%u: %.1f us = %.0f GB/s of weights, %.0f TFLOP/s "
                     "(splits %u)",
                     names[v], shapes[s].name, nt[i], shapes[s].K, shapes[s].M, ms * 1e3,
                     wb / (ms * 1e-3) / 1e9, wb * nt[i] / (ms * 1e-3) / 1e12,
                     cb == 18   ? tdm_cuda_test_tile_splits(nt[i], shapes[s].K, shapes[s].M)
                     : cb == 21 ? 1u
                                : 0u);
            }
    /* attention: prefill 2048 (one sequence, all rows) flash (lean, then plain) vs split-K; a
     * 400-row chunk after 400 positions (a mixed step's); decode rows at KV 256 */
    static const int fls[] = {0, 1, 3};
    for (int i = 0; i < 3; i++)
        if (timed_ok(tdm_cuda_bench_attention(1, 2048, 2048, 1, fls[i], 5, &ms), &runs, &timed))
            diag("bench attention prefill 2048 %s: %.1f us (%.0f TFLOP/s causal)",
                 fls[i] == 3   ? "flash plain"
                 : fls[i] == 1 ? "flash lean"
                               : "split-K",
                 ms * 1e3, 32.0 * 2048 * 2049 / 2 * 64 * 4 / (ms * 1e-3) / 1e12);
    for (int i = 1; i < 3; i++)
        if (timed_ok(tdm_cuda_bench_attention(1, 400, 800, 1, fls[i], 20, &ms), &runs, &timed))
            diag("bench attention chunk 400 after 400 %s: %.1f us",
                 fls[i] == 3 ? "flash plain" : "flash lean", ms * 1e3);
    static const uint32_t dbs[] = {1, 8, 32}, dsp[] = {1, 4, 8, 32};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 4; j++)
            for (int mm = 0; mm < 2; mm++)
                if (timed_ok(tdm_cuda_bench_attention(dbs[i], 1, 256, dsp[j], mm ? 2 : 0, 50, &ms),
                             &runs, &timed))
                    diag("bench attention decode %s bs%u KV 256 splits %u: %.1f us",
                         mm ? "mma" : "split-K", dbs[i], dsp[j], ms * 1e3);
    if (timed < runs)
        diag("%d of %d micro-benchmarks reported no time", runs - timed, runs);
    ok(timed > 0, "micro-benchmarks ran (%d of %d timed)", timed, runs);
}

int main(void)
{
    tdm_cuda_smoke_dev_t dev;
    char why[256] = "";
    if (tdm_cuda_smoke_probe(&dev, why, sizeof(why)) != TDM_OK) {
        char msg[320];
        snprintf(msg, sizeof(msg), "no CUDA device (%s)", why);
        skip_all(msg);
    }
    if (dev.major != 9) {
        char msg[320];
        snprintf(msg, sizeof(msg), "built for sm_90a only; device is sm_%d%d", dev.major,
                 dev.minor);
        skip_all(msg);
    }
    rng_state = 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
    diag("seed %llu", (unsigned long long)rng_state);

    check_small_ops();
    check_norm_silu_vec(9, 2048, 1000);
    check_norm_silu_vec(1, 128, 4);
    check_lt(64, 512, 768, 0);
    check_lt(24, 1024, 320, 1);
    check_lt(5, 256, 1000, 0);
    check_gemv(1, 1024, 777, TDM_DTYPE_BF16, 0, 1, 0);
    check_gemv(3, 2048, 301, TDM_DTYPE_BF16, 1, 0, 0);
    check_gemv(8, 520, 64, TDM_DTYPE_BF16, 2 | 4, 0, 0);
    check_gemv(13, 264, 99, TDM_DTYPE_BF16, 4, 0, 0);
    check_gemv(2, 136, 50, TDM_DTYPE_F16, 1, 1, 0);
    check_gemv(5, 64, 33, TDM_DTYPE_F32, 0, 1, 0);
    check_gemv(37, 1024, 300, TDM_DTYPE_BF16, 0, 0, 1);
    check_gemv(64, 512, 256, TDM_DTYPE_BF16, 4, 0, 1);
    check_gemv(1, 1024, 777, TDM_DTYPE_BF16, 0, 1, 3);
    check_gemv(1, 5632, 300, TDM_DTYPE_BF16, 2 | 4, 0, 3);
    check_gemv(1, 2048, 513, TDM_DTYPE_BF16, 1, 1, 3);
    check_gemv(1, 136, 50, TDM_DTYPE_F16, 1, 1, 3);
    check_gemv(1, 64, 33, TDM_DTYPE_F32, 4, 0, 3);
    check_gemv(1, 2048, 777, TDM_DTYPE_BF16, 0, 1, 4);
    check_gemv(1, 5632, 300, TDM_DTYPE_BF16, 2 | 4, 0, 4);
    check_gemv(1, 5632, 2048, TDM_DTYPE_BF16, 2 | 4, 0, 4);
    check_gemv(1, 2048, 11264, TDM_DTYPE_BF16, 1, 0, 4);
    check_gemv(1, 2048, 2048, TDM_DTYPE_BF16, 4, 0, 4);
    check_gemv(1, 256, 3, TDM_DTYPE_BF16, 1, 1, 4);
    check_gemv(1, 512, 50, TDM_DTYPE_F16, 1, 1, 4);
    check_gemv(1, 128, 33, TDM_DTYPE_F32, 4, 0, 4);
    check_gemv(1, 136, 50, TDM_DTYPE_BF16, 1, 1, 4);
    for (int v = 9; v <= 17; v++) {
        check_gemv(1, 2048, 2560, TDM_DTYPE_BF16, 1, 1, v);
        check_gemv(1, 2048, 11264, TDM_DTYPE_BF16, 1, 0, v);
        check_gemv(1, 5632, 2048, TDM_DTYPE_BF16, 2 | 4, 0, v);
        check_gemv(1, 2048, 2048, TDM_DTYPE_BF16, 4, 0, v);
        check_gemv(1, 256, 3, TDM_DTYPE_BF16, 1, 1, v);
        check_gemv(1, 512, 50, TDM_DTYPE_F16, 1, 1, v);
        check_gemv(1, 128, 33, TDM_DTYPE_F32, 1, 0, v);
    }
    check_gemv(1, 128, 70001, TDM_DTYPE_BF16, 1, 1, 11); /* > 32 rows per warp */
    check_gemv(1, 128, 70001, TDM_DTYPE_BF16, 4, 0, 11);
    check_gemv(1, 128, 70001, TDM_DTYPE_BF16, 1, 1, 12);
    check_gemv(1, 2048, 2560, TDM_DTYPE_BF16, 0, 0, 2);
    check_gemv(8, 1024, 301, TDM_DTYPE_BF16, 4, 0, 2);
    check_gemv(13, 96, 35, TDM_DTYPE_BF16, 0, 1, 2);
    check_gemv(32, 5632, 200, TDM_DTYPE_BF16, 2 | 4, 0, 2);
    check_gemv(17, 352, 64, TDM_DTYPE_BF16, 2, 0, 2);
    /* the tile GEMM: rows in 1..4 groups of 64 with a ragged last group, features past a whole
     * 128-feature tile, K split by its own rule, by 1 and by 5 (uneven k ranges), accum */
    check_gemv(1, 64, 5, TDM_DTYPE_BF16, 0, 0, 18);
    check_gemv(33, 2048, 2560, TDM_DTYPE_BF16, 0, 0, 18);
    check_gemv(64, 2048, 2048, TDM_DTYPE_BF16, 4, 0, 18);
    check_gemv(100, 5632, 300, TDM_DTYPE_BF16, 0, 0, 18);
    check_gemv(129, 640, 1000, TDM_DTYPE_BF16, 4, 0, 18);
    check_gemv(256, 1024, 384, TDM_DTYPE_BF16, 0, 0, 18);
    check_gemv(200, 320, 130, TDM_DTYPE_BF16, 4, 0, 19);
    check_gemv(64, 1024, 2816, TDM_DTYPE_BF16, 0, 0, 19);
    check_gemv(77, 704, 250, TDM_DTYPE_BF16, 0, 0, 20);
    check_gemv(250, 1344, 513, TDM_DTYPE_BF16, 4, 0, 20);
    check_gemv(64, 2048, 2560, TDM_DTYPE_BF16, 0, 0, 23);
    check_gemv(190, 1024, 700, TDM_DTYPE_BF16, 4, 0, 23);
    check_gemv_fused(2048, 5632, TDM_DTYPE_BF16, 1, 0, 0);
    check_gemv_fused(256, 301, TDM_DTYPE_BF16, 1, 0, 0);
    check_gemv_fused(512, 40, TDM_DTYPE_F16, 1, 0, 0);
    check_gemv_fused(128, 33, TDM_DTYPE_F32, 1, 0, 0);
    check_gemv_fused(2048, 32000, TDM_DTYPE_BF16, 0, 0, 0);
    check_gemv_fused(2048, 32000, TDM_DTYPE_BF16, 0, 1, 0);
    check_gemv_fused(256, 777, TDM_DTYPE_BF16, 0, 1, 0);
    check_gemv_fused(128, 3, TDM_DTYPE_F32, 0, 0, 0);
    /* V4 (ring of 2, then 1): the epilogues through the ring, bit for bit V2's */
    for (int p = 2; p >= 1; p--) {
        check_gemv_fused(2048, 5632, TDM_DTYPE_BF16, 1, 0, p);
        check_gemv_fused(256, 301, TDM_DTYPE_BF16, 1, 0, p);
        check_gemv_fused(2048, 32000, TDM_DTYPE_BF16, 0, 1, p);
        check_gemv_fused(128, 3, TDM_DTYPE_F32, 0, 0, p);
    }
    for (int p = 0; p <= 2; p++) {
        check_gemv_embed(2048, 2560, p);
        check_gemv_embed(256, 301, p);
    }
    for (int v = 16; v <= 17; v++) { /* V4's sums are V2's, in the same order */
        check_gemv_same(2048, 2560, 1, v);
        check_gemv_same(5632, 2048, 2 | 4, v);
        check_gemv_same(2048, 2048, 4, v);
        check_gemv_same(128, 70001, 1, v);
        check_gemv_same(2048, 32000, 1, v);
    }
    check_gemv_l2pf(2048, 2048, 4);
    check_gemv_l2pf(5632, 300, 2 | 4);
    check_gemv_l2pf(2048, 777, 1);
    check_rope_kv(32, 4, 64, TDM_DTYPE_BF16);
    check_rope_kv(32, 4, 64, TDM_DTYPE_FP8_E4M3);
    check_rope_kv(4, 2, 16, TDM_DTYPE_BF16);
    check_rope_kv(2, 2, 128, TDM_DTYPE_FP8_E4M3);
    check_attention(32, 4, 64, TDM_DTYPE_BF16, 1, 0);
    check_attention(32, 4, 64, TDM_DTYPE_BF16, 7, 0);
    check_attention(32, 4, 64, TDM_DTYPE_FP8_E4M3, 32, 0);
    check_attention(4, 2, 16, TDM_DTYPE_BF16, 3, 0);
    check_attention(2, 2, 128, TDM_DTYPE_FP8_E4M3, 5, 0);
    check_attention(32, 4, 64, TDM_DTYPE_BF16, 1, 1);
    check_attention(32, 4, 64, TDM_DTYPE_BF16, 8, 1);
    check_attention(8, 2, 128, TDM_DTYPE_BF16, 3, 1);
    check_attention(6, 3, 64, TDM_DTYPE_BF16, 32, 1);
    check_attention(32, 4, 64, TDM_DTYPE_BF16, 8, 2);
    check_attention(32, 4, 64, TDM_DTYPE_BF16, 2, 2);
    check_attention(32, 4, 64, TDM_DTYPE_BF16, 1, 2);
    check_attention(8, 2, 128, TDM_DTYPE_BF16, 3, 2);
    check_attention(6, 3, 64, TDM_DTYPE_BF16, 8, 2);
    check_decode_rope(32, 4, 64, 1);
    check_decode_rope(8, 2, 128, 4);
    check_decode_rope(32, 4, 64, 8);
    check_decode_rope(6, 3, 64, 5);
    check_flash_attention(16, 2, 64, 16);
    check_flash_attention(4, 2, 128, 16);
    check_flash_attention(6, 3, 64, 16);
    check_flash_attention(16, 2, 64, 12); /* not a power of two: pages by division */
    if (getenv("TDM_UNDER_SANITIZER"))
        skip("micro-benchmarks skipped under compute-sanitizer");
    else
        bench();
    return done_testing();
}
