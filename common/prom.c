/*
 * prom.c — the Prometheus text exposition writer of both daemons (tdm/prom.h).
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>

#include <tdm/prom.h>

#include "common/version.h"

void tdm_prom_head(FILE *f, const char *name, const char *help, const char *type)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void tdm_prom_label(FILE *f, const char *v)
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

void tdm_prom_gauge(FILE *f, const char *name, const char *help, double v)
{
    tdm_prom_head(f, name, help, "gauge");
    if (v == floor(v) && fabs(v) < 9e15)
        fprintf(f, "%s %.0f\n", name, v);
    else
        fprintf(f, "%s %.6g\n", name, v);
}

void tdm_prom_counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    tdm_prom_head(f, name, help, "counter");
    fprintf(f, "%s %" PRIu64 "\n", name, v);
}

void tdm_prom_hist(FILE *f, const char *name, const char *help, const double *bounds,
                   size_t n_bounds, const uint64_t *bucket, double sum)
{
    tdm_prom_head(f, name, help, "histogram");
    uint64_t cum = 0;
    for (size_t i = 0; i <= n_bounds; i++) {
        cum += bucket[i];
        if (i < n_bounds)
            fprintf(f, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, bounds[i], cum);
        else
            fprintf(f, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
    }
    fprintf(f, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name, sum, name, cum);
}

void tdm_prom_build_info(FILE *f, const char *program)
{
    tdm_prom_head(f, "tandem_build_info", "The build: package version and git revision.", "gauge");
    fprintf(f, "tandem_build_info{program=\"");
    tdm_prom_label(f, program);
    fprintf(f, "\",version=\"%s\",revision=\"%s\"} 1\n", PACKAGE_VERSION, TDM_GIT_REV);
}
