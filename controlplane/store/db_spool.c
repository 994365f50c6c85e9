/*
 * db_spool.c — append-only framed record file with a read cursor (see db_spool.h for the format).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "controlplane/store/db_spool.h"

struct tdm_cp_spool {
    int fd;
    char *path;
    uint64_t max_bytes;
    uint64_t read_off;  /* next record to peek */
    uint64_t end_off;   /* end of the last complete record */
    uint64_t peek_next; /* offset after the last peeked record; 0 = none */
    uint64_t records;   /* unconsumed */
};

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

static int pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

/* Validate the record header at `off`; on success its body length. Reads and checks the body hash
 * when `check_body`. */
static int rec_check(int fd, uint64_t off, uint64_t file_len, uint32_t *ret_len, uint16_t *ret_type,
                     uint8_t **ret_body)
{
    uint8_t h[TDM_CP_SPOOL_REC_HDR];
    if (off + TDM_CP_SPOOL_REC_HDR > file_len || pread_full(fd, h, sizeof(h), off) != 0)
        return -1;
    uint32_t len = get_u32(h + 8);
    if (get_u32(h) != TDM_CP_SPOOL_REC_MAGIC || get_u16(h + 4) != TDM_CP_SPOOL_VERSION ||
        len > TDM_CP_SPOOL_REC_MAX || off + TDM_CP_SPOOL_REC_HDR + len > file_len)
        return -1;
    uint8_t *body = tdm_malloc(len ? len : 1);
    if (pread_full(fd, body, len, off + TDM_CP_SPOOL_REC_HDR) != 0 ||
        XXH32(body, len, 0) != get_u32(h + 12)) {
        tdm_free(body);
        return -1;
    }
    *ret_len = len;
    *ret_type = get_u16(h + 6);
    if (ret_body)
        *ret_body = body;
    else
        tdm_free(body);
    return 0;
}

tdm_status_t tdm_cp_spool_open(const char *path, uint64_t max_bytes, tdm_cp_spool_t **ret_sp,
                               char *err, size_t err_len)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, err_len, "%s: open: %s", path, strerror(errno));
        return TDM_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, err_len, "%s: fstat: %s", path, strerror(errno));
        close(fd);
        return TDM_ERR_IO;
    }
    uint64_t file_len = (uint64_t)st.st_size;
    uint8_t h[TDM_CP_SPOOL_HDR];
    if (file_len == 0) {
        memset(h, 0, sizeof(h));
        put_u32(h, TDM_CP_SPOOL_MAGIC);
        put_u16(h + 4, TDM_CP_SPOOL_VERSION);
        put_u16(h + 6, TDM_CP_SPOOL_HDR);
        if (pwrite_full(fd, h, sizeof(h), 0) != 0 || fdatasync(fd) != 0) {
            snprintf(err, err_len, "%s: write header: %s", path, strerror(errno));
            close(fd);
            return TDM_ERR_IO;
        }
        file_len = TDM_CP_SPOOL_HDR;
    } else {
        if (file_len < TDM_CP_SPOOL_HDR || pread_full(fd, h, sizeof(h), 0) != 0) {
            snprintf(err, err_len, "%s: truncated header (%llu bytes)", path,
                     (unsigned long long)file_len);
            close(fd);
            return TDM_ERR_FORMAT;
        }
        if (get_u32(h) != TDM_CP_SPOOL_MAGIC) {
            snprintf(err, err_len, "%s: bad magic 0x%08x (want 0x%08x)", path, get_u32(h),
                     TDM_CP_SPOOL_MAGIC);
            close(fd);
            return TDM_ERR_FORMAT;
        }
        if (get_u16(h + 4) != TDM_CP_SPOOL_VERSION || get_u16(h + 6) != TDM_CP_SPOOL_HDR) {
            snprintf(err, err_len, "%s: unsupported version %u header length %u (want %u, %u)",
                     path, get_u16(h + 4), get_u16(h + 6), TDM_CP_SPOOL_VERSION, TDM_CP_SPOOL_HDR);
            close(fd);
            return TDM_ERR_FORMAT;
        }
    }
    tdm_cp_spool_t *sp = tdm_calloc(1, sizeof(*sp));
    sp->fd = fd;
    sp->path = tdm_strdup(path);
    sp->max_bytes = max_bytes;
    sp->read_off = sp->end_off = TDM_CP_SPOOL_HDR;
    uint32_t len;
    uint16_t type;
    while (rec_check(fd, sp->end_off, file_len, &len, &type, NULL) == 0) {
        sp->end_off += TDM_CP_SPOOL_REC_HDR + len;
        sp->records++;
    }
    if (sp->end_off != file_len) {
        tdm_warn(TDM_SUB_CP,
                 "msg=\"spool: torn or corrupt tail cut off\" path=%s offset=%llu bytes=%llu", path,
                 (unsigned long long)sp->end_off, (unsigned long long)(file_len - sp->end_off));
        if (ftruncate(fd, (off_t)sp->end_off) != 0) {
            snprintf(err, err_len, "%s: ftruncate: %s", path, strerror(errno));
            tdm_cp_spool_close(sp);
            return TDM_ERR_IO;
        }
    }
    *ret_sp = sp;
    return TDM_OK;
}

