/*
 * ctl_plan.c — `tandemctl plan`: from a GPU count (or explicit GPU ranges per side) to the systemd
 * units, their INI files and the enable lines for one host's prefill/decode groups.
 *
 * The seed's layout is the default: --gpus 8 gives prefill TP=4 on GPUs 0-3 and decode TP=4 on
 * GPUs 4-7, one P/D pair. A smaller --tp cuts each side into several groups (prefill-0, prefill-1,
 * ...), each on consecutive GPUs, because a worker's ranks use --base-gpu-id + rank. Each value is
 * put through tdm_params_set() on the worker's own table before anything is printed, so an option
 * the worker would refuse (a typo'd dtype, a fraction out of range) fails here, with the worker's
 * message, instead of at boot on the GPU host.
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/config.h>
#include <tdm/mem.h>

#include "controlplane/ctl/ctl_plan.h"

#define PLAN_MAX_GPUS 1024 /* --base-gpu-id is 0..1023 */
#define PLAN_MAX_TP 64     /* --tp-size is 1..64 */
#define PLAN_MAX_KEYS 16

typedef struct plan_side {
    const char *mode; /* "prefill" | "decode" */
    int first, count; /* GPUs first .. first+count-1 */
    int tp;
} plan_side_t;

typedef struct plan_opts {
    int gpus; /* 0 = not given */
    const char *model, *mem_fraction, *kv_cache_dtype, *control_plane, *token_file, *conf_dir;
    int tp; /* 0 = one group per side */
    const char *prefill_gpus, *decode_gpus;
} plan_opts_t;

typedef struct plan_kv {
    const char *key;
    char value[4096];
} plan_kv_t;

static int plan_usage(FILE *err)
{
    fprintf(err,
            "usage: tandemctl plan --gpus N --model PATH [--tp K] [--prefill-gpus A-B]\n"
            "                      [--decode-gpus C-D] [--mem-fraction-static F]\n"
            "                      [--kv-cache-dtype auto|bf16|fp8_e4m3] [--control-plane URL]\n"
            "                      [--control-plane-token-file FILE] [--conf-dir DIR] [--json]\n");
    return 2;
}

/* A whole decimal integer in [lo, hi], or -1 with a message. */
static int parse_int(const char *opt, const char *s, int lo, int hi, int *ret, FILE *err)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        fprintf(err, "tandemctl plan: %s: \"%s\" is not an integer\n", opt, s);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(err, "tandemctl plan: %s: %ld is outside %d..%d\n", opt, v, lo, hi);
        return -1;
    }
    *ret = (int)v;
    return 0;
}

/* "A-B" or "A" (one GPU) → first, count. */
static int parse_range(const char *opt, const char *s, plan_side_t *side, FILE *err)
{
    char a[32], *dash;
    int lo, hi;
    if (strlen(s) >= sizeof(a)) {
        fprintf(err, "tandemctl plan: %s: \"%.40s\" is not a GPU range A-B\n", opt, s);
        return -1;
    }
    snprintf(a, sizeof(a), "%s", s);
    dash = strchr(a, '-');
    if (dash)
        *dash = '\0';
    if (parse_int(opt, a, 0, PLAN_MAX_GPUS - 1, &lo, err) != 0)
        return -1;
    hi = lo;
    if (dash && parse_int(opt, dash + 1, 0, PLAN_MAX_GPUS - 1, &hi, err) != 0)
        return -1;
    if (hi < lo) {
        fprintf(err, "tandemctl plan: %s: range %d-%d runs backwards\n", opt, lo, hi);
        return -1;
    }
    side->first = lo;
    side->count = hi - lo + 1;
    return 0;
}

/* INI values are one line, unquoted, untrimmed: refuse what would not survive the round trip. */
static int check_value(const char *opt, const char *v, FILE *err)
{
    size_t n = strlen(v);
    if (n == 0) {
        fprintf(err, "tandemctl plan: %s: empty value\n", opt);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f || v[i] == '"') {
            fprintf(err,
                    "tandemctl plan: %s: control characters and '\"' cannot go in an INI value\n",
                    opt);
            return -1;
        }
    if (v[0] == ' ' || v[n - 1] == ' ') {
        fprintf(err, "tandemctl plan: %s: leading or trailing spaces cannot go in an INI value\n",
                opt);
        return -1;
    }
    if (n >= sizeof(((plan_kv_t *)0)->value)) {
        fprintf(err, "tandemctl plan: %s: value longer than %zu bytes\n", opt,
                sizeof(((plan_kv_t *)0)->value) - 1);
        return -1;
    }
    return 0;
}

