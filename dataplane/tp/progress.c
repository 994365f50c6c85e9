/*
 * progress.c — the shared progress page: creation/mapping, the per-slot seqlock, and the /health
 * verdict of invariant I8. The verdict is computed from the page on every call; nothing is
 * cached, and nothing here waits on the loop that writes the page. Work pending is rank 0's
 * waiting + running plus the requests the scheduler accepted that its loop has not taken yet
 * (`submitted` - `taken`), so a loop hung between iterations is judged with the work sent to it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tdm/hash.h>
#include <tdm/mapfile.h>
#include <tdm/progress.h>

static const char *const coll_op_names[] = {"none", "allreduce", "broadcast", "allgather",
                                            "barrier"};
_Static_assert(sizeof(coll_op_names) / sizeof(coll_op_names[0]) == TDM_COLL_OP_MAX,
               "coll_op_names must name every op");
static const char *const path_names[] = {"idle", "batch"};
_Static_assert(sizeof(path_names) / sizeof(path_names[0]) == TDM_PATH_MAX, "path names");
static const char *const hb_names[] = {"loop", "http", "bootstrap", "recv", "transfer", "reporter"};
_Static_assert(sizeof(hb_names) / sizeof(hb_names[0]) == TDM_HB_MAX, "heartbeat names");

const char *tdm_coll_op_name(tdm_coll_op_t op)
{
    return (unsigned)op < TDM_COLL_OP_MAX ? coll_op_names[op] : "?";
}

const char *tdm_path_name(tdm_path_t p)
{
    return (unsigned)p < TDM_PATH_MAX ? path_names[p] : "?";
}

const char *tdm_hb_thread_name(tdm_hb_thread_t t)
{
    return (unsigned)t < TDM_HB_MAX ? hb_names[t] : "?";
}

size_t tdm_progress_size(uint16_t n_ranks)
{
    size_t n = sizeof(tdm_progress_page_t) + (size_t)n_ranks * sizeof(tdm_progress_slot_t);
    return (n + 4095) & ~(size_t)4095;
}

static void page_init(tdm_progress_page_t *p, uint16_t n_ranks, uint64_t group_id)
{
    memset(p, 0, tdm_progress_size(n_ranks));
    p->version = TDM_PROGRESS_VERSION;
    p->n_ranks = n_ranks;
    p->group_id = group_id;
    atomic_thread_fence(memory_order_release);
    p->magic = TDM_PROGRESS_MAGIC;
}

tdm_status_t tdm_progress_create(const char *path, uint16_t n_ranks, uint64_t group_id,
                                 tdm_progress_page_t **ret)
{
    if (n_ranks == 0 || n_ranks > TDM_PROGRESS_MAX_RANKS)
        return TDM_ERR_INVAL;
    void *m;
    tdm_status_t st = tdm_mapfile_create(path, tdm_progress_size(n_ranks), &m);
    if (st != TDM_OK)
        return st;
    page_init(m, n_ranks, group_id);
    *ret = m;
    return TDM_OK;
}

tdm_status_t tdm_progress_create_anon(uint16_t n_ranks, uint64_t group_id,
                                      tdm_progress_page_t **ret)
{
    if (n_ranks == 0 || n_ranks > TDM_PROGRESS_MAX_RANKS)
        return TDM_ERR_INVAL;
    void *m = mmap(NULL, tdm_progress_size(n_ranks), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return TDM_ERR_NOMEM;
    page_init(m, n_ranks, group_id);
    *ret = m;
    return TDM_OK;
}

tdm_status_t tdm_progress_open(const char *path, tdm_progress_page_t **ret)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? TDM_ERR_NOTFOUND : TDM_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(tdm_progress_page_t)) {
        close(fd);
        return TDM_ERR_FORMAT;
    }
    size_t size = (size_t)st.st_size;
    tdm_progress_page_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return TDM_ERR_NOMEM;
    if (p->magic != TDM_PROGRESS_MAGIC || p->version != TDM_PROGRESS_VERSION || p->n_ranks == 0 ||
        p->n_ranks > TDM_PROGRESS_MAX_RANKS || tdm_progress_size(p->n_ranks) != size) {
        munmap(p, size);
        return TDM_ERR_FORMAT;
    }
    *ret = p;
    return TDM_OK;
}

void tdm_progress_close(tdm_progress_page_t *p)
{
    if (p)
        munmap(p, tdm_progress_size(p->n_ranks));
}

void tdm_progress_write_begin(tdm_progress_slot_t *s)
{
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

void tdm_progress_write_end(tdm_progress_slot_t *s)
{
    atomic_thread_fence(memory_order_release);
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
}

void tdm_progress_heartbeat(tdm_progress_slot_t *s, tdm_hb_thread_t t, uint64_t now_us)
{
    if ((unsigned)t < TDM_HB_MAX)
        atomic_store_explicit(&s->heartbeat_us[t], now_us ? now_us : 1, memory_order_relaxed);
}

void tdm_progress_gpu_fold(const tdm_gpu_step_t *g, uint32_t mark, tdm_rank_record_t *r)
{
    uint64_t done = mark / 2, total = 0, k = 0, h = g->base_hash;
    uint32_t in_op = TDM_COLL_NONE;
    const uint32_t nr = g->n_runs < TDM_GPU_RUNS ? g->n_runs : TDM_GPU_RUNS;
    for (uint32_t i = 0; i < nr; i++)
        total += g->run[i].count;
    if (done > total)
        done = total;
    for (uint32_t i = 0; i < nr; i++)
        for (uint32_t c = 0; c < g->run[i].count; c++, k++) {
            if (k == done) {
                in_op = g->run[i].op;
                goto folded;
            }
            h = tdm_hash_coll_step(h, g->run[i].op, g->run[i].bytes, g->group);
        }
folded:
    r->coll_seq = g->base_seq + done;
    r->coll_hash = h;
    if ((mark & 1) && done < total) {
        r->in_coll_op = in_op;
        r->in_coll_seq = g->base_seq + done;
        r->in_coll_since_us = g->since_us;
    } else {
        r->in_coll_op = TDM_COLL_NONE;
    }
}

void tdm_progress_read(const tdm_progress_slot_t *s, tdm_rank_record_t *ret)
{
    tdm_progress_slot_t *ms = (tdm_progress_slot_t *)s;
    uint32_t mark = 0;
    for (int tries = 0;; tries++) {
        uint64_t a = atomic_load_explicit(&ms->seq, memory_order_acquire);
        if (!(a & 1)) {
            memcpy(ret, (const void *)&s->rec, sizeof(*ret));
            mark = atomic_load_explicit(&ms->gpu_mark, memory_order_acquire);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&ms->seq, memory_order_relaxed) == a)
                break;
        }
        if (tries > 1000) { /* the writer died mid-write: take what is there */
            memcpy(ret, (const void *)&s->rec, sizeof(*ret));
            mark = atomic_load_explicit(&ms->gpu_mark, memory_order_acquire);
            break;
        }
    }
    if (ret->gpu.n_runs) /* a GPU rank's step in flight: where its device is (I2) */
        tdm_progress_gpu_fold(&ret->gpu, mark, ret);
}

