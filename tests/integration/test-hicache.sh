#!/bin/sh
# test-hicache.sh — the HiCache host tier in the serving worker on models/demo (CPU, TP 1), with a
# device pool small enough that prefixes are evicted to the host tier:
#   - host_layout_fp8_formula armed at start: the worker refuses, naming the sub-buffer, both
#     bytes/token and both strides;
#   - write_back/layer_first/kernel, write_through/page_first/direct and
#     write_through_selective/layer_first/direct (verify rate 1, canary poison): a prompt's
#     prefix evicted, then served from the host tier (hits rise), greedy output bit-identical to a
#     worker without HiCache, no CORRUPTION;
#   - forced past the layout check (--hicache-force-layout): the load's checksum mismatch ends the
#     request with an error and no token streamed, CORRUPTION counted;
#   - skip_layer_gate + slow_host_copy through /admin/faults: the poison read or the bypass
#     counter raises CORRUPTION and the request fails;
#   - --tp-size 2 (every rank's tier holds its KV-head shard, rank 0's stores and loads carried
#     in the plan): greedy output bit-identical to TP 1 and to TP 2 without HiCache, verified
#     loads on every rank; flip_host_bits on rank 1 (a follower) ends the request with an error
#     before any token is streamed, CORRUPTION counted — never a wrong token;
#   - 64 concurrent sessions with random client aborts: no CORRUPTION, /health green throughout,
#     afterwards no load in flight, no host page pinned, every device page free after a drain.
set -u
B=${TDM_BUILDDIR:-.}
S=${TDM_SRCDIR:-.}
W="$B/tandem-worker"
M="$S/models/demo"
if [ ! -x "$W" ] || [ ! -f "$M/config.json" ]; then
    echo "not ok 1 - tandem-worker or models/demo is missing"
    exit 1
fi
TDM_HC_BIN="$W" TDM_HC_MODEL="$M" TDM_CPU_THREADS=1 PYTHONPATH="$S/tests/integration" \
    exec python3 - <<'PY'
import json
import os
import random
import threading
import time

from pdlib import (ADMIN, arm, finish, gen, init, kv_bytes, logtail, metrics, note, ok, request,
                   start, stream_gen, wait_ready, wait_until)

init(os.environ["TDM_HC_BIN"], os.environ["TDM_HC_MODEL"], "test-hicache-",
     base_args=["--kv-cpu-bytes", str(kv_bytes(os.environ["TDM_HC_MODEL"], 32)),
                "--max-running-requests", "16"],
     token_file_arg=True)
HC = ["--enable-hierarchical-cache", "--hicache-verify-rate", "1", "--hicache-poison"]


def metrics_when(w, pred, limit=10):
    """The worker publishes its counters at the end of the scheduler iteration that ended the
    request, which can be after the client saw the error: poll until pred holds (or limit)."""
    return wait_until(lambda: (lambda m: m if pred(m) else None)(metrics(w)), limit) or metrics(w)


def prompt(seed, k):
    rnd = random.Random(seed)
    return [5 + rnd.randrange(1800) for _ in range(k)]


P = prompt(1, 100)
FILL = [prompt(100 + i, 120) for i in range(4)]


def evict_then_hit(w):
    """P, then prompts that push P's pages out of the 32-page device pool, then P again."""
    outs = []
    st, o, b = gen(w, P, 8)
    outs.append(o)
    for f in FILL:
        gen(w, f, 4)
    st, o, b = gen(w, P + [7], 8)
    outs.append(o)
    return st, outs, b


# ---------------------------------------------------------------- the fault at start
w = start("fp8", HC + ["--enable-fault-injection", "--fault-at-start", "host_layout_fp8_formula"])
rc = w["proc"].wait(timeout=60)
log = logtail(w, 5)
ok(rc != 0 and "sub-buffer K: device 256 bytes/token, page stride 4096; host 128 bytes/token, "
   "page stride 2048" in log,
   "host_layout_fp8_formula: the worker refuses to start naming sub-buffer, bytes/token, strides",
   log)

# ---------------------------------------------------------------- bit-identical on/off
ref = start("ref", [])
ok(wait_ready(ref), "reference worker (no HiCache) ready", logtail(ref))
st, want, body = evict_then_hit(ref)
ok(st == 200 and all(want), "reference outputs", body)
cases = [("write_back", "layer_first", "kernel"), ("write_through", "page_first", "direct"),
         ("write_through_selective", "layer_first", "direct")]
