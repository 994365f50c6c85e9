/*
 * test-sample-stop.c — stop strings on streamed text: hold-back of possible partial matches,
 * matches across chunk boundaries, earliest-start wins, limits, and a randomized streaming
 * property check (emitted text never contains a stop string and equals the reference cut).
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include <tdm/sample.h>

#include "tap.h"

static tdm_sample_stop_result_t scan(const tdm_sample_stop_t *m, const char *t, size_t emitted)
{
    tdm_sample_stop_result_t r = {TDM_STOP_KIND_MAX, 0, 0};
    if (tdm_sample_stop_scan(m, t, strlen(t), emitted, &r) != TDM_OK)
        r.kind = TDM_STOP_KIND_MAX;
    return r;
}

static void test_basic(void)
{
    tdm_sample_stop_t m;
    const char *stops[] = {"</s>", "END"};
    is_int(tdm_sample_stop_init(&m, stops, 2, NULL, 0), TDM_OK, "two stop strings");

    tdm_sample_stop_result_t r = scan(&m, "Hello", 0);
    ok(r.kind == TDM_STOP_NONE && r.emit == 5, "no match, nothing to hold: emit all");
    r = scan(&m, "Hello <", 5);
    ok(r.kind == TDM_STOP_PARTIAL && r.emit == 6, "'<' could start </s>: hold it back");
    r = scan(&m, "Hello </s", 6);
    ok(r.kind == TDM_STOP_PARTIAL && r.emit == 6, "still a partial match");
    r = scan(&m, "Hello </s>world", 6);
    ok(r.kind == TDM_STOP_MATCHED && r.emit == 6 && r.which == 0,
       "match across chunks: output ends before the stop string");
    r = scan(&m, "Hello <b>", 6);
    ok(r.kind == TDM_STOP_NONE && r.emit == 9, "a broken partial is released");
    r = scan(&m, "xEN", 0);
    ok(r.kind == TDM_STOP_PARTIAL && r.emit == 1, "partial of the second string");
    r = scan(&m, "ab END </s>", 0);
    ok(r.kind == TDM_STOP_MATCHED && r.emit == 3 && r.which == 1, "earliest match wins");

    const char *ov[] = {"aab"};
    tdm_sample_stop_init(&m, ov, 1, NULL, 0);
    r = scan(&m, "aaa", 0);
    ok(r.kind == TDM_STOP_PARTIAL && r.emit == 1, "self-overlapping stop: hold the 'aa' tail");
    r = scan(&m, "aaab", 1);
    ok(r.kind == TDM_STOP_MATCHED && r.emit == 1, "then match at 1");

    const char *both[] = {"abcd", "bc"};
    tdm_sample_stop_init(&m, both, 2, NULL, 0);
    r = scan(&m, "xabcd", 0);
    ok(r.kind == TDM_STOP_MATCHED && r.emit == 1 && r.which == 0,
       "same text: the match starting first wins over a later shorter one");

    tdm_sample_stop_init(&m, NULL, 0, NULL, 0);
    r = scan(&m, "anything", 0);
    ok(r.kind == TDM_STOP_NONE && r.emit == 8, "no stop strings: emit everything");
}

static void test_errors(void)
{
    tdm_sample_stop_t m;
    char err[128] = "";
    const char *empty[] = {"ok", ""};
    ok(tdm_sample_stop_init(&m, empty, 2, err, sizeof(err)) == TDM_ERR_INVAL &&
           strstr(err, "empty"),
       "empty stop string refused: %s", err);
    const char *null1[] = {NULL};
    ok(tdm_sample_stop_init(&m, null1, 1, NULL, 0) == TDM_ERR_INVAL, "NULL stop string refused");
    const char *many[TDM_SAMPLE_MAX_STOP + 1];
    for (int i = 0; i <= TDM_SAMPLE_MAX_STOP; i++)
        many[i] = "x";
    ok(tdm_sample_stop_init(&m, many, TDM_SAMPLE_MAX_STOP + 1, err, sizeof(err)) == TDM_ERR_RANGE,
       "too many stop strings refused: %s", err);
    char longs[TDM_SAMPLE_MAX_STOP_LEN + 2];
    memset(longs, 'a', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = 0;
    const char *lp[] = {longs};
    ok(tdm_sample_stop_init(&m, lp, 1, err, sizeof(err)) == TDM_ERR_RANGE,
       "overlong stop string refused: %s", err);
    const char *one[] = {"x"};
    tdm_sample_stop_init(&m, one, 1, NULL, 0);
    tdm_sample_stop_result_t r;
    ok(tdm_sample_stop_scan(&m, "ab", 2, 3, &r) == TDM_ERR_INVAL, "emitted > len refused");
}

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Stream random text over {a,b,c} in random chunks; compare with a direct reference. */
static void test_streaming_property(void)
{
    int good = 1, matched = 0, partial_seen = 0;
    for (int iter = 0; iter < 3000 && good; iter++) {
        char sbuf[3][8];
        const char *stops[3];
        uint32_t ns = 1 + rnd(3);
        for (uint32_t i = 0; i < ns; i++) {
            uint32_t l = 1 + rnd(4);
            for (uint32_t j = 0; j < l; j++)
                sbuf[i][j] = (char)('a' + rnd(3));
            sbuf[i][l] = 0;
            stops[i] = sbuf[i];
        }
        tdm_sample_stop_t m;
        if (tdm_sample_stop_init(&m, stops, ns, NULL, 0) != TDM_OK) {
            good = 0;
            break;
        }
        char text[64];
        size_t len = 0, emitted = 0, cut = SIZE_MAX;
        size_t total = 8 + rnd(40);
        while (len < total) {
            size_t chunk = 1 + rnd(4);
            for (size_t j = 0; j < chunk && len < total; j++)
                text[len++] = (char)('a' + rnd(3));
            text[len] = 0;
            tdm_sample_stop_result_t r;
            if (tdm_sample_stop_scan(&m, text, len, emitted, &r) != TDM_OK || r.emit < emitted ||
                r.emit > len) {
                good = 0;
                break;
            }
            /* reference: the earliest complete occurrence in the text so far */
            size_t ref = SIZE_MAX;
            for (size_t s = 0; s < len && ref == SIZE_MAX; s++)
                for (uint32_t i = 0; i < ns; i++)
                    if (len - s >= strlen(stops[i]) &&
                        memcmp(text + s, stops[i], strlen(stops[i])) == 0) {
                        ref = s;
                        break;
                    }
            if (ref != SIZE_MAX) {
                good &= r.kind == TDM_STOP_MATCHED && r.emit == ref;
                cut = ref;
                matched++;
                break;
            }
            good &= r.kind != TDM_STOP_MATCHED;
            partial_seen += r.kind == TDM_STOP_PARTIAL;
            /* the held tail must really be a prefix of some stop string */
            if (r.kind == TDM_STOP_PARTIAL) {
                int is_prefix = 0;
                for (uint32_t i = 0; i < ns; i++)
                    is_prefix |= len - r.emit < strlen(stops[i]) &&
                                 memcmp(text + r.emit, stops[i], len - r.emit) == 0;
                good &= is_prefix;
            } else {
                good &= r.emit == len;
            }
            emitted = r.emit;
        }
        (void)cut;
    }
    ok(good, "3000 random streams: matches at the reference cut, holds only real prefixes");
    ok(matched > 500 && partial_seen > 500, "the property run exercised both paths (%d, %d)",
       matched, partial_seen);
}

int main(void)
{
    test_basic();
    test_errors();
    test_streaming_property();
    return done_testing();
}
