/*
 * hist.c — the in-memory cache of each rank's recent persisted samples that answers covered
 * history queries without the database (see hist.h for the coverage rule).
 */
#include "config.h"

#include <string.h>

#include <tdm/hash.h>
#include <tdm/mem.h>

#include "controlplane/store/hist.h"

struct tdm_cp_hist_rank {
    char instance_id[TDM_TM_NAME_MAX + 1];
    uint32_t rank;
    tdm_cp_hist_row_t *rows; /* circular, oldest at `first` */
    size_t cap, first, count;
    int64_t cover_from; /* INT64_MAX: nothing committed yet */
    int64_t newest_ts;  /* newest ts_us ever seen (committed or in a gap) */
    uint64_t first_seq; /* batch_seq of the first commit seen (0: none) */
    int any;            /* newest_ts is set */
};

static uint64_t key_hash(const char *inst, uint32_t rank)
{
    return tdm_hash_combine(tdm_hash_xxh3(inst, strlen(inst)), rank);
}

void tdm_cp_hist_init(tdm_cp_hist_t *h, size_t cap_per_rank, size_t max_ranks)
{
    memset(h, 0, sizeof(*h));
    h->cap_per_rank = cap_per_rank ? cap_per_rank : 1;
    h->max_ranks = max_ranks;
    h->nslots = 64;
    while (h->nslots < 2 * max_ranks)
        h->nslots *= 2;
    h->slots = tdm_calloc(h->nslots, sizeof(*h->slots));
}

void tdm_cp_hist_free(tdm_cp_hist_t *h)
{
    if (!h->slots)
        return;
    for (size_t i = 0; i < h->nslots; i++) {
        if (h->slots[i]) {
            tdm_free(h->slots[i]->rows);
            tdm_free(h->slots[i]);
        }
    }
    tdm_free(h->slots);
    memset(h, 0, sizeof(*h));
}

/* The rank's entry; created when `create` (NULL past max_ranks or for an over-long name). */
static tdm_cp_hist_rank_t *find(tdm_cp_hist_t *h, const char *inst, uint32_t rank, int create)
{
    size_t mask = h->nslots - 1, i = (size_t)key_hash(inst, rank) & mask;
    for (; h->slots[i]; i = (i + 1) & mask)
        if (h->slots[i]->rank == rank && strcmp(h->slots[i]->instance_id, inst) == 0)
            return h->slots[i];
    if (!create || h->n >= h->max_ranks || strlen(inst) > TDM_TM_NAME_MAX)
        return NULL;
    tdm_cp_hist_rank_t *r = tdm_calloc(1, sizeof(*r));
    memcpy(r->instance_id, inst, strlen(inst) + 1);
    r->rank = rank;
    r->cover_from = INT64_MAX;
    h->slots[i] = r;
    h->n++;
    return r;
}

static const tdm_cp_hist_row_t *row_at(const tdm_cp_hist_rank_t *r, size_t i)
{
    return &r->rows[(r->first + i) % r->cap];
}

static void raise_cover(tdm_cp_hist_rank_t *r, int64_t ts)
{
    int64_t next = ts == INT64_MAX ? INT64_MAX : ts + 1;
    if (r->cover_from == INT64_MAX || next > r->cover_from)
        r->cover_from = next;
}

static void push(tdm_cp_hist_t *h, tdm_cp_hist_rank_t *r, const tdm_tm_sample_t *s, uint64_t seq)
{
    if (r->count == r->cap && r->cap < h->cap_per_rank) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        if (cap > h->cap_per_rank)
            cap = h->cap_per_rank;
        tdm_cp_hist_row_t *rows = tdm_calloc(cap, sizeof(*rows));
        for (size_t i = 0; i < r->count; i++)
            rows[i] = *row_at(r, i);
        tdm_free(r->rows);
        r->rows = rows;
        r->cap = cap;
        r->first = 0;
    }
    if (r->count == r->cap) { /* full: the oldest goes, and coverage with it */
        raise_cover(r, row_at(r, 0)->s.ts_us);
        r->first = (r->first + 1) % r->cap;
        r->count--;
    }
    tdm_cp_hist_row_t *dst = &r->rows[(r->first + r->count) % r->cap];
    dst->s = *s;
    dst->batch_seq = seq;
    r->count++;
}

