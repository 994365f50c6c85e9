/*
 * test-cuda-exec.c — the executor's CUDA adapter (kernels/cuda/exec_cuda.h) against the CPU graph
 * (tdm_graph_forward) on fixture checkpoints, with the executor's span type. Three sequences of
 * different lengths are prefilled in chunks that start on different steps, so calls mix prefill
 * chunks with one-token rows (a one-token last chunk among them) in an order that changes every
 * step; once every prompt is in, greedy decode steps of all three (graph replay), each sequence in
 * its own page range. Run twice: mixed calls with their one-token rows through the decode
 * attention (engine.h opts.mixed_decode, the default) and with every row through the flash tiles
 * (TDM_CUDA_MIXED_DECODE=0). tiny-llama-gqa (head_dim 16) has neither kernel and takes the
 * generic attention either way: it runs in the second pass only (docs/cuda.md "Mixed steps":
 * on the first pass's prompts it flips once at a CPU margin of 0.026, a bf16 rounding flip by
 * tools/gpu_bf16_emu.py). Greedy tokens must agree; a divergence is
 * allowed only at a step whose CPU top-1 margin is <= 1e-2 (docs/design.md §9), after which that
 * sequence is no longer compared. The pipelined form (launch_sample with ids carried on the device)
 * on a mixed call whose rows the engine reorders equals the same call given its ids. Also: the pool
 * honours the max_pages cap and reports its bytes, bad configurations and too many sequences are
 * refused. Without a device it skips with the reason.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/kv.h>
#include <tdm/model.h>

#include "dataplane/model/graph.h"
#include "kernels/backend.h"
#include "kernels/cuda/exec_cuda.h"
#include "kernels/cuda/smoke.h"
#include "gpu_fixture.h"
#include "tap.h"

#define NSEQ 3u
#define STEPS 8u
#define PER 16u /* pages per sequence */

/* the first two have head_dim 64 (the decode and flash kernels), the last 16 (neither) */
static const char *models[] = {"tiny-llama3", "tiny-qwen2-sharded", "tiny-llama-gqa"};

static uint64_t rs = 0x6a09e667f3bcc909ull;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}

/* argmax and top-1 margin of one logits row */
static uint32_t top1(const float *x, uint32_t V, double *margin)
{
    uint32_t b = 0, b2 = UINT32_MAX;
    for (uint32_t i = 1; i < V; i++)
        if (x[i] > x[b])
            b = i;
    for (uint32_t i = 0; i < V; i++)
        if (i != b && (b2 == UINT32_MAX || x[i] > x[b2]))
            b2 = i;
    *margin = (double)x[b] - x[b2];
    return b;
}

