/*
 * controlplane/act/act_int.h — internals of the actions subsystem shared by act_*.c (see act.h).
 */
#ifndef TDM_CP_ACT_INT_H
#define TDM_CP_ACT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include <h2o.h>
#include <h2o/multithread.h>

#include "controlplane/act/act.h"

typedef enum act_kind {
    ACT_KIND_SUPERVISED = 0,
    ACT_KIND_UNIT,
    ACT_KIND_EXTERNAL,
    ACT_KIND_REGISTERED, /* not in --groups-config: learned from its registration */
    ACT_KIND_MAX
} act_kind_t;

/* What the group is doing; "running" groups are routable once /ready says so. */
typedef enum act_state {
    ACT_ST_STOPPED = 0,
    ACT_ST_STARTING,
    ACT_ST_RUNNING,
    ACT_ST_DRAINING,
    ACT_ST_DRAINED,
    ACT_ST_RESTARTING,
    ACT_ST_FAILED,
    ACT_ST_MAX
} act_state_t;

typedef struct act_group {
    char name[TDM_CP_ACT_NAME_MAX];
    act_kind_t kind;
    char unit[256], bus_host[256], pair[TDM_CP_ACT_NAME_MAX];
    char token[256]; /* worker admin token */
    char mode[16];   /* null | prefill | decode */
    char model[512]; /* served model name (from the config, then /v1/models) */
    json_t *base;    /* worker tunables of the section (supervised) */
    json_t *config;  /* current merged override config (object) */
    uint64_t config_version;
    /* the process (supervised) */
    pid_t pid;
    unsigned long long starttime;
    int child; /* our child (waitpid) or adopted */
    uint64_t started_us;
    char admin_url[256];
    char host[128];
    uint16_t port;
    int listen_port; /* supervised: the stable --port of every start (docs/groups.md); 0 = any */
    int port_set;    /* `port` was in the section */
    /* supervised groups on another "host" (docs/groups.md "Network namespaces") */
    char netns[64];    /* start the launcher in /var/run/netns/NETNS ("" = tandemd's own) */
    char cp_host[128]; /* the address the worker reaches tandemd at ("" = 127.0.0.1) */
    char env[1024];    /* NAME=VALUE ... added to the launcher's environment */
    /* state */
    act_state_t state;
    int ready;           /* last /ready probe said 200 */
    char why[512];       /* the last /ready probe's reason when not ready */
    int tp_size;         /* from the config's tp_size, else the registration */
    int busy;            /* an action holds the group: exits are not WORKER_LOST */
    atomic_int inflight; /* router requests sent and not finished */
    /* failed starts of a supervised group (docs/groups.md "Failed starts"): retried with a
     * backoff of 1 s doubling up to --start-backoff-max, at most --start-retries times in a row;
     * an incarnation that exits (or is remedied) less than --stable-window after it became /ready
     * counts as one too (a crash loop), its first restart at once */
    unsigned start_failures; /* failures in a row; 0 once ready for --stable-window */
    uint64_t ready_mono;     /* when this incarnation became /ready (0: not since its start) */
    double fail_ready_s;     /* the last failure: seconds ready before it crashed; < 0: a start */
    uint64_t retry_at_mono;  /* the supervisor's next start (0: none scheduled) */
    uint64_t retry_at_us;    /* the same on the wall clock (the API's next_us) */
    int gave_up;             /* more than --start-retries in a row: no retry until an operator's */
    char last_error[512];    /* the last failure's reason */
    /* canary */
    char canary_ref[512];
    uint64_t canary_ref_started_us; /* incarnation the reference belongs to */
    char canary_last[512];
    uint64_t canary_checks, canary_mismatches;
} act_group_t;

/* Messages from the threads to the loop. */
typedef enum act_msg_kind {
    ACT_MSG_DONE = 0, /* an action finished: result */
    ACT_MSG_EVENT,    /* feed the detectors: group, type, reason, data */
    ACT_MSG_MAX
} act_msg_kind_t;

typedef struct act_msg {
    h2o_multithread_message_t super; /* first */
    act_msg_kind_t kind;
    json_t *payload;
    tdm_cp_act_done_fn done;
    void *ctx;
    uint64_t alert_id;
} act_msg_t;

typedef struct act_req {
    struct act_req *next;
    char actor[72];
    json_t *request;
    tdm_cp_act_done_fn done;
    void *ctx;
    uint64_t created_us;
} act_req_t;

