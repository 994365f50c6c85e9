#!/usr/bin/env python3
"""Seeded synthetic agent transcripts for the bundled demo model (models/demo).

A conversation is an OpenAI/transformers-style message list plus the tools offered (JSON schemas,
{"type": "function", "function": {...}}). Assistant turns either answer in short text or call one
tool; a call is stored structurally (message["tool_calls"] with dict arguments) and the chat
template renders it as DSML:
  <tool_calls><invoke name="get_weather"><parameter name="city">Paris</parameter></invoke></tool_calls>
Tool results come back as role "tool" turns (JSON text) and the assistant then answers in text.
Users also ask plain questions (answered in text) and for tools that are not offered (the assistant
says it cannot). Pure Python (json, random): importable by train.py and usable without torch.

    python3 tools/demo/gen_data.py N SEED   # prints N rendered conversations (needs jinja2)
"""

import json
import random
import re

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
# Tools
# ----------------------------------------------------------------------------------------------

def _tool(name, desc, params, required=None):
    return {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object",
                       "properties": {k: {"type": t, "description": d} for k, t, d in params},
                       "required": required or [p[0] for p in params]}}}


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

CITIES = ["Paris", "London", "Tokyo", "New York", "Berlin", "Madrid", "Rome", "Sydney", "Cairo",
          "Lima", "Oslo", "Seoul", "Toronto", "Mumbai", "Nairobi", "Lisbon", "Dublin", "Vienna",
          "Prague", "Athens", "Boston", "Chicago", "Denver", "Austin", "Miami", "Zurich", "Munich",
          "Osaka", "Kyoto", "Beijing", "Shanghai", "Delhi", "Bangkok", "Hanoi", "Manila",
          "Jakarta", "Santiago", "Bogotá", "São Paulo", "Reykjavík", "Helsinki", "Warsaw",
          "Budapest", "Istanbul", "Dubai", "Singapore", "Melbourne", "Auckland", "Vancouver",
          "Montreal"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "CNY", "INR", "SEK"]
SYMBOLS = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "TSLA", "META", "IBM", "ORCL", "INTC", "AMD",
           "NFLX", "SAP", "SONY", "UBER"]
PHRASES = ["good morning", "thank you", "where is the station", "I am hungry", "see you tomorrow",
           "how much does it cost", "the weather is nice", "happy birthday", "good night",
           "I love this city", "where is the hotel", "one coffee please", "nice to meet you",
           "I am lost", "what time is it"]
LANGUAGES = ["Spanish", "French", "German", "Italian", "Japanese", "Portuguese", "Dutch", "Korean"]
PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
DOMAINS = ["example.com", "mail.com", "work.org"]
SUBJECTS = ["Meeting tomorrow", "Lunch", "Project update", "Invoice", "Weekend plans",
            "Quick question", "Travel dates", "Report draft", "Happy birthday", "Schedule change"]
