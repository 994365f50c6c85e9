/*
 * tdm/xfer.h — the prefill/decode KV transfer engine (docs/design.md §1, I3–I6).
 *
 * One engine per worker-group leader. A prefill engine listens on the bootstrap port
 * (--disaggregation-bootstrap-port, 0 = any); a decode engine connects to it and REGISTERs its
 * memory: per rank pair (rank i ↔ rank i, equal TP) the UCX worker address and packed rkeys of the
 * decode KV pool and aux region, the page size and the full layout record. The prefill leader
 * checks tp size, page size, memory kind and the layout record sub-buffer by sub-buffer; any
 * mismatch is refused with a message naming the field, which is sent back (a STATUS frame for
 * room 0, state FAILED) and logged on both sides. A STATUS for room 0 with state SUCCESS accepts
 * the registration. All frames then travel in order on that one leader↔leader TCP channel (I5).
 * Both sides send HEARTBEAT every second; a channel silent for 3 s is a lost peer: its rooms
 * become FAILED. Unknown or malformed frames are counted and dropped; a bad frame header closes
 * that connection only; no input ever stops a thread (I3).
 *
 * Room life (KVPoll, I4; every transition is an event through cfg.on_event):
 *   decode:  tdm_xfer_decode_send_info() → WAITING_FOR_INPUT → (prefill STATUS TRANSFERRING)
 *            → SUCCESS when prefill's STATUS SUCCESS arrives; then tdm_xfer_decode_commit()
 *            verifies the per-chunk checksums over decode's own memory and the aux room id
 *            before the KV is used, and returns the aux (first token, logprobs).
 *   prefill: TRANSFER_INFO → WAITING_FOR_INPUT (tdm_xfer_prefill_next() hands it to the
 *            scheduler) → tdm_xfer_prefill_send() → TRANSFERRING: UCX RMA puts of every page
 *            (for each layer and sub-buffer the page's contiguous bytes; contiguous runs
 *            coalesced) plus the aux slot, then ucp_ep_flush_nbx on every rank pair, then
 *            STATUS SUCCESS with one xxh64 per (rank, chunk of chunk_tokens tokens = one page)
 *            computed over the bytes it wrote.
 * Abort is a handshake (I5): tdm_xfer_abort() on decode sends ABORT in any state; prefill
 * answers ABORT_ACK only after every prefill rank flushed its writes for the room (and for
 * unknown rooms, which it tombstones so a late TRANSFER_INFO is refused). Decode pages stay
 * quarantined — tdm_xfer_release() answers TDM_ERR_BUSY — until the ACK; past the ACK
 * timeout they stay quarantined and `corruption_risk` rises.
 *
 * Host memory and UCX (UCX 1.13, UCX_TLS=tcp,sm,self): a put is one memcpy into shared memory
 * only when (a) the decode pool was allocated by UCX (ucp_mem_map ALLOCATE: posix/sysv memory the
 * peer maps; an rkey of ordinary memory carries no mm domain and the put is emulated over tcp) and
 * (b) the endpoint has no peer error handling (UCP_ERR_HANDLING_MODE_PEER keeps only transports
 * with peer-failure support: one tcp lane). So decode sets cfg.ucx_alloc and the engine allocates
 * every rank's pool (tdm_kv_pool_init_mem) and the aux region through UCX; prefill creates its
 * endpoints with error handling NONE when the decode peer is on this host (the bootstrap channel's
 * peer address is loopback or equal to ours; cfg.ep_err_mode forces either mode) and PEER
 * otherwise. Without UCX error handling a dead peer is found by the channel (EOF or 3 s of
 * silence): its rooms become FAILED and decode pages stay quarantined as with PEER.
 *
 * Memory kinds: REGISTER carries a mem_kind per rank (0 host/UCX rkey, 1 CUDA IPC handle). Host
 * pools move over UCX. Device pools (cfg.kv_cuda, same host only) move by CUDA IPC: decode sends
 * its pool's cudaIpcMemHandle_t record in the kv part of the rkey blob, prefill opens it and
 * copies device to device on its own stream; the room is delivered (STATUS SUCCESS, ABORT_ACK)
 * only after the event recorded behind its copies completed, and the UCX flush of its aux slot
 * (the aux region stays in host memory). Checksums are computed on the GPU, equal to the CPU's.
 * A mem_kind that differs from prefill's own is refused by name.
 *
 * Threads: each engine runs a bootstrap thread (listen/connect, REGISTER, heartbeats, timeouts;
 * TDM_HB_BOOTSTRAP), a receive thread (frames of the registered channel; TDM_HB_RECV) and a
 * transfer thread (UCX progress by ucp_worker_arm + epoll + eventfd; TDM_HB_TRANSFER). API calls
 * are thread-safe. The ranks of the group are hosted in this process: cfg.kv[r] is rank r's pool.
 * Errors: tdm_status_t; outputs written only on success.
 */
