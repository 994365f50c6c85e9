#!/usr/bin/env python3
"""The demo model's frozen evaluation: load the rows, render their prompts, score completions.

Rows come from tests/fixtures/demo/eval_hand.jsonl and eval_gen.jsonl (tools by name from
eval_tools.json). A completion (text before <|end|>) is scored as:
  tool rows          exactly one DSML call and nothing else, of the expected tool, with exactly
                     the expected argument names; strings compare case- and accent-insensitively
                     (an expected list accepts any of its values), numbers by value, booleans
                     as true/false;
  plain, unavailable, after_result rows   no call and no DSML markup;
  every row          DSML markup that does not parse is a leak.
Used by train.py (the transformers reference on the device) and eval_cpu.py (our CPU engine).
Standard library only (jinja2 to render).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_data as G  # noqa: E402

SETS = ("eval_hand.jsonl", "eval_gen.jsonl")


def load(fixtures=G.FIXTURES):
    tools = {t["function"]["name"]: t
             for t in json.load(open(os.path.join(fixtures, "eval_tools.json"), encoding="utf-8"))}
    rows = []
    for fn in SETS:
        for line in open(os.path.join(fixtures, fn), encoding="utf-8"):
            r = json.loads(line)
            r["offered"] = [tools[n] for n in r["tools"]]
            rows.append(r)
    return rows


def prompt(tpl, row):
    return G.render(tpl, row["messages"], row["offered"], True)


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _match(exp, got):
    if isinstance(exp, list):
        return any(_match(e, got) for e in exp)
    if isinstance(exp, bool):
        return G.fold(got) == ("true" if exp else "false")
    if isinstance(exp, (int, float)):
        g = _num(got)
        return g is not None and abs(g - exp) < 1e-9
    return G.fold(got) == G.fold(exp)


def score(row, text):
    """(ok, class, detail) for one completion."""
    cls, calls = G.parse_output(text)
    if row["kind"] != "tool":
        return cls == "text", cls, ""
    if cls != "call" or len(calls) != 1:
        return False, cls, "not one call"
    name, args = calls[0]
    exp = row["expected"]
    if name != exp["name"]:
        return False, cls, "tool %s" % name
    if set(args) != set(exp["arguments"]):
        return False, cls, "argument names %s" % sorted(args)
    for k, v in exp["arguments"].items():
        if not _match(v, args[k]):
            return False, cls, "%s=%r" % (k, args[k])
    return True, cls, ""


def summarize(rows, texts):
    """Figures for a list of rows and their completions; also the misses."""
    by = {}
    misses = []
    for r, t in zip(rows, texts):
        ok, cls, detail = score(r, t)
        s = by.setdefault(r["kind"], {"n": 0, "ok": 0, "leak": 0})
        s["n"] += 1
        s["ok"] += ok
        s["leak"] += cls == "leak"
        if not ok:
            misses.append({"id": r["id"], "kind": r["kind"],
                           "user": [m["content"] for m in r["messages"] if m["role"] == "user"][-1],
                           "expected": r["expected"], "got": t, "why": detail})
    tool = by.get("tool", {"n": 0, "ok": 0})
    nocall = [by[k] for k in ("plain", "unavailable", "after_result") if k in by]
    plain = by.get("plain", {"n": 0, "ok": 0})
    out = {
        "rows": len(rows),
        "tool_prompts": tool["n"], "tool_correct": tool["ok"],
        "tool_correct_rate": round(tool["ok"] / max(1, tool["n"]), 4),
        "plain_prompts": plain["n"], "plain_no_call": plain["ok"],
        "plain_no_call_rate": round(plain["ok"] / max(1, plain["n"]), 4),
        "no_call_prompts": sum(s["n"] for s in nocall),
        "no_call_correct": sum(s["ok"] for s in nocall),
        "no_call_rate": round(sum(s["ok"] for s in nocall) / max(1, sum(s["n"] for s in nocall)), 4),
        "dsml_leaks": sum(s["leak"] for s in by.values()),
        "by_kind": by,
    }
    return out, misses


def by_set(rows, texts):
    res = {}
    for fn in SETS:
        pre = "hand-" if "hand" in fn else "gen-"
        sel = [(r, t) for r, t in zip(rows, texts) if r["id"].startswith(pre)]
        res[fn] = summarize([r for r, _ in sel], [t for _, t in sel])[0]
    res["all"], misses = summarize(rows, texts)
    return res, misses
