/*
 * log.c — one formatted line per call, written with a single write(2) so lines from threads
 * never interleave. The syslog "<N>" prefix lets journald keep the priority of each line when
 * stderr is a journal stream.
 */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <tdm/log.h>

static const char *const subsys_names[] = {"core", "model", "tok",    "kv", "sched", "tp",
                                           "xfer", "api",   "report", "cp", "db",    "cuda"};
_Static_assert(sizeof(subsys_names) / sizeof(subsys_names[0]) == TDM_SUB_MAX,
               "subsys_names must name every tdm_log_subsys_t");

static _Atomic int log_level = TDM_LOG_INFO;
static _Atomic unsigned log_mask = ~0u;
static _Atomic int log_prefix = 0;
static char log_ident[32] = "tandem";

const char *tdm_log_subsys_name(tdm_log_subsys_t sub)
{
    return (unsigned)sub < TDM_SUB_MAX ? subsys_names[sub] : "?";
}

void tdm_log_set_level(tdm_log_level_t level)
{
    atomic_store(&log_level, (int)level);
}

int tdm_log_set_mask(const char *list)
{
    unsigned mask = 0;
    if (!list || !strcasecmp(list, "all") || !*list) {
        atomic_store(&log_mask, ~0u);
        return 0;
    }
    if (!strcasecmp(list, "none")) {
        atomic_store(&log_mask, 0);
        return 0;
    }
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ",");
        int found = 0;
        for (int i = 0; i < TDM_SUB_MAX; i++) {
            if (strlen(subsys_names[i]) == n && !strncasecmp(p, subsys_names[i], n)) {
                mask |= 1u << i;
                found = 1;
            }
        }
        if (!found)
            return -1;
        p += n;
        if (*p == ',')
            p++;
    }
    atomic_store(&log_mask, mask);
    return 0;
}

void tdm_log_init(const char *ident)
{
    const char *lv = getenv("TDM_LOG_LEVEL");
    if (ident) {
        strncpy(log_ident, ident, sizeof(log_ident) - 1);
        log_ident[sizeof(log_ident) - 1] = '\0';
    }
    if (lv) {
        if (!strcasecmp(lv, "debug"))
            tdm_log_set_level(TDM_LOG_DEBUG);
        else if (!strcasecmp(lv, "info"))
            tdm_log_set_level(TDM_LOG_INFO);
        else if (!strcasecmp(lv, "warn"))
            tdm_log_set_level(TDM_LOG_WARN);
        else if (!strcasecmp(lv, "error"))
            tdm_log_set_level(TDM_LOG_ERROR);
    }
    if (tdm_log_set_mask(getenv("TDM_LOG_SUBSYS")) != 0)
        tdm_log_set_mask("all");
    const char *pf = getenv("TDM_LOG_PREFIX");
    if (pf)
        atomic_store(&log_prefix, atoi(pf) != 0);
    else
        atomic_store(&log_prefix, getenv("JOURNAL_STREAM") != NULL);
}

int tdm_log_enabled(tdm_log_subsys_t sub, tdm_log_level_t level)
{
    if ((int)level > atomic_load_explicit(&log_level, memory_order_relaxed))
        return 0;
    return ((atomic_load_explicit(&log_mask, memory_order_relaxed) >> ((unsigned)sub & 31)) & 1u);
}

static const char *level_name(tdm_log_level_t level)
{
    switch (level) {
    case TDM_LOG_ERROR:
        return "error";
    case TDM_LOG_WARN:
        return "warn";
    case TDM_LOG_INFO:
        return "info";
    default:
        return "debug";
    }
}

void tdm_vlog(tdm_log_subsys_t sub, tdm_log_level_t level, const char *fmt, va_list ap)
{
    char line[2048];
    int n = 0;
    if (atomic_load_explicit(&log_prefix, memory_order_relaxed))
        n = snprintf(line, sizeof(line), "<%d>", (int)level);
    n += snprintf(line + n, sizeof(line) - (size_t)n, "%s[%s] level=%s ", log_ident,
                  tdm_log_subsys_name(sub), level_name(level));
    if (n < (int)sizeof(line) - 2) {
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        if (m < 0)
            m = 0;
        n += m;
        if (n > (int)sizeof(line) - 2)
            n = (int)sizeof(line) - 2; /* truncated; keep the newline */
    }
    /* a message must stay one journal line */
    for (int i = 0; i < n; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void tdm_log(tdm_log_subsys_t sub, tdm_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tdm_vlog(sub, level, fmt, ap);
    va_end(ap);
}
