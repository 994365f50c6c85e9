/*
 * test-telemetry.c — telemetry v1 (docs/contracts.md §c): encode → decode round trip, the exact
 * wire shape, every required member, type and bound checked with a key-path message, limits on
 * samples/events/strings/data, and the {"acked_seq":N} reply.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tdm/json.h>
#include <tdm/mem.h>
#include <tdm/telemetry.h>

#include "tap.h"

static char err[512];

static int has(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

static void sample_batch(tdm_tm_batch_t *b)
{
    memset(b, 0, sizeof(*b));
    strcpy(b->worker, "decode-0");
    strcpy(b->group, "decode");
    strcpy(b->role, "decode");
    b->instance_id = 0xfedcba9876543210ull;
    b->rank = 1;
    b->seq = 42;
    b->n_samples = 2;
    b->samples = tdm_calloc(2, sizeof(*b->samples));
    b->samples[0] = (tdm_tm_sample_t){.ts_us = 1700000000000001,
                                      .iter = 7,
                                      .path = "batch",
                                      .plan_hash = UINT64_MAX,
                                      .coll_seq = 33,
                                      .coll_hash = 0x1ull,
                                      .in_coll_valid = 1,
                                      .in_coll = {"all_reduce", 32, 1700000000000000},
                                      .bs = 4,
                                      .waiting = 2,
                                      .running = 4};
    b->samples[1] = (tdm_tm_sample_t){
        .ts_us = 1700000000200001, .iter = 8, .path = "idle", .plan_hash = 5, .coll_seq = 33};
    b->n_events = 2;
    b->events = tdm_calloc(2, sizeof(*b->events));
    b->events[0] = (tdm_tm_event_t){.ts_us = 1700000000000002,
                                    .type = "kvpoll",
                                    .has_room = 1,
                                    .room = 0x7fffffffffffffffull,
                                    .from = "WAITING_FOR_INPUT",
                                    .to = "TRANSFERRING",
                                    .reason = "info received"};
    b->events[0].data = json_pack("{s:i, s:[i,i]}", "pages", 3, "ids", 1, 2);
    b->events[1] = (tdm_tm_event_t){.ts_us = 1700000000000003, .type = "telemetry_dropped"};
}

static tdm_status_t decode_str(const char *text, tdm_tm_batch_t *out)
{
    return tdm_tm_batch_decode(text, strlen(text), NULL, out, err, sizeof(err));
}

static void test_round_trip(void)
{
    tdm_tm_batch_t b, d;
    char *text = NULL;
    size_t len = 0;

    sample_batch(&b);
    is_int(tdm_tm_batch_encode(&b, NULL, &text, &len, err, sizeof(err)), TDM_OK, "encode: %s", err);
    ok(has(text, "\"v\":1,\"worker\":\"decode-0\",\"group\":\"decode\",\"role\":\"decode\","
                 "\"instance_id\":\"fedcba9876543210\",\"rank\":1,\"seq\":42,\"samples\":["),
       "header members in docs/contracts.md §c order, ids as hex");
    ok(has(text, "\"plan_hash\":\"ffffffffffffffff\"") &&
           has(text, "\"coll_hash\":\"0000000000000001\""),
       "hashes as 16-digit lowercase hex");
    ok(has(text, "\"in_coll\":{\"op\":\"all_reduce\",\"seq\":32,\"since_us\":1700000000000000}"),
       "in_coll object");
    ok(has(text, "\"in_coll\":null"), "in_coll null outside a collective");
    ok(has(text, "\"ts_us\":1700000000000001"), "µs timestamps as integers");
    ok(has(text, "\"room\":\"7fffffffffffffff\""), "room as hex");
    ok(has(text, "\"room\":null,\"from\":null,\"to\":null,\"reason\":null,\"data\":null"),
       "absent event members are null");

    memset(&d, 0xab, sizeof(d));
    is_int(decode_str(text, &d), TDM_OK, "decode: %s", err);
    ok(!strcmp(d.worker, b.worker) && !strcmp(d.group, b.group) && !strcmp(d.role, b.role) &&
           d.instance_id == b.instance_id && d.rank == 1 && d.seq == 42,
       "header round trip");
    ok(d.n_samples == 2 && d.n_events == 2, "counts");
    ok(!memcmp(&d.samples[0], &b.samples[0], offsetof(tdm_tm_sample_t, path)) &&
           !strcmp(d.samples[0].path, "batch") && d.samples[0].plan_hash == UINT64_MAX &&
           d.samples[0].coll_seq == 33 && d.samples[0].coll_hash == 1 &&
           d.samples[0].in_coll_valid && !strcmp(d.samples[0].in_coll.op, "all_reduce") &&
           d.samples[0].in_coll.seq == 32 && d.samples[0].in_coll.since_us == 1700000000000000 &&
           d.samples[0].bs == 4 && d.samples[0].waiting == 2 && d.samples[0].running == 4,
       "sample 0 round trip");
    ok(!d.samples[1].in_coll_valid && d.samples[1].plan_hash == 5, "sample 1 round trip");
    ok(d.events[0].has_room && d.events[0].room == 0x7fffffffffffffffull &&
           !strcmp(d.events[0].from, "WAITING_FOR_INPUT") &&
           !strcmp(d.events[0].to, "TRANSFERRING") &&
           !strcmp(d.events[0].reason, "info received") && !d.events[0].data &&
           d.events[0].data_json && !strcmp(d.events[0].data_json, "{\"pages\":3,\"ids\":[1,2]}") &&
           d.events[0].data_len == strlen(d.events[0].data_json),
       "event 0 round trip, data kept as compact text");
    json_t *dd = tdm_tm_event_data(&d.events[0]);
    ok(json_equal(dd, b.events[0].data) && dd != b.events[0].data, "event 0 data as a tree");
    json_decref(dd);
    ok(!d.events[1].has_room && !d.events[1].from[0] && !d.events[1].data &&
           !d.events[1].data_json && !tdm_tm_event_data(&d.events[1]),
       "event 1 nulls round trip");

    /* Re-encoding the decoded batch gives the same bytes. */
    char *text2 = NULL;
    size_t len2 = 0;
    is_int(tdm_tm_batch_encode(&d, NULL, &text2, &len2, err, sizeof(err)), TDM_OK, "re-encode");
    ok(len == len2 && !strcmp(text, text2), "encode(decode(x)) == x");
    free(text2);
    free(text);
    tdm_tm_batch_clear(&d);
    tdm_tm_batch_clear(&d); /* idempotent */

    /* An empty batch (heartbeat-only) is fine. */
    tdm_tm_batch_t e = {.worker = "p", .group = "g", .role = "null"};
    is_int(tdm_tm_batch_encode(&e, NULL, &text, &len, err, sizeof(err)), TDM_OK, "empty batch");
    is_int(decode_str(text, &d), TDM_OK, "empty batch decodes");
    ok(d.n_samples == 0 && d.samples == NULL, "no arrays for an empty batch");
    tdm_tm_batch_clear(&d);
    free(text);

    /* The encoder refuses what the decoder would. */
    tdm_tm_limits_t lim;
    tdm_tm_limits_default(&lim);
    lim.max_samples = 1;
    is_int(tdm_tm_batch_encode(&b, &lim, &text, &len, err, sizeof(err)), TDM_ERR_RANGE,
           "encoder applies the sample limit");
    strcpy(b.role, "mixed");
    is_int(tdm_tm_batch_encode(&b, NULL, &text, &len, err, sizeof(err)), TDM_ERR_INVAL,
           "encoder refuses an unknown role");
    strcpy(b.role, "decode");
    memset(b.samples[0].path, 'x', sizeof(b.samples[0].path));
    is_int(tdm_tm_batch_encode(&b, NULL, &text, &len, err, sizeof(err)), TDM_ERR_RANGE,
           "encoder refuses an unterminated field");
    strcpy(b.samples[0].path, "\xff\xfe");
    is_int(tdm_tm_batch_encode(&b, NULL, &text, &len, err, sizeof(err)), TDM_ERR_INVAL,
           "encoder refuses invalid UTF-8: %s", err);
    tdm_tm_batch_clear(&b);
}

