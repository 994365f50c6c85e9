/*
 * test-chat.c — chat template renderers against transformers' apply_chat_template goldens.
 *
 * Every case of tests/fixtures/demo/chat_goldens.json (demo template: tools, DSML tool calls,
 * tool results) and every `chat` case of the ChatML (tiny-qwen2-sharded), Llama-3 (tiny-llama3)
 * and Llama-2 (tiny-llama2-fp16) goldens must render byte for byte, and tokenize to the golden
 * ids with the model's own tokenizer. Then: the template matching rule (reformatted code and
 * escaped literals still match, changed output does not, unknown templates get the
 * /v1/completions hint), OpenAI-form inputs (string arguments, content parts, null content),
 * the Python formatting the templates depend on, and every bad input's error.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tdm/chat.h>
#include <tdm/mem.h>
#include <tdm/tokenizer.h>

#include "chat.c"
#include "tap.h"

static char srcdir[1024];

static json_t *load_json(const char *rel)
{
    char path[2048];
    json_error_t jerr;
    snprintf(path, sizeof(path), "%s/%s", srcdir, rel);
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &jerr);
    if (!j)
        diag("%s: %s", path, jerr.text);
    return j;
}

static int ids_equal(const tdm_tok_t *tok, const char *text, size_t len, const json_t *want)
{
    uint32_t *ids = NULL;
    size_t n = 0, i;
    json_t *v;
    int same;
    if (tdm_tok_encode(tok, text, len, 0, &ids, &n) != TDM_OK)
        return 0;
    same = n == json_array_size(want);
    json_array_foreach(want, i, v) same = same && i < n && ids[i] == json_integer_value(v);
    tdm_free(ids);
    return same;
}

/* Render every case of a golden array with the model's template; check text and ids. */
static void check_cases(const char *model_dir, const json_t *cases, tdm_chat_format_t want_fmt,
                        int has_tools)
{
    char dir[2048], err[512] = "";
    tdm_chat_template_t *t = NULL;
    tdm_tok_t *tok = NULL;
    const json_t *c;
    size_t i;

    snprintf(dir, sizeof(dir), "%s/%s", srcdir, model_dir);
    tdm_status_t st = tdm_chat_template_load(dir, &t, err, sizeof(err));
    if (!ok(st == TDM_OK, "%s: template loads (%s)", model_dir, err))
        return;
    ok(tdm_chat_template_format(t) == want_fmt, "%s: recognised as %s", model_dir,
       tdm_chat_format_name(want_fmt));
    ok(tdm_chat_renders_tools(t) == has_tools, "%s: renders tools = %d", model_dir, has_tools);
    snprintf(dir, sizeof(dir), "%s/%s/tokenizer.json", srcdir, model_dir);
    if (!ok(tdm_tok_load(dir, &tok, err, sizeof(err)) == TDM_OK, "tokenizer loads"))
        goto out;
    json_array_foreach(cases, i, c)
    {
        char *text = NULL;
        size_t len = 0;
        const json_t *want = json_object_get(c, "text");
        st = tdm_chat_render(t, json_object_get(c, "messages"), json_object_get(c, "tools"),
                             json_is_true(json_object_get(c, "add_generation_prompt")), &text, &len,
                             err, sizeof(err));
        int same = st == TDM_OK && len == json_string_length(want) &&
                   memcmp(text, json_string_value(want), len) == 0;
        if (!ok(same, "%s case %zu renders byte for byte", model_dir, i)) {
            diag("status %s err %s", tdm_status_name(st), err);
            diag("got:  %s", text ? text : "(null)");
            diag("want: %s", json_string_value(want));
        }
        ok(same && ids_equal(tok, text, len, json_object_get(c, "ids")),
           "%s case %zu tokenizes to the golden ids", model_dir, i);
        tdm_free(text);
    }
out:
    tdm_tok_free(tok);
    tdm_chat_template_free(t);
}

