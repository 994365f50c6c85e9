/*
 * dsml.c — the DSML tool-call parser (contract in tdm/dsml.h).
 *
 * One byte-driven state machine serves both the streaming and the whole-text API, so the API's
 * SSE deltas and the non-streaming response (and the DSML-leak detector) can never disagree.
 * Input that is not yet decidable stays in `pend`: in content only a '<' followed by a prefix of
 * a DSML tag, in a value only a suffix that could begin "</parameter>", in names at most
 * TDM_DSML_MAX_NAME bytes — so memory per stream is bounded by the caps, not by the response.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/dsml.h>
#include <tdm/mem.h>

#include "toolcall_int.h"

typedef enum state {
    S_CONTENT,
    S_SKIP_TAG,   /* a stray tag: drop through its '>' */
    S_BLOCK_OPEN, /* after <tool_calls> */
    S_BLOCK_NEXT, /* after </invoke> */
    S_INV_NAME,
    S_INV_BODY,
    S_PARAM_NAME,
    S_PARAM_VALUE,
    S_SKIP_BLOCK, /* a broken block: drop through </tool_calls> */
} state_t;

struct tdm_dsml_stream {
    const json_t *tools;
    tdm_dsml_cb_t cb;
    void *ud;
    state_t st;
    int finished;
    tdm_sbuf_t pend; /* undecided input */
    size_t skipped;  /* bytes dropped in S_SKIP_TAG */
    tdm_sbuf_t name; /* NAME being read */
    uint32_t n_calls, n_malformed;

    /* the open call (index ≥ 0) */
    int32_t index;
    const json_t *props, *required;
    int offered, schema_ok;
    char detail[192];
    json_t *seen; /* parameter names so far */
    tdm_sbuf_t args;
    uint32_t n_params;

    /* the open parameter */
    const json_t *ptype; /* NULL: stream as a string */
    tdm_sbuf_t pval;     /* typed value, buffered */
    size_t vlen;
};

static const char OPEN_BLOCK[] = "<tool_calls>";
static const char CLOSE_BLOCK[] = "</tool_calls>";
static const char OPEN_INVOKE[] = "<invoke name=\"";
static const char CLOSE_INVOKE[] = "</invoke>";
static const char OPEN_PARAM[] = "<parameter name=\"";
static const char CLOSE_PARAM[] = "</parameter>";
static const char *const TAGS[] = {"<tool_calls", "</tool_calls", "<invoke",
                                   "</invoke",    "<parameter",   "</parameter"};
#define SKIP_TAG_MAX 256

static const char *const event_names[] = {"content", "call_start", "call_args", "call_end",
                                          "malformed"};
_Static_assert(sizeof(event_names) / sizeof(event_names[0]) == TDM_DSML_EVENT_MAX, "names");
static const char *const class_names[] = {"text", "call", "leak"};
_Static_assert(sizeof(class_names) / sizeof(class_names[0]) == TDM_DSML_CLASS_MAX, "names");

const char *tdm_dsml_event_name(tdm_dsml_event_kind_t k)
{
    return (unsigned)k < TDM_DSML_EVENT_MAX ? event_names[k] : "?";
}

const char *tdm_dsml_class_name(tdm_dsml_class_t c)
{
    return (unsigned)c < TDM_DSML_CLASS_MAX ? class_names[c] : "?";
}

/* ---- events --------------------------------------------------------------------------------- */

static void emit(tdm_dsml_stream_t *s, tdm_dsml_event_kind_t kind, const char *text, size_t len)
{
    tdm_dsml_event_t ev = {.kind = kind,
                           .index = kind == TDM_DSML_CONTENT ? -1 : s->index,
                           .text = text ? text : "",
                           .len = len,
                           .detail = ""};
    if (kind == TDM_DSML_CALL_END) {
        ev.offered = s->offered;
        ev.schema_ok = s->schema_ok;
        ev.detail = s->detail;
    }
    if (len || kind != TDM_DSML_CONTENT)
        s->cb(s->ud, &ev);
}

/* Arguments text is appended and emitted as one delta. */
static void args_emit(tdm_dsml_stream_t *s, const char *text, size_t len)
{
    /* Bounded by TDM_DSML_MAX_VALUE per value and the name caps; cannot overflow. */
    (void)tdm_sbuf_add(&s->args, text, len);
    emit(s, TDM_DSML_CALL_ARGS, text, len);
}

static void close_call(tdm_dsml_stream_t *s)
{
    s->index = -1;
    json_decref(s->seen);
    s->seen = NULL;
    s->args.len = 0;
}

