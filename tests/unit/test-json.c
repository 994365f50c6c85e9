/*
 * test-json.c — hex ids (round trip, strictness), typed getters and their key-path messages,
 * bounded parsing, and the §6 error object.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

#include <tdm/json.h>

#include "tap.h"

static char err[512];

static int has(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

static json_t *parse(const char *text)
{
    json_t *v = NULL;
    if (tdm_json_parse(text, strlen(text), 1 << 20, &v, err, sizeof(err)) != TDM_OK) {
        diag("parse failed: %s", err);
        exit(1);
    }
    return v;
}

static void test_hex(void)
{
    char buf[TDM_JSON_HEX64_LEN + 1];
    uint64_t v = 7;
    const uint64_t vals[] = {0, 1, 0xff, 0x0123456789abcdefull, UINT64_MAX, 1ull << 63};

    tdm_json_hex64_format(0, buf);
    is_str(buf, "0000000000000000", "zero is 16 zeros");
    tdm_json_hex64_format(UINT64_MAX, buf);
    is_str(buf, "ffffffffffffffff", "max");
    tdm_json_hex64_format(0x0123456789abcdefull, buf);
    is_str(buf, "0123456789abcdef", "lowercase, big-endian digit order");
    int rt = 1;
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        tdm_json_hex64_format(vals[i], buf);
        rt &= tdm_json_hex64_parse(buf, &v) == TDM_OK && v == vals[i];
    }
    ok(rt, "format/parse round trip");

    const char *bad[] = {"",
                         "0",
                         "ff",
                         "000000000000000",
                         "00000000000000000",
                         "0123456789ABCDEF",
                         "0x23456789abcdef",
                         " 123456789abcdef",
                         "0123456789abcdeg",
                         "-123456789abcdef"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 42;
        ok(tdm_json_hex64_parse(bad[i], &v) == TDM_ERR_INVAL && v == 42,
           "hex \"%s\" refused, output untouched", bad[i]);
    }
    is_int(tdm_json_hex64_parse(NULL, &v), TDM_ERR_INVAL, "NULL refused");
    json_t *j = tdm_json_hex64(0xdeadbeefull);
    is_str(json_string_value(j), "00000000deadbeef", "json string form");
    json_decref(j);
}

static void test_getters(void)
{
    json_t *root = parse("{\"v\":1,\"s\":\"abc\",\"neg\":-5,\"r\":1.5,\"b\":true,\"n\":null,"
                         "\"h\":\"00000000000000ff\",\"H\":\"FF\",\"ts\":1700000000000000,"
                         "\"big\":9223372036854775807,"
                         "\"samples\":[{},{},{},{\"in_coll\":{\"op\":7}}],\"o\":{},\"a\":[]}");
    const char *s = NULL;
    int64_t i = 0;
    uint64_t u = 0;
    double d = 0;
    int b = 0;
    json_t *o = NULL, *a = NULL;
    char p1[64], p2[64];

    is_int(tdm_json_get_string(root, "", "s", 16, &s, err, sizeof(err)), TDM_OK, "string");
    is_str(s, "abc", "string value");
    is_int(tdm_json_get_string(root, "", "s", 2, &s, err, sizeof(err)), TDM_ERR_RANGE,
           "string over its limit");
    ok(has(err, "s: string of 3 bytes, limit 2"), "limit message: %s", err);
    /* jansson's parser refuses \u0000 already; a value built in code may still carry one */
    json_object_set_new(root, "nul", json_stringn("a\0b", 3));
    is_int(tdm_json_get_string(root, "", "nul", 16, &s, err, sizeof(err)), TDM_ERR_INVAL,
           "embedded NUL refused");
    is_int(tdm_json_get_string(root, "", "v", 16, &s, err, sizeof(err)), TDM_ERR_INVAL,
           "integer is not a string");
    ok(has(err, "v: expected a string, got integer"), "type message: %s", err);
    is_int(tdm_json_get_string(root, "", "missing", 16, &s, err, sizeof(err)), TDM_ERR_NOTFOUND,
           "missing member");
    ok(has(err, "missing: missing"), "missing message: %s", err);
    s = "x";
    is_int(tdm_json_get_string_opt(root, "", "n", 16, &s, err, sizeof(err)), TDM_OK, "opt null");
    ok(s == NULL, "null → NULL");
    s = "x";
    is_int(tdm_json_get_string_opt(root, "", "zz", 16, &s, err, sizeof(err)), TDM_OK, "opt absent");
    ok(s == NULL, "absent → NULL");
    is_int(tdm_json_get_string_opt(root, "", "v", 16, &s, err, sizeof(err)), TDM_ERR_INVAL,
           "opt still type-checks");

    is_int(tdm_json_get_int(root, "", "neg", -10, 10, &i, err, sizeof(err)), TDM_OK, "int");
    is_int(i, -5, "int value");
    i = 99;
    is_int(tdm_json_get_int(root, "", "neg", 0, 10, &i, err, sizeof(err)), TDM_ERR_RANGE,
           "int below min");
    ok(i == 99 && has(err, "neg: -5 outside [0, 10]"), "range message, output kept: %s", err);
    is_int(tdm_json_get_int(root, "", "r", 0, 10, &i, err, sizeof(err)), TDM_ERR_INVAL,
           "real is not an integer");
    is_int(tdm_json_get_uint(root, "", "neg", 100, &u, err, sizeof(err)), TDM_ERR_RANGE,
           "negative is not a uint");
    is_int(tdm_json_get_uint(root, "", "big", UINT64_MAX, &u, err, sizeof(err)), TDM_OK,
           "uint up to INT64_MAX");
    is_u64(u, INT64_MAX, "uint value");
    is_int(tdm_json_get_number(root, "", "r", 0, 2, &d, err, sizeof(err)), TDM_OK, "real");
    ok(d == 1.5, "real value");
    is_int(tdm_json_get_number(root, "", "v", 0, 2, &d, err, sizeof(err)), TDM_OK,
           "integer is a number");
    is_int(tdm_json_get_number(root, "", "r", 2, 3, &d, err, sizeof(err)), TDM_ERR_RANGE,
           "number range");
    is_int(tdm_json_get_bool(root, "", "b", &b, err, sizeof(err)), TDM_OK, "bool");
    is_int(b, 1, "bool value");
    is_int(tdm_json_get_bool(root, "", "v", &b, err, sizeof(err)), TDM_ERR_INVAL,
           "1 is not a boolean");
    is_int(tdm_json_get_hex64(root, "", "h", &u, err, sizeof(err)), TDM_OK, "hex member");
    is_u64(u, 255, "hex value");
    is_int(tdm_json_get_hex64(root, "", "H", &u, err, sizeof(err)), TDM_ERR_INVAL,
           "short uppercase hex refused");
    ok(has(err, "H: \"FF\" is not 16 lowercase hex digits"), "hex message: %s", err);
    is_int(tdm_json_get_hex64(root, "", "v", &u, err, sizeof(err)), TDM_ERR_INVAL,
           "a number is not a hex id");
    is_int(tdm_json_get_ts_us(root, "", "ts", &i, err, sizeof(err)), TDM_OK, "ts_us");
    is_int(tdm_json_get_ts_us(root, "", "neg", &i, err, sizeof(err)), TDM_ERR_RANGE,
           "negative ts refused");
    is_int(tdm_json_get_ts_us(root, "", "r", &i, err, sizeof(err)), TDM_ERR_INVAL,
           "real ts refused (µs are integers)");
    is_int(tdm_json_get_object(root, "", "o", &o, err, sizeof(err)), TDM_OK, "object");
    is_int(tdm_json_get_object(root, "", "a", &o, err, sizeof(err)), TDM_ERR_INVAL,
           "array is not an object");
    is_int(tdm_json_get_array(root, "", "a", &a, err, sizeof(err)), TDM_OK, "array");

    /* Nested paths: samples[3].in_coll.op */
    json_t *samples, *in_coll;
    tdm_json_get_array(root, "", "samples", &samples, err, sizeof(err));
    tdm_json_path_idx(p1, sizeof(p1), "samples", 3);
    is_int(
        tdm_json_get_object(json_array_get(samples, 3), p1, "in_coll", &in_coll, err, sizeof(err)),
        TDM_OK, "nested object");
    tdm_json_path(p2, sizeof(p2), p1, "in_coll");
    is_int(tdm_json_get_string(in_coll, p2, "op", 32, &s, err, sizeof(err)), TDM_ERR_INVAL,
           "nested wrong type");
    is_str(err, "samples[3].in_coll.op: expected a string, got integer",
           "message names the full key path");
    is_int(tdm_json_get_string(json_array_get(samples, 9), p1, "op", 32, &s, err, sizeof(err)),
           TDM_ERR_INVAL, "getter on a missing element");
    is_int(tdm_json_get_int(a, "a", "x", 0, 1, &i, err, sizeof(err)), TDM_ERR_INVAL,
           "getter on an array");
    ok(has(err, "a: expected an object, got array"), "container message: %s", err);

    const char *allowed[] = {"v", "s", NULL};
    is_int(tdm_json_check_keys(root, "", allowed, err, sizeof(err)), TDM_ERR_INVAL,
           "unknown member refused");
    ok(has(err, "unknown member"), "unknown member message: %s", err);
    const char *all_o[] = {NULL};
    is_int(tdm_json_check_keys(o, "o", all_o, err, sizeof(err)), TDM_OK, "empty object passes");
    json_decref(root);
}

