/*
 * kernels/cuda/cuda_int.h — the CUDA kernels' launch interface, shared by ops.cu (kernels),
 * engine.cu (the GPU forward) and ops_host.cu (the host-array wrappers the tests call). C++ only.
 *
 * Conventions: every pointer is device memory; activations are fp32 row-major; weights keep the
 * checkpoint's dtype (bf16, f16 or f32), contiguous rows; every launch goes to `stream` and never
 * synchronises. Shapes in the comments: n rows, K input features, M output features, H query
 * heads, KV key/value heads, hd head_dim, G = H / KV (<= TDM_CUDA_MAX_GROUP).
 */
#ifndef TDM_KERNELS_CUDA_INT_H
#define TDM_KERNELS_CUDA_INT_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include <tdm/kv.h>
#include <tdm/log.h>
#include <tdm/status.h>
}

#define TDM_CUDA_MAX_GROUP 8u   /* query heads per KV head */
#define TDM_CUDA_MAX_HD 256u    /* head_dim */
#define TDM_CUDA_MAX_SPLITS 32u /* split-K partitions of one decode attention row */

#define TDM_CUDA_CHECK_GOTO(call, st, label)                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            tdm_err(TDM_SUB_CUDA, "msg=\"%s failed\" err=\"%s\" at=%s:%d", #call,                  \
                    cudaGetErrorString(e_), __FILE__, __LINE__);                                   \
            (st) = e_ == cudaErrorMemoryAllocation ? TDM_ERR_NOMEM : TDM_ERR_CUDA;                 \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#define TDM_CUBLAS_CHECK_GOTO(call, st, label)                                                     \
    do {                                                                                           \
        cublasStatus_t e_ = (call);                                                                \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            tdm_err(TDM_SUB_CUDA, "msg=\"%s failed\" err=%d at=%s:%d", #call, (int)e_, __FILE__,   \
                    __LINE__);                                                                     \
            (st) = TDM_ERR_CUDA;                                                                   \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* The KV pool as kernels see it: the layout descriptor's offsets over one device allocation. */
typedef struct tdm_cuda_kv {
    uint8_t *base;
    uint64_t layer_bytes;
    uint64_t off[TDM_KV_SUB_MAX];
    uint64_t page_stride[TDM_KV_SUB_MAX];
    uint32_t bpt[TDM_KV_SUB_MAX]; /* bytes per token */
    uint32_t page_size, kv_heads, hd, num_pages;
    int fp8; /* 0: bf16 K/V; 1: fp8 e4m3 with fp32 per-token-per-head scales */
} tdm_cuda_kv_t;

tdm_status_t tdm_cuda_kv_from_buffers(const tdm_kv_buffers_t *b, tdm_cuda_kv_t *ret);

/* Rows of a call: absolute position and where the row's page table starts in `pages`. */
typedef struct tdm_cuda_rows {
    const uint32_t *pos;     /* (n) */
    const uint32_t *ptoff;   /* (n) */
    const uint32_t *pages;   /* page tables, concatenated */
    const uint32_t *nactive; /* device scalar: rows >= *nactive are padding (KV untouched) */
} tdm_cuda_rows_t;

/* GEMV input/epilogue modes (bit flags). */
enum {
    TDM_GEMV_NORM = 1,   /* x_eff = x * rsqrt(mean(x^2) + eps) * norm_w (RMSNorm fused) */
    TDM_GEMV_SILU = 2,   /* x is (n, 2K) gate|up: x_eff = silu(gate) * up */
    TDM_GEMV_ACCUM = 4,  /* y += result (residual add fused); else y = result + bias */
    TDM_GEMV_SWIGLU = 8, /* W is (2M, K), rows interleaved gate_0, up_0, gate_1, up_1, ...: y (M)
                          * = silu(gate) * up, the MLP's activation in the gate|up GEMV's epilogue;
                          * one row, the streaming V2 form only (ksplit 3; tdm_cuda_gemv_fusable),
                          * no bias, no ACCUM */
};

/* An L2 prefetch of weights the next kernels will read, issued from inside a latency-bound
 * kernel (extra blocks of the decode attention grid or of argmax) or from the tail of a one-row
 * streaming GEMV (each warp, once its rows are done, its slice of the range). It only warms the
 * cache: results never depend on it, and nothing waits for it (no register result, no
 * completion). bytes == 0: none. p 16-byte aligned, bytes a multiple of 16.
 * op bit 0: L2 evict_last priority (else evict_normal); bit 1: one prefetch.global.L2 per
 * 128-byte line (else cp.async.bulk.prefetch.L2, the TMA bulk form, 8 KiB per instruction).
 * early (attention / argmax blocks only): issue before the PDL wait, i.e. while the previous
 * kernel still streams (else after it, in the HBM-idle window of the latency-bound kernel). */
typedef struct tdm_cuda_l2pf {
    const void *p;
    uint64_t bytes;
    int op;
    int early;
} tdm_cuda_l2pf_t;
#define TDM_CUDA_L2PF_BLOCKS 128u /* prefetch blocks added to a latency-bound grid (about) */

/* An I2 mark folded into a kernel (docs/design.md §3): thread 0 of block 0 stores v at p (the
 * device address of a host-mapped word) after the kernel's PDL wait, i.e. once every kernel before
 * it has completed, so no launch of its own. p NULL: none. */
typedef struct tdm_cuda_mark {
    uint32_t *p;
    uint32_t v;
} tdm_cuda_mark_t;

typedef struct tdm_cuda_gemv {
    const float *x;       /* (n, ldx) */
    uint32_t ldx;         /* row stride of x in floats */
    const uint32_t *xrow; /* NULL, or x row of output row r (gathered rows) */
    uint32_t n, K, M;
    int wdtype;          /* TDM_DTYPE_BF16 / F16 / F32 */
    const void *w;       /* (M, K) contiguous */
    const float *bias;   /* (M) or NULL */
    const float *norm_w; /* (K) with TDM_GEMV_NORM */
    float eps;
    int flags;
    float *y; /* (n, ldy) */
    uint32_t ldy;
    int ksplit; /* n == 1 only. 1: K split over a block's warps (4x the warps; small M); 2: the
                 * streaming form (rows in contiguous runs per warp over ~2 blocks per SM, x in
                 * shared memory; falls back to 1's kernel when K % (32 * 16 B) != 0) */
    tdm_cuda_l2pf_t tail; /* the streaming form only (ignored by the others): each warp, when its
                           * rows are done, prefetches its slice of this range (the next
                           * kernel's weights) while the slower warps still stream */
    int32_t *argmax; /* NULL, or *argmax = the first index of the largest non-NaN y (0 if none),
                      * found in the epilogue (each warp its rows, the last block to finish the
                      * warps' candidates); one row, the streaming V2 form, flags 0 or NORM */
    void *argmax_ws; /* with argmax: TDM_CUDA_ARGMAX_WS bytes, zeroed before the first use; the
                      * kernel leaves it zeroed (its arrival counter) */
    const uint16_t *embed; /* NULL, or the embedding lookup folded in (run 12; one row, the
                            * streaming V2/V4 forms, TDM_GEMV_NORM, bf16 table (V, K)): x's row is
                            * embed row xrow[0] (a token id; x is not read), and block 0 writes
                            * that row, widened to fp32, to embed_out (the residual stream) */
    float *embed_out;
    tdm_cuda_mark_t mark; /* {NULL, 0}, or the I2 mark this launch carries (tdm_cuda_mark_t) */
} tdm_cuda_gemv_t;
#define TDM_CUDA_ARGMAX_CAP 8192u /* warp candidates */
#define TDM_CUDA_ARGMAX_WS (TDM_CUDA_ARGMAX_CAP * 8u + 16u)

/* 1 when a (with its flags and ksplit) runs the streaming V2 one-row form, the only one that
 * takes TDM_GEMV_SWIGLU and argmax; the engine asks before it fuses. */
int tdm_cuda_gemv_fusable(const tdm_cuda_gemv_t *a);

/* Memory-bound y = x·Wᵀ for small n; any n works (rows are processed NR at a time). */
tdm_status_t tdm_cuda_gemv(const tdm_cuda_gemv_t *a, cudaStream_t stream);

/* Tensor-core skinny GEMM for decode batches (1 <= n <= TDM_CUDA_SKINNY_MAX_ROWS, K % 32 == 0):
 * y (n, ldy)[:, 0:M] = xb (n, K) bf16 · Wᵀ (M, K) bf16 (+ bias), or += with accum (bias NULL).
 * fp32 accumulation, deterministic (fixed reduction order), weights streamed once with 16-byte
 * loads. The _silu form takes fp32 gate|up (n, 2I) and multiplies by silu(gate) * up rounded to
 * bf16, bit for bit the input silu_mul would give cuBLAS. */
#define TDM_CUDA_SKINNY_MAX_ROWS 32u
int tdm_cuda_skinny_ok(uint32_t n, uint32_t K);
tdm_status_t tdm_cuda_gemm_skinny(const uint16_t *xb, uint32_t n, uint32_t K, const uint16_t *w,
                                  uint32_t M, const float *bias, int accum, float *y, uint32_t ldy,
                                  cudaStream_t stream);
tdm_status_t tdm_cuda_gemm_skinny_silu(const float *gu, uint32_t n, uint32_t I, const uint16_t *w,
                                       uint32_t M, int accum, float *y, uint32_t ldy,
                                       cudaStream_t stream);

/* Tensor-core tile GEMM for 1 <= n <= TDM_CUDA_TILE_MAX_ROWS rows (K % 64 == 0): y (n, ldy)[:,
 * 0:M] = xb (n, K) bf16 · Wᵀ (M, K) bf16, or += with accum; fp32 accumulation, deterministic.
 * Each weight is read once for all n rows (a block: 128 features, every row) and the rows' MMAs
 * run under the weight stream. splits (1..8) > 1 splits K over the blocks of a cluster, summed
 * in split order through distributed shared memory; 0: tdm_cuda_tile_splits. */
#define TDM_CUDA_TILE_MAX_ROWS 256u
int tdm_cuda_tile_ok(uint32_t n, uint32_t K);
/* the kernel's form, process-wide: 1 deep (the default: ~192 KB of stages, one block per SM), 0
 * shallow (TDM_CUDA_TILE_DEEP=0, read once); the same bits. */
int tdm_cuda_tile_deep(void);
void tdm_cuda_set_tile_deep(int on);
uint32_t tdm_cuda_tile_splits(uint32_t n, uint32_t K, uint32_t M);
/* Asks the occupancy API once for every form and split count (the answers are cached; the engine
 * calls it at init, before any graph capture). */
void tdm_cuda_tile_prepare(void);
tdm_status_t tdm_cuda_gemm_tile(const uint16_t *xb, uint32_t n, uint32_t K, const uint16_t *w,
                                uint32_t M, int accum, float *y, uint32_t ldy, uint32_t splits,
                                cudaStream_t stream);

/* y (n, M) fp32 = xb (n, K) bf16 · Wᵀ (M, K) bf16 (+ beta * y) through cuBLAS, fp32 accumulation.
 */
tdm_status_t tdm_cuda_gemm_bf16(cublasHandle_t h, const uint16_t *xb, uint32_t n, uint32_t K,
                                const uint16_t *w, uint32_t M, float beta, float *y);

/* out (n, d) = rows ids[i] of the table (V, d) widened to fp32. */
tdm_status_t tdm_cuda_embed(const void *table, int dtype, const int32_t *ids, uint32_t n,
                            uint32_t d, float *out, cudaStream_t stream);

/* out (n, d): the rows of ids in [lo, lo + cnt) from table (cnt, d) (rows lo.. of the
 * vocabulary), -0.0 for the others (the vocab-parallel embedding before its all-reduce). */
tdm_status_t tdm_cuda_embed_range(const void *table, int dtype, const int32_t *ids, uint32_t n,
                                  uint32_t d, uint32_t lo, uint32_t cnt, float *out,
                                  tdm_cuda_mark_t mark, cudaStream_t stream);
/* *p = v from the stream (p: device address of host-mapped memory), visible to the host. */
tdm_status_t tdm_cuda_mark(uint32_t *p, uint32_t v, cudaStream_t stream);

/* Fused residual add + RMSNorm: if add, resid += add; out[j] = resid[row(j)] * rs * w.
 * xrow NULL: row(j) = j (in place add on every row); else gathered rows (add must be NULL).
 * Exactly one of out_f32 / out_bf16 is non-NULL. */
tdm_status_t tdm_cuda_rmsnorm(float *resid, const float *add, const uint32_t *xrow, const float *w,
                              float eps, uint32_t n, uint32_t d, float *out_f32, uint16_t *out_bf16,
                              cudaStream_t stream);

/* (count) fp32 → bf16, RNE. */
tdm_status_t tdm_cuda_to_bf16(const float *x, size_t count, uint16_t *out, cudaStream_t stream);
/* y (n, ldy)[:, 0:M] += bias (M). */
tdm_status_t tdm_cuda_add_bias(float *y, uint32_t n, uint32_t M, uint32_t ldy, const float *bias,
                               cudaStream_t stream);
/* Qwen3's per-head RMSNorm of q and k in place: qkv (n, ld) rows of H q heads, KV k heads (then
 * v, untouched), hd values each; qw, kw (hd) fp32. */
tdm_status_t tdm_cuda_qk_norm(float *qkv, uint32_t n, uint32_t ld, uint32_t H, uint32_t KV,
                              uint32_t hd, const float *qw, const float *kw, float eps,
                              cudaStream_t stream);
/* out (n, I) bf16 or fp32 = silu(gu[:, 0:I]) * gu[:, I:2I]; gu (n, 2I); interleaved: gu's
 * columns are gate_0, up_0, gate_1, up_1, ... (the engine's gate|up layout with the SwiGLU
 * epilogue on). */
tdm_status_t tdm_cuda_silu_mul(const float *gu, uint32_t n, uint32_t I, int interleaved,
                               float *out_f32, uint16_t *out_bf16, cudaStream_t stream);

/* qkv (n, (H + 2 KV) hd): RoPE on q and k in place (inv_freq (hd/2) on the device), then k and v
 * of active rows written into the cache of `layer` at their positions (bf16 RNE or fp8 e4m3 with
 * amax/448 scales, bit-identical to tdm_kv_fp8_encode). */
tdm_status_t tdm_cuda_rope_kv_write(float *qkv, uint32_t n, uint32_t H, const float *inv_freq,
                                    const tdm_cuda_kv_t *kv, uint32_t layer,
                                    const tdm_cuda_rows_t *rows, cudaStream_t stream);

/* Split-K paged attention: q from qkv (n, (H + 2 KV) hd) at column 0, every row attends to
 * positions [0, pos] of its sequence; `splits` partitions per (row, KV head); part_* workspace
 * (n, H, splits, hd) and (n, H, splits) floats. out (n, H, hd) fp32, and bf16 when out_bf16. */
tdm_status_t tdm_cuda_attention(const float *qkv, uint32_t n, uint32_t H, const tdm_cuda_kv_t *kv,
                                uint32_t layer, const tdm_cuda_rows_t *rows, uint32_t splits,
                                float *part_o, float *part_ml, float *out, uint16_t *out_bf16,
                                cudaStream_t stream);

/* Decode attention on the tensor cores, the same contract as tdm_cuda_attention (any rows, each
 * over positions [0, pos]; padding rows at or past *nactive give zeros): the GQA group (G <= 8)
 * as the rows of an mma tile, 32-position tiles per warp, 4 warps per (row, KV head, split), the
 * splits merged by the combine kernel when splits > 1. bf16 KV, hd 64 or 128 only.
 * inv_freq non-NULL: RoPE and the KV write are fused in (tdm_cuda_rope_kv_write must NOT run
 * first): q and the row's k/v are read unrotated from qkv (left as they are), q is rotated on
 * the fly, and k (rotated) and v of each active row are written to the cache at pos as
 * rope_kv_write would (bf16 RNE) by the one split that reads position pos. */
/* pf (NULL or bytes 0: none): about TDM_CUDA_L2PF_BLOCKS extra blocks in the same grid whose
 * only work is an L2 prefetch of pf's range (rounded up to whole (KV, splits) planes). */
int tdm_cuda_decode_mma_supported(const tdm_cuda_kv_t *kv, uint32_t H);
/* (row, KV head, split) blocks of the decode attention (its fused-RoPE cluster form) that the
 * device holds at once: SMs x resident blocks per SM (at least the SM count). */
uint32_t tdm_cuda_decode_mma_slots(const tdm_cuda_kv_t *kv);
tdm_status_t tdm_cuda_attention_decode(const float *qkv, uint32_t n, uint32_t H,
                                       const tdm_cuda_kv_t *kv, uint32_t layer,
                                       const tdm_cuda_rows_t *rows, const float *inv_freq,
                                       uint32_t splits, float *part_o, float *part_ml, float *out,
                                       uint16_t *out_bf16, const tdm_cuda_l2pf_t *pf,
                                       cudaStream_t stream);

/* Causal paged prefill attention on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation,
 * flash-attention-2 online softmax, K/V tiles of 64 positions through shared memory, two stages of
 * cp.async). bf16 KV and hd 64 or 128 only (tdm_cuda_flash_supported). Rows are grouped into
 * tiles of up to 64 consecutive rows of one sequence (tdm_cuda_flash_tiles); each tile row attends
 * to positions [0, pos]. Same q/out layout as tdm_cuda_attention. */
int tdm_cuda_flash_supported(const tdm_cuda_kv_t *kv);
/* Tiles of rows 0..n-1 from the host copies of pos/ptoff: a tile is a run of at most 64 rows with
 * the same page table and consecutive positions, packed as row0 | (count - 1) << 24. Returns the
 * tile count, or 0 when cap is too small or n >= 2^24. */
uint32_t tdm_cuda_flash_tiles(const uint32_t *pos, const uint32_t *ptoff, uint32_t n,
                              uint32_t *tiles, uint32_t cap);
tdm_status_t tdm_cuda_flash_attention(const float *qkv, uint32_t n, uint32_t H,
                                      const tdm_cuda_kv_t *kv, uint32_t layer,
                                      const tdm_cuda_rows_t *rows, const uint32_t *tiles,
                                      uint32_t ntiles, float *out, uint16_t *out_bf16,
                                      cudaStream_t stream);

/* Programmatic dependent launch (Hopper): when on, every kernel of this file is launched with the
 * programmatic-stream-serialization attribute, waits (griddepcontrol.wait) before it touches
 * anything an earlier kernel wrote, and lets its successor launch as soon as all its blocks run;
 * the GEMV streams its first weights before the wait. Off by default; process-wide. */
void tdm_cuda_set_pdl(int on);
/* Whether kernels let their dependents launch before (1) or after (0, the default) their PDL wait;
 * a device constant, written (stream-ordered, then synchronized) only when it changes: call it
 * outside graph capture. */
tdm_status_t tdm_cuda_set_pdl_early(int on, cudaStream_t s);

/* ret_ids[j] = first index of the max of logits row j (m, V); NaN never wins. pf (NULL or bytes
 * 0: none): extra blocks prefetch its range into L2 (the next step's first weights, warmed
 * during the host round trip between decode steps). mark: NULL or the I2 mark it carries. */
tdm_status_t tdm_cuda_argmax(const float *logits, uint32_t m, uint32_t V, int32_t *ret_ids,
                             const tdm_cuda_l2pf_t *pf, const tdm_cuda_mark_t *mark,
                             cudaStream_t stream);
/* pf is usable: none (NULL, bytes 0), or p 16-byte aligned, bytes % 16 == 0, op 0..3. */
int tdm_cuda_l2pf_ok(const tdm_cuda_l2pf_t *pf);

#endif
