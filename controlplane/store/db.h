/*
 * controlplane/store/db.h — tandemd's database side: threads, each owning one libpq connection.
 *
 * The h2o loop never touches libpq. It hands work over as jobs and gets them back, finished, as
 * h2o_multithread messages on its own receiver (`reply_to`), where job->done runs on the loop.
 *
 * - Query thread (connection "tandemd-query"): runs one parameterised statement per job and returns
 *   the first column of the first row as text (statements build their JSON in SQL), the affected
 *   row count and, on error, the SQLSTATE. On connect it applies the migrations and partition
 *   upkeep, then marks the schema ready; every second it refreshes the open-alert count for
 *   /metrics; every hour it runs partition upkeep again. While the database is down a job fails at
 *   once with TDM_ERR_DB ("unavailable"), unless job->wait is set: then it waits for the database.
 *   Every job runs here, in submission order, except those marked job->readonly.
 * - Read pool (TDM_CP_DB_READERS threads, connections "tandemd-read-N"): readonly jobs (a single
 *   SELECT with static SQL text; the read handlers set the flag), in no particular order, each
 *   statement prepared once per connection. Same down behaviour. stats.write_gen counts the jobs
 *   the query thread finished that were not readonly: a loop-side cache of a read is good only
 *   while it is unchanged.
 * - Ingest workers (TDM_CP_DB_INGEST_CONNS threads, connections "tandemd-ingest",
 *   "tandemd-ingest-2", …; COPY runs on them): take telemetry batches in arrival order, those
 *   queued (up to 256 / 16 MiB) into one transaction (group commit): lock or create the
 *   (instance_id, rank) high-water marks (of the group's ranks, and of up to 32 ranks committed in
 *   the last 20 ms that have no batch in it yet), COPY the rows of every batch whose seq is above
 *   its rank's mark (raised batch by batch, in order) — transfer_events first, and while that COPY
 *   is open, for up to 4 ms from the start, the first queued batch of each locked rank joins the
 *   group until as many ranks as committed in the last 20 ms are in (PostgreSQL's commit_delay,
 *   spent while the database inserts) — then samples and events (a few rows inline as INSERTs in
 *   the commit's query string, more by COPY), raise the marks, COMMIT: two query strings, three
 *   round trips (five with COPY); only then are the jobs returned (acked_seq).
 *   Each (instance_id, rank) belongs to one worker for the life of the process (assigned in
 *   turn when first seen), so its batches commit one transaction after another in arrival order
 *   on one connection, two groups in flight never share a mark, and while one worker's group
 *   waits for its WAL flush another's copies. A batch at or below the mark is returned as a
 *   duplicate without inserting (exactly once, docs/contracts.md §c). If the database refuses a
 * group's rows, its batches are retried one transaction each so only the offending one is rejected.
 *   stats.ingest_txns counts the committed transactions. Batches waiting in memory are bounded by
 *   mem_bound_bytes; past it worker 0 appends the oldest to the spool file (durable, so their jobs
 *   are returned as acknowledged; never a batch a group holds, nor one whose rank has a batch in
 *   flight) and replays it, before any worker takes anything newer from memory, when the database
 *   is back. Order per (instance_id, rank) is arrival order throughout.
 * Reconnects back off from 100 ms to 2 s. Counters for /metrics are atomics in tdm_cp_db_stats_t.
 */
#ifndef TDM_CP_DB_H
#define TDM_CP_DB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <h2o/multithread.h>

#include <tdm/status.h>

#include "controlplane/store/batch.h"

#define TDM_CP_JOB_MAX_PARAMS 12
#define TDM_CP_DB_READERS 3 /* read pool connections, beside the query and ingest ones */
/* Ingest workers, one connection each. 1. With late joiners a second connection (one group copies
 * while the other waits for its WAL flush) gave ~10% more rows/s on the main bench shape on this
 * 2-core host (ratio 0.77-0.82 against 0.71-0.74), but about twice the tandemd and PostgreSQL
 * CPU per batch for small batches (quiet_rank 11-12k rows/s against 15-20k): smaller groups, a
 * transaction each (bench/results/controlplane.json, note). Build with
 * -DTDM_CP_DB_INGEST_CONNS=2 to measure it again (the contract below holds for any number). */
#ifndef TDM_CP_DB_INGEST_CONNS
#define TDM_CP_DB_INGEST_CONNS 1
#endif

typedef struct tdm_cp_job tdm_cp_job_t;
typedef void (*tdm_cp_job_done_fn)(tdm_cp_job_t *job);
struct pg_result;
/* Runs on the DB thread with the statement's rows (PGRES_TUPLES_OK) instead of taking the first
 * column of the first row: sets job->result itself (rendering in C is cheaper than json_agg). */
typedef void (*tdm_cp_job_render_fn)(const struct pg_result *res, tdm_cp_job_t *job);

