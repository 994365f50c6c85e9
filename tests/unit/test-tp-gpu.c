/*
 * test-tp-gpu.c — the CPU side of the GPU collectives (dataplane/tp/gpu.h, nccl.h), no device:
 *  - I2 on the device: the recorder's step (tdm_comm_gpu_begin/_end) with the mark word the
 *    device writes: tdm_progress_read shows in_coll (op, seq, since) while a mark is odd,
 *    coll_seq / coll_hash advance over exactly the collectives marked done, and coll_hash equals
 *    the flat chain of tdm_comm_hash_step a CPU rank records for the same collectives;
 *  - the host half of the host-staged backend across two processes: the all-reduce equals the
 *    rank-ordered tree of kernels/backend.h bit for bit, the all-gather is in rank order;
 *  - the NCCL wrapper's error paths with injected codes against the real library: the unique id
 *    and the join failing (status and a message naming the rank and the function), an
 *    asynchronous error found by the poll, the abort (a record, then every call ABORTED).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* nccl.h (and the cuda_fp16.h it includes) is not -Wundef / -Wstrict-prototypes clean */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "dataplane/tp/gpu.h"
#include "dataplane/tp/nccl.h"
#include "kernels/backend.h"
#include "tap.h"

static void test_marks(void)
{
    tdm_progress_page_t *page = NULL;
    tdm_comm_t c;
    memset(&c, 0, sizeof(c));
    if (tdm_progress_create_anon(2, 1, &page) != TDM_OK)
        bail_out("progress page");
    c.rank = 1;
    c.size = 2;
    c.group = 3;
    c.page = page;
    tdm_progress_slot_t *s = &page->slot[1];
    /* an earlier CPU-recorded history */
    s->rec.coll_seq = 5;
    s->rec.coll_hash = 0x1234;
    /* a step of 3 all-reduces of 4096 bytes and one all-gather of 999 */
    tdm_gpu_step_t g;
    memset(&g, 0, sizeof(g));
    g.n_runs = 2;
    g.run[0].op = TDM_COLL_ALLREDUCE;
    g.run[0].count = 3;
    g.run[0].bytes = 4096;
    g.run[1].op = TDM_COLL_ALLGATHER;
    g.run[1].count = 1;
    g.run[1].bytes = 999;
    atomic_store(&s->gpu_mark, 77); /* stale: begin must clear it */
    tdm_comm_gpu_begin(&c, &g, 1000);
    uint32_t *mark = tdm_comm_gpu_mark(&c);
    ok(mark == (uint32_t *)&s->gpu_mark && *mark == 0, "begin zeroes the slot's mark word");
    tdm_rank_record_t r;
    tdm_progress_read(s, &r);
    ok(r.coll_seq == 5 && r.coll_hash == 0x1234 && r.in_coll_op == TDM_COLL_NONE,
       "before the first mark: the history, not in a collective");
    /* the chain a CPU rank would record */
    uint64_t h[5];
    h[0] = 0x1234;
    for (int k = 0; k < 3; k++)
        h[k + 1] = tdm_comm_hash_step(h[k], TDM_COLL_ALLREDUCE, 4096, 3);
    h[4] = tdm_comm_hash_step(h[3], TDM_COLL_ALLGATHER, 999, 3);
    int good = 1;
    for (uint32_t k = 0; k < 4; k++) {
        *mark = 2 * k + 1; /* entering collective k */
        tdm_progress_read(s, &r);
        tdm_coll_op_t want = k < 3 ? TDM_COLL_ALLREDUCE : TDM_COLL_ALLGATHER;
        if (r.in_coll_op != want || r.in_coll_seq != 5 + k || r.in_coll_since_us != 1000 ||
            r.coll_seq != 5 + k || r.coll_hash != h[k]) {
            diag("entering %u: op %u seq %llu coll_seq %llu", k, r.in_coll_op,
                 (unsigned long long)r.in_coll_seq, (unsigned long long)r.coll_seq);
            good = 0;
        }
        *mark = 2 * k + 2; /* left it */
        tdm_progress_read(s, &r);
        if (r.in_coll_op != TDM_COLL_NONE || r.coll_seq != 5 + k + 1 || r.coll_hash != h[k + 1])
            good = 0;
    }
    ok(good, "every mark: in_coll while odd, coll_seq/coll_hash = the CPU chain");
    /* a rank stuck entering the second all-reduce: end commits only what was done */
    *mark = 3;
    tdm_comm_gpu_end(&c);
    tdm_progress_read(s, &r);
    ok(r.coll_seq == 6 && r.coll_hash == h[1] && r.in_coll_op == TDM_COLL_NONE && r.gpu.n_runs == 0,
       "end commits the collectives marked done (1 of 4) and clears the step");
    /* a later mark with no step in flight changes nothing */
    *mark = 8;
    tdm_progress_read(s, &r);
    ok(r.coll_seq == 6 && r.coll_hash == h[1], "no step: the mark word is ignored");
    /* a full step from there, through the fold itself */
    tdm_comm_gpu_begin(&c, &g, 2000);
    *mark = 8;
    tdm_comm_gpu_end(&c);
    tdm_progress_read(s, &r);
    uint64_t want = h[1];
    for (int k = 0; k < 3; k++)
        want = tdm_comm_hash_step(want, TDM_COLL_ALLREDUCE, 4096, 3);
    want = tdm_comm_hash_step(want, TDM_COLL_ALLGATHER, 999, 3);
    ok(r.coll_seq == 10 && r.coll_hash == want, "a whole step adds its 4 collectives (seq 10)");
    /* an over-range mark is clamped to the step's collectives */
    tdm_gpu_step_t rr = g;
    rr.base_seq = 0;
    rr.base_hash = 0x1234;
    rr.group = 3;
    tdm_progress_gpu_fold(&rr, 1001, &r);
    ok(r.coll_seq == 4 && r.coll_hash == h[4] && r.in_coll_op == TDM_COLL_NONE,
       "a mark past the step is clamped to its end");
    tdm_progress_close(page);
}

