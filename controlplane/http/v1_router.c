/*
 * v1_router.c — the OpenAI router: the /v1 routes proxied by h2o's reverse proxy — chunk by chunk,
 * so streaming works — to a ready decode (or colocated) group serving the request's `model`
 * (tdm_cp_act_route picks it). No group ready → 503 with Retry-After; no group serves the model →
 * 404 model_not_found.
 */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/act/act.h"
#include "controlplane/http/rest.h"

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
    tdm_cp_rest_send_obj(req, status, o);
}

void tdm_cp_h_v1_proxy(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
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

void tdm_cp_h_v1_models(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                        const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    tdm_cp_rest_send_obj(req, 200,
                         s->act ? tdm_cp_act_models(s->act)
                                : json_pack("{s:s,s:[]}", "object", "list", "data"));
}
