/*
 * gemm_lt.cu — cuBLAS GEMMs with an algorithm chosen by timing (gemm_lt.h; docs/cuda.md "Where a
 * step's time goes").
 */
#include <cublasLt.h>

#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "gemm_lt.h"

#include <tdm/log.h>

typedef struct {
    uint32_t n, K, M;
    int accum, lt; /* lt 0: cublasGemmEx */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} shape_t;

struct tdm_cuda_lt {
    cublasLtHandle_t h;
    void *ws;
    size_t ws_bytes;
    uint32_t n_shapes;
    shape_t shapes[TDM_LT_SHAPES];
};

static void shape_release(shape_t *s)
{
    if (s->a)
        cublasLtMatrixLayoutDestroy(s->a);
    if (s->b)
        cublasLtMatrixLayoutDestroy(s->b);
    if (s->c)
        cublasLtMatrixLayoutDestroy(s->c);
    if (s->op)
        cublasLtMatmulDescDestroy(s->op);
    memset(s, 0, sizeof(*s));
}

tdm_status_t tdm_cuda_lt_init(void *ws, size_t ws_bytes, tdm_cuda_lt_t **ret)
{
    tdm_cuda_lt_t *lt = (tdm_cuda_lt_t *)calloc(1, sizeof(*lt));
    if (!lt)
        return TDM_ERR_NOMEM;
    if (cublasLtCreate(&lt->h) != CUBLAS_STATUS_SUCCESS) {
        free(lt);
        return TDM_ERR_CUDA;
    }
    lt->ws = ws;
    lt->ws_bytes = ws_bytes;
    *ret = lt;
    return TDM_OK;
}

void tdm_cuda_lt_free(tdm_cuda_lt_t *lt)
{
    if (!lt)
        return;
    for (uint32_t i = 0; i < lt->n_shapes; i++)
        shape_release(&lt->shapes[i]);
    cublasLtDestroy(lt->h);
    free(lt);
}

static shape_t *find(const tdm_cuda_lt_t *lt, uint32_t n, uint32_t K, uint32_t M, int accum)
{
    for (uint32_t i = 0; lt && i < lt->n_shapes; i++) {
        const shape_t *s = &lt->shapes[i];
        if (s->n == n && s->K == K && s->M == M && s->accum == (accum != 0))
            return (shape_t *)s;
    }
    return NULL;
}

int tdm_cuda_lt_tuned(const tdm_cuda_lt_t *lt, uint32_t n, uint32_t K, uint32_t M, int accum)
{
    return find(lt, n, K, M, accum) != NULL;
}

/* column-major, as tdm_cuda_gemm_bf16 calls cublasGemmEx: Yᵀ (M, n) = op(A) · B with A = W stored
 * (K, M), op transpose; B = Xᵀ stored (K, n); C = D = Yᵀ (M, n) fp32 */
static int describe(shape_t *s)
{
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&s->a, CUDA_R_16BF, s->K, s->M, s->K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&s->b, CUDA_R_16BF, s->K, s->n, s->K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&s->c, CUDA_R_32F, s->M, s->n, s->M) != CUBLAS_STATUS_SUCCESS)
        return -1;
    return 0;
}

static cublasStatus_t run_lt(tdm_cuda_lt_t *lt, const shape_t *s, const cublasLtMatmulAlgo_t *algo,
                             cudaStream_t st, const uint16_t *x, const uint16_t *w, float *y)
{
    const float alpha = 1.0f, beta = s->accum ? 1.0f : 0.0f;
    return cublasLtMatmul(lt->h, s->op, &alpha, w, s->a, x, s->b, &beta, y, s->c, y, s->c, algo,
                          lt->ws, lt->ws_bytes, st);
}

#define TUNE_PASSES 3

/* the fastest of TUNE_PASSES passes over the nw weights (one warm pass first), µs per GEMM;
 * a negative value: the candidate failed */
