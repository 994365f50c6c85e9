/*
 * test-hicache.c — the HiCache host tier and its gate (include/tdm/hicache.h):
 *   - I6: host descriptor == device descriptor for bf16 and fp8 (every sub-buffer); the fp8
 *     formula on a bf16 device refuses with the sub-buffer, both bytes/token and both strides;
 *   - loaded pages bit-identical to the stored ones (verify every load), for both host layouts,
 *     both copy paths, bf16 and fp8;
 *   - forced past the layout check: the truncated copy fails verification, naming page, layer and
 *     sub-buffer K; flip_host_bits likewise, naming the (layer, sub-buffer) whose bytes differ;
 *   - a byte flipped at a known (host page, layer, sub-buffer) of every combination, bf16 and fp8
 *     (the scale sub-buffers), both host layouts: the failure names exactly that device page,
 *     layer and sub-buffer;
 *   - the gate (I7) on a real forward: a load slowed per layer into poisoned pages, the batch
 *     reads through tdm_kv_layer_acquire: logits bit-identical to computing the prompt, no poison
 *     read, no bypass, and the forward did wait. Built with -DTDM_TEST_DROP_GATE_WAIT
 *     (test-hicache-nogate) this test must fail: tests/unit/test-hicache-nogate.sh checks it;
 *   - skip_layer_gate + slow copy: the bypass counter and the poison count see it.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tdm/hash.h>
#include <tdm/hicache.h>
#include <tdm/kv.h>

#include "dataplane/kv/hicache_int.h"
#include "dataplane/model/graph.h"
#include "forward-testutil.h"
#include "tap.h"

#define PS 16u

static tdm_model_config_t cfg_small(void)
{
    tdm_model_config_t c;
    memset(&c, 0, sizeof(c));
    c.arch = TDM_ARCH_LLAMA;
    c.vocab_size = 300;
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.num_layers = 3;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 32;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.rope_type = TDM_ROPE_DEFAULT;
    c.weight_dtype = TDM_DTYPE_BF16;
    return c;
}

/* fault knobs the tier and the gate read */
static uint32_t slow_ms, flip_once, skip_gate_on;

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
    return skip_gate_on != 0;
}

static tdm_hicache_cfg_t hc_cfg(const tdm_kv_layout_t *l, uint32_t pages)
{
    tdm_hicache_cfg_t c;
    memset(&c, 0, sizeof(c));
    c.layout = l;
    c.device_pages = pages;
    c.ratio = 2.0;
    c.policy = TDM_HICACHE_WRITE_BACK;
    c.verify_every = 1;
    c.max_jobs = 4;
    c.fault = fault_cb;
    return c;
}

/* Store pages[0..n) as the chain of tokens' first n pages. */
static int store_chain(tdm_hicache_t *hc, const int32_t *tok, const uint32_t *pages, uint32_t n)
{
    uint64_t h = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t nh = tdm_hash_xxh64(tok + i * PS, PS * sizeof(int32_t), h);
        if (tdm_hicache_store(hc, pages[i], nh, h, tok + i * PS) != TDM_OK)
            return 0;
        h = nh;
    }
    return 1;
}

