/*
 * db.c — the query, read and ingest threads (see db.h for the contract).
 *
 * Each thread owns its PGconn outright; the only shared state is the job queues (one mutex, one
 * condition variable each) and the atomic counters. The spool file belongs to ingest worker 0
 * alone. A batch stays in the memory queue (claimed by the worker whose group holds it) until it
 * is committed, counted as a duplicate or made durable in the spool, so a connection lost
 * mid-transaction just gives the group back to be retried: the high-water mark decides whether a
 * commit whose reply was lost already happened.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/hash.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/store/batch.h"
#include "controlplane/store/buf.h"
#include "controlplane/store/db.h"
#include "controlplane/store/migrate.h"
#include "controlplane/store/db_spool.h"

#define BACKOFF_MIN_US 100000u
#define BACKOFF_MAX_US 2000000u
#define SPOOL_TYPE_BATCH 1

typedef struct jobq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tdm_cp_job_t *head, *tail;
} jobq_t;

#define PREP_MAX 16

typedef struct qworker {
    struct tdm_cp_db *db;
    jobq_t *q;
    int primary; /* migrations, upkeep, the open-alert count, every job that is not a read */
    int idx;
    pthread_t tid;
    /* statements prepared on this worker's connection, keyed by the job's static SQL text */
    const char *prep_sql[PREP_MAX];
    int nprep;
} qworker_t;

struct tdm_cp_db {
    tdm_cp_db_opts_t opts;
    char *dsn;
    tdm_cp_db_stats_t stats;
    atomic_int stop;
    jobq_t queries;
    jobq_t reads; /* readonly jobs, served by the reader pool */
    jobq_t ingest;
    qworker_t qw[1 + TDM_CP_DB_READERS];
    int nqw;
    uint64_t mem_bytes; /* under ingest.mu */
    int spool_full;     /* under ingest.mu: the last spill found the spool full */
    tdm_cp_spool_t *spool;
    struct iworker {
        struct tdm_cp_db *db;
        int idx; /* 0 also owns the spool: spills to it and replays it */
        pthread_t tid;
    } iw[TDM_CP_DB_INGEST_CONNS];
    int niw;
    atomic_int ingest_up;  /* ingest connections connected */
    size_t claimed_n;      /* under ingest.mu: queued jobs some worker's group holds */
    int spool_unreadable;  /* under ingest.mu: a spool read failed; its records are given up */
    struct recent *recent; /* under ingest.mu: per worker, the keys of recent commits */
    struct keymap *keymap; /* under ingest.mu: which worker each (instance_id, rank) goes to */
    int query_up;
    struct {
        char key[TDM_CP_DB_CACHE_KEY];
        uint64_t gen, at_us;
        char *body;
        int refreshing;       /* a refresh was claimed (tdm_cp_db_cache_claim_refresh) */
    } cache[TDM_CP_DB_CACHE]; /* loop thread only */
};

/* ---- jobs ---------------------------------------------------------------------------------- */

tdm_cp_job_t *tdm_cp_job_new(const char *sql, tdm_cp_job_done_fn done, void *ctx)
{
    tdm_cp_job_t *job = tdm_calloc(1, sizeof(*job));
    job->sql = sql;
    job->done = done;
    job->ctx = ctx;
    return job;
}

void tdm_cp_job_param(tdm_cp_job_t *job, const char *value)
{
    if (job->nparams >= TDM_CP_JOB_MAX_PARAMS)
        abort(); /* a programming error: the statements are ours */
    job->params[job->nparams++] = value ? tdm_strdup(value) : NULL;
}

void tdm_cp_job_free(tdm_cp_job_t *job)
{
    if (!job)
        return;
    for (int i = 0; i < job->nparams; i++)
        tdm_free(job->params[i]);
    tdm_free(job->result);
    tdm_free(job->aux);
    tdm_free(job->hist);
    tdm_cp_batch_free(job->batch);
    tdm_free(job);
}

static void jobq_init(jobq_t *q)
{
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    q->head = q->tail = NULL;
}

static void jobq_destroy(jobq_t *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}

/* Under q->mu. */
static void jobq_push_locked(jobq_t *q, tdm_cp_job_t *job)
{
    job->next = NULL;
    if (q->tail)
        q->tail->next = job;
    else
        q->head = job;
    q->tail = job;
}

static tdm_cp_job_t *jobq_pop_locked(jobq_t *q)
{
    tdm_cp_job_t *job = q->head;
    if (job) {
        q->head = job->next;
        if (!q->head)
            q->tail = NULL;
        job->next = NULL;
    }
    return job;
}

static void cond_wait_us(jobq_t *q, uint64_t us)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + us * 1000u;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(&q->cv, &q->mu, &ts);
}

static void reply(tdm_cp_db_t *db, tdm_cp_job_t *job)
{
    h2o_multithread_send_message(db->opts.reply_to, &job->msg);
}

static void set_err(tdm_cp_job_t *job, tdm_status_t st, const char *msg)
{
    job->st = st;
    snprintf(job->err, sizeof(job->err), "%s", msg);
    size_t n = strlen(job->err);
    while (n && (job->err[n - 1] == '\n' || job->err[n - 1] == ' '))
        job->err[--n] = '\0';
}

/* ---- connections ---------------------------------------------------------------------------- */

static PGconn *db_connect(tdm_cp_db_t *db, const char *app)
{
    const char *keys[] = {"dbname", "application_name", "connect_timeout", NULL};
    const char *vals[] = {db->dsn, app, "5", NULL};
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(conn) != CONNECTION_OK) {
        tdm_dbg(TDM_SUB_DB, "msg=\"connect failed\" app=%s err=\"%s\"", app, PQerrorMessage(conn));
        PQfinish(conn);
        return NULL;
    }
    PQsetNoticeProcessor(conn, tdm_log_pq_notice, NULL);
    return conn;
}

static void update_up(tdm_cp_db_t *db)
{
    atomic_store(&db->stats.up,
                 db->query_up && atomic_load(&db->ingest_up) == TDM_CP_DB_INGEST_CONNS);
}

/* ---- query thread --------------------------------------------------------------------------- */

static void take_result(PGconn *conn, PGresult *res, tdm_cp_job_t *job)
{
    (void)conn;
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        job->st = TDM_OK;
        if (st == PGRES_TUPLES_OK && job->render)
            job->render(res, job);
        else if (st == PGRES_TUPLES_OK && PQntuples(res) > 0 && PQnfields(res) > 0 &&
                 !PQgetisnull(res, 0, 0))
            job->result = tdm_strndup(PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
        const char *n = PQcmdTuples(res);
        job->affected = n && *n ? atol(n) : 0;
    } else {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        snprintf(job->sqlstate, sizeof(job->sqlstate), "%s", state ? state : "");
        set_err(job, TDM_ERR_DB, PQresultErrorMessage(res));
    }
}

/* Run a job. Readers prepare each read statement once per connection (PREP_MAX of them; the
 * readonly statements are the read handlers' static texts) and execute it by name. */
static void run_query(qworker_t *w, PGconn *conn, tdm_cp_job_t *job)
{
    int slot = -1;
    if (!w->primary) {
        for (int i = 0; i < w->nprep; i++)
            if (w->prep_sql[i] == job->sql)
                slot = i;
        if (slot < 0 && w->nprep < PREP_MAX) {
            char name[16];
            snprintf(name, sizeof(name), "r%d", w->nprep);
            PGresult *pr = PQprepare(conn, name, job->sql, 0, NULL);
            if (PQresultStatus(pr) == PGRES_COMMAND_OK) {
                slot = w->nprep;
                w->prep_sql[w->nprep++] = job->sql;
            }
            PQclear(pr);
        }
    }
    PGresult *res;
    if (slot >= 0) {
        char name[16];
        snprintf(name, sizeof(name), "r%d", slot);
        res = PQexecPrepared(conn, name, job->nparams, (const char *const *)job->params, NULL, NULL,
                             0);
    } else {
        res = PQexecParams(conn, job->sql, job->nparams, NULL, (const char *const *)job->params,
                           NULL, NULL, 0);
    }
    take_result(conn, res, job);
    PQclear(res);
}

/* Also the primary's once-a-second look at its connection: an idle connection learns that the
 * server went away only when it is used, and /health must say "db":"down" meanwhile. */
static void refresh_open_alerts(tdm_cp_db_t *db, PGconn *conn)
{
    PGresult *res = PQexec(conn, "SELECT count(*) FROM alerts WHERE state = 'open'");
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        atomic_store(&db->stats.open_alerts, strtoull(PQgetvalue(res, 0, 0), NULL, 10));
    PQclear(res);
}

