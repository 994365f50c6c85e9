/*
 * kernels/cuda/xfer_ops.h — device kernels of the PD transfer path (dataplane/xfer/cuda_ipc.c):
 * xxHash64 of KV page segments on the GPU, bit-identical to libxxhash's XXH64 (the CPU function
 * tdm_hash_xxh64 wraps), so a checksum computed on one side over GPU memory equals the one the
 * other side computes, on the CPU or the GPU, over the same bytes.
 *
 * Contract: a segment is one page of one (layer, sub-buffer) region of a KV pool laid out by its
 * descriptor: page_stride bytes at tdm_kv_slot(kv, layer, sub, page, 0). The per-page checksum
 * of the transfer (dataplane/xfer/checksum.c, xfer_page_sum) folds the segment hashes (seed 0)
 * layer-major, sub-buffer order with tdm_hash_combine; the GPU computes the segment hashes, the
 * caller folds them on the host with the same function. Any alignment and length is handled
 * (8-byte loads when the segment is 8-byte aligned, byte loads otherwise).
 *
 * Threading: launches go to the given stream and never synchronise (except the test helper).
 * Errors: TDM_ERR_INVAL (bad arguments), TDM_ERR_CUDA (launch failed; logged once).
 */
#ifndef TDM_KERNELS_CUDA_XFER_OPS_H
#define TDM_KERNELS_CUDA_XFER_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <tdm/kv.h>
#include <tdm/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kv: a pool whose `base` is device memory (layout on the host). d_pages: (n_pages) page ids,
 * device. d_out: (n_pages, num_layers, n_sub) XXH64(segment, 0), device. */
tdm_status_t tdm_cuda_kv_segment_hashes(const tdm_kv_buffers_t *kv, const uint32_t *d_pages,
                                        uint32_t n_pages, uint64_t *d_out, cudaStream_t stream);

/* Test helper: XXH64(buf, len, seed) on the GPU, with buf (host, len bytes) copied to device
 * memory at byte offset `misalign` (0..7) from an aligned allocation. Synchronous. */
tdm_status_t tdm_cuda_xxh64_host(const void *buf, size_t len, size_t misalign, uint64_t seed,
                                 uint64_t *ret_hash);

#ifdef __cplusplus
}
#endif

#endif
