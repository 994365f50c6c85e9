/*
 * plan_codec.c — plan encoding and strict decoding. Entries are 20 bytes of fixed fields followed
 * by u32 arrays, so the payload stays 4-byte aligned and token/page arrays are usable in place. The
 * plan hash covers the payload only; the header carries it.
 */
#include "config.h"

#include <string.h>

#include <tdm/hash.h>
#include <tdm/mem.h>

#include "dataplane/sched/plan_codec.h"

#define ENTRY_FIXED 20u

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4); /* hosts are little-endian (x86-64, aarch64); the plan never leaves it */
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

void tdm_plan_builder_init(tdm_plan_builder_t *b)
{
    memset(b, 0, sizeof(*b));
    b->cap = 4096;
    b->buf = tdm_malloc(b->cap);
    tdm_plan_begin(b);
}

void tdm_plan_builder_free(tdm_plan_builder_t *b)
{
    if (!b)
        return;
    tdm_free(b->buf);
    memset(b, 0, sizeof(*b));
}

void tdm_plan_begin(tdm_plan_builder_t *b)
{
    b->len = TDM_PLAN_HDR_BYTES;
    b->n_seqs = 0;
    b->n_tokens = 0;
}

tdm_status_t tdm_plan_add(tdm_plan_builder_t *b, uint32_t slot, uint32_t pos0, uint32_t flags,
                          const uint32_t *tokens, uint32_t n_tokens, const uint32_t *pages,
                          uint32_t n_pages)
{
    size_t need, arrays;
    if (n_tokens == 0 || b->n_seqs >= TDM_PLAN_MAX_SEQS || n_tokens > TDM_PLAN_MAX_TOKENS ||
        n_pages > TDM_PLAN_MAX_PAGES || b->n_tokens + n_tokens > TDM_PLAN_MAX_TOKENS)
        return TDM_ERR_RANGE;
    TDM_TRY(tdm_size_mul((size_t)n_tokens + n_pages, 4, &arrays));
    TDM_TRY(tdm_size_add(b->len, ENTRY_FIXED + arrays, &need));
    if (need > UINT32_MAX)
        return TDM_ERR_OVERFLOW;
    if (need > b->cap) {
        while (b->cap < need)
            b->cap *= 2;
        b->buf = tdm_realloc(b->buf, b->cap);
    }
    uint8_t *p = b->buf + b->len;
    put32(p, slot);
    put32(p + 4, pos0);
    put32(p + 8, n_tokens);
    put32(p + 12, n_pages);
    put32(p + 16, flags);
    memcpy(p + ENTRY_FIXED, tokens, (size_t)n_tokens * 4);
    if (n_pages)
        memcpy(p + ENTRY_FIXED + (size_t)n_tokens * 4, pages, (size_t)n_pages * 4);
    b->len = need;
    b->n_seqs++;
    b->n_tokens += n_tokens;
    return TDM_OK;
}

void tdm_plan_finish(tdm_plan_builder_t *b, uint64_t iter, tdm_plan_kind_t kind,
                     const uint8_t **ret_buf, size_t *ret_len, tdm_plan_hdr_t *ret_hdr)
{
    tdm_plan_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = TDM_PLAN_MAGIC;
    h.version = TDM_PLAN_VERSION;
    h.kind = (uint16_t)(b->n_seqs ? TDM_PLAN_BATCH : kind == TDM_PLAN_BATCH ? TDM_PLAN_IDLE : kind);
    h.iter = iter;
    h.n_seqs = b->n_seqs;
    h.n_tokens = b->n_tokens;
    h.payload_bytes = (uint32_t)(b->len - TDM_PLAN_HDR_BYTES);
    h.plan_hash = tdm_hash_xxh64(b->buf + TDM_PLAN_HDR_BYTES, h.payload_bytes, 0);
    uint8_t *p = b->buf;
    put32(p, h.magic);
    p[4] = (uint8_t)h.version, p[5] = (uint8_t)(h.version >> 8);
    p[6] = (uint8_t)h.kind, p[7] = (uint8_t)(h.kind >> 8);
    memcpy(p + 8, &h.iter, 8);
    memcpy(p + 16, &h.plan_hash, 8);
    put32(p + 24, h.n_seqs);
    put32(p + 28, h.n_tokens);
    put32(p + 32, h.payload_bytes);
    put32(p + 36, h.flags);
    memset(p + 40, 0, 8);
    *ret_buf = b->buf;
    *ret_len = b->len;
    if (ret_hdr)
        *ret_hdr = h;
}

