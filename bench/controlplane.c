/*
 * bench/controlplane.c — load generators for tandemd (bench/controlplane.sh drives them).
 *
 *   controlplane ingest --port P --token-file F --dsn DSN [--clients 4] [--batches N]
 *                       [--samples S] [--rooms R] [--tag T] [--rate B --seconds D]
 *     N telemetry v1 batches per client (docs/contracts.md §c), each client one rank of its own
 * group posting over one keep-alive HTTP/1.1 connection (raw sockets, so the client costs little of
 *     the shared CPU), one batch in flight, the next sent when {"acked_seq"} arrives. A batch holds
 *     S samples 200 ms apart (the reporter's interval, so tandemd's 10 Hz thinning keeps every one)
 *     and R rooms' KVPoll walks (4 kvpoll events each) plus one output_stats event; the last batch
 *     adds `shutdown` so the detectors do not see the rank go silent. Bodies are rendered before
 *     the clock starts. The clock stops at the last {"acked_seq"} (tandemd acknowledges a batch
 * only after its transaction committed); count(*) over samples, transfer_events and the workers'
 *     events must then equal what was sent, or the run fails. With --rate
 *     the clients are paced (B batches/s each) for D seconds instead and nothing is counted:
 *     background ingest for the read test. Prints one JSON line.
 *
 *   controlplane seed --port P --token-file F --hist-tag T --hist-ranks N --now-us U
 *                     --from-s A --to-s B
 *     The recent part of the read test's stored history, through tandemd as a live worker would
 *     send it: for each of N ranks (instance T+k, rank 0, group hist-<k mod 50>) the samples
 *     s = A..B, s at U - (4999 - s) * 200 ms, in batches of 80 (the last one ends with a
 *     `shutdown` event), the same values bench/controlplane.sh inserts with SQL for s < A.
 *
 *   controlplane reads --port P --token-file F --hist-tag T --hist-ranks N --since-us A
 *                      --until-us B [--rps 1000] [--seconds 20] [--conns 64]
 *     Open loop: request i is due at t0 + i/rps whatever happened before; its latency is measured
 *     from that due time (so a slow server cannot hide queueing by slowing the client), over a
 *     pool of keep-alive connections (a new one opened when all are busy, up to --conns; past that
 *     due requests wait, their clock running; a request whose idle connection the server closed
 *     as it was sent, before any byte of an answer, is sent again on a new one, its clock still
 *     running: resent_after_idle_close). Even requests read one rank's history
 *     (/api/v1/ranks/<inst>/0/history?since_us=A&until_us=B, instance T+k for a pseudo-random k <
 *     N), odd ones /api/v1/alerts. Prints one JSON line with percentiles per route; requests still
 *     unanswered 10 s after the last was due count as errors with their latency so far (a lower
 *     bound), so overload cannot drop the slowest requests from the percentiles.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <fcntl.h>

#include <libpq-fe.h>

#define MAX_CONNS 256
#define RBUF_CAP (4u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *what)
{
    fprintf(stderr, "controlplane bench: %s\n", what);
    exit(1);
}

/* ---- options ----------------------------------------------------------------------------- */

typedef struct opts {
    int port, clients, batches, samples, rooms, conns, hist_ranks, from_s, to_s;
    double rate, seconds, rps;
    uint64_t tag, hist_tag;
    int64_t since_us, until_us;
    const char *dsn;
    char token[128];
} opts_t;

static void read_token(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)cap, f))
        die("cannot read the token file");
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
}

