/*
 * gpu_serving_engine.c — the ceiling of bench/gpu-serving.sh: the CUDA engine's own batched
 * decode (kernels/cuda/engine.h) on the checkpoint the worker serves, at the batch sizes the load
 * generator's concurrency sweep uses, in the same run. Per batch size: bs random prompts of
 * --prompt-len tokens prefilled, then --steps greedy steps through the decode graphs in two forms:
 *   ids:    the argmax on the device, bs ids copied back (what the worker's device-greedy path
 *           does: docs/cuda.md "Sampling on the device");
 *   logits: bs full logits rows copied back as well (the host sampler's path).
 * Each the median of --reps runs; step_us = one step's wall time. Then, per --mixed-batch size,
 * the step the overlap scheduler mixes (its "mixed" rows): bs decode rows beside one new
 * sequence's --mixed-chunk prompt tokens in the same call, ids form, on the engine's default
 * (mixed_decode on: a mixed call's one-token rows through the decode attention) and on a
 * second engine with mixed_decode off (every row through the flash tiles), with the decode-only
 * step of the same rows beside them. With --price-chunks, the price of a prompt token: the
 * last --mixed-batch size's step beside one chunk of each listed size (default engine), so that
 * (step - decode-only step) / chunk is read off at several chunk sizes ("price"). Prints one JSON
 * object.
 * --profile K: the K-th timed configuration (1-based, in the order printed: each batch's ids and
 * logits forms, each mixed batch's mixed / flash-only / decode-only forms, each price chunk) has
 * its first timed run's last step between cudaProfilerStart and cudaProfilerStop, for
 * `ncu --profile-from-start off` (bench/gpu-step-profile.sh); nothing else is profiled.
 * --page-order interleaved: sequence i's page j is page j bs + i instead of i per + j (the order a
 * worker's allocator hands pages to sequences growing side by side); --kv-spread S: page ids S
 * apart in a pool S times larger (a worker's pool is most of the card; does the decode attention
 * pay for scattered pages?). --ragged K:L: the first K sequences of every batch have L-token
 * prompts, the others --prompt-len (a serving batch's contexts differ; does a step cost its
 * longest row's attention or its rows' average?).
 * --concurrent "C1 C2 ...": a prompt chunk of C tokens on a second engine's stream beside the
 * last --mixed-batch size's decode step, both in flight at once (launch/launch/finish/finish a
 * step), instead of in the decode call: does the GPU hide the chunk's compute under the decode
 * step's weight stream? Per C: the decode step alone and the chunk alone (the same async form),
 * both at once with both streams at the default priority and with the decode engine's at the
 * highest (engine.h stream_priority), and the mixed call of the same rows and chunk (the
 * engine's way today) as the anchor.
 * Not a test. Usage: gpu_serving_engine --model DIR [--batch "1 8 32"] [--prompt-len 128]
 *   [--steps 128] [--reps 3] [--mixed-batch "32 64"] [--mixed-chunk 128]
 *   [--price-chunks "32 400 1024"] [--profile K] [--page-order together|interleaved]
 *   [--kv-spread S] [--ragged K:L] [--concurrent "128 256 512"]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_profiler_api.h>

#include <tdm/model.h>

#include "kernels/cuda/engine.h"

#define MAX_BS 256u
#define MAX_CHUNK 4096u
#define MAX_CHUNK_PAGES 256u /* at least MAX_CHUNK / the smallest page size */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint32_t g_profile;          /* --profile K; 0: none */
static uint32_t g_spread = 1;       /* --kv-spread S: page ids S apart */
static int g_interleave;            /* --page-order interleaved */
static uint32_t g_config;           /* the timed configuration being run, 1-based */
static uint32_t g_rag_k, g_rag_len; /* --ragged K:L */

/* sequence i's prompt length */
static uint32_t len_of(uint32_t i, uint32_t plen)
{
    return i < g_rag_k ? g_rag_len : plen;
}

