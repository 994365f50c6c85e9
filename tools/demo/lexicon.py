"""What the demo generator (gen_data.py) draws from: the bundled tools, the evaluation material it
keeps apart from (entities, word 4-grams and tool names of tests/fixtures/demo/eval_*), and the
entities (curated lists from lexicon.json, minus every evaluation entity, and generators).

lexicon.json holds the data of both files: the word lists, the request and chat templates and
the intent schemas; this file and gen_data.py hold only the code that draws from them.
"""

import json
import os
import re
import sys as _sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "lexicon.json"), encoding="utf-8") as _f:
    LEX = json.load(_f)
FIXTURES = os.path.join(HERE, "..", "..", "tests", "fixtures", "demo")


def fold(s):
    """Case- and accent-insensitive form (what the evaluation compares)."""
    s = unicodedata.normalize("NFKD", str(s))
    return "".join(c for c in s if not unicodedata.combining(c)).lower().strip()


def words(s):
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", fold(s))


def grams4(s):
    w = words(s)
    return {" ".join(w[i:i + 4]) for i in range(len(w) - 3)}


# ----------------------------------------------------------------------------------------------
# The bundled tools (tests/fixtures/demo/tools.json: what README command 1 and the tests offer)
# ----------------------------------------------------------------------------------------------

def _tool(name, desc, params, required=None):
    props = {}
    for p in params:
        k, t, d = p[0], p[1], p[2]
        props[k] = {"type": t}
        if d:
            props[k]["description"] = d
        if len(p) > 3 and p[3]:
            props[k]["enum"] = list(p[3])
    return {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": props,
                       "required": required if required is not None else [p[0] for p in params]}}}


TOOLS = [
    _tool("get_weather", "Get the current weather for a city.", [("city", "string", "City name")]),
    _tool("get_time", "Get the local time in a city.", [("city", "string", "City name")]),
    _tool("convert_currency", "Convert an amount between currencies.",
          [("amount", "number", "Amount to convert"),
           ("from_currency", "string", "ISO code to convert from"),
           ("to_currency", "string", "ISO code to convert to")]),
    _tool("set_timer", "Start a countdown timer.", [("minutes", "integer", "Duration in minutes")]),
    _tool("get_stock_price", "Get the latest price of a stock.",
          [("symbol", "string", "Ticker symbol")]),
    _tool("translate", "Translate text into another language.",
          [("text", "string", "Text to translate"),
           ("target_language", "string", "Language to translate into")]),
    _tool("send_email", "Send a short email.",
          [("to", "string", "Recipient address"), ("subject", "string", "Subject line")]),
    _tool("search_web", "Search the web.", [("query", "string", "Search query")]),
    _tool("calculate", "Evaluate an arithmetic expression.",
          [("expression", "string", "Expression such as 2 + 2")]),
]
TOOL_BY_NAME = {t["function"]["name"]: t for t in TOOLS}
BUNDLED_INTENT = LEX["BUNDLED_INTENT"]

# ----------------------------------------------------------------------------------------------
# Evaluation material to stay away from (entities and tool names written for the evaluation)
# ----------------------------------------------------------------------------------------------


def _eval_material():
    ents, grams, names = set(), set(), set()
    for fn in ("eval_hand.jsonl", "eval_gen.jsonl"):
        p = os.path.join(FIXTURES, fn)
        if not os.path.exists(p):
            continue
        for line in open(p, encoding="utf-8"):
            r = json.loads(line)
            ents.update(fold(e) for e in r.get("entities", []))
            for m in r["messages"]:
                if m["role"] == "user":
                    grams |= grams4(m["content"])
    try:
        import gen_eval as E  # noqa: PLC0415 - its entity lists, to keep ours apart
        for lst in (E.TOWNS, E.TOPICS, E.PHRASES, E.LANGS, E.SUBJECTS, E.TICKERS, E.CODES,
                    E.ROOMS, E.SONGS, E.CHORES):
            ents.update(fold(x) for x in lst)
        ents.update(fold(a) for a, _ in E.PEOPLE)
        ents.update(fold(d) for _, d in E.PEOPLE)
        names.update(E.INTENT)
    except ImportError:
        pass
    p = os.path.join(FIXTURES, "eval_tools.json")
    if os.path.exists(p):
        names.update(t["function"]["name"] for t in json.load(open(p, encoding="utf-8")))
    names -= set(TOOL_BY_NAME)
    return ents, grams, names


_sys.path.insert(0, HERE)
EVAL_ENTITIES, EVAL_GRAMS, EVAL_TOOL_NAMES = _eval_material()


_EVAL_WORDSEQ = {tuple(words(e)) for e in EVAL_ENTITIES if words(e)}


def seen_eval(x):
    """True when x contains an evaluation entity (as whole words, case and accents ignored)."""
    w = tuple(words(x))
    return any(w[i:j] in _EVAL_WORDSEQ for i in range(len(w))
               for j in range(i + 1, min(len(w), i + 5) + 1))


def _keep(lst):
    return [x for x in lst if not seen_eval(x)]


# ----------------------------------------------------------------------------------------------
# Entities
# ----------------------------------------------------------------------------------------------

CITIES = _keep(LEX["CITIES"])

_SYL = LEX["_SYL"]
_PLACE_PRE = LEX["_PLACE_PRE"]
_PLACE_SUF = LEX["_PLACE_SUF"]


def fake_word(rng, lo=2, hi=3):
    w = "".join(rng.choice(_SYL) for _ in range(rng.randint(lo, hi)))
    if rng.random() < 0.15:
        w = w.replace("o", "ø", 1) if rng.random() < 0.3 else w.replace("a", "á", 1)
    return w