static void test_goldens(void)
{
    json_t *g = load_json("tests/fixtures/demo/chat_goldens.json");
    ok(g && json_array_size(json_object_get(g, "cases")) >= 10, "demo goldens present");
    if (g)
        check_cases("models/demo", json_object_get(g, "cases"), TDM_CHAT_DEMO, 1);
    json_decref(g);

    static const struct {
        const char *name;
        tdm_chat_format_t fmt;
        int tools;
    } fx[] = {{"tiny-qwen2-sharded", TDM_CHAT_CHATML, 0},
              {"tiny-llama3", TDM_CHAT_LLAMA3, 0},
              {"tiny-llama2-fp16", TDM_CHAT_LLAMA2, 0},
              {"tiny-qwen3", TDM_CHAT_JINJA, 1},
              /* saved by transformers 5: chat_template.jinja, model_max_length 1e30 */
              {"tiny-qwen3-hf5", TDM_CHAT_JINJA, 1}};
    for (size_t i = 0; i < sizeof(fx) / sizeof(fx[0]); i++) {
        char rel[256], dir[256];
        snprintf(rel, sizeof(rel), "tests/fixtures/goldens/%s.json", fx[i].name);
        snprintf(dir, sizeof(dir), "tests/fixtures/models/%s", fx[i].name);
        g = load_json(rel);
        ok(g && json_array_size(json_object_get(g, "chat")) >= 3, "%s chat goldens present",
           fx[i].name);
        if (g)
            check_cases(dir, json_object_get(g, "chat"), fx[i].fmt, fx[i].tools);
        json_decref(g);
    }
    /* Models without a chat template: a clear NOTFOUND. */
    char dir[2048], err[512] = "";
    tdm_chat_template_t *t = NULL;
    snprintf(dir, sizeof(dir), "%s/tests/fixtures/models/tiny-llama-gqa", srcdir);
    ok(tdm_chat_template_load(dir, &t, err, sizeof(err)) == TDM_ERR_NOTFOUND &&
           strstr(err, "/v1/completions"),
       "no chat_template: NOTFOUND pointing at /v1/completions (%s)", err);
    snprintf(dir, sizeof(dir), "%s/no/such/dir", srcdir);
    ok(tdm_chat_template_load(dir, &t, err, sizeof(err)) == TDM_ERR_NOTFOUND, "missing dir");
}

static tdm_status_t match(const char *tpl, tdm_chat_format_t *f, char *err, size_t errlen)
{
    return tdm_chat_template_match(tpl, f, err, errlen);
}

static char *replace_all(const char *s, const char *from, const char *to)
{
    tdm_sbuf_t b = {0};
    const char *p;
    while ((p = strstr(s, from))) {
        tdm_sbuf_add(&b, s, (size_t)(p - s));
        tdm_sbuf_puts(&b, to);
        s = p + strlen(from);
    }
    tdm_sbuf_puts(&b, s);
    return b.p;
}

/* transformers' default model_max_length (beyond 64 bits) must not drop the file. */
static void test_big_int(void)
{
    char dir[] = "/tmp/tdm-chat-bigint-XXXXXX", path[64], err[512] = "";
    tdm_chat_template_t *t = NULL;
    if (!ok(mkdtemp(dir) != NULL, "temp dir"))
        return;
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    json_t *cfg = json_pack("{s:s,s:s}", "chat_template", TPL_CHATML, "eos_token", "<E>");
    char *body = json_dumps(cfg, 0);
    FILE *f = fopen(path, "w");
    fprintf(
        f,
        "{\"model_max_length\": 1000000000000000019884624838656, \"n\": -12345678901234567890123,"
        " \"s\": \"1234567890123456789012\", %s",
        body + 1);
    fclose(f);
    ok(tdm_chat_template_load(dir, &t, err, sizeof(err)) == TDM_OK &&
           tdm_chat_template_format(t) == TDM_CHAT_CHATML && strcmp(t->eos_token, "<E>") == 0,
       "integers beyond 64 bits: the file still loads (%s)", err);
    tdm_chat_template_free(t);
    t = NULL;
    /* transformers 5: no chat_template key, the text in chat_template.jinja */
    f = fopen(path, "w");
    fprintf(f, "{\"eos_token\": \"<E>\"}");
    fclose(f);
    char jpath[96];
    snprintf(jpath, sizeof(jpath), "%s/chat_template.jinja", dir);
    f = fopen(jpath, "w");
    fputs(TPL_LLAMA3, f);
    fclose(f);
    ok(tdm_chat_template_load(dir, &t, err, sizeof(err)) == TDM_OK &&
           tdm_chat_template_format(t) == TDM_CHAT_LLAMA3,
       "chat_template.jinja beside a config without chat_template is read (%s)", err);
    tdm_chat_template_free(t);
    remove(jpath);
    free(body);
    json_decref(cfg);
    remove(path);
    rmdir(dir);
}