static void check_model(const char *dir, const char *name, const char *tag)
{
    tdm_model_t *m = NULL;
    tdm_model_view_t view;
    tdm_backend_t be;
    tdm_kv_layout_t l;
    tdm_kv_pool_t *pool = NULL;
    tdm_graph_t *g = NULL;
    tdm_exec_cuda_t *x = NULL;
    char err[256] = "";
    int have_be = 0;

    if (!gpu_fixture_load(dir, name, &m, &view))
        return;
    const tdm_model_config_t *mc = tdm_model_config(m);
    const uint32_t V = mc->vocab_size, ps = 16;
    tdm_exec_cuda_cfg_t cfg = {&view, TDM_DTYPE_BF16, ps, 4, 128, PER * ps, NSEQ * PER, 0.3};
    tdm_status_t st = tdm_exec_cuda_init(&cfg, &x, err, sizeof(err));
    uint64_t kvb = x ? tdm_exec_cuda_kv_bytes(x) : 0, want = 0;
    if (x)
        (void)tdm_kv_layout_pool_bytes(tdm_exec_cuda_layout(x), NSEQ * PER, &want);
    ok(st == TDM_OK && tdm_exec_cuda_num_pages(x) == NSEQ * PER && kvb == want && kvb > 0,
       "%s: adapter init (%s%s), %u pages (cap %u), %llu KV bytes", name, tdm_status_str(st),
       err[0] ? err : "", x ? tdm_exec_cuda_num_pages(x) : 0, NSEQ * PER, (unsigned long long)kvb);
    if (st != TDM_OK)
        goto out;
    if ((st = tdm_backend_cpu_init(0, &be)) != TDM_OK)
        goto out;
    have_be = 1;
    if ((st = tdm_kv_layout_init(mc, TDM_DTYPE_BF16, ps, 1, 0, &l)) != TDM_OK ||
        (st = tdm_kv_pool_init(&l, NSEQ * PER, &pool)) != TDM_OK ||
        (st = tdm_graph_init(&view, tdm_kv_pool_buffers(pool), &be, NULL, 128, &g)) != TDM_OK) {
        ok(0, "%s: CPU graph (%s)", name, tdm_status_str(st));
        goto out;
    }

    /* sequence s: prompt plen[s] in chunks of chunk[s] from step first[s], then decode */
    static const uint32_t plen[NSEQ] = {5, 17, 33}, chunk[NSEQ] = {5, 8, 16},
                          first[NSEQ] = {0, 0, 1};
    int32_t prompt[NSEQ][33], cur_g[NSEQ], cur_c[NSEQ];
    uint32_t pages[NSEQ][PER], rows = 0, fed[NSEQ] = {0, 0, 0}, gen[NSEQ] = {0, 0, 0};
    tdm_graph_seq_t sq[NSEQ];
    float *lg = malloc((size_t)4 * V * 4), *lc = malloc((size_t)4 * V * 4);
    int live[NSEQ] = {1, 1, 1}, agree = 1, compared = 0, mixed_calls = 0;
    for (uint32_t s = 0; s < NSEQ; s++) {
        for (uint32_t i = 0; i < PER; i++)
            pages[s][i] = (NSEQ - 1 - s) * PER + i; /* tables not in sequence order */
        for (uint32_t i = 0; i < plen[s]; i++)
            prompt[s][i] = (int32_t)(rnd() % V);
    }
    for (uint32_t step = 0; agree; step++) {
        uint32_t ord[NSEQ], n = 0, ones = 0;
        for (uint32_t k = 0; k < NSEQ; k++) { /* the batch's order rotates with the step */
            const uint32_t s = (step + k) % NSEQ;
            if (step < first[s] || gen[s] >= STEPS)
                continue;
            if (fed[s] < plen[s]) {
                const uint32_t c = plen[s] - fed[s] < chunk[s] ? plen[s] - fed[s] : chunk[s];
                sq[n] = (tdm_graph_seq_t){prompt[s] + fed[s], c, fed[s], pages[s], PER, 0};
            } else {
                sq[n] = (tdm_graph_seq_t){&cur_g[s], 1, plen[s] + gen[s] - 1, pages[s], PER, 0};
            }
            ones += sq[n].n_tokens == 1;
            ord[n++] = s;
        }
        if (n == 0)
            break;
        mixed_calls += ones && ones < n;
        st = tdm_exec_cuda_forward(x, sq, n, lg, 4, &rows);
        if (st != TDM_OK || rows != n) {
            ok(0, "%s: CUDA forward step %u (%s, %u rows)", name, step, tdm_status_str(st), rows);
            agree = 0;
            break;
        }
        for (uint32_t k = 0; k < n; k++)
            if (fed[ord[k]] == plen[ord[k]])
                sq[k].tokens = &cur_c[ord[k]];
        st = tdm_graph_forward(g, sq, n, lc, 4, &rows);
        if (st != TDM_OK) {
            ok(0, "%s: CPU forward step %u (%s)", name, step, tdm_status_str(st));
            agree = 0;
            break;
        }
        for (uint32_t k = 0; k < n; k++) {
            const uint32_t s = ord[k];
            if (fed[s] < plen[s]) {
                fed[s] += sq[k].n_tokens;
                if (fed[s] < plen[s])
                    continue; /* a chunk before the last: no token */
            }
            gen[s]++;
            double mg, mc2;
            uint32_t tg = top1(lg + (size_t)k * V, V, &mg), tc = top1(lc + (size_t)k * V, V, &mc2);
            if (live[s] && tg != tc) {
                if (mc2 > 1e-2)
                    agree = 0;
                /* each side's gap between the two tokens: a rounding flip has both small */
                diag("%s: seq %u step %u: GPU %u, CPU %u (CPU margin %.3g; GPU logit gap %.4g, "
                     "CPU %.4g; GPU margin %.3g)",
                     name, s, step, tg, tc, mc2, lg[(size_t)k * V + tg] - lg[(size_t)k * V + tc],
                     lc[(size_t)k * V + tc] - lc[(size_t)k * V + tg], mg);
                live[s] = 0;
            }
            compared += live[s];
            /* both continue on their own tokens: each KV holds its own history */
            cur_g[s] = (int32_t)tg;
            cur_c[s] = (int32_t)tc;
        }
    }
    ok(agree && mixed_calls >= 2,
       "%s%s: 3 sequences prefilled in chunks beside decode rows (%d mixed calls), then batched "
       "decode to %u tokens each, follow the CPU graph (margin rule; %d sequence-steps compared)",
       name, tag, mixed_calls, STEPS, compared);

    /* more sequences than configured, bad configurations */
    tdm_graph_seq_t five[5];
    for (uint32_t i = 0; i < 5; i++)
        five[i] = (tdm_graph_seq_t){prompt[0], 1, 0, pages[0], PER, 0};
    ok(tdm_exec_cuda_forward(x, five, 5, lg, 4, &rows) == TDM_ERR_OVERFLOW,
       "%s: 5 sequences with max_seqs 4 -> OVERFLOW", name);
    free(lg);
    free(lc);
out:
    tdm_graph_free(g);
    tdm_kv_pool_free(pool);
    if (have_be)
        tdm_backend_cpu_free(&be);
    tdm_exec_cuda_free(x);
    tdm_model_view_free(&view);
    tdm_model_free(m);
}

