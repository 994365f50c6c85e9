/*
 * kernels/backend.h — the compute backend table: every kernel the forward graph calls, as
 * function pointers a backend fills (CPU here, in kernels/cpu/; CUDA later, in kernels/cuda/).
 *
 * Shapes: n = rows of this call (tokens of a batch, all sequences concatenated), d = hidden,
 * H = this rank's query heads, KV = this rank's KV heads, hd = head_dim, V = vocab.
 * Activations are fp32 row-major; weights are tdm_tensor_t views (bf16, f16 or f32, row_stride).
 *
 * DETERMINISM CONTRACT (docs/design.md §9) — what makes CPU results batch-, chunk- and
 * TP-invariant, bit for bit. Every CPU kernel obeys it; the CUDA path is held to a tolerance
 * instead.
 *  1. Dot products over K. The sum over k of a[k]*b[k] is cut into blocks of TDM_DOT_BLOCK (64)
 *     elements aligned to absolute K offsets (block j = [64j, 64j+64), the last one may be short).
 *     Inside a block, TDM_DOT_LANES (8) lane sums: lane l takes the elements k with
 *     (k - 64j) % 8 == l, in increasing k: s_l = 0; s_l = s_l + a[k]*b[k] (a product rounded to
 *     fp32, then an add rounded to fp32; no FMA: kernels are compiled with -ffp-contract=off,
 *     never -ffast-math, and no path calls fma). A lane with no element stays +0. The block
 *     partial is the lane tree ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), i.e. T(0, 8) below over the
 *     lane sums. (This is what one 8-wide SIMD accumulator per block computes, so an AVX2 path,
 *     the generic C path and any other path produce the same bits; the generic C path keeps 8
 *     scalar lanes. Before commit 8718922 a block was one sequential sum; the lanes let SIMD
 *     run along K, so decode streams weight rows without transposing them.) Block partials
 *     p[0..nb) are combined by the fixed binary tree
 *         T(lo, n) = n == 1 ? p[lo] : T(lo, h) + T(lo + h, n - h),  h = (n + 1) / 2
 *     (for nb a power of two this is the pairwise tree; every even range splits in exact halves).
 *     tdm_reduce_tree() computes it; tdm_dot_f32() is the reference for the whole rule. Biases
 *     are added after the tree.
 *  2. Row-parallel layers (o_proj, down_proj) with TP size N: rank r holds the contiguous K range
 *     [r*K/N, (r+1)*K/N). When N is a power of two dividing nb and K/N is a multiple of 64, that
 *     range is exactly the subtree T(r*nb/N, nb/N), so each rank computes its subtree and the
 *     all-reduce combines rank partials with tdm_reduce_tree_combine() (the same tree over ranks
 *     in rank order): TP=1 and TP=N compute identical sums. (Other N are correct, not bit-exact.)
 *  3. Other reductions (RMSNorm's sum of squares, q·k over hd) use rule 1 as well.
 *  4. Attention: for a query at absolute position p, keys 0..p are visited in blocks of
 *     TDM_ATTN_BLOCK (16) absolute positions; per block the scores, the block max, then an online
 *     softmax update (running max m, sum l, accumulator o rescaled by exp(m_old - m_new)) with
 *     exp-weights summed in position order; the blocks are combined in block order; out = o / l.
 *     K and V are ALWAYS read back from the KV cache after being written, never the fresh fp32
 *     values, so a chunked prefill, a whole prefill and token-by-token decode see the same keys.
 *  5. Nothing depends on n, on the other rows of a call, on the thread count, on how work is
 *     split or on the instruction set: threads split output rows (or (row tile, KV head) pairs);
 *     each output element is computed by one thread with the sequence above. The CPU backend
 *     picks its SIMD path at init from cpuid (AVX2, else generic C; env TDM_CPU_ISA=generic|avx2
 *     forces one) and every path yields identical bits.
 *
 * Threading: a backend context is used by one caller thread at a time (it owns its workers).
 * Errors: kernels that can see bad input (token ids, positions, page ids) validate it and return
 * TDM_ERR_RANGE before writing anything; shape mismatches are TDM_ERR_INVAL.
 */
#ifndef TDM_KERNELS_BACKEND_H
#define TDM_KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/kv.h>
#include <tdm/model.h>
#include <tdm/status.h>

#define TDM_DOT_BLOCK 64u
#define TDM_DOT_LANES 8u
#define TDM_ATTN_BLOCK 16u
#define TDM_ROPE_MAX_HALF 256u /* head_dim <= 512 */

/* The fixed tree of rule 1 over p[0..n) (n >= 1). */
float tdm_reduce_tree(const float *p, uint32_t n);
/* Rule 2: out[i] = tree over parts[0][i], parts[1][i], ..., parts[nparts-1][i], in rank order.
 * `out` may alias parts[0]. nparts >= 1. */
void tdm_reduce_tree_combine(const float *const *parts, uint32_t nparts, float *out, size_t n);
/* Rule 1 for one dot product of length k (fp32 × fp32). */
float tdm_dot_f32(const float *a, const float *b, uint32_t k);