static void parse_opts(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.clients = 4,
                  .batches = 200,
                  .samples = 64,
                  .rooms = 4,
                  .conns = 64,
                  .rps = 1000,
                  .seconds = 20,
                  .tag = 0xbe00000000000000ull};
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--port"))
            o->port = atoi(v);
        else if (!strcmp(k, "--token-file"))
            read_token(v, o->token, sizeof(o->token));
        else if (!strcmp(k, "--dsn"))
            o->dsn = v;
        else if (!strcmp(k, "--clients"))
            o->clients = atoi(v);
        else if (!strcmp(k, "--batches"))
            o->batches = atoi(v);
        else if (!strcmp(k, "--samples"))
            o->samples = atoi(v);
        else if (!strcmp(k, "--rooms"))
            o->rooms = atoi(v);
        else if (!strcmp(k, "--tag"))
            o->tag = strtoull(v, NULL, 16);
        else if (!strcmp(k, "--rate"))
            o->rate = atof(v);
        else if (!strcmp(k, "--seconds"))
            o->seconds = atof(v);
        else if (!strcmp(k, "--rps"))
            o->rps = atof(v);
        else if (!strcmp(k, "--conns"))
            o->conns = atoi(v);
        else if (!strcmp(k, "--hist-tag"))
            o->hist_tag = strtoull(v, NULL, 16);
        else if (!strcmp(k, "--hist-ranks"))
            o->hist_ranks = atoi(v);
        else if (!strcmp(k, "--since-us"))
            o->since_us = strtoll(v, NULL, 10);
        else if (!strcmp(k, "--now-us"))
            o->since_us = strtoll(v, NULL, 10); /* seed: the newest sample's time */
        else if (!strcmp(k, "--from-s"))
            o->from_s = atoi(v);
        else if (!strcmp(k, "--to-s"))
            o->to_s = atoi(v);
        else if (!strcmp(k, "--until-us"))
            o->until_us = strtoll(v, NULL, 10);
        else
            die("unknown option");
    }
    if (o->port <= 0 || !o->token[0] || o->clients < 1 || o->clients > 64 || o->samples < 1 ||
        o->rooms < 0 || o->conns < 1 || o->conns > MAX_CONNS || o->rps <= 0)
        die("bad options (need --port and --token-file; see the header of controlplane.c)");
}

/* ---- HTTP/1.1 over raw sockets ------------------------------------------------------------ */

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("connect to tandemd failed");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* Length of a complete chunked body starting at p (n bytes available), 0 if incomplete, -1 bad. */
static long chunked_len(const char *p, size_t n)
{
    size_t off = 0;
    for (;;) {
        const char *eol = memmem(p + off, n - off, "\r\n", 2);
        if (!eol)
            return n - off > 32 ? -1 : 0;
        char *end;
        unsigned long sz = strtoul(p + off, &end, 16);
        if (end == p + off)
            return -1;
        off = (size_t)(eol - p) + 2;
        if (sz == 0) /* no trailers from h2o: the last chunk is followed by CRLF */
            return n - off >= 2 ? (long)(off + 2) : 0;
        if (n - off < sz + 2)
            return 0;
        off += sz + 2;
    }
}

/* 1: a whole response is in buf (status and total length returned), 0: need more, -1: bad.
 * h2o 2.2 sends its inline bodies chunked; Content-Length is handled too. */
static int resp_complete(const char *buf, size_t len, int *ret_status, size_t *ret_total)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end)
        return len > 65536 ? -1 : 0;
    if (len < 12 || strncmp(buf, "HTTP/1.1 ", 9) != 0)
        return -1;
    size_t hlen = (size_t)(end - buf) + 4;
    long clen = -1;
    int chunked = 0;
    for (const char *p = buf; p && p < end; p = memchr(p, '\n', (size_t)(end - p))) {
        p += *p == '\n';
        if (!strncasecmp(p, "content-length:", 15))
            clen = strtol(p + 15, NULL, 10);
        else if (!strncasecmp(p, "transfer-encoding: chunked", 26))
            chunked = 1;
    }
    if (chunked)
        clen = chunked_len(buf + hlen, len - hlen);
    if (clen < 0)
        return -1;
    if (chunked && clen == 0)
        return 0;
    if (len < hlen + (size_t)clen)
        return 0;
    *ret_status = atoi(buf + 9);
    *ret_total = hlen + (size_t)clen;
    return 1;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write to tandemd failed");
        p += w;
        n -= (size_t)w;
    }
}

/* Blocking request/response on a keep-alive connection; returns the status. */
static int http_roundtrip(int fd, const char *req, size_t req_len, char *rbuf, size_t cap)
{
    write_all(fd, req, req_len);
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, rbuf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("tandemd closed the connection");
        len += (size_t)r;
        int status;
        size_t total;
        int c = resp_complete(rbuf, len, &status, &total);
        if (c < 0 || (c == 1 && total != len))
            die("bad or pipelined response from tandemd");
        if (c == 1)
            return status;
    }
}

/* ---- ingest ------------------------------------------------------------------------------ */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

static void bprintf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf_t *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (size_t)(n > 0 ? n : 0) + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            die("out of memory");
    }
}

/* A leader rank's serving statistics (docs/contracts.md, telemetry) closing sample k: the rows
 * carry the columns a real rank 0 fills. */
