/*
 * rank.c — a rank of a serving group (contract in worker.h): map the group's shared files,
 * load this rank's share of the model, build the KV pool, the graph and the executor, and run
 * the loop. Rank 0 also runs the scheduler, starts the HTTP layer (weak hook) and, with
 * TDM_SCHED_SELFTEST, the self-test client. Signals go to one thread (sigwait): on rank 0
 * SIGTERM/SIGINT stop the scheduler, which broadcasts SHUTDOWN so every rank leaves cleanly;
 * followers wait for that plan (or the abort word the launcher sets when something died).
 *
 * Each rank runs its telemetry reporter (dataplane/report, weak: a no-op without
 * --control-plane) from the moment the page is mapped until teardown.
 *
 * KV pool size on CPU: --kv-cpu-bytes per rank (default 256 MiB), capped at what
 * --max-running-requests sequences of the full context need.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/report/report.h"
#include "dataplane/worker/worker_int.h"

/* The reporter is linked into tandem-worker (dataplane/worker.mk) but not into the scheduler's
 * own tests: weak, like the HTTP hooks. */
#pragma weak tdm_report_rank_start
#pragma weak tdm_report_rank_stop
#pragma weak tdm_report_rank_reporter
#pragma weak tdm_report_event

#define DEFAULT_MAX_RUNNING 64u
#define CPU_CHUNK_CAP 2048u
#define IDLE_PLAN_US 100000u

struct tdm_worker {
    const tdm_worker_config_t *cfg;
    uint32_t rank, tp;
    tdm_progress_page_t *page;
    void *region[2];
    size_t region_size[2];
    tdm_worker_shared_t *shared;
    tdm_comm_t tensor, plan;
    int have_tensor, have_plan;
    tdm_model_t *model;
    tdm_tok_t *tok;
    tdm_exec_t *x;
    tdm_sched_t *sched;
    /* PD (rank 0 of a prefill or decode group): the transfer engine over rank 0's pool */
    tdm_sched_pd_t pd;
    tdm_xfer_t *xfer;
    char pd_host[256];
    uint16_t pd_port;
    _Atomic(tdm_sched_t *) kick; /* what the engine's event callback wakes */
    /* decode at TP 1 on the CPU: the engine allocated the pool through UCX and the executor's
     * pool lives in it (the executor and scheduler are freed before the engine) */
    int xfer_owns_kv;
    /* PD at TP > 1: every rank's KV pool lives in a shared file (<prefix>-kv<rank>) that rank 0
     * maps, so rank 0's transfer engine moves every rank's pages (docs/serving.md) */
    char prefix[256];
    void *kv_mem; /* this rank's pool memory (NULL: the executor allocates) */
    size_t kv_mem_bytes;
    tdm_dtype_t kv_dtype;
    uint32_t page_size, num_pages;
    void *peer_mem[TDM_XFER_RANKS_MAX]; /* rank 0: ranks 1.. */
    size_t peer_bytes[TDM_XFER_RANKS_MAX];
    tdm_kv_pool_t *peer_pool[TDM_XFER_RANKS_MAX];
    pthread_t sig_thread;
    int have_sig_thread;
    volatile int stop;
    uint64_t wd_usec, wd_last; /* rank 0 under tandem-worker@.service: the watchdog period */
};

const tdm_worker_config_t *tdm_worker_config(const tdm_worker_t *w)
{
    return w->cfg;
}
uint32_t tdm_worker_rank(const tdm_worker_t *w)
{
    return w->rank;
}
uint32_t tdm_worker_tp_size(const tdm_worker_t *w)
{
    return w->tp;
}
uint64_t tdm_worker_group_id(const tdm_worker_t *w)
{
    return w->page->group_id;
}
tdm_sched_t *tdm_worker_sched(tdm_worker_t *w)
{
    return w->sched;
}
tdm_progress_page_t *tdm_worker_progress(tdm_worker_t *w)
{
    return w->page;
}
tdm_worker_shared_t *tdm_worker_shared(tdm_worker_t *w)
{
    return w->shared;
}
const tdm_tok_t *tdm_worker_tokenizer(const tdm_worker_t *w)
{
    return w->tok;
}
const tdm_model_config_t *tdm_worker_model_config(const tdm_worker_t *w)
{
    return tdm_model_config(w->model);
}
tdm_xfer_t *tdm_worker_xfer(tdm_worker_t *w)
{
    return w->xfer;
}
int tdm_worker_bootstrap_port(const tdm_worker_t *w)
{
    return w->xfer && w->pd == TDM_SCHED_PD_PREFILL ? (int)tdm_xfer_port(w->xfer) : 0;
}
uint64_t tdm_worker_weight_bytes(const tdm_worker_t *w)
{
    return w->x ? tdm_exec_weight_bytes(w->x) : 0;
}

void tdm_worker_request_stop(tdm_worker_t *w)
{
    w->stop = 1;
    if (w->sched)
        tdm_sched_stop(w->sched);
}

int tdm_worker_main(const tdm_worker_config_t *cfg, int argc, char **argv)
{
    if (cfg->rank < 0)
        return tdm_worker_launch(cfg, argc, argv);
    return tdm_worker_rank_main(cfg);
}

/* SIGTERM on rank 0 drains: new requests are refused, the running ones finish, for at most
 * --drain-timeout seconds; then (or at a second signal, or at SIGINT) the scheduler stops. */
