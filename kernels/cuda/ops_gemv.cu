/*
 * ops_gemv.cu — the GEMV of the GPU forward (docs/cuda.md): the multi-row kernel, the one-row
 * streaming forms (V2/V3/V4) with their SwiGLU, argmax and embedding epilogues, and the dispatch.
 */
#include "ops_int.cuh"

TDM_OPS_PDL_SETTER(gemv)

/* KS 1: grid (ceil(M / (GEMV_WARPS * GEMV_RPW)), ceil(n / NR)); block GEMV_WARPS warps.
 * Warp w of block b computes output rows m0 = (b * GEMV_WARPS + w) * GEMV_RPW + {0, 1} for the
 * NR input rows r0 = blockIdx.y * NR + {0..NR).
 * KS = GEMV_WARPS (split K): grid (ceil(M / GEMV_RPW), ceil(n / NR)); the block's warps share the
 * rows m0 = b * GEMV_RPW + {0, 1}, warp w a quarter of K, summed in shared memory in warp order.
 * For the small matrices (o, down at bs1): 4x the warps, each with a quarter of the serial
 * weight stream. */
template <typename T, int NR, int FLAGS, int KS>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(const float *__restrict__ x, uint32_t ldx, const uint32_t *__restrict__ xrow,
                uint32_t n, uint32_t K, uint32_t M, const T *__restrict__ W,
                const float *__restrict__ bias, const float *__restrict__ norm_w, float eps,
                float *__restrict__ y, uint32_t ldy, tdm_cuda_mark_t mk)
{
    constexpr int E = wvec<T>::N;
    __shared__ float s_rs[NR];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t r0 = blockIdx.y * NR;
    const uint32_t m0 =
        KS == 1 ? (blockIdx.x * GEMV_WARPS + warp) * GEMV_RPW : blockIdx.x * GEMV_RPW;
    const bool two = m0 + 1 < M;
    const T *w0 = W + (size_t)(m0 < M ? m0 : 0) * K;
    const T *w1 = W + (size_t)(two ? m0 + 1 : (m0 < M ? m0 : 0)) * K;
    const uint32_t step = 32u * E;
    const uint32_t kchunk = KS == 1 ? K : ((K + KS - 1) / KS + 7) / 8 * 8;
    const uint32_t kbeg = KS == 1 ? 0 : min(K, warp * kchunk), kend = min(K, kbeg + kchunk);
    uint32_t k = kbeg + (uint32_t)lane * E;
    /* the first GEMV_UNROLL weight vectors of both rows are loaded before waiting for the
     * previous kernel: weights never depend on it, so with PDL they stream during its tail */
    bool have = k + (GEMV_UNROLL - 1) * step < kend;
    uint4 a[GEMV_UNROLL], b[GEMV_UNROLL];
    if (have && m0 < M) {
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            a[u] = ld_stream(w0 + k + u * step);
            b[u] = ld_stream(w1 + k + u * step);
        }
    }
    pdl_sync();
    mark_store(mk);
    const float *xr[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        uint32_t rr = r0 + r < n ? r0 + r : n - 1; /* clamp: padding rows compute, never store */
        xr[r] = x + (size_t)(xrow ? xrow[rr] : rr) * ldx;
    }
    if (FLAGS & TDM_GEMV_NORM) {
        /* rsqrt(mean(x^2) + eps) of each of the NR rows, the whole block at once with float4
         * loads all issued before the sums (a serial per-warp loop here was latency-bound:
         * ~30 us per launch at K = 2048) */
        __shared__ float s_part[GEMV_WARPS][NR];
        float ss[NR];
#pragma unroll
        for (int r = 0; r < NR; r++)
            ss[r] = 0.0f;
        for (uint32_t kk = threadIdx.x * 4; kk < K; kk += GEMV_WARPS * 32 * 4) {
            float4 v[NR];
#pragma unroll
            for (int r = 0; r < NR; r++)
                v[r] = __ldg(reinterpret_cast<const float4 *>(xr[r] + kk));
#pragma unroll
            for (int r = 0; r < NR; r++)
                ss[r] += v[r].x * v[r].x + v[r].y * v[r].y + v[r].z * v[r].z + v[r].w * v[r].w;
        }
#pragma unroll
        for (int r = 0; r < NR; r++) {
            float t = warp_sum(ss[r]);
            if (lane == 0)
                s_part[warp][r] = t;
        }
        __syncthreads();
        if (threadIdx.x < NR) {
            float t = 0.0f;
            for (int w = 0; w < GEMV_WARPS; w++)
                t += s_part[w][threadIdx.x];
            s_rs[threadIdx.x] = rsqrtf(t / (float)K + eps);
        }
        __syncthreads();
    }
    if (m0 >= M)
        return;
    float rs[NR];
