/*
 * controlplane/store/ring.h — the in-memory telemetry ring: every sample of every rank, newest
 * last.
 *
 * This is what detectors and the console read (docs/design.md §1, §4): ingest pushes every sample
 * here before (and regardless of) persisting, so detectors never wait on the database. Each rank,
 * keyed by (instance_id, rank), owns a fixed-capacity circular array; when full the oldest sample
 * is overwritten. A rank also carries the ingest bookkeeping the loop needs: the last telemetry
 * seq seen (a replayed batch is not pushed twice) and the time of the last persisted sample (the
 * 10 Hz thinning).
 *
 * Threading: owned by the h2o loop thread; no locking. Capacity and the number of ranks are
 * bounded (tdm_cp_rings_rank returns TDM_ERR_OVERFLOW past max_ranks).
 */
#ifndef TDM_CP_RING_H
#define TDM_CP_RING_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>
#include <tdm/telemetry.h>

#define TDM_CP_NAME_MAX (TDM_TM_NAME_MAX + 1)

/* The ring holds decoded telemetry v1 samples as they arrived (tdm/telemetry.h). */
typedef tdm_tm_sample_t tdm_cp_sample_t;

typedef struct tdm_cp_rank {
    char instance_id[TDM_CP_NAME_MAX];
    uint32_t rank;
    char group[TDM_CP_NAME_MAX];
    char worker[TDM_CP_NAME_MAX];
    char role[TDM_TM_ROLE_MAX + 1];
    uint64_t last_seq;        /* highest telemetry batch seq pushed (0: none) */
    uint64_t last_persist_us; /* ts_us of the last sample selected for the database */
    uint64_t last_recv_mono_us;
    uint8_t persist_all; /* set while an alert is open on the group: no thinning */
    /* ring storage */
    tdm_cp_sample_t *slots;
    size_t cap, head, count; /* head: index of the next write */
} tdm_cp_rank_t;

typedef struct tdm_cp_rings {
    tdm_cp_rank_t **ranks;
    size_t n, max_ranks, cap_per_rank;
} tdm_cp_rings_t;

void tdm_cp_rings_init(tdm_cp_rings_t *r, size_t cap_per_rank, size_t max_ranks);
void tdm_cp_rings_free(tdm_cp_rings_t *r);

/* Find the rank, or create it when `create`. TDM_ERR_NOTFOUND (not found, !create),
 * TDM_ERR_OVERFLOW (max_ranks reached), TDM_ERR_INVAL (instance_id empty or too long). */
tdm_status_t tdm_cp_rings_rank(tdm_cp_rings_t *r, const char *instance_id, uint32_t rank,
                               int create, tdm_cp_rank_t **ret_rank);

void tdm_cp_rank_push(tdm_cp_rank_t *rk, const tdm_cp_sample_t *s);
/* i = 0 is the oldest sample held; NULL when i >= count. */
const tdm_cp_sample_t *tdm_cp_rank_at(const tdm_cp_rank_t *rk, size_t i);
/* The newest sample, or NULL when none. */
const tdm_cp_sample_t *tdm_cp_rank_latest(const tdm_cp_rank_t *rk);
/* 10 Hz thinning: 1 if a sample at ts_us is to be persisted (updates last_persist_us). */
int tdm_cp_rank_persist_due(tdm_cp_rank_t *rk, uint64_t ts_us, uint64_t period_us);

#endif
