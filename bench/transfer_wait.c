/*
 * bench/transfer_wait.c — bench/transfer's waits on the engine (transfer_wait.h) and the pipe I/O
 * between its prefill and decode processes.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <tdm/time.h>

#include "transfer_wait.h"

int tb_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The harness's sleeps (its polls) last what they ask for; engine threads keep the default. */
void tb_harness_timer_slack(void)
{
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

void tb_round_init(round_wait_t *w)
{
    pthread_condattr_t a;
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &a);
    pthread_condattr_destroy(&a);
}

void tb_round_fini(round_wait_t *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

static void round_final(round_wait_t *w, uint32_t q, tdm_kvpoll_t st, uint64_t now)
{
    w->t_ns[q] = now;
    w->st[q] = st;
    if (++w->done == w->k)
        pthread_cond_signal(&w->cv);
}

void tb_round_event(void *ctx, const tdm_xfer_event_t *ev)
{
    round_wait_t *w = ctx;
    if (strcmp(ev->type, "kvpoll") || (ev->to != TDM_KVPOLL_SUCCESS && ev->to != TDM_KVPOLL_FAILED))
        return;
    uint64_t now = tdm_time_mono_ns();
    pthread_mutex_lock(&w->mu);
    for (uint32_t q = 0; q < w->k; q++)
        if (w->room[q] == ev->room && !w->t_ns[q]) {
            round_final(w, q, ev->to, now);
            break;
        }
    pthread_mutex_unlock(&w->mu);
}

/* Rooms are added before they can finish (prefill) or right after send_info (decode: a final
 * event that came first is caught by the poll in tb_round_wait_all). */
void tb_round_add(round_wait_t *w, uint32_t q, uint64_t room)
{
    pthread_mutex_lock(&w->mu);
    if (q == 0)
        w->done = 0;
    w->k = q + 1;
    w->room[q] = room;
    w->t_ns[q] = 0;
    pthread_mutex_unlock(&w->mu);
}

/* Block until every room of the round is final; 0 when all succeeded. */
int tb_round_wait_all(round_wait_t *w, tdm_xfer_t *x, uint64_t timeout_us)
{
    uint64_t end = tdm_time_mono_us() + timeout_us;
    int bad = 0;
    pthread_mutex_lock(&w->mu);
    while (w->done < w->k) {
        for (uint32_t q = 0; q < w->k; q++) {
            tdm_kvpoll_t st;
            if (w->t_ns[q])
                continue;
            /* never into the engine with w->mu held: its threads call tb_round_event under `mu` */
            uint64_t room = w->room[q];
            pthread_mutex_unlock(&w->mu);
            tdm_status_t ps = tdm_xfer_poll(x, room, &st);
            pthread_mutex_lock(&w->mu);
            if (!w->t_ns[q] && ps == TDM_OK &&
                (st == TDM_KVPOLL_SUCCESS || st == TDM_KVPOLL_FAILED))
                round_final(w, q, st, tdm_time_mono_ns());
        }
        if (w->done == w->k || tdm_time_mono_us() > end)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 2000000; /* a lost race with tb_round_add costs at most this */
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    for (uint32_t q = 0; q < w->k; q++)
        bad |= !w->t_ns[q] || w->st[q] != TDM_KVPOLL_SUCCESS;
    pthread_mutex_unlock(&w->mu);
    return bad;
}

void tb_stream_init(stream_wait_t *w)
{
    memset(w, 0, sizeof(*w));
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &a);
    pthread_condattr_destroy(&a);
}

void tb_stream_fini(stream_wait_t *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

void tb_stream_event(void *ctx, const tdm_xfer_event_t *ev)
{
    stream_wait_t *w = ctx;
    if (strcmp(ev->type, "kvpoll"))
        return;
    int fin = ev->to == TDM_KVPOLL_SUCCESS || ev->to == TDM_KVPOLL_FAILED;
    if (!fin && ev->to != TDM_KVPOLL_WAITING_FOR_INPUT)
        return;
    uint64_t now = tdm_time_mono_ns();
    pthread_mutex_lock(&w->mu);
    if (!fin) {
        w->n_new++;
    } else if (w->n_ev < sizeof(w->ev) / sizeof(w->ev[0])) {
        w->ev[w->n_ev++] = (done_ev_t){ev->room, now, ev->to};
    } else {
        w->overflow = 1;
    }
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Take the final rooms into `out` and return how many (-1 on overflow). With `wait`, block until
 * a room became final or (prefill) a TRANSFER_INFO arrived, or 100 ms passed. */
int tb_stream_take(stream_wait_t *w, done_ev_t *out, int wait)
{
    uint64_t end = tdm_time_mono_ns() + 100000000;
    pthread_mutex_lock(&w->mu);
    while (wait && !w->overflow && !w->n_new && !w->n_ev) {
        struct timespec ts = {(time_t)(end / 1000000000ull), (long)(end % 1000000000ull)};
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts))
            break;
    }
    int n = w->overflow ? -1 : (int)w->n_ev;
    if (n > 0)
        memcpy(out, w->ev, (size_t)n * sizeof(*out));
    w->n_ev = 0;
    w->n_new = 0;
    pthread_mutex_unlock(&w->mu);
    return n;
}

int tb_read_full(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int tb_write_full(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

uint64_t tb_median_u64(uint64_t *v, uint32_t n)
{
    qsort(v, n, 8, tb_cmp_u64);
    return v[n / 2];
}
