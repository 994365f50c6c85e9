/* graph_int.h — the forward graph's state, shared by graph.c (build) and forward.c (run). */
#ifndef TDM_DATAPLANE_GRAPH_INT_H
#define TDM_DATAPLANE_GRAPH_INT_H

#include <tdm/hicache.h>

#include "graph.h"

struct tdm_graph {
    const tdm_model_view_t *view;
    const tdm_model_config_t *cfg;
    /* No KV buffers pointer here: every layer's KV comes from tdm_kv_layer_acquire (I7). */
    tdm_kv_gate_t *kv_gate, *own_kv_gate;
    tdm_kv_batch_t batch;
    uint32_t kv_page_size, kv_num_pages;
    const tdm_backend_t *be;
    tdm_graph_coll_t coll;
    tdm_rope_t rope;
    uint32_t max_tokens;
    int tp_exact;
    /* scratch, max_tokens rows each */
    float *arena;
    float *x, *h, *tmp, *q, *attn, *k, *v, *gate, *up;
    tdm_attn_row_t *rows;
    uint32_t *pos;
    int32_t *ids;
    uint32_t *out_rows;
    /* vocab-parallel (tp_size > 1): in-slice embedding rows (local id, row), and the logits
     * gather: lg_rows rows per chunk of vcap (the largest vocab share) floats per rank */
    int32_t *lids;
    uint32_t *lrow;
    uint32_t vcap, lg_rows;
    float *lg_local, *lg_all;
};

#endif
