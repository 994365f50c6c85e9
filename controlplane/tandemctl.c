/*
 * tandemctl.c — the operator's command line for tandemd's REST API (libcurl).
 *
 *   tandemctl [--url URL] [--token-file FILE] token create NAME [--role read|admin]
 *   tandemctl [--url URL] [--token-file FILE] token list
 *   tandemctl [--url URL] [--token-file FILE] token revoke NAME
 *   tandemctl [opts] status | alerts | transfers [--stuck] | trace ROOM
 *   tandemctl [opts] drain GROUP | restart GROUP | set GROUP KEY=VALUE...
 *     set keys: overlap=on|off hicache=on|off kv_cache_dtype=… max_running_requests=N …
 *   opts: --url URL, --token-file FILE, --token TOKEN, --json (raw JSON instead of tables)
 *   tandemctl plan --gpus N --model PATH [--tp K] [--prefill-gpus A-B] [--decode-gpus C-D] ...
 *     offline: the units, INI files and enable lines of one host's P/D groups (plan.h)
 *
 * URL: --url, else $TDM_URL, else http://127.0.0.1:8470. Token: --token-file, else $TDM_TOKEN,
 * else $TDM_STATE_DIR/admin.token, else /var/lib/tandem/admin.token. Prints the server's JSON on
 * stdout; on an error prints its message on stderr and exits 1 (2 for usage errors).
 */
#include "config.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>

#include "controlplane/plan.h"

typedef struct body {
    char *data;
    size_t len;
} body_t;

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    body_t *b = ud;
    size_t add = size * n;
    if (b->len + add > (16u << 20))
        return 0; /* a reply this large is not from tandemd */
    b->data = tdm_realloc(b->data, b->len + add + 1);
    memcpy(b->data + b->len, p, add);
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}

static int usage(void)
{
    fprintf(stderr, "usage: tandemctl [--url URL] [--token-file FILE] token create NAME "
                    "[--role read|admin]\n"
                    "       tandemctl [--url URL] [--token-file FILE] token list\n"
                    "       tandemctl [--url URL] [--token-file FILE] token revoke NAME\n"
                    "       tandemctl [opts] status | alerts | transfers [--stuck] | trace ROOM\n"
                    "       tandemctl [opts] drain GROUP | restart GROUP | set GROUP KEY=VALUE...\n"
                    "       opts: --url URL --token-file FILE --token TOKEN --json\n"
                    "       tandemctl plan --gpus N --model PATH [--tp K] [--json] ... "
                    "(tandemctl plan for all)\n"
                    "       tandemctl --version\n");
    return 2;
}

static int read_token(const char *file, char *out, size_t len)
{
    const char *env = getenv("TDM_TOKEN");
    char path[4096];
    if (!file && env && *env) {
        snprintf(out, len, "%s", env);
        return 0;
    }
    if (!file) {
        const char *sd = getenv("TDM_STATE_DIR");
        snprintf(path, sizeof(path), "%s/admin.token", sd && *sd ? sd : "/var/lib/tandem");
        file = path;
    }
    FILE *f = fopen(file, "r");
    if (!f || !fgets(out, (int)len, f)) {
        fprintf(stderr, "tandemctl: cannot read a token from %s\n", file);
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    out[strcspn(out, "\r\n ")] = '\0';
    return 0;
}

static int request_out(const char *method, const char *url, const char *token, const char *payload,
                       char **ret_body);

static int request(const char *method, const char *url, const char *token, const char *payload)
{
    return request_out(method, url, token, payload, NULL);
}

/* like request(), but the 2xx body goes to *ret_body (caller frees) when non-NULL */
static int request_out(const char *method, const char *url, const char *token, const char *payload,
                       char **ret_body)
{
    CURL *c = curl_easy_init();
    if (!c) {
        fprintf(stderr, "tandemctl: curl_easy_init failed\n");
        return 1;
    }
    body_t b = {NULL, 0};
    char auth[256];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    /* actions answer when they end: a drain or restart may take minutes */
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 900L);
    if (payload)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int rc = 0;
    if (cc != CURLE_OK) {
        fprintf(stderr, "tandemctl: %s %s: %s\n", method, url, curl_easy_strerror(cc));
        rc = 1;
    } else if (status < 200 || status >= 300) {
        json_t *j = json_loads(b.data ? b.data : "", 0, NULL);
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fprintf(stderr, "tandemctl: HTTP %ld: %s\n", status, msg ? msg : (b.data ? b.data : ""));
        json_decref(j);
        rc = 1;
    } else if (ret_body) {
        *ret_body = b.data ? b.data : tdm_strdup("");
        b.data = NULL;
    } else {
        printf("%s\n", b.data ? b.data : "");
    }
    tdm_free(b.data);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}

