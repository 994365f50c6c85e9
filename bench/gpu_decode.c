/*
 * gpu_decode.c — decode and prefill speed of the CUDA engine (kernels/cuda/engine.h) on the
 * TinyLlama-1.1B shape (hidden 2048, intermediate 5632, 22 layers, 32 heads, 4 KV heads, vocab
 * 32000) with random bf16 weights: per batch size 1, 8, 32, a 128-token random prompt per
 * sequence (prefilled in one call), then 256 greedy steps through the graphs (plan copy, graph
 * replay, argmax copy-back and a wait per step, as the worker does; KV growing 128 → 384),
 * median of 5 runs; prefill of one 2048-token prompt, median of 5; the device-to-device copy
 * bandwidth and the bs1 roofline (weight bytes read per token / copy bandwidth). Then the first
 * 32 greedy tokens of bs1 against the CPU backend's forward (dataplane/model graph) on the same
 * weights, with the docs/design.md §9 margin rule on the CPU's top-1 margins. A/B variants of the
 * engine options (PDL off, cuBLAS, ..., the L2 prefetch of upcoming weights at several budgets) run
 * in the same process, each a row of "variants" in the JSON. Each variant's first 32 greedy bs1
 * tokens are compared with the first engine's (tokens_equal_default, a diagnostic: on this model
 * every later engine in the process gives other tokens from step 0, docs/cuda.md run 6); the L2
 * prefetch variants must equal the "control" row (a second engine with the defaults) exactly,
 * since the prefetch only touches the cache (tokens_equal_control, TAP 5).
 * Long prompts (TAP 8, last, on engines of their own): one prompt of 8192 and one of 32768
 * tokens prefilled in one call (max_tokens = the prompt) and in chunks of the worker's default
 * --chunked-prefill-size (8192) continuing one sequence over its page table; a warm-up, median
 * of 3 (at most TDM_BENCH_RUNS); tok/s, ms, and the 32768 prompt's last chunk (context
 * 24576..32768) against its first (0..8192): prefill_{8192,32768}[_chunked]_{tok_s,ms},
 * prefill_32768_{first,last}_chunk_ms, prefill_32768_last_chunk_vs_first.
 * Prints TAP (for tools/device-run.sh) and writes $TDM_BENCH_OUT/gpu_decode_tandem.json.
 * Env: TDM_BENCH_RUNS (5), TDM_BENCH_NEW (256), TDM_BENCH_CPU=0 skips the CPU comparison.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/kv.h>
#include <tdm/model.h>

#include "graph.h"
#include "kernels/backend.h"
#include "kernels/cuda/engine.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/smoke.h"

#include "bench/gpu_model.h"

#define PROMPT 128u
#define MAXBS 32u
#define CMP_TOKENS 32u
/* long prompts: the worker's default --chunked-prefill-size (include/tdm/config.h) and the
 * longest prompt */
#define LONG_CHUNK 8192u
#define LONG_MAX 32768u

static int n_test;

static void tap(int okv, const char *fmt, const char *what)
{
    printf("%s %d - %s%s\n", okv ? "ok" : "not ok", ++n_test, fmt, what ? what : "");
    fflush(stdout);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return v[n / 2];
}

/* One run of bs sequences: prefill, then `steps` greedy steps; returns decode seconds. */
/* a JSON tri-state: -1 null, 0 false, else true */
static const char *tf_null(int v)
{
    return v < 0 ? "null" : v ? "true" : "false";
}

static tdm_status_t decode_run(tdm_cuda_engine_t *e, uint32_t bs, const int32_t *prompt,
                               uint32_t steps, uint32_t per, int32_t *first_tokens, double *ret_s)
{
    static uint32_t pages[MAXBS * 64];
    tdm_cuda_seq_t seqs[MAXBS];
    int32_t cur[MAXBS], ids[MAXBS];
    uint32_t rows;
    for (uint32_t i = 0; i < bs * per; i++)
        pages[i] = i;
    for (uint32_t i = 0; i < bs; i++)
        seqs[i] = (tdm_cuda_seq_t){prompt + (size_t)i * PROMPT, PROMPT, 0, pages + i * per, per, 0};
    TDM_TRY(tdm_cuda_engine_forward(e, seqs, bs, NULL, ids, bs, &rows));
    memcpy(cur, ids, bs * sizeof(int32_t));
    if (first_tokens)
        first_tokens[0] = ids[0];
    double t0 = now_s();
    for (uint32_t s = 0; s < steps; s++) {
        for (uint32_t i = 0; i < bs; i++)
            seqs[i] = (tdm_cuda_seq_t){&cur[i], 1, PROMPT + s, pages + i * per, per, 0};
        TDM_TRY(tdm_cuda_engine_forward(e, seqs, bs, NULL, ids, bs, &rows));
        memcpy(cur, ids, bs * sizeof(int32_t));
        if (first_tokens && s + 1 < CMP_TOKENS)
            first_tokens[s + 1] = ids[0];
    }
    *ret_s = now_s() - t0;
    return TDM_OK;
}

