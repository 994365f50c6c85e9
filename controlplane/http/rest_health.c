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
#include <tdm/time.h>

#include "common/version.h"
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

/* Open alerts by class and group, from the live set (sum() gives the total), and the build. */
static void alerts_open_metric(tdm_cp_server_t *s, tdm_cp_buf_t *b)
{
    tdm_cp_buf_printf(b,
                      "# HELP tandem_build_info The build: package version and git revision.\n"
                      "# TYPE tandem_build_info gauge\n"
                      "tandem_build_info{program=\"tandemd\",version=\"%s\",revision=\"%s\"} 1\n",
                      PACKAGE_VERSION, TDM_GIT_REV);
    tdm_cp_buf_printf(b, "# HELP tandem_alerts_open Open alerts by class and group.\n"
                         "# TYPE tandem_alerts_open gauge\n");
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
        tdm_cp_buf_printf(b, "tandem_alerts_open{class=\"%.*s\",group=\"", (int)(tab - key), key);
        for (const char *c = tab + 1; *c; c++) /* group names are the operator's: escape them */
            tdm_cp_buf_printf(b, "%s%c", *c == '"' || *c == '\\' ? "\\" : "", *c);
        tdm_cp_buf_printf(b, "\"} %lld\n", (long long)json_integer_value(x));
    }
    json_decref(counts);
    json_decref(al);
}

void tdm_cp_h_metrics(tdm_cp_server_t *s, h2o_req_t *req, const tdm_cp_args_t *a,
                      const tdm_cp_token_t *who)
{
    (void)a;
    (void)who;
    const tdm_cp_db_stats_t *ds = tdm_cp_db_stats(s->db);
    uint64_t oldest = atomic_load(&ds->oldest_pending_mono_us);
    uint64_t now = tdm_time_mono_us();
    double lag = oldest && now > oldest ? (double)(now - oldest) / 1e6 : 0.0;
    tdm_cp_buf_t b = TDM_CP_BUF_INIT;
#define G(name, help, fmt, val)                                                                    \
    tdm_cp_buf_printf(&b, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n",   \
                      val)
#define C(name, help, fmt, val)                                                                    \
    tdm_cp_buf_printf(&b, "# HELP " name " " help "\n# TYPE " name " counter\n" name " " fmt "\n", \
                      val)
    G("tandem_db_up", "1 when both database connections are usable.", "%d", atomic_load(&ds->up));
    G("tandem_ingest_lag_seconds", "Age of the oldest telemetry batch not yet in the database.",
      "%.3f", lag);
    G("tandem_ingest_buffer_batches", "Telemetry batches waiting in memory.", "%llu",
      (unsigned long long)atomic_load(&ds->mem_batches));
    G("tandem_ingest_buffer_bytes", "Bytes of telemetry batches waiting in memory.", "%llu",
      (unsigned long long)atomic_load(&ds->mem_bytes));
    G("tandem_ingest_spool_batches", "Telemetry batches in the on-disk spool.", "%llu",
      (unsigned long long)atomic_load(&ds->spool_records));
    G("tandem_ingest_spool_bytes", "Bytes in the on-disk spool.", "%llu",
      (unsigned long long)atomic_load(&ds->spool_bytes));
    alerts_open_metric(s, &b);
    G("tandem_ring_ranks", "Ranks with an in-memory sample ring.", "%zu", s->rings.n);
    tdm_cp_buf_printf(&b,
                      "# HELP tandem_ingest_batches_total Telemetry batches by outcome.\n"
                      "# TYPE tandem_ingest_batches_total counter\n"
                      "tandem_ingest_batches_total{outcome=\"committed\"} %llu\n"
                      "tandem_ingest_batches_total{outcome=\"duplicate\"} %llu\n"
                      "tandem_ingest_batches_total{outcome=\"spooled\"} %llu\n"
                      "tandem_ingest_batches_total{outcome=\"rejected\"} %llu\n",
                      (unsigned long long)atomic_load(&ds->batches_committed),
                      (unsigned long long)atomic_load(&ds->batches_duplicate),
                      (unsigned long long)atomic_load(&ds->batches_spooled),
                      (unsigned long long)s->ingest_rejected);
    C("tandem_ingest_transactions_total",
      "Ingest transactions committed (one per group of queued batches).", "%llu",
      (unsigned long long)atomic_load(&ds->ingest_txns));
    tdm_cp_buf_printf(&b,
                      "# HELP tandem_ingest_rows_total Rows committed by table.\n"
                      "# TYPE tandem_ingest_rows_total counter\n"
                      "tandem_ingest_rows_total{table=\"samples\"} %llu\n"
                      "tandem_ingest_rows_total{table=\"transfer_events\"} %llu\n"
                      "tandem_ingest_rows_total{table=\"events\"} %llu\n",
                      (unsigned long long)atomic_load(&ds->rows_samples),
                      (unsigned long long)atomic_load(&ds->rows_tevents),
                      (unsigned long long)atomic_load(&ds->rows_events));
    tdm_cp_buf_printf(&b,
                      "# HELP tandem_history_reads_total Rank history reads by where they were "
                      "answered.\n"
                      "# TYPE tandem_history_reads_total counter\n"
                      "tandem_history_reads_total{source=\"memory\"} %llu\n"
                      "tandem_history_reads_total{source=\"database\"} %llu\n",
                      (unsigned long long)s->hist.hits, (unsigned long long)s->hist.misses);
    C("tandem_telemetry_samples_received_total", "Samples received (all kept in the ring).", "%llu",
      (unsigned long long)s->samples_received);
    C("tandem_telemetry_events_received_total", "Events received.", "%llu",
      (unsigned long long)s->events_received);
    C("tandem_db_reconnects_total", "Database connections lost.", "%llu",
      (unsigned long long)atomic_load(&ds->reconnects));
    C("tandem_http_requests_total", "HTTP requests handled.", "%llu",
      (unsigned long long)s->http_requests);
    C("tandem_http_errors_total", "HTTP requests answered with an error by the dispatcher.", "%llu",
      (unsigned long long)s->http_errors);
#undef G
#undef C
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/plain; version=0.0.4"));
    h2o_send_inline(req, b.data, b.len);
    tdm_cp_buf_free(&b);
}
