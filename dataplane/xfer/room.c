/*
 * room.c — the room table: one record per room, keyed by its id in a tdm/u64map.h map. A record
 * holds the per-rank KVPoll states and the combined state (their MIN), and the engine's mover
 * record while the room's data moves or its pages are held; tombstones are records flagged dead
 * that only block re-use of their id until they expire (not while a mover is attached).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <tdm/mem.h>
#include <tdm/u64map.h>

#include "dataplane/xfer/room.h"

typedef struct entry {
    uint64_t room;
    uint8_t state; /* combined (MIN over ranks) */
    uint8_t tomb;
    uint8_t aborted;
    uint8_t rank_state[TDM_XFER_RANKS_MAX];
    uint64_t created_us, changed_us;
    void *mover; /* the engine's record of the room's data movement; NULL when none */
} entry_t;

struct tdm_xfer_rooms {
    tdm_xfer_room_cfg_t cfg;
    tdm_u64map_t map; /* room id → entry_t (tdm/u64map.h) */
    uint32_t movers;  /* entries with a mover */
    uint64_t rng;
    tdm_xfer_room_stats_t stats;
};

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

tdm_status_t tdm_xfer_rooms_init(const tdm_xfer_room_cfg_t *cfg, tdm_xfer_rooms_t **ret)
{
    if (!cfg || cfg->capacity == 0 || cfg->n_ranks == 0 || cfg->n_ranks > TDM_XFER_RANKS_MAX ||
        cfg->capacity > (1u << 28))
        return TDM_ERR_INVAL;
    tdm_xfer_rooms_t *t = tdm_calloc(1, sizeof(*t));
    tdm_status_t st = tdm_u64map_init(&t->map, cfg->capacity);
    if (st != TDM_OK) {
        free(t);
        return st;
    }
    t->cfg = *cfg;
    if (getrandom(&t->rng, sizeof(t->rng), 0) != (ssize_t)sizeof(t->rng))
        t->rng = (uint64_t)(uintptr_t)t ^ 0x9e3779b97f4a7c15ull;
    *ret = t;
    return TDM_OK;
}

void tdm_xfer_rooms_free(tdm_xfer_rooms_t *t)
{
    if (!t)
        return;
    void *e;
    for (uint32_t i = 0; tdm_u64map_next(&t->map, &i, NULL, &e);)
        free(e);
    tdm_u64map_free(&t->map);
    free(t);
}

uint64_t tdm_xfer_room_id_new(tdm_xfer_rooms_t *t)
{
    uint64_t id;
    do {
        t->rng += 0x9e3779b97f4a7c15ull;
        id = mix64(t->rng) & 0x7fffffffffffffffull;
    } while (id == 0);
    return id;
}

static entry_t *find(const tdm_xfer_rooms_t *t, uint64_t room)
{
    return room == 0 ? NULL : tdm_u64map_get(&t->map, room);
}

static entry_t *insert(tdm_xfer_rooms_t *t, uint64_t room)
{
    if (t->map.n >= t->cfg.capacity)
        return NULL;
    entry_t *e = tdm_calloc(1, sizeof(*e));
    e->room = room;
    if (tdm_u64map_put(&t->map, room, e) != TDM_OK) {
        free(e);
        return NULL;
    }
    return e;
}

static void erase(tdm_xfer_rooms_t *t, entry_t *e)
{
    tdm_u64map_del(&t->map, e->room);
    free(e);
}

static void emit(tdm_xfer_rooms_t *t, uint64_t room, uint8_t from, uint8_t to, const char *reason,
                 uint64_t now)
{
    if (!t->cfg.on_event || from == to)
        return;
    tdm_xfer_room_event_t ev = {room, (tdm_kvpoll_t)from, (tdm_kvpoll_t)to, reason ? reason : "",
                                now};
    t->cfg.on_event(t->cfg.ctx, &ev);
}

static void recombine(tdm_xfer_rooms_t *t, entry_t *e, const char *reason, uint64_t now)
{
    uint8_t m = TDM_KVPOLL_SUCCESS;
    for (uint32_t r = 0; r < t->cfg.n_ranks; r++)
        if (e->rank_state[r] < m)
            m = e->rank_state[r];
    if (m != e->state) {
        uint8_t from = e->state;
        e->state = m;
        e->changed_us = now;
        emit(t, e->room, from, m, reason, now);
    }
}

