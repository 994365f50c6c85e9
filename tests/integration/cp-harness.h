/*
 * tests/integration/cp-harness.h — start a real tandemd on port 0 and talk to it (header-only).
 *
 * cph_start() forks/execs $TDM_BUILDDIR/tandemd with --listen 127.0.0.1:0, a fresh --state-dir,
 * --ready-file and the given extra arguments, with NOTIFY_SOCKET pointing at the harness's own
 * datagram socket (the real sd_notify protocol) and, when asked, WATCHDOG_USEC/WATCHDOG_PID.
 * cph_wait_notify() waits for a line (e.g. "READY=1") to arrive. cph_http() does one request with
 * libcurl and returns the status and body. cph_stop() sends SIGTERM and reaps the process.
 */
#ifndef TDM_TESTS_CP_HARNESS_H
#define TDM_TESTS_CP_HARNESS_H

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

typedef struct cph {
    pid_t pid;
    int port;
    int notify_fd;
    char dir[64];
    char state_dir[128];
    char url[64];
    char admin[128];
    char notes[8192]; /* notify datagrams received (newest kept), '\n'-separated */
    pthread_mutex_t mu;
    pthread_t notify_tid;
    volatile int notify_stop;
} cph_t;

static inline double cph_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline const char *cph_builddir(void)
{
    const char *b = getenv("TDM_BUILDDIR");
    return b && *b ? b : ".";
}

/* The notify listener drains the socket all the time, as systemd does: a full datagram queue
 * would block tandemd's sd_notify (and with it the loop). */
