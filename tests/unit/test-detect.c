/*
 * test-detect.c — the detectors and the alert lifecycle on replayed streams over a virtual clock
 * (controlplane/detect/detect.h, controlplane/detect/alert.h).
 *
 * Streams come from the group simulation in detect-replay.h, written as JSONL and replayed through
 * the strict telemetry decoder; the rank_idle_path incidents are also committed as fixtures
 * (tests/fixtures/streams/) and replayed from there. `test-detect --write-fixtures DIR` rewrites
 * them.
 */
#include "config.h"

#include <tdm/layout.h>
#include <time.h>

#include "tap.h"
#include "unit/detect-replay.h"

#define S_ 1000000ll /* one second in µs */

static void replay_new(rp_t *r, FILE *f)
{
    rp_init(r, NULL, NULL, 0);
    long n = rp_replay(r, f, 0);
    ok(n > 0, "stream replays (%ld lines)", n);
}

static const tdm_cp_alert_t *first_alert(rp_t *r, tdm_cp_alert_class_t c)
{
    return r->opened_id[c] ? tdm_cp_alerts_get(r->alerts, r->opened_id[c]) : NULL;
}

/* ---- clean stream ------------------------------------------------------------------------- */

static void test_clean_10min(void)
{
    FILE *f = tmpfile();
    syn_t s;
    syn_init(&s, 2, "decode", 0x1111, 7, f);
    s.idle_mode = 1;
    syn_run(&s, 600 * S_);
    fflush(f);
    /* CPU time: the build machine is shared, wall time measures the neighbours */
    clock_t c0 = clock();
    rp_t r;
    replay_new(&r, f);
    rp_advance(&r, 601 * S_);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    is_int(r.n_opened, 0, "10-minute clean TP=2 stream: no alert (first: %s)",
           r.n_opened ? r.first_summary[0] : "-");
    for (int c = 0; c < TDM_CP_ALERT_MAX; c++)
        if (r.opened_at[c])
            diag("  %s: %s", tdm_cp_alert_class_name((tdm_cp_alert_class_t)c), r.first_summary[c]);
    ok(secs < 10.0, "replayed in %.2f s of CPU (< 10 s); %" PRIu64 " ticks", secs,
       tdm_cp_detect_stats(r.det)->ticks);
    rp_free(&r);
    fclose(f);
}

/* ---- rank_idle_path ----------------------------------------------------------------------- */

/* A busy group; at ~5 s rank `bad` runs one BATCH plan as IDLE. Returns the fault time. */
static int64_t synth_idle_path(FILE *f, int tp, int bad, uint64_t seed, const char *group)
{
    syn_t s;
    syn_init(&s, tp, group, 0x2000 + (uint64_t)tp, seed, f);
    s.waiting = 64;
    syn_run(&s, 5 * S_);
    s.waiting += 64;
    s.idle_path_rank = bad;
    s.idle_path_iter = s.plan_iter + 1;
    while (!(s.plan_iter == s.idle_path_iter && s.plan_open))
        syn_run(&s, s.t + 1000);
    int64_t fault = s.t;
    syn_run(&s, fault + 12 * S_);
    fflush(f);
    return fault;
}

static void check_idle_path(FILE *f, int64_t fault, int tp, int bad, const char *what)
{
    rp_t r;
    replay_new(&r, f);
    rp_advance(&r, (uint64_t)fault + 15 * S_);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_RANK_DIVERGENCE);
    ok(a != NULL, "%s: RANK_DIVERGENCE opened", what);
    if (a) {
        int64_t lat = (int64_t)r.opened_at[TDM_CP_ALERT_RANK_DIVERGENCE] - fault;
        ok(lat > 0 && lat <= 2 * S_, "%s: within 2 s of the fault (%.2f s)", what, lat / 1e6);
        json_t *mr = json_object_get(a->evidence, "minority_ranks");
        ok(json_array_size(mr) == 1 && json_integer_value(json_array_get(mr, 0)) == bad,
           "%s: minority rank is %d", what, bad);
        is_str(json_string_value(json_object_get(a->evidence, "op")), "allreduce",
               "%s: the group waits in allreduce", what);
        is_str(json_string_value(json_object_get(a->evidence, "minority_op")), "broadcast",
               "%s: rank %d waits in the next plan broadcast", what, bad);
        is_int(json_array_size(json_object_get(a->evidence, "ranks")), tp,
               "%s: per-rank table has %d rows", what, tp);
        ok(a->remedy &&
               !strcmp(json_string_value(json_object_get(a->remedy, "action")), "restart_group") &&
               !strcmp(json_string_value(
                           json_object_get(json_object_get(a->remedy, "params"), "overlap")),
                       "off"),
           "%s: remedy is restart with overlap off", what);
        diag("  %s", a->summary);
    }
    ok(r.opened_at[TDM_CP_ALERT_WEDGE] > (uint64_t)fault, "%s: WEDGE follows (pending work)", what);
    rp_free(&r);
}