static void test_matching(void)
{
    tdm_chat_format_t f = TDM_CHAT_FORMAT_MAX;
    char err[512] = "";
    char *v;

    for (int i = 0; i < TDM_CHAT_JINJA; i++)
        ok(match(formats[i].text, &f, err, sizeof(err)) == TDM_OK && (int)f == i,
           "built-in %s matches itself", formats[i].name);
    /* Reformatted code: extra spaces/newlines inside tags, {{x}} vs {{ x }}, "" vs ''. */
    v = replace_all(TPL_CHATML, "{% for message in messages %}",
                    "{%   for  message\n in messages\t%}");
    ok(match(v, &f, err, sizeof(err)) == TDM_OK && f == TDM_CHAT_CHATML, "whitespace in tags");
    tdm_free(v);
    v = replace_all(TPL_LLAMA3, "'<|eot_id|>'", "\"<|eot_id|>\"");
    ok(match(v, &f, err, sizeof(err)) == TDM_OK && f == TDM_CHAT_LLAMA3, "quote style");
    tdm_free(v);
    v = replace_all(TPL_LLAMA2, "{% endfor %}", "{% endfor %}\n");
    ok(match(v, &f, err, sizeof(err)) == TDM_OK && f == TDM_CHAT_LLAMA2,
       "one trailing newline (Jinja drops it)");
    tdm_free(v);
    v = replace_all(TPL_DEMO, "{{ bos_token }}", "{# demo #}{{ bos_token }}");
    ok(match(v, &f, err, sizeof(err)) == TDM_OK && f == TDM_CHAT_DEMO, "comments ignored");
    tdm_free(v);
    /* Anything that prints differently must not match. */
    v = replace_all(TPL_CHATML, "You are a helpful assistant.", "You are Qwen.");
    ok(match(v, &f, err, sizeof(err)) == TDM_ERR_UNSUPPORTED && strstr(err, "/v1/completions"),
       "changed default system prompt: unsupported, hint given (%s)", err);
    tdm_free(v);
    v = replace_all(TPL_LLAMA3, "{% endif %}{{ content }}", "{% endif %} {{ content }}");
    ok(match(v, &f, err, sizeof(err)) == TDM_ERR_UNSUPPORTED, "space outside tags is output");
    tdm_free(v);
    v = replace_all(TPL_DEMO, "'<|end|>\\n'", "'<|end|> \\n'");
    ok(match(v, &f, err, sizeof(err)) == TDM_ERR_UNSUPPORTED, "space inside a literal");
    tdm_free(v);
    ok(match("{{ messages }}", &f, err, sizeof(err)) == TDM_ERR_UNSUPPORTED, "foreign template");
    ok(match("", &f, err, sizeof(err)) == TDM_ERR_UNSUPPORTED, "empty template");
    ok(match(NULL, &f, err, sizeof(err)) == TDM_ERR_INVAL, "NULL template");
    ok(match("{{ 'unterminated", &f, err, sizeof(err)) == TDM_ERR_UNSUPPORTED, "broken Jinja");

    /* tokenizer_config forms: list of named templates, token objects, wrong types. */
    tdm_chat_template_t *t = NULL;
    json_t *cfg = json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:{s:s},s:s}", "chat_template", "name",
                            "tool_use", "template", "{{ x }}", "name", "default", "template",
                            TPL_LLAMA3, "bos_token", "content", "<B>", "eos_token", "<E>");
    ok(tdm_chat_template_from_config(cfg, &t, err, sizeof(err)) == TDM_OK &&
           tdm_chat_template_format(t) == TDM_CHAT_LLAMA3 && strcmp(t->bos_token, "<B>") == 0 &&
           strcmp(t->eos_token, "<E>") == 0,
       "list form picks \"default\"; AddedToken-style bos_token");
    tdm_chat_template_free(t);
    json_decref(cfg);
    cfg = json_pack("{s:[{s:s,s:s}]}", "chat_template", "name", "tool_use", "template", TPL_LLAMA3);
    ok(tdm_chat_template_from_config(cfg, &t, err, sizeof(err)) == TDM_ERR_UNSUPPORTED,
       "list without default");
    json_decref(cfg);
    cfg = json_pack("{s:i}", "chat_template", 3);
    ok(tdm_chat_template_from_config(cfg, &t, err, sizeof(err)) == TDM_ERR_FORMAT, "int template");
    json_decref(cfg);
    cfg = json_pack("{s:s,s:i}", "chat_template", TPL_CHATML, "bos_token", 1);
    ok(tdm_chat_template_from_config(cfg, &t, err, sizeof(err)) == TDM_ERR_FORMAT &&
           strstr(err, "bos_token"),
       "bad bos_token named (%s)", err);
    json_decref(cfg);
    ok(tdm_chat_template_from_config(NULL, &t, err, sizeof(err)) == TDM_ERR_FORMAT, "NULL config");
}

