/*
 * tests/unit/xfer-testutil.h — a prefill engine and a decode engine in one process, each with its
 * own host KV pools and its own UCP contexts (one per rank), talking over loopback TCP and UCX
 * (UCX_TLS=tcp,sm,self from the test environment). Helpers drive one room end to end.
 */
#ifndef TDM_TESTS_XFER_TESTUTIL_H
#define TDM_TESTS_XFER_TESTUTIL_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/kv.h>
#include <tdm/time.h>
#include <tdm/xfer.h>

typedef struct xt_side {
    tdm_kv_layout_t lay;
    tdm_kv_pool_t *pool[TDM_XFER_RANKS_MAX];
    tdm_xfer_cfg_t cfg;
    tdm_xfer_t *x;
} xt_side_t;

typedef struct xt_geom {
    tdm_dtype_t dtype;
    uint32_t n_ranks, page_size, num_layers, num_kv_heads, head_dim, num_pages;
} xt_geom_t;

static inline uint64_t xt_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline tdm_status_t xt_pools(xt_side_t *s, const xt_geom_t *g)
{
    tdm_model_config_t c;
    memset(&c, 0, sizeof(c));
    c.num_layers = g->num_layers;
    c.num_heads = g->num_kv_heads * g->n_ranks * 2;
    c.num_kv_heads = g->num_kv_heads * g->n_ranks;
    c.head_dim = g->head_dim;
    c.hidden_size = c.num_heads * g->head_dim;
    memset(s, 0, sizeof(*s));
    for (uint32_t r = 0; r < g->n_ranks; r++) {
        TDM_TRY(tdm_kv_layout_init(&c, g->dtype, g->page_size, g->n_ranks, r, &s->lay));
        TDM_TRY(tdm_kv_pool_init(&s->lay, g->num_pages, &s->pool[r]));
        s->cfg.kv[r] = tdm_kv_pool_buffers(s->pool[r]);
    }
    s->cfg.n_ranks = g->n_ranks;
    return TDM_OK;
}

static inline void xt_side_free(xt_side_t *s)
{
    tdm_xfer_free(s->x);
    s->x = NULL;
    for (uint32_t r = 0; r < TDM_XFER_RANKS_MAX; r++) {
        tdm_kv_pool_free(s->pool[r]);
        s->pool[r] = NULL;
    }
}

static inline uint64_t xt_pool_bytes(const xt_side_t *s, uint32_t r)
{
    uint64_t b = 0;
    const tdm_kv_buffers_t *kv = s->cfg.kv[r];
    tdm_kv_layout_pool_bytes(kv->layout, kv->num_pages, &b);
    return b;
}

static inline void xt_fill_random(xt_side_t *s, uint64_t seed)
{
    for (uint32_t r = 0; r < s->cfg.n_ranks; r++) {
        uint8_t *p = s->cfg.kv[r]->base;
        uint64_t n = xt_pool_bytes(s, r);
        for (uint64_t i = 0; i < n; i++)
            p[i] = (uint8_t)(xt_rng(&seed) >> 24);
    }
}

/* Decode pools allocated by the engine through UCX (cfg.ucx_alloc), as serving does; 0 keeps the
 * caller's aligned_alloc pools. */
static int xt_decode_ucx_alloc = 1;

/* Start prefill (port 0) then decode pointing at it. With xt_decode_ucx_alloc the decode pools
 * made by xt_pools only lend their layouts; dec->cfg.kv then points at the engine's pools. */
static inline tdm_status_t xt_start(xt_side_t *pre, xt_side_t *dec)
{
    pre->cfg.role = TDM_XFER_PREFILL;
    pre->cfg.instance_id = 0x1111;
    TDM_TRY(tdm_xfer_init(&pre->cfg, &pre->x));
    dec->cfg.role = TDM_XFER_DECODE;
    dec->cfg.instance_id = 0x2222;
    dec->cfg.host = "127.0.0.1";
    dec->cfg.port = tdm_xfer_port(pre->x);
    if (!xt_decode_ucx_alloc)
        return tdm_xfer_init(&dec->cfg, &dec->x);
    tdm_xfer_cfg_t c = dec->cfg;
    c.ucx_alloc = 1;
    c.kv_num_pages = tdm_kv_pool_num_pages(dec->pool[0]);
    for (uint32_t r = 0; r < c.n_ranks; r++) {
        c.kv_layout[r] = tdm_kv_pool_layout(dec->pool[r]);
        c.kv[r] = NULL;
    }
    TDM_TRY(tdm_xfer_init(&c, &dec->x));
    for (uint32_t r = 0; r < c.n_ranks; r++)
        dec->cfg.kv[r] = tdm_kv_pool_buffers(tdm_xfer_kv_pool(dec->x, r));
    return TDM_OK;
}

/* Wait until poll(room) reaches a state >= want or FAILED. */
static inline tdm_kvpoll_t xt_wait(tdm_xfer_t *x, uint64_t room, tdm_kvpoll_t want,
                                   uint64_t timeout_us)
{
    uint64_t end = tdm_time_mono_us() + timeout_us;
    tdm_kvpoll_t s = TDM_KVPOLL_FAILED;
    for (;;) {
        if (tdm_xfer_poll(x, room, &s) != TDM_OK) {
            /* not there yet (prefill before TRANSFER_INFO arrives) */
            if (tdm_time_mono_us() > end)
                return TDM_KVPOLL_FAILED;
            tdm_time_sleep_us(200);
            continue;
        }
        if (s >= want || s == TDM_KVPOLL_FAILED || tdm_time_mono_us() > end)
            return s;
        tdm_time_sleep_us(200);
    }
}

static inline tdm_status_t xt_next(tdm_xfer_t *pre, tdm_xfer_request_t *req, uint64_t timeout_us)
{
    uint64_t end = tdm_time_mono_us() + timeout_us;
    for (;;) {
        tdm_status_t st = tdm_xfer_prefill_next(pre, req);
        if (st != TDM_ERR_AGAIN || tdm_time_mono_us() > end)
            return st;
        tdm_time_sleep_us(200);
    }
}

/* Retry release while BUSY (data still moving or quarantined). */
static inline tdm_status_t xt_release(tdm_xfer_t *x, uint64_t room, uint64_t timeout_us)
{
    uint64_t end = tdm_time_mono_us() + timeout_us;
    for (;;) {
        tdm_status_t st = tdm_xfer_release(x, room);
        if (st != TDM_ERR_BUSY || tdm_time_mono_us() > end)
            return st;
        tdm_time_sleep_us(500);
    }
}

#endif