#pragma unroll
    for (int r = 0; r < NR; r++)
        rs[r] = (FLAGS & TDM_GEMV_NORM) ? s_rs[r] : 1.0f;
    float acc0[NR], acc1[NR];
#pragma unroll
    for (int r = 0; r < NR; r++)
        acc0[r] = acc1[r] = 0.0f;

    while (have) {
        /* next batch in flight while this one is multiplied */
        const uint32_t kn = k + GEMV_UNROLL * step;
        const bool nhave = kn + (GEMV_UNROLL - 1) * step < kend;
        uint4 na[GEMV_UNROLL], nb[GEMV_UNROLL];
        if (nhave) {
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                na[u] = ld_stream(w0 + kn + u * step);
                nb[u] = ld_stream(w1 + kn + u * step);
            }
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            float fa[E], fb[E];
            wvec<T>::get(a[u], fa);
            wvec<T>::get(b[u], fb);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                float xv[E];
                load_x<E, FLAGS>(xr[r], k + u * step, K, norm_w, rs[r], xv);
#pragma unroll
                for (int e = 0; e < E; e++) {
                    acc0[r] = fmaf(fa[e], xv[e], acc0[r]);
                    acc1[r] = fmaf(fb[e], xv[e], acc1[r]);
                }
            }
        }
        if (nhave) {
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                a[u] = na[u];
                b[u] = nb[u];
            }
        }
        k = kn;
        have = nhave;
    }
    for (; k < kend; k += step) {
        float fa[E], fb[E];
        wvec<T>::get(ld_stream(w0 + k), fa);
        wvec<T>::get(ld_stream(w1 + k), fb);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            float xv[E];
            load_x<E, FLAGS>(xr[r], k, K, norm_w, rs[r], xv);
#pragma unroll
            for (int e = 0; e < E; e++) {
                acc0[r] = fmaf(fa[e], xv[e], acc0[r]);
                acc1[r] = fmaf(fb[e], xv[e], acc1[r]);
            }
        }
    }
    if (KS > 1) {
        __shared__ float s_red[KS][NR][2];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            float s0 = warp_sum(acc0[r]), s1 = warp_sum(acc1[r]);
            if (lane == 0) {
                s_red[warp][r][0] = s0;
                s_red[warp][r][1] = s1;
            }
        }
        __syncthreads();
        if (warp != 0)
            return;
#pragma unroll
        for (int r = 0; r < NR; r++) {
            acc0[r] = acc1[r] = 0.0f;
            if (lane == 0)
                for (int w = 0; w < KS; w++) {
                    acc0[r] += s_red[w][r][0];
                    acc1[r] += s_red[w][r][1];
                }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float s0 = KS > 1 ? acc0[r] : warp_sum(acc0[r]), s1 = KS > 1 ? acc1[r] : warp_sum(acc1[r]);
        if (lane == 0 && r0 + r < n) {
            float *yr = y + (size_t)(r0 + r) * ldy;
            if (FLAGS & TDM_GEMV_ACCUM) {
                yr[m0] += s0;
                if (two)
                    yr[m0 + 1] += s1;
            } else {
                yr[m0] = s0 + (bias ? bias[m0] : 0.0f);
                if (two)
                    yr[m0 + 1] = s1 + (bias ? bias[m0 + 1] : 0.0f);
            }
        }
    }
}

/* One-row streaming GEMV (ksplit 2): the rows are split over every warp of the grid in contiguous
 * runs, and since the rows of W are contiguous a warp's weights are one contiguous span read at
 * lane-consecutive 16-byte steps; with K % (32 * E) == 0 each step lies in one row for the whole
 * warp, so a row ends on a warp-uniform step and is reduced by shuffles with no second pass.
 * G1_U loads per lane (DEEP: 2 G1_U) are issued before the PDL wait and every batch of G1_U is
 * in flight while the previous one is multiplied (8..16 16-byte loads per lane). x, after the fused
 * RMSNorm or SiLU·mul, is staged once per block in shared memory (V2 without SiLU: by cp.async,
 * every piece in flight at once). Grid: about 2 blocks per SM (the rows per warp rounded up first
 * so every warp has the same number of rows). Run 11's epilogues (V2 only): SWIGLU (gate|up rows
 * interleaved, each output pair's silu(gate) * up written when its up row completes) and AM (the
 * argmax of y: each warp's candidate, the last block merges; am_finish). */
