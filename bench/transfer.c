/*
 * bench/transfer.c — KV transfer bandwidth of the engine (prefill → decode, host memory, UCX over
 * loopback) for one page chunk and 1–256 MiB rooms, with checksums off (the data path alone) and
 * on (the default: prefill hashes what it writes; decode verifies in commit, timed apart).
 * Prefill and decode run in two processes, as in serving (and as ucx_perftest, the anchor, does):
 * UCX picks its shared-memory transports only between processes. The process forks before either
 * side initialises UCX; the child is the decode side and drives rooms (TRANSFER_INFO, wait,
 * commit, release), the parent is the prefill side (TRANSFER_INFO taken, tdm_xfer_prefill_send,
 * release); a room is SUCCESS on prefill after its fence or ucp_ep_flush_nbx proved every write
 * delivered (ucx_perftest's put_bw likewise ends with a flush), and on decode once that STATUS
 * arrived. The child reports its timings back through a pipe. The decode pool is allocated by the
 * engine through UCX (cfg.ucx_alloc) and prefill's endpoint runs without UCX error handling (same
 * host), as in serving; argv[2] = "aligned" keeps an aligned_alloc decode pool for comparison.
 * Geometry: bf16, 32 layers, 2 KV heads × 128, page 16 tokens → one page chunk = 512 KiB, moved
 * as 64 contiguous regions (layer × K/V) per room.
 * Protocol (default, TDM_BENCH_WINDOW=W, default 16): a throughput figure, as perftest's is —
 * W rooms outstanding, every room into the same decode pages and from the same prefill pages (as
 * perftest re-puts one buffer), decode submitting a new room as each SUCCESS reaches it (after its
 * commit, which verifies the checksums when they are on); throughput is measured at decode from
 * its SUCCESS events, after a warm-up, as the median over segments (see "windowed streaming").
 * TDM_BENCH_WINDOW=0 keeps the older rounds: `inflight` rooms issued back to back, each into its
 * own decode pages, timed from the first send to the last room's SUCCESS on prefill (the request
 * round trip and decode's side of the handshake outside the timed window).
 * The harness polls with a 1 µs timer slack (set after the engine's threads exist, so only the
 * harness's threads have it): the default 50 µs slack would add up to 70 µs per poll of the
 * harness's own to every round. argv: [N sizes [aligned]]; env TDM_BENCH_FROM=i starts at size
 * i (0-based), TDM_BENCH_INFLIGHT sets the rooms per round (rounds), TDM_BENCH_REPS the rounds
 * or segments per size, TDM_BENCH_CHECKSUMS=0|1 runs that pass alone (profiling),
 * TDM_BENCH_CORK=0 sends every frame as it is queued (no tdm_xfer_cork), TDM_BENCH_SUB the rooms
 * per corked sub-batch (8), TDM_BENCH_PIN=0 leaves thread placement to the scheduler,
 * TDM_BENCH_LAYOUT_COPY=1 measures the copy alone (layout_copy) and exits. Prints one
 * JSON object per line:
 *   {"bytes":N,"checksums":0|1,"reps":R,"inflight":K,["window":W,"rooms":N,]"gbps":G,
 *    "room_latency_us":L,"verify_gbps":V}
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tests/unit/xfer-testutil.h"
#include "transfer_wait.h"

#define REPS_MAX 2001

static int reps_env; /* TDM_BENCH_REPS: rounds per size (profiling), else by size */

static int reps_for(uint64_t bytes)
{
    if (reps_env)
        return reps_env;
    return bytes <= (4u << 20) ? 30 : bytes <= (64u << 20) ? 10 : 5;
}

/* Rooms per round, the same for every size. Default 1: same-host rooms up to 16 MiB are copied
 * by the sending thread itself (engine: tdm_xfer_inline_ok), so the rooms of a round are written
 * one after another anyway, and one room per round writes the same decode pages every round (freed
 * and taken again, as a LIFO page pool does) as perftest re-puts one buffer. More rooms per round
 * (TDM_BENCH_INFLIGHT) write distinct decode pages: a larger working set. Each line also carries
 * the mean send→SUCCESS latency of one room. */
static uint32_t inflight = 1;

static uint32_t inflight_for(uint32_t np)
{
    (void)np;
    return inflight;
}

