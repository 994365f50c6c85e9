/*
 * bench/bench_stat.h — the timing helpers the CPU micro-benchmarks share (bench/kernels.c,
 * bench/checksum_segments.c): process CPU seconds (on a shared machine, wall time includes
 * waiting for a core) and the median of a sample.
 */
#ifndef TDM_BENCH_STAT_H
#define TDM_BENCH_STAT_H

#include <stdlib.h>
#include <time.h>

static inline double tdm_bench_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int tdm_bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v; the middle value, or the mean of the two middle ones. */
static inline double tdm_bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), tdm_bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
