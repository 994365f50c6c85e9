/*
 * sample.cu — the device sampler (sample.h): one block per logits row, every stage a pass over
 * the row with a block-wide reduction, so nothing is sorted and nothing but the row is read.
 *   pass 0: NaN/+inf → error; the raw argmax (ties → lowest id) and max;
 *   greedy rows stop there; sampled rows recompute w_i = (l_i - max) / T in every later pass
 *   (the same float operations as the host, so the same values) and keep a candidate set by
 *   thresholds found with binary searches over the 32-bit order key (tdm_sample_fx_key) and ids:
 *   top-k: the largest key K with at least k candidates >= K, ties at K by ascending id;
 *   top-p: the smallest key whose strictly-better mass passes tdm_sample_fx_top_p_keeps, ties
 *   there by ascending id while the running mass still passes (the host's "mass ahead" rule);
 *   min-p: tdm_sample_fx_min_p_keeps; the draw: the smallest id whose prefix mass of kept
 *   candidates exceeds floor(u53 · total / 2^53) (tdm/sample_fx.h).
 * Masses are integer sums (exact in any order), so each threshold equals the host's.
 * Logprobs: log-softmax of the raw row (double partition sum), top-N by N constrained argmaxes.
 */
#include "config.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include <tdm/log.h>
#include <tdm/sample_fx.h>
}

#include "cuda_int.h"
#include "sample.h"

#define SB 512 /* threads per row */

/* ---- block reductions (every thread gets the result) ---- */

static __device__ uint64_t bsum(uint64_t v)
{
    __shared__ uint64_t sh[SB / 32];
    __shared__ uint64_t res;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < SB / 32 ? sh[lane] : 0;
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0)
            res = v;
    }
    __syncthreads();
    uint64_t r = res;
    __syncthreads();
    return r;
}

static __device__ double bsum_d(double v)
{
    __shared__ double sh[SB / 32];
    __shared__ double res;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < SB / 32 ? sh[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0)
            res = v;
    }
    __syncthreads();
    double r = res;
    __syncthreads();
    return r;
}

/* (v, i) beats (bv, bi): a real index, and a larger value or the same value at a lower id */
static __device__ __forceinline__ void am_take(float v, int32_t i, float &bv, int32_t &bi)
{
    if (i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}

static __device__ void bargmax(float &bv, int32_t &bi)
{
    __shared__ float sv[SB / 32];
    __shared__ int32_t si[SB / 32];
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        am_take(ov, oi, bv, bi);
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) {
        sv[w] = bv;
        si[w] = bi;
    }
    __syncthreads();
    bv = sv[0];
    bi = si[0];
    for (int k = 1; k < SB / 32; k++)
        am_take(sv[k], si[k], bv, bi);
    __syncthreads();
}

/* ---- one row ---- */

struct row_t {
    const float *l;
    uint32_t V;
    float mx, t;
    /* top-k: keys > kk, or == kk below id kx (use_k); top-p likewise (use_p) */
    int use_k, use_p;
    uint32_t kk, kx, pk, px;
    float min_p;
};

static __device__ __forceinline__ float w_of(const row_t &R, uint32_t i, int *fin)
{
    float l = R.l[i];
    if (l == -INFINITY) {
        *fin = 0;
        return -INFINITY;
    }
    float w = (l - R.mx) / R.t;
    *fin = w != -INFINITY;
    return w;
}

static __device__ __forceinline__ int in_k(const row_t &R, uint32_t i, float w, int fin)
{
    if (!fin)
        return 0;
    if (!R.use_k)
        return 1;
    uint32_t k = tdm_sample_fx_key(w);
    return k > R.kk || (k == R.kk && i < R.kx);
}

static __device__ __forceinline__ int in_p(const row_t &R, uint32_t i, float w, int fin)
{
    if (!in_k(R, i, w, fin))
        return 0;
    if (!R.use_p)
        return 1;
    uint32_t k = tdm_sample_fx_key(w);
    return k > R.pk || (k == R.pk && i < R.px);
}

