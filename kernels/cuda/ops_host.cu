/*
 * ops_host.cu — host-array wrappers around the kernels of ops.cu (see ops.h): fresh device
 * buffers per call, outputs poisoned before each launch, one synchronisation at the end. Used by
 * the tolerance tests and the micro-benchmarks; the engine never goes through here.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <string.h>
#include <vector>

#include "cuda_int.h"
#include "gemm_lt.h"
#include "ops.h"

namespace
{

/* Device buffers freed at scope exit. */
struct dev {
    std::vector<void *> ptrs;
    ~dev()
    {
        for (void *p : ptrs)
            cudaFree(p);
    }
    template <typename T> tdm_status_t alloc(T **ret, size_t bytes, const void *init)
    {
        void *p = NULL;
        if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
            tdm_err(TDM_SUB_CUDA, "msg=\"cudaMalloc failed\" bytes=%zu", bytes);
            return TDM_ERR_NOMEM;
        }
        ptrs.push_back(p);
        /* poison: 0xff bytes are NaN in fp32 and bf16 */
        cudaError_t e = init && bytes ? cudaMemcpy(p, init, bytes, cudaMemcpyHostToDevice)
                                      : cudaMemset(p, 0xff, bytes ? bytes : 1);
        if (e != cudaSuccess)
            return TDM_ERR_CUDA;
        *ret = (T *)p;
        return TDM_OK;
    }
};

tdm_status_t sync_back(void *host, const void *devp, size_t bytes)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess && bytes)
        e = cudaMemcpy(host, devp, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        tdm_err(TDM_SUB_CUDA, "msg=\"kernel or copy failed\" err=\"%s\"", cudaGetErrorString(e));
        return TDM_ERR_CUDA;
    }
    return TDM_OK;
}

size_t dsize(int dt)
{
    return dt == TDM_DTYPE_F32 ? 4 : 2;
}

float bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct kv_dev {
    tdm_kv_buffers_t b;
    tdm_cuda_kv_t k;
};

tdm_status_t make_kv(const tdm_kv_layout_t *l, uint32_t num_pages, uint8_t *dbase, kv_dev *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->b.layout = l;
    ret->b.base = dbase;
    ret->b.num_pages = num_pages;
    uint64_t pool = 0;
    TDM_TRY(tdm_kv_layout_pool_bytes(l, num_pages, &pool));
    ret->b.layer_bytes =
        l->num_layers > 1 ? tdm_kv_layout_region_offset(l, num_pages, 1, TDM_KV_SUB_K) : pool;
    for (uint32_t s = 0; s < l->n_sub; s++)
        ret->b.sub_offset[s] = tdm_kv_layout_region_offset(l, num_pages, 0, (tdm_kv_sub_t)s);
    return tdm_cuda_kv_from_buffers(&ret->b, &ret->k);
}

} // namespace

/* ops.h use_cublas -> tdm_cuda_gemv_t ksplit: 3 K-split, 4..8 streaming, 9 streaming V2, 10 V2
 * on one block per SM, 11 V3, 12 V2 held to 3 resident blocks, 13/14 blocks of 4/2 warps, 15 x
 * through registers, 16/17 V4 (rings of 2/1 batches) */
static int gemv_ksplit_of(int use_cublas)
{
    return use_cublas == 3    ? 1
           : use_cublas == 9  ? 3
           : use_cublas == 10 ? 4
           : use_cublas == 11 ? 5
           : use_cublas == 12 ? 6
           : use_cublas == 13 ? 7
           : use_cublas == 14 ? 8
           : use_cublas == 15 ? 9
           : use_cublas == 16 ? 10
           : use_cublas == 17 ? 11
           : use_cublas >= 4  ? 2
                              : 0;
}

