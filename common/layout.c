/*
 * layout.c — the KV layout record (invariant I6): dtype helpers, validation, the binary form
 * carried in REGISTER frames, the JSON form shown in telemetry and the console, and the
 * field-by-field comparison whose message becomes the LAYOUT_MISMATCH evidence.
 *
 * Binary form (little-endian, docs/contracts.md "Layout record encoding"):
 *   0 magic u32 "TKVL" | 4 version u16 | 6 length u16 (32 + 16*n_sub) | 8 kv_dtype u8 |
 *   9 n_sub u8 | 10 tp_size u16 | 12 tp_rank u16 | 14 head_dim u16 | 16 num_layers u32 |
 *   20 num_kv_heads u32 | 24 page_size u32 | 28 num_pages u32 |
 *   then per sub-buffer: kind u8 | dtype u8 | reserved u16 = 0 | bytes_per_token u32 |
 *   page_stride u64.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include <tdm/json.h>
#include <tdm/layout.h>

static const char *const dtype_names[] = {"f32", "f16", "bf16", "fp8_e4m3"};
static const size_t dtype_sizes[] = {4, 2, 2, 1};
static const char *const sub_names[] = {"K", "V", "K_SCALE", "V_SCALE"};
_Static_assert(sizeof(dtype_names) / sizeof(dtype_names[0]) == TDM_DTYPE_MAX,
               "dtype_names must name every tdm_dtype_t");
_Static_assert(sizeof(dtype_sizes) / sizeof(dtype_sizes[0]) == TDM_DTYPE_MAX,
               "dtype_sizes must size every tdm_dtype_t");
_Static_assert(sizeof(sub_names) / sizeof(sub_names[0]) == TDM_KV_SUB_MAX,
               "sub_names must name every tdm_kv_sub_t");

const char *tdm_dtype_name(tdm_dtype_t dt)
{
    return (unsigned)dt < TDM_DTYPE_MAX ? dtype_names[dt] : "?";
}

tdm_status_t tdm_dtype_parse(const char *name, tdm_dtype_t *ret_dt)
{
    /* Hugging Face spellings (torch_dtype) too, so config.json values parse here. */
    static const struct {
        const char *name;
        tdm_dtype_t dt;
    } aliases[] = {{"float32", TDM_DTYPE_F32},
                   {"float16", TDM_DTYPE_F16},
                   {"bfloat16", TDM_DTYPE_BF16},
                   {"float8_e4m3fn", TDM_DTYPE_FP8_E4M3}};
    if (!name)
        return TDM_ERR_INVAL;
    for (int i = 0; i < TDM_DTYPE_MAX; i++)
        if (!strcasecmp(name, dtype_names[i])) {
            *ret_dt = (tdm_dtype_t)i;
            return TDM_OK;
        }
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (!strcasecmp(name, aliases[i].name)) {
            *ret_dt = aliases[i].dt;
            return TDM_OK;
        }
    return TDM_ERR_INVAL;
}

size_t tdm_dtype_size(tdm_dtype_t dt)
{
    return (unsigned)dt < TDM_DTYPE_MAX ? dtype_sizes[dt] : 0;
}

const char *tdm_kv_sub_name(tdm_kv_sub_t sub)
{
    return (unsigned)sub < TDM_KV_SUB_MAX ? sub_names[sub] : "?";
}

static tdm_status_t parse_sub_name(const char *s, tdm_kv_sub_t *ret)
{
    for (int i = 0; i < TDM_KV_SUB_MAX; i++)
        if (!strcmp(s, sub_names[i])) {
            *ret = (tdm_kv_sub_t)i;
            return TDM_OK;
        }
    return TDM_ERR_INVAL;
}

#define WHY(...) (why ? (void)snprintf(why, why_len, __VA_ARGS__) : (void)0)