#ifndef TDM_XFER_H
#define TDM_XFER_H

#include <stdint.h>

#include <tdm/frame.h>
#include <tdm/kv.h>
#include <tdm/progress.h>
#include <tdm/status.h>

#define TDM_XFER_RANKS_MAX 16
#define TDM_XFER_AUX_BYTES 256u        /* one aux slot in decode memory */
#define TDM_XFER_AUX_MAGIC 0x58554154u /* "TAUX" */

typedef enum tdm_xfer_role {
    TDM_XFER_PREFILL = 0,
    TDM_XFER_DECODE = 1,
    TDM_XFER_ROLE_MAX
} tdm_xfer_role_t;

/* REGISTER's per-rank memory kind. */
typedef enum tdm_xfer_mem_kind {
    TDM_XFER_MEM_HOST = 0,     /* UCX rkey of host memory */
    TDM_XFER_MEM_CUDA_IPC = 1, /* cudaIpcMemHandle_t record of a device pool (cfg.kv_cuda) */
    TDM_XFER_MEM_KIND_MAX
} tdm_xfer_mem_kind_t;

/* What prefill writes next to the KV: the first sampled token and its logprobs. */
typedef struct tdm_xfer_aux {
    uint64_t room;
    uint32_t first_token;
    float first_logprob;
    uint32_t n_top;
    tdm_frame_top_t top[TDM_FRAME_MAX_TOP];
} tdm_xfer_aux_t;

/* Telemetry-ready event (docs/contracts.md §c event shape; names as docs/alerts.md's detectors read
 * them). type: "kvpoll" (a room's combined state changed), "register_refused", "peer_lost" (after
 * the rooms it failed, which it names: rooms, n_rooms, failed_rooms), "peer_registered",
 * "checksum_mismatch" / "aux_room_mismatch" (commit found the KV or the aux slot corrupt),
 * "abort_sent" (decode sent ABORT; pages quarantined), "abort_acked", "abort_unacked" (ACK
 * timeout), "thread_exit" (a fault killed an engine thread; reason names it). Dropped frames are
 * counted (tdm_xfer_stats), not events. Strings are valid only during the call. Called with engine
 * locks held: do not call back into the engine.
 */
/* Where a room's KV checksums differ (a checksum_mismatch event; docs/contracts.md §d "Segment
 * sums"): the first mismatching page sum (rank-major), and with the STATUS segment sums the first
 * mismatching (rank, layer, sub-buffer); how many of each differ. */
typedef struct tdm_xfer_mismatch {
    int has_page;    /* 0: the page sums agree (only segment sums differ) */
    uint32_t rank;   /* of the page */
    uint32_t page;   /* decode's page id */
    uint32_t chunk;  /* its index in the room */
    int has_segment; /* segment sums in STATUS and one of them differs */
    uint32_t seg_rank, layer;
    uint32_t sub; /* tdm_kv_sub_t */
    uint32_t pages_differ, pages_total, segs_differ, segs_total;
} tdm_xfer_mismatch_t;

typedef struct tdm_xfer_event {
    uint64_t ts_us; /* CLOCK_MONOTONIC */
    const char *type;
    uint64_t room; /* 0 when not about a room */
    tdm_kvpoll_t from, to;
    const char *reason;
    const tdm_xfer_mismatch_t *mismatch; /* checksum_mismatch from a comparison, else NULL */
    /* peer_lost: the rooms bound to the lost channel that this side failed (every one's kvpoll
     * to FAILED came before this event), the first n_rooms (<= TDM_XFER_PEER_LOST_ROOMS) of
     * failed_rooms; other events NULL, 0, 0 */
    const uint64_t *rooms;
    uint32_t n_rooms, failed_rooms;
} tdm_xfer_event_t;

