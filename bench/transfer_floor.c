/*
 * bench/transfer_floor.c — the floor of a two-process windowed transfer on this host: what any
 * engine built as "decode asks, prefill copies into decode's shared memory, prefill tells" can
 * reach, measured with nothing else in the way. Two processes (forked), one thread each, pinned
 * (prefill CPU 0, decode CPU 1, as bench/transfer.c); both pools are laid out by the engine's KV
 * layout in the bench's geometry (bf16, 32 layers, 2 KV heads x 128, page 16 tokens, 512 pages: a
 * room of one page is 64 regions of 8 KiB), decode's over MAP_SHARED memory, prefill's its own.
 * Decode keeps `window` rooms outstanding by writing 8-byte room ids to a loopback TCP socket;
 * prefill reads what arrived, copies each room's 64 regions (one page: 512 KiB) with memcpy, and
 * writes 8-byte completions back, one write per `sub` rooms and one when it has nothing left to
 * read; decode answers a read of completions with one write of as many new ids. No frames,
 * allocations, locks, room state, events or helper threads: only the copy, the socket and the
 * wakes. Throughput at decode after a warm-up, the median of `reps` segments. Beside it, the copy
 * alone (one thread, the same pools, no second process). argv: [rooms_per_segment [reps]]; env
 * TDM_FLOOR_WINDOW (16), TDM_FLOOR_SUB (8). Prints one JSON object:
 * {"bytes":524288,"window":W,"sub":S,"floor_gbps":G,"copy_gbps":C}.
 */
#define _GNU_SOURCE
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tests/unit/xfer-testutil.h"

#define NUM_PAGES 512u
#define BATCH_MAX 256

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof(s), &s))
        fprintf(stderr, "transfer_floor: not pinned to CPU %d\n", cpu);
}

