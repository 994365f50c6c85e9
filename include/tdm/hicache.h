/*
 * tdm/hicache.h — HiCache: the host-memory KV tier under the prefix cache, its layer-wise async
 * loads, and the one gate every read of a layer that may be loading goes through (invariants I6
 * and I7; flags and fault points in docs/contracts.md).
 *
 * Layout (I6). The host pool is laid out from the SAME tdm_kv_layout_t as the device pool: every
 * sub-buffer (K, V, and the fp8 scales) with the descriptor's bytes/token and page stride. At
 * init the two records are compared sub-buffer by sub-buffer; a difference refuses to start with
 * a message naming the sub-buffer, both bytes/token and both strides (tdm_hicache_init's err),
 * unless cfg.force_layout (test only) is set. The fault point host_layout_fp8_formula builds the
 * host descriptor with the fp8 formula instead (what the motivating bug did); copies then use the
 * host stride of each sub-buffer: truncation, never an out-of-bounds write.
 * Host memory layouts: LAYER_FIRST is the device pool's own shape (region(layer, sub) holds every
 * page); PAGE_FIRST keeps one page's layers and sub-buffers contiguous ([page][layer][sub]).
 * Copy paths: KERNEL gathers every (page, sub-buffer) of a layer word by word in one pass (on the
 * GPU a gather kernel; on the CPU the same loop on the copy thread); DIRECT issues one memcpy per
 * contiguous run (on the GPU cudaMemcpyAsync per run), runs of adjacent pages coalesced.
 *
 * Tier. Host pages are indexed like the prefix cache: by the chained hash of their tokens
 * (h_i = xxh64(tokens of page i, seed h_{i-1})) with the tokens verified on lookup, LRU among
 * pages not being loaded. tdm_hicache_store copies a device page to the host (checksums first: per
 * layer the XXH64 of the DEVICE SOURCE bytes of every sub-buffer, never of the host copy).
 * tdm_hicache_load queues the copy of host pages into device pages on the copy thread and returns
 * a ticket; the thread copies layer 0 of every page of the job, publishes (ticket, 0) to the gate,
 * then layer 1, and so on; after the last layer a sampled job (cfg.verify_every) is verified by
 * recomputing the checksums on the DEVICE DESTINATION. A mismatch makes tdm_hicache_wait report
 * TDM_ERR_CORRUPT with the first bad page and layer; the entry is dropped from the tier.
 * In canary mode (cfg.poison) destination pages are filled with poison before the job is queued
 * (bf16 0x7fa1 NaN, fp8 0x7f, f32 0x7fa1a1a1), and attention counts poison reads (gate).
 *
 * Gate (I7). The forward never holds the KV buffers: it asks tdm_kv_layer_acquire(gate, batch,
 * layer) per layer, which returns them once every load the batch depends on (batch->need, the
 * newest ticket among its sequences) has published that layer. On CUDA the same two calls map to
 * one event per (ticket, layer) recorded on the copy stream and cudaStreamWaitEvent on the compute
 * stream. A return before the layer is complete (only the skip_layer_gate fault can cause one) is
 * a bypass: counted, and fatal in builds with TDM_DEBUG unless the fault was armed. Building with
 * -DTDM_TEST_DROP_GATE_WAIT deletes the wait (make check proves the poison test then fails).
 *
 * Threading: tier functions on one thread (the scheduler's); the copy thread is internal; the
 * gate's acquire on the forward's thread, its counters from any thread.
 * Errors: TDM_ERR_INVAL, TDM_ERR_NOMEM (host memory), TDM_ERR_FORMAT (layout mismatch at init),
 * TDM_ERR_AGAIN (no host page or job slot free), TDM_ERR_CORRUPT (a verified load mismatched).
 */
#ifndef TDM_HICACHE_H
#define TDM_HICACHE_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/kv.h>
#include <tdm/layout.h>
#include <tdm/status.h>

#define TDM_KV_POISON_BF16 0x7fa1u
#define TDM_KV_POISON_FP8 0x7fu
#define TDM_KV_POISON_F32 0x7fa1a1a1u

/* ---- the gate ---- */

typedef struct tdm_kv_gate tdm_kv_gate_t;

/* What one forward depends on: iter (for fault points) and the newest load ticket any of its
 * sequences reads (0 = none). */
typedef struct tdm_kv_batch {
    uint64_t iter;
    uint64_t need;
} tdm_kv_batch_t;

/* A gate over kv (copied); count_poison: attention counts poison reads through it. */
tdm_status_t tdm_kv_gate_init(const tdm_kv_buffers_t *kv, int count_poison, tdm_kv_gate_t **ret);
void tdm_kv_gate_free(tdm_kv_gate_t *g);
/* The only way to the KV buffers of `layer` for a batch: waits for (batch->need, layer). */
const tdm_kv_buffers_t *tdm_kv_layer_acquire(tdm_kv_gate_t *g, const tdm_kv_batch_t *b,
                                             uint32_t layer);
