/*
 * launcher.c — tandem-worker without --rank (docs/serving.md "Processes"): create the group's
 * shared files before anything that cannot survive a fork (CUDA, UCX), posix_spawn one process
 * per rank, supervise. The first abnormal rank exit takes the whole group down: a log line naming
 * the rank, the on_rank_exit hook (the reporter's worker_lost event), the abort word so peers leave
 * their collectives, SIGTERM to the others and SIGKILL after 2 s. SIGTERM/SIGINT are forwarded.
 * The shm files are removed on every path. The launcher never restarts a rank. The launch hooks
 * (worker.h) learn the group id once the files exist and the first abnormal rank exit (with
 * --control-plane the reporter posts `worker_lost` from it). A rank whose start failed (a port it
 * could not bind, a model it could not load) left its reason in the shared area: the launcher
 * logs `group failed to start: rank R: why`, passes it to the hook and exits 1.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tdm/log.h>
#include <tdm/mapfile.h>
#include <tdm/mem.h>
#include <tdm/time.h>
#include <tdm/xfer.h>

#include "dataplane/worker/worker_int.h"

extern char **environ;

static const char *const shm_names[] = {"progress", "tensor", "plan", "group"};

void tdm_worker_shm_path(const char *prefix, int which, char *out, size_t out_len)
{
    snprintf(out, out_len, "%s-%s", prefix, shm_names[which]);
}

static void unlink_all(const char *prefix)
{
    char path[512];
    for (int i = 0; i < SHM_COUNT; i++) {
        tdm_worker_shm_path(prefix, i, path, sizeof(path));
        (void)unlink(path);
    }
    for (int r = 0; r < TDM_XFER_RANKS_MAX; r++) { /* PD at TP > 1: the ranks' KV pools */
        snprintf(path, sizeof(path), "%s-kv%d", prefix, r);
        (void)unlink(path);
    }
}

/* The launcher's PID as the group knows it. TDM_TEST_LAUNCHER_PID (tests only) stands in for a
 * PID namespace where the machine refuses one: a worker started twice as PID 1. */
static uint64_t launcher_pid(void)
{
    const char *t = getenv("TDM_TEST_LAUNCHER_PID");
    return t && *t ? strtoull(t, NULL, 10) : (uint64_t)getpid();
}

/* The group id, telemetry's instance_id (docs/contracts.md §c): new on every start. A PID alone
 * repeats (PID 1 in every container), and tandemd's exactly-once check would take a second run's
 * batches for replays of the first's: 64 random bits, with the PID and the start time folded in
 * should the kernel's generator fail. */
static uint64_t new_group_id(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = 0;
    uint64_t x = r ^ (launcher_pid() << 40) ^ tdm_time_wall_us() ^ tdm_time_mono_us() << 20;
    /* splitmix64's finalizer: spreads the fallback's few varying bits */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x ? x : 1;
}

/* Every /dev/shm/tandem-<pid>-* of one group, whatever its suffix: the four group files, the
 * ranks' -kv<r> pools, the transfer relay's -xfer (docs/serving.md) and any a later version adds.
 */
static void unlink_group(long pid)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    char prefix[64], path[512];
    int plen = snprintf(prefix, sizeof(prefix), "tandem-%ld-", pid);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        (void)unlink(path);
    }
    closedir(d);
}

/* A launcher killed with SIGKILL cannot remove its group's files (/dev/shm/tandem-<pid>-*). Each
 * launcher holds a flock on its progress file while it runs; at start, the files of a group whose
 * progress file nobody holds go (all of them: unlink_group). A lock, not the PID: PIDs of other
 * PID namespaces sharing /dev/shm are not visible here. */
static void remove_stale_files(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    unsigned removed = 0;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        char *end;
        if (strncmp(e->d_name, "tandem-", 7) || e->d_name[7] < '1' || e->d_name[7] > '9')
            continue;
        long pid = strtol(e->d_name + 7, &end, 10);
        if (strcmp(end, "-progress") || pid == (long)getpid())
            continue;
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            unlink_group(pid);
            removed++;
        }
        close(fd);
    }
    closedir(d);
    if (removed)
        tdm_info(TDM_SUB_CORE,
                 "msg=\"removed the shared files of %u launcher%s no longer running\"", removed,
                 removed > 1 ? "s" : "");
}

/* The lock that marks this launcher's files as in use (see remove_stale_files), taken before
 * they exist; -1 when it cannot be (the files are then only at risk from a later start). */
