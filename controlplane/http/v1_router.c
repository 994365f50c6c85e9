/*
 * v1_router.c — the OpenAI router: the /v1 routes forwarded to a ready decode (or colocated)
 * group serving the request's `model` (tdm_cp_act_route picks it), chunk by chunk, so streaming
 * works. No group ready → 503 with Retry-After; no group serves the model → 404
 * model_not_found.
 *
 * The forwarder is h2o's HTTP/1 client (h2o_http1client_*, the public half of h2o's reverse
 * proxy) driven from here rather than h2o__proxy_process_request, so that a client that goes away
 * is noticed at once and the upstream request to the worker is closed with it (docs/serving.md
 * "Client aborts"): h2o's HTTP/1 server stops reading a connection while it responds and sees a
 * reset only when it next writes, i.e. when the worker sends its next chunk — an iteration or
 * more later, during which the worker keeps computing rows for nobody. Here, while an HTTP/1
 * response is forwarded, the client's socket is read (nginx's ngx_http_test_reading does the
 * same): EOF or an error means the client is gone (a client that half-closes after its request
 * counts as gone, as in nginx and in the worker); bytes (a pipelined request) stop the reading
 * and stay in the socket's buffer for h2o to parse after this response. A client gone cancels the
 * upstream (its socket closes, so the worker sees EOF at once and aborts the request) and ends the
 * response with an error, which makes h2o close the connection.
 */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/act/act.h"
#include "controlplane/http/rest.h"

/* ---- the forwarder -------------------------------------------------------------------------- */

typedef struct v1_fwd {
    h2o_generator_t super;
    h2o_req_t *req;
    tdm_cp_server_t *srv;
    tdm_cp_act_t *act;
    int slot;                  /* the route's in-flight count, released when the request goes */
    h2o_http1client_t *client; /* NULL once the upstream ended or was cancelled */
    h2o_iovec_t up[2];         /* the upstream request: head, body */
    h2o_buffer_t *rest;        /* what the upstream sent before it ended, not yet sent */
    h2o_doublebuffer_t sending;
    int started;             /* h2o_start_response was called */
    int failed;              /* end the response with an error */
    tdm_httpd_watch_t watch; /* the client's socket, read for EOF while forwarding (HTTP/1) */
} v1_fwd_t;

static void fwd_dispose(void *p)
{
    v1_fwd_t *f = p;
    /* h2o disposes of the request right before it reads the connection's next request or
     * closes it: the socket is h2o's again, so no read_stop here */
    tdm_httpd_watch_forget(&f->watch);
    if (f->client) {
        h2o_http1client_cancel(f->client);
        f->client = NULL;
    }
    h2o_buffer_dispose(&f->rest);
    h2o_doublebuffer_dispose(&f->sending);
    tdm_cp_act_release(f->act, f->slot);
}

/* Send what is buffered; only when no send is in flight (h2o's generator contract). */
static void fwd_send(v1_fwd_t *f)
{
    h2o_iovec_t v = h2o_doublebuffer_prepare(
        &f->sending, f->client ? &f->client->sock->input : &f->rest, f->req->preferred_chunk_size);
    size_t n = 1;
    h2o_send_state_t state = H2O_SEND_STATE_IN_PROGRESS;
    if (!f->client && v.len == f->sending.buf->size && f->rest->size == 0) {
        n = v.len != 0;
        state = H2O_SEND_STATE_FINAL;
    } else if (v.len == 0) {
        return; /* more comes from the upstream */
    }
    if (f->failed)
        state = H2O_SEND_STATE_ERROR; /* h2o ends the response broken and closes */
    if (state != H2O_SEND_STATE_IN_PROGRESS)
        tdm_httpd_watch_stop(
            &f->watch); /* the socket is h2o's again once the last send completes */
    h2o_send(f->req, &v, n, state);
}

static void fwd_proceed(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    v1_fwd_t *f = (v1_fwd_t *)g;
    h2o_doublebuffer_consume(&f->sending);
    fwd_send(f);
}

static void fwd_stop(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    v1_fwd_t *f = (v1_fwd_t *)g;
    tdm_httpd_watch_stop(&f->watch);
    if (f->client) {
        h2o_http1client_cancel(f->client);
        f->client = NULL;
    }
}

static int fwd_on_body(h2o_http1client_t *client, const char *errstr)
{
    v1_fwd_t *f = client->data;
    if (errstr) {
        /* keep what arrived; the upstream is over (the client closes its socket) */
        h2o_buffer_t *t = f->rest;
        f->rest = client->sock->input;
        client->sock->input = t;
        f->client = NULL;
        if (errstr != h2o_http1client_error_is_eos) {
            h2o_req_log_error(f->req, "v1_router", "upstream: %s", errstr);
            f->failed = 1;
        }
    }
    if (!f->sending.bytes_inflight)
        fwd_send(f);
    return 0;
}

static void fwd_gateway_error(v1_fwd_t *f, const char *why)
{
    f->client = NULL;
    tdm_httpd_watch_stop(&f->watch);
    h2o_req_log_error(f->req, "v1_router", "upstream: %s", why);
    h2o_send_error_502(f->req, "Gateway Error", why, 0);
}

