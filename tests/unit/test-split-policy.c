/*
 * test-split-policy.c — the decode attention's split count (kernels/cuda/split_policy.h), on the
 * CPU: the policy by rows and KV heads, its floor, cap and scratch limit, and the balanced count
 * against a call's longest row (attn_balance) with its one-wave and scratch limits.
 */
#include "config.h"

#include "kernels/cuda/split_policy.h"
#include "tap.h"

/* the H100's 132 SMs x 4 resident blocks of the kernel */
#define SLOTS 528u
#define ROWSPLITS 4096u

static void test_policy(void)
{
    is_int(tdm_split_policy(1, 4, 8, 0, ROWSPLITS), 8, "1 row x 4 KV heads: 16, capped at 8");
    is_int(tdm_split_policy(8, 4, 8, 0, ROWSPLITS), 2, "8 rows x 4 KV heads: 64 / 32 = 2");
    is_int(tdm_split_policy(16, 4, 8, 0, ROWSPLITS), 1, "16 rows x 4: one split from 64 pairs on");
    is_int(tdm_split_policy(64, 4, 8, 0, ROWSPLITS), 1, "64 rows: one split");
    is_int(tdm_split_policy(64, 4, 8, 2, ROWSPLITS), 2, "a floor of 2 at 64 rows");
    is_int(tdm_split_policy(1, 4, 3, 0, ROWSPLITS), 3, "a cap of 3");
    is_int(tdm_split_policy(64, 4, 8, 2, 64), 1, "the floor yields to the scratch (64 x 2 > 64)");
    is_int(tdm_split_policy(0, 4, 8, 0, ROWSPLITS), 8, "no rows: no division by zero");
}

static void test_balanced(void)
{
    /* the engine bench: 64 rows at 224 positions, one split stays one */
    is_int(tdm_split_balanced(1, 64, 4, 8, ROWSPLITS, 224, 256, SLOTS), 1,
           "64 rows, longest 224 at 256 a split: 1 (the defaults' graphs)");
    /* one row at 1088 among 64: 2 splits fit one wave (512 blocks), 4 do not (1024) */
    is_int(tdm_split_balanced(1, 64, 4, 8, ROWSPLITS, 1088, 256, SLOTS), 2,
           "64 rows, longest 1088: 2 (4 would be 1024 blocks > 528)");
    is_int(tdm_split_balanced(1, 32, 4, 8, ROWSPLITS, 1088, 256, SLOTS), 4,
           "32 rows, longest 1088: 4 (512 blocks)");
    is_int(tdm_split_balanced(2, 8, 4, 8, ROWSPLITS, 1088, 256, SLOTS), 8,
           "8 rows, longest 1088: 2 doubled to the cap of 8");
    is_int(tdm_split_balanced(2, 8, 4, 4, ROWSPLITS, 1088, 256, SLOTS), 4, "a cap of 4 holds");
    is_int(tdm_split_balanced(1, 64, 4, 8, ROWSPLITS, 512, 256, SLOTS), 2,
           "512 positions: 2 splits of 256, not more (256 is not above 256)");
    is_int(tdm_split_balanced(1, 64, 4, 8, ROWSPLITS, 257, 256, SLOTS), 2, "257 positions: 2");
    is_int(tdm_split_balanced(1, 64, 4, 8, ROWSPLITS, 256, 256, SLOTS), 1, "256 positions: 1");
    is_int(tdm_split_balanced(1, 64, 4, 8, 64, 1088, 256, SLOTS), 1,
           "the scratch limit (64 x 2 > 64 partial rows): 1");
    is_int(tdm_split_balanced(1, 64, 4, 8, ROWSPLITS, 1088, 0, SLOTS), 1, "balance off: the base");
    is_int(tdm_split_balanced(3, 0, 4, 8, ROWSPLITS, 1088, 256, SLOTS), 3, "no rows: the base");
    /* over a sweep: a power-of-two multiple of the base, within the cap, and within one wave
     * unless it is the base */
    int good = 1;
    for (uint32_t n = 1; n <= 256; n++)
        for (uint32_t len = 1; len <= 8192; len += 97) {
            const uint32_t base = tdm_split_policy(n, 4, 8, 0, ROWSPLITS);
            const uint32_t s = tdm_split_balanced(base, n, 4, 8, ROWSPLITS, len, 256, SLOTS);
            uint32_t q = s / base;
            good &= s >= base && s % base == 0 && (q & (q - 1)) == 0 && s <= 8 &&
                    (s == base || (uint64_t)n * 4 * s <= SLOTS) &&
                    (2 * s > 8 || (len + s - 1) / s <= 256 || (uint64_t)n * 4 * 2 * s > SLOTS);
        }
    ok(good,
       "n 1..256 x longest 1..8192: a power-of-two multiple of the base, at most 8, one "
       "wave, and stopped only at 256 positions a split, the cap (no double fits) or the wave");
}

int main(void)
{
    test_policy();
    test_balanced();
    return done_testing();
}
