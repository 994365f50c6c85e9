/*
 * test-kv.c — the KV layout descriptor, pool configurator, page allocator, sequence page tables
 * and the fp8 e4m3 conversion.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include <tdm/kv.h>

#include "tap.h"

static tdm_model_config_t cfg_small(void)
{
    tdm_model_config_t c;
    memset(&c, 0, sizeof(c));
    c.num_layers = 3;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 128;
    c.hidden_size = 1024;
    return c;
}

static void test_layout(void)
{
    tdm_model_config_t c = cfg_small();
    tdm_kv_layout_t l;
    tdm_layout_record_t r;

    is_int(tdm_kv_layout_init(&c, TDM_DTYPE_BF16, 16, 1, 0, &l), TDM_OK, "bf16 layout");
    is_int(l.n_sub, 2, "bf16: K and V");
    is_int(l.sub[TDM_KV_SUB_K].bytes_per_token, 2 * 128 * 2, "bf16 K bytes/token");
    is_u64(l.sub[TDM_KV_SUB_V].page_stride, 16 * 512, "bf16 V page stride");

    is_int(tdm_kv_layout_init(&c, TDM_DTYPE_FP8_E4M3, 16, 2, 1, &l), TDM_OK, "fp8 layout, tp 2");
    is_int(l.num_kv_heads, 1, "tp 2 holds one KV head");
    is_int(l.n_sub, 4, "fp8: K, V and two scale buffers");
    is_int(l.sub[TDM_KV_SUB_K].bytes_per_token, 128, "fp8 K 1 byte per element");
    is_int(l.sub[TDM_KV_SUB_K_SCALE].bytes_per_token, 4, "one fp32 scale per token per head");
    is_int(l.sub[TDM_KV_SUB_K_SCALE].dtype, TDM_DTYPE_F32, "scales are f32");
    /* layout.h's own example: 1 head of 128 → fp8 K + scale = 132 B/token */
    is_int(l.sub[TDM_KV_SUB_K].bytes_per_token + l.sub[TDM_KV_SUB_K_SCALE].bytes_per_token, 132,
           "fp8 K with scale is 132 B/token for one head of 128");
    tdm_kv_layout_record(&l, 100, &r);
    ok(r.kv_dtype == TDM_DTYPE_FP8_E4M3 && r.n_sub == 4 && r.tp_size == 2 && r.tp_rank == 1 &&
           r.num_layers == 3 && r.num_kv_heads == 1 && r.head_dim == 128 && r.page_size == 16 &&
           r.num_pages == 100,
       "record header mirrors the descriptor");
    ok(r.sub[3].kind == TDM_KV_SUB_V_SCALE && r.sub[3].bytes_per_token == 4 &&
           r.sub[3].page_stride == 64 && r.sub[0].page_stride == 16 * 128,
       "record sub-buffers mirror the descriptor");

    is_int(tdm_kv_layout_init(&c, TDM_DTYPE_F32, 16, 1, 0, &l), TDM_OK, "f32 allowed for tests");
    is_int(l.sub[TDM_KV_SUB_K].bytes_per_token, 2 * 128 * 4, "f32 K bytes/token");
    is_int(tdm_kv_layout_init(&c, TDM_DTYPE_F16, 16, 1, 0, &l), TDM_ERR_UNSUPPORTED, "f16 refused");
    is_int(tdm_kv_layout_init(&c, TDM_DTYPE_BF16, 0, 1, 0, &l), TDM_ERR_RANGE, "page size 0");
    is_int(tdm_kv_layout_init(&c, TDM_DTYPE_BF16, 2048, 1, 0, &l), TDM_ERR_RANGE, "page too big");
    is_int(tdm_kv_layout_init(&c, TDM_DTYPE_BF16, 16, 4, 0, &l), TDM_ERR_INVAL,
           "tp 4 does not divide 2 KV heads");
    is_int(tdm_kv_layout_init(&c, TDM_DTYPE_BF16, 16, 2, 2, &l), TDM_ERR_INVAL, "rank >= tp");
}

