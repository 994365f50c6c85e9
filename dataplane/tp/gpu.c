/*
 * gpu.c — the collectives of a GPU rank (dataplane/tp/gpu.h): the host-staged backend, the NCCL
 * one through nccl.c, the step hooks of the recorder and the wait that never hangs.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/tp/gpu.h"
#include "dataplane/tp/nccl.h"

_Static_assert(sizeof(tdm_cuda_coll_run_t) == 16 && TDM_CUDA_COLL_RUNS == TDM_GPU_RUNS,
               "the engine's runs are the recorder's");
_Static_assert(TDM_CUDA_COLL_ALLREDUCE == TDM_COLL_ALLREDUCE &&
                   TDM_CUDA_COLL_ALLGATHER == TDM_COLL_ALLGATHER,
               "the engine's op codes are tdm_coll_op_t's");

/* A host function's argument: fixed per (op, n), so captured graphs keep valid pointers. */
typedef struct host_arg {
    struct tdm_gpu_comm *g;
    tdm_coll_op_t op;
    size_t n;
    struct host_arg *next;
} host_arg_t;

struct tdm_gpu_comm {
    tdm_gpu_comm_cfg_t cfg;
    tdm_cuda_coll_t coll;
    tdm_nccl_t *nccl;
    float *stage, *stage_out; /* pinned: n, size x n floats */
    host_arg_t *args;
    _Atomic int failed; /* tdm_status_t of the first failed host collective */
    void *registered;   /* the progress page, mapped for the device */
};

tdm_status_t tdm_gpu_comm_kind_parse(const char *s, tdm_gpu_comm_kind_t *ret)
{
    if (s && !strcmp(s, "host"))
        *ret = TDM_GPU_COMM_HOST;
    else if (s && !strcmp(s, "nccl"))
        *ret = TDM_GPU_COMM_NCCL;
    else
        return TDM_ERR_INVAL;
    return TDM_OK;
}

const char *tdm_gpu_comm_kind_name(tdm_gpu_comm_kind_t k)
{
    return k == TDM_GPU_COMM_NCCL ? "nccl" : "host";
}

tdm_gpu_comm_kind_t tdm_gpu_comm_kind_default(uint32_t tp)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    return n > 0 && (uint32_t)n >= tp ? TDM_GPU_COMM_NCCL : TDM_GPU_COMM_HOST;
}

tdm_status_t tdm_gpu_host_collective(tdm_comm_t *shm, tdm_coll_op_t op, float *buf, float *out,
                                     size_t n)
{
    if (op == TDM_COLL_ALLREDUCE)
        return shm->size == 1 ? TDM_OK : shm->ops->allreduce_f32(shm->impl, buf, n);
    if (op == TDM_COLL_ALLGATHER) {
        if (shm->size == 1) {
            memmove(out, buf, n * sizeof(float));
            return TDM_OK;
        }
        return shm->ops->allgather(shm->impl, buf, out, n * sizeof(float));
    }
    return TDM_ERR_INVAL;
}

static void CUDART_CB host_fn(void *p)
{
    host_arg_t *a = p;
    struct tdm_gpu_comm *g = a->g;
    if (atomic_load(&g->failed)) /* the step already failed: no further waits */
        return;
    tdm_status_t st = tdm_gpu_host_collective(g->cfg.tensor, a->op, g->stage, g->stage_out, a->n);
    if (st != TDM_OK) {
        int zero = 0;
        atomic_compare_exchange_strong(&g->failed, &zero, (int)st);
    }
}

static host_arg_t *arg_for(struct tdm_gpu_comm *g, tdm_coll_op_t op, size_t n)
{
    for (host_arg_t *a = g->args; a; a = a->next)
        if (a->op == op && a->n == n)
            return a;
    host_arg_t *a = tdm_calloc(1, sizeof(*a));
    *a = (host_arg_t){g, op, n, g->args};
    g->args = a;
    return a;
}

static tdm_status_t cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return TDM_OK;
    tdm_err(TDM_SUB_TP, "msg=\"%s failed\" err=\"%s\"", what, cudaGetErrorString(e));
    return TDM_ERR_CUDA;
}

