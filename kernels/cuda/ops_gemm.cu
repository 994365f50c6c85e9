/*
 * ops_gemm.cu — the skinny and tile tensor-core GEMMs, the cuBLAS bf16 GEMM, and RoPE fused with
 * the KV write.
 */
#include "ops_int.cuh"

TDM_OPS_PDL_SETTER(gemm)

/* ---------------------------------------------------------------- skinny GEMM (tensor cores) */

#define SK_WARPS 8  /* warps per block, each a slice of K */
#define SK_UNROLL 4 /* 32-wide k steps per batch of loads */

/* mma.sync m16n8k16 with the weights as A (16 output features) and the activations as B (8 rows).
 * The dot product does not care about the order of k, so each lane loads 16 contiguous bytes of a
 * weight row (k = 32 s + 8 t .. + 7, t = lane % 4) and of an activation row, and both operands
 * map the same physical k to the same logical k: a fully coalesced weight stream with no
 * shuffles. 8 bf16 of x at k; SILU: x is fp32 gate|up (ldx = 2K) and silu(gate) * up is rounded
 * to bf16 here (what silu_mul writes on the cuBLAS path). */
template <bool SILU>
static __device__ __forceinline__ uint4 sk_x8(const void *x, uint32_t ldx, uint32_t row, uint32_t k,
                                              uint32_t K)
{
    if (!SILU)
        return __ldg(reinterpret_cast<const uint4 *>(reinterpret_cast<const uint16_t *>(x) +
                                                     (size_t)row * ldx + k));
    const float *xr = reinterpret_cast<const float *>(x) + (size_t)row * ldx;
    float4 g0 = __ldg(reinterpret_cast<const float4 *>(xr + k));
    float4 g1 = __ldg(reinterpret_cast<const float4 *>(xr + k + 4));
    float4 u0 = __ldg(reinterpret_cast<const float4 *>(xr + K + k));
    float4 u1 = __ldg(reinterpret_cast<const float4 *>(xr + K + k + 4));
    uint4 v;
    v.x = pack_bf16(silu(g0.x) * u0.x, silu(g0.y) * u0.y);
    v.y = pack_bf16(silu(g0.z) * u0.z, silu(g0.w) * u0.w);
    v.z = pack_bf16(silu(g1.x) * u1.x, silu(g1.y) * u1.y);
    v.w = pack_bf16(silu(g1.z) * u1.z, silu(g1.w) * u1.w);
    return v;
}

/* grid ceil(M / 16), block SK_WARPS warps: block b computes features 16 b .. 16 b + 15 for all
 * n <= 8 NT rows; warp w takes the k steps w, w + SK_WARPS, ...; the warps' partial sums meet in
 * shared memory (a fixed order: deterministic). */
template <int NT, bool SILU>
__global__ void __launch_bounds__(SK_WARPS * 32)
    skinny_kernel(const void *__restrict__ x, uint32_t ldx, uint32_t n, uint32_t K, uint32_t M,
                  const uint16_t *__restrict__ W, const float *__restrict__ bias, int accum,
                  float *__restrict__ y, uint32_t ldy)
{
    __shared__ float red[SK_WARPS][NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t m0 = blockIdx.x * 16, nsteps = K / 32;
    const uint16_t *wa = W + (size_t)min(m0 + g, M - 1) * K + 8 * t;
    const uint16_t *wb = W + (size_t)min(m0 + g + 8, M - 1) * K + 8 * t;
    uint4 A[SK_UNROLL][2];
    /* weights first: they never depend on the previous kernel (PDL) */
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++) {
        uint32_t st = warp + u * SK_WARPS;
        if (st < nsteps) {
            A[u][0] = ld_stream(wa + 32 * st);
            A[u][1] = ld_stream(wb + 32 * st);
        }
    }
    pdl_sync();
    uint32_t xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        xrow[nt] = min((uint32_t)(nt * 8 + g), n - 1); /* padding rows: computed, never stored */
    float c[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.0f;
    for (uint32_t base = warp; base < nsteps; base += SK_UNROLL * SK_WARPS) {
        const uint32_t nb = base + SK_UNROLL * SK_WARPS;
        uint4 An[SK_UNROLL][2];
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) {
            uint32_t st = nb + u * SK_WARPS;
            if (st < nsteps) {
                An[u][0] = ld_stream(wa + 32 * st);
                An[u][1] = ld_stream(wb + 32 * st);
            }
        }
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) {
            uint32_t st = base + u * SK_WARPS;
            if (st < nsteps) {
                const uint32_t k = 32 * st + 8 * t;
                const uint32_t a0[4] = {A[u][0].x, A[u][1].x, A[u][0].y, A[u][1].y};
                const uint32_t a1[4] = {A[u][0].z, A[u][1].z, A[u][0].w, A[u][1].w};
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    uint4 xv = sk_x8<SILU>(x, ldx, xrow[nt], k, K);
                    mma_bf16(c[nt], a0, xv.x, xv.y);
                    mma_bf16(c[nt], a1, xv.z, xv.w);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) {
            A[u][0] = An[u][0];
            A[u][1] = An[u][1];
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            red[warp][nt * 4 + e][lane] = c[nt][e];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < NT * 4 * 32; i += SK_WARPS * 32) {
        const uint32_t fe = i / 32, ln = i % 32, nt = fe / 4, e = fe % 4;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < SK_WARPS; w++)
            v += red[w][fe][ln];
        /* c[e]: feature g (+ 8 for e >= 2), row 2 t + (e & 1) of the n-tile */
        const uint32_t row = nt * 8 + 2 * (ln & 3) + (e & 1), m = m0 + (ln >> 2) + (e >= 2 ? 8 : 0);
        if (row < n && m < M) {
            float *yp = y + (size_t)row * ldy + m;
            if (accum)
                *yp += v;
            else
                *yp = v + (bias ? bias[m] : 0.0f);
        }
    }
}

