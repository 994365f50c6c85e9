/*
 * test-sample.c — the sampler: parameter checks, greedy, distributions of temperature / top-k /
 * top-p / min-p within tolerance over many draws, (seed, step) reproducibility independent of
 * call order, penalties (HF repetition, OpenAI presence/frequency), raw logprobs, and bad input.
 * Includes sample.c to reach the penalty stage directly.
 */
#include "../../dataplane/sample/sample.c"

#include "tap.h"

/* Reference ordering for the tests: heapsort best-first by (w desc, id asc). */
static void sift_down(const float *w, int32_t *a, size_t root, size_t n)
{
    /* heap whose root is the WORST element, so popping to the end sorts best-first */
    for (;;) {
        size_t c = 2 * root + 1;
        if (c >= n)
            return;
        if (c + 1 < n && better(w, a[c], a[c + 1]))
            c++;
        if (!better(w, a[root], a[c]))
            return;
        swap_i32(a, root, c);
        root = c;
    }
}

static void sort_best_first(const float *w, int32_t *a, size_t n)
{
    if (n < 2)
        return;
    for (size_t i = n / 2; i-- > 0;)
        sift_down(w, a, i, n);
    for (size_t end = n - 1; end > 0; end--) {
        swap_i32(a, 0, end);
        sift_down(w, a, 0, end);
    }
}

#define N_DRAWS 40000

static tdm_sample_scratch_t S;

static tdm_status_t draw(const tdm_sample_params_t *p, const float *l, uint32_t v, uint64_t step,
                         int32_t *id)
{
    tdm_sample_result_t r;
    tdm_status_t st = tdm_sample_token(p, l, v, NULL, step, &S, &r);
    if (st == TDM_OK)
        *id = r.id;
    return st;
}

/* Frequencies of each id over N_DRAWS steps; returns the max |freq - expected|. */
static double histogram_err(const tdm_sample_params_t *p, const float *l, uint32_t v,
                            const double *expect)
{
    unsigned hist[16] = {0};
    for (uint64_t s = 0; s < N_DRAWS; s++) {
        int32_t id = -1;
        if (draw(p, l, v, s, &id) != TDM_OK || id < 0 || id >= 16)
            return 1.0;
        hist[id]++;
    }
    double worst = 0.0;
    for (uint32_t i = 0; i < v; i++) {
        double d = fabs((double)hist[i] / N_DRAWS - expect[i]);
        if (d > worst)
            worst = d;
    }
    return worst;
}

static void normalize(double *p, uint32_t n)
{
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        s += p[i];
    for (uint32_t i = 0; i < n; i++)
        p[i] /= s;
}

static void set_bad(tdm_sample_params_t *q, size_t i)
{
    switch (i) {
    case 0:
        q->temperature = -1.0f;
        break;
    case 1:
        q->temperature = NAN;
        break;
    case 2:
        q->temperature = INFINITY;
        break;
    case 3:
        q->top_p = 0.0f;
        break;
    case 4:
        q->top_p = 1.5f;
        break;
    case 5:
        q->top_p = NAN;
        break;
    case 6:
        q->min_p = -0.1f;
        break;
    case 7:
        q->min_p = 1.1f;
        break;
    case 8:
        q->repetition_penalty = 0.0f;
        break;
    case 9:
        q->presence_penalty = 2.5f;
        break;
    case 10:
        q->frequency_penalty = -3.0f;
        break;
    default:
        q->top_logprobs = 21;
        break;
    }
}

static void test_params(void)
{
    tdm_sample_params_t p;
    char err[128] = "";
    tdm_sample_params_default(&p);
    is_int(tdm_sample_params_validate(&p, err, sizeof(err)), TDM_OK, "defaults are valid");
    static const char *const names[] = {"temperature",
                                        "temperature",
                                        "temperature",
                                        "top_p",
                                        "top_p",
                                        "top_p",
                                        "min_p",
                                        "min_p",
                                        "repetition_penalty",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "top_logprobs"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        tdm_sample_params_default(&p);
        set_bad(&p, i);
        err[0] = 0;
        tdm_status_t st = tdm_sample_params_validate(&p, err, sizeof(err));
        ok(st == TDM_ERR_RANGE && strstr(err, names[i]) != NULL, "bad %s rejected: %s", names[i],
           err);
        float l[2] = {0.0f, 1.0f};
        tdm_sample_result_t r = {.id = 77};
        ok(tdm_sample_token(&p, l, 2, NULL, 0, &S, &r) == TDM_ERR_RANGE && r.id == 77,
           "tdm_sample_token refuses bad %s and leaves the result alone", names[i]);
    }
}