static void malformed(tdm_dsml_stream_t *s, const char *reason, state_t next)
{
    s->n_malformed++;
    emit(s, TDM_DSML_MALFORMED, reason, strlen(reason));
    close_call(s);
    s->st = next;
}

__attribute__((format(printf, 2, 3))) static void schema_fail(tdm_dsml_stream_t *s, const char *fmt,
                                                              ...)
{
    va_list ap;
    if (s->schema_ok) {
        va_start(ap, fmt);
        vsnprintf(s->detail, sizeof(s->detail), fmt, ap);
        va_end(ap);
    }
    s->schema_ok = 0;
}

/* ---- schema --------------------------------------------------------------------------------- */

static const json_t *tool_fn(const json_t *tool)
{
    const json_t *fn = json_object_get(tool, "function");
    return json_is_object(fn) ? fn : tool;
}

static void call_begin(tdm_dsml_stream_t *s, const char *name)
{
    const json_t *tool;
    size_t i;

    s->index = (int32_t)s->n_calls++;
    s->offered = 0;
    s->schema_ok = 1;
    s->detail[0] = '\0';
    s->props = s->required = NULL;
    s->n_params = 0;
    s->args.len = 0;
    s->seen = json_object();
    json_array_foreach(s->tools, i, tool)
    {
        const json_t *fn = tool_fn(tool);
        if (strcmp(json_string_value(json_object_get(fn, "name")), name) != 0)
            continue;
        const json_t *params = json_object_get(fn, "parameters");
        s->offered = 1;
        s->props = json_object_get(params, "properties");
        s->required = json_object_get(params, "required");
        if (!json_is_object(s->props))
            s->props = NULL;
        if (!json_is_array(s->required))
            s->required = NULL;
        break;
    }
    if (!s->offered)
        schema_fail(s, "tool \"%s\" was not offered", name);
    emit(s, TDM_DSML_CALL_START, name, strlen(name));
    args_emit(s, "{", 1);
}

static void call_end(tdm_dsml_stream_t *s)
{
    const json_t *r;
    size_t i;
    json_array_foreach(s->required, i, r)
    {
        if (json_is_string(r) && !json_object_get(s->seen, json_string_value(r)))
            schema_fail(s, "required parameter \"%s\" missing", json_string_value(r));
    }
    args_emit(s, "}", 1);
    emit(s, TDM_DSML_CALL_END, s->args.p, s->args.len);
    close_call(s);
}

static int type_is(const json_t *t, const char *name)
{
    return json_is_string(t) && strcmp(json_string_value(t), name) == 0;
}

