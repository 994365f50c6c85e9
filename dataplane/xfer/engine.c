/*
 * engine.c — the transfer engine's skeleton shared by both roles: lifecycle, the room map, the
 * outbound frame queue, events, and the three threads. The bootstrap thread owns listening /
 * connecting, the REGISTER handshake, heartbeats and timeouts; the receive thread owns the
 * registered channel's socket (reads frames, writes the outbound queue, closes it); the transfer
 * thread owns UCX. Role logic lives in prefill.c and decode.c.
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

uint64_t xfer_now(void)
{
    return tdm_time_mono_us();
}

static void hb(tdm_xfer_t *x, tdm_hb_thread_t t)
{
    if (x->cfg.progress)
        tdm_progress_heartbeat(x->cfg.progress, t, xfer_now());
}

int xfer_fault(tdm_xfer_t *x, tdm_xfer_fault_t f, uint32_t *ret_arg)
{
    uint32_t arg = 0;
    if (!x->cfg.fault || !x->cfg.fault(x->cfg.ctx, f, &arg))
        return 0;
    atomic_fetch_add(&x->faults_fired, 1);
    if (ret_arg)
        *ret_arg = arg;
    return 1;
}

void xfer_thread_killed(tdm_xfer_t *x, const char *thread)
{
    char why[96];
    snprintf(why, sizeof(why), "fault kill_thread: the %s thread exits", thread);
    tdm_err(TDM_SUB_XFER, "%s (its heartbeat stops; /health reports it)", why);
    pthread_mutex_lock(&x->mu);
    xfer_event(x, "thread_exit", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED, why);
    pthread_mutex_unlock(&x->mu);
}

static void wake(int fd)
{
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof(one));
    (void)n;
}

static void drain(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
}

/* ---- room map: open addressing, backward-shift deletion ---- */

static uint32_t map_home(const tdm_xfer_t *x, uint64_t room)
{
    uint64_t h = room * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32) & x->map_mask;
}

xroom_t *xfer_map_get(tdm_xfer_t *x, uint64_t room)
{
    for (uint32_t i = map_home(x, room);; i = (i + 1) & x->map_mask) {
        if (!x->map[i])
            return NULL;
        if (x->map[i]->room == room)
            return x->map[i];
    }
}

void xfer_map_put(tdm_xfer_t *x, xroom_t *r)
{
    uint32_t i = map_home(x, r->room);
    while (x->map[i])
        i = (i + 1) & x->map_mask;
    x->map[i] = r;
    x->map_used++;
}

void xfer_map_del(tdm_xfer_t *x, uint64_t room)
{
    uint32_t i = map_home(x, room);
    while (x->map[i] && x->map[i]->room != room)
        i = (i + 1) & x->map_mask;
    if (!x->map[i])
        return;
    x->map_used--;
    for (;;) {
        x->map[i] = NULL;
        uint32_t j = i;
        for (;;) {
            j = (j + 1) & x->map_mask;
            if (!x->map[j])
                return;
            uint32_t home = map_home(x, x->map[j]->room);
            int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
            if (!between) {
                x->map[i] = x->map[j];
                i = j;
                break;
            }
        }
    }
}

void xroom_free(xroom_t *r)
{
    if (!r)
        return;
    free(r->pages);
    free(r->src_pages);
    free(r->sums);
    free(r->prompt);
    free(r);
}

/* ---- events ---- */

void xfer_event(tdm_xfer_t *x, const char *type, uint64_t room, tdm_kvpoll_t from, tdm_kvpoll_t to,
                const char *reason)
{
    if (!x->cfg.on_event)
        return;
    tdm_xfer_event_t ev = {xfer_now(), type, room, from, to, reason ? reason : ""};
    x->cfg.on_event(x->cfg.ctx, &ev);
}

static void room_event_cb(void *ctx, const tdm_xfer_room_event_t *ev)
{
    tdm_xfer_t *x = ctx;
    xfer_event(x, "kvpoll", ev->room, ev->from, ev->to, ev->reason);
    if (ev->to == TDM_KVPOLL_TRANSFERRING)
        atomic_fetch_add(&x->n_transferring, 1);
    if (ev->from == TDM_KVPOLL_TRANSFERRING)
        atomic_fetch_sub(&x->n_transferring, 1);
    if (ev->to == TDM_KVPOLL_FAILED && ev->from != TDM_KVPOLL_FAILED) {
        x->st.rooms_failed++;
        if (x->cfg.role == TDM_XFER_DECODE)
            xfer_decode_room_failed(x, ev->room);
    }
}

void xfer_room_set_all(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t to, const char *reason)
{
    uint64_t now = xfer_now();
    for (uint32_t r = 0; r < x->n_ranks; r++)
        tdm_xfer_room_set(x->rooms, room, r, to, reason, now);
}

/* ---- outbound queue ---- */

/* Bytes queued and not yet taken by the socket (mu held). */
static size_t out_pending(const tdm_xfer_t *x)
{
    return x->outq_len - x->outq_off + x->sendq_len - x->sendq_off;
}

/* A new or closed channel starts with empty queues (mu held, no sender active). */
static void out_reset(tdm_xfer_t *x)
{
    x->outq_len = x->outq_off = 0;
    x->sendq_len = x->sendq_off = 0;
    x->out_quiet = 0;
}

static void out_flush(tdm_xfer_t *x, int is_recv);

/* Send what the outbound queue holds from the calling thread (mu not held): no wake of the
 * receive thread unless the socket takes only part. */
static void out_send_now(tdm_xfer_t *x)
{
    pthread_mutex_lock(&x->mu);
    out_flush(x, 0);
    pthread_mutex_unlock(&x->mu);
}

/* The engine this thread corked (tdm_xfer_cork), how deep, and since when a frame of it waits
 * (0: none since this thread's last flush). */
static _Thread_local const tdm_xfer_t *tl_cork;
static _Thread_local uint32_t tl_cork_depth;
static _Thread_local uint64_t tl_cork_first_us;

void xfer_cork_due(tdm_xfer_t *x, uint32_t copy_pages)
{
    if (tl_cork != x || !tl_cork_first_us)
        return;
    if (xfer_now() - tl_cork_first_us < x->cfg.cork_hold_us &&
        !(copy_pages && xfer_room_sum_bytes(x, copy_pages) > XFER_HOLD_MAX_BYTES))
        return;
    tl_cork_first_us = 0;
    out_send_now(x);
}

void tdm_xfer_cork(tdm_xfer_t *x)
{
    if (!x || (tl_cork && tl_cork != x))
        return;
    tl_cork = x;
    tl_cork_depth++;
}

void tdm_xfer_uncork(tdm_xfer_t *x)
{
    if (!x || tl_cork != x || --tl_cork_depth > 0)
        return;
    tl_cork = NULL;
    tl_cork_first_us = 0;
    out_send_now(x);
}

