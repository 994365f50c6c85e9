#!/bin/bash
# gpu-serving.sh BUILDDIR SRCDIR [OUT] — the OpenAI endpoint under open-loop load, measured like
# SGLang's bench_serving: bench/loadgen.py against a worker's streaming /v1/chat/completions
# (seeded synthetic prompts, ShareGPT-like log-normal lengths, ignore_eos, temperature 0), a
# max-concurrency sweep and Poisson request rates in the overlap loop, the concurrency points of
# TDM_SERVE_LOOP_CONC again in lockstep (--disable-overlap-schedule) and, on cuda, in the
# overlap loop's threaded form (TDM_CUDA_PIPELINE=0; the default is pipelined) and in the
# pipelined loop with every mixed step's rows through the flash tiles (TDM_CUDA_MIXED_DECODE=0:
# the one-token rows not through the decode attention; every other worker runs with the
# default, 1); beside, in the same run, the
# engine's own batched decode at the same batch sizes (bench/gpu_serving_engine, --device cuda
# only: the ceiling). Every point's token counts are cross-checked against each response's usage
# and the worker's /metrics counters (loadgen.py); a mismatch or a failed request fails the bench.
# Writes OUT (default SRCDIR/bench/results/gpu_serving.json; docs/contracts.md §h) with git_sha.
# Prints TAP.
# Env: TDM_SERVE_DEVICE cuda (default) | cpu; TDM_SERVE_MODEL (cuda: a random-weight checkpoint
# of TinyLlama-1.1B's shape with models/demo's tokenizer, made under /tmp by
# bench/gen_random_model.py --preset tinyllama-demo; cpu: SRCDIR/models/demo);
# TDM_SERVE_CONC ("1 8 32 64 128"), TDM_SERVE_RATES ("8 32"), TDM_SERVE_LOOP_CONC ("32 64"),
# TDM_SERVE_PD_RATES (the rate points again on a prefill + a decode group; default the rates,
# empty: no PD),
# TDM_SERVE_NUM (requests per point; 0: max(F x concurrency, 16), F = TDM_SERVE_NUM_FACTOR, 4), TDM_SERVE_IN / TDM_SERVE_OUT
# (median lengths, 160 / 140), TDM_SERVE_IN_MAX / TDM_SERVE_OUT_MAX (1024 / 512),
# TDM_SERVE_ENGINE_STEPS (128), TDM_SERVE_ENGINE_REPS (3), TDM_SERVE_MIXED_CHUNK (the engine's
# mixed step at the loop points: that many prompt tokens beside the decode rows; default the
# input median), TDM_SERVE_PRICE_CHUNKS ("32 400 1024"; empty: none: the last loop point's
# mixed step beside one chunk of each size, the marginal price of a prompt token,
# engine_mixed.price), TDM_SERVE_MAX_RUNNING (the largest concurrency),
# TDM_SERVE_DH_CONC ("64"; empty: none): decode-heavy points in the overlap loop, the same
# concurrency with short prompts and long outputs (medians TDM_SERVE_DH_IN 32 / TDM_SERVE_DH_OUT
# 512, at most twice the input median / the output median), so that the batch stays at the
# concurrency in decode and serving is compared with the engine's decode without the prompts'
# prefill work (SGLang's decode-heavy setting; the sweep's points carry ~2 prompt tokens per
# output token),
# TDM_SERVE_HOST_SAMPLE_CONC (cuda only, default none: these concurrency points again in the
# overlap loop with TDM_CUDA_HOST_SAMPLE=1, full logits copied and sampled on the host),
# TDM_SERVE_ALLOC_CONC (cuda: "64", cpu: none; empty: none): these concurrency points, and the
# decode-heavy points, again in the overlap loop with TDM_KV_ALLOC=lowest (the page allocator
# hands out the lowest free page, the live pages packed; the default hands out the page freed
# last, and under churn a batch's pages spread over the pool): "page_order"; every worker runs
# with TDM_CUDA_ATTN_BALANCE=TDM_SERVE_BALANCE (256, the engine's default: the decode attention's
# splits doubled while the longest row's split holds more positions, kernels/cuda/engine.h) and,
# on cuda, the same points again with it off (0): "attn_balance",
# TDM_SERVE_CHUNK_CONC (cuda: "64", cpu: none; empty: none): these concurrency points again in the
# overlap loop with --chunked-prefill-size TDM_SERVE_CHUNK (192: a mixed step of 64 decode rows
# stays within the tile GEMM's 256 rows, its prompt rows under the weight stream; docs/cuda.md "A
# GEMM for 16-256 rows"): "chunked_prefill",
# TDM_BENCH_GIT_SHA (else git or the device bundle's MANIFEST).
set -u
BUILD=${1:?usage: gpu-serving.sh BUILDDIR SRCDIR [OUT]}
SRC=${2:?usage: gpu-serving.sh BUILDDIR SRCDIR [OUT]}
OUT=${3:-$SRC/bench/results/gpu_serving.json}
DEV=${TDM_SERVE_DEVICE:-cuda}
CONC=${TDM_SERVE_CONC:-1 8 32 64 128}
RATES=${TDM_SERVE_RATES:-8 32}
PD_RATES=${TDM_SERVE_PD_RATES-$RATES}
LOOP_CONC=${TDM_SERVE_LOOP_CONC:-32 64}
HS_CONC=${TDM_SERVE_HOST_SAMPLE_CONC:-}
DH_CONC=${TDM_SERVE_DH_CONC-64}
DH_IN=${TDM_SERVE_DH_IN:-32}
DH_OUT=${TDM_SERVE_DH_OUT:-512}
[ "$DEV" = cuda ] || HS_CONC=""
if [ "$DEV" = cuda ]; then ALLOC_CONC=${TDM_SERVE_ALLOC_CONC-64}; else ALLOC_CONC=${TDM_SERVE_ALLOC_CONC:-}; fi
BALANCE=${TDM_SERVE_BALANCE:-256}
if [ "$DEV" = cuda ]; then CHUNK_CONC=${TDM_SERVE_CHUNK_CONC-64}; else CHUNK_CONC=${TDM_SERVE_CHUNK_CONC:-}; fi
CHUNK=${TDM_SERVE_CHUNK:-192}
NUM=${TDM_SERVE_NUM:-0}
NUMF=${TDM_SERVE_NUM_FACTOR:-4}
IN=${TDM_SERVE_IN:-160}
OUTLEN=${TDM_SERVE_OUT:-140}
IN_MAX=${TDM_SERVE_IN_MAX:-1024}
OUT_MAX=${TDM_SERVE_OUT_MAX:-512}
STEPS=${TDM_SERVE_ENGINE_STEPS:-128}
maxc=1
for c in $CONC $LOOP_CONC $DH_CONC; do [ "$c" -gt "$maxc" ] && maxc=$c; done
MAXRUN=${TDM_SERVE_MAX_RUNNING:-$maxc}
W=$BUILD/tandem-worker
E=$BUILD/bench/gpu_serving_engine
T=$(mktemp -d)
wp=""
pp=""
trap '[ -n "$wp" ] && kill -9 $wp 2>/dev/null; [ -n "$pp" ] && kill -9 $pp 2>/dev/null; rm -rf "$T"' EXIT
# wait_file FILE PID: until FILE is written or PID exits (2 min); prints its "http" port
wait_file() {
    i=0
    while [ $i -lt 1200 ] && [ ! -s "$1" ] && kill -0 "$2" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$1" 2>/dev/null
}
n=0
tap() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }
echo "1..4"

