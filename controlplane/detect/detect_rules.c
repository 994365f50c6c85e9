/*
 * detect_rules.c — the eight rules of docs/design.md §4, as functions of the ring, the detector's
 * event state and the clock. Each appends at most one finding per (group, class), with the evidence
 * an operator needs to act without opening another tool.
 *
 * Sample rules (WEDGE, RANK_DIVERGENCE) judge one incarnation whose ranks all report: a rank that
 * went silent is WORKER_LOST's business, and its frozen last sample must not read as a hang.
 * RANK_DIVERGENCE relies on two consequences of I1/I2: samples are seqlock-consistent copies of a
 * rank's record, so two ranks showing the same `iter` must show the same path and plan_hash, and
 * two ranks showing the same `coll_seq` must show the same `coll_hash` (the collective sequence is
 * a pure function of the plans). Its second form catches the hang itself (the rank_idle_path
 * shape: the leader waits in an allreduce at seq S while a follower that skipped the forward waits
 * in the next plan broadcast, also at seq S): ranks stuck >= 1 s at different positions
 * (coll_seq, op), or one rank past a collective another is stuck in. Ranks still before the
 * position are lagging, not diverging. The majority is the largest set of ranks at one position;
 * a tie goes to the set holding the lowest rank (rank 0: the leader decides).
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <tdm/frame.h>
#include <tdm/json.h>
#include <tdm/mem.h>

#include "controlplane/detect/detect_int.h"

#define MAX_LISTED 8 /* rooms / aborts / ranks listed by name in evidence */

json_t *tdm_cp_det_sample_json(const tdm_cp_sample_t *s, uint32_t rank)
{
    json_t *ic = json_null();
    if (s->in_coll_valid)
        ic = json_pack("{s:s,s:I,s:I}", "op", s->in_coll.op, "seq", (json_int_t)s->in_coll.seq,
                       "since_us", (json_int_t)s->in_coll.since_us);
    return json_pack("{s:I,s:I,s:I,s:s,s:o,s:I,s:o,s:o,s:I,s:I,s:I}", "rank", (json_int_t)rank,
                     "ts_us", (json_int_t)s->ts_us, "iter", (json_int_t)s->iter, "path", s->path,
                     "plan_hash", tdm_json_hex64(s->plan_hash), "coll_seq", (json_int_t)s->coll_seq,
                     "coll_hash", tdm_json_hex64(s->coll_hash), "in_coll", ic, "bs",
                     (json_int_t)s->bs, "waiting", (json_int_t)s->waiting, "running",
                     (json_int_t)s->running);
}

/* ---- one incarnation's view ----------------------------------------------------------------- */

typedef struct view_rank {
    const det_rank_t *r;
    const tdm_cp_sample_t *s; /* newest */
    uint64_t in_coll_us;      /* time inside the current collective, 0 when not inside */
    int cluster;              /* RANK_DIVERGENCE position cluster, -1: lagging */
} view_rank_t;

typedef struct view {
    const det_inst_t *in;
    const char *group;
    view_rank_t *v;
    size_t n;
} view_t;

static int cmp_rank(const void *a, const void *b)
{
    uint32_t x = ((const view_rank_t *)a)->r->rk->rank, y = ((const view_rank_t *)b)->r->rk->rank;
    return x < y ? -1 : x > y;
}

static json_t *ranks_table(const view_t *w, uint64_t now)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < w->n; i++) {
        json_t *o = tdm_cp_det_sample_json(w->v[i].s, w->v[i].r->rk->rank);
        if (w->v[i].s->in_coll_valid)
            json_object_set_new(json_object_get(o, "in_coll"), "for_us",
                                json_integer((json_int_t)w->v[i].in_coll_us));
        json_object_set_new(o, "sample_age_us",
                            json_integer((json_int_t)(now - w->v[i].r->last_rx)));
        json_array_append_new(arr, o);
    }
    return arr;
}

/* WEDGE's threshold (docs/design.md §4), beside the rule. */
#define WEDGE_US_DEFAULT 3000000

