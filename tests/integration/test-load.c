/*
 * test-load.c — the client side of the serving runtime's load, fault and benchmark runs
 * (tests/integration/test-load.sh, test-serving-faults.sh, bench/serving.sh). Not a test by
 * itself: the scripts start the worker group, run one subcommand, and judge its key=value output.
 *
 *   load  --port P --page FILE [--streams 64] [--seed 1] [--abort-pct 25] [--vocab 900]
 *         [--max-new 8..32] [--prompt 4..40] [--limit-s 60] [--token-file F]
 *     N concurrent streamed POST /generate (fixed seed: prompts, lengths, sampling seeds, and
 *     which requests the client abandons at which token); meanwhile the progress page FILE is
 *     sampled every 20 ms for the minimum iteration over ranks while work is pending. Then, with
 *     --token-file, POST /admin/drain and wait for the drained state. Prints
 *     `requests= completed= aborted= errors= broken= tokens= max_req_s= max_stall_s=
 *      pages_free= pages_total= drained=` and one `# req i: ...` line per broken request.
 *   bench --port P --concurrency C --requests R [--prompt-len 32] [--max-new 64] [--vocab 900]
 *     C closed-loop clients, R requests in all, greedy, ignore_eos: prints `tok_s= ttft_p50_ms=
 *     ttft_p90_ms= wall_s= tokens=`.
 *   req METHOD PATH [BODY] [--token-file F] : one request; prints the status, then the body.
 *   health-wait --port P --limit-s S [--arm JSON --token-file F] : (arms the fault JSON through
 *     POST /admin/faults, then) polls /health every 20 ms until it answers 503; prints
 *     `armed=STATUS` and `after_s= reason=...`, seconds since the arm (after_s -1: never).
 *   page FILE : one line per rank of the progress page: `rank= iter= path= plan_hash= coll_seq=
 *     in_coll= in_coll_seq= pending= age_s=`.
 *
 * Exit status: 0 when the subcommand ran (the verdict is in the output), 2 on bad usage, 1 when
 * the worker could not be reached at all.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tdm/progress.h>
#include <tdm/time.h>

#define RESP_CAP (1u << 20)

static int g_port;

/* ---- a minimal HTTP/1.0 client (the server closes after each response) ---- */

static int http_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {0, 200000}; /* recv wakes up 5x/s so deadlines are checked */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_request(int fd, const char *method, const char *path, const char *body,
                        const char *token)
{
    char head[1024];
    size_t blen = body ? strlen(body) : 0;
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s%s%s\r\n",
                     method, path, blen, token ? "Authorization: Bearer " : "", token ? token : "",
                     token ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof(head))
        return -1;
    if (send_all(fd, head, (size_t)n) != 0)
        return -1;
    return blen ? send_all(fd, body, blen) : 0;
}

/* Whole response into buf (NUL-terminated); returns the status, -1 on a transport failure. */
static int http_do(const char *method, const char *path, const char *body, const char *token,
                   char *buf, size_t cap, double limit_s)
{
    int fd = http_connect();
    if (fd < 0)
        return -1;
    if (send_request(fd, method, path, body, token) != 0) {
        close(fd);
        return -1;
    }
    uint64_t deadline = tdm_time_mono_us() + (uint64_t)(limit_s * 1e6);
    size_t len = 0;
    for (;;) {
        if (len + 1 >= cap || tdm_time_mono_us() > deadline)
            break;
        ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
        if (k > 0) {
            len += (size_t)k;
            continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        break;
    }
    close(fd);
    buf[len] = 0;
    int status = -1;
    if (sscanf(buf, "HTTP/%*d.%*d %d", &status) != 1)
        return -1;
    return status;
}

static const char *body_of(const char *resp)
{
    const char *b = strstr(resp, "\r\n\r\n");
    return b ? b + 4 : resp + strlen(resp);
}

static char *read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *t = calloc(1, 512);
    if (!fgets(t, 512, f))
        t[0] = 0;
    fclose(f);
    t[strcspn(t, "\r\n")] = 0;
    return t;
}

