/*
 * engine_fwd.cu — one forward of the CUDA engine: the launches of every layer from the device
 * plan (capturable), the plan of a batch, the decode graphs per batch bucket, the replay
 * benchmark.
 */
#include "engine_int.h"
#include "split_policy.h"

#define PDL_EARLY_ROWS 8 /* pdl_early: decode calls of at most this many rows */

static uint32_t splits_for(const tdm_cuda_engine_t *e, uint32_t n)
{
    uint32_t s = (2 * 132 + n * e->KV - 1) / (n * e->KV);
    if (s > TDM_CUDA_MAX_SPLITS)
        s = TDM_CUDA_MAX_SPLITS;
    if (s < 1)
        s = 1;
    while (s > 1 && (uint64_t)n * s > e->rowsplits)
        s--;
    return s;
}

/* Splits of the tensor-core decode attention (split_policy.h): the policy's for n rows, or the
 * call's own (dsplit, set by forward_call: balanced against its longest row). */
static uint32_t decode_splits(const tdm_cuda_engine_t *e, uint32_t n)
{
    if (e->dsplit)
        return e->dsplit;
    return tdm_split_policy(n, e->KV, e->o.attn_splits ? e->o.attn_splits : 8, e->o.attn_min_splits,
                            e->rowsplits);
}

/* attn_balance (engine.h, split_policy.h): the policy's splits for n rows, doubled against the
 * longest row (maxlen positions) while every block fits on the SMs at once */
static uint32_t balanced_splits(tdm_cuda_engine_t *e, uint32_t n, uint32_t maxlen)
{
    const uint32_t base = decode_splits(e, n);
    if (!e->o.attn_balance || n == 0)
        return base;
    if (!e->da_slots)
        e->da_slots = tdm_cuda_decode_mma_slots(&e->kv);
    const uint32_t cap = e->o.attn_splits ? e->o.attn_splits : 8;
    return tdm_split_balanced(base, n, e->KV, cap < MAX_GRAPH_SPLITS ? cap : MAX_GRAPH_SPLITS,
                              e->rowsplits, maxlen, e->o.attn_balance, e->da_slots);
}

static int use_gemv(const tdm_cuda_engine_t *e, uint32_t n)
{
    return n <= e->o.gemv_max_rows || e->wdt != TDM_DTYPE_BF16;
}

/* 1 when gemm() runs the skinny kernel for this shape. Measured (docs/cuda.md, run 3): it beats
 * cuBLAS up to 8 rows everywhere and up to 32 rows on the small matrices; wider ones re-read x
 * too often and lose. */
static int use_skinny(const tdm_cuda_engine_t *e, uint32_t n, uint32_t K, uint32_t M)
{
    return e->o.use_skinny && tdm_cuda_skinny_ok(n, K) && (n <= 8 || (uint64_t)M * K <= (6u << 20));
}

/* 1 when gemm() runs the tile kernel: up to opts.tile_max_rows rows where the skinny one does
 * not run (docs/cuda.md "A GEMM for 16-256 rows"). */
static int use_tile(const tdm_cuda_engine_t *e, uint32_t n, uint32_t K, uint32_t M)
{
    return n <= e->o.tile_max_rows && tdm_cuda_tile_ok(n, K) && !use_skinny(e, n, K, M);
}

/* y (n, M) (+)= xb · Wᵀ on the bf16 path: the skinny tensor-core GEMM for decode-sized n, the
 * tile GEMM up to opts.tile_max_rows rows, else cuBLAS (beta 1 = accumulate) with the algorithm
 * chosen by timing where the shape was tuned (gemm_lt.h). */
static tdm_status_t gemm(tdm_cuda_engine_t *e, uint32_t n, uint32_t K, const void *w, uint32_t M,
                         int accum, float *y)
{
    if (use_skinny(e, n, K, M))
        return tdm_cuda_gemm_skinny(e->xb, n, K, (const uint16_t *)w, M, NULL, accum, y, M,
                                    e->stream);
    if (use_tile(e, n, K, M))
        return tdm_cuda_gemm_tile(e->xb, n, K, (const uint16_t *)w, M, accum, y, M, 0, e->stream);
    return tdm_cuda_lt_gemm(e->lt, e->cublas, e->stream, e->xb, n, K, (const uint16_t *)w, M,
                            accum != 0, y);
}

/* Before a decode graph of n rows is captured: time each cuBLAS GEMM shape its forward will run
 * (opts.gemm_tune; the layers' own weights, e->xb and e->gu as scratch) and keep the fastest
 * algorithm (gemm_lt.h). A shape that fails to tune runs cublasGemmEx; only a CUDA error that
 * leaves the stream unusable is returned. */
