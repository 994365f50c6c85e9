/*
 * dataplane/xfer/cuda_ipc.h — the same-host GPU data mover of the PD transfer engine: a decode
 * group's KV pool on the GPU (one cudaMalloc laid out by the layout descriptor) is exported with
 * cudaIpcGetMemHandle; the handle travels in REGISTER (the rank's rkey blob, mem_kind 1, as a
 * versioned record: docs/contracts.md); prefill opens it with cudaIpcOpenMemHandle
 * (cudaIpcMemLazyEnablePeerAccess) and copies its pages into decode's device→device on a dedicated
 * non-blocking stream (one kernel over the room's page runs, or one cudaMemcpyAsync per run when
 * there are only one or two), then records an event: a room is delivered
 * (the UCX flush of the host path, I5) only once that event completed. Checksums are computed on
 * the GPU (kernels/cuda/xfer_ops.cu: XXH64 per segment, folded on the host with
 * tdm_hash_combine), equal to tdm_xfer_page_sum over the same bytes.
 *
 * Pages are named as on the host path: region(layer, sub) offsets from
 * tdm_kv_layout_region_offset for the pool's page count, page_stride per page; runs of pages
 * contiguous on both sides are one copy. The aux slot stays in host memory moved by UCX.
 *
 * Record (the kv part of the rkey blob, little-endian, XFER_CUDA_REC_BYTES):
 *   0 magic u32 "TCIP" | 4 version u16 = 1 | 6 length u16 = 104 | 8 cudaIpcMemHandle_t (64) |
 *   72 offset u64 (pool base − allocation base; 0 here) | 80 pool_bytes u64 | 88 device uuid (16)
 *
 * Threading: one context per engine; export/open/close/copy/fence on the transfer thread (open
 * and export also at init); page_sums and flip from any thread (serialised by a mutex, on their
 * own stream). Every call first selects the device the context was created on.
 * Built only with a linkable CUDA runtime (TDM_HAVE_CUDA_RT); without it tdm_xfer_cuda_init answers
 * TDM_ERR_UNSUPPORTED and nothing else is reachable.
 */
#ifndef TDM_XFER_CUDA_IPC_H
#define TDM_XFER_CUDA_IPC_H

#include <stddef.h>
#include <stdint.h>

#include <tdm/kv.h>
#include <tdm/status.h>

/* One step of a segment sum (here for both the CPU and the CUDA fold; xfer_int.h includes this)
 * over the room's pages in order (docs/contracts.md §d "Segment sums"): s * 0x9e3779b97f4a7c15 + h
 * mod 2^64, from 0. The multiplier is odd, so a change of one page's segment hash always changes
 * the sum (the page sums stay the detector; this names the segment), for a multiply-add per segment
 * instead of a hash call (the fp8 layouts' 88 segments per page made tdm_hash_combine cost ~10 % of
 * the page hashing: bench/checksum_segments). */
static inline uint64_t tdm_xfer_seg_fold(uint64_t s, uint64_t h)
{
    return s * 0x9e3779b97f4a7c15ull + h;
}

#define XFER_CUDA_REC_MAGIC 0x50494354u /* "TCIP" */
#define XFER_CUDA_REC_VERSION 1
#define XFER_CUDA_REC_BYTES 104u

typedef struct xfer_cuda xfer_cuda_t;

#ifdef TDM_HAVE_CUDA_RT
/* Context on the calling thread's current device: streams, no peer yet. */
tdm_status_t tdm_xfer_cuda_init(uint32_t n_ranks, xfer_cuda_t **ret);
/* Closes every opened peer pool (after the caller's copies completed). NULL-safe. */
void tdm_xfer_cuda_free(xfer_cuda_t *c);
/* Decode: the record of a pool whose base is the start of a cudaMalloc allocation. */
tdm_status_t tdm_xfer_cuda_export(xfer_cuda_t *c, const tdm_kv_buffers_t *kv,
                                  uint8_t ret_rec[XFER_CUDA_REC_BYTES]);
/* Prefill: 0 when `rec` is a valid record for a pool of pool_bytes, else 1 and a reason. */
int tdm_xfer_cuda_record_check(const uint8_t *rec, size_t len, uint64_t pool_bytes, char *why,
                               size_t why_len);
/* Prefill: map decode rank `rank`'s pool (remote_num_pages pages, this side's layout). */
tdm_status_t tdm_xfer_cuda_open(xfer_cuda_t *c, uint32_t rank, const uint8_t *rec, size_t len,
                                uint32_t remote_num_pages);
void tdm_xfer_cuda_close(xfer_cuda_t *c, uint32_t rank);
/* Prefill: queue the copies of n pages of this side's pool `kv` (src_pages) into the paired
 * decode pool (dst_pages). *ret_bytes / *ret_copies are added to. TDM_ERR_PEER when not open,
 * TDM_ERR_RANGE for a page outside either pool. */
tdm_status_t tdm_xfer_cuda_copy(xfer_cuda_t *c, uint32_t rank, const tdm_kv_buffers_t *kv,
                                const uint32_t *src_pages, const uint32_t *dst_pages, uint32_t n,
                                uint64_t *ret_bytes, uint64_t *ret_copies);