static void rule_wedge(tdm_cp_detect_t *d, det_inst_t *in, const view_t *w, uint64_t now,
                       tdm_cp_findings_t *out)
{
    uint64_t min_iter = UINT64_MAX, pending = 0;
    for (size_t i = 0; i < w->n; i++) {
        const tdm_cp_sample_t *s = w->v[i].s;
        if (s->iter < min_iter)
            min_iter = s->iter;
        /* rank 0 carries the queues; take the largest view so a follower's zeros never hide it */
        if ((uint64_t)s->waiting + s->running > pending)
            pending = (uint64_t)s->waiting + s->running;
    }
    if (!in->min_valid || in->min_iter != min_iter) {
        in->min_valid = 1;
        in->min_iter = min_iter;
        in->min_iter_at = now;
    }
    if (!pending) {
        in->pending_since = 0;
        return;
    }
    if (!in->pending_since)
        in->pending_since = now;
    /* progress is measured from when work appeared: a group idle for an hour is not wedged the
     * moment a request arrives */
    uint64_t since = in->min_iter_at > in->pending_since ? in->min_iter_at : in->pending_since;
    if (now - since < d->cfg.wedge_us)
        return;
    tdm_cp_finding_t *f = tdm_cp_findings_add(out, TDM_CP_ALERT_WEDGE, w->group);
    if (!f)
        return;
    snprintf(f->summary, sizeof(f->summary),
             "group %s wedged: min iter %" PRIu64 " unchanged for %.1f s with %" PRIu64
             " requests pending",
             w->group, min_iter, (double)(now - since) / 1e6, pending);
    f->evidence = json_pack("{s:s,s:I,s:I,s:I,s:o}", "instance_id", in->id, "min_iter",
                            (json_int_t)min_iter, "stalled_us", (json_int_t)(now - since),
                            "pending", (json_int_t)pending, "ranks", ranks_table(w, now));
}

/* Rule A: same iter → same path and plan_hash; same coll_seq → same coll_hash, over the last
 * div_window_us of each rank's samples. Fills disagree[i*n+j]; returns 1 if any. */
static int compare_windows(tdm_cp_detect_t *d, const view_t *w, uint8_t *disagree, char *what,
                           size_t what_len)
{
    int any = 0;
    for (size_t i = 0; i < w->n; i++) {
        const tdm_cp_rank_t *a = w->v[i].r->rk;
        for (size_t j = i + 1; j < w->n; j++) {
            const tdm_cp_rank_t *b = w->v[j].r->rk;
            int bad = 0;
            for (size_t x = a->count; x-- > 0 && !bad;) {
                const tdm_cp_sample_t *sa = tdm_cp_rank_at(a, x);
                if ((uint64_t)(w->v[i].s->ts_us - sa->ts_us) > d->cfg.div_window_us)
                    break;
                for (size_t y = b->count; y-- > 0;) {
                    const tdm_cp_sample_t *sb = tdm_cp_rank_at(b, y);
                    if ((uint64_t)(w->v[j].s->ts_us - sb->ts_us) > d->cfg.div_window_us)
                        break;
                    const char *field = NULL;
                    if (sa->iter == sb->iter && strcmp(sa->path, sb->path) != 0)
                        field = "path";
                    else if (sa->iter == sb->iter && sa->plan_hash != sb->plan_hash)
                        field = "plan_hash";
                    else if (sa->coll_seq == sb->coll_seq && sa->coll_hash != sb->coll_hash)
                        field = "coll_hash";
                    if (field) {
                        if (!any)
                            snprintf(what, what_len,
                                     "%s differs at iter %" PRIu64 "/coll_seq %" PRIu64
                                     ": rank %u %s, rank %u %s",
                                     field, sa->iter, sa->coll_seq, a->rank,
                                     strcmp(field, "path") ? "" : sa->path, b->rank,
                                     strcmp(field, "path") ? "" : sb->path);
                        bad = any = 1;
                        break;
                    }
                }
            }
            disagree[i * w->n + j] = disagree[j * w->n + i] = (uint8_t)bad;
        }
    }
    return any;
}

