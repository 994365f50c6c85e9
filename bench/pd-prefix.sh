#!/bin/sh
# pd-prefix.sh BUILDDIR SRCDIR [OUT] — the decode-side prefix of PD (docs/contracts.md §d) on vs
# off in the same run (CPU, models/demo, real UCX over lo): a multi-turn chat workload,
# TDM_BENCH_SESSIONS (16) sessions x TDM_BENCH_TURNS (6) turns; every session starts from a shared
# 64-token system context and each turn appends 24 user tokens and the 8 greedy tokens of the
# previous answer. Three prefill+decode pairs run it in turn, decode's device pool
# --kv-cpu-bytes TDM_BENCH_KV_BYTES (default 96 pages of the demo model):
#   off       decode --disaggregation-disable-decode-prefix (every prompt page transferred: the
#             anchor);
#   on        decode matches the prompt against its prefix cache (the room names the rest);
#   on_hicache  the same with HiCache on decode (--hicache-ratio 16, write_back), so prefixes
#             evicted from the device pool come from its host tier instead of the wire.
# TDM_BENCH_CLIENTS (4) clients, client c serving sessions c, c + 4, ... turn by turn (every session's
# turn t before any session's turn t + 1), so all sessions' contexts are live at once and outgrow
# decode's device pool: without the host tier their prefixes are evicted before the next turn.
# Measured per pair from
# decode's /metrics: pages and bytes the rooms named (moved), pages skipped and bytes saved,
# checksum bytes verified and mismatches, host-tier hits; TTFT p50/p99 (streamed /generate); and
# whether every greedy output equals the anchor's. Writes OUT (default
# SRCDIR/bench/results/pd_prefix.json) with git_sha.
set -eu
BUILD=${1:?usage: pd-prefix.sh BUILDDIR SRCDIR [OUT]}
SRC=${2:?usage: pd-prefix.sh BUILDDIR SRCDIR [OUT]}
OUT=${3:-$SRC/bench/results/pd_prefix.json}
[ -x "$BUILD/tandem-worker" ] || { echo "pd-prefix.sh: $BUILD/tandem-worker is not built" >&2; exit 2; }
export UCX_TLS=tcp,sm,self UCX_NET_DEVICES=lo
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
TDM_PB_BIN="$BUILD/tandem-worker" TDM_PB_MODEL="${TDM_BENCH_MODEL:-$SRC/models/demo}" \
TDM_PB_OUT="$OUT" TDM_PB_SHA="$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)" \
TDM_PB_BUILD="$BUILD" PYTHONPATH="$SRC/tests/integration" exec python3 - <<'PY'
import json
import os
import threading
import time

import pdlib

S = int(os.environ.get("TDM_BENCH_SESSIONS", "16"))
T = int(os.environ.get("TDM_BENCH_TURNS", "6"))
C = int(os.environ.get("TDM_BENCH_CLIENTS", "4"))
KV = os.environ.get("TDM_BENCH_KV_BYTES", str(96 * 32768))
pdlib.init(os.environ["TDM_PB_BIN"], os.environ["TDM_PB_MODEL"], "bench-pd-prefix-",
           base_args=["--max-running-requests", "8"])


ids = pdlib.prompt_ids
stream = pdlib.stream_timed
SYSTEM = ids(7, 64)


