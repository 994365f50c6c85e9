/*
 * tandemctl.c — the operator's command line for tandemd's REST API (libcurl), with the
 * conventions of kubectl and systemctl (controlplane/ctl/ctl.h, docs/contracts.md "tandemctl").
 *
 * One table declares every command: its arguments, its own flags and its help. The parser walks
 * argv once: global flags may stand before or after the command, `--flag=value` and
 * `--flag value` are the same, `--` ends the flags, and anything it does not know is an error that
 * names it. Help (`-h`, `--help`, `help CMD`) wins over everything else and never sends a request.
 *
 * URL: --url, else $TDM_URL, else http://127.0.0.1:8470. Token: --token, else --token-file, else
 * $TDM_TOKEN, else $TDM_STATE_DIR/admin.token, else /var/lib/tandem/admin.token.
 * Exit status: 0 done, 1 the request failed (unreachable, an HTTP error, an unknown room),
 * 2 bad usage.
 */
#include "config.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/httpc.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "common/version.h"
#include "controlplane/ctl/ctl.h"
#include "controlplane/ctl/ctl_plan.h"

#define ARGS_MAX 64

typedef struct ctl {
    const char *url, *token_file, *token_arg;
    const char *role; /* token create --role */
    const char *limit;
    int json_out, stuck;
    tdm_ctl_view_t view;
    char token[256];
} ctl_t;

typedef struct ctl_cmd ctl_cmd_t;
struct ctl_cmd {
    const char *name;
    const char *args;  /* usage words after the name */
    const char *flags; /* its own flags, space separated; "=" marks one taking a value */
    int min_args, max_args;
    const char *summary;
    const char *help; /* more lines, or NULL */
    int (*run)(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos);
};

/* ---- HTTP ----------------------------------------------------------------------------------- */

static int load_token(ctl_t *c)
{
    const char *env = getenv("TDM_TOKEN");
    const char *file = c->token_file;
    char path[4096];
    if (c->token_arg) {
        snprintf(c->token, sizeof(c->token), "%s", c->token_arg);
        return 0;
    }
    if (!file && env && *env) {
        snprintf(c->token, sizeof(c->token), "%s", env);
        return 0;
    }
    if (!file) {
        const char *sd = getenv("TDM_STATE_DIR");
        snprintf(path, sizeof(path), "%s/admin.token", sd && *sd ? sd : "/var/lib/tandem");
        file = path;
    }
    FILE *f = fopen(file, "r");
    if (!f || !fgets(c->token, (int)sizeof(c->token), f)) {
        fprintf(stderr,
                "tandemctl: cannot read a token from %s (--token-file PATH or $TDM_TOKEN)\n", file);
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    c->token[strcspn(c->token, "\r\n ")] = '\0';
    return 0;
}

/* One request; 0 with the 2xx body in *ret_body (caller frees), else 1 after saying why on
 * stderr. *ret_status gets the HTTP status (0 when no answer came). */
static int request(ctl_t *c, const char *method, const char *path, const char *payload,
                   char **ret_body, long *ret_status)
{
    if (!c->token[0] && load_token(c) != 0)
        return 1;
    CURL *h = curl_easy_init();
    if (!h) {
        fprintf(stderr, "tandemctl: curl_easy_init failed\n");
        return 1;
    }
    tdm_httpc_body_t b = {NULL, 0, 16u << 20}; /* a reply this large is not from tandemd */
    char auth[300], url[4096];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->token);
    snprintf(url, sizeof(url), "%s%s", c->url, path);
    struct curl_slist *hd = curl_slist_append(NULL, auth);
    hd = curl_slist_append(hd, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, tdm_httpc_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    /* actions answer when they end: a drain or restart may take minutes */
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 900L);
    if (payload)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (ret_status)
        *ret_status = cc == CURLE_OK ? status : 0;
    int rc = 0;
    if (cc != CURLE_OK) {
        fprintf(stderr, "tandemctl: %s %s: %s\n", method, url, curl_easy_strerror(cc));
        rc = 1;
    } else if (status < 200 || status >= 300) {
        json_t *j = json_loads(b.data ? b.data : "", 0, NULL);
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fprintf(stderr, "tandemctl: %s %s: HTTP %ld: %s\n", method, path, status,
                msg ? msg : (b.data ? b.data : ""));
        json_decref(j);
        rc = 1;
    } else {
        *ret_body = b.data ? b.data : tdm_strdup("");
        b.data = NULL;
    }
    tdm_free(b.data);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return rc;
}

