/*
 * db_ingest.c — the ingest threads: the memory queue and its spill to the spool, replay from the
 * spool, gathering and taking groups (one worker per (instance_id, rank)); see db.h.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include <tdm/hash.h>
#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/store/buf.h"
#include "controlplane/store/db_int.h"
#include "controlplane/store/migrate.h"

static int key_in_flight_locked(const tdm_cp_db_t *db, uint64_t key, int except);

void tdm_cp_dbi_pending_stats_locked(tdm_cp_db_t *db)
{
    uint64_t n = 0;
    for (tdm_cp_job_t *j = db->ingest.head; j; j = j->next)
        n++;
    atomic_store(&db->stats.mem_batches, n);
    atomic_store(&db->stats.mem_bytes, db->mem_bytes);
    uint64_t oldest = db->ingest.head ? db->ingest.head->batch->enq_mono_us : 0;
    atomic_store(&db->stats.oldest_pending_mono_us, oldest);
    atomic_store(&db->stats.spool_records, tdm_cp_spool_records(db->spool));
    atomic_store(&db->stats.spool_bytes, tdm_cp_spool_bytes(db->spool));
}

/* Move the oldest in-memory batches to the spool while memory is over its bound (or all of them
 * when `all`). Spilled jobs are returned: the batch is durable. Spilling stops at a batch that an
 * ingest worker has taken, or whose (instance_id, rank) one has in flight: the spool replays
 * before memory, so only batches older than everything in flight for their key go there (a group
 * that then fails is retried after them without reordering its key). Under ingest.mu, by ingest
 * worker 0 (or by stop, once the workers are joined). */
static void spill_locked(tdm_cp_db_t *db, int all)
{
    while (db->ingest.head && (all || db->mem_bytes > db->opts.mem_bound_bytes)) {
        tdm_cp_job_t *job = db->ingest.head;
        if (job->claimed || key_in_flight_locked(db, job->key, 0))
            break;
        tdm_status_t st = tdm_cp_spool_append(db->spool, SPOOL_TYPE_BATCH, job->batch->blob,
                                              job->batch->blob_len);
        if (st != TDM_OK) {
            db->spool_full = 1;
            break;
        }
        db->spool_full = 0;
        tdm_cp_dbi_jobq_pop_locked(&db->ingest);
        db->mem_bytes -= job->cost;
        job->st = TDM_OK;
        job->spooled = 1;
        job->acked_seq = job->batch->seq;
        atomic_fetch_add(&db->stats.batches_spooled, 1);
        tdm_cp_dbi_reply(db, job);
    }
    tdm_cp_dbi_pending_stats_locked(db);
}

static void count_rows(tdm_cp_db_t *db, const tdm_cp_batch_t *b)
{
    atomic_fetch_add(&db->stats.batches_committed, 1);
    atomic_fetch_add(&db->stats.rows_samples, b->n_samples);
    atomic_fetch_add(&db->stats.rows_tevents, b->n_tevents);
    atomic_fetch_add(&db->stats.rows_events, b->n_events);
}

/* Unlink `job` from the memory queue. Under ingest.mu. */
static void jobq_remove_locked(jobq_t *q, tdm_cp_job_t *job)
{
    tdm_cp_job_t *prev = NULL;
    for (tdm_cp_job_t *j = q->head; j; prev = j, j = j->next) {
        if (j != job)
            continue;
        if (prev)
            prev->next = j->next;
        else
            q->head = j->next;
        if (q->tail == j)
            q->tail = prev;
        j->next = NULL;
        return;
    }
}

/* Remove `job` (claimed by the calling worker) from the memory queue and tdm_cp_dbi_reply with the
 * outcome of its batch. */
static void finish_job(tdm_cp_db_t *db, tdm_cp_job_t *job, ingest_rc_t rc, const char *err)
{
    pthread_mutex_lock(&db->ingest.mu);
    jobq_remove_locked(&db->ingest, job);
    job->claimed = 0;
    db->claimed_n--;
    db->mem_bytes -= job->cost;
    tdm_cp_dbi_pending_stats_locked(db);
    pthread_cond_broadcast(&db->ingest.cv); /* another worker may wait for this key */
    pthread_mutex_unlock(&db->ingest.mu);
    job->acked_seq = job->batch->seq;
    if (rc == INGEST_OK) {
        count_rows(db, job->batch);
        job->st = TDM_OK;
    } else if (rc == INGEST_DUP) {
        atomic_fetch_add(&db->stats.batches_duplicate, 1);
        job->duplicate = 1;
        job->st = TDM_OK;
    } else {
        tdm_err(TDM_SUB_DB,
                "msg=\"batch rejected by the database\" instance=%s rank=%u "
                "seq=%llu err=\"%s\"",
                job->batch->instance_id, job->batch->rank, (unsigned long long)job->batch->seq,
                err);
        tdm_cp_dbi_set_err(job, TDM_ERR_INVAL, err);
    }
    tdm_cp_dbi_reply(db, job);
}

