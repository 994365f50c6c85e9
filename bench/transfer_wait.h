/*
 * bench/transfer_wait.h — how bench/transfer's harness waits for the engine (transfer_wait.c):
 * the rounds' and the windowed stream's event collectors (filled by the engine's cfg.on_event,
 * the harness blocks on a condition variable instead of polling), and the pipe I/O between the
 * two processes.
 */
#ifndef TDM_BENCH_TRANSFER_WAIT_H
#define TDM_BENCH_TRANSFER_WAIT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <tdm/xfer.h>

#define INFLIGHT_MAX 32 /* rooms per round, at most */
#define WINDOW_MAX 64   /* rooms outstanding in the windowed stream, at most */

/* One round's rooms and when each became final (SUCCESS or FAILED), filled by the engine's event
 * callback (cfg.on_event, called by the engine thread that makes the transition): the harness
 * blocks instead of polling, so it neither takes a core from the transfer thread on a 2-vCPU
 * host nor adds a poll interval, and a room's end is the moment its state changed. */
typedef struct round_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t k, done;
    uint64_t room[INFLIGHT_MAX], t_ns[INFLIGHT_MAX];
    tdm_kvpoll_t st[INFLIGHT_MAX];
} round_wait_t;

typedef struct done_ev {
    uint64_t room, t_ns;
    tdm_kvpoll_t st;
} done_ev_t;

/* Rooms that became final and (prefill) TRANSFER_INFOs that arrived, filled by the engine's event
 * callback; the harness blocks on `cv` for them. */
typedef struct stream_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    done_ev_t ev[4 * WINDOW_MAX + 16];
    uint32_t n_ev;
    uint32_t n_new; /* prefill: rooms that reached WAITING_FOR_INPUT, not yet taken */
    int overflow;
} stream_wait_t;

/* The harness's threads sleep what they ask for (1 us timer slack); engine threads keep theirs. */
void tb_harness_timer_slack(void);

/* Rounds: tb_round_event is the engine's on_event (ctx: the round_wait_t); tb_round_add before a
 * room can finish; tb_round_wait_all blocks until every room is final (0: all SUCCESS). */
void tb_round_init(round_wait_t *w);
void tb_round_fini(round_wait_t *w);
void tb_round_event(void *ctx, const tdm_xfer_event_t *ev);
void tb_round_add(round_wait_t *w, uint32_t q, uint64_t room);
int tb_round_wait_all(round_wait_t *w, tdm_xfer_t *x, uint64_t timeout_us);
/* The windowed stream: tb_stream_event is the engine's on_event (ctx: the stream_wait_t);
 * tb_stream_take takes the final rooms (-1 on overflow), with `wait` blocking up to 100 ms. */
void tb_stream_init(stream_wait_t *w);
void tb_stream_fini(stream_wait_t *w);
void tb_stream_event(void *ctx, const tdm_xfer_event_t *ev);
int tb_stream_take(stream_wait_t *w, done_ev_t *out, int wait);
/* Whole reads and writes on the pipe between the processes (-1: closed or failed); the median of
 * v[0..n) (sorts v). */
int tb_read_full(int fd, void *buf, size_t n);
int tb_write_full(int fd, const void *buf, size_t n);
uint64_t tb_median_u64(uint64_t *v, uint32_t n);
/* qsort comparator of uint64_t. */
int tb_cmp_u64(const void *a, const void *b);

#endif