/* Rule B: positions of stuck ranks. Assigns clusters; returns 1 on divergence. */
static int compare_positions(tdm_cp_detect_t *d, view_t *w, uint64_t *ret_seq)
{
    int any_stuck = 0;
    uint64_t S = 0;
    for (size_t i = 0; i < w->n; i++) {
        w->v[i].cluster = -1;
        if (w->v[i].s->in_coll_valid && w->v[i].in_coll_us >= d->cfg.div_in_coll_us) {
            if (!any_stuck || w->v[i].s->in_coll.seq < S)
                S = w->v[i].s->in_coll.seq;
            any_stuck = 1;
        }
    }
    if (!any_stuck)
        return 0;
    /* relevant: stuck ranks, and ranks past the lowest stuck position (they left it without the
     * stuck ones); a rank before it, or at it and computing, is only behind */
    int n_clusters = 0;
    for (size_t i = 0; i < w->n; i++) {
        const tdm_cp_sample_t *s = w->v[i].s;
        int stuck = s->in_coll_valid && w->v[i].in_coll_us >= d->cfg.div_in_coll_us;
        uint64_t seq = s->in_coll_valid ? s->in_coll.seq : s->coll_seq;
        if (!stuck && seq <= S)
            continue;
        const char *op = s->in_coll_valid ? s->in_coll.op : "none";
        int c = -1;
        for (size_t j = 0; j < i && c < 0; j++) {
            const tdm_cp_sample_t *t = w->v[j].s;
            if (w->v[j].cluster >= 0 && (t->in_coll_valid ? t->in_coll.seq : t->coll_seq) == seq &&
                strcmp(t->in_coll_valid ? t->in_coll.op : "none", op) == 0)
                c = w->v[j].cluster;
        }
        w->v[i].cluster = c >= 0 ? c : n_clusters++;
    }
    *ret_seq = S;
    return n_clusters > 1;
}

/* RANK_DIVERGENCE's thresholds (docs/design.md §4). */
#define DIV_IN_COLL_US_DEFAULT 1000000
#define DIV_WINDOW_US_DEFAULT 2000000