tdm_status_t tdm_cuda_test_gemv(const float *x, uint32_t n, uint32_t K, uint32_t M, int wdtype,
                                const void *w, const float *bias, const float *norm_w, float eps,
                                int flags, int use_cublas, float *y)
{
    dev d;
    float *dx, *dy, *db = NULL, *dn = NULL;
    void *dw;
    uint32_t ldx = (flags & TDM_GEMV_SILU) ? 2 * K : K;
    if (!x || !w || !y || n == 0)
        return TDM_ERR_INVAL;
    TDM_TRY(d.alloc(&dx, (size_t)n * ldx * 4, x));
    TDM_TRY(d.alloc(&dw, (size_t)M * K * dsize(wdtype), w));
    TDM_TRY(d.alloc(&dy, (size_t)n * M * 4, (flags & TDM_GEMV_ACCUM) ? y : NULL));
    if (bias)
        TDM_TRY(d.alloc(&db, (size_t)M * 4, bias));
    if (norm_w)
        TDM_TRY(d.alloc(&dn, (size_t)K * 4, norm_w));
    if ((use_cublas >= 18 && use_cublas <= 20) || use_cublas == 23) {
        uint16_t *xb;
        const uint32_t splits = use_cublas == 19 ? 1 : use_cublas == 20 ? 5 : 0;
        const int deep = tdm_cuda_tile_deep();
        const int accum = (flags & TDM_GEMV_ACCUM) != 0;
        if (wdtype != TDM_DTYPE_BF16 || (flags & ~TDM_GEMV_ACCUM) || bias)
            return TDM_ERR_INVAL;
        TDM_TRY(d.alloc(&xb, (size_t)n * K * 2, NULL));
        TDM_TRY(tdm_cuda_to_bf16(dx, (size_t)n * K, xb, 0));
        /* without accum twice, y poisoned between: the second call must write every element
         * again (nothing left over from the first) */
        for (int call = 0; call < (accum ? 1 : 2); call++) {
            if (call && cudaMemset(dy, 0xff, (size_t)n * M * 4) != cudaSuccess)
                return TDM_ERR_CUDA;
            tdm_cuda_set_tile_deep(use_cublas == 23 ? 0 : deep);
            const tdm_status_t st =
                tdm_cuda_gemm_tile(xb, n, K, (const uint16_t *)dw, M, accum, dy, M, splits, 0);
            tdm_cuda_set_tile_deep(deep);
            TDM_TRY(st);
        }
    } else if (use_cublas == 2) {
        uint16_t *xb;
        if (wdtype != TDM_DTYPE_BF16 || (flags & TDM_GEMV_NORM))
            return TDM_ERR_INVAL;
        if (flags & TDM_GEMV_SILU) {
            TDM_TRY(tdm_cuda_gemm_skinny_silu(dx, n, K, (const uint16_t *)dw, M,
                                              (flags & TDM_GEMV_ACCUM) != 0, dy, M, 0));
        } else {
            TDM_TRY(d.alloc(&xb, (size_t)n * K * 2, NULL));
            TDM_TRY(tdm_cuda_to_bf16(dx, (size_t)n * K, xb, 0));
            TDM_TRY(tdm_cuda_gemm_skinny(xb, n, K, (const uint16_t *)dw, M, db,
                                         (flags & TDM_GEMV_ACCUM) != 0, dy, M, 0));
        }
    } else if (use_cublas == 1) {
        uint16_t *xb;
        cublasHandle_t h;
        tdm_status_t st;
        if (wdtype != TDM_DTYPE_BF16 || (flags & ~TDM_GEMV_ACCUM) || bias)
            return TDM_ERR_INVAL;
        TDM_TRY(d.alloc(&xb, (size_t)n * K * 2, NULL));
        TDM_TRY(tdm_cuda_to_bf16(dx, (size_t)n * K, xb, 0));
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
            return TDM_ERR_CUDA;
        st = tdm_cuda_gemm_bf16(h, xb, n, K, (const uint16_t *)dw, M,
                                (flags & TDM_GEMV_ACCUM) ? 1.0f : 0.0f, dy);
        cudaDeviceSynchronize();
        cublasDestroy(h);
        TDM_TRY(st);
    } else {
        tdm_cuda_gemv_t a = {dx,  ldx,    NULL, n,  K,
                             M,   wdtype, dw,   db, dn,
                             eps, flags,  dy,   M,  gemv_ksplit_of(use_cublas)};
        const tdm_cuda_l2pf_t own = {dw, (uint64_t)M * K * dsize(wdtype) / 16 * 16, use_cublas - 5,
                                     0};
        if (use_cublas >= 5 && use_cublas <= 8) /* the tail prefetch of its own weights */
            a.tail = own;
        TDM_TRY(tdm_cuda_gemv(&a, 0));
    }
    return sync_back(y, dy, (size_t)n * M * 4);
}

tdm_status_t tdm_cuda_test_gemv_fused(const float *x, uint32_t K, uint32_t M, int wdtype,
                                      const void *w, const float *norm_w, float eps, int flags,
                                      int swiglu, int calls, int pipe, float *y, int32_t *ret_id)
{
    dev d;
    float *dx, *dy, *dn = NULL;
    void *dw, *ws = NULL;
    int32_t *did = NULL;
    const uint32_t rows = swiglu ? 2 * M : M;
    if (!x || !w || !y || calls < 1 || (!swiglu && !ret_id) || pipe < 0 || pipe > 2)
        return TDM_ERR_INVAL;
    TDM_TRY(d.alloc(&dx, (size_t)K * 4, x));
    TDM_TRY(d.alloc(&dw, (size_t)rows * K * dsize(wdtype), w));
    TDM_TRY(d.alloc(&dy, (size_t)M * 4, NULL));
    if (norm_w)
        TDM_TRY(d.alloc(&dn, (size_t)K * 4, norm_w));
    if (ret_id) {
        TDM_TRY(d.alloc(&did, 4, NULL));
        TDM_TRY(d.alloc(&ws, TDM_CUDA_ARGMAX_WS, NULL));
        if (cudaMemset(ws, 0, TDM_CUDA_ARGMAX_WS) != cudaSuccess)
            return TDM_ERR_CUDA;
    }
    tdm_cuda_gemv_t a = {dx,     K,   NULL,
                         1,      K,   M,
                         wdtype, dw,  NULL,
                         dn,     eps, flags | (swiglu ? TDM_GEMV_SWIGLU : 0),
                         dy,     M,   pipe == 2 ? 10 : pipe == 1 ? 11 : 3};
    a.argmax = did;
    a.argmax_ws = ws;
    for (int c = 0; c < calls; c++) {
        if (did && cudaMemset(did, 0xff, 4) != cudaSuccess)
            return TDM_ERR_CUDA;
        TDM_TRY(tdm_cuda_gemv(&a, 0));
    }
    if (ret_id)
        TDM_TRY(sync_back(ret_id, did, 4));
    return sync_back(y, dy, (size_t)M * 4);
}

