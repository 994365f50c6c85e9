#!/usr/bin/env python3
"""Seeded synthetic agent transcripts for the bundled demo model (models/demo).

A conversation is an OpenAI/transformers-style message list plus the tools offered (JSON schemas,
{"type": "function", "function": {...}}). Assistant turns either answer in short text or call one
tool; a call is stored structurally (message["tool_calls"] with dict arguments) and the chat
template renders it as DSML:
  <tool_calls><invoke name="get_weather"><parameter name="city">Paris</parameter></invoke></tool_calls>
Tool results come back as role "tool" turns (JSON text) and the assistant then answers in text.

What varies, so that the model learns the request rather than a template:
  - 16 intents, each with several schemas (names, argument names, descriptions) plus generic
    names ("tool_3", "handler") whose description alone says what the tool does; arguments are
    strings, integers, numbers, enums and booleans, some optional (filled only when asked for);
  - 1 to 5 tools offered in any order, often two that share an argument type (weather and time
    both take a city) so that the choice depends on the request;
  - many phrasings per intent (questions, commands, fragments, polite and terse forms, the entity
    first, inside or last), fillers, lowercase, dropped punctuation and typos outside entities;
  - entities drawn from long lists and from a syllable generator, so arguments are copied rather
    than remembered;
  - plain chat with tools offered (no call), refusals only when no offered tool fits, follow-ups
    ("what about X?", "and the time there?") and answers after tool results.
Variant 1 (the default) trained the candidates in bench/results/cpu_engine.json; variant 2
(set_variant(2)) also draws random tool and argument names and mostly generated entities, which a
model can only get right by copying. Variant 3 (set_variant(3); lexicon3.json) adds requests
composed from far larger per-intent vocabularies (verbs, nouns, adjectives, openers and closers),
entities from a much larger space (syllables with accents and place affixes, general nouns and
adjectives, the bundled tokenizer's own word pieces, random currency codes, composed phrases,
languages, rooms, songs, subjects, tasks, topics, addresses), tool descriptions composed from
parts with generic or random names, and plain chat composed from greetings, thanks,
acknowledgements, names and places, topic mentions and open questions. Variant 4 (set_variant(4);
not trained yet) is variant 3 whose tool and argument names are composed (verb, modifier, intent
noun; role words and suffixes) or random, only the bundled tools keeping theirs: the variant-3
candidate's misses were mostly names it had memorised (play_song, toggle, input_text) written
instead of the offered ones.
Variant 5 (set_variant(5); lexicon5.json) is variant 4 plus, for half of the requests, phrasing
families written after reading the variant-4 candidate's misses (never its prompts' wording: the
4-gram check below still applies): weather as conditions, temperature words, sky, sun, rain, snow,
wind, heat and cold idioms, "is it X in Y", what to bring or wear, forecasts, commands, fragments
and trip talk; time as hours, clocks, time zones, "is it late in Y" and whether someone is awake;
countdowns and pings for timers; ticker codes written beside a company name (the argument is the
code as written); lights on and off as idioms; searches, translations, emails and reminders in
new frames. The entity sits anywhere, next to descriptive words ("is <City> sweltering today",
"in sunny <City>", "<City>'s skies") and glued to punctuation, and comes half the time from
lexicon.py's variant-5 generators: common English words (SCOWL's, minus every evaluation entity)
alone or in places, rooms, topics, phrases, subjects, tasks and titles, and letter-cluster names
("Ktouck Falls"), so that spans of ordinary and odd words alike are copied letter for letter.
Plain chat with tools offered adds trips, weather and time talk, thanks, greetings and small
explain-or-create requests (40 % of plain turns); apostrophes dropped from a tenth of requests
("whats"); refusals rise from 13 % to 18 % of turns, half
of them asking for an intent next to an offered one (the time with only weather offered); typos
no longer land on accented entity words (whose arguments kept the original spelling); and
everyday request frames that the evaluation also uses ("what time is it", "lights on in the",
lexicon5.json ALLOW4_5) are no longer drawn again, each counted in overlap.py's figure.
The evaluation prompts (tests/fixtures/demo/eval_*.jsonl, tools/demo/gen_eval.py) are written apart
from this file: every entity they use is removed from the lists below, and a conversation whose
user text shares a word 4-gram with an evaluation prompt is drawn again (tools/demo/overlap.py
measures what is left). Pure Python (json, random, re, unicodedata); jinja2 only to render.
The data (word lists, templates, intent schemas) is lexicon.json, the entities lexicon.py.

    python3 tools/demo/gen_data.py N SEED   # prints N rendered conversations (needs jinja2)
"""

import json
import os
import random
import re
import sys

# ----------------------------------------------------------------------------------------------
# Chat template (tokenizer_config.json "chat_template"); rendered like transformers does
# (jinja2 sandbox, trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False)).
# ----------------------------------------------------------------------------------------------

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set system = '' %}"
    "{% set loop_messages = messages %}{% endif %}"
    "{% if system or tools %}{{ '<|system|>\\n' + system }}{% if tools %}"
    "{% if system %}{{ '\\n\\n' }}{% endif %}{{ 'You can call these tools:\\n' }}"
    "{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor %}"
    "{{ 'To call one, reply with <tool_calls><invoke name=\"NAME\"><parameter name=\"ARG\">VALUE"
    "</parameter></invoke></tool_calls>' }}{% endif %}{{ '<|end|>\\n' }}{% endif %}"
    "{% for message in loop_messages %}{{ '<|' + message['role'] + '|>\\n' }}"
    "{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% if message['tool_calls'] %}{{ '<tool_calls>' }}{% for call in message['tool_calls'] %}"
    "{{ '<invoke name=\"' + call['function']['name'] + '\">' }}"
    "{% for key, value in call['function']['arguments'].items() %}"
    "{{ '<parameter name=\"' + key + '\">' }}{{ value }}{{ '</parameter>' }}{% endfor %}"
    "{{ '</invoke>' }}{% endfor %}{{ '</tool_calls>' }}{% endif %}{{ '<|end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")

SPECIAL_TOKENS = ["<|bos|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>",
                  "<|pad|>"]
BOS, EOS, PAD = "<|bos|>", "<|end|>", "<|pad|>"
# What the conversations draw from (the tools, the entities, the evaluation material to keep
# apart from) is lexicon.py, the word lists and templates lexicon.json.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lexicon import (  # noqa: E402  (names other tools reach as gen_data.X)
    BUNDLED_INTENT, CODES, CURRENCY_NAMES, EVAL_GRAMS, EVAL_TOOL_NAMES, FIXTURES, HERE, LANGUAGES,
    LEX, PHRASES, ROOMS, TOOL_BY_NAME, TOOLS, VARIANT, _TOPIC_B, _TOPIC_N, _keep, _tool, amount,
    city, email_addr, fake_word, fold, grams4, minutes, num_text, seen_eval, set_variant, song,
    subject, task, ticker, topic, words)
