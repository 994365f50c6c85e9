/*
 * matmul.c — y = x · Wᵀ (+ bias) under the determinism contract of backend.h.
 *
 * Work unit: a panel of TDM_CPU_MM_ROWS output rows (threads split panels). For each panel,
 * tokens go in tiles of TDM_CPU_MM_TT and K in chunks of TDM_CPU_MM_KC (a multiple of the
 * 64-block, so every rule-1 block partial lies inside one chunk). The ISA kernel (ops->mm_tile)
 * writes the block partials of panel × tile × chunk into `part`; the tree over blocks and the
 * bias come last. Weights are read in place when the kernel can use them as they are (fp32, or
 * bf16 at decode sizes, where each weight feeds few tokens and converting first would double
 * the passes over it); otherwise the chunk is converted to fp32 once per token tile into a
 * per-thread buffer that stays in L1 while the tile runs over it (prefill: each converted weight
 * then feeds TDM_CPU_MM_TT tokens). Every block partial is computed with the same lane sequence
 * whatever the tile, chunk, kernel shape or ISA, so the result of a row never depends on n, on
 * the thread count or on the path taken (rule 5). Scratch is per thread and grows only: no
 * allocation per call once warm.
 */
#include "config.h"

#include "kernels/cpu/cpu_int.h"

/* At most this many tokens read bf16 weights in place (no fp32 copy of the chunk). */
#define MM_DIRECT_MAX 8u

typedef struct mm_job {
    const float *x;
    uint32_t n, K, M, nb, tt;
    const tdm_tensor_t *w, *bias;
    float *y;
    tdm_cpu_pool_t *pool;
    const tdm_cpu_ops_t *ops;
    int direct;
    int oom;
} mm_job_t;

/* out[r] = T(lo, n) over block partials part[b*R + r], r < R = TDM_CPU_MM_ROWS. */
static void tree_rows(const float *part, uint32_t lo, uint32_t n, float *out)
{
    float r[TDM_CPU_MM_ROWS];
    uint32_t h;
    if (n == 1) {
        memcpy(out, part + (size_t)lo * TDM_CPU_MM_ROWS, sizeof(r));
        return;
    }
    h = (n + 1) / 2;
    tree_rows(part, lo, h, out);
    tree_rows(part, lo + h, n - h, r);
    for (uint32_t i = 0; i < TDM_CPU_MM_ROWS; i++)
        out[i] = out[i] + r[i];
}

/* Rows r0..r0+nr, columns k0..k0+kc of W as fp32 into dst (row stride ld); rows past nr zero. */
static void convert_chunk(const mm_job_t *j, uint32_t r0, uint32_t nr, uint32_t k0, uint32_t kc,
                          float *dst, size_t ld)
{
    const tdm_tensor_t *w = j->w;
    for (uint32_t r = 0; r < TDM_CPU_MM_ROWS; r++) {
        float *d = dst + (size_t)r * ld;
        if (r >= nr)
            memset(d, 0, (size_t)kc * sizeof(float));
        else if (w->dtype == TDM_DTYPE_BF16)
            j->ops->bf16_to_f32((const uint16_t *)w->data + (size_t)(r0 + r) * w->row_stride + k0,
                                d, kc);
        else
            tdm_cpu_weight_row(w, r0 + r, k0, kc, d);
    }
}

static void mm_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    mm_job_t *j = arg;
    const tdm_tensor_t *w = j->w;
    const uint32_t R = TDM_CPU_MM_ROWS, K = j->K;
    size_t wbuf_n = (size_t)R * TDM_CPU_MM_KC, part_ld = (size_t)j->nb * R;
    float *wbuf = tdm_cpu_scratch(&j->pool->scratch[tid], wbuf_n + (size_t)j->tt * part_ld);
    float *part;
    size_t es = w->dtype == TDM_DTYPE_F32 ? 4 : 2;

    if (!wbuf) {
        __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED);
        return;
    }
    part = wbuf + wbuf_n;
    for (size_t panel = lo; panel < hi; panel++) {
        uint32_t r0 = (uint32_t)panel * R, nr = j->M - r0 < R ? j->M - r0 : R;
        int in_place =
            nr == R && (w->dtype == TDM_DTYPE_F32 || (w->dtype == TDM_DTYPE_BF16 && j->direct));
        for (uint32_t t0 = 0; t0 < j->n; t0 += j->tt) {
            uint32_t nt = j->n - t0 < j->tt ? j->n - t0 : j->tt;
            for (uint32_t k0 = 0; k0 < K; k0 += TDM_CPU_MM_KC) {
                uint32_t kc = K - k0 < TDM_CPU_MM_KC ? K - k0 : TDM_CPU_MM_KC;
                tdm_cpu_mm_tile_t tile = {
                    .x = j->x + (size_t)t0 * K + k0,
                    .ldx = K,
                    .rows = R,
                    .tokens = nt,
                    .kc = kc,
                    .part = part + (size_t)(k0 / TDM_DOT_BLOCK) * R,
                    .part_ld = part_ld,
                };
                if (in_place) {
                    tile.w = (const uint8_t *)w->data + ((size_t)r0 * w->row_stride + k0) * es;
                    tile.ldw = w->row_stride;
                    tile.w_bf16 = w->dtype == TDM_DTYPE_BF16;
                } else {
                    convert_chunk(j, r0, nr, k0, kc, wbuf, TDM_CPU_MM_KC);
                    tile.w = wbuf;
                    tile.ldw = TDM_CPU_MM_KC;
                    tile.w_bf16 = 0;
                }
                j->ops->mm_tile(&tile);
            }
            for (uint32_t t = 0; t < nt; t++) {
                float out[TDM_CPU_MM_ROWS];
                float *y = j->y + (size_t)(t0 + t) * j->M + r0;
                tree_rows(part + (size_t)t * part_ld, 0, j->nb, out);
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
    size_t panels;

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
    j.tt = n < TDM_CPU_MM_TT ? n : TDM_CPU_MM_TT;
    j.w = w;
    j.bias = bias;
    j.y = y;
    j.pool = pool;
    /* SIMD kernels step K by 8; other K (no real model has them) take the generic kernel. */
    j.ops = w->cols % 8 == 0 ? pool->ops : &tdm_cpu_ops_generic;
    j.direct = n <= MM_DIRECT_MAX && j.ops != &tdm_cpu_ops_generic;
    panels = (w->rows + TDM_CPU_MM_ROWS - 1) / TDM_CPU_MM_ROWS;
    tdm_cpu_parallel(pool, panels, 1, mm_range, &j);
    return j.oom ? TDM_ERR_NOMEM : TDM_OK;
}
