/*
 * test-xfer-cuda.c — the GPU side of the PD transfer (dataplane/xfer/cuda_ipc.h,
 * kernels/cuda/xfer_ops.h) against the CPU:
 *  - XXH64 on the GPU == libxxhash's (tdm_hash_xxh64) for every length 0..300 and larger ones,
 *    at every misalignment 0..7 and several seeds;
 *  - per-page checksums of a device pool == tdm_xfer_page_sum (checksum.c) of the same bytes on the
 *    host, for bf16 and fp8 layouts (fp8 at page size 3: 24-byte scale segments, the
 *    short-input path of XXH64), and a one-byte flip on the device changes exactly that page's
 *    checksum and flipping it back restores it;
 *  - the KV gather byte-exact over the whole destination (every byte outside the room keeps its
 *    poison), each kernel variant (the default's run grid and search grid, the search-only
 *    blocks, the warp kernel): pools of different page counts, runs and scattered pages, fp8's
 *    24-byte scale pages, pages longer than a block's 8 KiB piece, misaligned bases (16-, 8-,
 *    4-byte and byte paths, heads and tails), single runs, more runs than one launch carries;
 *  - CUDA IPC across two processes: a child (forked before either touches CUDA) owns a "decode"
 *    pool (the serving geometry: 32 layers, page chunk 512 KiB) and exports its record; the
 *    parent opens it and moves rooms by the gather kernel and by one copy per run; the child's
 *    GPU checksums of every destination page equal the sources' while pages not written stay
 *    zero; six rooms in flight at once each land; a fence behind 2 GiB of rooms is pending right
 *    after the call and every page is there once it completed (what STATUS and ABORT_ACK wait
 *    for);
 *  - malformed records are refused naming the field.
 * Then the benchmark (its "# bench" lines; bench/results/transfer_cuda.json): the host cost of
 * each CUDA call a room or the anchor makes ("api_ns"), then rooms of 512 KiB to 256 MiB,
 * contiguous and every other page, once per gather variant listed in TDM_XFER_BENCH_VARIANTS
 * (default "0"; the JSON holds the first variant-0 pass and every pass's minima as "ab"),
 * against one local cudaMemcpyAsync D2D of the same bytes, both timed the same two ways: GPU
 * events around the work on its stream (the stream held by a host function while the reps are
 * queued, so only the device's time counts) and host wall time from the call to the completed
 * event; medians of 25, source and destination rotated over
 * 512 MiB (ten times the L2) so neither side is cache-hot; every page of every timed room checked.
 * Without a device it skips with the reason; under compute-sanitizer (TDM_UNDER_SANITIZER) the
 * two-process IPC part and the benchmark are left out.
 */
#include "config.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <tdm/hash.h>
#include <tdm/kv.h>
#include <tdm/model.h>
#include <tdm/time.h>

#include "dataplane/xfer/xfer_int.h"
#include "kernels/cuda/xfer_ops.h"
#include "tap.h"

#define NPAGES 40u

extern uint32_t xfer_cuda_gather_min_runs; /* cuda_ipc.c's seam: force one path */

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(next_rand() >> 24);
}

static void fill_random64(uint8_t *p, size_t n) /* n a multiple of 8, p 8-aligned */
{
    for (size_t i = 0; i < n; i += 8)
        *(uint64_t *)(p + i) = next_rand();
}

static int layout_of(tdm_dtype_t dt, uint32_t page_size, uint32_t layers, uint32_t heads,
                     uint32_t head_dim, tdm_kv_layout_t *l)
{
    tdm_model_config_t mc;
    memset(&mc, 0, sizeof(mc));
    mc.num_layers = layers;
    mc.num_kv_heads = heads;
    mc.head_dim = head_dim;
    return tdm_kv_layout_init(&mc, dt, page_size, 1, 0, l) == TDM_OK ? 0 : -1;
}

static int make_layout(tdm_dtype_t dt, uint32_t page_size, tdm_kv_layout_t *l)
{
    return layout_of(dt, page_size, 3, 2, 64, l);
}

/* The serving geometry of bench/results/transfer.json: bf16, 32 layers, 2 KV heads x 128, page
 * 16 tokens: a page is 64 regions of 8 KiB, the 512 KiB page chunk. */
static int serving_layout(tdm_kv_layout_t *l)
{
    return layout_of(TDM_DTYPE_BF16, 16, 32, 2, 128, l);
}

/* A device pool (cudaMalloc) laid out by l; *ret_dev describes it with a device base. */
static int dev_pool(const tdm_kv_layout_t *l, uint32_t num_pages, const tdm_kv_buffers_t *host,
                    tdm_kv_buffers_t *ret_dev, uint64_t *ret_bytes)
{
    uint64_t bytes;
    void *d = NULL;
    if (tdm_kv_layout_pool_bytes(l, num_pages, &bytes) != TDM_OK ||
        cudaMalloc(&d, bytes) != cudaSuccess)
        return -1;
    if ((host ? cudaMemcpy(d, host->base, bytes, cudaMemcpyHostToDevice)
              : cudaMemset(d, 0, bytes)) != cudaSuccess)
        return -1;
    if (host) {
        *ret_dev = *host;
    } else {
        tdm_kv_pool_t *p = NULL;
        if (tdm_kv_pool_init_pages(l, num_pages, &p) != TDM_OK)
            return -1;
        *ret_dev = *tdm_kv_pool_buffers(p); /* offsets only; the layout pointer is l's copy */
        ret_dev->layout = l;
        tdm_kv_pool_free(p);
    }
    ret_dev->base = d;
    *ret_bytes = bytes;
    return 0;
}

static void test_xxh64(void)
{
    uint8_t buf[5000];
    const size_t lens[] = {1000, 1024, 4095, 4096, 4097, 5000};
    int bad = 0, tried = 0;
    fill_random(buf, sizeof(buf));
    for (size_t len = 0; len <= 300 && bad < 3; len++)
        for (size_t mis = 0; mis < 8; mis++) {
            uint64_t seed = len % 3 == 0 ? 0 : next_rand(), g = 0;
            tried++;
            if (tdm_cuda_xxh64_host(buf + mis, len, mis, seed, &g) != TDM_OK ||
                g != tdm_hash_xxh64(buf + mis, len, seed)) {
                if (bad++ < 3)
                    diag("xxh64 differs: len %zu misalign %zu", len, mis);
            }
        }
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t mis = 0; mis < 8; mis += 3) {
            uint64_t g = 0;
            tried++;
            if (tdm_cuda_xxh64_host(buf, lens[i], mis, 0, &g) != TDM_OK ||
                g != tdm_hash_xxh64(buf, lens[i], 0))
                bad++;
        }
    ok(bad == 0,
       "GPU XXH64 == libxxhash on %d inputs (lengths 0..300 and 1000..5000, "
       "misalignment 0..7, random seeds)",
       tried);
}

