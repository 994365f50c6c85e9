#!/usr/bin/env python3
"""The demo model's generated evaluation prompts (tests/fixtures/demo/eval_gen.jsonl).

Written apart from the training generator (gen_data.py) and sharing nothing with it: its own
phrasings, fillers and entities (cities, topics, titles, people, tickers), none of which the training
data contains (gen_data.py drops every training conversation that mentions an evaluation entity or
shares a word 4-gram with an evaluation prompt; tools/demo/overlap.py measures what is left).
Tools come from tests/fixtures/demo/eval_tools.json (the bundled 9 plus schemas written for the
evaluation: other names, argument names, generic names whose description tells them apart).

    python3 tools/demo/gen_eval.py > tests/fixtures/demo/eval_gen.jsonl     # seeded, reproducible

Row: {"id", "kind": tool|plain|unavailable|after_result, "tools": [names, in the offered order],
      "messages": [...], "expected": {"name", "arguments"} | null, "entities": [str]}.
An expected string argument may be a list of accepted values (compared case- and
accent-insensitively); numbers compare by value.
"""

import json
import os
import random
import sys

SEED = 20261203
HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tests", "fixtures", "demo", "eval_tools.json")

TOWNS = ["Valparaíso", "Tromsø", "Łódź", "Ouagadougou", "Ulaanbaatar", "Kigali", "Asunción",
         "Tegucigalpa", "Bratislava", "Ljubljana", "Vilnius", "Tallinn", "Chișinău", "Yerevan",
         "Baku", "Almaty", "Bishkek", "Dushanbe", "Thimphu", "Vientiane", "Phnom Penh", "Davao",
         "Cebu", "Surabaya", "Da Nang", "Chiang Mai", "Kandy", "Chittagong", "Lahore", "Muscat",
         "Doha", "Manama", "Amman", "Beirut", "Tunis", "Algiers", "Dakar", "Accra", "Lagos",
         "Kampala", "Lusaka", "Harare", "Windhoek", "Gaborone", "Maputo", "Antananarivo",
         "Port Louis", "Suva", "Nouméa", "Hobart", "Darwin", "Cairns", "Dunedin", "Nuuk",
         "Yellowknife", "Halifax", "Saskatoon", "Boise", "Tucson", "Savannah", "Albuquerque",
         "Spokane", "Duluth", "Mérida", "Oaxaca", "Cusco", "Arequipa", "Cartagena", "Maracaibo",
         "Salvador", "Recife", "Rosario", "Mendoza", "Punta Arenas", "Ushuaia", "Göteborg",
         "Aarhus", "Tampere", "Bergamo", "Brno", "Graz", "Salzburg", "Lyon", "Marseille",
         "Bilbao", "Sevilla", "Porto Alegre", "Leipzig", "Utrecht", "Ghent", "Cork", "Aberdeen"]
TOPICS = ["sourdough starter tips", "ancient Roman aqueducts", "how glaciers form",
          "best hiking boots", "knitting for beginners", "used bicycle prices",
          "volcano eruption history", "how to repot an orchid", "quantum computing basics",
          "beekeeping equipment", "medieval castle architecture", "kayak rental nearby",
          "northern lights forecast", "how to brew kombucha", "coral reef bleaching",
          "tiny house designs", "board games for two", "the Silk Road trade routes",
          "composting in apartments", "lighthouse history"]
PHRASES = ["the museum opens at nine", "my suitcase is blue", "please close the window",
           "the soup is too salty", "we missed the last bus", "I would like a window seat",
           "where can I rent a bike", "the concert starts soon"]
LANGS = ["Swedish", "Polish", "Turkish", "Vietnamese", "Greek", "Hungarian", "Indonesian",
         "Czech", "Tagalog", "Finnish"]
PEOPLE = [("priya", "lumen.dev"), ("oskar", "fjord.no"), ("wen", "harbor.cn"), ("lucia", "vela.es"),
          ("kofi", "baobab.gh"), ("ines", "atlas.pt"), ("yusuf", "delta.tr"), ("mira", "orbit.io")]
SUBJECTS = ["Quarterly numbers", "Garden party", "Car pickup", "Rent reminder", "Tickets for Sunday",
            "Conference slides", "Broken heater", "Holiday photos"]
TICKERS = ["ADBE", "CRM", "QCOM", "TXN", "AVGO", "SBUX", "NKE", "DIS", "PEP", "COST"]
CODES = ["NOK", "DKK", "PLN", "CZK", "HUF", "BRL", "MXN", "ZAR", "TRY", "KRW", "SGD", "HKD"]
ROOMS = ["living room", "attic", "basement", "hallway", "nursery", "study", "porch", "pantry"]
SONGS = ["Yellow Submarine", "Dancing Queen", "Purple Rain", "Wonderwall", "Clair de Lune",
         "Take Five", "Fly Me to the Moon", "Smooth Criminal"]
CHORES = ["water the ferns", "feed the goldfish", "move the laundry", "check the oven",
          "take out the recycling", "stretch my legs"]

