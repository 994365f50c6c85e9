/*
 * ops_attn.cu — paged attention on the CUDA cores (split-K flash-decoding and its combine) and
 * the tensor-core prefill attention over tiles of consecutive rows.
 */
#include <stdlib.h>
#include "ops.h"
#include "ops_int.cuh"

TDM_OPS_PDL_SETTER(attn)

/* ---------------------------------------------------------------- attention */

#define ATT_WARPS 4

/* grid (n, KV, splits), block ATT_WARPS warps. The block serves query heads [kvh*G, kvh*G + G)
 * of row r over its split of positions [0, pos]; each warp walks 32-position tiles (lane =
 * position for q·k, lane = dimension for p·v) with an online softmax, then the warps merge.
 * DPL = dimensions per lane (hd <= 32 DPL). Each lane resolves its position's page once; p·v
 * takes the V row addresses from the owning lanes by shuffle, ATT_VQ rows in flight. */
template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_split_kernel(const float *qkv, uint32_t H, tdm_cuda_kv_t kv, uint32_t layer,
                      tdm_cuda_rows_t rows, float *part_o, float *part_ml)
{
    const uint32_t r = blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z, S = gridDim.z;
    constexpr int ATT_VQ = DPL <= 2 ? 8 : 4; /* V rows in flight per lane in p·v */
    const uint32_t KV = kv.kv_heads, hd = kv.hd, G = H / KV;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ float sq[TDM_CUDA_MAX_GROUP * TDM_CUDA_MAX_HD];
    __shared__ float sm[ATT_WARPS][TDM_CUDA_MAX_GROUP], sl[ATT_WARPS][TDM_CUDA_MAX_GROUP];
    __shared__ float so[ATT_WARPS][TDM_CUDA_MAX_HD];
    const size_t pidx = ((size_t)r * H + kvh * G) * S + sp; /* head g: + g * S */
    pdl_sync();

    if (r >= *rows.nactive) {
        for (uint32_t g = 0; g < G; g++)
            for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
                part_o[(pidx + (size_t)g * S) * hd + i] = 0.0f;
        if (threadIdx.x < G) {
            part_ml[2 * (pidx + (size_t)threadIdx.x * S)] = -INFINITY;
            part_ml[2 * (pidx + (size_t)threadIdx.x * S) + 1] = 0.0f;
        }
        return;
    }
    const uint32_t len = rows.pos[r] + 1;
    uint32_t chunk = (len + S - 1) / S;
    chunk = (chunk + 31) & ~31u;
    const uint32_t beg = sp * chunk, end = min(len, beg + chunk);
    const float scale = rsqrtf((float)hd);
    const float *q = qkv + (size_t)r * (H + 2 * KV) * hd + (size_t)kvh * G * hd;
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x)
        sq[i] = q[i];
    __syncthreads();

    float m[TDM_CUDA_MAX_GROUP], l[TDM_CUDA_MAX_GROUP], acc[TDM_CUDA_MAX_GROUP][DPL];
