/*
 * tests/unit/detect-replay.h — replay telemetry streams into the detectors on a virtual clock,
 * and synthesise such streams from a small simulation of a TP worker group (header-only).
 *
 * Stream format (tests/fixtures/streams/NAME.jsonl): one JSON object per line,
 *   {"t_us": <arrival time at tandemd, µs on the virtual clock>, "batch": <telemetry v1 batch>}
 * in arrival order; lines starting with '#' are comments. The replayer decodes each batch with the
 * strict telemetry decoder and does what tandemd's ingest does (ring push unless a replay, events
 * to the detector), ticking the detector every 100 ms of virtual time in between.
 *
 * The simulation runs a group at 1 ms resolution: every iteration is a script of collectives (the
 * plan header and payload broadcasts, then the forward's allreduces) that each rank walks with its
 * own compute times; a collective completes when every rank is inside it at the same seq with the
 * same op (a mismatch hangs, like NCCL and the shm backend). The leader blocks when no work is
 * pending, so followers sit in the plan broadcast for seconds (what real idle looks like). Each
 * rank's reporter samples its record every 200 ms with its own phase. Faults: rank_idle_path
 * (a follower runs a BATCH plan as IDLE), stall_loop (a rank sleeps after the plan broadcasts),
 * kill (a rank stops; the launcher reports worker_lost and the group stops).
 */
#ifndef TDM_TESTS_DETECT_REPLAY_H
#define TDM_TESTS_DETECT_REPLAY_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <tdm/json.h>
#include <tdm/mem.h>
#include <tdm/telemetry.h>

#include "controlplane/detect/alert.h"
#include "controlplane/detect/detect.h"
#include "controlplane/store/ring.h"

/* ---- replay -----------------------------------------------------------------------------------
 */

typedef struct rp {
    tdm_cp_rings_t rings;
    tdm_cp_detect_t *det;
    tdm_cp_alerts_t *alerts;
    tdm_cp_findings_t f;
    uint64_t now, next_tick;
    uint64_t opened_at[TDM_CP_ALERT_MAX]; /* virtual time of the first open, 0: never */
    uint64_t opened_id[TDM_CP_ALERT_MAX];
    uint64_t resolved_at[TDM_CP_ALERT_MAX];
    size_t n_opened, n_resolved;
    char first_summary[TDM_CP_ALERT_MAX][256];
    json_t *first_evidence[TDM_CP_ALERT_MAX]; /* as it opened (what the alerts table stores) */
} rp_t;

static void rp_hook(void *ctx, const tdm_cp_alert_t *a, tdm_cp_alert_event_t ev)
{
    rp_t *r = ctx;
    if (ev == TDM_CP_ALERT_EV_OPEN) {
        r->n_opened++;
        if (!r->opened_at[a->cls]) {
            r->opened_at[a->cls] = r->now;
            r->opened_id[a->cls] = a->id;
            snprintf(r->first_summary[a->cls], sizeof(r->first_summary[a->cls]), "%s", a->summary);
            r->first_evidence[a->cls] = a->evidence ? json_deep_copy(a->evidence) : NULL;
        }
    } else {
        r->n_resolved++;
        r->resolved_at[a->cls] = r->now;
    }
}

static void rp_init(rp_t *r, const tdm_cp_detect_cfg_t *dcfg, const tdm_cp_alerts_cfg_t *acfg,
                    uint64_t t0)
{
    memset(r, 0, sizeof(*r));
    tdm_cp_rings_init(&r->rings, 3000, 4096);
    if (tdm_cp_detect_init(dcfg, &r->det) != TDM_OK ||
        tdm_cp_alerts_init(acfg, &r->alerts) != TDM_OK)
        abort();
    tdm_cp_alerts_hook(r->alerts, rp_hook, r);
    r->now = r->next_tick = t0;
}

static void rp_free(rp_t *r)
{
    for (int c = 0; c < TDM_CP_ALERT_MAX; c++)
        json_decref(r->first_evidence[c]);
    tdm_cp_findings_free(&r->f);
    tdm_cp_alerts_free(r->alerts);
    tdm_cp_detect_free(r->det);
    tdm_cp_rings_free(&r->rings);
}

/* Tick every 100 ms of virtual time up to and including t. */
static void rp_advance(rp_t *r, uint64_t t)
{
    while (r->next_tick <= t) {
        r->now = r->next_tick;
        if (tdm_cp_detect_tick(r->det, &r->rings, r->now, &r->f))
            tdm_cp_alerts_apply(r->alerts, &r->f, r->now, r->now);
        r->next_tick += 100000;
    }
    if (t > r->now)
        r->now = t;
}

