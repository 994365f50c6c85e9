/*
 * handlers.c — /health, /ready, /metrics and /admin/.... None of them waits on the scheduler or the
 * loop that writes the progress page: /health and /ready compute their verdict from the page on
 * every request (I8), /metrics reads the scheduler's lock-protected counters and the page.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/json.h>
#include <tdm/log.h>
#include <tdm/prom.h>
#include <tdm/time.h>

#include "dataplane/api/api_int.h"

/* Control-thread heartbeats are published every ~100-200 ms; stale after this long. */
#define HB_TIMEOUT_MIN_US 2000000u

static int healthy(tdm_api_t *a, char *why, size_t why_len)
{
    uint64_t pt = atomic_load(&a->health_timeout_us);
    uint64_t hb = pt > HB_TIMEOUT_MIN_US ? pt : HB_TIMEOUT_MIN_US;
    return tdm_progress_healthy(a->o.page, tdm_time_mono_us(), pt, hb, why, why_len);
}

static void send_verdict(tdm_api_t *a, h2o_req_t *req, int ok, const char *code, const char *why)
{
    if (ok) {
        tdm_api_send_text(req, 200, "text/plain; charset=utf-8", "ok\n", 3);
        return;
    }
    tdm_api_send_error(a, req, 503, code, "unavailable_error", "%s", why);
}

void tdm_api_h_health(tdm_api_t *a, h2o_req_t *req)
{
    char why[256];
    int ok = healthy(a, why, sizeof(why));
    send_verdict(a, req, ok, "unhealthy", why);
}

void tdm_api_h_ready(tdm_api_t *a, h2o_req_t *req)
{
    char why[256];
    tdm_progress_page_t *p = a->o.page;
    if (!atomic_load(&p->loaded)) {
        send_verdict(a, req, 0, "not_loaded", "the model is not loaded yet");
        return;
    }
    if (atomic_load(&p->draining)) {
        send_verdict(a, req, 0, "draining", "the worker is draining");
        return;
    }
    if (a->o.pd_ready && !a->o.pd_ready(a->o.pd_ctx, why, sizeof(why))) {
        send_verdict(a, req, 0, "not_registered", why);
        return;
    }
    int ok = healthy(a, why, sizeof(why));
    send_verdict(a, req, ok, "unhealthy", why);
}

/* ---- /metrics ------------------------------------------------------------------------------- */

static void rank_series(FILE *f, tdm_api_t *a)
{
    tdm_progress_page_t *p = a->o.page;
    uint64_t now = tdm_time_mono_us();
    tdm_rank_record_t rec[TDM_PROGRESS_MAX_RANKS];
    for (uint16_t r = 0; r < p->n_ranks; r++)
        tdm_progress_read(&p->slot[r], &rec[r]);

    tdm_prom_head(f, "tandem_rank_iter", "Iterations completed by each rank (progress page)",
                  "gauge");
    for (uint16_t r = 0; r < p->n_ranks; r++)
        fprintf(f, "tandem_rank_iter{rank=\"%u\"} %llu\n", r, (unsigned long long)rec[r].iter);
    tdm_prom_head(f, "tandem_rank_coll_seq", "Collectives completed by each rank", "gauge");
    for (uint16_t r = 0; r < p->n_ranks; r++)
        fprintf(f, "tandem_rank_coll_seq{rank=\"%u\"} %llu\n", r,
                (unsigned long long)rec[r].coll_seq);
    tdm_prom_head(f, "tandem_rank_progress_age_seconds", "Time since each rank's last iteration",
                  "gauge");
    for (uint16_t r = 0; r < p->n_ranks; r++) {
        double age = rec[r].progress_us && now > rec[r].progress_us
                         ? (double)(now - rec[r].progress_us) / 1e6
                         : 0.0;
        fprintf(f, "tandem_rank_progress_age_seconds{rank=\"%u\"} %.6f\n", r, age);
    }
    if (a->o.weight_bytes) {
        tdm_prom_head(f, "tandem_resident_weight_bytes", "Weight bytes resident in each rank",
                      "gauge");
        for (uint16_t r = 0; r < p->n_ranks; r++) {
            uint64_t b = a->o.weight_bytes(a->o.weight_ctx, r);
            if (b)
                fprintf(f, "tandem_resident_weight_bytes{rank=\"%u\"} %llu\n", r,
                        (unsigned long long)b);
        }
    }
}

/* HiCache (include/tdm/hicache.h): the host tier's occupancy and traffic, and the CORRUPTION
 * evidence it counts (verify failures, gate bypasses, poison reads). */