static void stats_members(buf_t *b, uint64_t k)
{
    bprintf(b,
            "\"tokens_out\":%" PRIu64 ",\"requests_done\":%" PRIu64 ",\"ttft_p50_us\":%u,"
            "\"ttft_p99_us\":%u,\"itl_p50_us\":%u,\"itl_p99_us\":%u,\"kv_pages_used\":%u,"
            "\"kv_pages_total\":4096,\"host_pages_used\":0,\"host_pages_total\":0,"
            "\"corruption_total\":0}",
            k * 24, k / 8, (unsigned)(40000 + k % 977), (unsigned)(90000 + k % 1999),
            (unsigned)(9000 + k % 97), (unsigned)(21000 + k % 499), (unsigned)(k % 4096));
}

typedef struct client {
    const opts_t *o;
    int idx;
    uint64_t inst;
    int64_t ts0;
    char **reqs; /* rendered requests (closed loop) */
    size_t *req_lens;
    uint64_t rows, posts, errors;
    double *lat_ms; /* per batch: POST → ack */
} client_t;

/* One full HTTP request for batch `seq` (1-based) of the client. */
static char *render(const client_t *c, uint64_t seq, int last, size_t *ret_len, uint64_t *rows)
{
    const opts_t *o = c->o;
    buf_t body = {0}, req = {0};
    bprintf(&body,
            "{\"v\":1,\"worker\":\"bench-%d\",\"group\":\"bench-%016" PRIx64 "-%d\","
            "\"role\":\"decode\",\"instance_id\":\"%016" PRIx64 "\",\"rank\":0,\"seq\":%" PRIu64
            ",\"samples\":[",
            c->idx, o->tag, c->idx, c->inst, seq);
    uint64_t base = (seq - 1) * (uint64_t)o->samples;
    for (int i = 0; i < o->samples; i++) {
        uint64_t k = base + (uint64_t)i;
        int64_t ts = c->ts0 + (int64_t)k * 200000;
        bprintf(&body,
                "%s{\"ts_us\":%" PRId64 ",\"iter\":%" PRIu64 ",\"path\":\"batch\","
                "\"plan_hash\":\"%016" PRIx64 "\",\"coll_seq\":%" PRIu64
                ",\"coll_hash\":\"%016" PRIx64 "\",",
                i ? "," : "", ts, 1000 + k * 7, (uint64_t)0x9e3779b97f4a7c15u * (k + 1), k * 56,
                (uint64_t)0xc2b2ae3d27d4eb4fu * (k + 3));
        if (k % 4 == 1)
            bprintf(&body,
                    "\"in_coll\":{\"op\":\"all_reduce\",\"seq\":%" PRIu64 ",\"since_us\":%" PRId64
                    "},",
                    k * 56 + 3, ts - 150);
        else
            bprintf(&body, "\"in_coll\":null,");
        bprintf(&body, "\"bs\":%u,\"waiting\":%u,\"running\":%u,", (unsigned)(8 + k % 24),
                (unsigned)(k % 5), (unsigned)(8 + k % 24));
        stats_members(&body, k);
    }
    bprintf(&body, "],\"events\":[");
    static const char *const st[] = {"BOOTSTRAPPING", "WAITING_FOR_INPUT", "TRANSFERRING",
                                     "SUCCESS"};
    int64_t ets = c->ts0 + (int64_t)base * 200000;
    uint64_t n_ev = 0;
    for (int r = 0; r < o->rooms; r++) {
        uint64_t room = (c->inst ^ 0x5bd1e995ull) + (seq << 16) + (uint64_t)r;
        for (int s = 0; s < 4; s++, n_ev++)
            bprintf(&body,
                    "%s{\"ts_us\":%" PRId64 ",\"type\":\"kvpoll\",\"room\":\"%016" PRIx64 "\","
                    "\"from\":%s%s%s,\"to\":\"%s\",\"reason\":null,\"data\":{\"pages\":%d}}",
                    n_ev ? "," : "", ets + r * 1000 + s * 200, room, s ? "\"" : "",
                    s ? st[s - 1] : "null", s ? "\"" : "", st[s], 16 + r);
    }
    bprintf(&body,
            "%s{\"ts_us\":%" PRId64 ",\"type\":\"output_stats\",\"data\":{\"responses\":%d,"
            "\"dsml_leaks\":0}}",
            n_ev ? "," : "", ets + 5, 3 + (int)(seq % 5));
    n_ev++;
    if (last) {
        bprintf(&body, ",{\"ts_us\":%" PRId64 ",\"type\":\"shutdown\"}", ets + 9);
        n_ev++;
    }
    bprintf(&body, "]}");
    bprintf(&req,
            "POST /api/v1/telemetry HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
            o->token, body.len);
    bprintf(&req, "%.*s", (int)body.len, body.p);
    free(body.p);
    *rows = (uint64_t)o->samples + n_ev;
    *ret_len = req.len;
    return req.p;
}

