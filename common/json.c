/*
 * json.c — the project's JSON conventions (docs/design.md §6) on top of jansson: strict 64-bit hex
 * ids, integer µs timestamps, typed getters whose errors name the full key path, and the error
 * object. Decoders of wire formats (telemetry, console API) are built from these getters so
 * every malformed input gets the same precise message.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/json.h>
#include <tdm/log.h>

void tdm_json_hex64_format(uint64_t v, char buf[TDM_JSON_HEX64_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = TDM_JSON_HEX64_LEN - 1; i >= 0; i--) {
        buf[i] = digits[v & 0xf];
        v >>= 4;
    }
    buf[TDM_JSON_HEX64_LEN] = '\0';
}

tdm_status_t tdm_json_hex64_parse(const char *s, uint64_t *ret_v)
{
    uint64_t v = 0;
    if (!s)
        return TDM_ERR_INVAL;
    for (int i = 0; i < TDM_JSON_HEX64_LEN; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            return TDM_ERR_INVAL; /* also catches a short string: its NUL lands here */
        v = (v << 4) | d;
    }
    if (s[TDM_JSON_HEX64_LEN] != '\0')
        return TDM_ERR_INVAL;
    *ret_v = v;
    return TDM_OK;
}

__attribute__((noreturn)) static void json_oom(void)
{
    tdm_log(TDM_SUB_CORE, TDM_LOG_ERROR, "msg=\"out of memory building JSON\"");
    abort();
}

json_t *tdm_json_hex64(uint64_t v)
{
    char buf[TDM_JSON_HEX64_LEN + 1];
    tdm_json_hex64_format(v, buf);
    json_t *j = json_string(buf);
    if (!j)
        json_oom();
    return j;
}

const char *tdm_json_path(char *buf, size_t len, const char *parent, const char *key)
{
    if (parent && *parent)
        snprintf(buf, len, "%s.%s", parent, key);
    else
        snprintf(buf, len, "%s", key);
    return buf;
}

const char *tdm_json_path_idx(char *buf, size_t len, const char *parent, size_t idx)
{
    snprintf(buf, len, "%s[%zu]", parent ? parent : "", idx);
    return buf;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "null";
    }
}

/* Fetch a member or explain why not. */
static tdm_status_t member(const json_t *obj, const char *path, const char *key, json_t **ret,
                           char *err, size_t err_len)
{
    char p[256];
    if (!json_is_object(obj)) {
        snprintf(err, err_len, "%s: expected an object, got %s", *path ? path : "(root)",
                 obj ? type_name(obj) : "nothing");
        return TDM_ERR_INVAL;
    }
    json_t *v = json_object_get(obj, key);
    if (!v) {
        snprintf(err, err_len, "%s: missing", tdm_json_path(p, sizeof(p), path, key));
        return TDM_ERR_NOTFOUND;
    }
    *ret = v;
    return TDM_OK;
}

static tdm_status_t wrong_type(const char *path, const char *key, const char *want, const json_t *v,
                               char *err, size_t err_len)
{
    char p[256];
    snprintf(err, err_len, "%s: expected %s, got %s", tdm_json_path(p, sizeof(p), path, key), want,
             type_name(v));
    return TDM_ERR_INVAL;
}

tdm_status_t tdm_json_get_object(const json_t *obj, const char *path, const char *key, json_t **ret,
                                 char *err, size_t err_len)
{
    json_t *v;
    TDM_TRY(member(obj, path, key, &v, err, err_len));
    if (!json_is_object(v))
        return wrong_type(path, key, "an object", v, err, err_len);
    *ret = v;
    return TDM_OK;
}

tdm_status_t tdm_json_get_array(const json_t *obj, const char *path, const char *key, json_t **ret,
                                char *err, size_t err_len)
{
    json_t *v;
    TDM_TRY(member(obj, path, key, &v, err, err_len));
    if (!json_is_array(v))
        return wrong_type(path, key, "an array", v, err, err_len);
    *ret = v;
    return TDM_OK;
}

static tdm_status_t check_string(const json_t *v, const char *path, const char *key, size_t max_len,
                                 const char **ret, char *err, size_t err_len)
{
    char p[256];
    if (!json_is_string(v))
        return wrong_type(path, key, "a string", v, err, err_len);
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n > max_len) {
        snprintf(err, err_len, "%s: string of %zu bytes, limit %zu",
                 tdm_json_path(p, sizeof(p), path, key), n, max_len);
        return TDM_ERR_RANGE;
    }
    if (strlen(s) != n) {
        snprintf(err, err_len, "%s: string contains a NUL byte",
                 tdm_json_path(p, sizeof(p), path, key));
        return TDM_ERR_INVAL;
    }
    *ret = s;
    return TDM_OK;
}

