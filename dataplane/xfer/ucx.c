/*
 * ucx.c — the data mover: one UCP context + worker per rank, the decode pools and aux regions
 * registered for remote access (packed rkeys go into REGISTER), and on prefill the endpoints to
 * the paired decode ranks over which every page of a room is written with ucp_put_nbx and then
 * proven delivered with ucp_ep_flush_nbx. With cfg.ucx_alloc decode's pools and aux regions are
 * allocated here by ucp_mem_map(ALLOCATE) (shared memory a same-host prefill maps: a put is one
 * memcpy) and the KV pools are built over them with tdm_kv_pool_init_mem. Endpoints use
 * UCP_ERR_HANDLING_MODE_NONE for a same-host peer (PEER would leave only tcp, emulated puts) and
 * PEER otherwise. For a same-host peer whose regions came from ALLOCATE, prefill maps them with
 * ucp_rkey_ptr and writes a room with plain copies: a one-page room is 64 regions of 8 KiB, and
 * 64 ucp_put_nbx calls plus a flush request cost more than the copies themselves. Workers are
 * used only by the transfer thread (UCS_THREAD_MODE_SINGLE) and are progressed from its epoll
 * loop via ucp_worker_arm.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#endif

#include <tdm/log.h>

#include <ucs/debug/log_def.h>

#include "dataplane/xfer/xfer_int.h"

/* UCX's own log lines (its warnings about transports, endpoints) in our format, through our
 * level filter; UCX still decides which of its levels reach the handler (UCX_LOG_LEVEL). */
static ucs_log_func_rc_t ucx_log(const char *file, unsigned line, const char *function,
                                 ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                 const char *message, va_list ap)
{
    (void)comp;
    tdm_log_level_t lv = level <= UCS_LOG_LEVEL_ERROR  ? TDM_LOG_ERROR
                         : level == UCS_LOG_LEVEL_WARN ? TDM_LOG_WARN
                         : level <= UCS_LOG_LEVEL_INFO ? TDM_LOG_INFO
                                                       : TDM_LOG_DEBUG;
    if (!tdm_log_enabled(TDM_SUB_XFER, lv))
        return UCS_LOG_FUNC_RC_STOP;
    char text[1024];
    vsnprintf(text, sizeof(text), message, ap);
    const char *base = strrchr(file, '/');
    tdm_log(TDM_SUB_XFER, lv, "msg=\"%s\" src=ucx at=%s:%u func=%s", text, base ? base + 1 : file,
            line, function);
    return UCS_LOG_FUNC_RC_STOP;
}

static void ucx_log_install(void)
{
    ucs_log_push_handler(ucx_log);
}

static void ucx_log_once(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ucx_log_install);
}

static tdm_status_t ucs_fail(const char *what, ucs_status_t s)
{
    tdm_err(TDM_SUB_XFER, "%s: %s", what, ucs_status_string(s));
    return TDM_ERR_UCX;
}

/* Register [addr, addr+len) — or, with *addr NULL, let UCX allocate len bytes and return them in
 * *addr — and pack its rkey. */
static tdm_status_t map_region(ucp_context_h ctx, void **addr, size_t len, ucp_mem_h *ret_memh,
                               void **ret_rkey, size_t *ret_len)
{
    ucp_mem_map_params_t mp;
    ucp_mem_h memh;
    ucs_status_t s;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = *addr;
    mp.length = len;
    if (!*addr) {
        mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.flags = UCP_MEM_MAP_ALLOCATE;
    }
    s = ucp_mem_map(ctx, &mp, &memh);
    if (s != UCS_OK)
        return ucs_fail(*addr ? "ucp_mem_map" : "ucp_mem_map (allocate)", s);
    if (!*addr) {
        ucp_mem_attr_t ma;
        memset(&ma, 0, sizeof(ma));
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
        s = ucp_mem_query(memh, &ma);
        if (s != UCS_OK || ma.length < len || !ma.address) {
            ucp_mem_unmap(ctx, memh);
            return ucs_fail("ucp_mem_query", s != UCS_OK ? s : UCS_ERR_NO_MEMORY);
        }
        *addr = ma.address;
    }
    s = ucp_rkey_pack(ctx, memh, ret_rkey, ret_len);
    if (s != UCS_OK) {
        ucp_mem_unmap(ctx, memh);
        return ucs_fail("ucp_rkey_pack", s);
    }
    *ret_memh = memh;
    return TDM_OK;
}

