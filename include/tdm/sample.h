/*
 * tdm/sample.h — choosing the next token from a row of logits, and stopping.
 *
 * Pipeline of tdm_sample_token(), in this order (the order of transformers' logits processors and
 * vLLM's sampler):
 *   1. penalties on a private copy of the logits:
 *      repetition (HF): every distinct token of prompt+generated, logit>0 → logit/r, else logit*r;
 *      frequency/presence (OpenAI, over generated tokens only): logit -= count*f + (count>0)*p;
 *   2. temperature == 0 (or top_k == 1): greedy argmax of the penalized logits, ties → lowest id;
 *   3. else logits/temperature, then top-k, then top-p over the renormalized top-k set (a token is
 *      kept iff the probability mass strictly ahead of it is < top_p, so at least one survives),
 *      then min-p (keep p_i >= min_p * p_max), then one draw from the renormalized remainder.
 *      Probabilities are fixed-point integers (tdm/sample_fx.h: floor(2^40 e^x), a portable exp)
 *      and the draw walks the kept ids in ascending order, so the device sampler
 *      (kernels/cuda/sample.cu) chooses the same token from the same row and (seed, step).
 * Candidate order is a total order (logit descending, id ascending), so the draw is a pure
 * function of (logits, history, params, seed, step): independent of batch composition, thread
 * and call order. The uniform comes from a counter-based generator: u = H(seed, step).
 *
 * Logprobs (documented choice): the reported logprob of the chosen token and the top-N list are
 * the log-softmax of the RAW logits (before penalties, temperature and truncation), computed in
 * fp32 with a double accumulator for the partition sum. This is what OpenAI's API reports and
 * vLLM's default ("raw logprobs"), it is independent of the sampling parameters, and it is what
 * the transformers goldens record. A token outside the truncated set can therefore never be
 * chosen, but its logprob is still well defined. Top-N ties → lowest id.
 *
 * Stop conditions: stop token ids (tdm_sample_is_stop_id) and stop strings, matched on streamed
 * text by tdm_sample_stop_scan(): it tells the caller how many bytes of the generated text are
 * safe to emit, whether a tail must be held back (a possible partial match), or where a stop
 * string matched (the stop string itself is never part of the output).
 *
 * Memory: nothing is allocated per token. A tdm_sample_scratch_t sized for the vocabulary is
 * allocated once per sampling thread and reused for every request; it carries no request state.
 * Errors: bad parameters, NaN or +inf logits, out-of-range history ids, no finite logit →
 * TDM_ERR_INVAL (or TDM_ERR_RANGE for parameters) with nothing written to the result.
 * Thread-safety: functions are reentrant; a scratch belongs to one thread at a time.
 */
#ifndef TDM_SAMPLE_H
#define TDM_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#define TDM_SAMPLE_MAX_TOP_LOGPROBS 20 /* OpenAI's cap on top_logprobs */
#define TDM_SAMPLE_MAX_STOP 16         /* stop strings per request */
#define TDM_SAMPLE_MAX_STOP_LEN 256    /* bytes per stop string */

typedef struct tdm_sample_params {
    float temperature;        /* >= 0; 0 = greedy */
    int32_t top_k;            /* <= 0 = disabled */
    float top_p;              /* (0, 1]; 1 = disabled */
    float min_p;              /* [0, 1]; 0 = disabled */
    float repetition_penalty; /* > 0; 1 = disabled */
    float presence_penalty;   /* [-2, 2]; 0 = disabled */
    float frequency_penalty;  /* [-2, 2]; 0 = disabled */
    uint64_t seed;         /* the request's seed (the caller draws one if the client gave none) */
    int logprobs;          /* compute the chosen token's logprob */
    uint32_t top_logprobs; /* N most likely tokens with logprobs, <= TDM_SAMPLE_MAX_TOP_LOGPROBS */
} tdm_sample_params_t;

/* Everything disabled: greedy, no penalties, no logprobs. */
void tdm_sample_params_default(tdm_sample_params_t *p);
/* Check ranges; on failure writes a one-line reason naming the field into err. */
tdm_status_t tdm_sample_params_validate(const tdm_sample_params_t *p, char *err, size_t err_len);