static void test_idle_path(const char *fixtures_out)
{
    static const struct {
        int tp, bad;
        uint64_t seed;
        const char *name;
    } cases[] = {{2, 1, 11, "rank-idle-path-tp2-r1"},
                 {4, 2, 12, "rank-idle-path-tp4-r2"},
                 {4, 3, 13, "rank-idle-path-tp4-r3"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        FILE *f = tmpfile();
        int64_t fault = synth_idle_path(f, cases[i].tp, cases[i].bad, cases[i].seed, "decode");
        char what[96];
        snprintf(what, sizeof(what), "synth TP=%d rank %d", cases[i].tp, cases[i].bad);
        check_idle_path(f, fault, cases[i].tp, cases[i].bad, what);
        if (fixtures_out) {
            char path[512];
            snprintf(path, sizeof(path), "%s/%s.jsonl", fixtures_out, cases[i].name);
            FILE *o = fopen(path, "w");
            fprintf(o, "# %s: rank_idle_path on rank %d of a TP=%d group; fault_us=%" PRId64 "\n",
                    cases[i].name, cases[i].bad, cases[i].tp, fault);
            rewind(f);
            char buf[8192];
            size_t n;
            while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
                fwrite(buf, 1, n, o);
            fclose(o);
        }
        fclose(f);
        /* the committed recording of the same incident */
        char path[512];
        snprintf(path, sizeof(path), "%s/%s.jsonl", TDM_STREAMS_DIR, cases[i].name);
        FILE *g = fopen(path, "r");
        if (!g) {
            ok(0, "fixture %s exists", path);
            continue;
        }
        char head[256] = "";
        int64_t ffault = 0;
        if (fgets(head, sizeof(head), g)) {
            const char *p = strstr(head, "fault_us=");
            ffault = p ? strtoll(p + 9, NULL, 10) : 0;
        }
        snprintf(what, sizeof(what), "fixture %s", cases[i].name);
        check_idle_path(g, ffault, cases[i].tp, cases[i].bad, what);
        fclose(g);
    }
}

/* ---- WEDGE -------------------------------------------------------------------------------- */

static void test_wedge_stall(int stall_rank)
{
    FILE *f = tmpfile();
    syn_t s;
    syn_init(&s, 2, "decode", 0x3000, 21 + (uint64_t)stall_rank, f);
    s.waiting = 64;
    syn_run(&s, 6 * S_);
    s.waiting += 64;
    s.stall_rank = stall_rank;
    s.stall_iter = s.plan_iter + 1;
    s.stall_us = 30 * S_;
    while (!(s.plan_iter == s.stall_iter && s.plan_open))
        syn_run(&s, s.t + 1000);
    int64_t stop = s.t;
    syn_run(&s, stop + 12 * S_);
    fflush(f);
    rp_t r;
    replay_new(&r, f);
    rp_advance(&r, (uint64_t)stop + 12 * S_);
    int64_t lat = (int64_t)r.opened_at[TDM_CP_ALERT_WEDGE] - stop;
    ok(r.opened_at[TDM_CP_ALERT_WEDGE] && lat >= 3 * S_ && lat <= 5 * S_,
       "stall_loop on rank %d: WEDGE %.2f s after progress stopped (3..5 s)", stall_rank,
       lat / 1e6);
    is_int(r.opened_at[TDM_CP_ALERT_RANK_DIVERGENCE], 0,
           "stall_loop on rank %d: no RANK_DIVERGENCE (same position, one rank computing)",
           stall_rank);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_WEDGE);
    ok(a && json_integer_value(json_object_get(a->evidence, "pending")) > 0 &&
           json_array_size(json_object_get(a->evidence, "ranks")) == 2,
       "WEDGE evidence: pending and the per-rank table");
    rp_free(&r);
    fclose(f);
}

static void test_wedge_idle(void)
{
    FILE *f = tmpfile();
    syn_t s;
    syn_init(&s, 4, "decode", 0x3100, 31, f);
    s.work_from = 40 * S_; /* 40 s of idle, followers parked in the plan broadcast */
    syn_run(&s, 60 * S_);
    fflush(f);
    rp_t r;
    replay_new(&r, f);
    rp_advance(&r, 61 * S_);
    is_int(r.n_opened, 0, "idle TP=4 group then work: no alert (%s)",
           r.n_opened ? r.first_summary[r.opened_at[0] ? 0 : 1] : "-");
    rp_free(&r);
    fclose(f);
}

