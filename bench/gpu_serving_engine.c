/*
 * gpu_serving_engine.c — the ceiling of bench/gpu-serving.sh: the CUDA engine's own batched
 * decode (kernels/cuda/engine.h) on the checkpoint the worker serves, at the batch sizes the load
 * generator's concurrency sweep uses, in the same run. Per batch size: bs random prompts of
 * --prompt-len tokens prefilled, then --steps greedy steps through the decode graphs in two forms:
 *   ids:    the argmax on the device, bs ids copied back (what the worker's device-greedy path
 *           does: docs/cuda.md "Sampling on the device");
 *   logits: bs full logits rows copied back as well (the host sampler's path).
 * Each the median of --reps runs; step_us = one step's wall time. Prints one JSON object.
 * Not a test. Usage: gpu_serving_engine --model DIR [--batch "1 8 32"] [--prompt-len 128]
 *   [--steps 128] [--reps 3]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/model.h>

#include "kernels/cuda/engine.h"

#define MAX_BS 256u

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

static int usage(void)
{
    fprintf(stderr, "usage: gpu_serving_engine --model DIR [--batch \"1 8 32\"] "
                    "[--prompt-len N] [--steps N] [--reps N]\n");
    return 2;
}

/* bs sequences: prefill in calls of at most max_tokens tokens, then `steps` steps; returns the
 * decode seconds. */
static tdm_status_t run(tdm_cuda_engine_t *e, uint32_t bs, uint32_t plen, uint32_t steps,
                        uint32_t per, uint32_t max_tokens, uint32_t vocab, float *logits,
                        double *ret_s)
{
    static uint32_t pages[MAX_BS * 512];
    tdm_cuda_seq_t seqs[MAX_BS];
    int32_t cur[MAX_BS], ids[MAX_BS];
    int32_t *prompt = malloc((size_t)bs * plen * sizeof(int32_t));
    uint32_t rows;
    if (!prompt)
        return TDM_ERR_NOMEM;
    srand(bs * 7919u + plen);
    for (size_t i = 0; i < (size_t)bs * plen; i++)
        prompt[i] = (int32_t)((unsigned)rand() % vocab);
    for (uint32_t i = 0; i < bs * per; i++)
        pages[i] = i;
    uint32_t group = max_tokens / plen ? max_tokens / plen : 1;
    for (uint32_t s0 = 0; s0 < bs; s0 += group) {
        uint32_t n = bs - s0 < group ? bs - s0 : group;
        for (uint32_t i = 0; i < n; i++)
            seqs[i] = (tdm_cuda_seq_t){prompt + (size_t)(s0 + i) * plen, plen, 0,
                                       pages + (s0 + i) * per,           per,  0};
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
            seqs[i] = (tdm_cuda_seq_t){&cur[i], 1, plen + s, pages + i * per, per, 0};
        TDM_TRY(tdm_cuda_engine_forward(e, seqs, bs, logits, ids, bs, &rows));
        memcpy(cur, ids, bs * sizeof(int32_t));
    }
    *ret_s = now_s() - t0;
    return TDM_OK;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *batch = "1 8 32";
    uint32_t plen = 128, steps = 128, reps = 3;
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
        else
            return usage();
        i++;
    }
    uint32_t bss[16], nb = 0, max_bs = 0;
    for (char *p = (char *)batch, *end; nb < 16; p = end) {
        unsigned long b = strtoul(p, &end, 10);
        if (end == p)
            break;
        if (b == 0 || b > MAX_BS) {
            fprintf(stderr, "gpu_serving_engine: batch %lu not in 1..%u\n", b, MAX_BS);
            return 2;
        }
        bss[nb++] = (uint32_t)b;
        if (b > max_bs)
            max_bs = (uint32_t)b;
    }
    if (argc == 1) { /* tools/device-run.sh runs every bench program bare */
        printf("1..0 # SKIP needs --model DIR: bench/gpu-serving.sh runs it\n");
        return 0;
    }
    if (!dir || nb == 0 || plen == 0 || steps == 0 || reps == 0 || reps > 64)
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
    uint32_t ps = o.page_size, per = (plen + steps + ps - 1) / ps;
    if ((size_t)max_bs * per > MAX_BS * 512u) {
        fprintf(stderr, "gpu_serving_engine: too many pages (%u x %u)\n", max_bs, per);
        return 2;
    }
    o.max_batch = max_bs;
    o.max_tokens = plen > 4096 ? plen : 4096;
    o.max_pages_per_seq = per;
    o.max_logit_rows = o.max_tokens;
    o.max_pages = max_bs * per;
    tdm_status_t st = tdm_cuda_engine_init(&view, &o, &e);
    if (st != TDM_OK) {
        fprintf(stderr, "gpu_serving_engine: engine: %s\n", tdm_status_str(st));
        return 1;
    }
    float *logits = malloc((size_t)max_bs * vocab * sizeof(float));
    if (!logits)
        return 1;
    printf("{\"model\": \"%s\", \"vocab\": %u, \"weight_bytes\": %llu, \"prompt_len\": %u, "
           "\"steps\": %u, \"reps\": %u, \"results\": [",
           dir, vocab, (unsigned long long)view.resident_bytes, plen, steps, reps);
    int rc = 0;
    for (uint32_t b = 0; b < nb; b++) {
        double t[2][64];
        for (int form = 0; form < 2; form++) {
            double warm;
            st = run(e, bss[b], plen, 8, per, o.max_tokens, vocab, form ? logits : NULL, &warm);
            for (uint32_t r = 0; r < reps && st == TDM_OK; r++)
                st = run(e, bss[b], plen, steps, per, o.max_tokens, vocab, form ? logits : NULL,
                         &t[form][r]);
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
    printf("\n]}\n");
    free(logits);
    tdm_cuda_engine_free(e);
    tdm_model_view_free(&view);
    tdm_model_free(m);
    return rc;
}