/* An event after every copy queued so far; poll: 1 completed, 0 pending, -1 failed. With
 * wake_fd >= 0 (an eventfd that must stay open until tdm_xfer_cuda_free) the stream also writes 1
 * to it once the copies completed, so a sleeping transfer thread wakes at once. */
tdm_status_t tdm_xfer_cuda_fence(xfer_cuda_t *c, int wake_fd, void **ret_ev);
int tdm_xfer_cuda_fence_poll(xfer_cuda_t *c, void *ev);
void tdm_xfer_cuda_fence_free(xfer_cuda_t *c, void *ev);
/* Benches and tests: the copy stream (a cudaStream_t), to time the room's work on it. */
void *tdm_xfer_cuda_stream(xfer_cuda_t *c);
/* Wait until every queued copy finished (error paths). */
void tdm_xfer_cuda_drain(xfer_cuda_t *c);
/* One checksum per page over device pool `kv` (== tdm_xfer_page_sum of the same bytes) and, when
 * ret_seg is not NULL, the num_layers x n_sub segment sums of tdm_xfer_page_sums (folded on the
 * host with tdm_xfer_seg_fold from the same per-segment GPU hashes). */
tdm_status_t tdm_xfer_cuda_page_sums(xfer_cuda_t *c, const tdm_kv_buffers_t *kv,
                                     const uint32_t *pages, uint32_t n, uint64_t *ret_sums,
                                     uint64_t *ret_seg);
/* Fault injection: *dev_byte ^= mask in device memory. */
tdm_status_t tdm_xfer_cuda_flip(xfer_cuda_t *c, uint8_t *dev_byte, uint8_t mask);
#else
/* No CUDA runtime in this build: a device pool cannot be moved. The rest is never reached
 * (no context exists) and answers the same. */
static inline tdm_status_t tdm_xfer_cuda_init(uint32_t n_ranks, xfer_cuda_t **ret)
{
    (void)n_ranks;
    (void)ret;
    return TDM_ERR_UNSUPPORTED;
}
static inline void tdm_xfer_cuda_free(xfer_cuda_t *c)
{
    (void)c;
}
static inline tdm_status_t tdm_xfer_cuda_export(xfer_cuda_t *c, const tdm_kv_buffers_t *kv,
                                                uint8_t ret_rec[XFER_CUDA_REC_BYTES])
{
    (void)c, (void)kv, (void)ret_rec;
    return TDM_ERR_UNSUPPORTED;
}
static inline int tdm_xfer_cuda_record_check(const uint8_t *rec, size_t len, uint64_t pool_bytes,
                                             char *why, size_t why_len)
{
    (void)rec, (void)len, (void)pool_bytes;
    if (why && why_len)
        why[0] = '\0';
    return 1;
}
static inline tdm_status_t tdm_xfer_cuda_open(xfer_cuda_t *c, uint32_t rank, const uint8_t *rec,
                                              size_t len, uint32_t remote_num_pages)
{
    (void)c, (void)rank, (void)rec, (void)len, (void)remote_num_pages;
    return TDM_ERR_UNSUPPORTED;
}
static inline void tdm_xfer_cuda_close(xfer_cuda_t *c, uint32_t rank)
{
    (void)c, (void)rank;
}
static inline tdm_status_t tdm_xfer_cuda_copy(xfer_cuda_t *c, uint32_t rank,
                                              const tdm_kv_buffers_t *kv, const uint32_t *src_pages,
                                              const uint32_t *dst_pages, uint32_t n,
                                              uint64_t *ret_bytes, uint64_t *ret_copies)
{
    (void)c, (void)rank, (void)kv, (void)src_pages, (void)dst_pages, (void)n, (void)ret_bytes,
        (void)ret_copies;
    return TDM_ERR_UNSUPPORTED;
}
static inline tdm_status_t tdm_xfer_cuda_fence(xfer_cuda_t *c, int wake_fd, void **ret_ev)
{
    (void)c, (void)wake_fd, (void)ret_ev;
    return TDM_ERR_UNSUPPORTED;
}
static inline void tdm_xfer_cuda_drain(xfer_cuda_t *c)
{
    (void)c;
}
static inline int tdm_xfer_cuda_fence_poll(xfer_cuda_t *c, void *ev)
{
    (void)c, (void)ev;
    return -1;
}
static inline void tdm_xfer_cuda_fence_free(xfer_cuda_t *c, void *ev)
{
    (void)c, (void)ev;
}
static inline void *tdm_xfer_cuda_stream(xfer_cuda_t *c)
{
    (void)c;
    return NULL;
}
static inline tdm_status_t tdm_xfer_cuda_page_sums(xfer_cuda_t *c, const tdm_kv_buffers_t *kv,
                                                   const uint32_t *pages, uint32_t n,
                                                   uint64_t *ret_sums, uint64_t *ret_seg)
{
    (void)c, (void)kv, (void)pages, (void)n, (void)ret_sums, (void)ret_seg;
    return TDM_ERR_UNSUPPORTED;
}
static inline tdm_status_t tdm_xfer_cuda_flip(xfer_cuda_t *c, uint8_t *dev_byte, uint8_t mask)
{
    (void)c, (void)dev_byte, (void)mask;
    return TDM_ERR_UNSUPPORTED;
}
#endif

#endif
