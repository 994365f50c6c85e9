/*
 * test-toolcall.c — the hermes, llama3, mistral and deepseekv3 tool-call parsers.
 *
 * Golden model outputs in each model's documented format (the vendors' published examples:
 * Qwen's function-calling guide, Meta's Llama 3.1 JSON tool-calling prompt format, Mistral's
 * v0.3 [TOOL_CALLS] format, DeepSeek-V3's and V3.1's chat templates) parse to the expected
 * content and tool calls; each is then fed split at every byte boundary and byte by byte and
 * must give the same calls, the same content and the same leak count, with the CALL_ARGS pieces
 * of every call concatenating to its CALL_END arguments. Malformed markup comes back as content
 * with a MALFORMED event. Plus template detection, forced prefixes and schema checks.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/mem.h>
#include <tdm/toolcall.h>

#include "chat_int.h"
#include "tap.h"

typedef struct got {
    tdm_sbuf_t content;
    tdm_sbuf_t calls; /* "name(args)|" per CALL_END */
    tdm_sbuf_t name;  /* of the open call */
    tdm_sbuf_t args;  /* CALL_ARGS of the open call */
    int starts, malformed, args_match, offered_all, schema_all;
} got_t;

static void cb(void *ud, const tdm_dsml_event_t *ev)
{
    got_t *g = ud;
    switch (ev->kind) {
    case TDM_DSML_CONTENT:
        tdm_sbuf_add(&g->content, ev->text, ev->len);
        break;
    case TDM_DSML_CALL_START:
        g->starts++;
        g->args.len = 0;
        g->name.len = 0;
        tdm_sbuf_add(&g->name, ev->text, ev->len);
        break;
    case TDM_DSML_CALL_ARGS:
        tdm_sbuf_add(&g->args, ev->text, ev->len);
        break;
    case TDM_DSML_CALL_END:
        tdm_sbuf_add(&g->calls, g->name.p, g->name.len);
        tdm_sbuf_puts(&g->calls, "(");
        tdm_sbuf_add(&g->calls, ev->text, ev->len);
        tdm_sbuf_puts(&g->calls, ")|");
        if (g->args.len != ev->len || (ev->len && memcmp(g->args.p, ev->text, ev->len)))
            g->args_match = 0;
        g->offered_all &= ev->offered;
        g->schema_all &= ev->schema_ok;
        break;
    case TDM_DSML_MALFORMED:
        g->malformed++;
        break;
    default:
        break;
    }
}

static void got_free(got_t *g)
{
    tdm_sbuf_free(&g->content);
    tdm_sbuf_free(&g->calls);
    tdm_sbuf_free(&g->args);
    tdm_sbuf_free(&g->name);
}

/* Feed `text` in pieces cut at the offsets cuts[0..ncuts) (ascending). */
static void run(tdm_tc_format_t f, const json_t *tools, const char *text, const size_t *cuts,
                size_t ncuts, got_t *g)
{
    tdm_tc_stream_t *s = NULL;
    size_t len = strlen(text), prev = 0;
    memset(g, 0, sizeof(*g));
    g->args_match = g->offered_all = g->schema_all = 1;
    tdm_sbuf_add(&g->content, "", 0);
    tdm_sbuf_add(&g->calls, "", 0);
    if (tdm_tc_stream_init(f, tools, cb, g, &s) != TDM_OK)
        return;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        tdm_tc_stream_feed(s, text + prev, end - prev);
        prev = end;
    }
    tdm_tc_stream_finish(s);
    tdm_tc_stream_free(s);
}

static json_t *tools;

