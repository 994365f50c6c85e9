/*
 * tests/pgtest.h — a fresh PostgreSQL database per test (header-only; link $(LIBPQ_LIBS)).
 *
 * `make check` starts one private cluster (`tdm-pg start`) and exports TDM_TEST_PGHOST,
 * TDM_TEST_PGPORT and TDM_TEST_PGUSER to every test. A test calls pgtest_require() first (a
 * missing test PostgreSQL is a failure: "Bail out!" when the variables are absent), then
 * pgtest_db_create("test_foo", dsn, sizeof(dsn)) which drops any database of that name (its
 * connections forced off) and creates it empty, writing a libpq DSN for it. Names are
 * [a-z0-9_], at most 63 bytes: use the test's own name so parallel tests never share one.
 * Returns 0, or -1 with the reason printed as a TAP diagnostic.
 */
#ifndef TDM_TESTS_PGTEST_H
#define TDM_TESTS_PGTEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "tap.h"

static inline int pgtest_available(void)
{
    const char *h = getenv("TDM_TEST_PGHOST"), *p = getenv("TDM_TEST_PGPORT");
    const char *u = getenv("TDM_TEST_PGUSER");
    return h && *h && p && *p && u && *u;
}

static inline void pgtest_require(void)
{
    if (!pgtest_available())
        bail_out("no test PostgreSQL (TDM_TEST_PGHOST/PORT/USER unset; run under make check)");
}

/* DSN of database `dbname` on the test cluster; -1 if it does not fit or the env is absent. */
static inline int pgtest_dsn(const char *dbname, char *ret_dsn, size_t len)
{
    if (!pgtest_available())
        return -1;
    int n = snprintf(ret_dsn, len, "host=%s port=%s user=%s dbname=%s connect_timeout=10",
                     getenv("TDM_TEST_PGHOST"), getenv("TDM_TEST_PGPORT"),
                     getenv("TDM_TEST_PGUSER"), dbname);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

static inline int pgtest_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 63 || name[0] == '_' || (name[0] >= '0' && name[0] <= '9'))
        return 0;
    return name[strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_")] == '\0';
}

/* Run one command on conn; -1 with a diagnostic on failure. */
static inline int pgtest_exec(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    int rc = 0;
    ExecStatusType s = PQresultStatus(res);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        diag("pgtest: %s: %s", sql, PQresultErrorMessage(res));
        rc = -1;
    }
    PQclear(res);
    return rc;
}

static inline int pgtest_db_create(const char *name, char *ret_dsn, size_t len)
{
    char admin[512], dsn[512], sql[160];
    PGconn *conn;
    int rc = -1;

    if (!pgtest_name_ok(name)) {
        diag("pgtest: bad database name '%s' (want [a-z][a-z0-9_]{0,62})", name ? name : "");
        return -1;
    }
    if (pgtest_dsn("postgres", admin, sizeof(admin)) != 0 ||
        pgtest_dsn(name, dsn, sizeof(dsn)) != 0 || strlen(dsn) >= len) {
        diag("pgtest: no test cluster in the environment, or DSN buffer too small");
        return -1;
    }
    conn = PQconnectdb(admin);
    if (PQstatus(conn) != CONNECTION_OK) {
        diag("pgtest: connect %s: %s", admin, PQerrorMessage(conn));
        goto out;
    }
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name);
    if (pgtest_exec(conn, sql) != 0)
        goto out;
    snprintf(sql, sizeof(sql), "CREATE DATABASE \"%s\"", name);
    /* concurrent CREATE DATABASE can meet "source database is being accessed": retry briefly */
    for (int attempt = 0; attempt < 20; attempt++) {
        PGresult *res = PQexec(conn, sql);
        int good = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!good && attempt == 19)
            diag("pgtest: %s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
        if (good) {
            memcpy(ret_dsn, dsn, strlen(dsn) + 1);
            rc = 0;
            break;
        }
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
out:
    PQfinish(conn);
    return rc;
}

#endif
