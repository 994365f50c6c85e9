/*
 * nccl.c — the NCCL communicator of a GPU worker group (dataplane/tp/nccl.h): setup through the
 * group's shared-memory region, collectives on the caller's stream, the asynchronous error polled
 * by the loop, abort with a record. Every NCCL call goes through nccl_call's injection point.
 */
#include "config.h"

#include <cuda_runtime_api.h>
/* nccl.h (and the cuda_fp16.h it includes) is not -Wundef / -Wstrict-prototypes clean */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "dataplane/tp/nccl.h"

struct tdm_nccl {
    ncclComm_t comm;
    uint32_t rank, size;
    int aborted;
};

static const char *const fn_names[] = {
    "ncclGetUniqueId", "ncclCommInitRank",      "ncclAllReduce", "ncclAllGather",
    "ncclBroadcast",   "ncclCommGetAsyncError", "ncclCommAbort"};
_Static_assert(sizeof(fn_names) / sizeof(fn_names[0]) == TDM_NCCL_FN_MAX, "every wrapped fn");

static _Atomic int inj_code[TDM_NCCL_FN_MAX];
static _Atomic uint32_t inj_skip[TDM_NCCL_FN_MAX];

const char *tdm_nccl_fn_name(tdm_nccl_fn_t fn)
{
    return (unsigned)fn < TDM_NCCL_FN_MAX ? fn_names[fn] : "?";
}

void tdm_nccl_inject(tdm_nccl_fn_t fn, int code, uint32_t skip)
{
    if ((unsigned)fn >= TDM_NCCL_FN_MAX)
        return;
    atomic_store(&inj_skip[fn], skip);
    atomic_store(&inj_code[fn], code);
}

/* The injection point: an armed fn returns its code once its skips are used up (and disarms). */
static int injected(tdm_nccl_fn_t fn)
{
    int code = atomic_load(&inj_code[fn]);
    if (!code)
        return 0;
    uint32_t k = atomic_load(&inj_skip[fn]);
    if (k) {
        atomic_store(&inj_skip[fn], k - 1);
        return 0;
    }
    atomic_store(&inj_code[fn], 0);
    return code;
}

tdm_status_t tdm_nccl_status(int code)
{
    switch (code) {
    case ncclSuccess:
    case ncclInProgress:
        return TDM_OK;
    case ncclSystemError:
    case ncclRemoteError:
        return TDM_ERR_PEER;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return TDM_ERR_INVAL;
    default:
        return TDM_ERR_NCCL;
    }
}

/* One wrapped call: the injected code or the real result, logged and mapped. */
#define NCCL_CALL(n_rank, fn, call) nccl_result((n_rank), (fn), injected(fn) ?: (int)(call))

static tdm_status_t nccl_result(uint32_t rank, tdm_nccl_fn_t fn, int code)
{
    if (code == ncclSuccess || code == ncclInProgress)
        return TDM_OK;
    tdm_err(TDM_SUB_TP, "msg=\"NCCL call failed\" rank=%u fn=%s nccl_error=\"%s\" code=%d", rank,
            tdm_nccl_fn_name(fn), ncclGetErrorString((ncclResult_t)code), code);
    return tdm_nccl_status(code);
}

#define SET_ERR(...) snprintf(err, err_len, __VA_ARGS__)

