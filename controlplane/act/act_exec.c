/*
 * act_exec.c — the action executor: one thread taking requests in order and carrying them out
 * (start, drain, resume, restart, reconfigure; docs/design.md §5), each framed by its audit row
 * (I9). The thread owns a libpq connection of its own for the audit log and config versions, so a
 * slow action never holds a connection the loop's queries need, and it blocks freely on workers.
 *
 * Audit: `pending` row when the action starts; outcome, detail and finished_us when it ends. The
 * action's id is assigned here, once. If the database is unreachable at the start, the whole row
 * is written at the end (with the true start time); if that fails too, the row is kept in memory,
 * in order, and written when the database is back (tried before each action and every 2 s).
 * A reconfigure's config version is numbered here too and kept the same way, so a remedy (e.g.
 * WEDGE's overlap=off) runs while the database is down.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/act/act_int.h"
#include "controlplane/store/db.h"

/* A row the database did not take (down): kept, in order, and written when it is back. */
typedef struct audit_row {
    struct audit_row *next;
    const char *sql; /* sql_whole or sql_version */
    int n;
    char *p[9]; /* its parameters */
} audit_row_t;

typedef struct exec {
    tdm_cp_act_t *a;
    PGconn *pg;
    uint64_t next_id;                     /* action ids: assigned here, once (see run_one) */
    uint64_t next_ver;                    /* config version ids, the same way */
    audit_row_t *pending, **pending_tail; /* rows waiting for the database */
} exec_t;

/* ---- database ------------------------------------------------------------------------------- */

/* Run one statement; the first column of the first row into out (may be NULL). 0 on success. */
static int pg_run(exec_t *x, const char *sql, int n, const char *const *params, char *out,
                  size_t out_len)
{
    /* the query thread applies the migrations; statements before that would only fail */
    for (int i = 0; i < 300 && !atomic_load(&tdm_cp_db_stats(x->a->env.db)->schema_ready); i++)
        if (tdm_act_sleep(x->a, 100))
            return -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        if (!x->pg || PQstatus(x->pg) != CONNECTION_OK) {
            PQfinish(x->pg);
            x->pg = PQconnectdb(x->a->pg_dsn);
            PQsetNoticeProcessor(x->pg, tdm_log_pq_notice, NULL);
            if (PQstatus(x->pg) != CONNECTION_OK) {
                if (tdm_act_sleep(x->a, 500))
                    return -1;
                continue;
            }
        }
        PGresult *r = PQexecParams(x->pg, sql, n, NULL, params, NULL, NULL, 0);
        ExecStatusType es = PQresultStatus(r);
        if (es == PGRES_TUPLES_OK || es == PGRES_COMMAND_OK) {
            if (out && out_len)
                snprintf(out, out_len, "%s",
                         PQntuples(r) > 0 && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0) : "");
            PQclear(r);
            return 0;
        }
        tdm_warn(TDM_SUB_CP, "msg=\"audit statement failed\" err=\"%s\"", PQresultErrorMessage(r));
        PQclear(r);
        if (tdm_act_sleep(x->a, 500)) /* e.g. migrations not applied yet */
            return -1;
    }
    return -1;
}

static const char sql_begin[] =
    "INSERT INTO actions (id, ts_us, actor, action, target, params, outcome) "
    "VALUES ($6::bigint, $1::bigint, $2, $3, $4, $5::jsonb, 'pending')";
static const char sql_end[] = "UPDATE actions SET outcome = $2, detail = $3, finished_us = "
                              "$4::bigint WHERE id = $1::bigint";
/* the whole row, when its start was not written (or is being written late): the id decides */
static const char sql_whole[] =
    "INSERT INTO actions (ts_us, actor, action, target, params, outcome, detail, finished_us, id) "
    "VALUES ($1::bigint, $2, $3, $4, $5::jsonb, $6, $7, $8::bigint, $9::bigint) "
    "ON CONFLICT (id) DO UPDATE SET outcome = EXCLUDED.outcome, detail = EXCLUDED.detail, "
    "  finished_us = EXCLUDED.finished_us";

/* Write the rows kept while the database was down, oldest first; stops at the first failure. */
/* the largest stored config version (numbering continues from it) */
static const char sql_version_max[] = "SELECT coalesce(max(id), 0) FROM config_versions";
/* a config version, numbered by the executor: one past the stored maximum, or, while the
 * database has never answered, the wall clock in µs */
