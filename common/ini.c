/*
 * ini.c — the INI reader behind --config and the reconfigure override file. Deliberately small:
 * `[section]`, `key = value`, whole-line `#`/`;` comments, optional double quotes around a value.
 * There are no inline comments because values (URLs, tokens, DSNs) may contain `#` and `;`.
 * Every rejected line is reported as name:line with the reason.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tdm/mem.h>
#include <tdm/params.h>

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static char *trim(char *s, char *end)
{
    while (s < end && is_space(*s))
        s++;
    while (end > s && is_space(end[-1]))
        end--;
    *end = '\0';
    return s;
}

static int key_ok(const char *k)
{
    if (!*k)
        return 0;
    for (; *k; k++) {
        char c = *k;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

tdm_status_t tdm_ini_parse_buf(const char *buf, size_t len, const char *name, tdm_ini_fn fn,
                               void *ctx, char *err, size_t err_len)
{
    char line[TDM_INI_MAX_LINE + 1];
    char section[256] = "";
    unsigned lineno = 0;
    size_t pos = 0;

    if (len > TDM_INI_MAX_BYTES) {
        snprintf(err, err_len, "%s: file is %zu bytes, limit %u", name, len, TDM_INI_MAX_BYTES);
        return TDM_ERR_RANGE;
    }
    while (pos < len) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (buf + pos)) : len - pos;
        lineno++;
        if (n > TDM_INI_MAX_LINE) {
            snprintf(err, err_len, "%s:%u: line longer than %d bytes", name, lineno,
                     TDM_INI_MAX_LINE);
            return TDM_ERR_FORMAT;
        }
        if (memchr(buf + pos, '\0', n)) {
            snprintf(err, err_len, "%s:%u: NUL byte in line", name, lineno);
            return TDM_ERR_FORMAT;
        }
        memcpy(line, buf + pos, n);
        pos += n + (nl ? 1 : 0);
        char *s = trim(line, line + n);
        if (!*s || *s == '#' || *s == ';')
            continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close || close[1] != '\0') {
                snprintf(err, err_len, "%s:%u: malformed section header \"%.64s\"", name, lineno,
                         s);
                return TDM_ERR_FORMAT;
            }
            char *sec = trim(s + 1, close);
            if (!key_ok(sec) || strlen(sec) >= sizeof(section)) {
                snprintf(err, err_len, "%s:%u: bad section name \"%.64s\"", name, lineno, sec);
                return TDM_ERR_FORMAT;
            }
            strcpy(section, sec);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, err_len, "%s:%u: expected `key = value`, got \"%.64s\"", name, lineno, s);
            return TDM_ERR_FORMAT;
        }
        char *key = trim(s, eq);
        char *val = trim(eq + 1, line + n);
        if (!key_ok(key)) {
            snprintf(err, err_len, "%s:%u: bad key \"%.64s\"", name, lineno, key);
            return TDM_ERR_FORMAT;
        }
        size_t vlen = strlen(val);
        if (vlen >= 1 && val[0] == '"') {
            if (vlen < 2 || val[vlen - 1] != '"') {
                snprintf(err, err_len, "%s:%u: unterminated quote in value of \"%s\"", name, lineno,
                         key);
                return TDM_ERR_FORMAT;
            }
            val[vlen - 1] = '\0';
            val++;
        }
        if (fn(ctx, section, key, val, lineno, err, err_len) != 0)
            return TDM_ERR_INVAL;
    }
    return TDM_OK;
}

tdm_status_t tdm_ini_parse_file(const char *path, tdm_ini_fn fn, void *ctx, char *err,
                                size_t err_len)
{
    tdm_status_t st = TDM_OK;
    struct stat sb;
    char *buf = NULL;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? TDM_ERR_NOTFOUND : TDM_ERR_IO;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, err_len, "%s: not a regular file", path);
        st = TDM_ERR_IO;
        goto err_close;
    }
    if ((uint64_t)sb.st_size > TDM_INI_MAX_BYTES) {
        snprintf(err, err_len, "%s: file is %lld bytes, limit %u", path, (long long)sb.st_size,
                 TDM_INI_MAX_BYTES);
        st = TDM_ERR_RANGE;
        goto err_close;
    }
    buf = tdm_malloc((size_t)sb.st_size + 1);
    while (got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, err_len, "%s: read: %s", path, strerror(errno));
            st = TDM_ERR_IO;
            goto err_free;
        }
        if (r == 0)
            break; /* truncated while we read: parse what is there */
        got += (size_t)r;
    }
    st = tdm_ini_parse_buf(buf, got, path, fn, ctx, err, err_len);
err_free:
    tdm_free(buf);
err_close:
    close(fd);
    return st;
}