static int usage(void)
{
    fprintf(stderr, "usage: gpu_serving_engine --model DIR [--batch \"1 8 32\"] "
                    "[--prompt-len N] [--steps N] [--reps N] [--mixed-batch \"32 64\"] "
                    "[--mixed-chunk N] [--price-chunks \"32 400 1024\"] [--profile K] "
                    "[--page-order together|interleaved] [--kv-spread S] [--ragged K:L] "
                    "[--concurrent \"128 256 512\"]\n");
    return 2;
}

/* a list of sizes ("1 8 32"), at most 16, each in 1..lim; *max raised to the largest */
static int parse_list(const char *list, const char *what, uint32_t lim, uint32_t *out, uint32_t *n,
                      uint32_t *max)
{
    for (char *p = (char *)list, *end; *n < 16; p = end) {
        unsigned long b = strtoul(p, &end, 10);
        if (end == p)
            break;
        if (b == 0 || b > lim) {
            fprintf(stderr, "gpu_serving_engine: %s %lu not in 1..%u\n", what, b, lim);
            return 1;
        }
        out[(*n)++] = (uint32_t)b;
        if (b > *max)
            *max = (uint32_t)b;
    }
    return 0;
}

/* bs sequences (prompts of len_of(i) tokens, at most lmax): prefill in calls of at most
 * max_tokens tokens, then `steps` steps; returns the
 * decode seconds. chunk > 0: each step also carries a sequence's first `chunk` prompt tokens
 * (positions 0..chunk-1 of pages of its own, the same every step), after the decode rows.
 * prof: the last step between cudaProfilerStart and Stop (--profile).
 * ce (--concurrent): each step launches the decode rows on e (none when bs is 0) and the chunk
 * (none when 0) on ce, then waits for both (the async form, no ids copied back: every step
 * decodes the prefill's ids again at the next positions). */
static tdm_status_t run2(tdm_cuda_engine_t *e, tdm_cuda_engine_t *ce, uint32_t bs, uint32_t plen,
                         uint32_t steps, uint32_t per, uint32_t max_tokens, uint32_t vocab,
                         float *logits, uint32_t chunk, int prof, double *ret_s)
{
    const uint32_t lmax = g_rag_k && g_rag_len > plen ? g_rag_len : plen;
    static uint32_t pages[MAX_BS * 512 + MAX_CHUNK_PAGES];
    static int32_t chunk_ids[MAX_CHUNK];
    tdm_cuda_seq_t seqs[MAX_BS + 1];
    int32_t cur[MAX_BS], ids[MAX_BS + 1];
    int32_t *prompt = malloc((size_t)bs * lmax * sizeof(int32_t) + 1); /* bs 0: chunk alone */
    uint32_t rows;
    if (!prompt)
        return TDM_ERR_NOMEM;
    srand(bs * 7919u + plen);
    for (size_t i = 0; i < (size_t)bs * lmax; i++)
        prompt[i] = (int32_t)((unsigned)rand() % vocab);
    /* sequence i's page j: page i per + j (each sequence's pages together), or j bs + i
     * (interleaved, as sequences that grew a page at a time side by side get them), times the
     * spread (the pages scattered over a pool that many times larger, as in a worker's pool) */
    for (uint32_t i = 0; i < bs; i++)
        for (uint32_t j = 0; j < per; j++)
            pages[i * per + j] = (g_interleave ? j * bs + i : i * per + j) * g_spread;
    for (uint32_t i = 0; i < MAX_CHUNK_PAGES; i++)
        pages[bs * per + i] = bs * per * g_spread + i;
    for (uint32_t i = 0; i < chunk; i++)
        chunk_ids[i] = (int32_t)((unsigned)rand() % vocab);
    uint32_t group = max_tokens / lmax ? max_tokens / lmax : 1;
    for (uint32_t s0 = 0; s0 < bs; s0 += group) {
        uint32_t n = bs - s0 < group ? bs - s0 : group;
        for (uint32_t i = 0; i < n; i++)
            seqs[i] = (tdm_cuda_seq_t){prompt + (size_t)(s0 + i) * lmax,
                                       len_of(s0 + i, plen),
                                       0,
                                       pages + (s0 + i) * per,
                                       per,
                                       0};
        tdm_status_t st = tdm_cuda_engine_forward(e, seqs, n, NULL, ids, n, &rows);
        if (st != TDM_OK) {
            free(prompt);
            return st;
        }
        memcpy(cur + s0, ids, n * sizeof(int32_t));
    }
    free(prompt);
    double t0 = now_s();
    for (uint32_t s = 0; s < steps; s++) {
        for (uint32_t i = 0; i < bs; i++)
            seqs[i] = (tdm_cuda_seq_t){&cur[i], 1, len_of(i, plen) + s, pages + i * per, per, 0};
        if (chunk)
            seqs[bs] = (tdm_cuda_seq_t){chunk_ids, chunk, 0, pages + bs * per, MAX_CHUNK_PAGES, 0};
        if (ce) {
            const int slot = (int)(s & 1);
            uint32_t crows;
            if (bs)
                TDM_TRY(tdm_cuda_engine_launch(e, seqs, bs, bs, &rows, slot));
            if (chunk)
                TDM_TRY(tdm_cuda_engine_launch(ce, seqs + bs, 1, 1, &crows, slot));
            if (bs)
                TDM_TRY(tdm_cuda_engine_finish(e, slot));
            if (chunk)
                TDM_TRY(tdm_cuda_engine_finish(ce, slot));
            continue;
        }
        const int p = prof && s + 1 == steps;
        if (p && cudaProfilerStart() != cudaSuccess)
            return TDM_ERR_CUDA;
        tdm_status_t st = tdm_cuda_engine_forward(e, seqs, bs + (chunk > 0), logits, ids,
                                                  bs + (chunk > 0), &rows);
        if (p && cudaProfilerStop() != cudaSuccess && st == TDM_OK)
            st = TDM_ERR_CUDA;
        TDM_TRY(st);
        memcpy(cur, ids, bs * sizeof(int32_t));
    }
    *ret_s = now_s() - t0;
    return TDM_OK;
}