static void test_configure(void)
{
    tdm_model_config_t c = cfg_small();
    tdm_kv_layout_t l;
    uint64_t b1, b2, bytes;
    uint32_t n;
    int fits = 1;

    tdm_kv_layout_init(&c, TDM_DTYPE_FP8_E4M3, 16, 1, 0, &l);
    tdm_kv_layout_pool_bytes(&l, 1, &b1);
    /* one page: per layer 4 regions, each aligned to 256 */
    is_u64(b1, 3 * (4096 + 4096 + 256 + 256), "pool bytes for one page include alignment");
    tdm_kv_layout_pool_bytes(&l, 1000, &b2);
    is_u64(b2, 3 * (4096000 + 4096000 + 128000 + 128000), "pool bytes for 1000 pages");

    for (uint64_t budget = 1; budget < 50000000; budget = budget * 3 + 7) {
        tdm_status_t st = tdm_kv_pool_configure(&l, budget, 0, &n);
        if (st == TDM_ERR_NOMEM) {
            fits &= budget < b1;
            continue;
        }
        uint64_t next;
        tdm_kv_layout_pool_bytes(&l, n, &bytes);
        tdm_kv_layout_pool_bytes(&l, (uint64_t)n + 1, &next);
        fits &= st == TDM_OK && bytes <= budget && next > budget;
    }
    ok(fits, "configurator: largest page count whose pool fits the budget, over 15 budgets");
    is_int(tdm_kv_pool_configure(&l, 1ull << 40, 77, &n), TDM_OK, "configure with a cap");
    is_int(n, 77, "cap respected");
    is_int(tdm_kv_pool_configure(&l, 100, 0, &n), TDM_ERR_NOMEM, "budget below one page");

    /* region offsets: aligned, in order, disjoint, inside the pool */
    int good = 1;
    uint64_t prev_end = 0;
    tdm_kv_layout_pool_bytes(&l, 37, &bytes);
    for (uint32_t layer = 0; layer < 3; layer++)
        for (uint32_t s = 0; s < 4; s++) {
            uint64_t off = tdm_kv_layout_region_offset(&l, 37, layer, (tdm_kv_sub_t)s);
            good &= off % TDM_KV_REGION_ALIGN == 0 && off >= prev_end;
            prev_end = off + 37 * l.sub[s].page_stride;
        }
    good &= prev_end <= bytes;
    ok(good, "regions aligned, disjoint and inside the pool");
}

static void test_alloc(void)
{
    tdm_model_config_t c = cfg_small();
    tdm_kv_layout_t l;
    tdm_kv_pool_t *p;
    uint32_t ids[8], more[8];
    tdm_kv_seq_t s;

    c.num_layers = 1;
    tdm_kv_layout_init(&c, TDM_DTYPE_BF16, 4, 1, 0, &l);
    is_int(tdm_kv_pool_init(&l, 8, &p), TDM_OK, "pool of 8 pages");
    const tdm_kv_buffers_t *b = tdm_kv_pool_buffers(p);
    ok(tdm_kv_slot(b, 0, TDM_KV_SUB_V, 0, 0) - b->base ==
           (ptrdiff_t)tdm_kv_layout_region_offset(&l, 8, 0, TDM_KV_SUB_V),
       "buffers use the descriptor's offsets");
    is_int(tdm_kv_page_alloc(p, 5, ids), TDM_OK, "alloc 5");
    is_int(tdm_kv_pool_free_pages(p), 3, "3 free");
    is_int(tdm_kv_page_alloc(p, 4, more), TDM_ERR_AGAIN, "alloc 4 of 3: all or nothing");
    is_int(tdm_kv_pool_free_pages(p), 3, "still 3 free after the failed alloc");
    is_int(tdm_kv_page_ref(p, ids[0]), TDM_OK, "share a page");
    is_int(tdm_kv_page_refcount(p, ids[0]), 2, "refcount 2");
    tdm_kv_page_unref(p, ids[0]);
    is_int(tdm_kv_pool_free_pages(p), 3, "shared page stays allocated after one unref");
    tdm_kv_page_unref(p, ids[0]);
    is_int(tdm_kv_pool_free_pages(p), 4, "freed after the last unref");
    is_int(tdm_kv_page_unref(p, ids[0]), TDM_ERR_STATE, "double free refused");
    is_int(tdm_kv_page_ref(p, 99), TDM_ERR_RANGE, "page id out of range");
    for (int i = 1; i < 5; i++)
        tdm_kv_page_unref(p, ids[i]);
    is_int(tdm_kv_pool_free_pages(p), 8, "all free");

    tdm_kv_seq_init(&s, 3);
    is_int(tdm_kv_seq_reserve(p, &s, 5), TDM_OK, "reserve 5 tokens");
    is_int(s.n_pages, 2, "2 pages of 4");
    is_int(tdm_kv_seq_reserve(p, &s, 8), TDM_OK, "reserve 8: no new page");
    is_int(s.n_pages, 2, "still 2 pages");
    is_int(tdm_kv_seq_reserve(p, &s, 13), TDM_ERR_RANGE, "beyond max pages per sequence");
    is_int(tdm_kv_seq_reserve(p, &s, 12), TDM_OK, "reserve 12");
    is_int(tdm_kv_pool_free_pages(p), 5, "3 pages used");
    tdm_kv_seq_free(p, &s);
    is_int(tdm_kv_pool_free_pages(p), 8, "sequence freed its pages");
    tdm_kv_pool_free(p);
}

