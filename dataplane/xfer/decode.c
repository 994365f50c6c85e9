/*
 * decode.c — the decode leader's side: the REGISTER it sends (per rank: worker address, packed
 * rkeys of the KV pool and the aux region), TRANSFER_INFO per room, STATUS/ABORT_ACK handling,
 * verification of a finished room over decode's own memory before the KV is used, and the
 * quarantine of pages whose room failed while prefill may still be writing: they are held until
 * ABORT_ACK proves every prefill rank flushed (I5); past the ACK timeout the corruption-risk
 * counter rises and the pages stay held. Runs with the engine's `mu` held unless noted.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/xfer/xfer_int.h"

tdm_status_t tdm_xfer_decode_register_frame(tdm_xfer_t *x, uint8_t **ret_buf, size_t *ret_len)
{
    tdm_frame_register_t *f = tdm_calloc(1, sizeof(*f));
    uint8_t *blobs[TDM_XFER_RANKS_MAX] = {0};
    size_t cap = 4096;
    tdm_status_t st;
    f->instance_id = x->cfg.instance_id;
    f->tp_size = (uint16_t)x->n_ranks;
    f->n_ranks = (uint16_t)x->n_ranks;
    f->page_size = x->page_size;
    f->layout = x->layout;
    for (uint32_t i = 0; i < x->n_ranks; i++) {
        xfer_ucx_t *u = &x->ucx[i];
        tdm_frame_rank_t *r = &f->ranks[i];
        /* the kv part: UCX's packed rkey, or the CUDA IPC record of a device pool */
        const void *kv_part = x->cuda ? (const void *)x->cuda_rec[i] : u->kv_rkey;
        size_t kv_len = x->cuda ? XFER_CUDA_REC_BYTES : u->kv_rkey_len;
        size_t n = 4 + kv_len + u->aux_rkey_len;
        uint64_t pool_bytes;
        tdm_kv_layout_pool_bytes(x->cfg.kv[i]->layout, x->cfg.kv[i]->num_pages, &pool_bytes);
        blobs[i] = tdm_malloc(n);
        for (int b = 0; b < 4; b++)
            blobs[i][b] = (uint8_t)(kv_len >> (8 * b));
        memcpy(blobs[i] + 4, kv_part, kv_len);
        memcpy(blobs[i] + 4 + kv_len, u->aux_rkey, u->aux_rkey_len);
        r->rank = (uint16_t)i;
        r->mem_kind = x->cuda ? TDM_XFER_MEM_CUDA_IPC : TDM_XFER_MEM_HOST;
        r->base_addr = (uint64_t)(uintptr_t)x->cfg.kv[i]->base;
        r->pool_bytes = pool_bytes;
        r->aux_addr = (uint64_t)(uintptr_t)x->aux[i];
        r->aux_bytes = (uint64_t)x->cfg.aux_slots * TDM_XFER_AUX_BYTES;
        r->worker_addr = (tdm_blob_t){(const uint8_t *)u->addr, (uint32_t)u->addr_len};
        r->rkey = (tdm_blob_t){blobs[i], (uint32_t)n};
        cap += 64 + n + u->addr_len;
    }
    uint8_t *buf = tdm_malloc(cap);
    st = tdm_frame_encode_register(f, buf, cap, ret_len);
    if (st == TDM_OK)
        *ret_buf = buf;
    else
        free(buf);
    for (uint32_t i = 0; i < x->n_ranks; i++)
        free(blobs[i]);
    free(f);
    return st;
}

