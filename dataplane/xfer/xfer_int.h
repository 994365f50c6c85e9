/*
 * dataplane/xfer/xfer_int.h — internals of the transfer engine (include/tdm/xfer.h).
 *
 * Locking: `mu` guards the room table, the room map, queues, the outbound byte queue and the
 * stats. UCX objects belong to the transfer thread alone after init (UCS_THREAD_MODE_SINGLE);
 * other threads reach it through the command ring + eventfd. Frames are never written to the
 * socket by API callers: they are appended to `outq` under `mu` (in order, so all frames of a
 * room keep their order, I5) and the receive thread (or the transfer thread, for the STATUS
 * frames it holds) writes them with non-blocking sends, with `mu` released.
 */
#ifndef TDM_XFER_INT_H
#define TDM_XFER_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include <ucp/api/ucp.h>

#include <tdm/xfer.h>

#include "dataplane/xfer/cuda_ipc.h"
#include "dataplane/xfer/room.h"

#define XFER_MAX_PENDING_CONNS 16
#define XFER_OUTQ_MAX (64u << 20)
/* The transfer thread holds the STATUS frames of finished rooms while more rooms wait in its
 * ring, and sends them itself in one write: at most cfg.cork_hold_us (the same bound as a
 * caller's cork; this default when 0), and never across a room of more than XFER_HOLD_MAX_BYTES
 * (whose copy would delay them further). */
#define XFER_HOLD_DEFAULT_US 200
#define XFER_HOLD_MAX_BYTES (2u << 20)
/* Rooms of at least this many bytes are copied into decode's mapped memory with non-temporal
 * stores (ucx.c): larger than the cache keeps, they would only evict it, and a cached store
 * first reads every destination line. Measured on the bench host (2 vCPU EPYC): 16 MiB+ rooms
 * 23-35 GB/s streamed vs 17-30 cached; 4 MiB rooms 40 cached vs 32 streamed. */
#define XFER_STREAM_MIN_BYTES (8u << 20)
/* Same-host rooms of at most this many bytes, every rank written by plain copies into decode's
 * mapped memory, are copied by tdm_xfer_prefill_send's caller (tdm_xfer_inline_ok): no hand-off to
 * the transfer thread. Larger rooms overlap with the caller's next work on the transfer thread
 * (a 16 MiB copy is ~0.5 ms; the hand-off, one wake, ~80 µs on the bench VM). */
#define XFER_INLINE_MAX_BYTES (16u << 20)
/* A burst of inline copies (recv.c tdm_xfer_recv_thread_policy): rooms copied by API callers less
 * than this long ago. */
#define XFER_BATCH_US 1000
/* A peer-lost disconnect waits this long for the rooms still writing to the lost peer; then their
 * endpoints are closed by force (their outstanding puts and flushes complete as cancelled, the
 * rooms finalize as failed) so the next registration's connect is never held behind them. An
 * endpoint close itself is given XFER_CLOSE_LIMIT_US before its request is left to UCX. */
#define XFER_DISCONNECT_GRACE_US 1000000
#define XFER_CLOSE_LIMIT_US 2000000

/* One rank's UCX side. */
typedef struct xfer_ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;
    ucp_mem_h kv_memh, aux_memh;
    void *kv_rkey, *aux_rkey;
    size_t kv_rkey_len, aux_rkey_len;
    ucp_address_t *addr;
    size_t addr_len;
    /* prefill: the paired decode rank */
    ucp_ep_h ep;
    ucp_rkey_h r_kv, r_aux;
    uint64_t r_base, r_aux_base, r_aux_bytes;
    uint32_t r_num_pages;
    /* prefill, same-host peer: decode's pool and aux region mapped into this process
     * (ucp_rkey_ptr over the shared memory ucp_mem_map(ALLOCATE) gave decode): a room is written
     * with plain copies, no UCX request. NULL when writes go through ucp_put_nbx. */
    uint8_t *r_kv_ptr, *r_aux_ptr;
} xfer_ucx_t;

