/*
 * rest_act.c — the operator's actions and the fleet status: POST
 * /api/v1/groups/{g}/drain|resume|restart|reconfigure|faults (admin; the reply comes when the
 * action ends, or at once with 202 for ?wait=0) and GET /api/v1/status (groups, ranks, open
 * alerts).
 */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/act/act.h"
#include "controlplane/http/rest.h"

/* ---- actions -------------------------------------------------------------------------------- */

/* A request waiting for its action: the heap link outlives either side; whoever goes first
 * unhooks the other. */
typedef struct link {
    h2o_req_t *req;
    struct holder *holder;
} link_t;
typedef struct holder {
    link_t *link;
} holder_t;

static void holder_dispose(void *p)
{
    holder_t *h = p;
    if (h->link)
        h->link->req = NULL;
}

static void on_action_done(void *ctx, json_t *result)
{
    link_t *l = ctx;
    if (l->req) {
        l->holder->link = NULL;
        const char *outcome = json_string_value(json_object_get(result, "outcome"));
        char *text = json_dumps(result, JSON_SORT_KEYS);
        size_t n = strlen(text);
        char *body = h2o_mem_alloc_pool(&l->req->pool, n + 1);
        memcpy(body, text, n + 1);
        free(text);
        /* a fault's reply carries the worker's status (400 for a point it refuses) */
        json_int_t status = json_integer_value(json_object_get(result, "status"));
        int ok = outcome && !strcmp(outcome, "ok");
        tdm_httpd_send_json(l->req,
                            ok                              ? 200
                            : status >= 400 && status < 600 ? (int)status
                                                            : 500,
                            body, n);
    }
    tdm_free(l);
}

static void h_action(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *args,
                     const tdm_cp_token_t *who, const char *action)
{
    char group[TDM_CP_ACT_NAME_MAX], err[512], wait[8];
    if (args->v[0].len >= sizeof(group)) {
        tdm_httpd_send_error(req, 404, "not_found", "not_found_error", "no such group");
        return;
    }
    memcpy(group, args->v[0].base, args->v[0].len);
    group[args->v[0].len] = '\0';
    json_t *params = NULL;
    if (req->entity.base && req->entity.len) {
        json_error_t je;
        params = json_loadb(req->entity.base, req->entity.len, 0, &je);
        if (!json_is_object(params)) {
            json_decref(params);
            tdm_httpd_send_error(req, 400, "invalid_json", "invalid_request_error",
                                 "the body must be a JSON object");
            return;
        }
    }
    if (!s->act) {
        json_decref(params);
        tdm_httpd_send_error(req, 404, "not_found", "not_found_error",
                             "no worker groups (tandemd runs without --groups-config)");
        return;
    }
    json_t *r = json_pack("{s:s,s:s,s:o}", "action", action, "group", group, "params",
                          params ? params : json_object());
    int nowait = tdm_cp_query_get(req, "wait", wait, sizeof(wait)) &&
                 (!strcmp(wait, "0") || !strcmp(wait, "false"));
    link_t *l = NULL;
    if (!nowait) {
        l = tdm_calloc(1, sizeof(*l));
        holder_t *h = h2o_mem_alloc_shared(&req->pool, sizeof(*h), holder_dispose);
        h->link = l;
        l->holder = h;
        l->req = req;
    }
    tdm_status_t st =
        tdm_cp_act_submit(s->act, who->name, r, l ? on_action_done : NULL, l, err, sizeof(err));
    json_decref(r);
    if (st != TDM_OK) {
        if (l) {
            l->holder->link = NULL;
            tdm_free(l);
        }
        if (st == TDM_ERR_NOTFOUND)
            tdm_httpd_send_error(req, 404, "not_found", "not_found_error", "%s", err);
        else if (st == TDM_ERR_UNSUPPORTED)
            tdm_httpd_send_error(req, 409, "not_supervised", "invalid_request_error", "%s", err);
        else
            tdm_httpd_send_error(req, 400, "invalid_value", "invalid_request_error", "%s", err);
        return;
    }
    if (nowait) {
        static const char body[] = "{\"queued\":true}";
        tdm_httpd_send_json(req, 202, body, sizeof(body) - 1);
    }
}

void tdm_cp_h_drain(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                    const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "drain");
}

void tdm_cp_h_resume(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                     const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "resume");
}

void tdm_cp_h_restart(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                      const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "restart");
}

void tdm_cp_h_reconfigure(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                          const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "reconfigure");
}

void tdm_cp_h_fault(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                    const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "fault");
}

/* ---- status --------------------------------------------------------------------------------- */

void tdm_cp_h_status(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                     const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    json_t *o = s->act ? tdm_cp_act_status(s->act) : json_pack("{s:[]}", "groups");
    json_t *ranks = json_array();
    uint64_t now = tdm_time_mono_us();
    for (size_t i = 0; i < s->rings.n; i++) {
        const tdm_cp_rank_t *rk = s->rings.ranks[i];
        const tdm_cp_sample_t *x = tdm_cp_rank_latest(rk);
        if (!x)
            continue;
        json_array_append_new(
            ranks,
            json_pack("{s:s,s:s,s:I,s:I,s:s,s:I,s:I,s:I,s:I}", "group", rk->group, "instance_id",
                      rk->instance_id, "rank", (json_int_t)rk->rank, "iter", (json_int_t)x->iter,
                      "path", x->path, "waiting", (json_int_t)x->waiting, "running",
                      (json_int_t)x->running, "coll_seq", (json_int_t)x->coll_seq, "age_ms",
                      (json_int_t)((now - rk->last_recv_mono_us) / 1000u)));
    }
    json_object_set_new(o, "ranks", ranks);
    json_t *al = tdm_cp_alerts_to_json(s->alerts, "open", NULL);
    json_object_set(o, "alerts", json_object_get(al, "alerts"));
    json_decref(al);
    tdm_cp_rest_send_obj(req, 200, o);
}
