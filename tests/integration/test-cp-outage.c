/* test-cp-outage.c — PostgreSQL stopped under steady ingest, then started again: 0 events lost,
 * order kept, /health unaffected.
 *
 * The test runs its OWN private cluster (tdm/pgcluster.h in a temp dir) so it can stop it. Four
 * sender threads play four ranks, each POSTing telemetry batches in sequence and retrying a batch
 * until it is acknowledged, like the worker's reporter. tandemd runs with a small in-memory ingest
 * bound so the outage drives batches through the on-disk spool. The outage lasts
 * TDM_CP_OUTAGE_S seconds (default 10; 60 in a longer run). Afterwards, per rank: every event of
 * every acknowledged batch is in the database exactly once, and rows were committed in batch
 * order (xmin increases with batch_seq). Then, still under ingest, tandemd's ingest connections are
 * terminated 40 times (pg_terminate_backend: the FATAL 57P01 result a server shutdown sends while
 * libpq still calls the connection OK), which must cost no batch either. */
#include "config.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>

#include <tdm/pgcluster.h>

#include "cp-harness.h"

#define RANKS 4
#define EVENTS_PER_BATCH 3

static cph_t h;
static atomic_int stop_sending;
static atomic_long acked_batches[RANKS];
static atomic_long acked_in_outage;
static atomic_int outage;

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *sender(void *arg)
{
    int rank = (int)(long)arg;
    for (long seq = 1; !atomic_load(&stop_sending); seq++) {
        long long t = now_us();
        json_t *s = json_array(), *e = json_array();
        for (int i = 0; i < 2; i++)
            json_array_append_new(s, json_pack("{s:I,s:I,s:s,s:s,s:I,s:s,s:n,s:i,s:i,s:i}", "ts_us",
                                               (json_int_t)(t + i * 100000), "iter",
                                               (json_int_t)seq, "path", "batch", "plan_hash",
                                               "0000000000000001", "coll_seq", (json_int_t)seq,
                                               "coll_hash", "0000000000000002", "in_coll", "bs", 1,
                                               "waiting", 0, "running", 1));
        json_array_append_new(e, json_pack("{s:I,s:s,s:s,s:s,s:s}", "ts_us", (json_int_t)t, "type",
                                           "kvpoll", "room", "00000000000000f0", "from",
                                           "WAITING_FOR_INPUT", "to", "TRANSFERRING"));
        for (int i = 0; i < EVENTS_PER_BATCH - 1; i++)
            json_array_append_new(e,
                                  json_pack("{s:I,s:s,s:{s:I,s:i}}", "ts_us", (json_int_t)t, "type",
                                            "note", "data", "seq", (json_int_t)seq, "i", i));
        json_t *b = json_pack("{s:i,s:s,s:s,s:s,s:s,s:i,s:I,s:o,s:o}", "v", 1, "worker", "w",
                              "group", "g", "role", "decode", "instance_id", "00000000000000bb",
                              "rank", rank, "seq", (json_int_t)seq, "samples", s, "events", e);
        char *text = json_dumps(b, JSON_COMPACT);
        json_decref(b);
        int acked = 0;
        for (int tries = 0; tries < 900; tries++) { /* 3 minutes, then the batch counts as lost */
            char *body = NULL;
            long st = cph_http_t(&h, "POST", "/api/v1/telemetry", h.admin, text, strlen(text),
                                 &body, 60000);
            json_t *j = st == 200 ? json_loads(body, 0, NULL) : NULL;
            long a = (long)json_integer_value(json_object_get(j, "acked_seq"));
            json_decref(j);
            free(body);
            if (a == seq) {
                acked = 1;
                break;
            }
            usleep(200000); /* retry the same seq, like the reporter */
        }
        free(text);
        if (!acked)
            break; /* the test fails on the missing events; it never hangs */
        atomic_fetch_add(&acked_batches[rank], 1);
        if (atomic_load(&outage))
            atomic_fetch_add(&acked_in_outage, 1);
        usleep(20000);
    }
    return NULL;
}

static long metric(const char *name)
{
    char *body = NULL;
    long v = -1;
    if (cph_http_t(&h, "GET", "/metrics", h.admin, NULL, 0, &body, 2000) == 200) {
        char *p = strstr(body, name);
        while (p && p > body && p[-1] != '\n')
            p = strstr(p + 1, name);
        if (p)
            v = atol(p + strlen(name) + 1);
    }
    free(body);
    return v;
}

