/*
 * dataplane/model/graph.h — the Llama/Qwen2 forward pass over a paged KV cache, on one rank.
 *
 * One call computes a batch of sequences, each contributing a span of new tokens at absolute
 * positions [pos0, pos0 + n_tokens): a prefill chunk of any size or one decode token. For every
 * layer it writes the span's K/V into the cache through the sequence's page table, attends
 * causally over everything the cache holds for that sequence (earlier chunks included), runs the
 * MLP, and finally produces logits for the requested rows: the last token of each sequence, or
 * every token when all_logits is set. Activations are fp32; Qwen2 q/k/v biases and tied
 * embeddings are honoured through the weight view.
 *
 * Tensor parallelism: the graph runs on a per-rank view (include/tdm/model.h). The partial
 * outputs of the row-parallel layers (o_proj, down_proj) go through coll->allreduce_sum, which
 * must combine rank partials with tdm_reduce_tree_combine() in rank order (kernels/backend.h rule
 * 2). The embedding is vocab-parallel: each rank writes the rows of the ids in its vocab slice and
 * -0.0 everywhere else, and the same allreduce_sum completes it (exact: x + -0.0 == x bit for bit,
 * -0.0 included). The logits are too: each rank computes its slice and coll->allgather assembles
 * the rows (in row chunks bounded by a fixed scratch). With tp_size 1 no collective is called.
 * tdm_graph_coll_local_* is an in-process collective for N ranks on N threads (tests, and the
 * reference for the shm backend).
 *
 * Determinism: on the CPU backend, logits are bit-identical whatever the chunking of a prompt, the
 * batch composition and order, the thread count, and (for power-of-two TP whose row-parallel
 * K shares are multiples of 64) the TP size.
 *
 * Threading: a graph is used by one thread at a time. Memory: scratch for max_tokens rows is
 * allocated at init; forward allocates nothing. Errors: TDM_ERR_INVAL for shapes that do not fit
 * the view or the KV layout, TDM_ERR_RANGE for token ids, positions or page tables out of range,
 * TDM_ERR_OVERFLOW when the batch exceeds max_tokens or the logits buffer; a failed forward may
 * have written KV for the positions of this call and nothing else.
 */
#ifndef TDM_DATAPLANE_GRAPH_H
#define TDM_DATAPLANE_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/hicache.h>
#include <tdm/kv.h>
#include <tdm/model.h>
#include <tdm/status.h>

#include "kernels/backend.h"

typedef struct tdm_graph_coll {
    void *ctx;
    /* Sum buf[0..n) over the group's ranks (tree over ranks, rank order); every rank receives the
     * result in buf. NULL only with tp_size 1. */
    tdm_status_t (*allreduce_sum)(void *ctx, float *buf, size_t n);
    /* Concatenate every rank's in[0..n) in rank order into out[0..n_ranks*n) (same n on every
     * rank). NULL only with tp_size 1. */
    tdm_status_t (*allgather)(void *ctx, const float *in, float *out, size_t n);
} tdm_graph_coll_t;

typedef struct tdm_graph_seq {
    const int32_t *tokens; /* n_tokens new tokens */
    uint32_t n_tokens;     /* >= 1 */
    uint32_t pos0;         /* absolute position of tokens[0] == tokens already in the cache */
    const uint32_t *pages; /* page table covering [0, pos0 + n_tokens) */
    uint32_t n_pages;
    int all_logits; /* 0: logits of the last token only; 1: of every token */
} tdm_graph_seq_t;

typedef struct tdm_graph tdm_graph_t;

/* view, kv and be must outlive the graph; coll is copied (may be NULL when tp_size is 1). */
tdm_status_t tdm_graph_init(const tdm_model_view_t *view, const tdm_kv_buffers_t *kv,
                            const tdm_backend_t *be, const tdm_graph_coll_t *coll,
                            uint32_t max_tokens, tdm_graph_t **ret_graph);
void tdm_graph_free(tdm_graph_t *g);
/* Read the KV through `gate` (HiCache's: same pool, loads in flight) instead of the graph's own
 * gate over `kv`; the graph never keeps a buffers pointer of its own, so every layer's KV is
 * obtained through tdm_kv_layer_acquire (I7). TDM_ERR_INVAL when the gate's pool differs. */
tdm_status_t tdm_graph_use_gate(tdm_graph_t *g, tdm_kv_gate_t *gate);
/* The loads the next forward depends on (NULL: none). */
void tdm_graph_set_batch(tdm_graph_t *g, const tdm_kv_batch_t *b);

/* Run one batch. logits receives ret_rows rows of vocab floats, sequences in order (per sequence
 * 1 row, or n_tokens rows when all_logits); cap_rows bounds it. */
tdm_status_t tdm_graph_forward(tdm_graph_t *g, const tdm_graph_seq_t *seqs, uint32_t n_seqs,
                               float *logits, uint32_t cap_rows, uint32_t *ret_rows);

/* Whether this rank's TP shares satisfy the bit-exactness conditions of backend.h rule 2. */
int tdm_graph_tp_exact(const tdm_graph_t *g);

/* In-process collective for n_ranks threads. */
typedef struct tdm_graph_coll_local tdm_graph_coll_local_t;
tdm_status_t tdm_graph_coll_local_init(uint32_t n_ranks, tdm_graph_coll_local_t **ret);
void tdm_graph_coll_local_free(tdm_graph_coll_local_t *c);
/* The collective handle rank `rank` passes to tdm_graph_init. */
tdm_graph_coll_t tdm_graph_coll_local_rank(tdm_graph_coll_local_t *c, uint32_t rank);

#endif