static tdm_status_t tune_decode(tdm_cuda_engine_t *e, uint32_t n)
{
    if (!e->lt || use_gemv(e, n))
        return TDM_OK;
    const uint32_t d = e->d, qd = e->H * e->hd, I = e->I, L = e->L;
    const int accf = !e->has_coll || e->tp_rank == 0;
    const uint64_t room = (uint64_t)e->T * 2 * I; /* floats of e->gu */
    const uint16_t **w = (const uint16_t **)tdm_calloc(L, sizeof(*w));
    if (!w)
        return TDM_OK; /* untuned: cublasGemmEx */
    struct {
        uint32_t K, M;
        int accum, part;
    } sh[5] = {
        {d, e->qkvd, 0, 0}, {qd, d, accf, 1}, {d, 2 * I, 0, 2}, {I, d, accf, 3}, {d, e->vr, 0, 4}};
    tdm_status_t st = TDM_OK;
    for (int k = 0; k < 5 && st == TDM_OK; k++) {
        uint32_t nw = L;
        if (use_skinny(e, n, sh[k].K, sh[k].M) || use_tile(e, n, sh[k].K, sh[k].M) ||
            (uint64_t)n * sh[k].M > room ||
            tdm_cuda_lt_tuned(e->lt, n, sh[k].K, sh[k].M, sh[k].accum))
            continue;
        if (sh[k].part == 4) { /* lm_head over the m = n logits rows of a decode step */
            w[0] = (const uint16_t *)e->lm_head;
            nw = 1;
        } else {
            for (uint32_t l = 0; l < L; l++) {
                const layer_dev_t *ly = &e->layers[l];
                w[l] = (const uint16_t *)(sh[k].part == 0   ? ly->qkv
                                          : sh[k].part == 1 ? ly->o
                                          : sh[k].part == 2 ? ly->gu
                                                            : ly->down);
            }
        }
        tdm_status_t r = tdm_cuda_lt_tune(e->lt, e->cublas, e->stream, n, sh[k].K, sh[k].M,
                                          sh[k].accum, e->xb, e->gu, w, nw, TDM_LT_MARGIN, NULL);
        const cudaError_t q = r == TDM_OK ? cudaSuccess : cudaStreamQuery(e->stream);
        if (q != cudaSuccess && q != cudaErrorNotReady)
            st = TDM_ERR_CUDA;
    }
    tdm_free(w);
    return st;
}

static tdm_cuda_gemv_t gemv_args(const tdm_cuda_engine_t *e, const float *x, uint32_t ldx,
                                 const uint32_t *xrow, uint32_t n, uint32_t K, const void *w,
                                 uint32_t M, const float *bias, const float *norm_w, int flags,
                                 float *y, uint32_t ldy, tdm_cuda_l2pf_t tail)
{
    /* one row: the streaming form (2), or (1, run 4) K split over the block's warps for the
     * small matrices (run 3: o and down at bs1 had ~8 us of fixed cost each, too few warps with
     * long serial weight streams) */
    const int ksplit = n != 1                  ? 0
                       : e->o.gemv_ksplit >= 2 ? e->o.gemv_ksplit
                                               : (e->o.gemv_ksplit && M <= 4096);
    tdm_cuda_gemv_t a = {
        x, ldx, xrow, n, K, M, e->wdt, w, bias, norm_w, e->cfg.rms_norm_eps, flags, y, ldy, ksplit};
    a.tail = tail;
    return a;
}

static tdm_status_t gemv(tdm_cuda_engine_t *e, const float *x, uint32_t ldx, const uint32_t *xrow,
                         uint32_t n, uint32_t K, const void *w, uint32_t M, const float *bias,
                         const float *norm_w, int flags, float *y, uint32_t ldy,
                         tdm_cuda_l2pf_t tail, tdm_cuda_mark_t mk)
{
    tdm_cuda_gemv_t a = gemv_args(e, x, ldx, xrow, n, K, w, M, bias, norm_w, flags, y, ldy, tail);
    a.mark = mk;
    return tdm_cuda_gemv(&a, e->stream);
}

/* 1 when the one-row GEMV of K inputs with the fused RMSNorm runs the streaming V2 form, the one
 * with the SwiGLU and argmax epilogues (ops.cu gemv1_kernel) */
int tdm_cuda_engine_gemv_fusable(const tdm_cuda_engine_t *e, uint32_t n, uint32_t K)
{
    const tdm_cuda_gemv_t a = gemv_args(e, e->x, K, NULL, n, K, e->wbuf, 1, NULL, e->x,
                                        TDM_GEMV_NORM, e->x, K, (tdm_cuda_l2pf_t){NULL, 0, 0, 0});
    return tdm_cuda_gemv_fusable(&a);
}

/* L2 prefetch of want bytes from p, clamped to lim (the end of the weights it belongs to) and
 * to whole 256-byte units; bytes 0 (none) when want is 0 or p is at or past lim. */
static tdm_cuda_l2pf_t l2pf_at(const tdm_cuda_engine_t *e, const void *p, uint64_t want,
                               const void *lim)
{
    const uint8_t *a = (const uint8_t *)p, *b = (const uint8_t *)lim;
    const uint64_t room = b > a ? (uint64_t)(b - a) : 0;
    tdm_cuda_l2pf_t r = {p, (want < room ? want : room) & ~(uint64_t)255, e->o.l2pf_op,
                         e->o.l2pf_early};
    return r;
}

