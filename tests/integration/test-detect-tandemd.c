/*
 * test-detect-tandemd.c — the detectors inside a real tandemd against a real PostgreSQL: an ABORT
 * without ACK posted as telemetry opens ABORT_UNACKED after 5 s, visible at once in
 * GET /api/v1/alerts?source=live and persisted to the alerts table; the ACK resolves it 10 s later
 * (resolved_by auto) in memory and in the table. The alert has one id, live and stored, even with
 * an earlier run's alert in the table.
 */
#include "config.h"

#include <jansson.h>
#include <libpq-fe.h>

#include "cp-harness.h"
#include "pgtest.h"

static PGconn *db;

static char *query1(const char *sql)
{
    PGresult *r = PQexec(db, sql);
    char *v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
                  ? strdup(PQgetvalue(r, 0, 0))
                  : NULL;
    PQclear(r);
    return v;
}

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static char *abort_batch(int seq, const char *type)
{
    json_t *b =
        json_pack("{s:i,s:s,s:s,s:s,s:s,s:i,s:i,s:[],s:[{s:I,s:s,s:s,s:{s:s}}]}", "v", 1, "worker",
                  "dec-0", "group", "dec", "role", "decode", "instance_id", "00000000000000bb",
                  "rank", 0, "seq", seq, "samples", "events", "ts_us", (json_int_t)now_us(), "type",
                  type, "room", "0000000000000077", "data", "peer", "prefill-0");
    char *t = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return t;
}

/* Poll the live alert view until `pred` holds for the ABORT_UNACKED alert or timeout. */
static json_t *live_alert(cph_t *h, const char *state, double timeout_s)
{
    double end = cph_now() + timeout_s;
    char path[96];
    snprintf(path, sizeof(path), "/api/v1/alerts?source=live&state=%s", state);
    while (cph_now() < end) {
        char *body = NULL;
        if (cph_http(h, "GET", path, h->admin, NULL, &body) == 200) {
            json_t *j = json_loads(body, 0, NULL);
            json_t *a = json_array_get(json_object_get(j, "alerts"), 0);
            if (a) {
                json_incref(a);
                json_decref(j);
                free(body);
                return a;
            }
            json_decref(j);
        }
        free(body);
        usleep(100000);
    }
    return NULL;
}

int main(void)
{
    pgtest_require();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char dsn[512];
    if (pgtest_db_create("test_detect_tandemd", dsn, sizeof(dsn)) != 0)
        bail_out("cannot create the test database");
    db = PQconnectdb(dsn);
    cph_t h;
    const char *extra[] = {"--pg-dsn", dsn, NULL};
    if (cph_start(&h, extra, 0) != 0) {
        ok(0, "tandemd started");
        cph_dump_log(&h);
        return done_testing();
    }
    ok(cph_wait_notify(&h, "READY=1", 30) == 0, "tandemd ready");
    /* an alert of an earlier run in the table: the database's own numbering would give the next
     * one id 2 while a count kept in memory from this start gives 1 */
    int seeded = 0;
    for (int i = 0; i < 100 && !seeded; i++) {
        PGresult *r = PQexec(db, "INSERT INTO alerts (kind, group_name, state, summary, evidence, "
                                 "opened_us, resolved_us, resolved_by) VALUES ('WEDGE', 'old', "
                                 "'resolved', 'earlier', '{}', 1, 2, 'auto')");
        seeded = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!seeded)
            usleep(100000); /* the schema is tandemd's to apply */
    }
    ok(seeded, "an earlier run's alert is in the table");
    char *body = NULL, *b = abort_batch(1, "abort_sent");
    long st = cph_http(&h, "POST", "/api/v1/telemetry", h.admin, b, &body);
    is_int(st, 200, "abort_sent ingested");
    free(b);
    free(body);
    double t0 = cph_now();
    json_t *a = live_alert(&h, "open", 15);
    double dt = cph_now() - t0;
    ok(a && !strcmp(json_string_value(json_object_get(a, "kind")), "ABORT_UNACKED") &&
           !strcmp(json_string_value(json_object_get(a, "group")), "dec"),
       "ABORT_UNACKED open in the live view after %.1f s", dt);
    ok(dt >= 4.5 && dt < 10, "after the 5 s ACK window (2x slack)");
    char live_id[32] = "";
    snprintf(live_id, sizeof(live_id), "%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(a, "id")));
    json_decref(a);
    char *row = NULL;
    for (int i = 0; i < 50 && !row; i++) {
        row = query1("SELECT kind || ' ' || state || ' ' || (evidence->'aborts'->0->>'peer') "
                     "FROM alerts WHERE group_name = 'dec'");
        if (!row)
            usleep(100000);
    }
    is_str(row, "ABORT_UNACKED open prefill-0", "persisted to the alerts table with evidence");
    free(row);
    row = query1("SELECT id FROM alerts WHERE group_name = 'dec'");
    is_str(row, live_id, "one id for the alert: the live view's %s is the table's", live_id);
    free(row);
    st = cph_http(&h, "GET", "/api/v1/alerts?state=open", h.admin, NULL, &body);
    ok(st == 200 && strstr(body, "ABORT_UNACKED"), "GET /api/v1/alerts (database) lists it");
    free(body);

    b = abort_batch(2, "abort_acked");
    st = cph_http(&h, "POST", "/api/v1/telemetry", h.admin, b, &body);
    free(b);
    free(body);
    t0 = cph_now();
    a = live_alert(&h, "resolved", 25);
    dt = cph_now() - t0;
    ok(a && !strcmp(json_string_value(json_object_get(a, "resolved_by")), "auto"),
       "resolved by auto %.1f s after the ACK", dt);
    ok(dt >= 9.5 && dt < 20, "after 10 s of the rule being false (2x slack)");
    json_decref(a);
    row = NULL;
    for (int i = 0; i < 50; i++) {
        free(row);
        row = query1("SELECT state || ' ' || resolved_by FROM alerts WHERE group_name = 'dec'");
        if (row && !strcmp(row, "resolved auto"))
            break;
        usleep(100000);
    }
    is_str(row, "resolved auto", "the table row is resolved too");
    free(row);
    is_int(cph_stop(&h), 0, "SIGTERM: clean exit");
    cph_cleanup(&h);
    PQfinish(db);
    return done_testing();
}