/* ---- windowed streaming (the default): `window` rooms outstanding, as a throughput figure ----
 *
 * ucx_perftest's put_bw re-puts one buffer into one remote buffer in a loop and ends with one
 * flush: over sm each put is a memcpy into the peer's mapped segment that completes inside
 * ucp_put_nbx (its -O window never fills: -O 1 and -O 16 measure the same), and the peer is told
 * nothing per put. Its figure is a throughput. The engine's equivalent keeps `window` rooms in
 * flight, every one into the same decode pages (as perftest re-puts one buffer; the engine lets
 * rooms share pages, which belong to decode's scheduler), and decode submits a new room as each
 * SUCCESS arrives, after its commit (the checksum verification with checksums on): the per-room
 * handshake of one room (its STATUS frame, the receive threads' wakes, decode's commit and the
 * next TRANSFER_INFO) overlaps the copies of the rooms behind it. Throughput is measured at
 * decode, from SUCCESS events: after `warm` rooms, in segments of `seg` rooms, bytes of a segment /
 * the time between the SUCCESS that closes the previous segment and the one that closes it;
 * the figure is the median over segments. */
static uint32_t window = 16; /* TDM_BENCH_WINDOW; 0 = the rounds below */

/* Rooms per measured segment, segments (reps_for), warm-up rooms: see the block comment. */
static uint32_t stream_seg(uint64_t bytes)
{
    uint64_t s = (32u << 20) / bytes;
    return s < 4 ? 4 : (uint32_t)s;
}

static uint32_t stream_warm(void)
{
    return window + 2;
}

static uint32_t stream_total(uint64_t bytes)
{
    return stream_warm() + stream_seg(bytes) * (uint32_t)reps_for(bytes);
}

/* What decode sends back per size: median ns per room (throughput), mean send_info → SUCCESS
 * latency with the window queued, mean commit (verify) ns. */
typedef struct stream_result {
    uint64_t ns_per_room, latency_ns, verify_ns;
} stream_result_t;

static int bench_sub = 8;  /* TDM_BENCH_SUB: rooms per corked sub-batch (see below) */
static int bench_cork = 1; /* TDM_BENCH_CORK=0: every frame leaves as it is queued (A/B) */
static int bench_aligned;  /* argv[2] "aligned": decode pool from aligned_alloc (the old path) */

static const uint64_t page_bytes = (uint64_t)32 * 2 * 16 * 2 * 128 * 2;

/* Decode side of one size, windowed: `window` rooms into the same pages, a new one as each
 * SUCCESS arrives (after its commit); the result goes back on `out`. */
static int decode_stream(tdm_xfer_t *x, stream_wait_t *w, uint32_t np, const uint32_t *pages,
                         const uint32_t *prompt, int out)
{
    const uint64_t bytes = np * page_bytes;
    const uint32_t total = stream_total(bytes), warm = stream_warm(), seg = stream_seg(bytes);
    const uint32_t reps = (uint32_t)reps_for(bytes);
    uint64_t *t_done = calloc(total, 8), *per = calloc(reps, 8), lat = 0, tv = 0;
    uint64_t fl_room[WINDOW_MAX], fl_t0[WINDOW_MAX];
    done_ev_t ev[sizeof(w->ev) / sizeof(w->ev[0])];
    uint32_t sent = 0, done = 0, k = window < total ? window : total;
    int rc = 1;
    for (; sent < k; sent++) {
        fl_t0[sent] = tdm_time_mono_ns();
        if (tdm_xfer_decode_send_info(x, prompt, np * 16, pages, np, NULL, &fl_room[sent])) {
            fprintf(stderr, "transfer bench: TRANSFER_INFO failed (decode)\n");
            goto out;
        }
    }
    uint64_t last = tdm_time_mono_us();
    while (done < total) {
        int n = tb_stream_take(w, ev, 1);
        if (n < 0 || tdm_time_mono_us() - last > 30000000) {
            fprintf(stderr, "transfer bench: %s (decode)\n", n < 0 ? "event overflow" : "stalled");
            goto out;
        }
        if (n > 0)
            last = tdm_time_mono_us();
        if (bench_cork)
            tdm_xfer_cork(x); /* the batch's TRANSFER_INFO frames leave in one write */
        for (int i = 0; i < n; i++) {
            uint32_t q = 0;
            tdm_xfer_aux_t got;
            while (q < k && fl_room[q] != ev[i].room)
                q++;
            if (q == k)
                continue; /* not one of this size's rooms */
            if (bench_cork && i && i % bench_sub == 0) {
                tdm_xfer_uncork(x);
                tdm_xfer_cork(x);
            }
            uint64_t t1 = tdm_time_mono_ns();
            if (ev[i].st != TDM_KVPOLL_SUCCESS ||
                tdm_xfer_decode_commit(x, ev[i].room, &got) != TDM_OK) {
                fprintf(stderr, "transfer bench: room failed or did not verify (decode)\n");
                goto out;
            }
            tv += tdm_time_mono_ns() - t1;
            if (tdm_xfer_release(x, ev[i].room) != TDM_OK) {
                fprintf(stderr, "transfer bench: release failed (decode)\n");
                goto out;
            }
            lat += ev[i].t_ns - fl_t0[q];
            t_done[done++] = ev[i].t_ns;
            fl_room[q] = 0;
            if (sent == total)
                continue;
            fl_t0[q] = tdm_time_mono_ns();
            if (tdm_xfer_decode_send_info(x, prompt, np * 16, pages, np, NULL, &fl_room[q])) {
                fprintf(stderr, "transfer bench: TRANSFER_INFO failed (decode)\n");
                goto out;
            }
            sent++;
        }
        if (bench_cork)
            tdm_xfer_uncork(x);
    }
    for (uint32_t r = 0; r < reps; r++) {
        uint32_t a = warm + r * seg; /* completions a .. a+seg-1, timed from completion a-1 */
        per[r] = (t_done[a + seg - 1] - t_done[a - 1]) / seg;
    }
    stream_result_t res = {tb_median_u64(per, reps), lat / total, tv / total};
    rc = tb_write_full(out, &res, sizeof(res));
out:
    tdm_xfer_uncork(x); /* a no-op unless a failure left the batch corked */
    free(t_done);
    free(per);
    return rc;
}

