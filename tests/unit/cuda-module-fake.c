/*
 * cuda-module-fake.c — stand-ins for backend-cuda.so in test-cuda-module, built three ways:
 * FAKE_KIND 0 a module without the entry symbol, 1 one of another ABI, 2 a well-formed table
 * whose engine refuses to start (no device here), so the loader's success path runs without CUDA.
 */
#include <stdio.h>

#include "kernels/cuda/module.h"

#if FAKE_KIND == 0
int tdm_cuda_fake_nothing(void);
int tdm_cuda_fake_nothing(void)
{
    return 0;
}
#else
static tdm_status_t fake_init(const tdm_exec_cuda_cfg_t *cfg, tdm_exec_cuda_t **ret, char *err,
                              size_t err_len)
{
    (void)cfg;
    (void)ret;
    snprintf(err, err_len, "fake engine: no device");
    return TDM_ERR_CUDA;
}
static void fake_free(tdm_exec_cuda_t *x)
{
    (void)x;
}
static uint32_t fake_pages(const tdm_exec_cuda_t *x)
{
    (void)x;
    return 0;
}
static const tdm_kv_layout_t *fake_layout(const tdm_exec_cuda_t *x)
{
    (void)x;
    return NULL;
}
static const tdm_kv_buffers_t *fake_kv(const tdm_exec_cuda_t *x)
{
    (void)x;
    return NULL;
}
static uint64_t fake_bytes(const tdm_exec_cuda_t *x)
{
    (void)x;
    return 0;
}
static tdm_status_t fake_forward(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs, uint32_t n,
                                 float *logits, uint32_t cap, uint32_t *ret_rows)
{
    (void)x, (void)seqs, (void)n, (void)logits, (void)cap, (void)ret_rows;
    return TDM_ERR_CUDA;
}
static const tdm_cuda_module_t fake = {
    .abi = FAKE_KIND == 1 ? 999 : TDM_CUDA_MODULE_ABI,
    .size = sizeof(tdm_cuda_module_t),
    .version = "fake",
    .exec_init = fake_init,
    .exec_free = fake_free,
    .exec_num_pages = fake_pages,
    .exec_layout = fake_layout,
    .exec_kv = fake_kv,
    .exec_weight_bytes = fake_bytes,
    .exec_forward = fake_forward,
};
const tdm_cuda_module_t *tdm_cuda_module_v1(void)
{
    return &fake;
}
#endif