static void hicache_series(FILE *f, const tdm_sched_stats_t *s)
{
    const tdm_hicache_stats_t *h = &s->hicache;
    tdm_prom_gauge(f, "tandem_hicache_enabled", "1 when the host KV tier is on", s->hicache_on);
    if (!s->hicache_on)
        return;
    tdm_prom_gauge(f, "tandem_hicache_host_pages_used", "Host-tier KV pages holding a page",
                   h->host_pages_used);
    tdm_prom_gauge(f, "tandem_hicache_host_pages_capacity", "Host-tier KV pages",
                   h->host_pages_total);
    tdm_prom_gauge(f, "tandem_hicache_host_bytes", "Host-tier pool bytes", (double)h->host_bytes);
    tdm_prom_gauge(f, "tandem_hicache_host_pages_pinned",
                   "Host-tier pages held by a load not yet retired", h->host_pages_pinned);
    tdm_prom_gauge(f, "tandem_hicache_loads_in_flight", "Host-tier loads not yet retired",
                   h->loads_in_flight);
    tdm_prom_counter(f, "tandem_hicache_stores_total", "Device pages copied to the host tier",
                     h->stores);
    tdm_prom_counter(f, "tandem_hicache_hits_total", "Prefix pages found in the host tier",
                     h->hits);
    tdm_prom_counter(f, "tandem_hicache_hit_tokens_total",
                     "Prompt tokens loaded from the host tier", s->host_hit_tokens);
    tdm_prom_counter(f, "tandem_hicache_loads_total", "Host-to-device loads", h->loads);
    tdm_prom_counter(f, "tandem_hicache_load_bytes_total", "Bytes loaded from the host tier",
                     h->load_bytes);
    tdm_prom_counter(f, "tandem_hicache_verified_total",
                     "Loads checked against the source checksums", h->verified);
    tdm_prom_counter(f, "tandem_hicache_verify_failures_total",
                     "Loads whose device pages mismatched (CORRUPTION)", h->verify_failures);
    tdm_prom_counter(f, "tandem_hicache_gate_bypasses_total",
                     "Layer reads that did not wait for their load (CORRUPTION)", h->bypasses);
    tdm_prom_counter(f, "tandem_hicache_poison_reads_total",
                     "Attention reads of poisoned (not yet loaded) KV (CORRUPTION)",
                     h->poison_reads);
    tdm_prom_counter(f, "tandem_hicache_gate_waits_total",
                     "Layer reads that waited for a load in flight", h->gate_waits);
    tdm_prom_counter(f, "tandem_hicache_corruption_events_total",
                     "CORRUPTION events raised on the host-tier path", s->corruption_events);
}

/* Info metrics (value 1): what this worker is, for joins on its labels (group_left). */

/* One sample in seconds from microseconds (6 decimals: exact); label: `kind="..."` or NULL. */
static void sample_s(FILE *f, const char *name, const char *kind, uint64_t us)
{
    if (kind)
        fprintf(f, "%s{kind=\"%s\"}", name, kind);
    else
        fputs(name, f);
    fprintf(f, " %llu.%06llu\n", (unsigned long long)(us / 1000000u),
            (unsigned long long)(us % 1000000u));
}

/* A counter in seconds from microseconds. */
static void counter_s(FILE *f, const char *name, const char *help, uint64_t us)
{
    tdm_prom_head(f, name, help, "counter");
    sample_s(f, name, NULL, us);
}

static void build_info(FILE *f, tdm_api_t *a)
{
    const tdm_worker_config_t *c = a->o.cfg;
    tdm_prom_build_info(f, "tandem-worker");
    tdm_prom_head(f, "tandem_worker_info", "The worker's group, role, model and settings.",
                  "gauge");
    fprintf(f, "tandem_worker_info{group=\"");
    tdm_prom_label(f, c->group);
    fprintf(f, "\",role=\"%s\",model=\"", c->disaggregation_mode);
    tdm_prom_label(f, a->oai.model_name ? a->oai.model_name : "");
    fprintf(f, "\",tp_size=\"%lld\",kv_cache_dtype=\"%s\",overlap=\"%s\",device=\"%s\"} 1\n",
            (long long)c->tp_size, c->kv_cache_dtype, c->disable_overlap_schedule ? "off" : "on",
            c->device);
}