/* GET path and print it: the JSON as it came with -o json, else the command's table. */
static int get_render(ctl_t *c, const char *path,
                      void (*render)(FILE *, json_t *, const tdm_ctl_view_t *))
{
    char *body = NULL;
    int rc = request(c, "GET", path, NULL, &body, NULL);
    if (rc != 0)
        return rc;
    json_t *o = json_loads(body, 0, NULL);
    if (c->json_out || !o || !render)
        printf("%s\n", body);
    else
        render(stdout, o, &c->view);
    json_decref(o);
    tdm_free(body);
    return 0;
}

static char *escape(const char *s)
{
    CURL *h = curl_easy_init();
    char *e = curl_easy_escape(h, s, 0);
    char *r = tdm_strdup(e ? e : "");
    curl_free(e);
    curl_easy_cleanup(h);
    return r;
}

/* ---- commands ------------------------------------------------------------------------------- */

static int run_status(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd, (void)n, (void)pos;
    return get_render(c, "/api/v1/status", tdm_ctl_render_status);
}

static int run_alerts(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd, (void)n, (void)pos;
    /* live: the open alerts and the recently resolved ones from memory, even while the database
     * is away; --all reads the whole history from the database */
    return get_render(c, c->view.all ? "/api/v1/alerts?limit=1000" : "/api/v1/alerts?source=live",
                      tdm_ctl_render_alerts);
}

static int run_actions(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd, (void)n, (void)pos;
    char path[128];
    char *end = NULL;
    long lim = c->limit ? strtol(c->limit, &end, 10) : 50;
    if (c->limit && (*end || lim < 1 || lim > 10000)) {
        fprintf(stderr, "tandemctl: actions: --limit: \"%s\" is not an integer in 1..10000\n",
                c->limit);
        return 2;
    }
    snprintf(path, sizeof(path), "/api/v1/actions?limit=%ld", lim);
    return get_render(c, path, tdm_ctl_render_actions);
}

static int run_transfers(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd, (void)n, (void)pos;
    if (!c->stuck)
        return get_render(c, "/api/v1/transfers", tdm_ctl_render_transfers);
    /* stuck: not terminal and older than the TRANSFER_STALL threshold (10 s) */
    int rc = get_render(c, "/api/v1/transfers?state=TRANSFERRING&min_age_ms=10000",
                        tdm_ctl_render_transfers);
    if (rc == 0)
        rc = get_render(c, "/api/v1/transfers?state=WAITING_FOR_INPUT&min_age_ms=10000",
                        tdm_ctl_render_transfers);
    return rc;
}

static int run_trace(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd, (void)n;
    const char *room = pos[0];
    size_t len = strlen(room);
    if (len == 0 || len > 16 || strspn(room, "0123456789abcdef") != len) {
        fprintf(stderr,
                "tandemctl: trace: room \"%s\" is not lowercase hex (at most 16 digits, as "
                "`tandemctl transfers` prints it)\n",
                room);
        return 2;
    }
    char path[128], *body = NULL;
    long status = 0;
    snprintf(path, sizeof(path), "/api/v1/transfers/%s", room);
    int rc = request(c, "GET", path, NULL, &body, &status);
    if (rc != 0) {
        if (status == 404)
            fprintf(stderr, "tandemctl: trace: no transfer room %s is known to tandemd\n", room);
        return rc;
    }
    json_t *o = json_loads(body, 0, NULL);
    if (c->json_out || !o)
        printf("%s\n", body);
    else
        tdm_ctl_render_trace(stdout, o, &c->view);
    json_decref(o);
    tdm_free(body);
    return 0;
}

