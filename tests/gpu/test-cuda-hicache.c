/*
 * test-cuda-hicache.c — the CUDA half of the HiCache host tier (kernels/cuda/hicache.h) over the
 * CUDA engine's own KV pool (the executor's adapter, tiny-llama3 fixture), per configuration
 * (bf16 layer_first/direct, bf16 page_first/kernel, fp8 layer_first/kernel):
 *   - stores: the per-layer checksums the device computed equal tdm_hash_xxh64 over the same
 *     device bytes on the CPU (the sub-buffers chained in order);
 *   - a load (verify rate 1) through the pinned pool and the copy stream: the loaded pages are
 *     bit-identical to the evicted ones, and a forward of the prompt's last page reading the
 *     loaded prefix through the gate (per-layer events) gives the same logits, bit for bit, as
 *     the same forward over the original pages;
 *   - slow_host_copy: the gate waits (per layer) and the logits are still identical, no poison;
 *   - skip_layer_gate + slow_host_copy (canary poison): attention reads poison and the probe
 *     counts it, the gate counts the bypass;
 *   - flip_host_bits: the load's verification on the device destination reports CORRUPT.
 * Without a device it skips with the reason.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/hash.h>
#include <tdm/hicache.h>
#include <tdm/kv.h>
#include <tdm/model.h>

#include "dataplane/kv/hicache_int.h"
#include "kernels/cuda/exec_cuda.h"
#include "kernels/cuda/smoke.h"
#include "tap.h"

#define PS 16u
#define NPAGES 64u
#define PLEN 40u /* two full pages and 8 tokens */

static uint32_t slow_ms, flip_once, skip_on;

static int fault_cb(void *ctx, tdm_hicache_fault_t f, uint32_t *ret_ms)
{
    (void)ctx;
    if (f == TDM_HICACHE_FAULT_SLOW_COPY && slow_ms) {
        *ret_ms = slow_ms;
        return 1;
    }
    if (f == TDM_HICACHE_FAULT_FLIP_BITS && flip_once) {
        flip_once = 0;
        return 1;
    }
    return 0;
}

static int skip_cb(void *ctx, uint64_t iter, uint32_t layer)
{
    (void)ctx;
    (void)iter;
    (void)layer;
    return (int)skip_on;
}