tdm_status_t tdm_xfer_decode_send_info(tdm_xfer_t *x, const uint32_t *prompt_ids, uint32_t n_prompt,
                                       const uint32_t *page_ids, uint32_t n_pages,
                                       const tdm_frame_sampling_t *sampling, uint64_t *ret_room)
{
    tdm_status_t st;
    const uint32_t all = (n_prompt + x->page_size - 1) / x->page_size;
    if (x->cfg.role != TDM_XFER_DECODE || !prompt_ids || !page_ids || !ret_room || n_prompt == 0 ||
        n_prompt > TDM_FRAME_MAX_IDS || n_pages == 0 || n_pages > all)
        return TDM_ERR_INVAL;
    for (uint32_t i = 0; i < n_pages; i++)
        if (page_ids[i] >= x->cfg.kv[0]->num_pages)
            return TDM_ERR_RANGE;
    size_t cap = 512 + ((size_t)n_prompt + n_pages) * 4, len;
    tdm_xfer_cork_due(x, 0);
    uint8_t *buf = tdm_malloc(cap);
    pthread_mutex_lock(&x->mu);
    if (!x->ready) {
        st = TDM_ERR_PEER;
        goto out;
    }
    if (x->n_aux_free == 0 || tdm_xfer_rooms_movers(x->rooms) >= 2 * x->cfg.max_rooms) {
        st = TDM_ERR_AGAIN;
        goto out;
    }
    uint64_t room = tdm_xfer_room_id_new(x->rooms);
    TDM_CHECK_GOTO(tdm_xfer_room_open(x->rooms, room, tdm_xfer_now()), st, out);
    tdm_frame_transfer_info_t f;
    memset(&f, 0, sizeof(f));
    f.room = room;
    f.instance_id = x->cfg.instance_id;
    f.aux_slot = x->aux_free[x->n_aux_free - 1];
    f.n_prompt = n_prompt;
    f.n_pages = n_pages;
    if (sampling)
        f.sampling = *sampling;
    /* a stale slot from an earlier room must not pass the room-id check; cleared before the frame
     * is queued, since prefill may write the slot as soon as the frame reaches it */
    memset(x->aux[0] + (size_t)f.aux_slot * TDM_XFER_AUX_BYTES, 0, TDM_XFER_AUX_BYTES);
    st = tdm_frame_encode_transfer_info(&f, prompt_ids, page_ids, buf, cap, &len);
    if (st == TDM_OK)
        st = tdm_xfer_out(x, buf, len);
    if (st != TDM_OK) {
        tdm_xfer_room_abort(x->rooms, room, "send failed", tdm_xfer_now());
        goto out;
    }
    x->n_aux_free--;
    xroom_t *r = tdm_calloc(1, sizeof(*r));
    r->room = room;
    r->n_pages = n_pages;
    r->n_prompt = n_prompt;
    r->aux_slot = f.aux_slot;
    r->pages = tdm_calloc(n_pages, sizeof(uint32_t));
    memcpy(r->pages, page_ids, (size_t)n_pages * sizeof(uint32_t));
    r->info_sent = 1;
    tdm_xfer_map_put(x, r);
    tdm_xfer_count_skip(x, n_pages, all - n_pages);
    tdm_xfer_room_set_all(x, room, TDM_KVPOLL_WAITING_FOR_INPUT, "transfer info sent");
    *ret_room = room;
out:
    pthread_mutex_unlock(&x->mu);
    free(buf);
    return st;
}

