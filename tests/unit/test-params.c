/*
 * test-params.c — tunables: table validation, every source and its precedence, the CLI grammar,
 * INI files (sections, comments, quotes, errors with file:line), --print-config, and that
 * docs/params.md matches the tables.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <tdm/config.h>
#include <tdm/params.h>

#include "tap.h"

static char tmpdir[] = "/tmp/tdm-test-params-XXXXXX";
static char err[512];

/* A fake environment: "NAME=value" strings. */
static const char *fake_env[8];
static const char *fake_getenv(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < 8 && fake_env[i]; i++)
        if (!strncmp(fake_env[i], name, n) && fake_env[i][n] == '=')
            return fake_env[i] + n + 1;
    return NULL;
}

static const char *write_file(const char *name, const char *text)
{
    static char path[8][256];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
    return p;
}

/* argv as a program gets it: writable strings. */
static tdm_status_t load(tdm_worker_config_t *cfg, tdm_params_t **pp, int argc,
                         const char *const *args)
{
    char *argv[32];
    tdm_status_t st = tdm_params_init(&tdm_worker_config_table, cfg, pp, err, sizeof(err));
    if (st != TDM_OK)
        return st;
    for (int i = 0; i < argc; i++)
        argv[i] = strdup(args[i]);
    st = tdm_params_load(*pp, argc, argv, fake_getenv, err, sizeof(err));
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return st;
}

#define ARGV(...) ((const char *[]){"tandem-worker", __VA_ARGS__})
#define ARGC(...) ((int)(sizeof(ARGV(__VA_ARGS__)) / sizeof(char *)))
#define LOAD(...) load(&cfg, &p, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__))

static int ini_noop(void *ctx, const char *section, const char *key, const char *value,
                    unsigned line, char *e, size_t elen)
{
    (void)ctx, (void)section, (void)key, (void)value, (void)line, (void)e, (void)elen;
    return 0;
}

