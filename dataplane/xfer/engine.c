/*
 * engine.c — the transfer engine's skeleton shared by both roles: lifecycle, the room map and
 * events. Three threads: the bootstrap thread (bootstrap.c) owns listening / connecting, the
 * REGISTER handshake, heartbeats and timeouts; the receive thread (recv.c) owns the registered
 * channel's socket (reads frames, writes the outbound queue of outq.c, closes it); the transfer
 * thread (mover.c) owns UCX. Role logic lives in prefill.c and decode.c.
 */
#include "config.h"

#include <arpa/inet.h>
#include <assert.h>
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

uint64_t tdm_xfer_now(void)
{
    return tdm_time_mono_us();
}

void tdm_xfer_hb(tdm_xfer_t *x, tdm_hb_thread_t t)
{
    if (x->cfg.progress)
        tdm_progress_heartbeat(x->cfg.progress, t, tdm_xfer_now());
}

int tdm_xfer_fault_fires(tdm_xfer_t *x, tdm_xfer_fault_t f, uint32_t *ret_arg)
{
    uint32_t arg = 0;
    if (!x->cfg.fault || !x->cfg.fault(x->cfg.ctx, f, &arg))
        return 0;
    atomic_fetch_add(&x->faults_fired, 1);
    if (ret_arg)
        *ret_arg = arg;
    return 1;
}

void tdm_xfer_thread_killed(tdm_xfer_t *x, const char *thread)
{
    char why[96];
    snprintf(why, sizeof(why), "fault kill_thread: the %s thread exits", thread);
    tdm_err(TDM_SUB_XFER, "%s (its heartbeat stops; /health reports it)", why);
    pthread_mutex_lock(&x->mu);
    tdm_xfer_emit(x, "thread_exit", 0, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED, why);
    pthread_mutex_unlock(&x->mu);
}

void tdm_xfer_wake(int fd)
{
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof(one));
    (void)n;
}

void tdm_xfer_drain(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
}

/* ---- the mover records, kept in the rooms' own records (room.h) ---- */

xroom_t *tdm_xfer_map_get(tdm_xfer_t *x, uint64_t room)
{
    return tdm_xfer_room_mover(x->rooms, room);
}

/* The callers opened the room (its record exists) and checked tdm_xfer_rooms_movers first. */
void tdm_xfer_map_put(tdm_xfer_t *x, xroom_t *r)
{
    tdm_status_t st = tdm_xfer_room_attach(x->rooms, r->room, r);
    assert(st == TDM_OK);
    (void)st;
}

void tdm_xfer_map_del(tdm_xfer_t *x, uint64_t room)
{
    tdm_xfer_room_detach(x->rooms, room);
}

void tdm_xroom_free(xroom_t *r)
{
    if (!r)
        return;
    free(r->pages);
    free(r->src_pages);
    free(r->sums);
    free(r->seg_sums);
    free(r->prompt);
    free(r);
}

/* ---- events ---- */

void tdm_xfer_emit_mismatch(tdm_xfer_t *x, const char *type, uint64_t room, tdm_kvpoll_t from,
                            tdm_kvpoll_t to, const char *reason, const tdm_xfer_mismatch_t *m)
{
    if (!x->cfg.on_event)
        return;
    tdm_xfer_event_t ev = {tdm_xfer_now(), type, room, from, to, reason ? reason : "", m};
    x->cfg.on_event(x->cfg.ctx, &ev);
}

void tdm_xfer_emit_lost(tdm_xfer_t *x, const char *why, const xfer_lost_t *lost)
{
    if (!x->cfg.on_event)
        return;
    tdm_xfer_event_t ev = {tdm_xfer_now(),    "peer_lost", 0,    TDM_KVPOLL_FAILED,
                           TDM_KVPOLL_FAILED, why,         NULL, lost->rooms,
                           lost->n,           lost->failed};
    x->cfg.on_event(x->cfg.ctx, &ev);
}

void tdm_xfer_emit(tdm_xfer_t *x, const char *type, uint64_t room, tdm_kvpoll_t from,
                   tdm_kvpoll_t to, const char *reason)
{
    tdm_xfer_emit_mismatch(x, type, room, from, to, reason, NULL);
}

static void room_event_cb(void *ctx, const tdm_xfer_room_event_t *ev)
{
    tdm_xfer_t *x = ctx;
    tdm_xfer_emit(x, "kvpoll", ev->room, ev->from, ev->to, ev->reason);
    if (ev->to == TDM_KVPOLL_TRANSFERRING)
        atomic_fetch_add(&x->n_transferring, 1);
    if (ev->from == TDM_KVPOLL_TRANSFERRING)
        atomic_fetch_sub(&x->n_transferring, 1);
    if (ev->to == TDM_KVPOLL_FAILED && ev->from != TDM_KVPOLL_FAILED) {
        x->st.rooms_failed++;
        if (x->cfg.role == TDM_XFER_DECODE)
            tdm_xfer_decode_room_failed(x, ev->room);
    }
}

