/*
 * engine_tp.cu — the tensor-parallel half of the CUDA engine (engine.h "Tensor parallelism"):
 * the caller's collectives enqueued on the engine's stream, each bracketed by its two I2 marks
 * (4-byte writes of 2k+1 and 2k+2 into a host-mapped word, folded into the kernels beside the
 * collective (engine_int.h); a mark with no kernel to carry it is a stream write of its own:
 * cuStreamWriteValue32 where the driver takes it on the page, else a one-thread kernel), the
 * logits slices laid out as the full vocab, and the wait through the coll (errors, abort and the
 * deadline polled by dataplane/tp).
 */
#include <cuda.h>

#include "engine_int.h"

extern "C" {
#include <tdm/log.h>
}

#define TDM_CUDA_CHECK(call)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            tdm_err(TDM_SUB_CUDA, "msg=\"%s failed\" err=\"%s\"", #call, cudaGetErrorString(e_));  \
            return TDM_ERR_CUDA;                                                                   \
        }                                                                                          \
    } while (0)

typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

tdm_status_t tdm_cuda_engine_tp_init(tdm_cuda_engine_t *e)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        e->write32 = fn;
    else
        (void)cudaGetLastError();
    return TDM_OK;
}

void tdm_cuda_engine_tp_free(tdm_cuda_engine_t *e)
{
    cudaFree(e->lg_local);
    cudaFree(e->lg_all);
    e->lg_local = e->lg_all = NULL;
}

void tdm_cuda_engine_drop_graphs(tdm_cuda_engine_t *e)
{
    for (int i = 0; i < MAX_BUCKETS; i++)
        for (int k = 0; k <= MAX_GRAPH_SPLITS; k++)
            if (e->graph[i][k]) {
                cudaGraphExecDestroy(e->graph[i][k]);
                e->graph[i][k] = NULL;
            }
}

tdm_status_t tdm_cuda_engine_set_coll(tdm_cuda_engine_t *e, const tdm_cuda_coll_t *coll)
{
    tdm_status_t st = TDM_OK;
    if (!e)
        return TDM_ERR_INVAL;
    if (!coll) {
        if (e->tp != 1)
            return TDM_ERR_INVAL;
        tdm_cuda_engine_drop_graphs(e);
        e->has_coll = 0;
        e->d_mark = NULL;
        return TDM_OK;
    }
    if (coll->size != e->tp || coll->rank != e->tp_rank || !coll->allreduce || !coll->allgather) {
        tdm_err(TDM_SUB_CUDA,
                "msg=\"collectives do not match the view\" coll_size=%u coll_rank=%u tp=%u "
                "rank=%u",
                coll->size, coll->rank, e->tp, e->tp_rank);
        return TDM_ERR_INVAL;
    }
    tdm_cuda_engine_drop_graphs(e);
    if (!e->lg_local) {
        const size_t blk = (size_t)e->o.max_logit_rows * e->vcap * sizeof(float);
        TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->lg_local, blk), st, out);
        TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->lg_all, blk * e->tp), st, out);
        TDM_CUDA_CHECK_GOTO(cudaMemsetAsync(e->lg_local, 0, blk, e->stream), st, out);
        TDM_CUDA_CHECK_GOTO(cudaMemsetAsync(e->lg_all, 0, blk * e->tp, e->stream), st, out);
    }
    e->d_mark = NULL;
    if (coll->mark) {
        void *dp = NULL;
        TDM_CUDA_CHECK_GOTO(cudaHostGetDevicePointer(&dp, coll->mark, 0), st, out);
        e->d_mark = (uint32_t *)dp;
        /* stream memory operations on this mapping: tried once, else the one-thread kernel
         * (seen on the H200 with host memory registered by cudaHostRegister: INVALID_VALUE) */
        if (e->write32) {
            CUresult r = ((write32_fn)e->write32)((CUstream)e->stream, (CUdeviceptr)e->d_mark, 0,
                                                  CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
            if (r != CUDA_SUCCESS) {
                tdm_info(TDM_SUB_CUDA,
                         "msg=\"I2 marks by a one-thread kernel (cuStreamWriteValue32 refused "
                         "the mapped page)\" cu_error=%d",
                         (int)r);
                e->write32 = NULL;
            }
        }
    }
    e->coll = *coll;
    e->has_coll = 1;
out:
    return st;
}

void tdm_cuda_engine_set_marks(tdm_cuda_engine_t *e, int on)
{
    if (e && e->marks != (on != 0)) {
        e->marks = on != 0;
        tdm_cuda_engine_drop_graphs(e);
    }
}

