/*
 * dataplane/worker/worker_int.h — what the launcher and the rank share: the names of the group's
 * shm files and the sizes of the collective regions.
 */
#ifndef TDM_WORKER_WORKER_INT_H
#define TDM_WORKER_WORKER_INT_H

#include <stddef.h>

#include "dataplane/sched/sched_int.h"
#include "dataplane/worker/worker.h"

enum { SHM_PROGRESS = 0, SHM_TENSOR, SHM_PLAN, SHM_GROUP, SHM_COUNT };

#define TDM_WORKER_TENSOR_SLOT ((size_t)1 << 20) /* per-rank data slot of the tensor channel */
#define TDM_WORKER_PLAN_SLOT ((size_t)64 << 10)  /* per-rank data slot of the plan channel */

/* The PD role of a configuration (--disaggregation-mode), checked before anything starts: a PD
 * role needs --tp-size 1 (the per-rank relay is not built), decode needs
 * --disaggregation-prefill-addr host:port (parsed into host/port); prefill binds --host on
 * --disaggregation-bootstrap-port. err names the flag. */
tdm_status_t tdm_worker_pd_check(const tdm_worker_config_t *cfg, tdm_sched_pd_t *ret_pd, char *host,
                                 size_t host_len, uint16_t *ret_port, char *err, size_t err_len);

/* HiCache glue (worker_hicache.c): --fault-at-start arming (before the pools), the tier's
 * configuration from the flags (err names the flag; refused at --tp-size > 1), the start-time
 * layout telemetry (refused: layout_mismatch), and the scheduler's event sink. */
tdm_status_t tdm_worker_faults_at_start(const tdm_worker_config_t *cfg, tdm_fault_table_t *t,
                                        uint32_t n_ranks, char *err, size_t err_len);
tdm_status_t tdm_worker_hicache_cfg(const tdm_worker_config_t *cfg, uint32_t tp,
                                    const tdm_kv_layout_t *layout, uint32_t num_pages,
                                    uint32_t max_running, tdm_fault_table_t *faults,
                                    tdm_hicache_cfg_t *ret, char *err, size_t err_len);
void tdm_worker_hicache_report(const tdm_hicache_cfg_t *hcfg, int refused);
void tdm_worker_sched_event(void *ctx, const char *type, const char *reason, struct json_t *data);

void tdm_worker_shm_path(const char *prefix, int which, char *out, size_t out_len);

#endif