[ -x "$W" ] || { echo "Bail out! $W is not built"; exit 1; }
case $DEV in
cuda) [ -x "$E" ] || { echo "Bail out! $E is not built (needs the CUDA runtime)"; exit 1; } ;;
cpu) ;;
*) echo "Bail out! TDM_SERVE_DEVICE must be cuda or cpu (got $DEV)"; exit 1 ;;
esac
MODEL=${TDM_SERVE_MODEL:-}
if [ -z "$MODEL" ] && [ "$DEV" = cpu ]; then
    MODEL=$SRC/models/demo
elif [ -z "$MODEL" ]; then
    MODEL=$T/model
    python3 "$SRC/bench/gen_random_model.py" "$MODEL" --preset tinyllama-demo >&2 &&
        cp "$SRC/models/demo/tokenizer.json" "$SRC/models/demo/tokenizer_config.json" \
            "$SRC/models/demo/generation_config.json" "$MODEL/" ||
        { echo "Bail out! could not make the random-weight checkpoint"; exit 1; }
fi

# 1. the ceiling: the engine's batched decode at the sweep's batch sizes
if [ "$DEV" = cuda ]; then
    echo "# gpu-serving: engine decode at batch $CONC, mixed steps at $LOOP_CONC" >&2
    timeout 300 "$E" --model "$MODEL" --batch "$CONC" --prompt-len "$IN" --steps "$STEPS" \
        --reps "${TDM_SERVE_ENGINE_REPS:-3}" --mixed-batch "$LOOP_CONC" \
        --mixed-chunk "${TDM_SERVE_MIXED_CHUNK:-$IN}" \
        --price-chunks "${TDM_SERVE_PRICE_CHUNKS-32 400 1024}" > "$T/engine.json"
    tap $? "engine batched decode (bench/gpu_serving_engine)"