static int query_conn_setup(tdm_cp_db_t *db, PGconn *conn)
{
    char err[512];
    int from = 0, to = 0;
    tdm_status_t st = tdm_cp_migrate_apply(conn, &from, &to, err, sizeof(err));
    if (st != TDM_OK) {
        tdm_err(TDM_SUB_DB, "msg=\"migrations failed\" err=\"%s\"", err);
        return -1;
    }
    if (from != to)
        tdm_info(TDM_SUB_DB, "msg=\"schema migrated\" from=%d to=%d", from, to);
    st = tdm_cp_partitions_maintain(conn, tdm_time_wall_us(), db->opts.retention_days, err,
                                    sizeof(err));
    if (st != TDM_OK) {
        tdm_err(TDM_SUB_DB, "msg=\"partition upkeep failed\" err=\"%s\"", err);
        return -1;
    }
    PQclear(PQexec(conn, "SET statement_timeout = '10s'"));
    atomic_store(&db->stats.schema_ready, 1);
    return 0;
}

static void conn_lost(qworker_t *w, PGconn **conn, const char *app, const char *why)
{
    tdm_warn(TDM_SUB_DB, "msg=\"database connection lost\" conn=%s err=\"%.200s\"", app, why);
    PQfinish(*conn);
    *conn = NULL;
    if (w->primary) {
        w->db->query_up = 0;
        update_up(w->db);
    }
    atomic_fetch_add(&w->db->stats.reconnects, 1);
}

/* A new connection for the worker, ready for its jobs (the primary applies the migrations on
 * it); NULL when the database cannot be reached. */
static PGconn *worker_connect(qworker_t *w, const char *app)
{
    tdm_cp_db_t *db = w->db;
    PGconn *conn = db_connect(db, app);
    if (conn && w->primary && query_conn_setup(db, conn) != 0) {
        PQfinish(conn);
        conn = NULL;
    }
    if (conn && !w->primary)
        PQclear(PQexec(conn, "SET statement_timeout = '10s'"));
    w->nprep = 0;
    if (conn) {
        if (w->primary)
            db->query_up = 1;
        tdm_info(TDM_SUB_DB, "msg=\"database connected\" conn=%s", app);
    }
    return conn;
}

static void *query_main(void *arg)
{
    qworker_t *w = arg;
    tdm_cp_db_t *db = w->db;
    jobq_t *q = w->q;
    PGconn *conn = NULL;
    uint64_t backoff = BACKOFF_MIN_US, next_try = 0, next_alerts = 0, next_upkeep = 0;
    char app[32];
    snprintf(app, sizeof(app), w->primary ? "tandemd-query" : "tandemd-read-%d", w->idx);

    while (!atomic_load(&db->stop)) {
        uint64_t now = tdm_time_mono_us();
        /* Readers connect once the primary has applied the migrations. */
        if (!conn && now >= next_try && (w->primary || atomic_load(&db->stats.schema_ready))) {
            conn = worker_connect(w, app);
            if (conn) {
                backoff = BACKOFF_MIN_US;
                if (w->primary)
                    next_upkeep = now + 3600u * 1000000u;
            } else {
                next_try = now + backoff;
                backoff = backoff * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : backoff * 2;
            }
            if (w->primary)
                update_up(db);
        }
        if (w->primary && conn && now >= next_alerts) {
            refresh_open_alerts(db, conn);
            next_alerts = now + 1000000u;
            if (PQstatus(conn) == CONNECTION_BAD) {
                conn_lost(w, &conn, app, "the once-a-second check failed");
                continue;
            }
        }
        if (w->primary && conn && now >= next_upkeep) {
            char err[512];
            if (tdm_cp_partitions_maintain(conn, tdm_time_wall_us(), db->opts.retention_days, err,
                                           sizeof(err)) != TDM_OK)
                tdm_err(TDM_SUB_DB, "msg=\"partition upkeep failed\" err=\"%s\"", err);
            next_upkeep = now + 3600u * 1000000u;
        }

        pthread_mutex_lock(&q->mu);
        tdm_cp_job_t *job = NULL;
        if (conn) {
            job = jobq_pop_locked(q);
        } else {
            /* Down: fail what cannot wait, keep what can. */
            tdm_cp_job_t *keep = NULL, *keep_tail = NULL, *j;
            while ((j = jobq_pop_locked(q)) != NULL) {
                if (j->wait) {
                    if (keep_tail)
                        keep_tail->next = j;
                    else
                        keep = j;
                    keep_tail = j;
                } else {
                    set_err(j, TDM_ERR_DB, "database unavailable");
                    reply(db, j);
                }
            }
            q->head = keep;
            q->tail = keep_tail;
        }
        if (!job && !atomic_load(&db->stop))
            cond_wait_us(q, conn ? 200000u : (next_try > now ? next_try - now : 1000u));
        pthread_mutex_unlock(&q->mu);
        if (!job)
            continue;

        run_query(w, conn, job);
        if (job->st != TDM_OK && PQstatus(conn) == CONNECTION_BAD && job->readonly) {
            /* An idle connection learns that the server restarted only when it is used: one
             * fresh connection and one more try before a client hears "database unavailable".
             * Reads only: a write whose reply was lost may have committed. */
            conn_lost(w, &conn, app, job->err);
            conn = worker_connect(w, app);
            if (w->primary)
                update_up(db);
            if (conn) {
                job->st = TDM_OK;
                job->err[0] = job->sqlstate[0] = '\0';
                run_query(w, conn, job);
            }
        }
        if (job->st != TDM_OK && (!conn || PQstatus(conn) == CONNECTION_BAD)) {
            if (conn)
                conn_lost(w, &conn, app, job->err);
            next_try = 0;
            if (job->wait) {
                pthread_mutex_lock(&q->mu);
                job->next = q->head;
                q->head = job;
                if (!q->tail)
                    q->tail = job;
                pthread_mutex_unlock(&q->mu);
                continue;
            }
            set_err(job, TDM_ERR_DB, "database unavailable");
        } else if (job->st != TDM_OK) {
            atomic_fetch_add(&db->stats.query_errors, 1);
        }
        /* Anything the primary ran may have changed what reads return (readers' caches key on
         * this generation). */
        if (w->primary && !job->readonly)
            atomic_fetch_add(&db->stats.write_gen, 1);
        reply(db, job);
    }

    pthread_mutex_lock(&q->mu);
    tdm_cp_job_t *j;
    while ((j = jobq_pop_locked(q)) != NULL) {
        set_err(j, TDM_ERR_ABORTED, "shutting down");
        reply(db, j);
    }
    pthread_mutex_unlock(&q->mu);
    PQfinish(conn);
    return NULL;
}

/* ---- ingest thread -------------------------------------------------------------------------- */

typedef enum { INGEST_OK, INGEST_DUP, INGEST_CONN, INGEST_DATA } ingest_rc_t;

static ingest_rc_t exec_cmd(PGconn *conn, const char *sql, char *err, size_t err_len)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    ingest_rc_t rc = INGEST_OK;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "%s", PQresultErrorMessage(res));
        rc = PQstatus(conn) == CONNECTION_BAD ? INGEST_CONN : INGEST_DATA;
    }
    PQclear(res);
    return rc;
}

static ingest_rc_t copy_rows(PGconn *conn, const char *sql, const char *rows, size_t len, char *err,
                             size_t err_len)
{
    if (len == 0)
        return INGEST_OK;
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_COPY_IN) {
        snprintf(err, err_len, "%s", PQresultErrorMessage(res));
        PQclear(res);
        return PQstatus(conn) == CONNECTION_BAD ? INGEST_CONN : INGEST_DATA;
    }
    PQclear(res);
    if (PQputCopyData(conn, rows, (int)len) != 1 || PQputCopyEnd(conn, NULL) != 1) {
        snprintf(err, err_len, "%s", PQerrorMessage(conn));
        return INGEST_CONN;
    }
    ingest_rc_t rc = INGEST_OK;
    while ((res = PQgetResult(conn)) != NULL) {
        if (PQresultStatus(res) != PGRES_COMMAND_OK && rc == INGEST_OK) {
            snprintf(err, err_len, "%s", PQresultErrorMessage(res));
            rc = PQstatus(conn) == CONNECTION_BAD ? INGEST_CONN : INGEST_DATA;
        }
        PQclear(res);
    }
    return rc;
}

