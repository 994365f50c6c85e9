/*
 * act.c — the actions subsystem's loop side (act.h): setup and teardown, the group table, the
 * executor queue, messages from the threads back to the loop (action results, detector events),
 * remediation requests taken from the alert store, and the router's view of the groups.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/act/act_int.h"
#include "controlplane/detect/alert.h"

static const char *const state_names[] = {"stopped", "starting",   "running", "draining",
                                          "drained", "restarting", "failed"};
_Static_assert(sizeof(state_names) / sizeof(state_names[0]) == ACT_ST_MAX, "state names");
static const char *const kind_names[] = {"supervised", "unit", "external", "registered"};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == ACT_KIND_MAX, "kind names");

static const char *act_state_name(act_state_t s)
{
    return s < ACT_ST_MAX ? state_names[s] : "?";
}

/* ---- loop side of messages ------------------------------------------------------------------ */

/* The ring rank an event of `group` is attributed to: the group's most recently heard rank (its
 * current incarnation), else a rank of tandemd's own under `fallback_instance`. */
static tdm_cp_rank_t *event_rank(tdm_cp_rings_t *rings, const char *group,
                                 const char *fallback_instance)
{
    tdm_cp_rank_t *best = NULL;
    for (size_t i = 0; i < rings->n; i++) {
        tdm_cp_rank_t *rk = rings->ranks[i];
        if (strcmp(rk->group, group) == 0 &&
            (!best || rk->last_recv_mono_us > best->last_recv_mono_us))
            best = rk;
    }
    if (best)
        return best;
    if (tdm_cp_rings_rank(rings, fallback_instance, 0, 1, &best) != TDM_OK)
        return NULL;
    snprintf(best->group, sizeof(best->group), "%s", group);
    snprintf(best->worker, sizeof(best->worker), "%s", group);
    snprintf(best->role, sizeof(best->role), "null");
    return best;
}

static void on_event_msg(tdm_cp_act_t *a, json_t *p)
{
    const char *group = json_string_value(json_object_get(p, "group"));
    const char *type = json_string_value(json_object_get(p, "type"));
    const char *reason = json_string_value(json_object_get(p, "reason"));
    if (group && type && !strcmp(type, "planned_stop")) {
        size_t n = tdm_cp_detect_retire_group(a->env.detect, group);
        tdm_info(TDM_SUB_CP, "msg=\"planned stop: ranks retired\" group=%s ranks=%zu", group, n);
        return;
    }
    char inst[TDM_CP_NAME_MAX];
    snprintf(inst, sizeof(inst), "tandemd-%.40s-%llu", group ? group : "?",
             (unsigned long long)(tdm_time_wall_us() / 1000000u));
    tdm_cp_rank_t *rk = group && type ? event_rank(a->env.rings, group, inst) : NULL;
    if (!rk)
        return;
    tdm_tm_event_t e;
    memset(&e, 0, sizeof(e));
    e.ts_us = (int64_t)tdm_time_wall_us();
    snprintf(e.type, sizeof(e.type), "%s", type);
    snprintf(e.reason, sizeof(e.reason), "%s", reason ? reason : "");
    e.data = json_object_get(p, "data");
    tdm_cp_detect_event(a->env.detect, rk, &e, tdm_time_mono_us());
    tdm_info(TDM_SUB_CP, "msg=\"event\" group=%s type=%s reason=\"%s\"", group, type,
             reason ? reason : "");
}