static int parse_opts(int argc, char **argv, plan_opts_t *o, FILE *err)
{
    for (int i = 0; i < argc; i += 2) {
        const char *k = argv[i];
        if (i + 1 >= argc || strncmp(k, "--", 2) != 0) {
            if (strncmp(k, "--", 2) == 0)
                fprintf(err, "tandemctl plan: %s needs a value\n", k);
            else
                fprintf(err, "tandemctl plan: unexpected argument \"%s\"\n", k);
            return -1;
        }
        const char *v = argv[i + 1];
        if (!strcmp(k, "--gpus")) {
            if (parse_int(k, v, INT_MIN, INT_MAX, &o->gpus, err) != 0)
                return -1;
            if (o->gpus < 2) {
                fprintf(err,
                        "tandemctl plan: --gpus: %d GPUs cannot hold a prefill and a decode "
                        "group (at least 2)\n",
                        o->gpus);
                return -1;
            }
            if (o->gpus > PLAN_MAX_GPUS) {
                fprintf(err, "tandemctl plan: --gpus: %d is more than %d\n", o->gpus,
                        PLAN_MAX_GPUS);
                return -1;
            }
        } else if (!strcmp(k, "--tp")) {
            if (parse_int(k, v, 1, PLAN_MAX_TP, &o->tp, err) != 0)
                return -1;
        } else if (!strcmp(k, "--model")) {
            o->model = v;
        } else if (!strcmp(k, "--prefill-gpus")) {
            o->prefill_gpus = v;
        } else if (!strcmp(k, "--decode-gpus")) {
            o->decode_gpus = v;
        } else if (!strcmp(k, "--mem-fraction-static")) {
            o->mem_fraction = v;
        } else if (!strcmp(k, "--kv-cache-dtype")) {
            o->kv_cache_dtype = v;
        } else if (!strcmp(k, "--control-plane")) {
            o->control_plane = v;
        } else if (!strcmp(k, "--control-plane-token-file")) {
            o->token_file = v;
        } else if (!strcmp(k, "--conf-dir")) {
            o->conf_dir = v;
        } else {
            fprintf(err, "tandemctl plan: unknown option %s\n", k);
            return -1;
        }
    }
    if (!o->model) {
        fprintf(err, "tandemctl plan: --model PATH is required (the checkpoint directory on the "
                     "GPU host)\n");
        return -1;
    }
    const char *vals[] = {o->model,         o->mem_fraction, o->kv_cache_dtype,
                          o->control_plane, o->token_file,   o->conf_dir};
    const char *names[] = {"--model",         "--mem-fraction-static",      "--kv-cache-dtype",
                           "--control-plane", "--control-plane-token-file", "--conf-dir"};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++)
        if (vals[i] && check_value(names[i], vals[i], err) != 0)
            return -1;
    return 0;
}

/* Sides from --gpus and the overrides; then TP per side. */
static int layout(const plan_opts_t *o, plan_side_t side[2], FILE *err)
{
    side[0] = (plan_side_t){"prefill", 0, 0, 0};
    side[1] = (plan_side_t){"decode", 0, 0, 0};
    if (!o->gpus && !(o->prefill_gpus && o->decode_gpus)) {
        fprintf(err, "tandemctl plan: give --gpus N (or both --prefill-gpus and --decode-gpus)\n");
        return -1;
    }
    if (o->gpus && (!o->prefill_gpus || !o->decode_gpus) && o->gpus % 2 != 0) {
        fprintf(err,
                "tandemctl plan: --gpus %d does not split into equal prefill and decode halves; "
                "give --prefill-gpus and --decode-gpus\n",
                o->gpus);
        return -1;
    }
    if (o->gpus) {
        side[0].first = 0;
        side[0].count = o->gpus / 2;
        side[1].first = o->gpus / 2;
        side[1].count = o->gpus / 2;
    }
    if (o->prefill_gpus && parse_range("--prefill-gpus", o->prefill_gpus, &side[0], err) != 0)
        return -1;
    if (o->decode_gpus && parse_range("--decode-gpus", o->decode_gpus, &side[1], err) != 0)
        return -1;
    for (int s = 0; s < 2; s++)
        if (o->gpus && side[s].first + side[s].count > o->gpus) {
            fprintf(err, "tandemctl plan: %s GPUs %d-%d lie outside the host's %d GPUs (0-%d)\n",
                    side[s].mode, side[s].first, side[s].first + side[s].count - 1, o->gpus,
                    o->gpus - 1);
            return -1;
        }
    if (side[0].first < side[1].first + side[1].count &&
        side[1].first < side[0].first + side[0].count) {
        fprintf(err, "tandemctl plan: prefill GPUs %d-%d and decode GPUs %d-%d overlap\n",
                side[0].first, side[0].first + side[0].count - 1, side[1].first,
                side[1].first + side[1].count - 1);
        return -1;
    }
    for (int s = 0; s < 2; s++) {
        side[s].tp = o->tp ? o->tp : side[s].count;
        if (side[s].tp > PLAN_MAX_TP) {
            fprintf(err,
                    "tandemctl plan: %d %s GPUs in one group exceed --tp-size's limit of %d; "
                    "give --tp\n",
                    side[s].count, side[s].mode, PLAN_MAX_TP);
            return -1;
        }
        if (side[s].count % side[s].tp != 0) {
            fprintf(err, "tandemctl plan: --tp %d does not divide the %d %s GPUs (%d-%d) evenly\n",
                    side[s].tp, side[s].count, side[s].mode, side[s].first,
                    side[s].first + side[s].count - 1);
            return -1;
        }
    }
    return 0;
}

