/*
 * params_tandemd.c — tandemd's parser table, generated from TDM_TANDEMD_PARAMS
 * (include/tdm/config.h).
 */
#include "config.h"

#include <tdm/config.h>

TDM_PARAMS_DEFS(tdm_tandemd_config, TDM_TANDEMD_PARAMS);

const tdm_param_table_t tdm_tandemd_config_table = {
    "tandemd", "tandemd", tdm_tandemd_config_defs,      TDM_PARAMS_COUNT(tdm_tandemd_config_defs),
    NULL,      0,         sizeof(tdm_tandemd_config_t),
};