static ingest_rc_t ingest_batch(PGconn *conn, const tdm_cp_batch_t *b, char *err, size_t err_len)
{
    char *inst = PQescapeLiteral(conn, b->instance_id, strlen(b->instance_id));
    if (!inst) {
        snprintf(err, err_len, "%s", PQerrorMessage(conn));
        return PQstatus(conn) == CONNECTION_BAD ? INGEST_CONN : INGEST_DATA;
    }
    char sql[512];
    uint64_t now = tdm_time_wall_us();
    /* One round trip: open the transaction and lock (or create) the mark. */
    snprintf(sql, sizeof(sql),
             "BEGIN; INSERT INTO ingest_marks VALUES (%s, %u, 0, %llu) "
             "ON CONFLICT (instance_id, rank) DO UPDATE SET seq = ingest_marks.seq RETURNING seq",
             inst, b->rank, (unsigned long long)now);
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        snprintf(err, err_len, "%s", PQresultErrorMessage(res));
        PQclear(res);
        PQfreemem(inst);
        ingest_rc_t rc = PQstatus(conn) == CONNECTION_BAD ? INGEST_CONN : INGEST_DATA;
        if (rc == INGEST_DATA)
            PQclear(PQexec(conn, "ROLLBACK"));
        return rc;
    }
    uint64_t mark = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    if (b->seq <= mark) {
        PQfreemem(inst);
        ingest_rc_t rc = exec_cmd(conn, "ROLLBACK", err, err_len);
        return rc == INGEST_OK ? INGEST_DUP : rc;
    }
    ingest_rc_t rc = copy_rows(conn, "COPY samples (" TDM_CP_SAMPLE_COLUMNS ") FROM STDIN",
                               b->samples, b->samples_len, err, err_len);
    if (rc == INGEST_OK)
        rc = copy_rows(conn,
                       "COPY transfer_events (ts_us, instance_id, rank, group_name, batch_seq, "
                       "idx, type, room, from_state, to_state, reason, data) FROM STDIN",
                       b->tevents, b->tevents_len, err, err_len);
    if (rc == INGEST_OK)
        rc = copy_rows(conn,
                       "COPY events (ts_us, source, instance_id, rank, group_name, batch_seq, "
                       "idx, type, reason, data) FROM STDIN",
                       b->events, b->events_len, err, err_len);
    if (rc == INGEST_OK) {
        snprintf(sql, sizeof(sql),
                 "UPDATE ingest_marks SET seq = %llu, updated_us = %llu "
                 "WHERE instance_id = %s AND rank = %u; COMMIT",
                 (unsigned long long)b->seq, (unsigned long long)now, inst, b->rank);
        rc = exec_cmd(conn, sql, err, err_len);
    }
    PQfreemem(inst);
    if (rc == INGEST_DATA)
        PQclear(PQexec(conn, "ROLLBACK"));
    return rc;
}

/* ---- group commit --------------------------------------------------------------------------
 * The batches queued at the head of the memory queue (at most GROUP_MAX_BATCHES, GROUP_MAX_BYTES)
 * go into one transaction: lock (or create) the marks of their distinct (instance_id, rank) keys in
 * one statement, decide in arrival order which batches are above their key's mark (each accepted
 * batch raises the mark for the ones after it, so a duplicate inside the group is caught as well),
 * COPY the accepted batches' rows (one COPY per table, batches concatenated in order), raise the
 * marks and COMMIT — one WAL flush for the whole group. The decision is the one batch-at-a-time
 * processing would make. */

#define GROUP_MAX_BATCHES 256
#define GROUP_MAX_BYTES (16u << 20)
#define GATHER_WINDOW_US 20000u
/* How long a group's transfer_events COPY stays open for the other recent ranks' batches. The loop
 * thread decodes a loaded rank's 509-event batch in about 1 ms, one after another, so after a
 * commit the fourth of four ranks' next batches is queued some 3-4 ms after the first: at 2 ms it
 * missed the group about every other time and waited a whole cycle (400 batches took 116
 * transactions); 4 ms won 9 of 9 alternating runs against 2 ms on the bench shape (5-30% rows/s,
 * bench/results/controlplane.json), 8 ms was no better than 4. The wait ends as soon as every
 * recent rank is in, so a quiet rank's batches wait no longer. */
#define GATHER_MAX_US 4000u
#define RECENT_KEYS 256

static const char *const copy_sql[3] = {
    "COPY samples (" TDM_CP_SAMPLE_COLUMNS ") FROM STDIN",
    "COPY transfer_events (ts_us, instance_id, rank, group_name, batch_seq, idx, type, room, "
    "from_state, to_state, reason, data) FROM STDIN",
    "COPY events (ts_us, source, instance_id, rank, group_name, batch_seq, idx, type, reason, "
    "data) FROM STDIN"};
/* transfer_events, the bulk of a batch, first: joiners add their rows to it (ingest_group) */
static const int copy_order[3] = {1, 0, 2};

typedef struct gmark {
    const char *inst;
    char *lit; /* escaped literal */
    uint32_t rank;
    uint64_t seq;  /* mark as locked */
    uint64_t high; /* mark after the group */
} gmark_t;

static ingest_rc_t conn_rc(PGconn *conn)
{
    return PQstatus(conn) == CONNECTION_BAD ? INGEST_CONN : INGEST_DATA;
}

/* Inside the group's query: take results (the previous statement's completion) until the server
 * asks for COPY data (PGRES_COPY_IN). */
static ingest_rc_t copy_start(PGconn *conn, char *err, size_t err_len)
{
    PGresult *res;
    ExecStatusType st;
    for (;;) {
        res = PQgetResult(conn);
        st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
        if (st != PGRES_COMMAND_OK)
            break;
        PQclear(res);
    }
    if (st != PGRES_COPY_IN) {
        snprintf(err, err_len, "%s",
                 res ? PQresultErrorMessage(res) : "the server did not start the COPY");
        PQclear(res);
        return conn_rc(conn);
    }
    PQclear(res);
    return INGEST_OK;
}

/* Drain the query's remaining results; the first failure is reported. */
static ingest_rc_t drain(PGconn *conn, ingest_rc_t rc, char *err, size_t err_len)
{
    PGresult *res;
    while ((res = PQgetResult(conn)) != NULL) {
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_COPY_IN) { /* only after an earlier failure left a COPY open */
            PQputCopyEnd(conn, "ingest group abandoned");
        } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && rc == INGEST_OK) {
            snprintf(err, err_len, "%s", PQresultErrorMessage(res));
            rc = conn_rc(conn);
        }
        PQclear(res);
    }
    if (PQstatus(conn) == CONNECTION_BAD)
        rc = INGEST_CONN;
    return rc;
}

/* Late joiners (see ingest_group): the marks of worker `me`'s recently committed ranks that have no
 * batch in the group are locked with it, so their next batches can still join while the
 * transfer_events COPY is open. Defined with the gathering code below. */
#define JOIN_MAX_KEYS 32
typedef struct join_key {
    char inst[TDM_JSON_HEX64_LEN + 1];
    uint32_t rank;
} join_key_t;
static size_t join_keys_locked(tdm_cp_db_t *db, int me, tdm_cp_job_t *const *jobs, size_t n,
                               join_key_t *ret_keys, size_t *ret_want);
static size_t join_locked(tdm_cp_db_t *db, int me, gmark_t *marks, size_t nm, uint8_t *has,
                          tdm_cp_job_t **jobs, size_t n);

static size_t mark_find(const gmark_t *marks, size_t nm, const tdm_cp_batch_t *b)
{
    size_t k = 0;
    while (k < nm && !(marks[k].rank == b->rank && strcmp(marks[k].inst, b->instance_id) == 0))
        k++;
    return k;
}

/* Decide batch i on the locked marks (in arrival order, each accepted batch raising its key's mark
 * for the next) and note the group's highest seq per key. */
static void decide(gmark_t *marks, size_t nm, uint8_t *has, tdm_cp_job_t *const *jobs, size_t i,
                   int *accepted)
{
    const tdm_cp_batch_t *b = jobs[i]->batch;
    size_t k = mark_find(marks, nm, b);
    has[k] = 1;
    if (b->seq > marks[k].high)
        marks[k].high = b->seq;
    accepted[i] = b->seq > marks[k].seq;
    if (accepted[i])
        marks[k].seq = b->seq;
}

