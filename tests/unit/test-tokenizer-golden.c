/*
 * test-tokenizer-golden.c — the tokenizer against HF `tokenizers` on every fixture golden
 * (tests/fixtures/goldens/<name>.json, tokenizer from tests/fixtures/models/<name>/): encode with
 * and without special tokens, decode with and without skipping specials, split/prefix decodes,
 * every single-token decode, and the stream decoder reproducing each prefix decode. Exact
 * equality on every case is the acceptance criterion.
 */
#include "config.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/tokenizer.h>

#include "tap.h"

static int ids_equal(json_t *arr, const uint32_t *ids, size_t n)
{
    if (json_array_size(arr) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((json_int_t)ids[i] != json_integer_value(json_array_get(arr, i)))
            return 0;
    return 1;
}

static uint32_t *ids_of(json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    uint32_t *v = tdm_malloc((*n + 1) * sizeof(uint32_t));
    for (size_t i = 0; i < *n; i++)
        v[i] = (uint32_t)json_integer_value(json_array_get(arr, i));
    return v;
}

static void diag_ids(const char *what, const uint32_t *ids, size_t n)
{
    char buf[2048];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 16 < sizeof(buf); i++)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%u ", ids[i]);
    buf[o] = '\0';
    diag("  %s: [%s]", what, buf);
}

static int decode_is(const tdm_tok_t *tok, const uint32_t *ids, size_t n, int skip, json_t *expect,
                     const char *ctx)
{
    char *text = NULL;
    size_t len = 0;
    tdm_status_t st = tdm_tok_decode(tok, ids, n, skip, &text, &len);
    int ok_ = st == TDM_OK && json_string_length(expect) == len &&
              memcmp(json_string_value(expect), text, len) == 0;
    if (!ok_)
        diag("  %s: got \"%s\" expected \"%s\"", ctx, st == TDM_OK ? text : "(error)",
             json_string_value(expect));
    tdm_free(text);
    return ok_;
}

static int stream_is(const tdm_tok_t *tok, const uint32_t *ids, size_t n, json_t *expect,
                     const char *ctx)
{
    tdm_tok_stream_t *s;
    if (tdm_tok_stream_init(tok, 0, &s) != TDM_OK)
        return 0;
    char *acc = tdm_strdup("");
    size_t acc_len = 0;
    int good = 1;
    for (size_t i = 0; i <= n && good; i++) {
        char *piece;
        size_t plen;
        tdm_status_t st = i < n ? tdm_tok_stream_step(s, ids[i], &piece, &plen)
                                : tdm_tok_stream_flush(s, &piece, &plen);
        if (st != TDM_OK) {
            diag("  %s: stream step %zu: %s", ctx, i, tdm_status_str(st));
            good = 0;
            break;
        }
        /* never a broken character */
        if (i < n && plen >= 3 && memcmp(piece + plen - 3, "\xEF\xBF\xBD", 3) == 0) {
            diag("  %s: stream step %zu emitted a trailing U+FFFD", ctx, i);
            good = 0;
        }
        acc = tdm_realloc(acc, acc_len + plen + 1);
        memcpy(acc + acc_len, piece, plen);
        acc_len += plen;
        acc[acc_len] = '\0';
        tdm_free(piece);
    }
    if (good && (json_string_length(expect) != acc_len ||
                 memcmp(json_string_value(expect), acc, acc_len) != 0)) {
        diag("  %s: stream got \"%s\" expected \"%s\"", ctx, acc, json_string_value(expect));
        good = 0;
    }
    tdm_free(acc);
    tdm_tok_stream_free(s);
    return good;
}

