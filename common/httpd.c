/*
 * httpd.c — the h2o server scaffold of both daemons (see tdm/httpd.h): responses, the bearer
 * header, the listener with its connection list and lingering close, the ready file.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tdm/httpd.h>
#include <tdm/json.h>
#include <tdm/mem.h>
#include <tdm/net.h>
#include <tdm/time.h>

/* ---- responses ------------------------------------------------------------------------------ */

void tdm_httpd_send(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    req->res.status = status;
    req->res.reason = tdm_http_reason(status);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype,
                   strlen(ctype));
    h2o_send_inline(req, body, len);
}

void tdm_httpd_send_json(h2o_req_t *req, int status, const char *body, size_t len)
{
    tdm_httpd_send(req, status, "application/json", body, len);
}

void tdm_httpd_send_error_obj(h2o_req_t *req, int status, json_t *err)
{
    char *text = tdm_json_dumps(err);
    json_decref(err);
    if (status == 503 || status == 429)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, H2O_STRLIT("1"));
    tdm_httpd_send_json(req, status, text, strlen(text));
    free(text);
}

void tdm_httpd_send_error(h2o_req_t *req, int status, const char *code, const char *type,
                          const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tdm_httpd_send_error_obj(req, status, tdm_json_error(type, code, msg));
}

void tdm_httpd_send_unauthorized(h2o_req_t *req, const char *msg)
{
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL,
                   H2O_STRLIT("Bearer"));
    tdm_httpd_send_error(req, 401, "unauthorized", "authentication_error", "%s", msg);
}

/* ---- credentials ---------------------------------------------------------------------------- */

int tdm_httpd_bearer_parse(const char *hdr, size_t len, h2o_iovec_t *token)
{
    *token = h2o_iovec_init(NULL, 0);
    if (len <= 7 || !h2o_lcstris(hdr, 7, H2O_STRLIT("bearer ")))
        return 0;
    hdr += 7;
    len -= 7;
    while (len && *hdr == ' ') {
        hdr++;
        len--;
    }
    *token = h2o_iovec_init(hdr, len);
    return 1;
}

int tdm_httpd_bearer(h2o_req_t *req, h2o_iovec_t *token)
{
    *token = h2o_iovec_init(NULL, 0);
    ssize_t hi = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (hi < 0)
        return 0;
    tdm_httpd_bearer_parse(req->headers.entries[hi].value.base, req->headers.entries[hi].value.len,
                           token);
    return 1;
}

int tdm_httpd_token_equal(const char *want, size_t want_len, const char *got, size_t got_len)
{
    unsigned diff = (unsigned)(want_len ^ got_len);
    for (size_t i = 0; i < want_len; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < got_len ? got[i] : 0);
    return diff == 0;
}

/* ---- setup ---------------------------------------------------------------------------------- */