static void test_greedy(void)
{
    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, -INFINITY};
    int32_t id = -1;
    int all = 1;
    for (uint64_t s = 0; s < 50; s++) {
        p.seed = s * 7919;
        all &= draw(&p, l, 6, s, &id) == TDM_OK && id == 1;
    }
    ok(all, "temperature 0 is argmax with ties to the lowest id, for any seed and step");

    p.temperature = 1.0f;
    p.top_k = 1;
    all = 1;
    for (uint64_t s = 0; s < 50; s++)
        all &= draw(&p, l, 6, s, &id) == TDM_OK && id == 1;
    ok(all, "top_k = 1 with temperature 1 is greedy");

    p.top_k = 0;
    p.top_p = 1e-7f;
    all = 1;
    for (uint64_t s = 0; s < 200; s++)
        all &= draw(&p, l, 6, s, &id) == TDM_OK && id == 1;
    ok(all, "a tiny top_p keeps only the best token (ties → lowest id)");

    p.top_p = 1.0f;
    p.temperature = 1e-30f;
    float l2[3] = {1.0f, 1.5f, 1.4999f};
    all = 1;
    for (uint64_t s = 0; s < 200; s++)
        all &= draw(&p, l2, 3, s, &id) == TDM_OK && id == 1;
    ok(all, "a denormal-small temperature behaves as greedy (no NaN from the scaling)");

    p.temperature = 1.0f;
    float huge[2] = {3e38f, -3e38f};
    all = 1;
    for (uint64_t s = 0; s < 50; s++)
        all &= draw(&p, huge, 2, s, &id) == TDM_OK && id == 0;
    ok(all, "extreme finite logits do not overflow into NaN");
}

static void test_bad_logits(void)
{
    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    tdm_sample_result_t r = {.id = 99};
    float nan_l[3] = {0.0f, NAN, 1.0f};
    float pinf[3] = {0.0f, INFINITY, 1.0f};
    float ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int temp = 0; temp < 2; temp++) {
        p.temperature = (float)temp;
        ok(tdm_sample_token(&p, nan_l, 3, NULL, 0, &S, &r) == TDM_ERR_INVAL && r.id == 99,
           "NaN logit → TDM_ERR_INVAL (temperature %d)", temp);
        ok(tdm_sample_token(&p, pinf, 3, NULL, 0, &S, &r) == TDM_ERR_INVAL && r.id == 99,
           "+inf logit → TDM_ERR_INVAL (temperature %d)", temp);
        ok(tdm_sample_token(&p, ninf, 3, NULL, 0, &S, &r) == TDM_ERR_INVAL && r.id == 99,
           "all -inf → TDM_ERR_INVAL (temperature %d)", temp);
    }
    float l[3] = {0.0f, 1.0f, 2.0f};
    ok(tdm_sample_token(&p, l, S.vocab + 1, NULL, 0, &S, &r) == TDM_ERR_INVAL,
       "vocab larger than the scratch → TDM_ERR_INVAL");
    ok(tdm_sample_token(&p, l, 0, NULL, 0, &S, &r) == TDM_ERR_INVAL, "vocab 0 → TDM_ERR_INVAL");
    int32_t bad_ids[2] = {1, 3};
    tdm_sample_history_t h = {bad_ids, 2, NULL, 0};
    p.repetition_penalty = 1.5f;
    ok(tdm_sample_token(&p, l, 3, &h, 0, &S, &r) == TDM_ERR_INVAL && r.id == 99,
       "history id >= vocab → TDM_ERR_INVAL");
    int32_t neg[1] = {-1};
    tdm_sample_history_t h2 = {NULL, 0, neg, 1};
    ok(tdm_sample_token(&p, l, 3, &h2, 0, &S, &r) == TDM_ERR_INVAL, "negative history id refused");
    tdm_sample_history_t h3 = {NULL, 2, NULL, 0};
    ok(tdm_sample_token(&p, l, 3, &h3, 0, &S, &r) == TDM_ERR_INVAL,
       "history count without an array refused");
}

