/*
 * test-xfer-cudaipc.c — the transfer engine's GPU path (cfg.kv_cuda: CUDA IPC record in
 * REGISTER, device-to-device copies fenced by an event, checksums through the kernel's launcher,
 * flips of device bytes) end to end on a host without a GPU: both engines over the CUDA runtime
 * test double (cudart-fake.c), whose copies land only tdm_fake_cuda_copy_latency_us after they
 * were queued. So: pages arrive bit-identical and the room reaches SUCCESS only after the copies
 * landed (right after prefill_send nothing has); ABORT while copies run is acknowledged only after
 * they landed (decode's pages stay quarantined meanwhile); a flipped device byte is caught at
 * commit; a host-memory peer is refused naming mem_kind, both ways; TP 2. A room of more runs
 * than xfer_cuda_gather_min_runs moves by the KV gather kernel (the double's launcher copies on the
 * host when it lands, with the runs it took at the call, as the kernel's parameters): scattered
 * rooms queued back to back while the engine reuses its run list each arrive byte-exact. The
 * real runtime and
 * kernel are tested by tests/gpu/test-xfer-cuda and tests/gpu/test-pd-cuda.sh.
 */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "dataplane/xfer/xfer_int.h"
#include "tap.h"
#include "xfer-testutil.h"

#define T_S 5000000ull

extern uint64_t tdm_fake_cuda_copy_latency_us;
extern uint64_t tdm_fake_cuda_d2d_bytes;
extern uint64_t tdm_fake_cuda_gathers, tdm_fake_cuda_gather_segs;
extern uint32_t xfer_cuda_gather_min_runs;

typedef struct gside {
    xt_side_t s;
    tdm_kv_pool_t *dev[TDM_XFER_RANKS_MAX];
    void *mem[TDM_XFER_RANKS_MAX];
} gside_t;

/* Layouts from xt_pools; every rank's pool moved into "device" memory (one cudaMalloc each). */
static int gpools(gside_t *g, const xt_geom_t *geom, int on_gpu)
{
    memset(g, 0, sizeof(*g));
    if (xt_pools(&g->s, geom) != TDM_OK)
        return -1;
    for (uint32_t r = 0; on_gpu && r < geom->n_ranks; r++) {
        uint64_t bytes;
        const tdm_kv_layout_t *l = tdm_kv_pool_layout(g->s.pool[r]);
        if (tdm_kv_layout_pool_bytes(l, geom->num_pages, &bytes) != TDM_OK ||
            cudaMalloc(&g->mem[r], bytes) != cudaSuccess ||
            tdm_kv_pool_init_mem(l, geom->num_pages, g->mem[r], bytes, &g->dev[r]) != TDM_OK)
            return -1;
        g->s.cfg.kv[r] = tdm_kv_pool_buffers(g->dev[r]);
    }
    g->s.cfg.kv_cuda = on_gpu;
    return 0;
}

static void gfree(gside_t *g)
{
    tdm_xfer_free(g->s.x);
    g->s.x = NULL;
    for (uint32_t r = 0; r < TDM_XFER_RANKS_MAX; r++) {
        tdm_kv_pool_free(g->dev[r]);
        cudaFree(g->mem[r]);
    }
    xt_side_free(&g->s);
}

static int pages_equal(xt_side_t *pre, xt_side_t *dec, const uint32_t *sp, const uint32_t *dp,
                       uint32_t n)
{
    for (uint32_t r = 0; r < pre->cfg.n_ranks; r++)
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t l = 0; l < pre->lay.num_layers; l++)
                for (uint32_t s = 0; s < pre->lay.n_sub; s++)
                    if (memcmp(tdm_kv_slot(pre->cfg.kv[r], l, (tdm_kv_sub_t)s, sp[i], 0),
                               tdm_kv_slot(dec->cfg.kv[r], l, (tdm_kv_sub_t)s, dp[i], 0),
                               pre->lay.sub[s].page_stride) != 0)
                        return 0;
    return 1;
}

