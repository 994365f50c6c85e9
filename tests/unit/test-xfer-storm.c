/*
 * test-xfer-storm.c — abort storm over real UCX: 400 rooms, up to 64 in flight, 2 ranks; decode
 * aborts most of them at random points (at once, after a random delay, while transferring, after
 * success) while a prefill "scheduler" thread takes requests, computes for a random time, sends,
 * sometimes fails a room itself. Checks: every thread of both engines still heartbeats (no
 * thread death) and a clean room still transfers afterwards; no decode page is released before
 * its ABORT_ACK, and no byte of a released aborted room changes afterwards (no late write); no
 * room is left BOOTSTRAPPING/WAITING_FOR_INPUT/TRANSFERRING on either side; nothing quarantined
 * and no corruption risk at the end.
 */
#include "config.h"

#include <stdio.h>

#include <tdm/hash.h>

#include "tap.h"
#include "xfer-testutil.h"

#define N_ROOMS 400
#define IN_FLIGHT 64
#define PAGES 3
#define T_S 5000000ull

typedef struct droom {
    uint64_t room;
    uint32_t pages[PAGES], n_pages;
    int plan; /* 0 abort at once, 1 after delay, 2 when TRANSFERRING, 3 after SUCCESS, 4 none */
    uint64_t at_us; /* plan 1 */
    int aborted, busy_seen, released, done;
    uint64_t sum_after;
} droom_t;

static struct {
    pthread_mutex_t mu;
    uint64_t acked[N_ROOMS + 8];
    int n_acked;
} evs = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static void on_ev(void *ctx, const tdm_xfer_event_t *ev)
{
    (void)ctx;
    if (strcmp(ev->type, "abort_acked") != 0)
        return;
    pthread_mutex_lock(&evs.mu);
    if (evs.n_acked < N_ROOMS + 8)
        evs.acked[evs.n_acked++] = ev->room;
    pthread_mutex_unlock(&evs.mu);
}

static int was_acked(uint64_t room)
{
    int f = 0;
    pthread_mutex_lock(&evs.mu);
    for (int i = 0; i < evs.n_acked && !f; i++)
        f = evs.acked[i] == room;
    pthread_mutex_unlock(&evs.mu);
    return f;
}

typedef struct sched {
    xt_side_t *pre;
    volatile int stop;
    uint64_t held[N_ROOMS + 8];
    int n_held, sent, failed_by_prefill;
} sched_t;

static void *prefill_sched(void *arg)
{
    sched_t *s = arg;
    uint64_t seed = 4242;
    while (!s->stop || s->n_held) {
        tdm_xfer_request_t req;
        memset(&req, 0, sizeof(req));
        if (!s->stop && tdm_xfer_prefill_next(s->pre->x, &req) == TDM_OK) {
            uint32_t src[PAGES];
            for (uint32_t i = 0; i < req.n_pages; i++)
                src[i] = (uint32_t)(xt_rng(&seed) % 30);
            tdm_xfer_aux_t aux = {0, 9, -0.1f, 0, {{0, 0}}};
            tdm_time_sleep_us(xt_rng(&seed) % 1500); /* "compute" */
            if (xt_rng(&seed) % 10 == 0) {
                tdm_xfer_abort(s->pre->x, req.room, "prefill failed");
                s->failed_by_prefill++;
            } else if (tdm_xfer_prefill_send(s->pre->x, req.room, src, req.n_pages, &aux) ==
                       TDM_OK) {
                s->sent++;
            }
            s->held[s->n_held++] = req.room;
            tdm_xfer_request_clear(&req);
        }
        for (int i = 0; i < s->n_held;) {
            tdm_status_t st = tdm_xfer_release(s->pre->x, s->held[i]);
            if (st == TDM_OK || st == TDM_ERR_NOTFOUND)
                s->held[i] = s->held[--s->n_held];
            else
                i++;
        }
        tdm_time_sleep_us(100);
    }
    return NULL;
}

static uint64_t pages_sum(xt_side_t *dec, const droom_t *r)
{
    uint64_t h = 0;
    for (uint32_t rank = 0; rank < dec->cfg.n_ranks; rank++)
        for (uint32_t i = 0; i < r->n_pages; i++)
            for (uint32_t l = 0; l < dec->lay.num_layers; l++)
                for (uint32_t s = 0; s < dec->lay.n_sub; s++)
                    h = tdm_hash_combine(
                        h, tdm_hash_xxh64(
                               tdm_kv_slot(dec->cfg.kv[rank], l, (tdm_kv_sub_t)s, r->pages[i], 0),
                               dec->lay.sub[s].page_stride, 0));
    return h;
}

