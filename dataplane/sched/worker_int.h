/*
 * dataplane/sched/worker_int.h — what the launcher and the rank share: the names of the group's
 * shm files and the sizes of the collective regions.
 */
#ifndef TDM_SCHED_WORKER_INT_H
#define TDM_SCHED_WORKER_INT_H

#include <stddef.h>

#include "dataplane/sched/sched_int.h"
#include "dataplane/sched/worker.h"

enum { SHM_PROGRESS = 0, SHM_TENSOR, SHM_PLAN, SHM_GROUP, SHM_COUNT };

#define TDM_WORKER_TENSOR_SLOT ((size_t)1 << 20) /* per-rank data slot of the tensor channel */
#define TDM_WORKER_PLAN_SLOT ((size_t)64 << 10)  /* per-rank data slot of the plan channel */

void tdm_worker_shm_path(const char *prefix, int which, char *out, size_t out_len);

#endif
