/*
 * common/pg_int.h — internals shared by pgcluster.c and pgproc.c: running the PostgreSQL tools as
 * the right user. Not a public header.
 */
#ifndef TDM_COMMON_PG_INT_H
#define TDM_COMMON_PG_INT_H

#include <stddef.h>
#include <sys/types.h>

#include <tdm/status.h>

#define PG_SUPERUSER "postgres"
#define TOOL_OUT_MAX 4096
#define PG_SOCK_TEMPLATE "/tmp/tdm-pg-XXXXXX"
#define PG_SOCKDIR_FILE "tandem.sockdir" /* in the data directory (pgport.c) */

/* Who runs the PostgreSQL tools: ourselves, or user postgres when we are root. */
typedef struct run_as {
    int switch_user;
    uid_t uid;
    gid_t gid;
    char name[64];
} run_as_t;

tdm_status_t tdm_pg_errno_status(int e);
tdm_status_t tdm_pg_path_join(char *buf, size_t len, const char *a, const char *b);
/* Ourselves when not root; user postgres (TDM_ERR_NOTFOUND if absent) when root. */
tdm_status_t tdm_pg_runas_lookup(run_as_t *ret);
/* chown path to the tool user (no-op when not switching). */
tdm_status_t tdm_pg_runas_chown(const run_as_t *ru, const char *path);
/* Can the tool user read, write and enter path (every parent traversable)? Checked as that user. */
int tdm_pg_runas_can_access(const run_as_t *ru, const char *path);
/* Run bindir/argv[0] as the tool user, clean environment, cwd "/", stdin /dev/null; its stdout
 * and stderr tail in out. TDM_OK when it ran (ret_exit: exit code or 128+signal). */
tdm_status_t tdm_pg_tool_run(const run_as_t *ru, const char *bindir, const char *const argv[],
                             char out[TOOL_OUT_MAX], int *ret_exit);
/* The same, where a non-zero exit is an error: logged once with the output, TDM_ERR_DB. */
tdm_status_t tdm_pg_tool_run_ok(const run_as_t *ru, const char *bindir, const char *const argv[]);

/* pgport.c: the port and socket directory of a cluster, remembered in its data directory. */
tdm_status_t tdm_pg_free_port(int *ret_port);
int tdm_pg_port_is_free(int port);
int tdm_pg_remembered_port(const char *data);
void tdm_pg_remember_port(const char *data, int port);
int tdm_pg_remembered_sockdir(const char *data, const run_as_t *ru, char *out, size_t len);
void tdm_pg_remember_sockdir(const char *data, const char *sockdir);

#endif
