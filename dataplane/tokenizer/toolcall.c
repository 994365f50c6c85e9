/*
 * toolcall.c — the hermes, llama3, mistral and deepseekv3 tool-call parsers (contract in
 * tdm/toolcall.h); dsml delegates to dsml.c.
 *
 * One byte-level state machine per stream. Outside a block, text is content except where a
 * marker of the active format may begin: a complete marker switches state, a prefix of one at
 * the end of the input is held back until more text (or the end) decides. Inside a block, the
 * JSON formats run each call object through an incremental scanner (jcall) that finds the
 * top-level "name" and "arguments"/"parameters" members as their bytes arrive, so the name is
 * announced as soon as it is complete and an object-valued arguments member streams byte by
 * byte. Every decision depends only on the bytes, never on where the input was split. Anything
 * that breaks the format returns the block's text as content with a MALFORMED event.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/toolcall.h>

#include "toolcall_int.h"

#define H_START "<tool_call>"
#define H_END "</tool_call>"
#define M_START "[TOOL_CALLS]"
#define L_TAG "<|python_tag|>"
#define D_CALLS_BEGIN                                                                              \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "begin\xef\xbd\x9c>"
#define D_CALLS_END                                                                                \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "end\xef\xbd\x9c>"
#define D_CALL_BEGIN                                                                               \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "begin\xef\xbd\x9c>"
#define D_CALL_END                                                                                 \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "end\xef\xbd\x9c>"
#define D_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

static const char *const fmt_names[] = {"none",   "dsml",    "hermes",
                                        "llama3", "mistral", "deepseekv3"};
_Static_assert(sizeof(fmt_names) / sizeof(fmt_names[0]) == TDM_TC_FORMAT_MAX, "format names");

const char *tdm_tc_format_name(tdm_tc_format_t f)
{
    return (unsigned)f < TDM_TC_FORMAT_MAX ? fmt_names[f] : "?";
}

tdm_status_t tdm_tc_format_parse(const char *name, tdm_tc_format_t *ret)
{
    for (int f = 0; f < TDM_TC_FORMAT_MAX; f++)
        if (name && !strcmp(name, fmt_names[f])) {
            *ret = (tdm_tc_format_t)f;
            return TDM_OK;
        }
    return TDM_ERR_INVAL;
}

tdm_tc_format_t tdm_tc_format_detect(const char *t)
{
    if (!t)
        return TDM_TC_NONE;
    if (strstr(t, "<tool_calls>") && strstr(t, "<invoke name="))
        return TDM_TC_DSML;
    if (strstr(t, D_CALLS_BEGIN))
        return TDM_TC_DEEPSEEKV3;
    if (strstr(t, M_START))
        return TDM_TC_MISTRAL;
    if (strstr(t, H_START))
        return TDM_TC_HERMES;
    if (strstr(t, L_TAG) || (strstr(t, "<|start_header_id|>") && strstr(t, "tools")))
        return TDM_TC_LLAMA3;
    return TDM_TC_NONE;
}

char *tdm_tc_forced_prefix(tdm_tc_format_t f, const char *name)
{
    tdm_sbuf_t b = {0};
    switch (f) {
    case TDM_TC_DSML:
        (void)tdm_sbuf_puts(&b, "<tool_calls>");
        if (name) {
            (void)tdm_sbuf_puts(&b, "<invoke name=\"");
            (void)tdm_sbuf_puts(&b, name);
            (void)tdm_sbuf_puts(&b, "\">");
        }
        break;
    case TDM_TC_HERMES:
        (void)tdm_sbuf_puts(&b, H_START "\n");
        break;
    case TDM_TC_MISTRAL:
        (void)tdm_sbuf_puts(&b, M_START " [");
        break;
    case TDM_TC_LLAMA3:
        break;
    case TDM_TC_DEEPSEEKV3:
        (void)tdm_sbuf_puts(&b, D_CALLS_BEGIN D_CALL_BEGIN "function" D_SEP);
        if (name) {
            (void)tdm_sbuf_puts(&b, name);
            (void)tdm_sbuf_puts(&b, "\n```json\n");
        }
        return b.p;
    default:
        return NULL;
    }
    if (name && f != TDM_TC_DSML) { /* the JSON formats: the call object up to its arguments */
        (void)tdm_sbuf_puts(&b, "{\"name\": \"");
        (void)tdm_py_json_escape(&b, name, strlen(name));
        (void)tdm_sbuf_puts(&b,
                            f == TDM_TC_LLAMA3 ? "\", \"parameters\": " : "\", \"arguments\": ");
    }
    if (!b.p)
        b.p = tdm_strdup("");
    return b.p;
}

