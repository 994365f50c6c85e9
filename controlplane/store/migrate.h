/*
 * controlplane/store/migrate.h — forward-only schema migrations, embedded in the binary.
 *
 * sql/NNNN_name.sql files are compiled into tdm_cp_migrations[] (sql/embed.sh, at build time), in
 * version order. tdm_cp_migrate_apply() runs, in ONE transaction under an advisory lock: create
 * schema_migrations if missing, refuse a database whose newest version is above the newest this
 * binary knows (TDM_ERR_STATE: an older tandemd must not write a newer schema), apply each missing
 * version and record it. Either every pending migration is applied or none.
 *
 * tdm_cp_partitions_maintain() creates the day partitions of the time-partitioned tables for today
 * and TDM_CP_PARTITIONS_AHEAD days after, and drops those older than `retention_days` (0 = keep).
 *
 * Both take a connection owned by the caller and block on it: the DB threads and `--migrate` only.
 */
#ifndef TDM_CP_MIGRATE_H
#define TDM_CP_MIGRATE_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include <tdm/status.h>

#define TDM_CP_PARTITIONS_AHEAD 2

typedef struct tdm_cp_migration {
    int version;
    const char *name;
    const char *sql;
} tdm_cp_migration_t;

extern const tdm_cp_migration_t tdm_cp_migrations[];
extern const size_t tdm_cp_migrations_count;

/* ret_from: version found (0 = empty database); ret_to: version after. */
tdm_status_t tdm_cp_migrate_apply(PGconn *conn, int *ret_from, int *ret_to, char *err,
                                  size_t err_len);
tdm_status_t tdm_cp_partitions_maintain(PGconn *conn, uint64_t now_us, int retention_days,
                                        char *err, size_t err_len);

#endif