OPEN = ["", "", "", "Hmm, ", "Quick question - ", "Alright, ", "Hey assistant, ", "So ",
        "Excuse me, ", "Okay so "]
CLOSE = ["", "", "", " thx", " cheers", " if you can", " asap", " :)", " please and thank you"]


def weather(rng):
    c = rng.choice(TOWNS)
    return rng.choice([
        "Any chance of rain over {c} this afternoon?", "{c}: what's it like outside?",
        "how chilly is it in {c} at the moment", "Should I pack an umbrella for {c}?",
        "temperature check for {c}", "Is {c} sweltering today?",
        "What are the skies doing above {c}?", "{c} forecast?"]).format(c=c), c


def clock(rng):
    c = rng.choice(TOWNS)
    return rng.choice([
        "What hour is it over in {c}?", "{c} local clock right now?",
        "If I phoned someone in {c} now, what time would it be there?",
        "is it night already in {c}", "current hour for {c}", "time check: {c}"]).format(c=c), c


def money(rng):
    a = rng.choice([rng.randint(2, 90), rng.randint(2, 40) * 25, rng.randint(100, 9000)])
    s, d = rng.sample(CODES, 2)
    return rng.choice([
        "If I swap {a} {s}, how many {d} do I get?", "{a} {s} equals how much {d}?",
        "need {a} {s} exchanged to {d}", "exchange rate question: {a} {s} into {d}",
        "what do {a} {s} come to in {d}"]).format(a=a, s=s, d=d), a, s, d


def find(rng):
    t = rng.choice(TOPICS)
    return rng.choice([
        "Dig up some pages on {t}.", "I'd like web results about {t}", "browse for {t}",
        "run a quick internet search: {t}", "see what the internet says about {t}"]).format(t=t), t


def countdown(rng):
    m = rng.choice([2, 4, 6, 8, 12, 18, 22, 35, 40, 55, 70])
    return rng.choice([
        "Give me a countdown of {m} minutes.", "buzz me after {m} minutes",
        "{m}-minute countdown, go", "start counting down {m} minutes for the pasta"]).format(m=m), m


def ticker(rng):
    s = rng.choice(TICKERS)
    return rng.choice([
        "Where is {s} trading right now?", "latest quote on {s}?", "{s} share price today",
        "how much does one {s} share cost"]).format(s=s), s


def lingo(rng):
    p, lang = rng.choice(PHRASES), rng.choice(LANGS)
    return rng.choice([
        "Render \"{p}\" in {l}.", "In {l}, how would you put \"{p}\"?",
        "I need \"{p}\" in {l}", "Could you give me \"{p}\" translated to {l}?"]).format(
            p=p, l=lang), p, lang


def mail(rng):
    who, dom = rng.choice(PEOPLE)
    addr, sub = "%s@%s" % (who, dom), rng.choice(SUBJECTS)
    return rng.choice([
        "Drop a note to {a}, subject line \"{s}\"", "Fire off an email to {a} titled \"{s}\"",
        "mail {a} re: \"{s}\""]).format(a=addr, s=sub), addr, sub


def sums(rng):
    a, b = rng.randint(11, 899), rng.randint(3, 97)
    op, word = rng.choice([("+", "added to"), ("-", "minus"), ("*", "multiplied by"),
                           ("/", "divided by")])
    return rng.choice(["what's {a} {w} {b}", "Crunch {a} {o} {b} for me",
                       "quick maths: {a} {o} {b}"]).format(a=a, b=b, o=op, w=word), a, op, b


def light(rng):
    r, on = rng.choice(ROOMS), rng.random() < 0.5
    if on:
        t = rng.choice(["Lights on in the {r}, please", "make the {r} bright",
                        "flip the {r} lights on"])
    else:
        t = rng.choice(["Kill the lights in the {r}", "{r} lights off", "darken the {r}"])
    return t.format(r=r), r, on


def song(rng):
    s = rng.choice(SONGS)
    return rng.choice(["Queue up {s}", "I want to hear {s}", "blast {s}"]).format(s=s), s


def remind(rng):
    c, m = rng.choice(CHORES), rng.choice([5, 15, 25, 30, 50])
    return rng.choice(["In {m} minutes nudge me to {c}", "ping me to {c} in {m} minutes"]).format(
        c=c, m=m), c, m


PLAIN = ["Morning! How's it going?", "What's the tallest animal on Earth?",
         "Could you recommend a name for my new puppy?", "I'm bored, say something fun.",
         "Appreciate the help earlier!", "How many continents are there?",
         "What rhymes with orange?", "Yo", "Do you dream?", "Is a tomato a fruit?",
         "Describe the ocean in five words.", "Which is heavier, a kilo of feathers or a kilo of steel?",
         "see ya later", "Much obliged.", "Who painted the Mona Lisa?",
         "What's a good way to learn to juggle?", "Can penguins fly?",
         "cheers mate", "What does a cartographer do?", "Say hi to my friend Lena."]