def fake_place(rng):
    while True:
        w = fake_word(rng).capitalize() + rng.choice(_PLACE_SUF)
        p = rng.choice(_PLACE_PRE) + w
        if not seen_eval(p):
            return p


# VARIANT 1 trained the candidates recorded in bench/results/cpu_engine.json ("demo_frozen_eval";
# not bundled: see models/demo/README.md). VARIANT 2 makes copying necessary: random tool and
# argument names, and mostly generated entities; and its plain chat adds open questions composed
# from parts (its run is still to be made).
VARIANT = {"v": 1}


def set_variant(v):
    if v not in (1, 2):
        raise ValueError("variant must be 1 or 2")
    VARIANT["v"] = v


def _real(rng, p1, p2):
    """True when an entity should come from the curated list (else it is generated)."""
    return rng.random() < (p1 if VARIANT["v"] == 1 else p2)


def city(rng):
    return rng.choice(CITIES) if _real(rng, 0.55, 0.3) else fake_place(rng)


CURRENCY_NAMES = LEX["CURRENCY_NAMES"]
CODES = _keep(sorted(CURRENCY_NAMES) + ["SAR", "QAR", "MAD", "BGN", "RSD", "KZT", "GEL", "TWD",
                                       "PKR", "BDT", "LKR", "GHS", "TZS", "UGX", "JOD", "OMR"])
CURRENCY_NAMES = {k: v for k, v in CURRENCY_NAMES.items() if k in CODES}

LANGUAGES = _keep(LEX["LANGUAGES"])
PHRASES = _keep(LEX["PHRASES"])
_FIRST = LEX["_FIRST"]
_DOMAINS = LEX["_DOMAINS"]
SUBJECT_WORDS = LEX["SUBJECT_WORDS"]
_SUB_TPL = LEX["_SUB_TPL"]

ROOMS = _keep(LEX["ROOMS"])
SONGS = _keep(LEX["SONGS"])
_TITLE_A = LEX["_TITLE_A"]
_TITLE_B = LEX["_TITLE_B"]

TASKS = _keep(LEX["TASKS"])
_VERBS = LEX["_VERBS"]
_NOUNS = LEX["_NOUNS"]

TICKERS = _keep(LEX["TICKERS"])

_TOPIC_TPL = LEX["_TOPIC_TPL"]
_TOPIC_A = LEX["_TOPIC_A"]
_TOPIC_B = LEX["_TOPIC_B"]
_TOPIC_N = LEX["_TOPIC_N"]
_TOPIC_V = LEX["_TOPIC_V"]
_TOPIC_W = LEX["_TOPIC_W"]
_TOPIC_S = LEX["_TOPIC_S"]
_TOPIC_P = LEX["_TOPIC_P"]


def topic(rng):
    while True:
        t = rng.choice(_TOPIC_TPL).format(
            a=rng.choice(_TOPIC_A), b=rng.choice(_TOPIC_B), v=rng.choice(_TOPIC_V),
            n=rng.choice(_TOPIC_N), n2=rng.choice(_TOPIC_N), w=rng.choice(_TOPIC_W),
            s=rng.choice(_TOPIC_S), p=rng.choice(_TOPIC_P), c=city(rng))
        if not seen_eval(t) and not (grams4(t) & EVAL_GRAMS):
            return t


def email_addr(rng):
    while True:
        n = rng.choice(_FIRST)
        r = rng.random()
        if r < 0.3:
            n += "." + rng.choice(_FIRST)[0]
        elif r < 0.5:
            n += str(rng.randint(1, 99))
        elif r < 0.6:
            n = fake_word(rng, 2, 2)
        dom = rng.choice(_DOMAINS) if rng.random() < 0.7 else "%s.%s" % (
            fake_word(rng, 2, 2), rng.choice(["com", "org", "net", "io", "co", "de", "fr"]))
        a = "%s@%s" % (n, dom)
        if not seen_eval(a):
            return a


def subject(rng):
    while True:
        s = rng.choice(_SUB_TPL).format(A=rng.choice(SUBJECT_WORDS).capitalize(),
                                        b=rng.choice(SUBJECT_WORDS), c=rng.choice(SUBJECT_WORDS))
        if not seen_eval(s):
            return s


def song(rng):
    if _real(rng, 0.5, 0.3):
        return rng.choice(SONGS)
    return "%s %s" % (rng.choice(_TITLE_A), rng.choice(_TITLE_B)) if rng.random() < 0.7 else \
        "The %s %s" % (rng.choice(_TITLE_A), rng.choice(_TITLE_B))


def task(rng):
    if _real(rng, 0.5, 0.35):
        return rng.choice(TASKS)
    return "%s %s" % (rng.choice(_VERBS), rng.choice(_NOUNS))


def ticker(rng):
    if _real(rng, 0.5, 0.3):
        return rng.choice(TICKERS)
    while True:
        t = "".join(rng.choice("ABCDEFGHIJKLMNOPRSTUVWXZ") for _ in range(rng.randint(2, 4)))
        if not seen_eval(t) and t not in ("AM", "PM", "OK", "US", "IT", "TV"):
            return t


def amount(rng):
    r = rng.random()
    if r < 0.45:
        return rng.randint(1, 99)
    if r < 0.75:
        return rng.randint(1, 40) * 50
    if r < 0.9:
        return rng.randint(100, 20000)
    return round(rng.randint(1, 9999) / 100 + rng.randint(0, 200), 2)


def minutes(rng):
    return rng.choice([rng.randint(1, 20), rng.randint(1, 24) * 5, rng.randint(1, 180)])


def num_text(v):
    return ("%g" % v) if isinstance(v, float) else str(v)
