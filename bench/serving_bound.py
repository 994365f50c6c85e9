#!/usr/bin/env python3
"""serving_bound.py SERVING_JSON [--write] [--orders K] — the output tok/s a serving loop could at
most reach at each max-concurrency point of gpu_serving.json if the engine ran every step at the
prices it was measured at in the same run (docs/contracts.md §h "load_ceiling").

Serving throughput at concurrency C is compared with the engine's decode at batch C; the gap has
three parts a loop cannot remove, and this tool prices them with the run's own figures:
  - the load's schedule: a max-concurrency client keeps C requests in flight, but the last
    requests of a point drain one by one (the tail), so steps hold fewer than C rows;
  - the prompts: every prompt token is computed once;
  - longer contexts than the engine bench's: NOT priced (the ceiling takes every decode step at
    the engine's short contexts), so the ceiling stays optimistic.
The point's requests are drawn again exactly as bench/loadgen.py drew them (its make_requests,
the point's seed, the recorded calibration) and checked against the point's usage: the sum of the
drawn output lengths must equal total_output_tokens (every request asks for exactly its length),
else the document is refused (exit 1). The schedule has no gaps: a request yields its first
token in the step after its slot frees (no client or HTTP turn, no prefill wait) and one token a
step after that; the C slots take the requests in a seeded random order (loadgen's threads race
for the cap, so the run's order is one such draw), K orders, mean reported with the range. A step
of k rows costs the engine's measured decode step at the largest measured batch <= k (step time
does not fall as rows are added), a prompt token the cheapest price measured in the run: the
engine's marginal price beside a decode batch (engine_mixed.price), 1e6 / prefill_2048_tok_s
when engine_goals has it, and the point's own mixed steps ((exec_wait_mixed - exec_wait_decode)
x mixed iterations / prompt tokens, from its loop counters).

  ceiling_tok_s      = output tokens / (sum over steps of step(k) + prompt tokens x price)
  full_batch_tok_s   = the same with every step at C rows (prompts only)
  serving_vs_ceiling = measured output tok/s / ceiling_tok_s
  prompt_us_per_token_for_target = the prompt price at which ceiling_tok_s reaches --target x
                       the engine's decode (0.85, the serving acceptance; docs/cuda.md): null when
                       the schedule alone keeps it below (no price would do)
  prompt_us_per_token_at_peak = a prompt token's matmul FLOPs (twice the layers' q|k|v, o,
                       gate|up and down weights, from the document's model_config; attention and
                       lm_head left out, so a floor) at the card's dense bf16 peak (--peak-tflops,
                       else by the gpu's name: H100 SXM and H200 989.4; else null);
  ceiling_vs_engine_decode_prompts_at_peak = the ceiling with prompts at that price, each prompt
                       token's work added to the steps as today's engine adds it;
  target_needs_prompts_below_peak = prompt_us_per_token_for_target < that floor: then no loop
                       reaches the target while prompt work is added to the decode steps; only
                       prompt work hidden under the decode steps' memory-bound time could.
Without --write it prints the load_ceiling object; with --write it also stores it in the file.
--target F (default 0.85): the ratio prompt_us_per_token_for_target is solved for.
"""
import argparse
import json
import math
import os
import random
import sys
import types
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen  # noqa: E402  (make_requests: the same draws as the run)


def step_floor(steps, k):
    """the measured step (us) at the largest measured batch <= k, or None below the smallest"""
    best = None
    for b in sorted(steps):
        if b <= k:
            best = steps[b]
    return best


def schedule(outs, conc, rng):
    """rows per step of the most favourable max-concurrency schedule: returns {rows: steps}"""
    order = list(outs)
    rng.shuffle(order)
    hist = {}
    active = []  # tokens left per slot
    nxt = 0
    while nxt < len(order) or active:
        while len(active) < conc and nxt < len(order):
            active.append(order[nxt])
            nxt += 1
        k = len(active)
        hist[k] = hist.get(k, 0) + 1
        active = [r - 1 for r in active if r > 1]
    return hist


PEAK_TFLOPS = (("H100 80GB HBM3", 989.4), ("H100 SXM", 989.4), ("H200", 989.4))


def peak_tflops(gpu):
    """the card's dense bf16 tensor peak from its name (datasheet figures), or None"""
    for name, tf in PEAK_TFLOPS:
        if name in (gpu or ""):
            return tf
    return None