/* Page count and layout without access to the bytes (validation). */
const tdm_kv_layout_t *tdm_kv_gate_layout(const tdm_kv_gate_t *g);
uint32_t tdm_kv_gate_num_pages(const tdm_kv_gate_t *g);
/* Copy side: every page of load `ticket` has `layer` in place. Tickets complete in order. */
void tdm_kv_gate_publish(tdm_kv_gate_t *g, uint64_t ticket, uint32_t layer);
/* Fault hook: when skip(ctx, iter, layer) returns 1 the acquire does not wait. */
void tdm_kv_gate_set_skip(tdm_kv_gate_t *g, int (*skip)(void *ctx, uint64_t iter, uint32_t layer),
                          void *ctx);
/* GPU pools: the same acquire, plus in *ret_event the device event (a cudaEvent_t) the reading
 * stream must wait on before it reads the layer: the copy stream's event of (batch->need, layer),
 * NULL when the batch needs no load or the wait was skipped (fault) or dropped
 * (TDM_TEST_DROP_GATE_WAIT). The CPU wait still runs first: it orders the read after the copy
 * thread has ENQUEUED the layer's copies and recorded that event. */
const tdm_kv_buffers_t *tdm_kv_layer_acquire_dev(tdm_kv_gate_t *g, const tdm_kv_batch_t *b,
                                                 uint32_t layer, void **ret_event);
/* Where acquire_dev finds the event of (ticket, layer) (set by the tier with a device half). */
void tdm_kv_gate_set_events(tdm_kv_gate_t *g,
                            void *(*event)(void *ctx, uint64_t ticket, uint32_t layer), void *ctx);
uint64_t tdm_kv_gate_bypasses(const tdm_kv_gate_t *g);
uint64_t tdm_kv_gate_poison_reads(const tdm_kv_gate_t *g);
uint64_t tdm_kv_gate_waits(const tdm_kv_gate_t *g); /* acquires that had to block */

/* ---- the host tier ---- */

typedef enum tdm_hicache_policy {
    TDM_HICACHE_WRITE_THROUGH = 0,       /* when a page enters the prefix cache */
    TDM_HICACHE_WRITE_BACK,              /* when the prefix cache evicts it */
    TDM_HICACHE_WRITE_THROUGH_SELECTIVE, /* when a cached page is hit the second time */
    TDM_HICACHE_POLICY_MAX
} tdm_hicache_policy_t;

typedef enum tdm_hicache_mem_layout {
    TDM_HICACHE_LAYER_FIRST = 0,
    TDM_HICACHE_PAGE_FIRST,
    TDM_HICACHE_MEM_LAYOUT_MAX
} tdm_hicache_mem_layout_t;

typedef enum tdm_hicache_io {
    TDM_HICACHE_IO_KERNEL = 0,
    TDM_HICACHE_IO_DIRECT,
    TDM_HICACHE_IO_MAX
} tdm_hicache_io_t;

/* Fault points the tier checks (the caller maps them to its fault table). */
typedef enum tdm_hicache_fault {
    TDM_HICACHE_FAULT_SLOW_COPY = 0, /* sleep duration_ms before each layer of a load */
    TDM_HICACHE_FAULT_FLIP_BITS,     /* flip one bit of a host page before a load reads it */
    TDM_HICACHE_FAULT_MAX
} tdm_hicache_fault_t;

tdm_status_t tdm_hicache_policy_parse(const char *s, tdm_hicache_policy_t *ret);
tdm_status_t tdm_hicache_mem_layout_parse(const char *s, tdm_hicache_mem_layout_t *ret);
tdm_status_t tdm_hicache_io_parse(const char *s, tdm_hicache_io_t *ret);
const char *tdm_hicache_policy_name(tdm_hicache_policy_t p);

/* ---- the device half (GPU pools) ----
 * With cfg.dev set the device pool is GPU memory (kernels/cuda/hicache.cu provides the half):
 * the host pool comes from dev->host_alloc (pinned, mapped into the device's address space), and
 * every touch of device bytes goes through dev on its own copy stream: stores (checksums of the
 * device source computed on the device, then the page copied down), the canary poison of load
 * destinations, the layer-by-layer copies of a load (a gather kernel for KERNEL, one
 * cudaMemcpyAsync per run for DIRECT) each followed by the (job slot, layer) event the gate hands
 * to readers, and the verification checksums of the device destination. The geometry says where
 * a (page, layer, sub-buffer) lives in either pool. */
