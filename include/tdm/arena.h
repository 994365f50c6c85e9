/*
 * tdm/arena.h — bump allocator for per-request and per-iteration memory (h2o's req->pool).
 *
 * Allocations are 16-byte aligned and live until tdm_arena_reset() or tdm_arena_free(). Blocks are
 * kept across resets, so a steady-state loop allocates nothing from malloc. A cap bounds what one
 * arena may hold (what a client can make us allocate): past it tdm_arena_alloc returns NULL.
 * Not thread-safe: one arena, one owner.
 */
#ifndef TDM_ARENA_H
#define TDM_ARENA_H

#include <stddef.h>

typedef struct tdm_arena_block tdm_arena_block_t;

typedef struct tdm_arena {
    tdm_arena_block_t *head;  /* block being filled */
    tdm_arena_block_t *spare; /* blocks kept from before the last reset */
    size_t block_size;        /* default block payload */
    size_t used;              /* bytes handed out since the last reset */
    size_t reserved;          /* payload bytes of all blocks */
    size_t cap;               /* max reserved bytes; 0 = unbounded */
} tdm_arena_t;

void tdm_arena_init(tdm_arena_t *a, size_t block_size, size_t cap);
/* NULL if the cap would be exceeded or size overflows; aborts on OOM like tdm_malloc. */
void *tdm_arena_alloc(tdm_arena_t *a, size_t size);
void *tdm_arena_calloc(tdm_arena_t *a, size_t count, size_t size);
char *tdm_arena_strndup(tdm_arena_t *a, const char *s, size_t n);
void tdm_arena_reset(tdm_arena_t *a);
void tdm_arena_free(tdm_arena_t *a);

#endif
