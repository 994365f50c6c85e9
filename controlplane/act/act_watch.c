/*
 * act_watch.c — the watcher thread: probes each group's /ready every second (the router skips
 * groups that are not ready; /ready is what routers use, I8), learns the served model name from
 * /v1/models, and runs the canary (docs/design.md §4): every canary_interval_s a fixed greedy
 * prompt through each ready serving group, compared with that group's first answer after its start;
 * a different answer is a `canary_mismatch` event for the detectors (CORRUPTION).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/act/act_int.h"

#define CANARY_PROMPT "The quick brown fox jumps over the lazy dog. The capital of France is"
#define CANARY_TOKENS 12

typedef struct probe {
    char name[TDM_CP_ACT_NAME_MAX];
    char url[256], model[512], mode[16];
    uint64_t started_us;
} probe_t;

static size_t snapshot(tdm_cp_act_t *a, probe_t *out)
{
    size_t n = 0;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->n_groups; i++) {
        act_group_t *g = &a->groups[i];
        /* only a running group is probed: a draining/restarting one stays out of the router */
        if (g->state != ACT_ST_RUNNING || !g->admin_url[0])
            continue;
        probe_t *p = &out[n++];
        snprintf(p->name, sizeof(p->name), "%s", g->name);
        snprintf(p->url, sizeof(p->url), "%s", g->admin_url);
        snprintf(p->model, sizeof(p->model), "%s", g->model);
        snprintf(p->mode, sizeof(p->mode), "%s", g->mode);
        p->started_us = g->started_us;
    }
    pthread_mutex_unlock(&a->mu);
    return n;
}

/* Parse host and port of http://HOST:PORT into the group (unit/external groups). */
void tdm_act_url_hostport(act_group_t *g)
{
    const char *p = strstr(g->admin_url, "://");
    p = p ? p + 3 : g->admin_url;
    const char *colon = strrchr(p, ':');
    if (!colon || (size_t)(colon - p) >= sizeof(g->host))
        return;
    memcpy(g->host, p, (size_t)(colon - p));
    g->host[colon - p] = '\0';
    g->port = (uint16_t)atoi(colon + 1);
}

static void probe_one(tdm_cp_act_t *a, const probe_t *p)
{
    char url[600], model[512] = "", why[256] = "";
    snprintf(url, sizeof(url), "%s/ready", p->url);
    char *rb = NULL;
    long code = tdm_act_http("GET", url, NULL, NULL, 1000, &rb);
    int ready = code == 200;
    if (!ready) {
        /* the worker's reason ({"error":{"message"}}: draining, not registered, a wedged rank) */
        json_t *o = rb ? json_loads(rb, 0, NULL) : NULL;
        const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
        if (m)
            snprintf(why, sizeof(why), "%s", m);
        else if (code < 0)
            snprintf(why, sizeof(why), "unreachable at %.200s", p->url);
        else
            snprintf(why, sizeof(why), "/ready answered %ld", code);
        json_decref(o);
    }
    tdm_free(rb);
    if (ready && strcmp(p->mode, "prefill") != 0) {
        char *body = NULL;
        snprintf(url, sizeof(url), "%s/v1/models", p->url);
        if (tdm_act_http("GET", url, NULL, NULL, 1000, &body) == 200) {
            json_t *o = json_loads(body, 0, NULL);
            const char *id = json_string_value(
                json_object_get(json_array_get(json_object_get(o, "data"), 0), "id"));
            if (id)
                snprintf(model, sizeof(model), "%s", id);
            json_decref(o);
        }
        tdm_free(body);
    }
    pthread_mutex_lock(&a->mu);
    act_group_t *g = tdm_act_group_find(a, p->name);
    /* the state may have changed while we asked (a drain began): never re-mark it ready */
    if (g && g->state == ACT_ST_RUNNING && g->started_us == p->started_us && !g->busy) {
        if (g->ready != ready || (!ready && strcmp(g->why, why) != 0))
            tdm_info(TDM_SUB_CP, "msg=\"health verdict changed\" group=%s ready=%d why=\"%s\"",
                     g->name, ready, why);
        g->ready = ready;
        snprintf(g->why, sizeof(g->why), "%s", why);
        if (model[0])
            snprintf(g->model, sizeof(g->model), "%s", model);
        if (!g->port)
            tdm_act_url_hostport(g);
    }
    pthread_mutex_unlock(&a->mu);
}

static void canary_one(tdm_cp_act_t *a, const probe_t *p)
{
    if (!strcmp(p->mode, "prefill") || !p->model[0])
        return;
    char url[600], *body = NULL;
    snprintf(url, sizeof(url), "%s/v1/completions", p->url);
    json_t *req = json_pack("{s:s,s:s,s:i,s:i}", "model", p->model, "prompt", CANARY_PROMPT,
                            "max_tokens", CANARY_TOKENS, "temperature", 0);
    char *rt = json_dumps(req, 0);
    json_decref(req);
    long code = tdm_act_http("POST", url, NULL, rt, 30000, &body);
    free(rt);
    json_t *o = code == 200 ? json_loads(body, 0, NULL) : NULL;
    tdm_free(body);
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(o, "choices"), 0), "text"));
    if (!text) {
        json_decref(o);
        return; /* not an answer: health and the other detectors speak for the group */
    }
    pthread_mutex_lock(&a->mu);
    act_group_t *g = tdm_act_group_find(a, p->name);
    if (g && g->started_us == p->started_us) {
        g->canary_checks++;
        snprintf(g->canary_last, sizeof(g->canary_last), "%s", text);
        if (g->canary_ref_started_us != g->started_us) {
            /* the first answer of this incarnation is the reference */
            snprintf(g->canary_ref, sizeof(g->canary_ref), "%s", text);
            g->canary_ref_started_us = g->started_us;
        } else if (strcmp(g->canary_ref, text) != 0) {
            g->canary_mismatches++;
            tdm_act_post(a, ACT_MSG_EVENT,
                         json_pack("{s:s,s:s,s:s,s:{s:s,s:s,s:s}}", "group", g->name, "type",
                                   "canary_mismatch", "reason", "canary answer changed", "data",
                                   "prompt", CANARY_PROMPT, "expected", g->canary_ref, "got", text),
                         NULL, NULL);
        }
    }
    pthread_mutex_unlock(&a->mu);
    json_decref(o);
}

void *tdm_act_watch_main(void *arg)
{
    tdm_cp_act_t *a = arg;
    probe_t *ps = tdm_calloc(TDM_CP_ACT_GROUP_MAX, sizeof(*ps));
    uint64_t last_canary = 0;
    for (;;) {
        size_t n = snapshot(a, ps);
        for (size_t i = 0; i < n; i++)
            probe_one(a, &ps[i]);
        uint64_t now = tdm_time_mono_us();
        if (a->o.canary_interval_s > 0 &&
            (last_canary == 0 || now - last_canary >= (uint64_t)(a->o.canary_interval_s * 1e6))) {
            last_canary = now;
            n = snapshot(a, ps);
            for (size_t i = 0; i < n; i++)
                canary_one(a, &ps[i]);
        }
        if (tdm_act_sleep(a, 1000))
            break;
    }
    tdm_free(ps);
    return NULL;
}
