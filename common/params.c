/*
 * params.c — resolves a program's tunables from defaults, INI files, the environment and argv,
 * remembering where each value came from. Every value, defaults included, goes through one
 * parser (set_value), so a default that would be rejected from the CLI is rejected at init and
 * a value means the same thing whatever its source.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/params.h>

#include "common/version.h"

#define MAX_VALUE_BYTES 4096

struct tdm_params {
    const tdm_param_table_t *t;
    void *cfg;
    tdm_param_src_t *src;
    char **origin; /* "file:line", "TDM_X", "--flag"; NULL for defaults */
    char **owned;  /* string storage behind STRING/SECRET/ENUM fields */
    char *config_path, *override_path;
    int want_help, want_print_config, want_version;
};

static const char *const type_names[] = {"bool", "int64", "double", "string", "secret", "enum"};
_Static_assert(sizeof(type_names) / sizeof(type_names[0]) == TDM_PARAM_TYPE_MAX,
               "type_names must name every tdm_param_type_t");
static const char *const src_names[] = {"default", "file", "override", "env", "cli"};
_Static_assert(sizeof(src_names) / sizeof(src_names[0]) == TDM_PARAM_SRC_MAX,
               "src_names must name every tdm_param_src_t");

const char *tdm_param_type_name(tdm_param_type_t t)
{
    return (unsigned)t < TDM_PARAM_TYPE_MAX ? type_names[t] : "?";
}

const char *tdm_param_src_name(tdm_param_src_t s)
{
    return (unsigned)s < TDM_PARAM_SRC_MAX ? src_names[s] : "?";
}

static int parse_bool(const char *s, int *ret)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) {
            *ret = 1;
            return 0;
        }
        if (!strcasecmp(s, no[i])) {
            *ret = 0;
            return 0;
        }
    }
    return -1;
}

static int parse_i64(const char *s, int64_t *ret)
{
    char *end;
    errno = 0;
    if (!*s || *s == ' ' || *s == '\t')
        return -1;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *ret = v;
    return 0;
}

static int parse_double(const char *s, double *ret)
{
    char *end;
    errno = 0;
    if (!*s || *s == ' ' || *s == '\t')
        return -1;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return -1;
    *ret = v;
    return 0;
}

/* "min..max", either side may be empty. Returns -1 if malformed. */
static int parse_range(const tdm_param_def_t *d, int *has_lo, int *has_hi, double *dlo, double *dhi,
                       int64_t *ilo, int64_t *ihi)
{
    char buf[128];
    *has_lo = *has_hi = 0;
    if (!d->range || !*d->range)
        return 0;
    const char *dots = strstr(d->range, "..");
    if (!dots || strlen(d->range) >= sizeof(buf))
        return -1;
    size_t n = (size_t)(dots - d->range);
    memcpy(buf, d->range, n);
    buf[n] = '\0';
    const char *hi = dots + 2;
    if (d->type == TDM_PARAM_INT64) {
        if (n && parse_i64(buf, ilo) != 0)
            return -1;
        if (*hi && parse_i64(hi, ihi) != 0)
            return -1;
    } else {
        if (n && parse_double(buf, dlo) != 0)
            return -1;
        if (*hi && parse_double(hi, dhi) != 0)
            return -1;
    }
    *has_lo = n != 0;
    *has_hi = *hi != '\0';
    return 0;
}

/* Index of `s` among "a|b|c" (case-insensitive), -1 if absent; copies the canonical spelling. */
static int enum_match(const char *choices, const char *s, char *canon, size_t canon_len)
{
    const char *p = choices;
    size_t slen = strlen(s);
    for (int i = 0;; i++) {
        size_t n = strcspn(p, "|");
        if (n == slen && !strncasecmp(p, s, n) && n < canon_len) {
            memcpy(canon, p, n);
            canon[n] = '\0';
            return i;
        }
        if (!p[n])
            return -1;
        p += n + 1;
    }
}

static void *field(tdm_params_t *p, const tdm_param_def_t *d)
{
    return (char *)p->cfg + d->offset;
}

