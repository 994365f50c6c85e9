/*
 * ctl_render.c — tandemctl's tables: tandemd's JSON as columns a person reads, with times as
 * "12s ago" or local time rather than epoch microseconds. Rows of earlier incarnations (a
 * restarted group's old instance) and resolved alerts stay hidden unless the view asks for all;
 * a footer says how many were hidden so nothing disappears silently.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controlplane/ctl/ctl.h"

#define S(o, k) str_or_dash(json_object_get((o), (k)))
#define I(o, k) ((long long)json_integer_value(json_object_get((o), (k))))
#define U(o, k) ((uint64_t)json_integer_value(json_object_get((o), (k))))

static const char *str_or_dash(json_t *v)
{
    const char *s = json_string_value(v);
    return s && *s ? s : "-";
}

void tdm_ctl_fmt_ago(char *buf, size_t len, uint64_t now_us, uint64_t then_us)
{
    if (!then_us) {
        snprintf(buf, len, "-");
        return;
    }
    uint64_t s = now_us > then_us ? (now_us - then_us) / 1000000u : 0;
    if (s < 120)
        snprintf(buf, len, "%" PRIu64 "s ago", s);
    else if (s < 7200)
        snprintf(buf, len, "%" PRIu64 "m ago", s / 60);
    else if (s < 172800)
        snprintf(buf, len, "%" PRIu64 "h ago", s / 3600);
    else
        snprintf(buf, len, "%" PRIu64 "d ago", s / 86400);
}

void tdm_ctl_fmt_local(char *buf, size_t len, uint64_t us)
{
    if (!us) {
        snprintf(buf, len, "-");
        return;
    }
    time_t t = (time_t)(us / 1000000u);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

/* The newest incarnation of a group is the instance whose latest sample is youngest. */
static const char *newest_instance(json_t *ranks, const char *group)
{
    size_t i;
    json_t *r;
    const char *best = NULL;
    long long best_age = 0;
    json_array_foreach(ranks, i, r)
    {
        if (strcmp(S(r, "group"), group) != 0)
            continue;
        if (!best || I(r, "age_ms") < best_age) {
            best = S(r, "instance_id");
            best_age = I(r, "age_ms");
        }
    }
    return best;
}

