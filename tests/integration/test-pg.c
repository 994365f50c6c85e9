/*
 * test-pg.c — the PostgreSQL helper against a real server: a per-test database from the shared
 * `make check` cluster (create, insert, read back), adoption of that cluster, and the whole
 * life of a private cluster (initdb, start, adopt, stop, restart with data kept, a failed start
 * reported, destroy). Run as root it also proves the relocation: the cluster directory sits
 * under a mode-0700 parent that user postgres cannot traverse, like a checkout under /root.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tdm/pgcluster.h>

#include "pgtest.h"
#include "tap.h"

static PGconn *connect_dsn(const char *dsn)
{
    PGconn *c = PQconnectdb(dsn);
    if (PQstatus(c) != CONNECTION_OK) {
        diag("connect %s: %s", dsn, PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* First column of the first row of a query, as a malloc'd string (NULL on error). */
static char *query_value(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    char *v = NULL;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
        v = strdup(PQgetvalue(r, 0, 0));
    else
        diag("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return v;
}

static void test_shared_database(void)
{
    char dsn[512];
    is_int(pgtest_db_create("test_pg", dsn, sizeof(dsn)), 0, "per-test database created");
    PGconn *c = connect_dsn(dsn);
    ok(c != NULL, "connect to the per-test database");
    if (!c)
        return;
    ok(pgtest_exec(c, "CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)") == 0,
       "create table");
    const char *names[] = {"prefill", "decode", "tandem's"};
    int inserted = 0;
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof(id), "%d", i + 1);
        const char *params[2] = {id, names[i]};
        PGresult *r = PQexecParams(c, "INSERT INTO items VALUES ($1::int, $2)", 2, NULL, params,
                                   NULL, NULL, 0);
        inserted += PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
    }
    is_int(inserted, 3, "three rows inserted");
    PGresult *r = PQexec(c, "SELECT id, name FROM items ORDER BY id");
    int rows_ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 3;
    for (int i = 0; rows_ok && i < 3; i++)
        rows_ok = atoi(PQgetvalue(r, i, 0)) == i + 1 && !strcmp(PQgetvalue(r, i, 1), names[i]);
    PQclear(r);
    ok(rows_ok, "rows read back in order with their values");
    PQfinish(c);

    /* a second create gives an empty database again, even with a connection open */
    PGconn *held = connect_dsn(dsn);
    is_int(pgtest_db_create("test_pg", dsn, sizeof(dsn)), 0, "re-create drops the old database");
    PQfinish(held);
    c = connect_dsn(dsn);
    char *n = c ? query_value(c, "SELECT count(*) FROM pg_tables WHERE tablename = 'items'") : NULL;
    is_str(n, "0", "re-created database is empty");
    free(n);
    PQfinish(c);
    ok(pgtest_db_create("Bad-Name", dsn, sizeof(dsn)) != 0, "bad database name refused");
}

static void test_adopt_shared(void)
{
    const char *b = getenv("TDM_BUILDDIR");
    char dir[1024];
    tdm_pg_info_t info;
    if (!b)
        bail_out("TDM_BUILDDIR unset: cannot find the shared cluster (run under make check)");
    snprintf(dir, sizeof(dir), "%s/tests/.pg", b);
    tdm_status_t st = tdm_pg_cluster_start(dir, NULL, &info);
    is_int(st, TDM_OK, "start on the shared cluster's directory");
    if (st != TDM_OK)
        return;
    ok(info.adopted == 1, "the running shared cluster is adopted, not restarted");
    is_int(info.port, atoi(getenv("TDM_TEST_PGPORT")), "adopted port matches TDM_TEST_PGPORT");
    is_str(info.host, getenv("TDM_TEST_PGHOST"), "adopted socket dir matches TDM_TEST_PGHOST");
}