/* Replay the oldest spooled batch. 1: progress, 0: spool empty, -1: connection lost (why in
 * err). */
static int ingest_from_spool(tdm_cp_db_t *db, PGconn *conn, char *err, size_t err_len)
{
    uint16_t type;
    uint8_t *body;
    size_t len;
    tdm_status_t st = tdm_cp_spool_peek(db->spool, &type, &body, &len);
    if (st == TDM_ERR_NOTFOUND)
        return 0;
    if (st != TDM_OK) {
        /* logged by the spool; nothing more can be read from it: stop holding memory back */
        pthread_mutex_lock(&db->ingest.mu);
        db->spool_unreadable = 1;
        pthread_mutex_unlock(&db->ingest.mu);
        return 0;
    }
    tdm_cp_batch_t *b = NULL;
    if (type != SPOOL_TYPE_BATCH || tdm_cp_batch_decode(body, len, &b) != TDM_OK) {
        if (type != SPOOL_TYPE_BATCH)
            tdm_free(body);
        tdm_err(TDM_SUB_DB, "msg=\"spool record skipped: not a telemetry batch\" type=%u", type);
        tdm_cp_spool_advance(db->spool);
        return 1;
    }
    ingest_rc_t rc = tdm_cp_dbi_ingest_batch(conn, b, err, err_len);
    if (rc == INGEST_CONN) {
        tdm_cp_batch_free(b);
        return -1;
    }
    if (rc == INGEST_OK) {
        count_rows(db, b);
        atomic_fetch_add(&db->stats.ingest_txns, 1);
    } else if (rc == INGEST_DUP)
        atomic_fetch_add(&db->stats.batches_duplicate, 1);
    else
        tdm_err(TDM_SUB_DB,
                "msg=\"spooled batch rejected by the database\" instance=%s rank=%u "
                "seq=%llu err=\"%s\"",
                b->instance_id, b->rank, (unsigned long long)b->seq, err);
    tdm_cp_batch_free(b);
    atomic_fetch_add(&db->stats.spool_replayed, 1);
    pthread_mutex_lock(&db->ingest.mu);
    tdm_cp_spool_advance(db->spool);
    tdm_cp_dbi_pending_stats_locked(db);
    pthread_mutex_unlock(&db->ingest.mu);
    return 1;
}

/* ---- gathering a group --------------------------------------------------------------------
 * Like PostgreSQL's commit_delay: when fewer ranks have a batch in the group than sent one in the
 * last GATHER_WINDOW_US, the group waits up to GATHER_MAX_US (from when it was taken) for the
 * others — but with its transaction open and the first batches' transfer_events rows already sent,
 * so the database inserts while the stragglers are received and decoded (tdm_cp_dbi_ingest_group),
 * and one WAL flush serves them all. */

typedef struct recent {
    uint64_t hash[RECENT_KEYS], at_us[RECENT_KEYS];
    char inst[RECENT_KEYS][TDM_JSON_HEX64_LEN + 1]; /* "" when the id does not fit */
    uint32_t rank[RECENT_KEYS];
    size_t next;
} recent_t;

uint64_t tdm_cp_dbi_batch_key(const tdm_cp_batch_t *b)
{
    return tdm_hash_combine(tdm_hash_xxh3(b->instance_id, strlen(b->instance_id)), b->rank);
}

/* A set of keys (tdm/u64map.h, value 1): 1 if `key` was added, 0 if it was there already. */
static int keyset_add(tdm_u64map_t *ks, uint64_t key)
{
    if (tdm_u64map_get(ks, key))
        return 0;
    return tdm_u64map_put(ks, key, (void *)1) == TDM_OK;
}

/* Ranks that committed a batch in the last GATHER_WINDOW_US. Under ingest.mu. */
static size_t recent_ranks(const recent_t *r, uint64_t now, tdm_u64map_t *ks)
{
    tdm_u64map_clear(ks);
    for (size_t i = 0; i < RECENT_KEYS; i++)
        if (r->at_us[i] && now - r->at_us[i] < GATHER_WINDOW_US)
            keyset_add(ks, r->hash[i]);
    return ks->n;
}