/* POST /api/v1/groups/G/ACTION and say how it ended. */
static int post_action(ctl_t *c, const char *action, const char *group, json_t *params)
{
    char path[1024], *body = NULL;
    char *esc = escape(group);
    snprintf(path, sizeof(path), "/api/v1/groups/%s/%s", esc, action);
    tdm_free(esc);
    char *payload = params ? json_dumps(params, JSON_COMPACT) : NULL;
    int rc = request(c, "POST", path, payload, &body, NULL);
    free(payload);
    if (rc != 0)
        return rc;
    json_t *o = json_loads(body, 0, NULL);
    if (c->json_out || !o)
        printf("%s\n", body);
    else
        printf("action %lld %s %s: %s%s%s%s\n",
               (long long)json_integer_value(json_object_get(o, "action_id")), action, group,
               json_string_value(json_object_get(o, "outcome"))
                   ? json_string_value(json_object_get(o, "outcome"))
                   : "?",
               json_string_value(json_object_get(o, "detail")) ? " (" : "",
               json_string_value(json_object_get(o, "detail"))
                   ? json_string_value(json_object_get(o, "detail"))
                   : "",
               json_string_value(json_object_get(o, "detail")) ? ")" : "");
    json_decref(o);
    tdm_free(body);
    return 0;
}

static int run_action(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)n;
    return post_action(c, cmd->name, pos[0], NULL);
}

/* A value as JSON: integers and decimals as numbers, the rest as strings. */
static json_t *setting_value(const char *s)
{
    char *end;
    double d = strtod(s, &end);
    if (*end == '\0' && end != s && strchr(s, '.'))
        return json_real(d);
    if (*end == '\0' && end != s)
        return json_integer(strtoll(s, NULL, 10));
    return json_string(s);
}

/* KEY=VALUE words, or KEY VALUE pairs (`set G overlap off`), or both mixed. */
static int run_set(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd;
    json_t *p = json_object();
    for (int k = 1; k < n; k++) {
        const char *eq = strchr(pos[k], '=');
        char key[128];
        const char *val;
        if (eq) {
            snprintf(key, sizeof(key), "%.*s", (int)(eq - pos[k]), pos[k]);
            val = eq + 1;
        } else if (k + 1 < n && !strchr(pos[k + 1], '=')) {
            snprintf(key, sizeof(key), "%s", pos[k]);
            val = pos[++k];
        } else {
            fprintf(stderr, "tandemctl: set: \"%s\" has no value (KEY=VALUE or KEY VALUE)\n",
                    pos[k]);
            json_decref(p);
            return 2;
        }
        if (!key[0] || !*val) {
            fprintf(stderr, "tandemctl: set: expected KEY=VALUE, got \"%s\"\n", pos[k]);
            json_decref(p);
            return 2;
        }
        json_object_set_new(p, key, setting_value(val));
    }
    int rc = post_action(c, "reconfigure", pos[0], p);
    json_decref(p);
    return rc;
}

static int run_token(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd;
    const char *verb = pos[0];
    char *body = NULL;
    int rc;
    if (strcmp(verb, "list") == 0 && n == 1)
        return get_render(c, "/api/v1/tokens", tdm_ctl_render_tokens);
    if (strcmp(verb, "create") == 0 && n == 2) {
        const char *role = c->role ? c->role : "read";
        if (strcmp(role, "read") != 0 && strcmp(role, "admin") != 0) {
            fprintf(stderr, "tandemctl: token create: --role \"%s\" (read or admin)\n", role);
            return 2;
        }
        json_t *o = json_pack("{s:s, s:s}", "name", pos[1], "role", role);
        char *payload = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        rc = request(c, "POST", "/api/v1/tokens", payload, &body, NULL);
        free(payload);
    } else if (strcmp(verb, "revoke") == 0 && n == 2) {
        char path[1024], *esc = escape(pos[1]);
        snprintf(path, sizeof(path), "/api/v1/tokens/%s", esc);
        tdm_free(esc);
        rc = request(c, "DELETE", path, NULL, &body, NULL);
    } else {
        fprintf(stderr,
                "tandemctl: token: expected `create NAME`, `list` or `revoke NAME`, got \"%s\"%s\n",
                verb, n > 2 ? " with extra words" : "");
        return 2;
    }
    if (rc == 0)
        printf("%s\n", body);
    tdm_free(body);
    return rc;
}

