/*
 * controlplane/http/rest.h — what the REST handlers share: request helpers (JSON bodies, fields,
 * query strings, path captures), the database-query helpers (a parameter spec per query), the
 * audit of failed actions, and every handler the route table (routes.c) names.
 *
 * Reads of database state build their JSON inside PostgreSQL (json_agg) so the database thread only
 * moves one text value; ids and hashes are rendered as 16-digit lowercase hex there (REST_HEX).
 * Every plain read is readonly: the read pool runs it and it leaves the write generation alone.
 * All database handlers go through tdm_cp_rest_query()/tdm_cp_rest_query_job(). Operator actions
 * (token create/revoke) write their audit row in the same statement as the change; a failed action
 * gets its own audit row with outcome "failed". Everything runs on the loop thread.
 */
#ifndef TDM_CP_REST_H
#define TDM_CP_REST_H

#include <jansson.h>

#include "controlplane/http/cp_server.h"

#define HEX(col) "lpad(to_hex(" col "), 16, '0')"

/* The handlers of POST bodies: `fn` gets the parsed object (a 400 was sent when the body is not
 * one) and owns nothing; the object is released after it. */
typedef void (*tdm_cp_body_fn)(tdm_cp_server_t *s, h2o_req_t *req, json_t *o,
                               const tdm_cp_token_t *who);

#define BODY_HANDLER(name, fn)                                                                     \
    void name(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,                          \
              const tdm_cp_token_t *who)                                                           \
    {                                                                                              \
        (void)a;                                                                                   \
        tdm_cp_rest_with_body(s, req, who, fn);                                                    \
    }

/* A handler that only runs `sql` (no parameters) and answers with its JSON. */
#define QUERY_HANDLER(name, sql)                                                                   \
    void name(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,                          \
              const tdm_cp_token_t *who)                                                           \
    {                                                                                              \
        (void)a;                                                                                   \
        tdm_cp_rest_query(s, req, who, sql, tdm_cp_job_reply_json, "r");                           \
    }

json_t *tdm_cp_rest_body_object(h2o_req_t *req);
void tdm_cp_rest_with_body(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who,
                           tdm_cp_body_fn fn);
int tdm_cp_rest_field_str(h2o_req_t *req, json_t *o, const char *key, int required, size_t max,
                          const char **out);
int tdm_cp_rest_field_int(h2o_req_t *req, json_t *o, const char *key, int required, long long min,
                          long long max, long long *out);
int tdm_cp_rest_query_uint(h2o_req_t *req, const char *key, unsigned long long max,
                           unsigned long long def, unsigned long long *out);
tdm_cp_job_t *tdm_cp_rest_query_job(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who,
                                    const char *sql, tdm_cp_job_done_fn done, const char *spec,
                                    ...);
void tdm_cp_rest_query(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who,
                       const char *sql, tdm_cp_job_done_fn done, const char *spec, ...);
/* A bigint parameter, rendered in decimal. */
void tdm_cp_rest_param_u64(tdm_cp_job_t *job, unsigned long long v);
int tdm_cp_rest_path_arg(h2o_req_t *req, const tdm_cp_args_t *a, int i, char *buf, size_t len,
                         const char *what);
int tdm_cp_rest_name_ok(const char *s, size_t max);
void tdm_cp_rest_audit_free(tdm_cp_job_t *job);
void tdm_cp_rest_audit_failure(tdm_cp_server_t *s, const char *actor, const char *action,
                               const char *target, const char *detail);

void tdm_cp_rest_send_obj(h2o_req_t *req, int status, json_t *o);

/* The handlers (routes.c). */
#define TDM_CP_HANDLER(name)                                                                       \
    void name(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a, const tdm_cp_token_t *who)
TDM_CP_HANDLER(tdm_cp_h_health);
TDM_CP_HANDLER(tdm_cp_h_metrics);
TDM_CP_HANDLER(tdm_cp_h_register);
TDM_CP_HANDLER(tdm_cp_h_heartbeat);
TDM_CP_HANDLER(tdm_cp_h_ranks);
TDM_CP_HANDLER(tdm_cp_h_rank_history);
TDM_CP_HANDLER(tdm_cp_h_room_events);
TDM_CP_HANDLER(tdm_cp_h_transfers);
TDM_CP_HANDLER(tdm_cp_h_alerts);
TDM_CP_HANDLER(tdm_cp_h_actions);
TDM_CP_HANDLER(tdm_cp_h_config);
TDM_CP_HANDLER(tdm_cp_h_groups);
TDM_CP_HANDLER(tdm_cp_h_tokens_revoke);
TDM_CP_HANDLER(tdm_cp_h_tokens_list);
TDM_CP_HANDLER(tdm_cp_h_tokens_create);
TDM_CP_HANDLER(tdm_cp_h_drain);
TDM_CP_HANDLER(tdm_cp_h_resume);
TDM_CP_HANDLER(tdm_cp_h_restart);
TDM_CP_HANDLER(tdm_cp_h_reconfigure);
TDM_CP_HANDLER(tdm_cp_h_fault);
TDM_CP_HANDLER(tdm_cp_h_status);
TDM_CP_HANDLER(tdm_cp_h_v1_proxy);
TDM_CP_HANDLER(tdm_cp_h_v1_models);

#endif