for pol, ml, io in cases:
    w = start("hc-" + pol, HC + ["--hicache-write-policy", pol, "--hicache-mem-layout", ml,
                                 "--hicache-io-backend", io])
    if not ok(wait_ready(w), "%s %s %s: ready" % (pol, ml, io), logtail(w)):
        continue
    if pol == "write_through_selective":
        # P indexed, then hit twice (the second hit copies its pages to the host tier)
        gen(w, P, 8)
        gen(w, P, 8)
    st, got, body = evict_then_hit(w)
    m = metrics(w)
    ok(st == 200 and got == want,
       "%s %s %s: greedy outputs bit-identical to the worker without HiCache" % (pol, ml, io),
       "%s\n%s" % (got, want))
    ok(m.get("tandem_hicache_hits_total", 0) > 0 and m.get("tandem_hicache_verified_total", 0) > 0
       and m.get("tandem_hicache_verify_failures_total", 1) == 0
       and m.get("tandem_hicache_corruption_events_total", 1) == 0
       and m.get("tandem_hicache_poison_reads_total", 1) == 0,
       "%s: prefix served from the host tier, verified, no CORRUPTION (hits %s)" %
       (pol, m.get("tandem_hicache_hits_total")), json.dumps(
           {k: v for k, v in m.items() if "hicache" in k}))
    w["proc"].terminate()
    w["proc"].wait(timeout=30)

# ---------------------------------------------------------------- TP 2: on/off bit-identical
# the per-rank pool holds half the KV heads: half the bytes keep the 32-page device pool
TP2 = ["--tp-size", "2", "--kv-cpu-bytes", str(kv_bytes(os.environ["TDM_HC_MODEL"], 32, tp=2))]
ref2 = start("ref-tp2", TP2)
ok(wait_ready(ref2), "TP 2 reference worker (no HiCache) ready", logtail(ref2))
st, want2, body = evict_then_hit(ref2)
ok(st == 200 and want2 == want, "TP 2 without HiCache: greedy outputs equal TP 1's",
   "%s\n%s" % (want2, want))
ref2["proc"].terminate()
ref2["proc"].wait(timeout=30)
w = start("hc-tp2", HC + TP2 + ["--hicache-write-policy", "write_back"])
if ok(wait_ready(w), "TP 2 with HiCache: ready", logtail(w)):
    st, got, body = evict_then_hit(w)
    m = metrics(w)
    ok(st == 200 and got == want2,
       "TP 2: greedy outputs with HiCache bit-identical to TP 2 without it", "%s\n%s" % (got, want2))
    ok(m.get("tandem_kv_pages_capacity") == 32 and m.get("tandem_hicache_hits_total", 0) > 0
       and m.get("tandem_hicache_verified_total", 0) > 0
       and m.get("tandem_hicache_corruption_events_total", 1) == 0
       and m.get("tandem_hicache_poison_reads_total", 1) == 0,
       "TP 2: prefix served from the host tiers, verified, no CORRUPTION (hits %s)" %
       m.get("tandem_hicache_hits_total"), json.dumps(
           {k: v for k, v in m.items() if "hicache" in k or "kv_pages" in k}))
    w["proc"].terminate()
    w["proc"].wait(timeout=30)


# ---------------------------------------------------------------- forced past the layout check
# (no poison here: the truncated pages' untouched halves would be caught as poison reads first)
w = start("forced", ["--enable-hierarchical-cache", "--hicache-verify-rate", "1",
                     "--enable-fault-injection", "--fault-at-start",
                          "host_layout_fp8_formula", "--hicache-force-layout"])
if ok(wait_ready(w), "forced past the layout check: starts (test only)", logtail(w)):
    gen(w, P, 8)
    for f in FILL:
        gen(w, f, 4)
    st, n, last = stream_gen(w, P + [7], 8)
    m = metrics_when(w, lambda m: m.get("tandem_hicache_verify_failures_total", 0) >= 1
                     and m.get("tandem_hicache_corruption_events_total", 0) >= 1)
    ok(n == 0 and last is not None and "verification" in last,
       "truncated host pages: the load checksum fails the request before any token is sent",
       "status %s tokens %s last %s" % (st, n, last))
    ok(m.get("tandem_hicache_verify_failures_total", 0) >= 1
       and m.get("tandem_hicache_corruption_events_total", 0) >= 1,
       "verify failure and CORRUPTION counted")
    w["proc"].terminate()
    w["proc"].wait(timeout=30)

# ---------------------------------------------------------------- TP 2: a follower's bad shard
w = start("flip-tp2", HC + TP2 + ["--hicache-write-policy", "write_back",
                                  "--enable-fault-injection"])
