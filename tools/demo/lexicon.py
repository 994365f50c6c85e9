"""What the demo generator (gen_data.py) draws from: the bundled tools, the evaluation material it
keeps apart from (entities, word 4-grams and tool names of tests/fixtures/demo/eval_*), and the
entities (curated lists from lexicon.json, minus every evaluation entity, and generators).

lexicon.json holds the data of both files: the word lists, the request and chat templates and
the intent schemas (lexicon3.json and lexicon5.json those that variants 3 and 5 add); this file
and gen_data.py hold only the code that draws from them.
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


def _eval_arg_names():
    p = os.path.join(FIXTURES, "eval_tools.json")
    if not os.path.exists(p):
        return set()
    bundled = {k for t in TOOLS for k in t["function"]["parameters"]["properties"]}
    return {k for t in json.load(open(p, encoding="utf-8"))
            for k in t["function"]["parameters"]["properties"]} - bundled


EVAL_ARG_NAMES = _eval_arg_names()


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


# VARIANT 1 trained the first candidates recorded in bench/results/cpu_engine.json
# ("demo_frozen_eval"). VARIANT 2 makes copying necessary: random tool and argument names, and
# mostly generated entities; and its plain chat adds open questions composed from parts.
# VARIANT 3 (the generators at the end of this file, lexicon3.json) widens every entity space and
# the phrasings, descriptions and chat (see gen_data.py). VARIANT 4 composes tool and argument
# names; VARIANT 5 adds lexicon5.json's phrasing families and the word-based entities at the end
# of this file.
VARIANT = {"v": 1}


def set_variant(v):
    if v not in (1, 2, 3, 4, 5):
        raise ValueError("variant must be 1, 2, 3, 4 or 5")
    VARIANT["v"] = v


def _real(rng, p1, p2, p3=None):
    """True when an entity should come from the curated list (else it is generated)."""
    p = {1: p1, 2: p2}.get(VARIANT["v"], p2 if p3 is None else p3)
    return rng.random() < p


def city(rng):
    if VARIANT["v"] >= 5 and rng.random() < 0.45:
        return place5(rng)
    if VARIANT["v"] >= 3:
        return rng.choice(CITIES) if rng.random() < 0.15 else fake_place3(rng)
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
    if VARIANT["v"] >= 5 and rng.random() < 0.5:
        return topic5(rng)
    if VARIANT["v"] >= 3 and rng.random() < 0.6:
        return topic3(rng)
    while True:
        t = rng.choice(_TOPIC_TPL).format(
            a=rng.choice(_TOPIC_A), b=rng.choice(_TOPIC_B), v=rng.choice(_TOPIC_V),
            n=rng.choice(_TOPIC_N), n2=rng.choice(_TOPIC_N), w=rng.choice(_TOPIC_W),
            s=rng.choice(_TOPIC_S), p=rng.choice(_TOPIC_P), c=city(rng))
        if not seen_eval(t) and not (grams4(t) & EVAL_GRAMS):
            return t


def email_addr(rng):
    if VARIANT["v"] >= 3 and rng.random() < 0.6:
        return email3(rng)
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
    if VARIANT["v"] >= 5 and rng.random() < 0.5:
        return subject5(rng)
    if VARIANT["v"] >= 3 and rng.random() < 0.7:
        return subject3(rng)
    while True:
        s = rng.choice(_SUB_TPL).format(A=rng.choice(SUBJECT_WORDS).capitalize(),
                                        b=rng.choice(SUBJECT_WORDS), c=rng.choice(SUBJECT_WORDS))
        if not seen_eval(s):
            return s


def song(rng):
    if VARIANT["v"] >= 5 and rng.random() < 0.3:
        return title5(rng)
    if VARIANT["v"] >= 3 and rng.random() < 0.8:
        return song3(rng)
    if _real(rng, 0.5, 0.3):
        return rng.choice(SONGS)
    return "%s %s" % (rng.choice(_TITLE_A), rng.choice(_TITLE_B)) if rng.random() < 0.7 else \
        "The %s %s" % (rng.choice(_TITLE_A), rng.choice(_TITLE_B))


def task(rng):
    if VARIANT["v"] >= 5 and rng.random() < 0.5:
        return task5(rng)
    if VARIANT["v"] >= 3 and rng.random() < 0.75:
        return task3(rng)
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


# ----------------------------------------------------------------------------------------------
# Variant 3: entities from a far larger space (lexicon3.json: general nouns, adjectives, verbs,
# syllables with accents, place affixes), so that every argument has to be copied from the
# request; the evaluation's entities are rejected as before.
# ----------------------------------------------------------------------------------------------

with open(os.path.join(HERE, "lexicon3.json"), encoding="utf-8") as _f:
    LEX3 = json.load(_f)
NOUNS3 = _keep(LEX3["NOUNS"])
ADJS3 = _keep(LEX3["ADJS"])


def _accent(rng, w):
    if rng.random() < 0.25:
        i = [j for j, ch in enumerate(w) if ch.lower() in LEX3["ACCENT"]]
        if i:
            j = rng.choice(i)
            a = rng.choice(LEX3["ACCENT"][w[j].lower()])
            w = w[:j] + (a.upper() if w[j].isupper() else a) + w[j + 1:]
    return w


def fake_word3(rng, lo=1, hi=4):
    return _accent(rng, "".join(rng.choice(LEX3["SYL3"]) for _ in range(rng.randint(lo, hi))))


def _with_check(gen):
    def f(rng):
        while True:
            x = gen(rng)
            if x and not seen_eval(x) and not (grams4(x) & EVAL_GRAMS):
                return x
    f.__name__ = gen.__name__
    return f


def _byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _pieces():
    """The bundled tokenizer's word pieces (letters only, decoded): entities built from them put
    every piece the model can emit into a copying context."""
    p = os.path.join(HERE, "..", "..", "models", "demo", "tokenizer.json")
    dec = _byte_decoder()
    out = []
    for tok in json.load(open(p, encoding="utf-8"))["model"]["vocab"]:
        try:
            w = bytes(dec[c] for c in tok).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if w.strip().isalpha():
            out.append(w)
    return sorted(out)


PIECES = _pieces()


def piece_word(rng, lo=1, hi=3):
    """A word made of 1..3 tokenizer pieces (the first without its leading space)."""
    w = "".join(rng.choice(PIECES) for _ in range(rng.randint(lo, hi))).strip()
    return " ".join(w.split())


@_with_check
def fake_place3(rng):
    r = rng.random()
    if r < 0.2:
        w = " ".join(x.capitalize() if rng.random() < 0.8 else x
                     for x in piece_word(rng, 1, 4).split())
    elif r < 0.65:
        w = fake_word3(rng, 1, 4).capitalize()
    elif r < 0.85:
        w = " ".join(fake_word3(rng, 1, 3).capitalize() for _ in range(2))
    else:
        w = "%s-%s" % (fake_word3(rng, 1, 2).capitalize(), fake_word3(rng, 1, 2).capitalize())
    w = rng.choice(LEX3["PLACE_PRE3"]) + w + rng.choice(LEX3["PLACE_SUF3"])
    if rng.random() < 0.04:
        w = w.upper()
    return w


def _title(rng, w):
    return w if rng.random() < 0.2 else w.capitalize()


@_with_check
def song3(rng):
    r = rng.random()
    n = rng.randint(1, 4)
    pool = [rng.choice(NOUNS3) if rng.random() < 0.45 else rng.choice(ADJS3) if rng.random() < 0.5
            else fake_word3(rng, 1, 3) if rng.random() < 0.6 else piece_word(rng, 1, 2)
            for _ in range(n)]
    t = " ".join(_title(rng, w) for w in pool)
    if r < 0.15:
        t = "The " + t
    elif r < 0.25:
        t = "%s of the %s" % (t, _title(rng, rng.choice(NOUNS3)))
    elif r < 0.32:
        t = "%s %d" % (t, rng.randint(1, 99))
    return t


@_with_check
def task3(rng):
    v = rng.choice(LEX3["VERBS_T"])
    d = rng.choice(LEX3["DETS"])
    a = rng.choice(ADJS3) + " " if rng.random() < 0.25 else ""
    n = rng.choice(NOUNS3) if rng.random() < 0.85 else fake_word3(rng, 1, 3)
    if d in ("two",):
        n += "s"
    t = "%s %s %s%s" % (v, d, a, n)
    if rng.random() < 0.15:
        t += rng.choice([" for %s" % rng.choice(LEX3["FIRST3"]).capitalize(),
                         " at the %s" % rng.choice(NOUNS3), " again"])
    return t


@_with_check
def subject3(rng):
    ws = [rng.choice(NOUNS3 + ADJS3) if rng.random() < 0.8 else fake_word3(rng, 1, 3)
          if rng.random() < 0.5 else piece_word(rng, 1, 2) for _ in range(rng.randint(1, 4))]
    s = " ".join(ws)
    r = rng.random()
    if r < 0.1:
        s = "Re: " + s
    elif r < 0.18:
        s = "%s %d" % (s, rng.randint(1, 31))
    return s[0].upper() + s[1:] if rng.random() < 0.75 else s


@_with_check
def topic3(rng):
    n, n2, a = rng.choice(NOUNS3), rng.choice(NOUNS3), rng.choice(ADJS3)
    r = rng.random()
    if r < 0.2:
        return "%s %s" % (a, n + "s")
    if r < 0.35:
        return "how to %s a %s" % (rng.choice(["fix", "build", "clean", "draw", "choose", "find",
                                              "paint", "repair", "sell", "store"]), n)
    if r < 0.5:
        return ("%s %s %s" % (n, rng.choice(["history", "prices", "facts", "reviews", "ideas",
                                             "repair", "shops", "myths", "designs", "care"]),
                              rng.choice(["", "", "near %s" % fake_place3(rng), "for beginners",
                                          "in winter", "2026"]))).strip()
    if r < 0.6:
        return "why %ss are %s" % (n, a)
    if r < 0.7:
        return "the %s %s of %s" % (a, n, fake_place3(rng))
    if r < 0.75:
        return " ".join(fake_word3(rng, 1, 3) for _ in range(rng.randint(1, 3)))
    if r < 0.85:
        return piece_word(rng, 2, 5)
    return "%s and %s" % (n + "s", n2 + "s")


@_with_check
def email3(rng):
    n = rng.choice(LEX3["FIRST3"]).rstrip("_") if rng.random() < 0.5 else fake_word3(rng, 1, 3)
    n = n.replace("ø", "o")
    r = rng.random()
    if r < 0.25:
        n += rng.choice([".", "_", "-"]) + fake_word3(rng, 1, 2)
    elif r < 0.4:
        n += str(rng.randint(1, 999))
    import unicodedata as _u
    n = "".join(c for c in _u.normalize("NFKD", n) if not _u.combining(c))
    dom = "".join(c for c in _u.normalize("NFKD", fake_word3(rng, 1, 3))
                  if not _u.combining(c))
    if rng.random() < 0.2:
        dom += "." + "".join(c for c in _u.normalize("NFKD", fake_word3(rng, 1, 2))
                             if not _u.combining(c))
    return "%s@%s.%s" % (n.lower(), dom.lower(), rng.choice(LEX3["TLDS"]))


@_with_check
def phrase3(rng):
    n, n2, a = rng.choice(NOUNS3), rng.choice(NOUNS3), rng.choice(ADJS3)
    return rng.choice([
        "the {n} is {a}", "where is the {n}", "I need a {n}", "my {n} is {a}",
        "we lost the {n}", "I would like {k} {n}s", "do you have a {a} {n}",
        "the {n} is next to the {n2}", "please bring me the {n}", "is this {n} {a}",
        "I can't find my {n}", "how much is the {n}", "the {a} {n} is mine",
        "my {rel} has a {a} {n}", "where can I buy a {n}", "this {n} is too {a}",
        "can I borrow your {n}", "I left the {n} at home", "the {n} arrives {when}",
        "we will meet at the {n}", "I love this {n}", "is the {n} open {when}",
        "the {n} and the {n2} are {a}", "I forgot my {n}"]).format(
        n=n, n2=n2, a=a, k=rng.choice(["two", "three", "four", "some"]),
        rel=rng.choice(LEX3["RELS"]), when=rng.choice(["today", "tomorrow", "tonight", "soon",
                                                        "on Monday", "at noon", "later"]))


@_with_check
def language3(rng):
    return fake_word3(rng, 1, 2).capitalize() + rng.choice(LEX3["LANG_SUF"])


@_with_check
def room3(rng):
    r = rng.random()
    if r < 0.35:
        return rng.choice(LEX3["ROOM_N"])
    if r < 0.75:
        return "%s %s" % (rng.choice(LEX3["ROOM_A"]), rng.choice(LEX3["ROOM_N"]))
    if r < 0.85:
        return "%s room" % rng.choice(NOUNS3 + [fake_word3(rng, 1, 2)])
    if r < 0.92:
        return piece_word(rng, 1, 3)
    return "%s %s" % (fake_word3(rng, 1, 2), rng.choice(LEX3["ROOM_N"]))


def code3(rng, taken=()):
    while True:
        c = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(3))
        if c not in taken and not seen_eval(c):
            return c


# ----------------------------------------------------------------------------------------------
# Variant 5 (lexicon5.json): entities made of real English words (SCOWL's common words, minus
# every evaluation entity) and of letter clusters no syllable list makes, so that spans of
# ordinary words, long words and odd spellings are copied letter for letter.
# ----------------------------------------------------------------------------------------------

with open(os.path.join(HERE, "lexicon5.json"), encoding="utf-8") as _f:
    LEX5 = json.load(_f)
WORDS5 = _keep(LEX5["WORDS5"])
_ONSET5 = ["", "", "b", "br", "ch", "d", "dz", "f", "fl", "g", "gr", "h", "j", "k", "kt", "kl",
           "kr", "l", "m", "n", "ng", "p", "pr", "qu", "r", "s", "sch", "sk", "sl", "st", "str",
           "t", "th", "tr", "ts", "v", "w", "wr", "x", "y", "z", "zv"]
_NUC5 = ["a", "e", "i", "o", "u", "a", "e", "o", "ou", "ai", "ei", "ie", "oo", "y", "ä", "ö",
         "ü", "é", "ó", "å"]
_CODA5 = ["", "", "", "ck", "n", "m", "r", "l", "s", "t", "nd", "rk", "ng", "x", "sk", "lt",
          "nt", "ff", "tch", "gh", "z"]


def word5(rng):
    return rng.choice(WORDS5)


def cluster5(rng, lo=1, hi=3):
    """A pronounceable-ish word from onsets, vowels and codas ("ktocken", "strauv")."""
    return "".join(rng.choice(_ONSET5) + rng.choice(_NUC5) + rng.choice(_CODA5)
                   for _ in range(rng.randint(lo, hi)))


@_with_check
def place5(rng):
    r = rng.random()
    if r < 0.4:
        w = " ".join(_accent(rng, word5(rng)).capitalize() for _ in range(rng.choice([1, 1, 2])))
    elif r < 0.75:
        w = cluster5(rng).capitalize()
    elif r < 0.9:
        w = "%s %s" % (cluster5(rng, 1, 2).capitalize(), word5(rng).capitalize())
    else:
        w = "%s-%s" % (cluster5(rng, 1, 2).capitalize(), cluster5(rng, 1, 2))
    w = rng.choice(LEX3["PLACE_PRE3"]) + w + rng.choice(LEX3["PLACE_SUF3"])
    return w.lower() if rng.random() < 0.08 else w


@_with_check
def company5(rng):
    w = word5(rng) if rng.random() < 0.5 else cluster5(rng, 1, 3)
    return w.capitalize() + rng.choice(LEX5["CO_SUF5"])


def _fill5(rng, tpl, **kw):
    ws = [word5(rng) for _ in range(4)]
    return tpl.format(w=ws[0], w2=ws[1], w3=ws[2], w4=ws[3], W=ws[0].capitalize(),
                      a=rng.choice(ADJS3), vb=rng.choice(LEX5["TOPIC_V5"]),
                      vt=rng.choice(LEX3["VERBS_T"]), day=rng.choice(LEX5["DAYS5"]), **kw)


@_with_check
def topic5(rng):
    return _fill5(rng, rng.choice(LEX5["TOPIC5"]), c=city(rng))


@_with_check
def phrase5(rng):
    return _fill5(rng, rng.choice(LEX5["PHRASE5"]))


@_with_check
def subject5(rng):
    return _fill5(rng, rng.choice(LEX5["SUBJ5"]))


@_with_check
def task5(rng):
    return _fill5(rng, rng.choice(LEX5["TASK5"]))


@_with_check
def title5(rng):
    t = " ".join(word5(rng).capitalize() if rng.random() < 0.7 else word5(rng)
                 for _ in range(rng.randint(1, 4)))
    return ("The " + t) if rng.random() < 0.15 else t


@_with_check
def room5(rng):
    r = rng.random()
    if r < 0.3:
        return "%s room" % word5(rng)
    if r < 0.55:
        return "%s %s" % (word5(rng), rng.choice(LEX3["ROOM_N"]))
    if r < 0.8:
        return "%s %s" % (rng.choice(LEX3["ROOM_A"]), rng.choice(LEX3["ROOM_N"]))
    return word5(rng)