static tdm_status_t run(tdm_cuda_engine_t *e, uint32_t bs, uint32_t plen, uint32_t steps,
                        uint32_t per, uint32_t max_tokens, uint32_t vocab, float *logits,
                        uint32_t chunk, int prof, double *ret_s)
{
    return run2(e, NULL, bs, plen, steps, per, max_tokens, vocab, logits, chunk, prof, ret_s);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *batch = "1 8 32", *mbatch = "", *pchunks = "", *cchunks = "";
    uint32_t plen = 128, steps = 128, reps = 3, chunk = 128;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        if (!strcmp(a, "--model"))
            dir = v;
        else if (!strcmp(a, "--batch"))
            batch = v;
        else if (!strcmp(a, "--prompt-len"))
            plen = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--steps"))
            steps = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--reps"))
            reps = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--mixed-batch"))
            mbatch = v;
        else if (!strcmp(a, "--mixed-chunk"))
            chunk = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--price-chunks"))
            pchunks = v;
        else if (!strcmp(a, "--concurrent"))
            cchunks = v;
        else if (!strcmp(a, "--profile"))
            g_profile = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--kv-spread"))
            g_spread = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--page-order") && !strcmp(v, "interleaved"))
            g_interleave = 1;
        else if (!strcmp(a, "--page-order") && !strcmp(v, "together"))
            g_interleave = 0;
        else if (!strcmp(a, "--ragged")) {
            char *end;
            unsigned long k = strtoul(v, &end, 10), l = 0;
            if (end != v && *end == ':')
                l = strtoul(end + 1, &end, 10);
            if (*end || k == 0 || k > MAX_BS || l == 0 || l > 32768) {
                fprintf(stderr,
                        "gpu_serving_engine: --ragged %s: want K:L, K in 1..%u, L in "
                        "1..32768\n",
                        v, MAX_BS);
                return 2;
            }
            g_rag_k = (uint32_t)k;
            g_rag_len = (uint32_t)l;
        } else
            return usage();
        i++;
    }
    uint32_t bss[16], nb = 0, mbs[16], nm = 0, max_bs = 0, pcs[16], np = 0, max_pc = 0, ccs[16],
                      nc = 0;
    if (parse_list(batch, "batch", MAX_BS, bss, &nb, &max_bs) ||
        parse_list(mbatch, "batch", MAX_BS, mbs, &nm, &max_bs) ||
        parse_list(pchunks, "price chunk", MAX_CHUNK, pcs, &np, &max_pc) ||
        parse_list(cchunks, "concurrent chunk", MAX_CHUNK, ccs, &nc, &max_pc))
        return 2;
    const uint32_t chunk_cap = max_pc > chunk ? max_pc : chunk;
    if (argc == 1) { /* tools/device-run.sh runs every bench program bare */
        printf("1..0 # SKIP needs --model DIR: bench/gpu-serving.sh runs it\n");
        return 0;
    }
    if (!dir || nb == 0 || plen == 0 || steps == 0 || reps == 0 || reps > 64 ||
        (nm && (chunk == 0 || chunk > MAX_CHUNK || chunk_cap + max_bs > 4096)) ||
        ((np || nc) && !nm))
        return usage();

    char err[512] = "";
    tdm_model_t *m = NULL;
    tdm_model_view_t view;
    tdm_cuda_engine_t *e = NULL;
    if (tdm_model_load(dir, &m, err, sizeof(err)) != TDM_OK ||
        tdm_model_view_init(m, 1, 0, &view, err, sizeof(err)) != TDM_OK) {
        fprintf(stderr, "gpu_serving_engine: %s: %s\n", dir, err);
        return 1;
    }
    uint32_t vocab = tdm_model_config(m)->vocab_size;
    tdm_cuda_engine_opts_t o;
    tdm_cuda_engine_opts_default(&o);
    const uint32_t lmax = g_rag_k && g_rag_len > plen ? g_rag_len : plen;
    uint32_t ps = o.page_size, per = (lmax + steps + ps - 1) / ps,
             cpages = (chunk_cap + ps - 1) / ps;
    if (g_spread == 0 || g_spread > 1024 ||
        (uint64_t)max_bs * per * g_spread + MAX_CHUNK_PAGES > UINT32_MAX) {
        fprintf(stderr, "gpu_serving_engine: --kv-spread %u not in 1..1024 here\n", g_spread);
        return 2;
    }
    if ((size_t)max_bs * per > MAX_BS * 512u || cpages > MAX_CHUNK_PAGES) {
        fprintf(stderr, "gpu_serving_engine: too many pages (%u x %u)\n", max_bs, per);
        return 2;
    }
    o.mixed_decode = 1; /* engine.h; the second engine of the mixed steps turns it off */
    o.max_batch = max_bs + (nm > 0); /* a mixed step: the chunk's sequence beside max_bs rows */
    o.max_tokens = lmax > 4096 ? lmax : 4096;
    o.max_pages_per_seq = per > cpages ? per : cpages;
    o.max_logit_rows = o.max_tokens;
    o.max_pages = max_bs * per * g_spread + (nm ? cpages : 0);
    tdm_status_t st = tdm_cuda_engine_init(&view, &o, &e);
    if (st != TDM_OK) {
        fprintf(stderr, "gpu_serving_engine: engine: %s\n", tdm_status_str(st));
        return 1;
    }
    float *logits = malloc((size_t)max_bs * vocab * sizeof(float));
    if (!logits)
        return 1;
    printf("{\"model\": \"%s\", \"vocab\": %u, \"weight_bytes\": %llu, \"prompt_len\": %u, "
           "\"ragged\": {\"rows\": %u, \"prompt_len\": %u}, "
           "\"steps\": %u, \"reps\": %u, \"results\": [",
           dir, vocab, (unsigned long long)view.resident_bytes, plen, g_rag_k, g_rag_len, steps,
           reps);
    int rc = 0;
    for (uint32_t b = 0; b < nb; b++) {
        double t[2][64];
        for (int form = 0; form < 2; form++) {
            double warm;
            g_config++;
            st = run(e, bss[b], plen, 8, per, o.max_tokens, vocab, form ? logits : NULL, 0, 0,
                     &warm);
            for (uint32_t r = 0; r < reps && st == TDM_OK; r++)
                st = run(e, bss[b], plen, steps, per, o.max_tokens, vocab, form ? logits : NULL, 0,
                         r == 0 && g_config == g_profile, &t[form][r]);
            if (st != TDM_OK)
                break;
            qsort(t[form], reps, sizeof(double), cmp_d);
        }
        if (st != TDM_OK) {
            fprintf(stderr, "gpu_serving_engine: batch %u: %s\n", bss[b], tdm_status_str(st));
            rc = 1;
            break;
        }
        double ids_s = t[0][reps / 2], lg_s = t[1][reps / 2];
        printf("%s\n {\"batch\": %u, \"ids_tok_s\": %.1f, \"ids_step_us\": %.1f, "
               "\"logits_tok_s\": %.1f, \"logits_step_us\": %.1f}",
               b ? "," : "", bss[b], (double)bss[b] * steps / ids_s, 1e6 * ids_s / steps,
               (double)bss[b] * steps / lg_s, 1e6 * lg_s / steps);
        fflush(stdout);
    }
    printf("\n]");
    /* mixed steps: this engine (mixed_decode on, set at init) against one with it off */
    tdm_cuda_engine_t *e_flash = NULL;
    if (nm && rc == 0) {
        tdm_cuda_engine_opts_t of = o;
        of.mixed_decode = 0;
        if ((st = tdm_cuda_engine_init(&view, &of, &e_flash)) != TDM_OK) {
            fprintf(stderr, "gpu_serving_engine: second engine: %s\n", tdm_status_str(st));
            rc = 1;
        }
    }
    printf(", \"mixed_chunk\": %u, \"mixed\": [", chunk);
    for (uint32_t b = 0; b < nm && rc == 0; b++) {
        /* 0: mixed, default; 1: mixed, flash only; 2: the decode rows alone */
        tdm_cuda_engine_t *eng[3] = {e, e_flash, e};
        const uint32_t ch[3] = {chunk, chunk, 0};
        double t[3][64];
        for (int form = 0; form < 3 && st == TDM_OK; form++) {
            double warm;
            g_config++;
            st =
                run(eng[form], mbs[b], plen, 8, per, o.max_tokens, vocab, NULL, ch[form], 0, &warm);
            for (uint32_t r = 0; r < reps && st == TDM_OK; r++)
                st = run(eng[form], mbs[b], plen, steps, per, o.max_tokens, vocab, NULL, ch[form],
                         r == 0 && g_config == g_profile, &t[form][r]);
            if (st == TDM_OK)
                qsort(t[form], reps, sizeof(double), cmp_d);
        }
        if (st != TDM_OK) {
            fprintf(stderr, "gpu_serving_engine: mixed batch %u: %s\n", mbs[b], tdm_status_str(st));
            rc = 1;
            break;
        }
        printf("%s\n {\"batch\": %u, \"step_us\": %.1f, \"flash_only_step_us\": %.1f, "
               "\"decode_only_step_us\": %.1f}",
               b ? "," : "", mbs[b], 1e6 * t[0][reps / 2] / steps, 1e6 * t[1][reps / 2] / steps,
               1e6 * t[2][reps / 2] / steps);
        fflush(stdout);
    }
    printf("\n], \"price\": [");
    for (uint32_t c = 0; c < np && rc == 0; c++) {
        const uint32_t bs = mbs[nm - 1];
        double t[64], warm;
        g_config++;
        st = run(e, bs, plen, 8, per, o.max_tokens, vocab, NULL, pcs[c], 0, &warm);
        for (uint32_t r = 0; r < reps && st == TDM_OK; r++)
            st = run(e, bs, plen, steps, per, o.max_tokens, vocab, NULL, pcs[c],
                     r == 0 && g_config == g_profile, &t[r]);
        if (st != TDM_OK) {
            fprintf(stderr, "gpu_serving_engine: price chunk %u: %s\n", pcs[c], tdm_status_str(st));
            rc = 1;
            break;
        }
        qsort(t, reps, sizeof(double), cmp_d);
        printf("%s\n {\"batch\": %u, \"chunk\": %u, \"step_us\": %.1f}", c ? "," : "", bs, pcs[c],
               1e6 * t[reps / 2] / steps);
        fflush(stdout);
    }
    printf("\n], \"concurrent\": [");
    /* --concurrent: the chunk on a second engine (ce) beside the decode step on e, and on e_hi
     * (the same rows, its stream at the highest priority) */
    tdm_cuda_engine_t *ce = NULL, *e_hi = NULL;
    if (nc && rc == 0) {
        tdm_cuda_engine_opts_t oh = o;
        oh.stream_priority = 1;
        if ((st = tdm_cuda_engine_init(&view, &o, &ce)) != TDM_OK ||
            (st = tdm_cuda_engine_init(&view, &oh, &e_hi)) != TDM_OK) {
            fprintf(stderr, "gpu_serving_engine: concurrent engines: %s\n", tdm_status_str(st));
            rc = 1;
        }
    }
    for (uint32_t c = 0; c < nc && rc == 0; c++) {
        const uint32_t bs = mbs[nm - 1];
        /* 0: decode alone, 1: chunk alone, 2: both, 3: both with the decode stream first,
         * 4: the mixed call (the chunk in the decode call) */
        tdm_cuda_engine_t *de[5] = {e, e, e, e_hi, e}, *che[5] = {ce, ce, ce, ce, NULL};
        const uint32_t dbs[5] = {bs, 0, bs, bs, bs}, dch[5] = {0, ccs[c], ccs[c], ccs[c], ccs[c]};
        double t[5][64];
        for (int form = 0; form < 5 && st == TDM_OK; form++) {
            double warm;
            g_config++;
            tdm_cuda_engine_t *d = de[form];
            st = run2(d, che[form], dbs[form], plen, 8, per, o.max_tokens, vocab, NULL, dch[form],
                      0, &warm);
            for (uint32_t r = 0; r < reps && st == TDM_OK; r++)
                st = run2(d, che[form], dbs[form], plen, steps, per, o.max_tokens, vocab, NULL,
                          dch[form], 0, &t[form][r]);
            if (st == TDM_OK)
                qsort(t[form], reps, sizeof(double), cmp_d);
        }
        if (st != TDM_OK) {
            fprintf(stderr, "gpu_serving_engine: concurrent chunk %u: %s\n", ccs[c],
                    tdm_status_str(st));
            rc = 1;
            break;
        }
        double us[5];
        for (int f = 0; f < 5; f++)
            us[f] = 1e6 * t[f][reps / 2] / steps;
        /* the share of the chunk's own time that running it beside the step hid */
        printf("%s\n {\"batch\": %u, \"chunk\": %u, \"decode_only_us\": %.1f, "
               "\"chunk_only_us\": %.1f, \"both_us\": %.1f, \"both_decode_first_us\": %.1f, "
               "\"mixed_us\": %.1f, \"hidden\": %.3f, \"hidden_decode_first\": %.3f}",
               c ? "," : "", bs, ccs[c], us[0], us[1], us[2], us[3], us[4],
               (us[0] + us[1] - us[2]) / us[1], (us[0] + us[1] - us[3]) / us[1]);
        fflush(stdout);
    }
    printf("\n]}\n");
    tdm_cuda_engine_free(e_hi);
    tdm_cuda_engine_free(ce);
    free(logits);
    tdm_cuda_engine_free(e_flash);
    tdm_cuda_engine_free(e);
    tdm_model_view_free(&view);
    tdm_model_free(m);
    return rc;
}