tdm_status_t tdm_layout_validate(const tdm_layout_record_t *rec, char *why, size_t why_len)
{
    if (rec->kv_dtype >= TDM_DTYPE_MAX) {
        WHY("kv_dtype %u unknown", rec->kv_dtype);
        return TDM_ERR_INVAL;
    }
    unsigned want_sub = rec->kv_dtype == TDM_DTYPE_FP8_E4M3 ? 4 : 2;
    if (rec->n_sub != want_sub) {
        WHY("n_sub %u, %s KV has %u", rec->n_sub, dtype_names[rec->kv_dtype], want_sub);
        return TDM_ERR_INVAL;
    }
    if (rec->tp_size == 0 || rec->tp_rank >= rec->tp_size) {
        WHY("tp_rank %u not below tp_size %u", rec->tp_rank, rec->tp_size);
        return TDM_ERR_RANGE;
    }
    if (!rec->num_layers || !rec->num_kv_heads || !rec->head_dim || !rec->page_size) {
        WHY("num_layers, num_kv_heads, head_dim and page_size must be non-zero");
        return TDM_ERR_RANGE;
    }
    if (rec->head_dim > UINT16_MAX) {
        WHY("head_dim %u above %u", rec->head_dim, UINT16_MAX);
        return TDM_ERR_RANGE;
    }
    for (unsigned i = 0; i < rec->n_sub; i++) {
        const tdm_layout_sub_t *s = &rec->sub[i];
        tdm_dtype_t want = i < TDM_KV_SUB_K_SCALE ? (tdm_dtype_t)rec->kv_dtype : TDM_DTYPE_F32;
        if (s->kind != i) {
            WHY("sub[%u] kind %u, expected %s", i, s->kind, sub_names[i]);
            return TDM_ERR_INVAL;
        }
        if (s->dtype != want) {
            WHY("sub %s dtype %s, expected %s", sub_names[i], tdm_dtype_name(s->dtype),
                dtype_names[want]);
            return TDM_ERR_INVAL;
        }
        if (s->bytes_per_token == 0 ||
            s->page_stride < (uint64_t)s->bytes_per_token * rec->page_size) {
            WHY("sub %s page_stride %" PRIu64 " below page_size %u * bytes_per_token %u",
                sub_names[i], s->page_stride, rec->page_size, s->bytes_per_token);
            return TDM_ERR_RANGE;
        }
    }
    return TDM_OK;
}

size_t tdm_layout_encoded_size(const tdm_layout_record_t *rec)
{
    unsigned n = rec->n_sub <= TDM_KV_SUB_MAX ? rec->n_sub : TDM_KV_SUB_MAX;
    return TDM_LAYOUT_HDR_BYTES + (size_t)n * TDM_LAYOUT_SUB_BYTES;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)get16(p) | ((uint32_t)get16(p + 2) << 16);
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32);
}

tdm_status_t tdm_layout_encode(const tdm_layout_record_t *rec, uint8_t *buf, size_t cap,
                               size_t *ret_len)
{
    TDM_TRY(tdm_layout_validate(rec, NULL, 0));
    size_t len = tdm_layout_encoded_size(rec);
    if (cap < len)
        return TDM_ERR_OVERFLOW;
    memset(buf, 0, len);
    put32(buf + 0, TDM_LAYOUT_MAGIC);
    put16(buf + 4, TDM_LAYOUT_VERSION);
    put16(buf + 6, (uint16_t)len);
    buf[8] = rec->kv_dtype;
    buf[9] = rec->n_sub;
    put16(buf + 10, rec->tp_size);
    put16(buf + 12, rec->tp_rank);
    put16(buf + 14, (uint16_t)rec->head_dim);
    put32(buf + 16, rec->num_layers);
    put32(buf + 20, rec->num_kv_heads);
    put32(buf + 24, rec->page_size);
    put32(buf + 28, rec->num_pages);
    for (unsigned i = 0; i < rec->n_sub; i++) {
        uint8_t *p = buf + TDM_LAYOUT_HDR_BYTES + (size_t)i * TDM_LAYOUT_SUB_BYTES;
        p[0] = rec->sub[i].kind;
        p[1] = rec->sub[i].dtype;
        put32(p + 4, rec->sub[i].bytes_per_token);
        put64(p + 8, rec->sub[i].page_stride);
    }
    *ret_len = len;
    return TDM_OK;
}