static void test_page_sums(xfer_cuda_t *c, tdm_dtype_t dt, uint32_t page_size)
{
    tdm_kv_layout_t l;
    tdm_kv_pool_t *hp = NULL;
    tdm_kv_buffers_t db;
    uint64_t bytes, cpu[NPAGES], gpu[NPAGES], again[NPAGES];
    uint32_t pages[NPAGES];
    if (make_layout(dt, page_size, &l) != 0 || tdm_kv_pool_init(&l, NPAGES, &hp) != TDM_OK) {
        ok(0, "%s layout at page %u", tdm_dtype_name(dt), page_size);
        return;
    }
    const tdm_kv_buffers_t *hb = tdm_kv_pool_buffers(hp);
    uint64_t pool_bytes;
    tdm_kv_layout_pool_bytes(&l, NPAGES, &pool_bytes);
    fill_random(hb->base, pool_bytes);
    if (dev_pool(&l, NPAGES, hb, &db, &bytes) != 0) {
        ok(0, "device pool");
        tdm_kv_pool_free(hp);
        return;
    }
    for (uint32_t i = 0; i < NPAGES; i++) {
        pages[i] = (i * 7u) % NPAGES; /* every page, out of order */
        cpu[i] = tdm_xfer_page_sum(hb, pages[i]);
    }
    /* the segment sums (docs/contracts.md §d "Segment sums"): the host fold of the same GPU
     * segment hashes == tdm_xfer_page_sums on the CPU */
    const uint32_t per = l.num_layers * l.n_sub;
    uint64_t *cpu_seg = calloc(per, 8), *gpu_seg = calloc(per, 8), *cpu_chk = calloc(NPAGES, 8);
    tdm_xfer_page_sums(hb, pages, NPAGES, cpu_chk, cpu_seg);
    tdm_status_t st = tdm_xfer_cuda_page_sums(c, &db, pages, NPAGES, gpu, gpu_seg);
    ok(st == TDM_OK && memcmp(cpu, gpu, sizeof(cpu)) == 0 &&
           memcmp(cpu_chk, cpu, sizeof(cpu)) == 0 && memcmp(cpu_seg, gpu_seg, per * 8) == 0,
       "%s page %u (%u sub-buffers, strides %llu/%llu): GPU page checksums == tdm_xfer_page_sum on "
       "%u pages, and the %u segment sums == tdm_xfer_page_sums'",
       tdm_dtype_name(dt), page_size, l.n_sub, (unsigned long long)l.sub[0].page_stride,
       (unsigned long long)l.sub[l.n_sub - 1].page_stride, NPAGES, per);
    free(cpu_seg);
    free(gpu_seg);
    free(cpu_chk);
    /* flip one byte of page pages[5]'s last layer V */
    uint8_t *p = tdm_kv_slot(&db, l.num_layers - 1, TDM_KV_SUB_V, pages[5], page_size - 1) + 1;
    st = tdm_xfer_cuda_flip(c, p, 0x40);
    tdm_status_t st2 = tdm_xfer_cuda_page_sums(c, &db, pages, NPAGES, again, NULL);
    int only5 = st == TDM_OK && st2 == TDM_OK;
    for (uint32_t i = 0; i < NPAGES && only5; i++)
        if ((again[i] != cpu[i]) != (i == 5))
            only5 = 0;
    ok(only5, "%s: a flipped device byte changes exactly its page's checksum", tdm_dtype_name(dt));
    st = tdm_xfer_cuda_flip(c, p, 0x40);
    st2 = tdm_xfer_cuda_page_sums(c, &db, pages, NPAGES, again, NULL);
    ok(st == TDM_OK && st2 == TDM_OK && memcmp(cpu, again, sizeof(cpu)) == 0,
       "%s: flipped back, the checksums are the CPU's again", tdm_dtype_name(dt));
    cudaFree(db.base);
    tdm_kv_pool_free(hp);
}

/* The map of two pools of one layout (page counts may differ). */
static tdm_cuda_kv_map_t map_of(const tdm_kv_buffers_t *src, const tdm_kv_buffers_t *dst)
{
    tdm_cuda_kv_map_t m;
    memset(&m, 0, sizeof(m));
    m.num_layers = src->layout->num_layers;
    m.n_sub = src->layout->n_sub;
    m.src_layer_bytes = src->layer_bytes;
    m.dst_layer_bytes = dst->layer_bytes;
    for (uint32_t s = 0; s < m.n_sub; s++) {
        m.src_sub_offset[s] = src->sub_offset[s];
        m.dst_sub_offset[s] = dst->sub_offset[s];
        m.page_stride[s] = src->layout->sub[s].page_stride;
    }
    return m;
}

/* The kernel over (map, runs) from src + src_mis into dst + dst_mis (buffers of src_bytes and
 * dst_bytes past the misalignment) == the same memcpys on the host, over the whole destination:
 * random sources, a poisoned destination. Returns 1 when equal; *ret_launches. */