template <bool SILU>
static tdm_status_t skinny_launch(const void *x, uint32_t ldx, uint32_t n, uint32_t K,
                                  const uint16_t *w, uint32_t M, const float *bias, int accum,
                                  float *y, uint32_t ldy, cudaStream_t s)
{
    const dim3 grid((M + 15) / 16), block(SK_WARPS * 32);
    switch ((n + 7) / 8) {
    case 1:
        launch(skinny_kernel<1, SILU>, grid, block, 0, s, x, ldx, n, K, M, w, bias, accum, y, ldy);
        break;
    case 2:
        launch(skinny_kernel<2, SILU>, grid, block, 0, s, x, ldx, n, K, M, w, bias, accum, y, ldy);
        break;
    case 3:
        launch(skinny_kernel<3, SILU>, grid, block, 0, s, x, ldx, n, K, M, w, bias, accum, y, ldy);
        break;
    case 4:
        launch(skinny_kernel<4, SILU>, grid, block, 0, s, x, ldx, n, K, M, w, bias, accum, y, ldy);
        break;
    default:
        return TDM_ERR_INVAL;
    }
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

int tdm_cuda_skinny_ok(uint32_t n, uint32_t K)
{
    return n >= 1 && n <= TDM_CUDA_SKINNY_MAX_ROWS && K % 32 == 0 && K > 0;
}

tdm_status_t tdm_cuda_gemm_skinny(const uint16_t *xb, uint32_t n, uint32_t K, const uint16_t *w,
                                  uint32_t M, const float *bias, int accum, float *y, uint32_t ldy,
                                  cudaStream_t stream)
{
    if (!tdm_cuda_skinny_ok(n, K) || M == 0 || !xb || !w || !y || (accum && bias))
        return TDM_ERR_INVAL;
    return skinny_launch<false>(xb, K, n, K, w, M, bias, accum, y, ldy, stream);
}

tdm_status_t tdm_cuda_gemm_skinny_silu(const float *gu, uint32_t n, uint32_t I, const uint16_t *w,
                                       uint32_t M, int accum, float *y, uint32_t ldy,
                                       cudaStream_t stream)
{
    if (!tdm_cuda_skinny_ok(n, I) || M == 0 || !gu || !w || !y)
        return TDM_ERR_INVAL;
    return skinny_launch<true>(gu, 2 * I, n, I, w, M, NULL, accum, y, ldy, stream);
}

/* ---------------------------------------------------------------- tile GEMM (tensor cores) */

/* y (n, M) (+)= x (n, K) · Wᵀ for 1..TDM_CUDA_TILE_MAX_ROWS rows: a block owns TG_BM output
 * features and every row (NG groups of 64), so each weight is read from HBM once however many
 * rows the call has, and the rows' tensor-core work runs while the next weight tiles are in
 * flight: max(weight stream, compute) instead of their sum (docs/cuda.md "A GEMM for 16-256
 * rows"). Stages of TG_BK k through shared memory by cp.async, the weights of the first stages
 * issued before the PDL wait. K is split over the S blocks of a thread-block cluster when the
 * features alone give too few blocks for the SMs: each block leaves its partial tile in its own
 * shared memory and, after a cluster barrier, block s sums its share of the tile's elements over
 * the S partials in split order through distributed shared memory (deterministic, no workspace,
 * the sum spread over the S blocks). */
#define TG_BM 128u /* output features per block: 8 warps as 4 (32 features) x 2 (32 rows) */
#define TG_BK 64u  /* k per stage: a row of a stage is 8 chunks of 16 bytes */
#define TG_THREADS 256u
#define TG_LD                                                                                      \
    (TG_BM + 4u)         /* floats per row of the partial tile: fragment stores spread over banks */
#define TG_MAX_SPLITS 8u /* a portable cluster size */

/* DEEP (the default): as many stages as fit ~192 KB, one block per SM, up to 7 stages of
 * weights in flight; else 4 stages at 64 rows and 3 above (96-144 KB, two blocks per SM up to 128
 * rows). TDM_CUDA_TILE_DEEP=0 selects the shallow form. */
template <int NG, bool DEEP> struct tg_shape {
    static constexpr uint32_t W_CH = TG_BM * 8; /* 16-byte chunks of a stage's weights */
    static constexpr uint32_t X_CH = NG * 64 * 8;
    static constexpr uint32_t ST_CH = W_CH + X_CH;
    static constexpr uint32_t STAGES = DEEP ? (NG == 1   ? 8
                                               : NG == 2 ? 6
                                               : NG == 3 ? 5
                                                         : 4)
                                            : (NG == 1 ? 4 : 3);
    static constexpr size_t PIPE = (size_t)STAGES * ST_CH * 16;
    static constexpr size_t TILE = (size_t)NG * 64 * TG_LD * 4;
    static constexpr size_t SMEM = PIPE > TILE ? PIPE : TILE;
};

/* chunk ch of row r at ch ^ (r & 7): ldmatrix's 8 rows of one logical chunk hit 8 bank groups */
static __device__ __forceinline__ uint32_t tg_sw(uint32_t r, uint32_t ch)
{
    return r * 8 + (ch ^ (r & 7));
}

static __device__ __forceinline__ void ldsm_x4(uint32_t *r, const uint4 *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

static __device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N> static __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* y[r, m0 + f .. + 3] (+)= v where m0 + f + q < M */
static __device__ __forceinline__ void tg_store4(float *y, uint32_t ldy, uint32_t r, uint32_t m,
                                                 uint32_t M, float4 v, int accum)
{
    float *yp = y + (size_t)r * ldy + m;
    const float a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int q = 0; q < 4; q++)
        if (m + q < M)
            yp[q] = accum ? yp[q] + a[q] : a[q];
}

/* grid (ceil(M / TG_BM), 1, S), clusters of (1, 1, S) when S > 1 */
template <int NG, bool DEEP>
__global__ void __launch_bounds__(TG_THREADS)
    tile_gemm_kernel(const uint16_t *__restrict__ x, uint32_t n, uint32_t K, uint32_t M,
                     const uint16_t *__restrict__ W, int accum, float *__restrict__ y, uint32_t ldy)
{
    typedef tg_shape<NG, DEEP> S;
    extern __shared__ uint4 tg_smem[];
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t wm = warp & 3, wn = warp >> 2;
    const uint32_t m0 = blockIdx.x * TG_BM, split = blockIdx.z, ns = gridDim.z;
    const uint32_t nk = K / TG_BK;
    const uint32_t kb = (uint32_t)((uint64_t)split * nk / ns);
    const uint32_t steps = (uint32_t)((uint64_t)(split + 1) * nk / ns) - kb;
    /* this thread's chunks: weight rows r0 + 32 i, x rows r0 + 32 i, chunk ch of each */
    const uint32_t ch = tid & 7, r0 = tid >> 3;
    const uint16_t *wsrc[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t m = m0 + r0 + 32 * i;
        wsrc[i] = W + (size_t)(m < M ? m : M - 1) * K + (size_t)kb * TG_BK + ch * 8;
    }
    auto load_w = [&](uint32_t st) {
        uint4 *dst = tg_smem + (st % S::STAGES) * S::ST_CH;
#pragma unroll
        for (int i = 0; i < 4; i++)
            cp_async16(dst + tg_sw(r0 + 32 * i, ch), wsrc[i] + (size_t)st * TG_BK, 16);
    };
    auto load_x = [&](uint32_t st) {
        uint4 *dst = tg_smem + (st % S::STAGES) * S::ST_CH + S::W_CH;
#pragma unroll
        for (int i = 0; i < 2 * NG; i++) {
            const uint32_t r = r0 + 32 * i;
            /* rows past n: zero-filled (src-size 0), computed and never stored */
            const uint16_t *src =
                x + (size_t)(r < n ? r : 0) * K + (size_t)(kb + st) * TG_BK + ch * 8;
            cp_async16(dst + tg_sw(r, ch), src, r < n ? 16 : 0);
        }
    };
    const uint32_t pre = steps < S::STAGES - 1 ? steps : S::STAGES - 1;
    for (uint32_t st = 0; st < pre; st++)
        load_w(st); /* weights never depend on the previous kernel */
    cp_commit();
    pdl_sync();
    for (uint32_t st = 0; st < S::STAGES - 1; st++) {
        if (st < pre)
            load_x(st);
        cp_commit();
    }
    float c[NG][2][4][4] = {}; /* fp32 accumulators, zeroed */
    for (uint32_t st = 0; st < steps; st++) {
        cp_wait<S::STAGES - 2>();
        __syncthreads(); /* stage st landed for every thread; st - 1's slot is free */
        const uint32_t nx = st + S::STAGES - 1;
        if (nx < steps) {
            load_w(nx);
            load_x(nx);
        }
        cp_commit();
        const uint4 *sw = tg_smem + (st % S::STAGES) * S::ST_CH, *sx = sw + S::W_CH;
#pragma unroll
        for (uint32_t kk = 0; kk < TG_BK / 16; kk++) {
            uint32_t a[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                ldsm_x4(a[i], sw + tg_sw(wm * 32 + i * 16 + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
            for (int g = 0; g < NG; g++)
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    uint32_t b[4];
                    const uint32_t r = g * 64 + wn * 32 + p * 16 + (lane & 7) + ((lane >> 4) << 3);
                    ldsm_x4(b, sx + tg_sw(r, 2 * kk + ((lane >> 3) & 1)));
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        mma_bf16(c[g][i][2 * p], a[i], b[0], b[1]);
                        mma_bf16(c[g][i][2 * p + 1], a[i], b[2], b[3]);
                    }
                }
        }
    }
    cp_wait<0>();
    __syncthreads(); /* every warp is done with the stages: the partial tile reuses them */
    /* c[g][i][j][e]: feature wm 32 + 16 i + lane / 4 (+ 8 for e >= 2), row g 64 + wn 32 + 8 j +
     * 2 (lane % 4) + (e & 1) */
    float *tile = reinterpret_cast<float *>(tg_smem);
#pragma unroll
    for (int g = 0; g < NG; g++)
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const uint32_t f = wm * 32 + i * 16 + (lane >> 2) + (e >= 2 ? 8 : 0);
                    const uint32_t r = g * 64 + wn * 32 + j * 8 + 2 * (lane & 3) + (e & 1);
                    tile[r * TG_LD + f] = c[g][i][j][e];
                }
    const uint32_t E = n * (TG_BM / 4); /* float4s of the tile's rows < n */
    if (ns == 1) {
        __syncthreads();
        for (uint32_t i = tid; i < E; i += TG_THREADS) {
            const uint32_t r = i / (TG_BM / 4), f = i % (TG_BM / 4) * 4;
            tg_store4(y, ldy, r, m0 + f, M, *reinterpret_cast<const float4 *>(tile + r * TG_LD + f),
                      accum);
        }
        return;
    }
    cg::cluster_group cl = cg::this_cluster();
    cl.sync(); /* every split's partial tile is in its block's shared memory */
    const uint32_t per = (E + ns - 1) / ns, beg = split * per, end = min(E, beg + per);
    for (uint32_t i = beg + tid; i < end; i += TG_THREADS) {
        const uint32_t r = i / (TG_BM / 4), f = i % (TG_BM / 4) * 4;
        float4 *p = reinterpret_cast<float4 *>(tile + r * TG_LD + f);
        float4 u[TG_MAX_SPLITS];
#pragma unroll
        for (uint32_t s = 0; s < TG_MAX_SPLITS; s++)
            if (s < ns)
                u[s] = *cl.map_shared_rank(p, s);
        float4 v = u[0];
#pragma unroll
        for (uint32_t s = 1; s < TG_MAX_SPLITS; s++)
            if (s < ns) { /* split order: the same bits whichever block sums */
                v.x += u[s].x;
                v.y += u[s].y;
                v.z += u[s].z;
                v.w += u[s].w;
            }
        tg_store4(y, ldy, r, m0 + f, M, v, accum);
    }
    cl.sync(); /* the others' shared memory stays until every block has read it */
}

int tdm_cuda_tile_ok(uint32_t n, uint32_t K)
{
    return n >= 1 && n <= TDM_CUDA_TILE_MAX_ROWS && K % TG_BK == 0 && K > 0;
}

static int tile_deep = -1; /* -1: not yet read from TDM_CUDA_TILE_DEEP */

int tdm_cuda_tile_deep(void)
{
    if (tile_deep < 0) {
        const char *s = getenv("TDM_CUDA_TILE_DEEP");
        tile_deep = !(s && s[0] == '0' && s[1] == 0);
    }
    return tile_deep;
}

void tdm_cuda_set_tile_deep(int on)
{
    tile_deep = on != 0;
}

/* launch_cl_smem past 48 KB of dynamic shared memory: the kernel's limit is raised once per
 * instantiation (*raised) */
template <typename... KArgs, typename... Args>
static void launch_cl_big(void (*k)(KArgs...), dim3 grid, dim3 block, unsigned clz, size_t smem,
                          int *raised, cudaStream_t s, Args... args)
{
    if (!*raised)
        *raised = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) ==
                  cudaSuccess;
    launch_cl_smem(k, grid, block, clz, smem, s, args...);
}