int main(void)
{
    xt_geom_t gp = {TDM_DTYPE_BF16, 2, 4, 2, 1, 16, 32}, gd = gp;
    xt_side_t pre, dec;
    tdm_progress_page_t *page;
    static droom_t rooms[N_ROOMS];
    uint64_t seed = 99;
    gd.num_pages = N_ROOMS * PAGES + 8;
    if (tdm_progress_create_anon(2, 1, &page) != TDM_OK || xt_pools(&pre, &gp) ||
        xt_pools(&dec, &gd)) {
        ok(0, "setup");
        return exit_status();
    }
    pre.cfg.progress = &page->slot[0];
    dec.cfg.progress = &page->slot[1];
    dec.cfg.on_event = on_ev;
    xt_fill_random(&pre, 7);
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, T_S, NULL, 0) != TDM_OK) {
        ok(0, "start");
        return exit_status();
    }
    sched_t s;
    memset(&s, 0, sizeof(s));
    s.pre = &pre;
    pthread_t th;
    pthread_create(&th, NULL, prefill_sched, &s);

    uint32_t prompt[PAGES * 4];
    for (uint32_t i = 0; i < PAGES * 4; i++)
        prompt[i] = i;
    int next = 0, live = 0, early_release = 0, aborted = 0, committed = 0, send_fail = 0;
    uint64_t end = tdm_time_mono_us() + 120000000ull;
    while ((next < N_ROOMS || live) && tdm_time_mono_us() < end) {
        while (next < N_ROOMS && live < IN_FLIGHT) {
            droom_t *r = &rooms[next];
            uint32_t n_prompt = 1 + (uint32_t)(xt_rng(&seed) % (PAGES * 4));
            r->n_pages = (n_prompt + 3) / 4;
            for (uint32_t i = 0; i < r->n_pages; i++)
                r->pages[i] = (uint32_t)next * PAGES + i;
            r->plan = (int)(xt_rng(&seed) % 5);
            /* within 1 ms: same-host transfers (UCX shared memory) finish in about that */
            r->at_us = tdm_time_mono_us() + xt_rng(&seed) % 1000;
            if (tdm_xfer_decode_send_info(dec.x, prompt, n_prompt, r->pages, r->n_pages, NULL,
                                          &r->room) != TDM_OK) {
                send_fail++;
                r->done = 1;
            } else {
                live++;
            }
            next++;
            if (r->plan == 0 && !r->done) {
                tdm_xfer_abort(dec.x, r->room, "client gone");
                r->aborted = 1;
            }
        }
        for (int i = 0; i < next; i++) {
            droom_t *r = &rooms[i];
            tdm_kvpoll_t st;
            if (r->done)
                continue;
            if (tdm_xfer_poll(dec.x, r->room, &st) != TDM_OK) {
                ok(0, "room %d vanished before release", i);
                r->done = 1;
                live--;
                continue;
            }
            if (!r->aborted && ((r->plan == 1 && tdm_time_mono_us() >= r->at_us) ||
                                (r->plan == 2 && st == TDM_KVPOLL_TRANSFERRING) ||
                                (r->plan == 3 && st == TDM_KVPOLL_SUCCESS))) {
                tdm_xfer_abort(dec.x, r->room, "client gone");
                r->aborted = 1;
                continue;
            }
            if (!r->aborted && st == TDM_KVPOLL_SUCCESS) {
                tdm_xfer_aux_t aux;
                committed += tdm_xfer_decode_commit(dec.x, r->room, &aux) == TDM_OK;
            } else if (st != TDM_KVPOLL_FAILED) {
                continue;
            }
            tdm_status_t rs = tdm_xfer_release(dec.x, r->room);
            if (rs == TDM_ERR_BUSY) {
                r->busy_seen = 1;
                continue;
            }
            if (rs != TDM_OK)
                continue;
            if (r->busy_seen && !was_acked(r->room))
                early_release++;
            r->released = 1;
            r->done = 1;
            live--;
            if (r->aborted || st == TDM_KVPOLL_FAILED)
                r->sum_after = pages_sum(&dec, r);
        }
        tdm_time_sleep_us(200);
    }
    for (int i = 0; i < N_ROOMS; i++)
        aborted += rooms[i].aborted;
    /* about 80 % of the rooms are planned to be aborted, but a timed abort can lose the race
     * against a fast transfer (seen: 237-250 of 400 on a loaded 2-core host) */
    ok(aborted >= 150, "hundreds of rooms aborted (%d)", aborted);
    is_int(early_release, 0, "no quarantined page released before its ABORT_ACK");

    /* let anything late land, then check the released aborted rooms' bytes did not change */
    tdm_time_sleep_us(300000);
    int changed = 0, checked = 0;
    for (int i = 0; i < N_ROOMS; i++)
        if (rooms[i].released && rooms[i].sum_after) {
            checked++;
            changed += pages_sum(&dec, &rooms[i]) != rooms[i].sum_after;
        }
    is_int(changed, 0, "no write landed in a released room's pages (%d checked)", checked);

    s.stop = 1;
    pthread_join(th, NULL);
    int stuck = 0;
    for (int i = 0; i < N_ROOMS; i++) {
        tdm_kvpoll_t st;
        if (tdm_xfer_poll(dec.x, rooms[i].room, &st) == TDM_OK && st != TDM_KVPOLL_FAILED &&
            st != TDM_KVPOLL_SUCCESS)
            stuck++;
        if (tdm_xfer_poll(pre.x, rooms[i].room, &st) == TDM_OK && st != TDM_KVPOLL_FAILED &&
            st != TDM_KVPOLL_SUCCESS)
            stuck++;
    }
    is_int(stuck, 0, "no room left BOOTSTRAPPING/WAITING_FOR_INPUT/TRANSFERRING on either side");

    tdm_xfer_stats_t ps, ds;
    tdm_xfer_stats(pre.x, &ps);
    tdm_xfer_stats(dec.x, &ds);
    ok(ds.quarantined == 0 && ds.corruption_risk == 0 && ds.checksum_mismatch == 0,
       "decode: quarantined %llu, corruption_risk %llu, checksum mismatches %llu",
       (unsigned long long)ds.quarantined, (unsigned long long)ds.corruption_risk,
       (unsigned long long)ds.checksum_mismatch);
    diag("prefill: %llu aborts received, %llu acked, %llu rooms ok; decode: %llu aborts sent",
         (unsigned long long)ps.aborts_received, (unsigned long long)ps.aborts_acked,
         (unsigned long long)ps.rooms_ok, (unsigned long long)ds.aborts_sent);

    /* every control thread of both engines is alive: heartbeats within the last second */
    uint64_t now = tdm_time_mono_us();
    int dead = 0;
    for (int side = 0; side < 2; side++)
        for (int t = TDM_HB_BOOTSTRAP; t <= TDM_HB_TRANSFER; t++) {
            uint64_t hb = atomic_load(&page->slot[side].heartbeat_us[t]);
            if (hb == 0 || now - hb > 1000000)
                dead++;
        }
    is_int(dead, 0, "0 thread deaths: bootstrap/recv/transfer heartbeats fresh on both sides");

    /* and the pair still serves a clean room */
    droom_t r = {0};
    r.n_pages = 2;
    r.pages[0] = 0;
    r.pages[1] = 1;
    uint64_t room;
    tdm_xfer_request_t req;
    memset(&req, 0, sizeof(req));
    uint32_t src[2] = {4, 5};
    tdm_xfer_aux_t aux = {0, 5, 0, 0, {{0, 0}}}, got;
    int fine = tdm_xfer_decode_send_info(dec.x, prompt, 8, r.pages, 2, NULL, &room) == TDM_OK &&
               xt_next(pre.x, &req, T_S) == TDM_OK && req.room == room &&
               tdm_xfer_prefill_send(pre.x, room, src, 2, &aux) == TDM_OK &&
               xt_wait(dec.x, room, TDM_KVPOLL_SUCCESS, T_S) == TDM_KVPOLL_SUCCESS &&
               tdm_xfer_decode_commit(dec.x, room, &got) == TDM_OK && got.first_token == 5;
    tdm_xfer_request_clear(&req);
    ok(fine, "after the storm a clean room transfers and verifies");
    xt_side_free(&dec);
    xt_side_free(&pre);
    tdm_progress_close(page);
    done_testing();
    return exit_status();
}