tdm_status_t xfer_out(tdm_xfer_t *x, const uint8_t *frame, size_t len)
{
    if (x->chan_fd < 0 || !x->ready)
        return TDM_ERR_PEER;
    /* The receive thread sends everything queued whenever it runs: it needs a wake only when
     * the queue goes from empty to not and no sender is active (a sender takes every byte
     * queued before it stops, under `mu`). One eventfd write per burst of frames, not per
     * frame. Frames queued without a wake (out_nowake: the transfer thread sends them itself,
     * xfer_out_push) leave the queue "quiet": the next frame queued with a wake wakes the
     * receive thread, which sends them all, in order. While the receive thread is awake
     * (recv_awake) it sends them before it sleeps again: no wake either. A thread that corked
     * the engine (tdm_xfer_cork) queues without a wake and sends at its uncork. */
    int was_empty = (out_pending(x) == 0 && !x->sending) || x->out_quiet;
    if (x->outq_off > 0 && x->outq_off == x->outq_len)
        x->outq_off = x->outq_len = 0;
    if (out_pending(x) + len > XFER_OUTQ_MAX) {
        x->chan_kill = 1; /* the peer stopped reading */
        wake(x->wake_recv);
        return TDM_ERR_PEER;
    }
    if (x->outq_len + len > x->outq_cap) {
        if (x->outq_off) {
            memmove(x->outq, x->outq + x->outq_off, x->outq_len - x->outq_off);
            x->outq_len -= x->outq_off;
            x->outq_off = 0;
        }
        if (x->outq_len + len > x->outq_cap) {
            size_t cap = x->outq_cap ? x->outq_cap : 65536;
            while (cap < x->outq_len + len)
                cap *= 2;
            x->outq = tdm_realloc(x->outq, cap);
            x->outq_cap = cap;
        }
    }
    memcpy(x->outq + x->outq_len, frame, len);
    x->outq_len += len;
    x->st.frames_tx++;
    if (tl_cork == x && !tl_cork_first_us)
        tl_cork_first_us = xfer_now();
    if (x->out_nowake || tl_cork == x) {
        x->out_quiet |= was_empty;
    } else if (was_empty && !x->recv_awake) {
        x->out_quiet = 0;
        wake(x->wake_recv);
    }
    return TDM_OK;
}

/* Write what the outbound queue holds from the calling thread (mu held; released during the
 * send and held again on return). A no-op while another thread is sending: that one takes these
 * bytes too before it stops. What the socket does not take waits for the receive thread's
 * POLLOUT: another caller (is_recv 0) wakes it for them. */
static void out_flush(tdm_xfer_t *x, int is_recv)
{
    if (x->sending || x->chan_fd < 0)
        return;
    const int fd = x->chan_fd; /* close_channel waits for `sending` to drop */
    x->sending = 1;
    x->out_quiet = 0;
    for (;;) {
        if (x->sendq_off == x->sendq_len) {
            if (x->outq_off == x->outq_len)
                break;
            /* take the queued bytes; the emptied buffer becomes the queue */
            uint8_t *b = x->sendq;
            size_t cap = x->sendq_cap;
            x->sendq = x->outq;
            x->sendq_cap = x->outq_cap;
            x->sendq_off = x->outq_off;
            x->sendq_len = x->outq_len;
            x->outq = b;
            x->outq_cap = cap;
            x->outq_off = x->outq_len = 0;
        }
        const uint8_t *p = x->sendq + x->sendq_off;
        size_t n = x->sendq_len - x->sendq_off;
        pthread_mutex_unlock(&x->mu);
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        int err = w < 0 ? errno : 0;
        pthread_mutex_lock(&x->mu);
        if (w > 0) {
            x->sendq_off += (size_t)w;
            x->st.frame_writes++;
            continue;
        }
        if (err == EINTR)
            continue;
        if (err != EAGAIN)
            x->chan_kill = 1;
        break;
    }
    x->sending = 0;
    pthread_cond_broadcast(&x->cv); /* close_channel may wait for this sender */
    /* leftovers wait for POLLOUT on the receive thread; a dead socket, for its close */
    if ((out_pending(x) || x->chan_kill) && !is_recv)
        wake(x->wake_recv);
}

tdm_status_t xfer_out_status(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t state, const char *msg,
                             const uint64_t *sums, uint32_t n_sums, uint32_t chunk_tokens)
{
    tdm_frame_status_t f;
    size_t cap = 256 + TDM_FRAME_MAX_MSG + (size_t)n_sums * 8, len;
    memset(&f, 0, sizeof(f));
    f.room = room;
    f.state = (uint8_t)state;
    f.chunk_tokens = chunk_tokens;
    f.n_checksums = n_sums;
    if (msg) {
        size_t n = strlen(msg);
        f.message.data = (const uint8_t *)msg;
        f.message.len = (uint32_t)(n > TDM_FRAME_MAX_MSG ? TDM_FRAME_MAX_MSG : n);
    }
    uint8_t *buf = tdm_malloc(cap);
    tdm_status_t st = tdm_frame_encode_status(&f, sums, buf, cap, &len);
    if (st == TDM_OK)
        st = xfer_out(x, buf, len);
    free(buf);
    return st;
}

tdm_status_t xfer_out_abort_ack(tdm_xfer_t *x, uint64_t room, int known)
{
    tdm_frame_abort_ack_t f = {room, 1, (uint8_t)known};
    uint8_t buf[64];
    size_t len;
    TDM_TRY(tdm_frame_encode_abort_ack(&f, buf, sizeof(buf), &len));
    return xfer_out(x, buf, len);
}

void xfer_cmd_push(tdm_xfer_t *x, int kind, uint64_t room)
{
    if (x->cmd_len == x->cmd_cap) {
        /* grow: commands are bounded by rooms, this only happens under a burst of CONNECTs */
        xfer_cmd_t *n = tdm_calloc(x->cmd_cap * 2, sizeof(*n));
        for (uint32_t i = 0; i < x->cmd_len; i++)
            n[i] = x->cmds[(x->cmd_head + i) % x->cmd_cap];
        free(x->cmds);
        x->cmds = n;
        x->cmd_head = 0;
        x->cmd_cap *= 2;
    }
    x->cmds[(x->cmd_head + x->cmd_len) % x->cmd_cap] = (xfer_cmd_t){kind, room};
    /* the transfer thread takes commands until the ring is empty and looks again under `mu`
     * before it sleeps: only the first command of a burst needs the eventfd */
    if (x->cmd_len++ == 0)
        wake(x->wake_xfer);
}

tdm_status_t xfer_write_all(int fd, const uint8_t *buf, size_t len, uint64_t timeout_us)
{
    uint64_t end = xfer_now() + timeout_us;
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return TDM_ERR_IO;
        uint64_t now = xfer_now();
        if (now >= end)
            return TDM_ERR_TIMEOUT;
        struct pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, (int)((end - now) / 1000 + 1));
    }
    return TDM_OK;
}

/* ---- receive thread: the registered channel ---- */

