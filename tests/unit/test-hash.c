/*
 * test-hash.c — xxhash wrappers against the library's published values, and the properties the
 * I2 detector relies on: coll_hash is deterministic, order-sensitive and sensitive to each of op,
 * bytes and group, and its byte layout is pinned (a known vector).
 */
#include "config.h"

#include <string.h>

#include <tdm/hash.h>

#include "tap.h"

int main(void)
{
    /* Reference values from the xxHash specification / test suite (empty input). */
    is_u64(tdm_hash_xxh64("", 0, 0), UINT64_C(0xef46db3751d8e999), "XXH64(\"\", 0)");
    is_u64(tdm_hash_xxh3("", 0), UINT64_C(0x2d06800538d394c2), "XXH3(\"\")");
    is_u64(tdm_hash_xxh3_seed("", 0, 0), tdm_hash_xxh3("", 0), "XXH3 seed 0 == unseeded");
    ok(tdm_hash_xxh64("abc", 3, 0) != tdm_hash_xxh64("abc", 3, 1), "XXH64 seed matters");
    ok(tdm_hash_xxh3("abc", 3) != tdm_hash_xxh3("abd", 3), "XXH3 content matters");

    uint64_t a = TDM_HASH_COLL_INIT, b = TDM_HASH_COLL_INIT;
    a = tdm_hash_coll_step(a, 1, 4096, 0);
    a = tdm_hash_coll_step(a, 2, 8192, 0);
    b = tdm_hash_coll_step(b, 1, 4096, 0);
    b = tdm_hash_coll_step(b, 2, 8192, 0);
    is_u64(a, b, "same sequence, same coll_hash");
    uint64_t swapped =
        tdm_hash_coll_step(tdm_hash_coll_step(TDM_HASH_COLL_INIT, 2, 8192, 0), 1, 4096, 0);
    ok(swapped != a, "order matters");
    uint64_t base = tdm_hash_coll_step(TDM_HASH_COLL_INIT, 1, 4096, 0);
    ok(tdm_hash_coll_step(TDM_HASH_COLL_INIT, 3, 4096, 0) != base, "op matters");
    ok(tdm_hash_coll_step(TDM_HASH_COLL_INIT, 1, 4097, 0) != base, "bytes matter");
    ok(tdm_hash_coll_step(TDM_HASH_COLL_INIT, 1, 4096, 1) != base, "group matters");
    ok(tdm_hash_coll_step(TDM_HASH_COLL_INIT, 1, UINT64_C(1) << 32 | 4096, 0) != base,
       "high bytes bits matter");
    ok(tdm_hash_coll_step(base, 1, 4096, 0) != base, "a repeated collective still advances");
    /* Pinned layout: op u32 | group u32 | bytes u64 little-endian, seeded with the running hash.
     * A change here changes every recorded coll_hash: bump the telemetry version with it. */
    uint8_t rec[16] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0};
    is_u64(base, tdm_hash_xxh3_seed(rec, 16, TDM_HASH_COLL_INIT), "record layout pinned");

    uint64_t c1 = tdm_hash_combine(tdm_hash_combine(0, 1), 2);
    uint64_t c2 = tdm_hash_combine(tdm_hash_combine(0, 2), 1);
    ok(c1 != c2, "combine is order-sensitive");
    is_u64(tdm_hash_combine(0, 1), tdm_hash_combine(0, 1), "combine is deterministic");
    return done_testing();
}