/* A valid batch as text with one substitution applied, decoded; returns the status. */
static tdm_status_t decode_variant(const char *from, const char *to)
{
    static const char base[] =
        "{\"v\":1,\"worker\":\"w\",\"group\":\"g\",\"role\":\"prefill\","
        "\"instance_id\":\"0000000000000001\",\"rank\":0,\"seq\":1,"
        "\"samples\":[{\"ts_us\":1,\"iter\":2,\"path\":\"batch\",\"plan_hash\":"
        "\"0000000000000003\","
        "\"coll_seq\":4,\"coll_hash\":\"0000000000000005\",\"in_coll\":{\"op\":\"all_reduce\","
        "\"seq\":4,\"since_us\":1},\"bs\":1,\"waiting\":0,\"running\":1}],"
        "\"events\":[{\"ts_us\":1,\"type\":\"kvpoll\",\"room\":\"0000000000000009\","
        "\"from\":\"A\",\"to\":\"B\",\"reason\":\"r\",\"data\":{\"k\":1}}]}";
    char text[4096];
    tdm_tm_batch_t d;
    const char *at = strstr(base, from);
    if (!at) {
        diag("variant pattern %s not in base", from);
        return TDM_ERR_MAX_;
    }
    snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    tdm_status_t st = decode_str(text, &d);
    if (st == TDM_OK)
        tdm_tm_batch_clear(&d);
    return st;
}

