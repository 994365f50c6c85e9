/*
 * cpu.c — the CPU backend table and its elementwise and row kernels (embedding gather, fused
 * residual + RMSNorm, RoPE, SiLU·mul, logits, argmax). The heavy kernels live in matmul.c and
 * attn.c; every reduction follows backend.h (tdm_dot_f32 for sums of squares), and threads only
 * ever split rows.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include <tdm/log.h>

#include "kernels/cpu/cpu_int.h"

int tdm_cpu_weight_dtype_ok(tdm_dtype_t dt)
{
    return dt == TDM_DTYPE_BF16 || dt == TDM_DTYPE_F16 || dt == TDM_DTYPE_F32;
}

void tdm_cpu_weight_row(const tdm_tensor_t *t, size_t i, size_t j0, size_t count, float *dst)
{
    size_t base = i * t->row_stride + j0;
    switch (t->dtype) {
    case TDM_DTYPE_BF16: {
        const uint16_t *s = (const uint16_t *)t->data + base;
        for (size_t j = 0; j < count; j++)
            dst[j] = tdm_cpu_bf16(s[j]);
        break;
    }
    case TDM_DTYPE_F16: {
        const uint16_t *s = (const uint16_t *)t->data + base;
        for (size_t j = 0; j < count; j++)
            dst[j] = tdm_cpu_f16(s[j]);
        break;
    }
    default:
        memcpy(dst, (const float *)t->data + base, count * sizeof(float));
        break;
    }
}

static int vec_ok(const tdm_tensor_t *w, uint32_t d)
{
    return w && w->data && tdm_cpu_weight_dtype_ok(w->dtype) && (uint64_t)w->rows * w->cols == d;
}

typedef struct row_job {
    const tdm_tensor_t *table;
    const int32_t *ids;
    float *resid, *out;
    const float *add;
    float eps;
    uint32_t d;
} row_job_t;

static void embed_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    row_job_t *j = arg;
    for (size_t i = lo; i < hi; i++)
        tdm_cpu_weight_row(j->table, (size_t)j->ids[i], 0, j->d, j->out + i * j->d);
}

static tdm_status_t cpu_embed(void *ctx, const tdm_tensor_t *table, const int32_t *ids, uint32_t n,
                              float *out)
{
    row_job_t j = {.table = table, .ids = ids, .out = out};
    if (!table || !table->data || !tdm_cpu_weight_dtype_ok(table->dtype) || (n && (!ids || !out)))
        return TDM_ERR_INVAL;
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= table->rows)
            return TDM_ERR_RANGE;
    j.d = table->cols;
    tdm_cpu_parallel(ctx, n, 4, embed_range, &j);
    return TDM_OK;
}

static void rms_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    row_job_t *j = arg;
    uint32_t d = j->d;
    for (size_t i = lo; i < hi; i++) {
        float *r = j->resid + i * d, *o = j->out + i * d;
        if (j->add) {
            const float *a = j->add + i * d;
            for (uint32_t c = 0; c < d; c++)
                r[c] = r[c] + a[c];
        }
        float mean = tdm_dot_f32(r, r, d) / (float)d;
        float inv = 1.0f / sqrtf(mean + j->eps);
        for (uint32_t c = 0; c < d; c++)
            o[c] = tdm_cpu_weight(j->table, 0, c) * (r[c] * inv);
    }
}

static tdm_status_t cpu_rmsnorm_add(void *ctx, float *resid, const float *add,
                                    const tdm_tensor_t *w, float eps, uint32_t n, uint32_t d,
                                    float *out)
{
    row_job_t j = {.table = w, .resid = resid, .add = add, .out = out, .eps = eps, .d = d};
    if (!vec_ok(w, d) || d == 0 || (n && (!resid || !out)))
        return TDM_ERR_INVAL;
    tdm_cpu_parallel(ctx, n, 4, rms_range, &j);
    return TDM_OK;
}

typedef struct rope_job {
    const tdm_rope_t *rope;
    float *x;
    const uint32_t *pos;
    uint32_t heads;
} rope_job_t;

static void rope_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    rope_job_t *j = arg;
    uint32_t hd = j->rope->head_dim, half = hd / 2;
    float cs[TDM_ROPE_MAX_HALF], sn[TDM_ROPE_MAX_HALF];
    for (size_t i = lo; i < hi; i++) {
        for (uint32_t f = 0; f < half; f++) {
            float ang = (float)j->pos[i] * j->rope->inv_freq[f];
            cs[f] = cosf(ang);
            sn[f] = sinf(ang);
        }
        for (uint32_t h = 0; h < j->heads; h++) {
            float *v = j->x + ((size_t)i * j->heads + h) * hd;
            for (uint32_t f = 0; f < half; f++) {
                float a = v[f], b = v[f + half];
                v[f] = a * cs[f] - b * sn[f];
                v[f + half] = b * cs[f] + a * sn[f];
            }
        }
    }
}

static tdm_status_t cpu_rope(void *ctx, const tdm_rope_t *rope, float *x, const uint32_t *pos,
                             uint32_t n, uint32_t heads)
{
    rope_job_t j = {rope, x, pos, heads};
    if (!rope || rope->head_dim == 0 || (n && (!x || !pos)))
        return TDM_ERR_INVAL;
    tdm_cpu_parallel(ctx, n, 4, rope_range, &j);
    return TDM_OK;
}

typedef struct silu_job {
    const float *g, *u;
    float *out;
} silu_job_t;

static void silu_range(void *arg, uint32_t tid, size_t lo, size_t hi)
{
    silu_job_t *j = arg;
    for (size_t i = lo; i < hi; i++) {
        float g = j->g[i];
        j->out[i] = g / (1.0f + expf(-g)) * j->u[i];
    }
}

static tdm_status_t cpu_silu_mul(void *ctx, const float *gate, const float *up, size_t count,
                                 float *out)
{
    silu_job_t j = {gate, up, out};
    if (count && (!gate || !up || !out))
        return TDM_ERR_INVAL;
    tdm_cpu_parallel(ctx, count, 4096, silu_range, &j);
    return TDM_OK;
}

static tdm_status_t cpu_logits(void *ctx, const float *h, uint32_t d, const uint32_t *row_idx,
                               uint32_t m, const tdm_tensor_t *lm_head, float *logits)
{
    tdm_cpu_pool_t *pool = ctx;
    float *g;
    if (!lm_head || lm_head->cols != d || (m && (!h || !row_idx || !logits)))
        return TDM_ERR_INVAL;
    g = tdm_cpu_scratch(&pool->gather, (size_t)m * d);
    if (m && !g)
        return TDM_ERR_NOMEM;
    for (uint32_t j = 0; j < m; j++)
        memcpy(g + (size_t)j * d, h + (size_t)row_idx[j] * d, (size_t)d * sizeof(float));
    return tdm_cpu_matmul(ctx, g, m, lm_head, NULL, logits);
}

static tdm_status_t cpu_argmax(void *ctx, const float *logits, uint32_t m, uint32_t vocab,
                               int32_t *ret_ids)
{
    if (vocab == 0 || (m && (!logits || !ret_ids)))
        return TDM_ERR_INVAL;
    for (uint32_t j = 0; j < m; j++) {
        const float *r = logits + (size_t)j * vocab;
        int32_t best = 0;
        float bv = -INFINITY;
        for (uint32_t v = 0; v < vocab; v++)
            if (r[v] > bv) {
                bv = r[v];
                best = (int32_t)v;
            }
        ret_ids[j] = best;
    }
    return TDM_OK;
}

static const tdm_cpu_ops_t *const isa_tables[] = {
#ifdef TDM_CPU_HAVE_AVX2_OPS
    &tdm_cpu_ops_avx2,
#endif
    &tdm_cpu_ops_generic,
};

tdm_status_t tdm_cpu_pool_set_isa(tdm_cpu_pool_t *p, const char *name)
{
    for (size_t i = 0; i < sizeof(isa_tables) / sizeof(isa_tables[0]); i++) {
        if (strcmp(isa_tables[i]->name, name) != 0)
            continue;
        if (!isa_tables[i]->supported())
            return TDM_ERR_UNSUPPORTED;
        p->ops = isa_tables[i];
        return TDM_OK;
    }
    return TDM_ERR_INVAL;
}

/* TDM_CPU_ISA names a table (an unknown or unsupported one is an error); else the first
 * supported table in preference order. */