static void test_dsn(void)
{
    tdm_pg_info_t info;
    char buf[256], small[16];
    memset(&info, 0, sizeof(info));
    strcpy(info.host, "/tmp/a'b\\c");
    info.port = 5433;
    strcpy(info.user, "postgres");
    is_int(tdm_pg_info_dsn(&info, "db", buf, sizeof(buf)), TDM_OK, "dsn built");
    is_str(buf, "host='/tmp/a\\'b\\\\c' port='5433' user='postgres' dbname='db'",
           "dsn values quoted per libpq");
    strcpy(small, "unchanged");
    is_int(tdm_pg_info_dsn(&info, "db", small, sizeof(small)), TDM_ERR_OVERFLOW,
           "dsn too long for the buffer");
    is_str(small, "unchanged", "buffer untouched on overflow");
    info.port = 0;
    is_int(tdm_pg_info_dsn(&info, "db", buf, sizeof(buf)), TDM_ERR_INVAL, "dsn needs a port");
}

/* Dead or a zombie (its parent, often pid 1 of a container, may reap late), within 5 s. */
static int process_gone(pid_t pid)
{
    for (int i = 0; i < 50; i++) {
        char path[64], buf[256];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            return kill(pid, 0) != 0;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'))
            return 1;
        usleep(100 * 1000);
    }
    return 0;
}

static int append_line(const char *path, const char *line)
{
    FILE *f = fopen(path, "a");
    if (!f)
        return -1;
    int rc = fputs(line, f) < 0 ? -1 : 0;
    return fclose(f) == 0 ? rc : -1;
}

