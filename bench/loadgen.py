#!/usr/bin/env python3
"""loadgen.py — an open-loop load generator for a worker's streaming /v1/chat/completions, with
the figures SGLang's bench_serving and vLLM's benchmark_serving print (standard library only).

Each point of --points is one run of --num-prompts requests:
  rate:R    Poisson arrivals at R requests/s (exponential gaps, seeded), no concurrency cap
            ("inf" sends every request at t=0);
  conc:C    arrivals as fast as the cap allows, at most C requests in flight (max-concurrency);
  rate:R/C  both.
Prompts are synthetic and seeded: words drawn from a fixed list, lengths from ShareGPT-like
log-normal distributions (input median --input-median tokens, output median --output-median,
sigma 0.9 / 0.8, clipped to [--min-len, --input-max] / [--min-len, --output-max]); every request
asks for exactly its output length (max_tokens with ignore_eos) at temperature 0. Input lengths
are in the served model's tokens, chat template included: two probe requests (1 and 201 words)
measure its tokenizer's tokens per word of the list and the template's own tokens from their
usage.prompt_tokens, and each prompt gets the words that make its drawn length ("calibration" in
the output), as bench_serving sizes prompts with the model's tokenizer.

Per point: request throughput, input and output tok/s (tokens from each response's `usage`,
over the wall time from the first send to the last finish), TTFT (send -> first content chunk),
ITL (gaps between content chunks), TPOT ((e2e - TTFT) / (output - 1)) and e2e latency: mean, p50,
p90, p99; from the worker's counters, the loop's time per iteration and the one-token rows'
contexts (decode_ctx: the mean row's positions and the mean of each iteration's longest).
Cross-checks (a failure makes the exit status 1): every request ends 200 with
usage.completion_tokens == its max_tokens, and at most that many content chunks; the worker's
/metrics counters over the point (tandem_generated_tokens_total, and tandem_prefill_tokens_total +
tandem_prompt_tokens_cached_total while tandem_retractions_total stays put) equal the sums of the
responses' usage (polled with a deadline: the scheduler publishes them at the end of an iteration).
PD (--prefill-url): the requests go to the decode group at --url, the prompt tokens are checked
against the prefill group's counters.

Requests are spread over --procs processes (threads inside each), so the client's JSON parsing
does not cap a fast server; arrivals follow one global schedule.

Usage: loadgen.py --url http://127.0.0.1:PORT --points "conc:1,conc:8,rate:16" [--num-prompts N]
  [--num-factor F]
  [--seed S] [--input-median N] [--output-median N] [--input-max N] [--output-max N]
  [--min-len N] [--procs N] [--timeout S] [--prefill-url URL] [--out FILE]
Prints one JSON object (and writes it to --out).
"""
import argparse
import http.client
import json
import math
import multiprocessing as mp
import os
import random
import sys
import threading
import time
import urllib.parse
import zlib

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have "
         "from or one had by word but not what all were we when your can said there use an each "
         "which she do how their if will up other about out many then them these so some her "
         "would make like him into time has look two more write go see number no way could "
         "people my than first water been call who oil its now find long down day did get come "
         "made may part weather city tool answer question request search file open close read "
         "list value table order price ticket flight hotel email message calendar").split()


def lognormal_len(rng, median, sigma, lo, hi):
    return max(lo, min(hi, int(round(median * math.exp(rng.gauss(0.0, sigma))))))


def make_requests(n, seed, a, cal):
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        n_in = lognormal_len(rng, a.input_median, 0.9, a.min_len, a.input_max)
        n_out = lognormal_len(rng, a.output_median, 0.8, a.min_len, a.output_max)
        # the words that make n_in tokens with the template's own around them (calibrate)
        words = max(1, int(round((n_in - cal["overhead_tokens"]) / cal["tokens_per_word"])))
        text = "request %d: " % i + " ".join(rng.choice(WORDS) for _ in range(words))
        reqs.append({"i": i, "prompt": text, "target_in": n_in, "max_tokens": n_out})
    return reqs