static void check(tdm_tc_format_t f, const char *what, const char *text, const char *want_content,
                  const char *want_calls, int want_malformed)
{
    got_t g;
    run(f, tools, text, NULL, 0, &g);
    int same = !strcmp(g.content.p, want_content) && !strcmp(g.calls.p, want_calls) &&
               g.malformed == want_malformed && g.args_match;
    if (!ok(same, "%s %s: content, calls and %d leak(s) as expected", tdm_tc_format_name(f), what,
            want_malformed)) {
        diag("content [%s] want [%s]", g.content.p, want_content);
        diag("calls [%s] want [%s]", g.calls.p, want_calls);
        diag("malformed %d args_match %d", g.malformed, g.args_match);
    }
    /* every single cut, then byte by byte */
    size_t len = strlen(text), bad = 0;
    for (size_t k = 0; k <= len; k++) {
        got_t h;
        run(f, tools, text, &k, 1, &h);
        bad += strcmp(h.content.p, g.content.p) || strcmp(h.calls.p, g.calls.p) ||
               h.malformed != g.malformed || !h.args_match;
        got_free(&h);
    }
    size_t *all = tdm_malloc((len + 1) * sizeof(*all));
    for (size_t k = 0; k < len; k++)
        all[k] = k + 1;
    got_t h;
    run(f, tools, text, all, len ? len - 1 : 0, &h);
    bad += strcmp(h.content.p, g.content.p) || strcmp(h.calls.p, g.calls.p) ||
           h.malformed != g.malformed || !h.args_match;
    got_free(&h);
    tdm_free(all);
    ok(bad == 0, "%s %s: the same at all %zu split points and byte by byte", tdm_tc_format_name(f),
       what, len + 1);
    got_free(&g);
}

#define DS_CALLS "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"