/* ---- streams ----------------------------------------------------------------------------------
 */

enum {
    S_OUT = 0,
    S_H_BODY,  /* hermes: the call object */
    S_H_END,   /* hermes: whitespace, then </tool_call> */
    S_M_OPEN,  /* mistral: whitespace, then '[' */
    S_M_ITEM,  /* mistral: a call object */
    S_M_SEP,   /* mistral: ',' or ']' */
    S_L_ITEM,  /* llama3: a call object */
    S_L_SEP,   /* llama3: ';' or the end */
    S_D_CALLS, /* deepseek: call begin or calls end */
    S_D_CALL,  /* deepseek: one call's text up to call end */
    S_H_TAIL,  /* hermes, after a broken call: whitespace and </tool_call> pass as content */
};

struct tdm_tc_stream {
    tdm_tc_format_t f;
    tdm_dsml_stream_t *dsml;
    const json_t *tools;
    tdm_dsml_cb_t cb;
    void *ud;
    tdm_sbuf_t pend; /* input not consumed yet, from pos */
    size_t pos;
    int state, finishing, finished, text_seen;
    tdm_sbuf_t raw;  /* the current block's text: returned as content if it breaks */
    tdm_sbuf_t hold; /* llama3: leading whitespace before the first decision */
    jcall_t jc;
    int32_t index, cur; /* next call index; the started call or -1 */
    uint32_t malformed;
};

static void emit(tdm_tc_stream_t *s, tdm_dsml_event_kind_t k, int32_t index, const char *text,
                 size_t len)
{
    tdm_dsml_event_t ev = {.kind = k, .index = index, .text = text, .len = len, .detail = ""};
    if (k == TDM_DSML_CONTENT && len == 0)
        return;
    if (k == TDM_DSML_CONTENT && !s->text_seen)
        for (size_t i = 0; i < len && !s->text_seen; i++)
            s->text_seen = !tdm_tc_is_ws(text[i]);
    s->cb(s->ud, &ev);
}

static void content(tdm_tc_stream_t *s, const char *text, size_t len)
{
    if (s->hold.len) {
        tdm_sbuf_t h = s->hold;
        s->hold = (tdm_sbuf_t){0};
        emit(s, TDM_DSML_CONTENT, -1, h.p, h.len);
        tdm_sbuf_free(&h);
    }
    emit(s, TDM_DSML_CONTENT, -1, text, len);
}

/* The block broke: MALFORMED, then its text as content; continue in `next` (outside, or where
 * the rest of the block's own markup is passed through as content without a second count). */
static void bail_to(tdm_tc_stream_t *s, const char *reason, int next)
{
    tdm_dsml_event_t ev = {.kind = TDM_DSML_MALFORMED,
                           .index = s->cur,
                           .text = reason,
                           .len = strlen(reason),
                           .detail = ""};
    s->malformed++;
    s->cb(s->ud, &ev);
    content(s, s->raw.p ? s->raw.p : "", s->raw.len);
    s->raw.len = 0;
    s->cur = -1;
    s->state = next;
    tdm_tc_jcall_reset(&s->jc);
}

static void bail(tdm_tc_stream_t *s, const char *reason)
{
    bail_to(s, reason, S_OUT);
}

