/*
 * fuzz-jinja.c — libFuzzer target for the Jinja engine (tdm/jinja.h) and the chat template
 * layer over it.
 *
 * Input: a template text, optionally followed by a NUL and a JSON object of render variables
 * (default: a conversation with a system prompt, tools, an assistant tool call and a tool
 * result). The template is parsed and, if it parses, rendered with small limits (64 KiB of
 * output, 20000 work steps, depth 16) so every input finishes in bounded time; with
 * add_generation_prompt on and off. Never crashes, never leaks; errors are expected outcomes.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/jinja.h>
#include <tdm/mem.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char DEFAULT_VARS[] =
    "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"messages\":["
    "{\"role\":\"system\",\"content\":\"Be terse.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Paris? caf\\u00e9\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call00001\","
    "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":"
    "\"Paris\",\"n\":3,\"x\":[1.5,null,true]}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call00001\",\"content\":\"21\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nok\\n</think>\\n\\nIt is 21.\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"description\":\"d\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
    "{\"type\":\"string\"}},\"required\":[\"city\"]}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    size_t tlen = 0;
    while (tlen < size && data[tlen])
        tlen++;
    json_t *vars = NULL;
    if (tlen + 1 < size)
        vars = json_loadb(src + tlen + 1, size - tlen - 1, 0, NULL);
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_loads(DEFAULT_VARS, 0, NULL);
    }
    char err[256];
    tdm_jinja_tpl_t *t = NULL;
    if (tdm_jinja_parse(src, tlen, &t, err, sizeof(err)) == TDM_OK) {
        tdm_jinja_limits_t lim = {.max_output = 64 << 10, .max_iterations = 20000, .max_depth = 16};
        for (int agp = 0; agp < 2; agp++) {
            char *out = NULL;
            size_t len = 0;
            json_object_set_new(vars, "add_generation_prompt", json_boolean(agp));
            if (tdm_jinja_render(t, vars, &lim, &out, &len, err, sizeof(err)) == TDM_OK &&
                (strlen(out) > len || len > lim.max_output))
                abort(); /* the length must be the buffer's and within the limit */
            tdm_free(out);
        }
        tdm_jinja_free(t);
    }
    json_decref(vars);
    return 0;
}