enum { N_AR = 5000, N_AG = 700 };

static float val(uint32_t rank, size_t i)
{
    uint32_t x = (uint32_t)(rank * 2654435761u) ^ (uint32_t)(i * 40503u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return ((float)(x & 0xffffff) / (float)0x1000000 - 0.5f) * (float)(1 + (x % 7));
}

static int host_child(void *region, tdm_progress_page_t *page, uint32_t rank)
{
    tdm_comm_t c;
    if (tdm_shm_comm_init(region, rank, page, 0, &c) != TDM_OK)
        return 10;
    float *buf = malloc(N_AR * sizeof(float)), *ref = malloc(N_AR * sizeof(float));
    float *all[2] = {malloc(N_AR * sizeof(float)), malloc(N_AR * sizeof(float))};
    float *out = malloc(2 * N_AG * sizeof(float));
    for (size_t i = 0; i < N_AR; i++) {
        buf[i] = val(rank, i);
        all[0][i] = val(0, i);
        all[1][i] = val(1, i);
    }
    tdm_reduce_tree_combine((const float *const *)all, 2, ref, N_AR);
    uint64_t seq0 = page->slot[rank].rec.coll_seq;
    if (tdm_gpu_host_collective(&c, TDM_COLL_ALLREDUCE, buf, NULL, N_AR) != TDM_OK)
        return 11;
    if (memcmp(buf, ref, N_AR * sizeof(float)))
        return 12;
    for (size_t i = 0; i < N_AG; i++)
        buf[i] = val(rank + 7, i);
    if (tdm_gpu_host_collective(&c, TDM_COLL_ALLGATHER, buf, out, N_AG) != TDM_OK)
        return 13;
    for (uint32_t q = 0; q < 2; q++)
        for (size_t i = 0; i < N_AG; i++)
            if (out[q * N_AG + i] != val(q + 7, i))
                return 14;
    if (tdm_gpu_host_collective(&c, TDM_COLL_BROADCAST, buf, out, 1) != TDM_ERR_INVAL)
        return 15;
    /* the host half does not record: the device's marks do */
    if (page->slot[rank].rec.coll_seq != seq0)
        return 16;
    tdm_comm_destroy(&c);
    return 0;
}

static void test_host_half(void)
{
    tdm_shm_comm_cfg_t cfg = {
        .n_ranks = 2, .slot_bytes = 4096, .spin_iters = 200, .peer_check_ms = 20};
    tdm_progress_page_t *page = NULL;
    if (tdm_progress_create_anon(2, 9, &page) != TDM_OK)
        bail_out("progress page");
    size_t sz = tdm_shm_comm_region_size(&cfg);
    void *region = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED || tdm_shm_comm_region_init(region, &cfg) != TDM_OK)
        bail_out("shm region");
    pid_t pid[2];
    for (uint32_t r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(host_child(region, page, r));
    }
    int rc[2];
    for (int r = 0; r < 2; r++) {
        int wst = 0;
        waitpid(pid[r], &wst, 0);
        rc[r] = WIFEXITED(wst) ? WEXITSTATUS(wst) : 100;
    }
    ok(rc[0] == 0 && rc[1] == 0,
       "host half, 2 processes: all-reduce = the rank-ordered tree bit for bit (chunked), "
       "all-gather in rank order, unknown op refused, nothing recorded (rc %d %d)",
       rc[0], rc[1]);
    munmap(region, sz);
    tdm_progress_close(page);
}