#define G1_WARPS 8
/* Argmax candidates of a warp / of the whole grid: (v, i) beats (best, bi) when i is a real index
 * and bi is none, v is larger, or v ties and i is smaller (argmax_kernel's rule: the first index
 * of the largest non-NaN value; NaN never beats a number). */
static __device__ __forceinline__ void am_merge(float v, int32_t i, float &best, int32_t &bi)
{
    if (i >= 0 && (bi < 0 || v > best || (v == best && i < bi))) {
        best = v;
        bi = i;
    }
}

/* The grid's argmax from each warp's candidate: every block stores its warps' (best, index) in
 * ws, then counts itself in; the last block in merges all nw candidates in a fixed order and
 * writes *out, then re-arms the counter. */
template <int NWP>
static __device__ void am_finish(float best, int32_t bi, uint32_t gw, uint32_t nw, void *ws,
                                 int32_t *out)
{
    __shared__ float s_v[NWP];
    __shared__ int32_t s_i[NWP];
    __shared__ uint32_t s_last;
    float *cv = (float *)ws;
    int32_t *ci = (int32_t *)(cv + TDM_CUDA_ARGMAX_CAP);
    uint32_t *cnt = (uint32_t *)(ci + TDM_CUDA_ARGMAX_CAP);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        cv[gw] = best;
        ci[gw] = bi;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        s_last = atomicAdd(cnt, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last)
        return;
    __threadfence();
    best = -INFINITY;
    bi = -1;
    for (uint32_t i = threadIdx.x; i < nw; i += blockDim.x)
        am_merge(__ldcg(cv + i), __ldcg(ci + i), best, bi);
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        am_merge(ov, oi, best, bi);
    }
    if (lane == 0) {
        s_v[warp] = best;
        s_i[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < NWP; w++)
            am_merge(s_v[w], s_i[w], best, bi);
        *out = bi < 0 ? 0 : bi;
        *cnt = 0;
    }
}

/* PIPE (V4, run 12): PIPE more batches of each lane's weights ride in a shared-memory ring
 * (cp.async, lane-private slots: no barrier), so 1 + PIPE batches are issued before the PDL wait
 * and PIPE are in flight while one is multiplied (V2: 1 and 1) without V3's registers; the sums
 * are the same, in the same order. Dynamic shared memory: x's staging (floats, rounded up to 16
 * bytes), then the ring (gemv1_ring_bytes). */
template <int NWP, int G1_U, int PIPE> static constexpr size_t gemv1_ring_bytes()
{
    return (size_t)NWP * PIPE * G1_U * 32 * 16;
}

template <typename T, int FLAGS, bool V2, int G1_U, bool DEEP, int MINB = 2, bool AM = false,
          int NWP = G1_WARPS, int PIPE = 0>