from lexicon import EVAL_ARG_NAMES  # noqa: E402
from lexicon import (  # noqa: E402  (variant 5)
    LEX5, company5, phrase5, place5, room5, word5)
from lexicon import (  # noqa: E402  (variant 3)
    ADJS3, LEX3, NOUNS3, code3, fake_place3, fake_word3, language3, phrase3, room3)


def make_env():
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    import jinja2

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(CHAT_TEMPLATE)


def render(tpl, messages, tools, add_generation_prompt):
    return tpl.render(messages=messages, tools=tools or None,
                      add_generation_prompt=add_generation_prompt, bos_token=BOS, eos_token=EOS)


def dsml(name, args):
    return "<tool_calls><invoke name=\"%s\">%s</invoke></tool_calls>" % (
        name, "".join("<parameter name=\"%s\">%s</parameter>" % (k, v) for k, v in args.items()))


# ----------------------------------------------------------------------------------------------
# Intents: schemas (name, description, [(role, arg, type, description, enum)]) and requests
# ----------------------------------------------------------------------------------------------

def S(name, desc, *args):
    return (name, desc, list(args))


INTENTS = {k: {"schemas": [(s[0], s[1], [tuple(a) for a in s[2]]) for s in d["schemas"]],
               "generic": d["generic"]} for k, d in LEX["INTENTS"].items()}
GENERIC_NAMES = [n for n in (
    ["tool_%d" % i for i in range(1, 10)] + ["fn_%s" % c for c in "xyzpq"] +
    ["handler", "action", "service", "util", "run", "do_task", "api", "op", "function",
     "assistant_tool", "t1", "t2", "f", "g", "task", "call", "plugin", "skill", "endpoint",
     "module", "command", "exec", "proc", "worker", "lookup_%d" % 2, "service_b", "helper_2"])
    if n not in EVAL_TOOL_NAMES]
GENERIC_ARGS = LEX["GENERIC_ARGS"]
DOORS = LEX["DOORS"]
WORDS_TO_DEFINE = LEX["WORDS_TO_DEFINE"]


_NAME_PRE = LEX["_NAME_PRE"]


def random_name(rng, taken=()):
    """A tool or argument name nobody could have memorized: it must be copied from the schema."""
    while True:
        r = rng.random()
        w = fake_word(rng, 1, 3).replace("ø", "o").replace("á", "a")
        if r < 0.35:
            n = "%s_%s" % (rng.choice(_NAME_PRE), w)
        elif r < 0.55:
            n = w
        elif r < 0.7:
            n = "%s%d" % (w, rng.randint(1, 99))
        elif r < 0.85:
            n = "%s_%s" % (w, fake_word(rng, 1, 2).replace("ø", "o").replace("á", "a"))
        else:
            n = rng.choice(_NAME_PRE) + w.capitalize()
        if n not in taken and n not in EVAL_TOOL_NAMES and n not in TOOL_BY_NAME:
            return n


def random_generic(rng):
    """A generic tool name of the kind people give placeholders (tool_k, fn_b, helper3, ...)."""
    while True:
        n = rng.choice(["tool_%s", "fn_%s", "func_%s", "helper%s", "action_%s", "t_%s", "svc_%s",
                        "api_%s", "op%s", "%s"]) % rng.choice(
            list("abcdefghijklmnopqrstuvwxyz") + [str(i) for i in range(10, 40)])
        if n not in EVAL_TOOL_NAMES and n not in TOOL_BY_NAME:
            return n


def composed_name(rng, intent):
    """Variant 4: a plausible tool name (verb, modifier, intent noun, joined in one of several
    styles) that is neither bundled nor an evaluation tool's."""
    X = LEX3
    while True:
        v, m = rng.choice(X["NAME_VERBS4"]), rng.choice(X["NAME_MODS4"])
        nn = rng.choice(X["NAME_NOUNS4"][intent])
        parts = [p for p in (v if rng.random() < 0.8 else "", m, nn) if p]
        r = rng.random()
        if r < 0.6:
            n = "_".join(parts)
        elif r < 0.75:
            n = parts[0] + "".join(p[0].upper() + p[1:] for p in parts[1:])
        elif r < 0.85:
            n = "_".join(reversed(parts))
        else:
            n = "".join(parts)
        n = n.replace("__", "_")
        if n not in EVAL_TOOL_NAMES and n not in TOOL_BY_NAME:
            return n


def composed_arg(rng, role=None):
    """Variant 4: an argument name from words that fit its role (else any common word) and
    suffixes, never an evaluation schema's own argument name (unless a bundled tool has it)."""
    words = LEX3["ARG_ROLE4"].get(role) if rng.random() < 0.75 else None
    while True:
        n = rng.choice(words or LEX3["ARG_WORDS4"]) + rng.choice(LEX3["ARG_SUFFIX4"])
        if n not in EVAL_ARG_NAMES:
            return n


def description3(rng, intent):
    """A tool description composed from parts (lexicon3.json DESC_*): what tells generic tools
    apart."""
    d = "%s %s %s" % (rng.choice(LEX3["DESC_V"]), rng.choice(LEX3["DESC_O"][intent]),
                      rng.choice(LEX3["DESC_Q"][intent]))
    return d.replace(" .", ".")