/* Parse `value` for `d` and store it. `who` names the source in errors ("--tp-size",
 * "TDM_TP_SIZE", "worker.ini:3"). */
static tdm_status_t set_value(tdm_params_t *p, size_t i, const char *value, tdm_param_src_t src,
                              const char *who, char *err, size_t err_len)
{
    const tdm_param_def_t *d = &p->t->defs[i];
    int has_lo = 0, has_hi = 0;
    double dlo = 0, dhi = 0;
    int64_t ilo = 0, ihi = 0;
    char *sval = NULL;

    if (strlen(value) > MAX_VALUE_BYTES) {
        snprintf(err, err_len, "%s: value is longer than %d bytes", who, MAX_VALUE_BYTES);
        return TDM_ERR_RANGE;
    }
    if ((d->type == TDM_PARAM_INT64 || d->type == TDM_PARAM_DOUBLE) &&
        parse_range(d, &has_lo, &has_hi, &dlo, &dhi, &ilo, &ihi) != 0) {
        snprintf(err, err_len, "%s: malformed range \"%s\" in the declaration of %s", who, d->range,
                 d->name);
        return TDM_ERR_INVAL;
    }
    switch (d->type) {
    case TDM_PARAM_BOOL: {
        int b;
        if (parse_bool(value, &b) != 0) {
            snprintf(err, err_len, "%s: invalid boolean \"%.64s\" (use true/false, 1/0, yes/no)",
                     who, value);
            return TDM_ERR_INVAL;
        }
        *(int *)field(p, d) = b;
        break;
    }
    case TDM_PARAM_INT64: {
        int64_t v;
        if (parse_i64(value, &v) != 0) {
            snprintf(err, err_len, "%s: invalid integer \"%.64s\"", who, value);
            return TDM_ERR_INVAL;
        }
        if ((has_lo && v < ilo) || (has_hi && v > ihi)) {
            snprintf(err, err_len, "%s: %lld is outside the allowed range %s", who, (long long)v,
                     d->range);
            return TDM_ERR_RANGE;
        }
        *(int64_t *)field(p, d) = v;
        break;
    }
    case TDM_PARAM_DOUBLE: {
        double v;
        if (parse_double(value, &v) != 0) {
            snprintf(err, err_len, "%s: invalid number \"%.64s\"", who, value);
            return TDM_ERR_INVAL;
        }
        if ((has_lo && v < dlo) || (has_hi && v > dhi)) {
            snprintf(err, err_len, "%s: %g is outside the allowed range %s", who, v, d->range);
            return TDM_ERR_RANGE;
        }
        *(double *)field(p, d) = v;
        break;
    }
    case TDM_PARAM_STRING:
    case TDM_PARAM_SECRET:
        sval = tdm_strdup(value);
        break;
    case TDM_PARAM_ENUM: {
        char canon[128];
        if (enum_match(d->range, value, canon, sizeof(canon)) < 0) {
            snprintf(err, err_len, "%s: invalid value \"%.64s\" (allowed: %s)", who, value,
                     d->range);
            return TDM_ERR_INVAL;
        }
        sval = tdm_strdup(canon);
        break;
    }
    default:
        snprintf(err, err_len, "%s: unknown type %d", d->name, (int)d->type);
        return TDM_ERR_INVAL;
    }
    if (sval) {
        tdm_free(p->owned[i]);
        p->owned[i] = sval;
        *(const char **)field(p, d) = sval;
    }
    p->src[i] = src;
    tdm_free(p->origin[i]);
    p->origin[i] = src == TDM_PARAM_SRC_DEFAULT ? NULL : tdm_strdup(who);
    return TDM_OK;
}

static const char *const builtin_flags[] = {"--config", "--override-config", "--print-config",
                                            "--version", "--help"};

