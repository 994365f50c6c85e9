/*
 * prefill.c — the prefill leader's side: REGISTER validation (every mismatch named), accepting
 * TRANSFER_INFO into the scheduler's queue (tombstoned rooms refused, I4), sending a room's KV
 * (STATUS TRANSFERRING, puts + flush on the transfer thread, then STATUS SUCCESS with the chunk
 * checksums) and answering ABORT only once every rank's writes for the room are flushed (I5).
 * Everything here runs with the engine's `mu` held unless noted.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "dataplane/xfer/xfer_int.h"

static const char *mem_kind_name(uint16_t k)
{
    return k == TDM_XFER_MEM_HOST ? "host" : k == TDM_XFER_MEM_CUDA_IPC ? "cuda_ipc" : "unknown";
}

int tdm_xfer_prefill_check_register(tdm_xfer_t *x, const tdm_frame_register_t *f, char *why,
                                    size_t why_len)
{
    char w[192];
    uint64_t expect;
    if (f->tp_size != x->n_ranks) {
        snprintf(why, why_len, "tp_size %u != %u (prefill)", f->tp_size, x->n_ranks);
        return 1;
    }
    if (f->n_ranks != f->tp_size) {
        snprintf(why, why_len, "n_ranks %u != tp_size %u", f->n_ranks, f->tp_size);
        return 1;
    }
    if (f->page_size != x->page_size) {
        snprintf(why, why_len, "page_size %u != %u (prefill)", f->page_size, x->page_size);
        return 1;
    }
    if (!tdm_layout_equal(&f->layout, &x->layout, w, sizeof(w))) {
        snprintf(why, why_len, "layout: %s (decode != prefill)", w);
        return 1;
    }
    if (f->layout.num_pages == 0) {
        snprintf(why, why_len, "layout: num_pages 0");
        return 1;
    }
    if (tdm_kv_layout_pool_bytes(x->cfg.kv[0]->layout, f->layout.num_pages, &expect) != TDM_OK) {
        snprintf(why, why_len, "layout: num_pages %u overflows", f->layout.num_pages);
        return 1;
    }
    for (uint32_t i = 0; i < f->n_ranks; i++) {
        const tdm_frame_rank_t *r = &f->ranks[i];
        uint32_t kv_len = r->rkey.len >= 4 ? tdm_frame_u32_at(r->rkey.data, 0) : 0;
        if (r->rank != i) {
            snprintf(why, why_len, "rank %u: rank %u (ranks must be listed in order)", i, r->rank);
            return 1;
        }
        const uint16_t own = x->cuda ? TDM_XFER_MEM_CUDA_IPC : TDM_XFER_MEM_HOST;
        if (r->mem_kind != own) {
            snprintf(why, why_len, "rank %u: mem_kind %s != %s (prefill's KV is %s)", i,
                     mem_kind_name(r->mem_kind), mem_kind_name(own),
                     own == TDM_XFER_MEM_HOST ? "in host memory" : "on the GPU");
            return 1;
        }
        if (r->worker_addr.len == 0) {
            snprintf(why, why_len, "rank %u: worker_addr empty", i);
            return 1;
        }
        if (r->rkey.len < 4 || kv_len == 0 || (uint64_t)kv_len + 4 >= r->rkey.len) {
            snprintf(why, why_len, "rank %u: rkey blob malformed", i);
            return 1;
        }
        if (x->cuda && tdm_xfer_cuda_record_check(r->rkey.data + 4, kv_len, expect, w, sizeof(w))) {
            snprintf(why, why_len, "rank %u: %s", i, w);
            return 1;
        }
        if (r->pool_bytes != expect) {
            snprintf(why, why_len, "rank %u: pool_bytes %llu != %llu for %u pages", i,
                     (unsigned long long)r->pool_bytes, (unsigned long long)expect,
                     f->layout.num_pages);
            return 1;
        }
        if (r->aux_bytes < TDM_XFER_AUX_BYTES || r->aux_bytes % TDM_XFER_AUX_BYTES) {
            snprintf(why, why_len, "rank %u: aux_bytes %llu not a multiple of %u", i,
                     (unsigned long long)r->aux_bytes, TDM_XFER_AUX_BYTES);
            return 1;
        }
    }
    return 0;
}

static void refuse_room(tdm_xfer_t *x, uint64_t room, const char *why)
{
    tdm_warn(TDM_SUB_XFER, "room %016llx refused: %s", (unsigned long long)room, why);
    tdm_xfer_out_status(x, room, TDM_KVPOLL_FAILED, why, NULL, 0, 0);
}

static void on_transfer_info(tdm_xfer_t *x, const uint8_t *body, uint32_t len)
{
    tdm_frame_transfer_info_t f;
    char why[160];
    uint64_t now = tdm_xfer_now();
    if (tdm_frame_decode_transfer_info(body, len, &f, why, sizeof(why)) != TDM_OK) {
        x->st.frames_malformed++;
        tdm_warn(TDM_SUB_XFER, "dropped malformed TRANSFER_INFO: %s", why);
        return;
    }
    if (f.room == 0 || f.room > 0x7fffffffffffffffull) {
        x->st.frames_malformed++;
        return;
    }
    const uint32_t r_pages = x->reg->layout.num_pages;
    const uint64_t aux_slots = x->reg->ranks[0].aux_bytes / TDM_XFER_AUX_BYTES;
    /* the prompt's last n_pages pages: decode holds the ones before (docs/contracts.md §d) */
    const uint32_t all = (f.n_prompt + x->page_size - 1) / x->page_size;
    if (f.n_prompt == 0 || f.n_pages == 0 || f.n_pages > all) {
        snprintf(why, sizeof(why), "n_pages %u is not 1..%u for n_prompt %u at page_size %u",
                 f.n_pages, all, f.n_prompt, x->page_size);
        goto err_refuse;
    }
    for (uint32_t i = 0; i < f.n_pages; i++)
        if (tdm_frame_u32_at(f.page_ids, i) >= r_pages) {
            snprintf(why, sizeof(why), "page_ids[%u] %u >= num_pages %u", i,
                     tdm_frame_u32_at(f.page_ids, i), r_pages);
            goto err_refuse;
        }
    if (f.aux_slot >= aux_slots) {
        snprintf(why, sizeof(why), "aux_slot %u >= %llu", f.aux_slot,
                 (unsigned long long)aux_slots);
        goto err_refuse;
    }
    if (tdm_xfer_map_get(x, f.room)) {
        x->st.frames_unexpected++; /* a repeated TRANSFER_INFO */
        return;
    }
    if (x->reqq_len == x->reqq_cap || tdm_xfer_rooms_movers(x->rooms) >= 2 * x->cfg.max_rooms) {
        snprintf(why, sizeof(why), "busy: %u rooms queued", x->reqq_len);
        goto err_refuse;
    }
    tdm_status_t st = tdm_xfer_room_accept_info(x->rooms, f.room, now);
    if (st == TDM_ERR_STATE) {
        x->st.refused_late++;
        refuse_room(x, f.room, "late TRANSFER_INFO: room aborted or already known");
        return;
    }
    if (st != TDM_OK) {
        snprintf(why, sizeof(why), "busy: room table full");
        goto err_refuse;
    }
    xroom_t *r = tdm_calloc(1, sizeof(*r));
    r->room = f.room;
    r->n_pages = f.n_pages;
    r->n_prompt = f.n_prompt;
    r->aux_slot = f.aux_slot;
    r->sampling = f.sampling;
    r->pages = tdm_calloc(f.n_pages, sizeof(uint32_t));
    r->prompt = tdm_calloc(f.n_prompt, sizeof(uint32_t));
    for (uint32_t i = 0; i < f.n_pages; i++)
        r->pages[i] = tdm_frame_u32_at(f.page_ids, i);
    for (uint32_t i = 0; i < f.n_prompt; i++)
        r->prompt[i] = tdm_frame_u32_at(f.prompt_ids, i);
    r->queued = 1;
    tdm_xfer_map_put(x, r);
    tdm_xfer_count_skip(x, f.n_pages, all - f.n_pages);
    x->reqq[(x->reqq_head + x->reqq_len) % x->reqq_cap] = f.room;
    x->reqq_len++;
    tdm_xfer_room_set_all(x, f.room, TDM_KVPOLL_WAITING_FOR_INPUT, "transfer info");
    return;

