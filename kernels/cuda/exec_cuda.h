/*
 * kernels/cuda/exec_cuda.h — the CUDA engine (engine.h) behind the serving executor's forward:
 * the adapter dataplane/sched/exec.c uses with `--device cuda` in place of tdm_graph_init /
 * tdm_graph_forward, with the same sequence spans (tdm_graph_seq_t) and the same logits contract.
 *
 * Contract:
 *  - init sizes everything from the executor's configuration: max_seqs sequences and max_tokens
 *    rows per call (the decode graphs are captured per batch bucket up to max_seqs), page tables
 *    of up to ceil(max_context / page_size) pages, and a KV pool of mem_fraction_static × the free
 *    device memory at init, minus weights and scratch, in whole pages (tdm_kv_pool_configure),
 *    capped at max_pages when non-zero. The pool's page count is tdm_exec_cuda_num_pages: the
 *    scheduler's page allocator must be built over exactly that many pages (the engine validates
 *    every page id against it) with tdm_exec_cuda_layout.
 *  - forward: seqs and logits exactly as tdm_graph_forward (logits of the last token of each
 *    sequence, or of every token with all_logits; rows in order; cap_rows rows of vocab floats);
 *    returns once the logits are on the host. Decode calls (one token per sequence) replay CUDA
 *    graphs, other calls (prefill chunks, mixed) launch eagerly.
 *  - forward_sample: the same forward, then the device sampler on the logits in device memory;
 *    only the sampled ids (and requested logprobs) come back, plus the logits rows of requests
 *    the host must sample (penalties).
 *  - any tp_size: a view of tp_size > 1 runs on device tp_rank mod the visible devices and needs
 *    its collectives (set_coll, engine.h "Tensor parallelism") before the first forward.
 * Errors: init writes a one-line reason into err; TDM_ERR_INVAL (configuration), the engine's
 * codes otherwise (TDM_ERR_NOMEM when the fraction leaves no room for one page, TDM_ERR_CUDA).
 * Threading: one thread at a time per adapter.
 */
#ifndef TDM_KERNELS_CUDA_EXEC_CUDA_H
#define TDM_KERNELS_CUDA_EXEC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/kv.h>
#include <tdm/model.h>
#include <tdm/status.h>

#include "../../dataplane/model/graph.h"
#include "engine.h"
#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_exec_cuda_cfg {
    const tdm_model_view_t *view; /* must outlive init only (weights are copied) */
    tdm_dtype_t kv_dtype;         /* BF16 or FP8_E4M3 */
    uint32_t page_size;
    uint32_t max_seqs, max_tokens, max_context;
    uint32_t max_pages;         /* cap on the pool (0: as many as fit) */
    double mem_fraction_static; /* (0, 1] */
} tdm_exec_cuda_cfg_t;

typedef struct tdm_exec_cuda tdm_exec_cuda_t;

tdm_status_t tdm_exec_cuda_init(const tdm_exec_cuda_cfg_t *cfg, tdm_exec_cuda_t **ret, char *err,
                                size_t err_len);
void tdm_exec_cuda_free(tdm_exec_cuda_t *x);

/* The group's collectives (engine.h tdm_cuda_coll_t; NULL detaches them at tp_size 1). */
tdm_status_t tdm_exec_cuda_set_coll(tdm_exec_cuda_t *x, const tdm_cuda_coll_t *coll);
uint32_t tdm_exec_cuda_num_pages(const tdm_exec_cuda_t *x);
const tdm_kv_layout_t *tdm_exec_cuda_layout(const tdm_exec_cuda_t *x);
uint64_t tdm_exec_cuda_kv_bytes(const tdm_exec_cuda_t *x);
/* The pool's device memory (base: the start of one cudaMalloc), for the PD transfer engine. */
const tdm_kv_buffers_t *tdm_exec_cuda_kv(const tdm_exec_cuda_t *x);
uint64_t tdm_exec_cuda_weight_bytes(const tdm_exec_cuda_t *x);

/* HiCache: attention reads the pool through `gate` (engine.h tdm_cuda_engine_use_gate), for the
 * batch set before each forward (b NULL: no load in flight); the tier's device half
 * (kernels/cuda/hicache.h). */
tdm_status_t tdm_exec_cuda_use_gate(tdm_exec_cuda_t *x, tdm_kv_gate_t *gate);
void tdm_exec_cuda_set_batch(tdm_exec_cuda_t *x, const tdm_kv_batch_t *b);
const tdm_hicache_dev_t *tdm_exec_cuda_hicache_dev(void);

tdm_status_t tdm_exec_cuda_forward(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs, uint32_t n_seqs,
                                   float *logits, uint32_t cap_rows, uint32_t *ret_rows);

/* forward with the sampling on the device (sample.h): reqs[i] for logits row i (one per
 * sequence: no all_logits); a row's result in outs[i] (host_logits row i holds the logits of
 * the rows marked `host`, and only those are copied). One wait per call, as forward. */
tdm_status_t tdm_exec_cuda_forward_sample(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs,
                                          uint32_t n_seqs, const tdm_cuda_sample_req_t *reqs,
                                          float *host_logits, tdm_cuda_sample_out_t *outs,
                                          uint32_t *ret_rows);

/* forward_sample pipelined (the overlap loop, docs/serving.md): launch enqueues the call and
 * returns at once, its results in *ret_slot (0 or 1); finish_sample waits for the call of `slot`
 * and copies its n results to outs. prev_dst/prev_src (n_prev pairs; NULL when 0): the input
 * token at index prev_dst[i] of the call's tokens (sequences' tokens in order) is the id sampled
 * for row prev_src[i] of the call launched just before it, written on the device before the
 * first kernel (the ids never come back to the host between the two). No `host` rows
 * (TDM_ERR_INVAL). At most two calls in flight; TDM_ERR_STATE at tp > 1 or with a HiCache gate. */
tdm_status_t tdm_exec_cuda_launch_sample(tdm_exec_cuda_t *x, const tdm_graph_seq_t *seqs,
                                         uint32_t n_seqs, const tdm_cuda_sample_req_t *reqs,
                                         const uint32_t *prev_dst, const uint32_t *prev_src,
                                         uint32_t n_prev, uint32_t *ret_rows, int *ret_slot);
tdm_status_t tdm_exec_cuda_finish_sample(tdm_exec_cuda_t *x, int slot, tdm_cuda_sample_out_t *outs,
                                         uint32_t n);

#ifdef __cplusplus
}
#endif

#endif
