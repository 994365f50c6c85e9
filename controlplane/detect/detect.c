/*
 * detect.c — the detector's bookkeeping: which ranks, incarnations and groups exist, what each
 * rank last sent and when (on the detector's clock), and the event-driven state (rooms in flight,
 * unacknowledged aborts, stale heartbeats, corruption, layout reports, launcher reports, output
 * statistics). The rules themselves live in detect_rules.c and only read this state.
 *
 * Ring ranks are never removed or reordered (ring.h), so a det_rank keeps a pointer to its ring
 * rank for the detector's lifetime. Receipt is noticed at evaluation time by the ring's write
 * position moving, which gives receipt times on the injected clock at tick resolution.
 */
#include "config.h"

#include <string.h>

#include <tdm/frame.h>
#include <tdm/json.h>
#include <tdm/layout.h>
#include <tdm/mem.h>

#include "controlplane/detect/detect_int.h"

static const char *const class_names[] = {
    "WEDGE",      "RANK_DIVERGENCE", "TRANSFER_STALL", "ABORT_UNACKED",
    "CORRUPTION", "LAYOUT_MISMATCH", "WORKER_LOST",    "OUTPUT_ANOMALY",
};
_Static_assert(sizeof(class_names) / sizeof(class_names[0]) == TDM_CP_ALERT_MAX,
               "class_names must name every alert class");

const char *tdm_cp_alert_class_name(tdm_cp_alert_class_t c)
{
    return (unsigned)c < TDM_CP_ALERT_MAX ? class_names[c] : "?";
}

tdm_status_t tdm_cp_alert_class_parse(const char *name, tdm_cp_alert_class_t *ret)
{
    for (int i = 0; i < TDM_CP_ALERT_MAX; i++)
        if (name && strcmp(name, class_names[i]) == 0) {
            *ret = (tdm_cp_alert_class_t)i;
            return TDM_OK;
        }
    return TDM_ERR_INVAL;
}

/* ---- findings ------------------------------------------------------------------------------- */

void tdm_cp_findings_clear(tdm_cp_findings_t *f)
{
    for (size_t i = 0; i < f->n; i++)
        json_decref(f->v[i].evidence);
    f->n = 0;
}

void tdm_cp_findings_free(tdm_cp_findings_t *f)
{
    if (!f)
        return;
    tdm_cp_findings_clear(f);
    tdm_free(f->v);
    memset(f, 0, sizeof(*f));
}

const tdm_cp_finding_t *tdm_cp_findings_get(const tdm_cp_findings_t *f, const char *group,
                                            tdm_cp_alert_class_t cls)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].cls == cls && strcmp(f->v[i].group, group) == 0)
            return &f->v[i];
    return NULL;
}

tdm_cp_finding_t *tdm_cp_findings_add(tdm_cp_findings_t *out, tdm_cp_alert_class_t cls,
                                      const char *group)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->v[i].cls == cls && strcmp(out->v[i].group, group) == 0)
            return NULL; /* one finding per (group, class): the first incarnation's wins */
    if (out->n == out->cap) {
        out->cap = out->cap ? 2 * out->cap : 16;
        out->v = tdm_realloc(out->v, out->cap * sizeof(*out->v));
    }
    tdm_cp_finding_t *f = &out->v[out->n++];
    memset(f, 0, sizeof(*f));
    f->cls = cls;
    snprintf(f->group, sizeof(f->group), "%s", group);
    return f;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

tdm_status_t tdm_cp_detect_init(const tdm_cp_detect_cfg_t *cfg, tdm_cp_detect_t **ret)
{
    tdm_cp_detect_cfg_t c;
    if (cfg)
        c = *cfg;
    else
        tdm_cp_detect_cfg_default(&c);
    if (!c.tick_us || !c.wedge_us || !c.div_in_coll_us || !c.div_window_us || !c.stall_room_us ||
        !c.abort_ack_us || !c.lost_us || !c.output_window_us || !c.max_rooms || !c.max_aborts ||
        !c.max_groups || !(c.output_baseline >= 0 && c.output_baseline <= 1) ||
        c.max_rooms > (1u << 28))
        return TDM_ERR_INVAL;
    tdm_cp_detect_t *d = tdm_calloc(1, sizeof(*d));
    d->cfg = c;
    /* the room table grows with use (load <= 1/2): every tick scans it, so its size follows the
     * rooms in flight, not the cap */
    d->rooms_cap = 64;
    d->rooms = tdm_malloc(d->rooms_cap * sizeof(*d->rooms));
    for (size_t i = 0; i < d->rooms_cap; i++)
        d->rooms[i].group = -1;
    d->aborts = tdm_calloc(c.max_aborts, sizeof(*d->aborts));
    *ret = d;
    return TDM_OK;
}