static void recent_note(recent_t *r, tdm_cp_job_t *const *group, size_t n, uint64_t now)
{
    for (size_t i = 0; i < n; i++) {
        const tdm_cp_batch_t *b = group[i]->batch;
        r->hash[r->next] = group[i]->key;
        r->at_us[r->next] = now;
        r->rank[r->next] = b->rank;
        if (strlen(b->instance_id) < sizeof(r->inst[0]))
            memcpy(r->inst[r->next], b->instance_id, strlen(b->instance_id) + 1);
        else
            r->inst[r->next][0] = '\0';
        r->next = (r->next + 1) % RECENT_KEYS;
    }
}

/* Whether a worker other than `except` (1-based; 0: any) has a batch of `key` in flight (only
 * its owner can). Under ingest.mu. */
static int key_in_flight_locked(const tdm_cp_db_t *db, uint64_t key, int except)
{
    if (!db->claimed_n)
        return 0;
    for (const tdm_cp_job_t *j = db->ingest.head; j; j = j->next)
        if (j->claimed && j->claimed != except && j->key == key)
            return 1;
    return 0;
}

/* ---- taking a group -----------------------------------------------------------------------
 * TDM_CP_DB_INGEST_CONNS workers, each with its own connection, take groups from the one memory
 * queue. Every (instance_id, rank) belongs to one worker for the life of the process (assigned in
 * turn when first seen, so the ranks spread evenly): its batches commit one transaction after
 * another, in arrival order, on one connection — as with a single worker, and the rows of a rank
 * keep their insertion order on disk — and two groups in flight never contend for a mark (no lock
 * waits, no deadlock). While one worker's group waits for its WAL flush, the other's copies. */

#define KEYMAP_KEYS 49152u /* a full map sends a new key to a worker by its hash */

/* The worker (1-based) that owns `key`, assigning one on first sight. Under ingest.mu. */
int tdm_cp_dbi_keymap_worker_locked(tdm_cp_db_t *db, uint64_t key)
{
    uintptr_t w = (uintptr_t)tdm_u64map_get(&db->keymap, key);
    if (w)
        return (int)w;
    w = 1 + db->keymap_next % TDM_CP_DB_INGEST_CONNS;
    if (tdm_u64map_put(&db->keymap, key, (void *)w) != TDM_OK)
        return 1 + (int)((key >> 17) % TDM_CP_DB_INGEST_CONNS);
    db->keymap_next++;
    return (int)w;
}

/* Claim worker `me`'s group (at most GROUP_MAX_BATCHES / GROUP_MAX_BYTES of its batches) in
 * arrival order. Under ingest.mu. */
static size_t take_group_locked(tdm_cp_db_t *db, int me, tdm_cp_job_t **group)
{
    size_t n = 0, bytes = 0;
    for (tdm_cp_job_t *j = db->ingest.head; j && n < GROUP_MAX_BATCHES; j = j->next) {
        if (j->worker != me || j->claimed)
            continue;
        if (n && bytes + j->batch->blob_len > GROUP_MAX_BYTES)
            break;
        j->claimed = me;
        db->claimed_n++;
        group[n++] = j;
        bytes += j->batch->blob_len;
    }
    return n;
}

/* The recently committed ranks of worker `me` (those of recent_ranks) with no batch in jobs[0..n),
 * at most JOIN_MAX_KEYS, into ret_keys; *ret_want: how many ranks committed in the last
 * GATHER_WINDOW_US. None when the group already holds that many. Under ingest.mu. */
size_t tdm_cp_dbi_join_keys_locked(tdm_cp_db_t *db, int me, tdm_cp_job_t *const *jobs, size_t n,
                                   join_key_t *ret_keys, size_t *ret_want)
{
    const recent_t *r = &db->recent[me - 1];
    uint64_t now = tdm_time_mono_us();
    tdm_u64map_t *ks = &db->keyset;
    size_t nk = 0;
    *ret_want = recent_ranks(r, now, ks);
    tdm_u64map_clear(ks);
    for (size_t i = 0; i < n; i++)
        keyset_add(ks, jobs[i]->key);
    if (ks->n >= *ret_want)
        return 0;
    for (size_t i = 0; i < RECENT_KEYS && nk < JOIN_MAX_KEYS; i++) {
        if (!r->at_us[i] || now - r->at_us[i] >= GATHER_WINDOW_US || !r->inst[i][0])
            continue;
        if (keyset_add(ks, r->hash[i]) != 1)
            continue;
        memcpy(ret_keys[nk].inst, r->inst[i], sizeof(ret_keys[nk].inst));
        ret_keys[nk].rank = r->rank[i];
        nk++;
    }
    return nk;
}

