/*
 * rank_pd.c — PD in a rank (docs/serving.md "Prefill/decode disaggregation"): the role from the
 * flags, the transfer engine of rank 0 over its KV pool (or over a pool the engine allocates
 * through UCX: decode at TP 1 on the CPU), every rank's pool as a shared file rank 0 maps at
 * TP > 1, the engine's events (telemetry and a wake-up for the scheduler), its fault points, and
 * its readiness and tandem_xfer_* series for the HTTP layer.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/mapfile.h>
#include <tdm/prom.h>
#include <tdm/time.h>

#include "dataplane/worker/worker_int.h"

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
/* A checksum mismatch's where as the event's data (docs/contracts.md §c, §d "Segment sums"):
 * {"pages":[page],"rank","chunk","pages_differ","pages_total"} and, when the STATUS carried
 * segment sums, {"layer","sub","seg_rank","segments_differ","segments_total"}. */
static json_t *mismatch_data(const tdm_xfer_mismatch_t *m)
{
    json_t *d = json_pack("{s:I,s:I}", "pages_differ", (json_int_t)m->pages_differ, "pages_total",
                          (json_int_t)m->pages_total);
    if (!d)
        return NULL;
    if (m->has_page) {
        json_object_set_new(d, "pages", json_pack("[I]", (json_int_t)m->page));
        json_object_set_new(d, "rank", json_integer(m->rank));
        json_object_set_new(d, "chunk", json_integer(m->chunk));
    }
    if (m->has_segment) {
        json_object_set_new(d, "seg_rank", json_integer(m->seg_rank));
        json_object_set_new(d, "layer", json_integer(m->layer));
        json_object_set_new(d, "sub", json_string(tdm_kv_sub_name((tdm_kv_sub_t)m->sub)));
    }
    if (m->segs_total) {
        json_object_set_new(d, "segments_differ", json_integer(m->segs_differ));
        json_object_set_new(d, "segments_total", json_integer(m->segs_total));
    }
    return d;
}

/* peer_lost's data: the rooms the lost channel failed before the event (docs/contracts.md §c). */
static json_t *lost_data(const tdm_xfer_event_t *ev)
{
    json_t *rooms = json_array();
    for (uint32_t i = 0; i < ev->n_rooms; i++)
        json_array_append_new(rooms, tdm_json_hex64(ev->rooms[i]));
    return json_pack("{s:o,s:I}", "rooms", rooms, "failed_rooms", (json_int_t)ev->failed_rooms);
}

static void pd_event(void *ctx, const tdm_xfer_event_t *ev)
{
    tdm_worker_t *w = ctx;
    const tdm_worker_report_hooks_t *rep = &w->hooks.report;
    if (rep->event) {
        int kv = !strcmp(ev->type, "kvpoll");
        json_t *data = ev->mismatch                     ? mismatch_data(ev->mismatch)
                       : !strcmp(ev->type, "peer_lost") ? lost_data(ev)
                                                        : NULL;
        (void)rep->event(rep->ctx, ev->type, ev->room ? &ev->room : NULL,
                         kv ? tdm_kvpoll_name(ev->from) : NULL, kv ? tdm_kvpoll_name(ev->to) : NULL,
                         ev->reason, data);
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
    tdm_prom_head(f, "tandem_xfer_rooms", "Live transfer rooms by KVPoll state", "gauge");
    for (int k = 0; k < TDM_KVPOLL_MAX; k++)
        fprintf(f, "tandem_xfer_rooms{state=\"%s\"} %u\n", tdm_kvpoll_name((tdm_kvpoll_t)k), n[k]);
    tdm_prom_gauge(f, "tandem_xfer_registered", "1 while a peer group is registered",
                   tdm_xfer_wait_ready(w->xfer, 0, NULL, 0) == TDM_OK);
    {
        static const uint64_t bounds_us[TDM_XFER_LAT_NB] = TDM_XFER_LAT_BOUNDS_US;
        double bounds[TDM_XFER_LAT_NB];
        for (int b = 0; b < TDM_XFER_LAT_NB; b++)
            bounds[b] = (double)bounds_us[b] / 1e6;
        tdm_prom_hist(f, "tandem_xfer_latency_seconds",
                      "KV transfer rooms from open to SUCCESS (prefill side)", bounds,
                      TDM_XFER_LAT_NB, st.room_lat, (double)st.room_lat_sum_us / 1e6);
    }
    /* the engine's threads (I8): /health fails when one goes stale; the ages show which */
    tdm_prom_head(f, "tandem_xfer_thread_heartbeat_age_seconds",
                  "Time since each transfer-engine thread's last heartbeat (rank 0; -1 = never)",
                  "gauge");
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
        {"room_pages_total", "Prompt pages named by TRANSFER_INFO (decode: sent; prefill: taken)",
         st.room_pages, 0},
        {"room_bytes_total", "KV bytes of every rank those pages stand for", st.room_bytes, 0},
        {"prefix_pages_skipped_total",
         "Leading prompt pages decode already held (prefix cache or HiCache), not transferred",
         st.prefix_pages_skipped, 0},
        {"prefix_bytes_saved_total", "KV bytes of every rank those pages stand for",
         st.prefix_bytes_saved, 0},
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
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "tandem_xfer_%s", m[i].name);
        tdm_prom_head(f, name, m[i].help, m[i].gauge ? "gauge" : "counter");
        fprintf(f, "%s %llu\n", name, (unsigned long long)m[i].v);
    }
    tdm_prom_head(f, "tandem_xfer_checksum_seconds_total",
                  "Time spent computing or verifying KV checksums", "counter");
    fprintf(f, "tandem_xfer_checksum_seconds_total %.9f\n", (double)st.checksum_ns / 1e9);
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
tdm_status_t tdm_worker_pd_kv_create(tdm_worker_t *w, const tdm_kv_layout_t *l, char *err,
                                     size_t err_len)
{
    char path[300];
    uint64_t bytes;
    if (tdm_kv_layout_pool_bytes(l, w->num_pages, &bytes) != TDM_OK || bytes > SIZE_MAX) {
        snprintf(err, err_len, "KV pool of %u pages overflows", w->num_pages);
        return TDM_ERR_RANGE;
    }
    kv_path(w->prefix, w->rank, path, sizeof(path));
    void *m;
    tdm_status_t st = tdm_mapfile_create(path, (size_t)bytes, &m);
    if (st != TDM_OK) {
        snprintf(err, err_len, "KV pool file %s: %s%s", path, st == TDM_ERR_NOMEM ? "mmap: " : "",
                 strerror(errno));
        return st;
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
            st = tdm_worker_map_file(path, &w->peer_bytes[r], &w->peer_mem[r]);
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
tdm_status_t tdm_worker_pd_start(tdm_worker_t *w, const tdm_kv_layout_t *ucx_layout, char *err,
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
    char why[384] = "";
    xc.err = why;
    xc.err_len = sizeof(why);
    tdm_status_t st = tdm_xfer_init(&xc, &w->xfer);
    if (st != TDM_OK) {
        if (why[0]) /* e.g. the bootstrap listener's address, port, call and errno */
            snprintf(err, err_len, "transfer engine: %s", why);
        else
            snprintf(err, err_len, "transfer engine (%s %s:%u): %s",
                     w->pd == TDM_SCHED_PD_PREFILL ? "bootstrap listener on" : "prefill at",
                     w->pd_host, w->pd_port, tdm_status_str(st));
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