/* Brute force: the nearest representable e4m3 value, ties to even code, saturating. */
static uint8_t fp8_ref(float x)
{
    double best_err = INFINITY;
    uint8_t best = 0;
    if (isnan(x))
        return 0x7f;
    for (int v = 0; v < 256; v++) {
        if ((v & 0x7f) == 0x7f)
            continue;
        double d = tdm_kv_fp8_decode((uint8_t)v), err = fabs(d - (double)x);
        if ((v & 0x80) != (signbit(x) ? 0x80 : 0))
            continue;
        if (err < best_err || (err == best_err && (v & 1) == 0)) {
            best_err = err;
            best = (uint8_t)v;
        }
    }
    return best;
}

static void test_fp8(void)
{
    int round_trip = 1, nearest = 1;
    for (int v = 0; v < 256; v++) {
        if ((v & 0x7f) == 0x7f)
            continue;
        round_trip &= tdm_kv_fp8_encode(tdm_kv_fp8_decode((uint8_t)v)) == v;
    }
    ok(round_trip, "every finite e4m3 code round-trips");
    is_int(tdm_kv_fp8_decode(0x7e) == 448.0f, 1, "0x7e is 448");
    is_int(tdm_kv_fp8_decode(0x01) == 1.0f / 512, 1, "smallest subnormal 2^-9");
    is_int(tdm_kv_fp8_encode(1e6f), 0x7e, "saturates to +448");
    is_int(tdm_kv_fp8_encode(-1e6f), 0xfe, "saturates to -448");
    is_int(tdm_kv_fp8_encode(INFINITY), 0x7e, "inf saturates");
    is_int(tdm_kv_fp8_encode(NAN), 0x7f, "NaN");
    is_int(tdm_kv_fp8_encode(1.0625f), 0x38, "tie 1.0625 rounds to even (1.0)");
    is_int(tdm_kv_fp8_encode(1.1875f), 0x3a, "tie 1.1875 rounds to even (1.25)");
    srand(7);
    for (int i = 0; i < 20000; i++) {
        float x = ((float)rand() / RAND_MAX - 0.5f) * ldexpf(1.0f, rand() % 24 - 12);
        if (tdm_kv_fp8_encode(x) != fp8_ref(x)) {
            diag("x=%a enc=%02x ref=%02x", x, tdm_kv_fp8_encode(x), fp8_ref(x));
            nearest = 0;
            break;
        }
    }
    ok(nearest, "encode == brute-force nearest-even over 20000 values across 24 binades");
    float xs[4] = {0.5f, -3.0f, 2.0f, 0.0f};
    ok(tdm_kv_fp8_scale(xs, 4) == 3.0f / 448.0f, "scale = amax/448");
    float zs[2] = {0.0f, -0.0f};
    ok(tdm_kv_fp8_scale(zs, 2) == 1.0f, "all-zero head gets scale 1");
}

