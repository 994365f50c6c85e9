/*
 * exec.c — the executor of every rank (docs/serving.md "Plan"): one iteration is
 *   1. the plan header (48 bytes), broadcast from rank 0 on the plan channel;
 *   2. the payload (payload_bytes), broadcast likewise, validated by followers (hash, counts);
 *   3. for plans with PREV_TOKEN entries, rank 0's resolved ids (one u32 per such entry);
 *   4. the forward over the batch with the tensor collectives (the vocab-parallel embedding
 *      all-reduce, the row-parallel all-reduces, the vocab-parallel logits all-gather);
 *   5. on rank 0, one sample per LOGITS entry with the request's (seed, step) (--device cuda: on
 *      the device, kernels/cuda/sample.h, inside the forward's one wait; requests with penalties
 *      on the host from their copied logits rows);
 *   6. the iteration record (iter, path, plan_hash, counters) in the rank's progress slot (I2).
 * Rank 0 also publishes the iteration's queue counters at its start (before step 3's stall point
 * and the collectives), so a loop stuck inside its first busy iteration reads as holding work;
 * with them how many requests the scheduler had taken from its inbox, so requests that arrive
 * while the loop hangs between iterations count too (tdm_progress_queued).
 * Followers keep no sequence state; the collective sequence of an iteration is a pure function
 * of its plan (I1). Fault points (fault.h) are checked here: stall_loop before the iteration,
 * rank_idle_path for the forward, rank_skip_collective through the tensor comm's skip hook.
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/sched/sched_int.h"
#include "kernels/cuda/module.h"
#ifdef TDM_SCHED_GPU_TP
#include "dataplane/tp/gpu.h"
#endif

struct tdm_exec {
    tdm_exec_cfg_t cfg;
    tdm_model_view_t view;
    int have_view, have_be;
    tdm_backend_t be;
    tdm_kv_pool_t *pool;
    tdm_graph_t *graph;
    tdm_hicache_t *hc;           /* HiCache host tier (NULL = off) */
    const tdm_cuda_module_t *cu; /* --device cuda: the engine's table (module.h) */
    tdm_exec_cuda_t *cuda;       /* --device cuda: the forward; graph and be unused */
#ifdef TDM_SCHED_GPU_TP
    tdm_gpu_comm_t *gpu; /* --device cuda at tp > 1 (or TDM_TP_BACKEND set): the collectives */
#endif
    uint32_t vocab;
    float *logits;       /* max_seqs rows */
    tdm_graph_seq_t *gs; /* max_seqs */
    int32_t *ids;        /* max_tokens */
    uint32_t *prev;      /* resolved PREV_TOKEN ids, max_seqs */
    int32_t *last_tok;   /* rank 0: the last token sampled per slot */
    uint8_t *rx;         /* followers: received plan */
    size_t rx_cap;
    uint32_t *tier; /* HiCache at TP > 1: the plan's tier segment (sent or received) */
    uint32_t tier_cap;
    tdm_sample_scratch_t scratch;
    uint64_t iter_seen;
    /* --device cuda: sampling on the device (kernels/cuda/sample.h), max_seqs rows each; with
     * TDM_CUDA_HOST_SAMPLE=1 (a measurement knob, docs/cuda.md) or a module lacking it, the host
     * samples every row from copied logits */
    int dev_sample;
    tdm_cuda_sample_req_t *sreq;
    tdm_cuda_sample_out_t *sout;
    /* The overlap loop's pipelined lead (tdm_exec_lead_launch): at most two iterations, one
     * completed or running, the other launched behind it. fl: the older one (-1: none). */
    int can_pipe;
    struct pipe_iter {
        tdm_exec_iter_t *it;
        int dev;       /* 1: running on the device (finish pending); 0: already ran */
        int slot;      /* the sampler/engine slot of a device iteration */
        uint32_t n;    /* rows */
        uint8_t *skip; /* per row: no sample asked at launch */
    } pi[2];
    int fl;
    uint32_t *pend;    /* per slot: 1 + the row of its device-sampled token in pi[fl] (0: none) */
    uint32_t *pend_nx; /* the same for the iteration being launched */
    uint32_t *fix_dst, *fix_src;
    tdm_cuda_sample_out_t *emu_out[2]; /* TDM_CPU_PIPELINE: each slot's deferred samples */
    int emu_slot;
};

static tdm_status_t graph_allreduce(void *ctx, float *buf, size_t n)
{
    return tdm_comm_allreduce_f32(ctx, buf, n);
}

static tdm_status_t graph_allgather(void *ctx, const float *in, float *out, size_t n)
{
    return tdm_comm_allgather(ctx, in, out, n * sizeof(float));
}

static int skip_fault(void *ctx, tdm_coll_op_t op, uint64_t seq)
{
    tdm_exec_t *x = ctx;
    (void)op;
    (void)seq;
    return tdm_fault_fire(x->cfg.faults, TDM_FAULT_RANK_SKIP_COLLECTIVE, x->cfg.rank, x->iter_seen,
                          NULL);
}

static int hicache_fault(void *ctx, tdm_hicache_fault_t f, uint32_t *ret_ms)
{
    tdm_exec_t *x = ctx;
    tdm_fault_point_t p =
        f == TDM_HICACHE_FAULT_SLOW_COPY ? TDM_FAULT_SLOW_HOST_COPY : TDM_FAULT_FLIP_HOST_BITS;
    return tdm_fault_fire(x->cfg.faults, p, x->cfg.rank,
                          __atomic_load_n(&x->iter_seen, __ATOMIC_RELAXED), ret_ms);
}

static int gate_skip(void *ctx, uint64_t iter, uint32_t layer)
{
    tdm_exec_t *x = ctx;
    (void)layer;
    return tdm_fault_fire(x->cfg.faults, TDM_FAULT_SKIP_LAYER_GATE, x->cfg.rank, iter, NULL);
}

#define SET_ERR(...) snprintf(err, err_len, __VA_ARGS__)