/* mode: 0 count of finite candidates with key >= a (a < 2^32; a == 2^32: none);
 *       1 count of finite with key == a and id < b;
 *       2 mass of in_k with key > a; 3 count in_k with key == a and id < b;
 *       4 mass in_k; 5 mass of kept (in_p and min-p) with id <= b; 6 mass of kept */
static __device__ uint64_t pass(const row_t &R, int mode, uint64_t a, uint32_t b)
{
    uint64_t acc = 0;
    for (uint32_t i = threadIdx.x; i < R.V; i += SB) {
        int fin;
        float w = w_of(R, i, &fin);
        if (!fin)
            continue;
        uint64_t key = tdm_sample_fx_key(w);
        switch (mode) {
        case 0:
            acc += key >= a;
            break;
        case 1:
            acc += key == a && i < b;
            break;
        case 2:
            if (key > a && in_k(R, i, w, fin))
                acc += tdm_sample_fx_exp(w);
            break;
        case 3:
            acc += key == a && i < b && in_k(R, i, w, fin);
            break;
        case 4:
            if (in_k(R, i, w, fin))
                acc += tdm_sample_fx_exp(w);
            break;
        default:
            if ((mode == 6 || i <= b) && in_p(R, i, w, fin)) {
                uint64_t q = tdm_sample_fx_exp(w);
                if (R.min_p <= 0.0f || tdm_sample_fx_min_p_keeps(q, R.min_p))
                    acc += q;
            }
            break;
        }
    }
    return bsum(acc);
}

