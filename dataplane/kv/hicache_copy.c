/*
 * hicache_copy.c — loads from the host tier (include/tdm/hicache.h): the job table, the copy
 * thread that moves a job layer by layer and publishes each (ticket, layer) to the gate, and the
 * sampled verification on the device destination.
 *
 * On the CPU the "device" pool is the executor's host memory and the copy thread stands in for
 * the GPU's copy stream: KERNEL copies every (page, sub-buffer) of a layer in one gather pass of
 * 8-byte words (what a gather kernel does, one element per thread), DIRECT calls memcpy once per
 * run of pages adjacent in both pools (cudaMemcpyAsync per run on the GPU).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tdm/log.h>
#include <tdm/mem.h>

#include "dataplane/kv/hicache_int.h"

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void poison_page(tdm_hicache_t *hc, uint32_t page)
{
    for (uint32_t l = 0; l < hc->L; l++)
        for (uint32_t s = 0; s < hc->dlayout.n_sub; s++) {
            uint8_t *d = tdm_kv_slot(&hc->dev, l, (tdm_kv_sub_t)s, page, 0);
            uint64_t n = hc->dlayout.sub[s].page_stride;
            if (hc->dlayout.kv_dtype == TDM_DTYPE_BF16) {
                uint16_t v = TDM_KV_POISON_BF16;
                for (uint64_t i = 0; i + 2 <= n; i += 2)
                    memcpy(d + i, &v, 2);
            } else if (hc->dlayout.kv_dtype == TDM_DTYPE_FP8_E4M3) {
                memset(d, TDM_KV_POISON_FP8, n);
            } else {
                uint32_t v = TDM_KV_POISON_F32;
                for (uint64_t i = 0; i + 4 <= n; i += 4)
                    memcpy(d + i, &v, 4);
            }
        }
}

tdm_status_t tdm_hicache_load(tdm_hicache_t *hc, const uint32_t *host, const uint32_t *dev,
                              uint32_t n, uint64_t *ret_ticket)
{
    hjob_t *j = NULL;
    if (!hc || n == 0 || !host || !dev || !ret_ticket)
        return TDM_ERR_INVAL;
    for (uint32_t i = 0; i < n; i++)
        if (host[i] >= hc->n || !hc->ents[host[i]].in || dev[i] >= hc->dev.num_pages)
            return TDM_ERR_RANGE;
    for (uint32_t k = 0; k < hc->cfg.max_jobs && !j; k++)
        if (hc->jobs[k].ticket == 0)
            j = &hc->jobs[k];
    if (!j)
        return TDM_ERR_AGAIN;
    if (j->cap < n) {
        j->host = tdm_realloc(j->host, n * sizeof(uint32_t));
        j->dev = tdm_realloc(j->dev, n * sizeof(uint32_t));
        j->cap = n;
    }
    memcpy(j->host, host, n * sizeof(uint32_t));
    memcpy(j->dev, dev, n * sizeof(uint32_t));
    j->n = n;
    j->verify = hc->cfg.verify_every && hc->loads % hc->cfg.verify_every == 0;
    j->result = TDM_OK;
    j->bad_page = j->bad_layer = j->bad_sub = 0;
    if (hc->cfg.poison && hc->dv) {
        tdm_status_t st = hc->dv->poison(hc->dh, dev, n);
        if (st != TDM_OK)
            return st;
    } else if (hc->cfg.poison) {
        for (uint32_t i = 0; i < n; i++)
            poison_page(hc, dev[i]);
    }
    hc->loads++;
    hc->load_pages += n;
    hc->hits += n;
    pthread_mutex_lock(&hc->mu);
    j->state = 0;
    j->ticket = hc->next_ticket++;
    pthread_cond_broadcast(&hc->cv);
    pthread_mutex_unlock(&hc->mu);
    *ret_ticket = j->ticket;
    if (hc->cfg.journal) {
        uint32_t w[4] = {2, n, (uint32_t)j->ticket, (uint32_t)(j->ticket >> 32)};
        tdm_hicache_journal_put(hc, w, 4);
        tdm_hicache_journal_put(hc, host, n);
        tdm_hicache_journal_put(hc, dev, n);
    }
    return TDM_OK;
}

int32_t tdm_hicache_job_slot(tdm_hicache_t *hc, uint64_t ticket)
{
    for (uint32_t k = 0; k < hc->cfg.max_jobs; k++)
        if (hc->jobs[k].ticket == ticket)
            return (int32_t)k;
    return -1;
}

static hjob_t *job_of(tdm_hicache_t *hc, uint64_t ticket)
{
    int32_t k = tdm_hicache_job_slot(hc, ticket);
    return k < 0 ? NULL : &hc->jobs[k];
}

void *tdm_hicache_layer_event(void *ctx, uint64_t ticket, uint32_t layer)
{
    tdm_hicache_t *hc = ctx;
    pthread_mutex_lock(&hc->mu);
    int32_t k = tdm_hicache_job_slot(hc, ticket);
    pthread_mutex_unlock(&hc->mu);
    /* a retired ticket has nothing left to wait for */
    return k < 0 ? NULL : hc->dv->event(hc->dh, (uint32_t)k, layer);
}

