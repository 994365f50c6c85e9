/*
 * ops_attn_mma.cu — the tensor-core decode attention (RoPE and the KV write fused in; the
 * cluster form merges its splits in the kernel).
 */
#include "ops_int.cuh"

TDM_OPS_PDL_SETTER(attn_mma)

/* ---------------------------------------------------------------- decode attention (tensor cores)
 */

#define DA_WARPS 4
#define DA_KT 32 /* positions per warp tile */
/* splits of the cluster form (part_o NULL): a portable cluster size */
#define TDM_CUDA_DECODE_CLUSTER_MAX 8u

/* The first (pre-wait) or a later tile of a warp: the page of each position p0 + lane, the V rows
 * into the warp's shared-memory tile by cp.async (zeros past end) and the K rows p0 + 8 sn + g as
 * B fragments. Position `skip` (the row's own, written by this kernel after the PDL wait) is left
 * out; da_tile_fix loads it once it is in the cache. */
template <int HD>
static __device__ __forceinline__ void
da_tile(const tdm_cuda_kv_t &kv, uint32_t layer, const uint32_t *pt, uint32_t kvh, uint32_t p0,
        uint32_t end, uint32_t skip, int lane, uint16_t *vs, uint4 (&kf)[DA_KT / 8][HD / 32])
{
    constexpr int LDS = HD + 8, NC = HD / 32, NSN = DA_KT / 8;
    const int g = lane >> 2, t = lane & 3;
    uint32_t mypage = 0;
    if (p0 + lane < end)
        mypage = pt[(p0 + lane) / kv.page_size];
    for (int i = lane; i < DA_KT * (HD / 8); i += 32) {
        const int rr = i / (HD / 8), cc = i % (HD / 8);
        const uint32_t tp = p0 + rr;
        const uint32_t pg = __shfl_sync(0xffffffffu, mypage, rr);
        if (tp == skip)
            continue;
        const uint8_t *src = kv.base;
        uint32_t bytes = 0;
        if (tp < end) {
            src = kv_slot(kv, layer, TDM_KV_SUB_V, pg, tp % kv.page_size) +
                  ((size_t)kvh * HD + cc * 8) * 2;
            bytes = 16;
        }
        cp_async16(vs + rr * LDS + cc * 8, src, bytes);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
#pragma unroll
    for (int sn = 0; sn < NSN; sn++) {
        const uint32_t tp = p0 + sn * 8 + g;
        const uint32_t pg = __shfl_sync(0xffffffffu, mypage, sn * 8 + g);
        const uint16_t *kr = reinterpret_cast<const uint16_t *>(
                                 kv_slot(kv, layer, TDM_KV_SUB_K, pg, tp % kv.page_size)) +
                             (size_t)kvh * HD + 8 * t;
#pragma unroll
        for (int c = 0; c < NC; c++)
            kf[sn][c] = tp < end && tp != skip ? *reinterpret_cast<const uint4 *>(kr + 32 * c)
                                               : make_uint4(0, 0, 0, 0);
    }
}

/* Position `skip` of a tile that da_tile issued without it: its K fragments and V row from the
 * block's shared-memory copy of what it has just written to the cache (sk, sv: hd bf16 each,
 * the same bits; read after the block barrier). */
template <int HD>
static __device__ __forceinline__ void da_tile_fix(const uint16_t *sk, const uint16_t *sv,
                                                   uint32_t p0, uint32_t skip, int lane,
                                                   uint16_t *vs, uint4 (&kf)[DA_KT / 8][HD / 32])
{
    constexpr int LDS = HD + 8, NC = HD / 32, NSN = DA_KT / 8;
    if (skip < p0 || skip >= p0 + DA_KT)
        return;
    const int g = lane >> 2, t = lane & 3;
    const uint32_t rr = skip - p0;
    for (int cc = lane; cc < HD / 8; cc += 32)
        *reinterpret_cast<uint4 *>(vs + rr * LDS + cc * 8) =
            *reinterpret_cast<const uint4 *>(sv + cc * 8);
#pragma unroll
    for (int sn = 0; sn < NSN; sn++)
        if (p0 + sn * 8 + g == skip) {
#pragma unroll
            for (int c = 0; c < NC; c++)
                kf[sn][c] = *reinterpret_cast<const uint4 *>(sk + 32 * c + 8 * t);
        }
}

/* Row r's positions [0, len) and split sp's share [beg, end) of them (whole DA_KT tiles), and
 * its page table. */
static __device__ __forceinline__ void da_range(const tdm_cuda_rows_t &rows, uint32_t r,
                                                uint32_t sp, uint32_t S, uint32_t &len,
                                                uint32_t &beg, uint32_t &end, const uint32_t *&pt)
{
    len = rows.pos[r] + 1;
    uint32_t chunk = (len + S - 1) / S;
    chunk = (chunk + DA_KT - 1) / DA_KT * DA_KT;
    beg = sp * chunk;
    end = min(len, beg + chunk);
    pt = rows.pages + rows.ptoff[r];
}

/* grid (n, KV, S), block DA_WARPS warps: row r, KV head kvh, split sp of positions [0, pos]. The
 * G <= 8 query heads of the group are the rows of an m16n8k16 tile (rows 8..15 stay zero); each
 * warp takes 32-position tiles of the split in turn. K goes straight from global memory into B
 * fragments: a lane loads 16 contiguous bytes of a K row and the q fragments use the same
 * permutation of d (the dot product does not care), V goes through the warp's own shared-memory
 * tile (cp.async) to ldmatrix.trans. Online softmax in log2 units per warp, then the warps merge
 * in shared memory; S == 1 writes out (and bf16). S > 1 without CL: the partials of
 * tdm_cuda_attention's combine (m in natural-log units). Blocks with blockIdx.x >= nrows only
 * prefetch their part of pf into L2 (l2pf_block) and exit.
 *
 * CL (the cluster form, run 8): the S blocks of a (row, KV head) are one thread-block cluster
 * (cluster dims (1, 1, S), S <= 8). Each block leaves its merged (m, l, o) in its own shared
 * memory; after a cluster barrier, block sp merges output elements sp, sp + S, ... of all S
 * partials through distributed shared memory (fixed split order: deterministic) and writes out;
 * a second barrier keeps every block's shared memory alive until the others have read it. No
 * combine launch, no global partials. With ROPE too, everything that does not depend on the
 * previous kernel is issued before the PDL wait: the row's plan entries, the page table, and
 * each warp's first tile of K (registers) and V (cp.async) for the positions before pos, which
 * earlier calls wrote (so in this form the cache at positions < pos must not be written by the
 * immediately preceding launch: one row per sequence, as in decode). */
template <int HD, bool ROPE, bool CL>
__global__ void __launch_bounds__(DA_WARPS * 32, HD == 64 ? 4 : 1)
    attn_decode_mma_kernel(const float *__restrict__ qkv, uint32_t H, tdm_cuda_kv_t kv,
                           uint32_t layer, tdm_cuda_rows_t rows, const float *__restrict__ inv_freq,
                           float *__restrict__ part_o, float *__restrict__ part_ml,
                           float *__restrict__ out, uint16_t *__restrict__ out_bf16, uint32_t nrows,
                           tdm_cuda_l2pf_t pf)
{
    if (blockIdx.x >= nrows) {
        l2pf_block(pf, ((blockIdx.x - nrows) * gridDim.y + blockIdx.y) * gridDim.z + blockIdx.z,
                   (gridDim.x - nrows) * gridDim.y * gridDim.z);
        return;
    }
    constexpr bool EARLY = CL && ROPE; /* tiles issued before the PDL wait */
    constexpr int LDS = HD + 8, NC = HD / 32, NDN = HD / 8, NSN = DA_KT / 8;
    __shared__ __align__(16) uint16_t vsm[DA_WARPS][DA_KT * LDS];
    __shared__ float smm[DA_WARPS][8], sml[DA_WARPS][8];
    __shared__ __align__(16) float sqr[EARLY ? 8 * HD : 1]; /* rotated q (EARLY) */
    __shared__ __align__(16) uint16_t skv[2 * HD];          /* the k, v row written (EARLY) */
    __shared__ float sbm[CL ? 8 : 1], sbl[CL ? 8 : 1];      /* the block's merged m, l (CL) */
    const uint32_t r = blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z, S = gridDim.z;
    const uint32_t KV = kv.kv_heads, G = H / KV;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const size_t pidx = ((size_t)r * H + kvh * G) * S + sp; /* head g: + g * S */
    uint16_t *vs = vsm[warp];
    uint4 kf[NSN][NC];
    uint32_t len = 0, beg = 0, end = 0;
    const uint32_t *pt = NULL;
    bool pad;
    if (EARLY) {
        pad = r >= *rows.nactive;
        if (!pad) {
            da_range(rows, r, sp, S, len, beg, end, pt);
            const uint32_t p0 = beg + (uint32_t)warp * DA_KT;
            if (p0 < end)
                da_tile<HD>(kv, layer, pt, kvh, p0, end, len - 1, lane, vs, kf);
        }
        pdl_sync();
    } else {
        pdl_sync();
        pad = r >= *rows.nactive;
    }
    if (pad) {
        /* padding row of a graph bucket: never reads the cache (uniform over a cluster) */
        for (uint32_t i = threadIdx.x; i < G * HD; i += blockDim.x) {
            const uint32_t gg = i / HD, d = i % HD;
            if (S == 1 || CL) {
                if (sp != 0)
                    continue;
                size_t oi = ((size_t)r * H + kvh * G + gg) * HD + d;
                out[oi] = 0.0f;
                if (out_bf16)
                    out_bf16[oi] = 0;
            } else {
                part_o[(pidx + (size_t)gg * S) * HD + d] = 0.0f;
                if (d == 0) {
                    part_ml[2 * (pidx + (size_t)gg * S)] = -INFINITY;
                    part_ml[2 * (pidx + (size_t)gg * S) + 1] = 0.0f;
                }
            }
        }
        return;
    }
    if (!EARLY)
        da_range(rows, r, sp, S, len, beg, end, pt);
    const float sl2 = rsqrtf((float)HD) * 1.4426950408889634f;
    const float *qrow = qkv + (size_t)r * (H + 2 * KV) * HD;
    if (ROPE) {
        /* RoPE of the group's q heads into shared memory (the V tiles' space, free until the
         * loop, or sqr when the tiles are already in flight), the same arithmetic as
         * rope_kv_kernel; the split that holds position pos also rotates this row's k of head
         * kvh and writes k and v to the cache (bf16, RNE) before any warp reads them */
        constexpr uint32_t half = HD / 2;
        const uint32_t pos = len - 1;
        float *sq = EARLY ? sqr : reinterpret_cast<float *>(&vsm[0][0]);
        for (uint32_t i = threadIdx.x; i < G * half; i += blockDim.x) {
            const uint32_t gg = i / half, j = i % half;
            const float *x = qrow + (size_t)(kvh * G + gg) * HD;
            rope_pair(x[j], x[j + half], (float)pos, inv_freq[j], &sq[gg * HD + j],
                      &sq[gg * HD + j + half]);
        }
        if (pos >= beg && pos < end) {
            const uint32_t page = pt[pos / kv.page_size], slot = pos % kv.page_size;
            uint16_t *kd =
                reinterpret_cast<uint16_t *>(kv_slot(kv, layer, TDM_KV_SUB_K, page, slot)) +
                (size_t)kvh * HD;
            uint16_t *vd =
                reinterpret_cast<uint16_t *>(kv_slot(kv, layer, TDM_KV_SUB_V, page, slot)) +
                (size_t)kvh * HD;
            const float *kx = qrow + (size_t)(H + kvh) * HD;
            const float *vx = qrow + (size_t)(H + KV + kvh) * HD;
            for (uint32_t j = threadIdx.x; j < HD; j += blockDim.x) {
                if (j < half) {
                    float o0, o1;
                    rope_pair(kx[j], kx[j + half], (float)pos, inv_freq[j], &o0, &o1);
                    const uint16_t b0 = f32_to_bf16_rne(o0), b1 = f32_to_bf16_rne(o1);
                    kd[j] = b0;
                    kd[j + half] = b1;
                    if (EARLY) {
                        skv[j] = b0;
                        skv[j + half] = b1;
                    }
                }
                const uint16_t bv = f32_to_bf16_rne(vx[j]);
                vd[j] = bv;
                if (EARLY)
                    skv[HD + j] = bv;
            }
            __threadfence_block();
        }
        __syncthreads();
    }

    /* q of head g (g < G), permuted like the K loads: k-step (c, half) covers d = 32 c + 8 t +
     * 4 half + {0, 1} (a0) and + {2, 3} (a2) */
    uint32_t qf[NC][2][4];
    {
        const float *q =
            ROPE ? (EARLY ? sqr : reinterpret_cast<const float *>(&vsm[0][0])) + (size_t)g * HD
                 : qrow + (size_t)(kvh * G + g) * HD;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            float4 lo = make_float4(0, 0, 0, 0), hi = lo;
            if ((uint32_t)g < G) {
                lo = *reinterpret_cast<const float4 *>(q + 32 * c + 8 * t);
                hi = *reinterpret_cast<const float4 *>(q + 32 * c + 8 * t + 4);
            }
            qf[c][0][0] = pack_bf16(lo.x, lo.y);
            qf[c][0][2] = pack_bf16(lo.z, lo.w);
            qf[c][1][0] = pack_bf16(hi.x, hi.y);
            qf[c][1][2] = pack_bf16(hi.z, hi.w);
            qf[c][0][1] = qf[c][0][3] = qf[c][1][1] = qf[c][1][3] = 0u;
        }
    }
    if (ROPE && !EARLY)
        __syncthreads(); /* q is in registers; the V tiles may overwrite it */
    float o[NDN][4];
#pragma unroll
    for (int dn = 0; dn < NDN; dn++)
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (uint32_t p0 = beg + (uint32_t)warp * DA_KT; p0 < end; p0 += DA_WARPS * DA_KT) {
        if (EARLY && p0 == beg + (uint32_t)warp * DA_KT)
            da_tile_fix<HD>(skv, skv + HD, p0, len - 1, lane, vs, kf);
        else
            da_tile<HD>(kv, layer, pt, kvh, p0, end, UINT32_MAX, lane, vs, kf);
        float sc[NSN][4];
#pragma unroll
        for (int sn = 0; sn < NSN; sn++) {
            sc[sn][0] = sc[sn][1] = sc[sn][2] = sc[sn][3] = 0.0f;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                mma_bf16(sc[sn], qf[c][0], kf[sn][c].x, kf[sn][c].y);
                mma_bf16(sc[sn], qf[c][1], kf[sn][c].z, kf[sn][c].w);
            }
        }
        float mt = -INFINITY;
#pragma unroll
        for (int sn = 0; sn < NSN; sn++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const uint32_t kp = p0 + sn * 8 + 2 * t + e;
                sc[sn][e] = kp < end ? sc[sn][e] * sl2 : -INFINITY;
            }
            sc[sn][2] = sc[sn][3] = -INFINITY; /* rows 8..15: no head */
            mt = fmaxf(mt, fmaxf(sc[sn][0], sc[sn][1]));
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        const float mn = fmaxf(m, mt); /* p0 < end: the tile's first position is valid */
        const float al = exp2f(m - mn);
        m = mn;
        float ssum = 0.0f;
#pragma unroll
        for (int sn = 0; sn < NSN; sn++) {
            sc[sn][0] = exp2f(sc[sn][0] - mn);
            sc[sn][1] = exp2f(sc[sn][1] - mn);
            sc[sn][2] = sc[sn][3] = 0.0f;
            ssum += sc[sn][0] + sc[sn][1];
        }
        l = l * al + ssum;
#pragma unroll
        for (int dn = 0; dn < NDN; dn++) {
            o[dn][0] *= al;
            o[dn][1] *= al;
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncwarp();
#pragma unroll
        for (int j = 0; j < DA_KT / 16; j++) {
            uint32_t pa[4] = {pack_bf16(sc[2 * j][0], sc[2 * j][1]), 0u,
                              pack_bf16(sc[2 * j + 1][0], sc[2 * j + 1][1]), 0u};
            const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
            for (int dp = 0; dp < NDN / 2; dp++) {
                const uint16_t *vp =
                    vs + (j * 16 + (mi & 1) * 8 + ri) * LDS + dp * 16 + (mi >> 1) * 8;
                uint32_t va = (uint32_t)__cvta_generic_to_shared(vp), r0, r1, r2, r3;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                             "{%0,%1,%2,%3}, [%4];"
                             : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                             : "r"(va));
                mma_bf16(o[2 * dp], pa, r0, r1);
                mma_bf16(o[2 * dp + 1], pa, r2, r3);
            }
        }
        __syncwarp(); /* the tile is refilled next round */
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    /* merge the warps: m, l per head, o (head g, d = 8 dn + 2 t + {0,1}) through shared memory
     * (the V tiles are free now) */
    __syncthreads();
    float *so = reinterpret_cast<float *>(&vsm[0][0]); /* [DA_WARPS][8][HD] */
    float *sbo = so + DA_WARPS * 8 * HD;               /* CL: the block's merged o [8][HD] */
    if (t == 0) {
        smm[warp][g] = m;
        sml[warp][g] = l;
    }
#pragma unroll
    for (int dn = 0; dn < NDN; dn++) {
        so[((size_t)warp * 8 + g) * HD + dn * 8 + 2 * t] = o[dn][0];
        so[((size_t)warp * 8 + g) * HD + dn * 8 + 2 * t + 1] = o[dn][1];
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G * HD; i += blockDim.x) {
        const uint32_t gg = i / HD, d = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DA_WARPS; w++)
            M = fmaxf(M, smm[w][gg]);
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int w = 0; w < DA_WARPS; w++) {
            const float f = smm[w][gg] == -INFINITY ? 0.0f : exp2f(smm[w][gg] - M);
            L += sml[w][gg] * f;
            O += so[((size_t)w * 8 + gg) * HD + d] * f;
        }
        if (S == 1) {
            const float v = L > 0.0f ? O / L : 0.0f;
            size_t oi = ((size_t)r * H + kvh * G + gg) * HD + d;
            out[oi] = v;
            if (out_bf16)
                out_bf16[oi] = f32_to_bf16_rne(v);
        } else if (CL) {
            sbo[i] = O;
            if (d == 0) {
                sbm[gg] = M;
                sbl[gg] = L;
            }
        } else {
            part_o[(pidx + (size_t)gg * S) * HD + d] = O;
            if (d == 0) {
                part_ml[2 * (pidx + (size_t)gg * S)] = M * 0.6931471805599453f; /* log2 -> ln */
                part_ml[2 * (pidx + (size_t)gg * S) + 1] = L;
            }
        }
    }
    if (!CL || S == 1)
        return;
    /* the cluster's S partials (block rank == split), merged in split order */
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    for (uint32_t i = sp * blockDim.x + threadIdx.x; i < G * HD; i += S * blockDim.x) {
        const uint32_t gg = i / HD, d = i % HD;
        float ms[8], ls[8], os[8], M = -INFINITY;
#pragma unroll
        for (uint32_t s = 0; s < 8; s++) {
            ms[s] = -INFINITY;
            ls[s] = os[s] = 0.0f;
            if (s < S) {
                ms[s] = *cl.map_shared_rank(&sbm[gg], s);
                ls[s] = *cl.map_shared_rank(&sbl[gg], s);
                os[s] = *cl.map_shared_rank(&sbo[i], s);
                M = fmaxf(M, ms[s]);
            }
        }
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (uint32_t s = 0; s < 8; s++) {
            const float f = ms[s] == -INFINITY ? 0.0f : exp2f(ms[s] - M);
            L += ls[s] * f;
            O += os[s] * f;
        }
        const float v = L > 0.0f ? O / L : 0.0f;
        const size_t oi = ((size_t)r * H + kvh * G + gg) * HD + d;
        out[oi] = v;
        if (out_bf16)
            out_bf16[oi] = f32_to_bf16_rne(v);
    }
    cl.sync(); /* the others' shared memory stays until every block has read it */
}