static long q1(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    long n =
        PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ? atol(PQgetvalue(r, 0, 0)) : -1;
    if (n < 0)
        diag("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return n;
}

/* Start the stopped cluster again on its old port, as user postgres (pg_ctl refuses root). */
static int restart_same_port(const tdm_pg_info_t *info)
{
    char cmd[16384];
    snprintf(cmd, sizeof(cmd),
             "runuser -u %s -- %s/pg_ctl -D '%s' -w -t 60 -l '%s/restart.log' "
             "-o '-c port=%d -c listen_addresses=127.0.0.1 -c unix_socket_directories=/tmp' "
             "start >/dev/null",
             info->user, TDM_PG_BINDIR, info->datadir, info->datadir, info->port);
    if (geteuid() != 0)
        snprintf(cmd, sizeof(cmd),
                 "%s/pg_ctl -D '%s' -w -t 60 -l '%s/restart.log' -o '-c port=%d "
                 "-c listen_addresses=127.0.0.1 -c unix_socket_directories=/tmp' start >/dev/null",
                 TDM_PG_BINDIR, info->datadir, info->datadir, info->port);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const char *os = getenv("TDM_CP_OUTAGE_S");
    int outage_s = os && atoi(os) > 0 ? atoi(os) : 10;
    char pgdir[] = "/tmp/cp-outage-pg-XXXXXX", dsn[1024], admin_dsn[1024];
    if (!mkdtemp(pgdir))
        bail_out("mkdtemp failed");
    char cluster[256];
    snprintf(cluster, sizeof(cluster), "%s/cluster", pgdir);
    tdm_pg_opts_t opts = {.for_tests = 1, .bindir = NULL};
    tdm_pg_info_t info;
    if (tdm_pg_cluster_start(cluster, &opts, &info) != TDM_OK) {
        rmdir(pgdir);
        bail_out("cannot start a private PostgreSQL (no binaries or no user postgres)");
    }
    tdm_pg_info_dsn(&info, "postgres", admin_dsn, sizeof(admin_dsn));
    PGconn *c = PQconnectdb(admin_dsn);
    PQclear(PQexec(c, "CREATE DATABASE outage"));
    PQfinish(c);
    /* tandemd reaches the cluster over TCP so the restart below can bring it back on the same
     * address (the helper picks a fresh port and socket directory on every start). */
    snprintf(dsn, sizeof(dsn), "host=127.0.0.1 port=%d user=%s dbname=outage connect_timeout=5",
             info.port, info.user);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    const char *extra[] = {"--pg-dsn", dsn, "--ingest-buffer-bytes", "3000", NULL};
    if (cph_start(&h, extra, 0) != 0 || cph_wait_notify(&h, "READY=1", 30) != 0) {
        ok(0, "tandemd started and ready");
        cph_dump_log(&h);
        cph_stop(&h);
        tdm_pg_cluster_destroy(cluster, &opts);
        return done_testing();
    }
    ok(h.port > 0, "tandemd ready on port %d, outage of %d s", h.port, outage_s);
    pthread_t tids[RANKS];
    for (long r = 0; r < RANKS; r++)
        pthread_create(&tids[r], NULL, sender, (void *)r);
    /* steady ingest: every rank has had batches acknowledged (at most 30 s) */
    long before = 0;
    for (double end = cph_now() + 30; cph_now() < end; usleep(50000)) {
        int all = 1;
        before = 0;
        for (int r = 0; r < RANKS; r++) {
            before += atomic_load(&acked_batches[r]);
            all &= atomic_load(&acked_batches[r]) >= 3;
        }
        if (all)
            break;
    }
    ok(before >= 3 * RANKS, "steady ingest before the outage (%ld batches)", before);

    atomic_store(&outage, 1);
    is_int(tdm_pg_cluster_stop(cluster, &opts), TDM_OK, "PostgreSQL stopped");
    double t_stop = cph_now();
    /* /health reports the database down within 30 s, and every answer meanwhile is immediate */
    char *body = NULL;
    double slowest = 0;
    int down = 0;
    long st = 0;
    while (!down && cph_now() - t_stop < 30) {
        free(body);
        body = NULL;
        double t0 = cph_now();
        st = cph_http_t(&h, "GET", "/health", NULL, NULL, 0, &body, 1000);
        if (cph_now() - t0 > slowest)
            slowest = cph_now() - t0;
        down = st == 200 && body && strstr(body, "\"db\":\"down\"");
        if (!down)
            usleep(100000);
    }
    ok(down && slowest < 0.5, "/health answers at once during the outage (slowest %.3f s): %s",
       slowest, body ? body : "(none)");
    free(body);
    /* the outage lasts outage_s; past that, at most 60 s more until the spool has taken batches
     * that were acknowledged meanwhile */
    long spooled = 0;
    while (cph_now() - t_stop < outage_s + 60) {
        spooled = metric("tandem_ingest_batches_total{outcome=\"spooled\"}");
        if (cph_now() - t_stop >= outage_s && spooled > 0 && atomic_load(&acked_in_outage) > 0)
            break;
        usleep(100000);
    }
    atomic_store(&outage, 0);
    ok(restart_same_port(&info) == 0, "PostgreSQL started again on port %d", info.port);
    ok(atomic_load(&acked_in_outage) > 0 && spooled > 0,
       "ingest went on during the outage through the spool (%ld batches acked, %ld spooled)",
       atomic_load(&acked_in_outage), spooled);
    /* ingest resumes: every rank gets 3 more batches acknowledged after the restart (<= 60 s) */
    long at_restart[RANKS], resumed = 0;
    for (int r = 0; r < RANKS; r++)
        at_restart[r] = atomic_load(&acked_batches[r]);
    for (double end = cph_now() + 60; cph_now() < end && !resumed; usleep(50000)) {
        resumed = 1;
        for (int r = 0; r < RANKS; r++)
            resumed &= atomic_load(&acked_batches[r]) >= at_restart[r] + 3;
    }
    ok(resumed, "ingest resumed after the restart on every rank");
    /* connections killed mid-statement: each kill lands in whatever the ingest thread is doing */
    PGconn *k = PQconnectdb(dsn);
    long killed = 0, kills = 0, acked0 = 0, acked1 = 0;
    for (int r = 0; r < RANKS; r++)
        acked0 += atomic_load(&acked_batches[r]);
    /* 12 kills, each once tandemd has reconnected (its reconnect takes longer on a loaded
     * host, so the count of kills, not of tries, is fixed; 1000 tries at most) */
    for (int i = 0; kills < 12 && PQstatus(k) == CONNECTION_OK && i < 1000; i++) {
        long n = q1(k, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE application_name LIKE 'tandemd-ingest%'");
        if (n > 0) {
            killed += n;
            kills++;
        }
        usleep(60000 + 10000 * (i % 7));
    }
    PQfinish(k);
    for (double end2 = cph_now() + 60; cph_now() < end2; usleep(50000)) {
        acked1 = 0;
        for (int r = 0; r < RANKS; r++)
            acked1 += atomic_load(&acked_batches[r]);
        if (acked1 >= acked0 + 3 * RANKS && metric("tandem_db_up") == 1)
            break;
    }
    ok(kills >= 10 && acked1 >= acked0 + 3 * RANKS,
       "ingest connections terminated %ld times (%ld backends) under ingest; ingest went on "
       "(%ld -> %ld batches acknowledged)",
       kills, killed, acked0, acked1);
    atomic_store(&stop_sending, 1);
    for (int r = 0; r < RANKS; r++)
        pthread_join(tids[r], NULL);

    /* Wait for the backlog to reach the database. */
    double end = cph_now() + 120;
    long mem = -1, spool = -1, up = -1;
    while (cph_now() < end) {
        mem = metric("tandem_ingest_buffer_batches");
        spool = metric("tandem_ingest_spool_batches");
        up = metric("tandem_db_up");
        if (mem == 0 && spool == 0 && up == 1)
            break;
        usleep(200000);
    }
    ok(mem == 0 && spool == 0 && up == 1, "backlog flushed (memory %ld, spool %ld, db up %ld)", mem,
       spool, up);

    c = PQconnectdb(dsn);
    long total_acked = 0;
    int lost_ok = 1;
    for (int r = 0; r < RANKS; r++) {
        char q[256];
        long want = atomic_load(&acked_batches[r]) * EVENTS_PER_BATCH;
        total_acked += atomic_load(&acked_batches[r]);
        snprintf(q, sizeof(q),
                 "SELECT (SELECT count(*) FROM events WHERE rank = %d) + "
                 "(SELECT count(*) FROM transfer_events WHERE rank = %d)",
                 r, r);
        long got = q1(c, q);
        if (got != want) {
            lost_ok = 0;
            diag("rank %d: %ld events in the database, %ld acknowledged", r, got, want);
        }
    }
    ok(lost_ok, "0 events lost, none duplicated (%ld batches, %ld events)", total_acked,
       total_acked * EVENTS_PER_BATCH);
    is_int(q1(c, "SELECT count(*) FROM (SELECT rank, batch_seq, count(*) n FROM events "
                 "GROUP BY 1, 2 HAVING count(*) <> 2) d"),
           0, "every batch's events arrived together");
    is_int(q1(c, "SELECT count(*) FROM (SELECT batch_seq, xmin::text::bigint AS x, "
                 "lag(xmin::text::bigint) OVER (PARTITION BY rank ORDER BY batch_seq, idx) AS px, "
                 "lag(batch_seq) OVER (PARTITION BY rank ORDER BY batch_seq, idx) AS pseq "
                 "FROM events) t WHERE x < px OR batch_seq > pseq + 1"),
           0, "order kept: per rank, batches committed in seq order with no gap");
    is_int(q1(c, "SELECT count(*) FROM (SELECT rank, max(batch_seq) m, count(DISTINCT batch_seq) n "
                 "FROM events GROUP BY 1) t WHERE m <> n"),
           0, "per rank, batch seqs 1..N all present");
    PQfinish(c);
    is_int(cph_stop(&h), 0, "tandemd exits cleanly");
    if (exit_status())
        cph_dump_log(&h);
    cph_cleanup(&h);
    tdm_pg_cluster_destroy(cluster, &opts);
    rmdir(pgdir);
    curl_global_cleanup();
    return done_testing();
}