#pragma unroll
    for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < DPL; j++)
            acc[g][j] = 0.0f;
    }
    const uint32_t *pt = rows.pages + rows.ptoff[r];
    const size_t esz = kv.fp8 ? 1 : 2;
    for (uint32_t tile = beg + 32u * warp; tile < end; tile += 32u * ATT_WARPS) {
        const uint32_t t = tile + lane;
        const bool valid = t < end;
        float s[TDM_CUDA_MAX_GROUP];
        unsigned long long vaddr = 0;
        float vscale = 1.0f;
#pragma unroll
        for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++)
            s[g] = 0.0f;
        if (valid) {
            uint32_t page = pt[t / kv.page_size], slot = t % kv.page_size;
            const uint8_t *krow = kv_slot(kv, layer, TDM_KV_SUB_K, page, slot);
            vaddr = (unsigned long long)(kv_slot(kv, layer, TDM_KV_SUB_V, page, slot) +
                                         (size_t)kvh * hd * esz);
            if (!kv.fp8) {
                const uint4 *k4 = reinterpret_cast<const uint4 *>(
                    reinterpret_cast<const uint16_t *>(krow) + (size_t)kvh * hd);
                /* up to 8 loads of the row in flight at once (hd 64: all of it) */
                constexpr int KC = DPL * 4 < 8 ? DPL * 4 : 8;
                for (uint32_t c0 = 0; c0 < hd / 8; c0 += KC) {
                    uint4 kraw[KC];
#pragma unroll
                    for (int c = 0; c < KC; c++)
                        if (c0 + c < hd / 8)
                            kraw[c] = k4[c0 + c];
#pragma unroll
                    for (int c = 0; c < KC; c++) {
                        if (c0 + c >= hd / 8)
                            break;
                        float kf[8];
                        wvec<uint16_t>::get(kraw[c], kf);
#pragma unroll
                        for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++)
                            if ((uint32_t)g < G)
#pragma unroll
                                for (int e = 0; e < 8; e++)
                                    s[g] = fmaf(sq[g * hd + (c0 + c) * 8 + e], kf[e], s[g]);
                    }
                }
            } else {
                const float ks = reinterpret_cast<const float *>(
                    kv_slot(kv, layer, TDM_KV_SUB_K_SCALE, page, slot))[kvh];
                vscale = reinterpret_cast<const float *>(
                    kv_slot(kv, layer, TDM_KV_SUB_V_SCALE, page, slot))[kvh];
                const uint4 *k4 = reinterpret_cast<const uint4 *>(krow + (size_t)kvh * hd);
                constexpr int KC = DPL * 2 < 4 ? DPL * 2 : 4;
                for (uint32_t c0 = 0; c0 < hd / 16; c0 += KC) {
                    uint4 kraw[KC];
#pragma unroll
                    for (int c = 0; c < KC; c++)
                        if (c0 + c < hd / 16)
                            kraw[c] = k4[c0 + c];
#pragma unroll
                    for (int cc = 0; cc < KC; cc++) {
                        if (c0 + cc >= hd / 16)
                            break;
                        const uint32_t c = c0 + cc;
                        uint4 raw = kraw[cc];
                        uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
                        float kf[16];
#pragma unroll
                        for (int e = 0; e < 16; e++)
                            kf[e] = fp8_decode((u[e / 4] >> (8 * (e % 4))) & 0xffu) * ks;
#pragma unroll
                        for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++)
                            if ((uint32_t)g < G)
#pragma unroll
                                for (int e = 0; e < 16; e++)
                                    s[g] = fmaf(sq[g * hd + c * 16 + e], kf[e], s[g]);
                    }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
            if ((uint32_t)g >= G)
                break;
            float sc = valid ? s[g] * scale : -INFINITY;
            float mnew = fmaxf(m[g], warp_max(sc)); /* lane 0 is always valid: finite */
            float p = valid ? expf(sc - mnew) : 0.0f;
            float alpha = expf(m[g] - mnew);
            l[g] = l[g] * alpha + warp_sum(p);
#pragma unroll
            for (int j = 0; j < DPL; j++)
                acc[g][j] *= alpha;
            m[g] = mnew;
            s[g] = p;
        }
        const uint32_t nvalid = min(32u, end - tile);
        for (uint32_t j0 = 0; j0 < nvalid; j0 += ATT_VQ) {
            float vd[ATT_VQ][DPL];
#pragma unroll
            for (int qq = 0; qq < ATT_VQ; qq++) {
                unsigned long long va = __shfl_sync(0xffffffffu, vaddr, (j0 + qq) & 31);
                float vs = __shfl_sync(0xffffffffu, vscale, (j0 + qq) & 31);
#pragma unroll
                for (int j = 0; j < DPL; j++) {
                    uint32_t d = lane + 32u * j;
                    vd[qq][j] = 0.0f;
                    if (j0 + qq < nvalid && d < hd)
                        vd[qq][j] =
                            kv.fp8 ? fp8_decode(reinterpret_cast<const uint8_t *>(va)[d]) * vs
                                   : bf16_bits_to_f32(reinterpret_cast<const uint16_t *>(va)[d]);
                }
            }
#pragma unroll
            for (int qq = 0; qq < ATT_VQ; qq++) {
#pragma unroll
                for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
                    if ((uint32_t)g >= G)
                        break;
                    /* p of an invalid lane is 0, so positions past nvalid add nothing */
                    float pj = __shfl_sync(0xffffffffu, s[g], (j0 + qq) & 31);
#pragma unroll
                    for (int j = 0; j < DPL; j++)
                        acc[g][j] = fmaf(pj, vd[qq][j], acc[g][j]);
                }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
        if (lane == 0 && (uint32_t)g < G) {
            sm[warp][g] = m[g];
            sl[warp][g] = l[g];
        }
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < (int)TDM_CUDA_MAX_GROUP; g++) {
        if ((uint32_t)g >= G)
            break;
        float M = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++)
            M = fmaxf(M, sm[w][g]);
        float f = (sm[warp][g] == -INFINITY) ? 0.0f : expf(sm[warp][g] - M);
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            uint32_t d = lane + 32u * j;
            if (d < hd)
                so[warp][d] = acc[g][j] * f;
        }
        __syncthreads();
        float *po = part_o + (pidx + (size_t)g * S) * hd;
        for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++)
                o += so[w][d];
            po[d] = o;
        }
        if (threadIdx.x == 0) {
            float L = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++)
                L += (sm[w][g] == -INFINITY) ? 0.0f : sl[w][g] * expf(sm[w][g] - M);
            part_ml[2 * (pidx + (size_t)g * S)] = M;
            part_ml[2 * (pidx + (size_t)g * S) + 1] = L;
        }
        __syncthreads();
    }
}