/* After each byte of a call object: announce the name, stream the arguments object. */
static void call_progress(tdm_tc_stream_t *s)
{
    jcall_t *j = &s->jc;
    if (j->have_name && !j->announced) {
        json_t *n = json_loadb(j->text.p + j->name_a, j->name_b - j->name_a, JSON_DECODE_ANY, NULL);
        if (!json_is_string(n) || json_string_length(n) == 0 ||
            json_string_length(n) > TDM_DSML_MAX_NAME) {
            json_decref(n);
            return; /* refused when the object closes */
        }
        j->announced = 1;
        s->cur = s->index++;
        emit(s, TDM_DSML_CALL_START, s->cur, json_string_value(n), json_string_length(n));
        json_decref(n);
    }
    if (j->announced && j->args_obj && (j->args_open || j->have_args)) {
        size_t end = j->have_args ? j->args_b : j->text.len;
        if (end > j->args_a + j->args_sent) {
            emit(s, TDM_DSML_CALL_ARGS, s->cur, j->text.p + j->args_a + j->args_sent,
                 end - j->args_a - j->args_sent);
            j->args_sent = end - j->args_a;
        }
    }
}

/* The call object closed: check it, finish the events. 0 ok, -1 bailed (to `fail_state`). */
static int call_close(tdm_tc_stream_t *s, int fail_state)
{
    jcall_t *j = &s->jc;
    json_t *args = NULL;
    const char *atext = "{}";
    size_t alen = 2;
    char detail[160];
    call_progress(s);
    if (!j->announced) {
        bail_to(s,
                j->have_name ? "tool call: the name is not a non-empty string"
                             : "tool call: no \"name\"",
                fail_state);
        return -1;
    }
    if (j->have_args) {
        atext = j->text.p + j->args_a;
        alen = j->args_b - j->args_a;
        if (j->args_str) { /* arguments sent as a JSON string holding the object */
            json_t *str = json_loadb(atext, alen, JSON_DECODE_ANY, NULL);
            if (json_is_string(str))
                args = json_loadb(json_string_value(str), json_string_length(str), 0, NULL);
            json_decref(str);
        } else {
            args = json_loadb(atext, alen, 0, NULL);
        }
        if (!json_is_object(args)) {
            json_decref(args);
            bail_to(s, "tool call: arguments are not a JSON object", fail_state);
            return -1;
        }
    } else {
        args = json_object();
    }
    char *compact = NULL;
    if (!j->args_obj || !j->have_args) { /* not streamed: send the whole object now */
        compact = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
        atext = compact;
        alen = strlen(compact);
        emit(s, TDM_DSML_CALL_ARGS, s->cur, atext, alen);
    }
    json_t *n = json_loadb(j->text.p + j->name_a, j->name_b - j->name_a, JSON_DECODE_ANY, NULL);
    tdm_dsml_event_t ev = {
        .kind = TDM_DSML_CALL_END, .index = s->cur, .text = atext, .len = alen, .detail = detail};
    tdm_tc_check_schema(s->tools, json_is_string(n) ? json_string_value(n) : "", args, &ev.offered,
                        &ev.schema_ok, detail, sizeof(detail));
    s->cb(s->ud, &ev);
    free(compact);
    json_decref(n);
    json_decref(args);
    s->cur = -1;
    s->raw.len = 0;
    tdm_tc_jcall_reset(j);
    return 0;
}

/* Does text[0..n) start with m: 1 yes, 0 no, -1 only a prefix so far. */
static int starts(const char *text, size_t n, const char *m)
{
    size_t ml = strlen(m);
    if (n >= ml)
        return memcmp(text, m, ml) == 0;
    return memcmp(text, m, n) == 0 ? -1 : 0;
}

static const char *const stray[TDM_TC_FORMAT_MAX][4] = {
    [TDM_TC_HERMES] = {H_END},
    [TDM_TC_DEEPSEEKV3] = {D_CALLS_END, D_CALL_BEGIN, D_CALL_END, D_SEP},
};

