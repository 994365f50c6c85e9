/*
 * main.c — tandem-worker's entry point: resolve the worker's tunables (CLI > env > config files >
 * defaults, include/tdm/config.h) and hand over to a mode: the one-shot CLI of docs/contracts.md §f
 * (--prompt / --prompt-ids), else the serving runtime (launcher or rank,
 * dataplane/worker/worker.h): main builds the process's tdm_worker_t with its hook tables — the
 * HTTP layer and the telemetry reporter (dataplane/worker/hooks.h) — and runs it. Every message
 * goes through tdm_log. Exit status: 0 done, 1 runtime failure, 2 bad usage (flags, paths).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/config.h>
#include <tdm/log.h>
#include <tdm/mem.h>

#include "dataplane/worker/hooks.h"
#include "dataplane/oneshot.h"

/* The serving runtime: one worker with its hook tables, each over a record owned here. */
static int serve(const tdm_worker_config_t *cfg, int argc, char **argv)
{
    tdm_worker_hooks_t hooks = {0};
    tdm_worker_telemetry_t *tel = tdm_worker_telemetry_new();
    tdm_worker_telemetry_hooks(tel, &hooks);
    tdm_worker_http_t *http = tdm_worker_http_new(&hooks.report);
    tdm_worker_http_hooks(http, &hooks);
    tdm_worker_t *w = tdm_worker_new(cfg, &hooks);
    int rc = tdm_worker_run(w, argc, argv);
    tdm_worker_free(w);
    tdm_worker_http_free(http);
    tdm_worker_telemetry_free(tel);
    return rc;
}

int main(int argc, char **argv)
{
    tdm_worker_config_t cfg;
    tdm_params_t *params = NULL;
    int rc = 2, w_argc = 0, r_argc = 0;
    char **w_argv = tdm_calloc((size_t)argc + 1, sizeof(char *));
    char **r_argv = tdm_calloc((size_t)argc + 1, sizeof(char *));

    tdm_log_init("tandem-worker");
    tdm_oneshot_split_argv(argc, argv, &w_argc, w_argv, &r_argc, r_argv);
    rc = tdm_params_start(&tdm_worker_config_table, &cfg, &cfg.log_level, w_argc, w_argv,
                          tdm_oneshot_usage, TDM_SUB_CORE, &params);
    if (rc != TDM_PARAMS_GO) {
        rc = rc == TDM_PARAMS_BAD ? 2 : rc;
        goto out;
    }
    rc = 2;
    /* an explicit --prompt/--prompt-ids (even empty) means one-shot, which reports the error */
    if (tdm_oneshot_wanted(&cfg) || r_argc > 1 ||
        tdm_params_source(params, "prompt") != TDM_PARAM_SRC_DEFAULT ||
        tdm_params_source(params, "prompt_ids") != TDM_PARAM_SRC_DEFAULT) {
        if (cfg.enable_hierarchical_cache) {
            tdm_err(TDM_SUB_CORE, "msg=\"--enable-hierarchical-cache: the HiCache host tier sits "
                                  "under a serving worker's prefix cache; the one-shot CLI has "
                                  "none\"");
            goto out;
        }
        rc = tdm_oneshot_main(&cfg, tdm_params_source(params, "device") != TDM_PARAM_SRC_DEFAULT,
                              r_argc, r_argv);
        goto out;
    }
    if (!cfg.model_path[0]) {
        tdm_err(TDM_SUB_CORE, "msg=\"--model-path DIR is required\"");
        goto out;
    }
    /* serving: the launcher (no --rank) or one rank of the group (dataplane/worker/worker.h) */
    rc = serve(&cfg, w_argc, w_argv);
out:
    tdm_params_free(params);
    tdm_free(w_argv);
    tdm_free(r_argv);
    return rc;
}