static void on_messages(h2o_multithread_receiver_t *rx, h2o_linklist_t *messages)
{
    tdm_cp_act_t *a = H2O_STRUCT_FROM_MEMBER(tdm_cp_act_t, rx, rx);
    while (!h2o_linklist_is_empty(messages)) {
        h2o_multithread_message_t *mm =
            H2O_STRUCT_FROM_MEMBER(h2o_multithread_message_t, link, messages->next);
        h2o_linklist_unlink(&mm->link);
        act_msg_t *m = (act_msg_t *)mm;
        if (m->kind == ACT_MSG_EVENT) {
            on_event_msg(a, m->payload);
        } else {
            /* an action that came from an alert resolves it ("resolved_by": action:<id>) */
            json_t *aid = json_object_get(m->payload, "alert_id");
            const char *outcome = json_string_value(json_object_get(m->payload, "outcome"));
            char by[64];
            snprintf(by, sizeof(by), "action:%lld",
                     (long long)json_integer_value(json_object_get(m->payload, "action_id")));
            int ok = outcome && !strcmp(outcome, "ok");
            if (json_is_integer(aid) && ok)
                tdm_cp_alerts_resolve(a->env.alerts, (uint64_t)json_integer_value(aid), by,
                                      tdm_time_wall_us());
            /* a group (re)started since it was lost, whose new incarnation reports (the rule is
             * false at the last tick), is no longer lost: the supervisor's restart after an exit
             * is WORKER_LOST's remedy, so a later loss opens an alert of its own rather than
             * extending one whose worker is back (docs/alerts.md) */
            const char *action = json_string_value(json_object_get(m->payload, "action"));
            const char *group = json_string_value(json_object_get(m->payload, "group"));
            const tdm_cp_alert_t *lost =
                ok && action && group && (!strcmp(action, "restart") || !strcmp(action, "start"))
                    ? tdm_cp_alerts_open_get(a->env.alerts, group, TDM_CP_ALERT_WORKER_LOST)
                    : NULL;
            if (lost && !tdm_cp_findings_get(a->env.findings, group, TDM_CP_ALERT_WORKER_LOST))
                tdm_cp_alerts_resolve(a->env.alerts, lost->id, by, tdm_time_wall_us());
            if (m->done)
                m->done(m->ctx, m->payload);
        }
        json_decref(m->payload);
        tdm_free(m);
    }
}

/* ---- setup ---------------------------------------------------------------------------------- */

tdm_status_t tdm_cp_act_init(const tdm_cp_act_env_t *env, const tdm_cp_act_opts_t *o,
                             tdm_cp_act_t **ret, char *err, size_t err_len)
{
    tdm_cp_act_t *a = tdm_calloc(1, sizeof(*a));
    a->env = *env;
    a->o = *o;
    snprintf(a->state_dir, sizeof(a->state_dir), "%s", o->state_dir);
    snprintf(a->worker_bin, sizeof(a->worker_bin), "%s",
             o->worker_bin && *o->worker_bin ? o->worker_bin : "tandem-worker");
    snprintf(a->pg_dsn, sizeof(a->pg_dsn), "%s", o->pg_dsn ? o->pg_dsn : "");
    snprintf(a->admin_token, sizeof(a->admin_token), "%s", o->admin_token ? o->admin_token : "");
    a->tandemd_port = o->tandemd_port;
    if (a->o.start_timeout_s <= 0)
        a->o.start_timeout_s = 300;
    if (a->o.drain_timeout_s <= 0)
        a->o.drain_timeout_s = 300;
    if (a->o.start_backoff_max_s < 1)
        a->o.start_backoff_max_s = 30;
    if (a->o.stable_window_s <= 0)
        a->o.stable_window_s = 60;
    if (a->o.start_retries < 0)
        a->o.start_retries = 0;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    tdm_status_t st = tdm_act_super_load(a, err, err_len);
    if (st != TDM_OK)
        goto err_free;
    a->mq = env->mq;
    h2o_multithread_register_receiver(a->mq, &a->rx, on_messages);
    /* supervised groups that were not re-adopted start now, through the executor (audited) */
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        if (g->kind == ACT_KIND_SUPERVISED && g->pid <= 0) {
            tdm_act_queue_push(a, "supervisor",
                               json_pack("{s:s,s:s}", "action", "start", "group", g->name), NULL,
                               NULL);
        }
    }
    if (pthread_create(&a->exec_th, NULL, tdm_act_exec_main, a) != 0) {
        snprintf(err, err_len, "cannot start the action executor thread");
        st = TDM_ERR_NOMEM;
        goto err_rx;
    }
    if (pthread_create(&a->watch_th, NULL, tdm_act_watch_main, a) != 0) {
        pthread_mutex_lock(&a->mu);
        a->stop = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->exec_th, NULL);
        snprintf(err, err_len, "cannot start the watcher thread");
        st = TDM_ERR_NOMEM;
        goto err_rx;
    }
    a->threads = 1;
    tdm_info(TDM_SUB_CP, "msg=\"actions ready\" groups=%zu", a->n_groups);
    *ret = a;
    return TDM_OK;

err_rx:
    h2o_multithread_unregister_receiver(a->mq, &a->rx);
err_free:
    for (size_t i = 0; i < a->n_groups; i++) {
        json_decref(a->groups[i].base);
        json_decref(a->groups[i].config);
    }
    for (act_req_t *r = a->q_head, *n; r; r = n) {
        n = r->next;
        json_decref(r->request);
        tdm_free(r);
    }
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    tdm_free(a);
    return st;
}

