/*
 * kernels.c — CPU kernel throughput beside the machine's memory bandwidth, measured in one run.
 *
 * Matmul y (n, M) = x (n, K) · Wᵀ with bf16 W on TinyLlama-like layer shapes (2048×2048 for
 * q/o_proj, 5632×2048 for gate/up_proj, 2048×5632 for down_proj) at n = 1, 8, 64 (decode
 * batches) and 512 (a prefill chunk), reported as weight GB/s (bf16 bytes of W / time) and
 * GFLOP/s (2·n·M·K / time); and paged attention (GQA 32/4 heads, head_dim 64, bf16 KV) for a
 * prefill of 512 and a decode at context 512. Weights rotate over copies totalling more than
 * the last-level cache, so decode reads W from DRAM as it would in a real forward. The anchors
 * come from the same process: memcpy (bytes copied per second) and a streaming read (bytes
 * summed per second), each with 1 and with all threads. The machine is shared: every number is
 * the median (and min time) of --reps repetitions. Prints one JSON object; not a test.
 *
 * Usage: bench/kernels [--threads N] [--reps R] [--quick]   (env TDM_CPU_ISA picks the path)
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/kv.h>
#include <tdm/time.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_int.h"
#include "bench/bench_stat.h"

#define MAX_REPS 64

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct bw_job {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
    double sink;
} bw_job_t;

static void *copy_worker(void *arg)
{
    bw_job_t *j = arg;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

static void *read_worker(void *arg)
{
    bw_job_t *j = arg;
    const uint64_t *p = (const uint64_t *)j->src;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= j->n / 8; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    j->sink = (double)(s0 ^ s1 ^ s2 ^ s3);
    return NULL;
}

/* Median bytes/s over `reps` passes of `threads` threads over slices of a `bytes` buffer. */
static double bandwidth(unsigned char *src, unsigned char *dst, size_t bytes, uint32_t threads,
                        int reps, int copy)
{
    pthread_t tid[TDM_CPU_MAX_THREADS];
    bw_job_t job[TDM_CPU_MAX_THREADS];
    double rate[MAX_REPS];
    size_t slice = bytes / threads / 64 * 64;

    for (int r = 0; r < reps; r++) {
        uint64_t t0 = tdm_time_mono_us();
        for (uint32_t t = 0; t < threads; t++) {
            job[t] = (bw_job_t){dst + t * slice, src + t * slice, slice, 0};
            if (t > 0)
                pthread_create(&tid[t], NULL, copy ? copy_worker : read_worker, &job[t]);
        }
        (copy ? copy_worker : read_worker)(&job[0]);
        for (uint32_t t = 1; t < threads; t++)
            pthread_join(tid[t], NULL);
        rate[r] = (double)(slice * threads) / ((double)(tdm_time_mono_us() - t0) * 1e-6);
    }
    return tdm_bench_median(rate, reps);
}

typedef struct mm_case {
    const char *name;
    uint32_t M, K;
} mm_case_t;

static void bench_matmul(tdm_backend_t *be, const mm_case_t *c, const uint32_t *ns, int n_ns,
                         int reps, size_t rotate_bytes, int *first)
{
    size_t wbytes = (size_t)c->M * c->K * 2;
    int copies = (int)((rotate_bytes + wbytes - 1) / wbytes);
    uint16_t *w = malloc(wbytes * (size_t)copies);
    uint32_t nmax = ns[n_ns - 1];
    float *x = malloc(sizeof(float) * (size_t)nmax * c->K);
    float *y = malloc(sizeof(float) * (size_t)nmax * c->M);

    for (size_t i = 0; i < wbytes / 2; i++)
        w[i] = tdm_cpu_to_bf16(frand() * 0.05f);
    for (int cp = 1; cp < copies; cp++)
        memcpy(w + (size_t)cp * (wbytes / 2), w, wbytes);
    for (size_t i = 0; i < (size_t)nmax * c->K; i++)
        x[i] = frand();
    for (int ni = 0; ni < n_ns; ni++) {
        uint32_t n = ns[ni];
        double t[MAX_REPS], cpu[MAX_REPS], tmin = 1e30;
        int r_n = n >= 256 ? (reps + 1) / 2 : reps;
        for (int r = 0; r < r_n; r++) {
            tdm_tensor_t wt = {TDM_DTYPE_BF16, c->M, c->K, c->K,
                               w + (size_t)(r % copies) * (wbytes / 2)};
            double c0 = tdm_bench_cpu_seconds();
            uint64_t t0 = tdm_time_mono_us();
            be->matmul(be->ctx, x, n, &wt, NULL, y);
            t[r] = (double)(tdm_time_mono_us() - t0) * 1e-6;
            cpu[r] = tdm_bench_cpu_seconds() - c0;
            if (t[r] < tmin)
                tmin = t[r];
        }
        double tm = tdm_bench_median(t, r_n), cm = tdm_bench_median(cpu, r_n);
        printf(
            "%s    {\"op\": \"matmul_bf16\", \"shape\": \"%s\", \"M\": %u, \"K\": %u, \"n\": %u, "
            "\"median_ms\": %.3f, \"min_ms\": %.3f, \"cpu_ms\": %.3f, \"weight_gbps\": %.2f, "
            "\"gflops\": %.2f}",
            *first ? "" : ",\n", c->name, c->M, c->K, n, tm * 1e3, tmin * 1e3, cm * 1e3,
            (double)wbytes / tm * 1e-9, 2.0 * n * c->M * c->K / tm * 1e-9);
        *first = 0;
        fflush(stdout);
    }
    free(w);
    free(x);
    free(y);
}