static int run_plan(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd;
    return tdm_cp_plan_main(n, pos, c->json_out, stdout, stderr);
}

static const char bash_completion[];

static int run_completion(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)c, (void)cmd, (void)n;
    if (strcmp(pos[0], "bash") != 0) {
        fprintf(stderr, "tandemctl: completion: shell \"%s\" is not supported (bash)\n", pos[0]);
        return 2;
    }
    fputs(bash_completion, stdout);
    return 0;
}

/* The group names, one a line: what the completion offers after drain, resume, restart, set. */
static int run_group_names(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)cmd, (void)n, (void)pos;
    char *body = NULL;
    if (request(c, "GET", "/api/v1/status", NULL, &body, NULL) != 0)
        return 1;
    json_t *o = json_loads(body, 0, NULL), *g;
    size_t i;
    json_array_foreach(json_object_get(o, "groups"), i, g)
        printf("%s\n", json_string_value(json_object_get(g, "name")));
    json_decref(o);
    tdm_free(body);
    return 0;
}

static int run_help(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos);
static int run_version(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)c, (void)cmd, (void)n, (void)pos;
    printf("tandemctl %s (git %s)\n", PACKAGE_VERSION, TDM_GIT_REV);
    return 0;
}

/* clang-format off */
static const ctl_cmd_t cmds[] = {
    {"status", "", "--all", 0, 0, "groups (state, health), their ranks and the open alerts",
     "  HEALTH is the worker's own /ready verdict (ok, or why not: draining, a wedged rank).\n"
     "  Ranks of a group's earlier incarnations are hidden; --all shows them.\n", run_status},
    {"alerts", "", "--all", 0, 0, "open alerts (--all: every alert, resolved ones too)", NULL,
     run_alerts},
    {"actions", "", "--limit=", 0, 0, "the audit log: who did what to which group, and how it ended",
     "  --limit N   rows, newest first (default 50)\n", run_actions},
    {"transfers", "", "--stuck", 0, 0, "KV transfer rooms of the last hour (--stuck: older than 10 s "
     "and not finished)", NULL, run_transfers},
    {"trace", "ROOM", "", 1, 1, "a transfer room's whole timeline, every event of both sides",
     "  ROOM is the hex id `tandemctl transfers` prints; an unknown room exits 1.\n", run_trace},
    {"drain", "GROUP", "", 1, 1, "stop routing to GROUP and wait for its requests to finish",
     "  The group keeps running, drained; `tandemctl resume GROUP` routes to it again.\n",
     run_action},
    {"resume", "GROUP", "", 1, 1, "undo a drain: GROUP admits requests again", NULL, run_action},
    {"restart", "GROUP", "", 1, 1, "drain GROUP, restart its processes and wait until ready",
     "  Only groups tandemd supervises (--groups-config) can be restarted.\n", run_action},
    {"set", "GROUP KEY=VALUE...", "", 2, ARGS_MAX, "reconfigure GROUP (a restart with new settings)",
     "  KEY=VALUE or KEY VALUE: overlap on|off, hicache on|off, kv_cache_dtype auto|bf16|fp8_e4m3,\n"
     "  max_running_requests N, chunked_prefill_size N, health_progress_timeout SECONDS.\n"
     "  e.g. tandemctl set demo-decode overlap off\n", run_set},
    {"token", "create NAME|list|revoke NAME", "--role= --all", 1, 2, "API tokens (admin)",
     "  --role read|admin   the new token's role (default read)\n"
     "  token list hides revoked tokens; --all shows them.\n", run_token},
    {"plan", "--gpus N --model PATH [...]", NULL, 0, ARGS_MAX,
     "offline: systemd units and worker configs for one host's P/D groups",
     "  `tandemctl plan` alone lists its flags; needs no server.\n", run_plan},
    {"completion", "bash", "", 1, 1, "print the bash completion script",
     "  source <(tandemctl completion bash), or install it as\n"
     "  /usr/share/bash-completion/completions/tandemctl\n", run_completion},
    {"version", "", "", 0, 0, "print the version", NULL, run_version},
    {"help", "[COMMAND]", "", 0, 1, "this text, or a command's", NULL, run_help},
    {"__groups", "", "", 0, 0, NULL, NULL, run_group_names},
};
/* clang-format on */
#define N_CMDS (sizeof(cmds) / sizeof(cmds[0]))

