/*
 * test-detect-webhook.c — the alert webhook (controlplane/detect/alert.h): JSON on open and on
 * resolve, received by a real HTTP listener on loopback; posting never blocks the caller, even when
 * the receiver hangs; a full queue drops the oldest post and counts it.
 */
#include "config.h"

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <tdm/time.h>

#include "controlplane/detect/alert.h"
#include "tap.h"

typedef struct srv {
    int fd, port;
    int hang; /* accept and never answer */
    pthread_mutex_t mu;
    char bodies[8][4096];
    int n_bodies;
    volatile int stop;
} srv_t;

/* One connection: requests with Content-Length bodies, answered 200, until the peer closes. */
static void serve_conn(srv_t *s, int c)
{
    char buf[16384];
    size_t len = 0;
    for (;;) {
        ssize_t k = read(c, buf + len, sizeof(buf) - 1 - len);
        if (k <= 0)
            return;
        len += (size_t)k;
        buf[len] = '\0';
        char *end;
        while ((end = strstr(buf, "\r\n\r\n")) != NULL) {
            const char *cl = strcasestr(buf, "content-length:");
            size_t blen = cl && cl < end ? (size_t)strtoul(cl + 15, NULL, 10) : 0;
            size_t hlen = (size_t)(end + 4 - buf);
            if (len < hlen + blen)
                break;
            if (s->hang) {
                while (!s->stop)
                    usleep(10000);
                return;
            }
            pthread_mutex_lock(&s->mu);
            if (s->n_bodies < 8) {
                size_t n = blen < 4095 ? blen : 4095;
                memcpy(s->bodies[s->n_bodies], buf + hlen, n);
                s->bodies[s->n_bodies++][n] = '\0';
            }
            pthread_mutex_unlock(&s->mu);
            const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
            if (write(c, resp, strlen(resp)) < 0)
                return;
            memmove(buf, buf + hlen + blen, len - hlen - blen);
            len -= hlen + blen;
            buf[len] = '\0';
        }
    }
}

static void *srv_main(void *arg)
{
    srv_t *s = arg;
    while (!s->stop) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            break;
        serve_conn(s, c);
        close(c);
    }
    return NULL;
}

static void srv_start(srv_t *s, int hang, pthread_t *th)
{
    memset(s, 0, sizeof(*s));
    s->hang = hang;
    pthread_mutex_init(&s->mu, NULL);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (bind(s->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s->fd, 8) != 0)
        abort();
    getsockname(s->fd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    pthread_create(th, NULL, srv_main, s);
}

static void srv_stop(srv_t *s, pthread_t th)
{
    s->stop = 1;
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(th, NULL);
    pthread_mutex_destroy(&s->mu);
}

static int wait_bodies(srv_t *s, int n)
{
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&s->mu);
        int have = s->n_bodies;
        pthread_mutex_unlock(&s->mu);
        if (have >= n)
            return have;
        usleep(10000);
    }
    return s->n_bodies;
}

int main(void)
{
    char err[256], url[64];
    tdm_cp_webhook_t *w;
    ok(tdm_cp_webhook_start("ftp://x", 4, 1000, &w, err, sizeof(err)) == TDM_ERR_INVAL &&
           strstr(err, "http://"),
       "a non-HTTP URL is refused: %s", err);

    /* open and resolve through the alert store's hook */
    srv_t s;
    pthread_t th;
    srv_start(&s, 0, &th);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", s.port);
    is_int(tdm_cp_webhook_start(url, 16, 2000, &w, err, sizeof(err)), TDM_OK, "webhook starts");
    tdm_cp_alerts_t *st;
    tdm_cp_alerts_init(NULL, &st);
    tdm_cp_alerts_hook(st, tdm_cp_webhook_hook, w);
    tdm_cp_findings_t f = {0};
    tdm_cp_finding_t *x = tdm_cp_findings_add(&f, TDM_CP_ALERT_RANK_DIVERGENCE, "decode-0");
    snprintf(x->summary, sizeof(x->summary), "rank 1 diverged");
    x->evidence = json_pack("{s:[i]}", "minority_ranks", 1);
    tdm_cp_alerts_apply(st, &f, 1000000, 1700000000000000ull);
    tdm_cp_findings_clear(&f);
    tdm_cp_alerts_apply(st, &f, 11000000, 1700000010000000ull);
    is_int(wait_bodies(&s, 2), 2, "two posts received");
    json_t *o = json_loads(s.bodies[0], 0, NULL), *r = json_loads(s.bodies[1], 0, NULL);
    json_t *oa = json_object_get(o, "alert"), *ra = json_object_get(r, "alert");
    ok(o && !strcmp(json_string_value(json_object_get(o, "event")), "open") &&
           !strcmp(json_string_value(json_object_get(oa, "kind")), "RANK_DIVERGENCE") &&
           !strcmp(json_string_value(json_object_get(oa, "group")), "decode-0") &&
           json_integer_value(json_array_get(
               json_object_get(json_object_get(oa, "evidence"), "minority_ranks"), 0)) == 1,
       "open: kind, group and evidence: %s", s.bodies[0]);
    ok(r && !strcmp(json_string_value(json_object_get(r, "event")), "resolve") &&
           !strcmp(json_string_value(json_object_get(ra, "resolved_by")), "auto") &&
           json_integer_value(json_object_get(ra, "resolved_us")) == 1700000010000000ll,
       "resolve: resolved_by auto and the time");
    json_decref(o);
    json_decref(r);
    tdm_cp_webhook_stats_t ws;
    for (int i = 0; i < 500; i++) { /* the receiver records a body before it answers */
        tdm_cp_webhook_stats(w, &ws);
        if (ws.sent + ws.failed >= 2)
            break;
        usleep(10000);
    }
    ok(ws.sent == 2 && ws.failed == 0 && ws.dropped == 0, "stats: 2 sent");
    tdm_cp_findings_free(&f);
    tdm_cp_alerts_free(st);
    tdm_cp_webhook_stop(w);
    srv_stop(&s, th);

    /* a receiver that never answers: posting stays instant, the queue drops the oldest */
    srv_start(&s, 1, &th);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", s.port);
    tdm_cp_webhook_start(url, 4, 300, &w, err, sizeof(err));
    uint64_t t0 = tdm_time_mono_us();
    for (int i = 0; i < 100; i++)
        tdm_cp_webhook_post(w, "{\"event\":\"open\"}");
    uint64_t dt = tdm_time_mono_us() - t0;
    ok(dt < 100000, "100 posts to a hung receiver return in %.1f ms", dt / 1e3);
    tdm_cp_webhook_stats(w, &ws);
    ok(ws.queued == 100 && ws.dropped >= 95, "bounded queue: %llu dropped of 100",
       (unsigned long long)ws.dropped);
    /* the post in progress times out after 300 ms: poll for its failure (at most 10 s) */
    for (uint64_t end = tdm_time_mono_us() + 10000000; tdm_time_mono_us() < end; usleep(10000)) {
        tdm_cp_webhook_stats(w, &ws);
        if (ws.failed >= 1)
            break;
    }
    ok(ws.failed >= 1, "the hung post times out and is counted as failed");
    t0 = tdm_time_mono_us();
    tdm_cp_webhook_stop(w);
    ok(tdm_time_mono_us() - t0 < 2000000, "stop waits at most for the post in progress");
    srv_stop(&s, th);
    return done_testing();
}