def make_tool(rng, intent):
    """A schema for intent: (tool json, {role: arg name}). A generic name leaves the description
    to tell two tools apart; variant 2 also makes names and argument names random, so the call
    has to be copied from the offered schema."""
    spec = INTENTS[intent]
    name, desc, args = rng.choice(spec["schemas"])
    if VARIANT["v"] == 1:
        if name in TOOL_BY_NAME and rng.random() < 0.6:
            return TOOL_BY_NAME[name], {a[0]: a[1] for a in args}
        if rng.random() < 0.25:
            name, desc = rng.choice(GENERIC_NAMES), rng.choice(spec["generic"])
        if rng.random() < 0.1 and len(args) == 1:
            a = args[0]
            args = [(a[0], rng.choice(GENERIC_ARGS)) + tuple(a[2:])]
    elif VARIANT["v"] in (4, 5):
        # Names the model cannot have memorised: composed from verbs, intent nouns and modifiers
        # (near misses of each other: play_song, play_track, start_music, ...) or random; only
        # the bundled tools keep their names. Argument names likewise.
        if name in TOOL_BY_NAME and rng.random() < 0.3:
            return TOOL_BY_NAME[name], {a[0]: a[1] for a in args}
        r = rng.random()
        name = composed_name(rng, intent) if r < 0.5 else random_name(rng) if r < 0.7 else \
            random_generic(rng) if r < 0.85 else name
        if name in TOOL_BY_NAME:
            name = composed_name(rng, intent)
        if rng.random() < 0.5 or name != spec["schemas"][0][0]:
            desc = description3(rng, intent) if rng.random() < 0.7 else desc
        if rng.random() < 0.8:
            taken, renamed = set(), []
            for a in args:
                n = composed_arg(rng, a[0]) if rng.random() < 0.7 else random_name(rng)
                while n in taken:
                    n = composed_arg(rng)
                taken.add(n)
                renamed.append((a[0], n) + tuple(a[2:]))
            args = renamed
    elif VARIANT["v"] == 3:
        if name in TOOL_BY_NAME and rng.random() < 0.4:
            return TOOL_BY_NAME[name], {a[0]: a[1] for a in args}
        r = rng.random()
        if r < 0.25:
            name = random_name(rng)
        elif r < 0.45:
            name, desc = (rng.choice(GENERIC_NAMES + [random_generic(rng)]),
                          description3(rng, intent))
        elif r < 0.7:
            name, desc = random_name(rng), description3(rng, intent)
        elif r < 0.8:
            desc = description3(rng, intent)
        if rng.random() < 0.4:
            taken, renamed = set(), []
            for a in args:
                n = rng.choice(GENERIC_ARGS) if rng.random() < 0.3 else random_name(rng)
                while n in taken:
                    n = random_name(rng)
                taken.add(n)
                renamed.append((a[0], n) + tuple(a[2:]))
            args = renamed
    else:
        if name in TOOL_BY_NAME and rng.random() < 0.5:
            return TOOL_BY_NAME[name], {a[0]: a[1] for a in args}
        r = rng.random()
        if r < 0.3:
            name = random_name(rng)
        elif r < 0.5:
            name, desc = rng.choice(GENERIC_NAMES), rng.choice(spec["generic"])
        elif r < 0.65:
            name, desc = random_name(rng), rng.choice(spec["generic"])
        if rng.random() < 0.3:
            taken, renamed = set(), []
            for a in args:
                n = rng.choice(GENERIC_ARGS) if rng.random() < 0.3 else random_name(rng)
                while n in taken:
                    n = random_name(rng)
                taken.add(n)
                renamed.append((a[0], n) + tuple(a[2:]))
            args = renamed
    params, req = [], []
    for a in args:
        role, arg, ty, d = a[0], a[1], a[2], a[3]
        en = a[4] if len(a) > 4 else None
        if rng.random() < 0.3:
            d = ""
        params.append((arg, ty, d, en))
        if role not in ("unit", "shuffle", "count") or rng.random() < 0.15:
            req.append(arg)
    return _tool(name, desc, params, req), {a[0]: a[1] for a in args}


# ---- phrasing helpers ----
OPENERS = LEX["OPENERS"]
CLOSERS = LEX["CLOSERS"]


def typo(rng, text, keep):
    """One or two typos in words that are not part of an entity."""
    ws = text.split(" ")
    # variant 5 compares folded words: an accented entity word ("Ølberg") no longer looks like
    # a non-entity word and gets a typo that its argument does not have
    f = fold if VARIANT["v"] >= 5 else str.lower
    idx = [i for i, w in enumerate(ws) if len(w) >= 4 and w.isalpha() and not any(
        f(w) in fold(k) for k in keep)]
    for i in rng.sample(idx, min(len(idx), rng.choice([1, 1, 2]))):
        w, j = ws[i], rng.randint(1, len(ws[i]) - 2)
        r = rng.random()
        if r < 0.35:
            w = w[:j] + w[j + 1:]
        elif r < 0.7:
            w = w[:j] + w[j + 1] + w[j] + w[j + 2:]
        else:
            w = w[:j] + w[j] + w[j:]
        ws[i] = w
    return " ".join(ws)


def dress(rng, text, keep):
    """Filler, casing, punctuation and typo variants of a request; keep: entity strings whose
    casing is reflected in the arguments (lowercasing lowercases them too)."""
    v3 = VARIANT["v"] >= 3 and rng.random() < 0.7
    o = rng.choice(LEX3["OPENERS3"] if v3 else OPENERS)
    if v3 and o and rng.random() < 0.5:
        o = o[0].upper() + o[1:]
    if o and o[-2:] == ", " and rng.random() < 0.6 and not any(text.startswith(k) for k in keep):
        text = text[0].lower() + text[1:]
    text = o + text
    c = rng.choice(LEX3["CLOSERS3"] if v3 else CLOSERS)
    if c:
        text = text.rstrip("?.!") + c
    r = rng.random()
    lower = False
    if r < 0.25:
        text, lower = text.lower(), True
    elif r < 0.35:
        text = text.rstrip("?.!")
    if rng.random() < 0.12:
        text = typo(rng, text, keep)
    if VARIANT["v"] >= 5 and rng.random() < 0.1 and not any("'" in k for k in keep):
        text = text.replace("'", "")  # whats, its, dont
    return text, lower


def pick(rng, tpls, **kw):
    return rng.choice(tpls).format(**kw)


WEATHER_Q = LEX["WEATHER_Q"]
WEATHER_UNIT = LEX["WEATHER_UNIT"]
TIME_Q = LEX["TIME_Q"]
MONEY_Q = LEX["MONEY_Q"]
TIMER_Q = LEX["TIMER_Q"]
STOCK_Q = LEX["STOCK_Q"]
TRANSLATE_Q = LEX["TRANSLATE_Q"]
EMAIL_Q = LEX["EMAIL_Q"]
SEARCH_Q = LEX["SEARCH_Q"]
CALC_OPS = LEX["CALC_OPS"]
CALC_WORDS = [tuple(x) for x in LEX["CALC_WORDS"]]
CALC_Q = LEX["CALC_Q"]
LIGHTS_ON = LEX["LIGHTS_ON"]
LIGHTS_OFF = LEX["LIGHTS_OFF"]
MUSIC_Q = LEX["MUSIC_Q"]
MUSIC_SHUF = LEX["MUSIC_SHUF"]
REMIND_Q = LEX["REMIND_Q"]
CLIMATE_Q = LEX["CLIMATE_Q"]
NEWS_Q = LEX["NEWS_Q"]
DEFINE_Q = LEX["DEFINE_Q"]
LOCK_ON = LEX["LOCK_ON"]
LOCK_OFF = LEX["LOCK_OFF"]

# ---- follow-ups after an exchange about one entity ----
FOLLOW_SAME = LEX["FOLLOW_SAME"]
FOLLOW_THERE = LEX["FOLLOW_THERE"]


class _R3:
    busy = False


def _cap(rng, q):
    return q[0].upper() + q[1:] if q and rng.random() < 0.55 else q


def _translate_turn(rng, p_, tpls):
    """A translate request of phrase p_ from templates tpls (request3 and request5)."""
    lang = language3(rng) if rng.random() < 0.5 else rng.choice(LANGUAGES)
    q = pick(rng, tpls, p=p_, l=lang)
    tr = "(%s) %s" % (lang, p_)
    return _cap(rng, q), {"text": p_, "lang": lang}, {"translation": tr}, \
        "In %s: %s" % (lang, tr), [p_, lang]


def _email_turn(rng, tpls):
    e, s_ = email_addr(rng), subject(rng)
    q = pick(rng, tpls, e=e, s=s_)
    return _cap(rng, q), {"to": e, "subj": s_}, {"status": "sent", "id": rng.randint(
        1000, 9999)}, "Done, I emailed %s." % e, [e, s_]


