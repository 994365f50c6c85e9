/*
 * test-tp-shm.c — the shared-memory collectives across real processes (fork): all-reduce equals
 * the rank-ordered tree of kernels/backend.h bit for bit (also chunked), broadcast, allgather;
 * the recorder shows a rank stuck inside a collective (op + seq) while a peer skips it; the abort
 * word unblocks it; a dead peer is detected; mismatched ops hang until abort (like NCCL); and the
 * /health verdict (I8) on a virtual clock.
 */
#include "config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tdm/time.h>

#include "dataplane/tp/comm.h"
#include "kernels/backend.h"
#include "tap.h"

typedef struct group {
    tdm_progress_page_t *page;
    void *region;
    size_t region_size;
    uint32_t n;
} group_t;

static void group_init(group_t *g, uint32_t n, size_t slot_bytes)
{
    tdm_shm_comm_cfg_t cfg = {
        .n_ranks = n, .slot_bytes = slot_bytes, .spin_iters = 200, .peer_check_ms = 20};
    g->n = n;
    tdm_progress_create_anon((uint16_t)n, 42, &g->page);
    g->region_size = tdm_shm_comm_region_size(&cfg);
    g->region =
        mmap(NULL, g->region_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    tdm_shm_comm_region_init(g->region, &cfg);
}

static void group_free(group_t *g)
{
    munmap(g->region, g->region_size);
    tdm_progress_close(g->page);
}

/* deterministic per-rank data */
static float val(uint32_t rank, size_t i, int round)
{
    uint32_t x = (uint32_t)(rank * 2654435761u) ^ (uint32_t)(i * 40503u) ^ (uint32_t)round * 97u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return ((float)(x & 0xffffff) / (float)0x1000000 - 0.5f) * (float)(1 + (x % 7));
}

enum { NELEM = 3000, ROUNDS = 5 };

/* child: ROUNDS all-reduces + broadcast + allgather, checked against the local reference */
static int child_ops(group_t *g, uint32_t rank)
{
    tdm_comm_t c;
    if (tdm_shm_comm_init(g->region, rank, g->page, 7, &c) != TDM_OK)
        return 10;
    float *buf = malloc(NELEM * sizeof(float)), *ref = malloc(NELEM * sizeof(float));
    float *all[TDM_PROGRESS_MAX_RANKS];
    for (uint32_t q = 0; q < g->n; q++)
        all[q] = malloc(NELEM * sizeof(float));
    int bad = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < NELEM; i++) {
            buf[i] = val(rank, i, round);
            for (uint32_t q = 0; q < g->n; q++)
                all[q][i] = val(q, i, round);
        }
        tdm_reduce_tree_combine((const float *const *)all, g->n, ref, NELEM);
        if (tdm_comm_allreduce_f32(&c, buf, NELEM) != TDM_OK)
            return 11;
        if (memcmp(buf, ref, NELEM * sizeof(float)) != 0)
            bad = 12;
    }
    char msg[100];
    memset(msg, 0, sizeof(msg));
    if (rank == 1)
        strcpy(msg, "plan from rank 1");
    if (tdm_comm_broadcast(&c, msg, sizeof(msg), 1) != TDM_OK || strcmp(msg, "plan from rank 1"))
        bad = 13;
    uint32_t mine = 1000 + rank, got[TDM_PROGRESS_MAX_RANKS];
    if (tdm_comm_allgather(&c, &mine, got, sizeof(mine)) != TDM_OK)
        bad = 14;
    for (uint32_t q = 0; q < g->n; q++)
        if (got[q] != 1000 + q)
            bad = 15;
    if (tdm_comm_barrier(&c) != TDM_OK)
        bad = 16;
    tdm_comm_destroy(&c);
    return bad;
}

