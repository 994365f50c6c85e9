/*
 * mover.c — the transfer engine's transfer thread (xfer_int.h): owns UCX; takes rooms from the
 * command ring, writes their KV pages and aux slot (puts, or copies into a same-host peer's
 * mapped memory), advances each room's mover phase and holds the STATUS frames of finished rooms
 * briefly (cfg.cork_hold_us) to send them in one write.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/xfer/xfer_int.h"

/* ---- transfer thread: UCX ---- */

/* Send the queued frames from the transfer thread, without waking the receive thread unless the
 * socket takes only part (it then polls for POLLOUT). Under `mu` the channel cannot close. */
void tdm_xfer_out_push(tdm_xfer_t *x)
{
    x->out_held_us = 0;
    tdm_xfer_out_send_now(x);
}

/* Move a room on once its writes completed: flush, then (flush completed) finalize. Returns 1 when
 * the room was finalized: from then on another thread may release it. */
static int xfer_room_step(tdm_xfer_t *x, xroom_t *r)
{
    if (r->phase == XR_PUTTING && r->ops_pending == 0) {
        r->phase = XR_FLUSHING;
        tdm_xfer_ucx_flush_room(x, r);
    }
    /* a device pool's room is delivered when its copies' event completed too (I5) */
    if (r->phase != XR_FLUSHING || r->flush_pending != 0 || !tdm_xfer_cuda_room_done(x, r))
        return 0;
    pthread_mutex_lock(&x->mu);
    x->out_nowake = 1; /* its STATUS waits for tdm_xfer_out_push */
    tdm_xfer_prefill_finalize(x, r);
    x->out_nowake = 0;
    pthread_mutex_unlock(&x->mu);
    if (!x->out_held_us)
        x->out_held_us = tdm_xfer_now();
    return 1;
}

/* Hash (checksums on) and write a room: its copies or puts, without `mu` (the API callers and
 * the receive thread keep going meanwhile). The transfer thread, or tdm_xfer_prefill_send's
 * caller for a room tdm_xfer_inline_ok accepted. */
typedef struct room_write_stats {
    uint64_t sum_ns, puts, bytes;
} room_write_stats_t;

static void room_write(tdm_xfer_t *x, xroom_t *r, room_write_stats_t *ret)
{
    uint64_t t0 = r->sums ? tdm_time_mono_ns() : 0;
    uint64_t *seg = r->seg_sums;
    for (uint32_t rank = 0; r->sums && rank < x->n_ranks; rank++) {
        if (tdm_xfer_kv_sums(x, rank, r->src_pages, r->n_pages, r->sums + (size_t)rank * r->n_pages,
                             seg) != TDM_OK)
            r->put_error = 1;
        if (seg)
            seg += tdm_xfer_seg_count(x, rank);
    }
    ret->sum_ns = r->sums ? tdm_time_mono_ns() - t0 : 0;
    tdm_xfer_ucx_put_room(x, r, &ret->puts, &ret->bytes);
    tdm_xfer_cuda_put_room(x, r, &ret->puts, &ret->bytes); /* device pool: KV copies + event */
}

/* The stats of a room_write (mu held). */
static void room_write_count(tdm_xfer_t *x, const xroom_t *r, const room_write_stats_t *w)
{
    if (r->sums) {
        x->st.checksum_ns += w->sum_ns;
        x->st.checksum_bytes += tdm_xfer_room_sum_bytes(x, r->n_pages);
    }
    x->st.puts += w->puts;
    x->st.bytes_put += w->bytes;
}

static void xfer_issue(tdm_xfer_t *x, uint64_t room)
{
    pthread_mutex_lock(&x->mu);
    xroom_t *r = tdm_xfer_map_get(x, room);
    int ok = r && r->phase == XR_PUTTING;
    int skip = ok && r->abort_req;
    if (x->out_quiet && !x->out_held_us)
        x->out_held_us = tdm_xfer_now(); /* the room's TRANSFERRING frame (tdm_xfer_prefill_send) */
    pthread_mutex_unlock(&x->mu);
    if (!ok)
        return;
    uint32_t slow_ms = 0;
    int slow = !skip && tdm_xfer_fault_fires(x, TDM_XFER_FAULT_SLOW_HOST_COPY, &slow_ms);
    /* held STATUS frames do not wait through a long copy (or an injected delay) */
    if (x->out_held_us && (slow || tdm_xfer_now() - x->out_held_us >= x->cfg.cork_hold_us ||
                           tdm_xfer_room_sum_bytes(x, r->n_pages) > XFER_HOLD_MAX_BYTES))
        tdm_xfer_out_push(x);
    if (slow)
        tdm_time_sleep_us((uint64_t)slow_ms * 1000);
    if (!skip) {
        room_write_stats_t w;
        room_write(x, r, &w);
        pthread_mutex_lock(&x->mu);
        room_write_count(x, r, &w);
        pthread_mutex_unlock(&x->mu);
    }
    /* Written by copies into mapped memory the room is delivered already: it is finalized now,
     * not after the rooms queued behind it (its STATUS frame joins theirs, tdm_xfer_out_push). */
    if (!xfer_room_step(x, r)) {
        r->next_active = x->active;
        x->active = r;
    }
}