static tdm_status_t staged(struct tdm_gpu_comm *g, tdm_coll_op_t op, const float *in, float *out,
                           size_t n, cudaStream_t s)
{
    const uint32_t N = g->cfg.tensor->size;
    if (n > g->cfg.max_floats) {
        tdm_err(TDM_SUB_TP, "msg=\"host-staged collective over its staging\" floats=%zu max=%zu", n,
                g->cfg.max_floats);
        return TDM_ERR_OVERFLOW;
    }
    TDM_TRY(cuda_ok(cudaMemcpyAsync(g->stage, in, n * sizeof(float), cudaMemcpyDeviceToHost, s),
                    "staging copy to the host"));
    TDM_TRY(cuda_ok(cudaLaunchHostFunc(s, host_fn, arg_for(g, op, n)), "cudaLaunchHostFunc"));
    if (op == TDM_COLL_ALLREDUCE)
        return cuda_ok(cudaMemcpyAsync(out, g->stage, n * sizeof(float), cudaMemcpyHostToDevice, s),
                       "staging copy to the device");
    return cuda_ok(cudaMemcpyAsync(out, g->stage_out, (size_t)N * n * sizeof(float),
                                   cudaMemcpyHostToDevice, s),
                   "staging copy to the device");
}

static tdm_status_t c_allreduce(void *ctx, float *buf, size_t n, void *stream)
{
    struct tdm_gpu_comm *g = ctx;
    if (g->nccl)
        return tdm_nccl_allreduce(g->nccl, buf, n, stream);
    return staged(g, TDM_COLL_ALLREDUCE, buf, buf, n, (cudaStream_t)stream);
}

static tdm_status_t c_allgather(void *ctx, const float *in, float *out, size_t n, void *stream)
{
    struct tdm_gpu_comm *g = ctx;
    if (g->nccl)
        return tdm_nccl_allgather(g->nccl, in, out, n, stream);
    return staged(g, TDM_COLL_ALLGATHER, in, out, n, (cudaStream_t)stream);
}

static void c_step_begin(void *ctx, const tdm_cuda_coll_run_t *runs, uint32_t n_runs)
{
    struct tdm_gpu_comm *g = ctx;
    tdm_gpu_step_t s;
    memset(&s, 0, sizeof(s));
    s.n_runs = n_runs < TDM_GPU_RUNS ? n_runs : TDM_GPU_RUNS;
    for (uint32_t i = 0; i < s.n_runs; i++) {
        s.run[i].op = runs[i].op;
        s.run[i].count = runs[i].count;
        s.run[i].bytes = runs[i].bytes;
    }
    atomic_store(&g->failed, 0);
    tdm_comm_gpu_begin(g->cfg.tensor, &s, tdm_time_mono_us());
}

static void c_step_end(void *ctx, tdm_status_t st)
{
    (void)st; /* what the device marked done is committed either way */
    tdm_comm_gpu_end(((struct tdm_gpu_comm *)ctx)->cfg.tensor);
}

/* The collective the rank is in now, from its own slot (the device's marks folded in). */
static void where(struct tdm_gpu_comm *g, char *buf, size_t len)
{
    tdm_comm_t *t = g->cfg.tensor;
    if (!t->page) {
        snprintf(buf, len, "unknown");
        return;
    }
    tdm_rank_record_t r;
    tdm_progress_read(&t->page->slot[t->rank], &r);
    if (r.in_coll_op != TDM_COLL_NONE)
        snprintf(buf, len, "%s seq %llu", tdm_coll_op_name((tdm_coll_op_t)r.in_coll_op),
                 (unsigned long long)r.in_coll_seq);
    else
        snprintf(buf, len, "none (coll_seq %llu)", (unsigned long long)r.coll_seq);
}