static void *client_main(void *arg)
{
    client_t *c = arg;
    const opts_t *o = c->o;
    char *rbuf = malloc(65536);
    int fd = tcp_connect(o->port);
    double t0 = now_s();
    for (uint64_t seq = 1;; seq++) {
        char *req;
        size_t len;
        uint64_t rows = 0;
        if (o->rate > 0) {
            double due = t0 + (double)(seq - 1) / o->rate;
            if (due - t0 >= o->seconds)
                break;
            double w = due - now_s();
            if (w > 0)
                usleep((useconds_t)(w * 1e6));
            req = render(c, seq, 0, &len, &rows);
        } else {
            if (seq > (uint64_t)o->batches)
                break;
            req = c->reqs[seq - 1];
            len = c->req_lens[seq - 1];
        }
        double t = now_s();
        int status = http_roundtrip(fd, req, len, rbuf, 65536);
        if (o->rate <= 0)
            c->lat_ms[seq - 1] = (now_s() - t) * 1e3;
        if (status != 200 || !strstr(rbuf, "\"acked_seq\"")) {
            c->errors++;
            fprintf(stderr, "controlplane bench: ingest got HTTP %d\n", status);
        }
        c->posts++;
        if (o->rate > 0)
            free(req);
    }
    close(fd);
    free(rbuf);
    return NULL;
}