void tdm_plan_set_tier_words(uint8_t *hdr_buf, uint32_t words)
{
    put32(hdr_buf + 40, words);
}

tdm_status_t tdm_plan_hdr_parse(const uint8_t *buf, size_t len, tdm_plan_hdr_t *ret)
{
    tdm_plan_hdr_t h;
    if (len < TDM_PLAN_HDR_BYTES)
        return TDM_ERR_FORMAT;
    h.magic = get32(buf);
    h.version = (uint16_t)(buf[4] | buf[5] << 8);
    h.kind = (uint16_t)(buf[6] | buf[7] << 8);
    h.iter = get64(buf + 8);
    h.plan_hash = get64(buf + 16);
    h.n_seqs = get32(buf + 24);
    h.n_tokens = get32(buf + 28);
    h.payload_bytes = get32(buf + 32);
    h.flags = get32(buf + 36);
    h.tier_words = get32(buf + 40);
    h.reserved = get32(buf + 44);
    if (h.magic != TDM_PLAN_MAGIC || h.version != TDM_PLAN_VERSION || h.kind >= TDM_PLAN_KIND_MAX ||
        h.n_seqs > TDM_PLAN_MAX_SEQS || h.n_tokens > TDM_PLAN_MAX_TOKENS ||
        h.tier_words > TDM_PLAN_MAX_TIER_WORDS || h.reserved != 0 ||
        (h.kind != TDM_PLAN_BATCH && h.n_seqs != 0))
        return TDM_ERR_FORMAT;
    *ret = h;
    return TDM_OK;
}

tdm_status_t tdm_plan_next(const uint8_t *payload, size_t len, size_t *off, tdm_plan_entry_t *ret)
{
    if (*off == len)
        return TDM_ERR_NOTFOUND;
    if (len - *off < ENTRY_FIXED)
        return TDM_ERR_FORMAT;
    const uint8_t *p = payload + *off;
    tdm_plan_entry_t e;
    e.slot = get32(p);
    e.pos0 = get32(p + 4);
    e.n_tokens = get32(p + 8);
    e.n_pages = get32(p + 12);
    e.flags = get32(p + 16);
    if (e.n_tokens == 0 || e.n_tokens > TDM_PLAN_MAX_TOKENS || e.n_pages > TDM_PLAN_MAX_PAGES)
        return TDM_ERR_FORMAT;
    size_t arrays = ((size_t)e.n_tokens + e.n_pages) * 4;
    if (len - *off - ENTRY_FIXED < arrays)
        return TDM_ERR_FORMAT;
    e.tokens = (const uint32_t *)(const void *)(p + ENTRY_FIXED);
    e.pages = e.tokens + e.n_tokens;
    *off += ENTRY_FIXED + arrays;
    *ret = e;
    return TDM_OK;
}

tdm_status_t tdm_plan_validate(const tdm_plan_hdr_t *h, const uint8_t *payload, size_t len)
{
    if (len != h->payload_bytes)
        return TDM_ERR_FORMAT;
    if (tdm_hash_xxh64(payload, len, 0) != h->plan_hash)
        return TDM_ERR_CORRUPT;
    size_t off = 0;
    uint32_t seqs = 0;
    uint64_t tokens = 0;
    tdm_plan_entry_t e;
    tdm_status_t st;
    while ((st = tdm_plan_next(payload, len, &off, &e)) == TDM_OK) {
        seqs++;
        tokens += e.n_tokens;
    }
    if (st != TDM_ERR_NOTFOUND || seqs != h->n_seqs || tokens != h->n_tokens)
        return TDM_ERR_FORMAT;
    return TDM_OK;
}
