#!/bin/sh
# serving.sh BUILDDIR SRCDIR [OUT] — the serving runtime's throughput and TTFT through POST
# /generate at concurrency 1, 8, 32, 64, in both loops (a TP=1 tandem-worker on --device cpu),
# each beside the engine's own batched decode at the same batch size (bench/cpu_engine, same
# model, same thread count, same run): the serving anchor (target: serving >= 80 % of it).
# Writes OUT (default SRCDIR/bench/results/serving.json) with git sha, nproc and load average.
# Use a build without sanitizers for numbers worth committing.
# Clients: tests/integration/test-load bench (C closed-loop clients, greedy, ignore_eos, streamed;
# TTFT = request sent → first token event received). Each concurrency C runs 2*C requests (at
# least 8) of TDM_BENCH_PROMPT (16) prompt tokens and TDM_BENCH_NEW (64) new tokens.
# Every cell is the best of TDM_BENCH_REPS (3) rounds (throughput: highest; its TTFT is that run's).
# Env: TDM_BENCH_MODEL (SRCDIR/models/demo), TDM_BENCH_CONC ("1 8 32 64"), TDM_CPU_THREADS.
set -eu
BUILD=${1:?usage: serving.sh BUILDDIR SRCDIR [OUT]}
SRC=${2:?usage: serving.sh BUILDDIR SRCDIR [OUT]}
OUT=${3:-$SRC/bench/results/serving.json}
MODEL=${TDM_BENCH_MODEL:-$SRC/models/demo}
CONC=${TDM_BENCH_CONC:-1 8 32 64}
PROMPT=${TDM_BENCH_PROMPT:-16}
NEW=${TDM_BENCH_NEW:-64}
REPS=${TDM_BENCH_REPS:-3}
W="$BUILD/tandem-worker"
L="$BUILD/tests/integration/test-load"
E="$BUILD/bench/cpu_engine"
for b in "$W" "$L" "$E"; do
    [ -x "$b" ] || { echo "serving.sh: $b is not built" >&2; exit 2; }
done
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$MODEL/config.json")
T=$(mktemp -d)
wp=""
trap '[ -n "$wp" ] && kill -9 $wp 2>/dev/null; rm -rf "$T"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# Best of REPS rounds, each round the anchor then both loops, so that a burst of load from other
# users of a shared host hits both sides of the comparison alike.
for rep in $(seq "$REPS"); do
    for c in $CONC; do
        echo "serving.sh: round $rep: engine decode at batch $c" >&2
        "$E" --model "$MODEL" --name engine --prompt-len "$PROMPT" --steps "$NEW" --batch "$c" \
            --reps 1 --copy-mib 64 > "$T/engine-$c-$rep.json"
    done
    for loop in overlap lockstep; do
        extra=""
        [ $loop = lockstep ] && extra=--disable-overlap-schedule
        rm -f "$T/ready"
        "$W" --model-path "$MODEL" --device cpu --tp-size 1 --port 0 --ready-file "$T/ready" \
            --max-running-requests 64 $extra > "$T/log-$loop" 2>&1 &
        wp=$!
        i=0
        while [ $i -lt 600 ] && [ ! -s "$T/ready" ]; do sleep 0.1; i=$((i + 1)); done
        port=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$T/ready")
        # warm-up (page faults of the weights, thread start)
        "$L" bench --port "$port" --concurrency 1 --requests 2 --prompt-len "$PROMPT" \
            --max-new 8 --vocab "$vocab" > /dev/null
        for c in $CONC; do
            r=$((2 * c))
            [ $r -lt 8 ] && r=8
            echo "serving.sh: round $rep: $loop loop, concurrency $c ($r requests)" >&2
            "$L" bench --port "$port" --concurrency "$c" --requests "$r" \
                --prompt-len "$PROMPT" --max-new "$NEW" --vocab "$vocab" > "$T/serve-$loop-$c-$rep"
        done
        kill -TERM $wp
        wait $wp || true
        wp=""
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

sha=${TDM_BENCH_GIT_SHA:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
dirty=false
[ -z "${TDM_BENCH_GIT_SHA:-}" ] && [ -n "$(git -C "$SRC" status --porcelain 2>/dev/null)" ] && dirty=true
python3 - "$T" "$OUT" "$sha" "$dirty" "$(nproc)" "$load_before" "$load_after" "$MODEL" \
    "$PROMPT" "$NEW" "${TDM_CPU_THREADS:-0}" "$REPS" $CONC <<'PY'
import json, os, sys, time
T, out, sha, dirty, nproc, lb, la, model, prompt, new, threads, reps = sys.argv[1:13]
conc = [int(c) for c in sys.argv[13:]]
reps = range(1, int(reps) + 1)
def kv(path):
    line = [l for l in open(path) if l.startswith("requests=")][0]
    return {k: float(v) for k, v in (f.split("=") for f in line.split())}
rows = []
for c in conc:
    dec = max(json.load(open(os.path.join(T, "engine-%d-%d.json" % (c, r))))["decode_batch"]["tok_s"]
              for r in reps)
    row = {"concurrency": c, "engine_decode_tok_s": round(dec, 1)}
    for loop in ("overlap", "lockstep"):
        s = max((kv(os.path.join(T, "serve-%s-%d-%d" % (loop, c, r))) for r in reps),
                key=lambda x: x["tok_s"] if x["ok"] == x["requests"] else -1)
        row[loop] = {"requests": int(s["requests"]), "ok": int(s["ok"]),
                     "tokens": int(s["tokens"]), "wall_s": s["wall_s"],
                     "tok_s": s["tok_s"], "ttft_p50_ms": s["ttft_p50_ms"],
                     "ttft_p90_ms": s["ttft_p90_ms"], "vs_engine": round(s["tok_s"] / dec, 3)}
    rows.append(row)
doc = {
    "bench": "serving",
    "what": "POST /generate throughput (completion tokens / wall, closed-loop clients, streamed) "
            "and TTFT at each concurrency, both loops, TP=1 CPU worker; beside the engine's own "
            "batched decode (bench/cpu_engine decode_batch) at batch = concurrency, same run",
    "target": "serving tok_s >= 0.8 x engine decode tok_s at the same batch",
    "model": os.path.basename(os.path.normpath(model)),
    "prompt_tokens": int(prompt), "new_tokens": int(new), "best_of": len(reps),
    "cpu_threads": int(threads) or int(nproc),
    "git_sha": sha, "dirty": dirty == "true", "nproc": int(nproc),
    "loadavg_before": lb, "loadavg_after": la,
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "results": rows,
}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print(json.dumps(rows, indent=1))
PY