err_refuse:
    tdm_xfer_room_abort(x->rooms, f.room, why, now);
    refuse_room(x, f.room, why);
}

static void on_abort(tdm_xfer_t *x, const uint8_t *body, uint32_t len)
{
    tdm_frame_abort_t f;
    char why[128];
    if (tdm_frame_decode_abort(body, len, &f, why, sizeof(why)) != TDM_OK) {
        x->st.frames_malformed++;
        tdm_warn(TDM_SUB_XFER, "dropped malformed ABORT: %s", why);
        return;
    }
    x->st.aborts_received++;
    if (tdm_xfer_fault_fires(x, TDM_XFER_FAULT_DROP_ABORT, NULL)) {
        tdm_warn(TDM_SUB_XFER, "fault drop_abort_handler: ABORT for room %016llx dropped (no ACK)",
                 (unsigned long long)f.room);
        return;
    }
    int known = tdm_xfer_room_abort(x->rooms, f.room, "abort from decode", tdm_xfer_now());
    xroom_t *r = tdm_xfer_map_get(x, f.room);
    if (r && (r->phase == XR_PUTTING || r->phase == XR_FLUSHING)) {
        r->abort_req = 1; /* the transfer thread ACKs once the flush completed */
        return;
    }
    /* Nothing of this room is in flight: no put was issued, or all were flushed already. */
    tdm_xfer_out_abort_ack(x, f.room, known || r);
    x->st.aborts_acked++;
}

