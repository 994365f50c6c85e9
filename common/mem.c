/*
 * mem.c — the abort-on-OOM allocators for small host objects. Failing here means the process
 * cannot make progress anyway; large allocations never come through these.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tdm/log.h>
#include <tdm/mem.h>

__attribute__((noreturn)) static void oom(size_t n)
{
    tdm_log(TDM_SUB_CORE, TDM_LOG_ERROR, "msg=\"out of memory\" bytes=%zu", n);
    abort();
}

void *tdm_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *tdm_calloc(size_t count, size_t size)
{
    size_t bytes;
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) /* report the request, not a wrapped product */
        oom(__builtin_mul_overflow(count, size, &bytes) ? SIZE_MAX : bytes);
    return p;
}

void *tdm_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *tdm_strdup(const char *s)
{
    return tdm_strndup(s, strlen(s));
}

char *tdm_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = tdm_malloc(len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

void tdm_free(void *p)
{
    free(p);
}
