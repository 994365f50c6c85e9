/*
 * stop.c — stop strings on streamed text (contract in include/tdm/sample.h).
 *
 * The invariant that makes streaming safe: every byte before `emitted` was proven not to start a
 * stop string, because a tail that could still grow into one was held back. So each scan looks
 * only at text[emitted, len): first for a complete match (earliest start wins), then for the
 * earliest suffix that is a proper prefix of some stop string, which must be held. Cost per scan
 * is O((len - emitted) * total stop bytes), and len - emitted stays below the longest stop string
 * plus the bytes of one token.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/sample.h>

tdm_status_t tdm_sample_stop_init(tdm_sample_stop_t *m, const char *const *stops, uint32_t n,
                                  char *err, size_t err_len)
{
    tdm_sample_stop_t r;
    memset(&r, 0, sizeof(r));
    if (n > TDM_SAMPLE_MAX_STOP) {
        if (err && err_len)
            snprintf(err, err_len, "at most %d stop strings (got %u)", TDM_SAMPLE_MAX_STOP, n);
        return TDM_ERR_RANGE;
    }
    if (n && !stops)
        return TDM_ERR_INVAL;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = stops[i] ? strlen(stops[i]) : 0;
        if (len == 0) {
            if (err && err_len)
                snprintf(err, err_len, "stop string %u is empty", i);
            return TDM_ERR_INVAL;
        }
        if (len > TDM_SAMPLE_MAX_STOP_LEN) {
            if (err && err_len)
                snprintf(err, err_len, "stop string %u is %zu bytes (max %d)", i, len,
                         TDM_SAMPLE_MAX_STOP_LEN);
            return TDM_ERR_RANGE;
        }
        r.str[i] = stops[i];
        r.len[i] = len;
        if (len > r.max_len)
            r.max_len = len;
    }
    r.n = n;
    *m = r;
    return TDM_OK;
}

tdm_status_t tdm_sample_stop_scan(const tdm_sample_stop_t *m, const char *text, size_t len,
                                  size_t emitted, tdm_sample_stop_result_t *ret)
{
    if (!m || !ret || emitted > len || (len && !text))
        return TDM_ERR_INVAL;
    tdm_sample_stop_result_t r = {TDM_STOP_NONE, len, 0};

    for (size_t start = emitted; start < len; start++)
        for (uint32_t i = 0; i < m->n; i++)
            if (len - start >= m->len[i] && memcmp(text + start, m->str[i], m->len[i]) == 0) {
                r.kind = TDM_STOP_MATCHED;
                r.emit = start;
                r.which = i;
                *ret = r;
                return TDM_OK;
            }

    /* a complete match would have been found above, so only tails shorter than max_len matter */
    size_t from = emitted;
    if (m->max_len && len - emitted >= m->max_len)
        from = len - (m->max_len - 1);
    for (size_t start = from; start < len; start++)
        for (uint32_t i = 0; i < m->n; i++)
            if (len - start < m->len[i] && memcmp(text + start, m->str[i], len - start) == 0) {
                r.kind = TDM_STOP_PARTIAL;
                r.emit = start;
                *ret = r;
                return TDM_OK;
            }
    *ret = r;
    return TDM_OK;
}
