/*
 * engine.cu — the GPU forward of one rank: weights and the paged KV pool resident on the device,
 * the layer loop of dataplane/model/forward.c on the kernels of ops.cu, decode steps replayed as
 * CUDA graphs per batch-size bucket.
 *
 * Per layer, small batches (n <= gemv_max_rows, or non-bf16 weights) run 7 launches:
 *   qkv = GEMV[norm](x; attn_norm, Wqkv) + b;  (Qwen3: RMSNorm of each q and k head, one
 *   launch);  rope + KV write;  attention split; combine;
 *   x += GEMV(attn; Wo);  gu = GEMV[norm](x; mlp_norm, Wgu);  x += GEMV[silu](gu; Wdown)
 * and wide batches run RMSNorm → bf16 → cuBLAS (beta = 1 folds the residual add) instead.
 * The plan of a call (ids, positions, page-table offsets, active rows, logit rows, page tables)
 * is one host staging block copied with one cudaMemcpyAsync into a fixed device block, so a
 * captured graph reads each step's plan from the same addresses.
 */
#include "engine_int.h"

/* A 0/1 knob from the environment: a value starting with 0 or 1 sets it, anything else leaves the
 * default. */
static void env_bool(const char *name, int *v)
{
    const char *s = getenv(name);
    if (s && (*s == '0' || *s == '1'))
        *v = *s == '1';
}

void tdm_cuda_engine_opts_default(tdm_cuda_engine_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->mem_fraction_static = 0.9;
    o->max_tokens = 4096;
    o->max_batch = 32;
    o->max_pages_per_seq = 256;
    o->max_logit_rows = 256;
    o->gemv_max_rows = 1;
    o->use_graphs = 1;
    o->use_pdl = 1;
    o->use_skinny = 1;
    o->use_mma_attn = 1;
    o->gemv_ksplit = 3;
    o->attn_cluster = 1;
    o->swiglu_fused = 1;
    o->argmax_fused = 1;
    o->embed_fused = 1;
    o->pdl_early = 1;
    o->mixed_decode = 1;   /* measured on the H200: docs/cuda.md "Mixed steps" */
    o->gemm_tune = 0;      /* measured no faster in the decode step: docs/cuda.md */
    o->tile_max_rows = 0;  /* slower than cuBLAS so far: docs/cuda.md "A GEMM for 16-256 rows" */
    o->attn_balance = 256; /* serving at c = 64 x1.060 on an H100: docs/cuda.md */
    o->kv_dtype = TDM_DTYPE_BF16;
    o->page_size = TDM_KV_PAGE_SIZE_DEFAULT;
    const char *s = getenv("TDM_CUDA_GEMV_ROWS");
    if (s && *s)
        o->gemv_max_rows = (uint32_t)strtoul(s, NULL, 10);
    env_bool("TDM_CUDA_GRAPHS", &o->use_graphs);
    env_bool("TDM_CUDA_PDL", &o->use_pdl);
    env_bool("TDM_CUDA_SKINNY", &o->use_skinny);
    env_bool("TDM_CUDA_MMA_ATTN", &o->use_mma_attn);
    s = getenv("TDM_CUDA_GEMV_KSPLIT"); /* out of range: tdm_cuda_engine_init refuses it */
    if (s && *s >= '0' && *s <= '9' && (s[1] == 0 || (s[1] >= '0' && s[1] <= '9' && s[2] == 0)))
        o->gemv_ksplit = atoi(s);
    env_bool("TDM_CUDA_ATTN_CLUSTER", &o->attn_cluster);
    s = getenv("TDM_CUDA_ATTN_SPLITS");
    if (s && *s >= '1' && *s <= '8' && s[1] == 0)
        o->attn_splits = (uint32_t)(*s - '0');
    s = getenv("TDM_CUDA_ATTN_MIN_SPLITS"); /* out of range: tdm_cuda_engine_init refuses it */
    if (s && *s)
        o->attn_min_splits = (uint32_t)strtoul(s, NULL, 10);
    env_bool("TDM_CUDA_SWIGLU", &o->swiglu_fused);
    env_bool("TDM_CUDA_ARGMAX_FUSED", &o->argmax_fused);
    env_bool("TDM_CUDA_PDL_EARLY", &o->pdl_early);
    env_bool("TDM_CUDA_EMBED_FUSED", &o->embed_fused);
    env_bool("TDM_CUDA_MIXED_DECODE", &o->mixed_decode);
    env_bool("TDM_CUDA_GEMM_TUNE", &o->gemm_tune);
    s = getenv("TDM_CUDA_TILE_GEMM"); /* not a count, or out of range: init refuses it */
    if (s && *s) {
        char *end;
        const unsigned long v = strtoul(s, &end, 10);
        o->tile_max_rows = *end || v > TDM_CUDA_TILE_MAX_ROWS ? UINT32_MAX : (uint32_t)v;
    }
    s = getenv("TDM_CUDA_ATTN_BALANCE"); /* not a count, or out of range: init refuses it */
    if (s && *s) {
        char *end;
        const unsigned long v = strtoul(s, &end, 10);
        o->attn_balance = *end || v > 65536 ? UINT32_MAX : (uint32_t)v;
    }
    /* L2 prefetch knobs: out-of-range values reach tdm_cuda_engine_init, which refuses them */
    s = getenv("TDM_CUDA_L2_PREFETCH");
    if (s && *s)
        o->l2pf_mb = (uint32_t)strtoul(s, NULL, 10);
    s = getenv("TDM_CUDA_L2_PREFETCH_TAIL");
    if (s && *s)
        o->l2pf_tail_mb = (uint32_t)strtoul(s, NULL, 10);
    s = getenv("TDM_CUDA_L2_PREFETCH_OP");
    if (s && *s)
        o->l2pf_op = atoi(s);
    env_bool("TDM_CUDA_L2_PREFETCH_EARLY", &o->l2pf_early);
}