/* Rooms a peer_lost event names (its failed_rooms counts them all). */
#define TDM_XFER_PEER_LOST_ROOMS 8

/* Prefill endpoint error handling (see the header comment). */
typedef enum tdm_xfer_err_mode {
    TDM_XFER_ERR_AUTO = 0, /* NONE for a same-host decode peer, PEER otherwise */
    TDM_XFER_ERR_PEER = 1,
    TDM_XFER_ERR_NONE = 2,
    TDM_XFER_ERR_MODE_MAX
} tdm_xfer_err_mode_t;

typedef void (*tdm_xfer_event_fn)(void *ctx, const tdm_xfer_event_t *ev);

/* Fault points the engine asks about (docs/contracts.md §e; armed by the worker's /admin/faults,
 * see dataplane/sched/fault.h). cfg.fault answers whether the point fires now and, when it does,
 * its argument (duration_ms). Called from the engine's threads, possibly with `mu` held: the
 * callback must only read atomics. */
typedef enum tdm_xfer_fault {
    TDM_XFER_FAULT_FLIP_KV_BITS = 0, /* decode commit: arg = values to flip (0 → 1) */
    TDM_XFER_FAULT_STALL_TRANSFER,   /* transfer thread: arg = ms without progress */
    TDM_XFER_FAULT_SLOW_HOST_COPY,   /* prefill, per room: arg = ms before its puts */
    TDM_XFER_FAULT_DROP_ABORT,       /* prefill: drop one ABORT frame */
    TDM_XFER_FAULT_KILL_BOOTSTRAP,   /* the named thread exits */
    TDM_XFER_FAULT_KILL_RECV,
    TDM_XFER_FAULT_KILL_TRANSFER,
    TDM_XFER_FAULT_MAX
} tdm_xfer_fault_t;

typedef int (*tdm_xfer_fault_fn)(void *ctx, tdm_xfer_fault_t f, uint32_t *ret_arg);

typedef struct tdm_xfer_cfg {
    tdm_xfer_role_t role;
    uint64_t instance_id;
    uint32_t n_ranks;                               /* == tp size */
    const tdm_kv_buffers_t *kv[TDM_XFER_RANKS_MAX]; /* rank r's host pool (caller keeps it) */
    /* decode alternative to kv[]: the engine allocates rank r's pool of kv_num_pages pages laid
     * out by kv_layout[r] (copied) and the aux region through UCX; kv[] must then be NULL and
     * tdm_xfer_kv_pool() hands the pools out (valid until tdm_xfer_free). */
    int ucx_alloc;
    const tdm_kv_layout_t *kv_layout[TDM_XFER_RANKS_MAX];
    uint32_t kv_num_pages;
    /* kv[r]->base is device memory (one cudaMalloc per rank, on the calling thread's current
     * device) moved by CUDA IPC (mem_kind 1; dataplane/xfer/cuda_ipc.h): both groups must agree,
     * prefill refuses a registration whose mem_kind differs from its own naming it. Needs a
     * build with the CUDA runtime (else TDM_ERR_UNSUPPORTED); not with ucx_alloc. */
    int kv_cuda;
    tdm_xfer_err_mode_t ep_err_mode; /* prefill; default AUTO */
    const char *host;      /* prefill: bind address (default 127.0.0.1); decode: prefill leader */
    uint16_t port;         /* prefill: 0 = any; decode: the prefill bootstrap port */
    uint32_t max_rooms;    /* live rooms + tombstones; default 4096 */
    uint32_t aux_slots;    /* decode: aux slots (= rooms in flight); default 1024 */
    int disable_checksums; /* default 0: checksums on */
    uint64_t heartbeat_us; /* default 1 s */
    uint64_t peer_timeout_us;      /* default 3 s */
    uint64_t bootstrap_timeout_us; /* room in BOOTSTRAPPING; default 30 s */
    uint64_t waiting_timeout_us;   /* WAITING_FOR_INPUT/TRANSFERRING; default 120 s */
    uint64_t abort_ack_timeout_us; /* default 5 s */
    uint64_t cork_hold_us;         /* tdm_xfer_cork: longest hold of a corked frame; 200 µs */
    tdm_progress_slot_t *progress; /* optional: thread heartbeats */
    tdm_xfer_event_fn on_event;    /* optional */
    void *ctx;
    tdm_xfer_fault_fn fault; /* optional: fault injection (ctx as for on_event) */
    /* optional: why tdm_xfer_init failed, where it can say more than its status (the bootstrap
     * listener: address, port, the call and errno) */
    char *err;
    size_t err_len;
} tdm_xfer_cfg_t;

