/*
 * httpc.c — the libcurl reply-body collector (see tdm/httpc.h).
 */
#include "config.h"

#include <string.h>

#include <tdm/httpc.h>
#include <tdm/mem.h>

size_t tdm_httpc_collect(char *p, size_t size, size_t n, void *body)
{
    tdm_httpc_body_t *b = body;
    size_t add = size * n;
    if (b->len + add > b->max)
        return 0;
    b->data = tdm_realloc(b->data, b->len + add + 1);
    memcpy(b->data + b->len, p, add);
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}