/* One group's keys, each resolved by the worker's parser (unknown key or bad value = error). */
static int group_keys(const plan_opts_t *o, const plan_side_t *s, int g, int n_prefill,
                      const char *name, plan_kv_t *kv, size_t *ret_n, FILE *err)
{
    size_t n = 0;
    int is_prefill = !strcmp(s->mode, "prefill");
#define KV(k, ...)                                                                                 \
    do {                                                                                           \
        kv[n].key = k;                                                                             \
        snprintf(kv[n].value, sizeof(kv[n].value), __VA_ARGS__);                                   \
        n++;                                                                                       \
    } while (0)
    KV("group", "%s", name);
    KV("model_path", "%s", o->model);
    KV("disaggregation_mode", "%s", s->mode);
    KV("tp_size", "%d", s->tp);
    KV("base_gpu_id", "%d", s->first + g * s->tp);
    KV("device", "cuda");
    KV("mem_fraction_static", "%s", o->mem_fraction ? o->mem_fraction : "0.88");
    KV("kv_cache_dtype", "%s", o->kv_cache_dtype ? o->kv_cache_dtype : "auto");
    KV("port", "%d", (is_prefill ? 30001 : 30000) + 2 * g);
    if (is_prefill)
        KV("disaggregation_bootstrap_port", "%d", 8998 + g);
    else /* decode group g bootstraps from prefill group g mod the prefill groups (this host) */
        KV("disaggregation_prefill_addr", "127.0.0.1:%d", 8998 + g % n_prefill);
    KV("control_plane", "%s", o->control_plane ? o->control_plane : "http://127.0.0.1:8470");
    KV("control_plane_token_file", "%s",
       o->token_file ? o->token_file : "/var/lib/tandem/admin.token");
#undef KV

    tdm_worker_config_t cfg;
    tdm_params_t *p = NULL;
    char msg[512];
    int rc = -1;
    if (tdm_params_init(&tdm_worker_config_table, &cfg, &p, msg, sizeof(msg)) != TDM_OK) {
        fprintf(err, "tandemctl plan: worker parameter table: %s\n", msg);
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++)
        if (tdm_params_set(p, kv[i].key, kv[i].value, TDM_PARAM_SRC_FILE, kv[i].key, msg,
                           sizeof(msg)) != TDM_OK) {
            fprintf(err, "tandemctl plan: group %s: tandem-worker would refuse %s\n", name, msg);
            goto cleanup;
        }
    *ret_n = n;
    rc = 0;
cleanup:
    tdm_params_free(p);
    return rc;
}

static void ini_text(const plan_side_t *s, int g, int ngroups, const char *name,
                     const plan_kv_t *kv, size_t n, FILE *f)
{
    int base = s->first + g * s->tp;
    fprintf(f, "# tandem-worker@%s.service: %s group %d of %d, TP=%d on GPUs %d-%d\n", name,
            s->mode, g + 1, ngroups, s->tp, base, base + s->tp - 1);
    fprintf(f, "[worker]\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s = %s\n", kv[i].key, kv[i].value);
}