/* What ingest.c does with a decoded batch arriving at t. */
static void rp_ingest(rp_t *r, const tdm_tm_batch_t *b, uint64_t t)
{
    rp_advance(r, t);
    char inst[TDM_JSON_HEX64_LEN + 1];
    tdm_json_hex64_format(b->instance_id, inst);
    tdm_cp_rank_t *rk;
    if (tdm_cp_rings_rank(&r->rings, inst, b->rank, 1, &rk) != TDM_OK)
        abort();
    snprintf(rk->group, sizeof(rk->group), "%s", b->group);
    snprintf(rk->worker, sizeof(rk->worker), "%s", b->worker);
    snprintf(rk->role, sizeof(rk->role), "%s", b->role);
    if (b->seq <= rk->last_seq)
        return;
    for (uint32_t i = 0; i < b->n_samples; i++)
        tdm_cp_rank_push(rk, &b->samples[i]);
    rk->last_seq = b->seq;
    for (uint32_t i = 0; i < b->n_events; i++)
        tdm_cp_detect_event(r->det, rk, &b->events[i], t);
}

/* Replay a stream; t_shift is added to every arrival time. Returns lines replayed, -1 on a bad
 * line (message on stderr). */
static long rp_replay(rp_t *r, FILE *f, uint64_t t_shift)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long n = 0, lineno = 0;
    rewind(f);
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)len, 0, &je);
        json_t *jt = json_object_get(o, "t_us");
        tdm_tm_batch_t b;
        char err[256];
        if (!json_is_integer(jt) || tdm_tm_batch_from_json(json_object_get(o, "batch"), NULL, &b,
                                                           err, sizeof(err)) != TDM_OK) {
            fprintf(stderr, "stream line %ld: %s\n", lineno, o ? err : je.text);
            json_decref(o);
            free(line);
            return -1;
        }
        rp_ingest(r, &b, (uint64_t)json_integer_value(jt) + t_shift);
        tdm_tm_batch_clear(&b);
        json_decref(o);
        n++;
    }
    free(line);
    return n;
}

/* ---- simulation -------------------------------------------------------------------------------
 */

#define SYN_MAX_RANKS 8
#define SYN_LAYERS 4
#define SYN_WALL0 1700000000000000ll /* worker wall clock at virtual time 0 */

enum { SYN_BCAST = 0, SYN_ALLREDUCE = 1 };
static const char *const syn_op_names[] = {"broadcast", "allreduce"};

typedef struct syn_rank {
    uint64_t iter, plan_hash, coll_seq, coll_hash;
    int idle; /* path of the last recorded iteration */
    int in_coll, op;
    uint64_t in_seq;
    int64_t since, busy_until;
    int step, n_steps; /* position in the current iteration's script */
    int script_idle;   /* this rank runs the current plan as IDLE */
    uint64_t cur_iter;
    int64_t next_sample;
    uint64_t seq;
    int dead;
} syn_rank_t;

typedef struct syn {
    int n;
    syn_rank_t r[SYN_MAX_RANKS];
    const char *group;
    uint64_t instance_id;
    uint64_t rng;
    int64_t t; /* µs, multiple of 1000 */
    /* leader's plan for the current iteration */
    uint64_t plan_iter, plan_hash;
    int plan_batch, plan_open; /* plan_open: the leader has issued it */
    uint32_t bs;
    /* workload */
    uint32_t running, waiting;
    uint32_t remaining[256]; /* tokens left per running request */
    int64_t next_burst;
    int idle_mode; /* 1: long idle gaps between bursts */
    /* faults */
    int idle_path_rank;
    uint64_t idle_path_iter; /* 0: off */
    int stall_rank;
    uint64_t stall_iter;
    int64_t stall_us;
    int kill_rank;
    int64_t kill_at; /* 0: off */
    int stopped;
    int64_t latency; /* arrival = sample time + latency */
    FILE *out;
    int64_t work_from; /* no bursts before */
} syn_t;

static uint64_t syn_rand(syn_t *s)
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return s->rng;
}

static int64_t syn_uniform(syn_t *s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(syn_rand(s) % (uint64_t)(hi - lo + 1));
}

static void syn_init(syn_t *s, int n, const char *group, uint64_t instance_id, uint64_t seed,
                     FILE *out)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    s->group = group;
    s->instance_id = instance_id;
    s->rng = seed * 2654435761u + 88172645463325252ull;
    s->out = out;
    s->latency = 3000;
    s->idle_path_rank = -1;
    s->stall_rank = -1;
    s->kill_rank = -1;
    for (int i = 0; i < n; i++) {
        s->r[i].next_sample = 200000 + 37000 * i + syn_uniform(s, 0, 20) * 1000;
        s->r[i].step = s->r[i].n_steps = 0; /* at the start of iteration 0's script */
        s->r[i].cur_iter = 1;
    }
    s->plan_iter = 1;
    s->next_burst = 0;
}