tdm_status_t tdm_hicache_wait(tdm_hicache_t *hc, uint64_t ticket, uint32_t *ret_page,
                              uint32_t *ret_layer, uint32_t *ret_sub)
{
    hjob_t *j = ticket ? job_of(hc, ticket) : NULL;
    if (!j)
        return TDM_OK;
    pthread_mutex_lock(&hc->mu);
    while (j->state == 0)
        pthread_cond_wait(&hc->cv, &hc->mu);
    pthread_mutex_unlock(&hc->mu);
    tdm_status_t st = j->result;
    tdm_hicache_unpin(hc, j->host, j->n);
    if (st != TDM_OK) {
        /* a bad host copy must not serve another load (a replica keeps it: rank 0's tier
         * decides, and its journal names the pages) */
        for (uint32_t i = 0; i < j->n && !hc->cfg.replica; i++)
            if (!hc->ents[j->host[i]].pin)
                tdm_hicache_drop(hc, j->host[i]);
        if (ret_page)
            *ret_page = j->bad_page;
        if (ret_layer)
            *ret_layer = j->bad_layer;
        if (ret_sub)
            *ret_sub = j->bad_sub;
    }
    pthread_mutex_lock(&hc->mu);
    j->ticket = 0;
    pthread_mutex_unlock(&hc->mu);
    return st;
}

/* One layer of a job: host → device, host stride per sub-buffer. */
static void copy_layer(tdm_hicache_t *hc, const hjob_t *j, uint32_t l)
{
    uint64_t moved = 0;
    for (uint32_t s = 0; s < hc->n_copy_sub; s++) {
        uint64_t b = hc->copy_bytes[s];
        if (hc->cfg.io == TDM_HICACHE_IO_KERNEL) {
            /* one gather pass: word w of page i, as one GPU thread would take it */
            uint64_t words = b / 8, total = words * j->n;
            for (uint64_t w = 0; w < total; w++) {
                uint32_t i = (uint32_t)(w / words);
                uint64_t o = (w % words) * 8;
                memcpy(tdm_kv_slot(&hc->dev, l, (tdm_kv_sub_t)s, j->dev[i], 0) + o,
                       tdm_hicache_host_addr(hc, j->host[i], l, s) + o, 8);
            }
            for (uint32_t i = 0; i < j->n && b % 8; i++)
                memcpy(tdm_kv_slot(&hc->dev, l, (tdm_kv_sub_t)s, j->dev[i], 0) + words * 8,
                       tdm_hicache_host_addr(hc, j->host[i], l, s) + words * 8, b % 8);
        } else {
            /* runs of pages adjacent in both pools move in one memcpy when the strides allow */
            int contiguous = hc->cfg.mem_layout == TDM_HICACHE_LAYER_FIRST &&
                             b == hc->dlayout.sub[s].page_stride &&
                             b == hc->hlayout.sub[s].page_stride;
            for (uint32_t i = 0; i < j->n;) {
                uint32_t r = 1;
                while (contiguous && i + r < j->n && j->dev[i + r] == j->dev[i] + r &&
                       j->host[i + r] == j->host[i] + r)
                    r++;
                memcpy(tdm_kv_slot(&hc->dev, l, (tdm_kv_sub_t)s, j->dev[i], 0),
                       tdm_hicache_host_addr(hc, j->host[i], l, s), contiguous ? b * r : b);
                i += r;
            }
        }
        moved += b * j->n;
    }
    __atomic_fetch_add(&hc->load_bytes, moved, __ATOMIC_RELAXED);
}

