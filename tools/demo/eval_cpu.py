#!/usr/bin/env python3
"""The demo model's frozen evaluation on our CPU engine, through the one-shot CLI.

Each row of tests/fixtures/demo/eval_hand.jsonl and eval_gen.jsonl is rendered with the model's
chat template (gen_data.render, which tests/unit/test-chat checks equal to our C renderer), passed
to `tandem-worker --model-path DIR --prompt TEXT --max-tokens 96 --json` (greedy, stops at
<|end|>), and the completion is scored by tools/demo/evalset.py. Prints one JSON object (figures
overall and per set, the misses, every completion).

    python3 tools/demo/eval_cpu.py BUILD/tandem-worker MODEL_DIR [--jobs 2] > result.json
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evalset as EV  # noqa: E402
import gen_data as G  # noqa: E402


def complete(binary, model, prompt):
    p = subprocess.run([binary, "--model-path", model, "--prompt", prompt, "--max-tokens", "96",
                        "--json"], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError("tandem-worker exited %d: %s" % (p.returncode, p.stderr[-400:]))
    text = json.loads(p.stdout.strip().splitlines()[-1])["text"]
    return text.split("<|end|>")[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    rows, tpl = EV.load(), G.make_env()
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        texts = list(ex.map(lambda r: complete(args.binary, args.model, EV.prompt(tpl, r)), rows))
    figures, misses = EV.by_set(rows, texts)
    print(json.dumps({"model": args.model, "engine": "tandem-worker one-shot CLI, greedy, "
                      "max 96 new tokens, stop at <|end|>", "seconds": round(time.time() - t0, 1),
                      "figures": figures, "misses": misses,
                      "texts": {r["id"]: t for r, t in zip(rows, texts)}},
                     indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