static double time_pass(tdm_cuda_lt_t *lt, cublasHandle_t h, cudaStream_t st, const shape_t *s,
                        const cublasLtMatmulAlgo_t *algo, const uint16_t *x, float *y,
                        const uint16_t *const *w, uint32_t nw, cudaEvent_t e0, cudaEvent_t e1)
{
    double best = -1.0;
    for (int p = 0; p <= TUNE_PASSES; p++) {
        if (cudaEventRecord(e0, st) != cudaSuccess)
            return -1.0;
        for (uint32_t i = 0; i < nw; i++) {
            /* cublasGemmEx (algo NULL) as the engine calls it: tdm_cuda_gemm_bf16 */
            const int bad = algo ? run_lt(lt, s, algo, st, x, w[i], y) != CUBLAS_STATUS_SUCCESS
                                 : tdm_cuda_gemm_bf16(h, x, s->n, s->K, w[i], s->M,
                                                      s->accum ? 1.0f : 0.0f, y) != TDM_OK;
            if (bad) {
                (void)cudaStreamSynchronize(st);
                (void)cudaGetLastError();
                return -1.0;
            }
        }
        float ms = 0.0f;
        if (cudaEventRecord(e1, st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
            (void)cudaGetLastError();
            return -1.0;
        }
        const double us = 1e3 * ms / nw;
        if (p > 0 && (best < 0 || us < best))
            best = us;
    }
    return best;
}

tdm_status_t tdm_cuda_lt_tune(tdm_cuda_lt_t *lt, cublasHandle_t h, cudaStream_t st, uint32_t n,
                              uint32_t K, uint32_t M, int accum, const uint16_t *x, float *y,
                              const uint16_t *const *w, uint32_t nw, double margin,
                              tdm_cuda_lt_shape_t *out)
{
    if (!lt || !h || !x || !y || !w || nw == 0 || n == 0 || K == 0 || M == 0)
        return TDM_ERR_INVAL;
    if (find(lt, n, K, M, accum))
        return TDM_OK;
    if (lt->n_shapes == TDM_LT_SHAPES)
        return TDM_ERR_OVERFLOW;
    shape_t *s = &lt->shapes[lt->n_shapes];
    memset(s, 0, sizeof(*s));
    s->n = n, s->K = K, s->M = M, s->accum = accum != 0;
    tdm_status_t ret = TDM_OK;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[TDM_LT_CANDIDATES];
    int nres = 0;
    double ex_us = -1.0, best_us = -1.0;
    int best = -1;
    if (describe(s) != 0) {
        ret = TDM_ERR_CUDA;
        goto out;
    }
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        ret = TDM_ERR_CUDA;
        goto out;
    }
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &lt->ws_bytes,
                                             sizeof(lt->ws_bytes)) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoGetHeuristic(lt->h, s->op, s->a, s->b, s->c, s->c, pref,
                                       TDM_LT_CANDIDATES, res, &nres) != CUBLAS_STATUS_SUCCESS)
        nres = 0;
    if (cudaStreamSynchronize(st) != cudaSuccess) {
        ret = TDM_ERR_CUDA;
        goto out;
    }
    ex_us = time_pass(lt, h, st, s, NULL, x, y, w, nw, e0, e1);
    if (ex_us < 0) {
        ret = TDM_ERR_CUDA;
        goto out;
    }
    for (int i = 0; i < nres; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        const double us = time_pass(lt, h, st, s, &res[i].algo, x, y, w, nw, e0, e1);
        if (us >= 0 && (best < 0 || us < best_us)) {
            best = i;
            best_us = us;
        }
    }
    if (best >= 0 && best_us < ex_us * (1.0 - margin)) {
        s->lt = 1;
        s->algo = res[best].algo;
    } else {
        s->lt = 0;
        best_us = ex_us;
    }
    lt->n_shapes++;
    tdm_info(TDM_SUB_CUDA,
             "msg=\"gemm tuned\" n=%u K=%u M=%u accum=%d gemmex_us=%.2f best_us=%.2f choice=%s "
             "candidates=%d",
             n, K, M, accum != 0, ex_us, best_us, s->lt ? "cublaslt" : "cublasgemmex", nres);
    if (out)
        *out = (tdm_cuda_lt_shape_t){n, K, M, accum != 0, ex_us, best_us, s->lt, nres};
out:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (ret != TDM_OK)
        shape_release(s);
    return ret;
}

tdm_status_t tdm_cuda_lt_gemm(tdm_cuda_lt_t *lt, cublasHandle_t h, cudaStream_t st,
                              const uint16_t *x, uint32_t n, uint32_t K, const uint16_t *w,
                              uint32_t M, int accum, float *y)
{
    if (n == 0)
        return TDM_OK;
    const shape_t *s = find(lt, n, K, M, accum);
    if (!s || !s->lt)
        return tdm_cuda_gemm_bf16(h, x, n, K, w, M, accum ? 1.0f : 0.0f, y);
    const cublasStatus_t r = run_lt(lt, s, &s->algo, st, x, w, y);
    if (r != CUBLAS_STATUS_SUCCESS) {
        tdm_err(TDM_SUB_CUDA, "msg=\"cublasLtMatmul failed\" err=%d n=%u K=%u M=%u", (int)r, n, K,
                M);
        return TDM_ERR_CUDA;
    }
    return TDM_OK;
}