static void on_status(tdm_xfer_t *x, const uint8_t *body, uint32_t len)
{
    tdm_frame_status_t f;
    char why[160];
    if (tdm_frame_decode_status(body, len, &f, why, sizeof(why)) != TDM_OK) {
        x->st.frames_malformed++;
        tdm_warn(TDM_SUB_XFER, "dropped malformed STATUS: %s", why);
        return;
    }
    xroom_t *r = tdm_xfer_map_get(x, f.room);
    if (!r) {
        x->st.frames_unexpected++;
        return;
    }
    switch (f.state) {
    case TDM_KVPOLL_TRANSFERRING:
        tdm_xfer_room_set_all(x, f.room, TDM_KVPOLL_TRANSFERRING, "prefill transferring");
        break;
    case TDM_KVPOLL_SUCCESS:
        if (r->final_rx)
            break;
        r->final_rx = 1; /* prefill flushed before it sent this */
        if (f.n_checksums &&
            (f.chunk_tokens != x->page_size || f.n_checksums != x->n_ranks * r->n_pages)) {
            x->st.frames_malformed++;
            tdm_xfer_room_set_all(x, f.room, TDM_KVPOLL_FAILED,
                                  "STATUS checksums do not match room");
            break;
        }
        if (f.n_seg_sums && f.n_seg_sums != tdm_xfer_seg_total(x)) {
            /* the trailer must cover every rank's (layer, sub-buffer) of this pool */
            x->st.frames_malformed++;
            snprintf(why, sizeof(why),
                     "STATUS seg_sums: count %u != %u (ranks x layers x sub-buffers)", f.n_seg_sums,
                     tdm_xfer_seg_total(x));
            tdm_warn(TDM_SUB_XFER, "room %016llx: %s", (unsigned long long)f.room, why);
            tdm_xfer_room_set_all(x, f.room, TDM_KVPOLL_FAILED, why);
            break;
        }
        r->n_sums = f.n_checksums;
        if (f.n_checksums) {
            r->sums = tdm_calloc(f.n_checksums, sizeof(uint64_t));
            for (uint32_t i = 0; i < f.n_checksums; i++)
                r->sums[i] = tdm_frame_u64_at(f.checksums, i);
        }
        r->n_seg_sums = f.n_seg_sums; /* 0: a prefill without the trailer (rank and page only) */
        if (f.n_seg_sums) {
            r->seg_sums = tdm_calloc(f.n_seg_sums, sizeof(uint64_t));
            for (uint32_t i = 0; i < f.n_seg_sums; i++)
                r->seg_sums[i] = tdm_frame_u64_at(f.seg_sums, i);
        }
        tdm_xfer_room_set_all(x, f.room, TDM_KVPOLL_SUCCESS, "prefill flushed");
        break;
    case TDM_KVPOLL_FAILED:
        r->final_rx = 1;
        snprintf(why, sizeof(why), "prefill: %.*s", (int)f.message.len,
                 (const char *)f.message.data);
        tdm_xfer_room_set_all(x, f.room, TDM_KVPOLL_FAILED, why);
        break;
    default:
        x->st.frames_unexpected++;
        break;
    }
}

static void unquarantine(tdm_xfer_t *x, xroom_t *r)
{
    if (r->quarantined) {
        r->quarantined = 0;
        x->st.quarantined--;
    }
}

static void on_abort_ack(tdm_xfer_t *x, const uint8_t *body, uint32_t len)
{
    tdm_frame_abort_ack_t f;
    if (tdm_frame_decode_abort_ack(body, len, &f, NULL, 0) != TDM_OK) {
        x->st.frames_malformed++;
        return;
    }
    x->st.aborts_acked++;
    xroom_t *r = tdm_xfer_map_get(x, f.room);
    if (!r)
        return; /* an ABORT for a room this side never had */
    if (!f.flushed) {
        x->st.frames_unexpected++;
        return;
    }
    unquarantine(x, r);
    r->final_rx = 1;
    tdm_xfer_emit(x, "abort_acked", f.room, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED,
                  f.known ? "flushed" : "unknown to prefill");
}

void tdm_xfer_decode_frame(tdm_xfer_t *x, const tdm_frame_hdr_t *h, const uint8_t *body)
{
    switch (h->type) {
    case TDM_FRAME_STATUS:
        on_status(x, body, h->length);
        break;
    case TDM_FRAME_ABORT_ACK:
        on_abort_ack(x, body, h->length);
        break;
    default:
        x->st.frames_unexpected++;
        break;
    }
}

static void send_abort(tdm_xfer_t *x, uint64_t room, const char *reason)
{
    tdm_frame_abort_t f = {room, 0, {(const uint8_t *)reason, (uint32_t)strnlen(reason, 256)}};
    uint8_t buf[512];
    size_t len;
    if (tdm_frame_encode_abort(&f, buf, sizeof(buf), &len) == TDM_OK &&
        tdm_xfer_out(x, buf, len) == TDM_OK) {
        x->st.aborts_sent++;
        /* with abort_acked, what ABORT_UNACKED is computed from (docs/alerts.md) */
        tdm_xfer_emit(x, "abort_sent", room, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED, reason);
    }
}

