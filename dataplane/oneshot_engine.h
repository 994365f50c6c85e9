/*
 * oneshot_engine.h — a small CPU engine for runs that need no scheduler: the one-shot CLI and
 * bench/cpu_engine. It owns the model's rank-0 view (TP 1), the CPU backend, a KV pool sized for
 * `n_seqs` sequences of at most `max_tokens` positions each, and the forward graph's buffers.
 *
 * prefill() runs a whole prompt for one sequence and returns its last position's logits;
 * decode() appends one token to each of the first `n` sequences in one batched forward and returns
 * their logits, row i for sequence i. Logits stay valid until the next call. Sequences are
 * independent (docs/design.md §9: batch-invariant kernels), so a batched decode gives every
 * sequence the logits it would get alone. reset() empties every sequence (pages returned) for
 * reuse. Not thread-safe: one caller (the backend has its own workers).
 */
#ifndef TDM_DATAPLANE_ONESHOT_ENGINE_H
#define TDM_DATAPLANE_ONESHOT_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/layout.h>
#include <tdm/model.h>
#include <tdm/status.h>

typedef struct tdm_oneshot_engine tdm_oneshot_engine_t;

/* threads 0 = the backend's default (env TDM_CPU_THREADS, else online CPUs). */
tdm_status_t tdm_oneshot_engine_init(const tdm_model_t *m, tdm_dtype_t kv_dtype, uint32_t page_size,
                                     uint32_t n_seqs, size_t max_tokens, uint32_t threads,
                                     tdm_oneshot_engine_t **ret, char *err, size_t err_len);
void tdm_oneshot_engine_free(tdm_oneshot_engine_t *e);

tdm_status_t tdm_oneshot_engine_prefill(tdm_oneshot_engine_t *e, uint32_t seq, const int32_t *ids,
                                        uint32_t n, const float **ret_logits);
tdm_status_t tdm_oneshot_engine_decode(tdm_oneshot_engine_t *e, const int32_t *ids, uint32_t n,
                                       const float **ret_logits);
void tdm_oneshot_engine_reset(tdm_oneshot_engine_t *e);

uint64_t tdm_oneshot_engine_weight_bytes(const tdm_oneshot_engine_t *e);
uint32_t tdm_oneshot_engine_threads(const tdm_oneshot_engine_t *e);

#endif