void tdm_ctl_render_status(FILE *out, json_t *o, const tdm_ctl_view_t *v)
{
    size_t i;
    json_t *g;
    char age[32];
    fprintf(out, "%-16s %-10s %-8s %-9s %-24s %-3s %-8s %-4s %-9s %-24s %s\n", "GROUP", "KIND",
            "MODE", "STATE", "HEALTH", "TP", "PID", "CFG", "STARTED", "URL", "CANARY");
    json_array_foreach(json_object_get(o, "groups"), i, g)
    {
        json_t *c = json_object_get(g, "canary");
        tdm_ctl_fmt_ago(age, sizeof(age), v->now_us, U(g, "started_us"));
        char pid[16];
        snprintf(pid, sizeof(pid), "%lld", I(g, "pid"));
        fprintf(out, "%-16s %-10s %-8s %-9s %-24.48s %-3lld %-8s v%-3lld %-9s %-24s %lld/%lld\n",
                S(g, "name"), S(g, "kind"), S(g, "mode"), S(g, "state"), S(g, "health"),
                I(g, "tp_size"), I(g, "pid") ? pid : "-", I(g, "config_version"), age,
                S(g, "admin_url"), I(c, "mismatches"), I(c, "checks"));
    }
    /* supervised groups whose starts fail: the count, the next retry or that there is none, and
     * the whole reason (HEALTH is cut at 48 characters); docs/groups.md "Failed starts" */
    json_array_foreach(json_object_get(o, "groups"), i, g)
    {
        json_t *r = json_object_get(g, "retry");
        long long n = I(r, "failures");
        if (n <= 0)
            continue;
        char when[64];
        uint64_t next = U(r, "next_us");
        if (json_is_true(json_object_get(r, "gave_up")))
            snprintf(when, sizeof(when), "no more retries (tandemctl restart %.24s)", S(g, "name"));
        else if (next)
            snprintf(when, sizeof(when), "retry %lld of %lld in %.1fs", n, I(r, "limit"),
                     next > v->now_us ? (double)(next - v->now_us) / 1e6 : 0.0);
        else if (!strcmp(S(g, "state"), "running"))
            snprintf(when, sizeof(when), "running again");
        else
            snprintf(when, sizeof(when), "retry %lld of %lld under way", n, I(r, "limit"));
        /* the last failure a crash soon after /ready (a crash loop) or a start that failed */
        fprintf(out, "%s: %s %lld time%s in a row, %s: %s\n", S(g, "name"),
                !strcmp(S(r, "cause"), "crash") ? "failed" : "start failed", n, n == 1 ? "" : "s",
                when, S(r, "last_error"));
    }
    json_t *ranks = json_object_get(o, "ranks");
    size_t hidden = 0;
    fprintf(out, "\n%-16s %-18s %-4s %-10s %-8s %-7s %-7s %s\n", "GROUP", "INSTANCE", "RANK",
            "ITER", "PATH", "WAITING", "RUNNING", "LAST SAMPLE");
    json_array_foreach(ranks, i, g)
    {
        const char *newest = newest_instance(ranks, S(g, "group"));
        if (!v->all && newest && strcmp(newest, S(g, "instance_id")) != 0) {
            hidden++;
            continue;
        }
        long long ms = I(g, "age_ms");
        fprintf(out, "%-16s %-18s %-4lld %-10lld %-8s %-7lld %-7lld %lld.%01llds ago\n",
                S(g, "group"), S(g, "instance_id"), I(g, "rank"), I(g, "iter"), S(g, "path"),
                I(g, "waiting"), I(g, "running"), ms / 1000, (ms % 1000) / 100);
    }
    if (hidden)
        fprintf(out, "(%zu rank%s of earlier incarnations hidden; --all shows them)\n", hidden,
                hidden == 1 ? "" : "s");
    json_t *al = json_object_get(o, "alerts");
    fprintf(out, "\nopen alerts: %zu\n", json_array_size(al));
    json_array_foreach(al, i, g)
    {
        tdm_ctl_fmt_ago(age, sizeof(age), v->now_us, U(g, "opened_us"));
        fprintf(out, "  #%-4lld %-18s %-16s %-9s %s\n", I(g, "id"), S(g, "kind"), S(g, "group"),
                age, S(g, "summary"));
    }
}

void tdm_ctl_render_alerts(FILE *out, json_t *o, const tdm_ctl_view_t *v)
{
    size_t i, hidden = 0;
    json_t *a;
    char opened[32], resolved[32];
    fprintf(out, "%-5s %-18s %-16s %-9s %-9s %-9s %-18s %s\n", "ID", "KIND", "GROUP", "STATE",
            "OPENED", "RESOLVED", "RESOLVED BY", "SUMMARY");
    json_array_foreach(json_object_get(o, "alerts"), i, a)
    {
        if (!v->all && strcmp(S(a, "state"), "open") != 0) {
            hidden++;
            continue;
        }
        tdm_ctl_fmt_ago(opened, sizeof(opened), v->now_us, U(a, "opened_us"));
        tdm_ctl_fmt_ago(resolved, sizeof(resolved), v->now_us, U(a, "resolved_us"));
        fprintf(out, "%-5lld %-18s %-16s %-9s %-9s %-9s %-18s %s\n", I(a, "id"), S(a, "kind"),
                S(a, "group"), S(a, "state"), opened, resolved, S(a, "resolved_by"),
                S(a, "summary"));
    }
    if (hidden)
        fprintf(out, "(%zu resolved alert%s hidden; --all shows them)\n", hidden,
                hidden == 1 ? "" : "s");
}