/* One room: page `page` of every region, as the engine's coalesced runs, source to destination. */
static void copy_room(const tdm_kv_buffers_t *dst, const tdm_kv_buffers_t *src, uint32_t page)
{
    const tdm_kv_layout_t *l = src->layout;
    for (uint32_t layer = 0; layer < l->num_layers; layer++)
        for (uint32_t sub = 0; sub < l->n_sub; sub++)
            memcpy(tdm_kv_slot(dst, layer, (tdm_kv_sub_t)sub, page, 0),
                   tdm_kv_slot(src, layer, (tdm_kv_sub_t)sub, page, 0), l->sub[sub].page_stride);
}

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read at least one whole 8-byte id (blocking), then whatever else is there; returns ids. */
static int read_ids(int fd, uint64_t *ids, uint8_t *carry, size_t *carry_n)
{
    uint8_t buf[BATCH_MAX * 8];
    size_t have = *carry_n;
    memcpy(buf, carry, have);
    while (have < 8) {
        ssize_t r = recv(fd, buf + have, sizeof(buf) - have, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        have += (size_t)r;
    }
    for (;;) { /* drain what is queued without blocking */
        if (have == sizeof(buf))
            break;
        ssize_t r = recv(fd, buf + have, sizeof(buf) - have, MSG_DONTWAIT);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    int n = (int)(have / 8);
    memcpy(ids, buf, (size_t)n * 8);
    *carry_n = have - (size_t)n * 8;
    memcpy(carry, buf + (size_t)n * 8, *carry_n);
    return n;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    uint32_t seg = argc > 1 ? (uint32_t)atoi(argv[1]) : 256,
             reps = argc > 2 ? (uint32_t)atoi(argv[2]) : 30;
    const char *we = getenv("TDM_FLOOR_WINDOW"), *se = getenv("TDM_FLOOR_SUB");
    uint32_t window = we ? (uint32_t)atoi(we) : 16, sub = se ? (uint32_t)atoi(se) : 8;
    if (seg < 4 || reps < 1 || reps > 1000 || window < 1 || window > BATCH_MAX || sub < 1) {
        fprintf(stderr, "transfer_floor: bad arguments\n");
        return 2;
    }
    const int two = sysconf(_SC_NPROCESSORS_ONLN) >= 2;
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 32, 2, 128, NUM_PAGES}; /* bench/transfer.c's */
    xt_side_t pre;
    tdm_kv_pool_t *dp = NULL;
    uint64_t pool_bytes = 0;
    if (xt_pools(&pre, &g) != TDM_OK ||
        tdm_kv_layout_pool_bytes(&pre.lay, NUM_PAGES, &pool_bytes) != TDM_OK)
        return 1;
    void *dmem = mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (dmem == MAP_FAILED ||
        tdm_kv_pool_init_mem(&pre.lay, NUM_PAGES, dmem, pool_bytes, &dp) != TDM_OK)
        return 1;
    const tdm_kv_buffers_t *src = pre.cfg.kv[0], *dst = tdm_kv_pool_buffers(dp);
    for (uint64_t i = 0; i < pool_bytes; i++)
        src->base[i] = (uint8_t)(i * 131 + 7);
    const uint64_t room_bytes =
        (uint64_t)pre.lay.num_layers * pre.lay.n_sub * pre.lay.sub[0].page_stride;

    /* the copy alone, on the copier's CPU */
    if (two)
        pin(0);
    uint64_t tc[9];
    for (int k = -1; k < 9; k++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < 2000; i++)
            copy_room(dst, src, 3);
        if (k >= 0)
            tc[k] = (now_ns() - t0) / 2000;
    }
    qsort(tc, 9, 8, cmp_u64);

    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&a, &al))
        return 1;
    int pfd[2];
    if (pipe(pfd))
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) { /* decode */
        if (two)
            pin(1);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
            _exit(1);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        const uint32_t warm = 2 * window, total = warm + seg * reps;
        uint64_t *t_done = calloc(total, 8), ids[BATCH_MAX], next = 1, done = 0;
        uint8_t carry[8];
        size_t carry_n = 0;
        for (uint32_t i = 0; i < window; i++)
            ids[i] = next++;
        if (write_all(fd, ids, (size_t)window * 8))
            _exit(1);
        while (done < total) {
            int n = read_ids(fd, ids, carry, &carry_n);
            if (n <= 0)
                _exit(1);
            uint64_t t = now_ns();
            int m = 0;
            for (int i = 0; i < n && done < total; i++) {
                t_done[done++] = t;
                if (next <= total)
                    ids[m++] = next++;
            }
            if (m && write_all(fd, ids, (size_t)m * 8))
                _exit(1);
        }
        uint64_t per[1000];
        for (uint32_t r = 0; r < reps; r++) {
            uint32_t s0 = warm + r * seg;
            per[r] = (t_done[s0 + seg - 1] - t_done[s0 - 1]) / seg;
        }
        qsort(per, reps, 8, cmp_u64);
        uint64_t med = per[reps / 2];
        if (write(pfd[1], &med, 8) != 8)
            _exit(1);
        _exit(0);
    }
    /* prefill */
    int fd = accept(ls, NULL, NULL);
    if (fd < 0)
        return 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t ids[BATCH_MAX], out[BATCH_MAX];
    uint8_t carry[8];
    size_t carry_n = 0;
    for (;;) {
        int n = read_ids(fd, ids, carry, &carry_n);
        if (n <= 0)
            break; /* decode is done */
        int m = 0;
        for (int i = 0; i < n; i++) {
            copy_room(dst, src, 3); /* every room the same pages, as bench/transfer */
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            out[m++] = ids[i];
            if ((uint32_t)m == sub || i == n - 1) {
                if (write_all(fd, out, (size_t)m * 8))
                    break;
                m = 0;
            }
        }
    }
    close(fd);
    uint64_t med = 0;
    int status = 0;
    int got = read(pfd[0], &med, 8) == 8;
    waitpid(pid, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || med == 0) {
        fprintf(stderr, "transfer_floor: decode side failed\n");
        return 1;
    }
    printf("{\"bytes\":%llu,\"window\":%u,\"sub\":%u,\"floor_gbps\":%.3f,\"copy_gbps\":%.3f}\n",
           (unsigned long long)room_bytes, window, sub, (double)room_bytes / (double)med,
           (double)room_bytes / (double)tc[4]);
    return 0;
}