tdm_status_t tdm_cuda_test_gemv_embed(const uint16_t *table, uint32_t V, uint32_t K, uint32_t M,
                                      int32_t id, const uint16_t *w, const float *norm_w, float eps,
                                      int pipe, float *y, float *x_out)
{
    dev d;
    float *dy, *dn, *dxo;
    void *dt, *dw;
    uint32_t *did;
    const uint32_t uid = (uint32_t)id;
    if (!table || !w || !norm_w || !y || !x_out || id < 0 || (uint32_t)id >= V || pipe < 0 ||
        pipe > 2)
        return TDM_ERR_INVAL;
    TDM_TRY(d.alloc(&dt, (size_t)V * K * 2, table));
    TDM_TRY(d.alloc(&dw, (size_t)M * K * 2, w));
    TDM_TRY(d.alloc(&dn, (size_t)K * 4, norm_w));
    TDM_TRY(d.alloc(&did, 4, &uid));
    TDM_TRY(d.alloc(&dy, (size_t)M * 4, NULL));
    TDM_TRY(d.alloc(&dxo, (size_t)K * 4, NULL));
    tdm_cuda_gemv_t a = {dxo,
                         K,
                         did,
                         1,
                         K,
                         M,
                         TDM_DTYPE_BF16,
                         dw,
                         NULL,
                         dn,
                         eps,
                         TDM_GEMV_NORM,
                         dy,
                         M,
                         pipe == 2   ? 10
                         : pipe == 1 ? 11
                                     : 3};
    a.embed = (const uint16_t *)dt;
    a.embed_out = dxo;
    TDM_TRY(tdm_cuda_gemv(&a, 0));
    TDM_TRY(sync_back(x_out, dxo, (size_t)K * 4));
    return sync_back(y, dy, (size_t)M * 4);
}

tdm_status_t tdm_cuda_test_embed(const void *table, int dtype, uint32_t V, uint32_t d,
                                 const int32_t *ids, uint32_t n, float *out)
{
    dev dv;
    void *dt;
    int32_t *di;
    float *dout;
    TDM_TRY(dv.alloc(&dt, (size_t)V * d * dsize(dtype), table));
    TDM_TRY(dv.alloc(&di, (size_t)n * 4, ids));
    TDM_TRY(dv.alloc(&dout, (size_t)n * d * 4, NULL));
    TDM_TRY(tdm_cuda_embed(dt, dtype, di, n, d, dout, 0));
    return sync_back(out, dout, (size_t)n * d * 4);
}

tdm_status_t tdm_cuda_test_lt(const uint16_t *x, uint32_t n, uint32_t K, const uint16_t *w,
                              uint32_t M, int accum, float *y, int *lt_kept, int *candidates)
{
    dev dv;
    uint16_t *dx, *dw, *sx;
    float *dy, *sy;
    void *ws;
    const size_t ws_bytes = 32u << 20;
    TDM_TRY(dv.alloc(&dx, (size_t)n * K * 2, x));
    TDM_TRY(dv.alloc(&dw, (size_t)M * K * 2, w));
    TDM_TRY(dv.alloc(&dy, (size_t)n * M * 4, y));
    TDM_TRY(dv.alloc(&sx, (size_t)n * K * 2, NULL));
    TDM_TRY(dv.alloc(&sy, (size_t)n * M * 4, NULL));
    TDM_TRY(dv.alloc(&ws, ws_bytes, NULL));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return TDM_ERR_CUDA;
    tdm_cuda_lt_t *lt = NULL;
    tdm_cuda_lt_shape_t out = {};
    tdm_status_t st = cublasSetWorkspace(h, ws, ws_bytes) == CUBLAS_STATUS_SUCCESS
                          ? tdm_cuda_lt_init(ws, ws_bytes, &lt)
                          : TDM_ERR_CUDA;
    const uint16_t *wl[2] = {dw, dw};
    if (st == TDM_OK) /* timed on scratch buffers: dy keeps the caller's y for accum */
        st = tdm_cuda_lt_tune(lt, h, 0, n, K, M, accum, sx, sy, wl, 2, -1e9, &out);
    if (st == TDM_OK)
        st = tdm_cuda_lt_gemm(lt, h, 0, dx, n, K, dw, M, accum, dy);
    if (st == TDM_OK)
        st = sync_back(y, dy, (size_t)n * M * 4);
    *lt_kept = out.lt;
    *candidates = out.candidates;
    tdm_cuda_lt_free(lt);
    cublasDestroy(h);
    return st;
}

