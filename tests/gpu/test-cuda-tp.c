/*
 * test-cuda-tp.c — tensor parallelism on ONE GPU (kernels/cuda/engine.h, dataplane/tp/gpu.h), on
 * every fixture checkpoint and models/demo, with synthetic prompts (3, prefilled one at a time,
 * then STEPS greedy decode steps of all three together through the graphs):
 *  - TP=2 through the host-staged backend (two processes, forked before any CUDA call in this
 *    one, one context each on the one device): greedy tokens equal TP=1's under the
 *    docs/design.md §9 margin rule (a divergence only at a step whose TP=1 top-1 margin is
 *    <= 1e-2; reported);
 *  - the device marks (I2) of a GPU rank stuck in a collective: rank 1 takes the idle path for
 *    one step, rank 0's slot shows in_coll = allreduce with its seq (time to visible reported),
 *    and rank 0's wait aborts at its deadline with TDM_ERR_TIMEOUT (never a hang), the group's
 *    abort word set;
 *  - the one-rank NCCL communicator: every collective issued (coll_seq = 1 + forwards x (2L + 1):
 *    the unique id's broadcast, then the steps; coll_hash = the chain of tdm_comm_hash_step over
 *    them) and prefill + decode logits and
 *    tokens equal to TP=1 without collectives bit for bit;
 *  - the cost of the marks: bs1 decode graph replay with the marks on and off, alternated in one
 *    process (medians), and NCCL's one-rank all-reduce times.
 * TDM_TP_JSON=path writes the figures (bench/multi-gpu.sh adds git_sha). Without a device it
 * skips with the reason.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <tdm/model.h>
#include <tdm/time.h>

#include "dataplane/tp/gpu.h"
#include "dataplane/tp/nccl.h"
#include "kernels/cuda/engine.h"
#include "kernels/cuda/smoke.h"
#include "tap.h"

#define STEPS 12u
#define NP 3u
#define PER 16u /* pages per sequence */
#define NMODELS 8

static const char *models[NMODELS] = {
    "tests/fixtures/models/tiny-llama-gqa",     "tests/fixtures/models/tiny-llama-gqa-fp32",
    "tests/fixtures/models/tiny-llama3",        "tests/fixtures/models/tiny-llama2-fp16",
    "tests/fixtures/models/tiny-qwen2-sharded", "tests/fixtures/models/tiny-qwen3",
    "tests/fixtures/models/tiny-qwen3-hf5",     "models/demo"};

typedef struct shared {
    int32_t tok[NMODELS][NP][STEPS];
    int st[NMODELS]; /* tdm_status_t of rank 0's run, or 1 when not run */
    char why[NMODELS][160];
    /* the stuck step (last model) */
    int stuck_op;
    uint64_t stuck_seq, stuck_seen_us, stuck_abort_us;
    int stuck_fwd_st, stuck_abort_word;
} shared_t;

typedef struct prompt {
    int32_t ids[40];
    uint32_t len;
} prompt_t;

static void prompts(uint32_t V, prompt_t *p)
{
    static const uint32_t lens[NP] = {9, 17, 33};
    uint32_t x = 12345;
    for (uint32_t i = 0; i < NP; i++) {
        p[i].len = lens[i];
        for (uint32_t j = 0; j < p[i].len; j++) {
            x = x * 1103515245u + 12345u;
            p[i].ids[j] = (int32_t)((x >> 8) % V);
        }
    }
}

static void opts(tdm_cuda_engine_opts_t *o)
{
    tdm_cuda_engine_opts_default(o);
    o->mem_fraction_static = 0.3;
    o->max_tokens = 256;
    o->max_batch = 8;
    o->max_pages_per_seq = PER;
    o->max_pages = NP * PER;
}

/* Greedy: prefill each prompt alone, then STEPS - 1 decode steps of all together. lg (optional):
 * (STEPS x NP x V) logits per step; *nfwd: forwards run. */
