/*
 * test-layout.c — the KV layout record (I6): dtype helpers, validation rules, the binary form
 * (exact bytes, every truncation/extension/corruption refused), the JSON form (round trip,
 * strictness) and tdm_layout_equal's "why".
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <tdm/json.h>
#include <tdm/layout.h>

#include "tap.h"

static char err[512];

static tdm_layout_record_t rec_bf16(void)
{
    tdm_layout_record_t r;
    memset(&r, 0, sizeof(r));
    r.kv_dtype = TDM_DTYPE_BF16;
    r.n_sub = 2;
    r.tp_size = 2;
    r.tp_rank = 1;
    r.num_layers = 22;
    r.num_kv_heads = 1;
    r.head_dim = 128;
    r.page_size = 16;
    r.num_pages = 1000;
    r.sub[0] = (tdm_layout_sub_t){TDM_KV_SUB_K, TDM_DTYPE_BF16, 256, 4096};
    r.sub[1] = (tdm_layout_sub_t){TDM_KV_SUB_V, TDM_DTYPE_BF16, 256, 4096 + 64};
    return r;
}

static tdm_layout_record_t rec_fp8(void)
{
    tdm_layout_record_t r = rec_bf16();
    r.kv_dtype = TDM_DTYPE_FP8_E4M3;
    r.n_sub = 4;
    r.sub[0] = (tdm_layout_sub_t){TDM_KV_SUB_K, TDM_DTYPE_FP8_E4M3, 128, 2048};
    r.sub[1] = (tdm_layout_sub_t){TDM_KV_SUB_V, TDM_DTYPE_FP8_E4M3, 128, 2048};
    r.sub[2] = (tdm_layout_sub_t){TDM_KV_SUB_K_SCALE, TDM_DTYPE_F32, 4, 64};
    r.sub[3] = (tdm_layout_sub_t){TDM_KV_SUB_V_SCALE, TDM_DTYPE_F32, 4, 64};
    return r;
}

static void test_dtype(void)
{
    tdm_dtype_t dt = TDM_DTYPE_MAX;
    int all = 1;
    for (int i = 0; i < TDM_DTYPE_MAX; i++)
        all &= tdm_dtype_parse(tdm_dtype_name((tdm_dtype_t)i), &dt) == TDM_OK && (int)dt == i;
    ok(all, "every dtype name parses back");
    is_str(tdm_dtype_name(TDM_DTYPE_FP8_E4M3), "fp8_e4m3", "fp8 name");
    is_int(tdm_dtype_size(TDM_DTYPE_BF16), 2, "bf16 size");
    is_int(tdm_dtype_size(TDM_DTYPE_FP8_E4M3), 1, "fp8 size");
    is_int(tdm_dtype_size(TDM_DTYPE_F32), 4, "f32 size");
    is_int(tdm_dtype_size(TDM_DTYPE_MAX), 0, "size of an invalid dtype is 0");
    is_str(tdm_dtype_name(TDM_DTYPE_MAX), "?", "name of an invalid dtype");
    is_int(tdm_dtype_parse("bfloat16", &dt), TDM_OK, "HF spelling bfloat16");
    is_int(dt, TDM_DTYPE_BF16, "bfloat16 → bf16");
    dt = TDM_DTYPE_MAX;
    is_int(tdm_dtype_parse("fp16x", &dt), TDM_ERR_INVAL, "unknown dtype");
    is_int(dt, TDM_DTYPE_MAX, "output untouched");
    is_int(tdm_dtype_parse(NULL, &dt), TDM_ERR_INVAL, "NULL dtype");
    is_str(tdm_kv_sub_name(TDM_KV_SUB_V_SCALE), "V_SCALE", "sub name");
    is_str(tdm_kv_sub_name(TDM_KV_SUB_MAX), "?", "invalid sub name");
}

static void test_validate(void)
{
    tdm_layout_record_t r;
    is_int(tdm_layout_validate(&(tdm_layout_record_t){0}, err, sizeof(err)) != TDM_OK, 1,
           "zero record invalid");
    r = rec_bf16();
    is_int(tdm_layout_validate(&r, err, sizeof(err)), TDM_OK, "bf16 valid");
    r = rec_fp8();
    is_int(tdm_layout_validate(&r, err, sizeof(err)), TDM_OK, "fp8 valid");
    r = rec_bf16();
    r.n_sub = 4;
    ok(tdm_layout_validate(&r, err, sizeof(err)) != TDM_OK && strstr(err, "n_sub 4"),
       "bf16 with 4 subs: %s", err);
    r = rec_bf16();
    r.tp_rank = 2;
    ok(tdm_layout_validate(&r, err, sizeof(err)) == TDM_ERR_RANGE && strstr(err, "tp_rank"),
       "tp_rank >= tp_size: %s", err);
    r = rec_bf16();
    r.page_size = 0;
    ok(tdm_layout_validate(&r, err, sizeof(err)) == TDM_ERR_RANGE, "page_size 0: %s", err);
    r = rec_bf16();
    r.head_dim = 70000;
    ok(tdm_layout_validate(&r, err, sizeof(err)) == TDM_ERR_RANGE, "head_dim over u16: %s", err);
    r = rec_bf16();
    r.sub[1].kind = TDM_KV_SUB_K;
    ok(tdm_layout_validate(&r, err, sizeof(err)) != TDM_OK && strstr(err, "sub[1] kind"),
       "subs out of order: %s", err);
    r = rec_fp8();
    r.sub[2].dtype = TDM_DTYPE_BF16;
    ok(tdm_layout_validate(&r, err, sizeof(err)) != TDM_OK && strstr(err, "K_SCALE dtype"),
       "scale not f32: %s", err);
    r = rec_bf16();
    r.sub[0].page_stride = 16 * 256 - 1;
    ok(tdm_layout_validate(&r, err, sizeof(err)) == TDM_ERR_RANGE && strstr(err, "page_stride"),
       "stride below page_size*bytes_per_token: %s", err);
    r = rec_bf16();
    r.kv_dtype = 9;
    ok(tdm_layout_validate(&r, NULL, 0) == TDM_ERR_INVAL, "unknown kv_dtype, NULL why ok");
}

static void test_binary(void)
{
    tdm_layout_record_t r = rec_fp8(), d;
    uint8_t buf[128];
    size_t len = 0;

    is_int(tdm_layout_encoded_size(&r), 32 + 4 * 16, "fp8 size: header + 4 subs");
    is_int(tdm_layout_encode(&r, buf, sizeof(buf), &len), TDM_OK, "encode fp8");
    is_int(len, 96, "encoded length");
    ok(!memcmp(buf, "TKVL", 4), "magic reads TKVL on the wire");
    ok(buf[4] == 1 && buf[5] == 0 && buf[6] == 96 && buf[7] == 0, "version 1, length 96 (LE)");
    ok(buf[8] == TDM_DTYPE_FP8_E4M3 && buf[9] == 4, "kv_dtype, n_sub");
    ok(buf[14] == 128 && buf[15] == 0, "head_dim u16 at 14");
    ok(buf[16] == 22 && buf[28] == (1000 & 0xff) && buf[29] == (1000 >> 8), "num_layers, pages");
    ok(buf[32 + 16 * 2] == TDM_KV_SUB_K_SCALE && buf[33 + 16 * 2] == TDM_DTYPE_F32 &&
           buf[36 + 16 * 2] == 4 && buf[40 + 16 * 2] == 64,
       "sub K_SCALE bytes");
    memset(&d, 0xcc, sizeof(d));
    is_int(tdm_layout_decode(buf, len, &d), TDM_OK, "decode fp8");
    ok(tdm_layout_equal(&r, &d, err, sizeof(err)) && d.num_pages == 1000 && d.tp_rank == 1,
       "round trip fp8");
    ok(d.sub[0].page_stride == 2048 && d.sub[3].bytes_per_token == 4, "sub fields");

    tdm_layout_record_t b = rec_bf16();
    b.sub[1].page_stride = UINT64_MAX; /* u64 survives the wire */
    is_int(tdm_layout_encode(&b, buf, sizeof(buf), &len), TDM_OK, "encode bf16");
    is_int(len, 64, "bf16 length");
    is_int(tdm_layout_decode(buf, len, &d), TDM_OK, "decode bf16");
    is_u64(d.sub[1].page_stride, UINT64_MAX, "u64 stride round trip");
    ok(d.sub[2].bytes_per_token == 0 && d.sub[3].page_stride == 0, "unused subs zeroed");

    is_int(tdm_layout_encode(&b, buf, 63, &len), TDM_ERR_OVERFLOW, "encode into a short buffer");
    b.tp_rank = 5;
    is_int(tdm_layout_encode(&b, buf, sizeof(buf), &len) != TDM_OK, 1, "invalid record refused");

    /* Every truncation and a one-byte extension fail; so does each corrupted header field. */
    b = rec_bf16();
    tdm_layout_encode(&b, buf, sizeof(buf), &len);
    int all = 1;
    for (size_t n = 0; n < len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, buf, n);
        all &= tdm_layout_decode(copy, n, &d) == TDM_ERR_FORMAT;
        free(copy);
    }
    ok(all, "every truncation refused");
    buf[len] = 0;
    is_int(tdm_layout_decode(buf, len + 1, &d), TDM_ERR_FORMAT, "trailing byte refused");
    struct {
        size_t off;
        uint8_t val;
        const char *what;
    } bad[] = {{0, 'X', "magic"},
               {4, 2, "version"},
               {6, 65, "length field"},
               {8, TDM_DTYPE_MAX, "kv_dtype"},
               {9, 0, "n_sub 0"},
               {9, 5, "n_sub 5"},
               {9, 4, "n_sub 4 for bf16"},
               {12, 2, "tp_rank"},
               {24, 0, "page_size (LSB)"},
               {32, 1, "sub kind"},
               {33, TDM_DTYPE_F16, "sub dtype"},
               {34, 1, "reserved"},
               {40, 0, "stride LSB"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t c[128];
        memcpy(c, buf, len);
        c[bad[i].off] = bad[i].val;
        if (bad[i].off == 24)
            c[25] = 0; /* page_size 16 → 0 */
        if (bad[i].off == 40)
            c[41] = 0; /* stride 4096 → 0 */
        ok(tdm_layout_decode(c, len, &d) == TDM_ERR_FORMAT, "corrupt %s refused", bad[i].what);
    }
}

