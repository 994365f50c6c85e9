/*
 * fuzz-toolcall.c — libFuzzer target for the tool-call parsers (tdm/toolcall.h).
 *
 * Input byte 0 picks the format (hermes, llama3, mistral, deepseekv3, dsml); the rest is a model
 * reply. It is parsed whole and fed byte by byte: both must give the same content, the same calls
 * and the same leak count, and every call's CALL_ARGS pieces must concatenate to its CALL_END
 * arguments — a difference aborts (a real bug). Never crashes, never leaks.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/toolcall.h>

#include "chat_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct out {
    tdm_sbuf_t content, calls, args;
    int malformed, bad_args;
} out_t;

static void cb(void *ud, const tdm_dsml_event_t *ev)
{
    out_t *o = ud;
    if (ev->kind == TDM_DSML_CONTENT) {
        (void)tdm_sbuf_add(&o->content, ev->text, ev->len);
    } else if (ev->kind == TDM_DSML_CALL_START) {
        o->args.len = 0;
    } else if (ev->kind == TDM_DSML_CALL_ARGS) {
        (void)tdm_sbuf_add(&o->args, ev->text, ev->len);
    } else if (ev->kind == TDM_DSML_CALL_END) {
        if (o->args.len != ev->len || (ev->len && memcmp(o->args.p, ev->text, ev->len)))
            o->bad_args = 1;
        (void)tdm_sbuf_add(&o->calls, ev->text, ev->len);
        (void)tdm_sbuf_add(&o->calls, "|", 1);
    } else if (ev->kind == TDM_DSML_MALFORMED) {
        o->malformed++;
    }
}

static void run(tdm_tc_format_t f, const char *text, size_t len, size_t step, out_t *o)
{
    static const char tools[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
        "\"required\":[\"a\"]}}}]";
    json_t *t = json_loads(tools, 0, NULL);
    tdm_tc_stream_t *s = NULL;
    memset(o, 0, sizeof(*o));
    if (tdm_tc_stream_init(f, t, cb, o, &s) == TDM_OK) {
        for (size_t i = 0; i < len; i += step)
            tdm_tc_stream_feed(s, text + i, len - i < step ? len - i : step);
        tdm_tc_stream_finish(s);
        tdm_tc_stream_free(s);
    }
    json_decref(t);
}

static int same(const tdm_sbuf_t *a, const tdm_sbuf_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const tdm_tc_format_t fmts[] = {TDM_TC_HERMES, TDM_TC_LLAMA3, TDM_TC_MISTRAL,
                                           TDM_TC_DEEPSEEKV3, TDM_TC_DSML};
    if (size < 1 || size > (1 << 16))
        return 0;
    tdm_tc_format_t f = fmts[data[0] % 5];
    out_t whole, bytes;
    run(f, (const char *)data + 1, size - 1, size, &whole);
    run(f, (const char *)data + 1, size - 1, 1, &bytes);
    if (f != TDM_TC_DSML &&
        (!same(&whole.content, &bytes.content) || !same(&whole.calls, &bytes.calls) ||
         whole.malformed != bytes.malformed || whole.bad_args || bytes.bad_args))
        abort();
    tdm_sbuf_free(&whole.content);
    tdm_sbuf_free(&whole.calls);
    tdm_sbuf_free(&whole.args);
    tdm_sbuf_free(&bytes.content);
    tdm_sbuf_free(&bytes.calls);
    tdm_sbuf_free(&bytes.args);
    return 0;
}
