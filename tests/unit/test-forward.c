/*
 * test-forward.c — the forward graph on synthetic checkpoints: correctness against a dense fp64
 * reference (Llama with llama3 RoPE and GQA; Qwen2 with biases and tied embeddings), then the
 * determinism of docs/design.md §9, bit for bit: chunked prefill (chunks 1, 3, 7, 16, all) == whole
 * prefill; batched decode (mixed lengths, several batch orders) == one sequence at a time ==
 * prefill logits of the same positions; TP=2 (two threads, in-process collective) == TP=1; and
 * the KV dtypes (f32, bf16, fp8) against each other.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include <tdm/kv.h>

#include "forward-testutil.h"
#include "graph.h"
#include "tap.h"

#define PS 16u
#define MAXP 64u

static tdm_model_config_t cfg_llama(void)
{
    tdm_model_config_t c;
    memset(&c, 0, sizeof(c));
    c.arch = TDM_ARCH_LLAMA;
    c.vocab_size = 300;
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 32;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 500000.0f;
    c.rope_type = TDM_ROPE_LLAMA3;
    c.rope_factor = 8.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_pos = 16;
    c.weight_dtype = TDM_DTYPE_BF16;
    return c;
}

static tdm_model_config_t cfg_qwen(void)
{
    tdm_model_config_t c = cfg_llama();
    c.arch = TDM_ARCH_QWEN2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 64; /* per-rank o_proj K at TP 2 = 128: a multiple of 64 */
    c.rope_type = TDM_ROPE_DEFAULT;
    c.rope_theta = 1e6f;
    c.attention_bias = 1;
    c.tie_word_embeddings = 1;
    c.rms_norm_eps = 1e-6f;
    return c;
}

/* One rank's engine: backend, KV pool, graph; sequences get pages from the pool. */
typedef struct engine {
    tdm_backend_t be;
    tdm_kv_pool_t *pool;
    tdm_graph_t *g;
    tdm_model_view_t view;
} engine_t;

static int engine_init(engine_t *e, const synth_t *s, uint32_t N, uint32_t r, tdm_dtype_t kvdt,
                       uint32_t threads, const tdm_graph_coll_t *coll)
{
    tdm_kv_layout_t l;
    memset(e, 0, sizeof(*e));
    synth_view(s, N, r, &e->view);
    if (tdm_backend_cpu_init(threads, &e->be) != TDM_OK ||
        tdm_kv_layout_init(&s->cfg, kvdt, PS, N, r, &l) != TDM_OK ||
        tdm_kv_pool_init(&l, 256, &e->pool) != TDM_OK)
        return 0;
    return tdm_graph_init(&e->view, tdm_kv_pool_buffers(e->pool), &e->be, coll, 256, &e->g) ==
           TDM_OK;
}

static void engine_free(engine_t *e)
{
    tdm_graph_free(e->g);
    tdm_kv_pool_free(e->pool);
    tdm_backend_cpu_free(&e->be);
    free(e->view.layers);
}

/* Run tokens[0..L) of one sequence in chunks of `chunk`; all-row logits into out (L, vocab). */
static tdm_status_t run_chunked(engine_t *e, tdm_kv_seq_t *seq, const int32_t *tok, uint32_t L,
                                uint32_t chunk, float *out)
{
    uint32_t V = e->view.cfg->vocab_size, rows;
    for (uint32_t p = 0; p < L; p += chunk) {
        uint32_t n = L - p < chunk ? L - p : chunk;
        tdm_graph_seq_t sq = {tok + p, n, p, NULL, 0, 1};
        TDM_TRY(tdm_kv_seq_reserve(e->pool, seq, p + n));
        sq.pages = seq->pages;
        sq.n_pages = seq->n_pages;
        TDM_TRY(tdm_graph_forward(e->g, &sq, 1, out + (size_t)p * V, n, &rows));
    }
    return TDM_OK;
}