typedef struct tdm_xfer tdm_xfer_t;

/* The bounds (microseconds) of the room latency histogram in tdm_xfer_stats_t. */
#define TDM_XFER_LAT_NB 12
#define TDM_XFER_LAT_BOUNDS_US                                                                     \
    {                                                                                              \
        100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 1000000              \
    }

typedef struct tdm_xfer_stats {
    uint64_t frames_rx, frames_tx;
    uint64_t frame_writes;   /* socket writes of the channel (a write carries one or more frames) */
    uint64_t frames_unknown; /* unknown type: dropped */
    uint64_t frames_malformed;  /* body failed to decode or bad header: dropped */
    uint64_t frames_unexpected; /* valid frame the role/state does not take: dropped */
    uint64_t conns_accepted, conns_closed_bad;
    uint64_t register_refused, peer_lost;
    uint64_t rooms_ok, rooms_failed;
    uint64_t refused_late; /* TRANSFER_INFO for a tombstoned room */
    uint64_t aborts_sent, aborts_acked, aborts_received;
    uint64_t checksum_mismatch, aux_mismatch;
    uint64_t corruption_risk; /* rooms whose ABORT_ACK timed out: pages stay quarantined */
    uint64_t quarantined;     /* rooms quarantined now */
    uint64_t bytes_put, puts;
    /* TRANSFER_INFO (decode: sent, prefill: accepted): the prompt pages a room names, and the
     * leading prompt pages it does not name because decode already holds them (its prefix cache
     * or HiCache tier), with the KV bytes of every rank each stands for */
    uint64_t room_pages, room_bytes, prefix_pages_skipped, prefix_bytes_saved;
    uint32_t eps_err_none, eps_err_peer;  /* prefill: connected endpoints by error mode */
    uint64_t faults_fired;                /* fault points that fired in this engine */
    uint64_t checksum_ns, checksum_bytes; /* time in and bytes through the KV checksums */
    /* prefill: rooms from open to SUCCESS, by TDM_XFER_LAT_BOUNDS_US (last bucket: above all) */
    uint64_t room_lat[TDM_XFER_LAT_NB + 1];
    uint64_t room_lat_sum_us;
} tdm_xfer_stats_t;

/* A TRANSFER_INFO accepted by prefill, owned by the caller (tdm_xfer_request_clear). */
typedef struct tdm_xfer_request {
    uint64_t room;
    uint32_t n_prompt;
    uint32_t *prompt_ids;
    uint32_t n_pages;   /* the prompt's last n_pages pages (decode holds the ones before) */
    uint32_t *page_ids; /* decode page ids */
    tdm_frame_sampling_t sampling;
} tdm_xfer_request_t;

/* Start the engine and its threads. Prefill binds before returning (see tdm_xfer_port). */
tdm_status_t tdm_xfer_init(const tdm_xfer_cfg_t *cfg, tdm_xfer_t **ret);
/* Stop the threads, close the channel and release UCX. NULL-safe. */
void tdm_xfer_free(tdm_xfer_t *x);
/* Decode with cfg.ucx_alloc: rank r's pool (the caller allocates pages from it; the engine frees
 * it in tdm_xfer_free). NULL otherwise. */
tdm_kv_pool_t *tdm_xfer_kv_pool(tdm_xfer_t *x, uint32_t rank);
/* Prefill: the bound bootstrap port. */
uint16_t tdm_xfer_port(const tdm_xfer_t *x);
/* Wait until a peer is registered (TDM_OK), the registration was refused (TDM_ERR_CORRUPT with
 * the peer's message in why), or timeout_us passed (TDM_ERR_TIMEOUT). */
tdm_status_t tdm_xfer_wait_ready(tdm_xfer_t *x, uint64_t timeout_us, char *why, size_t why_len);
void tdm_xfer_stats(tdm_xfer_t *x, tdm_xfer_stats_t *ret);

