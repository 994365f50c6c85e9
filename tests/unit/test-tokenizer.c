/*
 * test-tokenizer.c — the tokenizer on hand-made tokenizer.json files with hand-computed
 * expectations: BPE merge order, byte fallback + fuse_unk, Metaspace prepend_scheme first,
 * added tokens (lstrip/rstrip/single_word/normalized), templates, the decoder chains, the stream
 * decoder holding back partial UTF-8; the pre-tokenizer matchers and NFC piece by piece;
 * malformed files (each a FORMAT/UNSUPPORTED error naming the field); input bounds; and an
 * encode throughput figure on the Llama-3 fixture tokenizer. Goldens against HF are in
 * test-tokenizer-golden.c.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/mem.h>
#include <tdm/tokenizer.h>

#include "tap.h"
#include "tok_int.h"

/* Llama-2 style: Prepend + Replace normalizer, no pre-tokenizer, byte fallback. */
static const char SP_JSON[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":11,\"content\":\"<m>\",\"lstrip\":true,\"rstrip\":true,\"normalized\":false,"
    "\"special\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":"
    "\"\\u2581\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":"
    "\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
    "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{"
    "\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
    "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
    "\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0xC3>\":3,"
    "\"<0xA9>\":4,\"\\u2581\":5,\"a\":6,\"b\":7,\"\\u2581a\":8,\"ab\":9,\"\\u2581ab\":10},"
    "\"merges\":[[\"\\u2581\",\"a\"],\"a b\",[\"\\u2581a\",\"b\"]]}}";

static tdm_tok_t *load(const char *json)
{
    tdm_tok_t *tok = NULL;
    char err[256];
    tdm_status_t st = tdm_tok_load_mem(json, strlen(json), &tok, err, sizeof(err));
    if (st != TDM_OK)
        diag("load failed: %s: %s", tdm_status_str(st), err);
    return tok;
}

/* encode and compare to a -1 terminated list */
static void enc_is(const tdm_tok_t *tok, const char *text, int add, const int *exp,
                   const char *what)
{
    uint32_t *ids = NULL;
    size_t n = 0;
    tdm_status_t st = tdm_tok_encode(tok, text, strlen(text), add, &ids, &n);
    size_t en = 0;
    while (exp[en] >= 0)
        en++;
    int good = st == TDM_OK && n == en;
    for (size_t i = 0; good && i < n; i++)
        good = ids[i] == (uint32_t)exp[i];
    if (!ok(good, "%s", what)) {
        char buf[512];
        size_t o = 0;
        for (size_t i = 0; st == TDM_OK && i < n && o + 12 < sizeof(buf); i++)
            o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%u ", ids[i]);
        buf[o] = 0;
        diag("  status %s, got [%s]", tdm_status_str(st), buf);
    }
    tdm_free(ids);
}

static void dec_is(const tdm_tok_t *tok, const uint32_t *ids, size_t n, int skip, const char *exp,
                   const char *what)
{
    char *text = NULL;
    size_t len = 0;
    tdm_status_t st = tdm_tok_decode(tok, ids, n, skip, &text, &len);
    if (!ok(st == TDM_OK && len == strlen(exp) && memcmp(text, exp, len) == 0, "%s", what))
        diag("  got \"%s\" expected \"%s\"", st == TDM_OK ? text : "(err)", exp);
    tdm_free(text);
}

static void test_sentencepiece_style(void)
{
    tdm_tok_t *tok = load(SP_JSON);
    if (!ok(tok != NULL, "hand-made Llama-2 style tokenizer loads"))
        return;
    /* "ab ab" → "▁ab▁ab": ▁a (rank 0) first, then ▁ab (rank 2) */
    enc_is(tok, "ab ab", 0, (int[]){10, 10, -1}, "merges by rank: ab ab -> [10 10]");
    enc_is(tok, "ab ab", 1, (int[]){1, 10, 10, -1}, "template adds <s>");
    enc_is(tok, "", 0, (int[]){-1}, "empty input -> no ids");
    enc_is(tok, "", 1, (int[]){1, -1}, "empty input with specials -> [<s>]");
    enc_is(tok, "\xC3\xA9", 0, (int[]){5, 3, 4, -1}, "é -> ▁ + byte fallback <0xC3><0xA9>");
    enc_is(tok, "zzq", 0, (int[]){5, 0, -1}, "unknown chars without byte tokens fuse to one unk");
    /* <s> is not normalized: split out of the raw text; the section after it is normalized on
     * its own, so it gets the ▁ prefix too (HF's behaviour for Prepend) */
    enc_is(tok, "<s>ab", 0, (int[]){1, 10, -1}, "special token then normalized section");
    /* lstrip/rstrip eat the spaces around <m>; "a" → ▁a, "b" → ▁b (▁ then b) */
    enc_is(tok, "a <m> b", 0, (int[]){8, 11, 5, 7, -1}, "lstrip/rstrip added token");
    uint32_t ids[] = {1, 10, 5, 3, 4, 11};
    dec_is(tok, ids, 6, 0, "<s> ab é<m>", "decode keeps specials (Strip removes one space)");
    dec_is(tok, ids, 6, 1, "ab é<m>", "decode skips specials, keeps non-special added");
    uint32_t broken[] = {8, 3};
    dec_is(tok, broken, 2, 0, "a\xEF\xBF\xBD", "lone fallback byte decodes to U+FFFD");
    uint32_t oob[] = {8, 999999, 7};
    dec_is(tok, oob, 3, 0, "ab", "ids without a token are skipped");
    is_int(tdm_tok_token_id(tok, "<s>"), 1, "token_id(<s>)");
    is_int(tdm_tok_token_id(tok, "\xE2\x96\x81"
                                 "ab"),
           10, "token_id(▁ab)");
    ok(tdm_tok_token_id(tok, "nope") == TDM_TOK_NO_ID, "token_id of an unknown token");
    is_int(tdm_tok_bos_id(tok), 1, "bos id from the template");
    is_int(tdm_tok_vocab_size(tok), 12, "vocab size");
    ok(tdm_tok_is_special(tok, 1) && !tdm_tok_is_special(tok, 11), "special flags");

    /* stream: ▁ then the two bytes of é: nothing until the character is complete */
    tdm_tok_stream_t *s;
    tdm_tok_stream_init(tok, 0, &s);
    uint32_t seq[] = {8, 5, 3, 4, 10};
    const char *want[] = {"a", " ", "", "é", " ab"};
    int good = 1;
    for (size_t i = 0; i < 5; i++) {
        char *p;
        size_t pl;
        if (tdm_tok_stream_step(s, seq[i], &p, &pl) != TDM_OK || strcmp(p, want[i]) != 0) {
            diag("  step %zu got \"%s\" want \"%s\"", i, p, want[i]);
            good = 0;
        }
        tdm_free(p);
    }
    ok(good, "stream decode holds back partial UTF-8 and fuses byte fallback pieces");
    tdm_tok_stream_free(s);
    tdm_tok_stream_init(tok, 0, &s);
    char *p;
    size_t pl;
    tdm_tok_stream_step(s, 8, &p, &pl);
    tdm_free(p);
    tdm_tok_stream_step(s, 3, &p, &pl);
    ok(pl == 0, "stream holds an incomplete byte");
    tdm_free(p);
    tdm_tok_stream_flush(s, &p, &pl);
    ok(strcmp(p, "\xEF\xBF\xBD") == 0, "flush emits the held broken byte as U+FFFD");
    tdm_free(p);
    tdm_tok_stream_free(s);
    tdm_tok_free(tok);
}

static void test_metaspace_first(void)
{
    /* same vocabulary, Metaspace pre-tokenizer (prepend_scheme first, split) and decoder */
    char *j = tdm_strdup(SP_JSON);
    char *norm = strstr(j, "\"normalizer\":{");
    char *pre = strstr(j, "\"pre_tokenizer\":null,");
    /* blank the normalizer, replace the null pre-tokenizer */
    size_t nlen = (size_t)(pre - norm);
    memset(norm, ' ', nlen);
    memcpy(norm, "\"normalizer\":null,", 18);
    char buf[4096];
    snprintf(buf, sizeof(buf),
             "%.*s\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":"
             "\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true},%s",
             (int)(pre - j), j, pre + strlen("\"pre_tokenizer\":null,"));
    tdm_free(j);
    tdm_tok_t *tok = load(buf);
    if (!ok(tok != NULL, "Metaspace pre-tokenizer variant loads"))
        return;
    enc_is(tok, "ab ab", 0, (int[]){10, 10, -1}, "metaspace: ab ab -> ▁ab ▁ab");
    /* first: no ▁ after a leading special token */
    enc_is(tok, "<s>ab", 0, (int[]){1, 9, -1}, "prepend_scheme first: none after <s>");
    enc_is(tok, "  a", 0, (int[]){5, 8, -1}, "leading spaces split MergedWithNext");
    tdm_tok_free(tok);
}

static void split_is(tok_pat_t pat, const char *text, const char *exp, const char *what)
{
    /* exp: pieces separated by '|' */
    char got[512];
    size_t o = 0, len = strlen(text);
    for (size_t pos = 0; pos < len;) {
        size_t n = tdm_tok_pat_match(pat, (const uint8_t *)text, len, pos);
        if (o)
            got[o++] = '|';
        memcpy(got + o, text + pos, n);
        o += n;
        pos += n;
    }
    got[o] = 0;
    if (!ok(strcmp(got, exp) == 0, "%s", what))
        diag("  got \"%s\" expected \"%s\"", got, exp);
}

static void test_patterns(void)
{
    split_is(TOK_PAT_GPT2, "Hello  world!! I'M 12 x", "Hello| | world|!!| I|'|M| 12| x",
             "gpt2: spaces before a word, case-sensitive contractions");
    split_is(TOK_PAT_GPT2, "a \t\n", "a| \t\n", "gpt2: trailing whitespace run");
    split_is(TOK_PAT_LLAMA3, "abc 12345\r\n\r\n  x", "abc| |123|45|\r\n\r\n| | x",
             "llama3: digit triples, newline runs, \\s+(?!\\S)");
    split_is(TOK_PAT_LLAMA3, "I'M don't ...\n\nok", "I|'M| don|'t| ...\n\n|ok",
             "llama3: case-insensitive contractions, punctuation absorbs newlines");
    split_is(TOK_PAT_LLAMA3, "\xC2\xA0word\ttab", "\xC2\xA0word|\ttab",
             "llama3: NBSP and tab attach to the following word");
    split_is(TOK_PAT_QWEN2, "x123 \xE6\x97\xA5\xE6\x9C\xAC", "x|1|2|3| \xE6\x97\xA5\xE6\x9C\xAC",
             "qwen2: single digits, CJK letters with a leading space");
    split_is(TOK_PAT_LLAMA3, "\xF0\x9F\x98\x80\xF0\x9F\x8E\x89 done",
             "\xF0\x9F\x98\x80\xF0\x9F\x8E\x89| done", "llama3: emoji are 'other'");
}

static void nfc_is(const char *in, const char *exp, const char *what)
{
    tdm_arena_t a;
    tdm_arena_init(&a, 1024, 0);
    size_t n;
    char *out = tdm_tok_uc_nfc(&a, in, strlen(in), &n);
    ok(out && n == strlen(exp) && memcmp(out, exp, n) == 0, "%s", what);
    tdm_arena_free(&a);
}

static void test_unicode(void)
{
    nfc_is("cafe\xCC\x81", "caf\xC3\xA9", "nfc: e + combining acute -> é");
    nfc_is("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81", "nfc: Hangul L V T -> syllable");
    nfc_is("\xE2\x84\xAB", "\xC3\x85", "nfc: Angstrom sign -> Å (singleton)");
    nfc_is("a\xCC\x87\xCC\xA3", "\xE1\xBA\xA1\xCC\x87", "nfc: canonical reordering then compose");
    nfc_is("plain ascii", "plain ascii", "nfc: ascii unchanged");
    ok(tdm_tok_uc_class(0x65E5) == TOK_CLS_L && tdm_tok_uc_class(0x0663) == TOK_CLS_N &&
           tdm_tok_uc_class(0x3000) == TOK_CLS_WS && tdm_tok_uc_class(0x1F600) == TOK_CLS_OTHER &&
           tdm_tok_uc_class(0xA0) == TOK_CLS_WS && tdm_tok_uc_class(0x200D) == TOK_CLS_OTHER,
       "unicode classes: CJK L, Arabic digit N, ideographic space WS, emoji/ZWJ other");
    size_t n;
    char *s = tdm_tok_utf8_lossy((const uint8_t *)"a\xE2\x82\xF0\x9F\x98\x80\xFF", 8, &n);
    ok(strcmp(s, "a\xEF\xBF\xBD\xF0\x9F\x98\x80\xEF\xBF\xBD") == 0,
       "lossy UTF-8: one U+FFFD per maximal invalid subpart");
    tdm_free(s);
}

static void bad_is(const char *json, tdm_status_t want, const char *needle, const char *what)
{
    tdm_tok_t *tok = NULL;
    char err[256] = "";
    tdm_status_t st = tdm_tok_load_mem(json, strlen(json), &tok, err, sizeof(err));
    if (!ok(st == want && tok == NULL && strstr(err, needle) != NULL, "%s", what))
        diag("  got %s \"%s\", want %s mentioning \"%s\"", tdm_status_name(st), err,
             tdm_status_name(want), needle);
    tdm_tok_free(tok);
}

#define M(v, m) "{\"model\":{\"type\":\"BPE\",\"vocab\":" v ",\"merges\":" m "}}"

static void test_malformed(void)
{
    bad_is("", TDM_ERR_FORMAT, "tokenizer.json", "empty file");
    bad_is("[1]", TDM_ERR_FORMAT, "JSON object", "not an object");
    bad_is("{}", TDM_ERR_FORMAT, "model", "missing model");
    bad_is("{\"model\":{\"type\":\"WordPiece\"}}", TDM_ERR_UNSUPPORTED, "model.type",
           "unsupported model type");
    bad_is(M("[]", "[]"), TDM_ERR_FORMAT, "model.vocab", "vocab not an object");
    bad_is(M("{\"a\":\"1\"}", "[]"), TDM_ERR_FORMAT, "model.vocab[\"a\"]", "id not an integer");
    bad_is(M("{\"a\":-1}", "[]"), TDM_ERR_FORMAT, "out of range", "negative id");
    bad_is(M("{\"a\":99999999}", "[]"), TDM_ERR_FORMAT, "out of range", "huge id");
    bad_is(M("{\"a\":0,\"b\":9000000}", "[]"), TDM_ERR_FORMAT, "only 2 tokens", "sparse ids");
    bad_is(M("{\"a\":0,\"b\":0}", "[]"), TDM_ERR_FORMAT, "used by both", "duplicate ids");
    bad_is(M("{\"a\":0,\"a\":1}", "[]"), TDM_ERR_FORMAT, "duplicate", "duplicate keys");
    bad_is(M("{\"a\":0}", "{}"), TDM_ERR_FORMAT, "model.merges", "merges not an array");
    bad_is(M("{\"a\":0}", "[\"a\"]"), TDM_ERR_FORMAT, "model.merges[0]", "merge without space");
    bad_is(M("{\"a\":0}", "[\"a a a\"]"), TDM_ERR_FORMAT, "model.merges[0]", "three-part merge");
    bad_is(M("{\"a\":0}", "[[\"a\"]]"), TDM_ERR_FORMAT, "model.merges[0]", "one-element pair");
    bad_is(M("{\"a\":0}", "[\"a b\"]"), TDM_ERR_FORMAT, "not in vocab", "merge of unknown token");
    bad_is(M("{\"a\":0}", "[\"a a\"]"), TDM_ERR_FORMAT, "merged token \"aa\"",
           "merged token missing");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[],\"unk_token\":\"<unk>\"}}",
           TDM_ERR_FORMAT, "model.unk_token", "unk not in vocab");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":{}}", TDM_ERR_FORMAT,
           "added_tokens", "added_tokens not an array");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":1,"
           "\"content\":\"x\"},{\"id\":1,\"content\":\"y\"}]}",
           TDM_ERR_FORMAT, "used twice", "added tokens share an id");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":1}]}",
           TDM_ERR_FORMAT, "added_tokens[0].content", "added token without content");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"NFKC\"}}",
           TDM_ERR_UNSUPPORTED, "normalizer.type", "unsupported normalizer");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
           "\"pattern\":{\"Regex\":\"\\\\w+\"},\"behavior\":\"Isolated\"}}",
           TDM_ERR_UNSUPPORTED, "pre_tokenizer.pattern", "unknown split regex");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"decoder\":{\"type\":\"Sequence\","
           "\"decoders\":[{\"type\":\"Strip\",\"content\":\" \",\"start\":\"1\",\"stop\":0}]}}",
           TDM_ERR_FORMAT, "decoder.decoders[0].start", "Strip with a string start");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":{\"type\":"
           "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],"
           "\"special_tokens\":{}}}",
           TDM_ERR_FORMAT, "post_processor.single[0]", "template names an unknown special");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":{\"type\":"
           "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":"
           "{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"ids\":[7]}}}}",
           TDM_ERR_FORMAT, "template id 7", "template id out of range");
    bad_is("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"decoder\":{\"type\":\"Sequence\","
           "\"decoders\":[{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Sequence\",\"decoders\":"
           "[{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Sequence\",\"decoders\":[{\"type\":"
           "\"Sequence\",\"decoders\":[{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Sequence\","
           "\"decoders\":[{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Sequence\",\"decoders\":"
           "[]}]}]}]}]}]}]}]}]}]}}",
           TDM_ERR_FORMAT, "nested too deeply", "deep nesting");
    tdm_tok_t *tok = NULL;
    char err[128];
    ok(tdm_tok_load("/nonexistent/tokenizer.json", &tok, err, sizeof(err)) == TDM_ERR_NOTFOUND &&
           !tok,
       "missing file is NOTFOUND");
}

