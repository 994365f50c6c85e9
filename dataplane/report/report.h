/*
 * dataplane/report/report.h — the telemetry reporter of one rank (docs/design.md §1,
 * docs/contracts.md §c, I9).
 *
 * One thread per rank. Every interval (200 ms) it snapshots the rank's record of the progress page
 * into a docs/contracts.md §c sample — even when nothing progressed — and folds every event
 * enqueued since (tdm_report_event: KVPoll transitions, faults, worker_lost from the launcher) into
 * one batch with the next `seq` of (instance_id, rank). It POSTs batches in seq order to
 * `<control_plane>/api/v1/telemetry` over one keep-alive libcurl handle and pops a batch only
 * when the reply is `{"acked_seq":N}` with N >= its seq (tandemd acknowledges after commit and
 * deduplicates replays by its high-water mark, so re-sending is always safe). A batch that waits
 * for its ack (a database outage holds tandemd's) is tried again every 2 s, and meanwhile each
 * tick's sample is also POSTed live (seq 0, docs/contracts.md §c): tandemd's ring and detectors
 * keep seeing the rank while the stored batches wait, still in order.
 *
 * While tandemd is unreachable, batches queue up to `spool_max_bytes`. With a spool directory
 * each queued batch is also a file (report_spool.c: magic + version + length framing), so the queue
 * survives a restart and is replayed, in order, by the next reporter on the same directory.
 * fsync policy: a batch holding events is fsync'ed (file and directory) before it counts as
 * spooled; a samples-only batch is not (a power cut may lose recent samples, never events).
 * Overflow (I9): samples are dropped oldest-first — an old batch loses its samples, and a batch
 * left empty is deleted — events are never dropped, and the count goes out as a
 * `telemetry_dropped` event (data {"samples":N}) in the next batch. A batch that tandemd refuses
 * as malformed (HTTP 400/413/422) is dropped with an error log and counted as rejected; any
 * other failure keeps it at the head and retries on the next tick.
 *
 * The thread publishes TDM_HB_REPORTER in the page at least once per tick (network timeouts are
 * capped below the heartbeat timeout). Thread-safety: tdm_report_event and tdm_report_stats from
 * any thread; start/stop from one owner.
 */
#ifndef TDM_REPORT_H
#define TDM_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/progress.h>
#include <tdm/status.h>
#include <tdm/telemetry.h>

typedef struct tdm_report tdm_report_t;

/* Fills a sample's serving statistics (tokens_out … corruption_total, tdm/telemetry.h) on the
 * reporter thread, once per tick, after the progress record was read; must not block. */
typedef void (*tdm_report_stats_fn)(void *ctx, tdm_tm_sample_t *s);

typedef struct tdm_report_opts {
    const char *control_plane; /* base URL, e.g. "http://127.0.0.1:8470" (required) */
    const char *spool_dir;     /* NULL or "" = queue in memory only; else <dir>/rank-<r>/ */
    const char *worker;        /* docs/contracts.md §c identity */
    const char *group;
    const char *role; /* prefill | decode | null */
    uint64_t instance_id;
    uint32_t rank;
    tdm_progress_page_t *page; /* the rank's slot is sampled; NULL = events only */
    uint32_t interval_ms;      /* 0 → 200 */
    uint64_t spool_max_bytes;  /* 0 → 64 MiB; bound of the queue (memory and disk) */
    uint32_t http_timeout_ms;  /* 0 → 1000 (connect: a fifth of it) */
    uint64_t first_seq;        /* 0 → 1; the launcher's worker_lost batch uses the wall clock */
    const char *token;         /* bearer token for tandemd (NULL or "" = none) */
    tdm_report_stats_fn stats; /* NULL = the statistics go out as 0 */
    void *stats_ctx;
} tdm_report_opts_t;

tdm_status_t tdm_report_start(const tdm_report_opts_t *o, tdm_report_t **ret, char *err,
                              size_t err_len);
/* Enqueue one event (never dropped). `room` NULL = no room; from/to/reason NULL or "" = null;
 * `data` (an object or NULL) is stolen. TDM_ERR_INVAL when a field is over its docs/contracts.md §c
 * limit. */
tdm_status_t tdm_report_event(tdm_report_t *r, const char *type, const uint64_t *room,
                              const char *from, const char *to, const char *reason, json_t *data);
/* Stop the thread after one last batch and up to `flush_ms` of sending; what is left stays in the
 * spool (or is lost, with a log line, when there is no spool). NULL-safe. */
void tdm_report_stop(tdm_report_t *r, uint32_t flush_ms);

typedef struct tdm_report_stats {
    uint64_t next_seq;
    uint64_t batches_sent, samples_formed, samples_sent, events_sent;
    uint64_t samples_dropped, batches_rejected, send_failures;
    uint64_t live_sent; /* samples sent live (seq 0) while the oldest batch waited */
    uint64_t queued_batches, queued_bytes, events_pending;
    int connected; /* the last attempt succeeded */
} tdm_report_stats_t;

void tdm_report_stats(tdm_report_t *r, tdm_report_stats_t *ret);

#endif
