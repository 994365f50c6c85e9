/*
 * test-arena.c — the bump allocator: 16-byte alignment, non-overlapping allocations, blocks
 * reused after reset (a steady-state loop allocates nothing new), the cap returning NULL,
 * oversized requests, overflow, calloc zeroing reused memory.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include <tdm/arena.h>

#include "tap.h"

static void test_alignment(void)
{
    tdm_arena_t a;
    tdm_arena_init(&a, 256, 0);
    int aligned = 1, disjoint = 1;
    unsigned char *ptrs[64];
    size_t sizes[64];
    for (int i = 0; i < 64; i++) {
        sizes[i] = (size_t)(i * 7 % 50);
        ptrs[i] = tdm_arena_alloc(&a, sizes[i]);
        aligned &= ptrs[i] && ((uintptr_t)ptrs[i] & 15) == 0;
        memset(ptrs[i], i, sizes[i]);
    }
    for (int i = 0; i < 64; i++)
        for (size_t k = 0; k < sizes[i]; k++)
            disjoint &= ptrs[i][k] == (unsigned char)i;
    ok(aligned, "every allocation is 16-byte aligned");
    ok(disjoint, "allocations do not overlap");
    ok(ptrs[0] != ptrs[1], "alloc(0) still returns distinct pointers");
    ok(a.used >= 64 * 16, "used counts rounded sizes");
    tdm_arena_free(&a);
    ok(a.reserved == 0 && a.head == NULL && a.spare == NULL, "free releases everything");
    tdm_arena_free(&a);
    tdm_arena_free(NULL);
    ok(a.reserved == 0 && a.head == NULL && a.spare == NULL && a.used == 0,
       "free twice and free(NULL) are fine (the arena stays empty)");
}

static void test_reuse(void)
{
    tdm_arena_t a;
    tdm_arena_init(&a, 1024, 0);
    void *first = tdm_arena_alloc(&a, 100);
    for (int i = 0; i < 50; i++)
        tdm_arena_alloc(&a, 100);
    size_t reserved = a.reserved;
    int steady = 1, same = 1;
    for (int cycle = 0; cycle < 20; cycle++) {
        tdm_arena_reset(&a);
        same &= a.used == 0;
        void *p = tdm_arena_alloc(&a, 100);
        for (int i = 0; i < 50; i++)
            tdm_arena_alloc(&a, 100);
        steady &= a.reserved == reserved;
        (void)p;
    }
    ok(same, "reset zeroes used");
    ok(steady, "steady-state cycles reserve nothing new (%zu bytes)", reserved);
    tdm_arena_reset(&a);
    unsigned char *c = tdm_arena_alloc(&a, 64);
    memset(c, 0xff, 64);
    tdm_arena_reset(&a);
    unsigned char *z = tdm_arena_calloc(&a, 16, 4);
    int zero = 1;
    for (int i = 0; i < 64; i++)
        zero &= z[i] == 0;
    ok(zero, "calloc zeroes reused memory");
    (void)first;
    tdm_arena_free(&a);
}

static void test_cap(void)
{
    tdm_arena_t a;
    tdm_arena_init(&a, 1024, 2048);
    int n = 0;
    while (tdm_arena_alloc(&a, 512) && n < 100)
        n++;
    is_int(n, 4, "cap of two 1 KiB blocks holds four 512 B allocations");
    ok(a.reserved <= a.cap, "reserved never exceeds the cap");
    ok(tdm_arena_alloc(&a, 512) == NULL, "still NULL past the cap");
    tdm_arena_reset(&a);
    ok(tdm_arena_alloc(&a, 512) != NULL, "usable again after reset");
    tdm_arena_free(&a);

    tdm_arena_init(&a, 1024, 4096);
    void *big = tdm_arena_alloc(&a, 3000);
    ok(big != NULL && ((uintptr_t)big & 15) == 0, "oversized request gets its own block");
    ok(tdm_arena_alloc(&a, 5000) == NULL, "oversized request past the cap is NULL");
    ok(tdm_arena_alloc(&a, 16) != NULL, "small allocations still fit");
    tdm_arena_reset(&a);
    ok(tdm_arena_alloc(&a, 3000) != NULL && a.reserved <= 4096,
       "a spare oversized block is reused after reset");
    tdm_arena_free(&a);
}

static void test_overflow(void)
{
    tdm_arena_t a;
    tdm_arena_init(&a, 0, 0);
    is_u64(a.block_size, 4096, "block size 0 means the default");
    ok(tdm_arena_alloc(&a, SIZE_MAX) == NULL, "SIZE_MAX refused");
    ok(tdm_arena_alloc(&a, SIZE_MAX - 8) == NULL, "alignment overflow refused");
    ok(tdm_arena_calloc(&a, SIZE_MAX / 2, 4) == NULL, "calloc count*size overflow refused");
    char *s = tdm_arena_strndup(&a, "hello world", 5);
    is_str(s, "hello", "strndup truncates");
    s = tdm_arena_strndup(&a, "hi", 50);
    is_str(s, "hi", "strndup stops at the NUL");
    tdm_arena_free(&a);

    tdm_arena_init(&a, 64, 64);
    tdm_arena_alloc(&a, 64);
    ok(tdm_arena_strndup(&a, "x", 1) == NULL, "strndup past the cap is NULL");
    tdm_arena_free(&a);
}

int main(void)
{
    test_alignment();
    test_reuse();
    test_cap();
    test_overflow();
    return done_testing();
}