static h2o_http1client_body_cb fwd_on_head(h2o_http1client_t *client, const char *errstr,
                                           int minor_version, int status, h2o_iovec_t msg,
                                           h2o_header_t *headers, size_t num_headers, int rlen)
{
    (void)minor_version;
    (void)rlen;
    v1_fwd_t *f = client->data;
    h2o_req_t *req = f->req;
    if (errstr && errstr != h2o_http1client_error_is_eos) {
        fwd_gateway_error(f, errstr);
        return NULL;
    }
    req->res.status = status;
    req->res.reason = h2o_strdup(&req->pool, msg.base, msg.len).base;
    for (size_t i = 0; i < num_headers; i++) {
        h2o_iovec_t v = h2o_strdup(&req->pool, headers[i].value.base, headers[i].value.len);
        if (h2o_iovec_is_token(headers[i].name)) {
            const h2o_token_t *t = H2O_STRUCT_FROM_MEMBER(h2o_token_t, buf, headers[i].name);
            if (t->proxy_should_drop_for_res)
                continue;
            if (t == H2O_TOKEN_CONTENT_LENGTH) {
                req->res.content_length = h2o_strtosize(v.base, v.len);
                if (req->res.content_length == SIZE_MAX) {
                    fwd_gateway_error(f, "invalid content-length from the worker");
                    return NULL;
                }
                continue;
            }
            h2o_add_header(&req->pool, &req->res.headers, t, headers[i].orig_name, v.base, v.len);
        } else {
            h2o_iovec_t n = h2o_strdup(&req->pool, headers[i].name->base, headers[i].name->len);
            h2o_add_header_by_str(&req->pool, &req->res.headers, n.base, n.len, 0,
                                  headers[i].orig_name, v.base, v.len);
        }
    }
    f->started = 1;
    h2o_start_response(req, &f->super);
    if (errstr == h2o_http1client_error_is_eos) {
        f->client = NULL;
        fwd_send(f);
        return NULL;
    }
    return fwd_on_body;
}

static h2o_http1client_head_cb fwd_on_connect(h2o_http1client_t *client, const char *errstr,
                                              h2o_iovec_t **reqbufs, size_t *reqbufcnt,
                                              int *method_is_head)
{
    v1_fwd_t *f = client->data;
    if (errstr) {
        fwd_gateway_error(f, errstr);
        return NULL;
    }
    *reqbufs = f->up;
    *reqbufcnt = f->up[1].len ? 2 : 1;
    *method_is_head = 0;
    return fwd_on_head;
}

/* The client is gone: close the upstream now (the worker sees EOF and aborts the request) and
 * end the response with an error, after which h2o closes the connection. */
static void fwd_client_gone(v1_fwd_t *f)
{
    h2o_req_t *req = f->req;
    f->srv->v1_clients_gone++;
    tdm_httpd_watch_stop(&f->watch);
    if (f->client) {
        h2o_http1client_cancel(f->client);
        f->client = NULL;
    }
    f->failed = 1;
    req->http1_is_persistent = 0;
    if (!f->started) /* the worker has not answered yet */
        h2o_send_error_generic(req, 499, "Client Closed Request",
                               "the client closed the connection",
                               H2O_SEND_ERROR_HTTP1_CLOSE_CONNECTION);
    else if (!f->sending.bytes_inflight)
        fwd_send(f);
    /* else the send in flight completes (or fails) first; fwd_proceed then ends it */
}

static void fwd_on_gone(tdm_httpd_watch_t *w)
{
    fwd_client_gone(H2O_STRUCT_FROM_MEMBER(v1_fwd_t, watch, w));
}

/* The upstream request: method, path, the client's headers less the hop-by-hop ones, the body. */
static h2o_iovec_t fwd_head(h2o_req_t *req, const char *host, uint16_t port)
{
    size_t cap = req->method.len + req->path.len + strlen(host) + 128;
    for (size_t i = 0; i < req->headers.size; i++)
        cap += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
    char *b = h2o_mem_alloc_pool(&req->pool, cap);
    int n = snprintf(b, cap,
                     "%.*s %.*s HTTP/1.1\r\nconnection: close\r\nhost: %s:%u\r\n"
                     "content-length: %zu\r\n",
                     (int)req->method.len, req->method.base, (int)req->path.len, req->path.base,
                     host, (unsigned)port, req->entity.base ? req->entity.len : 0);
    size_t off = (size_t)n;
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = &req->headers.entries[i];
        if (h2o_iovec_is_token(h->name)) {
            const h2o_token_t *t = (const h2o_token_t *)h->name;
            if (t->proxy_should_drop_for_req || t == H2O_TOKEN_CONTENT_LENGTH ||
                t == H2O_TOKEN_HOST)
                continue;
        }
        const char *name = h->orig_name ? h->orig_name : h->name->base;
        memcpy(b + off, name, h->name->len);
        off += h->name->len;
        memcpy(b + off, ": ", 2);
        memcpy(b + off + 2, h->value.base, h->value.len);
        off += 2 + h->value.len;
        memcpy(b + off, "\r\n", 2);
        off += 2;
    }
    memcpy(b + off, "\r\n", 2);
    return h2o_iovec_init(b, off + 2);
}

/* ---- the /v1 router ------------------------------------------------------------------------- */

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
    v1_fwd_t *f = h2o_mem_alloc_shared(&req->pool, sizeof(*f), fwd_dispose);
    memset(f, 0, sizeof(*f));
    f->super.proceed = fwd_proceed;
    f->super.stop = fwd_stop;
    f->req = req;
    f->srv = s;
    f->act = s->act;
    f->slot = slot;
    h2o_buffer_init(&f->rest, &h2o_socket_buffer_prototype);
    h2o_doublebuffer_init(&f->sending, &h2o_socket_buffer_prototype);
    f->up[0] = fwd_head(req, host, port);
    f->up[1] = req->entity.base ? req->entity : h2o_iovec_init(NULL, 0);
    tdm_httpd_watch_start(&f->watch, req, fwd_on_gone);
    h2o_http1client_connect(&f->client, f, &req->conn->ctx->proxy.client_ctx,
                            h2o_strdup(&req->pool, host, SIZE_MAX), port, 0, fwd_on_connect);
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