int tdm_cp_plan_main(int argc, char **argv, int json_out, FILE *out, FILE *err)
{
    plan_opts_t o = {0};
    plan_side_t side[2];
    plan_kv_t kv[PLAN_MAX_KEYS];
    char *text = NULL;
    size_t text_len = 0;
    FILE *buf = NULL;
    json_t *root = NULL, *groups = NULL, *cmds = NULL;
    int rc = 2;

    if (argc == 0)
        return plan_usage(err);
    if (parse_opts(argc, argv, &o, err) != 0 || layout(&o, side, err) != 0)
        goto cleanup;
    const char *dir = o.conf_dir ? o.conf_dir : "/etc/tandem";

    /* The whole plan is built in memory first: nothing reaches `out` unless every group passed. */
    buf = open_memstream(&text, &text_len);
    root = json_object();
    groups = json_array();
    cmds = json_array();
    if (!buf || !root || !groups || !cmds) {
        fprintf(err, "tandemctl plan: out of memory\n");
        rc = 1;
        goto cleanup;
    }
    int total = o.gpus;
    if (!total)
        for (int s = 0; s < 2; s++)
            if (side[s].first + side[s].count > total)
                total = side[s].first + side[s].count;
    fprintf(buf,
            "# tandem plan: %d GPUs; prefill TP=%d on GPUs %d-%d (%d group%s), decode TP=%d on "
            "GPUs %d-%d (%d group%s)\n",
            total, side[0].tp, side[0].first, side[0].first + side[0].count - 1,
            side[0].count / side[0].tp, side[0].count / side[0].tp == 1 ? "" : "s", side[1].tp,
            side[1].first, side[1].first + side[1].count - 1, side[1].count / side[1].tp,
            side[1].count / side[1].tp == 1 ? "" : "s");
    fprintf(buf, "# prefill groups start first: decode requests bootstrap from a prefill group\n");
    for (int s = 0; s < 2; s++) {
        int ngroups = side[s].count / side[s].tp;
        for (int g = 0; g < ngroups; g++) {
            char name[64], unit[128], path[4200], cmd[256];
            size_t n = 0;
            if (ngroups == 1)
                snprintf(name, sizeof(name), "%s", side[s].mode);
            else
                snprintf(name, sizeof(name), "%s-%d", side[s].mode, g);
            snprintf(unit, sizeof(unit), "tandem-worker@%s.service", name);
            snprintf(path, sizeof(path), "%s/workers/%s.conf", dir, name); /* the unit's */
            snprintf(cmd, sizeof(cmd), "systemctl enable --now %s", unit);
            if (group_keys(&o, &side[s], g, side[0].count / side[0].tp, name, kv, &n, err) != 0)
                goto cleanup;

            char *ini = NULL;
            size_t ini_len = 0;
            FILE *f = open_memstream(&ini, &ini_len);
            if (!f) {
                fprintf(err, "tandemctl plan: out of memory\n");
                rc = 1;
                goto cleanup;
            }
            ini_text(&side[s], g, ngroups, name, kv, n, f);
            fclose(f);
            fprintf(buf, "\n## unit %s\n## file %s\n%s", unit, path, ini);

            json_t *gpus = json_array(), *cfg = json_object();
            int base = side[s].first + g * side[s].tp;
            for (int r = 0; r < side[s].tp; r++)
                json_array_append_new(gpus, json_integer(base + r));
            for (size_t i = 0; i < n; i++)
                json_object_set_new(cfg, kv[i].key, json_string(kv[i].value));
            json_array_append_new(groups, json_pack("{s:s, s:s, s:s, s:s, s:i, s:o, s:o, s:s}",
                                                    "name", name, "mode", side[s].mode, "unit",
                                                    unit, "config_path", path, "tp", side[s].tp,
                                                    "gpus", gpus, "config", cfg, "ini", ini));
            json_array_append_new(cmds, json_string(cmd));
            free(ini);
        }
    }
    fprintf(buf, "\n## enable\n");
    size_t i;
    json_t *c;
    json_array_foreach(cmds, i, c) fprintf(buf, "%s\n", json_string_value(c));
    fclose(buf);
    buf = NULL;

    if (json_out) {
        json_object_set_new(root, "gpus", json_integer(total));
        json_object_set(root, "groups", groups);
        json_object_set(root, "commands", cmds);
        if (json_dumpf(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 ||
            fputc('\n', out) == EOF) {
            rc = 1;
            goto cleanup;
        }
    } else if (fwrite(text, 1, text_len, out) != text_len) {
        rc = 1;
        goto cleanup;
    }
    rc = 0;
cleanup:
    if (buf)
        fclose(buf);
    free(text);
    json_decref(groups);
    json_decref(cmds);
    json_decref(root);
    return rc;
}
