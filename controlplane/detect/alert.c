/*
 * alert.c — the alert store: findings in, alerts out (open with evidence, deduplicated per
 * (group, class), auto-resolved after the rule has been false for 10 s, resolved by hand with a
 * mute until the rule clears), per-class policy and the remediation requests it yields as data.
 *
 * Open alerts live in one array (a deployment has a handful); resolved ones in a bounded ring for
 * the API, oldest dropped. Nothing here blocks: hooks are expected to queue.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>

#include <tdm/log.h>

#include "controlplane/detect/alert.h"

#define MAX_HOOKS 4

static const char *const policy_names[] = {"notify", "auto"};
_Static_assert(sizeof(policy_names) / sizeof(policy_names[0]) == TDM_CP_POLICY_MAX,
               "policy_names must name every policy");

typedef struct mute {
    tdm_cp_alert_class_t cls;
    char group[TDM_CP_NAME_MAX];
} mute_t;

struct tdm_cp_alerts {
    tdm_cp_alerts_cfg_t cfg;
    uint64_t next_id;
    tdm_cp_alert_t *open;
    size_t n_open, cap_open;
    tdm_cp_alert_t *resolved; /* ring of cfg.keep_resolved */
    size_t res_head, res_n;
    mute_t *mutes;
    size_t n_mutes, cap_mutes;
    tdm_cp_remedy_t *remedies; /* FIFO of cfg.max_remedies */
    size_t rem_head, rem_n;
    struct {
        tdm_cp_alert_hook_fn fn;
        void *ctx;
    } hooks[MAX_HOOKS];
    int n_hooks;
};

const char *tdm_cp_policy_name(tdm_cp_policy_t p)
{
    return (unsigned)p < TDM_CP_POLICY_MAX ? policy_names[p] : "?";
}

tdm_status_t tdm_cp_policy_parse(const char *spec, tdm_cp_policy_t policies[TDM_CP_ALERT_MAX],
                                 char *err, size_t err_len)
{
    tdm_cp_policy_t tmp[TDM_CP_ALERT_MAX];
    memcpy(tmp, policies, sizeof(tmp));
    const char *p = spec ? spec : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof(item)) {
            snprintf(err, err_len, "policy: bad item '%.*s' (expected CLASS=notify|auto)",
                     (int)(len > 40 ? 40 : len), p);
            return TDM_ERR_INVAL;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        int pol = -1;
        if (eq) {
            *eq = '\0';
            for (int i = 0; i < TDM_CP_POLICY_MAX; i++)
                if (strcmp(eq + 1, policy_names[i]) == 0)
                    pol = i;
        }
        tdm_cp_alert_class_t c;
        int all = strcmp(item, "all") == 0;
        if (pol < 0 || (!all && tdm_cp_alert_class_parse(item, &c) != TDM_OK)) {
            snprintf(err, err_len, "policy: bad item '%s%s%s' (expected CLASS=notify|auto)", item,
                     eq ? "=" : "", eq ? eq + 1 : "");
            return TDM_ERR_INVAL;
        }
        for (int i = 0; i < TDM_CP_ALERT_MAX; i++)
            if (all || i == (int)c)
                tmp[i] = (tdm_cp_policy_t)pol;
        p += len + (end ? 1 : 0);
    }
    memcpy(policies, tmp, sizeof(tmp));
    return TDM_OK;
}

void tdm_cp_alerts_cfg_default(tdm_cp_alerts_cfg_t *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->resolve_after_us = 10000000;
    ret->keep_resolved = 256;
    ret->max_remedies = 64;
    for (int i = 0; i < TDM_CP_ALERT_MAX; i++)
        ret->policy[i] = TDM_CP_POLICY_NOTIFY;
}