static double max_rel_err(const float *got, const double *ref, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(got[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
    return m;
}

static void make_tokens(int32_t *t, uint32_t n, uint32_t vocab, uint32_t seed)
{
    for (uint32_t i = 0; i < n; i++)
        t[i] = (int32_t)((i * 2654435761u + seed * 40503u) % vocab);
}

static void test_reference(const char *name, const synth_t *s)
{
    const uint32_t L = 40, V = s->cfg.vocab_size;
    engine_t e;
    tdm_kv_seq_t seq;
    int32_t tok[40];
    float *lg = malloc(sizeof(float) * L * V);
    double *ref = malloc(sizeof(double) * L * V);

    make_tokens(tok, L, V, 1);
    ok(engine_init(&e, s, 1, 0, TDM_DTYPE_F32, 2, NULL), "%s: engine (f32 KV)", name);
    tdm_kv_seq_init(&seq, MAXP);
    is_int(run_chunked(&e, &seq, tok, L, L, lg), TDM_OK, "%s: prefill of 40", name);
    ref_forward(s, tok, L, ref);
    double err = max_rel_err(lg, ref, (size_t)L * V);
    ok(err < 1e-4, "%s: logits of every position vs fp64 reference: max err %.2e", name, err);
    tdm_kv_seq_free(e.pool, &seq);
    engine_free(&e);
    free(lg);
    free(ref);
}

static void test_chunking(const synth_t *s, tdm_dtype_t kvdt, const char *kvname)
{
    const uint32_t L = 50, V = s->cfg.vocab_size;
    const uint32_t chunks[] = {1, 3, 7, 16};
    engine_t e;
    int32_t tok[50];
    float *whole = malloc(sizeof(float) * L * V), *part = malloc(sizeof(float) * L * V);
    tdm_kv_seq_t seq;
    uint32_t junk;

    make_tokens(tok, L, V, 2);
    engine_init(&e, s, 1, 0, kvdt, 3, NULL);
    tdm_kv_seq_init(&seq, MAXP);
    is_int(run_chunked(&e, &seq, tok, L, L, whole), TDM_OK, "%s KV: whole prefill of 50", kvname);
    tdm_kv_seq_free(e.pool, &seq);
    for (uint32_t c = 0; c < 4; c++) {
        /* hold a page so each run lands on different page ids */
        tdm_kv_page_alloc(e.pool, 1, &junk);
        tdm_kv_seq_init(&seq, MAXP);
        tdm_status_t st = run_chunked(&e, &seq, tok, L, chunks[c], part);
        ok(st == TDM_OK && !memcmp(part, whole, sizeof(float) * L * V),
           "%s KV: chunks of %u == whole prefill, all 50 positions bit-identical", kvname,
           chunks[c]);
        tdm_kv_seq_free(e.pool, &seq);
    }
    engine_free(&e);
    free(whole);
    free(part);
}

/* Three sequences of mixed prompt lengths; decode 6 steps batched in different orders and one
 * at a time; every logit row must be identical, and equal the all-logits prefill of the same
 * token stream. */
static void test_batched_decode(const synth_t *s)
{
    const uint32_t V = s->cfg.vocab_size, S = 3, STEPS = 6;
    const uint32_t plen[3] = {5, 17, 33};
    const uint32_t orders[3][3] = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0}};
    int32_t streams[3][64];
    float *ref_rows = malloc(sizeof(float) * S * STEPS * V);
    float *lg = malloc(sizeof(float) * 3 * V);
    engine_t e;
    int all_ok = 1, vs_prefill = 1;

    engine_init(&e, s, 1, 0, TDM_DTYPE_BF16, 2, NULL);
    for (uint32_t q = 0; q < S; q++)
        make_tokens(streams[q], plen[q] + STEPS, V, 10 + q);
    /* mode 0: one at a time (reference); modes 1..3: batched in an order */
    for (uint32_t mode = 0; mode < 4; mode++) {
        tdm_kv_seq_t seqs[3];
        uint32_t rows;
        for (uint32_t q = 0; q < S; q++) {
            tdm_kv_seq_init(&seqs[q], MAXP);
            tdm_kv_seq_reserve(e.pool, &seqs[q], plen[q]);
            tdm_graph_seq_t sq = {streams[q], plen[q], 0, seqs[q].pages, seqs[q].n_pages, 0};
            tdm_graph_forward(e.g, &sq, 1, lg, 3, &rows);
        }
        for (uint32_t step = 0; step < STEPS; step++) {
            tdm_graph_seq_t b[3];
            for (uint32_t j = 0; j < S; j++) {
                uint32_t q = mode ? orders[mode - 1][j] : j;
                uint32_t pos = plen[q] + step; /* feed the stream's next token */
                tdm_kv_seq_reserve(e.pool, &seqs[q], pos + 1);
                b[j] =
                    (tdm_graph_seq_t){&streams[q][pos], 1, pos, seqs[q].pages, seqs[q].n_pages, 0};
            }
            if (mode == 0) {
                for (uint32_t q = 0; q < S; q++) {
                    tdm_graph_forward(e.g, &b[q], 1, lg, 1, &rows);
                    memcpy(ref_rows + ((size_t)q * STEPS + step) * V, lg, sizeof(float) * V);
                }
            } else {
                if (tdm_graph_forward(e.g, b, S, lg, 3, &rows) != TDM_OK || rows != 3)
                    all_ok = 0;
                for (uint32_t j = 0; j < S; j++) {
                    uint32_t q = orders[mode - 1][j];
                    all_ok &= !memcmp(lg + (size_t)j * V, ref_rows + ((size_t)q * STEPS + step) * V,
                                      sizeof(float) * V);
                }
            }
        }
        for (uint32_t q = 0; q < S; q++)
            tdm_kv_seq_free(e.pool, &seqs[q]);
    }
    ok(all_ok, "batched decode (3 seqs, lengths 5/17/33, 3 orders, 6 steps) == one at a time");

    /* decode rows == prefill of the whole stream, all logits */
    for (uint32_t q = 0; q < S; q++) {
        uint32_t L = plen[q] + STEPS;
        float *full = malloc(sizeof(float) * L * V);
        tdm_kv_seq_t seq;
        tdm_kv_seq_init(&seq, MAXP);
        run_chunked(&e, &seq, streams[q], L, L, full);
        for (uint32_t step = 0; step < STEPS; step++)
            vs_prefill &= !memcmp(full + (size_t)(plen[q] + step) * V,
                                  ref_rows + ((size_t)q * STEPS + step) * V, sizeof(float) * V);
        tdm_kv_seq_free(e.pool, &seq);
        free(full);
    }
    ok(vs_prefill, "decode step logits == whole-prefill logits at the same positions");
    engine_free(&e);
    free(ref_rows);
    free(lg);
}

