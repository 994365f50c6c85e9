/*
 * report_hooks.c — the reporter inside tandem-worker (hooks.h): one reporter per rank, and the
 * launcher's worker_lost event. Identity and policy are in dataplane/report/report.h: instance_id
 * = the group id (shared by the ranks, 64 random bits new on every launch, never the PID:
 * docs/contracts.md §c), worker = --group or "<mode>-<port>", group = the same, role = the mode.
 * On an abnormal rank exit the launcher POSTs a `worker_lost` event for (instance, rank) at once
 * (data {"rank","pid","code","signal","stopping"}, and "error" when the group failed to start),
 * with a seq from the wall clock so it sorts after anything the dead rank sent, and waits up to
 * 1 s for the ack (spooled if tandemd is away).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <tdm/config.h>
#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/report/report.h"
#include "dataplane/worker/hooks.h"

struct tdm_worker_telemetry {
    tdm_report_t *rank_reporter; /* the rank's (NULL: not started) */
    /* the statistics source (set_stats); the lock keeps a call from overlapping the source's
     * teardown */
    pthread_mutex_t mu;
    tdm_worker_stats_fn stats_fn;
    void *stats_ctx;
    /* the launcher's group (group_created) */
    const tdm_worker_config_t *cfg;
    uint64_t group_id;
    char token[520]; /* --control-plane-token-file's first line */
};

