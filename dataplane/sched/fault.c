/*
 * fault.c — the fault table of dataplane/sched/fault.h: arming from rank 0's /admin, firing in
 * every rank's loop. Entries live in shared memory, so every field is an atomic and an arming is
 * visible to the other processes once `armed` is stored (release) after the fields.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/progress.h>

#include "dataplane/sched/fault.h"

static const char *const fault_names[] = {
    "rank_idle_path",          "rank_skip_collective", "stall_loop",     "slow_host_copy",
    "drop_abort_handler",      "kill_thread",          "stall_transfer", "flip_kv_bits",
    "host_layout_fp8_formula", "skip_layer_gate",      "flip_host_bits",
};
_Static_assert(sizeof(fault_names) / sizeof(fault_names[0]) == TDM_FAULT_MAX,
               "one name per fault point");

const char *tdm_fault_point_name(tdm_fault_point_t f)
{
    return (unsigned)f < TDM_FAULT_MAX ? fault_names[f] : NULL;
}

tdm_status_t tdm_fault_point_parse(const char *name, tdm_fault_point_t *ret)
{
    for (int i = 0; name && i < TDM_FAULT_MAX; i++)
        if (!strcmp(name, fault_names[i])) {
            *ret = (tdm_fault_point_t)i;
            return TDM_OK;
        }
    return TDM_ERR_NOTFOUND;
}

tdm_status_t tdm_fault_arm(tdm_fault_table_t *t, uint32_t n_ranks, tdm_fault_point_t f,
                           const tdm_fault_spec_t *spec, char *err, size_t err_len)
{
    if (!t || !spec || (unsigned)f >= TDM_FAULT_MAX) {
        snprintf(err, err_len, "unknown fault point");
        return TDM_ERR_INVAL;
    }
    if (f == TDM_FAULT_HOST_LAYOUT_FP8_FORMULA && !spec->at_start) {
        snprintf(err, err_len,
                 "fault %s acts when the host pool is built: arm it with --fault-at-start",
                 fault_names[f]);
        return TDM_ERR_UNSUPPORTED;
    }
    if (spec->rank >= n_ranks) {
        snprintf(err, err_len, "fault %s: rank %u is outside the group (tp size %u)",
                 fault_names[f], spec->rank, n_ranks);
        return TDM_ERR_RANGE;
    }
    if (f == TDM_FAULT_RANK_IDLE_PATH && spec->rank == 0) {
        snprintf(err, err_len,
                 "fault rank_idle_path needs a follower rank (1..%u): rank 0 "
                 "samples what it schedules",
                 n_ranks - 1);
        return TDM_ERR_INVAL;
    }
    if (f >= TDM_FAULT_SLOW_HOST_COPY && f != TDM_FAULT_FLIP_HOST_BITS && spec->rank != 0) {
        snprintf(err, err_len,
                 "fault %s: rank must be 0 (the transfer engine runs in rank 0 in this build)",
                 fault_names[f]);
        return TDM_ERR_INVAL;
    }
    if (f == TDM_FAULT_KILL_THREAD && spec->thread != TDM_HB_BOOTSTRAP &&
        spec->thread != TDM_HB_RECV && spec->thread != TDM_HB_TRANSFER) {
        snprintf(err, err_len,
                 "fault kill_thread: thread must be one of the transfer engine's (bootstrap, "
                 "recv, transfer)");
        return TDM_ERR_INVAL;
    }
    tdm_fault_entry_t *e = &t->e[f];
    atomic_store_explicit(&e->armed, 0, memory_order_release);
    atomic_store_explicit(&e->thread, spec->thread, memory_order_relaxed);
    atomic_store_explicit(&e->rank, spec->rank, memory_order_relaxed);
    atomic_store_explicit(&e->remaining, spec->count ? (int64_t)spec->count : -1,
                          memory_order_relaxed);
    atomic_store_explicit(&e->after_iter, spec->after_iter, memory_order_relaxed);
    atomic_store_explicit(&e->duration_ms, spec->duration_ms, memory_order_relaxed);
    atomic_store_explicit(&e->fired, 0, memory_order_relaxed);
    atomic_store_explicit(&e->armed, 1, memory_order_release);
    return TDM_OK;
}

void tdm_fault_disarm(tdm_fault_table_t *t, tdm_fault_point_t f)
{
    if (t && (unsigned)f < TDM_FAULT_MAX)
        atomic_store_explicit(&t->e[f].armed, 0, memory_order_release);
}

int tdm_fault_fire(tdm_fault_table_t *t, tdm_fault_point_t f, uint32_t rank, uint64_t iter,
                   uint32_t *ret_duration_ms)
{
    if (!t || (unsigned)f >= TDM_FAULT_MAX)
        return 0;
    tdm_fault_entry_t *e = &t->e[f];
    if (!atomic_load_explicit(&e->armed, memory_order_acquire) ||
        atomic_load_explicit(&e->rank, memory_order_relaxed) != rank ||
        iter < atomic_load_explicit(&e->after_iter, memory_order_relaxed))
        return 0;
    int64_t left = atomic_load_explicit(&e->remaining, memory_order_relaxed);
    for (;;) {
        if (left == 0)
            return 0;
        if (left < 0)
            break;
        if (atomic_compare_exchange_weak(&e->remaining, &left, left - 1))
            break;
    }
    atomic_fetch_add_explicit(&e->fired, 1, memory_order_relaxed);
    if (ret_duration_ms)
        *ret_duration_ms = atomic_load_explicit(&e->duration_ms, memory_order_relaxed);
    return 1;
}

int tdm_fault_fire_thread(tdm_fault_table_t *t, uint32_t rank, uint64_t iter, uint32_t thread)
{
    if (!t || !atomic_load_explicit(&t->e[TDM_FAULT_KILL_THREAD].armed, memory_order_acquire) ||
        atomic_load_explicit(&t->e[TDM_FAULT_KILL_THREAD].thread, memory_order_relaxed) != thread)
        return 0;
    return tdm_fault_fire(t, TDM_FAULT_KILL_THREAD, rank, iter, NULL);
}

void tdm_fault_get(const tdm_fault_table_t *t, tdm_fault_point_t f, int *ret_armed,
                   tdm_fault_spec_t *ret_spec, uint64_t *ret_fired)
{
    tdm_fault_entry_t *e = (tdm_fault_entry_t *)&t->e[f];
    int64_t left = atomic_load(&e->remaining);
    *ret_armed = (int)atomic_load(&e->armed);
    ret_spec->rank = atomic_load(&e->rank);
    ret_spec->count = left < 0 ? 0 : (uint32_t)left;
    ret_spec->after_iter = atomic_load(&e->after_iter);
    ret_spec->duration_ms = atomic_load(&e->duration_ms);
    *ret_fired = atomic_load(&e->fired);
}
