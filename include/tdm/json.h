/*
 * tdm/json.h — the JSON conventions of docs/design.md §6 over jansson.
 *
 * - 64-bit ids and hashes are lowercase hex strings of exactly 16 digits ("00000000000000ff");
 *   decoding is strict: no prefix, no uppercase, no other length.
 * - Times are integer µs since the epoch (json integers, never reals or strings).
 * - Errors are `{"error":{"code":..,"message":..,"type":..}}` with a matching HTTP status.
 *
 * Getters check the type and range of one member and, on failure, write a message that names the
 * full key path (`samples[3].in_coll.op: expected a string, got integer`). The caller passes the
 * path of the containing object ("" at the root); build element paths with tdm_json_path().
 * A missing member is TDM_ERR_NOTFOUND (so optional members are `st == TDM_ERR_NOTFOUND`); a
 * member of the wrong type or range is TDM_ERR_INVAL / TDM_ERR_RANGE. JSON null counts as
 * missing only in the *_opt getters. Outputs are written only on success; returned strings
 * point into the json_t and live as long as it does. Thread-safe (no state).
 */
#ifndef TDM_JSON_H
#define TDM_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/status.h>

#define TDM_JSON_HEX64_LEN 16

/* Writes v's decimal digits at o (at most 20 bytes, no NUL); returns the end. */
char *tdm_json_put_u64(char *o, uint64_t v);

/* Writes 16 lowercase hex digits and a NUL into buf[17]. */
void tdm_json_hex64_format(uint64_t v, char buf[TDM_JSON_HEX64_LEN + 1]);
/* Strict: exactly 16 digits [0-9a-f]. */
tdm_status_t tdm_json_hex64_parse(const char *s, uint64_t *ret_v);
/* New reference to a JSON string holding the hex form (aborts on OOM like tdm_malloc). */
json_t *tdm_json_hex64(uint64_t v);

/* "parent.key" or "parent[idx]" into buf (truncated to fit); returns buf. */
const char *tdm_json_path(char *buf, size_t len, const char *parent, const char *key);
const char *tdm_json_path_idx(char *buf, size_t len, const char *parent, size_t idx);

tdm_status_t tdm_json_get_object(const json_t *obj, const char *path, const char *key, json_t **ret,
                                 char *err, size_t err_len);
tdm_status_t tdm_json_get_array(const json_t *obj, const char *path, const char *key, json_t **ret,
                                char *err, size_t err_len);
/* A string of at most max_len bytes without NUL bytes. */
tdm_status_t tdm_json_get_string(const json_t *obj, const char *path, const char *key,
                                 size_t max_len, const char **ret, char *err, size_t err_len);
tdm_status_t tdm_json_get_int(const json_t *obj, const char *path, const char *key, int64_t min,
                              int64_t max, int64_t *ret, char *err, size_t err_len);
/* Non-negative integer (JSON integers are at most 2^63-1 in jansson). */
tdm_status_t tdm_json_get_uint(const json_t *obj, const char *path, const char *key, uint64_t max,
                               uint64_t *ret, char *err, size_t err_len);
/* An integer or a real, finite, in [min, max]. */
tdm_status_t tdm_json_get_number(const json_t *obj, const char *path, const char *key, double min,
                                 double max, double *ret, char *err, size_t err_len);
tdm_status_t tdm_json_get_bool(const json_t *obj, const char *path, const char *key, int *ret,
                               char *err, size_t err_len);
tdm_status_t tdm_json_get_hex64(const json_t *obj, const char *path, const char *key, uint64_t *ret,
                                char *err, size_t err_len);
/* µs since the epoch: an integer in [0, 2^62]. */
tdm_status_t tdm_json_get_ts_us(const json_t *obj, const char *path, const char *key, int64_t *ret,
                                char *err, size_t err_len);
/* Like tdm_json_get_string but absent or null → TDM_OK with *ret = NULL. */
tdm_status_t tdm_json_get_string_opt(const json_t *obj, const char *path, const char *key,
                                     size_t max_len, const char **ret, char *err, size_t err_len);

/* TDM_ERR_INVAL naming the first member of `obj` not in the NULL-terminated `allowed` list. */
tdm_status_t tdm_json_check_keys(const json_t *obj, const char *path, const char *const *allowed,
                                 char *err, size_t err_len);

/* Parse at most max_bytes of text into an object or array; rejects duplicate keys. The message
 * carries jansson's line:column. */
tdm_status_t tdm_json_parse(const char *buf, size_t len, size_t max_bytes, json_t **ret, char *err,
                            size_t err_len);
/* Compact serialization; caller frees with free(3). NULL only on OOM or an invalid value. */
char *tdm_json_dumps(const json_t *v);

/* `{"error":{"code":code,"message":message,"type":type}}` (new reference). */
json_t *tdm_json_error(const char *type, const char *code, const char *message);
/* The same for a tdm_status_t: code is tdm_status_name(), type and HTTP status follow the
 * status (INVAL → 400 invalid_request_error, NOTFOUND → 404, PERM → 403, AGAIN → 429, BUSY →
 * 503, TIMEOUT → 504, anything else 500 server_error). */
json_t *tdm_json_error_status(tdm_status_t st, const char *message, int *ret_http_status);

/* The HTTP reason phrase of a status code ("Not Found"); a generic phrase for others. Used by both
 * HTTP servers (tandemd and the worker) so their status lines agree. */
const char *tdm_http_reason(int status);

#endif
