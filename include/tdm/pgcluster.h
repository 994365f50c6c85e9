/*
 * tdm/pgcluster.h — a private PostgreSQL cluster in a directory: start it, adopt it, stop it.
 *
 * Used by the test harness (`tdm-pg`, `make check`) and by tandemd's embedded default.
 *
 * Contract:
 * - tdm_pg_cluster_start(dir) adopts a cluster already running in `dir` (postmaster.pid names a
 *   live postgres process): the port and socket directory are read back from postmaster.pid and
 *   nothing is started. Otherwise it runs initdb (when `dir` holds no PG_VERSION) and pg_ctl start
 *   with a fresh short Unix-socket directory (/tmp/tdm-pg-XXXXXX) and a free port, listening only
 *   on that socket and 127.0.0.1. Authentication is `trust`: the cluster is for one host's tests
 *   and the embedded single-host default, never for a network.
 * - initdb/pg_ctl refuse to run as root. When euid is 0 they run as the system user `postgres`
 *   (its data directory chowned to it). If user `postgres` cannot reach `dir` (a parent such as
 *   /root is mode 0700), the data lives in /var/tmp/tandem-pg-<hash of dir's absolute path> and
 *   `dir` becomes a symbolic link to it, so the next call (and a plain `rm -rf dir` of the link)
 *   still find it. Use tdm_pg_cluster_destroy() to remove both.
 * - Binaries come from TDM_PG_BINDIR (config.h) unless opts->bindir says otherwise.
 * - Calls on one `dir` are serialised with flock(2) on its parent directory; different
 *   directories are independent. Not thread-safe with respect to fork-heavy callers' fd tables:
 *   call it before starting threads (it forks and execs).
 * - Errors: TDM_ERR_INVAL (bad argument, `dir` not a directory or not a data directory),
 *   TDM_ERR_NOTFOUND (no user postgres, no binaries; not running for _status), TDM_ERR_PERM,
 *   TDM_ERR_IO, TDM_ERR_DB (a PostgreSQL tool failed: its output is logged at error level, with
 *   the tail of the server log for a failed start). Outputs are written only on success.
 */
#ifndef TDM_PGCLUSTER_H
#define TDM_PGCLUSTER_H

#include <stddef.h>
#include <sys/types.h>

#include <tdm/status.h>

#define TDM_PG_HOST_MAX 108 /* sun_path: the socket directory plus "/.s.PGSQL.NNNNN" must fit */
#define TDM_PG_PATH_MAX 4096

typedef struct tdm_pg_opts {
    int for_tests;      /* fsync=off, synchronous_commit=off, full_page_writes=off, initdb -N */
    const char *bindir; /* NULL: TDM_PG_BINDIR */
} tdm_pg_opts_t;

typedef struct tdm_pg_info {
    char host[TDM_PG_HOST_MAX];    /* Unix-socket directory: libpq's host= */
    int port;                      /* TCP port on 127.0.0.1 and the socket's number */
    char user[64];                 /* the cluster's superuser ("postgres") */
    char datadir[TDM_PG_PATH_MAX]; /* the real data directory (dir itself, or its link target) */
    pid_t pid;                     /* postmaster pid */
    int adopted;                   /* 1: was already running, 0: started by this call */
} tdm_pg_info_t;

/* Adopt or start the cluster in `dir` (created if missing). opts may be NULL (durable defaults). */
tdm_status_t tdm_pg_cluster_start(const char *dir, const tdm_pg_opts_t *opts,
                                  tdm_pg_info_t *ret_info);

/* Fill ret_info if a cluster is running in `dir`; TDM_ERR_NOTFOUND if none is. */
tdm_status_t tdm_pg_cluster_status(const char *dir, tdm_pg_info_t *ret_info);

/* Stop the cluster in `dir` (fast shutdown) and remove its socket directory. TDM_OK if none was
 * running. opts may be NULL. */
tdm_status_t tdm_pg_cluster_stop(const char *dir, const tdm_pg_opts_t *opts);

/* Stop, then remove the data directory, its link target under /var/tmp if any, and `dir`. */
tdm_status_t tdm_pg_cluster_destroy(const char *dir, const tdm_pg_opts_t *opts);

/* libpq keyword/value DSN "host='…' port=N user='…' dbname='…'" (values quoted per libpq).
 * TDM_ERR_OVERFLOW if it does not fit in len bytes (buf then unchanged). */
tdm_status_t tdm_pg_info_dsn(const tdm_pg_info_t *info, const char *dbname, char *buf, size_t len);

#endif
