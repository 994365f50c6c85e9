/*
 * split_policy.h — how many splits the tensor-core decode attention runs a call's rows in (host
 * logic only, plain C: the engine's forward uses it, tests/unit/test-split-policy.c checks it on
 * the CPU). A split is one (row, KV head, split) block over a share of the row's positions.
 *
 * The policy: enough blocks to keep 64 busy, at most `cap` (8 unless attn_splits lowers it), at
 * least `min_splits`, one split from 64 (row, KV head) pairs on, and never more partials than
 * the engine's scratch holds (n x splits <= rowsplits).
 *
 * Balanced (attn_balance = P positions, engine.h): the policy's count doubled while a split of
 * the call's longest row (maxlen positions) holds more than P and n x KV x splits blocks still
 * fit on the SMs at once (`slots`), so one long row in a batch of short ones does not set the
 * step's attention time (docs/cuda.md "Sampling on the device, and the serving bench").
 */
#ifndef TDM_CUDA_SPLIT_POLICY_H
#define TDM_CUDA_SPLIT_POLICY_H

#include <stdint.h>

static inline uint32_t tdm_split_policy(uint32_t n, uint32_t kv, uint32_t cap, uint32_t min_splits,
                                        uint32_t rowsplits)
{
    const uint32_t b = n * kv;
    uint32_t s = b >= 64 ? 1 : 64 / (b ? b : 1);
    if (s < min_splits)
        s = min_splits;
    if (s > cap)
        s = cap;
    while (s > 1 && (uint64_t)n * s > rowsplits)
        s--;
    return s;
}

static inline uint32_t tdm_split_balanced(uint32_t base, uint32_t n, uint32_t kv, uint32_t cap,
                                          uint32_t rowsplits, uint32_t maxlen, uint32_t balance,
                                          uint32_t slots)
{
    uint32_t s = base;
    if (!balance || n == 0)
        return s;
    while (2 * s <= cap && (maxlen + s - 1) / s > balance && (uint64_t)n * kv * 2 * s <= slots &&
           (uint64_t)n * 2 * s <= rowsplits)
        s *= 2;
    return s;
}

#endif