static void test_json(void)
{
    tdm_layout_record_t r = rec_fp8(), d;
    json_t *j = tdm_layout_to_json(&r);
    ok(j != NULL, "to_json");
    char *s = tdm_json_dumps(j);
    is_str(s,
           "{\"kv_dtype\":\"fp8_e4m3\",\"tp_size\":2,\"tp_rank\":1,\"num_layers\":22,"
           "\"num_kv_heads\":1,\"head_dim\":128,\"page_size\":16,\"num_pages\":1000,\"sub\":["
           "{\"kind\":\"K\",\"dtype\":\"fp8_e4m3\",\"bytes_per_token\":128,\"page_stride\":2048},"
           "{\"kind\":\"V\",\"dtype\":\"fp8_e4m3\",\"bytes_per_token\":128,\"page_stride\":2048},"
           "{\"kind\":\"K_SCALE\",\"dtype\":\"f32\",\"bytes_per_token\":4,\"page_stride\":64},"
           "{\"kind\":\"V_SCALE\",\"dtype\":\"f32\",\"bytes_per_token\":4,\"page_stride\":64}]}",
           "JSON form");
    free(s);
    memset(&d, 0, sizeof(d));
    is_int(tdm_layout_from_json(j, "layout", &d, err, sizeof(err)), TDM_OK, "from_json: %s", err);
    ok(tdm_layout_equal(&r, &d, NULL, 0) && d.num_pages == 1000 && d.tp_rank == 1,
       "JSON round trip");
    json_decref(j);
    r.kv_dtype = 77;
    ok(tdm_layout_to_json(&r) == NULL, "to_json refuses an invalid record");

    struct {
        const char *text, *expect;
    } bad[] = {
        {"{\"kv_dtype\":\"bf16\"}", "layout.tp_size: missing"},
        {"{\"kv_dtype\":\"bf17\",\"tp_size\":1}", "layout.kv_dtype: unknown dtype"},
        {"{\"kv_dtype\":\"bfloat16\",\"tp_size\":1}", "layout.kv_dtype: unknown dtype"},
        {"{\"kv_dtype\":\"bf16\",\"extra\":1}", "layout.extra: unknown member"},
        {"{\"kv_dtype\":\"bf16\",\"tp_size\":1,\"tp_rank\":0,\"num_layers\":1,\"num_kv_heads\":1,"
         "\"head_dim\":65536,\"page_size\":1,\"num_pages\":0,\"sub\":[]}",
         "layout.head_dim: 65536 outside"},
        {"{\"kv_dtype\":\"bf16\",\"tp_size\":1,\"tp_rank\":0,\"num_layers\":1,\"num_kv_heads\":1,"
         "\"head_dim\":1,\"page_size\":1,\"num_pages\":0,\"sub\":[]}",
         "layout.sub: 0 sub-buffers"},
        {"{\"kv_dtype\":\"bf16\",\"tp_size\":1,\"tp_rank\":0,\"num_layers\":1,\"num_kv_heads\":1,"
         "\"head_dim\":1,\"page_size\":1,\"num_pages\":0,\"sub\":[{\"kind\":\"Q\"}]}",
         "layout.sub[0].kind: unknown sub-buffer"},
        {"{\"kv_dtype\":\"bf16\",\"tp_size\":1,\"tp_rank\":0,\"num_layers\":1,\"num_kv_heads\":1,"
         "\"head_dim\":1,\"page_size\":1,\"num_pages\":0,\"sub\":[{\"kind\":\"K\",\"dtype\":"
         "\"bf16\",\"bytes_per_token\":2,\"page_stride\":\"2\"}]}",
         "layout.sub[0].page_stride: expected an integer"},
        {"{\"kv_dtype\":\"bf16\",\"tp_size\":1,\"tp_rank\":0,\"num_layers\":1,\"num_kv_heads\":1,"
         "\"head_dim\":1,\"page_size\":1,\"num_pages\":0,\"sub\":[{\"kind\":\"K\",\"dtype\":"
         "\"bf16\",\"bytes_per_token\":2,\"page_stride\":2}]}",
         "layout: n_sub 1, bf16 KV has 2"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *v = NULL;
        tdm_json_parse(bad[i].text, strlen(bad[i].text), 4096, &v, err, sizeof(err));
        err[0] = '\0';
        ok(tdm_layout_from_json(v, "layout", &d, err, sizeof(err)) != TDM_OK &&
               strstr(err, bad[i].expect),
           "JSON %zu refused: %s", i, err);
        json_decref(v);
    }
}

static void test_equal(void)
{
    tdm_layout_record_t a = rec_bf16(), b = rec_bf16();
    char why[128];

    b.num_pages = 5;
    b.tp_rank = 0;
    ok(tdm_layout_equal(&a, &b, why, sizeof(why)) && why[0] == '\0',
       "num_pages and tp_rank do not define the layout");
    b = rec_bf16();
    b.sub[0].bytes_per_token = 132;
    b.sub[0].page_stride = 132 * 16;
    ok(!tdm_layout_equal(&a, &b, why, sizeof(why)), "bytes_per_token differs");
    is_str(why, "sub K bytes_per_token 256 != 132", "why names sub, field and both values");
    b = rec_bf16();
    b.sub[1].page_stride = 4096;
    ok(!tdm_layout_equal(&a, &b, why, sizeof(why)), "stride differs");
    is_str(why, "sub V page_stride 4160 != 4096", "stride why");
    b = rec_fp8();
    ok(!tdm_layout_equal(&a, &b, why, sizeof(why)), "dtype differs");
    is_str(why, "kv_dtype bf16 != fp8_e4m3", "dtype why");
    b = rec_bf16();
    b.num_layers = 21;
    ok(!tdm_layout_equal(&a, &b, why, sizeof(why)), "layers differ");
    is_str(why, "num_layers 22 != 21", "layers why");
    b = rec_bf16();
    b.sub[0].dtype = TDM_DTYPE_F16;
    ok(!tdm_layout_equal(&a, &b, NULL, 0), "sub dtype differs (NULL why)");
    ok(!tdm_layout_equal(&a, &b, why, 8) && strlen(why) == 7, "why truncated to its buffer");
}

int main(void)
{
    test_dtype();
    test_validate();
    test_binary();
    test_json();
    test_equal();
    return done_testing();
}
