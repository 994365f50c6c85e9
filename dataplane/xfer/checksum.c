/*
 * checksum.c — the corruption detectors of a transfer: one xxh64 per chunk (one page of one rank:
 * every layer and sub-buffer of that page, in layer-major, sub-buffer order), computed by prefill
 * over the bytes it wrote and by decode over its own memory before the KV is used; the segment
 * sums (per rank and (layer, sub-buffer), the fold over the room's pages of the same segment
 * hashes) that let decode name the layer and sub-buffer of a mismatch (docs/contracts.md §d); and
 * the aux slot codec, whose magic and room id decode checks.
 */
#include "config.h"

#include <string.h>

#include <tdm/hash.h>

#include "dataplane/xfer/xfer_int.h"

uint64_t tdm_xfer_page_sum(const tdm_kv_buffers_t *kv, uint32_t page)
{
    const tdm_kv_layout_t *l = kv->layout;
    uint64_t h = 0;
    for (uint32_t layer = 0; layer < l->num_layers; layer++)
        for (uint32_t s = 0; s < l->n_sub; s++) {
            const uint8_t *p = tdm_kv_slot(kv, layer, (tdm_kv_sub_t)s, page, 0);
            h = tdm_hash_combine(h, tdm_hash_xxh64(p, l->sub[s].page_stride, 0));
        }
    return h;
}

void tdm_xfer_page_sums(const tdm_kv_buffers_t *kv, const uint32_t *pages, uint32_t n,
                        uint64_t *ret_sums, uint64_t *ret_seg)
{
    const tdm_kv_layout_t *l = kv->layout;
    const uint32_t per = l->num_layers * l->n_sub;
    if (ret_seg)
        memset(ret_seg, 0, (size_t)per * sizeof(uint64_t));
    for (uint32_t i = 0; i < n; i++) {
        uint64_t h = 0;
        for (uint32_t layer = 0, k = 0; layer < l->num_layers; layer++)
            for (uint32_t s = 0; s < l->n_sub; s++, k++) {
                const uint8_t *p = tdm_kv_slot(kv, layer, (tdm_kv_sub_t)s, pages[i], 0);
                uint64_t seg = tdm_hash_xxh64(p, l->sub[s].page_stride, 0);
                h = tdm_hash_combine(h, seg);
                if (ret_seg)
                    ret_seg[k] = tdm_xfer_seg_fold(ret_seg[k], seg);
            }
        ret_sums[i] = h;
    }
}

uint32_t tdm_xfer_seg_count(const tdm_xfer_t *x, uint32_t rank)
{
    const tdm_kv_layout_t *l = x->cfg.kv[rank]->layout;
    return l->num_layers * l->n_sub;
}

uint32_t tdm_xfer_seg_total(const tdm_xfer_t *x)
{
    uint32_t n = 0;
    for (uint32_t rank = 0; rank < x->n_ranks; rank++)
        n += tdm_xfer_seg_count(x, rank);
    return n;
}

uint64_t tdm_xfer_room_sum_bytes(const tdm_xfer_t *x, uint32_t n_pages)
{
    uint64_t b = 0;
    for (uint32_t rank = 0; rank < x->n_ranks; rank++) {
        const tdm_kv_layout_t *l = x->cfg.kv[rank]->layout;
        for (uint32_t s = 0; s < l->n_sub; s++)
            b += (uint64_t)l->num_layers * l->sub[s].page_stride * n_pages;
    }
    return b;
}

void tdm_xfer_count_skip(tdm_xfer_t *x, uint32_t n_pages, uint32_t n_held)
{
    x->st.room_pages += n_pages;
    x->st.room_bytes += tdm_xfer_room_sum_bytes(x, n_pages);
    x->st.prefix_pages_skipped += n_held;
    x->st.prefix_bytes_saved += tdm_xfer_room_sum_bytes(x, n_held);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Slot: magic u32, n_top u32, room u64, first_token u32, first_logprob f32, top[20]{id, lp}. */
void tdm_xfer_aux_encode(const tdm_xfer_aux_t *a, uint8_t out[TDM_XFER_AUX_BYTES])
{
    uint32_t n = a->n_top > TDM_FRAME_MAX_TOP ? TDM_FRAME_MAX_TOP : a->n_top;
    uint32_t f;
    memset(out, 0, TDM_XFER_AUX_BYTES);
    put32(out, TDM_XFER_AUX_MAGIC);
    put32(out + 4, n);
    put32(out + 8, (uint32_t)a->room);
    put32(out + 12, (uint32_t)(a->room >> 32));
    put32(out + 16, a->first_token);
    memcpy(&f, &a->first_logprob, 4);
    put32(out + 20, f);
    for (uint32_t i = 0; i < n; i++) {
        put32(out + 24 + 8 * i, a->top[i].id);
        memcpy(&f, &a->top[i].logprob, 4);
        put32(out + 28 + 8 * i, f);
    }
}

tdm_status_t tdm_xfer_aux_decode(const uint8_t in[TDM_XFER_AUX_BYTES], tdm_xfer_aux_t *ret)
{
    tdm_xfer_aux_t a;
    uint32_t f;
    memset(&a, 0, sizeof(a));
    if (get32(in) != TDM_XFER_AUX_MAGIC)
        return TDM_ERR_CORRUPT;
    a.n_top = get32(in + 4);
    if (a.n_top > TDM_FRAME_MAX_TOP)
        return TDM_ERR_CORRUPT;
    a.room = (uint64_t)get32(in + 8) | (uint64_t)get32(in + 12) << 32;
    a.first_token = get32(in + 16);
    f = get32(in + 20);
    memcpy(&a.first_logprob, &f, 4);
    for (uint32_t i = 0; i < a.n_top; i++) {
        a.top[i].id = get32(in + 24 + 8 * i);
        f = get32(in + 28 + 8 * i);
        memcpy(&a.top[i].logprob, &f, 4);
    }
    *ret = a;
    return TDM_OK;
}
