/*
 * act_shared.c — what the executor, supervisor and watch threads share with the loop side of the
 * actions subsystem (act.c): the group table's lookup, the stop-aware sleep and the messages
 * posted back to the loop. Below every other file of controlplane/act/: it calls none of them.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include <tdm/mem.h>

#include "controlplane/act/act_int.h"

act_group_t *tdm_act_group_find(tdm_cp_act_t *a, const char *name)
{
    for (size_t i = 0; i < a->n_groups; i++)
        if (strcmp(a->groups[i].name, name) == 0)
            return &a->groups[i];
    return NULL;
}

int tdm_act_sleep(tdm_cp_act_t *a, unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&a->mu);
    while (!a->stop && pthread_cond_timedwait(&a->cv, &a->mu, &ts) != ETIMEDOUT)
        ;
    int s = a->stop;
    pthread_mutex_unlock(&a->mu);
    return s;
}

void tdm_act_post(tdm_cp_act_t *a, act_msg_kind_t kind, json_t *payload, tdm_cp_act_done_fn done,
                  void *ctx)
{
    act_msg_t *m = tdm_calloc(1, sizeof(*m));
    m->kind = kind;
    m->payload = payload;
    m->done = done;
    m->ctx = ctx;
    h2o_multithread_send_message(&a->rx, &m->super);
}
