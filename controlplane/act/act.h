/*
 * controlplane/act/act.h — operator actions (docs/design.md §5): the worker groups tandemd knows,
 * its supervisor, drain / restart / reconfigure, the audit log, the canary and the router's view.
 *
 * Groups come from `--groups-config FILE` (INI). Each `[group.NAME]` section is one worker group:
 *   - supervised (default): tandemd starts it. Keys other than tandemd's own (below) are worker
 *     tunables and are written, verbatim, to state_dir/groups/NAME/base.ini, passed as --config;
 *     reconfigure writes state_dir/groups/NAME/override.ini (--override-config, layered after it),
 *     so an override always wins over the base config. tandemd adds --group, --port 0,
 *     --ready-file, --control-plane and --admin-token-file on the command line.
 *   - `unit = tandem-worker@NAME.service`: systemd owns the process; restart is RestartUnit over
 *     sd-bus (`bus_host` = a remote host, as `systemctl -H`); `url` is the worker's HTTP base URL.
 *   - `url` alone: an external worker; drain and resume work, restart does not.
 *   A group that registers (POST /api/v1/workers/register) without a section is "registered":
 *   like an external one, at the admin_url it registered.
 * tandemd's own keys: unit, url, bus_host, pair (the peer group of a P/D pair: kv_cache_dtype is
 * applied to both), token_file (worker admin token; default state_dir/admin.token).
 *
 * Supervisor. A started group's launcher is recorded in state_dir/groups/NAME/record.json
 * ({group, pid, starttime, admin_url, started_us}; starttime is /proc/PID/stat field 22, so a
 * recycled pid is never mistaken for ours). A restarted tandemd re-adopts a recorded process that
 * is still the same one, else starts the group again. An exit nobody asked for is reported to the
 * detectors as a `worker_lost` event (WORKER_LOST at once) and the group is restarted, as
 * systemd's Restart= would (audit actor "supervisor").
 *
 * Actions run one at a time on the executor thread (blocking libcurl to workers, its own libpq
 * connection for the audit log), so nothing here ever blocks tandemd's loop. Every action is an
 * `actions` row: inserted `pending` when it starts (who, what, target, params, when), updated with
 * outcome ok|failed, detail and finished_us when it ends. Drain: the router stops choosing the
 * group, requests it already sent finish, POST /admin/drain, then /metrics until tandem_drained
 * (running requests done, transfers terminal). Restart: supervisor (SIGTERM, SIGKILL after
 * stop_timeout, start, wait for /ready) or RestartUnit. Reconfigure: a config version (overlap,
 * hicache, kv_cache_dtype, max_running_requests, timeouts) merged over the group's current one,
 * stored in config_versions, written as the override file, then drain → restart, one group at a
 * time; a kv_cache_dtype change covers the pair.
 *
 * Threading: tdm_cp_act_* entry points below are called on tandemd's loop thread unless noted;
 * the group table is shared with the executor and watcher threads under one mutex.
 */
#ifndef TDM_CP_ACT_H
#define TDM_CP_ACT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/status.h>

#define TDM_CP_ACT_GROUP_MAX 64 /* groups in one tandemd */
#define TDM_CP_ACT_NAME_MAX 64

/* ---- reconfigure: config versions and the override file (act_override.c, pure) ----------------
 * A config request is a JSON object with any of: "overlap" "on"|"off", "hicache" "on"|"off",
 * "kv_cache_dtype" "auto"|"bf16"|"fp8_e4m3", "max_running_requests" 0..65536,
 * "health_progress_timeout" 0.1..3600, "disaggregation_bootstrap_timeout" 0.1..86400. */

/* Check `req` and merge it over `base` (NULL = empty): a new object with every key, or
 * TDM_ERR_INVAL with the offending key in err (unknown key, wrong type, out of range, empty). */
tdm_status_t tdm_cp_act_config_merge(const json_t *base, const json_t *req, json_t **ret, char *err,
                                     size_t err_len);
/* The worker INI text for a merged config (keys before any section, sorted, worker tunable names:
 * overlap=off → disable_overlap_schedule = true). Caller frees. */
char *tdm_cp_act_config_ini(const json_t *cfg);

/* ---- systemd over sd-bus (act_sdbus.c) --------------------------------------------------------
 * `unit` must be a valid unit name ending in .service (TDM_ERR_INVAL otherwise). */
typedef struct tdm_cp_sdbus_call {
    const char *destination, *path, *interface, *member, *signature;
    char unit[256];
    const char *mode;
} tdm_cp_sdbus_call_t;

tdm_status_t tdm_cp_sdbus_restart_call(const char *unit, tdm_cp_sdbus_call_t *ret, char *err,
                                       size_t err_len);
/* Build the method call message on `bus` (an sd_bus *). */
tdm_status_t tdm_cp_sdbus_message(void *bus, const tdm_cp_sdbus_call_t *c, void **ret_msg,
                                  char *err, size_t err_len);
