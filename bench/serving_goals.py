#!/usr/bin/env python3
"""serving_goals.py SERVING_JSON DECODE_JSON [--how TEXT] — put the engine goals of the same device
call into gpu_serving.json (docs/contracts.md §h "engine_goals").

The serving acceptance reads the engine's goals from bench/gpu_decode's results of the same run:
decode at bs1/8/32 and prefill of 2048 tokens against their goals, the torch.compiled anchor of
that run, the bs1 roofline, and the long-prompt prefill figures (8192 and 32768 tokens, one call
and chunked) when measured. Both files must name the same git_sha and GPU: figures of two
different builds or cards are refused (exit 1), not merged. The serving file is rewritten in
place; nothing else in it changes. --how TEXT: the two files come from separate calls of one
bundle on one card (say which and why in TEXT); "from" then no longer says "the same device call".
"""
import json
import sys

GOALS = {"decode_bs1_tok_s": 1450, "decode_bs8_tok_s": 9000, "decode_bs32_tok_s": 25000,
         "prefill_2048_tok_s": 200000}
LONG = ["prefill_8192_tok_s", "prefill_8192_chunked_tok_s", "prefill_32768_tok_s",
        "prefill_32768_chunked_tok_s", "prefill_32768_last_chunk_vs_first"]


def short_sha(s):
    return (s or "")[:7]


def merge(serving, decode, how):
    """serving and decode: the two documents; returns the engine_goals object or raises
    ValueError with the reason."""
    ss, ds = short_sha(serving.get("git_sha")), short_sha(decode.get("git_sha"))
    if not ss or not ds or ss == "unknown" or ss != ds:
        raise ValueError("git_sha differs: serving %r, decode %r" % (serving.get("git_sha"),
                                                                      decode.get("git_sha")))
    sg, dg = serving.get("gpu"), decode.get("gpu")
    if sg and dg and dg != "unknown" and sg != dg:
        raise ValueError("GPU differs: serving %r, decode %r" % (sg, dg))
    t = decode.get("tandem") or {}
    missing = [k for k in GOALS if not isinstance(t.get(k), (int, float))]
    if missing:
        raise ValueError("decode results lack %s" % ", ".join(missing))
    measured = {k: round(float(t[k]), 1) for k in GOALS}
    same = how is None
    out = {
        "from": "bench/gpu_decode + bench/gpu-decode.sh %s(git_sha %s, %s)"
                % ("in the same device call " if same else "", ds, dg or sg or "unknown GPU"),
        "how": "tools/device-verify.sh: decode and serving phases of one call" if same else how,
        "measured": measured,
        "goals": dict(GOALS),
        "torch_compiled": decode.get("torch_compiled") or {},
        "fraction_of_goal": {k: round(measured[k] / GOALS[k], 3) for k in GOALS},
        "roofline_bs1_tok_s": decode.get("roofline_bs1_tok_s"),
    }
    longs = {k: t.get(k) for k in LONG if t.get(k) is not None}
    if longs:
        out["prefill_long"] = longs
    return out


def main(argv):
    how = None
    if len(argv) == 5 and argv[3] == "--how" and argv[4].strip():
        how = argv[4]
    elif len(argv) != 3:
        sys.stderr.write("usage: serving_goals.py SERVING_JSON DECODE_JSON [--how TEXT]\n")
        return 2
    try:
        serving = json.load(open(argv[1]))
        decode = json.load(open(argv[2]))
    except (OSError, ValueError) as e:
        sys.stderr.write("serving_goals: cannot read the inputs: %s\n" % e)
        return 1
    try:
        goals = merge(serving, decode, how)
    except ValueError as e:
        sys.stderr.write("serving_goals: not merged: %s\n" % e)
        return 1
    serving["engine_goals"] = goals
    with open(argv[1], "w") as f:
        json.dump(serving, f, indent=1)
        f.write("\n")
    for k in GOALS:
        print("# engine goal %s: %s of %s (%.3f)" % (k, goals["measured"][k], GOALS[k],
                                                     goals["fraction_of_goal"][k]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
