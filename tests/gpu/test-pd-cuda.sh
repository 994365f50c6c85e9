#!/bin/sh
# test-pd-cuda.sh — prefill/decode disaggregation with the KV on the GPU (CUDA IPC,
# dataplane/xfer/cuda_ipc.c), on one GPU and the bundled demo model: a prefill worker and a decode
# worker, both --device cuda (decode's pool exported by cudaIpcGetMemHandle in REGISTER, prefill
# copies device to device and reports SUCCESS only after the event behind its copies), and a
# colocated --device cuda worker as the reference:
#   - a --device cpu decode against the GPU prefill is refused at registration naming mem_kind;
#   - greedy /v1/completions through decode == colocated on 4 prompts, and /generate on 1- to
#     9-page prompts; decode computed no prompt token (tandem_prefill_tokens_total 0), prefill
#     did; decode verified the pages (GPU checksums) with no mismatch;
#   - 12 concurrent PD requests all finish, every room's pages verified, none computed on decode;
#   - an abort mid-flight (slow_host_copy holds the room's copies on prefill, the client gives
#     up): decode's ABORT is acknowledged (after the copies' event), nothing stays quarantined,
#     no corruption risk, and the next request is right;
#   - flip_kv_bits on decode (a device byte flipped after the copy): the request fails cleanly
#     naming the checksum, checksum_mismatch +1, the next request is right;
#   - after a drain every KV page is free on both sides; SIGTERM exits cleanly.
# Skips without a GPU, a CUDA-runtime build or the demo model. TAP; python3 standard library.
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${TDM_BUILDDIR:-.}
BIN="$BUILD/tandem-worker"
if [ ! -x "$BIN" ]; then
    echo "1..0 # SKIP $BIN not built"
    exit 0
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "1..0 # SKIP no CUDA device (nvidia-smi lists none)"
    exit 0
fi
if [ ! -f "$SRC/models/demo/model.safetensors" ]; then
    echo "1..0 # SKIP models/demo is not in this checkout"
    exit 0
fi
export TDM_PD_BIN="$BIN" TDM_PD_MODEL="$SRC/models/demo" TDM_TAPLIB="$SRC/tests/integration"
# the aux slot still moves by UCX (host memory)
export UCX_TLS=tcp,sm,self UCX_NET_DEVICES=lo
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
exec python3 - <<'PY'
import json, os, random, signal, subprocess, sys, threading, time

sys.path.insert(0, os.environ["TDM_TAPLIB"])
import pdlib
from pdlib import (arm, drain_all_free, init, kill_all, logtail, metrics, note, ok, prompt_ids,
                   request, wait_until)

BIN, MODEL = os.environ["TDM_PD_BIN"], os.environ["TDM_PD_MODEL"]
_, tokf = init(BIN, MODEL, "test-pd-cuda-", ["--max-running-requests", "16"])
FI = ["--enable-fault-injection", "--admin-token-file", tokf]
GPU = ["--mem-fraction-static", "0.2"]


def start(name, extra, device="cuda"):
    return pdlib.start(name, extra, device, GPU if device == "cuda" else ())


def wait_ready(w, limit=120):
    return pdlib.wait_ready(w, limit)


def gen(w, ids, max_new=12, timeout=60):
    return pdlib.gen(w, ids, max_new, timeout)


def finish():
    pdlib.finish(20)


def complete(w, prompt, max_tokens=16):
    st, txt = request(w, "POST", "/v1/completions",
                      {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True}, timeout=120)
    return (st, json.loads(txt)["choices"][0]["text"]) if st == 200 else (st, txt)


t_start = time.time()
pre = start("prefill", ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port",
                        "0"] + FI)
if not wait_ready(pre):
    tail = logtail(pre)
    if "needs the CUDA runtime" in tail or "no CUDA runtime" in tail:
        print("1..0 # SKIP this build has no CUDA runtime: %s" % tail.splitlines()[-1])
        kill_all()
        sys.exit(0)
    ok(False, "a --device cuda prefill worker starts", tail)
    finish()
