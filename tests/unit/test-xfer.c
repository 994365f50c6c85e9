/*
 * test-xfer.c — the transfer engine end to end over real UCX on loopback: random pages between
 * two pools arrive bit-identical (bf16 and fp8, TP 1 and 2, contiguous and scattered pages;
 * rooms up to 20 MiB through the sender's-thread and transfer-thread copies, streaming stores);
 * REGISTER mismatches are refused naming the field; ABORT in every state (unknown room, waiting,
 * taken by the scheduler, transferring, after success, from prefill) with decode pages
 * quarantined until ABORT_ACK; a lost peer and an unanswered ABORT raise corruption_risk; the
 * heartbeat timeout; bit flips in decode memory after the write are caught by the checksums
 * (and, as the control, not caught with checksums off), the evidence naming exactly the rank,
 * page, layer and sub-buffer flipped (bf16 TP 1, fp8 TP 2: the scale sub-buffers too); a STATUS
 * without segment sums still verified (rank and page named), one whose count is wrong failing the
 * room naming it; a wrong aux slot is caught; rooms that name only the prompt's last pages (decode
 * holds the rest) are moved, verified and counted.
 */
#include "config.h"

#include <stdio.h>

#include "dataplane/xfer/xfer_int.h"
#include "tap.h"
#include "xfer-testutil.h"

#define T_S 5000000ull

static uint32_t page_bytes(const xt_side_t *s)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->lay.n_sub; i++)
        n += (uint32_t)s->lay.sub[i].page_stride;
    return n * s->lay.num_layers;
}

/* One room: decode sends info for dpages, prefill writes spages. Returns the decode state. */
static tdm_kvpoll_t one_room(xt_side_t *pre, xt_side_t *dec, uint32_t n_prompt,
                             const uint32_t *dpages, const uint32_t *spages, uint64_t *ret_room,
                             tdm_xfer_aux_t *aux)
{
    uint32_t n_pages = (n_prompt + dec->lay.page_size - 1) / dec->lay.page_size;
    uint32_t *prompt = calloc(n_prompt, 4);
    tdm_xfer_request_t req;
    memset(&req, 0, sizeof(req));
    for (uint32_t i = 0; i < n_prompt; i++)
        prompt[i] = i * 7 + 1;
    tdm_status_t st =
        tdm_xfer_decode_send_info(dec->x, prompt, n_prompt, dpages, n_pages, NULL, ret_room);
    free(prompt);
    if (st != TDM_OK) {
        diag("send_info: %s", tdm_status_name(st));
        return TDM_KVPOLL_FAILED;
    }
    if (xt_next(pre->x, &req, T_S) != TDM_OK || req.room != *ret_room || req.n_prompt != n_prompt ||
        req.n_pages != n_pages || req.prompt_ids[n_prompt - 1] != (n_prompt - 1) * 7 + 1) {
        tdm_xfer_stats_t ps, ds;
        tdm_kvpoll_t dst = TDM_KVPOLL_MAX, pst = TDM_KVPOLL_MAX;
        tdm_xfer_stats(pre->x, &ps);
        tdm_xfer_stats(dec->x, &ds);
        tdm_xfer_poll(dec->x, *ret_room, &dst);
        tdm_xfer_poll(pre->x, *ret_room, &pst);
        diag("prefill_next: room %llx got %llx; pre unexpected %llu late %llu malformed %llu "
             "rx %llu; dec rx %llu unexpected %llu; dec state %d pre state %d",
             (unsigned long long)*ret_room, (unsigned long long)req.room,
             (unsigned long long)ps.frames_unexpected, (unsigned long long)ps.refused_late,
             (unsigned long long)ps.frames_malformed, (unsigned long long)ps.frames_rx,
             (unsigned long long)ds.frames_rx, (unsigned long long)ds.frames_unexpected, dst, pst);
        tdm_xfer_request_clear(&req);
        return TDM_KVPOLL_FAILED;
    }
    tdm_xfer_request_clear(&req);
    st = tdm_xfer_prefill_send(pre->x, *ret_room, spages, n_pages, aux);
    if (st != TDM_OK) {
        diag("prefill_send: %s", tdm_status_name(st));
        return TDM_KVPOLL_FAILED;
    }
    return xt_wait(dec->x, *ret_room, TDM_KVPOLL_SUCCESS, T_S);
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

/* err_mode: prefill's endpoint error handling (AUTO on loopback = NONE); ucx_alloc: decode's
 * pools allocated by the engine through UCX (else the caller's aligned_alloc pools). */
static void test_transfer_mode(tdm_dtype_t dt, uint32_t n_ranks, tdm_xfer_err_mode_t err_mode,
                               int ucx_alloc)
{
    xt_geom_t gp = {dt, n_ranks, 16, 3, 2, 64, 40}, gd = gp;
    xt_side_t pre, dec;
    uint64_t seed = 0x1234 + dt * 7 + n_ranks;
    gd.num_pages = 64; /* the pools differ in size: remote offsets come from REGISTER */
    xt_decode_ucx_alloc = ucx_alloc;
    int started = !xt_pools(&pre, &gp) && !xt_pools(&dec, &gd);
    pre.cfg.ep_err_mode = err_mode;
    started = started && !xt_start(&pre, &dec);
    xt_decode_ucx_alloc = 1;
    if (!started) {
        ok(0, "start %s tp %u", tdm_dtype_name(dt), n_ranks);
        return;
    }
    char why[256] = "";
    is_int(tdm_xfer_wait_ready(dec.x, T_S, why, sizeof(why)), TDM_OK, "%s tp %u: registered",
           tdm_dtype_name(dt), n_ranks);
    xt_fill_random(&pre, seed);
    int all_ok = 1, rooms = 0;
    for (int t = 0; t < 12; t++) {
        uint32_t n_prompt = 1 + (uint32_t)(xt_rng(&seed) % (6 * 16));
        uint32_t n = (n_prompt + 15) / 16;
        uint32_t dp[8], sp[8];
        /* even trials contiguous on both sides (one put per layer/sub), odd ones scattered */
        uint32_t d0 = (uint32_t)(xt_rng(&seed) % (gd.num_pages - 8));
        uint32_t s0 = (uint32_t)(xt_rng(&seed) % (gp.num_pages - 8));
        for (uint32_t i = 0; i < n; i++) {
            dp[i] = t % 2 ? (d0 + i * 7) % gd.num_pages : d0 + i;
            sp[i] = t % 2 ? (s0 + n - 1 - i) : s0 + i;
        }
        tdm_xfer_aux_t aux = {0, 1000u + (uint32_t)t, -0.5f - (float)t, 2, {{5, -1.f}, {6, -2.f}}};
        uint64_t room;
        tdm_kvpoll_t st = one_room(&pre, &dec, n_prompt, dp, sp, &room, &aux);
        tdm_xfer_aux_t got;
        if (st != TDM_KVPOLL_SUCCESS || tdm_xfer_decode_commit(dec.x, room, &got) != TDM_OK ||
            got.first_token != aux.first_token || got.first_logprob != aux.first_logprob ||
            got.n_top != 2 || got.top[1].id != 6 || got.room != room ||
            !pages_equal(&pre, &dec, sp, dp, n)) {
            all_ok = 0;
            diag("trial %d: state %s", t, tdm_kvpoll_name(st));
        }
        tdm_kvpoll_t ps;
        if (xt_wait(pre.x, room, TDM_KVPOLL_SUCCESS, T_S) != TDM_KVPOLL_SUCCESS)
            all_ok = 0;
        if (xt_release(pre.x, room, T_S) != TDM_OK || xt_release(dec.x, room, T_S) != TDM_OK ||
            tdm_xfer_poll(dec.x, room, &ps) != TDM_ERR_NOTFOUND)
            all_ok = 0;
        rooms++;
    }
    ok(all_ok, "%s tp %u: %d rooms bit-identical, aux delivered, released on both sides",
       tdm_dtype_name(dt), n_ranks, rooms);
    tdm_xfer_stats_t s;
    tdm_xfer_stats(pre.x, &s);
    ok(s.puts > 0 && s.rooms_ok == 12, "%s tp %u: %llu puts, %llu bytes", tdm_dtype_name(dt),
       n_ranks, (unsigned long long)s.puts, (unsigned long long)s.bytes_put);
    int want_peer = err_mode == TDM_XFER_ERR_PEER;
    ok(s.eps_err_peer == (want_peer ? n_ranks : 0) && s.eps_err_none == (want_peer ? 0 : n_ranks),
       "%s tp %u: endpoints %u with peer error handling, %u without (loopback peer, mode %d)",
       tdm_dtype_name(dt), n_ranks, s.eps_err_peer, s.eps_err_none, (int)err_mode);
    ok((tdm_xfer_kv_pool(dec.x, 0) != NULL) == (ucx_alloc != 0) &&
           tdm_xfer_kv_pool(pre.x, 0) == NULL && tdm_xfer_kv_pool(dec.x, n_ranks) == NULL,
       "%s tp %u: engine-owned decode pools exactly with ucx_alloc (%d)", tdm_dtype_name(dt),
       n_ranks, ucx_alloc);
    xt_side_free(&dec);
    xt_side_free(&pre);
}

/* Decode-side prefix (docs/contracts.md §d): a room of a 60-token prompt (4 pages) that names
 * only its last 1..3 pages (decode holds the ones before) at TP 2: prefill is handed that many
 * pages, writes them, commit verifies exactly their checksums; both engines count the pages
 * named and skipped with their bytes; 0 pages or more than the prompt has are refused. */
static void test_held_prefix(void)
{
    xt_geom_t gp = {TDM_DTYPE_BF16, 2, 16, 3, 2, 64, 40}, gd = gp;
    xt_side_t pre, dec;
    uint64_t seed = 0xbeef;
    if (xt_pools(&pre, &gp) || xt_pools(&dec, &gd) || xt_start(&pre, &dec) ||
        tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "held prefix: start");
        return;
    }
    xt_fill_random(&pre, seed);
    uint32_t prompt[60], dp[4] = {9, 3, 17, 30}, sp[4] = {1, 2, 5, 8};
    for (uint32_t i = 0; i < 60; i++)
        prompt[i] = 3 + i;
    uint64_t room = 0;
    is_int(tdm_xfer_decode_send_info(dec.x, prompt, 60, dp, 0, NULL, &room), TDM_ERR_INVAL,
           "held prefix: a room naming no page is refused");
    is_int(tdm_xfer_decode_send_info(dec.x, prompt, 60, dp, 5, NULL, &room), TDM_ERR_INVAL,
           "held prefix: a room naming more pages than the prompt has is refused");
    int all_ok = 1;
    uint64_t named = 0;
    for (uint32_t k = 1; k <= 3; k++) {
        tdm_xfer_request_t req;
        memset(&req, 0, sizeof(req));
        tdm_xfer_aux_t aux = {0, 40u + k, -0.25f, 0, {{0, 0.f}}}, got;
        if (tdm_xfer_decode_send_info(dec.x, prompt, 60, dp + 4 - k, k, NULL, &room) != TDM_OK ||
            xt_next(pre.x, &req, T_S) != TDM_OK || req.room != room || req.n_pages != k ||
            req.n_prompt != 60 || req.page_ids[0] != dp[4 - k]) {
            all_ok = 0;
            diag("k %u: room not handed to prefill with %u pages (got %u)", k, k, req.n_pages);
            tdm_xfer_request_clear(&req);
            continue;
        }
        tdm_xfer_request_clear(&req);
        named += k;
        if (tdm_xfer_prefill_send(pre.x, room, sp + 4 - k, k, &aux) != TDM_OK ||
            xt_wait(dec.x, room, TDM_KVPOLL_SUCCESS, T_S) != TDM_KVPOLL_SUCCESS ||
            tdm_xfer_decode_commit(dec.x, room, &got) != TDM_OK || got.first_token != 40u + k ||
            !pages_equal(&pre, &dec, sp + 4 - k, dp + 4 - k, k) ||
            xt_wait(pre.x, room, TDM_KVPOLL_SUCCESS, T_S) != TDM_KVPOLL_SUCCESS ||
            xt_release(pre.x, room, T_S) != TDM_OK || xt_release(dec.x, room, T_S) != TDM_OK) {
            all_ok = 0;
            diag("k %u: room did not complete", k);
        }
    }
    ok(all_ok, "held prefix: rooms naming the last 1, 2 and 3 of 4 pages arrive bit-identical, "
               "verified by commit");
    tdm_xfer_stats_t ds, ps;
    tdm_xfer_stats(dec.x, &ds);
    tdm_xfer_stats(pre.x, &ps);
    const uint64_t pb = (uint64_t)page_bytes(&dec) * gd.n_ranks;
    ok(ds.room_pages == named && ds.prefix_pages_skipped == 3 * 4 - named &&
           ds.room_bytes == named * pb && ds.prefix_bytes_saved == (3 * 4 - named) * pb &&
           ds.checksum_bytes == named * pb && ds.checksum_mismatch == 0,
       "held prefix: decode counts %llu pages named, %llu skipped (%llu bytes saved), verified "
       "%llu bytes",
       (unsigned long long)ds.room_pages, (unsigned long long)ds.prefix_pages_skipped,
       (unsigned long long)ds.prefix_bytes_saved, (unsigned long long)ds.checksum_bytes);
    ok(ps.room_pages == ds.room_pages && ps.prefix_pages_skipped == ds.prefix_pages_skipped &&
           ps.prefix_bytes_saved == ds.prefix_bytes_saved,
       "held prefix: prefill counts the same");
    xt_side_free(&dec);
    xt_side_free(&pre);
}

