/*
 * dataplane/worker/worker_int.h — what the files of the worker process share: the rank's record
 * (struct tdm_worker), the names of the group's shm files and the sizes of the collective
 * regions, and the entry points of the launcher, the PD part, the self-test and the HiCache glue.
 */
#ifndef TDM_WORKER_WORKER_INT_H
#define TDM_WORKER_WORKER_INT_H

#include <pthread.h>
#include <stddef.h>

#include <tdm/xfer.h>

#include "dataplane/sched/sched_int.h"
#include "dataplane/worker/worker.h"

enum { SHM_PROGRESS = 0, SHM_TENSOR, SHM_PLAN, SHM_GROUP, SHM_COUNT };

#define TDM_WORKER_TENSOR_SLOT ((size_t)1 << 20) /* per-rank data slot of the tensor channel */
#define TDM_WORKER_PLAN_SLOT ((size_t)64 << 10)  /* per-rank data slot of the plan channel */

/* One per process (main.c: tdm_worker_new). The launcher uses cfg and hooks; a rank fills the
 * rest phase by phase (rank.c) and frees it at teardown. */
struct tdm_worker {
    const tdm_worker_config_t *cfg;
    tdm_worker_hooks_t hooks;
    uint32_t rank, tp;
    char prefix[256]; /* the group's shm files: <prefix>-{progress,tensor,plan,group,kv<r>} */
    tdm_progress_page_t *page;
    void *region[2];
    size_t region_size[2];
    tdm_worker_shared_t *shared;
    tdm_comm_t tensor, plan;
    int have_tensor, have_plan;
    tdm_model_t *model;
    tdm_tok_t *tok;
    tdm_exec_t *x;
    tdm_sched_t *sched;
    /* what the KV sizing phase decided (rank.c) */
    int on_cuda;
    tdm_dtype_t kv_dtype;
    tdm_kv_layout_t layout;
    uint32_t page_size, num_pages, max_running, max_context, chunk;
    /* PD (rank 0 of a prefill or decode group): the transfer engine over rank 0's pool */
    tdm_sched_pd_t pd;
    tdm_xfer_t *xfer;
    char pd_host[256];
    uint16_t pd_port;
    _Atomic(tdm_sched_t *) kick; /* what the engine's event callback wakes */
    /* decode at TP 1 on the CPU: the engine allocated the pool through UCX and the executor's
     * pool lives in it (the executor and scheduler are freed before the engine) */
    int xfer_owns_kv;
    void *ucx_kv;
    uint64_t ucx_kv_bytes;
    /* PD at TP > 1: every rank's KV pool lives in a shared file (<prefix>-kv<rank>) that rank 0
     * maps, so rank 0's transfer engine moves every rank's pages (docs/serving.md) */
    void *kv_mem; /* this rank's pool memory (NULL: the executor allocates) */
    size_t kv_mem_bytes;
    void *peer_mem[TDM_XFER_RANKS_MAX]; /* rank 0: ranks 1.. */
    size_t peer_bytes[TDM_XFER_RANKS_MAX];
    tdm_kv_pool_t *peer_pool[TDM_XFER_RANKS_MAX];
    pthread_t sig_thread;
    int have_sig_thread, report_started, api_started;
    volatile int stop;
    uint64_t wd_usec, wd_last; /* rank 0 under tandem-worker@.service: the watchdog period */
};

/* launcher.c: tandem-worker without --rank (worker.h). */
int tdm_worker_launch(tdm_worker_t *w, int argc, char **argv);
void tdm_worker_shm_path(const char *prefix, int which, char *out, size_t out_len);
/* rank.c: a rank (worker.h); map a shared file read-write. */
int tdm_worker_rank_main(tdm_worker_t *w);
tdm_status_t tdm_worker_map_file(const char *path, size_t *ret_size, void **ret);

/* rank_pd.c. The PD role of a configuration (--disaggregation-mode), checked before anything
 * starts: a PD role needs --tp-size up to TDM_XFER_RANKS_MAX, decode needs
 * --disaggregation-prefill-addr host:port (parsed into host/port); prefill binds --host on
 * --disaggregation-bootstrap-port. err names the flag. */
tdm_status_t tdm_worker_pd_check(const tdm_worker_config_t *cfg, tdm_sched_pd_t *ret_pd, char *host,
                                 size_t host_len, uint16_t *ret_port, char *err, size_t err_len);
/* This rank's KV pool as a shared file rank 0 maps (PD at TP > 1). */
tdm_status_t tdm_worker_pd_kv_create(tdm_worker_t *w, const tdm_kv_layout_t *l, char *err,
                                     size_t err_len);
/* Start the transfer engine over rank 0's pool, or with `ucx_layout` over a pool it allocates
 * through UCX (decode, TP 1, CPU: before the executor exists). */
tdm_status_t tdm_worker_pd_start(tdm_worker_t *w, const tdm_kv_layout_t *ucx_layout, char *err,
                                 size_t err_len);

/* rank_selftest.c: the self-test client's thread (worker.h). */
void *tdm_worker_selftest_main(void *arg);

/* HiCache glue (worker_hicache.c): --fault-at-start arming (before the pools), the tier's
 * configuration from the flags (err names the flag; refused at --tp-size > 1), the start-time
 * layout telemetry through the report hooks (refused: layout_mismatch), and the scheduler's event
 * sink (ctx: the rank's tdm_worker_report_hooks_t). */
tdm_status_t tdm_worker_faults_at_start(const tdm_worker_config_t *cfg, tdm_fault_table_t *t,
                                        uint32_t n_ranks, char *err, size_t err_len);
tdm_status_t tdm_worker_hicache_cfg(const tdm_worker_config_t *cfg, const tdm_kv_layout_t *layout,
                                    uint32_t num_pages, uint32_t max_running,
                                    tdm_fault_table_t *faults, tdm_hicache_cfg_t *ret, char *err,
                                    size_t err_len);
void tdm_worker_hicache_report(const tdm_worker_report_hooks_t *rep, const tdm_hicache_cfg_t *hcfg,
                               int refused);
void tdm_worker_sched_event(void *ctx, const char *type, const char *reason, struct json_t *data);

#endif