def tool_case(rng, tools, by_intent):
    """Pick an intent with an offered tool, build (user text, tool name, arguments, entities)."""
    intent = rng.choice(sorted(by_intent))
    name = rng.choice(by_intent[intent])
    props = list(tools[name]["function"]["parameters"]["properties"])
    if intent == "weather":
        u, c = weather(rng)
        return u, name, {props[0]: c}, [c]
    if intent == "time":
        u, c = clock(rng)
        return u, name, {props[0]: c}, [c]
    if intent == "money":
        u, a, s, d = money(rng)
        return u, name, dict(zip(props, [a, s, d])), []
    if intent == "search":
        u, t = find(rng)
        return u, name, {props[0]: t}, [t]
    if intent == "timer":
        u, m = countdown(rng)
        return u, name, {props[0]: m}, []
    if intent == "stock":
        u, s = ticker(rng)
        return u, name, {props[0]: s}, [s]
    if intent == "translate":
        u, p, lang = lingo(rng)
        return u, name, {"text": p, "target_language": lang}, [p, lang]
    if intent == "email":
        u, a, s = mail(rng)
        return u, name, {"to": a, "subject": s}, [a, s]
    if intent == "calc":
        u, a, op, b = sums(rng)
        return u, name, {"expression": ["%d %s %d" % (a, op, b), "%d%s%d" % (a, op, b)]}, []
    if intent == "light":
        u, r, on = light(rng)
        return u, name, {"room": r, "on": on}, [r]
    if intent == "song":
        u, s = song(rng)
        return u, name, {"song": s}, [s]
    if intent == "remind":
        u, c, m = remind(rng)
        return u, name, {"text": [c, "to " + c], "minutes": m}, [c]
    raise ValueError(intent)


INTENT = {"get_weather": "weather", "get_current_weather": "weather", "weather": "weather",
          "lookup": "weather", "tool_a": "weather", "get_time": "time", "helper": "time",
          "tool_b": "time", "convert_currency": "money", "fx": "money", "search_web": "search",
          "web": "search", "set_timer": "timer", "get_stock_price": "stock",
          "translate": "translate", "send_email": "email", "calculate": "calc",
          "toggle_light": "light", "play_music": "song", "create_reminder": "remind"}


def offer(rng, names, k):
    """k tools with distinct intents (two tools for one intent would make the answer ambiguous)."""
    out, seen = [], set()
    for n in rng.sample(names, len(names)):
        i = INTENT.get(n, n)
        if i not in seen:
            seen.add(i)
            out.append(n)
        if len(out) == k:
            break
    return out


def main():
    tools = {t["function"]["name"]: t for t in json.load(open(TOOLS, encoding="utf-8"))}
    names = sorted(n for n in tools if n in INTENT)
    rng = random.Random(SEED)
    rows = []

    def add(kind, offered, msgs, exp, ents):
        rows.append({"id": "gen-%03d" % (len(rows) + 1), "kind": kind, "tools": offered,
                     "messages": msgs, "expected": exp, "entities": ents})

    def dress(u):
        u = rng.choice(OPEN) + u + rng.choice(CLOSE)
        return u.lower() if rng.random() < 0.2 else u

    while len(rows) < 170:
        offered = offer(rng, names, rng.randint(1, 4))
        by_intent = {}
        for n in offered:
            by_intent.setdefault(INTENT[n], []).append(n)
        u, name, args, ents = tool_case(rng, tools, by_intent)
        add("tool", offered, [{"role": "user", "content": dress(u)}],
            {"name": name, "arguments": args}, ents)
    for p in PLAIN:
        add("plain", offer(rng, names, rng.randint(1, 4)), [{"role": "user", "content": p}],
            None, [])
    for _ in range(6):
        add("plain", [], [{"role": "user", "content": rng.choice(PLAIN)}], None, [])
    while len(rows) < 226:
        offered = offer(rng, names, rng.randint(1, 3))
        missing = sorted({INTENT[n] for n in names} - {INTENT[n] for n in offered})
        intent = rng.choice(missing)
        cand = [n for n in names if INTENT[n] == intent]
        u, _n, _a, ents = tool_case(rng, tools, {intent: cand})
        add("unavailable", offered, [{"role": "user", "content": dress(u)}], None, ents)
    while len(rows) < 240:
        offered = offer(rng, names, rng.randint(1, 3))
        by_intent = {}
        for n in offered:
            by_intent.setdefault(INTENT[n], []).append(n)
        u, name, args, ents = tool_case(rng, tools, by_intent)
        args = {k: (v[0] if isinstance(v, list) else v) for k, v in args.items()}
        result = {"ok": True, "data": "done"} if name not in ("get_weather", "lookup") else \
            {"temperature_c": rng.randint(-5, 30), "condition": "overcast"}
        add("after_result", offered,
            [{"role": "user", "content": u},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function", "function": {"name": name, "arguments": args}}]},
             {"role": "tool", "content": json.dumps(result)}], None, ents)
    for r in rows:
        sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