void tdm_xfer_prefill_frame(tdm_xfer_t *x, const tdm_frame_hdr_t *h, const uint8_t *body)
{
    switch (h->type) {
    case TDM_FRAME_TRANSFER_INFO:
        on_transfer_info(x, body, h->length);
        break;
    case TDM_FRAME_ABORT:
        on_abort(x, body, h->length);
        break;
    default:
        x->st.frames_unexpected++;
        break;
    }
}

/* Every room decode sent TRANSFER_INFO for on the lost channel (a mover attached): failed now,
 * also one whose writes are in flight (the transfer thread finalizes it as failed later). */
void tdm_xfer_prefill_peer_lost(tdm_xfer_t *x, xfer_lost_t *lost)
{
    void *v;
    for (uint32_t i = 0; tdm_xfer_rooms_next_mover(x->rooms, &i, &v);) {
        xroom_t *r = v;
        tdm_xfer_room_info_t info;
        if (!r)
            continue;
        if (r->phase == XR_PUTTING || r->phase == XR_FLUSHING)
            r->fail_req = 1;
        if (tdm_xfer_room_get(x->rooms, r->room, &info) == TDM_OK && !info.tombstone &&
            info.state != TDM_KVPOLL_SUCCESS) {
            if (info.state != TDM_KVPOLL_FAILED)
                tdm_xfer_lost_add(lost, r->room);
            tdm_xfer_room_set_all(x, r->room, TDM_KVPOLL_FAILED, "peer lost");
        }
    }
    tdm_xfer_cmd_push(x, XCMD_DISCONNECT, 0);
}