void tdm_cp_spool_close(tdm_cp_spool_t *sp)
{
    if (!sp)
        return;
    close(sp->fd);
    tdm_free(sp->path);
    tdm_free(sp);
}

tdm_status_t tdm_cp_spool_append(tdm_cp_spool_t *sp, uint16_t type, const void *body, size_t len)
{
    if (len > TDM_CP_SPOOL_REC_MAX)
        return TDM_ERR_OVERFLOW;
    if (tdm_cp_spool_bytes(sp) + TDM_CP_SPOOL_REC_HDR + len > sp->max_bytes)
        return TDM_ERR_OVERFLOW;
    uint8_t h[TDM_CP_SPOOL_REC_HDR];
    put_u32(h, TDM_CP_SPOOL_REC_MAGIC);
    put_u16(h + 4, TDM_CP_SPOOL_VERSION);
    put_u16(h + 6, type);
    put_u32(h + 8, (uint32_t)len);
    put_u32(h + 12, XXH32(body, len, 0));
    if (pwrite_full(sp->fd, h, sizeof(h), sp->end_off) != 0 ||
        pwrite_full(sp->fd, body, len, sp->end_off + sizeof(h)) != 0 || fdatasync(sp->fd) != 0) {
        tdm_err(TDM_SUB_CP, "msg=\"spool append failed\" path=%s err=\"%s\"", sp->path,
                strerror(errno));
        /* The torn bytes past end_off are overwritten by the next append or cut at next open. */
        return TDM_ERR_IO;
    }
    sp->end_off += sizeof(h) + len;
    sp->records++;
    return TDM_OK;
}

tdm_status_t tdm_cp_spool_peek(tdm_cp_spool_t *sp, uint16_t *ret_type, uint8_t **ret_body,
                               size_t *ret_len)
{
    if (sp->read_off >= sp->end_off)
        return TDM_ERR_NOTFOUND;
    uint32_t len;
    uint16_t type;
    uint8_t *body;
    if (rec_check(sp->fd, sp->read_off, sp->end_off, &len, &type, &body) != 0) {
        tdm_err(TDM_SUB_CP, "msg=\"spool record unreadable\" path=%s offset=%llu", sp->path,
                (unsigned long long)sp->read_off);
        return TDM_ERR_FORMAT;
    }
    sp->peek_next = sp->read_off + TDM_CP_SPOOL_REC_HDR + len;
    *ret_type = type;
    *ret_body = body;
    *ret_len = len;
    return TDM_OK;
}

tdm_status_t tdm_cp_spool_advance(tdm_cp_spool_t *sp)
{
    if (sp->peek_next == 0)
        return TDM_ERR_STATE;
    sp->read_off = sp->peek_next;
    sp->peek_next = 0;
    sp->records--;
    if (sp->read_off == sp->end_off) {
        if (ftruncate(sp->fd, TDM_CP_SPOOL_HDR) != 0) {
            tdm_err(TDM_SUB_CP, "msg=\"spool truncate failed\" path=%s err=\"%s\"", sp->path,
                    strerror(errno));
            return TDM_ERR_IO;
        }
        sp->read_off = sp->end_off = TDM_CP_SPOOL_HDR;
    }
    return TDM_OK;
}

uint64_t tdm_cp_spool_records(const tdm_cp_spool_t *sp)
{
    return sp->records;
}

uint64_t tdm_cp_spool_bytes(const tdm_cp_spool_t *sp)
{
    return sp->end_off - sp->read_off;
}
