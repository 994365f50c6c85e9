/*
 * tdm/jinja.h — a sandboxed Jinja template engine for chat templates.
 *
 * Renders the Jinja subset that published chat templates use, byte for byte as transformers'
 * apply_chat_template does: the environment is jinja2's ImmutableSandboxedEnvironment with
 * trim_blocks=True, lstrip_blocks=True and the loopcontrols extension, `tojson` is Python's
 * json.dumps(ensure_ascii=False, indent=…, sort_keys=False), `raise_exception(msg)` fails the
 * render with msg, `strftime_now(fmt)` formats the current UTC time (or the render's pinned
 * clock, tdm_jinja_limits_t.now_unix: goldens made on another day), and `{% generation %}`
 * prints its body. Values print as Python's str() prints them (True, None, 1.0, {'a': 1}).
 *
 * Supported: {% if/elif/else %}, {% for x[, y] in … [if …] %} with {% else %}, loop.index,
 * index0, revindex, revindex0, first, last, length, previtem, nextitem, {% break/continue %},
 * {% set %} (names, tuples, namespace attributes, block set), {% macro %} with defaults and
 * {% call %}/caller(), {% filter %}, comments and whitespace control; literals, lists, dicts,
 * tuples, attribute/item access, slicing, arithmetic, ~, comparisons, in/not in, and/or/not,
 * a if c else b, and these built-ins:
 *   tests    defined undefined none string mapping iterable sequence number integer float boolean
 *            true false callable equalto/eq/sameas ne lt le gt ge in odd even divisibleby lower
 *            upper
 *   filters  default/d length/count trim tojson(indent, sort_keys) join(d, attribute) first last
 *            list items reverse string int float abs upper lower capitalize title replace indent
 *            safe select reject selectattr rejectattr map(attribute= | filter name)
 *   methods  str: startswith endswith split strip lstrip rstrip replace upper lower title
 *            capitalize join find count format('{}' fields); dict: items keys values get
 *   globals  raise_exception strftime_now namespace range dict (and caller() in a call block)
 * Case mapping covers ASCII only. Anything else is a parse or render error naming the template
 * line.
 *
 * Sandbox: templates see only the variables given (a JSON object) and the built-ins above; no
 * file, import or attribute access beyond JSON data. Output size, loop iterations and recursion
 * depth are bounded by tdm_jinja_limits_t; exceeding one is TDM_ERR_RANGE.
 *
 * Threading: a parsed template is immutable; renders may run concurrently.
 */
#ifndef TDM_JINJA_H
#define TDM_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <tdm/status.h>

#define TDM_JINJA_MAX_SOURCE ((size_t)1 << 20)

typedef struct tdm_jinja_limits {
    size_t max_output;       /* bytes; 0 → 16 MiB */
    uint64_t max_iterations; /* loop iterations and builtin work units in one render; 0 → 1M */
    uint32_t max_depth;      /* macro/caller nesting; 0 → 64 */
    int64_t now_unix; /* the time strftime_now formats (UTC seconds); 0 → the current time */
} tdm_jinja_limits_t;

typedef struct tdm_jinja_tpl tdm_jinja_tpl_t;

/* Parse a template. Errors: TDM_ERR_FORMAT with "line N: …" in err. */
tdm_status_t tdm_jinja_parse(const char *src, size_t len, tdm_jinja_tpl_t **ret, char *err,
                             size_t errlen);
void tdm_jinja_free(tdm_jinja_tpl_t *t);

/* Render with `vars` (a JSON object; borrowed). `lim` may be NULL (defaults). *ret_text is
 * tdm_malloc'd and NUL-terminated. A raise_exception() is TDM_ERR_INVAL with its message; other
 * failures name the line ("line 12: 'dict' + 'str' is not supported"). */
tdm_status_t tdm_jinja_render(const tdm_jinja_tpl_t *t, const json_t *vars,
                              const tdm_jinja_limits_t *lim, char **ret_text, size_t *ret_len,
                              char *err, size_t errlen);

#endif
