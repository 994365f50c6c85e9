/*
 * tdm/log.h — one log format for every line of every tandem process (docs/contracts.md "Logs").
 *
 * Each line goes to stderr as logfmt:
 *   ts=2026-12-04T14:42:10.123456Z level=info proc=tandemd pid=42 sub=cp msg="..." k=v ...
 * (RFC 3339 UTC timestamp). Under systemd (JOURNAL_STREAM set, or TDM_LOG_PREFIX=1) the line
 * starts with the sd-daemon(3) priority prefix "<N>", which journald parses into PRIORITY= and
 * strips. A subsystem mask (TDM_LOG_SUBSYS=model,xfer or "all") and a level
 * (TDM_LOG_LEVEL=debug|info|warn|error, or the --log-level flag) filter lines before formatting.
 * Call sites write `msg="..." k=v`; text that does not start with a key becomes msg="text".
 * Thread-safe: one write(2) per line. Library-like modules log at debug only; errors are logged
 * once, where they are decided (STYLE.md).
 */
#ifndef TDM_LOG_H
#define TDM_LOG_H

#include <stdarg.h>
#include <stddef.h>

typedef enum tdm_log_level {
    TDM_LOG_ERROR = 3, /* syslog LOG_ERR */
    TDM_LOG_WARN = 4,  /* LOG_WARNING */
    TDM_LOG_INFO = 6,  /* LOG_INFO */
    TDM_LOG_DEBUG = 7, /* LOG_DEBUG */
} tdm_log_level_t;

typedef enum tdm_log_subsys {
    TDM_SUB_CORE = 0,
    TDM_SUB_MODEL,
    TDM_SUB_TOK,
    TDM_SUB_KV,
    TDM_SUB_SCHED,
    TDM_SUB_TP,
    TDM_SUB_XFER,
    TDM_SUB_API,
    TDM_SUB_REPORT,
    TDM_SUB_CP,
    TDM_SUB_DB,
    TDM_SUB_CUDA,
    TDM_SUB_MAX
} tdm_log_subsys_t;

/* Read TDM_LOG_LEVEL / TDM_LOG_SUBSYS / TDM_LOG_PREFIX from the environment; `ident` names the
 * program in each line ("tandemd", "tandem-worker"). Safe to call more than once. */
void tdm_log_init(const char *ident);
void tdm_log_set_level(tdm_log_level_t level);
/* Parse "all", "none" or a comma list of subsystem names; returns 0, or -1 on an unknown name. */
int tdm_log_set_mask(const char *list);
int tdm_log_enabled(tdm_log_subsys_t sub, tdm_log_level_t level);
const char *tdm_log_subsys_name(tdm_log_subsys_t sub);

__attribute__((format(printf, 3, 4))) void tdm_log(tdm_log_subsys_t sub, tdm_log_level_t level,
                                                   const char *fmt, ...);
void tdm_vlog(tdm_log_subsys_t sub, tdm_log_level_t level, const char *fmt, va_list ap);
/* "debug", "info", "warn", "error" (any case) into *ret; -1 for anything else. */
int tdm_log_level_parse(const char *name, tdm_log_level_t *ret);
/* A caller's `msg="..." k=v` text as valid logfmt into dst (at most cap bytes); returns the
 * length. Exposed for the tests. */
size_t tdm_log_fields(char *dst, size_t cap, const char *src, size_t n);
/* A libpq notice processor (PQsetNoticeProcessor(conn, tdm_log_pq_notice, NULL)): server
 * NOTICEs become log lines instead of raw text on stderr. */
void tdm_log_pq_notice(void *arg, const char *message);

#define TDM_LOG_(sub, lvl, ...)                                                                    \
    do {                                                                                           \
        if (tdm_log_enabled((sub), (lvl)))                                                         \
            tdm_log((sub), (lvl), __VA_ARGS__);                                                    \
    } while (0)
#define tdm_err(sub, ...) TDM_LOG_(sub, TDM_LOG_ERROR, __VA_ARGS__)
#define tdm_warn(sub, ...) TDM_LOG_(sub, TDM_LOG_WARN, __VA_ARGS__)
#define tdm_info(sub, ...) TDM_LOG_(sub, TDM_LOG_INFO, __VA_ARGS__)
#define tdm_dbg(sub, ...) TDM_LOG_(sub, TDM_LOG_DEBUG, __VA_ARGS__)

#endif