ok(True, "a --device cuda prefill worker starts (bootstrap port %s)" % pre["bootstrap"])
addr = ["--disaggregation-prefill-addr", "127.0.0.1:%d" % pre["bootstrap"]]

# a decode whose KV is in host memory: refused at registration, naming mem_kind
cpu_dec = start("decode-cpu", ["--disaggregation-mode", "decode"] + addr + FI, device="cpu")
wait_ready(cpu_dec)
r = wait_until(lambda: (lambda s: s if s[0] == 503 and "mem_kind" in s[1] else None)(
    request(cpu_dec, "GET", "/ready")), 20)
ok(r is not None and "cuda_ipc" in r[1],
   "a --device cpu decode against the GPU prefill: /ready 503 naming mem_kind", r or
   logtail(cpu_dec) + "\n" + logtail(pre))
cpu_dec["proc"].send_signal(signal.SIGTERM)
try:
    cpu_dec["proc"].wait(timeout=20)
except subprocess.TimeoutExpired:
    cpu_dec["proc"].kill()

dec = start("decode", ["--disaggregation-mode", "decode"] + addr + FI)
col = start("colocated", [])
ok(wait_ready(dec) and wait_ready(col), "a --device cuda decode and a colocated worker start",
   logtail(dec) + "\n" + logtail(col))
if not ok(wait_until(lambda: request(dec, "GET", "/ready")[0] == 200, 30),
          "decode registered its GPU pool (CUDA IPC) with prefill: /ready 200",
          request(dec, "GET", "/ready")[1] + "\n" + logtail(dec) + "\n" + logtail(pre)):
    finish()

prompts = ["Hello", "What is the weather in Paris?",
           "You are a helpful assistant. Tell me about the tools you have. " * 3,
           "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29"]
diffs = []
for p in prompts:
    a, b = complete(dec, p), complete(col, p)
    if a != b or a[0] != 200:
        diffs.append("%r: pd %r colocated %r" % (p[:30], a, b))
ok(not diffs, "greedy /v1/completions through decode == colocated on %d prompts" % len(prompts),
   "\n".join(diffs))
diffs = []
for k in (1, 16, 17, 70, 143):
    ids = prompt_ids(k, k)
    a, b = gen(dec, ids), gen(col, ids)
    if a[0] != 200 or a[1] != b[1]:
        diffs.append("%d tokens: pd %s %s colocated %s %s" % (k, a[0], a[2][:200], b[0], b[1]))
ok(not diffs, "/generate on 1..143-token prompts (1 to 9 pages): PD == colocated",
   "\n".join(diffs))
md, mp = metrics(dec), metrics(pre)
ok(md.get("tandem_prefill_tokens_total") == 0 and mp.get("tandem_prefill_tokens_total", 0) > 0,
   "decode computed no prompt token (%s), prefill did (%s)" % (
       md.get("tandem_prefill_tokens_total"), mp.get("tandem_prefill_tokens_total")))
ok(md.get("tandem_xfer_checksum_mismatch_total") == 0 and
   md.get("tandem_xfer_checksum_bytes_total", 0) > 0 and
   mp.get("tandem_xfer_bytes_put_total", 0) > 0,
   "decode verified %s bytes of KV on the GPU, no mismatch; prefill moved %s bytes" % (
       md.get("tandem_xfer_checksum_bytes_total"), mp.get("tandem_xfer_bytes_put_total")))

# concurrent PD requests: batched prefill and decode use other kernels than one row (skinny mma,
# cuBLAS), so their tokens need not equal one-at-a-time answers; every page they received is
# verified against prefill's checksums instead
N = 12
work = [prompt_ids(100 + i, 20 + 9 * i) for i in range(N)]
m0 = metrics(dec)
res = [None] * N