/* Rooms of 2, 10 and 20 MiB (bf16, 32 layers: 512 KiB a page), contiguous and scattered: copied
 * by the sender's thread with cached stores, by it with streaming stores (>= 8 MiB), and by the
 * transfer thread with streaming stores (> 16 MiB). Checksums on: commit verifies every page. */
static void test_large_rooms(void)
{
    xt_geom_t gp = {TDM_DTYPE_BF16, 1, 16, 32, 2, 128, 48}, gd = gp;
    xt_side_t pre, dec;
    uint64_t seed = 0x5eed;
    gd.num_pages = 96;
    if (xt_pools(&pre, &gp) || xt_pools(&dec, &gd) || xt_start(&pre, &dec) ||
        tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "large rooms: start");
        return;
    }
    xt_fill_random(&pre, seed);
    const uint32_t sizes[] = {4, 20, 40};
    for (int k = 0; k < 6; k++) {
        uint32_t n = sizes[k / 2], dp[40], sp[40];
        for (uint32_t i = 0; i < n; i++) {
            dp[i] = k % 2 ? (i * 7 + 3) % gd.num_pages : 50 + i;
            sp[i] = k % 2 ? n - 1 - i : 8 + i % 40;
        }
        if (k % 2 == 0)
            for (uint32_t i = 0; i < n; i++)
                sp[i] = i + (48 - n) / 2;
        xroom_t probe;
        memset(&probe, 0, sizeof(probe));
        probe.n_pages = n;
        pthread_mutex_lock(&pre.x->mu);
        int inl = tdm_xfer_inline_ok(pre.x, &probe);
        pthread_mutex_unlock(&pre.x->mu);
        tdm_xfer_aux_t aux = {0, 77u + (uint32_t)k, -1.f, 0, {{0, 0}}}, got;
        uint64_t room;
        tdm_kvpoll_t st = one_room(&pre, &dec, n * 16, dp, sp, &room, &aux);
        int good = st == TDM_KVPOLL_SUCCESS &&
                   tdm_xfer_decode_commit(dec.x, room, &got) == TDM_OK &&
                   got.first_token == aux.first_token && pages_equal(&pre, &dec, sp, dp, n);
        ok(good && inl == (n * 512 <= 16 * 1024),
           "large rooms: %u MiB %s, written by the %s: bit-identical, checksums verified", n / 2,
           k % 2 ? "scattered" : "contiguous", inl ? "sender's thread" : "transfer thread");
        xt_wait(pre.x, room, TDM_KVPOLL_SUCCESS, T_S);
        xt_release(pre.x, room, T_S);
        xt_release(dec.x, room, T_S);
    }
    xt_side_free(&dec);
    xt_side_free(&pre);
}

