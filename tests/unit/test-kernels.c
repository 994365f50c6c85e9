/*
 * test-kernels.c — the CPU backend against plain fp64 references (tolerance), and the
 * determinism contract of backend.h against itself (bit for bit): the reduction tree, TP rank
 * combine, batch and thread-count invariance of matmul, RoPE tables per scaling type, attention
 * over a paged cache in bf16/fp8/f32; and the generic C kernel table against the AVX2 one, bit
 * for bit, on shapes that reach every path (in-place and converted weights, short blocks, K
 * tails, partial panels, several chunks and token tiles).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include <tdm/kv.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_int.h"
#include "tap.h"

static uint64_t rng = 88172645463325252ull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}

static int bits_equal(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static double max_rel(const float *got, const double *ref, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(e <= m))
            m = e;
    }
    return m;
}

static void test_tree(void)
{
    float p[12];
    for (int i = 0; i < 12; i++)
        p[i] = (float)(1 << i) * 1.0f;
    ok(tdm_reduce_tree(p, 12) == 4095.0f, "tree sums 12 partials");
    /* order matters in fp32: ((a+b)+(c+d)) vs sequential */
    float q[4] = {1e8f, 1.0f, -1e8f, 1.0f};
    ok(tdm_reduce_tree(q, 4) == (1e8f + 1.0f) + (-1e8f + 1.0f), "tree is pairwise (a+b)+(c+d)");
    float r[3] = {1e8f, -1e8f, 1.0f};
    ok(tdm_reduce_tree(r, 3) == (1e8f + -1e8f) + 1.0f, "odd count splits (n+1)/2 first");

    /* Rank subtrees combined in rank order == full tree, for N = 2, 4, 8 over 8, 24, 40 blocks */
    int all = 1;
    for (uint32_t nb = 8; nb <= 40; nb += 16)
        for (uint32_t N = 2; N <= 8; N *= 2) {
            float parts[40], rank_sum[8];
            const float *pp[8];
            fill(parts, nb, 1000.0f);
            for (uint32_t rnk = 0; rnk < N; rnk++) {
                rank_sum[rnk] = tdm_reduce_tree(parts + rnk * nb / N, nb / N);
                pp[rnk] = &rank_sum[rnk];
            }
            float comb;
            tdm_reduce_tree_combine(pp, N, &comb, 1);
            all &= comb == tdm_reduce_tree(parts, nb);
        }
    ok(all, "rank subtrees + tdm_reduce_tree_combine == full tree (N=2,4,8; nb=8,24,40)");

    float a[1000], b[1000];
    double ref = 0;
    fill(a, 1000, 1.0f);
    fill(b, 1000, 1.0f);
    for (int i = 0; i < 1000; i++)
        ref += (double)a[i] * b[i];
    ok(fabs(tdm_dot_f32(a, b, 1000) - ref) < 1e-4, "dot within 1e-4 of fp64");
    float big_a[64 * 70], big_b[64 * 70], bp[70];
    fill(big_a, 64 * 70, 1.0f);
    fill(big_b, 64 * 70, 1.0f);
    for (int bi = 0; bi < 70; bi++) {
        float s[8] = {0};
        for (int k = 0; k < 64; k++)
            s[k % 8] = s[k % 8] + big_a[bi * 64 + k] * big_b[bi * 64 + k];
        bp[bi] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    }
    ok(tdm_dot_f32(big_a, big_b, 64 * 70) == tdm_reduce_tree(bp, 70),
       "dot over > 64 blocks follows the same tree");
    /* a short last block: lanes past the end stay +0 and still enter the lane tree */
    {
        float s[8] = {0};
        for (int k = 0; k < 13; k++)
            s[k % 8] = s[k % 8] + big_a[64 + k] * big_b[64 + k];
        float blk = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        ok(tdm_dot_f32(big_a, big_b, 77) == bp[0] + blk,
           "dot of 77 = block 0 + lane tree of the 13-element block");
    }
}

