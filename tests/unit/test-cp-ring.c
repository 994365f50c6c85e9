/* test-cp-ring.c — per-rank rings (wrap, order, lookup bounds, thinning), the batch blob and the
 * COPY/JSON escapers of the control plane. */
#include "config.h"

#include <string.h>

#include <tdm/mem.h>

#include "controlplane/store/batch.h"
#include "controlplane/store/buf.h"
#include "controlplane/store/ring.h"
#include "tap.h"

static void test_ring(void)
{
    tdm_cp_rings_t r;
    tdm_cp_rings_init(&r, 4, 2);
    tdm_cp_rank_t *a, *b, *c;
    is_int(tdm_cp_rings_rank(&r, "00000000000000aa", 0, 0, &a), TDM_ERR_NOTFOUND,
           "lookup without create fails");
    is_int(tdm_cp_rings_rank(&r, "00000000000000aa", 0, 1, &a), TDM_OK, "create rank 0");
    is_int(tdm_cp_rings_rank(&r, "00000000000000aa", 1, 1, &b), TDM_OK, "create rank 1");
    ok(a != b, "ranks are distinct");
    is_int(tdm_cp_rings_rank(&r, "00000000000000bb", 0, 1, &c), TDM_ERR_OVERFLOW,
           "max_ranks is enforced");
    is_int(tdm_cp_rings_rank(&r, "", 0, 1, &c), TDM_ERR_INVAL, "empty instance id refused");
    tdm_cp_rank_t *again;
    tdm_cp_rings_rank(&r, "00000000000000aa", 1, 0, &again);
    ok(again == b, "lookup finds the same rank");
    ok(tdm_cp_rank_latest(a) == NULL, "empty ring has no latest");
    for (int i = 1; i <= 6; i++) {
        tdm_cp_sample_t s;
        memset(&s, 0, sizeof(s));
        s.iter = (uint64_t)i;
        tdm_cp_rank_push(a, &s);
    }
    is_u64(a->count, 4, "ring holds its capacity");
    is_u64(tdm_cp_rank_at(a, 0)->iter, 3, "oldest kept is the 3rd pushed");
    is_u64(tdm_cp_rank_latest(a)->iter, 6, "latest is the last pushed");
    ok(tdm_cp_rank_at(a, 4) == NULL, "index past count is NULL");
    /* thinning: 10 Hz */
    ok(tdm_cp_rank_persist_due(b, 1000000, 100000), "first sample persisted");
    ok(!tdm_cp_rank_persist_due(b, 1050000, 100000), "50 ms later: thinned");
    ok(tdm_cp_rank_persist_due(b, 1100000, 100000), "100 ms later: persisted");
    b->persist_all = 1;
    ok(tdm_cp_rank_persist_due(b, 1100001, 100000), "persist_all keeps every sample");
    tdm_cp_rings_free(&r);
}

static void test_batch(void)
{
    tdm_cp_batch_parts_t p = {.seq = 42,
                              .rank = 3,
                              .instance_id = "00000000000000aa",
                              .group = "decode",
                              .samples = "1\t2\n",
                              .samples_len = 4,
                              .tevents = "",
                              .tevents_len = 0,
                              .events = "x\n",
                              .events_len = 2,
                              .n_samples = 1,
                              .n_tevents = 0,
                              .n_events = 1};
    tdm_cp_batch_t *b;
    is_int(tdm_cp_batch_encode(&p, &b), TDM_OK, "encode");
    uint8_t *copy = tdm_malloc(b->blob_len);
    memcpy(copy, b->blob, b->blob_len);
    tdm_cp_batch_t *d;
    is_int(tdm_cp_batch_decode(copy, b->blob_len, &d), TDM_OK, "decode");
    is_u64(d->seq, 42, "seq round-trips");
    is_int(d->rank, 3, "rank round-trips");
    is_str(d->instance_id, "00000000000000aa", "instance round-trips");
    is_str(d->group, "decode", "group round-trips");
    ok(d->samples_len == 4 && memcmp(d->samples, "1\t2\n", 4) == 0, "samples round-trip");
    is_str(d->events, "x\n", "events round-trip");
    tdm_cp_batch_free(d);
    /* every truncation and a corrupted length are refused */
    int all_refused = 1;
    for (size_t n = 0; n < b->blob_len; n++) {
        uint8_t *t = tdm_malloc(n ? n : 1);
        memcpy(t, b->blob, n);
        if (tdm_cp_batch_decode(t, n, &d) == TDM_OK) {
            all_refused = 0;
            tdm_cp_batch_free(d);
        }
    }
    ok(all_refused, "every truncated blob is refused");
    uint8_t *t = tdm_malloc(b->blob_len);
    memcpy(t, b->blob, b->blob_len);
    t[32] = 0xff; /* samples_len */
    is_int(tdm_cp_batch_decode(t, b->blob_len, &d), TDM_ERR_FORMAT, "bad length refused");
    tdm_cp_batch_free(b);

    /* A blob spooled before the statistics columns (14 fields a samples row) is brought up to the
     * current COPY layout: the statistics 0, recv_us NULL; other tables untouched. */
    static const char row14[] = "1\ti\t0\tg\t5\t6\tbatch\t7\t8\t9\t\\N\t1\t2\t3\n";
    p.samples = "1\ti\t0\tg\t5\t6\tbatch\t7\t8\t9\t\\N\t1\t2\t3\n"
                "2\ti\t0\tg\t5\t7\tbatch\t7\t8\t9\t\\N\t1\t2\t3\n";
    p.samples_len = 2 * (sizeof(row14) - 1);
    p.n_samples = 2;
    is_int(tdm_cp_batch_encode(&p, &b), TDM_OK, "encode an old-layout batch");
    copy = tdm_malloc(b->blob_len);
    memcpy(copy, b->blob, b->blob_len);
    is_int(tdm_cp_batch_decode(copy, b->blob_len, &d), TDM_OK, "decode it");
    is_str(d->samples,
           "1\ti\t0\tg\t5\t6\tbatch\t7\t8\t9\t\\N\t1\t2\t3\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t\\N\n"
           "2\ti\t0\tg\t5\t7\tbatch\t7\t8\t9\t\\N\t1\t2\t3\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t\\N\n",
           "old samples rows get the statistics (0) and recv_us (NULL)");
    ok(d->seq == 42 && d->n_samples == 2 && !strcmp(d->events, "x\n") &&
           !strcmp(d->instance_id, "00000000000000aa"),
       "the rest of the batch is unchanged");
    tdm_cp_batch_free(d);
    tdm_cp_batch_free(b);
}

static void test_buf(void)
{
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
    tdm_cp_buf_copy_text(&b, "a\tb\\c\nd\re");
    is_str(b.data, "a\\tb\\\\c\\nd\\re", "COPY text escaping");
    tdm_cp_buf_reset(&b);
    tdm_cp_buf_copy_text(&b, NULL);
    is_str(b.data, "\\N", "COPY NULL");
    tdm_cp_buf_reset(&b);
    tdm_cp_buf_json_str(&b, "q\"\\\x01");
    is_str(b.data, "\"q\\\"\\\\\\u0001\"", "JSON string escaping");
    tdm_cp_buf_free(&b);
}

int main(void)
{
    test_ring();
    test_batch();
    test_buf();
    return done_testing();
}