/* One instantiation's launch state, per process (the engine and the tests use one device). */
template <int NG, bool DEEP> struct tg_inst {
    static int raised;                      /* the shared-memory limit raised */
    static int clusters[TG_MAX_SPLITS + 1]; /* cudaOccupancyMaxActiveClusters by split count; 0:
                                               not asked yet, -1: refused */
};
template <int NG, bool DEEP> int tg_inst<NG, DEEP>::raised;
template <int NG, bool DEEP> int tg_inst<NG, DEEP>::clusters[TG_MAX_SPLITS + 1];

/* How many clusters of s blocks can run at once: a cluster lives within one GPC, so splits that
 * do not divide a GPC's SMs leave SMs idle or need a second wave (occupancy API, cached). */
template <int NG, bool DEEP> static int tile_clusters(uint32_t s)
{
    typedef tg_inst<NG, DEEP> I;
    if (I::clusters[s] == 0) {
        void (*k)(const uint16_t *, uint32_t, uint32_t, uint32_t, const uint16_t *, int, float *,
                  uint32_t) = tile_gemm_kernel<NG, DEEP>;
        if (!I::raised)
            I::raised = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)tg_shape<NG, DEEP>::SMEM) == cudaSuccess;
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        cfg.gridDim = dim3(1, 1, s);
        cfg.blockDim = dim3(TG_THREADS);
        cfg.dynamicSmemBytes = tg_shape<NG, DEEP>::SMEM;
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = 1;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = s;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        int nc = 0;
        I::clusters[s] =
            cudaOccupancyMaxActiveClusters(&nc, (const void *)k, &cfg) == cudaSuccess && nc > 0
                ? nc
                : -1;
        (void)cudaGetLastError(); /* a refusal is an answer here, not a sticky error */
    }
    return I::clusters[s];
}

