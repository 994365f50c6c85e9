/*
 * worker_hicache.c — the worker's side of HiCache (include/tdm/hicache.h): the tier's
 * configuration from the flags (docs/contracts.md), fault points armed at start
 * (--fault-at-start), and the telemetry the tier produces: the two layout records compared at
 * start ("layout", or "layout_mismatch" when the rank refuses), and the scheduler's CORRUPTION
 * evidence (hicache_load_mismatch, poisoned_page_read).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <tdm/log.h>

#include "dataplane/worker/worker_int.h"

tdm_status_t tdm_worker_faults_at_start(const tdm_worker_config_t *cfg, tdm_fault_table_t *t,
                                        uint32_t n_ranks, char *err, size_t err_len)
{
    char buf[512], *save = NULL;
    if (!cfg->fault_at_start[0])
        return TDM_OK;
    if (!cfg->enable_fault_injection) {
        snprintf(err, err_len, "--fault-at-start needs --enable-fault-injection");
        return TDM_ERR_INVAL;
    }
    if (strlen(cfg->fault_at_start) >= sizeof(buf)) {
        snprintf(err, err_len, "--fault-at-start: too long");
        return TDM_ERR_RANGE;
    }
    snprintf(buf, sizeof(buf), "%s", cfg->fault_at_start);
    for (char *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        tdm_fault_point_t p;
        char why[256];
        tdm_fault_spec_t spec = {.rank = 0, .at_start = 1};
        if (tdm_fault_point_parse(name, &p) != TDM_OK) {
            snprintf(err, err_len, "--fault-at-start: unknown fault point '%s'", name);
            return TDM_ERR_INVAL;
        }
        if (tdm_fault_arm(t, n_ranks, p, &spec, why, sizeof(why)) != TDM_OK) {
            snprintf(err, err_len, "--fault-at-start: %s", why);
            return TDM_ERR_INVAL;
        }
    }
    return TDM_OK;
}

tdm_status_t tdm_worker_hicache_cfg(const tdm_worker_config_t *cfg, const tdm_kv_layout_t *layout,
                                    uint32_t num_pages, uint32_t max_running,
                                    tdm_fault_table_t *faults, tdm_hicache_cfg_t *ret, char *err,
                                    size_t err_len)
{
    tdm_hicache_cfg_t c;
    memset(&c, 0, sizeof(c));
    if (tdm_hicache_policy_parse(cfg->hicache_write_policy, &c.policy) != TDM_OK ||
        tdm_hicache_mem_layout_parse(cfg->hicache_mem_layout, &c.mem_layout) != TDM_OK ||
        tdm_hicache_io_parse(cfg->hicache_io_backend, &c.io) != TDM_OK) {
        snprintf(err, err_len, "--hicache-write-policy/--hicache-mem-layout/--hicache-io-backend");
        return TDM_ERR_INVAL;
    }
    c.layout = layout;
    c.device_pages = num_pages;
    c.ratio = cfg->hicache_ratio;
    c.size_bytes = (uint64_t)cfg->hicache_size << 30;
    c.verify_every =
        cfg->hicache_verify_rate > 0 ? (uint32_t)lround(1.0 / cfg->hicache_verify_rate) : 0;
    c.poison = cfg->hicache_poison;
    c.force_layout = cfg->hicache_force_layout;
    c.fp8_formula = tdm_fault_fire(faults, TDM_FAULT_HOST_LAYOUT_FP8_FORMULA, 0, 0, NULL) ? 1 : 0;
    c.max_jobs = max_running + 1;
    *ret = c;
    return TDM_OK;
}

void tdm_worker_hicache_report(const tdm_worker_report_hooks_t *rep, const tdm_hicache_cfg_t *hcfg,
                               int refused)
{
    tdm_kv_layout_t hl;
    tdm_layout_record_t d, h;
    if (!rep->event || tdm_hicache_host_layout(hcfg, &hl) != TDM_OK)
        return;
    tdm_kv_layout_record(hcfg->layout, hcfg->device_pages, &d);
    tdm_kv_layout_record(&hl, 0, &h);
    json_t *data = json_object();
    json_object_set_new(data, "device", tdm_layout_to_json(&d));
    json_object_set_new(data, "host", tdm_layout_to_json(&h));
    json_object_set_new(data, "pool", json_string("hicache"));
    (void)rep->event(rep->ctx, refused ? "layout_mismatch" : "layout", NULL, NULL, NULL,
                     refused ? "HiCache host pool layout differs from the device pool" : NULL,
                     data);
}

void tdm_worker_sched_event(void *ctx, const char *type, const char *reason, json_t *data)
{
    const tdm_worker_report_hooks_t *rep = ctx;
    if (!rep->event) {
        json_decref(data);
        tdm_dbg(TDM_SUB_SCHED, "msg=\"event not reported\" type=%s", type);
        return;
    }
    if (rep->event(rep->ctx, type, NULL, NULL, NULL, reason, data) != TDM_OK)
        tdm_dbg(TDM_SUB_SCHED, "msg=\"event not reported\" type=%s", type);
}