def _search_reply(rng, q, t):
    url = "https://example.com/%d" % rng.randint(1, 999)
    return _cap(rng, q), {"q": t}, {"results": [{"title": t.capitalize(), "url": url}]}, \
        "I found a page titled \"%s\": %s" % (t.capitalize(), url), [t]


def request3(rng, intent, place=None):
    """Variant 3: the request from lexicon3.json's larger, composed phrasings, or None to use
    request()'s (its entities still come from variant 3's generators)."""
    X = LEX3
    if intent in ("weather", "time"):
        c = place or city(rng)
        if intent == "weather":
            q = pick(rng, X["WEATHER3"], c=c, w=rng.choice(X["WEATHER_W"]),
                     a=rng.choice(X["WEATHER_A"]), v=rng.choice(X["WEATHER_V"]),
                     i=rng.choice(X["WEATHER_ITEM"]))
        else:
            q = pick(rng, X["TIME3"], c=c, w=rng.choice(X["TIME_W"]), d=rng.choice(X["TIME_D"]))
        base = request(rng, intent, place=c)
        if "unit" in base[1]:
            q = q.rstrip("?.!") + pick(rng, WEATHER_UNIT, u=rng.choice(
                [base[1]["unit"], base[1]["unit"].capitalize()]))
        return (_cap(rng, q),) + base[1:]
    if intent == "money":
        a = amount(rng)
        if rng.random() < 0.6:
            s_, d_ = code3(rng), None
            d_ = code3(rng, (s_,))
            sw, dw = s_, d_
        else:
            s_, d_ = rng.sample(CODES, 2)
            sw = (rng.choice(CURRENCY_NAMES[s_])
                  if s_ in CURRENCY_NAMES and rng.random() < 0.3 else s_)
            dw = (rng.choice(CURRENCY_NAMES[d_])
                  if d_ in CURRENCY_NAMES and rng.random() < 0.3 else d_)
        q = pick(rng, X["MONEY3"], a=num_text(a), s=sw, d=dw, v=rng.choice(X["MONEY_V"]))
        v = round(a * rng.uniform(0.01, 150.0), 2)
        res = {"amount": a, "from": s_, "to": d_, "result": v}
        return _cap(rng, q), {"amount": a, "src": s_, "dst": d_}, res, "%s %s is about %s %s." % (
            num_text(a), s_, v, d_), [s_, d_]
    if intent == "timer":
        m = minutes(rng)
        return _cap(rng, pick(rng, X["TIMER3"], m=m)), {"min": m}, {
            "status": "started", "minutes": m}, "Timer set for %d minutes." % m, []
    if intent == "stock":
        t = ticker(rng)
        p_ = round(rng.uniform(2, 900), 2)
        return _cap(rng, pick(rng, X["STOCK3"], t=t)), {"sym": t}, {
            "symbol": t, "price": p_, "currency": "USD"}, "%s is trading at %s USD." % (t, p_), [t]
    if intent == "translate":
        p_ = phrase3(rng) if rng.random() < 0.75 else rng.choice(PHRASES)
        return _translate_turn(rng, p_, X["TRANSLATE3"])
    if intent == "email":
        return _email_turn(rng, X["EMAIL3"])
    if intent == "search":
        t = topic(rng)
        return _search_reply(rng, pick(rng, X["SEARCH3"], q=t, v=rng.choice(X["SEARCH_V"])), t)
    if intent == "lights":
        r, on = room3(rng) if rng.random() < 0.75 else rng.choice(ROOMS), rng.random() < 0.5
        if rng.random() < 0.2:
            q = pick(rng, X["LIGHTS3_ON_X"] if on else X["LIGHTS3_OFF_X"], r=r)
        else:
            q = pick(rng, X["LIGHTS3"], r=r, o="on" if on else "off",
                     v=rng.choice(X["LIGHT_ON_V"] if on else X["LIGHT_OFF_V"]))
        return _cap(rng, q), {"room": r, "on": on}, {"ok": True}, "The %s lights are %s." % (
            r, "on" if on else "off"), [r]
    if intent == "music":
        s_ = song(rng)
        q = pick(rng, X["MUSIC3"], s=s_, v=rng.choice(X["MUSIC_V"]))
        vals = {"song": s_}
        if rng.random() < 0.2:
            q = q + rng.choice(MUSIC_SHUF)
            vals["shuffle"] = True
        return _cap(rng, q), vals, {"playing": s_}, "Now playing %s." % s_, [s_]
    if intent == "reminder":
        k, m = task(rng), rng.choice([5, 10, 15, 20, 30, 45, 60, 90, rng.randint(1, 240)])
        q = pick(rng, X["REMIND3"], k=k, m=m, v=rng.choice(X["REMIND_V"]),
                 v_short=rng.choice(X["REMIND_SHORT"]))
        return _cap(rng, q), {"task": k, "min": m}, {"status": "scheduled"}, \
            "I'll remind you to %s in %d minutes." % (k, m), [k]
    if intent == "climate":
        mode = rng.choice(["heat", "heat", "cool", "cool", "auto"])
        t = rng.randint(16, 28) if rng.random() < 0.8 else rng.randint(160, 280) / 10
        q = pick(rng, X["CLIMATE3"][mode], t=num_text(t))
        return _cap(rng, q), {"temp": t, "mode": mode}, {"ok": True}, \
            "Set to %s degrees (%s)." % (num_text(t), mode), []
    return None


def _slots5(rng, **kw):
    """Every slot the variant-5 templates use (lexicon5.json), drawn once."""
    X = LEX5
    a, a2 = rng.sample(X["WX_ADJ5"], 2)
    d = dict(a=a, a2=a2, p=rng.choice(X["WX_PRE5"]), t=rng.choice(X["WX_WHEN5"]),
             w=rng.choice(X["WX_NOUN5"]), s=rng.choice(X["WX_SKY5"]), i=rng.choice(X["WX_ITEM5"]),
             iv=rng.choice(X["WX_ITEMV5"]), v=rng.choice(X["WX_PRECIP5"]),
             n=rng.choice(X["WX_PRECIPN5"]), k=rng.choice(X["WX_KIND5"]),
             rel=rng.choice(X["REL5"]), d=rng.choice(X["TIME_DAY5"]))
    d.update(kw)
    return d


