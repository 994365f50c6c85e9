/* test-cp-hist.c — the history cache of committed samples: what it answers from memory and, above
 * all, when it must refuse (coverage bound after the first row, eviction, gaps, a clock going back,
 * spool replays), plus the JSON it renders. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "controlplane/store/hist.h"
#include "tap.h"

#define INST "00000000000000aa"

static tdm_tm_sample_t sample(int64_t ts)
{
    tdm_tm_sample_t s;
    memset(&s, 0, sizeof(s));
    s.ts_us = ts;
    s.iter = (uint64_t)ts / 100;
    snprintf(s.path, sizeof(s.path), "batch");
    return s;
}

/* Commit rows at ts = from, from+100, ... (n of them) as batch `seq`. */
static void commit(tdm_cp_hist_t *h, uint64_t seq, int64_t from, int n)
{
    tdm_tm_sample_t rows[64];
    for (int i = 0; i < n; i++)
        rows[i] = sample(from + 100 * i);
    tdm_cp_hist_commit(h, INST, 0, seq, rows, (size_t)n);
}

/* Rows rendered (-1: not answered). */
static int answer(tdm_cp_hist_t *h, int64_t since, int64_t until, size_t limit)
{
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
    int hit = tdm_cp_hist_render(h, INST, 0, since, until, limit, &b);
    int n = -1;
    if (hit) {
        n = 0;
        for (const char *p = b.data; (p = strstr(p, "\"ts_us\":")) != NULL; p++)
            n++;
    }
    tdm_cp_buf_free(&b);
    return n;
}

static void test_cover(void)
{
    tdm_cp_hist_t h;
    tdm_cp_hist_init(&h, 8, 4);
    is_int(answer(&h, 0, 1000000, 100), -1, "an unknown rank is not answered");
    commit(&h, 1, 1000, 4); /* 1000..1300 */
    is_int(answer(&h, 1000, 2000, 100), 4, "a window from the first committed row is answered");
    is_int(answer(&h, 1100, 1300, 100), 2, "until is exclusive, since inclusive");
    is_int(answer(&h, 999, 2000, 100), -1,
           "a window reaching before the first row may hold database rows: refused");
    is_int(answer(&h, 0, 2000, 3), 3, "but the newest `limit` rows are all held: answered");
    is_int(answer(&h, 0, 2000, 4), 4, "the newest 4 are exactly the held ones: answered");
    is_int(answer(&h, 0, 2000, 5), -1, "a fifth row could be an older database row: refused");
    commit(&h, 2, 1400, 6); /* 1400..1900, 10 rows pushed into 8 slots: 1000, 1100 evicted */
    is_int(answer(&h, 1100, 3000, 100), -1, "an evicted row's window is refused");
    is_int(answer(&h, 1101, 3000, 100), 8, "past the evicted rows it is answered");
    tdm_cp_hist_free(&h);
}