int tdm_cuda_decode_mma_supported(const tdm_cuda_kv_t *kv, uint32_t H)
{
    return !kv->fp8 && (kv->hd == 64 || kv->hd == 128) && kv->kv_heads > 0 &&
           H % kv->kv_heads == 0 && H / kv->kv_heads <= 8;
}

uint32_t tdm_cuda_decode_mma_slots(const tdm_cuda_kv_t *kv)
{
    int per = 0;
    const cudaError_t ce =
        kv->hd == 128 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                            &per, attn_decode_mma_kernel<128, true, true>, DA_WARPS * 32, 0)
                      : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                            &per, attn_decode_mma_kernel<64, true, true>, DA_WARPS * 32, 0);
    if (ce != cudaSuccess || per < 1) {
        (void)cudaGetLastError();
        per = 1;
    }
    return (uint32_t)sm_count() * (uint32_t)per;
}

tdm_status_t tdm_cuda_attention_decode(const float *qkv, uint32_t n, uint32_t H,
                                       const tdm_cuda_kv_t *kv, uint32_t layer,
                                       const tdm_cuda_rows_t *rows, const float *inv_freq,
                                       uint32_t splits, float *part_o, float *part_ml, float *out,
                                       uint16_t *out_bf16, const tdm_cuda_l2pf_t *pf,
                                       cudaStream_t stream)
{
    if (!tdm_cuda_decode_mma_supported(kv, H) || splits == 0 || splits > TDM_CUDA_MAX_SPLITS)
        return TDM_ERR_UNSUPPORTED;
    if (!tdm_cuda_l2pf_ok(pf))
        return TDM_ERR_INVAL;
    if (n == 0)
        return TDM_OK;
    /* part_o NULL: the cluster form (splits merged in the kernel, <= 8 of them) */
    const bool cl = part_o == NULL;
    if (cl ? splits > TDM_CUDA_DECODE_CLUSTER_MAX : !part_ml)
        return TDM_ERR_INVAL;
    /* prefetch blocks: whole (KV, splits) planes past the n rows, about TDM_CUDA_L2PF_BLOCKS */
    const uint32_t plane = kv->kv_heads * splits;
    const uint32_t px = l2pf_on(pf) ? (TDM_CUDA_L2PF_BLOCKS + plane - 1) / plane : 0;
    const tdm_cuda_l2pf_t none = {NULL, 0, 0, 0}, p = l2pf_on(pf) ? *pf : none;
    dim3 grid(n + px, kv->kv_heads, splits);
    const dim3 block(DA_WARPS * 32);
    const unsigned clz = cl ? splits : 1;
#define DA_LAUNCH(HD, ROPE)                                                                        \
    do {                                                                                           \
        if (cl)                                                                                    \
            launch_cl(attn_decode_mma_kernel<HD, ROPE, true>, grid, block, clz, stream, qkv, H,    \
                      *kv, layer, *rows, inv_freq, part_o, part_ml, out, out_bf16, n, p);          \
        else                                                                                       \
            launch_cl(attn_decode_mma_kernel<HD, ROPE, false>, grid, block, 1u, stream, qkv, H,    \
                      *kv, layer, *rows, inv_freq, part_o, part_ml, out, out_bf16, n, p);          \
    } while (0)
    if (kv->hd == 64 && inv_freq)
        DA_LAUNCH(64, true);
    else if (kv->hd == 64)
        DA_LAUNCH(64, false);
    else if (inv_freq)
        DA_LAUNCH(128, true);
    else
        DA_LAUNCH(128, false);
#undef DA_LAUNCH
    if (splits > 1 && !cl)
        launch(attn_combine_kernel, dim3(n, H), (kv->hd + 31) / 32 * 32, 0, stream, H, kv->hd,
               splits, part_o, part_ml, out, out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}
