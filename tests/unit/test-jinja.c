/*
 * test-jinja.c — the Jinja engine against transformers.
 *
 * Every case of every tests/fixtures/chat_templates/NAME.golden.json (made by transformers'
 * apply_chat_template) renders byte for byte, or fails where transformers raised. Then the
 * language corners those goldens may not reach (scoping, loop.*, slicing, tests, filters,
 * methods, whitespace control, macros, call blocks), each against the output jinja2 gives, and
 * the sandbox: output, work and depth limits, and errors naming the template line.
 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tdm/jinja.h>
#include <tdm/mem.h>

#include "tap.h"

static char srcdir[1024];

static char *slurp(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = tdm_malloc((size_t)n + 1);
    size_t got = fread(p, 1, (size_t)n, f);
    fclose(f);
    p[got] = '\0';
    *ret_len = got;
    return p;
}

static void check_golden(const char *name)
{
    char path[2048], err[512];
    json_error_t jerr;
    size_t tlen;
    snprintf(path, sizeof(path), "%s/tests/fixtures/chat_templates/%s", srcdir, name);
    json_t *g = json_load_file(path, 0, &jerr);
    if (!g) {
        ok(0, "%s: %s", name, jerr.text);
        return;
    }
    snprintf(path, sizeof(path), "%s/tests/fixtures/chat_templates/%s", srcdir,
             json_string_value(json_object_get(g, "template")));
    char *src = slurp(path, &tlen);
    tdm_jinja_tpl_t *t = NULL;
    tdm_status_t st = src ? tdm_jinja_parse(src, tlen, &t, err, sizeof(err)) : TDM_ERR_NOTFOUND;
    ok(st == TDM_OK, "%s parses (%s)", name, st == TDM_OK ? "ok" : err);
    if (st != TDM_OK) {
        tdm_free(src);
        json_decref(g);
        return;
    }
    size_t i, n_ok = 0, n = 0;
    json_t *c;
    json_array_foreach(json_object_get(g, "cases"), i, c)
    {
        json_t *vars = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(g, "special_tokens"), k, v) if (!json_is_null(v))
            json_object_set(vars, k, v);
        json_object_update(vars, json_object_get(g, "extra"));
        json_object_set(vars, "messages", json_object_get(c, "messages"));
        json_object_set(vars, "tools", json_object_get(c, "tools"));
        json_object_set(vars, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
        char *out = NULL;
        size_t len = 0;
        /* the generator's pinned clock (strftime_now: SmolLM3 prints today's date) */
        tdm_jinja_limits_t lim = {.now_unix = json_integer_value(json_object_get(g, "now_unix"))};
        st = tdm_jinja_render(t, vars, &lim, &out, &len, err, sizeof(err));
        const json_t *want = json_object_get(c, "text");
        int good = want ? st == TDM_OK && len == json_string_length(want) &&
                              !memcmp(out, json_string_value(want), len)
                        : st != TDM_OK;
        n++;
        n_ok += good;
        if (!good) {
            diag("%s case %s agp=%d: %s", name, json_string_value(json_object_get(c, "name")),
                 json_is_true(json_object_get(c, "add_generation_prompt")),
                 st == TDM_OK ? "output differs" : err);
            if (st == TDM_OK && want) {
                size_t d = 0;
                while (d < len && d < json_string_length(want) &&
                       out[d] == json_string_value(want)[d])
                    d++;
                diag("  first difference at byte %zu: got [%.60s] want [%.60s]", d, out + d,
                     json_string_value(want) + d);
            } else if (st == TDM_OK) {
                diag("  transformers raised: %s", json_string_value(json_object_get(c, "error")));
            }
        }
        tdm_free(out);
        json_decref(vars);
    }
    ok(n > 0 && n_ok == n,
       "%s: %zu/%zu cases byte-identical to transformers (or failing where it "
       "failed)",
       name, n_ok, n);
    tdm_jinja_free(t);
    tdm_free(src);
    json_decref(g);
}

