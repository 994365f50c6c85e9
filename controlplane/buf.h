/*
 * controlplane/buf.h — a growable byte buffer for building COPY text, JSON and SQL on the loop and
 * DB threads.
 *
 * Small host allocations: growth aborts on OOM (tdm_realloc). Callers that take input from a client
 * bound it before appending (request body limits), so a buffer never grows without a cap. The data
 * is always NUL-terminated (not counted in len). One owner; not thread-safe.
 */
#ifndef TDM_CP_BUF_H
#define TDM_CP_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct tdm_cp_buf {
    char *data;
    size_t len;
    size_t cap;
} tdm_cp_buf_t;

#define TDM_CP_BUF_INIT                                                                            \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }

void tdm_cp_buf_reserve(tdm_cp_buf_t *b, size_t extra);
void tdm_cp_buf_append(tdm_cp_buf_t *b, const void *p, size_t n);
void tdm_cp_buf_puts(tdm_cp_buf_t *b, const char *s);
__attribute__((format(printf, 2, 3))) void tdm_cp_buf_printf(tdm_cp_buf_t *b, const char *fmt, ...);
/* Decimal and 16-digit lowercase hex without printf (the hot paths render many numbers). */
void tdm_cp_buf_u64(tdm_cp_buf_t *b, uint64_t v);
void tdm_cp_buf_i64(tdm_cp_buf_t *b, int64_t v);
void tdm_cp_buf_hex16(tdm_cp_buf_t *b, uint64_t v);
/* Append `s` escaped for PostgreSQL COPY text format (backslash, tab, newline, CR); NULL → \N. */
void tdm_cp_buf_copy_text(tdm_cp_buf_t *b, const char *s);
/* Append `s` as a JSON string literal with quotes. */
void tdm_cp_buf_json_str(tdm_cp_buf_t *b, const char *s);
/* PostgreSQL's binary COPY format (COPY ... FROM STDIN (FORMAT binary)): the stream's 19-byte
 * header and 2-byte trailer, a tuple's field count, and fields, each a network-order int32 length
 * (-1 for NULL) and the value in the type's binary send form: int4/int8 big-endian, text as its
 * bytes, jsonb as the version byte 1 and the JSON text. A field whose length is only known once
 * written (jsonb) is opened (a placeholder length) and closed (the length patched in). */
#define TDM_CP_BIN_HEADER_LEN 19
extern const char tdm_cp_bin_header[TDM_CP_BIN_HEADER_LEN];
extern const char tdm_cp_bin_trailer[2];
void tdm_cp_bin_tuple(tdm_cp_buf_t *b, uint16_t nfields);
void tdm_cp_bin_null(tdm_cp_buf_t *b);
void tdm_cp_bin_i32(tdm_cp_buf_t *b, int32_t v);
void tdm_cp_bin_i64(tdm_cp_buf_t *b, int64_t v);
/* `s` (n bytes) as a text field; NULL → a NULL field. */
void tdm_cp_bin_text(tdm_cp_buf_t *b, const char *s, size_t n);
/* Start a field of unknown length; returns what tdm_cp_bin_close() needs. */
size_t tdm_cp_bin_open(tdm_cp_buf_t *b);
void tdm_cp_bin_close(tdm_cp_buf_t *b, size_t at);
/* Take ownership of the bytes (NUL-terminated); the buffer is left empty. */
char *tdm_cp_buf_steal(tdm_cp_buf_t *b, size_t *ret_len);
void tdm_cp_buf_reset(tdm_cp_buf_t *b);
void tdm_cp_buf_free(tdm_cp_buf_t *b);

#endif