/* grid (n, H); block hd threads (rounded to 32): merge the splits, out = O / L */
__global__ void attn_combine_kernel(uint32_t H, uint32_t hd, uint32_t S, const float *part_o,
                                    const float *part_ml, float *out, uint16_t *out_bf16)
{
    const size_t base = ((size_t)blockIdx.x * H + blockIdx.y) * S;
    pdl_sync();
    float M = -INFINITY;
    for (uint32_t s = 0; s < S; s++)
        M = fmaxf(M, part_ml[2 * (base + s)]);
    float L = 0.0f;
    for (uint32_t s = 0; s < S; s++) {
        float ms = part_ml[2 * (base + s)];
        if (ms != -INFINITY)
            L += part_ml[2 * (base + s) + 1] * expf(ms - M);
    }
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (uint32_t s = 0; s < S; s++) {
            float ms = part_ml[2 * (base + s)];
            if (ms != -INFINITY)
                o += part_o[(base + s) * hd + d] * expf(ms - M);
        }
        float v = L > 0.0f ? o / L : 0.0f;
        size_t oi = ((size_t)blockIdx.x * H + blockIdx.y) * hd + d;
        out[oi] = v;
        if (out_bf16)
            out_bf16[oi] = f32_to_bf16_rne(v);
    }
}