/* --chat-template FILE|NAME, tool_use selection, and a template no built-in matches. */
static void test_override(void)
{
    char dir[] = "/tmp/tdm-chat-ovr-XXXXXX", path[96], err[512] = "", *text = NULL;
    tdm_chat_template_t *t = NULL;
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", 0, NULL);
    if (!ok(mkdtemp(dir) != NULL, "temp dir"))
        return;
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"eos_token\": \"<E>\", \"chat_template\": [{\"name\": \"default\", \"template\": "
          "\"D{{ messages[0].content }}{{ eos_token }}\"}, {\"name\": \"tool_use\", \"template\": "
          "\"T{{ tools[0].function.name }}\"}, {\"name\": \"rag\", \"template\": \"R\"}]}",
          f);
    fclose(f);
    ok(tdm_chat_template_open(dir, NULL, &t, err, sizeof(err)) == TDM_OK &&
           tdm_chat_template_format(t) == TDM_CHAT_JINJA && tdm_chat_renders_tools(t) &&
           tdm_chat_render(t, msgs, NULL, 1, &text, NULL, err, sizeof(err)) == TDM_OK &&
           !strcmp(text, "Dhi<E>"),
       "named list: \"default\" renders a request without tools (%s)", text ? text : err);
    tdm_free(text);
    text = NULL;
    ok(t && tdm_chat_render(t, msgs, tools, 1, &text, NULL, err, sizeof(err)) == TDM_OK &&
           !strcmp(text, "Tf"),
       "named list: \"tool_use\" renders a request with tools (%s)", text ? text : err);
    tdm_free(text);
    text = NULL;
    tdm_chat_template_free(t);
    t = NULL;
    ok(tdm_chat_template_open(dir, "rag", &t, err, sizeof(err)) == TDM_OK &&
           tdm_chat_render(t, msgs, tools, 1, &text, NULL, err, sizeof(err)) == TDM_OK &&
           !strcmp(text, "R"),
       "--chat-template NAME picks a named entry of the list");
    tdm_free(text);
    text = NULL;
    tdm_chat_template_free(t);
    t = NULL;
    ok(tdm_chat_template_open(dir, "chatml", &t, err, sizeof(err)) == TDM_OK &&
           tdm_chat_template_format(t) == TDM_CHAT_CHATML,
       "--chat-template chatml is the built-in");
    tdm_chat_template_free(t);
    t = NULL;
    char tpath[128];
    snprintf(tpath, sizeof(tpath), "%s/my.jinja", dir);
    f = fopen(tpath, "w");
    fputs("{%- for m in messages %}<{{ m.role }}>{{ m.content | upper }}{% endfor %}\n", f);
    fclose(f);
    ok(tdm_chat_template_open(dir, tpath, &t, err, sizeof(err)) == TDM_OK &&
           tdm_chat_render(t, msgs, NULL, 1, &text, NULL, err, sizeof(err)) == TDM_OK &&
           !strcmp(text, "<user>HI"),
       "--chat-template FILE renders that file (%s)", text ? text : err);
    tdm_free(text);
    text = NULL;
    tdm_chat_template_free(t);
    t = NULL;
    ok(tdm_chat_template_open(dir, "/no/such/file", &t, err, sizeof(err)) == TDM_ERR_NOTFOUND &&
           strstr(err, "--chat-template /no/such/file"),
       "--chat-template naming nothing: a clear error (%s)", err);
    f = fopen(tpath, "w");
    fputs("line one\n{% if %}", f);
    fclose(f);
    ok(tdm_chat_template_open(dir, tpath, &t, err, sizeof(err)) == TDM_ERR_FORMAT &&
           strstr(err, "line 2"),
       "a template that does not parse: the error names its line (%s)", err);
    remove(tpath);
    remove(path);
    ok(tdm_chat_template_open(dir, "llama3", &t, err, sizeof(err)) == TDM_OK,
       "an override loads without tokenizer_config.json");
    tdm_chat_template_free(t);
    rmdir(dir);
    json_decref(msgs);
    json_decref(tools);
}

