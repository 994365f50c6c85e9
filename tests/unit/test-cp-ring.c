/* test-cp-ring.c — per-rank rings (wrap, order, lookup bounds, thinning), the batch blob (text and
 * binary rows), the COPY/JSON escapers and the binary COPY field writers of the control plane. */
#include "config.h"

#include <string.h>

#include <tdm/mem.h>

#include "controlplane/batch.h"
#include "controlplane/buf.h"
#include "controlplane/ring.h"
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
    is_int(tdm_cp_batch_decode(copy, b->blob_len, TDM_CP_BATCH_TEXT, &d), TDM_OK, "decode");
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
        if (tdm_cp_batch_decode(t, n, TDM_CP_BATCH_TEXT, &d) == TDM_OK) {
            all_refused = 0;
            tdm_cp_batch_free(d);
        }
    }
    ok(all_refused, "every truncated blob is refused");
    uint8_t *t = tdm_malloc(b->blob_len);
    memcpy(t, b->blob, b->blob_len);
    t[32] = 0xff; /* samples_len */
    is_int(tdm_cp_batch_decode(t, b->blob_len, TDM_CP_BATCH_TEXT, &d), TDM_ERR_FORMAT,
           "bad length refused");
    tdm_cp_batch_free(b);
}

/* The binary COPY field writers against bytes worked out by hand from PostgreSQL's format
 * (test-cp-api checks what the database reads back). */
static void test_bin(void)
{
    ok(memcmp(tdm_cp_bin_header, "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0", TDM_CP_BIN_HEADER_LEN) == 0,
       "binary COPY header: signature, flags 0, no extension");
    ok(memcmp(tdm_cp_bin_trailer, "\377\377", 2) == 0, "trailer is int16 -1");
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
    tdm_cp_bin_tuple(&b, 3);
    tdm_cp_bin_i64(&b, -2);
    tdm_cp_bin_i32(&b, INT32_MIN);
    tdm_cp_bin_text(&b, "a\0b", 3);
    tdm_cp_bin_text(&b, NULL, 5);
    tdm_cp_bin_null(&b);
    size_t at = tdm_cp_bin_open(&b);
    tdm_cp_buf_append(&b, "\1{}", 3);
    tdm_cp_bin_close(&b, at);
    static const unsigned char want[] = {
        0,    3,                                                                /* fields */
        0,    0,    0,    8,    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, /* int8 -2 */
        0,    0,    0,    4,    0x80, 0,    0,    0,                            /* int4 INT32_MIN */
        0,    0,    0,    3,    'a',  0,    'b',  /* text, bytes verbatim */
        0xff, 0xff, 0xff, 0xff,                   /* NULL text */
        0xff, 0xff, 0xff, 0xff,                   /* NULL */
        0,    0,    0,    3,    1,    '{',  '}'}; /* jsonb: version 1 + text */
    ok(b.len == sizeof(want) && memcmp(b.data, want, sizeof(want)) == 0,
       "fields encode as PostgreSQL's binary COPY (%zu bytes)", b.len);
    tdm_cp_buf_reset(&b);
    tdm_cp_bin_i64(&b, INT64_MAX);
    tdm_cp_bin_i32(&b, 0x01020304);
    static const unsigned char want2[] = {0,    0,    0, 8, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0, 0, 0,    4,    1,    2,    3,    4};
    ok(b.len == sizeof(want2) && memcmp(b.data, want2, sizeof(want2)) == 0,
       "big-endian: INT64_MAX and 0x01020304");

    /* a blob of binary rows (NUL bytes inside) round-trips as BINARY, is refused as TEXT */
    tdm_cp_batch_parts_t p = {.seq = 7,
                              .rank = 1,
                              .instance_id = "00000000000000aa",
                              .group = "g",
                              .samples = b.data,
                              .samples_len = b.len,
                              .tevents = "",
                              .events = "",
                              .n_samples = 1,
                              .format = TDM_CP_BATCH_BINARY};
    tdm_cp_batch_t *e, *d;
    is_int(tdm_cp_batch_encode(&p, &e), TDM_OK, "binary batch encodes");
    uint8_t *c1 = tdm_malloc(e->blob_len), *c2 = tdm_malloc(e->blob_len);
    memcpy(c1, e->blob, e->blob_len);
    memcpy(c2, e->blob, e->blob_len);
    is_int(tdm_cp_batch_decode(c1, e->blob_len, TDM_CP_BATCH_BINARY, &d), TDM_OK,
           "binary batch decodes");
    ok(d->format == TDM_CP_BATCH_BINARY && d->samples_len == b.len &&
           memcmp(d->samples, b.data, b.len) == 0,
       "binary rows round-trip byte for byte");
    tdm_cp_batch_free(d);
    is_int(tdm_cp_batch_decode(c2, e->blob_len, TDM_CP_BATCH_TEXT, &d), TDM_ERR_FORMAT,
           "the same blob read as text rows is refused (NUL in text)");
    p.format = TDM_CP_BATCH_TEXT;
    is_int(tdm_cp_batch_encode(&p, &d), TDM_ERR_INVAL, "text rows holding NUL are refused");
    tdm_cp_batch_free(e);
    tdm_cp_buf_free(&b);
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
    test_bin();
    return done_testing();
}