int main(void)
{
    tools = json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_current_temperature\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},"
        "\"unit\":{\"type\":\"string\"}},\"required\":[\"location\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"get_temperature_date\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},\"date\":{"
        "\"type\":\"string\"},\"unit\":{\"type\":\"string\"}},\"required\":[\"location\","
        "\"date\"]}}}]",
        0, NULL);

    /* Qwen's function-calling guide (Qwen2.5 / Qwen3, hermes style): two parallel calls */
    check(TDM_TC_HERMES, "Qwen guide, parallel calls",
          "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": "
          "\"San Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
          "\"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", "
          "\"date\": \"2024-10-01\"}}\n</tool_call>",
          "\n",
          "get_current_temperature({\"location\": \"San Francisco, CA, USA\"})|"
          "get_temperature_date({\"location\": \"San Francisco, CA, USA\", \"date\": "
          "\"2024-10-01\"})|",
          0);
    check(TDM_TC_HERMES, "content before a call, arguments first, nested values",
          "Let me check.\n<tool_call>\n{\"arguments\": {\"location\": \"Paris {x} [y]\", "
          "\"unit\": \"c\\\"\"}, \"name\": \"get_current_temperature\"}\n</tool_call>",
          "Let me check.\n",
          "get_current_temperature({\"location\": \"Paris {x} [y]\", \"unit\": \"c\\\"\"})|", 0);
    check(TDM_TC_HERMES, "plain text with < and [", "a < b and [c] </tool", "a < b and [c] </tool",
          "", 0);
    check(TDM_TC_HERMES, "broken JSON returned as content",
          "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>ok",
          "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>ok", "", 1);
    check(TDM_TC_HERMES, "stray end tag", "done</tool_call>", "done</tool_call>", "", 1);
    check(TDM_TC_HERMES, "block not closed at the end",
          "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"loc",
          "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"loc", "", 1);
    check(TDM_TC_HERMES, "arguments not an object",
          "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
          "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "", 1);

    /* Meta's Llama 3.1 prompt format: JSON-based tool calling */
    check(TDM_TC_LLAMA3, "Meta's JSON tool call",
          "{\"name\": \"get_current_temperature\", \"parameters\": {\"location\": \"San "
          "Francisco, CA\", \"unit\": \"Fahrenheit\"}}",
          "",
          "get_current_temperature({\"location\": \"San Francisco, CA\", \"unit\": "
          "\"Fahrenheit\"})|",
          0);
    check(TDM_TC_LLAMA3, "python_tag and two calls separated by ';'",
          "<|python_tag|>{\"name\": \"get_current_temperature\", \"parameters\": {\"location\": "
          "\"Paris\"}}; {\"name\": \"get_temperature_date\", \"parameters\": {\"location\": "
          "\"Paris\", \"date\": \"2024-10-01\"}}",
          "",
          "get_current_temperature({\"location\": \"Paris\"})|get_temperature_date({\"location\": "
          "\"Paris\", \"date\": \"2024-10-01\"})|",
          0);
    check(TDM_TC_LLAMA3, "text is not a call", "Sure: {\"name\": 1}", "Sure: {\"name\": 1}", "", 0);
    check(TDM_TC_LLAMA3, "unterminated call", "  {\"name\": \"f\", \"parameters\": {",
          "{\"name\": \"f\", \"parameters\": {", "", 1);

    /* Mistral v0.3 function calling */
    check(TDM_TC_MISTRAL, "v0.3 [TOOL_CALLS] list",
          "[TOOL_CALLS] [{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": "
          "\"Paris, France\", \"unit\": \"celsius\"}}, {\"name\": \"get_temperature_date\", "
          "\"arguments\": {\"location\": \"Paris, France\", \"date\": \"2024-10-01\"}}]",
          "",
          "get_current_temperature({\"location\": \"Paris, France\", \"unit\": \"celsius\"})|"
          "get_temperature_date({\"location\": \"Paris, France\", \"date\": \"2024-10-01\"})|",
          0);
    check(TDM_TC_MISTRAL, "[TOOL_CALLS] without a list", "x [TOOL_CALLS] oops",
          "x [TOOL_CALLS] o"
          "ops",
          "", 1);

    /* DeepSeek-V3 / R1 (function + ```json fence) and V3.1 (name + raw JSON) */
    check(TDM_TC_DEEPSEEKV3, "V3 call with a json fence",
          "I'll look.\n" DS_CALLS DS_CALL "function" DS_SEP
          "get_current_temperature\n```json\n{\"location\": \"Hangzhou\"}\n```" DS_CALL_END
              DS_CALLS_END,
          "I'll look.\n", "get_current_temperature({\"location\": \"Hangzhou\"})|", 0);
    check(TDM_TC_DEEPSEEKV3, "V3.1 two calls",
          DS_CALLS DS_CALL
          "get_current_temperature" DS_SEP "{\"location\": \"Hangzhou\"}" DS_CALL_END DS_CALL
          "get_temperature_date" DS_SEP
          "{\"location\": \"Hangzhou\", \"date\": \"2024-10-01\"}" DS_CALL_END DS_CALLS_END,
          "",
          "get_current_temperature({\"location\": \"Hangzhou\"})|get_temperature_date({\"location"
          "\": \"Hangzhou\", \"date\": \"2024-10-01\"})|",
          0);
    check(TDM_TC_DEEPSEEKV3, "stray separator", "a" DS_SEP "b", "a" DS_SEP "b", "", 1);
    check(TDM_TC_DEEPSEEKV3, "call without a separator",
          DS_CALLS DS_CALL "get_current_temperature" DS_CALL_END DS_CALLS_END,
          DS_CALLS DS_CALL "get_current_temperature" DS_CALL_END, "", 1);

    /* schema: offered, required, types */
    got_t g;
    run(TDM_TC_HERMES, tools,
        "<tool_call>{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": "
        "\"x\"}}</tool_call>",
        NULL, 0, &g);
    ok(g.offered_all && g.schema_all, "a call that fits its schema: offered, schema_ok");
    got_free(&g);
    run(TDM_TC_HERMES, tools,
        "<tool_call>{\"name\": \"get_temperature_date\", \"arguments\": {\"location\": 3}}"
        "</tool_call>",
        NULL, 0, &g);
    ok(g.offered_all && !g.schema_all, "a missing required parameter: !schema_ok");
    got_free(&g);
    run(TDM_TC_HERMES, tools, "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>",
        NULL, 0, &g);
    ok(!g.offered_all && g.starts == 1, "an unknown tool: !offered");
    got_free(&g);

    /* detection from the committed chat templates' markup */
    ok(tdm_tc_format_detect("{{ '<tool_call>\\n' }}") == TDM_TC_HERMES &&
           tdm_tc_format_detect("[TOOL_CALLS] [") == TDM_TC_MISTRAL &&
           tdm_tc_format_detect("<|python_tag|>") == TDM_TC_LLAMA3 &&
           tdm_tc_format_detect("x" DS_CALLS "y") == TDM_TC_DEEPSEEKV3 &&
           tdm_tc_format_detect("<tool_calls><invoke name=") == TDM_TC_DSML &&
           tdm_tc_format_detect("{{ messages }}") == TDM_TC_NONE,
       "auto detection by the template's markup");
    tdm_tc_format_t f;
    ok(tdm_tc_format_parse("deepseekv3", &f) == TDM_OK && f == TDM_TC_DEEPSEEKV3 &&
           tdm_tc_format_parse("qwen", &f) == TDM_ERR_INVAL,
       "parser names");
    char *p = tdm_tc_forced_prefix(TDM_TC_HERMES, "get_x");
    ok(p && !strcmp(p, "<tool_call>\n{\"name\": \"get_x\", \"arguments\": "),
       "hermes named prefix");
    tdm_free(p);
    /* a forced prefix fed first, then the model's continuation */
    p = tdm_tc_forced_prefix(TDM_TC_LLAMA3, "get_current_temperature");
    tdm_sbuf_t all = {0};
    tdm_sbuf_puts(&all, p);
    tdm_sbuf_puts(&all, "{\"location\": \"Oslo\"}}");
    run(TDM_TC_LLAMA3, tools, all.p, NULL, 0, &g);
    ok(!strcmp(g.calls.p, "get_current_temperature({\"location\": \"Oslo\"})|") && !g.malformed,
       "llama3 named prefix + continuation is one call (%s)", g.calls.p);
    got_free(&g);
    tdm_sbuf_free(&all);
    tdm_free(p);
    /* auto on the committed real templates */
    static const struct {
        const char *file;
        tdm_tc_format_t f;
    } real[] = {{"Qwen-Qwen2.5-7B-Instruct", TDM_TC_HERMES},
                {"Qwen-Qwen3-0.6B", TDM_TC_HERMES},
                {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", TDM_TC_HERMES},
                {"HuggingFaceTB-SmolLM3-3B", TDM_TC_HERMES},
                {"meta-llama-Llama-3.1-8B-Instruct", TDM_TC_LLAMA3},
                {"meta-llama-Llama-3.2-3B-Instruct", TDM_TC_LLAMA3},
                {"meta-llama-Llama-3.3-70B-Instruct", TDM_TC_LLAMA3},
                {"mistralai-Mistral-7B-Instruct-v0.3", TDM_TC_MISTRAL},
                {"mistralai-Mistral-Nemo-Instruct-2407", TDM_TC_MISTRAL},
                {"deepseek-ai-DeepSeek-R1", TDM_TC_DEEPSEEKV3},
                {"deepseek-ai-DeepSeek-V3.1", TDM_TC_DEEPSEEKV3},
                {"HuggingFaceH4-zephyr-7b-beta", TDM_TC_NONE}};
    const char *src = getenv("TDM_SRCDIR");
    for (size_t i = 0; i < sizeof(real) / sizeof(real[0]); i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/tests/fixtures/chat_templates/%s.jinja", src ? src : ".",
                 real[i].file);
        FILE *fp = fopen(path, "rb");
        tdm_sbuf_t b = {0};
        char chunk[4096];
        size_t n;
        while (fp && (n = fread(chunk, 1, sizeof(chunk), fp)) > 0)
            tdm_sbuf_add(&b, chunk, n);
        if (fp)
            fclose(fp);
        tdm_tc_format_t d = b.p ? tdm_tc_format_detect(b.p) : TDM_TC_FORMAT_MAX;
        ok(d == real[i].f, "auto: %s → %s (got %s)", real[i].file, tdm_tc_format_name(real[i].f),
           tdm_tc_format_name(d));
        tdm_sbuf_free(&b);
    }
    json_decref(tools);
    return done_testing();
}
