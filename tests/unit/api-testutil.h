/*
 * tests/unit/api-testutil.h — a tiny blocking HTTP/1.0 client on raw sockets for the api tests:
 * full control over what is sent (malformed bodies, missing headers) and over when the socket is
 * closed (client disconnect mid-stream). Header-only; responses are read until the server closes.
 */
#ifndef TDM_TESTS_API_TESTUTIL_H
#define TDM_TESTS_API_TESTUTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct http_resp {
    int status;
    char *head; /* status line + headers, NUL-terminated */
    char *body; /* NUL-terminated */
    size_t body_len;
} http_resp_t;

static inline void http_resp_free(http_resp_t *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

static inline int http_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static inline int http_send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* Send one request: `extra` is "" or header lines each ending in \r\n. */
static inline int http_send_req(int fd, const char *method, const char *path, const char *extra,
                                const char *body, size_t body_len)
{
    char head[2048];
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.0\r\nHost: localhost\r\n%sContent-Length: %zu\r\n\r\n", method,
                     path, extra ? extra : "", body_len);
    if (http_send_all(fd, head, (size_t)n) != 0)
        return -1;
    return body_len ? http_send_all(fd, body, body_len) : 0;
}

/* Read until EOF (or timeout_ms of silence); split head and body. */
static inline int http_read_resp(int fd, int timeout_ms, http_resp_t *r)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, timeout_ms) <= 0)
            break;
        if (len + 4096 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    memset(r, 0, sizeof(*r));
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/%*s %d", &r->status) != 1) {
        free(buf);
        return -1;
    }
    size_t hl = (size_t)(sep - buf);
    r->head = strndup(buf, hl);
    r->body_len = len - hl - 4;
    r->body = malloc(r->body_len + 1);
    memcpy(r->body, sep + 4, r->body_len);
    r->body[r->body_len] = '\0';
    free(buf);
    return 0;
}

static inline int http_do(int port, const char *method, const char *path, const char *extra,
                          const char *body, http_resp_t *r)
{
    int fd = http_connect(port);
    memset(r, 0, sizeof(*r));
    if (fd < 0)
        return -1;
    int rc = http_send_req(fd, method, path, extra, body, body ? strlen(body) : 0);
    if (rc == 0)
        rc = http_read_resp(fd, 10000, r);
    close(fd);
    return rc;
}

/* Case-insensitive header lookup in r->head; copies the value into buf. */
static inline int http_header(const http_resp_t *r, const char *name, char *buf, size_t len)
{
    size_t nl = strlen(name);
    for (const char *p = r->head; p && (p = strstr(p, "\r\n")); p += 2) {
        if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':') {
            const char *v = p + 3 + nl;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t vl = e ? (size_t)(e - v) : strlen(v);
            snprintf(buf, len, "%.*s", (int)vl, v);
            return 1;
        }
    }
    return 0;
}

#endif