/* Prefill side of one size, windowed: send every room as its TRANSFER_INFO arrives (same source
 * pages), release it once SUCCESS. A request of the next size that arrives early is kept in
 * *carry for it. */
static int prefill_stream(tdm_xfer_t *x, stream_wait_t *w, uint32_t np, const uint32_t *pages,
                          uint64_t *carry, uint32_t *carry_np)
{
    const uint32_t total = stream_total(np * page_bytes);
    uint32_t released = 0;
    tdm_xfer_aux_t aux = {0, 1, 0, 0, {{0, 0}}};
    done_ev_t ev[sizeof(w->ev) / sizeof(w->ev[0])];
    uint64_t last = tdm_time_mono_us();
    for (;;) {
        uint32_t burst = 0; /* at most a window of sends between two looks at the events */
        if (bench_cork)
            tdm_xfer_cork(x); /* the burst's STATUS frames leave in one write */
        for (; burst < window && (!*carry || *carry_np == np); burst++) {
            uint64_t room = *carry;
            *carry = 0;
            if (!room) {
                tdm_xfer_request_t req;
                memset(&req, 0, sizeof(req));
                if (tdm_xfer_prefill_next(x, &req) != TDM_OK)
                    break;
                uint32_t n = req.n_pages;
                room = req.room;
                tdm_xfer_request_clear(&req);
                if (n != np) {
                    *carry = room;
                    *carry_np = n;
                    break;
                }
            }
            if (bench_cork && burst && burst % bench_sub == 0) {
                tdm_xfer_uncork(x); /* a sub-batch leaves: decode works on it meanwhile */
                tdm_xfer_cork(x);
            }
            if (tdm_xfer_prefill_send(x, room, pages, np, &aux) != TDM_OK) {
                fprintf(stderr, "transfer bench: send failed (prefill)\n");
                tdm_xfer_uncork(x);
                return 1;
            }
        }
        if (bench_cork)
            tdm_xfer_uncork(x);
        if (released == total)
            return 0;
        int n = tb_stream_take(w, ev, burst == 0);
        if (n < 0 || tdm_time_mono_us() - last > 30000000) {
            fprintf(stderr, "transfer bench: %s (prefill)\n", n < 0 ? "event overflow" : "stalled");
            return 1;
        }
        if (n > 0)
            last = tdm_time_mono_us();
        for (int i = 0; i < n; i++) {
            if (ev[i].st != TDM_KVPOLL_SUCCESS || xt_release(x, ev[i].room, 10000000) != TDM_OK) {
                fprintf(stderr, "transfer bench: room failed (prefill)\n");
                return 1;
            }
            released++;
        }
    }
}

