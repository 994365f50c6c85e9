/*
 * test-cuda-exec.c — the executor's CUDA adapter (kernels/cuda/exec_cuda.h) against the CPU graph
 * (tdm_graph_forward) on fixture checkpoints, with the executor's span type: three sequences of
 * different lengths prefilled in ONE mixed call (tensor-core prefill attention on the bf16 head-64
 * fixtures), then greedy decode steps of all three together (graph replay), each sequence in its
 * own page range. Greedy tokens must agree; a divergence is allowed only at a step whose CPU top-1
 * margin is <= 1e-2 (docs/design.md §9), after which that sequence is no longer compared. Also: the
 * pool honours the max_pages cap and reports its bytes, bad configurations and too many sequences
 * are refused. Without a device it skips with the reason.
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
#include "tap.h"

#define NSEQ 3u
#define STEPS 8u
#define PER 16u /* pages per sequence */

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

static void check_model(const char *dir, const char *name)
{
    tdm_model_t *m = NULL;
    tdm_model_view_t view;
    tdm_backend_t be;
    tdm_kv_layout_t l;
    tdm_kv_pool_t *pool = NULL;
    tdm_graph_t *g = NULL;
    tdm_exec_cuda_t *x = NULL;
    char path[1200], err[256] = "";
    int have_be = 0;

    snprintf(path, sizeof(path), "%.1000s/models/%.64s", dir, name);
    if (tdm_model_load(path, &m, err, sizeof(err)) != TDM_OK ||
        tdm_model_view_init(m, 1, 0, &view, err, sizeof(err)) != TDM_OK) {
        ok(0, "%s: load (%s)", name, err);
        tdm_model_free(m);
        return;
    }
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

    static const uint32_t plen[NSEQ] = {5, 17, 33};
    int32_t prompt[NSEQ][33], cur_g[NSEQ], cur_c[NSEQ];
    uint32_t pages[NSEQ][PER], rows = 0;
    tdm_graph_seq_t sq[NSEQ];
    float *lg = malloc((size_t)4 * V * 4), *lc = malloc((size_t)4 * V * 4);
    int live[NSEQ] = {1, 1, 1}, agree = 1, compared = 0;
    for (uint32_t s = 0; s < NSEQ; s++) {
        for (uint32_t i = 0; i < PER; i++)
            pages[s][i] = (NSEQ - 1 - s) * PER + i; /* tables not in sequence order */
        for (uint32_t i = 0; i < plen[s]; i++)
            prompt[s][i] = (int32_t)(rnd() % V);
    }
    for (uint32_t step = 0; step <= STEPS && agree; step++) {
        for (uint32_t s = 0; s < NSEQ; s++)
            sq[s] = step == 0
                        ? (tdm_graph_seq_t){prompt[s], plen[s], 0, pages[s], PER, 0}
                        : (tdm_graph_seq_t){&cur_g[s], 1, plen[s] + step - 1, pages[s], PER, 0};
        st = tdm_exec_cuda_forward(x, sq, NSEQ, lg, 4, &rows);
        if (st != TDM_OK || rows != NSEQ) {
            ok(0, "%s: CUDA forward step %u (%s, %u rows)", name, step, tdm_status_str(st), rows);
            agree = 0;
            break;
        }
        for (uint32_t s = 0; s < NSEQ; s++)
            if (step > 0)
                sq[s].tokens = &cur_c[s];
        st = tdm_graph_forward(g, sq, NSEQ, lc, 4, &rows);
        if (st != TDM_OK) {
            ok(0, "%s: CPU forward step %u (%s)", name, step, tdm_status_str(st));
            agree = 0;
            break;
        }
        for (uint32_t s = 0; s < NSEQ; s++) {
            double mg, mc2;
            uint32_t tg = top1(lg + (size_t)s * V, V, &mg), tc = top1(lc + (size_t)s * V, V, &mc2);
            if (live[s] && tg != tc) {
                if (mc2 > 1e-2)
                    agree = 0;
                diag("%s: seq %u step %u: GPU %u, CPU %u (CPU margin %.3g)", name, s, step, tg, tc,
                     mc2);
                live[s] = 0;
            }
            compared += live[s];
            /* both continue on their own tokens: each KV holds its own history */
            cur_g[s] = (int32_t)tg;
            cur_c[s] = (int32_t)tc;
        }
    }
    ok(agree,
       "%s: 3 sequences, mixed prefill + %u batched decode steps follow the CPU graph "
       "(margin rule; %d sequence-steps compared)",
       name, STEPS, compared);

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
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        check_model(dir, models[i]);

    tdm_exec_cuda_t *x = NULL;
    tdm_exec_cuda_cfg_t bad = {NULL, TDM_DTYPE_BF16, 16, 4, 128, 256, 0, 0.5};
    ok(tdm_exec_cuda_init(&bad, &x, err, sizeof(err)) == TDM_ERR_INVAL && !x,
       "no model view -> INVAL (%s)", err);
    return done_testing();
}
