/*
 * tdm/progress.h — the per-group shared-memory progress page (invariants I2 and I8).
 *
 * One page per worker group, created by the launcher before it spawns the ranks and mapped by
 * every rank and by the leader's HTTP thread. Each rank owns one slot and is its only writer:
 * the loop publishes per-iteration records (iter, path, plan_hash, coll_seq, coll_hash) and the
 * collective recorder marks entry/exit of every collective (in_coll). Control threads publish
 * heartbeats. Readers (/health, the telemetry reporter) never block the writer: a slot is read
 * under a seqlock and retried if it changed mid-read.
 *
 * Work the loop has not seen yet: the leader's scheduler counts every request it accepts into its
 * inbox in the page's `submitted` (an atomic add by the submitting thread, the one word of the
 * page not owned by a rank's loop), and rank 0's loop publishes with each iteration's queue
 * counters how many requests it had taken from the inbox by then (`taken`). So
 * `submitted - taken` (tdm_progress_queued) is the work queued but not yet in `waiting`: a loop
 * that hangs while idle, with requests arriving after, still reads as holding work (I8, WEDGE).
 *
 * Times are CLOCK_MONOTONIC µs (tdm_time_mono_us), comparable across processes of one host.
 */
#ifndef TDM_PROGRESS_H
#define TDM_PROGRESS_H

#include <stdatomic.h>
#include <stdint.h>

#include <tdm/status.h>

#define TDM_PROGRESS_MAGIC 0x47525054u /* "TPRG" */
#define TDM_PROGRESS_VERSION 3
#define TDM_PROGRESS_MAX_RANKS 64

typedef enum tdm_path {
    TDM_PATH_IDLE = 0,  /* no batch: no collectives this iteration */
    TDM_PATH_BATCH = 1, /* a batch: forward with collectives */
    TDM_PATH_MAX
} tdm_path_t;

typedef enum tdm_coll_op {
    TDM_COLL_NONE = 0,
    TDM_COLL_ALLREDUCE = 1,
    TDM_COLL_BROADCAST = 2,
    TDM_COLL_ALLGATHER = 3,
    TDM_COLL_BARRIER = 4,
    TDM_COLL_OP_MAX
} tdm_coll_op_t;

const char *tdm_coll_op_name(tdm_coll_op_t op);
const char *tdm_path_name(tdm_path_t p);

/* Control threads that publish heartbeats (a stale one makes the worker not live, I3/I8). */
typedef enum tdm_hb_thread {
    TDM_HB_LOOP = 0,
    TDM_HB_HTTP,
    TDM_HB_BOOTSTRAP,
    TDM_HB_RECV,
    TDM_HB_TRANSFER,
    TDM_HB_REPORTER,
    TDM_HB_MAX
} tdm_hb_thread_t;

const char *tdm_hb_thread_name(tdm_hb_thread_t t);

/* A consistent copy of one rank's record. */
/* I2 on the device (docs/design.md §3): the collectives of the forward in flight on a GPU rank,
 * as runs of (op, count, bytes) in issue order, announced by the host before the launch. */
#define TDM_GPU_RUNS 4
typedef struct tdm_gpu_step {
    uint32_t n_runs; /* 0: no device step in flight */
    uint32_t group;
    uint64_t base_seq, base_hash; /* coll_seq and coll_hash before the step */
    uint64_t since_us;            /* the launch: in_coll_since of the step's collectives */
    struct {
        uint32_t op, count;
        uint64_t bytes;
    } run[TDM_GPU_RUNS];
} tdm_gpu_step_t;

typedef struct tdm_rank_record {
    uint64_t iter;
    uint32_t path; /* tdm_path_t of the last iteration */
    uint64_t plan_hash;
    uint64_t coll_seq;   /* collectives completed so far */
    uint64_t coll_hash;  /* rolling hash of (op, bytes, group) over them */
    uint32_t in_coll_op; /* tdm_coll_op_t, NONE when not inside a collective */
    uint64_t in_coll_seq;
    uint64_t in_coll_since_us;
    uint64_t progress_us; /* end of the last iteration */
    uint32_t pending;     /* requests waiting + running (rank 0's view is authoritative) */
    uint32_t bs;
    uint32_t waiting, running;
    uint64_t taken; /* rank 0: requests taken from the scheduler's inbox, ever, when the queue
                     * counters above were counted (0 on other ranks) */
    int32_t pid;
    uint32_t alive; /* 1 while the rank runs; 0 after a clean exit */
    tdm_gpu_step_t gpu;
} tdm_rank_record_t;

