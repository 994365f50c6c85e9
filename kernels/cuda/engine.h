/*
 * kernels/cuda/engine.h — the GPU forward of one rank (any tp_size, below): the Llama/Qwen2 graph
 * of dataplane/model/forward.c on the CUDA kernels, with the weights and the paged KV pool resident
 * on the device.
 *
 * Contract:
 *  - Weights are copied once from a tdm_model_view_t (any of bf16/f16/f32, kept in that dtype;
 *    q|k|v and gate|up concatenated row-wise so each is one GEMV). Activations are fp32, every
 *    product accumulates in fp32; GEMMs of more than `gemv_max_rows` rows with bf16 weights go
 *    through cuBLAS on bf16 copies of the activations.
 *  - The KV pool is one cudaMalloc laid out by the same descriptor as the host pool
 *    (tdm_kv_layout_init + tdm_kv_layout_region_offset) and sized by the same configurator
 *    (tdm_kv_pool_configure) from a budget of mem_fraction_static × the free device memory at
 *    init, minus weights and scratch. KV dtypes: bf16 and fp8 e4m3 (+ scales).
 *  - Page ids are chosen by the caller (the leader's allocator); the engine validates them.
 *  - A decode call (every sequence contributes one token, at most max_batch of them) replays a
 *    CUDA graph captured once per batch-size bucket (1, 2, 4, 8, 16, 32, ...); the call copies its
 *    plan (ids, positions, page tables) into fixed device buffers, launches, and waits once for
 *    the argmax (and logits when asked). Nothing synchronises per layer. Other calls (prefill
 *    chunks, mixed batches) launch the same kernels eagerly.
 *  - Results are held to a tolerance against the CPU backend, not bit-exactness (docs/design.md
 * §9). Threading: one thread at a time per engine. Errors: TDM_ERR_INVAL (shapes), TDM_ERR_RANGE
 * (ids, positions, pages), TDM_ERR_OVERFLOW (batch beyond the limits), TDM_ERR_UNSUPPORTED (dtype,
 * head size, GQA group > 8), TDM_ERR_NOMEM, TDM_ERR_CUDA (logged once), the coll's codes; a failed
 * forward may have written KV of the positions of that call only.
 */
#ifndef TDM_KERNELS_CUDA_ENGINE_H
#define TDM_KERNELS_CUDA_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/kv.h>
#include <tdm/model.h>
#include <tdm/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_cuda_engine tdm_cuda_engine_t;