/* W (M, K) in dtype dt with row stride ld, from fp32 values (rounded); wf receives the values. */
static void *make_weight(tdm_dtype_t dt, uint32_t M, uint32_t K, uint32_t ld, float *wf,
                         tdm_tensor_t *t)
{
    size_t es = dt == TDM_DTYPE_F32 ? 4 : 2;
    uint8_t *d = calloc((size_t)M * ld, es);
    for (uint32_t i = 0; i < M; i++)
        for (uint32_t j = 0; j < K; j++) {
            float v = frand() * 0.5f;
            size_t idx = (size_t)i * ld + j;
            if (dt == TDM_DTYPE_BF16) {
                ((uint16_t *)d)[idx] = tdm_cpu_to_bf16(v);
                v = tdm_cpu_bf16(((uint16_t *)d)[idx]);
            } else if (dt == TDM_DTYPE_F16) {
                _Float16 h = (_Float16)v;
                memcpy((uint16_t *)d + idx, &h, 2);
                v = (float)h;
            } else {
                ((float *)d)[idx] = v;
            }
            wf[(size_t)i * K + j] = v;
        }
    t->dtype = dt;
    t->rows = M;
    t->cols = K;
    t->row_stride = ld;
    t->data = d;
    return d;
}

static void test_matmul(tdm_backend_t *be1, tdm_backend_t *be3)
{
    const uint32_t M = 37, K = 200, N = 9;
    float *x = malloc(sizeof(float) * N * K), *wf = malloc(sizeof(float) * M * K);
    float *y = malloc(sizeof(float) * N * M), *y1 = malloc(sizeof(float) * N * M);
    float *y3 = malloc(sizeof(float) * N * M), bias_f[37];
    double *ref = malloc(sizeof(double) * N * M);
    tdm_tensor_t w, bias = {TDM_DTYPE_F32, 1, M, M, bias_f};
    const tdm_dtype_t dts[3] = {TDM_DTYPE_BF16, TDM_DTYPE_F16, TDM_DTYPE_F32};

    fill(x, (size_t)N * K, 1.0f);
    fill(bias_f, M, 1.0f);
    for (int d = 0; d < 3; d++) {
        void *mem = make_weight(dts[d], M, K, K + 13, wf, &w);
        for (uint32_t i = 0; i < N; i++)
            for (uint32_t j = 0; j < M; j++) {
                double s = bias_f[j];
                for (uint32_t k = 0; k < K; k++)
                    s += (double)x[i * K + k] * wf[(size_t)j * K + k];
                ref[i * M + j] = s;
            }
        is_int(be3->matmul(be3->ctx, x, N, &w, &bias, y3), TDM_OK, "matmul %s",
               d == 0   ? "bf16"
               : d == 1 ? "f16"
                        : "f32");
        double e = max_rel(y3, ref, (size_t)N * M);
        ok(e < 1e-5, "matmul %d vs fp64: max rel err %.2e", d, e);

        /* exactly the scalar contract: dot (blocks + tree) then bias */
        int exact = 1;
        for (uint32_t i = 0; i < N; i++)
            for (uint32_t j = 0; j < M; j++)
                exact &= y3[i * M + j] == tdm_dot_f32(x + i * K, wf + (size_t)j * K, K) + bias_f[j];
        ok(exact, "matmul %d == tdm_dot_f32 + bias, bit for bit", d);

        be1->matmul(be1->ctx, x, N, &w, &bias, y1);
        ok(bits_equal(y1, y3, (size_t)N * M), "matmul %d: 1 thread == 3 threads", d);
        for (uint32_t i = 0; i < N; i++)
            be3->matmul(be3->ctx, x + i * K, 1, &w, &bias, y + i * M);
        ok(bits_equal(y, y3, (size_t)N * M), "matmul %d: rows one by one == batch of 9", d);
        free(mem);
    }

    /* Row-parallel TP: K = 256 = 4 blocks; rank halves as column slices (row_stride) */
    {
        const uint32_t K2 = 256, M2 = 20;
        float *x2 = malloc(sizeof(float) * 3 * K2), *w2 = malloc(sizeof(float) * M2 * K2);
        float full[60], p0[60], p1[60], comb[60];
        tdm_tensor_t wt = {TDM_DTYPE_F32, M2, K2, K2, w2}, s0 = wt, s1 = wt;
        fill(x2, 3 * K2, 1.0f);
        fill(w2, (size_t)M2 * K2, 1.0f);
        be3->matmul(be3->ctx, x2, 3, &wt, NULL, full);
        s0.cols = s1.cols = K2 / 2;
        s1.data = w2 + K2 / 2;
        float *xa = malloc(sizeof(float) * 3 * K2 / 2), *xb = malloc(sizeof(float) * 3 * K2 / 2);
        for (int i = 0; i < 3; i++) {
            memcpy(xa + i * K2 / 2, x2 + i * K2, sizeof(float) * K2 / 2);
            memcpy(xb + i * K2 / 2, x2 + i * K2 + K2 / 2, sizeof(float) * K2 / 2);
        }
        be3->matmul(be3->ctx, xa, 3, &s0, NULL, p0);
        be1->matmul(be1->ctx, xb, 3, &s1, NULL, p1);
        const float *pp[2] = {p0, p1};
        tdm_reduce_tree_combine(pp, 2, comb, 60);
        ok(bits_equal(comb, full, 60), "row-parallel TP=2 partials combined == TP=1, bit exact");
        free(x2);
        free(w2);
        free(xa);
        free(xb);
    }
    free(x);
    free(wf);
    free(y);
    free(y1);
    free(y3);
    free(ref);
}