/* Every launch of one forward over n rows (m logit rows), from the device plan: capturable. */
static tdm_status_t enqueue(tdm_cuda_engine_t *e, uint32_t n, uint32_t m)
{
    const uint32_t *plan = e->d_plan;
    const int32_t *ids = (const int32_t *)(plan + plan_off(e, P_IDS));
    const uint32_t *outrows = plan + plan_off(e, P_OUT);
    tdm_cuda_rows_t rows = {plan + plan_off(e, P_POS), plan + plan_off(e, P_PTOFF),
                            plan + plan_off(e, P_PAGES), plan + plan_off(e, P_NACT)};
    const uint32_t d = e->d, qd = e->H * e->hd, I = e->I, S = splits_for(e, n);
    const float eps = e->cfg.rms_norm_eps;
    const int small = use_gemv(e, n);
    const int mma_attn = e->o.use_mma_attn && tdm_cuda_decode_mma_supported(&e->kv, e->H);
    cudaStream_t s = e->stream;
    /* L2 prefetch (docs/cuda.md): apf bytes of o|gate_up from each decode attention grid, tpf
     * bytes of the next GEMV's weights from each one-row GEMV's tail */
    const uint64_t apf = (uint64_t)e->o.l2pf_mb << 20, tpf = (uint64_t)e->o.l2pf_tail_mb << 20;
    const uint64_t wdown = (uint64_t)d * I * e->wes, wlm = (uint64_t)e->vr * d * e->wes;
    const tdm_cuda_l2pf_t none = {NULL, 0, 0, 0};
    /* run 11: the MLP activation in the gate|up GEMV's epilogue, the argmax in lm_head's */
    const int swiglu = e->gu_il; /* then every one-row call is fusable (gemv_fusable) */
    /* tensor parallelism (engine.h): rank 0 adds its partials to the residual, the others
     * contribute theirs alone, and the all-reduce sums them; the logits slice is gathered first */
    const int tpc = e->has_coll, accf = !tpc || e->tp_rank == 0 ? TDM_GEMV_ACCUM : 0;
    float *lgo = tpc ? e->lg_local : e->logits;
    const int am = !tpc && use_gemv(e, m) && e->o.argmax_fused && !apf &&
                   tdm_cuda_engine_gemv_fusable(e, m, d);

    /* run 12: one row's embedding lookup folded into layer 0's qkv GEMV (no embed node) */
    const int emb = e->tp == 1 && small && e->o.embed_fused && e->wdt == TDM_DTYPE_BF16 &&
                    tdm_cuda_engine_gemv_fusable(e, n, d);
    /* the I2 marks ride on the kernels beside each collective (engine_int.h): the one before
     * carries mark_enter, the one after mark_next (small: a GEMV follows every all-reduce) */
    const tdm_cuda_mark_t nomk = {NULL, 0};
    e->nmark = 0;
    e->mk_entered = 0;
    e->mk_pend = 0;
    if (e->tp > 1) { /* vocab-parallel: own rows, -0.0 elsewhere, summed */
        TDM_TRY(tdm_cuda_embed_range(e->embed, e->wdt, ids, n, d, e->vlo, e->vr, e->x,
                                     tdm_cuda_engine_mark_enter(e), s));
        TDM_TRY(tdm_cuda_engine_allreduce(e, e->x, (size_t)n * d, small));
    } else if (!emb) {
        TDM_TRY(tdm_cuda_embed(e->embed, e->wdt, ids, n, d, e->x, s));
    }
    for (uint32_t l = 0; l < e->L; l++) {
        const layer_dev_t *w = &e->layers[l];
        const uint8_t *o_b = (const uint8_t *)w->o, *gu_b = (const uint8_t *)w->gu;
        const uint8_t *down_b = (const uint8_t *)w->down; /* o|gate_up is [o_b, down_b) */
        const tdm_cuda_l2pf_t pf_attn = l2pf_at(e, o_b, apf, down_b);
        /* each GEMV's tail: o (when the attention does not), the rest of gate_up, down, and the
         * next layer's qkv (lm_head after the last layer) */
        const tdm_cuda_l2pf_t t_qkv = apf ? none : l2pf_at(e, o_b, tpf, down_b);
        const tdm_cuda_l2pf_t t_o = l2pf_at(
            e, o_b + (apf > (uint64_t)(gu_b - o_b) ? apf : (uint64_t)(gu_b - o_b)), tpf, down_b);
        const tdm_cuda_l2pf_t t_gu = l2pf_at(e, down_b, tpf, down_b + wdown);
        const tdm_cuda_l2pf_t t_down =
            l + 1 < e->L ? l2pf_at(e, e->layers[l + 1].qkv, tpf, e->layers[l + 1].o)
                         : l2pf_at(e, e->lm_head, tpf, (const uint8_t *)e->lm_head + wlm);
        if (small && l == 0 && emb) {
            tdm_cuda_gemv_t a =
                gemv_args(e, e->x, d, (const uint32_t *)ids, n, d, w->qkv, e->qkvd, w->qkv_bias,
                          w->attn_norm, TDM_GEMV_NORM, e->qkv, e->qkvd, t_qkv);
            a.embed = (const uint16_t *)e->embed;
            a.embed_out = e->x;
            TDM_TRY(tdm_cuda_gemv(&a, s));
        } else if (small) {
            TDM_TRY(gemv(e, e->x, d, NULL, n, d, w->qkv, e->qkvd, w->qkv_bias, w->attn_norm,
                         TDM_GEMV_NORM, e->qkv, e->qkvd, t_qkv, tdm_cuda_engine_mark_next(e)));
        } else {
            TDM_TRY(tdm_cuda_rmsnorm(e->x, NULL, NULL, w->attn_norm, eps, n, d, NULL, e->xb, s));
            TDM_TRY(gemm(e, n, d, w->qkv, e->qkvd, 0, e->qkv));
            if (w->qkv_bias)
                TDM_TRY(tdm_cuda_add_bias(e->qkv, n, e->qkvd, e->qkvd, w->qkv_bias, s));
        }
        /* Qwen3: each q and k head RMS-normalised in place before every attention path's RoPE */
        if (w->qk_norm)
            TDM_TRY(tdm_cuda_qk_norm(e->qkv, n, e->qkvd, e->H, e->KV, e->hd, w->qk_norm,
                                     w->qk_norm + e->hd, eps, s));
        /* I7: a layer that may still be loading from the host tier only through the gate */
        if (e->hc.gate)
            TDM_TRY(tdm_cuda_hc_layer(&e->hc, &e->kv, l, &rows, n, s));
        if (e->o.ablate & TDM_CUDA_ABLATE_ATTN)
            goto mlp;
        if (e->ntiles) {
            /* a mixed call: its one-token rows (first, nd) as in a decode call, then the
             * chunks' rows [nd, n) as a call of their own over the flash tiles */
            const uint32_t nd = e->nd;
            if (nd) {
                const int cl = e->o.attn_cluster;
                TDM_TRY(tdm_cuda_attention_decode(e->qkv, nd, e->H, &e->kv, l, &rows, e->inv_freq,
                                                  decode_splits(e, nd), cl ? NULL : e->part_o,
                                                  cl ? NULL : e->part_ml, e->attn,
                                                  small ? NULL : e->xb, &none, s));
            }
            const tdm_cuda_rows_t pr = {rows.pos + nd, rows.ptoff + nd, rows.pages, rows.nactive};
            float *pq = e->qkv + (size_t)nd * e->qkvd;
            TDM_TRY(tdm_cuda_rope_kv_write(pq, n - nd, e->H, e->inv_freq, &e->kv, l, &pr, s));
            TDM_TRY(tdm_cuda_flash_attention(
                pq, n - nd, e->H, &e->kv, l, &pr, plan + plan_off(e, P_TILES), e->ntiles,
                e->attn + (size_t)nd * qd, small ? NULL : e->xb + (size_t)nd * qd, s));
        } else if (mma_attn) { /* RoPE and the KV write fused in */
            /* the cluster form (part_o NULL) merges its splits in the kernel: no combine node */
            const int cl = e->o.attn_cluster;
            TDM_TRY(tdm_cuda_attention_decode(e->qkv, n, e->H, &e->kv, l, &rows, e->inv_freq,
                                              decode_splits(e, n), cl ? NULL : e->part_o,
                                              cl ? NULL : e->part_ml, e->attn, small ? NULL : e->xb,
                                              &pf_attn, s));
        } else {
            TDM_TRY(tdm_cuda_rope_kv_write(e->qkv, n, e->H, e->inv_freq, &e->kv, l, &rows, s));
            TDM_TRY(tdm_cuda_attention(e->qkv, n, e->H, &e->kv, l, &rows, S, e->part_o, e->part_ml,
                                       e->attn, small ? NULL : e->xb, s));
        }
    mlp:
        if (e->o.ablate & TDM_CUDA_ABLATE_GEMM)
            continue;
        if (small) {
            TDM_TRY(gemv(e, e->attn, qd, NULL, n, qd, w->o, d, NULL, NULL, accf, e->x, d, t_o,
                         tpc ? tdm_cuda_engine_mark_enter(e) : nomk));
            if (tpc)
                TDM_TRY(tdm_cuda_engine_allreduce(e, e->x, (size_t)n * d, 1));
            if (swiglu) { /* use_gemv: one row only */ /* gate|up writes silu(gate) * up: down reads
                                                          I floats, no SiLU */
                TDM_TRY(gemv(e, e->x, d, NULL, n, d, w->gu, I, NULL, w->mlp_norm,
                             TDM_GEMV_NORM | TDM_GEMV_SWIGLU, e->gu, I, t_gu,
                             tdm_cuda_engine_mark_next(e)));
                TDM_TRY(gemv(e, e->gu, I, NULL, n, I, w->down, d, NULL, NULL, accf, e->x, d, t_down,
                             tpc ? tdm_cuda_engine_mark_enter(e) : nomk));
            } else {
                /* ABLATE_SILU (timing only): down stages I floats of the gate, no SiLU·up */
                const int ab = (e->o.ablate & TDM_CUDA_ABLATE_SILU) != 0;
                TDM_TRY(gemv(e, e->x, d, NULL, n, d, w->gu, 2 * I, NULL, w->mlp_norm, TDM_GEMV_NORM,
                             e->gu, 2 * I, t_gu, tdm_cuda_engine_mark_next(e)));
                TDM_TRY(gemv(e, e->gu, 2 * I, NULL, n, I, w->down, d, NULL, NULL,
                             ab ? accf : TDM_GEMV_SILU | accf, e->x, d, t_down,
                             tpc ? tdm_cuda_engine_mark_enter(e) : nomk));
            }
            if (tpc) /* the next GEMV (qkv or lm_head) carries its leave mark */
                TDM_TRY(tdm_cuda_engine_allreduce(e, e->x, (size_t)n * d, 1));
        } else {
            TDM_TRY(gemm(e, n, qd, w->o, d, accf != 0, e->x));
            if (tpc)
                TDM_TRY(tdm_cuda_engine_allreduce(e, e->x, (size_t)n * d, 0));
            TDM_TRY(tdm_cuda_rmsnorm(e->x, NULL, NULL, w->mlp_norm, eps, n, d, NULL, e->xb, s));
            TDM_TRY(gemm(e, n, d, w->gu, 2 * I, 0, e->gu));
            /* silu·mul stays its own launch: fused into the skinny kernel's input every block
             * re-read the fp32 gate|up (run 3: bs32 3.8 ms/step against 2.3) */
            TDM_TRY(tdm_cuda_silu_mul(e->gu, n, I, e->gu_il, NULL, e->xb, s));
            TDM_TRY(gemm(e, n, I, w->down, d, accf != 0, e->x));
            if (tpc)
                TDM_TRY(tdm_cuda_engine_allreduce(e, e->x, (size_t)n * d, 0));
        }
    }
    if (am) { /* the argmax in the epilogue: no argmax node */
        tdm_cuda_gemv_t a = gemv_args(e, e->x, d, outrows, m, d, e->lm_head, e->V, NULL,
                                      e->final_norm, TDM_GEMV_NORM, e->logits, e->V, none);
        a.argmax = e->d_ids_out;
        a.argmax_ws = e->am_ws;
        return tdm_cuda_gemv(&a, s);
    }
    if (use_gemv(e, m)) {
        TDM_TRY(gemv(e, e->x, d, outrows, m, d, e->lm_head, e->vr, NULL, e->final_norm,
                     TDM_GEMV_NORM, lgo, e->vr, none,
                     tpc ? tdm_cuda_engine_mark_enter(e) : tdm_cuda_engine_mark_next(e)));
    } else {
        TDM_TRY(tdm_cuda_engine_mark_flush(e));
        TDM_TRY(tdm_cuda_rmsnorm(e->x, NULL, outrows, e->final_norm, eps, m, d, NULL, e->xb, s));
        TDM_TRY(gemm(e, m, d, e->lm_head, e->vr, 0, lgo));
    }
    if (tpc) /* argmax carries its leave mark */
        TDM_TRY(tdm_cuda_engine_gather_logits(e, m, 1));
    /* the next step's first weights (layer 0's qkv, then apf more) during the host round trip */
    const uint8_t *qkv0 = (const uint8_t *)e->layers[0].qkv, *o0 = (const uint8_t *)e->layers[0].o;
    const tdm_cuda_l2pf_t pf_next =
        apf ? l2pf_at(e, qkv0, (uint64_t)(o0 - qkv0) + apf, e->layers[0].down) : none;
    const tdm_cuda_mark_t mk_last = tdm_cuda_engine_mark_next(e);
    TDM_TRY(tdm_cuda_argmax(e->logits, m, e->V, e->d_ids_out, &pf_next, &mk_last, s));
    return tdm_cuda_engine_mark_flush(e); /* none left: argmax carried the last */
}

