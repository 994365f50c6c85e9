/*
 * test-u64map.c — the u64 hash map against a plain array under random put/replace/del churn on
 * a small key space (long probe chains, wrap-around at the table's end, backward-shift deletes),
 * key 0, a full map, clear and iteration.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include <tdm/u64map.h>

#include "tap.h"

#define KEYS 96

int main(void)
{
    tdm_u64map_t m;
    is_int(tdm_u64map_init(&m, 0), TDM_ERR_INVAL, "capacity 0 refused");
    is_int(tdm_u64map_init(&m, 64), TDM_OK, "init");
    is_int(tdm_u64map_put(&m, 1, NULL), TDM_ERR_INVAL, "a NULL value is refused");

    /* reference: ref[k] is the value of key key_of(k), 0 when absent */
    uintptr_t ref[KEYS] = {0};
    uint64_t key_of[KEYS];
    for (int k = 0; k < KEYS; k++) /* key 0 and keys equal in their low bits */
        key_of[k] = k == 0 ? 0 : ((uint64_t)k << 40) | (uint64_t)(k % 3);
    unsigned seed = 12345, held = 0, bad = 0, full_refused = 0;
    for (int step = 0; step < 200000; step++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % KEYS);
        uintptr_t v = (uintptr_t)((seed >> 4) & 0xfff) + 1;
        if ((seed >> 20) % 3) {
            tdm_status_t st = tdm_u64map_put(&m, key_of[k], (void *)v);
            if (st == TDM_ERR_AGAIN) {
                full_refused++;
                bad += ref[k] != 0 || held != 64; /* only a new key into a full map */
                continue;
            }
            bad += st != TDM_OK;
            held += ref[k] == 0;
            ref[k] = v;
        } else {
            void *old = tdm_u64map_del(&m, key_of[k]);
            bad += (uintptr_t)old != ref[k];
            held -= ref[k] != 0;
            ref[k] = 0;
        }
        if (step % 97 == 0)
            for (int j = 0; j < KEYS; j++)
                bad += (uintptr_t)tdm_u64map_get(&m, key_of[j]) != ref[j];
    }
    is_int(bad, 0, "200000 random puts/dels agree with the reference");
    ok(full_refused > 0, "the map filled up and refused new keys (%u times)", full_refused);
    is_int(m.n, held, "count of held keys");

    unsigned seen = 0;
    uint64_t k;
    void *v;
    bad = 0;
    for (uint32_t i = 0; tdm_u64map_next(&m, &i, &k, &v);) {
        seen++;
        int found = 0;
        for (int j = 0; j < KEYS; j++)
            if (key_of[j] == k && ref[j] == (uintptr_t)v)
                found = 1;
        bad += !found;
    }
    is_int(seen, held, "iteration visits every held key once");
    is_int(bad, 0, "iteration yields the stored values");

    tdm_u64map_clear(&m);
    is_int(m.n, 0, "clear empties the map");
    ok(tdm_u64map_get(&m, key_of[1]) == NULL, "a cleared key is gone");
    tdm_u64map_free(&m);
    tdm_u64map_free(&m);
    ok(tdm_u64map_get(&m, 0) == NULL, "a freed map answers nothing");
    return done_testing();
}