/* Decode sends info, prefill takes it and sends: the room id, or 0. */
static uint64_t start_room(gside_t *pre, gside_t *dec, uint32_t n_prompt, const uint32_t *dp,
                           const uint32_t *sp, const tdm_xfer_aux_t *aux)
{
    uint32_t n_pages = (n_prompt + dec->s.lay.page_size - 1) / dec->s.lay.page_size;
    uint32_t prompt[64];
    uint64_t room = 0;
    tdm_xfer_request_t req;
    memset(&req, 0, sizeof(req));
    for (uint32_t i = 0; i < n_prompt; i++)
        prompt[i] = i + 3;
    if (tdm_xfer_decode_send_info(dec->s.x, prompt, n_prompt, dp, n_pages, NULL, &room) != TDM_OK)
        return 0;
    if (xt_next(pre->s.x, &req, T_S) != TDM_OK || req.room != room) {
        tdm_xfer_request_clear(&req);
        return 0;
    }
    tdm_xfer_request_clear(&req);
    tdm_xfer_aux_t a = *aux;
    a.room = room;
    return tdm_xfer_prefill_send(pre->s.x, room, sp, n_pages, &a) == TDM_OK ? room : 0;
}

static int start_pair(gside_t *pre, gside_t *dec, const xt_geom_t *g, int pre_gpu, int dec_gpu)
{
    xt_decode_ucx_alloc = 0; /* a device pool is the caller's, not UCX's */
    if (gpools(pre, g, pre_gpu) || gpools(dec, g, dec_gpu))
        return -1;
    return xt_start(&pre->s, &dec->s) == TDM_OK ? 0 : -1;
}

static void test_transfer(uint32_t n_ranks)
{
    xt_geom_t g = {TDM_DTYPE_BF16, n_ranks, 4, 2, 1, 16, 64};
    gside_t pre, dec;
    char why[256] = "";
    tdm_fake_cuda_copy_latency_us = 30000;
    int up = !start_pair(&pre, &dec, &g, 1, 1) &&
             tdm_xfer_wait_ready(dec.s.x, T_S, why, sizeof(why)) == TDM_OK;
    if (!ok(up, "tp %u: GPU decode registered its pools by CUDA IPC record (%s)", n_ranks,
            up ? "ready" : why)) {
        gfree(&dec);
        gfree(&pre);
        return;
    }
    xt_fill_random(&pre.s, 77 + n_ranks);
    tdm_xfer_aux_t aux = {0, 42, -0.5f, 0, {{0, 0}}}, got;
    const uint32_t dps[2][5] = {{10, 11, 12, 13, 14}, {40, 3, 60, 4, 22}};
    const uint32_t sps[2][5] = {{0, 1, 2, 3, 4}, {9, 8, 30, 31, 7}};
    uint64_t d2d0 = tdm_fake_cuda_d2d_bytes;
    for (int k = 0; k < 2; k++) {
        uint64_t t0 = tdm_time_mono_us(), g0 = tdm_fake_cuda_gathers;
        uint64_t room = start_room(&pre, &dec, 18, dps[k], sps[k], &aux);
        int early = room && pages_equal(&pre.s, &dec.s, sps[k], dps[k], 5);
        tdm_kvpoll_t s = room ? xt_wait(dec.s.x, room, TDM_KVPOLL_SUCCESS, T_S) : 0;
        uint64_t dt = tdm_time_mono_us() - t0;
        ok(room && !early && s == TDM_KVPOLL_SUCCESS && dt >= 30000,
           "tp %u %s pages: SUCCESS after %.1f ms, not before the copies landed (30 ms; none "
           "right after prefill_send)",
           n_ranks, k ? "scattered" : "contiguous", dt / 1e3);
        tdm_status_t st = tdm_xfer_decode_commit(dec.s.x, room, &got);
        /* contiguous: 4 runs (2 layers x 2 sub-buffers), scattered 20: one gather per rank */
        uint64_t gathers = tdm_fake_cuda_gathers - g0;
        ok(st == TDM_OK && got.room == room && got.first_token == 42 &&
               pages_equal(&pre.s, &dec.s, sps[k], dps[k], 5) && gathers == n_ranks,
           "tp %u: commit verifies the GPU checksums (%s); pages bit-identical, aux right (%llu "
           "gather launches)",
           n_ranks, tdm_status_name(st), (unsigned long long)gathers);
        xt_release(pre.s.x, room, T_S);
        xt_release(dec.s.x, room, T_S);
    }
    tdm_xfer_stats_t ps, ds;
    tdm_xfer_stats(pre.s.x, &ps);
    tdm_xfer_stats(dec.s.x, &ds);
    uint64_t kv = (uint64_t)10 * n_ranks * g.num_layers * (pre.s.lay.sub[0].page_stride * 2);
    ok(tdm_fake_cuda_d2d_bytes - d2d0 == kv && ps.bytes_put >= kv && ds.checksum_mismatch == 0 &&
           ds.checksum_bytes > 0,
       "tp %u: %llu KV bytes copied device to device (stats %llu), no mismatch", n_ranks,
       (unsigned long long)(tdm_fake_cuda_d2d_bytes - d2d0), (unsigned long long)ps.bytes_put);
    gfree(&dec);
    gfree(&pre);
}