/* ---- status, actions, alerts, transfers, trace ----------------------------------- */

static int cmd_get(const char *url, const char *token, const char *path, int json_out,
                   void (*render)(json_t *))
{
    char target[4096], *body = NULL;
    snprintf(target, sizeof(target), "%s%s", url, path);
    int rc = request_out("GET", target, token, NULL, &body);
    if (rc != 0)
        return rc;
    json_t *o = json_loads(body, 0, NULL);
    if (json_out || !o || !render)
        printf("%s\n", body);
    else
        render(o);
    json_decref(o);
    tdm_free(body);
    return 0;
}

static void render_status(json_t *o)
{
    size_t i;
    json_t *g;
    printf("%-16s %-10s %-8s %-11s %-5s %-8s %-4s %-24s %s\n", "GROUP", "KIND", "MODE", "STATE",
           "READY", "PID", "CFG", "URL", "CANARY");
    json_array_foreach(json_object_get(o, "groups"), i, g)
    {
        json_t *c = json_object_get(g, "canary");
        printf("%-16s %-10s %-8s %-11s %-5s %-8lld v%-3lld %-24s %lld/%lld mismatches\n",
               json_string_value(json_object_get(g, "name")),
               json_string_value(json_object_get(g, "kind")),
               json_string_value(json_object_get(g, "mode")),
               json_string_value(json_object_get(g, "state")),
               json_is_true(json_object_get(g, "ready")) ? "yes" : "no",
               (long long)json_integer_value(json_object_get(g, "pid")),
               (long long)json_integer_value(json_object_get(g, "config_version")),
               json_string_value(json_object_get(g, "admin_url")),
               (long long)json_integer_value(json_object_get(c, "mismatches")),
               (long long)json_integer_value(json_object_get(c, "checks")));
    }
    printf("\n%-16s %-18s %-4s %-10s %-8s %-7s %-7s %s\n", "GROUP", "INSTANCE", "RANK", "ITER",
           "PATH", "WAITING", "RUNNING", "AGE_MS");
    json_array_foreach(json_object_get(o, "ranks"), i, g)
    {
        printf("%-16s %-18s %-4lld %-10lld %-8s %-7lld %-7lld %lld\n",
               json_string_value(json_object_get(g, "group")),
               json_string_value(json_object_get(g, "instance_id")),
               (long long)json_integer_value(json_object_get(g, "rank")),
               (long long)json_integer_value(json_object_get(g, "iter")),
               json_string_value(json_object_get(g, "path")),
               (long long)json_integer_value(json_object_get(g, "waiting")),
               (long long)json_integer_value(json_object_get(g, "running")),
               (long long)json_integer_value(json_object_get(g, "age_ms")));
    }
    printf("\nopen alerts: %zu\n", json_array_size(json_object_get(o, "alerts")));
    json_array_foreach(json_object_get(o, "alerts"), i, g)
    {
        printf("  #%lld %-16s %-16s %s\n", (long long)json_integer_value(json_object_get(g, "id")),
               json_string_value(json_object_get(g, "kind")),
               json_string_value(json_object_get(g, "group")),
               json_string_value(json_object_get(g, "summary")));
    }
}