static const char global_help[] =
    "Global flags (before or after the command):\n"
    "  --url URL           tandemd's address (env TDM_URL, default http://127.0.0.1:8470)\n"
    "  --token TOKEN       bearer token (env TDM_TOKEN)\n"
    "  --token-file PATH   file holding the token (default $TDM_STATE_DIR/admin.token or\n"
    "                      /var/lib/tandem/admin.token)\n"
    "  -o, --output FORMAT table (default) or json; --json is -o json\n"
    "  -h, --help          help (per command: tandemctl COMMAND --help)\n"
    "      --version       print the version\n";

static const ctl_cmd_t *find_cmd(const char *name)
{
    for (size_t i = 0; i < N_CMDS; i++)
        if (strcmp(cmds[i].name, name) == 0)
            return &cmds[i];
    return NULL;
}

static void print_help(FILE *out, const ctl_cmd_t *cmd)
{
    if (cmd && strcmp(cmd->name, "help") != 0) {
        fprintf(out, "usage: tandemctl [flags] %s%s%s%s\n\n%s\n", cmd->name, *cmd->args ? " " : "",
                cmd->args, cmd->flags && *cmd->flags ? " [command flags]" : "", cmd->summary);
        if (cmd->help)
            fprintf(out, "\n%s", cmd->help);
        if (cmd->flags && *cmd->flags)
            fprintf(out, "\nCommand flags: %s\n", cmd->flags);
        fprintf(out, "\n%s", global_help);
        return;
    }
    fprintf(
        out,
        "usage: tandemctl [flags] COMMAND [ARGS] [flags]\n\n"
        "tandemctl drives tandemd, the tandem control plane: it shows the worker groups, their\n"
        "alerts and transfers, and drains, resumes, restarts or reconfigures a group.\n\n"
        "Commands:\n");
    for (size_t i = 0; i < N_CMDS; i++) {
        if (!cmds[i].summary)
            continue;
        char head[64];
        snprintf(head, sizeof(head), "%s %s", cmds[i].name, cmds[i].args);
        fprintf(out, "  %-34s %s\n", head, cmds[i].summary);
    }
    fprintf(out, "\n%s\nExit status: 0 done, 1 the request failed, 2 bad usage.\n", global_help);
}

static int run_help(ctl_t *c, const ctl_cmd_t *cmd, int n, char **pos)
{
    (void)c, (void)cmd;
    const ctl_cmd_t *which = n ? find_cmd(pos[0]) : NULL;
    if (n && !which) {
        fprintf(stderr, "tandemctl: help: unknown command \"%s\" (see tandemctl --help)\n", pos[0]);
        return 2;
    }
    print_help(stdout, which);
    return 0;
}

/* A command's own flag: 1 boolean, 2 takes a value, 0 not one of its flags. */
static int cmd_flag(const ctl_cmd_t *cmd, const char *name, size_t len)
{
    const char *f = cmd->flags;
    while (f && *f) {
        size_t n = strcspn(f, " =");
        int valued = f[n] == '=';
        if (n == len && strncmp(f, name, len) == 0)
            return valued ? 2 : 1;
        f += n + (size_t)valued;
        f += strspn(f, " ");
    }
    return 0;
}