static void test_distributions(void)
{
    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    p.seed = 12345;
    p.temperature = 1.0f;
    const double base[4] = {0.1, 0.2, 0.3, 0.4};
    float l[4];
    for (int i = 0; i < 4; i++)
        l[i] = (float)log(base[i]) + 5.0f; /* a shift must not matter */
    /* 4.5 sigma of a binomial frequency at p=0.5, N=40000 is ~0.011 */
    const double tol = 0.012;
    double e[4];

    memcpy(e, base, sizeof(e));
    double d = histogram_err(&p, l, 4, e);
    ok(d < tol, "temperature 1 reproduces the softmax (max freq error %.4f)", d);

    p.temperature = 2.0f;
    for (int i = 0; i < 4; i++)
        e[i] = sqrt(base[i]);
    normalize(e, 4);
    d = histogram_err(&p, l, 4, e);
    ok(d < tol, "temperature 2 flattens to p^(1/2) (max freq error %.4f)", d);

    p.temperature = 0.5f;
    for (int i = 0; i < 4; i++)
        e[i] = base[i] * base[i];
    normalize(e, 4);
    d = histogram_err(&p, l, 4, e);
    ok(d < tol, "temperature 0.5 sharpens to p^2 (max freq error %.4f)", d);

    p.temperature = 1.0f;
    p.top_k = 2;
    double ek[4] = {0, 0, 0.3 / 0.7, 0.4 / 0.7};
    d = histogram_err(&p, l, 4, ek);
    ok(d < tol, "top_k 2 keeps the two best, renormalized (max freq error %.4f)", d);

    p.top_k = 0;
    p.top_p = 0.5f; /* mass ahead of id 2 is 0.4 < 0.5: kept; ahead of id 1 is 0.7: cut */
    d = histogram_err(&p, l, 4, ek);
    ok(d < tol, "top_p 0.5 keeps {3, 2} (max freq error %.4f)", d);

    p.top_p = 0.75f; /* ahead of id 1: 0.7 < 0.75 → kept */
    double ep[4] = {0, 0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9};
    d = histogram_err(&p, l, 4, ep);
    ok(d < tol, "top_p 0.75 keeps {3, 2, 1} (max freq error %.4f)", d);

    p.top_p = 1.0f;
    p.min_p = 0.5f; /* keep p >= 0.2 */
    d = histogram_err(&p, l, 4, ep);
    ok(d < tol, "min_p 0.5 keeps p >= 0.2 (max freq error %.4f)", d);

    p.min_p = 0.0f;
    p.top_k = 3;
    p.top_p = 0.6f; /* top-k {3,2,1} renormalized: 4/9, 3/9, 2/9; ahead of id 2 is 4/9 < 0.6 */
    d = histogram_err(&p, l, 4, ek);
    ok(d < tol, "top_p applies to the renormalized top-k set (max freq error %.4f)", d);
}

/* Reference nucleus: full sort by (scaled logit desc, id asc), keep while the fixed-point mass
 * ahead passes tdm_sample_fx_top_p_keeps (tdm/sample_fx.h). Fills keep[id] = 1 for kept ids and
 * returns the count. p receives the sampler's (l - max)/T, fx its fixed-point probabilities. */
static uint64_t fx_buf[50000];
static size_t reference_top_p(const float *l, uint32_t v, float temp, float top_p, float *p,
                              int32_t *c, unsigned char *keep)
{
    float m = -INFINITY;
    for (uint32_t i = 0; i < v; i++)
        m = l[i] > m ? l[i] : m;
    uint64_t z = 0;
    for (uint32_t i = 0; i < v; i++) {
        p[i] = (l[i] - m) / temp;
        fx_buf[i] = tdm_sample_fx_exp(p[i]);
        c[i] = (int32_t)i;
        z += fx_buf[i];
        keep[i] = 0;
    }
    sort_best_first(p, c, v);
    uint64_t ahead = 0;
    size_t n = 0;
    while (n < v && tdm_sample_fx_top_p_keeps(ahead, z, top_p)) {
        keep[c[n]] = 1;
        ahead += fx_buf[c[n++]];
    }
    return n;
}

