/*
 * engine_int.h — the CUDA engine's state shared by its files: engine.cu (options, init, free),
 * engine_load.cu (the weights' upload and the view's checks) and engine_fwd.cu (the launches of
 * one forward, the plan, the graphs).
 */
#ifndef TDM_KERNELS_CUDA_ENGINE_INT_H
#define TDM_KERNELS_CUDA_ENGINE_INT_H

#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "engine.h"
#include "gemm_lt.h"
#include "hicache.h"

extern "C" {
#include <tdm/mem.h>

#include "../backend.h"
}

#define MAX_BUCKETS 12
#define MAX_GRAPH_SPLITS 8 /* decode graphs per bucket: one per decode attention split count */

typedef struct layer_dev {
    const void *qkv, *o, *gu, *down;
    const float *qkv_bias; /* NULL when the model has none */
    const float *attn_norm, *mlp_norm;
    const float *qk_norm; /* (2, hd): q_norm | k_norm (Qwen3); NULL when the model has none */
} layer_dev_t;

struct tdm_cuda_engine {
    tdm_cuda_engine_opts_t o;
    tdm_model_config_t cfg;
    uint32_t d, H, KV, hd, I, V, L, qkvd;
    int wdt;
    size_t wes;
    /* weights: one allocation */
    uint8_t *wbuf;
    uint64_t wbytes;
    layer_dev_t *layers;
    const void *embed, *lm_head;
    const float *final_norm, *inv_freq;
    /* KV pool */
    tdm_kv_layout_t layout;
    tdm_kv_buffers_t kvb;
    tdm_cuda_kv_t kv;
    uint8_t *kv_base;
    /* activations: T rows each */
    uint32_t T, rowsplits;
    uint32_t prow; /* plan row stride of the current call: T, or max_batch for decode calls (run
                    * 11: a decode step copies ~1 KB of plan instead of ~66 KB at T 4096) */
    uint8_t *abuf;
    float *x, *qkv, *attn, *gu, *hsel, *logits, *part_o, *part_ml;
    uint16_t *xb;
    int32_t *d_ids_out;
    void *am_ws; /* the lm_head GEMV's fused argmax (TDM_CUDA_ARGMAX_WS bytes, zeroed) */
    int gu_il;   /* gate|up rows interleaved: the one-row SwiGLU epilogue is on (run 11) */
    /* plan: device block and pinned host staging of the same layout */
    size_t plan_bytes, pages_cap;
    uint32_t tiles_cap, ntiles; /* prefill attention tiles of the current call (0: split-K) */
    uint32_t nd;                /* a mixed call's one-token rows, laid out first (rows [0, nd):
                                 * decode attention; the tiles cover rows [nd, n)); 0: none */
    uint32_t *row_of;           /* host, T: the caller's row k is row row_of[k] of the plan */
    uint32_t *d_plan, *h_plan;
    uint32_t *h_plan_set[2]; /* h_plan alternates between them, one per call (launch/finish) */
    int plan_flip;
    cudaEvent_t done_ev[2]; /* tdm_cuda_engine_launch's completion, per slot */
    int32_t *h_ids_out;
    int ids_mapped; /* argmax writes h_ids_out itself (mapped pinned memory): no copy-back op */
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *cublas_ws;
    tdm_cuda_lt_t *lt; /* GEMM algorithms chosen by timing (opts.gemm_tune); NULL: cublasGemmEx */
    cudaGraphExec_t graph[MAX_BUCKETS][MAX_GRAPH_SPLITS + 1]; /* [bucket][splits] */
    uint32_t dsplit;      /* the decode attention's splits for the call being enqueued (0: the
                           * policy's for its rows, decode_splits) */
    uint32_t da_slots;    /* (row, KV head, split) blocks resident at once (attn_balance), 0: not
                           * asked yet */
    int last_bi, last_gs; /* the graph the last decode call launched (replay_us) */
    tdm_cuda_hc_t hc;     /* the HiCache layer gate (hicache.h); hc.gate NULL: none */
    /* tensor parallelism (engine.h): the view's shares; vocab rows [vlo, vlo + vr) of V, vcap
     * the largest rank's share (the all-gather's block) */
    uint32_t tp, tp_rank, vlo, vr, vcap;
    int has_coll, marks;
    tdm_cuda_coll_t coll;
    uint32_t *d_mark; /* device address of coll.mark (NULL: no marks) */
    uint32_t nmark;   /* collectives enqueued so far in this forward */
    /* marks folded into the kernels beside each collective (engine_tp.cu): the kernel just
     * launched carried the next collective's enter mark (mk_entered), and the leave mark that the
     * next kernel launched carries (mk_pend, 0: none) */
    int mk_entered;
    uint32_t mk_pend;
    float *lg_local; /* max_logit_rows x vcap: this rank's logits slice */
    float *lg_all;   /* tp x max_logit_rows x vcap: every rank's, in rank order */
    void *write32;   /* cuStreamWriteValue32 (driver entry point), NULL: the mark kernel */
    tdm_cuda_coll_run_t runs[TDM_CUDA_COLL_RUNS];
    uint32_t n_runs;
    /* tdm_cuda_engine_set_post: enqueued after each forward's last kernel, before its wait */
    tdm_cuda_engine_post_fn post;
    void *post_ctx;
    /* tdm_cuda_engine_set_pre: enqueued after each forward's plan copy, before its first kernel */
    tdm_cuda_engine_pre_fn pre;
    void *pre_ctx;
};

