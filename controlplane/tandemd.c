/*
 * tandemd.c — the control plane daemon: configuration, the embedded PostgreSQL default,
 * `--migrate`, `--print-routes`, signals, and the server's lifetime.
 *
 * Configuration is tdm/config.h's TDM_TANDEMD_PARAMS (the shared flags of docs/contracts.md §a)
 * plus the control plane's own tunables below, resolved by tdm/params.h (CLI > env > files >
 * default). Without --pg-dsn, tandemd starts (or adopts) a private cluster in state_dir/pg through
 * tdm/pgcluster.h and uses database "tandem" in it.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libpq-fe.h>

#include <tdm/config.h>
#include <tdm/log.h>
#include <tdm/params.h>
#include <tdm/pgcluster.h>
#include <tdm/time.h>

#include "controlplane/store/migrate.h"
#include "controlplane/http/cp_server.h"

static volatile int stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void print_routes(void)
{
    for (size_t i = 0; i < tdm_cp_routes_count; i++)
        printf("%s %s %s %zu\n", tdm_cp_routes[i].method, tdm_cp_routes[i].path,
               tdm_cp_role_name(tdm_cp_routes[i].role), tdm_cp_routes[i].max_body);
}

/* Start/adopt the private cluster and make sure database "tandem" exists. */
static tdm_status_t embedded_dsn(const char *state_dir, char *dsn, size_t len)
{
    char dir[4096], admin[1024];
    snprintf(dir, sizeof(dir), "%s/pg", state_dir);
    tdm_pg_info_t info;
    tdm_status_t st = tdm_pg_cluster_start(dir, NULL, &info);
    if (st != TDM_OK) {
        tdm_err(TDM_SUB_CP, "msg=\"embedded PostgreSQL failed to start\" dir=%s status=%s", dir,
                tdm_status_name(st));
        return st;
    }
    if (tdm_pg_info_dsn(&info, "postgres", admin, sizeof(admin)) != TDM_OK ||
        tdm_pg_info_dsn(&info, "tandem", dsn, len) != TDM_OK)
        return TDM_ERR_OVERFLOW;
    PGconn *conn = PQconnectdb(admin);
    PQsetNoticeProcessor(conn, tdm_log_pq_notice, NULL);
    if (PQstatus(conn) != CONNECTION_OK) {
        tdm_err(TDM_SUB_CP, "msg=\"embedded PostgreSQL unreachable\" err=\"%s\"",
                PQerrorMessage(conn));
        PQfinish(conn);
        return TDM_ERR_DB;
    }
    PGresult *res = PQexec(conn, "SELECT 1 FROM pg_database WHERE datname = 'tandem'");
    int exists = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
    PQclear(res);
    if (!exists) {
        res = PQexec(conn, "CREATE DATABASE tandem");
        if (PQresultStatus(res) != PGRES_COMMAND_OK &&
            strcmp(PQresultErrorField(res, PG_DIAG_SQLSTATE)
                       ? PQresultErrorField(res, PG_DIAG_SQLSTATE)
                       : "",
                   "42P04") != 0) {
            tdm_err(TDM_SUB_CP, "msg=\"CREATE DATABASE tandem failed\" err=\"%s\"",
                    PQresultErrorMessage(res));
            PQclear(res);
            PQfinish(conn);
            return TDM_ERR_DB;
        }
        PQclear(res);
    }
    PQfinish(conn);
    tdm_info(TDM_SUB_CP, "msg=\"embedded PostgreSQL\" dir=%s port=%d adopted=%d", dir, info.port,
             info.adopted);
    return TDM_OK;
}