/* Validate the batch and fill the host plan; returns rows n, logit rows m, pages used. nd > 0:
 * the batch's nd one-token sequences take rows 0 .. nd-1 and the others follow, each class in
 * the caller's order (e->row_of maps the caller's rows); logits rows stay in the caller's
 * order. */
static tdm_status_t plan_batch(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs, uint32_t n_seqs,
                               uint32_t nd, uint32_t *ret_n, uint32_t *ret_m, size_t *ret_pages,
                               int *ret_decode)
{
    uint32_t n = 0, m = 0, ps = e->layout.page_size, rd = 0, rp = nd;
    size_t np = 0;
    int decode = 1;
    uint32_t *ids = e->h_plan + plan_off(e, P_IDS), *pos = e->h_plan + plan_off(e, P_POS);
    uint32_t *ptoff = e->h_plan + plan_off(e, P_PTOFF), *out = e->h_plan + plan_off(e, P_OUT);
    uint32_t *pages = e->h_plan + plan_off(e, P_PAGES);

    if (n_seqs > e->o.max_batch)
        return TDM_ERR_OVERFLOW;
    for (uint32_t s = 0; s < n_seqs; s++) {
        const tdm_cuda_seq_t *q = &seqs[s];
        uint64_t end = (uint64_t)q->pos0 + q->n_tokens, used;
        if (q->n_tokens == 0 || !q->tokens || !q->pages)
            return TDM_ERR_INVAL;
        if (q->n_tokens > e->o.max_tokens - n)
            return TDM_ERR_OVERFLOW;
        if (end > (uint64_t)q->n_pages * ps || end > UINT32_MAX)
            return TDM_ERR_RANGE;
        used = (end + ps - 1) / ps;
        if (used > e->o.max_pages_per_seq || np + used > e->pages_cap)
            return TDM_ERR_OVERFLOW;
        for (uint32_t p = 0; p < used; p++) {
            if (q->pages[p] >= e->kvb.num_pages)
                return TDM_ERR_RANGE;
            pages[np + p] = q->pages[p];
        }
        if (q->n_tokens != 1)
            decode = 0;
        uint32_t *cur = nd && q->n_tokens == 1 ? &rd : &rp;
        for (uint32_t t = 0; t < q->n_tokens; t++) {
            const uint32_t r = nd ? (*cur)++ : n;
            if (q->tokens[t] < 0 || (uint32_t)q->tokens[t] >= e->V || r >= e->prow)
                return TDM_ERR_RANGE;
            if (q->all_logits || t + 1 == q->n_tokens) {
                if (m == e->o.max_logit_rows)
                    return TDM_ERR_OVERFLOW;
                out[m++] = r;
            }
            e->row_of[n] = r;
            ids[r] = (uint32_t)q->tokens[t];
            pos[r] = q->pos0 + t;
            ptoff[r] = (uint32_t)np;
            n++;
        }
        np += used;
    }
    if (rd != nd)
        return TDM_ERR_INVAL; /* nd is not the batch's count of one-token sequences */
    e->h_plan[plan_off(e, P_NACT)] = n;
    *ret_n = n;
    *ret_m = m;
    *ret_pages = np;
    *ret_decode = decode;
    return TDM_OK;
}