static inline void *cph_notify_main(void *arg)
{
    cph_t *h = arg;
    while (!h->notify_stop) {
        struct pollfd p = {h->notify_fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        char buf[1024];
        ssize_t n = recv(h->notify_fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        pthread_mutex_lock(&h->mu);
        size_t used = strlen(h->notes);
        if (used + (size_t)n + 2 >= sizeof(h->notes)) {
            /* keep the newest half */
            size_t half = sizeof(h->notes) / 2;
            memmove(h->notes, h->notes + half, strlen(h->notes + half) + 1);
            used = strlen(h->notes);
        }
        memcpy(h->notes + used, buf, (size_t)n);
        h->notes[used + (size_t)n] = '\n';
        h->notes[used + (size_t)n + 1] = '\0';
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

/* Wait up to timeout_s for a notify line containing `want`. */
static inline int cph_wait_notify(cph_t *h, const char *want, double timeout_s)
{
    double end = cph_now() + timeout_s;
    for (;;) {
        pthread_mutex_lock(&h->mu);
        int found = strstr(h->notes, want) != NULL;
        pthread_mutex_unlock(&h->mu);
        if (found)
            return 0;
        if (cph_now() > end)
            return -1;
        usleep(20000);
    }
}

/* Start tandemd. `extra` is a NULL-terminated list of more arguments. watchdog_usec 0 = off. */
static inline int cph_start(cph_t *h, const char *const *extra, unsigned long watchdog_usec)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->dir, sizeof(h->dir), "/tmp/cph-XXXXXX");
    if (!mkdtemp(h->dir))
        return -1;
    snprintf(h->state_dir, sizeof(h->state_dir), "%s/state", h->dir);
    char ready[256], sock[100], log[256];
    snprintf(ready, sizeof(ready), "%s/ready.json", h->dir);
    snprintf(sock, sizeof(sock), "%s/notify.sock", h->dir);
    snprintf(log, sizeof(log), "%s/tandemd.log", h->dir);
    h->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    if (bind(h->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        return -1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_create(&h->notify_tid, NULL, cph_notify_main, h);
    char bin[512];
    snprintf(bin, sizeof(bin), "%s/tandemd", cph_builddir());
    const char *argv[32] = {bin,          "--listen",     "127.0.0.1:0", "--state-dir",
                            h->state_dir, "--ready-file", ready};
    int argc = 7;
    for (int i = 0; extra && extra[i] && argc < 31; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    h->pid = fork();
    if (h->pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("NOTIFY_SOCKET", sock, 1);
        if (watchdog_usec) {
            char b[32];
            snprintf(b, sizeof(b), "%lu", watchdog_usec);
            setenv("WATCHDOG_USEC", b, 1);
            snprintf(b, sizeof(b), "%d", (int)getpid());
            setenv("WATCHDOG_PID", b, 1);
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    double end = cph_now() + 20;
    while (cph_now() < end) {
        FILE *f = fopen(ready, "r");
        if (f) {
            int ok_ = fscanf(f, "{\"http\":%d}", &h->port) == 1;
            fclose(f);
            if (ok_)
                break;
        }
        if (waitpid(h->pid, NULL, WNOHANG) == h->pid) {
            h->pid = 0;
            return -1;
        }
        usleep(20000);
    }
    if (!h->port)
        return -1;
    snprintf(h->url, sizeof(h->url), "http://127.0.0.1:%d", h->port);
    char tokpath[256];
    snprintf(tokpath, sizeof(tokpath), "%s/admin.token", h->state_dir);
    FILE *f = fopen(tokpath, "r");
    if (!f || !fgets(h->admin, sizeof(h->admin), f)) {
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    h->admin[strcspn(h->admin, "\r\n")] = '\0';
    return 0;
}

static inline void cph_dump_log(const cph_t *h)
{
    char log[256], line[512];
    snprintf(log, sizeof(log), "%s/tandemd.log", h->dir);
    FILE *f = fopen(log, "r");
    while (f && fgets(line, sizeof(line), f))
        diag("tandemd: %s", line[0] ? line : "");
    if (f)
        fclose(f);
}

/* SIGTERM, reap; returns the exit status (or -1). */
static inline int cph_stop(cph_t *h)
{
    int status = -1;
    if (h->pid > 0) {
        kill(h->pid, SIGTERM);
        double end = cph_now() + 20;
        while (cph_now() < end && waitpid(h->pid, &status, WNOHANG) == 0)
            usleep(20000);
        if (cph_now() >= end) {
            kill(h->pid, SIGKILL);
            waitpid(h->pid, &status, 0);
        }
        h->pid = 0;
    }
    if (h->notify_fd > 0) {
        h->notify_stop = 1;
        pthread_join(h->notify_tid, NULL);
        close(h->notify_fd);
    }
    h->notify_fd = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static inline void cph_cleanup(cph_t *h)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", h->dir);
    if (system(cmd) != 0)
        diag("cleanup of %s failed", h->dir);
}

typedef struct cph_body {
    char *data;
    size_t len;
} cph_body_t;

static inline size_t cph_on_data(char *p, size_t size, size_t n, void *ud)
{
    cph_body_t *b = ud;
    b->data = realloc(b->data, b->len + size * n + 1);
    memcpy(b->data + b->len, p, size * n);
    b->len += size * n;
    b->data[b->len] = '\0';
    return size * n;
}

/* A response's header block ends with an empty line: stop there (the transfer ends with
 * CURLE_WRITE_ERROR, the status stays readable). */
static inline size_t cph_on_header_end(char *buf, size_t size, size_t n, void *arg)
{
    (void)arg;
    size_t len = size * n;
    return (len == 2 && buf[0] == '\r' && buf[1] == '\n') ? 0 : len;
}

/* One request. token NULL: no Authorization. Returns the status (0 on transport error); *ret_body
 * (may be NULL) gets a malloc'd body the caller frees. headers_only: hang up after the header
 * block and return its status (for a stream that never ends). */
static inline long cph_http_do(const cph_t *h, const char *method, const char *path,
                               const char *token, const char *body, size_t body_len,
                               char **ret_body, long timeout_ms, int headers_only)
{
    CURL *c = curl_easy_init();
    char url[1024], auth[256];
    snprintf(url, sizeof(url), "%s%s", h->url, path);
    struct curl_slist *hdr = NULL;
    if (token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hdr = curl_slist_append(hdr, auth);
    }
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    hdr = curl_slist_append(hdr, "Expect:");
    cph_body_t b = {NULL, 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, cph_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    if (headers_only)
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, cph_on_header_end);
    long status = 0;
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK || headers_only)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else if (timeout_ms > 5000)
        diag("%s %s: %s", method, path, curl_easy_strerror(cc));
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    if (ret_body)
        *ret_body = b.data ? b.data : strdup("");
    else
        free(b.data);
    return status;
}

static inline long cph_http_t(const cph_t *h, const char *method, const char *path,
                              const char *token, const char *body, size_t body_len, char **ret_body,
                              long timeout_ms)
{
    return cph_http_do(h, method, path, token, body, body_len, ret_body, timeout_ms, 0);
}

/* The status of a streaming route (SSE never ends by itself); 0 when none came within 10 s. */
static inline long cph_http_stream_status(const cph_t *h, const char *path, const char *token)
{
    return cph_http_do(h, "GET", path, token, NULL, 0, NULL, 10000, 1);
}

static inline long cph_http(const cph_t *h, const char *method, const char *path, const char *token,
                            const char *body, char **ret_body)
{
    return cph_http_t(h, method, path, token, body, body ? strlen(body) : 0, ret_body, 30000);
}

#endif