void tdm_xfer_prefill_finalize(tdm_xfer_t *x, xroom_t *r)
{
    r->phase = XR_DONE;
    if (r->abort_req) {
        tdm_xfer_out_abort_ack(x, r->room, 1);
        x->st.aborts_acked++;
        return;
    }
    if (r->fail_req || r->put_error) {
        tdm_xfer_out_status(x, r->room, TDM_KVPOLL_FAILED,
                            r->put_error ? "transfer failed: UCX error" : "transfer failed", NULL,
                            0, 0);
        tdm_xfer_room_set_all(x, r->room, TDM_KVPOLL_FAILED, "transfer failed");
        return;
    }
    tdm_xfer_out_status_sums(x, r->room, r->sums, r->sums ? r->n_sums : 0, r->seg_sums,
                             r->seg_sums ? r->n_seg_sums : 0, x->page_size);
    tdm_xfer_room_info_t info;
    if (tdm_xfer_room_get(x->rooms, r->room, &info) == TDM_OK) {
        static const uint64_t bounds[TDM_XFER_LAT_NB] = TDM_XFER_LAT_BOUNDS_US;
        uint64_t now = tdm_xfer_now(), us = now > info.created_us ? now - info.created_us : 0;
        size_t b = 0;
        while (b < TDM_XFER_LAT_NB && us > bounds[b])
            b++;
        x->st.room_lat[b]++;
        x->st.room_lat_sum_us += us;
    }
    tdm_xfer_room_set_all(x, r->room, TDM_KVPOLL_SUCCESS, "flushed");
    x->st.rooms_ok++;
}

static int room_dead(tdm_xfer_t *x, uint64_t room)
{
    tdm_xfer_room_info_t info;
    return tdm_xfer_room_get(x->rooms, room, &info) != TDM_OK || info.tombstone ||
           info.state == TDM_KVPOLL_FAILED;
}

tdm_status_t tdm_xfer_prefill_next(tdm_xfer_t *x, tdm_xfer_request_t *ret)
{
    tdm_status_t st = TDM_ERR_AGAIN;
    if (x->cfg.role != TDM_XFER_PREFILL)
        return TDM_ERR_STATE;
    pthread_mutex_lock(&x->mu);
    while (x->reqq_len) {
        uint64_t room = x->reqq[x->reqq_head];
        x->reqq_head = (x->reqq_head + 1) % x->reqq_cap;
        x->reqq_len--;
        xroom_t *r = tdm_xfer_map_get(x, room);
        if (!r || !r->queued)
            continue;
        r->queued = 0;
        if (room_dead(x, room)) { /* aborted while queued: nobody else holds it */
            tdm_xfer_map_del(x, room);
            tdm_xroom_free(r);
            continue;
        }
        ret->room = room;
        ret->n_prompt = r->n_prompt;
        ret->prompt_ids = r->prompt;
        r->prompt = NULL;
        ret->n_pages = r->n_pages;
        ret->page_ids = tdm_calloc(r->n_pages, sizeof(uint32_t));
        memcpy(ret->page_ids, r->pages, (size_t)r->n_pages * sizeof(uint32_t));
        ret->sampling = r->sampling;
        st = TDM_OK;
        break;
    }
    pthread_mutex_unlock(&x->mu);
    return st;
}

void tdm_xfer_request_clear(tdm_xfer_request_t *r)
{
    if (!r)
        return;
    free(r->prompt_ids);
    free(r->page_ids);
    memset(r, 0, sizeof(*r));
}