static const char sql_version[] =
    "INSERT INTO config_versions (group_name, created_us, created_by, config, id) "
    "VALUES ($1, $2::bigint, $3, $4::jsonb, $5::bigint) ON CONFLICT (id) DO NOTHING";

static void audit_flush(exec_t *x)
{
    while (x->pending) {
        audit_row_t *w = x->pending;
        if (pg_run(x, w->sql, w->n, (const char *const *)w->p, NULL, 0) != 0)
            return;
        tdm_info(TDM_SUB_CP, "msg=\"%s written late\" id=%s group=%s",
                 w->sql == sql_whole ? "audit row" : "config version", w->p[w->n - 1],
                 w->sql == sql_whole ? w->p[3] : w->p[0]);
        x->pending = w->next;
        if (!x->pending)
            x->pending_tail = &x->pending;
        for (int i = 0; i < w->n; i++)
            free(w->p[i]);
        tdm_free(w);
    }
}

static void audit_keep(exec_t *x, const char *sql, int n, const char *const *p)
{
    audit_row_t *w = tdm_calloc(1, sizeof(*w));
    w->sql = sql;
    w->n = n;
    for (int i = 0; i < n; i++)
        w->p[i] = strdup(p[i] ? p[i] : "");
    *x->pending_tail = w;
    x->pending_tail = &w->next;
}

/* ---- steps ---------------------------------------------------------------------------------- */

static void set_state(tdm_cp_act_t *a, act_group_t *g, act_state_t st, int ready)
{
    pthread_mutex_lock(&a->mu);
    g->state = st;
    if (ready >= 0)
        g->ready = ready;
    pthread_mutex_unlock(&a->mu);
}

static tdm_status_t do_drain(exec_t *x, act_group_t *g, double timeout_s, char *detail, size_t len)
{
    tdm_cp_act_t *a = x->a;
    char url[512];
    /* the router stops choosing the group first; what it already sent is accepted before the
     * drain (bounded wait), so no request routed here is refused by the draining worker */
    set_state(a, g, ACT_ST_DRAINING, 0);
    uint64_t t0 = tdm_time_mono_us();
    while (atomic_load(&g->inflight) > 0 && tdm_time_mono_us() - t0 < 5000000u)
        if (tdm_act_sleep(a, 20))
            return TDM_ERR_ABORTED;
    snprintf(url, sizeof(url), "%s/admin/drain", g->admin_url);
    char *body = NULL;
    long code = tdm_act_http("POST", url, g->token, "{}", 5000, &body);
    tdm_free(body);
    if (code != 200) {
        snprintf(detail, len, "POST %s answered %ld", url, code);
        return TDM_ERR_PEER;
    }
    snprintf(url, sizeof(url), "%s/metrics", g->admin_url);
    uint64_t deadline = tdm_time_mono_us() + (uint64_t)(timeout_s * 1e6);
    double running = -1, waiting = -1;
    for (;;) {
        char *m = NULL;
        if (tdm_act_http("GET", url, NULL, NULL, 2000, &m) == 200) {
            double drained = tdm_act_metric(m, "tandem_drained");
            running = tdm_act_metric(m, "tandem_requests_running");
            waiting = tdm_act_metric(m, "tandem_requests_waiting");
            tdm_free(m);
            if (drained == 1) {
                set_state(a, g, ACT_ST_DRAINED, 0);
                snprintf(detail, len, "drained in %.2f s", (double)(tdm_time_mono_us() - t0) / 1e6);
                return TDM_OK;
            }
        } else {
            tdm_free(m);
        }
        if (tdm_time_mono_us() > deadline) {
            snprintf(detail, len, "not drained after %.0f s (running %.0f, waiting %.0f)",
                     timeout_s, running, waiting);
            return TDM_ERR_TIMEOUT;
        }
        if (tdm_act_sleep(a, 100))
            return TDM_ERR_ABORTED;
    }
}

