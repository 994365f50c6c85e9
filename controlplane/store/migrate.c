/*
 * migrate.c — apply the embedded migrations in one transaction; partition upkeep.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/store/migrate.h"

/* pg_advisory_xact_lock key: "tandem" migrations, so concurrent tandemds serialise. */
#define MIGRATE_LOCK_KEY "7366012345"

static const char *const partitioned_tables[] = {"samples", "transfer_events", "events"};

static int exec_ok(PGconn *conn, const char *sql, char *err, size_t err_len, const char *what)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "%s: %s", what, PQresultErrorMessage(res));
        size_t n = strlen(err);
        if (n && err[n - 1] == '\n')
            err[n - 1] = '\0';
        PQclear(res);
        return -1;
    }
    PQclear(res);
    return 0;
}

static void rollback(PGconn *conn)
{
    PQclear(PQexec(conn, "ROLLBACK"));
}

tdm_status_t tdm_cp_migrate_apply(PGconn *conn, int *ret_from, int *ret_to, char *err,
                                  size_t err_len)
{
    int known =
        tdm_cp_migrations_count ? tdm_cp_migrations[tdm_cp_migrations_count - 1].version : 0;
    if (exec_ok(conn, "BEGIN", err, err_len, "begin") != 0)
        return TDM_ERR_DB;
    if (exec_ok(conn, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK_KEY ")", err, err_len, "lock") ||
        exec_ok(conn,
                "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_us bigint NOT NULL)",
                err, err_len, "schema_migrations"))
        goto err_rollback;
    PGresult *res = PQexec(conn, "SELECT coalesce(max(version), 0) FROM schema_migrations");
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        snprintf(err, err_len, "read schema version: %s", PQresultErrorMessage(res));
        PQclear(res);
        goto err_rollback;
    }
    int from = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (from > known) {
        snprintf(err, err_len,
                 "database schema version %d is newer than this tandemd (knows up to %d); "
                 "refusing to run an older binary against it",
                 from, known);
        rollback(conn);
        return TDM_ERR_STATE;
    }
    for (size_t i = 0; i < tdm_cp_migrations_count; i++) {
        const tdm_cp_migration_t *m = &tdm_cp_migrations[i];
        if (m->version <= from)
            continue;
        char what[128];
        snprintf(what, sizeof(what), "migration %04d_%s", m->version, m->name);
        if (exec_ok(conn, m->sql, err, err_len, what) != 0)
            goto err_rollback;
        char ver[16];
        snprintf(ver, sizeof(ver), "%d", m->version);
        const char *params[2] = {ver, m->name};
        res = PQexecParams(conn,
                           "INSERT INTO schema_migrations VALUES ($1::integer, $2, "
                           "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)",
                           2, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            snprintf(err, err_len, "%s: record: %s", what, PQresultErrorMessage(res));
            PQclear(res);
            goto err_rollback;
        }
        PQclear(res);
    }
    if (exec_ok(conn, "COMMIT", err, err_len, "commit") != 0)
        return TDM_ERR_DB;
    *ret_from = from;
    *ret_to = known > from ? known : from;
    return TDM_OK;

err_rollback:
    rollback(conn);
    return TDM_ERR_DB;
}

tdm_status_t tdm_cp_partitions_maintain(PGconn *conn, uint64_t now_us, int retention_days,
                                        char *err, size_t err_len)
{
    char now[32], ahead[16], cutoff[32];
    snprintf(now, sizeof(now), "%llu", (unsigned long long)now_us);
    snprintf(ahead, sizeof(ahead), "%d", TDM_CP_PARTITIONS_AHEAD);
    uint64_t keep = (uint64_t)(retention_days > 0 ? retention_days : 0) * 86400000000ull;
    snprintf(cutoff, sizeof(cutoff), "%llu",
             (unsigned long long)(now_us - (keep < now_us ? keep : now_us)));
    for (size_t i = 0; i < sizeof(partitioned_tables) / sizeof(partitioned_tables[0]); i++) {
        const char *p1[3] = {partitioned_tables[i], now, ahead};
        PGresult *res =
            PQexecParams(conn, "SELECT tdm_partitions_ensure($1, $2::bigint, $3::integer)", 3, NULL,
                         p1, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            snprintf(err, err_len, "partitions of %s: %s", partitioned_tables[i],
                     PQresultErrorMessage(res));
            PQclear(res);
            return TDM_ERR_DB;
        }
        PQclear(res);
        if (retention_days <= 0)
            continue;
        const char *p2[2] = {partitioned_tables[i], cutoff};
        res = PQexecParams(conn, "SELECT tdm_partitions_drop_before($1, $2::bigint)", 2, NULL, p2,
                           NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            snprintf(err, err_len, "retention of %s: %s", partitioned_tables[i],
                     PQresultErrorMessage(res));
            PQclear(res);
            return TDM_ERR_DB;
        }
        PQclear(res);
    }
    return TDM_OK;
}
