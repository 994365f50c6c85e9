/*
 * controlplane/detect/detect.h — the detectors of docs/design.md §4 over the in-memory telemetry
 * ring.
 *
 * Contract. A detector reads the samples tandemd's ingest pushed into the ring (ring.h) and the
 * events ingest hands it (tdm_cp_detect_event), and every tick (100 ms by default) evaluates the
 * eight rules, returning one finding per (group, class) whose rule is true *now*, with a summary
 * line and a JSON evidence object. It opens nothing itself: the alert store (alert.h) turns
 * findings into alerts (dedupe, auto-resolve, policy). The rules are functions of the ring, the
 * event state and the clock only: time is always passed in (`now_us`, µs on any monotonic
 * origin), so tests replay recorded streams on a virtual clock.
 *
 * Units. A *group* is a worker group by name (telemetry "group"); an *incarnation* is one launch
 * of it (telemetry "instance_id", shared by its ranks). Sample rules compare the ranks of one
 * incarnation; an incarnation is superseded when another of the same group first reported after
 * it last did (a restart), and then ignored. Worker times (ts_us, since_us) are only compared with
 * times of the same rank; receipt times are taken on the detector's clock, so clock skew between
 * hosts cannot raise an alert.
 *
 * Worker-side event vocabulary (docs/alerts.md "What workers send") — event `type` values read:
 *   kvpoll (room, from, to: KVPoll names), abort_sent / abort_acked (room; data.peer),
 *   heartbeat_stale / heartbeat_fresh (data {"thread","age_us"}), checksum_mismatch,
 *   hicache_load_mismatch, poisoned_page_read, aux_room_mismatch, canary_mismatch (CORRUPTION;
 *   data.tier "host" marks the host-tier path), layout / layout_mismatch (data {"host","device"}:
 *   layout records in JSON form, tdm/layout.h), worker_lost (data.rank), shutdown (a clean exit),
 *   output_stats (data {"responses","dsml_leaks","baseline"?,"samples"?}). Others are ignored.
 *
 * Threading: one thread (tandemd's loop) owns a detector. Memory is bounded by the caps in
 * tdm_cp_detect_cfg_t; overflow drops the oldest item and counts it.
 */
#ifndef TDM_CP_DETECT_H
#define TDM_CP_DETECT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/status.h>
#include <tdm/telemetry.h>

#include "controlplane/store/ring.h"

typedef enum tdm_cp_alert_class {
    TDM_CP_ALERT_WEDGE = 0,
    TDM_CP_ALERT_RANK_DIVERGENCE,
    TDM_CP_ALERT_TRANSFER_STALL,
    TDM_CP_ALERT_ABORT_UNACKED,
    TDM_CP_ALERT_CORRUPTION,
    TDM_CP_ALERT_LAYOUT_MISMATCH,
    TDM_CP_ALERT_WORKER_LOST,
    TDM_CP_ALERT_OUTPUT_ANOMALY,
    TDM_CP_ALERT_MAX
} tdm_cp_alert_class_t;

/* "WEDGE", ... (the alerts.kind values of sql/0001_init.sql); "?" out of range. */
const char *tdm_cp_alert_class_name(tdm_cp_alert_class_t c);
tdm_status_t tdm_cp_alert_class_parse(const char *name, tdm_cp_alert_class_t *ret);

