/*
 * tdm/frame.h — control frames between a decode leader and a prefill leader (docs/design.md §6,
 * docs/contracts.md §d).
 *
 * Wire: header `magic(4) version(2) type(2) length(4)` little-endian, then `length` body bytes.
 * All frames of a room travel in order on one leader<->leader TCP channel (invariant I5).
 * Decoding is strict: every field is bounds-checked against the body length, counts are capped,
 * the body must be consumed exactly. A frame that fails to decode is counted and dropped by the
 * caller, never asserted on (invariant I3). A bad *header* (magic, version, oversize length) means
 * the byte stream can no longer be trusted: the reader reports it and the channel is closed.
 *
 * Ownership: decoded frames point into the caller's buffer (blobs, id arrays, strings are views);
 * they stay valid as long as that buffer does. Nothing here allocates.
 */
#ifndef TDM_FRAME_H
#define TDM_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/layout.h>
#include <tdm/status.h>

#define TDM_FRAME_MAGIC 0x464d4454u /* "TDMF" little-endian */
#define TDM_FRAME_VERSION 1
#define TDM_FRAME_HDR_BYTES 12
#define TDM_FRAME_MAX_BODY (4u << 20) /* 4 MiB: REGISTER of 8 ranks is a few KiB */
#define TDM_FRAME_MAX_RANKS 64
#define TDM_FRAME_MAX_BLOB (64u << 10) /* UCX worker address / rkey / IPC handle */
#define TDM_FRAME_MAX_IDS (1u << 20)   /* prompt tokens, page ids */
#define TDM_FRAME_MAX_TOP 20
#define TDM_FRAME_MAX_SEG_SUMS (1u << 16) /* STATUS segment sums: 64 ranks x 256 layers x 4 */
#define TDM_FRAME_MAX_MSG 1024

typedef enum tdm_frame_type {
    TDM_FRAME_REGISTER = 1,
    TDM_FRAME_TRANSFER_INFO = 2,
    TDM_FRAME_STATUS = 3,
    TDM_FRAME_ABORT = 4,
    TDM_FRAME_ABORT_ACK = 5,
    TDM_FRAME_HEARTBEAT = 6,
    TDM_FRAME_TYPE_MAX
} tdm_frame_type_t;

const char *tdm_frame_type_name(uint16_t type);

/* KVPoll states (invariant I4): ordered, MIN across ranks combines, FAILED sticky. */
typedef enum tdm_kvpoll {
    TDM_KVPOLL_FAILED = 0,
    TDM_KVPOLL_BOOTSTRAPPING = 1,
    TDM_KVPOLL_WAITING_FOR_INPUT = 2,
    TDM_KVPOLL_TRANSFERRING = 3,
    TDM_KVPOLL_SUCCESS = 4,
    TDM_KVPOLL_MAX
} tdm_kvpoll_t;

const char *tdm_kvpoll_name(tdm_kvpoll_t s);

typedef struct tdm_blob {
    const uint8_t *data;
    uint32_t len;
} tdm_blob_t;

typedef struct tdm_frame_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t length;
} tdm_frame_hdr_t;

/* One decode rank's memory, registered with its prefill peer (rank i pairs with rank i). */
typedef struct tdm_frame_rank {
    uint16_t rank;
    uint16_t mem_kind;  /* 0 = host (UCX rkey), 1 = CUDA IPC handle */
    uint64_t base_addr; /* remote base of the KV pool */
    uint64_t pool_bytes;
    uint64_t aux_addr; /* remote base of the aux slots */
    uint64_t aux_bytes;
    tdm_blob_t worker_addr; /* ucp worker address */
    tdm_blob_t rkey;        /* packed rkey or cudaIpcMemHandle_t */
} tdm_frame_rank_t;

typedef struct tdm_frame_register {
    uint64_t instance_id; /* decode group's instance id */
    uint16_t tp_size;
    uint16_t n_ranks;
    uint32_t page_size;
    tdm_layout_record_t layout;
    tdm_frame_rank_t ranks[TDM_FRAME_MAX_RANKS];
} tdm_frame_register_t;

typedef struct tdm_frame_sampling {
    uint64_t seed;
    float temperature, top_p, min_p;
    int32_t top_k;
    float repetition_penalty, presence_penalty, frequency_penalty;
    uint32_t top_logprobs;
} tdm_frame_sampling_t;

typedef struct tdm_frame_transfer_info {
    uint64_t room;
    uint64_t instance_id;
    uint32_t aux_slot;
    uint32_t n_prompt;
    const uint8_t *prompt_ids; /* n_prompt little-endian u32, view into the body */
    uint32_t n_pages;
    const uint8_t *page_ids; /* n_pages little-endian u32 */
    tdm_frame_sampling_t sampling;
} tdm_frame_transfer_info_t;

typedef struct tdm_frame_top {
    uint32_t id;
    float logprob;
} tdm_frame_top_t;

typedef struct tdm_frame_status {
    uint64_t room;
    uint8_t state; /* tdm_kvpoll_t */
    uint16_t reason;
    uint32_t first_token;
    float first_logprob;
    uint32_t n_top;
    tdm_frame_top_t top[TDM_FRAME_MAX_TOP];
    uint32_t chunk_tokens; /* tokens covered by one checksum */
    uint32_t n_checksums;
    const uint8_t *checksums; /* n_checksums little-endian u64 (xxh64 per chunk) */
    tdm_blob_t message;
    /* Optional trailer after `message` (docs/contracts.md §d "Segment sums"): present when the
     * body continues past the message; 0 = absent. Per rank, per (layer, sub-buffer) in
     * layer-major, sub-buffer order, the fold (s * 0x9e3779b97f4a7c15 + h mod 2^64, from 0) over
     * the room's pages of that page segment's XXH64. Only with checksums (n_checksums > 0);
     * decoders check the count against the room (n_ranks x num_layers x n_sub). */
    uint32_t n_seg_sums;
    const uint8_t *seg_sums; /* n_seg_sums little-endian u64 */
} tdm_frame_status_t;