/* The room became FAILED: if prefill may still write into its pages, hold them and ask. */
void tdm_xfer_decode_room_failed(tdm_xfer_t *x, uint64_t room)
{
    xroom_t *r = tdm_xfer_map_get(x, room);
    if (!r || !r->info_sent || r->final_rx || r->quarantined)
        return;
    r->quarantined = 1;
    r->q_since_us = tdm_xfer_now();
    x->st.quarantined++;
    send_abort(x, room, "decode abort");
}

/* A registration was accepted (again): ask once more for every room still quarantined. A prefill
 * that never had the room — a new incarnation, whose predecessor's processes and mappings are
 * gone — answers ABORT_ACK at once ("unknown to prefill") and the pages go back; one that still
 * has the room answers after its flush, as the first time (I5). Without this, rooms whose ACK
 * was lost stayed quarantined for the life of the decode group even after the operator's
 * remedy, a restart of the prefill group (docs/alerts.md ABORT_UNACKED). */
void tdm_xfer_decode_registered(tdm_xfer_t *x)
{
    void *v;
    for (uint32_t i = 0; tdm_xfer_rooms_next_mover(x->rooms, &i, &v);) {
        xroom_t *r = v;
        if (r && r->quarantined)
            send_abort(x, r->room, "decode abort (asked again after re-registration)");
    }
}

/* The channel is lost (caller holds mu). Besides failing the rooms, decode replaces its UCX
 * workers before it registers again: the lost peer's connections to the old ones are closed,
 * so put data of endpoints the peer closed by force, still queued in its kernel while the link
 * is down, is refused when the link returns instead of landing in pages a later room took
 * (docs/design.md §8; found by tests/chaos/chaos.py scenario 8: a checksum mismatch at the link's
 * return, and UCX aborting in its put handler on a connection its keepalive had failed). The
 * new workers' addresses go into the next REGISTER; memory registrations and rkeys stay. */
void tdm_xfer_decode_peer_lost(tdm_xfer_t *x, xfer_lost_t *lost)
{
    void *v;
    if (!x->renew_pending) {
        x->renew_pending = 1;
        tdm_xfer_cmd_push(x, XCMD_RENEW, 0);
    }
    for (uint32_t i = 0; tdm_xfer_rooms_next_mover(x->rooms, &i, &v);) {
        xroom_t *r = v;
        tdm_xfer_room_info_t info;
        if (r && tdm_xfer_room_get(x->rooms, r->room, &info) == TDM_OK && !info.tombstone &&
            info.state != TDM_KVPOLL_SUCCESS && info.state != TDM_KVPOLL_FAILED) {
            tdm_xfer_lost_add(lost, r->room);
            tdm_xfer_room_set_all(x, r->room, TDM_KVPOLL_FAILED, "peer lost");
        }
    }
}

void tdm_xfer_decode_tick(tdm_xfer_t *x, uint64_t now)
{
    void *v;
    for (uint32_t i = 0; tdm_xfer_rooms_next_mover(x->rooms, &i, &v);) {
        xroom_t *r = v;
        if (!r || !r->quarantined || r->risk_counted ||
            now - r->q_since_us < x->cfg.abort_ack_timeout_us)
            continue;
        r->risk_counted = 1;
        x->st.corruption_risk++;
        tdm_warn(TDM_SUB_XFER, "room %016llx: no ABORT_ACK after %llu ms, pages stay quarantined",
                 (unsigned long long)r->room,
                 (unsigned long long)(x->cfg.abort_ack_timeout_us / 1000));
        tdm_xfer_emit(x, "abort_unacked", r->room, TDM_KVPOLL_FAILED, TDM_KVPOLL_FAILED,
                      "ABORT_ACK timeout");
    }
}

