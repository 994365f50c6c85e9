/*
 * bench/transfer.c — KV transfer bandwidth of the engine (prefill → decode, host memory, UCX over
 * loopback) for one page chunk and 1–256 MiB rooms, with checksums off (the data path alone) and
 * on (the default: prefill hashes what it writes; decode verifies in commit, timed apart).
 * Prefill and decode run in two processes, as in serving (and as ucx_perftest, the anchor, does):
 * UCX picks its shared-memory transports only between processes. The process forks before either
 * side initialises UCX; the child is the decode side and drives rooms (TRANSFER_INFO, wait,
 * commit, release), the parent is the prefill side and times each room from
 * tdm_xfer_prefill_send to the room's SUCCESS on prefill, which comes after ucp_ep_flush_nbx
 * proved every put delivered (ucx_perftest's put_bw likewise ends with a flush). The child
 * reports its commit (verify) times back through a pipe. The decode pool is allocated by the
 * engine through UCX (cfg.ucx_alloc) and prefill's endpoint runs without UCX error handling (same
 * host), as in serving; argv[2] = "aligned" keeps an aligned_alloc decode pool for comparison.
 * Geometry: bf16, 32 layers, 2 KV heads × 128, page 16 tokens → one page chunk = 512 KiB, moved
 * as 64 contiguous regions (layer × K/V) per room. Prints one JSON object per line:
 *   {"bytes":N,"checksums":0|1,"reps":R,"inflight":K,"gbps":G,"room_latency_us":L,
 *    "verify_gbps":V}
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tests/unit/xfer-testutil.h"

#define REPS_MAX 31

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int reps_for(uint64_t bytes)
{
    return bytes <= (4u << 20) ? 30 : bytes <= (64u << 20) ? 10 : 5;
}

/* Rooms in flight per round: serving moves many small rooms at once (one per admitted request), so
 * the page chunk and 1 MiB are timed with INFLIGHT_SMALL rooms issued back to back (throughput =
 * bytes of the round / its wall time, like perftest's stream of puts); larger rooms one at a time.
 * Each line also carries the mean send→SUCCESS latency of one room. TDM_BENCH_INFLIGHT overrides.
 */
#define INFLIGHT_MAX 32
static uint32_t inflight_small = 16;

static uint32_t inflight_for(uint32_t np)
{
    return np <= 2 ? inflight_small : 1;
}

static int bench_aligned; /* argv[2] "aligned": decode pool from aligned_alloc (the old path) */

static const uint64_t page_bytes = (uint64_t)32 * 2 * 16 * 2 * 128 * 2;

static int read_full(int fd, void *buf, size_t n)
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

static int write_full(int fd, const void *buf, size_t n)
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