static void *sig_main(void *arg)
{
    tdm_worker_t *w = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    uint64_t drain_until = 0;
    for (;;) {
        int sig = 0;
        if (drain_until) {
            struct timespec poll = {0, 20 * 1000000L};
            sig = sigtimedwait(&set, NULL, &poll);
            if (sig < 0) {
                tdm_sched_t *s = atomic_load(&w->kick);
                tdm_sched_stats_t st = {0};
                if (s)
                    tdm_sched_stats(s, &st);
                if (st.drained || tdm_time_mono_us() >= drain_until) {
                    tdm_info(TDM_SUB_SCHED, "msg=\"drain over; stopping\" drained=%d", st.drained);
                    drain_until = 0;
                    tdm_worker_request_stop(w);
                }
                continue;
            }
        } else if (sigwait(&set, &sig) != 0) {
            return NULL;
        }
        if (sig == SIGUSR1)
            return NULL;
        if (w->rank != 0)
            continue;
        tdm_sched_t *s = atomic_load(&w->kick);
        if (sig == SIGTERM && !drain_until && s && w->cfg->drain_timeout > 0) {
            tdm_info(TDM_SUB_SCHED, "msg=\"SIGTERM: draining\" timeout_s=%.1f",
                     w->cfg->drain_timeout);
            sd_notify(0, "STOPPING=1\nSTATUS=draining");
            tdm_sched_drain(s);
            drain_until = tdm_time_mono_us() + (uint64_t)(w->cfg->drain_timeout * 1e6);
        } else {
            drain_until = 0;
            tdm_worker_request_stop(w);
        }
    }
}

/* Under tandem-worker@.service (Type=notify, NotifyAccess=all) the launcher is the unit's main
 * process and rank 0 its child: systemd's WATCHDOG_PID names the launcher, so rank 0 takes the
 * watchdog only when WATCHDOG_PID is its parent (not when tandemd's own unit environment leaked
 * into a group tandemd supervises). The ping comes from the scheduler loop itself (after each
 * published iteration, idle heartbeats every IDLE_PLAN_US included): a wedged loop stops it. */
static int notify_is_ours(void)
{
    const char *pid = getenv("WATCHDOG_PID");
    return getenv("NOTIFY_SOCKET") && (!pid || strtoll(pid, NULL, 10) == (long long)getppid());
}

static void watchdog_setup(tdm_worker_t *w)
{
    const char *usec = getenv("WATCHDOG_USEC");
    if (w->rank == 0 && usec && getenv("WATCHDOG_PID") && notify_is_ours())
        w->wd_usec = strtoull(usec, NULL, 10);
}

static void watchdog_on_iter(void *ctx)
{
    tdm_worker_t *w = ctx;
    uint64_t now = tdm_time_mono_us();
    if (now - w->wd_last >= w->wd_usec / 2) {
        sd_notify(0, "WATCHDOG=1");
        w->wd_last = now;
    }
}

static tdm_status_t map_file(const char *path, size_t *ret_size, void **ret)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? TDM_ERR_NOTFOUND : TDM_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return TDM_ERR_IO;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return TDM_ERR_NOMEM;
    *ret_size = (size_t)st.st_size;
    *ret = m;
    return TDM_OK;
}

/* ---- the self-test client (rank 0): a file of requests in, a file of outputs out ---- */

typedef struct st_req {
    int32_t *ids;
    uint32_t n, n_out, cap_out;
    int32_t *out;
    int done, ignore_eos;
    uint64_t seed;
    float temp;
    tdm_finish_reason_t fin;
} st_req_t;

static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t st_cv = PTHREAD_COND_INITIALIZER;

static void st_cb(void *ctx, const tdm_req_event_t *ev)
{
    st_req_t *q = ctx;
    pthread_mutex_lock(&st_mu);
    if (ev->kind == TDM_REQ_TOKEN && q->n_out < q->cap_out)
        q->out[q->n_out++] = ev->token;
    if (ev->kind != TDM_REQ_TOKEN) {
        q->done = 1;
        q->fin = ev->finish;
        pthread_cond_broadcast(&st_cv);
    }
    pthread_mutex_unlock(&st_mu);
}

static void *selftest_main(void *arg)
{
    tdm_worker_t *w = arg;
    const char *in = getenv("TDM_SCHED_SELFTEST"), *outp = getenv("TDM_SCHED_SELFTEST_OUT");
    FILE *f = fopen(in, "r");
    st_req_t *qs = NULL;
    uint32_t nq = 0;
    char line[65536];
    int bad = 0;
    if (!f) {
        tdm_err(TDM_SUB_SCHED, "msg=\"self-test: cannot open\" path=\"%s\"", in);
        bad = 1;
    }
    while (f && fgets(line, sizeof(line), f)) {
        unsigned max_new, ignore_eos;
        unsigned long long seed;
        float temp;
        int off = 0;
        if (sscanf(line, "%u %llu %f %u %n", &max_new, &seed, &temp, &ignore_eos, &off) != 4)
            continue;
        qs = tdm_realloc(qs, (nq + 1) * sizeof(*qs));
        st_req_t *q = &qs[nq++];
        memset(q, 0, sizeof(*q));
        q->ids = tdm_calloc(strlen(line) / 2 + 1, sizeof(int32_t));
        for (char *p = line + off, *end; *p && *p != '\n'; p = *end == ',' ? end + 1 : end) {
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            q->ids[q->n++] = (int32_t)v;
        }
        q->cap_out = max_new;
        q->out = tdm_calloc(max_new + 1, sizeof(int32_t));
        q->seed = seed;
        q->temp = temp;
        q->ignore_eos = (int)ignore_eos;
    }
    /* submitted only once parsed: callbacks hold pointers into qs */
    for (uint32_t i = 0; i < nq; i++) {
        st_req_t *q = &qs[i];
        tdm_req_params_t p = {0};
        p.prompt = q->ids;
        p.n_prompt = q->n;
        p.max_new_tokens = q->cap_out;
        tdm_sample_params_default(&p.sampling);
        p.sampling.temperature = q->temp;
        p.sampling.seed = q->seed;
        p.ignore_eos = q->ignore_eos;
        p.cb = st_cb;
        p.ctx = q;
        char err[256];
        uint64_t id;
        if (tdm_sched_submit(w->sched, &p, &id, err, sizeof(err)) != TDM_OK) {
            tdm_err(TDM_SUB_SCHED, "msg=\"self-test: submit failed\" line=%u err=\"%s\"", i + 1,
                    err);
            q->done = 1;
            q->fin = TDM_FINISH_ERROR;
        }
    }
    if (f)
        fclose(f);
    pthread_mutex_lock(&st_mu);
    for (uint32_t i = 0; i < nq; i++)
        while (!qs[i].done)
            pthread_cond_wait(&st_cv, &st_mu);
    pthread_mutex_unlock(&st_mu);
    FILE *o = outp ? fopen(outp, "w") : NULL;
    for (uint32_t i = 0; o && i < nq; i++) {
        fprintf(o, "%s ", tdm_finish_reason_name(qs[i].fin));
        for (uint32_t k = 0; k < qs[i].n_out; k++)
            fprintf(o, "%s%d", k ? "," : "", qs[i].out[k]);
        fprintf(o, "\n");
    }
    if (o)
        fclose(o);
    else
        bad = 1;
    for (uint32_t i = 0; i < nq; i++) {
        tdm_free(qs[i].ids);
        tdm_free(qs[i].out);
    }
    tdm_free(qs);
    tdm_info(TDM_SUB_SCHED, "msg=\"self-test done\" requests=%u", nq);
    (void)bad;
    tdm_worker_request_stop(w);
    return NULL;
}