void tdm_cp_detect_free(tdm_cp_detect_t *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_insts; i++) {
        json_decref(d->insts[i].lost_event);
        json_decref(d->insts[i].gave_up);
        json_decref(d->insts[i].layout_bad);
        json_decref(d->insts[i].peer_lost);
    }
    for (size_t i = 0; i < d->n_groups; i++) {
        json_decref(d->groups[i].corr_events);
        json_decref(d->groups[i].out_samples);
    }
    tdm_free(d->ranks);
    tdm_free(d->insts);
    tdm_free(d->groups);
    tdm_free(d->rooms);
    tdm_free(d->aborts);
    tdm_free(d);
}

const tdm_cp_detect_stats_t *tdm_cp_detect_stats(const tdm_cp_detect_t *d)
{
    return &d->stats;
}

/* ---- ranks, incarnations, groups ------------------------------------------------------------ */

int tdm_cp_det_group_find(tdm_cp_detect_t *d, const char *name, int create)
{
    for (size_t i = 0; i < d->n_groups; i++)
        if (strcmp(d->groups[i].name, name) == 0)
            return (int)i;
    if (!create || d->n_groups >= d->cfg.max_groups)
        return -1;
    if (d->n_groups == d->cap_groups) {
        d->cap_groups = d->cap_groups ? 2 * d->cap_groups : 8;
        d->groups = tdm_realloc(d->groups, d->cap_groups * sizeof(*d->groups));
    }
    det_group_t *g = &d->groups[d->n_groups];
    memset(g, 0, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->corr_events = json_array();
    g->out_samples = json_array();
    g->out_baseline = -1;
    return (int)d->n_groups++;
}

static void inst_saw_ts(det_inst_t *in, int64_t ts)
{
    if (ts <= 0)
        return;
    if (!in->first_ts || ts < in->first_ts)
        in->first_ts = ts;
    if (ts > in->last_ts)
        in->last_ts = ts;
}

static int inst_find(tdm_cp_detect_t *d, const char *id, int group, uint64_t now)
{
    for (size_t i = 0; i < d->n_insts; i++)
        if (d->insts[i].group == group && strcmp(d->insts[i].id, id) == 0)
            return (int)i;
    if (d->n_insts == d->cap_insts) {
        d->cap_insts = d->cap_insts ? 2 * d->cap_insts : 8;
        d->insts = tdm_realloc(d->insts, d->cap_insts * sizeof(*d->insts));
    }
    det_inst_t *in = &d->insts[d->n_insts];
    memset(in, 0, sizeof(*in));
    snprintf(in->id, sizeof(in->id), "%s", id);
    in->group = group;
    in->first_rx = in->last_rx = now;
    in->current = 1;
    return (int)d->n_insts++;
}

/* The det_rank of ring rank `rk`, created on first sight; -1 when the group table is full. */
static int rank_get(tdm_cp_detect_t *d, const tdm_cp_rank_t *rk, uint64_t now)
{
    for (size_t i = 0; i < d->n_ranks; i++)
        if (d->ranks[i].rk == rk)
            return (int)i;
    int g = tdm_cp_det_group_find(d, rk->group, 1);
    if (g < 0)
        return -1;
    int in = inst_find(d, rk->instance_id, g, now);
    if (d->n_ranks == d->cap_ranks) {
        d->cap_ranks = d->cap_ranks ? 2 * d->cap_ranks : 16;
        d->ranks = tdm_realloc(d->ranks, d->cap_ranks * sizeof(*d->ranks));
    }
    det_rank_t *r = &d->ranks[d->n_ranks];
    memset(r, 0, sizeof(*r));
    r->rk = rk;
    r->inst = in;
    r->first_rx = now;
    return (int)d->n_ranks++;
}

/* ---- rooms: open addressing keyed by (group, room) ------------------------------------------ */

static size_t room_hash(int group, uint64_t room, size_t cap)
{
    uint64_t x = room ^ ((uint64_t)(uint32_t)group * 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (size_t)(x ^ (x >> 31)) & (cap - 1);
}

det_room_t *tdm_cp_det_room_slot(tdm_cp_detect_t *d, int group, uint64_t room, int *ret_found)
{
    size_t i = room_hash(group, room, d->rooms_cap);
    for (;;) {
        det_room_t *s = &d->rooms[i];
        if (s->group < 0) {
            *ret_found = 0;
            return s;
        }
        if (s->group == group && s->room == room) {
            *ret_found = 1;
            return s;
        }
        i = (i + 1) & (d->rooms_cap - 1);
    }
}

void tdm_cp_det_room_del(tdm_cp_detect_t *d, det_room_t *slot)
{
    size_t mask = d->rooms_cap - 1;
    size_t i = (size_t)(slot - d->rooms);
    size_t j = i;
    d->rooms[i].group = -1;
    d->n_rooms--;
    /* backward shift: move later members of the probe run into the hole when their home slot
     * does not lie cyclically in (i, j] */
    for (;;) {
        j = (j + 1) & mask;
        if (d->rooms[j].group < 0)
            return;
        size_t k = room_hash(d->rooms[j].group, d->rooms[j].room, d->rooms_cap);
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        d->rooms[i] = d->rooms[j];
        d->rooms[j].group = -1;
        i = j;
    }
}

static void rooms_grow(tdm_cp_detect_t *d)
{
    det_room_t *old = d->rooms;
    size_t old_cap = d->rooms_cap;
    d->rooms_cap *= 2;
    d->rooms = tdm_malloc(d->rooms_cap * sizeof(*d->rooms));
    for (size_t i = 0; i < d->rooms_cap; i++)
        d->rooms[i].group = -1;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].group < 0)
            continue;
        int found;
        *tdm_cp_det_room_slot(d, old[i].group, old[i].room, &found) = old[i];
    }
    tdm_free(old);
}

