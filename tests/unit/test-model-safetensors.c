/*
 * test-model-safetensors.c — the safetensors reader on files written by the test: a valid file
 * with metadata and mixed dtypes, then every way a header can lie (truncation, lengths, offsets
 * out of range or overlapping, sizes that disagree with the shape, overflow, misalignment,
 * unknown dtypes and keys), each refused with one clear message.
 */
#include "config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model-testutil.h"
#include "model_int.h"
#include "tap.h"

static char dir[256];

static tdm_status_t open_raw(const char *hdr, const void *data, size_t len, tdm_st_file_t *f,
                             char *err, size_t err_len)
{
    char p[512];
    tu_path(p, sizeof(p), dir, "t.safetensors");
    if (tu_write_raw(p, hdr, data, len) != 0)
        return TDM_ERR_IO;
    err[0] = '\0';
    return tdm_st_open(p, "t.safetensors", f, err, err_len);
}

static void expect_err(const char *hdr, size_t data_len, tdm_status_t want, const char *needle,
                       const char *what)
{
    static uint8_t zeros[4096];
    tdm_st_file_t f;
    char err[512];
    memset(&f, 0x5a, sizeof(f));
    tdm_status_t st = open_raw(hdr, zeros, data_len, &f, err, sizeof(err));
    if (!ok(st == want && strstr(err, needle) && f.map == (void *)0x5a5a5a5a5a5a5a5aull, "%s",
            what))
        diag("  status %s, err \"%s\", wanted %s containing \"%s\"", tdm_status_name(st), err,
             tdm_status_name(want), needle);
    if (st == TDM_OK)
        tdm_st_close(&f);
}

static void valid(void)
{
    /* 2x3 BF16 at 0, 2 F32 at 12 (4-aligned: header padded to 8), an empty tensor, an I64 */
    uint8_t data[32];
    for (int i = 0; i < 32; i++)
        data[i] = (uint8_t)i;
    tdm_st_file_t f;
    char err[512];
    tdm_status_t st = open_raw("{\"__metadata__\":{\"format\":\"pt\"},"
                               "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]},"
                               "\"e\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[20,20]},"
                               "\"c\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]}}",
                               data, sizeof(data), &f, err, sizeof(err));
    if (!ok(st == TDM_OK, "valid file with metadata, mixed dtypes and an empty tensor opens"))
        diag("  %s: %s", tdm_status_name(st), err);
    if (st != TDM_OK)
        return;
    is_int(f.n_tensors, 4, "four tensors");
    ok(f.data_len == 32, "data section length");
    int seen = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const tdm_st_tensor_t *t = &f.tensors[i];
        if (strcmp(t->name, "a") == 0)
            seen +=
                t->dtype == TDM_ST_BF16 && t->ndim == 2 && t->shape[1] == 3 && t->data == f.data;
        if (strcmp(t->name, "b") == 0)
            seen += t->dtype == TDM_ST_F32 && t->data == f.data + 12 && t->data[0] == 12;
        if (strcmp(t->name, "c") == 0)
            seen += t->dtype == TDM_ST_I64 && t->end == 32;
    }
    is_int(seen, 3, "dtypes, shapes and data pointers into the mapping");
    tdm_st_close(&f);
}

static void truncated(void)
{
    char p[512], err[512];
    tu_path(p, sizeof(p), dir, "short.safetensors");
    FILE *fp = fopen(p, "wb");
    fwrite("\x10\0\0", 1, 3, fp);
    fclose(fp);
    tdm_st_file_t f;
    tdm_status_t st = tdm_st_open(p, "short.safetensors", &f, err, sizeof(err));
    ok(st == TDM_ERR_FORMAT && strstr(err, "short.safetensors: truncated: 3 bytes"),
       "3-byte file: truncated (%s)", err);

    /* a real file cut in the middle of its data */
    tu_ckpt_t c = {0};
    tu_add(&c, "w", "F32", 2, 4, 4);
    tu_add(&c, "x", "F32", 1, 4, 0);
    tu_path(p, sizeof(p), dir, "cut.safetensors");
    tu_write_st(p, &c, 0, 1);
    tu_free(&c);
    struct stat sb;
    stat(p, &sb);
    if (truncate(p, sb.st_size - 10) != 0)
        diag("truncate failed");
    st = tdm_st_open(p, "cut.safetensors", &f, err, sizeof(err));
    ok(st == TDM_ERR_FORMAT && strstr(err, "tensor x: data_offsets [64, 80] out of range") &&
           strstr(err, "file truncated?"),
       "file cut inside the data: names the tensor (%s)", err);
    /* cut inside the header */
    if (truncate(p, 20) != 0)
        diag("truncate failed");
    st = tdm_st_open(p, "cut.safetensors", &f, err, sizeof(err));
    ok(st == TDM_ERR_FORMAT && strstr(err, "truncated: header length"),
       "file cut inside the header (%s)", err);
}