static ingest_rc_t put_rows(PGconn *conn, tdm_cp_job_t *const *jobs, size_t from, size_t n,
                            const int *accepted, int t, char *err, size_t err_len)
{
    for (size_t i = from; i < n; i++) {
        if (!accepted[i])
            continue;
        const tdm_cp_batch_t *b = jobs[i]->batch;
        const char *p = t == 0 ? b->samples : t == 1 ? b->tevents : b->events;
        size_t len = t == 0 ? b->samples_len : t == 1 ? b->tevents_len : b->events_len;
        if (len && PQputCopyData(conn, p, (int)len) != 1) {
            snprintf(err, err_len, "%s", PQerrorMessage(conn));
            return INGEST_CONN;
        }
    }
    return INGEST_OK;
}

/* At most this many samples and events rows in a group go inline as INSERTs (ingest_group). */
#define INLINE_MAX_ROWS 64u

static const char *const insert_sql[3] = {
    "INSERT INTO samples (" TDM_CP_SAMPLE_COLUMNS ") VALUES ",
    NULL, /* transfer_events always go by COPY */
    "INSERT INTO events (ts_us, source, instance_id, rank, group_name, batch_seq, idx, type, "
    "reason, data) VALUES "};

/* The accepted batches' COPY text rows of table t as one INSERT (nothing when there are none):
 * each field an E'' literal — the only escapes COPY text rows hold (\\, \t, \n, \r) mean the
 * same there, and a quote is doubled — or NULL for \N; PostgreSQL coerces each literal to its
 * column's type as COPY's input functions would. */
static void inline_rows(tdm_cp_buf_t *sql, tdm_cp_job_t *const *jobs, size_t n, const int *accepted,
                        int t)
{
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        if (!accepted[i])
            continue;
        const tdm_cp_batch_t *b = jobs[i]->batch;
        const char *p = t == 0 ? b->samples : b->events;
        const char *end = p + (t == 0 ? b->samples_len : b->events_len);
        while (p < end) {
            const char *eol = memchr(p, '\n', (size_t)(end - p));
            if (!eol)
                eol = end;
            tdm_cp_buf_puts(sql, first ? insert_sql[t] : ", ");
            tdm_cp_buf_append(sql, "(", 1);
            first = 0;
            for (const char *f = p;;) {
                const char *tab = memchr(f, '\t', (size_t)(eol - f));
                const char *fe = tab ? tab : eol;
                if (f != p)
                    tdm_cp_buf_append(sql, ", ", 2);
                if (fe - f == 2 && f[0] == '\\' && f[1] == 'N') {
                    tdm_cp_buf_append(sql, "NULL", 4);
                } else {
                    tdm_cp_buf_reserve(sql, (size_t)(fe - f) * 2 + 3);
                    char *o = sql->data + sql->len;
                    *o++ = 'E';
                    *o++ = '\'';
                    for (const char *c = f; c < fe; c++) {
                        if (*c == '\'')
                            *o++ = '\'';
                        *o++ = *c;
                    }
                    *o++ = '\'';
                    sql->len = (size_t)(o - sql->data);
                    sql->data[sql->len] = '\0';
                }
                if (!tab)
                    break;
                f = tab + 1;
            }
            tdm_cp_buf_append(sql, ")", 1);
            p = eol + 1;
        }
    }
    if (!first)
        tdm_cp_buf_append(sql, "; ", 2);
}

/* One transaction for the group, sent as two query strings (three round trips in all when the
 * group's samples and events rows are at most INLINE_MAX_ROWS, five otherwise):
 *   BEGIN; INSERT INTO ingest_marks … ON CONFLICT … RETURNING (locks the marks of the group's keys
 *   and of up to JOIN_MAX_KEYS recently committed ranks); COPY transfer_events
 *   INSERT INTO samples … VALUES …; INSERT INTO events … VALUES … (or COPY samples; COPY events);
 *   UPDATE ingest_marks (raise to the group's highest seq per key, never lower); COMMIT
 * The locked marks arrive before the first COPY asks for data, so which batches are above their
 * mark (in arrival order, each accepted batch raising it for the next) is decided on the locked
 * values and only their rows are sent. While the transfer_events COPY is open (PostgreSQL already
 * inserting the first batches' rows), batches of the other locked ranks that arrive join the
 * group (claimed like the rest, the first queued batch of a key that has none in the group, the
 * spool empty), until as many ranks as committed in the last GATHER_WINDOW_US are in or
 * GATHER_MAX_US has passed since the group was taken — the gathering wait of commit_delay, spent
 * while the database works. When every batch first taken is a duplicate the first COPY is ended
 * with an error, which aborts the transaction (nothing written) and is then rolled back.
 * *np may grow (the joiners are appended to jobs). On INGEST_OK, accepted[i] says whether batch i
 * was inserted (else it is a duplicate). INGEST_DATA: rolled back, nothing decided (the caller
 * retries the batches one by one to find the one the database refuses). */