/* --device cuda: the GPU collectives (dataplane/tp/gpu.h) at tp > 1, or at tp 1 when
 * TDM_TP_BACKEND names a backend (the one-rank NCCL communicator). TDM_TP_BACKEND "nccl" or
 * "host"; unset: NCCL when every rank has a GPU of its own, else host-staged. */
static tdm_status_t gpu_collectives(tdm_exec_t *x, const tdm_model_config_t *mc, char *err,
                                    size_t err_len)
{
    const char *env = getenv("TDM_TP_BACKEND");
    if (x->cfg.tp_size == 1 && (!env || !env[0]))
        return TDM_OK;
#ifdef TDM_SCHED_GPU_TP
    tdm_gpu_comm_cfg_t gc = {.tensor = x->cfg.tensor, .deadline_us = x->cfg.gpu_deadline_us};
    if (env && env[0]) {
        if (tdm_gpu_comm_kind_parse(env, &gc.kind) != TDM_OK) {
            SET_ERR("TDM_TP_BACKEND=%s: expected nccl or host", env);
            return TDM_ERR_INVAL;
        }
    } else {
        gc.kind = tdm_gpu_comm_kind_default(x->cfg.tp_size);
    }
    const size_t vcap = ((size_t)mc->vocab_size + x->cfg.tp_size - 1) / x->cfg.tp_size;
    gc.max_floats = (size_t)x->cfg.max_tokens * mc->hidden_size;
    if ((size_t)x->cfg.max_seqs * vcap > gc.max_floats)
        gc.max_floats = (size_t)x->cfg.max_seqs * vcap;
    TDM_TRY(tdm_gpu_comm_init(&gc, &x->gpu, err, err_len));
    if (!x->cu->exec_set_coll) {
        SET_ERR("the CUDA module has no tensor-parallel entry (an older backend-cuda.so)");
        return TDM_ERR_UNSUPPORTED;
    }
    tdm_status_t st = x->cu->exec_set_coll(x->cuda, tdm_gpu_comm_coll(x->gpu));
    if (st != TDM_OK)
        SET_ERR("CUDA engine: attaching the %s collectives (rank %u of %u): %s",
                tdm_gpu_comm_kind_name(gc.kind), x->cfg.rank, x->cfg.tp_size, tdm_status_str(st));
    return st;
#else
    (void)mc;
    SET_ERR("--device cuda at --tp-size %u (or TDM_TP_BACKEND) needs the GPU collectives (NCCL "
            "and the CUDA runtime); this build has none",
            x->cfg.tp_size);
    return TDM_ERR_UNSUPPORTED;
#endif
}