static int bucket_of(uint32_t n, uint32_t *ret_rows)
{
    uint32_t b = 1;
    int i = 0;
    while (b < n) {
        b <<= 1;
        i++;
    }
    *ret_rows = b;
    return i;
}

/* One call: enqueued whole, then waited for (slot < 0) or left running with its completion
 * recorded in done_ev[slot]. */
static tdm_status_t forward_call(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs, uint32_t n_seqs,
                                 float *logits, int32_t *ret_ids, uint32_t cap_rows,
                                 uint32_t *ret_rows, int slot)
{
    tdm_status_t st = TDM_OK;
    uint32_t n, m, rows_run;
    size_t np;
    int decode, bi = -1, begun = 0;

    if (!e || !seqs || n_seqs == 0 || !ret_rows)
        return TDM_ERR_INVAL;
    if (e->tp > 1 && !e->has_coll)
        return TDM_ERR_STATE; /* a sharded view needs its collectives (set_coll) */
    /* the other host plan: a call launched before this one may still be copying from its own */
    e->plan_flip ^= 1;
    e->h_plan = e->h_plan_set[e->plan_flip];
    e->last_bi = -1; /* set below when this call launches a decode graph */
    /* decode calls (one token per sequence, at most max_batch rows) lay the plan out on the
     * compact stride the graphs were captured with; others (eager) on their rows rounded up to
     * 32, at most T (the copy is ~17 bytes a row, not ~17 T) */
    uint64_t rows_all = 0;
    uint32_t n_one = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        rows_all += seqs[i].n_tokens;
        n_one += seqs[i].n_tokens == 1;
    }
    e->prow = e->o.max_batch < e->T ? e->o.max_batch : e->T;
    if (n_one != n_seqs)
        e->prow = rows_all + 31 < e->T ? (uint32_t)((rows_all + 31) & ~31ull) : e->T;
    /* a mixed call's one-token rows first, for the decode attention (opts.mixed_decode) */
    const int mixed = n_one && n_one != n_seqs && e->o.mixed_decode && e->o.use_mma_attn &&
                      tdm_cuda_decode_mma_supported(&e->kv, e->H) &&
                      tdm_cuda_flash_supported(&e->kv);
    e->nd = 0;
    TDM_TRY(plan_batch(e, seqs, n_seqs, mixed ? n_one : 0, &n, &m, &np, &decode));
    if (m > cap_rows)
        return TDM_ERR_OVERFLOW;
    rows_run = n;
    tdm_cuda_set_pdl(e->o.use_pdl);
    /* run 12: early triggers measured faster at 1 and 8 rows of decode, slower at 32 */
    TDM_TRY(tdm_cuda_set_pdl_early(e->o.pdl_early && decode && n <= PDL_EARLY_ROWS, e->stream));
    e->ntiles = 0;
    if (!decode && tdm_cuda_flash_supported(&e->kv)) {
        /* prefill and mixed calls: tensor-core attention over tiles of consecutive rows (of the
         * rows past the one-token ones in a mixed call) */
        const uint32_t nd = mixed ? n_one : 0;
        e->ntiles = tdm_cuda_flash_tiles(e->h_plan + plan_off(e, P_POS) + nd,
                                         e->h_plan + plan_off(e, P_PTOFF) + nd, n - nd,
                                         e->h_plan + plan_off(e, P_TILES), e->tiles_cap);
        e->nd = nd;
    }
    if (mixed && !e->ntiles) /* cannot happen: tiles_cap covers T/64 + a tile a sequence */
        return TDM_ERR_OVERFLOW;
    /* the decode attention's splits for this call's one-token rows (all of a decode call's, the
     * first nd of a mixed one): the policy's, balanced against the longest row (attn_balance) */
    e->dsplit = 0;
    if (e->o.attn_balance && (decode || e->nd)) {
        const uint32_t *pos = e->h_plan + plan_off(e, P_POS), nr = decode ? n : e->nd;
        uint32_t maxlen = 0;
        for (uint32_t r = 0; r < nr; r++)
            if (pos[r] + 1 > maxlen)
                maxlen = pos[r] + 1;
        uint32_t b = nr;
        if (decode && e->o.use_graphs)
            bucket_of(nr, &b); /* a graph runs its bucket's rows */
        e->dsplit = balanced_splits(e, b, maxlen);
    }
    if (decode && e->o.use_graphs && !tdm_cuda_hc_pending(&e->hc)) {
        uint32_t b;
        bi = bucket_of(n, &b);
        if (b <= e->o.max_batch && bi < MAX_BUCKETS && b <= e->T) {
            /* padding rows: token 0 at position 0 of the first table; never written (nactive) */
            uint32_t *ids = e->h_plan + plan_off(e, P_IDS), *pos = e->h_plan + plan_off(e, P_POS);
            uint32_t *ptoff = e->h_plan + plan_off(e, P_PTOFF);
            uint32_t *out = e->h_plan + plan_off(e, P_OUT);
            for (uint32_t r = n; r < b; r++) {
                ids[r] = 0;
                pos[r] = 0;
                ptoff[r] = 0;
                out[r] = r;
            }
            rows_run = b;
        } else {
            bi = -1;
        }
    }
    /* one copy: the whole header, then the used pages */
    TDM_CUDA_CHECK_GOTO(cudaMemcpyAsync(e->d_plan, e->h_plan, (plan_off(e, P_PAGES) + np) * 4,
                                        cudaMemcpyHostToDevice, e->stream),
                        st, out);
    if (e->pre && (st = e->pre(e->pre_ctx, e->d_plan + plan_off(e, P_IDS), e->nd ? e->row_of : NULL,
                               n, e->stream)) != TDM_OK)
        goto out;
    if (e->has_coll) { /* the collectives this forward will issue, for the recorder (I2) */
        tdm_cuda_engine_plan_runs(e, bi >= 0 ? rows_run : n, bi >= 0 ? rows_run : m);
        if (e->coll.step_begin)
            e->coll.step_begin(e->coll.ctx, e->runs, e->n_runs);
        begun = 1;
    }
    if (bi >= 0) {
        /* one graph per bucket and split count (the splits are the attention's grid) */
        const uint32_t gs = decode_splits(e, rows_run);
        if (gs > MAX_GRAPH_SPLITS) {
            st = TDM_ERR_RANGE;
            goto out;
        }
        e->last_bi = bi;
        e->last_gs = (int)gs;
        if (!e->graph[bi][gs]) {
            cudaGraph_t g = NULL;
            if ((st = tune_decode(e, rows_run)) != TDM_OK)
                goto out;
            TDM_CUDA_CHECK_GOTO(cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal),
                                st, out);
            st = enqueue(e, rows_run, rows_run);
            cudaError_t ce = cudaStreamEndCapture(e->stream, &g);
            if (st != TDM_OK || ce != cudaSuccess) {
                if (g)
                    cudaGraphDestroy(g);
                if (st == TDM_OK) {
                    tdm_err(TDM_SUB_CUDA, "msg=\"graph capture failed\" err=\"%s\"",
                            cudaGetErrorString(ce));
                    st = TDM_ERR_CUDA;
                }
                goto out;
            }
            cudaError_t ie = cudaGraphInstantiate(&e->graph[bi][gs], g, 0);
            cudaGraphDestroy(g);
            TDM_CUDA_CHECK_GOTO(ie, st, out);
        }
        TDM_CUDA_CHECK_GOTO(cudaGraphLaunch(e->graph[bi][gs], e->stream), st, out);
    } else {
        if ((st = enqueue(e, n, m)) != TDM_OK)
            goto out;
    }
    if (e->post && (st = e->post(e->post_ctx, e->logits, m, e->V, e->stream)) != TDM_OK)
        goto out;
    if (ret_ids && !e->ids_mapped)
        TDM_CUDA_CHECK_GOTO(cudaMemcpyAsync(e->h_ids_out, e->d_ids_out, (size_t)m * 4,
                                            cudaMemcpyDeviceToHost, e->stream),
                            st, out);
    if (logits)
        TDM_CUDA_CHECK_GOTO(cudaMemcpyAsync(logits, e->logits, (size_t)m * e->V * 4,
                                            cudaMemcpyDeviceToHost, e->stream),
                            st, out);
    if (slot >= 0) {
        TDM_CUDA_CHECK_GOTO(cudaEventRecord(e->done_ev[slot], e->stream), st, out);
        *ret_rows = m;
        goto out;
    }
    if ((st = tdm_cuda_engine_wait(e)) != TDM_OK)
        goto out;
    if ((st = tdm_cuda_hc_after(&e->hc)) != TDM_OK)
        goto out;
    if (ret_ids)
        memcpy(ret_ids, e->h_ids_out, (size_t)m * 4);
    *ret_rows = m;
