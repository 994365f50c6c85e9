/*
 * test-cuda-sample.c — the device sampler (kernels/cuda/sample.h) against the host sampler
 * (tdm_sample_token) on the same rows and (seed, step): the chosen token must be identical
 * (greedy and sampled: temperature, top-k, top-p, min-p and their mixes, ties, -inf entries),
 * logprobs within 1e-4 and the top-N ids identical, a NaN / +inf / all -inf row an error on both.
 * A: random rows at three vocabulary sizes (911, 32000, 151936; the largest left out under
 * compute-sanitizer, TDM_UNDER_SANITIZER). B: the executor's adapter
 * (tdm_exec_cuda_forward_sample) on three fixture checkpoints: 3 sequences prefilled, then 8
 * steps fed with the device's own tokens, each row compared with the host sampler over the same
 * logits (a plain forward of the same spans: the kernels are deterministic), and a row marked
 * `host` gets its logits row copied bit for bit. Without a device it skips with the reason.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/model.h>
#include <tdm/sample.h>

#include "kernels/cuda/exec_cuda.h"
#include "kernels/cuda/sample.h"
#include "kernels/cuda/smoke.h"
#include "gpu_fixture.h"
#include "tap.h"

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}
static double unif(void)
{
    return (rnd() + 0.5) / 4294967296.0;
}
static float gauss(void)
{
    return (float)(sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()));
}

/* the parameter mixes each row cycles through */
static void params_of(int k, tdm_sample_params_t *p)
{
    tdm_sample_params_default(p);
    p->seed = 1000u + (uint64_t)k * 7919u;
    switch (k % 10) {
    case 0: /* greedy */
        break;
    case 1:
        p->temperature = 1.0f;
        break;
    case 2:
        p->temperature = 0.7f;
        p->top_k = 40;
        break;
    case 3:
        p->temperature = 0.8f;
        p->top_p = 0.9f;
        break;
    case 4:
        p->temperature = 1.2f;
        p->min_p = 0.05f;
        break;
    case 5:
        p->temperature = 0.9f;
        p->top_k = 50;
        p->top_p = 0.8f;
        p->min_p = 0.02f;
        break;
    case 6:
        p->temperature = 1.0f;
        p->top_k = 1; /* greedy */
        break;
    case 7:
        p->temperature = 2.0f;
        p->top_p = 0.5f;
        break;
    case 8:
        p->temperature = 0.5f;
        p->top_k = 3;
        p->top_p = 0.99f;
        break;
    default:
        p->temperature = 1.5f;
        p->top_p = 0.95f;
        p->min_p = 0.1f;
        break;
    }
    p->logprobs = k % 3 == 0;
    p->top_logprobs = k % 4 == 0 ? 5u : 0u;
}

static void req_of(const tdm_sample_params_t *p, uint64_t step, tdm_cuda_sample_req_t *q)
{
    memset(q, 0, sizeof(*q));
    q->temperature = p->temperature;
    q->top_p = p->top_p;
    q->min_p = p->min_p;
    q->top_k = p->top_k;
    q->seed = p->seed;
    q->step = step;
    q->logprobs = p->logprobs;
    q->top_logprobs = p->top_logprobs;
}

/* 1 when the device's result equals the host's (status, id, top ids; logprobs within 1e-4) */
static int same(tdm_status_t hs, const tdm_sample_result_t *h, const tdm_cuda_sample_out_t *d,
                char *why, size_t wl)
{
    if ((int)hs != d->status) {
        snprintf(why, wl, "status host %d device %d", (int)hs, d->status);
        return 0;
    }
    if (hs != TDM_OK)
        return 1;
    if (h->id != d->r.id) {
        snprintf(why, wl, "id host %d device %d", h->id, d->r.id);
        return 0;
    }
    if (fabsf(h->logprob - d->r.logprob) > 1e-4f || h->n_top != d->r.n_top) {
        snprintf(why, wl, "logprob %g/%g n_top %u/%u", (double)h->logprob, (double)d->r.logprob,
                 h->n_top, d->r.n_top);
        return 0;
    }
    for (uint32_t k = 0; k < h->n_top; k++)
        if (h->top_ids[k] != d->r.top_ids[k] ||
            fabsf(h->top_logprobs[k] - d->r.top_logprobs[k]) > 1e-4f) {
            snprintf(why, wl, "top %u: %d/%d", k, h->top_ids[k], d->r.top_ids[k]);
            return 0;
        }
    return 1;
}

#define ROWS 40u