static void test_mixed(int pre_gpu)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 4, 2, 1, 16, 64};
    gside_t pre, dec;
    char why[256] = "";
    tdm_status_t st = TDM_ERR_INVAL;
    if (start_pair(&pre, &dec, &g, pre_gpu, !pre_gpu) == 0)
        st = tdm_xfer_wait_ready(dec.s.x, T_S, why, sizeof(why));
    const char *want = pre_gpu ? "mem_kind host != cuda_ipc" : "mem_kind cuda_ipc != host";
    ok(st == TDM_ERR_CORRUPT && strstr(why, want), "%s prefill, %s decode: refused naming it: '%s'",
       pre_gpu ? "GPU" : "host", pre_gpu ? "host" : "GPU", why);
    gfree(&dec);
    gfree(&pre);
}

/* Six rooms of every other decode page queued back to back while the copies take 30 ms: six
 * gathers in flight while cuda_ipc.c rewrites its one run list for each room, so each launch must
 * own its list (kernel parameters; else an earlier room's pages would be another's). Then one
 * more with the gather disabled: the same bytes by one copy per run. */
static void test_gather_rooms(void)
{
    enum { ROOMS = 6, NP = 5 };
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 4, 2, 1, 16, 64};
    gside_t pre, dec;
    tdm_xfer_aux_t aux = {0, 7, 0, 0, {{0, 0}}}, got;
    uint32_t sp[ROOMS + 1][NP], dp[ROOMS + 1][NP];
    uint64_t room[ROOMS + 1] = {0};
    tdm_fake_cuda_copy_latency_us = 30000;
    if (start_pair(&pre, &dec, &g, 1, 1) || tdm_xfer_wait_ready(dec.s.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "gather: start");
        gfree(&dec);
        gfree(&pre);
        return;
    }
    xt_fill_random(&pre.s, 1234);
    for (uint32_t t = 0; t <= ROOMS; t++)
        for (uint32_t i = 0; i < NP; i++) {
            sp[t][i] = NP * t + i;                            /* a run on prefill */
            dp[t][i] = t < ROOMS ? 2 * (NP * t + i) : 61 - i; /* every other page; then down */
        }
    uint64_t g0 = tdm_fake_cuda_gathers, s0 = tdm_fake_cuda_gather_segs;
    int all = 1, same = 1;
    for (uint32_t t = 0; t < ROOMS; t++)
        all &= (room[t] = start_room(&pre, &dec, 18, dp[t], sp[t], &aux)) != 0;
    for (uint32_t t = 0; t < ROOMS && all; t++) {
        all &= xt_wait(dec.s.x, room[t], TDM_KVPOLL_SUCCESS, T_S) == TDM_KVPOLL_SUCCESS &&
               tdm_xfer_decode_commit(dec.s.x, room[t], &got) == TDM_OK;
        same &= pages_equal(&pre.s, &dec.s, sp[t], dp[t], NP);
    }
    uint64_t gathers = tdm_fake_cuda_gathers - g0, segs = tdm_fake_cuda_gather_segs - s0;
    ok(all && same && gathers == ROOMS && segs == (uint64_t)ROOMS * NP * 4,
       "%d scattered rooms in flight at once: each by one gather launch (%llu, %llu region runs), "
       "committed, pages byte-exact",
       ROOMS, (unsigned long long)gathers, (unsigned long long)segs);
    for (uint32_t t = 0; t < ROOMS; t++) {
        xt_release(pre.s.x, room[t], T_S);
        xt_release(dec.s.x, room[t], T_S);
    }
    uint32_t keep = xfer_cuda_gather_min_runs;
    xfer_cuda_gather_min_runs = UINT32_MAX;
    g0 = tdm_fake_cuda_gathers;
    room[ROOMS] = start_room(&pre, &dec, 18, dp[ROOMS], sp[ROOMS], &aux);
    tdm_kvpoll_t s =
        room[ROOMS] ? xt_wait(dec.s.x, room[ROOMS], TDM_KVPOLL_SUCCESS, T_S) : TDM_KVPOLL_FAILED;
    tdm_status_t st = tdm_xfer_decode_commit(dec.s.x, room[ROOMS], &got);
    xfer_cuda_gather_min_runs = keep;
    ok(s == TDM_KVPOLL_SUCCESS && st == TDM_OK && tdm_fake_cuda_gathers == g0 &&
           pages_equal(&pre.s, &dec.s, sp[ROOMS], dp[ROOMS], NP),
       "the gather disabled: the scattered room by one copy per run, byte-exact");
    xt_release(pre.s.x, room[ROOMS], T_S);
    xt_release(dec.s.x, room[ROOMS], T_S);
    gfree(&dec);
    gfree(&pre);
}