static tdm_status_t greedy(tdm_cuda_engine_t *e, const prompt_t *p, uint32_t V,
                           int32_t out[NP][STEPS], float *lg, uint32_t *nfwd)
{
    uint32_t pages[NP * PER], rows;
    int32_t cur[NP], ids[NP];
    tdm_status_t st = TDM_OK;
    for (uint32_t i = 0; i < NP * PER; i++)
        pages[i] = i;
    for (uint32_t i = 0; i < NP && st == TDM_OK; i++) {
        tdm_cuda_seq_t s = {p[i].ids, p[i].len, 0, pages + i * PER, PER, 0};
        st = tdm_cuda_engine_forward(e, &s, 1, lg ? lg + (size_t)i * V : NULL, &ids[0], 1, &rows);
        out[i][0] = cur[i] = ids[0];
        (*nfwd)++;
    }
    for (uint32_t step = 1; step < STEPS && st == TDM_OK; step++) {
        tdm_cuda_seq_t seqs[NP];
        for (uint32_t i = 0; i < NP; i++)
            seqs[i] = (tdm_cuda_seq_t){&cur[i], 1, p[i].len + step - 1, pages + i * PER, PER, 0};
        st = tdm_cuda_engine_forward(e, seqs, NP, lg ? lg + (size_t)step * NP * V : NULL, ids, NP,
                                     &rows);
        (*nfwd)++;
        for (uint32_t i = 0; i < NP && st == TDM_OK; i++)
            out[i][step] = cur[i] = ids[i];
    }
    return st;
}

typedef struct group {
    tdm_progress_page_t *page;
    void *region;
} group_t;

static void group_make(group_t *g, uint32_t n, size_t slot_bytes)
{
    tdm_shm_comm_cfg_t cfg = {.n_ranks = n, .slot_bytes = slot_bytes};
    if (tdm_progress_create_anon((uint16_t)n, 5, &g->page) != TDM_OK)
        bail_out("progress page");
    g->region = mmap(NULL, tdm_shm_comm_region_size(&cfg), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g->region == MAP_FAILED || tdm_shm_comm_region_init(g->region, &cfg) != TDM_OK)
        bail_out("shm region");
}