static void test_transfer(tdm_dtype_t dt, uint32_t n_ranks)
{
    test_transfer_mode(dt, n_ranks, TDM_XFER_ERR_AUTO, 1);
}

/* The decode process dies while prefill's puts (endpoints without UCX error handling) are in
 * flight: the channel finds the dead peer, prefill crashes not, every room ends terminal and is
 * released, and a new decode group registers and gets bit-identical pages. */
static void test_decode_dies_err_none(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 2, 16, 4, 2, 64, 128};
    xt_side_t pre, dec, dec2;
    uint32_t prompt[256], dp[16], sp[16];
    uint64_t rooms[24];
    tdm_xfer_request_t req;
    tdm_xfer_aux_t aux = {0, 3, -1.0f, 0, {{0, 0}}};
    tdm_xfer_stats_t s;
    for (uint32_t i = 0; i < 256; i++)
        prompt[i] = i;
    for (uint32_t i = 0; i < 16; i++)
        dp[i] = sp[i] = i * 3;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
        ok(0, "decode dies: pools");
        return;
    }
    pre.cfg.ep_err_mode = TDM_XFER_ERR_NONE;
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "decode dies: start");
        return;
    }
    xt_fill_random(&pre, 4242);
    uint32_t n = 0;
    for (; n < 24; n++) {
        if (tdm_xfer_decode_send_info(dec.x, prompt, 256, dp, 16, NULL, &rooms[n]) != TDM_OK ||
            xt_next(pre.x, &req, T_S) != TDM_OK)
            break;
        tdm_xfer_request_clear(&req);
        tdm_xfer_prefill_send(pre.x, rooms[n], sp, 16, &aux);
    }
    is_int(n, 24, "decode dies: 24 rooms of 16 pages in flight");
    tdm_xfer_free(dec.x); /* the decode side goes away: channel closed, UCX memory unmapped */
    dec.x = NULL;
    int lost = 0;
    for (int i = 0; i < 500 && !lost; i++) {
        tdm_xfer_stats(pre.x, &s);
        lost = s.peer_lost >= 1;
        tdm_time_sleep_us(10000);
    }
    ok(lost, "decode dies: prefill declared the peer lost");
    ok(s.eps_err_none == 2 && s.eps_err_peer == 0, "decode dies: endpoints without error handling");
    int terminal = 1, released = 1;
    for (uint32_t i = 0; i < n; i++) {
        tdm_kvpoll_t st = xt_wait(pre.x, rooms[i], TDM_KVPOLL_SUCCESS, T_S);
        terminal &= st == TDM_KVPOLL_SUCCESS || st == TDM_KVPOLL_FAILED;
        released &= xt_release(pre.x, rooms[i], T_S) == TDM_OK;
    }
    ok(terminal, "decode dies: every prefill room ended SUCCESS or FAILED");
    ok(released, "decode dies: every prefill room released (puts flushed)");

    /* prefill keeps serving: a new decode group registers and a room arrives intact */
    if (xt_pools(&dec2, &g)) {
        ok(0, "decode dies: second pools");
    } else {
        dec2.cfg.role = TDM_XFER_DECODE;
        dec2.cfg.instance_id = 0x3333;
        dec2.cfg.host = "127.0.0.1";
        dec2.cfg.port = tdm_xfer_port(pre.x);
        tdm_xfer_cfg_t c = dec2.cfg;
        c.ucx_alloc = 1;
        c.kv_num_pages = g.num_pages;
        for (uint32_t r = 0; r < g.n_ranks; r++) {
            c.kv_layout[r] = tdm_kv_pool_layout(dec2.pool[r]);
            c.kv[r] = NULL;
        }
        int up = tdm_xfer_init(&c, &dec2.x) == TDM_OK;
        for (int i = 0; up && i < 600; i++) {
            if (tdm_xfer_wait_ready(dec2.x, 100000, NULL, 0) == TDM_OK)
                break;
            if (i == 599)
                up = 0;
        }
        ok(up, "decode dies: a new decode group registers with the same prefill");
        if (up) {
            for (uint32_t r = 0; r < g.n_ranks; r++)
                dec2.cfg.kv[r] = tdm_kv_pool_buffers(tdm_xfer_kv_pool(dec2.x, r));
            uint64_t room;
            tdm_kvpoll_t st = one_room(&pre, &dec2, 100, dp, sp, &room, &aux);
            tdm_xfer_aux_t got;
            ok(st == TDM_KVPOLL_SUCCESS && tdm_xfer_decode_commit(dec2.x, room, &got) == TDM_OK &&
                   pages_equal(&pre, &dec2, sp, dp, 7),
               "decode dies: the next group's room is bit-identical (%s)", tdm_kvpoll_name(st));
        }
        xt_side_free(&dec2);
    }
    xt_side_free(&dec);
    xt_side_free(&pre);
}

static void expect_refused(const char *what, xt_geom_t gp, xt_geom_t gd, const char *needle)
{
    xt_side_t pre, dec;
    char why[512] = "";
    if (xt_pools(&pre, &gp) || xt_pools(&dec, &gd) || xt_start(&pre, &dec)) {
        ok(0, "%s: start", what);
        return;
    }
    tdm_status_t st = tdm_xfer_wait_ready(dec.x, T_S, why, sizeof(why));
    is_int(st, TDM_ERR_CORRUPT, "%s: REGISTER refused", what);
    ok(strstr(why, needle) != NULL, "%s: message names the field: '%s'", what, why);
    tdm_xfer_stats_t s;
    tdm_xfer_stats(pre.x, &s);
    ok(s.register_refused >= 1, "%s: prefill counted the refusal", what);
    xt_side_free(&dec);
    xt_side_free(&pre);
}

static void test_mismatch(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 2, 1, 32, 16}, d;
    d = g;
    d.page_size = 32;
    expect_refused("page size", g, d, "page_size 32 != 16");
    d = g;
    d.dtype = TDM_DTYPE_FP8_E4M3;
    expect_refused("kv dtype", g, d, "kv_dtype fp8_e4m3 != bf16");
    d = g;
    d.n_ranks = 2;
    expect_refused("tp size", g, d, "tp_size 2 != 1");
    d = g;
    d.head_dim = 64;
    expect_refused("head dim", g, d, "head_dim 64 != 32");
    d = g;
    d.num_layers = 3;
    expect_refused("layers", g, d, "num_layers 3 != 2");
}

/* --disaggregation-disable-checksums on one side only: decode refuses the verdict, naming it */
static void test_checksum_knob(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 2, 1, 32, 16};
    for (int side = 0; side < 2; side++) {
        xt_side_t pre, dec;
        char why[512] = "";
        if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
            ok(0, "checksum knob: pools");
            return;
        }
        pre.cfg.disable_checksums = side == 0;
        dec.cfg.disable_checksums = side == 1;
        if (xt_start(&pre, &dec)) {
            ok(0, "checksum knob: start");
            return;
        }
        tdm_status_t st = tdm_xfer_wait_ready(dec.x, T_S, why, sizeof(why));
        is_int(st, TDM_ERR_CORRUPT, "checksums off on %s only: registration refused",
               side ? "decode" : "prefill");
        ok(strstr(why, "--disaggregation-disable-checksums") && strstr(why, "checksums:"),
           "the refusal names the flag: '%s'", why);
        tdm_xfer_stats_t s;
        tdm_xfer_stats(dec.x, &s);
        ok(s.register_refused >= 1, "decode counted the refusal");
        xt_side_free(&dec);
        xt_side_free(&pre);
    }
}

/* cfg.fault: flip_kv_bits on decode turns a good room into TDM_ERR_CORRUPT at commit */
typedef struct fault_ctl {
    _Atomic int flips;
} fault_ctl_t;

static int fault_cb(void *ctx, tdm_xfer_fault_t f, uint32_t *ret_arg)
{
    fault_ctl_t *c = ctx;
    if (f != TDM_XFER_FAULT_FLIP_KV_BITS || atomic_load(&c->flips) <= 0)
        return 0;
    atomic_fetch_sub(&c->flips, 1);
    *ret_arg = 1;
    return 1;
}