def side(name, extra):
    p = pdlib.start("prefill-" + name, ["--disaggregation-mode", "prefill",
                                        "--disaggregation-bootstrap-port", "0"])
    if not pdlib.wait_ready(p):
        raise SystemExit("prefill %s did not start: %s" % (name, pdlib.logtail(p)))
    w = pdlib.start("decode-" + name, ["--disaggregation-mode", "decode",
                                       "--disaggregation-prefill-addr",
                                       "127.0.0.1:%d" % p["bootstrap"], "--kv-cpu-bytes", KV]
                    + extra)
    if not (pdlib.wait_ready(w) and
            pdlib.wait_until(lambda: pdlib.request(w, "GET", "/ready")[0] == 200, 60)):
        raise SystemExit("decode %s did not register: %s" % (name, pdlib.logtail(w)))
    m0 = pdlib.metrics(w)
    ttfts, outs, prompt_tokens = [], {}, [0]
    lock = threading.Lock()

    def client(c):
        mine = list(range(c, S, C))
        ctx = {s: list(SYSTEM) for s in mine}
        for t in range(T):
            for s in mine:
                ctx[s] += ids(1000 * s + t, 24)
                ttft, out = stream(w, ctx[s], 8)
                with lock:
                    ttfts.append(ttft)
                    outs[(s, t)] = out
                    prompt_tokens[0] += len(ctx[s])
                ctx[s] += out

    t0 = time.time()
    th = [threading.Thread(target=client, args=(c,)) for c in range(C)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    wall = time.time() - t0
    m = pdlib.metrics(w)
    for x in (w, p):
        x["proc"].terminate()
        x["proc"].wait(timeout=60)
    ttfts.sort()
    q = lambda f: ttfts[min(len(ttfts) - 1, int(f * len(ttfts)))]
    d = lambda k: int(m.get(k, 0) - m0.get(k, 0))
    r = {"requests": len(ttfts), "wall_s": round(wall, 2),
         "ttft_p50_ms": round(q(0.50) * 1e3, 2), "ttft_p99_ms": round(q(0.99) * 1e3, 2),
         "prompt_tokens": prompt_tokens[0],
         "pages_moved": d("tandem_xfer_room_pages_total"),
         "bytes_moved": d("tandem_xfer_room_bytes_total"),
         "pages_skipped": d("tandem_xfer_prefix_pages_skipped_total"),
         "bytes_saved": d("tandem_xfer_prefix_bytes_saved_total"),
         "checksum_bytes_verified": d("tandem_xfer_checksum_bytes_total"),
         "checksum_mismatch": d("tandem_xfer_checksum_mismatch_total"),
         "host_hit_tokens": d("tandem_hicache_hit_tokens_total"),
         "host_corruption_events": d("tandem_hicache_corruption_events_total"),
         "decode_prefill_tokens": d("tandem_prefill_tokens_total"),
         "retractions": d("tandem_retractions_total")}
    pdlib.note("%s: %s" % (name, json.dumps(r)))
    return r, outs


off, outs_off = side("off", ["--disaggregation-disable-decode-prefix"])
on, outs_on = side("on", [])
hc, outs_hc = side("on_hicache", ["--enable-hierarchical-cache", "--hicache-ratio", "16",
                                  "--hicache-write-policy", "write_back"])
san = ""
try:
    for line in open(os.path.join(os.environ["TDM_PB_BUILD"], "config.log")):
        if "enable-sanitizers" in line:
            san = "sanitizers" if "--enable-sanitizers" in line else ""
            break
except OSError:
    pass
res = {"bench": "pd_prefix", "git_sha": os.environ["TDM_PB_SHA"], "device": "cpu",
       "model": os.path.basename(os.environ["TDM_PB_MODEL"].rstrip("/")),
       "nproc": os.cpu_count(), "loadavg": open("/proc/loadavg").read().split()[:3],
       "build": "asan+ubsan" if san else "plain",
       "workload": {"sessions": S, "turns": T, "clients": C, "system_tokens": 64,
                    "user_tokens_per_turn": 24, "new_tokens": 8, "decode_kv_cpu_bytes": int(KV)},
       "anchor_prefix_off": off, "prefix_on": on, "prefix_on_hicache": hc,
       "greedy_outputs_identical": outs_on == outs_off and outs_hc == outs_off,
       "bytes_moved_ratio_on_off": round(on["bytes_moved"] / max(1, off["bytes_moved"]), 3),
       "bytes_moved_ratio_on_hicache_off": round(hc["bytes_moved"] / max(1, off["bytes_moved"]),
                                                 3)}
with open(os.environ["TDM_PB_OUT"], "w") as f:
    json.dump(res, f, indent=2)
    f.write("\n")
print(json.dumps(res, indent=2))
pdlib.finish()
PY