tdm_status_t tdm_xfer_ucx_init(tdm_xfer_t *x, uint32_t rank)
{
    xfer_ucx_t *u = &x->ucx[rank];
    const tdm_kv_layout_t *lay =
        x->cfg.ucx_alloc ? x->cfg.kv_layout[rank] : x->cfg.kv[rank]->layout;
    uint32_t num_pages = x->cfg.ucx_alloc ? x->cfg.kv_num_pages : x->cfg.kv[rank]->num_pages;
    size_t aux_bytes = (size_t)x->cfg.aux_slots * TDM_XFER_AUX_BYTES;
    void *kv_base = x->cfg.ucx_alloc ? NULL : x->cfg.kv[rank]->base;
    void *aux_base = x->cfg.ucx_alloc ? NULL : x->aux[rank];
    ucp_params_t p;
    ucp_worker_params_t wp;
    ucp_config_t *conf = NULL;
    ucs_status_t s;
    tdm_status_t st = TDM_ERR_UCX;
    uint64_t pool_bytes;

    memset(u, 0, sizeof(*u));
    u->efd = -1;
    TDM_TRY(tdm_kv_layout_pool_bytes(lay, num_pages, &pool_bytes));
    ucx_log_once();
    s = ucp_config_read(NULL, NULL, &conf);
    if (s != UCS_OK)
        return ucs_fail("ucp_config_read", s);
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    s = ucp_init(&p, conf, &u->ctx);
    ucp_config_release(conf);
    if (s != UCS_OK)
        return ucs_fail("ucp_init", s);
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    s = ucp_worker_create(u->ctx, &wp, &u->worker);
    if (s != UCS_OK) {
        st = ucs_fail("ucp_worker_create", s);
        goto err_cleanup;
    }
    s = ucp_worker_get_efd(u->worker, &u->efd);
    if (s != UCS_OK) {
        st = ucs_fail("ucp_worker_get_efd", s);
        goto err_cleanup;
    }
    s = ucp_worker_get_address(u->worker, &u->addr, &u->addr_len);
    if (s != UCS_OK) {
        st = ucs_fail("ucp_worker_get_address", s);
        goto err_cleanup;
    }
    /* Prefill registers its pool too: zero-copy puts need the source registered. A device
     * pool (cfg.kv_cuda) is not UCX's: it moves by CUDA IPC (kvmem.c, cuda_ipc.c). */
    if (!x->cuda)
        TDM_CHECK_GOTO(
            map_region(u->ctx, &kv_base, pool_bytes, &u->kv_memh, &u->kv_rkey, &u->kv_rkey_len), st,
            err_cleanup);
    if (x->cfg.ucx_alloc) {
        /* the pool zeroes the region; buffers point at UCX's memory from here on */
        TDM_CHECK_GOTO(tdm_kv_pool_init_mem(lay, num_pages, kv_base, pool_bytes, &x->pool[rank]),
                       st, err_cleanup);
        x->cfg.kv[rank] = tdm_kv_pool_buffers(x->pool[rank]);
    }
    if (x->cfg.role == TDM_XFER_DECODE) {
        TDM_CHECK_GOTO(
            map_region(u->ctx, &aux_base, aux_bytes, &u->aux_memh, &u->aux_rkey, &u->aux_rkey_len),
            st, err_cleanup);
        if (x->cfg.ucx_alloc) {
            memset(aux_base, 0, aux_bytes);
            x->aux[rank] = aux_base;
        }
    }
    return TDM_OK;

err_cleanup:
    tdm_xfer_ucx_fini(x, rank);
    return st;
}

