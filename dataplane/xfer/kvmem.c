/*
 * kvmem.c — where the transfer engine touches KV bytes, in host or device memory: the per-page
 * checksums (tdm_xfer_page_sum on the CPU, the XXH64 segment kernel on the GPU — the same values),
 * the flip_kv_bits fault's byte, and for a device pool (cfg.kv_cuda) the GPU data mover's part of
 * a room: the CUDA IPC record decode registers, the device-to-device copies prefill queues next
 * to the UCX write of the aux slot, and the event that must complete before the room counts as
 * delivered (the flush of I5). Everything else in the engine is the same for both kinds.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tdm/log.h>

#include "dataplane/xfer/xfer_int.h"

tdm_status_t tdm_xfer_kvmem_init(tdm_xfer_t *x)
{
    if (!x->cfg.kv_cuda)
        return TDM_OK;
    tdm_status_t st = tdm_xfer_cuda_init(x->n_ranks, &x->cuda);
    if (st != TDM_OK) {
        tdm_err(TDM_SUB_XFER, "KV pool on the GPU: %s",
                st == TDM_ERR_UNSUPPORTED ? "this build has no CUDA runtime (CUDA IPC not built)"
                                          : tdm_status_str(st));
        return st;
    }
    for (uint32_t r = 0; r < x->n_ranks && x->cfg.role == TDM_XFER_DECODE; r++) {
        st = tdm_xfer_cuda_export(x->cuda, x->cfg.kv[r], x->cuda_rec[r]);
        if (st != TDM_OK) {
            tdm_xfer_kvmem_fini(x);
            return st;
        }
    }
    return TDM_OK;
}

void tdm_xfer_kvmem_fini(tdm_xfer_t *x)
{
    tdm_xfer_cuda_free(x->cuda);
    x->cuda = NULL;
}

tdm_status_t tdm_xfer_kv_sums(tdm_xfer_t *x, uint32_t rank, const uint32_t *pages, uint32_t n,
                              uint64_t *ret_sums, uint64_t *ret_seg)
{
    const tdm_kv_buffers_t *kv = x->cfg.kv[rank];
    if (x->cuda)
        return tdm_xfer_cuda_page_sums(x->cuda, kv, pages, n, ret_sums, ret_seg);
    tdm_xfer_page_sums(kv, pages, n, ret_sums, ret_seg);
    return TDM_OK;
}

void tdm_xfer_kv_flip_byte(tdm_xfer_t *x, uint8_t *p, uint8_t mask)
{
    if (!x->cuda) {
        *p ^= mask;
        return;
    }
    tdm_status_t st = tdm_xfer_cuda_flip(x->cuda, p, mask);
    if (st != TDM_OK)
        tdm_warn(TDM_SUB_XFER, "fault flip_kv_bits: device byte not flipped: %s",
                 tdm_status_str(st));
}

/* Transfer thread, without mu (the room's arrays are fixed while it is XR_PUTTING). */
void tdm_xfer_cuda_put_room(tdm_xfer_t *x, xroom_t *r, uint64_t *puts, uint64_t *bytes)
{
    if (!x->cuda || r->put_error)
        return;
    tdm_status_t st = TDM_OK;
    for (uint32_t rank = 0; rank < x->n_ranks && st == TDM_OK; rank++)
        st = tdm_xfer_cuda_copy(x->cuda, rank, x->cfg.kv[rank], r->src_pages, r->pages, r->n_pages,
                                bytes, puts);
    if (st == TDM_OK)
        st = tdm_xfer_cuda_fence(x->cuda, x->wake_xfer, &r->cuda_ev);
    if (st != TDM_OK) {
        /* copies already queued complete on their own; the room fails after the fence below
         * would have: no ACK or STATUS waits on a copy that may still run (I5) */
        tdm_err(TDM_SUB_XFER, "room %016llx: GPU copies: %s", (unsigned long long)r->room,
                tdm_status_str(st));
        r->put_error = 1;
        if (!r->cuda_ev && tdm_xfer_cuda_fence(x->cuda, -1, &r->cuda_ev) != TDM_OK)
            tdm_xfer_cuda_drain(x->cuda);
    }
}

int tdm_xfer_cuda_room_done(tdm_xfer_t *x, xroom_t *r)
{
    if (!r->cuda_ev)
        return 1;
    int d = tdm_xfer_cuda_fence_poll(x->cuda, r->cuda_ev);
    if (d == 0)
        return 0;
    if (d < 0) {
        /* a failed stream: wait until nothing can still write before the room is given up */
        tdm_xfer_cuda_drain(x->cuda);
        r->put_error = 1;
    }
    tdm_xfer_cuda_fence_free(x->cuda, r->cuda_ev);
    r->cuda_ev = NULL;
    return 1;
}