static tdm_status_t mark(tdm_cuda_engine_t *e, uint32_t v)
{
    if (!e->d_mark || !e->marks)
        return TDM_OK;
    if (e->write32) {
        CUresult r = ((write32_fn)e->write32)((CUstream)e->stream, (CUdeviceptr)e->d_mark, v,
                                              CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
        if (r != CUDA_SUCCESS) {
            tdm_err(TDM_SUB_CUDA, "msg=\"I2 mark write failed\" cu_error=%d", (int)r);
            return TDM_ERR_CUDA;
        }
        return TDM_OK;
    }
    return tdm_cuda_mark(e->d_mark, v, e->stream);
}

tdm_cuda_mark_t tdm_cuda_engine_mark_enter(tdm_cuda_engine_t *e)
{
    e->mk_entered = 1;
    e->mk_pend = 0; /* superseded: 2k + 1 counts every collective before k done */
    if (!e->d_mark || !e->marks)
        return tdm_cuda_mark_t{NULL, 0};
    return tdm_cuda_mark_t{e->d_mark, 2 * e->nmark + 1};
}

tdm_cuda_mark_t tdm_cuda_engine_mark_next(tdm_cuda_engine_t *e)
{
    const uint32_t v = e->mk_pend;
    e->mk_pend = 0;
    if (!v || !e->d_mark || !e->marks)
        return tdm_cuda_mark_t{NULL, 0};
    return tdm_cuda_mark_t{e->d_mark, v};
}

tdm_status_t tdm_cuda_engine_mark_flush(tdm_cuda_engine_t *e)
{
    const uint32_t v = e->mk_pend;
    e->mk_pend = 0;
    e->mk_entered = 0;
    return v ? mark(e, v) : TDM_OK;
}

/* Collective k's enter mark, unless the kernel before it carried it (which a leave mark still
 * pending needs no write of its own either: 2k + 1 supersedes it). */
static tdm_status_t enter(tdm_cuda_engine_t *e, uint32_t k)
{
    const int folded = e->mk_entered;
    e->mk_entered = 0;
    e->mk_pend = 0;
    return folded ? TDM_OK : mark(e, 2 * k + 1);
}

/* Collective k's leave mark: carried by the next kernel (leave_folds) or written now. */
static tdm_status_t leave(tdm_cuda_engine_t *e, uint32_t k, int leave_folds)
{
    if (leave_folds) {
        e->mk_pend = 2 * k + 2;
        return TDM_OK;
    }
    return mark(e, 2 * k + 2);
}

tdm_status_t tdm_cuda_engine_allreduce(tdm_cuda_engine_t *e, float *buf, size_t n, int leave_folds)
{
    const uint32_t k = e->nmark++;
    TDM_TRY(enter(e, k));
    TDM_TRY(e->coll.allreduce(e->coll.ctx, buf, n, e->stream));
    return leave(e, k, leave_folds);
}

tdm_status_t tdm_cuda_engine_gather_logits(tdm_cuda_engine_t *e, uint32_t m, int leave_folds)
{
    const uint32_t k = e->nmark++;
    const size_t blk = (size_t)m * e->vcap;
    TDM_TRY(enter(e, k));
    TDM_TRY(e->coll.allgather(e->coll.ctx, e->lg_local, e->lg_all, blk, e->stream));
    TDM_TRY(leave(e, k, leave_folds));
    /* rank q's block: m rows of its vr_q logits (row stride vr_q) at q * blk */
    for (uint32_t q = 0; q < e->tp; q++) {
        uint32_t lo, vn;
        tdm_model_vocab_range(e->V, e->tp, q, &lo, &vn);
        if (vn == 0)
            continue;
        TDM_CUDA_CHECK(cudaMemcpy2DAsync(e->logits + lo, (size_t)e->V * 4, e->lg_all + q * blk,
                                         (size_t)vn * 4, (size_t)vn * 4, m,
                                         cudaMemcpyDeviceToDevice, e->stream));
    }
    return TDM_OK;
}

void tdm_cuda_engine_plan_runs(tdm_cuda_engine_t *e, uint32_t n, uint32_t m)
{
    e->runs[0] = (tdm_cuda_coll_run_t){TDM_CUDA_COLL_ALLREDUCE, (e->tp > 1 ? 1u : 0u) + 2 * e->L,
                                       (uint64_t)n * e->d * 4};
    e->runs[1] = (tdm_cuda_coll_run_t){TDM_CUDA_COLL_ALLGATHER, 1, (uint64_t)m * e->vcap * 4};
    e->n_runs = 2;
}

tdm_status_t tdm_cuda_engine_wait(tdm_cuda_engine_t *e)
{
    if (e->has_coll && e->coll.sync)
        return e->coll.sync(e->coll.ctx, e->stream);
    TDM_CUDA_CHECK(cudaStreamSynchronize(e->stream));
    return TDM_OK;
}