QUERIES = ["best pizza recipe", "history of the bicycle", "how to tie a tie", "tallest mountain",
           "python list comprehension", "cheap flights to Rome", "how do vaccines work",
           "marathon training plan", "solar panel efficiency", "how to bake bread",
           "electric cars range", "learn guitar chords", "jazz history", "dinosaur facts",
           "moon landing date", "chess openings"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear"]

REQUESTS = {
    "get_weather": ["What's the weather in {city}?", "Is it raining in {city} right now?",
                    "How warm is it in {city} today?", "weather {city}",
                    "Tell me the weather forecast for {city}.", "Do I need an umbrella in {city}?",
                    "What is the temperature in {city}?"],
    "get_time": ["What time is it in {city}?", "Tell me the local time in {city}.",
                 "time in {city}", "Is it late in {city} now?", "What's the current time in {city}?"],
    "convert_currency": ["Convert {amount} {src} to {dst}.", "How much is {amount} {src} in {dst}?",
                         "{amount} {src} to {dst}", "What is {amount} {src} worth in {dst}?",
                         "Please change {amount} {src} into {dst}."],
    "set_timer": ["Set a timer for {minutes} minutes.", "Start a {minutes} minute timer.",
                  "timer {minutes} min", "Can you set a timer for {minutes} minutes?",
                  "Remind me in {minutes} minutes."],
    "get_stock_price": ["What's the price of {symbol}?", "How is {symbol} trading today?",
                        "stock price {symbol}", "Give me the latest {symbol} quote.",
                        "What is {symbol} stock at?"],
    "translate": ["Translate \"{phrase}\" to {lang}.", "How do you say \"{phrase}\" in {lang}?",
                  "Say \"{phrase}\" in {lang}.", "Translate \"{phrase}\" into {lang} please."],
    "send_email": ["Email {to} with subject \"{subject}\".",
                   "Send an email to {to} about \"{subject}\".",
                   "Please write to {to}, subject \"{subject}\".",
                   "Send {to} a mail titled \"{subject}\"."],
    "search_web": ["Search the web for {query}.", "Look up {query}.", "Find information on {query}.",
                   "search: {query}", "Can you search for {query}?"],
    "calculate": ["What is {a} {op} {b}?", "Calculate {a} {op} {b}.", "compute {a} {op} {b}",
                  "How much is {a} {op} {b}?", "Work out {a} {op} {b} for me."],
}

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid",
            "Germany": "Berlin", "Peru": "Lima", "Norway": "Oslo", "Egypt": "Cairo",
            "Kenya": "Nairobi", "Portugal": "Lisbon", "Ireland": "Dublin", "Austria": "Vienna",
            "Greece": "Athens", "Canada": "Ottawa", "Australia": "Canberra", "Chile": "Santiago",
            "Poland": "Warsaw", "Hungary": "Budapest", "Finland": "Helsinki", "Iceland": "Reykjavík"}
AUTHORS = {"Hamlet": "William Shakespeare", "Don Quixote": "Miguel de Cervantes",
           "War and Peace": "Leo Tolstoy", "Pride and Prejudice": "Jane Austen",
           "The Odyssey": "Homer", "Faust": "Johann Wolfgang von Goethe",
           "Moby-Dick": "Herman Melville", "Les Misérables": "Victor Hugo"}
CHAT = [("Hello!", "Hello! How can I help you today?"), ("Hi there", "Hi! What can I do for you?"),
        ("How are you?", "I'm doing well, thanks for asking. How can I help?"),
        ("Thanks!", "You're welcome!"), ("Thank you so much.", "Happy to help!"),
        ("Who are you?", "I'm a small demo assistant. I can answer simple questions and use tools."),
        ("Tell me a joke.", "Why did the scarecrow win an award? Because he was outstanding in his field."),
        ("Tell me another joke.", "I told my computer a joke about UDP. I'm not sure it got it."),
        ("What can you do?", "I can answer short questions and call the tools I am given."),
        ("Good night!", "Good night! Sleep well."), ("ok", "Okay. Anything else?"),
        ("What color is the sky?", "On a clear day the sky is blue."),
        ("What is your favorite color?", "I like blue, like a clear sky."),
        ("Give me a fun fact.", "Octopuses have three hearts."),
        ("Recommend a book.", "Try The Hobbit by J. R. R. Tolkien. It is a short, fun adventure."),
        ("What do cats say?", "Cats say meow."), ("What do dogs say?", "Dogs say woof."),
        ("Bye", "Goodbye! Have a nice day."),
        ("Say something nice.", "You are doing great. Keep going!"),
        ("How many days are in a week?", "There are seven days in a week."),
        ("How many legs does a spider have?", "A spider has eight legs."),
        ("Is water wet?", "Water makes things wet, so most people say yes.")]
CANT = {"get_weather": "check the weather", "get_time": "look up the time",
        "convert_currency": "convert currencies", "set_timer": "set timers",
        "get_stock_price": "look up stock prices", "translate": "translate text",
        "send_email": "send emails", "search_web": "search the web",
        "calculate": "run calculations"}
SYSTEMS = ["", "", "You are a helpful assistant.", "You are a concise assistant.",
           "Answer briefly. Use tools when they help."]


