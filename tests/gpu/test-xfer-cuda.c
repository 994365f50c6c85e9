/*
 * test-xfer-cuda.c — the GPU side of the PD transfer (dataplane/xfer/cuda_ipc.h,
 * kernels/cuda/xfer_ops.h) against the CPU:
 *  - XXH64 on the GPU == libxxhash's (tdm_hash_xxh64) for every length 0..300 and larger ones,
 *    at every misalignment 0..7 and several seeds;
 *  - per-page checksums of a device pool == xfer_page_sum (checksum.c) of the same bytes on the
 *    host, for bf16 and fp8 layouts (fp8 at page size 3: 24-byte scale segments, the
 *    short-input path of XXH64), and a one-byte flip on the device changes exactly that page's
 * checksum and flipping it back restores it;
 *  - CUDA IPC across two processes: a child (forked before either touches CUDA) owns a "decode"
 *    pool and exports its record; the parent opens it, copies pages (runs and scattered) device
 *    to device (runs of pages coalesced), fences, and the child's checksums over its own pool equal
 * the parent's CPU ones for the destinations while a page not written stays zero;
 *  - the gather kernel copies a list of segments byte-exact: page-sized and longer ones, equally
 *    misaligned source and destination (vector body, byte head and tail), differently misaligned
 *    ones (bytes), odd and zero lengths, nothing outside the segments written;
 *  - malformed records are refused naming the field.
 * Without a device it skips with the reason; under compute-sanitizer (TDM_UNDER_SANITIZER) the
 * two-process IPC part is left out.
 */
#include "config.h"

#include <signal.h>
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

static int make_layout(tdm_dtype_t dt, uint32_t page_size, tdm_kv_layout_t *l)
{
    tdm_model_config_t mc;
    memset(&mc, 0, sizeof(mc));
    mc.num_layers = 3;
    mc.num_kv_heads = 2;
    mc.head_dim = 64;
    return tdm_kv_layout_init(&mc, dt, page_size, 1, 0, l) == TDM_OK ? 0 : -1;
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
        cpu[i] = xfer_page_sum(hb, pages[i]);
    }
    tdm_status_t st = xfer_cuda_page_sums(c, &db, pages, NPAGES, gpu);
    ok(st == TDM_OK && memcmp(cpu, gpu, sizeof(cpu)) == 0,
       "%s page %u (%u sub-buffers, strides %llu/%llu): GPU page checksums == xfer_page_sum on "
       "%u pages",
       tdm_dtype_name(dt), page_size, l.n_sub, (unsigned long long)l.sub[0].page_stride,
       (unsigned long long)l.sub[l.n_sub - 1].page_stride, NPAGES);
    /* flip one byte of page pages[5]'s last layer V */
    uint8_t *p = tdm_kv_slot(&db, l.num_layers - 1, TDM_KV_SUB_V, pages[5], page_size - 1) + 1;
    st = xfer_cuda_flip(c, p, 0x40);
    tdm_status_t st2 = xfer_cuda_page_sums(c, &db, pages, NPAGES, again);
    int only5 = st == TDM_OK && st2 == TDM_OK;
    for (uint32_t i = 0; i < NPAGES && only5; i++)
        if ((again[i] != cpu[i]) != (i == 5))
            only5 = 0;
    ok(only5, "%s: a flipped device byte changes exactly its page's checksum", tdm_dtype_name(dt));
    st = xfer_cuda_flip(c, p, 0x40);
    st2 = xfer_cuda_page_sums(c, &db, pages, NPAGES, again);
    ok(st == TDM_OK && st2 == TDM_OK && memcmp(cpu, again, sizeof(cpu)) == 0,
       "%s: flipped back, the checksums are the CPU's again", tdm_dtype_name(dt));
    cudaFree(db.base);
    tdm_kv_pool_free(hp);
}

