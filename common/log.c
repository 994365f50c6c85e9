/*
 * log.c — one logfmt line per call (docs/contracts.md "Logs"), written with a single write(2)
 * so lines from threads never interleave. Under systemd (JOURNAL_STREAM set) each line starts
 * with the sd-daemon "<N>" priority prefix, which journald turns into PRIORITY= and strips.
 */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
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
    tdm_log_level_t level;
    if (tdm_log_level_parse(lv, &level) == 0)
        tdm_log_set_level(level);
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

/* A logfmt key: [A-Za-z_][A-Za-z0-9_.-]* followed by '='; returns its length with the '=', or 0. */
static size_t key_len(const char *p, const char *end)
{
    const char *q = p;
    if (q >= end || !((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_'))
        return 0;
    while (q < end && ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
                       (*q >= '0' && *q <= '9') || *q == '_' || *q == '.' || *q == '-'))
        q++;
    return q < end && *q == '=' ? (size_t)(q - p) + 1 : 0;
}

/* Appends src[0..n) to dst as a quoted logfmt value. */
static size_t put_quoted(char *dst, size_t cap, const char *src, size_t n)
{
    size_t o = 0;
    if (o < cap)
        dst[o++] = '"';
    for (size_t i = 0; i < n && o + 3 < cap; i++) {
        if (src[i] == '"' || src[i] == '\\')
            dst[o++] = '\\';
        dst[o++] = src[i];
    }
    if (o < cap)
        dst[o++] = '"';
    return o;
}

/*
 * The caller's text as logfmt fields. Call sites write `msg="..." k=v`; a quoted value may carry
 * a foreign string with its own quotes (a PostgreSQL error naming "a table"), so a quote closes
 * the value only where a space and another key (or the end) follow, and other quotes are escaped.
 * Text that does not start with a key becomes msg="text".
 */
size_t tdm_log_fields(char *dst, size_t cap, const char *src, size_t n)
{
    const char *p = src, *end = src + n;
    size_t o = 0;
    if (!key_len(p, end)) {
        if (cap < 8)
            return 0;
        memcpy(dst, "msg=", 4);
        return 4 + put_quoted(dst + 4, cap - 4, src, n);
    }
    while (p < end && o + 4 < cap) {
        size_t k = key_len(p, end);
        if (!k) {
            /* a stray word between fields: keep it as a quoted note */
            const char *w = p;
            while (p < end && *p != ' ')
                p++;
            o += (size_t)snprintf(dst + o, cap - o, "note=");
            o += put_quoted(dst + o, cap - o, w, (size_t)(p - w));
        } else {
            memcpy(dst + o, p, k);
            o += k;
            p += k;
            if (p < end && *p == '"') {
                p++;
                dst[o++] = '"';
                while (p < end && o + 3 < cap) {
                    if (*p == '\\' && p + 1 < end) {
                        dst[o++] = *p++;
                        dst[o++] = *p++;
                        continue;
                    }
                    if (*p == '"' && (p + 1 == end || (p[1] == ' ' && key_len(p + 2, end))))
                        break;
                    if (*p == '"')
                        dst[o++] = '\\';
                    dst[o++] = *p++;
                }
                if (p < end)
                    p++;
                dst[o++] = '"';
            } else {
                const char *v = p;
                while (p < end && *p != ' ')
                    p++;
                size_t vn = (size_t)(p - v);
                if (memchr(v, '"', vn) || memchr(v, '=', vn)) {
                    o += put_quoted(dst + o, cap - o, v, vn);
                } else {
                    if (vn > cap - o - 2)
                        vn = cap - o - 2;
                    memcpy(dst + o, v, vn);
                    o += vn;
                }
            }
        }
        while (p < end && *p == ' ')
            p++;
        if (p < end && o + 1 < cap)
            dst[o++] = ' ';
    }
    return o;
}

void tdm_vlog(tdm_log_subsys_t sub, tdm_log_level_t level, const char *fmt, va_list ap)
{
    char text[2048], line[2560];
    int m = vsnprintf(text, sizeof(text), fmt, ap);
    if (m < 0)
        m = 0;
    if (m > (int)sizeof(text) - 1)
        m = (int)sizeof(text) - 1; /* truncated; still one line */
    /* a message must stay one journal line */
    for (int i = 0; i < m; i++)
        if (text[i] == '\n' || text[i] == '\r')
            text[i] = ' ';
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = 0;
    if (atomic_load_explicit(&log_prefix, memory_order_relaxed))
        n = snprintf(line, sizeof(line), "<%d>", (int)level);
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "ts=%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ level=%s proc=%s pid=%d sub=%s ",
                  tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  ts.tv_nsec / 1000, level_name(level), log_ident, (int)getpid(),
                  tdm_log_subsys_name(sub));
    n += (int)tdm_log_fields(line + n, sizeof(line) - (size_t)n - 1, text, (size_t)m);
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

int tdm_log_level_parse(const char *name, tdm_log_level_t *ret)
{
    static const struct {
        const char *name;
        tdm_log_level_t level;
    } levels[] = {{"debug", TDM_LOG_DEBUG},
                  {"info", TDM_LOG_INFO},
                  {"warn", TDM_LOG_WARN},
                  {"error", TDM_LOG_ERROR}};
    for (size_t i = 0; name && i < sizeof(levels) / sizeof(levels[0]); i++)
        if (!strcasecmp(name, levels[i].name)) {
            *ret = levels[i].level;
            return 0;
        }
    return -1;
}

/* libpq's notice processor: NOTICE and WARNING lines from the server as our own lines. */
void tdm_log_pq_notice(void *arg, const char *message)
{
    (void)arg;
    size_t n = strlen(message);
    while (n && (message[n - 1] == '\n' || message[n - 1] == ' '))
        n--;
    tdm_info(TDM_SUB_DB, "msg=\"postgres notice\" src=libpq notice=\"%.*s\"", (int)n, message);
}

void tdm_log(tdm_log_subsys_t sub, tdm_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tdm_vlog(sub, level, fmt, ap);
    va_end(ap);
}