/* One TP=2 rank over every model; rank 0 writes the tokens. Then the stuck step. */
static int tp2_rank(uint32_t rank, group_t *grp, shared_t *sh)
{
    for (int mi = 0; mi < NMODELS; mi++) {
        tdm_model_t *m = NULL;
        tdm_model_view_t view;
        tdm_cuda_engine_t *e = NULL;
        tdm_cuda_engine_opts_t o;
        tdm_comm_t c;
        tdm_gpu_comm_t *g = NULL;
        char err[256] = "";
        prompt_t p[NP];
        int32_t out[NP][STEPS];
        uint32_t nf = 0;
        tdm_status_t st = tdm_model_load(models[mi], &m, err, sizeof(err));
        if (st == TDM_OK)
            st = tdm_model_view_init(m, 2, rank, &view, err, sizeof(err));
        if (st != TDM_OK) {
            if (rank == 0) {
                sh->st[mi] = st;
                snprintf(sh->why[mi], sizeof(sh->why[mi]), "load: %s", err);
            }
            tdm_model_free(m);
            continue;
        }
        const tdm_model_config_t *mc = tdm_model_config(m);
        prompts(mc->vocab_size, p);
        opts(&o);
        st = tdm_cuda_engine_init(&view, &o, &e);
        if (st == TDM_OK)
            st = tdm_shm_comm_init(grp[mi].region, rank, grp[mi].page, 0, &c);
        tdm_gpu_comm_cfg_t gc = {.kind = TDM_GPU_COMM_HOST,
                                 .tensor = &c,
                                 .max_floats = 256 * 1024,
                                 .deadline_us = 2000000};
        if (st == TDM_OK)
            st = tdm_gpu_comm_init(&gc, &g, err, sizeof(err));
        if (st == TDM_OK)
            st = tdm_cuda_engine_set_coll(e, tdm_gpu_comm_coll(g));
        if (st == TDM_OK)
            st = greedy(e, p, mc->vocab_size, out, NULL, &nf);
        if (rank == 0) {
            sh->st[mi] = st;
            memcpy(sh->tok[mi], out, sizeof(out));
            if (st != TDM_OK && !sh->why[mi][0])
                snprintf(sh->why[mi], sizeof(sh->why[mi]), "%s %s", tdm_status_str(st), err);
        }
        if (st == TDM_OK && mi == NMODELS - 1) {
            /* the stuck step: rank 1 idles, rank 0 enters the step's first all-reduce */
            uint32_t pages[PER];
            for (uint32_t i = 0; i < PER; i++)
                pages[i] = i;
            int32_t id, tok = out[0][STEPS - 1];
            uint32_t rows;
            tdm_cuda_seq_t s = {&tok, 1, p[0].len + STEPS - 1, pages, PER, 0};
            if (rank == 0) {
                uint64_t t0 = tdm_time_mono_us();
                sh->stuck_fwd_st = tdm_cuda_engine_forward(e, &s, 1, NULL, &id, 1, &rows);
                sh->stuck_abort_us = tdm_time_mono_us() - t0;
            } else {
                uint64_t t0 = tdm_time_mono_us();
                tdm_rank_record_t r;
                memset(&r, 0, sizeof(r));
                while (tdm_time_mono_us() - t0 < 5000000u) {
                    tdm_progress_read(&grp[mi].page->slot[0], &r);
                    if (r.in_coll_op != TDM_COLL_NONE)
                        break;
                    usleep(200);
                }
                sh->stuck_seen_us = tdm_time_mono_us() - t0;
                sh->stuck_op = (int)r.in_coll_op;
                sh->stuck_seq = r.in_coll_seq;
                while (!atomic_load(&grp[mi].page->abort) && tdm_time_mono_us() - t0 < 8000000u)
                    usleep(1000);
                sh->stuck_abort_word = (int)atomic_load(&grp[mi].page->abort);
            }
        }
        tdm_cuda_engine_free(e);
        tdm_gpu_comm_free(g);
        tdm_model_view_free(&view);
        tdm_model_free(m);
    }
    return 0;
}

/* docs/design.md §9 against the reference's own margins. Returns 1 when conformant. */
static int margin_ok(const int32_t ref[NP][STEPS], const int32_t got[NP][STEPS], const float *lg,
                     uint32_t V, uint32_t *agree, int *div)
{
    int good = 1;
    for (uint32_t i = 0; i < NP; i++)
        for (uint32_t s = 0; s < STEPS; s++) {
            if (got[i][s] == ref[i][s]) {
                (*agree)++;
                continue;
            }
            const float *row = lg + ((size_t)s * NP + i) * V; /* prefill rows are step 0's */
            float b1 = -INFINITY, b2 = -INFINITY;
            for (uint32_t v = 0; v < V; v++)
                if (row[v] > b1) {
                    b2 = b1;
                    b1 = row[v];
                } else if (row[v] > b2) {
                    b2 = row[v];
                }
            diag("prompt %u: first divergence at step %u (ref %d, got %d, ref margin %.4g)", i, s,
                 ref[i][s], got[i][s], (double)(b1 - b2));
            (*div)++;
            if (b1 - b2 > 1e-2f)
                good = 0;
            break;
        }
    return good;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n ? v[n / 2] : 0;
}