/* A room has one record, in the room table (room.c, keyed by its id): its KVPoll state (I4:
 * combined over ranks, tombstones) and, while its data moves or its pages are held, the mover's
 * record below attached to it (tdm_xfer_map_get/put/del: room.h's attach/mover/detach). On
 * prefill the mover phase drives the KVPoll state:
 *   XR_NEW       TRANSFER_INFO accepted (tdm_xfer_room_accept_info), waiting for the scheduler;
 *                a local abort sends STATUS FAILED, an ABORT is ACKed at once (nothing moved).
 *   XR_PUTTING   tdm_xfer_prefill_send: KVPoll TRANSFERRING on every rank, STATUS TRANSFERRING
 *                sent; the writes are issued (transfer thread, or the caller's inline copy).
 *   XR_FLUSHING  every write completed; the flush (and a GPU pool's copies) outstanding.
 *   XR_DONE      tdm_xfer_prefill_finalize after the flush: ABORT_ACK if an ABORT arrived in
 *                PUTTING/FLUSHING (abort_req, I5), else STATUS FAILED + KVPoll FAILED on a local
 *                failure (fail_req, put_error), else STATUS SUCCESS with the checksums + KVPoll
 *                SUCCESS.
 * Release refuses PUTTING/FLUSHING (TDM_ERR_BUSY) and a KVPoll state that is not terminal; then
 * the mover record goes and the room closes (a tombstone for a FAILED room). A tombstone with a
 * mover still attached (decode's quarantined pages) does not expire until the mover goes. */
typedef enum xr_phase { XR_NEW = 0, XR_PUTTING, XR_FLUSHING, XR_DONE } xr_phase_t;

typedef struct xroom {
    uint64_t room;
    uint32_t n_pages;
    uint32_t *pages;     /* decode page ids */
    uint32_t *src_pages; /* prefill: local page ids */
    uint32_t n_prompt;
    uint32_t *prompt; /* prefill: prompt ids until the scheduler takes them */
    tdm_frame_sampling_t sampling;
    uint32_t aux_slot;
    /* prefill */
    xr_phase_t phase;
    int queued;    /* request still in the prefill queue */
    int abort_req; /* ABORT arrived while data moved: ACK after the flush */
    int fail_req;  /* local failure while data moved: STATUS FAILED after the flush */
    int put_error;
    uint32_t ops_pending, flush_pending;
    uint8_t aux_wire[TDM_XFER_AUX_BYTES];
    uint64_t *sums;
    uint32_t n_sums;
    uint64_t *seg_sums; /* per rank, per (layer, sub-buffer): docs/contracts.md §d "Segment sums" */
    uint32_t n_seg_sums;
    void *cuda_ev; /* prefill, GPU pool: the event after the room's copies (cuda_ipc.h) */
    struct xroom *next_active;
    /* decode */
    int info_sent, final_rx, quarantined, risk_counted, committed;
    uint64_t q_since_us;
} xroom_t;

typedef struct xfer_cmd {
    int kind; /* XCMD_* */
    uint64_t room;
} xfer_cmd_t;

enum { XCMD_ISSUE = 1, XCMD_CONNECT, XCMD_DISCONNECT, XCMD_RENEW };

typedef struct xfer_conn {
    int fd;
    uint64_t since_us;
    tdm_frame_reader_t rd;
} xfer_conn_t;

struct tdm_xfer {
    tdm_xfer_cfg_t cfg;
    tdm_layout_record_t layout;
    uint32_t page_size, n_ranks;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    tdm_xfer_rooms_t *rooms;
    tdm_xfer_stats_t st;