int tdm_xfer_inline_ok(tdm_xfer_t *x, const xroom_t *r)
{
    /* fault hooks act on the transfer thread (slow_host_copy, stall_transfer, kill_thread):
     * with them configured every room takes that path */
    if (x->cuda || x->cfg.fault || x->disconnect_pending ||
        tdm_xfer_room_sum_bytes(x, r->n_pages) > XFER_INLINE_MAX_BYTES)
        return 0;
    for (uint32_t rank = 0; rank < x->n_ranks; rank++) {
        const xfer_ucx_t *u = &x->ucx[rank];
        if (!u->ep || !u->r_kv_ptr || !u->r_aux_ptr)
            return 0; /* a put would need the transfer thread's UCX worker */
    }
    return 1;
}

void tdm_xfer_issue_inline(tdm_xfer_t *x, xroom_t *r)
{
    room_write_stats_t w;
    room_write(x, r, &w);
    r->phase = XR_FLUSHING;
    tdm_xfer_ucx_flush_room(x, r); /* every rank mapped: the fences, no UCX call */
    pthread_mutex_lock(&x->mu);
    room_write_count(x, r, &w);
    x->copy_us = tdm_xfer_now(); /* the receive thread's policy (tdm_xfer_recv_thread_policy) */
    tdm_xfer_prefill_finalize(x, r);
    x->inline_copies--;
    pthread_mutex_unlock(&x->mu);
}

void tdm_xfer_advance(tdm_xfer_t *x)
{
    xroom_t **pp = &x->active;
    while (*pp) {
        xroom_t *r = *pp;
        xroom_t *next = r->next_active;
        if (xfer_room_step(x, r)) {
            *pp = next; /* finalized: r may be released by now, not touched again */
            continue;
        }
        pp = &r->next_active;
    }
}

/* Rooms still on the active list (writes or flushes not completed). */
static uint32_t active_rooms(const tdm_xfer_t *x)
{
    uint32_t n = 0;
    for (const xroom_t *r = x->active; r; r = r->next_active)
        n++;
    return n;
}

/* Decode's channel was lost: new UCP workers in place of the old (decode.c
 * tdm_xfer_decode_peer_lost), then the bootstrap thread may register again. */
static void renew_workers(tdm_xfer_t *x, int ep)
{
    uint32_t renewed = 0;
    for (uint32_t r = 0; r < x->n_ranks; r++) {
        struct epoll_event ev = {.events = EPOLLIN};
        epoll_ctl(ep, EPOLL_CTL_DEL, x->ucx[r].efd, NULL);
        if (tdm_xfer_ucx_renew_worker(x, r) == TDM_OK)
            renewed++;
        else
            tdm_err(TDM_SUB_XFER,
                    "rank %u: new UCX worker after the peer loss failed; the old "
                    "one stays",
                    r);
        ev.data.fd = x->ucx[r].efd;
        epoll_ctl(ep, EPOLL_CTL_ADD, x->ucx[r].efd, &ev);
    }
    tdm_info(TDM_SUB_XFER, "msg=\"peer lost: new UCX workers\" ranks=%u of=%u", renewed,
             x->n_ranks);
    pthread_mutex_lock(&x->mu);
    x->renew_pending = 0;
    pthread_mutex_unlock(&x->mu);
    tdm_xfer_wake(x->wake_boot);
}