/* ---- PD: the transfer engine of rank 0 (docs/serving.md "Prefill/decode disaggregation") ---- */

tdm_status_t tdm_worker_pd_check(const tdm_worker_config_t *cfg, tdm_sched_pd_t *ret_pd, char *host,
                                 size_t host_len, uint16_t *ret_port, char *err, size_t err_len)
{
    const char *mode = cfg->disaggregation_mode;
    tdm_sched_pd_t pd = !strcmp(mode, "prefill")  ? TDM_SCHED_PD_PREFILL
                        : !strcmp(mode, "decode") ? TDM_SCHED_PD_DECODE
                                                  : TDM_SCHED_PD_NONE;
    uint16_t port = (uint16_t)cfg->disaggregation_bootstrap_port;
    if (pd != TDM_SCHED_PD_NONE && cfg->tp_size > TDM_XFER_RANKS_MAX) {
        snprintf(err, err_len, "--disaggregation-mode %s supports --tp-size up to %u, got %lld",
                 mode, TDM_XFER_RANKS_MAX, (long long)cfg->tp_size);
        return TDM_ERR_UNSUPPORTED;
    }
    if (pd == TDM_SCHED_PD_DECODE) {
        const char *a = cfg->disaggregation_prefill_addr, *colon = strrchr(a, ':');
        char *end = NULL;
        long v = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!a[0]) {
            snprintf(err, err_len,
                     "--disaggregation-mode decode needs "
                     "--disaggregation-prefill-addr host:port (the prefill group's "
                     "bootstrap listener)");
            return TDM_ERR_INVAL;
        }
        if (!colon || colon == a || (size_t)(colon - a) >= host_len || !end || *end ||
            end == colon + 1 || v < 1 || v > 65535) {
            snprintf(err, err_len,
                     "--disaggregation-prefill-addr '%s': expected host:port with a "
                     "port in 1..65535",
                     a);
            return TDM_ERR_INVAL;
        }
        memcpy(host, a, (size_t)(colon - a));
        host[colon - a] = '\0';
        port = (uint16_t)v;
    } else if (pd == TDM_SCHED_PD_PREFILL) {
        snprintf(host, host_len, "%s", cfg->host);
    } else if (cfg->disaggregation_prefill_addr[0]) {
        snprintf(err, err_len, "--disaggregation-prefill-addr is for --disaggregation-mode decode");
        return TDM_ERR_INVAL;
    }
    *ret_pd = pd;
    *ret_port = port;
    return TDM_OK;
}

/* Engine events: telemetry (docs/contracts.md §c; every KVPoll transition is a "kvpoll" event) and
 * a wake-up for the scheduler. Called with engine locks held: the reporter only queues, the kick
 * only takes the scheduler's intake lock, under which the scheduler never calls the engine. */
static void pd_event(void *ctx, const tdm_xfer_event_t *ev)
{
    tdm_worker_t *w = ctx;
    tdm_report_t *rep =
        tdm_report_rank_reporter && tdm_report_event ? tdm_report_rank_reporter() : NULL;
    if (rep) {
        int kv = !strcmp(ev->type, "kvpoll");
        (void)tdm_report_event(rep, ev->type, ev->room ? &ev->room : NULL,
                               kv ? tdm_kvpoll_name(ev->from) : NULL,
                               kv ? tdm_kvpoll_name(ev->to) : NULL, ev->reason, NULL);
    }
    tdm_sched_t *s = atomic_load(&w->kick);
    if (s)
        tdm_sched_kick(s);
}

int tdm_worker_pd_ready(tdm_worker_t *w, char *why, size_t why_len)
{
    if (!w->xfer || w->pd != TDM_SCHED_PD_DECODE)
        return 1;
    if (tdm_xfer_wait_ready(w->xfer, 0, why, why_len) == TDM_OK)
        return 1;
    if (!why[0])
        snprintf(why, why_len, "not registered with the prefill group at %s:%u yet", w->pd_host,
                 w->pd_port);
    return 0;
}

uint64_t tdm_worker_pd_corruption(tdm_worker_t *w)
{
    if (!w->xfer)
        return 0;
    tdm_xfer_stats_t st;
    tdm_xfer_stats(w->xfer, &st);
    return st.checksum_mismatch + st.aux_mismatch + st.corruption_risk;
}