/* Consume what can be decided of pend[pos..]; returns when more input is needed. */
static void run(tdm_tc_stream_t *s)
{
    while (s->pos < s->pend.len) {
        const char *t = s->pend.p + s->pos;
        size_t n = s->pend.len - s->pos;
        int m;
        if (s->state == S_OUT) {
            if (s->f == TDM_TC_LLAMA3 && !s->text_seen) {
                if (tdm_tc_is_ws(t[0])) {
                    (void)tdm_sbuf_add(&s->hold, t, 1);
                    s->pos++;
                    continue;
                }
                if (t[0] == '{') {
                    tdm_sbuf_free(&s->hold); /* whitespace before the calls is not content */
                    s->state = S_L_ITEM;
                    continue;
                }
            }
            size_t i = 0;
            while (i < n && t[i] != '<' && t[i] != '[')
                i++;
            content(s, t, i);
            s->pos += i;
            if (i == n)
                return;
            t += i;
            n -= i;
            const char *start = s->f == TDM_TC_HERMES       ? H_START
                                : s->f == TDM_TC_MISTRAL    ? M_START
                                : s->f == TDM_TC_LLAMA3     ? L_TAG
                                : s->f == TDM_TC_DEEPSEEKV3 ? D_CALLS_BEGIN
                                                            : NULL;
            int next = s->f == TDM_TC_HERMES    ? S_H_BODY
                       : s->f == TDM_TC_MISTRAL ? S_M_OPEN
                       : s->f == TDM_TC_LLAMA3  ? S_L_ITEM
                                                : S_D_CALLS;
            m = start ? starts(t, n, start) : 0;
            if (m == -1 && !s->finishing)
                return;
            if (m == 1) {
                (void)tdm_sbuf_add(&s->raw, t, strlen(start));
                s->pos += strlen(start);
                s->state = next;
                continue;
            }
            int handled = 0;
            for (int k = 0; k < 4 && stray[s->f][k] && !handled; k++) {
                m = starts(t, n, stray[s->f][k]);
                if (m == -1 && !s->finishing)
                    return;
                if (m == 1) {
                    char why[96];
                    snprintf(why, sizeof(why), "%s outside a tool-call block", stray[s->f][k]);
                    (void)tdm_sbuf_add(&s->raw, t, strlen(stray[s->f][k]));
                    s->pos += strlen(stray[s->f][k]);
                    bail(s, why);
                    handled = 1;
                }
            }
            if (!handled) {
                content(s, t, 1);
                s->pos++;
            }
            continue;
        }
        /* inside a block: one byte at a time, except where a marker is matched whole */
        char c = t[0];
        if (s->state == S_H_END || s->state == S_D_CALLS || s->state == S_M_OPEN ||
            s->state == S_M_SEP || s->state == S_L_SEP) {
            if (tdm_tc_is_ws(c)) {
                (void)tdm_sbuf_add(&s->raw, t, 1);
                s->pos++;
                continue;
            }
        }
        switch (s->state) {
        case S_H_END:
            m = starts(t, n, H_END);
            if (m == -1 && !s->finishing)
                return;
            if (m == 1) {
                s->pos += strlen(H_END);
                s->raw.len = 0;
                s->state = S_OUT;
            } else {
                bail(s, "hermes: no </tool_call> after the call object");
            }
            continue;
        case S_M_OPEN:
        case S_M_SEP:
            (void)tdm_sbuf_add(&s->raw, t, 1);
            s->pos++;
            if (s->state == S_M_OPEN && c == '[')
                s->state = S_M_ITEM;
            else if (s->state == S_M_SEP && c == ',')
                s->state = S_M_ITEM;
            else if (s->state == S_M_SEP && c == ']') {
                s->raw.len = 0;
                s->state = S_OUT;
            } else
                bail(s, s->state == S_M_OPEN ? "mistral: [TOOL_CALLS] not followed by a list"
                                             : "mistral: expected ',' or ']' between calls");
            continue;
        case S_H_TAIL:
            if (tdm_tc_is_ws(c)) {
                content(s, t, 1);
                s->pos++;
                continue;
            }
            m = starts(t, n, H_END);
            if (m == -1 && !s->finishing)
                return;
            if (m == 1) {
                content(s, t, strlen(H_END));
                s->pos += strlen(H_END);
            }
            s->state = S_OUT;
            continue;
        case S_L_SEP:
            if (c == ';') {
                (void)tdm_sbuf_add(&s->raw, t, 1);
                s->pos++;
                s->state = S_L_ITEM;
            } else { /* text after the calls is content */
                content(s, s->raw.p, s->raw.len);
                s->raw.len = 0;
                s->state = S_OUT;
                s->text_seen = 1;
            }
            continue;
        case S_D_CALLS:
            m = starts(t, n, D_CALLS_END);
            if (m == 1) {
                s->pos += strlen(D_CALLS_END);
                s->raw.len = 0;
                s->state = S_OUT;
                continue;
            }
            int m2 = starts(t, n, D_CALL_BEGIN);
            if ((m == -1 || m2 == -1) && !s->finishing)
                return;
            if (m2 == 1) {
                (void)tdm_sbuf_add(&s->raw, t, strlen(D_CALL_BEGIN));
                s->pos += strlen(D_CALL_BEGIN);
                tdm_tc_jcall_reset(&s->jc);
                s->state = S_D_CALL;
            } else {
                bail(s, "deepseekv3: expected a call or the end of the calls");
            }
            continue;
        case S_D_CALL: {
            /* up to the call end marker; the call text is kept in jc.text */
            tdm_sbuf_t *b = &s->jc.text;
            (void)tdm_sbuf_add(&s->raw, t, 1);
            (void)tdm_sbuf_add(b, t, 1);
            s->pos++;
            size_t el = strlen(D_CALL_END);
            if (b->len > TDM_DSML_MAX_VALUE) {
                bail(s, "deepseekv3: call too large");
            } else if (b->len >= el && !memcmp(b->p + b->len - el, D_CALL_END, el)) {
                b->len -= el;
                const char *body = b->p, *sep = memmem(body, b->len, D_SEP, strlen(D_SEP));
                if (!sep) {
                    bail_to(s, "deepseekv3: a call without <｜tool▁sep｜>", S_D_CALLS);
                    continue;
                }
                size_t ll = (size_t)(sep - body);
                const char *r = sep + strlen(D_SEP);
                size_t rl = b->len - ll - strlen(D_SEP);
                const char *nm = body, *args = r;
                size_t nl = ll, al = rl;
                if (ll == 8 && !memcmp(body, "function", 8)) { /* V3: NAME\n```json\nARGS\n``` */
                    const char *nlp = memchr(r, '\n', rl);
                    const char *fence =
                        nlp ? memmem(nlp, rl - (size_t)(nlp - r), "```json", 7) : NULL;
                    if (!fence) {
                        bail_to(s, "deepseekv3: no ```json block after the name", S_D_CALLS);
                        continue;
                    }
                    nm = r;
                    nl = (size_t)(nlp - r);
                    args = fence + 7;
                    al = rl - (size_t)(args - r);
                    while (al && tdm_tc_is_ws(args[al - 1]))
                        al--;
                    if (al >= 3 && !memcmp(args + al - 3, "```", 3))
                        al -= 3;
                }
                /* as a JSON call object, so the hermes path checks and announces it */
                tdm_sbuf_t obj = {0};
                json_t *jn = json_stringn(nm, nl);
                char *name_json = jn ? json_dumps(jn, JSON_ENCODE_ANY) : NULL;
                json_decref(jn);
                (void)tdm_sbuf_puts(&obj, "{\"name\": ");
                (void)tdm_sbuf_puts(&obj, name_json ? name_json : "\"\"");
                (void)tdm_sbuf_puts(&obj, ", \"arguments\": ");
                (void)tdm_sbuf_add(&obj, args, al);
                (void)tdm_sbuf_puts(&obj, "}");
                free(name_json);
                tdm_tc_jcall_reset(&s->jc);
                int rc = 0;
                for (size_t k = 0; k < obj.len && rc == 0; k++)
                    rc = tdm_tc_jcall_feed(&s->jc, obj.p[k]);
                tdm_sbuf_free(&obj);
                if (rc != 1) {
                    bail_to(s, "deepseekv3: arguments are not a JSON object", S_D_CALLS);
                    continue;
                }
                if (call_close(s, S_D_CALLS) == 0)
                    s->state = S_D_CALLS;
            }
            continue;
        }
        default: { /* S_H_BODY, S_M_ITEM, S_L_ITEM: a call object */
            (void)tdm_sbuf_add(&s->raw, t, 1);
            s->pos++;
            int rc = tdm_tc_jcall_feed(&s->jc, c), st = s->state;
            int fail = st == S_H_BODY ? S_H_TAIL : S_OUT;
            if (rc < 0) {
                bail_to(s, "tool call: not a JSON call object", fail);
                continue;
            }
            call_progress(s);
            if (rc == 1) {
                if (call_close(s, fail) == 0)
                    s->state = st == S_H_BODY ? S_H_END : st == S_M_ITEM ? S_M_SEP : S_L_SEP;
            }
        }
        }
    }
}

