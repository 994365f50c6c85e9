/*
 * controlplane/store/batch.h — one telemetry batch on its way to PostgreSQL, in its durable form.
 *
 * The loop thread decodes a telemetry v1 POST (docs/contracts.md §c), pushes its samples into the
 * ring and encodes what is to be persisted into one self-contained blob: the (instance_id, rank,
 * seq) key and the rows for samples, transfer_events and events already in COPY text form. The DB
 * ingest thread COPYs those rows verbatim; during a database outage the same blob is what goes into
 * the spool file, so a batch read back from disk is byte-for-byte the batch that was received.
 *
 * Blob layout (little-endian): u64 seq, u32 rank, u32 n_samples, u32 n_tevents, u32 n_events,
 * u32 instance_len, u32 group_len, u32 samples_len, u32 tevents_len, u32 events_len, then
 * instance_id, group, samples, tevents, events, each followed by one NUL byte.
 * tdm_cp_batch_decode() checks every length against the blob size and every terminator.
 */
#ifndef TDM_CP_BATCH_H
#define TDM_CP_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#define TDM_CP_BATCH_HDR 44

/* The samples rows' columns, in COPY order (sql/0002_sample_stats.sql added the statistics and
 * recv_us). A blob spooled before them holds TDM_CP_SAMPLE_COLUMNS_V1 fields a row;
 * tdm_cp_batch_decode() brings such rows up to date (statistics 0, recv_us NULL). */
#define TDM_CP_SAMPLE_COLUMNS                                                                      \
    "ts_us, instance_id, rank, group_name, batch_seq, iter, path, plan_hash, coll_seq, "           \
    "coll_hash, in_coll, bs, waiting, running, tokens_out, requests_done, ttft_p50_us, "           \
    "ttft_p99_us, itl_p50_us, itl_p99_us, kv_pages_used, kv_pages_total, host_pages_used, "        \
    "host_pages_total, corruption_total, recv_us"
#define TDM_CP_SAMPLE_COLUMNS_V1 14

typedef struct tdm_cp_batch {
    struct tdm_cp_batch *next; /* queue link (DB thread) */
    uint64_t seq;
    uint32_t rank;
    uint32_t n_samples, n_tevents, n_events;
    const char *instance_id, *group; /* point into blob */
    const char *samples, *tevents, *events;
    size_t samples_len, tevents_len, events_len;
    uint8_t *blob;
    size_t blob_len;
    uint64_t enq_mono_us; /* when the batch was received (ingest lag) */
    void *owner;          /* loop-side reply context; NULL for batches read from the spool */
} tdm_cp_batch_t;

typedef struct tdm_cp_batch_parts {
    uint64_t seq;
    uint32_t rank;
    const char *instance_id, *group;
    const char *samples, *tevents, *events;
    size_t samples_len, tevents_len, events_len;
    uint32_t n_samples, n_tevents, n_events;
} tdm_cp_batch_parts_t;

/* Build a batch (one allocation for the blob). TDM_ERR_OVERFLOW if a part exceeds 4 GiB. */
tdm_status_t tdm_cp_batch_encode(const tdm_cp_batch_parts_t *parts, tdm_cp_batch_t **ret_batch);
/* Take ownership of `blob` (malloc'd) and validate it; on failure blob is freed and
 * TDM_ERR_FORMAT returned. Samples rows of the older layout are rewritten (see above). */
tdm_status_t tdm_cp_batch_decode(uint8_t *blob, size_t len, tdm_cp_batch_t **ret_batch);
void tdm_cp_batch_free(tdm_cp_batch_t *b);

#endif