/* The serving statistics: optional on decode (a batch without them, from an older worker, decodes
 * with zeros in both decoders), carried both ways, bounded, unknown members still refused. */
static void test_stats(void)
{
    tdm_tm_batch_t b, d, j;
    char *text = NULL;
    size_t len = 0;
    sample_batch(&b);
    b.samples[0].tokens_out = (uint64_t)INT64_MAX;
    b.samples[0].requests_done = 12;
    b.samples[0].ttft_p50_us = 1500;
    b.samples[0].ttft_p99_us = UINT32_MAX;
    b.samples[0].itl_p50_us = 3;
    b.samples[0].itl_p99_us = 4;
    b.samples[0].kv_pages_used = 5;
    b.samples[0].kv_pages_total = 6;
    b.samples[0].host_pages_used = 7;
    b.samples[0].host_pages_total = 8;
    b.samples[0].corruption_total = 9;
    b.samples[0].recv_us = 123; /* not on the wire */
    is_int(tdm_tm_batch_encode(&b, NULL, &text, &len, err, sizeof(err)), TDM_OK, "encode: %s", err);
    ok(has(text, "\"running\":4,\"tokens_out\":9223372036854775807,\"requests_done\":12,"
                 "\"ttft_p50_us\":1500,\"ttft_p99_us\":4294967295,\"itl_p50_us\":3,"
                 "\"itl_p99_us\":4,\"kv_pages_used\":5,\"kv_pages_total\":6,"
                 "\"host_pages_used\":7,\"host_pages_total\":8,\"corruption_total\":9}") &&
           !has(text, "recv_us"),
       "statistics after running, in order; recv_us is not sent");
    is_int(decode_str(text, &d), TDM_OK, "decode: %s", err);
    is_int(tdm_tm_batch_decode_jansson(text, len, NULL, &j, err, sizeof(err)), TDM_OK,
           "jansson decode: %s", err);
    b.samples[0].recv_us = 0;
    ok(!memcmp(&d.samples[0], &b.samples[0], sizeof(d.samples[0])) &&
           !memcmp(&j.samples[0], &b.samples[0], sizeof(j.samples[0])),
       "statistics round trip (both decoders)");
    tdm_tm_batch_clear(&d);
    tdm_tm_batch_clear(&j);
    free(text);
    tdm_tm_batch_clear(&b);

    /* an older worker's sample: no statistics */
    static const char old[] =
        "{\"v\":1,\"worker\":\"w\",\"group\":\"g\",\"role\":\"decode\","
        "\"instance_id\":\"0000000000000001\",\"rank\":0,\"seq\":1,\"samples\":[{\"ts_us\":1,"
        "\"iter\":2,\"path\":\"batch\",\"plan_hash\":\"0000000000000003\",\"coll_seq\":4,"
        "\"coll_hash\":\"0000000000000005\",\"in_coll\":null,\"bs\":1,\"waiting\":0,"
        "\"running\":1}],\"events\":[]}";
    tdm_tm_batch_t f;
    is_int(tdm_tm_batch_scan(old, strlen(old), NULL, &f), TDM_OK,
           "a sample without statistics: the single-pass decoder takes it");
    ok(f.n_samples == 1 && f.samples[0].running == 1 && f.samples[0].tokens_out == 0 &&
           f.samples[0].kv_pages_total == 0 && f.samples[0].corruption_total == 0,
       "absent statistics are 0");
    tdm_tm_batch_clear(&f);
    is_int(decode_str(old, &f), TDM_OK, "and the decoder: %s", err);
    tdm_tm_batch_clear(&f);
    /* a subset, out of order, still on the single-pass path */
    static const char some[] =
        "{\"v\":1,\"worker\":\"w\",\"group\":\"g\",\"role\":\"decode\","
        "\"instance_id\":\"0000000000000001\",\"rank\":0,\"seq\":1,\"samples\":[{\"ts_us\":1,"
        "\"iter\":2,\"path\":\"batch\",\"plan_hash\":\"0000000000000003\",\"coll_seq\":4,"
        "\"coll_hash\":\"0000000000000005\",\"in_coll\":null,\"bs\":1,\"waiting\":0,"
        "\"running\":1,\"corruption_total\":2,\"ttft_p99_us\":77}],\"events\":[]}";
    is_int(tdm_tm_batch_scan(some, strlen(some), NULL, &f), TDM_OK, "a subset of the statistics");
    ok(f.samples[0].corruption_total == 2 && f.samples[0].ttft_p99_us == 77 &&
           f.samples[0].ttft_p50_us == 0,
       "the subset's values, the rest 0");
    tdm_tm_batch_clear(&f);

    is_int(decode_variant("\"running\":1}", "\"running\":1,\"ttft_p50_us\":4294967296}"),
           TDM_ERR_RANGE, "a 32-bit statistic over 2^32-1: %s", err);
    ok(has(err, "samples[0].ttft_p50_us"), "the message names it");
    is_int(decode_variant("\"running\":1}", "\"running\":1,\"tokens_out\":-1}"), TDM_ERR_RANGE,
           "a negative counter");
    is_int(decode_variant("\"running\":1}", "\"running\":1,\"tokens_out\":null}"), TDM_ERR_INVAL,
           "a null counter: %s", err);
    is_int(decode_variant("\"running\":1}", "\"running\":1,\"tokens_in\":1}"), TDM_ERR_INVAL,
           "an unknown member is still refused: %s", err);
    is_int(decode_variant("\"running\":1}", "\"tokens_out\":1}"), TDM_ERR_NOTFOUND,
           "running is still required: %s", err);
}

