/*
 * test-model-loader.c — whole checkpoints on disk → tdm_model_t and per-rank views.
 *
 * Builds tiny Llama (bf16, untied, GQA) and Qwen2 (tied, q/k/v bias, f16 with f32 norms, sharded)
 * checkpoints in a temp dir and checks config values, tensor values, TP views for tp 1 and 2 and
 * their resident bytes; then breaks them one way at a time (missing tensor, wrong shape, wrong
 * dtype, unknown architecture, truncated file, bad shard index) and asserts the one-line error.
 * The golden checkpoints of tests/fixtures are covered by test-model-fixtures.c.
 */
#include "config.h"

#include <sys/stat.h>
#include <unistd.h>

#include "model-testutil.h"
#include "model_int.h"
#include "tap.h"

static char root[256];
static int case_no;

/* Write cfg + tensors into a fresh directory; returns its path (static buffer). */
static const char *write_case(json_t *cfg, const tu_ckpt_t *c, size_t nshard)
{
    static char d[512];
    snprintf(d, sizeof(d), "%s/case%d", root, case_no++);
    mkdir(d, 0700);
    if (cfg)
        tu_write_config(d, cfg);
    if (c)
        tu_write_weights(d, c, nshard);
    return d;
}

/* Value check: row r of view t equals rows/cols of the generator's tensor k at an offset. */
static int row_matches(const tdm_tensor_t *t, uint32_t r, size_t k, uint64_t src_row,
                       uint64_t src_col0)
{
    float *row = calloc(t->cols, sizeof(float));
    tdm_tensor_row_to_f32(t, r, row);
    int good = 1;
    for (uint32_t j = 0; j < t->cols; j++)
        good &= row[j] == tu_value(k, src_row, src_col0 + j);
    free(row);
    return good;
}

static size_t index_of(tu_ckpt_t *c, const char *name)
{
    return (size_t)(tu_get(c, name) - c->t);
}