tdm_status_t tdm_json_get_string(const json_t *obj, const char *path, const char *key,
                                 size_t max_len, const char **ret, char *err, size_t err_len)
{
    json_t *v;
    TDM_TRY(member(obj, path, key, &v, err, err_len));
    return check_string(v, path, key, max_len, ret, err, err_len);
}

tdm_status_t tdm_json_get_string_opt(const json_t *obj, const char *path, const char *key,
                                     size_t max_len, const char **ret, char *err, size_t err_len)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (json_is_object(obj) && (!v || json_is_null(v))) {
        *ret = NULL;
        return TDM_OK;
    }
    TDM_TRY(member(obj, path, key, &v, err, err_len));
    return check_string(v, path, key, max_len, ret, err, err_len);
}

tdm_status_t tdm_json_get_int(const json_t *obj, const char *path, const char *key, int64_t min,
                              int64_t max, int64_t *ret, char *err, size_t err_len)
{
    json_t *v;
    char p[256];
    TDM_TRY(member(obj, path, key, &v, err, err_len));
    if (!json_is_integer(v))
        return wrong_type(path, key, "an integer", v, err, err_len);
    int64_t i = (int64_t)json_integer_value(v);
    if (i < min || i > max) {
        snprintf(err, err_len, "%s: %lld outside [%lld, %lld]",
                 tdm_json_path(p, sizeof(p), path, key), (long long)i, (long long)min,
                 (long long)max);
        return TDM_ERR_RANGE;
    }
    *ret = i;
    return TDM_OK;
}

tdm_status_t tdm_json_get_uint(const json_t *obj, const char *path, const char *key, uint64_t max,
                               uint64_t *ret, char *err, size_t err_len)
{
    int64_t i;
    TDM_TRY(tdm_json_get_int(obj, path, key, 0, max > INT64_MAX ? INT64_MAX : (int64_t)max, &i, err,
                             err_len));
    *ret = (uint64_t)i;
    return TDM_OK;
}

tdm_status_t tdm_json_get_number(const json_t *obj, const char *path, const char *key, double min,
                                 double max, double *ret, char *err, size_t err_len)
{
    json_t *v;
    char p[256];
    TDM_TRY(member(obj, path, key, &v, err, err_len));
    if (!json_is_number(v))
        return wrong_type(path, key, "a number", v, err, err_len);
    double d = json_number_value(v);
    if (!isfinite(d) || d < min || d > max) {
        snprintf(err, err_len, "%s: %g outside [%g, %g]", tdm_json_path(p, sizeof(p), path, key), d,
                 min, max);
        return TDM_ERR_RANGE;
    }
    *ret = d;
    return TDM_OK;
}

tdm_status_t tdm_json_get_bool(const json_t *obj, const char *path, const char *key, int *ret,
                               char *err, size_t err_len)
{
    json_t *v;
    TDM_TRY(member(obj, path, key, &v, err, err_len));
    if (!json_is_boolean(v))
        return wrong_type(path, key, "a boolean", v, err, err_len);
    *ret = json_is_true(v);
    return TDM_OK;
}

tdm_status_t tdm_json_get_hex64(const json_t *obj, const char *path, const char *key, uint64_t *ret,
                                char *err, size_t err_len)
{
    json_t *v;
    char p[256];
    uint64_t x;
    TDM_TRY(member(obj, path, key, &v, err, err_len));
    if (!json_is_string(v))
        return wrong_type(path, key, "a 16-digit hex string", v, err, err_len);
    if (json_string_length(v) != TDM_JSON_HEX64_LEN ||
        tdm_json_hex64_parse(json_string_value(v), &x) != TDM_OK) {
        snprintf(err, err_len, "%s: \"%.40s\" is not 16 lowercase hex digits",
                 tdm_json_path(p, sizeof(p), path, key), json_string_value(v));
        return TDM_ERR_INVAL;
    }
    *ret = x;
    return TDM_OK;
}

tdm_status_t tdm_json_get_ts_us(const json_t *obj, const char *path, const char *key, int64_t *ret,
                                char *err, size_t err_len)
{
    return tdm_json_get_int(obj, path, key, 0, INT64_C(1) << 62, ret, err, err_len);
}