static void test_small(tdm_backend_t *be)
{
    const uint32_t n = 5, d = 96;
    float resid[5 * 96], add[5 * 96], out[5 * 96], w[96], r0[5 * 96];
    double ref[5 * 96];
    tdm_tensor_t wt = {TDM_DTYPE_F32, 1, d, d, w};

    fill(resid, n * d, 2.0f);
    fill(add, n * d, 1.0f);
    fill(w, d, 1.5f);
    memcpy(r0, resid, sizeof(r0));
    is_int(be->rmsnorm_add(be->ctx, resid, add, &wt, 1e-5f, n, d, out), TDM_OK, "rmsnorm_add");
    for (uint32_t i = 0; i < n; i++) {
        double ss = 0;
        for (uint32_t c = 0; c < d; c++) {
            double v = (double)r0[i * d + c] + add[i * d + c];
            ss += v * v;
        }
        double inv = 1.0 / sqrt(ss / d + 1e-5);
        for (uint32_t c = 0; c < d; c++)
            ref[i * d + c] = w[c] * ((double)r0[i * d + c] + add[i * d + c]) * inv;
    }
    ok(max_rel(out, ref, n * d) < 1e-5, "rmsnorm_add vs fp64");
    ok(resid[7] == r0[7] + add[7], "residual updated in place");

    /* silu */
    float g[100], u[100], s[100];
    double sref[100];
    fill(g, 100, 8.0f);
    fill(u, 100, 2.0f);
    be->silu_mul(be->ctx, g, u, 100, s);
    for (int i = 0; i < 100; i++)
        sref[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    ok(max_rel(s, sref, 100) < 1e-6, "silu_mul vs fp64");

    /* embed: bf16 table, range errors */
    uint16_t tab[10 * 8];
    tdm_tensor_t tt = {TDM_DTYPE_BF16, 10, 8, 8, tab};
    for (int i = 0; i < 80; i++)
        tab[i] = tdm_cpu_to_bf16((float)i * 0.25f);
    int32_t ids[3] = {9, 0, 4}, bad[2] = {3, 10};
    float e[24];
    is_int(be->embed(be->ctx, &tt, ids, 3, e), TDM_OK, "embed");
    ok(e[0] == 18.0f && e[8] == 0.0f && e[23] == 9.75f, "embed gathers rows");
    is_int(be->embed(be->ctx, &tt, bad, 2, e), TDM_ERR_RANGE, "embed refuses id 10 of 10");

    float lg[2 * 5] = {1, 3, 3, -1, 0, NAN, -5, -4, -4.5f, -100};
    int32_t am[2];
    be->argmax(be->ctx, lg, 2, 5, am);
    ok(am[0] == 1 && am[1] == 2, "argmax: first maximum, NaN never wins");
}

static void test_rope(tdm_backend_t *be)
{
    tdm_model_config_t c;
    tdm_rope_t r;
    memset(&c, 0, sizeof(c));
    c.head_dim = 64;
    c.rope_theta = 500000.0f;
    c.rope_type = TDM_ROPE_LLAMA3;
    c.rope_factor = 8.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_pos = 8192;
    is_int(tdm_rope_init(&c, &r), TDM_OK, "llama3 rope table");
    int good = 1;
    for (int i = 0; i < 32; i++) {
        double f = 1.0 / pow(500000.0, 2.0 * i / 64), wl = 2 * M_PI / f, lw = 8192.0, hw = 2048.0;
        double want = f;
        if (wl > lw)
            want = f / 8;
        else if (wl >= hw) {
            double sm = (8192.0 / wl - 1.0) / 3.0;
            want = (1 - sm) * f / 8 + sm * f;
        }
        good &= fabs(r.inv_freq[i] - want) / want < 1e-5;
    }
    ok(good, "llama3 inv_freq: low/medium/high bands vs fp64 formula");
    c.rope_type = TDM_ROPE_LINEAR;
    c.rope_factor = 4.0f;
    tdm_rope_init(&c, &r);
    ok(fabs(r.inv_freq[5] / (1.0 / pow(500000.0, 10.0 / 64) / 4) - 1.0) < 1e-6,
       "linear scaling divides inv_freq");
    c.rope_type = TDM_ROPE_DEFAULT;
    tdm_rope_init(&c, &r);
    float x[2 * 64], x0[2 * 64];
    uint32_t pos[1] = {1000};
    fill(x, 128, 1.0f);
    memcpy(x0, x, sizeof(x));
    be->rope(be->ctx, &r, x, pos, 1, 2);
    double err = 0;
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 32; i++) {
            double a = 1000.0 * r.inv_freq[i], cs = cos(a), sn = sin(a);
            double o1 = x0[h * 64 + i] * cs - x0[h * 64 + i + 32] * sn;
            double o2 = x0[h * 64 + i + 32] * cs + x0[h * 64 + i] * sn;
            err = fmax(err, fmax(fabs(o1 - x[h * 64 + i]), fabs(o2 - x[h * 64 + i + 32])));
        }
    ok(err < 1e-4, "rope rotate_half vs fp64 at pos 1000 (err %.1e)", err);
    c.rope_type = TDM_ROPE_LLAMA3;
    c.rope_high_freq_factor = 0.5f;
    is_int(tdm_rope_init(&c, &r), TDM_ERR_INVAL, "llama3 with high <= low refused");
}