typedef struct tdm_hicache_geom {
    uint32_t num_layers, n_sub, n_copy_sub, page_first, kv_dtype, dev_pages, host_pages;
    uint8_t *dev_base; /* device: base + layer * d_layer_bytes + d_off[s] + page * d_stride[s] */
    uint64_t d_layer_bytes, d_off[TDM_KV_SUB_MAX], d_stride[TDM_KV_SUB_MAX];
    uint8_t *host_base; /* page_first: base + hp * h_page_bytes + layer * h_page_layer +
                         * h_in_page[s]; layer_first: base + layer * h_layer_bytes + h_off[s] +
                         * hp * h_stride[s] */
    uint64_t h_layer_bytes, h_off[TDM_KV_SUB_MAX], h_stride[TDM_KV_SUB_MAX];
    uint64_t h_page_bytes, h_page_layer, h_in_page[TDM_KV_SUB_MAX];
    uint64_t copy_bytes[TDM_KV_SUB_MAX]; /* bytes moved per (page, layer, sub) */
} tdm_hicache_geom_t;

typedef struct tdm_hicache_dev {
    void *(*host_alloc)(uint64_t bytes); /* zeroed; NULL when it cannot */
    void (*host_free)(void *p);
    tdm_status_t (*open)(const tdm_hicache_geom_t *g, uint32_t max_jobs, void **ret);
    void (*close)(void *d); /* waits for its copy stream */
    /* device page -> host page hp, ck[layer * n_sub + s] = the XXH64 of the device source's
     * sub-buffer s (as tdm_hicache_dev_checksum), computed before the copy; returns when the
     * copy is done */
    tdm_status_t (*store)(void *d, uint32_t page, uint32_t hp, uint64_t *ck);
    /* fill every layer and sub-buffer of the pages with the kv dtype's poison; returns when done */
    tdm_status_t (*poison)(void *d, const uint32_t *pages, uint32_t n);
    /* enqueue the copy of `layer` of n host pages into device pages for job `slot`, then record
     * the slot's event of that layer */
    tdm_status_t (*load_layer)(void *d, uint32_t slot, const uint32_t *host, const uint32_t *dev,
                               uint32_t n, uint32_t layer, int io_kernel);
    /* wait for every copy of the slot's job; then, when ck is not NULL,
     * ck[(i * L + l) * n_sub + s] = the checksum of device page dev[i], layer l, sub-buffer s */
    tdm_status_t (*load_end)(void *d, uint32_t slot, const uint32_t *dev, uint32_t n, uint64_t *ck);
    void *(*event)(void *d, uint32_t slot, uint32_t layer); /* cudaEvent_t */
} tdm_hicache_dev_t;

typedef struct tdm_hicache_cfg {
    const tdm_kv_layout_t *layout; /* the device pool's descriptor */
    uint32_t device_pages;
    double ratio;        /* host pages = ratio * device_pages, unless size_bytes > 0 */
    uint64_t size_bytes; /* host pool bytes (sized by the configurator from the descriptor) */
    tdm_hicache_policy_t policy;
    tdm_hicache_mem_layout_t mem_layout;
    tdm_hicache_io_t io;
    uint32_t verify_every; /* verify 1 load in N (1 = all, 0 = none) */
    int poison;            /* canary: poison destinations, count poison reads */
    int fp8_formula;       /* fault host_layout_fp8_formula: host descriptor by the fp8 formula */
    int force_layout;      /* test only: start despite a layout mismatch */
    uint32_t max_jobs;     /* loads in flight at once (>= 1) */
    /* fault check, may be NULL; returns 1 when the point fires (duration in *ret_ms) */
    int (*fault)(void *ctx, tdm_hicache_fault_t f, uint32_t *ret_ms);
    void *fault_ctx;
    const tdm_hicache_dev_t *dev; /* NULL: the device pool is host memory (CPU) */
    /* TP > 1 (docs/design.md §I1): rank 0's tier journals every store it makes and every load
     * it queues (tdm_hicache_journal); a follower's tier is a replica with no index of its own
     * that applies rank 0's journal to its own KV-head shard (tdm_hicache_replay) */
    int journal;
    int replica;
    uint32_t rank; /* the TP rank of this tier, for its log lines */
} tdm_hicache_cfg_t;

typedef struct tdm_hicache tdm_hicache_t;

/* The host pool's descriptor for cfg (the device descriptor, or the fp8 formula under the fault).
 */
tdm_status_t tdm_hicache_host_layout(const tdm_hicache_cfg_t *cfg, tdm_kv_layout_t *ret);
/* Build the host pool for `device` (the device pool's buffers) and start the copy thread; the
 * device layout record and the host record are compared here (err names the difference). */
tdm_status_t tdm_hicache_init(const tdm_hicache_cfg_t *cfg, const tdm_kv_buffers_t *device,
                              tdm_hicache_t **ret, char *err, size_t err_len);