__global__ void sample_kernel(const float *logits, uint32_t V, const tdm_cuda_sample_req_t *reqs,
                              tdm_cuda_sample_out_t *outs)
{
    const tdm_cuda_sample_req_t q = reqs[blockIdx.x];
    tdm_cuda_sample_out_t *o = outs + blockIdx.x;
    if (q.skip || q.host) { /* nothing sampled here: a defined answer all the same */
        if (threadIdx.x == 0) {
            o->status = TDM_OK;
            o->r.id = -1;
            o->r.n_top = 0;
        }
        return;
    }
    row_t R;
    R.l = logits + (size_t)blockIdx.x * V;
    R.V = V;

    /* pass 0: the row's rules and its argmax */
    float bv = -INFINITY;
    int32_t bi = -1;
    uint64_t bad = 0;
    for (uint32_t i = threadIdx.x; i < V; i += SB) {
        float v = R.l[i];
        if (isnan(v) || v == INFINITY)
            bad++;
        else if (v > bv || (bi < 0 && v > -INFINITY)) {
            bv = v;
            bi = (int32_t)i;
        }
    }
    bad = bsum(bad);
    bargmax(bv, bi);
    if (bad || bi < 0) {
        if (threadIdx.x == 0) {
            o->status = TDM_ERR_INVAL;
            o->r.id = -1;
        }
        return;
    }
    int32_t chosen = bi;
    R.mx = bv;
    R.t = q.temperature;
    R.use_k = R.use_p = 0;
    R.kk = R.kx = R.pk = R.px = 0;
    R.min_p = q.min_p;
    if (q.temperature > 0.0f && q.top_k != 1) {
        uint64_t nfin = pass(R, 0, 0, 0);
        if (q.top_k > 0 && (uint64_t)q.top_k < nfin) {
            uint64_t k = (uint64_t)q.top_k, lo = 0, hi = 1ull << 32;
            while (hi - lo > 1) { /* count(key >= lo) >= k > count(key >= hi) */
                uint64_t mid = (lo + hi) / 2;
                if (pass(R, 0, mid, 0) >= k)
                    lo = mid;
                else
                    hi = mid;
            }
            uint64_t rem = k - pass(R, 0, lo + 1, 0);
            uint64_t xl = 0, xh = V; /* count(ties, id < xl) < rem <= count(ties, id < xh) */
            while (xh - xl > 1) {
                uint64_t mid = (xl + xh) / 2;
                if (pass(R, 1, lo, (uint32_t)mid) >= rem)
                    xh = mid;
                else
                    xl = mid;
            }
            R.use_k = 1;
            R.kk = (uint32_t)lo;
            R.kx = (uint32_t)xh;
        }
        if (q.top_p < 1.0f) {
            uint64_t z = pass(R, 4, 0, 0);
            if (!tdm_sample_fx_top_p_keeps(pass(R, 2, 0, 0), z, q.top_p)) {
                uint64_t lo = 0, hi = 1ull << 32; /* P(lo) false, P(hi) true */
                while (hi - lo > 1) {
                    uint64_t mid = (lo + hi) / 2;
                    if (tdm_sample_fx_top_p_keeps(pass(R, 2, mid, 0), z, q.top_p))
                        hi = mid;
                    else
                        lo = mid;
                }
                /* hi is the boundary key: candidates there are kept while the mass ahead passes */
                uint64_t sb = pass(R, 2, hi, 0), ties = pass(R, 3, hi, V);
                uint32_t kbits = (hi & 0x80000000u) ? (uint32_t)hi & 0x7fffffffu : ~(uint32_t)hi;
                uint64_t qb = tdm_sample_fx_exp(__uint_as_float(kbits));
                uint64_t jl = 0, jh = ties; /* tie j kept iff sb + j qb passes; j = 0 does */
                if (tdm_sample_fx_top_p_keeps(sb + (ties - 1) * qb, z, q.top_p))
                    jl = ties;
                else
                    while (jh - jl > 1) { /* kept(jl), !kept(jh) */
                        uint64_t mid = (jl + jh) / 2;
                        if (tdm_sample_fx_top_p_keeps(sb + mid * qb, z, q.top_p))
                            jl = mid;
                        else
                            jh = mid;
                    }
                uint64_t keep = jl == ties ? ties : jl + 1;
                uint64_t xl = 0, xh = V;
                while (xh - xl > 1) {
                    uint64_t mid = (xl + xh) / 2;
                    if (pass(R, 3, hi, (uint32_t)mid) >= keep)
                        xh = mid;
                    else
                        xl = mid;
                }
                R.use_p = 1;
                R.pk = (uint32_t)hi;
                R.px = (uint32_t)xh;
            }
        }
        uint64_t total = pass(R, 6, 0, 0);
        uint64_t r = tdm_sample_fx_scale(tdm_sample_fx_u53(q.seed, q.step), total);
        /* the smallest id whose inclusive prefix mass exceeds r */
        int64_t lo = -1, hi = (int64_t)V - 1;
        while (hi - lo > 1) {
            int64_t mid = (lo + hi) / 2;
            if (pass(R, 5, 0, (uint32_t)mid) > r)
                hi = mid;
            else
                lo = mid;
        }
        chosen = (int32_t)hi;
    }

    tdm_sample_result_t res;
    memset(&res, 0, sizeof(res));
    res.id = chosen;
    res.logprob = 0.0f;
    res.n_top = 0;
    if (q.logprobs || q.top_logprobs) {
        double z = 0.0;
        for (uint32_t i = threadIdx.x; i < V; i += SB)
            z += (double)expf(R.l[i] - R.mx);
        z = bsum_d(z);
        float lse = R.mx + (float)log(z);
        res.logprob = R.l[chosen] - lse;
        uint32_t n = q.top_logprobs < V ? q.top_logprobs : V;
        float pv = INFINITY;
        int32_t pi = -1;
        for (uint32_t k = 0; k < n; k++) {
            float tv = -INFINITY;
            int32_t ti = -1;
            for (uint32_t i = threadIdx.x; i < V; i += SB) {
                float v = R.l[i];
                if (v == -INFINITY)
                    continue;
                if (pi >= 0 && !(v < pv || (v == pv && (int32_t)i > pi)))
                    continue; /* already listed */
                am_take(v, (int32_t)i, tv, ti);
            }
            bargmax(tv, ti);
            if (ti < 0)
                break;
            res.top_ids[k] = ti;
            res.top_logprobs[k] = tv - lse;
            res.n_top = k + 1;
            pv = tv;
            pi = ti;
        }
    }
    if (threadIdx.x == 0) {
        o->status = TDM_OK;
        o->r = res;
    }
}

/* ---- the sampler object ---- */