def request5(rng, intent, place=None):
    """Variant 5: the request from lexicon5.json's phrasing families (entity anywhere, next to
    descriptive words, glued to punctuation; company names beside tickers), or None to use
    request()'s. Entities come from the variant-5 generators as well as the earlier ones."""
    X = LEX5
    if intent in ("weather", "time"):
        c = place or city(rng)
        base = request(rng, intent, place=c)
        if intent == "weather":
            q = pick(rng, X["WEATHER5"], **_slots5(rng, c=c))
        else:
            q = pick(rng, X["TIME5"], **_slots5(rng, c=c, w=rng.choice(X["TIME_W5"])))
        if "unit" in base[1]:
            u = base[1]["unit"]
            q = q.rstrip("?.!") + pick(rng, X["WX_UNIT5"], u=u, U=u.capitalize())
        return (_cap(rng, q),) + base[1:]
    if intent == "timer":
        m = minutes(rng)
        q = pick(rng, X["TIMER5"], m=m, x=rng.choice(X["TIMER_X5"]))
        return _cap(rng, q), {"min": m}, {"status": "started", "minutes": m}, \
            "Timer set for %d minutes." % m, []
    if intent == "stock":
        t = ticker(rng) if rng.random() < 0.6 else code3(rng)[:rng.choice([2, 3, 3])] + \
            rng.choice(["", "", "X", "L", "Q", "R"])
        n = company5(rng)
        q = pick(rng, X["STOCK5"], t=t, n=n)
        p_ = round(rng.uniform(2, 900), 2)
        return _cap(rng, q), {"sym": t}, {"symbol": t, "price": p_, "currency": "USD"}, \
            "%s is trading at %s USD." % (t, p_), [t, n]
    if intent == "lights":
        r = room5(rng) if rng.random() < 0.5 else room3(rng)
        on = rng.random() < 0.5
        q = pick(rng, X["LIGHTS_ON5"] if on else X["LIGHTS_OFF5"], r=r)
        return _cap(rng, q), {"room": r, "on": on}, {"ok": True}, "The %s lights are %s." % (
            r, "on" if on else "off"), [r]
    if intent == "search":
        t = topic(rng)
        return _search_reply(rng, pick(rng, X["SEARCH5"], q=t), t)
    if intent == "translate":
        p_ = phrase5(rng) if rng.random() < 0.6 else phrase3(rng)
        return _translate_turn(rng, p_, X["TRANSLATE5"])
    if intent == "email":
        return _email_turn(rng, X["EMAIL5"])
    if intent == "reminder":
        k, m = task(rng), rng.choice([5, 10, 15, 20, 30, 45, 60, 90, rng.randint(1, 240)])
        q = pick(rng, X["REMIND5"], k=k, m=m)
        return _cap(rng, q), {"task": k, "min": m}, {"status": "scheduled"}, \
            "I'll remind you to %s in %d minutes." % (k, m), [k]
    if intent == "money":
        a = amount(rng)
        s_, d_ = rng.sample(CODES, 2) if rng.random() < 0.5 else (code3(rng), None)
        d_ = d_ or code3(rng, (s_,))
        sw = (rng.choice(CURRENCY_NAMES[s_])
              if s_ in CURRENCY_NAMES and rng.random() < 0.3 else s_)
        dw = (rng.choice(CURRENCY_NAMES[d_])
              if d_ in CURRENCY_NAMES and rng.random() < 0.3 else d_)
        q = pick(rng, X["MONEY5"], a=num_text(a), s=sw, d=dw)
        v = round(a * rng.uniform(0.01, 150.0), 2)
        return _cap(rng, q), {"amount": a, "src": s_, "dst": d_}, {
            "amount": a, "from": s_, "to": d_, "result": v}, "%s %s is about %s %s." % (
            num_text(a), s_, v, d_), [s_, d_]
    return None


def _variant_request(fn, rng, intent, place):
    """fn's request (request3, request5), marked busy meanwhile so that a request it asks for
    itself comes from the base templates; None when fn has none for the intent."""
    _R3.busy = True
    try:
        return fn(rng, intent, place)
    finally:
        _R3.busy = False


