/*
 * rank.c — a rank of a serving group (contract in worker.h), started phase by phase: signals,
 * the group's shared files (and the reporter, so a rank that fails to load is still seen), the
 * model, the KV sizing, the PD pools, the executor; then followers run the loop, and rank 0 the
 * transfer engine (rank_pd.c), the scheduler, the HTTP layer (api hooks) and, with
 * TDM_SCHED_SELFTEST, the self-test client (rank_selftest.c). Signals go to one thread
 * (sigwait): on rank 0 SIGTERM/SIGINT stop the scheduler, which broadcasts SHUTDOWN so every rank
 * leaves cleanly; followers wait for that plan (or the abort word the launcher sets when
 * something died).
 *
 * KV pool size on CPU: --kv-cpu-bytes per rank (default 256 MiB), capped at what
 * --max-running-requests sequences of the full context need.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include <tdm/log.h>
#include <tdm/mem.h>
#include <tdm/time.h>

#include "dataplane/worker/worker_int.h"

#define DEFAULT_MAX_RUNNING 64u
#define CPU_CHUNK_CAP 2048u
#define IDLE_PLAN_US 100000u

const tdm_worker_config_t *tdm_worker_config(const tdm_worker_t *w)
{
    return w->cfg;
}
uint32_t tdm_worker_rank(const tdm_worker_t *w)
{
    return w->rank;
}
uint32_t tdm_worker_tp_size(const tdm_worker_t *w)
{
    return w->tp;
}
uint64_t tdm_worker_group_id(const tdm_worker_t *w)
{
    return w->page->group_id;
}
tdm_sched_t *tdm_worker_sched(tdm_worker_t *w)
{
    return w->sched;
}
tdm_progress_page_t *tdm_worker_progress(tdm_worker_t *w)
{
    return w->page;
}
tdm_worker_shared_t *tdm_worker_shared(tdm_worker_t *w)
{
    return w->shared;
}
const tdm_tok_t *tdm_worker_tokenizer(const tdm_worker_t *w)
{
    return w->tok;
}
const tdm_model_config_t *tdm_worker_model_config(const tdm_worker_t *w)
{
    return tdm_model_config(w->model);
}
tdm_xfer_t *tdm_worker_xfer(tdm_worker_t *w)
{
    return w->xfer;
}
int tdm_worker_bootstrap_port(const tdm_worker_t *w)
{
    return w->xfer && w->pd == TDM_SCHED_PD_PREFILL ? (int)tdm_xfer_port(w->xfer) : 0;
}
uint64_t tdm_worker_weight_bytes(const tdm_worker_t *w)
{
    return w->x ? tdm_exec_weight_bytes(w->x) : 0;
}

void tdm_worker_request_stop(tdm_worker_t *w)
{
    w->stop = 1;
    if (w->sched)
        tdm_sched_stop(w->sched);
}

tdm_worker_t *tdm_worker_new(const tdm_worker_config_t *cfg, const tdm_worker_hooks_t *hooks)
{
    tdm_worker_t *w = tdm_calloc(1, sizeof(*w));
    w->cfg = cfg;
    if (hooks)
        w->hooks = *hooks;
    return w;
}

void tdm_worker_free(tdm_worker_t *w)
{
    tdm_free(w);
}

int tdm_worker_run(tdm_worker_t *w, int argc, char **argv)
{
    if (w->cfg->rank < 0)
        return tdm_worker_launch(w, argc, argv);
    return tdm_worker_rank_main(w);
}

/* The launcher's pid is the number after the last '-' of the group's shm prefix; 1 when the
 * launcher is gone (this rank was reparented), else 0. */
static int launcher_gone(const tdm_worker_t *w, long *pid)
{
    const char *dash = strrchr(w->prefix, '-');
    *pid = dash ? atol(dash + 1) : 0;
    return *pid > 0 && getppid() != (pid_t)*pid;
}

/* A rank whose launcher is gone gets its stop from the kernel (PR_SET_PDEATHSIG: SIGTERM) and
 * nobody escalates it: past the drain and this bound it leaves by itself, so a group wedged in a
 * collective cannot outlive its launcher and hold its ports. */
#define ORPHAN_STOP_GRACE_US (10 * 1000000ULL)