/* The undrain: POST /admin/resume, then /ready again; the router chooses the group again. */
static tdm_status_t do_resume(exec_t *x, act_group_t *g, char *detail, size_t len)
{
    tdm_cp_act_t *a = x->a;
    char url[512];
    snprintf(url, sizeof(url), "%s/admin/resume", g->admin_url);
    char *body = NULL;
    long code = g->admin_url[0] ? tdm_act_http("POST", url, g->token, "{}", 5000, &body) : -1;
    tdm_free(body);
    if (code != 200) {
        snprintf(detail, len, "POST %s answered %ld", url, code);
        return TDM_ERR_PEER;
    }
    uint64_t t0 = tdm_time_mono_us();
    if (!tdm_act_wait_ready(a, g->admin_url, 30)) {
        set_state(a, g, ACT_ST_RUNNING, 0);
        snprintf(detail, len, "resumed, but %s is not /ready after 30 s", g->admin_url);
        return TDM_ERR_TIMEOUT;
    }
    set_state(a, g, ACT_ST_RUNNING, 1);
    snprintf(detail, len, "resumed; /ready in %.2f s", (double)(tdm_time_mono_us() - t0) / 1e6);
    return TDM_OK;
}

static tdm_status_t do_restart(exec_t *x, act_group_t *g, char *detail, size_t len)
{
    tdm_cp_act_t *a = x->a;
    char d1[256] = "", d2[256] = "";
    tdm_status_t st;
    switch (g->kind) {
    case ACT_KIND_SUPERVISED:
        set_state(a, g, ACT_ST_RESTARTING, 0);
        tdm_act_super_stop(a, g, d1, sizeof(d1));
        st = tdm_act_super_start(a, g, d2, sizeof(d2));
        snprintf(detail, len, "%s; %s", d1, d2);
        return st;
    case ACT_KIND_UNIT:
        set_state(a, g, ACT_ST_RESTARTING, 0);
        st = tdm_cp_sdbus_restart_unit(g->bus_host, g->unit, d1, sizeof(d1));
        if (st != TDM_OK) {
            set_state(a, g, ACT_ST_FAILED, 0);
            snprintf(detail, len, "%s", d1);
            return st;
        }
        pthread_mutex_lock(&a->mu);
        g->started_us = tdm_time_wall_us();
        pthread_mutex_unlock(&a->mu);
        if (!tdm_act_wait_ready(a, g->admin_url, a->o.start_timeout_s)) {
            set_state(a, g, ACT_ST_FAILED, 0);
            snprintf(detail, len, "RestartUnit(%s) done, but %s not /ready in %.0f s", g->unit,
                     g->admin_url, a->o.start_timeout_s);
            return TDM_ERR_TIMEOUT;
        }
        set_state(a, g, ACT_ST_RUNNING, 1);
        snprintf(detail, len, "RestartUnit(%s) done; /ready", g->unit);
        return TDM_OK;
    default:
        snprintf(detail, len, "group %s is an external worker: tandemd cannot restart it", g->name);
        return TDM_ERR_UNSUPPORTED;
    }
}

/* Store the merged config as a version, write override.ini/.json, then per group (the pair too
 * for kv_cache_dtype) drain → restart, one at a time. */
