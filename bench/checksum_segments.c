/*
 * checksum_segments.c — what naming the sub-buffer of a KV mismatch costs on the hashing paths
 * (docs/contracts.md §d "Segment sums", "HiCache" Checksums), each beside its anchor in one run:
 *
 *   - PD transfer: tdm_xfer_page_sums with the segment sums (one tdm_xfer_seg_fold more per (page,
 *     layer, sub-buffer) segment) against the page sums alone (tdm_xfer_page_sum per page, the
 *     work before the segment sums), over the same room of pages;
 *   - HiCache verification: one XXH64 (seed 0) per (page, layer, sub-buffer), as
 *     tdm_hicache_dev_checksum computes it now, against the former per-(page, layer) value (the
 *     sub-buffers' XXH64 chained through the seed), over the same pages.
 *
 * Layouts: TinyLlama-like, 22 layers, TP 2 (2 KV heads x 64 per rank), page 16: bf16 (K, V: 4 KiB
 * segments) and fp8_e4m3 (K, V 2 KiB, K_SCALE, V_SCALE 128 B). A room of 64 pages scattered over
 * a 256-page pool (about 11.5 / 6 MiB per rank, past the L2). The machine is shared: each figure
 * is the median of --reps process-CPU-time repetitions of anchor and variant, their order
 * alternating.
 * Prints one JSON object (and writes it to --out FILE with git_sha from TDM_BENCH_GIT_SHA).
 *
 * Usage: bench/checksum_segments [--reps R] [--out FILE]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/hash.h>
#include <tdm/kv.h>
#include <tdm/model.h>

#include "dataplane/xfer/xfer_int.h"
#include "bench/bench_stat.h"

#define MAX_REPS 64
#define POOL_PAGES 256u
#define ROOM_PAGES 64u

static volatile uint64_t sink;

/* the former HiCache check value: per (page, layer), the sub-buffers chained through the seed */
static void hc_chained(const tdm_kv_buffers_t *kv, const uint32_t *pages, uint64_t *ck)
{
    const tdm_kv_layout_t *l = kv->layout;
    for (uint32_t i = 0; i < ROOM_PAGES; i++)
        for (uint32_t layer = 0; layer < l->num_layers; layer++) {
            uint64_t h = 0;
            for (uint32_t s = 0; s < l->n_sub; s++)
                h = tdm_hash_xxh64(tdm_kv_slot(kv, layer, (tdm_kv_sub_t)s, pages[i], 0),
                                   l->sub[s].page_stride, h);
            ck[(size_t)i * l->num_layers + layer] = h;
        }
}

/* now: per (page, layer, sub-buffer), seed 0 (tdm_hicache_dev_checksum) */
static void hc_per_sub(const tdm_kv_buffers_t *kv, const uint32_t *pages, uint64_t *ck)
{
    const tdm_kv_layout_t *l = kv->layout;
    for (uint32_t i = 0; i < ROOM_PAGES; i++)
        for (uint32_t layer = 0; layer < l->num_layers; layer++)
            for (uint32_t s = 0; s < l->n_sub; s++)
                ck[((size_t)i * l->num_layers + layer) * l->n_sub + s] = tdm_hash_xxh64(
                    tdm_kv_slot(kv, layer, (tdm_kv_sub_t)s, pages[i], 0), l->sub[s].page_stride, 0);
}

static void pd_pages_only(const tdm_kv_buffers_t *kv, const uint32_t *pages, uint64_t *sums)
{
    for (uint32_t i = 0; i < ROOM_PAGES; i++)
        sums[i] = tdm_xfer_page_sum(kv, pages[i]);
}

typedef void (*pass_fn)(const tdm_kv_buffers_t *, const uint32_t *, uint64_t *);

/* Median CPU seconds of a and b over reps, alternating. */
static void ab(const tdm_kv_buffers_t *kv, const uint32_t *pages, pass_fn a, pass_fn b, int pd_b,
               int reps, uint64_t *scratch, uint64_t *seg, double *ret_a, double *ret_b)
{
    double ta[MAX_REPS], tb[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        /* the order alternates, so neither side always finds the room's bytes in the cache */
        for (int k = 0; k < 2; k++) {
            const int do_b = (r + k) % 2;
            double t0 = tdm_bench_cpu_seconds();
            if (!do_b)
                a(kv, pages, scratch);
            else if (pd_b)
                tdm_xfer_page_sums(kv, pages, ROOM_PAGES, scratch, seg);
            else
                b(kv, pages, scratch);
            double t1 = tdm_bench_cpu_seconds();
            sink += scratch[0] + seg[0];
            (do_b ? tb : ta)[r] = t1 - t0;
        }
    }
    *ret_a = tdm_bench_median(ta, reps);
    *ret_b = tdm_bench_median(tb, reps);
}