/* Decode side (child): one room after another; commit times go back on `out`. */
static int decode_side(int checksums, const uint32_t *sizes, int n_sizes, uint32_t max_pages,
                       uint16_t port, int out)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 32, 2, 128, max_pages * inflight};
    xt_side_t dec;
    tdm_kv_layout_t lay;
    round_wait_t w;
    stream_wait_t sw;
    if (xt_pools(&dec, &g))
        return 1;
    tb_round_init(&w);
    tb_stream_init(&sw);
    dec.cfg.on_event = window ? tb_stream_event : tb_round_event;
    dec.cfg.ctx = window ? (void *)&sw : (void *)&w;
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
        dec.cfg.kv_num_pages = g.num_pages;
    }
    if (tdm_xfer_init(&dec.cfg, &dec.x) != TDM_OK ||
        tdm_xfer_wait_ready(dec.x, 10000000, NULL, 0) != TDM_OK) {
        fprintf(stderr, "transfer bench: decode did not start\n");
        return 1;
    }
    tb_harness_timer_slack();
    uint32_t *pages = calloc(g.num_pages, 4), *prompt = calloc((size_t)max_pages * 16, 4);
    for (uint32_t i = 0; i < g.num_pages; i++)
        pages[i] = i;
    for (int si = 0; si < n_sizes; si++) {
        uint32_t np = sizes[si], k = inflight_for(np);
        int reps = reps_for(np * page_bytes);
        if (window) {
            if (decode_stream(dec.x, &sw, np, pages, prompt, out))
                return 1;
            continue;
        }
        for (int r = 0; r < reps + 1; r++) {
            uint64_t room[INFLIGHT_MAX], tv = 0;
            tdm_xfer_aux_t got;
            for (uint32_t q = 0; q < k; q++) { /* k rooms in flight, disjoint decode pages */
                if (tdm_xfer_decode_send_info(dec.x, prompt, np * 16, pages + q * np, np, NULL,
                                              &room[q])) {
                    fprintf(stderr, "transfer bench: TRANSFER_INFO failed (decode)\n");
                    return 1;
                }
                tb_round_add(&w, q, room[q]);
            }
            /* the whole round lands before decode verifies it: decode's commits do not compete
             * with prefill's copies for the two cores inside the timed window */
            if (tb_round_wait_all(&w, dec.x, 30000000)) {
                fprintf(stderr, "transfer bench: room failed (decode)\n");
                return 1;
            }
            for (uint32_t q = 0; q < k; q++) {
                uint64_t t1 = tdm_time_mono_ns();
                if (tdm_xfer_decode_commit(dec.x, room[q], &got) != TDM_OK) {
                    fprintf(stderr, "transfer bench: commit failed\n");
                    return 1;
                }
                tv += tdm_time_mono_ns() - t1;
                xt_release(dec.x, room[q], 10000000);
            }
            tv /= k;
            if (tb_write_full(out, &tv, sizeof(tv)))
                return 1;
        }
    }
    free(pages);
    free(prompt);
    xt_side_free(&dec);
    tb_round_fini(&w);
    tb_stream_fini(&sw);
    return 0;
}

/* TDM_BENCH_PIN=1 (the default; 0 leaves placement to the scheduler): the copying thread (the
 * prefill harness, which writes same-host rooms itself) on CPU 0; the prefill engine's threads and
 * the whole decode process on CPU 1, as a deployment gives the sending thread its own core. On the
 * 2-vCPU bench host the unpinned runs are bimodal (24-44 GB/s at 512 KiB, depending on where the
 * scheduler puts the threads); pinned, 45-47. ucx_perftest runs pinned the same way (transfer.sh:
 * client on CPU 0, server on CPU 1). */
static int bench_pin = 1;

