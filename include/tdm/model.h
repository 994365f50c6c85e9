/*
 * tdm/model.h — a Hugging Face checkpoint as the engine sees it: config + weight views.
 *
 * tdm_model_load() reads config.json (+ generation_config.json), maps model.safetensors or every
 * shard of model.safetensors.index.json read-only (mmap, never copied), validates every tensor's
 * dtype, shape and byte range, and fills per-layer views. Architectures: LlamaForCausalLM (GQA,
 * head_dim override, tie_word_embeddings, rope_scaling llama3|linear), Qwen2ForCausalLM (q/k/v
 * bias) and Qwen3ForCausalLM (q_norm/k_norm: RMSNorm over each head's head_dim values of q and k
 * before RoPE, replicated on every TP rank; no qkv bias unless attention_bias). Anything else is
 * TDM_ERR_UNSUPPORTED with a message naming the field.
 *
 * Tensor parallelism (the sharding contract shared with serving): with tp_size N and rank r,
 *   column-parallel (output dim split in N contiguous slices): q_proj, k_proj, v_proj (by heads:
 *     rank r owns q heads [r*H/N, (r+1)*H/N) and kv heads [r*KV/N, (r+1)*KV/N)), their biases,
 *     gate_proj, up_proj (intermediate rows [r*I/N, (r+1)*I/N));
 *   row-parallel (input dim split): o_proj (input columns of its heads), down_proj (its
 *     intermediate columns); their partial outputs are summed across ranks in rank order by the
 *     reduction contract of docs/design.md §9 (kernels/backend.h);
 *   vocab-parallel: embed_tokens and lm_head (the same slice when tied): rank r owns vocab rows
 *     [r*V/N, (r+1)*V/N) (integer division: when N does not divide V the shares differ by at most
 *     one row, the lower ranks getting the smaller ones; tdm_model_vocab_range). The embedding is
 *     each rank's rows for the ids in its slice and -0.0 elsewhere, summed across ranks by the same
 *     all-reduce (exact: -0.0 is the additive identity, so only the owner's value survives, its
 *     sign of zero included); the logits are each rank's slice, all-gathered in rank order;
 *   replicated: the norms.
 * A view of a sharded weight points into the mapping (row slices are contiguous; column slices
 * carry a row stride), so each rank's resident weight bytes are ~1/N of the sharded tensors.
 * Requires heads, kv heads and intermediate size divisible by N, and V >= N.
 *
 * Thread-safety: a loaded model is immutable and may be read by any number of threads.
 */
#ifndef TDM_MODEL_H
#define TDM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/layout.h>
#include <tdm/status.h>

typedef enum tdm_arch {
    TDM_ARCH_LLAMA = 0,
    TDM_ARCH_QWEN2 = 1,
    TDM_ARCH_QWEN3 = 2, /* Llama layout + per-head RMSNorm of q and k before RoPE, no qkv bias */
    TDM_ARCH_MAX
} tdm_arch_t;

/* "llama", "qwen2", "qwen3"; "?" out of range. */
const char *tdm_arch_name(tdm_arch_t a);

typedef enum tdm_rope_type {
    TDM_ROPE_DEFAULT = 0,
    TDM_ROPE_LINEAR = 1,
    TDM_ROPE_LLAMA3 = 2,
    TDM_ROPE_MAX
} tdm_rope_type_t;

typedef struct tdm_model_config {
    tdm_arch_t arch;
    uint32_t vocab_size;
    uint32_t hidden_size;
    uint32_t intermediate_size;
    uint32_t num_layers;
    uint32_t num_heads;
    uint32_t num_kv_heads;
    uint32_t head_dim; /* config head_dim if present, else hidden/num_heads */
    uint32_t max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    tdm_rope_type_t rope_type;
    float rope_factor;                                 /* linear and llama3 */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    uint32_t rope_original_max_pos;                    /* llama3 */
    int tie_word_embeddings;
    int attention_bias;       /* q/k/v bias (Qwen2 always; Llama if attention_bias: true) */
    tdm_dtype_t weight_dtype; /* torch_dtype / dtype of the stored tensors */
    int32_t bos_token_id;     /* -1 if none */
    int32_t eos_token_ids[8]; /* from config and generation_config; -1 padded */
    uint32_t n_eos;
} tdm_model_config_t;

/* A 1-D or 2-D view into mapped weights. Row-major: element (i, j) at data + i*row_stride + j
 * (in elements of dtype). For 1-D tensors rows == 1. */
typedef struct tdm_tensor {
    tdm_dtype_t dtype;
    uint32_t rows, cols;
    uint64_t row_stride; /* elements between rows (== cols unless a column slice) */
    const void *data;
} tdm_tensor_t;