/* Claim, in arrival order, the first queued batch of each locked key that has none in the group
 * (has[k] == 0), within GROUP_MAX_BATCHES / GROUP_MAX_BYTES, appending them to jobs; nothing while
 * the spool holds batches (they are older). Returns the new count. Under ingest.mu. */
size_t tdm_cp_dbi_join_locked(tdm_cp_db_t *db, int me, gmark_t *marks, size_t nm, uint8_t *has,
                              tdm_cp_job_t **jobs, size_t n)
{
    size_t bytes = 0;
    if (tdm_cp_spool_records(db->spool) > 0 && !db->spool_unreadable)
        return n;
    for (size_t i = 0; i < n; i++)
        bytes += jobs[i]->batch->blob_len;
    for (tdm_cp_job_t *j = db->ingest.head; j && n < GROUP_MAX_BATCHES; j = j->next) {
        if (j->worker != me || j->claimed)
            continue;
        size_t k = tdm_cp_dbi_mark_find(marks, nm, j->batch);
        if (k == nm || has[k])
            continue;
        if (bytes + j->batch->blob_len > GROUP_MAX_BYTES)
            break;
        has[k] = 1;
        j->claimed = me;
        db->claimed_n++;
        jobs[n++] = j;
        bytes += j->batch->blob_len;
    }
    return n;
}

/* Give a group back to the queue unfinished (its connection was lost). */
static void release_group(tdm_cp_db_t *db, tdm_cp_job_t *const *group, size_t n)
{
    pthread_mutex_lock(&db->ingest.mu);
    for (size_t i = 0; i < n; i++)
        group[i]->claimed = 0;
    db->claimed_n -= n;
    pthread_cond_broadcast(&db->ingest.cv);
    pthread_mutex_unlock(&db->ingest.mu);
}

