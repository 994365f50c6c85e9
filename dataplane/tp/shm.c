/*
 * shm.c — the CPU collective backend over one shared-memory region.
 *
 * Every collective is a sequence of chunks; every chunk two phases: A (my data is in my slot)
 * and B (I am done reading everyone's slots, so slots may be reused). Each rank counts the phases
 * it has completed in arrive[rank]; a rank waits for every arrive[q] to reach its own count. Waits
 * spin a bounded number of times, then sleep on a futex that every arrival bumps and wakes, and
 * wake up every peer_check_ms to look at the abort word and at peer processes. At the first chunk
 * the ranks' announcements (op, bytes, seq) are compared: a mismatch is logged once and then
 * waited on forever (until abort), which is what NCCL does and what the detectors must catch.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/tp/comm.h"
#include "kernels/backend.h"

#define SHM_MAGIC 0x4d485354u /* "TSHM" */

typedef struct shm_rank {
    _Alignas(64) _Atomic uint64_t arrive;
    _Atomic uint64_t ann_seq;
    _Atomic uint64_t ann_bytes;
    _Atomic uint32_t ann_op;
} shm_rank_t;

typedef struct shm_hdr {
    uint32_t magic;
    uint32_t n_ranks;
    uint32_t spin_iters;
    uint32_t peer_check_ms;
    uint64_t slot_bytes;
    uint64_t data_off;
    _Alignas(64) _Atomic uint32_t futex_gen;
    shm_rank_t rank[TDM_PROGRESS_MAX_RANKS];
} shm_hdr_t;

typedef struct shm_comm {
    shm_hdr_t *h;
    uint8_t *data;
    uint32_t rank, n;
    uint64_t seq;
    tdm_progress_page_t *page;
    int mismatch_logged;
} shm_comm_t;

size_t tdm_shm_comm_region_size(const tdm_shm_comm_cfg_t *cfg)
{
    size_t slot = (cfg->slot_bytes + 63) & ~(size_t)63;
    size_t off = (sizeof(shm_hdr_t) + 63) & ~(size_t)63;
    return off + slot * cfg->n_ranks;
}