void tdm_api_h_metrics(tdm_api_t *a, h2o_req_t *req)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        tdm_api_send_status(a, req, TDM_ERR_NOMEM, "cannot render metrics");
        return;
    }
    tdm_sched_stats_t s;
    tdm_sched_stats(a->o.sched, &s);
    char why[256];
    int ok = healthy(a, why, sizeof(why));

    tdm_prom_gauge(f, "tandem_up", "1 while the worker's HTTP loop runs", 1);
    build_info(f, a);
    tdm_prom_gauge(f, "tandem_healthy", "The /health verdict (I8) at scrape time", ok);
    tdm_prom_gauge(f, "tandem_draining", "1 after a drain was requested", s.draining);
    tdm_prom_gauge(f, "tandem_drained", "1 when a drain has completed", s.drained);
    tdm_prom_gauge(f, "tandem_requests_waiting", "Requests queued for admission", s.waiting);
    tdm_prom_gauge(f, "tandem_requests_running", "Requests in the running batch", s.running);
    tdm_prom_gauge(f, "tandem_kv_pages_free", "KV pages free", s.pages_free);
    tdm_prom_gauge(f, "tandem_kv_pages_capacity", "KV pages in the pool", s.pages_total);
    tdm_prom_gauge(f, "tandem_kv_pages_cached", "KV pages held only by the prefix cache",
                   s.pages_cached);
    tdm_prom_counter(f, "tandem_sched_iterations_total", "Scheduler iterations (plans)", s.iter);
    tdm_prom_counter(f, "tandem_generated_tokens_total",
                     "Tokens generated (rate() gives decode tokens/s)", s.tokens_generated);
    tdm_prom_counter(f, "tandem_prefill_tokens_total",
                     "Prompt tokens computed (rate() gives prefill tokens/s)", s.tokens_prefilled);
    tdm_prom_counter(f, "tandem_prompt_tokens_cached_total",
                     "Prompt tokens served from the prefix cache", s.prompt_tokens_cached);
    tdm_prom_counter(f, "tandem_requests_finished_total", "Requests finished", s.requests_finished);
    tdm_prom_counter(f, "tandem_requests_aborted_total",
                     "Requests aborted (client gone, admin, drain)", s.requests_aborted);
    tdm_prom_counter(f, "tandem_requests_failed_total", "Requests ended with an error",
                     s.requests_failed);
    tdm_prom_counter(
        f, "tandem_sched_aborted_rows_dropped_total",
        "Rows of aborted requests dropped from a plan built before the abort (overlap)",
        s.aborted_rows_dropped);
    tdm_prom_counter(f, "tandem_sched_decode_iterations_total",
                     "Batch iterations of decode rows only", s.iters_decode);
    tdm_prom_counter(f, "tandem_sched_mixed_iterations_total",
                     "Batch iterations with prefill chunks (alone or beside decode rows)",
                     s.iters_mixed);
    tdm_prom_counter(f, "tandem_sched_decode_rows_total",
                     "One-token rows computed (decode rows, and those beside prefill chunks)",
                     s.ctx_rows);
    tdm_prom_counter(f, "tandem_sched_decode_row_positions_total",
                     "KV positions those rows attended (over the rows: the mean context)",
                     s.ctx_positions);
    tdm_prom_counter(f, "tandem_sched_decode_row_iterations_total",
                     "Batch iterations with at least one one-token row", s.ctx_iters);
    tdm_prom_counter(f, "tandem_sched_decode_longest_row_positions_total",
                     "Positions the longest one-token row of each such iteration attended (over "
                     "those iterations: the mean longest context)",
                     s.ctx_longest);
    counter_s(f, "tandem_sched_build_seconds_total", "Scheduler loop time spent building plans",
              s.build_us);
    tdm_prom_head(f, "tandem_sched_exec_wait_seconds_total",
                  "Scheduler loop time spent waiting for the executor (the forward), by the kind "
                  "of the iteration waited for",
                  "counter");
    static const char *const wait_kind[3] = {"idle", "decode", "mixed"};
    for (int k = 0; k < 3; k++)
        sample_s(f, "tandem_sched_exec_wait_seconds_total", wait_kind[k], s.exec_wait_us[k]);
    counter_s(f, "tandem_sched_process_seconds_total",
              "Scheduler loop time spent processing results (tokens to the clients)", s.process_us);
    tdm_prom_counter(f, "tandem_retractions_total",
                     "Running requests retracted for lack of KV pages", s.retractions);
    tdm_prom_counter(f, "tandem_http_requests_total", "HTTP requests received", a->http_requests);
    tdm_prom_counter(f, "tandem_http_errors_total", "HTTP requests answered with an error",
                     a->http_errors);
    tdm_api_access_metrics(a, f);
    tdm_prom_counter(f, "tandem_generate_requests_total", "POST /generate requests",
                     a->generate_requests);
    tdm_prom_counter(f, "tandem_completions_requests_total", "POST /v1/completions requests",
                     a->oai_requests[TDM_OAI_COMPLETIONS]);
    tdm_prom_counter(f, "tandem_chat_requests_total", "POST /v1/chat/completions requests",
                     a->oai_requests[TDM_OAI_CHAT]);
    tdm_prom_counter(f, "tandem_dsml_responses_total", "Chat responses parsed for tool calls",
                     a->dsml_responses);
    tdm_prom_counter(f, "tandem_dsml_leak_total",
                     "Chat responses with malformed tool-call markup of the active format",
                     a->dsml_leaks);
    tdm_prom_counter(f, "tandem_client_disconnects_total",
                     "Requests whose client went away before the end", a->client_disconnects);
    tdm_api_hist_write(f, "tandem_ttft_seconds", "Time to first token", &a->ttft);
    tdm_api_hist_write(f, "tandem_itl_seconds", "Inter-token latency", &a->itl);
    tdm_api_hist_write(f, "tandem_e2e_request_latency_seconds",
                       "Generation requests from submit to their last token", &a->e2e);
    tdm_api_hist_write(f, "tandem_queue_time_seconds",
                       "Generation requests from submit to admission to the batch", &a->queue);
    rank_series(f, a);
    hicache_series(f, &s);
    if (a->o.pd_metrics)
        a->o.pd_metrics(a->o.pd_ctx, f);
    if (fclose(f) != 0 || !text) {
        free(text);
        tdm_api_send_status(a, req, TDM_ERR_NOMEM, "cannot render metrics");
        return;
    }
    char *body = h2o_mem_alloc_pool(&req->pool, len + 1);
    memcpy(body, text, len);
    free(text);
    tdm_api_send_text(req, 200, "text/plain; version=0.0.4; charset=utf-8", body, len);
}

