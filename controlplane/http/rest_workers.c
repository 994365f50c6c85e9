/*
 * rest_workers.c — POST /api/v1/workers/register and /heartbeat: the workers table and its group.
 */
#include "config.h"

#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/http/rest.h"

/* ---- workers -------------------------------------------------------------------------------- */

static const char sql_register[] =
    "WITH g AS (INSERT INTO groups (name, mode, model, tp_size, created_us, updated_us) "
    "  VALUES ($1, $2, $3, $4::integer, $11::bigint, $11::bigint) ON CONFLICT (name) DO UPDATE "
    "  SET mode = EXCLUDED.mode, model = EXCLUDED.model, tp_size = EXCLUDED.tp_size, "
    "  updated_us = EXCLUDED.updated_us RETURNING name) "
    "INSERT INTO workers (instance_id, rank, group_name, worker, admin_url, host, pid, "
    "  registered_us, last_seen_us) "
    "SELECT $5, $6::integer, g.name, $7, $8, $9, $10::integer, $11::bigint, $11::bigint FROM g "
    "ON CONFLICT (instance_id, rank) DO UPDATE SET group_name = EXCLUDED.group_name, "
    "  worker = EXCLUDED.worker, admin_url = EXCLUDED.admin_url, host = EXCLUDED.host, "
    "  pid = EXCLUDED.pid, registered_us = EXCLUDED.registered_us, "
    "  last_seen_us = EXCLUDED.last_seen_us "
    "RETURNING json_build_object('instance_id', instance_id, 'rank', rank, 'group', group_name, "
    "  'worker', worker, 'registered_us', registered_us)::text";

static void register_body(tdm_cp_server_t *s, h2o_req_t *req, json_t *o, const tdm_cp_token_t *who)
{
    const char *group, *mode, *model, *inst, *worker, *admin_url, *host;
    long long tp, rank, pid;
    if (tdm_cp_rest_field_str(req, o, "group", 1, TDM_CP_NAME_MAX - 1, &group) ||
        tdm_cp_rest_field_str(req, o, "role", 1, 16, &mode) ||
        tdm_cp_rest_field_str(req, o, "model", 0, 256, &model) ||
        tdm_cp_rest_field_str(req, o, "instance_id", 1, TDM_CP_NAME_MAX - 1, &inst) ||
        tdm_cp_rest_field_str(req, o, "worker", 1, TDM_CP_NAME_MAX - 1, &worker) ||
        tdm_cp_rest_field_str(req, o, "admin_url", 0, 512, &admin_url) ||
        tdm_cp_rest_field_str(req, o, "host", 0, 256, &host) ||
        tdm_cp_rest_field_int(req, o, "tp_size", 0, 1, 1024, &tp) ||
        tdm_cp_rest_field_int(req, o, "rank", 1, 0, 1023, &rank) ||
        tdm_cp_rest_field_int(req, o, "pid", 0, 0, INT32_MAX, &pid))
        return;
    if (strcmp(mode, "prefill") != 0 && strcmp(mode, "decode") != 0 && strcmp(mode, "null") != 0) {
        tdm_httpd_send_error(req, 400, "invalid_field", "invalid_request_error",
                             "\"role\" must be prefill, decode or null");
        return;
    }
    if (rank >= tp) {
        tdm_httpd_send_error(req, 400, "invalid_field", "invalid_request_error",
                             "\"rank\" %lld is not below tp_size %lld", rank, tp);
        return;
    }
    char pidv[24];
    snprintf(pidv, sizeof(pidv), "%lld", pid);
    if (s->act && rank == 0)
        tdm_cp_act_note_worker(s->act, group, mode, model, (int)tp, admin_url);
    tdm_cp_rest_query(s, req, who, sql_register, tdm_cp_job_reply_json, "sssusussssu", group, mode,
                      model ? model : "", (unsigned long long)tp, inst, (unsigned long long)rank,
                      worker, admin_url ? admin_url : "", host ? host : "",
                      json_object_get(o, "pid") ? pidv : NULL,
                      (unsigned long long)tdm_time_wall_us());
}
BODY_HANDLER(tdm_cp_h_register, register_body)

static const char sql_heartbeat[] =
    "UPDATE workers SET last_seen_us = $3::bigint WHERE instance_id = $1 AND rank = $2::integer "
    "RETURNING json_build_object('instance_id', instance_id, 'rank', rank, 'last_seen_us', "
    "  last_seen_us)::text";

static void heartbeat_body(tdm_cp_server_t *s, h2o_req_t *req, json_t *o, const tdm_cp_token_t *who)
{
    const char *inst;
    long long rank;
    if (tdm_cp_rest_field_str(req, o, "instance_id", 1, TDM_CP_NAME_MAX - 1, &inst) ||
        tdm_cp_rest_field_int(req, o, "rank", 1, 0, 1023, &rank))
        return;
    tdm_cp_rest_query(s, req, who, sql_heartbeat, tdm_cp_job_reply_json, "suu", inst,
                      (unsigned long long)rank, (unsigned long long)tdm_time_wall_us());
}
BODY_HANDLER(tdm_cp_h_heartbeat, heartbeat_body)