    /* the registered leader<->leader channel */
    int chan_fd; /* -1 when none; closed only by the receive thread */
    int chan_kill;
    int out_nowake;       /* (mu) tdm_xfer_out queues without a wake: the transfer thread sends */
    uint64_t out_held_us; /* transfer thread: since when it holds queued frames, 0 if none */
    /* (mu) what outq holds was queued without a wake and waits for the transfer thread's
     * tdm_xfer_out_push: a frame queued with a wake meanwhile must wake the receive thread */
    int out_quiet;
    tdm_frame_reader_t chan_rd;
    /* Frames are appended to outq under `mu`; a sender (outq.c tdm_xfer_out_flush) swaps outq's
     * bytes into sendq and writes them with `mu` released, one sender at a time (`sending`), so
     * frames leave in the order they were queued (I5) while the other threads keep the lock. */
    uint8_t *outq;
    size_t outq_len, outq_off, outq_cap;
    uint8_t *sendq; /* the sender's bytes: only the thread that set `sending` reads them */
    size_t sendq_len, sendq_off, sendq_cap;
    int sending;      /* (mu) a thread writes the channel with `mu` released */
    int recv_awake;   /* (mu) the receive thread sends what is queued before it sleeps: no wake */
    uint64_t copy_us; /* (mu) when an API caller last finished an inline copy, 0 if never */
    uint64_t last_rx_us, last_hb_us, hb_seq;
    int ready, refused;
    char refusal[TDM_FRAME_MAX_MSG + 1];

    pthread_t boot_th, recv_th, xfer_th;
    int threads_started;
    atomic_int stop;
    int wake_recv, wake_xfer, wake_boot; /* eventfds */

    /* commands for the transfer thread */
    xfer_cmd_t *cmds;
    uint32_t cmd_head, cmd_len, cmd_cap;
    xroom_t *active;           /* transfer thread only */
    atomic_int n_transferring; /* rooms in TRANSFERRING: the transfer thread busy-polls UCX */
    uint32_t inline_copies; /* (mu) callers copying a room (tdm_xfer_issue_inline): no disconnect */
    int disconnect_pending, connect_result, connect_done;
    int renew_pending;      /* (mu) decode: the UCX workers are being replaced (no REGISTER yet) */
    int connecting;         /* (mu) prefill: the transfer thread connects to `reg` (without mu) */
    uint64_t disconnect_us; /* (mu) when the pending disconnect was taken from the ring */
    tdm_frame_register_t *reg; /* CONNECT argument (prefill) */
    uint8_t *reg_body;         /* the body `reg` points into */

    /* prefill */
    int listen_fd;
    uint16_t port;
    xfer_conn_t conns[XFER_MAX_PENDING_CONNS];
    uint32_t n_conns;
    uint64_t *reqq; /* rooms waiting for the scheduler */
    uint32_t reqq_head, reqq_len, reqq_cap;
    uint64_t unknown_logged;

    int peer_same_host; /* prefill: the registered decode leader is on this host */

    /* decode */
    uint8_t *aux[TDM_XFER_RANKS_MAX];        /* UCX memory with cfg.ucx_alloc, else aligned_alloc */
    tdm_kv_pool_t *pool[TDM_XFER_RANKS_MAX]; /* cfg.ucx_alloc: pools over UCX memory */
    uint32_t *aux_free;
    uint32_t n_aux_free;
    uint64_t next_connect_us;

    xfer_ucx_t ucx[TDM_XFER_RANKS_MAX];
    xfer_cuda_t *cuda; /* cfg.kv_cuda: the GPU data mover (CUDA IPC), else NULL */
    uint8_t cuda_rec[TDM_XFER_RANKS_MAX][XFER_CUDA_REC_BYTES]; /* decode: what REGISTER sends */

    /* fault injection (cfg.fault) */
    _Atomic uint64_t faults_fired;
    uint64_t flip_rng; /* flip_kv_bits: commit callers only, under their room's ownership */
};

/* The rooms a lost channel failed: the first TDM_XFER_PEER_LOST_ROOMS ids and how many. */
typedef struct xfer_lost {
    uint64_t rooms[TDM_XFER_PEER_LOST_ROOMS];
    uint32_t n, failed;
} xfer_lost_t;