/* Render `src` with `vars_json`; compare with `want` (NULL: must fail, err containing `errsub`). */
static void r(const char *src, const char *vars_json, const char *want, const char *errsub)
{
    char err[512] = "";
    tdm_jinja_tpl_t *t = NULL;
    char *out = NULL;
    size_t len = 0;
    json_t *vars = json_loads(vars_json ? vars_json : "{}", 0, NULL);
    tdm_status_t st = tdm_jinja_parse(src, strlen(src), &t, err, sizeof(err));
    if (st == TDM_OK)
        st = tdm_jinja_render(t, vars, NULL, &out, &len, err, sizeof(err));
    if (want)
        ok(st == TDM_OK && strlen(want) == len && !memcmp(out, want, len), "%s → \"%s\" (%s%s)",
           src, want, st == TDM_OK ? "got: " : "error: ", st == TDM_OK ? out : err);
    else
        ok(st != TDM_OK && strstr(err, errsub), "%s fails with '%s' (got: %s)", src, errsub,
           st == TDM_OK ? out : err);
    tdm_free(out);
    tdm_jinja_free(t);
    json_decref(vars);
}

static void language(void)
{
    /* expected outputs are what jinja2 3.1 renders with transformers' settings */
    r("{% set c = 0 %}{% for i in [1,2] %}{% set c = c + 1 %}{{c}}{% endfor %}{{c}}", NULL, "110",
      NULL);
    r("{% set ns = namespace(c=0) %}{% for i in [1,2] %}{% set ns.c = ns.c + i %}{% endfor %}"
      "{{ ns.c }}",
      NULL, "3", NULL);
    r("{{ none }}|{{ [1,'a',none,true,1.0] }}|{{ {'a':1} }}|{{ 1/2 }}|{{ 4/2 }}|{{ 7//2 }}|"
      "{{ -7//2 }}|{{ -7 % 3 }}|{{ 2**10 }}",
      NULL, "None|[1, 'a', None, True, 1.0]|{'a': 1}|0.5|2.0|3|-4|2|1024", NULL);
    r("{{ 'abc'[::-1] }}{{ [1,2,3][1:] }}{{ 'x' * 3 }}{{ 3 ~ none }}{{ 'héllo'[1:3] }}", NULL,
      "cba[2, 3]xxx3Noneél", NULL);
    r("{% for a in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
      "{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
      NULL, "103TrueFalse32|212FalseFalse313|321FalseTrue32|", NULL);
    r("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}"
      "{% for x in [] %}y{% else %}empty{% endfor %}",
      NULL, "2242empty", NULL);
    r("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}"
      "{% break %}{% endif %}{{ x }}{% endfor %}",
      NULL, "13", NULL);
    r("{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is "
      "iterable }}{{ 1 is number }}{{ true is number }}{{ 'x' is not string }}{{ 3 is odd }}",
      NULL, "FalseTrueTrueTrueTrueTrueTrueFalseTrue", NULL);
    r("{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ [1] == [1] }}{{ 1 + true }}{{ 'b' in 'abc' }}{{ 2 not in "
      "[1] }}{{ 'k' in {'k': 1} }}",
      NULL, "TrueTrueTrue2TrueTrueTrue", NULL);
    r("{{ x | default('d') }}{{ '' | default('e', true) }}{{ none | default('f') }}", NULL,
      "deNone", NULL);
    r("  {% if true %}\n  x\n  {% endif %}\n  y\n", NULL, "  x\n  y", NULL);
    r("a  {%- if true -%}  b  {%- endif %}\n\nc{# note #}\nd {{- ' e' }}", NULL, "ab\ncd e", NULL);
    r("{{ 'a' if false }}.{{ 'b' if true else 'c' }}{{ 1 if 0 else 2 if 1 else 3 }}", NULL, ".b2",
      NULL);
    r("{{ {'b': 1, 'a': [1, 2.5, 'é\"\\n', none]} | tojson }}", NULL,
      "{\"b\": 1, \"a\": [1, 2.5, \"é\\\"\\n\", null]}", NULL);
    r("{{ {'b': {'c': []}, 'a': {}} | tojson(indent=2) }}", NULL,
      "{\n  \"b\": {\n    \"c\": []\n  },\n  \"a\": {}\n}", NULL);
    r("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", NULL, "{\"a\": 2, \"b\": 1}", NULL);
    r("{{ ' x '|trim }}|{{ 'aXb'|upper }}{{ 'AbC'|lower }}|{{ 'hello world'|title }}|"
      "{{ 'hELLO'|capitalize }}|{{ [1,2]|join(', ') }}|{{ [3,4]|first }}{{ [3,4]|last }}|"
      "{{ 'ab'|list }}|{{ {'a':1}|items|list }}|{{ 12|string }}|{{ '42'|int + 1 }}|"
      "{{ 'aXa'|replace('a','b') }}|{{ [1,2,3]|length }}{{ 'héé'|length }}",
      NULL, "x|AXBabc|Hello World|Hello|1, 2|34|['a', 'b']|[['a', 1]]|12|43|bXb|33", NULL);
    r("{{ m|selectattr('role','equalto','user')|list|length }}{{ m|rejectattr('role','equalto',"
      "'user')|map(attribute='role')|join }}{{ ['a','code','b']|reject('equalto','code')|join }}",
      "{\"m\":[{\"role\":\"user\"},{\"role\":\"tool\"},{\"role\":\"user\"}]}", "2toolab", NULL);
    r("{{ 'a,b,,c'.split(',') }}{{ '  a b  '.split() }}{{ 'a b c'.split(' ', 1) }}"
      "{{ 'xxhixx'.strip('x') }}{{ '\\nhi'.lstrip('\\n') }}{{ 'hi  '.rstrip() }}"
      "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}{{ 'aa'.replace('a','b',1) }}"
      "{{ '{} and {}'.format(1, 'x') }}",
      NULL, "['a', 'b', '', 'c']['a', 'b']['a', 'b c']hihihiTrueTrueba1 and x", NULL);
    r("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|list }}{{ d.get('z', "
      "7) }}{{ d.get('a') }}{{ d.values()|list }}",
      "{\"d\":{\"b\":1,\"a\":2}}", "b=1;a=2;['b', 'a']72[1, 2]", NULL);
    r("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
      "{{ greet('Bob') }} {{ greet('Al', punct='?') }}",
      NULL, "Hi Bob! Hi Al?", NULL);
    r("{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}", NULL,
      "[inner]", NULL);
    r("{% set x %}a{{ 1 }}b{% endset %}{{ x }}|{% filter upper %}up{{ 'x' }}{% endfilter %}", NULL,
      "a1b|UPX", NULL);
    r("{% set a, b = 1, 2 %}{{ a }}{{ b }}{{ (1, 2) }}{{ range(3)|list }}{{ range(1, 7, "
      "2)|list }}",
      NULL, "12[1, 2][0, 1, 2][1, 3, 5]", NULL);
    r("{{ messages[0]['role'] }}{{ messages[0].content }}{{ messages[-1].role }}{{ messages[5] "
      "is defined }}{{ messages[0].nope is defined }}",
      "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"x\"}]}",
      "userhixFalseFalse", NULL);
    r("{{ \"a\" \"b\" }}{{ '\\u00e9\\x41\\t' }}{{ 1e3 }}{{ 10**20 }}{{ 0.1 + 0.2 }}", NULL,
      "abéA\t1000.01e+200.30000000000000004", NULL);
    r("{% generation %}gen{% endgeneration %}", NULL, "gen", NULL);
    r("{{ strftime_now('%Y') | length }}", NULL, "4", NULL);
    {
        /* the pinned clock: 2026-12-04 12:00:00 UTC, whatever today is */
        tdm_jinja_tpl_t *t = NULL;
        char err[256], *out = NULL;
        size_t len = 0;
        const char *src = "{{ strftime_now('%d %B %Y %H:%M') }}";
        tdm_jinja_limits_t lim = {.now_unix = 1796385600};
        int good = tdm_jinja_parse(src, strlen(src), &t, err, sizeof(err)) == TDM_OK &&
                   tdm_jinja_render(t, NULL, &lim, &out, &len, err, sizeof(err)) == TDM_OK &&
                   !strcmp(out, "04 December 2026 12:00");
        ok(good, "strftime_now formats the pinned clock: %s", out ? out : err);
        tdm_free(out);
        tdm_jinja_free(t);
    }
    /* errors name the line */
    r("line1\n{{ raise_exception('bad role') }}", NULL, NULL, "line 2: raise_exception: bad role");
    r("{% if %}", NULL, NULL, "line 1");
    r("\n\n{% for x in y %}", NULL, NULL, "line 3");
    r("{{ 'a' + 1 }}", NULL, NULL, "unsupported operand");
    r("{{ {'a':1} + 'x' }}", NULL, NULL, "unsupported operand");
    r("{{ x.y }}", NULL, NULL, "undefined");
    r("{% for m in none %}{% endfor %}", NULL, NULL, "not iterable");
    r("{{ [].append(1) }}", NULL, NULL, "immutable");
    r("{{ 1 | nosuchfilter }}", NULL, NULL, "no filter named");
    r("{{ 'x' is nosuchtest }}", NULL, NULL, "no test named");
    r("{% include 'f' %}", NULL, NULL, "unknown statement");
    r("{{ x.__class__ }}", "{\"x\":{}}", "", NULL);
    r("{{ 'unterminated }}", NULL, NULL, "unterminated");
}