/* RoPE table: inv_freq[i] for i < head_dim/2, computed from the config (default, linear,
 * llama3) exactly like transformers' rope init. Rotation is the "rotate_half" (GPT-NeoX) form:
 *   out[i] = x[i]*cos - x[i+hd/2]*sin, out[i+hd/2] = x[i+hd/2]*cos + x[i]*sin,
 *   angle = (float)pos * inv_freq[i] (fp32 product), cos/sin in fp32. */
typedef struct tdm_rope {
    uint32_t head_dim;
    float inv_freq[TDM_ROPE_MAX_HALF];
} tdm_rope_t;
tdm_status_t tdm_rope_init(const tdm_model_config_t *cfg, tdm_rope_t *ret_rope);

/* One row of attention / KV write: the sequence's page table and the row's absolute position.
 * The page table must cover positions [0, pos]. */
typedef struct tdm_attn_row {
    const uint32_t *pages;
    uint32_t n_pages;
    uint32_t pos;
} tdm_attn_row_t;

typedef struct tdm_backend {
    const char *name;
    void *ctx;

    /* out (n, d) = table rows ids[i]; ids validated against table->rows. */
    tdm_status_t (*embed)(void *ctx, const tdm_tensor_t *table, const int32_t *ids, uint32_t n,
                          float *out);
    /* Fused residual add + RMSNorm over d columns, n rows:
     *   if add: resid += add (elementwise, fp32); out = resid * (1/sqrt(mean(resid^2) + eps)) * w
     * resid (n, d) in/out, add (n, d) or NULL, w (d), out (n, d). */
    tdm_status_t (*rmsnorm_add)(void *ctx, float *resid, const float *add, const tdm_tensor_t *w,
                                float eps, uint32_t n, uint32_t d, float *out);
    /* In-place RoPE on x (n, heads, hd) at positions pos[n]. */
    tdm_status_t (*rope)(void *ctx, const tdm_rope_t *rope, float *x, const uint32_t *pos,
                         uint32_t n, uint32_t heads);
    /* y (n, M) = x (n, K) · Wᵀ (+ bias), W (M, K) view, bias (M) or data NULL; rule 1 per element.
     * x has row stride K, y row stride M. */
    tdm_status_t (*matmul)(void *ctx, const float *x, uint32_t n, const tdm_tensor_t *w,
                           const tdm_tensor_t *bias, float *y);
    /* out (n, I) = silu(gate) * up, gate/up (n, I); silu(g) = g / (1 + exp(-g)). */
    tdm_status_t (*silu_mul)(void *ctx, const float *gate, const float *up, size_t count,
                             float *out);
    /* Write k, v (n, KV, hd) of `layer` into the cache at rows[i].pos (bf16 RNE; fp8 e4m3 with
     * per-token-per-head scale; f32 as is). */
    tdm_status_t (*kv_write)(void *ctx, const tdm_kv_buffers_t *kv, uint32_t layer, const float *k,
                             const float *v, const tdm_attn_row_t *rows, uint32_t n);
    /* Causal attention of q (n, H, hd) over the cache of `layer` (which already holds the rows
     * just written): row i attends to positions [0, rows[i].pos] of its sequence. out (n, H, hd).
     * scale = 1/sqrt(hd). prefill: any rows; decode: one row per sequence. On CPU both are the
     * same kernel (rule 4 makes them equal); CUDA specialises them. */
    tdm_status_t (*attn_prefill)(void *ctx, const tdm_kv_buffers_t *kv, uint32_t layer,
                                 const float *q, uint32_t heads, const tdm_attn_row_t *rows,
                                 uint32_t n, float *out);
    tdm_status_t (*attn_decode)(void *ctx, const tdm_kv_buffers_t *kv, uint32_t layer,
                                const float *q, uint32_t heads, const tdm_attn_row_t *rows,
                                uint32_t n, float *out);
    /* logits (m, V) = h[row_idx[j]] (d) · lm_headᵀ for j < m; h (n, d). */
    tdm_status_t (*logits)(void *ctx, const float *h, uint32_t d, const uint32_t *row_idx,
                           uint32_t m, const tdm_tensor_t *lm_head, float *logits);
    /* ret_ids[j] = first index of the maximum of logits row j (m, V); NaN never wins. */
    tdm_status_t (*argmax)(void *ctx, const float *logits, uint32_t m, uint32_t vocab,
                           int32_t *ret_ids);
} tdm_backend_t;

/* The CPU backend: a persistent pool of `threads` workers (0 = env TDM_CPU_THREADS, else the
 * number of online CPUs, capped at 64); the caller thread works too. */
tdm_status_t tdm_backend_cpu_init(uint32_t threads, tdm_backend_t *ret_be);
void tdm_backend_cpu_free(tdm_backend_t *be);
uint32_t tdm_backend_cpu_threads(const tdm_backend_t *be);
/* The SIMD path the CPU backend runs: "avx2" or "generic" (results are identical, rule 5). */
const char *tdm_backend_cpu_isa(const tdm_backend_t *be);

#endif