def request(rng, intent, place=None):
    """(user text, {role: value}, result dict, answer text, entity strings)."""
    for v, fn, p in ((5, request5, 0.5), (3, request3, 0.75)):
        if VARIANT["v"] >= v and not getattr(_R3, "busy", False) and rng.random() < p:
            r = _variant_request(fn, rng, intent, place)
            if r is not None:
                return r
    if intent in ("weather", "time"):
        c = place or city(rng)
        q = pick(rng, WEATHER_Q if intent == "weather" else TIME_Q, c=c)
        vals, ents = {"place": c}, [c]
        if intent == "weather" and rng.random() < 0.12:
            u = rng.choice(["celsius", "fahrenheit"])
            q = q + pick(rng, WEATHER_UNIT, u=rng.choice([u, u.capitalize()]))
            vals["unit"] = u
        if intent == "weather":
            t, cnd = rng.randint(-15, 40), rng.choice(["sunny", "cloudy", "rainy", "windy",
                                                     "snowy", "foggy", "clear", "stormy"])
            res = {"city": c, "temperature_c": t, "condition": cnd}
            ans = pick(rng, ["It is {t}°C and {k} in {c}.", "{c}: {k}, {t}°C right now.",
                             "Right now it's {k} in {c} at {t}°C.",
                             "The weather in {c} is {k} with {t}°C."], t=t, k=cnd, c=c)
        else:
            tm = "%02d:%02d" % (rng.randint(0, 23), rng.randint(0, 59))
            res = {"city": c, "time": tm}
            ans = pick(rng, ["It is {t} in {c}.", "The local time in {c} is {t}.",
                             "In {c} it's {t} right now."], t=tm, c=c)
        return q, vals, res, ans, ents
    if intent == "money":
        a, (s, d) = amount(rng), rng.sample(CODES, 2)
        sw = rng.choice(CURRENCY_NAMES[s]) if s in CURRENCY_NAMES and rng.random() < 0.35 else s
        dw = rng.choice(CURRENCY_NAMES[d]) if d in CURRENCY_NAMES and rng.random() < 0.35 else d
        q = pick(rng, MONEY_Q, a=num_text(a), s=sw, d=dw)
        v = round(a * rng.uniform(0.01, 150.0), 2)
        res = {"amount": a, "from": s, "to": d, "result": v}
        ans = "%s %s is about %s %s." % (num_text(a), s, v, d)
        return q, {"amount": a, "src": s, "dst": d}, res, ans, []
    if intent == "timer":
        m = minutes(rng)
        q = pick(rng, TIMER_Q, m=m)
        return q, {"min": m}, {"status": "started", "minutes": m}, pick(
            rng, ["Your {m} minute timer is running.", "Timer set for {m} minutes.",
                  "Done: {m} minutes, starting now."], m=m), []
    if intent == "stock":
        t = ticker(rng)
        q = pick(rng, STOCK_Q, t=t)
        p = round(rng.uniform(2, 900), 2)
        return q, {"sym": t}, {"symbol": t, "price": p, "currency": "USD"}, pick(
            rng, ["{t} is trading at {p} USD.", "{t} last traded at ${p}."], t=t, p=p), [t]
    if intent == "translate":
        p, lang = rng.choice(PHRASES), rng.choice(LANGUAGES)
        q = pick(rng, TRANSLATE_Q, p=p, l=lang)
        tr = "(%s) %s" % (lang, p)
        return q, {"text": p, "lang": lang}, {"translation": tr}, "In %s: %s" % (lang, tr), [p, lang]
    if intent == "email":
        e, s = email_addr(rng), subject(rng)
        q = pick(rng, EMAIL_Q, e=e, s=s)
        return q, {"to": e, "subj": s}, {"status": "sent", "id": rng.randint(1000, 9999)}, pick(
            rng, ["Done, I emailed {e}.", "The email \"{s}\" was sent to {e}."], e=e, s=s), [e, s]
    if intent == "search":
        t = topic(rng)
        q = pick(rng, SEARCH_Q, q=t)
        url = "https://example.com/%d" % rng.randint(1, 999)
        return q, {"q": t}, {"results": [{"title": t.capitalize(), "url": url}]}, \
            "I found a page titled \"%s\": %s" % (t.capitalize(), url), [t]
    if intent == "calc":
        a, b, op = rng.randint(2, 9999), rng.randint(2, 999), rng.choice("+-*/")
        if rng.random() < 0.2:
            w, op = rng.choice(CALC_WORDS)
            if op in ("/2", "*2"):
                op, b = op[0], 2
            q = pick(rng, ["What is the {w}?", "Calculate the {w}.", "{w}?", "compute {w}"],
                     w=w.format(a=a, b=b))
        else:
            q = pick(rng, CALC_Q, a=a, b=b, o=rng.choice(CALC_OPS[op]))
        expr = "%d %s %d" % (a, op, b)
        v = eval(expr)  # noqa: S307 - our own digits and operators
        v = round(v, 4) if isinstance(v, float) else v
        return q, {"expr": expr}, {"value": v}, "%s = %s." % (expr, v), []
    if intent == "lights":
        r, on = rng.choice(ROOMS), rng.random() < 0.5
        q = pick(rng, LIGHTS_ON if on else LIGHTS_OFF, r=r)
        return q, {"room": r, "on": on}, {"ok": True}, "The %s lights are %s." % (
            r, "on" if on else "off"), [r]
    if intent == "music":
        s = song(rng)
        q = pick(rng, MUSIC_Q, s=s)
        vals = {"song": s}
        if rng.random() < 0.25:
            q = q.rstrip(".?!") + rng.choice(MUSIC_SHUF)
            vals["shuffle"] = True
        return q, vals, {"playing": s}, "Now playing %s." % s, [s]
    if intent == "reminder":
        k, m = task(rng), rng.choice([5, 10, 15, 20, 30, 45, 60, 90, rng.randint(1, 240)])
        q = pick(rng, REMIND_Q, k=k, m=m)
        return q, {"task": k, "min": m}, {"status": "scheduled"}, \
            "I'll remind you to %s in %d minutes." % (k, m), [k]
    if intent == "climate":
        mode = rng.choice(["heat", "heat", "cool", "cool", "auto"])
        t = rng.randint(16, 28) if rng.random() < 0.8 else rng.randint(160, 280) / 10
        q = pick(rng, CLIMATE_Q[mode], t=num_text(t))
        return q, {"temp": t, "mode": mode}, {"ok": True}, "Set to %s degrees (%s)." % (
            num_text(t), mode), []
    if intent == "news":
        n = rng.choice(_TOPIC_N + _TOPIC_B)
        k = rng.randint(2, 10)
        q = pick(rng, NEWS_Q, n=n, k=k)
        vals = {"topic": n}
        if "{k}" in q or str(k) in q.split():
            vals["count"] = k
        return q, vals, {"headlines": ["%s: new report" % n.capitalize()]}, \
            "Top story: %s: new report." % n.capitalize(), [n]
    if intent == "define":
        w = rng.choice(WORDS_TO_DEFINE)
        q = pick(rng, DEFINE_Q, w=w)
        return q, {"word": w}, {"definition": "a word meaning something"}, \
            "\"%s\": a word meaning something." % w, [w]
    if intent == "lock":
        d, on = rng.choice(DOORS), rng.random() < 0.5
        q = pick(rng, LOCK_ON if on else LOCK_OFF, d=d)
        return q, {"door": d, "on": on}, {"ok": True}, "The %s is %s." % (
            d, "locked" if on else "unlocked"), [d]
    raise ValueError(intent)


CANT = LEX["CANT"]
REFUSE = LEX["REFUSE"]

# ---- plain chat (no tool, whatever is offered) ----
CHAT = [tuple(x) for x in LEX["CHAT"]]
COUNTRIES = _keep(LEX["COUNTRIES"])
CAPITALS = LEX["CAPITALS"]


COUNTRIES = [c for c in COUNTRIES if not seen_eval(CAPITALS[c])]


# Variant 2: open-ended questions and requests no tool serves, composed from parts, so that an
# unfamiliar question reads as chat rather than as a request for the nearest tool.
_Q_THINGS = LEX["_Q_THINGS"]
_Q_FORMS = LEX["_Q_FORMS"]
_Q_TPL = LEX["_Q_TPL"]
_Q_ANS = LEX["_Q_ANS"]


def open_question(rng):
    t, t2 = rng.sample(_Q_THINGS, 2)
    q = pick(rng, _Q_TPL, t=t, t2=t2, f=rng.choice(_Q_FORMS))
    return q, pick(rng, _Q_ANS, t=t, T=t.capitalize())


def plain_turn3(rng):
    """Variant 3 chat: greetings, thanks, acknowledgements, names and places, mentions of a tool's
    topic, open questions and small creative requests, composed from lexicon3.json."""
    X = LEX3
    r = rng.random()
    name = (rng.choice(X["FIRST3"]).rstrip("_").capitalize() if rng.random() < 0.6
            else fake_word3(rng, 1, 3).capitalize())
    while VARIANT["v"] >= 4 and seen_eval(name):
        # variant 3 let one through: "I'm Bãku." in 400,000 conversations (an evaluation town)
        name = fake_word3(rng, 1, 3).capitalize()
    if r < 0.14:
        q = rng.choice(X["GREET"]) + rng.choice(X["GREET_TAIL"])
        a = rng.choice(X["GREET_ANS"])
    elif r < 0.28:
        q = rng.choice(X["THANKS"]) + rng.choice(["", "", "!", ".", " :)", "!!"])
        a = rng.choice(X["THANKS_ANS"])
    elif r < 0.4:
        q = rng.choice(X["ACKS"]) + rng.choice(["", "", "", ".", "!", "..."])
        a = rng.choice(X["ACK_ANS"])
    elif r < 0.52:
        q = pick(rng, X["NAME_CHAT"], n=name, c=city(rng))
        a = rng.choice(X["NAME_ANS"])
    elif r < 0.64:
        q = pick(rng, X["MENTION"], w=rng.choice(["rainy", "sunny", "snowy", "windy", "grey"]),
                 W=rng.choice(["Rainy", "Sunny", "Cold", "Hot", "Grey"]), n=rng.choice(NOUNS3),
                 rel=rng.choice(X["RELS"]), c=city(rng), q=topic(rng))
        a = rng.choice(X["MENTION_ANS"])
    else:
        t = rng.choice(X["THINGS3"])
        q = pick(rng, X["TRIVIA_TPL"], wv=rng.choice(X["WHO_V"]), n=rng.choice(NOUNS3),
                 n2=rng.choice(NOUNS3), t=t, sup=rng.choice(X["SUPS"]), a=rng.choice(ADJS3),
                 f=rng.choice(X["FORMS3"]), sk=rng.choice(X["SKILLS"]), v=rng.choice(X["CAN_V"]),
                 rel=rng.choice(X["RELS"]), rel_p=rng.choice(X["RELS_P"]))
        a = pick(rng, X["TRIVIA_ANS"], T=t.capitalize())
    if rng.random() < 0.5:
        q = q[0].upper() + q[1:]
    return q, a