else
    echo '{"results": []}' > "$T/engine.json"
    tap 0 "engine batched decode: not measured on --device cpu (bench/serving.sh has the CPU one)"
fi

# 2. the worker in each loop under the load generator
points_overlap=""
for c in $CONC; do points_overlap="$points_overlap,conc:$c"; done
for r in $RATES; do points_overlap="$points_overlap,rate:$r"; done
points_lockstep=""
for c in $LOOP_CONC; do points_lockstep="$points_lockstep,conc:$c"; done
points_hs=""
for c in $HS_CONC; do points_hs="$points_hs,conc:$c"; done
points_alloc=""
for c in $ALLOC_CONC; do points_alloc="$points_alloc,conc:$c"; done
points_cuda_loop=""
points_balance=""
[ "$DEV" = cuda ] && points_cuda_loop=$points_lockstep && points_balance=$points_alloc
points_chunk=""
for c in $CHUNK_CONC; do points_chunk="$points_chunk,conc:$c"; done
lg_rc=0
for loop in overlap lockstep threaded flashmix hostsample alloclow balance chunk; do
    hs=0
    pipe=1
    mixdec=1
    alloc=lifo
    bal=""
    case $loop in
    overlap) pts=${points_overlap#,}; extra="" ;;
    lockstep) pts=${points_lockstep#,}; extra=--disable-overlap-schedule ;;
    threaded) pts=${points_cuda_loop#,}; extra=""; pipe=0 ;;
    flashmix) pts=${points_cuda_loop#,}; extra=""; mixdec=0 ;;
    hostsample) pts=${points_hs#,}; extra=""; hs=1 ;;
    alloclow) pts=${points_alloc#,}; extra=""; alloc=lowest ;;
    chunk) pts=${points_chunk#,}; extra="--chunked-prefill-size $CHUNK" ;;
    *) pts=${points_balance#,}; extra=""; bal=0 ;;
    esac
    [ -z "$pts" ] && continue
    rm -f "$T/ready"
    TDM_CUDA_ATTN_BALANCE=${bal:-$BALANCE} TDM_KV_ALLOC=$alloc TDM_CUDA_MIXED_DECODE=$mixdec TDM_CUDA_HOST_SAMPLE=$hs TDM_CUDA_PIPELINE=$pipe "$W" --model-path "$MODEL" --device "$DEV" --tp-size 1 --port 0 --ready-file "$T/ready" \
        --max-running-requests "$MAXRUN" $extra > "$T/worker-$loop.log" 2>&1 &
    wp=$!
    port=$(wait_file "$T/ready" $wp)
    if [ -z "$port" ]; then
        echo "# worker ($loop) did not become ready:" >&2
        tail -20 "$T/worker-$loop.log" >&2
        lg_rc=1
        wp=""
        continue
    fi
    echo "# gpu-serving: $loop loop on port $port: $pts" >&2
    python3 "$SRC/bench/loadgen.py" --url "http://127.0.0.1:$port" --points "$pts" \
        --num-prompts "$NUM" --num-factor "$NUMF" --input-median "$IN" --output-median "$OUTLEN" \
        --input-max "$IN_MAX" --output-max "$OUT_MAX" --out "$T/serve-$loop.json" > /dev/null
    rc=$?
    [ $rc != 0 ] && lg_rc=1
    if { [ "$loop" = overlap ] || [ "$loop" = alloclow ] || [ "$loop" = balance ]; } &&
        [ -n "$DH_CONC" ]; then
        pdh=""
        for c in $DH_CONC; do pdh="$pdh,conc:$c"; done
        dhf=serve-dh.json
        [ "$loop" != overlap ] && dhf=serve-dh-$loop.json
        echo "# gpu-serving: decode-heavy (in $DH_IN, out $DH_OUT, pages $alloc): ${pdh#,}" >&2
        python3 "$SRC/bench/loadgen.py" --url "http://127.0.0.1:$port" --points "${pdh#,}" \
            --num-prompts "$NUM" --num-factor "$NUMF" --input-median "$DH_IN" \
            --output-median "$DH_OUT" --input-max $((2 * DH_IN)) --output-max "$DH_OUT" \
            --out "$T/$dhf" > /dev/null || lg_rc=1
    fi
    kill -TERM $wp
    wait $wp
    wrc=$?
    [ $wrc != 0 ] && { echo "# worker ($loop) exited $wrc" >&2; tail -5 "$T/worker-$loop.log" >&2; lg_rc=1; }
    wp=""
done

# 2b. PD: a prefill group and a decode group (on cuda both on this GPU, the KV by CUDA IPC; on cpu
# over UCX), the PD points (default: the rate points) against the decode group, the prompt
# tokens checked against the prefill group's /metrics; the colocated figures of the same points
# (the same requests: loadgen seeds a point by its name) come from the overlap loop above
points_pd=""
for r in $PD_RATES; do points_pd="$points_pd,rate:$r"; done
points_pd=${points_pd#,}
if [ -n "$points_pd" ]; then
    export UCX_TLS=${UCX_TLS:-tcp,sm,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
    export TDM_CUDA_MIXED_DECODE=1 TDM_CUDA_PIPELINE=1 # as the colocated overlap loop
    memf=""
    [ "$DEV" = cuda ] && memf="--mem-fraction-static 0.4"
    rm -f "$T/ready-pre" "$T/ready-dec"
    "$W" --model-path "$MODEL" --device "$DEV" --tp-size 1 --port 0 --ready-file "$T/ready-pre" \
        --max-running-requests "$MAXRUN" $memf --disaggregation-mode prefill \
        --disaggregation-bootstrap-port 0 > "$T/worker-prefill.log" 2>&1 &
    pp=$!
    pport=$(wait_file "$T/ready-pre" $pp)
    boot=$(sed -n 's/.*"bootstrap": *\([0-9]*\).*/\1/p' "$T/ready-pre" 2>/dev/null)
    dport=""
    if [ -n "$pport" ] && [ -n "$boot" ]; then
        "$W" --model-path "$MODEL" --device "$DEV" --tp-size 1 --port 0 \
            --ready-file "$T/ready-dec" --max-running-requests "$MAXRUN" $memf \
            --disaggregation-mode decode --disaggregation-prefill-addr "127.0.0.1:$boot" \
            > "$T/worker-decode.log" 2>&1 &
        wp=$!
        dport=$(wait_file "$T/ready-dec" $wp)
    fi
    # decode is ready for traffic once it registered its pool with prefill (/ready 200)
    if [ -n "$dport" ] && python3 - "$dport" <<'PY'
import sys, time, urllib.request
deadline = time.time() + 60
while time.time() < deadline:
    try:
        if urllib.request.urlopen("http://127.0.0.1:%s/ready" % sys.argv[1], timeout=5).status == 200:
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.1)
sys.exit(1)
PY
    then
        echo "# gpu-serving: PD (prefill :$pport, decode :$dport): $points_pd" >&2
        python3 "$SRC/bench/loadgen.py" --url "http://127.0.0.1:$dport" \
            --prefill-url "http://127.0.0.1:$pport" --points "$points_pd" \
            --num-prompts "$NUM" --num-factor "$NUMF" --input-median "$IN" --output-median "$OUTLEN" \
            --input-max "$IN_MAX" --output-max "$OUT_MAX" --out "$T/serve-pd.json" > /dev/null ||
            lg_rc=1
    else
        echo "# PD groups did not become ready:" >&2
        tail -5 "$T/worker-prefill.log" "$T/worker-decode.log" >&2
        lg_rc=1
    fi
    for p in $wp $pp; do
        kill -TERM "$p" 2>/dev/null
        wait "$p"
        wrc=$?
        [ $wrc != 0 ] && { echo "# PD worker $p exited $wrc" >&2; lg_rc=1; }
    done
    wp=""
    pp=""
fi
tap $lg_rc "load generator: every request served, usage and /metrics agree"

# 3. merge
[ -n "$HS_CONC" ] && : > "$T/hs-wanted"
[ -n "$points_pd" ] && : > "$T/pd-wanted"
[ -n "$DH_CONC" ] && : > "$T/dh-wanted"
[ -n "$ALLOC_CONC" ] && : > "$T/alloc-wanted"
[ -n "$points_balance" ] && : > "$T/balance-wanted"
[ -n "$points_chunk" ] && : > "$T/chunk-wanted"
# the binaries' source: a device bundle's MANIFEST names the commit it was built from (the
# device's checkout may carry another .git state), else the checkout's HEAD
sha=${TDM_BENCH_GIT_SHA:-$(sed -n 's/^source: //p' "$BUILD/MANIFEST" 2>/dev/null | head -1)}
[ -z "$sha" ] && sha=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null)
[ -z "$sha" ] && sha=$(sed -n 's/^source: //p' "$SRC/.device-bundle/MANIFEST" 2>/dev/null | head -1)
python3 - "$T" "$OUT" "${sha:-unknown}" "$DEV" "$MODEL" "$SRC" "$CONC" "$LOOP_CONC" <<'PY'
import json, os, sys, time
T, out, sha, dev, model, src, conc, loop_conc = sys.argv[1:9]
conc = [int(c) for c in conc.split()]
loop_conc = [int(c) for c in loop_conc.split()]
eng = json.load(open(os.path.join(T, "engine.json")))
by_bs = {r["batch"]: r for r in eng.get("results", [])}
def load(loop):
    p = os.path.join(T, "serve-%s.json" % loop)
    return json.load(open(p)) if os.path.exists(p) else {"points": [], "ok": False}
ov, ls, hs, th = load("overlap"), load("lockstep"), load("hostsample"), load("threaded")
fm = load("flashmix")
pd = load("pd")
dh = load("dh")
al = load("alloclow")
bl = load("balance")
dh_al, dh_bl = load("dh-alloclow"), load("dh-balance")
ck = load("chunk")
def price_rows(eng):
    """each price row with its marginal cost: (step - that batch's decode-only step) / chunk"""
    dec = {r["batch"]: r["decode_only_step_us"] for r in eng.get("mixed", [])}
    out = []
    for r in eng.get("price", []):
        base = dec.get(r["batch"])
        out.append(dict(r, decode_only_step_us=base, us_per_prompt_token=None if base is None
                        else round((r["step_us"] - base) / r["chunk"], 2)))
    return out


def pt(doc, name):
    return next((p for p in doc["points"] if p["point"] == name), None)
rows = []
for c in conc:
    p = pt(ov, "conc:%d" % c)
    e = by_bs.get(c)
    row = {"concurrency": c, "serving": p, "engine_decode": e}
    if p and e:
        row["serving_vs_engine_decode"] = round(p["output_tok_s"] / e["ids_tok_s"], 3)
        if p["itl_ms"]["p50"] is not None:
            row["itl_p50_vs_engine_step"] = round(p["itl_ms"]["p50"] * 1e3 / e["ids_step_us"], 3)
    rows.append(row)
decode_heavy = []
for p in dh["points"]:
    c = p["max_concurrency"]
    e = by_bs.get(c)
    decode_heavy.append({"concurrency": c, "serving": p, "load": dh.get("lengths"),
                         "engine_decode_tok_s": e and e["ids_tok_s"],
                         "serving_vs_engine_decode": e and round(p["output_tok_s"] / e["ids_tok_s"], 3),
                         "itl_p50_vs_engine_step":
                         round(p["itl_ms"]["p50"] * 1e3 / e["ids_step_us"], 3)
                         if e and p["itl_ms"]["p50"] is not None else None})
loops = []
for c in loop_conc:
    a, b, t = pt(ov, "conc:%d" % c), pt(ls, "conc:%d" % c), pt(th, "conc:%d" % c)
    f = pt(fm, "conc:%d" % c)
    if a and b:
        loops.append({"concurrency": c, "overlap_output_tok_s": a["output_tok_s"],
                      "threaded_output_tok_s": t and t["output_tok_s"],
                      "threaded_itl_p50_ms": t and t["itl_ms"]["p50"],
                      "mixed_flash_only_output_tok_s": f and f["output_tok_s"],
                      "mixed_flash_only_itl_p50_ms": f and f["itl_ms"]["p50"],
                      "loop_us_per_iter": {"overlap": a.get("loop_us_per_iter"),
                                           "lockstep": b.get("loop_us_per_iter"),
                                           "threaded": t and t.get("loop_us_per_iter"),
                                           "mixed_flash_only": f and f.get("loop_us_per_iter")},
                      "lockstep_output_tok_s": b["output_tok_s"],
                      "overlap_vs_lockstep": round(a["output_tok_s"] / b["output_tok_s"], 3),
                      "overlap_itl_p50_ms": a["itl_ms"]["p50"],
                      "lockstep_itl_p50_ms": b["itl_ms"]["p50"],
                      "overlap_ttft_p50_ms": a["ttft_ms"]["p50"],
                      "lockstep_ttft_p50_ms": b["ttft_ms"]["p50"]})
host_sample = []
for p in hs["points"]:
    a = pt(ov, p["point"])
    host_sample.append({"point": p["point"], "host_sample_output_tok_s": p["output_tok_s"],
                        "host_sample_itl_p50_ms": p["itl_ms"]["p50"],
                        "device_sample_output_tok_s": a and a["output_tok_s"],
                        "device_sample_itl_p50_ms": a and a["itl_ms"]["p50"]})
pd_rows = []
for p in pd["points"]:
    a = pt(ov, p["point"])
    pick = lambda q: q and {"ttft_ms": q["ttft_ms"], "itl_ms": q["itl_ms"],
                            "output_tok_s": q["output_tok_s"], "completed": q["completed"],
                            "total_input_tokens": q["total_input_tokens"]}
    pd_rows.append({"point": p["point"], "pd": pick(p), "colocated": pick(a),
                    "prefill_group_metrics_delta": {k: v for k, v in p["metrics_delta"].items()
                                                    if k.startswith("prefill_group_")}})
def ab_row(kind, a, b, x, y):
    """the same point with the default (a, named x) and a variant (b, named y)"""
    lu = lambda q: q.get("loop_us_per_iter") or {}
    return {"point": b["point"], "load": kind,
            x + "_output_tok_s": a and a["output_tok_s"], y + "_output_tok_s": b["output_tok_s"],
            "%s_vs_%s" % (y, x): a and round(b["output_tok_s"] / a["output_tok_s"], 3),
            x + "_exec_wait_decode_us": a and lu(a).get("exec_wait_decode"),
            y + "_exec_wait_decode_us": lu(b).get("exec_wait_decode"),
            x + "_step_ms_mean": a and a.get("step_ms_mean"),
            y + "_step_ms_mean": b.get("step_ms_mean"),
            x + "_itl_p50_ms": a and a["itl_ms"]["p50"], y + "_itl_p50_ms": b["itl_ms"]["p50"]}
def ab_rows(var, var_dh, x, y):
    return ([ab_row("sweep", pt(ov, p["point"]), p, x, y) for p in var["points"]] +
            [ab_row("decode_heavy", pt(dh, p["point"]), p, x, y) for p in var_dh["points"]])
page_order = ab_rows(al, dh_al, "lifo", "lowest")
attn_balance = ab_rows(bl, dh_bl, "on", "off")
chunked = ab_rows(ck, {"points": []}, "default", "chunked")
anchor = {}
try:
    g = json.load(open(os.path.join(src, "bench/results/gpu_decode.json")))
    anchor = {"from": "bench/results/gpu_decode.json (git_sha %s; not re-measured here)" % g.get("git_sha"),
              "tandem": g.get("tandem"), "torch_compiled": g.get("torch_compiled")}
except Exception:
    pass
gpu = "cpu"
if dev == "cuda":
    try:
        gpu = os.popen("nvidia-smi --query-gpu=name --format=csv,noheader").read().strip().splitlines()[0]
    except Exception:
        gpu = "unknown"
doc = {
    "bench": "gpu_serving",
    "what": "streaming /v1/chat/completions under open-loop load (bench/loadgen.py: max-concurrency "
            "sweep and Poisson rates, overlap loop; lockstep at the loop points), beside the engine's "
            "batched decode at batch = concurrency in the same run (ids: device argmax, ids copied; "
            "logits: full rows copied as well); device_vs_host_sampling: the same points with "
            "TDM_CUDA_HOST_SAMPLE=1 (every logits row copied, sampled on the host); overlap on cuda: "
            "the pipelined loop (TDM_CUDA_PIPELINE=1), threaded: TDM_CUDA_PIPELINE=0; "
            "every worker with TDM_CUDA_MIXED_DECODE=1 but mixed_flash_only: the pipelined loop "
            "with TDM_CUDA_MIXED_DECODE=0 (a mixed step's "
            "one-token rows through the flash tiles, not the decode attention); "
            "decode_heavy: the overlap loop at the same concurrency with short prompts and long "
            "outputs, the batch in decode; "
            "page_order: TDM_SERVE_ALLOC_CONC's points and the decode-heavy points again with "
            "TDM_KV_ALLOC=lowest (the lowest free KV page first) beside the default order; "
            "attn_balance: the same points with TDM_CUDA_ATTN_BALANCE=0 (cuda; every other "
            "worker with 'balance' positions a split) beside the default; "
            "chunked_prefill: TDM_SERVE_CHUNK_CONC's points with --chunked-prefill-size "
            "'size' beside the default; "
            "pd_vs_colocated: the rate points on a prefill + a decode group (cuda: one GPU, KV by "
            "CUDA IPC) beside the colocated overlap worker on the same requests",
    "targets": "serving output tok/s at concurrency 64 >= 0.85 x engine decode at bs64; ITL p50 at "
               "concurrency 1 <= 1.15 x the engine's bs1 step; overlap > lockstep at 32/64",
    "device": dev, "gpu": gpu, "git_sha": sha,
    "model": os.path.basename(os.path.normpath(model)) if dev == "cpu" else
             "random bf16, TinyLlama-1.1B shape, vocab %d (models/demo tokenizer)"
             % json.load(open(os.path.join(model, "config.json")))["vocab_size"],
    "engine": {k: eng.get(k) for k in ("weight_bytes", "prompt_len", "steps", "reps")},
    "model_config": {k: v for k, v in json.load(open(os.path.join(model, "config.json"))).items()
                     if k in ("num_hidden_layers", "hidden_size", "intermediate_size",
                              "num_attention_heads", "num_key_value_heads", "head_dim",
                              "vocab_size")},
    "load": ov.get("lengths"), "calibration": ov.get("calibration"), "seed": ov.get("seed"),
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "concurrency": rows, "rates": [p for p in ov["points"] if p["point"].startswith("rate:")],
    "overlap_vs_lockstep": loops, "device_vs_host_sampling": host_sample,
    "pd_vs_colocated": pd_rows, "decode_heavy": decode_heavy, "page_order": page_order,
    "attn_balance": {"balance": int(os.environ.get("TDM_SERVE_BALANCE", "256") or 256),
                     "rows": attn_balance},
    "chunked_prefill": {"size": int(os.environ.get("TDM_SERVE_CHUNK", "192") or 192),
                        "rows": chunked},
    "anchor": anchor,
    "engine_mixed": {"chunk": eng.get("mixed_chunk"), "rows": eng.get("mixed", []),
                     "price": price_rows(eng)},
    "checks_ok": bool(ov.get("ok")) and (bool(ls.get("ok")) or not loop_conc) and
                 (bool(th.get("ok")) or not loop_conc or dev != "cuda") and
                 (bool(fm.get("ok")) or not loop_conc or dev != "cuda") and
                 (bool(pd.get("ok")) or not os.path.exists(os.path.join(T, "pd-wanted"))) and
                 (bool(dh.get("ok")) or not os.path.exists(os.path.join(T, "dh-wanted"))) and
                 (bool(al.get("ok")) and (bool(dh_al.get("ok")) or
                                          not os.path.exists(os.path.join(T, "dh-wanted")))
                  or not os.path.exists(os.path.join(T, "alloc-wanted"))) and
                 (bool(bl.get("ok")) and (bool(dh_bl.get("ok")) or
                                          not os.path.exists(os.path.join(T, "dh-wanted")))
                  or not os.path.exists(os.path.join(T, "balance-wanted"))) and
                 (bool(ck.get("ok")) or not os.path.exists(os.path.join(T, "chunk-wanted"))) and
                 (bool(hs.get("ok")) or not hs["points"] and not os.path.exists(os.path.join(T, "hs-wanted"))),
}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
for r in rows:
    s, e = r["serving"], r["engine_decode"]
    print("# bench serving c=%d: %s out tok/s, ITL p50 %s ms, TTFT p50 %s ms; engine bs%d %s tok/s (%s us/step)%s"
          % (r["concurrency"], s and s["output_tok_s"], s and s["itl_ms"]["p50"],
             s and s["ttft_ms"]["p50"], r["concurrency"], e and e["ids_tok_s"],
             e and e["ids_step_us"],
             " ratio %s" % r.get("serving_vs_engine_decode") if "serving_vs_engine_decode" in r else ""))
for r in decode_heavy:
    s = r["serving"]
    print("# bench decode-heavy c=%d: %s out tok/s (x%s of the engine's decode), ITL p50 %s ms, "
          "concurrency mean %s" % (r["concurrency"], s["output_tok_s"], r["serving_vs_engine_decode"],
                                   s["itl_ms"]["p50"], s.get("concurrency_mean")))
for r in doc["engine_mixed"]["rows"]:
    print("# bench engine mixed bs%d + %s prompt tokens: %s us/step (flash only %s), decode alone %s"
          % (r["batch"], doc["engine_mixed"]["chunk"], r["step_us"], r["flash_only_step_us"],
             r["decode_only_step_us"]))
for r in doc["engine_mixed"]["price"]:
    print("# bench engine price bs%d + %d prompt tokens: %s us/step, %s us per prompt token"
          % (r["batch"], r["chunk"], r["step_us"], r["us_per_prompt_token"]))
for r in pd_rows:
    a, b = r["pd"], r["colocated"]
    print("# bench pd %s: TTFT p50 %s vs colocated %s ms; ITL p50 %s vs %s ms"
          % (r["point"], a and a["ttft_ms"]["p50"], b and b["ttft_ms"]["p50"],
             a and a["itl_ms"]["p50"], b and b["itl_ms"]["p50"]))
for h in host_sample:
    print("# bench sampling %s: device %s vs host %s tok/s; ITL p50 %s vs %s ms"
          % (h["point"], h["device_sample_output_tok_s"], h["host_sample_output_tok_s"],
             h["device_sample_itl_p50_ms"], h["host_sample_itl_p50_ms"]))
for r in page_order:
    print("# bench pages %s %s: lowest first %s vs lifo %s tok/s (x%s); decode wait %s vs %s us"
          % (r["load"], r["point"], r["lowest_output_tok_s"], r["lifo_output_tok_s"],
             r["lowest_vs_lifo"], r["lowest_exec_wait_decode_us"], r["lifo_exec_wait_decode_us"]))
for r in attn_balance:
    print("# bench attention balance %s %s: off %s vs on %s tok/s (x%s); decode wait %s vs %s us"
          % (r["load"], r["point"], r["off_output_tok_s"], r["on_output_tok_s"],
             r["off_vs_on"], r["off_exec_wait_decode_us"], r["on_exec_wait_decode_us"]))
for r in chunked:
    print("# bench chunked prefill %s: %s vs default %s tok/s (x%s); ITL p50 %s vs %s ms"
          % (r["point"], r["chunked_output_tok_s"], r["default_output_tok_s"],
             r["chunked_vs_default"], r["chunked_itl_p50_ms"], r["default_itl_p50_ms"]))
for l in loops:
    print("# bench loop c=%d: overlap %s vs lockstep %s tok/s (x%s); threaded overlap %s; "
          "mixed steps all flash %s; loop us/iter %s"
          % (l["concurrency"], l["overlap_output_tok_s"], l["lockstep_output_tok_s"],
             l["overlap_vs_lockstep"], l["threaded_output_tok_s"],
             l["mixed_flash_only_output_tok_s"],
             json.dumps(l["loop_us_per_iter"])))
PY
tap $? "merged into $OUT"
# the ceiling the engine's own prices allow on each point's requests (docs/contracts.md §h)
python3 "$SRC/bench/serving_bound.py" "$OUT" --write > /dev/null
tap $? "load_ceiling (bench/serving_bound.py: the point's requests drawn again, priced) in $OUT"
python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['checks_ok'] else 1)" "$OUT"
tap $? "checks_ok in the result"