tdm_status_t tdm_exec_init(const tdm_exec_cfg_t *cfg, tdm_exec_t **ret, char *err, size_t err_len)
{
    tdm_status_t st;
    tdm_kv_layout_t layout;
    if (!cfg || !cfg->model || !cfg->tensor || !cfg->plan || cfg->max_seqs == 0 ||
        cfg->max_tokens < cfg->max_seqs || cfg->num_pages == 0) {
        SET_ERR("executor: bad configuration");
        return TDM_ERR_INVAL;
    }
    tdm_exec_t *x = tdm_calloc(1, sizeof(*x));
    x->cfg = *cfg;
    const tdm_model_config_t *mc = tdm_model_config(cfg->model);
    x->vocab = mc->vocab_size;
    TDM_CHECK_GOTO(tdm_model_view_init(cfg->model, cfg->tp_size, cfg->rank, &x->view, err, err_len),
                   st, err_free);
    x->have_view = 1;
    if (cfg->device_cuda) {
        /* weights and the KV pool on the device (pool sized from --mem-fraction-static, capped
         * at cfg->num_pages); the scheduler's page allocator over exactly the engine's pages.
         * Built with the CUDA runtime the engine is linked in; without it, it is backend-cuda.so
         * (the tandem-cuda package), loaded here and only here. */
#ifdef TDM_HAVE_CUDA_RT
        x->cu = tdm_cuda_module_v1();
#else
        st = tdm_cuda_module_load(cfg->cuda_backend, &x->cu, err, err_len);
        if (st != TDM_OK)
            goto err_free;
#endif
        tdm_exec_cuda_cfg_t cc = {&x->view,       cfg->kv_dtype,           cfg->page_size,
                                  cfg->max_seqs,  cfg->max_tokens,         cfg->max_context,
                                  cfg->num_pages, cfg->mem_fraction_static};
        st = x->cu->exec_init(&cc, &x->cuda, err, err_len);
        if (st != TDM_OK)
            goto err_free;
        if ((st = gpu_collectives(x, mc, err, err_len)) != TDM_OK)
            goto err_free;
        x->cfg.num_pages = x->cu->exec_num_pages(x->cuda);
        st = tdm_kv_pool_init_pages(x->cu->exec_layout(x->cuda), x->cfg.num_pages, &x->pool);
        if (st != TDM_OK) {
            SET_ERR("KV page allocator of %u pages: %s", x->cfg.num_pages, tdm_status_str(st));
            goto err_free;
        }
        if (cfg->hicache) {
            /* the tier over the engine's device pool: pinned host pool, copy stream, one event
             * per (load, layer) that attention waits on through the same gate
             * (kernels/cuda/hicache.h); at TP > 1 over this rank's KV-head shard, rank 0's tier
             * deciding and journaling, the followers' replaying it as on the CPU
             * (docs/design.md §I1) */
            tdm_hicache_cfg_t hcfg = *cfg->hicache;
            hcfg.layout = x->cu->exec_layout(x->cuda);
            hcfg.device_pages = x->cfg.num_pages;
            hcfg.dev = x->cu->hicache_dev();
            hcfg.fault = cfg->faults ? hicache_fault : NULL;
            hcfg.journal = cfg->tp_size > 1 && cfg->rank == 0;
            hcfg.replica = cfg->rank > 0;
            hcfg.rank = cfg->rank;
            hcfg.rank = cfg->rank;
            hcfg.fault_ctx = x;
            st = tdm_hicache_init(&hcfg, x->cu->exec_kv(x->cuda), &x->hc, err, err_len);
            if (st != TDM_OK)
                goto err_free;
            if (cfg->faults)
                tdm_kv_gate_set_skip(tdm_hicache_gate(x->hc), gate_skip, x);
            st = x->cu->exec_use_gate(x->cuda, tdm_hicache_gate(x->hc));
            if (st != TDM_OK) {
                SET_ERR("HiCache gate on the CUDA engine: %s", tdm_status_str(st));
                goto err_free;
            }
        }
        goto buffers;
    }
    st = tdm_backend_cpu_init(cfg->threads, &x->be);
    if (st != TDM_OK) {
        SET_ERR("CPU backend: %s", tdm_status_str(st));
        goto err_free;
    }
    x->have_be = 1;
    st = tdm_kv_layout_init(mc, cfg->kv_dtype, cfg->page_size, cfg->tp_size, cfg->rank, &layout);
    if (st != TDM_OK) {
        SET_ERR("KV layout (dtype %s, page size %u, tp %u): %s", tdm_dtype_name(cfg->kv_dtype),
                cfg->page_size, cfg->tp_size, tdm_status_str(st));
        goto err_free;
    }
    /* PD at TP > 1: the pool lives in memory rank 0's transfer engine maps (cfg->kv_mem) */
    st = cfg->kv_mem ? tdm_kv_pool_init_mem(&layout, cfg->num_pages, cfg->kv_mem, cfg->kv_mem_bytes,
                                            &x->pool)
                     : tdm_kv_pool_init(&layout, cfg->num_pages, &x->pool);
    if (st != TDM_OK) {
        SET_ERR("KV pool of %u pages: %s", cfg->num_pages, tdm_status_str(st));
        goto err_free;
    }
    tdm_graph_coll_t coll = {cfg->tensor, graph_allreduce, graph_allgather};
    st = tdm_graph_init(&x->view, tdm_kv_pool_buffers(x->pool), &x->be,
                        cfg->tp_size > 1 ? &coll : NULL, cfg->max_tokens, &x->graph);
    if (st != TDM_OK) {
        SET_ERR("forward graph for %u rows: %s", cfg->max_tokens, tdm_status_str(st));
        goto err_free;
    }
    if (cfg->hicache) {
        tdm_hicache_cfg_t hcfg = *cfg->hicache;
        hcfg.fault = cfg->faults ? hicache_fault : NULL;
        /* TP > 1: rank 0's tier decides and journals; followers replay it (docs/design.md §I1) */
        hcfg.journal = cfg->tp_size > 1 && cfg->rank == 0;
        hcfg.replica = cfg->rank > 0;
        hcfg.rank = cfg->rank;
        hcfg.fault_ctx = x;
        st = tdm_hicache_init(&hcfg, tdm_kv_pool_buffers(x->pool), &x->hc, err, err_len);
        if (st != TDM_OK)
            goto err_free;
        if (cfg->faults)
            tdm_kv_gate_set_skip(tdm_hicache_gate(x->hc), gate_skip, x);
        st = tdm_graph_use_gate(x->graph, tdm_hicache_gate(x->hc));
        if (st != TDM_OK) {
            SET_ERR("HiCache gate: %s", tdm_status_str(st));
            goto err_free;
        }
    }
buffers:
    /* the page allocator's order (a measurement knob, docs/contracts.md §h): every rank of a
     * group reads the same environment, so their page tables stay the same */
    const char *ao = getenv("TDM_KV_ALLOC");
    if (ao && *ao) {
        tdm_kv_alloc_order_t order;
        if (tdm_kv_alloc_order_parse(ao, &order) != TDM_OK) {
            SET_ERR("TDM_KV_ALLOC=%s: expected lifo or lowest", ao);
            st = TDM_ERR_INVAL;
            goto err_free;
        }
        (void)tdm_kv_pool_set_order(x->pool, order);
    }
    cfg->tensor->skip_fault = cfg->faults ? skip_fault : NULL;
    cfg->tensor->fault_ctx = x;
    x->logits = malloc((size_t)cfg->max_seqs * x->vocab * sizeof(float));
    if (!x->logits) {
        SET_ERR("executor: no memory for %u rows of logits", cfg->max_seqs);
        st = TDM_ERR_NOMEM;
        goto err_free;
    }
    x->gs = tdm_calloc(cfg->max_seqs, sizeof(*x->gs));
    x->ids = tdm_calloc(cfg->max_tokens, sizeof(*x->ids));
    x->prev = tdm_calloc(cfg->max_seqs, sizeof(*x->prev));
    x->last_tok = tdm_calloc(cfg->max_seqs, sizeof(*x->last_tok));
    if (x->cuda &&
        x->cu->size >=
            offsetof(tdm_cuda_module_t, exec_forward_sample) + sizeof(x->cu->exec_forward_sample) &&
        x->cu->exec_forward_sample) {
        const char *hs = getenv("TDM_CUDA_HOST_SAMPLE");
        x->dev_sample = !(hs && !strcmp(hs, "1"));
        x->sreq = tdm_calloc(cfg->max_seqs, sizeof(*x->sreq));
        x->sout = tdm_calloc(cfg->max_seqs, sizeof(*x->sout));
    }
    x->fl = -1;
    /* The overlap loop pipelined (tdm_exec_lead_launch): on the GPU unless TDM_CUDA_PIPELINE=0
     * (measured there: docs/cuda.md); on the CPU with TDM_CPU_PIPELINE=1,
     * the same protocol run synchronously (samples deferred one step, PREV_TOKEN ids taken from
     * the deferred outputs): no speed, but the loop's state machine under test in CI */
    const char *gpipe = getenv("TDM_CUDA_PIPELINE"), *cpipe = getenv("TDM_CPU_PIPELINE");
    const int gpipe_off = gpipe && !strcmp(gpipe, "0");
    int gpu_pipe = x->dev_sample &&
#ifdef TDM_SCHED_GPU_TP
                   !x->gpu &&
#endif
                   x->cu->size >= offsetof(tdm_cuda_module_t, exec_finish_sample) +
                                      sizeof(x->cu->exec_finish_sample) &&
                   x->cu->exec_launch_sample && x->cu->exec_finish_sample && !gpipe_off;
    int cpu_pipe = !x->cuda && cpipe && !strcmp(cpipe, "1");
    if ((gpu_pipe || cpu_pipe) && cfg->rank == 0 && cfg->tp_size == 1 && !x->hc) {
        x->can_pipe = 1;
        for (int k = 0; k < 2; k++) {
            x->pi[k].skip = tdm_calloc(cfg->max_seqs, 1);
            if (cpu_pipe)
                x->emu_out[k] = tdm_calloc(cfg->max_seqs, sizeof(*x->emu_out[k]));
        }
        if (cpu_pipe) {
            x->sreq = tdm_calloc(cfg->max_seqs, sizeof(*x->sreq));
            x->sout = tdm_calloc(cfg->max_seqs, sizeof(*x->sout));
        }
        x->pend = tdm_calloc(cfg->max_seqs, sizeof(uint32_t));
        x->pend_nx = tdm_calloc(cfg->max_seqs, sizeof(uint32_t));
        x->fix_dst = tdm_calloc(cfg->max_seqs, sizeof(uint32_t));
        x->fix_src = tdm_calloc(cfg->max_seqs, sizeof(uint32_t));
    } else if (cfg->rank == 0 && ((gpipe && !strcmp(gpipe, "1")) ||
                                  (cpipe && !strcmp(cpipe, "1")) || (x->cuda && !gpipe_off))) {
        /* asked for (or the GPU default) and not possible here: say why, not silently */
        tdm_info(TDM_SUB_SCHED, "msg=\"pipelined overlap loop not used\" why=\"%s\"",
                 gpipe && !strcmp(gpipe, "1") && !x->cuda ? "TDM_CUDA_PIPELINE is for --device cuda"
                 : cpipe && !strcmp(cpipe, "1") && x->cuda ? "TDM_CPU_PIPELINE is for --device cpu"
                 : cfg->tp_size != 1                       ? "tensor parallel (tp > 1)"
                 : x->hc                                   ? "a HiCache host tier"
                 : !x->dev_sample ? "host sampling (TDM_CUDA_HOST_SAMPLE=1 or an old module)"
                                  : "the collectives are attached (TDM_TP_BACKEND)");
    }
    if (cfg->rank == 0 && tdm_sample_scratch_init(&x->scratch, x->vocab) != TDM_OK) {
        SET_ERR("executor: no memory for the sampler");
        st = TDM_ERR_NOMEM;
        goto err_free;
    }
    *ret = x;
    return TDM_OK;
err_free:
    tdm_exec_free(x);
    return st;
}