def plain_turn(rng):
    r = rng.random()
    if r < 0.3:
        c, cap = rng.choice(sorted(CAPITALS.items()))
        q = rng.choice(["What is the capital of {c}?", "capital of {c}?",
                        "Which city is the capital of {c}?"]).format(c=c)
        return q, "The capital of %s is %s." % (c, cap)
    if r < 0.45:
        b, a = rng.choice(sorted(AUTHORS.items()))
        q = rng.choice(["Who wrote {b}?", "Who is the author of {b}?"]).format(b=b)
        return q, "%s was written by %s." % (b, a)
    return rng.choice(CHAT)


def tool_request(rng, name):
    """(user text, arguments dict, tool result dict, answer text)."""
    tpl = rng.choice(REQUESTS[name])
    if name in ("get_weather", "get_time"):
        city = rng.choice(CITIES)
        user, args = tpl.format(city=city), {"city": city}
        if name == "get_weather":
            t, cnd = rng.randint(-10, 35), rng.choice(CONDITIONS)
            res = {"city": city, "temperature_c": t, "condition": cnd}
            ans = rng.choice(["It is {t}°C and {c} in {city}.", "{city}: {c}, {t}°C right now.",
                              "Right now it's {c} in {city} at {t}°C."]).format(t=t, c=cnd,
                                                                                   city=city)
        else:
            hh, mm = rng.randint(0, 23), rng.randint(0, 59)
            res = {"city": city, "time": "%02d:%02d" % (hh, mm)}
            ans = rng.choice(["It is {t} in {city}.", "The local time in {city} is {t}."]).format(
                t=res["time"], city=city)
    elif name == "convert_currency":
        amount = rng.choice([rng.randint(1, 100), rng.randint(1, 20) * 50, rng.randint(100, 5000)])
        src, dst = rng.sample(CURRENCIES, 2)
        user = tpl.format(amount=amount, src=src, dst=dst)
        args = {"amount": amount, "from_currency": src, "to_currency": dst}
        val = round(amount * rng.uniform(0.01, 150.0), 2)
        res = {"amount": amount, "from": src, "to": dst, "result": val}
        ans = "%d %s is about %s %s." % (amount, src, val, dst)
    elif name == "set_timer":
        m = rng.choice([rng.randint(1, 15), rng.randint(1, 12) * 5, rng.randint(1, 120)])
        user, args = tpl.format(minutes=m), {"minutes": m}
        res = {"status": "started", "minutes": m}
        ans = rng.choice(["Your {m} minute timer is running.", "Timer set for {m} minutes."]).format(
            m=m)
    elif name == "get_stock_price":
        s = rng.choice(SYMBOLS)
        user, args = tpl.format(symbol=s), {"symbol": s}
        p = round(rng.uniform(5, 900), 2)
        res = {"symbol": s, "price": p, "currency": "USD"}
        ans = rng.choice(["{s} is trading at {p} USD.", "{s} last traded at ${p}."]).format(s=s, p=p)
    elif name == "translate":
        ph, lang = rng.choice(PHRASES), rng.choice(LANGUAGES)
        user, args = tpl.format(phrase=ph, lang=lang), {"text": ph, "target_language": lang}
        tr = "[%s] %s" % (lang[:2].lower(), ph)
        res = {"translation": tr}
        ans = "In %s: %s" % (lang, tr)
    elif name == "send_email":
        to = "%s@%s" % (rng.choice(PEOPLE), rng.choice(DOMAINS))
        sub = rng.choice(SUBJECTS)
        user, args = tpl.format(to=to, subject=sub), {"to": to, "subject": sub}
        res = {"status": "sent", "id": rng.randint(1000, 9999)}
        ans = rng.choice(["Done, I emailed {to}.", "The email \"{s}\" was sent to {to}."]).format(
            to=to, s=sub)
    elif name == "search_web":
        q = rng.choice(QUERIES)
        user, args = tpl.format(query=q), {"query": q}
        res = {"results": [{"title": q.capitalize(), "url": "https://example.com/%d" %
                            rng.randint(1, 999)}]}
        ans = "I found a page titled \"%s\": %s" % (q.capitalize(), res["results"][0]["url"])
    elif name == "calculate":
        a, b, op = rng.randint(2, 999), rng.randint(2, 99), rng.choice(["+", "-", "*", "/"])
        user, args = tpl.format(a=a, b=b, op=op), {"expression": "%d %s %d" % (a, op, b)}
        v = eval(args["expression"])  # noqa: S307 - our own digits and operators
        v = round(v, 4) if isinstance(v, float) else v
        res = {"value": v}
        ans = "%s = %s." % (args["expression"], v)
    else:
        raise ValueError(name)
    return user, args, res, ans


