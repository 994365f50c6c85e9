/*
 * test-prom.c — the Prometheus text writer (tdm/prom.h) byte for byte: HELP/TYPE heads, whole and
 * fractional gauges, counters, cumulative histogram buckets with +Inf/_sum/_count, label
 * escaping and the build-info family.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/prom.h>

#include "tap.h"

static char *render(void (*fn)(FILE *f))
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        bail_out("open_memstream failed");
    fn(f);
    fclose(f);
    return text;
}

static void gauges(FILE *f)
{
    tdm_prom_gauge(f, "tandem_a", "A whole gauge", 42);
    tdm_prom_gauge(f, "tandem_b", "A fraction", 0.25);
    tdm_prom_counter(f, "tandem_c_total", "A counter", 18446744073709551615ull);
}

static void hist(FILE *f)
{
    static const double bounds[2] = {0.005, 0.5};
    static const uint64_t bucket[3] = {1, 0, 2};
    tdm_prom_hist(f, "tandem_h_seconds", "A histogram", bounds, 2, bucket, 3.5);
}

static void label(FILE *f)
{
    fputs("x{g=\"", f);
    tdm_prom_label(f, "a\"b\\c\nd");
    fputs("\"}", f);
    tdm_prom_label(f, NULL);
}

static void info(FILE *f)
{
    tdm_prom_build_info(f, "tandemd");
}

int main(void)
{
    char *t = render(gauges);
    is_str(t,
           "# HELP tandem_a A whole gauge\n# TYPE tandem_a gauge\ntandem_a 42\n"
           "# HELP tandem_b A fraction\n# TYPE tandem_b gauge\ntandem_b 0.25\n"
           "# HELP tandem_c_total A counter\n# TYPE tandem_c_total counter\n"
           "tandem_c_total 18446744073709551615\n",
           "gauges (whole without a fraction) and a counter");
    free(t);
    t = render(hist);
    is_str(t,
           "# HELP tandem_h_seconds A histogram\n# TYPE tandem_h_seconds histogram\n"
           "tandem_h_seconds_bucket{le=\"0.005\"} 1\ntandem_h_seconds_bucket{le=\"0.5\"} 1\n"
           "tandem_h_seconds_bucket{le=\"+Inf\"} 3\ntandem_h_seconds_sum 3.500000\n"
           "tandem_h_seconds_count 3\n",
           "histogram: cumulative buckets, +Inf, _sum, _count = +Inf");
    free(t);
    t = render(label);
    is_str(t, "x{g=\"a\\\"b\\\\c\\nd\"}", "label values escape quote, backslash and newline");
    free(t);
    t = render(info);
    ok(strncmp(t,
               "# HELP tandem_build_info The build: package version and git revision.\n"
               "# TYPE tandem_build_info gauge\ntandem_build_info{program=\"tandemd\",version=\"",
               strlen("# HELP tandem_build_info The build: package version and git revision.\n"
                      "# TYPE tandem_build_info gauge\ntandem_build_info{program=\"tandemd\","
                      "version=\"")) == 0 &&
           strstr(t, "\",revision=\"") && strstr(t, "\"} 1\n"),
       "build info: program, version, revision, value 1");
    free(t);
    return done_testing();
}