void tdm_exec_free(tdm_exec_t *x)
{
    if (!x)
        return;
    if (x->cfg.tensor) {
        x->cfg.tensor->skip_fault = NULL;
        x->cfg.tensor->fault_ctx = NULL;
    }
    tdm_graph_free(x->graph);
    tdm_hicache_free(x->hc); /* its copy thread writes the pool: gone before the pool */
    if (x->cuda)
        x->cu->exec_free(x->cuda);
#ifdef TDM_SCHED_GPU_TP
    tdm_gpu_comm_free(x->gpu); /* after the engine: its graphs hold the host functions' args */
#endif
    tdm_kv_pool_free(x->pool);
    if (x->have_be)
        tdm_backend_cpu_free(&x->be);
    if (x->have_view)
        tdm_model_view_free(&x->view);
    tdm_sample_scratch_free(&x->scratch);
    tdm_free(x->sreq);
    tdm_free(x->sout);
    for (int k = 0; k < 2; k++) {
        tdm_free(x->pi[k].skip);
        tdm_free(x->emu_out[k]);
    }
    tdm_free(x->pend);
    tdm_free(x->pend_nx);
    tdm_free(x->fix_dst);
    tdm_free(x->fix_src);
    free(x->logits);
    tdm_free(x->gs);
    tdm_free(x->ids);
    tdm_free(x->prev);
    tdm_free(x->last_tok);
    tdm_free(x->rx);
    tdm_free(x->tier);
    tdm_free(x);
}

tdm_kv_pool_t *tdm_exec_pool(tdm_exec_t *x)
{
    return x->pool;
}

uint64_t tdm_exec_weight_bytes(const tdm_exec_t *x)
{
    if (x->cuda)
        return x->cu->exec_weight_bytes(x->cuda);
    return x->view.resident_bytes;
}

uint64_t tdm_exec_kv_bytes(const tdm_exec_t *x)
{
    uint64_t b = 0;
    (void)tdm_kv_layout_pool_bytes(tdm_kv_pool_layout(x->pool), x->cfg.num_pages, &b);
    return b;
}

const tdm_kv_buffers_t *tdm_exec_kv_device(const tdm_exec_t *x)
{
    return x->cuda ? x->cu->exec_kv(x->cuda) : NULL;
}

const tdm_exec_cfg_t *tdm_exec_cfg(const tdm_exec_t *x)
{
    return &x->cfg;
}