static void test_attention(tdm_backend_t *be, tdm_dtype_t dt, double tol)
{
    tdm_model_config_t c;
    tdm_kv_layout_t l;
    tdm_kv_pool_t *pool;
    const uint32_t L = 45, H = 4, KV = 2, hd = 32, ps = 8;
    uint32_t pages[6] = {5, 0, 3, 1, 4, 2};
    float *k = malloc(sizeof(float) * L * KV * hd), *v = malloc(sizeof(float) * L * KV * hd);
    float *q = malloc(sizeof(float) * L * H * hd), *out = malloc(sizeof(float) * L * H * hd);
    float *out2 = malloc(sizeof(float) * L * H * hd);
    double *ref = malloc(sizeof(double) * L * H * hd);
    tdm_attn_row_t rows[45];

    memset(&c, 0, sizeof(c));
    c.num_layers = 2;
    c.num_kv_heads = KV;
    c.head_dim = hd;
    tdm_kv_layout_init(&c, dt, ps, 1, 0, &l);
    tdm_kv_pool_init(&l, 7, &pool);
    const tdm_kv_buffers_t *kb = tdm_kv_pool_buffers(pool);
    fill(k, (size_t)L * KV * hd, 2.0f);
    fill(v, (size_t)L * KV * hd, 1.0f);
    fill(q, (size_t)L * H * hd, 2.0f);
    for (uint32_t i = 0; i < L; i++)
        rows[i] = (tdm_attn_row_t){pages, 6, i};
    is_int(be->kv_write(be->ctx, kb, 1, k, v, rows, L), TDM_OK, "kv_write %s",
           (dt == TDM_DTYPE_F32    ? "f32"
            : dt == TDM_DTYPE_BF16 ? "bf16"
                                   : "fp8"));
    is_int(be->attn_prefill(be->ctx, kb, 1, q, H, rows, L, out), TDM_OK, "attention");
    for (uint32_t i = 0; i < L; i++)
        for (uint32_t h = 0; h < H; h++) {
            uint32_t g = h / (H / KV);
            double sc[45], mx = -1e300, sum = 0;
            for (uint32_t t = 0; t <= i; t++) {
                double s = 0;
                for (uint32_t e = 0; e < hd; e++)
                    s += (double)q[(i * H + h) * hd + e] * k[(t * KV + g) * hd + e];
                sc[t] = s / sqrt((double)hd);
                mx = fmax(mx, sc[t]);
            }
            for (uint32_t t = 0; t <= i; t++)
                sum += exp(sc[t] - mx);
            for (uint32_t e = 0; e < hd; e++) {
                double o = 0;
                for (uint32_t t = 0; t <= i; t++)
                    o += exp(sc[t] - mx) / sum * v[(t * KV + g) * hd + e];
                ref[(i * H + h) * hd + e] = o;
            }
        }
    double err = max_rel(out, ref, (size_t)L * H * hd);
    ok(err < tol, "attention %s vs fp64: max err %.2e < %.0e",
       (dt == TDM_DTYPE_F32    ? "f32"
        : dt == TDM_DTYPE_BF16 ? "bf16"
                               : "fp8"),
       err, tol);
    /* decode path, one row at a time, sees the same cache: bit-identical */
    for (uint32_t i = 0; i < L; i++)
        be->attn_decode(be->ctx, kb, 1, q + (size_t)i * H * hd, H, &rows[i], 1,
                        out2 + (size_t)i * H * hd);
    ok(bits_equal(out, out2, (size_t)L * H * hd), "attention row by row == batch, bit exact");
    tdm_attn_row_t badrow = {pages, 2, 20};
    is_int(be->attn_decode(be->ctx, kb, 1, q, H, &badrow, 1, out2), TDM_ERR_RANGE,
           "position beyond the page table refused");
    uint32_t badpages[1] = {7};
    tdm_attn_row_t badpage = {badpages, 1, 0};
    is_int(be->kv_write(be->ctx, kb, 0, k, v, &badpage, 1), TDM_ERR_RANGE,
           "page id beyond the pool refused");
    tdm_kv_pool_free(pool);
    free(k);
    free(v);
    free(q);
    free(out);
    free(out2);
    free(ref);
}

