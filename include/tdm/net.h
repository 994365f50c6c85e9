/*
 * tdm/net.h — the listening TCP socket both HTTP servers (tandemd's controlplane/http/cp_server.c
 * and the worker's dataplane/api/server.c) hand to their h2o loop.
 *
 * Contract: tdm_net_listen resolves host/port numerically-serviced and passively (host NULL: every
 * address), opens a close-on-exec socket with SO_REUSEADDR, binds, listens with SOMAXCONN, makes
 * it non-blocking and reads back the bound port (so port "0" gives the kernel's pick). On success
 * *ret_fd and *ret_port are written and the caller owns the fd; on failure nothing is left open,
 * the outputs are untouched and err names `what` (the flags the address came from, e.g.
 * "--listen 127.0.0.1:8080"): TDM_ERR_INVAL when the address does not resolve, TDM_ERR_IO when a
 * socket call fails (the port in use, ...).
 */
#ifndef TDM_NET_H
#define TDM_NET_H

#include <stddef.h>

#include <tdm/status.h>

tdm_status_t tdm_net_listen(const char *host, const char *port, const char *what, int *ret_fd,
                            int *ret_port, char *err, size_t err_len);

#endif