tdm_status_t tdm_cp_alerts_init(const tdm_cp_alerts_cfg_t *cfg, tdm_cp_alerts_t **ret)
{
    tdm_cp_alerts_cfg_t c;
    if (cfg)
        c = *cfg;
    else
        tdm_cp_alerts_cfg_default(&c);
    if (!c.resolve_after_us || !c.keep_resolved || !c.max_remedies)
        return TDM_ERR_INVAL;
    for (int i = 0; i < TDM_CP_ALERT_MAX; i++)
        if ((unsigned)c.policy[i] >= TDM_CP_POLICY_MAX)
            return TDM_ERR_INVAL;
    tdm_cp_alerts_t *s = tdm_calloc(1, sizeof(*s));
    s->cfg = c;
    s->next_id = 1;
    s->resolved = tdm_calloc(c.keep_resolved, sizeof(*s->resolved));
    s->remedies = tdm_calloc(c.max_remedies, sizeof(*s->remedies));
    *ret = s;
    return TDM_OK;
}

static void alert_release(tdm_cp_alert_t *a)
{
    json_decref(a->evidence);
    json_decref(a->remedy);
    a->evidence = a->remedy = NULL;
}

void tdm_cp_alerts_free(tdm_cp_alerts_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_open; i++)
        alert_release(&s->open[i]);
    for (size_t i = 0; i < s->res_n; i++)
        alert_release(&s->resolved[(s->res_head + s->cfg.keep_resolved - s->res_n + i) %
                                   s->cfg.keep_resolved]);
    for (size_t i = 0; i < s->rem_n; i++)
        json_decref(s->remedies[(s->rem_head + i) % s->cfg.max_remedies].request);
    tdm_free(s->open);
    tdm_free(s->resolved);
    tdm_free(s->mutes);
    tdm_free(s->remedies);
    tdm_free(s);
}

tdm_status_t tdm_cp_alerts_hook(tdm_cp_alerts_t *s, tdm_cp_alert_hook_fn fn, void *ctx)
{
    if (!fn || s->n_hooks == MAX_HOOKS)
        return TDM_ERR_INVAL;
    s->hooks[s->n_hooks].fn = fn;
    s->hooks[s->n_hooks].ctx = ctx;
    s->n_hooks++;
    return TDM_OK;
}

static void fire(tdm_cp_alerts_t *s, const tdm_cp_alert_t *a, tdm_cp_alert_event_t ev)
{
    if (ev == TDM_CP_ALERT_EV_OPEN)
        tdm_warn(TDM_SUB_CP,
                 "msg=\"alert opened\" id=%llu class=%s group=%s policy=%s summary=\"%s\"",
                 (unsigned long long)a->id, tdm_cp_alert_class_name(a->cls), a->group,
                 tdm_cp_policy_name(a->policy), a->summary);
    else
        tdm_info(TDM_SUB_CP, "msg=\"alert resolved\" id=%llu class=%s group=%s by=\"%s\"",
                 (unsigned long long)a->id, tdm_cp_alert_class_name(a->cls), a->group,
                 a->resolved_by);
    for (int i = 0; i < s->n_hooks; i++)
        s->hooks[i].fn(s->hooks[i].ctx, a, ev);
}

json_t *tdm_cp_alert_to_json(const tdm_cp_alert_t *a)
{
    json_t *o = json_pack(
        "{s:I,s:s,s:s,s:s,s:s,s:O,s:s,s:O,s:I}", "id", (json_int_t)a->id, "kind",
        tdm_cp_alert_class_name(a->cls), "group", a->group, "state",
        a->state == TDM_CP_ALERT_OPEN ? "open" : "resolved", "summary", a->summary, "evidence",
        a->evidence ? a->evidence : json_null(), "policy", tdm_cp_policy_name(a->policy), "remedy",
        a->remedy ? a->remedy : json_null(), "opened_us", (json_int_t)a->opened_us);
    json_object_set_new(o, "resolved_us",
                        a->state == TDM_CP_ALERT_RESOLVED ? json_integer((json_int_t)a->resolved_us)
                                                          : json_null());
    json_object_set_new(o, "resolved_by",
                        a->state == TDM_CP_ALERT_RESOLVED ? json_string(a->resolved_by)
                                                          : json_null());
    return o;
}