static void param_begin(tdm_dsml_stream_t *s, const char *key)
{
    const json_t *prop = s->props ? json_object_get(s->props, key) : NULL;
    tdm_sbuf_t hdr = {0};

    if (json_object_get(s->seen, key))
        schema_fail(s, "parameter \"%s\" repeated", key);
    else if (s->offered && !prop)
        schema_fail(s, "parameter \"%s\" not in the tool's schema", key);
    json_object_set_new(s->seen, key, json_true());
    s->ptype = json_object_get(prop, "type");
    if (!s->ptype || type_is(s->ptype, "string") ||
        !(json_is_string(s->ptype) || json_is_array(s->ptype)))
        s->ptype = NULL;
    s->pval.len = 0;
    s->vlen = 0;
    (void)tdm_sbuf_puts(&hdr, s->n_params++ ? ", \"" : "\"");
    (void)tdm_py_json_escape(&hdr, key, strlen(key));
    (void)tdm_sbuf_puts(&hdr, s->ptype ? "\": " : "\": \"");
    args_emit(s, hdr.p, hdr.len);
    tdm_sbuf_free(&hdr);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* One JSON-schema type name applied to the raw value text; 1 and JSON in `out` if it fits. */
static int coerce_one(const char *ty, const char *v, size_t n, tdm_sbuf_t *out)
{
    char num[32], *end;
    while (n && is_space(*v))
        v++, n--;
    while (n && is_space(v[n - 1]))
        n--;
    char *t = tdm_strndup(v, n);
    int fit = 0;
    n = strlen(t); /* a NUL inside the value ends the copy: never read past it */

    if (strcmp(ty, "integer") == 0 || strcmp(ty, "number") == 0) {
        int is_int = strcmp(ty, "integer") == 0;
        size_t k = (n && (t[0] == '+' || t[0] == '-')) ? 1 : 0;
        int plain = n > k;
        for (size_t i = k; i < n; i++)
            plain &= (t[i] >= '0' && t[i] <= '9') || t[i] == '.' || t[i] == 'e' || t[i] == 'E' ||
                     ((t[i] == '+' || t[i] == '-') && (t[i - 1] == 'e' || t[i - 1] == 'E'));
        errno = 0;
        long long ll = plain ? strtoll(t, &end, 10) : 0;
        if (plain && errno == 0 && *end == '\0') {
            snprintf(num, sizeof(num), "%lld", ll);
            fit = 1;
        } else if (plain) {
            errno = 0;
            double d = strtod(t, &end);
            if (errno == 0 && *end == '\0' && isfinite(d)) {
                if (is_int && d == floor(d) && fabs(d) < 9.007199254740992e15) {
                    snprintf(num, sizeof(num), "%lld", (long long)d);
                    fit = 1;
                } else if (!is_int) {
                    tdm_py_float_repr(d, num);
                    fit = 1;
                }
            }
        }
        if (fit)
            (void)tdm_sbuf_puts(out, num);
    } else if (strcmp(ty, "boolean") == 0) {
        int tr = strcmp(t, "true") == 0 || strcmp(t, "True") == 0;
        fit = tr || strcmp(t, "false") == 0 || strcmp(t, "False") == 0;
        if (fit)
            (void)tdm_sbuf_puts(out, tr ? "true" : "false");
    } else if (strcmp(ty, "null") == 0) {
        fit = strcmp(t, "null") == 0 || strcmp(t, "None") == 0;
        if (fit)
            (void)tdm_sbuf_puts(out, "null");
    } else if (strcmp(ty, "object") == 0 || strcmp(ty, "array") == 0) {
        json_t *j = json_loadb(t, n, JSON_DECODE_ANY, NULL);
        fit = strcmp(ty, "object") == 0 ? json_is_object(j) : json_is_array(j);
        if (fit)
            (void)tdm_py_json_dumps(out, j);
        json_decref(j);
    }
    tdm_free(t);
    return fit;
}

static void param_end(tdm_dsml_stream_t *s, const char *key)
{
    tdm_sbuf_t out = {0};
    const json_t *t;
    size_t i;
    int fit = 0;

    if (!s->ptype) {
        args_emit(s, "\"", 1);
        return;
    }
    if (json_is_string(s->ptype)) {
        fit =
            coerce_one(json_string_value(s->ptype), s->pval.p ? s->pval.p : "", s->pval.len, &out);
    } else {
        json_array_foreach(s->ptype, i, t)
        {
            if (json_is_string(t) && !fit) {
                out.len = 0;
                fit = type_is(t, "string")
                          ? -1
                          : coerce_one(json_string_value(t), s->pval.p ? s->pval.p : "",
                                       s->pval.len, &out);
            }
        }
    }
    if (fit != 1) {
        if (fit == 0)
            schema_fail(s, "parameter \"%s\" does not fit its schema type", key);
        out.len = 0;
        (void)tdm_sbuf_puts(&out, "\"");
        (void)tdm_py_json_escape(&out, s->pval.p ? s->pval.p : "", s->pval.len);
        (void)tdm_sbuf_puts(&out, "\"");
    }
    args_emit(s, out.p, out.len);
    tdm_sbuf_free(&out);
}

/* ---- the machine ---------------------------------------------------------------------------- */

enum { LIT_NO, LIT_PARTIAL, LIT_FULL };

static int lit(const char *b, size_t n, const char *l, size_t ll)
{
    size_t m = n < ll ? n : ll;
    if (memcmp(b, l, m) != 0)
        return LIT_NO;
    return n >= ll ? LIT_FULL : LIT_PARTIAL;
}
#define LIT(b, n, l) lit((b), (n), (l), sizeof(l) - 1)

static int is_word(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c >= 0x80;
}

/* Longest suffix of b that is a proper prefix of l. */
static size_t held_suffix(const char *b, size_t n, const char *l, size_t ll)
{
    size_t k = n < ll - 1 ? n : ll - 1;
    for (; k > 0; k--)
        if (memcmp(b + n - k, l, k) == 0)
            return k;
    return 0;
}

/* Content at a '<': 0 = not markup (emit it), 1 = wait for more, 2 = handled. */
static int content_tag(tdm_dsml_stream_t *s, const char *b, size_t n, int at_end, size_t *used)
{
    int r = LIT(b, n, OPEN_BLOCK);
    if (r == LIT_FULL) {
        *used = sizeof(OPEN_BLOCK) - 1;
        s->st = S_BLOCK_OPEN;
        return 2;
    }
    int wait = r == LIT_PARTIAL && !at_end;
    for (size_t i = 0; i < sizeof(TAGS) / sizeof(TAGS[0]); i++) {
        size_t tl = strlen(TAGS[i]);
        r = lit(b, n, TAGS[i], tl);
        if (r == LIT_PARTIAL) {
            wait |= !at_end;
        } else if (r == LIT_FULL) {
            if (n == tl && !at_end) {
                wait = 1;
            } else if (n == tl || !is_word((unsigned char)b[tl])) {
                char reason[64];
                snprintf(reason, sizeof(reason), "stray %s> outside a <tool_calls> block", TAGS[i]);
                *used = tl;
                s->skipped = 0;
                malformed(s, reason, S_SKIP_TAG);
                return 2;
            }
        }
    }
    return wait ? 1 : 0;
}

/* Read a NAME up to '"' then expect '>'. 1 = complete (in s->name), 0 = need more, -1 = bad. */
static int read_name(tdm_dsml_stream_t *s, const char *b, size_t n, size_t *used)
{
    size_t i = 0;
    while (i < n && b[i] != '"') {
        if (b[i] == '<' || b[i] == '>' || s->name.len + i >= TDM_DSML_MAX_NAME)
            return -1;
        i++;
    }
    if (i + 1 >= n) { /* keep the '"' (if any) until its '>' is here */
        (void)tdm_sbuf_add(&s->name, b, i);
        *used = i;
        return 0;
    }
    (void)tdm_sbuf_add(&s->name, b, i);
    if (b[i + 1] != '>' || s->name.len == 0)
        return -1;
    *used = i + 2;
    return 1;
}

/* One step on pend[0..n): consumes *used bytes and/or changes state. Returns 0 when it needs
 * more input to go on. */
static int step(tdm_dsml_stream_t *s, const char *b, size_t n, int at_end, size_t *used)
{
    const char *p;
    size_t i;
    int r;

    *used = 0;
    if (n == 0)
        return 0;
    switch (s->st) {
    case S_CONTENT:
        p = memchr(b, '<', n);
        if (p != b) {
            *used = p ? (size_t)(p - b) : n;
            emit(s, TDM_DSML_CONTENT, b, *used);
            return 1;
        }
        r = content_tag(s, b, n, at_end, used);
        if (r == 1)
            return 0;
        if (r == 0) {
            *used = 1;
            emit(s, TDM_DSML_CONTENT, b, 1);
        }
        return 1;
    case S_SKIP_TAG:
        p = memchr(b, '>', n);
        if (p) {
            *used = (size_t)(p - b) + 1;
            s->st = S_CONTENT;
            return 1;
        }
        *used = n < SKIP_TAG_MAX - s->skipped ? n : SKIP_TAG_MAX - s->skipped;
        s->skipped += *used;
        if (s->skipped >= SKIP_TAG_MAX)
            s->st = S_CONTENT;
        return 1;
    case S_BLOCK_OPEN:
    case S_BLOCK_NEXT:
    case S_INV_BODY:
        for (i = 0; i < n && is_space(b[i]); i++)
            ;
        if (i) {
            *used = i;
            return 1;
        }
        if (s->st == S_INV_BODY) {
            if ((r = LIT(b, n, OPEN_PARAM)) == LIT_FULL) {
                *used = sizeof(OPEN_PARAM) - 1;
                s->name.len = 0;
                s->st = S_PARAM_NAME;
                return 1;
            }
            int r2 = LIT(b, n, CLOSE_INVOKE);
            if (r2 == LIT_FULL) {
                *used = sizeof(CLOSE_INVOKE) - 1;
                call_end(s);
                s->st = S_BLOCK_NEXT;
                return 1;
            }
            if (r == LIT_PARTIAL || r2 == LIT_PARTIAL)
                return 0;
            malformed(s, "expected <parameter name=\"...\"> or </invoke>", S_SKIP_BLOCK);
            return 1;
        }
        if ((r = LIT(b, n, OPEN_INVOKE)) == LIT_FULL) {
            *used = sizeof(OPEN_INVOKE) - 1;
            s->name.len = 0;
            s->st = S_INV_NAME;
            return 1;
        }
        if (s->st == S_BLOCK_NEXT) {
            int r2 = LIT(b, n, CLOSE_BLOCK);
            if (r2 == LIT_FULL) {
                *used = sizeof(CLOSE_BLOCK) - 1;
                s->st = S_CONTENT;
                return 1;
            }
            r = r == LIT_PARTIAL ? r : r2;
        }
        if (r == LIT_PARTIAL)
            return 0;
        malformed(s,
                  s->st == S_BLOCK_OPEN ? "expected <invoke name=\"...\"> after <tool_calls>"
                                        : "expected <invoke name=\"...\"> or </tool_calls>",
                  S_SKIP_BLOCK);
        return 1;
    case S_INV_NAME:
    case S_PARAM_NAME:
        r = read_name(s, b, n, used);
        if (r == 0)
            return *used > 0;
        if (r < 0) {
            malformed(s, s->st == S_INV_NAME ? "bad <invoke> name" : "bad <parameter> name",
                      S_SKIP_BLOCK);
            *used = 0;
            return 1;
        }
        if (s->st == S_INV_NAME) {
            if (s->n_calls >= TDM_DSML_MAX_CALLS) {
                malformed(s, "too many tool calls", S_SKIP_BLOCK);
                return 1;
            }
            call_begin(s, s->name.p);
            s->st = S_INV_BODY;
        } else {
            param_begin(s, s->name.p);
            s->st = S_PARAM_VALUE;
        }
        return 1;
    case S_PARAM_VALUE: {
        p = memmem(b, n, CLOSE_PARAM, sizeof(CLOSE_PARAM) - 1);
        size_t take =
            p ? (size_t)(p - b) : n - held_suffix(b, n, CLOSE_PARAM, sizeof(CLOSE_PARAM) - 1);
        if (s->vlen + take > TDM_DSML_MAX_VALUE) {
            malformed(s, "parameter value too long", S_SKIP_BLOCK);
            return 1;
        }
        s->vlen += take;
        if (take && s->ptype) {
            (void)tdm_sbuf_add(&s->pval, b, take);
        } else if (take) {
            tdm_sbuf_t esc = {0};
            (void)tdm_py_json_escape(&esc, b, take);
            args_emit(s, esc.p, esc.len);
            tdm_sbuf_free(&esc);
        }
        *used = take;
        if (p) {
            *used += sizeof(CLOSE_PARAM) - 1;
            param_end(s, s->name.p);
            s->st = S_INV_BODY;
        }
        return *used > 0 || p;
    }
    case S_SKIP_BLOCK:
        p = memmem(b, n, CLOSE_BLOCK, sizeof(CLOSE_BLOCK) - 1);
        if (p) {
            *used = (size_t)(p - b) + sizeof(CLOSE_BLOCK) - 1;
            s->st = S_CONTENT;
            return 1;
        }
        *used = n - held_suffix(b, n, CLOSE_BLOCK, sizeof(CLOSE_BLOCK) - 1);
        return *used > 0;
    }
    return 0;
}

static void run(tdm_dsml_stream_t *s, int at_end)
{
    size_t off = 0, used;
    while (step(s, s->pend.p + off, s->pend.len - off, at_end, &used))
        off += used;
    off += used;
    memmove(s->pend.p, s->pend.p + off, s->pend.len - off);
    s->pend.len -= off;
}

/* ---- API ------------------------------------------------------------------------------------ */

tdm_status_t tdm_dsml_stream_init(const json_t *tools, tdm_dsml_cb_t cb, void *ud,
                                  tdm_dsml_stream_t **ret)
{
    const json_t *tool;
    size_t i;

    if (!cb || !ret)
        return TDM_ERR_INVAL;
    if (tools && json_is_null(tools))
        tools = NULL;
    if (tools && !json_is_array(tools))
        return TDM_ERR_INVAL;
    json_array_foreach(tools, i, tool)
    {
        if (!json_is_object(tool) || !json_is_string(json_object_get(tool_fn(tool), "name")))
            return TDM_ERR_INVAL;
    }
    tdm_dsml_stream_t *s = tdm_calloc(1, sizeof(*s));
    s->tools = tools;
    s->cb = cb;
    s->ud = ud;
    s->index = -1;
    s->st = S_CONTENT;
    *ret = s;
    return TDM_OK;
}

tdm_status_t tdm_dsml_stream_feed(tdm_dsml_stream_t *s, const char *text, size_t len)
{
    if (!s || (!text && len))
        return TDM_ERR_INVAL;
    if (s->finished)
        return TDM_ERR_STATE;
    /* Feed in slices so `pend` stays small whatever the delta size. */
    while (len) {
        size_t k = len < 4096 ? len : 4096;
        TDM_TRY(tdm_sbuf_add(&s->pend, text, k));
        run(s, 0);
        text += k;
        len -= k;
    }
    return TDM_OK;
}

tdm_status_t tdm_dsml_stream_finish(tdm_dsml_stream_t *s)
{
    if (!s)
        return TDM_ERR_INVAL;
    if (s->finished)
        return TDM_ERR_STATE;
    s->finished = 1;
    if (s->pend.len)
        run(s, 1);
    switch (s->st) {
    case S_CONTENT:
    case S_SKIP_TAG:
    case S_SKIP_BLOCK:
        break;
    default:
        malformed(s, "unterminated <tool_calls> block", S_CONTENT);
    }
    s->pend.len = 0;
    return TDM_OK;
}

uint32_t tdm_dsml_stream_calls(const tdm_dsml_stream_t *s)
{
    return s->n_calls;
}

uint32_t tdm_dsml_stream_malformed(const tdm_dsml_stream_t *s)
{
    return s->n_malformed;
}

void tdm_dsml_stream_free(tdm_dsml_stream_t *s)
{
    if (!s)
        return;
    json_decref(s->seen);
    tdm_sbuf_free(&s->pend);
    tdm_sbuf_free(&s->name);
    tdm_sbuf_free(&s->args);
    tdm_sbuf_free(&s->pval);
    tdm_free(s);
}

void tdm_tc_collect_cb(void *ud, const tdm_dsml_event_t *ev)
{
    tdm_tc_collect_t *c = ud;
    tdm_dsml_result_t *r = &c->r;
    switch (ev->kind) {
    case TDM_DSML_CONTENT:
        (void)tdm_sbuf_add(&c->content, ev->text, ev->len);
        break;
    case TDM_DSML_CALL_START:
        tdm_free(c->name);
        c->name = tdm_strndup(ev->text, ev->len);
        break;
    case TDM_DSML_CALL_END:
        if (r->n_calls == c->cap) {
            c->cap = c->cap ? c->cap * 2 : 4;
            r->calls = tdm_realloc(r->calls, c->cap * sizeof(*r->calls));
        }
        r->calls[r->n_calls++] = (tdm_dsml_call_t){.name = c->name,
                                                   .arguments = tdm_strndup(ev->text, ev->len),
                                                   .offered = ev->offered,
                                                   .schema_ok = ev->schema_ok,
                                                   .detail = tdm_strdup(ev->detail)};
        c->name = NULL;
        break;
    case TDM_DSML_MALFORMED:
        if (!r->first_malformed)
            r->first_malformed = tdm_strndup(ev->text, ev->len);
        r->n_malformed++;
        break;
    default:
        break;
    }
}

tdm_status_t tdm_tc_collect_end(tdm_tc_collect_t *c, tdm_status_t st, tdm_dsml_result_t *ret)
{
    tdm_free(c->name);
    c->name = NULL;
    if (st != TDM_OK) {
        tdm_sbuf_free(&c->content);
        tdm_dsml_result_free(&c->r);
        return st;
    }
    c->r.content = c->content.p ? c->content.p : tdm_strdup("");
    c->r.content_len = c->content.len;
    c->r.cls = c->r.n_malformed ? TDM_DSML_CLASS_LEAK
               : c->r.n_calls   ? TDM_DSML_CLASS_CALL
                                : TDM_DSML_CLASS_TEXT;
    *ret = c->r;
    return TDM_OK;
}

tdm_status_t tdm_dsml_parse(const json_t *tools, const char *text, size_t len,
                            tdm_dsml_result_t *ret)
{
    tdm_tc_collect_t c = {0};
    tdm_dsml_stream_t *s = NULL;
    tdm_status_t st;

    if (!ret || (!text && len))
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_dsml_stream_init(tools, tdm_tc_collect_cb, &c, &s));
    st = tdm_dsml_stream_feed(s, text, len);
    if (st == TDM_OK)
        st = tdm_dsml_stream_finish(s);
    tdm_dsml_stream_free(s);
    return tdm_tc_collect_end(&c, st, ret);
}

void tdm_dsml_result_free(tdm_dsml_result_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_calls; i++) {
        tdm_free(r->calls[i].name);
        tdm_free(r->calls[i].arguments);
        tdm_free(r->calls[i].detail);
    }
    tdm_free(r->calls);
    tdm_free(r->content);
    tdm_free(r->first_malformed);
    memset(r, 0, sizeof(*r));
}