tdm_status_t tdm_nccl_init(tdm_comm_t *boot, tdm_nccl_t **ret, char *err, size_t err_len)
{
    ncclUniqueId id;
    tdm_status_t st = TDM_OK, id_st = TDM_OK;
    int code;
    if (!boot || !ret) {
        SET_ERR("NCCL: no bootstrap communicator");
        return TDM_ERR_INVAL;
    }
    tdm_nccl_t *n = tdm_calloc(1, sizeof(*n));
    n->rank = boot->rank;
    n->size = boot->size;
    memset(&id, 0, sizeof(id));
    if (n->rank == 0) {
        code = injected(TDM_NCCL_GET_UNIQUE_ID) ?: (int)ncclGetUniqueId(&id);
        id_st = nccl_result(0, TDM_NCCL_GET_UNIQUE_ID, code);
        if (id_st != TDM_OK) {
            SET_ERR("NCCL rank 0: ncclGetUniqueId: %s", ncclGetErrorString((ncclResult_t)code));
            memset(&id, 0, sizeof(id)); /* the others see an all-zero id and give up too */
        }
    }
    /* through the group's shared-memory region: every rank takes part, also after a failure */
    st = tdm_comm_broadcast(boot, &id, sizeof(id), 0);
    if (st != TDM_OK) {
        SET_ERR("NCCL rank %u: unique id exchange: %s", n->rank, tdm_status_str(st));
        goto fail;
    }
    if (id_st != TDM_OK) {
        st = id_st;
        goto fail;
    }
    static const ncclUniqueId zero;
    if (!memcmp(&id, &zero, sizeof(id))) {
        SET_ERR("NCCL rank %u: rank 0 could not draw a unique id", n->rank);
        st = TDM_ERR_PEER;
        goto fail;
    }
    code = injected(TDM_NCCL_COMM_INIT_RANK)
               ?: (int)ncclCommInitRank(&n->comm, (int)n->size, id, (int)n->rank);
    st = nccl_result(n->rank, TDM_NCCL_COMM_INIT_RANK, code);
    if (st != TDM_OK) {
        n->comm = NULL;
        SET_ERR("NCCL rank %u of %u: ncclCommInitRank: %s", n->rank, n->size,
                ncclGetErrorString((ncclResult_t)code));
        goto fail;
    }
    tdm_info(TDM_SUB_TP, "msg=\"NCCL communicator ready\" rank=%u size=%u version=%d", n->rank,
             n->size, NCCL_VERSION_CODE);
    *ret = n;
    return TDM_OK;
fail:
    tdm_free(n);
    return st;
}

void tdm_nccl_free(tdm_nccl_t *n)
{
    if (!n)
        return;
    if (n->comm && !n->aborted)
        (void)ncclCommDestroy(n->comm);
    tdm_free(n);
}

uint32_t tdm_nccl_rank(const tdm_nccl_t *n)
{
    return n->rank;
}

tdm_status_t tdm_nccl_allreduce(tdm_nccl_t *n, float *buf, size_t count, void *stream)
{
    if (n->aborted)
        return TDM_ERR_ABORTED;
    return NCCL_CALL(
        n->rank, TDM_NCCL_ALL_REDUCE,
        ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, n->comm, (cudaStream_t)stream));
}

tdm_status_t tdm_nccl_allgather(tdm_nccl_t *n, const float *in, float *out, size_t count,
                                void *stream)
{
    if (n->aborted)
        return TDM_ERR_ABORTED;
    return NCCL_CALL(n->rank, TDM_NCCL_ALL_GATHER,
                     ncclAllGather(in, out, count, ncclFloat32, n->comm, (cudaStream_t)stream));
}

tdm_status_t tdm_nccl_broadcast(tdm_nccl_t *n, void *buf, size_t bytes, uint32_t root, void *stream)
{
    if (n->aborted)
        return TDM_ERR_ABORTED;
    if (root >= n->size)
        return TDM_ERR_INVAL;
    return NCCL_CALL(
        n->rank, TDM_NCCL_BROADCAST,
        ncclBroadcast(buf, buf, bytes, ncclUint8, (int)root, n->comm, (cudaStream_t)stream));
}

tdm_status_t tdm_nccl_check(tdm_nccl_t *n)
{
    if (n->aborted)
        return TDM_ERR_ABORTED;
    ncclResult_t async = ncclSuccess;
    int code = injected(TDM_NCCL_GET_ASYNC_ERROR);
    if (code) {
        async = (ncclResult_t)code;
    } else if (n->comm) {
        code = (int)ncclCommGetAsyncError(n->comm, &async);
        if (code != ncclSuccess)
            return nccl_result(n->rank, TDM_NCCL_GET_ASYNC_ERROR, code);
    }
    if (async == ncclSuccess || async == ncclInProgress)
        return TDM_OK;
    tdm_err(TDM_SUB_TP, "msg=\"NCCL asynchronous error\" rank=%u nccl_error=\"%s\" code=%d",
            n->rank, ncclGetErrorString(async), (int)async);
    return tdm_nccl_status((int)async);
}

void tdm_nccl_abort(tdm_nccl_t *n, const char *op, const char *why)
{
    if (n->aborted)
        return;
    n->aborted = 1;
    tdm_err(TDM_SUB_TP, "msg=\"NCCL communicator aborted\" rank=%u op=\"%s\" why=\"%s\"", n->rank,
            op ? op : "none", why ? why : "");
    int code = injected(TDM_NCCL_COMM_ABORT);
    if (!code && n->comm)
        code = (int)ncclCommAbort(n->comm);
    (void)nccl_result(n->rank, TDM_NCCL_COMM_ABORT, code);
}

int tdm_nccl_aborted(const tdm_nccl_t *n)
{
    return n->aborted;
}