static tdm_status_t table_check(const tdm_param_table_t *t, char *err, size_t err_len)
{
    for (size_t i = 0; i < t->ndefs; i++) {
        const tdm_param_def_t *d = &t->defs[i];
        if (!d->name || !d->env || !d->flag || !d->def || !d->range || !d->help ||
            (unsigned)d->type >= TDM_PARAM_TYPE_MAX) {
            snprintf(err, err_len, "param #%zu: incomplete declaration", i);
            return TDM_ERR_INVAL;
        }
        if (strncmp(d->flag, "--", 2) != 0 || strncmp(d->env, "TDM_", 4) != 0) {
            snprintf(err, err_len, "param %s: flag must start with -- and env with TDM_", d->name);
            return TDM_ERR_INVAL;
        }
        if (d->type == TDM_PARAM_ENUM &&
            (!*d->range || strstr(d->range, "||") || d->range[0] == '|' ||
             d->range[strlen(d->range) - 1] == '|')) {
            snprintf(err, err_len, "param %s: enum needs choices \"a|b\"", d->name);
            return TDM_ERR_INVAL;
        }
        if (d->type != TDM_PARAM_ENUM && d->type != TDM_PARAM_INT64 &&
            d->type != TDM_PARAM_DOUBLE && *d->range) {
            snprintf(err, err_len, "param %s: a %s takes no range", d->name,
                     tdm_param_type_name(d->type));
            return TDM_ERR_INVAL;
        }
        if (d->offset >= t->struct_size) {
            snprintf(err, err_len, "param %s: offset outside the config struct", d->name);
            return TDM_ERR_INVAL;
        }
        for (size_t b = 0; b < sizeof(builtin_flags) / sizeof(builtin_flags[0]); b++)
            if (!strcmp(d->flag, builtin_flags[b])) {
                snprintf(err, err_len, "param %s: flag %s is built in", d->name, d->flag);
                return TDM_ERR_INVAL;
            }
        for (size_t j = 0; j < i; j++) {
            const tdm_param_def_t *e = &t->defs[j];
            if (!strcmp(d->name, e->name) || !strcmp(d->flag, e->flag) || !strcmp(d->env, e->env)) {
                snprintf(err, err_len, "params %s and %s: duplicate name, flag or env", e->name,
                         d->name);
                return TDM_ERR_INVAL;
            }
        }
    }
    for (size_t a = 0; a < t->naliases; a++) {
        int target = 0;
        for (size_t i = 0; i < t->ndefs; i++) {
            if (!strcmp(t->aliases[a].alias, t->defs[i].flag)) {
                snprintf(err, err_len, "alias %s shadows a flag", t->aliases[a].alias);
                return TDM_ERR_INVAL;
            }
            target |= !strcmp(t->aliases[a].flag, t->defs[i].flag);
        }
        if (!target) {
            snprintf(err, err_len, "alias %s names unknown flag %s", t->aliases[a].alias,
                     t->aliases[a].flag);
            return TDM_ERR_INVAL;
        }
    }
    return TDM_OK;
}

tdm_status_t tdm_params_init(const tdm_param_table_t *table, void *cfg, tdm_params_t **ret_p,
                             char *err, size_t err_len)
{
    tdm_status_t st;
    tdm_params_t *p;
    char who[160];

    TDM_TRY(table_check(table, err, err_len));
    p = tdm_calloc(1, sizeof(*p));
    p->t = table;
    p->cfg = cfg;
    p->src = tdm_calloc(table->ndefs, sizeof(*p->src));
    p->origin = tdm_calloc(table->ndefs, sizeof(*p->origin));
    p->owned = tdm_calloc(table->ndefs, sizeof(*p->owned));
    memset(cfg, 0, table->struct_size);
    for (size_t i = 0; i < table->ndefs; i++) {
        snprintf(who, sizeof(who), "default of %s", table->defs[i].name);
        TDM_CHECK_GOTO(
            set_value(p, i, table->defs[i].def, TDM_PARAM_SRC_DEFAULT, who, err, err_len), st,
            err_free);
    }
    *ret_p = p;
    return TDM_OK;
err_free:
    tdm_params_free(p);
    return st;
}