tdm_hicache_t *tdm_exec_hicache(tdm_exec_t *x)
{
    return x->hc;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void tier_room(tdm_exec_t *x, uint32_t words)
{
    if (words > x->tier_cap) {
        x->tier = tdm_realloc(x->tier, (size_t)words * sizeof(uint32_t));
        x->tier_cap = words;
    }
}

/* HiCache at TP > 1, after a forward that reads host-tier loads (need > 0): followers retire
 * their loads up to `need` and every rank's first verification failure is gathered, so rank 0
 * knows of a follower's bad shard before it sends a token computed from it. */
static tdm_status_t tier_gather(tdm_exec_t *x, uint64_t need, tdm_exec_iter_t *it)
{
    enum { W = 5 }; /* ticket lo, ticket hi, page, layer, sub-buffer */
    uint32_t mine[W] = {0, 0, 0, 0, 0}, page = 0, layer = 0, sub = 0;
    uint64_t bad = 0;
    if (x->cfg.rank > 0)
        tdm_hicache_replica_retire(x->hc, need, &bad, &page, &layer, &sub);
    mine[0] = (uint32_t)bad;
    mine[1] = (uint32_t)(bad >> 32);
    mine[2] = page;
    mine[3] = layer;
    mine[4] = sub;
    if (bad)
        tdm_err(TDM_SUB_SCHED,
                "msg=\"HiCache load failed verification\" rank=%u ticket=%llu page=%u layer=%u "
                "sub=%s",
                x->cfg.rank, (unsigned long long)bad, page, layer,
                tdm_kv_sub_name((tdm_kv_sub_t)sub));
    uint32_t *all = tdm_calloc((size_t)x->cfg.tp_size * W, sizeof(uint32_t));
    tdm_status_t st = tdm_comm_allgather(x->cfg.tensor, mine, all, sizeof(mine));
    for (uint32_t r = 1; st == TDM_OK && it && r < x->cfg.tp_size && !it->tier_bad_ticket; r++) {
        uint64_t t = all[r * W] | (uint64_t)all[r * W + 1] << 32;
        if (!t)
            continue;
        it->tier_bad_ticket = t;
        it->tier_bad_rank = r;
        it->tier_bad_page = all[r * W + 2];
        it->tier_bad_layer = all[r * W + 3];
        it->tier_bad_sub = all[r * W + 4];
    }
    tdm_free(all);
    return st;
}

/* The device sampler's request for one plan entry (rank 0's request r; NULL on followers, whose
 * rows are never sampled): rows without LOGITS, or past max_new, are skipped (run_plan answers
 * them as the host path does); requests with penalties go to the host sampler, which needs their
 * history. */
static void dev_sample_req(const tdm_sreq_t *r, const tdm_plan_entry_t *e, uint32_t pending,
                           tdm_cuda_sample_req_t *q)
{
    memset(q, 0, sizeof(*q));
    if (!r || !(e->flags & TDM_PLAN_LOGITS) || r->n_sampled + pending >= r->max_new) {
        q->skip = 1;
        return;
    }
    const tdm_sample_params_t *p = &r->sp;
    q->temperature = p->temperature;
    q->top_p = p->top_p;
    q->min_p = p->min_p;
    q->top_k = p->top_k;
    q->seed = p->seed;
    q->step = r->n_sampled + pending; /* pending: sampled by the iteration still running */
    q->logprobs = p->logprobs;
    q->top_logprobs = p->top_logprobs;
    q->host = p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
              p->frequency_penalty != 0.0f;
}

/* Steps 3-6 on a validated plan; `reqs` is NULL on followers; need: the newest HiCache load
 * ticket the batch reads (0 = none). */
static tdm_status_t run_plan(tdm_exec_t *x, const tdm_plan_hdr_t *h, const uint8_t *payload,
                             size_t plen, tdm_exec_iter_t *it, uint64_t need)
{
    tdm_status_t st;
    uint32_t n_prev = 0, n = 0, tok_off = 0, rows = 0, dur = 0;
    size_t off = 0;
    tdm_plan_entry_t e;
    int lead = x->cfg.rank == 0;

    __atomic_store_n(&x->iter_seen, h->iter, __ATOMIC_RELAXED);
    /* the queues this iteration serves are visible before anything in it can hang */
    if (lead && it)
        tdm_comm_record_pending(x->cfg.tensor, it->waiting, it->running, it->taken);
    if (tdm_fault_fire(x->cfg.faults, TDM_FAULT_STALL_LOOP, x->cfg.rank, h->iter, &dur))
        sleep_ms(dur);
    if (h->kind == TDM_PLAN_BATCH &&
        (h->n_seqs > x->cfg.max_seqs || h->n_tokens > x->cfg.max_tokens)) {
        tdm_err(TDM_SUB_SCHED,
                "msg=\"plan over the executor's bounds\" iter=%llu seqs=%u tokens=%u",
                (unsigned long long)h->iter, h->n_seqs, h->n_tokens);
        return TDM_ERR_RANGE;
    }
    /* PREV_TOKEN: rank 0 resolves from what it sampled last iteration, then everyone gets it */
    while (h->kind == TDM_PLAN_BATCH && tdm_plan_next(payload, plen, &off, &e) == TDM_OK) {
        if (e.slot >= x->cfg.max_seqs) {
            tdm_err(TDM_SUB_SCHED, "msg=\"plan slot out of range\" iter=%llu slot=%u",
                    (unsigned long long)h->iter, e.slot);
            return TDM_ERR_RANGE;
        }
        if (e.flags & TDM_PLAN_PREV_TOKEN) {
            if (lead)
                x->prev[n_prev] = (uint32_t)x->last_tok[e.slot];
            n_prev++;
        }
    }
    if (n_prev)
        TDM_TRY(tdm_comm_broadcast(x->cfg.plan, x->prev, n_prev * sizeof(uint32_t), 0));

    tdm_path_t path = h->kind == TDM_PLAN_BATCH ? TDM_PATH_BATCH : TDM_PATH_IDLE;
    if (path == TDM_PATH_BATCH && !lead &&
        tdm_fault_fire(x->cfg.faults, TDM_FAULT_RANK_IDLE_PATH, x->cfg.rank, h->iter, NULL))
        path = TDM_PATH_IDLE;
    if (path == TDM_PATH_BATCH) {
        off = 0;
        n_prev = 0;
        while (tdm_plan_next(payload, plen, &off, &e) == TDM_OK) {
            for (uint32_t i = 0; i < e.n_tokens; i++)
                x->ids[tok_off + i] = (int32_t)e.tokens[i];
            if (e.flags & TDM_PLAN_PREV_TOKEN)
                x->ids[tok_off] = (int32_t)x->prev[n_prev++];
            x->gs[n] =
                (tdm_graph_seq_t){x->ids + tok_off, e.n_tokens, e.pos0, e.pages, e.n_pages, 0};
            if (x->dev_sample)
                dev_sample_req(lead ? it->reqs[n] : NULL, &e, 0, &x->sreq[n]);
            tok_off += e.n_tokens;
            n++;
        }
        uint64_t poison0 = 0, bypass0 = 0;
        if (x->hc) {
            tdm_kv_batch_t kb = {h->iter, need};
            if (x->cuda)
                x->cu->exec_set_batch(x->cuda, &kb);
            else
                tdm_graph_set_batch(x->graph, &kb);
            poison0 = tdm_kv_gate_poison_reads(tdm_hicache_gate(x->hc));
            bypass0 = tdm_kv_gate_bypasses(tdm_hicache_gate(x->hc));
        }
        if (x->dev_sample)
            st = x->cu->exec_forward_sample(x->cuda, x->gs, n, x->sreq, x->logits, x->sout, &rows);
        else if (x->cuda)
            st = x->cu->exec_forward(x->cuda, x->gs, n, x->logits, x->cfg.max_seqs, &rows);
        else
            st = tdm_graph_forward(x->graph, x->gs, n, x->logits, x->cfg.max_seqs, &rows);
        if (x->hc && it) {
            it->poison_reads = tdm_kv_gate_poison_reads(tdm_hicache_gate(x->hc)) - poison0;
            it->gate_bypasses = tdm_kv_gate_bypasses(tdm_hicache_gate(x->hc)) - bypass0;
        }
        if (st != TDM_OK) {
            tdm_err(TDM_SUB_SCHED, "msg=\"forward failed\" rank=%u iter=%llu status=%s",
                    x->cfg.rank, (unsigned long long)h->iter, tdm_status_name(st));
            return st;
        }
        if (rows != n)
            return TDM_ERR_STATE;
    }
    if (h->kind == TDM_PLAN_BATCH && h->tier_words && need)
        TDM_TRY(tier_gather(x, need, it));
    if (lead && path == TDM_PATH_BATCH) {
        off = 0;
        uint32_t i = 0;
        it->n_results = 0;
        while (tdm_plan_next(payload, plen, &off, &e) == TDM_OK) {
            tdm_sreq_t *r = it->reqs[i];
            const float *row = x->logits + (size_t)i * x->vocab;
            i++;
            if (!(e.flags & TDM_PLAN_LOGITS))
                continue;
            tdm_exec_result_t *res = &it->results[it->n_results++];
            res->req = r;
            tdm_sample_history_t hist = {r->tokens, r->n_prompt, r->tokens + r->n_prompt,
                                         r->n_sampled};
            if (r->n_sampled >= r->max_new) {
                res->status = TDM_ERR_STATE;
            } else if (x->dev_sample && !x->sreq[i - 1].host) {
                res->status = x->sout[i - 1].status;
                res->sample = x->sout[i - 1].r;
            } else {
                res->status = tdm_sample_token(&r->sp, row, x->vocab, &hist, r->n_sampled,
                                               &x->scratch, &res->sample);
            }
            if (res->status == TDM_OK) {
                res->token = res->sample.id;
                r->tokens[r->n_prompt + r->n_sampled++] = res->token;
                x->last_tok[e.slot] = res->token;
            }
        }
    }
    tdm_comm_record_iter(x->cfg.tensor, h->iter, path, h->plan_hash, h->n_seqs,
                         it ? it->waiting : 0, it ? it->running : 0, tdm_time_mono_us());
    return TDM_OK;
}

/* Steps 1-3's sending half (rank 0): the header, the payload and the tier segment; *h: the
 * header as run. */
static tdm_status_t lead_send(tdm_exec_t *x, tdm_exec_iter_t *it, tdm_plan_hdr_t *h)
{
    uint8_t hdr[TDM_PLAN_HDR_BYTES];
    uint32_t tw = 0;
    memcpy(hdr, it->plan, TDM_PLAN_HDR_BYTES);
    it->n_results = 0;
    it->tier_bad_ticket = 0;
    if (x->hc && x->cfg.tp_size > 1 && it->hdr.kind != TDM_PLAN_SHUTDOWN) {
        /* the tier segment: the batch's load ticket, then rank 0's journal */
        tw = 2 + it->tier_words;
        tier_room(x, tw);
        x->tier[0] = (uint32_t)it->kv_need;
        x->tier[1] = (uint32_t)(it->kv_need >> 32);
        if (it->tier_words)
            memcpy(x->tier + 2, it->tier, it->tier_words * sizeof(uint32_t));
        tdm_plan_set_tier_words(hdr, tw);
    }
    TDM_TRY(tdm_comm_broadcast(x->cfg.plan, hdr, sizeof(hdr), 0));
    size_t plen = it->plan_len - TDM_PLAN_HDR_BYTES;
    if (plen)
        TDM_TRY(tdm_comm_broadcast(x->cfg.plan, (void *)(it->plan + TDM_PLAN_HDR_BYTES), plen, 0));
    if (tw)
        TDM_TRY(tdm_comm_broadcast(x->cfg.plan, x->tier, tw * sizeof(uint32_t), 0));
    *h = it->hdr;
    h->tier_words = tw;
    return TDM_OK;
}

tdm_status_t tdm_exec_lead(tdm_exec_t *x, tdm_exec_iter_t *it)
{
    tdm_plan_hdr_t h;
    if (x->fl >= 0 && x->pi[x->fl].dev) {
        tdm_err(TDM_SUB_SCHED,
                "msg=\"plan sent while a pipelined iteration is in flight\" "
                "iter=%llu",
                (unsigned long long)it->hdr.iter);
        return TDM_ERR_STATE;
    }
    TDM_TRY(lead_send(x, it, &h));
    if (it->hdr.kind == TDM_PLAN_SHUTDOWN)
        return TDM_OK;
    return run_plan(x, &h, it->plan + TDM_PLAN_HDR_BYTES, it->plan_len - TDM_PLAN_HDR_BYTES, it,
                    it->kv_need);
}

/* ---- the pipelined lead (sched_int.h tdm_exec_lead_launch) ---- */

int tdm_exec_can_pipeline(const tdm_exec_t *x)
{
    return x && x->can_pipe;
}

/* 1 when a row of the plan needs the host sampler (penalties: the request's history). */
static int plan_needs_host(const tdm_exec_iter_t *it)
{
    const uint8_t *payload = it->plan + TDM_PLAN_HDR_BYTES;
    size_t plen = it->plan_len - TDM_PLAN_HDR_BYTES, off = 0;
    tdm_plan_entry_t e;
    for (uint32_t i = 0; i < it->n_reqs && tdm_plan_next(payload, plen, &off, &e) == TDM_OK; i++) {
        const tdm_sample_params_t *p = &it->reqs[i]->sp;
        if ((e.flags & TDM_PLAN_LOGITS) &&
            (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
             p->frequency_penalty != 0.0f))
            return 1;
    }
    return 0;
}

/* Complete the older iteration, if any: wait for its device work and take its samples (the
 * result step of run_plan), or hand back one that already ran. */
static tdm_status_t pipe_complete(tdm_exec_t *x, tdm_exec_iter_t **done)
{
    *done = NULL;
    if (x->fl < 0)
        return TDM_OK;
    struct pipe_iter *p = &x->pi[x->fl];
    tdm_exec_iter_t *it = p->it;
    x->fl = -1;
    *done = it;
    memset(x->pend, 0, x->cfg.max_seqs * sizeof(uint32_t));
    if (!p->dev)
        return TDM_OK;
    p->dev = 0;
    tdm_status_t st = TDM_OK;
    if (x->cuda)
        st = x->cu->exec_finish_sample(x->cuda, p->slot, x->sout, p->n);
    else
        memcpy(x->sout, x->emu_out[p->slot], p->n * sizeof(*x->sout));
    if (st != TDM_OK) {
        tdm_err(TDM_SUB_SCHED, "msg=\"forward failed\" rank=0 iter=%llu status=%s",
                (unsigned long long)it->hdr.iter, tdm_status_name(st));
        return st;
    }
    const uint8_t *payload = it->plan + TDM_PLAN_HDR_BYTES;
    size_t plen = it->plan_len - TDM_PLAN_HDR_BYTES, off = 0;
    tdm_plan_entry_t e;
    uint32_t i = 0;
    it->n_results = 0;
    while (i < p->n && tdm_plan_next(payload, plen, &off, &e) == TDM_OK) {
        tdm_sreq_t *r = it->reqs[i];
        const tdm_cuda_sample_out_t *o = &x->sout[i];
        int skip = p->skip[i];
        i++;
        if (!(e.flags & TDM_PLAN_LOGITS))
            continue;
        tdm_exec_result_t *res = &it->results[it->n_results++];
        res->req = r;
        if (skip || r->n_sampled >= r->max_new) {
            res->status = TDM_ERR_STATE;
            continue;
        }
        res->status = o->status;
        res->sample = o->r;
        if (res->status == TDM_OK) {
            res->token = res->sample.id;
            r->tokens[r->n_prompt + r->n_sampled++] = res->token;
            x->last_tok[e.slot] = res->token;
        }
    }
    tdm_comm_record_iter(x->cfg.tensor, it->hdr.iter, TDM_PATH_BATCH, it->hdr.plan_hash,
                         it->hdr.n_seqs, it->waiting, it->running, tdm_time_mono_us());
    return TDM_OK;
}

/* TDM_CPU_PIPELINE: launch_sample's protocol on the CPU graph, run at once. The PREV_TOKEN
 * rows take the ids the previous launch sampled (its deferred outputs, an error row's -1 as 0,
 * as the device's fix does); the samples wait in this launch's slot until finish. */
static tdm_status_t emu_launch(tdm_exec_t *x, tdm_exec_iter_t *it, uint32_t n, uint32_t n_fix,
                               uint32_t *rows, int *slot)
{
    const tdm_cuda_sample_out_t *prev = x->emu_out[x->emu_slot];
    x->emu_slot ^= 1;
    tdm_cuda_sample_out_t *out = x->emu_out[x->emu_slot];
    for (uint32_t i = 0; i < n_fix; i++) {
        int32_t id = prev[x->fix_src[i]].r.id;
        x->ids[x->fix_dst[i]] = id >= 0 && (uint32_t)id < x->vocab ? id : 0;
    }
    TDM_TRY(tdm_graph_forward(x->graph, x->gs, n, x->logits, x->cfg.max_seqs, rows));
    for (uint32_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].r.id = -1;
        if (x->sreq[i].skip)
            continue;
        out[i].status = tdm_sample_token(&it->reqs[i]->sp, x->logits + (size_t)i * x->vocab,
                                         x->vocab, NULL, x->sreq[i].step, &x->scratch, &out[i].r);
    }
    *slot = x->emu_slot;
    return TDM_OK;
}

