/*
 * tdm/tokenizer.h — Hugging Face tokenizer.json (BPE) encode/decode, bit-exact with `tokenizers`.
 *
 * Supported (anything else in the file is TDM_ERR_UNSUPPORTED with a message naming the field):
 *   model          BPE: vocab, merges ("a b" strings or ["a","b"] arrays; rank = position, a later
 *                  duplicate pair overrides an earlier one as in HF), unk_token, fuse_unk,
 *                  byte_fallback (<0xNN> tokens), ignore_merges. dropout must be null/0.
 *   normalizer     null, NFC, Prepend, Replace (String pattern), Sequence of those.
 *   pre_tokenizer  null, ByteLevel (use_regex with the GPT-2 pattern, add_prefix_space),
 *                  Split (Isolated; the GPT-2, Llama-3 and Qwen2 patterns, matched by hand-written
 *                  matchers, not a regex engine), Metaspace (replacement, prepend_scheme
 *                  first|always|never or legacy add_prefix_space, split), Sequence of those.
 *   post_processor null, ByteLevel (no-op on ids), TemplateProcessing (single), Sequence.
 *   decoder        null, ByteLevel, Metaspace, Replace (String), ByteFallback, Fuse, Strip,
 *                  Sequence.
 *   added_tokens   matched before pre-tokenization, leftmost-longest, honouring lstrip, rstrip,
 *                  single_word and normalized exactly as HF's AddedVocabulary does.
 *
 * Ownership and threading: tdm_tok_load() returns an immutable object; encode/decode and the
 * lookups may run concurrently from any number of threads. A stream decoder belongs to one
 * request (one thread at a time). Outputs are heap blocks the caller releases with tdm_free().
 *
 * Bounds: tokenizer.json at most TDM_TOK_MAX_FILE_BYTES, ids below TDM_TOK_MAX_VOCAB, encode input
 * at most TDM_TOK_MAX_INPUT_BYTES (TDM_ERR_OVERFLOW beyond), and encode input must be valid UTF-8
 * (TDM_ERR_INVAL otherwise). A malformed file (wrong types, missing model, merges naming unknown
 * tokens, duplicate or out-of-range ids) is TDM_ERR_FORMAT with the offending field in `err`.
 */
#ifndef TDM_TOKENIZER_H
#define TDM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#define TDM_TOK_MAX_FILE_BYTES ((size_t)256 << 20)
#define TDM_TOK_MAX_INPUT_BYTES ((size_t)16 << 20)
#define TDM_TOK_MAX_VOCAB (1u << 24)
#define TDM_TOK_NO_ID UINT32_MAX

typedef struct tdm_tok tdm_tok_t;
typedef struct tdm_tok_stream tdm_tok_stream_t;

/* Load tokenizer.json from a file or from memory. On failure `err` (if non-NULL) holds a
 * one-line reason naming the field ("model.merges[12]: token \"ab\" not in vocab"). */
tdm_status_t tdm_tok_load(const char *path, tdm_tok_t **ret_tok, char *err, size_t errlen);
tdm_status_t tdm_tok_load_mem(const char *json, size_t len, tdm_tok_t **ret_tok, char *err,
                              size_t errlen);
void tdm_tok_free(tdm_tok_t *tok);

/* Encode UTF-8 text. add_special applies the post_processor template (e.g. BOS). *ret_ids is a
 * tdm_malloc'd array (never NULL on success, even when *ret_n is 0). */
tdm_status_t tdm_tok_encode(const tdm_tok_t *tok, const char *text, size_t len, int add_special,
                            uint32_t **ret_ids, size_t *ret_n);

/* Decode ids to UTF-8 text (NUL-terminated; invalid byte sequences become U+FFFD as HF does).
 * Ids with no token are skipped, as HF does; skip_special drops special added tokens. */
tdm_status_t tdm_tok_decode(const tdm_tok_t *tok, const uint32_t *ids, size_t n, int skip_special,
                            char **ret_text, size_t *ret_len);

/* Token string → id (vocab or added token); TDM_TOK_NO_ID if absent. */
uint32_t tdm_tok_token_id(const tdm_tok_t *tok, const char *token);
/* id → token string as stored (byte-level form for ByteLevel vocabularies); NULL if none. */
const char *tdm_tok_id_token(const tdm_tok_t *tok, uint32_t id);
/* 1 if id is a special added token. */
int tdm_tok_is_special(const tdm_tok_t *tok, uint32_t id);
/* One past the largest id of the vocabulary and the added tokens. */
uint32_t tdm_tok_vocab_size(const tdm_tok_t *tok);
/* BOS: the first special token the post_processor template prepends, else TDM_TOK_NO_ID.
 * EOS is a model-config notion (generation_config.json); the tokenizer offers lookups only. */
uint32_t tdm_tok_bos_id(const tdm_tok_t *tok);

/*
 * Incremental decode for streaming (the algorithm of HF's DecodeStream): each step returns the
 * new text that the ids so far add to the decoded string, holding back text that still ends in
 * an incomplete UTF-8 sequence (U+FFFD), so a stream never emits a broken character; byte
 * fallback pieces fuse across steps. The concatenation of every step plus the final flush equals
 * tdm_tok_decode() of all ids whenever the decoder is prefix-stable (ByteLevel, ByteFallback +
 * Fuse + Strip, Metaspace).
 */
tdm_status_t tdm_tok_stream_init(const tdm_tok_t *tok, int skip_special, tdm_tok_stream_t **ret);
/* *ret_text is tdm_malloc'd (possibly empty, "" when nothing is ready yet). */
tdm_status_t tdm_tok_stream_step(tdm_tok_stream_t *s, uint32_t id, char **ret_text,
                                 size_t *ret_len);
/* Emit whatever is held back (an incomplete tail decodes to U+FFFD as in tdm_tok_decode). */
tdm_status_t tdm_tok_stream_flush(tdm_tok_stream_t *s, char **ret_text, size_t *ret_len);
void tdm_tok_stream_free(tdm_tok_stream_t *s);

#endif