/* One prefill of the n tokens of toks as one sequence over pages 0.. (n_pages of them), in calls
 * of at most chunk tokens, call k continuing the sequence at pos0 = k * chunk over the same page
 * table (so it attends over the KV the earlier calls wrote), as the worker's chunked prefill
 * does; chunk >= n: one call. Seconds of the whole prompt, of the first call and of the last. */
static tdm_status_t long_prefill(tdm_cuda_engine_t *e, const int32_t *toks, uint32_t n,
                                 uint32_t chunk, const uint32_t *pages, uint32_t n_pages,
                                 double *ret_s, double *ret_first_s, double *ret_last_s)
{
    uint32_t rows;
    int32_t id;
    const double t0 = now_s();
    double tc = t0;
    for (uint32_t p0 = 0; p0 < n; p0 += chunk) {
        const uint32_t c = n - p0 < chunk ? n - p0 : chunk;
        const tdm_cuda_seq_t q = {toks + p0, c, p0, pages, n_pages, 0};
        TDM_TRY(tdm_cuda_engine_forward(e, &q, 1, NULL, &id, 1, &rows));
        const double t = now_s();
        if (p0 == 0)
            *ret_first_s = t - tc;
        *ret_last_s = t - tc;
        tc = t;
    }
    *ret_s = tc - t0;
    return TDM_OK;
}

/* ", \"key\": v" with prec decimals, or null when v was not measured (<= 0) */
static void json_num(FILE *f, const char *key, int prec, double v)
{
    fprintf(f, ", \"%s\": ", key);
    if (v > 0)
        fprintf(f, "%.*f", prec, v);
    else
        fputs("null", f);
}

/* The CPU path's first CMP_TOKENS greedy tokens and their top-1 margins. */
static tdm_status_t cpu_tokens(const model_t *m, const int32_t *prompt, int32_t *tok,
                               double *margin)
{
    tdm_backend_t be;
    tdm_kv_layout_t l;
    tdm_kv_pool_t *pool = NULL;
    tdm_graph_t *g = NULL;
    uint32_t pages[32], rows;
    const uint32_t V = m->cfg.vocab_size;
    float *lg = malloc((size_t)V * 4);
    tdm_status_t st;
    if (!lg)
        return TDM_ERR_NOMEM;
    for (uint32_t i = 0; i < 32; i++)
        pages[i] = i;
    st = tdm_backend_cpu_init(0, &be);
    if (st != TDM_OK)
        goto out_lg;
    if ((st = tdm_kv_layout_init(&m->cfg, TDM_DTYPE_BF16, 16, 1, 0, &l)) != TDM_OK ||
        (st = tdm_kv_pool_init(&l, 32, &pool)) != TDM_OK ||
        (st = tdm_graph_init(&m->view, tdm_kv_pool_buffers(pool), &be, NULL, PROMPT, &g)) != TDM_OK)
        goto out;
    int32_t cur = 0;
    for (uint32_t s = 0; s < CMP_TOKENS && st == TDM_OK; s++) {
        tdm_graph_seq_t q = {
            s == 0 ? prompt : &cur, s == 0 ? PROMPT : 1, s == 0 ? 0 : PROMPT + s - 1, pages, 32, 0};
        st = tdm_graph_forward(g, &q, 1, lg, 1, &rows);
        if (st != TDM_OK)
            break;
        uint32_t b = 0, b2 = UINT32_MAX;
        for (uint32_t i = 1; i < V; i++)
            if (lg[i] > lg[b])
                b = i;
        for (uint32_t i = 0; i < V; i++)
            if (i != b && (b2 == UINT32_MAX || lg[i] > lg[b2]))
                b2 = i;
        tok[s] = (int32_t)b;
        margin[s] = (double)lg[b] - lg[b2];
        cur = (int32_t)b;
    }
out:
    tdm_graph_free(g);
    tdm_kv_pool_free(pool);
    tdm_backend_cpu_free(&be);
out_lg:
    free(lg);
    return st;
}

/* The median of runs prefill calls of q (after the caller's warm-up) as tok/s in *ret, printed
 * with what (the variant's name) after "prefill N". */
static tdm_status_t time_prefill(tdm_cuda_engine_t *e, const tdm_cuda_seq_t *q, int runs,
                                 double *times, const char *what, double *ret)
{
    uint32_t rows;
    int32_t id;
    tdm_status_t st = TDM_OK;
    for (int r = 0; r < runs && st == TDM_OK; r++) {
        double t = now_s();
        st = tdm_cuda_engine_forward(e, q, 1, NULL, &id, 1, &rows);
        times[r] = now_s() - t;
    }
    if (st != TDM_OK)
        return st;
    *ret = q->n_tokens / median(times, runs);
    printf("# bench tandem prefill %u%s: %.0f tok/s (%.2f ms)\n", q->n_tokens, what, *ret,
           q->n_tokens * 1e3 / *ret);
    return TDM_OK;
}