/* The split count with the fewest waves of clusters, then the most SMs a wave covers, then the
 * fewest splits; at most TG_MAX_SPLITS, at least 4 k stages a block. Waves first: gate|up's 88
 * tiles on 4 splits (3 waves) took 37.4 us at 64 rows on an H100 against 25.0 on one split (one
 * wave on 88 of 132 SMs); within one wave, splits pay (qkv's 20 tiles: 5 splits 12.7 us, one
 * 22.4). docs/cuda.md "A GEMM for 16-256 rows". */
template <int NG, bool DEEP> static uint32_t tile_splits(uint32_t K, uint32_t M)
{
    const uint32_t tiles = (M + TG_BM - 1) / TG_BM, nk = K / TG_BK, sms = (uint32_t)sm_count();
    uint32_t best = 1;
    uint64_t bw = UINT64_MAX;
    double bc = -1;
    for (uint32_t s = 1; s <= TG_MAX_SPLITS && (s == 1 || s * 4 <= nk); s++) {
        const int a = tile_clusters<NG, DEEP>(s);
        if (a <= 0)
            continue;
        const uint64_t waves = (tiles + (uint32_t)a - 1) / (uint32_t)a;
        const uint64_t busy = (uint64_t)(tiles < (uint32_t)a ? tiles : (uint32_t)a) * s;
        const double cover = busy >= sms ? 1.0 : (double)busy / sms;
        if (waves < bw || (waves == bw && cover > bc + 1e-9)) {
            bw = waves;
            bc = cover;
            best = s;
        }
    }
    return best;
}