void tdm_params_free(tdm_params_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->t->ndefs; i++) {
        tdm_free(p->owned[i]);
        tdm_free(p->origin[i]);
    }
    tdm_free(p->owned);
    tdm_free(p->origin);
    tdm_free(p->src);
    tdm_free(p->config_path);
    tdm_free(p->override_path);
    tdm_free(p);
}

/* INI keys may use '-' where the name has '_'. */
static ssize_t find_name(const tdm_params_t *p, const char *key)
{
    for (size_t i = 0; i < p->t->ndefs; i++) {
        const char *a = p->t->defs[i].name, *b = key;
        while (*a && (*a == *b || (*a == '_' && *b == '-'))) {
            a++;
            b++;
        }
        if (!*a && !*b)
            return (ssize_t)i;
    }
    return -1;
}

static ssize_t find_flag(const tdm_params_t *p, const char *flag, size_t n)
{
    for (size_t a = 0; a < p->t->naliases; a++)
        if (strlen(p->t->aliases[a].alias) == n && !strncmp(p->t->aliases[a].alias, flag, n)) {
            flag = p->t->aliases[a].flag;
            n = strlen(flag);
            break;
        }
    for (size_t i = 0; i < p->t->ndefs; i++)
        if (strlen(p->t->defs[i].flag) == n && !strncmp(p->t->defs[i].flag, flag, n))
            return (ssize_t)i;
    return -1;
}

tdm_status_t tdm_params_set(tdm_params_t *p, const char *name, const char *value,
                            tdm_param_src_t src, const char *origin, char *err, size_t err_len)
{
    ssize_t i = find_name(p, name);
    if (i < 0) {
        snprintf(err, err_len, "%s: unknown parameter \"%.64s\"", origin ? origin : "set", name);
        return TDM_ERR_NOTFOUND;
    }
    return set_value(p, (size_t)i, value, src, origin ? origin : name, err, err_len);
}

typedef struct ini_ctx {
    tdm_params_t *p;
    const char *path;
    tdm_param_src_t src;
} ini_ctx_t;

static int ini_apply(void *vctx, const char *section, const char *key, const char *value,
                     unsigned line, char *err, size_t err_len)
{
    ini_ctx_t *c = vctx;
    char who[512];
    if (*section && strcmp(section, c->p->t->section) != 0)
        return 0; /* another program's section */
    snprintf(who, sizeof(who), "%s:%u: %s", c->path, line, key);
    ssize_t i = find_name(c->p, key);
    if (i < 0) {
        snprintf(err, err_len, "%s:%u: unknown key \"%s\" for %s", c->path, line, key,
                 c->p->t->program);
        return -1;
    }
    return set_value(c->p, (size_t)i, value, c->src, who, err, err_len) == TDM_OK ? 0 : -1;
}

tdm_status_t tdm_params_apply_file(tdm_params_t *p, const char *path, tdm_param_src_t src,
                                   char *err, size_t err_len)
{
    ini_ctx_t c = {p, path, src};
    return tdm_ini_parse_file(path, ini_apply, &c, err, err_len);
}

tdm_status_t tdm_params_apply_env(tdm_params_t *p, tdm_params_getenv_fn getenv_fn, char *err,
                                  size_t err_len)
{
    for (size_t i = 0; i < p->t->ndefs; i++) {
        const char *v = getenv_fn ? getenv_fn(p->t->defs[i].env) : getenv(p->t->defs[i].env);
        if (v)
            TDM_TRY(set_value(p, i, v, TDM_PARAM_SRC_ENV, p->t->defs[i].env, err, err_len));
    }
    return TDM_OK;
}

static int is_builtin_valued(const char *arg, size_t n, char ***ret_slot, tdm_params_t *p)
{
    if (n == strlen("--config") && !strncmp(arg, "--config", n)) {
        *ret_slot = &p->config_path;
        return 1;
    }
    if (n == strlen("--override-config") && !strncmp(arg, "--override-config", n)) {
        *ret_slot = &p->override_path;
        return 1;
    }
    return 0;
}