typedef struct tp_arg {
    const synth_t *s;
    uint32_t N, r;
    tdm_graph_coll_local_t *coll;
    const int32_t *tok;
    uint32_t L;
    float *out; /* (L, V) prefill logits then 4 decode rows */
    int ok;
    int exact;
} tp_arg_t;

static void *tp_rank(void *varg)
{
    tp_arg_t *a = varg;
    engine_t e;
    tdm_graph_coll_t c = tdm_graph_coll_local_rank(a->coll, a->r);
    tdm_kv_seq_t seq;
    uint32_t V = a->s->cfg.vocab_size, rows;

    a->ok = engine_init(&e, a->s, a->N, a->r, TDM_DTYPE_BF16, 1, &c);
    if (!a->ok)
        return NULL; /* the other rank would block: tests below report it */
    a->exact = tdm_graph_tp_exact(e.g);
    tdm_kv_seq_init(&seq, MAXP);
    a->ok &= run_chunked(&e, &seq, a->tok, a->L - 4, 9, a->out) == TDM_OK;
    for (uint32_t t = a->L - 4; t < a->L; t++) {
        tdm_kv_seq_reserve(e.pool, &seq, t + 1);
        tdm_graph_seq_t sq = {a->tok + t, 1, t, seq.pages, seq.n_pages, 0};
        a->ok &= tdm_graph_forward(e.g, &sq, 1, a->out + (size_t)t * V, 1, &rows) == TDM_OK;
    }
    tdm_kv_seq_free(e.pool, &seq);
    engine_free(&e);
    return NULL;
}