tdm_status_t tdm_cuda_test_rmsnorm(float *resid, const float *add, const float *w, float eps,
                                   uint32_t n, uint32_t d, int as_bf16, float *out)
{
    dev dv;
    float *dr, *da = NULL, *dw, *dout = NULL;
    uint16_t *db = NULL;
    TDM_TRY(dv.alloc(&dr, (size_t)n * d * 4, resid));
    if (add)
        TDM_TRY(dv.alloc(&da, (size_t)n * d * 4, add));
    TDM_TRY(dv.alloc(&dw, (size_t)d * 4, w));
    if (as_bf16)
        TDM_TRY(dv.alloc(&db, (size_t)n * d * 2, NULL));
    else
        TDM_TRY(dv.alloc(&dout, (size_t)n * d * 4, NULL));
    TDM_TRY(tdm_cuda_rmsnorm(dr, da, NULL, dw, eps, n, d, dout, db, 0));
    TDM_TRY(sync_back(resid, dr, (size_t)n * d * 4));
    if (!as_bf16)
        return sync_back(out, dout, (size_t)n * d * 4);
    std::vector<uint16_t> h((size_t)n * d);
    TDM_TRY(sync_back(h.data(), db, h.size() * 2));
    for (size_t i = 0; i < h.size(); i++)
        out[i] = bf16_to_f32(h[i]);
    return TDM_OK;
}

tdm_status_t tdm_cuda_test_qk_norm(float *qkv, uint32_t n, uint32_t ld, uint32_t H, uint32_t KV,
                                   uint32_t hd, const float *qw, const float *kw, float eps)
{
    dev dv;
    float *dq, *dqw, *dkw;
    TDM_TRY(dv.alloc(&dq, (size_t)n * ld * 4, qkv));
    TDM_TRY(dv.alloc(&dqw, (size_t)hd * 4, qw));
    TDM_TRY(dv.alloc(&dkw, (size_t)hd * 4, kw));
    TDM_TRY(tdm_cuda_qk_norm(dq, n, ld, H, KV, hd, dqw, dkw, eps, 0));
    return sync_back(qkv, dq, (size_t)n * ld * 4);
}

tdm_status_t tdm_cuda_test_silu_mul(const float *gu, uint32_t n, uint32_t I, int interleaved,
                                    float *out)
{
    dev dv;
    float *dg, *dout;
    TDM_TRY(dv.alloc(&dg, (size_t)n * 2 * I * 4, gu));
    TDM_TRY(dv.alloc(&dout, (size_t)n * I * 4, NULL));
    TDM_TRY(tdm_cuda_silu_mul(dg, n, I, interleaved, dout, NULL, 0));
    return sync_back(out, dout, (size_t)n * I * 4);
}

static tdm_status_t rows_dev(dev &dv, uint32_t n, const uint32_t *pos, const uint32_t *ptoff,
                             const uint32_t *pages, uint32_t np, uint32_t nactive,
                             tdm_cuda_rows_t *ret)
{
    uint32_t *dp, *dt, *dg, *dn;
    TDM_TRY(dv.alloc(&dp, (size_t)n * 4, pos));
    TDM_TRY(dv.alloc(&dt, (size_t)n * 4, ptoff));
    TDM_TRY(dv.alloc(&dg, (size_t)np * 4, pages));
    TDM_TRY(dv.alloc(&dn, 4, &nactive));
    *ret = {dp, dt, dg, dn};
    return TDM_OK;
}