/* The first mismatching (layer, device page, sub-buffer) of a verified load. */
static void verify_failed(tdm_hicache_t *hc, hjob_t *j, uint32_t page, uint32_t layer, uint32_t sub)
{
    __atomic_fetch_add(&hc->verify_failures, 1, __ATOMIC_RELAXED);
    j->result = TDM_ERR_CORRUPT;
    j->bad_page = page;
    j->bad_layer = layer;
    j->bad_sub = sub;
}

/* The device half: each layer's copies enqueued on the copy stream and its event recorded before
 * the publish; the verification on the device destination once every layer landed. */
static void run_job_dev(tdm_hicache_t *hc, hjob_t *j, uint64_t ticket)
{
    uint32_t ms = 0, slot = (uint32_t)(j - hc->jobs);
    tdm_status_t st = TDM_OK;
    for (uint32_t l = 0; l < hc->L; l++) {
        if (hc->cfg.fault && hc->cfg.fault(hc->cfg.fault_ctx, TDM_HICACHE_FAULT_SLOW_COPY, &ms))
            sleep_ms(ms);
        if (st == TDM_OK)
            st = hc->dv->load_layer(hc->dh, slot, j->host, j->dev, j->n, l,
                                    hc->cfg.io == TDM_HICACHE_IO_KERNEL);
        if (st == TDM_OK) {
            uint64_t moved = 0;
            for (uint32_t s = 0; s < hc->n_copy_sub; s++)
                moved += hc->copy_bytes[s] * j->n;
            __atomic_fetch_add(&hc->load_bytes, moved, __ATOMIC_RELAXED);
        }
        /* published even after a failure: nobody waits forever; the result says CUDA */
        tdm_kv_gate_publish(hc->gate, ticket, l);
    }
    size_t need = (size_t)j->n * hc->L * hc->S;
    if (j->verify && need > hc->vck_cap) {
        free(hc->vck);
        hc->vck = malloc(need * sizeof(uint64_t));
        hc->vck_cap = hc->vck ? need : 0;
    }
    uint64_t *ck = j->verify && hc->vck ? hc->vck : NULL;
    tdm_status_t est = hc->dv->load_end(hc->dh, slot, j->dev, j->n, ck);
    if (st == TDM_OK)
        st = est;
    if (st != TDM_OK) {
        j->result = st;
        return;
    }
    if (!ck)
        return;
    __atomic_fetch_add(&hc->verified, 1, __ATOMIC_RELAXED);
    const uint32_t S = hc->S;
    for (uint32_t l = 0; l < hc->L; l++)
        for (uint32_t i = 0; i < j->n; i++)
            for (uint32_t s = 0; s < S; s++)
                if (ck[((size_t)i * hc->L + l) * S + s] !=
                    hc->ck[((size_t)j->host[i] * hc->L + l) * S + s]) {
                    verify_failed(hc, j, j->dev[i], l, s);
                    return;
                }
}

/* flip_host_bits (docs/contracts.md §e): the top exponent bit of the first element of one
 * (layer, sub-buffer) of the job's first host page, the layer and sub-buffer drawn at random;
 * the log line is the injected truth the checks of the evidence compare with. */