/* Hand-made samples: rank `spin` keeps advancing (spinning) while the other rank is or is not. */
static void put_sample(rp_t *r, uint32_t rank, uint64_t t, uint64_t iter, uint64_t seq, int in_coll,
                       uint32_t waiting)
{
    static uint64_t seqs[8];
    tdm_tm_batch_t b;
    memset(&b, 0, sizeof(b));
    snprintf(b.group, sizeof(b.group), "g");
    snprintf(b.worker, sizeof(b.worker), "g-0");
    snprintf(b.role, sizeof(b.role), "decode");
    b.instance_id = 0x4000;
    b.rank = rank;
    b.seq = ++seqs[rank];
    tdm_tm_sample_t sm;
    memset(&sm, 0, sizeof(sm));
    sm.ts_us = SYN_WALL0 + (int64_t)t;
    sm.iter = iter;
    snprintf(sm.path, sizeof(sm.path), "batch");
    sm.plan_hash = iter * 7;
    sm.coll_seq = seq;
    sm.coll_hash = seq * 13;
    sm.in_coll_valid = in_coll;
    if (in_coll) {
        snprintf(sm.in_coll.op, sizeof(sm.in_coll.op), "broadcast");
        sm.in_coll.seq = seq;
        sm.in_coll.since_us = sm.ts_us - 150000; /* spins in short waits */
    }
    sm.waiting = waiting;
    b.samples = &sm;
    b.n_samples = 1;
    rp_ingest(r, &b, t);
}

static void test_wedge_spinning(void)
{
    rp_t r;
    rp_init(&r, NULL, NULL, 0);
    /* both progress; rank 1 is always caught waiting in short broadcasts (spinning) */
    for (uint64_t k = 1; k <= 100; k++) {
        put_sample(&r, 0, k * 200000, 10 * k, 60 * k, 0, 8);
        put_sample(&r, 1, k * 200000 + 50000, 10 * k - 3, 60 * k - 5, 1, 0);
    }
    rp_advance(&r, 21 * S_);
    is_int(r.n_opened, 0, "one rank spinning in short waits while the group progresses: no alert");
    /* now rank 0 alone keeps advancing while rank 1 is stuck: MIN iter is flat */
    for (uint64_t k = 101; k <= 140; k++) {
        put_sample(&r, 0, k * 200000, 10 * k, 60 * k, 0, 8);
        put_sample(&r, 1, k * 200000 + 50000, 997, 60 * 100 - 5, 0, 0);
    }
    rp_advance(&r, 29 * S_);
    ok(r.opened_at[TDM_CP_ALERT_WEDGE] >= 23 * S_ && r.opened_at[TDM_CP_ALERT_WEDGE] <= 25 * S_,
       "one rank spinning ahead does not hide a stuck rank: WEDGE at %.1f s (MIN iter)",
       r.opened_at[TDM_CP_ALERT_WEDGE] / 1e6);
    rp_free(&r);
}

/* ---- WORKER_LOST -------------------------------------------------------------------------- */

static void test_worker_lost(void)
{
    FILE *f = tmpfile();
    syn_t s;
    syn_init(&s, 2, "decode", 0x5000, 41, f);
    s.waiting = 32;
    s.kill_rank = 1;
    s.kill_at = 4 * S_;
    syn_run(&s, 10 * S_);
    fflush(f);
    rp_t r;
    replay_new(&r, f);
    rp_advance(&r, 10 * S_);
    uint64_t at = r.opened_at[TDM_CP_ALERT_WORKER_LOST];
    ok(at >= 4 * S_ && at <= 4 * S_ + 200000, "kill -9 of rank 1: WORKER_LOST at once (%.2f s)",
       at / 1e6);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_WORKER_LOST);
    ok(a && json_integer_value(json_object_get(json_object_get(a->evidence, "launcher"), "rank")) ==
                1,
       "evidence names rank 1 from the launcher's report");
    is_int(r.opened_at[TDM_CP_ALERT_WEDGE] + r.opened_at[TDM_CP_ALERT_RANK_DIVERGENCE], 0,
           "a dead group's frozen samples raise no WEDGE or RANK_DIVERGENCE");
    rp_free(&r);
    fclose(f);

    /* silence without a launcher report, then a clean shutdown that must not count */
    rp_init(&r, NULL, NULL, 0);
    for (uint64_t k = 1; k <= 20; k++) {
        put_sample(&r, 0, k * 200000, k, k, 0, 0);
        if (k <= 10)
            put_sample(&r, 1, k * 200000, k, k, 0, 0);
    }
    rp_advance(&r, 5 * S_);
    at = r.opened_at[TDM_CP_ALERT_WORKER_LOST];
    ok(at >= 4 * S_ && at <= 4 * S_ + 300000, "no sample from rank 1 for 2 s: WORKER_LOST (%.2f s)",
       at / 1e6);
    rp_free(&r);
}

/* The next incarnation of a 2-rank decode group: starts at 6 s, runs to 14 s; then the whole
 * record file is replayed through the detectors up to 14 s. */