typedef struct tdm_cuda_engine_opts {
    double mem_fraction_static; /* share of the free device memory for weights + KV (0.9) */
    uint32_t max_tokens;        /* rows of one call (prefill chunk), default 4096 */
    uint32_t max_batch;         /* sequences of one call and largest graph bucket, default 32 */
    uint32_t max_pages_per_seq; /* default 256 */
    uint32_t max_pages;         /* cap on the pool's pages (0: as many as fit) */
    uint32_t max_logit_rows;    /* logits rows of one call, default max(max_batch, 256) */
    uint32_t gemv_max_rows;     /* rows up to which the fp32 GEMV path runs, default 1 (env
                                   TDM_CUDA_GEMV_ROWS); above it the bf16 path */
    int use_graphs;             /* 1 (default): decode through CUDA graphs; env TDM_CUDA_GRAPHS=0 */
    int use_pdl;                /* 1 (default): programmatic dependent launch between kernels;
                                   env TDM_CUDA_PDL=0 */
    int pdl_early;              /* 1 (default, run 12): in decode calls of <= 8 rows every kernel
                                   lets its dependents launch before its PDL wait instead of
                                   after (they still wait for it to complete before reading
                                   its output; run 12b: bs1 833 against 853-855 us/step, bs8
                                   1338 against 1366, bs32 1533 against 1477, hence the row
                                   cap); 0: after, always; env TDM_CUDA_PDL_EARLY */
    int use_skinny;             /* 1 (default): bf16 GEMMs of <= 32 rows on the tensor-core
                                   skinny kernel, else cuBLAS; env TDM_CUDA_SKINNY=0 */
    int use_mma_attn;           /* 1 (default): decode attention on the tensor cores (bf16 KV,
                                   hd 64/128, G <= 8), else the CUDA-core split-K kernel; env
                                   TDM_CUDA_MMA_ATTN=0 */
    int gemv_ksplit;            /* one-row GEMVs: 3 (default, run 8/9) the streaming form V2
                                   (ops.cu gemv1_kernel: RMSNorm weight staged before the PDL
                                   wait, one barrier); 5: V3 (V2 with two batches of weight
                                   loads issued before the PDL wait; run 8b: slower); 4: V2 on
                                   one block per SM (the next kernel's blocks fit beside it;
                                   slower); 2: run 5's streaming form; 1: <= 4096 outputs split
                                   K over the block's warps (run 4); 0: none of these; 6: V2
                                   compiled for 3 resident blocks per SM (80 registers, 16-32
                                   bytes of spills) on a grid of 2 per SM (run 10: bs1 900
                                   against V2's 1092); 7 and 8: V2 in blocks of 4 and 2 warps
                                   (16 warps per SM either way: a block leaves as soon as its
                                   few warps finish, so the next GEMV's blocks start earlier in
                                   the tail); 9: V2 with x staged through registers in batches
                                   of 4 float4 per thread (run 11c; 3 stages it by cp.async,
                                   every piece in flight at once, run 11d); 10, 11: V4 = V2
                                   with a shared-memory ring of 2 or 1 more weight batches per
                                   lane (cp.async; 1 + ring batches before the PDL wait, the
                                   ring's in flight while one is multiplied; run 12); env
                                   TDM_CUDA_GEMV_KSPLIT */
    int attn_cluster;           /* 1 (default, run 8): the tensor-core decode attention merges
                                   its splits inside the kernel (a thread-block cluster per row
                                   and KV head) and issues its first K/V tiles before the PDL
                                   wait; 0: the combine kernel (run 4); env
                                   TDM_CUDA_ATTN_CLUSTER=0 */
    uint32_t attn_splits;       /* tensor-core decode attention: the most splits per (row, KV
                                   head) (0: the default, 8; 1..8); env TDM_CUDA_ATTN_SPLITS */
    uint32_t attn_min_splits;   /* the fewest (0: the policy's, one split from 64 (row, KV head)
                                   pairs on; 1..8, at most attn_splits): long contexts at large
                                   batches; env TDM_CUDA_ATTN_MIN_SPLITS (a measurement knob,
                                   bench/gpu-mixed-price.sh "long") */
    uint32_t attn_balance;      /* 0: the splits above depend on the rows alone; P
                                   (32..65536; default 256, measured on an H100: serving at
                                   c = 64 x1.060, docs/cuda.md "Sampling on the device, and
                                   the serving bench"): a call whose longest row has more than P
                                   positions a split doubles its splits (up to attn_splits)
                                   while every (row, KV head, split) block still fits on the SMs
                                   at once, so a step's decode attention is not as long as its
                                   longest row's (one decode graph per bucket and split count);
                                   env TDM_CUDA_ATTN_BALANCE=P (0: off) */
    int swiglu_fused;           /* 1 (default, run 11): bf16 weights, one-row GEMVs on the
                                   streaming V2 form (ksplit 3): gate|up is stored with its rows
                                   interleaved (gate_0, up_0, ...) and the one-row gate|up GEMV
                                   writes silu(gate) * up from its epilogue, so the down GEMV
                                   stages I floats instead of 2 I plus the SiLU (batched calls:
                                   silu_mul reads the interleaved columns); bit-identical; env
                                   TDM_CUDA_SWIGLU=0 */
    int argmax_fused;           /* 1 (default, run 11): one logits row through the streaming V2
                                   GEMV finds its argmax in the lm_head epilogue (warp
                                   candidates, the last block merges): no argmax node; same ids;
                                   off while l2pf_mb is set (argmax carries that prefetch); env
                                   TDM_CUDA_ARGMAX_FUSED=0 */
    int embed_fused;            /* 1 (default, run 12): one row's embedding lookup folded into
                                   layer 0's qkv GEMV (bf16, the streaming V2/V4 forms): its
                                   staging reads the table row, block 0 writes the residual
                                   row; no embed node; bit-identical; env
                                   TDM_CUDA_EMBED_FUSED=0 */
    uint32_t l2pf_mb;           /* L2 prefetch of upcoming weights in decode (docs/cuda.md,
                                   "L2 prefetch"): 0 (default) off; else the decode attention
                                   grid of each layer carries extra blocks that prefetch the
                                   first l2pf_mb MiB of the layer's o|gate_up weights into L2
                                   while the attention is latency-bound, and argmax's grid the
                                   next step's layer-0 qkv and as much again; results never
                                   change. Env TDM_CUDA_L2_PREFETCH (MiB, <= 4096) */
    uint32_t l2pf_tail_mb;      /* 0 (default) off; else each one-row streaming GEMV prefetches
                                   from its tail the first MiB of the next GEMV's weights (past
                                   what l2pf_mb covers). Env TDM_CUDA_L2_PREFETCH_TAIL */
    int l2pf_op;                /* 0..3, tdm_cuda_l2pf_t op (0 default: TMA bulk prefetch,
                                   evict_normal; bit 0 evict_last; bit 1 per-line prefetch);
                                   env TDM_CUDA_L2_PREFETCH_OP */
    int l2pf_early;             /* 1: the attention/argmax prefetch blocks issue before the PDL
                                   wait (0 default: after); env TDM_CUDA_L2_PREFETCH_EARLY */
    int ablate;                 /* benchmark diagnostics only, results are WRONG when set: 0
                                   (default), or TDM_CUDA_ABLATE_* bits of launches left out */
    int mixed_decode;           /* 1: in a call that mixes prefill chunks with
                                   one-token rows (the overlap scheduler's mixed batch), the
                                   one-token rows are laid out first and attend through the
                                   tensor-core decode attention (the GQA group per tile, RoPE and
                                   the KV write fused, as in a decode call), the chunks through
                                   the flash prefill attention; 0: every row through flash tiles
                                   (a one-token row is a 64-row tile of its own per query head,
                                   reading its K/V once per query head). Needs use_mma_attn and
                                   bf16 KV. 1 (default, docs/cuda.md); env
                                   TDM_CUDA_MIXED_DECODE=0 */
    int gemm_tune;              /* 1: before a decode graph is captured, each of its cuBLAS
                                   GEMM shapes is timed over the layers' weights with
                                   cublasGemmEx's choice and cuBLASLt's heuristics, and the
                                   fastest kept (gemm_lt.h); results may differ in the last bits
                                   from cublasGemmEx's. 0 (default): cublasGemmEx always (the
                                   kept algorithms were 4-13 % faster alone and the decode step
                                   no faster: docs/cuda.md "Where a step's time goes"); env
                                   TDM_CUDA_GEMM_TUNE */
    uint32_t tile_max_rows;     /* bf16 GEMMs of up to this many rows (and more than the skinny
                                   kernel's) on the tile kernel (cuda_int.h tdm_cuda_gemm_tile:
                                   each weight read once for every row, the rows' MMAs under
                                   the weight stream), above it cuBLAS; 0 (default: its forms
                                   measured so far were slower than cuBLAS, docs/cuda.md "A GEMM
                                   for 16-256 rows"): cuBLAS only; at most
                                   TDM_CUDA_TILE_MAX_ROWS; env TDM_CUDA_TILE_GEMM */
    int stream_priority;        /* 0 (default): the engine's stream at the device's default
                                   (lowest) priority; 1: its highest, so that this engine's
                                   pending blocks go first where another engine's stream shares
                                   the SMs (bench/gpu_serving_engine --concurrent: a prompt chunk
                                   on a second engine beside the decode step) */
    tdm_dtype_t kv_dtype;       /* BF16 (default) or FP8_E4M3 */
    uint32_t page_size;         /* default TDM_KV_PAGE_SIZE_DEFAULT */
} tdm_cuda_engine_opts_t;