/* Decode's own page sums and segment sums of the room against prefill's: 0 when they agree;
 * else 1 with the evidence in why and *m (docs/contracts.md §d "Segment sums"): the first
 * mismatching page (rank-major) names rank, page and chunk; the first mismatching segment sum
 * (rank-major, layer-major, sub-buffer order) names the layer and sub-buffer; then how many of
 * each differ. */
static int verify_sums(tdm_xfer_t *x, const xroom_t *r, char *why, size_t why_len,
                       tdm_xfer_mismatch_t *m)
{
    const int have_seg = r->seg_sums && r->n_seg_sums == tdm_xfer_seg_total(x);
    uint32_t per_max = 1, seg_off = 0;
    for (uint32_t rank = 0; rank < x->n_ranks; rank++)
        if (tdm_xfer_seg_count(x, rank) > per_max)
            per_max = tdm_xfer_seg_count(x, rank);
    memset(m, 0, sizeof(*m));
    m->pages_total = x->n_ranks * r->n_pages;
    m->segs_total = have_seg ? r->n_seg_sums : 0;
    uint64_t *mine = tdm_calloc(r->n_pages ? r->n_pages : 1, sizeof(uint64_t));
    uint64_t *seg = tdm_calloc(per_max, sizeof(uint64_t));
    for (uint32_t rank = 0; rank < x->n_ranks; rank++) {
        const uint32_t per = tdm_xfer_seg_count(x, rank);
        const uint32_t n_sub = x->cfg.kv[rank]->layout->n_sub;
        if (tdm_xfer_kv_sums(x, rank, r->pages, r->n_pages, mine, have_seg ? seg : NULL) !=
            TDM_OK) {
            snprintf(why, why_len, "checksums of rank %u not computed", rank);
            free(mine);
            free(seg);
            return 1;
        }
        for (uint32_t i = 0; i < r->n_pages; i++)
            if (mine[i] != r->sums[(size_t)rank * r->n_pages + i] && m->pages_differ++ == 0) {
                m->has_page = 1;
                m->rank = rank;
                m->page = r->pages[i];
                m->chunk = i;
            }
        for (uint32_t k = 0; have_seg && k < per; k++)
            if (seg[k] != r->seg_sums[seg_off + k] && m->segs_differ++ == 0) {
                m->has_segment = 1;
                m->seg_rank = rank;
                m->layer = k / n_sub;
                m->sub = k % n_sub;
            }
        seg_off += per;
    }
    free(mine);
    free(seg);
    if (!m->pages_differ && !m->segs_differ)
        return 0;
    int n;
    if (m->has_page)
        n = snprintf(why, why_len, "checksum mismatch: rank %u page %u (chunk %u)", m->rank,
                     m->page, m->chunk);
    else
        n = snprintf(why, why_len, "checksum mismatch: page sums agree");
    if (n < 0 || (size_t)n >= why_len)
        return 1;
    const char *sub = tdm_kv_sub_name((tdm_kv_sub_t)m->sub);
    if (m->has_segment && (!m->has_page || m->seg_rank == m->rank))
        snprintf(why + n, why_len - (size_t)n,
                 " layer %u sub-buffer %s; %u of %u page(s), %u of %u segment(s) differ", m->layer,
                 sub, m->pages_differ, m->pages_total, m->segs_differ, m->segs_total);
    else if (m->has_segment)
        snprintf(why + n, why_len - (size_t)n,
                 ", rank %u layer %u sub-buffer %s; %u of %u page(s), %u of %u segment(s) differ",
                 m->seg_rank, m->layer, sub, m->pages_differ, m->pages_total, m->segs_differ,
                 m->segs_total);
    else
        snprintf(why + n, why_len - (size_t)n, "%s; %u of %u page(s) differ",
                 have_seg ? ", segment sums agree"
                          : ", layer and sub-buffer unknown (no segment sums in STATUS)",
                 m->pages_differ, m->pages_total);
    return 1;
}