static void next_incarnation(rp_t *r, FILE *f, uint64_t instance, uint64_t seed)
{
    syn_t b;
    syn_init(&b, 2, "decode", instance, seed, f);
    b.t = 6 * S_;
    for (int i = 0; i < 2; i++)
        b.r[i].next_sample += 6 * S_;
    syn_run(&b, 14 * S_);
    fflush(f);
    replay_new(r, f);
    rp_advance(r, 14 * S_);
}

/* A stop on purpose read by a detector that did not ask for it (tandemd restarted, the stopped
 * incarnation's batches replayed from the worker's spool; tests/chaos/chaos.py scenario 7 after a
 * remedy during scenario 6's outage): the launcher's worker_lost says `stopping`, so neither its
 * report nor the stopped ranks' silence is a loss, and the healthy next incarnation is left
 * alone. The supervisor's report of an exit nobody asked for still counts. */
static void test_worker_lost_stopping(void)
{
    for (int sup = 0; sup < 2; sup++) {
        FILE *f = tmpfile();
        syn_t a;
        syn_init(&a, 2, "decode", 0x5100, 47, f);
        a.waiting = 8;
        syn_run(&a, 4 * S_);
        syn_event(&a, 1, 4 * S_, "worker_lost", 0, 0, NULL,
                  "rank 1 exited (code 1) while the group was stopping",
                  json_pack("{s:i,s:i,s:b}", "rank", 1, "code", 1, "stopping", 1));
        if (sup)
            syn_event(&a, 0, 5 * S_, "worker_lost", 0, 0, NULL, "launcher pid 1 exited (code 1)",
                      json_pack("{s:i,s:s}", "rank", 0, "source", "supervisor"));
        rp_t r;
        next_incarnation(&r, f, 0x5200, 53);
        uint64_t at = r.opened_at[TDM_CP_ALERT_WORKER_LOST];
        if (!sup)
            is_int(at, 0,
                   "a launcher's worker_lost while its group was stopping, and the silence after "
                   "it: no WORKER_LOST (the next incarnation reports)");
        else
            ok(at >= 5 * S_ && at <= 5 * S_ + 200000,
               "the supervisor's worker_lost after it still opens WORKER_LOST (%.2f s)", at / 1e6);
        rp_free(&r);
        fclose(f);
    }
    /* no launcher report at all (it reached the tandemd before), only the stopped incarnation's
     * last samples, replayed so late that they arrive in the tick of the next incarnation's
     * first: the records' own times say which incarnation is the later one */
    FILE *f = tmpfile();
    syn_t a;
    syn_init(&a, 2, "decode", 0x5300, 59, f);
    a.latency = 2400000;
    syn_run(&a, 4 * S_);
    rp_t r;
    next_incarnation(&r, f, 0x5400, 61);
    is_int(r.opened_at[TDM_CP_ALERT_WORKER_LOST], 0,
           "a stopped incarnation's samples replayed into the next one's first tick, then silent: "
           "no WORKER_LOST");
    rp_free(&r);
    fclose(f);
}

/* ---- event-driven rules ------------------------------------------------------------------- */

typedef struct ev_env {
    FILE *f;
    syn_t s;
} ev_env_t;

static void ev_open(ev_env_t *e, const char *group)
{
    e->f = tmpfile();
    syn_init(&e->s, 1, group, 0x6000, 51, e->f);
    e->s.latency = 0;
}

static void ev(ev_env_t *e, int64_t t, const char *type, uint64_t room, const char *to,
               json_t *data)
{
    syn_event(&e->s, 0, t, type, room != 0, room, to, NULL, data);
}

static void ev_replay(ev_env_t *e, rp_t *r, int64_t until)
{
    fflush(e->f);
    rp_init(r, NULL, NULL, 0);
    rp_replay(r, e->f, 0);
    rp_advance(r, (uint64_t)until);
    fclose(e->f);
}