/* Launch a BATCH plan on the device behind the iteration in flight: its PREV_TOKEN rows take
 * the ids that iteration is sampling (still on the device), its sampling steps count them. */
static tdm_status_t pipe_launch(tdm_exec_t *x, tdm_exec_iter_t *it, struct pipe_iter *p)
{
    tdm_plan_hdr_t h;
    uint32_t dur = 0, n = 0, tok_off = 0, n_fix = 0, rows = 0;
    size_t off = 0;
    tdm_plan_entry_t e;

    TDM_TRY(lead_send(x, it, &h));
    const uint8_t *payload = it->plan + TDM_PLAN_HDR_BYTES;
    size_t plen = it->plan_len - TDM_PLAN_HDR_BYTES;
    __atomic_store_n(&x->iter_seen, h.iter, __ATOMIC_RELAXED);
    tdm_comm_record_pending(x->cfg.tensor, it->waiting, it->running, it->taken);
    if (tdm_fault_fire(x->cfg.faults, TDM_FAULT_STALL_LOOP, 0, h.iter, &dur))
        sleep_ms(dur);
    if (h.n_seqs > x->cfg.max_seqs || h.n_tokens > x->cfg.max_tokens) {
        tdm_err(TDM_SUB_SCHED,
                "msg=\"plan over the executor's bounds\" iter=%llu seqs=%u tokens=%u",
                (unsigned long long)h.iter, h.n_seqs, h.n_tokens);
        return TDM_ERR_RANGE;
    }
    memset(x->pend_nx, 0, x->cfg.max_seqs * sizeof(uint32_t));
    while (tdm_plan_next(payload, plen, &off, &e) == TDM_OK) {
        if (e.slot >= x->cfg.max_seqs || n >= it->n_reqs) {
            tdm_err(TDM_SUB_SCHED, "msg=\"plan slot out of range\" iter=%llu slot=%u",
                    (unsigned long long)h.iter, e.slot);
            return TDM_ERR_RANGE;
        }
        tdm_sreq_t *r = it->reqs[n];
        uint32_t pending = x->pend[e.slot] != 0;
        for (uint32_t i = 0; i < e.n_tokens; i++)
            x->ids[tok_off + i] = (int32_t)e.tokens[i];
        if (e.flags & TDM_PLAN_PREV_TOKEN) {
            if (pending) {
                x->fix_dst[n_fix] = tok_off;
                x->fix_src[n_fix++] = x->pend[e.slot] - 1;
            } else {
                x->ids[tok_off] = x->last_tok[e.slot];
            }
        }
        x->gs[n] = (tdm_graph_seq_t){x->ids + tok_off, e.n_tokens, e.pos0, e.pages, e.n_pages, 0};
        dev_sample_req(r, &e, pending, &x->sreq[n]);
        p->skip[n] = (uint8_t)x->sreq[n].skip;
        if (!x->sreq[n].skip)
            x->pend_nx[e.slot] = n + 1;
        tok_off += e.n_tokens;
        n++;
    }
    p->it = it;
    p->n = n;
    p->dev = 0;
    tdm_status_t st = x->cuda ? x->cu->exec_launch_sample(x->cuda, x->gs, n, x->sreq, x->fix_dst,
                                                          x->fix_src, n_fix, &rows, &p->slot)
                              : emu_launch(x, it, n, n_fix, &rows, &p->slot);
    if (st == TDM_OK && rows != n)
        st = TDM_ERR_STATE;
    if (st != TDM_OK) {
        tdm_err(TDM_SUB_SCHED, "msg=\"forward failed\" rank=0 iter=%llu status=%s",
                (unsigned long long)h.iter, tdm_status_name(st));
        return st;
    }
    p->dev = 1;
    return TDM_OK;
}