static void close_channel(tdm_xfer_t *x, const char *why)
{
    pthread_mutex_lock(&x->mu);
    while (x->sending) /* a sender writes the socket without `mu`: never close under it */
        pthread_cond_wait(&x->cv, &x->mu);
    if (x->chan_fd >= 0) {
        close(x->chan_fd);
        x->chan_fd = -1;
        int was_ready = x->ready;
        x->ready = 0;
        x->chan_kill = 0;
        out_reset(x);
        tdm_frame_reader_free(&x->chan_rd);
        tdm_frame_reader_init(&x->chan_rd, TDM_FRAME_MAX_BODY);
        if (was_ready) {
            x->st.peer_lost++;
            tdm_warn(TDM_SUB_XFER, "peer lost: %s", why);
            xfer_event(x, "peer_lost", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED, why);
            if (x->cfg.role == TDM_XFER_PREFILL)
                xfer_prefill_peer_lost(x);
            else
                xfer_decode_peer_lost(x);
        }
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
}

static void dispatch(tdm_xfer_t *x, const tdm_frame_hdr_t *h, const uint8_t *body)
{
    x->last_rx_us = xfer_now();
    x->st.frames_rx++;
    if (h->type == 0 || h->type >= TDM_FRAME_TYPE_MAX) {
        x->st.frames_unknown++;
        if (x->unknown_logged++ < 10)
            tdm_warn(TDM_SUB_XFER, "dropped frame of unknown type %u (%u bytes)", h->type,
                     h->length);
        return;
    }
    if (h->type == TDM_FRAME_HEARTBEAT) {
        tdm_frame_heartbeat_t f;
        if (tdm_frame_decode_heartbeat(body, h->length, &f, NULL, 0) != TDM_OK)
            x->st.frames_malformed++;
        return;
    }
    if (x->cfg.role == TDM_XFER_PREFILL)
        xfer_prefill_frame(x, h, body);
    else
        xfer_decode_frame(x, h, body);
}

/* During a burst of rooms copied by an API caller (xfer_issue_inline within the last
 * XFER_BATCH_US) the prefill receive thread runs under SCHED_BATCH: woken for a STATUS to send or
 * a TRANSFER_INFO to read, it does not preempt the caller's copy but runs when a core is free (at
 * once on an idle host, after the copier's slice on a busy one), with every frame queued meanwhile
 * in one send. Measured on the 2-vCPU bench host (bench/transfer, 512 KiB rooms, window 16):
 * with wakeup preemption ~1.5-1.9 context switches per room and 16-30 GB/s; SCHED_BATCH on the
 * prefill receive thread ~0.5-0.9 and 28-39 GB/s (on the decode one as well: no further gain).
 * Outside bursts the thread runs under the default policy, so a frame on a host busy with other
 * work (the worker's forward pass) waits for no scheduler tick. */
static void recv_thread_policy(int batch)
{
#ifdef SCHED_BATCH
    struct sched_param sp = {0};
    if (pthread_setschedparam(pthread_self(), batch ? SCHED_BATCH : SCHED_OTHER, &sp) != 0)
        tdm_dbg(TDM_SUB_XFER, "receive thread: scheduling policy not changed");
#else
    (void)batch;
#endif
}

static void *recv_main(void *arg)
{
    tdm_xfer_t *x = arg;
    int batch = 0; /* this thread's policy: SCHED_BATCH during a burst of inline copies */
    while (!atomic_load(&x->stop)) {
        hb(x, TDM_HB_RECV);
        if (xfer_fault(x, TDM_XFER_FAULT_KILL_RECV, NULL)) {
            xfer_thread_killed(x, "recv");
            return NULL;
        }
        pthread_mutex_lock(&x->mu);
        int fd = x->chan_fd;
        /* frames queued while this thread was awake went without a wake: they leave now, and
         * what the socket does not take waits for POLLOUT */
        if (fd >= 0 && !x->chan_kill)
            out_flush(x, 1);
        int kill = x->chan_kill;
        int want_out = out_pending(x) > 0 && !x->sending; /* an active sender takes them */
        x->recv_awake = 0;                                /* from here a frame queued wakes us */
        const int burst = x->copy_us && xfer_now() - x->copy_us < XFER_BATCH_US;
        pthread_mutex_unlock(&x->mu);
        if (burst != batch) {
            recv_thread_policy(burst);
            batch = burst;
        }
        if (fd >= 0 && kill) {
            close_channel(x, "peer timeout (no frame for the heartbeat timeout)");
            continue;
        }
        struct pollfd p[2] = {{x->wake_recv, POLLIN, 0}, {fd, POLLIN, 0}};
        if (want_out)
            p[1].events |= POLLOUT;
        /* within a burst, wake at least every XFER_BATCH_US to leave it on time */
        int n = poll(p, fd >= 0 ? 2 : 1, batch ? XFER_BATCH_US / 1000 : 200);
        if (n <= 0)
            continue;
        if (p[0].revents)
            drain(x->wake_recv);
        if (fd < 0 || !(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            continue; /* frames queued, or POLLOUT: sent at the loop's top */
        uint8_t *space;
        size_t avail;
        tdm_frame_reader_space(&x->chan_rd, &space, &avail);
        ssize_t r = avail ? recv(fd, space, avail, MSG_DONTWAIT) : 0;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            close_channel(x, r == 0 ? "peer closed the channel" : "channel read error");
            continue;
        }
        if (r < 0)
            continue;
        tdm_frame_reader_commit(&x->chan_rd, (size_t)r);
        /* every frame of this read under one hold of `mu`; frames the handlers (or other
         * threads) queue meanwhile need no wake: the loop's top sends them */
        pthread_mutex_lock(&x->mu);
        x->recv_awake = 1;
        for (;;) {
            tdm_frame_hdr_t h;
            const uint8_t *body;
            tdm_status_t st = tdm_frame_reader_next(&x->chan_rd, &h, &body);
            if (st == TDM_ERR_AGAIN)
                break;
            if (st != TDM_OK) {
                x->st.frames_malformed++;
                pthread_mutex_unlock(&x->mu);
                close_channel(x, "bad frame header on the channel");
                pthread_mutex_lock(&x->mu);
                break;
            }
            dispatch(x, &h, body);
        }
        pthread_mutex_unlock(&x->mu);
    }
    return NULL;
}

/* ---- transfer thread: UCX ---- */

/* Send the queued frames from the transfer thread, without waking the receive thread unless the
 * socket takes only part (it then polls for POLLOUT). Under `mu` the channel cannot close. */
static void xfer_out_push(tdm_xfer_t *x)
{
    x->out_held_us = 0;
    out_send_now(x);
}

/* Move a room on once its writes completed: flush, then (flush completed) finalize. Returns 1 when
 * the room was finalized: from then on another thread may release it. */
static int xfer_room_step(tdm_xfer_t *x, xroom_t *r)
{
    if (r->phase == XR_PUTTING && r->ops_pending == 0) {
        r->phase = XR_FLUSHING;
        xfer_ucx_flush_room(x, r);
    }
    /* a device pool's room is delivered when its copies' event completed too (I5) */
    if (r->phase != XR_FLUSHING || r->flush_pending != 0 || !xfer_cuda_room_done(x, r))
        return 0;
    pthread_mutex_lock(&x->mu);
    x->out_nowake = 1; /* its STATUS waits for xfer_out_push */
    xfer_prefill_finalize(x, r);
    x->out_nowake = 0;
    pthread_mutex_unlock(&x->mu);
    if (!x->out_held_us)
        x->out_held_us = xfer_now();
    return 1;
}

/* Hash (checksums on) and write a room: its copies or puts, without `mu` (the API callers and
 * the receive thread keep going meanwhile). The transfer thread, or tdm_xfer_prefill_send's
 * caller for a room xfer_inline_ok accepted. */
typedef struct room_write_stats {
    uint64_t sum_ns, puts, bytes;
} room_write_stats_t;

static void room_write(tdm_xfer_t *x, xroom_t *r, room_write_stats_t *ret)
{
    uint64_t t0 = r->sums ? tdm_time_mono_ns() : 0;
    for (uint32_t rank = 0; r->sums && rank < x->n_ranks; rank++)
        if (xfer_kv_sums(x, rank, r->src_pages, r->n_pages, r->sums + (size_t)rank * r->n_pages) !=
            TDM_OK)
            r->put_error = 1;
    ret->sum_ns = r->sums ? tdm_time_mono_ns() - t0 : 0;
    xfer_ucx_put_room(x, r, &ret->puts, &ret->bytes);
    xfer_cuda_put_room(x, r, &ret->puts, &ret->bytes); /* device pool: KV copies + event */
}

/* The stats of a room_write (mu held). */
static void room_write_count(tdm_xfer_t *x, const xroom_t *r, const room_write_stats_t *w)
{
    if (r->sums) {
        x->st.checksum_ns += w->sum_ns;
        x->st.checksum_bytes += xfer_room_sum_bytes(x, r->n_pages);
    }
    x->st.puts += w->puts;
    x->st.bytes_put += w->bytes;
}

static void xfer_issue(tdm_xfer_t *x, uint64_t room)
{
    pthread_mutex_lock(&x->mu);
    xroom_t *r = xfer_map_get(x, room);
    int ok = r && r->phase == XR_PUTTING;
    int skip = ok && r->abort_req;
    if (x->out_quiet && !x->out_held_us)
        x->out_held_us = xfer_now(); /* the room's TRANSFERRING frame (tdm_xfer_prefill_send) */
    pthread_mutex_unlock(&x->mu);
    if (!ok)
        return;
    uint32_t slow_ms = 0;
    int slow = !skip && xfer_fault(x, TDM_XFER_FAULT_SLOW_HOST_COPY, &slow_ms);
    /* held STATUS frames do not wait through a long copy (or an injected delay) */
    if (x->out_held_us && (slow || xfer_now() - x->out_held_us >= XFER_HOLD_US ||
                           xfer_room_sum_bytes(x, r->n_pages) > XFER_HOLD_MAX_BYTES))
        xfer_out_push(x);
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
     * not after the rooms queued behind it (its STATUS frame joins theirs, xfer_out_push). */
    if (!xfer_room_step(x, r)) {
        r->next_active = x->active;
        x->active = r;
    }
}

int xfer_inline_ok(tdm_xfer_t *x, const xroom_t *r)
{
    /* fault hooks act on the transfer thread (slow_host_copy, stall_transfer, kill_thread):
     * with them configured every room takes that path */
    if (x->cuda || x->cfg.fault || x->disconnect_pending ||
        xfer_room_sum_bytes(x, r->n_pages) > XFER_INLINE_MAX_BYTES)
        return 0;
    for (uint32_t rank = 0; rank < x->n_ranks; rank++) {
        const xfer_ucx_t *u = &x->ucx[rank];
        if (!u->ep || !u->r_kv_ptr || !u->r_aux_ptr)
            return 0; /* a put would need the transfer thread's UCX worker */
    }
    return 1;
}

void xfer_issue_inline(tdm_xfer_t *x, xroom_t *r)
{
    room_write_stats_t w;
    room_write(x, r, &w);
    r->phase = XR_FLUSHING;
    xfer_ucx_flush_room(x, r); /* every rank mapped: the fences, no UCX call */
    pthread_mutex_lock(&x->mu);
    room_write_count(x, r, &w);
    x->copy_us = xfer_now(); /* the receive thread's policy (recv_thread_policy) */
    xfer_prefill_finalize(x, r);
    x->inline_copies--;
    pthread_mutex_unlock(&x->mu);
}

static void xfer_advance(tdm_xfer_t *x)
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

static void *xfer_main(void *arg)
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
        hb(x, TDM_HB_TRANSFER);
        if (xfer_fault(x, TDM_XFER_FAULT_KILL_TRANSFER, NULL)) {
            xfer_thread_killed(x, "transfer");
            break;
        }
        pthread_mutex_lock(&x->mu);
        int moving = x->active || x->cmd_len > 0 || atomic_load(&x->n_transferring) > 0;
        pthread_mutex_unlock(&x->mu);
        uint32_t stall_ms;
        if (moving && xfer_fault(x, TDM_XFER_FAULT_STALL_TRANSFER, &stall_ms)) {
            tdm_warn(TDM_SUB_XFER, "fault stall_transfer: no progress for %u ms", stall_ms);
            xfer_out_push(x); /* frames held for this thread do not wait through the stall */
            for (uint64_t end = xfer_now() + (uint64_t)stall_ms * 1000;
                 !atomic_load(&x->stop) && xfer_now() < end;)
                tdm_time_sleep_us(10000);
        }
        xfer_ucx_progress(x);
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
                tdm_status_t st = TDM_OK;
                for (uint32_t r = 0; r < x->n_ranks && st == TDM_OK; r++)
                    st = xfer_ucx_connect(x, r, &x->reg->ranks[r], x->reg->layout.num_pages);
                x->connect_result = st;
                x->connect_done = 1;
                pthread_cond_broadcast(&x->cv);
            } else if (c.kind == XCMD_DISCONNECT) {
                x->disconnect_pending = 1;
            }
            pthread_mutex_unlock(&x->mu);
            if (c.kind == XCMD_ISSUE)
                xfer_issue(x, c.room);
        }
        xfer_ucx_progress(x);
        xfer_advance(x);
        if (x->out_held_us)
            xfer_out_push(x); /* the ring is empty: the held STATUS frames go now */
        pthread_mutex_lock(&x->mu);
        int inline_busy = x->inline_copies > 0; /* callers still copying through the mappings */
        pthread_mutex_unlock(&x->mu);
        if (x->disconnect_pending && !x->active && !inline_busy) {
            for (uint32_t r = 0; r < x->n_ranks; r++)
                xfer_ucx_disconnect(x, r);
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
                drain(x->wake_xfer);
    }
    close(ep);
    return NULL;
}