static void test_tp(const char *name, const synth_t *s)
{
    const uint32_t L = 30, V = s->cfg.vocab_size;
    int32_t tok[30];
    float *one = calloc((size_t)L * V, 4),
          *two[2] = {calloc((size_t)L * V, 4), calloc((size_t)L * V, 4)};
    tdm_graph_coll_local_t *c1, *c2;
    pthread_t th[2];

    make_tokens(tok, L, V, 5);
    tdm_graph_coll_local_init(1, &c1);
    tdm_graph_coll_local_init(2, &c2);
    tp_arg_t a1 = {s, 1, 0, c1, tok, L, one, 0, 0};
    tp_rank(&a1);
    tp_arg_t a2[2] = {{s, 2, 0, c2, tok, L, two[0], 0, 0}, {s, 2, 1, c2, tok, L, two[1], 0, 0}};
    for (int r = 0; r < 2; r++)
        pthread_create(&th[r], NULL, tp_rank, &a2[r]);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    ok(a1.ok && a2[0].ok && a2[1].ok, "%s: TP=1 and TP=2 ran", name);
    ok(a2[0].exact && a2[1].exact, "%s: TP=2 shares meet the exactness conditions", name);
    ok(!memcmp(two[0], two[1], sizeof(float) * L * V), "%s: both TP=2 ranks hold the same logits",
       name);
    ok(!memcmp(one, two[0], sizeof(float) * L * V),
       "%s: TP=2 == TP=1 bit-identical (chunked prefill + 4 decode steps)", name);
    tdm_graph_coll_local_free(c1);
    tdm_graph_coll_local_free(c2);
    free(one);
    free(two[0]);
    free(two[1]);
}

typedef struct fill_arg {
    tdm_graph_coll_local_t *coll;
    uint32_t r;
    float buf[4];
} fill_arg_t;

static void *fill_rank(void *varg)
{
    fill_arg_t *a = varg;
    tdm_graph_coll_t c = tdm_graph_coll_local_rank(a->coll, a->r);
    c.allreduce_sum(c.ctx, a->buf, 4);
    return NULL;
}

/* The vocab-parallel embedding fills the rows a rank does not own with -0.0: the tree sum must
 * then return the owner's value bit for bit, the sign of a zero included (a +0.0 fill would turn
 * an owned -0.0 into +0.0). */