/* engine.c: the room map, events, the threads' common helpers */
xroom_t *tdm_xfer_map_get(tdm_xfer_t *x, uint64_t room);
void tdm_xfer_map_put(tdm_xfer_t *x, xroom_t *r);
void tdm_xfer_map_del(tdm_xfer_t *x, uint64_t room);
void tdm_xroom_free(xroom_t *r);
void tdm_xfer_emit(tdm_xfer_t *x, const char *type, uint64_t room, tdm_kvpoll_t from,
                   tdm_kvpoll_t to, const char *reason);
/* `peer_lost` naming the rooms the lost channel failed (they failed before it). */
void tdm_xfer_emit_lost(tdm_xfer_t *x, const char *why, const xfer_lost_t *lost);
/* The same, with the where of a checksum mismatch (m may be NULL). */
void tdm_xfer_emit_mismatch(tdm_xfer_t *x, const char *type, uint64_t room, tdm_kvpoll_t from,
                            tdm_kvpoll_t to, const char *reason, const tdm_xfer_mismatch_t *m);
/* The thread's heartbeat on the progress page (I8); wake / drain an eventfd. */
void tdm_xfer_hb(tdm_xfer_t *x, tdm_hb_thread_t t);
void tdm_xfer_wake(int fd);
void tdm_xfer_drain(int fd);

/* outq.c: append an encoded frame to the outbound queue (mu held); TDM_ERR_PEER without a
 * channel. */
tdm_status_t tdm_xfer_out(tdm_xfer_t *x, const uint8_t *frame, size_t len);
/* Bytes queued, not yet written; forget them (the channel closed). */
size_t tdm_xfer_out_pending(const tdm_xfer_t *x);
void tdm_xfer_out_reset(tdm_xfer_t *x);
/* Write what the queue holds (mu held; released while writing); is_recv: the receive thread
 * (may leave the rest for POLLOUT). */
void tdm_xfer_out_flush(tdm_xfer_t *x, int is_recv);
/* Send what the queue holds from the calling thread (mu not held). */
void tdm_xfer_out_send_now(tdm_xfer_t *x);
/* outq.c, API entry points, mu NOT held: a thread that corked x sends what it queued when the
 * oldest of it waited cfg.cork_hold_us, or at once before it copies a room of copy_pages pages of
 * more than XFER_HOLD_MAX_BYTES, so a cork never holds a frame through a long copy. Without a
 * cork on x it returns at once. */
void tdm_xfer_cork_due(tdm_xfer_t *x, uint32_t copy_pages);
tdm_status_t tdm_xfer_out_status(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t state, const char *msg,
                                 const uint64_t *sums, uint32_t n_sums, uint32_t chunk_tokens);
/* STATUS SUCCESS of a room with its page sums and segment sums (both may be absent: NULL, 0). */
tdm_status_t tdm_xfer_out_status_sums(tdm_xfer_t *x, uint64_t room, const uint64_t *sums,
                                      uint32_t n_sums, const uint64_t *seg_sums,
                                      uint32_t n_seg_sums, uint32_t chunk_tokens);
tdm_status_t tdm_xfer_out_abort_ack(tdm_xfer_t *x, uint64_t room, int known);
void tdm_xfer_cmd_push(tdm_xfer_t *x, int kind, uint64_t room);
/* Decode: rank's UCP worker replaced by a new one (transfer thread; tdm_xfer_decode_peer_lost).
 * On an error the old one stays. */
