/*
 * safetensors.c — the safetensors reader: map a file read-only and validate its header strictly.
 *
 * Layout: u64 little-endian N, then N bytes of JSON {name: {"dtype", "shape", "data_offsets":
 * [begin, end]}, "__metadata__": {str: str}}, then the data section; offsets are relative to it.
 * Everything in the header is untrusted: N is bounded (TDM_ST_MAX_HEADER) and must fit in the
 * file, every entry must have exactly those three keys with the right types, the byte count must
 * equal numel * element size (overflow-checked), ranges must lie inside the data section and may
 * not overlap (checked after sorting by offset), and each tensor must be aligned to its element
 * size in the mapping so the engine can read it in place. Tensors are never copied.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tdm/mem.h>

#include "model_int.h"

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    [TDM_ST_BOOL] = {"BOOL", 1},       [TDM_ST_U8] = {"U8", 1},
    [TDM_ST_I8] = {"I8", 1},           [TDM_ST_F8_E5M2] = {"F8_E5M2", 1},
    [TDM_ST_F8_E4M3] = {"F8_E4M3", 1}, [TDM_ST_I16] = {"I16", 2},
    [TDM_ST_U16] = {"U16", 2},         [TDM_ST_F16] = {"F16", 2},
    [TDM_ST_BF16] = {"BF16", 2},       [TDM_ST_I32] = {"I32", 4},
    [TDM_ST_U32] = {"U32", 4},         [TDM_ST_F32] = {"F32", 4},
    [TDM_ST_F64] = {"F64", 8},         [TDM_ST_I64] = {"I64", 8},
    [TDM_ST_U64] = {"U64", 8},
};
_Static_assert(sizeof(st_dtypes) / sizeof(st_dtypes[0]) == TDM_ST_DTYPE_MAX,
               "safetensors dtype table covers every tdm_st_dtype_t");

const char *tdm_st_dtype_name(tdm_st_dtype_t dt)
{
    return (unsigned)dt < TDM_ST_DTYPE_MAX ? st_dtypes[dt].name : "?";
}

size_t tdm_st_dtype_size(tdm_st_dtype_t dt)
{
    return (unsigned)dt < TDM_ST_DTYPE_MAX ? st_dtypes[dt].size : 0;
}

tdm_status_t tdm_st_dtype_to_engine(tdm_st_dtype_t dt, tdm_dtype_t *ret_dt)
{
    switch (dt) {
    case TDM_ST_F32:
        *ret_dt = TDM_DTYPE_F32;
        return TDM_OK;
    case TDM_ST_F16:
        *ret_dt = TDM_DTYPE_F16;
        return TDM_OK;
    case TDM_ST_BF16:
        *ret_dt = TDM_DTYPE_BF16;
        return TDM_OK;
    default:
        return TDM_ERR_UNSUPPORTED;
    }
}

void tdm_st_tensors_free(tdm_st_tensor_t *t, size_t n)
{
    if (!t)
        return;
    for (size_t i = 0; i < n; i++)
        tdm_free(t[i].name);
    tdm_free(t);
}

static int st_dtype_parse(const char *s, tdm_st_dtype_t *ret)
{
    for (int i = 0; i < TDM_ST_DTYPE_MAX; i++) {
        if (strcmp(s, tdm_st_dtype_name((tdm_st_dtype_t)i)) == 0) {
            *ret = (tdm_st_dtype_t)i;
            return 1;
        }
    }
    return 0;
}

/* One header entry → tensor (name not yet set). */
static tdm_status_t st_entry_parse(const char *label, const char *name, json_t *v,
                                   uint64_t data_len, tdm_st_tensor_t *t, char *err, size_t err_len)
{
    if (!json_is_object(v)) {
        tdm_model_seterr(err, err_len, "%s: tensor %s: header entry is not an object", label, name);
        return TDM_ERR_FORMAT;
    }
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val)
    {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
            strcmp(key, "data_offsets") != 0) {
            tdm_model_seterr(err, err_len, "%s: tensor %s: unknown header key \"%s\"", label, name,
                             key);
            return TDM_ERR_FORMAT;
        }
    }
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo)) {
        tdm_model_seterr(err, err_len,
                         "%s: tensor %s: needs string dtype, array shape and array data_offsets",
                         label, name);
        return TDM_ERR_FORMAT;
    }
    if (!st_dtype_parse(json_string_value(jd), &t->dtype)) {
        tdm_model_seterr(err, err_len, "%s: tensor %s: unknown dtype \"%s\"", label, name,
                         json_string_value(jd));
        return TDM_ERR_FORMAT;
    }
    size_t ndim = json_array_size(js);
    if (ndim > TDM_ST_MAX_DIMS) {
        tdm_model_seterr(err, err_len, "%s: tensor %s: %zu dimensions (at most %d supported)",
                         label, name, ndim, TDM_ST_MAX_DIMS);
        return TDM_ERR_UNSUPPORTED;
    }
    t->ndim = (uint32_t)ndim;
    uint64_t numel = 1;
    for (size_t i = 0; i < ndim; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            tdm_model_seterr(err, err_len,
                             "%s: tensor %s: shape[%zu] is not a non-negative integer", label, name,
                             i);
            return TDM_ERR_FORMAT;
        }
        t->shape[i] = (uint64_t)json_integer_value(d);
        if (__builtin_mul_overflow(numel, t->shape[i], &numel)) {
            tdm_model_seterr(err, err_len, "%s: tensor %s: element count overflows", label, name);
            return TDM_ERR_OVERFLOW;
        }
    }
    uint64_t nbytes;
    size_t esz = tdm_st_dtype_size(t->dtype);
    if (__builtin_mul_overflow(numel, (uint64_t)esz, &nbytes)) {
        tdm_model_seterr(err, err_len, "%s: tensor %s: byte size overflows", label, name);
        return TDM_ERR_OVERFLOW;
    }
    json_t *b = json_array_get(jo, 0), *e = json_array_get(jo, 1);
    if (json_array_size(jo) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < 0) {
        tdm_model_seterr(err, err_len,
                         "%s: tensor %s: data_offsets must be [begin, end], non-negative integers",
                         label, name);
        return TDM_ERR_FORMAT;
    }
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    if (t->end < t->begin || t->end > data_len) {
        tdm_model_seterr(err, err_len,
                         "%s: tensor %s: data_offsets [%llu, %llu] out of range of the %llu-byte "
                         "data section (file truncated?)",
                         label, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         (unsigned long long)data_len);
        return TDM_ERR_FORMAT;
    }
    if (t->end - t->begin != nbytes) {
        tdm_model_seterr(err, err_len,
                         "%s: tensor %s: data_offsets span %llu bytes but %s shape needs %llu",
                         label, name, (unsigned long long)(t->end - t->begin),
                         tdm_st_dtype_name(t->dtype), (unsigned long long)nbytes);
        return TDM_ERR_FORMAT;
    }
    return TDM_OK;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const tdm_st_tensor_t *x = *(const tdm_st_tensor_t *const *)a;
    const tdm_st_tensor_t *y = *(const tdm_st_tensor_t *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static tdm_status_t st_check_overlap(const char *label, tdm_st_tensor_t *t, size_t n, char *err,
                                     size_t err_len)
{
    if (n < 2)
        return TDM_OK;
    tdm_st_tensor_t **order = tdm_calloc(n, sizeof(*order));
    for (size_t i = 0; i < n; i++)
        order[i] = &t[i];
    qsort(order, n, sizeof(*order), cmp_by_offset);
    tdm_status_t st = TDM_OK;
    const tdm_st_tensor_t *prev = NULL; /* the non-empty tensor reaching furthest so far */
    for (size_t i = 0; i < n; i++) {
        const tdm_st_tensor_t *cur = order[i];
        if (cur->begin == cur->end)
            continue; /* empty tensors occupy no bytes */
        if (prev && cur->begin < prev->end) {
            tdm_model_seterr(
                err, err_len, "%s: tensors %s [%llu, %llu] and %s [%llu, %llu] overlap", label,
                prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
                cur->name, (unsigned long long)cur->begin, (unsigned long long)cur->end);
            st = TDM_ERR_FORMAT;
            break;
        }
        if (!prev || cur->end > prev->end)
            prev = cur;
    }
    tdm_free(order);
    return st;
}

tdm_status_t tdm_st_parse(const uint8_t *buf, size_t len, const char *label,
                          tdm_st_tensor_t **ret_tensors, size_t *ret_n, uint64_t *ret_data_off,
                          char *err, size_t err_len)
{
    if (len < 8) {
        tdm_model_seterr(err, err_len, "%s: truncated: %zu bytes, need at least 8", label, len);
        return TDM_ERR_FORMAT;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | buf[i];
    if (hlen < 2 || hlen > TDM_ST_MAX_HEADER) {
        tdm_model_seterr(err, err_len, "%s: header length %llu outside [2, %llu]", label,
                         (unsigned long long)hlen, (unsigned long long)TDM_ST_MAX_HEADER);
        return TDM_ERR_FORMAT;
    }
    if (hlen > len - 8) {
        tdm_model_seterr(err, err_len,
                         "%s: truncated: header length %llu but only %zu bytes follow it", label,
                         (unsigned long long)hlen, len - 8);
        return TDM_ERR_FORMAT;
    }
    uint64_t data_off = 8 + hlen;
    uint64_t data_len = len - data_off;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        tdm_model_seterr(err, err_len, "%s: header is not valid JSON: %s (offset %d)", label,
                         jerr.text, jerr.position);
        return TDM_ERR_FORMAT;
    }
    tdm_status_t st = TDM_OK;
    tdm_st_tensor_t *tensors = NULL;
    size_t n = 0;
    if (!json_is_object(root)) {
        tdm_model_seterr(err, err_len, "%s: header is not a JSON object", label);
        st = TDM_ERR_FORMAT;
        goto err_decref;
    }
    size_t cap = json_object_size(root);
    tensors = tdm_calloc(cap ? cap : 1, sizeof(*tensors));
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(val)) {
                tdm_model_seterr(err, err_len, "%s: __metadata__ is not an object", label);
                st = TDM_ERR_FORMAT;
                goto err_free_tensors;
            }
            json_object_foreach(val, mk, mv)
            {
                if (!json_is_string(mv)) {
                    tdm_model_seterr(err, err_len, "%s: __metadata__.%s is not a string", label,
                                     mk);
                    st = TDM_ERR_FORMAT;
                    goto err_free_tensors;
                }
            }
            continue;
        }
        if (key[0] == '\0') {
            tdm_model_seterr(err, err_len, "%s: empty tensor name", label);
            st = TDM_ERR_FORMAT;
            goto err_free_tensors;
        }
        tdm_st_tensor_t *t = &tensors[n];
        TDM_CHECK_GOTO(st_entry_parse(label, key, val, data_len, t, err, err_len), st,
                       err_free_tensors);
        t->name = tdm_strdup(key);
        n++;
        size_t esz = tdm_st_dtype_size(t->dtype);
        if ((data_off + t->begin) % esz != 0) {
            tdm_model_seterr(
                err, err_len,
                "%s: tensor %s: data at file offset %llu is not aligned to its %zu-byte "
                "%s elements",
                label, key, (unsigned long long)(data_off + t->begin), esz,
                tdm_st_dtype_name(t->dtype));
            st = TDM_ERR_FORMAT;
            goto err_free_tensors;
        }
        t->data = buf + data_off + t->begin;
    }
    TDM_CHECK_GOTO(st_check_overlap(label, tensors, n, err, err_len), st, err_free_tensors);
    json_decref(root);
    *ret_tensors = tensors;
    *ret_n = n;
    if (ret_data_off)
        *ret_data_off = data_off;
    return TDM_OK;