/* Drop the oldest room (by open time) to make space: rooms are bounded. */
static void room_evict_oldest(tdm_cp_detect_t *d)
{
    det_room_t *old = NULL;
    for (size_t i = 0; i < d->rooms_cap; i++)
        if (d->rooms[i].group >= 0 && (!old || d->rooms[i].open_rx < old->open_rx))
            old = &d->rooms[i];
    if (old) {
        tdm_cp_det_room_del(d, old);
        d->stats.rooms_dropped++;
    }
}

static int kvpoll_parse(const char *name)
{
    for (int s = 0; s < TDM_KVPOLL_MAX; s++)
        if (strcmp(name, tdm_kvpoll_name((tdm_kvpoll_t)s)) == 0)
            return s;
    return -1;
}

static void on_kvpoll(tdm_cp_detect_t *d, int ri, const tdm_tm_event_t *e, uint64_t now)
{
    int to = kvpoll_parse(e->to);
    if (!e->has_room || to < 0) {
        d->stats.events_malformed++;
        return;
    }
    det_rank_t *r = &d->ranks[ri];
    int g = d->insts[r->inst].group;
    int found;
    det_room_t *s = tdm_cp_det_room_slot(d, g, e->room, &found);
    if (to == TDM_KVPOLL_SUCCESS || to == TDM_KVPOLL_FAILED) {
        json_t *pl = d->insts[r->inst].peer_lost;
        if (to == TDM_KVPOLL_FAILED && pl) {
            /* a room that failed while the channel is lost ("peer lost", or its transfer into
             * the unreachable peer): named in the partition's evidence */
            json_t *rooms = json_object_get(pl, "rooms");
            if (json_array_size(rooms) < DET_PEER_ROOMS)
                json_array_append_new(rooms, tdm_json_hex64(e->room));
            json_object_set_new(
                pl, "failed_rooms",
                json_integer(json_integer_value(json_object_get(pl, "failed_rooms")) + 1));
        }
        if (to == TDM_KVPOLL_SUCCESS) {
            d->groups[g].last_success_rx = now;
            d->groups[g].has_success = 1;
        }
        if (found)
            tdm_cp_det_room_del(d, s);
        return;
    }
    if (!found) {
        if (d->n_rooms >= d->cfg.max_rooms)
            room_evict_oldest(d);
        else if (2 * (d->n_rooms + 1) > d->rooms_cap)
            rooms_grow(d);
        s = tdm_cp_det_room_slot(d, g, e->room, &found);
        s->room = e->room;
        s->group = g;
        s->open_rx = now;
        s->state = 0xff;
        d->n_rooms++;
    }
    s->inst = r->inst;
    s->rank = r->rk->rank;
    if (s->state != (uint8_t)to) {
        s->state = (uint8_t)to;
        s->state_rx = now;
    }
}

