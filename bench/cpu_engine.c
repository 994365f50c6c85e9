/*
 * cpu_engine.c — CPU engine throughput beside its memory-bandwidth limit, measured in one run.
 *
 * For one checkpoint: prefill tok/s (one prompt of --prompt-len tokens), decode tok/s at batch 1
 * and at --batch sequences (--steps steps after a short prompt each), and the anchor: memcpy
 * bandwidth with the engine's thread count over buffers far larger than the caches, from which
 * the decode limit follows (every decode step reads every weight byte once, so at batch 1
 * tok/s <= bandwidth / weight bytes; a batch shares the weight reads). Prints one JSON object;
 * bench/cpu_engine.sh gathers them into bench/results/cpu_engine.json. Not a test.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <tdm/model.h>
#include <tdm/time.h>

#include "dataplane/oneshot_engine.h"

typedef struct copy_job {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
    int reps;
} copy_job_t;

static void *copy_worker(void *arg)
{
    copy_job_t *j = arg;
    for (int r = 0; r < j->reps; r++)
        memcpy(j->dst, j->src, j->n);
    return NULL;
}

/* Best-of-5 bytes/s of `threads` threads each copying its slice of a `bytes` buffer. */
static double memcpy_bandwidth(size_t bytes, uint32_t threads)
{
    unsigned char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return 0.0;
    }
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    pthread_t tid[64];
    copy_job_t job[64];
    if (threads > 64)
        threads = 64;
    double best = 0.0;
    for (int trial = 0; trial < 5; trial++) {
        size_t slice = bytes / threads;
        uint64_t t0 = tdm_time_mono_us();
        for (uint32_t t = 0; t < threads; t++) {
            job[t] = (copy_job_t){dst + t * slice, src + t * slice, slice, 2};
            if (pthread_create(&tid[t], NULL, copy_worker, &job[t]) != 0)
                job[t].reps = -1;
        }
        for (uint32_t t = 0; t < threads; t++)
            if (job[t].reps >= 0)
                pthread_join(tid[t], NULL);
        double s = (double)(tdm_time_mono_us() - t0) / 1e6;
        double bw = (double)(slice * threads) * 2 / s;
        if (bw > best)
            best = bw;
    }
    free(src);
    free(dst);
    return best;
}

static int32_t *prompt_ids(uint32_t n, uint32_t vocab, uint32_t salt)
{
    int32_t *ids = malloc(n * sizeof(int32_t));
    uint64_t x = 0x9e3779b97f4a7c15ull * (salt + 1);
    for (uint32_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = (int32_t)(x % vocab);
    }
    return ids;
}