tdm_status_t tdm_xfer_ucx_renew_worker(tdm_xfer_t *x, uint32_t rank);
void tdm_xfer_room_set_all(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t to, const char *reason);
/* Blocking write of a whole buffer with a deadline (handshake only). */
tdm_status_t tdm_xfer_write_all(int fd, const uint8_t *buf, size_t len, uint64_t timeout_us);
uint64_t tdm_xfer_now(void);
/* Whether fault point f fires now (cfg.fault); *ret_arg (may be NULL) gets its argument. */
int tdm_xfer_fault_fires(tdm_xfer_t *x, tdm_xfer_fault_t f, uint32_t *ret_arg);
/* Bytes the checksums of a room of n_pages cover (every rank, layer and sub-buffer). */
uint64_t tdm_xfer_room_sum_bytes(const tdm_xfer_t *x, uint32_t n_pages);
/* A room's TRANSFER_INFO (under mu): n_pages named, n_held leading pages decode holds. */
void tdm_xfer_count_skip(tdm_xfer_t *x, uint32_t n_pages, uint32_t n_held);
/* A fault killed the calling engine thread: log, count and emit "thread_exit". */
void tdm_xfer_thread_killed(tdm_xfer_t *x, const char *thread);
/* flip_kv_bits: flip the top exponent bit of n random K/V values in the room's prompt tokens. */
void tdm_xfer_flip_kv_bits(tdm_xfer_t *x, const xroom_t *r, uint32_t n);

/* kvmem.c: KV bytes in host or device memory (cfg.kv_cuda) */
tdm_status_t tdm_xfer_kvmem_init(tdm_xfer_t *x);
void tdm_xfer_kvmem_fini(tdm_xfer_t *x);
/* One checksum per page of rank's pool (tdm_xfer_page_sum's value, on the GPU for a device pool)
 * and, when ret_seg is not NULL, rank's tdm_xfer_seg_count values of segment sums: for each
 * (layer, sub-buffer), layer-major, the fold (tdm_xfer_seg_fold from 0) over pages[0..n) in
 * order of that page segment's XXH64 — from the same segment hashes, no second pass over the
 * bytes. */
tdm_status_t tdm_xfer_kv_sums(tdm_xfer_t *x, uint32_t rank, const uint32_t *pages, uint32_t n,
                              uint64_t *ret_sums, uint64_t *ret_seg);
/* Segment sums of one rank (num_layers x n_sub) and of every rank (the STATUS trailer's count). */
uint32_t tdm_xfer_seg_count(const tdm_xfer_t *x, uint32_t rank);
uint32_t tdm_xfer_seg_total(const tdm_xfer_t *x);
void tdm_xfer_kv_flip_byte(tdm_xfer_t *x, uint8_t *p, uint8_t mask);
/* Device pool: queue the room's KV copies and the event behind them (no-op for host pools). */
void tdm_xfer_cuda_put_room(tdm_xfer_t *x, xroom_t *r, uint64_t *puts, uint64_t *bytes);
/* 1 when the room's copies completed (or it has none), 0 while they run. */
int tdm_xfer_cuda_room_done(tdm_xfer_t *x, xroom_t *r);

/* checksum.c */
uint64_t tdm_xfer_page_sum(const tdm_kv_buffers_t *kv, uint32_t page);
/* tdm_xfer_kv_sums over a host pool: page sums and (ret_seg not NULL) segment sums. */
void tdm_xfer_page_sums(const tdm_kv_buffers_t *kv, const uint32_t *pages, uint32_t n,
                        uint64_t *ret_sums, uint64_t *ret_seg);
void tdm_xfer_aux_encode(const tdm_xfer_aux_t *a, uint8_t out[TDM_XFER_AUX_BYTES]);
tdm_status_t tdm_xfer_aux_decode(const uint8_t in[TDM_XFER_AUX_BYTES], tdm_xfer_aux_t *ret);

/* ucx.c */
tdm_status_t tdm_xfer_ucx_init(tdm_xfer_t *x, uint32_t rank);
void tdm_xfer_ucx_fini(tdm_xfer_t *x, uint32_t rank);
tdm_status_t tdm_xfer_ucx_connect(tdm_xfer_t *x, uint32_t rank, const tdm_frame_rank_t *fr,
                                  uint32_t remote_num_pages);