void tdm_cp_act_stop(tdm_cp_act_t *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (a->threads) {
        pthread_join(a->exec_th, NULL);
        pthread_join(a->watch_th, NULL);
        a->threads = 0;
    }
}

void tdm_cp_act_free(tdm_cp_act_t *a)
{
    if (!a)
        return;
    tdm_cp_act_stop(a);
    h2o_multithread_unregister_receiver(a->mq, &a->rx);
    for (act_req_t *r = a->q_head, *n; r; r = n) {
        n = r->next;
        json_decref(r->request);
        tdm_free(r);
    }
    for (size_t i = 0; i < a->n_groups; i++) {
        json_decref(a->groups[i].base);
        json_decref(a->groups[i].config);
    }
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    tdm_free(a);
}

/* ---- requests ------------------------------------------------------------------------------- */

static tdm_status_t enqueue(tdm_cp_act_t *a, const char *actor, json_t *request,
                            tdm_cp_act_done_fn done, void *ctx, char *err, size_t err_len)
{
    const char *action = json_string_value(json_object_get(request, "action"));
    const char *group = json_string_value(json_object_get(request, "group"));
    if (!action ||
        (strcmp(action, "drain") && strcmp(action, "resume") && strcmp(action, "restart") &&
         strcmp(action, "reconfigure") && strcmp(action, "fault"))) {
        snprintf(err, err_len, "action must be drain, resume, restart, reconfigure or fault");
        return TDM_ERR_INVAL;
    }
    pthread_mutex_lock(&a->mu);
    act_group_t *g = group ? tdm_act_group_find(a, group) : NULL;
    act_kind_t kind = g ? g->kind : ACT_KIND_MAX;
    char url[256];
    snprintf(url, sizeof(url), "%s", g ? g->admin_url : "");
    pthread_mutex_unlock(&a->mu);
    if (!g) {
        snprintf(err, err_len, "no worker group \"%s\" (neither in --groups-config nor registered)",
                 group ? group : "");
        return TDM_ERR_NOTFOUND;
    }
    /* a process tandemd neither started nor reaches through systemd cannot be restarted by it;
     * a reconfigure is a restart with an override file */
    if ((kind == ACT_KIND_EXTERNAL || kind == ACT_KIND_REGISTERED) &&
        (!strcmp(action, "restart") || !strcmp(action, "reconfigure"))) {
        snprintf(err, err_len,
                 "group \"%s\" is not started by tandemd (%s, %s): tandemd cannot %s it; "
                 "%s it where it runs, or give it a [group.%s] section with unit = its systemd "
                 "unit",
                 group, kind == ACT_KIND_EXTERNAL ? "url only in --groups-config" : "registered",
                 url, action, action, group);
        return TDM_ERR_UNSUPPORTED;
    }
    json_t *params = json_object_get(request, "params");
    if (!strcmp(action, "fault")) {
        tdm_status_t st = tdm_act_fault_check(params, kind == ACT_KIND_SUPERVISED, err, err_len);
        if (st != TDM_OK)
            return st;
    }
    if (!strcmp(action, "reconfigure")) {
        json_t *merged = NULL;
        tdm_status_t st = tdm_cp_act_config_merge(NULL, params, &merged, err, err_len);
        if (st != TDM_OK)
            return st;
        json_decref(merged);
    }
    pthread_mutex_lock(&a->mu);
    tdm_act_queue_push(a, actor, json_incref(request), done, ctx);
    pthread_mutex_unlock(&a->mu);
    return TDM_OK;
}

tdm_status_t tdm_cp_act_submit(tdm_cp_act_t *a, const char *actor, json_t *request,
                               tdm_cp_act_done_fn done, void *ctx, char *err, size_t err_len)
{
    return enqueue(a, actor, request, done, ctx, err, err_len);
}

static int is_remedy_for(const act_req_t *r, const char *group)
{
    const char *g = json_string_value(json_object_get(r->request, "group"));
    return !strncmp(r->actor, "policy:", 7) && g && !strcmp(g, group);
}

const char *tdm_act_remedy_in_progress(const tdm_cp_act_t *a, const char *group)
{
    if (a->current && is_remedy_for(a->current, group))
        return a->current->actor;
    for (const act_req_t *r = a->q_head; r; r = r->next)
        if (is_remedy_for(r, group))
            return r->actor;
    return NULL;
}

