/*
 * db.c — the query, read and ingest threads (see db.h for the contract).
 *
 * Each thread owns its PGconn outright; the only shared state is the job queues (one mutex, one
 * condition variable each) and the atomic counters. The spool file belongs to ingest worker 0
 * alone. A batch stays in the memory queue (claimed by the worker whose group holds it) until it
 * is committed, counted as a duplicate or made durable in the spool, so a connection lost
 * mid-transaction just gives the group back to be retried: the high-water mark decides whether a
 * commit whose reply was lost already happened.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/hash.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/store/batch.h"
#include "controlplane/store/buf.h"
#include "controlplane/store/db_int.h"
#include "controlplane/store/migrate.h"
#include "controlplane/store/db_spool.h"

/* ---- jobs ---------------------------------------------------------------------------------- */

tdm_cp_job_t *tdm_cp_job_new(const char *sql, tdm_cp_job_done_fn done, void *ctx)
{
    tdm_cp_job_t *job = tdm_calloc(1, sizeof(*job));
    job->sql = sql;
    job->done = done;
    job->ctx = ctx;
    return job;
}

void tdm_cp_job_param(tdm_cp_job_t *job, const char *value)
{
    if (job->nparams >= TDM_CP_JOB_MAX_PARAMS)
        abort(); /* a programming error: the statements are ours */
    job->params[job->nparams++] = value ? tdm_strdup(value) : NULL;
}

void tdm_cp_job_free(tdm_cp_job_t *job)
{
    if (!job)
        return;
    for (int i = 0; i < job->nparams; i++)
        tdm_free(job->params[i]);
    tdm_free(job->result);
    tdm_free(job->aux);
    tdm_free(job->hist);
    tdm_cp_batch_free(job->batch);
    tdm_free(job);
}

void tdm_cp_dbi_jobq_init(jobq_t *q)
{
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    q->head = q->tail = NULL;
}

void tdm_cp_dbi_jobq_destroy(jobq_t *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}

/* Under q->mu. */
void tdm_cp_dbi_jobq_push_locked(jobq_t *q, tdm_cp_job_t *job)
{
    job->next = NULL;
    if (q->tail)
        q->tail->next = job;
    else
        q->head = job;
    q->tail = job;
}

tdm_cp_job_t *tdm_cp_dbi_jobq_pop_locked(jobq_t *q)
{
    tdm_cp_job_t *job = q->head;
    if (job) {
        q->head = job->next;
        if (!q->head)
            q->tail = NULL;
        job->next = NULL;
    }
    return job;
}

void tdm_cp_dbi_cond_wait_us(jobq_t *q, uint64_t us)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + us * 1000u;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(&q->cv, &q->mu, &ts);
}

void tdm_cp_dbi_reply(tdm_cp_db_t *db, tdm_cp_job_t *job)
{
    h2o_multithread_send_message(db->opts.reply_to, &job->msg);
}

void tdm_cp_dbi_set_err(tdm_cp_job_t *job, tdm_status_t st, const char *msg)
{
    job->st = st;
    snprintf(job->err, sizeof(job->err), "%s", msg);
    size_t n = strlen(job->err);
    while (n && (job->err[n - 1] == '\n' || job->err[n - 1] == ' '))
        job->err[--n] = '\0';
}

/* ---- connections ---------------------------------------------------------------------------- */

PGconn *tdm_cp_dbi_db_connect(tdm_cp_db_t *db, const char *app)
{
    const char *keys[] = {"dbname", "application_name", "connect_timeout", NULL};
    const char *vals[] = {db->dsn, app, "5", NULL};
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(conn) != CONNECTION_OK) {
        tdm_dbg(TDM_SUB_DB, "msg=\"connect failed\" app=%s err=\"%s\"", app, PQerrorMessage(conn));
        PQfinish(conn);
        return NULL;
    }
    PQsetNoticeProcessor(conn, tdm_log_pq_notice, NULL);
    return conn;
}

void tdm_cp_dbi_update_up(tdm_cp_db_t *db)
{
    atomic_store(&db->stats.up,
                 db->query_up && atomic_load(&db->ingest_up) == TDM_CP_DB_INGEST_CONNS);
}

