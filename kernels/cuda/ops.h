/*
 * kernels/cuda/ops.h — host-array entry points to each CUDA kernel of ops.cu, for the tolerance
 * tests (tests/gpu/test-cuda-ops.c) and micro-benchmarks. Every call copies its inputs to fresh
 * device buffers, POISONS each output buffer (0xff bytes: NaN in fp32/bf16) before the launch so a
 * skipped element cannot pass, runs the kernel, and copies the outputs back. Shapes as in
 * cuda_int.h. Errors: TDM_ERR_INVAL, TDM_ERR_UNSUPPORTED, TDM_ERR_NOMEM, TDM_ERR_CUDA.
 */
#ifndef TDM_KERNELS_CUDA_OPS_H
#define TDM_KERNELS_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/kv.h>
#include <tdm/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* flags: bit 0 NORM (norm_w, eps), bit 1 SILU (x is (n, 2K)), bit 2 ACCUM (y in/out).
 * use_cublas 1: cuBLAS; bf16 weights, flags 0 or ACCUM only; x is rounded to bf16 first (the
 * prefill path). use_cublas 2: the tensor-core skinny GEMM (n <= 32, K % 32 == 0; flags 0, ACCUM,
 * SILU, SILU|ACCUM; bias without ACCUM), x rounded to bf16 (SILU: silu(gate) * up rounded).
 * use_cublas 3: the fp32 GEMV with K split over the block's warps (n == 1 only; else as 0).
 * use_cublas 4: the streaming one-row GEMV (n == 1 only, K % (32 * 16 B) == 0; else as 3).
 * use_cublas 5..8: as 4 with the L2 tail prefetch (cuda_int.h tdm_cuda_l2pf_t) of the weights
 * themselves, op use_cublas - 5: must give 4's result bit for bit.
 * use_cublas 9: the streaming GEMV V2 (run 8: norm_w staged before the PDL wait, the RMSNorm
 * scale applied to each row's sum); 10: V2 on one block per SM; 11: V3 (V2 with two batches of
 * weight loads before the PDL wait); 12: V2 held to 3 blocks per SM; 13, 14: V2 in blocks of 4 and
 * 2 warps; 15: V2 with x staged through registers (9 stages it by cp.async); 16, 17: V4 (V2 with
 * a shared-memory ring of 2 or 1 more weight batches per lane; same sums) (n == 1; else as 3).
 * use_cublas 18, 19, 20: the tile tensor-core GEMM (n <= 256, K % 64 == 0; flags 0 or ACCUM, no
 * bias; x rounded to bf16) with its own split count, one split, and 5 splits (K >= 320); 23: its
 * shallow form (tdm_cuda_tile_deep 0) with its own split count;
 * without ACCUM it runs twice with y poisoned between (the second call must write it all). */
tdm_status_t tdm_cuda_test_gemv(const float *x, uint32_t n, uint32_t K, uint32_t M, int wdtype,
                                const void *w, const float *bias, const float *norm_w, float eps,
                                int flags, int use_cublas, float *y);
/* The streaming V2 one-row GEMV (ksplit 3) with its fused epilogues (run 11): swiglu 1: w is
 * (2M, K), gate rows then up rows, and y (M) = silu(gate) * up; ret_id non-NULL: the argmax
 * fused into the epilogue, *ret_id (flags 0 or NORM). calls: that many launches in a row on the
 * same workspace (its arrival counter must re-arm); ids poisoned before each. pipe 1, 2: V4
 * (ksplit 11, 10) instead of V2. */
tdm_status_t tdm_cuda_test_gemv_fused(const float *x, uint32_t K, uint32_t M, int wdtype,
                                      const void *w, const float *norm_w, float eps, int flags,
                                      int swiglu, int calls, int pipe, float *y, int32_t *ret_id);
/* The embedding lookup folded into a NORM one-row GEMV (V2, or V4 with pipe 1/2): y (M) from
 * table row id (bf16 (V, K)), w bf16 (M, K); x_out (K): the widened row block 0 writes. */
tdm_status_t tdm_cuda_test_gemv_embed(const uint16_t *table, uint32_t V, uint32_t K, uint32_t M,
                                      int32_t id, const uint16_t *w, const float *norm_w, float eps,
                                      int pipe, float *y, float *x_out);
tdm_status_t tdm_cuda_test_embed(const void *table, int dtype, uint32_t V, uint32_t d,
                                 const int32_t *ids, uint32_t n, float *out);
/* resid (n, d) in/out; add may be NULL; out (n, d) fp32 (as_bf16: the kernel's bf16 output,
 * widened back). */
/* gemm_lt.h through its tuner with the fastest cuBLASLt algorithm forced (margin -1e9): y (n,
 * M) (+)= x (n, K) · Wᵀ, x and w bf16, y fp32 in and out (accum: y is added to). *lt_kept: 1
 * when a cuBLASLt algorithm ran (0: none was offered; cublasGemmEx ran); *candidates: how many
 * heuristics were timed. */
tdm_status_t tdm_cuda_test_lt(const uint16_t *x, uint32_t n, uint32_t K, const uint16_t *w,
                              uint32_t M, int accum, float *y, int *lt_kept, int *candidates);
tdm_status_t tdm_cuda_test_rmsnorm(float *resid, const float *add, const float *w, float eps,
                                   uint32_t n, uint32_t d, int as_bf16, float *out);
/* qkv (n, ld) in/out: Qwen3's per-head RMSNorm of the H q heads (qw) and KV k heads (kw), hd
 * values each, in place; v untouched. */
tdm_status_t tdm_cuda_test_qk_norm(float *qkv, uint32_t n, uint32_t ld, uint32_t H, uint32_t KV,
                                   uint32_t hd, const float *qw, const float *kw, float eps);
