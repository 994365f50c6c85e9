/*
 * access.c — the worker's request log and its HTTP counters by status code, from one h2o logger
 * that runs when a response ends (streams included): one line per request with the method, path,
 * status, tokens, TTFT, duration and request id (docs/contracts.md "Logs"). The request id is the
 * client's X-Request-Id when it sent one (at most 64 printable bytes), else one we make; either
 * way it is echoed in the response's X-Request-Id.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <tdm/log.h>
#include <tdm/prom.h>
#include <tdm/time.h>

#include "dataplane/api/api_int.h"

#define ENV_RID "tdm.rid"
#define ENV_USAGE "tdm.usage"

static int rid_ok(const char *s, size_t n)
{
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == '"' || s[i] == '\\')
            return 0;
    return 1;
}

void tdm_api_access_begin(tdm_api_t *a, h2o_req_t *req)
{
    h2o_iovec_t rid = {NULL, 0};
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
    if (i >= 0 && rid_ok(req->headers.entries[i].value.base, req->headers.entries[i].value.len)) {
        rid = req->headers.entries[i].value;
    } else {
        char buf[40];
        int n =
            snprintf(buf, sizeof(buf), "%08x-%" PRIx64, (unsigned)a->started_us, ++a->request_seq);
        rid = h2o_strdup(&req->pool, buf, (size_t)n);
    }
    *h2o_req_getenv(req, H2O_STRLIT(ENV_RID), 1) = rid;
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL,
                          rid.base, rid.len);
}

void tdm_api_access_usage(h2o_req_t *req, uint32_t prompt_tokens, uint32_t completion_tokens,
                          uint64_t ttft_us)
{
    char buf[96];
    int n = snprintf(buf, sizeof(buf), "prompt_tokens=%u completion_tokens=%u ttft_ms=%.1f",
                     prompt_tokens, completion_tokens, (double)ttft_us / 1e3);
    *h2o_req_getenv(req, H2O_STRLIT(ENV_USAGE), 1) = h2o_strdup(&req->pool, buf, (size_t)n);
}

static void log_access(h2o_logger_t *self, h2o_req_t *req)
{
    tdm_api_t *a = *(tdm_api_t **)(self + 1);
    int status = req->res.status;
    if (status >= 100 && status < TDM_API_STATUS_MAX)
        a->http_by_code[status]++;
    /* probes and scrapes are not requests anyone asked us to log */
    h2o_iovec_t p = req->path_normalized;
    if (status < 400 && (h2o_memis(p.base, p.len, H2O_STRLIT("/health")) ||
                         h2o_memis(p.base, p.len, H2O_STRLIT("/ready")) ||
                         h2o_memis(p.base, p.len, H2O_STRLIT("/metrics"))))
        return;
    h2o_iovec_t *rid = h2o_req_getenv(req, H2O_STRLIT(ENV_RID), 0);
    h2o_iovec_t *usage = h2o_req_getenv(req, H2O_STRLIT(ENV_USAGE), 0);
    double ms = 0;
    if (!h2o_timeval_is_null(&req->timestamps.request_begin_at)) {
        struct timeval end = req->timestamps.response_end_at;
        if (h2o_timeval_is_null(&end))
            gettimeofday(&end, NULL);
        ms = (double)h2o_timeval_subtract(&req->timestamps.request_begin_at, &end) / 1e3;
    }
    tdm_info(TDM_SUB_API,
             "msg=\"request\" method=%.*s path=\"%.*s\" status=%d duration_ms=%.1f bytes=%zu "
             "request_id=%.*s%s%.*s",
             (int)(req->method.len > 16 ? 16 : req->method.len), req->method.base,
             (int)(p.len > 200 ? 200 : p.len), p.base, status, ms, req->bytes_sent,
             rid ? (int)rid->len : 1, rid ? rid->base : "-", usage ? " " : "",
             usage ? (int)usage->len : 0, usage ? usage->base : "");
}

void tdm_api_access_register(tdm_api_t *a, h2o_pathconf_t *pc)
{
    h2o_logger_t *lg = h2o_create_logger(pc, sizeof(*lg) + sizeof(a));
    *(tdm_api_t **)(lg + 1) = a;
    lg->log_access = log_access;
}

void tdm_api_access_metrics(tdm_api_t *a, FILE *f)
{
    tdm_prom_head(f, "tandem_http_responses_total", "HTTP responses by status code.", "counter");
    int any = 0;
    for (int c = 100; c < TDM_API_STATUS_MAX; c++) {
        if (!a->http_by_code[c])
            continue;
        fprintf(f, "tandem_http_responses_total{code=\"%d\"} %" PRIu64 "\n", c, a->http_by_code[c]);
        any = 1;
    }
    if (!any) /* a series from the start, so rate() sees the first response */
        fprintf(f, "tandem_http_responses_total{code=\"200\"} 0\n");
}
