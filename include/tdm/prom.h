/*
 * tdm/prom.h — the Prometheus text exposition format (version 0.0.4), written by both daemons'
 * GET /metrics (docs/contracts.md §g: every name starts with tandem_).
 *
 * Each family is "# HELP name help", "# TYPE name type", then its samples. A label value goes
 * through tdm_prom_label (backslash, double quote and newline escaped); names and help texts are
 * the caller's constants. Values: a whole number below 2^53 prints without a fraction, others with
 * %.6g (gauges) or as the caller formats them (tdm_prom_head + its own sample lines).
 * Writes to a FILE (open_memstream); no allocation of its own, thread-safe per FILE.
 */
#ifndef TDM_PROM_H
#define TDM_PROM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "# HELP name help\n# TYPE name type\n"; type is "gauge", "counter" or "histogram". */
void tdm_prom_head(FILE *f, const char *name, const char *help, const char *type);
/* A label value, escaped; NULL writes nothing. */
void tdm_prom_label(FILE *f, const char *v);

/* One family with one unlabelled sample. */
void tdm_prom_gauge(FILE *f, const char *name, const char *help, double v);
void tdm_prom_counter(FILE *f, const char *name, const char *help, uint64_t v);

/* A fixed-bucket histogram: bucket[i] counts the observations in (bounds[i-1], bounds[i]]
 * (not cumulative), bucket[n_bounds] those above the last bound; bounds in the family's unit
 * (seconds). Writes the cumulative _bucket{le} series, +Inf, _sum and _count (= the +Inf bucket).
 */
void tdm_prom_hist(FILE *f, const char *name, const char *help, const double *bounds,
                   size_t n_bounds, const uint64_t *bucket, double sum);

/* tandem_build_info{program,version,revision} 1: the package version and the git revision the
 * tree was configured at. */
void tdm_prom_build_info(FILE *f, const char *program);

#endif