static int gather_case(const tdm_cuda_kv_map_t *m, const tdm_cuda_page_run_t *runs, uint32_t n,
                       size_t src_mis, size_t dst_mis, size_t src_bytes, size_t dst_bytes,
                       uint32_t *ret_launches, size_t *ret_first_bad)
{
    uint8_t *h_src = malloc(src_bytes + src_mis), *want = malloc(dst_bytes + dst_mis);
    uint8_t *got = malloc(dst_bytes + dst_mis), *d_src = NULL, *d_dst = NULL;
    int same = 0;
    *ret_first_bad = SIZE_MAX;
    if (h_src && want && got && cudaMalloc((void **)&d_src, src_bytes + src_mis) == cudaSuccess &&
        cudaMalloc((void **)&d_dst, dst_bytes + dst_mis) == cudaSuccess) {
        fill_random(h_src, src_bytes + src_mis);
        memset(want, 0xa5, dst_bytes + dst_mis);
        for (uint32_t l = 0; l < m->num_layers; l++)
            for (uint32_t s = 0; s < m->n_sub; s++)
                for (uint32_t i = 0; i < n; i++) {
                    uint64_t st = m->page_stride[s];
                    memcpy(want + dst_mis + l * m->dst_layer_bytes + m->dst_sub_offset[s] +
                               runs[i].dst_page * st,
                           h_src + src_mis + l * m->src_layer_bytes + m->src_sub_offset[s] +
                               runs[i].src_page * st,
                           runs[i].n_pages * st);
                }
        if (cudaMemcpy(d_src, h_src, src_bytes + src_mis, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemset(d_dst, 0xa5, dst_bytes + dst_mis) == cudaSuccess &&
            tdm_cuda_kv_gather(d_src + src_mis, d_dst + dst_mis, m, runs, n, 0, ret_launches) ==
                TDM_OK &&
            cudaDeviceSynchronize() == cudaSuccess &&
            cudaMemcpy(got, d_dst, dst_bytes + dst_mis, cudaMemcpyDeviceToHost) == cudaSuccess) {
            same = 1;
            for (size_t i = 0; i < dst_bytes + dst_mis && same; i++)
                if (got[i] != want[i]) {
                    same = 0;
                    *ret_first_bad = i;
                }
        }
    }
    cudaFree(d_dst);
    cudaFree(d_src);
    free(got);
    free(want);
    free(h_src);
    return same;
}

/* A pool's buffers (offsets only, no memory) for num_pages pages of l. */
static int pool_shape(const tdm_kv_layout_t *l, uint32_t num_pages, tdm_kv_buffers_t *ret,
                      uint64_t *ret_bytes)
{
    tdm_kv_pool_t *p = NULL;
    if (tdm_kv_pool_init_pages(l, num_pages, &p) != TDM_OK ||
        tdm_kv_layout_pool_bytes(l, num_pages, ret_bytes) != TDM_OK)
        return -1;
    *ret = *tdm_kv_pool_buffers(p);
    ret->layout = l;
    ret->base = NULL;
    tdm_kv_pool_free(p);
    return 0;
}

/* Pools of the test layouts: 40 source pages into 64 destination pages (different region
 * offsets), a run of 5, a run of 2, single pages forwards and backwards, a page onto its own id. */
static void gather_pools(int v, tdm_dtype_t dt, uint32_t page_size)
{
    static const tdm_cuda_page_run_t runs[] = {{3, 10, 5}, {20, 40, 1}, {9, 2, 1},   {31, 63, 1},
                                               {0, 1, 1},  {15, 50, 2}, {39, 39, 1}, {2, 30, 1}};
    tdm_kv_layout_t l;
    tdm_kv_buffers_t sb, db;
    uint64_t sbytes, dbytes;
    uint32_t launches = 0;
    size_t bad = 0;
    if (make_layout(dt, page_size, &l) || pool_shape(&l, NPAGES, &sb, &sbytes) ||
        pool_shape(&l, 64, &db, &dbytes)) {
        ok(0, "gather pools");
        return;
    }
    tdm_cuda_kv_map_t m = map_of(&sb, &db);
    int same = gather_case(&m, runs, sizeof(runs) / sizeof(runs[0]), 0, 0, sbytes, dbytes,
                           &launches, &bad);
    ok(same && launches == 1,
       "kv gather %d: %s page %u (%u sub-buffers, strides %llu/%llu): %zu runs from a %u-page "
       "pool into a 64-page one byte-exact over the whole destination (first difference %zd)",
       v, tdm_dtype_name(dt), page_size, l.n_sub, (unsigned long long)l.sub[0].page_stride,
       (unsigned long long)l.sub[l.n_sub - 1].page_stride, sizeof(runs) / sizeof(runs[0]), NPAGES,
       same ? (ssize_t)-1 : (ssize_t)bad);
}

/* The gather of variant v (xfer_ops.h) byte-exact: test pools, crafted maps, many runs. For the
 * default (0) the bf16 pool's runs (5, 2 and single pages of 4 KiB: a run grid of 3 x 8 pieces
 * for 10 used) take the search grid, the fp8 pool, the crafted 4-run maps and the 5000 single
 * pages the run grid (16- and 256-run instances), the crafted single runs the one-run instance;
 * variant 2 takes the search grid everywhere, 1 is the warp kernel. */
static void test_kv_gather(int v)
{
    tdm_cuda_kv_gather_variant = v;
    gather_pools(v, TDM_DTYPE_BF16, 16);
    gather_pools(v, TDM_DTYPE_FP8_E4M3, 3); /* 24-byte scale pages: 8-byte vectors */
    /* crafted maps: 2 layers of 2 regions, strides and bases of every alignment */
    static const struct {
        uint64_t stride0, stride1;
        size_t src_mis, dst_mis;
        const char *what;
    } cases[] = {
        {9000, 4096, 0, 0, "pages of 9000 bytes (pieces cut at run ends, short passes)"},
        {4097, 13, 1, 3, "odd strides, bases misaligned differently (bytes)"},
        {100, 36, 4, 8, "4-aligned strides and bases (4-byte vectors)"},
        {333, 4099, 5, 5, "equally misaligned bases (byte head, vectors, byte tail)"},
        {24, 8200, 8, 0, "8 bytes apart (8-byte vectors)"},
    };
    static const tdm_cuda_page_run_t runs[] = {{0, 7, 3}, {5, 1, 1}, {9, 12, 2}, {3, 5, 1}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        tdm_cuda_kv_map_t m;
        memset(&m, 0, sizeof(m));
        m.num_layers = 2;
        m.n_sub = 2;
        m.page_stride[0] = cases[k].stride0;
        m.page_stride[1] = cases[k].stride1;
        m.src_sub_offset[1] = 12 * cases[k].stride0 + 7; /* 12 source pages, 16 destination */
        m.src_layer_bytes = m.src_sub_offset[1] + 12 * cases[k].stride1 + 5;
        m.dst_sub_offset[1] = 16 * cases[k].stride0 + 3;
        m.dst_layer_bytes = m.dst_sub_offset[1] + 16 * cases[k].stride1 + 11;
        uint32_t launches = 0, launches1 = 0;
        size_t bad = 0, bad1 = 0;
        int same = gather_case(&m, runs, 4, cases[k].src_mis, cases[k].dst_mis,
                               2 * m.src_layer_bytes, 2 * m.dst_layer_bytes, &launches, &bad);
        /* one run alone: the launch instance without a run list */
        int same1 = gather_case(&m, runs, 1, cases[k].src_mis, cases[k].dst_mis,
                                2 * m.src_layer_bytes, 2 * m.dst_layer_bytes, &launches1, &bad1);
        ok(same && launches == 1 && same1 && launches1 == 1,
           "kv gather %d: %s, 4 runs and 1 run byte-exact (first differences %zd, %zd)", v,
           cases[k].what, same ? (ssize_t)-1 : (ssize_t)bad, same1 ? (ssize_t)-1 : (ssize_t)bad1);
    }
    /* more runs than one launch carries: 5000 single pages, reversed, zero-page runs between */
    enum { NR = 5000 };
    tdm_cuda_page_run_t *many = calloc(NR + 2, sizeof(*many));
    tdm_cuda_kv_map_t m;
    memset(&m, 0, sizeof(m));
    m.num_layers = 1;
    m.n_sub = 1;
    m.page_stride[0] = 48;
    m.src_layer_bytes = m.dst_layer_bytes = 48ull * NR;
    for (uint32_t i = 0; i < NR; i++)
        many[i] = (tdm_cuda_page_run_t){i, NR - 1 - i, 1};
    many[NR] = many[NR + 1] = (tdm_cuda_page_run_t){0, 0, 0};
    uint32_t launches = 0;
    size_t bad = 0;
    int same = gather_case(&m, many, NR + 2, 0, 0, 48ull * NR, 48ull * NR, &launches, &bad);
    uint32_t want = (NR + 2 + TDM_CUDA_KV_GATHER_RUNS - 1) / TDM_CUDA_KV_GATHER_RUNS;
    ok(same && launches == want,
       "kv gather %d: %u runs (two of no page) in %u launches of at most %u, byte-exact (first "
       "difference %zd)",
       v, NR + 2, launches, TDM_CUDA_KV_GATHER_RUNS, same ? (ssize_t)-1 : (ssize_t)bad);
    ok(tdm_cuda_kv_gather(NULL, NULL, &m, many, 1, 0, NULL) == TDM_ERR_INVAL &&
           tdm_cuda_kv_gather(NULL, NULL, NULL, NULL, 0, 0, NULL) == TDM_ERR_INVAL &&
           tdm_cuda_kv_gather(NULL, NULL, &m, NULL, 0, 0, &launches) == TDM_OK && launches == 0,
       "kv gather: missing pointers refused, no runs a no-op");
    free(many);
}

static void test_record_check(xfer_cuda_t *c)
{
    tdm_kv_layout_t l;
    tdm_kv_buffers_t db;
    uint64_t bytes;
    uint8_t rec[XFER_CUDA_REC_BYTES], bad[XFER_CUDA_REC_BYTES];
    char why[128] = "";
    if (make_layout(TDM_DTYPE_BF16, 16, &l) != 0 || dev_pool(&l, 8, NULL, &db, &bytes) != 0) {
        ok(0, "record pool");
        return;
    }
    ok(tdm_xfer_cuda_export(c, &db, rec) == TDM_OK &&
           tdm_xfer_cuda_record_check(rec, sizeof(rec), bytes, why, sizeof(why)) == 0,
       "exported record passes the check");
    memcpy(bad, rec, sizeof(bad));
    bad[0] ^= 1;
    ok(tdm_xfer_cuda_record_check(bad, sizeof(bad), bytes, why, sizeof(why)) == 1 &&
           strstr(why, "magic"),
       "bad magic refused: '%s'", why);
    memcpy(bad, rec, sizeof(bad));
    bad[4] = 2;
    ok(tdm_xfer_cuda_record_check(bad, sizeof(bad), bytes, why, sizeof(why)) == 1 &&
           strstr(why, "version"),
       "version 2 refused: '%s'", why);
    ok(tdm_xfer_cuda_record_check(rec, sizeof(rec) - 1, bytes, why, sizeof(why)) == 1 &&
           strstr(why, "length"),
       "short record refused: '%s'", why);
    ok(tdm_xfer_cuda_record_check(rec, sizeof(rec), bytes + 4096, why, sizeof(why)) == 1 &&
           strstr(why, "pool_bytes"),
       "pool_bytes disagreeing with the layout refused: '%s'", why);
    cudaFree(db.base);
}

/* ---- two processes ---- */

static int rd_all(int fd, void *p, size_t n)
{
    for (size_t o = 0; o < n;) {
        ssize_t r = read(fd, (uint8_t *)p + o, n - o);
        if (r <= 0)
            return -1;
        o += (size_t)r;
    }
    return 0;
}

static int wr_all(int fd, const void *p, size_t n)
{
    for (size_t o = 0; o < n;) {
        ssize_t w = write(fd, (const uint8_t *)p + o, n - o);
        if (w <= 0)
            return -1;
        o += (size_t)w;
    }
    return 0;
}

#define SRC_PAGES 1024u /* serving pages of 512 KiB: 512 MiB */
#define DEC_PAGES 2048u /* 1 GiB: a 256 MiB room of every other page, rotated */
#define N_COPY 12u

/* The decode side: a zeroed pool in the serving geometry, its record out, then commands: 'S' n
 * pages → their checksums; 'Z' zero the pool → one byte; end of input → exit. */
static int child_main(int rfd, int wfd)
{
    int n = 0;
    uint8_t ok_b = 0, cmd;
    tdm_kv_layout_t l;
    tdm_kv_buffers_t db;
    uint64_t bytes;
    xfer_cuda_t *c = NULL;
    uint8_t rec[XFER_CUDA_REC_BYTES];
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || serving_layout(&l) ||
        dev_pool(&l, DEC_PAGES, NULL, &db, &bytes) || tdm_xfer_cuda_init(1, &c) != TDM_OK ||
        tdm_xfer_cuda_export(c, &db, rec) != TDM_OK) {
        wr_all(wfd, &ok_b, 1);
        return 0;
    }
    ok_b = 1;
    if (wr_all(wfd, &ok_b, 1) || wr_all(wfd, rec, sizeof(rec)))
        return 1;
    uint32_t *pages = malloc(DEC_PAGES * sizeof(uint32_t));
    uint64_t *sums = malloc(DEC_PAGES * sizeof(uint64_t));
    int rc = 0;
    while (rc == 0 && rd_all(rfd, &cmd, 1) == 0) {
        uint32_t k = 0;
        if (cmd == 'Z') {
            ok_b = cudaMemset(db.base, 0, bytes) == cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess;
            rc = wr_all(wfd, &ok_b, 1);
        } else if (cmd == 'S' && rd_all(rfd, &k, 4) == 0 && k <= DEC_PAGES &&
                   rd_all(rfd, pages, k * sizeof(uint32_t)) == 0) {
            if (tdm_xfer_cuda_page_sums(c, &db, pages, k, sums, NULL) != TDM_OK)
                memset(sums, 0, k * sizeof(uint64_t));
            rc = wr_all(wfd, sums, k * sizeof(uint64_t));
        } else {
            rc = 1;
        }
    }
    free(sums);
    free(pages);
    tdm_xfer_cuda_free(c);
    cudaFree(db.base);
    return rc;
}