static tdm_status_t select_isa(tdm_cpu_pool_t *p)
{
    const char *env = getenv("TDM_CPU_ISA");
    if (env && *env) {
        tdm_status_t st = tdm_cpu_pool_set_isa(p, env);
        if (st != TDM_OK)
            tdm_err(TDM_SUB_CORE, "TDM_CPU_ISA=%s: %s (known: avx2, generic)", env,
                    tdm_status_str(st));
        return st;
    }
    for (size_t i = 0; i < sizeof(isa_tables) / sizeof(isa_tables[0]); i++)
        if (isa_tables[i]->supported()) {
            p->ops = isa_tables[i];
            break;
        }
    return TDM_OK;
}

static uint32_t default_threads(void)
{
    const char *env = getenv("TDM_CPU_THREADS");
    long n = 0;
    if (env && *env) {
        char *end;
        n = strtol(env, &end, 10);
        if (*end != '\0' || n < 1)
            n = 0;
    }
    if (n == 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > (long)TDM_CPU_MAX_THREADS)
        n = TDM_CPU_MAX_THREADS;
    return (uint32_t)n;
}

tdm_status_t tdm_backend_cpu_init(uint32_t threads, tdm_backend_t *ret_be)
{
    tdm_cpu_pool_t *pool;
    tdm_backend_t be;
    tdm_status_t st;

    if (!ret_be)
        return TDM_ERR_INVAL;
    if (threads == 0)
        threads = default_threads();
    TDM_TRY(tdm_cpu_pool_init(threads, &pool));
    pool->ops = &tdm_cpu_ops_generic;
    st = select_isa(pool);
    if (st != TDM_OK) {
        tdm_cpu_pool_free(pool);
        return st;
    }
    for (uint32_t v = 0; v < 256; v++)
        pool->fp8_lut[v] = tdm_kv_fp8_decode((uint8_t)v);
    memset(&be, 0, sizeof(be));
    be.name = "cpu";
    be.ctx = pool;
    be.embed = cpu_embed;
    be.rmsnorm_add = cpu_rmsnorm_add;
    be.rope = cpu_rope;
    be.matmul = tdm_cpu_matmul;
    be.silu_mul = cpu_silu_mul;
    be.kv_write = tdm_cpu_kv_write;
    be.attn_prefill = tdm_cpu_attention;
    be.attn_decode = tdm_cpu_attention;
    be.logits = cpu_logits;
    be.argmax = cpu_argmax;
    *ret_be = be;
    return TDM_OK;
}

void tdm_backend_cpu_free(tdm_backend_t *be)
{
    if (!be)
        return;
    tdm_cpu_pool_free(be->ctx);
    be->ctx = NULL;
}

uint32_t tdm_backend_cpu_threads(const tdm_backend_t *be)
{
    return ((const tdm_cpu_pool_t *)be->ctx)->n_threads;
}

const char *tdm_backend_cpu_isa(const tdm_backend_t *be)
{
    return ((const tdm_cpu_pool_t *)be->ctx)->ops->name;
}