/* Decode side (child): one room after another; commit times go back on `out`. */
static int decode_side(int checksums, const uint32_t *sizes, int n_sizes, uint32_t max_pages,
                       uint16_t port, int out)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 32, 2, 128, max_pages};
    xt_side_t dec;
    tdm_kv_layout_t lay;
    if (xt_pools(&dec, &g))
        return 1;
    dec.cfg.disable_checksums = !checksums;
    dec.cfg.role = TDM_XFER_DECODE;
    dec.cfg.instance_id = 0x2222;
    dec.cfg.host = "127.0.0.1";
    dec.cfg.port = port;
    if (!bench_aligned) {
        /* as serving: the engine allocates the decode pool through UCX (shared memory) */
        lay = *tdm_kv_pool_layout(dec.pool[0]);
        tdm_kv_pool_free(dec.pool[0]);
        dec.pool[0] = NULL;
        dec.cfg.kv[0] = NULL;
        dec.cfg.ucx_alloc = 1;
        dec.cfg.kv_layout[0] = &lay;
        dec.cfg.kv_num_pages = max_pages;
    }
    if (tdm_xfer_init(&dec.cfg, &dec.x) != TDM_OK ||
        tdm_xfer_wait_ready(dec.x, 10000000, NULL, 0) != TDM_OK) {
        fprintf(stderr, "transfer bench: decode did not start\n");
        return 1;
    }
    uint32_t *pages = calloc(max_pages, 4), *prompt = calloc((size_t)max_pages * 16, 4);
    for (uint32_t i = 0; i < max_pages; i++)
        pages[i] = i;
    for (int si = 0; si < n_sizes; si++) {
        uint32_t np = sizes[si], k = inflight_for(np);
        int reps = reps_for(np * page_bytes);
        for (int r = 0; r < reps + 1; r++) {
            uint64_t room[INFLIGHT_MAX], tv = 0;
            tdm_xfer_aux_t got;
            for (uint32_t q = 0; q < k; q++) /* k rooms in flight, disjoint decode pages */
                if (tdm_xfer_decode_send_info(dec.x, prompt, np * 16, pages + q * np, np, NULL,
                                              &room[q])) {
                    fprintf(stderr, "transfer bench: TRANSFER_INFO failed (decode)\n");
                    return 1;
                }
            for (uint32_t q = 0; q < k; q++) {
                if (xt_wait(dec.x, room[q], TDM_KVPOLL_SUCCESS, 30000000) != TDM_KVPOLL_SUCCESS) {
                    fprintf(stderr, "transfer bench: room failed (decode)\n");
                    return 1;
                }
                uint64_t t1 = tdm_time_mono_ns();
                if (tdm_xfer_decode_commit(dec.x, room[q], &got) != TDM_OK) {
                    fprintf(stderr, "transfer bench: commit failed\n");
                    return 1;
                }
                tv += tdm_time_mono_ns() - t1;
                xt_release(dec.x, room[q], 10000000);
            }
            tv /= k;
            if (write_full(out, &tv, sizeof(tv)))
                return 1;
        }
    }
    free(pages);
    free(prompt);
    xt_side_free(&dec);
    return 0;
}

