/*
 * controlplane/detect/alert.h — the alert store: lifecycle, per-class policy, remediation requests,
 * and the `--alert-webhook` poster.
 *
 * Lifecycle (docs/design.md §4). Each detector tick hands its findings to tdm_cp_alerts_apply(). A
 * finding for (group, class) with no open alert opens one, with the finding's summary and
 * evidence (deduplication: at most one open alert per (group, class); while open, its evidence is
 * refreshed to the latest). An open alert whose rule has been false for `resolve_after_us`
 * (10 s) resolves with resolved_by "auto". tdm_cp_alerts_resolve() resolves by hand (resolved_by
 * = a token name, or "action:<id>" for the action executor) and mutes (group, class) until its
 * rule has been false once, so an operator's resolve is not undone by the next tick.
 *
 * Policy. Per class, `notify` (default) or `auto`. Every alert carries the remediation
 * docs/design.md §4 prescribes for its class as data ("remedy": {"action","params"}; null when
 * there is none); under `auto` the same request is also queued for the action executor
 * (tdm_cp_alerts_take_remedy). WEDGE, RANK_DIVERGENCE → restart the group with overlap off;
 * TRANSFER_STALL → fail the stuck rooms on both sides and restart the stuck peer; CORRUPTION on
 * the host-tier path → restart with HiCache off; WORKER_LOST → restart the group.
 *
 * Hooks (persistence, webhook) are called on the owner's thread on open and on resolve, after the
 * store is updated; they must not block (the webhook only queues).
 *
 * Times: `mono_us` is the detectors' clock (injectable), `wall_us` µs since the epoch for the
 * records. Threading: single owner (tandemd's loop); the webhook has a thread of its own.
 */
#ifndef TDM_CP_ALERT_H
#define TDM_CP_ALERT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/status.h>

#include "controlplane/detect/detect.h"

typedef enum tdm_cp_policy {
    TDM_CP_POLICY_NOTIFY = 0,
    TDM_CP_POLICY_AUTO,
    TDM_CP_POLICY_MAX
} tdm_cp_policy_t;

const char *tdm_cp_policy_name(tdm_cp_policy_t p);
/* "WEDGE=auto,WORKER_LOST=auto" (or "all=auto") → policies[]; TDM_ERR_INVAL naming the bad item
 * in err. Classes not named keep their value. */
tdm_status_t tdm_cp_policy_parse(const char *spec, tdm_cp_policy_t policies[TDM_CP_ALERT_MAX],
                                 char *err, size_t err_len);

typedef enum tdm_cp_alert_state {
    TDM_CP_ALERT_OPEN = 0,
    TDM_CP_ALERT_RESOLVED
} tdm_cp_alert_state_t;

#define TDM_CP_RESOLVED_BY_MAX 72

typedef struct tdm_cp_alert {
    uint64_t id; /* this store's id, from 1 */
    tdm_cp_alert_class_t cls;
    char group[TDM_CP_NAME_MAX];
    tdm_cp_alert_state_t state;
    char summary[256];
    json_t *evidence; /* object */
    json_t *remedy;   /* {"action","params"} or NULL */
    tdm_cp_policy_t policy;
    uint64_t opened_us, resolved_us; /* wall */
    uint64_t opened_mono, last_true_mono;
    char resolved_by[TDM_CP_RESOLVED_BY_MAX];
} tdm_cp_alert_t;

/* {"id","kind","group","state","summary","evidence","policy","remedy","opened_us","resolved_us",
 *  "resolved_by"} — the alerts table's columns plus policy and remedy. New reference. */
json_t *tdm_cp_alert_to_json(const tdm_cp_alert_t *a);

typedef enum tdm_cp_alert_event {
    TDM_CP_ALERT_EV_OPEN = 0,
    TDM_CP_ALERT_EV_RESOLVE
} tdm_cp_alert_event_t;
typedef void (*tdm_cp_alert_hook_fn)(void *ctx, const tdm_cp_alert_t *a, tdm_cp_alert_event_t ev);

/* A remediation request for the action executor (data only; nothing here acts on it). */
typedef struct tdm_cp_remedy {
    uint64_t alert_id;
    tdm_cp_alert_class_t cls;
    char group[TDM_CP_NAME_MAX];
    json_t *request; /* {"alert_id","group","kind","action","params"}; owned by the taker */
} tdm_cp_remedy_t;