static int run_group(uint32_t n, size_t slot_bytes, int *ret_codes)
{
    group_t g;
    group_init(&g, n, slot_bytes);
    pid_t pids[8];
    for (uint32_t r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(child_ops(&g, r));
    }
    int all_ok = 1;
    for (uint32_t r = 0; r < n; r++) {
        int status;
        waitpid(pids[r], &status, 0);
        ret_codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
        if (ret_codes[r] != 0)
            all_ok = 0;
    }
    tdm_rank_record_t rec;
    tdm_progress_read(&g.page->slot[n - 1], &rec);
    int recorded = rec.coll_seq == ROUNDS + 3 && rec.in_coll_op == TDM_COLL_NONE;
    tdm_rank_record_t rec0;
    tdm_progress_read(&g.page->slot[0], &rec0);
    recorded = recorded && rec0.coll_hash == rec.coll_hash;
    group_free(&g);
    return all_ok && recorded;
}

static int child_stuck(group_t *g, uint32_t rank, int skip)
{
    tdm_comm_t c;
    tdm_shm_comm_init(g->region, rank, g->page, 7, &c);
    float x[4] = {1, 2, 3, 4};
    if (skip) { /* the rank_idle_path shape: this rank takes the idle path and never joins */
        for (;;)
            pause();
    }
    tdm_status_t st = tdm_comm_allreduce_f32(&c, x, 4);
    return st == TDM_ERR_ABORTED ? 0 : st == TDM_ERR_PEER ? 3 : 1;
}

