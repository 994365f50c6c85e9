/*
 * model_int.h — internals of dataplane/model shared by its files (config, safetensors, loader,
 * shard, dtype) and by their unit tests and fuzz target. Not part of the public contract.
 *
 * Ownership: a tdm_st_file_t owns its mapping and its tensor array; a tdm_model_t owns its files.
 * Every tensor's `data` points into a read-only mapping and stays valid until the owner is freed.
 */
#ifndef TDM_MODEL_INT_H
#define TDM_MODEL_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include <tdm/model.h>
#include <tdm/status.h>

/* Every dtype the safetensors format defines: the parser knows all of them so it can validate
 * byte ranges of any file; the loader accepts only BF16/F16/F32 for the weights it uses. */
typedef enum tdm_st_dtype {
    TDM_ST_BOOL = 0,
    TDM_ST_U8,
    TDM_ST_I8,
    TDM_ST_F8_E5M2,
    TDM_ST_F8_E4M3,
    TDM_ST_I16,
    TDM_ST_U16,
    TDM_ST_F16,
    TDM_ST_BF16,
    TDM_ST_I32,
    TDM_ST_U32,
    TDM_ST_F32,
    TDM_ST_F64,
    TDM_ST_I64,
    TDM_ST_U64,
    TDM_ST_DTYPE_MAX
} tdm_st_dtype_t;

#define TDM_ST_MAX_DIMS 8
/* Header JSON larger than this is refused before anything is allocated (the reference
 * implementation's limit is the same 100 MB). */
#define TDM_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef struct tdm_st_tensor {
    char *name;
    tdm_st_dtype_t dtype;
    uint32_t ndim;
    uint64_t shape[TDM_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets into the data section */
    const uint8_t *data; /* data section + begin */
    uint32_t file;       /* index of the owning file in the model */
} tdm_st_tensor_t;

typedef struct tdm_st_file {
    char *path;
    void *map;
    size_t map_len;
    const uint8_t *data; /* data section: after the 8-byte length and the header */
    uint64_t data_len;
    tdm_st_tensor_t *tensors;
    size_t n_tensors;
} tdm_st_file_t;

const char *tdm_st_dtype_name(tdm_st_dtype_t dt);
size_t tdm_st_dtype_size(tdm_st_dtype_t dt);
/* BF16/F16/F32 → the engine dtype; TDM_ERR_UNSUPPORTED for the others. */
tdm_status_t tdm_st_dtype_to_engine(tdm_st_dtype_t dt, tdm_dtype_t *ret_dt);

/* Parse a whole safetensors file image `buf[0..len)`: 8-byte little-endian header length, JSON
 * header, data section. Validates every entry (dtype, shape, data_offsets within the data section,
 * size == numel*elemsize, no overlap, alignment to the element size) and returns the tensors with
 * `data` pointing into `buf`. `label` names the file in error messages. Never reads past `len`. */
tdm_status_t tdm_st_parse(const uint8_t *buf, size_t len, const char *label,
                          tdm_st_tensor_t **ret_tensors, size_t *ret_n, uint64_t *ret_data_off,
                          char *err, size_t err_len);
void tdm_st_tensors_free(tdm_st_tensor_t *t, size_t n);
/* mmap `path` read-only and parse it. */
tdm_status_t tdm_st_open(const char *path, const char *label, tdm_st_file_t *ret_file, char *err,
                         size_t err_len);
void tdm_st_close(tdm_st_file_t *f);

/* config.json (+ generation_config.json, may be NULL) → config. weight_dtype is TDM_DTYPE_MAX when
 * neither torch_dtype nor dtype is given (the loader then takes the embedding's dtype). */
tdm_status_t tdm_model_config_from_json(json_t *cfg, json_t *gen, tdm_model_config_t *ret_cfg,
                                        char *err, size_t err_len);

struct tdm_model {
    tdm_model_config_t cfg;
    char *dir;
    tdm_st_file_t *files;
    uint32_t n_files;
    const tdm_st_tensor_t **by_name; /* every tensor of every file, sorted by name */
    size_t n_tensors;
    /* full (unsharded) weights */
    tdm_tensor_t embed, final_norm, lm_head;
    tdm_layer_weights_t *layers;
};

const tdm_st_tensor_t *tdm_model_find(const tdm_model_t *m, const char *name);

__attribute__((format(printf, 3, 4))) static inline void tdm_model_seterr(char *err, size_t len,
                                                                          const char *fmt, ...)
{
    if (!err || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

#endif