static tdm_chat_template_t *tpl_of(tdm_chat_format_t f)
{
    tdm_chat_template_t *t = NULL;
    json_t *cfg = json_pack("{s:s,s:s}", "bos_token", f == TDM_CHAT_LLAMA2 ? "<s>" : "<|bos|>",
                            "eos_token", f == TDM_CHAT_LLAMA2 ? "</s>" : "<|end|>");
    if (template_new(cfg, formats[f].text, NULL, &t, NULL, 0) != TDM_OK)
        abort();
    json_decref(cfg);
    return t;
}

/* Render a JSON message list; return the text or "ERR:<status>:<err>". */
static char *render_s(tdm_chat_format_t f, const char *msgs, const char *tools, int agp)
{
    static char out[4096];
    char err[512] = "", *text = NULL;
    tdm_chat_template_t *t = tpl_of(f);
    json_t *m = json_loads(msgs, 0, NULL), *tl = tools ? json_loads(tools, 0, NULL) : NULL;
    tdm_status_t st = tdm_chat_render(t, m, tl, agp, &text, NULL, err, sizeof(err));
    if (st == TDM_OK)
        snprintf(out, sizeof(out), "%s", text);
    else
        snprintf(out, sizeof(out), "ERR:%s:%s", tdm_status_name(st), err);
    tdm_free(text);
    json_decref(m);
    json_decref(tl);
    tdm_chat_template_free(t);
    return out;
}

#define IS(got, want, ...)                                                                         \
    do {                                                                                           \
        const char *g_ = (got);                                                                    \
        if (!ok(strcmp(g_, (want)) == 0, __VA_ARGS__)) {                                           \
            diag("got:  %s", g_);                                                                  \
            diag("want: %s", (want));                                                              \
        }                                                                                          \
    } while (0)

