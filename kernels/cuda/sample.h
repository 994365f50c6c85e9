/*
 * kernels/cuda/sample.h — next-token choice on the device, from the logits rows the forward left
 * in device memory, with the host sampler's rules (include/tdm/sample.h) and its RNG stream
 * (include/tdm/sample_fx.h): greedy (ties → lowest id), temperature / top-k / top-p / min-p with
 * one draw for (seed, step), the raw log-softmax logprob of the chosen token and the top-N list;
 * a row holding NaN or +inf, or no finite logit, is an error for that row (status
 * TDM_ERR_INVAL), not a skipped value. Penalties need the request's history, which stays on the
 * host: a row whose request has them is marked `host`, and its logits row is copied back for
 * the host sampler instead (only such rows are copied).
 *
 * Equality with the host: the chosen token is bit-identical (same candidate sets, same integer
 * probabilities, same draw). Logprobs use the device's expf/logf, within 1e-5 of the host's.
 *
 * Use: tdm_cuda_sampler_init for up to max_rows rows of vocab V; before a forward fill
 * tdm_cuda_sampler_reqs (pinned host memory) for its logits rows and set the host destination
 * of `host` rows; tdm_cuda_sampler_enqueue (the engine's post hook, tdm_cuda_engine_set_post)
 * uploads the requests, runs one block per row and copies the results back on the forward's
 * stream; after the forward's wait, tdm_cuda_sampler_outs holds them. No synchronisation of its
 * own. Threading: one thread at a time per sampler.
 *
 * Pipelined forwards (the overlap loop, docs/serving.md): the host memory of requests and
 * results comes in two sets; tdm_cuda_sampler_flip before filling the requests of a forward
 * launched while the previous one still runs, and tdm_cuda_sampler_outs_of(set) for the results
 * of each once it completed. The ids just sampled stay on the device: tdm_cuda_sampler_fix_ids,
 * enqueued on the next forward's stream before its first kernel, writes them into its input ids
 * (the PREV_TOKEN rows of its plan), so no id crosses to the host and back between two steps.
 */
#ifndef TDM_KERNELS_CUDA_SAMPLE_H
#define TDM_KERNELS_CUDA_SAMPLE_H

#include <stdint.h>

#include <tdm/sample.h>
#include <tdm/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_cuda_sample_req {
    float temperature, top_p, min_p;
    int32_t top_k;
    uint64_t seed, step;
    uint32_t top_logprobs; /* <= TDM_SAMPLE_MAX_TOP_LOGPROBS */
    int32_t logprobs;      /* 1: the chosen token's logprob */
    int32_t host;          /* 1: leave this row to the host sampler (its logits are copied) */
    int32_t skip;          /* 1: nothing to sample (no copy either) */
} tdm_cuda_sample_req_t;

typedef struct tdm_cuda_sample_out {
    int32_t status; /* TDM_OK, or TDM_ERR_INVAL for a NaN/+inf/all -inf row */
    tdm_sample_result_t r;
} tdm_cuda_sample_out_t;

typedef struct tdm_cuda_sampler tdm_cuda_sampler_t;

tdm_status_t tdm_cuda_sampler_init(uint32_t max_rows, uint32_t vocab, tdm_cuda_sampler_t **ret);
void tdm_cuda_sampler_free(tdm_cuda_sampler_t *s);
/* The requests of the next enqueue, rows 0 .. m-1 (pinned host memory, max_rows entries). */
tdm_cuda_sample_req_t *tdm_cuda_sampler_reqs(tdm_cuda_sampler_t *s);
/* Results of the last enqueue once its stream has been waited for. */
const tdm_cuda_sample_out_t *tdm_cuda_sampler_outs(const tdm_cuda_sampler_t *s);
/* Switch to the other host set (requests and results); returns its index (0 or 1). */
int tdm_cuda_sampler_flip(tdm_cuda_sampler_t *s);
/* The results in host set `set` (valid once the forward that filled it was waited for). */
const tdm_cuda_sample_out_t *tdm_cuda_sampler_outs_of(const tdm_cuda_sampler_t *s, int set);

/* Input rows whose token is the one just sampled for a row of the previous forward. */
#define TDM_CUDA_PREV_FIX_MAX 256
typedef struct tdm_cuda_prev_fix {
    uint32_t n;
    uint32_t dst[TDM_CUDA_PREV_FIX_MAX]; /* index into the forward's input ids */
    uint32_t src[TDM_CUDA_PREV_FIX_MAX]; /* row of the last sampler run */
} tdm_cuda_prev_fix_t;
/* Enqueue ids[dst[i]] = the id sampled for row src[i] by the last tdm_cuda_sampler_enqueue on
 * this stream (an error row gives 0). d_ids: device memory. TDM_ERR_RANGE: a src past max_rows. */
tdm_status_t tdm_cuda_sampler_fix_ids(tdm_cuda_sampler_t *s, uint32_t *d_ids,
                                      const tdm_cuda_prev_fix_t *fix, void *stream);

/* Where `host` rows' logits go (host memory, row i at dst + i * vocab); NULL: none may be host. */
void tdm_cuda_sampler_set_host_logits(tdm_cuda_sampler_t *s, float *dst);
/* Sample rows 0 .. m-1 of d_logits (device, m × vocab) on `stream` (a cudaStream_t).
 * TDM_ERR_INVAL: m over max_rows, V other than vocab, or a host row with no destination. */
tdm_status_t tdm_cuda_sampler_enqueue(void *s, const float *d_logits, uint32_t m, uint32_t V,
                                      void *stream);

/* Test entry: sample m rows of host logits (m × V) with reqs; results into outs. Synchronous. */
tdm_status_t tdm_cuda_sample_host_rows(const float *logits, uint32_t m, uint32_t V,
                                       const tdm_cuda_sample_req_t *reqs,
                                       tdm_cuda_sample_out_t *outs);

#ifdef __cplusplus
}
#endif

#endif