static void test_nccl_errors(void)
{
    tdm_shm_comm_cfg_t cfg = {.n_ranks = 1, .slot_bytes = 4096};
    tdm_progress_page_t *page = NULL;
    tdm_comm_t c;
    tdm_nccl_t *n = NULL;
    char err[256] = "";
    if (tdm_progress_create_anon(1, 9, &page) != TDM_OK)
        bail_out("progress page");
    size_t sz = tdm_shm_comm_region_size(&cfg);
    void *region = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED || tdm_shm_comm_region_init(region, &cfg) != TDM_OK ||
        tdm_shm_comm_init(region, 0, page, 0, &c) != TDM_OK)
        bail_out("shm comm");

    is_int(tdm_nccl_status(ncclSuccess), TDM_OK, "ncclSuccess maps to OK");
    is_int(tdm_nccl_status(ncclRemoteError), TDM_ERR_PEER, "ncclRemoteError maps to PEER");
    is_int(tdm_nccl_status(ncclInvalidUsage), TDM_ERR_INVAL, "ncclInvalidUsage maps to INVAL");
    is_int(tdm_nccl_status(ncclUnhandledCudaError), TDM_ERR_NCCL, "CUDA errors map to NCCL");

    tdm_nccl_inject(TDM_NCCL_GET_UNIQUE_ID, ncclSystemError, 0);
    tdm_status_t st = tdm_nccl_init(&c, &n, err, sizeof(err));
    ok(st == TDM_ERR_PEER && !n && strstr(err, "rank 0") && strstr(err, "ncclGetUniqueId") &&
           strstr(err, ncclGetErrorString(ncclSystemError)),
       "ncclGetUniqueId failing: PEER, '%s'", err);

    tdm_nccl_inject(TDM_NCCL_COMM_INIT_RANK, ncclInvalidUsage, 0);
    st = tdm_nccl_init(&c, &n, err, sizeof(err));
    ok(st == TDM_ERR_INVAL && !n && strstr(err, "rank 0 of 1") && strstr(err, "ncclCommInitRank"),
       "ncclCommInitRank failing (real unique id, injected join): INVAL, '%s'", err);

    /* a join NCCL reports as still in progress (non-blocking semantics): a communicator whose
     * later calls go through the same wrapper */
    tdm_nccl_inject(TDM_NCCL_COMM_INIT_RANK, ncclInProgress, 0);
    st = tdm_nccl_init(&c, &n, err, sizeof(err));
    ok(st == TDM_OK && n, "join in progress: a communicator (%s)", tdm_status_str(st));
    if (n) {
        is_int(tdm_nccl_check(n), TDM_OK, "no asynchronous error: check is OK");
        tdm_nccl_inject(TDM_NCCL_GET_ASYNC_ERROR, ncclRemoteError, 1);
        is_int(tdm_nccl_check(n), TDM_OK, "injection after 1 skip: the first check still OK");
        is_int(tdm_nccl_check(n), TDM_ERR_PEER, "the poll finds the asynchronous remote error");
        tdm_nccl_inject(TDM_NCCL_ALL_REDUCE, ncclUnhandledCudaError, 0);
        float x = 1;
        is_int(tdm_nccl_allreduce(n, &x, 1, NULL), TDM_ERR_NCCL,
               "an all-reduce failing at enqueue: NCCL");
        ok(!tdm_nccl_aborted(n), "not aborted before tdm_nccl_abort");
        tdm_nccl_abort(n, "allreduce seq 3", "test");
        ok(tdm_nccl_aborted(n), "aborted");
        is_int(tdm_nccl_allreduce(n, &x, 1, NULL), TDM_ERR_ABORTED, "all-reduce after: ABORTED");
        is_int(tdm_nccl_allgather(n, &x, &x, 1, NULL), TDM_ERR_ABORTED,
               "all-gather after: ABORTED");
        is_int(tdm_nccl_broadcast(n, &x, 4, 0, NULL), TDM_ERR_ABORTED, "broadcast after: ABORTED");
        is_int(tdm_nccl_check(n), TDM_ERR_ABORTED, "check after: ABORTED");
        tdm_nccl_free(n);
    }
    tdm_comm_destroy(&c);
    munmap(region, sz);
    tdm_progress_close(page);
}

int main(void)
{
    tdm_gpu_comm_kind_t k;
    ok(tdm_gpu_comm_kind_parse("nccl", &k) == TDM_OK && k == TDM_GPU_COMM_NCCL &&
           tdm_gpu_comm_kind_parse("host", &k) == TDM_OK && k == TDM_GPU_COMM_HOST &&
           tdm_gpu_comm_kind_parse("mpi", &k) == TDM_ERR_INVAL,
       "TDM_TP_BACKEND: nccl, host; anything else refused");
    test_marks();
    test_host_half();
    test_nccl_errors();
    return done_testing();
}