static void to_tombstone(tdm_xfer_rooms_t *t, entry_t *e, uint64_t now)
{
    if (!e->tomb) {
        e->tomb = 1;
        e->changed_us = now;
        t->stats.tombstones++;
        t->stats.live--;
    }
}

static void fail_all(tdm_xfer_rooms_t *t, entry_t *e, const char *reason, uint64_t now)
{
    for (uint32_t r = 0; r < t->cfg.n_ranks; r++)
        e->rank_state[r] = TDM_KVPOLL_FAILED;
    recombine(t, e, reason, now);
}

tdm_status_t tdm_xfer_room_open(tdm_xfer_rooms_t *t, uint64_t room, uint64_t now_us)
{
    if (room == 0 || room > 0x7fffffffffffffffull)
        return TDM_ERR_INVAL;
    if (find(t, room))
        return TDM_ERR_STATE;
    entry_t *e = insert(t, room);
    if (!e)
        return TDM_ERR_AGAIN;
    e->state = TDM_KVPOLL_BOOTSTRAPPING;
    for (uint32_t r = 0; r < t->cfg.n_ranks; r++)
        e->rank_state[r] = TDM_KVPOLL_BOOTSTRAPPING;
    e->created_us = e->changed_us = now_us;
    t->stats.live++;
    emit(t, room, TDM_KVPOLL_FAILED, TDM_KVPOLL_BOOTSTRAPPING, "open", now_us);
    return TDM_OK;
}

tdm_status_t tdm_xfer_room_accept_info(tdm_xfer_rooms_t *t, uint64_t room, uint64_t now_us)
{
    entry_t *e = find(t, room);
    if (!e)
        return tdm_xfer_room_open(t, room, now_us);
    if (e->tomb || e->state != TDM_KVPOLL_BOOTSTRAPPING) {
        t->stats.refused_late++;
        return TDM_ERR_STATE;
    }
    return TDM_OK;
}

tdm_status_t tdm_xfer_room_set(tdm_xfer_rooms_t *t, uint64_t room, uint32_t rank, tdm_kvpoll_t to,
                               const char *reason, uint64_t now_us)
{
    if (rank >= t->cfg.n_ranks || (unsigned)to >= TDM_KVPOLL_MAX)
        return TDM_ERR_INVAL;
    entry_t *e = find(t, room);
    if (!e || e->tomb)
        return TDM_ERR_NOTFOUND;
    uint8_t cur = e->rank_state[rank];
    if (to == cur && cur != TDM_KVPOLL_FAILED)
        return TDM_OK; /* a repeated report is not a move */
    if (cur == TDM_KVPOLL_FAILED || (to != TDM_KVPOLL_FAILED && to < cur)) {
        t->stats.bad_transitions++;
        return TDM_ERR_STATE;
    }
    e->rank_state[rank] = (uint8_t)to; /* one FAILED rank fails the room: MIN makes it sticky */
    recombine(t, e, reason, now_us);
    return TDM_OK;
}

int tdm_xfer_room_abort(tdm_xfer_rooms_t *t, uint64_t room, const char *reason, uint64_t now_us)
{
    entry_t *e = find(t, room);
    if (!e) {
        if (room == 0 || room > 0x7fffffffffffffffull)
            return 0;
        e = insert(t, room);
        if (!e) /* table full: the late-frame check falls back to "unknown room" */
            return 0;
        e->created_us = e->changed_us = now_us;
        e->state = TDM_KVPOLL_FAILED;
        e->aborted = 1;
        e->tomb = 1;
        t->stats.tombstones++;
        return 0;
    }
    e->aborted = 1;
    if (!e->tomb) {
        fail_all(t, e, reason ? reason : "abort", now_us);
        to_tombstone(t, e, now_us);
    }
    e->changed_us = now_us; /* a repeated ABORT keeps the tombstone alive */
    return 1;
}

void tdm_xfer_room_close(tdm_xfer_rooms_t *t, uint64_t room, uint64_t now_us)
{
    entry_t *e = find(t, room);
    if (!e || e->tomb)
        return;
    if (e->state == TDM_KVPOLL_SUCCESS && !e->mover) {
        erase(t, e);
        t->stats.live--;
        return;
    }
    if (e->state == TDM_KVPOLL_SUCCESS) { /* its mover still holds it: a tombstone until then */
        to_tombstone(t, e, now_us);
        return;
    }
    fail_all(t, e, "closed", now_us);
    to_tombstone(t, e, now_us);
}