/* The sampler's nucleus on the same probabilities, compared as a set with the reference. */
static int same_nucleus(const float *l, uint32_t v, float temp, float top_p, float *p, int32_t *c,
                        unsigned char *keep, size_t *ret_n)
{
    size_t nref = reference_top_p(l, v, temp, top_p, p, c, keep);
    for (uint32_t i = 0; i < v; i++)
        c[i] = (int32_t)i;
    size_t n = top_p_keep(p, fx_buf, c, v, top_p);
    int same = n == nref;
    for (size_t i = 0; i < n && same; i++)
        same = keep[c[i]] == 1;
    *ret_n = n;
    return same;
}

static void test_big_vocab(void)
{
    const uint32_t v = 50000;
    float *l = malloc(v * sizeof(float)), *w = malloc(v * sizeof(float));
    int32_t *c = malloc(v * sizeof(int32_t));
    unsigned char *keep = malloc(v);
    uint64_t x = 42;
    for (uint32_t i = 0; i < v; i++) {
        x = tdm_sample_fx_mix64(x);
        l[i] = (float)((double)(x >> 11) * 0x1.0p-53 * 12.0 - 6.0);
    }
    l[777] = l[778]; /* a tie */
    const float tps[4] = {0.05f, 0.5f, 0.9f, 0.999f};
    for (int k = 0; k < 4; k++) {
        size_t n = 0;
        int same = same_nucleus(l, v, 0.8f, tps[k], w, c, keep, &n);
        ok(same,
           "top_p %.3f over 50k flat-ish tokens: the quickselect nucleus (%zu) equals a full sort",
           (double)tps[k], n);
    }
    /* many exact ties: logits quantized to 8 levels */
    float *q = malloc(v * sizeof(float));
    for (uint32_t i = 0; i < v; i++)
        q[i] = (float)(tdm_sample_fx_mix64(i) % 8);
    for (int k = 0; k < 4; k++) {
        size_t n = 0;
        int same = same_nucleus(q, v, 1.0f, tps[k], w, c, keep, &n);
        ok(same,
           "top_p %.3f with 8 tied levels: nucleus (%zu) equals a full sort (ties → lowest id)",
           (double)tps[k], n);
    }

    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.seed = 99;
    reference_top_p(l, v, p.temperature, p.top_p, w, c, keep);
    int inside = 1;
    for (uint64_t s = 0; s < 200; s++) {
        int32_t id = -1;
        inside &= draw(&p, l, v, s, &id) == TDM_OK && keep[id];
    }
    ok(inside, "200 top-p draws over 50k tokens all fall inside the reference nucleus");

    p.top_p = 1.0f;
    p.top_k = 40;
    int in_top = 1;
    for (uint32_t i = 0; i < v; i++)
        c[i] = (int32_t)i;
    sort_best_first(l, c, v);
    for (uint64_t s = 0; s < 200; s++) {
        int32_t id = -1;
        int found = 0;
        if (draw(&p, l, v, s, &id) != TDM_OK)
            in_top = 0;
        for (int k = 0; k < 40; k++)
            found |= c[k] == id;
        in_top &= found;
    }
    ok(in_top, "top_k 40 over 50k tokens only ever draws one of the 40 best");
    free(l);
    free(w);
    free(c);
    free(q);
    free(keep);
}

