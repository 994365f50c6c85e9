/*
 * test-report.c — the telemetry reporter against a local HTTP sink written here (plain sockets,
 * keep-alive, tandemd's ack semantics: {"acked_seq":seq}, replays below the high-water mark
 * acknowledged without a second record). The sink goes down and comes back; the test checks
 * that no event is lost or duplicated, order is kept, seq increases, samples are dropped only by
 * the I9 rule and every drop is announced; a second reporter replays the first one's spool; the
 * spool file framing is checked, and a corrupt file is set aside.
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tdm/telemetry.h>
#include <tdm/time.h>

#include "dataplane/report/report.h"
#include "dataplane/report/report_int.h"
#include "tap.h"

/* ---- the sink ------------------------------------------------------------------------------- */

#define MAX_CONN 8
#define MAX_EV 1024

typedef struct conn {
    int fd;
    char *buf;
    size_t len, cap;
} conn_t;

typedef struct sink {
    int port, lfd;
    pthread_t th;
    _Atomic int up, quit, is_up;
    pthread_mutex_t mu;
    struct {
        uint64_t inst, hwm;
    } inst[8];
    int n_inst;
    char ev[MAX_EV][32];
    int n_ev;
    uint64_t samples, dropped_announced, batches, dups, bad;
    uint64_t last_tokens_out; /* of the newest sample received */
    uint32_t last_kv_total;
    int seq_ok;
    _Atomic int ack_delay_ms; /* a slow ack: tandemd holding it until its commit */
    uint64_t gap_inst;        /* the instance whose sample spacing is watched */
    int64_t gap_last_ts, gap_max;
    conn_t c[MAX_CONN];
} sink_t;

static sink_t sk;

static int sink_listen(sink_t *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)s->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0) {
        close(fd);
        return -1;
    }
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    s->port = ntohs(sa.sin_port);
    return fd;
}