__global__ void __launch_bounds__(NWP * 32, MINB)
    gemv1_kernel(const float *__restrict__ x, uint32_t ldx, const uint32_t *__restrict__ xrow,
                 uint32_t K, uint32_t M, const T *__restrict__ W, const float *__restrict__ bias,
                 const float *__restrict__ norm_w, float eps, float *__restrict__ y,
                 tdm_cuda_l2pf_t tail, int32_t *am_out, void *am_ws, int stage_cpa,
                 const uint16_t *__restrict__ emb, float *__restrict__ emb_out, tdm_cuda_mark_t mk)
{
    constexpr int E = wvec<T>::N;
    constexpr bool PAIR = (FLAGS & TDM_GEMV_SWIGLU) != 0;
    constexpr bool NORM2 = V2 && (FLAGS & TDM_GEMV_NORM);
    extern __shared__ float s_x[]; /* K floats (V2 with NORM: then norm_w, K more) */
    __shared__ float s_part[NWP];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t gw = blockIdx.x * NWP + warp, nw = gridDim.x * NWP;
    const uint32_t ra = (uint32_t)((uint64_t)M * gw / nw);
    const uint32_t rb = (uint32_t)((uint64_t)M * (gw + 1) / nw);
    const uint32_t vpl = K / (32u * E); /* steps per row */
    const uint32_t nsteps = (rb - ra) * vpl * (PAIR ? 2u : 1u);
    /* SWIGLU: rows interleaved gate_i, up_i: a warp's pairs are one contiguous span too */
    const T *wp = W + (size_t)ra * K * (PAIR ? 2u : 1u) + (uint32_t)lane * E;
    uint4 cur[G1_U], nx[G1_U];
#pragma unroll
    for (int u = 0; u < G1_U; u++)
        if ((uint32_t)u < nsteps)
            cur[u] = ld_stream(wp + (size_t)u * 32u * E);
    /* PIPE: this lane's slot u of stage st is ring[(st * G1_U + u) * 32]; batch b >= 1 rides in
     * stage (b - 1) % PIPE, one cp.async group per batch (committed even when empty) */
    uint4 *ring = NULL;
    if constexpr (PIPE > 0) {
        const uint32_t xfl = ((NORM2 ? 2u : 1u) * K + 3u) & ~3u;
        ring = reinterpret_cast<uint4 *>(s_x + xfl) + (size_t)warp * PIPE * G1_U * 32 + lane;
#pragma unroll
        for (int st = 0; st < PIPE; st++) {
#pragma unroll
            for (int u = 0; u < G1_U; u++) {
                const uint32_t j = (uint32_t)((1 + st) * G1_U + u);
                if (j < nsteps)
                    cp_async16(ring + (st * G1_U + u) * 32, wp + (size_t)j * 32u * E, 16u);
            }
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
    }
    if (DEEP) { /* the second batch too: HBM stays busy while x is staged after the wait */
#pragma unroll
        for (int u = 0; u < G1_U; u++)
            if ((uint32_t)(G1_U + u) < nsteps)
                nx[u] = ld_stream(wp + (size_t)(G1_U + u) * 32u * E);
    }
    if (NORM2) /* a weight too: staged before the wait, by the thread that uses it below */
        for (uint32_t k = threadIdx.x * 4; k < K; k += NWP * 32 * 4)
            *reinterpret_cast<float4 *>(s_x + K + k) =
                __ldg(reinterpret_cast<const float4 *>(norm_w + k));
    pdl_sync();
    mark_store(mk);
    /* DEEP: what each row's sum is added to (y with ACCUM, else the bias), read once per warp
     * right after the wait (lane i: row ra + i) instead of by a dependent load in the tail */
    const bool pre = DEEP && rb - ra <= 32u;
    float yo = 0.0f;
    if (pre && (uint32_t)lane < rb - ra)
        yo = (FLAGS & TDM_GEMV_ACCUM) ? y[ra + lane] : bias ? bias[ra + lane] : 0.0f;
    const float *xr = emb ? NULL : x + (size_t)(xrow ? xrow[0] : 0) * ldx;
    /* the folded embedding (bf16 row, exactly widened as embed_kernel does) */
    const uint16_t *er = emb ? emb + (size_t)xrow[0] * K : NULL;
    float ss = 0.0f, rs = 1.0f;
    /* V2 without SiLU (run 11): x lands in shared memory by cp.async, every 16-byte piece in
     * flight at once (one L2 round trip for any K, no registers), then each thread takes its
     * own pieces back for the norm; else loads in batches of 4 per thread */
    constexpr bool CPA = V2 && !(FLAGS & TDM_GEMV_SILU);
    /* PIPE: through registers (x's cp.async group would wait for the ring's older groups) */
    const bool cpa = CPA && !PIPE && !emb && stage_cpa && ((uintptr_t)xr & 15u) == 0;
    if (cpa) {
        for (uint32_t k = threadIdx.x * 4; k < K; k += NWP * 32 * 4)
            cp_async16(s_x + k, xr + k, 16u);
        asm volatile("cp.async.commit_group;" ::: "memory");
        /* groups complete in order: x's is the newest, so this waits for the ring's too
         * (issued before the wait, they have had the longest time) */
        asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
#pragma unroll 4
    for (uint32_t k = threadIdx.x * 4; k < K; k += NWP * 32 * 4) {
        if (CPA && cpa && !(FLAGS & TDM_GEMV_NORM))
            break; /* staged as it is */
        float4 v;
        if (emb) {
            const uint2 raw = __ldg(reinterpret_cast<const uint2 *>(er + k));
            v = make_float4(bf16_bits_to_f32(raw.x & 0xffffu), bf16_bits_to_f32(raw.x >> 16),
                            bf16_bits_to_f32(raw.y & 0xffffu), bf16_bits_to_f32(raw.y >> 16));
            if (blockIdx.x == 0)
                *reinterpret_cast<float4 *>(emb_out + k) = v;
        } else {
            v = cpa ? *reinterpret_cast<const float4 *>(s_x + k)
                    : __ldg(reinterpret_cast<const float4 *>(xr + k));
        }
        if (FLAGS & TDM_GEMV_SILU) {
            float4 u = __ldg(reinterpret_cast<const float4 *>(xr + K + k));
            v.x = silu(v.x) * u.x;
            v.y = silu(v.y) * u.y;
            v.z = silu(v.z) * u.z;
            v.w = silu(v.w) * u.w;
        }
        if (FLAGS & TDM_GEMV_NORM)
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        if (NORM2) {
            const float4 w = *reinterpret_cast<const float4 *>(s_x + K + k);
            v.x *= w.x;
            v.y *= w.y;
            v.z *= w.z;
            v.w *= w.w;
        }
        *reinterpret_cast<float4 *>(s_x + k) = v;
    }
    if (NORM2) {
        /* one barrier: every thread sums the warps' parts; rs scales each row's sum */
        float t = warp_sum(ss);
        if (lane == 0)
            s_part[warp] = t;
        __syncthreads();
        float a = 0.0f;
#pragma unroll
        for (int w = 0; w < NWP; w++)
            a += s_part[w];
        rs = rsqrtf(a / (float)K + eps);
    } else if (FLAGS & TDM_GEMV_NORM) {
        __shared__ float s_rs;
        float t = warp_sum(ss);
        if (lane == 0)
            s_part[warp] = t;
        __syncthreads();
        if (threadIdx.x == 0) {
            float a = 0.0f;
            for (int w = 0; w < NWP; w++)
                a += s_part[w];
            s_rs = rsqrtf(a / (float)K + eps);
        }
        __syncthreads();
        rs = s_rs;
        for (uint32_t k = threadIdx.x; k < K; k += NWP * 32)
            s_x[k] = s_x[k] * rs * norm_w[k];
        rs = 1.0f;
    }
    if (!NORM2)
        __syncthreads();
    float acc = 0.0f, gsum = 0.0f, best = -INFINITY;
    int32_t bi = -1;
    uint32_t row = ra, jr = 0;
    bool up = false; /* SWIGLU: the up row of `row` is the one being summed */
    for (uint32_t j0 = 0, b = 0; j0 < nsteps; j0 += G1_U, b++) {
        if (!DEEP && PIPE == 0) {
#pragma unroll
            for (int u = 0; u < G1_U; u++)
                if (j0 + G1_U + u < nsteps)
                    nx[u] = ld_stream(wp + (size_t)(j0 + G1_U + u) * 32u * E);
        }
#pragma unroll
        for (int u = 0; u < G1_U; u++) {
            if (j0 + u < nsteps) {
                float f[E];
                wvec<T>::get(cur[u], f);
                const float *xs = s_x + jr * 32u * E + (uint32_t)lane * E;
#pragma unroll
                for (int e = 0; e < E; e += 4) {
                    float4 xv = *reinterpret_cast<const float4 *>(xs + e);
                    acc = fmaf(f[e], xv.x, acc);
                    acc = fmaf(f[e + 1], xv.y, acc);
                    acc = fmaf(f[e + 2], xv.z, acc);
                    acc = fmaf(f[e + 3], xv.w, acc);
                }
                if (++jr == vpl) { /* warp-uniform: the row is complete */
                    float s = NORM2 ? warp_sum(acc) * rs : warp_sum(acc);
                    if (PAIR) {
                        /* the gate sum waits for its up row; the product is what silu_mul (or
                         * the down GEMV's SILU staging) computes from the stored pair */
                        if (!up)
                            gsum = s + 0.0f;
                        else if (lane == 0)
                            y[row] = silu(gsum) * (s + 0.0f);
                    } else {
                        if (AM) { /* rows in increasing order: a tie keeps the first */
                            const float v = s + (bias ? bias[row] : 0.0f);
                            if (v > best || (bi < 0 && v == v)) {
                                best = v;
                                bi = (int32_t)row;
                            }
                        }
                        if (pre) {
                            const float yv = __shfl_sync(0xffffffffu, yo, row - ra);
                            if (lane == 0)
                                y[row] = (FLAGS & TDM_GEMV_ACCUM) ? yv + s : s + yv;
                        } else if (lane == 0) {
                            if (FLAGS & TDM_GEMV_ACCUM)
                                y[row] += s;
                            else
                                y[row] = s + (bias ? bias[row] : 0.0f);
                        }
                    }
                    acc = 0.0f;
                    jr = 0;
                    if (!PAIR || up)
                        row++;
                    up = PAIR && !up;
                }
            }
        }
        if constexpr (PIPE > 0) {
            /* batch b + 1 from its stage, then the stage refilled with batch b + 1 + PIPE */
            if (j0 + G1_U < nsteps) {
                asm volatile("cp.async.wait_group %0;" ::"n"(PIPE - 1) : "memory");
                uint4 *sl = ring + (b % PIPE) * G1_U * 32;
#pragma unroll
                for (int u = 0; u < G1_U; u++)
                    cur[u] = sl[u * 32];
#pragma unroll
                for (int u = 0; u < G1_U; u++) {
                    const uint32_t j = j0 + (uint32_t)((1 + PIPE) * G1_U + u);
                    if (j < nsteps)
                        cp_async16(sl + u * 32, wp + (size_t)j * 32u * E, 16u);
                }
                asm volatile("cp.async.commit_group;" ::: "memory");
            }
        } else {
#pragma unroll
            for (int u = 0; u < G1_U; u++)
                cur[u] = nx[u];
            if (DEEP) { /* batch j0 + 2 U in flight while j0 + U is multiplied */
#pragma unroll
                for (int u = 0; u < G1_U; u++)
                    if (j0 + 2 * G1_U + u < nsteps)
                        nx[u] = ld_stream(wp + (size_t)(j0 + 2 * G1_U + u) * 32u * E);
            }
        }
    }
    /* this warp's rows are done: its slice of the next kernel's weights into L2 while the
     * slower warps still stream (the kernel's tail) */
    if (tail.bytes)
        l2pf_part(tail, gw, nw, (uint32_t)lane, 32u);
    if (AM)
        am_finish<NWP>(best, bi, gw, nw, am_ws, am_out);
}

/* The streaming form applies: one row, K a multiple of one warp step, x fits in shared memory. */
template <typename T> static bool gemv1_ok(const tdm_cuda_gemv_t *a)
{
    return a->n == 1 && a->ksplit >= 2 && a->K % (32u * wvec<T>::N) == 0 &&
           (size_t)a->K * 4 * (a->ksplit >= 3 && (a->flags & TDM_GEMV_NORM) ? 2 : 1) <= 48u * 1024;
}

/* ksplit 2: run 5's kernel; 3: V2 (norm_w staged before the PDL wait, rs applied to each row's
 * sum, one barrier); 4: V2 on one block per SM, so that the next kernel's blocks fit beside this
 * one's and issue their first weight loads during its tail (run 8: slower); 5: V3 = V2 with two
 * batches of weight loads (16 per lane) issued before the PDL wait; 6: V2 compiled for 3
 * resident blocks per SM (<= 80 registers instead of 93) on the same grid of 2 blocks per SM, so
 * one block of the next GEMV fits beside them and issues its loads before its PDL wait (run 10:
 * 16-32 bytes of spills, bs1 900 tok/s against V2's 1092; not the default). */
template <typename T, int FLAGS> static void gemv1_launch(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    /* 16 warps per SM: 2 blocks of 8 (4: 1 block; 7: 4 blocks of 4; 8: 8 blocks of 2) */
    const uint32_t nwp = a->ksplit == 7 ? 4u : a->ksplit == 8 ? 2u : G1_WARPS;
    const uint32_t maxw = (uint32_t)sm_count() * (a->ksplit == 4 ? 8u : 16u);
    const uint32_t rpw = (a->M + maxw - 1) / maxw;
    const uint32_t warps = (a->M + rpw - 1) / rpw;
    const uint32_t blocks = (warps + nwp - 1) / nwp;
    const size_t smem = (size_t)a->K * 4 * (a->ksplit >= 3 && (FLAGS & TDM_GEMV_NORM) ? 2 : 1);
#define G1_ARGS                                                                                    \
    a->x, a->ldx, a->xrow, a->K, a->M, (const T *)a->w, a->bias, a->norm_w, a->eps, a->y, a->tail, \
        a->argmax, a->argmax_ws, a->ksplit != 9, a->embed, a->embed_out, a->mark
    /* V4 (ksplit 10, 11): V2 with a ring of 2 or 1 weight batches per lane, every epilogue */
    const int pipe = a->ksplit == 10 ? 2 : a->ksplit == 11 ? 1 : 0;
    const size_t smem_p = ((smem + 15) & ~(size_t)15) + (size_t)G1_WARPS * pipe * 8 * 32 * 16;
    if constexpr ((FLAGS & ~TDM_GEMV_NORM) == 0) {
        if (a->argmax) { /* tdm_cuda_gemv checked: ksplit 3, 10 or 11 */
            if (pipe == 2)
                launch_big(gemv1_kernel<T, FLAGS, true, 8, false, 2, true, G1_WARPS, 2>,
                           dim3(blocks), G1_WARPS * 32, smem_p, s, G1_ARGS);
            else if (pipe == 1)
                launch_big(gemv1_kernel<T, FLAGS, true, 8, false, 2, true, G1_WARPS, 1>,
                           dim3(blocks), G1_WARPS * 32, smem_p, s, G1_ARGS);
            else
                launch(gemv1_kernel<T, FLAGS, true, 8, false, 2, true>, dim3(blocks), G1_WARPS * 32,
                       smem, s, G1_ARGS);
            return;
        }
    }
    if (pipe == 2)
        launch_big(gemv1_kernel<T, FLAGS, true, 8, false, 2, false, G1_WARPS, 2>, dim3(blocks),
                   G1_WARPS * 32, smem_p, s, G1_ARGS);
    else if (pipe == 1)
        launch_big(gemv1_kernel<T, FLAGS, true, 8, false, 2, false, G1_WARPS, 1>, dim3(blocks),
                   G1_WARPS * 32, smem_p, s, G1_ARGS);
    else if constexpr ((FLAGS & TDM_GEMV_SWIGLU) != 0) { /* ksplit 3 (tdm_cuda_gemv) */
        launch(gemv1_kernel<T, FLAGS, true, 8, false>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    } else if (a->ksplit == 2)
        launch(gemv1_kernel<T, FLAGS, false, 8, false>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 3 || a->ksplit == 9) /* 9: x staged through registers (run 11c) */
        launch(gemv1_kernel<T, FLAGS, true, 8, false>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 6) /* V2 held to 3 resident blocks' registers, grid of 2 per SM */
        launch(gemv1_kernel<T, FLAGS, true, 8, false, 3>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 7) /* V2 in blocks of 4 warps: a block leaves as 4 warps finish */
        launch(gemv1_kernel<T, FLAGS, true, 8, false, 4, false, 4>, dim3(blocks), 4 * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 8) /* V2 in blocks of 2 warps */
        launch(gemv1_kernel<T, FLAGS, true, 8, false, 8, false, 2>, dim3(blocks), 2 * 32, smem, s,
               G1_ARGS);
    else if (a->ksplit == 4) /* one block per SM: 12 loads per lane, about two blocks' 8 */
        launch(gemv1_kernel<T, FLAGS, true, 12, false>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
    else
        launch(gemv1_kernel<T, FLAGS, true, 8, true>, dim3(blocks), G1_WARPS * 32, smem, s,
               G1_ARGS);
#undef G1_ARGS
}

template <typename T, int NR, int FLAGS>
static void gemv_launch(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    if (NR == 1 && gemv1_ok<T>(a)) {
        gemv1_launch<T, FLAGS>(a, s);
        return;
    }
    /* SWIGLU: tdm_cuda_gemv takes it only where the form above applies */
    if constexpr ((FLAGS & TDM_GEMV_SWIGLU) == 0) {
        if (NR == 1 && a->ksplit) {
            dim3 grid((a->M + GEMV_RPW - 1) / GEMV_RPW, a->n);
            launch(gemv_kernel<T, NR, FLAGS, GEMV_WARPS>, grid, GEMV_WARPS * 32, 0, s, a->x, a->ldx,
                   a->xrow, a->n, a->K, a->M, (const T *)a->w, a->bias, a->norm_w, a->eps, a->y,
                   a->ldy, a->mark);
            return;
        }
        dim3 grid((a->M + GEMV_WARPS * GEMV_RPW - 1) / (GEMV_WARPS * GEMV_RPW),
                  (a->n + NR - 1) / NR);
        launch(gemv_kernel<T, NR, FLAGS, 1>, grid, GEMV_WARPS * 32, 0, s, a->x, a->ldx, a->xrow,
               a->n, a->K, a->M, (const T *)a->w, a->bias, a->norm_w, a->eps, a->y, a->ldy,
               a->mark);
    }
}

template <typename T, int NR> static int gemv_flags(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    switch (a->flags) {
    case 0:
        gemv_launch<T, NR, 0>(a, s);
        return 1;
    case TDM_GEMV_NORM:
        gemv_launch<T, NR, TDM_GEMV_NORM>(a, s);
        return 1;
    case TDM_GEMV_ACCUM:
        gemv_launch<T, NR, TDM_GEMV_ACCUM>(a, s);
        return 1;
    case TDM_GEMV_SILU | TDM_GEMV_ACCUM:
        gemv_launch<T, NR, TDM_GEMV_SILU | TDM_GEMV_ACCUM>(a, s);
        return 1;
    case TDM_GEMV_SILU:
        gemv_launch<T, NR, TDM_GEMV_SILU>(a, s);
        return 1;
    case TDM_GEMV_NORM | TDM_GEMV_SWIGLU:
        if (NR == 1)
            gemv_launch<T, 1, TDM_GEMV_NORM | TDM_GEMV_SWIGLU>(a, s);
        return NR == 1;
    case TDM_GEMV_SWIGLU:
        if (NR == 1)
            gemv_launch<T, 1, TDM_GEMV_SWIGLU>(a, s);
        return NR == 1;
    }
    return 0;
}

template <typename T> static int gemv_rows(const tdm_cuda_gemv_t *a, cudaStream_t s)
{
    /* NR = rows sharing each weight load; beyond 8, more row groups (grid.y) */
    if (a->n == 1)
        return gemv_flags<T, 1>(a, s);
    if (a->n == 2)
        return gemv_flags<T, 2>(a, s);
    if (a->n <= 4)
        return gemv_flags<T, 4>(a, s);
    return gemv_flags<T, 8>(a, s);
}

int tdm_cuda_gemv_fusable(const tdm_cuda_gemv_t *a)
{
    if (!a || a->n != 1 ||
        (a->ksplit != 3 && a->ksplit != 9 && a->ksplit != 10 && a->ksplit != 11) || a->K == 0)
        return 0;
    switch (a->wdtype) {
    case TDM_DTYPE_BF16:
        return gemv1_ok<uint16_t>(a);
    case TDM_DTYPE_F16:
        return gemv1_ok<__half>(a);
    case TDM_DTYPE_F32:
        return gemv1_ok<float>(a);
    }
    return 0;
}

tdm_status_t tdm_cuda_gemv(const tdm_cuda_gemv_t *a, cudaStream_t stream)
{
    int ok;
    if (!a || !a->x || !a->w || !a->y || a->K % 8 != 0 || a->K == 0 || a->M == 0 ||
        ((a->flags & TDM_GEMV_NORM) && !a->norm_w) ||
        ((a->flags & TDM_GEMV_SILU) && (a->flags & TDM_GEMV_NORM)) || !tdm_cuda_l2pf_ok(&a->tail))
        return TDM_ERR_INVAL;
    if ((a->flags & TDM_GEMV_SWIGLU) &&
        ((a->flags & (TDM_GEMV_SILU | TDM_GEMV_ACCUM)) || a->bias || a->argmax))
        return TDM_ERR_INVAL;
    if (a->argmax && (!a->argmax_ws || (a->flags & ~TDM_GEMV_NORM)))
        return TDM_ERR_INVAL;
    if (a->embed && (!a->embed_out || !a->xrow || a->flags != TDM_GEMV_NORM ||
                     a->wdtype != TDM_DTYPE_BF16 || a->argmax))
        return TDM_ERR_INVAL;
    if ((a->flags & TDM_GEMV_SWIGLU) || a->argmax || a->embed) {
        if (!tdm_cuda_gemv_fusable(a))
            return TDM_ERR_UNSUPPORTED;
        /* warps of the grid (gemv1_launch, 2 blocks per SM) vs the candidate slots */
        if (a->argmax && (uint64_t)sm_count() * 2u * G1_WARPS + G1_WARPS > TDM_CUDA_ARGMAX_CAP)
            return TDM_ERR_UNSUPPORTED;
    }
    if (a->n == 0)
        return TDM_OK;
    switch (a->wdtype) {
    case TDM_DTYPE_BF16:
        ok = gemv_rows<uint16_t>(a, stream);
        break;
    case TDM_DTYPE_F16:
        ok = gemv_rows<__half>(a, stream);
        break;
    case TDM_DTYPE_F32:
        ok = gemv_rows<float>(a, stream);
        break;
    default:
        return TDM_ERR_UNSUPPORTED;
    }
    if (!ok)
        return TDM_ERR_INVAL;
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}