tdm_status_t tdm_xfer_decode_commit(tdm_xfer_t *x, uint64_t room, tdm_xfer_aux_t *ret_aux)
{
    tdm_xfer_room_info_t info;
    tdm_xfer_aux_t aux;
    char why[256] = "";
    if (x->cfg.role != TDM_XFER_DECODE || !ret_aux)
        return TDM_ERR_INVAL;
    pthread_mutex_lock(&x->mu);
    xroom_t *r = tdm_xfer_map_get(x, room);
    if (!r) {
        pthread_mutex_unlock(&x->mu);
        return TDM_ERR_NOTFOUND;
    }
    if (tdm_xfer_room_get(x->rooms, room, &info) != TDM_OK || info.tombstone ||
        info.state != TDM_KVPOLL_SUCCESS || r->committed) {
        pthread_mutex_unlock(&x->mu);
        return TDM_ERR_STATE;
    }
    r->committed = 1; /* one verification per room; the room's arrays are ours from here */
    pthread_mutex_unlock(&x->mu);

    uint32_t n_flip;
    if (tdm_xfer_fault_fires(x, TDM_XFER_FAULT_FLIP_KV_BITS, &n_flip))
        tdm_xfer_flip_kv_bits(x, r, n_flip ? n_flip : 1);

    int bad_sum = 0, bad_aux = 0, has_mm = 0;
    tdm_xfer_mismatch_t mm;
    uint64_t t0 = tdm_time_mono_ns();
    if (!x->cfg.disable_checksums) {
        if (r->n_sums != x->n_ranks * r->n_pages) {
            bad_sum = 1;
            snprintf(why, sizeof(why), "no checksums in STATUS");
        } else {
            bad_sum = verify_sums(x, r, why, sizeof(why), &mm);
            has_mm = mm.pages_differ || mm.segs_differ;
        }
    }
    if (!x->cfg.disable_checksums) {
        uint64_t dt = tdm_time_mono_ns() - t0;
        pthread_mutex_lock(&x->mu);
        x->st.checksum_ns += dt;
        x->st.checksum_bytes += tdm_xfer_room_sum_bytes(x, r->n_pages);
        pthread_mutex_unlock(&x->mu);
    }
    if (!bad_sum && (tdm_xfer_aux_decode(x->aux[0] + (size_t)r->aux_slot * TDM_XFER_AUX_BYTES,
                                         &aux) != TDM_OK ||
                     aux.room != room)) {
        bad_aux = 1;
        snprintf(why, sizeof(why), "aux slot %u does not hold this room", r->aux_slot);
    }
    if (!bad_sum && !bad_aux) {
        *ret_aux = aux;
        return TDM_OK;
    }
    pthread_mutex_lock(&x->mu);
    if (bad_sum)
        x->st.checksum_mismatch++;
    else
        x->st.aux_mismatch++;
    tdm_warn(TDM_SUB_XFER, "room %016llx corrupt: %s", (unsigned long long)room, why);
    /* the detector's vocabulary (docs/alerts.md): CORRUPTION opens on either */
    tdm_xfer_emit_mismatch(x, bad_sum ? "checksum_mismatch" : "aux_room_mismatch", room,
                           TDM_KVPOLL_SUCCESS, TDM_KVPOLL_FAILED, why, has_mm ? &mm : NULL);
    tdm_xfer_room_set_all(x, room, TDM_KVPOLL_FAILED, why);
    pthread_mutex_unlock(&x->mu);
    return TDM_ERR_CORRUPT;
}

tdm_status_t tdm_xfer_decode_abort(tdm_xfer_t *x, uint64_t room, const char *reason)
{
    xroom_t *r = tdm_xfer_map_get(x, room);
    tdm_xfer_room_abort(x->rooms, room, reason ? reason : "abort", tdm_xfer_now());
    if (!r)
        send_abort(x, room, reason ? reason : "abort"); /* unknown here: prefill tombstones it */
    else
        tdm_xfer_decode_room_failed(x, room); /* no-op unless prefill may still write */
    return TDM_OK;
}