/* ---- bootstrap thread ---- */

static void conn_close(tdm_xfer_t *x, uint32_t i)
{
    close(x->conns[i].fd);
    tdm_frame_reader_free(&x->conns[i].rd);
    x->conns[i] = x->conns[--x->n_conns];
}

static void refuse(tdm_xfer_t *x, int fd, const char *why)
{
    tdm_frame_status_t f;
    uint8_t buf[TDM_FRAME_MAX_MSG + 256];
    size_t len;
    pthread_mutex_lock(&x->mu);
    x->st.register_refused++;
    xfer_event(x, "register_refused", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED, why);
    pthread_mutex_unlock(&x->mu);
    tdm_warn(TDM_SUB_XFER, "REGISTER refused: %s", why);
    memset(&f, 0, sizeof(f));
    f.state = TDM_KVPOLL_FAILED;
    f.message.data = (const uint8_t *)why;
    f.message.len = (uint32_t)strnlen(why, TDM_FRAME_MAX_MSG);
    if (tdm_frame_encode_status(&f, NULL, buf, sizeof(buf), &len) == TDM_OK)
        xfer_write_all(fd, buf, len, 500000);
}

/* Whether the peer of a connected socket is on this host: a loopback address, or the address
 * the connection arrived on (a peer dialling our own external address). Decides the endpoints'
 * error handling mode (ucx.c). */
