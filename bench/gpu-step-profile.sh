#!/bin/bash
# gpu-step-profile.sh — where one engine step's GPU time goes, kernel by kernel (docs/cuda.md
# "Sampling on the device, and the serving bench"): Nsight Compute (`ncu --profile-from-start
# off`, clocks left alone, one metric: gpu__time_duration) over one step of
# bench/gpu_serving_engine (its --profile window) on the random TinyLlama-1.1B-shaped checkpoint
# of bench/gpu-serving.sh. Windows:
#   decode64        the bs64 decode step through its graph, 160-token prompts (the serving
#                   bench's engine ceiling);
#   decode64_long   the same at 640-token prompts (serving's longer contexts);
#   decode8         the bs8 decode step (the engine goal's batch);
#   mixed64_400     64 decode rows beside a 400-token chunk (an eager mixed step);
#   mixed64_32      64 decode rows beside a 32-token chunk.
# ncu replays each kernel alone with its caches flushed, so a window's kernel sum is not the
# step's wall time (small kernels read cold what a real step finds in L2; bench/gpu-mixed-price.sh
# times the steps). Per window: kernels grouped by name (count, µs),
# by role (GEMM / GEMV, attention, norm and elementwise, other) and their sum.
# Usage: bench/gpu-step-profile.sh BUILD SRCDIR OUT.json (TDM_PROFILE_MODEL: a checkpoint instead
# of the random one; TDM_BENCH_GIT_SHA, else the bundle's MANIFEST, else git; NCU: the ncu
# binary). Prints TAP.
set -u
BUILD=${1:?usage: gpu-step-profile.sh BUILD SRCDIR OUT.json}
SRC=${2:?usage}
OUT=${3:?usage}
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
if [ -z "$NCU" ] || [ ! -x "$NCU" ]; then
    echo "Bail out! no ncu (Nsight Compute) on this machine"
    exit 1
fi
. "$SRC/bench/gpu_bench_lib.sh"
gb_init gpu-step-profile "$BUILD" "$SRC" "${TDM_PROFILE_MODEL:-}"
# window NAME K ARGS... — profile the K-th timed configuration of one gpu_serving_engine run
window() {
    local name=$1 k=$2
    shift 2
    "$NCU" --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
        --csv --print-units base --print-kernel-base function \
        --log-file "$T/$name.ncu.log" "$E" --model "$MODEL" --reps 1 --profile "$k" --steps 8 \
        "$@" > "$T/$name.out" 2> "$T/$name.err"
    local rc=$?
    # ncu's CSV goes to the log file; the program's JSON to stdout
    grep '^"' "$T/$name.ncu.log" > "$T/$name.csv" 2>/dev/null
    [ "$rc" = 0 ] && [ -s "$T/$name.csv" ]
    tap $? "window $name"
    [ -s "$T/$name.csv" ] || tail -5 "$T/$name.ncu.log" "$T/$name.err" >&2
}
# configuration order (gpu_serving_engine --profile): each batch's ids, logits; each mixed
# batch's mixed, flash-only, decode-only; each price chunk
window decode64 1 --prompt-len 160 --batch 64
window decode64_long 1 --prompt-len 640 --batch 64
window decode8 1 --prompt-len 160 --batch 8
window mixed64_400 3 --prompt-len 160 --batch 64 --mixed-batch 64 --mixed-chunk 400
window mixed64_32 3 --prompt-len 160 --batch 64 --mixed-batch 64 --mixed-chunk 32
gb_ident
python3 - "$T" "$OUT" "$sha" "$gpu" <<'PY'
import csv, json, os, re, sys, time
T, out, sha, gpu = sys.argv[1:5]


def role(name):
    n = name.lower()
    if any(k in n for k in ("gemm", "gemv", "skinny", "cutlass", "sm90_xmma", "xmma", "nvjet")):
        return "gemm"
    if any(k in n for k in ("attn", "attention", "flash", "rope", "kv_write", "combine")):
        return "attention"
    if any(k in n for k in ("norm", "silu", "swiglu", "embed", "bias", "add", "convert")):
        return "norm_elementwise"
    return "other"


windows = {}
for name in ("decode64", "decode64_long", "decode8", "mixed64_400", "mixed64_32"):
    path = os.path.join(T, name + ".csv")
    if not os.path.exists(path):
        windows[name] = None
        continue
    rows = list(csv.DictReader(open(path)))
    by, roles, total, count = {}, {}, 0.0, 0
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            ns = float(str(r["Metric Value"]).replace(",", ""))
        except ValueError:
            continue
        k = re.sub(r"\(.*$", "", r.get("Kernel Name", "?")).strip() or "?"
        us = ns / 1e3
        a = by.setdefault(k, {"count": 0, "us": 0.0})
        a["count"] += 1
        a["us"] += us
        roles[role(k)] = roles.get(role(k), 0.0) + us
        total += us
        count += 1
    kern = sorted(({"kernel": k, "count": v["count"], "us": round(v["us"], 1)}
                   for k, v in by.items()), key=lambda x: -x["us"])
    windows[name] = {"kernels": count, "sum_us": round(total, 1),
                     "by_role_us": {k: round(v, 1) for k, v in sorted(roles.items())},
                     "by_kernel": kern}
doc = {"bench": "gpu-step-profile", "git_sha": sha, "gpu": gpu,
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "what": "one engine step's kernels under ncu (gpu__time_duration, each kernel replayed "
               "alone, caches flushed, clocks left alone): bench/gpu-step-profile.sh header",
       "windows": windows}
json.dump(doc, open(out, "w"), indent=1)
for name, w in windows.items():
    if not w:
        print("# %s: none" % name)
        continue
    print("# %s: %d kernels, %.1f us; %s" % (name, w["kernels"], w["sum_us"], w["by_role_us"]))
    for k in w["by_kernel"][:12]:
        print("#   %7.1f us  %4d  %s" % (k["us"], k["count"], k["kernel"][:90]))
PY
tap $? "gpu_step_profile.json written"
echo "1..$n"