static void fill_random(uint8_t *p, uint64_t n, uint64_t seed)
{
    for (uint64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
}

static void test_layouts(void)
{
    tdm_model_config_t mc = cfg_small();
    tdm_kv_layout_t lb, lf;
    tdm_kv_pool_t *pb, *pf;
    tdm_hicache_t *hc = NULL;
    char err[512] = "";
    tdm_layout_record_t d, h;

    tdm_kv_layout_init(&mc, TDM_DTYPE_BF16, PS, 1, 0, &lb);
    tdm_kv_layout_init(&mc, TDM_DTYPE_FP8_E4M3, PS, 1, 0, &lf);
    tdm_kv_pool_init(&lb, 8, &pb);
    tdm_kv_pool_init(&lf, 8, &pf);
    tdm_hicache_cfg_t c = hc_cfg(&lb, 8);
    ok(tdm_hicache_init(&c, tdm_kv_pool_buffers(pb), &hc, err, sizeof(err)) == TDM_OK,
       "bf16: host pool from the device descriptor (%s)", err);
    tdm_hicache_records(hc, &d, &h);
    ok(tdm_layout_equal(&d, &h, err, sizeof(err)) && h.n_sub == 2 && h.num_pages == 16,
       "bf16: records equal on every sub-buffer, 2x the device pages");
    tdm_hicache_free(hc);
    hc = NULL;
    c = hc_cfg(&lf, 8);
    ok(tdm_hicache_init(&c, tdm_kv_pool_buffers(pf), &hc, err, sizeof(err)) == TDM_OK, "fp8 init");
    tdm_hicache_records(hc, &d, &h);
    ok(tdm_layout_equal(&d, &h, err, sizeof(err)) && h.n_sub == 4 &&
           h.sub[TDM_KV_SUB_K_SCALE].bytes_per_token == 8,
       "fp8: K, V and both scale sub-buffers equal");
    tdm_hicache_free(hc);
    hc = NULL;

    c = hc_cfg(&lb, 8);
    c.fp8_formula = 1;
    is_int(tdm_hicache_init(&c, tdm_kv_pool_buffers(pb), &hc, err, sizeof(err)), TDM_ERR_FORMAT,
           "host_layout_fp8_formula: refused");
    ok(strstr(err, "sub-buffer K: device 128 bytes/token, page stride 2048; host 64 "
                   "bytes/token, page stride 1024") != NULL,
       "the refusal names the sub-buffer, both bytes/token and both strides: %s", err);
    c.size_bytes = 1 << 20;
    c.fp8_formula = 0;
    ok(tdm_hicache_init(&c, tdm_kv_pool_buffers(pb), &hc, err, sizeof(err)) == TDM_OK, "sized");
    uint64_t one = 0;
    tdm_kv_layout_pool_bytes(&lb, 1, &one);
    tdm_hicache_stats_t st;
    tdm_hicache_stats(hc, &st);
    ok(st.host_bytes <= (1u << 20) && st.host_pages_total >= (1u << 20) / one - 1,
       "--hicache-size: the configurator sizes the host pool from the descriptor (%u pages)",
       st.host_pages_total);
    tdm_hicache_free(hc);
    tdm_kv_pool_free(pb);
    tdm_kv_pool_free(pf);
}

/* Store 6 pages, load them into 6 other pages, compare every byte. */
static int round_trip(tdm_dtype_t dt, tdm_hicache_mem_layout_t ml, tdm_hicache_io_t io)
{
    tdm_model_config_t mc = cfg_small();
    tdm_kv_layout_t l;
    tdm_kv_pool_t *p;
    tdm_hicache_t *hc;
    char err[256];
    int32_t tok[6 * PS];
    uint32_t src[6] = {0, 1, 2, 3, 4, 5}, dst[6] = {8, 9, 10, 11, 13, 12}, host[6];
    uint64_t ticket = 0, bytes;
    int good = 1;

    tdm_kv_layout_init(&mc, dt, PS, 1, 0, &l);
    tdm_kv_pool_init(&l, 16, &p);
    tdm_kv_layout_pool_bytes(&l, 16, &bytes);
    fill_random(tdm_kv_pool_buffers(p)->base, bytes, 42 + ml * 2 + io);
    for (uint32_t i = 0; i < 6 * PS; i++)
        tok[i] = (int32_t)(i * 7 % 300);
    tdm_hicache_cfg_t c = hc_cfg(&l, 16);
    c.mem_layout = ml;
    c.io = io;
    c.poison = 1;
    if (tdm_hicache_init(&c, tdm_kv_pool_buffers(p), &hc, err, sizeof(err)) != TDM_OK)
        return 0;
    good &= store_chain(hc, tok, src, 6);
    good &= tdm_hicache_match(hc, tok, 0, 6, 0, host) == 6;
    good &= tdm_hicache_load(hc, host, dst, 6, &ticket) == TDM_OK;
    good &= tdm_hicache_wait(hc, ticket, NULL, NULL, NULL) == TDM_OK;
    const tdm_kv_buffers_t *b = tdm_kv_pool_buffers(p);
    for (uint32_t i = 0; i < 6; i++)
        for (uint32_t ly = 0; ly < l.num_layers; ly++)
            for (uint32_t s = 0; s < l.n_sub; s++)
                good &=
                    !memcmp(tdm_kv_slot(b, ly, (tdm_kv_sub_t)s, src[i], 0),
                            tdm_kv_slot(b, ly, (tdm_kv_sub_t)s, dst[i], 0), l.sub[s].page_stride);
    tdm_hicache_stats_t st;
    tdm_hicache_stats(hc, &st);
    good &= st.verified == 1 && st.verify_failures == 0 && st.host_pages_pinned == 0 &&
            st.loads_in_flight == 0 && st.host_pages_used == 6;
    tdm_hicache_free(hc);
    tdm_kv_pool_free(p);
    return good;
}

static void test_round_trips(void)
{
    const char *dn[] = {"bf16", "fp8"}, *mn[] = {"layer_first", "page_first"},
               *in[] = {"kernel", "direct"};
    tdm_dtype_t dts[] = {TDM_DTYPE_BF16, TDM_DTYPE_FP8_E4M3};
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 2; m++)
            for (int i = 0; i < 2; i++)
                ok(round_trip(dts[d], (tdm_hicache_mem_layout_t)m, (tdm_hicache_io_t)i),
                   "%s %s %s: loaded pages bit-identical to the evicted ones, verified", dn[d],
                   mn[m], in[i]);
}