/* SIGTERM on rank 0 drains: new requests are refused, the running ones finish, for at most
 * --drain-timeout seconds; then (or at a second signal, or at SIGINT) the scheduler stops. On
 * every rank, a stop signal once the launcher is gone arms the orphan deadline above. */
static void *sig_main(void *arg)
{
    tdm_worker_t *w = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    uint64_t drain_until = 0, orphan_until = 0;
    for (;;) {
        int sig = 0;
        if (drain_until || orphan_until) {
            struct timespec poll = {0, 20 * 1000000L};
            sig = sigtimedwait(&set, NULL, &poll);
            if (orphan_until && tdm_time_mono_us() >= orphan_until) {
                tdm_err(TDM_SUB_CORE,
                        "msg=\"the launcher is gone and the stop did not complete: exiting\" "
                        "rank=%d grace_s=%.1f",
                        w->rank, (double)ORPHAN_STOP_GRACE_US / 1e6);
                _exit(1);
            }
            if (sig < 0 && !drain_until)
                continue;
            if (sig < 0) {
                tdm_sched_t *s = atomic_load(&w->kick);
                tdm_sched_stats_t st = {0};
                if (s)
                    tdm_sched_stats(s, &st);
                if (st.drained || tdm_time_mono_us() >= drain_until) {
                    tdm_info(TDM_SUB_SCHED, "msg=\"drain over; stopping\" drained=%d", st.drained);
                    drain_until = 0;
                    tdm_worker_request_stop(w);
                }
                continue;
            }
        } else if (sigwait(&set, &sig) != 0) {
            return NULL;
        }
        if (sig == SIGUSR1)
            return NULL;
        long lp;
        if (!orphan_until && launcher_gone(w, &lp)) {
            orphan_until = tdm_time_mono_us() + ORPHAN_STOP_GRACE_US +
                           (uint64_t)(w->cfg->drain_timeout > 0 ? w->cfg->drain_timeout * 1e6 : 0);
            tdm_warn(TDM_SUB_CORE,
                     "msg=\"stop signal with the launcher gone\" launcher_pid=%ld rank=%d", lp,
                     w->rank);
        }
        if (w->rank != 0)
            continue;
        tdm_sched_t *s = atomic_load(&w->kick);
        if (sig == SIGTERM && !drain_until && s && w->cfg->drain_timeout > 0) {
            tdm_info(TDM_SUB_SCHED, "msg=\"SIGTERM: draining\" timeout_s=%.1f",
                     w->cfg->drain_timeout);
            sd_notify(0, "STOPPING=1\nSTATUS=draining");
            tdm_sched_drain(s);
            drain_until = tdm_time_mono_us() + (uint64_t)(w->cfg->drain_timeout * 1e6);
        } else {
            drain_until = 0;
            tdm_worker_request_stop(w);
        }
    }
}

/* Under tandem-worker@.service (Type=notify, NotifyAccess=all) the launcher is the unit's main
 * process and rank 0 its child: systemd's WATCHDOG_PID names the launcher, so rank 0 takes the
 * watchdog only when WATCHDOG_PID is its parent (not when tandemd's own unit environment leaked
 * into a group tandemd supervises). The ping comes from the scheduler loop itself (after each
 * published iteration, idle heartbeats every IDLE_PLAN_US included): a wedged loop stops it. */
static int notify_is_ours(void)
{
    const char *pid = getenv("WATCHDOG_PID");
    return getenv("NOTIFY_SOCKET") && (!pid || strtoll(pid, NULL, 10) == (long long)getppid());
}

static void watchdog_setup(tdm_worker_t *w)
{
    const char *usec = getenv("WATCHDOG_USEC");
    if (w->rank == 0 && usec && getenv("WATCHDOG_PID") && notify_is_ours())
        w->wd_usec = strtoull(usec, NULL, 10);
}

static void watchdog_on_iter(void *ctx)
{
    tdm_worker_t *w = ctx;
    uint64_t now = tdm_time_mono_us();
    if (now - w->wd_last >= w->wd_usec / 2) {
        sd_notify(0, "WATCHDOG=1");
        w->wd_last = now;
    }
}

tdm_status_t tdm_worker_map_file(const char *path, size_t *ret_size, void **ret)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? TDM_ERR_NOTFOUND : TDM_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return TDM_ERR_IO;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return TDM_ERR_NOMEM;
    *ret_size = (size_t)st.st_size;
    *ret = m;
    return TDM_OK;
}

