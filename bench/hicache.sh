#!/bin/sh
# hicache.sh BUILDDIR SRCDIR [OUT] — HiCache on vs off in the same run (CPU, models/demo): a
# multi-turn chat workload, TDM_BENCH_SESSIONS (32) sessions x TDM_BENCH_TURNS (8) turns; every
# session starts from a shared 64-token system context and each turn appends 24 user tokens and
# the 8 greedy tokens of the previous answer, so contexts grow to ~320 tokens. The device KV pool
# (--kv-cpu-bytes, TDM_BENCH_KV_BYTES, default 48 pages of the demo model) holds far less than the
# working set; the host tier (--hicache-ratio 16) holds it. TDM_BENCH_CLIENTS (4) sessions run at a
# time, turns of a session in order. Measured per side: TTFT p50/p99 (streamed /generate, request
# sent -> first token event), prompt tokens computed (tandem_prefill_tokens_total), host-tier hit
# rate (tokens loaded from the host tier / prompt tokens), and whether every greedy output is
# bit-identical on and off. Writes OUT (default SRCDIR/bench/results/hicache.json) with git_sha.
set -eu
BUILD=${1:?usage: hicache.sh BUILDDIR SRCDIR [OUT]}
SRC=${2:?usage: hicache.sh BUILDDIR SRCDIR [OUT]}
OUT=${3:-$SRC/bench/results/hicache.json}
[ -x "$BUILD/tandem-worker" ] || { echo "hicache.sh: $BUILD/tandem-worker is not built" >&2; exit 2; }
TDM_HB_BIN="$BUILD/tandem-worker" TDM_HB_MODEL="${TDM_BENCH_MODEL:-$SRC/models/demo}" \
TDM_HB_OUT="$OUT" TDM_HB_SHA="$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)" \
TDM_HB_BUILD="$BUILD" PYTHONPATH="$SRC/tests/integration" exec python3 - <<'PY'
import json
import os
import threading
import time

import pdlib

S = int(os.environ.get("TDM_BENCH_SESSIONS", "32"))
T = int(os.environ.get("TDM_BENCH_TURNS", "8"))
C = int(os.environ.get("TDM_BENCH_CLIENTS", "4"))
KV = os.environ.get("TDM_BENCH_KV_BYTES", str(48 * 32768))
pdlib.init(os.environ["TDM_HB_BIN"], os.environ["TDM_HB_MODEL"], "bench-hicache-",
           base_args=["--kv-cpu-bytes", KV, "--max-running-requests", "8"])


ids = pdlib.prompt_ids
stream = pdlib.stream_timed
SYSTEM = ids(7, 64)


def side(name, extra):
    w = pdlib.start(name, extra)
    if not pdlib.wait_ready(w):
        raise SystemExit("%s did not start: %s" % (name, pdlib.logtail(w)))
    m0 = pdlib.metrics(w)
    ttfts, outs, prompt_tokens = [], {}, [0]
    lock = threading.Lock()
    todo = list(range(S))

    def client():
        while True:
            with lock:
                if not todo:
                    return
                s = todo.pop(0)
            ctx = list(SYSTEM)
            for t in range(T):
                ctx += ids(1000 * s + t, 24)
                ttft, out = stream(w, ctx, 8)
                with lock:
                    ttfts.append(ttft)
                    outs[(s, t)] = out
                    prompt_tokens[0] += len(ctx)
                ctx += out

    t0 = time.time()
    th = [threading.Thread(target=client) for _ in range(C)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    wall = time.time() - t0
    m = pdlib.metrics(w)
    w["proc"].terminate()
    w["proc"].wait(timeout=60)
    ttfts.sort()
    q = lambda p: ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))]
    d = lambda k: m.get(k, 0) - m0.get(k, 0)
    r = {"requests": len(ttfts), "wall_s": round(wall, 2),
         "ttft_p50_ms": round(q(0.50) * 1e3, 2), "ttft_p99_ms": round(q(0.99) * 1e3, 2),
         "prompt_tokens": prompt_tokens[0],
         "prefill_tokens_computed": int(d("tandem_prefill_tokens_total")),
         "prefix_cached_tokens": int(d("tandem_prompt_tokens_cached_total")),
         "host_hit_tokens": int(d("tandem_hicache_hit_tokens_total")),
         "host_hit_rate": round(d("tandem_hicache_hit_tokens_total") / prompt_tokens[0], 4),
         "host_loads": int(d("tandem_hicache_loads_total")),
         "corruption_events": int(d("tandem_hicache_corruption_events_total")),
         "retractions": int(d("tandem_retractions_total"))}
    pdlib.note("%s: %s" % (name, json.dumps(r)))
    return r, outs


off, outs_off = side("off", [])
on, outs_on = side("on", ["--enable-hierarchical-cache", "--hicache-ratio", "16",
                          "--hicache-write-policy", "write_back"])
build = os.environ["TDM_HB_BUILD"]
san = ""
try:
    for line in open(os.path.join(build, "config.log")):
        if "enable-sanitizers" in line:
            san = "sanitizers" if "--enable-sanitizers" in line else ""
            break
except OSError:
    pass
res = {"bench": "hicache", "git_sha": os.environ["TDM_HB_SHA"], "device": "cpu",
       "model": os.path.basename(os.environ["TDM_HB_MODEL"].rstrip("/")),
       "nproc": os.cpu_count(), "loadavg": open("/proc/loadavg").read().split()[:3],
       "build": "asan+ubsan" if san else "plain",
       "workload": {"sessions": S, "turns": T, "clients": C, "system_tokens": 64,
                    "user_tokens_per_turn": 24, "new_tokens": 8, "kv_cpu_bytes": int(KV),
                    "hicache_ratio": 16, "write_policy": "write_back"},
       "anchor_hicache_off": off, "hicache_on": on,
       "greedy_outputs_identical": outs_on == outs_off,
       "ttft_p50_ratio_on_off": round(on["ttft_p50_ms"] / off["ttft_p50_ms"], 3),
       "prefill_tokens_ratio_on_off": round(on["prefill_tokens_computed"] /
                                            max(1, off["prefill_tokens_computed"]), 3)}
with open(os.environ["TDM_HB_OUT"], "w") as f:
    json.dump(res, f, indent=2)
    f.write("\n")
print(json.dumps(res, indent=2))
pdlib.finish()
PY