/* Segments (src_off, dst_off, bytes) through the kernel == the same memcpys on the host. */
static void test_gather(void)
{
    enum { SRC = 1u << 20, DST = 1u << 20 };
    static const tdm_cuda_seg_t segs[] = {
        {0, 65536, 4096},         /* a page, 16-aligned both */
        {8192, 4096, 4096},       /* scattered pages, backwards */
        {4096, 131072, 4096},     /* */
        {200000, 300000, 100000}, /* longer than one block's pass, 16-aligned */
        {500003, 600003, 40001},  /* equally misaligned: byte head, vectors, byte tail */
        {700001, 700002, 33333},  /* differently misaligned: bytes */
        {12345, 12, 15},          /* shorter than a vector */
        {777, 999, 1},            /* one byte */
        {1000, 2000, 0},          /* nothing */
        {SRC - 17, DST - 17, 17}, /* the very end of both buffers */
        {4096 * 3 + 8, 4096 * 5 + 8, 4096 + 8}, /* 8-aligned, not 16 */
    };
    const uint32_t n = sizeof(segs) / sizeof(segs[0]);
    uint8_t *h_src = malloc(SRC), *want = calloc(1, DST), *got = malloc(DST);
    uint8_t *d_src = NULL, *d_dst = NULL;
    tdm_cuda_seg_t *d_segs = NULL;
    int ok_cuda = h_src && want && got && cudaMalloc((void **)&d_src, SRC) == cudaSuccess &&
                  cudaMalloc((void **)&d_dst, DST) == cudaSuccess &&
                  cudaMalloc((void **)&d_segs, sizeof(segs)) == cudaSuccess;
    if (ok_cuda) {
        fill_random(h_src, SRC);
        for (uint32_t i = 0; i < n; i++)
            memcpy(want + segs[i].dst_off, h_src + segs[i].src_off, segs[i].bytes);
        ok_cuda = cudaMemcpy(d_src, h_src, SRC, cudaMemcpyHostToDevice) == cudaSuccess &&
                  cudaMemset(d_dst, 0, DST) == cudaSuccess &&
                  cudaMemcpy(d_segs, segs, sizeof(segs), cudaMemcpyHostToDevice) == cudaSuccess;
    }
    tdm_status_t st = ok_cuda ? tdm_cuda_gather_copy(d_src, d_dst, d_segs, n, 0) : TDM_ERR_CUDA;
    ok_cuda = st == TDM_OK && cudaDeviceSynchronize() == cudaSuccess &&
              cudaMemcpy(got, d_dst, DST, cudaMemcpyDeviceToHost) == cudaSuccess;
    size_t first_bad = DST;
    for (size_t i = 0; ok_cuda && i < DST && first_bad == DST; i++)
        if (got[i] != want[i])
            first_bad = i;
    ok(ok_cuda && first_bad == DST,
       "gather kernel: %u segments (pages, 100 KB, misaligned equally and not, 15/1/0/17 bytes) "
       "byte-exact over the whole 1 MiB destination (%s; first difference at %zu)",
       n, tdm_status_str(st), first_bad);
    ok(tdm_cuda_gather_copy(NULL, d_dst, d_segs, 1, 0) == TDM_ERR_INVAL &&
           tdm_cuda_gather_copy(NULL, NULL, NULL, 0, 0) == TDM_OK,
       "gather: a missing pointer refused, an empty list a no-op");
    cudaFree(d_segs);
    cudaFree(d_dst);
    cudaFree(d_src);
    free(got);
    free(want);
    free(h_src);
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
    ok(xfer_cuda_export(c, &db, rec) == TDM_OK &&
           xfer_cuda_record_check(rec, sizeof(rec), bytes, why, sizeof(why)) == 0,
       "exported record passes the check");
    memcpy(bad, rec, sizeof(bad));
    bad[0] ^= 1;
    ok(xfer_cuda_record_check(bad, sizeof(bad), bytes, why, sizeof(why)) == 1 &&
           strstr(why, "magic"),
       "bad magic refused: '%s'", why);
    memcpy(bad, rec, sizeof(bad));
    bad[4] = 2;
    ok(xfer_cuda_record_check(bad, sizeof(bad), bytes, why, sizeof(why)) == 1 &&
           strstr(why, "version"),
       "version 2 refused: '%s'", why);
    ok(xfer_cuda_record_check(rec, sizeof(rec) - 1, bytes, why, sizeof(why)) == 1 &&
           strstr(why, "length"),
       "short record refused: '%s'", why);
    ok(xfer_cuda_record_check(rec, sizeof(rec), bytes + 4096, why, sizeof(why)) == 1 &&
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

#define DEC_PAGES 1024u /* 24 MiB: room for the timing below */
#define BENCH_PAGES 512u
#define N_COPY 12u

/* The decode side: a zeroed pool, its record out, then checksums of the pages it is told. */
static int child_main(int rfd, int wfd)
{
    int n = 0;
    uint8_t ok_b = 0;
    tdm_kv_layout_t l;
    tdm_kv_buffers_t db;
    uint64_t bytes;
    xfer_cuda_t *c = NULL;
    uint8_t rec[XFER_CUDA_REC_BYTES];
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || make_layout(TDM_DTYPE_BF16, 16, &l) ||
        dev_pool(&l, DEC_PAGES, NULL, &db, &bytes) || xfer_cuda_init(1, &c) != TDM_OK ||
        xfer_cuda_export(c, &db, rec) != TDM_OK) {
        wr_all(wfd, &ok_b, 1);
        return 0;
    }
    ok_b = 1;
    if (wr_all(wfd, &ok_b, 1) || wr_all(wfd, rec, sizeof(rec)))
        return 1;
    uint32_t pages[N_COPY + 1];
    uint64_t sums[N_COPY + 1];
    if (rd_all(rfd, pages, sizeof(pages))) {
        /* the parent leaves IPC out (under compute-sanitizer): nothing more to do */
        xfer_cuda_free(c);
        cudaFree(db.base);
        return 0;
    }
    if (xfer_cuda_page_sums(c, &db, pages, N_COPY + 1, sums) != TDM_OK)
        memset(sums, 0, sizeof(sums));
    if (wr_all(wfd, sums, sizeof(sums)))
        return 1;
    rd_all(rfd, &ok_b, 1); /* the parent closed its mapping */
    xfer_cuda_free(c);
    cudaFree(db.base);
    return 0;
}

/* Seconds per room of n pages copied into the peer pool and fenced (median-free mean of reps). */
static double time_room(xfer_cuda_t *c, const tdm_kv_buffers_t *src, const uint32_t *sp,
                        const uint32_t *dp, uint32_t n, int reps, uint64_t *ret_copies)
{
    uint64_t bytes = 0, copies = 0;
    double t0 = 0;
    for (int i = -1; i < reps; i++) { /* i = -1: warm-up */
        void *ev = NULL;
        if (i == 0)
            t0 = (double)tdm_time_mono_ns();
        if (xfer_cuda_copy(c, 0, src, sp, dp, n, &bytes, &copies) != TDM_OK ||
            xfer_cuda_fence(c, -1, &ev) != TDM_OK)
            return -1;
        while (xfer_cuda_fence_poll(c, ev) == 0)
            ;
        xfer_cuda_fence_free(c, ev);
    }
    *ret_copies = copies / (uint64_t)(reps + 1);
    return ((double)tdm_time_mono_ns() - t0) / 1e9 / reps;
}

/* A room by the copies (one per run) or by the gather kernel: xfer_cuda_copy with its threshold
 * forced. */
static double time_path(xfer_cuda_t *c, const tdm_kv_buffers_t *src, const uint32_t *sp,
                        const uint32_t *dp, uint32_t n, int reps, int gather, uint64_t *ret_runs)
{
    uint32_t keep = xfer_cuda_gather_min_runs;
    xfer_cuda_gather_min_runs = gather ? 0 : UINT32_MAX;
    double t = time_room(c, src, sp, dp, n, reps, ret_runs);
    xfer_cuda_gather_min_runs = keep;
    return t;
}

/* Timing (notes only, read from the device run): a 512-page room into the other process's pool,
 * contiguous (one copy per layer and sub-buffer) and every other page (one per page) by copies,
 * every other page and contiguous by the gather kernel, against the anchor: one local
 * device-to-device copy of the same bytes. Then small rooms of every other page both ways: where
 * the gather starts to win (xfer_cuda_gather_min_runs). */
static void bench_ipc(xfer_cuda_t *c, const tdm_kv_layout_t *l)
{
    tdm_kv_buffers_t src;
    uint64_t bytes, copies_c = 0, copies_s = 0, runs_g = 0, runs_gc = 0, r1 = 0;
    static uint32_t sp[BENCH_PAGES], dc[BENCH_PAGES], ds[BENCH_PAGES];
    void *anchor = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = 0;
    char sweep[256] = "";
    if (dev_pool(l, BENCH_PAGES, NULL, &src, &bytes) != 0) {
        ok(0, "bench pool");
        return;
    }
    for (uint32_t i = 0; i < BENCH_PAGES; i++) {
        sp[i] = i;
        dc[i] = i;
        ds[i] = 2 * i; /* < DEC_PAGES */
    }
    double tc = time_path(c, &src, sp, dc, BENCH_PAGES, 20, 0, &copies_c);
    double ts = time_path(c, &src, sp, ds, BENCH_PAGES, 5, 0, &copies_s);
    double tg = time_path(c, &src, sp, ds, BENCH_PAGES, 20, 1, &runs_g);
    double tgc = time_path(c, &src, sp, dc, BENCH_PAGES, 20, 1, &runs_gc);
    static const uint32_t small[] = {1, 2, 4, 8, 32};
    int sweep_ok = 1;
    for (size_t k = 0; k < sizeof(small) / sizeof(small[0]); k++) {
        double a = time_path(c, &src, sp, ds, small[k], 50, 0, &r1);
        double b = time_path(c, &src, sp, ds, small[k], 50, 1, &r1);
        size_t o = strlen(sweep);
        sweep_ok &= a > 0 && b > 0;
        snprintf(sweep + o, sizeof(sweep) - o, "%s%llu runs %.1f/%.1f", k ? ", " : "",
                 (unsigned long long)r1, a * 1e6, b * 1e6);
    }
    uint64_t room = (uint64_t)BENCH_PAGES * l->num_layers * (l->sub[0].page_stride * l->n_sub);
    int anchor_ok = cudaMalloc(&anchor, room) == cudaSuccess &&
                    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
                    cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess;
    for (int i = 0; anchor_ok && i < 2; i++) /* warm-up, then timed */
        anchor_ok =
            cudaEventRecord(e0, s) == cudaSuccess &&
            cudaMemcpyAsync(anchor, src.base, room, cudaMemcpyDeviceToDevice, s) == cudaSuccess &&
            cudaEventRecord(e1, s) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
            cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
    ok(tc > 0 && ts > 0 && tg > 0 && tgc > 0 && sweep_ok && anchor_ok,
       "timed a %u-page room over CUDA IPC (copies and gather)", BENCH_PAGES);
    diag("bench cuda_ipc room %u pages (%.1f MiB): contiguous %.1f us (%llu copies, %.1f GB/s); "
         "every other page %.1f us (%llu copies, %.1f GB/s); gather every other page %.1f us "
         "(%llu runs, %.1f GB/s, %.2f of the anchor), contiguous %.1f us (%llu runs, %.1f GB/s); "
         "anchor one local D2D copy %.1f us (%.1f GB/s)",
         BENCH_PAGES, room / 1048576.0, tc * 1e6, (unsigned long long)copies_c, room / tc / 1e9,
         ts * 1e6, (unsigned long long)copies_s, room / ts / 1e9, tg * 1e6,
         (unsigned long long)runs_g, room / tg / 1e9, ms > 0 ? ms / 1e3 / tg : 0.0, tgc * 1e6,
         (unsigned long long)runs_gc, room / tgc / 1e9, ms * 1e3,
         ms > 0 ? room / (ms / 1e3) / 1e9 : 0.0);
    diag("bench cuda_ipc small rooms of every other page, copies/gather us: %s", sweep);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (s)
        cudaStreamDestroy(s);
    cudaFree(anchor);
    cudaFree(src.base);
}

static void test_ipc(int rfd, int wfd)
{
    tdm_kv_layout_t l;
    tdm_kv_pool_t *hp = NULL;
    tdm_kv_buffers_t sb;
    uint64_t bytes, rbytes;
    uint8_t rec[XFER_CUDA_REC_BYTES], one = 1;
    xfer_cuda_t *c = NULL;
    /* sources: a run of 5 onto a run, then scattered; the last page id is never written */
    const uint32_t src[N_COPY] = {3, 4, 5, 6, 7, 20, 9, 31, 0, 15, 16, 2};
    const uint32_t dst[N_COPY + 1] = {10, 11, 12, 13, 14, 40, 2, 63, 1, 50, 51, 30, 33};
    if (rd_all(rfd, rec, sizeof(rec)) || make_layout(TDM_DTYPE_BF16, 16, &l) ||
        tdm_kv_pool_init(&l, NPAGES, &hp) != TDM_OK || xfer_cuda_init(1, &c) != TDM_OK) {
        ok(0, "IPC setup");
        return;
    }
    const tdm_kv_buffers_t *hb = tdm_kv_pool_buffers(hp);
    tdm_kv_layout_pool_bytes(&l, NPAGES, &bytes);
    fill_random(hb->base, bytes);
    if (dev_pool(&l, NPAGES, hb, &sb, &bytes) != 0) {
        ok(0, "source pool");
        return;
    }
    tdm_kv_layout_pool_bytes(&l, DEC_PAGES, &rbytes);
    ok(xfer_cuda_record_check(rec, sizeof(rec), rbytes, NULL, 0) == 0,
       "the other process's record checks for its %u pages", DEC_PAGES);
    tdm_status_t st = xfer_cuda_open(c, 0, rec, sizeof(rec), DEC_PAGES);
    ok(st == TDM_OK, "cudaIpcOpenMemHandle of the other process's pool: %s", tdm_status_str(st));
    uint64_t moved = 0, copies = 0;
    uint32_t far[1] = {DEC_PAGES};
    ok(xfer_cuda_copy(c, 0, &sb, src, far, 1, &moved, &copies) == TDM_ERR_RANGE && moved == 0,
       "a destination page past decode's pool is refused before any copy");
    st = xfer_cuda_copy(c, 0, &sb, src, dst, N_COPY, &moved, &copies);
    /* per (layer, sub) 7 runs: 3..7 → 10..14 and 15..16 → 50..51 coalesce, 5 single pages; 42
     * runs in all, over xfer_cuda_gather_min_runs: one gather kernel into the IPC mapping */
    ok(st == TDM_OK && copies == (uint64_t)l.num_layers * l.n_sub * 7 &&
           moved == (uint64_t)N_COPY * l.num_layers * (l.sub[0].page_stride + l.sub[1].page_stride),
       "copies queued: %llu (runs coalesced), %llu bytes", (unsigned long long)copies,
       (unsigned long long)moved);
    void *ev = NULL;
    int done = -2;
    if (xfer_cuda_fence(c, -1, &ev) == TDM_OK)
        for (int spin = 0; spin < 100000 && (done = xfer_cuda_fence_poll(c, ev)) == 0; spin++)
            usleep(100);
    ok(done == 1, "the fence event completes");
    xfer_cuda_fence_free(c, ev);
    uint64_t want[N_COPY + 1], got[N_COPY + 1];
    for (uint32_t i = 0; i < N_COPY; i++)
        want[i] = xfer_page_sum(hb, src[i]);
    {
        /* a zero page's checksum */
        uint8_t *save = malloc(bytes);
        memcpy(save, hb->base, bytes);
        memset(hb->base, 0, bytes);
        want[N_COPY] = xfer_page_sum(hb, 0);
        memcpy(hb->base, save, bytes);
        free(save);
    }
    int io = wr_all(wfd, dst, sizeof(dst)) || rd_all(rfd, got, sizeof(got));
    ok(!io && memcmp(want, got, sizeof(uint64_t) * N_COPY) == 0,
       "the other process's GPU checksums of the %u destination pages == the CPU's of the sources",
       N_COPY);
    ok(!io && got[N_COPY] == want[N_COPY], "a page not written stays zero");
    bench_ipc(c, &l);
    xfer_cuda_close(c, 0);
    wr_all(wfd, &one, 1);
    xfer_cuda_free(c);
    cudaFree(sb.base);
    tdm_kv_pool_free(hp);
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
    tdm_status_t st = xfer_cuda_init(1, &c);
    ok(st == TDM_OK, "context on %s", prop.name);
    if (st == TDM_OK) {
        test_xxh64();
        test_page_sums(c, TDM_DTYPE_BF16, 16);
        test_page_sums(c, TDM_DTYPE_FP8_E4M3, 3);
        test_record_check(c);
        test_gather();
        xfer_cuda_free(c);
    }
    /* compute-sanitizer (tools/device-run.sh) and CUDA IPC between two processes do not mix:
     * memcheck covers the kernels and copies above; the IPC part runs in the plain run */
    if (getenv("TDM_UNDER_SANITIZER"))
        close(p2c[1]);
    else
        test_ipc(c2p[0], p2c[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the decode process exited cleanly");
    return done_testing();
}
