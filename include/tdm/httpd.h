/*
 * tdm/httpd.h — the h2o server scaffold both daemons share (tandemd's
 * controlplane/http/cp_server.c and the worker's dataplane/api/server.c): responses and error
 * bodies, the bearer header, the listener with its connection list and lingering close, the ready
 * file, and h2o 2.2's queue leak. Route tables, roles and handlers stay with each daemon.
 *
 * Error bodies are {"error":{"code","message","type"}} (docs/design.md §6); a 503 or 429 carries
 * Retry-After: 1.
 *
 * Lingering close (what nginx does): when h2o closes a connection whose client is still sending —
 * h2o's own 413 for a body over its max_request_entity_size is sent the moment the headers are
 * read — closing at once would make the kernel answer the rest of the body with a reset, and the
 * client would see a socket error instead of the 413. So every accepted socket is duplicated; when
 * h2o closes its descriptor, the duplicate sends FIN after the response (shutdown SHUT_WR) and
 * reads and discards what the client still sends, until the client closes or
 * TDM_HTTPD_LINGER_MS passes. A client that already closed costs one read. The duplicate doubles
 * the descriptors of open connections.
 *
 * Everything here runs on the loop thread of the server it belongs to.
 */
#ifndef TDM_HTTPD_H
#define TDM_HTTPD_H

#include <stddef.h>
#include <stdint.h>

#include <h2o.h>
#include <jansson.h>

#include <tdm/status.h>

#define TDM_HTTPD_LINGER_MS 5000

/* ---- responses ---------------------------------------------------------------------------- */

void tdm_httpd_send(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len);
void tdm_httpd_send_json(h2o_req_t *req, int status, const char *body, size_t len);
/* Send `err` (an {"error":{...}} object; its reference is taken). */
void tdm_httpd_send_error_obj(h2o_req_t *req, int status, json_t *err);
void tdm_httpd_send_error(h2o_req_t *req, int status, const char *code, const char *type,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* 401 with WWW-Authenticate: Bearer; `msg` says what was wrong with the credentials. */
void tdm_httpd_send_unauthorized(h2o_req_t *req, const char *msg);

/* ---- credentials -------------------------------------------------------------------------- */

/* The Authorization header: 0 when there is none; else 1, with *token the part after
 * "Bearer " (case-insensitive), or {NULL, 0} when the header is not a bearer token. */
int tdm_httpd_bearer(h2o_req_t *req, h2o_iovec_t *token);
/* The same on a header value: 1 with *token past "Bearer " and its spaces; else 0, {NULL, 0}. */
int tdm_httpd_bearer_parse(const char *hdr, size_t len, h2o_iovec_t *token);
/* Constant time in want_len. */
int tdm_httpd_token_equal(const char *want, size_t want_len, const char *got, size_t got_len);

/* ---- setup -------------------------------------------------------------------------------- */

/* h2o's configuration: one host ("default") whose "/" goes to `on_req`, which reads `self` back
 * with tdm_httpd_self(handler); bodies past `max_entity` get h2o's own 413 at the headers (the
 * daemons keep it at twice their largest limit + 64 KiB so that bodies near a limit get their
 * JSON 413). Returns the path configuration (for loggers). */
h2o_pathconf_t *tdm_httpd_config(h2o_globalconf_t *config, size_t max_entity,
                                 int (*on_req)(h2o_handler_t *, h2o_req_t *), void *self);
void *tdm_httpd_self(h2o_handler_t *handler);
/* An evloop, and a context and accept context on it for `config`. */
h2o_evloop_t *tdm_httpd_loop(h2o_globalconf_t *config, h2o_context_t *ctx,
                             h2o_accept_ctx_t *accept_ctx);

/* ---- listener ----------------------------------------------------------------------------- */

typedef struct tdm_httpd_listener {
    h2o_evloop_t *loop;
    h2o_accept_ctx_t *accept_ctx;
    h2o_socket_t *sock;   /* NULL once closed */
    int port;             /* the bound port (port 0: the kernel's pick) */
    h2o_linklist_t conns; /* open connections */
    size_t n_conns;
    h2o_linklist_t lingering; /* closed by h2o, draining the client's leftovers */
    size_t n_lingering;
    uint64_t lingered; /* connections that went through a lingering close */
    h2o_timeout_t linger_timeout;
} tdm_httpd_listener_t;

/* Listen on host:port (host NULL or "": every address) and accept into `accept_ctx`; `what`
 * names the flags the address came from, for errors (tdm/net.h). */
tdm_status_t tdm_httpd_listen(tdm_httpd_listener_t *l, h2o_evloop_t *loop,
                              h2o_accept_ctx_t *accept_ctx, const char *host, const char *port,
                              const char *what, char *err, size_t err_len);
/* Stop accepting (idempotent). */
void tdm_httpd_stop_accepting(tdm_httpd_listener_t *l);
/* Shut every open connection down so that h2o's read or write path closes it (h2o 2.2 has no
 * call that closes a server connection), then run the loop until none is left or `us` passed;
 * lingering ones are closed. 1 when no connection is left. */
int tdm_httpd_close_conns(tdm_httpd_listener_t *l, uint64_t us);
/* Close what is left: the listener and the lingering sockets (before the loop goes). */
void tdm_httpd_listener_close(tdm_httpd_listener_t *l);

/* ---- a client gone mid-response ---------------------------------------------------------- */

/* h2o's HTTP/1 server stops reading a connection while it responds and sees a client's reset only
 * when it next writes, which for a streamed or slow response can be long after the client left.
 * A watch reads the client's socket meanwhile (nginx's ngx_http_test_reading does the same): EOF
 * or an error ends the watch and calls `on_gone` once (a client that half-closes after its request
 * counts as gone, as in nginx); bytes (a pipelined request) end the watch and stay in the socket's
 * buffer for h2o to parse after this response. HTTP/1 only: an HTTP/2 connection is read by h2o
 * all along. Watches are per loop thread; all calls run on the request's loop thread. */
typedef struct tdm_httpd_watch tdm_httpd_watch_t;
struct tdm_httpd_watch {
    h2o_socket_t *sock; /* the client's socket while watched, else NULL */
    h2o_linklist_t link;
    void (*on_gone)(tdm_httpd_watch_t *w);
};

/* Start watching req's client (nothing when HTTP/2 or its socket is read already). */
void tdm_httpd_watch_start(tdm_httpd_watch_t *w, h2o_req_t *req,
                           void (*on_gone)(tdm_httpd_watch_t *w));
/* End the watch and stop reading (before the response's last send; idempotent). */
void tdm_httpd_watch_stop(tdm_httpd_watch_t *w);
/* End the watch without touching the socket (the request is being disposed of: the socket is
 * h2o's again); idempotent. */
void tdm_httpd_watch_forget(tdm_httpd_watch_t *w);

/* ---- files and h2o quirks ----------------------------------------------------------------- */

/* Write `body` to `path` atomically (temp file, fsync, rename); errors name --ready-file. */
tdm_status_t tdm_httpd_write_ready_file(const char *path, const char *body, char *err,
                                        size_t err_len);
/* h2o 2.2.5 (libh2o 0.13) forgets to free the queue object in its evloop build; call after
 * h2o_multithread_destroy_queue (or h2o_context_dispose for the context's own queue). */
void tdm_httpd_free_queue(h2o_multithread_queue_t *q);

#endif