/* Remediation requests (policy auto) become actions: restart_group with params (overlap off,
 * hicache off) is a reconfigure, without params a restart; fail_rooms_restart_peer restarts the
 * group (its rooms fail with it). One incident often opens several alerts on a group (a rank that
 * took the idle path is RANK_DIVERGENCE at once and WEDGE 3 s later): while a policy action on
 * the group is queued or running, a further remedy for it is skipped (logged), so the group is
 * restarted once, not once per alert. */
static void take_remedies(tdm_cp_act_t *a)
{
    tdm_cp_remedy_t rm;
    while (tdm_cp_alerts_take_remedy(a->env.alerts, &rm)) {
        pthread_mutex_lock(&a->mu);
        const char *busy = tdm_act_remedy_in_progress(a, rm.group);
        char busy_actor[72];
        snprintf(busy_actor, sizeof(busy_actor), "%s", busy ? busy : "");
        pthread_mutex_unlock(&a->mu);
        if (busy) {
            tdm_info(TDM_SUB_CP,
                     "msg=\"remedy skipped: the group is being remedied\" group=%s alert=%s "
                     "alert_id=%llu by=%s",
                     rm.group, tdm_cp_alert_class_name(rm.cls), (unsigned long long)rm.alert_id,
                     busy_actor);
            json_decref(rm.request);
            continue;
        }
        const char *what = json_string_value(json_object_get(rm.request, "action"));
        json_t *params = json_object_get(rm.request, "params");
        json_t *req;
        if (what && !strcmp(what, "restart_group") && json_object_size(params) > 0)
            req = json_pack("{s:s,s:s,s:O,s:I}", "action", "reconfigure", "group", rm.group,
                            "params", params, "alert_id", (json_int_t)rm.alert_id);
        else
            req =
                json_pack("{s:s,s:s,s:{s:s},s:I}", "action", "restart", "group", rm.group, "params",
                          "reason", what ? what : "remedy", "alert_id", (json_int_t)rm.alert_id);
        char err[256], actor[72];
        snprintf(actor, sizeof(actor), "policy:%s", tdm_cp_alert_class_name(rm.cls));
        if (enqueue(a, actor, req, NULL, NULL, err, sizeof(err)) != TDM_OK)
            tdm_warn(TDM_SUB_CP, "msg=\"remedy not executed\" group=%s err=\"%s\"", rm.group, err);
        json_decref(req);
        json_decref(rm.request);
    }
}

void tdm_cp_act_tick(tdm_cp_act_t *a, uint64_t mono_us)
{
    if (!a)
        return;
    if (mono_us - a->last_reap_mono >= 100000u) {
        a->last_reap_mono = mono_us;
        tdm_act_super_reap(a);
    }
    take_remedies(a);
}

/* ---- views ---------------------------------------------------------------------------------- */

json_t *tdm_cp_act_status(tdm_cp_act_t *a)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        /* supervised groups: the failures in a row, the next retry (wall µs, null when none is
         * scheduled), the last failure's reason, whether the supervisor gave up, and what the last
         * failure was: a start that failed, or a crash ready_s after the group became /ready */
        json_t *retry =
            g->kind != ACT_KIND_SUPERVISED
                ? json_null()
                : json_pack("{s:i,s:i,s:o,s:s?,s:b,s:s?,s:o}", "failures", (int)g->start_failures,
                            "limit", a->o.start_retries, "next_us",
                            g->retry_at_mono ? json_integer((json_int_t)g->retry_at_us)
                                             : json_null(),
                            "last_error", g->last_error[0] ? g->last_error : NULL, "gave_up",
                            g->gave_up, "cause",
                            !g->start_failures    ? NULL
                            : g->fail_ready_s < 0 ? "start"
                                                  : "crash",
                            "ready_s",
                            g->start_failures && g->fail_ready_s >= 0
                                ? json_real((double)(int64_t)(g->fail_ready_s * 10) / 10)
                                : json_null());
        json_array_append_new(
            arr, json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:i,s:s,s:b,s:s,s:i,s:I,s:O,s:I,s:{s:s?,s:I,"
                           "s:I},s:o}",
                           "name", g->name, "kind", kind_names[g->kind], "mode", g->mode, "model",
                           g->model, "tp_size", g->tp_size ? g->tp_size : 1, "admin_url",
                           g->admin_url, "pid", (int)g->pid, "state", act_state_name(g->state),
                           "ready", g->ready, "health", tdm_act_health(g), "inflight",
                           atomic_load(&g->inflight), "started_us", (json_int_t)g->started_us,
                           "config", g->config, "config_version", (json_int_t)g->config_version,
                           "canary", "reference", g->canary_ref[0] ? g->canary_ref : NULL, "checks",
                           (json_int_t)g->canary_checks, "mismatches",
                           (json_int_t)g->canary_mismatches, "retry", retry));
    }
    pthread_mutex_unlock(&a->mu);
    return json_pack("{s:o}", "groups", arr);
}