static ingest_rc_t ingest_group(tdm_cp_db_t *db, int me, PGconn *conn, tdm_cp_job_t **jobs,
                                size_t *np, int *accepted, int *ret_committed, char *err,
                                size_t err_len)
{
    size_t n = *np, cap = n + JOIN_MAX_KEYS, nm = 0, nj, want = 0;
    gmark_t *marks = tdm_calloc(cap, sizeof(*marks));
    uint8_t *has = tdm_calloc(cap, 1);
    join_key_t *jk = tdm_calloc(JOIN_MAX_KEYS, sizeof(*jk));
    tdm_cp_buf_t sql = TDM_CP_BUF_INIT;
    ingest_rc_t rc = INGEST_OK;
    int sent = 0, all_dup = 0;
    uint64_t now = tdm_time_wall_us(), t0 = tdm_time_mono_us();
    *ret_committed = 0;

    pthread_mutex_lock(&db->ingest.mu);
    nj = join_keys_locked(db, me, jobs, n, jk, &want);
    pthread_mutex_unlock(&db->ingest.mu);
    for (size_t i = 0; i < n + nj; i++) {
        const char *inst = i < n ? jobs[i]->batch->instance_id : jk[i - n].inst;
        uint32_t rank = i < n ? jobs[i]->batch->rank : jk[i - n].rank;
        size_t k = 0;
        while (k < nm && !(marks[k].rank == rank && strcmp(marks[k].inst, inst) == 0))
            k++;
        if (k < nm)
            continue;
        marks[nm].inst = inst;
        marks[nm].rank = rank;
        marks[nm].lit = PQescapeLiteral(conn, inst, strlen(inst));
        if (!marks[nm].lit) {
            snprintf(err, err_len, "%s", PQerrorMessage(conn));
            rc = conn_rc(conn);
            goto out;
        }
        nm++;
    }
    tdm_cp_buf_puts(&sql, "BEGIN; INSERT INTO ingest_marks VALUES ");
    for (size_t k = 0; k < nm; k++)
        tdm_cp_buf_printf(&sql, "%s(%s, %u, 0, %llu)", k ? ", " : "", marks[k].lit, marks[k].rank,
                          (unsigned long long)now);
    tdm_cp_buf_puts(&sql, " ON CONFLICT (instance_id, rank) DO UPDATE SET seq = ingest_marks.seq "
                          "RETURNING instance_id, rank, seq");
    tdm_cp_buf_puts(&sql, "; ");
    tdm_cp_buf_puts(&sql, copy_sql[copy_order[0]]);
    if (!PQsendQuery(conn, sql.data)) {
        snprintf(err, err_len, "%s", PQerrorMessage(conn));
        rc = conn_rc(conn);
        goto out;
    }
    sent = 1;

    PGresult *res = PQgetResult(conn); /* BEGIN */
    if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
        snprintf(err, err_len, "%s", res ? PQresultErrorMessage(res) : "no reply to BEGIN");
        PQclear(res);
        rc = conn_rc(conn);
        goto out;
    }
    PQclear(res);
    res = PQgetResult(conn); /* the locked marks */
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || (size_t)PQntuples(res) != nm) {
        snprintf(err, err_len, "%s", res ? PQresultErrorMessage(res) : "no marks returned");
        PQclear(res);
        rc = conn_rc(conn);
        goto out;
    }
    for (size_t k = 0; k < nm; k++)
        marks[k].seq = UINT64_MAX;
    for (int r = 0; r < PQntuples(res); r++) {
        const char *inst = PQgetvalue(res, r, 0);
        uint32_t rank = (uint32_t)strtoul(PQgetvalue(res, r, 1), NULL, 10);
        for (size_t k = 0; k < nm; k++)
            if (marks[k].rank == rank && strcmp(marks[k].inst, inst) == 0)
                marks[k].seq = strtoull(PQgetvalue(res, r, 2), NULL, 10);
    }
    PQclear(res);
    for (size_t k = 0; k < nm; k++) {
        if (marks[k].seq == UINT64_MAX) {
            snprintf(err, err_len, "a mark was not returned");
            rc = INGEST_DATA;
            goto out;
        }
    }
    /* `seq` now runs as the key's current mark, `high` as the group's highest seq of the key. */
    size_t nacc = 0;
    for (size_t i = 0; i < n; i++) {
        decide(marks, nm, has, jobs, i, accepted);
        nacc += (size_t)accepted[i];
    }
    all_dup = nacc == 0;
    rc = copy_start(conn, err, err_len);
    if (rc == INGEST_OK && all_dup) {
        if (PQputCopyEnd(conn, "every batch of the group is a duplicate") != 1)
            rc = INGEST_CONN;
        goto out;
    }
    if (rc != INGEST_OK)
        goto out;
    rc = put_rows(conn, jobs, 0, n, accepted, copy_order[0], err, err_len);
    /* transfer_events (the bulk) first: the joiners' rows follow the first batches' there */
    while (rc == INGEST_OK && n < GROUP_MAX_BATCHES) {
        size_t have = 0, from = n;
        for (size_t k = 0; k < nm; k++)
            have += has[k];
        uint64_t t1 = tdm_time_mono_us();
        if (have >= want || t1 - t0 >= GATHER_MAX_US)
            break;
        pthread_mutex_lock(&db->ingest.mu);
        n = join_locked(db, me, marks, nm, has, jobs, n);
        if (n == from && !atomic_load(&db->stop))
            cond_wait_us(&db->ingest, GATHER_MAX_US - (t1 - t0));
        pthread_mutex_unlock(&db->ingest.mu);
        *np = n;
        for (size_t i = from; i < n; i++)
            decide(marks, nm, has, jobs, i, accepted);
        rc = put_rows(conn, jobs, from, n, accepted, 1, err, err_len);
    }
    if (rc == INGEST_OK && PQputCopyEnd(conn, NULL) != 1) {
        snprintf(err, err_len, "%s", PQerrorMessage(conn));
        rc = INGEST_CONN;
    }
    if (rc != INGEST_OK)
        goto out;
    rc = drain(conn, rc, err, err_len);
    if (rc != INGEST_OK)
        goto out;
    sent = 0;
    /* The samples and events rows: a few (a sample and an event or two per batch) go inline as
     * INSERTs in the query string that raises the marks and commits (no COPY round trips), more
     * by COPY. */
    size_t few = 0;
    for (size_t i = 0; i < n; i++)
        if (accepted[i])
            few += (size_t)jobs[i]->batch->n_samples + jobs[i]->batch->n_events;
    int inl = few <= INLINE_MAX_ROWS;
    tdm_cp_buf_reset(&sql);
    if (inl) {
        for (int t = 1; t < 3; t++)
            inline_rows(&sql, jobs, n, accepted, copy_order[t]);
    } else {
        for (int t = 1; t < 3; t++) {
            tdm_cp_buf_puts(&sql, copy_sql[copy_order[t]]);
            tdm_cp_buf_puts(&sql, "; ");
        }
    }
    tdm_cp_buf_puts(&sql,
                    "UPDATE ingest_marks AS m SET seq = v.seq, updated_us = v.u FROM (VALUES ");
    for (size_t k = 0, c = 0; k < nm; k++) {
        if (!has[k])
            continue;
        tdm_cp_buf_printf(&sql, "%s(%s, %u, %llu::bigint, %llu::bigint)", c++ ? ", " : "",
                          marks[k].lit, marks[k].rank, (unsigned long long)marks[k].high,
                          (unsigned long long)now);
    }
    tdm_cp_buf_puts(&sql, ") AS v (instance_id, rank, seq, u) WHERE m.instance_id = v.instance_id "
                          "AND m.rank = v.rank AND v.seq > m.seq; COMMIT");
    if (!PQsendQuery(conn, sql.data)) {
        snprintf(err, err_len, "%s", PQerrorMessage(conn));
        rc = conn_rc(conn);
        goto out;
    }
    sent = 1;
    for (int t = 1; t < 3 && !inl && rc == INGEST_OK; t++) {
        rc = copy_start(conn, err, err_len);
        if (rc == INGEST_OK)
            rc = put_rows(conn, jobs, 0, n, accepted, copy_order[t], err, err_len);
        if (rc == INGEST_OK && PQputCopyEnd(conn, NULL) != 1) {
            snprintf(err, err_len, "%s", PQerrorMessage(conn));
            rc = INGEST_CONN;
        }
    }

out:
    if (sent && all_dup) {
        /* the cancelled COPY failed the transaction on purpose: roll it back, all duplicates */
        rc = drain(conn, rc, err, err_len);
        if (rc != INGEST_CONN)
            rc = exec_cmd(conn, "ROLLBACK", err, err_len);
    } else if (sent) {
        rc = drain(conn, rc, err, err_len);
        if (rc == INGEST_OK)
            *ret_committed = 1;
    }
    if (rc == INGEST_DATA && PQstatus(conn) != CONNECTION_BAD &&
        PQtransactionStatus(conn) != PQTRANS_IDLE)
        PQclear(PQexec(conn, "ROLLBACK"));
    for (size_t k = 0; k < nm; k++)
        PQfreemem(marks[k].lit);
    tdm_free(marks);
    tdm_free(has);
    tdm_free(jk);
    tdm_cp_buf_free(&sql);
    return rc;
}

static void pending_stats_locked(tdm_cp_db_t *db)
{
    uint64_t n = 0;
    for (tdm_cp_job_t *j = db->ingest.head; j; j = j->next)
        n++;
    atomic_store(&db->stats.mem_batches, n);
    atomic_store(&db->stats.mem_bytes, db->mem_bytes);
    uint64_t oldest = db->ingest.head ? db->ingest.head->batch->enq_mono_us : 0;
    atomic_store(&db->stats.oldest_pending_mono_us, oldest);
    atomic_store(&db->stats.spool_records, tdm_cp_spool_records(db->spool));
    atomic_store(&db->stats.spool_bytes, tdm_cp_spool_bytes(db->spool));
}

static int key_in_flight_locked(const tdm_cp_db_t *db, uint64_t key, int except);

/* Move the oldest in-memory batches to the spool while memory is over its bound (or all of them
 * when `all`). Spilled jobs are returned: the batch is durable. Spilling stops at a batch that an
 * ingest worker has taken, or whose (instance_id, rank) one has in flight: the spool replays
 * before memory, so only batches older than everything in flight for their key go there (a group
 * that then fails is retried after them without reordering its key). Under ingest.mu, by ingest
 * worker 0 (or by stop, once the workers are joined). */
static void spill_locked(tdm_cp_db_t *db, int all)
{
    while (db->ingest.head && (all || db->mem_bytes > db->opts.mem_bound_bytes)) {
        tdm_cp_job_t *job = db->ingest.head;
        if (job->claimed || key_in_flight_locked(db, job->key, 0))
            break;
        tdm_status_t st = tdm_cp_spool_append(db->spool, SPOOL_TYPE_BATCH, job->batch->blob,
                                              job->batch->blob_len);
        if (st != TDM_OK) {
            db->spool_full = 1;
            break;
        }
        db->spool_full = 0;
        jobq_pop_locked(&db->ingest);
        db->mem_bytes -= job->cost;
        job->st = TDM_OK;
        job->spooled = 1;
        job->acked_seq = job->batch->seq;
        atomic_fetch_add(&db->stats.batches_spooled, 1);
        reply(db, job);
    }
    pending_stats_locked(db);
}

static void count_rows(tdm_cp_db_t *db, const tdm_cp_batch_t *b)
{
    atomic_fetch_add(&db->stats.batches_committed, 1);
    atomic_fetch_add(&db->stats.rows_samples, b->n_samples);
    atomic_fetch_add(&db->stats.rows_tevents, b->n_tevents);
    atomic_fetch_add(&db->stats.rows_events, b->n_events);
}

/* Unlink `job` from the memory queue. Under ingest.mu. */
static void jobq_remove_locked(jobq_t *q, tdm_cp_job_t *job)
{
    tdm_cp_job_t *prev = NULL;
    for (tdm_cp_job_t *j = q->head; j; prev = j, j = j->next) {
        if (j != job)
            continue;
        if (prev)
            prev->next = j->next;
        else
            q->head = j->next;
        if (q->tail == j)
            q->tail = prev;
        j->next = NULL;
        return;
    }
}

/* Remove `job` (claimed by the calling worker) from the memory queue and reply with the outcome
 * of its batch. */