static void syn_emit(syn_t *s, int rank, int64_t t, const tdm_tm_event_t *ev, int with_sample)
{
    syn_rank_t *r = &s->r[rank];
    tdm_tm_batch_t b;
    memset(&b, 0, sizeof(b));
    snprintf(b.worker, sizeof(b.worker), "%s-0", s->group);
    snprintf(b.group, sizeof(b.group), "%s", s->group);
    snprintf(b.role, sizeof(b.role), "decode");
    b.instance_id = s->instance_id;
    b.rank = (uint32_t)rank;
    b.seq = ++r->seq;
    tdm_tm_sample_t sm;
    memset(&sm, 0, sizeof(sm));
    if (with_sample) {
        sm.ts_us = SYN_WALL0 + t;
        sm.iter = r->iter;
        snprintf(sm.path, sizeof(sm.path), "%s", r->idle ? "idle" : "batch");
        sm.plan_hash = r->plan_hash;
        sm.coll_seq = r->coll_seq;
        sm.coll_hash = r->coll_hash;
        sm.in_coll_valid = r->in_coll;
        if (r->in_coll) {
            snprintf(sm.in_coll.op, sizeof(sm.in_coll.op), "%s", syn_op_names[r->op]);
            sm.in_coll.seq = r->in_seq;
            sm.in_coll.since_us = SYN_WALL0 + r->since;
        }
        if (rank == 0) {
            sm.bs = s->bs;
            sm.waiting = s->waiting;
            sm.running = s->running;
        }
        b.samples = &sm;
        b.n_samples = 1;
    }
    tdm_tm_event_t e;
    if (ev) {
        e = *ev;
        b.events = &e;
        b.n_events = 1;
    }
    json_t *bj;
    char err[256];
    if (tdm_tm_batch_to_json(&b, NULL, &bj, err, sizeof(err)) != TDM_OK) {
        fprintf(stderr, "syn_emit: %s\n", err);
        abort();
    }
    json_t *line = json_pack("{s:I,s:o}", "t_us", (json_int_t)(t + s->latency), "batch", bj);
    char *txt = json_dumps(line, JSON_COMPACT);
    fprintf(s->out, "%s\n", txt);
    free(txt);
    json_decref(line);
}

/* The steps of the current plan for rank i: 1 broadcast (header) for IDLE, header + payload + the
 * forward's allreduces for BATCH. */
static int syn_steps(const syn_t *s, int i, int *ret_idle)
{
    int idle = !s->plan_batch ||
               (i == s->idle_path_rank && s->idle_path_iter && s->plan_iter >= s->idle_path_iter &&
                s->plan_iter < s->idle_path_iter + 1);
    *ret_idle = idle;
    return s->plan_batch ? (idle ? 2 : 2 + SYN_LAYERS) : 1;
}

static int syn_op_at(int step)
{
    return step < 2 ? SYN_BCAST : SYN_ALLREDUCE;
}

static void syn_workload(syn_t *s)
{
    if (s->t >= s->next_burst && s->t >= s->work_from) {
        uint32_t k = (uint32_t)syn_uniform(s, 1, 24);
        for (uint32_t j = 0; j < k && s->running + s->waiting < 256; j++)
            s->waiting++;
        s->next_burst =
            s->t + (s->idle_mode && syn_uniform(s, 0, 3) == 0 ? syn_uniform(s, 5000, 40000) * 1000
                                                              : syn_uniform(s, 200, 4000) * 1000);
    }
}

/* Leader: start the next iteration when its previous script is done. */
static void syn_leader_plan(syn_t *s)
{
    syn_rank_t *l = &s->r[0];
    if (s->plan_open || l->step < l->n_steps || l->busy_until > s->t)
        return;
    while (s->waiting && s->running < 32) { /* admit */
        s->remaining[s->running++] = (uint32_t)syn_uniform(s, 20, 400);
        s->waiting--;
    }
    if (!s->running)
        return; /* blocks: no plan while idle (followers wait in the header broadcast) */
    s->plan_batch = 1;
    s->bs = s->running;
    s->plan_hash = syn_rand(s);
    s->plan_open = 1;
}

