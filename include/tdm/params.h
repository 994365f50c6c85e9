/*
 * tdm/params.h — tunables declared once, and their resolution from CLI, environment and INI files.
 *
 * A program declares its tunables as one X-macro list, one line per tunable (NCCL_PARAM style):
 *
 *   #define MY_PARAMS(P)                                                                   \
 *       P(tp_size, "TDM_TP_SIZE", "--tp-size", INT64, "1", "1..64", "Tensor parallel size") \
 *       P(device, "TDM_DEVICE", "--device", ENUM, "cpu", "cuda|cpu", "Compute device")
 *   TDM_PARAMS_STRUCT(my_config, MY_PARAMS);  (a header: typedef struct my_config {..} my_config_t)
 *   TDM_PARAMS_DEFS(my_config, MY_PARAMS);    (one .c per list: static my_config_defs[])
 *   const tdm_param_table_t my_table = {"prog", "section", my_config_defs,
 *       TDM_PARAMS_COUNT(my_config_defs), aliases, n_aliases, sizeof(my_config_t)};
 *
 * Fields: name (C field, INI key and --print-config key), env variable, CLI flag, type, default
 * (as text, parsed by the same code as user input), range and help. `range` is "min..max" for
 * INT64/DOUBLE (either side may be empty), "a|b|c" for ENUM, "" otherwise. Types: BOOL (int 0/1),
 * INT64 (int64_t), DOUBLE (double), STRING and SECRET (const char *, never NULL; SECRET values are
 * masked by --print-config), ENUM (const char *, always one of the listed choices).
 *
 * Precedence (docs/contracts.md §a): CLI > env TDM_* > override file > config file (--config FILE
 * or TDM_CONFIG) > default. The override file (--override-config FILE or TDM_OVERRIDE_CONFIG) is
 * what the control plane's reconfigure writes (docs/design.md §5); it is layered after the base
 * file. INI files: `key = value`, `#`/`;` comment lines, optional double quotes around a value,
 * keys spelled with `_` or `-`. Keys before any section and in the program's own section
 * (`[worker]`, `[tandemd]`) apply; other sections are skipped so one file can serve several
 * programs. An unknown key in an applied section is an error (typos must not pass silently).
 *
 * CLI: `--flag value`, `--flag=value`; BOOL flags take no separate value (`--flag` sets true,
 * `--flag=false` clears it); aliases map another spelling onto a flag (`--model` → `--model-path`).
 * `--config`, `--override-config`, `--print-config` and `--help` are built in. Unknown flags,
 * missing values, stray positional arguments and bad values fail with a message naming the flag
 * (or env variable, or file:line) and the value.
 *
 * Ownership: a tdm_params_t owns every string it stores into the config struct; the struct is
 * valid until tdm_params_free(). Not thread-safe: resolve once at startup, then read freely.
 */
#ifndef TDM_PARAMS_H
#define TDM_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <tdm/log.h>
#include <tdm/status.h>

typedef enum tdm_param_type {
    TDM_PARAM_BOOL = 0,
    TDM_PARAM_INT64,
    TDM_PARAM_DOUBLE,
    TDM_PARAM_STRING,
    TDM_PARAM_SECRET,
    TDM_PARAM_ENUM,
    TDM_PARAM_TYPE_MAX
} tdm_param_type_t;

typedef enum tdm_param_src {
    TDM_PARAM_SRC_DEFAULT = 0,
    TDM_PARAM_SRC_FILE,
    TDM_PARAM_SRC_OVERRIDE,
    TDM_PARAM_SRC_ENV,
    TDM_PARAM_SRC_CLI,
    TDM_PARAM_SRC_MAX
} tdm_param_src_t;

typedef struct tdm_param_def {
    const char *name;
    const char *env;
    const char *flag;
    tdm_param_type_t type;
    const char *def;
    const char *range;
    const char *help;
    size_t offset; /* of the field in the config struct */
} tdm_param_def_t;

typedef struct tdm_param_alias {
    const char *alias; /* "--model" */
    const char *flag;  /* "--model-path" */
} tdm_param_alias_t;

/* One program's declaration: what tdm_params_init() needs. */
typedef struct tdm_param_table {
    const char *program; /* "tandem-worker"; shown in --help and --print-config */
    const char *section; /* INI section that applies to it: "worker" */
    const tdm_param_def_t *defs;
    size_t ndefs;
    const tdm_param_alias_t *aliases;
    size_t naliases;
    size_t struct_size; /* sizeof the config struct */
} tdm_param_table_t;

#define TDM_PARAM_CTYPE_BOOL int
#define TDM_PARAM_CTYPE_INT64 int64_t
#define TDM_PARAM_CTYPE_DOUBLE double
#define TDM_PARAM_CTYPE_STRING const char *
#define TDM_PARAM_CTYPE_SECRET const char *
#define TDM_PARAM_CTYPE_ENUM const char *

#define TDM_PARAM_FIELD_(name, env, flag, type, def, range, help) TDM_PARAM_CTYPE_##type name;
#define TDM_PARAMS_STRUCT(sname, LIST)                                                             \
    typedef struct sname {                                                                         \
        LIST(TDM_PARAM_FIELD_)                                                                     \
    } sname##_t