def calibrate(host, port, model, a):
    """Tokens per word of the list and the chat template's own tokens on the served model, from
    the usage.prompt_tokens of a 1-word and a 201-word request."""
    rng = random.Random(a.seed + 7)
    got = []
    for words in (1, 201):
        text = "request 0: " + " ".join(rng.choice(WORDS) for _ in range(words))
        rec = one_request(host, port, model, {"i": -1, "prompt": text, "max_tokens": 1},
                          a.timeout)
        if not rec["ok"]:
            raise RuntimeError("calibration request failed: %s" % rec["error"])
        got.append(rec["usage"]["prompt_tokens"])
    tpw = (got[1] - got[0]) / 200.0
    if tpw <= 0:
        raise RuntimeError("calibration: %d and %d prompt tokens" % tuple(got))
    return {"tokens_per_word": round(tpw, 4), "overhead_tokens": round(got[0] - tpw, 2),
            "probe_prompt_tokens": got}


def parse_point(s):
    kind, _, v = s.partition(":")
    rate, conc = float("inf"), 0
    if kind == "rate":
        r, _, c = v.partition("/")
        rate = float("inf") if r == "inf" else float(r)
        conc = int(c) if c else 0
        if not rate > 0 or conc < 0:
            raise ValueError(s)
    elif kind == "conc":
        conc = int(v)
        if conc <= 0:
            raise ValueError(s)
    else:
        raise ValueError(s)
    return {"name": s, "rate": rate, "max_concurrency": conc}


def one_request(host, port, model, req, timeout):
    """Send one streaming chat request; returns its record (times relative to the send)."""
    body = json.dumps({
        "model": model, "messages": [{"role": "user", "content": req["prompt"]}],
        "max_tokens": req["max_tokens"], "temperature": 0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}})
    rec = {"i": req["i"], "max_tokens": req["max_tokens"], "ok": False, "error": None,
           "chunks": [], "usage": None}
    t0 = time.perf_counter()
    rec["t_send"] = time.time()
    try:
        c = http.client.HTTPConnection(host, port, timeout=timeout)
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            rec["error"] = "HTTP %d: %s" % (r.status, r.read()[:200].decode("utf-8", "replace"))
            c.close()
            return rec
        done = False
        while True:
            line = r.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            t = time.perf_counter() - t0
            data = line[6:].strip()
            if data == b"[DONE]":
                done = True
                break
            o = json.loads(data)
            if o.get("usage"):
                rec["usage"] = o["usage"]
            for ch in o.get("choices") or []:
                d = ch.get("delta") or {}
                if d.get("content"):
                    rec["chunks"].append(t)
        c.close()
        rec["e2e"] = time.perf_counter() - t0
        if not done:
            rec["error"] = "stream ended without [DONE]"
        elif not rec["usage"]:
            rec["error"] = "no usage chunk"
        else:
            rec["ok"] = True
    except Exception as e:  # noqa: BLE001 - every failure is recorded, not raised
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    return rec


def proc_main(host, port, model, reqs, starts, t_base, sem, timeout, q):
    """One process: a thread per request, each waits for its start time (and the cap)."""
    out = []
    lock = threading.Lock()

    def run(req, start):
        delay = t_base + start - time.time()
        if delay > 0:
            time.sleep(delay)
        if sem is not None:
            sem.acquire()
        try:
            rec = one_request(host, port, model, req, timeout)
        finally:
            if sem is not None:
                sem.release()
        with lock:
            out.append(rec)

    ths = [threading.Thread(target=run, args=(r, s), daemon=True) for r, s in zip(reqs, starts)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    q.put(out)


def get_json(host, port, path, timeout=10):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    b = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("GET %s: HTTP %d" % (path, r.status))
    return b


COUNTERS = ("tandem_generated_tokens_total", "tandem_prefill_tokens_total",
            "tandem_prompt_tokens_cached_total", "tandem_retractions_total")
# reported beside (where the time went: steps of decode rows only vs steps with prefill chunks);
# a worker without them reports none
WAIT = 'tandem_sched_exec_wait_seconds_total{kind="%s"}'
CTX = ("tandem_sched_decode_rows_total", "tandem_sched_decode_row_positions_total",
       "tandem_sched_decode_row_iterations_total",
       "tandem_sched_decode_longest_row_positions_total")
EXTRA = ("tandem_sched_decode_iterations_total", "tandem_sched_mixed_iterations_total",
         "tandem_sched_build_seconds_total", "tandem_sched_process_seconds_total",
         WAIT % "idle", WAIT % "decode", WAIT % "mixed") + CTX


def scrape(host, port):
    text = get_json(host, port, "/metrics").decode()
    v = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) == 2 and (parts[0] in COUNTERS or parts[0] in EXTRA):
            v[parts[0]] = float(parts[1])
    missing = [k for k in COUNTERS if k not in v]
    if missing:
        raise RuntimeError("/metrics lacks " + ", ".join(missing))
    return v