static int run_migrate(const char *dsn, int retention_days)
{
    PGconn *conn = PQconnectdb(dsn);
    PQsetNoticeProcessor(conn, tdm_log_pq_notice, NULL);
    if (PQstatus(conn) != CONNECTION_OK) {
        tdm_err(TDM_SUB_CP, "msg=\"--migrate: cannot connect\" err=\"%s\"", PQerrorMessage(conn));
        PQfinish(conn);
        return 1;
    }
    char err[1024];
    int from = 0, to = 0;
    tdm_status_t st = tdm_cp_migrate_apply(conn, &from, &to, err, sizeof(err));
    if (st == TDM_OK)
        st = tdm_cp_partitions_maintain(conn, tdm_time_wall_us(), retention_days, err, sizeof(err));
    PQfinish(conn);
    if (st != TDM_OK) {
        tdm_err(TDM_SUB_CP, "msg=\"--migrate failed\" err=\"%s\"", err);
        return 1;
    }
    printf("schema version %d -> %d\n", from, to);
    return 0;
}

int main(int argc, char **argv)
{
    tdm_log_init("tandemd");
    tdm_tandemd_config_t cfg;
    tdm_params_t *params = NULL;
    char err[1024], dsn[2048];
    int rc = tdm_params_start(&tdm_tandemd_config_table, &cfg, &cfg.log_level, argc, argv, NULL,
                              TDM_SUB_CP, &params);
    if (rc != TDM_PARAMS_GO) {
        rc = rc == TDM_PARAMS_BAD ? 1 : rc;
        goto out;
    }
    rc = 1;
    if (cfg.print_routes) {
        print_routes();
        rc = 0;
        goto out;
    }
    if (mkdir(cfg.state_dir, 0700) != 0 && errno != EEXIST) {
        tdm_err(TDM_SUB_CP, "msg=\"cannot create --state-dir\" dir=%s err=\"%s\"", cfg.state_dir,
                strerror(errno));
        goto out;
    }
    if (cfg.pg_dsn[0]) {
        snprintf(dsn, sizeof(dsn), "%s", cfg.pg_dsn);
    } else if (embedded_dsn(cfg.state_dir, dsn, sizeof(dsn)) != TDM_OK) {
        tdm_err(TDM_SUB_CP, "msg=\"no --pg-dsn and the embedded PostgreSQL failed\" dir=%s/pg",
                cfg.state_dir);
        goto out;
    }
    if (cfg.migrate) {
        rc = run_migrate(dsn, (int)cfg.retention_days);
        goto out;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char spool[4200];
    snprintf(spool, sizeof(spool), "%s/ingest.spool", cfg.state_dir);
    tdm_cp_server_opts_t so = {
        .listen = cfg.listen,
        .ready_file = cfg.ready_file,
        .state_dir = cfg.state_dir,
        .alert_webhook = cfg.alert_webhook,
        .alert_policy = cfg.alert_policy,
        .db =
            {
                .dsn = dsn,
                .spool_path = spool,
                .mem_bound_bytes = (uint64_t)cfg.ingest_buffer_bytes,
                .spool_max_bytes = (uint64_t)cfg.spool_max_bytes,
                .retention_days = (int)cfg.retention_days,
            },
        .act =
            {
                .groups_config = cfg.groups_config,
                .worker_bin = cfg.worker_bin,
                .canary_interval_s = cfg.canary_interval,
                .start_timeout_s = cfg.start_timeout,
                .drain_timeout_s = cfg.drain_timeout,
                .start_retries = (int)cfg.start_retries,
                .start_backoff_max_s = cfg.start_backoff_max,
                .stable_window_s = cfg.stable_window,
            },
    };
    static tdm_cp_server_t server;
    if (tdm_cp_server_init(&server, &so, err, sizeof(err)) != TDM_OK) {
        tdm_err(TDM_SUB_CP, "msg=\"%s\"", err);
        goto out;
    }
    tdm_cp_server_run(&server, &stop_flag);
    tdm_info(TDM_SUB_CP, "msg=\"stopping\"");
    tdm_cp_server_free(&server);
    rc = 0;
out:
    tdm_params_free(params);
    return rc;
}