int main(void)
{
    tdm_cuda_smoke_dev_t dev;
    char why[256] = "";
    const char *jpath = getenv("TDM_TP_JSON");
    const char *src = getenv("TDM_SRCDIR");
    if (src && chdir(src) != 0)
        bail_out("TDM_SRCDIR");
    /* TP=2 first: the children must be the first CUDA users (no context across fork) */
    shared_t *sh =
        mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        bail_out("shared results");
    memset(sh, 0, sizeof(*sh));
    for (int i = 0; i < NMODELS; i++)
        sh->st[i] = 1;
    group_t grp[NMODELS];
    for (int i = 0; i < NMODELS; i++)
        group_make(&grp[i], 2, 64 * 1024);
    pid_t pid[2];
    for (uint32_t r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(tp2_rank(r, grp, sh));
    }
    for (int r = 0; r < 2; r++)
        waitpid(pid[r], NULL, 0);
    if (tdm_cuda_smoke_probe(&dev, why, sizeof(why)) != TDM_OK) {
        char msg[320];
        snprintf(msg, sizeof(msg), "no CUDA device (%s)", why);
        skip_all(msg);
    }
    if (dev.major != 9)
        skip_all("built for sm_90a only");
    FILE *js = jpath ? fopen(jpath, "w") : NULL;
    if (js)
        fprintf(js, "{\"device\": \"%s\", \"models\": [", dev.name);

    double ab_on = 0, ab_off = 0, ab_none = 0;
    for (int mi = 0; mi < NMODELS; mi++) {
        const char *name = strrchr(models[mi], '/') + 1;
        tdm_model_t *m = NULL;
        tdm_model_view_t view;
        tdm_cuda_engine_t *e1 = NULL, *en = NULL;
        tdm_cuda_engine_opts_t o;
        char err[256] = "";
        prompt_t p[NP];
        int32_t ref[NP][STEPS], got[NP][STEPS];
        uint32_t nf1 = 0, nfn = 0;
        if (tdm_model_load(models[mi], &m, err, sizeof(err)) != TDM_OK ||
            tdm_model_view_init(m, 1, 0, &view, err, sizeof(err)) != TDM_OK) {
            ok(0, "%s: load (%s)", name, err);
            continue;
        }
        const tdm_model_config_t *mc = tdm_model_config(m);
        const uint32_t V = mc->vocab_size, L = mc->num_layers;
        prompts(V, p);
        opts(&o);
        float *lg1 = calloc((size_t)STEPS * NP * V, sizeof(float));
        float *lgn = calloc((size_t)STEPS * NP * V, sizeof(float));
        tdm_status_t st = tdm_cuda_engine_init(&view, &o, &e1);
        if (st == TDM_OK)
            st = greedy(e1, p, V, ref, lg1, &nf1);
        ok(st == TDM_OK, "%s: TP=1 reference (%s)", name, tdm_status_str(st));

        /* TP=2 host-staged against it */
        uint32_t agree = 0;
        int div = 0;
        int conform = sh->st[mi] == TDM_OK && st == TDM_OK &&
                      margin_ok(ref, (const int32_t(*)[STEPS])sh->tok[mi], lg1, V, &agree, &div);
        ok(conform,
           "%s: TP=2 host-staged (2 processes, 1 GPU) = TP=1 under the §9 margin rule: %u/%u "
           "tokens equal, %d divergence(s) (%s%s)",
           name, agree, NP * STEPS, div, sh->st[mi] == TDM_OK ? "ok" : "failed: ", sh->why[mi]);

        /* the one-rank NCCL communicator */
        group_t g1;
        group_make(&g1, 1, 4096);
        tdm_comm_t c;
        tdm_gpu_comm_t *gn = NULL;
        tdm_status_t sn = tdm_shm_comm_init(g1.region, 0, g1.page, 0, &c);
        tdm_gpu_comm_cfg_t gc = {.kind = TDM_GPU_COMM_NCCL, .tensor = &c, .max_floats = 1};
        if (sn == TDM_OK)
            sn = tdm_gpu_comm_init(&gc, &gn, err, sizeof(err));
        if (sn == TDM_OK)
            sn = tdm_cuda_engine_init(&view, &o, &en);
        if (sn == TDM_OK)
            sn = tdm_cuda_engine_set_coll(en, tdm_gpu_comm_coll(gn));
        if (sn == TDM_OK)
            sn = greedy(en, p, V, got, lgn, &nfn);
        int same = sn == TDM_OK && st == TDM_OK && !memcmp(got, ref, sizeof(got)) &&
                   !memcmp(lgn, lg1, (size_t)STEPS * NP * V * sizeof(float));
        ok(same,
           "%s: NCCL one-rank communicator: tokens and every step's logits = TP=1 bit for "
           "bit (%s %s)",
           name, tdm_status_str(sn), err);
        /* every collective issued and recorded: (2L + 1) per forward, the CPU hash chain */
        tdm_rank_record_t r;
        tdm_progress_read(&g1.page->slot[0], &r);
        uint64_t h = r.coll_hash, want = 0, n_coll = 0;
        {
            uint32_t rows_seen;
            /* a fresh page; the first collective is NCCL's unique-id broadcast on the shm comm
             * (tdm_nccl_init), recorded like any other */
            uint64_t hh = tdm_comm_hash_step(0, TDM_COLL_BROADCAST, 128, 0);
            n_coll = 1;
            for (uint32_t i = 0; i < NP; i++) { /* prefills: eager, n = len rows, m = 1 */
                for (uint32_t k = 0; k < 2 * L; k++)
                    hh = tdm_comm_hash_step(hh, TDM_COLL_ALLREDUCE,
                                            (uint64_t)p[i].len * mc->hidden_size * 4, 0);
                hh = tdm_comm_hash_step(hh, TDM_COLL_ALLGATHER, (uint64_t)V * 4, 0);
                n_coll += 2 * L + 1;
            }
            rows_seen = 4; /* decode: the bucket of NP = 3 rows */
            for (uint32_t s = 1; s < STEPS; s++) {
                for (uint32_t k = 0; k < 2 * L; k++)
                    hh = tdm_comm_hash_step(hh, TDM_COLL_ALLREDUCE,
                                            (uint64_t)rows_seen * mc->hidden_size * 4, 0);
                hh = tdm_comm_hash_step(hh, TDM_COLL_ALLGATHER, (uint64_t)rows_seen * V * 4, 0);
                n_coll += 2 * L + 1;
            }
            want = hh;
        }
        ok(sn == TDM_OK && r.coll_seq == n_coll && h == want && r.in_coll_op == TDM_COLL_NONE,
           "%s: the device marks recorded %llu collectives (want %llu), coll_hash %s the chain",
           name, (unsigned long long)r.coll_seq, (unsigned long long)n_coll,
           h == want ? "=" : "!=");

        /* marks A/B (bs1 decode replay, same engine, graphs re-captured) on the demo model; a
         * timing, so not under compute-sanitizer (which slows every launch) */
        if (sn == TDM_OK && mi == NMODELS - 1 && getenv("TDM_UNDER_SANITIZER")) {
            skip("%s: the marks' cost is a timing: not measured under compute-sanitizer", name);
        } else if (sn == TDM_OK && mi == NMODELS - 1) {
            uint32_t pages[PER];
            for (uint32_t i = 0; i < PER; i++)
                pages[i] = i;
            int32_t tok = ref[0][0];
            tdm_cuda_seq_t s = {&tok, 1, p[0].len, pages, PER, 0};
            double on[7], off[7], none[7];
            tdm_status_t sa = TDM_OK;
            for (int k = 0; k < 7 && sa == TDM_OK; k++) {
                tdm_cuda_engine_set_marks(en, 1);
                sa = tdm_cuda_engine_replay_us(en, &s, 1, 300, &on[k]);
                tdm_cuda_engine_set_marks(en, 0);
                if (sa == TDM_OK)
                    sa = tdm_cuda_engine_replay_us(en, &s, 1, 300, &off[k]);
                if (sa == TDM_OK)
                    sa = tdm_cuda_engine_replay_us(e1, &s, 1, 300, &none[k]);
            }
            ab_on = median(on, 7);
            ab_off = median(off, 7);
            ab_none = median(none, 7);
            double cost = ab_off > 0 ? (ab_on - ab_off) / ab_off * 100 : 100;
            ok(sa == TDM_OK && cost <= 1.0,
               "%s: marks cost %.2f %% of a bs1 decode step (%.2f us with, %.2f without; TP=1 "
               "without collectives %.2f us)",
               name, cost, ab_on, ab_off, ab_none);
        }
        if (js)
            fprintf(js,
                    "%s{\"model\": \"%s\", \"tp2_host_tokens_equal\": %u, \"tokens\": %u, "
                    "\"tp2_divergences\": %d, \"tp2_conform\": %s, \"nccl1_bit_equal\": %s, "
                    "\"collectives_recorded\": %llu}",
                    mi ? ", " : "", name, agree, NP * STEPS, div, conform ? "true" : "false",
                    same ? "true" : "false", (unsigned long long)r.coll_seq);
        tdm_cuda_engine_free(en);
        tdm_gpu_comm_free(gn);
        tdm_comm_destroy(&c);
        tdm_cuda_engine_free(e1);
        free(lg1);
        free(lgn);
        tdm_model_view_free(&view);
        tdm_model_free(m);
    }
    if (js)
        fprintf(js,
                "], \"marks_ab\": {\"model\": \"demo\", \"us_marks_on\": %.3f, "
                "\"us_marks_off\": %.3f, \"us_tp1_no_coll\": %.3f, \"cost_pct\": %.3f}",
                ab_on, ab_off, ab_none, ab_off > 0 ? (ab_on - ab_off) / ab_off * 100 : -1.0);
    ok(sh->stuck_op == TDM_COLL_ALLREDUCE && sh->stuck_seen_us < 2000000u,
       "stuck GPU rank 0 (rank 1 on the idle path): its slot shows in_coll %s seq %llu after "
       "%.1f ms",
       sh->stuck_op ? "allreduce" : "none", (unsigned long long)sh->stuck_seq,
       (double)sh->stuck_seen_us / 1e3);
    ok(sh->stuck_fwd_st == TDM_ERR_TIMEOUT && sh->stuck_abort_word == 1 &&
           sh->stuck_abort_us < 4000000u,
       "its wait aborts at the 2 s deadline: %s after %.2f s, the group's abort word %d",
       tdm_status_name((tdm_status_t)sh->stuck_fwd_st), (double)sh->stuck_abort_us / 1e6,
       sh->stuck_abort_word);
    /* NCCL one-rank all-reduce (nccl-tests' algbw; busbw is 0 at one rank) */
    {
        group_t g1;
        group_make(&g1, 1, 4096);
        tdm_comm_t c;
        tdm_nccl_t *n = NULL;
        char err[256] = "";
        cudaStream_t s;
        float *buf = NULL;
        const size_t maxb = (size_t)256 << 20;
        tdm_status_t st = tdm_shm_comm_init(g1.region, 0, g1.page, 0, &c);
        if (st == TDM_OK)
            st = tdm_nccl_init(&c, &n, err, sizeof(err));
        if (st == TDM_OK &&
            (cudaStreamCreate(&s) != cudaSuccess || cudaMalloc((void **)&buf, maxb) != cudaSuccess))
            st = TDM_ERR_CUDA;
        if (js)
            fprintf(js, ", \"nccl_allreduce_1rank\": [");
        for (size_t b = 1 << 20; b <= maxb && st == TDM_OK; b <<= 2) {
            cudaEvent_t e0, e1;
            float ms = 0;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            for (int w = 0; w < 5 && st == TDM_OK; w++)
                st = tdm_nccl_allreduce(n, buf, b / 4, s);
            cudaEventRecord(e0, s);
            for (int k = 0; k < 50 && st == TDM_OK; k++)
                st = tdm_nccl_allreduce(n, buf, b / 4, s);
            cudaEventRecord(e1, s);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
            double us = ms * 1e3 / 50;
            diag("NCCL 1-rank all-reduce %zu B: %.2f us, algbw %.1f GB/s", b, us, b / us / 1e3);
            if (js)
                fprintf(js,
                        "%s{\"bytes\": %zu, \"us\": %.3f, \"algbw_gbs\": %.2f, \"busbw_gbs\": 0}",
                        b == (1 << 20) ? "" : ", ", b, us, b / us / 1e3);
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
        }
        if (js)
            fprintf(js, "]");
        ok(st == TDM_OK, "NCCL one-rank all-reduce timed 1 MiB .. 256 MiB (%s)", err);
        cudaFree(buf);
        tdm_nccl_free(n);
    }
    if (js) {
        fprintf(js, "}\n");
        fclose(js);
    }
    return done_testing();
}