/* ablate bits: the attention block (RoPE + KV write, attention, combine) of every layer; the
 * o-projection and the MLP of every layer (the QKV projection and the lm_head stay). */
#define TDM_CUDA_ABLATE_ATTN 1
#define TDM_CUDA_ABLATE_GEMM 2
/* the down GEMV stages I floats of the gate without SiLU·up (one row, SwiGLU epilogue off) */
#define TDM_CUDA_ABLATE_SILU 4

void tdm_cuda_engine_opts_default(tdm_cuda_engine_opts_t *o);

/* One sequence's span of new tokens; the same fields as tdm_graph_seq_t. */
typedef struct tdm_cuda_seq {
    const int32_t *tokens;
    uint32_t n_tokens;
    uint32_t pos0;
    const uint32_t *pages; /* covers [0, pos0 + n_tokens) */
    uint32_t n_pages;
    int all_logits;
} tdm_cuda_seq_t;

/*
 * Tensor parallelism (docs/design.md §3, §9): a view of tp_size N > 1 (weights sharded at load by
 * tdm_model_view_init: q/k/v and gate/up by rows, o and down by columns, KV heads split, embedding
 * and lm_head by vocab rows) runs the Megatron forward: the vocab-parallel embedding all-reduced,
 * an all-reduce of the residual after o and after down (rank 0 adds its partial to the residual,
 * the others contribute theirs alone), the logits slice of each rank all-gathered in rank order and
 * laid out as the full vocab before the argmax. The collectives are the caller's (dataplane/tp:
 * NCCL or the host-staged shared-memory backend), enqueued on the engine's stream, so they are
 * captured in the decode graphs with the kernels. A coll with N = 1 issues every collective too
 * (the one-rank NCCL communicator), with results equal to the engine without one bit for bit.
 *
 * I2 on the device: with `mark` set, each collective k of a forward is bracketed by two 4-byte
 * writes into that host-mapped word, 2k+1 before it and 2k+2 after it (constants of the capture),
 * stored by the kernels beside it (the one that feeds it and the one that reads its result, after
 * their PDL wait: no launch of their own; a stream write where no kernel can carry one).
 * step_begin announces the forward's collectives as runs of (op, bytes, count) before
 * the launch, step_end closes the step after the wait: the recorder (dataplane/tp/comm.c) turns
 * word and runs into in_coll / coll_seq / coll_hash of the rank's progress slot.
 */
