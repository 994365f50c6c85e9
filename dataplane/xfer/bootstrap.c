/*
 * bootstrap.c — the transfer engine's bootstrap thread (xfer_int.h): prefill listens and takes
 * REGISTER from decode groups (layout and configuration checked, refusals counted), decode
 * connects and registers; heartbeats and timeouts on the channel.
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

/* ---- bootstrap thread ---- */

void tdm_xfer_conn_close(tdm_xfer_t *x, uint32_t i)
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
    tdm_xfer_emit(x, "register_refused", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED, why);
    pthread_mutex_unlock(&x->mu);
    tdm_warn(TDM_SUB_XFER, "REGISTER refused: %s", why);
    memset(&f, 0, sizeof(f));
    f.state = TDM_KVPOLL_FAILED;
    f.message.data = (const uint8_t *)why;
    f.message.len = (uint32_t)strnlen(why, TDM_FRAME_MAX_MSG);
    if (tdm_frame_encode_status(&f, NULL, NULL, buf, sizeof(buf), &len) == TDM_OK)
        tdm_xfer_write_all(fd, buf, len, 500000);
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
    if (tdm_xfer_prefill_check_register(x, f, why, sizeof(why))) {
        refuse(x, c->fd, why);
        goto out_close;
    }
    int same_host = peer_same_host(c->fd);
    pthread_mutex_lock(&x->mu);
    if (x->connecting) { /* the connect to `reg` of a registration that timed out still runs */
        pthread_mutex_unlock(&x->mu);
        refuse(x, c->fd, "busy: the connect to the last registration is still running");
        goto out_close;
    }
    x->peer_same_host = same_host;
    free(x->reg);
    free(x->reg_body);
    x->reg = f;
    x->reg_body = copy;
    f = NULL;
    copy = NULL;
    x->connect_done = 0;
    tdm_xfer_cmd_push(x, XCMD_CONNECT, 0);
    uint64_t end = tdm_xfer_now() + 5000000;
    while (!x->connect_done && !atomic_load(&x->stop) && tdm_xfer_now() < end) {
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
    x->last_rx_us = x->last_hb_us = tdm_xfer_now();
    tdm_xfer_out_reset(x);
    /* chunk_tokens of the verdict tells decode whether this side computes KV checksums (0 = off,
     * --disaggregation-disable-checksums); decode refuses a registration that disagrees */
    tdm_xfer_out_status(x, 0, TDM_KVPOLL_SUCCESS, "registered", NULL, 0,
                        x->cfg.disable_checksums ? 0 : x->page_size);
    tdm_xfer_emit(x, "peer_registered", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_SUCCESS, "registered");
    tdm_info(TDM_SUB_XFER, "decode group %016llx registered (%u ranks)",
             (unsigned long long)x->reg->instance_id, x->reg->n_ranks);
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    x->conns[ci] = x->conns[--x->n_conns];
    return 1;

out_close:
    free(f);
    free(copy);
    tdm_xfer_conn_close(x, ci);
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
        tdm_xfer_drain(x->wake_boot);
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
                c->since_us = tdm_xfer_now();
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
            tdm_xfer_conn_close(x, k);
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
                tdm_xfer_conn_close(x, k);
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
        if (tdm_xfer_now() - x->conns[k].since_us > x->cfg.peer_timeout_us) {
            pthread_mutex_lock(&x->mu);
            x->st.conns_closed_bad++;
            pthread_mutex_unlock(&x->mu);
            tdm_xfer_conn_close(x, k);
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
    x->next_connect_us = tdm_xfer_now() + 1000000;
    if (fd < 0)
        return;
    if (tdm_xfer_decode_register_frame(x, &buf, &len) != TDM_OK ||
        tdm_xfer_write_all(fd, buf, len, x->cfg.peer_timeout_us) != TDM_OK)
        goto out_close;
    tdm_frame_reader_free(&x->chan_rd);
    tdm_frame_reader_init(&x->chan_rd, TDM_FRAME_MAX_BODY);
    uint64_t end = tdm_xfer_now() + x->cfg.peer_timeout_us;
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
                tdm_xfer_emit(x, "register_refused", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED, msg);
                pthread_cond_broadcast(&x->cv);
                pthread_mutex_unlock(&x->mu);
                tdm_err(TDM_SUB_XFER, "registration with the prefill group refused: %s", msg);
                x->next_connect_us = tdm_xfer_now() + 5000000;
                goto out_close;
            }
            x->chan_fd = fd;
            fd = -1;
            x->ready = 1;
            x->refused = 0;
            x->chan_kill = 0;
            x->last_rx_us = x->last_hb_us = tdm_xfer_now();
            tdm_xfer_out_reset(x);
            tdm_xfer_emit(x, "peer_registered", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_SUCCESS, msg);
            tdm_xfer_decode_registered(x);
            pthread_cond_broadcast(&x->cv);
            pthread_mutex_unlock(&x->mu);
            tdm_xfer_wake(x->wake_recv);
            goto out_close;
        }
        if (st != TDM_ERR_AGAIN)
            goto out_close;
        uint64_t now = tdm_xfer_now();
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

void *tdm_xfer_boot_main(void *arg)
{
    tdm_xfer_t *x = arg;
    while (!atomic_load(&x->stop)) {
        tdm_xfer_hb(x, TDM_HB_BOOTSTRAP);
        if (tdm_xfer_fault_fires(x, TDM_XFER_FAULT_KILL_BOOTSTRAP, NULL)) {
            tdm_xfer_thread_killed(x, "bootstrap");
            return NULL;
        }
        pthread_mutex_lock(&x->mu);
        /* read the clock under the lock: a stamp taken before it could predate a room opened
         * or a frame received meanwhile, and an unsigned age would wrap into a timeout */
        uint64_t now = tdm_xfer_now();
        tdm_xfer_rooms_tick(x->rooms, now);
        if (x->cfg.role == TDM_XFER_DECODE)
            tdm_xfer_decode_tick(x, now);
        int have_chan = x->chan_fd >= 0;
        int renewing = x->renew_pending; /* decode: new UCX workers first (decode.c) */
        if (have_chan && x->ready) {
            if (now - x->last_hb_us >= x->cfg.heartbeat_us) {
                tdm_frame_heartbeat_t f = {x->cfg.instance_id, ++x->hb_seq, tdm_time_wall_us()};
                uint8_t buf[64];
                size_t len;
                if (tdm_frame_encode_heartbeat(&f, buf, sizeof(buf), &len) == TDM_OK)
                    tdm_xfer_out(x, buf, len);
                x->last_hb_us = now;
            }
            if (now - x->last_rx_us >= x->cfg.peer_timeout_us && !x->chan_kill) {
                x->chan_kill = 1;
                tdm_xfer_wake(x->wake_recv);
            }
        }
        pthread_mutex_unlock(&x->mu);
        if (x->cfg.role == TDM_XFER_PREFILL) {
            prefill_poll_conns(x);
        } else if (!have_chan && !renewing && now >= x->next_connect_us) {
            decode_handshake(x);
        } else {
            struct pollfd p = {x->wake_boot, POLLIN, 0};
            if (poll(&p, 1, 100) > 0)
                tdm_xfer_drain(x->wake_boot);
        }
    }
    return NULL;
}