static void render_alerts(json_t *o)
{
    size_t i;
    json_t *a;
    printf("%-5s %-16s %-12s %-9s %-18s %-18s %s\n", "ID", "KIND", "GROUP", "STATE", "OPENED_US",
           "RESOLVED_BY", "SUMMARY");
    json_array_foreach(json_object_get(o, "alerts"), i, a)
    {
        const char *by = json_string_value(json_object_get(a, "resolved_by"));
        printf("%-5lld %-16s %-12s %-9s %-18lld %-18s %s\n",
               (long long)json_integer_value(json_object_get(a, "id")),
               json_string_value(json_object_get(a, "kind")),
               json_string_value(json_object_get(a, "group")),
               json_string_value(json_object_get(a, "state")),
               (long long)json_integer_value(json_object_get(a, "opened_us")), by ? by : "-",
               json_string_value(json_object_get(a, "summary")));
    }
}

static void render_rows(json_t *o)
{
    /* transfers / trace: one compact JSON object per line */
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        if (!json_is_array(v))
            continue;
        size_t i;
        json_t *row;
        json_array_foreach(v, i, row)
        {
            char *t = json_dumps(row, JSON_COMPACT | JSON_SORT_KEYS);
            printf("%s\n", t);
            free(t);
        }
    }
}

static int cmd_action(const char *url, const char *token, const char *action, const char *group,
                      json_t *params, int json_out)
{
    char target[4096], *body = NULL;
    CURL *c = curl_easy_init();
    char *esc = curl_easy_escape(c, group, 0);
    snprintf(target, sizeof(target), "%s/api/v1/groups/%s/%s", url, esc, action);
    curl_free(esc);
    curl_easy_cleanup(c);
    char *payload = params ? json_dumps(params, JSON_COMPACT) : NULL;
    int rc = request_out("POST", target, token, payload, &body);
    free(payload);
    if (rc != 0)
        return rc;
    json_t *o = json_loads(body, 0, NULL);
    if (json_out || !o)
        printf("%s\n", body);
    else
        printf("action %lld %s %s: %s (%s)\n",
               (long long)json_integer_value(json_object_get(o, "action_id")), action, group,
               json_string_value(json_object_get(o, "outcome")),
               json_string_value(json_object_get(o, "detail")));
    json_decref(o);
    tdm_free(body);
    return 0;
}

/* KEY=VALUE: integers and decimals as numbers, the rest as strings. */
static json_t *parse_settings(int n, char **kv)
{
    json_t *o = json_object();
    for (int k = 0; k < n; k++) {
        char *eq = strchr(kv[k], '=');
        if (!eq || eq == kv[k] || !eq[1]) {
            fprintf(stderr, "tandemctl: set: expected KEY=VALUE, got \"%s\"\n", kv[k]);
            json_decref(o);
            return NULL;
        }
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - kv[k]), kv[k]);
        char *end;
        double d = strtod(eq + 1, &end);
        json_t *v;
        if (*end == '\0' && strchr(eq + 1, '.'))
            v = json_real(d);
        else if (*end == '\0')
            v = json_integer(strtoll(eq + 1, NULL, 10));
        else
            v = json_string(eq + 1);
        json_object_set_new(o, key, v);
    }
    return o;
}