static tdm_status_t do_reconfigure(exec_t *x, act_group_t *g, json_t *params, int drain,
                                   const char *actor, char *detail, size_t len)
{
    tdm_cp_act_t *a = x->a;
    act_group_t *targets[2] = {g, NULL};
    if (json_object_get(params, "kv_cache_dtype") && g->pair[0]) {
        pthread_mutex_lock(&a->mu);
        targets[1] = tdm_act_group_find(a, g->pair);
        pthread_mutex_unlock(&a->mu);
        if (!targets[1]) {
            snprintf(detail, len, "kv_cache_dtype is pair-wide but pair %s is not configured",
                     g->pair);
            return TDM_ERR_NOTFOUND;
        }
    }
    size_t off = 0;
    for (int t = 0; t < 2 && targets[t]; t++) {
        act_group_t *h = targets[t];
        json_t *merged = NULL;
        char err[256], path[4200], now[32], idtxt[32] = "";
        pthread_mutex_lock(&a->mu);
        tdm_status_t st = tdm_cp_act_config_merge(h->config, params, &merged, err, sizeof(err));
        pthread_mutex_unlock(&a->mu);
        if (st != TDM_OK) {
            snprintf(detail + off, len - off, "%s", err);
            return st;
        }
        char *cfg_text = json_dumps(merged, JSON_SORT_KEYS);
        uint64_t wall = tdm_time_wall_us();
        /* Versions are what operators read ("version 3 of b"): one past the stored maximum,
         * learnt once from the database; only while it has never answered, the wall clock in µs
         * (still growing, so later versions sort after the ones kept for the outage). */
        if (x->next_ver == 0 && !x->pending) {
            char maxtxt[32] = "";
            if (pg_run(x, sql_version_max, 0, NULL, maxtxt, sizeof(maxtxt)) == 0 && maxtxt[0])
                x->next_ver = strtoull(maxtxt, NULL, 10) + 1;
        }
        uint64_t version = x->next_ver ? x->next_ver : wall;
        x->next_ver = version + 1;
        snprintf(now, sizeof(now), "%" PRIu64, wall);
        snprintf(idtxt, sizeof(idtxt), "%" PRIu64, version);
        const char *p[5] = {h->name, now, actor, cfg_text, idtxt};
        /* after the rows already waiting (order), else now; kept if the database is down */
        if (x->pending || pg_run(x, sql_version, 5, p, NULL, 0) != 0) {
            tdm_warn(TDM_SUB_CP,
                     "msg=\"config version kept until the database is back\" id=%s group=%s", idtxt,
                     h->name);
            audit_keep(x, sql_version, 5, p);
        }
        char *ini = tdm_cp_act_config_ini(merged);
        json_t *stored = json_deep_copy(merged);
        json_object_set_new(stored, "_version", json_integer((json_int_t)version));
        char *stored_text = json_dumps(stored, JSON_SORT_KEYS);
        json_decref(stored);
        snprintf(path, sizeof(path), "%s/groups/%s/override.ini", a->state_dir, h->name);
        st = ini ? tdm_act_write_file(path, ini, err, sizeof(err)) : TDM_ERR_NOMEM;
        snprintf(path, sizeof(path), "%s/groups/%s/override.json", a->state_dir, h->name);
        if (st == TDM_OK)
            st = tdm_act_write_file(path, stored_text, err, sizeof(err));
        free(ini);
        free(stored_text);
        free(cfg_text);
        if (st != TDM_OK) {
            json_decref(merged);
            snprintf(detail + off, len - off, "%s", err);
            return st;
        }
        pthread_mutex_lock(&a->mu);
        json_decref(h->config);
        h->config = merged;
        h->config_version = version;
        pthread_mutex_unlock(&a->mu);
        char d[512] = "";
        int was_ready;
        pthread_mutex_lock(&a->mu);
        was_ready = h->ready && h->state == ACT_ST_RUNNING;
        pthread_mutex_unlock(&a->mu);
        if (drain && was_ready) {
            st = do_drain(x, h, a->o.drain_timeout_s, d, sizeof(d));
            if (st != TDM_OK) {
                snprintf(detail + off, len - off, "%s: version %" PRIu64 "; drain: %s", h->name,
                         version, d);
                return st;
            }
        }
        st = do_restart(x, h, d, sizeof(d));
        off += (size_t)snprintf(detail + off, len - off, "%s%s: version %" PRIu64 ", %s",
                                t ? "; " : "", h->name, version, d);
        if (off >= len)
            off = len - 1;
        if (st != TDM_OK)
            return st;
    }
    return TDM_OK;
}

/* ---- one action ----------------------------------------------------------------------------- */

/* A remedy's restart (actor policy:…) goes through the supervisor's failures and backoff, so a
 * WORKER_LOST=auto remedy of a group that crashes soon after each start is no unbounded loop
 * (docs/groups.md "Failed starts"); operators and the supervisor itself are not gated. */
static int remedy_allowed(tdm_cp_act_t *a, act_group_t *g, const char *actor, char *detail,
                          size_t len)
{
    if (strncmp(actor, "policy:", 7) != 0)
        return 1;
    pthread_mutex_lock(&a->mu);
    int ok = tdm_act_super_remedy_gate(a, g, actor, detail, len);
    pthread_mutex_unlock(&a->mu);
    return ok;
}

