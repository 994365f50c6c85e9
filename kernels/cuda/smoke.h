/*
 * kernels/cuda/smoke.h — the CUDA smoke kernel: proves that the toolchain, the sm_90a build, the
 * runtime and the device agree, before any real kernel depends on them.
 *
 * One kernel, (n) elements: out[i] = fmaf(a, x[i], y[i]) in fp32 and bf16[i] = out[i] rounded to
 * bfloat16 (round-to-nearest-even), as raw bits. Both are exact functions of the inputs, so a CPU
 * reference must match bit for bit. Host-side API in C; all device memory is owned inside each
 * call. Errors: TDM_ERR_CUDA (logged once with the CUDA error string), TDM_ERR_NOTFOUND (no
 * device), TDM_ERR_UNSUPPORTED (device too old for the sm_90a image), TDM_ERR_INVAL.
 */
#ifndef TDM_KERNELS_CUDA_SMOKE_H
#define TDM_KERNELS_CUDA_SMOKE_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_cuda_smoke_dev {
    int count;           /* devices visible */
    char name[256];      /* device 0 */
    int major, minor;    /* compute capability of device 0 */
    int sm_count;        /* multiprocessors */
    size_t mem_total;    /* bytes */
    int driver_version;  /* cudaDriverGetVersion: 13000 = 13.0 */
    int runtime_version; /* cudaRuntimeGetVersion */
} tdm_cuda_smoke_dev_t;

/* Describe device 0. TDM_ERR_NOTFOUND with `why` filled when there is none (no driver, no GPU). */
tdm_status_t tdm_cuda_smoke_probe(tdm_cuda_smoke_dev_t *ret_dev, char *why, size_t why_len);

/* x, y: (n) fp32 host arrays; ret_out (n) fp32 and ret_bf16 (n) raw bfloat16 bits, host. */
tdm_status_t tdm_cuda_smoke_axpy_bf16(float a, const float *x, const float *y, size_t n,
                                      float *ret_out, uint16_t *ret_bf16);

/* Median milliseconds of `reps` launches over (n) device-resident elements after warm-up,
 * timed with CUDA events; bytes moved per launch: 14 n (read x, y; write out, bf16). */
tdm_status_t tdm_cuda_smoke_bench(size_t n, int reps, double *ret_median_ms);

#ifdef __cplusplus
}
#endif

#endif