static void pin_to(int cpu)
{
    cpu_set_t set;
    if (!bench_pin || cpu >= CPU_SETSIZE)
        return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set))
        fprintf(stderr, "transfer bench: not pinned to CPU %d\n", cpu);
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
        pin_to(1);
        close(to_child[1]);
        close(from_child[0]);
        if (tb_read_full(to_child[0], &port, sizeof(port)))
            _exit(1);
        _exit(decode_side(checksums, sizes, n_sizes, max_pages, port, from_child[1]));
    }
    close(to_child[0]);
    close(from_child[1]);
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 32, 2, 128, max_pages};
    xt_side_t pre;
    round_wait_t w;
    stream_wait_t sw;
    uint64_t carry = 0;
    uint32_t carry_np = 0;
    int rc = 1;
    tb_round_init(&w);
    tb_stream_init(&sw);
    if (xt_pools(&pre, &g))
        goto out;
    pre.cfg.on_event = window ? tb_stream_event : tb_round_event;
    pre.cfg.ctx = window ? (void *)&sw : (void *)&w;
    pre.cfg.disable_checksums = !checksums;
    pre.cfg.role = TDM_XFER_PREFILL;
    pre.cfg.instance_id = 0x1111;
    pin_to(1); /* the engine's threads inherit it */
    if (tdm_xfer_init(&pre.cfg, &pre.x) != TDM_OK) {
        fprintf(stderr, "transfer bench: prefill did not start\n");
        goto out;
    }
    pin_to(0); /* this thread copies */
    uint16_t port = tdm_xfer_port(pre.x);
    if (tb_write_full(to_child[1], &port, sizeof(port)))
        goto out;
    tb_harness_timer_slack();
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
        if (window) {
            stream_result_t res;
            if (prefill_stream(pre.x, &sw, np, pages, &carry, &carry_np))
                goto out_pages;
            if (tb_read_full(from_child[0], &res, sizeof(res))) {
                fprintf(stderr, "transfer bench: decode side failed\n");
                goto out_pages;
            }
            printf("{\"bytes\":%llu,\"checksums\":%d,\"reps\":%d,\"inflight\":1,\"window\":%u,"
                   "\"rooms\":%u,\"gbps\":%.3f,\"room_latency_us\":%.1f,\"verify_gbps\":%.3f}\n",
                   (unsigned long long)bytes, checksums, reps, window, stream_total(bytes),
                   (double)bytes / (double)res.ns_per_room, (double)res.latency_ns / 1e3,
                   checksums ? (double)bytes / (double)res.verify_ns : 0.0);
            fflush(stdout);
            continue;
        }
        for (int r = 0; r < reps + 1; r++) {
            uint64_t room[INFLIGHT_MAX], t0[INFLIGHT_MAX], v, lat = 0, end = 0;
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
                tb_round_add(&w, q, room[q]);
            }
            uint64_t start = tdm_time_mono_ns();
            for (uint32_t q = 0; q < k; q++) { /* issued back to back, as a busy prefill does */
                t0[q] = tdm_time_mono_ns();
                tdm_xfer_prefill_send(pre.x, room[q], pages, np, &aux);
            }
            /* a room ends when it became SUCCESS on prefill: after its flush (the fence for
             * mapped copies, ucp_ep_flush_nbx for puts), with its STATUS queued (I5) */
            if (tb_round_wait_all(&w, pre.x, 30000000)) {
                fprintf(stderr, "transfer bench: room failed (prefill)\n");
                goto out_pages;
            }
            if (tb_read_full(from_child[0], &v, sizeof(v))) {
                fprintf(stderr, "transfer bench: decode side failed\n");
                goto out_pages;
            }
            for (uint32_t q = 0; q < k; q++) {
                lat += w.t_ns[q] - t0[q];
                end = w.t_ns[q] > end ? w.t_ns[q] : end;
                xt_release(pre.x, room[q], 10000000);
            }
            if (r > 0) { /* the first round warms up endpoints and page mappings */
                t[r - 1] = (end - start) / k; /* ns per room at k in flight */
                tv[r - 1] = v;
                tr[r - 1] = lat / k;
            }
        }
        qsort(t, (size_t)reps, 8, tb_cmp_u64);
        qsort(tv, (size_t)reps, 8, tb_cmp_u64);
        qsort(tr, (size_t)reps, 8, tb_cmp_u64);
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
    tb_round_fini(&w);
    tb_stream_fini(&sw);
    return rc;
}

/* The copy alone: one thread memcpy()s a room of np pages (every layer and sub-buffer: np pages
 * contiguous per region, as the engine's coalesced runs) between two pools of the bench's layout
 * in this process, room after room into the same pages, as perftest re-puts one buffer; no
 * engine, no second process. The engine's same-host path is this copy plus the protocol, so this
 * is its ceiling on this host; perftest's one contiguous buffer per put is another shape. Prints
 * {"kind":"layout_copy","bytes":N,"gbps":G}: the median of 9 timings of max(4, 64 MiB/size) rooms.
 */
