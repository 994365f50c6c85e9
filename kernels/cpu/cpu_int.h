/*
 * kernels/cpu/cpu_int.h — internals of the CPU backend: the worker pool, per-thread scratch,
 * element conversions, and the per-instruction-set kernel table (tdm_cpu_ops_t): a generic C
 * table that runs anywhere and an AVX2 one (kernels/cpu/avx2.c) picked at init from cpuid. Both
 * follow backend.h rule 1 to the bit; tests/unit/test-kernels.c runs every kernel through both.
 */
#ifndef TDM_KERNELS_CPU_INT_H
#define TDM_KERNELS_CPU_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"

#define TDM_CPU_MAX_THREADS 64u

/* Matmul geometry (matmul.c): output rows per panel (a thread's unit of work), K elements per
 * chunk (a multiple of TDM_DOT_BLOCK: the weight slice that stays in L1 while a token tile runs
 * over it), tokens per tile. */
#define TDM_CPU_MM_ROWS 64u
#define TDM_CPU_MM_KC 256u
#define TDM_CPU_MM_TT 32u

/* One call of an ISA matmul kernel: block partials (rule 1, before the tree over blocks) of
 * `rows` weight rows against `tokens` activation rows over one K chunk of `kc` elements that
 * starts on a block boundary. Weight (r, k) is at w + r*ldw + k (fp32, or bf16 when w_bf16);
 * activation (t, k) at x + t*ldx + k. The partial of chunk block b for (t, r) goes to
 * part[t*part_ld + b*rows + r]. rows == TDM_CPU_MM_ROWS; the AVX2 kernel needs kc % 8 == 0. */
typedef struct tdm_cpu_mm_tile {
    const void *w;
    size_t ldw;
    int w_bf16;
    const float *x;
    size_t ldx;
    uint32_t rows, tokens, kc;
    float *part;
    size_t part_ld;
} tdm_cpu_mm_tile_t;

typedef struct tdm_cpu_ops {
    const char *name;
    /* Can this table run here (cpuid)? */
    int (*supported)(void);
    void (*mm_tile)(const tdm_cpu_mm_tile_t *t);
    /* dst[i] = bf16 src[i] as fp32, i < n (exact). */
    void (*bf16_to_f32)(const uint16_t *src, float *dst, size_t n);
    /* out[t] = rule-1 dot of q (hd) with k + t*hd, t < nt. */
    void (*dots)(const float *q, const float *k, uint32_t hd, uint32_t nt, float *out);
    /* o[d] = o[d]*c + p[t]*v[t*hd+d] for t < nt, in t order, per element: the attention
     * accumulate of backend.h rule 4 (c applied first, then one add per position). */
    void (*attn_acc)(float *o, float c, const float *p, const float *v, uint32_t hd, uint32_t nt);
} tdm_cpu_ops_t;

extern const tdm_cpu_ops_t tdm_cpu_ops_generic;
#if defined(__x86_64__)
#define TDM_CPU_HAVE_AVX2_OPS 1
extern const tdm_cpu_ops_t tdm_cpu_ops_avx2;
#endif

/* The lane tree of rule 1 over 8 lane sums. */
static inline float tdm_cpu_lane_tree(const float *s)
{
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

typedef void (*tdm_cpu_fn)(void *arg, uint32_t tid, size_t lo, size_t hi);

typedef struct tdm_cpu_scratch {
    float *buf;
    size_t cap; /* floats */
} tdm_cpu_scratch_t;

typedef struct tdm_cpu_pool {
    uint32_t n_threads; /* including the caller */
    pthread_t threads[TDM_CPU_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t gen;    /* bumped per job */
    uint32_t n_busy; /* workers still on the current job */
    int stop;
    /* current job */
    tdm_cpu_fn fn;
    void *arg;
    size_t n, chunks;
    tdm_cpu_scratch_t scratch[TDM_CPU_MAX_THREADS];
    float fp8_lut[256];
    tdm_cpu_scratch_t gather; /* caller-thread scratch (logits row gather) */
    tdm_cpu_scratch_t tiles;  /* caller-thread scratch (attention row tiles) */
    const tdm_cpu_ops_t *ops; /* the ISA kernels in use */
} tdm_cpu_pool_t;

tdm_status_t tdm_cpu_pool_init(uint32_t threads, tdm_cpu_pool_t **ret_pool);
void tdm_cpu_pool_free(tdm_cpu_pool_t *p);
/* Run fn over [0, n) split into at most n_threads contiguous ranges of >= grain items; thread 0 is
 * the caller. Returns when every range is done. */
void tdm_cpu_parallel(tdm_cpu_pool_t *p, size_t n, size_t grain, tdm_cpu_fn fn, void *arg);
/* Select the ISA table by name ("generic", "avx2"): TDM_ERR_UNSUPPORTED if this CPU or build
 * lacks it, TDM_ERR_INVAL for an unknown name. Not while a job runs. */
tdm_status_t tdm_cpu_pool_set_isa(tdm_cpu_pool_t *p, const char *name);
/* Per-thread scratch of at least `floats` floats (32-byte aligned); NULL on OOM. */
float *tdm_cpu_scratch(tdm_cpu_scratch_t *s, size_t floats);

static inline float tdm_cpu_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t tdm_cpu_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float tdm_cpu_f16(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    float f;
    if (e == 0) {
        f = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */
        memcpy(&u, &f, 4);
        u |= s;
    } else if (e == 31) {
        u = s | 0x7f800000u | (m << 13);
    } else {
        u = s | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &u, 4);
    return f;
}

/* Element j of row i of a weight view, as fp32. */
static inline float tdm_cpu_weight(const tdm_tensor_t *t, size_t i, size_t j)
{
    size_t idx = i * t->row_stride + j;
    switch (t->dtype) {
    case TDM_DTYPE_BF16:
        return tdm_cpu_bf16(((const uint16_t *)t->data)[idx]);
    case TDM_DTYPE_F16:
        return tdm_cpu_f16(((const uint16_t *)t->data)[idx]);
    default:
        return ((const float *)t->data)[idx];
    }
}

/* Convert `count` elements of row i starting at column j0 into dst (contiguous). */
void tdm_cpu_weight_row(const tdm_tensor_t *t, size_t i, size_t j0, size_t count, float *dst);
int tdm_cpu_weight_dtype_ok(tdm_dtype_t dt);

/* Kernels living in separate files. */
tdm_status_t tdm_cpu_matmul(void *ctx, const float *x, uint32_t n, const tdm_tensor_t *w,
                            const tdm_tensor_t *bias, float *y);
tdm_status_t tdm_cpu_kv_write(void *ctx, const tdm_kv_buffers_t *kv, uint32_t layer, const float *k,
                              const float *v, const tdm_attn_row_t *rows, uint32_t n);
tdm_status_t tdm_cpu_attention(void *ctx, const tdm_kv_buffers_t *kv, uint32_t layer,
                               const float *q, uint32_t heads, const tdm_attn_row_t *rows,
                               uint32_t n, float *out);

#endif
