/*
 * ring.c — per-rank circular sample buffers, looked up by (instance_id, rank).
 *
 * Lookup is a linear scan: a deployment has tens to a few hundred ranks, a scan of that many short
 * strings costs less than one JSON parse of the batch that triggered it.
 */
#include "config.h"

#include <string.h>

#include <tdm/mem.h>

#include "controlplane/store/ring.h"

void tdm_cp_rings_init(tdm_cp_rings_t *r, size_t cap_per_rank, size_t max_ranks)
{
    memset(r, 0, sizeof(*r));
    r->cap_per_rank = cap_per_rank ? cap_per_rank : 1;
    r->max_ranks = max_ranks;
}

void tdm_cp_rings_free(tdm_cp_rings_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        tdm_free(r->ranks[i]->slots);
        tdm_free(r->ranks[i]);
    }
    tdm_free(r->ranks);
    memset(r, 0, sizeof(*r));
}

tdm_status_t tdm_cp_rings_rank(tdm_cp_rings_t *r, const char *instance_id, uint32_t rank,
                               int create, tdm_cp_rank_t **ret_rank)
{
    size_t ilen = strlen(instance_id);
    if (ilen == 0 || ilen >= TDM_CP_NAME_MAX)
        return TDM_ERR_INVAL;
    for (size_t i = 0; i < r->n; i++) {
        tdm_cp_rank_t *rk = r->ranks[i];
        if (rk->rank == rank && strcmp(rk->instance_id, instance_id) == 0) {
            *ret_rank = rk;
            return TDM_OK;
        }
    }
    if (!create)
        return TDM_ERR_NOTFOUND;
    if (r->n >= r->max_ranks)
        return TDM_ERR_OVERFLOW;
    tdm_cp_rank_t *rk = tdm_calloc(1, sizeof(*rk));
    memcpy(rk->instance_id, instance_id, ilen + 1);
    rk->rank = rank;
    rk->cap = r->cap_per_rank;
    rk->slots = tdm_calloc(rk->cap, sizeof(*rk->slots));
    r->ranks = tdm_realloc(r->ranks, (r->n + 1) * sizeof(*r->ranks));
    r->ranks[r->n++] = rk;
    *ret_rank = rk;
    return TDM_OK;
}

void tdm_cp_rank_push(tdm_cp_rank_t *rk, const tdm_cp_sample_t *s)
{
    rk->slots[rk->head] = *s;
    rk->head = (rk->head + 1) % rk->cap;
    if (rk->count < rk->cap)
        rk->count++;
}

const tdm_cp_sample_t *tdm_cp_rank_at(const tdm_cp_rank_t *rk, size_t i)
{
    if (i >= rk->count)
        return NULL;
    size_t oldest = (rk->head + rk->cap - rk->count) % rk->cap;
    return &rk->slots[(oldest + i) % rk->cap];
}

const tdm_cp_sample_t *tdm_cp_rank_latest(const tdm_cp_rank_t *rk)
{
    return rk->count ? tdm_cp_rank_at(rk, rk->count - 1) : NULL;
}

int tdm_cp_rank_persist_due(tdm_cp_rank_t *rk, uint64_t ts_us, uint64_t period_us)
{
    if (rk->persist_all || rk->last_persist_us == 0 || ts_us < rk->last_persist_us ||
        ts_us - rk->last_persist_us >= period_us) {
        rk->last_persist_us = ts_us;
        return 1;
    }
    return 0;
}