static void random_rows(uint32_t V)
{
    float *l = malloc((size_t)ROWS * V * sizeof(float));
    tdm_cuda_sample_req_t q[ROWS];
    tdm_cuda_sample_out_t d[ROWS];
    tdm_sample_params_t p[ROWS];
    tdm_sample_scratch_t S;
    if (!l || tdm_sample_scratch_init(&S, V) != TDM_OK)
        bail_out("no memory");
    for (uint32_t r = 0; r < ROWS; r++) {
        float *x = l + (size_t)r * V;
        float scale = r % 5 == 0 ? 0.3f : r % 5 == 1 ? 8.0f : 2.5f;
        for (uint32_t i = 0; i < V; i++) {
            x[i] = gauss() * scale;
            if (r % 4 == 1) /* ties: quarter steps */
                x[i] = roundf(x[i] * 4.0f) / 4.0f;
            if (r % 6 == 2 && rnd() % 7 == 0)
                x[i] = -INFINITY;
        }
        if (r % 8 == 3) /* a tie at the top */
            x[V / 2] = x[V / 3] = 40.0f;
        params_of((int)r, &p[r]);
        req_of(&p[r], r * 3u, &q[r]);
    }
    /* the rules: NaN, +inf and all -inf rows are errors */
    l[(size_t)(ROWS - 3) * V + V / 2] = NAN;
    l[(size_t)(ROWS - 2) * V + 7] = INFINITY;
    for (uint32_t i = 0; i < V; i++)
        l[(size_t)(ROWS - 1) * V + i] = -INFINITY;
    tdm_status_t st = tdm_cuda_sample_host_rows(l, ROWS, V, q, d);
    ok(st == TDM_OK, "V %u: %u rows sampled on the device (%s)", V, ROWS, tdm_status_str(st));
    if (st != TDM_OK) {
        free(l);
        tdm_sample_scratch_free(&S);
        return;
    }
    int all = 1, greedy_n = 0, sampled_n = 0, bad_n = 0;
    char why[160] = "";
    for (uint32_t r = 0; r < ROWS; r++) {
        tdm_sample_result_t h;
        memset(&h, 0, sizeof(h));
        tdm_status_t hs = tdm_sample_token(&p[r], l + (size_t)r * V, V, NULL, r * 3u, &S, &h);
        if (!same(hs, &h, &d[r], why, sizeof(why))) {
            if (all)
                diag("V %u row %u (params %u): %s", V, r, r % 10, why);
            all = 0;
        }
        if (hs != TDM_OK)
            bad_n++;
        else if (p[r].temperature > 0.0f && p[r].top_k != 1)
            sampled_n++;
        else
            greedy_n++;
    }
    ok(all, "V %u: device == host on every row (%d greedy, %d sampled, %d error rows)", V, greedy_n,
       sampled_n, bad_n);
    ok(bad_n == 3, "V %u: the NaN, +inf and all -inf rows are errors (%d)", V, bad_n);
    /* the same sampled row over many steps: the RNG streams agree draw after draw */
    tdm_cuda_sample_req_t qs[ROWS];
    tdm_cuda_sample_out_t ds[ROWS];
    float *rep = malloc((size_t)ROWS * V * sizeof(float));
    for (uint32_t r = 0; r < ROWS; r++) {
        memcpy(rep + (size_t)r * V, l + (size_t)3 * V, V * sizeof(float));
        req_of(&p[3], 100u + r, &qs[r]);
    }
    int agree = tdm_cuda_sample_host_rows(rep, ROWS, V, qs, ds) == TDM_OK, distinct = 0;
    int32_t first = -2;
    for (uint32_t r = 0; agree && r < ROWS; r++) {
        tdm_sample_result_t h;
        tdm_status_t hs = tdm_sample_token(&p[3], rep + (size_t)r * V, V, NULL, 100u + r, &S, &h);
        agree = same(hs, &h, &ds[r], why, sizeof(why));
        if (first == -2)
            first = h.id;
        else if (h.id != first)
            distinct = 1;
    }
    ok(agree && distinct, "V %u: %u steps of one top-p request draw the host's tokens (%s)", V,
       ROWS, agree ? (distinct ? "not all equal" : "all equal!") : why);
    free(rep);
    free(l);
    tdm_sample_scratch_free(&S);
}

#define NSEQ 3u
#define STEPS 8u
#define PER 16u

static const char *models[] = {"tiny-llama3", "tiny-qwen2-sharded", "tiny-llama-gqa"};

