/*
 * arena.c — bump allocation over a list of blocks. Oversized requests get a block of their own.
 * Reset moves every block to the spare list so the next cycle reuses them.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include <tdm/arena.h>
#include <tdm/mem.h>

struct tdm_arena_block {
    struct tdm_arena_block *next;
    size_t size; /* payload bytes */
    size_t off;  /* bytes used */
    _Alignas(16) unsigned char data[];
};

void tdm_arena_init(tdm_arena_t *a, size_t block_size, size_t cap)
{
    memset(a, 0, sizeof(*a));
    a->block_size = block_size ? block_size : 4096;
    a->cap = cap;
}

static tdm_arena_block_t *block_new(tdm_arena_t *a, size_t need)
{
    size_t size = need > a->block_size ? need : a->block_size;
    /* reuse a spare block that fits */
    for (tdm_arena_block_t **pp = &a->spare; *pp; pp = &(*pp)->next) {
        if ((*pp)->size >= need) {
            tdm_arena_block_t *b = *pp;
            *pp = b->next;
            b->off = 0;
            return b;
        }
    }
    size_t total, reserved;
    if (tdm_size_add(sizeof(tdm_arena_block_t), size, &total) != TDM_OK)
        return NULL;
    if (tdm_size_add(a->reserved, size, &reserved) != TDM_OK)
        return NULL;
    if (a->cap && reserved > a->cap)
        return NULL;
    tdm_arena_block_t *b = tdm_malloc(total);
    b->size = size;
    b->off = 0;
    a->reserved = reserved;
    return b;
}

void *tdm_arena_alloc(tdm_arena_t *a, size_t size)
{
    size_t asize;
    if (tdm_size_align(size ? size : 1, 16, &asize) != TDM_OK)
        return NULL;
    tdm_arena_block_t *b = a->head;
    if (!b || b->size - b->off < asize) {
        b = block_new(a, asize);
        if (!b)
            return NULL;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->off;
    b->off += asize;
    a->used += asize;
    return p;
}

void *tdm_arena_calloc(tdm_arena_t *a, size_t count, size_t size)
{
    size_t n;
    if (tdm_size_mul(count, size, &n) != TDM_OK)
        return NULL;
    void *p = tdm_arena_alloc(a, n);
    if (p)
        memset(p, 0, n);
    return p;
}

char *tdm_arena_strndup(tdm_arena_t *a, const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = tdm_arena_alloc(a, len + 1);
    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

void tdm_arena_reset(tdm_arena_t *a)
{
    while (a->head) {
        tdm_arena_block_t *b = a->head;
        a->head = b->next;
        b->next = a->spare;
        a->spare = b;
    }
    a->used = 0;
}

void tdm_arena_free(tdm_arena_t *a)
{
    if (!a)
        return;
    tdm_arena_reset(a);
    while (a->spare) {
        tdm_arena_block_t *b = a->spare;
        a->spare = b->next;
        tdm_free(b);
    }
    a->reserved = 0;
}