/* ---- the rank, phase by phase ---- */

/* Everything the rank holds, in reverse order of the phases. */
static void rank_free(tdm_worker_t *w)
{
    tdm_sched_free(w->sched);
    w->sched = NULL;
    tdm_exec_free(w->x);
    w->x = NULL;
    for (uint32_t r = 0; r < TDM_XFER_RANKS_MAX; r++) {
        tdm_kv_pool_free(w->peer_pool[r]);
        if (w->peer_mem[r])
            munmap(w->peer_mem[r], w->peer_bytes[r]);
    }
    if (w->kv_mem)
        munmap(w->kv_mem, w->kv_mem_bytes);
    if (w->have_tensor)
        tdm_comm_destroy(&w->tensor);
    if (w->have_plan)
        tdm_comm_destroy(&w->plan);
    tdm_tok_free(w->tok);
    tdm_model_free(w->model);
    for (int i = 0; i < 2; i++)
        if (w->region[i])
            munmap(w->region[i], w->region_size[i]);
    if (w->shared)
        munmap(w->shared, sizeof(*w->shared));
    tdm_progress_close(w->page);
}

/* Before anything starts: what the launcher and this build allow (exit status 2 otherwise). */
static int rank_check(tdm_worker_t *w, const char *prefix)
{
    if (!prefix || !prefix[0]) {
        tdm_err(TDM_SUB_CORE, "msg=\"--rank is set by the launcher (TDM_GROUP_SHM missing); run "
                              "tandem-worker without --rank\"");
        return 2;
    }
#ifndef TDM_SCHED_GPU_TP
    if (w->on_cuda && w->cfg->tp_size != 1) {
        tdm_err(TDM_SUB_CORE, "msg=\"--device cuda --tp-size > 1 needs the GPU collectives (NCCL "
                              "and the CUDA runtime); this build has none\"");
        return 2;
    }
#endif
#ifndef TDM_HAVE_CUDA_RT
    if (w->on_cuda && strcmp(w->cfg->disaggregation_mode, "null") != 0) {
        /* GPU KV moves by CUDA IPC (dataplane/xfer/cuda_ipc.c), built only with the runtime */
        tdm_err(TDM_SUB_CORE,
                "msg=\"--disaggregation-mode %s with --device cuda needs the CUDA runtime (KV "
                "transfer by CUDA IPC); this build has none\"",
                w->cfg->disaggregation_mode);
        return 2;
    }
#endif
    return 0;
}

/* Signals: SIGTERM/SIGINT/SIGUSR1 only through the signal thread (rank_map_shm starts it). A
 * launcher killed with SIGKILL cannot stop its ranks: the kernel does (SIGTERM → the same clean
 * stop as a forwarded one); the prefix names the launcher, in case it is already gone. */
static tdm_status_t rank_signals(tdm_worker_t *w, char *err, size_t err_len)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    long lp;
    if (launcher_gone(w, &lp)) {
        snprintf(err, err_len, "the launcher (pid %ld) is gone", lp);
        return TDM_ERR_STATE;
    }
    return TDM_OK;
}

/* The group's shared files: the progress page, the tensor and plan channels, the shared area;
 * then the signal thread and the reporter (telemetry from here on: a rank that fails to load is
 * still seen; a reporter that cannot start is logged by it and the rank serves without it). */
