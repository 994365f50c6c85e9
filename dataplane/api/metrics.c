/*
 * metrics.c — the worker's fixed-bucket latency histograms, written to /metrics through tdm/prom.h.
 * Histograms are lock-free so the scheduler thread can observe TTFT/ITL from its callbacks while
 * the loop renders them; a scrape may see a count one ahead of a bucket, never a torn value.
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include <tdm/prom.h>

#include "dataplane/api/api.h"

void tdm_api_hist_init(tdm_api_hist_t *h, const double *bounds, size_t n_bounds)
{
    memset(h, 0, sizeof(*h));
    h->bounds = bounds;
    h->n_bounds = n_bounds < TDM_API_HIST_BUCKETS ? n_bounds : TDM_API_HIST_BUCKETS;
}

void tdm_api_hist_observe_us(tdm_api_hist_t *h, uint64_t us)
{
    double s = (double)us / 1e6;
    size_t i = 0;
    while (i < h->n_bounds && s > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void tdm_api_hist_snap(const tdm_api_hist_t *h, tdm_api_hist_snap_t *ret)
{
    tdm_api_hist_t *m = (tdm_api_hist_t *)h;
    memset(ret, 0, sizeof(*ret));
    for (size_t i = 0; i <= h->n_bounds; i++)
        ret->bucket[i] = atomic_load_explicit(&m->bucket[i], memory_order_relaxed);
}

uint64_t tdm_api_hist_quantile_us(const tdm_api_hist_t *h, const tdm_api_hist_snap_t *prev,
                                  const tdm_api_hist_snap_t *now, double q)
{
    uint64_t d[TDM_API_HIST_BUCKETS + 1], total = 0;
    for (size_t i = 0; i <= h->n_bounds; i++) {
        /* a snapshot never goes back; a stale prev (a reset) counts as none */
        d[i] = now->bucket[i] >= prev->bucket[i] ? now->bucket[i] - prev->bucket[i] : 0;
        total += d[i];
    }
    if (total == 0 || h->n_bounds == 0)
        return 0;
    double rank = q * (double)total, cum = 0;
    for (size_t i = 0; i <= h->n_bounds; i++) {
        if (d[i] == 0 || cum + (double)d[i] < rank) {
            cum += (double)d[i];
            continue;
        }
        if (i == h->n_bounds)
            break;
        double lo = i ? h->bounds[i - 1] : 0, hi = h->bounds[i];
        double s = lo + (hi - lo) * ((rank - cum) / (double)d[i]);
        return (uint64_t)(s * 1e6 + 0.5);
    }
    return (uint64_t)(h->bounds[h->n_bounds - 1] * 1e6 + 0.5);
}

void tdm_api_hist_write(FILE *f, const char *name, const char *help, const tdm_api_hist_t *h)
{
    tdm_api_hist_t *m = (tdm_api_hist_t *)h;
    uint64_t bucket[TDM_API_HIST_BUCKETS + 1];
    for (size_t i = 0; i <= h->n_bounds; i++)
        bucket[i] = atomic_load_explicit(&m->bucket[i], memory_order_relaxed);
    /* _count is the sum of the buckets read here, so it equals the +Inf bucket */
    tdm_prom_hist(f, name, help, h->bounds, h->n_bounds, bucket,
                  (double)atomic_load_explicit(&m->sum_us, memory_order_relaxed) / 1e6);
}