void tdm_worker_pd_metrics(tdm_worker_t *w, FILE *f)
{
    if (!w->xfer)
        return;
    tdm_xfer_stats_t st;
    uint32_t n[TDM_KVPOLL_MAX];
    tdm_xfer_stats(w->xfer, &st);
    tdm_xfer_room_counts(w->xfer, n);
    tdm_sched_stats_t ss;
    tdm_sched_stats(w->sched, &ss);
    fprintf(f, "# HELP tandem_xfer_rooms Live transfer rooms by KVPoll state\n"
               "# TYPE tandem_xfer_rooms gauge\n");
    for (int k = 0; k < TDM_KVPOLL_MAX; k++)
        fprintf(f, "tandem_xfer_rooms{state=\"%s\"} %u\n", tdm_kvpoll_name((tdm_kvpoll_t)k), n[k]);
    fprintf(f,
            "# HELP tandem_xfer_registered 1 while a peer group is registered\n"
            "# TYPE tandem_xfer_registered gauge\ntandem_xfer_registered %d\n",
            tdm_xfer_wait_ready(w->xfer, 0, NULL, 0) == TDM_OK);
    {
        static const uint64_t bounds[TDM_XFER_LAT_NB] = TDM_XFER_LAT_BOUNDS_US;
        uint64_t cum = 0;
        fprintf(f, "# HELP tandem_xfer_latency_seconds KV transfer rooms from open to SUCCESS "
                   "(prefill side)\n# TYPE tandem_xfer_latency_seconds histogram\n");
        for (int b = 0; b <= TDM_XFER_LAT_NB; b++) {
            cum += st.room_lat[b];
            if (b < TDM_XFER_LAT_NB)
                fprintf(f, "tandem_xfer_latency_seconds_bucket{le=\"%g\"} %llu\n",
                        (double)bounds[b] / 1e6, (unsigned long long)cum);
            else
                fprintf(f, "tandem_xfer_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                        (unsigned long long)cum);
        }
        fprintf(f, "tandem_xfer_latency_seconds_sum %.6f\ntandem_xfer_latency_seconds_count %llu\n",
                (double)st.room_lat_sum_us / 1e6, (unsigned long long)cum);
    }
    /* the engine's threads (I8): /health fails when one goes stale; the ages show which */
    fprintf(f, "# HELP tandem_xfer_thread_heartbeat_age_seconds Time since each transfer-engine "
               "thread's last heartbeat (rank 0; -1 = never)\n"
               "# TYPE tandem_xfer_thread_heartbeat_age_seconds gauge\n");
    uint64_t now = tdm_time_mono_us();
    for (int t = TDM_HB_BOOTSTRAP; t <= TDM_HB_TRANSFER; t++) {
        uint64_t hb = atomic_load(&w->page->slot[0].heartbeat_us[t]);
        fprintf(f, "tandem_xfer_thread_heartbeat_age_seconds{thread=\"%s\"} %.6f\n",
                tdm_hb_thread_name((tdm_hb_thread_t)t),
                hb == 0    ? -1.0
                : hb < now ? (double)(now - hb) / 1e6
                           : 0.0);
    }
    struct {
        const char *name, *help;
        uint64_t v;
        int gauge;
    } m[] = {
        {"frames_rx_total", "Bootstrap-channel frames received", st.frames_rx, 0},
        {"frames_tx_total", "Bootstrap-channel frames sent", st.frames_tx, 0},
        {"frames_unknown_total", "Frames of unknown type, dropped", st.frames_unknown, 0},
        {"frames_malformed_total", "Malformed frames or bad headers, dropped", st.frames_malformed,
         0},
        {"frames_unexpected_total", "Valid frames the role or state does not take, dropped",
         st.frames_unexpected, 0},
        {"conns_accepted_total", "Bootstrap connections accepted", st.conns_accepted, 0},
        {"conns_closed_bad_total", "Bootstrap connections closed for a bad frame",
         st.conns_closed_bad, 0},
        {"register_refused_total", "REGISTER refused (layout or config mismatch)",
         st.register_refused, 0},
        {"peer_lost_total", "Peer channels lost (EOF or 3 s of silence)", st.peer_lost, 0},
        {"rooms_ok_total", "Rooms that ended in SUCCESS", st.rooms_ok, 0},
        {"rooms_failed_total", "Rooms that ended in FAILED", st.rooms_failed, 0},
        {"aborts_sent_total", "ABORT frames sent", st.aborts_sent, 0},
        {"aborts_acked_total", "ABORT_ACK frames received", st.aborts_acked, 0},
        {"aborts_received_total", "ABORT frames received", st.aborts_received, 0},
        {"checksum_mismatch_total", "Rooms whose KV checksums did not match", st.checksum_mismatch,
         0},
        {"aux_mismatch_total", "Rooms whose aux slot did not match", st.aux_mismatch, 0},
        {"corruption_risk_total", "Rooms whose ABORT_ACK timed out", st.corruption_risk, 0},
        {"quarantined", "Rooms whose pages are quarantined now", st.quarantined, 1},
        {"bytes_put_total", "KV and aux bytes written by UCX puts", st.bytes_put, 0},
        {"puts_total", "UCX puts issued", st.puts, 0},
        {"checksum_bytes_total", "KV bytes covered by computed or verified checksums",
         st.checksum_bytes, 0},
        {"faults_fired_total", "Transfer-engine fault points that fired", st.faults_fired, 0},
        {"transferring_requests", "Decode requests waiting for their KV", ss.transferring, 1},
        {"rooms_held", "Ended requests whose pages wait for their room's release", ss.rooms_held,
         1},
        {"rooms_taken_total", "Prefill: rooms taken by the scheduler", ss.pd_rooms_taken, 0},
        {"commit_failed_total", "Decode: rooms that failed or failed verification",
         ss.pd_commit_failed, 0},
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
        fprintf(f, "# HELP tandem_xfer_%s %s\n# TYPE tandem_xfer_%s %s\ntandem_xfer_%s %llu\n",
                m[i].name, m[i].help, m[i].name, m[i].gauge ? "gauge" : "counter", m[i].name,
                (unsigned long long)m[i].v);
    fprintf(f,
            "# HELP tandem_xfer_checksum_seconds_total Time spent computing or verifying KV "
            "checksums\n# TYPE tandem_xfer_checksum_seconds_total counter\n"
            "tandem_xfer_checksum_seconds_total %.9f\n",
            (double)st.checksum_ns / 1e9);
}

/* The transfer engine's fault points, answered from the group's fault table (fault.h); rank 0's
 * loop iteration is the clock of after_iter. */
static int pd_fault(void *ctx, tdm_xfer_fault_t f, uint32_t *ret_arg)
{
    tdm_worker_t *w = ctx;
    tdm_fault_table_t *t = &w->shared->faults;
    tdm_rank_record_t rec;
    tdm_progress_read(&w->page->slot[0], &rec);
    uint64_t iter = rec.iter;
    switch (f) {
    case TDM_XFER_FAULT_FLIP_KV_BITS:
        return tdm_fault_fire(t, TDM_FAULT_FLIP_KV_BITS, 0, iter, ret_arg);
    case TDM_XFER_FAULT_STALL_TRANSFER:
        return tdm_fault_fire(t, TDM_FAULT_STALL_TRANSFER, 0, iter, ret_arg);
    case TDM_XFER_FAULT_SLOW_HOST_COPY:
        return tdm_fault_fire(t, TDM_FAULT_SLOW_HOST_COPY, 0, iter, ret_arg);
    case TDM_XFER_FAULT_DROP_ABORT:
        return tdm_fault_fire(t, TDM_FAULT_DROP_ABORT_HANDLER, 0, iter, ret_arg);
    case TDM_XFER_FAULT_KILL_BOOTSTRAP:
        return tdm_fault_fire_thread(t, 0, iter, TDM_HB_BOOTSTRAP);
    case TDM_XFER_FAULT_KILL_RECV:
        return tdm_fault_fire_thread(t, 0, iter, TDM_HB_RECV);
    case TDM_XFER_FAULT_KILL_TRANSFER:
        return tdm_fault_fire_thread(t, 0, iter, TDM_HB_TRANSFER);
    default:
        return 0;
    }
}

static void kv_path(const char *prefix, uint32_t rank, char *out, size_t out_len)
{
    snprintf(out, out_len, "%s-kv%u", prefix, rank);
}

/* This rank's KV pool as a shared file rank 0 maps (PD at TP > 1). */
static tdm_status_t pd_kv_create(tdm_worker_t *w, const tdm_kv_layout_t *l, char *err,
                                 size_t err_len)
{
    char path[300];
    uint64_t bytes;
    if (tdm_kv_layout_pool_bytes(l, w->num_pages, &bytes) != TDM_OK || bytes > SIZE_MAX) {
        snprintf(err, err_len, "KV pool of %u pages overflows", w->num_pages);
        return TDM_ERR_RANGE;
    }
    kv_path(w->prefix, w->rank, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
        snprintf(err, err_len, "KV pool file %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return TDM_ERR_IO;
    }
    void *m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, err_len, "KV pool file %s: mmap: %s", path, strerror(errno));
        return TDM_ERR_NOMEM;
    }
    w->kv_mem = m;
    w->kv_mem_bytes = (size_t)bytes;
    return TDM_OK;
}

/* Rank 0: once every rank has loaded (its pool file exists and the executor owns it), map ranks
 * 1.. and describe each with its own layout (its tp_rank); the files are unlinked then. */
static tdm_status_t pd_map_peers(tdm_worker_t *w, char *err, size_t err_len)
{
    char path[300];
    const tdm_model_config_t *mc = tdm_model_config(w->model);
    while (atomic_load(&w->shared->ranks_loaded) < w->tp) {
        if (atomic_load(&w->page->abort) || w->stop) {
            snprintf(err, err_len, "a rank failed before its KV pool was mapped");
            return TDM_ERR_ABORTED;
        }
        tdm_time_sleep_us(10000);
    }
    for (uint32_t r = 1; r < w->tp; r++) {
        tdm_kv_layout_t l;
        tdm_status_t st = tdm_kv_layout_init(mc, w->kv_dtype, w->page_size, w->tp, r, &l);
        if (st == TDM_OK) {
            kv_path(w->prefix, r, path, sizeof(path));
            st = map_file(path, &w->peer_bytes[r], &w->peer_mem[r]);
        }
        if (st == TDM_OK)
            st = tdm_kv_pool_init_mem(&l, w->num_pages, w->peer_mem[r], w->peer_bytes[r],
                                      &w->peer_pool[r]);
        if (st != TDM_OK) {
            snprintf(err, err_len, "rank %u's KV pool (%s): %s", r, path, tdm_status_str(st));
            return st;
        }
    }
    for (uint32_t r = 0; r < w->tp; r++) {
        kv_path(w->prefix, r, path, sizeof(path));
        (void)unlink(path);
    }
    return TDM_OK;
}

/* Start the transfer engine over rank 0's pool; with `ucx_layout` (decode, TP 1, CPU: before the
 * executor exists) the engine allocates a pool of w->num_pages pages through UCX instead, which
 * the executor then adopts (tdm_exec_cfg_t.kv_mem): a same-host prefill maps it and writes a room
 * with plain copies instead of ucp_put_nbx over tcp. */
static tdm_status_t pd_start(tdm_worker_t *w, const tdm_kv_layout_t *ucx_layout, char *err,
                             size_t err_len)
{
    const tdm_worker_config_t *cfg = w->cfg;
    tdm_xfer_cfg_t xc = {0};
    xc.role = w->pd == TDM_SCHED_PD_PREFILL ? TDM_XFER_PREFILL : TDM_XFER_DECODE;
    xc.instance_id = w->page->group_id;
    xc.n_ranks = w->tp;
    if (ucx_layout) {
        xc.ucx_alloc = 1;
        xc.kv_layout[0] = ucx_layout;
        xc.kv_num_pages = w->num_pages;
    } else {
        xc.kv[0] = tdm_kv_pool_buffers(tdm_exec_pool(w->x));
    }
    if (!ucx_layout && tdm_exec_kv_device(w->x)) {
        /* --device cuda (tp 1): the pages live in the GPU pool, moved by CUDA IPC */
        xc.kv[0] = tdm_exec_kv_device(w->x);
        xc.kv_cuda = 1;
    }
    if (w->tp > 1) {
        tdm_status_t st = pd_map_peers(w, err, err_len);
        if (st != TDM_OK)
            return st;
        for (uint32_t r = 1; r < w->tp; r++)
            xc.kv[r] = tdm_kv_pool_buffers(w->peer_pool[r]);
    }
    xc.host = w->pd_host;
    xc.port = w->pd_port;
    xc.bootstrap_timeout_us = (uint64_t)(cfg->disaggregation_bootstrap_timeout * 1e6);
    xc.disable_checksums = cfg->disaggregation_disable_checksums;
    xc.progress = &w->page->slot[0];
    xc.on_event = pd_event;
    /* fault points can be armed only with --enable-fault-injection; without them the engine may
     * copy a same-host room on the sending thread (its fault points act on the transfer thread) */
    xc.fault = cfg->enable_fault_injection ? pd_fault : NULL;
    xc.ctx = w;
    tdm_status_t st = tdm_xfer_init(&xc, &w->xfer);
    if (st != TDM_OK) {
        snprintf(err, err_len, "transfer engine (%s %s:%u): %s",
                 w->pd == TDM_SCHED_PD_PREFILL ? "bootstrap listener on" : "prefill at", w->pd_host,
                 w->pd_port, tdm_status_str(st));
        return st;
    }
    if (w->pd == TDM_SCHED_PD_PREFILL)
        tdm_info(TDM_SUB_CORE, "msg=\"prefill bootstrap listener on %s:%u\"", w->pd_host,
                 tdm_xfer_port(w->xfer));
    else
        tdm_info(TDM_SUB_CORE, "msg=\"decode registers with the prefill group at %s:%u\"",
                 w->pd_host, w->pd_port);
    return TDM_OK;
}

/* ---- the rank ---- */

static void worker_free(tdm_worker_t *w)
{
    tdm_sched_free(w->sched);
    tdm_exec_free(w->x);
    for (uint32_t r = 0; r < TDM_XFER_RANKS_MAX; r++) {
        tdm_kv_pool_free(w->peer_pool[r]);
        if (w->peer_mem[r])
            munmap(w->peer_mem[r], w->peer_bytes[r]);
    }
    if (w->kv_mem)
        munmap(w->kv_mem, w->kv_mem_bytes);
    if (w->have_tensor)
        tdm_comm_destroy(&w->tensor);
    if (w->have_plan)
        tdm_comm_destroy(&w->plan);
    tdm_tok_free(w->tok);
    tdm_model_free(w->model);
    for (int i = 0; i < 2; i++)
        if (w->region[i])
            munmap(w->region[i], w->region_size[i]);
    if (w->shared)
        munmap(w->shared, sizeof(*w->shared));
    tdm_progress_close(w->page);
}

static tdm_status_t kv_dtype_of(const tdm_worker_config_t *cfg, const tdm_model_config_t *mc,
                                tdm_dtype_t *ret)
{
    if (!strcmp(cfg->kv_cache_dtype, "auto")) {
        *ret = mc->weight_dtype == TDM_DTYPE_F32 ? TDM_DTYPE_F32 : TDM_DTYPE_BF16;
        return TDM_OK;
    }
    return tdm_dtype_parse(cfg->kv_cache_dtype, ret);
}

int tdm_worker_rank_main(const tdm_worker_config_t *cfg)
{
    tdm_worker_t w0 = {0}, *w = &w0;
    char err[512] = "", path[600];
    const char *prefix = getenv("TDM_GROUP_SHM");
    tdm_status_t st;
    int rc = 1;
    size_t sz;
    pthread_t st_thread;
    int have_st = 0, api_started = 0, report_started = 0;
    sigset_t set;

    w->cfg = cfg;
    w->rank = (uint32_t)cfg->rank;
    w->tp = (uint32_t)cfg->tp_size;
    if (!prefix || !prefix[0]) {
        tdm_err(TDM_SUB_CORE, "msg=\"--rank is set by the launcher (TDM_GROUP_SHM missing); run "
                              "tandem-worker without --rank\"");
        return 2;
    }
    const int on_cuda = strcmp(cfg->device, "cuda") == 0;
    if (on_cuda && cfg->tp_size != 1) {
        tdm_err(TDM_SUB_CORE, "msg=\"--device cuda runs --tp-size 1 only in this build\"");
        return 2;
    }
#ifndef TDM_HAVE_CUDA_RT
    if (on_cuda && strcmp(cfg->disaggregation_mode, "null") != 0) {
        /* GPU KV moves by CUDA IPC (dataplane/xfer/cuda_ipc.c), built only with the runtime */
        tdm_err(TDM_SUB_CORE,
                "msg=\"--disaggregation-mode %s with --device cuda needs the CUDA runtime (KV "
                "transfer by CUDA IPC); this build has none\"",
                cfg->disaggregation_mode);
        return 2;
    }
#endif
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* a launcher killed with SIGKILL cannot stop its ranks: the kernel does (SIGTERM → the same
     * clean stop as a forwarded one); the prefix names the launcher, in case it is already gone */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    const char *dash = strrchr(prefix, '-');
    if (dash && atoi(dash + 1) > 0 && getppid() != (pid_t)atoi(dash + 1)) {
        tdm_err(TDM_SUB_CORE, "msg=\"rank %u: the launcher (pid %s) is gone\"", w->rank, dash + 1);
        return 1;
    }

    tdm_worker_shm_path(prefix, SHM_PROGRESS, path, sizeof(path));
    TDM_CHECK_GOTO(tdm_progress_open(path, &w->page), st, err_shm);
    if (w->page->n_ranks != w->tp || w->rank >= w->tp) {
        snprintf(err, sizeof(err), "group of %u ranks, but --tp-size %u --rank %u",
                 w->page->n_ranks, w->tp, w->rank);
        goto err_msg;
    }
    for (int i = 0; i < 2; i++) {
        tdm_worker_shm_path(prefix, SHM_TENSOR + i, path, sizeof(path));
        TDM_CHECK_GOTO(map_file(path, &w->region_size[i], &w->region[i]), st, err_shm);
    }
    tdm_worker_shm_path(prefix, SHM_GROUP, path, sizeof(path));
    TDM_CHECK_GOTO(map_file(path, &sz, (void **)&w->shared), st, err_shm);
    if (sz != sizeof(*w->shared) || w->shared->magic != TDM_WORKER_SHARED_MAGIC) {
        st = TDM_ERR_FORMAT;
        goto err_shm;
    }
    TDM_CHECK_GOTO(tdm_shm_comm_init(w->region[0], w->rank, w->page, 0, &w->tensor), st, err_shm);
    w->have_tensor = 1;
    TDM_CHECK_GOTO(tdm_shm_comm_init(w->region[1], w->rank, w->page, 1, &w->plan), st, err_shm);
    w->have_plan = 1;
    if (pthread_create(&w->sig_thread, NULL, sig_main, w) == 0)
        w->have_sig_thread = 1;
    /* telemetry from the start: a rank that fails to load is still seen (best effort: a
     * reporter that cannot start is logged by the reporter and the rank serves without it) */
    if (tdm_report_rank_start && tdm_report_rank_start(w) == TDM_OK)
        report_started = 1;

    /* ---- load ---- */
    uint64_t t0 = tdm_time_mono_us();
    st = tdm_model_load(cfg->model_path, &w->model, err, sizeof(err));
    if (st != TDM_OK)
        goto err_msg;
    const tdm_model_config_t *mc = tdm_model_config(w->model);
    if (w->rank == 0) {
        snprintf(path, sizeof(path), "%s/tokenizer.json", cfg->model_path);
        st = tdm_tok_load(path, &w->tok, err, sizeof(err));
        if (st != TDM_OK)
            goto err_msg;
    }
    tdm_dtype_t kv_dtype;
    if (kv_dtype_of(cfg, mc, &kv_dtype) != TDM_OK) {
        snprintf(err, sizeof(err), "--kv-cache-dtype %s is not supported", cfg->kv_cache_dtype);
        goto err_msg;
    }
    uint32_t max_running =
        cfg->max_running_requests > 0 ? (uint32_t)cfg->max_running_requests : DEFAULT_MAX_RUNNING;
    uint32_t max_context = mc->max_position_embeddings;
    uint32_t ps = (uint32_t)cfg->page_size;
    uint32_t chunk =
        cfg->chunked_prefill_size > 0 ? (uint32_t)cfg->chunked_prefill_size : max_context;
    if (!on_cuda && chunk > CPU_CHUNK_CAP)
        chunk = CPU_CHUNK_CAP;
    tdm_kv_layout_t layout;
    st = tdm_kv_layout_init(mc, kv_dtype, ps, w->tp, w->rank, &layout);
    if (st != TDM_OK) {
        snprintf(err, sizeof(err), "KV layout: %s", tdm_status_str(st));
        goto err_msg;
    }
    uint64_t budget = (uint64_t)cfg->kv_cpu_bytes;
    uint64_t cap = (uint64_t)max_running * ((max_context + ps - 1) / ps);
    uint32_t num_pages;
    /* --device cuda: the engine sizes its pool from the free GPU memory and
     * --mem-fraction-static; num_pages is only the cap (every slot at full context) */
    st = on_cuda ? (cap > UINT32_MAX - 1 ? TDM_ERR_RANGE : (num_pages = (uint32_t)cap, TDM_OK))
                 : tdm_kv_pool_configure(&layout, budget, cap > UINT32_MAX - 1 ? 0 : (uint32_t)cap,
                                         &num_pages);
    if (st != TDM_OK) {
        snprintf(err, sizeof(err), "KV pool: %" PRIu64 " bytes hold no page", budget);
        goto err_msg;
    }
    snprintf(w->prefix, sizeof(w->prefix), "%s", prefix);
    w->kv_dtype = kv_dtype;
    w->page_size = ps;
    w->num_pages = num_pages;
    int pd_shared_kv = w->tp > 1 && (!strcmp(cfg->disaggregation_mode, "prefill") ||
                                     !strcmp(cfg->disaggregation_mode, "decode"));
    if (pd_shared_kv && pd_kv_create(w, &layout, err, sizeof(err)) != TDM_OK)
        goto err_msg;
    void *ucx_kv = NULL;
    uint64_t ucx_kv_bytes = 0;
    if (w->tp == 1 && !on_cuda && !strcmp(cfg->disaggregation_mode, "decode")) {
        /* the pool from UCX (pd_start): the engine starts before the executor */
        st = tdm_worker_pd_check(cfg, &w->pd, w->pd_host, sizeof(w->pd_host), &w->pd_port, err,
                                 sizeof(err));
        if (st != TDM_OK || pd_start(w, &layout, err, sizeof(err)) != TDM_OK)
            goto err_msg;
        w->xfer_owns_kv = 1;
        ucx_kv = tdm_kv_pool_buffers(tdm_xfer_kv_pool(w->xfer, 0))->base;
        (void)tdm_kv_layout_pool_bytes(&layout, num_pages, &ucx_kv_bytes);
    }
    tdm_hicache_cfg_t hcfg;
    if (w->rank == 0 &&
        tdm_worker_faults_at_start(cfg, &w->shared->faults, w->tp, err, sizeof(err)) != TDM_OK)
        goto err_msg;
    if (cfg->enable_hierarchical_cache &&
        tdm_worker_hicache_cfg(cfg, w->tp, &layout, num_pages, max_running, &w->shared->faults,
                               &hcfg, err, sizeof(err)) != TDM_OK)
        goto err_msg;
    tdm_exec_cfg_t xc = {.model = w->model,
                         .tp_size = w->tp,
                         .rank = w->rank,
                         .kv_dtype = kv_dtype,
                         .page_size = ps,
                         .num_pages = num_pages,
                         .max_seqs = max_running,
                         .max_tokens = chunk + max_running,
                         .max_context = max_context,
                         .threads = 0,
                         .tensor = &w->tensor,
                         .plan = &w->plan,
                         .page = w->page,
                         .faults = &w->shared->faults,
                         .kv_mem = ucx_kv ? ucx_kv : w->kv_mem,
                         .kv_mem_bytes = ucx_kv ? ucx_kv_bytes : w->kv_mem_bytes,
                         .hicache = cfg->enable_hierarchical_cache ? &hcfg : NULL,
                         .device_cuda = on_cuda,
                         .mem_fraction_static = cfg->mem_fraction_static,
                         .cuda_backend = cfg->cuda_backend};
    st = tdm_exec_init(&xc, &w->x, err, sizeof(err));
    if (xc.hicache && (st == TDM_OK || st == TDM_ERR_FORMAT))
        tdm_worker_hicache_report(&hcfg, st != TDM_OK);
    if (st != TDM_OK)
        goto err_msg;
    num_pages = tdm_kv_pool_num_pages(tdm_exec_pool(w->x)); /* cuda: what fitted */
    if ((w->kv_mem || ucx_kv) &&
        tdm_kv_pool_buffers(tdm_exec_pool(w->x))->base != (ucx_kv ? ucx_kv : w->kv_mem)) {
        snprintf(err, sizeof(err),
                 "--disaggregation-mode %s at --tp-size %u needs an executor that keeps its KV "
                 "pool in the shared memory it is given (tdm_exec_cfg_t.kv_mem); this build's "
                 "does not",
                 cfg->disaggregation_mode, w->tp);
        goto err_msg;
    }
    atomic_store(&w->shared->resident_weight_bytes[w->rank], tdm_exec_weight_bytes(w->x));
    atomic_store(&w->shared->kv_pool_bytes[w->rank], tdm_exec_kv_bytes(w->x));
    atomic_fetch_add(&w->shared->ranks_loaded, 1);
    tdm_info(TDM_SUB_CORE,
             "msg=\"rank %u/%u loaded in %.2f s: %.1f MiB of weights, %u KV pages of %u tokens "
             "(%s), %u slots, %u-token chunks, %s loop\"",
             w->rank, w->tp, (double)(tdm_time_mono_us() - t0) / 1e6,
             (double)tdm_exec_weight_bytes(w->x) / (1 << 20), num_pages, ps,
             tdm_dtype_name(kv_dtype), max_running, chunk,
             cfg->disable_overlap_schedule ? "lockstep" : "overlap");

    if (w->rank != 0) {
        st = tdm_exec_follow(w->x, &w->stop);
        rc = st == TDM_OK ? 0 : 1;
        if (st != TDM_OK)
            tdm_err(TDM_SUB_CORE, "msg=\"rank %u: loop ended: %s\"", w->rank, tdm_status_str(st));
        goto out;
    }

    /* ---- rank 0: transfer engine (PD), scheduler, HTTP, self-test ---- */
    st = tdm_worker_pd_check(cfg, &w->pd, w->pd_host, sizeof(w->pd_host), &w->pd_port, err,
                             sizeof(err));
    if (st != TDM_OK)
        goto err_msg;
    if (w->pd != TDM_SCHED_PD_NONE && !w->xfer && pd_start(w, NULL, err, sizeof(err)) != TDM_OK)
        goto err_msg;
    tdm_sched_cfg_t sc = {.max_running = max_running,
                          .max_queued = (uint32_t)cfg->max_queued_requests,
                          .chunk_tokens = chunk,
                          .overlap = !cfg->disable_overlap_schedule,
                          .idle_plan_us = IDLE_PLAN_US,
                          .tok = w->tok,
                          .mc = mc,
                          .pd = w->pd,
                          .xfer = w->xfer,
                          .on_event = tdm_worker_sched_event};
    watchdog_setup(w);
    if (w->wd_usec) {
        sc.on_iter = watchdog_on_iter;
        sc.on_iter_ctx = w;
    }
    st = tdm_sched_init(&sc, w->x, &w->sched, err, sizeof(err));
    if (st != TDM_OK)
        goto err_msg;
    atomic_store(&w->kick, w->sched);
    while (atomic_load(&w->shared->ranks_loaded) < w->tp && !atomic_load(&w->page->abort) &&
           !w->stop)
        tdm_time_sleep_us(10000);
    atomic_store(&w->page->loaded, 1);
    if (tdm_api_serve) {
        st = tdm_api_serve(w);
        if (st != TDM_OK) {
            snprintf(err, sizeof(err), "HTTP layer: %s", tdm_status_str(st));
            tdm_worker_request_stop(w);
        } else {
            api_started = 1;
        }
    }
    if (getenv("TDM_SCHED_SELFTEST") && pthread_create(&st_thread, NULL, selftest_main, w) == 0)
        have_st = 1;
    if (!w->stop && notify_is_ours())
        sd_notify(0, "READY=1\nSTATUS=serving");
    if (w->stop)
        tdm_sched_stop(w->sched);
    st = tdm_sched_run(w->sched);
    rc = st == TDM_OK ? 0 : 1;
    if (have_st)
        pthread_join(st_thread, NULL);
    if (api_started && tdm_api_stop)
        tdm_api_stop(w);
    goto out;

err_shm:
    snprintf(err, sizeof(err), "group shared files under %s: %s", prefix, tdm_status_str(st));
err_msg:
    tdm_err(TDM_SUB_CORE, "msg=\"rank %u: %s\"", w->rank, err);
    rc = 1;
out:
    if (w->page) {
        tdm_progress_slot_t *sl = &w->page->slot[w->rank];
        tdm_progress_write_begin(sl);
        sl->rec.alive = 0;
        tdm_progress_write_end(sl);
    }
    if (w->have_sig_thread) {
        pthread_kill(w->sig_thread, SIGUSR1);
        pthread_join(w->sig_thread, NULL);
    }
    /* the engine's threads post events to the reporter and read rank 0's pool: gone first,
     * unless the pool is the engine's (decode threads do not read it): then the scheduler and
     * the executor over it go first */
    if (w->xfer_owns_kv) {
        atomic_store(&w->kick, NULL);
        tdm_sched_free(w->sched);
        w->sched = NULL;
        tdm_exec_free(w->x);
        w->x = NULL;
    }
    tdm_xfer_free(w->xfer);
    w->xfer = NULL;
    if (report_started && tdm_report_rank_stop)
        tdm_report_rank_stop(w, rc == 0); /* before the page is unmapped: it reads the page */
    worker_free(w);
    return rc;
}