struct tdm_cp_act {
    tdm_cp_act_env_t env; /* the rest of tandemd (act.h) */
    tdm_cp_act_opts_t o;
    char state_dir[4096], worker_bin[1024], pg_dsn[2048], admin_token[128];
    int tandemd_port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    act_group_t groups[TDM_CP_ACT_GROUP_MAX];
    size_t n_groups;
    act_req_t *q_head, *q_tail; /* executor queue */
    act_req_t *current;         /* being executed */
    int stop;
    pthread_t exec_th, watch_th;
    int threads;
    h2o_multithread_receiver_t rx;
    h2o_multithread_queue_t *mq;
    uint64_t last_reap_mono;
};

/* act.c: the actor ("policy:KIND") of a policy action on `group` running or queued now, or NULL:
 * a further remedy for the group is then skipped (one remedy per group at a time). Caller holds
 * mu. */
const char *tdm_act_remedy_in_progress(const tdm_cp_act_t *a, const char *group);

/* act_shared.c — shared by the threads and the loop side; calls no other file of act/ */
act_group_t *tdm_act_group_find(tdm_cp_act_t *a, const char *name); /* caller holds mu */
/* Appends request (its reference taken) to the executor queue and wakes the executor; the caller
 * holds a->mu, or the executor does not run yet (controlplane/act/act_super.c: the API and the
 * supervisor both queue). */
void tdm_act_queue_push(tdm_cp_act_t *a, const char *actor, json_t *request,
                        tdm_cp_act_done_fn done, void *ctx);
void tdm_act_post(tdm_cp_act_t *a, act_msg_kind_t kind, json_t *payload, tdm_cp_act_done_fn done,
                  void *ctx);
/* Sleep up to ms, returning early (1) when stopping. */
int tdm_act_sleep(tdm_cp_act_t *a, unsigned ms);

/* act_super.c — supervisor (the mutex is NOT held by the caller) */
tdm_status_t tdm_act_super_load(tdm_cp_act_t *a, char *err, size_t err_len);
tdm_status_t tdm_act_super_start(tdm_cp_act_t *a, act_group_t *g, char *detail, size_t len);
tdm_status_t tdm_act_super_stop(tdm_cp_act_t *a, act_group_t *g, char *detail, size_t len);
/* Loop tick: unplanned exits → worker_lost event + supervisor restart request; a failed start's
 * retry once its backoff has passed → supervisor restart request. */
void tdm_act_super_reap(tdm_cp_act_t *a);
/* An operator's start, restart or reconfigure of g: its failed starts are forgotten (a group the
 * supervisor gave up on is retried again from the first backoff). Caller holds mu. */
void tdm_act_super_reset_failures(act_group_t *g);
/* A remedy's (actor policy:…) restart or reconfigure of g: 1 to go ahead; 0 when the failures'
 * backoff holds it (a retry is scheduled, the supervisor gave up, or this WORKER_LOST remedy of an
 * incarnation ready less than --stable-window is a failure that must wait), detail saying why.
 * Caller holds mu. */
int tdm_act_super_remedy_gate(tdm_cp_act_t *a, act_group_t *g, const char *actor, char *detail,
                              size_t len);
tdm_status_t tdm_act_write_file(const char *path, const char *text, char *err, size_t err_len);

/* act_http.c — blocking HTTP to workers (executor/watcher threads) */
long tdm_act_http(const char *method, const char *url, const char *token, const char *body,
                  long timeout_ms, char **ret_body);
/* Value of an unlabelled metric in Prometheus text; -1 when absent. */
double tdm_act_metric(const char *text, const char *name);
/* Wait until GET url/ready is 200 (1) or the timeout/stop (0). */
int tdm_act_wait_ready(tdm_cp_act_t *a, const char *admin_url, double timeout_s);

/* act_watch.c: host and port of the group's admin_url into host/port (caller holds mu) */
void tdm_act_url_hostport(act_group_t *g);
/* act.c: "ok", the last /ready reason, or the state when not running (caller holds mu) */
const char *tdm_act_health(const act_group_t *g);

/* act_fault.c — the fault route (docs/contracts.md §e). tdm_act_fault_check: at submission, the
 * params are a fault (the signal point fully checked: it needs a supervised group).
 * tdm_act_do_fault: on the executor, forward to the worker's /admin/faults or send the signal;
 * *wstatus is the HTTP status the reply should carry (the worker's, or 409/502), 0 for the default.
 */
tdm_status_t tdm_act_fault_check(const json_t *params, int supervised, char *err, size_t err_len);
tdm_status_t tdm_act_do_fault(tdm_cp_act_t *a, act_group_t *g, const json_t *params, long *wstatus,
                              char *detail, size_t len);

/* act_exec.c */
void *tdm_act_exec_main(void *arg);
/* act_watch.c */
void *tdm_act_watch_main(void *arg);

#endif