static void rule_divergence(tdm_cp_detect_t *d, det_inst_t *in, const view_t *wc, uint64_t now,
                            tdm_cp_findings_t *out)
{
    view_t w = *wc;
    if (w.n < 2)
        return;
    uint8_t *disagree = tdm_calloc(w.n * w.n, 1);
    char what[256] = "";
    uint64_t seq = 0;
    int by_position = compare_positions(d, &w, &seq);
    /* Samples of different ranks are taken up to 200 ms apart: a follower's last sample may still
     * show it waiting in the plan broadcast the leader has just completed. A position split counts
     * only once it survives a fresh sample from every rank. */
    if (!by_position) {
        in->div_since = 0;
    } else {
        if (!in->div_since)
            in->div_since = now;
        for (size_t i = 0; i < w.n; i++)
            if (w.v[i].r->last_rx <= in->div_since)
                by_position = 0;
    }
    int by_record = !by_position && compare_windows(d, &w, disagree, what, sizeof(what));
    if (!by_position && !by_record) {
        tdm_free(disagree);
        return;
    }
    /* minority */
    uint8_t *minority = tdm_calloc(w.n, 1);
    int majority = -1;
    if (by_position) {
        size_t best = 0;
        for (size_t i = 0; i < w.n; i++) { /* v is sorted by rank: the first of a tie wins */
            if (w.v[i].cluster < 0)
                continue;
            size_t sz = 0;
            for (size_t j = 0; j < w.n; j++)
                sz += w.v[j].cluster == w.v[i].cluster;
            if (sz > best) {
                best = sz;
                majority = w.v[i].cluster;
            }
        }
        for (size_t i = 0; i < w.n; i++)
            minority[i] = w.v[i].cluster >= 0 && w.v[i].cluster != majority;
    } else {
        size_t n_min = 0;
        for (size_t i = 0; i < w.n; i++) {
            size_t score = 0;
            for (size_t j = 0; j < w.n; j++)
                score += disagree[i * w.n + j];
            minority[i] = 2 * score > w.n - 1;
            n_min += minority[i];
        }
        if (n_min == 0 || n_min == w.n) /* no majority: the ranks that disagree with the leader */
            for (size_t i = 0; i < w.n; i++)
                minority[i] = disagree[0 * w.n + i];
    }
    tdm_cp_finding_t *f = tdm_cp_findings_add(out, TDM_CP_ALERT_RANK_DIVERGENCE, w.group);
    if (!f)
        goto out;
    json_t *mr = json_array(), *mdet = json_array();
    char names[96] = "";
    size_t nl = 0;
    const char *maj_op = NULL, *min_op = NULL;
    for (size_t i = 0; i < w.n; i++) {
        const tdm_cp_sample_t *s = w.v[i].s;
        const char *op = s->in_coll_valid ? s->in_coll.op : "none";
        if (by_position && w.v[i].cluster == majority && !maj_op)
            maj_op = op;
        if (!minority[i])
            continue;
        if (!min_op)
            min_op = op;
        json_array_append_new(mr, json_integer(w.v[i].r->rk->rank));
        json_array_append_new(
            mdet, json_pack("{s:I,s:s,s:I,s:s}", "rank", (json_int_t)w.v[i].r->rk->rank, "op", op,
                            "seq", (json_int_t)(s->in_coll_valid ? s->in_coll.seq : s->coll_seq),
                            "path", s->path));
        nl += (size_t)snprintf(names + nl, nl < sizeof(names) ? sizeof(names) - nl : 0, "%s%u",
                               json_array_size(mr) > 1 ? "," : "", w.v[i].r->rk->rank);
    }
    if (by_position) {
        const char *op = maj_op && strcmp(maj_op, "none") ? maj_op : min_op;
        snprintf(f->summary, sizeof(f->summary),
                 "group %s: rank(s) %s diverged (in %s) while the others wait in %s at coll_seq "
                 "%" PRIu64,
                 w.group, names, min_op ? min_op : "?", op ? op : "?", seq);
        f->evidence = json_pack("{s:s,s:s,s:s,s:I,s:s?,s:o,s:o,s:o}", "instance_id", w.in->id,
                                "form", "position", "op", op ? op : "none", "seq", (json_int_t)seq,
                                "minority_op", min_op, "minority_ranks", mr, "minority", mdet,
                                "ranks", ranks_table(&w, now));
    } else {
        snprintf(f->summary, sizeof(f->summary), "group %s: rank(s) %s diverged: %s", w.group,
                 names, what);
        f->evidence = json_pack("{s:s,s:s,s:s,s:s?,s:o,s:o,s:o}", "instance_id", w.in->id, "form",
                                "record", "what", what, "op", min_op, "minority_ranks", mr,
                                "minority", mdet, "ranks", ranks_table(&w, now));
    }
out:
    tdm_free(minority);
    tdm_free(disagree);
}

/* WORKER_LOST's threshold (docs/design.md §4). */
#define LOST_US_DEFAULT 2000000