static void test_fault_flip(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 4, 2, 1, 16, 64};
    xt_side_t pre, dec;
    fault_ctl_t ctl = {0};
    uint64_t seed = 4242;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
        ok(0, "fault flip: pools");
        return;
    }
    dec.cfg.fault = fault_cb;
    dec.cfg.ctx = &ctl;
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "fault flip: start");
        return;
    }
    xt_fill_random(&pre, seed);
    tdm_xfer_aux_t aux = {0, 1, 0, 0, {{0, 0}}}, got;
    int caught = 0, clean = 0;
    for (int t = 0; t < 40; t++) {
        uint32_t dp[2] = {(uint32_t)t % 30, 40 + (uint32_t)t % 20}, sp[2] = {1, 2};
        uint64_t room;
        atomic_store(&ctl.flips, t % 2);
        if (one_room(&pre, &dec, 7, dp, sp, &room, &aux) != TDM_KVPOLL_SUCCESS)
            break;
        tdm_status_t st = tdm_xfer_decode_commit(dec.x, room, &got);
        caught += t % 2 && st == TDM_ERR_CORRUPT;
        clean += !(t % 2) && st == TDM_OK;
        xt_release(pre.x, room, T_S);
        xt_release(dec.x, room, T_S);
    }
    is_int(caught, 20, "flip_kv_bits through cfg.fault: 20/20 flipped rooms refused at commit");
    is_int(clean, 20, "rooms without the fault commit cleanly (20/20)");
    tdm_xfer_stats_t s;
    tdm_xfer_stats(dec.x, &s);
    ok(s.faults_fired == 20 && s.checksum_mismatch == 20 && s.checksum_bytes > 0 &&
           s.checksum_ns > 0,
       "faults_fired %llu, checksum_mismatch %llu, %llu bytes hashed",
       (unsigned long long)s.faults_fired, (unsigned long long)s.checksum_mismatch,
       (unsigned long long)s.checksum_bytes);
    xt_side_free(&dec);
    xt_side_free(&pre);
}

typedef struct evlog {
    pthread_mutex_t mu;
    int acked, unacked, corruption, peer_lost;
    int has_mm; /* the last checksum_mismatch's where and reason */
    tdm_xfer_mismatch_t mm;
    char reason[256];
    char failed[256]; /* the last kvpoll transition to FAILED: its reason */
} evlog_t;

static void on_ev(void *ctx, const tdm_xfer_event_t *ev)
{
    evlog_t *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (!strcmp(ev->type, "checksum_mismatch")) {
        l->has_mm = ev->mismatch != NULL;
        if (ev->mismatch)
            l->mm = *ev->mismatch;
        snprintf(l->reason, sizeof(l->reason), "%s", ev->reason);
    }
    if (!strcmp(ev->type, "kvpoll") && ev->to == TDM_KVPOLL_FAILED)
        snprintf(l->failed, sizeof(l->failed), "%s", ev->reason);
    if (!strcmp(ev->type, "abort_acked"))
        l->acked++;
    else if (!strcmp(ev->type, "abort_unacked"))
        l->unacked++;
    else if (!strcmp(ev->type, "checksum_mismatch") || !strcmp(ev->type, "aux_room_mismatch"))
        l->corruption++;
    else if (!strcmp(ev->type, "peer_lost"))
        l->peer_lost++;
    pthread_mutex_unlock(&l->mu);
}

static void test_abort(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 2, 4, 2, 1, 32, 64};
    xt_side_t pre, dec;
    evlog_t ev = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0};
    uint32_t prompt[64], dp[16], sp[16];
    tdm_xfer_request_t req;
    tdm_xfer_stats_t s0, s1;
    tdm_kvpoll_t st;
    uint64_t room;
    tdm_xfer_aux_t aux = {0, 7, -1.0f, 0, {{0, 0}}};
    for (uint32_t i = 0; i < 64; i++)
        prompt[i] = i;
    for (uint32_t i = 0; i < 16; i++)
        dp[i] = sp[i] = i;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
        ok(0, "abort: pools");
        return;
    }
    dec.cfg.on_event = on_ev;
    dec.cfg.ctx = &ev;
    dec.cfg.abort_ack_timeout_us = 300000;
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "abort: start");
        return;
    }
    xt_fill_random(&pre, 99);

    /* unknown room: ABORT goes out, prefill tombstones it and ACKs */
    tdm_xfer_stats(dec.x, &s0);
    is_int(tdm_xfer_abort(dec.x, 0x123456789abcull, "test"), TDM_OK, "abort of an unknown room");
    for (int i = 0; i < 1000; i++) {
        tdm_xfer_stats(dec.x, &s1);
        if (s1.aborts_acked > s0.aborts_acked)
            break;
        tdm_time_sleep_us(1000);
    }
    ok(s1.aborts_acked == s0.aborts_acked + 1, "unknown room: ABORT_ACK received");
    is_int(tdm_xfer_poll(pre.x, 0x123456789abcull, &st), TDM_OK, "prefill keeps a tombstone");
    is_int(st, TDM_KVPOLL_FAILED, "tombstone is FAILED");

    /* WAITING_FOR_INPUT on both sides (prefill never took it): quarantined until the ACK */
    is_int(tdm_xfer_decode_send_info(dec.x, prompt, 10, dp, 3, NULL, &room), TDM_OK, "send info");
    is_int(xt_wait(pre.x, room, TDM_KVPOLL_WAITING_FOR_INPUT, T_S), TDM_KVPOLL_WAITING_FOR_INPUT,
           "prefill room WAITING_FOR_INPUT");
    is_int(tdm_xfer_abort(dec.x, room, "client gone"), TDM_OK, "abort while waiting");
    tdm_status_t r1 = tdm_xfer_release(dec.x, room);
    ok(r1 == TDM_ERR_BUSY || r1 == TDM_OK, "release right after abort: %s", tdm_status_name(r1));
    /* the ACK may already be in (then the first release succeeded): the same number of points
     * either way, so the TAP count does not depend on the race */
    is_int(r1 == TDM_ERR_BUSY ? xt_release(dec.x, room, T_S) : TDM_OK, TDM_OK,
           "released once ACKed");
    is_int(xt_next(pre.x, &req, 100000), TDM_ERR_AGAIN, "aborted room never reaches the scheduler");

    /* taken by the scheduler, not sent yet: prefill_send refuses, ACK flows */
    is_int(tdm_xfer_decode_send_info(dec.x, prompt, 10, dp, 3, NULL, &room), TDM_OK, "send info");
    is_int(xt_next(pre.x, &req, T_S), TDM_OK, "scheduler took the room");
    tdm_xfer_request_clear(&req);
    tdm_xfer_abort(dec.x, room, "client gone");
    is_int(xt_release(dec.x, room, T_S), TDM_OK, "decode released after ACK");
    is_int(tdm_xfer_prefill_send(pre.x, room, sp, 3, &aux), TDM_ERR_ABORTED,
           "prefill_send of an aborted room refused");
    is_int(tdm_xfer_release(pre.x, room), TDM_OK, "prefill releases the aborted room");

    /* during the transfer: a 64-token room, abort right after prefill_send */
    int busy_seen = 0, all = 1;
    for (int t = 0; t < 20; t++) {
        if (tdm_xfer_decode_send_info(dec.x, prompt, 64, dp, 16, NULL, &room) != TDM_OK ||
            xt_next(pre.x, &req, T_S) != TDM_OK) {
            all = 0;
            break;
        }
        tdm_xfer_request_clear(&req);
        tdm_xfer_prefill_send(pre.x, room, sp, 16, &aux);
        tdm_xfer_abort(dec.x, room, "abort mid-transfer");
        tdm_status_t r = tdm_xfer_release(dec.x, room);
        busy_seen += r == TDM_ERR_BUSY;
        if ((r != TDM_OK && xt_release(dec.x, room, T_S) != TDM_OK) ||
            xt_release(pre.x, room, T_S) != TDM_OK)
            all = 0;
    }
    ok(all, "abort mid-transfer x20: both sides release after the handshake");
    ok(busy_seen > 0, "decode pages were quarantined before the ACK (%d/20)", busy_seen);

    /* after SUCCESS: nothing in flight, no quarantine, commit refused */
    if (one_room(&pre, &dec, 8, dp, sp, &room, &aux) != TDM_KVPOLL_SUCCESS)
        ok(0, "room reaches SUCCESS");
    tdm_xfer_abort(dec.x, room, "late abort");
    tdm_xfer_aux_t got;
    is_int(tdm_xfer_decode_commit(dec.x, room, &got), TDM_ERR_STATE, "commit after abort refused");
    is_int(tdm_xfer_release(dec.x, room), TDM_OK, "after SUCCESS: released at once");
    is_int(xt_release(pre.x, room, T_S), TDM_OK, "prefill released");

    /* prefill fails the room: decode sees FAILED with the reason, pages free at once */
    is_int(tdm_xfer_decode_send_info(dec.x, prompt, 10, dp, 3, NULL, &room), TDM_OK, "send info");
    is_int(xt_next(pre.x, &req, T_S), TDM_OK, "scheduler took it");
    tdm_xfer_request_clear(&req);
    tdm_xfer_abort(pre.x, room, "prefill forward failed");
    is_int(xt_wait(dec.x, room, TDM_KVPOLL_SUCCESS, T_S), TDM_KVPOLL_FAILED, "decode sees FAILED");
    is_int(tdm_xfer_release(dec.x, room), TDM_OK, "prefill-failed room: pages free");
    is_int(tdm_xfer_release(pre.x, room), TDM_OK, "prefill released");

    /* the peer dies with a room waiting: quarantined, ACK timeout raises corruption_risk */
    is_int(tdm_xfer_decode_send_info(dec.x, prompt, 10, dp, 3, NULL, &room), TDM_OK, "send info");
    xt_wait(pre.x, room, TDM_KVPOLL_WAITING_FOR_INPUT, T_S);
    tdm_xfer_free(pre.x);
    pre.x = NULL;
    is_int(xt_wait(dec.x, room, TDM_KVPOLL_SUCCESS, T_S), TDM_KVPOLL_FAILED,
           "peer lost: room FAILED");
    is_int(tdm_xfer_release(dec.x, room), TDM_ERR_BUSY, "peer lost: pages quarantined");
    tdm_time_sleep_us(600000);
    tdm_xfer_stats(dec.x, &s1);
    ok(s1.corruption_risk >= 1, "no ACK: corruption_risk %llu",
       (unsigned long long)s1.corruption_risk);
    is_int(tdm_xfer_release(dec.x, room), TDM_ERR_BUSY, "still quarantined after the timeout");
    pthread_mutex_lock(&ev.mu);
    ok(ev.acked >= busy_seen && ev.unacked >= 1 && ev.peer_lost == 1,
       "events: %d abort_acked, %d abort_unacked, %d peer_lost", ev.acked, ev.unacked,
       ev.peer_lost);
    pthread_mutex_unlock(&ev.mu);
    xt_side_free(&dec);
    xt_side_free(&pre);
}