static void bad_headers(void)
{
    uint8_t buf[16] = {0};
    char err[256];
    tdm_st_tensor_t *t;
    size_t n;
    uint64_t huge = TDM_ST_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(huge >> (8 * i));
    tdm_status_t st = tdm_st_parse(buf, sizeof(buf), "m", &t, &n, NULL, err, sizeof(err));
    ok(st == TDM_ERR_FORMAT && strstr(err, "header length 100000001 outside"),
       "header length over 100 MB refused before reading it (%s)", err);
    memset(buf, 0xff, 8);
    st = tdm_st_parse(buf, sizeof(buf), "m", &t, &n, NULL, err, sizeof(err));
    ok(st == TDM_ERR_FORMAT, "header length 2^64-1 refused (%s)", err);

    expect_err("{\"a\":", 0, TDM_ERR_FORMAT, "header is not valid JSON", "broken JSON");
    expect_err("[1,2,3]", 0, TDM_ERR_FORMAT, "header is not a JSON object", "array header");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               16, TDM_ERR_FORMAT, "duplicate", "duplicate tensor names");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
               TDM_ERR_FORMAT, "tensor w: data_offsets [0, 16] out of range of the 8-byte",
               "end offset past the data section");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
               TDM_ERR_FORMAT, "tensor w: data_offsets [8, 4] out of range", "begin after end");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               16, TDM_ERR_FORMAT, "tensors w [0, 16] and v [8, 16] overlap", "overlapping");
    expect_err("{\"v\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[4,16]}}",
               16, TDM_ERR_FORMAT, "overlap", "overlap found after sorting by offset");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16,
               TDM_ERR_FORMAT, "tensor w: data_offsets span 16 bytes but F32 shape needs 12",
               "span disagrees with the shape");
    expect_err("{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[4],\"data_offsets\":[0,2]}}", 2,
               TDM_ERR_FORMAT, "tensor w: unknown dtype \"Q4_K\"", "unknown dtype named");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
               TDM_ERR_FORMAT, "tensor w: shape[0] is not a non-negative integer",
               "negative dimension");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
               "\"data_offsets\":[0,0]}}",
               0, TDM_ERR_OVERFLOW, "tensor w: element count overflows", "numel overflow");
    expect_err("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
               "\"data_offsets\":[0,0]}}",
               0, TDM_ERR_OVERFLOW, "tensor w: byte size overflows", "byte size overflow");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
               TDM_ERR_FORMAT, "tensor w: unknown header key \"x\"", "unknown entry key");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, TDM_ERR_FORMAT,
               "tensor w: needs string dtype", "missing data_offsets");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, TDM_ERR_FORMAT,
               "data_offsets must be [begin, end]", "one offset only");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8,
               TDM_ERR_FORMAT, "is not aligned to its 4-byte F32", "misaligned F32 data");
    expect_err("{\"__metadata__\":{\"k\":1}}", 0, TDM_ERR_FORMAT, "__metadata__.k is not a string",
               "non-string metadata");
    expect_err("{\"w\":[1]}", 0, TDM_ERR_FORMAT, "tensor w: header entry is not an object",
               "entry not an object");
    expect_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
               4, TDM_ERR_UNSUPPORTED, "9 dimensions", "too many dimensions");
}

static void not_files(void)
{
    tdm_st_file_t f;
    char p[512], err[512];
    tu_path(p, sizeof(p), dir, "nope.safetensors");
    is_int(tdm_st_open(p, "nope.safetensors", &f, err, sizeof(err)), TDM_ERR_NOTFOUND,
           "missing file is NOTFOUND");
    ok(tdm_st_open(dir, "dir", &f, err, sizeof(err)) == TDM_ERR_FORMAT &&
           strstr(err, "not a regular file"),
       "a directory is refused (%s)", err);
}

int main(void)
{
    if (!tu_mkdtemp(dir, sizeof(dir)))
        bail_out("cannot create a temp dir");
    valid();
    truncated();
    bad_headers();
    not_files();
    tu_rmtree(dir);
    return done_testing();
}