tdm_status_t tdm_layout_decode(const uint8_t *buf, size_t len, tdm_layout_record_t *ret_rec)
{
    tdm_layout_record_t r;
    if (len < TDM_LAYOUT_HDR_BYTES)
        return TDM_ERR_FORMAT;
    if (get32(buf) != TDM_LAYOUT_MAGIC || get16(buf + 4) != TDM_LAYOUT_VERSION)
        return TDM_ERR_FORMAT;
    memset(&r, 0, sizeof(r));
    r.kv_dtype = buf[8];
    r.n_sub = buf[9];
    if (r.n_sub == 0 || r.n_sub > TDM_KV_SUB_MAX)
        return TDM_ERR_FORMAT;
    /* length must match n_sub and the buffer exactly: no truncation, no trailing bytes */
    size_t want = TDM_LAYOUT_HDR_BYTES + (size_t)r.n_sub * TDM_LAYOUT_SUB_BYTES;
    if (get16(buf + 6) != want || len != want)
        return TDM_ERR_FORMAT;
    r.tp_size = get16(buf + 10);
    r.tp_rank = get16(buf + 12);
    r.head_dim = get16(buf + 14);
    r.num_layers = get32(buf + 16);
    r.num_kv_heads = get32(buf + 20);
    r.page_size = get32(buf + 24);
    r.num_pages = get32(buf + 28);
    for (unsigned i = 0; i < r.n_sub; i++) {
        const uint8_t *p = buf + TDM_LAYOUT_HDR_BYTES + (size_t)i * TDM_LAYOUT_SUB_BYTES;
        if (get16(p + 2) != 0)
            return TDM_ERR_FORMAT;
        r.sub[i].kind = p[0];
        r.sub[i].dtype = p[1];
        r.sub[i].bytes_per_token = get32(p + 4);
        r.sub[i].page_stride = get64(p + 8);
    }
    if (tdm_layout_validate(&r, NULL, 0) != TDM_OK)
        return TDM_ERR_FORMAT;
    *ret_rec = r;
    return TDM_OK;
}

struct json_t *tdm_layout_to_json(const tdm_layout_record_t *rec)
{
    if (tdm_layout_validate(rec, NULL, 0) != TDM_OK)
        return NULL;
    json_t *subs = json_array();
    for (unsigned i = 0; i < rec->n_sub; i++)
        json_array_append_new(subs,
                              json_pack("{s:s, s:s, s:I, s:I}", "kind", sub_names[rec->sub[i].kind],
                                        "dtype", dtype_names[rec->sub[i].dtype], "bytes_per_token",
                                        (json_int_t)rec->sub[i].bytes_per_token, "page_stride",
                                        (json_int_t)rec->sub[i].page_stride));
    return json_pack("{s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:o}", "kv_dtype",
                     dtype_names[rec->kv_dtype], "tp_size", (int)rec->tp_size, "tp_rank",
                     (int)rec->tp_rank, "num_layers", (json_int_t)rec->num_layers, "num_kv_heads",
                     (json_int_t)rec->num_kv_heads, "head_dim", (json_int_t)rec->head_dim,
                     "page_size", (json_int_t)rec->page_size, "num_pages",
                     (json_int_t)rec->num_pages, "sub", subs);
}

static tdm_status_t get_dtype(const json_t *o, const char *path, const char *key, uint8_t *ret,
                              char *err, size_t err_len)
{
    const char *s;
    tdm_dtype_t dt;
    char p[256];
    TDM_TRY(tdm_json_get_string(o, path, key, 32, &s, err, err_len));
    /* canonical names only on the wire */
    if (tdm_dtype_parse(s, &dt) != TDM_OK || strcmp(s, dtype_names[dt]) != 0) {
        snprintf(err, err_len, "%s: unknown dtype \"%s\"", tdm_json_path(p, sizeof(p), path, key),
                 s);
        return TDM_ERR_INVAL;
    }
    *ret = (uint8_t)dt;
    return TDM_OK;
}