/* A pool over caller memory: zeroed, same offsets, allocator works, memory left to the caller. */
static void test_init_mem(void)
{
    tdm_model_config_t c = cfg_small();
    tdm_kv_layout_t l;
    tdm_kv_pool_t *p = NULL;
    uint64_t bytes = 0;
    uint32_t ids[4];

    tdm_kv_layout_init(&c, TDM_DTYPE_FP8_E4M3, 16, 1, 0, &l);
    is_int(tdm_kv_layout_pool_bytes(&l, 6, &bytes), TDM_OK, "pool bytes for 6 pages");
    uint8_t *mem = aligned_alloc(TDM_KV_REGION_ALIGN, bytes + 2 * TDM_KV_REGION_ALIGN);
    memset(mem, 0xa5, bytes + 2 * TDM_KV_REGION_ALIGN);
    is_int(tdm_kv_pool_init_mem(&l, 6, NULL, bytes, &p), TDM_ERR_INVAL, "NULL base refused");
    is_int(tdm_kv_pool_init_mem(&l, 6, mem + 8, bytes + 8, &p), TDM_ERR_INVAL,
           "misaligned base refused");
    is_int(tdm_kv_pool_init_mem(&l, 6, mem, bytes - 1, &p), TDM_ERR_INVAL,
           "memory one byte short refused");
    is_int(tdm_kv_pool_init_mem(&l, 0, mem, bytes, &p), TDM_ERR_INVAL, "zero pages refused");
    ok(p == NULL, "no output on failure");
    is_int(tdm_kv_pool_init_mem(&l, 6, mem, bytes, &p), TDM_OK, "pool over caller memory");
    const tdm_kv_buffers_t *b = tdm_kv_pool_buffers(p);
    ok(b->base == mem, "buffers point at the caller's memory");
    int zero = 1;
    for (uint64_t i = 0; i < bytes; i++)
        zero &= mem[i] == 0;
    ok(zero, "the pool zeroed all %llu bytes", (unsigned long long)bytes);
    ok(mem[bytes] == 0xa5, "and nothing past them");
    ok(tdm_kv_slot(b, 1, TDM_KV_SUB_V_SCALE, 2, 3) - b->base ==
           (ptrdiff_t)(tdm_kv_layout_region_offset(&l, 6, 1, TDM_KV_SUB_V_SCALE) +
                       2 * l.sub[TDM_KV_SUB_V_SCALE].page_stride +
                       3 * l.sub[TDM_KV_SUB_V_SCALE].bytes_per_token),
       "slot addresses from the descriptor's offsets");
    is_int(tdm_kv_page_alloc(p, 4, ids), TDM_OK, "alloc 4 pages");
    is_int(tdm_kv_pool_free_pages(p), 2, "2 left");
    uint8_t *w = tdm_kv_slot(b, 2, TDM_KV_SUB_K, ids[3], 15);
    *w = 0x42;
    tdm_kv_pool_free(p);
    /* the memory is still the caller's: readable (ASan would flag a free) and holds the write */
    ok(*w == 0x42, "pool_free left the memory to the caller");
    free(mem);
}

/* A pages-only pool: the allocator without host memory (the CUDA engine keeps the KV). */
static void test_init_pages(void)
{
    tdm_model_config_t c = cfg_small();
    tdm_kv_layout_t l;
    tdm_kv_pool_t *p = NULL;
    uint32_t ids[5];

    tdm_kv_layout_init(&c, TDM_DTYPE_BF16, 16, 1, 0, &l);
    is_int(tdm_kv_pool_init_pages(&l, 0, &p), TDM_ERR_INVAL, "pages-only: zero pages refused");
    ok(p == NULL, "pages-only: no output on failure");
    /* 2^20 pages of this layout would be gigabytes of host memory: only ids are allocated */
    is_int(tdm_kv_pool_init_pages(&l, 1u << 20, &p), TDM_OK, "pages-only pool of 2^20 pages");
    ok(tdm_kv_pool_buffers(p)->base == NULL, "no host memory behind it");
    is_int(tdm_kv_pool_num_pages(p), 1u << 20, "page count kept");
    is_int(tdm_kv_page_alloc(p, 5, ids), TDM_OK, "alloc 5 pages");
    ok(ids[0] == 0 && ids[4] == 4, "ids handed out in order");
    is_int(tdm_kv_pool_free_pages(p), (1u << 20) - 5, "free count");
    is_int(tdm_kv_page_unref(p, ids[2]), TDM_OK, "unref one");
    is_int(tdm_kv_pool_free_pages(p), (1u << 20) - 4, "it is free again");
    tdm_kv_pool_free(p);
}

/* The allocation orders under churn, against a reference: LOWEST hands out the lowest free ids
 * (a linear scan of the reference's free set), LIFO the ids freed last; switching the order
 * midway keeps every free id, and the refcounts and free count stay exact. */