/* The parent's end of the child's commands, and what it compares with. */
typedef struct peer {
    int rfd, wfd;
    xfer_cuda_t *c;
    tdm_kv_buffers_t src; /* the device source pool */
    uint64_t zero_sum;    /* a zero page's checksum */
} peer_t;

static int peer_zero(peer_t *p)
{
    uint8_t cmd = 'Z', r = 0;
    return wr_all(p->wfd, &cmd, 1) || rd_all(p->rfd, &r, 1) || !r ? -1 : 0;
}

static int peer_sums(peer_t *p, const uint32_t *pages, uint32_t n, uint64_t *ret)
{
    uint8_t cmd = 'S';
    return wr_all(p->wfd, &cmd, 1) || wr_all(p->wfd, &n, 4) ||
                   wr_all(p->wfd, pages, n * sizeof(uint32_t)) ||
                   rd_all(p->rfd, ret, n * sizeof(uint64_t))
               ? -1
               : 0;
}

/* Every destination page (checksums on decode's GPU) == its source page's (on ours), and the
 * pages in `untouched` still zero. Returns the pages that differ (-1: could not ask). */
static int peer_check(peer_t *p, const uint32_t *sp, const uint32_t *dp, uint32_t n,
                      const uint32_t *untouched, uint32_t n_untouched)
{
    uint64_t *want = malloc((n + n_untouched) * sizeof(uint64_t));
    uint64_t *got = malloc((n + n_untouched) * sizeof(uint64_t));
    uint32_t *pages = malloc((n + n_untouched) * sizeof(uint32_t));
    int bad = -1;
    memcpy(pages, dp, n * sizeof(uint32_t));
    memcpy(pages + n, untouched, n_untouched * sizeof(uint32_t));
    if (tdm_xfer_cuda_page_sums(p->c, &p->src, sp, n, want, NULL) == TDM_OK &&
        peer_sums(p, pages, n + n_untouched, got) == 0) {
        bad = 0;
        for (uint32_t i = 0; i < n + n_untouched; i++)
            bad += got[i] != (i < n ? want[i] : p->zero_sum);
    }
    free(pages);
    free(got);
    free(want);
    return bad;
}

/* Queue, fence, wait. */
static int room_sync(xfer_cuda_t *c, const tdm_kv_buffers_t *src, const uint32_t *sp,
                     const uint32_t *dp, uint32_t n)
{
    void *ev = NULL;
    int done = 0;
    if (tdm_xfer_cuda_copy(c, 0, src, sp, dp, n, NULL, NULL) != TDM_OK ||
        tdm_xfer_cuda_fence(c, -1, &ev) != TDM_OK)
        return -1;
    while ((done = tdm_xfer_cuda_fence_poll(c, ev)) == 0)
        ;
    tdm_xfer_cuda_fence_free(c, ev);
    return done == 1 ? 0 : -1;
}

/* ---- the benchmark ---- */

#define BENCH_REPS 25

/* One timed operation: the anchor (a local cudaMemcpyAsync D2D of the room's bytes) or a room of
 * n pages, contiguous or every other page, rep k in rotation slot k % nslots: rep after rep
 * reads and writes other memory, 512 MiB around before a slot comes back. */
typedef struct bop {
    peer_t *p;
    int kind; /* 0 anchor, 1 contiguous room, 2 every other page */
    uint32_t n, nslots;
    uint64_t bytes;
    uint8_t *a_dst;
    cudaStream_t s; /* the anchor's stream, or the copy stream of the rooms */
    const uint32_t *sp, *dc, *ds;
} bop_t;

static int bop_queue(const bop_t *o, int k)
{
    uint32_t slot = (uint32_t)k % o->nslots, first = slot * o->n;
    if (o->kind == 0)
        return cudaMemcpyAsync(o->a_dst + slot * o->bytes, o->p->src.base + slot * o->bytes,
                               o->bytes, cudaMemcpyDeviceToDevice, o->s) == cudaSuccess
                   ? 0
                   : -1;
    return tdm_xfer_cuda_copy(o->p->c, 0, &o->p->src, o->sp + first,
                              (o->kind == 1 ? o->dc : o->ds) + first, o->n, NULL, NULL) == TDM_OK
               ? 0
               : -1;
}