static void test_private_cluster(void)
{
    char base[] = "/tmp/tdm-pgtest-XXXXXX", dir[256], path[TDM_PG_PATH_MAX + 64], dsn[1024];
    tdm_pg_opts_t opts = {.for_tests = 1};
    tdm_pg_info_t a, b, s;
    struct stat sb;
    int root = geteuid() == 0;

    if (!mkdtemp(base)) {
        ok(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    chmod(base, 0700); /* as root: user postgres cannot traverse it, like /root */
    snprintf(dir, sizeof(dir), "%s/cluster", base);

    is_int(tdm_pg_cluster_status(dir, &s), TDM_ERR_NOTFOUND, "status before start: not found");
    is_int(tdm_pg_cluster_start(dir, &opts, &a), TDM_OK, "initdb + start a private cluster");
    ok(a.adopted == 0 && a.pid > 0 && a.port > 0, "fresh start (pid %d port %d)", (int)a.pid,
       a.port);
    ok(strlen(a.host) <= 60 && !strncmp(a.host, "/tmp/tdm-pg-", 12), "short socket dir %s", a.host);
    if (root) {
        ok(lstat(dir, &sb) == 0 && S_ISLNK(sb.st_mode), "unreachable dir became a link");
        ok(!strncmp(a.datadir, "/var/tmp/tandem-pg-", 19), "data relocated to %s", a.datadir);
    } else {
        ok(lstat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), "dir is the data directory");
        ok(!strcmp(a.datadir, dir), "no relocation when not root");
    }

    is_int(tdm_pg_cluster_start(dir, &opts, &b), TDM_OK, "second start");
    ok(b.adopted == 1, "second start adopts");
    is_int(b.pid, a.pid, "same postmaster pid");
    is_int(b.port, a.port, "same port");
    is_str(b.host, a.host, "same socket dir");
    is_int(tdm_pg_cluster_status(dir, &s), TDM_OK, "status: running");
    is_int(s.pid, a.pid, "status names the same pid");

    PGconn *c = NULL;
    if (tdm_pg_info_dsn(&a, "postgres", dsn, sizeof(dsn)) == TDM_OK)
        c = connect_dsn(dsn);
    ok(c != NULL, "connect through the info DSN (Unix socket)");
    if (c) {
        ok(pgtest_exec(c, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)") == 0,
           "write a row");
        char *v = query_value(c, "SHOW fsync");
        is_str(v, "off", "for_tests turns fsync off");
        free(v);
        PQfinish(c);
    }
    char tcp[256];
    snprintf(tcp, sizeof(tcp), "host=127.0.0.1 port=%d user=postgres dbname=postgres", a.port);
    c = connect_dsn(tcp);
    ok(c != NULL, "connect over TCP on 127.0.0.1");
    PQfinish(c);

    is_int(tdm_pg_cluster_stop(dir, &opts), TDM_OK, "stop");
    ok(process_gone(a.pid), "postmaster is gone");
    ok(stat(a.host, &sb) != 0, "socket dir removed");
    is_int(tdm_pg_cluster_status(dir, &s), TDM_ERR_NOTFOUND, "status after stop: not found");
    is_int(tdm_pg_cluster_stop(dir, &opts), TDM_OK, "stop again is a no-op");

    is_int(tdm_pg_cluster_start(dir, &opts, &b), TDM_OK, "restart");
    ok(b.adopted == 0 && b.pid != a.pid, "restart is a new postmaster");
    is_str(b.datadir, a.datadir, "same data directory after restart");
    is_int(b.port, a.port, "same port after restart (clients keep their address)");
    c = NULL;
    if (tdm_pg_info_dsn(&b, NULL, dsn, sizeof(dsn)) == TDM_OK)
        c = connect_dsn(dsn);
    char *v = c ? query_value(c, "SELECT x FROM kept") : NULL;
    is_str(v, "42", "data survived the restart");
    free(v);
    PQfinish(c);

    /* a server that cannot start is an error with a reason, not a hang or an abort */
    is_int(tdm_pg_cluster_stop(dir, &opts), TDM_OK, "stop before breaking the config");
    snprintf(path, sizeof(path), "%s/postgresql.conf", b.datadir);
    ok(append_line(path, "tandem_bogus_setting = on\n") == 0, "plant a bad setting");
    is_int(tdm_pg_cluster_start(dir, &opts, &s), TDM_ERR_DB, "failed start reported as DB error");
    is_int(tdm_pg_cluster_status(dir, &s), TDM_ERR_NOTFOUND, "nothing left running");

    is_int(tdm_pg_cluster_destroy(dir, &opts), TDM_OK, "destroy");
    ok(lstat(dir, &sb) != 0 && errno == ENOENT, "cluster dir removed");
    ok(lstat(b.datadir, &sb) != 0 && errno == ENOENT, "data directory removed");

    /* bad inputs get errors, never a crash */
    is_int(tdm_pg_cluster_start(NULL, &opts, &s), TDM_ERR_INVAL, "NULL dir refused");
    is_int(tdm_pg_cluster_start(dir, &opts, NULL), TDM_ERR_INVAL, "NULL info refused");
    snprintf(path, sizeof(path), "%s/file", base);
    ok(append_line(path, "x\n") == 0, "make a regular file");
    is_int(tdm_pg_cluster_start(path, &opts, &s), TDM_ERR_INVAL, "a regular file is refused");
    unlink(path);
    snprintf(path, sizeof(path), "%s/junk", base);
    mkdir(path, 0700);
    snprintf(dir, sizeof(dir), "%s/junk/f", base);
    ok(append_line(dir, "x\n") == 0, "make a non-empty directory");
    is_int(tdm_pg_cluster_start(path, &opts, &s), TDM_ERR_INVAL,
           "a non-empty non-cluster directory is refused");
    is_int(tdm_pg_cluster_destroy(path, &opts), TDM_ERR_INVAL,
           "destroy refuses a non-cluster directory");
    ok(stat(dir, &sb) == 0, "and leaves its contents alone");
    unlink(dir);
    rmdir(path);
    rmdir(base);
}

int main(void)
{
    pgtest_require();
    test_shared_database();
    test_adopt_shared();
    test_dsn();
    test_private_cluster();
    return done_testing();
}
