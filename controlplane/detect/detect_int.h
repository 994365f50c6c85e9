/*
 * controlplane/detect/detect_int.h — the detector's state, shared by detect.c (bookkeeping: ranks,
 * incarnations, groups, events) and detect_rules.c (the rules, pure over this state, the ring and
 * the clock). Not a public header.
 */
#ifndef TDM_CP_DETECT_INT_H
#define TDM_CP_DETECT_INT_H

#include "controlplane/detect/detect.h"

#define DET_HB_MAX 8       /* control threads tracked per rank */
#define DET_HB_NAME 16     /* thread name bytes incl. NUL */
#define DET_CORR_KEEP 8    /* corruption events kept as evidence */
#define DET_OUT_BUCKETS 64 /* output_stats reports kept per group */
#define DET_OUT_SAMPLES 3  /* leaked responses kept as evidence */
#define DET_PEER_ROOMS 8   /* rooms a lost channel failed, named as evidence */
#define DET_PEER_MAX 128

typedef struct det_hb {
    char thread[DET_HB_NAME];
    uint64_t age_us; /* as reported */
    uint64_t rx;     /* when reported (detector clock) */
    uint8_t stale;
} det_hb_t;

typedef struct det_rank {
    const tdm_cp_rank_t *rk;
    int inst;
    size_t seen_head, seen_count;
    uint64_t first_rx, last_rx; /* detector clock: first seen, last new sample */
    uint8_t has_rx;             /* a sample has been seen */
    uint8_t retired;            /* sent `shutdown`: a clean exit, never lost */
    det_hb_t hb[DET_HB_MAX];
    uint32_t n_hb;
} det_rank_t;

typedef struct det_inst {
    char id[TDM_CP_NAME_MAX];
    int group;
    uint64_t first_rx, last_rx; /* over its ranks, detector clock (samples or events) */
    /* the same by the records' own times (the worker's wall clock, ts_us): which incarnation is
     * the later one when a restarted tandemd gets an earlier one's backlog from the spool in the
     * tick of the later one's first batch (the detector clock sees them together) */
    int64_t first_ts, last_ts;
    /* WEDGE bookkeeping */
    uint8_t min_valid;
    uint64_t min_iter, min_iter_at;
    uint64_t pending_since; /* 0: no pending work at the last evaluation */
    /* RANK_DIVERGENCE by position: when first seen; fires once every rank sampled again */
    uint64_t div_since;
    /* WORKER_LOST from the launcher */
    json_t *lost_event; /* {"rank","reason","data","ts_us"} or NULL */
    /* the supervisor's report that it gave up restarting this incarnation's group (worker_lost
     * data.source supervisor, gave_up true), kept beside the first report: {"reason","data"} */
    json_t *gave_up;
    /* its launcher reported a rank exit after it was asked to stop (worker_lost data.stopping):
     * a stop on purpose, never current again (docs/alerts.md WORKER_LOST) */
    uint8_t stopping;
    /* LAYOUT_MISMATCH: evidence of the last layout report when it mismatched, else NULL */
    json_t *layout_bad;
    /* TRANSFER_STALL, the partition form: the channel to the transfer peer timed out and has not
     * registered again. {"rank","reason","rooms":[hex...],"failed_rooms"} or NULL */
    json_t *peer_lost;
    uint64_t peer_lost_rx;
    uint8_t current; /* computed each evaluation: not superseded, not retired */
} det_inst_t;

typedef struct det_out_bucket {
    uint64_t rx;
    uint32_t responses, leaks;
} det_out_bucket_t;

typedef struct det_group {
    char name[TDM_CP_NAME_MAX];
    uint64_t last_success_rx;
    uint8_t has_success;
    /* CORRUPTION */
    uint64_t corr_rx, corr_host_rx, corr_count;
    uint8_t corr_seen, corr_host_seen;
    int corr_inst; /* the incarnation of the last corruption event (its restart ends the finding) */
    json_t *corr_events; /* array of the last DET_CORR_KEEP events */
    /* OUTPUT_ANOMALY */
    det_out_bucket_t out[DET_OUT_BUCKETS];
    size_t out_head, out_n;
    double out_baseline; /* from the last report carrying one; < 0: use the configured default */
    json_t *out_samples; /* array */
} det_group_t;

/* A room in flight, keyed by (group, room). state is a tdm_kvpoll_t value. */
typedef struct det_room {
    uint64_t room;
    int32_t group; /* -1: empty slot */
    int32_t inst;
    uint32_t rank;
    uint8_t state;
    uint64_t open_rx, state_rx;
} det_room_t;

typedef struct det_abort {
    uint64_t room;
    int32_t group, inst;
    uint32_t rank;
    uint64_t sent_rx;
    char peer[DET_PEER_MAX];
} det_abort_t;

struct tdm_cp_detect {
    tdm_cp_detect_cfg_t cfg;
    tdm_cp_detect_stats_t stats;
    uint64_t last_eval;
    uint8_t evaluated;
    det_rank_t *ranks;
    size_t n_ranks, cap_ranks;
    det_inst_t *insts;
    size_t n_insts, cap_insts;
    det_group_t *groups;
    size_t n_groups, cap_groups;
    det_room_t *rooms; /* open addressing, linear probing, backward-shift deletion */
    size_t rooms_cap, n_rooms;
    det_abort_t *aborts;
    size_t n_aborts;
};

/* detect.c */
int tdm_cp_det_group_find(tdm_cp_detect_t *d, const char *name, int create);
det_room_t *tdm_cp_det_room_slot(tdm_cp_detect_t *d, int group, uint64_t room, int *ret_found);
void tdm_cp_det_room_del(tdm_cp_detect_t *d, det_room_t *slot);

/* detect_rules.c: each appends at most one finding per group to `out`. */
void tdm_cp_det_rules_samples(tdm_cp_detect_t *d, uint64_t now, tdm_cp_findings_t *out);
void tdm_cp_det_rules_events(tdm_cp_detect_t *d, uint64_t now, tdm_cp_findings_t *out);
/* A sample as evidence JSON (newest sample of a rank), with its age on the detector clock. */
json_t *tdm_cp_det_sample_json(const tdm_cp_sample_t *s, uint32_t rank);

#endif