/* ---- /admin ---------------------------------------------------------------------------------
 */

static void send_json_obj(tdm_api_t *a, h2o_req_t *req, int status, json_t *o)
{
    char *text = tdm_json_dumps(o);
    json_decref(o);
    if (!text) {
        tdm_api_send_status(a, req, TDM_ERR_NOMEM, "cannot encode the reply");
        return;
    }
    char *body = h2o_mem_alloc_pool(&req->pool, strlen(text) + 1);
    memcpy(body, text, strlen(text) + 1);
    free(text);
    tdm_api_send_json(req, status, body, strlen(body));
}

void tdm_api_h_drain(tdm_api_t *a, h2o_req_t *req)
{
    atomic_store(&a->o.page->draining, 1);
    tdm_sched_drain(a->o.sched);
    tdm_sched_stats_t s;
    tdm_sched_stats(a->o.sched, &s);
    tdm_info(TDM_SUB_API, "msg=\"drain requested\" waiting=%u running=%u", s.waiting, s.running);
    send_json_obj(a, req, 200,
                  json_pack("{s:b,s:b,s:i,s:i,s:i,s:i}", "draining", 1, "drained", s.drained,
                            "waiting", (json_int_t)s.waiting, "running", (json_int_t)s.running,
                            "pages_free", (json_int_t)s.pages_free, "pages_total",
                            (json_int_t)s.pages_total));
}

/* The undrain: admitting again, /ready answers 200 again once healthy. */
void tdm_api_h_resume(tdm_api_t *a, h2o_req_t *req)
{
    tdm_sched_resume(a->o.sched);
    atomic_store(&a->o.page->draining, 0);
    tdm_sched_stats_t s;
    tdm_sched_stats(a->o.sched, &s);
    tdm_info(TDM_SUB_API, "msg=\"drain lifted\" waiting=%u running=%u", s.waiting, s.running);
    send_json_obj(a, req, 200,
                  json_pack("{s:b,s:i,s:i}", "draining", 0, "waiting", (json_int_t)s.waiting,
                            "running", (json_int_t)s.running));
}

