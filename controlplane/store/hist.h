/*
 * controlplane/store/hist.h — the recent persisted samples of each rank, in memory, for
 * GET /api/v1/ranks/{instance_id}/{rank}/history.
 *
 * The ring (ring.h) keeps every sample a rank sent; history answers with the rows in the samples
 * table (the 10 Hz thinned ones, with their batch_seq). This cache holds exactly those rows as
 * tandemd committed them: the ingest reply adds a batch's persisted samples once the database
 * acknowledged the commit, in commit order. For each rank it keeps a coverage bound `cover_from`:
 * every row of the rank in the database with ts_us >= cover_from is held here (tandemd is the only
 * writer of samples). The bound only rises:
 * - the first committed row of a rank sets it to that row's ts_us;
 * - a row evicted from the full circular array raises it past the evicted ts_us;
 * - rows that reach the database another way (a batch spooled during an outage and replayed later,
 *   one whose outcome is unknown) raise it past their newest ts_us, unless all are older than it;
 *   a replay from the spool file raises it for every rank (tdm_cp_hist_gap_all);
 * - a batch answered as a duplicate inserted nothing now; its original was committed either after
 *   the first commit this cache saw for the rank (the marks only rise, so its seq is at least that
 *   one's: it came through here) or before it (then it is treated as a gap);
 * - a row older than the newest held (clock going back) empties the rank and raises it past both.
 * A query [since, until) with a limit is answered from memory when it is covered: since >=
 * cover_from, or at least `limit` held rows lie in [cover_from, until) (the newest `limit` rows
 * are then all held). Otherwise the caller asks the database. The JSON is the database path's,
 * byte for byte (in_coll rendered the way PostgreSQL prints jsonb).
 *
 * Threading: the loop thread only. Memory: at most cap_per_rank rows per rank (grown by doubling)
 * and max_ranks ranks; past max_ranks new ranks are simply not cached.
 */
#ifndef TDM_CP_HIST_H
#define TDM_CP_HIST_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/telemetry.h>

#include "controlplane/store/buf.h"

typedef struct tdm_cp_hist_row {
    tdm_tm_sample_t s;
    uint64_t batch_seq;
} tdm_cp_hist_row_t;

typedef struct tdm_cp_hist_rank tdm_cp_hist_rank_t;

typedef struct tdm_cp_hist {
    tdm_cp_hist_rank_t **slots; /* open addressing on (instance_id, rank) */
    size_t nslots, n, max_ranks, cap_per_rank;
    uint64_t hits, misses;
} tdm_cp_hist_t;

void tdm_cp_hist_init(tdm_cp_hist_t *h, size_t cap_per_rank, size_t max_ranks);
void tdm_cp_hist_free(tdm_cp_hist_t *h);

/* The rows of one committed batch (n may be 0), in the order they were sent. */
void tdm_cp_hist_commit(tdm_cp_hist_t *h, const char *instance_id, uint32_t rank,
                        uint64_t batch_seq, const tdm_tm_sample_t *rows, size_t n);
/* Rows with ts_us <= newest_ts_us reached (or will reach) the database without passing through
 * tdm_cp_hist_commit. */
void tdm_cp_hist_gap(tdm_cp_hist_t *h, const char *instance_id, uint32_t rank,
                     int64_t newest_ts_us);
/* A batch the database answered as a duplicate (see the rule above). */
void tdm_cp_hist_duplicate(tdm_cp_hist_t *h, const char *instance_id, uint32_t rank,
                           uint64_t batch_seq, int64_t newest_ts_us);
/* Anything may have reached the database behind the cache: nothing held is a complete answer. */
void tdm_cp_hist_gap_all(tdm_cp_hist_t *h);

/* A sample's in_coll as PostgreSQL prints jsonb ({"op": "…", "seq": N, "since_us": N}): what
 * ingest stores and what the cache answers, so both paths give the same bytes. */
void tdm_cp_in_coll_json(tdm_cp_buf_t *b, const tdm_tm_in_coll_t *c);

/* The serving statistics of a sample as JSON members, in the samples table's column order:
 * `,"tokens_out":N,…,"corruption_total":N,"recv_us":N|null` (recv_us 0 is null). Shared by the
 * history (both paths) and the ring's sample JSON. */
#define TDM_CP_SAMPLE_STATS 11
extern const char *const tdm_cp_sample_stat_names[TDM_CP_SAMPLE_STATS];
void tdm_cp_sample_stats_json(tdm_cp_buf_t *b, const tdm_tm_sample_t *x);

/* 1 and the history JSON appended to `out` when the query is covered, else 0 (nothing
 * appended). since/until as the query parameters (until exclusive). */
int tdm_cp_hist_render(tdm_cp_hist_t *h, const char *instance_id, uint32_t rank, int64_t since_us,
                       int64_t until_us, size_t limit, tdm_cp_buf_t *out);

#endif