/* One walk over argv. apply=0 only records built-ins (config paths, --help, --print-config) but
 * checks the whole syntax, so a bad command line fails before any file is read. */
static tdm_status_t walk_argv(tdm_params_t *p, int argc, char *const *argv, int apply, char *err,
                              size_t err_len)
{
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "-h") == 0) {
            p->want_help = 1;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            snprintf(err, err_len, "unexpected argument \"%.64s\" (options start with --)", arg);
            return TDM_ERR_INVAL;
        }
        const char *eq = strchr(arg, '=');
        size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
        const char *value = eq ? eq + 1 : NULL;
        char **slot = NULL;
        int is_help = n == 6 && !strncmp(arg, "--help", 6);
        int is_print = n == 14 && !strncmp(arg, "--print-config", 14);
        int is_version = n == 9 && !strncmp(arg, "--version", 9);
        ssize_t i = -1;

        if (is_help || is_print || is_version) {
            if (value) {
                snprintf(err, err_len, "%.*s takes no value", (int)n, arg);
                return TDM_ERR_INVAL;
            }
            if (is_help)
                p->want_help = 1;
            else if (is_version)
                p->want_version = 1;
            else
                p->want_print_config = 1;
            continue;
        }
        if (!is_builtin_valued(arg, n, &slot, p)) {
            i = find_flag(p, arg, n);
            if (i < 0) {
                snprintf(err, err_len, "unknown option %.*s (see --help)", (int)(n > 64 ? 64 : n),
                         arg);
                return TDM_ERR_NOTFOUND;
            }
        }
        if (i >= 0 && p->t->defs[i].type == TDM_PARAM_BOOL && !value) {
            value = "true";
        } else if (!value) {
            if (a + 1 >= argc || !strncmp(argv[a + 1], "--", 2)) {
                snprintf(err, err_len, "%.*s: missing value", (int)n, arg);
                return TDM_ERR_INVAL;
            }
            value = argv[++a];
        }
        if (slot) {
            if (!*value) {
                snprintf(err, err_len, "%.*s: empty file name", (int)n, arg);
                return TDM_ERR_INVAL;
            }
            tdm_free(*slot);
            *slot = tdm_strdup(value);
        } else if (apply) {
            char who[96];
            snprintf(who, sizeof(who), "%.*s", (int)(n > 80 ? 80 : n), arg);
            TDM_TRY(set_value(p, (size_t)i, value, TDM_PARAM_SRC_CLI, who, err, err_len));
        }
    }
    return TDM_OK;
}

tdm_status_t tdm_params_apply_argv(tdm_params_t *p, int argc, char *const *argv, char *err,
                                   size_t err_len)
{
    return walk_argv(p, argc, argv, 1, err, err_len);
}

tdm_status_t tdm_params_load(tdm_params_t *p, int argc, char *const *argv,
                             tdm_params_getenv_fn getenv_fn, char *err, size_t err_len)
{
    tdm_status_t st;
    const char *cfg, *ovr;

    TDM_TRY(walk_argv(p, argc, argv, 0, err, err_len));
    cfg = p->config_path ? p->config_path
          : getenv_fn    ? getenv_fn("TDM_CONFIG")
                         : getenv("TDM_CONFIG");
    ovr = p->override_path ? p->override_path
          : getenv_fn      ? getenv_fn("TDM_OVERRIDE_CONFIG")
                           : getenv("TDM_OVERRIDE_CONFIG");
    if (cfg && *cfg)
        TDM_TRY(tdm_params_apply_file(p, cfg, TDM_PARAM_SRC_FILE, err, err_len));
    if (ovr && *ovr) {
        /* Absent until the first reconfigure: a missing override file means "no overrides". */
        st = tdm_params_apply_file(p, ovr, TDM_PARAM_SRC_OVERRIDE, err, err_len);
        if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
            return st;
    }
    TDM_TRY(tdm_params_apply_env(p, getenv_fn, err, err_len));
    return walk_argv(p, argc, argv, 1, err, err_len);
}