/* Value of a Prometheus series (exact name with labels) in a /metrics body; NaN-free: -1. */
static double metric(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, name, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return -1;
}

/* ---- deterministic randomness ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t rnd_in(uint64_t *s, uint32_t lo, uint32_t hi)
{
    return hi <= lo ? lo : lo + (uint32_t)(splitmix(s) % (hi - lo + 1));
}

/* ---- one streamed request ---- */

typedef enum outcome { OUT_NONE = 0, OUT_DONE, OUT_ABORTED, OUT_ERROR, OUT_BROKEN } outcome_t;

typedef struct stream_job {
    uint32_t idx;
    uint32_t prompt_len, max_new, abort_at; /* abort_at 0: read to the end */
    uint32_t vocab;
    uint64_t seed;
    float temperature;
    double limit_s;
    /* results */
    outcome_t out;
    uint32_t tokens;
    uint64_t ttft_us, dur_us;
    int status;
    char why[160];
} stream_job_t;

static void *stream_main(void *arg)
{
    stream_job_t *j = arg;
    uint64_t rs = j->seed * 7919u + 1;
    size_t cap = 64 + (size_t)j->prompt_len * 12;
    char *body = malloc(cap + 256), *p = body;
    p += sprintf(p, "{\"input_ids\":[");
    for (uint32_t i = 0; i < j->prompt_len; i++)
        p += sprintf(p, "%s%u", i ? "," : "", rnd_in(&rs, 3, j->vocab - 1));
    sprintf(p,
            "],\"max_new_tokens\":%u,\"ignore_eos\":true,\"stream\":true,"
            "\"sampling\":{\"temperature\":%.2f,\"seed\":%" PRIu64 "}}",
            j->max_new, (double)j->temperature, j->seed);

    uint64_t t0 = tdm_time_mono_us(), deadline = t0 + (uint64_t)(j->limit_s * 1e6);
    char *buf = malloc(RESP_CAP);
    size_t len = 0, scan = 0;
    int fd = http_connect();
    if (fd < 0 || send_request(fd, "POST", "/generate", body, NULL) != 0) {
        j->out = OUT_BROKEN;
        snprintf(j->why, sizeof(j->why), "cannot send: %s", strerror(errno));
        goto out;
    }
    for (;;) {
        if (tdm_time_mono_us() > deadline) {
            j->out = OUT_BROKEN;
            snprintf(j->why, sizeof(j->why), "still running after %.0f s (%u tokens)", j->limit_s,
                     j->tokens);
            break;
        }
        ssize_t k = recv(fd, buf + len, RESP_CAP - len - 1, 0);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (k <= 0) {
            buf[len] = 0;
            if (j->status == 0)
                sscanf(buf, "HTTP/%*d.%*d %d", &j->status);
            if (j->status != 200 && j->status > 0 && strstr(body_of(buf), "\"error\"")) {
                j->out = OUT_ERROR; /* an explicit refusal (429, 503, ...) */
                snprintf(j->why, sizeof(j->why), "%d %.120s", j->status, body_of(buf));
            } else if (strstr(buf, "data: [DONE]") && strstr(buf, "\"finish_reason\"")) {
                j->out = OUT_DONE;
            } else if (strstr(buf, "data: [DONE]") && strstr(buf, "data: {\"error\"")) {
                j->out = OUT_ERROR; /* an explicit error inside the stream */
                snprintf(j->why, sizeof(j->why), "%.150s", strstr(buf, "data: {\"error\""));
            } else {
                j->out = OUT_BROKEN;
                snprintf(j->why, sizeof(j->why),
                         "connection closed after %u tokens, no end "
                         "event (status %d)",
                         j->tokens, j->status);
            }
            break;
        }
        len += (size_t)k;
        buf[len] = 0;
        if (len + 1 >= RESP_CAP) {
            j->out = OUT_BROKEN;
            snprintf(j->why, sizeof(j->why), "response over %u bytes", RESP_CAP);
            break;
        }
        if (j->status == 0 && strstr(buf, "\r\n"))
            sscanf(buf, "HTTP/%*d.%*d %d", &j->status);
        /* count token events; a pattern split across reads is found on the next pass */
        for (char *q; (q = strstr(buf + scan, "\"token_id\":")) != NULL;) {
            if (!strchr(q, '}'))
                break;
            if (j->tokens++ == 0)
                j->ttft_us = tdm_time_mono_us() - t0;
            scan = (size_t)(q - buf) + 1;
        }
        if (j->abort_at && j->tokens >= j->abort_at) {
            j->out = OUT_ABORTED; /* the client goes away mid-stream */
            break;
        }
    }
out:
    j->dur_us = tdm_time_mono_us() - t0;
    if (fd >= 0)
        close(fd);
    free(buf);
    free(body);
    return NULL;
}

