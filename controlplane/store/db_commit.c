/*
 * db_commit.c — one ingest group's transaction (group commit: marks, COPY, joiners, COMMIT);
 * see db_int.h and db.h.
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

/* ---- ingest thread -------------------------------------------------------------------------- */

/* 1 when a statement failed with this SQLSTATE because the server is going away or cannot take
 * it now, not because of what was sent: classes 08 (connection exception), 40 (serialization,
 * deadlock), 53 (insufficient resources), 58 (system error) and 57P* (admin or crash shutdown,
 * cannot connect now; not 57014, a cancelled statement). */
static int sqlstate_transient(const char *code)
{
    static const char *const transient[] = {"08", "40", "53", "57P", "58"};
    for (size_t i = 0; code && i < sizeof(transient) / sizeof(transient[0]); i++)
        if (strncmp(code, transient[i], strlen(transient[i])) == 0)
            return 1;
    return 0;
}

/* A failed statement's result: INGEST_CONN when the batch is not at fault and must be sent again
 * on a new connection (the connection is gone; the server reports FATAL or PANIC, after which it
 * closes the session: an administrator's or a crash shutdown arrives as a FATAL error result
 * while libpq still reports the connection OK; or a transient SQLSTATE, above; 57014, which
 * our own abandoned COPY of an all-duplicate group reports, is not one), INGEST_DATA when the
 * database refused the batch itself. docs/design.md §3: an event reaches PostgreSQL exactly
 * once. */
static ingest_rc_t fail_rc(PGconn *conn, const PGresult *res)
{
    if (PQstatus(conn) == CONNECTION_BAD || !res)
        return INGEST_CONN;
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (!sev)
        sev = PQresultErrorField(res, PG_DIAG_SEVERITY);
    if (sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0))
        return INGEST_CONN;
    return sqlstate_transient(PQresultErrorField(res, PG_DIAG_SQLSTATE)) ? INGEST_CONN
                                                                         : INGEST_DATA;
}

static ingest_rc_t exec_cmd(PGconn *conn, const char *sql, char *err, size_t err_len)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    ingest_rc_t rc = INGEST_OK;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "%s", PQresultErrorMessage(res));
        rc = fail_rc(conn, res);
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
        ingest_rc_t rc = fail_rc(conn, res);
        PQclear(res);
        return rc;
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
            rc = fail_rc(conn, res);
        }
        PQclear(res);
    }
    return rc;
}

ingest_rc_t tdm_cp_dbi_ingest_batch(PGconn *conn, const tdm_cp_batch_t *b, char *err,
                                    size_t err_len)
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
        ingest_rc_t rc = PQresultStatus(res) == PGRES_TUPLES_OK ? INGEST_DATA : fail_rc(conn, res);
        PQclear(res);
        PQfreemem(inst);
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

static const char *const copy_sql[3] = {
    "COPY samples (" TDM_CP_SAMPLE_COLUMNS ") FROM STDIN",
    "COPY transfer_events (ts_us, instance_id, rank, group_name, batch_seq, idx, type, room, "
    "from_state, to_state, reason, data) FROM STDIN",
    "COPY events (ts_us, source, instance_id, rank, group_name, batch_seq, idx, type, reason, "
    "data) FROM STDIN"};
/* transfer_events, the bulk of a batch, first: joiners add their rows to it
 * (tdm_cp_dbi_ingest_group) */
static const int copy_order[3] = {1, 0, 2};

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
        ingest_rc_t rc = fail_rc(conn, res);
        PQclear(res);
        return rc;
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
            rc = fail_rc(conn, res);
        }
        PQclear(res);
    }
    if (PQstatus(conn) == CONNECTION_BAD)
        rc = INGEST_CONN;
    return rc;
}

size_t tdm_cp_dbi_mark_find(const gmark_t *marks, size_t nm, const tdm_cp_batch_t *b)
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
    size_t k = tdm_cp_dbi_mark_find(marks, nm, b);
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

/* At most this many samples and events rows in a group go inline as INSERTs
 * (tdm_cp_dbi_ingest_group). */
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
ingest_rc_t tdm_cp_dbi_ingest_group(tdm_cp_db_t *db, int me, PGconn *conn, tdm_cp_job_t **jobs,
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
    nj = tdm_cp_dbi_join_keys_locked(db, me, jobs, n, jk, &want);
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
        snprintf(err, err_len, "%s",
                 res ? PQresultErrorMessage(res) : "no tdm_cp_dbi_reply to BEGIN");
        rc = fail_rc(conn, res);
        PQclear(res);
        goto out;
    }
    PQclear(res);
    res = PQgetResult(conn); /* the locked marks */
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || (size_t)PQntuples(res) != nm) {
        snprintf(err, err_len, "%s", res ? PQresultErrorMessage(res) : "no marks returned");
        rc = res && PQresultStatus(res) == PGRES_TUPLES_OK ? conn_rc(conn) : fail_rc(conn, res);
        PQclear(res);
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
        n = tdm_cp_dbi_join_locked(db, me, marks, nm, has, jobs, n);
        if (n == from && !atomic_load(&db->stop))
            tdm_cp_dbi_cond_wait_us(&db->ingest, GATHER_MAX_US - (t1 - t0));
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
