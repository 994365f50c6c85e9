/*
 * tdm/telemetry.h — telemetry v1, the body of `POST /api/v1/telemetry` (docs/contracts.md §c), and
 * its reply `{"acked_seq":N}`.
 *
 *   {"v":1,"worker":"decode-0","group":"decode","role":"decode","instance_id":"<hex16>","rank":0,
 *    "seq":42,
 *    "samples":[{"ts_us":..,"iter":..,"path":"batch","plan_hash":"<hex16>","coll_seq":..,
 *                "coll_hash":"<hex16>","in_coll":{"op":"all_reduce","seq":..,"since_us":..}|null,
 *                "bs":..,"waiting":..,"running":..,
 *                "tokens_out":..,"requests_done":..,"ttft_p50_us":..,"ttft_p99_us":..,
 *                "itl_p50_us":..,"itl_p99_us":..,"kv_pages_used":..,"kv_pages_total":..,
 *                "host_pages_used":..,"host_pages_total":..,"corruption_total":..}],
 *    "events":[{"ts_us":..,"type":"kvpoll","room":"<hex16>"|null,"from":".."|null,"to":".."|null,
 *               "reason":".."|null,"data":{..}|null}]}
 *
 * Ids and hashes are 16-digit lowercase hex (tdm/json.h); times are integer µs since the epoch.
 * Decoding is strict: `v` must be 1, every sample member up to `running` is required (in_coll
 * may be null); the serving statistics after it (tokens_out … corruption_total) are optional and
 * decode as 0 when absent, so a batch from a worker that predates them still ingests;
 * events require ts_us and type (the others may be absent or null), unknown members are
 * rejected, strings longer than their field and batches over the limits are refused with a
 * message naming the key path. `role` is the worker's --disaggregation-mode (prefill, decode,
 * null). `seq` counts batches per (instance_id, rank).
 *
 * Decoding reads the text in one pass straight into the batch; text it does not accept goes
 * through jansson for the message, so errors are the jansson path's, word for word.
 *
 * An event's `data` has two forms. Decoders leave it as text: `data_json` holds the object's
 * compact JSON (byte for byte what json_dumpb(JSON_COMPACT) writes for it, NUL-terminated,
 * data_len bytes), so ingest copies it into its rows without building a tree; only a reader that
 * looks inside (the detectors) parses it, through tdm_tm_event_data(). Code that builds events
 * may set the tree `data` instead; where both are set the tree wins.
 *
 * Ownership: a decoded batch owns its arrays and its events' data texts (one buffer, data_buf);
 * tdm_tm_batch_clear() frees those and drops each event's `data` reference (so a caller-built
 * batch hands its trees to the batch). Encoders never take ownership. Thread-safe (no state).
 */
#ifndef TDM_TELEMETRY_H
#define TDM_TELEMETRY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/status.h>

#define TDM_TM_VERSION 1
#define TDM_TM_NAME_MAX 64    /* worker, group (bytes, without NUL) */
#define TDM_TM_ROLE_MAX 16    /* role */
#define TDM_TM_PATH_MAX 32    /* sample path, in_coll.op */
#define TDM_TM_TYPE_MAX 48    /* event type */
#define TDM_TM_STATE_MAX 32   /* event from/to */
#define TDM_TM_REASON_MAX 256 /* event reason */

typedef struct tdm_tm_limits {
    uint32_t max_samples;    /* per batch; default 1024 */
    uint32_t max_events;     /* per batch; default 1024 */
    uint32_t max_data_bytes; /* compact JSON size of one event's data; default 8192 */
    size_t max_body_bytes;   /* whole request body; default 4 MiB */
} tdm_tm_limits_t;

void tdm_tm_limits_default(tdm_tm_limits_t *ret);

typedef struct tdm_tm_in_coll {
    char op[TDM_TM_PATH_MAX + 1]; /* "all_reduce", "all_gather", "broadcast", ... */
    uint64_t seq;                 /* coll_seq of the collective the rank is inside */
    int64_t since_us;
} tdm_tm_in_coll_t;