static int run(int checksums, const uint32_t *sizes, int n_sizes, uint32_t max_pages)
{
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child))
        return 1;
    fflush(stdout);
    pid_t pid = fork(); /* before any UCX initialisation on either side */
    if (pid < 0)
        return 1;
    if (pid == 0) {
        uint16_t port;
        close(to_child[1]);
        close(from_child[0]);
        if (read_full(to_child[0], &port, sizeof(port)))
            _exit(1);
        _exit(decode_side(checksums, sizes, n_sizes, max_pages, port, from_child[1]));
    }
    close(to_child[0]);
    close(from_child[1]);
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 32, 2, 128, max_pages};
    xt_side_t pre;
    int rc = 1;
    if (xt_pools(&pre, &g))
        goto out;
    pre.cfg.disable_checksums = !checksums;
    pre.cfg.role = TDM_XFER_PREFILL;
    pre.cfg.instance_id = 0x1111;
    if (tdm_xfer_init(&pre.cfg, &pre.x) != TDM_OK) {
        fprintf(stderr, "transfer bench: prefill did not start\n");
        goto out;
    }
    uint16_t port = tdm_xfer_port(pre.x);
    if (write_full(to_child[1], &port, sizeof(port)))
        goto out;
    xt_fill_random(&pre, 1);
    uint32_t *pages = calloc(max_pages, 4);
    for (uint32_t i = 0; i < max_pages; i++)
        pages[i] = i;
    for (int si = 0; si < n_sizes; si++) {
        uint32_t np = sizes[si];
        uint64_t bytes = np * page_bytes;
        int reps = reps_for(bytes);
        uint64_t t[REPS_MAX], tv[REPS_MAX], tr[REPS_MAX];
        uint32_t k = inflight_for(np);
        for (int r = 0; r < reps + 1; r++) {
            uint64_t room[INFLIGHT_MAX], t0[INFLIGHT_MAX], t1[INFLIGHT_MAX], v, lat = 0;
            tdm_xfer_aux_t aux = {0, 1, 0, 0, {{0, 0}}};
            for (uint32_t q = 0; q < k; q++) {
                tdm_xfer_request_t req;
                memset(&req, 0, sizeof(req));
                if (xt_next(pre.x, &req, 30000000) != TDM_OK) {
                    fprintf(stderr, "transfer bench: no TRANSFER_INFO\n");
                    goto out_pages;
                }
                room[q] = req.room;
                tdm_xfer_request_clear(&req);
            }
            uint64_t start = tdm_time_mono_ns();
            for (uint32_t q = 0; q < k; q++) { /* issued back to back, as a busy prefill does */
                t0[q] = tdm_time_mono_ns();
                tdm_xfer_prefill_send(pre.x, room[q], pages, np, &aux);
            }
            for (uint32_t q = 0; q < k; q++) {
                tdm_kvpoll_t st;
                do {
                    if (tdm_xfer_poll(pre.x, room[q], &st) != TDM_OK)
                        st = TDM_KVPOLL_FAILED;
                    if (st != TDM_KVPOLL_SUCCESS && st != TDM_KVPOLL_FAILED)
                        tdm_time_sleep_us(20); /* leave the cores to the engine's threads */
                } while (st != TDM_KVPOLL_SUCCESS && st != TDM_KVPOLL_FAILED);
                t1[q] = tdm_time_mono_ns();
                if (st != TDM_KVPOLL_SUCCESS) {
                    fprintf(stderr, "transfer bench: room failed (prefill)\n");
                    goto out_pages;
                }
            }
            uint64_t end = tdm_time_mono_ns();
            if (read_full(from_child[0], &v, sizeof(v))) {
                fprintf(stderr, "transfer bench: decode side failed\n");
                goto out_pages;
            }
            for (uint32_t q = 0; q < k; q++) {
                lat += t1[q] - t0[q];
                xt_release(pre.x, room[q], 10000000);
            }
            if (r > 0) { /* the first round warms up endpoints and page mappings */
                t[r - 1] = (end - start) / k; /* ns per room at k in flight */
                tv[r - 1] = v;
                tr[r - 1] = lat / k;
            }
        }
        qsort(t, (size_t)reps, 8, cmp_u64);
        qsort(tv, (size_t)reps, 8, cmp_u64);
        qsort(tr, (size_t)reps, 8, cmp_u64);
        printf("{\"bytes\":%llu,\"checksums\":%d,\"reps\":%d,\"inflight\":%u,\"gbps\":%.3f,"
               "\"room_latency_us\":%.1f,\"verify_gbps\":%.3f}\n",
               (unsigned long long)bytes, checksums, reps, k, (double)bytes / (double)t[reps / 2],
               (double)tr[reps / 2] / 1e3, checksums ? (double)bytes / (double)tv[reps / 2] : 0.0);
        fflush(stdout);
    }
    rc = 0;
out_pages:
    free(pages);
out:
    close(to_child[1]);
    close(from_child[0]);
    int status = 0;
    if (rc)
        kill(pid, SIGTERM);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        rc = 1;
    xt_side_free(&pre);
    return rc;
}

int main(int argc, char **argv)
{
    /* page chunk (512 KiB), then 1, 4, 16, 64, 256 MiB */
    uint32_t sizes[] = {1, 2, 8, 32, 128, 512};
    int n = argc > 1 ? atoi(argv[1]) : 6;
    bench_aligned = argc > 2 && !strcmp(argv[2], "aligned");
    const char *inf = getenv("TDM_BENCH_INFLIGHT");
    if (inf && atoi(inf) >= 1 && atoi(inf) <= INFLIGHT_MAX)
        inflight_small = (uint32_t)atoi(inf);
    if (n < 1 || n > 6)
        n = 6;
    uint32_t max_pages = sizes[n - 1] > 2 * inflight_small ? sizes[n - 1] : 2 * inflight_small;
    if (run(0, sizes, n, max_pages) || run(1, sizes, n, max_pages))
        return 1;
    return 0;
}