def call_message(name, args):
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]}


def conversation(rng):
    """A training conversation: dict(messages, tools)."""
    tools = []
    if rng.random() < 0.85:
        tools = rng.sample(TOOLS, rng.randint(1, 4))
    offered = [t["function"]["name"] for t in tools]
    msgs = []
    sysp = rng.choice(SYSTEMS)
    if sysp:
        msgs.append({"role": "system", "content": sysp})
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        r = rng.random()
        if offered and r < 0.55:
            name = rng.choice(offered)
            user, args, res, ans = tool_request(rng, name)
            msgs += [{"role": "user", "content": user}, call_message(name, args),
                     {"role": "tool", "content": json.dumps(res, ensure_ascii=False)},
                     {"role": "assistant", "content": ans}]
        elif r < 0.8 and len(offered) < len(TOOLS):
            name = rng.choice([t for t in TOOL_BY_NAME if t not in offered])
            user = tool_request(rng, name)[0]
            msgs += [{"role": "user", "content": user},
                     {"role": "assistant", "content": "Sorry, I can't %s here." % CANT[name]}]
        else:
            q, a = plain_turn(rng)
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return {"messages": msgs, "tools": tools}


def eval_case(rng, kind):
    """A held-out prompt ending in a user (or tool) turn. kind: tool | plain | unavailable | after_result.
    Returns dict(messages, tools, kind, expected) where expected = {"name", "arguments"} or None."""
    while True:
        conv = conversation(rng)
        if kind == "tool" and not conv["tools"]:
            continue
        if kind == "unavailable" and len(conv["tools"]) == len(TOOLS):
            continue
        if kind == "after_result" and not conv["tools"]:
            continue
        break
    # Keep a random prefix ending after an assistant turn as history.
    msgs, cut = conv["messages"], 0
    ends = [i + 1 for i, m in enumerate(msgs) if m["role"] == "assistant" and not m.get("tool_calls")]
    if ends and rng.random() < 0.4:
        cut = rng.choice(ends)
    elif msgs and msgs[0]["role"] == "system":
        cut = 1
    hist = msgs[:cut]
    offered = [t["function"]["name"] for t in conv["tools"]]
    if kind in ("tool", "after_result"):
        name = rng.choice(offered)
        user, args, res, _ = tool_request(rng, name)
        hist = hist + [{"role": "user", "content": user}]
        if kind == "after_result":
            hist += [call_message(name, args),
                     {"role": "tool", "content": json.dumps(res, ensure_ascii=False)}]
            return {"messages": hist, "tools": conv["tools"], "kind": kind, "expected": None}
        return {"messages": hist, "tools": conv["tools"], "kind": kind,
                "expected": {"name": name, "arguments": args}}
    if kind == "unavailable":
        name = rng.choice([t for t in TOOL_BY_NAME if t not in offered])
        hist = hist + [{"role": "user", "content": tool_request(rng, name)[0]}]
    else:
        hist = hist + [{"role": "user", "content": plain_turn(rng)[0]}]
    return {"messages": hist, "tools": conv["tools"], "kind": kind, "expected": None}


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
        ty = props[k]["type"]
        try:
            if ty == "integer":
                int(v)
            elif ty == "number":
                float(v)
        except ValueError:
            return False
        if ty == "string" and not v:
            return False
    return True


if __name__ == "__main__":
    import sys
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    rng, tpl = random.Random(seed), make_env()
    for _ in range(n):
        c = conversation(rng)
        print(render(tpl, c["messages"], c["tools"], False))
