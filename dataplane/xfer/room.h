/*
 * dataplane/xfer/room.h — the KVPoll room table (invariant I4), shared by prefill and decode.
 *
 * A room is one request's KV transfer, named by a random 63-bit id that is never reused. Each rank
 * reports its own state; the room's state is the MIN over ranks (FAILED(0) < BOOTSTRAPPING(1) <
 * WAITING_FOR_INPUT(2) < TRANSFERRING(3) < SUCCESS(4)). States only move forward; FAILED may be
 * entered from any state and is never left. A room that is aborted, failed or unknown leaves a
 * tombstone for at least `tombstone_us` (>= the bootstrap timeout), and a TRANSFER_INFO for a
 * tombstoned room is refused, so a late frame can never resurrect it. Every change of the
 * combined state is reported through the event callback (room, from, to, reason, ts).
 *
 * Time is passed in by the caller (µs, any monotonic origin) so tests drive a virtual clock.
 * Not thread-safe: the owner (the leader's transfer thread) serialises access.
 */
#ifndef TDM_XFER_ROOM_H
#define TDM_XFER_ROOM_H

#include <stdint.h>

#include <tdm/frame.h>
#include <tdm/status.h>
#include <tdm/xfer.h>

typedef struct tdm_xfer_room_event {
    uint64_t room;
    tdm_kvpoll_t from, to;
    const char *reason;
    uint64_t ts_us;
} tdm_xfer_room_event_t;

typedef void (*tdm_xfer_room_event_fn)(void *ctx, const tdm_xfer_room_event_t *ev);

typedef struct tdm_xfer_room_cfg {
    uint32_t capacity;             /* max live rooms + tombstones (with or without a mover) */
    uint32_t n_ranks;              /* ranks whose states are combined (<= TDM_XFER_RANKS_MAX) */
    uint64_t bootstrap_timeout_us; /* BOOTSTRAPPING longer than this → FAILED */
    uint64_t waiting_timeout_us;   /* WAITING_FOR_INPUT/TRANSFERRING longer → FAILED */
    uint64_t tombstone_us;         /* how long aborted/failed/unknown rooms are remembered */
    tdm_xfer_room_event_fn on_event;
    void *ctx;
} tdm_xfer_room_cfg_t;

typedef struct tdm_xfer_rooms tdm_xfer_rooms_t;

typedef struct tdm_xfer_room_info {
    tdm_kvpoll_t state;
    uint8_t tombstone; /* 1 if only a tombstone remains */
    uint8_t aborted;
    uint64_t created_us, changed_us;
} tdm_xfer_room_info_t;

typedef struct tdm_xfer_room_stats {
    uint64_t live, tombstones;
    uint64_t bad_transitions; /* backwards moves / moves out of FAILED, refused */
    uint64_t refused_late;    /* TRANSFER_INFO for a tombstoned room */
    uint64_t timeouts;
} tdm_xfer_room_stats_t;

tdm_status_t tdm_xfer_rooms_init(const tdm_xfer_room_cfg_t *cfg, tdm_xfer_rooms_t **ret);
void tdm_xfer_rooms_free(tdm_xfer_rooms_t *t);

/* Random non-zero 63-bit id from a per-table generator seeded from getrandom(). */
uint64_t tdm_xfer_room_id_new(tdm_xfer_rooms_t *t);

/* Create a room in BOOTSTRAPPING. TDM_ERR_STATE if the id is live or tombstoned (ids are never
 * resurrected), TDM_ERR_AGAIN if the table is full. */
tdm_status_t tdm_xfer_room_open(tdm_xfer_rooms_t *t, uint64_t room, uint64_t now_us);

/* Prefill side: may a TRANSFER_INFO for `room` be accepted? Opens the room if it is new;
 * TDM_ERR_STATE (and counts refused_late) when the room is tombstoned or already past
 * BOOTSTRAPPING. */
tdm_status_t tdm_xfer_room_accept_info(tdm_xfer_rooms_t *t, uint64_t room, uint64_t now_us);

/* One rank reports a state. Forward moves only; FAILED from anywhere; nothing leaves FAILED.
 * TDM_ERR_NOTFOUND for unknown/tombstoned rooms, TDM_ERR_STATE for refused moves. */
tdm_status_t tdm_xfer_room_set(tdm_xfer_rooms_t *t, uint64_t room, uint32_t rank, tdm_kvpoll_t to,
                               const char *reason, uint64_t now_us);

/* Abort: valid in any state and for unknown rooms (which get a tombstone). The room becomes
 * FAILED (reason "abort") and a tombstone. Returns 1 if the room was known, 0 if not. */
int tdm_xfer_room_abort(tdm_xfer_rooms_t *t, uint64_t room, const char *reason, uint64_t now_us);

/* Remove a terminal room once its consumer is done (SUCCESS rooms vanish; FAILED rooms become
 * tombstones). */
void tdm_xfer_room_close(tdm_xfer_rooms_t *t, uint64_t room, uint64_t now_us);

/* Timeouts and tombstone expiry; returns the number of rooms failed by timeout. */
uint32_t tdm_xfer_rooms_tick(tdm_xfer_rooms_t *t, uint64_t now_us);

tdm_status_t tdm_xfer_room_get(const tdm_xfer_rooms_t *t, uint64_t room, tdm_xfer_room_info_t *ret);
void tdm_xfer_rooms_stats(const tdm_xfer_rooms_t *t, tdm_xfer_room_stats_t *ret);

/* The mover's record (the engine's xroom_t, xfer_int.h): one per room at most, kept in the room's
 * own record, so a room has one entry in one map. A record with a mover is never erased: close of
 * a SUCCESS room leaves a tombstone instead, and a tombstone expires only once its mover is
 * detached (quarantined pages keep theirs). attach: TDM_ERR_NOTFOUND when the room has no record
 * (live or tombstone), TDM_ERR_STATE when it has a mover already. */
tdm_status_t tdm_xfer_room_attach(tdm_xfer_rooms_t *t, uint64_t room, void *mover);
void *tdm_xfer_room_mover(const tdm_xfer_rooms_t *t, uint64_t room); /* NULL: none */
void *tdm_xfer_room_detach(tdm_xfer_rooms_t *t, uint64_t room);      /* the mover, or NULL */
uint32_t tdm_xfer_rooms_movers(const tdm_xfer_rooms_t *t);
/* for (uint32_t i = 0; tdm_xfer_rooms_next_mover(t, &i, &m);): every attached mover once (do not
 * detach while iterating). */
int tdm_xfer_rooms_next_mover(const tdm_xfer_rooms_t *t, uint32_t *cursor, void **ret_mover);

/* Visit live (non-tombstone) rooms; for telemetry and the stall detector's evidence. */
void tdm_xfer_rooms_foreach(const tdm_xfer_rooms_t *t,
                            void (*fn)(void *ctx, uint64_t room, const tdm_xfer_room_info_t *info),
                            void *ctx);

#endif