void tdm_cp_act_note_worker(tdm_cp_act_t *a, const char *group, const char *role, const char *model,
                            int tp_size, const char *admin_url)
{
    pthread_mutex_lock(&a->mu);
    act_group_t *g = tdm_act_group_find(a, group);
    if (!g && a->n_groups < TDM_CP_ACT_GROUP_MAX && strlen(group) < TDM_CP_ACT_NAME_MAX &&
        admin_url && *admin_url) {
        g = &a->groups[a->n_groups++];
        memset(g, 0, sizeof(*g));
        snprintf(g->name, sizeof(g->name), "%s", group);
        g->kind = ACT_KIND_REGISTERED;
        g->base = json_object();
        g->config = json_object();
        snprintf(g->token, sizeof(g->token), "%s", a->admin_token);
        g->state = ACT_ST_RUNNING;
        g->started_us = tdm_time_wall_us();
        tdm_info(TDM_SUB_CP, "msg=\"unsupervised group registered\" group=%s role=%s url=%s", group,
                 role, admin_url);
    }
    if (g && g->kind == ACT_KIND_REGISTERED) {
        snprintf(g->mode, sizeof(g->mode), "%s", role);
        if (model && *model && !g->model[0])
            snprintf(g->model, sizeof(g->model), "%s", model);
        g->tp_size = tp_size;
        if (admin_url && *admin_url && strcmp(g->admin_url, admin_url) != 0) {
            snprintf(g->admin_url, sizeof(g->admin_url), "%s", admin_url);
            tdm_act_url_hostport(g);
        }
    } else if (g && !g->tp_size) {
        g->tp_size = tp_size;
    }
    pthread_mutex_unlock(&a->mu);
}

const char *tdm_act_health(const act_group_t *g)
{
    if (g->state == ACT_ST_FAILED && g->why[0])
        return g->why; /* the supervisor's reason: the start that failed (docs/groups.md) */
    if (g->state != ACT_ST_RUNNING)
        return act_state_name(g->state);
    if (!g->admin_url[0])
        return "unknown";
    return g->ready ? "ok" : g->why[0] ? g->why : "not ready";
}

int tdm_cp_act_group_exists(tdm_cp_act_t *a, const char *name)
{
    pthread_mutex_lock(&a->mu);
    int r = tdm_act_group_find(a, name) != NULL;
    pthread_mutex_unlock(&a->mu);
    return r;
}

int tdm_cp_act_route(tdm_cp_act_t *a, const char *model, char *host, size_t host_len,
                     uint16_t *port, int *ret_slot)
{
    int known = 0, best = -1, best_load = 0;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        if (!strcmp(g->mode, "prefill") || strcmp(g->model, model) != 0)
            continue;
        known = 1;
        if (!g->ready || g->state != ACT_ST_RUNNING || !g->port)
            continue;
        int load = atomic_load(&g->inflight);
        if (best < 0 || load < best_load) {
            best = (int)i;
            best_load = load;
        }
    }
    if (best >= 0) {
        act_group_t *g = &a->groups[best];
        atomic_fetch_add(&g->inflight, 1);
        snprintf(host, host_len, "%s", g->host);
        *port = g->port;
        *ret_slot = best;
    }
    pthread_mutex_unlock(&a->mu);
    return best >= 0 ? 1 : known ? 0 : -1;
}

void tdm_cp_act_release(tdm_cp_act_t *a, int slot)
{
    if (slot >= 0 && (size_t)slot < a->n_groups)
        atomic_fetch_sub(&a->groups[slot].inflight, 1);
}

json_t *tdm_cp_act_models(tdm_cp_act_t *a)
{
    json_t *data = json_array();
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        if (!strcmp(g->mode, "prefill") || !g->model[0])
            continue;
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            dup |= !strcmp(a->groups[j].model, g->model) && strcmp(a->groups[j].mode, "prefill");
        if (!dup)
            json_array_append_new(data, json_pack("{s:s,s:s,s:s}", "id", g->model, "object",
                                                  "model", "owned_by", "tandem"));
    }
    pthread_mutex_unlock(&a->mu);
    return json_pack("{s:s,s:o}", "object", "list", "data", data);
}