static void llama(void)
{
    json_t *cfg = tu_llama_config();
    tu_ckpt_t c = {0};
    tu_fill(&c, cfg, "BF16");
    const char *d = write_case(cfg, &c, 0);
    tdm_model_t *m = NULL;
    char err[512] = "";
    tdm_status_t st = tdm_model_load(d, &m, err, sizeof(err));
    if (!ok(st == TDM_OK, "tiny Llama loads"))
        diag("  %s: %s", tdm_status_name(st), err);
    if (st != TDM_OK)
        goto out;
    const tdm_model_config_t *mc = tdm_model_config(m);
    ok(mc->arch == TDM_ARCH_LLAMA && mc->num_layers == 2 && mc->num_kv_heads == 2 &&
           mc->head_dim == 4 && mc->weight_dtype == TDM_DTYPE_BF16 && mc->rope_theta == 500000.0f,
       "config values");

    uint64_t total = 0;
    for (size_t i = 0; i < c.n; i++)
        total += c.t[i].nbytes;
    is_u64(tdm_model_weight_bytes(m), total, "weight bytes = every tensor's bytes");

    tdm_model_view_t v1, v2[2];
    is_int(tdm_model_view_init(m, 1, 0, &v1, err, sizeof(err)), TDM_OK, "tp 1 view");
    is_u64(v1.resident_bytes, total, "tp 1 resident bytes = all weights");
    ok(v1.lm_head.data != v1.embed.data && v1.embed.rows == 40 && v1.embed.cols == 16,
       "untied lm_head is its own tensor");
    size_t kq = index_of(&c, "model.layers.1.self_attn.q_proj.weight");
    ok(row_matches(&v1.layers[1].q, 5, kq, 5, 0), "tp 1 q row 5 values");

    int good = 1;
    uint64_t sum = 0;
    for (uint32_t r = 0; r < 2; r++) {
        good &= tdm_model_view_init(m, 2, r, &v2[r], err, sizeof(err)) == TDM_OK;
        sum += v2[r].resident_bytes;
    }
    ok(good && v2[1].heads_r == 2 && v2[1].kv_heads_r == 1 && v2[1].inter_r == 12,
       "tp 2 shares: 2 q heads, 1 kv head, 12 intermediate rows per rank");
    const tdm_layer_weights_t *L = &v2[1].layers[1];
    size_t kk = index_of(&c, "model.layers.1.self_attn.k_proj.weight");
    size_t ko = index_of(&c, "model.layers.1.self_attn.o_proj.weight");
    size_t kd = index_of(&c, "model.layers.1.mlp.down_proj.weight");
    size_t ku = index_of(&c, "model.layers.1.mlp.up_proj.weight");
    ok(L->q.rows == 8 && L->q.cols == 16 && L->q.row_stride == 16 &&
           row_matches(&L->q, 0, kq, 8, 0) && row_matches(&L->q, 7, kq, 15, 0),
       "rank 1 q: rows 8..15 of the full q, contiguous");
    ok(L->k.rows == 4 && row_matches(&L->k, 3, kk, 7, 0), "rank 1 k: kv head 1 (rows 4..7)");
    ok(L->o.rows == 16 && L->o.cols == 8 && L->o.row_stride == 16 &&
           row_matches(&L->o, 0, ko, 0, 8) && row_matches(&L->o, 15, ko, 15, 8),
       "rank 1 o: columns 8..15, row_stride 16");
    ok(L->down.cols == 12 && L->down.row_stride == 24 && row_matches(&L->down, 9, kd, 9, 12),
       "rank 1 down: columns 12..23, row_stride 24");
    ok(L->up.rows == 12 && row_matches(&L->up, 0, ku, 12, 0), "rank 1 up: rows 12..23");
    ok(L->q.data == (const uint8_t *)v1.layers[1].q.data + 8 * 16 * 2,
       "views point into the mapping (no copy)");
    ok(v2[1].vocab_lo == 20 && v2[1].vocab_r == 20 && v2[1].embed.rows == 20 &&
           v2[1].embed.cols == 16 &&
           v2[1].embed.data == (const uint8_t *)v1.embed.data + 20 * 16 * 2 &&
           v2[1].lm_head.rows == 20 &&
           v2[1].lm_head.data == (const uint8_t *)v1.lm_head.data + 20 * 16 * 2 &&
           v2[0].vocab_lo == 0 && v2[0].embed.rows == 20 && v2[0].embed.data == v1.embed.data,
       "tp 2 embed/lm_head: vocab rows 0..19 and 20..39, views into the mapping");
    /* replicated per rank: final norm 16, per layer 2 norms of 16; embed/lm_head are split */
    uint64_t repl = (16 + 2 * 2 * 16) * 2;
    is_u64(v2[0].resident_bytes, repl + (total - repl) / 2, "tp 2 rank 0 resident bytes");
    is_u64(sum, total + repl, "ranks together read the sharded bytes once, replicated twice");
    {
        uint32_t lo[3], n[3];
        for (uint32_t r = 0; r < 2; r++)
            tdm_model_vocab_range(41, 2, r, &lo[r], &n[r]);
        ok(lo[0] == 0 && n[0] == 20 && lo[1] == 20 && n[1] == 21,
           "vocab 41 over 2 ranks: rows 0..19 and 20..40 (the lower rank's share is smaller)");
        for (uint32_t r = 0; r < 3; r++)
            tdm_model_vocab_range(5, 3, r, &lo[r], &n[r]);
        ok(lo[0] == 0 && n[0] == 1 && lo[1] == 1 && n[1] == 2 && lo[2] == 3 && n[2] == 2,
           "vocab 5 over 3 ranks: 1, 2, 2 rows, contiguous");
        tdm_model_vocab_range(40, 1, 0, &lo[0], &n[0]);
        ok(lo[0] == 0 && n[0] == 40, "tp 1 owns the whole vocab");
    }
    tdm_model_view_free(&v2[0]);
    tdm_model_view_free(&v2[1]);
    tdm_model_view_free(&v1);

    tdm_model_view_t v3;
    st = tdm_model_view_init(m, 3, 0, &v3, err, sizeof(err));
    ok(st == TDM_ERR_UNSUPPORTED && strstr(err, "num_attention_heads 4 is not divisible by tp "
                                                "size 3"),
       "tp 3 refused (%s)", err);
    ok(tdm_model_view_init(m, 2, 2, &v3, err, sizeof(err)) == TDM_ERR_INVAL, "rank >= size");
    tdm_tensor_t t;
    ok(tdm_model_tensor(m, "model.norm.weight", &t) == TDM_OK && t.rows == 1 && t.cols == 16,
       "tensor by name");
    ok(tdm_model_tensor(m, "nope", &t) == TDM_ERR_NOTFOUND, "unknown name NOTFOUND");
    tdm_model_free(m);
out:
    tu_free(&c);
    json_decref(cfg);
}