static int peer_same_host(int fd)
{
    struct sockaddr_storage pa, la;
    socklen_t pl = sizeof(pa), ll = sizeof(la);
    if (getpeername(fd, (struct sockaddr *)&pa, &pl) < 0 ||
        getsockname(fd, (struct sockaddr *)&la, &ll) < 0 || pa.ss_family != la.ss_family)
        return 0;
    if (pa.ss_family == AF_INET) {
        const struct sockaddr_in *p = (const struct sockaddr_in *)&pa;
        const struct sockaddr_in *l = (const struct sockaddr_in *)&la;
        return (ntohl(p->sin_addr.s_addr) >> 24) == 127 || p->sin_addr.s_addr == l->sin_addr.s_addr;
    }
    if (pa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *p = (const struct sockaddr_in6 *)&pa;
        const struct sockaddr_in6 *l = (const struct sockaddr_in6 *)&la;
        return IN6_IS_ADDR_LOOPBACK(&p->sin6_addr) ||
               !memcmp(&p->sin6_addr, &l->sin6_addr, sizeof(p->sin6_addr));
    }
    return 0;
}

/* A REGISTER on a pending connection: validate, connect UCX, adopt as the channel. Returns 1 if
 * the connection was adopted or closed (the slot is gone). */
static int prefill_register(tdm_xfer_t *x, uint32_t ci, const uint8_t *body, uint32_t len)
{
    xfer_conn_t *c = &x->conns[ci];
    char why[256];
    tdm_frame_register_t *f = tdm_calloc(1, sizeof(*f));
    uint8_t *copy = tdm_malloc(len ? len : 1);
    memcpy(copy, body, len);
    if (tdm_frame_decode_register(copy, len, f, why, sizeof(why)) != TDM_OK) {
        char msg[TDM_FRAME_MAX_MSG];
        snprintf(msg, sizeof(msg), "malformed REGISTER: %s", why);
        pthread_mutex_lock(&x->mu);
        x->st.frames_malformed++;
        pthread_mutex_unlock(&x->mu);
        refuse(x, c->fd, msg);
        goto out_close;
    }
    pthread_mutex_lock(&x->mu);
    int busy = x->chan_fd >= 0;
    pthread_mutex_unlock(&x->mu);
    if (busy) {
        refuse(x, c->fd, "busy: another decode group is registered");
        goto out_close;
    }
    if (xfer_prefill_check_register(x, f, why, sizeof(why))) {
        refuse(x, c->fd, why);
        goto out_close;
    }
    int same_host = peer_same_host(c->fd);
    pthread_mutex_lock(&x->mu);
    x->peer_same_host = same_host;
    free(x->reg);
    free(x->reg_body);
    x->reg = f;
    x->reg_body = copy;
    f = NULL;
    copy = NULL;
    x->connect_done = 0;
    xfer_cmd_push(x, XCMD_CONNECT, 0);
    uint64_t end = xfer_now() + 5000000;
    while (!x->connect_done && !atomic_load(&x->stop) && xfer_now() < end) {
        pthread_mutex_unlock(&x->mu);
        tdm_time_sleep_us(1000);
        pthread_mutex_lock(&x->mu);
    }
    tdm_status_t st = x->connect_done ? x->connect_result : TDM_ERR_TIMEOUT;
    if (st != TDM_OK) {
        pthread_mutex_unlock(&x->mu);
        snprintf(why, sizeof(why), "UCX connect to the decode ranks failed: %s",
                 tdm_status_str(st));
        refuse(x, c->fd, why);
        goto out_close;
    }
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    x->chan_fd = c->fd;
    tdm_frame_reader_free(&x->chan_rd);
    x->chan_rd = c->rd;
    x->ready = 1;
    x->chan_kill = 0;
    x->last_rx_us = x->last_hb_us = xfer_now();
    out_reset(x);
    /* chunk_tokens of the verdict tells decode whether this side computes KV checksums (0 = off,
     * --disaggregation-disable-checksums); decode refuses a registration that disagrees */
    xfer_out_status(x, 0, TDM_KVPOLL_SUCCESS, "registered", NULL, 0,
                    x->cfg.disable_checksums ? 0 : x->page_size);
    xfer_event(x, "peer_registered", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_SUCCESS, "registered");
    tdm_info(TDM_SUB_XFER, "decode group %016llx registered (%u ranks)",
             (unsigned long long)x->reg->instance_id, x->reg->n_ranks);
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    x->conns[ci] = x->conns[--x->n_conns];
    return 1;

out_close:
    free(f);
    free(copy);
    conn_close(x, ci);
    return 1;
}

static void prefill_poll_conns(tdm_xfer_t *x)
{
    struct pollfd p[XFER_MAX_PENDING_CONNS + 2];
    p[0] = (struct pollfd){x->wake_boot, POLLIN, 0};
    p[1] = (struct pollfd){x->listen_fd, POLLIN, 0};
    for (uint32_t i = 0; i < x->n_conns; i++)
        p[2 + i] = (struct pollfd){x->conns[i].fd, POLLIN, 0};
    uint32_t n_conns = x->n_conns;
    if (poll(p, 2 + n_conns, 100) <= 0)
        goto expire;
    if (p[0].revents)
        drain(x->wake_boot);
    if (p[1].revents & POLLIN) {
        int fd = accept4(x->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            if (x->n_conns == XFER_MAX_PENDING_CONNS) {
                close(fd); /* cap what a client can make us hold */
            } else {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                xfer_conn_t *c = &x->conns[x->n_conns++];
                c->fd = fd;
                c->since_us = xfer_now();
                tdm_frame_reader_init(&c->rd, TDM_FRAME_MAX_BODY);
                pthread_mutex_lock(&x->mu);
                x->st.conns_accepted++;
                pthread_mutex_unlock(&x->mu);
            }
        }
    }
    /* walk backwards: closing swaps the last connection into slot i */
    for (uint32_t k = n_conns; k-- > 0;) {
        if (!(p[2 + k].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        xfer_conn_t *c = &x->conns[k];
        uint8_t *space;
        size_t avail;
        tdm_frame_reader_space(&c->rd, &space, &avail);
        ssize_t r = avail ? recv(c->fd, space, avail, MSG_DONTWAIT) : 0;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_close(x, k);
            continue;
        }
        if (r < 0)
            continue;
        tdm_frame_reader_commit(&c->rd, (size_t)r);
        for (;;) {
            tdm_frame_hdr_t h;
            const uint8_t *body;
            tdm_status_t st = tdm_frame_reader_next(&c->rd, &h, &body);
            if (st == TDM_ERR_AGAIN)
                break;
            pthread_mutex_lock(&x->mu);
            if (st != TDM_OK) {
                x->st.frames_malformed++;
                x->st.conns_closed_bad++;
            } else {
                x->st.frames_rx++;
            }
            pthread_mutex_unlock(&x->mu);
            if (st != TDM_OK) {
                conn_close(x, k);
                break;
            }
            if (h.type == TDM_FRAME_REGISTER) {
                prefill_register(x, k, body, h.length);
                break;
            }
            pthread_mutex_lock(&x->mu);
            if (h.type == 0 || h.type >= TDM_FRAME_TYPE_MAX)
                x->st.frames_unknown++;
            else
                x->st.frames_unexpected++; /* nothing but REGISTER before registration */
            pthread_mutex_unlock(&x->mu);
        }
    }
expire:
    for (uint32_t k = x->n_conns; k-- > 0;)
        if (xfer_now() - x->conns[k].since_us > x->cfg.peer_timeout_us) {
            pthread_mutex_lock(&x->mu);
            x->st.conns_closed_bad++;
            pthread_mutex_unlock(&x->mu);
            conn_close(x, k);
        }
}

static int connect_to(const char *host, uint16_t port, uint64_t timeout_us)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
        goto err_close;
    struct pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, (int)(timeout_us / 1000)) != 1)
        goto err_close;
    int err = 0;
    socklen_t el = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err)
        goto err_close;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
