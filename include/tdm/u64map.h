/*
 * tdm/u64map.h — a fixed-capacity hash map from a 64-bit key to a non-NULL pointer: open
 * addressing with linear probing and backward-shift deletion, so lookups stay O(1) under churn
 * without deleted-slot markers. Every key is allowed (0 included); a NULL value marks an empty
 * slot, so a stored value is never NULL (a small integer goes in as (void *)(uintptr_t)v, v > 0).
 *
 * The slot count is the power of two >= 2 x capacity; the map never grows: put answers
 * TDM_ERR_AGAIN once `capacity` keys are held. Not thread-safe: the owner serialises access.
 */
#ifndef TDM_U64MAP_H
#define TDM_U64MAP_H

#include <stdint.h>

#include <tdm/status.h>

typedef struct tdm_u64map_slot {
    uint64_t key;
    void *val; /* NULL = empty slot */
} tdm_u64map_slot_t;

typedef struct tdm_u64map {
    tdm_u64map_slot_t *slot;
    uint32_t mask, n, capacity;
} tdm_u64map_t;

/* TDM_ERR_INVAL for a capacity of 0 or above 2^28; TDM_ERR_NOMEM. */
tdm_status_t tdm_u64map_init(tdm_u64map_t *m, uint32_t capacity);
void tdm_u64map_free(tdm_u64map_t *m); /* NULL-safe, and safe on a zeroed map */

void *tdm_u64map_get(const tdm_u64map_t *m, uint64_t key);
/* Insert or replace (val != NULL); TDM_ERR_AGAIN when full and the key is new. */
tdm_status_t tdm_u64map_put(tdm_u64map_t *m, uint64_t key, void *val);
/* Remove `key`; its value, or NULL when it was not there. */
void *tdm_u64map_del(tdm_u64map_t *m, uint64_t key);
/* Forget every key (the values are the caller's). */
void tdm_u64map_clear(tdm_u64map_t *m);

/* Iteration: for (uint32_t i = 0; tdm_u64map_next(m, &i, &k, &v);) — in slot order. After
 * deleting the entry just returned, step back (i--): the backward shift may have moved an
 * unvisited entry into its slot (and an entry already visited may then come again). */
int tdm_u64map_next(const tdm_u64map_t *m, uint32_t *cursor, uint64_t *ret_key, void **ret_val);

#endif