static void test_reproducible(void)
{
    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    p.temperature = 1.0f;
    p.seed = 7;
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int32_t a[64] = {0}, b[64] = {0}, other = -1;
    for (uint64_t s = 0; s < 64; s++)
        draw(&p, l, 8, s, &a[s]);
    /* same request again, interleaved with another request and in reverse step order */
    tdm_sample_params_t q = p;
    q.seed = 8;
    for (uint64_t s = 64; s-- > 0;) {
        draw(&q, l, 8, s, &other);
        draw(&p, l, 8, s, &b[s]);
    }
    ok(memcmp(a, b, sizeof(a)) == 0, "(seed, step) fixes the draw whatever runs beside it");
    int differ = 0;
    for (uint64_t s = 0; s < 64; s++) {
        draw(&q, l, 8, s, &other);
        differ += other != a[s];
    }
    ok(differ > 30, "another seed gives another sequence (%d/64 differ)", differ);
    ok(tdm_sample_uniform(1, 2) == tdm_sample_uniform(1, 2) &&
           tdm_sample_uniform(1, 2) != tdm_sample_uniform(2, 1),
       "the generator is a pure, asymmetric function of (seed, step)");
    double mean = 0;
    for (uint64_t s = 0; s < 100000; s++) {
        double u = tdm_sample_uniform(3, s);
        if (u < 0 || u >= 1)
            mean = -1e9;
        mean += u;
    }
    mean /= 100000;
    ok(fabs(mean - 0.5) < 0.005, "uniforms lie in [0,1) with mean 0.5 (%.4f)", mean);
}

static int counts_zero(void)
{
    for (uint32_t i = 0; i < S.vocab; i++)
        if (S.count[i])
            return 0;
    return 1;
}

static void test_penalties(void)
{
    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    float w[5] = {2.0f, -1.0f, 0.5f, 1.0f, 0.0f};
    int32_t prompt[4] = {0, 0, 0, 1};
    int32_t gen[3] = {1, 2, 2};
    tdm_sample_history_t h = {prompt, 4, gen, 3};

    p.repetition_penalty = 2.0f;
    apply_penalties(&p, &h, w, S.count);
    ok(w[0] == 1.0f && w[1] == -2.0f && w[2] == 0.25f && w[3] == 1.0f && w[4] == 0.0f,
       "repetition: positive /r, negative *r, once per distinct token of prompt+generated");
    ok(counts_zero(), "counters are back to zero");

    float w2[5] = {2.0f, -1.0f, 0.5f, 1.0f, 0.0f};
    tdm_sample_params_default(&p);
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    apply_penalties(&p, &h, w2, S.count);
    ok(w2[0] == 2.0f && w2[1] == -1.75f && w2[2] == -0.75f && w2[3] == 1.0f,
       "presence/frequency: count*f + p over generated tokens only, prompt untouched");
    ok(counts_zero(), "counters are back to zero");

    /* through the public path: greedy changes once penalties bite */
    float l[3] = {2.0f, 1.9f, 0.0f};
    int32_t g1[2] = {0, 0};
    tdm_sample_history_t hg = {NULL, 0, g1, 2};
    tdm_sample_result_t r;
    tdm_sample_params_default(&p);
    p.frequency_penalty = 0.1f;
    ok(tdm_sample_token(&p, l, 3, &hg, 2, &S, &r) == TDM_OK && r.id == 1,
       "frequency penalty 0.1 x2 moves greedy from id 0 to id 1");
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.05f;
    ok(tdm_sample_token(&p, l, 3, &hg, 2, &S, &r) == TDM_OK && r.id == 0,
       "presence penalty counts a token once (0.05 < margin)");
    ok(counts_zero(), "counters are back to zero after public calls");
}

