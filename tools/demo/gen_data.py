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
model can only get right by copying.
The evaluation prompts (tests/fixtures/demo/eval_*.jsonl, tools/demo/gen_eval.py) are written apart
from this file: every entity they use is removed from the lists below, and a conversation whose
user text shares a word 4-gram with an evaluation prompt is drawn again (tools/demo/overlap.py
measures what is left). Pure Python (json, random, re, unicodedata); jinja2 only to render.

    python3 tools/demo/gen_data.py N SEED   # prints N rendered conversations (needs jinja2)
"""

import json
import os
import random
import re
import unicodedata

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
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tests", "fixtures", "demo")


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
BUNDLED_INTENT = {"get_weather": "weather", "get_time": "time", "convert_currency": "money",
                  "set_timer": "timer", "get_stock_price": "stock", "translate": "translate",
                  "send_email": "email", "search_web": "search", "calculate": "calc"}

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


import sys as _sys  # noqa: E402
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

CITIES = _keep([
    "London", "New York", "Berlin", "Madrid", "Rome", "Sydney", "Cairo", "Toronto", "Mumbai",
    "Dublin", "Vienna", "Prague", "Athens", "Chicago", "Denver", "Austin", "Miami", "Zurich",
    "Munich", "Osaka", "Kyoto", "Beijing", "Shanghai", "Delhi", "Bangkok", "Hanoi", "Manila",
    "Jakarta", "Santiago", "Bogotá", "São Paulo", "Helsinki", "Warsaw", "Budapest", "Istanbul",
    "Dubai", "Melbourne", "Auckland", "Vancouver", "Montreal", "Seattle", "Portland", "Dallas",
    "Houston", "Atlanta", "Nashville", "Detroit", "Calgary", "Ottawa", "Quebec", "Havre",
    "Nantes", "Bordeaux", "Toulouse", "Nice", "Strasbourg", "Lille", "Antwerp", "Rotterdam",
    "Eindhoven", "Cologne", "Düsseldorf", "Stuttgart", "Dresden", "Nuremberg", "Bremen", "Basel",
    "Geneva", "Lausanne", "Turin", "Milan", "Naples", "Palermo", "Florence", "Venice", "Bologna",
    "Valencia", "Málaga", "Granada", "Zaragoza", "Coimbra", "Braga", "Faro", "Split", "Sarajevo",
    "Belgrade", "Sofia", "Bucharest", "Cluj", "Kyiv", "Lviv", "Odesa", "Minsk", "Riga", "Kaunas",
    "Gdańsk", "Poznań", "Wrocław", "Malmö", "Uppsala", "Trondheim", "Odense", "Turku", "Tartu",
    "Izmir", "Ankara", "Antalya", "Tehran", "Isfahan", "Riyadh", "Jeddah", "Kuwait City",
    "Abu Dhabi", "Alexandria", "Luxor", "Khartoum", "Addis Ababa", "Mombasa", "Dar es Salaam",
    "Zanzibar", "Kinshasa", "Luanda", "Durban", "Cape Town", "Johannesburg", "Pretoria",
    "Bamako", "Abidjan", "Lomé", "Cotonou", "Niamey", "Rabat", "Fez", "Tangier", "Oran",
    "Tripoli", "Benghazi", "Bengaluru", "Chennai", "Kolkata", "Hyderabad", "Pune", "Jaipur",
    "Goa", "Colombo", "Dhaka", "Islamabad", "Kabul", "Samarkand", "Bukhara", "Kazan", "Novosibirsk",
    "Vladivostok", "Irkutsk", "Harbin", "Chengdu", "Xi'an", "Wuhan", "Guangzhou", "Shenzhen",
    "Taipei", "Kaohsiung", "Busan", "Incheon", "Sapporo", "Fukuoka", "Nagoya", "Hiroshima",
    "Okinawa", "Yangon", "Mandalay", "Penang", "Kuala Lumpur", "Brunei", "Bali", "Medan",
    "Brisbane", "Canberra", "Fremantle", "Christchurch", "Queenstown", "Rotorua", "Fiji",
    "Papeete", "Guam", "La Paz", "Sucre", "Córdoba", "Bariloche", "Montería",
    "Medellín", "Cali", "Caracas", "Panama City", "San José", "Managua", "Guatemala City",
    "Belize City", "Monterrey", "Guadalajara", "Puebla", "Tijuana", "San Diego", "Sacramento",
    "Las Vegas", "Salt Lake City", "Omaha", "Memphis", "Tampa", "Orlando", "Charleston",
    "Richmond", "Baltimore", "Pittsburgh", "Cleveland", "Buffalo", "Minneapolis", "Milwaukee",
    "Juneau", "Fairbanks", "Regina", "St. John's", "Iqaluit",
    "Kingston", "Nassau", "San Juan", "Santo Domingo", "Port of Spain", "Bridgetown",
    "Galway", "Belfast", "Cardiff", "Swansea", "Bristol", "Leeds", "Manchester", "Liverpool",
    "Oxford", "Cambridge", "York", "Inverness", "Dundee", "Stirling", "Reims", "Rouen", "Dijon",
    "Avignon", "Montpellier", "Bruges", "Namur", "Luxembourg", "Innsbruck", "Linz", "Bern",
    "Lugano", "Verona", "Pisa", "Siena", "Bari", "Catania", "Valletta", "Nicosia", "Heraklion",
    "Thessaloniki", "Plovdiv", "Varna", "Skopje", "Tirana", "Podgorica", "Pristina",
])

_SYL = ["ka", "lo", "mir", "ten", "va", "ro", "sel", "dun", "bra", "qui", "zor", "el", "an",
        "tor", "vik", "mar", "sa", "nel", "pol", "gar", "fen", "ost", "ria", "be", "li", "ush",
        "tam", "ko", "ne", "ha", "ju", "ber", "cal", "dri", "ves", "ox", "um", "ta", "per", "wen"]
_PLACE_PRE = ["", "", "", "", "Port ", "San ", "New ", "Lake ", "Saint ", "Fort ", "Upper ",
              "El ", "Mount "]
_PLACE_SUF = ["", "", "", "", "", "burg", "ville", "ton", "stad", "polis", "heim", "mouth",
              "abad", "grad", " Springs", " Falls", " Bay"]


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


CURRENCY_NAMES = {  # code -> spoken names (none of these codes is an evaluation entity)
    "USD": ["dollars", "US dollars", "bucks"], "EUR": ["euros", "euro"],
    "GBP": ["pounds", "British pounds", "pounds sterling"], "JPY": ["yen", "Japanese yen"],
    "CHF": ["Swiss francs", "francs"], "CAD": ["Canadian dollars", "loonies"],
    "AUD": ["Australian dollars", "Aussie dollars"], "CNY": ["yuan", "Chinese yuan", "renminbi"],
    "INR": ["rupees", "Indian rupees"], "SEK": ["Swedish kronor", "kronor"],
    "THB": ["baht", "Thai baht"], "EGP": ["Egyptian pounds"], "ILS": ["shekels"],
    "ARS": ["Argentine pesos"], "PHP": ["Philippine pesos"], "IDR": ["rupiah"],
    "MYR": ["ringgit"], "VND": ["dong"], "NGN": ["naira"], "KES": ["Kenyan shillings"],
    "AED": ["dirhams"], "ISK": ["Icelandic krónur"], "RON": ["lei"], "UAH": ["hryvnia"],
    "RUB": ["rubles"], "CLP": ["Chilean pesos"], "COP": ["Colombian pesos"], "PEN": ["soles"],
}
CODES = _keep(sorted(CURRENCY_NAMES) + ["SAR", "QAR", "MAD", "BGN", "RSD", "KZT", "GEL", "TWD",
                                       "PKR", "BDT", "LKR", "GHS", "TZS", "UGX", "JOD", "OMR"])
CURRENCY_NAMES = {k: v for k, v in CURRENCY_NAMES.items() if k in CODES}

LANGUAGES = _keep(["Spanish", "French", "Portuguese", "Dutch", "Korean", "Russian", "Arabic",
                   "Hindi", "Chinese", "Mandarin", "Danish", "Norwegian", "Romanian", "Ukrainian",
                   "Thai", "Hebrew", "Welsh", "Irish", "Icelandic", "Malay", "Bengali", "Urdu",
                   "Persian", "Catalan", "Basque", "Estonian", "Latvian", "Lithuanian", "Serbian",
                   "Croatian", "Slovak", "Bulgarian", "Zulu", "Yoruba", "Amharic", "Mongolian",
                   "Nepali", "Tamil", "Esperanto", "Latin", "Hausa", "Maori", "Samoan",
                   "Cantonese", "Galician", "Slovenian", "Albanian", "Armenian", "Georgian"])
PHRASES = _keep([
    "good morning", "I am hungry", "see you tomorrow", "how much does it cost", "happy birthday",
    "good night", "one coffee please", "I am lost", "the bill please", "my name is Anna",
    "I need a doctor", "the door is open", "it is very cold today", "where is the beach",
    "I like your shoes", "can you help me", "the car is broken", "we are on vacation",
    "this tastes great", "I will call you later", "the shop is closed", "do you speak English",
    "my phone is dead", "the cat is sleeping", "bring me some water", "the flight was delayed",
    "turn left at the bridge", "I lost my keys", "how old are you", "what is your name",
    "welcome to our home", "the room is too small", "I have two brothers", "it is raining again",
    "see you at the party", "the tickets are sold out", "I prefer tea", "wait for me here",
    "the garden is beautiful", "good luck tomorrow", "I am allergic to nuts", "let's go home",
])
_FIRST = ["anna", "ben", "chloe", "diego", "emma", "felix", "gita", "hugo", "iris", "jonas",
          "kira", "leo", "maya", "nils", "olga", "pablo", "rosa", "sami", "tara", "umar",
          "vera", "will", "xena", "yara", "zane", "noor", "ravi", "lena_b", "omar", "sofia"]
_DOMAINS = ["example.com", "mailbox.net", "work.org", "studio.design", "uni.edu", "shop.co",
            "team.dev", "home.net", "clinic.health", "post.eu", "acme.io", "north.ca"]
SUBJECT_WORDS = (["Monday", "Tuesday", "weekend", "budget", "team", "launch", "lunch", "trip",
                  "invoice", "contract", "party", "report", "meeting", "notes", "plans", "photos",
                  "offer", "update", "agenda", "review", "schedule", "booking", "payment",
                  "feedback", "draft", "results", "visit", "birthday", "move", "kickoff"])
_SUB_TPL = ["{A} {b}", "{A} {b} {c}", "About the {b}", "{A} and {b}", "Re: {b}", "Our {b} {c}",
            "{A}", "The {b} for {c}", "Quick {b}", "{A} {b}?"]

ROOMS = _keep(["office", "bathroom", "dining room", "den", "loft", "cellar", "lounge", "playroom",
               "laundry room", "guest room", "balcony", "workshop", "veranda", "sunroom",
               "closet", "patio", "foyer", "studio", "gym", "corridor", "back yard", "front door",
               "stairs", "master bedroom", "kids room", "shed", "terrace", "library"])
SONGS = _keep(["Let It Be", "Imagine", "Hotel California", "Billie Jean", "Sweet Caroline",
               "Yesterday", "Hallelujah", "Respect", "Thriller", "Africa", "Vogue", "Creep",
               "Jolene", "Superstition", "Stayin' Alive", "Rolling in the Deep", "Halo",
               "Bad Guy", "Blinding Lights", "Shape of You", "Hey Ya", "Toxic", "Zombie",
               "Waterloo", "La Bamba", "Volare", "Summertime", "Gymnopédie No. 1",
               "The Four Seasons", "Moonlight Sonata", "Boléro", "Für Elise"])
_TITLE_A = ["Silver", "Midnight", "Golden", "Broken", "Electric", "Quiet", "Wild", "Neon", "Lost",
            "Paper", "Crimson", "Northern", "Velvet", "Hollow", "Summer", "Winter"]
_TITLE_B = ["Road", "Heart", "River", "Dreams", "Sky", "Train", "Garden", "Echo", "Fire",
            "Letters", "Harbor", "Horizon", "Mirror", "Storm", "Waltz", "Lights"]

TASKS = _keep(["call the plumber", "pay the rent", "walk the dog", "buy milk", "check the mail",
               "stretch", "drink some water", "book the dentist", "charge my phone",
               "pick up the kids", "turn off the stove", "start the dishwasher", "call grandma",
               "send the report", "back up my laptop", "order pizza", "water the tomatoes",
               "move the car", "lock the garage", "submit the form", "rinse the rice",
               "feed the cat", "flip the steak", "join the standup", "renew my passport"])
_VERBS = ["fold", "clean", "print", "sign", "return", "pack", "email", "cancel", "review",
          "update", "fix", "collect", "wash", "sort", "label"]
_NOUNS = ["the towels", "the invoice", "the letters", "the bike", "the boxes", "the slides",
          "my notes", "the shelf", "the receipts", "the plants", "the tickets", "the order",
          "the window", "the laundry", "the budget"]

TICKERS = _keep(["AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "TSLA", "META", "IBM", "ORCL", "INTC",
                 "AMD", "NFLX", "SAP", "SONY", "UBER", "V", "MA", "JPM", "BAC", "WMT", "T",
                 "XOM", "CVX", "GE", "F", "GM", "BA", "CAT", "MMM", "HD", "LOW", "TGT", "SPOT",
                 "ABNB", "SNOW", "PLTR", "RIVN", "LYFT", "ZM", "ETSY", "EBAY", "CSCO", "MU"])

_TOPIC_TPL = ["{a} {b}", "how to {v} {n}", "history of {n}", "best {n} for {p}", "{n} near {c}",
              "why {n} {w}", "{a} {b} ideas", "cheap {n} in {c}", "{n} vs {n2}", "{c} {n}",
              "what is {n}", "{n} tips", "learn {s}", "{s} for beginners", "{a} {b} reviews"]
_TOPIC_A = ["winter", "budget", "ancient", "modern", "homemade", "electric", "vintage", "local",
            "japanese", "healthy", "quick", "easy", "family", "urban", "solar", "wooden"]
_TOPIC_B = ["camping gear", "soup recipes", "bridges", "poetry", "skateboards", "furniture",
            "sculpture", "podcasts", "hiking trails", "gardens", "puzzles", "cameras", "boats",
            "trains", "pottery", "desserts", "festivals", "libraries", "maps", "telescopes"]
_TOPIC_N = ["sourdough", "running shoes", "wind turbines", "black holes", "honey bees",
            "password managers", "electric bikes", "noise cancelling headphones", "yoga mats",
            "the roman empire", "the printing press", "jazz", "chess", "bonsai trees",
            "rainforests", "submarines", "meteor showers", "sushi", "the bicycle", "photosynthesis",
            "3d printers", "vinyl records", "tea ceremonies", "desert plants", "hot air balloons"]
_TOPIC_V = ["fix", "clean", "paint", "grow", "choose", "store", "build", "repair", "train"]
_TOPIC_W = ["matter", "disappear", "glow", "fail", "work"]
_TOPIC_S = ["spanish", "the piano", "watercolor", "python", "salsa dancing", "sign language",
            "calligraphy", "woodworking", "archery", "surfing"]
_TOPIC_P = ["kids", "students", "runners", "beginners", "travelers", "seniors", "cats"]


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


# ----------------------------------------------------------------------------------------------
# Intents: schemas (name, description, [(role, arg, type, description, enum)]) and requests
# ----------------------------------------------------------------------------------------------

def S(name, desc, *args):
    return (name, desc, list(args))


INTENTS = {
    "weather": {
        "schemas": [
            S("get_weather", "Get the current weather for a city.", ("place", "city", "string", "City name")),
            S("forecast", "Weather forecast for a location.", ("place", "location", "string", "City or town"),
              ("unit", "units", "string", None, ["celsius", "fahrenheit"])),
            S("current_conditions", "Current temperature and sky conditions in a town.", ("place", "town", "string", "")),
            S("wx", "Look up the weather.", ("place", "where", "string", "Place name")),
            S("weather_now", "Returns today's weather for a city, in the unit requested.",
              ("place", "city_name", "string", ""), ("unit", "unit", "string", "", ["celsius", "fahrenheit"])),
            S("check_weather", "Report rain, wind and temperature for a place.", ("place", "area", "string", "")),
        ],
        "generic": ["Returns the current weather for a city.", "Weather conditions in a place.",
                    "Gets temperature and conditions for the given city.",
                    "Tells you how warm or wet it is somewhere."],
    },
    "time": {
        "schemas": [
            S("get_time", "Get the local time in a city.", ("place", "city", "string", "City name")),
            S("local_time", "Current local time for a location.", ("place", "location", "string", "")),
            S("world_clock", "What the clock says right now in a town.", ("place", "town", "string", "Town")),
            S("time_in", "Returns the hour and minute in a city.", ("place", "city_name", "string", "")),
            S("clock", "Look up the current time somewhere.", ("place", "where", "string", "")),
        ],
        "generic": ["Returns the local time of a city.", "Current time in a place.",
                    "Gives the hour it is now in the given city.", "Clock lookup for a city."],
    },
    "money": {
        "schemas": [
            S("convert_currency", "Convert an amount between currencies.",
              ("amount", "amount", "number", "Amount to convert"), ("src", "from_currency", "string", "ISO code to convert from"),
              ("dst", "to_currency", "string", "ISO code to convert to")),
            S("exchange", "Exchange money into another currency.", ("amount", "sum", "number", ""),
              ("src", "source", "string", "Currency code"), ("dst", "target", "string", "Currency code")),
            S("currency_convert", "Currency conversion at today's rate.", ("amount", "money", "number", ""),
              ("src", "from", "string", "ISO 4217 code"), ("dst", "to", "string", "ISO 4217 code")),
            S("convert_money", "Converts a sum of money.", ("src", "have", "string", "currency code you have"),
              ("dst", "want", "string", "currency code you want"), ("amount", "how_much", "number", "")),
        ],
        "generic": ["Converts money from one currency to another.", "Currency exchange.",
                    "Turns an amount in one currency into another currency."],
    },
    "timer": {
        "schemas": [
            S("set_timer", "Start a countdown timer.", ("min", "minutes", "integer", "Duration in minutes")),
            S("start_timer", "Starts a timer.", ("min", "duration_minutes", "integer", "")),
            S("countdown", "Count down a number of minutes, then ring.", ("min", "mins", "integer", "")),
            S("alarm_in", "Ring an alarm after some minutes.", ("min", "after_minutes", "integer", "")),
        ],
        "generic": ["Starts a countdown timer in minutes.", "Rings after the given number of minutes.",
                    "Timer."],
    },
    "stock": {
        "schemas": [
            S("get_stock_price", "Get the latest price of a stock.", ("sym", "symbol", "string", "Ticker symbol")),
            S("stock_quote", "Latest quote for a ticker.", ("sym", "ticker", "string", "")),
            S("share_price", "Current share price of a listed company.", ("sym", "code", "string", "Exchange ticker")),
            S("market_price", "Price of a security on the stock market.", ("sym", "ticker_symbol", "string", "")),
        ],
        "generic": ["Returns the latest price of a stock ticker.", "Stock quotes.",
                    "Looks up what a share trades at."],
    },
    "translate": {
        "schemas": [
            S("translate", "Translate text into another language.", ("text", "text", "string", "Text to translate"),
              ("lang", "target_language", "string", "Language to translate into")),
            S("translate_text", "Translates a sentence.", ("text", "sentence", "string", ""),
              ("lang", "language", "string", "Target language")),
            S("to_language", "Render words in a different language.", ("lang", "lang", "string", ""),
              ("text", "phrase", "string", "")),
        ],
        "generic": ["Translates text into a target language.", "Translation between languages."],
    },
    "email": {
        "schemas": [
            S("send_email", "Send a short email.", ("to", "to", "string", "Recipient address"),
              ("subj", "subject", "string", "Subject line")),
            S("email", "Email someone.", ("to", "recipient", "string", ""), ("subj", "title", "string", "")),
            S("compose_mail", "Write and send a mail message.", ("to", "address", "string", "Email address"),
              ("subj", "topic", "string", "Subject")),
        ],
        "generic": ["Sends an email to an address with a subject.", "Outgoing mail."],
    },
    "search": {
        "schemas": [
            S("search_web", "Search the web.", ("q", "query", "string", "Search query")),
            S("internet_search", "Search the internet for pages.", ("q", "terms", "string", "")),
            S("find_online", "Find web pages about something.", ("q", "search", "string", "What to look for")),
            S("google", "Web search engine.", ("q", "query", "string", "")),
        ],
        "generic": ["Searches the web and returns links.", "Web search.",
                    "Finds pages on the internet about a topic."],
    },
    "calc": {
        "schemas": [
            S("calculate", "Evaluate an arithmetic expression.", ("expr", "expression", "string", "Expression such as 2 + 2")),
            S("math", "Do arithmetic.", ("expr", "expr", "string", "")),
            S("calculator", "A calculator for + - * / expressions.", ("expr", "formula", "string", "")),
            S("evaluate", "Computes the value of a math expression.", ("expr", "input", "string", "")),
        ],
        "generic": ["Evaluates arithmetic like 3 * 4.", "Calculator.", "Does math on numbers."],
    },
    "lights": {
        "schemas": [
            S("set_lights", "Turn the lights in a room on or off.", ("room", "room", "string", ""),
              ("on", "on", "boolean", "true for on, false for off")),
            S("lamp", "Switch a lamp.", ("room", "location", "string", "Where the lamp is"),
              ("on", "power", "boolean", "")),
            S("light_switch", "Controls the lighting of a part of the house.", ("on", "enabled", "boolean", ""),
              ("room", "area", "string", "")),
        ],
        "generic": ["Switches the lights of a room on or off.", "Home lighting control."],
    },
    "music": {
        "schemas": [
            S("play_song", "Play a song.", ("song", "title", "string", "Song title"), ("shuffle", "shuffle", "boolean", "")),
            S("music", "Starts music playback.", ("song", "track", "string", ""), ("shuffle", "random_order", "boolean", "")),
            S("start_playback", "Play a track on the speakers.", ("song", "name", "string", "Track name"),
              ("shuffle", "repeat", "boolean", "play on repeat")),
        ],
        "generic": ["Plays a song by title.", "Music player."],
    },
    "reminder": {
        "schemas": [
            S("remind_me", "Remind the user of a task later.", ("task", "task", "string", "What to do"),
              ("min", "in_minutes", "integer", "")),
            S("add_reminder", "Creates a reminder after a delay in minutes.", ("task", "note", "string", ""),
              ("min", "delay", "integer", "minutes")),
            S("reminder", "Schedule a reminder.", ("min", "minutes", "integer", ""), ("task", "message", "string", "")),
        ],
        "generic": ["Reminds you about something after some minutes.", "Reminders."],
    },
    "climate": {
        "schemas": [
            S("set_climate", "Set the heating or air conditioning.", ("temp", "temperature", "number", "Degrees"),
              ("mode", "mode", "string", "", ["heat", "cool", "auto"])),
            S("hvac", "Control the home climate.", ("mode", "setting", "string", "", ["heat", "cool", "auto"]),
              ("temp", "target", "number", "Target temperature")),
            S("air_control", "Heat or cool the house to a temperature.", ("temp", "degrees", "number", ""),
              ("mode", "kind", "string", "", ["heat", "cool", "auto"])),
        ],
        "generic": ["Sets the thermostat temperature and mode.", "Heating and cooling."],
    },
    "news": {
        "schemas": [
            S("get_news", "Latest news headlines on a topic.", ("topic", "topic", "string", ""),
              ("count", "limit", "integer", "How many headlines")),
            S("headlines", "Fetch news articles.", ("topic", "about", "string", ""), ("count", "n", "integer", "")),
        ],
        "generic": ["Returns recent news headlines about a subject.", "News feed."],
    },
    "define": {
        "schemas": [
            S("define_word", "Dictionary definition of a word.", ("word", "word", "string", "")),
            S("dictionary", "Look a word up in the dictionary.", ("word", "term", "string", "")),
        ],
        "generic": ["Gives the dictionary meaning of a word.", "Dictionary."],
    },
    "lock": {
        "schemas": [
            S("set_lock", "Lock or unlock a door.", ("door", "door", "string", ""), ("on", "locked", "boolean", "")),
            S("door_lock", "Smart lock control.", ("on", "lock", "boolean", "true locks, false unlocks"),
              ("door", "which", "string", "")),
        ],
        "generic": ["Locks or unlocks a door of the house.", "Door locks."],
    },
}
GENERIC_NAMES = [n for n in (
    ["tool_%d" % i for i in range(1, 10)] + ["fn_%s" % c for c in "xyzpq"] +
    ["handler", "action", "service", "util", "run", "do_task", "api", "op", "function",
     "assistant_tool", "t1", "t2", "f", "g", "task", "call", "plugin", "skill", "endpoint",
     "module", "command", "exec", "proc", "worker", "lookup_%d" % 2, "service_b", "helper_2"])
    if n not in EVAL_TOOL_NAMES]
GENERIC_ARGS = ["arg", "value_1", "x", "data", "s", "param", "input_text", "payload", "p"]
DOORS = ["front door", "back door", "side gate", "garden gate", "patio door", "cellar door"]
WORDS_TO_DEFINE = ["serendipity", "ephemeral", "ubiquitous", "quixotic", "sonder", "petrichor",
                   "laconic", "gregarious", "halcyon", "melancholy", "zenith", "nostalgia",
                   "paradigm", "ambiguous", "resilient", "verbose", "pragmatic", "esoteric"]


_NAME_PRE = ["get", "fetch", "query", "check", "find", "do", "run", "call", "read", "make",
             "set", "my", "api", "svc", "use", "ask", "go", "x"]


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
OPENERS = ["", "", "", "", "", "", "Hi, ", "Hey, ", "Please, ", "Um, ", "OK, ", "Quick: ",
           "I wonder, ", "Hello! ", "Sorry to bother you, ", "Right, ", "Yo, ", "Well, ",
           "Question: ", "hey there, ", "Good morning. ", "Listen, ", "Hi assistant. ", "Oh, "]
CLOSERS = ["", "", "", "", "", "", "?", " please", " pls", " thanks", " thank you", "!", " now",
           " for me", " real quick", " thx!", ", ty", " ... thanks in advance", " :-)", " ok?"]


def typo(rng, text, keep):
    """One or two typos in words that are not part of an entity."""
    ws = text.split(" ")
    idx = [i for i, w in enumerate(ws) if len(w) >= 4 and w.isalpha() and not any(
        w.lower() in fold(k) for k in keep)]
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
    o = rng.choice(OPENERS)
    if o and o[-2:] == ", " and rng.random() < 0.6 and not any(text.startswith(k) for k in keep):
        text = text[0].lower() + text[1:]
    text = o + text
    c = rng.choice(CLOSERS)
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
    return text, lower


def pick(rng, tpls, **kw):
    return rng.choice(tpls).format(**kw)


WEATHER_Q = [
    "What's the weather like in {c}?", "How's the weather in {c} today?", "weather for {c}",
    "{c} weather today?", "Is it going to rain in {c}?", "Is it hot in {c} right now?",
    "How cold does it get in {c} today?", "Tell me the weather in {c}.",
    "I'd like the weather forecast for {c}.", "Should I bring a coat to {c} today?",
    "what are conditions like in {c}", "Any snow in {c} today?", "Is it windy in {c}?",
    "Give me the current weather for {c}.", "Temperature in {c}?", "{c}, how warm is it?",
    "Is the sun out in {c}?", "Do you know if it's raining in {c}?", "{c}: rain or shine?",
    "How's the sky looking in {c}?", "What's the temperature outside in {c}?",
    "Heading to {c} later, what's the weather doing?", "report the weather in {c}",
    "forecast {c}", "Is it humid in {c} today?", "Weather check for {c}, please.",
    "how many degrees is it in {c}", "Could it storm in {c} this evening?",
    "Is {c} sunny today?", "What is it like outside in {c} at the moment?",
]
WEATHER_UNIT = [" In {u}, please.", " Give it to me in {u}.", " ({u})", ", in {u}",
                " Use {u}."]
TIME_Q = [
    "What's the time in {c}?", "What's the current time in {c}?", "local time {c}",
    "time in {c} now?", "Tell me what time it is in {c}.", "Do you know what hour it is in {c}?",
    "{c} time please", "Is it late at night in {c}?", "Is it already evening in {c}?",
    "What does the clock say in {c}?", "How late is it in {c} right now?",
    "I need the local time for {c}.", "Give me the time in {c}.", "{c}: what time is it there?",
    "Can I call someone in {c} now, or is it too early? What time is it there?",
    "current local time in {c}", "Is it noon yet in {c}?", "check the time in {c}",
    "What hour is it right now in {c}?", "time {c}", "what's the hour over in {c}",
]
MONEY_Q = [
    "Convert {a} {s} to {d}.", "How much is {a} {s} in {d}?", "{a} {s} to {d}",
    "What is {a} {s} worth in {d}?", "change {a} {s} into {d}", "{a} {s} in {d}?",
    "How many {d} would I get for {a} {s}?", "Exchange {a} {s} for {d}, please.",
    "I have {a} {s}. How much is that in {d}?", "convert {a} {s} -> {d}",
    "What do I get in {d} for {a} {s}?", "{a} {s} is how many {d}?",
    "Turn {a} {s} into {d}.", "Can you convert {a} {s} into {d} for me?",
]
TIMER_Q = [
    "Set a {m} minute timer.", "Timer for {m} minutes please.", "start a timer, {m} min",
    "Count down {m} minutes.", "{m} minutes timer", "Can you time {m} minutes for me?",
    "Wake me up in {m} minutes.", "Set an alarm to go off in {m} minutes.",
    "Start counting {m} minutes.", "I need a timer of {m} minutes for the eggs.",
    "Please set the timer to {m} minutes.", "{m} min timer now", "Ring in {m} minutes.",
]
STOCK_Q = [
    "What's the stock price of {t}?", "How much is {t} stock?", "{t} price?", "quote {t}",
    "Check the share price for {t}.", "How are {t} shares doing?", "What is {t} at right now?",
    "Get me the latest price of {t}.", "stock {t}", "Is {t} up today? Give me the price.",
    "What does a {t} share cost?", "Current price for ticker {t}, please.",
]
TRANSLATE_Q = [
    "Translate \"{p}\" to {l}.", "How do I say \"{p}\" in {l}?", "\"{p}\" in {l}?",
    "Can you translate \"{p}\" into {l}?", "What's \"{p}\" in {l}?", "{l} for \"{p}\"?",
    "Translate to {l}: \"{p}\"", "How would you say \"{p}\" in {l}?",
    "I need \"{p}\" in {l}, please.", "translate \"{p}\" {l}", "Say \"{p}\" in {l}.",
    "Please translate the phrase \"{p}\" into {l}.", "What is the {l} for \"{p}\"?",
]
EMAIL_Q = [
    "Email {e} with subject \"{s}\".", "Send an email to {e} about \"{s}\".",
    "Please write to {e}, subject \"{s}\".", "Send {e} a mail titled \"{s}\".",
    "Mail {e}: \"{s}\"", "Shoot an email over to {e} with the subject \"{s}\".",
    "compose an email to {e}, subject: {s}", "Send a message to {e} titled \"{s}\".",
    "email {e} \"{s}\"", "Can you email {e}? The subject is \"{s}\".",
    "Write {e} an email with the title \"{s}\".",
]
SEARCH_Q = [
    "Search the web for {q}.", "Look up {q}.", "Find information on {q}.", "search: {q}",
    "Can you search for {q}?", "google {q}", "Find me pages about {q}.",
    "Look online for {q}, please.", "Search for {q}.", "web search {q}",
    "I want to read about {q}. Search the internet.", "Do a search on {q}.",
    "Please look up {q} online.", "Find {q} on the internet.", "search the internet for {q}",
]
CALC_OPS = {"+": ["+", "plus", "and"], "-": ["-", "minus", "take away"],
            "*": ["*", "times", "x", "multiplied by"], "/": ["/", "divided by", "over"]}
CALC_WORDS = [("sum of {a} and {b}", "+"), ("product of {a} and {b}", "*"),
              ("difference between {a} and {b}", "-"), ("{a} multiplied with {b}", "*"),
              ("{a} split {b} ways", "/"), ("half of {a}", "/2"), ("double {a}", "*2")]
CALC_Q = [
    "What is {a} {o} {b}?", "Calculate {a} {o} {b}.", "compute {a} {o} {b}",
    "How much is {a} {o} {b}?", "Work out {a} {o} {b} for me.", "{a} {o} {b} = ?",
    "what does {a} {o} {b} make", "Solve {a} {o} {b}.", "calc {a} {o} {b}",
    "Can you do {a} {o} {b}?", "Tell me {a} {o} {b}.",
]
LIGHTS_ON = ["Turn the {r} lights on.", "Switch on the light in the {r}.", "lights on {r}",
             "Can you light up the {r}?", "Please turn on the {r} lamp.", "{r} light on",
             "It's dark in the {r}, switch the light on.", "Put the lights on in the {r}."]
LIGHTS_OFF = ["Turn the {r} lights off.", "Switch off the light in the {r}.", "lights off {r}",
              "Please turn off the {r} lamp.", "{r} light off", "No more light in the {r}, off.",
              "Shut off the lights in the {r}.", "Put the {r} lights out."]
MUSIC_Q = ["Play {s}.", "Put on {s}.", "Could you play {s}?", "play {s} please",
           "I'd love to listen to {s}.", "Start playing {s}.", "Music: {s}", "{s}, play it",
           "Can we have {s} on the speakers?"]
MUSIC_SHUF = [" on shuffle", " and shuffle", ", shuffled", " with shuffle on"]
REMIND_Q = ["Remind me to {k} in {m} minutes.", "In {m} minutes, remind me to {k}.",
            "remind me {k} in {m} min", "Set a reminder to {k} in {m} minutes.",
            "Don't let me forget to {k}, {m} minutes from now.", "{m} minutes: {k}",
            "Can you remind me in {m} minutes to {k}?"]
CLIMATE_Q = {
    "heat": ["Heat the house to {t} degrees.", "Warm it up to {t}.", "heating on, {t} degrees",
             "Make it {t} degrees, it's freezing.", "Turn up the heat to {t}.",
             "I'm cold, heat to {t} please."],
    "cool": ["Cool the place to {t} degrees.", "Air conditioning to {t}.", "AC on, {t} degrees",
             "It's too hot, bring it down to {t}.", "Chill the room to {t} degrees.",
             "Set the AC to cool at {t}."],
    "auto": ["Keep it at {t} degrees automatically.", "Thermostat on auto at {t}.",
             "Auto mode, {t} degrees."],
}
NEWS_Q = ["Any news about {n}?", "Show me the latest headlines on {n}.", "news {n}",
          "What's new with {n}?", "Give me {k} headlines about {n}.", "Top {k} news on {n}",
          "Latest {n} news please."]
DEFINE_Q = ["What does {w} mean?", "Define {w}.", "definition of {w}", "Meaning of the word {w}?",
            "Look up {w} in the dictionary.", "What is the meaning of \"{w}\"?"]
LOCK_ON = ["Lock the {d}.", "Please lock the {d}.", "{d}: lock it", "Is the {d} locked? Lock it."]
LOCK_OFF = ["Unlock the {d}.", "Please open the lock on the {d}.", "unlock {d}",
            "Let me in, unlock the {d}."]

# ---- follow-ups after an exchange about one entity ----
FOLLOW_SAME = ["What about {c}?", "And in {c}?", "how about {c}", "Same for {c}.",
               "And {c}?", "Now do {c}.", "ok and {c}?"]
FOLLOW_THERE = {"weather": ["And the weather there?", "How's the weather there?",
                            "is it raining there?", "And is it cold there?"],
                "time": ["And what time is it there?", "What's the local time there?",
                         "time there?", "And the time there now?"]}


def request(rng, intent, place=None):
    """(user text, {role: value}, result dict, answer text, entity strings)."""
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


CANT = {"weather": "check the weather", "time": "look up the time",
        "money": "convert currencies", "timer": "set timers", "stock": "look up stock prices",
        "translate": "translate text", "email": "send emails", "search": "search the web",
        "calc": "run calculations", "lights": "control the lights", "music": "play music",
        "reminder": "set reminders", "climate": "change the thermostat", "news": "fetch news",
        "define": "look up definitions", "lock": "control door locks"}
REFUSE = ["Sorry, I can't {x} here.", "I don't have a tool to {x}, sorry.",
          "Sorry, none of my tools can {x}.", "I can't {x} with the tools I have."]

# ---- plain chat (no tool, whatever is offered) ----
CHAT = [
    ("Hello there!", "Hello! How can I help you today?"), ("hey", "Hey! What can I do for you?"),
    ("Hiya", "Hi! What do you need?"), ("Greetings.", "Greetings! How can I help?"),
    ("How are you doing?", "I'm doing well, thanks. How can I help?"),
    ("How's your day?", "Going fine, thanks for asking! What can I do for you?"),
    ("Thanks a lot!", "You're welcome!"), ("thank u", "Happy to help!"),
    ("Cheers!", "Anytime!"), ("Many thanks.", "You're welcome."), ("thx", "No problem!"),
    ("Great, that helps.", "Glad it helped!"), ("Perfect.", "Great!"), ("ok", "Okay. Anything else?"),
    ("okay thanks", "You're welcome. Anything else?"), ("Got it.", "Great. Anything else?"),
    ("Bye!", "Goodbye! Have a nice day."), ("See you.", "See you! Take care."),
    ("Good night", "Good night! Sleep well."), ("Talk later", "Talk to you later!"),
    ("Who made you?", "I'm a small demo model trained for tandem."),
    ("What are you?", "I'm a small demo assistant. I can chat a little and call the tools I am given."),
    ("What's your purpose?", "I answer short questions and call the tools I am offered."),
    ("Are you human?", "No, I'm a small language model."),
    ("Do you have feelings?", "No, I'm just a small model, but thanks for asking."),
    ("What can you do for me?", "I can answer simple questions and use the tools you give me."),
    ("Tell me a joke.", "Why did the scarecrow win an award? Because he was outstanding in his field."),
    ("Make me laugh.", "I told my computer a joke about UDP. I'm not sure it got it."),
    ("Say something funny.", "Parallel lines have so much in common. It's a shame they'll never meet."),
    ("Give me a fun fact.", "Octopuses have three hearts."),
    ("Tell me something interesting.", "Honey never spoils if it is sealed well."),
    ("Recommend a book.", "Try The Hobbit by J. R. R. Tolkien. It is a short, fun adventure."),
    ("Suggest a movie for tonight.", "How about Spirited Away? It is beautiful and fun."),
    ("What should I cook?", "A simple pasta with garlic, olive oil and tomatoes is quick and good."),
    ("Write a short poem.", "Quiet morning light, a cup of tea, the day begins slowly for me."),
    ("Give me a motivational quote.", "Small steps every day add up to big results."),
    ("How do I stay focused?", "Put your phone away, work in short blocks and take small breaks."),
    ("Any tips for a job interview?", "Prepare examples of your work, ask questions and be on time."),
    ("What is 2 plus 2?", "2 plus 2 is 4."), ("What color is grass?", "Grass is green."),
    ("How many days are in a week?", "There are seven days in a week."),
    ("How many hours are in a day?", "A day has 24 hours."),
    ("What do cows drink?", "Cows drink water."), ("What do bees make?", "Bees make honey."),
    ("Which planet is closest to the sun?", "Mercury is the closest planet to the sun."),
    ("How many sides does a triangle have?", "A triangle has three sides."),
    ("What is the boiling point of water?", "Water boils at 100 °C at sea level."),
    ("What's the largest ocean?", "The Pacific is the largest ocean."),
    ("Who wrote Hamlet?", "Hamlet was written by William Shakespeare."),
    ("Who was Albert Einstein?", "A physicist, famous for the theory of relativity."),
    ("What is photosynthesis?", "Plants turning light, water and carbon dioxide into sugar and oxygen."),
    ("Explain gravity simply.", "Gravity is the pull that makes things fall toward each other."),
    ("I'm tired.", "Maybe take a short break and drink some water."),
    ("I'm happy today!", "That's great to hear!"), ("I feel sad.", "I'm sorry. I hope your day gets better."),
    ("It's my birthday!", "Happy birthday! I hope it's a great one."),
    ("I like trains.", "Trains are great! Anything you'd like to know?"),
    ("The sunset is beautiful tonight.", "That sounds lovely. Enjoy it!"),
    ("My cat is cute.", "I'm sure she is!"), ("Do you like pizza?", "I don't eat, but pizza sounds popular."),
    ("Can you keep a secret?", "I don't remember anything after our chat, so yes."),
    ("What's the meaning of life?", "Many say it's what you make of it."),
    ("Are you smart?", "I'm a very small model, so only a little."),
    ("Tell me about yourself.", "I'm a tiny demo assistant that can chat and call tools."),
    ("lol", "Glad you're amused!"), ("hmm", "Take your time. What would you like?"),
    ("test", "Test received. How can I help?"), ("?", "How can I help you?"),
    ("never mind", "No problem."), ("forget it", "Okay."),
    ("Nice work.", "Thank you!"), ("You're helpful.", "Thanks, happy to help."),
    ("What day comes after Monday?", "Tuesday comes after Monday."),
    ("Why do leaves change color?", "In autumn trees stop making green chlorophyll, so other colors show."),
    ("Is the earth round?", "Yes, the Earth is round, a slightly flattened sphere."),
    ("Can dogs see color?", "Yes, dogs see some colors, mostly blues and yellows."),
    ("What language do they speak in Brazil?", "They speak Portuguese in Brazil."),
    ("How far is the moon?", "About 384,000 km from Earth."),
    ("What is a noun?", "A noun is a word for a person, place or thing."),
    ("Give me a word that rhymes with cat.", "Hat rhymes with cat."),
    ("Spell apple.", "A-P-P-L-E."), ("Count to five.", "1, 2, 3, 4, 5."),
    ("What is rain?", "Rain is water falling from clouds."),
    ("Do you like the snow?", "Snow is pretty! I don't feel cold, though."),
    ("I hate mondays", "Mondays can be hard. Hope yours goes well."),
    ("What's a good name for a fish?", "How about Bubbles?"),
    ("How do airplanes fly?", "Their wings push air down, which lifts the plane up."),
    ("Should I learn to code?", "Sure! Start with small projects you enjoy."),
    ("What is money?", "Money is what people use to trade for goods and services."),
    ("What is time?", "Time is how we measure the order and length of events."),
    ("What is music?", "Music is sound organised in rhythm and melody."),
    ("How do clocks work?", "They count a steady beat, like a swinging pendulum or a quartz crystal."),
    ("Why is the ocean salty?", "Rivers carry dissolved minerals into the sea and they stay there."),
]
COUNTRIES = _keep(["Japan", "Spain", "Germany", "Peru", "Norway", "Egypt", "Kenya", "Portugal",
                   "Ireland", "Austria", "Greece", "Canada", "Australia", "Chile", "Poland",
                   "Hungary", "Finland", "Iceland", "Mexico", "India", "Brazil", "Argentina",
                   "Turkey", "Morocco", "Thailand", "Vietnam", "Nigeria", "Ghana", "Denmark"])
CAPITALS = {"Japan": "Tokyo", "Spain": "Madrid", "Germany": "Berlin", "Peru": "Lima",
            "Norway": "Oslo", "Egypt": "Cairo", "Kenya": "Nairobi", "Portugal": "Lisbon",
            "Ireland": "Dublin", "Austria": "Vienna", "Greece": "Athens", "Canada": "Ottawa",
            "Australia": "Canberra", "Chile": "Santiago", "Poland": "Warsaw",
            "Hungary": "Budapest", "Finland": "Helsinki", "Iceland": "Reykjavík",
            "Mexico": "Mexico City", "India": "New Delhi", "Brazil": "Brasília",
            "Argentina": "Buenos Aires", "Turkey": "Ankara", "Morocco": "Rabat",
            "Thailand": "Bangkok", "Vietnam": "Hanoi", "Nigeria": "Abuja", "Ghana": "Accra",
            "Denmark": "Copenhagen"}


COUNTRIES = [c for c in COUNTRIES if not seen_eval(CAPITALS[c])]


# Variant 2: open-ended questions and requests no tool serves, composed from parts, so that an
# unfamiliar question reads as chat rather than as a request for the nearest tool.
_Q_THINGS = ["the moon", "volcanoes", "rainbows", "honey", "whales", "glaciers", "bread",
             "the internet", "magnets", "thunder", "coffee", "penguins", "bicycles", "ice",
             "fireflies", "the ocean", "deserts", "owls", "mountains", "clouds", "sand", "bees",
             "trees", "mirrors", "stars", "soap", "music", "dreams", "tides", "seeds"]
_Q_FORMS = ["a short poem", "a limerick", "two lines", "a tiny story", "a riddle", "a slogan"]
_Q_TPL = ["Why do {t} exist?", "How do {t} work?", "Tell me something about {t}.",
          "What are {t} made of?", "Explain {t} to a child.", "Are {t} dangerous?",
          "Write {f} about {t}.", "Make up {f} about {t}.", "What do you think of {t}?",
          "Do you like {t}?", "Describe {t} in three words.", "Fun fact about {t}, please.",
          "Give me a tip about {t}.", "Is it true that {t} are old?", "Compare {t} and {t2}.",
          "Which is older, {t} or {t2}?", "What's so special about {t}?"]
_Q_ANS = ["Good question! In short: {t} are part of nature, and people have wondered about "
          "them for a long time.", "Here you go: {t}, quiet and bright, a small wonder of the "
          "night.", "I'd say {t} are fascinating. Want to know more?",
          "Short answer: it depends, but {t} are mostly harmless and interesting.",
          "Sure! {T} have been around for a very long time."]


def open_question(rng):
    t, t2 = rng.sample(_Q_THINGS, 2)
    q = pick(rng, _Q_TPL, t=t, t2=t2, f=rng.choice(_Q_FORMS))
    return q, pick(rng, _Q_ANS, t=t, T=t.capitalize())


def plain_turn(rng):
    r = rng.random()
    if VARIANT["v"] == 2 and rng.random() < 0.35:
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

SYSTEMS = ["", "", "", "You are a helpful assistant.", "You are a concise assistant.",
           "Answer briefly. Use tools when they help.", "You are a friendly home assistant.",
           "Be polite.", "Use the tools when the user asks for something they can do."]
ALL_INTENTS = sorted(INTENTS)
PAIRS = [("weather", "time"), ("money", "calc"), ("search", "news"), ("timer", "reminder"),
         ("lights", "lock"), ("music", "search"), ("translate", "define"), ("stock", "money"),
         ("climate", "weather"), ("email", "reminder")]


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
        vals = {k: (v.lower() if isinstance(v, str) and k not in ("src", "dst", "unit", "mode")
                    else v) for k, v in vals.items()}
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
        if offered and r < 0.6:
            m, i, v = exchange(rng, offered)
            msgs += m
            last = (i, v)
        elif r < 0.75:
            msgs += refusal(rng, offered)
            last = None
        else:
            msgs += plain(rng)
    return {"messages": msgs, "tools": [o[0] for o in offered]}


def clean(conv):
    """False when a user turn shares a word 4-gram with an evaluation prompt."""
    return not any(grams4(m["content"]) & EVAL_GRAMS for m in conv["messages"]
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
    n, seed = int(_sys.argv[1]), int(_sys.argv[2])
    tpl = make_env()
    for c in corpus(n, seed):
        print(render(tpl, c["messages"], c["tools"], False))