static tdm_status_t rank_map_shm(tdm_worker_t *w, char *err, size_t err_len)
{
    char path[600];
    size_t sz;
    tdm_status_t st;
    tdm_worker_shm_path(w->prefix, SHM_PROGRESS, path, sizeof(path));
    TDM_CHECK_GOTO(tdm_progress_open(path, &w->page), st, fail);
    if (w->page->n_ranks != w->tp || w->rank >= w->tp) {
        snprintf(err, err_len, "group of %u ranks, but --tp-size %u --rank %u", w->page->n_ranks,
                 w->tp, w->rank);
        return TDM_ERR_INVAL;
    }
    for (int i = 0; i < 2; i++) {
        tdm_worker_shm_path(w->prefix, SHM_TENSOR + i, path, sizeof(path));
        TDM_CHECK_GOTO(tdm_worker_map_file(path, &w->region_size[i], &w->region[i]), st, fail);
    }
    tdm_worker_shm_path(w->prefix, SHM_GROUP, path, sizeof(path));
    TDM_CHECK_GOTO(tdm_worker_map_file(path, &sz, (void **)&w->shared), st, fail);
    if (sz != sizeof(*w->shared) || w->shared->magic != TDM_WORKER_SHARED_MAGIC) {
        st = TDM_ERR_FORMAT;
        goto fail;
    }
    TDM_CHECK_GOTO(tdm_shm_comm_init(w->region[0], w->rank, w->page, 0, &w->tensor), st, fail);
    w->have_tensor = 1;
    TDM_CHECK_GOTO(tdm_shm_comm_init(w->region[1], w->rank, w->page, 1, &w->plan), st, fail);
    w->have_plan = 1;
    if (pthread_create(&w->sig_thread, NULL, sig_main, w) == 0)
        w->have_sig_thread = 1;
    if (w->hooks.report.rank_start && w->hooks.report.rank_start(w->hooks.report.ctx, w) == TDM_OK)
        w->report_started = 1;
    return TDM_OK;
fail:
    snprintf(err, err_len, "group shared files under %s: %s", w->prefix, tdm_status_str(st));
    return st;
}

/* The model view of this rank's TP share, and (rank 0) the tokenizer. */
static tdm_status_t rank_load_model(tdm_worker_t *w, char *err, size_t err_len)
{
    char path[600];
    TDM_TRY(tdm_model_load(w->cfg->model_path, &w->model, err, err_len));
    if (w->rank != 0)
        return TDM_OK;
    snprintf(path, sizeof(path), "%s/tokenizer.json", w->cfg->model_path);
    return tdm_tok_load(path, &w->tok, err, err_len);
}

static tdm_status_t kv_dtype_of(const tdm_worker_config_t *cfg, const tdm_model_config_t *mc,
                                tdm_dtype_t *ret)
{
    if (!strcmp(cfg->kv_cache_dtype, "auto")) {
        *ret = mc->weight_dtype == TDM_DTYPE_F32 ? TDM_DTYPE_F32 : TDM_DTYPE_BF16;
        return TDM_OK;
    }
    return tdm_dtype_parse(cfg->kv_cache_dtype, ret);
}

/* KV sizing: dtype, layout of this rank's share, slots, chunk, and the page count (CPU: the
 * --kv-cpu-bytes budget capped at every slot at full context; --device cuda: only that cap, the
 * engine sizes its pool from the free GPU memory and --mem-fraction-static). */
static tdm_status_t rank_size_kv(tdm_worker_t *w, char *err, size_t err_len)
{
    const tdm_worker_config_t *cfg = w->cfg;
    const tdm_model_config_t *mc = tdm_model_config(w->model);
    tdm_status_t st;
    if (kv_dtype_of(cfg, mc, &w->kv_dtype) != TDM_OK) {
        snprintf(err, err_len, "--kv-cache-dtype %s is not supported", cfg->kv_cache_dtype);
        return TDM_ERR_INVAL;
    }
    w->max_running =
        cfg->max_running_requests > 0 ? (uint32_t)cfg->max_running_requests : DEFAULT_MAX_RUNNING;
    w->max_context = mc->max_position_embeddings;
    w->page_size = (uint32_t)cfg->page_size;
    w->chunk = cfg->chunked_prefill_size > 0 ? (uint32_t)cfg->chunked_prefill_size : w->max_context;
    if (!w->on_cuda && w->chunk > CPU_CHUNK_CAP)
        w->chunk = CPU_CHUNK_CAP;
    st = tdm_kv_layout_init(mc, w->kv_dtype, w->page_size, w->tp, w->rank, &w->layout);
    if (st != TDM_OK) {
        snprintf(err, err_len, "KV layout: %s", tdm_status_str(st));
        return st;
    }
    uint64_t budget = (uint64_t)cfg->kv_cpu_bytes;
    uint64_t cap = (uint64_t)w->max_running * ((w->max_context + w->page_size - 1) / w->page_size);
    if (cap > UINT32_MAX - 1)
        st = w->on_cuda ? TDM_ERR_RANGE
                        : tdm_kv_pool_configure(&w->layout, budget, 0, &w->num_pages);
    else if (w->on_cuda)
        w->num_pages = (uint32_t)cap;
    else
        st = tdm_kv_pool_configure(&w->layout, budget, (uint32_t)cap, &w->num_pages);
    if (st != TDM_OK) {
        snprintf(err, err_len, "KV pool: %" PRIu64 " bytes hold no page", budget);
        return st;
    }
    return TDM_OK;
}