typedef struct ctl {
    atomic_int flips;
    pthread_mutex_t mu;
    int acked;
    int has_mm; /* the last checksum_mismatch's where */
    tdm_xfer_mismatch_t mm;
} ctl_t;

static int fault_cb(void *ctx, tdm_xfer_fault_t f, uint32_t *ret_arg)
{
    ctl_t *c = ctx;
    if (f != TDM_XFER_FAULT_FLIP_KV_BITS || atomic_load(&c->flips) <= 0)
        return 0;
    atomic_fetch_sub(&c->flips, 1);
    *ret_arg = 1;
    return 1;
}

/* prefill: slow_host_copy once (100 ms between taking the room and queueing its copies) */
static atomic_int slow_once;
static int pre_fault_cb(void *ctx, tdm_xfer_fault_t f, uint32_t *ret_arg)
{
    (void)ctx;
    if (f != TDM_XFER_FAULT_SLOW_HOST_COPY || atomic_exchange(&slow_once, 0) == 0)
        return 0;
    *ret_arg = 100;
    return 1;
}

static void on_ev(void *ctx, const tdm_xfer_event_t *ev)
{
    ctl_t *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->acked += !strcmp(ev->type, "abort_acked");
    if (!strcmp(ev->type, "checksum_mismatch")) {
        c->has_mm = ev->mismatch != NULL;
        if (ev->mismatch)
            c->mm = *ev->mismatch;
    }
    pthread_mutex_unlock(&c->mu);
}

