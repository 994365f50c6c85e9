/*
 * matmul.c — y = x · Wᵀ (+ bias) under the determinism contract of backend.h.
 *
 * Work is split over tiles of TILE_R output rows. A tile's weights are converted to fp32 once and
 * stored transposed (wt[k][r]), so the inner loop broadcasts x[t][k] and updates TILE_R row
 * accumulators at once: the vector runs across output rows, never across k, which keeps the sum
 * over k inside a 64-block strictly sequential (rule 1) while still using SIMD. Four tokens share
 * each weight load. Every accumulator lane performs exactly the scalar sequence of
 * tdm_dot_f32(), so the result does not depend on which token group or tile a row falls in.
 * target_clones builds an AVX2 copy beside the baseline; with -ffp-contract=off both round
 * identically.
 */
#include "config.h"

#include <errno.h>

#include "kernels/cpu/cpu_int.h"

#define TILE_R 16u
#define TOK_G 4u

typedef struct mm_job {
    const float *x;
    uint32_t n, K, M, nb;
    const tdm_tensor_t *w, *bias;
    float *y;
    tdm_cpu_pool_t *pool;
    int oom;
} mm_job_t;

/* Loads and stores through memcpy: no alignment assumption, no vector-by-value ABI. */
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(tdm_v8))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(tdm_v8))

/* out[TILE_R] = T(lo, n) over block partials part[b][TILE_R], all lanes at once. */
static void tree16(const float *part, uint32_t lo, uint32_t n, float *out)
{
    float r[TILE_R];
    uint32_t h;
    if (n == 1) {
        memcpy(out, part + (size_t)lo * TILE_R, sizeof(r));
        return;
    }
    h = (n + 1) / 2;
    tree16(part, lo, h, out);
    tree16(part, lo + h, n - h, r);
    for (uint32_t i = 0; i < TILE_R; i++)
        out[i] = out[i] + r[i];
}

__attribute__((target_clones("avx2", "default"))) static void
mm_blocks(const float *wt, const float *x, uint32_t K, uint32_t nt, uint32_t nb, float *part)
{
    /* part[t][b][TILE_R] for t < nt (nt <= TOK_G) */
    for (uint32_t b = 0; b < nb; b++) {
        uint32_t k0 = b * TDM_DOT_BLOCK, k1 = k0 + TDM_DOT_BLOCK < K ? k0 + TDM_DOT_BLOCK : K;
        if (nt == TOK_G) {
            tdm_v8 a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0};
            const float *x0 = x, *x1 = x + K, *x2 = x + 2 * (size_t)K, *x3 = x + 3 * (size_t)K;
            for (uint32_t k = k0; k < k1; k++) {
                tdm_v8 wa, wb;
                VLOAD(wa, wt + (size_t)k * TILE_R);
                VLOAD(wb, wt + (size_t)k * TILE_R + 8);
                a0 = a0 + x0[k] * wa;
                b0 = b0 + x0[k] * wb;
                a1 = a1 + x1[k] * wa;
                b1 = b1 + x1[k] * wb;
                a2 = a2 + x2[k] * wa;
                b2 = b2 + x2[k] * wb;
                a3 = a3 + x3[k] * wa;
                b3 = b3 + x3[k] * wb;
            }
            size_t s = (size_t)nb * TILE_R, o = (size_t)b * TILE_R;
            VSTORE(part + o, a0);
            VSTORE(part + o + 8, b0);
            VSTORE(part + s + o, a1);
            VSTORE(part + s + o + 8, b1);
            VSTORE(part + 2 * s + o, a2);
            VSTORE(part + 2 * s + o + 8, b2);
            VSTORE(part + 3 * s + o, a3);
            VSTORE(part + 3 * s + o + 8, b3);
        } else {
            for (uint32_t t = 0; t < nt; t++) {
                tdm_v8 a0 = {0}, b0 = {0};
                const float *xt = x + (size_t)t * K;
                for (uint32_t k = k0; k < k1; k++) {
                    tdm_v8 wa, wb;
                    VLOAD(wa, wt + (size_t)k * TILE_R);
                    VLOAD(wb, wt + (size_t)k * TILE_R + 8);
                    a0 = a0 + xt[k] * wa;
                    b0 = b0 + xt[k] * wb;
                }
                size_t o = ((size_t)t * nb + b) * TILE_R;
                VSTORE(part + o, a0);
                VSTORE(part + o + 8, b0);
            }
        }
    }
}