tdm_status_t tdm_xfer_prefill_send(tdm_xfer_t *x, uint64_t room, const uint32_t *src_pages,
                                   uint32_t n_pages, const tdm_xfer_aux_t *aux)
{
    tdm_status_t st = TDM_OK;
    if (x->cfg.role != TDM_XFER_PREFILL || !src_pages || !aux)
        return TDM_ERR_INVAL;
    for (uint32_t i = 0; i < n_pages; i++)
        if (src_pages[i] >= x->cfg.kv[0]->num_pages)
            return TDM_ERR_RANGE;
    tdm_xfer_cork_due(x, n_pages);
    pthread_mutex_lock(&x->mu);
    xroom_t *r = tdm_xfer_map_get(x, room);
    if (!r) {
        st = TDM_ERR_NOTFOUND;
        goto out;
    }
    if (room_dead(x, room)) {
        st = TDM_ERR_ABORTED;
        goto out;
    }
    if (r->phase != XR_NEW || r->queued) {
        st = TDM_ERR_STATE;
        goto out;
    }
    if (n_pages != r->n_pages) {
        st = TDM_ERR_INVAL;
        goto out;
    }
    r->src_pages = tdm_calloc(n_pages, sizeof(uint32_t));
    memcpy(r->src_pages, src_pages, (size_t)n_pages * sizeof(uint32_t));
    tdm_xfer_aux_t a = *aux;
    a.room = room;
    tdm_xfer_aux_encode(&a, r->aux_wire);
    if (!x->cfg.disable_checksums) {
        r->n_sums = x->n_ranks * n_pages;
        r->sums = tdm_calloc(r->n_sums, sizeof(uint64_t));
        r->n_seg_sums = tdm_xfer_seg_total(x);
        r->seg_sums = tdm_calloc(r->n_seg_sums, sizeof(uint64_t));
    }
    r->phase = XR_PUTTING;
    tdm_xfer_room_set_all(x, room, TDM_KVPOLL_TRANSFERRING, "send");
    /* No wake of the receive thread for this frame, whose send would compete with the copy for
     * the cores: it leaves with the room's STATUS SUCCESS (copied here, below) or with the
     * transfer thread's next send (before a long copy, else with the STATUS in one write). */
    x->out_nowake = 1;
    tdm_xfer_out_status(x, room, TDM_KVPOLL_TRANSFERRING, NULL, NULL, 0, 0);
    x->out_nowake = 0;
    if (tdm_xfer_inline_ok(x, r)) {
        /* A same-host room of plain copies is written by this thread: handing it to the
         * transfer thread costs a wake of another core (~80 µs on the bench VM) per burst, more
         * than copying a page chunk. ABORT meanwhile is answered after the fence (I5). */
        x->inline_copies++;
        pthread_mutex_unlock(&x->mu);
        tdm_xfer_issue_inline(x, r);
        return TDM_OK;
    }
    tdm_xfer_cmd_push(x, XCMD_ISSUE, room);
out:
    pthread_mutex_unlock(&x->mu);
    return st;
}

tdm_status_t tdm_xfer_prefill_abort(tdm_xfer_t *x, uint64_t room, const char *reason)
{
    xroom_t *r = tdm_xfer_map_get(x, room);
    tdm_xfer_room_abort(x->rooms, room, reason ? reason : "abort", tdm_xfer_now());
    if (r && (r->phase == XR_PUTTING || r->phase == XR_FLUSHING))
        r->fail_req = 1; /* STATUS FAILED once the flush completed */
    else if (r && r->phase == XR_NEW)
        tdm_xfer_out_status(x, room, TDM_KVPOLL_FAILED, reason ? reason : "aborted by prefill",
                            NULL, 0, 0);
    return TDM_OK;
}

tdm_status_t tdm_xfer_prefill_release(tdm_xfer_t *x, uint64_t room)
{
    xroom_t *r = tdm_xfer_map_get(x, room);
    tdm_xfer_room_info_t info;
    if (!r)
        return TDM_ERR_NOTFOUND;
    if (r->phase == XR_PUTTING || r->phase == XR_FLUSHING)
        return TDM_ERR_BUSY;
    if (tdm_xfer_room_get(x->rooms, room, &info) == TDM_OK && !info.tombstone &&
        info.state != TDM_KVPOLL_SUCCESS && info.state != TDM_KVPOLL_FAILED)
        return TDM_ERR_STATE;
    tdm_xfer_map_del(x, room);
    tdm_xroom_free(r);
    tdm_xfer_room_close(x->rooms, room, tdm_xfer_now());
    return TDM_OK;
}
