/*
 * params_worker.c — tandem-worker's parser table, generated from TDM_WORKER_PARAMS
 * (include/tdm/config.h), plus the few derived values that depend on more than one tunable.
 */
#include "config.h"

#include <string.h>

#include <tdm/config.h>

TDM_PARAMS_DEFS(tdm_worker_config, TDM_WORKER_PARAMS);

static const tdm_param_alias_t worker_aliases[] = {
    {"--model", "--model-path"},
};

const tdm_param_table_t tdm_worker_config_table = {
    "tandem-worker",
    "worker",
    tdm_worker_config_defs,
    TDM_PARAMS_COUNT(tdm_worker_config_defs),
    worker_aliases,
    TDM_PARAMS_COUNT(worker_aliases),
    sizeof(tdm_worker_config_t),
};

int tdm_worker_config_http_port(const tdm_worker_config_t *cfg)
{
    if (cfg->port >= 0)
        return (int)cfg->port;
    /* docs/contracts.md §b: decode/colocated HTTP 30000, prefill HTTP 30001 (both can share a
     * host). */
    return !strcmp(cfg->disaggregation_mode, "prefill") ? 30001 : 30000;
}