struct tdm_cuda_sampler {
    uint32_t max_rows, vocab;
    /* two pinned sets, so the requests and results of a forward launched while the previous one
     * still runs never share host memory with it (tdm_cuda_sampler_flip) */
    tdm_cuda_sample_req_t *h_req_set[2], *h_req, *d_req;
    tdm_cuda_sample_out_t *h_out_set[2], *h_out, *d_out;
    int cur;
    float *host_logits;
};

extern "C" tdm_status_t tdm_cuda_sampler_init(uint32_t max_rows, uint32_t vocab,
                                              tdm_cuda_sampler_t **ret)
{
    tdm_status_t st = TDM_OK;
    if (!ret || max_rows == 0 || vocab == 0)
        return TDM_ERR_INVAL;
    tdm_cuda_sampler_t *s = (tdm_cuda_sampler_t *)calloc(1, sizeof(*s));
    if (!s)
        return TDM_ERR_NOMEM;
    s->max_rows = max_rows;
    s->vocab = vocab;
    for (int k = 0; k < 2; k++) {
        TDM_CUDA_CHECK_GOTO(cudaMallocHost((void **)&s->h_req_set[k], max_rows * sizeof(*s->h_req)),
                            st, fail);
        TDM_CUDA_CHECK_GOTO(cudaMallocHost((void **)&s->h_out_set[k], max_rows * sizeof(*s->h_out)),
                            st, fail);
        memset(s->h_req_set[k], 0, max_rows * sizeof(*s->h_req));
    }
    s->h_req = s->h_req_set[0];
    s->h_out = s->h_out_set[0];
    TDM_CUDA_CHECK_GOTO(cudaMalloc((void **)&s->d_req, max_rows * sizeof(*s->d_req)), st, fail);
    TDM_CUDA_CHECK_GOTO(cudaMalloc((void **)&s->d_out, max_rows * sizeof(*s->d_out)), st, fail);
    *ret = s;
    return TDM_OK;
fail:
    tdm_cuda_sampler_free(s);
    return st;
}

extern "C" void tdm_cuda_sampler_free(tdm_cuda_sampler_t *s)
{
    if (!s)
        return;
    for (int k = 0; k < 2; k++) {
        cudaFreeHost(s->h_req_set[k]);
        cudaFreeHost(s->h_out_set[k]);
    }
    cudaFree(s->d_req);
    cudaFree(s->d_out);
    free(s);
}

extern "C" tdm_cuda_sample_req_t *tdm_cuda_sampler_reqs(tdm_cuda_sampler_t *s)
{
    return s->h_req;
}

extern "C" const tdm_cuda_sample_out_t *tdm_cuda_sampler_outs(const tdm_cuda_sampler_t *s)
{
    return s->h_out;
}

extern "C" int tdm_cuda_sampler_flip(tdm_cuda_sampler_t *s)
{
    s->cur ^= 1;
    s->h_req = s->h_req_set[s->cur];
    s->h_out = s->h_out_set[s->cur];
    return s->cur;
}

extern "C" const tdm_cuda_sample_out_t *tdm_cuda_sampler_outs_of(const tdm_cuda_sampler_t *s,
                                                                 int set)
{
    return s->h_out_set[set & 1];
}

/* ids[fix.dst[i]] = the id sampled for row fix.src[i] by the last sampler run on the stream;
 * an id that is no token (an error row: -1) becomes 0 — that row's request is ended by its
 * error, and the row computed from it is answered to nobody. */
__global__ void fix_ids_kernel(uint32_t *ids, tdm_cuda_prev_fix_t fix, uint32_t V,
                               const tdm_cuda_sample_out_t *out)
{
    for (uint32_t i = threadIdx.x; i < fix.n; i += blockDim.x) {
        int32_t id = out[fix.src[i]].r.id;
        ids[fix.dst[i]] = id >= 0 && (uint32_t)id < V ? (uint32_t)id : 0u;
    }
}