void tdm_progress_note_submitted(tdm_progress_page_t *p)
{
    if (p)
        atomic_fetch_add_explicit(&p->submitted, 1, memory_order_seq_cst);
}

uint32_t tdm_progress_queued(const tdm_progress_page_t *p, const tdm_rank_record_t *leader)
{
    tdm_progress_page_t *mp = (tdm_progress_page_t *)p;
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t sub = atomic_load_explicit(&mp->submitted, memory_order_seq_cst);
    uint64_t q = sub > leader->taken ? sub - leader->taken : 0;
    return q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
}

static int pid_dead(int32_t pid)
{
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

int tdm_progress_healthy(const tdm_progress_page_t *p, uint64_t now_us,
                         uint64_t progress_timeout_us, uint64_t hb_timeout_us, char *why,
                         size_t why_len)
{
    tdm_progress_page_t *mp = (tdm_progress_page_t *)p;
    uint32_t dead = atomic_load(&mp->dead_rank_plus1);
    if (dead) {
        snprintf(why, why_len, "rank %u exited", dead - 1);
        return 0;
    }
    tdm_rank_record_t leader;
    tdm_progress_read(&p->slot[0], &leader);
    uint32_t queued = tdm_progress_queued(p, &leader);
    int pending = leader.pending > 0 || queued > 0;
    for (uint16_t r = 0; r < p->n_ranks; r++) {
        tdm_rank_record_t rec;
        tdm_progress_read(&p->slot[r], &rec);
        if (rec.pid > 0 && pid_dead(rec.pid)) {
            snprintf(why, why_len, "rank %u (pid %d) is gone", r, rec.pid);
            return 0;
        }
        if (pending && rec.progress_us && now_us > rec.progress_us &&
            now_us - rec.progress_us > progress_timeout_us) {
            double age = (double)(now_us - rec.progress_us) / 1e6;
            if (rec.in_coll_op != TDM_COLL_NONE) {
                int n = snprintf(why, why_len,
                                 "rank %u no progress for %.1f s (iter %llu, in %s seq %llu for "
                                 "%.1f s)",
                                 r, age, (unsigned long long)rec.iter,
                                 tdm_coll_op_name((tdm_coll_op_t)rec.in_coll_op),
                                 (unsigned long long)rec.in_coll_seq,
                                 (double)(now_us - rec.in_coll_since_us) / 1e6);
                /* The waiting rank is the symptom; name the peer that is not in that collective
                 * (the rank-desync incident: one rank took the idle path). */
                for (uint16_t q = 0; q < p->n_ranks && n > 0 && (size_t)n < why_len; q++) {
                    tdm_rank_record_t o;
                    if (q == r)
                        continue;
                    tdm_progress_read(&p->slot[q], &o);
                    if (o.in_coll_op == rec.in_coll_op && o.in_coll_seq == rec.in_coll_seq)
                        continue;
                    snprintf(why + n, why_len - (size_t)n,
                             "; rank %u is not in it (iter %llu, %s path, %s%s%scoll_seq %llu)", q,
                             (unsigned long long)o.iter, tdm_path_name((tdm_path_t)o.path),
                             o.in_coll_op ? "in " : "",
                             o.in_coll_op ? tdm_coll_op_name((tdm_coll_op_t)o.in_coll_op) : "",
                             o.in_coll_op ? " " : "",
                             (unsigned long long)(o.in_coll_op ? o.in_coll_seq : o.coll_seq));
                    break;
                }
            } else if (queued)
                snprintf(why, why_len,
                         "rank %u no progress for %.1f s (iter %llu, %s path; %u request(s) queued "
                         "that the loop has not taken)",
                         r, age, (unsigned long long)rec.iter, tdm_path_name((tdm_path_t)rec.path),
                         queued);
            else
                snprintf(why, why_len, "rank %u no progress for %.1f s (iter %llu, %s path)", r,
                         age, (unsigned long long)rec.iter, tdm_path_name((tdm_path_t)rec.path));
            return 0;
        }
        for (int t = 0; t < TDM_HB_MAX; t++) {
            uint64_t hb = atomic_load_explicit(&mp->slot[r].heartbeat_us[t], memory_order_relaxed);
            if (hb && now_us > hb && now_us - hb > hb_timeout_us) {
                snprintf(why, why_len, "rank %u %s thread heartbeat stale for %.1f s", r,
                         tdm_hb_thread_name((tdm_hb_thread_t)t), (double)(now_us - hb) / 1e6);
                return 0;
            }
        }
    }
    if (why_len)
        snprintf(why, why_len, "ok");
    return 1;
}
