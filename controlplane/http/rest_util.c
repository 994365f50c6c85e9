/*
 * rest_util.c — the REST handlers' shared helpers (see rest.h).
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

/* ---- helpers -------------------------------------------------------------------------------- */

json_t *tdm_cp_rest_body_object(h2o_req_t *req)
{
    json_error_t jerr;
    json_t *root = json_loadb(req->entity.base ? req->entity.base : "", req->entity.len, 0, &jerr);
    if (!root || !json_is_object(root)) {
        if (root)
            tdm_httpd_send_error(req, 400, "invalid_json", "invalid_request_error",
                                 "the body must be a JSON object");
        else
            tdm_httpd_send_error(req, 400, "invalid_json", "invalid_request_error",
                                 "invalid JSON at line %d column %d: %s", jerr.line, jerr.column,
                                 jerr.text);
        json_decref(root);
        return NULL;
    }
    return root;
}

void tdm_cp_rest_with_body(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who,
                           tdm_cp_body_fn fn)
{
    json_t *o = tdm_cp_rest_body_object(req);
    if (!o)
        return;
    fn(s, req, o, who);
    json_decref(o);
}

/* A required/optional string field; sends 400 and returns -1 when wrong. */
int tdm_cp_rest_field_str(h2o_req_t *req, json_t *o, const char *key, int required, size_t max,
                          const char **out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) {
            tdm_httpd_send_error(req, 400, "missing_field", "invalid_request_error",
                                 "missing \"%s\"", key);
            return -1;
        }
        *out = NULL;
        return 0;
    }
    const char *s = json_string_value(v);
    if (!s || strlen(s) > max || (required && !*s)) {
        tdm_httpd_send_error(req, 400, "invalid_field", "invalid_request_error",
                             "\"%s\" must be a%s string of at most %zu bytes", key,
                             required ? " non-empty" : "", max);
        return -1;
    }
    *out = s;
    return 0;
}

int tdm_cp_rest_field_int(h2o_req_t *req, json_t *o, const char *key, int required, long long min,
                          long long max, long long *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) {
            tdm_httpd_send_error(req, 400, "missing_field", "invalid_request_error",
                                 "missing \"%s\"", key);
            return -1;
        }
        *out = min;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        tdm_httpd_send_error(req, 400, "invalid_field", "invalid_request_error",
                             "\"%s\" must be an integer in %lld..%lld", key, min, max);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

/* Parse a non-negative decimal query parameter; -1 (after a 400) when malformed. */
int tdm_cp_rest_query_uint(h2o_req_t *req, const char *key, unsigned long long max,
                           unsigned long long def, unsigned long long *out)
{
    char buf[32];
    *out = def;
    if (!tdm_cp_query_get(req, key, buf, sizeof(buf)))
        return 0;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (!buf[0] || *end || buf[0] == '-' || v > max) {
        tdm_httpd_send_error(req, 400, "invalid_query", "invalid_request_error",
                             "query parameter %s must be an integer in 0..%llu", key, max);
        return -1;
    }
    *out = v;
    return 0;
}

void tdm_cp_rest_param_u64(tdm_cp_job_t *job, unsigned long long v)
{
    char b[32];
    snprintf(b, sizeof(b), "%llu", v);
    tdm_cp_job_param(job, b);
}

/* The parameters of a statement, one letter of `spec` each: 's' a string (NULL: SQL NULL),
 * 'u' an unsigned long long; a leading 'r' marks a plain SELECT (readonly: the read pool runs it
 * and it leaves the read caches' write generation alone). */
static void tdm_cp_rest_params_v(tdm_cp_job_t *job, const char *spec, va_list ap)
{
    if (*spec == 'r') {
        job->readonly = 1;
        spec++;
    }
    for (const char *c = spec; *c; c++) {
        if (*c == 's')
            tdm_cp_job_param(job, va_arg(ap, const char *));
        else
            tdm_cp_rest_param_u64(job, va_arg(ap, unsigned long long));
    }
}

/* The query scaffolding of the database handlers: a job for `sql` bound to the request, answered
 * by `done`, with its parameters (params_v). query_job leaves it to the caller to submit (after
 * setting readonly, render or aux); query submits it at once. */
tdm_cp_job_t *tdm_cp_rest_query_job(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who,
                                    const char *sql, tdm_cp_job_done_fn done, const char *spec, ...)
{
    tdm_cp_job_t *job = tdm_cp_server_job(s, req, sql, done, who);
    va_list ap;
    va_start(ap, spec);
    tdm_cp_rest_params_v(job, spec, ap);
    va_end(ap);
    return job;
}

void tdm_cp_rest_query(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who,
                       const char *sql, tdm_cp_job_done_fn done, const char *spec, ...)
{
    tdm_cp_job_t *job = tdm_cp_server_job(s, req, sql, done, who);
    va_list ap;
    va_start(ap, spec);
    tdm_cp_rest_params_v(job, spec, ap);
    va_end(ap);
    tdm_cp_db_query(s->db, job);
}

/* Path capture i as a C string; 0 (after a 404 naming `what`) when it does not fit. */
int tdm_cp_rest_path_arg(h2o_req_t *req, const tdm_cp_args_t *a, int i, char *buf, size_t len,
                         const char *what)
{
    if (a->v[i].len >= len) {
        tdm_httpd_send_error(req, 404, "not_found", "not_found_error", "no such %s", what);
        return 0;
    }
    memcpy(buf, a->v[i].base, a->v[i].len);
    buf[a->v[i].len] = '\0';
    return 1;
}

int tdm_cp_rest_name_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
            return 0;
    return 1;
}

void tdm_cp_rest_audit_free(tdm_cp_job_t *job)
{
    tdm_cp_job_free(job);
}

static const char sql_audit_failed[] =
    "INSERT INTO actions (ts_us, actor, action, target, params, outcome, detail, finished_us) "
    "VALUES ($1::bigint, $2, $3, $4, NULL, 'failed', $5, $1::bigint)";

void tdm_cp_rest_audit_failure(tdm_cp_server_t *s, const char *actor, const char *action,
                               const char *target, const char *detail)
{
    tdm_cp_job_t *job = tdm_cp_job_new(sql_audit_failed, tdm_cp_rest_audit_free, NULL);
    tdm_cp_rest_param_u64(job, tdm_time_wall_us());
    const char *const texts[4] = {actor, action, target, detail};
    for (int i = 0; i < 4; i++)
        tdm_cp_job_param(job, texts[i]);
    job->wait = 1; /* the audit log must not lose it to a short outage */
    tdm_cp_db_query(s->db, job);
}

/* Send `o` (its reference is taken) as the JSON body. */
void tdm_cp_rest_send_obj(h2o_req_t *req, int status, json_t *o)
{
    char *text = json_dumps(o, JSON_SORT_KEYS);
    json_decref(o);
    size_t n = strlen(text);
    char *body = h2o_mem_alloc_pool(&req->pool, n + 1);
    memcpy(body, text, n + 1);
    free(text);
    tdm_httpd_send_json(req, status, body, n);
}