int tdm_params_want_help(const tdm_params_t *p)
{
    return p->want_help;
}

void tdm_params_print_version(const tdm_param_table_t *t, FILE *out)
{
    fprintf(out, "%s %s (git %s)\n", t->program, PACKAGE_VERSION, TDM_GIT_REV);
}

int tdm_params_want_version(const tdm_params_t *p)
{
    return p->want_version;
}

int tdm_params_want_print_config(const tdm_params_t *p)
{
    return p->want_print_config;
}

tdm_param_src_t tdm_params_source(const tdm_params_t *p, const char *name)
{
    ssize_t i = find_name(p, name);
    return i < 0 ? TDM_PARAM_SRC_MAX : p->src[i];
}

static json_t *value_json(const tdm_params_t *p, const tdm_param_def_t *d)
{
    const void *f = (const char *)p->cfg + d->offset;
    switch (d->type) {
    case TDM_PARAM_BOOL:
        return json_boolean(*(const int *)f);
    case TDM_PARAM_INT64:
        return json_integer(*(const int64_t *)f);
    case TDM_PARAM_DOUBLE:
        return json_real(*(const double *)f);
    case TDM_PARAM_SECRET:
        return json_string(**(const char *const *)f ? "***" : "");
    default:
        return json_string(*(const char *const *)f);
    }
}

tdm_status_t tdm_params_print_config(const tdm_params_t *p, FILE *out)
{
    tdm_status_t st = TDM_OK;
    json_t *root = json_object(), *params = json_object();
    json_object_set_new(root, "program", json_string(p->t->program));
    for (size_t i = 0; i < p->t->ndefs; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "value", value_json(p, &p->t->defs[i]));
        json_object_set_new(e, "source", json_string(src_names[p->src[i]]));
        if (p->origin[i])
            json_object_set_new(e, "origin", json_string(p->origin[i]));
        json_object_set_new(params, p->t->defs[i].name, e);
    }
    json_object_set_new(root, "params", params);
    if (json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) != 0 ||
        fputc('\n', out) == EOF)
        st = TDM_ERR_IO;
    json_decref(root);
    return st;
}

/* The word after a flag in --help: its type, named for what it holds (DIR, HOST:PORT, N). */
const char *tdm_param_placeholder(const tdm_param_def_t *d)
{
    static const struct {
        const char *suffix, *word;
    } names[] = {
        {"model_path", "DIR"},    {"_dir", "DIR"},
        {"_file", "PATH"},        {"_bin", "PATH"},
        {"config", "PATH"},       {"listen", "HOST:PORT"},
        {"_addr", "HOST:PORT"},   {"host", "HOST"},
        {"control_plane", "URL"}, {"webhook", "URL"},
        {"_dsn", "DSN"},          {"prompt_ids", "ID,ID,..."},
        {"prompt", "TEXT"},       {"policy", "CLASS=ACTION,..."},
        {"_name", "NAME"},        {"group", "NAME"},
    };
    switch (d->type) {
    case TDM_PARAM_BOOL:
    case TDM_PARAM_ENUM:
        return "";
    case TDM_PARAM_INT64:
        return strstr(d->name, "bytes") ? "BYTES" : strstr(d->name, "port") ? "PORT" : "N";
    case TDM_PARAM_DOUBLE:
        return strstr(d->name, "timeout") || strstr(d->name, "interval") ? "SECONDS"
               : strstr(d->name, "fraction")                             ? "FRACTION"
                                                                         : "X";
    case TDM_PARAM_SECRET:
        return strstr(d->name, "dsn") ? "DSN" : "SECRET";
    default:
        break;
    }
    size_t n = strlen(d->name);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t k = strlen(names[i].suffix);
        if (n >= k && strcmp(d->name + n - k, names[i].suffix) == 0)
            return names[i].word;
    }
    return "STRING";
}

