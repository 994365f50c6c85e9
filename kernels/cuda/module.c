/*
 * module.c — the CUDA engine's function table (module.h): the one symbol backend-cuda.so exports,
 * and the table a worker linked with the CUDA runtime uses in place of loading the module.
 */
#include "config.h"

#include "module.h"

static const tdm_cuda_module_t cuda_module = {
    .abi = TDM_CUDA_MODULE_ABI,
    .size = sizeof(tdm_cuda_module_t),
    .version = PACKAGE_VERSION,
    .exec_init = tdm_exec_cuda_init,
    .exec_free = tdm_exec_cuda_free,
    .exec_num_pages = tdm_exec_cuda_num_pages,
    .exec_layout = tdm_exec_cuda_layout,
    .exec_kv = tdm_exec_cuda_kv,
    .exec_weight_bytes = tdm_exec_cuda_weight_bytes,
    .exec_forward = tdm_exec_cuda_forward,
    .exec_use_gate = tdm_exec_cuda_use_gate,
    .exec_set_batch = tdm_exec_cuda_set_batch,
    .hicache_dev = tdm_exec_cuda_hicache_dev,
    .exec_set_coll = tdm_exec_cuda_set_coll,
    .exec_forward_sample = tdm_exec_cuda_forward_sample,
    .exec_launch_sample = tdm_exec_cuda_launch_sample,
    .exec_finish_sample = tdm_exec_cuda_finish_sample,
};

const tdm_cuda_module_t *tdm_cuda_module_v1(void)
{
    return &cuda_module;
}