void tdm_xfer_ucx_fini(tdm_xfer_t *x, uint32_t rank)
{
    xfer_ucx_t *u = &x->ucx[rank];
    tdm_xfer_ucx_disconnect(x, rank);
    if (u->aux_rkey)
        ucp_rkey_buffer_release(u->aux_rkey);
    if (u->kv_rkey)
        ucp_rkey_buffer_release(u->kv_rkey);
    if (x->cfg.ucx_alloc) {
        /* the pool and aux region live in UCX memory unmapped below */
        tdm_kv_pool_free(x->pool[rank]);
        x->pool[rank] = NULL;
        x->cfg.kv[rank] = NULL;
        x->aux[rank] = NULL;
    }
    if (u->aux_memh)
        ucp_mem_unmap(u->ctx, u->aux_memh);
    if (u->kv_memh)
        ucp_mem_unmap(u->ctx, u->kv_memh);
    if (u->addr)
        ucp_worker_release_address(u->worker, u->addr);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->ctx)
        ucp_cleanup(u->ctx);
    memset(u, 0, sizeof(*u));
    u->efd = -1;
}

tdm_status_t tdm_xfer_ucx_renew_worker(tdm_xfer_t *x, uint32_t rank)
{
    xfer_ucx_t *u = &x->ucx[rank];
    ucp_worker_params_t wp;
    ucp_worker_h w = NULL;
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    int efd = -1;
    ucs_status_t s;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if ((s = ucp_worker_create(u->ctx, &wp, &w)) != UCS_OK)
        return ucs_fail("ucp_worker_create", s);
    if ((s = ucp_worker_get_efd(w, &efd)) != UCS_OK ||
        (s = ucp_worker_get_address(w, &addr, &addr_len)) != UCS_OK) {
        ucp_worker_destroy(w);
        return ucs_fail("ucp_worker_get_efd/address", s);
    }
    if (u->addr) /* decode has no endpoints of its own: the worker and its address only */
        ucp_worker_release_address(u->worker, u->addr);
    ucp_worker_destroy(u->worker); /* its connections close: late data is refused */
    u->worker = w;
    u->efd = efd;
    u->addr = addr;
    u->addr_len = addr_len;
    return TDM_OK;
}

/* Decode's region [raddr, raddr+len) mapped into this process, or NULL. ucp_rkey_ptr succeeds only
 * for memory a shared-memory transport can attach (decode's ucp_mem_map(ALLOCATE) regions); both
 * ends are checked so a copy never runs past the mapping. */
static uint8_t *map_remote(ucp_rkey_h rkey, uint64_t raddr, uint64_t len)
{
    void *p = NULL, *q = NULL;
    if (!rkey || len == 0 || raddr + len < raddr || ucp_rkey_ptr(rkey, raddr, &p) != UCS_OK ||
        ucp_rkey_ptr(rkey, raddr + len - 1, &q) != UCS_OK || (uint8_t *)q != (uint8_t *)p + len - 1)
        return NULL;
    return p;
}

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    tdm_warn(TDM_SUB_XFER, "rank %u endpoint error: %s", (unsigned)(uintptr_t)arg,
             ucs_status_string(status));
}