/* GQA attention over a bf16 paged cache: prefill of `len` rows, then one decode row at len. */
static void bench_attention(tdm_backend_t *be, uint32_t len, int reps, int *first)
{
    const uint32_t H = 32, KV = 4, hd = 64, ps = 16;
    tdm_model_config_t c;
    tdm_kv_layout_t l;
    tdm_kv_pool_t *pool;
    uint32_t np = len / ps + 1, *pages = malloc(sizeof(uint32_t) * np);
    float *k = malloc(sizeof(float) * (len + 1) * KV * hd);
    float *v = malloc(sizeof(float) * (len + 1) * KV * hd);
    float *q = malloc(sizeof(float) * (len + 1) * H * hd);
    float *out = malloc(sizeof(float) * (len + 1) * H * hd);
    tdm_attn_row_t *rows = malloc(sizeof(*rows) * (len + 1));

    memset(&c, 0, sizeof(c));
    c.num_layers = 1;
    c.num_kv_heads = KV;
    c.head_dim = hd;
    if (tdm_kv_layout_init(&c, TDM_DTYPE_BF16, ps, 1, 0, &l) != TDM_OK ||
        tdm_kv_pool_init(&l, np, &pool) != TDM_OK) {
        fprintf(stderr, "kernels: kv pool init failed\n");
        exit(1);
    }
    for (uint32_t i = 0; i < np; i++)
        pages[i] = np - 1 - i;
    for (size_t i = 0; i < (size_t)(len + 1) * KV * hd; i++) {
        k[i] = frand();
        v[i] = frand();
    }
    for (size_t i = 0; i < (size_t)(len + 1) * H * hd; i++)
        q[i] = frand();
    for (uint32_t i = 0; i <= len; i++)
        rows[i] = (tdm_attn_row_t){pages, np, i};
    const tdm_kv_buffers_t *kb = tdm_kv_pool_buffers(pool);
    be->kv_write(be->ctx, kb, 0, k, v, rows, len + 1);
    for (int mode = 0; mode < 2; mode++) {
        double t[MAX_REPS], cpu[MAX_REPS], tmin = 1e30;
        for (int r = 0; r < reps; r++) {
            double c0 = tdm_bench_cpu_seconds();
            uint64_t t0 = tdm_time_mono_us();
            if (mode == 0)
                be->attn_prefill(be->ctx, kb, 0, q, H, rows, len, out);
            else
                be->attn_decode(be->ctx, kb, 0, q + (size_t)len * H * hd, H, &rows[len], 1, out);
            t[r] = (double)(tdm_time_mono_us() - t0) * 1e-6;
            cpu[r] = tdm_bench_cpu_seconds() - c0;
            if (t[r] < tmin)
                tmin = t[r];
        }
        double tm = tdm_bench_median(t, reps), cm = tdm_bench_median(cpu, reps);
        /* q·k and p·v: 2 flops each per (query row, head, key, element) */
        double pairs = mode == 0 ? (double)len * (len + 1) / 2 : (double)(len + 1);
        printf("%s    {\"op\": \"%s\", \"heads\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
               "\"kv_dtype\": \"bf16\", \"len\": %u, \"median_ms\": %.3f, \"min_ms\": %.3f, "
               "\"cpu_ms\": %.3f, \"gflops\": %.2f}",
               *first ? "" : ",\n", mode == 0 ? "attn_prefill" : "attn_decode", H, KV, hd, len,
               tm * 1e3, tmin * 1e3, cm * 1e3, 4.0 * pairs * H * hd / tm * 1e-9);
        *first = 0;
        fflush(stdout);
    }
    tdm_kv_pool_free(pool);
    free(pages);
    free(k);
    free(v);
    free(q);
    free(out);
    free(rows);
}

int main(int argc, char **argv)
{
    uint32_t threads = 0;
    int reps = 9, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--reps R] [--quick]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS)
        reps = 9;

    tdm_backend_t be;
    if (tdm_backend_cpu_init(threads, &be) != TDM_OK) {
        fprintf(stderr, "kernels: backend init failed\n");
        return 1;
    }
    threads = tdm_backend_cpu_threads(&be);

    size_t bw_bytes = (size_t)256 << 20;
    unsigned char *src = malloc(bw_bytes), *dst = malloc(bw_bytes);
    memset(src, 1, bw_bytes);
    memset(dst, 2, bw_bytes);
    double cp1 = bandwidth(src, dst, bw_bytes, 1, reps, 1);
    double rd1 = bandwidth(src, dst, bw_bytes, 1, reps, 0);
    double cpn = bandwidth(src, dst, bw_bytes, threads, reps, 1);
    double rdn = bandwidth(src, dst, bw_bytes, threads, reps, 0);
    free(src);
    free(dst);

    printf("{\n  \"backend\": \"%s\", \"threads\": %u, \"reps\": %d,\n", be.name, threads, reps);
    printf("  \"anchor\": {\"memcpy_gbps_1t\": %.2f, \"read_gbps_1t\": %.2f, "
           "\"memcpy_gbps\": %.2f, \"read_gbps\": %.2f},\n",
           cp1 * 1e-9, rd1 * 1e-9, cpn * 1e-9, rdn * 1e-9);
    printf("  \"results\": [\n");
    static const mm_case_t cases[3] = {
        {"qo_proj 2048x2048", 2048, 2048},
        {"gate_up 5632x2048", 5632, 2048},
        {"down 2048x5632", 2048, 5632},
    };
    static const uint32_t ns[4] = {1, 8, 64, 512};
    int first = 1;
    for (int ci = 0; ci < (quick ? 1 : 3); ci++)
        bench_matmul(&be, &cases[ci], ns, quick ? 3 : 4, reps, (size_t)192 << 20, &first);
    bench_attention(&be, 512, reps, &first);
    printf("\n  ]\n}\n");
    tdm_backend_cpu_free(&be);
    return 0;
}
