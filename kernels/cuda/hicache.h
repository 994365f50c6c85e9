/*
 * kernels/cuda/hicache.h — the CUDA half of the HiCache host tier (include/tdm/hicache.h, "the
 * device half"; docs/design.md §I6-I7) and the engine's side of the layer gate.
 *
 * The tier half (tdm_cuda_hicache_dev, C linkage): a pinned host pool mapped into the device's
 * address space (cudaHostAlloc), one copy stream for loads and one stream for stores and the
 * canary poison, one cudaEvent per (job slot, layer) recorded on the copy stream after that
 * layer's copies, a gather kernel (io KERNEL: every (page, sub-buffer) of a layer in one launch,
 * 16-byte words read from the mapped host pool) or one cudaMemcpyAsync per run of pages adjacent
 * in both pools (io DIRECT), and XXH64 on the device (one block per (page, layer): the sub-buffers
 * chained in order, bit-identical to tdm_hash_xxh64 over the same bytes).
 *
 * The engine side (tdm_cuda_hc_t, C++): before attention reads layer L of a batch that depends on
 * a load, tdm_cuda_hc_layer asks the gate (tdm_kv_layer_acquire_dev: the CPU wait for the copy
 * thread to have enqueued the layer, then the event) and makes the compute stream wait on that
 * event; in canary mode (the gate counts poison reads) a probe kernel at the same stream position
 * counts the K/V entries of the poison pattern the batch's attention is about to read, added to
 * the gate's poison counter after the forward (tdm_cuda_hc_after). A batch that depends on a load
 * never replays a decode graph (its waits are per call). Threading: the engine's.
 */
#ifndef TDM_KERNELS_CUDA_HICACHE_H
#define TDM_KERNELS_CUDA_HICACHE_H

#include "cuda_int.h"

extern "C" {
#include <tdm/hicache.h>
const tdm_hicache_dev_t *tdm_cuda_hicache_dev(void);
}

typedef struct tdm_cuda_hc {
    tdm_kv_gate_t *gate; /* NULL: no tier */
    tdm_kv_batch_t batch;
    unsigned long long *d_poison; /* device counter of the current forward (canary) */
    uint64_t *poison_reads;       /* the gate's counter (NULL: not counting) */
    int probed;                   /* the current forward launched the probe */
} tdm_cuda_hc_t;

/* The engine reads its pool through `gate` from now on (NULL: none). */
tdm_status_t tdm_cuda_hc_use_gate(tdm_cuda_hc_t *h, tdm_kv_gate_t *gate);
/* Whether the batch depends on a load (then no decode graph). */
int tdm_cuda_hc_pending(const tdm_cuda_hc_t *h);
/* Before attention of `layer` over rows (n rows, plan on the device), on stream s. */
tdm_status_t tdm_cuda_hc_layer(tdm_cuda_hc_t *h, const tdm_cuda_kv_t *kv, uint32_t layer,
                               const tdm_cuda_rows_t *rows, uint32_t n, cudaStream_t s);
/* After the forward's stream synchronised: poison reads into the gate's counter. */
tdm_status_t tdm_cuda_hc_after(tdm_cuda_hc_t *h);
void tdm_cuda_hc_free(tdm_cuda_hc_t *h);

#endif