tdm_status_t tdm_xfer_ucx_connect(tdm_xfer_t *x, uint32_t rank, const tdm_frame_rank_t *fr,
                                  uint32_t remote_num_pages)
{
    xfer_ucx_t *u = &x->ucx[rank];
    ucp_ep_params_t ep;
    ucs_status_t s;
    tdm_status_t st;

    tdm_xfer_ucx_disconnect(x, rank);
    int peer = x->cfg.ep_err_mode == TDM_XFER_ERR_PEER ||
               (x->cfg.ep_err_mode == TDM_XFER_ERR_AUTO && !x->peer_same_host);
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = (const ucp_address_t *)fr->worker_addr.data;
    ep.err_mode = peer ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    if (peer) {
        ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.err_handler.cb = ep_err_cb;
        ep.err_handler.arg = (void *)(uintptr_t)rank;
    }
    s = ucp_ep_create(u->worker, &ep, &u->ep);
    if (s != UCS_OK)
        return ucs_fail("ucp_ep_create", s);
    pthread_mutex_lock(&x->mu); /* the connect runs without it (mover.c) */
    if (peer)
        x->st.eps_err_peer++;
    else
        x->st.eps_err_none++;
    pthread_mutex_unlock(&x->mu);
    tdm_info(TDM_SUB_XFER, "rank %u endpoint: error handling %s (%s)", rank, peer ? "peer" : "none",
             x->cfg.ep_err_mode != TDM_XFER_ERR_AUTO ? "configured"
             : peer                                  ? "remote peer"
                                                     : "same-host peer");
    /* rkey blob: u32 kv_len, the pool's packed rkey, then the aux region's (decode.c) */
    const uint8_t *b = fr->rkey.data;
    uint32_t kv_len =
        (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if (x->cuda) {
        /* the kv part is decode's CUDA IPC record (checked at REGISTER) */
        st = tdm_xfer_cuda_open(x->cuda, rank, b + 4, kv_len, remote_num_pages);
        if (st != TDM_OK)
            goto err_disconnect;
    } else if ((s = ucp_ep_rkey_unpack(u->ep, b + 4, &u->r_kv)) != UCS_OK) {
        st = ucs_fail("ucp_ep_rkey_unpack (kv)", s);
        goto err_disconnect;
    }
    s = ucp_ep_rkey_unpack(u->ep, b + 4 + kv_len, &u->r_aux);
    if (s != UCS_OK) {
        st = ucs_fail("ucp_ep_rkey_unpack (aux)", s);
        goto err_disconnect;
    }
    u->r_base = fr->base_addr;
    u->r_num_pages = remote_num_pages;
    u->r_aux_base = fr->aux_addr;
    u->r_aux_bytes = fr->aux_bytes;
    if (!peer) {
        u->r_kv_ptr = map_remote(u->r_kv, fr->base_addr, fr->pool_bytes);
        u->r_aux_ptr = map_remote(u->r_aux, fr->aux_addr, fr->aux_bytes);
    }
    tdm_info(TDM_SUB_XFER, "rank %u writes: %s", rank,
             u->r_kv_ptr && u->r_aux_ptr ? "copies into decode's mapped shared memory"
             : u->r_kv_ptr               ? "KV copied into mapped memory, aux by ucp_put_nbx"
                                         : "ucp_put_nbx");
    return TDM_OK;

err_disconnect:
    tdm_xfer_ucx_disconnect(x, rank);
    return st;
}

void tdm_xfer_ucx_disconnect(tdm_xfer_t *x, uint32_t rank)
{
    xfer_ucx_t *u = &x->ucx[rank];
    tdm_xfer_cuda_close(x->cuda, rank);
    u->r_kv_ptr = u->r_aux_ptr = NULL; /* the mappings go with the rkeys */
    if (u->r_aux)
        ucp_rkey_destroy(u->r_aux);
    if (u->r_kv)
        ucp_rkey_destroy(u->r_kv);
    u->r_aux = u->r_kv = NULL;
    if (u->ep) {
        ucp_request_param_t rp;
        memset(&rp, 0, sizeof(rp));
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
        void *req = ucp_ep_close_nbx(u->ep, &rp);
        if (UCS_PTR_IS_PTR(req)) {
            /* bounded: a close that does not complete is left to UCX (freed on completion) */
            uint64_t end = tdm_xfer_now() + XFER_CLOSE_LIMIT_US;
            while (ucp_request_check_status(req) == UCS_INPROGRESS && tdm_xfer_now() < end)
                ucp_worker_progress(u->worker);
            if (ucp_request_check_status(req) == UCS_INPROGRESS)
                tdm_warn(TDM_SUB_XFER,
                         "msg=\"endpoint close did not complete; left to UCX\" rank=%u limit_ms=%u",
                         rank, (unsigned)(XFER_CLOSE_LIMIT_US / 1000));
            ucp_request_free(req);
        }
        u->ep = NULL;
    }
}

static void put_cb(void *req, ucs_status_t status, void *user)
{
    xroom_t *r = user;
    if (status != UCS_OK)
        r->put_error = 1;
    r->ops_pending--;
    ucp_request_free(req);
}

static void flush_cb(void *req, ucs_status_t status, void *user)
{
    xroom_t *r = user;
    if (status != UCS_OK)
        r->put_error = 1;
    r->flush_pending--;
    ucp_request_free(req);
}

static int track(xroom_t *r, ucs_status_ptr_t sp, uint32_t *pending)
{
    if (sp == NULL)
        return 0;
    if (UCS_PTR_IS_ERR(sp)) {
        r->put_error = 1;
        return -1;
    }
    (*pending)++;
    return 0;
}

/* A copy whose stores bypass the cache (non-temporal), for rooms larger than the cache holds:
 * the destination is not read before it is written (no read-for-ownership) and the room does not
 * evict the source of the copies after it. The stores are weakly ordered: the room's fence
 * (tdm_xfer_ucx_flush_room) orders them before its STATUS/ABORT_ACK. */
#if defined(__x86_64__) && defined(__SSE2__)
/* 32-byte streaming stores: ~15% more than 16-byte ones for 64 MiB rooms on the bench host */
__attribute__((target("avx2"))) static void copy_stream_avx2(uint8_t *dst, const uint8_t *src,
                                                             size_t len)
{
    for (; len >= 64; dst += 64, src += 64, len -= 64) {
        __m256i a = _mm256_loadu_si256((const __m256i *)src);
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));
        _mm256_stream_si256((__m256i *)dst, a);
        _mm256_stream_si256((__m256i *)(dst + 32), b);
    }
    memcpy(dst, src, len);
}
#endif