/* Forced past the layout check, or with a flipped host bit: the load fails verification. */
static void test_corrupt_loads(void)
{
    tdm_model_config_t mc = cfg_small();
    tdm_kv_layout_t l;
    tdm_kv_pool_t *p;
    tdm_hicache_t *hc;
    char err[256];
    int32_t tok[2 * PS];
    uint32_t src[2] = {0, 1}, dst[2] = {4, 5}, host[2], page = 99, layer = 99, sub = 99;
    uint64_t ticket, bytes;

    tdm_kv_layout_init(&mc, TDM_DTYPE_BF16, PS, 1, 0, &l);
    tdm_kv_pool_init(&l, 8, &p);
    tdm_kv_layout_pool_bytes(&l, 8, &bytes);
    fill_random(tdm_kv_pool_buffers(p)->base, bytes, 7);
    for (uint32_t i = 0; i < 2 * PS; i++)
        tok[i] = (int32_t)i;
    tdm_hicache_cfg_t c = hc_cfg(&l, 8);
    c.fp8_formula = 1;
    c.force_layout = 1;
    c.poison = 1;
    ok(tdm_hicache_init(&c, tdm_kv_pool_buffers(p), &hc, err, sizeof(err)) == TDM_OK,
       "forced past the layout check (test only)");
    store_chain(hc, tok, src, 2);
    tdm_hicache_match(hc, tok, 0, 2, 0, host);
    tdm_hicache_load(hc, host, dst, 2, &ticket);
    is_int(tdm_hicache_wait(hc, ticket, &page, &layer, &sub), TDM_ERR_CORRUPT,
           "truncated host copy: the load's checksum on the device destination mismatches");
    ok(page == 4 && layer == 0 && sub == TDM_KV_SUB_K,
       "the mismatch names device page 4, layer 0, sub-buffer K (got %u, %u, %s)", page, layer,
       tdm_kv_sub_name((tdm_kv_sub_t)sub));
    tdm_hicache_stats_t st;
    tdm_hicache_stats(hc, &st);
    ok(st.host_pages_used == 0 && st.verify_failures == 1,
       "the bad host pages are dropped from the tier");
    tdm_hicache_free(hc);

    c.fp8_formula = 0;
    c.force_layout = 0;
    tdm_hicache_init(&c, tdm_kv_pool_buffers(p), &hc, err, sizeof(err));
    store_chain(hc, tok, src, 2);
    tdm_hicache_match(hc, tok, 0, 2, 0, host);
    flip_once = 1;
    tdm_hicache_load(hc, host, dst, 2, &ticket);
    is_int(tdm_hicache_wait(hc, ticket, &page, &layer, &sub), TDM_ERR_CORRUPT,
           "flip_host_bits: the load fails verification");
    {
        /* the truth from the bytes: the loaded device page differs from its source in exactly
         * the (layer, sub-buffer) the failure names */
        const tdm_kv_buffers_t *kb = tdm_kv_pool_buffers(p);
        int named_differs = 0, others_equal = 1;
        for (uint32_t ll = 0; ll < l.num_layers; ll++)
            for (uint32_t s = 0; s < l.n_sub; s++) {
                int d =
                    memcmp(tdm_kv_slot(kb, ll, (tdm_kv_sub_t)s, 4, 0),
                           tdm_kv_slot(kb, ll, (tdm_kv_sub_t)s, 0, 0), l.sub[s].page_stride) != 0;
                if (ll == layer && s == sub)
                    named_differs = d;
                else
                    others_equal &= !d;
            }
        ok(page == 4 && named_differs && others_equal,
           "flip_host_bits: the failure names device page %u layer %u sub-buffer %s, the one "
           "(layer, sub-buffer) whose loaded bytes differ from the source",
           page, layer, tdm_kv_sub_name((tdm_kv_sub_t)sub));
    }
    store_chain(hc, tok, src, 2);
    tdm_hicache_match(hc, tok, 0, 2, 0, host);
    tdm_hicache_load(hc, host, dst, 2, &ticket);
    is_int(tdm_hicache_wait(hc, ticket, NULL, NULL, NULL), TDM_OK,
           "stored again: the next load is good");
    tdm_hicache_free(hc);
    tdm_kv_pool_free(p);
}