typedef struct tdm_cp_detect_cfg {
    uint64_t tick_us;          /* evaluation period; 100 ms */
    uint64_t wedge_us;         /* min iter unchanged with work pending; 3 s */
    uint64_t div_in_coll_us;   /* a rank inside one collective this long; 1 s */
    uint64_t div_window_us;    /* same-iter / same-coll_seq comparison window; 2 s */
    uint64_t stall_room_us;    /* room in WAITING_FOR_INPUT/TRANSFERRING this long; 10 s */
    uint64_t abort_ack_us;     /* ABORT without ACK this long; 5 s */
    uint64_t lost_us;          /* no sample from a rank this long; 2 s */
    uint64_t event_hold_us;    /* event-driven rules stay true this long after the event; 30 s */
    uint64_t output_window_us; /* OUTPUT_ANOMALY sliding window; 60 s */
    double output_baseline;    /* DSML-leak rate above which OUTPUT_ANOMALY fires; 0.01 */
    uint32_t output_min_responses; /* responses needed in the window to judge; 20 */
    uint32_t max_rooms;            /* rooms tracked in all; 65536 */
    uint32_t max_aborts;           /* unacknowledged aborts tracked; 4096 */
    uint32_t max_groups;           /* 1024 */
} tdm_cp_detect_cfg_t;

void tdm_cp_detect_cfg_default(tdm_cp_detect_cfg_t *ret);

/* One rule that is true now. */
typedef struct tdm_cp_finding {
    tdm_cp_alert_class_t cls;
    char group[TDM_CP_NAME_MAX];
    char summary[256];
    json_t *evidence;  /* object, owned by the findings list */
    uint8_t host_tier; /* CORRUPTION seen on the host-tier path */
} tdm_cp_finding_t;

typedef struct tdm_cp_findings {
    tdm_cp_finding_t *v;
    size_t n, cap;
} tdm_cp_findings_t;

void tdm_cp_findings_clear(tdm_cp_findings_t *f); /* releases evidence; keeps the array */
void tdm_cp_findings_free(tdm_cp_findings_t *f);
/* A new zeroed finding for (group, cls), or NULL when one is already there (one per pair). */
tdm_cp_finding_t *tdm_cp_findings_add(tdm_cp_findings_t *out, tdm_cp_alert_class_t cls,
                                      const char *group);
const tdm_cp_finding_t *tdm_cp_findings_get(const tdm_cp_findings_t *f, const char *group,
                                            tdm_cp_alert_class_t cls);

typedef struct tdm_cp_detect_stats {
    uint64_t ticks, events, events_ignored, events_malformed;
    uint64_t rooms_dropped, aborts_dropped;
} tdm_cp_detect_stats_t;

typedef struct tdm_cp_detect tdm_cp_detect_t;

/* cfg NULL: defaults. TDM_ERR_INVAL when a threshold is zero. */
tdm_status_t tdm_cp_detect_init(const tdm_cp_detect_cfg_t *cfg, tdm_cp_detect_t **ret);
void tdm_cp_detect_free(tdm_cp_detect_t *d);

/* Feed one telemetry event of ring rank `rk` (its group, instance_id and rank name the origin),
 * received at `now_us`. Call for events of batches pushed to the ring (not for replays). */
void tdm_cp_detect_event(tdm_cp_detect_t *d, const tdm_cp_rank_t *rk, const tdm_tm_event_t *e,
                         uint64_t now_us);

/* A stop the supervisor asked for: every rank of the group's incarnations seen so far counts as
 * retired (as after its `shutdown` event), so the silence rule does not take the stop for a loss
 * when the event is late (held behind unacknowledged batches). Returns how many ranks. */
size_t tdm_cp_detect_retire_group(tdm_cp_detect_t *d, const char *group);

/* The 100 ms tick: returns 0 without doing anything when less than tick_us passed since the last
 * evaluation; else clears `out`, evaluates every rule at `now_us` and returns 1. */
int tdm_cp_detect_tick(tdm_cp_detect_t *d, const tdm_cp_rings_t *rings, uint64_t now_us,
                       tdm_cp_findings_t *out);
/* Evaluate now, regardless of the period. */
void tdm_cp_detect_eval(tdm_cp_detect_t *d, const tdm_cp_rings_t *rings, uint64_t now_us,
                        tdm_cp_findings_t *out);

const tdm_cp_detect_stats_t *tdm_cp_detect_stats(const tdm_cp_detect_t *d);

#endif