static int lock_files(const char *prefix)
{
    char path[512];
    tdm_worker_shm_path(prefix, SHM_PROGRESS, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The group's files; the shared area stays mapped in *ret_shared (a failed start's reason). */
static tdm_status_t create_files(const char *prefix, uint32_t n, tdm_progress_page_t **ret_page,
                                 tdm_worker_shared_t **ret_shared)
{
    char path[512];
    tdm_status_t st;
    void *m;
    tdm_shm_comm_cfg_t cc[2] = {{n, TDM_WORKER_TENSOR_SLOT, 2000, 100},
                                {n, TDM_WORKER_PLAN_SLOT, 2000, 100}};
    tdm_worker_shm_path(prefix, SHM_PROGRESS, path, sizeof(path));
    TDM_TRY(tdm_progress_create(path, (uint16_t)n, new_group_id(), ret_page));
    for (int i = 0; i < 2; i++) {
        size_t sz = tdm_shm_comm_region_size(&cc[i]);
        tdm_worker_shm_path(prefix, SHM_TENSOR + i, path, sizeof(path));
        TDM_TRY(tdm_mapfile_create(path, sz, &m));
        st = tdm_shm_comm_region_init(m, &cc[i]);
        munmap(m, sz);
        TDM_TRY(st);
    }
    tdm_worker_shm_path(prefix, SHM_GROUP, path, sizeof(path));
    TDM_TRY(tdm_mapfile_create(path, sizeof(tdm_worker_shared_t), &m));
    tdm_worker_shared_t *g = m;
    g->n_ranks = (uint16_t)n;
    g->version = TDM_WORKER_SHARED_VERSION;
    g->magic = TDM_WORKER_SHARED_MAGIC;
    *ret_shared = g;
    return TDM_OK;
}

/* "rank R: why" when a rank's start failed (worker.h, the shared area), else "" */
static void start_error(const tdm_worker_shared_t *sh, char *out, size_t len)
{
    out[0] = '\0';
    if (sh && atomic_load(&sh->start_error_set))
        snprintf(out, len, "rank %u: %.*s", atomic_load(&sh->start_error_rank) - 1,
                 (int)sizeof(sh->start_error), sh->start_error);
}

/* 1 if a rank has sat inside one collective since before `t` (mono µs). */
static int in_coll_since(const tdm_progress_page_t *p, uint32_t n, uint64_t t)
{
    for (uint32_t r = 0; r < n; r++) {
        tdm_rank_record_t rec;
        tdm_progress_read(&p->slot[r], &rec);
        if (rec.in_coll_op != TDM_COLL_NONE && rec.in_coll_since_us < t)
            return 1;
    }
    return 0;
}

static pid_t spawn_rank(uint32_t r, int argc, char **argv, const char *prefix,
                        const sigset_t *child_mask, char *why, size_t why_len)
{
    char rank_s[16], env_s[600], flag_s[] = "--rank";
    snprintf(rank_s, sizeof(rank_s), "%u", r);
    snprintf(env_s, sizeof(env_s), "TDM_GROUP_SHM=%s", prefix);
    char **av = tdm_calloc((size_t)argc + 4, sizeof(char *));
    int k = 0;
    av[k++] = argv[0];
    for (int i = 1; i < argc; i++)
        av[k++] = argv[i];
    av[k++] = flag_s;
    av[k++] = rank_s;
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **ev = tdm_calloc(ne + 2, sizeof(char *));
    size_t j = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "TDM_GROUP_SHM=", 14) && strncmp(environ[i], "TDM_RANK=", 9))
            ev[j++] = environ[i];
    ev[j++] = env_s;
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setsigmask(&at, child_mask);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, "/proc/self/exe", NULL, &at, av, ev);
    posix_spawnattr_destroy(&at);
    tdm_free(av);
    tdm_free(ev);
    if (rc != 0) {
        snprintf(why, why_len, "cannot spawn rank %u: %s", r, strerror(rc));
        return -1;
    }
    return pid;
}

