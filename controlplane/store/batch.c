/*
 * batch.c — encode/decode of the self-contained telemetry batch blob (see batch.h for the layout).
 */
#include "config.h"

#include <string.h>

#include <tdm/mem.h>

#include "controlplane/store/batch.h"

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Point the batch's views into its blob; 0 on success, -1 if lengths or terminators are wrong. */
static int batch_bind(tdm_cp_batch_t *b)
{
    const uint8_t *p = b->blob;
    if (b->blob_len < TDM_CP_BATCH_HDR)
        return -1;
    b->seq = get_u64(p);
    b->rank = get_u32(p + 8);
    b->n_samples = get_u32(p + 12);
    b->n_tevents = get_u32(p + 16);
    b->n_events = get_u32(p + 20);
    size_t lens[5];
    for (int i = 0; i < 5; i++)
        lens[i] = get_u32(p + 24 + 4 * i);
    const char *views[5];
    size_t off = TDM_CP_BATCH_HDR;
    for (int i = 0; i < 5; i++) {
        size_t end;
        if (tdm_size_add(off, lens[i], &end) != TDM_OK || end >= b->blob_len || p[end] != 0)
            return -1;
        views[i] = (const char *)p + off;
        if (memchr(views[i], 0, lens[i]) != NULL)
            return -1;
        off = end + 1;
    }
    if (off != b->blob_len || lens[0] == 0)
        return -1;
    b->instance_id = views[0];
    b->group = views[1];
    b->samples = views[2];
    b->samples_len = lens[2];
    b->tevents = views[3];
    b->tevents_len = lens[3];
    b->events = views[4];
    b->events_len = lens[4];
    return 0;
}

tdm_status_t tdm_cp_batch_encode(const tdm_cp_batch_parts_t *parts, tdm_cp_batch_t **ret_batch)
{
    const char *src[5] = {parts->instance_id, parts->group, parts->samples, parts->tevents,
                          parts->events};
    size_t lens[5] = {strlen(parts->instance_id), strlen(parts->group), parts->samples_len,
                      parts->tevents_len, parts->events_len};
    size_t total = TDM_CP_BATCH_HDR;
    for (int i = 0; i < 5; i++) {
        if (lens[i] > UINT32_MAX)
            return TDM_ERR_OVERFLOW;
        TDM_TRY(tdm_size_add(total, lens[i] + 1, &total));
    }
    uint8_t *blob = tdm_malloc(total);
    put_u64(blob, parts->seq);
    put_u32(blob + 8, parts->rank);
    put_u32(blob + 12, parts->n_samples);
    put_u32(blob + 16, parts->n_tevents);
    put_u32(blob + 20, parts->n_events);
    size_t off = TDM_CP_BATCH_HDR;
    for (int i = 0; i < 5; i++) {
        put_u32(blob + 24 + 4 * i, (uint32_t)lens[i]);
        if (lens[i])
            memcpy(blob + off, src[i], lens[i]);
        blob[off + lens[i]] = 0;
        off += lens[i] + 1;
    }
    tdm_cp_batch_t *b = tdm_calloc(1, sizeof(*b));
    b->blob = blob;
    b->blob_len = total;
    if (batch_bind(b) != 0) {
        tdm_cp_batch_free(b);
        return TDM_ERR_INVAL; /* an instance_id that is empty or holds NUL */
    }
    *ret_batch = b;
    return TDM_OK;
}

/* The fields of the first samples row. */
static size_t first_row_fields(const tdm_cp_batch_t *b)
{
    const char *p = b->samples, *end = p + b->samples_len, *eol = memchr(p, '\n', b->samples_len);
    size_t n = 1;
    for (end = eol ? eol : end; p < end; p++)
        n += *p == '\t';
    return n;
}

/* A batch spooled before the statistics columns: every samples row gets them (0) and recv_us
 * (\N), in a new blob. */
static tdm_cp_batch_t *upgrade_samples(tdm_cp_batch_t *b)
{
    static const char tail[] = "\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t\\N";
    size_t rows = 0;
    for (size_t i = 0; i < b->samples_len; i++)
        rows += b->samples[i] == '\n';
    char *text = tdm_malloc(b->samples_len + (rows + 1) * (sizeof(tail) - 1) + 1);
    char *o = text;
    for (const char *p = b->samples, *end = p + b->samples_len; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t n = eol ? (size_t)(eol - p) : (size_t)(end - p);
        memcpy(o, p, n);
        o += n;
        memcpy(o, tail, sizeof(tail) - 1);
        o += sizeof(tail) - 1;
        if (eol)
            *o++ = '\n';
        p += n + (eol != NULL);
    }
    tdm_cp_batch_parts_t parts = {
        .seq = b->seq,
        .rank = b->rank,
        .instance_id = b->instance_id,
        .group = b->group,
        .samples = text,
        .samples_len = (size_t)(o - text),
        .tevents = b->tevents,
        .tevents_len = b->tevents_len,
        .events = b->events,
        .events_len = b->events_len,
        .n_samples = b->n_samples,
        .n_tevents = b->n_tevents,
        .n_events = b->n_events,
    };
    tdm_cp_batch_t *nb = NULL;
    if (tdm_cp_batch_encode(&parts, &nb) != TDM_OK)
        nb = NULL;
    tdm_free(text);
    tdm_cp_batch_free(b);
    return nb;
}

tdm_status_t tdm_cp_batch_decode(uint8_t *blob, size_t len, tdm_cp_batch_t **ret_batch)
{
    tdm_cp_batch_t *b = tdm_calloc(1, sizeof(*b));
    b->blob = blob;
    b->blob_len = len;
    if (batch_bind(b) != 0) {
        tdm_cp_batch_free(b);
        return TDM_ERR_FORMAT;
    }
    if (b->samples_len && first_row_fields(b) == TDM_CP_SAMPLE_COLUMNS_V1 &&
        !(b = upgrade_samples(b)))
        return TDM_ERR_FORMAT;
    *ret_batch = b;
    return TDM_OK;
}

void tdm_cp_batch_free(tdm_cp_batch_t *b)
{
    if (!b)
        return;
    tdm_free(b->blob);
    tdm_free(b);
}