static atomic_int gate;

/* Holds its stream until the gate opens (5 s at most): the reps queue up behind it. */
static void CUDART_CB hold_stream(void *arg)
{
    (void)arg;
    uint64_t t0 = tdm_time_mono_ns();
    while (!atomic_load(&gate) && tdm_time_mono_ns() - t0 < 5000000000ull)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

/* Median µs between the GPU events around each rep, all queued behind a held stream. */
static double time_events(const bop_t *o, cudaEvent_t *ev)
{
    double d[BENCH_REPS];
    float ms = 0;
    int rc = 0;
    atomic_store(&gate, 0);
    rc = cudaLaunchHostFunc(o->s, hold_stream, NULL) != cudaSuccess ||
         cudaEventRecord(ev[0], o->s) != cudaSuccess;
    for (int k = 0; k < BENCH_REPS && rc == 0; k++)
        rc = bop_queue(o, k) || cudaEventRecord(ev[k + 1], o->s) != cudaSuccess;
    atomic_store(&gate, 1);
    if (cudaStreamSynchronize(o->s) != cudaSuccess || rc)
        return -1;
    for (int k = 0; k < BENCH_REPS; k++) {
        if (cudaEventElapsedTime(&ms, ev[k], ev[k + 1]) != cudaSuccess)
            return -1;
        d[k] = ms * 1e3;
    }
    return median(d, BENCH_REPS);
}

/* Median µs of host wall time from the call to its completed event (the room's fence). */
static double time_wall(const bop_t *o, cudaEvent_t done)
{
    double d[BENCH_REPS];
    for (int k = 0; k < BENCH_REPS; k++) {
        uint64_t t0 = tdm_time_mono_ns();
        int good = bop_queue(o, k) == 0, r = 0;
        if (o->kind == 0) {
            cudaError_t e = cudaErrorNotReady;
            good = good && cudaEventRecord(done, o->s) == cudaSuccess;
            while (good && (e = cudaEventQuery(done)) == cudaErrorNotReady)
                ;
            good = good && e == cudaSuccess;
        } else {
            void *ev = NULL;
            good = good && tdm_xfer_cuda_fence(o->p->c, -1, &ev) == TDM_OK;
            while (good && (r = tdm_xfer_cuda_fence_poll(o->p->c, ev)) == 0)
                ;
            good = good && r == 1;
            tdm_xfer_cuda_fence_free(o->p->c, ev);
        }
        if (!good)
            return -1;
        d[k] = (double)(tdm_time_mono_ns() - t0) / 1e3;
    }
    return median(d, BENCH_REPS);
}

/* Both timings of one operation after a warm-up rep. */
static int time_both(const bop_t *o, cudaEvent_t *ev, cudaEvent_t done, double *ret_ev,
                     double *ret_wall)
{
    if (bop_queue(o, 0) || cudaStreamSynchronize(o->s) != cudaSuccess)
        return -1;
    *ret_ev = time_events(o, ev);
    *ret_wall = time_wall(o, done);
    return *ret_ev > 0 && *ret_wall > 0 ? 0 : -1;
}

/* One cudaMemcpyAsync per run against one kernel for 1..8 runs of 8 KiB and 1 MiB (local
 * buffers, host wall time to the completed event): where xfer_cuda_gather_min_runs belongs. */
static void bench_threshold(uint8_t *src, uint8_t *dst, cudaStream_t s, cudaEvent_t done)
{
    static const uint32_t nr[] = {1, 2, 3, 4, 8};
    static const uint64_t sz[] = {8192, 1u << 20};
    for (size_t z = 0; z < 2; z++)
        for (size_t r = 0; r < sizeof(nr) / sizeof(nr[0]); r++) {
            tdm_cuda_kv_map_t m;
            tdm_cuda_page_run_t runs[8];
            double t[2][BENCH_REPS];
            memset(&m, 0, sizeof(m));
            m.num_layers = m.n_sub = 1;
            m.page_stride[0] = sz[z];
            for (uint32_t i = 0; i < nr[r]; i++)
                runs[i] = (tdm_cuda_page_run_t){i, 2 * i, 1};
            int good = 1;
            for (int way = 0; way < 2; way++)
                for (int k = -1; k < BENCH_REPS && good; k++) {
                    uint64_t t0 = tdm_time_mono_ns();
                    cudaError_t e = cudaErrorNotReady;
                    for (uint32_t i = 0; way == 0 && i < nr[r]; i++)
                        good &= cudaMemcpyAsync(dst + 2 * i * sz[z], src + i * sz[z], sz[z],
                                                cudaMemcpyDeviceToDevice, s) == cudaSuccess;
                    if (way == 1)
                        good &= tdm_cuda_kv_gather(src, dst, &m, runs, nr[r], s, NULL) == TDM_OK;
                    good &= cudaEventRecord(done, s) == cudaSuccess;
                    while (good && (e = cudaEventQuery(done)) == cudaErrorNotReady)
                        ;
                    good &= e == cudaSuccess;
                    if (k >= 0)
                        t[way][k] = (double)(tdm_time_mono_ns() - t0) / 1e3;
                }
            if (good)
                diag("bench threshold runs=%u run_bytes=%llu copies_wall_us=%.2f "
                     "kernel_wall_us=%.2f",
                     nr[r], (unsigned long long)sz[z], median(t[0], BENCH_REPS),
                     median(t[1], BENCH_REPS));
        }
}

/* Host cost of one call, ns: the median over 5 batches of each batch's mean (n calls a batch,
 * the stream synchronised between batches so no queue fills). what: 0 cudaGetDevice, 1
 * cudaSetDevice (the current device), 2 cudaDeviceGetAttribute, 3 cudaEventQuery (completed),
 * 4 cudaEventRecord, 5 cudaMemcpyAsync D2D of 16 bytes, 6 the gather of one 16-byte run,
 * 7 tdm_xfer_cuda_copy of a one-page room (64 regions of 8 KiB). */
static double api_ns(int what, peer_t *p, uint8_t *dst, cudaStream_t s, cudaEvent_t done,
                     uint32_t n)
{
    double mean[5];
    tdm_cuda_kv_map_t m;
    tdm_cuda_page_run_t run = {0, 1, 1};
    static const uint32_t sp = 0, dp = 1;
    int dev = 0, v = 0, good = cudaGetDevice(&dev) == cudaSuccess;
    memset(&m, 0, sizeof(m));
    m.num_layers = m.n_sub = 1;
    m.page_stride[0] = 16;
    if (cudaEventRecord(done, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
        return -1;
    for (int b = 0; b < 5; b++) {
        uint64_t t0 = tdm_time_mono_ns();
        for (uint32_t k = 0; k < n && good; k++)
            switch (what) {
            case 0:
                good = cudaGetDevice(&dev) == cudaSuccess;
                break;
            case 1:
                good = cudaSetDevice(dev) == cudaSuccess;
                break;
            case 2:
                good =
                    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess;
                break;
            case 3:
                good = cudaEventQuery(done) == cudaSuccess;
                break;
            case 4:
                good = cudaEventRecord(done, s) == cudaSuccess;
                break;
            case 5:
                good = cudaMemcpyAsync(dst, p->src.base, 16, cudaMemcpyDeviceToDevice, s) ==
                       cudaSuccess;
                break;
            case 6:
                good = tdm_cuda_kv_gather(p->src.base, dst, &m, &run, 1, s, NULL) == TDM_OK;
                break;
            default:
                good = tdm_xfer_cuda_copy(p->c, 0, &p->src, &sp, &dp, 1, NULL, NULL) == TDM_OK;
                break;
            }
        mean[b] = (double)(tdm_time_mono_ns() - t0) / n;
        good = good && cudaStreamSynchronize(s) == cudaSuccess &&
               cudaStreamSynchronize((cudaStream_t)tdm_xfer_cuda_stream(p->c)) == cudaSuccess;
    }
    return good ? median(mean, 5) : -1;
}

/* The host costs of the calls a room and the anchor make, per gather variant where it differs. */
static void bench_api(peer_t *p, uint8_t *dst, cudaStream_t s, cudaEvent_t done)
{
    static const char *name[] = {"cudaGetDevice",       "cudaSetDevice",   "cudaDeviceGetAttribute",
                                 "cudaEventQuery_done", "cudaEventRecord", "cudaMemcpyAsync_16B"};
    char line[1024];
    int o = 0;
    for (int w = 0; w < 6; w++)
        o += snprintf(line + o, sizeof(line) - (size_t)o, " %s=%.0f", name[w],
                      api_ns(w, p, dst, s, done, w < 4 ? 2000 : 100));
    diag("bench api_ns%s", line);
    static const int vs[] = {0, 1, 2};
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        tdm_cuda_kv_gather_variant = vs[i];
        diag("bench api_ns variant=%d gather_1run_16B=%.0f xfer_cuda_copy_1page=%.0f", vs[i],
             api_ns(6, p, dst, s, done, 100), api_ns(7, p, dst, s, done, 100));
    }
    tdm_cuda_kv_gather_variant = 0;
}

/* Ratios (anchor / room) of one variant: per way and timing their minimum over sizes, and all. */
static double bench_min(double (*t)[3][2], double min[2][2])
{
    double all = 1e9;
    for (int w = 0; w < 2; w++)
        for (int h = 0; h < 2; h++)
            min[w][h] = 1e9;
    for (int z = 0; z < 10; z++)
        for (int w = 0; w < 2; w++)
            for (int h = 0; h < 2; h++) {
                double r = t[z][1 + w][h] > 0 ? t[z][0][h] / t[z][1 + w][h] : 0;
                min[w][h] = r < min[w][h] ? r : min[w][h];
                all = r < all ? r : all;
            }
    return all;
}

#define BENCH_RUNS_MAX 16

/* With TDM_BENCH_OUT set (tools/device-run.sh): the first variant-0 run's table as
 * $TDM_BENCH_OUT/transfer_cuda.json, every run's minima in its "ab" list. */
static void bench_json(int n_runs, const int *variant, double (*res)[10][3][2], uint64_t page,
                       const struct cudaDeviceProp *prop)
{
    static const char *way[] = {"contiguous", "scattered"}, *how[] = {"gpu", "wall"};
    const char *dir = getenv("TDM_BENCH_OUT");
    char path[4096];
    FILE *f = NULL;
    int k0 = 0;
    double min[2][2];
    while (k0 < n_runs && variant[k0] != 0)
        k0++;
    if (k0 == n_runs || !dir ||
        snprintf(path, sizeof(path), "%s/transfer_cuda.json", dir) >= (int)sizeof(path) ||
        !(f = fopen(path, "w")))
        return;
    double(*t)[3][2] = res[k0];
    double all = bench_min(t, min);
    fprintf(f,
            "{\n \"bench\": \"transfer_cuda\",\n \"source\": \"tests/gpu/test-xfer-cuda\",\n"
            " \"gpu\": \"%s\",\n \"sms\": %d,\n \"l2_bytes\": %d,\n"
            " \"geometry\": \"bf16, 32 layers, 2 kv heads x 128, page 16 tokens: a page is 64 "
            "regions of 8 KiB\",\n \"page_chunk_bytes\": %llu,\n"
            " \"room\": \"tdm_xfer_cuda_copy of n pages into decode's pool (another process, "
            "cudaIpcOpenMemHandle), then its fence, poll and free; contiguous i -> i, scattered "
            "i -> 2i\",\n"
            " \"anchor\": \"one local cudaMemcpyAsync D2D of the same bytes, then an event "
            "record and cudaEventQuery until done\",\n"
            " \"timing\": {\"gpu\": \"GPU events around each rep on its stream, reps queued "
            "behind a held stream (device time only)\", \"wall\": \"host wall from the call to "
            "the completed event\", \"reps\": %d, \"statistic\": \"median\"},\n"
            " \"caches\": \"source and destination rotated over 512 MiB on both sides\",\n"
            " \"sizes\": [\n",
            prop->name, prop->multiProcessorCount, prop->l2CacheSize, (unsigned long long)page,
            BENCH_REPS);
    for (int z = 0; z < 10; z++) {
        fprintf(f, "  {\"bytes\": %llu, \"anchor_gpu_us\": %.2f, \"anchor_wall_us\": %.2f",
                (unsigned long long)(page << z), t[z][0][0], t[z][0][1]);
        for (int w = 0; w < 2; w++)
            for (int h = 0; h < 2; h++)
                fprintf(f, ", \"%s_%s_us\": %.2f, \"ratio_%s_%s\": %.3f", way[w], how[h],
                        t[z][1 + w][h], way[w], how[h],
                        t[z][1 + w][h] > 0 ? t[z][0][h] / t[z][1 + w][h] : 0.0);
        fprintf(f, "}%s\n", z < 9 ? "," : "");
    }
    fprintf(f,
            " ],\n \"min_ratio\": {\"contiguous_gpu\": %.3f, \"contiguous_wall\": %.3f, "
            "\"scattered_gpu\": %.3f, \"scattered_wall\": %.3f},\n \"ratio_vs_cudamemcpy\": %.3f,\n"
            " \"ratio_target\": 0.8,\n \"ratio_met\": %s,\n \"ab\": [\n",
            min[0][0], min[0][1], min[1][0], min[1][1], all, all >= 0.8 ? "true" : "false");
    for (int k = 0; k < n_runs; k++) {
        double a = bench_min(res[k], min);
        fprintf(f,
                "  {\"order\": %d, \"variant\": %d, \"contiguous_gpu\": %.3f, \"contiguous_wall\": "
                "%.3f, \"scattered_gpu\": %.3f, \"scattered_wall\": %.3f, \"all\": %.3f}%s\n",
                k, variant[k], min[0][0], min[0][1], min[1][0], min[1][1], a,
                k + 1 < n_runs ? "," : "");
    }
    fprintf(f, " ]\n}\n");
    fclose(f);
}

/* Rooms of 1..512 pages (512 KiB..256 MiB), contiguous and every other page, against the anchor;
 * both timings; every page of every timed room checked. Once per gather variant in
 * TDM_XFER_BENCH_VARIANTS (a comma list, default "0": xfer_ops.h lists them), in that order. */
static void bench_ipc(peer_t *p)
{
    static uint32_t sp[SRC_PAGES], dc[SRC_PAGES], ds[SRC_PAGES];
    static double res[BENCH_RUNS_MAX][10][3][2]; /* run, size, anchor/contig/scattered, gpu/wall */
    const tdm_kv_layout_t *l = p->src.layout;
    const uint64_t page = (uint64_t)l->num_layers * (l->sub[0].page_stride + l->sub[1].page_stride);
    uint8_t *a_dst = NULL;
    cudaStream_t as = NULL;
    cudaEvent_t ev[BENCH_REPS + 1] = {0}, done = NULL;
    struct cudaDeviceProp prop;
    int variant[BENCH_RUNS_MAX], n_runs = 0;
    const char *list = getenv("TDM_XFER_BENCH_VARIANTS");
    for (const char *q = list && *list ? list : "0"; *q && n_runs < BENCH_RUNS_MAX;) {
        char *e = NULL;
        long v = strtol(q, &e, 10);
        if (e == q || v < 0 || v > 2)
            break;
        variant[n_runs++] = (int)v;
        q = *e == ',' ? e + 1 : e;
    }
    int good = n_runs > 0 && cudaMalloc((void **)&a_dst, SRC_PAGES * page) == cudaSuccess &&
               cudaStreamCreateWithFlags(&as, cudaStreamNonBlocking) == cudaSuccess &&
               cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess &&
               cudaGetDeviceProperties(&prop, 0) == cudaSuccess;
    for (int k = 0; k <= BENCH_REPS; k++)
        good = good && cudaEventCreate(&ev[k]) == cudaSuccess;
    for (uint32_t i = 0; i < SRC_PAGES; i++) {
        sp[i] = dc[i] = i;
        ds[i] = 2 * i;
    }
    int timed = 0, checked = 0, verified = 0;
    if (good) {
        diag(
            "bench gpu=\"%s\" sms=%d l2_bytes=%d page_chunk_bytes=%llu reps=%d rotation_bytes=%llu",
            prop.name, prop.multiProcessorCount, prop.l2CacheSize, (unsigned long long)page,
            BENCH_REPS, (unsigned long long)(SRC_PAGES * page));
        bench_api(p, a_dst, as, done);
    }
    for (int k = 0; good && k < n_runs; k++) {
        tdm_cuda_kv_gather_variant = variant[k];
        for (uint32_t n = 1, size = 0; n <= 512; n *= 2, size++) {
            double(*t)[2] = res[k][size];
            bop_t o = {p, 0, n, SRC_PAGES / n, n * page, a_dst, as, sp, dc, ds};
            timed += time_both(&o, ev, done, &t[0][0], &t[0][1]) == 0;
            for (int kind = 1; kind <= 2; kind++) {
                o.kind = kind;
                o.s = (cudaStream_t)tdm_xfer_cuda_stream(p->c);
                int zero = peer_zero(p);
                timed += time_both(&o, ev, done, &t[kind][0], &t[kind][1]) == 0;
                uint32_t used = (o.nslots < BENCH_REPS ? o.nslots : BENCH_REPS) * n;
                uint32_t untouched[2] = {used, 2 * used - 1};
                if (kind == 2)
                    untouched[0] = 1;
                int bad = peer_check(p, sp, kind == 1 ? dc : ds, used, untouched,
                                     kind == 1 && used >= DEC_PAGES ? 0 : (kind == 1 ? 1 : 2));
                checked++;
                verified += zero == 0 && bad == 0;
                if (zero != 0 || bad != 0)
                    diag("bench kvg variant=%d bytes=%llu %s: %d pages differ", variant[k],
                         (unsigned long long)(n * page), kind == 1 ? "contiguous" : "scattered",
                         bad);
            }
            diag("bench kvg run=%d variant=%d bytes=%llu pages=%u anchor_ev_us=%.2f "
                 "anchor_wall_us=%.2f contiguous_ev_us=%.2f contiguous_wall_us=%.2f "
                 "scattered_ev_us=%.2f scattered_wall_us=%.2f",
                 k, variant[k], (unsigned long long)(n * page), n, t[0][0], t[0][1], t[1][0],
                 t[1][1], t[2][0], t[2][1]);
        }
        double min[2][2], all = bench_min(res[k], min);
        diag("bench kvg run=%d variant=%d min_ratio contiguous_gpu=%.3f contiguous_wall=%.3f "
             "scattered_gpu=%.3f scattered_wall=%.3f all=%.3f",
             k, variant[k], min[0][0], min[0][1], min[1][0], min[1][1], all);
    }
    tdm_cuda_kv_gather_variant = 0;
    if (good) {
        bench_json(n_runs, variant, res, page, &prop);
        bench_threshold(p->src.base, a_dst, as, done);
    }
    ok(good && timed == n_runs * 10 * 3 && verified == checked,
       "benchmark: %d of %d timings (%d gather variants), %d of %d timed rooms with every page "
       "checked",
       timed, n_runs * 10 * 3, n_runs, verified, checked);
    for (int k = 0; k <= BENCH_REPS; k++)
        if (ev[k])
            cudaEventDestroy(ev[k]);
    if (done)
        cudaEventDestroy(done);
    if (as)
        cudaStreamDestroy(as);
    cudaFree(a_dst);
}

/* Rooms through tdm_xfer_cuda_copy into the other process's pool, checked page by page. */
static void test_ipc_rooms(peer_t *p)
{
    static uint32_t sp[SRC_PAGES], dp[SRC_PAGES];
    uint32_t untouched[4];
    /* six rooms in flight: 20 pages each, scattered differently, queued back to back */
    int zero = peer_zero(p), queued = 0, bad = 0;
    for (uint32_t t = 0; t < 6; t++)
        for (uint32_t i = 0; i < 20; i++) {
            sp[20 * t + i] = 37 * t + i;
            dp[20 * t + i] = DEC_PAGES - 1 - 3 * (20 * t + i); /* downwards, every third */
        }
    for (uint32_t t = 0; t < 6; t++)
        queued += tdm_xfer_cuda_copy(p->c, 0, &p->src, sp + 20 * t, dp + 20 * t, 20, NULL, NULL) ==
                  TDM_OK;
    void *ev = NULL;
    int done = -1;
    if (tdm_xfer_cuda_fence(p->c, -1, &ev) == TDM_OK) {
        while ((done = tdm_xfer_cuda_fence_poll(p->c, ev)) == 0)
            ;
        tdm_xfer_cuda_fence_free(p->c, ev);
    }
    untouched[0] = DEC_PAGES - 2;
    untouched[1] = DEC_PAGES - 3;
    bad = peer_check(p, sp, dp, 120, untouched, 2);
    ok(zero == 0 && queued == 6 && done == 1 && bad == 0,
       "6 rooms of 20 scattered pages in flight at once (one run list reused for each): all 120 "
       "pages land (%d differ), the pages between them stay zero",
       bad);

    /* the fence behind 2 GiB of rooms: pending right after the call, then every page there */
    for (uint32_t i = 0; i < 512; i++) {
        sp[i] = i;
        dp[i] = 2 * i;
    }
    zero = peer_zero(p);
    queued = 0;
    uint64_t t0 = tdm_time_mono_ns();
    for (int k = 0; k < 8; k++)
        queued += tdm_xfer_cuda_copy(p->c, 0, &p->src, sp, dp, 512, NULL, NULL) == TDM_OK;
    int first = -2;
    if (tdm_xfer_cuda_fence(p->c, -1, &ev) == TDM_OK) {
        first = tdm_xfer_cuda_fence_poll(p->c, ev);
        while ((done = tdm_xfer_cuda_fence_poll(p->c, ev)) == 0)
            ;
        tdm_xfer_cuda_fence_free(p->c, ev);
    }
    double ms = (tdm_time_mono_ns() - t0) / 1e6;
    untouched[0] = 1;
    untouched[1] = 1023;
    bad = peer_check(p, sp, dp, 512, untouched, 2);
    ok(zero == 0 && queued == 8 && first == 0 && done == 1 && bad == 0,
       "8 rooms of 256 MiB (every other page) queued: the fence is pending right after the call "
       "(%d), completes after %.2f ms, and then all 512 pages are there (%d differ), odd pages "
       "zero",
       first, ms, bad);

    /* the per-run copies (the gather disabled) */
    uint32_t keep = xfer_cuda_gather_min_runs;
    xfer_cuda_gather_min_runs = UINT32_MAX;
    zero = peer_zero(p);
    for (uint32_t i = 0; i < 8; i++) {
        sp[i] = 100 + (i < 4 ? i : 2 * i); /* a run of 4, then every other */
        dp[i] = 500 + (i < 4 ? i : 3 * i);
    }
    int r = room_sync(p->c, &p->src, sp, dp, 8);
    xfer_cuda_gather_min_runs = keep;
    untouched[0] = 504;
    bad = peer_check(p, sp, dp, 8, untouched, 1);
    ok(zero == 0 && r == 0 && bad == 0,
       "the gather disabled: 8 pages by one cudaMemcpyAsync per run, every page there (%d "
       "differ)",
       bad);
}

static void test_ipc(int rfd, int wfd)
{
    tdm_kv_layout_t l;
    tdm_kv_pool_t *hp = NULL, *zp = NULL;
    tdm_kv_buffers_t sb;
    uint64_t bytes, rbytes;
    uint8_t rec[XFER_CUDA_REC_BYTES];
    xfer_cuda_t *c = NULL;
    /* sources: a run of 5 onto a run, then scattered; the last page id is never written */
    const uint32_t src[N_COPY] = {3, 4, 5, 6, 7, 20, 9, 31, 0, 15, 16, 2};
    const uint32_t dst[N_COPY + 1] = {10, 11, 12, 13, 14, 40, 2, 63, 1, 50, 51, 30, 33};
    if (rd_all(rfd, rec, sizeof(rec)) || serving_layout(&l) ||
        tdm_kv_pool_init(&l, NPAGES, &hp) != TDM_OK || tdm_kv_pool_init(&l, 1, &zp) != TDM_OK ||
        tdm_xfer_cuda_init(1, &c) != TDM_OK) {
        ok(0, "IPC setup");
        return;
    }
    const tdm_kv_buffers_t *hb = tdm_kv_pool_buffers(hp);
    tdm_kv_layout_pool_bytes(&l, NPAGES, &bytes);
    fill_random64(hb->base, bytes);
    if (dev_pool(&l, NPAGES, hb, &sb, &bytes) != 0) {
        ok(0, "source pool");
        return;
    }
    tdm_kv_layout_pool_bytes(&l, DEC_PAGES, &rbytes);
    ok(tdm_xfer_cuda_record_check(rec, sizeof(rec), rbytes, NULL, 0) == 0,
       "the other process's record checks for its %u pages", DEC_PAGES);
    tdm_status_t st = tdm_xfer_cuda_open(c, 0, rec, sizeof(rec), DEC_PAGES);
    ok(st == TDM_OK, "cudaIpcOpenMemHandle of the other process's pool: %s", tdm_status_str(st));
    uint64_t moved = 0, copies = 0;
    uint32_t far[1] = {DEC_PAGES};
    ok(tdm_xfer_cuda_copy(c, 0, &sb, src, far, 1, &moved, &copies) == TDM_ERR_RANGE && moved == 0,
       "a destination page past decode's pool is refused before any copy");
    st = tdm_xfer_cuda_copy(c, 0, &sb, src, dst, N_COPY, &moved, &copies);
    /* per (layer, sub) 7 runs: 3..7 → 10..14 and 15..16 → 50..51 coalesce, 5 single pages; over
     * xfer_cuda_gather_min_runs: one gather kernel into the IPC mapping */
    ok(st == TDM_OK && copies == (uint64_t)l.num_layers * l.n_sub * 7 &&
           moved == (uint64_t)N_COPY * l.num_layers * (l.sub[0].page_stride + l.sub[1].page_stride),
       "copies queued: %llu region runs (pages coalesced), %llu bytes", (unsigned long long)copies,
       (unsigned long long)moved);
    void *ev = NULL;
    int done = -2;
    if (tdm_xfer_cuda_fence(c, -1, &ev) == TDM_OK)
        for (int spin = 0; spin < 100000 && (done = tdm_xfer_cuda_fence_poll(c, ev)) == 0; spin++)
            usleep(100);
    ok(done == 1, "the fence event completes");
    tdm_xfer_cuda_fence_free(c, ev);
    uint64_t want[N_COPY + 1], got[N_COPY + 1];
    for (uint32_t i = 0; i < N_COPY; i++)
        want[i] = tdm_xfer_page_sum(hb, src[i]);
    want[N_COPY] = tdm_xfer_page_sum(tdm_kv_pool_buffers(zp), 0);
    peer_t p = {rfd, wfd, c, sb, want[N_COPY]};
    int io = peer_sums(&p, dst, N_COPY + 1, got);
    ok(!io && memcmp(want, got, sizeof(uint64_t) * N_COPY) == 0,
       "the other process's GPU checksums of the %u destination pages == the CPU's of the sources",
       N_COPY);
    ok(!io && got[N_COPY] == want[N_COPY], "a page not written stays zero");
    cudaFree(sb.base);
    tdm_kv_pool_free(hp);
    tdm_kv_pool_free(zp);
    /* the 512 MiB source of the rooms below and the benchmark: random, 64 MiB at a time */
    uint8_t *chunk = malloc(64u << 20);
    int filled = chunk && dev_pool(&l, SRC_PAGES, NULL, &p.src, &bytes) == 0;
    for (uint64_t o = 0; filled && o < bytes; o += 64u << 20) {
        size_t k = bytes - o < (64u << 20) ? (size_t)(bytes - o) : (64u << 20);
        fill_random64(chunk, (k + 7) & ~(size_t)7);
        filled = cudaMemcpy(p.src.base + o, chunk, k, cudaMemcpyHostToDevice) == cudaSuccess;
    }
    free(chunk);
    if (!filled) {
        ok(0, "the %u-page source pool", SRC_PAGES);
    } else {
        test_ipc_rooms(&p);
        bench_ipc(&p);
    }
    cudaFree(p.src.base);
    tdm_xfer_cuda_close(c, 0);
    tdm_xfer_cuda_free(c);
}

int main(void)
{
    int p2c[2], c2p[2];
    uint8_t have = 0;
    if (pipe(p2c) || pipe(c2p)) {
        printf("Bail out! pipe\n");
        return 1;
    }
    pid_t pid = fork(); /* before either process touches CUDA */
    if (pid == 0) {
        close(p2c[1]);
        close(c2p[0]);
        _exit(child_main(p2c[0], c2p[1]));
    }
    close(p2c[0]);
    close(c2p[1]);
    if (pid < 0 || rd_all(c2p[0], &have, 1) || !have) {
        if (pid > 0)
            waitpid(pid, NULL, 0);
        skip_all("no CUDA device (or the device pool could not be exported)");
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        skip_all("built for sm_90a only");
    }
    xfer_cuda_t *c = NULL;
    tdm_status_t st = tdm_xfer_cuda_init(1, &c);
    ok(st == TDM_OK, "context on %s", prop.name);
    if (st == TDM_OK) {
        test_xxh64();
        test_page_sums(c, TDM_DTYPE_BF16, 16);
        test_page_sums(c, TDM_DTYPE_FP8_E4M3, 3);
        test_record_check(c);
        for (int v = 0; v <= 2; v++)
            test_kv_gather(v);
        tdm_cuda_kv_gather_variant = 0;
        tdm_xfer_cuda_free(c);
    }
    /* compute-sanitizer (tools/device-run.sh) and CUDA IPC between two processes do not mix:
     * memcheck covers the kernels and copies above; the IPC part runs in the plain run */
    if (!getenv("TDM_UNDER_SANITIZER"))
        test_ipc(c2p[0], p2c[1]);
    close(p2c[1]); /* the child's end of input: it exits */
    int status = 0;
    waitpid(pid, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the decode process exited cleanly");
    return done_testing();
}