static void test_malformed(void)
{
    is_int(decode_variant("\"v\":1", "\"v\":1"), TDM_OK, "base variant decodes: %s", err);
    struct {
        const char *from, *to, *expect;
    } cases[] = {
        {"\"v\":1", "\"v\":2", "v: version 2"},
        {"\"v\":1,", "", "v: missing"},
        {"\"worker\":\"w\"", "\"worker\":\"\"", "worker: empty"},
        {"\"worker\":\"w\"", "\"worker\":7", "worker: expected a string"},
        {"\"role\":\"prefill\"", "\"role\":\"both\"", "role:"},
        {"\"instance_id\":\"0000000000000001\"", "\"instance_id\":1", "instance_id: expected"},
        {"\"instance_id\":\"0000000000000001\"", "\"instance_id\":\"1\"", "instance_id:"},
        {"\"rank\":0", "\"rank\":-1", "rank: -1 outside"},
        {"\"rank\":0", "\"rank\":70000", "rank: 70000 outside"},
        {"\"seq\":1", "\"seq\":1.5", "seq: expected an integer"},
        {"\"ts_us\":1,\"iter\"", "\"ts_us\":-1,\"iter\"", "samples[0].ts_us: -1 outside"},
        {"\"ts_us\":1,\"iter\"", "\"iter\"", "samples[0].ts_us: missing"},
        {"\"plan_hash\":\"0000000000000003\"", "\"plan_hash\":\"000000000000000G\"",
         "samples[0].plan_hash"},
        {"\"coll_hash\":\"0000000000000005\"", "\"coll_hash\":5", "samples[0].coll_hash"},
        {"\"in_coll\":{\"op\":\"all_reduce\",", "\"in_coll\":{\"op\":3,",
         "samples[0].in_coll.op: expected a string"},
        {"\"in_coll\":{\"op\":\"all_reduce\",\"seq\":4,\"since_us\":1},", "",
         "samples[0].in_coll: missing"},
        {"\"in_coll\":{", "\"in_coll\":{\"extra\":1,", "samples[0].in_coll.extra: unknown"},
        {"\"in_coll\":{\"op\":\"all_reduce\",\"seq\":4,\"since_us\":1}", "\"in_coll\":[]",
         "samples[0].in_coll: expected an object or null"},
        {"\"bs\":1", "\"bs\":4294967296", "samples[0].bs: 4294967296 outside"},
        {"\"running\":1}", "\"running\":1,\"x\":2}", "samples[0].x: unknown member"},
        {"\"path\":\"batch\"", "\"path\":\"" /* 33 bytes */ "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
         "samples[0].path: string of 33 bytes, limit 32"},
        {"\"type\":\"kvpoll\"", "\"type\":null", "events[0].type: expected a string"},
        {"\"room\":\"0000000000000009\"", "\"room\":9", "events[0].room"},
        {"\"data\":{\"k\":1}", "\"data\":[1]", "events[0].data: expected an object or null"},
        {"\"reason\":\"r\"", "\"reason\":false", "events[0].reason: expected a string"},
        {"\"events\":[", "\"events\":[1,", "events[0]: expected an object"},
        {"\"seq\":1,", "\"seq\":1,\"seq\":2,", "invalid JSON"},
        {"\"events\":[{", "\"events\":[{\"ts_us\":1,\"type\":\"x\"},{\"type\":\"y\"},{",
         "events[1].ts_us: missing"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        tdm_status_t st = decode_variant(cases[i].from, cases[i].to);
        ok(st != TDM_OK && has(err, cases[i].expect), "malformed %zu refused (%s): %s", i,
           cases[i].expect, err);
    }
    /* Optional event members may be absent. */
    is_int(decode_variant("\"room\":\"0000000000000009\",\"from\":\"A\",\"to\":\"B\","
                          "\"reason\":\"r\",\"data\":{\"k\":1}",
                          "\"data\":null"),
           TDM_OK, "events may omit room/from/to/reason: %s", err);
    /* Not JSON at all, truncated, empty, wrong container types. */
    tdm_tm_batch_t d;
    err[0] = '\0';
    ok(decode_str("[1]", &d) == TDM_ERR_INVAL && has(err, "(root): expected an object"),
       "array body refused: %s", err);
    ok(decode_variant("\"samples\":[{\"ts_us\":1,\"iter\":2,\"path\":\"batch\",\"plan_hash\":"
                      "\"0000000000000003\",\"coll_seq\":4,\"coll_hash\":\"0000000000000005\","
                      "\"in_coll\":{\"op\":\"all_reduce\",\"seq\":4,\"since_us\":1},\"bs\":1,"
                      "\"waiting\":0,\"running\":1}]",
                      "\"samples\":{}") == TDM_ERR_INVAL &&
           has(err, "samples: expected an array"),
       "samples must be an array: %s", err);
    is_int(tdm_tm_batch_decode("", 0, NULL, &d, err, sizeof(err)), TDM_ERR_FORMAT, "empty body");
    is_int(tdm_tm_batch_decode("{\"v\":1", 6, NULL, &d, err, sizeof(err)), TDM_ERR_FORMAT,
           "truncated body");
}

static void test_limits(void)
{
    tdm_tm_limits_t lim;
    tdm_tm_batch_t b, d;
    char *text;
    size_t len;

    sample_batch(&b);
    tdm_tm_batch_encode(&b, NULL, &text, &len, err, sizeof(err));
    tdm_tm_limits_default(&lim);
    lim.max_samples = 1;
    is_int(tdm_tm_batch_decode(text, len, &lim, &d, err, sizeof(err)), TDM_ERR_RANGE,
           "too many samples");
    ok(has(err, "samples: 2 entries, limit 1"), "message: %s", err);
    tdm_tm_limits_default(&lim);
    lim.max_events = 1;
    is_int(tdm_tm_batch_decode(text, len, &lim, &d, err, sizeof(err)), TDM_ERR_RANGE,
           "too many events");
    tdm_tm_limits_default(&lim);
    lim.max_data_bytes = 10;
    is_int(tdm_tm_batch_decode(text, len, &lim, &d, err, sizeof(err)), TDM_ERR_RANGE,
           "event data too large");
    ok(has(err, "events[0].data:"), "message: %s", err);
    tdm_tm_limits_default(&lim);
    lim.max_body_bytes = len - 1;
    is_int(tdm_tm_batch_decode(text, len, &lim, &d, err, sizeof(err)), TDM_ERR_RANGE,
           "body too large");
    free(text);
    tdm_tm_batch_clear(&b);

    /* A failure late in the batch frees what was decoded before it (ASan checks leaks). */
    const char *late = "{\"v\":1,\"worker\":\"w\",\"group\":\"g\",\"role\":\"null\","
                       "\"instance_id\":\"0000000000000001\",\"rank\":0,\"seq\":1,\"samples\":[],"
                       "\"events\":[{\"ts_us\":1,\"type\":\"a\",\"data\":{\"x\":[1,2,3]}},"
                       "{\"ts_us\":1,\"type\":\"b\",\"data\":{\"y\":{}}},{\"ts_us\":-1}]}";
    memset(&d, 0x5a, sizeof(d));
    is_int(decode_str(late, &d), TDM_ERR_RANGE, "late failure");
    ok(d.n_samples == 0x5a5a5a5a, "output untouched on failure");
}

/* A batch whose first event's data is the JSON text `data` (and, when `second`, a second event
 * without data). */
static void data_batch(char *text, size_t cap, const char *data, int second)
{
    snprintf(text, cap,
             "{\"v\":1,\"worker\":\"w\",\"group\":\"g\",\"role\":\"null\","
             "\"instance_id\":\"0000000000000001\",\"rank\":0,\"seq\":1,\"samples\":[],"
             "\"events\":[{\"ts_us\":1,\"type\":\"a\",\"data\":%s}%s]}",
             data, second ? ",{\"ts_us\":2,\"type\":\"b\"}" : "");
}

/* An event's data as text: what json_dumpb(JSON_COMPACT) writes, through the scanner's flat
 * path and jansson's (nesting, reals, negatives), and the tree form set by a caller. */
static void test_data_text(void)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"{\"pages\":16}", "{\"pages\":16}"},
        {" { \"a\" : 1 ,\n\t\"b\":\"x\\/y\" , \"c\":true,\"d\":false,\"e\":null } ",
         "{\"a\":1,\"b\":\"x/y\",\"c\":true,\"d\":false,\"e\":null}"},
        {"{\"s\":\"\\u00e9\\u001f\\u0022\\u005c\\u0009\\ud83d\\ude00\\b\"}",
         "{\"s\":\"\xc3\xa9\\u001F\\\"\\\\\\t\xf0\x9f\x98\x80\\b\"}"},
        {"{\"\\u006b\":9223372036854775807}", "{\"k\":9223372036854775807}"},
        {"{}", "{}"},
        {"{\"n\":-0,\"r\":1.5,\"x\":[1,{\"y\":2}]}", "{\"n\":0,\"r\":1.5,\"x\":[1,{\"y\":2}]}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[512];
        tdm_tm_batch_t d;
        data_batch(text, sizeof(text), cases[i].in, 1);
        is_int(decode_str(text, &d), TDM_OK, "data case %zu decodes: %s", i, err);
        ok(d.events[0].data_json && !strcmp(d.events[0].data_json, cases[i].want) &&
               d.events[0].data_len == strlen(cases[i].want) && !d.events[1].data_json,
           "data case %zu as compact text: %s", i,
           d.events[0].data_json ? d.events[0].data_json : "(null)");
        tdm_tm_batch_clear(&d);
    }
    /* repeated keys, a raw tab in a string, \u0000: refused with the jansson path's message */
    const char *bad[] = {"{\"a\":1,\"a\":2}", "{\"a\":\"\t\"}", "{\"a\":\"\\u0000\"}",
                         "{\"a\":1,}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[512];
        tdm_tm_batch_t d;
        data_batch(text, sizeof(text), bad[i], 0);
        ok(decode_str(text, &d) != TDM_OK && err[0], "bad data %zu refused: %s", i, err);
    }
    /* the compact text counts against max_data_bytes, whitespace in the body does not */
    tdm_tm_limits_t lim;
    tdm_tm_limits_default(&lim);
    lim.max_data_bytes = 7;
    const char *t7 = "{\"v\":1,\"worker\":\"w\",\"group\":\"g\",\"role\":\"null\","
                     "\"instance_id\":\"0000000000000001\",\"rank\":0,\"seq\":1,\"samples\":[],"
                     "\"events\":[{\"ts_us\":1,\"type\":\"a\",\"data\":{ \"a\" : 1 }}]}";
    tdm_tm_batch_t d;
    is_int(tdm_tm_batch_decode(t7, strlen(t7), &lim, &d, err, sizeof(err)), TDM_OK,
           "7-byte compact data within a 7-byte limit");
    tdm_tm_batch_clear(&d);
    lim.max_data_bytes = 6;
    is_int(tdm_tm_batch_decode(t7, strlen(t7), &lim, &d, err, sizeof(err)), TDM_ERR_RANGE,
           "7-byte compact data over a 6-byte limit");
    ok(has(err, "events[0].data: 7 bytes, limit 6"), "message: %s", err);

    /* a caller's text and tree both encode; the tree wins where both are set */
    tdm_tm_event_t ev[2];
    memset(ev, 0, sizeof(ev));
    ev[0].ts_us = 1;
    snprintf(ev[0].type, sizeof(ev[0].type), "x");
    ev[0].data_json = "{\"t\":1}";
    ev[0].data_len = 7;
    ev[1] = ev[0];
    ev[1].data = json_pack("{s:i}", "tree", 2);
    tdm_tm_batch_t c = {.worker = "w", .group = "g", .role = "null", .events = ev, .n_events = 2};
    char *out = NULL;
    size_t len = 0;
    is_int(tdm_tm_batch_encode(&c, NULL, &out, &len, err, sizeof(err)), TDM_OK, "encode: %s", err);
    ok(out && has(out, "\"data\":{\"t\":1}}") && has(out, "\"data\":{\"tree\":2}}"),
       "text and tree data encoded");
    free(out);
    ev[0].data_json = "[1]";
    ev[0].data_len = 3;
    c.n_events = 1;
    is_int(tdm_tm_batch_encode(&c, NULL, &out, &len, err, sizeof(err)), TDM_ERR_RANGE,
           "a text that is not an object is refused");
    json_decref(ev[1].data);
}