static void mm_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    mm_job_t *j = arg;
    const tdm_tensor_t *w = j->w;
    uint32_t K = j->K, nb = j->nb;
    size_t wt_n = (size_t)K * TILE_R, part_n = (size_t)TOK_G * nb * TILE_R;
    float *wt = tdm_cpu_scratch(&j->pool->scratch[tid], wt_n + part_n + 64);
    float *part, rowbuf[TDM_DOT_BLOCK];

    if (!wt) {
        __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED);
        return;
    }
    part = wt + wt_n;
    for (size_t tile = lo; tile < hi; tile++) {
        uint32_t r0 = (uint32_t)tile * TILE_R;
        uint32_t nr = j->M - r0 < TILE_R ? j->M - r0 : TILE_R;
        /* Transposed fp32 copy of rows r0..r0+nr; absent rows are zero and never stored. */
        for (uint32_t k0 = 0; k0 < K; k0 += TDM_DOT_BLOCK) {
            uint32_t kc = K - k0 < TDM_DOT_BLOCK ? K - k0 : TDM_DOT_BLOCK;
            for (uint32_t r = 0; r < TILE_R; r++) {
                if (r < nr)
                    tdm_cpu_weight_row(w, r0 + r, k0, kc, rowbuf);
                else
                    memset(rowbuf, 0, sizeof(rowbuf));
                for (uint32_t k = 0; k < kc; k++)
                    wt[(size_t)(k0 + k) * TILE_R + r] = rowbuf[k];
            }
        }
        for (uint32_t t0 = 0; t0 < j->n; t0 += TOK_G) {
            uint32_t nt = j->n - t0 < TOK_G ? j->n - t0 : TOK_G;
            mm_blocks(wt, j->x + (size_t)t0 * K, K, nt, nb, part);
            for (uint32_t t = 0; t < nt; t++) {
                float out[TILE_R];
                float *y = j->y + (size_t)(t0 + t) * j->M + r0;
                tree16(part + (size_t)t * nb * TILE_R, 0, nb, out);
                for (uint32_t r = 0; r < nr; r++) {
                    float v = out[r];
                    if (j->bias && j->bias->data)
                        v = v + tdm_cpu_weight(j->bias, 0, r0 + r);
                    y[r] = v;
                }
            }
        }
    }
}

tdm_status_t tdm_cpu_matmul(void *ctx, const float *x, uint32_t n, const tdm_tensor_t *w,
                            const tdm_tensor_t *bias, float *y)
{
    tdm_cpu_pool_t *pool = ctx;
    mm_job_t j;
    size_t tiles;

    if (!pool || !w || !w->data || (n && (!x || !y)) || !tdm_cpu_weight_dtype_ok(w->dtype))
        return TDM_ERR_INVAL;
    if (w->cols == 0 || w->rows == 0 || w->row_stride < w->cols)
        return TDM_ERR_INVAL;
    if (bias && bias->data &&
        (!tdm_cpu_weight_dtype_ok(bias->dtype) || (uint64_t)bias->rows * bias->cols != w->rows))
        return TDM_ERR_INVAL;
    if (n == 0)
        return TDM_OK;
    memset(&j, 0, sizeof(j));
    j.x = x;
    j.n = n;
    j.K = w->cols;
    j.M = w->rows;
    j.nb = (w->cols + TDM_DOT_BLOCK - 1) / TDM_DOT_BLOCK;
    j.w = w;
    j.bias = bias;
    j.y = y;
    j.pool = pool;
    tiles = (w->rows + TILE_R - 1) / TILE_R;
    tdm_cpu_parallel(pool, tiles, 1, mm_range, &j);
    return j.oom ? TDM_ERR_NOMEM : TDM_OK;
}