/* ---- aborts --------------------------------------------------------------------------------- */

static void on_abort(tdm_cp_detect_t *d, int ri, const tdm_tm_event_t *e, json_t *data,
                     uint64_t now, int acked)
{
    if (!e->has_room) {
        d->stats.events_malformed++;
        return;
    }
    det_rank_t *r = &d->ranks[ri];
    int g = d->insts[r->inst].group;
    for (size_t i = 0; i < d->n_aborts; i++) {
        if (d->aborts[i].group == g && d->aborts[i].room == e->room) {
            if (acked)
                d->aborts[i] = d->aborts[--d->n_aborts];
            return; /* a second ABORT for the same room keeps the first send time */
        }
    }
    if (acked)
        return; /* an ACK for an abort we never saw sent (sent before tandemd started) */
    if (d->n_aborts == d->cfg.max_aborts) {
        size_t old = 0;
        for (size_t i = 1; i < d->n_aborts; i++)
            if (d->aborts[i].sent_rx < d->aborts[old].sent_rx)
                old = i;
        d->aborts[old] = d->aborts[--d->n_aborts];
        d->stats.aborts_dropped++;
    }
    det_abort_t *a = &d->aborts[d->n_aborts++];
    memset(a, 0, sizeof(*a));
    a->room = e->room;
    a->group = g;
    a->inst = r->inst;
    a->rank = r->rk->rank;
    a->sent_rx = now;
    const char *peer = json_string_value(json_object_get(data, "peer"));
    snprintf(a->peer, sizeof(a->peer), "%s", peer ? peer : "");
}

/* ---- heartbeats ----------------------------------------------------------------------------- */

static void on_heartbeat(tdm_cp_detect_t *d, int ri, json_t *data, uint64_t now, int stale)
{
    const char *thread = json_string_value(json_object_get(data, "thread"));
    json_t *age = json_object_get(data, "age_us");
    if (!thread || !*thread || strlen(thread) >= DET_HB_NAME || (stale && !json_is_integer(age)) ||
        (age && json_is_integer(age) && json_integer_value(age) < 0)) {
        d->stats.events_malformed++;
        return;
    }
    det_rank_t *r = &d->ranks[ri];
    det_hb_t *h = NULL;
    for (uint32_t i = 0; i < r->n_hb; i++)
        if (strcmp(r->hb[i].thread, thread) == 0)
            h = &r->hb[i];
    if (!h) {
        if (!stale)
            return;
        if (r->n_hb == DET_HB_MAX) {
            d->stats.events_ignored++;
            return;
        }
        h = &r->hb[r->n_hb++];
        snprintf(h->thread, sizeof(h->thread), "%s", thread);
    }
    h->stale = (uint8_t)stale;
    h->age_us = json_is_integer(age) ? (uint64_t)json_integer_value(age) : 0;
    h->rx = now;
}

/* ---- the transfer channel ------------------------------------------------------------------- */

/* `peer_lost` after the channel's heartbeat timeout: the peer is alive or not, but unreachable
 * (a partition; a peer that exits or restarts closes the channel instead, WORKER_LOST's
 * business). Open until the channel registers again (`peer_registered`), docs/alerts.md
 * TRANSFER_STALL. The event names the rooms the worker failed before it (data `rooms`,
 * `failed_rooms`, docs/contracts.md §c); a room failing later while the channel is still lost is
 * added by on_kvpoll. */
static void on_channel(tdm_cp_detect_t *d, int ri, const tdm_tm_event_t *e, json_t *data,
                       uint64_t now, int lost)
{
    det_rank_t *r = &d->ranks[ri];
    det_inst_t *in = &d->insts[r->inst];
    if (!lost || !strstr(e->reason, "timeout")) {
        if (!lost) {
            json_decref(in->peer_lost);
            in->peer_lost = NULL;
            in->peer_lost_rx = 0;
        }
        return;
    }
    json_t *named = json_array();
    json_int_t failed = 0;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(data, "rooms"), i, v)
    {
        uint64_t room;
        if (json_array_size(named) < DET_PEER_ROOMS && json_is_string(v) &&
            tdm_json_hex64_parse(json_string_value(v), &room) == TDM_OK)
            json_array_append_new(named, tdm_json_hex64(room));
    }
    json_t *jf = json_object_get(data, "failed_rooms");
    if (json_is_integer(jf) && json_integer_value(jf) >= 0)
        failed = json_integer_value(jf);
    if (failed < (json_int_t)json_array_size(named))
        failed = (json_int_t)json_array_size(named);
    json_decref(in->peer_lost);
    in->peer_lost = json_pack("{s:I,s:s,s:o,s:I}", "rank", (json_int_t)r->rk->rank, "reason",
                              e->reason, "rooms", named, "failed_rooms", failed);
    in->peer_lost_rx = now;
}