static void test_heartbeat_timeout(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 4, 1, 1, 16, 8};
    xt_side_t pre, dec;
    tdm_xfer_stats_t s;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
        ok(0, "heartbeat: pools");
        return;
    }
    pre.cfg.peer_timeout_us = 400000;
    dec.cfg.heartbeat_us = 60000000; /* decode goes silent */
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "heartbeat: start");
        return;
    }
    tdm_time_sleep_us(1200000);
    tdm_xfer_stats(pre.x, &s);
    ok(s.peer_lost >= 1, "silent peer declared lost after the heartbeat timeout (%llu)",
       (unsigned long long)s.peer_lost);
    xt_side_free(&dec);
    xt_side_free(&pre);
}

/* The rooms a lost channel failed and the peer_lost event after them, in the order one side's
 * engine emitted them. */
typedef struct lostlog {
    pthread_mutex_t mu;
    uint64_t failed[16]; /* rooms whose kvpoll went to FAILED before the first peer_lost */
    uint32_t n_failed;
    int lost; /* peer_lost events */
    char reason[128];
    uint64_t named[TDM_XFER_PEER_LOST_ROOMS]; /* the first peer_lost's rooms */
    uint32_t n_named, failed_rooms;
} lostlog_t;

static void on_lost_ev(void *ctx, const tdm_xfer_event_t *ev)
{
    lostlog_t *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (!strcmp(ev->type, "kvpoll") && ev->to == TDM_KVPOLL_FAILED && !l->lost && l->n_failed < 16)
        l->failed[l->n_failed++] = ev->room;
    if (!strcmp(ev->type, "peer_lost") && l->lost++ == 0) {
        snprintf(l->reason, sizeof(l->reason), "%s", ev->reason);
        l->n_named = ev->n_rooms < TDM_XFER_PEER_LOST_ROOMS ? ev->n_rooms : 0;
        for (uint32_t i = 0; i < l->n_named; i++)
            l->named[i] = ev->rooms[i];
        l->failed_rooms = ev->failed_rooms;
    }
    pthread_mutex_unlock(&l->mu);
}

static int lost_names(lostlog_t *l, uint64_t room, int *ret_before)
{
    int named = 0, before = 0;
    pthread_mutex_lock(&l->mu);
    for (uint32_t i = 0; i < l->n_named; i++)
        named |= l->named[i] == room;
    for (uint32_t i = 0; i < l->n_failed; i++)
        before |= l->failed[i] == room;
    pthread_mutex_unlock(&l->mu);
    *ret_before = before;
    return named;
}

/* stall_transfer on prefill: holds the transfer thread once, for stall_ms */
static atomic_int pre_stall;
static int pre_stall_cb(void *ctx, tdm_xfer_fault_t f, uint32_t *ret_arg)
{
    (void)ctx;
    if (f != TDM_XFER_FAULT_STALL_TRANSFER || atomic_exchange(&pre_stall, 0) == 0)
        return 0;
    *ret_arg = 1500;
    return 1;
}

/* The partition's evidence (docs/alerts.md TRANSFER_STALL; tests/chaos/chaos.py scenario 8): a
 * room in flight (its transfer held by stall_transfer) when prefill's channel times out. Each
 * side fails the rooms bound to the channel first, then emits peer_lost naming them and their
 * count: a detector that reads the event is not ahead of the rooms (the alert's evidence is taken
 * when it opens). The old order (peer_lost, then the rooms) named none on prefill's side. */
static void test_peer_lost_names_rooms(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 2, 4, 2, 1, 32, 64};
    xt_side_t pre, dec;
    lostlog_t lp = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, "", {0}, 0, 0};
    lostlog_t ld = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, "", {0}, 0, 0};
    uint32_t prompt[64], dp[4] = {1, 2, 3, 4}, sp[4] = {5, 6, 7, 8};
    tdm_xfer_request_t req;
    tdm_xfer_aux_t aux = {0, 7, -1.0f, 0, {{0, 0}}};
    uint64_t room = 0;
    for (uint32_t i = 0; i < 64; i++)
        prompt[i] = i;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
        ok(0, "peer_lost names its rooms: pools");
        return;
    }
    pre.cfg.peer_timeout_us = 400000;
    dec.cfg.heartbeat_us = 60000000; /* decode goes silent after its TRANSFER_INFO */
    pre.cfg.fault = pre_stall_cb;
    pre.cfg.on_event = on_lost_ev;
    pre.cfg.ctx = &lp;
    dec.cfg.on_event = on_lost_ev;
    dec.cfg.ctx = &ld;
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "peer_lost names its rooms: start");
        return;
    }
    xt_fill_random(&pre, 31337);
    atomic_store(&pre_stall, 1);
    int sent = tdm_xfer_decode_send_info(dec.x, prompt, 64, dp, 4, NULL, &room) == TDM_OK &&
               xt_next(pre.x, &req, T_S) == TDM_OK;
    if (sent) {
        tdm_xfer_request_clear(&req);
        sent = tdm_xfer_prefill_send(pre.x, room, sp, 4, &aux) == TDM_OK;
    }
    ok(sent, "peer_lost names its rooms: a room sent, its transfer held by stall_transfer");
    int both = 0;
    for (int i = 0; i < 500 && !both; i++) {
        pthread_mutex_lock(&lp.mu);
        pthread_mutex_lock(&ld.mu);
        both = lp.lost >= 1 && ld.lost >= 1;
        pthread_mutex_unlock(&ld.mu);
        pthread_mutex_unlock(&lp.mu);
        tdm_time_sleep_us(10000);
    }
    int before_p, before_d;
    int named_p = lost_names(&lp, room, &before_p), named_d = lost_names(&ld, room, &before_d);
    ok(both && strstr(lp.reason, "timeout") != NULL, "both sides lost the channel (prefill: %s)",
       lp.reason);
    ok(named_p && before_p && lp.failed_rooms == 1,
       "prefill: peer_lost names the room in flight (%s) and counts it (%u), its FAILED came "
       "first (%s)",
       named_p ? "named" : "not named", lp.failed_rooms, before_p ? "yes" : "no");
    ok(named_d && before_d && ld.failed_rooms == 1,
       "decode: peer_lost names the room (%s) and counts it (%u), its FAILED came first (%s)",
       named_d ? "named" : "not named", ld.failed_rooms, before_d ? "yes" : "no");
    is_int(xt_wait(pre.x, room, TDM_KVPOLL_SUCCESS, T_S), TDM_KVPOLL_FAILED,
           "prefill: the held room stays FAILED once its transfer resumes");
    xt_side_free(&dec);
    xt_side_free(&pre);
}