int main(void)
{
    static model_t m;
    static int32_t prompt[MAXBS * PROMPT], long_prompt[2048];
    tdm_cuda_engine_t *e = NULL;
    tdm_cuda_engine_opts_t o;
    const char *s;
    int runs = (s = getenv("TDM_BENCH_RUNS")) ? atoi(s) : 5;
    uint32_t steps = (s = getenv("TDM_BENCH_NEW")) ? (uint32_t)atoi(s) : 256;
    static const uint32_t bss[3] = {1, 8, 32};
    double tok_s[3] = {0}, prefill_tok_s = 0, prefill_plain_tok_s = 0, copy_gbps = 0, roofline = 0,
           times[16];
    int32_t gpu_first[CMP_TOKENS], cpu_first[CMP_TOKENS];
    double cpu_margin[CMP_TOKENS];
    char line[256];

    if (runs < 1 || runs > 16)
        runs = 5;
    if (steps < CMP_TOKENS || steps > 1000)
        steps = 256;
    if (getenv("TDM_UNDER_SANITIZER")) {
        printf("1..0 # SKIP benchmark\n");
        return 0;
    }
    tdm_cuda_smoke_dev_t dev;
    if (tdm_cuda_smoke_probe(&dev, line, sizeof(line)) != TDM_OK) {
        printf("1..0 # SKIP no CUDA device (%s)\n", line);
        return 0;
    }
    printf("1..8\n");
    double t0 = now_s();
    if (!model_init(&m, 2048)) {
        tap(0, "random TinyLlama-shape weights", NULL);
        return 1;
    }
    for (size_t i = 0; i < sizeof(prompt) / sizeof(prompt[0]); i++)
        prompt[i] = (int32_t)(rnd() % 32000);
    for (size_t i = 0; i < 2048; i++)
        long_prompt[i] = (int32_t)(rnd() % 32000);
    printf("# weights generated in %.1f s\n", now_s() - t0);

    /* copy bandwidth and the bs1 roofline: weight bytes one token reads */
    double ms = 0;
    if (tdm_cuda_bench_copy((size_t)2 << 30, 10, &ms) == TDM_OK)
        copy_gbps = 2.0 * (double)((size_t)2 << 30) / (ms * 1e-3) / 1e9;
    roofline = copy_gbps * 1e9 / (double)m.view.resident_bytes;
    printf("# bench copy %.0f GB/s; weights read per token %.3f GB; bs1 roofline %.0f tok/s\n",
           copy_gbps, (double)m.view.resident_bytes / 1e9, roofline);

    /* the engine's defaults (what the worker runs): decode bs1/8/32, prefill 2048 */
    int dec_ok = 1;
    tdm_cuda_engine_opts_default(&o);
    o.max_tokens = 4096;
    o.max_batch = MAXBS;
    o.max_pages_per_seq = 128;
    t0 = now_s();
    tdm_status_t st = tdm_cuda_engine_init(&m.view, &o, &e);
    snprintf(line, sizeof(line),
             " (defaults: gemv rows %u, pdl %d, skinny %d: %s; %u KV pages from mem-fraction "
             "%.2f; %.1f s)",
             o.gemv_max_rows, o.use_pdl, o.use_skinny, tdm_status_str(st),
             e ? tdm_cuda_engine_num_pages(e) : 0, o.mem_fraction_static, now_s() - t0);
    tap(st == TDM_OK, "engine init", line);
    if (st != TDM_OK)
        return 1;
    for (int b = 0; b < 3 && dec_ok; b++) {
        uint32_t bs = bss[b], per = (PROMPT + steps + 15) / 16;
        for (int r = 0; r < runs && st == TDM_OK; r++) {
            double sec = 0;
            st = decode_run(e, bs, prompt, steps, per, (b == 0 && r == 0) ? gpu_first : NULL, &sec);
            times[r] = sec;
        }
        if (st != TDM_OK) {
            printf("# decode bs%u failed: %s\n", bs, tdm_status_str(st));
            dec_ok = 0;
            break;
        }
        tok_s[b] = (double)bs * steps / median(times, runs);
        printf("# bench tandem decode bs%u default: %.0f tok/s (median of %d, %u steps, "
               "%.1f us/step)\n",
               bs, tok_s[b], runs, steps, 1e6 * bs / tok_s[b]);
    }
    tap(dec_ok, "decode bs1/8/32", NULL);
    /* the host's share of a step: the bucket's graph replayed back to back (GPU time) at the
     * benchmark's middle KV length, against the step through forward */
    double replay_us[3] = {0, 0, 0};
    for (int b = 0; b < 3 && dec_ok; b++) {
        static uint32_t rpages[MAXBS * 64];
        tdm_cuda_seq_t rseq[MAXBS];
        int32_t tok[MAXBS];
        const uint32_t bs = bss[b], per = (PROMPT + steps + 15) / 16;
        for (uint32_t i = 0; i < bs * per; i++)
            rpages[i] = i;
        for (uint32_t i = 0; i < bs; i++) {
            tok[i] = prompt[i];
            rseq[i] = (tdm_cuda_seq_t){&tok[i], 1, PROMPT + steps / 2, rpages + i * per, per, 0};
        }
        if (tdm_cuda_engine_replay_us(e, rseq, bs, 200, &replay_us[b]) == TDM_OK)
            printf("# bench graph replay bs%u: %.1f us/step back to back (GPU only) against "
                   "%.1f us/step through forward\n",
                   bs, replay_us[b], 1e6 * bs / tok_s[b]);
    }

    /* prefill 2048 */
    {
        static uint32_t pages[128];
        uint32_t rows;
        int32_t id;
        for (uint32_t i = 0; i < 128; i++)
            pages[i] = i;
        tdm_cuda_seq_t q = {long_prompt, 2048, 0, pages, 128, 0};
        st = tdm_cuda_engine_forward(e, &q, 1, NULL, &id, 1, &rows); /* warm-up */
        if (st == TDM_OK)
            st = time_prefill(e, &q, runs, times, "", &prefill_tok_s);
        tap(st == TDM_OK, "prefill 2048", NULL);
        /* the same engine and prompt with the flash kernel's plain form (kernels/cuda/ops.h
         * tdm_cuda_flash_plain): the default's anchor in this run */
        const int was_plain = tdm_cuda_flash_plain();
        tdm_cuda_set_flash_plain(1);
        if (st == TDM_OK)
            (void)time_prefill(e, &q, runs, times, " plain flash", &prefill_plain_tok_s);
        tdm_cuda_set_flash_plain(was_plain);
    }
    /* diagnostics for the second-engine finding (docs/cuda.md run 6): the first engine's bs1
     * tokens again after everything it ran; a second engine alive beside it with a small pool;
     * after the first is freed, a small-pool engine (the controls below have a full one) */
    int diag_again = -1, diag_beside = -1, diag_small = -1;
    if (dec_ok) {
        const uint32_t per1 = (PROMPT + steps + 15) / 16;
        int32_t tk[CMP_TOKENS];
        double sec;
        if (decode_run(e, 1, prompt, steps, per1, tk, &sec) == TDM_OK)
            diag_again = !memcmp(tk, gpu_first, sizeof(tk));
        tdm_cuda_engine_opts_t o2 = o;
        o2.mem_fraction_static = 0.5; /* of what the first engine left free */
        tdm_cuda_engine_t *e2 = NULL;
        if (tdm_cuda_engine_init(&m.view, &o2, &e2) == TDM_OK &&
            decode_run(e2, 1, prompt, steps, per1, tk, &sec) == TDM_OK)
            diag_beside = !memcmp(tk, gpu_first, sizeof(tk));
        tdm_cuda_engine_free(e2);
        e2 = NULL; /* a refused init below leaves it as it was */
        tdm_cuda_engine_free(e);
        e = NULL;
        o2.mem_fraction_static = 0.03;
        if (tdm_cuda_engine_init(&m.view, &o2, &e2) == TDM_OK &&
            decode_run(e2, 1, prompt, steps, per1, tk, &sec) == TDM_OK)
            diag_small = !memcmp(tk, gpu_first, sizeof(tk));
        tdm_cuda_engine_free(e2);
        printf("# diagnostic bs1 tokens == the first engine's: the same engine again %s, a second "
               "engine beside it (half of what it left free) %s, a small-pool engine after it "
               "(0.03) %s\n",
               tf_null(diag_again), tf_null(diag_beside), tf_null(diag_small));
    }
    tdm_cuda_engine_free(e);
    e = NULL;

    /* variants, each against the defaults (A/B in the same run; printed and written as rows of
     * "variants", never as the headline figures): PDL off; cuBLAS instead of the skinny kernel;
     * the split-K attention; the older one-row GEMVs and run 7's decode attention (combine
     * kernel); ablations; the L2 prefetch of upcoming weights (engine.h l2pf_*: MiB from each
     * decode attention grid, MiB from each one-row GEMV's tail, op, early; run 6 measured the
     * other budgets and ops slower, their rows are gone, the knobs stay) */
    static const struct {
        const char *name, *key;
        int pdl, skinny, mma, ksplit, cluster;
        uint32_t gemv_rows;
        int ablate;
        uint32_t l2pf, l2tail;
        int l2op, l2early, bs1_only;
        int fuse;        /* 0: the engine's defaults; else 4 | bit 0 the SwiGLU epilogue, bit 1 the
                          * argmax epilogue */
        uint32_t splits; /* the decode attention's split cap (0: the engine's) */
        int embed;       /* 0: the engine's default; 1: the embedding folded in; 2: its own node */
        int pdl_early;   /* 0: the engine's default; 1: dependents triggered before each
                          * kernel's PDL wait (decode calls of <= 8 rows); 2: after, always */
    } var[] = {{"control (the defaults again, a second engine)", "control", 1, 1, 1, 3, 1, 1, 0, 0,
                0, 0, 0, 1},
               {"fused-off (run 9's MLP and argmax nodes)", "fused_off", 1, 1, 1, 3, 1, 1, 0, 0, 0,
                0, 0, 1, 4},
               {"swiglu-off (the argmax epilogue alone)", "swiglu_off", 1, 1, 1, 3, 1, 1, 0, 0, 0,
                0, 0, 1, 6},
               {"argmax-off (the SwiGLU epilogue alone)", "argmax_off", 1, 1, 1, 3, 1, 1, 0, 0, 0,
                0, 0, 1, 5},
               {"gemv-v2-regstage (x staged through registers, run 11c)", "gemv_v2_regstage", 1, 1,
                1, 9, 1, 1, 0, 0, 0, 0, 0, 1},
               {"gemv-v4-ring2 (V2 + a shared-memory ring of 2 weight batches per lane)",
                "gemv_v4_ring2", 1, 1, 1, 10, 1, 1, 0, 0, 0, 0, 0, 1},
               {"control-2 (the defaults, a third engine: row-to-row noise)", "control_2", 1, 1, 1,
                3, 1, 1, 0, 0, 0, 0, 0, 1},
               {"embed-node (the embedding lookup as its own kernel, run 11)", "embed_node", 1, 1,
                1, 3, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 2},
               {"pdl-late (dependents triggered after each kernel's wait, run 11)", "pdl_late", 1,
                1, 1, 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2},
               {"attn-splits-8 (the default cap)", "attn_splits_8", 1, 1, 1, 3, 1, 1, 0, 0, 0, 0, 0,
                1, 0, 8},
               {"attn-splits-4 (at most 4 splits per KV head)", "attn_splits_4", 1, 1, 1, 3, 1, 1,
                0, 0, 0, 0, 0, 1, 0, 4},
               {"ablate-silu (WRONG results: down without the SiLU staging)", "ablate_silu", 1, 1,
                1, 3, 1, 1, TDM_CUDA_ABLATE_SILU, 0, 0, 0, 0, 1, 6},
               {"attn-combine-kernel (cluster form off: run 7's decode attention)",
                "attn_combine_kernel", 1, 1, 1, 3, 0, 1, 0, 0, 0, 0, 0, 0},
               {"gemv-v2-lb3 (V2 held to 80 registers, 3 blocks/SM)", "gemv_v2_lb3", 1, 1, 1, 6, 1,
                1, 0, 0, 0, 0, 0, 1},
               {"gemv-v3 (V2 with two weight batches before the wait)", "gemv_v3", 1, 1, 1, 5, 1, 1,
                0, 0, 0, 0, 0, 1},
               {"gemv-run5-stream (run 5-7's one-row GEMV)", "gemv_run5_stream", 1, 1, 1, 2, 1, 1,
                0, 0, 0, 0, 0, 1},
               {"gemv-v2-1bps (V2 on one block per SM)", "gemv_v2_1bps", 1, 1, 1, 4, 1, 1, 0, 0, 0,
                0, 0, 1},
               {"run7 (combine kernel + run 5 GEMV)", "run7", 1, 1, 1, 2, 0, 1, 0, 0, 0, 0, 0, 1},
               {"pdl-off", "pdl_off", 0, 1, 1, 3, 1, 1, 0, 0, 0, 0, 0, 0},
               {"cublas", "cublas", 1, 0, 1, 3, 1, 1, 0, 0, 0, 0, 0, 0},
               {"split-K-attention", "split_k_attention", 1, 1, 0, 3, 1, 1, 0, 0, 0, 0, 0, 0},
               {"gemv-run4-ksplit (old one-row GEMV)", "gemv_run4_ksplit", 1, 1, 1, 1, 1, 1, 0, 0,
                0, 0, 0, 1},
               {"gemv-ksplit-off", "gemv_ksplit_off", 1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1},
               {"ablate-attn (WRONG results: timing only)", "ablate_attn", 1, 1, 1, 3, 1, 1,
                TDM_CUDA_ABLATE_ATTN, 0, 0, 0, 0, 0},
               {"ablate-mlp+o (WRONG results: timing only)", "ablate_mlp_o", 1, 1, 1, 3, 1, 1,
                TDM_CUDA_ABLATE_GEMM, 0, 0, 0, 0, 1},
               {"l2pf-24 (L2 prefetch 24 MiB per attention)", "l2pf_24", 1, 1, 1, 3, 1, 1, 0, 24, 0,
                0, 0, 1},
               {"l2pf-24+tail-8", "l2pf_24_tail_8", 1, 1, 1, 3, 1, 1, 0, 24, 8, 0, 0, 1}};
    enum { NVAR = sizeof(var) / sizeof(var[0]) };
    double vtok[NVAR][3] = {{0}};
    /* bs1 tokens == the first engine's (1), != (0), -1 n/a; L2 prefetch variants also against
     * the control's (vsame_ctl) */
    int vsame[NVAR], vsame_ctl[NVAR], have_ctl = 0;
    int32_t ctl_first[CMP_TOKENS];
    int vruns = runs < 3 ? runs : 3, l2pf_same = 1;
    for (size_t v = 0; v < NVAR; v++) {
        vsame[v] = vsame_ctl[v] = -1;
        tdm_cuda_engine_opts_default(&o);
        o.max_tokens = 4096;
        o.max_batch = MAXBS;
        o.max_pages_per_seq = 128;
        o.use_pdl = var[v].pdl;
        o.use_skinny = var[v].skinny;
        o.use_mma_attn = var[v].mma;
        o.gemv_ksplit = var[v].ksplit;
        o.attn_cluster = var[v].cluster;
        o.gemv_max_rows = var[v].gemv_rows;
        o.ablate = var[v].ablate;
        o.l2pf_mb = var[v].l2pf;
        o.l2pf_tail_mb = var[v].l2tail;
        o.l2pf_op = var[v].l2op;
        o.l2pf_early = var[v].l2early;
        o.attn_splits = var[v].splits;
        if (var[v].embed)
            o.embed_fused = var[v].embed == 1;
        if (var[v].pdl_early)
            o.pdl_early = var[v].pdl_early == 1;
        if (var[v].fuse) {
            o.swiglu_fused = var[v].fuse & 1;
            o.argmax_fused = (var[v].fuse & 2) != 0;
        }
        const int is_l2pf = var[v].l2pf || var[v].l2tail;
        const int is_control = !strcmp(var[v].key, "control");
        if (tdm_cuda_engine_init(&m.view, &o, &e) != TDM_OK) {
            if (is_l2pf)
                l2pf_same = 0;
            continue;
        }
        for (int b = 0; b < 3; b++) {
            uint32_t bs = bss[b], per = (PROMPT + steps + 15) / 16;
            if (var[v].gemv_rows > 1 && bs != 8)
                continue;
            if (!var[v].skinny && bs == 1)
                continue;
            if (var[v].ksplit < 2 && bs != 1)
                continue;
            if (var[v].bs1_only && bs != 1)
                continue;
            double sec = 0;
            int r;
            int32_t vfirst[CMP_TOKENS];
            int32_t *want_first = !var[v].ablate && bs == 1 ? vfirst : NULL;
            for (r = 0; r < vruns && decode_run(e, bs, prompt, steps, per,
                                                r == 0 ? want_first : NULL, &sec) == TDM_OK;
                 r++)
                times[r] = sec;
            if (want_first) {
                /* every variant's bs1 tokens against the first engine's (a diagnostic: a second
                 * engine in this process gives other tokens, docs/cuda.md run 6); the L2
                 * prefetch variants are checked against the control, a second engine without
                 * prefetch, so that the check isolates the prefetch */
                const int32_t *ref = is_l2pf ? ctl_first : gpu_first;
                int div = -1;
                for (int i = 0; i < (int)CMP_TOKENS && div < 0 && r == vruns; i++)
                    if (vfirst[i] != gpu_first[i])
                        div = i;
                vsame[v] = r == vruns && dec_ok && div < 0;
                if (div >= 0)
                    printf("# variant %s: bs1 tokens differ from the first engine's at step %d "
                           "(%d vs %d)\n",
                           var[v].name, div, vfirst[div], gpu_first[div]);
                if (is_control && r == vruns) {
                    memcpy(ctl_first, vfirst, sizeof(ctl_first));
                    have_ctl = 1;
                }
                if (is_l2pf) {
                    vsame_ctl[v] = r == vruns && have_ctl && !memcmp(vfirst, ref, sizeof(vfirst));
                    l2pf_same &= vsame_ctl[v];
                }
            }
            if (r == vruns) {
                double vt = (double)bs * steps / median(times, vruns);
                vtok[v][b] = vt;
                printf("# bench variant %s decode bs%u: %.0f tok/s (%.1f us/step; default %.1f)\n",
                       var[v].name, bs, vt, 1e6 * bs / vt, tok_s[b] > 0 ? 1e6 * bs / tok_s[b] : 0);
            }
        }
        if (!var[v].pdl) {
            static uint32_t pages[128];
            uint32_t rows;
            int32_t id;
            for (uint32_t i = 0; i < 128; i++)
                pages[i] = i;
            tdm_cuda_seq_t q = {long_prompt, 2048, 0, pages, 128, 0};
            double t = now_s();
            if (tdm_cuda_engine_forward(e, &q, 1, NULL, &id, 1, &rows) == TDM_OK &&
                tdm_cuda_engine_forward(e, &q, 1, NULL, &id, 1, &rows) == TDM_OK)
                printf("# bench variant %s prefill 2048: %.2f ms (2 calls, first warm-up)\n",
                       var[v].name, (now_s() - t) * 1e3 / 2);
        }
        tdm_cuda_engine_free(e);
        e = NULL;
    }

    /* the CPU path's first 32 greedy tokens */
    int cmp_ok = 1, first_div = -1;
    double div_margin = 0;
    if (!(s = getenv("TDM_BENCH_CPU")) || strcmp(s, "0")) {
        t0 = now_s();
        st = cpu_tokens(&m, prompt, cpu_first, cpu_margin);
        printf("# cpu path: %u tokens in %.1f s (%s)\n", CMP_TOKENS, now_s() - t0,
               tdm_status_str(st));
        cmp_ok = st == TDM_OK;
        for (uint32_t i = 0; i < CMP_TOKENS && cmp_ok; i++)
            if (gpu_first[i] != cpu_first[i]) {
                first_div = (int)i;
                div_margin = cpu_margin[i];
                cmp_ok = cpu_margin[i] <= 1e-2;
                break;
            }
        double minm = INFINITY;
        for (uint32_t i = 0; i < CMP_TOKENS; i++)
            minm = fmin(minm, cpu_margin[i]);
        snprintf(line, sizeof(line), " (first divergence %d, margin there %.3g; min margin %.3g)",
                 first_div, div_margin, minm);
        tap(cmp_ok, "first 32 greedy tokens of bs1 equal the CPU path's (margin rule)", line);
    } else {
        tap(1, "CPU comparison skipped (TDM_BENCH_CPU=0)", NULL);
        first_div = -2;
    }
    tap(l2pf_same,
        "L2 prefetch variants: first 32 greedy tokens of bs1 equal the control's (a second "
        "engine without prefetch)",
        NULL);
    tap(roofline > 0, "copy bandwidth measured", NULL);
    tap(tok_s[0] > 0 && prefill_tok_s > 0, "all figures measured", NULL);

    /* long prompts: one prompt of 8192 and one of 32768 tokens on the engine's defaults, (a) in
     * one call, on an engine whose call holds the whole prompt (max_tokens 32768), and (b) as the
     * worker prefills them: calls of its default --chunked-prefill-size (LONG_CHUNK) continuing
     * the sequence over one page table (long_prefill), on an engine of max_tokens LONG_CHUNK;
     * each a warm-up, then the median of lruns; for 32768 in chunks also the last chunk's time
     * (context 24576..32768) against the first's (0..8192): how much slower a chunk gets as the
     * context grows. Each engine has a pool of one 32k sequence's pages and is freed after. The
     * engine bounds no position by max_position_embeddings; the worker does (its max context,
     * dataplane/worker/rank.c), so the bench model declares 32768 for these, as a served
     * 32k-context model would (bench/gpu_hicache.c likewise), and 2048 again after. */
    static const uint32_t llen[2] = {LONG_CHUNK, LONG_MAX};
    double l_tok[2][2] = {{0}}, l_ms[2][2] = {{0}}, l_first_ms = 0, l_last_ms = 0;
    const int lruns = runs < 3 ? runs : 3;
    int long_ok = 1;
    {
        static int32_t ltok[LONG_MAX];
        static uint32_t lpages[LONG_MAX];
        const uint32_t max_pos = m.cfg.max_position_embeddings;
        const double tl0 = now_s();
        for (uint32_t i = 0; i < LONG_MAX; i++) {
            ltok[i] = (int32_t)(rnd() % 32000);
            lpages[i] = i;
        }
        m.cfg.max_position_embeddings = LONG_MAX;
        for (int mode = 0; mode < 2; mode++) { /* 0: one call, 1: chunks of LONG_CHUNK */
            tdm_cuda_engine_opts_default(&o);
            const uint32_t ps = o.page_size;
            o.max_tokens = mode ? LONG_CHUNK : LONG_MAX;
            o.max_pages_per_seq = (LONG_MAX + ps - 1) / ps;
            o.max_pages = o.max_pages_per_seq;
            t0 = now_s();
            st = tdm_cuda_engine_init(&m.view, &o, &e);
            printf("# long-prompt engine (max_tokens %u, %u pages of %u): %s in %.1f s\n",
                   o.max_tokens, o.max_pages, ps, tdm_status_str(st), now_s() - t0);
            if (st != TDM_OK) {
                long_ok = 0;
                continue;
            }
            for (int li = 0; li < 2; li++) {
                const uint32_t n = llen[li], chunk = mode ? LONG_CHUNK : n;
                double tt[16], tf[16], tl[16];
                st = long_prefill(e, ltok, n, chunk, lpages, (n + ps - 1) / ps, &tt[0], &tf[0],
                                  &tl[0]); /* warm-up */
                for (int r = 0; r < lruns && st == TDM_OK; r++)
                    st = long_prefill(e, ltok, n, chunk, lpages, (n + ps - 1) / ps, &tt[r], &tf[r],
                                      &tl[r]);
                if (st != TDM_OK) {
                    printf("# prefill %u (%s) failed: %s\n", n, mode ? "in chunks" : "in one call",
                           tdm_status_str(st));
                    long_ok = 0;
                    continue;
                }
                const double med = median(tt, lruns);
                l_tok[mode][li] = n / med;
                l_ms[mode][li] = med * 1e3;
                char how[32] = "in one call";
                if (mode)
                    snprintf(how, sizeof(how), "in chunks of %u", chunk);
                printf("# bench tandem prefill %u %s: %.0f tok/s (%.2f ms, median of %d)\n", n, how,
                       l_tok[mode][li], l_ms[mode][li], lruns);
                if (mode && n > chunk) {
                    l_first_ms = 1e3 * median(tf, lruns);
                    l_last_ms = 1e3 * median(tl, lruns);
                    printf("# bench tandem prefill %u in chunks of %u: first chunk %.2f ms "
                           "(context 0..%u), last %.2f ms (context %u..%u): %.2fx\n",
                           n, chunk, l_first_ms, chunk, l_last_ms, n - chunk, n,
                           l_last_ms / l_first_ms);
                }
            }
            tdm_cuda_engine_free(e);
            e = NULL;
        }
        m.cfg.max_position_embeddings = max_pos;
        printf("# long-prompt prefill section: %.1f s\n", now_s() - tl0);
    }
    tap(long_ok && l_first_ms > 0,
        "long-prompt prefill 8192 and 32768 tokens, one call and in chunks of 8192", NULL);

    const char *dir = getenv("TDM_BENCH_OUT");
    char path[1024];
    snprintf(path, sizeof(path), "%s/gpu_decode_tandem.json", dir ? dir : ".");
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f,
                "{\"decode_bs1_tok_s\": %.1f, \"decode_bs8_tok_s\": %.1f, "
                "\"decode_bs32_tok_s\": %.1f, \"prefill_2048_tok_s\": %.1f, "
                "\"prefill_2048_plain_flash_tok_s\": %.1f, \"copy_GBps\": %.1f, "
                "\"roofline_bs1_tok_s\": %.1f, \"weight_bytes_per_token\": %llu, "
                "\"runs\": %d, \"new_tokens\": %u, \"prompt\": %u, "
                "\"cpu_match_32\": %s, \"cpu_first_divergence\": %d, \"variant_runs\": %d, "
                "\"tokens_equal_first\": {\"same_engine_again\": %s, \"second_beside\": %s, "
                "\"small_pool_after\": %s}, "
                "\"graph_replay_us\": {\"bs1\": %.1f, \"bs8\": %.1f, \"bs32\": %.1f}, "
                "\"variants\": {",
                tok_s[0], tok_s[1], tok_s[2], prefill_tok_s, prefill_plain_tok_s, copy_gbps,
                roofline, (unsigned long long)m.view.resident_bytes, runs, steps, PROMPT,
                cmp_ok ? "true" : "false", first_div, vruns, tf_null(diag_again),
                tf_null(diag_beside), tf_null(diag_small), replay_us[0], replay_us[1],
                replay_us[2]);
        /* one row per variant, the headline row's decode keys (null: not run at that size) */
        tdm_cuda_engine_opts_t dflt;
        tdm_cuda_engine_opts_default(&dflt);
        for (size_t v = 0; v < NVAR; v++) {
            fprintf(f, "%s\n  \"%s\": {", v ? "," : "", var[v].key);
            for (int b = 0; b < 3; b++) {
                if (vtok[v][b] > 0)
                    fprintf(f, "\"decode_bs%u_tok_s\": %.1f, ", bss[b], vtok[v][b]);
                else
                    fprintf(f, "\"decode_bs%u_tok_s\": null, ", bss[b]);
            }
            fprintf(f,
                    "\"gemv_ksplit\": %d, \"attn_cluster\": %d, \"l2pf_mb\": %u, "
                    "\"l2pf_tail_mb\": %u, \"l2pf_op\": %d, \"l2pf_early\": %d, "
                    "\"swiglu_fused\": %d, \"argmax_fused\": %d, \"embed_fused\": %d, "
                    "\"pdl_early\": %d, "
                    "\"tokens_equal_default\": %s, \"tokens_equal_control\": %s}",
                    var[v].ksplit, var[v].cluster, var[v].l2pf, var[v].l2tail, var[v].l2op,
                    var[v].l2early, var[v].fuse ? var[v].fuse & 1 : dflt.swiglu_fused,
                    var[v].fuse ? (var[v].fuse & 2) != 0 : dflt.argmax_fused,
                    var[v].embed ? var[v].embed == 1 : dflt.embed_fused,
                    var[v].pdl_early ? var[v].pdl_early == 1 : dflt.pdl_early, tf_null(vsame[v]),
                    tf_null(vsame_ctl[v]));
        }
        fprintf(f, "}");
        /* long prompts (null: not measured) */
        static const char *const lname[2] = {"8192", "32768"};
        char key[64];
        for (int mode = 0; mode < 2; mode++)
            for (int li = 0; li < 2; li++) {
                snprintf(key, sizeof(key), "prefill_%s%s_tok_s", lname[li], mode ? "_chunked" : "");
                json_num(f, key, 1, l_tok[mode][li]);
                snprintf(key, sizeof(key), "prefill_%s%s_ms", lname[li], mode ? "_chunked" : "");
                json_num(f, key, 2, l_ms[mode][li]);
            }
        json_num(f, "prefill_32768_first_chunk_ms", 2, l_first_ms);
        json_num(f, "prefill_32768_last_chunk_ms", 2, l_last_ms);
        json_num(f, "prefill_32768_last_chunk_vs_first", 3,
                 l_first_ms > 0 && l_last_ms > 0 ? l_last_ms / l_first_ms : 0);
        fprintf(f, ", \"prefill_chunk\": %u, \"prefill_long_runs\": %d}\n", LONG_CHUNK, lruns);
        fclose(f);
    }
    free(m.mem);
    return 0;
}