struct tdm_cp_job {
    h2o_multithread_message_t msg; /* the reply; must stay first */
    tdm_cp_job_t *next;
    tdm_cp_job_done_fn done;     /* runs on the loop thread; owns and frees the job */
    void *ctx;                   /* loop-side context (request link) */
    int wait;                    /* query: wait for the database instead of failing */
    int readonly;                /* query: a plain SELECT, may run on the read pool */
    tdm_cp_job_render_fn render; /* query: NULL = first column of the first row */
    /* query */
    const char *sql; /* static text */
    int nparams;
    char *params[TDM_CP_JOB_MAX_PARAMS];
    char *aux;  /* loop-side data the done callback needs (tdm_free'd with the job) */
    void *hist; /* ingest: the persisted samples for the history cache (tdm_free'd) */
    /* ingest */
    tdm_cp_batch_t *batch;
    size_t cost; /* bytes accounted against the memory bound */
    /* result */
    tdm_status_t st;
    char *result; /* first column of the first row, or NULL */
    long affected;
    char sqlstate[6];
    char err[256];
    uint64_t acked_seq;
    uint64_t key;  /* ingest: hash of (instance_id, rank) */
    int worker;    /* ingest: the worker (1-based) its (instance_id, rank) belongs to */
    int claimed;   /* ingest: the worker (1-based) whose group holds it; under the queue's mutex */
    int duplicate; /* ingest: seq was at or below the mark */
    int spooled;   /* ingest: durable in the spool, not yet in the database */
};

typedef struct tdm_cp_db_stats {
    atomic_int up;           /* the query and every ingest connection usable */
    atomic_int schema_ready; /* migrations applied this run */
    atomic_uint_fast64_t mem_batches, mem_bytes;
    atomic_uint_fast64_t spool_records, spool_bytes;
    atomic_uint_fast64_t oldest_pending_mono_us; /* 0: nothing pending */
    atomic_uint_fast64_t batches_committed, batches_duplicate, batches_spooled;
    atomic_uint_fast64_t ingest_txns;    /* ingest transactions committed (group commit) */
    atomic_uint_fast64_t spool_replayed; /* spool records taken back out of the spool file */
    atomic_uint_fast64_t write_gen;      /* non-readonly query jobs finished */
    atomic_uint_fast64_t rows_samples, rows_tevents, rows_events;
    atomic_uint_fast64_t open_alerts;
    atomic_uint_fast64_t reconnects, query_errors;
} tdm_cp_db_stats_t;

typedef struct tdm_cp_db_opts {
    const char *dsn;
    const char *spool_path;
    uint64_t mem_bound_bytes;
    uint64_t spool_max_bytes;
    int retention_days;
    h2o_multithread_receiver_t *reply_to;
} tdm_cp_db_opts_t;

typedef struct tdm_cp_db tdm_cp_db_t;

tdm_status_t tdm_cp_db_start(const tdm_cp_db_opts_t *opts, tdm_cp_db_t **ret_db, char *err,
                             size_t err_len);
/* Stop the threads. Ingest batches still in memory go to the spool; every unfinished job is
 * returned with TDM_ERR_ABORTED. The loop must still drain reply_to afterwards. */
void tdm_cp_db_stop(tdm_cp_db_t *db);

tdm_cp_job_t *tdm_cp_job_new(const char *sql, tdm_cp_job_done_fn done, void *ctx);
void tdm_cp_job_param(tdm_cp_job_t *job, const char *value); /* NULL = SQL NULL */
void tdm_cp_job_free(tdm_cp_job_t *job);

void tdm_cp_db_query(tdm_cp_db_t *db, tdm_cp_job_t *job);
/* Queue a batch (job->batch set). TDM_ERR_AGAIN when memory and spool are both full: the job is
 * not taken and the client should retry. */
tdm_status_t tdm_cp_db_ingest(tdm_cp_db_t *db, tdm_cp_job_t *job);

const tdm_cp_db_stats_t *tdm_cp_db_stats(const tdm_cp_db_t *db);

/* A small cache of readonly results for the loop thread (loop thread only; TDM_CP_DB_CACHE
 * entries, the oldest replaced). An entry answers `key` while stats.write_gen still equals the
 * `gen` read when its query was submitted and it is younger than max_age_us (which bounds how long
 * a change made behind tandemd's back stays unseen). get returns a borrowed body or NULL. */
#define TDM_CP_DB_CACHE 8
#define TDM_CP_DB_CACHE_KEY 64
const char *tdm_cp_db_cache_get(tdm_cp_db_t *db, const char *key, uint64_t max_age_us);
void tdm_cp_db_cache_put(tdm_cp_db_t *db, const char *key, uint64_t gen, const char *body);
/* 1 once per entry when the valid entry for `key` is older than after_us: the caller refreshes it
 * in the background (its put replaces the entry) while the entry keeps answering. */
int tdm_cp_db_cache_claim_refresh(tdm_cp_db_t *db, const char *key, uint64_t after_us);

#endif