tdm_status_t tdm_cuda_test_rope_kv(const tdm_kv_layout_t *l, uint32_t num_pages, uint8_t *pool,
                                   uint32_t layer, float *qkv, uint32_t n, uint32_t H,
                                   const float *inv_freq, const uint32_t *pos,
                                   const uint32_t *ptoff, const uint32_t *pages,
                                   uint32_t n_pages_total, uint32_t nactive)
{
    dev dv;
    uint64_t pool_bytes = 0;
    uint8_t *dpool;
    float *dq, *df;
    kv_dev kd;
    tdm_cuda_rows_t rows;
    size_t qbytes = (size_t)n * (H + 2 * l->num_kv_heads) * l->head_dim * 4;
    TDM_TRY(tdm_kv_layout_pool_bytes(l, num_pages, &pool_bytes));
    TDM_TRY(dv.alloc(&dpool, pool_bytes, pool));
    TDM_TRY(dv.alloc(&dq, qbytes, qkv));
    TDM_TRY(dv.alloc(&df, (size_t)l->head_dim / 2 * 4, inv_freq));
    TDM_TRY(make_kv(l, num_pages, dpool, &kd));
    TDM_TRY(rows_dev(dv, n, pos, ptoff, pages, n_pages_total, nactive, &rows));
    TDM_TRY(tdm_cuda_rope_kv_write(dq, n, H, df, &kd.k, layer, &rows, 0));
    TDM_TRY(sync_back(qkv, dq, qbytes));
    return sync_back(pool, dpool, pool_bytes);
}

tdm_status_t tdm_cuda_test_attention(const tdm_kv_layout_t *l, uint32_t num_pages,
                                     const uint8_t *pool, uint32_t layer, const float *qkv,
                                     uint32_t n, uint32_t H, const uint32_t *pos,
                                     const uint32_t *ptoff, const uint32_t *pages,
                                     uint32_t n_pages_total, uint32_t splits, int mma,
                                     uint32_t nactive, float *out)
{
    dev dv;
    uint64_t pool_bytes = 0;
    uint8_t *dpool;
    float *dq, *dpo, *dpm, *dout;
    kv_dev kd;
    tdm_cuda_rows_t rows;
    const uint32_t hd = l->head_dim;
    TDM_TRY(tdm_kv_layout_pool_bytes(l, num_pages, &pool_bytes));
    TDM_TRY(dv.alloc(&dpool, pool_bytes, pool));
    TDM_TRY(dv.alloc(&dq, (size_t)n * (H + 2 * l->num_kv_heads) * hd * 4, qkv));
    TDM_TRY(dv.alloc(&dpo, (size_t)n * H * splits * hd * 4, NULL));
    TDM_TRY(dv.alloc(&dpm, (size_t)n * H * splits * 2 * 4, NULL));
    TDM_TRY(dv.alloc(&dout, (size_t)n * H * hd * 4, NULL));
    TDM_TRY(make_kv(l, num_pages, dpool, &kd));
    TDM_TRY(rows_dev(dv, n, pos, ptoff, pages, n_pages_total, nactive, &rows));
    if (mma) /* 2: the cluster form (part_o NULL) */
        TDM_TRY(tdm_cuda_attention_decode(dq, n, H, &kd.k, layer, &rows, NULL, splits,
                                          mma == 2 ? NULL : dpo, mma == 2 ? NULL : dpm, dout, NULL,
                                          NULL, 0));
    else
        TDM_TRY(tdm_cuda_attention(dq, n, H, &kd.k, layer, &rows, splits, dpo, dpm, dout, NULL, 0));
    return sync_back(out, dout, (size_t)n * H * hd * 4);
}

tdm_status_t tdm_cuda_test_decode_rope(const tdm_kv_layout_t *l, uint32_t num_pages, uint8_t *pool,
                                       uint32_t layer, const float *qkv, uint32_t n, uint32_t H,
                                       const float *inv_freq, const uint32_t *pos,
                                       const uint32_t *ptoff, const uint32_t *pages,
                                       uint32_t n_pages_total, uint32_t nactive, uint32_t splits,
                                       int fused, int l2pf, float *out)
{
    dev dv;
    uint64_t pool_bytes = 0;
    uint8_t *dpool;
    float *dq, *df, *dpo, *dpm, *dout;
    kv_dev kd;
    tdm_cuda_rows_t rows;
    const uint32_t hd = l->head_dim;
    TDM_TRY(tdm_kv_layout_pool_bytes(l, num_pages, &pool_bytes));
    TDM_TRY(dv.alloc(&dpool, pool_bytes, pool));
    TDM_TRY(dv.alloc(&dq, (size_t)n * (H + 2 * l->num_kv_heads) * hd * 4, qkv));
    TDM_TRY(dv.alloc(&df, (size_t)hd / 2 * 4, inv_freq));
    TDM_TRY(dv.alloc(&dpo, (size_t)n * H * splits * hd * 4, NULL));
    TDM_TRY(dv.alloc(&dpm, (size_t)n * H * splits * 2 * 4, NULL));
    TDM_TRY(dv.alloc(&dout, (size_t)n * H * hd * 4, NULL));
    TDM_TRY(make_kv(l, num_pages, dpool, &kd));
    TDM_TRY(rows_dev(dv, n, pos, ptoff, pages, n_pages_total, nactive, &rows));
    if (!(fused & 1))
        TDM_TRY(tdm_cuda_rope_kv_write(dq, n, H, df, &kd.k, layer, &rows, 0));
    /* l2pf >= 0: prefetch blocks over the pool image (op l2pf & 3, early l2pf & 4) */
    const tdm_cuda_l2pf_t pf = {dpool, pool_bytes / 16 * 16, l2pf & 3, (l2pf & 4) != 0};
    const int cl = (fused & 2) != 0; /* the cluster form: part_o NULL */
    TDM_TRY(tdm_cuda_attention_decode(dq, n, H, &kd.k, layer, &rows, (fused & 1) ? df : NULL,
                                      splits, cl ? NULL : dpo, cl ? NULL : dpm, dout, NULL,
                                      l2pf >= 0 ? &pf : NULL, 0));
    TDM_TRY(sync_back(out, dout, (size_t)n * H * hd * 4));
    return sync_back(pool, dpool, pool_bytes);
}