int tdm_worker_launch(tdm_worker_t *w, int argc, char **argv)
{
    const tdm_worker_config_t *cfg = w->cfg;
    const tdm_worker_launch_hooks_t *hooks = &w->hooks.launch;
    uint32_t n = (uint32_t)cfg->tp_size;
    char prefix[256];
    tdm_progress_page_t *page = NULL;
    tdm_worker_shared_t *shared = NULL;
    char why[480] = "";
    pid_t *pids = tdm_calloc(n, sizeof(pid_t));
    int *exited = tdm_calloc(n, sizeof(int));
    uint32_t n_exited = 0;
    int failed = 0, rc = 1;
    uint64_t kill_at = 0; /* SIGKILL whoever is left at this time (0 = not yet) */
    uint64_t term_at = 0; /* when SIGTERM/SIGINT arrived (0 = not yet) */
    sigset_t mask, old;

    char pd_err[512], pd_host[256];
    tdm_sched_pd_t pd;
    uint16_t pd_port;
    if (tdm_worker_pd_check(cfg, &pd, pd_host, sizeof(pd_host), &pd_port, pd_err, sizeof(pd_err)) !=
        TDM_OK) {
        tdm_err(TDM_SUB_CORE, "msg=\"group failed to start: %s\"", pd_err);
        tdm_free(pids);
        tdm_free(exited);
        return 2;
    }
    remove_stale_files();
    snprintf(prefix, sizeof(prefix), "/dev/shm/tandem-%d", (int)getpid());
    int lockfd = lock_files(prefix);
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, &old);
    if (create_files(prefix, n, &page, &shared) != TDM_OK) {
        tdm_err(TDM_SUB_CORE,
                "msg=\"group failed to start: cannot create the group's shared files %s-*: %s\"",
                prefix, strerror(errno));
        goto out;
    }
    if (hooks->group_created)
        hooks->group_created(hooks->ctx, cfg, page->group_id);
    tdm_info(TDM_SUB_CORE, "msg=\"launching %u rank%s (group %s)\"", n, n > 1 ? "s" : "", prefix);
    for (uint32_t r = 0; r < n; r++) {
        pids[r] = spawn_rank(r, argc, argv, prefix, &old, why, sizeof(why));
        if (pids[r] < 0) {
            failed = 1;
            exited[r] = 1;
            n_exited++;
            atomic_store(&page->abort, 1);
            for (uint32_t q = 0; q < r; q++)
                kill(pids[q], SIGTERM);
            kill_at = tdm_time_mono_us() + 2000000;
            n_exited += n - r - 1;
            for (uint32_t q = r + 1; q < n; q++)
                exited[q] = 1;
            break;
        }
    }
    while (n_exited < n) {
        struct timespec ts = {0, 100 * 1000000L};
        int sig = sigtimedwait(&mask, NULL, &ts);
        uint64_t now = tdm_time_mono_us();
        if (sig == SIGTERM || sig == SIGINT) {
            tdm_info(TDM_SUB_CORE, "msg=\"%s: stopping the group\"",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT");
            for (uint32_t r = 0; r < n; r++)
                if (!exited[r])
                    kill(pids[r], SIGTERM);
            if (!kill_at) /* the ranks drain first (--drain-timeout); a clean exit gets 10 s */
                kill_at = now + (uint64_t)(cfg->drain_timeout * 1e6) + 10000000;
            if (!term_at)
                term_at = now;
        }
        /* A rank still inside a collective it entered before the stop request, 2 s later, cannot
         * take part in the SHUTDOWN plan (a wedged or diverged group, the remedy's case): abort
         * the group's collectives so every rank leaves now rather than at the SIGKILL. */
        if (term_at && now - term_at >= 2000000 && !atomic_load(&page->abort) &&
            in_coll_since(page, n, term_at)) {
            tdm_err(TDM_SUB_CORE, "msg=\"a rank is stuck in a collective: aborting the group\"");
            atomic_store(&page->abort, 1);
        }
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            uint32_t r = 0;
            while (r < n && pids[r] != p)
                r++;
            if (r == n || exited[r])
                continue;
            exited[r] = 1;
            n_exited++;
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
            int signo = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
            if (code == 0 && signo == 0) {
                if (!kill_at)
                    kill_at = now + 5000000; /* the others follow the SHUTDOWN plan */
                continue;
            }
            if (signo)
                tdm_warn(TDM_SUB_CORE, "msg=\"rank %u (pid %d) exited (signal %d, %s)\"", r, (int)p,
                         signo, strsignal(signo));
            else
                tdm_info(TDM_SUB_CORE, "msg=\"rank %u (pid %d) exited (code %d)\"", r, (int)p,
                         code);
            if (!failed) {
                failed = 1;
                start_error(shared, why, sizeof(why));
                if (hooks->rank_exit)
                    hooks->rank_exit(hooks->ctx, r, (int32_t)p, code, signo, term_at != 0,
                                     why[0] ? why : NULL);
                uint32_t zero = 0;
                atomic_compare_exchange_strong(&page->dead_rank_plus1, &zero, r + 1);
                atomic_store(&page->abort, 1);
                for (uint32_t q = 0; q < n; q++)
                    if (!exited[q])
                        kill(pids[q], SIGTERM);
                kill_at = now + 2000000;
            }
        }
        if (kill_at && now >= kill_at && n_exited < n) {
            atomic_store(&page->abort, 1);
            for (uint32_t r = 0; r < n; r++)
                if (!exited[r]) {
                    tdm_warn(TDM_SUB_CORE, "msg=\"rank %u (pid %d) did not exit: SIGKILL\"", r,
                             (int)pids[r]);
                    kill(pids[r], SIGKILL);
                    failed = 1;
                }
            kill_at = now + 1000000;
        }
    }
    rc = failed ? 1 : 0;
    /* a start that failed is said last, with its reason (the supervisor reads worker.log's last
     * such line into the group's last error); a rank that says why exits 1, never cleanly */
    if (!why[0]) /* a spawn that failed said why already */
        start_error(shared, why, sizeof(why));
    if (why[0])
        tdm_err(TDM_SUB_CORE, "msg=\"group failed to start: %s\"", why);
    else
        tdm_info(TDM_SUB_CORE, "msg=\"group exited%s\"", failed ? " after a failure" : " cleanly");
out:
    if (shared)
        munmap(shared, sizeof(*shared));
    tdm_progress_close(page);
    unlink_all(prefix);
    if (lockfd >= 0)
        close(lockfd);
    sigprocmask(SIG_SETMASK, &old, NULL);
    tdm_free(pids);
    tdm_free(exited);
    return rc;
}