static void finish_job(tdm_cp_db_t *db, tdm_cp_job_t *job, ingest_rc_t rc, const char *err)
{
    pthread_mutex_lock(&db->ingest.mu);
    jobq_remove_locked(&db->ingest, job);
    job->claimed = 0;
    db->claimed_n--;
    db->mem_bytes -= job->cost;
    pending_stats_locked(db);
    pthread_cond_broadcast(&db->ingest.cv); /* another worker may wait for this key */
    pthread_mutex_unlock(&db->ingest.mu);
    job->acked_seq = job->batch->seq;
    if (rc == INGEST_OK) {
        count_rows(db, job->batch);
        job->st = TDM_OK;
    } else if (rc == INGEST_DUP) {
        atomic_fetch_add(&db->stats.batches_duplicate, 1);
        job->duplicate = 1;
        job->st = TDM_OK;
    } else {
        tdm_err(TDM_SUB_DB,
                "msg=\"batch rejected by the database\" instance=%s rank=%u "
                "seq=%llu err=\"%s\"",
                job->batch->instance_id, job->batch->rank, (unsigned long long)job->batch->seq,
                err);
        set_err(job, TDM_ERR_INVAL, err);
    }
    reply(db, job);
}

/* Replay the oldest spooled batch. 1: progress, 0: spool empty, -1: connection lost. */
static int ingest_from_spool(tdm_cp_db_t *db, PGconn *conn)
{
    uint16_t type;
    uint8_t *body;
    size_t len;
    tdm_status_t st = tdm_cp_spool_peek(db->spool, &type, &body, &len);
    if (st == TDM_ERR_NOTFOUND)
        return 0;
    if (st != TDM_OK) {
        /* logged by the spool; nothing more can be read from it: stop holding memory back */
        pthread_mutex_lock(&db->ingest.mu);
        db->spool_unreadable = 1;
        pthread_mutex_unlock(&db->ingest.mu);
        return 0;
    }
    tdm_cp_batch_t *b = NULL;
    if (type != SPOOL_TYPE_BATCH || tdm_cp_batch_decode(body, len, &b) != TDM_OK) {
        if (type != SPOOL_TYPE_BATCH)
            tdm_free(body);
        tdm_err(TDM_SUB_DB, "msg=\"spool record skipped: not a telemetry batch\" type=%u", type);
        tdm_cp_spool_advance(db->spool);
        return 1;
    }
    char err[512];
    ingest_rc_t rc = ingest_batch(conn, b, err, sizeof(err));
    if (rc == INGEST_CONN) {
        tdm_cp_batch_free(b);
        return -1;
    }
    if (rc == INGEST_OK) {
        count_rows(db, b);
        atomic_fetch_add(&db->stats.ingest_txns, 1);
    } else if (rc == INGEST_DUP)
        atomic_fetch_add(&db->stats.batches_duplicate, 1);
    else
        tdm_err(TDM_SUB_DB,
                "msg=\"spooled batch rejected by the database\" instance=%s rank=%u "
                "seq=%llu err=\"%s\"",
                b->instance_id, b->rank, (unsigned long long)b->seq, err);
    tdm_cp_batch_free(b);
    atomic_fetch_add(&db->stats.spool_replayed, 1);
    pthread_mutex_lock(&db->ingest.mu);
    tdm_cp_spool_advance(db->spool);
    pending_stats_locked(db);
    pthread_mutex_unlock(&db->ingest.mu);
    return 1;
}

/* ---- gathering a group --------------------------------------------------------------------
 * Like PostgreSQL's commit_delay: when fewer ranks have a batch in the group than sent one in the
 * last GATHER_WINDOW_US, the group waits up to GATHER_MAX_US (from when it was taken) for the
 * others — but with its transaction open and the first batches' transfer_events rows already sent,
 * so the database inserts while the stragglers are received and decoded (ingest_group), and one
 * WAL flush serves them all. */

typedef struct recent {
    uint64_t hash[RECENT_KEYS], at_us[RECENT_KEYS];
    char inst[RECENT_KEYS][TDM_JSON_HEX64_LEN + 1]; /* "" when the id does not fit */
    uint32_t rank[RECENT_KEYS];
    size_t next;
} recent_t;

static uint64_t batch_key(const tdm_cp_batch_t *b)
{
    return tdm_hash_combine(tdm_hash_xxh3(b->instance_id, strlen(b->instance_id)), b->rank);
}

/* A small open-addressing set of keys (at most RECENT_KEYS of them). */
typedef struct keyset {
    uint64_t set[2 * RECENT_KEYS];
    uint8_t used[2 * RECENT_KEYS];
    size_t n;
} keyset_t;

/* 1 if added, 0 if already there, -1 if full. */
static int keyset_add(keyset_t *ks, uint64_t key)
{
    size_t k = (size_t)(key % (2 * RECENT_KEYS));
    while (ks->used[k] && ks->set[k] != key)
        k = (k + 1) % (2 * RECENT_KEYS);
    if (ks->used[k])
        return 0;
    if (ks->n >= RECENT_KEYS)
        return -1;
    ks->used[k] = 1;
    ks->set[k] = key;
    ks->n++;
    return 1;
}

/* Ranks that committed a batch in the last GATHER_WINDOW_US. Under ingest.mu. */
static size_t recent_ranks(const recent_t *r, uint64_t now)
{
    keyset_t ks = {.n = 0};
    for (size_t i = 0; i < RECENT_KEYS; i++)
        if (r->at_us[i] && now - r->at_us[i] < GATHER_WINDOW_US)
            keyset_add(&ks, r->hash[i]);
    return ks.n;
}

static void recent_note(recent_t *r, tdm_cp_job_t *const *group, size_t n, uint64_t now)
{
    for (size_t i = 0; i < n; i++) {
        const tdm_cp_batch_t *b = group[i]->batch;
        r->hash[r->next] = group[i]->key;
        r->at_us[r->next] = now;
        r->rank[r->next] = b->rank;
        if (strlen(b->instance_id) < sizeof(r->inst[0]))
            memcpy(r->inst[r->next], b->instance_id, strlen(b->instance_id) + 1);
        else
            r->inst[r->next][0] = '\0';
        r->next = (r->next + 1) % RECENT_KEYS;
    }
}

/* Whether a worker other than `except` (1-based; 0: any) has a batch of `key` in flight (only
 * its owner can). Under ingest.mu. */
static int key_in_flight_locked(const tdm_cp_db_t *db, uint64_t key, int except)
{
    if (!db->claimed_n)
        return 0;
    for (const tdm_cp_job_t *j = db->ingest.head; j; j = j->next)
        if (j->claimed && j->claimed != except && j->key == key)
            return 1;
    return 0;
}

/* ---- taking a group -----------------------------------------------------------------------
 * TDM_CP_DB_INGEST_CONNS workers, each with its own connection, take groups from the one memory
 * queue. Every (instance_id, rank) belongs to one worker for the life of the process (assigned in
 * turn when first seen, so the ranks spread evenly): its batches commit one transaction after
 * another, in arrival order, on one connection — as with a single worker, and the rows of a rank
 * keep their insertion order on disk — and two groups in flight never contend for a mark (no lock
 * waits, no deadlock). While one worker's group waits for its WAL flush, the other's copies. */

#define KEYMAP_SLOTS 65536u /* a full map sends a new key to a worker by its hash */

typedef struct keymap {
    uint64_t key[KEYMAP_SLOTS];
    uint8_t worker[KEYMAP_SLOTS]; /* 1-based; 0 = free */
    size_t n;
    unsigned next; /* the worker the next new key goes to (0-based) */
} keymap_t;

/* The worker (1-based) that owns `key`, assigning one on first sight. Under ingest.mu. */
static int keymap_worker_locked(keymap_t *m, uint64_t key)
{
    size_t k = (size_t)(key % KEYMAP_SLOTS);
    for (size_t probes = 0; probes < KEYMAP_SLOTS && m->worker[k]; probes++) {
        if (m->key[k] == key)
            return m->worker[k];
        k = (k + 1) % KEYMAP_SLOTS;
    }
    if (m->n >= KEYMAP_SLOTS * 3 / 4)
        return 1 + (int)((key >> 17) % TDM_CP_DB_INGEST_CONNS);
    int w = 1 + (int)(m->next++ % TDM_CP_DB_INGEST_CONNS);
    m->key[k] = key;
    m->worker[k] = (uint8_t)w;
    m->n++;
    return w;
}

/* Claim worker `me`'s group (at most GROUP_MAX_BATCHES / GROUP_MAX_BYTES of its batches) in
 * arrival order. Under ingest.mu. */
