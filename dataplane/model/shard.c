/*
 * shard.c — per-rank tensor-parallel views of a loaded model (the contract in tdm/model.h).
 *
 * Column-parallel weights (q/k/v by heads, gate/up by intermediate rows) are row slices of the
 * (out, in) matrices: contiguous, row_stride unchanged. Row-parallel weights (o, down) are column
 * slices: data advanced to the first owned column, cols narrowed, row_stride the full width.
 * The embedding and lm_head are vocab-parallel: rank r owns rows [r*V/N, (r+1)*V/N) (integer
 * division, so shares differ by at most one row when N does not divide V) of both; a tied lm_head
 * is the same slice. Norms are replicated. Nothing is copied; resident_bytes counts the bytes of
 * weights this rank reads (a tied lm_head is counted once).
 */
#include "config.h"

#include <string.h>

#include <tdm/mem.h>

#include "model_int.h"

/* Rows [r0, r0+n) of t. */
static tdm_tensor_t rows_slice(const tdm_tensor_t *t, uint32_t r0, uint32_t n)
{
    tdm_tensor_t s = *t;
    if (!t->data)
        return s;
    size_t esz = tdm_dtype_size(t->dtype);
    s.data = (const uint8_t *)t->data + (size_t)r0 * t->row_stride * esz;
    s.rows = n;
    return s;
}

/* Columns [c0, c0+n) of t (for a 1-D tensor: elements). */
static tdm_tensor_t cols_slice(const tdm_tensor_t *t, uint32_t c0, uint32_t n)
{
    tdm_tensor_t s = *t;
    if (!t->data)
        return s;
    size_t esz = tdm_dtype_size(t->dtype);
    s.data = (const uint8_t *)t->data + (size_t)c0 * esz;
    s.cols = n;
    return s;
}

static uint64_t bytes_of(const tdm_tensor_t *t)
{
    if (!t->data)
        return 0;
    return (uint64_t)t->rows * t->cols * tdm_dtype_size(t->dtype);
}

tdm_status_t tdm_model_view_init(const tdm_model_t *m, uint32_t tp_size, uint32_t tp_rank,
                                 tdm_model_view_t *ret_view, char *err, size_t err_len)
{
    const tdm_model_config_t *c = &m->cfg;
    if (tp_size == 0 || tp_rank >= tp_size) {
        tdm_model_seterr(err, err_len, "tp rank %u out of range for tp size %u", tp_rank, tp_size);
        return TDM_ERR_INVAL;
    }
    const struct {
        const char *what;
        uint32_t n;
    } split[] = {
        {"num_attention_heads", c->num_heads},
        {"num_key_value_heads", c->num_kv_heads},
        {"intermediate_size", c->intermediate_size},
    };
    for (size_t i = 0; i < sizeof(split) / sizeof(split[0]); i++) {
        if (split[i].n % tp_size != 0) {
            tdm_model_seterr(err, err_len, "%s %u is not divisible by tp size %u", split[i].what,
                             split[i].n, tp_size);
            return TDM_ERR_UNSUPPORTED;
        }
    }
    tdm_model_view_t v;
    memset(&v, 0, sizeof(v));
    v.cfg = c;
    v.tp_size = tp_size;
    v.tp_rank = tp_rank;
    v.heads_r = c->num_heads / tp_size;
    v.kv_heads_r = c->num_kv_heads / tp_size;
    v.inter_r = c->intermediate_size / tp_size;
    tdm_model_vocab_range(c->vocab_size, tp_size, tp_rank, &v.vocab_lo, &v.vocab_r);
    if (v.vocab_r == 0) {
        tdm_model_seterr(err, err_len, "vocab_size %u leaves rank %u of tp size %u no rows",
                         c->vocab_size, tp_rank, tp_size);
        return TDM_ERR_UNSUPPORTED;
    }
    v.embed = rows_slice(&m->embed, v.vocab_lo, v.vocab_r);
    v.final_norm = m->final_norm;
    v.lm_head = rows_slice(&m->lm_head, v.vocab_lo, v.vocab_r);
    v.resident_bytes = bytes_of(&v.embed) + bytes_of(&v.final_norm) +
                       (c->tie_word_embeddings ? 0 : bytes_of(&v.lm_head));

    uint32_t qd = v.heads_r * c->head_dim, kvd = v.kv_heads_r * c->head_dim;
    uint32_t q0 = tp_rank * qd, kv0 = tp_rank * kvd, i0 = tp_rank * v.inter_r;
    v.layers = tdm_calloc(c->num_layers ? c->num_layers : 1, sizeof(*v.layers));
    for (uint32_t l = 0; l < c->num_layers; l++) {
        const tdm_layer_weights_t *F = &m->layers[l];
        tdm_layer_weights_t *L = &v.layers[l];
        L->attn_norm = F->attn_norm;
        L->mlp_norm = F->mlp_norm;
        L->q = rows_slice(&F->q, q0, qd);
        L->k = rows_slice(&F->k, kv0, kvd);
        L->v = rows_slice(&F->v, kv0, kvd);
        L->q_bias = cols_slice(&F->q_bias, q0, qd);
        L->k_bias = cols_slice(&F->k_bias, kv0, kvd);
        L->v_bias = cols_slice(&F->v_bias, kv0, kvd);
        L->q_norm = F->q_norm; /* per head: every rank applies the same weights */
        L->k_norm = F->k_norm;
        L->o = cols_slice(&F->o, q0, qd);
        L->gate = rows_slice(&F->gate, i0, v.inter_r);
        L->up = rows_slice(&F->up, i0, v.inter_r);
        L->down = cols_slice(&F->down, i0, v.inter_r);
        const tdm_tensor_t *all[] = {&L->attn_norm, &L->mlp_norm, &L->q,      &L->k,     &L->v,
                                     &L->q_bias,    &L->k_bias,   &L->v_bias, &L->o,     &L->gate,
                                     &L->up,        &L->down,     &L->q_norm, &L->k_norm};
        for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
            v.resident_bytes += bytes_of(all[k]);
    }
    *ret_view = v;
    return TDM_OK;
}

void tdm_model_view_free(tdm_model_view_t *v)
{
    if (!v)
        return;
    tdm_free(v->layers);
    v->layers = NULL;
}

uint64_t tdm_model_weight_bytes(const tdm_model_t *m)
{
    tdm_model_view_t v;
    if (tdm_model_view_init(m, 1, 0, &v, NULL, 0) != TDM_OK)
        return 0;
    uint64_t n = v.resident_bytes;
    tdm_model_view_free(&v);
    return n;
}