/* PD pools, before the executor: at TP > 1 each rank's pool is a shared file rank 0 maps; decode
 * at TP 1 on the CPU starts the transfer engine now, over a pool it allocates through UCX that
 * the executor then adopts. */
static tdm_status_t rank_pd_pools(tdm_worker_t *w, char *err, size_t err_len)
{
    const char *mode = w->cfg->disaggregation_mode;
    int pd = !strcmp(mode, "prefill") || !strcmp(mode, "decode");
    if (w->tp > 1 && pd)
        return tdm_worker_pd_kv_create(w, &w->layout, err, err_len);
    if (w->tp == 1 && !w->on_cuda && !strcmp(mode, "decode")) {
        TDM_TRY(tdm_worker_pd_check(w->cfg, &w->pd, w->pd_host, sizeof(w->pd_host), &w->pd_port,
                                    err, err_len));
        TDM_TRY(tdm_worker_pd_start(w, &w->layout, err, err_len));
        w->xfer_owns_kv = 1;
        w->ucx_kv = tdm_kv_pool_buffers(tdm_xfer_kv_pool(w->xfer, 0))->base;
        (void)tdm_kv_layout_pool_bytes(&w->layout, w->num_pages, &w->ucx_kv_bytes);
    }
    return TDM_OK;
}

/* The executor over this rank's pool (and HiCache's host tier), with --fault-at-start armed
 * first; then the per-rank bytes go to the shared area and the rank counts as loaded. */
static tdm_status_t rank_exec(tdm_worker_t *w, uint64_t t0, char *err, size_t err_len)
{
    const tdm_worker_config_t *cfg = w->cfg;
    tdm_hicache_cfg_t hcfg;
    if (w->rank == 0)
        TDM_TRY(tdm_worker_faults_at_start(cfg, &w->shared->faults, w->tp, err, err_len));
    if (cfg->enable_hierarchical_cache)
        TDM_TRY(tdm_worker_hicache_cfg(cfg, &w->layout, w->num_pages, w->max_running,
                                       &w->shared->faults, &hcfg, err, err_len));
    tdm_exec_cfg_t xc = {.model = w->model,
                         .tp_size = w->tp,
                         .rank = w->rank,
                         .kv_dtype = w->kv_dtype,
                         .page_size = w->page_size,
                         .num_pages = w->num_pages,
                         .max_seqs = w->max_running,
                         .max_tokens = w->chunk + w->max_running,
                         .max_context = w->max_context,
                         .threads = 0,
                         .tensor = &w->tensor,
                         .plan = &w->plan,
                         .page = w->page,
                         .faults = &w->shared->faults,
                         .kv_mem = w->ucx_kv ? w->ucx_kv : w->kv_mem,
                         .kv_mem_bytes = w->ucx_kv ? w->ucx_kv_bytes : w->kv_mem_bytes,
                         .hicache = cfg->enable_hierarchical_cache ? &hcfg : NULL,
                         .device_cuda = w->on_cuda,
                         .mem_fraction_static = cfg->mem_fraction_static,
                         .cuda_backend = cfg->cuda_backend,
                         .gpu_deadline_us = (uint64_t)(2e6 * cfg->health_progress_timeout)};
    tdm_status_t st = tdm_exec_init(&xc, &w->x, err, err_len);
    if (xc.hicache && (st == TDM_OK || st == TDM_ERR_FORMAT))
        tdm_worker_hicache_report(&w->hooks.report, &hcfg, st != TDM_OK);
    if (st != TDM_OK)
        return st;
    w->num_pages = tdm_kv_pool_num_pages(tdm_exec_pool(w->x)); /* cuda: what fitted */
    if ((w->kv_mem || w->ucx_kv) &&
        tdm_kv_pool_buffers(tdm_exec_pool(w->x))->base != (w->ucx_kv ? w->ucx_kv : w->kv_mem)) {
        snprintf(err, err_len,
                 "--disaggregation-mode %s at --tp-size %u needs an executor that keeps its KV "
                 "pool in the shared memory it is given (tdm_exec_cfg_t.kv_mem); this build's "
                 "does not",
                 cfg->disaggregation_mode, w->tp);
        return TDM_ERR_UNSUPPORTED;
    }
    atomic_store(&w->shared->resident_weight_bytes[w->rank], tdm_exec_weight_bytes(w->x));
    atomic_store(&w->shared->kv_pool_bytes[w->rank], tdm_exec_kv_bytes(w->x));
    atomic_fetch_add(&w->shared->ranks_loaded, 1);
    tdm_info(TDM_SUB_CORE,
             "msg=\"rank %u/%u loaded in %.2f s: %.1f MiB of weights, %u KV pages of %u tokens "
             "(%s), %u slots, %u-token chunks, %s loop\"",
             w->rank, w->tp, (double)(tdm_time_mono_us() - t0) / 1e6,
             (double)tdm_exec_weight_bytes(w->x) / (1 << 20), w->num_pages, w->page_size,
             tdm_dtype_name(w->kv_dtype), w->max_running, w->chunk,
             cfg->disable_overlap_schedule ? "lockstep" : "overlap");
    return TDM_OK;
}