tdm_status_t tdm_cuda_test_flash_attention(const tdm_kv_layout_t *l, uint32_t num_pages,
                                           const uint8_t *pool, uint32_t layer, const float *qkv,
                                           uint32_t n, uint32_t H, const uint32_t *pos,
                                           const uint32_t *ptoff, const uint32_t *pages,
                                           uint32_t n_pages_total, int plain, float *out)
{
    dev dv;
    uint64_t pool_bytes = 0;
    uint8_t *dpool;
    float *dq, *dout;
    uint32_t *dtiles;
    kv_dev kd;
    tdm_cuda_rows_t rows;
    const uint32_t hd = l->head_dim;
    std::vector<uint32_t> tiles(n + 1);
    uint32_t nt = tdm_cuda_flash_tiles(pos, ptoff, n, tiles.data(), n + 1);
    if (nt == 0)
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_kv_layout_pool_bytes(l, num_pages, &pool_bytes));
    TDM_TRY(dv.alloc(&dpool, pool_bytes, pool));
    TDM_TRY(dv.alloc(&dq, (size_t)n * (H + 2 * l->num_kv_heads) * hd * 4, qkv));
    TDM_TRY(dv.alloc(&dout, (size_t)n * H * hd * 4, NULL));
    TDM_TRY(dv.alloc(&dtiles, (size_t)nt * 4, tiles.data()));
    TDM_TRY(make_kv(l, num_pages, dpool, &kd));
    TDM_TRY(rows_dev(dv, n, pos, ptoff, pages, n_pages_total, n, &rows));
    const int was = tdm_cuda_flash_plain();
    tdm_cuda_set_flash_plain(plain);
    tdm_status_t st =
        tdm_cuda_flash_attention(dq, n, H, &kd.k, layer, &rows, dtiles, nt, dout, NULL, 0);
    tdm_cuda_set_flash_plain(was);
    TDM_TRY(st);
    return sync_back(out, dout, (size_t)n * H * hd * 4);
}

tdm_status_t tdm_cuda_test_argmax(const float *logits, uint32_t m, uint32_t V, int l2pf,
                                  int32_t *ret_ids)
{
    dev dv;
    float *dl;
    int32_t *di;
    TDM_TRY(dv.alloc(&dl, (size_t)m * V * 4, logits));
    TDM_TRY(dv.alloc(&di, (size_t)m * 4, NULL));
    const tdm_cuda_l2pf_t pf = {dl, (uint64_t)m * V * 4 / 16 * 16, l2pf & 3, (l2pf & 4) != 0};
    TDM_TRY(tdm_cuda_argmax(dl, m, V, di, l2pf >= 0 ? &pf : NULL, NULL, 0));
    return sync_back(ret_ids, di, (size_t)m * 4);
}

static tdm_status_t time_reps(int reps, double *ret_ms, tdm_status_t (*fn)(void *), void *arg)
{
    cudaEvent_t a, b;
    std::vector<float> ms;
    tdm_status_t st = TDM_OK;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess)
        return TDM_ERR_CUDA;
    for (int w = 0; w < 3 && st == TDM_OK; w++)
        st = fn(arg);
    for (int r = 0; r < reps && st == TDM_OK; r++) {
        float t = 0;
        cudaEventRecord(a);
        st = fn(arg);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&t, a, b);
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (st != TDM_OK || cudaDeviceSynchronize() != cudaSuccess)
        return st != TDM_OK ? st : TDM_ERR_CUDA;
    std::sort(ms.begin(), ms.end());
    *ret_ms = ms[ms.size() / 2];
    return TDM_OK;
}

__global__ void fill_bf16_kernel(uint16_t *p, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        /* values in about [-0.06, 0.06]: sign, exponent 2^-5..2^-8, random mantissa */
        p[i] = (uint16_t)(((h & 1u) << 15) | ((0x7au + ((h >> 1) & 3u)) << 7) | ((h >> 3) & 0x7fu));
    }
}

