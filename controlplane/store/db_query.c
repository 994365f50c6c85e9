/*
 * db_query.c — the query thread (migrations, upkeep, writes) and the reader pool (readonly
 * jobs), each with its own connection and prepared statements; see db.h.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include <tdm/hash.h>
#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/store/buf.h"
#include "controlplane/store/db_int.h"
#include "controlplane/store/migrate.h"

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
        tdm_cp_dbi_set_err(job, TDM_ERR_DB, PQresultErrorMessage(res));
    }
}

/* The job failed because the server is going away (SQLSTATE 57P*, a shutdown's FATAL result,
 * which can come while libpq still calls the connection OK; or class 08): the statement did not
 * run, so it is tried again on a new connection like a lost one. Only these, not every transient
 * state: a wait job is sent again at once on the next connection. */
static int server_going(const tdm_cp_job_t *job)
{
    return strncmp(job->sqlstate, "57P", 3) == 0 || strncmp(job->sqlstate, "08", 2) == 0;
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

void tdm_cp_dbi_conn_lost(qworker_t *w, PGconn **conn, const char *app, const char *why)
{
    tdm_warn(TDM_SUB_DB, "msg=\"database connection lost\" conn=%s err=\"%.200s\"", app, why);
    PQfinish(*conn);
    *conn = NULL;
    if (w->primary) {
        w->db->query_up = 0;
        tdm_cp_dbi_update_up(w->db);
    }
    atomic_fetch_add(&w->db->stats.reconnects, 1);
}

/* A new connection for the worker, ready for its jobs (the primary applies the migrations on
 * it); NULL when the database cannot be reached. */
static PGconn *worker_connect(qworker_t *w, const char *app)
{
    tdm_cp_db_t *db = w->db;
    PGconn *conn = tdm_cp_dbi_db_connect(db, app);
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

void *tdm_cp_dbi_query_main(void *arg)
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
                tdm_cp_dbi_update_up(db);
        }
        if (w->primary && conn && now >= next_alerts) {
            refresh_open_alerts(db, conn);
            next_alerts = now + 1000000u;
            if (PQstatus(conn) == CONNECTION_BAD) {
                tdm_cp_dbi_conn_lost(w, &conn, app, "the once-a-second check failed");
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
            job = tdm_cp_dbi_jobq_pop_locked(q);
        } else {
            /* Down: fail what cannot wait, keep what can. */
            tdm_cp_job_t *keep = NULL, *keep_tail = NULL, *j;
            while ((j = tdm_cp_dbi_jobq_pop_locked(q)) != NULL) {
                if (j->wait) {
                    if (keep_tail)
                        keep_tail->next = j;
                    else
                        keep = j;
                    keep_tail = j;
                } else {
                    tdm_cp_dbi_set_err(j, TDM_ERR_DB, "database unavailable");
                    tdm_cp_dbi_reply(db, j);
                }
            }
            q->head = keep;
            q->tail = keep_tail;
        }
        if (!job && !atomic_load(&db->stop))
            tdm_cp_dbi_cond_wait_us(q, conn ? 200000u : (next_try > now ? next_try - now : 1000u));
        pthread_mutex_unlock(&q->mu);
        if (!job)
            continue;

        run_query(w, conn, job);
        if (job->st != TDM_OK && (PQstatus(conn) == CONNECTION_BAD || server_going(job)) &&
            job->readonly) {
            /* An idle connection learns that the server restarted only when it is used: one
             * fresh connection and one more try before a client hears "database unavailable".
             * Reads only: a write whose tdm_cp_dbi_reply was lost may have committed. */
            tdm_cp_dbi_conn_lost(w, &conn, app, job->err);
            conn = worker_connect(w, app);
            if (w->primary)
                tdm_cp_dbi_update_up(db);
            if (conn) {
                job->st = TDM_OK;
                job->err[0] = job->sqlstate[0] = '\0';
                run_query(w, conn, job);
            }
        }
        if (job->st != TDM_OK && (!conn || PQstatus(conn) == CONNECTION_BAD || server_going(job))) {
            if (conn)
                tdm_cp_dbi_conn_lost(w, &conn, app, job->err);
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
            tdm_cp_dbi_set_err(job, TDM_ERR_DB, "database unavailable");
        } else if (job->st != TDM_OK) {
            atomic_fetch_add(&db->stats.query_errors, 1);
        }
        /* Anything the primary ran may have changed what reads return (readers' caches key on
         * this generation). */
        if (w->primary && !job->readonly)
            atomic_fetch_add(&db->stats.write_gen, 1);
        tdm_cp_dbi_reply(db, job);
    }

    pthread_mutex_lock(&q->mu);
    tdm_cp_job_t *j;
    while ((j = tdm_cp_dbi_jobq_pop_locked(q)) != NULL) {
        tdm_cp_dbi_set_err(j, TDM_ERR_ABORTED, "shutting down");
        tdm_cp_dbi_reply(db, j);
    }
    pthread_mutex_unlock(&q->mu);
    PQfinish(conn);
    return NULL;
}