/* ---- the progress page monitor: the minimum iteration over ranks while work is pending ---- */

typedef struct monitor {
    tdm_progress_page_t *page;
    atomic_int stop;
    uint64_t max_stall_us;
    uint64_t samples;
} monitor_t;

static void *monitor_main(void *arg)
{
    monitor_t *m = arg;
    uint64_t last_min = UINT64_MAX, since = tdm_time_mono_us();
    while (!atomic_load(&m->stop)) {
        uint64_t now = tdm_time_mono_us(), mn = UINT64_MAX;
        tdm_rank_record_t rec;
        for (uint16_t r = 0; r < m->page->n_ranks; r++) {
            tdm_progress_read(&m->page->slot[r], &rec);
            if (rec.iter < mn)
                mn = rec.iter;
        }
        tdm_progress_read(&m->page->slot[0], &rec);
        if (rec.pending == 0 || mn != last_min) {
            since = now;
            last_min = mn;
        } else if (now - since > m->max_stall_us) {
            m->max_stall_us = now - since;
        }
        m->samples++;
        tdm_time_sleep_us(20000);
    }
    return NULL;
}

/* ---- subcommands ---- */

static int parse_range(const char *s, uint32_t *lo, uint32_t *hi)
{
    unsigned a, b;
    if (sscanf(s, "%u..%u", &a, &b) == 2 && a <= b) {
        *lo = a;
        *hi = b;
        return 0;
    }
    if (sscanf(s, "%u", &a) == 1) {
        *lo = *hi = a;
        return 0;
    }
    return -1;
}

static int drain_and_wait(const char *token, double limit_s, char *buf, double *ret_free,
                          double *ret_total, double *ret_drained)
{
    if (http_do("POST", "/admin/drain", NULL, token, buf, RESP_CAP, 10) != 200)
        return -1;
    uint64_t deadline = tdm_time_mono_us() + (uint64_t)(limit_s * 1e6);
    do {
        if (http_do("GET", "/metrics", NULL, NULL, buf, RESP_CAP, 10) == 200) {
            const char *b = body_of(buf);
            *ret_drained = metric(b, "tandem_drained");
            *ret_free = metric(b, "tandem_kv_pages_free");
            *ret_total = metric(b, "tandem_kv_pages_capacity");
            if (*ret_drained == 1)
                return 0;
        }
        tdm_time_sleep_us(50000);
    } while (tdm_time_mono_us() < deadline);
    return 0;
}