tdm_status_t tdm_cuda_engine_init(const tdm_model_view_t *view, const tdm_cuda_engine_opts_t *opts,
                                  tdm_cuda_engine_t **ret_engine)
{
    tdm_status_t st = TDM_OK;
    tdm_cuda_engine_t *e;
    size_t free_b = 0, total_b = 0;
    uint64_t pool_bytes = 0, act_bytes, budget;
    uint32_t num_pages = 0, T;

    if (!view || !view->cfg || !ret_engine)
        return TDM_ERR_INVAL;
    e = (tdm_cuda_engine_t *)tdm_calloc(1, sizeof(*e));
    if (opts)
        e->o = *opts;
    else
        tdm_cuda_engine_opts_default(&e->o);
    if (e->o.l2pf_mb > 4096 || e->o.l2pf_tail_mb > 4096 || e->o.l2pf_op < 0 || e->o.l2pf_op > 3) {
        tdm_err(TDM_SUB_CUDA,
                "msg=\"L2 prefetch options out of range (TDM_CUDA_L2_PREFETCH and _TAIL: MiB <= "
                "4096; _OP: 0..3)\" mb=%u tail_mb=%u op=%d",
                e->o.l2pf_mb, e->o.l2pf_tail_mb, e->o.l2pf_op);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.attn_splits > 8) {
        tdm_err(TDM_SUB_CUDA, "msg=\"TDM_CUDA_ATTN_SPLITS out of range (1..8)\" splits=%u",
                e->o.attn_splits);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.attn_min_splits > (e->o.attn_splits ? e->o.attn_splits : 8)) {
        tdm_err(
            TDM_SUB_CUDA,
            "msg=\"TDM_CUDA_ATTN_MIN_SPLITS out of range (1..8, at most TDM_CUDA_ATTN_SPLITS)\" "
            "min_splits=%u splits=%u",
            e->o.attn_min_splits, e->o.attn_splits);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.attn_balance && (e->o.attn_balance < 32 || e->o.attn_balance > 65536)) {
        tdm_err(TDM_SUB_CUDA,
                "msg=\"TDM_CUDA_ATTN_BALANCE out of range (0, or 32..65536 positions a split)\" "
                "balance=%u",
                e->o.attn_balance);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.tile_max_rows > TDM_CUDA_TILE_MAX_ROWS) {
        tdm_err(TDM_SUB_CUDA, "msg=\"TDM_CUDA_TILE_GEMM out of range (0..%u rows)\"",
                TDM_CUDA_TILE_MAX_ROWS);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.stream_priority != 0 && e->o.stream_priority != 1) {
        tdm_err(TDM_SUB_CUDA, "msg=\"stream_priority out of range (0 or 1)\" priority=%d",
                e->o.stream_priority);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.gemv_ksplit < 0 || e->o.gemv_ksplit > 11) {
        tdm_err(TDM_SUB_CUDA, "msg=\"TDM_CUDA_GEMV_KSPLIT out of range (0..11)\" ksplit=%d",
                e->o.gemv_ksplit);
        st = TDM_ERR_INVAL;
        goto err;
    }
    if (e->o.max_tokens == 0 || e->o.max_batch == 0 || e->o.max_batch > 1024 ||
        e->o.max_pages_per_seq == 0 || e->o.max_logit_rows == 0 ||
        !(e->o.mem_fraction_static > 0.0 && e->o.mem_fraction_static <= 1.0)) {
        st = TDM_ERR_INVAL;
        goto err;
    }
    e->cfg = *view->cfg;
    e->wdt = view->embed.dtype;
    if (e->wdt != TDM_DTYPE_BF16 && e->wdt != TDM_DTYPE_F16 && e->wdt != TDM_DTYPE_F32) {
        st = TDM_ERR_UNSUPPORTED;
        goto err;
    }
    e->wes = dtype_size(e->wdt);
    if ((st = tdm_cuda_engine_check_view(view, e->wdt)) != TDM_OK)
        goto err;
    e->d = e->cfg.hidden_size;
    e->H = view->heads_r;
    e->KV = view->kv_heads_r;
    e->hd = e->cfg.head_dim;
    e->I = view->inter_r;
    e->V = e->cfg.vocab_size;
    e->tp = view->tp_size;
    e->tp_rank = view->tp_rank;
    e->vlo = view->vocab_lo;
    e->vr = view->vocab_r;
    e->vcap = (uint32_t)((e->V + (uint64_t)e->tp - 1) / e->tp);
    e->marks = 1;
    e->L = e->cfg.num_layers;
    e->qkvd = (e->H + 2 * e->KV) * e->hd;
    if (e->o.max_logit_rows < e->o.max_batch)
        e->o.max_logit_rows = e->o.max_batch;
    if ((st = tdm_kv_layout_init(&e->cfg, e->o.kv_dtype, e->o.page_size, e->tp, e->tp_rank,
                                 &e->layout)) != TDM_OK)
        goto err;
    e->layers = (layer_dev_t *)tdm_calloc(e->L, sizeof(layer_dev_t));

    if (e->tp > 1) {
        /* rank r on device r mod the devices this process sees (one GPU: every rank on it, with
         * the host-staged collectives, dataplane/tp/gpu.h) */
        int ndev = 0;
        TDM_CUDA_CHECK_GOTO(cudaGetDeviceCount(&ndev), st, err);
        if (ndev <= 0) {
            st = TDM_ERR_CUDA;
            goto err;
        }
        TDM_CUDA_CHECK_GOTO(cudaSetDevice((int)(e->tp_rank % (uint32_t)ndev)), st, err);
    }
    TDM_CUDA_CHECK_GOTO(cudaMemGetInfo(&free_b, &total_b), st, err);
    /* Every initialising copy and memset goes to e->stream, never the legacy default stream: a
     * non-blocking stream does not wait for the legacy stream, and cudaMemset of device memory
     * returns before it has run, so the first forward raced the zeroing of a large pool (120 GB:
     * ~40 ms) and of the plan block queued behind it (docs/cuda.md, the second-engine finding) */
    {
        int prio_least = 0, prio_greatest = 0;
        if (e->o.stream_priority)
            TDM_CUDA_CHECK_GOTO(cudaDeviceGetStreamPriorityRange(&prio_least, &prio_greatest), st,
                                err);
        TDM_CUDA_CHECK_GOTO(
            cudaStreamCreateWithPriority(&e->stream, cudaStreamNonBlocking,
                                         e->o.stream_priority ? prio_greatest : prio_least),
            st, err);
    }
    /* the SwiGLU epilogue needs gate|up interleaved: the layout follows the knob and the form */
    e->gu_il = e->o.swiglu_fused && e->wdt == TDM_DTYPE_BF16 && e->o.gemv_max_rows <= 1 &&
               tdm_cuda_engine_gemv_fusable(e, 1, e->d);
    if ((st = tdm_cuda_engine_upload(e, view)) != TDM_OK)
        goto err;
    if (e->o.tile_max_rows)
        tdm_cuda_tile_prepare(); /* the split counts' occupancy answers, before any capture */

    /* activations */
    T = e->o.max_tokens > e->o.max_batch ? e->o.max_tokens : e->o.max_batch;
    e->T = T;
    e->prow = T; /* the plan block is sized for the largest stride */
    e->rowsplits = T > 32 * e->o.max_batch ? T : 32 * e->o.max_batch;
    {
        uint64_t maxk = e->d;
        if (e->H * e->hd > maxk)
            maxk = e->H * e->hd;
        if (e->I > maxk)
            maxk = e->I;
        uint64_t sizes[9] = {
            align256((uint64_t)T * e->d * 4),                    /* x */
            align256((uint64_t)T * e->qkvd * 4),                 /* qkv */
            align256((uint64_t)T * e->H * e->hd * 4),            /* attn */
            align256((uint64_t)T * 2 * e->I * 4),                /* gu */
            align256((uint64_t)e->o.max_logit_rows * e->d * 4),  /* hsel */
            align256((uint64_t)e->o.max_logit_rows * e->V * 4),  /* logits */
            align256((uint64_t)e->rowsplits * e->H * e->hd * 4), /* part_o */
            align256((uint64_t)e->rowsplits * e->H * 2 * 4),     /* part_ml */
            align256((uint64_t)(T > e->o.max_logit_rows ? T : e->o.max_logit_rows) * maxk * 2)};
        act_bytes = 0;
        for (int i = 0; i < 9; i++)
            act_bytes += sizes[i];
        act_bytes += align256((uint64_t)e->o.max_logit_rows * 4) + align256(TDM_CUDA_ARGMAX_WS);
        TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->abuf, act_bytes), st, err);
        /* zeroed once: a read of scratch that no launch of this call wrote (padding rows, a
         * bucket's unused tail) then gives the same bits in every engine instance */
        TDM_CUDA_CHECK_GOTO(cudaMemsetAsync(e->abuf, 0, act_bytes, e->stream), st, err);
        uint8_t *p = e->abuf;
        float **fp[8] = {&e->x,    &e->qkv,    &e->attn,   &e->gu,
                         &e->hsel, &e->logits, &e->part_o, &e->part_ml};
        for (int i = 0; i < 8; i++) {
            *fp[i] = (float *)p;
            p += sizes[i];
        }
        e->xb = (uint16_t *)p;
        p += sizes[8];
        e->d_ids_out = (int32_t *)p;
        e->am_ws = p + align256((uint64_t)e->o.max_logit_rows * 4);
    }

    /* KV pool from the layout descriptor and the configurator */
    budget = (uint64_t)((double)free_b * e->o.mem_fraction_static);
    if (budget <= e->wbytes + act_bytes + (64u << 20)) {
        tdm_err(TDM_SUB_CUDA,
                "msg=\"no device memory left for the KV pool\" free=%zu fraction=%.2f "
                "weights=%llu scratch=%llu",
                free_b, e->o.mem_fraction_static, (unsigned long long)e->wbytes,
                (unsigned long long)act_bytes);
        st = TDM_ERR_NOMEM;
        goto err;
    }
    budget -= e->wbytes + act_bytes + (64u << 20); /* cuBLAS workspace, plan, graphs */
    if ((st = tdm_kv_pool_configure(&e->layout, budget, e->o.max_pages, &num_pages)) != TDM_OK)
        goto err;
    if ((st = tdm_kv_layout_pool_bytes(&e->layout, num_pages, &pool_bytes)) != TDM_OK)
        goto err;
    TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->kv_base, pool_bytes), st, err);
    TDM_CUDA_CHECK_GOTO(cudaMemsetAsync(e->kv_base, 0, pool_bytes, e->stream), st, err);
    e->kvb.layout = &e->layout;
    e->kvb.base = e->kv_base;
    e->kvb.num_pages = num_pages;
    e->kvb.layer_bytes =
        e->L > 1 ? tdm_kv_layout_region_offset(&e->layout, num_pages, 1, TDM_KV_SUB_K) : pool_bytes;
    for (uint32_t s = 0; s < e->layout.n_sub; s++)
        e->kvb.sub_offset[s] =
            tdm_kv_layout_region_offset(&e->layout, num_pages, 0, (tdm_kv_sub_t)s);
    if ((st = tdm_cuda_kv_from_buffers(&e->kvb, &e->kv)) != TDM_OK)
        goto err;

    /* plan buffers */
    e->pages_cap = (size_t)e->o.max_batch * e->o.max_pages_per_seq;
    e->tiles_cap = (T + 63) / 64 + e->o.max_batch + 1;
    e->plan_bytes = (plan_off(e, P_PAGES) + e->pages_cap) * 4;
    TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->d_plan, e->plan_bytes), st, err);
    TDM_CUDA_CHECK_GOTO(cudaMemsetAsync(e->d_plan, 0, e->plan_bytes, e->stream), st, err);
    for (int k = 0; k < 2; k++) {
        TDM_CUDA_CHECK_GOTO(cudaMallocHost(&e->h_plan_set[k], e->plan_bytes), st, err);
        memset(e->h_plan_set[k], 0, e->plan_bytes);
        TDM_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&e->done_ev[k], cudaEventDisableTiming), st,
                            err);
    }
    e->h_plan = e->h_plan_set[0];
    e->row_of = (uint32_t *)tdm_calloc(T, sizeof(uint32_t));
    if (!e->row_of) {
        st = TDM_ERR_NOMEM;
        goto err;
    }
    /* the ids land in mapped pinned memory straight from the argmax (run 11): the step's last
     * device operation is the argmax, not a copy behind it; else a device buffer and a copy */
    if (cudaHostAlloc((void **)&e->h_ids_out, (size_t)e->o.max_logit_rows * 4,
                      cudaHostAllocMapped) == cudaSuccess) {
        void *dp = NULL;
        if (cudaHostGetDevicePointer(&dp, e->h_ids_out, 0) == cudaSuccess && dp) {
            e->d_ids_out = (int32_t *)dp;
            e->ids_mapped = 1;
        }
    } else {
        (void)cudaGetLastError();
        TDM_CUDA_CHECK_GOTO(cudaMallocHost(&e->h_ids_out, (size_t)e->o.max_logit_rows * 4), st,
                            err);
    }

    TDM_CUBLAS_CHECK_GOTO(cublasCreate(&e->cublas), st, err);
    TDM_CUBLAS_CHECK_GOTO(cublasSetStream(e->cublas, e->stream), st, err);
    TDM_CUDA_CHECK_GOTO(cudaMalloc(&e->cublas_ws, 32u << 20), st, err);
    TDM_CUBLAS_CHECK_GOTO(cublasSetWorkspace(e->cublas, e->cublas_ws, 32u << 20), st, err);
    if (e->o.gemm_tune && e->wdt == TDM_DTYPE_BF16 &&
        (st = tdm_cuda_lt_init(e->cublas_ws, 32u << 20, &e->lt)) != TDM_OK)
        goto err;
    if ((st = tdm_cuda_engine_tp_init(e)) != TDM_OK)
        goto err;
    TDM_CUDA_CHECK_GOTO(cudaStreamSynchronize(e->stream), st, err);
    tdm_info(TDM_SUB_CUDA,
             "msg=\"cuda engine ready\" weights_bytes=%llu kv_pages=%u kv_bytes=%llu free=%zu "
             "fraction=%.2f",
             (unsigned long long)e->wbytes, num_pages, (unsigned long long)pool_bytes, free_b,
             e->o.mem_fraction_static);
    *ret_engine = e;
    return TDM_OK;