typedef struct tdm_tm_sample {
    int64_t ts_us;
    uint64_t iter;
    char path[TDM_TM_PATH_MAX + 1]; /* loop path of the iteration: "batch", "idle", ... */
    uint64_t plan_hash;
    uint64_t coll_seq;
    uint64_t coll_hash;
    int in_coll_valid; /* 0: "in_coll":null */
    tdm_tm_in_coll_t in_coll;
    uint32_t bs, waiting, running;
    /* Serving statistics (optional on the wire, 0 when absent; docs/contracts.md). The group's
     * rank 0, which runs the scheduler, fills them; the other ranks send 0. */
    uint64_t tokens_out;               /* tokens generated, ever (cumulative) */
    uint64_t requests_done;            /* requests finished, ever */
    uint32_t ttft_p50_us, ttft_p99_us; /* over the first tokens of the last interval; 0 = none */
    uint32_t itl_p50_us, itl_p99_us;   /* over the inter-token gaps of the last interval */
    uint32_t kv_pages_used, kv_pages_total;     /* device KV pool (used = total - free) */
    uint32_t host_pages_used, host_pages_total; /* HiCache host tier; 0 without one */
    uint64_t corruption_total; /* KV checksum + aux mismatches + rooms at corruption risk, ever */
    /* Not on the wire: tandemd's wall clock when the batch arrived (ingest lag = recv_us - ts_us);
     * decoders leave it 0. */
    int64_t recv_us;
} tdm_tm_sample_t;

typedef struct tdm_tm_event {
    int64_t ts_us;
    char type[TDM_TM_TYPE_MAX + 1];
    int has_room; /* 0: "room":null */
    uint64_t room;
    char from[TDM_TM_STATE_MAX + 1]; /* "" encodes as null */
    char to[TDM_TM_STATE_MAX + 1];
    char reason[TDM_TM_REASON_MAX + 1];
    json_t *data;          /* object or NULL: caller-built events (see the top) */
    const char *data_json; /* object as compact JSON text or NULL (null): decoded events */
    uint32_t data_len;     /* bytes of data_json, without the NUL */
} tdm_tm_event_t;

typedef struct tdm_tm_batch {
    char worker[TDM_TM_NAME_MAX + 1];
    char group[TDM_TM_NAME_MAX + 1];
    char role[TDM_TM_ROLE_MAX + 1];
    uint64_t instance_id;
    uint32_t rank;
    uint64_t seq;
    tdm_tm_sample_t *samples;
    uint32_t n_samples;
    tdm_tm_event_t *events;
    uint32_t n_events;
    char *data_buf; /* the decoded events' data_json texts, back to back (NULL when none) */
} tdm_tm_batch_t;

/* Frees the arrays, data_buf and event data of a decoded (or caller-built with tdm_malloc) batch
 * and zeroes the counts; NULL-safe. */
void tdm_tm_batch_clear(tdm_tm_batch_t *b);

/* The event's data as a tree: a new reference (`data` itself, or data_json parsed), NULL when it
 * has none (or when data_json is not an object, which no decoder produces). */
json_t *tdm_tm_event_data(const tdm_tm_event_t *e);

/* Encode: validates the same rules as the decoder (so we never send what tandemd refuses). */
tdm_status_t tdm_tm_batch_to_json(const tdm_tm_batch_t *b, const tdm_tm_limits_t *lim, json_t **ret,
                                  char *err, size_t err_len);
/* Compact text; *ret_text is freed with free(3). */
tdm_status_t tdm_tm_batch_encode(const tdm_tm_batch_t *b, const tdm_tm_limits_t *lim,
                                 char **ret_text, size_t *ret_len, char *err, size_t err_len);

/* Decode: `lim` NULL means the defaults. On failure nothing is allocated and `err` names the key
 * path ("samples[2].coll_hash: ..."). */
tdm_status_t tdm_tm_batch_from_json(const json_t *root, const tdm_tm_limits_t *lim,
                                    tdm_tm_batch_t *ret, char *err, size_t err_len);
tdm_status_t tdm_tm_batch_decode(const char *buf, size_t len, const tdm_tm_limits_t *lim,
                                 tdm_tm_batch_t *ret, char *err, size_t err_len);

/* The two halves of tdm_tm_batch_decode(), public for the differential test:
 * tdm_tm_batch_scan() is the single-pass decoder (no tree: text straight into the batch). It
 * accepts exactly the texts the jansson path accepts, with an identical batch, and returns
 * TDM_ERR_FORMAT without a message on every other text (nothing allocated); decode then runs
 * tdm_tm_batch_decode_jansson() (json_loadb + tdm_tm_batch_from_json), the reference, whose
 * message names the key path. */
tdm_status_t tdm_tm_batch_scan(const char *buf, size_t len, const tdm_tm_limits_t *lim,
                               tdm_tm_batch_t *ret);
tdm_status_t tdm_tm_batch_decode_jansson(const char *buf, size_t len, const tdm_tm_limits_t *lim,
                                         tdm_tm_batch_t *ret, char *err, size_t err_len);

/* The reply: `{"acked_seq":N}`. encode needs cap >= 40. */
tdm_status_t tdm_tm_ack_encode(uint64_t acked_seq, char *buf, size_t cap, size_t *ret_len);
tdm_status_t tdm_tm_ack_decode(const char *buf, size_t len, uint64_t *ret_acked_seq, char *err,
                               size_t err_len);

#endif