static void rule_lost(tdm_cp_detect_t *d, const det_inst_t *in, const char *group, uint64_t now,
                      tdm_cp_findings_t *out)
{
    json_t *lost = json_array();
    uint32_t first = UINT32_MAX;
    uint64_t first_silent = 0;
    for (size_t k = 0; k < d->n_ranks; k++) {
        const det_rank_t *r = &d->ranks[k];
        if (&d->insts[r->inst] != in || !r->has_rx || r->retired ||
            now - r->last_rx < d->cfg.lost_us)
            continue;
        const tdm_cp_sample_t *s = tdm_cp_rank_latest(r->rk);
        json_array_append_new(lost,
                              json_pack("{s:I,s:I,s:o}", "rank", (json_int_t)r->rk->rank,
                                        "silent_us", (json_int_t)(now - r->last_rx), "last_sample",
                                        s ? tdm_cp_det_sample_json(s, r->rk->rank) : json_null()));
        if (r->rk->rank < first) {
            first = r->rk->rank;
            first_silent = now - r->last_rx;
        }
    }
    if (!in->lost_event && json_array_size(lost) == 0) {
        json_decref(lost);
        return;
    }
    tdm_cp_finding_t *f = tdm_cp_findings_add(out, TDM_CP_ALERT_WORKER_LOST, group);
    if (!f) {
        json_decref(lost);
        return;
    }
    const char *src =
        in->lost_event
            ? json_string_value(json_object_get(json_object_get(in->lost_event, "data"), "source"))
            : NULL;
    int by_super = src && !strcmp(src, "supervisor");
    if (in->lost_event && by_super) /* a group that never ran long enough for a launcher report */
        snprintf(f->summary, sizeof(f->summary), "group %s: %s", group,
                 json_string_value(json_object_get(in->lost_event, "reason")));
    else if (in->lost_event)
        snprintf(f->summary, sizeof(f->summary),
                 "group %s: launcher reported rank %" PRId64 " exited (%s)", group,
                 (int64_t)json_integer_value(json_object_get(in->lost_event, "rank")),
                 json_string_value(json_object_get(in->lost_event, "reason")));
    else
        snprintf(f->summary, sizeof(f->summary), "group %s: no sample from rank %u for %.1f s",
                 group, first, (double)first_silent / 1e6);
    if (in->gave_up && !by_super) {
        /* the launcher's words say what happened first; the supervisor's, that nobody restarts
         * the group now (docs/groups.md "Failed starts") */
        size_t len = strlen(f->summary);
        json_int_t n = json_integer_value(
            json_object_get(json_object_get(in->gave_up, "data"), "start_failures"));
        snprintf(f->summary + len, sizeof(f->summary) - len,
                 "; the supervisor gave up after %" PRId64 " failures in a row (tandemctl restart "
                 "%s)",
                 (int64_t)n, group);
    }
    f->evidence = json_pack("{s:s,s:O,s:O,s:o}", "instance_id", in->id, "launcher",
                            in->lost_event ? in->lost_event : json_null(), "supervisor",
                            in->gave_up ? in->gave_up : json_null(), "silent", lost);
}

void tdm_cp_det_rules_samples(tdm_cp_detect_t *d, uint64_t now, tdm_cp_findings_t *out)
{
    view_rank_t *vr = tdm_malloc((d->n_ranks ? d->n_ranks : 1) * sizeof(*vr));
    for (size_t ii = 0; ii < d->n_insts; ii++) {
        det_inst_t *in = &d->insts[ii];
        if (!in->current)
            continue;
        const char *group = d->groups[in->group].name;
        rule_lost(d, in, group, now, out);
        view_t w = {in, group, vr, 0};
        int complete = !in->lost_event;
        for (size_t k = 0; k < d->n_ranks && complete; k++) {
            const det_rank_t *r = &d->ranks[k];
            if (r->inst != (int)ii || r->retired)
                continue;
            const tdm_cp_sample_t *s = tdm_cp_rank_latest(r->rk);
            if (!s || !r->has_rx || now - r->last_rx >= d->cfg.lost_us) {
                complete = 0;
                break;
            }
            uint64_t ic = 0;
            if (s->in_coll_valid && s->ts_us >= s->in_coll.since_us)
                ic = (uint64_t)(s->ts_us - s->in_coll.since_us) + (now - r->last_rx);
            vr[w.n++] = (view_rank_t){r, s, ic, -1};
        }
        if (!complete || w.n == 0) {
            in->min_valid = 0; /* restart the progress clock when the view comes back */
            in->pending_since = 0;
            in->div_since = 0;
            continue;
        }
        qsort(vr, w.n, sizeof(*vr), cmp_rank);
        rule_wedge(d, in, &w, now, out);
        rule_divergence(d, in, &w, now, out);
    }
    tdm_free(vr);
}

/* ---- event rules ---------------------------------------------------------------------------- */

typedef struct stuck_rooms {
    const det_room_t **v; /* rooms stuck past stall_room_us, oldest first */
    size_t n;
} stuck_rooms_t;

static int cmp_room_age(const void *a, const void *b)
{
    uint64_t x = (*(const det_room_t *const *)a)->open_rx;
    uint64_t y = (*(const det_room_t *const *)b)->open_rx;
    return x < y ? -1 : x > y;
}