static size_t take_group_locked(tdm_cp_db_t *db, int me, tdm_cp_job_t **group)
{
    size_t n = 0, bytes = 0;
    for (tdm_cp_job_t *j = db->ingest.head; j && n < GROUP_MAX_BATCHES; j = j->next) {
        if (j->worker != me || j->claimed)
            continue;
        if (n && bytes + j->batch->blob_len > GROUP_MAX_BYTES)
            break;
        j->claimed = me;
        db->claimed_n++;
        group[n++] = j;
        bytes += j->batch->blob_len;
    }
    return n;
}

/* The recently committed ranks of worker `me` (those of recent_ranks) with no batch in jobs[0..n),
 * at most JOIN_MAX_KEYS, into ret_keys; *ret_want: how many ranks committed in the last
 * GATHER_WINDOW_US. None when the group already holds that many. Under ingest.mu. */
static size_t join_keys_locked(tdm_cp_db_t *db, int me, tdm_cp_job_t *const *jobs, size_t n,
                               join_key_t *ret_keys, size_t *ret_want)
{
    const recent_t *r = &db->recent[me - 1];
    uint64_t now = tdm_time_mono_us();
    keyset_t ks = {.n = 0};
    size_t nk = 0;
    *ret_want = recent_ranks(r, now);
    for (size_t i = 0; i < n; i++)
        keyset_add(&ks, jobs[i]->key);
    if (ks.n >= *ret_want)
        return 0;
    for (size_t i = 0; i < RECENT_KEYS && nk < JOIN_MAX_KEYS; i++) {
        if (!r->at_us[i] || now - r->at_us[i] >= GATHER_WINDOW_US || !r->inst[i][0])
            continue;
        if (keyset_add(&ks, r->hash[i]) != 1)
            continue;
        memcpy(ret_keys[nk].inst, r->inst[i], sizeof(ret_keys[nk].inst));
        ret_keys[nk].rank = r->rank[i];
        nk++;
    }
    return nk;
}

/* Claim, in arrival order, the first queued batch of each locked key that has none in the group
 * (has[k] == 0), within GROUP_MAX_BATCHES / GROUP_MAX_BYTES, appending them to jobs; nothing while
 * the spool holds batches (they are older). Returns the new count. Under ingest.mu. */
static size_t join_locked(tdm_cp_db_t *db, int me, gmark_t *marks, size_t nm, uint8_t *has,
                          tdm_cp_job_t **jobs, size_t n)
{
    size_t bytes = 0;
    if (tdm_cp_spool_records(db->spool) > 0 && !db->spool_unreadable)
        return n;
    for (size_t i = 0; i < n; i++)
        bytes += jobs[i]->batch->blob_len;
    for (tdm_cp_job_t *j = db->ingest.head; j && n < GROUP_MAX_BATCHES; j = j->next) {
        if (j->worker != me || j->claimed)
            continue;
        size_t k = mark_find(marks, nm, j->batch);
        if (k == nm || has[k])
            continue;
        if (bytes + j->batch->blob_len > GROUP_MAX_BYTES)
            break;
        has[k] = 1;
        j->claimed = me;
        db->claimed_n++;
        jobs[n++] = j;
        bytes += j->batch->blob_len;
    }
    return n;
}

/* Give a group back to the queue unfinished (its connection was lost). */
static void release_group(tdm_cp_db_t *db, tdm_cp_job_t *const *group, size_t n)
{
    pthread_mutex_lock(&db->ingest.mu);
    for (size_t i = 0; i < n; i++)
        group[i]->claimed = 0;
    db->claimed_n -= n;
    pthread_cond_broadcast(&db->ingest.cv);
    pthread_mutex_unlock(&db->ingest.mu);
}

static void *ingest_main(void *arg)
{
    struct iworker *iw = arg;
    tdm_cp_db_t *db = iw->db;
    int me = iw->idx + 1;
    PGconn *conn = NULL;
    uint64_t backoff = BACKOFF_MIN_US, next_try = 0;
    tdm_cp_job_t **group = tdm_calloc(GROUP_MAX_BATCHES, sizeof(*group));
    int *accepted = tdm_calloc(GROUP_MAX_BATCHES, sizeof(*accepted));
    char app[32];
    snprintf(app, sizeof(app), iw->idx ? "tandemd-ingest-%d" : "tandemd-ingest", iw->idx + 1);

    while (!atomic_load(&db->stop)) {
        uint64_t now = tdm_time_mono_us();
        if (!conn && now >= next_try && atomic_load(&db->stats.schema_ready)) {
            conn = db_connect(db, app);
            if (conn) {
                backoff = BACKOFF_MIN_US;
                atomic_fetch_add(&db->ingest_up, 1);
                tdm_info(TDM_SUB_DB, "msg=\"database connected\" conn=%s", app);
            } else {
                next_try = now + backoff;
                backoff = backoff * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : backoff * 2;
            }
            update_up(db);
        }
        if (conn && iw->idx == 0) {
            int r = ingest_from_spool(db, conn);
            if (r == 1)
                continue;
            if (r == -1)
                goto conn_lost;
        }

        pthread_mutex_lock(&db->ingest.mu);
        if (iw->idx == 0)
            spill_locked(db, 0);
        /* Memory is taken only while the spool is empty: what the spool holds is older (a batch
         * spilled just now may have its successor in memory already), and worker 0 replays it
         * first. The group stays in the queue, claimed, until it is done; the other recent ranks'
         * batches may still join it (ingest_group) — the gathering wait happens there, while the
         * database inserts the first batches. */
        int older = tdm_cp_spool_records(db->spool) > 0 && !db->spool_unreadable;
        size_t n = conn && !older ? take_group_locked(db, me, group) : 0;
        /* (worker 0 goes straight back to the spool it just filled) */
        int replay = iw->idx == 0 && conn && older;
        if (!n && !replay && !atomic_load(&db->stop))
            cond_wait_us(&db->ingest, conn ? 200000u : 50000u);
        pthread_mutex_unlock(&db->ingest.mu);
        if (!n)
            continue;

        char err[512];
        int committed = 0;
        ingest_rc_t rc =
            ingest_group(db, me, conn, group, &n, accepted, &committed, err, sizeof(err));
        if (rc == INGEST_CONN) {
            release_group(db, group, n);
            goto conn_lost;
        }
        if (rc == INGEST_OK) {
            if (committed)
                atomic_fetch_add(&db->stats.ingest_txns, 1);
            pthread_mutex_lock(&db->ingest.mu);
            recent_note(&db->recent[iw->idx], group, n, tdm_time_mono_us());
            pthread_mutex_unlock(&db->ingest.mu);
            for (size_t i = 0; i < n; i++)
                finish_job(db, group[i], accepted[i] ? INGEST_OK : INGEST_DUP, "");
            continue;
        }
        /* The database refused something in the group: one transaction per batch, so only the
         * batch it refuses is rejected. */
        for (size_t i = 0; i < n; i++) {
            rc = ingest_batch(conn, group[i]->batch, err, sizeof(err));
            if (rc == INGEST_CONN) {
                release_group(db, group + i, n - i);
                goto conn_lost;
            }
            if (rc == INGEST_OK)
                atomic_fetch_add(&db->stats.ingest_txns, 1);
            finish_job(db, group[i], rc, err);
        }
        continue;

    conn_lost:
        tdm_warn(TDM_SUB_DB, "msg=\"database connection lost\" conn=%s", app);
        PQfinish(conn);
        conn = NULL;
        atomic_fetch_sub(&db->ingest_up, 1);
        update_up(db);
        atomic_fetch_add(&db->stats.reconnects, 1);
        next_try = tdm_time_mono_us() + BACKOFF_MIN_US;
    }

    if (conn) {
        atomic_fetch_sub(&db->ingest_up, 1);
        PQfinish(conn);
    }
    tdm_free(group);
    tdm_free(accepted);
    return NULL;
}

/* Shutdown, after the ingest workers are joined: what is still in memory becomes durable in the
 * spool; its senders get no reply and will replay, which the marks absorb. */
static void ingest_shutdown(tdm_cp_db_t *db)
{
    pthread_mutex_lock(&db->ingest.mu);
    spill_locked(db, 1);
    tdm_cp_job_t *j;
    while ((j = jobq_pop_locked(&db->ingest)) != NULL) {
        db->mem_bytes -= j->cost;
        set_err(j, TDM_ERR_ABORTED, "shutting down");
        reply(db, j);
    }
    pending_stats_locked(db);
    pthread_mutex_unlock(&db->ingest.mu);
}

