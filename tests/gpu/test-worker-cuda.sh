#!/bin/sh
# test-worker-cuda.sh — the serving worker on the GPU (`--device cuda` through the
# scheduler's executor, kernels/cuda/exec_cuda.h), on the bundled demo model: a `--device cuda`
# worker and a `--device cpu` worker side by side; greedy /v1/completions answers (one request at
# a time, so the same graph bucket as the CPU reference's single row) equal the CPU worker's token
# for token on every prompt; a streamed request gives the same text as the whole one; 12
# concurrent requests (batched decode, several graph buckets) all finish with their token count;
# /metrics reports the weights resident and a KV pool sized from --mem-fraction-static; after the
# load every page is free again; SIGTERM exits cleanly. HiCache on the GPU (kernels/cuda/hicache.h):
# a worker with --enable-hierarchical-cache (verify rate 1, canary poison, one slot so its pool is
# 128 pages) serves a prompt whose pages were pushed out of the device pool from the host tier:
# the greedy output equals the GPU worker's without HiCache, /metrics shows the hits, verified
# loads and no verify failure, poison read or gate bypass. HiCache at --tp-size 2 on this ONE GPU
# (two rank processes, the host-staged collectives of dataplane/tp/gpu.h; every rank's tier over
# its KV-head shard, rank 0's stores and loads replayed by rank 1): greedy outputs equal TP 2
# without HiCache, a host hit verified on the device; flip_host_bits armed on rank 1 ends the
# request with an error before any token is streamed, CORRUPTION counted, and the prompt is served
# right once disarmed. The overlap loop pipelined on the device (docs/serving.md "Loops") gives the
# text of lockstep and of the host sampler for seeded requests. Skips without a GPU or a CUDA build.
# TAP; python3 standard library only.
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
export TDM_W_BIN="$BIN" TDM_W_MODEL="$SRC/models/demo" TDM_TAPLIB="$SRC/tests/integration"
exec python3 - <<'PY'
import json, os, signal, sys, threading, time

sys.path.insert(0, os.environ["TDM_TAPLIB"])
import pdlib
import taplib
from pdlib import kill_all, logtail, metrics, ok

BIN, MODEL = os.environ["TDM_W_BIN"], os.environ["TDM_W_MODEL"]
pdlib.init(BIN, MODEL, "test-worker-cuda-", ["--max-running-requests", "16"],
           token_file_arg=True)


def start(name, device, extra=()):
    w = pdlib.start(name, extra, device)
    pdlib.wait_ready(w, 120)
    return w


def request(w, path, body=None, timeout=120):
    return pdlib.request(w, "GET" if body is None else "POST", path, body, timeout=timeout)


def complete(w, prompt, max_tokens=16, stream=False):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    if stream:
        body["stream"] = True
    st, txt = request(w, "/v1/completions", body)
    if st != 200:
        return st, txt
    if not stream:
        return st, json.loads(txt)["choices"][0]["text"]
    out = ""
    for line in txt.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out += json.loads(line[6:])["choices"][0].get("text", "")
    return st, out


