/*
 * act_http.c — the executor's and watcher's HTTP to workers: one blocking libcurl request with a
 * timeout (these threads exist so that tandemd's loop never waits on a worker), a reader for the
 * workers' Prometheus text, and the wait for /ready after a start.
 */
#include "config.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/httpc.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "controlplane/act/act_int.h"

#define ACT_HTTP_MAX_BODY (8u << 20)

long tdm_act_http(const char *method, const char *url, const char *token, const char *body,
                  long timeout_ms, char **ret_body)
{
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    tdm_httpc_body_t b = {NULL, 0, ACT_HTTP_MAX_BODY};
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[512];
    if (token && *token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 2000 ? timeout_ms : 2000);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, tdm_httpc_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (body)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    else if (strcmp(method, "POST") == 0)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    long status = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (ret_body && status >= 0)
        *ret_body = b.data ? b.data : tdm_strdup("");
    else
        tdm_free(b.data);
    return status;
}

double tdm_act_metric(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, name, n) == 0 && (p[n] == ' ' || p[n] == '\t'))
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

int tdm_act_wait_ready(tdm_cp_act_t *a, const char *admin_url, double timeout_s)
{
    char url[512];
    snprintf(url, sizeof(url), "%s/ready", admin_url);
    uint64_t deadline = tdm_time_mono_us() + (uint64_t)(timeout_s * 1e6);
    while (tdm_time_mono_us() < deadline) {
        if (tdm_act_http("GET", url, NULL, NULL, 1000, NULL) == 200)
            return 1;
        if (tdm_act_sleep(a, 200))
            return 0;
    }
    return 0;
}