/* flips: after the write completes, before commit; with and without checksums */
static void test_flips(int checksums, int trials)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 4, 2, 1, 16, 64};
    xt_side_t pre, dec;
    evlog_t ev = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0};
    uint64_t seed = 777 + (uint64_t)checksums;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
        ok(0, "flips: pools");
        return;
    }
    pre.cfg.disable_checksums = dec.cfg.disable_checksums = !checksums;
    dec.cfg.on_event = on_ev;
    dec.cfg.ctx = &ev;
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "flips: start");
        return;
    }
    xt_fill_random(&pre, seed);
    int caught = 0, clean_ok = 0, ran = 0;
    uint32_t pb = page_bytes(&dec);
    tdm_xfer_aux_t aux = {0, 1, 0, 0, {{0, 0}}};
    for (int t = 0; t < trials; t++) {
        uint32_t n_prompt = 1 + (uint32_t)(xt_rng(&seed) % 12), n = (n_prompt + 3) / 4;
        uint32_t dp[3], sp[3];
        for (uint32_t i = 0; i < n; i++) {
            dp[i] = (uint32_t)(xt_rng(&seed) % 20) * 3 + i;
            sp[i] = (uint32_t)(xt_rng(&seed) % 60) + i;
        }
        if (n > 1 && dp[1] == dp[0])
            dp[1]++;
        if (n > 2 && (dp[2] == dp[0] || dp[2] == dp[1]))
            dp[2] = 63;
        uint64_t room;
        if (one_room(&pre, &dec, n_prompt, dp, sp, &room, &aux) != TDM_KVPOLL_SUCCESS) {
            diag("trial %d did not transfer", t);
            break;
        }
        int flip = t % 10 != 0; /* every tenth trial is clean: commit must pass */
        if (flip) {
            uint32_t pi = (uint32_t)(xt_rng(&seed) % n), off = (uint32_t)(xt_rng(&seed) % pb);
            /* walk (layer, sub) to the byte `off` of page dp[pi] */
            for (uint32_t l = 0; l < dec.lay.num_layers; l++)
                for (uint32_t s = 0; s < dec.lay.n_sub; s++) {
                    uint32_t len = (uint32_t)dec.lay.sub[s].page_stride;
                    if (off < len) {
                        tdm_kv_slot(dec.cfg.kv[0], l, (tdm_kv_sub_t)s, dp[pi], 0)[off] ^=
                            (uint8_t)(1u << (xt_rng(&seed) % 8));
                        off = UINT32_MAX;
                        break;
                    }
                    if (off != UINT32_MAX)
                        off -= len;
                }
        }
        tdm_xfer_aux_t got;
        tdm_status_t st = tdm_xfer_decode_commit(dec.x, room, &got);
        if (flip)
            caught += st == TDM_ERR_CORRUPT;
        else
            clean_ok += st == TDM_OK;
        xt_release(pre.x, room, T_S);
        xt_release(dec.x, room, T_S);
        ran++;
    }
    int flips = ran - ran / 10 - (ran % 10 != 0);
    flips = 0;
    for (int t = 0; t < ran; t++)
        flips += t % 10 != 0;
    tdm_xfer_stats_t s;
    tdm_xfer_stats(dec.x, &s);
    if (checksums) {
        ok(ran == trials && caught == flips, "checksums on: %d/%d bit flips caught over %d rooms",
           caught, flips, ran);
        ok(clean_ok == ran - flips, "clean rooms commit (%d/%d)", clean_ok, ran - flips);
        ok(s.checksum_mismatch == (uint64_t)caught && ev.corruption == caught,
           "mismatches counted (%llu) and reported as events (%d)",
           (unsigned long long)s.checksum_mismatch, ev.corruption);
    } else {
        ok(ran == trials && caught == 0, "checksums off (control): %d/%d flips pass unnoticed",
           flips - caught, flips);
    }
    xt_side_free(&dec);
    xt_side_free(&pre);
}

/* The evidence names the flipped byte's rank, page, layer and sub-buffer (docs/contracts.md §d
 * "Segment sums"): one byte flipped at a known (rank, page, layer, sub-buffer, offset) of decode's
 * memory per room, then two bytes in two segments of two pages (the counts). */
static void test_flip_evidence(tdm_dtype_t dt, uint32_t n_ranks, int trials)
{
    xt_geom_t g = {dt, n_ranks, 4, 3, 1, 16, 64};
    xt_side_t pre, dec;
    evlog_t ev = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, {0}, "", ""};
    uint64_t seed = 99 + (uint64_t)dt * 7 + n_ranks;
    const char *what = dt == TDM_DTYPE_FP8_E4M3 ? "fp8" : "bf16";
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
        ok(0, "flip evidence: pools");
        return;
    }
    dec.cfg.on_event = on_ev;
    dec.cfg.ctx = &ev;
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "flip evidence: start");
        return;
    }
    xt_fill_random(&pre, seed);
    tdm_xfer_aux_t aux = {0, 1, 0, 0, {{0, 0}}}, got;
    const tdm_kv_layout_t *l = &dec.lay;
    const uint32_t segs = n_ranks * l->num_layers * l->n_sub;
    int exact = 0, ran = 0, text_ok = 0;
    char last[256] = "", want[160] = "";
    for (int t = 0; t < trials + 1; t++) {
        uint32_t dp[3] = {(uint32_t)t % 20, 21 + (uint32_t)t % 20, 42 + (uint32_t)t % 20};
        uint32_t sp[3] = {1, 2, 3};
        uint64_t room;
        if (one_room(&pre, &dec, 11, dp, sp, &room, &aux) != TDM_KVPOLL_SUCCESS)
            break;
        /* the truth: (rank, chunk, layer, sub, offset) */
        uint32_t rank = (uint32_t)(xt_rng(&seed) % n_ranks), chunk = (uint32_t)(xt_rng(&seed) % 3);
        uint32_t layer = (uint32_t)(xt_rng(&seed) % l->num_layers);
        uint32_t s = (uint32_t)(xt_rng(&seed) % l->n_sub);
        uint32_t off = (uint32_t)(xt_rng(&seed) % l->sub[s].page_stride);
        tdm_kv_slot(dec.cfg.kv[rank], layer, (tdm_kv_sub_t)s, dp[chunk], 0)[off] ^= 0x10;
        int two = t == trials; /* the last room: a second byte, another page and segment */
        uint32_t layer2 = (layer + 1) % l->num_layers, chunk2 = (chunk + 1) % 3;
        if (two)
            tdm_kv_slot(dec.cfg.kv[rank], layer2, (tdm_kv_sub_t)s, dp[chunk2], 0)[0] ^= 1;
        ev.has_mm = 0;
        tdm_status_t st = tdm_xfer_decode_commit(dec.x, room, &got);
        pthread_mutex_lock(&ev.mu);
        tdm_xfer_mismatch_t m = ev.mm;
        int has = ev.has_mm;
        snprintf(last, sizeof(last), "%s", ev.reason);
        pthread_mutex_unlock(&ev.mu);
        /* the first page (rank-major, room order) and the first segment (layer-major) */
        uint32_t fc = two ? (chunk < chunk2 ? chunk : chunk2) : chunk;
        uint32_t fl = two ? (layer < layer2 ? layer : layer2) : layer;
        uint32_t np = two ? 2 : 1;
        snprintf(want, sizeof(want), "rank %u page %u (chunk %u) layer %u sub-buffer %s; %u of %u",
                 rank, dp[fc], fc, fl, tdm_kv_sub_name((tdm_kv_sub_t)s), np, n_ranks * 3);
        int good = st == TDM_ERR_CORRUPT && has && m.has_page && m.has_segment && m.rank == rank &&
                   m.seg_rank == rank && m.page == dp[fc] && m.chunk == fc && m.layer == fl &&
                   m.sub == s && m.pages_differ == np && m.segs_differ == np &&
                   m.pages_total == n_ranks * 3 && m.segs_total == segs;
        if (!good)
            diag("%s TP%u trial %d: flipped rank %u chunk %u layer %u sub %s; evidence: %s", what,
                 n_ranks, t, rank, chunk, layer, tdm_kv_sub_name((tdm_kv_sub_t)s), last);
        if (two) {
            ok(good && strstr(last, want) && strstr(last, "2 of ") != NULL,
               "%s TP%u: two bytes in two pages and segments: the first of each named, 2 pages "
               "and 2 segments counted (%s)",
               what, n_ranks, last);
        } else {
            exact += good;
            text_ok += strstr(last, want) != NULL;
            ran++;
        }
        xt_release(pre.x, room, T_S);
        xt_release(dec.x, room, T_S);
    }
    ok(ran == trials && exact == trials && text_ok == trials,
       "%s TP%u: %d/%d flipped bytes named exactly (rank, page, chunk, layer, sub-buffer, counts "
       "in the event; the reason text too: %d), e.g. \"%s\"",
       what, n_ranks, exact, trials, text_ok, last);
    xt_side_free(&dec);
    xt_side_free(&pre);
}