out:
    if (begun && e->coll.step_end)
        e->coll.step_end(e->coll.ctx, st);
    return st;
}

tdm_status_t tdm_cuda_engine_forward(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs,
                                     uint32_t n_seqs, float *logits, int32_t *ret_ids,
                                     uint32_t cap_rows, uint32_t *ret_rows)
{
    return forward_call(e, seqs, n_seqs, logits, ret_ids, cap_rows, ret_rows, -1);
}

tdm_status_t tdm_cuda_engine_launch(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs,
                                    uint32_t n_seqs, uint32_t cap_rows, uint32_t *ret_rows,
                                    int slot)
{
    if (!e || (slot != 0 && slot != 1))
        return TDM_ERR_INVAL;
    if (e->has_coll || e->hc.gate)
        return TDM_ERR_STATE;
    return forward_call(e, seqs, n_seqs, NULL, NULL, cap_rows, ret_rows, slot);
}

tdm_status_t tdm_cuda_engine_finish(tdm_cuda_engine_t *e, int slot)
{
    if (!e || (slot != 0 && slot != 1))
        return TDM_ERR_INVAL;
    tdm_status_t st = TDM_OK;
    TDM_CUDA_CHECK_GOTO(cudaEventSynchronize(e->done_ev[slot]), st, out);
out:
    return st;
}