template <int NG, bool DEEP>
static void tile_launch(const uint16_t *xb, uint32_t n, uint32_t K, const uint16_t *w, uint32_t M,
                        int accum, float *y, uint32_t ldy, uint32_t ns, cudaStream_t s)
{
    if (ns == 0)
        ns = tile_splits<NG, DEEP>(K, M);
    const dim3 grid((M + TG_BM - 1) / TG_BM, 1, ns), block(TG_THREADS);
    launch_cl_big(tile_gemm_kernel<NG, DEEP>, grid, block, ns, tg_shape<NG, DEEP>::SMEM,
                  &tg_inst<NG, DEEP>::raised, s, xb, n, K, M, w, accum, y, ldy);
}

/* ns 0: the instantiation's own split count (tile_splits) */
template <int NG>
static void tile_launch(const uint16_t *xb, uint32_t n, uint32_t K, const uint16_t *w, uint32_t M,
                        int accum, float *y, uint32_t ldy, uint32_t ns, cudaStream_t s)
{
    if (tdm_cuda_tile_deep())
        tile_launch<NG, true>(xb, n, K, w, M, accum, y, ldy, ns, s);
    else
        tile_launch<NG, false>(xb, n, K, w, M, accum, y, ldy, ns, s);
}

void tdm_cuda_tile_prepare(void)
{
    /* K of 64 stages: every split count is asked for, in both forms */
    (void)tile_splits<1, true>(4096, 128);
    (void)tile_splits<2, true>(4096, 128);
    (void)tile_splits<3, true>(4096, 128);
    (void)tile_splits<4, true>(4096, 128);
    (void)tile_splits<1, false>(4096, 128);
    (void)tile_splits<2, false>(4096, 128);
    (void)tile_splits<3, false>(4096, 128);
    (void)tile_splits<4, false>(4096, 128);
}