/* plan block layout, in uint32 units */
enum { P_IDS = 0, P_POS = 1, P_PTOFF = 2, P_OUT = 3, P_NACT = 4, P_TILES = 5, P_PAGES = 6 };
static inline size_t plan_off(const tdm_cuda_engine_t *e, int part)
{
    return part < P_NACT     ? (size_t)part * e->prow
           : part == P_NACT  ? 4 * (size_t)e->prow
           : part == P_TILES ? 4 * (size_t)e->prow + 32
                             : 4 * (size_t)e->prow + 32 + e->tiles_cap;
}

static inline size_t dtype_size(int dt)
{
    return dt == TDM_DTYPE_F32 ? 4 : 2;
}

static inline uint64_t align256(uint64_t x)
{
    return (x + 255) & ~(uint64_t)255;
}

/* engine_load.cu */
tdm_status_t tdm_cuda_engine_upload(tdm_cuda_engine_t *e, const tdm_model_view_t *v);
tdm_status_t tdm_cuda_engine_check_view(const tdm_model_view_t *v, int wdt);
/* engine_fwd.cu: 1 when the one-row GEMV of K inputs with the fused RMSNorm runs the streaming
 * V2 form, the one with the SwiGLU and argmax epilogues (ops_gemv.cu gemv1_kernel) */
int tdm_cuda_engine_gemv_fusable(const tdm_cuda_engine_t *e, uint32_t n, uint32_t K);
/* engine_tp.cu: the collectives of a forward with their I2 marks (engine.h) */
tdm_status_t tdm_cuda_engine_tp_init(tdm_cuda_engine_t *e);
void tdm_cuda_engine_tp_free(tdm_cuda_engine_t *e);
void tdm_cuda_engine_drop_graphs(tdm_cuda_engine_t *e);
/* The I2 marks of a collective fold into the kernels beside it (no launch of their own): the
 * kernel launched just before it carries tdm_cuda_engine_mark_enter (its enter mark), and, when
 * the caller passes leave_folds, the next kernel launched carries tdm_cuda_engine_mark_next (its
 * leave mark; an enter mark supersedes it: the count of collectives done is mark / 2). A mark not
 * folded is written by a stream write of its own (cuStreamWriteValue32, else a one-thread
 * kernel); tdm_cuda_engine_mark_flush writes a leave mark still pending at the forward's end. */
tdm_cuda_mark_t tdm_cuda_engine_mark_enter(tdm_cuda_engine_t *e);
tdm_cuda_mark_t tdm_cuda_engine_mark_next(tdm_cuda_engine_t *e);
tdm_status_t tdm_cuda_engine_mark_flush(tdm_cuda_engine_t *e);
tdm_status_t tdm_cuda_engine_allreduce(tdm_cuda_engine_t *e, float *buf, size_t n, int leave_folds);
/* lm_head's slice (lg_local, m rows of vr) gathered into e->logits (m rows of V) */
tdm_status_t tdm_cuda_engine_gather_logits(tdm_cuda_engine_t *e, uint32_t m, int leave_folds);
/* the runs of a forward over n rows and m logit rows (what the marks will count) */
void tdm_cuda_engine_plan_runs(tdm_cuda_engine_t *e, uint32_t n, uint32_t m);
tdm_status_t tdm_cuda_engine_wait(tdm_cuda_engine_t *e);

#endif
