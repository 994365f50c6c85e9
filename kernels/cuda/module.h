/*
 * kernels/cuda/module.h — the CUDA engine as a separately loaded module. A worker built without
 * the CUDA runtime (the Debian package's, which must install and serve on CPU with no CUDA
 * library present) reaches the GPU forward only through this table, which backend-cuda.so (the
 * tandem-cuda package, installed as PKGLIBDIR/backend-cuda.so) returns from its one exported
 * function, tdm_cuda_module_v1(). A worker built with the runtime uses the same table linked in
 * (tdm_cuda_module_builtin), so the executor has one code path.
 *
 * The table mirrors kernels/cuda/exec_cuda.h, whose contract holds for each entry. The boundary
 * is versioned: `abi` must equal TDM_CUDA_MODULE_ABI and `size` be at least this build's
 * sizeof(tdm_cuda_module_t); a new entry goes at the end and bumps neither, a changed signature
 * bumps the ABI (and the exported symbol's suffix).
 *
 * Loader errors (one line in err, for the operator): the file absent → "GPU backend not
 * installed: install tandem-cuda (PATH: ...)" (TDM_ERR_NOTFOUND); present but not loadable (a
 * missing libcuda.so.1, a wrong architecture) → dlerror's text (TDM_ERR_UNSUPPORTED); loaded but
 * without the symbol or of another ABI → the file named as not a matching tandem CUDA backend
 * (TDM_ERR_UNSUPPORTED). A loaded module stays loaded for the life of the process.
 * Threading: load from one thread at a time (the rank's main thread, at executor init).
 */
#ifndef TDM_KERNELS_CUDA_MODULE_H
#define TDM_KERNELS_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#include "exec_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TDM_CUDA_MODULE_ABI 1u
#define TDM_CUDA_MODULE_SYMBOL "tdm_cuda_module_v1"
#define TDM_CUDA_MODULE_FILE "backend-cuda.so"

typedef struct tdm_cuda_module {
    uint32_t abi;        /* TDM_CUDA_MODULE_ABI */
    uint32_t size;       /* sizeof(tdm_cuda_module_t) in the module's build */
    const char *version; /* the module's PACKAGE_VERSION */
    tdm_status_t (*exec_init)(const tdm_exec_cuda_cfg_t *cfg, tdm_exec_cuda_t **ret, char *err,
                              size_t err_len);
    void (*exec_free)(tdm_exec_cuda_t *x);
    uint32_t (*exec_num_pages)(const tdm_exec_cuda_t *x);
    const tdm_kv_layout_t *(*exec_layout)(const tdm_exec_cuda_t *x);
    const tdm_kv_buffers_t *(*exec_kv)(const tdm_exec_cuda_t *x);
    uint64_t (*exec_weight_bytes)(const tdm_exec_cuda_t *x);
    tdm_status_t (*exec_forward)(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs, uint32_t n_seqs,
                                 float *logits, uint32_t cap_rows, uint32_t *ret_rows);
    /* HiCache on the GPU (exec_cuda.h); entries a module of an older build lacks (size) */
    tdm_status_t (*exec_use_gate)(tdm_exec_cuda_t *x, tdm_kv_gate_t *gate);
    void (*exec_set_batch)(tdm_exec_cuda_t *x, const tdm_kv_batch_t *b);
    const tdm_hicache_dev_t *(*hicache_dev)(void);
    tdm_status_t (*exec_set_coll)(tdm_exec_cuda_t *x, const tdm_cuda_coll_t *coll);
    /* sampling on the device (exec_cuda.h); NULL or beyond `size` in an older module */
    tdm_status_t (*exec_forward_sample)(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs,
                                        uint32_t n_seqs, const tdm_cuda_sample_req_t *reqs,
                                        float *host_logits, tdm_cuda_sample_out_t *outs,
                                        uint32_t *ret_rows);
    /* pipelined device sampling (exec_cuda.h); NULL or beyond `size` in an older module */
    tdm_status_t (*exec_launch_sample)(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs,
                                       uint32_t n_seqs, const tdm_cuda_sample_req_t *reqs,
                                       const uint32_t *prev_dst, const uint32_t *prev_src,
                                       uint32_t n_prev, uint32_t *ret_rows, int *ret_slot);
    tdm_status_t (*exec_finish_sample)(tdm_exec_cuda_t *x, int slot, tdm_cuda_sample_out_t *outs,
                                       uint32_t n);
} tdm_cuda_module_t;

typedef const tdm_cuda_module_t *(*tdm_cuda_module_fn)(void);

/* The module's entry point (defined in kernels/cuda/module.c, built into backend-cuda.so and
 * into workers linked with the runtime). */
const tdm_cuda_module_t *tdm_cuda_module_v1(void);

/* dlopen `path` (NULL or "": PKGLIBDIR/backend-cuda.so) and check its table. */
tdm_status_t tdm_cuda_module_load(const char *path, const tdm_cuda_module_t **ret, char *err,
                                  size_t err_len);
/* The path tdm_cuda_module_load(NULL) opens. */
const char *tdm_cuda_module_default_path(void);

#ifdef __cplusplus
}
#endif

#endif