int main(int argc, char **argv)
{
    const char *url = getenv("TDM_URL");
    const char *token_file = NULL, *token_arg = NULL;
    const char *role = "read";
    int json_out = 0;
    int i = 1;
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tandemctl %s\n", PACKAGE_VERSION);
        return 0;
    }
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--json") == 0) {
            json_out = 1;
            i--;
            continue;
        }
        if (i + 1 >= argc)
            return usage();
        if (strcmp(argv[i], "--url") == 0)
            url = argv[i + 1];
        else if (strcmp(argv[i], "--token-file") == 0)
            token_file = argv[i + 1];
        else if (strcmp(argv[i], "--token") == 0)
            token_arg = argv[i + 1];
        else
            return usage();
    }
    if (!url || !*url)
        url = "http://127.0.0.1:8470";
    if (i >= argc)
        return usage();
    /* --json may also follow the command */
    int n = 0;
    char *rest[64];
    for (int k = i + 1; k < argc && n < 64; k++) {
        if (strcmp(argv[k], "--json") == 0)
            json_out = 1;
        else
            rest[n++] = argv[k];
    }
    const char *cmd = argv[i];
    /* plan is offline: no server, no token */
    if (strcmp(cmd, "plan") == 0)
        return tdm_cp_plan_main(n, rest, json_out, stdout, stderr);
    char token[256], target[4096];
    if (token_arg)
        snprintf(token, sizeof(token), "%s", token_arg);
    else if (read_token(token_file, token, sizeof(token)) != 0)
        return 1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc;
    if (strcmp(cmd, "status") == 0 && n == 0) {
        rc = cmd_get(url, token, "/api/v1/status", json_out, render_status);
    } else if (strcmp(cmd, "alerts") == 0 && n == 0) {
        rc = cmd_get(url, token, "/api/v1/alerts?source=live", json_out, render_alerts);
    } else if (strcmp(cmd, "transfers") == 0 && n <= 1 &&
               (n == 0 || strcmp(rest[0], "--stuck") == 0)) {
        /* stuck: not terminal and older than the TRANSFER_STALL threshold (10 s) */
        rc = cmd_get(url, token,
                     n ? "/api/v1/transfers?state=TRANSFERRING&min_age_ms=10000"
                       : "/api/v1/transfers",
                     json_out, render_rows);
        if (rc == 0 && n)
            rc = cmd_get(url, token, "/api/v1/transfers?state=WAITING_FOR_INPUT&min_age_ms=10000",
                         json_out, render_rows);
    } else if (strcmp(cmd, "trace") == 0 && n == 1) {
        CURL *c = curl_easy_init();
        char *esc = curl_easy_escape(c, rest[0], 0);
        snprintf(target, sizeof(target), "/api/v1/transfers?room=%s&window_s=2678400", esc);
        curl_free(esc);
        curl_easy_cleanup(c);
        rc = cmd_get(url, token, target, json_out, render_rows);
    } else if ((strcmp(cmd, "drain") == 0 || strcmp(cmd, "restart") == 0) && n == 1) {
        rc = cmd_action(url, token, cmd, rest[0], NULL, json_out);
    } else if (strcmp(cmd, "set") == 0 && n >= 2) {
        json_t *p = parse_settings(n - 1, rest + 1);
        rc = p ? cmd_action(url, token, "reconfigure", rest[0], p, json_out) : 2;
        json_decref(p);
    } else if (strcmp(cmd, "token") == 0 && n >= 1) {
        const char *verb = rest[0];
        const char *name = n >= 2 ? rest[1] : NULL;
        for (int k = 2; k < n; k += 2) {
            if (strcmp(rest[k], "--role") != 0 || k + 1 >= n) {
                curl_global_cleanup();
                return usage();
            }
            role = rest[k + 1];
        }
        if (strcmp(verb, "list") == 0 && !name) {
            snprintf(target, sizeof(target), "%s/api/v1/tokens", url);
            rc = request("GET", target, token, NULL);
        } else if (strcmp(verb, "create") == 0 && name) {
            json_t *o = json_pack("{s:s, s:s}", "name", name, "role", role);
            char *payload = json_dumps(o, JSON_COMPACT);
            snprintf(target, sizeof(target), "%s/api/v1/tokens", url);
            rc = request("POST", target, token, payload);
            free(payload);
            json_decref(o);
        } else if (strcmp(verb, "revoke") == 0 && name) {
            CURL *c = curl_easy_init();
            char *esc = curl_easy_escape(c, name, 0);
            snprintf(target, sizeof(target), "%s/api/v1/tokens/%s", url, esc);
            curl_free(esc);
            curl_easy_cleanup(c);
            rc = request("DELETE", target, token, NULL);
        } else {
            rc = usage();
        }
    } else {
        rc = usage();
    }
    curl_global_cleanup();
    return rc;
}