/* The pipelined form on a mixed call: step A prefills sequence 0 (9 tokens) and the first 12 of
 * sequence 1's 20, sampling both rows; step B = [sequence 1's last 8 tokens, sequence 0's next
 * token, sequence 2's 1-token prompt], launched with sequence 0's token carried from A's row 0 on
 * the device (the engine lays B's one-token rows out first, so the caller's row 8 is not the
 * engine's) and finished; then B again through forward_sample with that id given. The two B
 * results must be identical (the same kernels on the same rows), and A's id must be what B's
 * sampler saw as the input (B's KV for sequence 0 holds it). */
static void check_pipe(const char *dir, const char *name)
{
    tdm_model_t *m = NULL;
    tdm_model_view_t view;
    tdm_exec_cuda_t *x = NULL;
    char err[256] = "";
    if (!gpu_fixture_load(dir, name, &m, &view))
        return;
    const uint32_t V = tdm_model_config(m)->vocab_size, ps = 16;
    tdm_exec_cuda_cfg_t cfg = {&view, TDM_DTYPE_BF16, ps, 4, 128, PER * ps, NSEQ * PER, 0.3};
    tdm_status_t st = tdm_exec_cuda_init(&cfg, &x, err, sizeof(err));
    if (st != TDM_OK) {
        ok(0, "%s: CUDA executor (%s)", name, err);
        goto out;
    }
    uint32_t pages[NSEQ][PER], rows = 0;
    int32_t p0[9], p1[20], p2 = (int32_t)(rnd() % V), t0 = 0;
    for (uint32_t s = 0; s < NSEQ; s++)
        for (uint32_t i = 0; i < PER; i++)
            pages[s][i] = s * PER + i;
    for (uint32_t i = 0; i < 9; i++)
        p0[i] = (int32_t)(rnd() % V);
    for (uint32_t i = 0; i < 20; i++)
        p1[i] = (int32_t)(rnd() % V);
    tdm_cuda_sample_req_t q[NSEQ];
    tdm_cuda_sample_out_t a[NSEQ], b1[NSEQ], b2[NSEQ];
    memset(q, 0, sizeof(q));
    memset(b1, 0, sizeof(b1));
    memset(b2, 0, sizeof(b2));
    for (uint32_t s = 0; s < NSEQ; s++)
        q[s] = (tdm_cuda_sample_req_t){0.8f, 0.95f, 0.0f, 0, 77 + s, 0, 0, 1, 0, 0};
    tdm_graph_seq_t sa[2] = {{p0, 9, 0, pages[0], PER, 0}, {p1, 12, 0, pages[1], PER, 0}};
    st = tdm_exec_cuda_forward_sample(x, sa, 2, q, NULL, a, &rows);
    int good = st == TDM_OK && rows == 2 && a[0].status == TDM_OK && a[0].r.id >= 0;
    uint32_t dst = 8, src = 0;
    int slot = -1;
    if (good) {
        int32_t zero = 0;
        tdm_graph_seq_t sb[NSEQ] = {{p1 + 12, 8, 12, pages[1], PER, 0},
                                    {&zero, 1, 9, pages[0], PER, 0},
                                    {&p2, 1, 0, pages[2], PER, 0}};
        for (uint32_t s = 0; s < NSEQ; s++)
            q[s].step = 1;
        st = tdm_exec_cuda_launch_sample(x, sb, NSEQ, q, &dst, &src, 1, &rows, &slot);
        if (st == TDM_OK)
            st = tdm_exec_cuda_finish_sample(x, slot, b1, NSEQ);
        good = st == TDM_OK && rows == NSEQ;
        t0 = a[0].r.id;
        sb[1].tokens = &t0;
        if (good)
            st = tdm_exec_cuda_forward_sample(x, sb, NSEQ, q, NULL, b2, &rows);
        good = good && st == TDM_OK;
    }
    int same = good;
    for (uint32_t s = 0; same && s < NSEQ; s++)
        same = b1[s].status == b2[s].status && b1[s].r.id == b2[s].r.id &&
               memcmp(&b1[s].r.logprob, &b2[s].r.logprob, sizeof(b1[s].r.logprob)) == 0;
    ok(same,
       "%s: a mixed call launched with its one-token row's id carried on the device (caller row "
       "8, engine row 0) == the same call given the id (%s; ids %d %d %d vs %d %d %d)",
       name, tdm_status_str(st), b1[0].r.id, b1[1].r.id, b1[2].r.id, b2[0].r.id, b2[1].r.id,
       b2[2].r.id);
    /* a carried id's destination past the call's rows is refused, not written */
    if (good) {
        int32_t one = 1;
        tdm_graph_seq_t sc[2] = {{&one, 1, 10, pages[0], PER, 0}, {p1, 4, 20, pages[1], PER, 0}};
        uint32_t far = 5;
        st = tdm_exec_cuda_launch_sample(x, sc, 2, q, &far, &src, 1, &rows, &slot);
        ok(st == TDM_ERR_RANGE, "%s: a carried id for row 5 of a 5-row call -> RANGE (%s)", name,
           tdm_status_str(st));
    }
out:
    tdm_exec_cuda_free(x);
    tdm_model_view_free(&view);
    tdm_model_free(m);
}