static int layout_copy(const uint32_t *sizes, int n_sizes, uint32_t max_pages)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 32, 2, 128, max_pages};
    xt_side_t a, b;
    pin_to(0); /* where the engine's copier runs */
    if (xt_pools(&a, &g) || xt_pools(&b, &g))
        return 1;
    xt_fill_random(&a, 3);
    xt_fill_random(&b, 4);
    const tdm_kv_buffers_t *src = a.cfg.kv[0], *dst = b.cfg.kv[0];
    const tdm_kv_layout_t *l = src->layout;
    for (int si = 0; si < n_sizes; si++) {
        uint32_t np = sizes[si];
        uint64_t bytes = np * page_bytes, t[9];
        uint64_t per = (64u << 20) / bytes < 4 ? 4 : (64u << 20) / bytes;
        for (int rep = -1; rep < 9; rep++) {
            uint64_t t0 = tdm_time_mono_ns();
            for (uint64_t k = 0; k < per; k++)
                for (uint32_t layer = 0; layer < l->num_layers; layer++)
                    for (uint32_t sub = 0; sub < l->n_sub; sub++)
                        memcpy(tdm_kv_slot(dst, layer, (tdm_kv_sub_t)sub, 0, 0),
                               tdm_kv_slot(src, layer, (tdm_kv_sub_t)sub, 0, 0),
                               (size_t)np * l->sub[sub].page_stride);
            if (rep >= 0)
                t[rep] = (tdm_time_mono_ns() - t0) / per;
        }
        qsort(t, 9, 8, tb_cmp_u64);
        printf("{\"kind\":\"layout_copy\",\"bytes\":%llu,\"gbps\":%.3f}\n",
               (unsigned long long)bytes, (double)bytes / (double)t[4]);
    }
    fflush(stdout);
    xt_side_free(&a);
    xt_side_free(&b);
    return 0;
}

int main(int argc, char **argv)
{
    /* page chunk (512 KiB), then 1, 4, 16, 64, 256 MiB */
    uint32_t sizes[] = {1, 2, 8, 32, 128, 512};
    int n = argc > 1 ? atoi(argv[1]) : 6, from = 0;
    bench_aligned = argc > 2 && !strcmp(argv[2], "aligned");
    const char *inf = getenv("TDM_BENCH_INFLIGHT"), *fr = getenv("TDM_BENCH_FROM");
    const char *win = getenv("TDM_BENCH_WINDOW");
    if (inf && atoi(inf) >= 1 && atoi(inf) <= INFLIGHT_MAX)
        inflight = (uint32_t)atoi(inf);
    if (win && atoi(win) >= 0 && atoi(win) <= WINDOW_MAX)
        window = (uint32_t)atoi(win);
    if (window)
        inflight = 1; /* every room of the window writes the same decode pages */
    if (n < 1 || n > 6)
        n = 6;
    if (fr && atoi(fr) >= 0 && atoi(fr) < n)
        from = atoi(fr);
    const char *pn = getenv("TDM_BENCH_PIN");
    bench_pin = !pn || strcmp(pn, "0");
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        bench_pin = 0;
    const char *sb = getenv("TDM_BENCH_SUB");
    if (sb && atoi(sb) >= 1)
        bench_sub = atoi(sb);
    const char *ck = getenv("TDM_BENCH_CORK");
    bench_cork = !ck || strcmp(ck, "0");
    const char *rp = getenv("TDM_BENCH_REPS");
    if (rp && atoi(rp) >= 1 && atoi(rp) < REPS_MAX)
        reps_env = atoi(rp);
    /* prefill's pool holds the largest room (every room reads the same source pages); decode's,
     * `inflight` of them (disjoint pages per room of a round) */
    uint32_t max_pages = sizes[n - 1];
    const char *cs = getenv("TDM_BENCH_CHECKSUMS");   /* "0" or "1": that pass alone (profiling) */
    const char *lc = getenv("TDM_BENCH_LAYOUT_COPY"); /* "1": the copy alone (layout_copy) */
    if (lc && !strcmp(lc, "1"))
        return layout_copy(sizes + from, n - from, max_pages);
    if ((!cs || !strcmp(cs, "0")) && run(0, sizes + from, n - from, max_pages))
        return 1;
    if ((!cs || !strcmp(cs, "1")) && run(1, sizes + from, n - from, max_pages))
        return 1;
    return 0;
}