err_close:
    close(fd);
    return -1;
}

/* Decode: connect, REGISTER, read the verdict (STATUS for room 0). */
static void decode_handshake(tdm_xfer_t *x)
{
    uint8_t *buf = NULL;
    size_t len;
    char msg[TDM_FRAME_MAX_MSG + 1];
    int fd = connect_to(x->cfg.host, x->cfg.port, 1000000);
    x->next_connect_us = xfer_now() + 1000000;
    if (fd < 0)
        return;
    if (xfer_decode_register_frame(x, &buf, &len) != TDM_OK ||
        xfer_write_all(fd, buf, len, x->cfg.peer_timeout_us) != TDM_OK)
        goto out_close;
    tdm_frame_reader_free(&x->chan_rd);
    tdm_frame_reader_init(&x->chan_rd, TDM_FRAME_MAX_BODY);
    uint64_t end = xfer_now() + x->cfg.peer_timeout_us;
    for (;;) {
        tdm_frame_hdr_t h;
        const uint8_t *body;
        tdm_status_t st = tdm_frame_reader_next(&x->chan_rd, &h, &body);
        if (st == TDM_OK) {
            tdm_frame_status_t f;
            if (h.type != TDM_FRAME_STATUS ||
                tdm_frame_decode_status(body, h.length, &f, NULL, 0) != TDM_OK || f.room != 0)
                goto out_close;
            snprintf(msg, sizeof(msg), "%.*s", (int)f.message.len, (const char *)f.message.data);
            if (f.state == TDM_KVPOLL_SUCCESS && !f.chunk_tokens != !!x->cfg.disable_checksums)
                snprintf(msg, sizeof(msg),
                         "checksums: prefill %s KV checksums, decode %s them "
                         "(--disaggregation-disable-checksums must be set on both groups or "
                         "neither)",
                         f.chunk_tokens ? "computes" : "does not compute",
                         x->cfg.disable_checksums ? "does not verify" : "verifies");
            pthread_mutex_lock(&x->mu);
            if (f.state != TDM_KVPOLL_SUCCESS || !f.chunk_tokens != !!x->cfg.disable_checksums) {
                x->refused = 1;
                snprintf(x->refusal, sizeof(x->refusal), "%s", msg);
                x->st.register_refused++;
                xfer_event(x, "register_refused", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED, msg);
                pthread_cond_broadcast(&x->cv);
                pthread_mutex_unlock(&x->mu);
                tdm_err(TDM_SUB_XFER, "registration with the prefill group refused: %s", msg);
                x->next_connect_us = xfer_now() + 5000000;
                goto out_close;
            }
            x->chan_fd = fd;
            fd = -1;
            x->ready = 1;
            x->refused = 0;
            x->chan_kill = 0;
            x->last_rx_us = x->last_hb_us = xfer_now();
            out_reset(x);
            xfer_event(x, "peer_registered", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_SUCCESS, msg);
            xfer_decode_registered(x);
            pthread_cond_broadcast(&x->cv);
            pthread_mutex_unlock(&x->mu);
            wake(x->wake_recv);
            goto out_close;
        }
        if (st != TDM_ERR_AGAIN)
            goto out_close;
        uint64_t now = xfer_now();
        if (now >= end || atomic_load(&x->stop))
            goto out_close;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)((end - now) / 1000 + 1)) <= 0)
            continue;
        uint8_t *space;
        size_t avail;
        tdm_frame_reader_space(&x->chan_rd, &space, &avail);
        ssize_t r = recv(fd, space, avail, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            goto out_close;
        if (r > 0)
            tdm_frame_reader_commit(&x->chan_rd, (size_t)r);
    }
out_close:
    if (fd >= 0)
        close(fd);
    free(buf);
}

static void *boot_main(void *arg)
{
    tdm_xfer_t *x = arg;
    while (!atomic_load(&x->stop)) {
        hb(x, TDM_HB_BOOTSTRAP);
        if (xfer_fault(x, TDM_XFER_FAULT_KILL_BOOTSTRAP, NULL)) {
            xfer_thread_killed(x, "bootstrap");
            return NULL;
        }
        pthread_mutex_lock(&x->mu);
        /* read the clock under the lock: a stamp taken before it could predate a room opened
         * or a frame received meanwhile, and an unsigned age would wrap into a timeout */
        uint64_t now = xfer_now();
        tdm_xfer_rooms_tick(x->rooms, now);
        if (x->cfg.role == TDM_XFER_DECODE)
            xfer_decode_tick(x, now);
        int have_chan = x->chan_fd >= 0;
        if (have_chan && x->ready) {
            if (now - x->last_hb_us >= x->cfg.heartbeat_us) {
                tdm_frame_heartbeat_t f = {x->cfg.instance_id, ++x->hb_seq, tdm_time_wall_us()};
                uint8_t buf[64];
                size_t len;
                if (tdm_frame_encode_heartbeat(&f, buf, sizeof(buf), &len) == TDM_OK)
                    xfer_out(x, buf, len);
                x->last_hb_us = now;
            }
            if (now - x->last_rx_us >= x->cfg.peer_timeout_us && !x->chan_kill) {
                x->chan_kill = 1;
                wake(x->wake_recv);
            }
        }
        pthread_mutex_unlock(&x->mu);
        if (x->cfg.role == TDM_XFER_PREFILL) {
            prefill_poll_conns(x);
        } else if (!have_chan && now >= x->next_connect_us) {
            decode_handshake(x);
        } else {
            struct pollfd p = {x->wake_boot, POLLIN, 0};
            if (poll(&p, 1, 100) > 0)
                drain(x->wake_boot);
        }
    }
    return NULL;
}