static void flip_host_bits(tdm_hicache_t *hc, const hjob_t *j)
{
    if (!hc->flip_rng)
        hc->flip_rng = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull | 1;
    uint64_t v = hc->flip_rng;
    v ^= v << 13;
    v ^= v >> 7;
    v ^= v << 17;
    hc->flip_rng = v;
    const uint32_t layer = (uint32_t)(v % hc->L);
    const uint32_t s = (uint32_t)((v >> 32) % (hc->n_copy_sub ? hc->n_copy_sub : 1));
    size_t esz = tdm_dtype_size(hc->hlayout.sub[s].dtype);
    if (esz == 0 || esz > hc->copy_bytes[s])
        esz = 1;
    uint8_t *p = tdm_hicache_host_addr(hc, j->host[0], layer, s);
    p[esz - 1] ^= 0x40;
    tdm_warn(TDM_SUB_KV,
             "msg=\"fault flip_host_bits: bit flipped\" rank=%u host_page=%u page=%u layer=%u "
             "sub=%s",
             hc->cfg.rank, j->host[0], j->dev[0], layer, tdm_kv_sub_name((tdm_kv_sub_t)s));
}

static void run_job(tdm_hicache_t *hc, hjob_t *j, uint64_t ticket)
{
    uint32_t ms = 0;
    if (hc->cfg.fault && hc->cfg.fault(hc->cfg.fault_ctx, TDM_HICACHE_FAULT_FLIP_BITS, &ms))
        flip_host_bits(hc, j);
    if (hc->dv) {
        run_job_dev(hc, j, ticket);
        return;
    }
    for (uint32_t l = 0; l < hc->L; l++) {
        if (hc->cfg.fault && hc->cfg.fault(hc->cfg.fault_ctx, TDM_HICACHE_FAULT_SLOW_COPY, &ms))
            sleep_ms(ms);
        copy_layer(hc, j, l);
        tdm_kv_gate_publish(hc->gate, ticket, l);
    }
    if (!j->verify)
        return;
    __atomic_fetch_add(&hc->verified, 1, __ATOMIC_RELAXED);
    for (uint32_t l = 0; l < hc->L; l++)
        for (uint32_t i = 0; i < j->n; i++)
            for (uint32_t s = 0; s < hc->S; s++)
                if (tdm_hicache_dev_checksum(hc, j->dev[i], l, s) !=
                    hc->ck[((size_t)j->host[i] * hc->L + l) * hc->S + s]) {
                    verify_failed(hc, j, j->dev[i], l, s);
                    return;
                }
}

static void *copy_main(void *arg)
{
    tdm_hicache_t *hc = arg;
    pthread_mutex_lock(&hc->mu);
    for (;;) {
        hjob_t *j = NULL;
        while (!hc->quit && !(j = job_of(hc, hc->proc_ticket)))
            pthread_cond_wait(&hc->cv, &hc->mu);
        if (!j)
            break;
        uint64_t ticket = hc->proc_ticket;
        pthread_mutex_unlock(&hc->mu);
        run_job(hc, j, ticket);
        pthread_mutex_lock(&hc->mu);
        j->state = 1;
        hc->proc_ticket++;
        pthread_cond_broadcast(&hc->cv);
    }
    pthread_mutex_unlock(&hc->mu);
    return NULL;
}

tdm_status_t tdm_hicache_copy_start(tdm_hicache_t *hc)
{
    pthread_mutex_init(&hc->mu, NULL);
    pthread_cond_init(&hc->cv, NULL);
    if (pthread_create(&hc->thread, NULL, copy_main, hc) != 0)
        return TDM_ERR_NOMEM;
    hc->started = 1;
    return TDM_OK;
}

void tdm_hicache_copy_stop(tdm_hicache_t *hc)
{
    if (!hc->started)
        return;
    /* the loads already queued complete first: their device pages may still be read */
    pthread_mutex_lock(&hc->mu);
    while (hc->proc_ticket < hc->next_ticket)
        pthread_cond_wait(&hc->cv, &hc->mu);
    hc->quit = 1;
    pthread_cond_broadcast(&hc->cv);
    pthread_mutex_unlock(&hc->mu);
    pthread_join(hc->thread, NULL);
    pthread_mutex_destroy(&hc->mu);
    pthread_cond_destroy(&hc->cv);
    hc->started = 0;
}