static json_t *qwen_config(void)
{
    json_t *cfg = tu_llama_config();
    json_object_set_new(cfg, "architectures", json_pack("[s]", "Qwen2ForCausalLM"));
    json_object_set_new(cfg, "model_type", json_string("qwen2"));
    json_object_set_new(cfg, "tie_word_embeddings", json_true());
    json_object_set_new(cfg, "torch_dtype", json_string("float16"));
    json_object_set_new(cfg, "head_dim", json_integer(6)); /* override: 4 heads x 6 != 16 */
    return cfg;
}

typedef struct prog {
    int config, map_total, tensors, prefault_done;
    uint64_t prefault_total, prefault_last;
} prog_t;

static void on_progress(void *arg, const char *stage, uint64_t done, uint64_t total)
{
    prog_t *p = arg;
    if (strcmp(stage, "config") == 0)
        p->config++;
    else if (strcmp(stage, "map") == 0)
        p->map_total = (int)total;
    else if (strcmp(stage, "tensors") == 0)
        p->tensors = (int)done;
    else if (strcmp(stage, "prefault") == 0) {
        p->prefault_done++;
        p->prefault_total = total;
        p->prefault_last = done;
    }
}

static void qwen_sharded(void)
{
    json_t *cfg = qwen_config();
    tu_ckpt_t c = {0};
    tu_fill(&c, cfg, "F16");
    /* mixed dtypes: norms stored as F32 */
    const char *norms[] = {"model.norm.weight", "model.layers.0.input_layernorm.weight",
                           "model.layers.1.post_attention_layernorm.weight"};
    for (size_t i = 0; i < 3; i++)
        tu_replace(&c, norms[i], "F32", 1, 16, 0);
    const char *d = write_case(cfg, &c, 3);
    tdm_model_t *m = NULL;
    char err[512] = "";
    prog_t p = {0};
    tdm_model_load_opts_t o = {on_progress, &p, 1};
    tdm_status_t st = tdm_model_load_ex(d, &o, &m, err, sizeof(err));
    if (!ok(st == TDM_OK, "tiny Qwen2, 3 shards, f16 + f32 norms, tied, head_dim 6 loads"))
        diag("  %s: %s", tdm_status_name(st), err);
    if (st != TDM_OK)
        goto out;
    ok(p.config == 2 && p.map_total == 3 && p.tensors == 2 && p.prefault_done >= 1 &&
           p.prefault_last == p.prefault_total && p.prefault_total > 0,
       "progress: config, 3 shards mapped, 2 layers, prefault to 100%%");
    const tdm_model_config_t *mc = tdm_model_config(m);
    ok(mc->arch == TDM_ARCH_QWEN2 && mc->attention_bias && mc->tie_word_embeddings &&
           mc->head_dim == 6 && mc->weight_dtype == TDM_DTYPE_F16,
       "Qwen2 config: bias, tied, head_dim 6, f16");
    tdm_model_view_t v;
    st = tdm_model_view_init(m, 2, 1, &v, err, sizeof(err));
    is_int(st, TDM_OK, "tp 2 rank 1 view");
    ok(v.lm_head.data == v.embed.data, "tied lm_head is the embedding");
    ok(v.final_norm.dtype == TDM_DTYPE_F32 && v.layers[0].q.dtype == TDM_DTYPE_F16 &&
           v.layers[0].attn_norm.dtype == TDM_DTYPE_F32 &&
           v.layers[1].attn_norm.dtype == TDM_DTYPE_F16,
       "dtype recorded per tensor");
    size_t kn = index_of(&c, "model.norm.weight");
    ok(row_matches(&v.final_norm, 0, kn, 0, 0), "f32 norm values");
    size_t kb = index_of(&c, "model.layers.1.self_attn.k_proj.bias");
    const tdm_tensor_t *kbias = &v.layers[1].k_bias;
    ok(kbias->rows == 1 && kbias->cols == 6 && row_matches(kbias, 0, kb, 0, 6),
       "rank 1 k bias: elements 6..11");
    size_t kq = index_of(&c, "model.layers.0.self_attn.q_proj.weight");
    ok(v.layers[0].q.rows == 12 && row_matches(&v.layers[0].q, 2, kq, 14, 0),
       "rank 1 q with head_dim 6: rows 12..23");
    uint64_t total = 0;
    for (size_t i = 0; i < c.n; i++)
        total += c.t[i].nbytes;
    is_u64(tdm_model_weight_bytes(m), total, "tied: lm_head counted once");
    tdm_model_view_free(&v);
    tdm_model_free(m);
out:
    tu_free(&c);
    json_decref(cfg);
}

