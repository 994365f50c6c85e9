/*
 * rank_selftest.c — the self-test client of rank 0 (worker.h): TDM_SCHED_SELFTEST names a file of
 * requests, one per line ("max_new_tokens seed temperature ignore_eos id,id,..."), submitted all
 * at once; TDM_SCHED_SELFTEST_OUT gets one line per request in input order ("finish_reason
 * id,id,.."); then the group shuts down cleanly. The TP and loop equivalence tests drive it.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "dataplane/worker/worker_int.h"

/* What the callbacks signal the waiting thread with (one per self-test run). */
typedef struct st_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} st_sync_t;

typedef struct st_req {
    st_sync_t *sync;
    int32_t *ids;
    uint32_t n, n_out, cap_out;
    int32_t *out;
    int done, ignore_eos;
    uint64_t seed;
    float temp;
    tdm_finish_reason_t fin;
} st_req_t;

static void st_cb(void *ctx, const tdm_req_event_t *ev)
{
    st_req_t *q = ctx;
    pthread_mutex_lock(&q->sync->mu);
    if (ev->kind == TDM_REQ_TOKEN && q->n_out < q->cap_out)
        q->out[q->n_out++] = ev->token;
    if (ev->kind != TDM_REQ_TOKEN) {
        q->done = 1;
        q->fin = ev->finish;
        pthread_cond_broadcast(&q->sync->cv);
    }
    pthread_mutex_unlock(&q->sync->mu);
}

void *tdm_worker_selftest_main(void *arg)
{
    tdm_worker_t *w = arg;
    st_sync_t sync;
    pthread_mutex_init(&sync.mu, NULL);
    pthread_cond_init(&sync.cv, NULL);
    const char *in = getenv("TDM_SCHED_SELFTEST"), *outp = getenv("TDM_SCHED_SELFTEST_OUT");
    FILE *f = fopen(in, "r");
    st_req_t *qs = NULL;
    uint32_t nq = 0;
    char line[65536];
    int bad = 0;
    if (!f) {
        tdm_err(TDM_SUB_SCHED, "msg=\"self-test: cannot open\" path=\"%s\"", in);
        bad = 1;
    }
    while (f && fgets(line, sizeof(line), f)) {
        unsigned max_new, ignore_eos;
        unsigned long long seed;
        float temp;
        int off = 0;
        if (sscanf(line, "%u %llu %f %u %n", &max_new, &seed, &temp, &ignore_eos, &off) != 4)
            continue;
        qs = tdm_realloc(qs, (nq + 1) * sizeof(*qs));
        st_req_t *q = &qs[nq++];
        memset(q, 0, sizeof(*q));
        q->sync = &sync;
        q->ids = tdm_calloc(strlen(line) / 2 + 1, sizeof(int32_t));
        for (char *p = line + off, *end; *p && *p != '\n'; p = *end == ',' ? end + 1 : end) {
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            q->ids[q->n++] = (int32_t)v;
        }
        q->cap_out = max_new;
        q->out = tdm_calloc(max_new + 1, sizeof(int32_t));
        q->seed = seed;
        q->temp = temp;
        q->ignore_eos = (int)ignore_eos;
    }
    /* submitted only once parsed: callbacks hold pointers into qs */
    for (uint32_t i = 0; i < nq; i++) {
        st_req_t *q = &qs[i];
        tdm_req_params_t p = {0};
        p.prompt = q->ids;
        p.n_prompt = q->n;
        p.max_new_tokens = q->cap_out;
        tdm_sample_params_default(&p.sampling);
        p.sampling.temperature = q->temp;
        p.sampling.seed = q->seed;
        p.ignore_eos = q->ignore_eos;
        p.cb = st_cb;
        p.ctx = q;
        char err[256];
        uint64_t id;
        if (tdm_sched_submit(w->sched, &p, &id, err, sizeof(err)) != TDM_OK) {
            tdm_err(TDM_SUB_SCHED, "msg=\"self-test: submit failed\" line=%u err=\"%s\"", i + 1,
                    err);
            q->done = 1;
            q->fin = TDM_FINISH_ERROR;
        }
    }
    if (f)
        fclose(f);
    pthread_mutex_lock(&sync.mu);
    for (uint32_t i = 0; i < nq; i++)
        while (!qs[i].done)
            pthread_cond_wait(&sync.cv, &sync.mu);
    pthread_mutex_unlock(&sync.mu);
    FILE *o = outp ? fopen(outp, "w") : NULL;
    for (uint32_t i = 0; o && i < nq; i++) {
        fprintf(o, "%s ", tdm_finish_reason_name(qs[i].fin));
        for (uint32_t k = 0; k < qs[i].n_out; k++)
            fprintf(o, "%s%d", k ? "," : "", qs[i].out[k]);
        fprintf(o, "\n");
    }
    if (o)
        fclose(o);
    else
        bad = 1;
    for (uint32_t i = 0; i < nq; i++) {
        tdm_free(qs[i].ids);
        tdm_free(qs[i].out);
    }
    tdm_free(qs);
    pthread_cond_destroy(&sync.cv);
    pthread_mutex_destroy(&sync.mu);
    tdm_info(TDM_SUB_SCHED, "msg=\"self-test done\" requests=%u", nq);
    if (bad)
        tdm_err(TDM_SUB_SCHED, "msg=\"self-test: the input or the output file is unusable\"");
    tdm_worker_request_stop(w);
    return NULL;
}