static void test_parse_and_errors(void)
{
    json_t *v = NULL;
    is_int(tdm_json_parse("{\"a\":1,\"a\":2}", 13, 100, &v, err, sizeof(err)), TDM_ERR_FORMAT,
           "duplicate keys refused");
    is_int(tdm_json_parse("{\"a\":", 5, 100, &v, err, sizeof(err)), TDM_ERR_FORMAT,
           "truncated JSON");
    ok(has(err, "line 1"), "parse message has the position: %s", err);
    is_int(tdm_json_parse("[1,2,3]", 7, 6, &v, err, sizeof(err)), TDM_ERR_RANGE,
           "body over the limit");
    is_int(tdm_json_parse("\"\xff\"", 3, 100, &v, err, sizeof(err)), TDM_ERR_FORMAT,
           "invalid UTF-8 refused");
    ok(v == NULL, "no output on failure");

    int http = 0;
    json_t *e = tdm_json_error_status(TDM_ERR_INVAL, "bad \"x\"", &http);
    char *s = tdm_json_dumps(e);
    is_str(s,
           "{\"error\":{\"code\":\"invalid_request\",\"message\":\"bad \\\"x\\\"\","
           "\"type\":\"invalid_request_error\"}}",
           "error object shape");
    is_int(http, 400, "INVAL → 400");
    json_decref(e);
    free(s);
    e = tdm_json_error_status(TDM_ERR_BUSY, NULL, &http);
    s = tdm_json_dumps(e);
    ok(http == 503 && strstr(s, "\"code\":\"unavailable\"") && !strstr(s, "TDM_ERR"),
       "BUSY → 503 with a public code, no internal enum name: %s", s);
    free(s);
    json_decref(e);
    struct {
        tdm_status_t st;
        int http;
    } map[] = {{TDM_ERR_NOTFOUND, 404}, {TDM_ERR_PERM, 403},    {TDM_ERR_AGAIN, 429},
               {TDM_ERR_BUSY, 503},     {TDM_ERR_TIMEOUT, 504}, {TDM_ERR_DB, 500}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        e = tdm_json_error_status(map[i].st, NULL, &http);
        ok(http == map[i].http &&
               !strcmp(json_string_value(json_object_get(json_object_get(e, "error"), "message")),
                       tdm_status_str(map[i].st)),
           "%s → %d with the status text", tdm_status_name(map[i].st), map[i].http);
        json_decref(e);
    }
    e = tdm_json_error("invalid_request_error", "bad_utf8", "value \"\xc3\" truncated");
    is_str(json_string_value(json_object_get(json_object_get(e, "error"), "message")),
           "value \"?\" truncated", "invalid UTF-8 in a message is replaced, not dropped");
    json_decref(e);
}

/* tdm_json_put_u64 against printf's digits: every length from 1 to 20 and each side of a
 * power of ten */
static void test_put_u64(void)
{
    char got[32], want[32];
    int same = 1;
    uint64_t p = 1;
    for (int k = 0; k < 20; k++, p *= 10) {
        const uint64_t vals[] = {p - 1, p, p + 1, p * 7 + 3};
        for (size_t i = 0; i < 4; i++) {
            char *e = tdm_json_put_u64(got, vals[i]);
            *e = '\0';
            snprintf(want, sizeof(want), "%" PRIu64, vals[i]);
            same &= !strcmp(got, want);
        }
        if (k == 19)
            break;
    }
    *tdm_json_put_u64(got, UINT64_MAX) = '\0';
    ok(same && !strcmp(got, "18446744073709551615"),
       "tdm_json_put_u64 writes printf's digits (0 .. UINT64_MAX)");
}

int main(void)
{
    test_hex();
    test_put_u64();
    test_getters();
    test_parse_and_errors();
    return done_testing();
}
