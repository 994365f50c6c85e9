/*
 * tdm-pg — start, adopt, inspect, stop or remove the private PostgreSQL cluster of a directory
 * (include/tdm/pgcluster.h). `make check` runs `./tdm-pg start DIR > tests/.pg.env` and sources
 * the result into every test's environment, so `start` and `status` print shell-safe
 * TDM_TEST_PG* assignments on stdout and nothing else; log lines go to stderr.
 * Test settings (fsync=off …) are the default here; --durable turns them off.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/log.h>
#include <tdm/pgcluster.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: tdm-pg start|status|stop|destroy DIR [--durable] [--bindir PATH]\n"
               "  start    adopt the cluster running in DIR or start one (initdb when empty);\n"
               "           prints TDM_TEST_PGHOST=, TDM_TEST_PGPORT=, TDM_TEST_PGUSER= lines\n"
               "  status   print the same lines if running (exit 0), else exit 3\n"
               "  stop     fast shutdown (exit 0 if nothing was running)\n"
               "  destroy  stop, then remove the data directory (and its /var/tmp target)\n");
}

static int shell_safe(const char *s)
{
    return s[strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+")] ==
           '\0';
}

static int print_env(const tdm_pg_info_t *info)
{
    char dsn[1024];
    if (!shell_safe(info->host) || !shell_safe(info->user) || !shell_safe(info->datadir)) {
        fprintf(stderr, "tdm-pg: socket directory, user or data path is not shell-safe\n");
        return 1;
    }
    if (tdm_pg_info_dsn(info, "postgres", dsn, sizeof(dsn)) != TDM_OK) {
        fprintf(stderr, "tdm-pg: DSN does not fit\n");
        return 1;
    }
    printf("TDM_TEST_PGHOST=%s\nTDM_TEST_PGPORT=%d\nTDM_TEST_PGUSER=%s\n"
           "TDM_TEST_PGDATA=%s\nTDM_TEST_PGPID=%d\n",
           info->host, info->port, info->user, info->datadir, (int)info->pid);
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    tdm_pg_opts_t opts = {.for_tests = 1, .bindir = NULL};
    tdm_pg_info_t info;
    const char *cmd = NULL, *dir = NULL;
    tdm_status_t st;

    tdm_log_init("tdm-pg");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--durable")) {
            opts.for_tests = 0;
        } else if (!strcmp(argv[i], "--bindir") && i + 1 < argc) {
            opts.bindir = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "tdm-pg: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!cmd) {
            cmd = argv[i];
        } else if (!dir) {
            dir = argv[i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!cmd || !dir) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(cmd, "start")) {
        st = tdm_pg_cluster_start(dir, &opts, &info);
        if (st == TDM_OK)
            return print_env(&info);
    } else if (!strcmp(cmd, "status")) {
        st = tdm_pg_cluster_status(dir, &info);
        if (st == TDM_OK)
            return print_env(&info);
        if (st == TDM_ERR_NOTFOUND) {
            fprintf(stderr, "tdm-pg: no cluster running in %s\n", dir);
            return 3;
        }
    } else if (!strcmp(cmd, "stop")) {
        st = tdm_pg_cluster_stop(dir, &opts);
    } else if (!strcmp(cmd, "destroy")) {
        st = tdm_pg_cluster_destroy(dir, &opts);
    } else {
        fprintf(stderr, "tdm-pg: unknown command %s\n", cmd);
        usage(stderr);
        return 2;
    }
    if (st != TDM_OK) {
        fprintf(stderr, "tdm-pg: %s %s: %s\n", cmd, dir, tdm_status_str(st));
        return 1;
    }
    return 0;
}