/* ---- lifecycle ---- */

static tdm_status_t listen_on(tdm_xfer_t *x)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    int one = 1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(x->cfg.port);
    if (inet_pton(AF_INET, x->cfg.host, &sa.sin_addr) != 1) {
        tdm_err(TDM_SUB_XFER, "bootstrap: bad bind address '%s'", x->cfg.host);
        return TDM_ERR_INVAL;
    }
    x->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (x->listen_fd < 0)
        return TDM_ERR_IO;
    setsockopt(x->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(x->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(x->listen_fd, 64) < 0 ||
        getsockname(x->listen_fd, (struct sockaddr *)&sa, &sl) < 0) {
        tdm_err(TDM_SUB_XFER, "bootstrap: cannot listen on %s:%u: %s", x->cfg.host, x->cfg.port,
                strerror(errno));
        return TDM_ERR_IO;
    }
    x->port = ntohs(sa.sin_port);
    return TDM_OK;
}

static tdm_status_t check_cfg(const tdm_xfer_cfg_t *c)
{
    char why[128];
    if ((unsigned)c->role >= TDM_XFER_ROLE_MAX || c->n_ranks == 0 ||
        c->n_ranks > TDM_XFER_RANKS_MAX)
        return TDM_ERR_INVAL;
    if (c->ucx_alloc) {
        if (c->role != TDM_XFER_DECODE || c->kv_num_pages == 0 || c->kv_num_pages == UINT32_MAX)
            return TDM_ERR_INVAL;
        for (uint32_t r = 0; r < c->n_ranks; r++) {
            tdm_layout_record_t a, b;
            if (c->kv[r] || !c->kv_layout[r])
                return TDM_ERR_INVAL;
            tdm_kv_layout_record(c->kv_layout[0], 0, &a);
            tdm_kv_layout_record(c->kv_layout[r], 0, &b);
            if (!tdm_layout_equal(&a, &b, why, sizeof(why)))
                return TDM_ERR_INVAL;
        }
    }
    if ((unsigned)c->ep_err_mode >= TDM_XFER_ERR_MODE_MAX)
        return TDM_ERR_INVAL;
    for (uint32_t r = 0; r < c->n_ranks && !c->ucx_alloc; r++) {
        tdm_layout_record_t a, b;
        if (!c->kv[r] || !c->kv[r]->layout || !c->kv[r]->base)
            return TDM_ERR_INVAL;
        tdm_kv_layout_record(c->kv[0]->layout, 0, &a);
        tdm_kv_layout_record(c->kv[r]->layout, 0, &b);
        if (!tdm_layout_equal(&a, &b, why, sizeof(why)) ||
            c->kv[r]->num_pages != c->kv[0]->num_pages)
            return TDM_ERR_INVAL; /* ranks of one group share one layout */
    }
    if (c->role == TDM_XFER_DECODE && (!c->host || c->port == 0))
        return TDM_ERR_INVAL;
    if (c->kv_cuda && c->ucx_alloc)
        return TDM_ERR_INVAL;
    return TDM_OK;
}

tdm_status_t tdm_xfer_init(const tdm_xfer_cfg_t *cfg, tdm_xfer_t **ret)
{
    tdm_status_t st;
    if (!cfg || !ret)
        return TDM_ERR_INVAL;
    TDM_TRY(check_cfg(cfg));
    tdm_xfer_t *x = tdm_calloc(1, sizeof(*x));
    x->cfg = *cfg;
    tdm_xfer_cfg_t *c = &x->cfg;
    if (!c->host)
        c->host = "127.0.0.1";
    if (!c->max_rooms)
        c->max_rooms = 4096;
    if (!c->aux_slots)
        c->aux_slots = 1024;
    if (!c->heartbeat_us)
        c->heartbeat_us = 1000000;
    if (!c->peer_timeout_us)
        c->peer_timeout_us = 3000000;
    if (!c->bootstrap_timeout_us)
        c->bootstrap_timeout_us = 30000000;
    if (!c->waiting_timeout_us)
        c->waiting_timeout_us = 120000000;
    if (!c->abort_ack_timeout_us)
        c->abort_ack_timeout_us = 5000000;
    if (!c->cork_hold_us)
        c->cork_hold_us = XFER_HOLD_US;
    x->n_ranks = c->n_ranks;
    if (c->ucx_alloc) {
        x->page_size = c->kv_layout[0]->page_size;
        tdm_kv_layout_record(c->kv_layout[0], c->kv_num_pages, &x->layout);
    } else {
        x->page_size = c->kv[0]->layout->page_size;
        tdm_kv_layout_record(c->kv[0]->layout, c->kv[0]->num_pages, &x->layout);
    }
    x->chan_fd = x->listen_fd = -1;
    x->wake_recv = x->wake_xfer = x->wake_boot = -1;
    for (uint32_t r = 0; r < TDM_XFER_RANKS_MAX; r++)
        x->ucx[r].efd = -1;
    /* `mu` is held for microseconds by the API callers and the receive thread alike: a waiter
     * spins briefly before it sleeps (bench/transfer, 512 KiB rooms, 7 alternating runs on the
     * 2-vCPU host: median 33.4 against 30.1 GB/s, best 46.8 against 40.2: a futex sleep and wake
     * is two context switches here). TDM_XFER_MU_ADAPTIVE=0: the plain mutex (A/B). */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    const char *adaptive = getenv("TDM_XFER_MU_ADAPTIVE");
    if (!adaptive || strcmp(adaptive, "0"))
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&x->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&x->cv, NULL);
    tdm_frame_reader_init(&x->chan_rd, TDM_FRAME_MAX_BODY);

    uint64_t tomb = c->bootstrap_timeout_us;
    if (tomb < 2 * c->abort_ack_timeout_us)
        tomb = 2 * c->abort_ack_timeout_us;
    tdm_xfer_room_cfg_t rc = {
        c->max_rooms,  c->n_ranks, c->bootstrap_timeout_us, c->waiting_timeout_us, tomb,
        room_event_cb, x};
    TDM_CHECK_GOTO(tdm_xfer_rooms_init(&rc, &x->rooms), st, err_free);
    uint32_t n = 16;
    while (n < c->max_rooms * 4u)
        n <<= 1;
    x->map = tdm_calloc(n, sizeof(*x->map));
    x->map_mask = n - 1;
    x->cmd_cap = c->max_rooms + 16;
    x->cmds = tdm_calloc(x->cmd_cap, sizeof(*x->cmds));
    x->reqq_cap = c->max_rooms;
    x->reqq = tdm_calloc(x->reqq_cap, sizeof(*x->reqq));
    x->wake_recv = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    x->wake_xfer = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    x->wake_boot = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (x->wake_recv < 0 || x->wake_xfer < 0 || x->wake_boot < 0) {
        st = TDM_ERR_IO;
        goto err_free;
    }
    if (c->role == TDM_XFER_DECODE) {
        size_t aux_bytes = (size_t)c->aux_slots * TDM_XFER_AUX_BYTES;
        for (uint32_t r = 0; r < x->n_ranks && !c->ucx_alloc; r++) {
            x->aux[r] = aligned_alloc(4096, (aux_bytes + 4095) & ~(size_t)4095);
            if (!x->aux[r]) {
                st = TDM_ERR_NOMEM;
                goto err_free;
            }
            memset(x->aux[r], 0, aux_bytes);
        }
        x->aux_free = tdm_calloc(c->aux_slots, sizeof(uint32_t));
        for (uint32_t i = 0; i < c->aux_slots; i++)
            x->aux_free[i] = c->aux_slots - 1 - i;
        x->n_aux_free = c->aux_slots;
    } else {
        TDM_CHECK_GOTO(listen_on(x), st, err_free);
    }
    TDM_CHECK_GOTO(xfer_kvmem_init(x), st, err_free);
    for (uint32_t r = 0; r < x->n_ranks; r++)
        TDM_CHECK_GOTO(xfer_ucx_init(x, r), st, err_free);
    if (pthread_create(&x->xfer_th, NULL, xfer_main, x) != 0) {
        st = TDM_ERR_IO;
        goto err_free;
    }
    if (pthread_create(&x->recv_th, NULL, recv_main, x) != 0) {
        atomic_store(&x->stop, 1);
        pthread_join(x->xfer_th, NULL);
        st = TDM_ERR_IO;
        goto err_free;
    }
    if (pthread_create(&x->boot_th, NULL, boot_main, x) != 0) {
        atomic_store(&x->stop, 1);
        pthread_join(x->xfer_th, NULL);
        pthread_join(x->recv_th, NULL);
        st = TDM_ERR_IO;
        goto err_free;
    }
    x->threads_started = 1;
    *ret = x;
    return TDM_OK;