/* A byte flipped in host page host[1] at every (layer, sub-buffer): the load of the two pages
 * fails naming exactly device page dst[1], that layer and that sub-buffer. */
static void test_named_flips(tdm_dtype_t dt, tdm_hicache_mem_layout_t ml)
{
    tdm_model_config_t mc = cfg_small();
    tdm_kv_layout_t l;
    tdm_kv_pool_t *p;
    tdm_hicache_t *hc;
    char err[256];
    int32_t tok[2 * PS];
    uint32_t src[2] = {0, 1}, dst[2] = {4, 5}, host[2];
    uint64_t ticket, bytes;
    int exact = 0, n = 0;
    tdm_kv_layout_init(&mc, dt, PS, 1, 0, &l);
    tdm_kv_pool_init(&l, 8, &p);
    tdm_kv_layout_pool_bytes(&l, 8, &bytes);
    fill_random(tdm_kv_pool_buffers(p)->base, bytes, 11);
    for (uint32_t i = 0; i < 2 * PS; i++)
        tok[i] = (int32_t)i + 1000;
    tdm_hicache_cfg_t c = hc_cfg(&l, 8);
    c.mem_layout = ml;
    if (tdm_hicache_init(&c, tdm_kv_pool_buffers(p), &hc, err, sizeof(err)) != TDM_OK) {
        ok(0, "named flips: init: %s", err);
        tdm_kv_pool_free(p);
        return;
    }
    for (uint32_t ll = 0; ll < l.num_layers; ll++)
        for (uint32_t s = 0; s < l.n_sub; s++, n++) {
            uint32_t page = 99, layer = 99, sub = 99;
            store_chain(hc, tok, src, 2);
            if (tdm_hicache_match(hc, tok, 0, 2, 0, host) != 2)
                continue;
            uint32_t off = (uint32_t)((ll * 31 + s * 17 + 5) % l.sub[s].page_stride);
            tdm_hicache_host_addr(hc, host[1], ll, s)[off] ^= 0x04;
            tdm_hicache_load(hc, host, dst, 2, &ticket);
            tdm_status_t st = tdm_hicache_wait(hc, ticket, &page, &layer, &sub);
            int good = st == TDM_ERR_CORRUPT && page == dst[1] && layer == ll && sub == s;
            if (!good)
                diag("flipped host page %u layer %u sub %s: %s, named page %u layer %u sub %u",
                     host[1], ll, tdm_kv_sub_name((tdm_kv_sub_t)s), tdm_status_name(st), page,
                     layer, sub);
            exact += good;
        }
    ok(exact == n && n == (int)(l.num_layers * l.n_sub),
       "%s %s: %d/%d flipped (layer, sub-buffer) named exactly (device page, layer, sub-buffer)",
       dt == TDM_DTYPE_FP8_E4M3 ? "fp8" : "bf16",
       ml == TDM_HICACHE_PAGE_FIRST ? "page_first" : "layer_first", exact, n);
    tdm_hicache_free(hc);
    tdm_kv_pool_free(p);
}