extern "C" tdm_status_t tdm_cuda_sampler_fix_ids(tdm_cuda_sampler_t *s, uint32_t *d_ids,
                                                 const tdm_cuda_prev_fix_t *fix, void *stream)
{
    if (!s || !d_ids || !fix || fix->n > TDM_CUDA_PREV_FIX_MAX)
        return TDM_ERR_INVAL;
    for (uint32_t i = 0; i < fix->n; i++)
        if (fix->src[i] >= s->max_rows)
            return TDM_ERR_RANGE;
    if (fix->n == 0)
        return TDM_OK;
    tdm_status_t st = TDM_OK;
    fix_ids_kernel<<<1, 128, 0, (cudaStream_t)stream>>>(d_ids, *fix, s->vocab, s->d_out);
    TDM_CUDA_CHECK_GOTO(cudaGetLastError(), st, out);
out:
    return st;
}

extern "C" void tdm_cuda_sampler_set_host_logits(tdm_cuda_sampler_t *s, float *dst)
{
    s->host_logits = dst;
}

extern "C" tdm_status_t tdm_cuda_sampler_enqueue(void *sv, const float *d_logits, uint32_t m,
                                                 uint32_t V, void *stream)
{
    tdm_cuda_sampler_t *s = (tdm_cuda_sampler_t *)sv;
    cudaStream_t st_ = (cudaStream_t)stream;
    tdm_status_t st = TDM_OK;
    if (!s || !d_logits || m > s->max_rows || V != s->vocab)
        return TDM_ERR_INVAL;
    if (m == 0)
        return TDM_OK;
    for (uint32_t i = 0; i < m; i++) {
        if (s->h_req[i].host && !s->h_req[i].skip && !s->host_logits)
            return TDM_ERR_INVAL;
        if (s->h_req[i].top_logprobs > TDM_SAMPLE_MAX_TOP_LOGPROBS)
            return TDM_ERR_INVAL;
        s->h_out[i].status = TDM_OK;
        s->h_out[i].r.id = -1;
    }
    TDM_CUDA_CHECK_GOTO(
        cudaMemcpyAsync(s->d_req, s->h_req, m * sizeof(*s->d_req), cudaMemcpyHostToDevice, st_), st,
        out);
    sample_kernel<<<m, SB, 0, st_>>>(d_logits, V, s->d_req, s->d_out);
    TDM_CUDA_CHECK_GOTO(cudaGetLastError(), st, out);
    TDM_CUDA_CHECK_GOTO(
        cudaMemcpyAsync(s->h_out, s->d_out, m * sizeof(*s->d_out), cudaMemcpyDeviceToHost, st_), st,
        out);
    for (uint32_t i = 0; i < m; i++)
        if (s->h_req[i].host && !s->h_req[i].skip)
            TDM_CUDA_CHECK_GOTO(cudaMemcpyAsync(s->host_logits + (size_t)i * V,
                                                d_logits + (size_t)i * V, (size_t)V * sizeof(float),
                                                cudaMemcpyDeviceToHost, st_),
                                st, out);
out:
    return st;
}

extern "C" tdm_status_t tdm_cuda_sample_host_rows(const float *logits, uint32_t m, uint32_t V,
                                                  const tdm_cuda_sample_req_t *reqs,
                                                  tdm_cuda_sample_out_t *outs)
{
    tdm_status_t st = TDM_OK;
    tdm_cuda_sampler_t *s = NULL;
    float *d = NULL;
    if (!logits || !reqs || !outs || m == 0 || V == 0)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_cuda_sampler_init(m, V, &s));
    TDM_CUDA_CHECK_GOTO(cudaMalloc((void **)&d, (size_t)m * V * sizeof(float)), st, out);
    TDM_CUDA_CHECK_GOTO(
        cudaMemcpy(d, logits, (size_t)m * V * sizeof(float), cudaMemcpyHostToDevice), st, out);
    memcpy(s->h_req, reqs, m * sizeof(*reqs));
    for (uint32_t i = 0; i < m; i++)
        s->h_req[i].host = 0;
    if ((st = tdm_cuda_sampler_enqueue(s, d, m, V, NULL)) != TDM_OK)
        goto out;
    TDM_CUDA_CHECK_GOTO(cudaStreamSynchronize(NULL), st, out);
    memcpy(outs, s->h_out, m * sizeof(*outs));
out:
    cudaFree(d);
    tdm_cuda_sampler_free(s);
    return st;
}
