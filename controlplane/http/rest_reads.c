/*
 * rest_reads.c — the reads of /api/v1: groups, ranks (live, from the ring), rank history (from the
 * cache of committed rows when that covers the window — hist.h; header X-Tandem-Source: memory —
 * else from the read pool), transfers and a room's timeline, alerts (cached per write generation, 1
 * s at most, refreshed ahead of expiry; concurrent misses share one query), actions, config.
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

QUERY_HANDLER(tdm_cp_h_groups, sql_groups)

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
void tdm_cp_h_ranks(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
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

void tdm_cp_h_rank_history(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                           const tdm_cp_token_t *who)
{
    char inst[TDM_CP_NAME_MAX], rank[16];
    if (!tdm_cp_rest_path_arg(req, a, 0, inst, sizeof(inst), "rank") ||
        !tdm_cp_rest_path_arg(req, a, 1, rank, sizeof(rank), "rank"))
        return;
    char *end;
    unsigned long r = strtoul(rank, &end, 10);
    if (!rank[0] || *end || r > 1023) {
        tdm_httpd_send_error(req, 400, "invalid_path", "invalid_request_error",
                             "rank must be an integer in 0..1023");
        return;
    }
    unsigned long long since, until, limit, step;
    if (tdm_cp_rest_query_uint(req, "since_us", INT64_MAX, 0, &since) ||
        tdm_cp_rest_query_uint(req, "until_us", INT64_MAX, INT64_MAX, &until) ||
        tdm_cp_rest_query_uint(req, "limit", 10000, 1000, &limit) ||
        tdm_cp_rest_query_uint(req, "step_us", 86400000000ull, 0, &step))
        return;
    if (step > 1) { /* one row per step: always the database */
        tdm_cp_job_t *job = tdm_cp_rest_query_job(s, req, who, sql_rank_history_step,
                                                  tdm_cp_job_reply_json, "rsuuuuu", inst,
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
    tdm_cp_job_t *job =
        tdm_cp_rest_query_job(s, req, who, sql_rank_history, tdm_cp_job_reply_json, "rsuuuu", inst,
                              (unsigned long long)r, since, until, limit);
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

void tdm_cp_h_room_events(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                          const tdm_cp_token_t *who)
{
    uint64_t roomv;
    char roomt[24], hex[24];
    if (parse_room(req, a->v[0].base, a->v[0].len, &roomv))
        return;
    snprintf(roomt, sizeof(roomt), "%" PRId64, (int64_t)roomv);
    snprintf(hex, sizeof(hex), "%016" PRIx64, roomv);
    tdm_cp_rest_query(s, req, who, sql_room_events, tdm_cp_job_reply_json, "rss", roomt, hex);
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

void tdm_cp_h_transfers(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                        const tdm_cp_token_t *who)
{
    (void)a;
    char state[32], room[32];
    int has_state = tdm_cp_query_get(req, "state", state, sizeof(state));
    int has_room = tdm_cp_query_get(req, "room", room, sizeof(room));
    unsigned long long min_age_ms, window_s;
    if (tdm_cp_rest_query_uint(req, "min_age_ms", 86400000ull * 365, 0, &min_age_ms) ||
        tdm_cp_rest_query_uint(req, "window_s", 86400ull * 31, 3600, &window_s))
        return;
    uint64_t roomv = 0;
    if (has_room && parse_room(req, room, strlen(room), &roomv))
        return;
    uint64_t now = tdm_time_wall_us();
    char age[24], roomt[24];
    int has_age = tdm_cp_query_get(req, "min_age_ms", age, 2);
    snprintf(age, sizeof(age), "%llu", (unsigned long long)(now - min_age_ms * 1000u));
    snprintf(roomt, sizeof(roomt), "%" PRId64, (int64_t)roomv);
    tdm_cp_rest_query(s, req, who, sql_transfers, tdm_cp_job_reply_json, "rsssu",
                      has_state ? state : NULL, has_age ? age : NULL, has_room ? roomt : NULL,
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
        tdm_cp_rest_param_u64(job, limit);
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

void tdm_cp_h_alerts(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
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
    if (tdm_cp_rest_query_uint(req, "limit", 10000, 100, &limit))
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
            tdm_cp_rest_param_u64(job, limit);
            alerts_job_finish(s, job, key);
        }
        return;
    }
    if (alerts_flight_join(s, req, key, has_state ? state : NULL, limit))
        return;
    alerts_job_finish(s,
                      tdm_cp_rest_query_job(s, req, who, sql_alerts, on_alerts, "su",
                                            has_state ? state : NULL, limit),
                      key);
}

static const char sql_actions[] =
    "SELECT json_build_object('actions', coalesce(json_agg(x ORDER BY x.id DESC), '[]'))::text "
    "FROM (SELECT id, ts_us, actor, action, target, params, outcome, detail, finished_us "
    "  FROM actions ORDER BY id DESC LIMIT $1::integer) x";

void tdm_cp_h_actions(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                      const tdm_cp_token_t *who)
{
    (void)a;
    unsigned long long limit;
    if (tdm_cp_rest_query_uint(req, "limit", 10000, 100, &limit))
        return;
    tdm_cp_rest_query(s, req, who, sql_actions, tdm_cp_job_reply_json, "ru", limit);
}

static const char sql_config[] =
    "SELECT json_build_object('configs', coalesce(json_agg(c ORDER BY c.id), '[]'))::text FROM ("
    "  SELECT DISTINCT ON (group_name) id, group_name AS \"group\", created_us, created_by, config "
    "  FROM config_versions WHERE ($1::text IS NULL OR group_name = $1) "
    "  ORDER BY group_name, id DESC) c";

void tdm_cp_h_config(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                     const tdm_cp_token_t *who)
{
    (void)a;
    char group[TDM_CP_NAME_MAX];
    int has = tdm_cp_query_get(req, "group", group, sizeof(group));
    tdm_cp_rest_query(s, req, who, sql_config, tdm_cp_job_reply_json, "rs", has ? group : NULL);
}