static void test_inputs(void)
{
    /* OpenAI form: arguments as a JSON string, null content; Python str() of each value. */
    IS(render_s(TDM_CHAT_DEMO,
                "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":"
                "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1.0, "
                "\\\"b\\\": true, \\\"c\\\": null, \\\"d\\\": [1, \\\"x\\\"], \\\"e\\\": "
                "{\\\"k\\\": \\\"it's\\\"}, \\\"g\\\": 1e-7, \\\"h\\\": -3}\"}}]}]",
                NULL, 0),
       "<|bos|><|assistant|>\n<tool_calls><invoke name=\"f\"><parameter "
       "name=\"a\">1.0</parameter><parameter name=\"b\">True</parameter><parameter "
       "name=\"c\">None</parameter><parameter name=\"d\">[1, 'x']</parameter><parameter "
       "name=\"e\">{'k': \"it's\"}</parameter><parameter name=\"g\">1e-07</parameter><parameter "
       "name=\"h\">-3</parameter></invoke></tool_calls><|end|>\n",
       "demo: string arguments parsed, values printed as Python str()");
    IS(render_s(TDM_CHAT_DEMO,
                "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
                "\"text\",\"text\":\"b\"}]}]",
                "[]", 1),
       "<|bos|><|user|>\nab<|end|>\n<|assistant|>\n", "content parts joined; [] tools = none");
    IS(render_s(TDM_CHAT_DEMO, "[{\"role\":\"system\",\"content\":\"\"}]",
                "[{\"n\":\"é\\u0001\\n\\\"/\",\"x\":1.5}]", 0),
       "<|bos|><|system|>\nYou can call these tools:\n{\"n\": \"é\\u0001\\n\\\"/\", \"x\": "
       "1.5}\nTo call one, reply with <tool_calls><invoke name=\"NAME\"><parameter "
       "name=\"ARG\">VALUE</parameter></invoke></tool_calls><|end|>\n",
       "tojson: Python spacing, non-ASCII raw, control chars \\u00XX");
    IS(render_s(TDM_CHAT_DEMO, "[]", NULL, 1), "<|bos|><|assistant|>\n", "demo: no messages");
    IS(render_s(TDM_CHAT_CHATML,
                "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
                "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":"
                "\"tool\",\"content\":\"r\"}]",
                "[{\"type\":\"function\"}]", 1),
       "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nq<|im_end|>"
       "\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\nr<|im_end|>\n<|im_start|>"
       "assistant\n",
       "ChatML: tools and tool_calls ignored as the template does; tool role verbatim");
    IS(render_s(TDM_CHAT_LLAMA3, "[{\"role\":\"tool\",\"content\":\"\\u3000 x\\u00a0\\n\"}]", NULL,
                0),
       "<|bos|><|start_header_id|>tool<|end_header_id|>\n\nx<|eot_id|>",
       "Llama-3: | trim strips Unicode whitespace");
    IS(render_s(TDM_CHAT_LLAMA2,
                "[{\"role\":\"system\",\"content\":\"\"},{\"role\":\"user\",\"content\":\"a\"},{"
                "\"role\":\"tool\",\"content\":\"t\"}]",
                NULL, 1),
       "<s>[INST] <<SYS>>\n\n<</SYS>>\n\na [/INST]",
       "Llama-2: empty system still rendered; tool at an odd turn prints nothing");
    IS(render_s(TDM_CHAT_LLAMA2, "[{\"role\":\"assistant\",\"content\":\"a\"}]", NULL, 1),
       "ERR:TDM_ERR_INVAL:line 1: raise_exception: Conversation roles must alternate "
       "user/assistant/user/assistant/...",
       "Llama-2: alternation enforced like the template");
    IS(render_s(TDM_CHAT_LLAMA2, "[]", NULL, 1),
       "ERR:TDM_ERR_INVAL:line 1: 'role' of an undefined value", "Llama-2: empty list");

    /* Bad inputs: each a clear error naming the field. */
    IS(render_s(TDM_CHAT_DEMO, "{}", NULL, 1), "ERR:TDM_ERR_INVAL:messages: not an array",
       "messages not an array");
    IS(render_s(TDM_CHAT_DEMO, "[{\"role\":\"user\"},{\"role\":\"developer\",\"content\":\"x\"}]",
                NULL, 1),
       "ERR:TDM_ERR_INVAL:messages[1].role: \"developer\" is not one of system, user, "
       "assistant, tool",
       "unknown role");
    IS(render_s(TDM_CHAT_DEMO, "[{\"content\":\"x\"}]", NULL, 1),
       "ERR:TDM_ERR_INVAL:messages[0]: not an object with a string \"role\"", "no role");
    IS(render_s(TDM_CHAT_DEMO, "[{\"role\":\"user\",\"content\":5}]", NULL, 1),
       "ERR:TDM_ERR_INVAL:messages[0].content: not a string, null or a list of text parts",
       "numeric content");
    IS(render_s(TDM_CHAT_DEMO,
                "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]",
                NULL, 1),
       "ERR:TDM_ERR_INVAL:messages[0].content[0]: only {\"type\": \"text\", \"text\": ...} "
       "parts are supported",
       "image part");
    IS(render_s(TDM_CHAT_DEMO, "[{\"role\":\"assistant\",\"tool_calls\":{}}]", NULL, 1),
       "ERR:TDM_ERR_INVAL:messages[0].tool_calls: not an array", "tool_calls not an array");
    IS(render_s(TDM_CHAT_DEMO,
                "[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
                "\"arguments\":\"[1]\"}}]}]",
                NULL, 1),
       "ERR:TDM_ERR_INVAL:messages[0].tool_calls[0].function.arguments: not a JSON object",
       "arguments not an object");
    IS(render_s(TDM_CHAT_DEMO,
                "[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":{}}}]}]",
                NULL, 1),
       "ERR:TDM_ERR_INVAL:messages[0].tool_calls[0].function.name: missing or not a string",
       "call without a name");
    IS(render_s(TDM_CHAT_DEMO, "[]", "{}", 1), "ERR:TDM_ERR_INVAL:tools: not an array",
       "tools not an array");

    /* Output cap: a client cannot make us build more than TDM_CHAT_MAX_OUTPUT_BYTES. */
    size_t big = TDM_CHAT_MAX_OUTPUT_BYTES / 2 + 16;
    char *s = tdm_malloc(big + 1);
    memset(s, 'x', big);
    s[big] = '\0';
    json_t *m = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "user", "content", s, "role",
                          "assistant", "content", s);
    tdm_chat_template_t *t = tpl_of(TDM_CHAT_CHATML);
    char err[256] = "", *text = NULL;
    ok(tdm_chat_render(t, m, NULL, 1, &text, NULL, err, sizeof(err)) == TDM_ERR_RANGE && !text &&
           strstr(err, "exceeds"),
       "output cap (%s)", err);
    tdm_chat_template_free(t);
    json_decref(m);
    tdm_free(s);
}