static void test_order(void)
{
    tdm_model_config_t c = cfg_small();
    tdm_kv_layout_t l;
    tdm_kv_pool_t *p = NULL;
    enum { N = 257 };
    unsigned char used[N] = {0};
    uint32_t live[N], nlive = 0, ids[8], last_freed[8], nfreed = 0;
    uint64_t rs = 0x9e3779b97f4a7c15ull;
    int lowest_ok = 1, lifo_ok = 1, count_ok = 1;
    tdm_kv_alloc_order_t o;

    tdm_kv_layout_init(&c, TDM_DTYPE_BF16, 16, 1, 0, &l);
    is_int(tdm_kv_pool_init_pages(&l, N, &p), TDM_OK, "pages-only pool of 257 pages");
    is_int(tdm_kv_alloc_order_parse("lowest", &o), TDM_OK, "\"lowest\" parses");
    ok(o == TDM_KV_ALLOC_LOWEST, "to LOWEST");
    is_int(tdm_kv_alloc_order_parse("LIFO", &o), TDM_ERR_INVAL, "\"LIFO\" is refused (case)");
    is_int(tdm_kv_alloc_order_parse("", &o), TDM_ERR_INVAL, "an empty order is refused");
    is_int(tdm_kv_pool_set_order(p, (tdm_kv_alloc_order_t)7), TDM_ERR_INVAL, "order 7 refused");
    /* LIFO churn first, so the free list is scrambled when LOWEST takes over */
    for (int round = 0; round < 3000; round++) {
        if (round == 1000)
            is_int(tdm_kv_pool_set_order(p, TDM_KV_ALLOC_LOWEST), TDM_OK, "LIFO -> LOWEST midway");
        if (round == 2000)
            is_int(tdm_kv_pool_set_order(p, TDM_KV_ALLOC_LIFO), TDM_OK, "LOWEST -> LIFO midway");
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t k = 1 + (uint32_t)(rs >> 60) % 8;
        if ((rs >> 40) % 2 && nlive >= k) {
            /* free k random live pages */
            nfreed = 0;
            for (uint32_t j = 0; j < k; j++) {
                rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                const uint32_t at = (uint32_t)(rs >> 33) % nlive, id = live[at];
                live[at] = live[--nlive];
                used[id] = 0;
                tdm_kv_page_unref(p, id);
                last_freed[nfreed++] = id;
            }
            continue;
        }
        if (tdm_kv_page_alloc(p, k, ids) != TDM_OK) {
            count_ok &= N - nlive < k;
            continue;
        }
        for (uint32_t j = 0; j < k; j++) {
            if (round >= 1000 && round < 2000) {
                uint32_t want = 0;
                while (want < N && used[want])
                    want++;
                lowest_ok &= ids[j] == want;
            } else if (j < nfreed) {
                /* the ids freed just before come back first, the last freed first */
                lifo_ok &= ids[j] == last_freed[nfreed - 1 - j];
            }
            count_ok &= !used[ids[j]] && tdm_kv_page_refcount(p, ids[j]) == 1;
            used[ids[j]] = 1;
            live[nlive++] = ids[j];
        }
        nfreed = 0;
        count_ok &= tdm_kv_pool_free_pages(p) == N - nlive;
    }
    ok(lowest_ok, "LOWEST: every id handed out is the lowest free one");
    ok(lifo_ok, "LIFO: the ids freed just before come back, last freed first");
    ok(count_ok, "no id handed out twice, refcount 1, free count exact, all-or-nothing");
    /* after freeing everything under LOWEST, the pool hands out 0, 1, 2, ... again */
    tdm_kv_pool_set_order(p, TDM_KV_ALLOC_LOWEST);
    for (uint32_t j = 0; j < nlive; j++)
        tdm_kv_page_unref(p, live[j]);
    is_int(tdm_kv_pool_free_pages(p), N, "all free");
    is_int(tdm_kv_page_alloc(p, 3, ids), TDM_OK, "alloc 3");
    ok(ids[0] == 0 && ids[1] == 1 && ids[2] == 2, "LOWEST from an emptied pool: 0, 1, 2");
    tdm_kv_pool_free(p);
}

int main(void)
{
    test_layout();
    test_configure();
    test_alloc();
    test_fp8();
    test_init_mem();
    test_init_pages();
    test_order();
    return done_testing();
}