static void syn_step(syn_t *s)
{
    syn_workload(s);
    syn_leader_plan(s);
    /* each rank: finish compute, enter the next collective */
    for (int i = 0; i < s->n; i++) {
        syn_rank_t *r = &s->r[i];
        if (r->dead || r->in_coll || r->busy_until > s->t)
            continue;
        if (r->step >= r->n_steps) {
            /* next iteration: the header broadcast is step 0 of every plan */
            if (i == 0 && !s->plan_open)
                continue;
            r->step = 0;
            r->n_steps = 1; /* known after the header arrives */
        }
        r->in_coll = 1;
        r->op = syn_op_at(r->step);
        r->in_seq = r->coll_seq;
        r->since = s->t;
    }
    /* complete a collective when all are in it at the same (seq, op) */
    int all = 1;
    for (int i = 0; i < s->n; i++)
        if (s->r[i].dead || !s->r[i].in_coll || s->r[i].in_seq != s->r[0].in_seq ||
            s->r[i].op != s->r[0].op)
            all = 0;
    if (all && s->r[0].step == 0 && !s->plan_open)
        all = 0; /* the leader has not issued the header yet */
    if (!all)
        return;
    for (int i = 0; i < s->n; i++) {
        syn_rank_t *r = &s->r[i];
        r->in_coll = 0;
        r->coll_seq++;
        r->coll_hash = (r->coll_hash ^ (uint64_t)(r->op + 1)) * 0x100000001b3ull + r->coll_seq;
        if (r->step == 0) {
            r->cur_iter = s->plan_iter;
            r->n_steps = syn_steps(s, i, &r->script_idle);
        }
        r->step++;
        int64_t work = 0;
        if (r->step < r->n_steps && syn_op_at(r->step) == SYN_ALLREDUCE)
            work = syn_uniform(s, 1, 3) + (int64_t)s->bs / 12; /* ms of compute per layer */
        if (r->step == 2 && i == s->stall_rank && s->stall_iter && r->cur_iter == s->stall_iter)
            work += s->stall_us / 1000;
        r->busy_until = s->t + work * 1000;
        if (r->step == r->n_steps) { /* iteration done: record it (I2) */
            r->iter = r->cur_iter;
            r->idle = r->script_idle;
            r->plan_hash = s->plan_hash;
        }
    }
    if (s->r[0].step == s->r[0].n_steps) { /* the leader processes results */
        s->plan_open = 0;
        s->plan_iter++;
        for (uint32_t j = 0; j < s->running;) {
            if (--s->remaining[j] == 0)
                s->remaining[j] = s->remaining[--s->running];
            else
                j++;
        }
        s->r[0].busy_until = s->t + syn_uniform(s, 0, 1) * 1000;
    }
}

/* Run until virtual time t_end (µs), emitting samples. */
static void syn_run(syn_t *s, int64_t t_end)
{
    for (; s->t < t_end && !s->stopped; s->t += 1000) {
        if (s->kill_at && s->t >= s->kill_at && !s->r[s->kill_rank].dead) {
            s->r[s->kill_rank].dead = 1;
            /* the launcher notices at once and reports through rank 0's reporter */
            tdm_tm_event_t e;
            memset(&e, 0, sizeof(e));
            e.ts_us = SYN_WALL0 + s->t;
            snprintf(e.type, sizeof(e.type), "worker_lost");
            snprintf(e.reason, sizeof(e.reason), "rank %d exited (signal 9)", s->kill_rank);
            e.data = json_pack("{s:i,s:i}", "rank", s->kill_rank, "signal", 9);
            syn_emit(s, s->kill_rank == 0 ? 1 : 0, s->t, &e, 0);
            json_decref(e.data);
            s->stopped = 1; /* SIGTERM to the rest: the group is gone */
            break;
        }
        syn_step(s);
        for (int i = 0; i < s->n; i++) {
            if (s->r[i].dead || s->t < s->r[i].next_sample)
                continue;
            syn_emit(s, i, s->t, NULL, 1);
            s->r[i].next_sample += 200000 + syn_uniform(s, -10, 10) * 1000;
        }
    }
}

/* One event line from (instance, rank) at t (its own batch, next seq). */
static void syn_event(syn_t *s, int rank, int64_t t, const char *type, int has_room, uint64_t room,
                      const char *to, const char *reason, json_t *data)
{
    tdm_tm_event_t e;
    memset(&e, 0, sizeof(e));
    e.ts_us = SYN_WALL0 + t;
    snprintf(e.type, sizeof(e.type), "%s", type);
    e.has_room = has_room;
    e.room = room;
    snprintf(e.to, sizeof(e.to), "%s", to ? to : "");
    snprintf(e.reason, sizeof(e.reason), "%s", reason ? reason : "");
    e.data = data;
    syn_emit(s, rank, t, &e, 0);
    json_decref(data);
}

#endif