int main(void)
{
    int codes[8] = {0};
    int good = run_group(2, 4096, codes);
    ok(good,
       "2 ranks: all-reduce == rank-ordered tree bit for bit, broadcast, allgather, "
       "barrier, recorder counts (rc %d %d)",
       codes[0], codes[1]);
    good = run_group(4, 256, codes);
    ok(good, "4 ranks, chunked through 256-byte slots (rc %d %d %d %d)", codes[0], codes[1],
       codes[2], codes[3]);

    /* a rank that skips the collective: the other is visibly stuck, abort releases it */
    group_t g;
    group_init(&g, 2, 4096);
    pid_t p0 = fork();
    if (p0 == 0)
        _exit(child_stuck(&g, 0, 0));
    pid_t p1 = fork();
    if (p1 == 0)
        _exit(child_stuck(&g, 1, 1));
    tdm_time_sleep_us(300000);
    tdm_rank_record_t rec;
    tdm_progress_read(&g.page->slot[0], &rec);
    ok(rec.in_coll_op == TDM_COLL_ALLREDUCE && rec.in_coll_seq == 0 &&
           tdm_time_mono_us() - rec.in_coll_since_us >= 200000,
       "recorder: rank 0 is inside allreduce seq 0 while rank 1 skipped it");
    tdm_rank_record_t rec1;
    tdm_progress_read(&g.page->slot[1], &rec1);
    ok(rec1.in_coll_op == TDM_COLL_NONE && rec1.coll_seq == 0, "recorder: rank 1 is not");
    {
        /* the /health reason names the waiting rank and the peer that is not in the collective */
        tdm_comm_t w0 = {.rank = 0, .size = 2, .page = g.page},
                   w1 = {.rank = 1, .size = 2, .page = g.page};
        uint64_t t = tdm_time_mono_us();
        tdm_comm_record_iter(&w0, 7, TDM_PATH_BATCH, 0xab, 2, 0, 2, t - 4000000);
        tdm_comm_record_iter(&w1, 8, TDM_PATH_IDLE, 0xab, 0, 0, 0, t);
        char hwhy[256];
        int healthy = tdm_progress_healthy(g.page, t, 3000000, 60000000, hwhy, sizeof(hwhy));
        ok(!healthy && strstr(hwhy, "rank 0 no progress") && strstr(hwhy, "in allreduce") &&
               strstr(hwhy, "rank 1 is not in it") && strstr(hwhy, "idle path"),
           "health names the stuck op and the rank that skipped it: %s", hwhy);
    }
    uint64_t t_abort = tdm_time_mono_us();
    atomic_store(&g.page->abort, 1);
    int status;
    waitpid(p0, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && tdm_time_mono_us() - t_abort < 2000000,
       "the abort word releases the stuck rank with ABORTED");
    kill(p1, SIGKILL);
    waitpid(p1, &status, 0);
    group_free(&g);

    /* dead peer */
    group_init(&g, 2, 4096);
    p0 = fork();
    if (p0 == 0)
        _exit(child_stuck(&g, 0, 0));
    p1 = fork();
    if (p1 == 0) {
        tdm_comm_t c;
        tdm_shm_comm_init(g.region, 1, g.page, 7, &c);
        _exit(0); /* dies without joining */
    }
    waitpid(p1, &status, 0);
    waitpid(p0, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 3 && atomic_load(&g.page->dead_rank_plus1) == 2,
       "a dead peer is detected (PEER) and named in the page");
    char why[256];
    ok(!tdm_progress_healthy(g.page, tdm_time_mono_us(), 3000000, 3000000, why, sizeof(why)) &&
           strstr(why, "rank 1"),
       "health names the dead rank: %s", why);
    group_free(&g);

    /* mismatched ops hang until abort, like NCCL */
    group_init(&g, 2, 4096);
    p0 = fork();
    if (p0 == 0)
        _exit(child_stuck(&g, 0, 0));
    p1 = fork();
    if (p1 == 0) {
        tdm_comm_t c;
        tdm_shm_comm_init(g.region, 1, g.page, 7, &c);
        char b[8] = {0};
        tdm_status_t st = tdm_comm_broadcast(&c, b, sizeof(b), 0);
        _exit(st == TDM_ERR_ABORTED ? 0 : 1);
    }
    tdm_time_sleep_us(300000);
    int r0 = waitpid(p0, &status, WNOHANG), r1 = waitpid(p1, &status, WNOHANG);
    ok(r0 == 0 && r1 == 0, "allreduce on rank 0 vs broadcast on rank 1: both hang");
    atomic_store(&g.page->abort, 1);
    int s0, s1;
    waitpid(p0, &s0, 0);
    waitpid(p1, &s1, 0);
    ok(WIFEXITED(s0) && WEXITSTATUS(s0) == 0 && WIFEXITED(s1) && WEXITSTATUS(s1) == 0,
       "...until the group is aborted");
    group_free(&g);

    /* /health verdict on a virtual clock */
    tdm_progress_page_t *pg;
    tdm_progress_create_anon(2, 1, &pg);
    tdm_comm_t c0 = {.rank = 0, .size = 2, .page = pg}, c1 = {.rank = 1, .size = 2, .page = pg};
    uint64_t now = 1000000000;
    tdm_comm_record_iter(&c0, 10, TDM_PATH_IDLE, 0, 0, 0, 0, now);
    tdm_comm_record_iter(&c1, 10, TDM_PATH_IDLE, 0, 0, 0, 0, now);
    ok(tdm_progress_healthy(pg, now + 60000000, 3000000, 1e9, why, sizeof(why)),
       "idle with no pending work stays healthy for a minute");
    tdm_comm_record_iter(&c0, 11, TDM_PATH_BATCH, 0xabc, 4, 2, 4, now);
    tdm_comm_record_iter(&c1, 11, TDM_PATH_BATCH, 0xabc, 4, 2, 4, now);
    ok(tdm_progress_healthy(pg, now + 2900000, 3000000, 1e9, why, sizeof(why)),
       "pending work, progress 2.9 s ago: healthy");
    tdm_comm_record_iter(&c0, 12, TDM_PATH_BATCH, 0xabd, 4, 2, 4, now + 2000000);
    ok(!tdm_progress_healthy(pg, now + 3100000, 3000000, 1e9, why, sizeof(why)) &&
           strstr(why, "rank 1 no progress"),
       "rank 1 silent for 3.1 s with work pending: unhealthy, named: %s", why);
    tdm_progress_heartbeat(&pg->slot[0], TDM_HB_BOOTSTRAP, now);
    tdm_comm_record_iter(&c1, 12, TDM_PATH_BATCH, 0xabd, 4, 2, 4, now + 3000000);
    tdm_comm_record_iter(&c0, 13, TDM_PATH_BATCH, 0xabd, 4, 2, 4, now + 3000000);
    ok(!tdm_progress_healthy(pg, now + 3500000, 3000000, 3000000, why, sizeof(why)) &&
           strstr(why, "bootstrap thread heartbeat stale"),
       "a stale control-thread heartbeat is unhealthy: %s", why);
    tdm_progress_close(pg);
    return done_testing();
}
