/*
 * sample.c — next-token choice: penalties, greedy, temperature, top-k, top-p, min-p, the
 * counter-based draw, and raw-distribution logprobs (contract in include/tdm/sample.h).
 *
 * The hot path allocates nothing: the penalized logits and the candidate list live in the
 * caller's scratch, and the per-token counters there are returned to zero after use (only the
 * entries the history touched, so a call costs O(vocab + history), never a vocab-sized memset).
 * Top-p avoids a sort: a quickselect weighted by probability mass finds the nucleus in expected
 * O(vocab). Probabilities are fixed-point integers and the draw walks the kept ids in ascending
 * order (tdm/sample_fx.h), so kernels/cuda/sample.cu draws the same token from the same row.
 * Every ordering uses the total order (logit descending, id ascending), which makes each result a
 * pure function of its inputs.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/sample.h>
#include <tdm/sample_fx.h>

#define SET_ERR(err, len, ...)                                                                     \
    do {                                                                                           \
        if ((err) && (len))                                                                        \
            snprintf((err), (len), __VA_ARGS__);                                                   \
    } while (0)

void tdm_sample_params_default(tdm_sample_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
}

tdm_status_t tdm_sample_params_validate(const tdm_sample_params_t *p, char *err, size_t err_len)
{
    /* written as !(in range) so NaN fails every check */
    if (!(p->temperature >= 0.0f) || isinf(p->temperature)) {
        SET_ERR(err, err_len, "temperature must be a finite number >= 0 (got %g)",
                (double)p->temperature);
        return TDM_ERR_RANGE;
    }
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) {
        SET_ERR(err, err_len, "top_p must be in (0, 1] (got %g)", (double)p->top_p);
        return TDM_ERR_RANGE;
    }
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
        SET_ERR(err, err_len, "min_p must be in [0, 1] (got %g)", (double)p->min_p);
        return TDM_ERR_RANGE;
    }
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty)) {
        SET_ERR(err, err_len, "repetition_penalty must be a finite number > 0 (got %g)",
                (double)p->repetition_penalty);
        return TDM_ERR_RANGE;
    }
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f)) {
        SET_ERR(err, err_len, "presence_penalty must be in [-2, 2] (got %g)",
                (double)p->presence_penalty);
        return TDM_ERR_RANGE;
    }
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f)) {
        SET_ERR(err, err_len, "frequency_penalty must be in [-2, 2] (got %g)",
                (double)p->frequency_penalty);
        return TDM_ERR_RANGE;
    }
    if (p->top_logprobs > TDM_SAMPLE_MAX_TOP_LOGPROBS) {
        SET_ERR(err, err_len, "top_logprobs must be <= %d (got %u)", TDM_SAMPLE_MAX_TOP_LOGPROBS,
                p->top_logprobs);
        return TDM_ERR_RANGE;
    }
    return TDM_OK;
}

tdm_status_t tdm_sample_scratch_init(tdm_sample_scratch_t *s, uint32_t vocab)
{
    if (vocab == 0 || vocab > INT32_MAX)
        return TDM_ERR_INVAL;
    float *work = malloc((size_t)vocab * sizeof(float));
    int32_t *idx = malloc((size_t)vocab * sizeof(int32_t));
    uint32_t *count = calloc(vocab, sizeof(uint32_t));
    uint64_t *fx = malloc((size_t)vocab * sizeof(uint64_t));
    if (!work || !idx || !count || !fx) {
        free(work);
        free(idx);
        free(count);
        free(fx);
        return TDM_ERR_NOMEM;
    }
    s->vocab = vocab;
    s->work = work;
    s->idx = idx;
    s->count = count;
    s->fx = fx;
    return TDM_OK;
}

void tdm_sample_scratch_free(tdm_sample_scratch_t *s)
{
    if (!s)
        return;
    free(s->work);
    free(s->idx);
    free(s->count);
    free(s->fx);
    memset(s, 0, sizeof(*s));
}

/* Counter-based: splitmix64's finalizer over (seed, step) (tdm/sample_fx.h), so token `step` of
 * a request draws the same uniform whatever else runs in the batch. */
double tdm_sample_uniform(uint64_t seed, uint64_t step)
{
    return (double)tdm_sample_fx_u53(seed, step) * 0x1.0p-53;
}

int tdm_sample_is_stop_id(const int32_t *stop_ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (stop_ids[i] == id)
            return 1;
    return 0;
}

/* ---- ordering helpers over candidate ids, keyed by w[id] ---- */

static inline int better(const float *w, int32_t a, int32_t b)
{
    return w[a] > w[b] || (w[a] == w[b] && a < b);
}

