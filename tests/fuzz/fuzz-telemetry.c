/* fuzz-telemetry.c — the telemetry v1 decoder (tdm/telemetry.h) on arbitrary bytes: the
 * single-pass scanner and the jansson reference must accept exactly the same texts with identical
 * batches, and tdm_tm_batch_decode must answer with the reference's status and message. Any
 * disagreement aborts (libFuzzer reports it; the replay test fails). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/telemetry.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const tdm_tm_batch_t *a, const tdm_tm_batch_t *b)
{
    if (strcmp(a->worker, b->worker) || strcmp(a->group, b->group) || strcmp(a->role, b->role) ||
        a->instance_id != b->instance_id || a->rank != b->rank || a->seq != b->seq ||
        a->n_samples != b->n_samples || a->n_events != b->n_events)
        return 0;
    for (uint32_t i = 0; i < a->n_samples; i++)
        if (memcmp(&a->samples[i], &b->samples[i], sizeof(a->samples[i])))
            return 0;
    for (uint32_t i = 0; i < a->n_events; i++) {
        const tdm_tm_event_t *x = &a->events[i], *y = &b->events[i];
        if (x->ts_us != y->ts_us || strcmp(x->type, y->type) || x->has_room != y->has_room ||
            x->room != y->room || strcmp(x->from, y->from) || strcmp(x->to, y->to) ||
            strcmp(x->reason, y->reason) || x->data || y->data || !x->data_json != !y->data_json ||
            x->data_len != y->data_len ||
            (x->data_json && memcmp(x->data_json, y->data_json, x->data_len)))
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    char e1[512] = "", e2[512] = "";
    tdm_tm_batch_t ref, fast, comb;
    tdm_tm_limits_t lim;
    tdm_tm_limits_default(&lim);
    if (size && data[0] == 'L') { /* a leading 'L' asks for tiny limits (then skipped) */
        lim.max_samples = 2;
        lim.max_events = 2;
        lim.max_data_bytes = 16;
        buf++, size--;
    }
    tdm_status_t sr = tdm_tm_batch_decode_jansson(buf, size, &lim, &ref, e1, sizeof(e1));
    tdm_status_t sf = tdm_tm_batch_scan(buf, size, &lim, &fast);
    tdm_status_t sc = tdm_tm_batch_decode(buf, size, &lim, &comb, e2, sizeof(e2));
    if ((sr == TDM_OK) != (sf == TDM_OK) || sc != sr || (sr != TDM_OK && strcmp(e1, e2)) ||
        (sr == TDM_OK && (!same(&ref, &fast) || !same(&ref, &comb)))) {
        fprintf(stderr, "telemetry decoders disagree: ref %d \"%s\", scan %d, decode %d \"%s\"\n",
                sr, e1, sf, sc, e2);
        abort();
    }
    if (sr == TDM_OK)
        tdm_tm_batch_clear(&ref);
    if (sf == TDM_OK)
        tdm_tm_batch_clear(&fast);
    if (sc == TDM_OK)
        tdm_tm_batch_clear(&comb);
    return 0;
}