static uint8_t *download(const tdm_kv_buffers_t *kv, uint64_t bytes)
{
    uint8_t *h = malloc(bytes);
    if (h && cudaMemcpy(h, kv->base, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(h);
        return NULL;
    }
    return h;
}

/* the device page's bytes of every layer and sub-buffer, from a host copy of the pool */
static int pages_equal(const tdm_kv_buffers_t *kv, const uint8_t *host, uint32_t a, uint32_t b)
{
    tdm_kv_buffers_t h = *kv;
    h.base = (uint8_t *)host;
    for (uint32_t l = 0; l < kv->layout->num_layers; l++)
        for (uint32_t s = 0; s < kv->layout->n_sub; s++)
            if (memcmp(tdm_kv_slot(&h, l, (tdm_kv_sub_t)s, a, 0),
                       tdm_kv_slot(&h, l, (tdm_kv_sub_t)s, b, 0), kv->layout->sub[s].page_stride))
                return 0;
    return 1;
}

static uint64_t cpu_checksum(const tdm_kv_buffers_t *kv, const uint8_t *host, uint32_t page,
                             uint32_t l, uint32_t s)
{
    tdm_kv_buffers_t h = *kv;
    h.base = (uint8_t *)host;
    return tdm_hash_xxh64(tdm_kv_slot(&h, l, (tdm_kv_sub_t)s, page, 0),
                          kv->layout->sub[s].page_stride, 0);
}

typedef struct run {
    tdm_exec_cuda_t *x;
    tdm_hicache_t *hc;
    const int32_t *prompt;
    uint32_t V;
    float *ref;
} run_t;

/* Forward the prompt's last PLEN - 32 tokens over pages (p0, p1, p2), batch need = ticket. */
static tdm_status_t tail_forward(run_t *r, uint32_t p0, uint32_t p1, uint32_t p2, uint64_t ticket,
                                 float *logits)
{
    uint32_t pages[3] = {p0, p1, p2}, rows = 0;
    tdm_graph_seq_t sq = {r->prompt + 32, PLEN - 32, 32, pages, 3, 0};
    tdm_kv_batch_t b = {7, ticket};
    tdm_exec_cuda_set_batch(r->x, &b);
    tdm_status_t st = tdm_exec_cuda_forward(r->x, &sq, 1, logits, 1, &rows);
    tdm_exec_cuda_set_batch(r->x, NULL);
    return st != TDM_OK ? st : rows == 1 ? TDM_OK : TDM_ERR_STATE;
}

/* match the prompt's two pages in the tier and load them into (d0, d1) */
static tdm_status_t load2(run_t *r, uint32_t d0, uint32_t d1, uint64_t *ticket)
{
    uint32_t host[2], dev[2] = {d0, d1};
    if (tdm_hicache_match(r->hc, r->prompt, 0, 2, 0, host) != 2)
        return TDM_ERR_NOTFOUND;
    return tdm_hicache_load(r->hc, host, dev, 2, ticket);
}

static void check_config(const tdm_model_view_t *view, tdm_dtype_t dt, tdm_hicache_mem_layout_t ml,
                         tdm_hicache_io_t io, const char *name)
{
    char err[256] = "";
    run_t r;
    memset(&r, 0, sizeof(r));
    const uint32_t V = view->cfg->vocab_size;
    tdm_exec_cuda_cfg_t cc = {view, dt, PS, 4, 128, 256, NPAGES, 0.3};
    tdm_status_t st = tdm_exec_cuda_init(&cc, &r.x, err, sizeof(err));
    if (st != TDM_OK) {
        ok(0, "%s: adapter (%s)", name, err);
        return;
    }
    const tdm_kv_buffers_t *kv = tdm_exec_cuda_kv(r.x);
    const uint32_t L = kv->layout->num_layers;
    uint64_t pool_bytes = 0;
    (void)tdm_kv_layout_pool_bytes(kv->layout, kv->num_pages, &pool_bytes);

    int32_t prompt[PLEN];
    for (uint32_t i = 0; i < PLEN; i++)
        prompt[i] = (int32_t)((i * 7919u + 13u) % V);
    r.prompt = prompt;
    r.V = V;
    float *ref = malloc((size_t)V * 4), *got = malloc((size_t)V * 4);
    uint32_t pages[3] = {0, 1, 2}, rows = 0;
    tdm_graph_seq_t sq = {prompt, PLEN, 0, pages, 3, 0};
    st = tdm_exec_cuda_forward(r.x, &sq, 1, ref, 1, &rows);
    /* the reference: the last page's tokens again over the original pages */
    if (st == TDM_OK)
        st = tail_forward(&r, 0, 1, 2, 0, ref);
    ok(st == TDM_OK, "%s: prefill and the reference tail forward (%s)", name, tdm_status_str(st));

    tdm_hicache_cfg_t c;
    memset(&c, 0, sizeof(c));
    c.layout = tdm_exec_cuda_layout(r.x);
    c.device_pages = kv->num_pages;
    c.ratio = 1.0;
    c.policy = TDM_HICACHE_WRITE_BACK;
    c.mem_layout = ml;
    c.io = io;
    c.verify_every = 1;
    c.poison = 1;
    c.max_jobs = 4;
    c.fault = fault_cb;
    c.dev = tdm_exec_cuda_hicache_dev();
    st = tdm_hicache_init(&c, kv, &r.hc, err, sizeof(err));
    if (st != TDM_OK) {
        ok(0, "%s: tier (%s)", name, err);
        goto out;
    }
    tdm_kv_gate_t *gate = tdm_hicache_gate(r.hc);
    tdm_kv_gate_set_skip(gate, skip_cb, NULL);
    ok(tdm_exec_cuda_use_gate(r.x, gate) == TDM_OK, "%s: the engine reads through the gate", name);

    /* stores: checksums of the device source, computed on the device */
    uint64_t h = 0;
    uint32_t hp[2];
    for (uint32_t i = 0; i < 2; i++) {
        uint64_t nh = tdm_hash_xxh64(prompt + i * PS, PS * sizeof(int32_t), h);
        st = tdm_hicache_store(r.hc, i, nh, h, prompt + i * PS);
        if (st != TDM_OK)
            break;
        h = nh;
    }
    ok(st == TDM_OK && tdm_hicache_match(r.hc, prompt, 0, 2, 0, hp) == 2,
       "%s: two pages stored (%s)", name, tdm_status_str(st));
    tdm_hicache_unpin(r.hc, hp, 2);
    uint8_t *pool = download(kv, pool_bytes);
    int ck_ok = pool != NULL;
    for (uint32_t i = 0; i < 2 && ck_ok; i++)
        for (uint32_t l = 0; l < L; l++)
            for (uint32_t s = 0; s < kv->layout->n_sub; s++)
                ck_ok &= r.hc->ck[((size_t)hp[i] * L + l) * kv->layout->n_sub + s] ==
                         cpu_checksum(kv, pool, i, l, s);
    ok(ck_ok,
       "%s: the device's XXH64 of every (page, layer, sub-buffer) equals tdm_hash_xxh64 on the CPU",
       name);
    free(pool);

    /* a load through the gate: identical pages, identical logits */
    uint64_t t = 0;
    tdm_hicache_stats_t s0, s1;
    tdm_hicache_stats(r.hc, &s0);
    st = load2(&r, 10, 11, &t);
    if (st == TDM_OK)
        st = tail_forward(&r, 10, 11, 12, t, got);
    tdm_status_t wst = tdm_hicache_wait(r.hc, t, NULL, NULL, NULL);
    ok(st == TDM_OK && wst == TDM_OK && !memcmp(got, ref, (size_t)V * 4),
       "%s: forward over the loaded prefix = over the original pages, bit for bit (%s, wait %s)",
       name, tdm_status_str(st), tdm_status_str(wst));
    pool = download(kv, pool_bytes);
    ok(pool && pages_equal(kv, pool, 0, 10) && pages_equal(kv, pool, 1, 11),
       "%s: loaded pages bit-identical to the evicted ones (every layer and sub-buffer)", name);
    free(pool);
    tdm_hicache_stats(r.hc, &s1);
    ok(s1.verified == s0.verified + 1 && s1.verify_failures == 0 && s1.poison_reads == 0 &&
           s1.bypasses == 0,
       "%s: verified on the device destination, no poison read, no bypass", name);

    /* slow copy: the gate waits layer by layer */
    slow_ms = 40;
    st = load2(&r, 20, 21, &t);
    uint64_t w0 = tdm_kv_gate_waits(gate);
    if (st == TDM_OK)
        st = tail_forward(&r, 20, 21, 22, t, got);
    wst = tdm_hicache_wait(r.hc, t, NULL, NULL, NULL);
    tdm_hicache_stats(r.hc, &s1);
    ok(st == TDM_OK && wst == TDM_OK && !memcmp(got, ref, (size_t)V * 4) &&
           tdm_kv_gate_waits(gate) > w0 && s1.poison_reads == 0,
       "slow_host_copy: %s: the gate waited (%llu acquires blocked), same logits, no poison", name,
       (unsigned long long)(tdm_kv_gate_waits(gate) - w0));

    /* skip_layer_gate: attention reads the poisoned destination; probe and bypass count it */
    skip_on = 1;
    st = load2(&r, 30, 31, &t);
    if (st == TDM_OK)
        st = tail_forward(&r, 30, 31, 32, t, got);
    skip_on = 0;
    wst = tdm_hicache_wait(r.hc, t, NULL, NULL, NULL);
    slow_ms = 0;
    tdm_hicache_stats(r.hc, &s1);
    ok(st == TDM_OK && wst == TDM_OK && s1.poison_reads > 0 && s1.bypasses > 0,
       "skip_layer_gate + slow_host_copy: %s: poison reads %llu, bypasses %llu", name,
       (unsigned long long)s1.poison_reads, (unsigned long long)s1.bypasses);

    /* flip_host_bits: the device-side verification catches it */
    flip_once = 1;
    uint32_t bad_page = 0, bad_layer = 99, bad_sub = 99;
    st = load2(&r, 40, 41, &t);
    wst = st == TDM_OK ? tdm_hicache_wait(r.hc, t, &bad_page, &bad_layer, &bad_sub) : st;
    is_int(wst, TDM_ERR_CORRUPT,
           "flip_host_bits: %s: CORRUPT naming page %u layer %u sub-buffer %s", name, bad_page,
           bad_layer, bad_sub < TDM_KV_SUB_MAX ? tdm_kv_sub_name((tdm_kv_sub_t)bad_sub) : "?");
out:
    tdm_hicache_free(r.hc);
    tdm_exec_cuda_free(r.x);
    free(ref);
    free(got);
}

int main(void)
{
    tdm_cuda_smoke_dev_t dev;
    char why[256] = "", path[1024], err[256] = "";
    const char *src = getenv("TDM_SRCDIR");
    if (tdm_cuda_smoke_probe(&dev, why, sizeof(why)) != TDM_OK) {
        char msg[320];
        snprintf(msg, sizeof(msg), "no CUDA device (%s)", why);
        skip_all(msg);
    }
    if (dev.major != 9)
        skip_all("built for sm_90a only");
    snprintf(path, sizeof(path), "%.900s/tests/fixtures/models/tiny-llama3", src ? src : ".");
    tdm_model_t *m = NULL;
    tdm_model_view_t view;
    if (tdm_model_load(path, &m, err, sizeof(err)) != TDM_OK ||
        tdm_model_view_init(m, 1, 0, &view, err, sizeof(err)) != TDM_OK)
        bail_out(err);
    check_config(&view, TDM_DTYPE_BF16, TDM_HICACHE_LAYER_FIRST, TDM_HICACHE_IO_DIRECT,
                 "bf16 layer_first direct");
    check_config(&view, TDM_DTYPE_BF16, TDM_HICACHE_PAGE_FIRST, TDM_HICACHE_IO_KERNEL,
                 "bf16 page_first kernel");
    check_config(&view, TDM_DTYPE_FP8_E4M3, TDM_HICACHE_LAYER_FIRST, TDM_HICACHE_IO_KERNEL,
                 "fp8 layer_first kernel");
    tdm_model_view_free(&view);
    tdm_model_free(m);
    return done_testing();
}