void tdm_xfer_room_set_all(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t to, const char *reason)
{
    uint64_t now = tdm_xfer_now();
    for (uint32_t r = 0; r < x->n_ranks; r++)
        tdm_xfer_room_set(x->rooms, room, r, to, reason, now);
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
    char why[320];
    if (inet_pton(AF_INET, x->cfg.host, &sa.sin_addr) != 1) {
        snprintf(why, sizeof(why), "bootstrap listener: bad bind address '%s'", x->cfg.host);
        tdm_err(TDM_SUB_XFER, "%s", why);
        if (x->cfg.err)
            snprintf(x->cfg.err, x->cfg.err_len, "%s", why);
        return TDM_ERR_INVAL;
    }
    x->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const char *step = NULL;
    if (x->listen_fd >= 0)
        (void)setsockopt(x->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (x->listen_fd < 0)
        step = "socket";
    else if (bind(x->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        step = "bind";
    else if (listen(x->listen_fd, 64) < 0)
        step = "listen";
    else if (getsockname(x->listen_fd, (struct sockaddr *)&sa, &sl) < 0)
        step = "getsockname";
    if (step) {
        int e = errno;
        snprintf(why, sizeof(why), "bootstrap listener on %s:%u: %s: %s (errno %d)", x->cfg.host,
                 x->cfg.port, step, strerror(e), e);
        tdm_err(TDM_SUB_XFER, "%s", why);
        if (x->cfg.err)
            snprintf(x->cfg.err, x->cfg.err_len, "%s", why);
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
        c->cork_hold_us = XFER_HOLD_DEFAULT_US;
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
    /* 2 x max_rooms records: live rooms and tombstones, those held by their mover included */
    tdm_xfer_room_cfg_t rc = {
        2 * c->max_rooms, c->n_ranks, c->bootstrap_timeout_us, c->waiting_timeout_us, tomb,
        room_event_cb,    x};
    TDM_CHECK_GOTO(tdm_xfer_rooms_init(&rc, &x->rooms), st, err_free);
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
    TDM_CHECK_GOTO(tdm_xfer_kvmem_init(x), st, err_free);
    for (uint32_t r = 0; r < x->n_ranks; r++)
        TDM_CHECK_GOTO(tdm_xfer_ucx_init(x, r), st, err_free);
    if (pthread_create(&x->xfer_th, NULL, tdm_xfer_main, x) != 0) {
        st = TDM_ERR_IO;
        goto err_free;
    }
    if (pthread_create(&x->recv_th, NULL, tdm_xfer_recv_main, x) != 0) {
        atomic_store(&x->stop, 1);
        pthread_join(x->xfer_th, NULL);
        st = TDM_ERR_IO;
        goto err_free;
    }
    if (pthread_create(&x->boot_th, NULL, tdm_xfer_boot_main, x) != 0) {
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
        tdm_xfer_wake(x->wake_boot);
        tdm_xfer_wake(x->wake_recv);
        tdm_xfer_wake(x->wake_xfer);
        pthread_join(x->boot_th, NULL);
        pthread_join(x->recv_th, NULL);
        pthread_join(x->xfer_th, NULL);
    }
    /* rooms still moving data hold UCX requests: progress them out before tearing down */
    for (int spin = 0; x->active && spin < 100000; spin++) {
        tdm_xfer_ucx_progress(x);
        tdm_xfer_advance(x);
    }
    for (uint32_t r = 0; r < x->n_ranks; r++)
        if (x->ucx[r].ctx)
            tdm_xfer_ucx_fini(x, r);
    tdm_xfer_kvmem_fini(x); /* before the eventfds close: its stream may still write wake_xfer */
    if (x->chan_fd >= 0)
        close(x->chan_fd);
    if (x->listen_fd >= 0)
        close(x->listen_fd);
    while (x->n_conns)
        tdm_xfer_conn_close(x, 0);
    if (x->wake_recv >= 0)
        close(x->wake_recv);
    if (x->wake_xfer >= 0)
        close(x->wake_xfer);
    if (x->wake_boot >= 0)
        close(x->wake_boot);
    void *mover;
    for (uint32_t i = 0; x->rooms && tdm_xfer_rooms_next_mover(x->rooms, &i, &mover);)
        tdm_xroom_free(mover);
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
    uint64_t end = tdm_xfer_now() + timeout_us;
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
        if (tdm_xfer_now() >= end)
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
    /* a room not released yet keeps its record (a tombstone waits for its mover) */
    tdm_status_t st = tdm_xfer_room_get(x->rooms, room, &info);
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
    tdm_status_t st = x->cfg.role == TDM_XFER_PREFILL ? tdm_xfer_prefill_abort(x, room, reason)
                                                      : tdm_xfer_decode_abort(x, room, reason);
    pthread_mutex_unlock(&x->mu);
    return st;
}

tdm_status_t tdm_xfer_release(tdm_xfer_t *x, uint64_t room)
{
    pthread_mutex_lock(&x->mu);
    tdm_status_t st = x->cfg.role == TDM_XFER_PREFILL ? tdm_xfer_prefill_release(x, room)
                                                      : tdm_xfer_decode_release(x, room);
    pthread_mutex_unlock(&x->mu);
    return st;
}
