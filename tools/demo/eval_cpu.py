#!/usr/bin/env python3
"""The demo model's frozen evaluation on our CPU engine.

Every row of tests/fixtures/demo/eval_hand.jsonl and eval_gen.jsonl goes through
BUILD/tests/integration/test-demo-eval in its TDM_EVAL_ROWS mode: our chat renderer, tokenizer and
one-shot engine (the one-shot CLI's code path), greedy, at most 96 new tokens, stop at <|end|>,
64 rows per batch. The completions are scored by tools/demo/evalset.py. Prints one JSON object
(figures overall and per set, the misses, every completion).

    python3 tools/demo/eval_cpu.py BUILD/tests/integration/test-demo-eval MODEL_DIR > result.json
    python3 tools/demo/eval_cpu.py --record bench/results/cpu_engine.json --label after \
        --overlap overlap.json result.json       # merge a result into the bench record
The record (key "demo_frozen_eval") keeps one entry per label (e.g. "before": the model it
replaced, "after": the bundled one) with the git sha it was recorded at.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evalset as EV  # noqa: E402
import gen_data as G  # noqa: E402


def record(args):
    res = json.load(open(args.binary, encoding="utf-8"))
    path = args.record
    bench = json.load(open(path, encoding="utf-8"))
    sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=False).stdout.strip() or "unknown"
    sec = bench.setdefault("demo_frozen_eval", {})
    sec["definition"] = (
        "frozen evaluation (tests/fixtures/demo/eval_hand.jsonl + eval_gen.jsonl, 364 prompts, "
        "never trained on) through the one-shot CLI, greedy, scored by tools/demo/evalset.py: "
        "tool prompts need exactly one call of the expected tool with exactly the expected "
        "arguments (strings case- and accent-insensitive, numbers by value); plain, unavailable "
        "and after_result prompts need no call; a leak is DSML markup that does not parse")
    sec["targets"] = {"tool_correct_rate": 0.95, "no_call_rate": 0.95, "dsml_leaks": 0}
    entry = {"git_sha": sha, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "model": res["model"], "seconds": res["seconds"], "figures": res["figures"]}
    if args.overlap:
        ov = json.load(open(args.overlap, encoding="utf-8"))
        entry["training_overlap"] = {k: ov[k] for k in (
            "variant", "eval_4grams", "shared_4grams", "fraction", "limit",
            "training_conversations", "shared") if k in ov}
    for k, v in (args.extra or []):
        entry[k] = json.loads(v)
    sec[args.label] = entry
    with open(path, "w", encoding="utf-8") as f:
        json.dump(bench, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", help="test-demo-eval (or, with --record, a result JSON)")
    ap.add_argument("model", nargs="?")
    ap.add_argument("--record")
    ap.add_argument("--label", default="after")
    ap.add_argument("--overlap")
    ap.add_argument("--extra", nargs=2, action="append", metavar=("KEY", "JSON"))
    args = ap.parse_args()
    if args.record:
        return record(args)
    rows = EV.load()
    fx = G.FIXTURES
    with tempfile.TemporaryDirectory() as tmp:
        rows_path, out_path = os.path.join(tmp, "rows.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(rows_path, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({k: r[k] for k in ("id", "tools", "messages")},
                                   ensure_ascii=False) + "\n")
        env = dict(os.environ, TDM_EVAL_MODEL=args.model, TDM_EVAL_ROWS=rows_path,
                   TDM_EVAL_TOOLS=os.path.join(fx, "eval_tools.json"), TDM_EVAL_OUT=out_path)
        t0 = time.time()
        p = subprocess.run([args.binary], env=env, capture_output=True, text=True, check=False)
        secs = time.time() - t0
        if p.returncode != 0:
            sys.stderr.write(p.stdout + p.stderr)
            return 1
        got = {}
        for line in open(out_path, encoding="utf-8"):
            o = json.loads(line)
            got[o["id"]] = o["text"]
    texts = [got[r["id"]] for r in rows]
    figures, misses = EV.by_set(rows, texts)
    print(json.dumps({"model": args.model, "engine": "tandem CPU engine (test-demo-eval "
                      "TDM_EVAL_ROWS mode), greedy, max 96 new tokens, stop at <|end|>",
                      "seconds": round(secs, 1), "figures": figures, "misses": misses,
                      "texts": {r["id"]: t for r, t in zip(rows, texts)}},
                     indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
