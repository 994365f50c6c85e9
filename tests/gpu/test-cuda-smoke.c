/*
 * test-cuda-smoke.c — the CUDA smoke kernel (kernels/cuda/smoke.cu) against its CPU reference,
 * bit for bit: fp32 fused multiply-add and the bfloat16 round-to-nearest-even of the result, on
 * fresh random inputs each time, an odd size (a partial last block), a single element, and the
 * awkward values (ties, subnormals, overflow to infinity, signed zeros). Then one timing of a
 * device-resident launch, reported as bandwidth. Without a device (CI) it skips with the reason.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/smoke.h"
#include "tap.h"

static uint64_t rng_state;

static uint32_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

static float rng_float(void)
{
    /* wide range of magnitudes and both signs: sign * 2^[-20,20) * [1,2) */
    uint32_t r = rng_next();
    float m = 1.0f + (float)(r & 0xffffff) / 16777216.0f;
    int e = (int)((r >> 24) % 40) - 20;
    return ldexpf((r & 0x80000000u) ? -m : m, e);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* IEEE round-to-nearest-even to bfloat16 (inputs here are never NaN). */
static uint16_t bf16_rne(float f)
{
    uint32_t u = f32_bits(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Run the kernel on (n) inputs and compare with the CPU; returns mismatches (or -1 on error). */
static long run_and_compare(float a, const float *x, const float *y, size_t n)
{
    float *out = malloc(n * sizeof(float) + 1);
    uint16_t *bf = malloc(n * sizeof(uint16_t) + 1);
    long bad = -1;
    if (!out || !bf)
        goto out;
    memset(out, 0, n * sizeof(float));
    memset(bf, 0, n * sizeof(uint16_t));
    tdm_status_t st = tdm_cuda_smoke_axpy_bf16(a, x, y, n, out, bf);
    if (st != TDM_OK) {
        diag("tdm_cuda_smoke_axpy_bf16: %s", tdm_status_str(st));
        goto out;
    }
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float ref = fmaf(a, x[i], y[i]);
        if (f32_bits(out[i]) != f32_bits(ref) || bf[i] != bf16_rne(ref)) {
            if (bad < 5)
                diag("  [%zu] a=%a x=%a y=%a: got %a/0x%04x, want %a/0x%04x", i, (double)a,
                     (double)x[i], (double)y[i], (double)out[i], bf[i], (double)ref, bf16_rne(ref));
            bad++;
        }
    }
out:
    free(out);
    free(bf);
    return bad;
}

static long random_case(size_t n)
{
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    long bad = -1;
    if (x && y) {
        for (size_t i = 0; i < n; i++) {
            x[i] = rng_float();
            y[i] = rng_float();
        }
        bad = run_and_compare(rng_float(), x, y, n);
    }
    free(x);
    free(y);
    return bad;
}

int main(void)
{
    tdm_cuda_smoke_dev_t dev;
    char why[256] = "";
    tdm_status_t st = tdm_cuda_smoke_probe(&dev, why, sizeof(why));
    if (st != TDM_OK) {
        char msg[320];
        snprintf(msg, sizeof(msg), "no CUDA device (%s)", why);
        skip_all(msg);
    }
    diag("device 0 of %d: %s, sm_%d%d, %d SMs, %.1f GiB, driver %d, runtime %d", dev.count,
         dev.name, dev.major, dev.minor, dev.sm_count, (double)dev.mem_total / (1u << 30),
         dev.driver_version, dev.runtime_version);
    if (dev.major != 9) {
        char msg[320];
        snprintf(msg, sizeof(msg), "built for sm_90a only; device is sm_%d%d", dev.major,
                 dev.minor);
        skip_all(msg);
    }
    rng_state = 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
    diag("seed %llu", (unsigned long long)rng_state);

    is_int(random_case(1000003), 0, "1000003 random elements match the CPU bit for bit");
    is_int(random_case(1000003), 0, "fresh random inputs match again");
    is_int(random_case(1), 0, "one element");

    /* ties to even, subnormals, overflow to inf, signed zero, the largest finite */
    const float x[] = {1.0f, 1.0f, 1.0f, 1e-40f, FLT_MAX, -0.0f, 3.0f, -1.0f};
    const float y[] = {0x1p-8f, 0x3p-8f, 0x1p-9f, 0.0f, FLT_MAX, -0.0f, FLT_MIN, 0x1.ff8p0f};
    is_int(run_and_compare(1.0f, x, y, sizeof(x) / sizeof(x[0])), 0,
           "ties, subnormals, overflow and signed zeros");
    float out1 = 0;
    uint16_t bf1 = 0;
    is_int(tdm_cuda_smoke_axpy_bf16(1.0f, x, y, 0, &out1, &bf1), TDM_OK, "n = 0 is a no-op");
    is_int(tdm_cuda_smoke_axpy_bf16(1.0f, NULL, y, 4, &out1, &bf1), TDM_ERR_INVAL,
           "NULL input refused");

    /* 64 Mi elements: 896 MiB per launch, far past the 60 MB L2 */
    const size_t n = (size_t)64 << 20;
    double ms = 0;
    if (getenv("TDM_UNDER_SANITIZER")) {
        skip("timing skipped under compute-sanitizer");
        return done_testing();
    }
    st = tdm_cuda_smoke_bench(n, 20, &ms);
    is_int(st, TDM_OK, "timed launch");
    if (st == TDM_OK) {
        double gbs = 14.0 * (double)n / (ms * 1e-3) / 1e9;
        diag("bench smoke_axpy_bf16 n=%zu median %.3f ms = %.0f GB/s (read x,y; write out,bf16)", n,
             ms, gbs);
        ok(gbs > 100.0, "bandwidth is that of a GPU (%.0f GB/s > 100)", gbs);
    }
    return done_testing();
}