tdm_status_t tdm_layout_from_json(const struct json_t *obj, const char *path,
                                  tdm_layout_record_t *ret_rec, char *err, size_t err_len)
{
    static const char *const keys[] = {"kv_dtype",     "tp_size",  "tp_rank",   "num_layers",
                                       "num_kv_heads", "head_dim", "page_size", "num_pages",
                                       "sub",          NULL};
    static const char *const sub_keys[] = {"kind", "dtype", "bytes_per_token", "page_stride", NULL};
    tdm_layout_record_t r;
    json_t *subs;
    uint64_t v;
    char sp[256], why[200];
    const char *kind;

    path = path ? path : "";
    memset(&r, 0, sizeof(r));
    TDM_TRY(tdm_json_check_keys(obj, path, keys, err, err_len));
    TDM_TRY(get_dtype(obj, path, "kv_dtype", &r.kv_dtype, err, err_len));
    TDM_TRY(tdm_json_get_uint(obj, path, "tp_size", UINT16_MAX, &v, err, err_len));
    r.tp_size = (uint16_t)v;
    TDM_TRY(tdm_json_get_uint(obj, path, "tp_rank", UINT16_MAX, &v, err, err_len));
    r.tp_rank = (uint16_t)v;
    TDM_TRY(tdm_json_get_uint(obj, path, "num_layers", UINT32_MAX, &v, err, err_len));
    r.num_layers = (uint32_t)v;
    TDM_TRY(tdm_json_get_uint(obj, path, "num_kv_heads", UINT32_MAX, &v, err, err_len));
    r.num_kv_heads = (uint32_t)v;
    TDM_TRY(tdm_json_get_uint(obj, path, "head_dim", UINT16_MAX, &v, err, err_len));
    r.head_dim = (uint32_t)v;
    TDM_TRY(tdm_json_get_uint(obj, path, "page_size", UINT32_MAX, &v, err, err_len));
    r.page_size = (uint32_t)v;
    TDM_TRY(tdm_json_get_uint(obj, path, "num_pages", UINT32_MAX, &v, err, err_len));
    r.num_pages = (uint32_t)v;
    TDM_TRY(tdm_json_get_array(obj, path, "sub", &subs, err, err_len));
    if (json_array_size(subs) == 0 || json_array_size(subs) > TDM_KV_SUB_MAX) {
        snprintf(err, err_len, "%s: %zu sub-buffers, expected 1..%d",
                 tdm_json_path(sp, sizeof(sp), path, "sub"), json_array_size(subs), TDM_KV_SUB_MAX);
        return TDM_ERR_RANGE;
    }
    r.n_sub = (uint8_t)json_array_size(subs);
    for (size_t i = 0; i < r.n_sub; i++) {
        json_t *s = json_array_get(subs, i);
        char base[200];
        tdm_kv_sub_t k;
        snprintf(base, sizeof(base), "%s", tdm_json_path(sp, sizeof(sp), path, "sub"));
        tdm_json_path_idx(sp, sizeof(sp), base, i);
        TDM_TRY(tdm_json_check_keys(s, sp, sub_keys, err, err_len));
        TDM_TRY(tdm_json_get_string(s, sp, "kind", 16, &kind, err, err_len));
        if (parse_sub_name(kind, &k) != TDM_OK) {
            snprintf(err, err_len, "%s.kind: unknown sub-buffer \"%s\"", sp, kind);
            return TDM_ERR_INVAL;
        }
        r.sub[i].kind = (uint8_t)k;
        TDM_TRY(get_dtype(s, sp, "dtype", &r.sub[i].dtype, err, err_len));
        TDM_TRY(tdm_json_get_uint(s, sp, "bytes_per_token", UINT32_MAX, &v, err, err_len));
        r.sub[i].bytes_per_token = (uint32_t)v;
        TDM_TRY(tdm_json_get_uint(s, sp, "page_stride", UINT64_MAX, &v, err, err_len));
        r.sub[i].page_stride = v;
    }
    tdm_status_t st = tdm_layout_validate(&r, why, sizeof(why));
    if (st != TDM_OK) {
        snprintf(err, err_len, "%s: %s", *path ? path : "layout", why);
        return st;
    }
    *ret_rec = r;
    return TDM_OK;
}

int tdm_layout_equal(const tdm_layout_record_t *a, const tdm_layout_record_t *b, char *why,
                     size_t why_len)
{
#define CMP(field)                                                                                 \
    if (a->field != b->field) {                                                                    \
        WHY(#field " %" PRIu64 " != %" PRIu64, (uint64_t)a->field, (uint64_t)b->field);            \
        return 0;                                                                                  \
    }
    if (a->kv_dtype != b->kv_dtype) {
        WHY("kv_dtype %s != %s", tdm_dtype_name(a->kv_dtype), tdm_dtype_name(b->kv_dtype));
        return 0;
    }
    CMP(n_sub)
    CMP(tp_size)
    CMP(num_layers)
    CMP(num_kv_heads)
    CMP(head_dim)
    CMP(page_size)
#undef CMP
    for (unsigned i = 0; i < a->n_sub && i < TDM_KV_SUB_MAX; i++) {
        const tdm_layout_sub_t *x = &a->sub[i], *y = &b->sub[i];
        const char *n = tdm_kv_sub_name(x->kind);
        if (x->kind != y->kind) {
            WHY("sub[%u] kind %s != %s", i, n, tdm_kv_sub_name(y->kind));
            return 0;
        }
        if (x->dtype != y->dtype) {
            WHY("sub %s dtype %s != %s", n, tdm_dtype_name(x->dtype), tdm_dtype_name(y->dtype));
            return 0;
        }
        if (x->bytes_per_token != y->bytes_per_token) {
            WHY("sub %s bytes_per_token %u != %u", n, x->bytes_per_token, y->bytes_per_token);
            return 0;
        }
        if (x->page_stride != y->page_stride) {
            WHY("sub %s page_stride %" PRIu64 " != %" PRIu64, n, x->page_stride, y->page_stride);
            return 0;
        }
    }
    if (why && why_len)
        why[0] = '\0';
    return 1;
}
