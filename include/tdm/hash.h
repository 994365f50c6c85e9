/*
 * tdm/hash.h — hashing over libxxhash: buffer hashes (plan_hash, checksums) and the rolling
 * collective hash of invariant I2.
 *
 * coll_hash: every rank folds each collective it issues, in order, into one 64-bit value:
 *   h = TDM_HASH_COLL_INIT; for each collective: h = tdm_hash_coll_step(h, op, bytes, group);
 * Two ranks that issued the same sequence of (op, bytes, group) have the same coll_hash; any
 * difference in order, op, size or group changes it (with 2^-64 collision odds). The record fed
 * to XXH3 is fixed-width little-endian, so the value is the same on every host and build.
 * Pure functions, thread-safe.
 */
#ifndef TDM_HASH_H
#define TDM_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TDM_HASH_COLL_INIT UINT64_C(0x9e3779b97f4a7c15)

uint64_t tdm_hash_xxh64(const void *buf, size_t len, uint64_t seed);
uint64_t tdm_hash_xxh3(const void *buf, size_t len);
uint64_t tdm_hash_xxh3_seed(const void *buf, size_t len, uint64_t seed);

/* Fold one collective into a running coll_hash. `op` is the backend's op code (all_reduce,
 * all_gather, ...), `bytes` the payload size, `group` the communicator id. */
uint64_t tdm_hash_coll_step(uint64_t h, uint32_t op, uint64_t bytes, uint32_t group);

/* Order-sensitive combination of two 64-bit values (e.g. hashing a list of ids). */
uint64_t tdm_hash_combine(uint64_t h, uint64_t v);

#endif