static inline void swap_i32(int32_t *a, size_t i, size_t j)
{
    int32_t t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Quickselect: afterwards a[lo, lo+k) holds the k best of a[lo, hi) (in no particular order). */
static void select_best(const float *w, int32_t *a, size_t lo, size_t hi, size_t k)
{
    size_t target = lo + k;
    while (hi - lo > 1 && target > lo && target < hi) {
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* median of three into a[last] as the pivot */
        if (better(w, a[mid], a[lo]))
            swap_i32(a, mid, lo);
        if (better(w, a[last], a[lo]))
            swap_i32(a, last, lo);
        if (better(w, a[mid], a[last]))
            swap_i32(a, mid, last);
        int32_t pivot = a[last];
        size_t store = lo;
        for (size_t i = lo; i < last; i++)
            if (better(w, a[i], pivot))
                swap_i32(a, i, store++);
        swap_i32(a, store, last);
        /* a[lo, store) are better than the pivot at a[store] */
        if (store == target || store + 1 == target)
            return;
        if (target < store)
            hi = store;
        else
            lo = store + 1;
    }
}

/* ---- pipeline stages ---- */

static tdm_status_t check_history(const tdm_sample_history_t *h, uint32_t vocab)
{
    if (!h)
        return TDM_OK;
    if ((h->n_prompt && !h->prompt) || (h->n_generated && !h->generated))
        return TDM_ERR_INVAL;
    for (size_t i = 0; i < h->n_prompt; i++)
        if (h->prompt[i] < 0 || (uint32_t)h->prompt[i] >= vocab)
            return TDM_ERR_INVAL;
    for (size_t i = 0; i < h->n_generated; i++)
        if (h->generated[i] < 0 || (uint32_t)h->generated[i] >= vocab)
            return TDM_ERR_INVAL;
    return TDM_OK;
}

static void apply_penalties(const tdm_sample_params_t *p, const tdm_sample_history_t *h, float *w,
                            uint32_t *count)
{
    if (!h)
        return;
    if (p->repetition_penalty != 1.0f) {
        float r = p->repetition_penalty;
        const int32_t *lists[2] = {h->prompt, h->generated};
        size_t lens[2] = {h->n_prompt, h->n_generated};
        for (int l = 0; l < 2; l++)
            for (size_t i = 0; i < lens[l]; i++) {
                int32_t t = lists[l][i];
                if (count[t])
                    continue;
                count[t] = 1;
                w[t] = w[t] > 0.0f ? w[t] / r : w[t] * r;
            }
        for (int l = 0; l < 2; l++)
            for (size_t i = 0; i < lens[l]; i++)
                count[lists[l][i]] = 0;
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (size_t i = 0; i < h->n_generated; i++)
            count[h->generated[i]]++;
        for (size_t i = 0; i < h->n_generated; i++) {
            int32_t t = h->generated[i];
            if (!count[t])
                continue;
            w[t] -= (float)count[t] * p->frequency_penalty + p->presence_penalty;
            count[t] = 0;
        }
    }
}

/* Raw log-softmax: the chosen token's logprob and the top-N list. */
static void raw_logprobs(const tdm_sample_params_t *p, const float *logits, uint32_t vocab,
                         tdm_sample_result_t *r)
{
    float m = -INFINITY;
    for (uint32_t i = 0; i < vocab; i++)
        if (logits[i] > m)
            m = logits[i];
    double z = 0.0;
    for (uint32_t i = 0; i < vocab; i++)
        z += (double)expf(logits[i] - m);
    float lse = m + (float)log(z);
    r->logprob = logits[r->id] - lse;

    uint32_t n = p->top_logprobs < vocab ? p->top_logprobs : vocab, have = 0;
    for (uint32_t i = 0; i < vocab && n; i++) {
        float v = logits[i];
        if (v == -INFINITY)
            continue; /* impossible tokens are not listed (JSON has no -inf) */
        if (have == n && !(v > logits[r->top_ids[n - 1]]))
            continue; /* equal values keep the lower id already held */
        uint32_t j = have < n ? have++ : n - 1;
        while (j > 0 && v > logits[r->top_ids[j - 1]]) {
            r->top_ids[j] = r->top_ids[j - 1];
            j--;
        }
        r->top_ids[j] = (int32_t)i;
    }
    r->n_top = have;
    for (uint32_t j = 0; j < have; j++)
        r->top_logprobs[j] = logits[r->top_ids[j]] - lse;
}

/* Top-p over cand[0, n) (the top-k set) by a mass-weighted quickselect: q holds the candidates'
 * fixed-point probabilities (tdm/sample_fx.h; the best exactly 2^40). A candidate is kept iff the
 * mass of the candidates better than it (w descending, id ascending) satisfies
 * tdm_sample_fx_top_p_keeps against the set's total. Each round partitions the undecided range
 * around a pivot and keeps or discards a whole side by its mass, so the expected cost is O(n) even
 * for a flat distribution whose nucleus is most of the vocabulary; the masses are integers, so
 * the result does not depend on the partition order. Returns the kept count; cand[0, kept) holds
 * the kept candidates (not sorted). */
static size_t top_p_keep(const float *w, const uint64_t *q, int32_t *cand, size_t n, float top_p)
{
    uint64_t z = 0, ahead = 0; /* ahead: mass of everything left of lo */
    for (size_t i = 0; i < n; i++)
        z += q[cand[i]];
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        if (better(w, cand[mid], cand[lo]))
            swap_i32(cand, mid, lo);
        if (better(w, cand[last], cand[lo]))
            swap_i32(cand, last, lo);
        if (better(w, cand[mid], cand[last]))
            swap_i32(cand, mid, last);
        int32_t pivot = cand[last];
        size_t store = lo;
        uint64_t mass = 0;
        for (size_t i = lo; i < last; i++)
            if (better(w, cand[i], pivot)) {
                mass += q[cand[i]];
                swap_i32(cand, i, store++);
            }
        swap_i32(cand, store, last);
        /* cand[lo, store) beat the pivot at cand[store]; cand(store, hi) lose to it */
        if (!tdm_sample_fx_top_p_keeps(ahead + mass, z, top_p)) {
            hi = store; /* the pivot is cut; the boundary is among the better side */
            continue;
        }
        ahead += mass + q[pivot];
        if (!tdm_sample_fx_top_p_keeps(ahead, z, top_p))
            return store + 1; /* the pivot is the last candidate kept */
        lo = store + 1;
    }
    return lo;
}