tdm_worker_telemetry_t *tdm_worker_telemetry_new(void)
{
    tdm_worker_telemetry_t *t = tdm_calloc(1, sizeof(*t));
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

void tdm_worker_telemetry_free(tdm_worker_telemetry_t *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    tdm_free(t);
}

static void set_stats(void *ctx, tdm_worker_stats_fn fn, void *fn_ctx)
{
    tdm_worker_telemetry_t *t = ctx;
    pthread_mutex_lock(&t->mu);
    t->stats_fn = fn;
    t->stats_ctx = fn_ctx;
    pthread_mutex_unlock(&t->mu);
}

static void rank_stats(void *ctx, tdm_tm_sample_t *s)
{
    tdm_worker_telemetry_t *t = ctx;
    pthread_mutex_lock(&t->mu);
    if (t->stats_fn)
        t->stats_fn(t->stats_ctx, s);
    pthread_mutex_unlock(&t->mu);
}

static void identity(const tdm_worker_config_t *cfg, char *name, size_t len)
{
    if (cfg->group && *cfg->group)
        snprintf(name, len, "%.64s", cfg->group);
    else
        snprintf(name, len, "%.16s-%d", cfg->disaggregation_mode, tdm_worker_config_http_port(cfg));
}

/* The token file is read once per reporter start; a missing or unreadable file is logged and
 * telemetry goes without a token (tandemd then answers 401 and the spool keeps the batches). */
static void load_token(tdm_worker_telemetry_t *t, const tdm_worker_config_t *cfg)
{
    t->token[0] = '\0';
    if (!cfg->control_plane_token_file || !cfg->control_plane_token_file[0])
        return;
    FILE *f = fopen(cfg->control_plane_token_file, "r");
    if (!f) {
        tdm_warn(TDM_SUB_REPORT, "msg=\"cannot read the control-plane token file\" path=%s",
                 cfg->control_plane_token_file);
        return;
    }
    if (!fgets(t->token, sizeof(t->token), f))
        t->token[0] = '\0';
    fclose(f);
    t->token[strcspn(t->token, " \t\r\n")] = '\0';
}

static void fill_opts(tdm_worker_telemetry_t *t, tdm_report_opts_t *o,
                      const tdm_worker_config_t *cfg, char *name)
{
    memset(o, 0, sizeof(*o));
    load_token(t, cfg);
    o->token = t->token;
    o->control_plane = cfg->control_plane;
    o->spool_dir = cfg->spool_dir;
    o->worker = name;
    o->group = name;
    o->role = cfg->disaggregation_mode;
}

static tdm_status_t rank_start(void *ctx, tdm_worker_t *w)
{
    tdm_worker_telemetry_t *t = ctx;
    const tdm_worker_config_t *cfg = tdm_worker_config(w);
    char name[80], err[512];
    if (!cfg->control_plane || !*cfg->control_plane || t->rank_reporter)
        return TDM_OK;
    identity(cfg, name, sizeof(name));
    tdm_report_opts_t o;
    fill_opts(t, &o, cfg, name);
    o.instance_id = tdm_worker_group_id(w);
    o.rank = tdm_worker_rank(w);
    o.page = tdm_worker_progress(w);
    o.stats = rank_stats;
    o.stats_ctx = t;
    tdm_status_t st = tdm_report_start(&o, &t->rank_reporter, err, sizeof(err));
    if (st != TDM_OK)
        tdm_err(TDM_SUB_REPORT, "msg=\"cannot start the reporter\" err=\"%s\"", err);
    return st;
}

static void rank_stop(void *ctx, tdm_worker_t *w, int clean)
{
    tdm_worker_telemetry_t *t = ctx;
    (void)w;
    if (clean && t->rank_reporter &&
        tdm_report_event(t->rank_reporter, "shutdown", NULL, NULL, NULL, NULL, NULL) != TDM_OK)
        tdm_warn(TDM_SUB_REPORT, "msg=\"cannot enqueue the shutdown event\"");
    tdm_report_stop(t->rank_reporter, 1000);
    t->rank_reporter = NULL;
}

static tdm_status_t post_event(void *ctx, const char *type, const uint64_t *room, const char *from,
                               const char *to, const char *reason, json_t *data)
{
    tdm_worker_telemetry_t *t = ctx;
    if (!t->rank_reporter) {
        json_decref(data);
        return TDM_ERR_STATE;
    }
    return tdm_report_event(t->rank_reporter, type, room, from, to, reason, data);
}

static void group_created(void *ctx, const tdm_worker_config_t *cfg, uint64_t group_id)
{
    tdm_worker_telemetry_t *t = ctx;
    t->cfg = cfg;
    t->group_id = group_id;
}

/* worker_lost (docs/alerts.md): `stopping` true when the launcher had been asked to stop first,
 * so a detector that did not ask for the stop (tandemd restarted since, reading the batch from the
 * spool) does not take the stop's own abort for a loss; `start_error` ("rank R: why") when the
 * group failed to start, in the reason (cut at the telemetry limit) and whole in data `error`. */
static void rank_exit(void *ctx, uint32_t rank, int32_t pid, int code, int signal, int stopping,
                      const char *start_error)
{
    tdm_worker_telemetry_t *t = ctx;
    const tdm_worker_config_t *cfg = t->cfg;
    char name[80], err[512], reason[TDM_TM_REASON_MAX + 1], how[64];
    if (!cfg || !cfg->control_plane || !*cfg->control_plane)
        return;
    identity(cfg, name, sizeof(name));
    tdm_report_opts_t o;
    fill_opts(t, &o, cfg, name);
    o.instance_id = t->group_id;
    o.rank = rank;
    o.first_seq = tdm_time_wall_us(); /* after every seq the dead rank used (1 per 200 ms) */
    tdm_report_t *r;
    if (tdm_report_start(&o, &r, err, sizeof(err)) != TDM_OK) {
        tdm_err(TDM_SUB_REPORT, "msg=\"cannot report worker_lost\" err=\"%s\"", err);
        return;
    }
    snprintf(how, sizeof(how), "%s %d", signal ? "signal" : "code", signal ? signal : code);
    if (start_error)
        snprintf(reason, sizeof(reason), "rank %u exited (%s): failed to start: %s", rank, how,
                 start_error);
    else
        snprintf(reason, sizeof(reason), "rank %u exited (%s)%s", rank, how,
                 stopping ? " while the group was stopping" : "");
    tdm_report_event(r, "worker_lost", NULL, NULL, NULL, reason,
                     json_pack("{s:i,s:i,s:i,s:i,s:b,s:s?}", "rank", (json_int_t)rank, "pid",
                               (json_int_t)pid, "code", (json_int_t)code, "signal",
                               (json_int_t)signal, "stopping", stopping, "error", start_error));
    tdm_report_stop(r, 1000);
}

void tdm_worker_telemetry_hooks(tdm_worker_telemetry_t *t, tdm_worker_hooks_t *hooks)
{
    hooks->report = (tdm_worker_report_hooks_t){.ctx = t,
                                                .rank_start = rank_start,
                                                .rank_stop = rank_stop,
                                                .event = post_event,
                                                .set_stats = set_stats};
    hooks->launch = (tdm_worker_launch_hooks_t){
        .ctx = t, .group_created = group_created, .rank_exit = rank_exit};
}
