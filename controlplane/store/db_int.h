/*
 * controlplane/store/db_int.h — what the database threads share inside store/ (db.c: jobs,
 * connections and the public calls; db_query.c: the query and read threads; db_commit.c: one
 * group's transaction; db_ingest.c: the ingest threads, the memory queue, the spool and taking
 * and gathering groups). Not for use outside store/.
 */
#ifndef TDM_CP_DB_INT_H
#define TDM_CP_DB_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include <libpq-fe.h>

#include <tdm/json.h>
#include <tdm/u64map.h>

#include "controlplane/store/batch.h"
#include "controlplane/store/db.h"
#include "controlplane/store/db_spool.h"

#define BACKOFF_MIN_US 100000u
#define BACKOFF_MAX_US 2000000u
#define SPOOL_TYPE_BATCH 1

typedef struct jobq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tdm_cp_job_t *head, *tail;
} jobq_t;

#define PREP_MAX 16

typedef struct qworker {
    struct tdm_cp_db *db;
    jobq_t *q;
    int primary; /* migrations, upkeep, the open-alert count, every job that is not a read */
    int idx;
    pthread_t tid;
    /* statements prepared on this worker's connection, keyed by the job's static SQL text */
    const char *prep_sql[PREP_MAX];
    int nprep;
} qworker_t;

struct tdm_cp_db {
    tdm_cp_db_opts_t opts;
    char *dsn;
    tdm_cp_db_stats_t stats;
    atomic_int stop;
    jobq_t queries;
    jobq_t reads; /* readonly jobs, served by the reader pool */
    jobq_t ingest;
    qworker_t qw[1 + TDM_CP_DB_READERS];
    int nqw;
    uint64_t mem_bytes; /* under ingest.mu */
    int spool_full;     /* under ingest.mu: the last spill found the spool full */
    tdm_cp_spool_t *spool;
    struct iworker {
        struct tdm_cp_db *db;
        int idx; /* 0 also owns the spool: spills to it and replays it */
        pthread_t tid;
    } iw[TDM_CP_DB_INGEST_CONNS];
    int niw;
    atomic_int ingest_up;  /* ingest connections connected */
    size_t claimed_n;      /* under ingest.mu: queued jobs some worker's group holds */
    int spool_unreadable;  /* under ingest.mu: a spool read failed; its records are given up */
    struct recent *recent; /* under ingest.mu: per worker, the keys of recent commits */
    tdm_u64map_t keymap;   /* under ingest.mu: which worker each (instance_id, rank) goes to */
    unsigned keymap_next;  /* the worker the next new key goes to (0-based) */
    tdm_u64map_t keyset;   /* under ingest.mu: the scratch set of the join (keys, value 1) */
    int query_up;
    struct {
        char key[TDM_CP_DB_CACHE_KEY];
        uint64_t gen, at_us;
        char *body;
        int refreshing;       /* a refresh was claimed (tdm_cp_db_cache_claim_refresh) */
    } cache[TDM_CP_DB_CACHE]; /* loop thread only */
};

typedef enum { INGEST_OK, INGEST_DUP, INGEST_CONN, INGEST_DATA } ingest_rc_t;

/* ---- group commit --------------------------------------------------------------------------
 * The batches queued at the head of the memory queue (at most GROUP_MAX_BATCHES, GROUP_MAX_BYTES)
 * go into one transaction: lock (or create) the marks of their distinct (instance_id, rank) keys in
 * one statement, decide in arrival order which batches are above their key's mark (each accepted
 * batch raises the mark for the ones after it, so a duplicate inside the group is caught as well),
 * COPY the accepted batches' rows (one COPY per table, batches concatenated in order), raise the
 * marks and COMMIT — one WAL flush for the whole group. The decision is the one batch-at-a-time
 * processing would make. */

#define GROUP_MAX_BATCHES 256
#define GROUP_MAX_BYTES (16u << 20)
#define GATHER_WINDOW_US 20000u
/* How long a group's transfer_events COPY stays open for the other recent ranks' batches. The loop
 * thread decodes a loaded rank's 509-event batch in about 1 ms, one after another, so after a
 * commit the fourth of four ranks' next batches is queued some 3-4 ms after the first: at 2 ms it
 * missed the group about every other time and waited a whole cycle (400 batches took 116
 * transactions); 4 ms won 9 of 9 alternating runs against 2 ms on the bench shape (5-30% rows/s,
 * bench/results/controlplane.json), 8 ms was no better than 4. The wait ends as soon as every
 * recent rank is in, so a quiet rank's batches wait no longer. */