static int set_cmd_flag(ctl_t *c, const char *name, const char *value)
{
    if (!strcmp(name, "--all"))
        c->view.all = 1;
    else if (!strcmp(name, "--stuck"))
        c->stuck = 1;
    else if (!strcmp(name, "--role"))
        c->role = value;
    else if (!strcmp(name, "--limit"))
        c->limit = value;
    return 0;
}

__attribute__((format(printf, 2, 3))) static int usage_error(const ctl_cmd_t *cmd, const char *fmt,
                                                             ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tandemctl: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, " (see tandemctl %s --help)\n", cmd->name);
    else
        fprintf(stderr, " (see tandemctl --help)\n");
    return 2;
}

int main(int argc, char **argv)
{
    ctl_t c = {.url = getenv("TDM_URL")};
    const ctl_cmd_t *cmd = NULL;
    char *pos[ARGS_MAX];
    int n = 0, want_help = 0, want_version = 0, only_pos = 0;

    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || !a[1]) {
            if (!cmd) {
                if (!(cmd = find_cmd(a)))
                    return usage_error(NULL, "unknown command \"%s\"", a);
            } else if (n < ARGS_MAX) {
                pos[n++] = a;
            } else {
                return usage_error(cmd, "too many arguments (at \"%s\")", a);
            }
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(len < 63 ? len : 63), a);
        const char *value = eq ? eq + 1 : NULL;
        /* global flags, wherever they stand */
        if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
            want_help = 1;
            continue;
        }
        if (!strcmp(name, "--version") || !strcmp(name, "--json")) {
            if (value)
                return usage_error(cmd, "%s takes no value", name);
            if (name[2] == 'v')
                want_version = 1;
            else
                c.json_out = 1;
            continue;
        }
        if (!strcmp(name, "--url") || !strcmp(name, "--token") || !strcmp(name, "--token-file") ||
            !strcmp(name, "-o") || !strcmp(name, "--output")) {
            if (!value) {
                if (i + 1 >= argc)
                    return usage_error(cmd, "%s needs a value", name);
                value = argv[++i];
            }
            if (!strcmp(name, "-o") || !strcmp(name, "--output")) {
                if (strcmp(value, "json") && strcmp(value, "table"))
                    return usage_error(cmd, "-o: unknown format \"%s\" (table or json)", value);
                c.json_out = !strcmp(value, "json");
            } else if (!strcmp(name, "--url")) {
                c.url = value;
            } else if (!strcmp(name, "--token")) {
                c.token_arg = value;
            } else {
                c.token_file = value;
            }
            continue;
        }
        if (!cmd)
            return usage_error(NULL, "unknown flag %s (a command's own flags follow it)", name);
        if (cmd->run == run_plan) { /* plan parses its own flags */
            if (n >= ARGS_MAX)
                return usage_error(cmd, "too many arguments (at \"%s\")", a);
            pos[n++] = a;
            continue;
        }
        int kind = cmd_flag(cmd, name, strlen(name));
        if (!kind)
            return usage_error(cmd, "unknown flag %s", name);
        if (kind == 1 && value)
            return usage_error(cmd, "%s takes no value", name);
        if (kind == 2 && !value) {
            if (i + 1 >= argc)
                return usage_error(cmd, "%s needs a value", name);
            value = argv[++i];
        }
        set_cmd_flag(&c, name, value);
    }
    if (want_help) {
        if (cmd && cmd->run == run_plan) {
            tdm_cp_plan_main(0, NULL, 0, stdout, stdout);
            printf("\n%s", global_help);
        } else {
            print_help(stdout, cmd);
        }
        return 0;
    }
    if (want_version)
        return run_version(&c, NULL, 0, NULL);
    if (!cmd) {
        print_help(stderr, NULL);
        fprintf(stderr, "\ntandemctl: a command is needed\n");
        return 2;
    }
    if (cmd->run != run_plan && (n < cmd->min_args || n > cmd->max_args)) {
        char what[160];
        snprintf(what, sizeof(what), "%s expects %s%s", cmd->name,
                 *cmd->args ? cmd->args : "no arguments", n > cmd->max_args ? ", got more" : "");
        return usage_error(cmd, "%s", what);
    }
    if (!c.url || !*c.url)
        c.url = "http://127.0.0.1:8470";
    c.view.now_us = tdm_time_wall_us();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmd->run(&c, cmd, n, pos);
    curl_global_cleanup();
    return rc;
}