void tdm_xfer_ucx_disconnect(tdm_xfer_t *x, uint32_t rank);
/* Issue every write of a room (transfer thread, without mu); out: writes issued, bytes. */
tdm_status_t tdm_xfer_ucx_put_room(tdm_xfer_t *x, xroom_t *r, uint64_t *ret_puts,
                                   uint64_t *ret_bytes);
tdm_status_t tdm_xfer_ucx_flush_room(tdm_xfer_t *x, xroom_t *r);
int tdm_xfer_ucx_progress(tdm_xfer_t *x);

/* prefill.c / decode.c: role handlers, called with mu held */
void tdm_xfer_prefill_frame(tdm_xfer_t *x, const tdm_frame_hdr_t *h, const uint8_t *body);
void tdm_xfer_decode_frame(tdm_xfer_t *x, const tdm_frame_hdr_t *h, const uint8_t *body);
/* The channel is lost: fail every room bound to it (each one's kvpoll FAILED goes out now, with
 * the explicit error its client gets) and name them in *lost, which the `peer_lost` event then
 * carries (recv.c tdm_xfer_close_channel): the partition's evidence is whole when it arrives. */
static inline void tdm_xfer_lost_add(xfer_lost_t *lost, uint64_t room)
{
    if (lost->n < TDM_XFER_PEER_LOST_ROOMS)
        lost->rooms[lost->n++] = room;
    lost->failed++;
}
void tdm_xfer_prefill_peer_lost(tdm_xfer_t *x, xfer_lost_t *lost);
void tdm_xfer_decode_peer_lost(tdm_xfer_t *x, xfer_lost_t *lost);
/* a registration was accepted: ask again for the rooms still quarantined (decode.c) */
void tdm_xfer_decode_registered(tdm_xfer_t *x);
void tdm_xfer_decode_room_failed(tdm_xfer_t *x, uint64_t room);
void tdm_xfer_decode_tick(tdm_xfer_t *x, uint64_t now);
/* prefill bootstrap: validate a REGISTER against this engine; 0 or a message in why. */
int tdm_xfer_prefill_check_register(tdm_xfer_t *x, const tdm_frame_register_t *f, char *why,
                                    size_t why_len);
void tdm_xfer_prefill_finalize(tdm_xfer_t *x, xroom_t *r);
/* recv.c: the receive thread; close the registered channel (mu held); the thread's scheduling
 * policy while API callers copy rooms in a burst. */
void *tdm_xfer_recv_main(void *arg);
void tdm_xfer_close_channel(tdm_xfer_t *x, const char *why);
void tdm_xfer_recv_thread_policy(int batch);

/* bootstrap.c: the bootstrap thread; close pending connection i. */
void *tdm_xfer_boot_main(void *arg);
void tdm_xfer_conn_close(tdm_xfer_t *x, uint32_t i);

/* mover.c: the transfer thread; send the frames it holds; move rooms on after their writes. */
void *tdm_xfer_main(void *arg);
void tdm_xfer_out_push(tdm_xfer_t *x);
void tdm_xfer_advance(tdm_xfer_t *x);
/* mover.c, mu held: may tdm_xfer_prefill_send's caller write this XR_PUTTING room itself? */
int tdm_xfer_inline_ok(tdm_xfer_t *x, const xroom_t *r);
/* The caller's copy of a room tdm_xfer_inline_ok accepted (inline_copies counted it), without mu:
 * write, fence, finalize. */
void tdm_xfer_issue_inline(tdm_xfer_t *x, xroom_t *r);
tdm_status_t tdm_xfer_prefill_abort(tdm_xfer_t *x, uint64_t room, const char *reason);
tdm_status_t tdm_xfer_prefill_release(tdm_xfer_t *x, uint64_t room);
tdm_status_t tdm_xfer_decode_abort(tdm_xfer_t *x, uint64_t room, const char *reason);
tdm_status_t tdm_xfer_decode_release(tdm_xfer_t *x, uint64_t room);
tdm_status_t tdm_xfer_decode_register_frame(tdm_xfer_t *x, uint8_t **ret_buf, size_t *ret_len);

#endif