/* Matmul through the generic and the AVX2 table: identical bits, and equal to the scalar
 * contract (tdm_dot_f32 + bias) element by element. */
static void test_isa_matmul(tdm_backend_t *gen, tdm_backend_t *avx)
{
    static const struct {
        uint32_t M, K, n;
        tdm_dtype_t dt;
    } cs[] = {
        {37, 200, 9, TDM_DTYPE_BF16},   /* partial panel, short last block, converted */
        {48, 200, 3, TDM_DTYPE_BF16},   /* bf16 read in place */
        {32, 1032, 1, TDM_DTYPE_BF16},  /* several K chunks, 8-element last block */
        {32, 1032, 35, TDM_DTYPE_BF16}, /* two token tiles, odd last token */
        {64, 520, 2, TDM_DTYPE_F32},    /* f32 in place */
        {16, 136, 7, TDM_DTYPE_F16},    /* f16 converted */
        {21, 203, 5, TDM_DTYPE_BF16},   /* K % 8 != 0: generic kernel in both */
    };
    for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
        uint32_t M = cs[c].M, K = cs[c].K, n = cs[c].n;
        float *x = malloc(sizeof(float) * n * K), *wf = malloc(sizeof(float) * M * K);
        float *yg = malloc(sizeof(float) * n * M), *ya = malloc(sizeof(float) * n * M);
        float *bias_f = malloc(sizeof(float) * M);
        tdm_tensor_t w, bias = {TDM_DTYPE_F32, 1, M, M, bias_f};
        void *mem = make_weight(cs[c].dt, M, K, K + 8, wf, &w);
        fill(x, (size_t)n * K, 1.0f);
        fill(bias_f, M, 1.0f);
        int st = gen->matmul(gen->ctx, x, n, &w, &bias, yg);
        st |= avx->matmul(avx->ctx, x, n, &w, &bias, ya);
        int exact = st == TDM_OK;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < M; j++)
                exact &= yg[(size_t)i * M + j] ==
                         tdm_dot_f32(x + (size_t)i * K, wf + (size_t)j * K, K) + bias_f[j];
        ok(exact, "generic matmul M=%u K=%u n=%u == tdm_dot_f32 + bias", M, K, n);
        ok(bits_equal(yg, ya, (size_t)n * M), "avx2 matmul M=%u K=%u n=%u == generic, bit exact", M,
           K, n);
        /* one row at a time through AVX2 (in-place path) == the batch (converted path) */
        for (uint32_t i = 0; i < n; i++)
            avx->matmul(avx->ctx, x + (size_t)i * K, 1, &w, &bias, yg + (size_t)i * M);
        ok(bits_equal(yg, ya, (size_t)n * M), "avx2 matmul M=%u K=%u: rows one by one == n=%u", M,
           K, n);
        free(mem);
        free(x);
        free(wf);
        free(yg);
        free(ya);
        free(bias_f);
    }
}