def one(i):
    res[i] = gen(dec, work[i], 24, timeout=120)


th = [threading.Thread(target=one, args=(i,)) for i in range(N)]
t0 = time.time()
for t in th:
    t.start()
for t in th:
    t.join()
bad = [i for i in range(N) if not res[i] or res[i][0] != 200 or len(res[i][1] or []) != 24]
m1 = metrics(dec)
ok(not bad, "%d concurrent PD requests each give their 24 tokens (%.2f s)" % (
    N, time.time() - t0), "\n".join("%d: %s" % (i, (res[i] or ("", "", ""))[2][:200])
                                     for i in bad))
ok(m1["tandem_xfer_checksum_mismatch_total"] == 0 and m1["tandem_prefill_tokens_total"] == 0 and
   m1["tandem_xfer_checksum_bytes_total"] > m0["tandem_xfer_checksum_bytes_total"],
   "under concurrency every room's pages verified (%d bytes), none computed on decode" % (
       m1["tandem_xfer_checksum_bytes_total"] - m0["tandem_xfer_checksum_bytes_total"]))

# abort mid-flight: prefill holds the room's copies, the client gives up, ABORT_ACK only after
ids = prompt_ids(7, 90)
st, ref, b = gen(dec, ids)
m0 = metrics(dec)
ok(arm(pre, {"name": "slow_host_copy", "rank": 0, "count": 1, "duration_ms": 1500})[0] == 200,
   "slow_host_copy 1500 ms armed on prefill")
st, out, b = gen(dec, prompt_ids(8, 60), timeout=0.6)
ok(st == -1, "the client gives up mid-transfer", b)
r = wait_until(lambda: (lambda m: m if m["tandem_xfer_aborts_acked_total"] >
                        m0["tandem_xfer_aborts_acked_total"] and
                        m["tandem_xfer_quarantined"] == 0 else None)(metrics(dec)), 15)
ok(r is not None and r["tandem_xfer_aborts_sent_total"] > m0["tandem_xfer_aborts_sent_total"]
   and r["tandem_xfer_corruption_risk_total"] == m0["tandem_xfer_corruption_risk_total"],
   "abort mid-flight: ABORT sent and acknowledged after the copies, nothing quarantined, no "
   "corruption risk", json.dumps(r or metrics(dec))[:600])
st, out, b = gen(dec, ids)
ok(st == 200 and out == ref, "the next request after the abort is right", b)

# flip_kv_bits on decode: a device byte flipped after the copy, caught by the GPU checksum
m0 = metrics(dec)
st, body = arm(dec, {"name": "flip_kv_bits", "rank": 0, "count": 1, "duration_ms": 4})
ok(st == 200, "flip_kv_bits armed on decode", body)
st, out, b = gen(dec, ids)
m1 = metrics(dec)
ok(st >= 400 and "checksum" in b, "flip_kv_bits: the request fails cleanly (%d)" % st, b)
ok(m1["tandem_xfer_checksum_mismatch_total"] == m0["tandem_xfer_checksum_mismatch_total"] + 1,
   "flip_kv_bits: tandem_xfer_checksum_mismatch_total +1")
st, out, b = gen(dec, ids)
ok(st == 200 and out == ref, "the next request is served right", b)

for w in (pre, dec):
    good, why = drain_all_free(w)
    ok(good, "%s: every KV page free after a drain (%s)" % (w["name"], why))
for w in (dec, pre, col):
    w["proc"].send_signal(signal.SIGTERM)
codes = []
for w in (dec, pre, col):
    try:
        codes.append(w["proc"].wait(timeout=30))
    except subprocess.TimeoutExpired:
        codes.append(None)
ok(codes == [0, 0, 0], "SIGTERM: all three exit cleanly %s" % codes,
   logtail(dec) + "\n" + logtail(pre))
note("test-pd-cuda took %.1f s" % (time.time() - t_start))
finish()
PY