void *tdm_xfer_main(void *arg)
{
    tdm_xfer_t *x = arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.fd = x->wake_xfer;
    epoll_ctl(ep, EPOLL_CTL_ADD, x->wake_xfer, &ev);
    for (uint32_t r = 0; r < x->n_ranks; r++) {
        ev.data.fd = x->ucx[r].efd;
        epoll_ctl(ep, EPOLL_CTL_ADD, x->ucx[r].efd, &ev);
    }
    while (!atomic_load(&x->stop)) {
        tdm_xfer_hb(x, TDM_HB_TRANSFER);
        if (tdm_xfer_fault_fires(x, TDM_XFER_FAULT_KILL_TRANSFER, NULL)) {
            tdm_xfer_thread_killed(x, "transfer");
            break;
        }
        pthread_mutex_lock(&x->mu);
        int moving = x->active || x->cmd_len > 0 || atomic_load(&x->n_transferring) > 0;
        pthread_mutex_unlock(&x->mu);
        uint32_t stall_ms;
        if (moving && tdm_xfer_fault_fires(x, TDM_XFER_FAULT_STALL_TRANSFER, &stall_ms)) {
            tdm_warn(TDM_SUB_XFER, "fault stall_transfer: no progress for %u ms", stall_ms);
            tdm_xfer_out_push(x); /* frames held for this thread do not wait through the stall */
            for (uint64_t end = tdm_xfer_now() + (uint64_t)stall_ms * 1000;
                 !atomic_load(&x->stop) && tdm_xfer_now() < end;)
                tdm_time_sleep_us(10000);
        }
        tdm_xfer_ucx_progress(x);
        for (;;) {
            pthread_mutex_lock(&x->mu);
            if (x->cmd_len == 0 ||
                (x->cmds[x->cmd_head].kind == XCMD_CONNECT && x->disconnect_pending)) {
                pthread_mutex_unlock(&x->mu);
                break;
            }
            xfer_cmd_t c = x->cmds[x->cmd_head];
            x->cmd_head = (x->cmd_head + 1) % x->cmd_cap;
            x->cmd_len--;
            if (c.kind == XCMD_CONNECT) {
                /* without `mu`: a connect over a lossy link can block inside UCX for seconds,
                 * and the rank's samples read the engine's statistics under `mu` (a held lock
                 * read as a lost rank, WORKER_LOST). `reg` stays: a REGISTER arriving meanwhile
                 * is refused as busy (bootstrap.c prefill_register) */
                x->connecting = 1;
                pthread_mutex_unlock(&x->mu);
                tdm_status_t st = TDM_OK;
                for (uint32_t r = 0; r < x->n_ranks && st == TDM_OK; r++)
                    st = tdm_xfer_ucx_connect(x, r, &x->reg->ranks[r], x->reg->layout.num_pages);
                pthread_mutex_lock(&x->mu);
                x->connecting = 0;
                x->connect_result = st;
                x->connect_done = 1;
                pthread_cond_broadcast(&x->cv);
            } else if (c.kind == XCMD_DISCONNECT) {
                if (!x->disconnect_pending)
                    x->disconnect_us = tdm_xfer_now();
                x->disconnect_pending = 1;
            }
            pthread_mutex_unlock(&x->mu);
            if (c.kind == XCMD_ISSUE)
                xfer_issue(x, c.room);
            else if (c.kind == XCMD_RENEW)
                renew_workers(x, ep);
        }
        tdm_xfer_ucx_progress(x);
        tdm_xfer_advance(x);
        if (x->out_held_us)
            tdm_xfer_out_push(x); /* the ring is empty: the held STATUS frames go now */
        pthread_mutex_lock(&x->mu);
        int inline_busy = x->inline_copies > 0; /* callers still copying through the mappings */
        uint64_t disc_us = x->disconnect_us;
        pthread_mutex_unlock(&x->mu);
        /* The peer is lost. Rooms still writing to it get XFER_DISCONNECT_GRACE_US; after that
         * the endpoints are closed by force all the same: a same-host endpoint has no error
         * handling, so operations to a dead peer may never complete, and the connect of the
         * peer's next registration is queued behind this disconnect. The forced close completes
         * those operations as cancelled (put_error): the rooms finalize as failed; one whose
         * operations never complete stays on the active list, detached from any endpoint. */
        if (x->disconnect_pending && !inline_busy &&
            (!x->active || tdm_xfer_now() - disc_us >= XFER_DISCONNECT_GRACE_US)) {
            uint32_t stuck = active_rooms(x);
            if (stuck)
                tdm_warn(TDM_SUB_XFER,
                         "msg=\"peer lost: rooms still writing after the grace; endpoints closed "
                         "by force\" rooms=%u grace_ms=%u",
                         stuck, (unsigned)(XFER_DISCONNECT_GRACE_US / 1000));
            for (uint32_t r = 0; r < x->n_ranks; r++)
                tdm_xfer_ucx_disconnect(x, r);
            if (stuck) {
                tdm_xfer_ucx_progress(x);
                tdm_xfer_advance(x);
            }
            pthread_mutex_lock(&x->mu);
            x->disconnect_pending = 0;
            pthread_mutex_unlock(&x->mu);
            continue;
        }
        int busy = 0;
        for (uint32_t r = 0; r < x->n_ranks; r++)
            if (ucp_worker_arm(x->ucx[r].worker) == UCS_ERR_BUSY)
                busy = 1;
        if (busy)
            continue;
        pthread_mutex_lock(&x->mu);
        int pending_cmd = x->cmd_len > 0 && !x->disconnect_pending;
        pthread_mutex_unlock(&x->mu);
        if (pending_cmd)
            continue;
        /* Armed workers wake us on UCX events (a TCP put's target must progress for it to
         * land); while rooms move data, wake at least every ms. Busy-polling measured no
         * better on this shared 2-core host (bench/results/transfer.json). */
        struct epoll_event out[8];
        int busy_rooms = x->active || atomic_load(&x->n_transferring) > 0;
        int n = epoll_wait(ep, out, 8, busy_rooms ? 1 : 100);
        for (int i = 0; i < n; i++)
            if (out[i].data.fd == x->wake_xfer)
                tdm_xfer_drain(x->wake_xfer);
    }
    close(ep);
    return NULL;
}