static long long db_rows(PGconn *pg)
{
    PGresult *r = PQexec(pg, "SELECT (SELECT count(*) FROM samples) + "
                             "(SELECT count(*) FROM transfer_events) + "
                             "(SELECT count(*) FROM events WHERE source = 'worker')");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die(PQerrorMessage(pg));
    long long n = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
    if (!n)
        return -1;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static int run_ingest(const opts_t *o)
{
    PGconn *pg = NULL;
    long long before = 0;
    if (o->rate <= 0) {
        if (!o->dsn)
            die("ingest needs --dsn to count committed rows");
        pg = PQconnectdb(o->dsn);
        if (PQstatus(pg) != CONNECTION_OK)
            die(PQerrorMessage(pg));
        before = db_rows(pg);
    }
    client_t *cs = calloc((size_t)o->clients, sizeof(*cs));
    pthread_t *tids = calloc((size_t)o->clients, sizeof(*tids));
    uint64_t rows = 0, bytes = 0;
    int64_t span = (int64_t)o->batches * o->samples * 200000;
    for (int i = 0; i < o->clients; i++) {
        client_t *c = &cs[i];
        c->o = o;
        c->idx = i;
        c->inst = o->tag + (uint64_t)i;
        c->ts0 = wall_us() - span; /* the newest sample lands about now */
        if (o->rate > 0)
            continue;
        c->reqs = calloc((size_t)o->batches, sizeof(char *));
        c->req_lens = calloc((size_t)o->batches, sizeof(size_t));
        c->lat_ms = calloc((size_t)o->batches, sizeof(double));
        for (int b = 0; b < o->batches; b++) {
            uint64_t r;
            c->reqs[b] = render(c, (uint64_t)b + 1, b + 1 == o->batches, &c->req_lens[b], &r);
            rows += r;
            bytes += c->req_lens[b];
        }
    }
    double t0 = now_s();
    for (int i = 0; i < o->clients; i++)
        pthread_create(&tids[i], NULL, client_main, &cs[i]);
    uint64_t posts = 0, errors = 0;
    for (int i = 0; i < o->clients; i++) {
        pthread_join(tids[i], NULL);
        posts += cs[i].posts;
        errors += cs[i].errors;
    }
    double t_acked = now_s();
    if (o->rate > 0) {
        printf("{\"mode\":\"paced\",\"posts\":%" PRIu64 ",\"errors\":%" PRIu64
               ",\"seconds\":%.3f}\n",
               posts, errors, t_acked - t0);
        return errors ? 1 : 0;
    }
    /* tandemd replies {"acked_seq"} only after the batch's transaction committed (docs/contracts.md
     * §c), so the clock stops at the last ack; count(*) then checks that every row is there. */
    long long got = db_rows(pg) - before;
    double t_count = now_s();
    double t_end = t_acked;
    size_t n = (size_t)o->batches * (size_t)o->clients, k = 0;
    double *lat = calloc(n, sizeof(double));
    for (int i = 0; i < o->clients; i++)
        for (int b = 0; b < o->batches; b++)
            lat[k++] = cs[i].lat_ms[b];
    qsort(lat, n, sizeof(double), cmp_double);
    double el = t_end - t0;
    printf("{\"mode\":\"closed\",\"clients\":%d,\"batches\":%" PRIu64 ",\"errors\":%" PRIu64
           ",\"samples_per_batch\":%d,\"events_per_batch\":%d,\"request_bytes\":%" PRIu64
           ",\"rows_sent\":%" PRIu64 ",\"rows_committed\":%lld,\"seconds\":%.4f,"
           "\"seconds_to_count\":%.4f,\"rows_s\":%.1f,\"batches_s\":%.1f,"
           "\"post_ms_p50\":%.3f,\"post_ms_p99\":%.3f}\n",
           o->clients, posts, errors, o->samples, 4 * o->rooms + 1, bytes, rows, got, el,
           t_count - t0, (double)got / el, (double)posts / el, pct(lat, n, 0.5), pct(lat, n, 0.99));
    PQfinish(pg);
    return errors || got != (long long)rows ? 1 : 0;
}

/* ---- seed: recent history through tandemd --------------------------------------------------- */

static int run_seed(const opts_t *o, int64_t now_us, int from_s, int to_s)
{
    if (o->hist_ranks < 1 || from_s < 0 || to_s < from_s || to_s > 4999)
        die("seed needs --hist-tag, --hist-ranks, --now-us, 0 <= --from-s <= --to-s <= 4999");
    int fd = tcp_connect(o->port);
    char *rbuf = malloc(65536);
    int errors = 0;
    for (int k = 0; k < o->hist_ranks; k++) {
        uint64_t seq = 0;
        for (int s0 = from_s; s0 <= to_s; s0 += 80) {
            int s1 = s0 + 79 > to_s ? to_s : s0 + 79;
            buf_t body = {0}, req = {0};
            bprintf(&body,
                    "{\"v\":1,\"worker\":\"hist-%d\",\"group\":\"hist-%d\",\"role\":\"decode\","
                    "\"instance_id\":\"%016" PRIx64 "\",\"rank\":0,\"seq\":%" PRIu64
                    ",\"samples\":[",
                    k, k % 50, o->hist_tag + (uint64_t)k, ++seq);
            for (int s = s0; s <= s1; s++) {
                int64_t ts = now_us - (int64_t)(4999 - s) * 200000;
                uint64_t u = (uint64_t)s;
                bprintf(&body,
                        "%s{\"ts_us\":%" PRId64 ",\"iter\":%" PRIu64 ",\"path\":\"batch\","
                        "\"plan_hash\":\"%016" PRIx64 "\",\"coll_seq\":%" PRIu64
                        ",\"coll_hash\":\"%016" PRIx64 "\",",
                        s > s0 ? "," : "", ts, 1000 + u * 7, u * 2654435761u, u * 56, u * 40503);
                if (s % 4 == 1)
                    bprintf(&body,
                            "\"in_coll\":{\"op\":\"all_reduce\",\"seq\":%" PRIu64
                            ",\"since_us\":%" PRId64 "},",
                            u * 56 + 3, ts - 150);
                else
                    bprintf(&body, "\"in_coll\":null,");
                bprintf(&body, "\"bs\":%d,\"waiting\":%d,\"running\":%d,", 8 + s % 24, s % 5,
                        8 + s % 24);
                stats_members(&body, (uint64_t)u);
            }
            bprintf(&body, "],\"events\":[");
            if (s1 == to_s)
                bprintf(&body, "{\"ts_us\":%" PRId64 ",\"type\":\"shutdown\"}",
                        now_us - (int64_t)(4999 - to_s) * 200000 + 1);
            bprintf(&body, "]}");
            bprintf(&req,
                    "POST /api/v1/telemetry HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                    "%s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%.*s",
                    o->token, body.len, (int)body.len, body.p);
            int st = http_roundtrip(fd, req.p, req.len, rbuf, 65536);
            if (st != 200 || !strstr(rbuf, "\"acked_seq\""))
                errors++;
            free(body.p);
            free(req.p);
        }
    }
    close(fd);
    free(rbuf);
    printf("{\"mode\":\"seed\",\"ranks\":%d,\"samples_per_rank\":%d,\"errors\":%d}\n",
           o->hist_ranks, to_s - from_s + 1, errors);
    return errors ? 1 : 0;
}

/* ---- open-loop reads --------------------------------------------------------------------- */

typedef struct rconn {
    int fd, busy, kind, closed; /* closed: the server ended it while idle (keep-alive timeout) */
    uint64_t idx;               /* the request in flight */
    double due;
    size_t len;
    char *buf;
} rconn_t;

typedef struct lat {
    double *v;
    size_t n, cap;
    uint64_t errors;
} lat_t;

static void lat_add(lat_t *l, double ms)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4096;
        l->v = realloc(l->v, l->cap * sizeof(double));
        if (!l->v)
            die("out of memory");
    }
    l->v[l->n++] = ms;
}