static void test_transfer_stall(void)
{
    ev_env_t e;
    rp_t r;
    ev_open(&e, "prefill");
    ev(&e, 1 * S_, "kvpoll", 0xabc, "BOOTSTRAPPING", NULL);
    ev(&e, 2 * S_, "kvpoll", 0xabc, "WAITING_FOR_INPUT", NULL);
    ev(&e, 3 * S_, "kvpoll", 0xdef, "TRANSFERRING", NULL);
    ev(&e, 4 * S_, "kvpoll", 0xdef, "SUCCESS", NULL);
    ev_replay(&e, &r, 20 * S_);
    uint64_t at = r.opened_at[TDM_CP_ALERT_TRANSFER_STALL];
    ok(at >= 14 * S_ && at <= 14 * S_ + 200000,
       "room WAITING_FOR_INPUT 10 s, no completion for 10 s: TRANSFER_STALL at %.1f s", at / 1e6);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_TRANSFER_STALL);
    ok(a && json_integer_value(json_object_get(a->evidence, "stuck_rooms")) == 1 &&
           !strcmp(json_string_value(json_object_get(
                       json_array_get(json_object_get(a->evidence, "rooms"), 0), "room")),
                   "0000000000000abc"),
       "evidence lists room 0000000000000abc");
    ok(a && a->remedy &&
           json_array_size(json_object_get(json_object_get(a->remedy, "params"), "rooms")) == 1,
       "remedy: fail the room and restart the stuck peer");
    rp_free(&r);

    /* negative: one room waits but others complete steadily (the room table's timeout is enough) */
    ev_open(&e, "prefill");
    ev(&e, 1 * S_, "kvpoll", 0xabc, "WAITING_FOR_INPUT", NULL);
    for (int k = 0; k < 12; k++) {
        ev(&e, (2 + 2 * k) * S_, "kvpoll", 0x100 + (uint64_t)k, "TRANSFERRING", NULL);
        ev(&e, (2 + 2 * k) * S_ + 300000, "kvpoll", 0x100 + (uint64_t)k, "SUCCESS", NULL);
    }
    ev_replay(&e, &r, 26 * S_);
    is_int(r.opened_at[TDM_CP_ALERT_TRANSFER_STALL], 0,
           "a stuck room while others complete: no TRANSFER_STALL");
    rp_free(&r);

    /* heartbeat: stale, then fresh → auto-resolve 10 s later */
    ev_open(&e, "prefill");
    ev(&e, 1 * S_, "heartbeat_stale", 0, NULL,
       json_pack("{s:s,s:i}", "thread", "recv", "age_us", 3000000));
    ev(&e, 5 * S_, "heartbeat_fresh", 0, NULL, json_pack("{s:s}", "thread", "recv"));
    ev_replay(&e, &r, 20 * S_);
    ok(r.opened_at[TDM_CP_ALERT_TRANSFER_STALL] >= 1 * S_ &&
           r.opened_at[TDM_CP_ALERT_TRANSFER_STALL] <= 1 * S_ + 100000,
       "stale recv heartbeat: TRANSFER_STALL at once");
    uint64_t res = r.resolved_at[TDM_CP_ALERT_TRANSFER_STALL];
    ok(res >= 15 * S_ && res <= 15 * S_ + 200000,
       "auto-resolves 10 s after the heartbeat is fresh (%.1f s)", res / 1e6);
    a = tdm_cp_alerts_get(r.alerts, r.opened_id[TDM_CP_ALERT_TRANSFER_STALL]);
    ok(a && a->state == TDM_CP_ALERT_RESOLVED && !strcmp(a->resolved_by, "auto"),
       "resolved_by auto");
    rp_free(&r);

    /* loop heartbeat is WEDGE's, not TRANSFER_STALL's; malformed ones are counted */
    ev_open(&e, "prefill");
    ev(&e, 1 * S_, "heartbeat_stale", 0, NULL,
       json_pack("{s:s,s:i}", "thread", "loop", "age_us", 3000000));
    ev(&e, 1 * S_, "heartbeat_stale", 0, NULL, json_pack("{s:i}", "age_us", 3));
    ev_replay(&e, &r, 5 * S_);
    is_int(r.n_opened, 0, "loop heartbeat / malformed heartbeat: no alert");
    is_int(tdm_cp_detect_stats(r.det)->events_malformed, 1, "malformed heartbeat counted");
    rp_free(&r);
}

/* The partition form (docs/alerts.md TRANSFER_STALL): the channel's heartbeat timeout, the rooms
 * it failed named, open until the channel registers again, notify only. */
