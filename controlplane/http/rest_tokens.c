/*
 * rest_tokens.c — GET/POST/DELETE /api/v1/tokens: API tokens, each change audited in its own
 * statement.
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

/* ---- tokens --------------------------------------------------------------------------------- */

static const char sql_tokens_list[] =
    "SELECT json_build_object('tokens', coalesce(json_agg(json_build_object('name', name, "
    "  'role', role, 'created_us', created_us, 'revoked_us', revoked_us) ORDER BY id), "
    "'[]'))::text "
    "FROM api_tokens";

QUERY_HANDLER(tdm_cp_h_tokens_list, sql_tokens_list)

static const char sql_token_create[] =
    "WITH t AS (INSERT INTO api_tokens (name, role, token_hash, created_us) "
    "  VALUES ($1, $2, decode($3, 'hex'), $4::bigint) RETURNING name, role, created_us), "
    "a AS (INSERT INTO actions (ts_us, actor, action, target, params, outcome, finished_us) "
    "  SELECT $4::bigint, $5, 'token.create', t.name, jsonb_build_object('role', t.role), 'ok', "
    "  $4::bigint FROM t RETURNING 1) "
    "SELECT json_build_object('name', name, 'role', role, 'created_us', created_us)::text "
    "FROM t WHERE (SELECT count(*) FROM a) = 1";

static void on_token_created(tdm_cp_job_t *job)
{
    tdm_cp_pending_t *pd = job->ctx;
    tdm_cp_server_t *s = pd ? pd->srv : NULL;
    /* The cache must learn the token even if the client has gone: aux = "<token> <role>". */
    char *token = job->aux, *role = strchr(job->aux, ' ');
    *role++ = '\0';
    tdm_cp_role_t r = TDM_CP_ROLE_READ;
    tdm_cp_role_parse(role, &r);
    if (job->st == TDM_OK && job->result && s) {
        uint8_t h[32];
        tdm_cp_auth_sha256(token, strlen(token), h);
        tdm_cp_auth_put(&s->auth, job->params[0], r, h);
    } else if (s) {
        tdm_cp_rest_audit_failure(s, pd->actor, "token.create", job->params[0],
                                  job->sqlstate[0] ? job->sqlstate : job->err);
    }
    h2o_req_t *req = tdm_cp_job_req(job);
    if (!req)
        return;
    if (job->st == TDM_OK && job->result) {
        json_t *o = json_loads(job->result, 0, NULL);
        json_object_set_new(o, "token", json_string(token));
        char *text = json_dumps(o, JSON_COMPACT);
        tdm_httpd_send_json(req, 201, text, strlen(text));
        free(text);
        json_decref(o);
    } else if (strcmp(job->sqlstate, "23505") == 0) {
        tdm_httpd_send_error(req, 409, "conflict", "invalid_request_error",
                             "a token named '%s' already exists", job->params[0]);
    } else {
        tdm_cp_job_send_error(req, job);
    }
    tdm_cp_job_free(job);
}

static void tokens_create_body(tdm_cp_server_t *s, h2o_req_t *req, json_t *o,
                               const tdm_cp_token_t *who)
{
    const char *name, *role;
    tdm_cp_role_t r;
    if (tdm_cp_rest_field_str(req, o, "name", 1, TDM_CP_TOKEN_NAME_MAX - 1, &name) ||
        tdm_cp_rest_field_str(req, o, "role", 1, 16, &role))
        return;
    if (!tdm_cp_rest_name_ok(name, TDM_CP_TOKEN_NAME_MAX - 1) ||
        strcmp(name, TDM_CP_ADMIN_TOKEN_NAME) == 0) {
        tdm_httpd_send_error(req, 400, "invalid_field", "invalid_request_error",
                             "\"name\" must be 1-63 of [A-Za-z0-9._-] and not \"admin\"");
        return;
    }
    if (tdm_cp_role_parse(role, &r) != TDM_OK) {
        tdm_httpd_send_error(req, 400, "invalid_field", "invalid_request_error",
                             "\"role\" must be read or admin");
        return;
    }
    char token[TDM_CP_TOKEN_LEN + 1];
    if (tdm_cp_auth_token_new(token) != TDM_OK) {
        tdm_httpd_send_error(req, 500, "internal", "server_error", "no randomness available");
        return;
    }
    uint8_t h[32];
    char hex[65];
    tdm_cp_auth_sha256(token, TDM_CP_TOKEN_LEN, h);
    tdm_cp_auth_hex(h, 32, hex);
    tdm_cp_job_t *job = tdm_cp_rest_query_job(s, req, who, sql_token_create, on_token_created,
                                              "sssus", name, tdm_cp_role_name(r), hex,
                                              (unsigned long long)tdm_time_wall_us(), who->name);
    size_t alen = TDM_CP_TOKEN_LEN + 1 + strlen(tdm_cp_role_name(r)) + 1;
    job->aux = tdm_malloc(alen);
    snprintf(job->aux, alen, "%s %s", token, tdm_cp_role_name(r));
    tdm_cp_db_query(s->db, job);
}
BODY_HANDLER(tdm_cp_h_tokens_create, tokens_create_body)

static const char sql_token_revoke[] =
    "WITH t AS (UPDATE api_tokens SET revoked_us = $2::bigint "
    "  WHERE name = $1 AND revoked_us IS NULL RETURNING name), "
    "a AS (INSERT INTO actions (ts_us, actor, action, target, outcome, finished_us) "
    "  SELECT $2::bigint, $3, 'token.revoke', t.name, 'ok', $2::bigint FROM t RETURNING 1) "
    "SELECT json_build_object('name', name, 'revoked_us', $2::bigint)::text FROM t "
    "WHERE (SELECT count(*) FROM a) = 1";

static void on_token_revoked(tdm_cp_job_t *job)
{
    tdm_cp_pending_t *pd = job->ctx;
    if (job->st == TDM_OK && job->result && pd)
        tdm_cp_auth_remove(&pd->srv->auth, job->params[0]);
    else if (pd)
        tdm_cp_rest_audit_failure(pd->srv, pd->actor, "token.revoke", job->params[0],
                                  job->st == TDM_OK ? "no such active token" : job->err);
    tdm_cp_job_reply_json(job);
}

void tdm_cp_h_tokens_revoke(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                            const tdm_cp_token_t *who)
{
    char name[TDM_CP_TOKEN_NAME_MAX];
    if (!tdm_cp_rest_path_arg(req, a, 0, name, sizeof(name), "token"))
        return;
    if (strcmp(name, TDM_CP_ADMIN_TOKEN_NAME) == 0) {
        tdm_httpd_send_error(req, 400, "invalid_request", "invalid_request_error",
                             "the admin token is managed through state_dir/admin.token");
        return;
    }
    tdm_cp_rest_query(s, req, who, sql_token_revoke, on_token_revoked, "sus", name,
                      (unsigned long long)tdm_time_wall_us(), who->name);
}