static void run_one(exec_t *x, act_req_t *r)
{
    tdm_cp_act_t *a = x->a;
    const char *action = json_string_value(json_object_get(r->request, "action"));
    const char *group = json_string_value(json_object_get(r->request, "group"));
    json_t *params = json_object_get(r->request, "params");
    json_t *alert = json_object_get(r->request, "alert_id");
    uint64_t t0 = tdm_time_wall_us();
    char ts[32], idtxt[32] = "", detail[1024] = "";
    snprintf(ts, sizeof(ts), "%" PRIu64, t0);
    /* the action's id, assigned once here (wall clock µs, or one past the last), so the reply,
     * the alert's resolved_by and a row written late all name it even while the database is
     * down */
    uint64_t id = x->next_id > t0 ? x->next_id : t0;
    x->next_id = id + 1;
    snprintf(idtxt, sizeof(idtxt), "%" PRIu64, id);
    audit_flush(x);
    json_t *aparams = json_is_object(params) ? json_deep_copy(params) : json_object();
    if (json_is_integer(alert))
        json_object_set(aparams, "alert_id", alert);
    char *ptext = json_dumps(aparams, JSON_SORT_KEYS);
    json_decref(aparams);
    const char *bp[6] = {ts, r->actor, action, group, ptext, idtxt};
    int have_row = !x->pending && pg_run(x, sql_begin, 6, bp, NULL, 0) == 0;

    pthread_mutex_lock(&a->mu);
    act_group_t *g = tdm_act_group_find(a, group);
    if (g)
        g->busy = 1;
    /* an operator's (re)start gives a group the supervisor gave up on its retries again */
    if (g && strcmp(r->actor, "supervisor") != 0 && strncmp(r->actor, "policy:", 7) != 0 &&
        (!strcmp(action, "start") || !strcmp(action, "restart") || !strcmp(action, "reconfigure")))
        tdm_act_super_reset_failures(g);
    pthread_mutex_unlock(&a->mu);
    tdm_status_t st;
    long wstatus = 0;
    tdm_info(TDM_SUB_CP, "msg=\"action\" action=%s group=%s actor=%s", action, group, r->actor);
    if (!g) {
        snprintf(detail, sizeof(detail), "no such group");
        st = TDM_ERR_NOTFOUND;
    } else if (!strcmp(action, "start")) {
        st = tdm_act_super_start(a, g, detail, sizeof(detail));
    } else if (!strcmp(action, "drain")) {
        double t = json_number_value(json_object_get(params, "timeout_s"));
        st = do_drain(x, g, t > 0 ? t : a->o.drain_timeout_s, detail, sizeof(detail));
    } else if (!strcmp(action, "fault")) {
        st = tdm_act_do_fault(a, g, params, &wstatus, detail, sizeof(detail));
    } else if (!strcmp(action, "resume")) {
        st = do_resume(x, g, detail, sizeof(detail));
    } else if (!strcmp(action, "restart")) {
        /* a restart asked for before the group's current start is already done */
        if (strcmp(r->actor, "supervisor") != 0 && r->created_us < g->started_us &&
            g->state == ACT_ST_RUNNING) {
            snprintf(detail, sizeof(detail), "already restarted at %" PRIu64 " (pid %d)",
                     g->started_us, (int)g->pid);
            st = TDM_OK;
        } else if (!remedy_allowed(a, g, r->actor, detail, sizeof(detail))) {
            st = TDM_ERR_BUSY;
        } else {
            st = do_restart(x, g, detail, sizeof(detail));
        }
    } else if (!remedy_allowed(a, g, r->actor, detail, sizeof(detail))) {
        st = TDM_ERR_BUSY;
    } else {
        /* operators drain first; a remedy restarts at once (a wedged group never drains) */
        json_t *dj = json_object_get(params, "drain");
        int drain = dj ? json_is_true(dj) : !json_is_integer(alert);
        json_t *cfg = json_deep_copy(params);
        json_object_del(cfg, "drain");
        st = do_reconfigure(x, g, cfg, drain, r->actor, detail, sizeof(detail));
        json_decref(cfg);
    }
    if (g) {
        pthread_mutex_lock(&a->mu);
        g->busy = 0;
        pthread_mutex_unlock(&a->mu);
    }
    uint64_t t1 = tdm_time_wall_us();
    const char *outcome = st == TDM_OK ? "ok" : "failed";
    char t1s[32];
    snprintf(t1s, sizeof(t1s), "%" PRIu64, t1);
    const char *ep[4] = {idtxt, outcome, detail, t1s};
    const char *wp[9] = {ts, r->actor, action, group, ptext, outcome, detail, t1s, idtxt};
    if (!(have_row && pg_run(x, sql_end, 4, ep, NULL, 0) == 0) &&
        (x->pending || pg_run(x, sql_whole, 9, wp, NULL, 0) != 0)) {
        tdm_warn(TDM_SUB_CP,
                 "msg=\"audit row kept until the database is back\" id=%s action=%s group=%s "
                 "outcome=%s",
                 idtxt, action, group, outcome);
        audit_keep(x, sql_whole, 9, wp);
    }
    free(ptext);
    tdm_info(TDM_SUB_CP, "msg=\"action done\" id=%s action=%s group=%s outcome=%s detail=\"%s\"",
             idtxt, action, group, outcome, detail);
    json_t *res = json_pack("{s:I,s:s,s:s,s:s,s:s,s:s,s:I,s:I}", "action_id",
                            (json_int_t)strtoll(idtxt, NULL, 10), "action", action, "group", group,
                            "actor", r->actor, "outcome", outcome, "detail", detail, "started_us",
                            (json_int_t)t0, "finished_us", (json_int_t)t1);
    if (json_is_integer(alert))
        json_object_set(res, "alert_id", alert);
    if (wstatus > 0)
        json_object_set_new(res, "status", json_integer(wstatus));
    tdm_act_post(a, ACT_MSG_DONE, res, r->done, r->ctx);
}