tdm_status_t tdm_exec_lead_launch(tdm_exec_t *x, tdm_exec_iter_t *it, tdm_exec_iter_t **done)
{
    *done = NULL;
    it->n_results = 0;
    it->tier_bad_ticket = 0;
    int k = x->fl < 0 ? 0 : x->fl ^ 1;
    if (!x->can_pipe || it->hdr.kind != TDM_PLAN_BATCH || plan_needs_host(it)) {
        /* in order: the older one completes, then this one runs to completion */
        TDM_TRY(pipe_complete(x, done));
        TDM_TRY(tdm_exec_lead(x, it));
        x->pi[k] = (struct pipe_iter){.it = it, .skip = x->pi[k].skip};
        x->fl = k;
        return TDM_OK;
    }
    tdm_status_t st = pipe_launch(x, it, &x->pi[k]);
    if (st != TDM_OK)
        return st;
    TDM_TRY(pipe_complete(x, done));
    uint32_t *t = x->pend;
    x->pend = x->pend_nx;
    x->pend_nx = t;
    x->fl = k;
    return TDM_OK;
}

tdm_status_t tdm_exec_lead_complete(tdm_exec_t *x, tdm_exec_iter_t **done)
{
    return pipe_complete(x, done);
}

tdm_status_t tdm_exec_follow(tdm_exec_t *x, volatile int *stop)
{
    uint8_t hdr_buf[TDM_PLAN_HDR_BYTES];
    tdm_plan_hdr_t h;
    tdm_status_t st;
    for (;;) {
        (void)stop; /* followers end on SHUTDOWN or abort only: rank 0 decides (I1) */
        TDM_TRY(tdm_comm_broadcast(x->cfg.plan, hdr_buf, sizeof(hdr_buf), 0));
        st = tdm_plan_hdr_parse(hdr_buf, sizeof(hdr_buf), &h);
        if (st != TDM_OK) {
            tdm_err(TDM_SUB_SCHED, "msg=\"bad plan header\" rank=%u status=%s", x->cfg.rank,
                    tdm_status_name(st));
            return st;
        }
        if (h.payload_bytes > x->rx_cap) {
            x->rx = tdm_realloc(x->rx, h.payload_bytes);
            x->rx_cap = h.payload_bytes;
        }
        if (h.payload_bytes)
            TDM_TRY(tdm_comm_broadcast(x->cfg.plan, x->rx, h.payload_bytes, 0));
        st = tdm_plan_validate(&h, x->rx, h.payload_bytes);
        if (st != TDM_OK) {
            tdm_err(TDM_SUB_SCHED, "msg=\"bad plan\" rank=%u iter=%llu status=%s", x->cfg.rank,
                    (unsigned long long)h.iter, tdm_status_name(st));
            return st;
        }
        uint64_t need = 0;
        if (h.tier_words) {
            tier_room(x, h.tier_words);
            TDM_TRY(tdm_comm_broadcast(x->cfg.plan, x->tier, h.tier_words * sizeof(uint32_t), 0));
            if (!x->hc || h.tier_words < 2) {
                tdm_err(TDM_SUB_SCHED,
                        "msg=\"plan carries a HiCache tier segment this rank "
                        "cannot apply\" rank=%u iter=%llu",
                        x->cfg.rank, (unsigned long long)h.iter);
                return TDM_ERR_FORMAT;
            }
            need = x->tier[0] | (uint64_t)x->tier[1] << 32;
            /* rank 0's stores and loads since the last plan, on this rank's shard (I1) */
            st = tdm_hicache_replay(x->hc, x->tier + 2, h.tier_words - 2);
            if (st != TDM_OK) {
                tdm_err(TDM_SUB_SCHED,
                        "msg=\"HiCache journal not applied\" rank=%u iter=%llu "
                        "status=%s",
                        x->cfg.rank, (unsigned long long)h.iter, tdm_status_name(st));
                return st;
            }
        }
        if (h.kind == TDM_PLAN_SHUTDOWN)
            return TDM_OK;
        TDM_TRY(run_plan(x, &h, x->rx, h.payload_bytes, NULL, need));
    }
}