typedef struct tdm_cuda_coll_run {
    uint32_t op;    /* tdm_coll_op_t */
    uint32_t count; /* collectives of this run */
    uint64_t bytes; /* bytes of each */
} tdm_cuda_coll_run_t;

#define TDM_CUDA_COLL_RUNS 4
/* the ops of the runs: tdm_coll_op_t's values (include/tdm/progress.h; C11 atomics there) */
#define TDM_CUDA_COLL_ALLREDUCE 1u
#define TDM_CUDA_COLL_ALLGATHER 3u

typedef struct tdm_cuda_coll {
    uint32_t rank, size;
    void *ctx;
    /* in-place sum of n floats of device memory, enqueued on stream (a cudaStream_t) */
    tdm_status_t (*allreduce)(void *ctx, float *buf, size_t n, void *stream);
    /* out (device): size * n floats, rank r's n floats at r * n */
    tdm_status_t (*allgather)(void *ctx, const float *in, float *out, size_t n, void *stream);
    /* wait for the stream's work (errors, abort and the deadline polled); NULL: synchronize */
    tdm_status_t (*sync)(void *ctx, void *stream);
    void (*step_begin)(void *ctx, const tdm_cuda_coll_run_t *runs, uint32_t n_runs);
    void (*step_end)(void *ctx, tdm_status_t st);
    uint32_t *mark; /* host-mapped word of the marks (cudaHostRegisterMapped); NULL: no marks */
} tdm_cuda_coll_t;

/* view must outlive the call only (weights are copied). A view of tp_size > 1 needs a coll of
 * that size and rank (tdm_cuda_engine_set_coll) before its first forward. */
tdm_status_t tdm_cuda_engine_init(const tdm_model_view_t *view, const tdm_cuda_engine_opts_t *opts,
                                  tdm_cuda_engine_t **ret_engine);
void tdm_cuda_engine_free(tdm_cuda_engine_t *e);

/* Attach the collectives (copied; ctx must outlive the engine) or detach them (NULL: only for
 * tp_size 1). Drops the captured graphs. TDM_ERR_INVAL when size or rank differ from the view's. */
tdm_status_t tdm_cuda_engine_set_coll(tdm_cuda_engine_t *e, const tdm_cuda_coll_t *coll);
/* Benchmark diagnostic: the I2 marks on (1, the default) or off; drops the captured graphs. */
void tdm_cuda_engine_set_marks(tdm_cuda_engine_t *e, int on);