/* ---- corruption, layout, launcher, output --------------------------------------------------- */

static const char *const corruption_types[] = {"checksum_mismatch", "hicache_load_mismatch",
                                               "poisoned_page_read", "aux_room_mismatch",
                                               "canary_mismatch"};

static json_t *event_origin(const det_rank_t *r, const tdm_tm_event_t *e, json_t *data)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:I}", "type", e->type, "instance_id", r->rk->instance_id,
                          "rank", (json_int_t)r->rk->rank, "ts_us", (json_int_t)e->ts_us);
    if (e->has_room)
        json_object_set_new(o, "room", tdm_json_hex64(e->room));
    if (e->reason[0])
        json_object_set_new(o, "reason", json_string(e->reason));
    if (data)
        json_object_set(o, "data", data);
    return o;
}

static void on_corruption(tdm_cp_detect_t *d, int ri, const tdm_tm_event_t *e, json_t *data,
                          uint64_t now)
{
    det_rank_t *r = &d->ranks[ri];
    det_group_t *g = &d->groups[d->insts[r->inst].group];
    const char *tier = json_string_value(json_object_get(data, "tier"));
    int host = strcmp(e->type, "hicache_load_mismatch") == 0 || (tier && !strcmp(tier, "host"));
    g->corr_rx = now;
    g->corr_seen = 1;
    g->corr_inst = r->inst;
    g->corr_count++;
    if (host) {
        g->corr_host_rx = now;
        g->corr_host_seen = 1;
    }
    if (json_array_size(g->corr_events) == DET_CORR_KEEP)
        json_array_remove(g->corr_events, 0);
    json_t *o = event_origin(r, e, data);
    json_object_set_new(o, "host_tier", json_boolean(host));
    json_array_append_new(g->corr_events, o);
}

/* `layout` reports both records; `layout_mismatch` is the worker's own verdict. Either way the
 * detector decides from the records (tdm_layout_equal), so both records are always evidence. */
static void on_layout(tdm_cp_detect_t *d, int ri, json_t *data, int worker_says_bad)
{
    det_rank_t *r = &d->ranks[ri];
    det_inst_t *in = &d->insts[r->inst];
    tdm_layout_record_t host, dev;
    char err[256] = "", why[256] = "";
    json_t *jh = json_object_get(data, "host");
    json_t *jd = json_object_get(data, "device");
    int parsed = jh && jd &&
                 tdm_layout_from_json(jh, "data.host", &host, err, sizeof(err)) == TDM_OK &&
                 tdm_layout_from_json(jd, "data.device", &dev, err, sizeof(err)) == TDM_OK;
    if (!parsed && !worker_says_bad) {
        d->stats.events_malformed++;
        return;
    }
    if (parsed && tdm_layout_equal(&host, &dev, why, sizeof(why)) && !worker_says_bad) {
        json_decref(in->layout_bad);
        in->layout_bad = NULL;
        return;
    }
    if (parsed && !why[0])
        snprintf(why, sizeof(why), "the worker reported a mismatch (records compare equal)");
    json_t *ev = json_pack("{s:s,s:I,s:s}", "instance_id", r->rk->instance_id, "rank",
                           (json_int_t)r->rk->rank, "why", parsed ? why : err);
    json_object_set(ev, "host", jh ? jh : json_null());
    json_object_set(ev, "device", jd ? jd : json_null());
    json_decref(in->layout_bad);
    in->layout_bad = ev;
}

