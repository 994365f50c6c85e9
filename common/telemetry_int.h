/*
 * common/telemetry_int.h — what telemetry.c (limits, the JSON encoder, the jansson decoder, acks),
 * telemetry_scan.c (the strict scanner's JSON primitives) and telemetry_scan_batch.c (samples,
 * events and batches on the scanner) share. Not for use outside common/.
 */
#ifndef TDM_COMMON_TELEMETRY_INT_H
#define TDM_COMMON_TELEMETRY_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include <tdm/status.h>
#include <tdm/telemetry.h>

#define JSON_UINT_MAX ((uint64_t)INT64_MAX)

/* A sample's members: the first SAMPLE_REQUIRED are required, the serving statistics after them
 * optional (0 when absent), read and written through sample_stats (same order). */
#define SAMPLE_REQUIRED 10
#define SAMPLE_STATS 11

extern const char *const tdm_tmi_sample_keys[];

/* The decoded events' data texts, built back to back in one buffer. Texts are placed by offset
 * (the buffer may move as it grows) and the events point into it once the batch is complete. */
typedef struct dtext {
    char *p;
    size_t len, cap;
    size_t *off; /* per event: offset + 1 of its text, 0 for none */
    size_t noff;
} dtext_t;

#define SC_DATA_DEPTH 256 /* deeper data is left to the jansson path (its limit is 2048) */

#define SC_EVENT_MIN 22 /* {"ts_us":0,"type":"a"} */

typedef struct scan {
    const unsigned char *p, *end;
} scan_t;

static inline void sc_ws(scan_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\t' || *s->p == '\r'))
        s->p++;
}

static inline int sc_eat(scan_t *s, unsigned char c)
{
    sc_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 0;
    }
    return -1;
}

void tdm_tmi_dtext_close(dtext_t *d, size_t start, uint32_t i);
int tdm_tmi_dtext_dump(dtext_t *d, const json_t *data, uint32_t i, size_t max_bytes);
void tdm_tmi_dtext_finish(dtext_t *d, tdm_tm_batch_t *b);
void tdm_tmi_dtext_free(dtext_t *d);
char *tdm_tmi_dtext_reserve(dtext_t *d, size_t extra);
int tdm_tmi_role_ok(const char *r);
int tdm_tmi_sc_data_flat(const unsigned char *p, size_t n, size_t max_bytes, dtext_t *d,
                         uint32_t i);
int tdm_tmi_sc_elem(scan_t *s, int *first);
int tdm_tmi_sc_field(scan_t *s, char *dst, size_t cap);
int tdm_tmi_sc_hex4(const unsigned char *p, uint32_t *ret);
int tdm_tmi_sc_hex64(scan_t *s, uint64_t *ret);
int tdm_tmi_sc_i64(scan_t *s, int64_t max, int64_t *ret);
int tdm_tmi_sc_in_coll(scan_t *s, tdm_tm_in_coll_t *ic);
int tdm_tmi_sc_member(scan_t *s, int *first, const char *const *keys, unsigned *seen);
int tdm_tmi_sc_null(scan_t *s);
int tdm_tmi_sc_str(scan_t *s, char *dst, size_t cap, size_t *ret_len);
int tdm_tmi_sc_u32(scan_t *s, uint32_t *ret);
int tdm_tmi_sc_uint(scan_t *s, uint64_t max, uint64_t *ret);
size_t tdm_tmi_sc_utf8(const unsigned char *p, const unsigned char *end);
uint64_t tdm_tmi_stat_max(size_t k);
void tdm_tmi_stat_set(tdm_tm_sample_t *s, size_t k, uint64_t v);

#endif