static void test_embed_fill(void)
{
    tdm_graph_coll_local_t *c;
    pthread_t th[2];
    const float F = -0.0f;
    /* element 0: rank 0 owns -0.0; 1: rank 1 owns -0.0; 2: rank 0 owns +0.0; 3: rank 1 owns 1.5 */
    fill_arg_t a[2] = {{NULL, 0, {-0.0f, F, +0.0f, F}}, {NULL, 1, {F, -0.0f, F, 1.5f}}};
    fill_arg_t p[2] = {{NULL, 0, {-0.0f, +0.0f, +0.0f, +0.0f}}, {NULL, 1, {+0.0f, -0.0f, 0, 1.5f}}};
    tdm_graph_coll_local_init(2, &c);
    for (int i = 0; i < 2; i++) {
        a[i].coll = p[i].coll = c;
    }
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, fill_rank, &a[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, fill_rank, &p[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    const float want[4] = {-0.0f, -0.0f, +0.0f, 1.5f};
    ok(!memcmp(a[0].buf, want, sizeof(want)) && !memcmp(a[1].buf, want, sizeof(want)),
       "embedding all-reduce with -0.0 fill keeps the owner's bits (-0.0 and +0.0 included)");
    ok(!signbit(p[0].buf[0]) && !signbit(p[0].buf[1]),
       "(a +0.0 fill would not: -0.0 + +0.0 is +0.0)");
    tdm_graph_coll_local_free(c);
}

static void test_kv_dtypes(const synth_t *s)
{
    const uint32_t L = 40, V = s->cfg.vocab_size;
    const tdm_dtype_t dts[3] = {TDM_DTYPE_F32, TDM_DTYPE_BF16, TDM_DTYPE_FP8_E4M3};
    float *lg[3];
    int32_t tok[40];
    make_tokens(tok, L, V, 3);
    for (int i = 0; i < 3; i++) {
        engine_t e;
        tdm_kv_seq_t seq;
        lg[i] = malloc(sizeof(float) * L * V);
        engine_init(&e, s, 1, 0, dts[i], 2, NULL);
        tdm_kv_seq_init(&seq, MAXP);
        run_chunked(&e, &seq, tok, L, 11, lg[i]);
        tdm_kv_seq_free(e.pool, &seq);
        engine_free(&e);
    }
    for (int i = 1; i < 3; i++) {
        double m = 0;
        int argmax_same = 0;
        for (uint32_t p = 0; p < L; p++) {
            uint32_t a = 0, b = 0;
            for (uint32_t v = 0; v < V; v++) {
                size_t idx = (size_t)p * V + v;
                m = fmax(m, fabs(lg[i][idx] - lg[0][idx]) / fmax(1.0, fabs(lg[0][idx])));
                if (lg[0][idx] > lg[0][(size_t)p * V + a])
                    a = v;
                if (lg[i][idx] > lg[i][(size_t)p * V + b])
                    b = v;
            }
            argmax_same += a == b;
        }
        ok(m < (i == 1 ? 0.05 : 0.6) && argmax_same >= (i == 1 ? 39 : 36),
           "%s KV vs f32 KV: max rel logit diff %.3g, argmax agrees %d/40", i == 1 ? "bf16" : "fp8",
           m, argmax_same);
    }
    for (int i = 0; i < 3; i++)
        free(lg[i]);
}

static void test_errors(const synth_t *s)
{
    engine_t e;
    tdm_kv_seq_t seq;
    float *lg = malloc(sizeof(float) * 4 * s->cfg.vocab_size);
    uint32_t rows;
    int32_t tok[4] = {1, 2, 3, 300};
    engine_init(&e, s, 1, 0, TDM_DTYPE_BF16, 1, NULL);
    tdm_kv_seq_init(&seq, MAXP);
    tdm_kv_seq_reserve(e.pool, &seq, 4);
    tdm_graph_seq_t sq = {tok, 4, 0, seq.pages, seq.n_pages, 0};
    is_int(tdm_graph_forward(e.g, &sq, 1, lg, 4, &rows), TDM_ERR_RANGE, "token id = vocab refused");
    sq.n_tokens = 3;
    sq.pos0 = 14;
    is_int(tdm_graph_forward(e.g, &sq, 1, lg, 4, &rows), TDM_ERR_RANGE,
           "positions beyond the page table refused");
    sq.pos0 = 0;
    sq.all_logits = 1;
    is_int(tdm_graph_forward(e.g, &sq, 1, lg, 2, &rows), TDM_ERR_OVERFLOW,
           "more logit rows than the buffer holds refused");
    uint32_t bad_pages[1] = {100000};
    sq.pages = bad_pages;
    sq.n_pages = 1;
    is_int(tdm_graph_forward(e.g, &sq, 1, lg, 4, &rows), TDM_ERR_RANGE, "page id beyond the pool");
    tdm_model_view_t v2 = e.view;
    v2.kv_heads_r = 1;
    tdm_graph_t *g2;
    is_int(tdm_graph_init(&v2, tdm_kv_pool_buffers(e.pool), &e.be, NULL, 8, &g2), TDM_ERR_INVAL,
           "view that does not match the KV layout refused");
    v2 = e.view;
    v2.vocab_r = v2.embed.rows = v2.lm_head.rows = s->cfg.vocab_size - 1;
    is_int(tdm_graph_init(&v2, tdm_kv_pool_buffers(e.pool), &e.be, NULL, 8, &g2), TDM_ERR_INVAL,
           "embedding rows that are not the view's vocab share refused");
    tdm_kv_seq_free(e.pool, &seq);
    engine_free(&e);
    free(lg);
}

int main(void)
{
    synth_t llama, qwen;
    tdm_model_config_t cl = cfg_llama(), cq = cfg_qwen();
    synth_init(&llama, &cl);
    synth_init(&qwen, &cq);

    test_reference("llama (GQA, llama3 rope)", &llama);
    test_reference("qwen2 (bias, tied)", &qwen);
    test_chunking(&llama, TDM_DTYPE_BF16, "bf16");
    test_chunking(&qwen, TDM_DTYPE_FP8_E4M3, "fp8");
    test_batched_decode(&llama);
    test_tp("llama", &llama);
    test_tp("qwen2", &qwen);
    {
        /* vocab not divisible by 2: rank 0 owns 150 rows, rank 1 151 */
        synth_t odd;
        tdm_model_config_t co = cfg_qwen();
        co.vocab_size = 301;
        synth_init(&odd, &co);
        test_tp("qwen2 vocab 301 (uneven vocab split)", &odd);
        synth_free(&odd);
    }
    test_embed_fill();
    test_kv_dtypes(&llama);
    test_errors(&llama);

    synth_free(&llama);
    synth_free(&qwen);
    return done_testing();
}