/* One pass over the room table per tick, shared by every group. */
static void stuck_collect(tdm_cp_detect_t *d, uint64_t now, stuck_rooms_t *ret)
{
    ret->v = tdm_malloc((d->n_rooms ? d->n_rooms : 1) * sizeof(*ret->v));
    ret->n = 0;
    for (size_t i = 0; i < d->rooms_cap && d->n_rooms; i++) {
        const det_room_t *s = &d->rooms[i];
        if (s->group >= 0 &&
            (s->state == TDM_KVPOLL_WAITING_FOR_INPUT || s->state == TDM_KVPOLL_TRANSFERRING) &&
            now - s->open_rx >= d->cfg.stall_room_us)
            ret->v[ret->n++] = s;
    }
    qsort(ret->v, ret->n, sizeof(*ret->v), cmp_room_age);
}

/* TRANSFER_STALL's threshold (docs/design.md §4). */
#define STALL_ROOM_US_DEFAULT 10000000

static void rule_transfer_stall(tdm_cp_detect_t *d, int g, const stuck_rooms_t *st, uint64_t now,
                                tdm_cp_findings_t *out)
{
    const det_group_t *gr = &d->groups[g];
    json_t *rooms = json_array(), *hbs = NULL;
    size_t n_stuck = 0;
    /* rooms that wait while others complete are the room table's timeouts, not a stall */
    int completed = gr->has_success && now - gr->last_success_rx < d->cfg.stall_room_us;
    for (size_t i = 0; i < st->n && !completed; i++) {
        const det_room_t *s = st->v[i];
        if (s->group != g)
            continue;
        if (n_stuck++ < MAX_LISTED)
            json_array_append_new(
                rooms, json_pack("{s:o,s:s,s:I,s:s,s:I}", "room", tdm_json_hex64(s->room), "state",
                                 tdm_kvpoll_name((tdm_kvpoll_t)s->state), "age_us",
                                 (json_int_t)(now - s->open_rx), "instance_id",
                                 d->insts[s->inst].id, "rank", (json_int_t)s->rank));
    }
    for (size_t k = 0; k < d->n_ranks; k++) {
        const det_rank_t *r = &d->ranks[k];
        if (d->insts[r->inst].group != g || !d->insts[r->inst].current)
            continue;
        for (uint32_t h = 0; h < r->n_hb; h++) {
            /* the loop's own heartbeat is WEDGE's business */
            if (!r->hb[h].stale || strcmp(r->hb[h].thread, "loop") == 0)
                continue;
            if (!hbs)
                hbs = json_array();
            json_array_append_new(
                hbs, json_pack("{s:s,s:I,s:s,s:I}", "instance_id", r->rk->instance_id, "rank",
                               (json_int_t)r->rk->rank, "thread", r->hb[h].thread, "age_us",
                               (json_int_t)(r->hb[h].age_us + (now - r->hb[h].rx))));
        }
    }
    /* the partition form: a current incarnation whose channel to its transfer peer timed out
     * and has not registered again (detect.c on_channel); its rooms already failed */
    json_t *lost = NULL;
    for (size_t i = 0; i < d->n_insts; i++) {
        const det_inst_t *in = &d->insts[i];
        if (in->group != g || !in->current || !in->peer_lost)
            continue;
        json_t *o = json_deep_copy(in->peer_lost);
        json_object_set_new(o, "instance_id", json_string(in->id));
        json_object_set_new(o, "age_us", json_integer((json_int_t)(now - in->peer_lost_rx)));
        if (!lost)
            lost = json_array();
        json_array_append_new(lost, o);
    }
    if (!n_stuck && !hbs && !lost) {
        json_decref(rooms);
        return;
    }
    tdm_cp_finding_t *f = tdm_cp_findings_add(out, TDM_CP_ALERT_TRANSFER_STALL, gr->name);
    if (!f) {
        json_decref(rooms);
        json_decref(hbs);
        json_decref(lost);
        return;
    }
    if (n_stuck)
        snprintf(f->summary, sizeof(f->summary),
                 "group %s: %zu transfer room(s) stuck >= %.0f s with no completion in the window",
                 gr->name, n_stuck, (double)d->cfg.stall_room_us / 1e6);
    else if (hbs)
        snprintf(f->summary, sizeof(f->summary), "group %s: control-thread heartbeat stale (%s)",
                 gr->name, json_string_value(json_object_get(json_array_get(hbs, 0), "thread")));
    else
        snprintf(f->summary, sizeof(f->summary),
                 "group %s: transfer peer unreachable (%s); %lld room(s) failed on this side",
                 gr->name, json_string_value(json_object_get(json_array_get(lost, 0), "reason")),
                 (long long)json_integer_value(
                     json_object_get(json_array_get(lost, 0), "failed_rooms")));
    f->evidence = json_pack(
        "{s:I,s:o,s:o,s:o,s:o}", "stuck_rooms", (json_int_t)n_stuck, "rooms", rooms, "heartbeats",
        hbs ? hbs : json_array(), "peer_lost", lost ? lost : json_array(), "last_completion_age_us",
        gr->has_success ? json_integer((json_int_t)(now - gr->last_success_rx)) : json_null());
}