void tdm_ctl_render_actions(FILE *out, json_t *o, const tdm_ctl_view_t *v)
{
    size_t i;
    json_t *a;
    char when[32], took[32];
    fprintf(out, "%-6s %-19s %-20s %-18s %-16s %-8s %-8s %s\n", "ID", "TIME", "ACTOR", "ACTION",
            "TARGET", "OUTCOME", "TOOK", "DETAIL");
    json_array_foreach(json_object_get(o, "actions"), i, a)
    {
        tdm_ctl_fmt_local(when, sizeof(when), U(a, "ts_us"));
        uint64_t t0 = U(a, "ts_us"), t1 = U(a, "finished_us");
        if (t1 >= t0 && t1)
            snprintf(took, sizeof(took), "%.1fs", (double)(t1 - t0) / 1e6);
        else
            snprintf(took, sizeof(took), "-");
        fprintf(out, "%-6lld %-19s %-20s %-18s %-16s %-8s %-8s %s\n", I(a, "id"), when,
                S(a, "actor"), S(a, "action"), S(a, "target"), S(a, "outcome"), took,
                S(a, "detail"));
    }
    (void)v;
}

void tdm_ctl_render_transfers(FILE *out, json_t *o, const tdm_ctl_view_t *v)
{
    size_t i;
    json_t *t;
    char first[32], last[32];
    fprintf(out, "%-16s %-20s %-16s %-9s %-9s %s\n", "ROOM", "STATE", "GROUP", "STARTED", "LAST",
            "EVENTS");
    json_array_foreach(json_object_get(o, "transfers"), i, t)
    {
        tdm_ctl_fmt_ago(first, sizeof(first), v->now_us, U(t, "first_us"));
        tdm_ctl_fmt_ago(last, sizeof(last), v->now_us, U(t, "last_us"));
        fprintf(out, "%-16s %-20s %-16s %-9s %-9s %lld\n", S(t, "room"), S(t, "state"),
                S(t, "group"), first, last, I(t, "events"));
    }
}

void tdm_ctl_render_trace(FILE *out, json_t *o, const tdm_ctl_view_t *v)
{
    size_t i;
    json_t *e;
    char when[32];
    uint64_t t0 = 0;
    (void)v;
    fprintf(out, "room %s\n%-23s %-10s %-16s %-4s %-12s %-38s %s\n", S(o, "room"), "TIME", "+MS",
            "GROUP", "RANK", "TYPE", "TRANSITION", "REASON");
    json_array_foreach(json_object_get(o, "events"), i, e)
    {
        uint64_t ts = U(e, "ts_us");
        if (!t0)
            t0 = ts;
        tdm_ctl_fmt_local(when, sizeof(when), ts);
        char tr[96];
        snprintf(tr, sizeof(tr), "%s -> %s", S(e, "from_state"), S(e, "to_state"));
        char *data = NULL;
        json_t *d = json_object_get(e, "data");
        if (d && !json_is_null(d) && json_object_size(d))
            data = json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS);
        fprintf(out, "%s.%03u %-10.3f %-16s %-4lld %-12s %-38s %s%s%s\n", when,
                (unsigned)(ts / 1000u % 1000u), (double)(ts - t0) / 1e3, S(e, "group"),
                I(e, "rank"), S(e, "type"), tr, S(e, "reason"), data ? " " : "", data ? data : "");
        free(data);
    }
}

void tdm_ctl_render_tokens(FILE *out, json_t *o, const tdm_ctl_view_t *v)
{
    size_t i, hidden = 0;
    json_t *t;
    char created[32], revoked[32];
    fprintf(out, "%-24s %-6s %-19s %s\n", "NAME", "ROLE", "CREATED", "REVOKED");
    json_array_foreach(json_object_get(o, "tokens"), i, t)
    {
        if (!v->all && U(t, "revoked_us")) {
            hidden++;
            continue;
        }
        tdm_ctl_fmt_local(created, sizeof(created), U(t, "created_us"));
        tdm_ctl_fmt_local(revoked, sizeof(revoked), U(t, "revoked_us"));
        fprintf(out, "%-24s %-6s %-19s %s\n", S(t, "name"), S(t, "role"), created, revoked);
    }
    if (hidden)
        fprintf(out, "(%zu revoked token%s hidden; --all shows them)\n", hidden,
                hidden == 1 ? "" : "s");
}
