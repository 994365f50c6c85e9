/*
 * detect_persist.c — alerts into the alerts table (sql/0001_init.sql) through the database's query
 * thread (db.h), as an alert-store hook: an INSERT when an alert opens, an UPDATE when it
 * resolves. Jobs wait for the database rather than fail (job->wait), and the query thread runs
 * them in order, so a resolve never overtakes its open. At start, alerts a previous tandemd left
 * open are resolved with resolved_by "tandemd-restart": the detectors start from an empty ring
 * and reopen what is still true.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "controlplane/detect/alert.h"
#include "controlplane/store/db.h"

/* the alert's own id (alert.c assigns it once), not the table's sequence: one id live and stored */
static const char sql_open[] =
    "INSERT INTO alerts (id, kind, group_name, state, summary, evidence, opened_us) "
    "VALUES ($6::bigint, $1, $2, 'open', $3, $4::jsonb, $5::bigint) ON CONFLICT (id) DO NOTHING";
static const char sql_resolve[] =
    "UPDATE alerts SET state = 'resolved', resolved_us = $4::bigint, resolved_by = $5, "
    "  evidence = $6::jsonb WHERE id = $7::bigint AND state = 'open' AND group_name = $1 "
    "  AND kind = $2 AND opened_us = $3::bigint";
static const char sql_orphans[] = "UPDATE alerts SET state = 'resolved', resolved_us = $1::bigint, "
                                  "  resolved_by = 'tandemd-restart' WHERE state = 'open'";

static void on_done(tdm_cp_job_t *job)
{
    if (job->st != TDM_OK && job->st != TDM_ERR_ABORTED)
        tdm_err(TDM_SUB_CP, "msg=\"persisting an alert failed\" err=\"%s\"", job->err);
    tdm_cp_job_free(job);
}

static void param_u64(tdm_cp_job_t *job, uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    tdm_cp_job_param(job, buf);
}

void tdm_cp_alert_persist_hook(void *ctx, const tdm_cp_alert_t *a, tdm_cp_alert_event_t ev)
{
    tdm_cp_db_t *db = ctx;
    char *evidence = json_dumps(a->evidence ? a->evidence : json_object(), JSON_COMPACT);
    tdm_cp_job_t *job =
        tdm_cp_job_new(ev == TDM_CP_ALERT_EV_OPEN ? sql_open : sql_resolve, on_done, NULL);
    job->wait = 1;
    if (ev == TDM_CP_ALERT_EV_OPEN) {
        tdm_cp_job_param(job, tdm_cp_alert_class_name(a->cls));
        tdm_cp_job_param(job, a->group);
        tdm_cp_job_param(job, a->summary);
        tdm_cp_job_param(job, evidence ? evidence : "{}");
        param_u64(job, a->opened_us);
        param_u64(job, a->id);
    } else {
        tdm_cp_job_param(job, a->group);
        tdm_cp_job_param(job, tdm_cp_alert_class_name(a->cls));
        param_u64(job, a->opened_us);
        param_u64(job, a->resolved_us);
        tdm_cp_job_param(job, a->resolved_by);
        tdm_cp_job_param(job, evidence ? evidence : "{}");
        param_u64(job, a->id);
    }
    free(evidence);
    tdm_cp_db_query(db, job);
}

void tdm_cp_alert_persist_start(void *ctx, uint64_t wall_us)
{
    tdm_cp_job_t *job = tdm_cp_job_new(sql_orphans, on_done, NULL);
    job->wait = 1;
    param_u64(job, wall_us);
    tdm_cp_db_query(ctx, job);
}