/* ABORT_UNACKED's threshold (docs/design.md §4). */
#define ABORT_ACK_US_DEFAULT 5000000

static void rule_abort(tdm_cp_detect_t *d, int g, uint64_t now, tdm_cp_findings_t *out)
{
    json_t *arr = NULL;
    size_t n = 0;
    const det_abort_t *first = NULL;
    for (size_t i = 0; i < d->n_aborts; i++) {
        const det_abort_t *a = &d->aborts[i];
        if (a->group != g || now - a->sent_rx < d->cfg.abort_ack_us)
            continue;
        n++;
        if (!first || a->sent_rx < first->sent_rx)
            first = a;
        if (!arr)
            arr = json_array();
        if (json_array_size(arr) < MAX_LISTED)
            json_array_append_new(
                arr, json_pack("{s:o,s:s,s:s,s:I,s:I}", "room", tdm_json_hex64(a->room), "peer",
                               a->peer, "instance_id", d->insts[a->inst].id, "rank",
                               (json_int_t)a->rank, "age_us", (json_int_t)(now - a->sent_rx)));
    }
    if (!n)
        return;
    tdm_cp_finding_t *f = tdm_cp_findings_add(out, TDM_CP_ALERT_ABORT_UNACKED, d->groups[g].name);
    if (!f) {
        json_decref(arr);
        return;
    }
    char hex[TDM_JSON_HEX64_LEN + 1];
    tdm_json_hex64_format(first->room, hex);
    snprintf(f->summary, sizeof(f->summary),
             "group %.64s: ABORT of room %s to %.80s unacknowledged for %.1f s (%zu in all)",
             d->groups[g].name, hex, first->peer[0] ? first->peer : "the peer",
             (double)(now - first->sent_rx) / 1e6, n);
    f->evidence = json_pack("{s:I,s:o}", "unacked", (json_int_t)n, "aborts", arr);
}

static void rule_corruption(tdm_cp_detect_t *d, int g, uint64_t now, tdm_cp_findings_t *out)
{
    const det_group_t *gr = &d->groups[g];
    /* The finding lasts event_hold_us after the last event, and ends with the incarnation that
     * sent it: a remedy's restart resolves the alert and mutes the class until the finding is
     * false, so a finding that outlived the restart hid a new corruption of the new incarnation
     * for as long as events kept coming (docs/alerts.md CORRUPTION). */
    if (!gr->corr_seen || now - gr->corr_rx >= d->cfg.event_hold_us ||
        !d->insts[gr->corr_inst].current)
        return;
    tdm_cp_finding_t *f = tdm_cp_findings_add(out, TDM_CP_ALERT_CORRUPTION, gr->name);
    if (!f)
        return;
    f->host_tier = gr->corr_host_seen && now - gr->corr_host_rx < d->cfg.event_hold_us;
    json_t *last = json_array_get(gr->corr_events, json_array_size(gr->corr_events) - 1);
    snprintf(f->summary, sizeof(f->summary), "group %s: %s (%" PRIu64 " corruption event(s))%s",
             gr->name, json_string_value(json_object_get(last, "type")), gr->corr_count,
             f->host_tier ? " on the host-tier path" : "");
    f->evidence = json_pack("{s:I,s:b,s:O}", "count", (json_int_t)gr->corr_count, "host_tier",
                            f->host_tier, "events", gr->corr_events);
}

