/*
 * tdm/httpc.h — the reply-body collector every libcurl client of the project uses
 * (CURLOPT_WRITEFUNCTION tdm_httpc_collect, CURLOPT_WRITEDATA a tdm_httpc_body_t): the body grows
 * on the heap, always NUL-terminated, up to `max` bytes; past that the transfer fails (curl's
 * write error) rather than the buffer growing without a cap. The caller frees `data`.
 */
#ifndef TDM_HTTPC_H
#define TDM_HTTPC_H

#include <stddef.h>

typedef struct tdm_httpc_body {
    char *data; /* NULL until the first byte */
    size_t len;
    size_t max; /* the largest body accepted */
} tdm_httpc_body_t;

size_t tdm_httpc_collect(char *p, size_t size, size_t n, void *body);

#endif
