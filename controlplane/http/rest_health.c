/*
 * rest_health.c — GET /health and GET /metrics, from memory: they never wait on the database.
 */
#include "config.h"

#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/prom.h>
#include <tdm/time.h>

#include "controlplane/http/rest.h"

/* ---- /health, /metrics ---------------------------------------------------------------------- */

void tdm_cp_h_health(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                     const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    const tdm_cp_db_stats_t *ds = tdm_cp_db_stats(s->db);
    char body[256];
    int n = snprintf(body, sizeof(body),
                     "{\"status\":\"ok\",\"ready\":%s,\"db\":\"%s\",\"uptime_s\":%llu}",
                     s->ready ? "true" : "false", atomic_load(&ds->up) ? "up" : "down",
                     (unsigned long long)((tdm_time_wall_us() - s->started_us) / 1000000u));
    tdm_httpd_send_json(req, 200, body, (size_t)n);
}

/* Open alerts by class and group, from the live set (sum() gives the total). */
static void alerts_open_metric(tdm_cp_server_t *s, FILE *f)
{
    tdm_prom_head(f, "tandem_alerts_open", "Open alerts by class and group.", "gauge");
    json_t *al = tdm_cp_alerts_to_json(s->alerts, "open", NULL);
    json_t *counts = json_object(), *x;
    size_t i;
    json_array_foreach(json_object_get(al, "alerts"), i, x)
    {
        char key[256];
        snprintf(key, sizeof(key), "%s\t%s", json_string_value(json_object_get(x, "kind")),
                 json_string_value(json_object_get(x, "group")));
        json_object_set_new(counts, key,
                            json_integer(json_integer_value(json_object_get(counts, key)) + 1));
    }
    const char *key;
    json_object_foreach(counts, key, x)
    {
        const char *tab = strchr(key, '\t');
        fprintf(f, "tandem_alerts_open{class=\"%.*s\",group=\"", (int)(tab - key), key);
        tdm_prom_label(f, tab + 1); /* group names are the operator's */
        fprintf(f, "\"} %lld\n", (long long)json_integer_value(x));
    }
    json_decref(counts);
    json_decref(al);
}

static void render_metrics(tdm_cp_server_t *s, FILE *f)
{
    const tdm_cp_db_stats_t *ds = tdm_cp_db_stats(s->db);
    uint64_t oldest = atomic_load(&ds->oldest_pending_mono_us);
    uint64_t now = tdm_time_mono_us();
    double lag = oldest && now > oldest ? (double)(now - oldest) / 1e6 : 0.0;
    tdm_prom_gauge(f, "tandem_db_up", "1 when both database connections are usable.",
                   atomic_load(&ds->up));
    tdm_prom_gauge(f, "tandem_ingest_lag_seconds",
                   "Age of the oldest telemetry batch not yet in the database.", lag);
    tdm_prom_gauge(f, "tandem_ingest_buffer_batches", "Telemetry batches waiting in memory.",
                   (double)atomic_load(&ds->mem_batches));
    tdm_prom_gauge(f, "tandem_ingest_buffer_bytes", "Bytes of telemetry batches waiting in memory.",
                   (double)atomic_load(&ds->mem_bytes));
    tdm_prom_gauge(f, "tandem_ingest_spool_batches", "Telemetry batches in the on-disk spool.",
                   (double)atomic_load(&ds->spool_records));
    tdm_prom_gauge(f, "tandem_ingest_spool_bytes", "Bytes in the on-disk spool.",
                   (double)atomic_load(&ds->spool_bytes));
    tdm_prom_build_info(f, "tandemd");
    alerts_open_metric(s, f);
    tdm_prom_gauge(f, "tandem_ring_ranks", "Ranks with an in-memory sample ring.",
                   (double)s->rings.n);
    tdm_prom_head(f, "tandem_ingest_batches_total", "Telemetry batches by outcome.", "counter");
    fprintf(f,
            "tandem_ingest_batches_total{outcome=\"committed\"} %llu\n"
            "tandem_ingest_batches_total{outcome=\"duplicate\"} %llu\n"
            "tandem_ingest_batches_total{outcome=\"spooled\"} %llu\n"
            "tandem_ingest_batches_total{outcome=\"rejected\"} %llu\n",
            (unsigned long long)atomic_load(&ds->batches_committed),
            (unsigned long long)atomic_load(&ds->batches_duplicate),
            (unsigned long long)atomic_load(&ds->batches_spooled),
            (unsigned long long)s->ingest_rejected);
    tdm_prom_counter(f, "tandem_ingest_transactions_total",
                     "Ingest transactions committed (one per group of queued batches).",
                     atomic_load(&ds->ingest_txns));
    tdm_prom_head(f, "tandem_ingest_rows_total", "Rows committed by table.", "counter");
    fprintf(f,
            "tandem_ingest_rows_total{table=\"samples\"} %llu\n"
            "tandem_ingest_rows_total{table=\"transfer_events\"} %llu\n"
            "tandem_ingest_rows_total{table=\"events\"} %llu\n",
            (unsigned long long)atomic_load(&ds->rows_samples),
            (unsigned long long)atomic_load(&ds->rows_tevents),
            (unsigned long long)atomic_load(&ds->rows_events));
    tdm_prom_head(f, "tandem_history_reads_total",
                  "Rank history reads by where they were answered.", "counter");
    fprintf(f,
            "tandem_history_reads_total{source=\"memory\"} %llu\n"
            "tandem_history_reads_total{source=\"database\"} %llu\n",
            (unsigned long long)s->hist.hits, (unsigned long long)s->hist.misses);
    tdm_prom_counter(f, "tandem_telemetry_samples_received_total",
                     "Samples received (all kept in the ring).", s->samples_received);
    tdm_prom_counter(f, "tandem_telemetry_events_received_total", "Events received.",
                     s->events_received);
    tdm_prom_counter(f, "tandem_db_reconnects_total", "Database connections lost.",
                     atomic_load(&ds->reconnects));
    tdm_prom_counter(f, "tandem_http_requests_total", "HTTP requests handled.", s->http_requests);
    tdm_prom_counter(f, "tandem_http_errors_total",
                     "HTTP requests answered with an error by the dispatcher.", s->http_errors);
    tdm_prom_counter(f, "tandem_router_clients_gone_total",
                     "Requests forwarded by the /v1 router whose client went away before the end "
                     "(the upstream request was closed at once).",
                     s->v1_clients_gone);
}

void tdm_cp_h_metrics(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                      const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f)
        render_metrics(s, f);
    if (!f || fclose(f) != 0 || !text) {
        free(text);
        tdm_httpd_send_error(req, 500, "internal", "server_error", "cannot render metrics");
        return;
    }
    /* h2o_send_inline copies the body into the request's pool */
    tdm_httpd_send(req, 200, "text/plain; version=0.0.4", text, len);
    free(text);
}