tdm_status_t tdm_json_check_keys(const json_t *obj, const char *path, const char *const *allowed,
                                 char *err, size_t err_len)
{
    const char *key;
    json_t *v;
    char p[256];
    if (!json_is_object(obj)) {
        snprintf(err, err_len, "%s: expected an object, got %s", *path ? path : "(root)",
                 obj ? type_name(obj) : "nothing");
        return TDM_ERR_INVAL;
    }
    json_object_foreach((json_t *)obj, key, v)
    {
        int found = 0;
        for (const char *const *a = allowed; *a && !found; a++)
            found = !strcmp(*a, key);
        if (!found) {
            snprintf(err, err_len, "%.200s: unknown member",
                     tdm_json_path(p, sizeof(p), path, key));
            return TDM_ERR_INVAL;
        }
    }
    return TDM_OK;
}

tdm_status_t tdm_json_parse(const char *buf, size_t len, size_t max_bytes, json_t **ret, char *err,
                            size_t err_len)
{
    json_error_t jerr;
    if (len > max_bytes) {
        snprintf(err, err_len, "body of %zu bytes, limit %zu", len, max_bytes);
        return TDM_ERR_RANGE;
    }
    json_t *v = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v) {
        snprintf(err, err_len, "invalid JSON at line %d column %d: %s", jerr.line, jerr.column,
                 jerr.text);
        return TDM_ERR_FORMAT;
    }
    *ret = v;
    return TDM_OK;
}

char *tdm_json_dumps(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* A JSON string even from bytes that are not UTF-8 (messages may quote truncated user input):
 * non-ASCII bytes become '?' when the text does not validate. */
static json_t *safe_string(const char *s)
{
    json_t *j = json_string(s);
    if (!j) {
        size_t n = strlen(s);
        char *t = malloc(n + 1);
        if (!t)
            json_oom();
        for (size_t i = 0; i <= n; i++)
            t[i] = (unsigned char)s[i] >= 0x80 ? '?' : s[i];
        j = json_string(t);
        free(t);
    }
    if (!j)
        json_oom();
    return j;
}

json_t *tdm_json_error(const char *type, const char *code, const char *message)
{
    json_t *inner = json_object(), *e = json_object();
    if (!inner || !e)
        json_oom();
    json_object_set_new(inner, "code", safe_string(code ? code : ""));
    json_object_set_new(inner, "message", safe_string(message ? message : ""));
    json_object_set_new(inner, "type", safe_string(type ? type : "server_error"));
    json_object_set_new(e, "error", inner);
    return e;
}

json_t *tdm_json_error_status(tdm_status_t st, const char *message, int *ret_http_status)
{
    int http;
    const char *type, *code;
    switch (st) {
    case TDM_ERR_INVAL:
    case TDM_ERR_FORMAT:
    case TDM_ERR_RANGE:
    case TDM_ERR_OVERFLOW:
        http = 400, type = "invalid_request_error", code = "invalid_request";
        break;
    case TDM_ERR_NOTFOUND:
        http = 404, type = "not_found_error", code = "not_found";
        break;
    case TDM_ERR_PERM:
        http = 403, type = "permission_error", code = "permission_denied";
        break;
    case TDM_ERR_AGAIN:
        http = 429, type = "rate_limit_error", code = "queue_full";
        break;
    case TDM_ERR_BUSY:
    case TDM_ERR_STATE:
        http = 503, type = "unavailable_error", code = "unavailable";
        break;
    case TDM_ERR_TIMEOUT:
        http = 504, type = "timeout_error", code = "timeout";
        break;
    case TDM_ERR_UNSUPPORTED:
        http = 501, type = "unsupported_error", code = "unsupported";
        break;
    default:
        http = 500, type = "server_error", code = "internal_error";
        break;
    }
    if (ret_http_status)
        *ret_http_status = http;
    /* the code is public: clients see what happened, never our enum names */
    return tdm_json_error(type, code, message ? message : tdm_status_str(st));
}

const char *tdm_http_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Payload Too Large";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return status < 500 ? "Error" : "Internal Server Error";
    }
}

char *tdm_json_put_u64(char *o, uint64_t v)
{
    static const char two[] = "00010203040506070809101112131415161718192021222324252627282930313233"
                              "34353637383940414243444546474849505152535455565758596061626364656667"
                              "6869707172737475767778798081828384858687888990919293949596979899";
    char tmp[20], *t = tmp + sizeof(tmp);
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100u);
        v /= 100u;
        t -= 2;
        memcpy(t, two + 2 * r, 2);
    }
    if (v >= 10) {
        t -= 2;
        memcpy(t, two + 2 * v, 2);
    } else {
        *--t = (char)('0' + v);
    }
    size_t n = (size_t)(tmp + sizeof(tmp) - t);
    memcpy(o, t, n);
    return o + n;
}