/* A STATUS without the segment-sum trailer (a prefill that predates it) still verifies, naming
 * rank and page only; a trailer whose count is not the room's fails the room naming it. The
 * prefill room's count is edited while slow_host_copy holds its write (before its STATUS). */
static atomic_int pre_slow;
static int pre_slow_cb(void *ctx, tdm_xfer_fault_t f, uint32_t *ret_arg)
{
    (void)ctx;
    if (f != TDM_XFER_FAULT_SLOW_HOST_COPY || atomic_exchange(&pre_slow, 0) == 0)
        return 0;
    *ret_arg = 300;
    return 1;
}

static void test_seg_trailer_compat(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 4, 3, 1, 16, 64};
    xt_side_t pre, dec;
    evlog_t ev = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, {0}, "", ""};
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g)) {
        ok(0, "trailer compat: pools");
        return;
    }
    pre.cfg.fault = pre_slow_cb;
    dec.cfg.on_event = on_ev;
    dec.cfg.ctx = &ev;
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "trailer compat: start");
        return;
    }
    xt_fill_random(&pre, 5150);
    for (int mode = 0; mode < 2; mode++) {
        uint32_t prompt[8], dp[2] = {10 + (uint32_t)mode, 20 + (uint32_t)mode}, sp[2] = {3, 4};
        uint64_t room = 0;
        tdm_xfer_request_t req;
        tdm_xfer_aux_t aux = {0, 1, 0, 0, {{0, 0}}}, got;
        for (uint32_t i = 0; i < 8; i++)
            prompt[i] = i + 1;
        memset(&req, 0, sizeof(req));
        if (tdm_xfer_decode_send_info(dec.x, prompt, 8, dp, 2, NULL, &room) != TDM_OK ||
            xt_next(pre.x, &req, T_S) != TDM_OK || req.room != room) {
            ok(0, "trailer compat: room %d", mode);
            break;
        }
        tdm_xfer_request_clear(&req);
        atomic_store(&pre_slow, 1);
        tdm_status_t st = tdm_xfer_prefill_send(pre.x, room, sp, 2, &aux);
        pthread_mutex_lock(&pre.x->mu);
        xroom_t *r = tdm_xfer_map_get(pre.x, room);
        uint32_t total = r ? r->n_seg_sums : 0;
        if (r)
            r->n_seg_sums = mode == 0 ? 0 : total - 1;
        pthread_mutex_unlock(&pre.x->mu);
        tdm_kvpoll_t s = xt_wait(dec.x, room, TDM_KVPOLL_SUCCESS, T_S);
        if (mode == 0) {
            tdm_kv_slot(dec.cfg.kv[0], 1, TDM_KV_SUB_V, dp[1], 0)[7] ^= 0x20;
            st = st == TDM_OK && s == TDM_KVPOLL_SUCCESS ? tdm_xfer_decode_commit(dec.x, room, &got)
                                                         : TDM_ERR_STATE;
            char want[160];
            snprintf(want, sizeof(want),
                     "checksum mismatch: rank 0 page %u (chunk 1), layer and sub-buffer unknown "
                     "(no segment sums in STATUS); 1 of 2 page(s) differ",
                     dp[1]);
            pthread_mutex_lock(&ev.mu);
            ok(total == 6 && st == TDM_ERR_CORRUPT && ev.has_mm && !ev.mm.has_segment &&
                   ev.mm.page == dp[1] && ev.mm.segs_total == 0 && !strcmp(ev.reason, want),
               "STATUS without segment sums: verified, the evidence names rank and page only "
               "('%s')",
               ev.reason);
            pthread_mutex_unlock(&ev.mu);
        } else {
            char want[96];
            snprintf(want, sizeof(want), "STATUS seg_sums: count %u != %u", total - 1, total);
            pthread_mutex_lock(&ev.mu);
            ok(st == TDM_OK && s == TDM_KVPOLL_FAILED && strstr(ev.failed, want),
               "STATUS segment sums of the wrong count: the room fails naming the field ('%s')",
               ev.failed);
            pthread_mutex_unlock(&ev.mu);
        }
        xt_release(pre.x, room, T_S);
        xt_release(dec.x, room, T_S);
    }
    xt_side_free(&dec);
    xt_side_free(&pre);
}

static void test_aux_check(void)
{
    xt_geom_t g = {TDM_DTYPE_FP8_E4M3, 1, 4, 1, 1, 16, 16};
    xt_side_t pre, dec;
    uint32_t dp[1] = {3}, sp[1] = {5};
    tdm_xfer_aux_t aux = {0, 1, 0, 0, {{0, 0}}}, got;
    uint64_t room;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g) || xt_start(&pre, &dec) ||
        tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "aux: start");
        return;
    }
    if (one_room(&pre, &dec, 3, dp, sp, &room, &aux) != TDM_KVPOLL_SUCCESS)
        ok(0, "aux: room transferred");
    /* another room's id in the slot (a mis-addressed aux write) */
    xroom_t *r = tdm_xfer_map_get(dec.x, room);
    uint8_t *slot = dec.x->aux[0] + (size_t)r->aux_slot * TDM_XFER_AUX_BYTES;
    slot[8] ^= 0x01;
    is_int(tdm_xfer_decode_commit(dec.x, room, &got), TDM_ERR_CORRUPT, "aux room id mismatch");
    tdm_xfer_stats_t s;
    tdm_xfer_stats(dec.x, &s);
    is_u64(s.aux_mismatch, 1, "aux mismatch counted");
    tdm_kvpoll_t st;
    tdm_xfer_poll(dec.x, room, &st);
    is_int(st, TDM_KVPOLL_FAILED, "corrupt room FAILED");
    xt_side_free(&dec);
    xt_side_free(&pre);
}

/* Regression: the bootstrap thread read its clock before taking the lock, so a room opened in
 * between looked ~2^64 µs old and timed out at once (flaky transfers under load). */