/* The remediation docs/design.md §4 prescribes for a finding, or NULL. */
static json_t *remedy_for(const tdm_cp_finding_t *f)
{
    switch (f->cls) {
    case TDM_CP_ALERT_WEDGE:
    case TDM_CP_ALERT_RANK_DIVERGENCE:
        return json_pack("{s:s,s:{s:s}}", "action", "restart_group", "params", "overlap", "off");
    case TDM_CP_ALERT_TRANSFER_STALL: {
        /* only the partition form (docs/alerts.md): its rooms already failed on both sides and
         * the channel registers again when the peer is reachable; restarting a peer that cannot
         * be reached does not bring it back */
        if (!json_integer_value(json_object_get(f->evidence, "stuck_rooms")) &&
            !json_array_size(json_object_get(f->evidence, "heartbeats")))
            return NULL;
        json_t *rooms = json_array();
        json_t *peers = json_array();
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(f->evidence, "rooms"), i, r)
        {
            json_array_append(rooms, json_object_get(r, "room"));
        }
        json_array_foreach(json_object_get(f->evidence, "heartbeats"), i, r)
        {
            json_array_append_new(peers, json_pack("{s:O,s:O}", "instance_id",
                                                   json_object_get(r, "instance_id"), "rank",
                                                   json_object_get(r, "rank")));
        }
        return json_pack("{s:s,s:{s:o,s:o}}", "action", "fail_rooms_restart_peer", "params",
                         "rooms", rooms, "stale_threads", peers);
    }
    case TDM_CP_ALERT_CORRUPTION:
        if (!f->host_tier)
            return NULL;
        return json_pack("{s:s,s:{s:s}}", "action", "restart_group", "params", "hicache", "off");
    case TDM_CP_ALERT_WORKER_LOST:
        return json_pack("{s:s,s:{}}", "action", "restart_group", "params");
    default:
        return NULL;
    }
}

static void remedy_queue(tdm_cp_alerts_t *s, const tdm_cp_alert_t *a)
{
    size_t cap = s->cfg.max_remedies;
    if (s->rem_n == cap) { /* drop the oldest: a newer request supersedes it */
        json_decref(s->remedies[s->rem_head].request);
        s->rem_head = (s->rem_head + 1) % cap;
        s->rem_n--;
    }
    tdm_cp_remedy_t *r = &s->remedies[(s->rem_head + s->rem_n) % cap];
    r->alert_id = a->id;
    r->cls = a->cls;
    snprintf(r->group, sizeof(r->group), "%s", a->group);
    r->request =
        json_pack("{s:I,s:s,s:s,s:O,s:O}", "alert_id", (json_int_t)a->id, "group", a->group, "kind",
                  tdm_cp_alert_class_name(a->cls), "action", json_object_get(a->remedy, "action"),
                  "params", json_object_get(a->remedy, "params"));
    s->rem_n++;
}

int tdm_cp_alerts_take_remedy(tdm_cp_alerts_t *s, tdm_cp_remedy_t *ret)
{
    if (!s->rem_n)
        return 0;
    *ret = s->remedies[s->rem_head];
    s->remedies[s->rem_head].request = NULL;
    s->rem_head = (s->rem_head + 1) % s->cfg.max_remedies;
    s->rem_n--;
    return 1;
}

static int mute_find(const tdm_cp_alerts_t *s, const char *group, tdm_cp_alert_class_t cls)
{
    for (size_t i = 0; i < s->n_mutes; i++)
        if (s->mutes[i].cls == cls && strcmp(s->mutes[i].group, group) == 0)
            return (int)i;
    return -1;
}

