/*
 * act_routes.c — tandemd's routes for actions and the OpenAI router (a second route table, so
 * the first stays the database API's): POST /api/v1/groups/{g}/drain|restart|reconfigure|faults
 * (admin; the reply comes when the action ends, or at once with 202 for ?wait=0), GET
 * /api/v1/status (groups, ranks, open alerts), and the /v1 routes proxied by h2o's reverse proxy —
 * chunk by chunk, so streaming works — to a ready decode (or colocated) group serving the request's
 * `model`.
 * No group ready → 503 with Retry-After; no group serves the model → 404 model_not_found.
 */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/act/act.h"
#include "controlplane/http/cp_server.h"

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

static void h_drain(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                    const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "drain");
}

static void h_resume(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                     const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "resume");
}

static void h_restart(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                      const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "restart");
}

static void h_reconfigure(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                          const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "reconfigure");
}

static void h_fault(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                    const tdm_cp_token_t *who)
{
    h_action(s, req, a, who, "fault");
}

/* ---- status --------------------------------------------------------------------------------- */

static void send_obj(h2o_req_t *req, int status, json_t *o)
{
    char *text = json_dumps(o, JSON_SORT_KEYS);
    json_decref(o);
    size_t n = strlen(text);
    char *body = h2o_mem_alloc_pool(&req->pool, n + 1);
    memcpy(body, text, n + 1);
    free(text);
    tdm_httpd_send_json(req, status, body, n);
}

static void h_status(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
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
    send_obj(req, 200, o);
}

/* ---- the /v1 router ------------------------------------------------------------------------- */

typedef struct route_hold {
    tdm_cp_act_t *act;
    int slot;
} route_hold_t;

static void route_release(void *p)
{
    route_hold_t *h = p;
    tdm_cp_act_release(h->act, h->slot);
}

static void oai_error(h2o_req_t *req, int status, const char *code, const char *type,
                      const char *msg)
{
    json_t *o = json_pack("{s:{s:s,s:s,s:s,s:s}}", "error", "code", code, "message", msg, "type",
                          type, "param", "model");
    if (status == 503)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, H2O_STRLIT("2"));
    send_obj(req, status, o);
}

static void h_v1_proxy(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                       const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    json_error_t je;
    json_t *body = req->entity.base ? json_loadb(req->entity.base, req->entity.len, 0, &je) : NULL;
    const char *model = json_string_value(json_object_get(body, "model"));
    char msg[700], host[128];
    if (!model) {
        json_decref(body);
        oai_error(req, 400, "invalid_request", "invalid_request_error",
                  "the body must be a JSON object with a \"model\" string");
        return;
    }
    uint16_t port = 0;
    int slot = -1;
    int r = s->act ? tdm_cp_act_route(s->act, model, host, sizeof(host), &port, &slot) : -1;
    if (r <= 0) {
        snprintf(msg, sizeof(msg),
                 r < 0 ? "The model '%.500s' does not exist"
                       : "no worker group serving '%.500s' is ready; retry later",
                 model);
        json_decref(body);
        if (r < 0)
            oai_error(req, 404, "model_not_found", "not_found_error", msg);
        else
            oai_error(req, 503, "no_ready_group", "unavailable_error", msg);
        return;
    }
    json_decref(body);
    route_hold_t *h = h2o_mem_alloc_shared(&req->pool, sizeof(*h), route_release);
    h->act = s->act;
    h->slot = slot;
    h2o_req_overrides_t *ov = h2o_mem_alloc_pool(&req->pool, sizeof(*ov));
    memset(ov, 0, sizeof(*ov));
    ov->hostport.host = h2o_strdup(&req->pool, host, SIZE_MAX);
    ov->hostport.port = port;
    req->overrides = ov;
    h2o__proxy_process_request(req);
}

static void h_v1_models(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                        const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    send_obj(req, 200,
             s->act ? tdm_cp_act_models(s->act)
                    : json_pack("{s:s,s:[]}", "object", "list", "data"));
}

#define BODY_V1 (8u << 20) /* the workers' --max-request-bytes default */

const tdm_cp_route_t tdm_cp_act_routes[] = {
    {"POST", "/api/v1/groups/{group}/drain", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, h_drain},
    {"POST", "/api/v1/groups/{group}/resume", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, h_resume},
    {"POST", "/api/v1/groups/{group}/restart", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, h_restart},
    {"POST", "/api/v1/groups/{group}/reconfigure", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL,
     h_reconfigure},
    {"POST", "/api/v1/groups/{group}/faults", TDM_CP_ROLE_ADMIN, TDM_CP_BODY_SMALL, h_fault},
    {"GET", "/api/v1/status", TDM_CP_ROLE_READ, 0, h_status},
    {"POST", "/v1/completions", TDM_CP_ROLE_NONE, BODY_V1, h_v1_proxy},
    {"POST", "/v1/chat/completions", TDM_CP_ROLE_NONE, BODY_V1, h_v1_proxy},
    {"GET", "/v1/models", TDM_CP_ROLE_NONE, 0, h_v1_models},
};
const size_t tdm_cp_act_routes_count = sizeof(tdm_cp_act_routes) / sizeof(tdm_cp_act_routes[0]);