#define GATHER_MAX_US 4000u
#define RECENT_KEYS 256

typedef struct gmark {
    const char *inst;
    char *lit; /* escaped literal */
    uint32_t rank;
    uint64_t seq;  /* mark as locked */
    uint64_t high; /* mark after the group */
} gmark_t;

/* Late joiners (see tdm_cp_dbi_ingest_group): the marks of worker `me`'s recently committed ranks
 * that have no batch in the group are locked with it, so their next batches can still join while
 * the transfer_events COPY is open. Defined in db_ingest.c. */
#define JOIN_MAX_KEYS 32
typedef struct join_key {
    char inst[TDM_JSON_HEX64_LEN + 1];
    uint32_t rank;
} join_key_t;
size_t tdm_cp_dbi_join_keys_locked(tdm_cp_db_t *db, int me, tdm_cp_job_t *const *jobs, size_t n,
                                   join_key_t *ret_keys, size_t *ret_want);
size_t tdm_cp_dbi_join_locked(tdm_cp_db_t *db, int me, gmark_t *marks, size_t nm, uint8_t *has,
                              tdm_cp_job_t **jobs, size_t n);

uint64_t tdm_cp_dbi_batch_key(const tdm_cp_batch_t *b);

void tdm_cp_dbi_cond_wait_us(jobq_t *q, uint64_t us);

void tdm_cp_dbi_conn_lost(qworker_t *w, PGconn **conn, const char *app, const char *why);

PGconn *tdm_cp_dbi_db_connect(tdm_cp_db_t *db, const char *app);

ingest_rc_t tdm_cp_dbi_ingest_batch(PGconn *conn, const tdm_cp_batch_t *b, char *err,
                                    size_t err_len);
ingest_rc_t tdm_cp_dbi_ingest_group(tdm_cp_db_t *db, int me, PGconn *conn, tdm_cp_job_t **jobs,
                                    size_t *np, int *accepted, int *ret_committed, char *err,
                                    size_t err_len);

void *tdm_cp_dbi_ingest_main(void *arg);
void tdm_cp_dbi_ingest_shutdown(tdm_cp_db_t *db);

tdm_cp_job_t *tdm_cp_dbi_jobq_pop_locked(jobq_t *q);
int tdm_cp_dbi_keymap_worker_locked(tdm_cp_db_t *db, uint64_t key);

size_t tdm_cp_dbi_mark_find(const gmark_t *marks, size_t nm, const tdm_cp_batch_t *b);
void tdm_cp_dbi_pending_stats_locked(tdm_cp_db_t *db);

void *tdm_cp_dbi_query_main(void *arg);

void tdm_cp_dbi_reply(tdm_cp_db_t *db, tdm_cp_job_t *job);

void tdm_cp_dbi_set_err(tdm_cp_job_t *job, tdm_status_t st, const char *msg);

void tdm_cp_dbi_update_up(tdm_cp_db_t *db);

void tdm_cp_dbi_wake_all(tdm_cp_db_t *db);
size_t tdm_cp_dbi_join_keys_locked(tdm_cp_db_t *db, int me, tdm_cp_job_t *const *jobs, size_t n,
                                   join_key_t *ret_keys, size_t *ret_want);
size_t tdm_cp_dbi_join_locked(tdm_cp_db_t *db, int me, gmark_t *marks, size_t nm, uint8_t *has,
                              tdm_cp_job_t **jobs, size_t n);

void tdm_cp_dbi_jobq_init(jobq_t *q);

void tdm_cp_dbi_jobq_destroy(jobq_t *q);
void tdm_cp_dbi_jobq_push_locked(jobq_t *q, tdm_cp_job_t *job);
/* The ingest threads' per-worker state (recent commits, the key → worker map). */
void tdm_cp_dbi_ingest_state_init(tdm_cp_db_t *db);

#endif
