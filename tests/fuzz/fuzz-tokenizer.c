/*
 * fuzz-tokenizer.c — libFuzzer target for the tokenizer.json parser and the encode/decode paths.
 *
 * Input byte 0 selects the mode:
 *   even: the rest is a tokenizer.json, optionally followed by a NUL and a text; load it, and if
 *         it loads, encode the text (or the JSON's own valid-UTF-8 prefix), decode the ids with
 *         and without specials, stream-decode them, and decode ids read from the input bytes.
 *   odd:  the rest is a text for two built-in tokenizers (byte-level Llama-3 style with all 256
 *         byte tokens, and a Metaspace + byte-fallback one); encode, check decode round-trips
 *         where the pipeline is lossless, and stream-decode.
 * Never crashes, never leaks; the round-trip check aborts on a mismatch (a real bug).
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/tokenizer.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char METASPACE_JSON[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":11,\"content\":\"<m>\",\"lstrip\":true,\"rstrip\":true,\"normalized\":false},"
    "{\"id\":12,\"content\":\"ab\",\"single_word\":true,\"normalized\":true}],"
    "\"normalizer\":{\"type\":\"NFC\"},"
    "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
    "\"prepend_scheme\":\"first\",\"split\":true},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":"
    "\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{"
    "\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Metaspace\",\"replacement\":"
    "\"\\u2581\",\"prepend_scheme\":\"first\"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]},"
    "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"fuse_unk\":true,\"unk_token\":\"<unk>\","
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0xC3>\":3,\"<0xA9>\":4,\"\\u2581\":5,\"a\":6,"
    "\"b\":7,\"\\u2581a\":8,\"ab\":9,\"\\u2581ab\":10,\"<0x20>\":13},"
    "\"merges\":[[\"\\u2581\",\"a\"],\"a b\",[\"\\u2581a\",\"b\"]]}}";

static char *bytelevel_json(void)
{
    /* GPT-2 bytes_to_unicode, written independently of the library */
    static char buf[16384];
    size_t o = 0;
    o += (size_t)snprintf(buf + o, sizeof(buf) - o,
                          "{\"added_tokens\":[{\"id\":300,\"content\":\"<|eot|>\",\"special\":true}"
                          ",{\"id\":301,\"content\":\"<|bot|>\",\"special\":true}],"
                          "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                          "\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^"
                          "\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}"
                          "\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
                          "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
                          "\"add_prefix_space\":false,\"use_regex\":false}]},"
                          "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                          "\"ignore_merges\":true,\"vocab\":{");
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int cp;
        if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
            cp = b;
        else
            cp = 256 + n++;
        char u[16];
        if (cp < 0x80)
            snprintf(u, sizeof(u), "%s",
                     cp == '"'    ? "\\\""
                     : cp == '\\' ? "\\\\"
                                  : (char[]){(char)cp, 0});
        else
            snprintf(u, sizeof(u), "\\u%04x", cp);
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\"%s\":%d,", u, b);
    }
    o += (size_t)snprintf(buf + o, sizeof(buf) - o,
                          "\"\\u0120t\":256,\"he\":257,\"\\u0120the\":258,\"in\":259},"
                          "\"merges\":[\"\\u0120 t\",\"h e\",\"\\u0120t he\",\"i n\"]}}");
    return buf;
}

static void exercise(const tdm_tok_t *tok, const char *text, size_t len, const uint8_t *raw,
                     size_t rawlen, int lossless)
{
    uint32_t *ids;
    size_t n;
    if (tdm_tok_encode(tok, text, len, 1, &ids, &n) != TDM_OK)
        return;
    for (int skip = 0; skip < 2; skip++) {
        char *out;
        size_t olen;
        if (tdm_tok_decode(tok, ids, n, skip, &out, &olen) == TDM_OK) {
            if (lossless && skip && (olen != len || memcmp(out, text, len) != 0))
                abort();
            tdm_free(out);
        }
    }
    tdm_tok_stream_t *s;
    if (tdm_tok_stream_init(tok, 0, &s) == TDM_OK) {
        for (size_t i = 0; i <= n; i++) {
            char *p;
            size_t pl;
            tdm_status_t st =
                i < n ? tdm_tok_stream_step(s, ids[i], &p, &pl) : tdm_tok_stream_flush(s, &p, &pl);
            if (st == TDM_OK)
                tdm_free(p);
        }
        tdm_tok_stream_free(s);
    }
    tdm_free(ids);
    /* arbitrary ids, in or out of range */
    size_t k = rawlen / 2 > 64 ? 64 : rawlen / 2;
    uint32_t rid[64];
    for (size_t i = 0; i < k; i++)
        rid[i] = (uint32_t)raw[2 * i] | ((uint32_t)raw[2 * i + 1] << 8);
    char *out;
    size_t olen;
    if (tdm_tok_decode(tok, rid, k, 0, &out, &olen) == TDM_OK)
        tdm_free(out);
    tdm_tok_token_id(tok, "<s>");
    tdm_tok_bos_id(tok);
}

/* Length of the valid UTF-8 prefix (the encoder rejects anything else). */
static size_t utf8_prefix(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t b = s[i];
        size_t w = b < 0x80                 ? 1
                   : b >= 0xC2 && b <= 0xDF ? 2
                   : b >= 0xE0 && b <= 0xEF ? 3
                   : b >= 0xF0 && b <= 0xF4 ? 4
                                            : 0;
        if (!w || i + w > len)
            return i;
        for (size_t k = 1; k < w; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
        uint32_t cp = w == 1 ? b : (uint32_t)(b & (0x7F >> w));
        for (size_t k = 1; k < w; k++)
            cp = (cp << 6) | (s[i + k] & 0x3F);
        if ((w == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (w == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return i;
        i += w;
    }
    return i;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > (1 << 20))
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    tdm_tok_t *tok = NULL;
    char err[256];
    if ((mode & 1) == 0) {
        const uint8_t *nul = memchr(data, 0, size);
        size_t jlen = nul ? (size_t)(nul - data) : size;
        if (tdm_tok_load_mem((const char *)data, jlen, &tok, err, sizeof(err)) != TDM_OK)
            return 0;
        const uint8_t *text = nul ? nul + 1 : data;
        size_t tlen = nul ? size - jlen - 1 : jlen;
        exercise(tok, (const char *)text, utf8_prefix(text, tlen), data, size, 0);
        tdm_tok_free(tok);
        return 0;
    }
    size_t tlen = utf8_prefix(data, size);
    if (tdm_tok_load_mem(bytelevel_json(), strlen(bytelevel_json()), &tok, err, sizeof(err)) ==
        TDM_OK) {
        /* byte-level without specials in the text is lossless */
        int lossless = memmem(data, tlen, "<|", 2) == NULL;
        exercise(tok, (const char *)data, tlen, data, size, lossless);
        tdm_tok_free(tok);
    } else {
        abort(); /* the built-in tokenizer must load */
    }
    if (tdm_tok_load_mem(METASPACE_JSON, sizeof(METASPACE_JSON) - 1, &tok, err, sizeof(err)) ==
        TDM_OK) {
        exercise(tok, (const char *)data, tlen, data, size, 0);
        tdm_tok_free(tok);
    } else {
        abort();
    }
    return 0;
}