/* interleaved: gu's columns gate_0, up_0, gate_1, up_1, ... */
tdm_status_t tdm_cuda_test_silu_mul(const float *gu, uint32_t n, uint32_t I, int interleaved,
                                    float *out);
/* pool: host image of a pool of num_pages pages laid out by l (in/out); qkv (n, (H+2KV) hd)
 * in/out; rows: pos (n), ptoff (n), pages (n_pages_total); nactive rows written. */
tdm_status_t tdm_cuda_test_rope_kv(const tdm_kv_layout_t *l, uint32_t num_pages, uint8_t *pool,
                                   uint32_t layer, float *qkv, uint32_t n, uint32_t H,
                                   const float *inv_freq, const uint32_t *pos,
                                   const uint32_t *ptoff, const uint32_t *pages,
                                   uint32_t n_pages_total, uint32_t nactive);
/* out (n, H, hd) from q in qkv over the pool image: split-K (mma 0) or the tensor-core decode
 * kernel (mma 1: the splits merged by the combine kernel; 2: the cluster form, splits <= 8
 * merged inside the kernel); rows at or past nactive are padding (zeros). */
tdm_status_t tdm_cuda_test_attention(const tdm_kv_layout_t *l, uint32_t num_pages,
                                     const uint8_t *pool, uint32_t layer, const float *qkv,
                                     uint32_t n, uint32_t H, const uint32_t *pos,
                                     const uint32_t *ptoff, const uint32_t *pages,
                                     uint32_t n_pages_total, uint32_t splits, int mma,
                                     uint32_t nactive, float *out);
/* The tensor-core decode attention with RoPE and the KV write fused in (fused bit 0), or after
 * rope_kv_write (bit 0 clear); bit 1: the cluster form (splits <= 8 merged inside the kernel;
 * fused, its first K/V tiles issued before the PDL wait); pool in/out (the cache it leaves), qkv
 * unrotated, out (n, H, hd).
 * l2pf -1: no prefetch; 0..7: the grid carries L2 prefetch blocks over the pool image (op
 * l2pf & 3, early l2pf & 4), which must change nothing. */
tdm_status_t tdm_cuda_test_decode_rope(const tdm_kv_layout_t *l, uint32_t num_pages, uint8_t *pool,
                                       uint32_t layer, const float *qkv, uint32_t n, uint32_t H,
                                       const float *inv_freq, const uint32_t *pos,
                                       const uint32_t *ptoff, const uint32_t *pages,
                                       uint32_t n_pages_total, uint32_t nactive, uint32_t splits,
                                       int fused, int l2pf, float *out);
/* The same through the tensor-core prefill kernel (bf16 KV, hd 64/128); rows are tiled by
 * tdm_cuda_flash_tiles (runs of consecutive positions of one page table). plain: the kernel's
 * plain form for this call, else the lean one (tdm_cuda_flash_plain). */
tdm_status_t tdm_cuda_test_flash_attention(const tdm_kv_layout_t *l, uint32_t num_pages,
                                           const uint8_t *pool, uint32_t layer, const float *qkv,
                                           uint32_t n, uint32_t H, const uint32_t *pos,
                                           const uint32_t *ptoff, const uint32_t *pages,
                                           uint32_t n_pages_total, int plain, float *out);
/* The flash kernel's form, process-wide: 0 lean (the default; docs/cuda.md "Next steps"), 1
 * plain (the causal mask on every tile, pages by division; TDM_CUDA_FLASH_PLAIN=1, read once).
 * Both give the same bits; the setter is for the tests and benches that compare or time the two
 * in one process. */
int tdm_cuda_flash_plain(void);
void tdm_cuda_set_flash_plain(int on);
/* l2pf as for tdm_cuda_test_decode_rope (prefetch blocks over the logits). */
tdm_status_t tdm_cuda_test_argmax(const float *logits, uint32_t m, uint32_t V, int l2pf,
                                  int32_t *ret_ids);

/* The tile GEMM's own split count for n rows of (M, K) weights in the current form. */
uint32_t tdm_cuda_test_tile_splits(uint32_t n, uint32_t K, uint32_t M);

/* Micro-benchmarks on device-resident random data, median of reps (CUDA events). */
/* use_cublas: 0 GEMV, 1 cuBLAS, 2 skinny tensor-core GEMM, 3 GEMV with K split (n == 1), 4 the
 * streaming one-row GEMV, 18 the tile tensor-core GEMM (its own split count), 21 the same on one
 * split, 22 in its shallow form (kernels/cuda/cuda_int.h tdm_cuda_tile_deep). The weights rotate
 * over >= 22 copies (>= 160 MB, past the 50 MB L2): the time is one pass over every copy back to
 * back divided by the copies, HBM-bound. */
tdm_status_t tdm_cuda_bench_gemv(uint32_t n, uint32_t K, uint32_t M, int use_cublas, int reps,
                                 double *ret_ms);
/* attention on the TinyLlama heads (H 32, KV 4, hd 64, bf16 KV): nseq sequences of KV length
 * len, the last rows_per_seq positions of each as query rows; flash 1: the tensor-core prefill
 * kernel in its lean form (3: its plain form); 2: the tensor-core decode kernel with `splits`; 0:
 * split-K with `splits` partitions and the combine. */
tdm_status_t tdm_cuda_bench_attention(uint32_t nseq, uint32_t rows_per_seq, uint32_t len,
                                      uint32_t splits, int flash, int reps, double *ret_ms);
/* device-to-device cudaMemcpy of `bytes`; GB/s counts bytes read + written */
tdm_status_t tdm_cuda_bench_copy(size_t bytes, int reps, double *ret_ms);

#ifdef __cplusplus
}
#endif

#endif