void tdm_cp_hist_commit(tdm_cp_hist_t *h, const char *instance_id, uint32_t rank,
                        uint64_t batch_seq, const tdm_tm_sample_t *rows, size_t n)
{
    if (n == 0)
        return;
    tdm_cp_hist_rank_t *r = find(h, instance_id, rank, 1);
    if (!r)
        return;
    if (!r->first_seq)
        r->first_seq = batch_seq;
    for (size_t i = 0; i < n; i++) {
        int64_t ts = rows[i].ts_us;
        if (r->cover_from == INT64_MAX && !r->any)
            r->cover_from = ts; /* the first row: what came before it is the database's */
        if (r->any && ts < r->newest_ts) {
            /* Out of order: the held rows would no longer be the newest ones. */
            r->count = 0;
            r->first = 0;
            raise_cover(r, r->newest_ts);
            continue;
        }
        r->newest_ts = ts;
        r->any = 1;
        if (r->cover_from != INT64_MAX && ts >= r->cover_from)
            push(h, r, &rows[i], batch_seq);
    }
}

void tdm_cp_hist_gap(tdm_cp_hist_t *h, const char *instance_id, uint32_t rank, int64_t newest_ts_us)
{
    tdm_cp_hist_rank_t *r = find(h, instance_id, rank, 1);
    if (!r)
        return;
    if (r->cover_from != INT64_MAX && newest_ts_us < r->cover_from)
        return; /* all below what the cache claims to hold */
    int64_t top = r->any && r->newest_ts > newest_ts_us ? r->newest_ts : newest_ts_us;
    if (r->any && newest_ts_us < r->newest_ts) {
        /* rows older than what is held: only the newer ones stay covered, so restart */
        r->count = 0;
        r->first = 0;
    }
    r->newest_ts = top;
    r->any = 1;
    raise_cover(r, top);
}

void tdm_cp_hist_duplicate(tdm_cp_hist_t *h, const char *instance_id, uint32_t rank,
                           uint64_t batch_seq, int64_t newest_ts_us)
{
    tdm_cp_hist_rank_t *r = find(h, instance_id, rank, 0);
    if (r && r->first_seq && batch_seq >= r->first_seq)
        return; /* its original was committed after the first commit seen: through here */
    tdm_cp_hist_gap(h, instance_id, rank, newest_ts_us);
}

void tdm_cp_hist_gap_all(tdm_cp_hist_t *h)
{
    for (size_t i = 0; i < h->nslots; i++) {
        tdm_cp_hist_rank_t *r = h->slots[i];
        if (!r)
            continue;
        r->count = 0;
        r->first = 0;
        if (r->any)
            raise_cover(r, r->newest_ts);
    }
}

