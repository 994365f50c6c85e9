/*
 * dataplane/sched/plan_codec.h — the per-iteration plan that rank 0 broadcasts (invariant I1).
 *
 * Format (docs/serving.md): a fixed 48-byte little-endian header, then n_seqs entries, each
 * followed by its token ids and its full page table. Followers keep no sequence state: a plan is
 * everything a rank needs to run the iteration, and the collectives an iteration issues are a
 * pure function of it. plan_hash is xxh64 of the payload and is what ranks record (I2).
 *
 * The builder writes into a caller-owned buffer that grows (tdm_realloc) and is reused every
 * iteration; the parser validates every count against the buffer and yields views into it.
 */
#ifndef TDM_SCHED_PLAN_CODEC_H
#define TDM_SCHED_PLAN_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#define TDM_PLAN_MAGIC 0x4e4c5054u /* "TPLN" */
#define TDM_PLAN_VERSION 1
#define TDM_PLAN_HDR_BYTES 48
#define TDM_PLAN_MAX_SEQS 4096
#define TDM_PLAN_MAX_TOKENS (1u << 20)
#define TDM_PLAN_MAX_PAGES (1u << 20)
#define TDM_PLAN_MAX_TIER_WORDS (1u << 24)

typedef enum tdm_plan_kind {
    TDM_PLAN_IDLE = 0,
    TDM_PLAN_BATCH = 1,
    TDM_PLAN_SHUTDOWN = 2,
    TDM_PLAN_KIND_MAX
} tdm_plan_kind_t;

/* entry flags */
#define TDM_PLAN_PREV_TOKEN 0x1u /* tokens[0] is the token sampled for `slot` last iteration */
#define TDM_PLAN_LOGITS 0x2u     /* this entry's last row is sampled */

typedef struct tdm_plan_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;
    uint64_t iter;
    uint64_t plan_hash;
    uint32_t n_seqs;
    uint32_t n_tokens; /* sum of entries' n_tokens */
    uint32_t payload_bytes;
    uint32_t flags;
    /* HiCache at TP > 1: words of the tier segment broadcast after the payload (0 = none):
     * {kv_need lo, kv_need hi, rank 0's tier journal (tdm/hicache.h)} */
    uint32_t tier_words;
    uint32_t reserved;
} tdm_plan_hdr_t;

typedef struct tdm_plan_entry {
    uint32_t slot;
    uint32_t pos0;
    uint32_t n_tokens;
    uint32_t n_pages;
    uint32_t flags;
    const uint32_t *tokens; /* view (aligned: the payload is 4-byte aligned) */
    const uint32_t *pages;
} tdm_plan_entry_t;

typedef struct tdm_plan_builder {
    uint8_t *buf;
    size_t cap, len;
    uint32_t n_seqs, n_tokens;
} tdm_plan_builder_t;

void tdm_plan_builder_init(tdm_plan_builder_t *b);
void tdm_plan_builder_free(tdm_plan_builder_t *b);
/* Start a new plan (keeps the buffer). */
void tdm_plan_begin(tdm_plan_builder_t *b);
tdm_status_t tdm_plan_add(tdm_plan_builder_t *b, uint32_t slot, uint32_t pos0, uint32_t flags,
                          const uint32_t *tokens, uint32_t n_tokens, const uint32_t *pages,
                          uint32_t n_pages);
/* Write the header (kind BATCH if any entry, else the given kind) and hash; returns the whole
 * plan (header + payload) in *ret_buf / *ret_len, valid until the next begin. */
void tdm_plan_finish(tdm_plan_builder_t *b, uint64_t iter, tdm_plan_kind_t kind,
                     const uint8_t **ret_buf, size_t *ret_len, tdm_plan_hdr_t *ret_hdr);

/* Rank 0: set the tier segment's size in a finished plan's header bytes. */
void tdm_plan_set_tier_words(uint8_t *hdr_buf, uint32_t words);

/* Parse and validate a received plan header (magic, version, kind, bounds). */
tdm_status_t tdm_plan_hdr_parse(const uint8_t *buf, size_t len, tdm_plan_hdr_t *ret);
/* Validate the payload against the header (hash, counts, exact length) — call once. */
tdm_status_t tdm_plan_validate(const tdm_plan_hdr_t *h, const uint8_t *payload, size_t len);
/* Iterate entries of a validated payload: *off starts at 0; TDM_ERR_NOTFOUND at the end. */
tdm_status_t tdm_plan_next(const uint8_t *payload, size_t len, size_t *off, tdm_plan_entry_t *ret);

#endif
