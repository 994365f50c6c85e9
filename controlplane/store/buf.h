/*
 * controlplane/store/buf.h — a growable byte buffer for building COPY text, JSON and SQL on the
 * loop and DB threads.
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
/* Take ownership of the bytes (NUL-terminated); the buffer is left empty. */
char *tdm_cp_buf_steal(tdm_cp_buf_t *b, size_t *ret_len);
void tdm_cp_buf_reset(tdm_cp_buf_t *b);
void tdm_cp_buf_free(tdm_cp_buf_t *b);

#endif