static void copy_stream(uint8_t *dst, const uint8_t *src, size_t len)
{
#if defined(__x86_64__) && defined(__SSE2__)
    static atomic_int avx2 = -1; /* every thread that finds it unset stores the same value */
    size_t head = (size_t)(-(uintptr_t)dst & 63);
    if (len < 256 + head) {
        memcpy(dst, src, len);
        return;
    }
    memcpy(dst, src, head);
    dst += head;
    src += head;
    len -= head;
    int v = atomic_load_explicit(&avx2, memory_order_relaxed);
    if (v < 0) {
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
        atomic_store_explicit(&avx2, v, memory_order_relaxed);
    }
    if (v) {
        copy_stream_avx2(dst, src, len);
        return;
    }
    for (; len >= 64; dst += 64, src += 64, len -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)src);
        __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
    }
    memcpy(dst, src, len);
#else
    memcpy(dst, src, len);
#endif
}

/* One write of len bytes to decode's raddr: a copy when the region is mapped here (`mapped` is
 * raddr's address in this process), else a put. */
static void put_one(xfer_ucx_t *u, xroom_t *r, const void *src, size_t len, uint8_t *mapped,
                    uint64_t raddr, ucp_rkey_h rkey, int stream)
{
    if (mapped) {
        if (stream)
            copy_stream(mapped, src, len);
        else
            memcpy(mapped, src, len);
        return;
    }
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.send = put_cb;
    rp.user_data = r;
    track(r, ucp_put_nbx(u->ep, src, len, raddr, rkey, &rp), &r->ops_pending);
}

/* For each rank, layer and sub-buffer: one write per run of pages contiguous on both sides.
 * Transfer thread, without `mu`: the room's arrays are fixed while it is XR_PUTTING, and the
 * UCX objects are this thread's. ret_puts/ret_bytes: writes issued, for the stats. */
