/*
 * tdm/layout.h — the KV layout record: what a KV pool looks like, as one value that both pools,
 * the transfer protocol, telemetry and the console agree on (invariant I6).
 *
 * The layout descriptor in dataplane/kv builds this record from the model config, the KV dtype,
 * the page size and the rank's share of KV heads; the device pool and the host mirror are both
 * sized from it (never from a formula of their own), and at startup each pool reports the record
 * it actually allocated. Two records are compared per sub-buffer; any difference is a
 * LAYOUT_MISMATCH.
 *
 * Per layer, each sub-buffer is an array of pages; `bytes_per_token` is what one token occupies in
 * that sub-buffer (all of this rank's KV heads), `page_stride` the distance in bytes between two
 * consecutive pages (>= page_size * bytes_per_token; alignment may pad it).
 * bf16 KV: sub-buffers K and V, 2 bytes per element. fp8 e4m3 KV: K and V at 1 byte per element,
 * plus K_SCALE and V_SCALE holding one fp32 scale per token per head. For 1 KV head of dim 128
 * that is 256 B/token for bf16 K, and 128 + 4 = 132 B/token for fp8 K with its scale.
 *
 * Encodings: binary (REGISTER frame body; little-endian, magic "TKVL", version, length; fixed
 * 32-byte header + 16 bytes per sub-buffer) and JSON (telemetry, console), see docs/contracts.md
 * "Layout record encoding". A valid record (tdm_layout_validate) has n_sub 4 with sub[i].kind == i
 * for FP8_E4M3 KV and n_sub 2 (K, V) otherwise, tp_rank < tp_size, non-zero geometry, and
 * page_stride >= page_size * bytes_per_token in every sub-buffer. Both decoders return only valid
 * records; both encoders refuse invalid ones. Thread-safe (no state).
 */
#ifndef TDM_LAYOUT_H
#define TDM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>

typedef enum tdm_dtype {
    TDM_DTYPE_F32 = 0,
    TDM_DTYPE_F16 = 1,
    TDM_DTYPE_BF16 = 2,
    TDM_DTYPE_FP8_E4M3 = 3,
    TDM_DTYPE_MAX
} tdm_dtype_t;

typedef enum tdm_kv_sub {
    TDM_KV_SUB_K = 0,
    TDM_KV_SUB_V = 1,
    TDM_KV_SUB_K_SCALE = 2,
    TDM_KV_SUB_V_SCALE = 3,
    TDM_KV_SUB_MAX
} tdm_kv_sub_t;

#define TDM_LAYOUT_MAGIC 0x4c564b54u /* "TKVL" little-endian */
#define TDM_LAYOUT_VERSION 1
#define TDM_LAYOUT_HDR_BYTES 32
#define TDM_LAYOUT_SUB_BYTES 16

typedef struct tdm_layout_sub {
    uint8_t kind;             /* tdm_kv_sub_t */
    uint8_t dtype;            /* tdm_dtype_t of the elements */
    uint32_t bytes_per_token; /* one token, all of this rank's KV heads, one layer */
    uint64_t page_stride;     /* bytes from one page to the next, one layer */
} tdm_layout_sub_t;

typedef struct tdm_layout_record {
    uint8_t kv_dtype; /* tdm_dtype_t: BF16 or FP8_E4M3 (F16/F32 allowed for tests) */
    uint8_t n_sub;    /* 2 (bf16) or 4 (fp8: K, V, K_SCALE, V_SCALE) */
    uint16_t tp_size;
    uint16_t tp_rank;
    uint32_t num_layers;
    uint32_t num_kv_heads; /* KV heads held by this rank */
    uint32_t head_dim;
    uint32_t page_size; /* tokens per page */
    uint32_t num_pages; /* pages in the pool this record describes (0 = unspecified) */
    tdm_layout_sub_t sub[TDM_KV_SUB_MAX];
} tdm_layout_record_t;

const char *tdm_dtype_name(tdm_dtype_t dt);
/* "bf16", "fp8_e4m3", ... → dtype; TDM_ERR_INVAL on an unknown name. */
tdm_status_t tdm_dtype_parse(const char *name, tdm_dtype_t *ret_dt);
size_t tdm_dtype_size(tdm_dtype_t dt);
const char *tdm_kv_sub_name(tdm_kv_sub_t sub);

/* Binary form. encode writes exactly tdm_layout_encoded_size() bytes; decode validates magic,
 * version, length, enum ranges and n_sub, and never reads past `len`. */
size_t tdm_layout_encoded_size(const tdm_layout_record_t *rec);
tdm_status_t tdm_layout_encode(const tdm_layout_record_t *rec, uint8_t *buf, size_t cap,
                               size_t *ret_len);
tdm_status_t tdm_layout_decode(const uint8_t *buf, size_t len, tdm_layout_record_t *ret_rec);

/* TDM_OK, or TDM_ERR_INVAL/TDM_ERR_RANGE with the first violated rule in `why`. */
tdm_status_t tdm_layout_validate(const tdm_layout_record_t *rec, char *why, size_t why_len);

/* JSON form: {"kv_dtype":"bf16","tp_size":..,"tp_rank":..,"num_layers":..,"num_kv_heads":..,
 * "head_dim":..,"page_size":..,"num_pages":..,"sub":[{"kind":"K","dtype":"bf16",
 * "bytes_per_token":..,"page_stride":..},..]}. to_json returns a new reference (NULL if the record
 * is invalid); from_json is strict (every member required, no unknown members) and names the key
 * path of the first problem in `err`. */
struct json_t;
struct json_t *tdm_layout_to_json(const tdm_layout_record_t *rec);
tdm_status_t tdm_layout_from_json(const struct json_t *obj, const char *path,
                                  tdm_layout_record_t *ret_rec, char *err, size_t err_len);

/* Compare two records sub-buffer by sub-buffer. Returns 1 if equal in every field that defines
 * the layout (num_pages and tp_rank excluded). On difference, writes a short description of the
 * first differing field into `why` (e.g. "sub K bytes_per_token 132 != 256"). */
int tdm_layout_equal(const tdm_layout_record_t *a, const tdm_layout_record_t *b, char *why,
                     size_t why_len);

#endif