static void test_bounds_and_speed(void)
{
    tdm_tok_t *tok = load(SP_JSON);
    uint32_t *ids = NULL;
    size_t n;
    ok(tdm_tok_encode(tok, "a\xC3", 2, 0, &ids, &n) == TDM_ERR_INVAL && !ids,
       "invalid UTF-8 input is INVAL");
    ok(tdm_tok_encode(tok, "a", TDM_TOK_MAX_INPUT_BYTES + 1, 0, &ids, &n) == TDM_ERR_OVERFLOW,
       "input over the cap is OVERFLOW");
    tdm_tok_free(tok);

    const char *src = getenv("TDM_SRCDIR");
    char path[4096], err[256];
    snprintf(path, sizeof(path), "%s/tests/fixtures/models/tiny-llama3/tokenizer.json",
             src ? src : ".");
    if (tdm_tok_load(path, &tok, err, sizeof(err)) != TDM_OK) {
        char why[512];
        snprintf(why, sizeof(why), "the llama3 fixture tokenizer does not load: %s", err);
        bail_out(why);
    }
    const char *para = "The quick brown fox jumps over the lazy dog, 1234 times! "
                       "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E caf\xC3\xA9 \xF0\x9F\x98\x80\n";
    size_t plen = strlen(para), reps = (1 << 20) / plen;
    char *big = tdm_malloc(plen * reps + 1);
    for (size_t i = 0; i < reps; i++)
        memcpy(big + i * plen, para, plen);
    struct timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    tdm_status_t st = tdm_tok_encode(tok, big, plen * reps, 0, &ids, &n);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ok(st == TDM_OK && n > 0, "encode 1 MiB with the Llama-3 fixture tokenizer");
    diag("encode: %.1f MB/s, %.2f M tokens/s (%zu tokens, CPU time; slow under sanitizers)",
         (double)(plen * reps) / sec / 1e6, (double)n / sec / 1e6, n);
    char *text;
    size_t tl;
    ok(st == TDM_OK && tdm_tok_decode(tok, ids, n, 0, &text, &tl) == TDM_OK && tl == plen * reps &&
           memcmp(text, big, tl) == 0,
       "byte-level round trip of 1 MiB is exact");
    if (st == TDM_OK)
        tdm_free(text);
    tdm_free(ids);
    tdm_free(big);
    tdm_tok_free(tok);
}

int main(void)
{
    test_sentencepiece_style();
    test_metaspace_first();
    test_patterns();
    test_unicode();
    test_malformed();
    test_bounds_and_speed();
    return done_testing();
}
