/*
 * report_hooks.c — the reporter inside tandem-worker (dataplane/worker/worker.h): one reporter per
 * rank, and the launcher's worker_lost event. Identity and policy are in report.h. The hooks carry
 * no context, so the rank's reporter and the launcher's configuration live in file-static records
 * (one of each per process).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <tdm/config.h>
#include <tdm/log.h>
#include <tdm/time.h>

#include "dataplane/report/report.h"
#include "dataplane/worker/worker.h"

static tdm_report_t *rank_reporter;

/* The statistics source (tdm_report_rank_set_stats); the lock keeps a call from overlapping the
 * source's teardown. */
static struct {
    pthread_mutex_t mu;
    tdm_report_stats_fn fn;
    void *ctx;
} stats_src = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL};

void tdm_report_rank_set_stats(tdm_report_stats_fn fn, void *ctx)
{
    pthread_mutex_lock(&stats_src.mu);
    stats_src.fn = fn;
    stats_src.ctx = ctx;
    pthread_mutex_unlock(&stats_src.mu);
}

static void rank_stats(void *ctx, tdm_tm_sample_t *s)
{
    (void)ctx;
    pthread_mutex_lock(&stats_src.mu);
    if (stats_src.fn)
        stats_src.fn(stats_src.ctx, s);
    pthread_mutex_unlock(&stats_src.mu);
}

static struct {
    const tdm_worker_config_t *cfg;
    uint64_t group_id;
} launcher;

static void identity(const tdm_worker_config_t *cfg, char *name, size_t len)
{
    if (cfg->group && *cfg->group)
        snprintf(name, len, "%.64s", cfg->group);
    else
        snprintf(name, len, "%.16s-%d", cfg->disaggregation_mode, tdm_worker_config_http_port(cfg));
}

/* The token file is read once per reporter start; a missing or unreadable file is logged and
 * telemetry goes without a token (tandemd then answers 401 and the spool keeps the batches). */
static char cp_token[520];

static void load_token(const tdm_worker_config_t *cfg)
{
    cp_token[0] = '\0';
    if (!cfg->control_plane_token_file || !cfg->control_plane_token_file[0])
        return;
    FILE *f = fopen(cfg->control_plane_token_file, "r");
    if (!f) {
        tdm_warn(TDM_SUB_REPORT, "msg=\"cannot read the control-plane token file\" path=%s",
                 cfg->control_plane_token_file);
        return;
    }
    if (!fgets(cp_token, sizeof(cp_token), f))
        cp_token[0] = '\0';
    fclose(f);
    cp_token[strcspn(cp_token, " \t\r\n")] = '\0';
}

static void fill_opts(tdm_report_opts_t *o, const tdm_worker_config_t *cfg, char *name)
{
    memset(o, 0, sizeof(*o));
    load_token(cfg);
    o->token = cp_token;
    o->control_plane = cfg->control_plane;
    o->spool_dir = cfg->spool_dir;
    o->worker = name;
    o->group = name;
    o->role = cfg->disaggregation_mode;
}

tdm_status_t tdm_report_rank_start(tdm_worker_t *w)
{
    const tdm_worker_config_t *cfg = tdm_worker_config(w);
    char name[80], err[512];
    if (!cfg->control_plane || !*cfg->control_plane || rank_reporter)
        return TDM_OK;
    identity(cfg, name, sizeof(name));
    tdm_report_opts_t o;
    fill_opts(&o, cfg, name);
    o.instance_id = tdm_worker_group_id(w);
    o.rank = tdm_worker_rank(w);
    o.page = tdm_worker_progress(w);
    o.stats = rank_stats;
    tdm_status_t st = tdm_report_start(&o, &rank_reporter, err, sizeof(err));
    if (st != TDM_OK)
        tdm_err(TDM_SUB_REPORT, "msg=\"cannot start the reporter\" err=\"%s\"", err);
    return st;
}

tdm_report_t *tdm_report_rank_reporter(void)
{
    return rank_reporter;
}

void tdm_report_rank_stop(tdm_worker_t *w, int clean)
{
    (void)w;
    if (clean && rank_reporter &&
        tdm_report_event(rank_reporter, "shutdown", NULL, NULL, NULL, NULL, NULL) != TDM_OK)
        tdm_warn(TDM_SUB_REPORT, "msg=\"cannot enqueue the shutdown event\"");
    tdm_report_stop(rank_reporter, 1000);
    rank_reporter = NULL;
}

static void on_rank_exit(void *ctx, uint32_t rank, int32_t pid, int code, int signal)
{
    (void)ctx;
    const tdm_worker_config_t *cfg = launcher.cfg;
    char name[80], err[512], reason[128];
    identity(cfg, name, sizeof(name));
    tdm_report_opts_t o;
    fill_opts(&o, cfg, name);
    o.instance_id = launcher.group_id;
    o.rank = rank;
    o.first_seq = tdm_time_wall_us(); /* after every seq the dead rank used (1 per 200 ms) */
    tdm_report_t *r;
    if (tdm_report_start(&o, &r, err, sizeof(err)) != TDM_OK) {
        tdm_err(TDM_SUB_REPORT, "msg=\"cannot report worker_lost\" err=\"%s\"", err);
        return;
    }
    if (signal)
        snprintf(reason, sizeof(reason), "rank %u exited (signal %d)", rank, signal);
    else
        snprintf(reason, sizeof(reason), "rank %u exited (code %d)", rank, code);
    tdm_report_event(r, "worker_lost", NULL, NULL, NULL, reason,
                     json_pack("{s:i,s:i,s:i,s:i}", "rank", (json_int_t)rank, "pid",
                               (json_int_t)pid, "code", (json_int_t)code, "signal",
                               (json_int_t)signal));
    tdm_report_stop(r, 1000);
}

void tdm_report_launcher_install(const tdm_worker_config_t *cfg, uint64_t group_id)
{
    if (!cfg->control_plane || !*cfg->control_plane)
        return;
    launcher.cfg = cfg;
    launcher.group_id = group_id;
    tdm_worker_set_rank_exit_hook(on_rank_exit, NULL);
}