static int usage(void)
{
    fprintf(stderr, "usage: cpu_engine --model DIR [--name NAME] [--prompt-len 128] [--steps 32] "
                    "[--batch 8] [--threads 0] [--copy-mib 512] [--reps 3]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *name = "model";
    uint32_t plen = 128, steps = 32, batch = 8, threads = 0, copy_mib = 512, reps = 3;
    for (int a = 1; a < argc; a++) {
        if (a + 1 >= argc)
            return usage();
        const char *k = argv[a], *v = argv[++a];
        if (!strcmp(k, "--model"))
            dir = v;
        else if (!strcmp(k, "--name"))
            name = v;
        else if (!strcmp(k, "--prompt-len"))
            plen = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--steps"))
            steps = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--batch"))
            batch = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--threads"))
            threads = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--reps"))
            reps = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--copy-mib"))
            copy_mib = (uint32_t)strtoul(v, NULL, 10);
        else
            return usage();
    }
    if (!dir || plen == 0 || steps == 0 || batch == 0 || copy_mib == 0 || reps == 0)
        return usage();

    char err[512] = "";
    tdm_model_t *m = NULL;
    tdm_oneshot_engine_t *e = NULL;
    tdm_status_t st = tdm_model_load(dir, &m, err, sizeof(err));
    if (st != TDM_OK) {
        fprintf(stderr, "cpu_engine: %s: %s\n", dir, err);
        return 1;
    }
    const tdm_model_config_t *c = tdm_model_config(m);
    const uint32_t short_len = 16;
    size_t max_tokens = (plen > short_len ? plen : short_len) + steps + 1;
    st = tdm_oneshot_engine_init(m, TDM_DTYPE_BF16, 16, batch, max_tokens, threads, &e, err,
                                 sizeof(err));
    if (st != TDM_OK) {
        fprintf(stderr, "cpu_engine: engine: %s (%s)\n", err, tdm_status_name(st));
        tdm_model_free(m);
        return 1;
    }
    uint32_t nthreads = tdm_oneshot_engine_threads(e);
    uint64_t wbytes = tdm_oneshot_engine_weight_bytes(e);
    const float *logits;
    int32_t *ids = prompt_ids(plen, c->vocab_size, 0);
    int32_t *step_ids = malloc(batch * sizeof(int32_t));

    /* warm-up: touch every weight page and the KV pages of every sequence once */
    for (uint32_t s = 0; s < batch && st == TDM_OK; s++)
        st = tdm_oneshot_engine_prefill(e, s, ids, short_len < plen ? short_len : plen, &logits);
    tdm_oneshot_engine_reset(e);

    /* each figure is the best of `reps` runs: the machine may be shared, noise only slows */
    double t_prefill = 1e30, t_dec[2] = {1e30, 1e30};
    uint32_t bs[2] = {1, batch};
    for (uint32_t r = 0; r < reps && st == TDM_OK; r++) {
        uint64_t t0 = tdm_time_mono_us();
        st = tdm_oneshot_engine_prefill(e, 0, ids, plen, &logits);
        double t = (double)(tdm_time_mono_us() - t0) / 1e6;
        t_prefill = t < t_prefill ? t : t_prefill;
        tdm_oneshot_engine_reset(e);
        for (int k = 0; k < 2 && st == TDM_OK; k++) {
            for (uint32_t s = 0; s < bs[k] && st == TDM_OK; s++) {
                int32_t *p = prompt_ids(short_len, c->vocab_size, s + 1);
                st = tdm_oneshot_engine_prefill(e, s, p, short_len, &logits);
                free(p);
            }
            for (uint32_t s = 0; s < bs[k]; s++)
                step_ids[s] = (int32_t)((s * 7919u) % c->vocab_size);
            t0 = tdm_time_mono_us();
            for (uint32_t i = 0; i < steps && st == TDM_OK; i++)
                st = tdm_oneshot_engine_decode(e, step_ids, bs[k], &logits);
            t = (double)(tdm_time_mono_us() - t0) / 1e6;
            t_dec[k] = t < t_dec[k] ? t : t_dec[k];
            tdm_oneshot_engine_reset(e);
        }
    }
    if (st != TDM_OK) {
        fprintf(stderr, "cpu_engine: forward failed: %s\n", tdm_status_str(st));
        return 1;
    }
    double bw1 = memcpy_bandwidth((size_t)copy_mib << 20, 1);
    double bwn = memcpy_bandwidth((size_t)copy_mib << 20, nthreads);
    double limit1 = bwn / (double)wbytes;

    uint64_t params = 0;
    params = (uint64_t)c->vocab_size * c->hidden_size * (c->tie_word_embeddings ? 1 : 2) +
             c->hidden_size;
    uint64_t q = (uint64_t)c->num_heads * c->head_dim, kv = (uint64_t)c->num_kv_heads * c->head_dim;
    params += (uint64_t)c->num_layers *
              (2ull * c->hidden_size + q * c->hidden_size * 2 + kv * c->hidden_size * 2 +
               3ull * c->intermediate_size * c->hidden_size);

    double tok_bs1 = steps / t_dec[0], tok_b = (double)batch * steps / t_dec[1];
    json_t *o = json_object(), *shape = json_object(), *pre = json_object(), *d1 = json_object(),
           *db = json_object(), *anc = json_object();
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "params", json_integer((json_int_t)params));
    json_object_set_new(o, "weight_bytes", json_integer((json_int_t)wbytes));
    json_object_set_new(shape, "layers", json_integer(c->num_layers));
    json_object_set_new(shape, "hidden", json_integer(c->hidden_size));
    json_object_set_new(shape, "intermediate", json_integer(c->intermediate_size));
    json_object_set_new(shape, "heads", json_integer(c->num_heads));
    json_object_set_new(shape, "kv_heads", json_integer(c->num_kv_heads));
    json_object_set_new(shape, "vocab", json_integer(c->vocab_size));
    json_object_set_new(shape, "weight_dtype", json_string(tdm_dtype_name(c->weight_dtype)));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "kv_dtype", json_string("bf16"));
    json_object_set_new(o, "threads", json_integer(nthreads));
    json_object_set_new(o, "best_of", json_integer(reps));
    json_object_set_new(pre, "tokens", json_integer(plen));
    json_object_set_new(pre, "seconds", json_real(t_prefill));
    json_object_set_new(pre, "tok_s", json_real(plen / t_prefill));
    json_object_set_new(o, "prefill", pre);
    json_object_set_new(d1, "batch", json_integer(1));
    json_object_set_new(d1, "steps", json_integer(steps));
    json_object_set_new(d1, "seconds", json_real(t_dec[0]));
    json_object_set_new(d1, "tok_s", json_real(tok_bs1));
    json_object_set_new(d1, "fraction_of_limit", json_real(tok_bs1 / limit1));
    json_object_set_new(o, "decode_bs1", d1);
    json_object_set_new(db, "batch", json_integer(batch));
    json_object_set_new(db, "steps", json_integer(steps));
    json_object_set_new(db, "seconds", json_real(t_dec[1]));
    json_object_set_new(db, "tok_s", json_real(tok_b));
    json_object_set_new(db, "step_fraction_of_limit", json_real((steps / t_dec[1]) / limit1));
    json_object_set_new(o, "decode_batch", db);
    json_object_set_new(anc, "memcpy_gb_s_1thread", json_real(bw1 / 1e9));
    json_object_set_new(anc, "memcpy_gb_s_threads", json_real(bwn / 1e9));
    json_object_set_new(anc, "decode_limit_tok_s_bs1", json_real(limit1));
    json_object_set_new(anc, "decode_limit_tok_s_batch", json_real(limit1 * batch));
    json_object_set_new(anc, "definition",
                        json_string("memcpy bandwidth = 2*bytes/s (read+write, STREAM copy "
                                    "convention) with the engine's threads; limit = bandwidth / "
                                    "weight_bytes decode steps per second (each step reads every "
                                    "weight once; a batch shares those reads)"));
    json_object_set_new(o, "anchor", anc);
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(o);
    free(ids);
    free(step_ids);
    tdm_oneshot_engine_free(e);
    tdm_model_free(m);
    return s ? 0 : 1;
}
