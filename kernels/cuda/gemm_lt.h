/*
 * gemm_lt.h — the engine's cuBLAS GEMMs with an algorithm chosen by timing (docs/cuda.md
 * "Where a step's time goes"; engine.h gemm_tune, off by default). y (n, M) (+)= x (n, K, bf16) ·
 * Wᵀ (W: M × K bf16, row-major), y fp32. For a shape (n, K, M, accumulate) the tuner times
 * cublasGemmEx's own choice and up to TDM_LT_CANDIDATES cuBLASLt heuristics over a list of weight
 * matrices of that shape (the layers' own, so every candidate streams its weights from memory as in
 * a step, not from L2), and keeps a cuBLASLt algorithm only where it beat cublasGemmEx by
 * TDM_LT_MARGIN. Shapes never tuned, or where cublasGemmEx won, run cublasGemmEx as before.
 */
#ifndef TDM_KERNELS_CUDA_GEMM_LT_H
#define TDM_KERNELS_CUDA_GEMM_LT_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <tdm/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TDM_LT_CANDIDATES 16
#define TDM_LT_SHAPES 64 /* tuned shapes kept per engine */
#define TDM_LT_MARGIN 0.03

typedef struct tdm_cuda_lt tdm_cuda_lt_t;

/* one shape's outcome, for logs and benches */
typedef struct {
    uint32_t n, K, M;
    int accum;
    double gemmex_us; /* cublasGemmEx, per GEMM (the fastest of the timed passes) */
    double best_us;   /* the kept choice, per GEMM (gemmex_us when it won) */
    int lt;           /* 1: a cuBLASLt algorithm is kept; 0: cublasGemmEx */
    int candidates;   /* cuBLASLt heuristics timed */
} tdm_cuda_lt_shape_t;

/* ws: a workspace of ws_bytes the cuBLASLt calls may use (stream-ordered on the caller's
 * stream, shared with the cuBLAS handle's). */
tdm_status_t tdm_cuda_lt_init(void *ws, size_t ws_bytes, tdm_cuda_lt_t **ret);
void tdm_cuda_lt_free(tdm_cuda_lt_t *lt);

/* 1 when (n, K, M, accum) has been tuned (either outcome). */
int tdm_cuda_lt_tuned(const tdm_cuda_lt_t *lt, uint32_t n, uint32_t K, uint32_t M, int accum);

/* Time the shape and remember the outcome; x: n × K bf16 of scratch input, y: n × M fp32 of
 * scratch output (both overwritten or read freely), w[0..nw-1]: weight matrices of the shape.
 * A cuBLASLt algorithm is kept when it took less than (1 - margin) of cublasGemmEx's time (the
 * engine: TDM_LT_MARGIN; a test forces the fastest cuBLASLt algorithm with margin -1e9).
 * Synchronises the stream; never call it while the stream is capturing. TDM_ERR_OVERFLOW when
 * TDM_LT_SHAPES shapes are kept already (the shape then runs cublasGemmEx). */
tdm_status_t tdm_cuda_lt_tune(tdm_cuda_lt_t *lt, cublasHandle_t h, cudaStream_t s, uint32_t n,
                              uint32_t K, uint32_t M, int accum, const uint16_t *x, float *y,
                              const uint16_t *const *w, uint32_t nw, double margin,
                              tdm_cuda_lt_shape_t *out);

/* y (+)= x · Wᵀ: the kept cuBLASLt algorithm of the shape, else tdm_cuda_gemm_bf16 (cublasGemmEx)
 * on h, whose stream is s. Capturable. */
tdm_status_t tdm_cuda_lt_gemm(tdm_cuda_lt_t *lt, cublasHandle_t h, cudaStream_t s,
                              const uint16_t *x, uint32_t n, uint32_t K, const uint16_t *w,
                              uint32_t M, int accum, float *y);

#ifdef __cplusplus
}
#endif

#endif