typedef struct tdm_progress_slot {
    _Atomic uint64_t seq; /* seqlock: odd while being written */
    tdm_rank_record_t rec;
    _Atomic uint64_t heartbeat_us[TDM_HB_MAX]; /* 0 = thread not running in this rank */
    /* written by the device inside the step's graph (host-mapped): 2k+1 entering collective k
     * of rec.gpu, 2k+2 after it, 0 before the first; tdm_progress_read folds it into in_coll,
     * coll_seq and coll_hash */
    _Alignas(64) _Atomic uint32_t gpu_mark;
    uint8_t pad[64];
} tdm_progress_slot_t;

typedef struct tdm_progress_page {
    uint32_t magic;
    uint16_t version;
    uint16_t n_ranks;
    uint64_t group_id;
    _Atomic uint32_t loaded;          /* model loaded, serving possible */
    _Atomic uint32_t draining;        /* drain requested: /ready is 503 */
    _Atomic uint32_t abort;           /* group is shutting down: collectives return ABORTED */
    _Atomic uint32_t dead_rank_plus1; /* first rank seen dead, +1; 0 = none */
    _Atomic uint64_t submitted;       /* requests accepted into the leader scheduler's inbox */
    tdm_progress_slot_t slot[];
} tdm_progress_page_t;

/* Create (launcher) or map (ranks, HTTP thread) the page at `path` (e.g. /dev/shm/tandem-<id>).
 * create truncates and initialises; open validates magic, version and size. */
tdm_status_t tdm_progress_create(const char *path, uint16_t n_ranks, uint64_t group_id,
                                 tdm_progress_page_t **ret);
tdm_status_t tdm_progress_open(const char *path, tdm_progress_page_t **ret);
/* An anonymous shared page (MAP_SHARED|MAP_ANONYMOUS) for one process or fork()ed tests. */
tdm_status_t tdm_progress_create_anon(uint16_t n_ranks, uint64_t group_id,
                                      tdm_progress_page_t **ret);
void tdm_progress_close(tdm_progress_page_t *p);
size_t tdm_progress_size(uint16_t n_ranks);

/* Writer side (only the owning rank). */
void tdm_progress_write_begin(tdm_progress_slot_t *s);
void tdm_progress_write_end(tdm_progress_slot_t *s);
void tdm_progress_heartbeat(tdm_progress_slot_t *s, tdm_hb_thread_t t, uint64_t now_us);

/* Reader side: consistent snapshot of a slot's record (spins briefly; never blocks). */
void tdm_progress_read(const tdm_progress_slot_t *s, tdm_rank_record_t *ret);
/* The device step g with its mark word folded into r: coll_seq and coll_hash advanced over the
 * collectives left, in_coll set while one is entered (the one I2 hash, tdm_hash_coll_step). */
void tdm_progress_gpu_fold(const tdm_gpu_step_t *g, uint32_t mark, tdm_rank_record_t *r);

/* The leader's submit path: one more request in the scheduler's inbox (any thread; lock-free). */
void tdm_progress_note_submitted(tdm_progress_page_t *p);
/* Requests accepted but not yet taken by rank 0's loop, given `leader`, a record of slot 0 read
 * *before* this call (so every request it counts as taken is in `submitted` too). */
uint32_t tdm_progress_queued(const tdm_progress_page_t *p, const tdm_rank_record_t *leader);

/* The /health verdict of invariant I8, computed from the page at `now_us`: healthy when every
 * rank advanced within `progress_timeout_us` or no work is pending (rank 0's waiting + running +
 * tdm_progress_queued), every running control thread's heartbeat is within `hb_timeout_us`, and
 * no rank is dead. On unhealthy, `why` names the rank and the reason (e.g. "rank 1 no progress
 * for 3.2 s (iter 812, in allreduce seq 4410 for 3.1 s)"). */
int tdm_progress_healthy(const tdm_progress_page_t *p, uint64_t now_us,
                         uint64_t progress_timeout_us, uint64_t hb_timeout_us, char *why,
                         size_t why_len);

#endif