void tdm_hicache_free(tdm_hicache_t *hc); /* waits for the loads in flight */
/* The gate the forward must read the device pool through. */
tdm_kv_gate_t *tdm_hicache_gate(tdm_hicache_t *hc);
tdm_hicache_policy_t tdm_hicache_policy(const tdm_hicache_t *hc);
/* The two records compared at init (telemetry "layout" events). */
void tdm_hicache_records(const tdm_hicache_t *hc, tdm_layout_record_t *ret_device,
                         tdm_layout_record_t *ret_host);

/* Whether the page (chain hash, parent hash, tokens) is in the tier. */
int tdm_hicache_contains(tdm_hicache_t *hc, uint64_t hash, uint64_t parent, const int32_t *toks);
/* Copy device page `page` to the tier under (hash, parent, toks) unless already there; evicts the
 * least recently used host page that is not loading. TDM_ERR_AGAIN when every page is loading. */
tdm_status_t tdm_hicache_store(tdm_hicache_t *hc, uint32_t page, uint64_t hash, uint64_t parent,
                               const int32_t *toks);
/* Host pages continuing a chain: pages [first, first + n) of tokens where the chain hash of
 * pages [0, first) is `parent`; returns how many matched (at most max) and pins them (their
 * host ids in ret_host); tdm_hicache_load or tdm_hicache_unpin takes the pins over. */
uint32_t tdm_hicache_match(tdm_hicache_t *hc, const int32_t *tokens, uint32_t first, uint32_t max,
                           uint64_t parent, uint32_t *ret_host);
void tdm_hicache_unpin(tdm_hicache_t *hc, const uint32_t *host, uint32_t n);
/* Queue the load of n pinned host pages into device pages `dev` (poisoned first in canary mode);
 * a ticket > 0 for the gate. TDM_ERR_AGAIN when max_jobs loads are in flight. */
tdm_status_t tdm_hicache_load(tdm_hicache_t *hc, const uint32_t *host, const uint32_t *dev,
                              uint32_t n, uint64_t *ret_ticket);
/* Wait for a load (every layer, and its verification) and retire it: TDM_OK, or TDM_ERR_CORRUPT
 * with the first bad (layer, device page, sub-buffer) — layer-major, then the job's page order,
 * then tdm_kv_sub_t order — (the host entries of a bad load are dropped). A ticket already
 * retired returns TDM_OK. Each ret_ may be NULL. */
tdm_status_t tdm_hicache_wait(tdm_hicache_t *hc, uint64_t ticket, uint32_t *ret_page,
                              uint32_t *ret_layer, uint32_t *ret_sub);
/* ---- TP > 1: the journal rank 0 carries to followers in the plan ----
 * Words: STORE = {1, device page, host page}; LOAD = {2, n, ticket lo, ticket hi, host[n],
 * dev[n]}. The journal holds what happened since the last reset, in order. A replica applies
 * it: a store copies its own shard of the device page into the named host page (checksums of
 * its own device source), a load queues the same job with the same ticket (verification rate
 * and poison as rank 0's, since the load count is the same); a replica keeps a host page whose
 * load failed verification (rank 0 decides what the tier drops). */
void tdm_hicache_journal(const tdm_hicache_t *hc, const uint32_t **ret_words, uint32_t *ret_n);
void tdm_hicache_journal_reset(tdm_hicache_t *hc);
/* Replica: apply journal words; before a load it retires every load in flight, the first
 * verification failure among them kept for tdm_hicache_replica_retire. TDM_ERR_FORMAT on a
 * malformed journal, TDM_ERR_STATE when the replica diverged (a ticket or page out of step). */
tdm_status_t tdm_hicache_replay(tdm_hicache_t *hc, const uint32_t *w, uint32_t n);
/* Replica: retire every load with a ticket <= upto; returns the first verification failure
 * since the last call (its ticket, device page, layer and sub-buffer), ticket 0 when none. */
void tdm_hicache_replica_retire(tdm_hicache_t *hc, uint64_t upto, uint64_t *ret_ticket,
                                uint32_t *ret_page, uint32_t *ret_layer, uint32_t *ret_sub);

/* Drop every host page that is not loading. */
void tdm_hicache_flush(tdm_hicache_t *hc);

typedef struct tdm_hicache_stats {
    uint32_t host_pages_total, host_pages_used, host_pages_pinned, loads_in_flight;
    uint64_t host_bytes;
    uint64_t stores, hits, loads, load_pages, load_bytes;
    uint64_t verified, verify_failures, bypasses, poison_reads, gate_waits;
} tdm_hicache_stats_t;
void tdm_hicache_stats(tdm_hicache_t *hc, tdm_hicache_stats_t *ret);

#endif
