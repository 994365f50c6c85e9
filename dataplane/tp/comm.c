/*
 * comm.c — the recorder around every collective (invariant I2). Entry and exit are published in
 * the rank's progress slot under its seqlock, so /health and the telemetry reporter see
 * in_coll{op, seq, since} for as long as a rank is stuck inside a collective.
 */
#include "config.h"

#include <tdm/hash.h>
#include <tdm/time.h>

#include "dataplane/tp/comm.h"

uint64_t tdm_comm_hash_step(uint64_t h, tdm_coll_op_t op, uint64_t bytes, uint32_t group)
{
    return tdm_hash_coll_step(h, (uint32_t)op, bytes, group); /* the one I2 hash (common/hash.c) */
}

static void rec_enter(tdm_comm_t *c, tdm_coll_op_t op)
{
    if (!c->page)
        return;
    tdm_progress_slot_t *s = &c->page->slot[c->rank];
    tdm_progress_write_begin(s);
    s->rec.in_coll_op = op;
    s->rec.in_coll_seq = s->rec.coll_seq;
    s->rec.in_coll_since_us = tdm_time_mono_us();
    tdm_progress_write_end(s);
}

static void rec_leave(tdm_comm_t *c, tdm_coll_op_t op, uint64_t bytes, tdm_status_t st)
{
    if (!c->page)
        return;
    tdm_progress_slot_t *s = &c->page->slot[c->rank];
    tdm_progress_write_begin(s);
    if (st == TDM_OK) {
        s->rec.coll_seq++;
        s->rec.coll_hash = tdm_comm_hash_step(s->rec.coll_hash, op, bytes, c->group);
    }
    s->rec.in_coll_op = TDM_COLL_NONE;
    tdm_progress_write_end(s);
}

static int skipped(tdm_comm_t *c, tdm_coll_op_t op)
{
    if (!c->skip_fault)
        return 0;
    uint64_t seq = c->page ? c->page->slot[c->rank].rec.coll_seq : 0;
    return c->skip_fault(c->fault_ctx, op, seq);
}

tdm_status_t tdm_comm_allreduce_f32(tdm_comm_t *c, float *buf, size_t n)
{
    if (skipped(c, TDM_COLL_ALLREDUCE))
        return TDM_OK;
    rec_enter(c, TDM_COLL_ALLREDUCE);
    tdm_status_t st = c->size == 1 ? TDM_OK : c->ops->allreduce_f32(c->impl, buf, n);
    rec_leave(c, TDM_COLL_ALLREDUCE, n * sizeof(float), st);
    return st;
}

tdm_status_t tdm_comm_broadcast(tdm_comm_t *c, void *buf, size_t bytes, uint32_t root)
{
    if (root >= c->size)
        return TDM_ERR_INVAL;
    if (skipped(c, TDM_COLL_BROADCAST))
        return TDM_OK;
    rec_enter(c, TDM_COLL_BROADCAST);
    tdm_status_t st = c->size == 1 ? TDM_OK : c->ops->broadcast(c->impl, buf, bytes, root);
    rec_leave(c, TDM_COLL_BROADCAST, bytes, st);
    return st;
}

tdm_status_t tdm_comm_allgather(tdm_comm_t *c, const void *in, void *out, size_t bytes)
{
    if (skipped(c, TDM_COLL_ALLGATHER))
        return TDM_OK;
    rec_enter(c, TDM_COLL_ALLGATHER);
    tdm_status_t st = c->ops->allgather(c->impl, in, out, bytes);
    rec_leave(c, TDM_COLL_ALLGATHER, bytes, st);
    return st;
}

tdm_status_t tdm_comm_barrier(tdm_comm_t *c)
{
    if (skipped(c, TDM_COLL_BARRIER))
        return TDM_OK;
    rec_enter(c, TDM_COLL_BARRIER);
    tdm_status_t st = c->size == 1 ? TDM_OK : c->ops->barrier(c->impl);
    rec_leave(c, TDM_COLL_BARRIER, 0, st);
    return st;
}

void tdm_comm_destroy(tdm_comm_t *c)
{
    if (c && c->ops && c->ops->destroy)
        c->ops->destroy(c->impl);
    if (c) {
        c->impl = NULL;
        c->ops = NULL;
    }
}

void tdm_comm_record_iter(tdm_comm_t *c, uint64_t iter, tdm_path_t path, uint64_t plan_hash,
                          uint32_t bs, uint32_t waiting, uint32_t running, uint64_t now_us)
{
    if (!c->page)
        return;
    tdm_progress_slot_t *s = &c->page->slot[c->rank];
    tdm_progress_write_begin(s);
    s->rec.iter = iter;
    s->rec.path = path;
    s->rec.plan_hash = plan_hash;
    s->rec.bs = bs;
    s->rec.waiting = waiting;
    s->rec.running = running;
    s->rec.pending = waiting + running;
    s->rec.progress_us = now_us;
    tdm_progress_write_end(s);
    tdm_progress_heartbeat(s, TDM_HB_LOOP, now_us);
}

void tdm_comm_record_pending(tdm_comm_t *c, uint32_t waiting, uint32_t running, uint64_t taken)
{
    if (!c->page)
        return;
    tdm_progress_slot_t *s = &c->page->slot[c->rank];
    tdm_progress_write_begin(s);
    s->rec.waiting = waiting;
    s->rec.running = running;
    s->rec.pending = waiting + running;
    s->rec.taken = taken;
    tdm_progress_write_end(s);
}

void tdm_comm_gpu_begin(tdm_comm_t *c, const tdm_gpu_step_t *g, uint64_t now_us)
{
    if (!c->page)
        return;
    tdm_progress_slot_t *s = &c->page->slot[c->rank];
    tdm_progress_write_begin(s);
    atomic_store_explicit(&s->gpu_mark, 0, memory_order_relaxed);
    s->rec.gpu = *g;
    s->rec.gpu.group = c->group;
    s->rec.gpu.base_seq = s->rec.coll_seq;
    s->rec.gpu.base_hash = s->rec.coll_hash;
    s->rec.gpu.since_us = now_us;
    s->rec.in_coll_op = TDM_COLL_NONE;
    tdm_progress_write_end(s);
}

void tdm_comm_gpu_end(tdm_comm_t *c)
{
    if (!c->page)
        return;
    tdm_progress_slot_t *s = &c->page->slot[c->rank];
    if (!s->rec.gpu.n_runs)
        return;
    uint32_t mark = atomic_load_explicit(&s->gpu_mark, memory_order_acquire);
    tdm_rank_record_t r = s->rec;
    tdm_progress_gpu_fold(&r.gpu, mark, &r);
    tdm_progress_write_begin(s);
    s->rec.coll_seq = r.coll_seq;
    s->rec.coll_hash = r.coll_hash;
    s->rec.in_coll_op = TDM_COLL_NONE;
    s->rec.gpu.n_runs = 0;
    tdm_progress_write_end(s);
}

uint32_t *tdm_comm_gpu_mark(tdm_comm_t *c)
{
    return c->page ? (uint32_t *)&c->page->slot[c->rank].gpu_mark : NULL;
}