typedef struct tdm_cp_alerts_cfg {
    uint64_t resolve_after_us; /* 10 s */
    size_t keep_resolved;      /* resolved alerts kept in memory for the API; 256 */
    size_t max_remedies;       /* queued requests; 64 (oldest dropped) */
    tdm_cp_policy_t policy[TDM_CP_ALERT_MAX];
} tdm_cp_alerts_cfg_t;

void tdm_cp_alerts_cfg_default(tdm_cp_alerts_cfg_t *ret);

typedef struct tdm_cp_alerts tdm_cp_alerts_t;

tdm_status_t tdm_cp_alerts_init(const tdm_cp_alerts_cfg_t *cfg, tdm_cp_alerts_t **ret);
void tdm_cp_alerts_free(tdm_cp_alerts_t *s);
/* At most 4 hooks. */
tdm_status_t tdm_cp_alerts_hook(tdm_cp_alerts_t *s, tdm_cp_alert_hook_fn fn, void *ctx);

/* Apply one tick's findings. Returns how many alerts opened + resolved. */
size_t tdm_cp_alerts_apply(tdm_cp_alerts_t *s, const tdm_cp_findings_t *f, uint64_t mono_us,
                           uint64_t wall_us);
/* Resolve by hand. TDM_ERR_NOTFOUND (no such id), TDM_ERR_STATE (already resolved),
 * TDM_ERR_INVAL (by empty or too long). */
tdm_status_t tdm_cp_alerts_resolve(tdm_cp_alerts_t *s, uint64_t id, const char *by,
                                   uint64_t wall_us);

/* Lookups: the open alert of (group, class), or NULL; any alert by id (open or kept). */
const tdm_cp_alert_t *tdm_cp_alerts_open_get(const tdm_cp_alerts_t *s, const char *group,
                                             tdm_cp_alert_class_t cls);
const tdm_cp_alert_t *tdm_cp_alerts_get(const tdm_cp_alerts_t *s, uint64_t id);
size_t tdm_cp_alerts_open_count(const tdm_cp_alerts_t *s);
int tdm_cp_alerts_group_open(const tdm_cp_alerts_t *s, const char *group);

/* {"alerts":[...]} newest first; state NULL = all, "open" or "resolved"; group NULL = all. */
json_t *tdm_cp_alerts_to_json(const tdm_cp_alerts_t *s, const char *state, const char *group);

/* Take the oldest queued remediation request: 1 and *ret filled (caller owns ret->request), or 0.
 */
int tdm_cp_alerts_take_remedy(tdm_cp_alerts_t *s, tdm_cp_remedy_t *ret);

/* Ring upkeep: persist every sample (no 10 Hz thinning) of ranks whose group has an open alert. */
void tdm_cp_alerts_mark_persist(const tdm_cp_alerts_t *s, tdm_cp_rings_t *rings);

/* ---- persistence (detect_persist.c) ----------------------------------------------------------
 * Alert hook with a tdm_cp_db_t * as ctx: INSERT into `alerts` on open, UPDATE on resolve, through
 * the query thread (never blocks). persist_start resolves alerts a previous run left open
 * (resolved_by "tandemd-restart"); call it once before the first tick. */
void tdm_cp_alert_persist_hook(void *ctx, const tdm_cp_alert_t *a, tdm_cp_alert_event_t ev);
void tdm_cp_alert_persist_start(void *ctx, uint64_t wall_us);

/* ---- webhook (detect_webhook.c) -------------------------------------------------------------
 * POSTs {"event":"open"|"resolve","alert":{...}} as JSON to `url` from a thread of its own, so the
 * caller never blocks: posts queue (bounded; when full the oldest is dropped and counted), each
 * is tried once with a timeout. Use tdm_cp_webhook_hook as an alert hook with the webhook as ctx.
 */
typedef struct tdm_cp_webhook tdm_cp_webhook_t;

typedef struct tdm_cp_webhook_stats {
    uint64_t queued, sent, failed, dropped;
} tdm_cp_webhook_stats_t;

tdm_status_t tdm_cp_webhook_start(const char *url, size_t queue_cap, long timeout_ms,
                                  tdm_cp_webhook_t **ret, char *err, size_t err_len);
/* Waits for the post in progress (at most its timeout), drops what is still queued. */
void tdm_cp_webhook_stop(tdm_cp_webhook_t *w);
/* Never blocks on the network; copies `body`. */
void tdm_cp_webhook_post(tdm_cp_webhook_t *w, const char *body);
void tdm_cp_webhook_hook(void *ctx, const tdm_cp_alert_t *a, tdm_cp_alert_event_t ev);
void tdm_cp_webhook_stats(tdm_cp_webhook_t *w, tdm_cp_webhook_stats_t *ret);

#endif
