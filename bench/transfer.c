/*
 * bench/transfer.c — KV transfer bandwidth of the engine (prefill → decode, host memory, UCX over
 * loopback) for one page chunk and 1–256 MiB rooms, with checksums off (the data path alone) and
 * on (the default: prefill hashes what it writes; decode verifies in commit, timed apart).
 * Geometry: bf16, 32 layers, 2 KV heads × 128, page 16 tokens → one page chunk = 512 KiB, moved
 * as 64 contiguous regions (layer × K/V) per room. Prints one JSON object per line:
 *   {"bytes":N,"checksums":0|1,"reps":R,"gbps":G,"verify_gbps":V}
 * Time per room: prefill_send → decode sees SUCCESS (median over reps).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "../tests/unit/xfer-testutil.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int run(int checksums, const uint32_t *n_pages_list, int n_sizes, uint32_t max_pages)
{
    xt_geom_t g = {TDM_DTYPE_BF16, 1, 16, 32, 2, 128, max_pages};
    xt_side_t pre, dec;
    if (xt_pools(&pre, &g) || xt_pools(&dec, &g))
        return 1;
    pre.cfg.disable_checksums = dec.cfg.disable_checksums = !checksums;
    if (xt_start(&pre, &dec) || tdm_xfer_wait_ready(dec.x, 10000000, NULL, 0) != TDM_OK) {
        fprintf(stderr, "transfer bench: engines did not start\n");
        return 1;
    }
    xt_fill_random(&pre, 1);
    uint32_t *pages = calloc(max_pages, 4), *prompt = calloc((size_t)max_pages * 16, 4);
    for (uint32_t i = 0; i < max_pages; i++)
        pages[i] = i;
    uint64_t page_bytes = (uint64_t)32 * 2 * 16 * 2 * 128 * 2;
    for (int si = 0; si < n_sizes; si++) {
        uint32_t np = n_pages_list[si];
        uint64_t bytes = np * page_bytes;
        int reps = bytes <= (4u << 20) ? 30 : bytes <= (64u << 20) ? 10 : 5;
        uint64_t t[32], tv[32];
        for (int r = 0; r < reps + 1; r++) {
            uint64_t room;
            tdm_xfer_request_t req;
            tdm_xfer_aux_t aux = {0, 1, 0, 0, {{0, 0}}}, got;
            memset(&req, 0, sizeof(req));
            if (tdm_xfer_decode_send_info(dec.x, prompt, np * 16, pages, np, NULL, &room) ||
                xt_next(pre.x, &req, 10000000) != TDM_OK) {
                fprintf(stderr, "transfer bench: room setup failed\n");
                return 1;
            }
            tdm_xfer_request_clear(&req);
            uint64_t t0 = tdm_time_mono_ns();
            tdm_xfer_prefill_send(pre.x, room, pages, np, &aux);
            tdm_kvpoll_t st;
            do {
                if (tdm_xfer_poll(dec.x, room, &st) != TDM_OK)
                    st = TDM_KVPOLL_FAILED;
                tdm_time_sleep_us(20); /* leave the cores to the engine's threads */
            } while (st != TDM_KVPOLL_SUCCESS && st != TDM_KVPOLL_FAILED);
            uint64_t t1 = tdm_time_mono_ns();
            if (st != TDM_KVPOLL_SUCCESS || tdm_xfer_decode_commit(dec.x, room, &got) != TDM_OK) {
                fprintf(stderr, "transfer bench: room failed\n");
                return 1;
            }
            uint64_t t2 = tdm_time_mono_ns();
            xt_release(pre.x, room, 10000000);
            xt_release(dec.x, room, 10000000);
            if (r > 0) { /* the first room warms up endpoints and page mappings */
                t[r - 1] = t1 - t0;
                tv[r - 1] = t2 - t1;
            }
        }
        qsort(t, (size_t)reps, 8, cmp_u64);
        qsort(tv, (size_t)reps, 8, cmp_u64);
        printf("{\"bytes\":%llu,\"checksums\":%d,\"reps\":%d,\"gbps\":%.3f,\"verify_gbps\":%.3f}\n",
               (unsigned long long)bytes, checksums, reps, (double)bytes / (double)t[reps / 2],
               checksums ? (double)bytes / (double)tv[reps / 2] : 0.0);
        fflush(stdout);
    }
    free(pages);
    free(prompt);
    xt_side_free(&dec);
    xt_side_free(&pre);
    return 0;
}

int main(int argc, char **argv)
{
    /* page chunk (512 KiB), then 1, 4, 16, 64, 256 MiB */
    uint32_t sizes[] = {1, 2, 8, 32, 128, 512};
    int n = argc > 1 ? atoi(argv[1]) : 6;
    if (n < 1 || n > 6)
        n = 6;
    if (run(0, sizes, n, sizes[n - 1]) || run(1, sizes, n, sizes[n - 1]))
        return 1;
    return 0;
}
