/*
 * controlplane/store/db_spool.h — tandemd's on-disk ingest spool: an append-only FIFO of records
 * that survives a database outage (and a tandemd restart during one).
 *
 * File: header magic "TDSP" (u32 LE 0x50534454), u16 version (1), u16 header length (16), u64
 * reserved; then records, each magic "TDSR" (u32), u16 version (1), u16 type (1 = telemetry batch),
 * u32 body length, u32 XXH32 of the body, body. The reader rejects a wrong file magic or version
 * with TDM_ERR_FORMAT and a precise message; a torn record at the tail (a crash mid-append) is cut
 * off at open and logged. Appends are fdatasync'ed before returning: a record in the spool is
 * durable, which is what lets tandemd acknowledge it.
 *
 * Reading is peek + advance from a read offset; when everything is consumed the file is truncated
 * back to its header. Records consumed but not yet truncated are replayed after a crash — the
 * ingest high-water marks make that harmless. Bounded by max_bytes (append past it:
 * TDM_ERR_OVERFLOW). One owner thread.
 */
#ifndef TDM_CP_SPOOL_H
#define TDM_CP_SPOOL_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

#define TDM_CP_SPOOL_MAGIC 0x50534454u     /* "TDSP" */
#define TDM_CP_SPOOL_REC_MAGIC 0x52534454u /* "TDSR" */
#define TDM_CP_SPOOL_VERSION 1
#define TDM_CP_SPOOL_HDR 16
#define TDM_CP_SPOOL_REC_HDR 16
#define TDM_CP_SPOOL_REC_MAX (64u << 20)

typedef struct tdm_cp_spool tdm_cp_spool_t;

/* Open or create `path`. On TDM_ERR_FORMAT/IO `err` says why (file, offset, what). */
tdm_status_t tdm_cp_spool_open(const char *path, uint64_t max_bytes, tdm_cp_spool_t **ret_sp,
                               char *err, size_t err_len);
void tdm_cp_spool_close(tdm_cp_spool_t *sp);

tdm_status_t tdm_cp_spool_append(tdm_cp_spool_t *sp, uint16_t type, const void *body, size_t len);
/* The oldest unconsumed record, malloc'd (caller frees). TDM_ERR_NOTFOUND when empty. */
tdm_status_t tdm_cp_spool_peek(tdm_cp_spool_t *sp, uint16_t *ret_type, uint8_t **ret_body,
                               size_t *ret_len);
/* Consume the record returned by the last peek. */
tdm_status_t tdm_cp_spool_advance(tdm_cp_spool_t *sp);

uint64_t tdm_cp_spool_records(const tdm_cp_spool_t *sp); /* unconsumed */
uint64_t tdm_cp_spool_bytes(const tdm_cp_spool_t *sp);   /* unconsumed, incl. record headers */

#endif
