/*
 * dataplane/tp/comm.h — the collective interface of a worker group and its recorder (I2).
 *
 * Two backends fill tdm_comm_ops_t: NCCL on GPU (one rank per GPU) and shared memory on CPU
 * (dataplane/tp/shm.c). Callers never call a backend directly: tdm_comm_* wrap every call in the
 * recorder, which marks entry (in_coll{op, seq, since}) and exit (coll_seq++, coll_hash updated
 * with op, bytes and group) in the rank's slot of the progress page. So a rank stuck in a
 * collective is visible from outside while it is stuck.
 *
 * All-reduce sums float32 partials in rank order with the fixed tree of kernels/backend.h
 * (tdm_reduce_tree_combine), so TP=N reproduces TP=1 bit for bit (docs/design.md §9).
 * Like NCCL, collectives must be called in the same order with the same op and size on every
 * rank; a mismatch is not "fixed" here — it hangs (as NCCL would) until the group is aborted,
 * and the detectors find it from the recorder's data.
 */
#ifndef TDM_TP_COMM_H
#define TDM_TP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/progress.h>
#include <tdm/status.h>

typedef struct tdm_comm_ops {
    const char *name;
    tdm_status_t (*allreduce_f32)(void *impl, float *buf, size_t n);
    tdm_status_t (*broadcast)(void *impl, void *buf, size_t bytes, uint32_t root);
    /* out: n_ranks * bytes, rank r's contribution at r * bytes */
    tdm_status_t (*allgather)(void *impl, const void *in, void *out, size_t bytes);
    tdm_status_t (*barrier)(void *impl);
    void (*destroy)(void *impl);
} tdm_comm_ops_t;

typedef struct tdm_comm {
    const tdm_comm_ops_t *ops;
    void *impl;
    uint32_t rank, size;
    uint32_t group;            /* communicator id folded into coll_hash */
    tdm_progress_page_t *page; /* may be NULL: then nothing is recorded */
    /* fault hook: when set and returns 1, the collective is skipped (rank_skip_collective) */
    int (*skip_fault)(void *ctx, tdm_coll_op_t op, uint64_t seq);
    void *fault_ctx;
} tdm_comm_t;

tdm_status_t tdm_comm_allreduce_f32(tdm_comm_t *c, float *buf, size_t n);
tdm_status_t tdm_comm_broadcast(tdm_comm_t *c, void *buf, size_t bytes, uint32_t root);
tdm_status_t tdm_comm_allgather(tdm_comm_t *c, const void *in, void *out, size_t bytes);
tdm_status_t tdm_comm_barrier(tdm_comm_t *c);
void tdm_comm_destroy(tdm_comm_t *c);

/* The rolling hash of one collective (op, bytes, group) folded into coll_hash. */
uint64_t tdm_comm_hash_step(uint64_t h, tdm_coll_op_t op, uint64_t bytes, uint32_t group);

/* Publish the end of one loop iteration into the rank's slot (I2) — iter, path, plan hash, the
 * queue counters, and the progress stamp that /health reads (I8). */
void tdm_comm_record_iter(tdm_comm_t *c, uint64_t iter, tdm_path_t path, uint64_t plan_hash,
                          uint32_t bs, uint32_t waiting, uint32_t running, uint64_t now_us);
/* Publish the queue counters of the iteration that starts now (rank 0, before its stall points
 * and collectives), leaving iter, path, plan_hash and progress_us at the last completed one. So
 * a loop stuck in the first busy iteration after idle ones still shows the work it holds: WEDGE
 * (docs/design.md §4) and /health (I8) judge "no progress with work pending" from these counters.
 * `taken`: requests the scheduler had taken from its inbox when it counted them, published in
 * the same write, so that requests still in the inbox are counted exactly once
 * (tdm_progress_queued) — also while the loop hangs between iterations. */
void tdm_comm_record_pending(tdm_comm_t *c, uint32_t waiting, uint32_t running, uint64_t taken);

/*
 * I2 for a GPU rank (docs/design.md §3): its collectives run inside CUDA graphs, so the recorder
 * cannot wrap each call. Before the launch, gpu_begin announces the step's collectives (g's
 * runs; group, bases and since are filled here) and zeroes the slot's mark word, which the device
 * then writes around each collective (include/tdm/progress.h gpu_mark); tdm_progress_read folds
 * the two into in_coll / coll_seq / coll_hash while the step runs. gpu_end, after the wait,
 * commits the fold (the collectives the device marked done) and clears the step.
 */
void tdm_comm_gpu_begin(tdm_comm_t *c, const tdm_gpu_step_t *g, uint64_t now_us);
void tdm_comm_gpu_end(tdm_comm_t *c);
/* The slot's mark word (the page is mapped for the device by dataplane/tp/gpu.c); NULL without
 * a page. */
uint32_t *tdm_comm_gpu_mark(tdm_comm_t *c);

/*
 * Shared-memory backend for CPU ranks (separate processes or threads on one host).
 * The region holds per-rank arrival counters, announcements (op, bytes, seq) and one data slot
 * per rank. Waits spin briefly (bounded, so two cores are not starved) and then sleep on a futex;
 * they return TDM_ERR_ABORTED once the page's abort word is set and TDM_ERR_PEER when a peer
 * process is gone (checked every `peer_check_ms`).
 */
typedef struct tdm_shm_comm_cfg {
    uint32_t n_ranks;
    size_t slot_bytes;      /* per-rank data slot; larger collectives are chunked */
    uint32_t spin_iters;    /* bounded spin before sleeping (default 2000) */
    uint32_t peer_check_ms; /* default 100 */
} tdm_shm_comm_cfg_t;

size_t tdm_shm_comm_region_size(const tdm_shm_comm_cfg_t *cfg);
/* Initialise a zeroed shared region (once, by the launcher). */
tdm_status_t tdm_shm_comm_region_init(void *region, const tdm_shm_comm_cfg_t *cfg);
/* Attach rank `rank` to an initialised region; `page` supplies abort word, pids and the recorder
 * slots. The comm does not own the region or the page. */
tdm_status_t tdm_shm_comm_init(void *region, uint32_t rank, tdm_progress_page_t *page,
                               uint32_t group, tdm_comm_t *ret);

#endif