static void conn_close(conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static void reply(int fd, int status, const char *body)
{
    char out[512];
    int n = snprintf(out, sizeof(out),
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "\r\n%s",
                     status, strlen(body), body);
    if (send(fd, out, (size_t)n, MSG_NOSIGNAL) < 0)
        return;
}

static void handle_batch(sink_t *s, int fd, const char *body, size_t len)
{
    tdm_tm_batch_t b;
    char err[256], ack[64];
    size_t al;
    if (tdm_tm_batch_decode(body, len, NULL, &b, err, sizeof(err)) != TDM_OK) {
        pthread_mutex_lock(&s->mu);
        s->bad++;
        pthread_mutex_unlock(&s->mu);
        reply(fd, 400, "{\"error\":{\"code\":\"bad\",\"message\":\"bad\",\"type\":\"x\"}}");
        return;
    }
    pthread_mutex_lock(&s->mu);
    int i = 0;
    while (i < s->n_inst && s->inst[i].inst != b.instance_id)
        i++;
    if (i == s->n_inst) {
        s->inst[i].inst = b.instance_id;
        s->inst[i].hwm = 0;
        s->n_inst++;
    }
    if (b.seq <= s->inst[i].hwm) {
        s->dups++;
    } else {
        s->batches++;
        s->inst[i].hwm = b.seq;
        s->samples += b.n_samples;
        for (uint32_t k = 0; b.instance_id == s->gap_inst && k < b.n_samples; k++) {
            if (s->gap_last_ts && b.samples[k].ts_us - s->gap_last_ts > s->gap_max)
                s->gap_max = b.samples[k].ts_us - s->gap_last_ts;
            s->gap_last_ts = b.samples[k].ts_us;
        }
        if (b.n_samples) {
            s->last_tokens_out = b.samples[b.n_samples - 1].tokens_out;
            s->last_kv_total = b.samples[b.n_samples - 1].kv_pages_total;
        }
        for (uint32_t k = 0; k < b.n_events; k++) {
            if (!strcmp(b.events[k].type, "telemetry_dropped")) {
                json_t *data = tdm_tm_event_data(&b.events[k]);
                s->dropped_announced +=
                    (uint64_t)json_integer_value(json_object_get(data, "samples"));
                json_decref(data);
                continue;
            }
            if (s->n_ev < MAX_EV)
                snprintf(s->ev[s->n_ev++], sizeof(s->ev[0]), "%.31s", b.events[k].reason);
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (atomic_load(&s->ack_delay_ms))
        tdm_time_sleep_us((uint64_t)atomic_load(&s->ack_delay_ms) * 1000);
    tdm_tm_ack_encode(b.seq, ack, sizeof(ack), &al);
    tdm_tm_batch_clear(&b);
    reply(fd, 200, ack);
}

/* Serve complete requests in c->buf; returns -1 to close. */
static int conn_serve(sink_t *s, conn_t *c)
{
    for (;;) {
        char *end = c->len ? strstr(c->buf, "\r\n\r\n") : NULL;
        if (!end)
            return 0;
        size_t hl = (size_t)(end - c->buf) + 4, cl = 0;
        char *p = strcasestr(c->buf, "content-length:");
        if (p && p < end)
            cl = strtoul(p + 15, NULL, 10);
        if (c->len < hl + cl)
            return 0;
        if (strncmp(c->buf, "POST /api/v1/telemetry ", 23) != 0)
            reply(c->fd, 404, "{}");
        else
            handle_batch(s, c->fd, c->buf + hl, cl);
        memmove(c->buf, c->buf + hl + cl, c->len - hl - cl);
        c->len -= hl + cl;
        c->buf[c->len] = '\0';
    }
}

static void *sink_thread(void *arg)
{
    sink_t *s = arg;
    while (!atomic_load(&s->quit)) {
        if (!atomic_load(&s->up)) {
            if (s->lfd >= 0) {
                close(s->lfd);
                s->lfd = -1;
                for (int i = 0; i < MAX_CONN; i++)
                    conn_close(&s->c[i]);
            }
            atomic_store(&s->is_up, 0);
            tdm_time_sleep_us(10000);
            continue;
        }
        if (s->lfd < 0) {
            s->lfd = sink_listen(s);
            if (s->lfd < 0) {
                tdm_time_sleep_us(20000);
                continue;
            }
            atomic_store(&s->is_up, 1);
        }
        struct pollfd pf[MAX_CONN + 1];
        pf[0] = (struct pollfd){s->lfd, POLLIN, 0};
        for (int i = 0; i < MAX_CONN; i++)
            pf[i + 1] = (struct pollfd){s->c[i].fd, POLLIN, 0};
        if (poll(pf, MAX_CONN + 1, 20) <= 0)
            continue;
        if (pf[0].revents & POLLIN) {
            int fd = accept(s->lfd, NULL, NULL);
            int i = 0;
            while (i < MAX_CONN && s->c[i].fd >= 0)
                i++;
            if (i == MAX_CONN)
                close(fd);
            else
                s->c[i].fd = fd;
        }
        for (int i = 0; i < MAX_CONN; i++) {
            conn_t *c = &s->c[i];
            if (c->fd < 0 || !(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (c->len + 65536 > c->cap) {
                c->cap = c->cap ? c->cap * 2 : 131072;
                c->buf = realloc(c->buf, c->cap);
            }
            ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
            if (n <= 0) {
                conn_close(c);
                continue;
            }
            c->len += (size_t)n;
            c->buf[c->len] = '\0';
            conn_serve(s, c);
        }
    }
    if (s->lfd >= 0)
        close(s->lfd);
    for (int i = 0; i < MAX_CONN; i++)
        conn_close(&s->c[i]);
    return NULL;
}

static void sink_set(int up)
{
    atomic_store(&sk.up, up);
    uint64_t deadline = tdm_time_mono_us() + 3000000;
    while (atomic_load(&sk.is_up) != up && tdm_time_mono_us() < deadline)
        tdm_time_sleep_us(5000);
}

static int sink_events(void)
{
    pthread_mutex_lock(&sk.mu);
    int n = sk.n_ev;
    pthread_mutex_unlock(&sk.mu);
    return n;
}

static int wait_events(int n, uint64_t timeout_us)
{
    uint64_t deadline = tdm_time_mono_us() + timeout_us;
    while (sink_events() < n && tdm_time_mono_us() < deadline)
        tdm_time_sleep_us(10000);
    return sink_events() >= n;
}

/* Every event e0..e(n-1) exactly once and in order. */
static int events_in_order(int n)
{
    pthread_mutex_lock(&sk.mu);
    int good = sk.n_ev == n;
    for (int i = 0; good && i < n; i++) {
        char want[32];
        snprintf(want, sizeof(want), "e%d", i);
        good = strcmp(sk.ev[i], want) == 0;
        if (!good)
            diag("event %d is %s, expected %s", i, sk.ev[i], want);
    }
    if (sk.n_ev != n)
        diag("%d events, expected %d", sk.n_ev, n);
    pthread_mutex_unlock(&sk.mu);
    return good;
}

static void emit(tdm_report_t *r, int i)
{
    char reason[32];
    uint64_t room = 0x1000u + (uint64_t)i;
    snprintf(reason, sizeof(reason), "e%d", i);
    tdm_report_event(r, "kvpoll", &room, "WAITING_FOR_INPUT", "TRANSFERRING", reason,
                     json_pack("{s:i}", "i", i));
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name), sl = strlen(suffix);
        n += l > sl && strcmp(de->d_name + l - sl, suffix) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

static void test_spool_format(const char *root)
{
    char path[600], err[512];
    tdm_report_rec_t rec = {.order = 7, .seq = 42, .n_samples = 1, .n_events = 2};
    rec.text = (char *)"{\"v\":1}";
    rec.len = strlen(rec.text);
    ok(tdm_report_spool_write(root, &rec, err, sizeof(err)) == TDM_OK, "spool write");
    tdm_report_spool_path(root, 7, path, sizeof(path));
    tdm_report_rec_t back;
    ok(tdm_report_spool_read(path, &back, err, sizeof(err)) == TDM_OK && back.seq == 42 &&
           back.n_samples == 1 && back.n_events == 2 && back.len == rec.len &&
           memcmp(back.text, rec.text, rec.len) == 0,
       "spool read returns what was written");
    free(back.text);

    int fd = open(path, O_WRONLY);
    if (pwrite(fd, "XXXX", 4, 0) != 4)
        diag("pwrite failed");
    close(fd);
    ok(tdm_report_spool_read(path, &back, err, sizeof(err)) == TDM_ERR_FORMAT &&
           strstr(err, "bad magic"),
       "bad magic refused: %s", err);
    tdm_report_spool_write(root, &rec, err, sizeof(err));
    if (truncate(path, TDM_REPORT_SPOOL_HDR + 3) != 0)
        diag("truncate failed");
    ok(tdm_report_spool_read(path, &back, err, sizeof(err)) == TDM_ERR_FORMAT &&
           strstr(err, "does not match the file size"),
       "torn body refused: %s", err);
    tdm_report_spool_write(root, &rec, err, sizeof(err));
    fd = open(path, O_WRONLY);
    uint8_t v2[2] = {2, 0};
    if (pwrite(fd, v2, 2, 4) != 2)
        diag("pwrite failed");
    close(fd);
    ok(tdm_report_spool_read(path, &back, err, sizeof(err)) == TDM_ERR_FORMAT &&
           strstr(err, "version 2"),
       "future version refused: %s", err);
    unlink(path);
}

/* The statistics source of the test: a counter that grows every tick. */
static _Atomic uint64_t stats_calls;
static void fill_stats(void *ctx, tdm_tm_sample_t *s)
{
    s->tokens_out = 1000 + atomic_fetch_add(&stats_calls, 1);
    s->kv_pages_total = *(const uint32_t *)ctx;
}

int main(void)
{
    char root[] = "/tmp/test-report-XXXXXX", url[64], dir0[700], err[512];
    if (!mkdtemp(root))
        return 1;
    test_spool_format(root);

    pthread_mutex_init(&sk.mu, NULL);
    sk.lfd = -1;
    for (int i = 0; i < MAX_CONN; i++)
        sk.c[i].fd = -1;
    atomic_store(&sk.up, 1);
    pthread_create(&sk.th, NULL, sink_thread, &sk);
    sink_set(1);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", sk.port);
    snprintf(dir0, sizeof(dir0), "%s/rank-0", root);

    tdm_progress_page_t *page;
    tdm_progress_create_anon(2, 1, &page);
    tdm_report_opts_t o = {.control_plane = url,
                           .spool_dir = root,
                           .worker = "decode-0",
                           .group = "decode",
                           .role = "decode",
                           .instance_id = 0xabc1,
                           .rank = 0,
                           .page = page,
                           .interval_ms = 50,
                           .spool_max_bytes = 8000};
    static const uint32_t kv_total = 4096;
    o.stats = fill_stats;
    o.stats_ctx = (void *)&kv_total;
    tdm_report_t *r;
    ok(tdm_report_start(&o, &r, err, sizeof(err)) == TDM_OK, "reporter starts");

    /* 1. up: events at once, samples every tick even without progress */
    uint64_t t0 = tdm_time_mono_us();
    for (int i = 0; i < 10; i++)
        emit(r, i);
    ok(wait_events(10, 3000000), "10 events delivered (%.0f ms)",
       (double)(tdm_time_mono_us() - t0) / 1e3);
    tdm_time_sleep_us(500000);
    pthread_mutex_lock(&sk.mu);
    uint64_t s1 = sk.samples;
    pthread_mutex_unlock(&sk.mu);
    ok(s1 >= 6, "samples every tick without progress (%llu in ~0.5 s at 50 ms)",
       (unsigned long long)s1);
    pthread_mutex_lock(&sk.mu);
    uint64_t tok = sk.last_tokens_out;
    uint32_t kvt = sk.last_kv_total;
    pthread_mutex_unlock(&sk.mu);
    ok(tok > 1000 && tok < 1000 + atomic_load(&stats_calls) + 1 && kvt == 4096,
       "each sample carries the stats source's figures (tokens_out %llu after %llu ticks)",
       (unsigned long long)tok, (unsigned long long)atomic_load(&stats_calls));
    uint64_t hb = atomic_load(&page->slot[0].heartbeat_us[TDM_HB_REPORTER]);
    ok(hb && tdm_time_mono_us() - hb < 200000, "reporter heartbeat is fresh");
    ok(tdm_report_event(r, "", NULL, NULL, NULL, NULL, NULL) == TDM_ERR_INVAL &&
           tdm_report_event(r, "x", NULL, "this-state-name-is-far-too-long-for-the-wire", NULL,
                            NULL, NULL) == TDM_ERR_INVAL,
       "events over the docs/contracts.md §c limits are refused at enqueue");

    /* 2. down for 1.5 s: queue and spool, overflow thins samples, never events */
    sink_set(0);
    for (int i = 10; i < 40; i++) {
        emit(r, i);
        tdm_time_sleep_us(50000);
    }
    tdm_report_stats_t st;
    tdm_report_stats(r, &st);
    ok(st.samples_dropped > 0 && st.queued_batches > 0 && st.send_failures > 0,
       "outage: %llu batches queued, %llu samples dropped, %llu failed sends",
       (unsigned long long)st.queued_batches, (unsigned long long)st.samples_dropped,
       (unsigned long long)st.send_failures);
    ok(count_files(dir0, ".tsb") > 0, "queued batches are spool files (%d)",
       count_files(dir0, ".tsb"));
    hb = atomic_load(&page->slot[0].heartbeat_us[TDM_HB_REPORTER]);
    ok(tdm_time_mono_us() - hb < 500000, "heartbeat stays fresh while tandemd is away");

    /* 3. back: replay in order */
    sink_set(1);
    ok(wait_events(40, 5000000), "all 40 events delivered after the outage");
    tdm_time_sleep_us(300000);
    ok(events_in_order(40), "events exactly once, in order");
    tdm_report_stats(r, &st);
    pthread_mutex_lock(&sk.mu);
    uint64_t announced = sk.dropped_announced;
    pthread_mutex_unlock(&sk.mu);
    ok(announced == st.samples_dropped && announced > 0,
       "every dropped sample announced by telemetry_dropped (%llu == %llu)",
       (unsigned long long)announced, (unsigned long long)st.samples_dropped);
    ok(st.queued_batches <= 1, "queue drained (%llu left)", (unsigned long long)st.queued_batches);
    ok(st.samples_formed - st.samples_sent - st.samples_dropped <= st.queued_batches,
       "samples accounted: %llu formed = %llu sent + %llu dropped (+ queued)",
       (unsigned long long)st.samples_formed, (unsigned long long)st.samples_sent,
       (unsigned long long)st.samples_dropped);

    /* 4. down again, stop with batches left: the next reporter replays them */
    sink_set(0);
    for (int i = 40; i < 45; i++)
        emit(r, i);
    tdm_time_sleep_us(200000);
    tdm_report_stats_t st1;
    tdm_report_stop(r, 200);
    int left = count_files(dir0, ".tsb");
    ok(left > 0, "stopped while tandemd is away: %d batches left in the spool", left);
    pthread_mutex_lock(&sk.mu);
    uint64_t sent_before = sk.samples;
    pthread_mutex_unlock(&sk.mu);
    (void)sent_before;
    st1 = st; /* counters of the first reporter up to step 3 are not needed below */
    (void)st1;

    o.instance_id = 0xabc2;
    ok(tdm_report_start(&o, &r, err, sizeof(err)) == TDM_OK, "second reporter on the same spool");
    emit(r, 45);
    sink_set(1);
    ok(wait_events(46, 5000000), "spooled events of the first reporter replayed");
    ok(events_in_order(46), "old instance's events first, then the new one's, each once");
    tdm_report_stop(r, 2000);
    ok(count_files(dir0, ".tsb") == 0, "spool empty after the replay");

    /* 5. a corrupt spool file is set aside, never replayed, and does not stop the reporter */
    char bad[800];
    snprintf(bad, sizeof(bad), "%s/00000000000000ff.tsb", dir0);
    FILE *f = fopen(bad, "w");
    fputs("not a spool file at all, definitely longer than a header", f);
    fclose(f);
    o.instance_id = 0xabc3;
    /* only the planted file is checked: the new reporter may already spool its own first batch */
    ok(tdm_report_start(&o, &r, err, sizeof(err)) == TDM_OK && count_files(dir0, ".bad") == 1 &&
           access(bad, F_OK) != 0,
       "corrupt spool file renamed to .bad; reporter runs");
    tdm_report_stop(r, 1000);
    /* 6. slow acks (400 ms each, under the 1 s HTTP timeout): the ticks of each wait are still
     * sampled and arrive in the next batch, so the rank's samples have no hole */
    o.instance_id = 0xabc4;
    o.spool_dir = NULL;
    pthread_mutex_lock(&sk.mu);
    sk.gap_inst = 0xabc4;
    pthread_mutex_unlock(&sk.mu);
    ok(tdm_report_start(&o, &r, err, sizeof(err)) == TDM_OK, "a reporter for slow acks");
    tdm_time_sleep_us(300000);
    atomic_store(&sk.ack_delay_ms, 400);
    tdm_time_sleep_us(1300000);
    atomic_store(&sk.ack_delay_ms, 0);
    tdm_time_sleep_us(600000);
    tdm_report_stop(r, 1000);
    pthread_mutex_lock(&sk.mu);
    int64_t gap = sk.gap_max;
    ok(sk.bad == 0, "the sink never saw a malformed batch");
    pthread_mutex_unlock(&sk.mu);
    /* 50 ms ticks; 3x slack for a loaded 2-core sanitizer run (a hole would be >= 400 ms) */
    ok(gap > 0 && gap <= 150000,
       "slow acks: samples every tick through the waits (largest gap %.0f ms, ack 400 ms)",
       (double)gap / 1e3);

    atomic_store(&sk.quit, 1);
    pthread_join(sk.th, NULL);
    tdm_progress_close(page);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        diag("cleanup failed");
    return done_testing();
}