typedef struct eng {
    tdm_backend_t be;
    tdm_kv_pool_t *pool;
    tdm_graph_t *g;
    tdm_model_view_t view;
    tdm_hicache_t *hc;
} eng_t;

static int eng_init(eng_t *e, const synth_t *s, int with_hc)
{
    tdm_kv_layout_t l;
    char err[256];
    memset(e, 0, sizeof(*e));
    synth_view(s, 1, 0, &e->view);
    if (tdm_backend_cpu_init(1, &e->be) != TDM_OK ||
        tdm_kv_layout_init(&s->cfg, TDM_DTYPE_BF16, PS, 1, 0, &l) != TDM_OK ||
        tdm_kv_pool_init(&l, 32, &e->pool) != TDM_OK ||
        tdm_graph_init(&e->view, tdm_kv_pool_buffers(e->pool), &e->be, NULL, 128, &e->g) != TDM_OK)
        return 0;
    if (!with_hc)
        return 1;
    tdm_hicache_cfg_t c = hc_cfg(&l, 32);
    c.poison = 1;
    if (tdm_hicache_init(&c, tdm_kv_pool_buffers(e->pool), &e->hc, err, sizeof(err)) != TDM_OK)
        return 0;
    tdm_kv_gate_set_skip(tdm_hicache_gate(e->hc), skip_cb, NULL);
    return tdm_graph_use_gate(e->g, tdm_hicache_gate(e->hc)) == TDM_OK;
}

static void eng_free(eng_t *e)
{
    tdm_graph_free(e->g);
    tdm_hicache_free(e->hc);
    tdm_kv_pool_free(e->pool);
    tdm_backend_cpu_free(&e->be);
    free(e->view.layers);
}

#define NTOK (3 * PS + 5)

/* The prompt's first 3 pages computed, stored, dropped; then loaded (slowly, poisoned) while the
 * last 5 tokens run. Returns the last token's logits in out. */
static int run_loaded(eng_t *e, const int32_t *tok, float *out, uint64_t *ret_waits)
{
    tdm_kv_seq_t a, b;
    uint32_t rows, host[3];
    uint64_t ticket = 0, bytes;
    static float scratch[NTOK * 300];
    tdm_kv_seq_init(&a, 8);
    tdm_kv_seq_init(&b, 8);
    if (tdm_kv_seq_reserve(e->pool, &a, 3 * PS) != TDM_OK)
        return 0;
    tdm_graph_seq_t sa = {tok, 3 * PS, 0, a.pages, a.n_pages, 0};
    tdm_graph_set_batch(e->g, NULL);
    if (tdm_graph_forward(e->g, &sa, 1, scratch, NTOK, &rows) != TDM_OK ||
        !store_chain(e->hc, tok, a.pages, 3))
        return 0;
    tdm_kv_seq_free(e->pool, &a);
    /* the freed pages are overwritten: only the load can bring the prefix back */
    tdm_kv_layout_pool_bytes(tdm_kv_pool_layout(e->pool), 32, &bytes);
    fill_random(tdm_kv_pool_buffers(e->pool)->base, bytes, 99);
    if (tdm_kv_seq_reserve(e->pool, &b, NTOK) != TDM_OK ||
        tdm_hicache_match(e->hc, tok, 0, 3, 0, host) != 3 ||
        tdm_hicache_load(e->hc, host, b.pages, 3, &ticket) != TDM_OK)
        return 0;
    uint64_t w0 = tdm_kv_gate_waits(tdm_hicache_gate(e->hc));
    tdm_kv_batch_t kb = {1, ticket};
    tdm_graph_set_batch(e->g, &kb);
    tdm_graph_seq_t sb = {tok + 3 * PS, NTOK - 3 * PS, 3 * PS, b.pages, b.n_pages, 0};
    tdm_status_t st = tdm_graph_forward(e->g, &sb, 1, out, 1, &rows);
    *ret_waits = tdm_kv_gate_waits(tdm_hicache_gate(e->hc)) - w0;
    tdm_hicache_wait(e->hc, ticket, NULL, NULL, NULL);
    tdm_kv_seq_free(e->pool, &b);
    return st == TDM_OK;
}

