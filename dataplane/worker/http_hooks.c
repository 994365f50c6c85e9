/*
 * http_hooks.c — the worker's HTTP layer (hooks.h): api.serve builds the server's options from
 * the assembled worker (scheduler, progress page, the shared area's fault table and per-rank
 * resident weight bytes), binds and writes the ready file on the caller's thread (so a bind
 * failure fails the start, the reason — address, port, errno — in the caller's buffer), then runs
 * the h2o loop on a thread of its own; api.stop stops and
 * frees it. Its events and serving statistics reach the reporter through the report hooks it was
 * given. Rank 0 is the only caller.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <tdm/chat.h>
#include <tdm/log.h>
#include <tdm/mem.h>

#include "dataplane/api/api.h"
#include "dataplane/worker/hooks.h"

struct tdm_worker_http {
    tdm_worker_report_hooks_t report;
    tdm_api_t *srv;
    pthread_t th;
    tdm_chat_template_t *chat;
    tdm_worker_t *w;
};

tdm_worker_http_t *tdm_worker_http_new(const tdm_worker_report_hooks_t *report)
{
    tdm_worker_http_t *h = tdm_calloc(1, sizeof(*h));
    if (report)
        h->report = *report;
    return h;
}

void tdm_worker_http_free(tdm_worker_http_t *h)
{
    tdm_free(h);
}

/* The reporter's serving statistics (rank 0): the server's (the HiCache tier's corruption events
 * among them), plus the transfer engine's corruption counters (KV checksum and aux mismatches,
 * rooms whose ABORT_ACK timed out). */
static void sample_stats(void *ctx, tdm_tm_sample_t *s)
{
    tdm_worker_http_t *h = ctx;
    tdm_api_server_sample_stats(h->srv, s);
    s->corruption_total += tdm_worker_pd_corruption(h->w);
}

/* No reporter (no --control-plane): the event is dropped, as the reporter's absence means. */
static void post_event(void *ctx, const char *type, json_t *data)
{
    tdm_worker_http_t *h = ctx;
    if (!h->report.event) {
        json_decref(data);
        return;
    }
    tdm_status_t st = h->report.event(h->report.ctx, type, NULL, NULL, NULL, NULL, data);
    if (st != TDM_OK && st != TDM_ERR_STATE)
        tdm_warn(TDM_SUB_API, "msg=\"telemetry event refused\" type=%s", type);
}

static void set_stats(tdm_worker_http_t *h, tdm_worker_stats_fn fn)
{
    if (h->report.set_stats)
        h->report.set_stats(h->report.ctx, fn, fn ? h : NULL);
}

static tdm_status_t arm_fault(void *ctx, const tdm_api_fault_t *f, char *err, size_t err_len)
{
    tdm_worker_shared_t *sh = ctx;
    tdm_fault_point_t p;
    if (tdm_fault_point_parse(f->name, &p) != TDM_OK) {
        snprintf(err, err_len, "unknown fault point '%s'", f->name);
        return TDM_ERR_INVAL;
    }
    if (f->disarm) {
        tdm_fault_disarm(&sh->faults, p);
        return TDM_OK;
    }
    if (f->duration_ms > UINT32_MAX) {
        snprintf(err, err_len, "duration_ms too large");
        return TDM_ERR_RANGE;
    }
    tdm_fault_spec_t spec = {.rank = f->rank,
                             .count = f->count,
                             .after_iter = f->after_iter,
                             .duration_ms = (uint32_t)f->duration_ms};
    for (int t = 0; f->thread[0] && t < TDM_HB_MAX; t++)
        if (!strcmp(tdm_hb_thread_name((tdm_hb_thread_t)t), f->thread))
            spec.thread = (uint32_t)t;
    return tdm_fault_arm(&sh->faults, sh->n_ranks, p, &spec, err, err_len);
}

static uint64_t weight_bytes(void *ctx, uint16_t rank)
{
    tdm_worker_shared_t *sh = ctx;
    return rank < sh->n_ranks ? atomic_load(&sh->resident_weight_bytes[rank]) : 0;
}

