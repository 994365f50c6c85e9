/*
 * api.c — the route table and the REST handlers of /api/v1, /health and /metrics.
 *
 * Reads of database state build their JSON inside PostgreSQL (json_agg) so the database thread only
 * moves one text value; ids and hashes are rendered as 16-digit lowercase hex there. Every plain
 * read is readonly: the read pool runs it and it leaves the write generation alone. Rank history
 * is answered from the cache of committed rows when that covers the window (hist.h; header
 * X-Tandem-Source: memory), else read and rendered on the read pool. /api/v1/alerts is cached per
 * write generation (1 s at most), refreshed ahead of expiry, and concurrent misses share one query.
 * Reads of live state (/api/v1/ranks, /health, /metrics) come from memory and never wait on the
 * database. All database handlers go through query()/query_job() (a parameter spec).
 * Operator actions (token create/revoke) write their audit row in the same statement as the change;
 * a failed action gets its own audit row with outcome "failed".
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

#include "common/version.h"
#include "controlplane/http/cp_server.h"
#include "controlplane/http/console.h"
#include "controlplane/http/stream.h"

#define HEX(col) "lpad(to_hex(" col "), 16, '0')"

/* ---- helpers -------------------------------------------------------------------------------- */

static json_t *body_object(h2o_req_t *req)
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

/* The handlers of POST bodies: `fn` gets the parsed object (a 400 was sent when the body is not
 * one) and owns nothing; the object is released after it. */
typedef void (*body_fn)(tdm_cp_server_t *s, h2o_req_t *req, json_t *o, const tdm_cp_token_t *who);

static void with_body(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who, body_fn fn)
{
    json_t *o = body_object(req);
    if (!o)
        return;
    fn(s, req, o, who);
    json_decref(o);
}

#define BODY_HANDLER(name, fn)                                                                     \
    static void name(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,                   \
                     const tdm_cp_token_t *who)                                                    \
    {                                                                                              \
        (void)a;                                                                                   \
        with_body(s, req, who, fn);                                                                \
    }

/* A handler that only runs `sql` (no parameters) and answers with its JSON. */
#define QUERY_HANDLER(name, sql)                                                                   \
    static void name(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,                   \
                     const tdm_cp_token_t *who)                                                    \
    {                                                                                              \
        (void)a;                                                                                   \
        query(s, req, who, sql, tdm_cp_job_reply_json, "r");                                       \
    }

