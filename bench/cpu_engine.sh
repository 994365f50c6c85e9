#!/bin/sh
# cpu_engine.sh BUILDDIR SRCDIR [OUT] — CPU engine throughput on a fixture model and on random
# Llama-shaped checkpoints (generated under $TDM_BENCH_TMP, default /tmp, never committed), each
# beside the memcpy-bandwidth limit measured in the same process; writes OUT (default
# SRCDIR/bench/results/cpu_engine.json) with the git sha. Use a build without sanitizers
# (configure without --enable-sanitizers) for numbers worth committing.
# Clean numbers: SHA=$(git rev-parse HEAD); git archive $SHA | tar -x -C SNAP; build SNAP without
# sanitizers; TDM_BENCH_GIT_SHA=$SHA cpu_engine.sh BUILD SNAP OUT.
# Env: TDM_BENCH_PRESETS="small large", TDM_BENCH_STEPS (16), TDM_BENCH_BATCH (4),
#      TDM_BENCH_PROMPT (128), TDM_BENCH_REPS (3, best of), TDM_CPU_THREADS (engine threads; default all CPUs).
set -eu
BUILD=${1:?usage: cpu_engine.sh BUILDDIR SRCDIR [OUT]}
SRC=${2:?usage: cpu_engine.sh BUILDDIR SRCDIR [OUT]}
OUT=${3:-$SRC/bench/results/cpu_engine.json}
TMPD=${TDM_BENCH_TMP:-/tmp}
PRESETS=${TDM_BENCH_PRESETS:-small large}
STEPS=${TDM_BENCH_STEPS:-16}
BATCH=${TDM_BENCH_BATCH:-4}
PROMPT=${TDM_BENCH_PROMPT:-128}
REPS=${TDM_BENCH_REPS:-3}
BIN="$BUILD/bench/cpu_engine"

load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
echo "cpu_engine: fixture tiny-llama-gqa" >&2
"$BIN" --model "$SRC/tests/fixtures/models/tiny-llama-gqa" --name fixture-tiny-llama-gqa \
    --prompt-len "$PROMPT" --steps "$STEPS" --batch "$BATCH" --reps "$REPS" >>"$runs"
for p in $PRESETS; do
    dir="$TMPD/tdm-bench-random-$p"
    if [ ! -f "$dir/model.safetensors" ]; then
        python3 "$SRC/bench/gen_random_model.py" "$dir" --preset "$p" >&2
    fi
    echo "cpu_engine: random-$p" >&2
    "$BIN" --model "$dir" --name "random-llama-$p" --prompt-len "$PROMPT" --steps "$STEPS" \
        --batch "$BATCH" --reps "$REPS" >>"$runs"
done

# TDM_BENCH_GIT_SHA: the commit the build came from, when SRC is an exported snapshot
# (git archive SHA) rather than a checkout; such a build is clean by construction.
if [ -n "${TDM_BENCH_GIT_SHA:-}" ]; then
    sha=$TDM_BENCH_GIT_SHA
    dirty=
else
    sha=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)
    dirty=$(git -C "$SRC" status --porcelain --untracked-files=no -- bench dataplane kernels \
        common include 2>/dev/null | head -1)
fi
san=no
grep -q '^TDM_SAN_CFLAGS = .*-fsanitize' "$BUILD/Makefile" 2>/dev/null && san=yes
cflags=$(sed -n 's/^CFLAGS = //p' "$BUILD/Makefile" | head -1)
python3 - "$runs" "$OUT" "$sha" "$san" "$cflags" "${dirty:+dirty}" "$load_before" <<'PY'
import json, os, platform, sys, time
runs, out, sha, san, cflags, dirty, load_before = sys.argv[1:8]
cpu = "unknown"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
doc = {
    "bench": "cpu_engine",
    "git_sha": sha,
    "git_dirty": bool(dirty),
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "host": {"cpu": cpu, "online_cpus": os.cpu_count(), "machine": platform.machine(),
             "loadavg_before": load_before,
             "loadavg_after": " ".join(open("/proc/loadavg").read().split()[:3])},
    "note": "each figure is the best of N runs; a fixture's weights fit in cache, so its "
            "memcpy-based limit is only an upper bound for DRAM-resident models",
    "build": {"cflags": cflags, "sanitizers": san == "yes"},
    "anchor": "memcpy bandwidth measured in the same process with the engine's thread count; "
              "decode_limit_tok_s_bs1 = bandwidth / weight_bytes",
    "models": [json.loads(l) for l in open(runs) if l.strip()],
}
# Sections other tools record in this file (demo_*: the demo model's evaluations) are kept.
try:
    old = json.load(open(out))
    doc.update({k: v for k, v in old.items() if k.startswith("demo_")})
except (OSError, ValueError):
    pass
os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
with open(out, "w") as f:
    json.dump(doc, f, indent=2, ensure_ascii=False)
    f.write("\n")
print(out)
PY