def prompt_gflop(cfg):
    """matmul GFLOP of one prompt token through the layers (q|k|v, o, gate|up, down), or None"""
    try:
        L, d, i = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]
        h, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
        hd = cfg.get("head_dim") or d // h
    except (KeyError, TypeError, ZeroDivisionError):
        return None
    return 2.0 * L * (d * hd * (h + 2 * kv) + h * hd * d + 3 * d * i) / 1e9


def point_ceiling(doc, row, orders, target=0.85, peak=None):
    """the load_ceiling entry of one concurrency row; raises ValueError when the draws do not
    reproduce the point"""
    c = row["concurrency"]
    s = row.get("serving")
    if not s or not row.get("engine_decode"):
        return None
    load, cal = doc.get("load"), doc.get("calibration")
    if not load or not cal or doc.get("seed") is None:
        raise ValueError("the document lacks load, calibration or seed")
    a = types.SimpleNamespace(input_median=load["input_median"],
                              output_median=load["output_median"],
                              input_max=load["input_max"], output_max=load["output_max"],
                              min_len=load["min"])
    name = s["point"]
    seed = doc["seed"] + zlib.crc32(name.encode()) % 100003
    reqs = loadgen.make_requests(s["requests"], seed, a, cal)
    outs = [r["max_tokens"] for r in reqs]
    if sum(outs) != s["total_output_tokens"]:
        raise ValueError("%s: the drawn output lengths sum to %d, the point's usage to %d: not the "
                         "run's requests" % (name, sum(outs), s["total_output_tokens"]))
    steps = {}
    for r in doc["concurrency"]:
        e = r.get("engine_decode")
        if e and e.get("ids_step_us"):
            steps[e["batch"]] = float(e["ids_step_us"])
    if step_floor(steps, 1) is None:
        raise ValueError("no engine decode step at batch 1: the tail's steps cannot be priced")
    prices = [(p["us_per_prompt_token"], "engine_mixed.price bs%d + %d" % (p["batch"], p["chunk"]))
              for p in (doc.get("engine_mixed") or {}).get("price", [])
              if p.get("us_per_prompt_token")]
    pf = ((doc.get("engine_goals") or {}).get("measured") or {}).get("prefill_2048_tok_s")
    if pf:
        prices.append((round(1e6 / pf, 3), "prefill_2048"))
    lu, md = s.get("loop_us_per_iter") or {}, s.get("metrics_delta") or {}
    nmix = md.get("tandem_sched_mixed_iterations_total")
    if lu.get("exec_wait_mixed") and lu.get("exec_wait_decode") and nmix and s["total_input_tokens"]:
        own = (lu["exec_wait_mixed"] - lu["exec_wait_decode"]) * nmix / s["total_input_tokens"]
        if own > 0:
            prices.append((round(own, 3), "the point's mixed steps"))
    if not prices:
        raise ValueError("no measured prompt price (engine_mixed.price, engine_goals)")
    price, price_from = min(prices)
    out_tok, in_tok = s["total_output_tokens"], s["total_input_tokens"]
    prompt_us = in_tok * price
    eng_step = step_floor(steps, c)
    runs = []
    for k in range(orders):
        hist = schedule(outs, c, random.Random(1000003 * k + c))
        dec_us = sum(n * step_floor(steps, rows) for rows, n in hist.items())
        nsteps = sum(hist.values())
        runs.append((out_tok / ((dec_us + prompt_us) * 1e-6), out_tok / nsteps, dec_us))
    ceil = [r[0] for r in runs]
    mean = sum(ceil) / len(ceil)
    full_us = out_tok / c * eng_step + prompt_us
    eng_tok_s = row["engine_decode"]["ids_tok_s"]
    fill = sum(r[1] for r in runs) / len(runs)
    dec_mean = sum(r[2] for r in runs) / len(runs)
    # out / (dec + in x price) = target x engine  ->  price
    need = (out_tok / (target * eng_tok_s) * 1e6 - dec_mean) / in_tok if in_tok else None
    gf = prompt_gflop(doc.get("model_config"))
    floor = round(gf * 1e9 / (peak * 1e12) * 1e6, 3) if gf and peak else None
    at_peak = (out_tok / ((dec_mean + in_tok * floor) * 1e-6) / eng_tok_s) if floor else None
    return {
        "concurrency": c, "point": name, "requests": s["requests"],
        "output_tokens": out_tok, "prompt_tokens": in_tok,
        "rows_per_step": round(fill, 2),
        "measured_rows_per_step": round(out_tok / max(1, s["metrics_delta"].get(
            "tandem_sched_decode_iterations_total", 0) + s["metrics_delta"].get(
            "tandem_sched_mixed_iterations_total", 0)), 2) if s.get("metrics_delta") else None,
        "prompt_us_per_token": price, "prompt_price_from": price_from,
        "prompt_share": round(prompt_us / (dec_mean + prompt_us), 3),
        "ceiling_tok_s": round(mean, 1),
        "ceiling_tok_s_range": [round(min(ceil), 1), round(max(ceil), 1)],
        "full_batch_tok_s": round(out_tok / (full_us * 1e-6), 1),
        "engine_decode_tok_s": eng_tok_s,
        "ceiling_vs_engine_decode": round(mean / eng_tok_s, 3),
        "full_batch_vs_engine_decode": round(out_tok / (full_us * 1e-6) / eng_tok_s, 3),
        "serving_tok_s": s["output_tok_s"],
        "serving_vs_ceiling": round(s["output_tok_s"] / mean, 3),
        "target_vs_engine_decode": target,
        "prompt_us_per_token_for_target": round(need, 3) if need is not None and need > 0 else None,
        "prompt_gflop_per_token": round(gf, 3) if gf else None,
        "prompt_us_per_token_at_peak": floor,
        "ceiling_vs_engine_decode_prompts_at_peak": round(at_peak, 3) if at_peak else None,
        "target_needs_prompts_below_peak": (need is None or need <= 0 or need < floor)
        if floor else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("serving_json")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--orders", type=int, default=16)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--peak-tflops", type=float, default=None)
    a = ap.parse_args()
    if a.orders < 1 or not 0 < a.target <= 1 or (a.peak_tflops is not None and a.peak_tflops <= 0):
        sys.stderr.write("serving_bound: --orders must be >= 1, --target in (0, 1], "
                         "--peak-tflops > 0\n")
        return 2
    try:
        doc = json.load(open(a.serving_json))
    except (OSError, ValueError) as e:
        sys.stderr.write("serving_bound: %s: %s\n" % (a.serving_json, e))
        return 1
    pts = []
    peak = a.peak_tflops or peak_tflops(doc.get("gpu"))
    try:
        for row in doc.get("concurrency", []):
            p = point_ceiling(doc, row, a.orders, a.target, peak)
            if p:
                pts.append(p)
    except (ValueError, KeyError, TypeError) as e:
        sys.stderr.write("serving_bound: refused: %s\n" % e)
        return 1
    res = {"what": "the output tok/s a loop could reach on each max-concurrency point's own "
                   "requests at the engine's measured prices (bench/serving_bound.py header): "
                   "a gap-free schedule's rows a step, decode steps at the engine's short "
                   "contexts, prompts at the cheapest measured price; "
                   "prompt_us_per_token_for_target: the price that would reach the target; "
                   "prompt_us_per_token_at_peak: a prompt token's layer matmuls at the card's "
                   "dense bf16 peak (a floor while prompt work is added to the steps)",
           "orders": a.orders, "target": a.target, "peak_tflops": peak, "points": pts}
    if not pts:
        res["skipped"] = "no point with both a serving run and the engine's decode at its batch"
    if a.write:
        doc["load_ceiling"] = res
        tmp = a.serving_json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, a.serving_json)
    print(json.dumps(res, indent=1))
    for p in pts:
        sys.stderr.write("# bench ceiling c=%d: %s tok/s (%s x engine; full batches %s x), "
                         "%s rows a step (measured %s), prompts %s of the time; serving %s x "
                         "the ceiling; %s x needs prompts at %s us a token (now %s; their "
                         "FLOPs at peak %s: %s x)\n"
                         % (p["concurrency"], p["ceiling_tok_s"],
                                            p["ceiling_vs_engine_decode"],
                                            p["full_batch_vs_engine_decode"], p["rows_per_step"],
                                            p["measured_rows_per_step"], p["prompt_share"],
                                            p["serving_vs_ceiling"], a.target,
                                            p["prompt_us_per_token_for_target"],
                                            p["prompt_us_per_token"],
                                            p["prompt_us_per_token_at_peak"],
                                            p["ceiling_vs_engine_decode_prompts_at_peak"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
