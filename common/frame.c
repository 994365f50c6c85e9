/*
 * frame.c — encode/decode of the leader<->leader control frames (tdm/frame.h).
 *
 * A tiny bounded cursor does all byte access: a read past the body or a count over its cap turns
 * the cursor into an error state with the name of the field, and the decoder returns
 * TDM_ERR_FORMAT. Decoders also require the body to be consumed exactly, so a frame with trailing
 * garbage is as malformed as a truncated one.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/frame.h>

static const char *const frame_type_names[] = {
    "?", "REGISTER", "TRANSFER_INFO", "STATUS", "ABORT", "ABORT_ACK", "HEARTBEAT",
};
_Static_assert(sizeof(frame_type_names) / sizeof(frame_type_names[0]) == TDM_FRAME_TYPE_MAX,
               "frame_type_names must name every frame type");

static const char *const kvpoll_names[] = {
    "FAILED", "BOOTSTRAPPING", "WAITING_FOR_INPUT", "TRANSFERRING", "SUCCESS",
};
_Static_assert(sizeof(kvpoll_names) / sizeof(kvpoll_names[0]) == TDM_KVPOLL_MAX,
               "kvpoll_names must name every state");

const char *tdm_frame_type_name(uint16_t type)
{
    return type >= 1 && type < TDM_FRAME_TYPE_MAX ? frame_type_names[type] : "UNKNOWN";
}

const char *tdm_kvpoll_name(tdm_kvpoll_t s)
{
    return (unsigned)s < TDM_KVPOLL_MAX ? kvpoll_names[s] : "UNKNOWN";
}

/* ---- writer ---- */

typedef struct wr {
    uint8_t *p;
    size_t cap, len;
    int overflow;
} wr_t;