/* Rank 0 once loaded: the transfer engine (PD), the scheduler, the HTTP layer once every rank
 * has loaded, the self-test client; then the loop until the scheduler stops. Returns the exit
 * code; *ret_failed is set when the start itself failed (err says why): an HTTP layer that cannot
 * start (its port taken, say) stops the scheduler, whose SHUTDOWN plan lets the followers leave,
 * and the rank exits 1 — a failed start, never a clean exit. */
static int rank0_serve(tdm_worker_t *w, int *ret_failed, char *err, size_t err_len)
{
    const tdm_worker_config_t *cfg = w->cfg;
    pthread_t st_thread;
    int have_st = 0;
    tdm_status_t st;
    *ret_failed = 1;
    st =
        tdm_worker_pd_check(cfg, &w->pd, w->pd_host, sizeof(w->pd_host), &w->pd_port, err, err_len);
    if (st == TDM_OK && w->pd != TDM_SCHED_PD_NONE && !w->xfer)
        st = tdm_worker_pd_start(w, NULL, err, err_len);
    if (st != TDM_OK)
        return 1;
    tdm_sched_cfg_t sc = {.max_running = w->max_running,
                          .max_queued = (uint32_t)cfg->max_queued_requests,
                          .chunk_tokens = w->chunk,
                          .overlap = !cfg->disable_overlap_schedule,
                          .idle_plan_us = IDLE_PLAN_US,
                          .tok = w->tok,
                          .mc = tdm_model_config(w->model),
                          .pd = w->pd,
                          .xfer = w->xfer,
                          .pd_prefix = !cfg->disaggregation_disable_decode_prefix,
                          .on_event = tdm_worker_sched_event,
                          .on_event_ctx = &w->hooks.report};
    watchdog_setup(w);
    if (w->wd_usec) {
        sc.on_iter = watchdog_on_iter;
        sc.on_iter_ctx = w;
    }
    if (tdm_sched_init(&sc, w->x, &w->sched, err, err_len) != TDM_OK)
        return 1;
    *ret_failed = 0;
    atomic_store(&w->kick, w->sched);
    while (atomic_load(&w->shared->ranks_loaded) < w->tp && !atomic_load(&w->page->abort) &&
           !w->stop)
        tdm_time_sleep_us(10000);
    int start_failed = 0, aborted = 0;
    if (atomic_load(&w->page->abort) && !w->stop) {
        /* another rank died while loading (the launcher's abort word): that rank's exit is the
         * failure reported; rank 0 neither binds nor writes the ready file */
        tdm_warn(TDM_SUB_CORE, "msg=\"rank 0: the group was aborted before every rank loaded\"");
        aborted = 1;
        tdm_worker_request_stop(w);
    } else if (!w->stop) {
        atomic_store(&w->page->loaded, 1);
        if (w->hooks.api.serve) {
            char why[384] = "";
            st = w->hooks.api.serve(w->hooks.api.ctx, w, why, sizeof(why));
            if (st != TDM_OK) {
                snprintf(err, err_len, "HTTP layer: %s", why[0] ? why : tdm_status_str(st));
                start_failed = 1;
                tdm_worker_request_stop(w);
            } else {
                w->api_started = 1;
            }
        }
    }
    if (getenv("TDM_SCHED_SELFTEST") &&
        pthread_create(&st_thread, NULL, tdm_worker_selftest_main, w) == 0)
        have_st = 1;
    if (!w->stop && notify_is_ours())
        sd_notify(0, "READY=1\nSTATUS=serving");
    if (w->stop)
        tdm_sched_stop(w->sched);
    st = tdm_sched_run(w->sched);
    if (have_st)
        pthread_join(st_thread, NULL);
    if (w->api_started && w->hooks.api.stop)
        w->hooks.api.stop(w->hooks.api.ctx, w);
    *ret_failed = start_failed;
    return st == TDM_OK && !start_failed && !aborted ? 0 : 1;
}