static int pd_ready(void *ctx, char *why, size_t why_len)
{
    why[0] = '\0';
    return tdm_worker_pd_ready(ctx, why, why_len);
}

static void pd_metrics(void *ctx, FILE *f)
{
    tdm_worker_pd_metrics(ctx, f);
}

static void *http_thread(void *arg)
{
    tdm_api_server_run(arg);
    return NULL;
}

static tdm_status_t serve(void *ctx, tdm_worker_t *w, char *why, size_t why_len)
{
    tdm_worker_http_t *h = ctx;
    char err[512] = "";
    if (h->srv) {
        snprintf(why, why_len, "already started");
        return TDM_ERR_STATE;
    }
    tdm_worker_shared_t *sh = tdm_worker_shared(w);
    tdm_progress_page_t *page = tdm_worker_progress(w);
    const tdm_worker_config_t *cfg = tdm_worker_config(w);
    const tdm_model_config_t *mc = tdm_worker_model_config(w);
    /* no chat template (or one that does not parse): chat answers 400, completions still work;
     * an explicit --chat-template that cannot be used stops the worker instead */
    tdm_status_t cst =
        tdm_chat_template_open(cfg->model_path, cfg->chat_template, &h->chat, err, sizeof(err));
    if (cst != TDM_OK && cfg->chat_template[0]) {
        snprintf(why, why_len, "--chat-template unusable: %s", err);
        return cst;
    }
    if (cst != TDM_OK) {
        tdm_warn(TDM_SUB_API, "msg=\"no chat template: /v1/chat/completions disabled\" err=\"%s\"",
                 err);
        h->chat = NULL;
    }
    tdm_api_opts_t o = {
        .cfg = tdm_worker_config(w),
        .sched = tdm_worker_sched(w),
        .page = page,
        .rank = (uint16_t)tdm_worker_rank(w),
        .bootstrap_port = tdm_worker_bootstrap_port(w),
        .arm_fault = sh ? arm_fault : NULL,
        .fault_ctx = sh,
        .weight_bytes = sh ? weight_bytes : NULL,
        .weight_ctx = sh,
        .tok = tdm_worker_tokenizer(w),
        .chat = h->chat,
        .max_context = mc ? mc->max_position_embeddings : 0,
        .event = post_event,
        .event_ctx = h,
        .pd_ready = tdm_worker_xfer(w) ? pd_ready : NULL,
        .pd_metrics = tdm_worker_xfer(w) ? pd_metrics : NULL,
        .pd_ctx = w,
    };
    tdm_status_t st = tdm_api_server_init(&o, &h->srv, err, sizeof(err));
    if (st != TDM_OK) {
        snprintf(why, why_len, "%s", err);
        tdm_chat_template_free(h->chat);
        h->chat = NULL;
        return st;
    }
    /* worker.h: this hook runs once the scheduler accepts requests — the model is loaded */
    atomic_store(&page->loaded, 1);
    h->w = w;
    set_stats(h, sample_stats);
    if (pthread_create(&h->th, NULL, http_thread, h->srv) != 0) {
        set_stats(h, NULL);
        tdm_api_server_free(h->srv);
        h->srv = NULL;
        tdm_chat_template_free(h->chat);
        h->chat = NULL;
        snprintf(why, why_len, "cannot start the HTTP thread");
        return TDM_ERR_NOMEM;
    }
    return TDM_OK;
}

static void stop(void *ctx, tdm_worker_t *w)
{
    tdm_worker_http_t *h = ctx;
    (void)w;
    if (!h->srv)
        return;
    set_stats(h, NULL);
    tdm_api_server_stop(h->srv);
    pthread_join(h->th, NULL);
    tdm_api_server_free(h->srv);
    h->srv = NULL;
    tdm_chat_template_free(h->chat);
    h->chat = NULL;
}

void tdm_worker_http_hooks(tdm_worker_http_t *h, tdm_worker_hooks_t *hooks)
{
    hooks->api = (tdm_worker_api_hooks_t){.ctx = h, .serve = serve, .stop = stop};
}