/* A required/optional string field; sends 400 and returns -1 when wrong. */
static int field_str(h2o_req_t *req, json_t *o, const char *key, int required, size_t max,
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

static int field_int(h2o_req_t *req, json_t *o, const char *key, int required, long long min,
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
static int query_uint(h2o_req_t *req, const char *key, unsigned long long max,
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

static void param_u64(tdm_cp_job_t *job, unsigned long long v)
{
    char b[32];
    snprintf(b, sizeof(b), "%llu", v);
    tdm_cp_job_param(job, b);
}

/* The parameters of a statement, one letter of `spec` each: 's' a string (NULL: SQL NULL),
 * 'u' an unsigned long long; a leading 'r' marks a plain SELECT (readonly: the read pool runs it
 * and it leaves the read caches' write generation alone). */
static void params_v(tdm_cp_job_t *job, const char *spec, va_list ap)
{
    if (*spec == 'r') {
        job->readonly = 1;
        spec++;
    }
    for (const char *c = spec; *c; c++) {
        if (*c == 's')
            tdm_cp_job_param(job, va_arg(ap, const char *));
        else
            param_u64(job, va_arg(ap, unsigned long long));
    }
}

/* The query scaffolding of the database handlers: a job for `sql` bound to the request, answered
 * by `done`, with its parameters (params_v). query_job leaves it to the caller to submit (after
 * setting readonly, render or aux); query submits it at once. */
static tdm_cp_job_t *query_job(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who,
                               const char *sql, tdm_cp_job_done_fn done, const char *spec, ...)
{
    tdm_cp_job_t *job = tdm_cp_server_job(s, req, sql, done, who);
    va_list ap;
    va_start(ap, spec);
    params_v(job, spec, ap);
    va_end(ap);
    return job;
}

static void query(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_token_t *who, const char *sql,
                  tdm_cp_job_done_fn done, const char *spec, ...)
{
    tdm_cp_job_t *job = tdm_cp_server_job(s, req, sql, done, who);
    va_list ap;
    va_start(ap, spec);
    params_v(job, spec, ap);
    va_end(ap);
    tdm_cp_db_query(s->db, job);
}

/* Path capture i as a C string; 0 (after a 404 naming `what`) when it does not fit. */
static int path_arg(h2o_req_t *req, const tdm_cp_args_t *a, int i, char *buf, size_t len,
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

static int name_ok(const char *s, size_t max)
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

static void audit_free(tdm_cp_job_t *job)
{
    tdm_cp_job_free(job);
}

static const char sql_audit_failed[] =
    "INSERT INTO actions (ts_us, actor, action, target, params, outcome, detail, finished_us) "
    "VALUES ($1::bigint, $2, $3, $4, NULL, 'failed', $5, $1::bigint)";

static void audit_failure(tdm_cp_server_t *s, const char *actor, const char *action,
                          const char *target, const char *detail)
{
    tdm_cp_job_t *job = tdm_cp_job_new(sql_audit_failed, audit_free, NULL);
    param_u64(job, tdm_time_wall_us());
    const char *const texts[4] = {actor, action, target, detail};
    for (int i = 0; i < 4; i++)
        tdm_cp_job_param(job, texts[i]);
    job->wait = 1; /* the audit log must not lose it to a short outage */
    tdm_cp_db_query(s->db, job);
}

/* ---- /health, /metrics ---------------------------------------------------------------------- */

static void h_health(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                     const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    const tdm_cp_db_stats_t *ds = tdm_cp_db_stats(s->db);
    char body[256];
    int n = snprintf(body, sizeof(body),
                     "{\"status\":\"ok\",\"ready\":%s,\"db\":\"%s\",\"uptime_s\":%llu}",
                     s->ready ? "true" : "false", atomic_load(&ds->up) ? "up" : "down",
                     (unsigned long long)((tdm_time_wall_us() - s->started_us) / 1000000u));
    tdm_httpd_send_json(req, 200, body, (size_t)n);
}

/* Open alerts by class and group, from the live set (sum() gives the total), and the build. */
static void alerts_open_metric(tdm_cp_server_t *s, tdm_cp_buf_t *b)
{
    tdm_cp_buf_printf(b,
                      "# HELP tandem_build_info The build: package version and git revision.\n"
                      "# TYPE tandem_build_info gauge\n"
                      "tandem_build_info{program=\"tandemd\",version=\"%s\",revision=\"%s\"} 1\n",
                      PACKAGE_VERSION, TDM_GIT_REV);
    tdm_cp_buf_printf(b, "# HELP tandem_alerts_open Open alerts by class and group.\n"
                         "# TYPE tandem_alerts_open gauge\n");
    json_t *al = tdm_cp_alerts_to_json(s->alerts, "open", NULL);
    json_t *counts = json_object(), *x;
    size_t i;
    json_array_foreach(json_object_get(al, "alerts"), i, x)
    {
        char key[256];
        snprintf(key, sizeof(key), "%s\t%s", json_string_value(json_object_get(x, "kind")),
                 json_string_value(json_object_get(x, "group")));
        json_object_set_new(counts, key,
                            json_integer(json_integer_value(json_object_get(counts, key)) + 1));
    }
    const char *key;
    json_object_foreach(counts, key, x)
    {
        const char *tab = strchr(key, '\t');
        tdm_cp_buf_printf(b, "tandem_alerts_open{class=\"%.*s\",group=\"", (int)(tab - key), key);
        for (const char *c = tab + 1; *c; c++) /* group names are the operator's: escape them */
            tdm_cp_buf_printf(b, "%s%c", *c == '"' || *c == '\\' ? "\\" : "", *c);
        tdm_cp_buf_printf(b, "\"} %lld\n", (long long)json_integer_value(x));
    }
    json_decref(counts);
    json_decref(al);
}

static void h_metrics(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                      const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    const tdm_cp_db_stats_t *ds = tdm_cp_db_stats(s->db);
    uint64_t oldest = atomic_load(&ds->oldest_pending_mono_us);
    uint64_t now = tdm_time_mono_us();
    double lag = oldest && now > oldest ? (double)(now - oldest) / 1e6 : 0.0;
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
#define G(name, help, fmt, val)                                                                    \
    tdm_cp_buf_printf(&b, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n",   \
                      val)
#define C(name, help, fmt, val)                                                                    \
    tdm_cp_buf_printf(&b, "# HELP " name " " help "\n# TYPE " name " counter\n" name " " fmt "\n", \
                      val)
    G("tandem_db_up", "1 when both database connections are usable.", "%d", atomic_load(&ds->up));
    G("tandem_ingest_lag_seconds", "Age of the oldest telemetry batch not yet in the database.",
      "%.3f", lag);
    G("tandem_ingest_buffer_batches", "Telemetry batches waiting in memory.", "%llu",
      (unsigned long long)atomic_load(&ds->mem_batches));
    G("tandem_ingest_buffer_bytes", "Bytes of telemetry batches waiting in memory.", "%llu",
      (unsigned long long)atomic_load(&ds->mem_bytes));
    G("tandem_ingest_spool_batches", "Telemetry batches in the on-disk spool.", "%llu",
      (unsigned long long)atomic_load(&ds->spool_records));
    G("tandem_ingest_spool_bytes", "Bytes in the on-disk spool.", "%llu",
      (unsigned long long)atomic_load(&ds->spool_bytes));
    alerts_open_metric(s, &b);
    G("tandem_ring_ranks", "Ranks with an in-memory sample ring.", "%zu", s->rings.n);
    tdm_cp_buf_printf(&b,
                      "# HELP tandem_ingest_batches_total Telemetry batches by outcome.\n"
                      "# TYPE tandem_ingest_batches_total counter\n"
                      "tandem_ingest_batches_total{outcome=\"committed\"} %llu\n"
                      "tandem_ingest_batches_total{outcome=\"duplicate\"} %llu\n"
                      "tandem_ingest_batches_total{outcome=\"spooled\"} %llu\n"
                      "tandem_ingest_batches_total{outcome=\"rejected\"} %llu\n",
                      (unsigned long long)atomic_load(&ds->batches_committed),
                      (unsigned long long)atomic_load(&ds->batches_duplicate),
                      (unsigned long long)atomic_load(&ds->batches_spooled),
                      (unsigned long long)s->ingest_rejected);
    C("tandem_ingest_transactions_total",
      "Ingest transactions committed (one per group of queued batches).", "%llu",
      (unsigned long long)atomic_load(&ds->ingest_txns));
    tdm_cp_buf_printf(&b,
                      "# HELP tandem_ingest_rows_total Rows committed by table.\n"
                      "# TYPE tandem_ingest_rows_total counter\n"
                      "tandem_ingest_rows_total{table=\"samples\"} %llu\n"
                      "tandem_ingest_rows_total{table=\"transfer_events\"} %llu\n"
                      "tandem_ingest_rows_total{table=\"events\"} %llu\n",
                      (unsigned long long)atomic_load(&ds->rows_samples),
                      (unsigned long long)atomic_load(&ds->rows_tevents),
                      (unsigned long long)atomic_load(&ds->rows_events));
    tdm_cp_buf_printf(&b,
                      "# HELP tandem_history_reads_total Rank history reads by where they were "
                      "answered.\n"
                      "# TYPE tandem_history_reads_total counter\n"
                      "tandem_history_reads_total{source=\"memory\"} %llu\n"
                      "tandem_history_reads_total{source=\"database\"} %llu\n",
                      (unsigned long long)s->hist.hits, (unsigned long long)s->hist.misses);
    C("tandem_telemetry_samples_received_total", "Samples received (all kept in the ring).", "%llu",
      (unsigned long long)s->samples_received);
    C("tandem_telemetry_events_received_total", "Events received.", "%llu",
      (unsigned long long)s->events_received);
    C("tandem_db_reconnects_total", "Database connections lost.", "%llu",
      (unsigned long long)atomic_load(&ds->reconnects));
    C("tandem_http_requests_total", "HTTP requests handled.", "%llu",
      (unsigned long long)s->http_requests);
    C("tandem_http_errors_total", "HTTP requests answered with an error by the dispatcher.", "%llu",
      (unsigned long long)s->http_errors);
#undef G
#undef C
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/plain; version=0.0.4"));
    h2o_send_inline(req, b.data, b.len);
    tdm_cp_buf_free(&b);
}

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
    if (field_str(req, o, "group", 1, TDM_CP_NAME_MAX - 1, &group) ||
        field_str(req, o, "role", 1, 16, &mode) || field_str(req, o, "model", 0, 256, &model) ||
        field_str(req, o, "instance_id", 1, TDM_CP_NAME_MAX - 1, &inst) ||
        field_str(req, o, "worker", 1, TDM_CP_NAME_MAX - 1, &worker) ||
        field_str(req, o, "admin_url", 0, 512, &admin_url) ||
        field_str(req, o, "host", 0, 256, &host) || field_int(req, o, "tp_size", 0, 1, 1024, &tp) ||
        field_int(req, o, "rank", 1, 0, 1023, &rank) ||
        field_int(req, o, "pid", 0, 0, INT32_MAX, &pid))
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
    query(s, req, who, sql_register, tdm_cp_job_reply_json, "sssusussssu", group, mode,
          model ? model : "", (unsigned long long)tp, inst, (unsigned long long)rank, worker,
          admin_url ? admin_url : "", host ? host : "", json_object_get(o, "pid") ? pidv : NULL,
          (unsigned long long)tdm_time_wall_us());
}
BODY_HANDLER(h_register, register_body)

static const char sql_heartbeat[] =
    "UPDATE workers SET last_seen_us = $3::bigint WHERE instance_id = $1 AND rank = $2::integer "
    "RETURNING json_build_object('instance_id', instance_id, 'rank', rank, 'last_seen_us', "
    "  last_seen_us)::text";

static void heartbeat_body(tdm_cp_server_t *s, h2o_req_t *req, json_t *o, const tdm_cp_token_t *who)
{
    const char *inst;
    long long rank;
    if (field_str(req, o, "instance_id", 1, TDM_CP_NAME_MAX - 1, &inst) ||
        field_int(req, o, "rank", 1, 0, 1023, &rank))
        return;
    query(s, req, who, sql_heartbeat, tdm_cp_job_reply_json, "suu", inst, (unsigned long long)rank,
          (unsigned long long)tdm_time_wall_us());
}
BODY_HANDLER(h_heartbeat, heartbeat_body)

/* ---- reads ---------------------------------------------------------------------------------- */

static const char sql_groups[] =
    "SELECT json_build_object('groups', coalesce(json_agg(json_build_object("
    "  'name', g.name, 'mode', g.mode, 'model', g.model, 'tp_size', g.tp_size, "
    "  'created_us', g.created_us, 'updated_us', g.updated_us, 'workers', "
    "  (SELECT coalesce(json_agg(json_build_object('instance_id', w.instance_id, 'rank', w.rank, "
    "     'worker', w.worker, 'admin_url', w.admin_url, 'host', w.host, 'pid', w.pid, "
    "     'registered_us', w.registered_us, 'last_seen_us', w.last_seen_us) "
    "     ORDER BY w.instance_id, w.rank), '[]') FROM workers w WHERE w.group_name = g.name)) "
    "  ORDER BY g.name), '[]'))::text FROM groups g";

QUERY_HANDLER(h_groups, sql_groups)

void tdm_cp_sample_json(tdm_cp_buf_t *b, const tdm_cp_sample_t *x)
{
    tdm_cp_buf_printf(b, "{\"ts_us\":%" PRId64 ",\"iter\":%" PRIu64 ",\"path\":", x->ts_us,
                      x->iter);
    tdm_cp_buf_json_str(b, x->path);
    tdm_cp_buf_printf(b,
                      ",\"plan_hash\":\"%016" PRIx64 "\",\"coll_seq\":%" PRIu64
                      ",\"coll_hash\":\"%016" PRIx64 "\",\"in_coll\":",
                      x->plan_hash, x->coll_seq, x->coll_hash);
    if (x->in_coll_valid) {
        tdm_cp_buf_puts(b, "{\"op\":");
        tdm_cp_buf_json_str(b, x->in_coll.op);
        tdm_cp_buf_printf(b, ",\"seq\":%" PRIu64 ",\"since_us\":%" PRId64 "}", x->in_coll.seq,
                          x->in_coll.since_us);
    } else {
        tdm_cp_buf_puts(b, "null");
    }
    tdm_cp_buf_printf(b, ",\"bs\":%u,\"waiting\":%u,\"running\":%u", x->bs, x->waiting, x->running);
    tdm_cp_sample_stats_json(b, x);
    tdm_cp_buf_puts(b, "}");
}

/* Latest sample of every rank, from the ring: live state, no database. */
static void h_ranks(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                    const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    char group[TDM_CP_NAME_MAX];
    int want_group = tdm_cp_query_get(req, "group", group, sizeof(group));
    uint64_t now = tdm_time_mono_us();
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
    tdm_cp_buf_puts(&b, "{\"ranks\":[");
    int first = 1;
    for (size_t i = 0; i < s->rings.n; i++) {
        const tdm_cp_rank_t *rk = s->rings.ranks[i];
        if (want_group && strcmp(rk->group, group) != 0)
            continue;
        tdm_cp_buf_puts(&b, first ? "{\"instance_id\":" : ",{\"instance_id\":");
        first = 0;
        tdm_cp_buf_json_str(&b, rk->instance_id);
        tdm_cp_buf_printf(&b, ",\"rank\":%u,\"group\":", rk->rank);
        tdm_cp_buf_json_str(&b, rk->group);
        tdm_cp_buf_puts(&b, ",\"worker\":");
        tdm_cp_buf_json_str(&b, rk->worker);
        tdm_cp_buf_puts(&b, ",\"role\":");
        tdm_cp_buf_json_str(&b, rk->role);
        tdm_cp_buf_printf(
            &b, ",\"last_seq\":%" PRIu64 ",\"samples_held\":%zu,\"age_ms\":%" PRIu64 ",\"latest\":",
            rk->last_seq, rk->count, (now - rk->last_recv_mono_us) / 1000u);
        const tdm_cp_sample_t *x = tdm_cp_rank_latest(rk);
        if (x)
            tdm_cp_sample_json(&b, x);
        else
            tdm_cp_buf_puts(&b, "null");
        tdm_cp_buf_puts(&b, "}");
    }
    tdm_cp_buf_puts(&b, "]}");
    tdm_httpd_send_json(req, 200, b.data, b.len);
    tdm_cp_buf_free(&b);
}

/* The rows, newest first; the reader thread renders the JSON (render_history). With step_us, the
 * newest row of each step (so counters stay exact), carrying the step's largest latency
 * percentiles, KV use and ingest lag (a spike inside the step is not lost to the thinning). */
#define HISTORY_COLUMNS                                                                            \
    "ts_us, batch_seq, iter, path, plan_hash, coll_seq, coll_hash, in_coll, bs, waiting, "         \
    "running, "                                                                                    \
    "tokens_out, requests_done, ttft_p50_us, ttft_p99_us, itl_p50_us, itl_p99_us, kv_pages_used, " \
    "kv_pages_total, host_pages_used, host_pages_total, corruption_total, recv_us"
#define HISTORY_STAT0 11 /* the first statistics column */
static const char sql_rank_history[] =
    "SELECT " HISTORY_COLUMNS " FROM samples WHERE instance_id = $1 AND rank = $2::integer "
    "AND ts_us >= $3::bigint AND ts_us < $4::bigint ORDER BY ts_us DESC LIMIT $5::integer";
static const char sql_rank_history_step[] =
    "SELECT DISTINCT ON (ts_us / $6::bigint) ts_us, batch_seq, iter, path, plan_hash, coll_seq, "
    "coll_hash, in_coll, bs, waiting, running, tokens_out, requests_done, max(ttft_p50_us) OVER w, "
    "max(ttft_p99_us) OVER w, max(itl_p50_us) OVER w, max(itl_p99_us) OVER w, "
    "max(kv_pages_used) OVER w, kv_pages_total, max(host_pages_used) OVER w, host_pages_total, "
    "corruption_total, ts_us + max(recv_us - ts_us) OVER w FROM samples "
    "WHERE instance_id = $1 AND rank = $2::integer AND ts_us >= $3::bigint AND ts_us < $4::bigint "
    "WINDOW w AS (PARTITION BY ts_us / $6::bigint) "
    "ORDER BY ts_us / $6::bigint DESC, ts_us DESC LIMIT $5::integer";

/* {"instance_id","rank","samples":[oldest first]}, ids and hashes as 16-digit hex; the same bytes
 * as the memory path (hist.c row_json). */
static void render_history(const PGresult *res, tdm_cp_job_t *job)
{
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
    tdm_cp_buf_puts(&b, "{\"instance_id\":");
    tdm_cp_buf_json_str(&b, job->params[0]);
    tdm_cp_buf_printf(&b, ",\"rank\":%s,\"samples\":[", job->params[1]);
    int n = PQntuples(res);
    for (int i = n - 1; i >= 0; i--) {
        tdm_cp_buf_printf(
            &b, "%s{\"ts_us\":%s,\"batch_seq\":%s,\"iter\":%s,\"path\":", i == n - 1 ? "" : ",",
            PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
        tdm_cp_buf_json_str(&b, PQgetvalue(res, i, 3));
        tdm_cp_buf_printf(&b,
                          ",\"plan_hash\":\"%016" PRIx64
                          "\",\"coll_seq\":%s,\"coll_hash\":\"%016" PRIx64
                          "\",\"in_coll\":%s,\"bs\":%s,\"waiting\":%s,\"running\":%s",
                          (uint64_t)strtoll(PQgetvalue(res, i, 4), NULL, 10), PQgetvalue(res, i, 5),
                          (uint64_t)strtoll(PQgetvalue(res, i, 6), NULL, 10),
                          PQgetisnull(res, i, 7) ? "null" : PQgetvalue(res, i, 7),
                          PQgetvalue(res, i, 8), PQgetvalue(res, i, 9), PQgetvalue(res, i, 10));
        for (int c = 0; c < TDM_CP_SAMPLE_STATS; c++)
            tdm_cp_buf_printf(&b, ",\"%s\":%s", tdm_cp_sample_stat_names[c],
                              PQgetvalue(res, i, HISTORY_STAT0 + c));
        tdm_cp_buf_printf(&b, ",\"recv_us\":%s}",
                          PQgetisnull(res, i, HISTORY_STAT0 + TDM_CP_SAMPLE_STATS)
                              ? "null"
                              : PQgetvalue(res, i, HISTORY_STAT0 + TDM_CP_SAMPLE_STATS));
    }
    tdm_cp_buf_puts(&b, "]}");
    job->result = tdm_cp_buf_steal(&b, NULL);
}

static void h_rank_history(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                           const tdm_cp_token_t *who)
{
    char inst[TDM_CP_NAME_MAX], rank[16];
    if (!path_arg(req, a, 0, inst, sizeof(inst), "rank") ||
        !path_arg(req, a, 1, rank, sizeof(rank), "rank"))
        return;
    char *end;
    unsigned long r = strtoul(rank, &end, 10);
    if (!rank[0] || *end || r > 1023) {
        tdm_httpd_send_error(req, 400, "invalid_path", "invalid_request_error",
                             "rank must be an integer in 0..1023");
        return;
    }
    unsigned long long since, until, limit, step;
    if (query_uint(req, "since_us", INT64_MAX, 0, &since) ||
        query_uint(req, "until_us", INT64_MAX, INT64_MAX, &until) ||
        query_uint(req, "limit", 10000, 1000, &limit) ||
        query_uint(req, "step_us", 86400000000ull, 0, &step))
        return;
    if (step > 1) { /* one row per step: always the database */
        tdm_cp_job_t *job =
            query_job(s, req, who, sql_rank_history_step, tdm_cp_job_reply_json, "rsuuuuu", inst,
                      (unsigned long long)r, since, until, limit, step);
        job->render = render_history;
        tdm_cp_db_query(s->db, job);
        return;
    }
    /* A window the in-memory cache of persisted rows covers is answered without the database. */
    tdm_cp_hist_sync(s);
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
    if (tdm_cp_hist_render(&s->hist, inst, (uint32_t)r, (int64_t)since, (int64_t)until,
                           (size_t)limit, &b)) {
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-tandem-source"), 0, NULL,
                              H2O_STRLIT("memory"));
        tdm_httpd_send_json(req, 200, b.data, b.len);
        tdm_cp_buf_free(&b);
        return;
    }
    tdm_cp_job_t *job = query_job(s, req, who, sql_rank_history, tdm_cp_job_reply_json, "rsuuuu",
                                  inst, (unsigned long long)r, since, until, limit);
    job->render = render_history;
    tdm_cp_db_query(s->db, job);
}

/* A room id (lowercase hex, at most 16 digits); sends 400 and returns -1 when malformed. */
static int parse_room(h2o_req_t *req, const char *room, size_t n, uint64_t *ret)
{
    uint64_t v = 0;
    int bad = n == 0 || n > 16;
    for (size_t i = 0; i < n && !bad; i++) {
        char c = room[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        bad = d < 0;
        v = v << 4 | (uint64_t)(d < 0 ? 0 : d);
    }
    if (bad) {
        tdm_httpd_send_error(req, 400, "invalid_query", "invalid_request_error",
                             "room must be lowercase hex, at most 16 digits");
        return -1;
    }
    *ret = v;
    return 0;
}

/* One room's whole timeline, oldest first; NULL (404) when no event names the room. */
static const char sql_room_events[] =
    "SELECT CASE WHEN count(*) = 0 THEN NULL ELSE json_build_object('room', $2::text, 'events', "
    "  json_agg(json_build_object('ts_us', ts_us, 'group', group_name, 'instance_id', "
    "  instance_id, 'rank', rank, 'type', type, 'from_state', from_state, 'to_state', to_state, "
    "  'reason', reason, 'data', data) ORDER BY ts_us, batch_seq, idx))::text END "
    "FROM transfer_events WHERE room = $1::bigint";

static void h_room_events(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                          const tdm_cp_token_t *who)
{
    uint64_t roomv;
    char roomt[24], hex[24];
    if (parse_room(req, a->v[0].base, a->v[0].len, &roomv))
        return;
    snprintf(roomt, sizeof(roomt), "%" PRId64, (int64_t)roomv);
    snprintf(hex, sizeof(hex), "%016" PRIx64, roomv);
    query(s, req, who, sql_room_events, tdm_cp_job_reply_json, "rss", roomt, hex);
}

static const char sql_transfers[] =
    "SELECT json_build_object('transfers', coalesce(json_agg(t ORDER BY t.first_us), '[]'))::text "
    "FROM (SELECT " HEX(
        "room") " AS room, "
                "    (array_agg(to_state ORDER BY ts_us DESC, idx DESC))[1] AS state, "
                "    (array_agg(group_name ORDER BY ts_us DESC))[1] AS \"group\", "
                "    min(ts_us) AS first_us, max(ts_us) AS last_us, count(*) AS events "
                "  FROM transfer_events WHERE ts_us >= $4::bigint AND ($3::bigint IS NULL OR room "
                "= $3::bigint) "
                "  GROUP BY room) t "
                "WHERE ($1::text IS NULL OR t.state = $1) AND ($2::bigint IS NULL OR t.first_us <= "
                "$2::bigint)";

static void h_transfers(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                        const tdm_cp_token_t *who)
{
    (void)a;
    char state[32], room[32];
    int has_state = tdm_cp_query_get(req, "state", state, sizeof(state));
    int has_room = tdm_cp_query_get(req, "room", room, sizeof(room));
    unsigned long long min_age_ms, window_s;
    if (query_uint(req, "min_age_ms", 86400000ull * 365, 0, &min_age_ms) ||
        query_uint(req, "window_s", 86400ull * 31, 3600, &window_s))
        return;
    uint64_t roomv = 0;
    if (has_room && parse_room(req, room, strlen(room), &roomv))
        return;
    uint64_t now = tdm_time_wall_us();
    char age[24], roomt[24];
    int has_age = tdm_cp_query_get(req, "min_age_ms", age, 2);
    snprintf(age, sizeof(age), "%llu", (unsigned long long)(now - min_age_ms * 1000u));
    snprintf(roomt, sizeof(roomt), "%" PRId64, (int64_t)roomv);
    query(s, req, who, sql_transfers, tdm_cp_job_reply_json, "rsssu", has_state ? state : NULL,
          has_age ? age : NULL, has_room ? roomt : NULL,
          (unsigned long long)(now - window_s * 1000000u));
}

static const char sql_alerts[] =
    "SELECT json_build_object('alerts', coalesce(json_agg(a ORDER BY a.opened_us DESC, a.id DESC), "
    "  '[]'))::text FROM (SELECT id, kind, group_name AS \"group\", state, summary, evidence, "
    "  opened_us, resolved_us, resolved_by FROM alerts WHERE ($1::text IS NULL OR state = $1) "
    "  ORDER BY opened_us DESC, id DESC LIMIT $2::integer) a";

#define ALERTS_CACHE_US 1000000u
#define ALERTS_REFRESH_US 400000u /* a hit older than this is refreshed in the background */

/* aux = "<write_gen at submit> <cache key>" */
static void alerts_job_finish(tdm_cp_server_t *s, tdm_cp_job_t *job, const char *key)
{
    job->readonly = 1;
    size_t alen = 24 + strlen(key);
    job->aux = tdm_malloc(alen);
    snprintf(job->aux, alen, "%llu %s",
             (unsigned long long)atomic_load(&tdm_cp_db_stats(s->db)->write_gen), key);
    tdm_cp_db_query(s->db, job);
}

static void alerts_cache_put(tdm_cp_server_t *s, const tdm_cp_job_t *job)
{
    if (s && job->st == TDM_OK && job->result)
        tdm_cp_db_cache_put(s->db, strchr(job->aux, ' ') + 1, strtoull(job->aux, NULL, 10),
                            job->result);
}

/* A request waiting for a flight's answer (freed with the request; unlinks itself if the client
 * goes first). */
typedef struct flight_waiter {
    h2o_linklist_t link;
    h2o_req_t *req;
} flight_waiter_t;

static void waiter_dispose(void *p)
{
    flight_waiter_t *w = p;
    if (h2o_linklist_is_linked(&w->link))
        h2o_linklist_unlink(&w->link);
}

/* The one query of a flight is back: cache it and answer everyone who waited. */
static void on_alerts_flight(tdm_cp_job_t *job)
{
    struct tdm_cp_flight *f = job->ctx;
    alerts_cache_put(f->srv, job);
    while (!h2o_linklist_is_empty(&f->waiters)) {
        flight_waiter_t *w = H2O_STRUCT_FROM_MEMBER(flight_waiter_t, link, f->waiters.next);
        h2o_linklist_unlink(&w->link);
        if (job->st != TDM_OK)
            tdm_cp_job_send_error(w->req, job);
        else if (!job->result)
            tdm_httpd_send_error(w->req, 404, "not_found", "not_found_error", "no such object");
        else
            tdm_httpd_send_json(w->req, 200, job->result, strlen(job->result));
    }
    f->busy = 0;
    tdm_cp_job_free(job);
}

/* A cache miss: join the query already fetching `key` at the current write generation, or start
 * it. 0 when no flight slot is free (the caller queries on its own). */
static int alerts_flight_join(tdm_cp_server_t *s, h2o_req_t *req, const char *key,
                              const char *state, unsigned long long limit)
{
    uint64_t gen = atomic_load(&tdm_cp_db_stats(s->db)->write_gen);
    struct tdm_cp_flight *f = NULL, *free_slot = NULL;
    for (int i = 0; i < TDM_CP_DB_CACHE; i++) {
        struct tdm_cp_flight *x = &s->flights[i];
        if (x->busy && x->gen == gen && strcmp(x->key, key) == 0)
            f = x;
        else if (!x->busy && !free_slot)
            free_slot = x;
    }
    if (!f) {
        if (!free_slot)
            return 0;
        f = free_slot;
        f->srv = s;
        f->busy = 1;
        f->gen = gen;
        snprintf(f->key, sizeof(f->key), "%s", key);
        h2o_linklist_init_anchor(&f->waiters);
        tdm_cp_job_t *job = tdm_cp_job_new(sql_alerts, on_alerts_flight, f);
        tdm_cp_job_param(job, state);
        param_u64(job, limit);
        alerts_job_finish(s, job, key);
    }
    flight_waiter_t *w = h2o_mem_alloc_shared(&req->pool, sizeof(*w), waiter_dispose);
    memset(w, 0, sizeof(*w));
    w->req = req;
    h2o_linklist_insert(&f->waiters, &w->link);
    return 1;
}

static void on_alerts(tdm_cp_job_t *job)
{
    tdm_cp_pending_t *pd = job->ctx;
    alerts_cache_put(pd ? pd->srv : NULL, job);
    tdm_cp_job_reply_json(job);
}

static void on_alerts_refreshed(tdm_cp_job_t *job)
{
    alerts_cache_put(job->ctx, job);
    tdm_cp_job_free(job);
}

static void h_alerts(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                     const tdm_cp_token_t *who)
{
    (void)a;
    char state[16];
    int has_state = tdm_cp_query_get(req, "state", state, sizeof(state));
    if (has_state && strcmp(state, "open") != 0 && strcmp(state, "resolved") != 0) {
        tdm_httpd_send_error(req, 400, "invalid_query", "invalid_request_error",
                             "state must be open or resolved");
        return;
    }
    unsigned long long limit;
    if (query_uint(req, "limit", 10000, 100, &limit))
        return;
    /* ?source=live answers from the detectors' alert store (with policy and remedy;
     * works while the database is down; the last 256 resolved only) */
    char src[8];
    if (tdm_cp_query_get(req, "source", src, sizeof(src)) && strcmp(src, "live") == 0) {
        json_t *j = tdm_cp_alerts_to_json(s->alerts, has_state ? state : NULL, NULL);
        char *txt = json_dumps(j, JSON_COMPACT);
        tdm_httpd_send_json(req, 200, txt, strlen(txt));
        free(txt);
        json_decref(j);
        return;
    }
    /* The stored list changes only when tandemd writes (write_gen) or someone else does; a cached
     * answer is served for at most ALERTS_CACHE_US, so 1000 reads/s cost one query. */
    char key[TDM_CP_DB_CACHE_KEY];
    snprintf(key, sizeof(key), "alerts %s %llu", has_state ? state : "*", limit);
    const char *hit = tdm_cp_db_cache_get(s->db, key, ALERTS_CACHE_US);
    if (hit) {
        tdm_httpd_send_json(req, 200, hit, strlen(hit));
        /* refreshed ahead of its expiry, so a steady reader never waits on the query */
        if (tdm_cp_db_cache_claim_refresh(s->db, key, ALERTS_REFRESH_US)) {
            tdm_cp_job_t *job = tdm_cp_job_new(sql_alerts, on_alerts_refreshed, s);
            tdm_cp_job_param(job, has_state ? state : NULL);
            param_u64(job, limit);
            alerts_job_finish(s, job, key);
        }
        return;
    }
    if (alerts_flight_join(s, req, key, has_state ? state : NULL, limit))
        return;
    alerts_job_finish(
        s, query_job(s, req, who, sql_alerts, on_alerts, "su", has_state ? state : NULL, limit),
        key);
}

static const char sql_actions[] =
    "SELECT json_build_object('actions', coalesce(json_agg(x ORDER BY x.id DESC), '[]'))::text "
    "FROM (SELECT id, ts_us, actor, action, target, params, outcome, detail, finished_us "
    "  FROM actions ORDER BY id DESC LIMIT $1::integer) x";

static void h_actions(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                      const tdm_cp_token_t *who)
{
    (void)a;
    unsigned long long limit;
    if (query_uint(req, "limit", 10000, 100, &limit))
        return;
    query(s, req, who, sql_actions, tdm_cp_job_reply_json, "ru", limit);
}

static const char sql_config[] =
    "SELECT json_build_object('configs', coalesce(json_agg(c ORDER BY c.id), '[]'))::text FROM ("
    "  SELECT DISTINCT ON (group_name) id, group_name AS \"group\", created_us, created_by, config "
    "  FROM config_versions WHERE ($1::text IS NULL OR group_name = $1) "
    "  ORDER BY group_name, id DESC) c";

static void h_config(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                     const tdm_cp_token_t *who)
{
    (void)a;
    char group[TDM_CP_NAME_MAX];
    int has = tdm_cp_query_get(req, "group", group, sizeof(group));
    query(s, req, who, sql_config, tdm_cp_job_reply_json, "rs", has ? group : NULL);
}

/* ---- tokens --------------------------------------------------------------------------------- */

static const char sql_tokens_list[] =
    "SELECT json_build_object('tokens', coalesce(json_agg(json_build_object('name', name, "
    "  'role', role, 'created_us', created_us, 'revoked_us', revoked_us) ORDER BY id), "
    "'[]'))::text "
    "FROM api_tokens";

QUERY_HANDLER(h_tokens_list, sql_tokens_list)

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
        audit_failure(s, pd->actor, "token.create", job->params[0],
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
    if (field_str(req, o, "name", 1, TDM_CP_TOKEN_NAME_MAX - 1, &name) ||
        field_str(req, o, "role", 1, 16, &role))
        return;
    if (!name_ok(name, TDM_CP_TOKEN_NAME_MAX - 1) || strcmp(name, TDM_CP_ADMIN_TOKEN_NAME) == 0) {
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
    tdm_cp_job_t *job =
        query_job(s, req, who, sql_token_create, on_token_created, "sssus", name,
                  tdm_cp_role_name(r), hex, (unsigned long long)tdm_time_wall_us(), who->name);
    size_t alen = TDM_CP_TOKEN_LEN + 1 + strlen(tdm_cp_role_name(r)) + 1;
    job->aux = tdm_malloc(alen);
    snprintf(job->aux, alen, "%s %s", token, tdm_cp_role_name(r));
    tdm_cp_db_query(s->db, job);
}
BODY_HANDLER(h_tokens_create, tokens_create_body)

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
        audit_failure(pd->srv, pd->actor, "token.revoke", job->params[0],
                      job->st == TDM_OK ? "no such active token" : job->err);
    tdm_cp_job_reply_json(job);
}

static void h_tokens_revoke(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                            const tdm_cp_token_t *who)
{
    char name[TDM_CP_TOKEN_NAME_MAX];
    if (!path_arg(req, a, 0, name, sizeof(name), "token"))
        return;
    if (strcmp(name, TDM_CP_ADMIN_TOKEN_NAME) == 0) {
        tdm_httpd_send_error(req, 400, "invalid_request", "invalid_request_error",
                             "the admin token is managed through state_dir/admin.token");
        return;
    }
    query(s, req, who, sql_token_revoke, on_token_revoked, "sus", name,
          (unsigned long long)tdm_time_wall_us(), who->name);
}

/* ---- the table ------------------------------------------------------------------------------ */

const tdm_cp_route_t tdm_cp_routes[] = {
    {"GET", "/health", TDM_CP_ROLE_NONE, 0, h_health},
    {"GET", "/console", TDM_CP_ROLE_NONE, 0, tdm_cp_h_console},
    {"GET", "/console/{file}", TDM_CP_ROLE_NONE, 0, tdm_cp_h_console},
    {"GET", "/metrics", TDM_CP_ROLE_READ, 0, h_metrics},
    {"POST", "/api/v1/telemetry", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_TELEMETRY, tdm_cp_ingest_handle},
    {"POST", "/api/v1/workers/register", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, h_register},
    {"POST", "/api/v1/workers/heartbeat", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, h_heartbeat},
    {"GET", "/api/v1/groups", TDM_CP_ROLE_READ, 0, h_groups},
    {"GET", "/api/v1/ranks", TDM_CP_ROLE_READ, 0, h_ranks},
    {"GET", "/api/v1/ranks/{instance_id}/{rank}/history", TDM_CP_ROLE_READ, 0, h_rank_history},
    {"GET", "/api/v1/transfers", TDM_CP_ROLE_READ, 0, h_transfers},
    {"GET", "/api/v1/transfers/{room}", TDM_CP_ROLE_READ, 0, h_room_events},
    {"GET", "/api/v1/stream", TDM_CP_ROLE_READ, 0, tdm_cp_h_stream},
    {"GET", "/api/v1/alerts", TDM_CP_ROLE_READ, 0, h_alerts},
    {"GET", "/api/v1/actions", TDM_CP_ROLE_READ, 0, h_actions},
    {"GET", "/api/v1/config", TDM_CP_ROLE_READ, 0, h_config},
    {"GET", "/api/v1/tokens", TDM_CP_ROLE_ADMIN, 0, h_tokens_list},
    {"POST", "/api/v1/tokens", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, h_tokens_create},
    {"DELETE", "/api/v1/tokens/{name}", TDM_CP_ROLE_ADMIN, 0, h_tokens_revoke},
};
const size_t tdm_cp_routes_count = sizeof(tdm_cp_routes) / sizeof(tdm_cp_routes[0]);