tdm_status_t tdm_shm_comm_region_init(void *region, const tdm_shm_comm_cfg_t *cfg)
{
    if (!region || cfg->n_ranks == 0 || cfg->n_ranks > TDM_PROGRESS_MAX_RANKS ||
        cfg->slot_bytes < 64)
        return TDM_ERR_INVAL;
    shm_hdr_t *h = region;
    memset(h, 0, sizeof(*h));
    h->n_ranks = cfg->n_ranks;
    h->spin_iters = cfg->spin_iters ? cfg->spin_iters : 2000;
    h->peer_check_ms = cfg->peer_check_ms ? cfg->peer_check_ms : 100;
    h->slot_bytes = cfg->slot_bytes & ~(size_t)63;
    h->data_off = (sizeof(shm_hdr_t) + 63) & ~(size_t)63;
    atomic_thread_fence(memory_order_release);
    h->magic = SHM_MAGIC;
    return TDM_OK;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void arrive(shm_comm_t *s)
{
    atomic_fetch_add_explicit(&s->h->rank[s->rank].arrive, 1, memory_order_acq_rel);
    atomic_fetch_add_explicit(&s->h->futex_gen, 1, memory_order_acq_rel);
    futex_wake_all(&s->h->futex_gen);
}

/* Returns the first rank whose process is gone, or -1. */
static int dead_peer(shm_comm_t *s)
{
    if (!s->page)
        return -1;
    for (uint32_t q = 0; q < s->n; q++) {
        int32_t pid = s->page->slot[q].rec.pid;
        if (q != s->rank && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
            return (int)q;
    }
    return -1;
}

static int all_arrived(shm_comm_t *s, uint64_t target)
{
    for (uint32_t q = 0; q < s->n; q++)
        if (atomic_load_explicit(&s->h->rank[q].arrive, memory_order_acquire) < target)
            return 0;
    return 1;
}

static tdm_status_t wait_until(shm_comm_t *s, uint64_t target, int forever)
{
    uint64_t last_check = tdm_time_mono_us();
    for (uint32_t spin = 0;; spin++) {
        uint32_t gen = atomic_load_explicit(&s->h->futex_gen, memory_order_acquire);
        if (!forever && all_arrived(s, target))
            return TDM_OK;
        if (s->page && atomic_load_explicit(&s->page->abort, memory_order_acquire))
            return TDM_ERR_ABORTED;
        if (spin < s->h->spin_iters) {
            cpu_relax();
            continue;
        }
        futex_wait(&s->h->futex_gen, gen, s->h->peer_check_ms);
        /* an abort outranks a dead peer: peers exit once the group is aborted */
        if (s->page && atomic_load_explicit(&s->page->abort, memory_order_acquire))
            return TDM_ERR_ABORTED;
        uint64_t now = tdm_time_mono_us();
        if (now - last_check >= (uint64_t)s->h->peer_check_ms * 1000u) {
            last_check = now;
            int dead = dead_peer(s);
            if (dead >= 0) {
                uint32_t zero = 0;
                atomic_compare_exchange_strong(&s->page->dead_rank_plus1, &zero,
                                               (uint32_t)dead + 1);
                return TDM_ERR_PEER;
            }
        }
    }
}

/* One phase: arrive, then wait for everyone. */
static tdm_status_t phase(shm_comm_t *s)
{
    arrive(s);
    return wait_until(s, atomic_load(&s->h->rank[s->rank].arrive), 0);
}

static void announce(shm_comm_t *s, tdm_coll_op_t op, uint64_t bytes)
{
    shm_rank_t *r = &s->h->rank[s->rank];
    atomic_store_explicit(&r->ann_op, op, memory_order_relaxed);
    atomic_store_explicit(&r->ann_bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&r->ann_seq, s->seq, memory_order_release);
}

/* After phase A of a collective's first chunk every rank has announced this seq. */
static tdm_status_t check_match(shm_comm_t *s, tdm_coll_op_t op, uint64_t bytes)
{
    for (uint32_t q = 0; q < s->n; q++) {
        shm_rank_t *r = &s->h->rank[q];
        uint64_t qseq = atomic_load_explicit(&r->ann_seq, memory_order_acquire);
        uint32_t qop = atomic_load_explicit(&r->ann_op, memory_order_relaxed);
        uint64_t qbytes = atomic_load_explicit(&r->ann_bytes, memory_order_relaxed);
        if (qseq != s->seq || qop != (uint32_t)op || qbytes != bytes) {
            if (!s->mismatch_logged) {
                s->mismatch_logged = 1;
                tdm_warn(TDM_SUB_TP,
                         "msg=\"collective mismatch: waiting like NCCL would\" rank=%u seq=%llu "
                         "op=%s bytes=%llu peer=%u peer_seq=%llu peer_op=%s peer_bytes=%llu",
                         s->rank, (unsigned long long)s->seq, tdm_coll_op_name(op),
                         (unsigned long long)bytes, q, (unsigned long long)qseq,
                         tdm_coll_op_name((tdm_coll_op_t)qop), (unsigned long long)qbytes);
            }
            return wait_until(s, 0, 1); /* returns only on abort or a dead peer */
        }
    }
    return TDM_OK;
}

static uint8_t *slot(shm_comm_t *s, uint32_t q)
{
    return s->data + (size_t)q * s->h->slot_bytes;
}

static tdm_status_t shm_allreduce_f32(void *impl, float *buf, size_t n)
{
    shm_comm_t *s = impl;
    size_t per = s->h->slot_bytes / sizeof(float);
    const float *parts[TDM_PROGRESS_MAX_RANKS];
    tdm_status_t st;
    s->seq++;
    announce(s, TDM_COLL_ALLREDUCE, n * sizeof(float));
    size_t off = 0;
    do {
        size_t cnt = n - off < per ? n - off : per;
        memcpy(slot(s, s->rank), buf + off, cnt * sizeof(float));
        TDM_TRY(phase(s));
        if (off == 0)
            TDM_TRY(check_match(s, TDM_COLL_ALLREDUCE, n * sizeof(float)));
        for (uint32_t q = 0; q < s->n; q++)
            parts[q] = (const float *)slot(s, q);
        tdm_reduce_tree_combine(parts, s->n, buf + off, cnt);
        st = phase(s);
        if (st != TDM_OK)
            return st;
        off += cnt;
    } while (off < n);
    return TDM_OK;
}

static tdm_status_t shm_broadcast(void *impl, void *buf, size_t bytes, uint32_t root)
{
    shm_comm_t *s = impl;
    size_t per = s->h->slot_bytes, off = 0;
    s->seq++;
    announce(s, TDM_COLL_BROADCAST, bytes);
    do {
        size_t cnt = bytes - off < per ? bytes - off : per;
        if (s->rank == root)
            memcpy(slot(s, root), (uint8_t *)buf + off, cnt);
        TDM_TRY(phase(s));
        if (off == 0)
            TDM_TRY(check_match(s, TDM_COLL_BROADCAST, bytes));
        if (s->rank != root)
            memcpy((uint8_t *)buf + off, slot(s, root), cnt);
        TDM_TRY(phase(s));
        off += cnt;
    } while (off < bytes);
    return TDM_OK;
}

static tdm_status_t shm_allgather(void *impl, const void *in, void *out, size_t bytes)
{
    shm_comm_t *s = impl;
    size_t per = s->h->slot_bytes, off = 0;
    s->seq++;
    announce(s, TDM_COLL_ALLGATHER, bytes);
    do {
        size_t cnt = bytes - off < per ? bytes - off : per;
        memcpy(slot(s, s->rank), (const uint8_t *)in + off, cnt);
        TDM_TRY(phase(s));
        if (off == 0)
            TDM_TRY(check_match(s, TDM_COLL_ALLGATHER, bytes));
        for (uint32_t q = 0; q < s->n; q++)
            memcpy((uint8_t *)out + (size_t)q * bytes + off, slot(s, q), cnt);
        TDM_TRY(phase(s));
        off += cnt;
    } while (off < bytes);
    return TDM_OK;
}

static tdm_status_t shm_barrier(void *impl)
{
    shm_comm_t *s = impl;
    s->seq++;
    announce(s, TDM_COLL_BARRIER, 0);
    TDM_TRY(phase(s));
    TDM_TRY(check_match(s, TDM_COLL_BARRIER, 0));
    return phase(s);
}

static void shm_destroy(void *impl)
{
    tdm_free(impl);
}

static const tdm_comm_ops_t shm_ops = {
    .name = "shm",
    .allreduce_f32 = shm_allreduce_f32,
    .broadcast = shm_broadcast,
    .allgather = shm_allgather,
    .barrier = shm_barrier,
    .destroy = shm_destroy,
};

tdm_status_t tdm_shm_comm_init(void *region, uint32_t rank, tdm_progress_page_t *page,
                               uint32_t group, tdm_comm_t *ret)
{
    shm_hdr_t *h = region;
    if (!h || h->magic != SHM_MAGIC || rank >= h->n_ranks)
        return TDM_ERR_INVAL;
    if (page && page->n_ranks != h->n_ranks)
        return TDM_ERR_INVAL;
    shm_comm_t *s = tdm_calloc(1, sizeof(*s));
    s->h = h;
    s->data = (uint8_t *)region + h->data_off;
    s->rank = rank;
    s->n = h->n_ranks;
    s->page = page;
    /* resume after the counts this rank already has (a fresh region starts at 0) */
    s->seq = atomic_load(&h->rank[rank].ann_seq);
    if (page) {
        tdm_progress_slot_t *sl = &page->slot[rank];
        tdm_progress_write_begin(sl);
        sl->rec.pid = (int32_t)getpid();
        sl->rec.alive = 1;
        tdm_progress_write_end(sl);
    }
    memset(ret, 0, sizeof(*ret));
    ret->ops = &shm_ops;
    ret->impl = s;
    ret->rank = rank;
    ret->size = h->n_ranks;
    ret->group = group;
    ret->page = page;
    return TDM_OK;
}