typedef struct tdm_layer_weights {
    tdm_tensor_t attn_norm;              /* (hidden) */
    tdm_tensor_t q, k, v;                /* (heads_r*hd, hidden), (kv_r*hd, hidden) */
    tdm_tensor_t q_bias, k_bias, v_bias; /* (heads_r*hd) etc.; data NULL when absent */
    tdm_tensor_t q_norm, k_norm;         /* (hd) Qwen3 per-head RMSNorm weights; else NULL */
    tdm_tensor_t o;                      /* (hidden, heads_r*hd) */
    tdm_tensor_t mlp_norm;               /* (hidden) */
    tdm_tensor_t gate, up;               /* (inter_r, hidden) */
    tdm_tensor_t down;                   /* (hidden, inter_r) */
} tdm_layer_weights_t;

typedef struct tdm_model tdm_model_t;

typedef struct tdm_model_view {
    const tdm_model_config_t *cfg;
    uint32_t tp_size, tp_rank;
    uint32_t heads_r, kv_heads_r, inter_r; /* this rank's shares */
    uint32_t vocab_lo, vocab_r;            /* this rank's vocab rows [vocab_lo, vocab_lo+vocab_r) */
    tdm_tensor_t embed;                    /* (vocab_r, hidden): rows vocab_lo.. of embed_tokens */
    tdm_tensor_t final_norm;               /* (hidden) */
    tdm_tensor_t lm_head;                  /* (vocab_r, hidden); == embed when tied */
    tdm_layer_weights_t *layers;           /* num_layers */
    uint64_t resident_bytes;               /* bytes of weights this rank reads */
} tdm_model_view_t;

/* Load a checkpoint directory. On failure returns a status and writes a one-line reason naming
 * the file/field/tensor into `err` (if non-NULL). */
tdm_status_t tdm_model_load(const char *dir, tdm_model_t **ret_model, char *err, size_t err_len);

/* Loading progress, called on the loading thread: stage "config", "map" (done/total = shards),
 * "tensors" (layers validated), "prefault" (bytes read; at most ~20 calls). */
typedef void (*tdm_model_progress_fn)(void *arg, const char *stage, uint64_t done, uint64_t total);
typedef struct tdm_model_load_opts {
    tdm_model_progress_fn progress; /* NULL: silent */
    void *progress_arg;
    int prefault; /* read every mapped page once, so the first forward does not page-fault */
} tdm_model_load_opts_t;
/* tdm_model_load with options (opts may be NULL). */
tdm_status_t tdm_model_load_ex(const char *dir, const tdm_model_load_opts_t *opts,
                               tdm_model_t **ret_model, char *err, size_t err_len);
/* A ready-made progress callback for CLIs: one line per call on stderr,
 * "loading model: <stage> <done>/<total>" prefixed with `arg` (a const char *) when non-NULL. */
void tdm_model_progress_stderr(void *arg, const char *stage, uint64_t done, uint64_t total);

void tdm_model_free(tdm_model_t *m);
const tdm_model_config_t *tdm_model_config(const tdm_model_t *m);
/* Total bytes of the weights the engine uses (what a tp_size 1 view reads). */
uint64_t tdm_model_weight_bytes(const tdm_model_t *m);
/* Any 1-D or 2-D BF16/F16/F32 tensor of the checkpoint by its name, unsharded (tests, tools).
 * TDM_ERR_NOTFOUND if absent, TDM_ERR_UNSUPPORTED for other dtypes or ranks. */
tdm_status_t tdm_model_tensor(const tdm_model_t *m, const char *name, tdm_tensor_t *ret_tensor);
/* Build this rank's view (allocates the layer array; free with tdm_model_view_free). */
tdm_status_t tdm_model_view_init(const tdm_model_t *m, uint32_t tp_size, uint32_t tp_rank,
                                 tdm_model_view_t *ret_view, char *err, size_t err_len);
void tdm_model_view_free(tdm_model_view_t *v);
/* Rank tp_rank's vocab rows by the contract above: [*ret_lo, *ret_lo + *ret_n) (all of them for
 * tp_size <= 1 or an out-of-range rank). */
static inline void tdm_model_vocab_range(uint32_t vocab, uint32_t tp_size, uint32_t tp_rank,
                                         uint32_t *ret_lo, uint32_t *ret_n)
{
    uint32_t lo = 0, hi = vocab;
    if (tp_size > 1 && tp_rank < tp_size) {
        lo = (uint32_t)((uint64_t)tp_rank * vocab / tp_size);
        hi = (uint32_t)((uint64_t)(tp_rank + 1) * vocab / tp_size);
    }
    *ret_lo = lo;
    *ret_n = hi - lo;
}

/* Element conversion used everywhere weights are read. */
float tdm_bf16_to_f32(uint16_t h);
uint16_t tdm_f32_to_bf16(float f); /* round to nearest even, NaN preserved */
float tdm_f16_to_f32(uint16_t h);
uint16_t tdm_f32_to_f16(float f); /* round to nearest even, overflow to inf, NaN preserved */
/* Row `row` of a view (cols elements, any of the three dtypes) widened into out[cols]. */
void tdm_tensor_row_to_f32(const tdm_tensor_t *t, uint32_t row, float *out);

#endif