/* The tokens a request has seen: prompt (for repetition) and generated (for all penalties). */
typedef struct tdm_sample_history {
    const int32_t *prompt;
    size_t n_prompt;
    const int32_t *generated;
    size_t n_generated;
} tdm_sample_history_t;

typedef struct tdm_sample_scratch {
    uint32_t vocab;
    float *work;     /* (vocab) penalized / scaled logits */
    int32_t *idx;    /* (vocab) candidate ids */
    uint32_t *count; /* (vocab) all zero between calls */
    uint64_t *fx;    /* (vocab) fixed-point probabilities (tdm/sample_fx.h) */
} tdm_sample_scratch_t;

/* Allocate scratch for `vocab` tokens (TDM_ERR_NOMEM on failure, TDM_ERR_INVAL for vocab 0). */
tdm_status_t tdm_sample_scratch_init(tdm_sample_scratch_t *s, uint32_t vocab);
void tdm_sample_scratch_free(tdm_sample_scratch_t *s);

typedef struct tdm_sample_result {
    int32_t id;
    float logprob; /* raw log-softmax of id; 0 unless params.logprobs or top_logprobs */
    uint32_t n_top;
    int32_t top_ids[TDM_SAMPLE_MAX_TOP_LOGPROBS]; /* descending logprob, ties → lowest id */
    float top_logprobs[TDM_SAMPLE_MAX_TOP_LOGPROBS];
} tdm_sample_result_t;

/* Choose token number `step` (0 = first generated token) from logits (vocab floats).
 * `hist` may be NULL (no history). Scratch must have been made for at least `vocab`. */
tdm_status_t tdm_sample_token(const tdm_sample_params_t *p, const float *logits, uint32_t vocab,
                              const tdm_sample_history_t *hist, uint64_t step,
                              tdm_sample_scratch_t *s, tdm_sample_result_t *ret);

/* The counter-based generator: a uniform double in [0, 1) that depends only on (seed, step). */
double tdm_sample_uniform(uint64_t seed, uint64_t step);

/* 1 if id is one of the n stop ids. */
int tdm_sample_is_stop_id(const int32_t *stop_ids, size_t n, int32_t id);

/* ---- stop strings on streamed text ---- */

typedef struct tdm_sample_stop {
    uint32_t n;
    size_t max_len;
    const char *str[TDM_SAMPLE_MAX_STOP]; /* borrowed: the caller keeps the strings alive */
    size_t len[TDM_SAMPLE_MAX_STOP];
} tdm_sample_stop_t;

typedef enum tdm_sample_stop_kind {
    TDM_STOP_NONE = 0,    /* no match and nothing held back: emit up to `emit` (== len) */
    TDM_STOP_PARTIAL = 1, /* a tail may start a stop string: emit up to `emit`, hold the rest */
    TDM_STOP_MATCHED = 2, /* stop string `which` starts at `emit`: emit up to there and finish */
    TDM_STOP_KIND_MAX
} tdm_sample_stop_kind_t;

typedef struct tdm_sample_stop_result {
    tdm_sample_stop_kind_t kind;
    size_t emit;    /* bytes of text that may be emitted in total (>= the caller's `emitted`) */
    uint32_t which; /* index of the matched stop string (MATCHED only) */
} tdm_sample_stop_result_t;

/* Empty strings, more than TDM_SAMPLE_MAX_STOP strings or one longer than
 * TDM_SAMPLE_MAX_STOP_LEN → TDM_ERR_RANGE/INVAL with a reason in err. */
tdm_status_t tdm_sample_stop_init(tdm_sample_stop_t *m, const char *const *stops, uint32_t n,
                                  char *err, size_t err_len);
/* `text` is all generated text so far (len bytes), `emitted` how much of it was already sent
 * (a previous result's emit). Matches are searched from `emitted` on: everything before it was
 * proven free of stop strings. The earliest match wins (then the lowest index). Bytes, not
 * characters: a caller that streams UTF-8 must still hold back an incomplete trailing sequence. */
tdm_status_t tdm_sample_stop_scan(const tdm_sample_stop_t *m, const char *text, size_t len,
                                  size_t emitted, tdm_sample_stop_result_t *ret);

#endif