void tdm_cuda_engine_set_pre(tdm_cuda_engine_t *e, tdm_cuda_engine_pre_fn fn, void *ctx)
{
    e->pre = fn;
    e->pre_ctx = ctx;
}

void tdm_cuda_engine_set_post(tdm_cuda_engine_t *e, tdm_cuda_engine_post_fn fn, void *ctx)
{
    e->post = fn;
    e->post_ctx = ctx;
}

tdm_status_t tdm_cuda_engine_replay_us(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs,
                                       uint32_t n_seqs, uint32_t reps, double *ret_us)
{
    tdm_status_t st = TDM_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    uint32_t rows, b;
    int32_t ids[1024];
    float ms = 0;

    if (!e || !seqs || n_seqs == 0 || n_seqs > 1024 || reps == 0 || !ret_us || !e->o.use_graphs)
        return TDM_ERR_INVAL;
    /* one call through forward: validates the batch, fills the plan, captures the bucket */
    TDM_TRY(tdm_cuda_engine_forward(e, seqs, n_seqs, NULL, ids, n_seqs, &rows));
    const int bi = bucket_of(n_seqs, &b);
    if (bi >= MAX_BUCKETS || bi != e->last_bi || e->last_gs < 1 || e->last_gs > MAX_GRAPH_SPLITS ||
        !e->graph[bi][e->last_gs])
        return TDM_ERR_UNSUPPORTED;
    cudaGraphExec_t gx = e->graph[bi][e->last_gs];
    TDM_CUDA_CHECK_GOTO(cudaEventCreate(&ev[0]), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventCreate(&ev[1]), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventRecord(ev[0], e->stream), st, out);
    for (uint32_t r = 0; r < reps; r++)
        TDM_CUDA_CHECK_GOTO(cudaGraphLaunch(gx, e->stream), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventRecord(ev[1], e->stream), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventSynchronize(ev[1]), st, out);
    TDM_CUDA_CHECK_GOTO(cudaEventElapsedTime(&ms, ev[0], ev[1]), st, out);
    *ret_us = 1e3 * ms / reps;
out:
    for (int i = 0; i < 2; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    return st;
}
