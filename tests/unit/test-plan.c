/* test-plan.c — plans round-trip, hash what they carry, and reject any damage (I1). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dataplane/sched/plan_codec.h"
#include "tap.h"

int main(void)
{
    tdm_plan_builder_t b;
    tdm_plan_builder_init(&b);
    const uint8_t *buf;
    size_t len;
    tdm_plan_hdr_t h, h2;

    tdm_plan_finish(&b, 7, TDM_PLAN_BATCH, &buf, &len, &h);
    ok(h.kind == TDM_PLAN_IDLE && h.n_seqs == 0 && len == TDM_PLAN_HDR_BYTES,
       "an empty BATCH plan is IDLE");

    uint32_t toks[300], pages[40];
    for (int i = 0; i < 300; i++)
        toks[i] = (uint32_t)(i * 7 + 1);
    for (int i = 0; i < 40; i++)
        pages[i] = (uint32_t)(1000 - i);
    tdm_plan_begin(&b);
    ok(tdm_plan_add(&b, 3, 0, TDM_PLAN_LOGITS, toks, 300, pages, 19) == TDM_OK, "add prefill");
    ok(tdm_plan_add(&b, 9, 511, TDM_PLAN_PREV_TOKEN | TDM_PLAN_LOGITS, toks, 1, pages, 33) ==
           TDM_OK,
       "add decode");
    ok(tdm_plan_add(&b, 1, 0, 0, toks, 0, pages, 0) == TDM_ERR_RANGE, "zero tokens refused");
    tdm_plan_finish(&b, 42, TDM_PLAN_BATCH, &buf, &len, &h);
    ok(tdm_plan_hdr_parse(buf, len, &h2) == TDM_OK && h2.iter == 42 && h2.kind == TDM_PLAN_BATCH &&
           h2.n_seqs == 2 && h2.n_tokens == 301 && h2.plan_hash == h.plan_hash,
       "header round-trips");
    const uint8_t *payload = buf + TDM_PLAN_HDR_BYTES;
    size_t plen = len - TDM_PLAN_HDR_BYTES;
    ok(tdm_plan_validate(&h2, payload, plen) == TDM_OK, "payload validates");
    size_t off = 0;
    tdm_plan_entry_t e;
    int good = tdm_plan_next(payload, plen, &off, &e) == TDM_OK && e.slot == 3 &&
               e.n_tokens == 300 && e.tokens[299] == toks[299] && e.n_pages == 19 &&
               e.pages[18] == pages[18];
    good = good && tdm_plan_next(payload, plen, &off, &e) == TDM_OK && e.slot == 9 &&
           e.pos0 == 511 && (e.flags & TDM_PLAN_PREV_TOKEN) && e.n_pages == 33;
    good = good && tdm_plan_next(payload, plen, &off, &e) == TDM_ERR_NOTFOUND;
    ok(good, "entries round-trip in order");

    /* any single flipped bit in the payload is caught by the hash or the structure */
    int caught = 1;
    uint8_t *copy = malloc(plen);
    for (size_t i = 0; i < plen; i += 7) {
        memcpy(copy, payload, plen);
        copy[i] ^= 0x10;
        if (tdm_plan_validate(&h2, copy, plen) == TDM_OK)
            caught = 0;
    }
    ok(caught, "bit flips in the payload are rejected");
    memcpy(copy, payload, plen);
    ok(tdm_plan_validate(&h2, copy, plen - 4) != TDM_OK, "a short payload is rejected");
    free(copy);
    uint8_t bad[TDM_PLAN_HDR_BYTES];
    memcpy(bad, buf, sizeof(bad));
    bad[0] ^= 1;
    ok(tdm_plan_hdr_parse(bad, sizeof(bad), &h2) == TDM_ERR_FORMAT, "bad magic");
    memcpy(bad, buf, sizeof(bad));
    bad[6] = 9;
    ok(tdm_plan_hdr_parse(bad, sizeof(bad), &h2) == TDM_ERR_FORMAT, "bad kind");

    /* same content → same hash; different content → different hash */
    tdm_plan_begin(&b);
    tdm_plan_add(&b, 3, 0, TDM_PLAN_LOGITS, toks, 300, pages, 19);
    tdm_plan_add(&b, 9, 511, TDM_PLAN_PREV_TOKEN | TDM_PLAN_LOGITS, toks, 1, pages, 33);
    tdm_plan_finish(&b, 43, TDM_PLAN_BATCH, &buf, &len, &h2);
    ok(h2.plan_hash == h.plan_hash, "the hash depends on the content, not the iteration");
    tdm_plan_begin(&b);
    tdm_plan_add(&b, 3, 0, TDM_PLAN_LOGITS, toks, 299, pages, 19);
    tdm_plan_finish(&b, 43, TDM_PLAN_BATCH, &buf, &len, &h2);
    ok(h2.plan_hash != h.plan_hash, "one token less changes the hash");
    tdm_plan_builder_free(&b);
    return done_testing();
}