static int one_layout(tdm_dtype_t dt, int reps, char *out, size_t cap)
{
    tdm_model_config_t c;
    tdm_kv_layout_t l;
    tdm_kv_pool_t *pool;
    uint64_t bytes = 0;
    memset(&c, 0, sizeof(c));
    c.num_layers = 22;
    c.num_heads = 32;
    c.num_kv_heads = 4;
    c.head_dim = 64;
    c.hidden_size = 2048;
    if (tdm_kv_layout_init(&c, dt, 16, 2, 0, &l) != TDM_OK ||
        tdm_kv_pool_init(&l, POOL_PAGES, &pool) != TDM_OK)
        return -1;
    const tdm_kv_buffers_t *kv = tdm_kv_pool_buffers(pool);
    tdm_kv_layout_pool_bytes(&l, POOL_PAGES, &bytes);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < bytes; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        kv->base[i] = (uint8_t)(x >> 29);
    }
    uint32_t pages[ROOM_PAGES];
    for (uint32_t i = 0; i < ROOM_PAGES; i++)
        pages[i] = (i * 97u + 13u) % POOL_PAGES; /* scattered, distinct */
    const size_t per = (size_t)l.num_layers * l.n_sub;
    uint64_t *scratch = calloc(ROOM_PAGES * per, sizeof(uint64_t));
    uint64_t *seg = calloc(per, sizeof(uint64_t));
    uint64_t room_bytes = 0;
    for (uint32_t s = 0; s < l.n_sub; s++)
        room_bytes += l.sub[s].page_stride * l.num_layers * ROOM_PAGES;
    double pd_a, pd_b, hc_a, hc_b;
    ab(kv, pages, pd_pages_only, NULL, 1, reps, scratch, seg, &pd_a, &pd_b);
    ab(kv, pages, hc_chained, hc_per_sub, 0, reps, scratch, seg, &hc_a, &hc_b);
    free(scratch);
    free(seg);
    tdm_kv_pool_free(pool);
    snprintf(out, cap,
             "{\"kv_dtype\":\"%s\",\"n_sub\":%u,\"segments_per_page\":%zu,\"room_pages\":%u,"
             "\"room_bytes\":%llu,\"pd\":{\"anchor_page_sums_us\":%.1f,\"page_and_segment_sums_"
             "us\":%.1f,\"anchor_gbps\":%.2f,\"gbps\":%.2f,\"overhead_pct\":%.1f},"
             "\"hicache_verify\":{\"anchor_chained_per_layer_us\":%.1f,\"per_sub_buffer_us\":%.1f,"
             "\"anchor_gbps\":%.2f,\"gbps\":%.2f,\"overhead_pct\":%.1f}}",
             tdm_dtype_name(dt), l.n_sub, per, ROOM_PAGES, (unsigned long long)room_bytes,
             pd_a * 1e6, pd_b * 1e6, room_bytes / pd_a / 1e9, room_bytes / pd_b / 1e9,
             (pd_b / pd_a - 1) * 100, hc_a * 1e6, hc_b * 1e6, room_bytes / hc_a / 1e9,
             room_bytes / hc_b / 1e9, (hc_b / hc_a - 1) * 100);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 21;
    const char *out_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--reps R] [--out FILE]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "checksum_segments: --reps must be 1..%d\n", MAX_REPS);
        return 2;
    }
    char bf[1024], f8[1024];
    if (one_layout(TDM_DTYPE_BF16, reps, bf, sizeof(bf)) != 0 ||
        one_layout(TDM_DTYPE_FP8_E4M3, reps, f8, sizeof(f8)) != 0) {
        fprintf(stderr, "checksum_segments: the KV pool could not be built\n");
        return 1;
    }
    const char *sha = getenv("TDM_BENCH_GIT_SHA");
    char json[2600];
    snprintf(json, sizeof(json),
             "{\"bench\":\"checksum_segments\",\"git_sha\":\"%s\",\"reps\":%d,\"timer\":\"process "
             "CPU time, median\",\"layouts\":[%s,%s]}\n",
             sha ? sha : "unknown", reps, bf, f8);
    fputs(json, stdout);
    if (out_path) {
        FILE *f = fopen(out_path, "w");
        if (!f || fputs(json, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "checksum_segments: cannot write %s\n", out_path);
            return 1;
        }
    }
    return (int)(sink & 0);
}