static void sandbox(void)
{
    char err[256] = "";
    tdm_jinja_tpl_t *t = NULL;
    char *out = NULL;
    tdm_jinja_limits_t lim = {.max_output = 1000, .max_iterations = 5000, .max_depth = 8};
    const char *big = "{% for i in range(100) %}{{ 'xxxxxxxxxxxxxxxxxxxx' }}{% endfor %}";
    ok(tdm_jinja_parse(big, strlen(big), &t, err, sizeof(err)) == TDM_OK &&
           tdm_jinja_render(t, NULL, &lim, &out, NULL, err, sizeof(err)) == TDM_ERR_RANGE &&
           strstr(err, "exceeds 1000 bytes"),
       "output beyond max_output is refused (%s)", err);
    tdm_jinja_free(t);
    const char *loops =
        "{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}";
    ok(tdm_jinja_parse(loops, strlen(loops), &t, err, sizeof(err)) == TDM_OK &&
           tdm_jinja_render(t, NULL, &lim, &out, NULL, err, sizeof(err)) == TDM_ERR_RANGE &&
           strstr(err, "work limit"),
       "10k iterations past a 5000-step limit are refused (%s)", err);
    tdm_jinja_free(t);
    const char *rec = "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}";
    ok(tdm_jinja_parse(rec, strlen(rec), &t, err, sizeof(err)) == TDM_OK &&
           tdm_jinja_render(t, NULL, &lim, &out, NULL, err, sizeof(err)) == TDM_ERR_RANGE &&
           strstr(err, "nested deeper than 8"),
       "unbounded macro recursion stops at max_depth (%s)", err);
    tdm_jinja_free(t);
    const char *mul = "{{ 'x' * 100000000000 }}";
    ok(tdm_jinja_parse(mul, strlen(mul), &t, err, sizeof(err)) == TDM_OK &&
           tdm_jinja_render(t, NULL, &lim, &out, NULL, err, sizeof(err)) == TDM_ERR_RANGE,
       "string repetition beyond the output limit is refused (%s)", err);
    tdm_jinja_free(t);
    char deep[2100];
    memset(deep, '(', 1000);
    strcpy(deep + 1000, "1");
    memset(deep + 1001, ')', 1000);
    deep[2001] = '\0';
    char *tpl = tdm_malloc(2200);
    snprintf(tpl, 2200, "{{%s}}", deep);
    ok(tdm_jinja_parse(tpl, strlen(tpl), &t, err, sizeof(err)) == TDM_ERR_FORMAT &&
           strstr(err, "nested too deeply"),
       "1000 nested parentheses are a parse error, not a stack overflow (%s)", err);
    tdm_free(tpl);
}

int main(void)
{
    const char *s = getenv("TDM_SRCDIR");
    snprintf(srcdir, sizeof(srcdir), "%s", s ? s : ".");
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/tests/fixtures/chat_templates", srcdir);
    DIR *d = opendir(dir);
    if (!d)
        skip_all("tests/fixtures/chat_templates not found (set TDM_SRCDIR)");
    struct dirent *e;
    char *names[64];
    int n = 0;
    while ((e = readdir(d)) && n < 64)
        if (strstr(e->d_name, ".golden.json"))
            names[n++] = tdm_strdup(e->d_name);
    closedir(d);
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (strcmp(names[i], names[k]) > 0) {
                char *x = names[i];
                names[i] = names[k];
                names[k] = x;
            }
    ok(n >= 12, "%d chat template goldens found", n);
    for (int i = 0; i < n; i++) {
        check_golden(names[i]);
        tdm_free(names[i]);
    }
    language();
    sandbox();
    return done_testing();
}
