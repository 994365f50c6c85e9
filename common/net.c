/*
 * net.c — the listening TCP socket of tandemd's and the worker's HTTP servers (tdm/net.h): one
 * resolve-bind-listen path so both servers agree on the socket options, on non-blocking mode and
 * on how the bound port of "0" is read back.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tdm/net.h>

tdm_status_t tdm_net_listen(const char *host, const char *port, const char *what, int *ret_fd,
                            int *ret_port, char *err, size_t err_len)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0) {
        snprintf(err, err_len, "%s: %s", what, gai_strerror(gai));
        return TDM_ERR_INVAL;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    const char *step = fd < 0 ? "socket"
                       : setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0
                           ? "setsockopt"
                       : bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ? "bind"
                       : listen(fd, SOMAXCONN) != 0                 ? "listen"
                       : fcntl(fd, F_SETFL, O_NONBLOCK) != 0        ? "fcntl"
                                                                    : NULL;
    if (step) {
        /* the step and errno: "--host H --port P: bind: Address already in use (errno 98)" */
        int e = errno;
        snprintf(err, err_len, "%s: %s: %s (errno %d)", what, step, strerror(e), e);
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return TDM_ERR_IO;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        snprintf(err, err_len, "%s: getsockname: %s", what, strerror(errno));
        close(fd);
        return TDM_ERR_IO;
    }
    *ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *ret_fd = fd;
    return TDM_OK;
}
