/*
 * tdm/mem.h — small host allocations and overflow-checked size math.
 *
 * OOM policy (STYLE.md): tdm_malloc & co. are for small host objects and abort with a log line
 * on OOM, like h2o/redis. Large, pinned or device allocations use plain malloc/cudaMalloc and
 * return TDM_ERR_NOMEM. Size arithmetic that a client or a file can influence goes through
 * tdm_size_add/tdm_size_mul, which return TDM_ERR_OVERFLOW instead of wrapping.
 */
#ifndef TDM_MEM_H
#define TDM_MEM_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

void *tdm_malloc(size_t n);
void *tdm_calloc(size_t count, size_t size);
void *tdm_realloc(void *p, size_t n);
char *tdm_strdup(const char *s);
char *tdm_strndup(const char *s, size_t n);
void tdm_free(void *p);

static inline tdm_status_t tdm_size_add(size_t a, size_t b, size_t *ret_sum)
{
    size_t r;
    if (__builtin_add_overflow(a, b, &r))
        return TDM_ERR_OVERFLOW;
    *ret_sum = r;
    return TDM_OK;
}

static inline tdm_status_t tdm_size_mul(size_t a, size_t b, size_t *ret_prod)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return TDM_ERR_OVERFLOW;
    *ret_prod = r;
    return TDM_OK;
}

/* a*b + c, checked. */
static inline tdm_status_t tdm_size_muladd(size_t a, size_t b, size_t c, size_t *ret)
{
    size_t p;
    TDM_TRY(tdm_size_mul(a, b, &p));
    return tdm_size_add(p, c, ret);
}

/* Round n up to a power-of-two alignment, checked. */
static inline tdm_status_t tdm_size_align(size_t n, size_t align, size_t *ret)
{
    size_t r;
    if (align == 0 || (align & (align - 1)) != 0)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_size_add(n, align - 1, &r));
    *ret = r & ~(align - 1);
    return TDM_OK;
}

#endif