void tdm_params_usage(const tdm_param_table_t *t, FILE *out)
{
    fprintf(out, "Usage: %s [OPTIONS]\n\n", t->program);
    for (size_t i = 0; i < t->ndefs; i++) {
        const tdm_param_def_t *d = &t->defs[i];
        if (d->type == TDM_PARAM_ENUM)
            fprintf(out, "  %s {%s}\n      %s", d->flag, d->range, d->help);
        else if (d->type == TDM_PARAM_BOOL)
            fprintf(out, "  %s\n      %s", d->flag, d->help);
        else
            fprintf(out, "  %s %s\n      %s", d->flag, tdm_param_placeholder(d), d->help);
        if (*d->def && d->type != TDM_PARAM_SECRET)
            fprintf(out, " (default: %s)", d->def);
        fprintf(out, " [env %s]\n", d->env);
    }
    for (size_t a = 0; a < t->naliases; a++)
        fprintf(out, "  %s is an alias of %s\n", t->aliases[a].alias, t->aliases[a].flag);
    fprintf(out,
            "  --config PATH\n      INI file ([%s] section) [env TDM_CONFIG]\n"
            "  --override-config PATH\n      INI file layered after --config [env "
            "TDM_OVERRIDE_CONFIG]\n"
            "  --print-config\n      print the resolved values and their sources as JSON\n"
            "  --help, -h\n      this text\n"
            "  --version\n      print the version and exit\n",
            t->section);
}

static void md_cell(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", out);
        else
            fputc(*s, out);
    }
}

void tdm_params_doc_markdown(const tdm_param_table_t *t, FILE *out)
{
    fprintf(out, "## %s\n\nINI section `[%s]`.\n\n", t->program, t->section);
    fprintf(out, "| flag | env | INI key | type | default | range | description |\n");
    fprintf(out, "|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < t->ndefs; i++) {
        const tdm_param_def_t *d = &t->defs[i];
        fprintf(out, "| `%s` | `%s` | `%s` | %s | ", d->flag, d->env, d->name,
                tdm_param_type_name(d->type));
        if (*d->def) {
            fputc('`', out);
            md_cell(out, d->def);
            fputc('`', out);
        }
        fputs(" | ", out);
        md_cell(out, d->range);
        fputs(" | ", out);
        md_cell(out, d->help);
        fputs(" |\n", out);
    }
    if (t->naliases) {
        fputs("\nAliases:", out);
        for (size_t a = 0; a < t->naliases; a++)
            fprintf(out, " `%s` = `%s`%s", t->aliases[a].alias, t->aliases[a].flag,
                    a + 1 < t->naliases ? "," : ".");
        fputc('\n', out);
    }
    fputc('\n', out);
}

int tdm_params_start(const tdm_param_table_t *t, void *cfg, const char *const *log_level, int argc,
                     char *const *argv, void (*more_usage)(FILE *out), tdm_log_subsys_t sub,
                     tdm_params_t **ret_p)
{
    char err[1024];
    tdm_params_t *p = NULL;
    if (tdm_params_init(t, cfg, &p, err, sizeof(err)) != TDM_OK ||
        tdm_params_load(p, argc, argv, NULL, err, sizeof(err)) != TDM_OK) {
        tdm_err(sub, "msg=\"%s\"", err);
        tdm_params_free(p);
        return TDM_PARAMS_BAD;
    }
    int rc = TDM_PARAMS_GO;
    if (tdm_params_want_help(p)) {
        tdm_params_usage(t, stdout);
        if (more_usage)
            more_usage(stdout);
        rc = 0;
    } else if (tdm_params_want_version(p)) {
        tdm_params_print_version(t, stdout);
        rc = 0;
    } else {
        tdm_log_level_t level;
        if (tdm_log_level_parse(*log_level, &level) == 0)
            tdm_log_set_level(level);
        if (tdm_params_want_print_config(p))
            rc = tdm_params_print_config(p, stdout) == TDM_OK ? 0 : 1;
    }
    if (rc != TDM_PARAMS_GO) {
        tdm_params_free(p);
        return rc;
    }
    *ret_p = p;
    return TDM_PARAMS_GO;
}