h2o_pathconf_t *tdm_httpd_config(h2o_globalconf_t *config, size_t max_entity,
                                 int (*on_req)(h2o_handler_t *, h2o_req_t *), void *self)
{
    h2o_config_init(config);
    config->max_request_entity_size = max_entity;
    h2o_hostconf_t *host =
        h2o_config_register_host(config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *pc = h2o_config_register_path(host, "/", 0);
    h2o_handler_t *handler = h2o_create_handler(pc, sizeof(*handler) + sizeof(self));
    *(void **)(handler + 1) = self;
    handler->on_req = on_req;
    return pc;
}

void *tdm_httpd_self(h2o_handler_t *handler)
{
    return *(void **)(handler + 1);
}

h2o_evloop_t *tdm_httpd_loop(h2o_globalconf_t *config, h2o_context_t *ctx,
                             h2o_accept_ctx_t *accept_ctx)
{
    h2o_evloop_t *loop = h2o_evloop_create();
    h2o_context_init(ctx, loop, config);
    accept_ctx->ctx = ctx;
    accept_ctx->hosts = config->hosts;
    return loop;
}

/* ---- listener ------------------------------------------------------------------------------- */

/* One accepted connection: h2o's socket, and the duplicate of its descriptor that outlives it
 * for the lingering close. */
typedef struct conn {
    h2o_linklist_t link; /* in l->conns */
    tdm_httpd_listener_t *l;
    h2o_socket_t *sock;
    int dup_fd;
} conn_t;

/* A socket h2o closed, draining the client's leftovers. */
typedef struct lingerer {
    h2o_linklist_t link; /* in l->lingering */
    tdm_httpd_listener_t *l;
    h2o_socket_t *sock;
    h2o_timeout_entry_t timeout;
} linger_t;

static void linger_end(linger_t *g)
{
    h2o_linklist_unlink(&g->link);
    g->l->n_lingering--;
    h2o_timeout_unlink(&g->timeout);
    h2o_socket_read_stop(g->sock);
    h2o_socket_close(g->sock);
    tdm_free(g);
}

static void on_linger_read(h2o_socket_t *sock, const char *err)
{
    linger_t *g = sock->data;
    if (err) { /* the client closed (or reset): done */
        linger_end(g);
        return;
    }
    h2o_buffer_consume(&sock->input, sock->input->size);
}

static void on_linger_timeout(h2o_timeout_entry_t *entry)
{
    linger_end(H2O_STRUCT_FROM_MEMBER(linger_t, timeout, entry));
}

static void on_conn_close(void *data)
{
    conn_t *c = data;
    tdm_httpd_listener_t *l = c->l;
    h2o_linklist_unlink(&c->link);
    l->n_conns--;
    int fd = c->dup_fd;
    tdm_free(c);
    if (fd < 0)
        return;
    if (!l->sock) { /* stopping: nothing lingers */
        close(fd);
        return;
    }
    /* FIN after the response h2o wrote, then read until the client closes */
    shutdown(fd, SHUT_WR);
    linger_t *g = tdm_calloc(1, sizeof(*g));
    g->l = l;
    g->sock = h2o_evloop_socket_create(l->loop, fd, 0);
    g->sock->data = g;
    g->timeout.cb = on_linger_timeout;
    h2o_linklist_insert(&l->lingering, &g->link);
    l->n_lingering++;
    l->lingered++;
    h2o_timeout_link(l->loop, &l->linger_timeout, &g->timeout);
    h2o_socket_read_start(g->sock, on_linger_read);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    tdm_httpd_listener_t *l = listener->data;
    if (err)
        return;
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (!sock)
        return;
    conn_t *c = tdm_calloc(1, sizeof(*c));
    c->l = l;
    c->sock = sock;
    c->dup_fd = fcntl(h2o_socket_get_fd(sock), F_DUPFD_CLOEXEC, 0); /* -1: no lingering */
    h2o_linklist_insert(&l->conns, &c->link);
    l->n_conns++;
    sock->on_close.cb = on_conn_close;
    sock->on_close.data = c;
    h2o_accept(l->accept_ctx, sock);
}

tdm_status_t tdm_httpd_listen(tdm_httpd_listener_t *l, h2o_evloop_t *loop,
                              h2o_accept_ctx_t *accept_ctx, const char *host, const char *port,
                              const char *what, char *err, size_t err_len)
{
    memset(l, 0, sizeof(*l));
    h2o_linklist_init_anchor(&l->conns);
    h2o_linklist_init_anchor(&l->lingering);
    int fd;
    tdm_status_t st =
        tdm_net_listen(host && *host ? host : NULL, port, what, &fd, &l->port, err, err_len);
    if (st != TDM_OK)
        return st;
    l->loop = loop;
    l->accept_ctx = accept_ctx;
    h2o_timeout_init(loop, &l->linger_timeout, TDM_HTTPD_LINGER_MS);
    l->sock = h2o_evloop_socket_create(loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    l->sock->data = l;
    h2o_socket_read_start(l->sock, on_accept);
    return TDM_OK;
}

void tdm_httpd_stop_accepting(tdm_httpd_listener_t *l)
{
    if (!l->sock)
        return;
    h2o_socket_read_stop(l->sock);
    h2o_socket_close(l->sock);
    l->sock = NULL;
}

static void close_lingering(tdm_httpd_listener_t *l)
{
    while (!h2o_linklist_is_empty(&l->lingering))
        linger_end(H2O_STRUCT_FROM_MEMBER(linger_t, link, l->lingering.next));
}

int tdm_httpd_close_conns(tdm_httpd_listener_t *l, uint64_t us)
{
    tdm_httpd_stop_accepting(l);
    close_lingering(l);
    for (h2o_linklist_t *n = l->conns.next; n != &l->conns; n = n->next) {
        conn_t *c = H2O_STRUCT_FROM_MEMBER(conn_t, link, n);
        int fd = h2o_socket_get_fd(c->sock);
        if (fd >= 0)
            shutdown(fd, SHUT_RDWR);
    }
    uint64_t deadline = tdm_time_mono_us() + us;
    while (l->n_conns > 0 && tdm_time_mono_us() < deadline)
        h2o_evloop_run(l->loop, 10);
    return l->n_conns == 0;
}

void tdm_httpd_listener_close(tdm_httpd_listener_t *l)
{
    if (!l->loop)
        return;
    tdm_httpd_stop_accepting(l);
    close_lingering(l);
    h2o_evloop_run(l->loop, 0); /* the closes are deferred to the loop */
    h2o_timeout_dispose(l->loop, &l->linger_timeout);
    l->loop = NULL;
}

/* ---- a client gone mid-response ------------------------------------------------------------ */

/* Watches whose client socket is read, per loop thread (a socket's callbacks run on its loop's
 * thread). */
static _Thread_local h2o_linklist_t watching;

void tdm_httpd_watch_forget(tdm_httpd_watch_t *w)
{
    if (w->sock) {
        w->sock = NULL;
        h2o_linklist_unlink(&w->link);
    }
}

void tdm_httpd_watch_stop(tdm_httpd_watch_t *w)
{
    if (w->sock) {
        h2o_socket_read_stop(w->sock);
        tdm_httpd_watch_forget(w);
    }
}

static void on_watched_read(h2o_socket_t *sock, const char *err)
{
    for (h2o_linklist_t *l = watching.next; l && l != &watching; l = l->next) {
        tdm_httpd_watch_t *w = H2O_STRUCT_FROM_MEMBER(tdm_httpd_watch_t, link, l);
        if (w->sock != sock)
            continue;
        tdm_httpd_watch_stop(w);
        if (err)
            w->on_gone(w);
        return;
    }
    h2o_socket_read_stop(sock); /* not watched any more */
}

void tdm_httpd_watch_start(tdm_httpd_watch_t *w, h2o_req_t *req,
                           void (*on_gone)(tdm_httpd_watch_t *w))
{
    if (w->sock || req->version >= 0x200 || !req->conn->callbacks->get_socket)
        return;
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (!sock || h2o_socket_is_reading(sock))
        return;
    if (!watching.next)
        h2o_linklist_init_anchor(&watching);
    w->sock = sock;
    w->on_gone = on_gone;
    h2o_linklist_insert(&watching, &w->link);
    h2o_socket_read_start(sock, on_watched_read);
}

/* ---- files and h2o quirks ------------------------------------------------------------------- */

tdm_status_t tdm_httpd_write_ready_file(const char *path, const char *body, char *err,
                                        size_t err_len)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
        snprintf(err, err_len, "--ready-file: path too long");
        return TDM_ERR_RANGE;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t n = strlen(body);
    int ok = fd >= 0 && write(fd, body, n) == (ssize_t)n && fsync(fd) == 0;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, err_len, "--ready-file %s: %s", path, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        return TDM_ERR_IO;
    }
    return TDM_OK;
}

void tdm_httpd_free_queue(h2o_multithread_queue_t *q)
{
#if H2O_LIBRARY_VERSION_MAJOR == 0 && H2O_LIBRARY_VERSION_MINOR <= 13
    free(q);
#else
    (void)q;
#endif
}