static void on_worker_lost(tdm_cp_detect_t *d, int ri, const tdm_tm_event_t *e, json_t *data)
{
    det_rank_t *r = &d->ranks[ri];
    det_inst_t *in = &d->insts[r->inst];
    json_t *jr = json_object_get(data, "rank");
    json_int_t lost_rank = json_is_integer(jr) ? json_integer_value(jr) : (json_int_t)r->rk->rank;
    /* the stop's own abort (a wedged rank the launcher gave up on after SIGTERM): the incarnation
     * was stopped on purpose. Said by the launcher itself, so it holds when this detector is not
     * the one whose supervisor asked (tandemd restarted, the batch replayed from the worker's
     * spool): a healthy later incarnation is not restarted for it. The supervisor's own report
     * (a launcher exit nobody asked for) counts whatever came before. */
    const char *src = json_string_value(json_object_get(data, "source"));
    if (json_is_true(json_object_get(data, "stopping")) && !(src && !strcmp(src, "supervisor"))) {
        in->stopping = 1;
        return;
    }
    in->stopping = 0;
    if (src && !strcmp(src, "supervisor") && json_is_true(json_object_get(data, "gave_up"))) {
        json_decref(in->gave_up);
        in->gave_up = json_pack("{s:s,s:O}", "reason", e->reason, "data", data);
    }
    if (!in->lost_event) /* the first report names the rank that went first */
        in->lost_event = json_pack("{s:I,s:s,s:I,s:O?}", "rank", lost_rank, "reason", e->reason,
                                   "ts_us", (json_int_t)e->ts_us, "data", data);
}

static void on_output_stats(tdm_cp_detect_t *d, int ri, json_t *data, uint64_t now)
{
    det_rank_t *r = &d->ranks[ri];
    det_group_t *g = &d->groups[d->insts[r->inst].group];
    json_t *jr = json_object_get(data, "responses");
    json_t *jl = json_object_get(data, "dsml_leaks");
    json_t *jb = json_object_get(data, "baseline");
    if (!json_is_integer(jr) || !json_is_integer(jl) || json_integer_value(jr) < 0 ||
        json_integer_value(jl) < 0 || json_integer_value(jl) > json_integer_value(jr) ||
        json_integer_value(jr) > UINT32_MAX || (jb && !json_is_number(jb))) {
        d->stats.events_malformed++;
        return;
    }
    if (jb) {
        double b = json_number_value(jb);
        if (b >= 0 && b <= 1)
            g->out_baseline = b;
    }
    det_out_bucket_t *b = &g->out[g->out_head];
    b->rx = now;
    b->responses = (uint32_t)json_integer_value(jr);
    b->leaks = (uint32_t)json_integer_value(jl);
    g->out_head = (g->out_head + 1) % DET_OUT_BUCKETS;
    if (g->out_n < DET_OUT_BUCKETS)
        g->out_n++;
    json_t *samples = json_object_get(data, "samples");
    size_t i;
    json_t *s;
    json_array_foreach(samples, i, s)
    {
        if (!json_is_string(s))
            continue;
        if (json_array_size(g->out_samples) == DET_OUT_SAMPLES)
            json_array_remove(g->out_samples, 0);
        const char *txt = json_string_value(s);
        json_array_append_new(g->out_samples, json_stringn(txt, strnlen(txt, 512)));
    }
}

void tdm_cp_detect_event(tdm_cp_detect_t *d, const tdm_cp_rank_t *rk, const tdm_tm_event_t *e,
                         uint64_t now_us)
{
    d->stats.events++;
    int ri = rank_get(d, rk, now_us);
    if (ri < 0) {
        d->stats.events_ignored++;
        return;
    }
    det_inst_t *in = &d->insts[d->ranks[ri].inst];
    if (now_us > in->last_rx)
        in->last_rx = now_us;
    inst_saw_ts(in, e->ts_us);
    const char *t = e->type;
    if (!strcmp(t, "kvpoll")) { /* the bulk of the events: its data is not read */
        on_kvpoll(d, ri, e, now_us);
        return;
    }
    /* the others' data as a tree (decoded events carry it as text, tdm/telemetry.h) */
    json_t *data = tdm_tm_event_data(e);
    if (!strcmp(t, "abort_sent") || !strcmp(t, "abort_acked"))
        on_abort(d, ri, e, data, now_us, t[6] == 'a');
    else if (!strcmp(t, "heartbeat_stale") || !strcmp(t, "heartbeat_fresh"))
        on_heartbeat(d, ri, data, now_us, t[10] == 's');
    else if (!strcmp(t, "layout") || !strcmp(t, "layout_mismatch"))
        on_layout(d, ri, data, t[6] == '_');
    else if (!strcmp(t, "peer_lost") || !strcmp(t, "peer_registered"))
        on_channel(d, ri, e, data, now_us, t[5] == 'l');
    else if (!strcmp(t, "worker_lost"))
        on_worker_lost(d, ri, e, data);
    else if (!strcmp(t, "shutdown"))
        d->ranks[ri].retired = 1;
    else if (!strcmp(t, "output_stats"))
        on_output_stats(d, ri, data, now_us);
    else {
        size_t i = 0;
        while (i < sizeof(corruption_types) / sizeof(corruption_types[0]) &&
               strcmp(t, corruption_types[i]))
            i++;
        if (i < sizeof(corruption_types) / sizeof(corruption_types[0]))
            on_corruption(d, ri, e, data, now_us);
        else
            d->stats.events_ignored++;
    }
    json_decref(data);
}

