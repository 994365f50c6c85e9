/*
 * test-xfer-room.c — invariant I4: KVPoll order, MIN across ranks, sticky FAILED, tombstones that
 * refuse late TRANSFER_INFO, abort of unknown rooms, timeouts on a virtual clock, every combined
 * transition reported as an event; plus a randomized churn test of the table against a reference,
 * and the mover's record kept in the room's (a tombstone holding one does not expire).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dataplane/xfer/room.h"
#include "tap.h"

typedef struct evlog {
    int n;
    tdm_xfer_room_event_t ev[64];
} evlog_t;

static void on_event(void *ctx, const tdm_xfer_room_event_t *ev)
{
    evlog_t *l = ctx;
    if (l->n < 64)
        l->ev[l->n++] = *ev;
}

static tdm_kvpoll_t state_of(tdm_xfer_rooms_t *t, uint64_t room)
{
    tdm_xfer_room_info_t info;
    if (tdm_xfer_room_get(t, room, &info) != TDM_OK)
        return TDM_KVPOLL_MAX;
    return info.state;
}

int main(void)
{
    evlog_t log = {0};
    tdm_xfer_room_cfg_t cfg = {.capacity = 64,
                               .n_ranks = 2,
                               .bootstrap_timeout_us = 5000000,
                               .waiting_timeout_us = 10000000,
                               .tombstone_us = 30000000,
                               .on_event = on_event,
                               .ctx = &log};
    tdm_xfer_rooms_t *t;
    ok(tdm_xfer_rooms_init(&cfg, &t) == TDM_OK, "table created");

    uint64_t r1 = tdm_xfer_room_id_new(t);
    ok(r1 != 0 && r1 < (1ull << 63), "room id is non-zero and 63-bit");
    ok(tdm_xfer_room_open(t, r1, 0) == TDM_OK && state_of(t, r1) == TDM_KVPOLL_BOOTSTRAPPING,
       "open → BOOTSTRAPPING");
    ok(tdm_xfer_room_open(t, r1, 0) == TDM_ERR_STATE, "opening a live id again is refused");

    tdm_xfer_room_set(t, r1, 0, TDM_KVPOLL_WAITING_FOR_INPUT, "registered", 10);
    ok(state_of(t, r1) == TDM_KVPOLL_BOOTSTRAPPING, "MIN: one rank ahead does not move the room");
    tdm_xfer_room_set(t, r1, 1, TDM_KVPOLL_TRANSFERRING, "info", 20);
    ok(state_of(t, r1) == TDM_KVPOLL_WAITING_FOR_INPUT, "MIN over ranks is WAITING_FOR_INPUT");
    ok(tdm_xfer_room_set(t, r1, 1, TDM_KVPOLL_WAITING_FOR_INPUT, "back", 30) == TDM_ERR_STATE,
       "a backward move is refused");
    ok(tdm_xfer_room_set(t, r1, 1, TDM_KVPOLL_TRANSFERRING, "again", 30) == TDM_OK,
       "a repeated report is accepted and is no move");
    tdm_xfer_room_set(t, r1, 0, TDM_KVPOLL_SUCCESS, "done", 40);
    tdm_xfer_room_set(t, r1, 1, TDM_KVPOLL_SUCCESS, "done", 50);
    ok(state_of(t, r1) == TDM_KVPOLL_SUCCESS, "both ranks SUCCESS → SUCCESS");
    int seen_order =
        log.n == 4 && log.ev[0].to == TDM_KVPOLL_BOOTSTRAPPING &&
        log.ev[1].to == TDM_KVPOLL_WAITING_FOR_INPUT && log.ev[2].to == TDM_KVPOLL_TRANSFERRING &&
        log.ev[3].from == TDM_KVPOLL_TRANSFERRING && log.ev[3].to == TDM_KVPOLL_SUCCESS &&
        log.ev[3].ts_us == 50 && strcmp(log.ev[3].reason, "done") == 0;
    ok(seen_order, "every combined transition is an event, in order (%d events)", log.n);
    tdm_xfer_room_close(t, r1, 60);
    ok(state_of(t, r1) == TDM_KVPOLL_MAX, "a closed SUCCESS room is gone");

    /* sticky FAILED */
    uint64_t r2 = tdm_xfer_room_id_new(t);
    tdm_xfer_room_open(t, r2, 100);
    tdm_xfer_room_set(t, r2, 0, TDM_KVPOLL_FAILED, "ucx error", 110);
    ok(state_of(t, r2) == TDM_KVPOLL_FAILED, "one FAILED rank fails the room");
    ok(tdm_xfer_room_set(t, r2, 0, TDM_KVPOLL_SUCCESS, "late", 120) == TDM_ERR_STATE,
       "FAILED is sticky for that rank");
    tdm_xfer_room_set(t, r2, 1, TDM_KVPOLL_SUCCESS, "other", 130);
    ok(state_of(t, r2) == TDM_KVPOLL_FAILED, "the room stays FAILED whatever others report");

    /* abort in any state, tombstones refuse late TRANSFER_INFO */
    uint64_t r3 = tdm_xfer_room_id_new(t);
    ok(tdm_xfer_room_accept_info(t, r3, 200) == TDM_OK, "TRANSFER_INFO opens a new room");
    tdm_xfer_room_set(t, r3, 0, TDM_KVPOLL_TRANSFERRING, "writing", 210);
    ok(tdm_xfer_room_abort(t, r3, "client gone", 220) == 1, "abort of a known room");
    tdm_xfer_room_info_t info;
    ok(tdm_xfer_room_get(t, r3, &info) == TDM_OK && info.tombstone && info.aborted &&
           info.state == TDM_KVPOLL_FAILED,
       "an aborted room is a FAILED tombstone");
    ok(tdm_xfer_room_accept_info(t, r3, 230) == TDM_ERR_STATE, "late TRANSFER_INFO refused");
    ok(tdm_xfer_room_open(t, r3, 240) == TDM_ERR_STATE, "a tombstoned id is never resurrected");
    uint64_t r4 = 0x1234;
    ok(tdm_xfer_room_abort(t, r4, "unknown", 250) == 0, "abort of an unknown room is accepted");
    ok(tdm_xfer_room_accept_info(t, r4, 260) == TDM_ERR_STATE,
       "TRANSFER_INFO after ABORT of an unknown room is refused");
    tdm_xfer_room_stats_t stats;
    tdm_xfer_rooms_stats(t, &stats);
    is_int(stats.refused_late, 2, "refused late frames are counted");
    tdm_xfer_rooms_tick(t, 250 + 30000000);
    ok(tdm_xfer_room_get(t, r4, &info) == TDM_ERR_NOTFOUND, "tombstone expires after tombstone_us");

    /* timeouts on a virtual clock */
    uint64_t r5 = tdm_xfer_room_id_new(t), r6 = tdm_xfer_room_id_new(t);
    uint64_t t0 = 100000000;
    tdm_xfer_room_open(t, r5, t0);
    tdm_xfer_room_open(t, r6, t0);
    tdm_xfer_room_set(t, r6, 0, TDM_KVPOLL_WAITING_FOR_INPUT, "r", t0);
    tdm_xfer_room_set(t, r6, 1, TDM_KVPOLL_WAITING_FOR_INPUT, "r", t0);
    ok(tdm_xfer_rooms_tick(t, t0 + 4999999) == 0, "no timeout before the bootstrap deadline");
    ok(tdm_xfer_rooms_tick(t, t0 + 5000000) == 1 && state_of(t, r5) == TDM_KVPOLL_FAILED,
       "BOOTSTRAPPING past its timeout → FAILED");
    ok(tdm_xfer_rooms_tick(t, t0 + 10000000) == 1 && state_of(t, r6) == TDM_KVPOLL_FAILED,
       "WAITING_FOR_INPUT past its timeout → FAILED");

    /* ids: distinct over many draws */
    int dup = 0;
    uint64_t *ids = malloc(100000 * sizeof(*ids));
    for (int i = 0; i < 100000; i++)
        ids[i] = tdm_xfer_room_id_new(t);
    for (int i = 1; i < 100000 && !dup; i++)
        for (int j = i - 1; j >= 0 && j > i - 64; j--)
            if (ids[i] == ids[j] || ids[i] == 0 || ids[i] >> 63)
                dup = 1;
    ok(!dup, "100k room ids: non-zero, 63-bit, no repeats nearby");
    free(ids);
    tdm_xfer_rooms_free(t);

    /* churn vs a reference: random open/abort/close/tick must agree on membership */
    tdm_xfer_room_cfg_t c2 = {.capacity = 512, .n_ranks = 1, .tombstone_us = 50};
    tdm_xfer_rooms_init(&c2, &t);
    enum { N = 300 };
    uint64_t keys[N];
    int present[N]; /* 0 absent, 1 live, 2 tombstone */
    uint64_t born[N];
    memset(present, 0, sizeof(present));
    srand(7);
    for (int i = 0; i < N; i++)
        keys[i] = (uint64_t)(i + 1) * 0x100000001ull; /* collide in low bits on purpose */
    int mismatch = 0;
    uint64_t now = 1000;
    for (int step = 0; step < 20000 && !mismatch; step++) {
        int k = rand() % N;
        now += 1;
        switch (rand() % 4) {
        case 0:
            if (tdm_xfer_room_open(t, keys[k], now) == TDM_OK)
                present[k] = 1;
            break;
        case 1:
            tdm_xfer_room_abort(t, keys[k], "x", now);
            present[k] = 2, born[k] = now;
            break;
        case 2:
            if (present[k] == 1) {
                tdm_xfer_room_set(t, keys[k], 0, TDM_KVPOLL_SUCCESS, "ok", now);
                tdm_xfer_room_close(t, keys[k], now);
                present[k] = 0;
            }
            break;
        default:
            tdm_xfer_rooms_tick(t, now);
            for (int i = 0; i < N; i++)
                if (present[i] == 2 && now - born[i] >= 50)
                    present[i] = 0;
        }
        for (int i = 0; i < N; i++) {
            int got = tdm_xfer_room_get(t, keys[i], &info) == TDM_OK ? (info.tombstone ? 2 : 1) : 0;
            if (got != present[i]) {
                diag("step %d key %d: table says %d, reference %d", step, i, got, present[i]);
                mismatch = 1;
                break;
            }
        }
    }
    ok(!mismatch, "20k random operations: table agrees with the reference");
    tdm_xfer_rooms_free(t);

    /* the mover's record lives in the room's record: a tombstone or a SUCCESS room holding one
     * stays until it is detached, then goes as any other */
    tdm_xfer_room_cfg_t c3 = {.capacity = 8, .n_ranks = 1, .tombstone_us = 50};
    tdm_xfer_rooms_init(&c3, &t);
    int mv1, mv2;
    void *m;
    ok(tdm_xfer_room_attach(t, 77, &mv1) == TDM_ERR_NOTFOUND, "no mover without a room record");
    tdm_xfer_room_open(t, 77, 0);
    tdm_xfer_room_open(t, 78, 0);
    ok(tdm_xfer_room_attach(t, 77, &mv1) == TDM_OK && tdm_xfer_room_attach(t, 78, &mv2) == TDM_OK,
       "movers attached to two rooms");
    ok(tdm_xfer_room_attach(t, 77, &mv2) == TDM_ERR_STATE, "one mover per room");
    ok(tdm_xfer_room_mover(t, 77) == &mv1 && tdm_xfer_rooms_movers(t) == 2, "mover found, counted");
    int seen = 0;
    for (uint32_t i = 0; tdm_xfer_rooms_next_mover(t, &i, &m);)
        seen += m == &mv1 || m == &mv2;
    ok(seen == 2, "iteration visits both movers");
    tdm_xfer_room_abort(t, 77, "quarantine", 10);
    tdm_xfer_rooms_tick(t, 1000);
    ok(tdm_xfer_room_get(t, 77, &info) == TDM_OK && info.tombstone &&
           tdm_xfer_room_mover(t, 77) == &mv1,
       "a tombstone holding its mover outlives tombstone_us");
    ok(tdm_xfer_room_detach(t, 77) == &mv1 && tdm_xfer_room_mover(t, 77) == NULL,
       "detach hands the mover back");
    tdm_xfer_rooms_tick(t, 2000);
    ok(tdm_xfer_room_get(t, 77, &info) == TDM_ERR_NOTFOUND, "then the tombstone expires");
    tdm_xfer_room_set(t, 78, 0, TDM_KVPOLL_SUCCESS, "ok", 2000);
    tdm_xfer_room_close(t, 78, 2000);
    ok(tdm_xfer_room_get(t, 78, &info) == TDM_OK && info.tombstone &&
           tdm_xfer_room_mover(t, 78) == &mv2,
       "close of a SUCCESS room holding its mover leaves a tombstone with it");
    tdm_xfer_room_detach(t, 78);
    tdm_xfer_rooms_tick(t, 3000);
    ok(tdm_xfer_room_get(t, 78, &info) == TDM_ERR_NOTFOUND && tdm_xfer_rooms_movers(t) == 0,
       "released, it goes");
    tdm_xfer_rooms_free(t);
    return done_testing();
}