uint32_t tdm_cuda_tile_splits(uint32_t n, uint32_t K, uint32_t M)
{
    const bool d = tdm_cuda_tile_deep();
    switch ((n + 63) / 64) {
    case 1:
        return d ? tile_splits<1, true>(K, M) : tile_splits<1, false>(K, M);
    case 2:
        return d ? tile_splits<2, true>(K, M) : tile_splits<2, false>(K, M);
    case 3:
        return d ? tile_splits<3, true>(K, M) : tile_splits<3, false>(K, M);
    default:
        return d ? tile_splits<4, true>(K, M) : tile_splits<4, false>(K, M);
    }
}

tdm_status_t tdm_cuda_gemm_tile(const uint16_t *xb, uint32_t n, uint32_t K, const uint16_t *w,
                                uint32_t M, int accum, float *y, uint32_t ldy, uint32_t splits,
                                cudaStream_t stream)
{
    if (!tdm_cuda_tile_ok(n, K) || M == 0 || !xb || !w || !y || ldy < M)
        return TDM_ERR_INVAL;
    if (splits > TG_MAX_SPLITS || splits > K / TG_BK)
        return TDM_ERR_INVAL;
    switch ((n + 63) / 64) {
    case 1:
        tile_launch<1>(xb, n, K, w, M, accum, y, ldy, splits, stream);
        break;
    case 2:
        tile_launch<2>(xb, n, K, w, M, accum, y, ldy, splits, stream);
        break;
    case 3:
        tile_launch<3>(xb, n, K, w, M, accum, y, ldy, splits, stream);
        break;
    default:
        tile_launch<4>(xb, n, K, w, M, accum, y, ldy, splits, stream);
        break;
    }
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

tdm_status_t tdm_cuda_gemm_bf16(cublasHandle_t h, const uint16_t *xb, uint32_t n, uint32_t K,
                                const uint16_t *w, uint32_t M, float beta, float *y)
{
    const float alpha = 1.0f;
    if (n == 0)
        return TDM_OK;
    /* column-major: Y^T (M, n) = W (K, M)^T · X^T (K, n) */
    cublasStatus_t e = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)n, (int)K, &alpha, w,
                                    CUDA_R_16BF, (int)K, xb, CUDA_R_16BF, (int)K, &beta, y,
                                    CUDA_R_32F, (int)M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (e != CUBLAS_STATUS_SUCCESS) {
        tdm_err(TDM_SUB_CUDA, "msg=\"cublasGemmEx failed\" err=%d n=%u K=%u M=%u", (int)e, n, K, M);
        return TDM_ERR_CUDA;
    }
    return TDM_OK;
}