static void test_room_clock_race(void)
{
    tdm_xfer_room_cfg_t c = {16, 1, 1000, 1000, 1000, NULL, NULL};
    tdm_xfer_rooms_t *t;
    tdm_xfer_room_info_t info;
    if (tdm_xfer_rooms_init(&c, &t) != TDM_OK) {
        ok(0, "rooms init");
        return;
    }
    tdm_xfer_room_open(t, 42, 5000);
    is_int(tdm_xfer_rooms_tick(t, 4999), 0, "tick with a clock read before the open: no timeout");
    tdm_xfer_room_get(t, 42, &info);
    is_int(info.state, TDM_KVPOLL_BOOTSTRAPPING, "room still BOOTSTRAPPING");
    is_int(tdm_xfer_rooms_tick(t, 6000), 1, "a real timeout still fires");
    tdm_xfer_rooms_free(t);
}

/* tdm_xfer_cork: the TRANSFER_INFO frames of 8 rooms queued under a (nested) cork leave at the
 * uncork, in order, in at most a few socket writes (one, unless the receive thread woke for a
 * heartbeat meanwhile and sent what was queued then: frames may leave earlier, never later);
 * a cork of a second engine on the same thread is a no-op; the rooms then move end to end. */
/* No heartbeats for a minute: a heartbeat wakes the receive thread, which then sends what is
 * queued, corked or not (frames may leave earlier than the uncork, never later). */
static void cork_quiet(xt_side_t *pre, xt_side_t *dec)
{
    pre->cfg.heartbeat_us = dec->cfg.heartbeat_us = 60000000;
    pre->cfg.peer_timeout_us = dec->cfg.peer_timeout_us = 180000000;
}

static void test_cork(void)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 2, 2, 64, 64};
    xt_side_t pre, dec;
    int pools = !xt_pools(&pre, &g) && !xt_pools(&dec, &g);
    cork_quiet(&pre, &dec);
    dec.cfg.cork_hold_us = 60000000; /* the batch below is held whole, however slow the host */
    if (!pools || xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "cork: start");
        return;
    }
    xt_fill_random(&pre, 77);
    uint32_t prompt[16] = {0};
    uint64_t room[8];
    tdm_xfer_stats_t s0, s1;
    /* what the registration still sends after ready must not count: wait until decode's channel
     * has been quiet for 50 ms (a loaded host may still be writing its last frame) */
    tdm_xfer_stats(dec.x, &s0);
    for (int i = 0; i < 100; i++) {
        tdm_time_sleep_us(50000);
        tdm_xfer_stats(dec.x, &s1);
        if (s1.frame_writes == s0.frame_writes && s1.frames_tx == s0.frames_tx)
            break;
        s0 = s1;
    }
    tdm_xfer_cork(dec.x);
    tdm_xfer_cork(dec.x);
    tdm_xfer_cork(pre.x); /* another engine while dec is corked: a no-op */
    tdm_xfer_uncork(pre.x);
    int sent = 1;
    for (uint32_t i = 0; i < 8; i++) {
        uint32_t page = i;
        sent = sent &&
               tdm_xfer_decode_send_info(dec.x, prompt, 16, &page, 1, NULL, &room[i]) == TDM_OK;
        tdm_time_sleep_us(2000); /* uncorked, the receive thread would send each on its own */
    }
    tdm_xfer_uncork(dec.x); /* the inner one: still corked */
    tdm_xfer_uncork(dec.x);
    tdm_xfer_stats(dec.x, &s1);
    uint64_t writes = s1.frame_writes - s0.frame_writes;
    ok(sent && s1.frames_tx - s0.frames_tx == 8 && writes == 1,
       "cork: 8 TRANSFER_INFO frames queued (%llu sent), %llu socket writes at the uncork",
       (unsigned long long)(s1.frames_tx - s0.frames_tx), (unsigned long long)writes);
    int order = 1, moved = 1;
    tdm_xfer_aux_t aux = {0, 7, -1.f, 0, {{0, 0}}};
    for (uint32_t i = 0; i < 8; i++) {
        tdm_xfer_request_t req;
        memset(&req, 0, sizeof(req));
        if (xt_next(pre.x, &req, T_S) != TDM_OK || req.room != room[i]) {
            order = 0;
            tdm_xfer_request_clear(&req);
            break;
        }
        tdm_xfer_request_clear(&req);
        uint32_t sp = 63 - i;
        moved = moved && tdm_xfer_prefill_send(pre.x, room[i], &sp, 1, &aux) == TDM_OK;
    }
    ok(order, "cork: prefill took the 8 rooms in the order they were queued");
    for (uint32_t i = 0; i < 8 && order; i++) {
        tdm_xfer_aux_t got;
        uint32_t sp = 63 - i, dp = i;
        moved = moved && xt_wait(dec.x, room[i], TDM_KVPOLL_SUCCESS, T_S) == TDM_KVPOLL_SUCCESS &&
                tdm_xfer_decode_commit(dec.x, room[i], &got) == TDM_OK && got.room == room[i] &&
                pages_equal(&pre, &dec, &sp, &dp, 1) && xt_release(pre.x, room[i], T_S) == TDM_OK &&
                xt_release(dec.x, room[i], T_S) == TDM_OK;
    }
    ok(order && moved, "cork: the 8 rooms moved, verified and released");
    xt_side_free(&dec);
    xt_side_free(&pre);
    /* with the default hold (200 µs) the next send_info after it sends what waits */
    pools = !xt_pools(&pre, &g) && !xt_pools(&dec, &g);
    cork_quiet(&pre, &dec);
    if (!pools || xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "cork: restart");
        return;
    }
    uint64_t r1 = 0, r2 = 0;
    uint32_t p1 = 10, p2 = 11;
    tdm_xfer_request_t q1, q2;
    memset(&q1, 0, sizeof(q1));
    memset(&q2, 0, sizeof(q2));
    tdm_xfer_stats(dec.x, &s0);
    tdm_xfer_cork(dec.x);
    int ok1 = tdm_xfer_decode_send_info(dec.x, prompt, 16, &p1, 1, NULL, &r1) == TDM_OK;
    tdm_time_sleep_us(1000);
    int ok2 = tdm_xfer_decode_send_info(dec.x, prompt, 16, &p2, 1, NULL, &r2) == TDM_OK;
    tdm_xfer_stats(dec.x, &s1); /* the first frame was written by the call that returned */
    int early = s1.frame_writes > s0.frame_writes && xt_next(pre.x, &q1, T_S) == TDM_OK &&
                q1.room == r1; /* still corked here */
    tdm_xfer_uncork(dec.x);
    int rest = xt_next(pre.x, &q2, T_S) == TDM_OK && q2.room == r2;
    ok(ok1 && ok2 && early && rest,
       "cork: a frame held 1 ms left with the next send_info, before the uncork");
    tdm_xfer_request_clear(&q1);
    tdm_xfer_request_clear(&q2);
    xt_side_free(&dec);
    xt_side_free(&pre);
}

int main(void)
{
    test_room_clock_race();
    uint64_t t0 = tdm_time_mono_us();
    test_transfer(TDM_DTYPE_BF16, 1);
    test_transfer(TDM_DTYPE_FP8_E4M3, 1);
    test_transfer(TDM_DTYPE_BF16, 2);
    test_transfer(TDM_DTYPE_FP8_E4M3, 2);
    test_transfer_mode(TDM_DTYPE_BF16, 2, TDM_XFER_ERR_PEER, 0); /* the remote-host path */
    test_transfer_mode(TDM_DTYPE_BF16, 1, TDM_XFER_ERR_PEER, 1);
    test_transfer_mode(TDM_DTYPE_BF16, 1, TDM_XFER_ERR_NONE, 0);
    test_large_rooms();
    test_held_prefix();
    test_decode_dies_err_none();
    test_mismatch();
    test_checksum_knob();
    test_fault_flip();
    test_abort();
    test_heartbeat_timeout();
    test_peer_lost_names_rooms();
    test_cork();
    diag("setup/abort tests took %.1f s", (double)(tdm_time_mono_us() - t0) / 1e6);
    t0 = tdm_time_mono_us();
    test_flips(1, 1100);
    diag("1100 flip trials took %.1f s", (double)(tdm_time_mono_us() - t0) / 1e6);
    test_flips(0, 50);
    test_flip_evidence(TDM_DTYPE_BF16, 1, 30);
    test_flip_evidence(TDM_DTYPE_FP8_E4M3, 2, 60);
    test_seg_trailer_compat();
    test_aux_check();
    done_testing();
    return exit_status();
}