def scrape_settled(host, port, limit=0.5):
    """The counters once the worker is quiet: the previous point's (or the warm-up's) last
    iteration publishes them after its responses went out, so a scrape right after them can miss
    its last tokens and charge them to the next point. Two scrapes 50 ms apart that agree."""
    v = scrape(host, port)
    deadline = time.time() + limit
    while time.time() < deadline:
        time.sleep(0.05)
        w = scrape(host, port)
        if all(w.get(k) == v.get(k) for k in COUNTERS):
            return w
        v = w
    return v


def pct(xs, q):
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q
    f = math.floor(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def stats_ms(xs):
    if not xs:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    return {"mean": round(1e3 * sum(xs) / len(xs), 3), "p50": round(1e3 * pct(xs, 0.5), 3),
            "p90": round(1e3 * pct(xs, 0.9), 3), "p99": round(1e3 * pct(xs, 0.99), 3)}


def loop_split(d):
    """The scheduler loop's time per batch iteration over the point (µs): build, waiting for the
    executor, processing; None when the worker does not report them."""
    nd = d.get("tandem_sched_decode_iterations_total", 0)
    nm = d.get("tandem_sched_mixed_iterations_total", 0)
    keys = ("tandem_sched_build_seconds_total", "tandem_sched_process_seconds_total",
            WAIT % "idle", WAIT % "decode", WAIT % "mixed")
    if nd + nm <= 0 or any(k not in d for k in keys):
        return None
    n = nd + nm
    wait = d[WAIT % "idle"] + d[WAIT % "decode"] + d[WAIT % "mixed"]
    return {"build": round(d[keys[0]] * 1e6 / n, 1),
            "exec_wait": round(wait * 1e6 / n, 1),
            "process": round(d[keys[1]] * 1e6 / n, 1),
            # per iteration of that kind: in lockstep the forward of a decode step and of a step
            # with prefill chunks
            "exec_wait_decode": round(d[WAIT % "decode"] * 1e6 / nd, 1) if nd else None,
            "exec_wait_mixed": round(d[WAIT % "mixed"] * 1e6 / nm, 1) if nm else None}


def decode_ctx(d):
    """The one-token rows' contexts over the point: the mean row's positions, and the mean of
    each iteration's longest row (a decode attention that runs a block per row waits for it);
    None when the worker does not report them."""
    if any(k not in d for k in CTX) or d[CTX[0]] <= 0 or d[CTX[2]] <= 0:
        return None
    return {"mean": round(d[CTX[1]] / d[CTX[0]], 1), "longest_mean": round(d[CTX[3]] / d[CTX[2]], 1),
            "rows_per_iteration": round(d[CTX[0]] / d[CTX[2]], 2)}


def run_point(a, host, port, model, point, reqs, seed):
    rng = random.Random(seed ^ 0x5EED)
    starts, t = [], 0.0
    for _ in reqs:
        starts.append(t)
        if math.isfinite(point["rate"]):
            t += rng.expovariate(point["rate"])
    sem = mp.Semaphore(point["max_concurrency"]) if point["max_concurrency"] else None
    before = scrape_settled(host, port)
    pre_before = scrape_settled(*a.prefill) if a.prefill else None
    procs = max(1, min(a.procs, len(reqs)))
    q = mp.Queue()
    t_base = time.time() + 0.2
    ps = []
    for k in range(procs):
        sub = list(range(k, len(reqs), procs))
        p = mp.Process(target=proc_main, args=(host, port, model, [reqs[i] for i in sub],
                                               [starts[i] for i in sub], t_base, sem, a.timeout,
                                               q))
        p.start()
        ps.append(p)
    recs = []
    for _ in ps:
        recs.extend(q.get())
    for p in ps:
        p.join()
    recs.sort(key=lambda r: r["i"])

    errors = []
    ok = [r for r in recs if r["ok"]]
    for r in recs:
        if not r["ok"]:
            errors.append("request %d: %s" % (r["i"], r["error"]))
            continue
        u = r["usage"]
        if u.get("completion_tokens") != r["max_tokens"]:
            errors.append("request %d: usage.completion_tokens %s != max_tokens %d (ignore_eos)"
                          % (r["i"], u.get("completion_tokens"), r["max_tokens"]))
        if len(r["chunks"]) > u.get("completion_tokens", 0):
            errors.append("request %d: %d content chunks > %s completion tokens"
                          % (r["i"], len(r["chunks"]), u.get("completion_tokens")))
    sum_out = sum(r["usage"]["completion_tokens"] for r in ok)
    sum_in = sum(r["usage"]["prompt_tokens"] for r in ok)
    by_i = {q["i"]: q for q in reqs}
    sum_target_in = sum(by_i[r["i"]]["target_in"] for r in ok)
    # the counters lag the last response by up to an iteration: poll with a deadline
    deadline = time.time() + a.metrics_wait
    while True:
        after = scrape(host, port)
        d = {k: after[k] - before[k] for k in COUNTERS + EXTRA if k in after and k in before}
        gen_ok = d["tandem_generated_tokens_total"] == sum_out
        pre = d["tandem_prefill_tokens_total"] + d["tandem_prompt_tokens_cached_total"]
        retracted = d["tandem_retractions_total"] > 0
        if pre_before is not None:
            # PD: the prompts are computed by the prefill group (--prefill-url), the decode group
            # holds them as transferred KV
            pre_after = scrape(*a.prefill)
            dp = {k: pre_after[k] - pre_before[k] for k in COUNTERS if k in pre_after}
            d.update({"prefill_group_" + k: v for k, v in dp.items()})
            pre = dp["tandem_prefill_tokens_total"] + dp["tandem_prompt_tokens_cached_total"]
            retracted = retracted or dp["tandem_retractions_total"] > 0
        pre_ok = retracted or pre == sum_in
        if (gen_ok and pre_ok) or time.time() > deadline:
            break
        time.sleep(0.05)
    if not gen_ok:
        errors.append("/metrics tandem_generated_tokens_total grew %d, responses' usage sums %d"
                      % (d["tandem_generated_tokens_total"], sum_out))
    if not pre_ok:
        errors.append("/metrics prefill + cached prompt tokens grew %d, responses' usage sums %d"
                      % (pre, sum_in))

    t_first = min(r["t_send"] for r in recs)
    t_last = max(r["t_send"] + r.get("e2e", 0.0) for r in recs)
    dur = max(t_last - t_first, 1e-9)
    ttft = [r["chunks"][0] for r in ok if r["chunks"]]
    itl = [b - a_ for r in ok for a_, b in zip(r["chunks"], r["chunks"][1:])]
    tpot = [(r["e2e"] - r["chunks"][0]) / (r["usage"]["completion_tokens"] - 1)
            for r in ok if r["chunks"] and r["usage"]["completion_tokens"] > 1]
    e2e = [r["e2e"] for r in ok]
    return {
        "point": point["name"],
        "request_rate": None if not math.isfinite(point["rate"]) else point["rate"],
        "max_concurrency": point["max_concurrency"] or None,
        "requests": len(recs), "completed": len(ok), "duration_s": round(dur, 3),
        "total_input_tokens": sum_in, "total_output_tokens": sum_out,
        "drawn_input_tokens": sum_target_in,
        "request_throughput": round(len(ok) / dur, 3),
        "input_tok_s": round(sum_in / dur, 1), "output_tok_s": round(sum_out / dur, 1),
        "concurrency_mean": round(sum(e2e) / dur, 2),
        "ttft_ms": stats_ms(ttft), "itl_ms": stats_ms(itl), "tpot_ms": stats_ms(tpot),
        "e2e_ms": stats_ms(e2e),
        "metrics_delta": {k: (round(v, 6) if "_seconds_total" in k else int(v))
                          for k, v in d.items()},
        "loop_us_per_iter": loop_split(d),
        "decode_ctx": decode_ctx(d),
        "step_ms_mean": (round(dur * 1e3 / (d["tandem_sched_decode_iterations_total"] +
                                            d["tandem_sched_mixed_iterations_total"]), 3)
                         if d.get("tandem_sched_decode_iterations_total", 0) +
                         d.get("tandem_sched_mixed_iterations_total", 0) > 0 else None),
        "errors": errors[:20], "n_errors": len(errors),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--points", required=True)
    ap.add_argument("--num-prompts", type=int, default=0,
                    help="requests per point (0: max(F x concurrency, 16), F = --num-factor)")
    ap.add_argument("--num-factor", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--input-median", type=int, default=160)
    ap.add_argument("--output-median", type=int, default=140)
    ap.add_argument("--input-max", type=int, default=1024)
    ap.add_argument("--output-max", type=int, default=512)
    ap.add_argument("--min-len", type=int, default=4)
    ap.add_argument("--procs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--metrics-wait", type=float, default=10.0)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prefill-url", help="PD: the prefill group, whose /metrics count the "
                    "prompts (the decode group at --url serves the requests)")
    ap.add_argument("--out")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    a.prefill = None
    if a.prefill_url:
        pu = urllib.parse.urlparse(a.prefill_url)
        a.prefill = (pu.hostname, pu.port or 80)
    try:
        points = [parse_point(p) for p in a.points.split(",") if p]
    except ValueError as e:
        sys.stderr.write("loadgen: bad point %s (rate:R, rate:R/C, conc:C)\n" % e)
        return 2
    model = json.loads(get_json(host, port, "/v1/models"))["data"][0]["id"]
    try:
        cal = calibrate(host, port, model, a)
    except RuntimeError as e:
        sys.stderr.write("loadgen: %s\n" % e)
        return 1
    if a.warmup:
        w = make_requests(a.warmup, a.seed + 999, a, cal)
        for r in w:
            r["max_tokens"] = min(r["max_tokens"], 8)
            rec = one_request(host, port, model, r, a.timeout)
            if not rec["ok"]:
                sys.stderr.write("loadgen: warm-up request failed: %s\n" % rec["error"])
                return 1
    res = []
    for k, p in enumerate(points):
        n = a.num_prompts or max(a.num_factor * (p["max_concurrency"] or 4), 16)
        # the seed follows the point's name, so one point run against two workers (PD and
        # colocated) sends the same requests
        ps = a.seed + zlib.crc32(p["name"].encode()) % 100003
        reqs = make_requests(n, ps, a, cal)
        r = run_point(a, host, port, model, p, reqs, ps)
        sys.stderr.write("loadgen: %-12s %4d/%d ok  %8.1f out tok/s  %6.2f req/s  TTFT p50 %s ms"
                         "  ITL p50 %s p99 %s ms%s\n"
                         % (p["name"], r["completed"], r["requests"], r["output_tok_s"],
                            r["request_throughput"], r["ttft_ms"]["p50"], r["itl_ms"]["p50"],
                            r["itl_ms"]["p99"],
                            "  ERRORS %d: %s" % (r["n_errors"], r["errors"][0])
                            if r["n_errors"] else ""))
        res.append(r)
    doc = {"url": a.url, "prefill_url": a.prefill_url, "model": model, "seed": a.seed,
           "lengths": {"input_median": a.input_median, "output_median": a.output_median,
                       "input_max": a.input_max, "output_max": a.output_max,
                       "min": a.min_len, "distribution": "log-normal, sigma 0.9 in / 0.8 out"},
           "calibration": cal,
           "procs": a.procs, "points": res, "ok": all(r["n_errors"] == 0 for r in res)}
    text = json.dumps(doc, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
