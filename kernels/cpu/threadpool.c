/*
 * threadpool.c — the CPU backend's persistent workers.
 *
 * One job at a time: the caller publishes (fn, arg, n), bumps a generation counter and runs range
 * 0 itself; worker t runs range t. Ranges are a pure function of (n, grain, n_threads), and every
 * kernel computes each output element inside one range with a fixed sequence, so the split never
 * changes a result (backend.h rule 5). Workers sleep on a condition variable between jobs: the
 * machine is shared, and a forward step issues few enough jobs that wake-up cost is noise.
 */
#include "config.h"

#include <stdlib.h>

#include <tdm/mem.h>

#include "kernels/cpu/cpu_int.h"

typedef struct worker_arg {
    tdm_cpu_pool_t *pool;
    uint32_t tid;
} worker_arg_t;

static void run_range(tdm_cpu_pool_t *p, uint32_t tid)
{
    size_t lo, hi;
    if (tid >= p->chunks)
        return;
    lo = p->n * tid / p->chunks;
    hi = p->n * (tid + 1) / p->chunks;
    if (lo < hi)
        p->fn(p->arg, tid, lo, hi);
}

static void *worker_main(void *varg)
{
    worker_arg_t *wa = varg;
    tdm_cpu_pool_t *p = wa->pool;
    uint32_t tid = wa->tid;
    uint64_t seen = 0;

    tdm_free(wa);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_range(p, tid);
        pthread_mutex_lock(&p->mu);
        if (--p->n_busy == 0)
            pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

tdm_status_t tdm_cpu_pool_init(uint32_t threads, tdm_cpu_pool_t **ret_pool)
{
    tdm_cpu_pool_t *p;

    if (threads == 0 || threads > TDM_CPU_MAX_THREADS)
        return TDM_ERR_RANGE;
    p = aligned_alloc(64, sizeof(*p) + (64 - sizeof(*p) % 64) % 64);
    if (!p)
        return TDM_ERR_NOMEM;
    memset(p, 0, sizeof(*p));
    p->n_threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    for (uint32_t t = 1; t < threads; t++) {
        worker_arg_t *wa = tdm_malloc(sizeof(*wa));
        wa->pool = p;
        wa->tid = t;
        if (pthread_create(&p->threads[t], NULL, worker_main, wa) != 0) {
            tdm_free(wa);
            p->n_threads = t;
            tdm_cpu_pool_free(p);
            return TDM_ERR_NOMEM;
        }
    }
    *ret_pool = p;
    return TDM_OK;
}

void tdm_cpu_pool_free(tdm_cpu_pool_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t t = 1; t < p->n_threads; t++)
        pthread_join(p->threads[t], NULL);
    for (uint32_t t = 0; t < TDM_CPU_MAX_THREADS; t++)
        free(p->scratch[t].buf);
    free(p->gather.buf);
    free(p->tiles.buf);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void tdm_cpu_parallel(tdm_cpu_pool_t *p, size_t n, size_t grain, tdm_cpu_fn fn, void *arg)
{
    size_t chunks;

    if (n == 0)
        return;
    if (grain == 0)
        grain = 1;
    chunks = (n + grain - 1) / grain;
    if (chunks > p->n_threads)
        chunks = p->n_threads;
    if (chunks <= 1) {
        fn(arg, 0, 0, n);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunks = chunks;
    p->n_busy = p->n_threads - 1;
    p->gen++;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    run_range(p, 0);

    pthread_mutex_lock(&p->mu);
    while (p->n_busy > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

float *tdm_cpu_scratch(tdm_cpu_scratch_t *s, size_t floats)
{
    if (floats > s->cap) {
        size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
        float *nb = aligned_alloc(64, bytes);
        if (!nb)
            return NULL;
        free(s->buf);
        s->buf = nb;
        s->cap = bytes / sizeof(float);
    }
    return s->buf;
}