/* Live rooms (tombstones excluded) by combined KVPoll state, indexed by tdm_kvpoll_t: what
 * /metrics shows (a room stuck in WAITING_FOR_INPUT is visible there). */
void tdm_xfer_room_counts(tdm_xfer_t *x, uint32_t ret[TDM_KVPOLL_MAX]);

/* The room's combined KVPoll state; TDM_ERR_NOTFOUND for rooms never seen or released. */
tdm_status_t tdm_xfer_poll(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t *ret_state);
/* Abort a room in any state (decode: ABORT frame + quarantine; prefill: STATUS FAILED after
 * flush). Unknown rooms are tombstoned. */
tdm_status_t tdm_xfer_abort(tdm_xfer_t *x, uint64_t room, const char *reason);
/* Forget a terminal room so its pages may be reused: TDM_OK, TDM_ERR_BUSY while data movement
 * may still touch them (prefill: puts in flight; decode: quarantined until ABORT_ACK),
 * TDM_ERR_STATE if the room is not terminal, TDM_ERR_NOTFOUND. */
tdm_status_t tdm_xfer_release(tdm_xfer_t *x, uint64_t room);

/* Decode: register a room for `n_prompt` tokens whose KV goes to `page_ids` (the last n_pages of
 * the prompt's ceil(n_prompt / page_size) pages, in every rank's pool; 1 <= n_pages: the pages
 * before them decode already holds, and prefill does not send) and send TRANSFER_INFO.
 * TDM_ERR_PEER without a registered prefill, TDM_ERR_AGAIN when rooms or aux slots are
 * exhausted. */
tdm_status_t tdm_xfer_decode_send_info(tdm_xfer_t *x, const uint32_t *prompt_ids, uint32_t n_prompt,
                                       const uint32_t *page_ids, uint32_t n_pages,
                                       const tdm_frame_sampling_t *sampling, uint64_t *ret_room);
/* Decode: verify a SUCCESS room (checksums over this side's memory, aux magic and room id) and
 * return its aux. TDM_ERR_CORRUPT (counted, event, room FAILED) on any mismatch; TDM_ERR_STATE
 * when the room is not SUCCESS. */
tdm_status_t tdm_xfer_decode_commit(tdm_xfer_t *x, uint64_t room, tdm_xfer_aux_t *ret_aux);

/* Prefill: the next accepted TRANSFER_INFO (TDM_ERR_AGAIN when none). */
tdm_status_t tdm_xfer_prefill_next(tdm_xfer_t *x, tdm_xfer_request_t *ret);
void tdm_xfer_request_clear(tdm_xfer_request_t *r);
/* Prefill: write the room's KV from this side's `src_pages` (same count as the request's decode
 * pages: the prompt's last ones, every rank) and `aux`, asynchronously. TDM_ERR_ABORTED for
 * aborted rooms. */
tdm_status_t tdm_xfer_prefill_send(tdm_xfer_t *x, uint64_t room, const uint32_t *src_pages,
                                   uint32_t n_pages, const tdm_xfer_aux_t *aux);

/* Batching of the calling thread's frames, as TCP_CORK does for segments. Between
 * tdm_xfer_cork() and tdm_xfer_uncork() the frames this thread's calls queue (TRANSFER_INFO,
 * STATUS of rooms it copies itself, ABORT) wait in the engine's outbound queue: no wake of the
 * receive thread per frame; tdm_xfer_uncork() sends everything queued from the calling thread,
 * in one write where the socket takes it, and wakes the receive thread only for what it does
 * not take. Frames never leave later than the uncork (another thread's send may take them
 * earlier), and their order is unchanged (I5). Nor do they wait long: a corked thread's next
 * tdm_xfer_prefill_send or tdm_xfer_decode_send_info sends what it queued once the oldest of it
 * waited cfg.cork_hold_us (200 µs), and before copying a room of more than 2 MiB. For a caller that
 * handles several rooms in a row (a scheduler iteration, a batch of completions): cork, the calls,
 * uncork, with no blocking wait in between. Nests per engine; a cork of a second engine while one
 * is corked on this thread is a no-op (its frames go out as without). */
void tdm_xfer_cork(tdm_xfer_t *x);
void tdm_xfer_uncork(tdm_xfer_t *x);

#endif