static void test_logprobs(void)
{
    tdm_sample_params_t p;
    tdm_sample_params_default(&p);
    p.logprobs = 1;
    p.top_logprobs = 3;
    float l[5] = {1.0f, 1.0f, 1.0f, 1.0f, -INFINITY};
    tdm_sample_result_t r;
    ok(tdm_sample_token(&p, l, 5, NULL, 0, &S, &r) == TDM_OK, "logprobs over a flat row");
    ok(r.id == 0 && fabsf(r.logprob - logf(0.25f)) < 1e-6f, "chosen logprob is log(1/4) (%g)",
       (double)r.logprob);
    ok(r.n_top == 3 && r.top_ids[0] == 0 && r.top_ids[1] == 1 && r.top_ids[2] == 2,
       "top list ties broken by lowest id");
    p.top_logprobs = 20;
    tdm_sample_token(&p, l, 5, NULL, 0, &S, &r);
    ok(r.n_top == 4, "top list skips -inf tokens and stops at the vocabulary (%u)", r.n_top);

    float l2[4] = {0.0f, 2.0f, 1.0f, -1.0f};
    double z = exp(0.0) + exp(2.0) + exp(1.0) + exp(-1.0);
    p.top_logprobs = 2;
    p.temperature = 0.3f;
    p.repetition_penalty = 3.0f;
    int32_t gen[1] = {1};
    tdm_sample_history_t h = {NULL, 0, gen, 1};
    int good = 1;
    for (uint64_t s = 0; s < 20; s++) {
        good &= tdm_sample_token(&p, l2, 4, &h, s, &S, &r) == TDM_OK;
        good &= fabs(r.logprob - (l2[r.id] - log(z))) < 1e-6;
        good &= r.top_ids[0] == 1 && r.top_ids[1] == 2;
        good &= fabs(r.top_logprobs[0] - (2.0 - log(z))) < 1e-6;
    }
    ok(good, "logprobs are of the raw distribution, untouched by temperature and penalties");
    p.logprobs = 0;
    p.top_logprobs = 0;
    tdm_sample_token(&p, l2, 4, &h, 0, &S, &r);
    ok(r.n_top == 0 && r.logprob == 0.0f, "no logprobs unless asked");
}

/* tdm/sample_fx.h: the portable exp against libm's, the exact scale against 128-bit arithmetic,
 * the key order against float order */
static void test_fixed_point(void)
{
    double worst = 0.0;
    int exact_ends = tdm_sample_fx_exp(0.0f) == TDM_SAMPLE_FX_ONE &&
                     tdm_sample_fx_exp(-28.0f) == 0 && tdm_sample_fx_exp(-100.0f) == 0 &&
                     tdm_sample_fx_exp(-INFINITY) == 0;
    for (int i = 1; i < 200000; i++) {
        float x = -27.9f * (float)i / 200000.0f;
        double want = ldexp(exp((double)x), 40);
        double got = (double)tdm_sample_fx_exp(x);
        double rel = fabs(got - want) / want;
        if (want > 1e9 && rel > worst)
            worst = rel;
    }
    ok(exact_ends && worst < 5e-7, "fixed-point exp: q(0) = 2^40, 0 from -28, rel err %.2g", worst);
    int scale_ok = 1;
    uint64_t x = 5;
    for (int i = 0; i < 100000 && scale_ok; i++) {
        x = tdm_sample_fx_mix64(x);
        uint64_t u = x >> 11, t = tdm_sample_fx_mix64(x) >> (i % 40);
        __extension__ unsigned __int128 w = (unsigned __int128)u * t;
        scale_ok = tdm_sample_fx_scale(u, t) == (uint64_t)(w >> 53) &&
                   tdm_sample_fx_scale(u, t) < t + (t == 0);
    }
    ok(scale_ok, "floor(u53 * total / 2^53) equals 128-bit arithmetic and stays below total");
    const float f[7] = {-INFINITY, -1e30f, -2.5f, -1e-40f, -0.0f, 0.0f, 3.0f};
    int key_ok = tdm_sample_fx_key(-0.0f) == tdm_sample_fx_key(0.0f);
    for (int i = 0; i + 1 < 7; i++)
        if (f[i] < f[i + 1])
            key_ok &= tdm_sample_fx_key(f[i]) < tdm_sample_fx_key(f[i + 1]);
    ok(key_ok, "order keys follow float order, -0 and +0 one key");
}

int main(void)
{
    if (tdm_sample_scratch_init(&S, 50000) != TDM_OK)
        return 1;
    tdm_sample_scratch_t none;
    ok(tdm_sample_scratch_init(&none, 0) == TDM_ERR_INVAL, "scratch for 0 tokens refused");
    test_params();
    test_greedy();
    test_bad_logits();
    test_distributions();
    test_big_vocab();
    test_reproducible();
    test_penalties();
    test_logprobs();
    test_fixed_point();
    ok(counts_zero(), "scratch counters are zero after every test");
    tdm_sample_scratch_free(&S);
    tdm_sample_scratch_free(&S);
    return done_testing();
}
