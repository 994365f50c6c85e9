/*
 * act_override.c — reconfigure's config versions: the accepted keys, their checks, merging a
 * request over the current version, and the worker override INI written from it (docs/design.md
 * §5). Pure functions; the executor stores the merged object in config_versions and the state dir.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/act/act.h"

typedef enum key_type {
    KEY_ONOFF = 0,
    KEY_ENUM,
    KEY_INT,
    KEY_NUM,
} key_type_t;

typedef struct key_def {
    const char *key; /* in the request / config version */
    const char *ini; /* worker tunable (tdm/config.h) */
    key_type_t type;
    const char *choices; /* KEY_ENUM */
    double min, max;
    int invert; /* on/off written as the negated bool (overlap=off → disable_... = true) */
} key_def_t;

static const key_def_t keys[] = {
    {"hicache", "enable_hierarchical_cache", KEY_ONOFF, NULL, 0, 0, 0},
    {"overlap", "disable_overlap_schedule", KEY_ONOFF, NULL, 0, 0, 1},
    {"kv_cache_dtype", "kv_cache_dtype", KEY_ENUM, "auto|bf16|fp8_e4m3", 0, 0, 0},
    {"max_running_requests", "max_running_requests", KEY_INT, NULL, 0, 65536, 0},
    {"health_progress_timeout", "health_progress_timeout", KEY_NUM, NULL, 0.1, 3600, 0},
    {"disaggregation_bootstrap_timeout", "disaggregation_bootstrap_timeout", KEY_NUM, NULL, 0.1,
     86400, 0},
};

static const key_def_t *key_find(const char *k)
{
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(keys[i].key, k) == 0)
            return &keys[i];
    return NULL;
}

static int enum_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0)
            return 1;
        p += len + (bar ? 1 : 0);
    }
    return 0;
}

static tdm_status_t check(const key_def_t *d, const json_t *v, char *err, size_t err_len)
{
    switch (d->type) {
    case KEY_ONOFF:
        if (json_is_string(v) &&
            (!strcmp(json_string_value(v), "on") || !strcmp(json_string_value(v), "off")))
            return TDM_OK;
        snprintf(err, err_len, "%s must be \"on\" or \"off\"", d->key);
        return TDM_ERR_INVAL;
    case KEY_ENUM:
        if (json_is_string(v) && enum_ok(d->choices, json_string_value(v)))
            return TDM_OK;
        snprintf(err, err_len, "%s must be one of %s", d->key, d->choices);
        return TDM_ERR_INVAL;
    case KEY_INT:
        if (json_is_integer(v) && json_integer_value(v) >= (json_int_t)d->min &&
            json_integer_value(v) <= (json_int_t)d->max)
            return TDM_OK;
        snprintf(err, err_len, "%s must be an integer in %.0f..%.0f", d->key, d->min, d->max);
        return TDM_ERR_INVAL;
    case KEY_NUM:
        if (json_is_number(v) && json_number_value(v) >= d->min && json_number_value(v) <= d->max)
            return TDM_OK;
        snprintf(err, err_len, "%s must be a number in %g..%g", d->key, d->min, d->max);
        return TDM_ERR_INVAL;
    }
    snprintf(err, err_len, "%s: internal error", d->key);
    return TDM_ERR_INVAL;
}

tdm_status_t tdm_cp_act_config_merge(const json_t *base, const json_t *req, json_t **ret, char *err,
                                     size_t err_len)
{
    if (!json_is_object(req) || json_object_size(req) == 0) {
        snprintf(err, err_len, "the configuration must be a non-empty object of settings");
        return TDM_ERR_INVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)req, k, v)
    {
        const key_def_t *d = key_find(k);
        if (!d) {
            snprintf(err, err_len,
                     "%s: not a reconfigurable setting (overlap, hicache, kv_cache_dtype, "
                     "max_running_requests, health_progress_timeout, "
                     "disaggregation_bootstrap_timeout)",
                     k);
            return TDM_ERR_INVAL;
        }
        tdm_status_t st = check(d, v, err, err_len);
        if (st != TDM_OK)
            return st;
    }
    json_t *out = json_is_object(base) ? json_deep_copy(base) : json_object();
    json_object_update(out, (json_t *)req);
    *ret = out;
    return TDM_OK;
}

char *tdm_cp_act_config_ini(const json_t *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fprintf(f, "# written by tandemd reconfigure; layered after the base config "
               "(--override-config)\n");
    /* keys[] is in sorted order of the INI names' meaning; the output order is the table's */
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const key_def_t *d = &keys[i];
        json_t *v = json_object_get(cfg, d->key);
        if (!v)
            continue;
        switch (d->type) {
        case KEY_ONOFF: {
            int on = strcmp(json_string_value(v), "on") == 0;
            fprintf(f, "%s = %s\n", d->ini, (on ^ d->invert) ? "true" : "false");
            break;
        }
        case KEY_ENUM:
            fprintf(f, "%s = %s\n", d->ini, json_string_value(v));
            break;
        case KEY_INT:
            fprintf(f, "%s = %lld\n", d->ini, (long long)json_integer_value(v));
            break;
        case KEY_NUM:
            fprintf(f, "%s = %.17g\n", d->ini, json_number_value(v));
            break;
        }
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
