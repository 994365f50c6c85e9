/*
 * report_spool.c — the reporter's on-disk queue: one framed file per batch (format in
 * report_int.h), so that thinning an old batch (I9: samples dropped oldest-first) rewrites one
 * small file and a restart replays the directory in order. Events are durable before they count as
 * spooled.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "dataplane/report/report_int.h"

void tdm_report_rec_free(tdm_report_rec_t *rec)
{
    if (!rec)
        return;
    tdm_free(rec->text);
    tdm_free(rec);
}

void tdm_report_spool_path(const char *dir, uint64_t order, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%016" PRIx64 ".tsb", dir, order);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

tdm_status_t tdm_report_spool_write(const char *dir, const tdm_report_rec_t *rec, char *err,
                                    size_t err_len)
{
    char path[4096], tmp[4200];
    if (rec->len > TDM_REPORT_SPOOL_MAX_BODY) {
        snprintf(err, err_len, "spool: batch of %zu bytes over the %u-byte limit", rec->len,
                 TDM_REPORT_SPOOL_MAX_BODY);
        return TDM_ERR_RANGE;
    }
    tdm_report_spool_path(dir, rec->order, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    uint8_t h[TDM_REPORT_SPOOL_HDR];
    put32(h, TDM_REPORT_SPOOL_MAGIC);
    put16(h + 4, TDM_REPORT_SPOOL_VERSION);
    put16(h + 6, TDM_REPORT_SPOOL_HDR);
    put32(h + 8, rec->n_events ? TDM_REPORT_SPOOL_F_EVENTS : 0);
    put32(h + 12, (uint32_t)rec->len);
    put64(h + 16, rec->seq);
    put32(h + 24, rec->n_samples);
    put32(h + 28, rec->n_events);
    int durable = rec->n_events > 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write_all(fd, h, sizeof(h)) != 0 || write_all(fd, rec->text, rec->len) != 0 ||
        (durable && fsync(fd) != 0)) {
        snprintf(err, err_len, "spool %s: %s", tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return TDM_ERR_IO;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0 || (durable && fsync_dir(dir) != 0)) {
        snprintf(err, err_len, "spool %s: %s", path, strerror(errno));
        unlink(tmp);
        return TDM_ERR_IO;
    }
    return TDM_OK;
}

tdm_status_t tdm_report_spool_remove(const char *dir, uint64_t order)
{
    char path[4096];
    tdm_report_spool_path(dir, order, path, sizeof(path));
    return unlink(path) == 0 || errno == ENOENT ? TDM_OK : TDM_ERR_IO;
}

tdm_status_t tdm_report_spool_read(const char *path, tdm_report_rec_t *ret, char *err,
                                   size_t err_len)
{
    tdm_status_t st = TDM_ERR_FORMAT;
    uint8_t h[TDM_REPORT_SPOOL_HDR];
    char *text = NULL;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        st = TDM_ERR_IO;
        goto out;
    }
    if (sb.st_size < TDM_REPORT_SPOOL_HDR || read(fd, h, sizeof(h)) != (ssize_t)sizeof(h)) {
        snprintf(err, err_len, "%s: %lld bytes, shorter than the %d-byte header", path,
                 (long long)sb.st_size, TDM_REPORT_SPOOL_HDR);
        goto out;
    }
    uint32_t magic = get32(h), flags = get32(h + 8), len = get32(h + 12);
    uint16_t version = get16(h + 4), hdr = get16(h + 6);
    if (magic != TDM_REPORT_SPOOL_MAGIC) {
        snprintf(err, err_len, "%s: bad magic 0x%08x (expected 0x%08x \"TRSP\")", path, magic,
                 TDM_REPORT_SPOOL_MAGIC);
        goto out;
    }
    if (version != TDM_REPORT_SPOOL_VERSION) {
        snprintf(err, err_len, "%s: version %u, this build reads %u", path, version,
                 TDM_REPORT_SPOOL_VERSION);
        goto out;
    }
    if (hdr != TDM_REPORT_SPOOL_HDR || (flags & ~TDM_REPORT_SPOOL_F_EVENTS)) {
        snprintf(err, err_len, "%s: header length %u / flags 0x%x invalid", path, hdr, flags);
        goto out;
    }
    if (len > TDM_REPORT_SPOOL_MAX_BODY || (uint64_t)sb.st_size != TDM_REPORT_SPOOL_HDR + len) {
        snprintf(err, err_len, "%s: body length %u does not match the file size %lld", path, len,
                 (long long)sb.st_size);
        goto out;
    }
    uint32_t n_events = get32(h + 28);
    if (!!(flags & TDM_REPORT_SPOOL_F_EVENTS) != (n_events > 0)) {
        snprintf(err, err_len, "%s: events flag disagrees with n_events %u", path, n_events);
        goto out;
    }
    text = tdm_malloc((size_t)len + 1);
    if (read(fd, text, len) != (ssize_t)len) {
        snprintf(err, err_len, "%s: short read", path);
        st = TDM_ERR_IO;
        goto out;
    }
    text[len] = '\0';
    memset(ret, 0, sizeof(*ret));
    ret->seq = get64(h + 16);
    ret->n_samples = get32(h + 24);
    ret->n_events = n_events;
    ret->text = text;
    ret->len = len;
    text = NULL;
    st = TDM_OK;
out:
    tdm_free(text);
    if (fd >= 0)
        close(fd);
    return st;
}

static int mkdir_p(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

tdm_status_t tdm_report_spool_load(const char *dir, tdm_report_rec_t **ret_head,
                                   uint64_t *ret_next_order, char *err, size_t err_len)
{
    if (mkdir_p(dir) != 0) {
        snprintf(err, err_len, "--spool-dir %s: %s", dir, strerror(errno));
        return TDM_ERR_IO;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, err_len, "--spool-dir %s: %s", dir, strerror(errno));
        return TDM_ERR_IO;
    }
    uint64_t *orders = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        size_t nl = strlen(de->d_name);
        if (nl != 20 || strcmp(de->d_name + 16, ".tsb") != 0)
            continue;
        uint64_t o = strtoull(de->d_name, &end, 16);
        if (end != de->d_name + 16)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            orders = tdm_realloc(orders, cap * sizeof(*orders));
        }
        orders[n++] = o;
    }
    closedir(d);
    if (n > 1)
        qsort(orders, n, sizeof(*orders), cmp_u64);
    tdm_report_rec_t *head = NULL, **tail = &head;
    uint64_t next = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096], why[512];
        tdm_report_rec_t rec;
        tdm_report_spool_path(dir, orders[i], path, sizeof(path));
        next = orders[i] + 1;
        if (tdm_report_spool_read(path, &rec, why, sizeof(why)) != TDM_OK) {
            char bad[4200];
            snprintf(bad, sizeof(bad), "%s.bad", path);
            rename(path, bad);
            tdm_err(TDM_SUB_REPORT, "msg=\"spool file refused, kept as .bad\" err=\"%s\"", why);
            continue;
        }
        rec.order = orders[i];
        tdm_report_rec_t *r = tdm_malloc(sizeof(*r));
        *r = rec;
        *tail = r;
        tail = &r->next;
    }
    tdm_free(orders);
    *ret_head = head;
    *ret_next_order = next;
    return TDM_OK;
}