static void test_transfer_partition(void)
{
    ev_env_t e;
    rp_t r;
    ev_open(&e, "decode");
    ev(&e, 1 * S_, "kvpoll", 0xa1, "WAITING_FOR_INPUT", NULL);
    ev(&e, 1 * S_, "kvpoll", 0xa2, "TRANSFERRING", NULL);
    /* the worker fails the channel's rooms, then sends peer_lost naming them (docs/contracts.md
     * §c); 0xa3, failing later while the channel is still lost, is added */
    syn_event(&e.s, 0, 4 * S_, "kvpoll", 1, 0xa1, "FAILED", "peer lost", NULL);
    syn_event(&e.s, 0, 4 * S_, "kvpoll", 1, 0xa2, "FAILED", "peer lost", NULL);
    syn_event(&e.s, 0, 4 * S_ + 4000, "peer_lost", 0, 0, "FAILED",
              "peer timeout (no frame for the heartbeat timeout)",
              json_pack("{s:[s,s],s:i}", "rooms", "00000000000000a1", "00000000000000a2",
                        "failed_rooms", 2));
    ev(&e, 4 * S_ + 300000, "kvpoll", 0xa3, "TRANSFERRING", NULL);
    syn_event(&e.s, 0, 4 * S_ + 500000, "kvpoll", 1, 0xa3, "FAILED", "transfer failed", NULL);
    syn_event(&e.s, 0, 9 * S_, "peer_registered", 0, 0, "SUCCESS", "registered", NULL);
    ev_replay(&e, &r, 25 * S_);
    uint64_t at = r.opened_at[TDM_CP_ALERT_TRANSFER_STALL];
    ok(at >= 4 * S_ && at <= 4 * S_ + 200000,
       "peer_lost after the heartbeat timeout: TRANSFER_STALL at once (%.2f s)", at / 1e6);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_TRANSFER_STALL);
    /* as it opened (the stored row): the rooms the event names */
    json_t *pl = json_array_get(
        json_object_get(r.first_evidence[TDM_CP_ALERT_TRANSFER_STALL], "peer_lost"), 0);
    json_t *rooms = json_object_get(pl, "rooms");
    char *pls = pl ? json_dumps(pl, JSON_COMPACT) : NULL;
    ok(pl && json_integer_value(json_object_get(pl, "failed_rooms")) == 2 &&
           json_array_size(rooms) == 2 &&
           !strcmp(json_string_value(json_array_get(rooms, 0)), "00000000000000a1") &&
           !strcmp(json_string_value(json_array_get(rooms, 1)), "00000000000000a2") &&
           strstr(json_string_value(json_object_get(pl, "reason")), "timeout"),
       "evidence as it opened: the reason and the rooms the lost channel failed, named by "
       "peer_lost (%s)",
       pls ? pls : "none");
    free(pls);
    /* while open: a room that failed after the event is added */
    pl = a ? json_array_get(json_object_get(a->evidence, "peer_lost"), 0) : NULL;
    rooms = json_object_get(pl, "rooms");
    pls = pl ? json_dumps(pl, JSON_COMPACT) : NULL;
    ok(pl && json_integer_value(json_object_get(pl, "failed_rooms")) == 3 &&
           json_array_size(rooms) == 3 &&
           !strcmp(json_string_value(json_array_get(rooms, 2)), "00000000000000a3"),
       "evidence while open: a room failed later on the lost channel added (%s)",
       pls ? pls : "none");
    free(pls);
    ok(a && !a->remedy, "no remedy: the rooms failed already, the peer cannot be reached");
    uint64_t res = r.resolved_at[TDM_CP_ALERT_TRANSFER_STALL];
    ok(res >= 19 * S_ && res <= 19 * S_ + 200000,
       "resolves 10 s after the channel registered again (%.1f s)", res / 1e6);
    rp_free(&r);

    /* a peer that closed the channel (its exit or restart) is WORKER_LOST's business */
    ev_open(&e, "decode");
    syn_event(&e.s, 0, 2 * S_, "peer_lost", 0, 0, "FAILED", "peer closed the channel", NULL);
    ev_replay(&e, &r, 8 * S_);
    is_int(r.opened_at[TDM_CP_ALERT_TRANSFER_STALL], 0,
           "peer closed the channel: no TRANSFER_STALL");
    rp_free(&r);
}

static void test_abort(void)
{
    ev_env_t e;
    rp_t r;
    ev_open(&e, "decode");
    ev(&e, 1 * S_, "abort_sent", 0x77, NULL, json_pack("{s:s}", "peer", "prefill-0"));
    ev(&e, 2 * S_, "abort_sent", 0x78, NULL, NULL);
    ev(&e, 3 * S_, "abort_acked", 0x78, NULL, NULL);
    ev(&e, 9 * S_, "abort_acked", 0x77, NULL, NULL);
    ev_replay(&e, &r, 25 * S_);
    uint64_t at = r.opened_at[TDM_CP_ALERT_ABORT_UNACKED];
    ok(at >= 6 * S_ && at <= 6 * S_ + 100000, "ABORT without ACK for 5 s: ABORT_UNACKED (%.1f s)",
       at / 1e6);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_ABORT_UNACKED);
    ok(a && json_integer_value(json_object_get(a->evidence, "unacked")) == 1 &&
           !strcmp(json_string_value(json_object_get(
                       json_array_get(json_object_get(a->evidence, "aborts"), 0), "peer")),
                   "prefill-0"),
       "evidence: the room and its peer; the acknowledged abort is not listed");
    uint64_t res = r.resolved_at[TDM_CP_ALERT_ABORT_UNACKED];
    ok(res >= 19 * S_ && res <= 19 * S_ + 200000, "ACK at 9 s: resolved at %.1f s", res / 1e6);
    rp_free(&r);
}

