/*
 * dataplane/tp/nccl.h — the NCCL communicator of a GPU worker group (one rank per GPU), behind the
 * collectives the CUDA engine enqueues (kernels/cuda/engine.h tdm_cuda_coll_t, through
 * dataplane/tp/gpu.c).
 *
 * Every NCCL call goes through a thin wrapper (nccl_call in nccl.c) that can be armed to return
 * an error code instead of calling the library (tdm_nccl_inject), so the error paths run in tests
 * with the real library linked and no device: each failure is reported as one line naming the
 * rank, the NCCL function and NCCL's own error string, and maps to a status (below).
 *
 * Setup: rank 0 draws the unique id (ncclGetUniqueId) and hands it to the others through the
 * group's shared-memory region (a broadcast on the tensor comm, dataplane/tp/shm.c), then every
 * rank joins (ncclCommInitRank) on its current device. Collectives are enqueued on the caller's
 * stream. Errors: the loop polls tdm_nccl_check (ncclCommGetAsyncError) while it waits for a
 * step; an asynchronous error, the group's abort word or the deadline end in tdm_nccl_abort
 * (ncclCommAbort: the kernels in flight return) with a record naming the rank and the op.
 * Status map: ncclSystemError / ncclRemoteError → TDM_ERR_PEER, ncclInvalidArgument /
 * ncclInvalidUsage → TDM_ERR_INVAL, ncclUnhandledCudaError / ncclInternalError → TDM_ERR_CUDA.
 */
#ifndef TDM_TP_NCCL_H
#define TDM_TP_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#include "dataplane/tp/comm.h"

typedef struct tdm_nccl tdm_nccl_t;

/* The wrapped functions, for tdm_nccl_inject. */
typedef enum tdm_nccl_fn {
    TDM_NCCL_GET_UNIQUE_ID = 0,
    TDM_NCCL_COMM_INIT_RANK,
    TDM_NCCL_ALL_REDUCE,
    TDM_NCCL_ALL_GATHER,
    TDM_NCCL_BROADCAST,
    TDM_NCCL_GET_ASYNC_ERROR, /* injected as the async error it reports */
    TDM_NCCL_COMM_ABORT,
    TDM_NCCL_FN_MAX
} tdm_nccl_fn_t;

const char *tdm_nccl_fn_name(tdm_nccl_fn_t fn);
/* The next call of fn after `skip` calls returns `code` (an ncclResult_t) without calling NCCL;
 * code 0 disarms. Process-wide; for tests. */
void tdm_nccl_inject(tdm_nccl_fn_t fn, int code, uint32_t skip);
/* The status an ncclResult_t maps to (header comment). */
tdm_status_t tdm_nccl_status(int code);

/* Join the group: `boot` carries rank 0's unique id to the others (its size is the group's).
 * err gets one line on failure. */
tdm_status_t tdm_nccl_init(tdm_comm_t *boot, tdm_nccl_t **ret, char *err, size_t err_len);
void tdm_nccl_free(tdm_nccl_t *n);
uint32_t tdm_nccl_rank(const tdm_nccl_t *n);

/* On `stream` (a cudaStream_t); device buffers. */
tdm_status_t tdm_nccl_allreduce(tdm_nccl_t *n, float *buf, size_t count, void *stream);
tdm_status_t tdm_nccl_allgather(tdm_nccl_t *n, const float *in, float *out, size_t count,
                                void *stream);
tdm_status_t tdm_nccl_broadcast(tdm_nccl_t *n, void *buf, size_t bytes, uint32_t root,
                                void *stream);

/* The communicator's asynchronous error: TDM_OK while none (or still in progress). */
tdm_status_t tdm_nccl_check(tdm_nccl_t *n);
/* ncclCommAbort with one record line: rank, `op` (the collective it was in) and why. Idempotent;
 * every later call returns TDM_ERR_ABORTED. */
void tdm_nccl_abort(tdm_nccl_t *n, const char *op, const char *why);
int tdm_nccl_aborted(const tdm_nccl_t *n);

#endif