static size_t read_req(const opts_t *o, uint64_t i, char *out, size_t cap, int *ret_kind)
{
    int n;
    if (i % 2 == 0) {
        uint64_t k = (i / 2 * 2654435761u) % (uint64_t)o->hist_ranks;
        n = snprintf(out, cap,
                     "GET /api/v1/ranks/%016" PRIx64 "/0/history?since_us=%" PRId64
                     "&until_us=%" PRId64 " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Authorization: Bearer %s\r\n\r\n",
                     o->hist_tag + k, o->since_us, o->until_us, o->token);
        *ret_kind = 0;
    } else {
        n = snprintf(out, cap,
                     "GET /api/v1/alerts HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Authorization: Bearer %s\r\n\r\n",
                     o->token);
        *ret_kind = 1;
    }
    return (size_t)n;
}

static void lat_json(const char *name, lat_t *l, int comma)
{
    qsort(l->v, l->n, sizeof(double), cmp_double);
    printf("%s\"%s\":{\"n\":%zu,\"errors\":%" PRIu64
           ",\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f}",
           comma ? "," : "", name, l->n, l->errors, pct(l->v, l->n, 0.5), pct(l->v, l->n, 0.9),
           pct(l->v, l->n, 0.99), pct(l->v, l->n, 0.999), l->n ? l->v[l->n - 1] : -1);
}

