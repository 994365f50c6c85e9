/*
 * hash.c — thin wrappers over libxxhash so the rest of tandem names one hash module, and the
 * collective-hash step of invariant I2 whose byte layout must never depend on the host.
 */
#include "config.h"

#include <xxhash.h>

#include <tdm/hash.h>

uint64_t tdm_hash_xxh64(const void *buf, size_t len, uint64_t seed)
{
    return XXH64(buf, len, seed);
}

uint64_t tdm_hash_xxh3(const void *buf, size_t len)
{
    return XXH3_64bits(buf, len);
}

uint64_t tdm_hash_xxh3_seed(const void *buf, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(buf, len, seed);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t tdm_hash_coll_step(uint64_t h, uint32_t op, uint64_t bytes, uint32_t group)
{
    /* record: op u32 | group u32 | bytes u64, little-endian; the running hash is the seed */
    uint8_t rec[16];
    put_le(rec, op, 4);
    put_le(rec + 4, group, 4);
    put_le(rec + 8, bytes, 8);
    return XXH3_64bits_withSeed(rec, sizeof(rec), h);
}

uint64_t tdm_hash_combine(uint64_t h, uint64_t v)
{
    uint8_t rec[8];
    put_le(rec, v, 8);
    return XXH3_64bits_withSeed(rec, sizeof(rec), h);
}
