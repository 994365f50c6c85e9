/*
 * detect_webhook.c — `--alert-webhook URL`: alert opens and resolves POSTed as JSON from a thread
 * of its own (alert.h), so tandemd's loop never waits on someone else's HTTP server.
 *
 * The loop only copies the body into a bounded FIFO under a mutex; the thread takes one at a time
 * and POSTs it with libcurl (one easy handle, reused: keep-alive) under a total timeout. A full
 * queue drops its oldest post (the newest state matters most) and counts it. Each post is tried
 * once: the alerts table is the durable record, the webhook a notification.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "controlplane/detect/alert.h"

struct tdm_cp_webhook {
    char *url;
    long timeout_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char **q; /* FIFO of bodies */
    size_t cap, head, n;
    int stop;
    tdm_cp_webhook_stats_t st;
};

static size_t discard(char *p, size_t sz, size_t n, void *ctx)
{
    (void)p;
    (void)ctx;
    return sz * n;
}

static void *webhook_main(void *arg)
{
    tdm_cp_webhook_t *w = arg;
    CURL *c = curl_easy_init();
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (c) {
        curl_easy_setopt(c, CURLOPT_URL, w->url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, w->timeout_ms);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    }
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->n == 0)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop)
            break;
        char *body = w->q[w->head];
        w->head = (w->head + 1) % w->cap;
        w->n--;
        pthread_mutex_unlock(&w->mu);
        long code = 0;
        CURLcode rc = CURLE_FAILED_INIT;
        if (c) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
            rc = curl_easy_perform(c);
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        }
        int okay = rc == CURLE_OK && code >= 200 && code < 300;
        if (!okay)
            tdm_warn(TDM_SUB_CP, "msg=\"alert webhook failed\" url=\"%s\" err=\"%s\" status=%ld",
                     w->url, curl_easy_strerror(rc), code);
        tdm_free(body);
        pthread_mutex_lock(&w->mu);
        if (okay)
            w->st.sent++;
        else
            w->st.failed++;
    }
    pthread_mutex_unlock(&w->mu);
    curl_slist_free_all(hdr);
    if (c)
        curl_easy_cleanup(c);
    return NULL;
}

tdm_status_t tdm_cp_webhook_start(const char *url, size_t queue_cap, long timeout_ms,
                                  tdm_cp_webhook_t **ret, char *err, size_t err_len)
{
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        snprintf(err, err_len, "--alert-webhook %s: expected an http:// or https:// URL",
                 url ? url : "(null)");
        return TDM_ERR_INVAL;
    }
    if (!queue_cap || timeout_ms <= 0) {
        snprintf(err, err_len, "alert webhook: queue capacity and timeout must be positive");
        return TDM_ERR_INVAL;
    }
    tdm_cp_webhook_t *w = tdm_calloc(1, sizeof(*w));
    w->url = tdm_strdup(url);
    w->timeout_ms = timeout_ms;
    w->cap = queue_cap;
    w->q = tdm_calloc(queue_cap, sizeof(*w->q));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int rc = pthread_create(&w->thread, NULL, webhook_main, w);
    if (rc != 0) {
        snprintf(err, err_len, "alert webhook: pthread_create: %s", strerror(rc));
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        tdm_free(w->q);
        tdm_free(w->url);
        tdm_free(w);
        return TDM_ERR_IO;
    }
    *ret = w;
    return TDM_OK;
}

void tdm_cp_webhook_stop(tdm_cp_webhook_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    for (size_t i = 0; i < w->n; i++)
        tdm_free(w->q[(w->head + i) % w->cap]);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    tdm_free(w->q);
    tdm_free(w->url);
    tdm_free(w);
}

void tdm_cp_webhook_post(tdm_cp_webhook_t *w, const char *body)
{
    char *copy = tdm_strdup(body);
    pthread_mutex_lock(&w->mu);
    if (w->n == w->cap) {
        tdm_free(w->q[w->head]);
        w->head = (w->head + 1) % w->cap;
        w->n--;
        w->st.dropped++;
    }
    w->q[(w->head + w->n) % w->cap] = copy;
    w->n++;
    w->st.queued++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void tdm_cp_webhook_hook(void *ctx, const tdm_cp_alert_t *a, tdm_cp_alert_event_t ev)
{
    json_t *o = json_pack("{s:s,s:o}", "event", ev == TDM_CP_ALERT_EV_OPEN ? "open" : "resolve",
                          "alert", tdm_cp_alert_to_json(a));
    char *txt = json_dumps(o, JSON_COMPACT);
    if (txt)
        tdm_cp_webhook_post(ctx, txt);
    free(txt);
    json_decref(o);
}

void tdm_cp_webhook_stats(tdm_cp_webhook_t *w, tdm_cp_webhook_stats_t *ret)
{
    pthread_mutex_lock(&w->mu);
    *ret = w->st;
    pthread_mutex_unlock(&w->mu);
}