static void test_abort_and_flips(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 4, 2, 1, 16, 64};
    gside_t pre, dec;
    ctl_t c = {0};
    pthread_mutex_init(&c.mu, NULL);
    tdm_fake_cuda_copy_latency_us = 300000;
    if (gpools(&pre, &g, 1) || gpools(&dec, &g, 1)) {
        ok(0, "abort: pools");
        return;
    }
    xt_decode_ucx_alloc = 0;
    dec.s.cfg.fault = fault_cb;
    dec.s.cfg.on_event = on_ev;
    dec.s.cfg.ctx = &c;
    pre.s.cfg.fault = pre_fault_cb;
    if (xt_start(&pre.s, &dec.s) || tdm_xfer_wait_ready(dec.s.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "abort: start");
        gfree(&dec);
        gfree(&pre);
        return;
    }
    xt_fill_random(&pre.s, 9);
    tdm_xfer_aux_t aux = {0, 5, 0, 0, {{0, 0}}}, got;
    const uint32_t dp[3] = {20, 21, 22}, sp[3] = {1, 2, 3};
    atomic_store(&slow_once, 1);
    uint64_t t0 = tdm_time_mono_us();
    uint64_t room = start_room(&pre, &dec, 12, dp, sp, &aux);
    /* TRANSFERRING, and 30 ms on: prefill took the room (it sleeps 100 ms, then queues the
     * copies, which land 300 ms later); the ABORT arrives in between */
    tdm_kvpoll_t s = room ? xt_wait(dec.s.x, room, TDM_KVPOLL_TRANSFERRING, T_S) : 0;
    tdm_time_sleep_us(30000);
    tdm_status_t ab = tdm_xfer_abort(dec.s.x, room, "test abort");
    tdm_status_t busy = tdm_xfer_release(dec.s.x, room);
    tdm_status_t rel = xt_release(dec.s.x, room, T_S);
    uint64_t dt = tdm_time_mono_us() - t0;
    ok(room && s == TDM_KVPOLL_TRANSFERRING && ab == TDM_OK && busy == TDM_ERR_BUSY &&
           rel == TDM_OK && dt >= 390000 && c.acked == 1,
       "ABORT while the copies run: pages quarantined, ACK only after they landed (%.0f ms of "
       ">= 400; release %s then %s)",
       dt / 1e3, tdm_status_name(busy), tdm_status_name(rel));
    xt_release(pre.s.x, room, T_S);

    tdm_fake_cuda_copy_latency_us = 2000;
    int caught = 0, clean = 0, named = 0;
    for (int t = 0; t < 10; t++) {
        const uint32_t d[2] = {(uint32_t)(30 + t), (uint32_t)(50 + t)}, p[2] = {5, 6};
        atomic_store(&c.flips, t % 2);
        uint64_t r = start_room(&pre, &dec, 6, d, p, &aux);
        if (!r || xt_wait(dec.s.x, r, TDM_KVPOLL_SUCCESS, T_S) != TDM_KVPOLL_SUCCESS)
            break;
        c.has_mm = 0;
        tdm_status_t st = tdm_xfer_decode_commit(dec.s.x, r, &got);
        caught += t % 2 && st == TDM_ERR_CORRUPT;
        if (t % 2) {
            /* the truth from the bytes (the double's device memory is the host's): the one
             * (page, layer, sub-buffer) whose decode bytes differ from prefill's; the segment
             * sums folded on the host from the per-segment hashes name it */
            const tdm_kv_buffers_t *kd = dec.s.cfg.kv[0], *kp = pre.s.cfg.kv[0];
            const tdm_kv_layout_t *l = kd->layout;
            int ndiff = 0;
            uint32_t wc = 0, wl = 0, ws = 0;
            for (uint32_t i = 0; i < 2; i++)
                for (uint32_t ll = 0; ll < l->num_layers; ll++)
                    for (uint32_t s2 = 0; s2 < l->n_sub; s2++)
                        if (memcmp(tdm_kv_slot(kd, ll, (tdm_kv_sub_t)s2, d[i], 0),
                                   tdm_kv_slot(kp, ll, (tdm_kv_sub_t)s2, p[i], 0),
                                   l->sub[s2].page_stride) != 0 &&
                            ndiff++ == 0) {
                            wc = i;
                            wl = ll;
                            ws = s2;
                        }
            pthread_mutex_lock(&c.mu);
            int good = ndiff == 1 && c.has_mm && c.mm.has_page && c.mm.has_segment &&
                       c.mm.rank == 0 && c.mm.page == d[wc] && c.mm.chunk == wc &&
                       c.mm.layer == wl && c.mm.sub == ws && c.mm.segs_differ == 1;
            if (!good)
                diag("room %d: %d segment(s) differ (first chunk %u layer %u sub %u); evidence "
                     "%d: page %u chunk %u layer %u sub %u",
                     t, ndiff, wc, wl, ws, c.has_mm, c.mm.page, c.mm.chunk, c.mm.layer, c.mm.sub);
            pthread_mutex_unlock(&c.mu);
            named += good;
        }
        clean += !(t % 2) && st == TDM_OK;
        xt_release(pre.s.x, r, T_S);
        xt_release(dec.s.x, r, T_S);
    }
    ok(caught == 5 && clean == 5,
       "flip_kv_bits on a device byte: %d/5 flipped rooms refused at commit, %d/5 clean", caught,
       clean);
    ok(named == 5,
       "device pool: %d/5 mismatches name the page, layer and sub-buffer whose bytes differ "
       "(segment sums folded on the host from the GPU segment hashes)",
       named);
    gfree(&dec);
    gfree(&pre);
    pthread_mutex_destroy(&c.mu);
}

int main(void)
{
    test_transfer(1);
    test_transfer(2);
    test_mixed(1);
    test_mixed(0);
    test_gather_rooms();
    test_abort_and_flips();
    return done_testing();
}
