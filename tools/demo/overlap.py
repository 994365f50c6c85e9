#!/usr/bin/env python3
"""Word 4-gram overlap between the demo model's frozen evaluation and its training set.

Evaluation 4-grams: every word 4-gram of the user turns of tests/fixtures/demo/eval_hand.jsonl and
eval_gen.jsonl. Training 4-grams: every word 4-gram of every message (user, assistant, tool result)
of the training set train.py uses (gen_data.corpus_jobs(N, 7), regenerated here). Words are
lowercased, accent-folded runs of letters and digits (gen_data.words). Prints one JSON object:
the fraction of evaluation 4-grams that occur in training (must be <= 0.02), the shared 4-grams,
and whether any evaluation entity occurs in a training message as whole words.

    python3 tools/demo/overlap.py [--conversations 200000] [--variant 1] [--limit 0.02]
exits 1 above the limit.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evalset as EV  # noqa: E402
import gen_data as G  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=200000)
    ap.add_argument("--variant", type=int, default=1, choices=(1, 2, 3, 4, 5))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--limit", type=float, default=0.02)
    args = ap.parse_args()
    G.set_variant(args.variant)
    ev = set()
    for r in EV.load():
        for m in r["messages"]:
            if m["role"] == "user":
                ev |= G.grams4(m["content"])
    ents = {tuple(G.words(e)) for r in EV.load() for e in r.get("entities", []) if G.words(e)}
    shared, ent_hits, n = set(), set(), 0
    for seed, count in G.corpus_jobs(args.conversations, args.seed):
        for c in G.corpus(count, seed):
            n += 1
            for m in c["messages"]:
                text = m["content"] or ""
                for tc in m.get("tool_calls") or []:
                    text += " " + " ".join(str(v) for v in tc["function"]["arguments"].values())
                shared |= G.grams4(text) & ev
                w = tuple(G.words(text))
                for i in range(len(w)):
                    for j in range(i + 1, min(len(w), i + 5) + 1):
                        if w[i:j] in ents:
                            ent_hits.add(" ".join(w[i:j]))
    frac = len(shared) / max(1, len(ev))
    out = {"variant": args.variant, "eval_4grams": len(ev), "shared_4grams": len(shared),
           "fraction": round(frac, 5), "limit": args.limit,
           "training_conversations": n, "shared": sorted(shared),
           "eval_entities_in_training": sorted(ent_hits)}
    print(json.dumps(out, indent=1, ensure_ascii=False))
    return 0 if frac <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