static void test_ack(void)
{
    char buf[40];
    size_t len = 0;
    uint64_t v = 0;
    is_int(tdm_tm_ack_encode(42, buf, sizeof(buf), &len), TDM_OK, "ack encode");
    is_str(buf, "{\"acked_seq\":42}", "ack text");
    is_int(len, 16, "ack length");
    is_int(tdm_tm_ack_decode(buf, len, &v, err, sizeof(err)), TDM_OK, "ack decode");
    is_u64(v, 42, "ack value");
    is_int(tdm_tm_ack_encode(INT64_MAX, buf, sizeof(buf), &len), TDM_OK, "max ack fits 40 bytes");
    is_int(tdm_tm_ack_encode(UINT64_MAX, buf, sizeof(buf), &len), TDM_ERR_RANGE,
           "ack above 2^63-1");
    is_int(tdm_tm_ack_encode(42, buf, 8, &len), TDM_ERR_OVERFLOW, "small buffer");
    is_int(tdm_tm_ack_decode("{\"acked_seq\":-1}", 16, &v, err, sizeof(err)), TDM_ERR_RANGE,
           "negative ack");
    is_int(tdm_tm_ack_decode("{\"acked\":1}", 11, &v, err, sizeof(err)), TDM_ERR_INVAL,
           "unknown member");
    is_int(tdm_tm_ack_decode("{\"acked_seq\":\"1\"}", 17, &v, err, sizeof(err)), TDM_ERR_INVAL,
           "string ack");
    is_int(tdm_tm_ack_decode("{}", 2, &v, err, sizeof(err)), TDM_ERR_NOTFOUND, "missing ack");
}

int main(void)
{
    test_round_trip();
    test_stats();
    test_malformed();
    test_limits();
    test_data_text();
    test_ack();
    return done_testing();
}