void *tdm_act_exec_main(void *arg)
{
    exec_t x = {arg, NULL, 0, 0, NULL, NULL};
    x.pending_tail = &x.pending;
    tdm_cp_act_t *a = x.a;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        while (!a->stop && !a->q_head) {
            if (!x.pending) {
                pthread_cond_wait(&a->cv, &a->mu);
                continue;
            }
            /* rows are waiting for the database: try again every 2 s */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 2;
            if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) {
                pthread_mutex_unlock(&a->mu);
                audit_flush(&x);
                pthread_mutex_lock(&a->mu);
            }
        }
        if (a->stop) {
            pthread_mutex_unlock(&a->mu);
            break;
        }
        act_req_t *r = a->q_head;
        a->q_head = r->next;
        if (!a->q_head)
            a->q_tail = NULL;
        a->current = r;
        pthread_mutex_unlock(&a->mu);
        run_one(&x, r);
        pthread_mutex_lock(&a->mu);
        a->current = NULL;
        pthread_mutex_unlock(&a->mu);
        json_decref(r->request);
        tdm_free(r);
    }
    /* everything still queued is answered (done is called exactly once) */
    pthread_mutex_lock(&a->mu);
    act_req_t *r = a->q_head;
    a->q_head = a->q_tail = NULL;
    pthread_mutex_unlock(&a->mu);
    while (r) {
        act_req_t *n = r->next;
        tdm_act_post(a, ACT_MSG_DONE,
                     json_pack("{s:I,s:O,s:O,s:s,s:s,s:s}", "action_id", (json_int_t)0, "action",
                               json_object_get(r->request, "action"), "group",
                               json_object_get(r->request, "group"), "actor", r->actor, "outcome",
                               "failed", "detail", "tandemd stopped before the action ran"),
                     r->done, r->ctx);
        json_decref(r->request);
        tdm_free(r);
        r = n;
    }
    audit_flush(&x);
    for (audit_row_t *w = x.pending; w;) {
        audit_row_t *n = w->next;
        if (w->sql != sql_whole)
            tdm_err(TDM_SUB_CP, "msg=\"config version lost at shutdown\" id=%s group=%s config=%s",
                    w->p[4], w->p[0], w->p[3]);
        else
            tdm_err(TDM_SUB_CP,
                    "msg=\"audit row lost at shutdown\" id=%s action=%s group=%s actor=%s "
                    "outcome=%s detail=\"%s\"",
                    w->p[8], w->p[2], w->p[3], w->p[1], w->p[5], w->p[6]);
        for (int i = 0; i < w->n; i++)
            free(w->p[i]);
        tdm_free(w);
        w = n;
    }
    PQfinish(x.pg);
    return NULL;
}