if ok(wait_ready(w), "TP 2 fault worker ready", logtail(w)):
    gen(w, P, 8)
    for f in FILL:
        gen(w, f, 4)
    a = arm(w, {"name": "flip_host_bits", "rank": 1})
    ok(a[0] == 200, "flip_host_bits armed on rank 1", str(a))
    st, n, last = stream_gen(w, P + [7], 8)
    m = metrics_when(w, lambda m: m.get("tandem_hicache_corruption_events_total", 0) >= 1)
    ok(n == 0 and last is not None and "verification" in last,
       "flip_host_bits on a follower: the request fails before any token is sent",
       "status %s tokens %s last %s" % (st, n, last))
    ok(m.get("tandem_hicache_corruption_events_total", 0) >= 1,
       "flip_host_bits on a follower: CORRUPTION counted", json.dumps(
           {k: v for k, v in m.items() if "hicache" in k}))
    arm(w, {"name": "flip_host_bits", "rank": 1, "disarm": True})
    st, o, body = gen(w, P + [7], 8)
    ok(st == 200 and o == want[1], "TP 2 after the fault: the prompt is served right again",
       "%s %s" % (st, body[:200]))
    w["proc"].terminate()
    w["proc"].wait(timeout=30)

# ---------------------------------------------------------------- skip_layer_gate + slow copy
w = start("gate", HC + ["--enable-fault-injection"])
if ok(wait_ready(w), "gate worker ready", logtail(w)):
    gen(w, P, 8)
    for f in FILL:
        gen(w, f, 4)
    a1 = arm(w, {"name": "slow_host_copy", "rank": 0, "duration_ms": 40})
    a2 = arm(w, {"name": "skip_layer_gate", "rank": 0})
    ok(a1[0] == 200 and a2[0] == 200, "slow_host_copy and skip_layer_gate armed", "%s %s" % (a1, a2))
    st, o, body = gen(w, P + [7], 8)
    m = metrics_when(w, lambda m: (m.get("tandem_hicache_poison_reads_total", 0) > 0
                                   or m.get("tandem_hicache_gate_bypasses_total", 0) > 0)
                     and m.get("tandem_hicache_corruption_events_total", 0) >= 1)
    ok(st != 200 and (m.get("tandem_hicache_poison_reads_total", 0) > 0
                      or m.get("tandem_hicache_gate_bypasses_total", 0) > 0)
       and m.get("tandem_hicache_corruption_events_total", 0) >= 1,
       "skip_layer_gate: the poison read / bypass raises CORRUPTION and the request fails",
       "status %s body %s metrics %s" % (st, body[:200], json.dumps(
           {k: v for k, v in m.items() if "hicache" in k})))
    arm(w, {"name": "skip_layer_gate", "rank": 0, "disarm": True})
    arm(w, {"name": "slow_host_copy", "rank": 0, "disarm": True})
    w["proc"].terminate()
    w["proc"].wait(timeout=30)

# ---------------------------------------------------------------- 64 sessions, random aborts
w = start("storm", HC + ["--hicache-write-policy", "write_back"])
if ok(wait_ready(w), "storm worker ready", logtail(w)):
    bases = [prompt(500 + i, 48) for i in range(8)]
    health_bad = []
    stop = threading.Event()

    def health():
        while not stop.is_set():
            st, b = request(w, "GET", "/health", timeout=10)
            if st != 200:
                health_bad.append((st, b))
            time.sleep(0.1)

    def session(i):
        rnd = random.Random(i)
        ctx = list(bases[i % 8])
        for turn in range(3):
            ctx += prompt(1000 * i + turn, 16)
            to = 0.05 + rnd.random() * 0.3 if rnd.random() < 0.3 else 120
            st, o, b = gen(w, ctx, 4, timeout=to)
            if o:
                ctx += o

    ht = threading.Thread(target=health)
    ht.start()
    ts = [threading.Thread(target=session, args=(i,)) for i in range(64)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    ht.join()
    m = wait_until(lambda: (lambda m: m if m.get("tandem_requests_running", 1) == 0 and
                            m.get("tandem_requests_waiting", 1) == 0 else None)(metrics(w)), 60)
    m = m or metrics(w)
    ok(not health_bad, "/health green throughout the 64 sessions", str(health_bad[:3]))
    ok(m.get("tandem_hicache_corruption_events_total", 1) == 0
       and m.get("tandem_hicache_hits_total", 0) > 0,
       "64 sessions with aborts: host tier used (hits %s), no CORRUPTION" %
       m.get("tandem_hicache_hits_total"))
    ok(m.get("tandem_hicache_loads_in_flight", 1) == 0
       and m.get("tandem_hicache_host_pages_pinned", 1) == 0,
       "no host-tier load in flight and no host page pinned at idle")
    st, _ = request(w, "POST", "/admin/drain", {}, ADMIN)
    m = wait_until(lambda: (lambda m: m if m.get("tandem_drained") == 1 else None)(metrics(w)), 30)
    ok(m and m["tandem_kv_pages_free"] == m["tandem_kv_pages_capacity"],
       "drained: every device page back in the free list",
       str(m and (m["tandem_kv_pages_free"], m["tandem_kv_pages_capacity"])))
finish()
PY