static void run_golden(const char *src, const char *name)
{
    char path[4096], err[512];
    snprintf(path, sizeof(path), "%s/tests/fixtures/goldens/%s.json", src, name);
    json_error_t jerr;
    json_t *g = json_load_file(path, JSON_ALLOW_NUL, &jerr);
    if (!ok(g != NULL, "%s: golden parses", name)) {
        diag("  %s", jerr.text);
        return;
    }
    snprintf(path, sizeof(path), "%s/tests/fixtures/models/%s/tokenizer.json", src, name);
    tdm_tok_t *tok = NULL;
    tdm_status_t st = tdm_tok_load(path, &tok, err, sizeof(err));
    if (!ok(st == TDM_OK, "%s: tokenizer.json loads", name)) {
        diag("  %s: %s", tdm_status_str(st), err);
        json_decref(g);
        return;
    }
    json_t *tz = json_object_get(g, "tokenization");
    json_t *texts = json_object_get(tz, "texts");
    size_t nt = json_array_size(texts), bad_enc = 0, bad_dec = 0;
    for (size_t i = 0; i < nt; i++) {
        json_t *t = json_array_get(texts, i);
        const char *text = json_string_value(json_object_get(t, "text"));
        size_t tlen = json_string_length(json_object_get(t, "text"));
        for (int sp = 1; sp >= 0; sp--) {
            uint32_t *ids = NULL;
            size_t n = 0;
            json_t *exp = json_object_get(t, sp ? "ids" : "ids_no_special");
            st = tdm_tok_encode(tok, text, tlen, sp, &ids, &n);
            if (st != TDM_OK || !ids_equal(exp, ids, n)) {
                if (bad_enc++ < 6) {
                    diag("  text %zu %s \"%s\": %s", i, sp ? "ids" : "ids_no_special", text,
                         tdm_status_str(st));
                    if (st == TDM_OK)
                        diag_ids("got", ids, n);
                    size_t en;
                    uint32_t *e = ids_of(exp, &en);
                    diag_ids("expected", e, en);
                    tdm_free(e);
                }
            }
            tdm_free(ids);
        }
        size_t n;
        uint32_t *ids = ids_of(json_object_get(t, "ids"), &n);
        char ctx[64];
        snprintf(ctx, sizeof(ctx), "text %zu decode", i);
        if (!decode_is(tok, ids, n, 0, json_object_get(t, "decode"), ctx))
            bad_dec++;
        snprintf(ctx, sizeof(ctx), "text %zu decode_skip_special", i);
        if (!decode_is(tok, ids, n, 1, json_object_get(t, "decode_skip_special"), ctx))
            bad_dec++;
        tdm_free(ids);
    }
    ok(nt > 0 && bad_enc == 0, "%s: encode exact on %zu texts x2 (%zu mismatches)", name, nt,
       bad_enc);
    ok(bad_dec == 0, "%s: decode exact on %zu texts x2 (%zu mismatches)", name, nt, bad_dec);

    json_t *sd = json_object_get(tz, "split_decodes");
    size_t bad = 0;
    for (size_t i = 0; i < json_array_size(sd); i++) {
        json_t *e = json_array_get(sd, i);
        size_t n;
        uint32_t *ids = ids_of(json_object_get(e, "ids"), &n);
        char ctx[64];
        snprintf(ctx, sizeof(ctx), "split_decodes[%zu]", i);
        if (!decode_is(tok, ids, n, 0, json_object_get(e, "decode"), ctx))
            bad++;
        tdm_free(ids);
    }
    ok(bad == 0, "%s: %zu split decodes exact", name, json_array_size(sd));

    json_t *pd = json_object_get(tz, "prefix_decodes");
    size_t bad_stream = 0, cases = 0;
    bad = 0;
    for (size_t i = 0; i < json_array_size(pd); i++) {
        json_t *e = json_array_get(pd, i), *decs = json_object_get(e, "decodes");
        size_t n;
        uint32_t *ids = ids_of(json_object_get(e, "ids"), &n);
        for (size_t k = 1; k <= n && k <= json_array_size(decs); k++) {
            char ctx[64];
            snprintf(ctx, sizeof(ctx), "prefix_decodes[%zu][%zu]", i, k - 1);
            cases++;
            if (!decode_is(tok, ids, k, 0, json_array_get(decs, k - 1), ctx) && bad++ > 4)
                break;
        }
        char ctx[64];
        snprintf(ctx, sizeof(ctx), "prefix_decodes[%zu] stream", i);
        if (n && !stream_is(tok, ids, n, json_array_get(decs, n - 1), ctx))
            bad_stream++;
        tdm_free(ids);
    }
    ok(bad == 0, "%s: %zu prefix decodes exact", name, cases);
    ok(bad_stream == 0, "%s: stream decode of %zu sequences equals full decode", name,
       json_array_size(pd));

    json_t *td = json_object_get(tz, "token_decodes");
    bad = 0;
    for (size_t i = 0; i < json_array_size(td); i++) {
        uint32_t id = (uint32_t)i;
        char ctx[64];
        snprintf(ctx, sizeof(ctx), "token_decodes[%zu]", i);
        if (!decode_is(tok, &id, 1, 0, json_array_get(td, i), ctx) && bad++ > 4)
            break;
    }
    ok(bad == 0 && json_array_size(td) == tdm_tok_vocab_size(tok),
       "%s: all %zu single-token decodes exact (vocab size %u)", name, json_array_size(td),
       tdm_tok_vocab_size(tok));

    json_t *chat = json_object_get(g, "chat");
    bad = 0;
    for (size_t i = 0; i < json_array_size(chat); i++) {
        json_t *c = json_array_get(chat, i), *text = json_object_get(c, "text");
        uint32_t *ids = NULL;
        size_t n = 0;
        st = tdm_tok_encode(tok, json_string_value(text), json_string_length(text), 0, &ids, &n);
        if (st != TDM_OK || !ids_equal(json_object_get(c, "ids"), ids, n))
            bad++;
        tdm_free(ids);
    }
    if (json_array_size(chat))
        ok(bad == 0, "%s: %zu rendered chat prompts encode exactly", name, json_array_size(chat));
    tdm_tok_free(tok);
    json_decref(g);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(void)
{
    const char *src = getenv("TDM_SRCDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/tests/fixtures/goldens", src ? src : ".");
    DIR *d = opendir(dir);
    if (!d)
        bail_out("no tests/fixtures/goldens");
    char *names[64];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 64) {
        size_t l = strlen(de->d_name);
        if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0)
            names[n++] = tdm_strndup(de->d_name, l - 5);
    }
    closedir(d);
    qsort(names, n, sizeof(char *), cmp_str);
    ok(n > 0, "found %zu goldens", n);
    for (size_t i = 0; i < n; i++) {
        run_golden(src ? src : ".", names[i]);
        tdm_free(names[i]);
    }
    return done_testing();
}
