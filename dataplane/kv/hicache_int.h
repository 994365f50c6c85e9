/* dataplane/kv/hicache_int.h — the host tier's state, shared by hicache.c (pool, index, stores)
 * and hicache_copy.c (loads, the copy thread, verification). */
#ifndef TDM_KV_HICACHE_INT_H
#define TDM_KV_HICACHE_INT_H

#include <pthread.h>

#include <tdm/hicache.h>

typedef struct hent {
    uint64_t hash, parent;
    int32_t bnext;
    int32_t lru_prev, lru_next;
    uint32_t pin; /* loads holding the page (scheduler thread) */
    int in;
} hent_t;

/* One load: ticket 0 = free slot. state under mu: 0 queued, 1 copied and checked. */
typedef struct hjob {
    uint64_t ticket;
    uint32_t n, cap;
    uint32_t *host, *dev;
    int verify, state;
    tdm_status_t result;
    uint32_t bad_page, bad_layer, bad_sub;
} hjob_t;

struct tdm_hicache {
    tdm_hicache_cfg_t cfg;
    tdm_kv_layout_t dlayout, hlayout;
    tdm_kv_buffers_t dev; /* the device pool (read by stores, written by loads) */
    tdm_kv_gate_t *gate;
    uint32_t n, L, ps;
    uint64_t bytes;
    uint8_t *base;
    const tdm_hicache_dev_t *dv; /* the device half (GPU pools), or NULL */
    void *dh;                    /* its handle */
    uint64_t *vck;               /* copy thread: verification checksums of one job */
    size_t vck_cap;
    /* host addressing */
    uint64_t h_layer_bytes, h_sub_off[TDM_KV_SUB_MAX];              /* layer_first */
    uint64_t h_page_bytes, h_page_layer, h_in_page[TDM_KV_SUB_MAX]; /* page_first */
    uint32_t n_copy_sub;
    uint64_t copy_bytes[TDM_KV_SUB_MAX]; /* min(host, device) page stride per sub-buffer */
    /* index (scheduler thread) */
    hent_t *ents;
    int32_t *toks;
    uint64_t *ck; /* [page][layer][sub]: XXH64 of the device source's sub-buffer */
    uint32_t S;   /* sub-buffers per (page, layer) in ck: the device layout's n_sub */
    int32_t *bucket;
    uint32_t mask;
    int32_t mru, lru;
    uint32_t *free_list;
    uint32_t n_free, used;
    uint64_t stores, hits, loads, load_pages;
    uint64_t load_bytes, verified, verify_failures; /* atomics: the copy thread adds */
    /* jobs */
    hjob_t *jobs;
    uint64_t next_ticket; /* scheduler thread */
    uint64_t proc_ticket; /* under mu: the next ticket the copy thread takes */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, quit;
    /* journal (rank 0 at TP > 1) and the replica's retirement state (followers) */
    uint32_t *jr;
    uint32_t jr_n, jr_cap;
    uint64_t rep_retired; /* replica: every ticket up to this one is retired */
    uint64_t rep_bad_ticket;
    uint32_t rep_bad_page, rep_bad_layer, rep_bad_sub;
    uint64_t flip_rng; /* copy thread: flip_host_bits' choice of (layer, sub-buffer) */
};

/* job slot of a ticket (under mu or on the scheduler thread) */
int32_t tdm_hicache_job_slot(tdm_hicache_t *hc, uint64_t ticket);
/* the gate's event source with a device half: the event of (ticket's job slot, layer) */
void *tdm_hicache_layer_event(void *ctx, uint64_t ticket, uint32_t layer);
uint8_t *tdm_hicache_host_addr(const tdm_hicache_t *hc, uint32_t hp, uint32_t layer, uint32_t sub);
uint64_t tdm_hicache_dev_checksum(const tdm_hicache_t *hc, uint32_t page, uint32_t layer,
                                  uint32_t sub);
void tdm_hicache_drop(tdm_hicache_t *hc, uint32_t hp);
void tdm_hicache_journal_put(tdm_hicache_t *hc, const uint32_t *w, uint32_t n);
tdm_status_t tdm_hicache_copy_start(tdm_hicache_t *hc);
void tdm_hicache_copy_stop(tdm_hicache_t *hc);

#endif