struct gemv_bench {
    tdm_cuda_gemv_t a;
    int use_cublas;
    cublasHandle_t h;
    uint16_t *xb;
    uint16_t *w0;   /* ncopy copies of the (M, K) weights, back to back */
    uint32_t ncopy; /* >= 22 and > 50 MB together: every pass reads HBM, not L2 */
};

static tdm_status_t gemv_one(gemv_bench *b)
{
    if (b->use_cublas == 21 || b->use_cublas == 22) /* one split; the shallow form */
        return tdm_cuda_gemm_tile(b->xb, b->a.n, b->a.K, (const uint16_t *)b->a.w, b->a.M, 0,
                                  b->a.y, b->a.M, b->use_cublas == 21 ? 1 : 0, 0);
    if (b->use_cublas == 18)
        return tdm_cuda_gemm_tile(b->xb, b->a.n, b->a.K, (const uint16_t *)b->a.w, b->a.M, 0,
                                  b->a.y, b->a.M, 0, 0);
    if (b->use_cublas == 2)
        return tdm_cuda_gemm_skinny(b->xb, b->a.n, b->a.K, (const uint16_t *)b->a.w, b->a.M, NULL,
                                    0, b->a.y, b->a.M, 0);
    if (b->use_cublas == 1)
        return tdm_cuda_gemm_bf16(b->h, b->xb, b->a.n, b->a.K, (const uint16_t *)b->a.w, b->a.M,
                                  0.0f, b->a.y);
    return tdm_cuda_gemv(&b->a, 0);
}

/* One timed unit: every copy once, back to back on the stream (as the layers follow each other
 * in a graph); the caller divides by ncopy. */
static tdm_status_t gemv_once(void *arg)
{
    gemv_bench *b = (gemv_bench *)arg;
    const size_t mk = (size_t)b->a.M * b->a.K;
    for (uint32_t c = 0; c < b->ncopy; c++) {
        b->a.w = b->w0 + c * mk;
        TDM_TRY(gemv_one(b));
    }
    return TDM_OK;
}

tdm_status_t tdm_cuda_bench_gemv(uint32_t n, uint32_t K, uint32_t M, int use_cublas, int reps,
                                 double *ret_ms)
{
    dev dv;
    gemv_bench b;
    uint16_t *dw;
    float *dx, *dy;
    tdm_status_t st;
    memset(&b, 0, sizeof(b));
    const size_t wbytes = (size_t)M * K * 2;
    b.ncopy = 22;
    while ((size_t)b.ncopy * wbytes < ((size_t)160 << 20))
        b.ncopy++;
    TDM_TRY(dv.alloc(&dw, wbytes * b.ncopy, NULL));
    TDM_TRY(dv.alloc(&dx, (size_t)n * K * 4, NULL));
    TDM_TRY(dv.alloc(&dy, (size_t)n * M * 4, NULL));
    TDM_TRY(dv.alloc(&b.xb, (size_t)n * K * 2, NULL));
    fill_bf16_kernel<<<1024, 256>>>(dw, (size_t)M * K * b.ncopy, 1u);
    b.w0 = dw;
    fill_bf16_kernel<<<64, 256>>>(b.xb, (size_t)n * K, 2u);
    cudaMemset(dx, 0x3c, (size_t)n * K * 4); /* 0.0115..., never zeros */
    b.a = {dx,
           K,
           NULL,
           n,
           K,
           M,
           TDM_DTYPE_BF16,
           dw,
           NULL,
           NULL,
           0.0f,
           0,
           dy,
           M,
           gemv_ksplit_of(use_cublas)};
    b.use_cublas = use_cublas;
    const int deep = tdm_cuda_tile_deep();
    if (use_cublas == 22)
        tdm_cuda_set_tile_deep(0);
    if (use_cublas == 1 && cublasCreate(&b.h) != CUBLAS_STATUS_SUCCESS)
        return TDM_ERR_CUDA;
    st = time_reps(reps, ret_ms, gemv_once, &b);
    tdm_cuda_set_tile_deep(deep);
    if (st == TDM_OK)
        *ret_ms /= b.ncopy;
    if (b.h)
        cublasDestroy(b.h);
    return st;
}

struct copy_bench {
    void *a, *b;
    size_t bytes;
};

static tdm_status_t copy_once(void *arg)
{
    copy_bench *c = (copy_bench *)arg;
    return cudaMemcpyAsync(c->b, c->a, c->bytes, cudaMemcpyDeviceToDevice, 0) == cudaSuccess
               ? TDM_OK
               : TDM_ERR_CUDA;
}

tdm_status_t tdm_cuda_bench_copy(size_t bytes, int reps, double *ret_ms)
{
    dev dv;
    copy_bench c;
    TDM_TRY(dv.alloc(&c.a, bytes, NULL));
    TDM_TRY(dv.alloc(&c.b, bytes, NULL));
    c.bytes = bytes;
    return time_reps(reps, ret_ms, copy_once, &c);
}

