/*
 * kernels/cuda/xfer_ops.h — device kernels of the PD transfer path (dataplane/xfer/cuda_ipc.c):
 * xxHash64 of KV page segments on the GPU, bit-identical to libxxhash's XXH64 (the CPU function
 * tdm_hash_xxh64 wraps), so a checksum computed on one side over GPU memory equals the one the
 * other side computes, on the CPU or the GPU, over the same bytes.
 *
 * Contract: a segment is one page of one (layer, sub-buffer) region of a KV pool laid out by its
 * descriptor: page_stride bytes at tdm_kv_slot(kv, layer, sub, page, 0). The per-page checksum
 * of the transfer (dataplane/xfer/checksum.c, tdm_xfer_page_sum) folds the segment hashes (seed 0)
 * layer-major, sub-buffer order with tdm_hash_combine; the GPU computes the segment hashes, the
 * caller folds them on the host with the same function. Any alignment and length is handled
 * (8-byte loads when the segment is 8-byte aligned, byte loads otherwise).
 *
 * The KV gather copies a room's pages from one pool into another of the same layout (page counts
 * may differ, so region offsets differ) in one launch per TDM_CUDA_KV_GATHER_RUNS runs: the runs
 * of pages (contiguous on both sides) travel as kernel parameters, so nothing is uploaded before
 * the launch and the caller may reuse its list as soon as the call returns. The default kernel
 * moves each run of each (layer, sub-buffer) region in pieces of 8 KiB, a block of 128 threads
 * each with 16-byte loads (8-, 4- or 1-byte ones where source and destination differ in
 * alignment). A room of pages scattered over the pool costs one kernel instead of one
 * cudaMemcpyAsync per run (~4 us each into a CUDA IPC mapping).
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

/* Where the regions of the two pools lie, both laid out by one descriptor:
 * region(layer, sub) = base + layer * layer_bytes + sub_offset[sub], page p of it at
 * + p * page_stride[sub] (tdm_kv_buffers_t's fields; the destination's from
 * tdm_kv_layout_region_offset for its own page count). */
typedef struct tdm_cuda_kv_map {
    uint64_t src_layer_bytes, dst_layer_bytes;
    uint64_t src_sub_offset[TDM_KV_SUB_MAX], dst_sub_offset[TDM_KV_SUB_MAX];
    uint64_t page_stride[TDM_KV_SUB_MAX];
    uint32_t num_layers, n_sub;
} tdm_cuda_kv_map_t;

/* n_pages pages from src_page on into dst_page on, in every region. */
typedef struct tdm_cuda_page_run {
    uint32_t src_page, dst_page, n_pages;
} tdm_cuda_page_run_t;

/* Runs one launch carries in its parameters (12 bytes each: 3 KiB, inside the 4 KiB that every
 * driver takes; CUDA 12.1+ would take 32 KB on sm_70+, not needed: 256 runs are at least 256
 * blocks of work); more runs take more launches, queued back to back. A launch of one run takes
 * an instance without the list (~170 bytes of parameters), of up to 16 a 16-run one. */
#define TDM_CUDA_KV_GATHER_RUNS 256u

/* Queue the copy of every run in every (layer, sub) region from src_base into dst_base on
 * `stream`. runs: host memory, read during the call. src_base, dst_base: device pointers (dst may
 * be a CUDA IPC mapping of the same device); destinations must not overlap each other or the
 * sources. Any alignment and stride. *ret_launches (may be NULL) is set to the kernels queued.
 * TDM_ERR_INVAL: bad arguments (n_sub > TDM_KV_SUB_MAX, a NULL with runs); TDM_ERR_RANGE: more
 * than 65535 layers (the grid's z); TDM_ERR_CUDA: a launch failed (logged; the launches before it
 * stay queued). */
tdm_status_t tdm_cuda_kv_gather(const uint8_t *src_base, uint8_t *dst_base,
                                const tdm_cuda_kv_map_t *map, const tdm_cuda_page_run_t *runs,
                                uint32_t n_runs, cudaStream_t stream, uint32_t *ret_launches);

/* Bench seam (tests/gpu/test-xfer-cuda's A/B), the gather's kernel:
 *   0 (default) blocks of 128 threads x 4 16-byte loads (8 KiB a block), a launch of several runs
 *     on a run grid (block y = its run) unless that grid would be over half empty;
 *   1 the warp kernel of runs 9-12 (a persistent grid of warps, 4 KiB page chunks, a binary
 *     search per unit);
 *   2 the blocks of 0 on the search grid only (a block finds its run by a binary search). */
extern int tdm_cuda_kv_gather_variant;

/* Test helper: XXH64(buf, len, seed) on the GPU, with buf (host, len bytes) copied to device
 * memory at byte offset `misalign` (0..7) from an aligned allocation. Synchronous. */
tdm_status_t tdm_cuda_xxh64_host(const void *buf, size_t len, size_t misalign, uint64_t seed,
                                 uint64_t *ret_hash);

#ifdef __cplusplus
}
#endif

#endif