tdm_status_t tdm_xfer_ucx_put_room(tdm_xfer_t *x, xroom_t *r, uint64_t *ret_puts,
                                   uint64_t *ret_bytes)
{
    uint64_t puts = 0, bytes = 0;
    const int stream = tdm_xfer_room_sum_bytes(x, r->n_pages) >= XFER_STREAM_MIN_BYTES;
    for (uint32_t rank = 0; rank < x->n_ranks; rank++) {
        xfer_ucx_t *u = &x->ucx[rank];
        const tdm_kv_buffers_t *kv = x->cfg.kv[rank];
        const tdm_kv_layout_t *l = kv->layout;
        if (!u->ep || (!u->r_kv && !x->cuda)) {
            r->put_error = 1;
            break;
        }
        /* a device pool's pages are copied by tdm_xfer_cuda_put_room; only the aux slot is UCX's */
        for (uint32_t layer = 0; !x->cuda && layer < l->num_layers; layer++)
            for (uint32_t s = 0; s < l->n_sub; s++) {
                uint64_t stride = l->sub[s].page_stride;
                uint64_t roff =
                    tdm_kv_layout_region_offset(l, u->r_num_pages, layer, (tdm_kv_sub_t)s);
                for (uint32_t i = 0; i < r->n_pages;) {
                    uint32_t n = 1;
                    while (i + n < r->n_pages && r->src_pages[i + n] == r->src_pages[i] + n &&
                           r->pages[i + n] == r->pages[i] + n)
                        n++;
                    const uint8_t *src =
                        tdm_kv_slot(kv, layer, (tdm_kv_sub_t)s, r->src_pages[i], 0);
                    uint64_t off = roff + (uint64_t)r->pages[i] * stride;
                    put_one(u, r, src, (size_t)(n * stride), u->r_kv_ptr ? u->r_kv_ptr + off : NULL,
                            u->r_base + off, u->r_kv, stream);
                    puts++;
                    bytes += n * stride;
                    i += n;
                }
            }
        if (rank == 0) {
            uint64_t off = (uint64_t)r->aux_slot * TDM_XFER_AUX_BYTES;
            put_one(u, r, r->aux_wire, TDM_XFER_AUX_BYTES, u->r_aux_ptr ? u->r_aux_ptr + off : NULL,
                    u->r_aux_base + off, u->r_aux, 0);
            puts++;
            bytes += TDM_XFER_AUX_BYTES;
        }
    }
    *ret_puts = puts;
    *ret_bytes = bytes;
    return r->put_error ? TDM_ERR_UCX : TDM_OK;
}

tdm_status_t tdm_xfer_ucx_flush_room(tdm_xfer_t *x, xroom_t *r)
{
    for (uint32_t rank = 0; rank < x->n_ranks; rank++) {
        xfer_ucx_t *u = &x->ucx[rank];
        ucp_request_param_t rp;
        if (!u->ep)
            continue; /* never connected: nothing of this room can be in flight */
        /* A copy by this thread into decode's mapped memory is delivered once it returned and
         * the fence orders its stores (glibc's large copies use non-temporal ones) before
         * anything this thread does next: the STATUS or ABORT_ACK it queues. For a rank written
         * only by copies that fence is the flush (I5); puts still need ucp_ep_flush_nbx. */
        if (u->r_kv_ptr || u->r_aux_ptr) {
#if defined(__x86_64__) && defined(__SSE2__)
            _mm_sfence(); /* the non-temporal stores of copy_stream */
#endif
            atomic_thread_fence(memory_order_seq_cst);
        }
        if (u->r_kv_ptr && u->r_aux_ptr)
            continue;
        memset(&rp, 0, sizeof(rp));
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        rp.cb.send = flush_cb;
        rp.user_data = r;
        track(r, ucp_ep_flush_nbx(u->ep, &rp), &r->flush_pending);
    }
    return r->put_error ? TDM_ERR_UCX : TDM_OK;
}

int tdm_xfer_ucx_progress(tdm_xfer_t *x)
{
    int n = 0;
    for (uint32_t rank = 0; rank < x->n_ranks; rank++)
        while (ucp_worker_progress(x->ucx[rank].worker))
            n++;
    return n;
}
