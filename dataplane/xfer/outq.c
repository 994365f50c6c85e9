/*
 * outq.c — the transfer engine's outbound frame queue (xfer_int.h): frames queued under the
 * engine's lock and written by the receive thread, or at once by the queuing thread when the
 * socket takes them; corking (tdm_xfer_cork) holds frames for one write; the command ring to the
 * transfer thread.
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

/* ---- outbound queue ---- */

/* Bytes queued and not yet taken by the socket (mu held). */
size_t tdm_xfer_out_pending(const tdm_xfer_t *x)
{
    return x->outq_len - x->outq_off + x->sendq_len - x->sendq_off;
}

/* A new or closed channel starts with empty queues (mu held, no sender active). */
void tdm_xfer_out_reset(tdm_xfer_t *x)
{
    x->outq_len = x->outq_off = 0;
    x->sendq_len = x->sendq_off = 0;
    x->out_quiet = 0;
}

/* Send what the outbound queue holds from the calling thread (mu not held): no wake of the
 * receive thread unless the socket takes only part. */
void tdm_xfer_out_send_now(tdm_xfer_t *x)
{
    pthread_mutex_lock(&x->mu);
    tdm_xfer_out_flush(x, 0);
    pthread_mutex_unlock(&x->mu);
}

/* The engine this thread corked (tdm_xfer_cork), how deep, and since when a frame of it waits
 * (0: none since this thread's last flush). */
static _Thread_local const tdm_xfer_t *tl_cork;
static _Thread_local uint32_t tl_cork_depth;
static _Thread_local uint64_t tl_cork_first_us;

void tdm_xfer_cork_due(tdm_xfer_t *x, uint32_t copy_pages)
{
    if (tl_cork != x || !tl_cork_first_us)
        return;
    if (tdm_xfer_now() - tl_cork_first_us < x->cfg.cork_hold_us &&
        !(copy_pages && tdm_xfer_room_sum_bytes(x, copy_pages) > XFER_HOLD_MAX_BYTES))
        return;
    tl_cork_first_us = 0;
    tdm_xfer_out_send_now(x);
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
    tdm_xfer_out_send_now(x);
}

tdm_status_t tdm_xfer_out(tdm_xfer_t *x, const uint8_t *frame, size_t len)
{
    if (x->chan_fd < 0 || !x->ready)
        return TDM_ERR_PEER;
    /* The receive thread sends everything queued whenever it runs: it needs a wake only when
     * the queue goes from empty to not and no sender is active (a sender takes every byte
     * queued before it stops, under `mu`). One eventfd write per burst of frames, not per
     * frame. Frames queued without a tdm_xfer_wake (out_nowake: the transfer thread sends them
     * itself, tdm_xfer_out_push) leave the queue "quiet": the next frame queued with a wake wakes
     * the receive thread, which sends them all, in order. While the receive thread is awake
     * (recv_awake) it sends them before it sleeps again: no wake either. A thread that corked
     * the engine (tdm_xfer_cork) queues without a wake and sends at its uncork. */
    int was_empty = (tdm_xfer_out_pending(x) == 0 && !x->sending) || x->out_quiet;
    if (x->outq_off > 0 && x->outq_off == x->outq_len)
        x->outq_off = x->outq_len = 0;
    if (tdm_xfer_out_pending(x) + len > XFER_OUTQ_MAX) {
        x->chan_kill = 1; /* the peer stopped reading */
        tdm_xfer_wake(x->wake_recv);
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
        tl_cork_first_us = tdm_xfer_now();
    if (x->out_nowake || tl_cork == x) {
        x->out_quiet |= was_empty;
    } else if (was_empty && !x->recv_awake) {
        x->out_quiet = 0;
        tdm_xfer_wake(x->wake_recv);
    }
    return TDM_OK;
}

/* Write what the outbound queue holds from the calling thread (mu held; released during the
 * send and held again on return). A no-op while another thread is sending: that one takes these
 * bytes too before it stops. What the socket does not take waits for the receive thread's
 * POLLOUT: another caller (is_recv 0) wakes it for them. */
void tdm_xfer_out_flush(tdm_xfer_t *x, int is_recv)
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
    if ((tdm_xfer_out_pending(x) || x->chan_kill) && !is_recv)
        tdm_xfer_wake(x->wake_recv);
}

static tdm_status_t out_status(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t state, const char *msg,
                               const uint64_t *sums, uint32_t n_sums, const uint64_t *seg_sums,
                               uint32_t n_seg_sums, uint32_t chunk_tokens)
{
    tdm_frame_status_t f;
    size_t cap = 256 + TDM_FRAME_MAX_MSG + ((size_t)n_sums + n_seg_sums) * 8, len;
    memset(&f, 0, sizeof(f));
    f.room = room;
    f.state = (uint8_t)state;
    f.chunk_tokens = chunk_tokens;
    f.n_checksums = n_sums;
    f.n_seg_sums = n_sums ? n_seg_sums : 0;
    if (msg) {
        size_t n = strlen(msg);
        f.message.data = (const uint8_t *)msg;
        f.message.len = (uint32_t)(n > TDM_FRAME_MAX_MSG ? TDM_FRAME_MAX_MSG : n);
    }
    uint8_t *buf = tdm_malloc(cap);
    tdm_status_t st = tdm_frame_encode_status(&f, sums, seg_sums, buf, cap, &len);
    if (st == TDM_OK)
        st = tdm_xfer_out(x, buf, len);
    free(buf);
    return st;
}

tdm_status_t tdm_xfer_out_status(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t state, const char *msg,
                                 const uint64_t *sums, uint32_t n_sums, uint32_t chunk_tokens)
{
    return out_status(x, room, state, msg, sums, n_sums, NULL, 0, chunk_tokens);
}

tdm_status_t tdm_xfer_out_status_sums(tdm_xfer_t *x, uint64_t room, const uint64_t *sums,
                                      uint32_t n_sums, const uint64_t *seg_sums,
                                      uint32_t n_seg_sums, uint32_t chunk_tokens)
{
    return out_status(x, room, TDM_KVPOLL_SUCCESS, NULL, sums, n_sums, seg_sums, n_seg_sums,
                      chunk_tokens);
}

tdm_status_t tdm_xfer_out_abort_ack(tdm_xfer_t *x, uint64_t room, int known)
{
    tdm_frame_abort_ack_t f = {room, 1, (uint8_t)known};
    uint8_t buf[64];
    size_t len;
    TDM_TRY(tdm_frame_encode_abort_ack(&f, buf, sizeof(buf), &len));
    return tdm_xfer_out(x, buf, len);
}

void tdm_xfer_cmd_push(tdm_xfer_t *x, int kind, uint64_t room)
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
        tdm_xfer_wake(x->wake_xfer);
}

tdm_status_t tdm_xfer_write_all(int fd, const uint8_t *buf, size_t len, uint64_t timeout_us)
{
    uint64_t end = tdm_xfer_now() + timeout_us;
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return TDM_ERR_IO;
        uint64_t now = tdm_xfer_now();
        if (now >= end)
            return TDM_ERR_TIMEOUT;
        struct pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, (int)((end - now) / 1000 + 1));
    }
    return TDM_OK;
}