static void fixture(const char *dir, const char *name)
{
    tdm_model_t *m = NULL;
    tdm_model_view_t view;
    tdm_exec_cuda_t *x = NULL;
    char err[256] = "", why[160] = "";
    if (!gpu_fixture_load(dir, name, &m, &view))
        return;
    const uint32_t V = tdm_model_config(m)->vocab_size, ps = 16;
    tdm_exec_cuda_cfg_t cfg = {&view, TDM_DTYPE_BF16, ps, 4, 128, PER * ps, NSEQ * PER, 0.3};
    tdm_status_t st = tdm_exec_cuda_init(&cfg, &x, err, sizeof(err));
    ok(st == TDM_OK, "%s: CUDA executor (%s)", name, err);
    if (st != TDM_OK) {
        tdm_model_view_free(&view);
        tdm_model_free(m);
        return;
    }
    tdm_sample_scratch_t S;
    if (tdm_sample_scratch_init(&S, V) != TDM_OK)
        bail_out("no memory");
    uint32_t pages[NSEQ * PER], lens[NSEQ] = {5, 17, 33}, pos[NSEQ];
    for (uint32_t i = 0; i < NSEQ * PER; i++)
        pages[i] = i;
    int32_t prompt[NSEQ][40], cur[NSEQ];
    tdm_graph_seq_t sq[NSEQ];
    tdm_sample_params_t p[NSEQ];
    tdm_cuda_sample_req_t q[NSEQ];
    tdm_cuda_sample_out_t d[NSEQ];
    float *lg = malloc((size_t)NSEQ * V * sizeof(float)), *hl = malloc((size_t)NSEQ * V * 4);
    for (uint32_t s = 0; s < NSEQ; s++) {
        for (uint32_t i = 0; i < lens[s]; i++)
            prompt[s][i] = (int32_t)(rnd() % V);
        sq[s] = (tdm_graph_seq_t){prompt[s], lens[s], 0, pages + s * PER, PER, 0};
        pos[s] = lens[s];
        params_of((int)(s * 3 + 2), &p[s]); /* three sampled mixes, one with top logprobs */
    }
    int all = 1, host_row_ok = 1, sampled = 0;
    for (uint32_t step = 0; step <= STEPS && all; step++) {
        uint32_t rows = 0;
        for (uint32_t s = 0; s < NSEQ; s++)
            req_of(&p[s], step, &q[s]);
        q[1].host = step == STEPS / 2; /* one step of one row through the host path */
        st = tdm_exec_cuda_forward_sample(x, sq, NSEQ, q, hl, d, &rows);
        if (st != TDM_OK || rows != NSEQ) {
            ok(0, "%s: forward_sample step %u (%s, %u rows)", name, step, tdm_status_str(st), rows);
            all = 0;
            break;
        }
        st = tdm_exec_cuda_forward(x, sq, NSEQ, lg, NSEQ, &rows);
        if (st != TDM_OK) {
            ok(0, "%s: forward step %u (%s)", name, step, tdm_status_str(st));
            all = 0;
            break;
        }
        for (uint32_t s = 0; s < NSEQ; s++) {
            tdm_sample_result_t h;
            memset(&h, 0, sizeof(h));
            tdm_status_t hs = tdm_sample_token(&p[s], lg + (size_t)s * V, V, NULL, step, &S, &h);
            if (q[s].host) {
                if (memcmp(hl + (size_t)s * V, lg + (size_t)s * V, V * sizeof(float)))
                    host_row_ok = 0;
                cur[s] = h.id;
                continue;
            }
            if (!same(hs, &h, &d[s], why, sizeof(why))) {
                diag("%s step %u seq %u: %s", name, step, s, why);
                all = 0;
            }
            sampled += p[s].temperature > 0.0f && p[s].top_k != 1;
            cur[s] = d[s].r.id;
        }
        for (uint32_t s = 0; s < NSEQ; s++) {
            sq[s] = (tdm_graph_seq_t){&cur[s], 1, pos[s], pages + s * PER, PER, 0};
            pos[s]++;
        }
    }
    ok(all, "%s: %u steps of %u sequences: device tokens == host sampler's (%d sampled rows)", name,
       STEPS + 1, NSEQ, sampled);
    ok(host_row_ok, "%s: a row marked host gets its logits row bit for bit", name);
    free(lg);
    free(hl);
    tdm_sample_scratch_free(&S);
    tdm_exec_cuda_free(x);
    tdm_model_view_free(&view);
    tdm_model_free(m);
}

int main(void)
{
    tdm_cuda_smoke_dev_t dev;
    char why[256] = "", dir[1024];
    const char *src = getenv("TDM_SRCDIR");
    if (tdm_cuda_smoke_probe(&dev, why, sizeof(why)) != TDM_OK) {
        char msg[320];
        snprintf(msg, sizeof(msg), "no CUDA device (%s)", why);
        skip_all(msg);
    }
    if (dev.major != 9)
        skip_all("built for sm_90a only");
    random_rows(911);
    random_rows(32000);
    if (!getenv("TDM_UNDER_SANITIZER")) /* memcheck: the two smaller vocabularies suffice */
        random_rows(151936);
    snprintf(dir, sizeof(dir), "%.900s/tests/fixtures", src ? src : ".");
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        fixture(dir, models[i]);
    return done_testing();
}
