/*
 * recv.c — the transfer engine's receive thread (xfer_int.h): owns the registered channel's
 * socket, reads and dispatches frames to the role (prefill.c, decode.c), writes the outbound
 * queue, and closes the channel on EOF, a bad frame or silence.
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

/* ---- receive thread: the registered channel ---- */

void tdm_xfer_close_channel(tdm_xfer_t *x, const char *why)
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
        tdm_xfer_out_reset(x);
        tdm_frame_reader_free(&x->chan_rd);
        tdm_frame_reader_init(&x->chan_rd, TDM_FRAME_MAX_BODY);
        if (was_ready) {
            /* the rooms first, then the event naming them: the alert it opens (docs/alerts.md
             * TRANSFER_STALL, the partition form) takes its evidence when it opens, and a room
             * failed after the event was missing from it (tests/chaos/chaos.py scenario 8) */
            xfer_lost_t lost = {{0}, 0, 0};
            x->st.peer_lost++;
            if (x->cfg.role == TDM_XFER_PREFILL)
                tdm_xfer_prefill_peer_lost(x, &lost);
            else
                tdm_xfer_decode_peer_lost(x, &lost);
            tdm_warn(TDM_SUB_XFER, "peer lost: %s (%u rooms failed)", why, lost.failed);
            tdm_xfer_emit_lost(x, why, &lost);
        }
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
}

static void dispatch(tdm_xfer_t *x, const tdm_frame_hdr_t *h, const uint8_t *body)
{
    x->last_rx_us = tdm_xfer_now();
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
        tdm_xfer_prefill_frame(x, h, body);
    else
        tdm_xfer_decode_frame(x, h, body);
}

/* During a burst of rooms copied by an API caller (tdm_xfer_issue_inline within the last
 * XFER_BATCH_US) the prefill receive thread runs under SCHED_BATCH: woken for a STATUS to send or
 * a TRANSFER_INFO to read, it does not preempt the caller's copy but runs when a core is free (at
 * once on an idle host, after the copier's slice on a busy one), with every frame queued meanwhile
 * in one send. Measured on the 2-vCPU bench host (bench/transfer, 512 KiB rooms, window 16):
 * with wakeup preemption ~1.5-1.9 context switches per room and 16-30 GB/s; SCHED_BATCH on the
 * prefill receive thread ~0.5-0.9 and 28-39 GB/s (on the decode one as well: no further gain).
 * Outside bursts the thread runs under the default policy, so a frame on a host busy with other
 * work (the worker's forward pass) waits for no scheduler tick. */
void tdm_xfer_recv_thread_policy(int batch)
{
#ifdef SCHED_BATCH
    struct sched_param sp = {0};
    if (pthread_setschedparam(pthread_self(), batch ? SCHED_BATCH : SCHED_OTHER, &sp) != 0)
        tdm_dbg(TDM_SUB_XFER, "receive thread: scheduling policy not changed");
#else
    (void)batch;
#endif
}

void *tdm_xfer_recv_main(void *arg)
{
    tdm_xfer_t *x = arg;
    int batch = 0; /* this thread's policy: SCHED_BATCH during a burst of inline copies */
    while (!atomic_load(&x->stop)) {
        tdm_xfer_hb(x, TDM_HB_RECV);
        if (tdm_xfer_fault_fires(x, TDM_XFER_FAULT_KILL_RECV, NULL)) {
            tdm_xfer_thread_killed(x, "recv");
            return NULL;
        }
        pthread_mutex_lock(&x->mu);
        int fd = x->chan_fd;
        /* frames queued while this thread was awake went without a wake: they leave now, and
         * what the socket does not take waits for POLLOUT */
        if (fd >= 0 && !x->chan_kill)
            tdm_xfer_out_flush(x, 1);
        int kill = x->chan_kill;
        int want_out = tdm_xfer_out_pending(x) > 0 && !x->sending; /* an active sender takes them */
        x->recv_awake = 0; /* from here a frame queued wakes us */
        const int burst = x->copy_us && tdm_xfer_now() - x->copy_us < XFER_BATCH_US;
        pthread_mutex_unlock(&x->mu);
        if (burst != batch) {
            tdm_xfer_recv_thread_policy(burst);
            batch = burst;
        }
        if (fd >= 0 && kill) {
            tdm_xfer_close_channel(x, "peer timeout (no frame for the heartbeat timeout)");
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
            tdm_xfer_drain(x->wake_recv);
        if (fd < 0 || !(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            continue; /* frames queued, or POLLOUT: sent at the loop's top */
        uint8_t *space;
        size_t avail;
        tdm_frame_reader_space(&x->chan_rd, &space, &avail);
        ssize_t r = avail ? recv(fd, space, avail, MSG_DONTWAIT) : 0;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            tdm_xfer_close_channel(x, r == 0 ? "peer closed the channel" : "channel read error");
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
                tdm_xfer_close_channel(x, "bad frame header on the channel");
                pthread_mutex_lock(&x->mu);
                break;
            }
            dispatch(x, &h, body);
        }
        pthread_mutex_unlock(&x->mu);
    }
    return NULL;
}