/* The first rank whose start failed tells the launcher why (worker.h, the shared area). */
static void record_start_error(tdm_worker_t *w, const char *why)
{
    tdm_worker_shared_t *sh = w->shared;
    uint32_t none = 0;
    if (!sh || !atomic_compare_exchange_strong(&sh->start_error_rank, &none, w->rank + 1))
        return;
    snprintf(sh->start_error, sizeof(sh->start_error), "%s", why);
    atomic_store(&sh->start_error_set, 1);
}

/* Leave: the slot says not alive, the signal thread ends, the transfer engine goes (its threads
 * post events to the reporter and read rank 0's pool — unless the pool is the engine's, whose
 * decode threads do not read it: then the scheduler and the executor over it go first), the
 * reporter stops before the page is unmapped (it reads the page), and the rest is freed. */
static void rank_teardown(tdm_worker_t *w, int rc)
{
    if (w->page) {
        tdm_progress_slot_t *sl = &w->page->slot[w->rank];
        tdm_progress_write_begin(sl);
        sl->rec.alive = 0;
        tdm_progress_write_end(sl);
    }
    if (w->have_sig_thread) {
        pthread_kill(w->sig_thread, SIGUSR1);
        pthread_join(w->sig_thread, NULL);
    }
    if (w->xfer_owns_kv) {
        atomic_store(&w->kick, NULL);
        tdm_sched_free(w->sched);
        w->sched = NULL;
        tdm_exec_free(w->x);
        w->x = NULL;
    }
    tdm_xfer_free(w->xfer);
    w->xfer = NULL;
    if (w->report_started && w->hooks.report.rank_stop)
        w->hooks.report.rank_stop(w->hooks.report.ctx, w, rc == 0);
    rank_free(w);
}

int tdm_worker_rank_main(tdm_worker_t *w)
{
    const tdm_worker_config_t *cfg = w->cfg;
    const char *prefix = getenv("TDM_GROUP_SHM");
    char err[512] = "";
    int rc;

    w->rank = (uint32_t)cfg->rank;
    w->tp = (uint32_t)cfg->tp_size;
    w->on_cuda = strcmp(cfg->device, "cuda") == 0;
    rc = rank_check(w, prefix);
    if (rc != 0)
        return rc;
    snprintf(w->prefix, sizeof(w->prefix), "%s", prefix);
    if (rank_signals(w, err, sizeof(err)) != TDM_OK) {
        tdm_err(TDM_SUB_CORE, "msg=\"rank %u: %s\"", w->rank, err);
        return 1;
    }
    uint64_t t0 = tdm_time_mono_us();
    int failed = 1;
    if (rank_map_shm(w, err, sizeof(err)) != TDM_OK ||
        rank_load_model(w, err, sizeof(err)) != TDM_OK ||
        rank_size_kv(w, err, sizeof(err)) != TDM_OK ||
        rank_pd_pools(w, err, sizeof(err)) != TDM_OK ||
        rank_exec(w, t0, err, sizeof(err)) != TDM_OK)
        rc = 1;
    else if (w->rank != 0) {
        tdm_status_t st = tdm_exec_follow(w->x, &w->stop);
        rc = st == TDM_OK ? 0 : 1;
        failed = 0;
        if (st != TDM_OK)
            tdm_err(TDM_SUB_CORE, "msg=\"rank %u: loop ended: %s\"", w->rank, tdm_status_str(st));
    } else {
        rc = rank0_serve(w, &failed, err, sizeof(err));
    }
    if (failed) {
        tdm_err(TDM_SUB_CORE, "msg=\"rank %u failed to start: %s\"", w->rank, err);
        record_start_error(w, err);
        rc = 1;
    }
    rank_teardown(w, rc);
    return rc;
}