/* ---- public --------------------------------------------------------------------------------- */

/* An ingest batch costs about half a MiB of short-lived buffers (the request body, the decoded
 * events, the COPY text, the queued batch, freed on the ingest thread). With glibc's dynamic
 * thresholds those come from mmap or from the top of the heap, and are handed back to the kernel
 * when freed, so every batch faulted its pages in again: ~9,000 page faults and a quarter of
 * tandemd's CPU over a 400-batch bench run (bench/results/controlplane.json). Fixed thresholds keep
 * freed memory for reuse (up to TRIM_KEEP per arena) and serve anything up to a whole group
 * (GROUP_MAX_BYTES) from the heap. Process-wide, set once, before the threads start. */
#define TRIM_KEEP (64u << 20)

static void malloc_tune(void)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, (int)GROUP_MAX_BYTES);
    mallopt(M_TRIM_THRESHOLD, (int)TRIM_KEEP);
#endif
}

tdm_status_t tdm_cp_db_start(const tdm_cp_db_opts_t *opts, tdm_cp_db_t **ret_db, char *err,
                             size_t err_len)
{
    malloc_tune();
    tdm_cp_db_t *db = tdm_calloc(1, sizeof(*db));
    db->opts = *opts;
    db->dsn = tdm_strdup(opts->dsn);
    tdm_cp_dbi_jobq_init(&db->queries);
    tdm_cp_dbi_jobq_init(&db->reads);
    tdm_cp_dbi_jobq_init(&db->ingest);
    tdm_status_t st =
        tdm_cp_spool_open(opts->spool_path, opts->spool_max_bytes, &db->spool, err, err_len);
    if (st != TDM_OK)
        goto err_free;
    if (tdm_cp_spool_records(db->spool))
        tdm_info(TDM_SUB_DB,
                 "msg=\"spool holds batches from before; replaying when the database "
                 "is up\" records=%llu",
                 (unsigned long long)tdm_cp_spool_records(db->spool));
    tdm_cp_dbi_pending_stats_locked(db);
    tdm_cp_dbi_ingest_state_init(db);
    for (int i = 0; i < 1 + TDM_CP_DB_READERS; i++) {
        qworker_t *w = &db->qw[i];
        w->db = db;
        w->primary = i == 0;
        w->idx = i;
        w->q = i == 0 ? &db->queries : &db->reads;
        if (pthread_create(&w->tid, NULL, tdm_cp_dbi_query_main, w) != 0) {
            snprintf(err, err_len, "pthread_create: %s", strerror(errno));
            st = TDM_ERR_IO;
            goto err_join;
        }
        db->nqw++;
    }
    for (int i = 0; i < TDM_CP_DB_INGEST_CONNS; i++) {
        struct iworker *iw = &db->iw[i];
        iw->db = db;
        iw->idx = i;
        if (pthread_create(&iw->tid, NULL, tdm_cp_dbi_ingest_main, iw) != 0) {
            snprintf(err, err_len, "pthread_create: %s", strerror(errno));
            st = TDM_ERR_IO;
            goto err_join;
        }
        db->niw++;
    }
    *ret_db = db;
    return TDM_OK;

err_join:
    tdm_cp_db_stop(db); /* joins the threads that started, frees the rest */
    return st;
err_free:
    tdm_cp_dbi_jobq_destroy(&db->queries);
    tdm_cp_dbi_jobq_destroy(&db->reads);
    tdm_cp_dbi_jobq_destroy(&db->ingest);
    tdm_free(db->dsn);
    tdm_free(db);
    return st;
}

void tdm_cp_db_stop(tdm_cp_db_t *db)
{
    if (!db)
        return;
    atomic_store(&db->stop, 1);
    tdm_cp_dbi_wake_all(db);
    for (int i = 0; i < db->nqw; i++)
        pthread_join(db->qw[i].tid, NULL);
    for (int i = 0; i < db->niw; i++)
        pthread_join(db->iw[i].tid, NULL);
    tdm_cp_dbi_ingest_shutdown(db);
    tdm_cp_spool_close(db->spool);
    tdm_free(db->recent);
    tdm_u64map_free(&db->keymap);
    tdm_u64map_free(&db->keyset);
    tdm_cp_dbi_jobq_destroy(&db->queries);
    tdm_cp_dbi_jobq_destroy(&db->reads);
    tdm_cp_dbi_jobq_destroy(&db->ingest);
    for (int i = 0; i < TDM_CP_DB_CACHE; i++)
        tdm_free(db->cache[i].body);
    tdm_free(db->dsn);
    tdm_free(db);
}