tdm_status_t tdm_xfer_decode_release(tdm_xfer_t *x, uint64_t room)
{
    xroom_t *r = tdm_xfer_map_get(x, room);
    tdm_xfer_room_info_t info;
    if (!r)
        return TDM_ERR_NOTFOUND;
    if (tdm_xfer_room_get(x->rooms, room, &info) == TDM_OK && !info.tombstone &&
        info.state != TDM_KVPOLL_SUCCESS && info.state != TDM_KVPOLL_FAILED)
        return TDM_ERR_STATE;
    if (r->quarantined)
        return TDM_ERR_BUSY;
    x->aux_free[x->n_aux_free++] = r->aux_slot;
    tdm_xfer_map_del(x, room);
    tdm_xroom_free(r);
    tdm_xfer_room_close(x->rooms, room, tdm_xfer_now());
    return TDM_OK;
}

/* flip_kv_bits (docs/contracts.md §e): after the room's write completed and before commit verifies
 * it, flip the top exponent bit of `n` random K or V elements among the room's prompt tokens
 * (those of its pages: the prompt's last ones) of every rank's pages — bytes the next decode step
 * reads, so with checksums off the output changes.
 * The bit is bit 6 of an element's last byte in every KV dtype we hold (little-endian f32 bit
 * 30, bf16/f16 bit 14, fp8 e4m3 bit 6): a value below 2 in magnitude becomes ~2^64..2^128
 * times larger (f32/bf16). */
void tdm_xfer_flip_kv_bits(tdm_xfer_t *x, const xroom_t *r, uint32_t n)
{
    if (!x->flip_rng)
        x->flip_rng = tdm_xfer_now() * 0x9e3779b97f4a7c15ull | 1;
    /* the room's pages are the prompt's last n_pages: tokens [tok0, n_prompt) */
    const uint32_t held = (r->n_prompt + x->page_size - 1) / x->page_size - r->n_pages;
    const uint32_t tok0 = held * x->page_size;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t v = x->flip_rng;
        v ^= v << 13;
        v ^= v >> 7;
        v ^= v << 17;
        x->flip_rng = v;
        uint32_t rank = (uint32_t)(v % x->n_ranks);
        const tdm_kv_buffers_t *kv = x->cfg.kv[rank];
        const tdm_kv_layout_t *l = kv->layout;
        size_t esz = tdm_dtype_size(l->sub[TDM_KV_SUB_K].dtype);
        uint32_t tok = tok0 + (uint32_t)((v >> 8) % (r->n_prompt - tok0));
        uint32_t layer = (uint32_t)((v >> 24) % l->num_layers);
        tdm_kv_sub_t sub = (v >> 40) & 1 ? TDM_KV_SUB_V : TDM_KV_SUB_K;
        uint32_t n_elem = l->sub[sub].bytes_per_token / (uint32_t)(esz ? esz : 1);
        uint32_t elem = (uint32_t)((v >> 41) % (n_elem ? n_elem : 1));
        const uint32_t chunk = tok / x->page_size - held;
        uint8_t *p = tdm_kv_slot(kv, layer, sub, r->pages[chunk], tok % x->page_size);
        tdm_xfer_kv_flip_byte(x, p + (size_t)elem * esz + esz - 1, 0x40); /* host or device */
        /* the injected truth, for the checks of the evidence (tests/chaos/chaos.py, 3d) */
        tdm_warn(TDM_SUB_XFER,
                 "msg=\"fault flip_kv_bits: value flipped\" room=%016llx rank=%u page=%u "
                 "chunk=%u layer=%u sub=%s token=%u element=%u",
                 (unsigned long long)r->room, rank, r->pages[chunk], chunk, layer,
                 tdm_kv_sub_name(sub), tok, elem);
    }
    tdm_warn(TDM_SUB_XFER, "msg=\"fault flip_kv_bits: room done\" room=%016llx values=%u",
             (unsigned long long)r->room, n);
}