/* Move open[i] to the resolved ring and tell the hooks. */
static void resolve_at(tdm_cp_alerts_t *s, size_t i, const char *by, uint64_t wall_us)
{
    tdm_cp_alert_t a = s->open[i];
    s->open[i] = s->open[--s->n_open];
    a.state = TDM_CP_ALERT_RESOLVED;
    a.resolved_us = wall_us;
    snprintf(a.resolved_by, sizeof(a.resolved_by), "%s", by);
    size_t k = s->cfg.keep_resolved;
    tdm_cp_alert_t *slot = &s->resolved[s->res_head];
    if (s->res_n == k)
        alert_release(slot);
    else
        s->res_n++;
    *slot = a;
    s->res_head = (s->res_head + 1) % k;
    fire(s, slot, TDM_CP_ALERT_EV_RESOLVE);
}

size_t tdm_cp_alerts_apply(tdm_cp_alerts_t *s, const tdm_cp_findings_t *f, uint64_t mono_us,
                           uint64_t wall_us)
{
    size_t changes = 0;
    /* mutes clear once their rule is false */
    for (size_t i = 0; i < s->n_mutes;) {
        if (!tdm_cp_findings_get(f, s->mutes[i].group, s->mutes[i].cls))
            s->mutes[i] = s->mutes[--s->n_mutes];
        else
            i++;
    }
    for (size_t i = 0; i < f->n; i++) {
        const tdm_cp_finding_t *x = &f->v[i];
        tdm_cp_alert_t *a = (tdm_cp_alert_t *)tdm_cp_alerts_open_get(s, x->group, x->cls);
        if (a) {
            a->last_true_mono = mono_us;
            json_decref(a->evidence);
            a->evidence = json_incref(x->evidence);
            snprintf(a->summary, sizeof(a->summary), "%s", x->summary);
            continue;
        }
        if (mute_find(s, x->group, x->cls) >= 0)
            continue;
        if (s->n_open == s->cap_open) {
            s->cap_open = s->cap_open ? 2 * s->cap_open : 8;
            s->open = tdm_realloc(s->open, s->cap_open * sizeof(*s->open));
        }
        a = &s->open[s->n_open++];
        memset(a, 0, sizeof(*a));
        /* one id, assigned here and written to the alerts table as is (the live view and the
         * table agree): the wall clock in µs, or one past the last id if that is later, so ids
         * grow across tandemd's restarts without asking the database for a number */
        a->id = s->next_id > wall_us ? s->next_id : wall_us;
        s->next_id = a->id + 1;
        a->cls = x->cls;
        snprintf(a->group, sizeof(a->group), "%s", x->group);
        snprintf(a->summary, sizeof(a->summary), "%s", x->summary);
        a->evidence = x->evidence ? json_incref(x->evidence) : json_object();
        a->remedy = remedy_for(x);
        a->policy = s->cfg.policy[x->cls];
        a->opened_us = wall_us;
        a->opened_mono = a->last_true_mono = mono_us;
        changes++;
        if (a->policy == TDM_CP_POLICY_AUTO && a->remedy)
            remedy_queue(s, a);
        fire(s, a, TDM_CP_ALERT_EV_OPEN);
    }
    for (size_t i = 0; i < s->n_open;) {
        tdm_cp_alert_t *a = &s->open[i];
        if (mono_us - a->last_true_mono >= s->cfg.resolve_after_us) {
            resolve_at(s, i, "auto", wall_us);
            changes++;
        } else {
            i++;
        }
    }
    return changes;
}