uint32_t tdm_cuda_engine_num_pages(const tdm_cuda_engine_t *e);
const tdm_kv_layout_t *tdm_cuda_engine_layout(const tdm_cuda_engine_t *e);
/* The device pool as the kernels see it (base is device memory). */
const tdm_kv_buffers_t *tdm_cuda_engine_kv(const tdm_cuda_engine_t *e);
uint64_t tdm_cuda_engine_weight_bytes(const tdm_cuda_engine_t *e);

/* HiCache (kernels/cuda/hicache.h): from now on attention reads each layer of the pool through
 * `gate` (tdm_kv_layer_acquire_dev; the compute stream waits on the layer's copy event), for the
 * batch of the next forward calls set by set_batch (b NULL: none). A forward whose batch depends
 * on a load launches eagerly (no decode graph). */
struct tdm_kv_gate;
struct tdm_kv_batch;
tdm_status_t tdm_cuda_engine_use_gate(tdm_cuda_engine_t *e, struct tdm_kv_gate *gate);
void tdm_cuda_engine_set_batch(tdm_cuda_engine_t *e, const struct tdm_kv_batch *b);

/* A step enqueued on the forward's stream after its last kernel and before its one wait, with
 * the logits rows of the call in device memory (m rows of V floats, row-major; the full vocab at
 * any tp_size): the device sampler (kernels/cuda/sample.h tdm_cuda_sampler_enqueue) reads them
 * there, so a forward copies only what the sampler returns. fn NULL: none. */
typedef tdm_status_t (*tdm_cuda_engine_post_fn)(void *ctx, const float *d_logits, uint32_t m,
                                                uint32_t V, void *stream);
void tdm_cuda_engine_set_post(tdm_cuda_engine_t *e, tdm_cuda_engine_post_fn fn, void *ctx);

/* A step enqueued after each forward's plan copy and before its first kernel, with the device
 * address of the call's input ids (one u32 per row): the overlap loop writes there the ids the
 * previous forward sampled, still on the device (kernels/cuda/sample.h tdm_cuda_sampler_fix_ids).
 * The caller's row k (its sequences' tokens in order, k < n_rows) is device row row_of[k]
 * (host memory; NULL: row k itself): a mixed call lays its one-token rows out first
 * (opts.mixed_decode). fn NULL: none. */
typedef tdm_status_t (*tdm_cuda_engine_pre_fn)(void *ctx, uint32_t *d_ids, const uint32_t *row_of,
                                               uint32_t n_rows, void *stream);
void tdm_cuda_engine_set_pre(tdm_cuda_engine_t *e, tdm_cuda_engine_pre_fn fn, void *ctx);

/* Pipelined forwards (the overlap loop, docs/serving.md): launch enqueues the whole call (plan
 * copy, pre, the kernels or the bucket's graph, post) and returns without waiting; finish waits
 * for the call launched in `slot` (0 or 1). At most two calls in flight, in alternate slots; a
 * call's host inputs are consumed by launch (the host plan alternates between two pinned
 * buffers). No logits or ids copy: the post hook brings back what it needs. TDM_ERR_STATE with
 * collectives set (tp > 1) or a HiCache gate: those forwards stay synchronous. */
tdm_status_t tdm_cuda_engine_launch(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs,
                                    uint32_t n_seqs, uint32_t cap_rows, uint32_t *ret_rows,
                                    int slot);
tdm_status_t tdm_cuda_engine_finish(tdm_cuda_engine_t *e, int slot);

/* Run one batch. Rows of logits as in tdm_graph_forward; logits (host, cap_rows × vocab) may be
 * NULL; ret_ids (host, cap_rows) receives each logits row's argmax and may be NULL. */
tdm_status_t tdm_cuda_engine_forward(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs,
                                     uint32_t n_seqs, float *logits, int32_t *ret_ids,
                                     uint32_t cap_rows, uint32_t *ret_rows);

/* Benchmark diagnostic: one decode call of seqs through forward (it captures the bucket's graph
 * and leaves its plan on the device), then that graph replayed reps times back to back with no
 * host round trip between replays (each replay writes the same KV slots); *ret_us = GPU time per
 * replay (CUDA events). The difference to a step through forward is the host's share. */
tdm_status_t tdm_cuda_engine_replay_us(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *seqs,
                                       uint32_t n_seqs, uint32_t reps, double *ret_us);

#ifdef __cplusplus
}
#endif

#endif