static void test_isa_attn_ops(void)
{
#ifdef TDM_CPU_HAVE_AVX2_OPS
    static const uint32_t hds[] = {16, 24, 64, 128, 200};
    float q[200], k[21 * 200], v[21 * 200], pg[21], pa[21], og[200], oa[200];
    int same = 1, acc_same = 1;
    for (size_t h = 0; h < sizeof(hds) / sizeof(hds[0]); h++) {
        uint32_t hd = hds[h];
        fill(q, hd, 2.0f);
        fill(k, (size_t)21 * hd, 2.0f);
        fill(v, (size_t)21 * hd, 1.0f);
        for (uint32_t nt = 1; nt <= 21; nt += 4) {
            tdm_cpu_ops_generic.dots(q, k, hd, nt, pg);
            tdm_cpu_ops_avx2.dots(q, k, hd, nt, pa);
            same &= bits_equal(pg, pa, nt);
            for (uint32_t t = 0; t < nt; t++)
                same &= pg[t] == tdm_dot_f32(q, k + (size_t)t * hd, hd);
            fill(og, hd, 3.0f);
            memcpy(oa, og, sizeof(float) * hd);
            tdm_cpu_ops_generic.attn_acc(og, 0.75f, pg, v, hd, nt);
            tdm_cpu_ops_avx2.attn_acc(oa, 0.75f, pg, v, hd, nt);
            acc_same &= bits_equal(og, oa, hd);
        }
    }
    ok(same, "avx2 q·k dots == generic == tdm_dot_f32 (hd 16..200, 1..21 keys)");
    ok(acc_same, "avx2 attention accumulate == generic, bit exact");
#else
    skip("no AVX2 table in this build");
    skip("no AVX2 table in this build");
#endif
}

/* Attention through the generic and the AVX2 table over one cache: identical bits, prefill and
 * row-by-row decode, for each cache dtype. */