static void test_gate(void)
{
    tdm_model_config_t mc = cfg_small();
    synth_t s;
    eng_t ref, e;
    int32_t tok[NTOK];
    static float want[NTOK * 300], got[300];
    uint32_t rows;
    uint64_t waits = 0;

    synth_init(&s, &mc);
    for (uint32_t i = 0; i < NTOK; i++)
        tok[i] = (int32_t)((i * 37 + 11) % 300);
    ok(eng_init(&ref, &s, 0) && eng_init(&e, &s, 1), "engines");
    tdm_kv_seq_t q;
    tdm_kv_seq_init(&q, 8);
    tdm_kv_seq_reserve(ref.pool, &q, NTOK);
    tdm_graph_seq_t sq = {tok, NTOK, 0, q.pages, q.n_pages, 0};
    ok(tdm_graph_forward(ref.g, &sq, 1, want, NTOK, &rows) == TDM_OK, "reference: whole prompt");
    tdm_kv_seq_free(ref.pool, &q);

    slow_ms = 15;
    ok(run_loaded(&e, tok, got, &waits), "prefix loaded from the host tier, 15 ms per layer");
    ok(!memcmp(got, want, sizeof(got)),
       "gate: logits bit-identical to computing the prompt (layer-wise load behind the gate)");
    is_u64(tdm_kv_gate_poison_reads(tdm_hicache_gate(e.hc)), 0,
           "gate: attention read no poisoned page");
    is_u64(tdm_kv_gate_bypasses(tdm_hicache_gate(e.hc)), 0, "gate: no bypass");
    ok(waits > 0, "gate: the forward waited for layers still loading (%llu waits)",
       (unsigned long long)waits);

    skip_gate_on = 1;
    ok(run_loaded(&e, tok, got, &waits), "skip_layer_gate + slow_host_copy run");
    ok(tdm_kv_gate_bypasses(tdm_hicache_gate(e.hc)) > 0 &&
           tdm_kv_gate_poison_reads(tdm_hicache_gate(e.hc)) > 0,
       "skip_layer_gate: bypasses (%llu) and poison reads (%llu) counted",
       (unsigned long long)tdm_kv_gate_bypasses(tdm_hicache_gate(e.hc)),
       (unsigned long long)tdm_kv_gate_poison_reads(tdm_hicache_gate(e.hc)));
    skip_gate_on = 0;
    slow_ms = 0;
    eng_free(&ref);
    eng_free(&e);
    synth_free(&s);
}

int main(void)
{
    (void)ref_forward; /* forward-testutil.h's dense reference: the graph is the reference here */
    test_layouts();
    test_round_trips();
    test_corrupt_loads();
    test_named_flips(TDM_DTYPE_BF16, TDM_HICACHE_LAYER_FIRST);
    test_named_flips(TDM_DTYPE_FP8_E4M3, TDM_HICACHE_PAGE_FIRST);
    test_gate();
    done_testing();
    return exit_status();
}