static void test_python(void)
{
    static const struct {
        double v;
        const char *want;
    } fl[] = {{100.0, "100.0"},
              {0.1, "0.1"},
              {1.5, "1.5"},
              {1e-5, "1e-05"},
              {0.0001, "0.0001"},
              {1e16, "1e+16"},
              {1e15, "1000000000000000.0"},
              {-2.5e-7, "-2.5e-07"},
              {123456789.123, "123456789.123"},
              {1.0 / 3, "0.3333333333333333"},
              {-0.0, "-0.0"},
              {5e-324, "5e-324"},
              {1.7976931348623157e308, "1.7976931348623157e+308"},
              {12345678901234567.0, "1.2345678901234568e+16"}};
    char buf[32];
    for (size_t i = 0; i < sizeof(fl) / sizeof(fl[0]); i++) {
        tdm_py_float_repr(fl[i].v, buf);
        ok(strcmp(buf, fl[i].want) == 0, "repr(%.17g) = %s (got %s)", fl[i].v, fl[i].want, buf);
    }
    size_t off, len;
    tdm_py_strip("\x1c\t a b \xe2\x80\x83", 10, &off, &len);
    ok(off == 3 && len == 3, "strip: C0 separators and U+2003 are whitespace");
    tdm_py_strip("\xc2\xad", 2, &off, &len);
    ok(off == 0 && len == 2, "strip: U+00AD is not whitespace");
    tdm_py_strip("   ", 3, &off, &len);
    ok(len == 0, "strip: all whitespace");
}

int main(void)
{
    const char *s = getenv("TDM_SRCDIR");
    snprintf(srcdir, sizeof(srcdir), "%s", s ? s : ".");
    test_goldens();
    test_big_int();
    test_matching();
    test_override();
    test_inputs();
    test_python();
    return done_testing();
}