static int has(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

static void test_defaults(void)
{
    tdm_worker_config_t cfg;
    tdm_tandemd_config_t dcfg;
    tdm_params_t *p = NULL, *d = NULL;

    is_int(tdm_params_init(&tdm_worker_config_table, &cfg, &p, err, sizeof(err)), TDM_OK,
           "worker table validates and every default parses: %s", err);
    is_int(cfg.tp_size, 1, "tp_size default");
    is_str(cfg.kv_cache_dtype, "auto", "kv_cache_dtype default");
    is_str(cfg.disaggregation_mode, "null", "disaggregation_mode default");
    is_int(cfg.disaggregation_bootstrap_port, 8998,
           "bootstrap port default (docs/contracts.md §b)");
    ok(cfg.health_progress_timeout == 3.0, "health_progress_timeout default 3 s (I8)");
    is_str(cfg.model_path, "", "string default is \"\", never NULL");
    is_int(cfg.disable_overlap_schedule, 0, "bool default");
    is_int(tdm_params_source(p, "tp_size"), TDM_PARAM_SRC_DEFAULT, "source default");
    is_int(tdm_params_source(p, "nope"), TDM_PARAM_SRC_MAX, "source of unknown name");
    is_int(tdm_worker_config_http_port(&cfg), 30000, "colocated HTTP port 30000");
    tdm_params_free(p);

    is_int(tdm_params_init(&tdm_tandemd_config_table, &dcfg, &d, err, sizeof(err)), TDM_OK,
           "tandemd table validates: %s", err);
    is_str(dcfg.listen, "127.0.0.1:8470", "tandemd listen default (docs/contracts.md §b)");
    tdm_params_free(d);
}

static void test_cli(void)
{
    tdm_worker_config_t cfg;
    tdm_params_t *p = NULL;

    is_int(LOAD("--tp-size", "2", "--kv-cache-dtype=fp8_e4m3", "--disable-overlap-schedule",
                "--model", "/m", "--mem-fraction-static=0.5", "--disaggregation-mode", "PREFILL"),
           TDM_OK, "CLI parses: %s", err);
    is_int(cfg.tp_size, 2, "--tp-size 2");
    is_str(cfg.kv_cache_dtype, "fp8_e4m3", "--flag=value");
    is_int(cfg.disable_overlap_schedule, 1, "bool flag without value is true");
    is_str(cfg.model_path, "/m", "--model is an alias of --model-path");
    ok(cfg.mem_fraction_static == 0.5, "double");
    is_str(cfg.disaggregation_mode, "prefill", "enum matched case-insensitively, canonical kept");
    is_int(tdm_worker_config_http_port(&cfg), 30001, "prefill HTTP port 30001");
    is_int(tdm_params_source(p, "model_path"), TDM_PARAM_SRC_CLI, "source cli");
    is_int(tdm_params_source(p, "host"), TDM_PARAM_SRC_DEFAULT, "untouched stays default");
    ok(!tdm_params_want_help(p) && !tdm_params_want_print_config(p) && !tdm_params_want_version(p),
       "no built-in requested");
    tdm_params_free(p);

    is_int(LOAD("--tp-size", "2", "--tp-size=4", "--ignore-eos", "--ignore-eos=false", "--prompt",
                "-1 is a fine prompt", "--help", "--print-config", "--version"),
           TDM_OK, "repeated flags: %s", err);
    is_int(cfg.tp_size, 4, "last occurrence wins");
    is_int(cfg.ignore_eos, 0, "--flag=false clears a bool");
    is_str(cfg.prompt, "-1 is a fine prompt", "a value may start with a single dash");
    ok(tdm_params_want_help(p) && tdm_params_want_print_config(p) && tdm_params_want_version(p),
       "--help, --print-config, --version");
    tdm_params_free(p);

    is_int(LOAD("-h", "--version"), TDM_OK, "-h and --version parse: %s", err);
    ok(tdm_params_want_help(p) && tdm_params_want_version(p), "-h is --help; --version is asked");
    tdm_params_free(p);
    is_int(LOAD("--version=1"), TDM_ERR_INVAL, "--version takes no value");
    tdm_params_free(p);
    {
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        tdm_params_usage(&tdm_worker_config_table, mem);
        tdm_params_usage(&tdm_tandemd_config_table, mem);
        tdm_params_print_version(&tdm_tandemd_config_table, mem);
        fclose(mem);
        ok(strstr(text, "  --tp-size N\n") && strstr(text, "  --model-path DIR\n") &&
               strstr(text, "  --disaggregation-prefill-addr HOST:PORT\n") &&
               strstr(text, "  --health-progress-timeout SECONDS\n") &&
               strstr(text, "  --admin-token-file PATH\n") &&
               strstr(text, "  --listen HOST:PORT\n") && strstr(text, "  --pg-dsn DSN\n") &&
               strstr(text, "  --control-plane URL\n") &&
               strstr(text, "  --kv-cpu-bytes BYTES\n") && strstr(text, "  --port PORT\n") &&
               strstr(text, "  --log-level {debug|info|warn|error}\n") &&
               strstr(text, "  --help, -h\n") && strstr(text, "  --version\n") &&
               !strstr(text, "VALUE"),
           "--help names each flag's type (N, DIR, HOST:PORT, SECONDS, PATH, DSN, URL, BYTES)");
        ok(strstr(text, "\ntandemd " PACKAGE_VERSION " (git ") != NULL,
           "--version: program, version, revision");
        free(text);
    }

    /* Errors name the flag and the bad value. */
    is_int(LOAD("--tp-size", "2x"), TDM_ERR_INVAL, "bad integer");
    ok(has(err, "--tp-size") && has(err, "2x"), "message names flag and value: %s", err);
    tdm_params_free(p);
    is_int(LOAD("--tp-size=0"), TDM_ERR_RANGE, "integer below range");
    ok(has(err, "--tp-size") && has(err, "1..64"), "message gives the range: %s", err);
    tdm_params_free(p);
    is_int(LOAD("--tp-size=99999999999999999999"), TDM_ERR_INVAL, "integer overflow");
    tdm_params_free(p);
    is_int(LOAD("--tp-size="), TDM_ERR_INVAL, "empty integer");
    tdm_params_free(p);
    is_int(LOAD("--mem-fraction-static", "nan"), TDM_ERR_INVAL, "nan refused");
    tdm_params_free(p);
    is_int(LOAD("--mem-fraction-static", "1e999"), TDM_ERR_INVAL, "inf refused");
    tdm_params_free(p);
    is_int(LOAD("--mem-fraction-static", "1.5"), TDM_ERR_RANGE, "double above range");
    tdm_params_free(p);
    is_int(LOAD("--kv-cache-dtype", "fp16"), TDM_ERR_INVAL, "enum value not allowed");
    ok(has(err, "--kv-cache-dtype") && has(err, "fp16") && has(err, "auto|bf16|fp8_e4m3"),
       "message lists the choices: %s", err);
    tdm_params_free(p);
    is_int(LOAD("--ignore-eos=maybe"), TDM_ERR_INVAL, "bad bool");
    ok(has(err, "--ignore-eos") && has(err, "maybe"), "bool message: %s", err);
    tdm_params_free(p);
    is_int(LOAD("--tp-sizes", "2"), TDM_ERR_NOTFOUND, "unknown flag");
    ok(has(err, "--tp-sizes"), "unknown flag named: %s", err);
    tdm_params_free(p);
    is_int(LOAD("--tp-size"), TDM_ERR_INVAL, "missing value at the end");
    ok(has(err, "--tp-size") && has(err, "missing value"), "missing value: %s", err);
    tdm_params_free(p);
    is_int(LOAD("--port", "--tp-size", "2"), TDM_ERR_INVAL, "a flag is not a value");
    tdm_params_free(p);
    is_int(LOAD("model-dir"), TDM_ERR_INVAL, "stray positional argument");
    ok(has(err, "model-dir"), "positional named: %s", err);
    tdm_params_free(p);
    is_int(LOAD("--"), TDM_ERR_INVAL, "bare -- refused");
    tdm_params_free(p);
    is_int(LOAD("--help=yes"), TDM_ERR_INVAL, "--help takes no value");
    tdm_params_free(p);
    is_int(LOAD("--config"), TDM_ERR_INVAL, "--config needs a value");
    tdm_params_free(p);
    is_int(LOAD("--config="), TDM_ERR_INVAL, "--config= empty");
    tdm_params_free(p);
}

static void test_files_and_precedence(void)
{
    tdm_worker_config_t cfg;
    tdm_params_t *p = NULL;
    const char *base = write_file("base.ini", "# tandem\n"
                                              "; another comment style\n"
                                              "tp-size = 2\n"
                                              "host=0.0.0.0\n"
                                              "\n"
                                              "[tandemd]\n"
                                              "listen = 1.2.3.4:1\n"
                                              "no_such_key_for_worker = 1\n"
                                              "[worker]\n"
                                              "  page_size   =  32  \r\n"
                                              "served_model_name = \" spaced name \"\n"
                                              "max_running_requests = 7\n"
                                              "api_key = sk-#not-a-comment;\n");
    const char *ovr = write_file("override.ini", "[worker]\ndisable_overlap_schedule = yes\n"
                                                 "page_size = 64\nmax_running_requests = 9\n");
    char cfgarg[300], ovrarg[300];
    snprintf(cfgarg, sizeof(cfgarg), "--config=%s", base);
    snprintf(ovrarg, sizeof(ovrarg), "--override-config=%s", ovr);

    fake_env[0] = "TDM_MAX_RUNNING_REQUESTS=11";
    fake_env[1] = "TDM_HOST=10.0.0.1";
    fake_env[2] = NULL;
    is_int(LOAD(cfgarg, ovrarg, "--host", "::1"), TDM_OK, "file + override + env + cli: %s", err);
    is_int(cfg.tp_size, 2, "file sets tp_size (dash key)");
    is_int(tdm_params_source(p, "tp_size"), TDM_PARAM_SRC_FILE, "source file");
    is_int(cfg.page_size, 64, "override beats file");
    is_int(tdm_params_source(p, "page_size"), TDM_PARAM_SRC_OVERRIDE, "source override");
    is_int(cfg.disable_overlap_schedule, 1, "override sets a bool");
    is_int(cfg.max_running_requests, 11, "env beats override and file");
    is_int(tdm_params_source(p, "max_running_requests"), TDM_PARAM_SRC_ENV, "source env");
    is_str(cfg.host, "::1", "cli beats env and file");
    is_str(cfg.served_model_name, " spaced name ", "quoted value keeps its spaces");
    is_str(cfg.api_key, "sk-#not-a-comment;", "# and ; inside a value are not comments");

    /* --print-config: the resolved values and their sources, as JSON. */
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    is_int(tdm_params_print_config(p, mem), TDM_OK, "print-config");
    fclose(mem);
    json_error_t jerr;
    json_t *root = json_loads(buf, 0, &jerr);
    ok(root != NULL, "print-config output is JSON");
    json_t *ps = json_object_get(root, "params");
    is_str(json_string_value(json_object_get(root, "program")), "tandem-worker", "program");
    is_int(json_integer_value(json_object_get(json_object_get(ps, "tp_size"), "value")), 2,
           "tp_size value");
    is_str(json_string_value(json_object_get(json_object_get(ps, "tp_size"), "source")), "file",
           "tp_size source");
    ok(has(json_string_value(json_object_get(json_object_get(ps, "tp_size"), "origin")),
           "base.ini:3"),
       "file origin carries file:line");
    is_str(json_string_value(json_object_get(json_object_get(ps, "host"), "source")), "cli",
           "host source cli");
    is_str(
        json_string_value(json_object_get(json_object_get(ps, "max_running_requests"), "origin")),
        "TDM_MAX_RUNNING_REQUESTS", "env origin names the variable");
    is_str(json_string_value(json_object_get(json_object_get(ps, "api_key"), "value")), "***",
           "secret masked");
    ok(!has(buf, "sk-#not"), "secret never printed");
    ok(json_is_true(json_object_get(json_object_get(ps, "disable_overlap_schedule"), "value")),
       "bool as JSON true");
    ok(json_is_real(json_object_get(json_object_get(ps, "mem_fraction_static"), "value")),
       "double as JSON real");
    is_str(json_string_value(json_object_get(json_object_get(ps, "rank"), "source")), "default",
           "default source");
    json_decref(root);
    free(buf);
    tdm_params_free(p);

    /* TDM_CONFIG names the file when --config is absent; a missing override file is fine. */
    fake_env[0] = NULL;
    char envcfg[300];
    snprintf(envcfg, sizeof(envcfg), "TDM_CONFIG=%s", base);
    fake_env[0] = envcfg;
    fake_env[1] = "TDM_OVERRIDE_CONFIG=/nonexistent/override.ini";
    fake_env[2] = NULL;
    is_int(LOAD("--port", "0"), TDM_OK, "TDM_CONFIG + absent override: %s", err);
    is_int(cfg.tp_size, 2, "TDM_CONFIG applied");
    is_int(cfg.port, 0, "port 0 allowed");
    tdm_params_free(p);
    fake_env[0] = "TDM_TP_SIZE=zero";
    fake_env[1] = NULL;
    is_int(load(&cfg, &p, 1, ARGV(NULL)), TDM_ERR_INVAL, "bad env value");
    ok(has(err, "TDM_TP_SIZE") && has(err, "zero"), "env error names the variable: %s", err);
    tdm_params_free(p);
    fake_env[0] = NULL;

    is_int(LOAD("--config", "/nonexistent/x.ini"), TDM_ERR_NOTFOUND, "missing --config file");
    ok(has(err, "/nonexistent/x.ini"), "names the file: %s", err);
    tdm_params_free(p);

    struct {
        const char *text, *expect, *why;
        tdm_status_t st;
    } bad[] = {
        {"tp_size = 2\nbogus = 1\n", "bad.ini:2", "unknown key, with file:line", TDM_ERR_INVAL},
        {"[worker]\ntp_size = 0\n", "bad.ini:2", "value out of range", TDM_ERR_INVAL},
        {"tp_size 2\n", "bad.ini:1", "line without =", TDM_ERR_FORMAT},
        {"[worker\ntp_size=2\n", "section", "unclosed section", TDM_ERR_FORMAT},
        {"[]\n", "section", "empty section", TDM_ERR_FORMAT},
        {"host = \"abc\n", "quote", "unterminated quote", TDM_ERR_FORMAT},
        {" = 3\n", "bad key", "empty key", TDM_ERR_FORMAT},
        {"bad key = 3\n", "bad key", "space in key", TDM_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *path = write_file("bad.ini", bad[i].text);
        tdm_params_init(&tdm_worker_config_table, &cfg, &p, err, sizeof(err));
        tdm_status_t st = tdm_params_apply_file(p, path, TDM_PARAM_SRC_FILE, err, sizeof(err));
        ok(st == bad[i].st && has(err, bad[i].expect), "INI %s: %s", bad[i].why, err);
        tdm_params_free(p);
    }

    /* Limits: an over-long line, a NUL byte, a directory. */
    char *longline = malloc(TDM_INI_MAX_LINE + 16);
    memset(longline, 'a', TDM_INI_MAX_LINE + 10);
    memcpy(longline, "host=", 5);
    longline[TDM_INI_MAX_LINE + 10] = '\0';
    const char *lp = write_file("long.ini", longline);
    free(longline);
    tdm_params_init(&tdm_worker_config_table, &cfg, &p, err, sizeof(err));
    is_int(tdm_params_apply_file(p, lp, TDM_PARAM_SRC_FILE, err, sizeof(err)), TDM_ERR_FORMAT,
           "over-long line refused: %s", err);
    is_int(tdm_ini_parse_buf("a=1\n\0b=2\n", 9, "nul", ini_noop, NULL, err, sizeof(err)),
           TDM_ERR_FORMAT, "NUL byte refused: %s", err);
    is_int(tdm_params_apply_file(p, tmpdir, TDM_PARAM_SRC_FILE, err, sizeof(err)), TDM_ERR_IO,
           "a directory is not a config file");
    is_int(tdm_params_set(p, "page-size", "8", TDM_PARAM_SRC_CLI, "test", err, sizeof(err)), TDM_OK,
           "tdm_params_set by key");
    is_int(cfg.page_size, 8, "set applied");
    is_int(tdm_params_set(p, "nope", "8", TDM_PARAM_SRC_CLI, NULL, err, sizeof(err)),
           TDM_ERR_NOTFOUND, "set unknown name");
    tdm_params_free(p);
}

/* A private table for declaration errors. */
typedef struct t_cfg {
    int64_t a;
    const char *b;
    int c;
} t_cfg_t;

static void test_table_checks(void)
{
    t_cfg_t cfg;
    tdm_params_t *p = NULL;
    struct {
        tdm_param_def_t defs[3];
        tdm_param_alias_t alias;
        const char *expect;
    } cases[] = {
        {{{"a", "TDM_A", "--a", TDM_PARAM_INT64, "5", "1..3", "", offsetof(t_cfg_t, a)}},
         {0},
         "outside the allowed range"},
        {{{"a", "TDM_A", "--a", TDM_PARAM_INT64, "1", "1..x", "", offsetof(t_cfg_t, a)}},
         {0},
         "malformed range"},
        {{{"b", "TDM_B", "--b", TDM_PARAM_ENUM, "x", "x||y", "", offsetof(t_cfg_t, b)}},
         {0},
         "enum needs choices"},
        {{{"b", "TDM_B", "--b", TDM_PARAM_ENUM, "z", "x|y", "", offsetof(t_cfg_t, b)}},
         {0},
         "allowed: x|y"},
        {{{"a", "TDM_A", "--a", TDM_PARAM_INT64, "1", "", "", offsetof(t_cfg_t, a)},
          {"b", "TDM_B", "--a", TDM_PARAM_STRING, "", "", "", offsetof(t_cfg_t, b)}},
         {0},
         "duplicate"},
        {{{"a", "TDM_A", "-a", TDM_PARAM_INT64, "1", "", "", offsetof(t_cfg_t, a)}},
         {0},
         "must start with"},
        {{{"a", "A", "--a", TDM_PARAM_INT64, "1", "", "", offsetof(t_cfg_t, a)}},
         {0},
         "must start with"},
        {{{"c", "TDM_C", "--config", TDM_PARAM_BOOL, "0", "", "", offsetof(t_cfg_t, c)}},
         {0},
         "built in"},
        {{{"c", "TDM_C", "--c", TDM_PARAM_BOOL, "0", "1..2", "", offsetof(t_cfg_t, c)}},
         {0},
         "takes no range"},
        {{{"c", "TDM_C", "--c", TDM_PARAM_BOOL, "0", "", "", offsetof(t_cfg_t, c)}},
         {"--d", "--e"},
         "unknown flag"},
        {{{"c", "TDM_C", "--c", TDM_PARAM_BOOL, "0", "", "", offsetof(t_cfg_t, c)}},
         {"--c", "--c"},
         "shadows"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = cases[i].defs[1].name ? 2 : 1;
        tdm_param_table_t t = {"t",
                               "t",
                               cases[i].defs,
                               n,
                               &cases[i].alias,
                               cases[i].alias.alias ? 1 : 0,
                               sizeof(t_cfg_t)};
        p = (tdm_params_t *)1;
        err[0] = '\0';
        tdm_status_t st = tdm_params_init(&t, &cfg, &p, err, sizeof(err));
        ok(st != TDM_OK && has(err, cases[i].expect) && p == (tdm_params_t *)1,
           "declaration error %zu refused, output untouched: %s", i, err);
    }
}

static void test_docs(void)
{
    const char *src = getenv("TDM_SRCDIR");
    char path[1024], *gen = NULL, *disk = NULL;
    size_t glen = 0, dlen = 0;

    FILE *mem = open_memstream(&gen, &glen);
    tdm_config_doc_markdown(mem);
    fclose(mem);
    ok(has(gen, "`--kv-cache-dtype`") && has(gen, "`TDM_TP_SIZE`") && has(gen, "auto\\|bf16"),
       "generated doc lists flags, env names and escaped choices");
    if (!src) {
        free(gen);
        bail_out("TDM_SRCDIR unset (run through make check)");
    }
    snprintf(path, sizeof(path), "%s/docs/params.md", src);
    FILE *f = fopen(path, "r");
    if (f) {
        mem = open_memstream(&disk, &dlen);
        int c;
        while ((c = fgetc(f)) != EOF)
            fputc(c, mem);
        fclose(mem);
        fclose(f);
    }
    ok(disk && glen == dlen && !memcmp(gen, disk, glen),
       "docs/params.md is up to date (run `make params-doc`)");
    free(gen);
    free(disk);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_defaults();
    test_cli();
    test_files_and_precedence();
    test_table_checks();
    test_docs();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        diag("could not remove %s", tmpdir);
    return done_testing() ? 1 : exit_status();
}