static int cmd_load(int argc, char **argv)
{
    const char *page_path = NULL, *token_file = NULL;
    uint32_t streams = 64, abort_pct = 25, vocab = 900, nlo = 8, nhi = 32, plo = 4, phi = 40;
    uint64_t seed = 1;
    double limit_s = 60;
    for (int i = 0; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--port"))
            g_port = atoi(v);
        else if (!strcmp(k, "--page"))
            page_path = v;
        else if (!strcmp(k, "--streams"))
            streams = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--seed"))
            seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--abort-pct"))
            abort_pct = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--vocab"))
            vocab = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--max-new") && parse_range(v, &nlo, &nhi) == 0)
            ;
        else if (!strcmp(k, "--prompt") && parse_range(v, &plo, &phi) == 0)
            ;
        else if (!strcmp(k, "--limit-s"))
            limit_s = atof(v);
        else if (!strcmp(k, "--token-file"))
            token_file = v;
        else {
            fprintf(stderr, "test-load load: bad argument %s %s\n", k, v);
            return 2;
        }
    }
    if (g_port <= 0 || !page_path || streams == 0 || vocab < 8 || nlo < 2 || plo == 0) {
        fprintf(stderr, "test-load load: --port and --page are required\n");
        return 2;
    }
    monitor_t mon = {0};
    if (tdm_progress_open(page_path, &mon.page) != TDM_OK) {
        fprintf(stderr, "test-load: cannot open the progress page %s\n", page_path);
        return 1;
    }
    stream_job_t *jobs = calloc(streams, sizeof(*jobs));
    pthread_t *th = calloc(streams, sizeof(*th));
    uint64_t rs = seed;
    for (uint32_t i = 0; i < streams; i++) {
        stream_job_t *j = &jobs[i];
        j->idx = i;
        j->prompt_len = rnd_in(&rs, plo, phi);
        j->max_new = rnd_in(&rs, nlo, nhi);
        j->vocab = vocab;
        j->seed = seed * 1000003u + i;
        j->temperature = (float)rnd_in(&rs, 0, 10) / 10.0f;
        j->limit_s = limit_s;
        if (rnd_in(&rs, 0, 99) < abort_pct)
            j->abort_at = rnd_in(&rs, 1, j->max_new - 1);
    }
    pthread_t mth;
    pthread_create(&mth, NULL, monitor_main, &mon);
    uint64_t t0 = tdm_time_mono_us();
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 << 10);
    for (uint32_t i = 0; i < streams; i++)
        pthread_create(&th[i], &at, stream_main, &jobs[i]);
    for (uint32_t i = 0; i < streams; i++)
        pthread_join(th[i], NULL);
    pthread_attr_destroy(&at);
    double wall = (double)(tdm_time_mono_us() - t0) / 1e6;

    /* abandoned requests are still pending until the server notices: keep watching the stall
     * while the pending count drains (bounded) */
    for (int k = 0; k < 250; k++) {
        tdm_rank_record_t rec;
        tdm_progress_read(&mon.page->slot[0], &rec);
        if (rec.pending == 0)
            break;
        tdm_time_sleep_us(20000);
    }
    atomic_store(&mon.stop, 1);
    pthread_join(mth, NULL);

    uint32_t n[OUT_BROKEN + 1] = {0}, tokens = 0;
    uint64_t max_dur = 0;
    for (uint32_t i = 0; i < streams; i++) {
        n[jobs[i].out]++;
        tokens += jobs[i].tokens;
        if (jobs[i].dur_us > max_dur)
            max_dur = jobs[i].dur_us;
        if (jobs[i].out == OUT_BROKEN || jobs[i].out == OUT_NONE)
            printf("# req %u: %s\n", i, jobs[i].why);
        else if (jobs[i].out == OUT_ERROR)
            printf("# req %u: explicit error: %s\n", i, jobs[i].why);
    }
    double pf = -1, pt = -1, dr = -1;
    char *buf = malloc(RESP_CAP);
    if (token_file) {
        char *tok = read_token(token_file);
        if (!tok || drain_and_wait(tok, 20, buf, &pf, &pt, &dr) != 0)
            printf("# drain request failed\n");
        free(tok);
    }
    printf("requests=%u completed=%u aborted=%u errors=%u broken=%u tokens=%u wall_s=%.2f "
           "max_req_s=%.2f max_stall_s=%.2f samples=%" PRIu64 " pages_free=%.0f "
           "pages_total=%.0f drained=%.0f\n",
           streams, n[OUT_DONE], n[OUT_ABORTED], n[OUT_ERROR], n[OUT_BROKEN] + n[OUT_NONE], tokens,
           wall, (double)max_dur / 1e6, (double)mon.max_stall_us / 1e6, mon.samples, pf, pt, dr);
    free(buf);
    free(jobs);
    free(th);
    tdm_progress_close(mon.page);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct bench_ctx {
    atomic_uint next;
    uint32_t requests, prompt_len, max_new, vocab;
    stream_job_t *jobs;
} bench_ctx_t;