static void test_isa_attention(tdm_backend_t *gen, tdm_backend_t *avx)
{
    static const tdm_dtype_t dts[3] = {TDM_DTYPE_F32, TDM_DTYPE_BF16, TDM_DTYPE_FP8_E4M3};
    const uint32_t L = 70, H = 8, KV = 2, hd = 64, ps = 16;
    uint32_t pages[5] = {4, 2, 0, 3, 1};
    float *k = malloc(sizeof(float) * L * KV * hd), *v = malloc(sizeof(float) * L * KV * hd);
    float *q = malloc(sizeof(float) * L * H * hd), *og = malloc(sizeof(float) * L * H * hd);
    float *oa = malloc(sizeof(float) * L * H * hd), *od = malloc(sizeof(float) * L * H * hd);
    tdm_attn_row_t rows[70];

    fill(k, (size_t)L * KV * hd, 2.0f);
    fill(v, (size_t)L * KV * hd, 1.0f);
    fill(q, (size_t)L * H * hd, 2.0f);
    for (uint32_t i = 0; i < L; i++)
        rows[i] = (tdm_attn_row_t){pages, 5, i};
    for (int d = 0; d < 3; d++) {
        tdm_model_config_t c;
        tdm_kv_layout_t l;
        tdm_kv_pool_t *pool;
        memset(&c, 0, sizeof(c));
        c.num_layers = 1;
        c.num_kv_heads = KV;
        c.head_dim = hd;
        tdm_kv_layout_init(&c, dts[d], ps, 1, 0, &l);
        tdm_kv_pool_init(&l, 5, &pool);
        const tdm_kv_buffers_t *kb = tdm_kv_pool_buffers(pool);
        avx->kv_write(avx->ctx, kb, 0, k, v, rows, L);
        int st = gen->attn_prefill(gen->ctx, kb, 0, q, H, rows, L, og);
        st |= avx->attn_prefill(avx->ctx, kb, 0, q, H, rows, L, oa);
        for (uint32_t i = 0; i < L; i++)
            st |= avx->attn_decode(avx->ctx, kb, 0, q + (size_t)i * H * hd, H, &rows[i], 1,
                                   od + (size_t)i * H * hd);
        ok(st == TDM_OK && bits_equal(og, oa, (size_t)L * H * hd),
           "avx2 attention == generic, bit exact (cache dtype %d)", d);
        ok(bits_equal(od, oa, (size_t)L * H * hd),
           "avx2 attention row by row == prefill, bit exact (cache dtype %d)", d);
        tdm_kv_pool_free(pool);
    }
    free(k);
    free(v);
    free(q);
    free(og);
    free(oa);
    free(od);
}

int main(void)
{
    tdm_backend_t be1, be3;
    if (tdm_backend_cpu_init(1, &be1) != TDM_OK || tdm_backend_cpu_init(3, &be3) != TDM_OK) {
        printf("Bail out! backend init\n");
        return 1;
    }
    test_tree();
    test_matmul(&be1, &be3);
    test_small(&be3);
    test_rope(&be3);
    test_attention(&be3, TDM_DTYPE_F32, 1e-5);
    test_attention(&be3, TDM_DTYPE_BF16, 2e-2);
    test_attention(&be3, TDM_DTYPE_FP8_E4M3, 8e-2);
    {
        tdm_backend_t gen, avx;
        int have_avx2 = 0;
        if (tdm_backend_cpu_init(2, &gen) != TDM_OK || tdm_backend_cpu_init(2, &avx) != TDM_OK) {
            printf("Bail out! backend init\n");
            return 1;
        }
        is_int(tdm_cpu_pool_set_isa(gen.ctx, "generic"), TDM_OK, "generic table selectable");
        ok(!strcmp(tdm_backend_cpu_isa(&gen), "generic"), "backend reports generic");
        is_int(tdm_cpu_pool_set_isa(gen.ctx, "sse9"), TDM_ERR_INVAL, "unknown ISA name refused");
#ifdef TDM_CPU_HAVE_AVX2_OPS
        have_avx2 = tdm_cpu_ops_avx2.supported();
#endif
        if (have_avx2) {
            is_int(tdm_cpu_pool_set_isa(avx.ctx, "avx2"), TDM_OK, "avx2 table selectable");
            test_isa_matmul(&gen, &avx);
            test_isa_attn_ops();
            test_isa_attention(&gen, &avx);
        } else {
            skip("this CPU has no AVX2: generic only");
        }
        tdm_backend_cpu_free(&gen);
        tdm_backend_cpu_free(&avx);
    }
    tdm_backend_cpu_free(&be1);
    tdm_backend_cpu_free(&be3);
    return done_testing();
}
