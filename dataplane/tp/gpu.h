/*
 * dataplane/tp/gpu.h — the collectives of a GPU rank for the CUDA engine (kernels/cuda/engine.h
 * tdm_cuda_coll_t), on one of two backends:
 *  - NCCL (dataplane/tp/nccl.h): one rank per GPU;
 *  - host-staged: device → pinned host → the group's shared-memory all-reduce / all-gather
 *    (dataplane/tp/shm.c, the fixed-order tree sum) → device, as a device-to-host copy, a host
 *    function and a host-to-device copy on the engine's stream (so they are captured in its
 *    graphs too). This is how N ranks share ONE GPU (NCCL refuses two ranks on a device), and the
 *    fallback the tests use.
 * Both bracket the engine's steps for the recorder (tdm_comm_gpu_begin / _end on the tensor comm)
 * and map the group's progress page for the device (cudaHostRegister), so the engine's marks land
 * in the rank's slot (I2). The wait of a step polls the stream, the NCCL asynchronous error, the
 * group's abort word and the deadline (2 × --health-progress-timeout): past it, or on an error,
 * the step is aborted (ncclCommAbort, or the group's abort word for the host-staged backend) with
 * a record naming the rank and the collective it was in, and the forward fails; never a hang.
 */
#ifndef TDM_TP_GPU_H
#define TDM_TP_GPU_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#include "dataplane/tp/comm.h"
#include "kernels/cuda/engine.h"

typedef enum tdm_gpu_comm_kind {
    TDM_GPU_COMM_HOST = 0, /* host-staged through shared memory */
    TDM_GPU_COMM_NCCL = 1
} tdm_gpu_comm_kind_t;

typedef struct tdm_gpu_comm_cfg {
    tdm_gpu_comm_kind_t kind;
    tdm_comm_t *tensor;   /* the group's shm comm: the host-staged data path, NCCL's bootstrap,
                             and the recorder's slot; must outlive the gpu comm */
    size_t max_floats;    /* the largest collective's floats per rank (host staging) */
    uint64_t deadline_us; /* a step's wait is aborted past it (0: 2 x 30 s) */
} tdm_gpu_comm_cfg_t;

typedef struct tdm_gpu_comm tdm_gpu_comm_t;

/* "host" or "nccl" (TDM_TP_BACKEND); anything else is TDM_ERR_INVAL. */
tdm_status_t tdm_gpu_comm_kind_parse(const char *s, tdm_gpu_comm_kind_t *ret);
const char *tdm_gpu_comm_kind_name(tdm_gpu_comm_kind_t k);
/* NCCL when this process sees at least tp devices (one rank per GPU), else host-staged. */
tdm_gpu_comm_kind_t tdm_gpu_comm_kind_default(uint32_t tp);

tdm_status_t tdm_gpu_comm_init(const tdm_gpu_comm_cfg_t *cfg, tdm_gpu_comm_t **ret, char *err,
                               size_t err_len);
void tdm_gpu_comm_free(tdm_gpu_comm_t *g);
/* The table for tdm_cuda_engine_set_coll (valid while g lives). */
const tdm_cuda_coll_t *tdm_gpu_comm_coll(tdm_gpu_comm_t *g);

/* The host half of one host-staged collective (what the host function runs): an all-reduce of n
 * floats in place in `buf`, or an all-gather of n floats from `buf` into `out` (size x n), on
 * the shared-memory comm, without the recorder (the device marks record the step). CPU-only. */
tdm_status_t tdm_gpu_host_collective(tdm_comm_t *shm, tdm_coll_op_t op, float *buf, float *out,
                                     size_t n);

#endif
