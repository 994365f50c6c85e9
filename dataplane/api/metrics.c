/*
 * metrics.c — Prometheus text exposition for /metrics (docs/contracts.md §g: every name starts with
 * tandem_): gauge/counter lines and fixed-bucket histograms. Histograms are lock-free so the
 * scheduler thread can observe TTFT/ITL from its callbacks while the loop renders them; a scrape
 * may see a count one ahead of a bucket, never a torn value.
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

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

static void head(FILE *f, const char *name, const char *help, const char *type)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void tdm_api_metric_gauge(FILE *f, const char *name, const char *help, double v)
{
    head(f, name, help, "gauge");
    if (v == floor(v) && fabs(v) < 9e15)
        fprintf(f, "%s %.0f\n", name, v);
    else
        fprintf(f, "%s %.6g\n", name, v);
}

void tdm_api_metric_counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    head(f, name, help, "counter");
    fprintf(f, "%s %" PRIu64 "\n", name, v);
}

void tdm_api_metric_hist(FILE *f, const char *name, const char *help, const tdm_api_hist_t *h)
{
    tdm_api_hist_t *m = (tdm_api_hist_t *)h;
    head(f, name, help, "histogram");
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->n_bounds; i++) {
        cum += atomic_load_explicit(&m->bucket[i], memory_order_relaxed);
        if (i < h->n_bounds)
            fprintf(f, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, h->bounds[i], cum);
        else
            fprintf(f, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
    }
    /* _count equals the +Inf bucket by construction (the sum of the buckets read above). */
    fprintf(f, "%s_sum %.6f\n", name,
            (double)atomic_load_explicit(&m->sum_us, memory_order_relaxed) / 1e6);
    fprintf(f, "%s_count %" PRIu64 "\n", name, cum);
}

void tdm_api_metric_label(FILE *f, const char *v)
{
    for (; v && *v; v++) {
        if (*v == '"' || *v == '\\')
            fputc('\\', f);
        if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}