/* {"program","params":{name:{"value"}}} straight from the config struct, SECRETs masked. */
static json_t *config_from_cfg(const tdm_worker_config_t *cfg)
{
    json_t *params = json_object();
    const tdm_param_table_t *t = &tdm_worker_config_table;
    for (size_t i = 0; i < t->ndefs; i++) {
        const tdm_param_def_t *d = &t->defs[i];
        const char *base = (const char *)cfg + d->offset;
        json_t *v;
        switch (d->type) {
        case TDM_PARAM_BOOL:
            v = json_boolean(*(const int *)base);
            break;
        case TDM_PARAM_INT64:
            v = json_integer((json_int_t) * (const int64_t *)base);
            break;
        case TDM_PARAM_DOUBLE:
            v = json_real(*(const double *)base);
            break;
        case TDM_PARAM_SECRET:
            v = json_string(**(const char *const *)base ? "***" : "");
            break;
        default:
            v = json_string(*(const char *const *)base);
            break;
        }
        json_object_set_new(params, d->name, json_pack("{s:o}", "value", v));
    }
    return json_pack("{s:s,s:o}", "program", t->program, "params", params);
}

void tdm_api_h_config_get(tdm_api_t *a, h2o_req_t *req)
{
    json_t *o = NULL;
    if (!a->o.params) {
        o = config_from_cfg(a->o.cfg);
        goto live;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f || tdm_params_print_config(a->o.params, f) != TDM_OK) {
        if (f)
            fclose(f);
        free(text);
        tdm_api_send_status(a, req, TDM_ERR_NOMEM, "cannot render the configuration");
        return;
    }
    fclose(f);
    o = json_loadb(text, len, 0, NULL);
    free(text);
    if (!o) {
        tdm_api_send_status(a, req, TDM_ERR_FORMAT, "cannot render the configuration");
        return;
    }
live:
    /* The live value of the one runtime tunable. */
    json_t *p = json_object_get(json_object_get(o, "params"), "health_progress_timeout");
    if (json_is_object(p)) {
        json_object_set_new(p, "value",
                            json_real((double)atomic_load(&a->health_timeout_us) / 1e6));
    }
    json_object_set_new(o, "runtime", json_pack("[s]", "health_progress_timeout"));
    send_json_obj(a, req, 200, o);
}

/* Only health_progress_timeout changes at run time; everything else (overlap, KV dtype,
 * hicache, limits) is applied by drain → restart with an override file (docs/design.md §5), so
 * a POST naming one of those is answered 409 with that explanation instead of being
 * half-applied. */
void tdm_api_h_config_post(tdm_api_t *a, h2o_req_t *req)
{
    char err[256];
    json_t *o = tdm_api_body_object(a, req);
    if (!o)
        return;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (strcmp(key, "health_progress_timeout") == 0)
            continue;
        int known = 0;
        for (size_t i = 0; i < tdm_worker_config_table.ndefs; i++)
            known |= strcmp(tdm_worker_config_table.defs[i].name, key) == 0;
        if (known)
            tdm_api_send_error(a, req, 409, "restart_required", "invalid_request_error",
                               "%s is applied at restart: write it to the override file and "
                               "drain + restart the group",
                               key);
        else
            tdm_api_send_error(a, req, 400, "unknown_key", "invalid_request_error",
                               "%s: no such tunable", key);
        json_decref(o);
        return;
    }
    double t;
    tdm_status_t st =
        tdm_json_get_number(o, "", "health_progress_timeout", 0.1, 3600, &t, err, sizeof(err));
    if (st == TDM_OK) {
        atomic_store(&a->health_timeout_us, (uint64_t)(t * 1e6));
        tdm_info(TDM_SUB_API, "msg=\"config changed\" health_progress_timeout=%.3f", t);
    } else if (st != TDM_ERR_NOTFOUND) {
        json_decref(o);
        tdm_api_send_error(a, req, 400, "invalid_value", "invalid_request_error", "%s", err);
        return;
    }
    json_decref(o);
    send_json_obj(a, req, 200,
                  json_pack("{s:f}", "health_progress_timeout",
                            (double)atomic_load(&a->health_timeout_us) / 1e6));
}

/* docs/contracts.md §e */
const char *const tdm_api_fault_names[] = {
    "rank_idle_path",          "rank_skip_collective", "stall_loop",     "slow_host_copy",
    "drop_abort_handler",      "kill_thread",          "stall_transfer", "flip_kv_bits",
    "host_layout_fp8_formula", "skip_layer_gate",      "flip_host_bits",
};
const size_t tdm_api_fault_names_count =
    sizeof(tdm_api_fault_names) / sizeof(tdm_api_fault_names[0]);