err_free:
    tdm_xfer_free(x);
    return st;
}

void tdm_xfer_free(tdm_xfer_t *x)
{
    if (!x)
        return;
    if (x->threads_started) {
        atomic_store(&x->stop, 1);
        wake(x->wake_boot);
        wake(x->wake_recv);
        wake(x->wake_xfer);
        pthread_join(x->boot_th, NULL);
        pthread_join(x->recv_th, NULL);
        pthread_join(x->xfer_th, NULL);
    }
    /* rooms still moving data hold UCX requests: progress them out before tearing down */
    for (int spin = 0; x->active && spin < 100000; spin++) {
        xfer_ucx_progress(x);
        xfer_advance(x);
    }
    for (uint32_t r = 0; r < x->n_ranks; r++)
        if (x->ucx[r].ctx)
            xfer_ucx_fini(x, r);
    xfer_kvmem_fini(x); /* before the eventfds close: its stream may still write wake_xfer */
    if (x->chan_fd >= 0)
        close(x->chan_fd);
    if (x->listen_fd >= 0)
        close(x->listen_fd);
    while (x->n_conns)
        conn_close(x, 0);
    if (x->wake_recv >= 0)
        close(x->wake_recv);
    if (x->wake_xfer >= 0)
        close(x->wake_xfer);
    if (x->wake_boot >= 0)
        close(x->wake_boot);
    if (x->map)
        for (uint32_t i = 0; i <= x->map_mask; i++)
            xroom_free(x->map[i]);
    free(x->map);
    free(x->cmds);
    free(x->reqq);
    free(x->outq);
    free(x->sendq);
    free(x->aux_free);
    free(x->reg);
    free(x->reg_body);
    for (uint32_t r = 0; r < TDM_XFER_RANKS_MAX && !x->cfg.ucx_alloc; r++)
        free(x->aux[r]);
    tdm_frame_reader_free(&x->chan_rd);
    tdm_xfer_rooms_free(x->rooms);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

tdm_kv_pool_t *tdm_xfer_kv_pool(tdm_xfer_t *x, uint32_t rank)
{
    return x && rank < x->n_ranks ? x->pool[rank] : NULL;
}

uint16_t tdm_xfer_port(const tdm_xfer_t *x)
{
    return x->port;
}

tdm_status_t tdm_xfer_wait_ready(tdm_xfer_t *x, uint64_t timeout_us, char *why, size_t why_len)
{
    uint64_t end = xfer_now() + timeout_us;
    tdm_status_t st = TDM_ERR_TIMEOUT;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        if (x->ready) {
            st = TDM_OK;
            break;
        }
        if (x->refused) {
            if (why)
                snprintf(why, why_len, "%s", x->refusal);
            st = TDM_ERR_CORRUPT;
            break;
        }
        if (xfer_now() >= end)
            break;
        pthread_mutex_unlock(&x->mu);
        tdm_time_sleep_us(1000);
        pthread_mutex_lock(&x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return st;
}

void tdm_xfer_stats(tdm_xfer_t *x, tdm_xfer_stats_t *ret)
{
    pthread_mutex_lock(&x->mu);
    *ret = x->st;
    pthread_mutex_unlock(&x->mu);
    ret->faults_fired = atomic_load(&x->faults_fired);
}

static void count_room(void *ctx, uint64_t room, const tdm_xfer_room_info_t *info)
{
    uint32_t *n = ctx;
    (void)room;
    if ((unsigned)info->state < TDM_KVPOLL_MAX)
        n[info->state]++;
}

void tdm_xfer_room_counts(tdm_xfer_t *x, uint32_t ret[TDM_KVPOLL_MAX])
{
    uint32_t n[TDM_KVPOLL_MAX] = {0};
    pthread_mutex_lock(&x->mu);
    tdm_xfer_rooms_foreach(x->rooms, count_room, n);
    pthread_mutex_unlock(&x->mu);
    memcpy(ret, n, sizeof(n));
}

tdm_status_t tdm_xfer_poll(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t *ret_state)
{
    tdm_xfer_room_info_t info;
    pthread_mutex_lock(&x->mu);
    tdm_status_t st = tdm_xfer_room_get(x->rooms, room, &info);
    if (st != TDM_OK && xfer_map_get(x, room)) {
        info.state = TDM_KVPOLL_FAILED; /* tombstone expired, room not released yet */
        st = TDM_OK;
    }
    pthread_mutex_unlock(&x->mu);
    if (st == TDM_OK)
        *ret_state = info.state;
    return st;
}

tdm_status_t tdm_xfer_abort(tdm_xfer_t *x, uint64_t room, const char *reason)
{
    if (room == 0 || room > 0x7fffffffffffffffull)
        return TDM_ERR_INVAL;
    pthread_mutex_lock(&x->mu);
    tdm_status_t st = x->cfg.role == TDM_XFER_PREFILL ? xfer_prefill_abort(x, room, reason)
                                                      : xfer_decode_abort(x, room, reason);
    pthread_mutex_unlock(&x->mu);
    return st;
}

tdm_status_t tdm_xfer_release(tdm_xfer_t *x, uint64_t room)
{
    pthread_mutex_lock(&x->mu);
    tdm_status_t st = x->cfg.role == TDM_XFER_PREFILL ? xfer_prefill_release(x, room)
                                                      : xfer_decode_release(x, room);
    pthread_mutex_unlock(&x->mu);
    return st;
}
