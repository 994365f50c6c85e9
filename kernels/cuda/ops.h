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
 * use_cublas: bf16 weights, flags 0 or ACCUM only; x is rounded to bf16 first (the prefill path).
 */
tdm_status_t tdm_cuda_test_gemv(const float *x, uint32_t n, uint32_t K, uint32_t M, int wdtype,
                                const void *w, const float *bias, const float *norm_w, float eps,
                                int flags, int use_cublas, float *y);
tdm_status_t tdm_cuda_test_embed(const void *table, int dtype, uint32_t V, uint32_t d,
                                 const int32_t *ids, uint32_t n, float *out);
/* resid (n, d) in/out; add may be NULL; out (n, d) fp32 (as_bf16: the kernel's bf16 output,
 * widened back). */
tdm_status_t tdm_cuda_test_rmsnorm(float *resid, const float *add, const float *w, float eps,
                                   uint32_t n, uint32_t d, int as_bf16, float *out);
tdm_status_t tdm_cuda_test_silu_mul(const float *gu, uint32_t n, uint32_t I, float *out);
/* pool: host image of a pool of num_pages pages laid out by l (in/out); qkv (n, (H+2KV) hd)
 * in/out; rows: pos (n), ptoff (n), pages (n_pages_total); nactive rows written. */
tdm_status_t tdm_cuda_test_rope_kv(const tdm_kv_layout_t *l, uint32_t num_pages, uint8_t *pool,
                                   uint32_t layer, float *qkv, uint32_t n, uint32_t H,
                                   const float *inv_freq, const uint32_t *pos,
                                   const uint32_t *ptoff, const uint32_t *pages,
                                   uint32_t n_pages_total, uint32_t nactive);
/* out (n, H, hd) from q in qkv over the pool image. */
tdm_status_t tdm_cuda_test_attention(const tdm_kv_layout_t *l, uint32_t num_pages,
                                     const uint8_t *pool, uint32_t layer, const float *qkv,
                                     uint32_t n, uint32_t H, const uint32_t *pos,
                                     const uint32_t *ptoff, const uint32_t *pages,
                                     uint32_t n_pages_total, uint32_t splits, float *out);
tdm_status_t tdm_cuda_test_argmax(const float *logits, uint32_t m, uint32_t V, int32_t *ret_ids);

/* Micro-benchmarks on device-resident random data, median of reps (CUDA events). */
tdm_status_t tdm_cuda_bench_gemv(uint32_t n, uint32_t K, uint32_t M, int use_cublas, int reps,
                                 double *ret_ms);
/* device-to-device cudaMemcpy of `bytes`; GB/s counts bytes read + written */
tdm_status_t tdm_cuda_bench_copy(size_t bytes, int reps, double *ret_ms);

#ifdef __cplusplus
}
#endif

#endif