struct attn_bench {
    const float *q;
    uint32_t n, H, splits, nt;
    int mma;
    tdm_cuda_kv_t kv;
    tdm_cuda_rows_t rows;
    const uint32_t *tiles;
    float *po, *pm, *out;
};

static tdm_status_t attn_once(void *arg)
{
    attn_bench *b = (attn_bench *)arg;
    if (b->mma)
        return tdm_cuda_attention_decode(b->q, b->n, b->H, &b->kv, 0, &b->rows, NULL, b->splits,
                                         b->po, b->pm, b->out, NULL, NULL, 0);
    if (b->tiles)
        return tdm_cuda_flash_attention(b->q, b->n, b->H, &b->kv, 0, &b->rows, b->tiles, b->nt,
                                        b->out, NULL, 0);
    return tdm_cuda_attention(b->q, b->n, b->H, &b->kv, 0, &b->rows, b->splits, b->po, b->pm,
                              b->out, NULL, 0);
}

tdm_status_t tdm_cuda_bench_attention(uint32_t nseq, uint32_t rows_per_seq, uint32_t len,
                                      uint32_t splits, int flash, int reps, double *ret_ms)
{
    /* TinyLlama heads: H 32, KV 4, hd 64; bf16 KV, page size 16, one layer */
    const uint32_t H = 32, KV = 4, hd = 64, ps = 16, n = nseq * rows_per_seq;
    const uint32_t per = (len + ps - 1) / ps, num_pages = nseq * per;
    tdm_model_config_t c;
    tdm_kv_layout_t l;
    dev dv;
    attn_bench b;
    kv_dev kd;
    uint64_t pool_bytes = 0;
    uint8_t *dpool;
    float *dq;
    if (rows_per_seq == 0 || rows_per_seq > len || splits == 0)
        return TDM_ERR_INVAL;
    memset(&c, 0, sizeof(c));
    c.num_layers = 1;
    c.num_heads = H;
    c.num_kv_heads = KV;
    c.head_dim = hd;
    c.hidden_size = H * hd;
    TDM_TRY(tdm_kv_layout_init(&c, TDM_DTYPE_BF16, ps, 1, 0, &l));
    TDM_TRY(tdm_kv_layout_pool_bytes(&l, num_pages, &pool_bytes));
    TDM_TRY(dv.alloc(&dpool, pool_bytes, NULL));
    fill_bf16_kernel<<<1024, 256>>>((uint16_t *)dpool, pool_bytes / 2, 3u);
    TDM_TRY(dv.alloc(&dq, (size_t)n * (H + 2 * KV) * hd * 4, NULL));
    cudaMemset(dq, 0x3c, (size_t)n * (H + 2 * KV) * hd * 4);
    std::vector<uint32_t> pos(n), ptoff(n), pages(num_pages), tiles(n + 1);
    for (uint32_t i = 0; i < num_pages; i++)
        pages[i] = (i * 7919u) % num_pages; /* scattered, a permutation when gcd = 1 */
    for (uint32_t s = 0; s < nseq; s++)
        for (uint32_t r = 0; r < rows_per_seq; r++) {
            pos[s * rows_per_seq + r] = len - rows_per_seq + r;
            ptoff[s * rows_per_seq + r] = s * per;
        }
    memset(&b, 0, sizeof(b));
    TDM_TRY(make_kv(&l, num_pages, dpool, &kd));
    TDM_TRY(rows_dev(dv, n, pos.data(), ptoff.data(), pages.data(), num_pages, n, &b.rows));
    b.mma = flash == 2;
    if (flash == 1 || flash == 3) {
        uint32_t *dt;
        b.nt = tdm_cuda_flash_tiles(pos.data(), ptoff.data(), n, tiles.data(), n + 1);
        TDM_TRY(dv.alloc(&dt, (size_t)b.nt * 4, tiles.data()));
        b.tiles = dt;
    }
    TDM_TRY(dv.alloc(&b.po, (size_t)n * H * splits * hd * 4, NULL));
    TDM_TRY(dv.alloc(&b.pm, (size_t)n * H * splits * 2 * 4, NULL));
    TDM_TRY(dv.alloc(&b.out, (size_t)n * H * hd * 4, NULL));
    b.q = dq;
    b.n = n;
    b.H = H;
    b.splits = splits;
    b.kv = kd.k;
    const int was = tdm_cuda_flash_plain();
    tdm_cuda_set_flash_plain(flash == 3);
    tdm_status_t st = time_reps(reps, ret_ms, attn_once, &b);
    tdm_cuda_set_flash_plain(was);
    return st;
}

uint32_t tdm_cuda_test_tile_splits(uint32_t n, uint32_t K, uint32_t M)
{
    return tdm_cuda_tile_ok(n, K) ? tdm_cuda_tile_splits(n, K, M) : 0;
}