tdm_status_t tdm_sample_token(const tdm_sample_params_t *p, const float *logits, uint32_t vocab,
                              const tdm_sample_history_t *hist, uint64_t step,
                              tdm_sample_scratch_t *s, tdm_sample_result_t *ret)
{
    if (!p || !logits || !s || !ret || vocab == 0 || vocab > s->vocab || !s->work)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_sample_params_validate(p, NULL, 0));
    TDM_TRY(check_history(hist, vocab));

    /* One pass checks the row and finds its argmax (ties → lowest id); the copy is made only
     * when penalties or sampling will modify it, so plain greedy reads the row once. */
    int penalize = hist && (hist->n_prompt || hist->n_generated) &&
                   (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
                    p->frequency_penalty != 0.0f);
    int sampling = p->temperature > 0.0f && p->top_k != 1;
    float *w = s->work;
    int32_t best = -1;
    float best_v = -INFINITY;
    for (uint32_t i = 0; i < vocab; i++) {
        float v = logits[i];
        if (isnan(v) || v == INFINITY)
            return TDM_ERR_INVAL;
        if (v > best_v) {
            best_v = v;
            best = (int32_t)i;
        }
    }
    if (best < 0)
        return TDM_ERR_INVAL; /* every logit is -inf */
    if (penalize || sampling) {
        memcpy(w, logits, (size_t)vocab * sizeof(float));
        if (penalize) {
            apply_penalties(p, hist, w, s->count);
            best = -1;
            for (uint32_t i = 0; i < vocab; i++)
                if (w[i] != -INFINITY && (best < 0 || w[i] > w[best]))
                    best = (int32_t)i;
            if (best < 0)
                return TDM_ERR_INVAL; /* penalties pushed every finite logit to -inf */
        }
    }

    int32_t chosen = best;
    if (sampling) {
        float m = w[best], t = p->temperature;
        int32_t *cand = s->idx;
        size_t n = 0;
        for (uint32_t i = 0; i < vocab; i++) {
            if (w[i] == -INFINITY)
                continue;
            /* (w - max)/T: the max maps to exactly 0 and a tiny T gives -inf, never +inf/NaN */
            w[i] = (w[i] - m) / t;
            if (w[i] != -INFINITY)
                cand[n++] = (int32_t)i;
        }
        if (p->top_k > 0 && (size_t)p->top_k < n) {
            select_best(w, cand, 0, n, (size_t)p->top_k);
            n = (size_t)p->top_k;
        }
        /* fixed-point probabilities (tdm/sample_fx.h), bit-identical to the device sampler's;
         * the best candidate's is exactly 2^40 and survives every stage */
        uint64_t *q = s->fx;
        for (size_t i = 0; i < n; i++)
            q[cand[i]] = tdm_sample_fx_exp(w[cand[i]]);
        if (p->top_p < 1.0f)
            n = top_p_keep(w, q, cand, n, p->top_p);
        if (p->min_p > 0.0f) {
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                if (tdm_sample_fx_min_p_keeps(q[cand[i]], p->min_p))
                    cand[k++] = cand[i];
            n = k;
        }
        /* the draw walks the kept ids in ascending order (the device's order): flag them in the
         * counters (zero between calls), then one pass over the vocabulary clears them again */
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++) {
            total += q[cand[i]];
            s->count[cand[i]] = 1;
        }
        uint64_t r = tdm_sample_fx_scale(tdm_sample_fx_u53(p->seed, step), total), acc = 0;
        chosen = -1;
        for (uint32_t i = 0; i < vocab; i++) {
            if (!s->count[i])
                continue;
            s->count[i] = 0;
            acc += q[i];
            if (chosen < 0 && acc > r)
                chosen = (int32_t)i;
        }
    }

    tdm_sample_result_t r;
    memset(&r, 0, sizeof(r));
    r.id = chosen;
    if (p->logprobs || p->top_logprobs)
        raw_logprobs(p, logits, vocab, &r);
    *ret = r;
    return TDM_OK;
}
