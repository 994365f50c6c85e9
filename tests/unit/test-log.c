/*
 * test-log.c — the logging path: subsystem mask parsing, level filtering, the environment knobs,
 * and the line format (one write per call, ends in exactly one newline, embedded newlines
 * flattened, long messages truncated, journald priority prefix, logfmt with an RFC 3339
 * timestamp, quotes inside values repaired, libpq notices). stderr is captured through a pipe.
 */
#include "config.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tdm/log.h>

#include "tap.h"

static int cap_fd = -1, saved_fd = -1;

static void capture_begin(void)
{
    int p[2];
    if (pipe(p) != 0)
        exit(1);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    saved_fd = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    cap_fd = p[0];
}

/* Restore stderr and return what was written (static buffer). */
static const char *capture_end(size_t *ret_len)
{
    static char buf[1 << 20];
    size_t n = 0;
    ssize_t r;
    dup2(saved_fd, STDERR_FILENO);
    close(saved_fd);
    while (n < sizeof(buf) - 1 && (r = read(cap_fd, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)r;
    close(cap_fd);
    buf[n] = '\0';
    if (ret_len)
        *ret_len = n;
    return buf;
}

static int count_char(const char *s, char c)
{
    int n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

static void test_mask(void)
{
    is_int(tdm_log_set_mask("model,xfer"), 0, "comma list");
    ok(tdm_log_enabled(TDM_SUB_MODEL, TDM_LOG_ERROR) &&
           tdm_log_enabled(TDM_SUB_XFER, TDM_LOG_ERROR),
       "listed subsystems enabled");
    ok(!tdm_log_enabled(TDM_SUB_KV, TDM_LOG_ERROR), "others disabled");
    is_int(tdm_log_set_mask("MODEL"), 0, "names are case-insensitive");
    ok(tdm_log_enabled(TDM_SUB_MODEL, TDM_LOG_ERROR) &&
           !tdm_log_enabled(TDM_SUB_XFER, TDM_LOG_ERROR),
       "mask replaced, not merged");
    is_int(tdm_log_set_mask("model,bogus"), -1, "unknown name refused");
    ok(tdm_log_enabled(TDM_SUB_MODEL, TDM_LOG_ERROR) && !tdm_log_enabled(TDM_SUB_CP, TDM_LOG_ERROR),
       "a refused list leaves the mask unchanged");
    is_int(tdm_log_set_mask("mod"), -1, "prefix of a name refused");
    is_int(tdm_log_set_mask(",,"), -1, "empty element refused");
    is_int(tdm_log_set_mask("none"), 0, "none");
    ok(!tdm_log_enabled(TDM_SUB_CORE, TDM_LOG_ERROR), "none disables everything");
    is_int(tdm_log_set_mask("all"), 0, "all");
    int all = 1;
    for (int i = 0; i < TDM_SUB_MAX; i++)
        all &= tdm_log_enabled((tdm_log_subsys_t)i, TDM_LOG_ERROR);
    ok(all, "all enables every subsystem");
    is_int(tdm_log_set_mask(""), 0, "empty string means all");
    is_int(tdm_log_set_mask(NULL), 0, "NULL means all");
    is_str(tdm_log_subsys_name(TDM_SUB_XFER), "xfer", "subsystem name");
    is_str(tdm_log_subsys_name(TDM_SUB_MAX), "?", "invalid subsystem name");
}

static void test_level(void)
{
    tdm_log_set_mask("all");
    tdm_log_set_level(TDM_LOG_WARN);
    ok(tdm_log_enabled(TDM_SUB_CORE, TDM_LOG_ERROR), "error passes warn");
    ok(tdm_log_enabled(TDM_SUB_CORE, TDM_LOG_WARN), "warn passes warn");
    ok(!tdm_log_enabled(TDM_SUB_CORE, TDM_LOG_INFO), "info filtered at warn");
    ok(!tdm_log_enabled(TDM_SUB_CORE, TDM_LOG_DEBUG), "debug filtered at warn");

    capture_begin();
    tdm_info(TDM_SUB_CORE, "msg=\"hidden\"");
    tdm_warn(TDM_SUB_CORE, "msg=\"shown\"");
    const char *out = capture_end(NULL);
    ok(!strstr(out, "hidden") && strstr(out, "shown"), "macros filter before formatting");

    setenv("TDM_LOG_LEVEL", "debug", 1);
    setenv("TDM_LOG_SUBSYS", "kv,sched", 1);
    tdm_log_init("test-log");
    ok(tdm_log_enabled(TDM_SUB_KV, TDM_LOG_DEBUG) && !tdm_log_enabled(TDM_SUB_TP, TDM_LOG_ERROR),
       "TDM_LOG_LEVEL and TDM_LOG_SUBSYS read by init");
    setenv("TDM_LOG_SUBSYS", "kv,nonsense", 1);
    tdm_log_init(NULL);
    ok(tdm_log_enabled(TDM_SUB_TP, TDM_LOG_ERROR), "a bad TDM_LOG_SUBSYS falls back to all");
    setenv("TDM_LOG_LEVEL", "chatty", 1);
    tdm_log_init(NULL);
    ok(tdm_log_enabled(TDM_SUB_KV, TDM_LOG_DEBUG), "a bad TDM_LOG_LEVEL keeps the level");
    unsetenv("TDM_LOG_LEVEL");
    unsetenv("TDM_LOG_SUBSYS");
    tdm_log_set_level(TDM_LOG_INFO);
}

/* The line with its timestamp and pid checked and cut out: "level=... proc=... sub=... fields".
 * The prefix "<N>" (if any) stays in front. Static buffer; "" when the timestamp is malformed. */
static const char *untimed(const char *line)
{
    static char buf[4096];
    const char *p = line;
    size_t pre = 0;
    if (*p == '<') {
        pre = strcspn(p, ">") + 1;
        p += pre;
    }
    /* ts=YYYY-MM-DDTHH:MM:SS.uuuuuuZ (RFC 3339, UTC) */
    static const char shape[] = "ts=dddd-dd-ddTdd:dd:dd.ddddddZ ";
    for (size_t i = 0; i < sizeof(shape) - 1; i++) {
        if (shape[i] == 'd' ? !(p[i] >= '0' && p[i] <= '9') : p[i] != shape[i])
            return "";
    }
    p += sizeof(shape) - 1;
    const char *pid = strstr(p, " pid=");
    if (!pid)
        return "";
    const char *after = pid + 5 + strspn(pid + 5, "0123456789");
    snprintf(buf, sizeof(buf), "%.*s%.*s%s", (int)pre, line, (int)(pid - p), p, after);
    return buf;
}

static void test_format(void)
{
    size_t len;
    const char *out;
    char f[256];

    setenv("TDM_LOG_PREFIX", "0", 1);
    tdm_log_init("test-log");
    capture_begin();
    tdm_log(TDM_SUB_XFER, TDM_LOG_INFO, "msg=\"hello\" room=%d", 7);
    out = capture_end(&len);
    is_str(untimed(out), "level=info proc=test-log sub=xfer msg=\"hello\" room=7\n",
           "line format: RFC 3339 timestamp, level, proc, pid, sub, the fields");

    capture_begin();
    tdm_log(TDM_SUB_CORE, TDM_LOG_ERROR, "msg=\"a\nb\nc\"");
    out = capture_end(&len);
    is_str(untimed(out), "level=error proc=test-log sub=core msg=\"a b c\"\n",
           "embedded newlines flattened");

    capture_begin();
    tdm_log(TDM_SUB_CORE, TDM_LOG_WARN, "room %d endpoint lost", 3);
    out = capture_end(&len);
    is_str(untimed(out), "level=warn proc=test-log sub=core msg=\"room 3 endpoint lost\"\n",
           "free text becomes msg=\"...\"");

    /* a foreign string with quotes inside a quoted value, a bare value with a quote */
    const char *cases[][2] = {
        {"msg=\"x\" err=\"database \"t\" does not exist\" code=1",
         "msg=\"x\" err=\"database \\\"t\\\" does not exist\" code=1"},
        {"msg=\"a\" path=/x\"y", "msg=\"a\" path=\"/x\\\"y\""},
        {"msg=\"ends with quote\"\"", "msg=\"ends with quote\\\"\""},
        {"k=v stray word=1", "k=v note=\"stray\" word=1"},
        {"msg=\"back\\\\slash\"", "msg=\"back\\\\slash\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = tdm_log_fields(f, sizeof(f), cases[i][0], strlen(cases[i][0]));
        f[n] = '\0';
        is_str(f, cases[i][1], "logfmt repair: %s", cases[i][0]);
    }

    capture_begin();
    for (int i = 0; i < 3; i++)
        tdm_log(TDM_SUB_CORE, TDM_LOG_WARN, "i=%d", i);
    out = capture_end(&len);
    is_int(count_char(out, '\n'), 3, "one line per call");

    char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_begin();
    tdm_log(TDM_SUB_CORE, TDM_LOG_WARN, "%s", big);
    out = capture_end(&len);
    ok(len <= 2560 && len > 2000 && out[len - 1] == '\n' && count_char(out, '\n') == 1 &&
           out[len - 2] == '"',
       "long message truncated to one line ending in a quote and a newline (%zu bytes)", len);

    tdm_log_level_t lv = TDM_LOG_INFO;
    ok(tdm_log_level_parse("WARN", &lv) == 0 && lv == TDM_LOG_WARN, "level names parse");
    ok(tdm_log_level_parse("chatty", &lv) == -1 && lv == TDM_LOG_WARN,
       "an unknown level is refused, the output untouched");

    setenv("TDM_LOG_PREFIX", "1", 1);
    tdm_log_init("test-log");
    capture_begin();
    tdm_log(TDM_SUB_DB, TDM_LOG_WARN, "x=1");
    out = capture_end(&len);
    is_str(untimed(out), "<4>level=warn proc=test-log sub=db x=1\n", "journald priority prefix");
    unsetenv("TDM_LOG_PREFIX");
    setenv("JOURNAL_STREAM", "8:1234", 1);
    tdm_log_init("test-log");
    capture_begin();
    tdm_log(TDM_SUB_DB, TDM_LOG_DEBUG, "x=2");
    out = capture_end(&len);
    is_str(untimed(out), "<7>level=debug proc=test-log sub=db x=2\n",
           "prefix on by default under journald");
    unsetenv("JOURNAL_STREAM");
    tdm_log_init("a-very-long-program-identifier-that-does-not-fit");
    capture_begin();
    tdm_log(TDM_SUB_DB, TDM_LOG_INFO, "x=3");
    out = capture_end(&len);
    ok(strstr(out, " proc=a-very-long-program-identifier- pid=") != NULL,
       "ident truncated to 31 bytes");
    tdm_log_init("test-log");
    capture_begin();
    tdm_log_pq_notice(NULL, "NOTICE:  relation \"x\" already exists, skipping\n");
    out = capture_end(&len);
    is_str(untimed(out),
           "level=info proc=test-log sub=db msg=\"postgres notice\" src=libpq "
           "notice=\"NOTICE:  relation \\\"x\\\" already exists, skipping\"\n",
           "libpq notices become log lines");
}

static void *writer(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < 200; i++)
        tdm_log(TDM_SUB_SCHED, TDM_LOG_INFO, "thread=%ld i=%d pad=%s", id, i,
                "0123456789012345678901234567890123456789");
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[4];
    size_t len;
    capture_begin();
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, writer, (void *)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    const char *out = capture_end(&len);
    int lines = 0, good = 1;
    for (const char *p = out; *p;) {
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        const char *u = untimed(p);
        good &= !strncmp(u, "level=info proc=test-log sub=sched thread=", 42) &&
                !strncmp(nl - 40, "0123456789012345678901234567890123456789", 40);
        lines++;
        p = nl + 1;
    }
    is_int(lines, 800, "800 lines from 4 threads");
    ok(good, "no line interleaved with another");
}

int main(void)
{
    test_mask();
    test_level();
    test_format();
    test_threads();
    return done_testing();
}