static void *bench_client(void *arg)
{
    bench_ctx_t *b = arg;
    for (;;) {
        uint32_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->requests)
            return NULL;
        stream_main(&b->jobs[i]);
    }
}

static int cmd_bench(int argc, char **argv)
{
    uint32_t conc = 1, requests = 0, plen = 32, max_new = 64, vocab = 900;
    for (int i = 0; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--port"))
            g_port = atoi(v);
        else if (!strcmp(k, "--concurrency"))
            conc = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--requests"))
            requests = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--prompt-len"))
            plen = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--max-new"))
            max_new = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--vocab"))
            vocab = (uint32_t)strtoul(v, NULL, 10);
        else {
            fprintf(stderr, "test-load bench: bad argument %s\n", k);
            return 2;
        }
    }
    if (!requests)
        requests = conc;
    if (g_port <= 0 || conc == 0 || plen == 0 || max_new == 0 || vocab < 8) {
        fprintf(stderr, "test-load bench: --port, --concurrency > 0 required\n");
        return 2;
    }
    bench_ctx_t b = {.requests = requests, .prompt_len = plen, .max_new = max_new, .vocab = vocab};
    b.jobs = calloc(requests, sizeof(*b.jobs));
    for (uint32_t i = 0; i < requests; i++) {
        b.jobs[i] = (stream_job_t){.idx = i,
                                   .prompt_len = plen,
                                   .max_new = max_new,
                                   .vocab = vocab,
                                   .seed = i + 1,
                                   .limit_s = 600};
    }
    pthread_t *th = calloc(conc, sizeof(*th));
    uint64_t t0 = tdm_time_mono_us();
    for (uint32_t c = 0; c < conc; c++)
        pthread_create(&th[c], NULL, bench_client, &b);
    for (uint32_t c = 0; c < conc; c++)
        pthread_join(th[c], NULL);
    double wall = (double)(tdm_time_mono_us() - t0) / 1e6;
    uint64_t *ttft = calloc(requests, sizeof(uint64_t)), tokens = 0;
    uint32_t good = 0;
    for (uint32_t i = 0; i < requests; i++) {
        if (b.jobs[i].out != OUT_DONE)
            continue;
        ttft[good++] = b.jobs[i].ttft_us;
        tokens += b.jobs[i].tokens;
    }
    qsort(ttft, good, sizeof(uint64_t), cmp_u64);
    printf("requests=%u ok=%u tokens=%" PRIu64 " wall_s=%.3f tok_s=%.1f ttft_p50_ms=%.1f "
           "ttft_p90_ms=%.1f\n",
           requests, good, tokens, wall, wall > 0 ? (double)tokens / wall : 0,
           good ? (double)ttft[good / 2] / 1e3 : -1,
           good ? (double)ttft[(good * 9) / 10 < good ? (good * 9) / 10 : good - 1] / 1e3 : -1);
    free(ttft);
    free(th);
    free(b.jobs);
    return good == requests ? 0 : 1;
}

static int cmd_req(int argc, char **argv)
{
    const char *method = NULL, *path = NULL, *body = NULL, *token_file = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            g_port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--token-file") && i + 1 < argc)
            token_file = argv[++i];
        else if (!method)
            method = argv[i];
        else if (!path)
            path = argv[i];
        else
            body = argv[i];
    }
    if (g_port <= 0 || !method || !path) {
        fprintf(stderr, "test-load req: --port P METHOD PATH [BODY] [--token-file F]\n");
        return 2;
    }
    char *tok = token_file ? read_token(token_file) : NULL, *buf = malloc(RESP_CAP);
    int st = http_do(method, path, body, tok, buf, RESP_CAP, 30);
    printf("%d\n%s", st, st < 0 ? "" : body_of(buf));
    free(tok);
    free(buf);
    return st < 0 ? 1 : 0;
}