/* First logical index whose ts_us >= ts (count if none). */
static size_t lower_bound(const tdm_cp_hist_rank_t *r, int64_t ts)
{
    size_t lo = 0, hi = r->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (row_at(r, mid)->s.ts_us < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void tdm_cp_in_coll_json(tdm_cp_buf_t *b, const tdm_tm_in_coll_t *c)
{
    tdm_cp_buf_puts(b, "{\"op\": ");
    tdm_cp_buf_json_str(b, c->op);
    tdm_cp_buf_puts(b, ", \"seq\": ");
    tdm_cp_buf_u64(b, c->seq);
    tdm_cp_buf_puts(b, ", \"since_us\": ");
    tdm_cp_buf_i64(b, c->since_us);
    tdm_cp_buf_puts(b, "}");
}

/* `key` (with its punctuation) then the number; hex ones are quoted. */
static void kv_u64(tdm_cp_buf_t *b, const char *key, uint64_t v)
{
    tdm_cp_buf_puts(b, key);
    tdm_cp_buf_u64(b, v);
}

static void kv_hex(tdm_cp_buf_t *b, const char *key, uint64_t v)
{
    tdm_cp_buf_puts(b, key);
    tdm_cp_buf_hex16(b, v);
    tdm_cp_buf_puts(b, "\"");
}

const char *const tdm_cp_sample_stat_names[TDM_CP_SAMPLE_STATS] = {
    "tokens_out",      "requests_done",    "ttft_p50_us",     "ttft_p99_us",
    "itl_p50_us",      "itl_p99_us",       "kv_pages_used",   "kv_pages_total",
    "host_pages_used", "host_pages_total", "corruption_total"};

void tdm_cp_sample_stats_json(tdm_cp_buf_t *b, const tdm_tm_sample_t *x)
{
    const uint64_t v[TDM_CP_SAMPLE_STATS] = {
        x->tokens_out,      x->requests_done,    x->ttft_p50_us,     x->ttft_p99_us,
        x->itl_p50_us,      x->itl_p99_us,       x->kv_pages_used,   x->kv_pages_total,
        x->host_pages_used, x->host_pages_total, x->corruption_total};
    for (int i = 0; i < TDM_CP_SAMPLE_STATS; i++) {
        tdm_cp_buf_puts(b, ",\"");
        tdm_cp_buf_puts(b, tdm_cp_sample_stat_names[i]);
        tdm_cp_buf_puts(b, "\":");
        tdm_cp_buf_u64(b, v[i]);
    }
    tdm_cp_buf_puts(b, ",\"recv_us\":");
    if (x->recv_us)
        tdm_cp_buf_i64(b, x->recv_us);
    else
        tdm_cp_buf_puts(b, "null");
}

static void row_json(tdm_cp_buf_t *b, const tdm_cp_hist_row_t *row)
{
    const tdm_tm_sample_t *x = &row->s;
    tdm_cp_buf_puts(b, "{\"ts_us\":");
    tdm_cp_buf_i64(b, x->ts_us);
    kv_u64(b, ",\"batch_seq\":", row->batch_seq);
    kv_u64(b, ",\"iter\":", x->iter);
    tdm_cp_buf_puts(b, ",\"path\":");
    tdm_cp_buf_json_str(b, x->path);
    kv_hex(b, ",\"plan_hash\":\"", x->plan_hash);
    kv_u64(b, ",\"coll_seq\":", x->coll_seq);
    kv_hex(b, ",\"coll_hash\":\"", x->coll_hash);
    tdm_cp_buf_puts(b, ",\"in_coll\":");
    if (x->in_coll_valid)
        tdm_cp_in_coll_json(b, &x->in_coll);
    else
        tdm_cp_buf_puts(b, "null");
    kv_u64(b, ",\"bs\":", x->bs);
    kv_u64(b, ",\"waiting\":", x->waiting);
    kv_u64(b, ",\"running\":", x->running);
    tdm_cp_sample_stats_json(b, x);
    tdm_cp_buf_puts(b, "}");
}

int tdm_cp_hist_render(tdm_cp_hist_t *h, const char *instance_id, uint32_t rank, int64_t since_us,
                       int64_t until_us, size_t limit, tdm_cp_buf_t *out)
{
    tdm_cp_hist_rank_t *r = find(h, instance_id, rank, 0);
    if (!r || r->cover_from == INT64_MAX) {
        h->misses++;
        return 0;
    }
    int64_t lo_ts = since_us > r->cover_from ? since_us : r->cover_from;
    size_t lo = lower_bound(r, lo_ts), hi = until_us > lo_ts ? lower_bound(r, until_us) : lo;
    size_t m = hi - lo;
    if (since_us < r->cover_from && m < limit) {
        h->misses++;
        return 0;
    }
    if (m > limit)
        lo = hi - limit;
    h->hits++;
    tdm_cp_buf_puts(out, "{\"instance_id\":");
    tdm_cp_buf_json_str(out, instance_id);
    tdm_cp_buf_puts(out, ",\"rank\":");
    tdm_cp_buf_u64(out, rank);
    tdm_cp_buf_puts(out, ",\"samples\":[");
    for (size_t i = lo; i < hi; i++) {
        if (i > lo)
            tdm_cp_buf_puts(out, ",");
        row_json(out, row_at(r, i));
    }
    tdm_cp_buf_puts(out, "]}");
    return 1;
}