def plain_turn5(rng):
    """Variant 5 chat with tools on offer: trips, weather and time talk, thanks, greetings and
    small explain-or-create requests that mention a tool's topic without asking for it."""
    X = LEX5
    tpl, kind = rng.choice(X["PLAIN5"])
    name = rng.choice(LEX3["FIRST3"]).rstrip("_").capitalize()
    q = pick(rng, [tpl], **_slots5(
        rng, c=city(rng), w=rng.choice(NOUNS3), w2=rng.choice(NOUNS3),
        mon=rng.choice(X["MONTHS5"]), season=rng.choice(X["SEASON5"]),
        d=rng.choice(X["DAYPART5"]), h=rng.randint(2, 6), name=name))
    if rng.random() < 0.2:
        q = q.lower().rstrip("!.?")
    return q, rng.choice(X["PLAIN5_ANS"][kind])


def plain_turn(rng):
    if VARIANT["v"] >= 5 and rng.random() < 0.4:
        return plain_turn5(rng)
    r = rng.random()
    if VARIANT["v"] >= 3 and rng.random() < 0.6:
        return plain_turn3(rng)
    if VARIANT["v"] >= 2 and rng.random() < 0.35:
        return open_question(rng)
    if r < 0.12 and COUNTRIES:
        c = rng.choice(COUNTRIES)
        q = pick(rng, ["Which city is the capital of {c}?", "capital city of {c}?",
                       "Do you know the capital of {c}?", "{c}'s capital?"], c=c)
        return q, "The capital of %s is %s." % (c, CAPITALS[c])
    if r < 0.2:
        # mentions of a tool's topic that are not requests
        q = rng.choice(["I love sunny days.", "Rainy days make me sleepy.",
                        "Time flies when you're having fun.", "Money can't buy happiness, right?",
                        "I used to live in %s." % city(rng), "%s is a lovely city." % city(rng),
                        "My friend is from %s." % city(rng), "Timers stress me out.",
                        "I don't trust the stock market.", "Emails are so boring.",
                        "Languages are fun to learn.", "Math was my favorite subject.",
                        "What's better, summer or winter?", "Do you prefer cats or dogs?"])
        return q, rng.choice(["Interesting! Is there anything I can do for you?",
                              "I see. Anything I can help with?", "Nice! How can I help?"])
    q, a = rng.choice(CHAT)
    if rng.random() < 0.2:
        q = q.lower().rstrip("!.?")
    return q, a


# ----------------------------------------------------------------------------------------------
# Conversations
# ----------------------------------------------------------------------------------------------

SYSTEMS = LEX["SYSTEMS"]
ALL_INTENTS = sorted(INTENTS)
PAIRS = [tuple(x) for x in LEX["PAIRS"]]


def call_message(name, args):
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]}


def offer(rng, bundled_only=False):
    """1..5 tools with distinct intents and names: [(tool, intent, {role: arg})]."""
    if bundled_only:
        names = rng.sample(list(TOOL_BY_NAME), rng.randint(1, 4))
        return [(TOOL_BY_NAME[n], BUNDLED_INTENT[n], None) for n in names]
    k = rng.choice([1, 2, 2, 3, 3, 4, 5])
    intents = []
    if rng.random() < 0.4:
        intents = list(rng.choice(PAIRS))
    while len(intents) < k:
        i = rng.choice(ALL_INTENTS)
        if i not in intents:
            intents.append(i)
    rng.shuffle(intents)
    out, names = [], set()
    for i in intents[:max(k, 1)]:
        for _ in range(5):
            t, roles = make_tool(rng, i)
            if t["function"]["name"] not in names:
                break
        else:
            continue
        names.add(t["function"]["name"])
        out.append((t, i, roles))
    return out


def _roles_of(tool, intent):
    """{role: arg} for a bundled tool."""
    for s in INTENTS[intent]["schemas"]:
        if s[0] == tool["function"]["name"]:
            return {a[0]: a[1] for a in s[2]}
    raise KeyError(tool["function"]["name"])


def args_for(tool, roles, vals):
    props = tool["function"]["parameters"]["properties"]
    out = {}
    for k in props:  # schema order
        role = next((r for r, a in roles.items() if a == k), None)
        if role is not None and role in vals:
            out[k] = vals[role]
    return out


def exchange(rng, offered, intent=None, vals_override=None):
    """A tool exchange for an offered intent: (messages, intent, vals, tool)."""
    if intent is None:
        t, intent, roles = rng.choice(offered)
    else:
        t, intent, roles = next(o for o in offered if o[1] == intent)
    roles = roles or _roles_of(t, intent)
    q, vals, res, ans, ents = request(rng, intent)
    if vals_override:
        q, vals, res, ans, ents = vals_override
    q, lower = dress(rng, q, ents)
    if lower:
        keep = ("unit", "mode") if VARIANT["v"] >= 3 else ("src", "dst", "unit", "mode")
        vals = {k: (v.lower() if isinstance(v, str) and k not in keep else v)
                for k, v in vals.items()}
    a = args_for(t, roles, vals)
    if rng.random() < 0.25:
        res = rng.choice([{"ok": True}, {"status": "ok"}, {"success": True, "data": "done"},
                          {"result": "done"}])
        ans = rng.choice(["Done.", "All done.", "Okay, that's done.", "Done! Anything else?"])
    return [{"role": "user", "content": q}, call_message(t["function"]["name"], a),
            {"role": "tool", "content": json.dumps(res, ensure_ascii=False)},
            {"role": "assistant", "content": ans}], intent, vals


def refusal(rng, offered):
    have = {o[1] for o in offered}
    missing = [i for i in ALL_INTENTS if i not in have]
    intent = rng.choice(missing)
    if VARIANT["v"] >= 5 and rng.random() < 0.5:
        # variant 5: mostly a request next to an offered tool (time asked, weather offered)
        near = [i for o in sorted(have) for i in LEX5["SIBLING5"].get(o, []) if i not in have]
        if near:
            intent = rng.choice(near)
    q, _v, _r, _a, ents = request(rng, intent)
    q, _ = dress(rng, q, ents)
    return [{"role": "user", "content": q},
            {"role": "assistant", "content": pick(rng, REFUSE, x=CANT[intent])}]


def plain(rng):
    q, a = plain_turn(rng)
    return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]