/* Load `d` and expect a status and a message containing needle. */
static void expect_load_err(const char *d, tdm_status_t want, const char *needle, const char *what)
{
    tdm_model_t *m = (tdm_model_t *)(uintptr_t)0x1;
    char err[512] = "";
    tdm_status_t st = tdm_model_load(d, &m, err, sizeof(err));
    if (!ok(st == want && strstr(err, needle) && m == (tdm_model_t *)(uintptr_t)0x1, "%s", what))
        diag("  status %s, err \"%s\", wanted %s containing \"%s\"", tdm_status_name(st), err,
             tdm_status_name(want), needle);
    else
        diag("  %s", err);
    if (st == TDM_OK)
        tdm_model_free(m);
}

static void corrupt(void)
{
    json_t *cfg = tu_llama_config();
    tu_ckpt_t c = {0};
    char p[600];

    tu_fill(&c, cfg, "BF16");
    tu_remove(&c, "model.layers.1.mlp.up_proj.weight");
    expect_load_err(write_case(cfg, &c, 0), TDM_ERR_NOTFOUND,
                    "tensor model.layers.1.mlp.up_proj.weight: missing from model.safetensors",
                    "missing tensor named");
    expect_load_err(write_case(cfg, &c, 2), TDM_ERR_NOTFOUND,
                    "tensor model.layers.1.mlp.up_proj.weight: missing from the shards of "
                    "model.safetensors.index.json",
                    "missing tensor in a sharded checkpoint");
    tu_free(&c);

    tu_fill(&c, cfg, "BF16");
    tu_remove(&c, "lm_head.weight");
    expect_load_err(write_case(cfg, &c, 0), TDM_ERR_NOTFOUND, "tensor lm_head.weight: missing",
                    "untied checkpoint without lm_head");
    tu_free(&c);

    tu_fill(&c, cfg, "BF16");
    tu_replace(&c, "model.layers.0.self_attn.k_proj.weight", "BF16", 2, 12, 16);
    expect_load_err(write_case(cfg, &c, 0), TDM_ERR_FORMAT,
                    "tensor model.layers.0.self_attn.k_proj.weight: shape [12, 16], expected "
                    "[8, 16] from config.json",
                    "wrong shape: expected vs actual");
    tu_free(&c);

    tu_fill(&c, cfg, "BF16");
    tu_replace(&c, "model.norm.weight", "BF16", 2, 1, 16);
    expect_load_err(write_case(cfg, &c, 0), TDM_ERR_FORMAT,
                    "tensor model.norm.weight: shape [1, 16], expected [16]",
                    "2-D where 1-D expected");
    tu_free(&c);

    tu_fill(&c, cfg, "BF16");
    tu_replace(&c, "model.layers.1.mlp.down_proj.weight", "I32", 2, 16, 24);
    expect_load_err(write_case(cfg, &c, 0), TDM_ERR_UNSUPPORTED,
                    "tensor model.layers.1.mlp.down_proj.weight: dtype I32, expected BF16, F16 or "
                    "F32",
                    "wrong dtype named");
    tu_free(&c);

    /* unknown architecture, through the loader */
    json_t *bad = json_deep_copy(cfg);
    json_object_set_new(bad, "architectures", json_pack("[s]", "MistralForCausalLM"));
    json_object_del(bad, "model_type");
    tu_fill(&c, cfg, "BF16");
    expect_load_err(write_case(bad, &c, 0), TDM_ERR_UNSUPPORTED,
                    "config.json: architectures[0] \"MistralForCausalLM\" is not supported",
                    "unknown architecture named");
    json_decref(bad);

    /* truncated weights file */
    const char *d = write_case(cfg, &c, 0);
    tu_path(p, sizeof(p), d, "model.safetensors");
    struct stat sb;
    stat(p, &sb);
    if (truncate(p, sb.st_size - 1) != 0)
        diag("truncate failed");
    expect_load_err(d, TDM_ERR_FORMAT, "model.safetensors: tensor lm_head.weight: data_offsets",
                    "truncated model.safetensors");

    /* Qwen2 without its biases */
    json_t *q = qwen_config();
    tu_ckpt_t cq = {0};
    tu_fill(&cq, q, "BF16");
    tu_remove(&cq, "model.layers.0.self_attn.v_proj.bias");
    expect_load_err(write_case(q, &cq, 0), TDM_ERR_NOTFOUND,
                    "tensor model.layers.0.self_attn.v_proj.bias: missing", "Qwen2 without a bias");
    tu_free(&cq);
    json_decref(q);

    expect_load_err(write_case(cfg, NULL, 0), TDM_ERR_NOTFOUND,
                    "neither model.safetensors nor model.safetensors.index.json exists",
                    "no weights at all");
    expect_load_err(write_case(NULL, &c, 0), TDM_ERR_NOTFOUND, "config.json: cannot open",
                    "no config.json");
    d = write_case(cfg, &c, 0);
    tu_path(p, sizeof(p), d, "config.json");
    FILE *fp = fopen(p, "w");
    fputs("{\"architectures\": [", fp);
    fclose(fp);
    expect_load_err(d, TDM_ERR_FORMAT, "config.json: invalid JSON", "malformed config.json");

    /* shard index problems */
    d = write_case(cfg, &c, 2);
    tu_path(p, sizeof(p), d, "model-00002-of-00002.safetensors");
    unlink(p);
    expect_load_err(d, TDM_ERR_NOTFOUND, "model-00002-of-00002.safetensors: cannot open",
                    "index names a missing shard");
    d = write_case(cfg, NULL, 0);
    tu_write_st((tu_path(p, sizeof(p), d, "a.safetensors"), p), &c, 0, 1);
    tu_write_st((tu_path(p, sizeof(p), d, "b.safetensors"), p), &c, 0, 1);
    tu_path(p, sizeof(p), d, "model.safetensors.index.json");
    fp = fopen(p, "w");
    fputs("{\"weight_map\":{\"model.norm.weight\":\"a.safetensors\","
          "\"lm_head.weight\":\"b.safetensors\"}}",
          fp);
    fclose(fp);
    expect_load_err(d, TDM_ERR_FORMAT, "present in both a.safetensors and b.safetensors",
                    "a tensor in two shards");
    d = write_case(cfg, NULL, 0);
    tu_write_st((tu_path(p, sizeof(p), d, "a.safetensors"), p), &c, 0, 2);
    tu_write_st((tu_path(p, sizeof(p), d, "b.safetensors"), p), &c, 1, 2);
    tu_path(p, sizeof(p), d, "model.safetensors.index.json");
    fp = fopen(p, "w");
    /* tu_fill's order puts q_proj (index 2) in shard a and input_layernorm (1) in shard b */
    fputs("{\"weight_map\":{\"model.layers.0.self_attn.q_proj.weight\":\"a.safetensors\","
          "\"model.layers.0.self_attn.k_proj.weight\":\"b.safetensors\","
          "\"model.layers.0.input_layernorm.weight\":\"a.safetensors\"}}",
          fp);
    fclose(fp);
    expect_load_err(d, TDM_ERR_FORMAT,
                    "tensor model.layers.0.input_layernorm.weight: weight_map names a.safetensors, "
                    "but it is in b.safetensors",
                    "weight_map points at the wrong shard");
    fp = fopen(p, "w");
    fputs("{\"weight_map\":{\"x\":\"../etc/passwd\"}}", fp);
    fclose(fp);
    expect_load_err(d, TDM_ERR_FORMAT, "weight_map[\"x\"] is not a file name",
                    "shard path outside the directory refused");
    tu_free(&c);
    json_decref(cfg);
}

/* The CLI's progress printer: one line per call on stderr. */
static void stderr_progress(void)
{
    char p[512], line[128] = "";
    tu_path(p, sizeof(p), root, "stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(p, "w+");
    dup2(fileno(f), 2);
    tdm_model_progress_stderr((void *)"tandem-worker", "map", 1, 3);
    tdm_model_progress_stderr(NULL, "prefault", 10, 20);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    line[n] = '\0';
    fclose(f);
    is_str(line,
           "tandem-worker: loading model: map 1/3\n"
           "loading model: prefault 10/20\n",
           "progress lines on stderr");
}

int main(void)
{
    if (!tu_mkdtemp(root, sizeof(root)))
        bail_out("cannot create a temp dir");
    llama();
    qwen_sharded();
    corrupt();
    stderr_progress();
    tu_rmtree(root);
    return done_testing();
}
