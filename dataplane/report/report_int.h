/*
 * dataplane/report/report_int.h — the reporter's queue records and their spool files
 * (report_spool.c).
 *
 * Spool file `<dir>/<order:016x>.tsb`, one batch each, little-endian:
 *   magic "TRSP" (u32 0x50535254), version u16 (1), header length u16 (32), flags u32 (bit 0:
 *   holds events), body length u32, seq u64, n_samples u32, n_events u32; then the body: the
 *   batch's telemetry v1 JSON exactly as it is POSTed.
 * The reader refuses a wrong magic, version, header length, flag bit, a body length that does
 * not match the file size or exceeds TDM_REPORT_SPOOL_MAX_BODY, with TDM_ERR_FORMAT and a
 * message naming the file and the field. Files are written as `.tmp` and renamed into place;
 * files holding events are fsync'ed together with the directory before the write returns.
 */
#ifndef TDM_REPORT_INT_H
#define TDM_REPORT_INT_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#define TDM_REPORT_SPOOL_MAGIC 0x50535254u /* "TRSP" */
#define TDM_REPORT_SPOOL_VERSION 1
#define TDM_REPORT_SPOOL_HDR 32
#define TDM_REPORT_SPOOL_MAX_BODY (8u << 20)
#define TDM_REPORT_SPOOL_F_EVENTS 1u

typedef struct tdm_report_rec {
    uint64_t order; /* position in the queue; the spool file's name */
    uint64_t seq;
    uint32_t n_samples, n_events;
    char *text; /* the batch's JSON (tdm_malloc) */
    size_t len;
    struct tdm_report_rec *next;
} tdm_report_rec_t;

void tdm_report_rec_free(tdm_report_rec_t *rec);
void tdm_report_spool_path(const char *dir, uint64_t order, char *buf, size_t len);
tdm_status_t tdm_report_spool_write(const char *dir, const tdm_report_rec_t *rec, char *err,
                                    size_t err_len);
tdm_status_t tdm_report_spool_remove(const char *dir, uint64_t order);
/* Read one file; on success *ret owns a fresh text. */
tdm_status_t tdm_report_spool_read(const char *path, tdm_report_rec_t *ret, char *err,
                                   size_t err_len);
/* Create `dir` (and its parent) if needed, then load every valid spool file in order; invalid
 * files are logged and renamed to `*.bad` (kept for inspection, never replayed). */
tdm_status_t tdm_report_spool_load(const char *dir, tdm_report_rec_t **ret_head,
                                   uint64_t *ret_next_order, char *err, size_t err_len);

#endif