/* The output rule's window, baseline and fewest responses (docs/design.md §4). */
#define OUTPUT_WINDOW_US_DEFAULT 60000000
#define OUTPUT_BASELINE_DEFAULT 0.01
#define OUTPUT_MIN_RESPONSES_DEFAULT 20

static void rule_output(tdm_cp_detect_t *d, int g, uint64_t now, tdm_cp_findings_t *out)
{
    const det_group_t *gr = &d->groups[g];
    uint64_t resp = 0, leaks = 0;
    for (size_t i = 0; i < gr->out_n; i++) {
        const det_out_bucket_t *b = &gr->out[i];
        if (now - b->rx < d->cfg.output_window_us) {
            resp += b->responses;
            leaks += b->leaks;
        }
    }
    double base = gr->out_baseline >= 0 ? gr->out_baseline : d->cfg.output_baseline;
    if (resp < d->cfg.output_min_responses || (double)leaks <= base * (double)resp)
        return;
    tdm_cp_finding_t *f = tdm_cp_findings_add(out, TDM_CP_ALERT_OUTPUT_ANOMALY, gr->name);
    if (!f)
        return;
    double rate = (double)leaks / (double)resp;
    snprintf(f->summary, sizeof(f->summary),
             "group %s: DSML leak rate %.3f above baseline %.3f (%" PRIu64 "/%" PRIu64 ")",
             gr->name, rate, base, leaks, resp);
    f->evidence =
        json_pack("{s:I,s:I,s:f,s:f,s:I,s:O}", "responses", (json_int_t)resp, "dsml_leaks",
                  (json_int_t)leaks, "rate", rate, "baseline", base, "window_us",
                  (json_int_t)d->cfg.output_window_us, "samples", gr->out_samples);
}

void tdm_cp_det_rules_events(tdm_cp_detect_t *d, uint64_t now, tdm_cp_findings_t *out)
{
    stuck_rooms_t st;
    stuck_collect(d, now, &st);
    for (size_t g = 0; g < d->n_groups; g++) {
        rule_transfer_stall(d, (int)g, &st, now, out);
        rule_abort(d, (int)g, now, out);
        rule_corruption(d, (int)g, now, out);
        rule_output(d, (int)g, now, out);
    }
    tdm_free(st.v);
    for (size_t i = 0; i < d->n_insts; i++) {
        const det_inst_t *in = &d->insts[i];
        if (!in->current || !in->layout_bad)
            continue;
        const char *group = d->groups[in->group].name;
        tdm_cp_finding_t *f = tdm_cp_findings_add(out, TDM_CP_ALERT_LAYOUT_MISMATCH, group);
        if (!f)
            continue;
        snprintf(f->summary, sizeof(f->summary), "group %s: host and device KV layouts differ: %s",
                 group, json_string_value(json_object_get(in->layout_bad, "why")));
        f->evidence = json_deep_copy(in->layout_bad);
    }
}

/* ---- defaults ------------------------------------------------------------------------------- */

/* Each rule's thresholds are defined beside the rule above; the engine's own (tick, event hold,
 * table sizes) here. */
void tdm_cp_detect_cfg_default(tdm_cp_detect_cfg_t *ret)
{
    *ret = (tdm_cp_detect_cfg_t){
        .tick_us = 100000,
        .wedge_us = WEDGE_US_DEFAULT,
        .div_in_coll_us = DIV_IN_COLL_US_DEFAULT,
        .div_window_us = DIV_WINDOW_US_DEFAULT,
        .stall_room_us = STALL_ROOM_US_DEFAULT,
        .abort_ack_us = ABORT_ACK_US_DEFAULT,
        .lost_us = LOST_US_DEFAULT,
        .event_hold_us = 30000000,
        .output_window_us = OUTPUT_WINDOW_US_DEFAULT,
        .output_baseline = OUTPUT_BASELINE_DEFAULT,
        .output_min_responses = OUTPUT_MIN_RESPONSES_DEFAULT,
        .max_rooms = 65536,
        .max_aborts = 4096,
        .max_groups = 1024,
    };
}
