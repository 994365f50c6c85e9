/*
 * tandemctl.c — the operator's command line for tandemd's REST API (libcurl).
 *
 *   tandemctl [--url URL] [--token-file FILE] token create NAME [--role read|admin]
 *   tandemctl [--url URL] [--token-file FILE] token list
 *   tandemctl [--url URL] [--token-file FILE] token revoke NAME
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
                    "       tandemctl [--url URL] [--token-file FILE] token revoke NAME\n");
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

static int request(const char *method, const char *url, const char *token, const char *payload)
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
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
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
    } else {
        printf("%s\n", b.data ? b.data : "");
    }
    tdm_free(b.data);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}

int main(int argc, char **argv)
{
    const char *url = getenv("TDM_URL");
    const char *token_file = NULL;
    const char *role = "read";
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (i + 1 >= argc)
            return usage();
        if (strcmp(argv[i], "--url") == 0)
            url = argv[i + 1];
        else if (strcmp(argv[i], "--token-file") == 0)
            token_file = argv[i + 1];
        else
            return usage();
    }
    if (!url || !*url)
        url = "http://127.0.0.1:8470";
    if (argc - i < 2 || strcmp(argv[i], "token") != 0)
        return usage();
    const char *verb = argv[i + 1];
    const char *name = argc - i >= 3 ? argv[i + 2] : NULL;
    for (int k = i + 3; k < argc; k += 2) {
        if (strcmp(argv[k], "--role") != 0 || k + 1 >= argc)
            return usage();
        role = argv[k + 1];
    }
    char token[256], target[4096];
    if (read_token(token_file, token, sizeof(token)) != 0)
        return 1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc;
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
    curl_global_cleanup();
    return rc;
}
