/*
 * device.h — the GPU presence check the CUDA executor runs before building the engine
 * (kernels/cuda/device.cu). Callable from C.
 */
#ifndef TDM_KERNELS_CUDA_DEVICE_H
#define TDM_KERNELS_CUDA_DEVICE_H

#include <stddef.h>

#include <tdm/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TDM_OK when at least one CUDA device can be used; else TDM_ERR_UNSUPPORTED and a one-line
 * reason in err (no driver, no device, or the runtime's error). */
tdm_status_t tdm_cuda_device_check(char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