static void test_gaps(void)
{
    tdm_cp_hist_t h;
    tdm_cp_hist_init(&h, 16, 4);
    commit(&h, 1, 1000, 3);             /* 1000..1200 */
    tdm_cp_hist_gap(&h, INST, 0, 1500); /* e.g. a spooled batch up to 1500 */
    is_int(answer(&h, 1000, 3000, 100), -1, "a gap makes the older window unanswerable");
    commit(&h, 3, 1600, 3); /* 1600..1800 */
    is_int(answer(&h, 1501, 3000, 100), 3, "rows after the gap are answered");
    is_int(answer(&h, 1500, 3000, 100), -1, "the gap's own newest row is not held");

    commit(&h, 4, 1700, 1); /* a clock going back */
    is_int(answer(&h, 1801, 3000, 100), 0, "after a row older than the newest, only newer");
    is_int(answer(&h, 1600, 3000, 100), -1, "what was held before it no longer answers");
    commit(&h, 5, 2000, 2);
    is_int(answer(&h, 1801, 3000, 100), 2, "new rows are held again");

    tdm_cp_hist_duplicate(&h, INST, 0, 5, 2100);
    is_int(answer(&h, 1801, 3000, 100), 2, "a replay of a batch committed here changes nothing");
    tdm_cp_hist_duplicate(&h, INST, 0, 0, 1000);
    is_int(answer(&h, 1801, 3000, 100), 2, "a duplicate below the coverage changes nothing");
    tdm_cp_hist_duplicate(&h, INST, 0, 0, 2050);
    is_int(answer(&h, 1801, 3000, 100), -1,
           "a duplicate from before the first commit, inside the held rows: refused");
    commit(&h, 6, 2200, 1);
    is_int(answer(&h, 2101, 3000, 100), 1, "rows after it are held");

    tdm_cp_hist_gap_all(&h);
    is_int(answer(&h, 1801, 3000, 100), -1, "a spool replay refuses everything held");
    commit(&h, 7, 2500, 1);
    is_int(answer(&h, 2201, 3000, 100), 1, "and coverage restarts after the newest row seen");
    tdm_cp_hist_free(&h);
}

static void test_json(void)
{
    tdm_cp_hist_t h;
    tdm_cp_hist_init(&h, 4, 2);
    tdm_tm_sample_t s = sample(-5);
    s.iter = 7;
    s.plan_hash = 0x8000000000000001ull;
    s.coll_seq = 3;
    s.coll_hash = 0xabcull;
    s.in_coll_valid = 1;
    snprintf(s.in_coll.op, sizeof(s.in_coll.op), "all_reduce");
    s.in_coll.seq = 4;
    s.in_coll.since_us = -9;
    s.bs = 1;
    s.waiting = 2;
    s.running = 3;
    s.tokens_out = 100;
    s.ttft_p99_us = 2500;
    s.kv_pages_total = 64;
    s.corruption_total = 1;
    s.recv_us = 40;
    tdm_cp_hist_commit(&h, INST, 3, 12, &s, 1);
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
    ok(tdm_cp_hist_render(&h, INST, 3, -5, 0, 10, &b), "answered");
    is_str(b.data,
           "{\"instance_id\":\"00000000000000aa\",\"rank\":3,\"samples\":[{\"ts_us\":-5,"
           "\"batch_seq\":12,\"iter\":7,\"path\":\"batch\",\"plan_hash\":\"8000000000000001\","
           "\"coll_seq\":3,\"coll_hash\":\"0000000000000abc\",\"in_coll\":{\"op\": \"all_reduce\", "
           "\"seq\": 4, \"since_us\": -9},\"bs\":1,\"waiting\":2,\"running\":3,"
           "\"tokens_out\":100,\"requests_done\":0,\"ttft_p50_us\":0,\"ttft_p99_us\":2500,"
           "\"itl_p50_us\":0,\"itl_p99_us\":0,\"kv_pages_used\":0,\"kv_pages_total\":64,"
           "\"host_pages_used\":0,\"host_pages_total\":0,\"corruption_total\":1,\"recv_us\":40}]}",
           "the database path's JSON, jsonb spacing included");
    tdm_cp_buf_free(&b);
    ok(!tdm_cp_hist_render(&h, INST, 4, -5, 0, 10, &b), "another rank is not answered");
    tdm_cp_hist_commit(&h, "00000000000000bb", 0, 1, &s, 1);
    tdm_cp_hist_commit(&h, "00000000000000cc", 0, 1, &s, 1); /* past max_ranks: not cached */
    ok(!tdm_cp_hist_render(&h, "00000000000000cc", 0, -5, 0, 10, &b),
       "a rank past max_ranks goes to the database");
    tdm_cp_buf_free(&b);
    tdm_cp_hist_free(&h);
}

int main(void)
{
    plan(25);
    test_cover();
    test_gaps();
    test_json();
    return exit_status();
}