#define TDM_PARAM_DEF_(name, env, flag, type, def, range, help)                                    \
    {#name, env, flag, TDM_PARAM_##type, def, range, help, offsetof(TDM_PARAM_STRUCT_T_, name)},
/* Defines `static const tdm_param_def_t sname_defs[]`; one list per translation unit. */
#define TDM_PARAMS_DEFS(sname, LIST)                                                               \
    typedef sname##_t TDM_PARAM_STRUCT_T_;                                                         \
    static const tdm_param_def_t sname##_defs[] = {LIST(TDM_PARAM_DEF_)}
#define TDM_PARAMS_COUNT(arr) (sizeof(arr) / sizeof((arr)[0]))

typedef struct tdm_params tdm_params_t;

/* Validates the table (unique names/flags/envs, defaults parse, ranges well-formed) and sets
 * every field of `cfg` to its default. `cfg` must outlive the params object. */
tdm_status_t tdm_params_init(const tdm_param_table_t *table, void *cfg, tdm_params_t **ret_p,
                             char *err, size_t err_len);
void tdm_params_free(tdm_params_t *p);

/* The whole resolution: defaults, config file, override file, environment (read through `getenv`
 * so tests can pass their own; NULL = getenv(3)), then argv[1..argc-1]. On failure the message
 * names the flag/variable/file:line and the value. */
typedef const char *(*tdm_params_getenv_fn)(const char *name);
tdm_status_t tdm_params_load(tdm_params_t *p, int argc, char *const *argv,
                             tdm_params_getenv_fn getenv_fn, char *err, size_t err_len);

/* The steps of tdm_params_load, for callers that layer sources themselves. Each step overwrites
 * what lower-precedence steps set, so call them in precedence order. */
tdm_status_t tdm_params_apply_file(tdm_params_t *p, const char *path, tdm_param_src_t src,
                                   char *err, size_t err_len);
tdm_status_t tdm_params_apply_env(tdm_params_t *p, tdm_params_getenv_fn getenv_fn, char *err,
                                  size_t err_len);
tdm_status_t tdm_params_apply_argv(tdm_params_t *p, int argc, char *const *argv, char *err,
                                   size_t err_len);
/* Set one tunable by name (INI key spelling) from text, as `src`. */
tdm_status_t tdm_params_set(tdm_params_t *p, const char *name, const char *value,
                            tdm_param_src_t src, const char *origin, char *err, size_t err_len);

/* What the CLI asked for besides tunables. */
int tdm_params_want_help(const tdm_params_t *p);
int tdm_params_want_print_config(const tdm_params_t *p);
/* --version was given. */
int tdm_params_want_version(const tdm_params_t *p);
/* "tandemd 0.1.0 (git abcdef012345)": the program, the package version, the revision. */
void tdm_params_print_version(const tdm_param_table_t *t, FILE *out);
/* The word --help prints after a valued flag, naming its type: N, SECONDS, PATH, HOST:PORT... */
const char *tdm_param_placeholder(const tdm_param_def_t *d);
tdm_param_src_t tdm_params_source(const tdm_params_t *p, const char *name);

/* `{"program":..,"params":{"name":{"value":..,"source":"cli","origin":".."},..}}`, indented;
 * SECRET values print as "***" (or "" when unset). */
tdm_status_t tdm_params_print_config(const tdm_params_t *p, FILE *out);
void tdm_params_usage(const tdm_param_table_t *table, FILE *out);
/* docs/params.md section for one table (Markdown). */
void tdm_params_doc_markdown(const tdm_param_table_t *table, FILE *out);

/* A program's start: load the command line (tdm_params_load), answer --help (the table's usage,
 * then `more_usage` when not NULL), --version and --print-config, and apply the --log-level that
 * `log_level` points at (the config's field, read after the load). TDM_PARAMS_GO when the program
 * goes on (*ret_p: the params, the caller's to free); TDM_PARAMS_BAD after a bad flag, variable
 * or file (logged under `sub` as msg="..."; the program picks its exit status); else the exit
 * status after help, version or print-config (0; 1 when stdout failed). Nothing to free then. */
#define TDM_PARAMS_GO (-1)
#define TDM_PARAMS_BAD (-2)
int tdm_params_start(const tdm_param_table_t *t, void *cfg, const char *const *log_level, int argc,
                     char *const *argv, void (*more_usage)(FILE *out), tdm_log_subsys_t sub,
                     tdm_params_t **ret_p);

const char *tdm_param_type_name(tdm_param_type_t t);
const char *tdm_param_src_name(tdm_param_src_t s);

/* INI reader shared by the params loader and anything else that reads our config files. Calls
 * `fn` for each `key = value` with its section ("" before any) and 1-based line; a nonzero
 * return from `fn` stops the read with TDM_ERR_INVAL (fn writes the message). Lines are capped at
 * TDM_INI_MAX_LINE bytes and files at TDM_INI_MAX_BYTES. */
#define TDM_INI_MAX_LINE 4096
#define TDM_INI_MAX_BYTES (1u << 20)
typedef int (*tdm_ini_fn)(void *ctx, const char *section, const char *key, const char *value,
                          unsigned line, char *err, size_t err_len);
tdm_status_t tdm_ini_parse_buf(const char *buf, size_t len, const char *name, tdm_ini_fn fn,
                               void *ctx, char *err, size_t err_len);
tdm_status_t tdm_ini_parse_file(const char *path, tdm_ini_fn fn, void *ctx, char *err,
                                size_t err_len);

#endif