err:
    tdm_cuda_engine_free(e);
    return st;
}

void tdm_cuda_engine_free(tdm_cuda_engine_t *e)
{
    if (!e)
        return;
    tdm_cuda_engine_drop_graphs(e);
    tdm_cuda_engine_tp_free(e);
    tdm_cuda_hc_free(&e->hc);
    tdm_cuda_lt_free(e->lt);
    if (e->cublas)
        cublasDestroy(e->cublas);
    cudaFree(e->cublas_ws);
    cudaFreeHost(e->h_ids_out);
    for (int k = 0; k < 2; k++) {
        cudaFreeHost(e->h_plan_set[k]);
        if (e->done_ev[k])
            cudaEventDestroy(e->done_ev[k]);
    }
    cudaFree(e->d_plan);
    cudaFree(e->kv_base);
    cudaFree(e->abuf);
    cudaFree(e->wbuf);
    if (e->stream)
        cudaStreamDestroy(e->stream);
    tdm_free(e->row_of);
    tdm_free(e->layers);
    tdm_free(e);
}

uint32_t tdm_cuda_engine_num_pages(const tdm_cuda_engine_t *e)
{
    return e->kvb.num_pages;
}

const tdm_kv_layout_t *tdm_cuda_engine_layout(const tdm_cuda_engine_t *e)
{
    return &e->layout;
}

const tdm_kv_buffers_t *tdm_cuda_engine_kv(const tdm_cuda_engine_t *e)
{
    return &e->kvb;
}

uint64_t tdm_cuda_engine_weight_bytes(const tdm_cuda_engine_t *e)
{
    return e->wbytes;
}

tdm_status_t tdm_cuda_engine_use_gate(tdm_cuda_engine_t *e, tdm_kv_gate_t *gate)
{
    return e ? tdm_cuda_hc_use_gate(&e->hc, gate) : TDM_ERR_INVAL;
}

void tdm_cuda_engine_set_batch(tdm_cuda_engine_t *e, const tdm_kv_batch_t *b)
{
    if (b)
        e->hc.batch = *b;
    else
        memset(&e->hc.batch, 0, sizeof(e->hc.batch));
}
