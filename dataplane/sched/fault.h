/*
 * dataplane/sched/fault.h — the run-time fault points of the serving loop (docs/contracts.md §e).
 *
 * One table per worker group, in the group's shared area (dataplane/worker/worker.h): rank 0's
 * /admin/faults arms an entry, and every rank's executor checks it at each iteration, so a fault
 * can be aimed at any rank from the leader. The HTTP layer arms faults only when
 * --enable-fault-injection is set and the admin token matches; this module does not check that.
 *
 * Points implemented here:
 *   rank_idle_path        the rank treats BATCH plans as IDLE: no forward, no collectives (so its
 *                         peers wait in the next all-reduce; the recorder names rank and op).
 *                         Followers only: arming it for rank 0 is TDM_ERR_INVAL, because rank 0
 *                         must sample what it scheduled.
 *   rank_skip_collective  the rank's tensor collectives return at once without communicating
 *                         (through tdm_comm_t.skip_fault).
 *   stall_loop            the rank's executor sleeps duration_ms before the iteration.
 * The transfer points (PD, rank 0's transfer engine; include/tdm/xfer.h cfg.fault; after_iter
 * compares with rank 0's loop iteration; rank must be 0 in this build):
 *   flip_kv_bits          decode: before tdm_xfer_decode_commit verifies a room, flip the top
 *                         exponent bit of max(1, duration_ms) random K/V values inside the
 *                         prompt's tokens of the room's pages (after the write completed).
 *   stall_transfer        the transfer thread stops progressing rooms for duration_ms (fires
 *                         only while rooms are moving).
 *   slow_host_copy        prefill: each of the room's puts is issued duration_ms late (the
 *                         transfer thread waits before issuing a room).
 *   drop_abort_handler    prefill: an ABORT frame is dropped (no flush, no ABORT_ACK): decode's
 *                         ACK timeout fires (abort_unacked, corruption_risk).
 *   kill_thread{thread}   the named engine thread (bootstrap, receive, transfer) exits; its
 *                         heartbeat goes stale and /health answers 503 naming it.
 * The HiCache points (include/tdm/hicache.h; rank 0, the executor's host tier):
 *   host_layout_fp8_formula  the host pool's descriptor by the fp8 formula: the worker refuses to
 *                         start naming the sub-buffer (armed at start only: --fault-at-start;
 *                         with the test-only --hicache-force-layout it starts and copies truncate).
 *   skip_layer_gate       tdm_kv_layer_acquire returns without waiting for the layer's load
 *                         (one count per layer read of a batch with a load).
 *   slow_host_copy        also: the copy thread sleeps duration_ms before each layer of a load.
 *   flip_host_bits        one bit of a host page flips before a load reads it.
 * Each entry is {rank, count, after_iter, duration_ms}: it fires on `rank` at iterations >=
 * after_iter, `count` times (0 = until disarmed). Arming replaces the entry; count 0 with
 * disarm clears it.
 *
 * Threading: arm/disarm from any thread of any rank; tdm_fault_fire from the owning rank's loop.
 * All fields are atomics; an entry is published by bumping its generation last.
 */
#ifndef TDM_SCHED_FAULT_H
#define TDM_SCHED_FAULT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

typedef enum tdm_fault_point {
    TDM_FAULT_RANK_IDLE_PATH = 0,
    TDM_FAULT_RANK_SKIP_COLLECTIVE,
    TDM_FAULT_STALL_LOOP,
    TDM_FAULT_SLOW_HOST_COPY,
    TDM_FAULT_DROP_ABORT_HANDLER,
    TDM_FAULT_KILL_THREAD,
    TDM_FAULT_STALL_TRANSFER,
    TDM_FAULT_FLIP_KV_BITS,
    TDM_FAULT_HOST_LAYOUT_FP8_FORMULA,
    TDM_FAULT_SKIP_LAYER_GATE,
    TDM_FAULT_FLIP_HOST_BITS,
    TDM_FAULT_MAX
} tdm_fault_point_t;

/* "rank_idle_path", ...; NULL beyond the enum. */
const char *tdm_fault_point_name(tdm_fault_point_t f);
/* Name → point; TDM_ERR_NOTFOUND for an unknown name. */
tdm_status_t tdm_fault_point_parse(const char *name, tdm_fault_point_t *ret);

typedef struct tdm_fault_entry {
    _Atomic uint32_t armed;
    _Atomic uint32_t rank;
    _Atomic int64_t remaining; /* fires left; < 0 = unlimited */
    _Atomic uint64_t after_iter;
    _Atomic uint32_t duration_ms;
    _Atomic uint64_t fired;  /* times fired since armed (for /admin and tests) */
    _Atomic uint32_t thread; /* kill_thread: a tdm_hb_thread_t */
} tdm_fault_entry_t;

typedef struct tdm_fault_table {
    tdm_fault_entry_t e[TDM_FAULT_MAX];
} tdm_fault_table_t;

typedef struct tdm_fault_spec {
    uint32_t rank;
    uint32_t count; /* 0 = until disarmed */
    uint64_t after_iter;
    uint32_t duration_ms;
    uint32_t thread; /* kill_thread: TDM_HB_BOOTSTRAP, TDM_HB_RECV or TDM_HB_TRANSFER */
    int at_start;    /* armed by --fault-at-start before the pools are built */
} tdm_fault_spec_t;

/* Arm (replacing any previous arming). TDM_ERR_RANGE for rank >= n_ranks; TDM_ERR_INVAL for
 * rank_idle_path on rank 0, a transfer point on a rank other than 0, or kill_thread of a thread
 * that is not the transfer engine's; TDM_ERR_UNSUPPORTED for points this build does not
 * implement at run time (host_layout_fp8_formula: --fault-at-start only). */
tdm_status_t tdm_fault_arm(tdm_fault_table_t *t, uint32_t n_ranks, tdm_fault_point_t f,
                           const tdm_fault_spec_t *spec, char *err, size_t err_len);
void tdm_fault_disarm(tdm_fault_table_t *t, tdm_fault_point_t f);
/* Whether the fault fires now on `rank` at iteration `iter`; consumes one count. When it fires,
 * *ret_duration_ms (may be NULL) gets the entry's duration. */
int tdm_fault_fire(tdm_fault_table_t *t, tdm_fault_point_t f, uint32_t rank, uint64_t iter,
                   uint32_t *ret_duration_ms);
/* tdm_fault_fire for kill_thread: fires only when the armed thread is `thread`. */
int tdm_fault_fire_thread(tdm_fault_table_t *t, uint32_t rank, uint64_t iter, uint32_t thread);
/* Snapshot for /admin: armed, rank, remaining, after_iter, duration_ms, fired. */
void tdm_fault_get(const tdm_fault_table_t *t, tdm_fault_point_t f, int *ret_armed,
                   tdm_fault_spec_t *ret_spec, uint64_t *ret_fired);

#endif