tdm_status_t tdm_cuda_attention(const float *qkv, uint32_t n, uint32_t H, const tdm_cuda_kv_t *kv,
                                uint32_t layer, const tdm_cuda_rows_t *rows, uint32_t splits,
                                float *part_o, float *part_ml, float *out, uint16_t *out_bf16,
                                cudaStream_t stream)
{
    uint32_t KV = kv->kv_heads, hd = kv->hd;
    if (KV == 0 || H % KV || H / KV > TDM_CUDA_MAX_GROUP || hd > TDM_CUDA_MAX_HD || hd % 16 ||
        splits == 0 || splits > TDM_CUDA_MAX_SPLITS)
        return TDM_ERR_UNSUPPORTED;
    if (n == 0)
        return TDM_OK;
    dim3 grid(n, KV, splits);
    if (hd <= 32)
        launch(attn_split_kernel<1>, grid, ATT_WARPS * 32, 0, stream, qkv, H, *kv, layer, *rows,
               part_o, part_ml);
    else if (hd <= 64)
        launch(attn_split_kernel<2>, grid, ATT_WARPS * 32, 0, stream, qkv, H, *kv, layer, *rows,
               part_o, part_ml);
    else if (hd <= 128)
        launch(attn_split_kernel<4>, grid, ATT_WARPS * 32, 0, stream, qkv, H, *kv, layer, *rows,
               part_o, part_ml);
    else
        launch(attn_split_kernel<8>, grid, ATT_WARPS * 32, 0, stream, qkv, H, *kv, layer, *rows,
               part_o, part_ml);
    unsigned th = (hd + 31) / 32 * 32;
    launch(attn_combine_kernel, dim3(n, H), th, 0, stream, H, hd, splits, part_o, part_ml, out,
           out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}

/* ---------------------------------------------------------------- prefill attention (tensor cores)
 */

#define FA_ROWS 64 /* query rows per block: 4 warps x 16 */
#define FA_KT 64   /* positions per K/V tile */

/* Tile (64 positions from kt0) of K and V of head kvh into shared memory (rows of HD + 8 bf16);
 * positions >= len are zero-filled. */
template <int HD>
static __device__ __forceinline__ void fa_load(uint16_t *ks, uint16_t *vs, const tdm_cuda_kv_t &kv,
                                               uint32_t layer, const uint32_t *pt, uint32_t kvh,
                                               uint32_t kt0, uint32_t len, int pshift)
{
    constexpr int LDS = HD + 8, CH = HD / 8; /* 16-byte chunks per row */
    for (int i = threadIdx.x; i < FA_KT * CH; i += blockDim.x) {
        const int r = i / CH, c = i % CH;
        const uint32_t t = kt0 + (uint32_t)r;
        const uint8_t *kp = kv.base, *vp = kv.base;
        uint32_t bytes = 0;
        if (t < len) {
            /* pshift >= 0: the page size is 1 << pshift (a shift and a mask, not two divisions
             * by a runtime value per 16 bytes loaded) */
            uint32_t page, slot;
            if (pshift >= 0) {
                page = pt[t >> pshift];
                slot = t & (kv.page_size - 1);
            } else {
                page = pt[t / kv.page_size];
                slot = t % kv.page_size;
            }
            kp = kv_slot(kv, layer, TDM_KV_SUB_K, page, slot) + ((size_t)kvh * HD + c * 8) * 2;
            vp = kv_slot(kv, layer, TDM_KV_SUB_V, page, slot) + ((size_t)kvh * HD + c * 8) * 2;
            bytes = 16;
        }
        cp_async16(ks + r * LDS + c * 8, kp, bytes);
        cp_async16(vs + r * LDS + c * 8, vp, bytes);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* grid (ntiles, H), block 128. Warp w owns tile rows 16 w .. 16 w + 15; lane (g = lane / 4,
 * t = lane % 4) holds rows g and g + 8 of the mma fragments. LEAN (the default form): the page
 * of a position by shift when the page size is a power of two, and the causal mask only on the K/V
 * tiles that reach past the warp's first row (every other tile's positions precede all of the
 * warp's rows); the same arithmetic on every value kept, so both forms give the same bits
 * (test-cuda-ops checks it). The plain form: TDM_CUDA_FLASH_PLAIN=1 (tdm_cuda_flash_plain). */
template <int HD, bool LEAN>
__global__ void __launch_bounds__(128)
    flash_prefill_kernel(const float *__restrict__ qkv, uint32_t H, tdm_cuda_kv_t kv,
                         uint32_t layer, tdm_cuda_rows_t rows, const uint32_t *__restrict__ tiles,
                         float *__restrict__ out, uint16_t *__restrict__ out_bf16)
{
    constexpr int LDS = HD + 8, NKS = HD / 16, NDN = HD / 8, NSN = FA_KT / 8;
    extern __shared__ __align__(16) uint16_t fa_sm[];
    /* stage s: K at fa_sm + 2 s FA_KT LDS, V right after it */
    pdl_sync();
    const uint32_t tile = tiles[gridDim.x - 1 - blockIdx.x]; /* long tiles (late rows) first */
    const uint32_t row0 = tile & 0xffffffu, cnt = (tile >> 24) + 1;
    const uint32_t h = blockIdx.y, KV = kv.kv_heads, kvh = h / (H / KV);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t ld = (H + 2 * KV) * HD;
    const uint32_t p0 = rows.pos[row0], len = p0 + cnt;
    const uint32_t *pt = rows.pages + rows.ptoff[row0];
    const uint32_t ra = warp * 16 + g, rb = ra + 8;
    const uint32_t qpa = p0 + min(ra, cnt - 1), qpb = p0 + min(rb, cnt - 1);
    const uint32_t wlast = p0 + min((uint32_t)warp * 16 + 15, cnt - 1); /* warp's last position */
    const bool wactive = (uint32_t)warp * 16 < cnt;
    const uint32_t wfirst = p0 + (uint32_t)warp * 16; /* the warp's first row's position */
    const int pshift =
        LEAN && (kv.page_size & (kv.page_size - 1)) == 0 ? __ffs((int)kv.page_size) - 1 : -1;
    const float sl2 = rsqrtf((float)HD) * 1.4426950408889634f; /* scale * log2(e) */

    uint32_t qf[NKS][4];
    {
        const float *qa = qkv + (size_t)(row0 + min(ra, cnt - 1)) * ld + (size_t)h * HD + 2 * t;
        const float *qb = qkv + (size_t)(row0 + min(rb, cnt - 1)) * ld + (size_t)h * HD + 2 * t;
#pragma unroll
        for (int ks = 0; ks < NKS; ks++) {
            float2 x0 = *reinterpret_cast<const float2 *>(qa + ks * 16);
            float2 x1 = *reinterpret_cast<const float2 *>(qb + ks * 16);
            float2 x2 = *reinterpret_cast<const float2 *>(qa + ks * 16 + 8);
            float2 x3 = *reinterpret_cast<const float2 *>(qb + ks * 16 + 8);
            qf[ks][0] = pack_bf16(x0.x, x0.y);
            qf[ks][1] = pack_bf16(x1.x, x1.y);
            qf[ks][2] = pack_bf16(x2.x, x2.y);
            qf[ks][3] = pack_bf16(x3.x, x3.y);
        }
    }
    float o[NDN][4];
#pragma unroll
    for (int dn = 0; dn < NDN; dn++)
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

    const uint32_t nkt = (len + FA_KT - 1) / FA_KT;
    fa_load<HD>(fa_sm, fa_sm + FA_KT * LDS, kv, layer, pt, kvh, 0, len, pshift);
    for (uint32_t kt = 0; kt < nkt; kt++) {
        if (kt + 1 < nkt) {
            uint16_t *st = fa_sm + ((kt + 1) & 1) * 2 * FA_KT * LDS;
            fa_load<HD>(st, st + FA_KT * LDS, kv, layer, pt, kvh, (kt + 1) * FA_KT, len, pshift);
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        const uint32_t kt0 = kt * FA_KT;
        if (wactive && kt0 <= wlast) {
            const uint16_t *ks = fa_sm + (kt & 1) * 2 * FA_KT * LDS, *vs = ks + FA_KT * LDS;
            float sc[NSN][4];
#pragma unroll
            for (int sn = 0; sn < NSN; sn++) {
                sc[sn][0] = sc[sn][1] = sc[sn][2] = sc[sn][3] = 0.0f;
                const uint16_t *kr = ks + (sn * 8 + g) * LDS + 2 * t;
#pragma unroll
                for (int kk = 0; kk < NKS; kk++) {
                    uint32_t b0 = *reinterpret_cast<const uint32_t *>(kr + kk * 16);
                    uint32_t b1 = *reinterpret_cast<const uint32_t *>(kr + kk * 16 + 8);
                    mma_bf16(sc[sn], qf[kk], b0, b1);
                }
            }
            /* causal mask, scale, row maxima (rows g and g + 8; the 4 lanes of a row) */
            float mta = -INFINITY, mtb = -INFINITY;
            const bool masked = !LEAN || kt0 + FA_KT - 1 > wfirst;
#pragma unroll
            for (int sn = 0; sn < NSN; sn++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    uint32_t kp = kt0 + sn * 8 + 2 * t + (e & 1);
                    uint32_t qp = e < 2 ? qpa : qpb;
                    /* __fmul_rn: never contracted into the exp2's subtraction below, so the
                     * two forms round alike */
                    sc[sn][e] = !masked || kp <= qp ? __fmul_rn(sc[sn][e], sl2) : -INFINITY;
                }
                mta = fmaxf(mta, fmaxf(sc[sn][0], sc[sn][1]));
                mtb = fmaxf(mtb, fmaxf(sc[sn][2], sc[sn][3]));
            }
#pragma unroll
            for (int off = 1; off < 4; off <<= 1) {
                mta = fmaxf(mta, __shfl_xor_sync(0xffffffffu, mta, off));
                mtb = fmaxf(mtb, __shfl_xor_sync(0xffffffffu, mtb, off));
            }
            /* position 0 is in every row's range, so after the first tile ma/mb are finite */
            const float mna = fmaxf(ma, mta), mnb = fmaxf(mb, mtb);
            const float aa = exp2f(ma - mna), ab = exp2f(mb - mnb);
            ma = mna;
            mb = mnb;
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (int sn = 0; sn < NSN; sn++) {
                sc[sn][0] = exp2f(sc[sn][0] - mna);
                sc[sn][1] = exp2f(sc[sn][1] - mna);
                sc[sn][2] = exp2f(sc[sn][2] - mnb);
                sc[sn][3] = exp2f(sc[sn][3] - mnb);
                sa += sc[sn][0] + sc[sn][1];
                sb += sc[sn][2] + sc[sn][3];
            }
            la = la * aa + sa;
            lb = lb * ab + sb;
#pragma unroll
            for (int dn = 0; dn < NDN; dn++) {
                o[dn][0] *= aa;
                o[dn][1] *= aa;
                o[dn][2] *= ab;
                o[dn][3] *= ab;
            }
            /* o += P V: P from the score accumulators (n-tiles 2j, 2j+1 = k-step j), V by
             * ldmatrix.trans (two d n-tiles per x4) */
#pragma unroll
            for (int j = 0; j < FA_KT / 16; j++) {
                uint32_t pa[4] = {pack_bf16(sc[2 * j][0], sc[2 * j][1]),
                                  pack_bf16(sc[2 * j][2], sc[2 * j][3]),
                                  pack_bf16(sc[2 * j + 1][0], sc[2 * j + 1][1]),
                                  pack_bf16(sc[2 * j + 1][2], sc[2 * j + 1][3])};
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
        }
        __syncthreads(); /* the stage read here is refilled next iteration */
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, off);
        lb += __shfl_xor_sync(0xffffffffu, lb, off);
    }
    const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
#pragma unroll
    for (int dn = 0; dn < NDN; dn++) {
        const uint32_t d = dn * 8 + 2 * t;
        if (ra < cnt) {
            size_t oi = ((size_t)(row0 + ra) * H + h) * HD + d;
            float2 v = make_float2(o[dn][0] * ia, o[dn][1] * ia);
            *reinterpret_cast<float2 *>(out + oi) = v;
            if (out_bf16)
                *reinterpret_cast<uint32_t *>(out_bf16 + oi) = pack_bf16(v.x, v.y);
        }
        if (rb < cnt) {
            size_t oi = ((size_t)(row0 + rb) * H + h) * HD + d;
            float2 v = make_float2(o[dn][2] * ib, o[dn][3] * ib);
            *reinterpret_cast<float2 *>(out + oi) = v;
            if (out_bf16)
                *reinterpret_cast<uint32_t *>(out_bf16 + oi) = pack_bf16(v.x, v.y);
        }
    }
}

int tdm_cuda_flash_supported(const tdm_cuda_kv_t *kv)
{
    return !kv->fp8 && (kv->hd == 64 || kv->hd == 128) && kv->kv_heads > 0;
}

uint32_t tdm_cuda_flash_tiles(const uint32_t *pos, const uint32_t *ptoff, uint32_t n,
                              uint32_t *tiles, uint32_t cap)
{
    uint32_t nt = 0, r = 0;
    if (n >= (1u << 24))
        return 0;
    while (r < n) {
        uint32_t c = 1;
        while (r + c < n && c < FA_ROWS && ptoff[r + c] == ptoff[r] && pos[r + c] == pos[r] + c)
            c++;
        if (nt == cap)
            return 0;
        tiles[nt++] = r | ((c - 1) << 24);
        r += c;
    }
    return nt;
}

static int flash_plain = -1; /* -1: not yet read from TDM_CUDA_FLASH_PLAIN */

int tdm_cuda_flash_plain(void)
{
    if (flash_plain < 0) {
        const char *s = getenv("TDM_CUDA_FLASH_PLAIN");
        flash_plain = s && s[0] == '1' && s[1] == 0;
    }
    return flash_plain;
}

void tdm_cuda_set_flash_plain(int on)
{
    flash_plain = on != 0;
}

template <int HD, bool LEAN>
static void flash_launch(dim3 grid, cudaStream_t stream, const float *qkv, uint32_t H,
                         const tdm_cuda_kv_t *kv, uint32_t layer, const tdm_cuda_rows_t *rows,
                         const uint32_t *tiles, float *out, uint16_t *out_bf16)
{
    const size_t smem = (size_t)4 * FA_KT * (HD + 8) * 2;
    static int attr_set = 0;
    if (!attr_set && smem > 48 * 1024) {
        (void)cudaFuncSetAttribute(flash_prefill_kernel<HD, LEAN>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        attr_set = 1;
    }
    launch(flash_prefill_kernel<HD, LEAN>, grid, 128, smem, stream, qkv, H, *kv, layer, *rows,
           tiles, out, out_bf16);
}

tdm_status_t tdm_cuda_flash_attention(const float *qkv, uint32_t n, uint32_t H,
                                      const tdm_cuda_kv_t *kv, uint32_t layer,
                                      const tdm_cuda_rows_t *rows, const uint32_t *tiles,
                                      uint32_t ntiles, float *out, uint16_t *out_bf16,
                                      cudaStream_t stream)
{
    if (!tdm_cuda_flash_supported(kv) || H % kv->kv_heads)
        return TDM_ERR_UNSUPPORTED;
    if (n == 0)
        return TDM_OK;
    if (ntiles == 0 || !tiles)
        return TDM_ERR_INVAL;
    dim3 grid(ntiles, H);
    const bool plain = tdm_cuda_flash_plain();
    if (kv->hd == 64 && !plain)
        flash_launch<64, true>(grid, stream, qkv, H, kv, layer, rows, tiles, out, out_bf16);
    else if (kv->hd == 64)
        flash_launch<64, false>(grid, stream, qkv, H, kv, layer, rows, tiles, out, out_bf16);
    else if (!plain)
        flash_launch<128, true>(grid, stream, qkv, H, kv, layer, rows, tiles, out, out_bf16);
    else
        flash_launch<128, false>(grid, stream, qkv, H, kv, layer, rows, tiles, out, out_bf16);
    return cudaGetLastError() == cudaSuccess ? TDM_OK : TDM_ERR_CUDA;
}