/* RestartUnit(unit, "replace") on the system bus of this host (host NULL/"") or of `host` over
 * ssh (sd_bus_open_system_remote). TDM_ERR_UNSUPPORTED when there is no system bus here. */
tdm_status_t tdm_cp_sdbus_restart_unit(const char *host, const char *unit, char *err,
                                       size_t err_len);

/* ---- the subsystem --------------------------------------------------------------------------- */

typedef struct tdm_cp_act tdm_cp_act_t;

/* What the actions read and touch of the rest of tandemd (all owned by its loop thread, which
 * also delivers the actions' messages through `mq`): the ring (events are attributed to a rank),
 * the detectors (a planned stop retires ranks; an event goes in), the alert store and the current
 * findings (an action resolves alerts; remedies are taken from it), and the database (the
 * executor waits for its schema). */
typedef struct tdm_cp_act_env {
    struct tdm_cp_rings *rings;
    struct tdm_cp_detect *detect;
    struct tdm_cp_alerts *alerts;
    struct tdm_cp_findings *findings;
    struct tdm_cp_db *db;
    struct st_h2o_multithread_queue_t *mq;
} tdm_cp_act_env_t;

typedef struct tdm_cp_act_opts {
    const char *groups_config; /* "" or NULL: no groups */
    const char *state_dir;
    const char *worker_bin;     /* "tandem-worker": $PATH lookup */
    const char *pg_dsn;         /* the executor's audit connection */
    const char *admin_token;    /* for workers' /admin (default token file is state_dir's) */
    int tandemd_port;           /* --control-plane http://127.0.0.1:PORT */
    double canary_interval_s;   /* 30; 0 = off */
    double start_timeout_s;     /* a started group must be /ready within this; 300 */
    double drain_timeout_s;     /* 300 */
    int start_retries;          /* failed starts retried in a row before the group stays failed */
    double start_backoff_max_s; /* the retries' backoff: 1 s, doubling up to this */
    double stable_window_s; /* ready this long: the failures are forgotten; an exit sooner counts */
} tdm_cp_act_opts_t;

/* Parse the groups config, adopt or queue the start of supervised groups, start the threads. */
tdm_status_t tdm_cp_act_init(const tdm_cp_act_env_t *env, const tdm_cp_act_opts_t *o,
                             tdm_cp_act_t **ret, char *err, size_t err_len);
/* Stop the threads (the action in progress is abandoned at its next step; every request not
 * finished gets its `done` with outcome "failed", delivered by the loop afterwards); supervised
 * workers keep running, to be re-adopted. Then run the loop a little, then free. NULL-safe. */
void tdm_cp_act_stop(tdm_cp_act_t *a);
void tdm_cp_act_free(tdm_cp_act_t *a);

/* Loop tick: reap exits, execute queued remediation requests, deliver thread messages. */
void tdm_cp_act_tick(tdm_cp_act_t *a, uint64_t mono_us);

/* An action request:
 * {"action":"drain"|"resume"|"restart"|"reconfigure","group","params"?,"alert_id"?}. `actor` is the
 * token name or "policy"/"supervisor". `done` (may be NULL) runs on the loop with the result
 * {"action_id","action","group","outcome","detail","started_us","finished_us"}. */
typedef void (*tdm_cp_act_done_fn)(void *ctx, json_t *result); /* called exactly once */
tdm_status_t tdm_cp_act_submit(tdm_cp_act_t *a, const char *actor, json_t *request,
                               tdm_cp_act_done_fn done, void *ctx, char *err, size_t err_len);

/* {"groups":[{name, kind, mode, model, tp_size, admin_url, pid, state, ready, health, inflight,
 *  started_us, config, config_version, canary}]} — new reference. health: "ok", the worker's
 *  /ready reason (a wedged rank, draining), or the state when not running. */
json_t *tdm_cp_act_status(tdm_cp_act_t *a);
int tdm_cp_act_group_exists(tdm_cp_act_t *a, const char *name);
/* A worker registered (POST /api/v1/workers/register): a group not in --groups-config becomes a
 * "registered" one (listed, probed, routed to, drained and resumed through its /admin API at
 * admin_url; never restarted or reconfigured by tandemd). */
void tdm_cp_act_note_worker(tdm_cp_act_t *a, const char *group, const char *role, const char *model,
                            int tp_size, const char *admin_url);

/* Router view: pick a ready group serving `model` (decode or colocated), least in flight first.
 * 1: host/port filled and the group's in-flight count raised (release with tdm_cp_act_release);
 * 0: the model is known but no group is ready; -1: no group serves the model. */
int tdm_cp_act_route(tdm_cp_act_t *a, const char *model, char *host, size_t host_len,
                     uint16_t *port, int *ret_slot);
void tdm_cp_act_release(tdm_cp_act_t *a, int slot);
/* {"object":"list","data":[{"id","object":"model","owned_by":"tandem"}]} of known models. */
json_t *tdm_cp_act_models(tdm_cp_act_t *a);

#endif