tdm_status_t tdm_cp_alerts_resolve(tdm_cp_alerts_t *s, uint64_t id, const char *by,
                                   uint64_t wall_us)
{
    if (!by || !*by || strlen(by) >= TDM_CP_RESOLVED_BY_MAX)
        return TDM_ERR_INVAL;
    for (size_t i = 0; i < s->n_open; i++) {
        if (s->open[i].id != id)
            continue;
        if (mute_find(s, s->open[i].group, s->open[i].cls) < 0) {
            if (s->n_mutes == s->cap_mutes) {
                s->cap_mutes = s->cap_mutes ? 2 * s->cap_mutes : 8;
                s->mutes = tdm_realloc(s->mutes, s->cap_mutes * sizeof(*s->mutes));
            }
            mute_t *m = &s->mutes[s->n_mutes++];
            m->cls = s->open[i].cls;
            snprintf(m->group, sizeof(m->group), "%s", s->open[i].group);
        }
        resolve_at(s, i, by, wall_us);
        return TDM_OK;
    }
    return tdm_cp_alerts_get(s, id) ? TDM_ERR_STATE : TDM_ERR_NOTFOUND;
}

const tdm_cp_alert_t *tdm_cp_alerts_open_get(const tdm_cp_alerts_t *s, const char *group,
                                             tdm_cp_alert_class_t cls)
{
    for (size_t i = 0; i < s->n_open; i++)
        if (s->open[i].cls == cls && strcmp(s->open[i].group, group) == 0)
            return &s->open[i];
    return NULL;
}

static const tdm_cp_alert_t *resolved_at(const tdm_cp_alerts_t *s, size_t newest_first)
{
    size_t k = s->cfg.keep_resolved;
    return &s->resolved[(s->res_head + k - 1 - newest_first) % k];
}

const tdm_cp_alert_t *tdm_cp_alerts_get(const tdm_cp_alerts_t *s, uint64_t id)
{
    for (size_t i = 0; i < s->n_open; i++)
        if (s->open[i].id == id)
            return &s->open[i];
    for (size_t i = 0; i < s->res_n; i++)
        if (resolved_at(s, i)->id == id)
            return resolved_at(s, i);
    return NULL;
}

size_t tdm_cp_alerts_open_count(const tdm_cp_alerts_t *s)
{
    return s->n_open;
}

int tdm_cp_alerts_group_open(const tdm_cp_alerts_t *s, const char *group)
{
    for (size_t i = 0; i < s->n_open; i++)
        if (strcmp(s->open[i].group, group) == 0)
            return 1;
    return 0;
}

static int cmp_open_newest(const void *a, const void *b)
{
    uint64_t x = (*(const tdm_cp_alert_t *const *)a)->id;
    uint64_t y = (*(const tdm_cp_alert_t *const *)b)->id;
    return x > y ? -1 : x < y;
}

json_t *tdm_cp_alerts_to_json(const tdm_cp_alerts_t *s, const char *state, const char *group)
{
    json_t *arr = json_array();
    int want_open = !state || strcmp(state, "open") == 0;
    int want_res = !state || strcmp(state, "resolved") == 0;
    if (want_open && s->n_open) {
        const tdm_cp_alert_t **v = tdm_malloc(s->n_open * sizeof(*v));
        for (size_t i = 0; i < s->n_open; i++)
            v[i] = &s->open[i];
        qsort(v, s->n_open, sizeof(*v), cmp_open_newest);
        for (size_t i = 0; i < s->n_open; i++)
            if (!group || strcmp(v[i]->group, group) == 0)
                json_array_append_new(arr, tdm_cp_alert_to_json(v[i]));
        tdm_free(v);
    }
    for (size_t i = 0; want_res && i < s->res_n; i++) {
        const tdm_cp_alert_t *a = resolved_at(s, i);
        if (!group || strcmp(a->group, group) == 0)
            json_array_append_new(arr, tdm_cp_alert_to_json(a));
    }
    return json_pack("{s:o}", "alerts", arr);
}

void tdm_cp_alerts_mark_persist(const tdm_cp_alerts_t *s, tdm_cp_rings_t *rings)
{
    for (size_t i = 0; i < rings->n; i++)
        rings->ranks[i]->persist_all = (uint8_t)tdm_cp_alerts_group_open(s, rings->ranks[i]->group);
}