err_free_tensors:
    tdm_st_tensors_free(tensors, n);
err_decref:
    json_decref(root);
    return st;
}

tdm_status_t tdm_st_open(const char *path, const char *label, tdm_st_file_t *ret_file, char *err,
                         size_t err_len)
{
    tdm_status_t st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tdm_model_seterr(err, err_len, "%s: cannot open: %s", label, strerror(errno));
        return errno == ENOENT ? TDM_ERR_NOTFOUND : TDM_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        tdm_model_seterr(err, err_len, "%s: fstat: %s", label, strerror(errno));
        st = TDM_ERR_IO;
        goto err_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        tdm_model_seterr(err, err_len, "%s: not a regular file", label);
        st = TDM_ERR_FORMAT;
        goto err_close;
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        tdm_model_seterr(err, err_len, "%s: truncated: %zu bytes, need at least 8", label, len);
        st = TDM_ERR_FORMAT;
        goto err_close;
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        tdm_model_seterr(err, err_len, "%s: mmap %zu bytes: %s", label, len, strerror(errno));
        st = errno == ENOMEM ? TDM_ERR_NOMEM : TDM_ERR_IO;
        goto err_close;
    }
    tdm_st_tensor_t *tensors;
    size_t n;
    uint64_t data_off;
    TDM_CHECK_GOTO(tdm_st_parse(map, len, label, &tensors, &n, &data_off, err, err_len), st,
                   err_unmap);
    close(fd); /* the mapping keeps the file */
    memset(ret_file, 0, sizeof(*ret_file));
    ret_file->path = tdm_strdup(path);
    ret_file->map = map;
    ret_file->map_len = len;
    ret_file->data = (const uint8_t *)map + data_off;
    ret_file->data_len = len - data_off;
    ret_file->tensors = tensors;
    ret_file->n_tensors = n;
    return TDM_OK;

err_unmap:
    munmap(map, len);
err_close:
    close(fd);
    return st;
}

void tdm_st_close(tdm_st_file_t *f)
{
    if (!f)
        return;
    tdm_st_tensors_free(f->tensors, f->n_tensors);
    if (f->map)
        munmap(f->map, f->map_len);
    tdm_free(f->path);
    memset(f, 0, sizeof(*f));
}