/* The completion script: commands, their flags, and the live group names after the group
 * commands (through the hidden `__groups` command, with the same --url and token flags). */
static const char bash_completion[] =
    "# bash completion for tandemctl (tandemctl completion bash)\n"
    "_tandemctl()\n"
    "{\n"
    "    local cur prev words cword\n"
    "    _init_completion 2>/dev/null || {\n"
    "        cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}\n"
    "        words=(\"${COMP_WORDS[@]}\"); cword=$COMP_CWORD\n"
    "    }\n"
    "    local cmds='status alerts actions transfers trace drain resume restart set token plan "
    "completion version help'\n"
    "    local globals='--url --token --token-file -o --output --json -h --help --version'\n"
    "    case $prev in\n"
    "    -o|--output) COMPREPLY=($(compgen -W 'table json' -- \"$cur\")); return ;;\n"
    "    --url|--token) return ;;\n"
    "    --token-file) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
    "    --role) COMPREPLY=($(compgen -W 'read admin' -- \"$cur\")); return ;;\n"
    "    esac\n"
    "    local cmd= i conn=()\n"
    "    for ((i = 1; i < cword; i++)); do\n"
    "        case ${words[i]} in\n"
    "        --url|--token|--token-file) conn+=(\"${words[i]}\" \"${words[i+1]}\"); i=$((i+1)) ;;\n"
    "        -o|--output|--role|--limit) i=$((i+1)) ;;\n"
    "        -*) ;;\n"
    "        *) [ -z \"$cmd\" ] && cmd=${words[i]} ;;\n"
    "        esac\n"
    "    done\n"
    "    if [ -z \"$cmd\" ]; then\n"
    "        COMPREPLY=($(compgen -W \"$cmds $globals\" -- \"$cur\")); return\n"
    "    fi\n"
    "    case $cmd in\n"
    "    status|alerts) COMPREPLY=($(compgen -W \"--all $globals\" -- \"$cur\")) ;;\n"
    "    actions) COMPREPLY=($(compgen -W \"--limit $globals\" -- \"$cur\")) ;;\n"
    "    transfers) COMPREPLY=($(compgen -W \"--stuck $globals\" -- \"$cur\")) ;;\n"
    "    drain|resume|restart|set)\n"
    "        if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$globals\" -- \"$cur\"))\n"
    "        else COMPREPLY=($(compgen -W \"$(tandemctl \"${conn[@]}\" __groups 2>/dev/null)\" -- "
    "\"$cur\")); fi ;;\n"
    "    token) COMPREPLY=($(compgen -W \"create list revoke --role --all $globals\" -- \"$cur\")) "
    ";;\n"
    "    completion) COMPREPLY=($(compgen -W 'bash' -- \"$cur\")) ;;\n"
    "    help) COMPREPLY=($(compgen -W \"$cmds\" -- \"$cur\")) ;;\n"
    "    plan) COMPREPLY=($(compgen -W '--gpus --model --tp --prefill-gpus --decode-gpus "
    "--mem-fraction-static --kv-cache-dtype --control-plane --control-plane-token-file --conf-dir "
    "--json' -- \"$cur\")) ;;\n"
    "    esac\n"
    "}\n"
    "complete -F _tandemctl tandemctl\n";
