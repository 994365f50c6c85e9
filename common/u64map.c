/*
 * u64map.c — the one hash map keyed by a 64-bit integer (tdm/u64map.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tdm/u64map.h>

/* splitmix64's finalizer: keys that differ in high bits only (hashes, random ids, counters)
 * still spread over the low bits the mask keeps. */
static uint32_t home(const tdm_u64map_t *m, uint64_t k)
{
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebull;
    k ^= k >> 31;
    return (uint32_t)k & m->mask;
}

tdm_status_t tdm_u64map_init(tdm_u64map_t *m, uint32_t capacity)
{
    memset(m, 0, sizeof(*m));
    if (capacity == 0 || capacity > (1u << 28))
        return TDM_ERR_INVAL;
    uint32_t n = 16;
    while (n < capacity * 2u)
        n <<= 1;
    if (!(m->slot = calloc(n, sizeof(*m->slot))))
        return TDM_ERR_NOMEM;
    m->mask = n - 1;
    m->capacity = capacity;
    return TDM_OK;
}

void tdm_u64map_free(tdm_u64map_t *m)
{
    if (m) {
        free(m->slot);
        memset(m, 0, sizeof(*m));
    }
}

static uint32_t slot_of(const tdm_u64map_t *m, uint64_t key)
{
    uint32_t i = home(m, key);
    while (m->slot[i].val && m->slot[i].key != key)
        i = (i + 1) & m->mask;
    return i;
}

void *tdm_u64map_get(const tdm_u64map_t *m, uint64_t key)
{
    return m->slot ? m->slot[slot_of(m, key)].val : NULL;
}

tdm_status_t tdm_u64map_put(tdm_u64map_t *m, uint64_t key, void *val)
{
    if (!val || !m->slot)
        return TDM_ERR_INVAL;
    tdm_u64map_slot_t *e = &m->slot[slot_of(m, key)];
    if (!e->val) {
        if (m->n >= m->capacity)
            return TDM_ERR_AGAIN;
        m->n++;
        e->key = key;
    }
    e->val = val;
    return TDM_OK;
}

void *tdm_u64map_del(tdm_u64map_t *m, uint64_t key)
{
    if (!m->slot)
        return NULL;
    uint32_t i = slot_of(m, key);
    void *old = m->slot[i].val;
    if (!old)
        return NULL;
    m->n--;
    /* backward shift: pull later entries of the probe chain into the hole, so no chain breaks */
    for (;;) {
        m->slot[i].val = NULL;
        uint32_t j = i;
        for (;;) {
            j = (j + 1) & m->mask;
            if (!m->slot[j].val)
                return old;
            uint32_t h = home(m, m->slot[j].key);
            /* slot j may move back to i only if its home is not in (i, j] cyclically */
            int between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
            if (!between) {
                m->slot[i] = m->slot[j];
                i = j;
                break;
            }
        }
    }
}

void tdm_u64map_clear(tdm_u64map_t *m)
{
    if (m->slot)
        memset(m->slot, 0, ((size_t)m->mask + 1) * sizeof(*m->slot));
    m->n = 0;
}

int tdm_u64map_next(const tdm_u64map_t *m, uint32_t *cursor, uint64_t *ret_key, void **ret_val)
{
    for (uint32_t i = *cursor; m->slot && i <= m->mask; i++) {
        if (m->slot[i].val) {
            if (ret_key)
                *ret_key = m->slot[i].key;
            if (ret_val)
                *ret_val = m->slot[i].val;
            *cursor = i + 1;
            return 1;
        }
    }
    *cursor = m->mask + 1;
    return 0;
}
