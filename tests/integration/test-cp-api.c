/* test-cp-api.c — a real tandemd (port 0) against a real PostgreSQL database:
 * sd_notify READY/STATUS/WATCHDOG on our own NOTIFY_SOCKET; register → ingest → read back (REST
 * and SQL); replayed batches leave no duplicates; 10 Hz thinning with every sample in the ring;
 * error bodies and body limits; the auth matrix over every route of `tandemd --print-routes` with
 * no token, a read token and the admin token; tandemctl token create/list/revoke. */
#include "config.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <unistd.h>

#include "cp-harness.h"
#include "pgtest.h"

static PGconn *db;

static long count(const char *sql)
{
    PGresult *r = PQexec(db, sql);
    long n =
        PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ? atol(PQgetvalue(r, 0, 0)) : -1;
    if (n < 0)
        diag("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return n;
}

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A telemetry batch of `inst` with n samples `step_us` apart and a room event plus a plain event.
 */
static char *batch_of(const char *inst, int rank, int seq, int n, long long t0, long long step_us)
{
    json_t *s = json_array(), *e = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(s, json_pack("{s:I,s:I,s:s,s:s,s:I,s:s,s:n,s:i,s:i,s:i}", "ts_us",
                                           (json_int_t)(t0 + i * step_us), "iter",
                                           (json_int_t)(seq * 100 + i), "path", "batch",
                                           "plan_hash", "00000000000000ff", "coll_seq",
                                           (json_int_t)i, "coll_hash", "8000000000000001",
                                           "in_coll", "bs", 1, "waiting", 0, "running", 1));
    json_array_append_new(e, json_pack("{s:I,s:s,s:s,s:s,s:s,s:n}", "ts_us", (json_int_t)t0, "type",
                                       "kvpoll", "room", "0000000000000abc", "from",
                                       "BOOTSTRAPPING", "to", "WAITING_FOR_INPUT", "data"));
    json_array_append_new(e, json_pack("{s:I,s:s,s:s,s:{s:i}}", "ts_us", (json_int_t)t0, "type",
                                       "note", "reason", "tab\there", "data", "seq", seq));
    json_t *b = json_pack("{s:i,s:s,s:s,s:s,s:s,s:i,s:i,s:o,s:o}", "v", 1, "worker", "w0", "group",
                          "d0", "role", "decode", "instance_id", inst, "rank", rank, "seq", seq,
                          "samples", s, "events", e);
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return text;
}

static char *batch(int rank, int seq, int n, long long t0, long long step_us)
{
    return batch_of("00000000000000aa", rank, seq, n, t0, step_us);
}

static long long acked(const char *body)
{
    json_t *j = json_loads(body, 0, NULL);
    long long v = json_integer_value(json_object_get(j, "acked_seq"));
    json_decref(j);
    return v;
}

static int is_error_body(const char *body, const char *code)
{
    json_t *j = json_loads(body, 0, NULL);
    json_t *e = json_object_get(j, "error");
    int okk = json_is_string(json_object_get(e, "message")) &&
              json_is_string(json_object_get(e, "type")) &&
              json_is_string(json_object_get(e, "code")) &&
              (!code || strcmp(json_string_value(json_object_get(e, "code")), code) == 0);
    json_decref(j);
    return okk;
}

static void test_ingest(cph_t *h)
{
    char *body = NULL;
    long st = cph_http(h, "POST", "/api/v1/workers/register", h->admin,
                       "{\"group\":\"d0\",\"role\":\"decode\",\"instance_id\":\"00000000000000aa\","
                       "\"worker\":\"w0\",\"rank\":0,\"tp_size\":2,\"admin_url\":\"http://x\"}",
                       &body);
    is_int(st, 200, "register rank 0");
    free(body);
    st = cph_http(h, "POST", "/api/v1/workers/heartbeat", h->admin,
                  "{\"instance_id\":\"00000000000000aa\",\"rank\":0}", &body);
    is_int(st, 200, "heartbeat of a registered rank");
    free(body);
    st = cph_http(h, "POST", "/api/v1/workers/heartbeat", h->admin,
                  "{\"instance_id\":\"00000000000000aa\",\"rank\":1}", &body);
    is_int(st, 404, "heartbeat of an unregistered rank is 404");
    ok(is_error_body(body, "not_found"), "404 body is a docs/design.md §6 error: %s", body);
    free(body);
    st = cph_http(h, "GET", "/api/v1/groups", h->admin, NULL, &body);
    ok(st == 200 && strstr(body, "\"name\" : \"d0\"") && strstr(body, "http://x"),
       "groups lists the registered worker");
    free(body);

    long long t0 = now_us();
    /* 10 samples 20 ms apart: all in the ring, 2 persisted at 10 Hz */
    char *b1 = batch(0, 1, 10, t0, 20000);
    st = cph_http(h, "POST", "/api/v1/telemetry", h->admin, b1, &body);
    ok(st == 200 && acked(body) == 1, "batch 1 acked after commit: %ld %s", st, body);
    free(body);
    is_int(count("SELECT count(*) FROM samples WHERE instance_id = '00000000000000aa'"), 2,
           "10 samples over 180 ms persist at 10 Hz (2 rows)");
    is_int(count("SELECT count(*) FROM transfer_events WHERE room = 2748"), 1,
           "room event in transfer_events");
    is_int(count("SELECT count(*) FROM events WHERE type = 'note' AND reason = E'tab\\there' "
                 "AND data->>'seq' = '1'"),
           1, "plain event in events, escapes intact");
    st = cph_http(h, "GET", "/api/v1/ranks", h->admin, NULL, &body);
    ok(st == 200 && strstr(body, "\"samples_held\":10"), "the ring holds all 10 samples");
    ok(strstr(body, "\"iter\":109") != NULL, "latest sample is the last one sent");
    free(body);

    /* replay batch 1: acknowledged, nothing inserted */
    st = cph_http(h, "POST", "/api/v1/telemetry", h->admin, b1, &body);
    ok(st == 200 && acked(body) == 1, "replayed batch 1 is acknowledged");
    free(body);
    is_int(count("SELECT count(*) FROM events WHERE type = 'note'"), 1,
           "replay left no duplicate event");
    is_int(count("SELECT count(*) FROM samples"), 2, "replay left no duplicate sample");
    st = cph_http(h, "GET", "/api/v1/ranks", h->admin, NULL, &body);
    ok(strstr(body, "\"samples_held\":10") != NULL, "replay not pushed into the ring twice");
    free(body);
    free(b1);

    /* seq 2..5, then replay 3 and 5 */
    char *bs[6] = {0};
    int all = 1;
    for (int s = 2; s <= 5; s++) {
        bs[s] = batch(0, s, 3, t0 + s * 1000000, 200000);
        st = cph_http(h, "POST", "/api/v1/telemetry", h->admin, bs[s], &body);
        all &= st == 200 && acked(body) == s;
        free(body);
    }
    ok(all, "batches 2..5 acked in order");
    cph_http(h, "POST", "/api/v1/telemetry", h->admin, bs[3], &body);
    ok(acked(body) == 3, "replay of 3 acked as 3");
    free(body);
    cph_http(h, "POST", "/api/v1/telemetry", h->admin, bs[5], &body);
    free(body);
    for (int s = 2; s <= 5; s++)
        free(bs[s]);
    is_int(count("SELECT count(*) FROM events WHERE type = 'note'"), 5,
           "5 batches, 5 notes: exactly once");
    is_int(count("SELECT count(*) FROM (SELECT batch_seq, idx FROM events GROUP BY 1, 2 "
                 "HAVING count(*) > 1) d"),
           0, "no (batch_seq, idx) twice");
    is_int(
        count("SELECT seq FROM ingest_marks WHERE instance_id = '00000000000000aa' AND rank = 0"),
        5, "high-water mark is 5");

    st = cph_http(h, "GET", "/api/v1/ranks/00000000000000aa/0/history?limit=100", h->admin, NULL,
                  &body);
    json_t *j = json_loads(body, 0, NULL);
    size_t n = json_array_size(json_object_get(j, "samples"));
    ok(st == 200 && n == 14, "rank history returns the 14 persisted samples (got %zu)", n);
    json_t *first = json_array_get(json_object_get(j, "samples"), 0);
    is_str(json_string_value(json_object_get(first, "coll_hash")), "8000000000000001",
           "64-bit hashes round-trip as 16-digit hex");
    json_decref(j);
    /* From t0 on, tandemd's cache of committed rows covers the window: answered from memory, byte
     * for byte what the database path (above: since 0 reaches before the cache) answered. */
    char path[160], *mem = NULL, *metrics = NULL;
    snprintf(path, sizeof(path), "/api/v1/ranks/00000000000000aa/0/history?since_us=%lld&limit=100",
             t0);
    st = cph_http(h, "GET", path, h->admin, NULL, &mem);
    ok(st == 200 && mem && strcmp(mem, body) == 0,
       "history from memory equals the database's answer byte for byte");
    cph_http(h, "GET", "/metrics", h->admin, NULL, &metrics);
    const char *hm =
        metrics ? strstr(metrics, "tandem_history_reads_total{source=\"memory\"}") : NULL;
    ok(hm && strncmp(hm,
                     "tandem_history_reads_total{source=\"memory\"} 1\n"
                     "tandem_history_reads_total{source=\"database\"} 1\n",
                     94) == 0,
       "one history read from memory, one from the database: %.94s", hm ? hm : "(none)");
    free(metrics);
    free(mem);
    /* every row carries tandemd's receipt time (the ingest lag); one row per second with step_us,
     * the newest of each, from the database */
    j = json_loads(body, 0, NULL);
    json_t *rows = json_object_get(j, "samples"), *x;
    size_t i;
    int recv_ok = json_array_size(rows) > 0;
    json_array_foreach(rows, i, x) recv_ok &=
        json_integer_value(json_object_get(x, "recv_us")) >= t0 &&
        json_object_get(x, "tokens_out") && json_object_get(x, "corruption_total");
    ok(recv_ok, "history rows carry the statistics and tandemd's receipt time (recv_us)");
    char *stepped = NULL;
    st = cph_http(h, "GET",
                  "/api/v1/ranks/00000000000000aa/0/history?since_us=0&limit=100&step_us=1000000",
                  h->admin, NULL, &stepped);
    json_t *js = json_loads(stepped ? stepped : "", 0, NULL);
    json_t *sa = json_object_get(js, "samples");
    size_t ns = json_array_size(sa);
    int one_per_step = ns > 0 && ns < json_array_size(rows);
    for (size_t k = 1; k < ns; k++)
        one_per_step &=
            json_integer_value(json_object_get(json_array_get(sa, k), "ts_us")) / 1000000 >
            json_integer_value(json_object_get(json_array_get(sa, k - 1), "ts_us")) / 1000000;
    ok(st == 200 && one_per_step &&
           json_integer_value(json_object_get(json_array_get(sa, ns - 1), "ts_us")) ==
               json_integer_value(
                   json_object_get(json_array_get(rows, json_array_size(rows) - 1), "ts_us")),
       "step_us: one row per step, the newest of each (%zu of %zu rows)", ns,
       json_array_size(rows));
    json_decref(js);
    json_decref(j);
    free(stepped);
    free(body);
    st = cph_http(h, "GET", "/api/v1/transfers?state=WAITING_FOR_INPUT&room=0000000000000abc",
                  h->admin, NULL, &body);
    ok(st == 200 && strstr(body, "\"room\":\"0000000000000abc\""),
       "transfers filtered by state, room");
    free(body);
    st = cph_http(h, "GET", "/api/v1/transfers?state=SUCCESS", h->admin, NULL, &body);
    ok(st == 200 && strstr(body, "\"transfers\" : []"), "state filter excludes: %s", body);
    free(body);
    st = cph_http(h, "GET", "/api/v1/transfers?min_age_ms=3600000", h->admin, NULL, &body);
    ok(st == 200 && strstr(body, "\"transfers\" : []"), "age filter excludes young rooms");
    free(body);

    /* malformed input */
    st = cph_http(h, "POST", "/api/v1/telemetry", h->admin, "{\"v\":1,", &body);
    ok(st == 400 && is_error_body(body, "invalid_telemetry"), "bad JSON → 400 error body");
    free(body);
    st = cph_http(h, "POST", "/api/v1/telemetry", h->admin,
                  "{\"v\":2,\"worker\":\"w\",\"group\":\"g\",\"role\":\"decode\",\"instance_id\":"
                  "\"00000000000000aa\",\"rank\":0,\"seq\":9,\"samples\":[],\"events\":[]}",
                  &body);
    ok(st == 400 && strstr(body, "v"), "telemetry v2 refused: %s", body);
    free(body);
    size_t big = 100 * 1024;
    char *huge = malloc(big + 1);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    huge[big] = '\0';
    st = cph_http_t(h, "POST", "/api/v1/workers/register", h->admin, huge, big, &body, 30000);
    ok(st == 413 && is_error_body(body, "body_too_large"), "register body over 64 KiB → 413");
    free(body);
    free(huge);
    st = cph_http(h, "GET", "/api/v1/nope", h->admin, NULL, &body);
    ok(st == 404 && is_error_body(body, "not_found"), "unknown route → 404 error body");
    free(body);
    st = cph_http(h, "PUT", "/api/v1/groups", h->admin, NULL, &body);
    ok(st == 405 && is_error_body(body, "method_not_allowed"), "wrong method → 405");
    free(body);
    st = cph_http(h, "GET", "/api/v1/ranks/00000000000000aa/x/history", h->admin, NULL, &body);
    ok(st == 400 && is_error_body(body, NULL), "bad rank in path → 400");
    free(body);
    st = cph_http(h, "GET", "/metrics", h->admin, NULL, &body);
    ok(st == 200 && strstr(body, "tandem_db_up 1") &&
           strstr(body, "tandem_ingest_batches_total{outcome=\"duplicate\"} 3"),
       "metrics: db up, 3 duplicates counted");
    free(body);
}

/* ---- group commit: many concurrent batches, fewer transactions, still exactly once ----------- */

#define GC_RANKS 16
#define GC_SEQS 6
#define GC_STR_(x) #x
#define GC_STR(x) GC_STR_(x)

typedef struct gc_client {
    const cph_t *h;
    int rank, ok;
    long long t0;
} gc_client_t;

/* One rank: seq 1..GC_SEQS in order, each posted twice (the second is a replay). */
static void *gc_client_main(void *arg)
{
    gc_client_t *c = arg;
    c->ok = 1;
    for (int s = 1; s <= GC_SEQS; s++) {
        char *b = batch_of("00000000000000bb", c->rank, s, 2, c->t0 + s * 1000000, 200000);
        for (int rep = 0; rep < 2; rep++) {
            char *body = NULL;
            long st = cph_http(c->h, "POST", "/api/v1/telemetry", c->h->admin, b, &body);
            if (st != 200 || acked(body) != s) {
                diag("rank %d seq %d post %d: %ld %s", c->rank, s, rep, st, body);
                c->ok = 0;
            }
            free(body);
        }
        free(b);
    }
    return NULL;
}

static long long metric(cph_t *h, const char *name)
{
    char *body = NULL;
    long long v = -1;
    if (cph_http(h, "GET", "/metrics", h->admin, NULL, &body) == 200) {
        const char *p = body;
        size_t n = strlen(name);
        while ((p = strstr(p, name)) != NULL) {
            if ((p == body || p[-1] == '\n') && p[n] == ' ') {
                v = atoll(p + n + 1);
                break;
            }
            p += n;
        }
    }
    free(body);
    return v;
}

static void test_group_commit(cph_t *h)
{
    const char *committed = "tandem_ingest_batches_total{outcome=\"committed\"}";
    const char *dups = "tandem_ingest_batches_total{outcome=\"duplicate\"}";
    long long c0 = metric(h, committed), d0 = metric(h, dups),
              x0 = metric(h, "tandem_ingest_transactions_total");
    ok(c0 >= 0 && d0 >= 0 && x0 >= 0, "/metrics counts ingest transactions");
    /* Hold the marks table so the first batches queue up behind one blocked transaction. */
    PGresult *r = PQexec(db, "BEGIN; LOCK TABLE ingest_marks IN EXCLUSIVE MODE");
    ok(PQresultStatus(r) == PGRES_COMMAND_OK, "test holds ingest_marks");
    PQclear(r);
    pthread_t tid[GC_RANKS];
    gc_client_t cl[GC_RANKS];
    long long t0 = now_us();
    for (int i = 0; i < GC_RANKS; i++) {
        cl[i] = (gc_client_t){.h = h, .rank = i, .t0 = t0};
        pthread_create(&tid[i], NULL, gc_client_main, &cl[i]);
    }
    long long queued = 0;
    for (int i = 0; i < 200 && queued < GC_RANKS; i++) {
        queued = metric(h, "tandem_ingest_buffer_batches");
        usleep(50000);
    }
    ok(queued == GC_RANKS, "all %d first batches wait behind the held table (%lld)", GC_RANKS,
       queued);
    PQclear(PQexec(db, "COMMIT"));
    int all = 1;
    for (int i = 0; i < GC_RANKS; i++) {
        pthread_join(tid[i], NULL);
        all &= cl[i].ok;
    }
    ok(all, "%d ranks x %d batches (each replayed once) all acked with their seq", GC_RANKS,
       GC_SEQS);
    long long c1 = metric(h, committed), d1 = metric(h, dups),
              x1 = metric(h, "tandem_ingest_transactions_total");
    is_int(c1 - c0, GC_RANKS * GC_SEQS, "every batch committed once");
    is_int(d1 - d0, GC_RANKS * GC_SEQS, "every replay counted as a duplicate");
    ok(x1 - x0 > 0 && x1 - x0 < c1 - c0, "%lld batches committed in %lld transactions", c1 - c0,
       x1 - x0);
    is_int(count("SELECT count(*) FROM events WHERE instance_id = '00000000000000bb'"),
           GC_RANKS * GC_SEQS, "one event row per batch: exactly once");
    is_int(count("SELECT count(*) FROM samples WHERE instance_id = '00000000000000bb'"),
           GC_RANKS * GC_SEQS * 2, "two sample rows per batch: exactly once");
    is_int(count("SELECT count(*) FROM (SELECT rank, batch_seq, idx FROM transfer_events "
                 "WHERE instance_id = '00000000000000bb' GROUP BY 1, 2, 3 HAVING count(*) > 1) d"),
           0, "no transfer event twice");
    is_int(count("SELECT count(*) FROM ingest_marks WHERE instance_id = '00000000000000bb' "
                 "AND seq = " GC_STR(GC_SEQS)),
           GC_RANKS, "every rank's mark is at its last seq");
    /* quotes and backslashes survive the VALUES path of a small group */
    char *q = batch_of("00000000000000bb", 99, 1, 1, t0, 200000);
    char *tab = strstr(q, "tab\\there");
    char *qq = NULL;
    if (tab) {
        *tab = '\0';
        if (asprintf(&qq, "%sit's \\\\ '' %s", q, tab + strlen("tab\\there")) < 0)
            qq = NULL;
    }
    char *body = NULL;
    long st = qq ? cph_http(h, "POST", "/api/v1/telemetry", h->admin, qq, &body) : 0;
    ok(st == 200 && acked(body) == 1, "batch with quotes and a backslash acked: %s", body);
    free(body);
    free(qq);
    free(q);
    is_int(count("SELECT count(*) FROM events WHERE instance_id = '00000000000000bb' AND rank = 99 "
                 "AND reason = E'it''s \\\\ '''' '"),
           1, "quotes and backslash stored verbatim");
    is_int(count("SELECT count(*) FROM (SELECT batch_seq, lag(batch_seq) OVER (PARTITION BY rank "
                 "ORDER BY tableoid, ctid) AS prev FROM events "
                 "WHERE instance_id = '00000000000000bb') x WHERE prev >= batch_seq"),
           0, "rows of each rank stored in seq order");
}

/* First column of the first row as text ("" when NULL or on error). */
static void value_of(const char *sql, char *out, size_t cap)
{
    PGresult *r = PQexec(db, sql);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        snprintf(out, cap, "%s", PQgetvalue(r, 0, 0));
    else
        snprintf(out, cap, "(%s)", PQresultErrorMessage(r));
    PQclear(r);
}

/* Edge values through the COPY path (64-bit extremes, hashes with the top bit set, the largest
 * integer the int columns take, escapes in text and jsonb, NULLs) read back from the database as
 * sent, and a value an int column cannot hold is refused by the database (422, nothing stored). */
static void test_edge_rows(cph_t *h)
{
    const char *inst = "00000000000000cc";
    char req[4096], got[1024], *body = NULL;
    long long t0 = now_us();
    snprintf(req, sizeof(req),
             "{\"v\":1,\"worker\":\"w\\\"x\",\"group\":\"g\\\\1\\t\",\"role\":\"decode\","
             "\"instance_id\":\"%s\",\"rank\":65535,\"seq\":9223372036854775807,\"samples\":["
             "{\"ts_us\":%lld,\"iter\":9223372036854775807,\"path\":\"a\\tb\\\\c\\nd\","
             "\"plan_hash\":\"ffffffffffffffff\",\"coll_seq\":0,\"coll_hash\":\"8000000000000000\","
             "\"in_coll\":{\"op\":\"all\\\"re\\\\duce\",\"seq\":5,\"since_us\":%lld},"
             "\"bs\":2147483647,\"waiting\":0,\"running\":1}],\"events\":["
             "{\"ts_us\":%lld,\"type\":\"kvpoll\",\"room\":\"ffffffffffffffff\",\"from\":\"A\","
             "\"to\":null,\"reason\":\"r\\\\n\\t\",\"data\":{\"s\":\"\\u00e9\\\"\\\\\\u0001\","
             "\"n\":-5,\"f\":1.5,\"a\":[true,false,null],\"o\":{}}},"
             "{\"ts_us\":%lld,\"type\":\"moved\",\"from\":\"X\",\"to\":\"Y\",\"data\":null},"
             "{\"ts_us\":%lld,\"type\":\"t\",\"reason\":\"\"}]}",
             inst, t0, t0 - 7, t0 + 1, t0 + 2, t0 + 3);
    long st = cph_http(h, "POST", "/api/v1/telemetry", h->admin, req, &body);
    ok(st == 200 && acked(body) == 9223372036854775807LL, "edge-value batch acked: %ld %s", st,
       body);
    free(body);
    char q[512], want[1024];
    snprintf(q, sizeof(q),
             "SELECT concat_ws('|', ts_us - %lld, rank, group_name, batch_seq, iter, path, "
             "plan_hash, coll_seq, coll_hash, in_coll::text, bs, waiting, running) FROM samples "
             "WHERE instance_id = '%s'",
             t0, inst);
    value_of(q, got, sizeof(got));
    snprintf(want, sizeof(want),
             "0|65535|g\\1\t|9223372036854775807|9223372036854775807|a\tb\\c\nd|-1|0|"
             "-9223372036854775808|{\"op\": \"all\\\"re\\\\duce\", \"seq\": 5, \"since_us\": "
             "%lld}|2147483647|0|1",
             t0 - 7);
    is_str(got, want, "sample row reads back with every value");
    snprintf(q, sizeof(q),
             "SELECT concat_ws('|', ts_us - %lld, idx, type, room, from_state, "
             "to_state IS NULL, reason, data::text) FROM transfer_events WHERE instance_id = '%s'",
             t0, inst);
    value_of(q, got, sizeof(got));
    is_str(got,
           "1|0|kvpoll|-1|A|t|r\\n\t|{\"a\": [true, false, null], \"f\": 1.5, \"n\": -5, \"o\": "
           "{}, \"s\": \"\xc3\xa9\\\"\\\\\\u0001\"}",
           "transfer event row reads back with every value");
    snprintf(q, sizeof(q),
             "SELECT string_agg(concat_ws('|', ts_us - %lld, source, idx, type, "
             "coalesce(reason, 'NULL'), coalesce(data::text, 'NULL')), ';' ORDER BY idx) "
             "FROM events WHERE instance_id = '%s'",
             t0, inst);
    value_of(q, got, sizeof(got));
    is_str(got, "2|worker|1|moved|NULL|{\"to\": \"Y\", \"from\": \"X\"};3|worker|2|t|NULL|NULL",
           "event rows read back (from/to in data, empty reason as NULL)");

    /* more samples and events rows than go inline (64): the group COPYs them */
    char *big = batch_of(inst, 2, 1, 80, t0, 100000);
    st = cph_http(h, "POST", "/api/v1/telemetry", h->admin, big, &body);
    ok(st == 200 && acked(body) == 1, "80-sample batch acked: %ld %s", st, body);
    free(body);
    free(big);
    snprintf(q, sizeof(q),
             "SELECT count(*) * 1000 + count(DISTINCT iter) FROM samples WHERE instance_id = '%s' "
             "AND rank = 2 AND iter BETWEEN 100 AND 179 AND plan_hash = 255",
             inst);
    is_int(count(q), 80080, "all 80 samples stored by COPY, once each");
    snprintf(q, sizeof(q),
             "SELECT count(*) FROM events WHERE instance_id = '%s' AND rank = 2 AND "
             "reason = E'tab\\there' AND data->>'seq' = '1'",
             inst);
    is_int(count(q), 1, "and its event, escapes intact");

    /* bs above the integer column: the database refuses the batch */
    snprintf(req, sizeof(req),
             "{\"v\":1,\"worker\":\"w\",\"group\":\"g\",\"role\":\"decode\",\"instance_id\":"
             "\"%s\",\"rank\":1,\"seq\":1,\"samples\":[{\"ts_us\":%lld,\"iter\":1,\"path\":\"b\","
             "\"plan_hash\":\"0000000000000001\",\"coll_seq\":1,\"coll_hash\":\"0000000000000001\","
             "\"in_coll\":null,\"bs\":2147483648,\"waiting\":0,\"running\":0}],\"events\":[]}",
             inst, t0);
    st = cph_http(h, "POST", "/api/v1/telemetry", h->admin, req, &body);
    ok(st == 422 && is_error_body(body, "rejected") && strstr(body, "out of range"),
       "bs 2147483648 refused with 422: %ld %s", st, body);
    free(body);
    snprintf(q, sizeof(q), "SELECT count(*) FROM samples WHERE instance_id = '%s' AND rank = 1",
             inst);
    is_int(count(q), 0, "nothing of the refused batch stored");
}

/* Every route: no token → 401, read token → 403 on admin routes, admin → neither. */
static void test_auth(cph_t *h)
{
    char *body = NULL;
    long st = cph_http(h, "POST", "/api/v1/tokens", h->admin,
                       "{\"name\":\"viewer\",\"role\":\"read\"}", &body);
    json_t *j = json_loads(body, 0, NULL);
    char rtok[128] = "";
    snprintf(rtok, sizeof(rtok), "%s", json_string_value(json_object_get(j, "token")) ?: "");
    json_decref(j);
    ok(st == 201 && strlen(rtok) == 68, "read token created (shown once)");
    free(body);
    st = cph_http(h, "POST", "/api/v1/tokens", h->admin, "{\"name\":\"viewer\",\"role\":\"read\"}",
                  &body);
    ok(st == 409 && is_error_body(body, "conflict"), "duplicate token name → 409");
    free(body);

    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s/tandemd --print-routes", cph_builddir());
    FILE *p = popen(cmd, "r");
    char line[512];
    int routes = 0, matrix_ok = 1;
    while (p && fgets(line, sizeof(line), p)) {
        char method[16], path[256], role[16];
        if (sscanf(line, "%15s %255s %15s", method, path, role) != 3)
            continue;
        routes++;
        /* fill path captures: {instance_id} → hex id, {rank} → 0, others → "x" */
        char real[512] = "";
        for (const char *q = path; *q;) {
            if (*q == '{') {
                const char *c = strchr(q, '}');
                if (strncmp(q, "{rank}", 6) == 0)
                    strcat(real, "0");
                else if (strncmp(q, "{instance_id}", 13) == 0)
                    strcat(real, "00000000000000aa");
                else
                    strcat(real, "nosuchtoken");
                q = c + 1;
            } else {
                size_t rl = strlen(real);
                real[rl] = *q++;
                real[rl + 1] = '\0';
            }
        }
        const char *payload = strcmp(method, "POST") == 0 ? "{}" : NULL;
        /* an event stream answers its status, then never ends: read the status alone */
        size_t rl = strlen(real);
        int stream = strcmp(method, "GET") == 0 && rl >= 7 && !strcmp(real + rl - 7, "/stream");
        long s_none = stream ? cph_http_stream_status(h, real, NULL)
                             : cph_http(h, method, real, NULL, payload, NULL);
        long s_read = stream ? cph_http_stream_status(h, real, rtok)
                             : cph_http(h, method, real, rtok, payload, NULL);
        long s_admin = stream ? cph_http_stream_status(h, real, h->admin)
                              : cph_http(h, method, real, h->admin, payload, NULL);
        int want_none = strcmp(role, "none") == 0;
        int want_read = want_none || strcmp(role, "read") == 0;
        int good = (want_none ? s_none != 401 && s_none != 403 : s_none == 401) &&
                   (want_read ? s_read != 401 && s_read != 403 : s_read == 403) && s_admin != 401 &&
                   s_admin != 403 && s_admin != 0;
        if (!good) {
            matrix_ok = 0;
            diag("%s %s (%s): none=%ld read=%ld admin=%ld", method, real, role, s_none, s_read,
                 s_admin);
        }
    }
    if (p)
        pclose(p);
    ok(routes >= 14, "--print-routes lists the route table (%d routes)", routes);
    ok(matrix_ok, "every route: 401 without a token, 403 for read on admin routes, admin passes");
    st = cph_http(h, "GET", "/api/v1/groups",
                  "tdm_0000000000000000000000000000000000000000000000000000000000000000", NULL,
                  &body);
    ok(st == 401 && is_error_body(body, "unauthorized"), "unknown token → 401 error body");
    free(body);

    /* tandemctl */
    char out[4096] = "", cmd2[2048];
    snprintf(cmd2, sizeof(cmd2),
             "%s/tandemctl --url %s --token-file %s/admin.token token create ci --role admin && "
             "%s/tandemctl --url %s --token-file %s/admin.token token list && "
             "%s/tandemctl --url %s --token-file %s/admin.token token revoke viewer",
             cph_builddir(), h->url, h->state_dir, cph_builddir(), h->url, h->state_dir,
             cph_builddir(), h->url, h->state_dir);
    p = popen(cmd2, "r");
    size_t got = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
    out[got] = '\0';
    int rc = p ? pclose(p) : -1;
    ok(rc == 0 && strstr(out, "\"token\":\"tdm_") && strstr(out, "\"name\":\"ci\""),
       "tandemctl token create/list/revoke");
    st = cph_http(h, "GET", "/api/v1/groups", rtok, NULL, NULL);
    is_int(st, 401, "revoked read token is refused at once");
    is_int(count("SELECT count(*) FROM actions WHERE action IN ('token.create', 'token.revoke') "
                 "AND outcome = 'ok' AND actor = 'admin'"),
           3, "token actions are in the audit log with actor and outcome");
    is_int(count("SELECT count(*) FROM actions WHERE outcome = 'failed'"), 2,
           "the failed create (409) and revoke (unknown name) are audited as failed");
    char q[256];
    snprintf(q, sizeof(q),
             "SELECT count(*) FROM api_tokens WHERE name = 'viewer' AND token_hash = "
             "sha256(convert_to('%s', 'UTF8'))",
             rtok);
    is_int(count(q), 1, "tokens are stored as their SHA-256 only");
}

int main(void)
{
    pgtest_require();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char dsn[512];
    if (pgtest_db_create("test_cp_api", dsn, sizeof(dsn)) != 0)
        bail_out("cannot create the test database");
    db = PQconnectdb(dsn);
    cph_t h;
    const char *extra[] = {"--pg-dsn", dsn, NULL};
    if (cph_start(&h, extra, 200000) != 0) {
        ok(0, "tandemd started");
        cph_dump_log(&h);
        return done_testing();
    }
    ok(h.port > 0, "tandemd started on port %d", h.port);
    ok(cph_wait_notify(&h, "READY=1", 20) == 0, "READY=1 once the database is up");
    ok(cph_wait_notify(&h, "STATUS=serving", 1) == 0, "STATUS= lines sent");
    ok(cph_wait_notify(&h, "WATCHDOG=1", 5) == 0, "WATCHDOG=1 from the loop");
    char *body = NULL;
    long st = cph_http(&h, "GET", "/health", NULL, NULL, &body);
    ok(st == 200 && strstr(body, "\"db\":\"up\""), "/health without a token: %s", body);
    free(body);
    struct stat sb;
    char tokpath[256];
    snprintf(tokpath, sizeof(tokpath), "%s/admin.token", h.state_dir);
    ok(stat(tokpath, &sb) == 0 && (sb.st_mode & 0777) == 0600, "admin.token written 0600");

    test_ingest(&h);
    test_group_commit(&h);
    test_auth(&h);
    test_edge_rows(&h);

    is_int(cph_stop(&h), 0, "SIGTERM: clean exit");
    if (exit_status())
        cph_dump_log(&h);
    cph_cleanup(&h);
    PQfinish(db);
    curl_global_cleanup();
    return done_testing();
}