static int run_reads(const opts_t *o)
{
    if (o->hist_ranks < 1 || o->until_us <= o->since_us)
        die("reads needs --hist-tag, --hist-ranks, --since-us < --until-us");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    rconn_t cs[MAX_CONNS];
    int nconns = 0, max_open = 0;
    lat_t lat[3] = {{0}}; /* history, alerts, all */
    uint64_t total = (uint64_t)(o->rps * o->seconds), sent = 0, done = 0, waited = 0, reopened = 0,
             resent = 0;
    double t0 = now_s() + 0.05, interval = 1.0 / o->rps;
    char req[1024];
    while (done < total) {
        double now = now_s();
        /* Send everything that is due, on an idle connection (or a new one). */
        while (sent < total && t0 + (double)sent * interval <= now) {
            rconn_t *c = NULL;
            for (int i = 0; i < nconns && !c; i++)
                if (!cs[i].busy)
                    c = &cs[i];
            if (c && c->closed) { /* reopen in its slot */
                c->fd = tcp_connect(o->port);
                c->closed = 0;
                reopened++;
                struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)(c - cs)};
                epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
            }
            if (!c && nconns < o->conns) {
                c = &cs[nconns];
                memset(c, 0, sizeof(*c));
                c->fd = tcp_connect(o->port);
                c->buf = malloc(RBUF_CAP);
                struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)nconns};
                epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
                nconns++;
            }
            if (!c) {
                waited++;
                break; /* all busy: it stays due, its latency clock running */
            }
            int kind;
            size_t n = read_req(o, sent, req, sizeof(req), &kind);
            c->busy = 1;
            c->kind = kind;
            c->idx = sent;
            c->len = 0;
            c->due = t0 + (double)sent * interval;
            write_all(c->fd, req, n);
            sent++;
        }
        int busy = 0;
        for (int i = 0; i < nconns; i++)
            busy += cs[i].busy;
        if (busy > max_open)
            max_open = busy;
        double next = sent < total ? t0 + (double)sent * interval : now + 0.05;
        int wait_ms = next > now ? (int)((next - now) * 1e3) : 0;
        if (sent < total && busy == o->conns)
            wait_ms = 50;
        struct epoll_event evs[64];
        int ne = epoll_wait(ep, evs, 64, wait_ms);
        for (int e = 0; e < ne; e++) {
            rconn_t *c = &cs[evs[e].data.u32];
            ssize_t r = read(c->fd, c->buf + c->len, RBUF_CAP - c->len);
            if (r <= 0 && !c->busy && !c->closed) {
                /* an idle keep-alive connection the server timed out: not an error */
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->closed = 1;
                continue;
            }
            if (r <= 0 && c->busy && c->len == 0) {
                /* The server timed the idle connection out as the request went: nothing of it
                 * was answered, so (a GET) it goes again on a new connection, its clock still
                 * running from its due time. */
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->fd = tcp_connect(o->port);
                reopened++;
                resent++;
                struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)(c - cs)};
                epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
                int kind;
                size_t n = read_req(o, c->idx, req, sizeof(req), &kind);
                write_all(c->fd, req, n);
                continue;
            }
            if (r <= 0)
                die("tandemd closed a read connection with a request in flight");
            c->len += (size_t)r;
            int status;
            size_t tot;
            int k = resp_complete(c->buf, c->len, &status, &tot);
            if (k < 0 || (k == 1 && tot != c->len))
                die("bad response from tandemd");
            if (k == 0 || !c->busy)
                continue;
            double ms = (now_s() - c->due) * 1e3;
            lat_add(&lat[c->kind], ms);
            lat_add(&lat[2], ms);
            if (status != 200) {
                lat[c->kind].errors++;
                lat[2].errors++;
            }
            c->busy = 0;
            done++;
        }
        if (now_s() - t0 > o->seconds + 10)
            break;
    }
    /* Overload: what is still unanswered after the 10 s drain counts with its latency so far (a
     * lower bound), so the percentiles never leave out the slowest requests. */
    double el = now_s() - t0;
    uint64_t unanswered = 0;
    for (int i = 0; i < nconns; i++)
        if (cs[i].busy) {
            lat_add(&lat[cs[i].kind], (t0 + el - cs[i].due) * 1e3);
            lat_add(&lat[2], (t0 + el - cs[i].due) * 1e3);
            lat[cs[i].kind].errors++;
            lat[2].errors++;
            unanswered++;
        }
    for (uint64_t i = sent; i < total; i++) {
        double ms = (el - (double)i * interval) * 1e3;
        lat_add(&lat[i % 2], ms);
        lat_add(&lat[2], ms);
        lat[i % 2].errors++;
        lat[2].errors++;
        unanswered++;
    }
    printf("{\"rps_target\":%.0f,\"sent\":%" PRIu64 ",\"done\":%" PRIu64 ",\"unanswered\":%" PRIu64
           ",\"achieved_rps\":%.1f,\"conns_opened\":%d,"
           "\"max_in_flight\":%d,\"waits_for_conn\":%" PRIu64 ",\"conns_reopened\":%" PRIu64
           ",\"resent_after_idle_close\":%" PRIu64,
           o->rps, sent, done, unanswered, (double)done / el, nconns, max_open, waited, reopened,
           resent);
    lat_json("history", &lat[0], 1);
    lat_json("alerts", &lat[1], 1);
    lat_json("all", &lat[2], 1);
    printf("}\n");
    for (int i = 0; i < nconns; i++) {
        if (!cs[i].closed)
            close(cs[i].fd);
        free(cs[i].buf);
    }
    close(ep);
    return done == total && lat[2].errors == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (argc < 2)
        die("usage: controlplane ingest|reads [options] (see bench/controlplane.c)");
    parse_opts(argc, argv, &o);
    if (!strcmp(argv[1], "ingest"))
        return run_ingest(&o);
    if (!strcmp(argv[1], "reads"))
        return run_reads(&o);
    if (!strcmp(argv[1], "seed"))
        return run_seed(&o, o.since_us, o.from_s, o.to_s);
    die("usage: controlplane ingest|reads [options]");
    return 1;
}
