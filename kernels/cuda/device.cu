/*
 * device.cu — is there a GPU to run on? Asked once, before the engine allocates anything, so a
 * worker started with --device cuda on a machine without a usable NVIDIA GPU (no driver, a driver
 * older than the runtime, no device, or every device busy) fails with one line an operator can act
 * on, not with the first allocation's error string.
 */
#include <stdio.h>

#include <cuda_runtime.h>

#include "device.h"

tdm_status_t tdm_cuda_device_check(char *err, size_t err_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice ||
        (e == cudaSuccess && n == 0)) {
        snprintf(err, err_len,
                 "no NVIDIA GPU on this machine (%s): --device cuda needs a GPU and its driver "
                 "(libcuda.so.1); --device cpu serves without one",
                 e == cudaSuccess ? "no CUDA device" : cudaGetErrorString(e));
        return TDM_ERR_UNSUPPORTED;
    }
    if (e != cudaSuccess) {
        snprintf(err, err_len, "the NVIDIA GPU cannot be used: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return TDM_ERR_UNSUPPORTED;
    }
    return TDM_OK;
}