static void wake_all(tdm_cp_db_t *db)
{
    jobq_t *qs[3] = {&db->queries, &db->reads, &db->ingest};
    for (int i = 0; i < 3; i++) {
        pthread_mutex_lock(&qs[i]->mu);
        pthread_cond_broadcast(&qs[i]->cv);
        pthread_mutex_unlock(&qs[i]->mu);
    }
}

/* ---- public --------------------------------------------------------------------------------- */

/* An ingest batch costs about half a MiB of short-lived buffers (the request body, the decoded
 * events, the COPY text, the queued batch, freed on the ingest thread). With glibc's dynamic
 * thresholds those come from mmap or from the top of the heap, and are handed back to the kernel
 * when freed, so every batch faulted its pages in again: ~9,000 page faults and a quarter of
 * tandemd's CPU over a 400-batch bench run (bench/results/controlplane.json). Fixed thresholds keep
 * freed memory for reuse (up to TRIM_KEEP per arena) and serve anything up to a whole group
 * (GROUP_MAX_BYTES) from the heap. Process-wide, set once, before the threads start. */
#define TRIM_KEEP (64u << 20)

static void malloc_tune(void)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, (int)GROUP_MAX_BYTES);
    mallopt(M_TRIM_THRESHOLD, (int)TRIM_KEEP);
#endif
}

tdm_status_t tdm_cp_db_start(const tdm_cp_db_opts_t *opts, tdm_cp_db_t **ret_db, char *err,
                             size_t err_len)
{
    malloc_tune();
    tdm_cp_db_t *db = tdm_calloc(1, sizeof(*db));
    db->opts = *opts;
    db->dsn = tdm_strdup(opts->dsn);
    jobq_init(&db->queries);
    jobq_init(&db->reads);
    jobq_init(&db->ingest);
    tdm_status_t st =
        tdm_cp_spool_open(opts->spool_path, opts->spool_max_bytes, &db->spool, err, err_len);
    if (st != TDM_OK)
        goto err_free;
    if (tdm_cp_spool_records(db->spool))
        tdm_info(TDM_SUB_DB,
                 "msg=\"spool holds batches from before; replaying when the database "
                 "is up\" records=%llu",
                 (unsigned long long)tdm_cp_spool_records(db->spool));
    pending_stats_locked(db);
    db->recent = tdm_calloc(TDM_CP_DB_INGEST_CONNS, sizeof(*db->recent));
    db->keymap = tdm_calloc(1, sizeof(*db->keymap));
    for (int i = 0; i < 1 + TDM_CP_DB_READERS; i++) {
        qworker_t *w = &db->qw[i];
        w->db = db;
        w->primary = i == 0;
        w->idx = i;
        w->q = i == 0 ? &db->queries : &db->reads;
        if (pthread_create(&w->tid, NULL, query_main, w) != 0) {
            snprintf(err, err_len, "pthread_create: %s", strerror(errno));
            st = TDM_ERR_IO;
            goto err_join;
        }
        db->nqw++;
    }
    for (int i = 0; i < TDM_CP_DB_INGEST_CONNS; i++) {
        struct iworker *iw = &db->iw[i];
        iw->db = db;
        iw->idx = i;
        if (pthread_create(&iw->tid, NULL, ingest_main, iw) != 0) {
            snprintf(err, err_len, "pthread_create: %s", strerror(errno));
            st = TDM_ERR_IO;
            goto err_join;
        }
        db->niw++;
    }
    *ret_db = db;
    return TDM_OK;

err_join:
    atomic_store(&db->stop, 1);
    wake_all(db);
    for (int i = 0; i < db->nqw; i++)
        pthread_join(db->qw[i].tid, NULL);
    for (int i = 0; i < db->niw; i++)
        pthread_join(db->iw[i].tid, NULL);
    ingest_shutdown(db);
    tdm_cp_spool_close(db->spool);
    tdm_free(db->recent);
    tdm_free(db->keymap);
err_free:
    jobq_destroy(&db->queries);
    jobq_destroy(&db->reads);
    jobq_destroy(&db->ingest);
    tdm_free(db->dsn);
    tdm_free(db);
    return st;
}

void tdm_cp_db_stop(tdm_cp_db_t *db)
{
    if (!db)
        return;
    atomic_store(&db->stop, 1);
    wake_all(db);
    for (int i = 0; i < db->nqw; i++)
        pthread_join(db->qw[i].tid, NULL);
    for (int i = 0; i < db->niw; i++)
        pthread_join(db->iw[i].tid, NULL);
    ingest_shutdown(db);
    tdm_cp_spool_close(db->spool);
    tdm_free(db->recent);
    tdm_free(db->keymap);
    jobq_destroy(&db->queries);
    jobq_destroy(&db->reads);
    jobq_destroy(&db->ingest);
    for (int i = 0; i < TDM_CP_DB_CACHE; i++)
        tdm_free(db->cache[i].body);
    tdm_free(db->dsn);
    tdm_free(db);
}

void tdm_cp_db_query(tdm_cp_db_t *db, tdm_cp_job_t *job)
{
    jobq_t *q = job->readonly ? &db->reads : &db->queries;
    pthread_mutex_lock(&q->mu);
    jobq_push_locked(q, job);
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

tdm_status_t tdm_cp_db_ingest(tdm_cp_db_t *db, tdm_cp_job_t *job)
{
    job->cost = job->batch->blob_len + sizeof(*job) + sizeof(*job->batch);
    job->batch->enq_mono_us = tdm_time_mono_us();
    job->key = batch_key(job->batch);
    job->claimed = 0;
    pthread_mutex_lock(&db->ingest.mu);
    job->worker = keymap_worker_locked(db->keymap, job->key);
    if (db->spool_full && db->mem_bytes + job->cost > db->opts.mem_bound_bytes) {
        pthread_mutex_unlock(&db->ingest.mu);
        return TDM_ERR_AGAIN;
    }
    jobq_push_locked(&db->ingest, job);
    db->mem_bytes += job->cost;
    atomic_store(&db->stats.mem_bytes, db->mem_bytes);
    atomic_fetch_add(&db->stats.mem_batches, 1);
    if (db->ingest.head == job)
        atomic_store(&db->stats.oldest_pending_mono_us, job->batch->enq_mono_us);
    pthread_cond_broadcast(&db->ingest.cv); /* its worker may be gathering */
    pthread_mutex_unlock(&db->ingest.mu);
    return TDM_OK;
}

const tdm_cp_db_stats_t *tdm_cp_db_stats(const tdm_cp_db_t *db)
{
    return &db->stats;
}

const char *tdm_cp_db_cache_get(tdm_cp_db_t *db, const char *key, uint64_t max_age_us)
{
    uint64_t gen = atomic_load(&db->stats.write_gen), now = tdm_time_mono_us();
    for (int i = 0; i < TDM_CP_DB_CACHE; i++)
        if (db->cache[i].body && db->cache[i].gen == gen && now - db->cache[i].at_us < max_age_us &&
            strcmp(db->cache[i].key, key) == 0)
            return db->cache[i].body;
    return NULL;
}

int tdm_cp_db_cache_claim_refresh(tdm_cp_db_t *db, const char *key, uint64_t after_us)
{
    uint64_t gen = atomic_load(&db->stats.write_gen), now = tdm_time_mono_us();
    for (int i = 0; i < TDM_CP_DB_CACHE; i++) {
        if (db->cache[i].body && db->cache[i].gen == gen && strcmp(db->cache[i].key, key) == 0) {
            if (db->cache[i].refreshing || now - db->cache[i].at_us < after_us)
                return 0;
            db->cache[i].refreshing = 1;
            return 1;
        }
    }
    return 0;
}

void tdm_cp_db_cache_put(tdm_cp_db_t *db, const char *key, uint64_t gen, const char *body)
{
    if (strlen(key) >= TDM_CP_DB_CACHE_KEY || gen != atomic_load(&db->stats.write_gen))
        return;
    int slot = 0;
    for (int i = 0; i < TDM_CP_DB_CACHE; i++) {
        if (strcmp(db->cache[i].key, key) == 0) {
            slot = i;
            break;
        }
        if (!db->cache[i].body || db->cache[i].at_us < db->cache[slot].at_us)
            slot = i;
    }
    tdm_free(db->cache[slot].body);
    snprintf(db->cache[slot].key, sizeof(db->cache[slot].key), "%s", key);
    db->cache[slot].gen = gen;
    db->cache[slot].at_us = tdm_time_mono_us();
    db->cache[slot].body = tdm_strdup(body);
    db->cache[slot].refreshing = 0;
}