static void compact(tdm_tc_stream_t *s)
{
    if (s->pos == 0)
        return;
    memmove(s->pend.p, s->pend.p + s->pos, s->pend.len - s->pos);
    s->pend.len -= s->pos;
    s->pos = 0;
}

tdm_status_t tdm_tc_stream_init(tdm_tc_format_t f, const json_t *tools, tdm_dsml_cb_t cb, void *ud,
                                tdm_tc_stream_t **ret)
{
    if (!cb || !ret || f <= TDM_TC_NONE || f >= TDM_TC_FORMAT_MAX ||
        (tools && !json_is_null(tools) && !json_is_array(tools)))
        return TDM_ERR_INVAL;
    tdm_tc_stream_t *s = tdm_calloc(1, sizeof(*s));
    s->f = f;
    s->tools = tools;
    s->cb = cb;
    s->ud = ud;
    s->cur = -1;
    if (f == TDM_TC_DSML) {
        tdm_status_t st = tdm_dsml_stream_init(tools, cb, ud, &s->dsml);
        if (st != TDM_OK) {
            tdm_free(s);
            return st;
        }
    }
    *ret = s;
    return TDM_OK;
}

tdm_status_t tdm_tc_stream_feed(tdm_tc_stream_t *s, const char *text, size_t len)
{
    if (!s || (!text && len))
        return TDM_ERR_INVAL;
    if (s->finished)
        return TDM_ERR_STATE;
    if (s->dsml)
        return tdm_dsml_stream_feed(s->dsml, text, len);
    TDM_TRY(tdm_sbuf_add(&s->pend, text, len));
    run(s);
    compact(s);
    return TDM_OK;
}