def _follow(rng, offered, last_intent, last_vals):
    """A follow-up turn that reuses or swaps the last place."""
    have = {o[1]: o for o in offered}
    if last_intent in ("weather", "time") and rng.random() < 0.5:
        other = "time" if last_intent == "weather" else "weather"
        if other in have:
            c = last_vals["place"]
            _q, vals, res, ans, ents = request(rng, other, place=c)
            vals.pop("unit", None)
            return exchange(rng, offered, other, (rng.choice(FOLLOW_THERE[other]), vals, res,
                                                  ans, []))
    if last_intent in ("weather", "time", "stock", "translate", "music", "lights", "search"):
        _q, vals, res, ans, ents = request(rng, last_intent)
        key = {"weather": "place", "time": "place", "stock": "sym", "translate": "lang",
               "music": "song", "lights": "room", "search": "q"}[last_intent]
        q = pick(rng, FOLLOW_SAME, c=vals[key])
        if last_intent == "translate":
            vals["text"] = last_vals["text"]
        if last_intent == "lights":
            vals["on"] = last_vals["on"]
            if VARIANT["v"] >= 5:  # the answer says what the call did
                ans = "The %s lights are %s." % (vals["room"], "on" if vals["on"] else "off")
        vals.pop("unit", None)
        vals.pop("shuffle", None)
        return exchange(rng, offered, last_intent, (q, vals, res, ans, ents))
    return None


def conversation(rng):
    """A training conversation: dict(messages, tools)."""
    offered = [] if rng.random() < 0.08 else offer(rng, bundled_only=rng.random() < 0.2)
    msgs = []
    sysp = rng.choice(SYSTEMS)
    if sysp:
        msgs.append({"role": "system", "content": sysp})
    last = None
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        r = rng.random()
        if offered and last and r < 0.2:
            f = _follow(rng, offered, *last)
            if f:
                msgs += f[0]
                last = (f[1], f[2])
                continue
        v3 = VARIANT["v"] >= 3
        v5 = VARIANT["v"] >= 5
        if offered and r < (0.5 if v5 else 0.55 if v3 else 0.6):
            m, i, v = exchange(rng, offered)
            msgs += m
            last = (i, v)
        elif r < (0.68 if v3 else 0.75):
            msgs += refusal(rng, offered)
            last = None
        else:
            msgs += plain(rng)
    return {"messages": msgs, "tools": [o[0] for o in offered]}


_EVAL_GRAMS5 = EVAL_GRAMS - set(LEX5["ALLOW4_5"])


def clean(conv):
    """False when a user turn shares a word 4-gram with an evaluation prompt (variant 5: other
    than an everyday request frame of lexicon5.json's ALLOW4_5)."""
    grams = _EVAL_GRAMS5 if VARIANT["v"] >= 5 else EVAL_GRAMS
    return not any(grams4(m["content"]) & grams for m in conv["messages"]
                   if m["role"] == "user")


def corpus(n, seed):
    """n clean conversations, reproducible from seed."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        c = conversation(rng)
        if clean(c):
            out.append(c)
    return out


CHUNK = 2000


def corpus_jobs(n, seed):
    """The training set as (seed, count) chunks: conversation j of chunk i comes from
    corpus(count, seed * 100003 + i); any process count gives the same set."""
    return [(seed * 100003 + i, min(CHUNK, n - i * CHUNK)) for i in range((n + CHUNK - 1) // CHUNK)]


def eval_case(rng, kind):
    """A held-out prompt over the bundled tools (tests/fixtures/demo/heldout.jsonl) ending in a
    user (or tool) turn. kind: tool | plain | unavailable | after_result. Returns
    dict(messages, tools, kind, expected) where expected = {"name", "arguments"} or None."""
    while True:
        offered = offer(rng, bundled_only=True)
        if kind == "unavailable" and len(offered) == len(TOOLS):
            continue
        break
    hist = []
    if rng.random() < 0.4:
        sysp = rng.choice(SYSTEMS)
        if sysp:
            hist.append({"role": "system", "content": sysp})
    if rng.random() < 0.3:
        hist += plain(rng) if rng.random() < 0.5 else exchange(rng, offered)[0]
    tools = [o[0] for o in offered]
    if kind in ("tool", "after_result"):
        m, _i, _v = exchange(rng, offered)
        call = m[1]["tool_calls"][0]["function"]
        if kind == "after_result":
            return {"messages": hist + m[:3], "tools": tools, "kind": kind, "expected": None}
        return {"messages": hist + m[:1], "tools": tools, "kind": kind,
                "expected": {"name": call["name"], "arguments": call["arguments"]}}
    if kind == "unavailable":
        have = {o[1] for o in offered}
        intent = rng.choice([BUNDLED_INTENT[n] for n in TOOL_BY_NAME
                             if BUNDLED_INTENT[n] not in have])
        q, _v, _r, _a, ents = request(rng, intent)
        return {"messages": hist + [{"role": "user", "content": dress(rng, q, ents)[0]}],
                "tools": tools, "kind": kind, "expected": None}
    return {"messages": hist + plain(rng)[:1], "tools": tools, "kind": kind, "expected": None}


# ----------------------------------------------------------------------------------------------
# DSML parsing and checking (what the evaluation counts)
# ----------------------------------------------------------------------------------------------

_DSML = re.compile(r'<tool_calls>((?:<invoke name="[^"<>]+">(?:<parameter name="[^"<>]+">[^<]*'
                   r'</parameter>)*</invoke>)+)</tool_calls>')
_INVOKE = re.compile(r'<invoke name="([^"<>]+)">((?:<parameter name="[^"<>]+">[^<]*</parameter>)*)'
                     r'</invoke>')
_PARAM = re.compile(r'<parameter name="([^"<>]+)">([^<]*)</parameter>')
_MARKUP = re.compile(r"</?(tool_calls|invoke|parameter)\b")


def parse_output(text):
    """Classify a completion (text before <|end|>): ('text', None) | ('call', [(name, {k: v})]) |
    ('leak', None) for DSML-looking markup that does not parse as exactly one call block."""
    t = text.strip()
    m = _DSML.fullmatch(t)
    if m:
        calls = []
        for name, body in _INVOKE.findall(m.group(1)):
            calls.append((name, dict(_PARAM.findall(body))))
        return "call", calls
    if _MARKUP.search(t):
        return "leak", None
    return "text", None


def schema_valid(tool, args):
    p = tool["function"]["parameters"]
    props, req = p["properties"], p.get("required", [])
    if any(k not in props for k in args) or any(k not in args for k in req):
        return False
    for k, v in args.items():
        ty = props[k].get("type")
        try:
            if ty == "integer":
                int(float(v))
            elif ty == "number":
                float(v)
            elif ty == "boolean" and v not in ("true", "false", "True", "False"):
                return False
        except ValueError:
            return False
        if ty == "string" and not v:
            return False
        if "enum" in props[k] and v not in props[k]["enum"]:
            return False
    return True


if __name__ == "__main__":
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    tpl = make_env()
    for c in corpus(n, seed):
        print(render(tpl, c["messages"], c["tools"], False))