static void nap(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

/* The step's wait, from the loop: the stream, NCCL's asynchronous error, the group's abort word
 * and the deadline, polled with a backoff of 2 us to 1 ms. */
static tdm_status_t c_sync(void *ctx, void *stream)
{
    struct tdm_gpu_comm *g = ctx;
    tdm_comm_t *t = g->cfg.tensor;
    const uint64_t t0 = tdm_time_mono_us();
    uint64_t nap_us = 2, abort_at = 0;
    tdm_status_t st = TDM_OK;
    char op[96];
    for (;;) {
        cudaError_t q = cudaStreamQuery((cudaStream_t)stream);
        if (q == cudaSuccess)
            break;
        if (q != cudaErrorNotReady) {
            st = cuda_ok(q, "the step's stream");
            if (g->nccl) {
                where(g, op, sizeof(op));
                tdm_nccl_abort(g->nccl, op, "CUDA error in the step");
            }
            return st;
        }
        const uint64_t now = tdm_time_mono_us();
        const char *why = NULL;
        tdm_status_t why_st = TDM_OK;
        if (g->nccl && !tdm_nccl_aborted(g->nccl) && (why_st = tdm_nccl_check(g->nccl)) != TDM_OK)
            why = "NCCL asynchronous error";
        else if (!abort_at && t->page && atomic_load(&t->page->abort))
            why = "the group is aborting", why_st = TDM_ERR_ABORTED;
        else if (!abort_at && now - t0 > g->cfg.deadline_us)
            why = "no progress past 2 x --health-progress-timeout", why_st = TDM_ERR_TIMEOUT;
        if (why && !abort_at) {
            abort_at = now;
            st = why_st;
            where(g, op, sizeof(op));
            tdm_err(
                TDM_SUB_TP,
                "msg=\"GPU step aborted\" rank=%u backend=%s op=\"%s\" waited_s=%.1f why=\"%s\"",
                t->rank, g->nccl ? "nccl" : "host", op, (double)(now - t0) / 1e6, why);
            if (g->nccl)
                tdm_nccl_abort(g->nccl, op, why);
            else if (t->page) /* the shared-memory waits of every rank return ABORTED */
                atomic_store(&t->page->abort, 1);
        }
        /* after an abort the stream drains (the host waits and NCCL's kernels return); it gets
         * 10 s, then the step fails without it */
        if (abort_at && now - abort_at > 10000000u) {
            tdm_err(TDM_SUB_TP, "msg=\"GPU stream did not drain after the abort\" rank=%u",
                    t->rank);
            return st;
        }
        nap(nap_us);
        if (nap_us < 1000)
            nap_us *= 2;
    }
    if (st == TDM_OK)
        st = (tdm_status_t)atomic_load(&g->failed);
    return st;
}

#define SET_ERR(...) snprintf(err, err_len, __VA_ARGS__)

tdm_status_t tdm_gpu_comm_init(const tdm_gpu_comm_cfg_t *cfg, tdm_gpu_comm_t **ret, char *err,
                               size_t err_len)
{
    tdm_status_t st = TDM_OK;
    cudaError_t ce;
    if (!cfg || !cfg->tensor || !ret || cfg->max_floats == 0) {
        SET_ERR("GPU collectives: bad configuration");
        return TDM_ERR_INVAL;
    }
    struct tdm_gpu_comm *g = tdm_calloc(1, sizeof(*g));
    tdm_comm_t *t = cfg->tensor;
    g->cfg = *cfg;
    if (!g->cfg.deadline_us)
        g->cfg.deadline_us = 60000000u;
    if (t->page) { /* the marks land in the rank's slot of the shared page */
        ce = cudaHostRegister(t->page, tdm_progress_size(t->page->n_ranks),
                              cudaHostRegisterMapped | cudaHostRegisterPortable);
        if (ce != cudaSuccess) {
            SET_ERR("GPU collectives: mapping the progress page for the device: %s",
                    cudaGetErrorString(ce));
            st = TDM_ERR_CUDA;
            goto fail;
        }
        g->registered = t->page;
    }
    if (cfg->kind == TDM_GPU_COMM_NCCL) {
        if ((st = tdm_nccl_init(t, &g->nccl, err, err_len)) != TDM_OK)
            goto fail;
    } else {
        ce = cudaMallocHost((void **)&g->stage, cfg->max_floats * sizeof(float));
        if (ce == cudaSuccess)
            ce = cudaMallocHost((void **)&g->stage_out,
                                (size_t)t->size * cfg->max_floats * sizeof(float));
        if (ce != cudaSuccess) {
            SET_ERR("GPU collectives: pinned staging of %zu floats x %u ranks: %s", cfg->max_floats,
                    t->size, cudaGetErrorString(ce));
            st = TDM_ERR_NOMEM;
            goto fail;
        }
    }
    g->coll = (tdm_cuda_coll_t){.rank = t->rank,
                                .size = t->size,
                                .ctx = g,
                                .allreduce = c_allreduce,
                                .allgather = c_allgather,
                                .sync = c_sync,
                                .step_begin = c_step_begin,
                                .step_end = c_step_end,
                                .mark = tdm_comm_gpu_mark(t)};
    tdm_info(TDM_SUB_TP, "msg=\"GPU collectives ready\" rank=%u size=%u backend=%s marks=%s",
             t->rank, t->size, tdm_gpu_comm_kind_name(cfg->kind), t->page ? "page" : "none");
    *ret = g;
    return TDM_OK;
fail:
    tdm_gpu_comm_free(g);
    return st;
}

void tdm_gpu_comm_free(tdm_gpu_comm_t *g)
{
    if (!g)
        return;
    tdm_nccl_free(g->nccl);
    if (g->registered)
        (void)cudaHostUnregister(g->registered);
    cudaFreeHost(g->stage);
    cudaFreeHost(g->stage_out);
    while (g->args) {
        host_arg_t *a = g->args;
        g->args = a->next;
        tdm_free(a);
    }
    tdm_free(g);
}

const tdm_cuda_coll_t *tdm_gpu_comm_coll(tdm_gpu_comm_t *g)
{
    return &g->coll;
}