size_t tdm_cp_detect_retire_group(tdm_cp_detect_t *d, const char *group)
{
    int g = tdm_cp_det_group_find(d, group, 0);
    size_t n = 0;
    for (size_t k = 0; g >= 0 && k < d->n_ranks; k++)
        if (d->insts[d->ranks[k].inst].group == g && !d->ranks[k].retired) {
            d->ranks[k].retired = 1;
            n++;
        }
    return n;
}

/* ---- evaluation ----------------------------------------------------------------------------- */

/* Notice new samples, then decide which incarnations are current. */
static void refresh(tdm_cp_detect_t *d, const tdm_cp_rings_t *rings, uint64_t now)
{
    for (size_t i = 0; i < rings->n; i++) {
        const tdm_cp_rank_t *rk = rings->ranks[i];
        if (!rk->count)
            continue;
        int ri = rank_get(d, rk, now);
        if (ri < 0)
            continue;
        det_rank_t *r = &d->ranks[ri];
        if (r->has_rx && r->seen_head == rk->head && r->seen_count == rk->count)
            continue;
        r->seen_head = rk->head;
        r->seen_count = rk->count;
        r->has_rx = 1;
        r->last_rx = now;
        det_inst_t *in = &d->insts[r->inst];
        if (now > in->last_rx)
            in->last_rx = now;
        const tdm_cp_sample_t *s = tdm_cp_rank_latest(rk);
        if (s)
            inst_saw_ts(in, s->ts_us);
    }
    for (size_t i = 0; i < d->n_insts; i++) {
        det_inst_t *in = &d->insts[i];
        int n = 0, retired = 0;
        for (size_t k = 0; k < d->n_ranks; k++)
            if (d->ranks[k].inst == (int)i) {
                n++;
                retired += d->ranks[k].retired;
            }
        in->current = !(n > 0 && retired == n) && !in->stopping;
        for (size_t j = 0; j < d->n_insts && in->current; j++) {
            const det_inst_t *o = &d->insts[j];
            if (j != i && o->group == in->group &&
                (o->first_rx > in->last_rx ||
                 (o->first_ts && in->last_ts && o->first_ts > in->last_ts)))
                in->current = 0;
        }
    }
    /* rooms and aborts of an incarnation that is gone will never finish: forget them */
    for (size_t i = 0; i < d->rooms_cap && d->n_rooms;) {
        det_room_t *s = &d->rooms[i];
        if (s->group >= 0 && !d->insts[s->inst].current)
            tdm_cp_det_room_del(d, s); /* re-examine slot i: a later member may have moved in */
        else
            i++;
    }
    for (size_t i = 0; i < d->n_aborts;) {
        if (!d->insts[d->aborts[i].inst].current)
            d->aborts[i] = d->aborts[--d->n_aborts];
        else
            i++;
    }
}

void tdm_cp_detect_eval(tdm_cp_detect_t *d, const tdm_cp_rings_t *rings, uint64_t now_us,
                        tdm_cp_findings_t *out)
{
    tdm_cp_findings_clear(out);
    d->stats.ticks++;
    d->last_eval = now_us;
    d->evaluated = 1;
    refresh(d, rings, now_us);
    tdm_cp_det_rules_samples(d, now_us, out);
    tdm_cp_det_rules_events(d, now_us, out);
}

int tdm_cp_detect_tick(tdm_cp_detect_t *d, const tdm_cp_rings_t *rings, uint64_t now_us,
                       tdm_cp_findings_t *out)
{
    if (d->evaluated && now_us >= d->last_eval && now_us - d->last_eval < d->cfg.tick_us)
        return 0;
    tdm_cp_detect_eval(d, rings, now_us, out);
    return 1;
}