static void test_corruption(void)
{
    ev_env_t e;
    rp_t r;
    ev_open(&e, "decode");
    ev(&e, 1 * S_, "checksum_mismatch", 0x99, NULL, json_pack("{s:i}", "chunk", 3));
    ev(&e, 1 * S_, "prefill_done", 0x99, NULL, NULL);
    ev_replay(&e, &r, 5 * S_);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_CORRUPTION);
    ok(a && a->remedy == NULL && json_array_size(json_object_get(a->evidence, "events")) == 1,
       "checksum mismatch: CORRUPTION, no automatic remedy off the host tier");
    is_int(tdm_cp_detect_stats(r.det)->events_ignored, 1, "unknown event types are ignored");
    rp_free(&r);

    ev_open(&e, "decode");
    ev(&e, 1 * S_, "hicache_load_mismatch", 0, NULL, json_pack("{s:i}", "page", 12));
    ev_replay(&e, &r, 5 * S_);
    a = first_alert(&r, TDM_CP_ALERT_CORRUPTION);
    ok(a && a->remedy &&
           !strcmp(
               json_string_value(json_object_get(json_object_get(a->remedy, "params"), "hicache")),
               "off"),
       "host-tier load mismatch: remedy restart with hicache off");
    rp_free(&r);

    ev_open(&e, "decode");
    ev_replay(&e, &r, 5 * S_);
    is_int(r.n_opened, 0, "no corruption events: no alert");
    rp_free(&r);
}

static json_t *layout_json(uint32_t k_bpt)
{
    tdm_layout_record_t rec = {.kv_dtype = TDM_DTYPE_BF16,
                               .n_sub = 2,
                               .tp_size = 1,
                               .tp_rank = 0,
                               .num_layers = 2,
                               .num_kv_heads = 1,
                               .head_dim = 128,
                               .page_size = 16,
                               .num_pages = 64};
    rec.sub[0] = (tdm_layout_sub_t){TDM_KV_SUB_K, TDM_DTYPE_BF16, k_bpt, 16ull * 256};
    rec.sub[1] = (tdm_layout_sub_t){TDM_KV_SUB_V, TDM_DTYPE_BF16, 256, 16ull * 256};
    return tdm_layout_to_json(&rec);
}

static void test_layout(void)
{
    ev_env_t e;
    rp_t r;
    ev_open(&e, "decode");
    ev(&e, 1 * S_, "layout", 0, NULL,
       json_pack("{s:o,s:o}", "host", layout_json(256), "device", layout_json(256)));
    ev_replay(&e, &r, 5 * S_);
    is_int(r.n_opened, 0, "equal layout records: no alert");
    rp_free(&r);

    ev_open(&e, "decode");
    ev(&e, 1 * S_, "layout", 0, NULL,
       json_pack("{s:o,s:o}", "host", layout_json(132), "device", layout_json(256)));
    ev_replay(&e, &r, 5 * S_);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_LAYOUT_MISMATCH);
    ok(a && json_object_get(a->evidence, "host") && json_object_get(a->evidence, "device") &&
           strstr(json_string_value(json_object_get(a->evidence, "why")), "bytes_per_token"),
       "differing K bytes_per_token: LAYOUT_MISMATCH with both records (%s)",
       a ? json_string_value(json_object_get(a->evidence, "why")) : "-");
    rp_free(&r);

    ev_open(&e, "decode");
    ev(&e, 1 * S_, "layout", 0, NULL, json_pack("{s:s}", "host", "junk"));
    ev_replay(&e, &r, 5 * S_);
    ok(r.n_opened == 0 && tdm_cp_detect_stats(r.det)->events_malformed == 1,
       "malformed layout report: counted, no alert");
    rp_free(&r);
}

static void test_output(void)
{
    ev_env_t e;
    rp_t r;
    ev_open(&e, "decode");
    ev(&e, 1 * S_, "output_stats", 0, NULL,
       json_pack("{s:i,s:i,s:[s]}", "responses", 100, "dsml_leaks", 9, "samples", "<|DSML|>x"));
    ev_replay(&e, &r, 5 * S_);
    const tdm_cp_alert_t *a = first_alert(&r, TDM_CP_ALERT_OUTPUT_ANOMALY);
    ok(a && json_array_size(json_object_get(a->evidence, "samples")) == 1,
       "9%% DSML leaks over a 1%% baseline: OUTPUT_ANOMALY with sample responses");
    rp_free(&r);

    ev_open(&e, "decode");
    ev(&e, 1 * S_, "output_stats", 0, NULL,
       json_pack("{s:i,s:i}", "responses", 100, "dsml_leaks", 1));
    ev(&e, 2 * S_, "output_stats", 0, NULL,
       json_pack("{s:i,s:i,s:f}", "responses", 100, "dsml_leaks", 9, "baseline", 0.1));
    ev(&e, 3 * S_, "output_stats", 0, NULL,
       json_pack("{s:i,s:i}", "responses", 5, "dsml_leaks", 5));
    ev_replay(&e, &r, 5 * S_);
    is_int(r.n_opened, 0, "rate at baseline, under the model's own baseline, or too few: no alert");
    rp_free(&r);
}