void *tdm_cp_dbi_ingest_main(void *arg)
{
    struct iworker *iw = arg;
    tdm_cp_db_t *db = iw->db;
    int me = iw->idx + 1;
    PGconn *conn = NULL;
    uint64_t backoff = BACKOFF_MIN_US, next_try = 0;
    tdm_cp_job_t **group = tdm_calloc(GROUP_MAX_BATCHES, sizeof(*group));
    int *accepted = tdm_calloc(GROUP_MAX_BATCHES, sizeof(*accepted));
    char app[32];
    snprintf(app, sizeof(app), iw->idx ? "tandemd-ingest-%d" : "tandemd-ingest", iw->idx + 1);

    while (!atomic_load(&db->stop)) {
        uint64_t now = tdm_time_mono_us();
        if (!conn && now >= next_try && atomic_load(&db->stats.schema_ready)) {
            conn = tdm_cp_dbi_db_connect(db, app);
            if (conn) { /* backoff is reset by the first batch done, not by the connect: a
                         * server that takes the connection and fails every statement (disk
                         * full) is retried ever more slowly, not every 100 ms */
                atomic_fetch_add(&db->ingest_up, 1);
                tdm_info(TDM_SUB_DB, "msg=\"database connected\" conn=%s", app);
            } else {
                next_try = now + backoff;
                backoff = backoff * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : backoff * 2;
            }
            tdm_cp_dbi_update_up(db);
        }
        char err[512] = "";
        if (conn && iw->idx == 0) {
            int r = ingest_from_spool(db, conn, err, sizeof(err));
            if (r == 1) {
                backoff = BACKOFF_MIN_US;
                continue;
            }
            if (r == -1)
                goto tdm_cp_dbi_conn_lost;
        }

        pthread_mutex_lock(&db->ingest.mu);
        if (iw->idx == 0)
            spill_locked(db, 0);
        /* Memory is taken only while the spool is empty: what the spool holds is older (a batch
         * spilled just now may have its successor in memory already), and worker 0 replays it
         * first. The group stays in the queue, claimed, until it is done; the other recent ranks'
         * batches may still join it (tdm_cp_dbi_ingest_group) — the gathering wait happens there,
         * while the database inserts the first batches. */
        int older = tdm_cp_spool_records(db->spool) > 0 && !db->spool_unreadable;
        size_t n = conn && !older ? take_group_locked(db, me, group) : 0;
        /* (worker 0 goes straight back to the spool it just filled) */
        int replay = iw->idx == 0 && conn && older;
        if (!n && !replay && !atomic_load(&db->stop))
            tdm_cp_dbi_cond_wait_us(&db->ingest, conn ? 200000u : 50000u);
        pthread_mutex_unlock(&db->ingest.mu);
        if (!n)
            continue;

        int committed = 0;
        ingest_rc_t rc = tdm_cp_dbi_ingest_group(db, me, conn, group, &n, accepted, &committed, err,
                                                 sizeof(err));
        if (rc == INGEST_CONN) {
            release_group(db, group, n);
            goto tdm_cp_dbi_conn_lost;
        }
        backoff = BACKOFF_MIN_US; /* the group is done, whatever the database said of it */
        if (rc == INGEST_OK) {
            if (committed)
                atomic_fetch_add(&db->stats.ingest_txns, 1);
            pthread_mutex_lock(&db->ingest.mu);
            recent_note(&db->recent[iw->idx], group, n, tdm_time_mono_us());
            pthread_mutex_unlock(&db->ingest.mu);
            for (size_t i = 0; i < n; i++)
                finish_job(db, group[i], accepted[i] ? INGEST_OK : INGEST_DUP, "");
            continue;
        }
        /* The database refused something in the group: one transaction per batch, so only the
         * batch it refuses is rejected. */
        for (size_t i = 0; i < n; i++) {
            rc = tdm_cp_dbi_ingest_batch(conn, group[i]->batch, err, sizeof(err));
            if (rc == INGEST_CONN) {
                release_group(db, group + i, n - i);
                goto tdm_cp_dbi_conn_lost;
            }
            if (rc == INGEST_OK)
                atomic_fetch_add(&db->stats.ingest_txns, 1);
            finish_job(db, group[i], rc, err);
        }
        continue;

    tdm_cp_dbi_conn_lost:
        tdm_warn(TDM_SUB_DB, "msg=\"database connection lost\" conn=%s err=\"%s\"", app, err);
        PQfinish(conn);
        conn = NULL;
        atomic_fetch_sub(&db->ingest_up, 1);
        tdm_cp_dbi_update_up(db);
        atomic_fetch_add(&db->stats.reconnects, 1);
        next_try = tdm_time_mono_us() + backoff;
        backoff = backoff * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : backoff * 2;
    }

    if (conn) {
        atomic_fetch_sub(&db->ingest_up, 1);
        PQfinish(conn);
    }
    tdm_free(group);
    tdm_free(accepted);
    return NULL;
}

/* Shutdown, after the ingest workers are joined: what is still in memory becomes durable in the
 * spool; its senders get no tdm_cp_dbi_reply and will replay, which the marks absorb. */
void tdm_cp_dbi_ingest_shutdown(tdm_cp_db_t *db)
{
    pthread_mutex_lock(&db->ingest.mu);
    spill_locked(db, 1);
    tdm_cp_job_t *j;
    while ((j = tdm_cp_dbi_jobq_pop_locked(&db->ingest)) != NULL) {
        db->mem_bytes -= j->cost;
        tdm_cp_dbi_set_err(j, TDM_ERR_ABORTED, "shutting down");
        tdm_cp_dbi_reply(db, j);
    }
    tdm_cp_dbi_pending_stats_locked(db);
    pthread_mutex_unlock(&db->ingest.mu);
}

void tdm_cp_dbi_wake_all(tdm_cp_db_t *db)
{
    jobq_t *qs[3] = {&db->queries, &db->reads, &db->ingest};
    for (int i = 0; i < 3; i++) {
        pthread_mutex_lock(&qs[i]->mu);
        pthread_cond_broadcast(&qs[i]->cv);
        pthread_mutex_unlock(&qs[i]->mu);
    }
}

void tdm_cp_dbi_ingest_state_init(tdm_cp_db_t *db)
{
    db->recent = tdm_calloc(TDM_CP_DB_INGEST_CONNS, sizeof(*db->recent));
    /* on NOMEM the maps stay empty: keys go to workers by their hash, joins find nothing */
    (void)tdm_u64map_init(&db->keymap, KEYMAP_KEYS);
    (void)tdm_u64map_init(&db->keyset, 2 * RECENT_KEYS);
}