static tdm_status_t parse_fault(const json_t *o, uint16_t n_ranks, tdm_api_fault_t *f, char *err,
                                size_t err_len)
{
    static const char *const keys[] = {"name",        "rank",   "count",  "after_iter",
                                       "duration_ms", "thread", "disarm", NULL};
    const char *name, *thread = NULL;
    uint64_t u;
    memset(f, 0, sizeof(*f));
    TDM_TRY(tdm_json_check_keys(o, "", keys, err, err_len));
    TDM_TRY(tdm_json_get_string(o, "", "name", sizeof(f->name) - 1, &name, err, err_len));
    size_t i = 0;
    while (i < tdm_api_fault_names_count && strcmp(tdm_api_fault_names[i], name) != 0)
        i++;
    if (i == tdm_api_fault_names_count) {
        snprintf(err, err_len, "name: unknown fault point '%s'", name);
        return TDM_ERR_INVAL;
    }
    snprintf(f->name, sizeof(f->name), "%s", name);
    TDM_TRY(tdm_json_get_uint(o, "", "rank", (uint64_t)n_ranks - 1, &u, err, err_len));
    f->rank = (uint32_t)u;
    tdm_status_t st = tdm_json_get_uint(o, "", "count", UINT32_MAX, &u, err, err_len);
    if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
        return st;
    f->count = st == TDM_OK ? (uint32_t)u : 1;
    st = tdm_json_get_uint(o, "", "after_iter", UINT64_MAX >> 1, &f->after_iter, err, err_len);
    if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
        return st;
    st = tdm_json_get_uint(o, "", "duration_ms", 3600000, &f->duration_ms, err, err_len);
    if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
        return st;
    st = tdm_json_get_bool(o, "", "disarm", &f->disarm, err, err_len);
    if (st != TDM_OK && st != TDM_ERR_NOTFOUND)
        return st;
    TDM_TRY(tdm_json_get_string_opt(o, "", "thread", sizeof(f->thread) - 1, &thread, err, err_len));
    if (strcmp(f->name, "kill_thread") == 0) {
        int t = 0;
        while (thread && t < TDM_HB_MAX && strcmp(tdm_hb_thread_name((tdm_hb_thread_t)t), thread))
            t++;
        if (!thread || t == TDM_HB_MAX) {
            snprintf(err, err_len,
                     "thread: kill_thread needs a thread name (bootstrap, recv, transfer)");
            return TDM_ERR_INVAL;
        }
        snprintf(f->thread, sizeof(f->thread), "%s", thread);
    } else if (thread) {
        snprintf(err, err_len, "thread: only kill_thread takes a thread");
        return TDM_ERR_INVAL;
    }
    return TDM_OK;
}

void tdm_api_h_faults(tdm_api_t *a, h2o_req_t *req)
{
    char err[256];
    if (!a->o.cfg->enable_fault_injection) {
        tdm_api_send_error(a, req, 403, "faults_disabled", "permission_error",
                           "fault injection is off (start with --enable-fault-injection)");
        return;
    }
    if (!a->o.arm_fault) {
        tdm_api_send_error(a, req, 501, "faults_unavailable", "unsupported_error",
                           "this worker has no fault table");
        return;
    }
    json_t *o = tdm_api_body_object(a, req);
    if (!o)
        return;
    tdm_api_fault_t f;
    tdm_status_t st = parse_fault(o, a->o.page->n_ranks, &f, err, sizeof(err));
    json_decref(o);
    if (st != TDM_OK) {
        tdm_api_send_error(a, req, 400, "invalid_fault", "invalid_request_error", "%s", err);
        return;
    }
    st = a->o.arm_fault(a->o.fault_ctx, &f, err, sizeof(err));
    if (st != TDM_OK) {
        tdm_api_send_status(a, req, st, err);
        return;
    }
    a->faults_armed++;
    tdm_warn(TDM_SUB_API,
             "msg=\"fault %s\" name=%s rank=%u count=%u after_iter=%llu duration_ms=%llu",
             f.disarm ? "disarmed" : "armed", f.name, f.rank, f.count,
             (unsigned long long)f.after_iter, (unsigned long long)f.duration_ms);
    send_json_obj(a, req, 200,
                  json_pack("{s:b,s:s,s:i,s:i,s:I,s:I}", "armed", !f.disarm, "name", f.name, "rank",
                            (json_int_t)f.rank, "count", (json_int_t)f.count, "after_iter",
                            (json_int_t)f.after_iter, "duration_ms", (json_int_t)f.duration_ms));
}