static int cmd_health_wait(int argc, char **argv)
{
    double limit_s = 10;
    const char *arm = NULL, *token_file = NULL;
    for (int i = 0; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            g_port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--limit-s"))
            limit_s = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--arm"))
            arm = argv[i + 1];
        else if (!strcmp(argv[i], "--token-file"))
            token_file = argv[i + 1];
    }
    if (g_port <= 0 || (arm && !token_file)) {
        fprintf(stderr, "test-load health-wait: --port P [--limit-s S] [--arm JSON "
                        "--token-file F]\n");
        return 2;
    }
    char *buf = malloc(RESP_CAP);
    uint64_t t0 = tdm_time_mono_us(), deadline = t0 + (uint64_t)(limit_s * 1e6);
    int st = 0;
    if (arm) { /* the clock starts when the fault is armed */
        char *tok = read_token(token_file);
        st = http_do("POST", "/admin/faults", arm, tok, buf, RESP_CAP, 10);
        free(tok);
        printf("armed=%d\n", st);
        if (st != 200) {
            printf("after_s=-1 reason=arming failed: %s\n", body_of(buf));
            free(buf);
            return 0;
        }
    }
    while (tdm_time_mono_us() < deadline) {
        st = http_do("GET", "/health", NULL, NULL, buf, RESP_CAP, 5);
        if (st == 503)
            break;
        tdm_time_sleep_us(20000);
    }
    if (st == 503) {
        const char *b = body_of(buf);
        printf("after_s=%.3f reason=%s\n", (double)(tdm_time_mono_us() - t0) / 1e6, b);
    } else {
        printf("after_s=-1 reason=none (last status %d)\n", st);
    }
    free(buf);
    return 0;
}

static int cmd_page(int argc, char **argv)
{
    tdm_progress_page_t *p;
    if (argc < 1 || tdm_progress_open(argv[0], &p) != TDM_OK) {
        fprintf(stderr, "test-load page: cannot open %s\n", argc ? argv[0] : "(none)");
        return argc < 1 ? 2 : 1;
    }
    uint64_t now = tdm_time_mono_us();
    for (uint16_t r = 0; r < p->n_ranks; r++) {
        tdm_rank_record_t rec;
        tdm_progress_read(&p->slot[r], &rec);
        printf("rank=%u iter=%" PRIu64 " path=%s plan_hash=%016" PRIx64 " coll_seq=%" PRIu64
               " in_coll=%s in_coll_seq=%" PRIu64 " pending=%u age_s=%.2f\n",
               r, rec.iter, tdm_path_name((tdm_path_t)rec.path), rec.plan_hash, rec.coll_seq,
               rec.in_coll_op == TDM_COLL_NONE ? "none"
                                               : tdm_coll_op_name((tdm_coll_op_t)rec.in_coll_op),
               rec.in_coll_seq, rec.pending,
               rec.progress_us && now > rec.progress_us ? (double)(now - rec.progress_us) / 1e6
                                                        : 0.0);
    }
    tdm_progress_close(p);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test-load load|bench|req|health-wait|page ...\n");
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "load"))
        return cmd_load(argc - 2, argv + 2);
    if (!strcmp(c, "bench"))
        return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(c, "req"))
        return cmd_req(argc - 2, argv + 2);
    if (!strcmp(c, "health-wait"))
        return cmd_health_wait(argc - 2, argv + 2);
    if (!strcmp(c, "page"))
        return cmd_page(argc - 2, argv + 2);
    fprintf(stderr, "test-load: unknown subcommand %s\n", c);
    return 2;
}
