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
 * The gather copy moves a list of segments (one run of pages of one region) from one pool into
 * another in a single launch, one block per segment with 16-byte loads and stores where source
 * and destination are equally aligned (bytes otherwise): a room of pages scattered over the pool
 * costs one kernel instead of one cudaMemcpyAsync per run (~5 us each into a CUDA IPC mapping).
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

/* One piece of a gather copy: `bytes` from src_base + src_off to dst_base + dst_off. */
typedef struct tdm_cuda_seg {
    uint64_t src_off, dst_off, bytes;
} tdm_cuda_seg_t;

/* A segment's bytes are copied by one block; longer runs are split by the caller into pieces of
 * at most this many bytes (one pass of the block) so that a few long runs still fill the GPU. */
#define TDM_CUDA_GATHER_SEG_MAX (16u << 10)

/* d_segs: (n_segs) segments, device memory, read when the kernel runs (the caller keeps them
 * until the stream passed the launch). src_base, dst_base: device pointers (dst may be a CUDA
 * IPC mapping of the same device). Destinations must not overlap each other or the sources.
 * Any alignment and length; n_segs <= INT32_MAX. */
tdm_status_t tdm_cuda_gather_copy(const uint8_t *src_base, uint8_t *dst_base,
                                  const tdm_cuda_seg_t *d_segs, uint32_t n_segs,
                                  cudaStream_t stream);

/* Test helper: XXH64(buf, len, seed) on the GPU, with buf (host, len bytes) copied to device
 * memory at byte offset `misalign` (0..7) from an aligned allocation. Synchronous. */
tdm_status_t tdm_cuda_xxh64_host(const void *buf, size_t len, size_t misalign, uint64_t seed,
                                 uint64_t *ret_hash);

#ifdef __cplusplus
}
#endif

#endif