tdm_status_t tdm_tc_stream_finish(tdm_tc_stream_t *s)
{
    if (!s)
        return TDM_ERR_INVAL;
    if (s->finished)
        return TDM_ERR_STATE;
    if (s->dsml) {
        s->finished = 1;
        return tdm_dsml_stream_finish(s->dsml);
    }
    s->finishing = 1;
    run(s);
    if (s->state == S_L_SEP || s->state == S_H_TAIL) { /* nothing left open */
        s->raw.len = 0;
        s->state = S_OUT;
    }
    if (s->state != S_OUT)
        bail(s, "tool-call block not closed at the end of the output");
    content(s, "", 0); /* held whitespace */
    s->finished = 1;
    return TDM_OK;
}

uint32_t tdm_tc_stream_malformed(const tdm_tc_stream_t *s)
{
    return s->dsml ? tdm_dsml_stream_malformed(s->dsml) : s->malformed;
}

void tdm_tc_stream_free(tdm_tc_stream_t *s)
{
    if (!s)
        return;
    tdm_dsml_stream_free(s->dsml);
    tdm_sbuf_free(&s->pend);
    tdm_sbuf_free(&s->raw);
    tdm_sbuf_free(&s->hold);
    tdm_sbuf_free(&s->jc.text);
    tdm_free(s);
}

tdm_status_t tdm_tc_parse(tdm_tc_format_t f, const json_t *tools, const char *text, size_t len,
                          tdm_dsml_result_t *ret)
{
    tdm_tc_collect_t c = {0};
    tdm_tc_stream_t *s = NULL;
    tdm_status_t st;
    if (f == TDM_TC_DSML)
        return tdm_dsml_parse(tools, text, len, ret);
    if (!ret || (!text && len))
        return TDM_ERR_INVAL;
    TDM_TRY(tdm_tc_stream_init(f, tools, tdm_tc_collect_cb, &c, &s));
    st = tdm_tc_stream_feed(s, text, len);
    if (st == TDM_OK)
        st = tdm_tc_stream_finish(s);
    tdm_tc_stream_free(s);
    return tdm_tc_collect_end(&c, st, ret);
}