int main(void)
{
    tdm_cuda_smoke_dev_t dev;
    char why[256] = "", dir[1024], err[128];
    const char *src = getenv("TDM_SRCDIR");
    if (tdm_cuda_smoke_probe(&dev, why, sizeof(why)) != TDM_OK) {
        char msg[320];
        snprintf(msg, sizeof(msg), "no CUDA device (%s)", why);
        skip_all(msg);
    }
    if (dev.major != 9)
        skip_all("built for sm_90a only");
    snprintf(dir, sizeof(dir), "%.900s/tests/fixtures", src ? src : ".");
    setenv("TDM_CUDA_MIXED_DECODE", "1", 1); /* read at init */
    for (size_t i = 0; i < 2; i++) /* head_dim 64: tiny-llama-gqa's 16 takes neither kernel */
        check_model(dir, models[i], " (mixed calls' one-token rows through the decode attention)");
    for (uint32_t i = 0; i < 5 + 17 + 33; i++)
        (void)rnd(); /* its prompts' draws: every later prompt as in the runs of docs/cuda.md */
    check_pipe(dir, "tiny-llama3"); /* head_dim 64: the decode attention takes its mixed rows */
    setenv("TDM_CUDA_MIXED_DECODE", "0", 1);
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        check_model(dir, models[i], " (mixed calls all through flash tiles)");
    unsetenv("TDM_CUDA_MIXED_DECODE");

    tdm_exec_cuda_t *x = NULL;
    tdm_exec_cuda_cfg_t bad = {NULL, TDM_DTYPE_BF16, 16, 4, 128, 256, 0, 0.5};
    ok(tdm_exec_cuda_init(&bad, &x, err, sizeof(err)) == TDM_ERR_INVAL && !x,
       "no model view -> INVAL (%s)", err);
    return done_testing();
}
