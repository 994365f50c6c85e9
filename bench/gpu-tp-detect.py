"""bench/gpu-tp-detect.py — the detectors on GPU ranks through tandemd (docs/design.md §3 I2, §4),
read through tandemd's REST API (docs/contracts.md §h: bench/results/gpu_tp.json "detect").

usage: gpu-tp-detect.py --build DIR --src DIR --out FILE [--device cuda|cpu] [--pg-bindir DIR]
                        [--mem-fraction F] [--keep]

A private PostgreSQL (tdm-pg; --pg-bindir where the machine has no server:
tools/device-postgres.sh), tandemd (tests/chaos/chaoslib.Stack, --alert-policy all=auto) and two colocated groups of the demo
model at TP=2 (device = cuda: two processes, one context each on one GPU, host-staged collectives):
  div: rank_idle_path on rank 1 under one stream: RANK_DIVERGENCE on GET /api/v1/alerts?source=live
       naming minority rank 1 and the op (detect_s = the alert's opened_us - the fault route's
       answer; seen_s = when a 50 ms poll of the API first showed it); target 2 s.
  wdg: stall_loop on rank 0 under streams sent back to back: WEDGE on the API, and the worker's /health
       answering 503 naming the rank (seen_s each); target 5 s.
Exit 0 when both are detected within their targets with the evidence; the figures go to --out.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "chaos"))
from chaoslib import Stack, free_port, http, stop_launchers, wait_until  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--build", required=True)
ap.add_argument("--src", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
ap.add_argument("--pg-bindir", default="")
ap.add_argument("--mem-fraction", type=float, default=0.05)
ap.add_argument("--keep", action="store_true", help="keep the run's directory (logs)")
A = ap.parse_args()
GROUPS = ("div", "wdg")


class DetectStack(Stack):
    def __init__(self, *a, **kw):
        Stack.__init__(self, *a, **kw)
        self.ports.update({g: free_port() for g in GROUPS})

    def groups_ini(self, hicache=False):
        dev = ("device = cuda\nmem_fraction_static = %g\n" % A.mem_fraction
               if A.device == "cuda" else "device = cpu\nkv_cpu_bytes = 8388608\n")
        return "".join("[group.%s]\nport = %d\nmodel_path = %s\nserved_model_name = %s\n%s"
                       "tp_size = 2\nenable_fault_injection = true\n"
                       % (g, self.ports[g], self.model, g, dev) for g in GROUPS)

    def pg_start(self):
        if not A.pg_bindir:
            return Stack.pg_start(self)
        r = subprocess.run([os.path.join(self.build, "tdm-pg"), "start",
                            os.path.join(self.tmp, "pg"), "--bindir", A.pg_bindir],
                           capture_output=True, text=True)
        for line in r.stdout.splitlines():
            k, _, v = line.partition("=")
            if k.startswith("TDM_TEST_PG"):
                self.pg[k] = v.strip("'\"")
        return r.returncode == 0 and "TDM_TEST_PGHOST" in self.pg, r.stderr


def stream(port, n, limit):
    """A streamed /generate of n tokens (the work the faults need a running iteration for)."""
    return http(port, "POST", "/generate", {"input_ids": [5, 6, 7, 8], "max_new_tokens": n,
                                             "ignore_eos": True, "stream": True}, timeout=limit)


def running_requests(port):
    st, body = http(port, "GET", "/metrics", timeout=5)
    for line in body.splitlines() if st == 200 else []:
        if line.startswith("tandem_requests_running "):
            return float(line.split()[1])
    return 0


def live_alert(kind, group):
    st, j = S.api("GET", "/api/v1/alerts?source=live", timeout=3)
    if st != 200 or not isinstance(j, dict):
        return None
    for a in j.get("alerts", []):
        if a.get("kind") == kind and a.get("group") == group:
            return a
    return None


def bg(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


tmp = tempfile.mkdtemp(prefix="gpu-tp-detect-")
os.chmod(tmp, 0o755)
S = DetectStack(A.build, A.src, tmp, tp=2)
res = {"device": A.device, "tp": 2, "backend": "host-staged (2 processes, 1 GPU)"
       if A.device == "cuda" else "shm", "targets": {"RANK_DIVERGENCE_s": 2, "WEDGE_s": 5}}
rc = 1


def log_tail(name, n=3000):
    try:
        return open(os.path.join(tmp, name), errors="replace").read()[-n:]
    except OSError:
        return ""


def own_processes():
    mine = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % d, "rb").read().decode(errors="replace")
        except OSError:
            continue
        if S.state in cmd:
            mine.append(int(d))
    return mine


def finish():
    S.tandemd_stop()
    stop_launchers([p for p in (S.launcher_pid(g) for g in GROUPS) if p])
    # a group the policy was restarting when tandemd stopped has a launcher no record names yet:
    # every process started on this run's state directory goes too
    for p in own_processes():
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    S.pg_destroy()
    json.dump(res, open(A.out, "w"), indent=1)
    if not A.keep:
        subprocess.run(["rm", "-rf", tmp])


try:
    ok_pg, err = S.pg_start()
    if not ok_pg:
        raise SystemExit("PostgreSQL did not start: " + err[-1500:])
    if not S.tandemd_start():
        raise SystemExit("tandemd did not start: " + log_tail("tandemd.log"))
    t = time.time()
    if not wait_until(lambda: S.ready(GROUPS), 150, 0.3):
        raise SystemExit("the TP=2 groups did not become ready: " + log_tail("tandemd.log") +
                         json.dumps(S.groups())[:2000])
    res["ready_s"] = round(time.time() - t, 2)
    print("# groups ready after %.1f s" % res["ready_s"], flush=True)

    # 1. rank_idle_path on rank 1 -> RANK_DIVERGENCE
    st, r = S.fault("div", {"name": "rank_idle_path", "rank": 1, "count": 0, "after_iter": 0})
    t_fault = time.time()
    bg(stream, S.worker_port("div"), 64, 60)
    a = wait_until(lambda: live_alert("RANK_DIVERGENCE", "div"), 10, 0.05)
    seen = time.time() - t_fault
    ev = (a or {}).get("evidence") or {}
    d = {"fault_status": st, "detected": a is not None, "seen_s": round(seen, 3) if a else None,
         "detect_s": round(a["opened_us"] / 1e6 - t_fault, 3) if a and "opened_us" in a else None,
         "minority_ranks": ev.get("minority_ranks"), "op": ev.get("op"),
         "minority_op": ev.get("minority_op"), "alert": a}
    d["ok"] = bool(a and ev.get("minority_ranks") == [1] and ev.get("op") and
                   d["seen_s"] <= 2.0 + 0.25)
    res["rank_divergence"] = d
    print("# RANK_DIVERGENCE: %s after %s s (opened %s s), minority %s op %s (%s)" % (
        "seen" if a else "NOT seen", d["seen_s"], d["detect_s"], d["minority_ranks"], d["op"],
        "ok" if d["ok"] else "FAIL"), flush=True)

    # 2. stall_loop on rank 0 with a stream running -> WEDGE, /health 503 naming the rank
    wp = S.worker_port("wdg")
    # WEDGE needs work pending when the loop stalls (a 1500-token stream lasts under a second
    # on the GPU): two clients send streams back to back until the end
    feeding = threading.Event()
    feeding.set()

    def feed():
        while feeding.is_set():
            stream(wp, 400, 60)

    bg(feed)
    bg(feed)
    running = wait_until(lambda: running_requests(wp) >= 1, 10, 0.05)
    st, r = S.fault("wdg", {"name": "stall_loop", "rank": 0, "count": 1, "after_iter": 0,
                            "duration_ms": 60000})
    t_fault = time.time()
    h = {}

    def health():
        c, body = http(wp, "GET", "/health", timeout=2)
        if c == 503:
            h.setdefault("t", time.time() - t_fault)
            h["body"] = body[:600]
        return c == 503

    bg(lambda: wait_until(health, 15, 0.1))
    a = wait_until(lambda: live_alert("WEDGE", "wdg"), 15, 0.05)
    seen = time.time() - t_fault
    wait_until(lambda: "t" in h, 5, 0.1)
    w = {"fault_status": st, "stream_running": bool(running), "detected": a is not None,
         "seen_s": round(seen, 3) if a else None,
         "detect_s": round(a["opened_us"] / 1e6 - t_fault, 3) if a and "opened_us" in a else None,
         "health_503_s": round(h["t"], 3) if "t" in h else None, "health_body": h.get("body"),
         "alert": a}
    w["ok"] = bool(a and w["seen_s"] <= 5.0 + 0.25 and "t" in h and "rank" in h.get("body", ""))
    res["wedge"] = w
    print("# WEDGE: %s after %s s (opened %s s); /health 503 after %s s: %s (%s)" % (
        "seen" if a else "NOT seen", w["seen_s"], w["detect_s"], w["health_503_s"],
        (h.get("body") or "")[:200], "ok" if w["ok"] else "FAIL"), flush=True)
    feeding.clear()
    rc = 0 if d["ok"] and w["ok"] else 1
except SystemExit as e:
    res["error"] = str(e)
    print("Bail out! %s" % e, flush=True)
finally:
    res["tandemd_log_tail"] = log_tail("tandemd.log", 1500) if rc else ""
    finish()
sys.exit(rc)