void tdm_cp_db_query(tdm_cp_db_t *db, tdm_cp_job_t *job)
{
    jobq_t *q = job->readonly ? &db->reads : &db->queries;
    pthread_mutex_lock(&q->mu);
    tdm_cp_dbi_jobq_push_locked(q, job);
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

tdm_status_t tdm_cp_db_ingest(tdm_cp_db_t *db, tdm_cp_job_t *job)
{
    job->cost = job->batch->blob_len + sizeof(*job) + sizeof(*job->batch);
    job->batch->enq_mono_us = tdm_time_mono_us();
    job->key = tdm_cp_dbi_batch_key(job->batch);
    job->claimed = 0;
    pthread_mutex_lock(&db->ingest.mu);
    job->worker = tdm_cp_dbi_keymap_worker_locked(db, job->key);
    if (db->spool_full && db->mem_bytes + job->cost > db->opts.mem_bound_bytes) {
        pthread_mutex_unlock(&db->ingest.mu);
        return TDM_ERR_AGAIN;
    }
    tdm_cp_dbi_jobq_push_locked(&db->ingest, job);
    db->mem_bytes += job->cost;
    atomic_store(&db->stats.mem_bytes, db->mem_bytes);
    atomic_fetch_add(&db->stats.mem_batches, 1);
    if (db->ingest.head == job)
        atomic_store(&db->stats.oldest_pending_mono_us, job->batch->enq_mono_us);
    pthread_cond_broadcast(&db->ingest.cv); /* its worker may be gathering */
    pthread_mutex_unlock(&db->ingest.mu);
    return TDM_OK;
}

const tdm_cp_db_stats_t *tdm_cp_db_stats(const tdm_cp_db_t *db)
{
    return &db->stats;
}

const char *tdm_cp_db_cache_get(tdm_cp_db_t *db, const char *key, uint64_t max_age_us)
{
    uint64_t gen = atomic_load(&db->stats.write_gen), now = tdm_time_mono_us();
    for (int i = 0; i < TDM_CP_DB_CACHE; i++)
        if (db->cache[i].body && db->cache[i].gen == gen && now - db->cache[i].at_us < max_age_us &&
            strcmp(db->cache[i].key, key) == 0)
            return db->cache[i].body;
    return NULL;
}

int tdm_cp_db_cache_claim_refresh(tdm_cp_db_t *db, const char *key, uint64_t after_us)
{
    uint64_t gen = atomic_load(&db->stats.write_gen), now = tdm_time_mono_us();
    for (int i = 0; i < TDM_CP_DB_CACHE; i++) {
        if (db->cache[i].body && db->cache[i].gen == gen && strcmp(db->cache[i].key, key) == 0) {
            if (db->cache[i].refreshing || now - db->cache[i].at_us < after_us)
                return 0;
            db->cache[i].refreshing = 1;
            return 1;
        }
    }
    return 0;
}

void tdm_cp_db_cache_put(tdm_cp_db_t *db, const char *key, uint64_t gen, const char *body)
{
    if (strlen(key) >= TDM_CP_DB_CACHE_KEY || gen != atomic_load(&db->stats.write_gen))
        return;
    int slot = 0;
    for (int i = 0; i < TDM_CP_DB_CACHE; i++) {
        if (strcmp(db->cache[i].key, key) == 0) {
            slot = i;
            break;
        }
        if (!db->cache[i].body || db->cache[i].at_us < db->cache[slot].at_us)
            slot = i;
    }
    tdm_free(db->cache[slot].body);
    snprintf(db->cache[slot].key, sizeof(db->cache[slot].key), "%s", key);
    db->cache[slot].gen = gen;
    db->cache[slot].at_us = tdm_time_mono_us();
    db->cache[slot].body = tdm_strdup(body);
    db->cache[slot].refreshing = 0;
}