static void w_bytes(wr_t *w, const void *src, size_t n)
{
    if (w->overflow || n > w->cap - w->len) {
        w->overflow = 1;
        return;
    }
    if (n)
        memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void w_u8(wr_t *w, uint8_t v)
{
    w_bytes(w, &v, 1);
}

static void w_u16(wr_t *w, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    w_bytes(w, b, 2);
}

static void w_u32(wr_t *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    w_bytes(w, b, 4);
}

static void w_u64(wr_t *w, uint64_t v)
{
    w_u32(w, (uint32_t)v);
    w_u32(w, (uint32_t)(v >> 32));
}

static void w_f32(wr_t *w, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    w_u32(w, v);
}

static void w_blob(wr_t *w, tdm_blob_t b)
{
    w_u32(w, b.len);
    w_bytes(w, b.data, b.len);
}

/* Starts a frame: reserves the header, body follows. */
static void w_begin(wr_t *w, uint8_t *buf, size_t cap)
{
    w->p = buf;
    w->cap = cap;
    w->len = 0;
    w->overflow = 0;
    w_u32(w, TDM_FRAME_MAGIC);
    w_u16(w, TDM_FRAME_VERSION);
    w_u16(w, 0);
    w_u32(w, 0);
}

static tdm_status_t w_end(wr_t *w, uint16_t type, size_t *ret_len)
{
    if (w->overflow)
        return TDM_ERR_OVERFLOW;
    size_t body = w->len - TDM_FRAME_HDR_BYTES;
    if (body > TDM_FRAME_MAX_BODY)
        return TDM_ERR_OVERFLOW;
    w->p[6] = (uint8_t)type;
    w->p[7] = (uint8_t)(type >> 8);
    for (int i = 0; i < 4; i++)
        w->p[8 + i] = (uint8_t)(body >> (8 * i));
    *ret_len = w->len;
    return TDM_OK;
}

/* ---- reader ---- */

typedef struct rd {
    const uint8_t *p;
    size_t len, off;
    const char *bad; /* first field that failed */
} rd_t;

static const uint8_t *r_take(rd_t *r, size_t n, const char *field)
{
    if (r->bad)
        return NULL;
    if (n > r->len - r->off) {
        r->bad = field;
        return NULL;
    }
    const uint8_t *q = r->p + r->off;
    r->off += n;
    return q;
}

static uint8_t r_u8(rd_t *r, const char *field)
{
    const uint8_t *q = r_take(r, 1, field);
    return q ? q[0] : 0;
}

static uint16_t r_u16(rd_t *r, const char *field)
{
    const uint8_t *q = r_take(r, 2, field);
    return q ? (uint16_t)(q[0] | q[1] << 8) : 0;
}

static uint32_t r_u32(rd_t *r, const char *field)
{
    const uint8_t *q = r_take(r, 4, field);
    return q ? tdm_frame_u32_at(q, 0) : 0;
}

static uint64_t r_u64(rd_t *r, const char *field)
{
    const uint8_t *q = r_take(r, 8, field);
    return q ? tdm_frame_u64_at(q, 0) : 0;
}

static float r_f32(rd_t *r, const char *field)
{
    uint32_t v = r_u32(r, field);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static tdm_blob_t r_blob(rd_t *r, uint32_t max, const char *field)
{
    tdm_blob_t b = {NULL, 0};
    uint32_t n = r_u32(r, field);
    if (r->bad)
        return b;
    if (n > max) {
        r->bad = field;
        return b;
    }
    b.data = r_take(r, n, field);
    b.len = b.data ? n : 0;
    return b;
}

/* n elements of `size` bytes, n capped. */
static const uint8_t *r_array(rd_t *r, uint32_t n, uint32_t max, size_t size, const char *field)
{
    if (r->bad)
        return NULL;
    if (n > max) {
        r->bad = field;
        return NULL;
    }
    return r_take(r, (size_t)n * size, field);
}

static tdm_status_t r_done(rd_t *r, char *why, size_t why_len)
{
    if (!r->bad && r->off != r->len)
        r->bad = "trailing bytes";
    if (r->bad) {
        if (why && why_len)
            snprintf(why, why_len, "malformed field: %s", r->bad);
        return TDM_ERR_FORMAT;
    }
    return TDM_OK;
}

static void r_init(rd_t *r, const uint8_t *body, size_t len)
{
    r->p = body;
    r->len = body ? len : 0;
    r->off = 0;
    r->bad = NULL;
}

static void r_fail(rd_t *r, const char *field)
{
    if (!r->bad)
        r->bad = field;
}

/* ---- header ---- */

tdm_status_t tdm_frame_hdr_parse(const uint8_t *buf, size_t len, uint32_t max_body,
                                 tdm_frame_hdr_t *ret_hdr)
{
    if (len < TDM_FRAME_HDR_BYTES)
        return TDM_ERR_AGAIN;
    tdm_frame_hdr_t h;
    h.magic = tdm_frame_u32_at(buf, 0);
    h.version = (uint16_t)(buf[4] | buf[5] << 8);
    h.type = (uint16_t)(buf[6] | buf[7] << 8);
    h.length = tdm_frame_u32_at(buf, 2);
    if (h.magic != TDM_FRAME_MAGIC || h.version != TDM_FRAME_VERSION)
        return TDM_ERR_FORMAT;
    if (h.length > max_body || h.length > TDM_FRAME_MAX_BODY)
        return TDM_ERR_FORMAT;
    *ret_hdr = h;
    return TDM_OK;
}

/* ---- REGISTER ---- */

tdm_status_t tdm_frame_encode_register(const tdm_frame_register_t *f, uint8_t *buf, size_t cap,
                                       size_t *ret_len)
{
    wr_t w;
    uint8_t lay[TDM_LAYOUT_HDR_BYTES + TDM_KV_SUB_MAX * TDM_LAYOUT_SUB_BYTES];
    size_t lay_len;
    if (f->n_ranks > TDM_FRAME_MAX_RANKS)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_layout_encode(&f->layout, lay, sizeof(lay), &lay_len));
    w_begin(&w, buf, cap);
    w_u64(&w, f->instance_id);
    w_u16(&w, f->tp_size);
    w_u16(&w, f->n_ranks);
    w_u32(&w, f->page_size);
    w_blob(&w, (tdm_blob_t){lay, (uint32_t)lay_len});
    for (uint16_t i = 0; i < f->n_ranks; i++) {
        const tdm_frame_rank_t *rk = &f->ranks[i];
        w_u16(&w, rk->rank);
        w_u16(&w, rk->mem_kind);
        w_u64(&w, rk->base_addr);
        w_u64(&w, rk->pool_bytes);
        w_u64(&w, rk->aux_addr);
        w_u64(&w, rk->aux_bytes);
        w_blob(&w, rk->worker_addr);
        w_blob(&w, rk->rkey);
    }
    return w_end(&w, TDM_FRAME_REGISTER, ret_len);
}

tdm_status_t tdm_frame_decode_register(const uint8_t *body, size_t len, tdm_frame_register_t *ret,
                                       char *why, size_t why_len)
{
    rd_t r;
    tdm_frame_register_t f;
    memset(&f, 0, sizeof(f));
    r_init(&r, body, len);
    f.instance_id = r_u64(&r, "instance_id");
    f.tp_size = r_u16(&r, "tp_size");
    f.n_ranks = r_u16(&r, "n_ranks");
    f.page_size = r_u32(&r, "page_size");
    if (!r.bad && (f.n_ranks == 0 || f.n_ranks > TDM_FRAME_MAX_RANKS || f.n_ranks > f.tp_size))
        r_fail(&r, "n_ranks");
    if (!r.bad && f.page_size == 0)
        r_fail(&r, "page_size");
    tdm_blob_t lay = r_blob(&r, 4096, "layout");
    if (!r.bad && tdm_layout_decode(lay.data, lay.len, &f.layout) != TDM_OK)
        r_fail(&r, "layout");
    for (uint16_t i = 0; !r.bad && i < f.n_ranks; i++) {
        tdm_frame_rank_t *rk = &f.ranks[i];
        rk->rank = r_u16(&r, "rank");
        rk->mem_kind = r_u16(&r, "mem_kind");
        rk->base_addr = r_u64(&r, "base_addr");
        rk->pool_bytes = r_u64(&r, "pool_bytes");
        rk->aux_addr = r_u64(&r, "aux_addr");
        rk->aux_bytes = r_u64(&r, "aux_bytes");
        rk->worker_addr = r_blob(&r, TDM_FRAME_MAX_BLOB, "worker_addr");
        rk->rkey = r_blob(&r, TDM_FRAME_MAX_BLOB, "rkey");
        if (!r.bad && (rk->rank >= f.tp_size || rk->mem_kind > 1))
            r_fail(&r, rk->rank >= f.tp_size ? "rank" : "mem_kind");
    }
    TDM_TRY(r_done(&r, why, why_len));
    *ret = f;
    return TDM_OK;
}

/* ---- TRANSFER_INFO ---- */

static void w_sampling(wr_t *w, const tdm_frame_sampling_t *s)
{
    w_u64(w, s->seed);
    w_f32(w, s->temperature);
    w_f32(w, s->top_p);
    w_f32(w, s->min_p);
    w_u32(w, (uint32_t)s->top_k);
    w_f32(w, s->repetition_penalty);
    w_f32(w, s->presence_penalty);
    w_f32(w, s->frequency_penalty);
    w_u32(w, s->top_logprobs);
}

static void r_sampling(rd_t *r, tdm_frame_sampling_t *s)
{
    s->seed = r_u64(r, "seed");
    s->temperature = r_f32(r, "temperature");
    s->top_p = r_f32(r, "top_p");
    s->min_p = r_f32(r, "min_p");
    s->top_k = (int32_t)r_u32(r, "top_k");
    s->repetition_penalty = r_f32(r, "repetition_penalty");
    s->presence_penalty = r_f32(r, "presence_penalty");
    s->frequency_penalty = r_f32(r, "frequency_penalty");
    s->top_logprobs = r_u32(r, "top_logprobs");
    if (!r->bad && s->top_logprobs > TDM_FRAME_MAX_TOP)
        r_fail(r, "top_logprobs");
}

tdm_status_t tdm_frame_encode_transfer_info(const tdm_frame_transfer_info_t *f,
                                            const uint32_t *prompt_ids, const uint32_t *page_ids,
                                            uint8_t *buf, size_t cap, size_t *ret_len)
{
    wr_t w;
    if (f->n_prompt > TDM_FRAME_MAX_IDS || f->n_pages > TDM_FRAME_MAX_IDS)
        return TDM_ERR_INVAL;
    w_begin(&w, buf, cap);
    w_u64(&w, f->room);
    w_u64(&w, f->instance_id);
    w_u32(&w, f->aux_slot);
    w_u32(&w, f->n_prompt);
    for (uint32_t i = 0; i < f->n_prompt; i++)
        w_u32(&w, prompt_ids[i]);
    w_u32(&w, f->n_pages);
    for (uint32_t i = 0; i < f->n_pages; i++)
        w_u32(&w, page_ids[i]);
    w_sampling(&w, &f->sampling);
    return w_end(&w, TDM_FRAME_TRANSFER_INFO, ret_len);
}

tdm_status_t tdm_frame_decode_transfer_info(const uint8_t *body, size_t len,
                                            tdm_frame_transfer_info_t *ret, char *why,
                                            size_t why_len)
{
    rd_t r;
    tdm_frame_transfer_info_t f;
    memset(&f, 0, sizeof(f));
    r_init(&r, body, len);
    f.room = r_u64(&r, "room");
    f.instance_id = r_u64(&r, "instance_id");
    f.aux_slot = r_u32(&r, "aux_slot");
    f.n_prompt = r_u32(&r, "n_prompt");
    f.prompt_ids = r_array(&r, f.n_prompt, TDM_FRAME_MAX_IDS, 4, "prompt_ids");
    if (!r.bad && f.n_prompt == 0)
        r_fail(&r, "n_prompt");
    f.n_pages = r_u32(&r, "n_pages");
    f.page_ids = r_array(&r, f.n_pages, TDM_FRAME_MAX_IDS, 4, "page_ids");
    r_sampling(&r, &f.sampling);
    TDM_TRY(r_done(&r, why, why_len));
    *ret = f;
    return TDM_OK;
}

/* ---- STATUS ---- */

tdm_status_t tdm_frame_encode_status(const tdm_frame_status_t *f, const uint64_t *checksums,
                                     const uint64_t *seg_sums, uint8_t *buf, size_t cap,
                                     size_t *ret_len)
{
    wr_t w;
    if (f->n_top > TDM_FRAME_MAX_TOP || f->n_checksums > TDM_FRAME_MAX_IDS ||
        f->message.len > TDM_FRAME_MAX_MSG || f->n_seg_sums > TDM_FRAME_MAX_SEG_SUMS ||
        (f->n_seg_sums && (!seg_sums || !f->n_checksums)))
        return TDM_ERR_INVAL;
    w_begin(&w, buf, cap);
    w_u64(&w, f->room);
    w_u8(&w, f->state);
    w_u16(&w, f->reason);
    w_u32(&w, f->first_token);
    w_f32(&w, f->first_logprob);
    w_u32(&w, f->n_top);
    for (uint32_t i = 0; i < f->n_top; i++) {
        w_u32(&w, f->top[i].id);
        w_f32(&w, f->top[i].logprob);
    }
    w_u32(&w, f->chunk_tokens);
    w_u32(&w, f->n_checksums);
    for (uint32_t i = 0; i < f->n_checksums; i++)
        w_u64(&w, checksums[i]);
    w_blob(&w, f->message);
    if (f->n_seg_sums) { /* the optional trailer (docs/contracts.md §d "Segment sums") */
        w_u32(&w, f->n_seg_sums);
        for (uint32_t i = 0; i < f->n_seg_sums; i++)
            w_u64(&w, seg_sums[i]);
    }
    return w_end(&w, TDM_FRAME_STATUS, ret_len);
}

tdm_status_t tdm_frame_decode_status(const uint8_t *body, size_t len, tdm_frame_status_t *ret,
                                     char *why, size_t why_len)
{
    rd_t r;
    tdm_frame_status_t f;
    memset(&f, 0, sizeof(f));
    r_init(&r, body, len);
    f.room = r_u64(&r, "room");
    f.state = r_u8(&r, "state");
    if (!r.bad && f.state >= TDM_KVPOLL_MAX)
        r_fail(&r, "state");
    f.reason = r_u16(&r, "reason");
    f.first_token = r_u32(&r, "first_token");
    f.first_logprob = r_f32(&r, "first_logprob");
    f.n_top = r_u32(&r, "n_top");
    if (!r.bad && f.n_top > TDM_FRAME_MAX_TOP)
        r_fail(&r, "n_top");
    for (uint32_t i = 0; !r.bad && i < f.n_top; i++) {
        f.top[i].id = r_u32(&r, "top.id");
        f.top[i].logprob = r_f32(&r, "top.logprob");
    }
    f.chunk_tokens = r_u32(&r, "chunk_tokens");
    f.n_checksums = r_u32(&r, "n_checksums");
    f.checksums = r_array(&r, f.n_checksums, TDM_FRAME_MAX_IDS, 8, "checksums");
    if (!r.bad && f.n_checksums > 0 && f.chunk_tokens == 0)
        r_fail(&r, "chunk_tokens");
    f.message = r_blob(&r, TDM_FRAME_MAX_MSG, "message");
    if (!r.bad && r.off < r.len) { /* the optional segment-sum trailer */
        f.n_seg_sums = r_u32(&r, "seg_sums count");
        if (!r.bad && (f.n_seg_sums == 0 || f.n_checksums == 0))
            r_fail(&r, "seg_sums count");
        f.seg_sums = r_array(&r, f.n_seg_sums, TDM_FRAME_MAX_SEG_SUMS, 8, "seg_sums");
    }
    TDM_TRY(r_done(&r, why, why_len));
    *ret = f;
    return TDM_OK;
}

/* ---- ABORT / ABORT_ACK / HEARTBEAT ---- */

tdm_status_t tdm_frame_encode_abort(const tdm_frame_abort_t *f, uint8_t *buf, size_t cap,
                                    size_t *ret_len)
{
    wr_t w;
    if (f->message.len > TDM_FRAME_MAX_MSG)
        return TDM_ERR_INVAL;
    w_begin(&w, buf, cap);
    w_u64(&w, f->room);
    w_u16(&w, f->reason);
    w_blob(&w, f->message);
    return w_end(&w, TDM_FRAME_ABORT, ret_len);
}

tdm_status_t tdm_frame_decode_abort(const uint8_t *body, size_t len, tdm_frame_abort_t *ret,
                                    char *why, size_t why_len)
{
    rd_t r;
    tdm_frame_abort_t f;
    r_init(&r, body, len);
    f.room = r_u64(&r, "room");
    f.reason = r_u16(&r, "reason");
    f.message = r_blob(&r, TDM_FRAME_MAX_MSG, "message");
    TDM_TRY(r_done(&r, why, why_len));
    *ret = f;
    return TDM_OK;
}

tdm_status_t tdm_frame_encode_abort_ack(const tdm_frame_abort_ack_t *f, uint8_t *buf, size_t cap,
                                        size_t *ret_len)
{
    wr_t w;
    w_begin(&w, buf, cap);
    w_u64(&w, f->room);
    w_u8(&w, f->flushed);
    w_u8(&w, f->known);
    return w_end(&w, TDM_FRAME_ABORT_ACK, ret_len);
}

tdm_status_t tdm_frame_decode_abort_ack(const uint8_t *body, size_t len, tdm_frame_abort_ack_t *ret,
                                        char *why, size_t why_len)
{
    rd_t r;
    tdm_frame_abort_ack_t f;
    r_init(&r, body, len);
    f.room = r_u64(&r, "room");
    f.flushed = r_u8(&r, "flushed");
    f.known = r_u8(&r, "known");
    if (!r.bad && (f.flushed > 1 || f.known > 1))
        r_fail(&r, f.flushed > 1 ? "flushed" : "known");
    TDM_TRY(r_done(&r, why, why_len));
    *ret = f;
    return TDM_OK;
}

tdm_status_t tdm_frame_encode_heartbeat(const tdm_frame_heartbeat_t *f, uint8_t *buf, size_t cap,
                                        size_t *ret_len)
{
    wr_t w;
    w_begin(&w, buf, cap);
    w_u64(&w, f->instance_id);
    w_u64(&w, f->seq);
    w_u64(&w, f->ts_us);
    return w_end(&w, TDM_FRAME_HEARTBEAT, ret_len);
}

tdm_status_t tdm_frame_decode_heartbeat(const uint8_t *body, size_t len, tdm_frame_heartbeat_t *ret,
                                        char *why, size_t why_len)
{
    rd_t r;
    tdm_frame_heartbeat_t f;
    r_init(&r, body, len);
    f.instance_id = r_u64(&r, "instance_id");
    f.seq = r_u64(&r, "seq");
    f.ts_us = r_u64(&r, "ts_us");
    TDM_TRY(r_done(&r, why, why_len));
    *ret = f;
    return TDM_OK;
}

/* ---- stream reader ---- */

tdm_status_t tdm_frame_reader_init(tdm_frame_reader_t *r, uint32_t max_body)
{
    memset(r, 0, sizeof(*r));
    if (max_body == 0 || max_body > TDM_FRAME_MAX_BODY)
        max_body = TDM_FRAME_MAX_BODY;
    r->max_body = max_body;
    r->cap = 64 * 1024;
    r->buf = malloc(r->cap);
    return r->buf ? TDM_OK : TDM_ERR_NOMEM;
}

void tdm_frame_reader_free(tdm_frame_reader_t *r)
{
    if (!r)
        return;
    free(r->buf);
    r->buf = NULL;
    r->cap = r->len = r->off = 0;
}

static void reader_compact(tdm_frame_reader_t *r)
{
    if (r->off == 0)
        return;
    memmove(r->buf, r->buf + r->off, r->len - r->off);
    r->len -= r->off;
    r->off = 0;
}

void tdm_frame_reader_space(tdm_frame_reader_t *r, uint8_t **ret_ptr, size_t *ret_avail)
{
    reader_compact(r);
    if (r->len == r->cap) {
        /* grow only up to one maximal frame; the header check bounds what a peer can make us hold
         */
        size_t max = (size_t)r->max_body + TDM_FRAME_HDR_BYTES;
        size_t ncap = r->cap * 2 > max ? max : r->cap * 2;
        if (ncap > r->cap) {
            uint8_t *nb = realloc(r->buf, ncap);
            if (nb) {
                r->buf = nb;
                r->cap = ncap;
            }
        }
    }
    *ret_ptr = r->buf + r->len;
    *ret_avail = r->cap - r->len;
}

void tdm_frame_reader_commit(tdm_frame_reader_t *r, size_t n)
{
    if (n > r->cap - r->len)
        n = r->cap - r->len;
    r->len += n;
}

tdm_status_t tdm_frame_reader_next(tdm_frame_reader_t *r, tdm_frame_hdr_t *ret_hdr,
                                   const uint8_t **ret_body)
{
    tdm_frame_hdr_t h;
    if (r->broken)
        return TDM_ERR_FORMAT;
    size_t avail = r->len - r->off;
    tdm_status_t st = tdm_frame_hdr_parse(r->buf + r->off, avail, r->max_body, &h);
    if (st == TDM_ERR_FORMAT) {
        r->broken = 1;
        return st;
    }
    if (st != TDM_OK)
        return st;
    if (avail - TDM_FRAME_HDR_BYTES < h.length)
        return TDM_ERR_AGAIN;
    *ret_hdr = h;
    *ret_body = r->buf + r->off + TDM_FRAME_HDR_BYTES;
    r->off += TDM_FRAME_HDR_BYTES + h.length;
    return TDM_OK;
}