/* ---- alert store -------------------------------------------------------------------------- */

static void test_store(void)
{
    tdm_cp_alerts_cfg_t cfg;
    tdm_cp_alerts_cfg_default(&cfg);
    char err[128];
    ok(tdm_cp_policy_parse("WEDGE=auto,WORKER_LOST=auto", cfg.policy, err, sizeof(err)) == TDM_OK &&
           cfg.policy[TDM_CP_ALERT_WEDGE] == TDM_CP_POLICY_AUTO &&
           cfg.policy[TDM_CP_ALERT_CORRUPTION] == TDM_CP_POLICY_NOTIFY,
       "policy parse");
    ok(tdm_cp_policy_parse("WEDGE=maybe", cfg.policy, err, sizeof(err)) == TDM_ERR_INVAL &&
           strstr(err, "WEDGE=maybe"),
       "bad policy names the item: %s", err);
    tdm_cp_alerts_t *s;
    tdm_cp_alerts_init(&cfg, &s);
    tdm_cp_findings_t f = {0};
    tdm_cp_finding_t *x = tdm_cp_findings_add(&f, TDM_CP_ALERT_WEDGE, "d0");
    snprintf(x->summary, sizeof(x->summary), "wedged");
    x->evidence = json_object();
    tdm_cp_findings_add(&f, TDM_CP_ALERT_OUTPUT_ANOMALY, "d0")->evidence = json_object();
    is_int(tdm_cp_alerts_apply(s, &f, 1000, 5000), 2, "two findings open two alerts");
    is_int(tdm_cp_alerts_apply(s, &f, 2000, 6000), 0, "the same findings again: deduplicated");
    tdm_cp_remedy_t rm;
    ok(tdm_cp_alerts_take_remedy(s, &rm) == 1 && rm.cls == TDM_CP_ALERT_WEDGE &&
           !strcmp(json_string_value(json_object_get(rm.request, "action")), "restart_group"),
       "auto WEDGE queued a restart request");
    json_decref(rm.request);
    is_int(tdm_cp_alerts_take_remedy(s, &rm), 0, "notify OUTPUT_ANOMALY queued nothing");
    const tdm_cp_alert_t *a = tdm_cp_alerts_open_get(s, "d0", TDM_CP_ALERT_WEDGE);
    uint64_t id = a->id;
    is_int(tdm_cp_alerts_resolve(s, id, "alice", 7000), TDM_OK, "resolve by hand");
    is_int(tdm_cp_alerts_resolve(s, id, "alice", 7000), TDM_ERR_STATE, "twice: state error");
    is_int(tdm_cp_alerts_resolve(s, 999, "alice", 7000), TDM_ERR_NOTFOUND, "unknown id");
    tdm_cp_alerts_apply(s, &f, 3000, 8000);
    ok(!tdm_cp_alerts_open_get(s, "d0", TDM_CP_ALERT_WEDGE),
       "muted while the rule stays true after a manual resolve");
    tdm_cp_findings_t empty = {0};
    tdm_cp_alerts_apply(s, &empty, 4000, 9000);
    tdm_cp_alerts_apply(s, &f, 5000, 10000);
    ok(tdm_cp_alerts_open_get(s, "d0", TDM_CP_ALERT_WEDGE) != NULL,
       "reopens once the rule was false and is true again");
    is_str(tdm_cp_alerts_get(s, id)->resolved_by, "alice", "resolved_by is the token name");
    json_t *j = tdm_cp_alerts_to_json(s, "open", NULL);
    is_int(json_array_size(json_object_get(j, "alerts")), 2, "API view: two open");
    json_decref(j);
    j = tdm_cp_alerts_to_json(s, NULL, "d0");
    json_t *first = json_array_get(json_object_get(j, "alerts"), 0);
    ok(!strcmp(json_string_value(json_object_get(first, "kind")), "WEDGE") &&
           json_is_null(json_object_get(first, "resolved_by")),
       "newest first, open alerts have null resolved_by");
    json_decref(j);
    tdm_cp_findings_free(&f);
    tdm_cp_findings_free(&empty);
    tdm_cp_alerts_free(s);
}

int main(int argc, char **argv)
{
    const char *fixtures_out = argc == 3 && !strcmp(argv[1], "--write-fixtures") ? argv[2] : NULL;
    test_idle_path(fixtures_out);
    test_wedge_stall(0);
    test_wedge_stall(1);
    test_wedge_idle();
    test_wedge_spinning();
    test_worker_lost();
    test_worker_lost_stopping();
    test_transfer_stall();
    test_transfer_partition();
    test_abort();
    test_corruption();
    test_layout();
    test_output();
    test_store();
    test_clean_10min();
    return done_testing();
}