/* ---------------------------------------------------------------- RoPE + KV write */

__global__ void rope_kv_kernel(float *qkv, uint32_t H, const float *inv_freq, tdm_cuda_kv_t kv,
                               uint32_t layer, tdm_cuda_rows_t rows)
{
    /* grid (n, ceil((H + 2 KV) / warps)): a warp per head of q, k or v of row blockIdx.x, so a
     * short call is not a few blocks looping over every head (docs/cuda.md "Where a step's time
     * goes") */
    const uint32_t r = blockIdx.x, KV = kv.kv_heads, hd = kv.hd, half = hd / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    pdl_sync();
    const uint32_t ld = (H + 2 * KV) * hd, pos = rows.pos[r];
    const bool active = r < *rows.nactive;
    float *row = qkv + (size_t)r * ld;
    for (uint32_t u = blockIdx.y * nw + warp; u < H + 2 * KV; u += nw * gridDim.y) {
        float *x = row + (size_t)u * hd;
        float v[16];
        if (u < H + KV) {
            /* rotate_half: lane takes pairs (i, i + hd/2), i = lane + 32 j */
#pragma unroll
            for (int j = 0; j < 8; j++) {
                uint32_t i = lane + 32u * j;
                if (i < half) {
                    float o0, o1;
                    rope_pair(x[i], x[i + half], (float)pos, inv_freq[i], &o0, &o1);
                    x[i] = o0;
                    x[i + half] = o1;
                }
            }
            __syncwarp();
        }
        if (u < H || !active)
            continue;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            uint32_t i = lane + 32u * j;
            v[j] = i < hd ? x[i] : 0.0f;
        }
        uint32_t page = rows.pages[rows.ptoff[r] + pos / kv.page_size], slot = pos % kv.page_size;
        bool isk = u < H + KV;
        write_head(kv, layer, isk ? TDM_KV_SUB_K : TDM_KV_SUB_V, page, slot,
                   isk ? u - H : u - H - KV, v, lane);
    }
}

tdm_status_t tdm_cuda_rope_kv_write(float *qkv, uint32_t n, uint32_t H, const float *inv_freq,
                                    const tdm_cuda_kv_t *kv, uint32_t layer,
                                    const tdm_cuda_rows_t *rows, cudaStream_t stream)
{
    if (kv->hd > 512 || kv->hd % 2)
        return TDM_ERR_UNSUPPORTED;
    if (n == 0)
        return TDM_OK;
    /* short calls (fewer rows than SMs: a mixed step's chunk, decode rows on the generic path):
     * a warp per head in blocks of 4 warps, so the rows' heads run side by side (32 rows: 5.6
     * against 10.8 us a layer under ncu, bench/results/gpu_step_profile*.json); longer ones a
     * block of 4 warps per row looping over its heads, which profiled faster at 400 rows
     * (docs/cuda.md "Where a step's time goes") */
    if (n >= 132 || tdm_cuda_narrow_v1())
        launch(rope_kv_kernel, n, 128, 0, stream, qkv, H, inv_freq, *kv, layer, *rows);
    else
        launch(rope_kv_kernel, dim3(n, (H + 2 * kv->kv_heads + 3) / 4), 128, 0, stream, qkv, H,
               inv_freq, *kv, layer, *rows);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}