uint32_t tdm_xfer_rooms_tick(tdm_xfer_rooms_t *t, uint64_t now_us)
{
    uint32_t failed = 0;
    void *v;
    for (uint32_t i = 0; tdm_u64map_next(&t->map, &i, NULL, &v);) {
        entry_t *e = v;
        /* a stamp later than now (caller's clock read raced an update) is age 0, never a wrap */
        uint64_t age = now_us > e->changed_us ? now_us - e->changed_us : 0;
        if (e->tomb) {
            /* a tombstone whose mover is still held (quarantined pages) waits for its release */
            if (age >= t->cfg.tombstone_us && !e->mover) {
                erase(t, e);
                t->stats.tombstones--;
                i--; /* backward shift may have moved an unvisited entry here */
            }
            continue;
        }
        const char *why = NULL;
        if (e->state == TDM_KVPOLL_BOOTSTRAPPING && t->cfg.bootstrap_timeout_us &&
            age >= t->cfg.bootstrap_timeout_us)
            why = "bootstrap timeout";
        else if ((e->state == TDM_KVPOLL_WAITING_FOR_INPUT ||
                  e->state == TDM_KVPOLL_TRANSFERRING) &&
                 t->cfg.waiting_timeout_us && age >= t->cfg.waiting_timeout_us)
            why = "waiting timeout";
        if (why) {
            fail_all(t, e, why, now_us);
            t->stats.timeouts++;
            failed++;
        }
    }
    return failed;
}

tdm_status_t tdm_xfer_room_get(const tdm_xfer_rooms_t *t, uint64_t room, tdm_xfer_room_info_t *ret)
{
    entry_t *e = find(t, room);
    if (!e)
        return TDM_ERR_NOTFOUND;
    ret->state = (tdm_kvpoll_t)e->state;
    ret->tombstone = e->tomb;
    ret->aborted = e->aborted;
    ret->created_us = e->created_us;
    ret->changed_us = e->changed_us;
    return TDM_OK;
}

void tdm_xfer_rooms_stats(const tdm_xfer_rooms_t *t, tdm_xfer_room_stats_t *ret)
{
    *ret = t->stats;
}

void tdm_xfer_rooms_foreach(const tdm_xfer_rooms_t *t,
                            void (*fn)(void *ctx, uint64_t room, const tdm_xfer_room_info_t *info),
                            void *ctx)
{
    void *v;
    for (uint32_t i = 0; tdm_u64map_next(&t->map, &i, NULL, &v);) {
        const entry_t *e = v;
        if (e->tomb)
            continue;
        tdm_xfer_room_info_t info = {(tdm_kvpoll_t)e->state, 0, e->aborted, e->created_us,
                                     e->changed_us};
        fn(ctx, e->room, &info);
    }
}

/* ---- the mover's record ---------------------------------------------------------------------- */

tdm_status_t tdm_xfer_room_attach(tdm_xfer_rooms_t *t, uint64_t room, void *mover)
{
    entry_t *e = find(t, room);
    if (!mover)
        return TDM_ERR_INVAL;
    if (!e)
        return TDM_ERR_NOTFOUND;
    if (e->mover)
        return TDM_ERR_STATE;
    e->mover = mover;
    t->movers++;
    return TDM_OK;
}

void *tdm_xfer_room_mover(const tdm_xfer_rooms_t *t, uint64_t room)
{
    const entry_t *e = find(t, room);
    return e ? e->mover : NULL;
}

void *tdm_xfer_room_detach(tdm_xfer_rooms_t *t, uint64_t room)
{
    entry_t *e = find(t, room);
    void *m = e ? e->mover : NULL;
    if (m) {
        e->mover = NULL;
        t->movers--;
    }
    return m;
}

uint32_t tdm_xfer_rooms_movers(const tdm_xfer_rooms_t *t)
{
    return t->movers;
}

int tdm_xfer_rooms_next_mover(const tdm_xfer_rooms_t *t, uint32_t *cursor, void **ret_mover)
{
    void *v;
    while (tdm_u64map_next(&t->map, cursor, NULL, &v)) {
        const entry_t *e = v;
        if (e->mover) {
            *ret_mover = e->mover;
            return 1;
        }
    }
    return 0;
}