print("1..22")
try:
    gpu = start("cuda", "cuda", ["--mem-fraction-static", "0.10"])
    cpu = start("cpu", "cpu")
    if not ok("port" in gpu and "port" in cpu, "a --device cuda and a --device cpu worker start",
              logtail(gpu) + "\n" + logtail(cpu)):
        raise SystemExit
    prompts = ["Hello", "What is the weather in Paris?",
               "You are a helpful assistant. Tell me about the tools you have. " * 3,
               "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29"]
    diffs = []
    for p in prompts:
        a, b = complete(gpu, p), complete(cpu, p)
        if a != b:
            diffs.append("%r: cuda %r cpu %r" % (p[:30], a, b))
    ok(not diffs, "greedy answers on the GPU equal the CPU worker's for %d prompts" % len(prompts),
       "\n".join(diffs))
    st, whole = complete(gpu, prompts[1], 24)
    st2, streamed = complete(gpu, prompts[1], 24, stream=True)
    ok(st == 200 and st2 == 200 and whole == streamed, "streamed text == whole text on the GPU",
       "%s %r / %s %r" % (st, whole, st2, streamed))
    res = [None] * 12

    def worker(i):
        body = {"prompt": "story %d: once upon a time" % i,
                "max_tokens": 32 + i, "temperature": 0, "ignore_eos": True}
        st, txt = request(gpu, "/v1/completions", body)
        res[i] = (st, json.loads(txt)["usage"]["completion_tokens"] if st == 200 else txt)

    th = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    t0 = time.time()
    for t in th:
        t.start()
    for t in th:
        t.join()
    ok(all(r and r[0] == 200 and r[1] == 32 + i for i, r in enumerate(res)),
       "12 concurrent requests (batched decode) each finish with their token count (%.2f s)"
       % (time.time() - t0), str(res))
    m = metrics(gpu)
    wb = [v for k, v in m.items() if k.startswith("tandem_resident_weight_bytes")]
    ok(wb and min(wb) > 1e6, "/metrics: weights resident on the GPU (%s bytes)" % wb,
       "\n".join(k for k in m if "byte" in k))
    tot = m.get("tandem_kv_pages_capacity", 0)
    ok(tot > 0, "/metrics: a KV pool of %d pages from --mem-fraction-static" % tot,
       "\n".join(k for k in m if "page" in k))
    free = m.get("tandem_kv_pages_free", -1) + m.get("tandem_kv_pages_cached", 0)
    ok(free == tot, "every page free (or only prefix-cached) after the load (%d of %d)" % (free, tot))
    st, body = request(gpu, "/health")
    ok(st == 200, "/health 200 on the GPU worker", body)
    for w in (gpu, cpu):
        w["proc"].send_signal(signal.SIGTERM)
    rc = gpu["proc"].wait(timeout=30)
    cpu["proc"].wait(timeout=30)
    ok(rc == 0, "SIGTERM: the GPU worker exits 0 (rc %s)" % rc, logtail(gpu))

    # The overlap loop pipelined on the device (the ids step N samples written into step N+1's
    # input there, its sampling steps counted ahead) against lockstep and against the threaded
    # loop with host sampling: seeded requests, one at a time (batch 1 in all three), give the
    # same text — sampled, greedy, with a stop string, and with a penalty (host-sampled rows,
    # which the pipelined loop runs in order). The pipelined worker (the defaults) sends its mixed
    # steps' one-token rows through the decode attention: the 16 concurrent requests below run
    # such steps.
    loops = {}
    for name, extra, env in (("pipe", [], {"TDM_CUDA_PIPELINE": "1", "TDM_CUDA_MIXED_DECODE": "1"}),
                             ("lockstep", ["--disable-overlap-schedule"], {}),
                             ("hostsample", [], {"TDM_CUDA_HOST_SAMPLE": "1",
                                                 "TDM_CUDA_PIPELINE": "0"})):
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        loops[name] = start("cuda-" + name, "cuda", ["--mem-fraction-static", "0.05"] + extra)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    bodies = []
    for i, p in enumerate(prompts):
        bodies.append({"prompt": p, "max_tokens": 40, "temperature": 0.9, "top_p": 0.95,
                       "seed": 1000 + i, "ignore_eos": True})
    bodies.append({"prompt": prompts[1], "max_tokens": 24, "temperature": 0, "ignore_eos": True})
    bodies.append({"prompt": prompts[0], "max_tokens": 40, "temperature": 0.8, "seed": 7,
                   "ignore_eos": True, "stop": ["e"]})
    bodies.append({"prompt": prompts[2], "max_tokens": 30, "temperature": 0.7, "seed": 9,
                   "ignore_eos": True, "frequency_penalty": 0.4})
    outs = {}
    for name, w in loops.items():
        outs[name] = []
        for b in bodies:
            st, txt = request(w, "/v1/completions", b)
            outs[name].append(json.loads(txt)["choices"][0]["text"] if st == 200 else
                              "HTTP %s %s" % (st, txt[:200]))
    bad = [i for i in range(len(bodies))
           if not (outs["pipe"][i] == outs["lockstep"][i] == outs["hostsample"][i])]
    ok(all(not o.startswith("HTTP ") for v in outs.values() for o in v),
       "pipelined, lockstep and host-sampling GPU workers answer %d requests each" % len(bodies),
       json.dumps(outs)[:2000])
    ok(not bad, "seeded requests one at a time: the pipelined loop's text == lockstep's == the "
       "host sampler's (%d requests: sampled, greedy, stop, penalty)" % len(bodies),
       "\n".join("%d: pipe %r lockstep %r host %r" % (i, outs["pipe"][i], outs["lockstep"][i],
                                                     outs["hostsample"][i]) for i in bad))
    res = [None] * 16

    def sampled(i):
        b = dict(bodies[i % 4], max_tokens=20 + i, seed=50 + i)
        st, txt = request(loops["pipe"], "/v1/completions", b)
        res[i] = (st, json.loads(txt)["usage"]["completion_tokens"] if st == 200 else txt)

    th = [threading.Thread(target=sampled, args=(i,)) for i in range(16)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    def pages_back():
        m = metrics(loops["pipe"])
        f = m.get("tandem_kv_pages_free", -1) + m.get("tandem_kv_pages_cached", 0)
        return f if f == m.get("tandem_kv_pages_capacity", -2) else None

    free = pdlib.wait_until(pages_back, 10)
    ok(free is not None and all(r and r[0] == 200 and r[1] == 20 + i for i, r in enumerate(res)),
       "16 concurrent sampled requests on the pipelined loop finish with their token count, every "
       "page back", "%s free %s" % (res, free))
    for w in loops.values():
        w["proc"].terminate()
        w["proc"].wait(timeout=30)

    # HiCache: P, then prompts that push P's pages out of the 128-page pool, then P again
    one = ["--mem-fraction-static", "0.10", "--max-running-requests", "1"]
    P = pdlib.prompt_ids(1, 300)
    FILL = [pdlib.prompt_ids(100 + i, 500) for i in range(5)]

    def evict_then_hit(w):
        outs = [pdlib.gen(w, P, 8, 120)[1]]
        for f in FILL:
            pdlib.gen(w, f, 4, 120)
        outs.append(pdlib.gen(w, P + [7], 8, 120)[1])
        return outs

    ref = start("cuda-ref", "cuda", one)
    hc = start("cuda-hc", "cuda", one + ["--enable-hierarchical-cache", "--hicache-verify-rate",
                                         "1", "--hicache-poison", "--hicache-ratio", "4"])
    if ok("port" in ref and "port" in hc, "a GPU worker with HiCache and one without start",
          logtail(ref) + "\n" + logtail(hc)):
        want, got = evict_then_hit(ref), evict_then_hit(hc)
        ok(all(want) and got == want,
           "HiCache on the GPU: greedy outputs equal the GPU worker's without it", "%s\n%s" %
           (got, want))
        m = metrics(hc)
        hm = {k: v for k, v in m.items() if "hicache" in k}
        ok(m.get("tandem_hicache_hits_total", 0) > 0 and
           m.get("tandem_hicache_verified_total", 0) > 0 and
           m.get("tandem_hicache_verify_failures_total", 1) == 0 and
           m.get("tandem_hicache_poison_reads_total", 1) == 0 and
           m.get("tandem_hicache_gate_bypasses_total", 1) == 0 and
           m.get("tandem_hicache_corruption_events_total", 1) == 0,
           "HiCache on the GPU: served from the host tier (hits %s), verified on the device, no "
           "CORRUPTION" % m.get("tandem_hicache_hits_total"), json.dumps(hm))
    else:
        ok(False, "HiCache on the GPU: outputs")
        ok(False, "HiCache on the GPU: metrics")
    for w in (ref, hc):
        w["proc"].terminate()
        w["proc"].wait(timeout=30)

    # HiCache at TP 2 on one GPU: the same flow, then a follower's bad host copy
    Q = pdlib.prompt_ids(2, 300)
    tp2 = one + ["--tp-size", "2", "--enable-fault-injection"]
    ref2 = start("cuda-ref-tp2", "cuda", tp2)
    hc2 = start("cuda-hc-tp2", "cuda", tp2 + ["--enable-hierarchical-cache",
                                              "--hicache-verify-rate", "1", "--hicache-poison",
                                              "--hicache-ratio", "4", "--hicache-write-policy",
                                              "write_back"])
    if ok("port" in ref2 and "port" in hc2,
          "TP 2 on one GPU: a group with HiCache and one without start",
          logtail(ref2) + "\n" + logtail(hc2)):
        want, got = evict_then_hit(ref2), evict_then_hit(hc2)
        ok(all(want) and got == want,
           "HiCache at TP 2 on the GPU: greedy outputs equal TP 2 without it", "%s\n%s" %
           (got, want))
        m = pdlib.wait_until(lambda: (lambda m: m if m.get("tandem_hicache_verified_total", 0) > 0
                                      else None)(metrics(hc2)), 10) or metrics(hc2)
        ok(m.get("tandem_hicache_hits_total", 0) > 0 and
           m.get("tandem_hicache_verified_total", 0) > 0 and
           m.get("tandem_hicache_verify_failures_total", 1) == 0 and
           m.get("tandem_hicache_poison_reads_total", 1) == 0 and
           m.get("tandem_hicache_gate_bypasses_total", 1) == 0 and
           m.get("tandem_hicache_corruption_events_total", 1) == 0,
           "HiCache at TP 2 on the GPU: host hits (%s) verified on the device, no CORRUPTION"
           % m.get("tandem_hicache_hits_total"), json.dumps(
               {k: v for k, v in m.items() if "hicache" in k}))
        # Q's pages pushed out to the host tiers, then Q + [7] loads them with rank 1's copy bad
        want_q = pdlib.gen(ref2, Q + [7], 8, 120)[1]
        pdlib.gen(hc2, Q, 8, 120)
        for f in FILL:
            pdlib.gen(hc2, f, 4, 120)
        a = pdlib.arm(hc2, {"name": "flip_host_bits", "rank": 1})
        ok(a[0] == 200, "flip_host_bits armed on rank 1", str(a))
        st, n, last = pdlib.stream_gen(hc2, Q + [7], 8, 120)
        ok(n == 0 and last is not None and "verification" in last,
           "flip_host_bits on rank 1: the request fails before any token is sent",
           "status %s tokens %s last %s" % (st, n, last))
        m = pdlib.wait_until(lambda: (lambda m: m if m.get(
            "tandem_hicache_corruption_events_total", 0) >= 1 else None)(metrics(hc2)), 10)
        ok(m, "flip_host_bits on rank 1: CORRUPTION counted", json.dumps(
            {k: v for k, v in metrics(hc2).items() if "hicache" in k}))
        pdlib.arm(hc2, {"name": "flip_host_bits", "rank": 1, "disarm": True})
        st, o, body = pdlib.gen(hc2, Q + [7], 8, 120)
        ok(st == 200 and want_q and o == want_q,
           "TP 2 on the GPU after the fault: the prompt is served right again",
           "%s %s / %s" % (st, body[:200], want_q))
    else:
        for what in ("outputs", "metrics", "armed", "fails first", "CORRUPTION", "after"):
            ok(False, "HiCache at TP 2 on the GPU: " + what)
finally:
    kill_all()
sys.exit(1 if taplib.failed else 0)
PY