typedef struct tdm_frame_abort {
    uint64_t room;
    uint16_t reason;
    tdm_blob_t message;
} tdm_frame_abort_t;

typedef struct tdm_frame_abort_ack {
    uint64_t room;
    uint8_t flushed; /* 1: every prefill rank flushed its writes for the room */
    uint8_t known;   /* 0: the room was unknown (tombstoned now) */
} tdm_frame_abort_ack_t;

typedef struct tdm_frame_heartbeat {
    uint64_t instance_id;
    uint64_t seq;
    uint64_t ts_us;
} tdm_frame_heartbeat_t;

/* Little-endian accessors for the id/checksum views above. */
static inline uint32_t tdm_frame_u32_at(const uint8_t *p, uint32_t i)
{
    const uint8_t *q = p + (size_t)i * 4;
    return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
}
static inline uint64_t tdm_frame_u64_at(const uint8_t *p, uint32_t i)
{
    return (uint64_t)tdm_frame_u32_at(p, i * 2) | (uint64_t)tdm_frame_u32_at(p, i * 2 + 1) << 32;
}

/* Header: parse validates magic, version and length <= max_body; `type` is NOT validated
 * (unknown types are a body-level drop, the stream stays usable). */
tdm_status_t tdm_frame_hdr_parse(const uint8_t *buf, size_t len, uint32_t max_body,
                                 tdm_frame_hdr_t *ret_hdr);

/* Encoders write header + body into buf (cap bytes); *ret_len is the whole frame.
 * TDM_ERR_OVERFLOW if cap is too small. Encoded frames always decode to the same values. */
tdm_status_t tdm_frame_encode_register(const tdm_frame_register_t *f, uint8_t *buf, size_t cap,
                                       size_t *ret_len);
tdm_status_t tdm_frame_encode_transfer_info(const tdm_frame_transfer_info_t *f,
                                            const uint32_t *prompt_ids, const uint32_t *page_ids,
                                            uint8_t *buf, size_t cap, size_t *ret_len);
/* STATUS: f->n_checksums values from `checksums`, and the trailer of f->n_seg_sums values from
 * `seg_sums` when f->n_seg_sums > 0 (none otherwise). */
tdm_status_t tdm_frame_encode_status(const tdm_frame_status_t *f, const uint64_t *checksums,
                                     const uint64_t *seg_sums, uint8_t *buf, size_t cap,
                                     size_t *ret_len);
tdm_status_t tdm_frame_encode_abort(const tdm_frame_abort_t *f, uint8_t *buf, size_t cap,
                                    size_t *ret_len);
tdm_status_t tdm_frame_encode_abort_ack(const tdm_frame_abort_ack_t *f, uint8_t *buf, size_t cap,
                                        size_t *ret_len);
tdm_status_t tdm_frame_encode_heartbeat(const tdm_frame_heartbeat_t *f, uint8_t *buf, size_t cap,
                                        size_t *ret_len);

/* Body decoders (body = the `length` bytes after the header). On error `why` (if given) holds a
 * short reason naming the field. */
tdm_status_t tdm_frame_decode_register(const uint8_t *body, size_t len, tdm_frame_register_t *ret,
                                       char *why, size_t why_len);
tdm_status_t tdm_frame_decode_transfer_info(const uint8_t *body, size_t len,
                                            tdm_frame_transfer_info_t *ret, char *why,
                                            size_t why_len);
tdm_status_t tdm_frame_decode_status(const uint8_t *body, size_t len, tdm_frame_status_t *ret,
                                     char *why, size_t why_len);
tdm_status_t tdm_frame_decode_abort(const uint8_t *body, size_t len, tdm_frame_abort_t *ret,
                                    char *why, size_t why_len);
tdm_status_t tdm_frame_decode_abort_ack(const uint8_t *body, size_t len, tdm_frame_abort_ack_t *ret,
                                        char *why, size_t why_len);
tdm_status_t tdm_frame_decode_heartbeat(const uint8_t *body, size_t len, tdm_frame_heartbeat_t *ret,
                                        char *why, size_t why_len);

/*
 * Stream reassembly for a non-blocking socket: feed whatever bytes arrived; complete frames are
 * returned one at a time. The reader owns a buffer of up to max_body + header bytes.
 */
typedef struct tdm_frame_reader {
    uint8_t *buf;
    size_t cap, len, off; /* bytes held; off = start of the first unconsumed frame */
    uint32_t max_body;
    int broken; /* a bad header was seen: the stream must be closed */
} tdm_frame_reader_t;

tdm_status_t tdm_frame_reader_init(tdm_frame_reader_t *r, uint32_t max_body);
void tdm_frame_reader_free(tdm_frame_reader_t *r);
/* Space to read into: *ret_ptr, *ret_avail. After reading n bytes call tdm_frame_reader_commit. */
void tdm_frame_reader_space(tdm_frame_reader_t *r, uint8_t **ret_ptr, size_t *ret_avail);
void tdm_frame_reader_commit(tdm_frame_reader_t *r, size_t n);
/* TDM_OK + header/body view of the next complete frame (valid until the next call);
 * TDM_ERR_AGAIN if incomplete; TDM_ERR_FORMAT if the stream is broken (close it). */
tdm_status_t tdm_frame_reader_next(tdm_frame_reader_t *r, tdm_frame_hdr_t *ret_hdr,
                                   const uint8_t **ret_body);

#endif
