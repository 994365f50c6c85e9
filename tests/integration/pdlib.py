"""tests/integration/pdlib.py — the worker harness of the PD tests (tests/integration/test-pd.sh
and its scenarios, tests/gpu/test-pd-cuda.sh), imported through sys.path from
"$SRC/tests/integration": TAP (taplib), tandem-worker processes started with a ready file in
their own session and a log each, HTTP requests that never raise, /metrics as a dict, the admin
fault and drain calls, and finish() which stops every worker (SIGTERM, then the whole process
group) and prints the plan.

init(bin, model, prefix, base_args, token_file_arg) first: base_args follow "--model-path M
--port 0 --ready-file F" on every start; the admin token file (ADMIN headers) is created in the
temp dir."""
import json
import os
import random
import signal
import subprocess
import tempfile
import time
import http.client

import taplib
from taplib import ok  # noqa: F401 (re-exported for the tests)

procs = []
ADMIN = {"Authorization": "Bearer pd-adm1n"}
_cfg = {}


def note(msg):
    print("# " + msg, flush=True)


def init(bin_path, model, prefix, base_args=(), token_file_arg=False):
    """Set the worker binary, model and extra arguments (plus "--admin-token-file F" with
    token_file_arg); returns (temp dir, admin token file)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    tokf = os.path.join(tmp, "admin.token")
    with open(tokf, "w") as f:
        f.write("pd-adm1n\n")
    base = list(base_args) + (["--admin-token-file", tokf] if token_file_arg else [])
    _cfg.update(bin=bin_path, model=model, tmp=tmp, base=base)
    return tmp, tokf


def start(name, extra, device="cpu", device_args=()):
    ready = os.path.join(_cfg["tmp"], name + ".ready")
    log = open(os.path.join(_cfg["tmp"], name + ".log"), "w+")
    args = [_cfg["bin"], "--device", device, "--model-path", _cfg["model"], "--port", "0",
            "--ready-file", ready] + _cfg["base"] + list(device_args)
    # A build configured with --enable-cuda-module has the engine in backend-cuda.so beside the
    # worker (not yet installed in PKGLIBDIR): --device cuda loads it from there.
    module = os.path.join(os.path.dirname(_cfg["bin"]), "backend-cuda.so")
    if device == "cuda" and os.path.exists(module):
        args += ["--cuda-backend", module]
    p = subprocess.Popen(args + list(extra), stdout=subprocess.DEVNULL, stderr=log,
                         start_new_session=True)
    procs.append(p)
    return {"name": name, "proc": p, "ready": ready, "log": log}


def wait_ready(w, limit=60):
    """Until the worker wrote its ready file (ports in w) or exited; False on exit or timeout."""
    deadline = time.time() + limit
    while time.time() < deadline and w["proc"].poll() is None:
        if os.path.exists(w["ready"]):
            try:
                j = json.load(open(w["ready"]))
                w["port"], w["bootstrap"] = j["http"], j.get("bootstrap")
                return True
            except ValueError:
                pass
        time.sleep(0.05)
    return False


def logtail(w, lines=15):
    w["log"].seek(0)
    return "\n".join(w["log"].read().splitlines()[-lines:])


def request(w, method, path, body=None, headers=None, timeout=60):
    """(status, body text); status -1 and the error text when the connection failed."""
    c = http.client.HTTPConnection("127.0.0.1", w["port"], timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        return r.status, r.read().decode()
    except (OSError, http.client.HTTPException) as e:
        return -1, str(e)
    finally:
        c.close()


def metrics(w):
    st, body = request(w, "GET", "/metrics")
    m = {}
    for line in body.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        k, v = line.rsplit(" ", 1)
        try:
            m[k] = float(v)
        except ValueError:
            pass
    return m


def wait_until(fn, limit):
    deadline = time.time() + limit
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    return fn()


def arm(w, body):
    return request(w, "POST", "/admin/faults", body, ADMIN)


def gen(w, ids, max_new=8, timeout=60):
    """/generate greedy with ignore_eos: (status, output ids or None, body)."""
    st, b = request(w, "POST", "/generate", {"input_ids": ids, "max_new_tokens": max_new,
                                             "ignore_eos": True}, timeout=timeout)
    try:
        return st, json.loads(b).get("output_ids"), b
    except ValueError:
        return st, None, b


def stream_gen(w, ids, max_new=8, timeout=60):
    """Streamed greedy /generate: (status, number of token chunks before the end, last event)."""
    c = http.client.HTTPConnection("127.0.0.1", w["port"], timeout=timeout)
    n, last = 0, None
    try:
        c.request("POST", "/generate", body=json.dumps(
            {"input_ids": ids, "max_new_tokens": max_new, "ignore_eos": True, "stream": True}),
            headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return r.status, 0, r.read().decode()
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            last = line[6:]
            if "token_id" in json.loads(last):
                n += 1
        return 200, n, last
    except (OSError, ValueError, http.client.HTTPException) as e:
        return -1, n, str(e)
    finally:
        c.close()


def stream_timed(w, prompt, max_new, timeout=300):
    """Streamed greedy /generate for the benches: (seconds to the first token, token ids); an
    error event raises RuntimeError."""
    c = http.client.HTTPConnection("127.0.0.1", w["port"], timeout=timeout)
    t0 = time.time()
    ttft, out = None, []
    try:
        c.request("POST", "/generate", body=json.dumps(
            {"input_ids": prompt, "max_new_tokens": max_new, "ignore_eos": True, "stream": True}),
            headers={"Content-Type": "application/json"})
        r = c.getresponse()
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(line)
            if "token_id" in ev:
                if ttft is None:
                    ttft = time.time() - t0
                out.append(ev["token_id"])
    finally:
        c.close()
    return ttft, out


def kv_bytes(model, pages, tp=1, page_size=16):
    """--kv-cpu-bytes for a CPU KV pool of `pages` pages of `page_size` tokens per rank on the
    checkpoint in `model` (bf16 K and V of every layer and this rank's KV heads), so tests size
    their pools in pages whatever the bundled model's shape."""
    with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    kvh = c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return pages * page_size * c["num_hidden_layers"] * 2 * (kvh // tp) * hd * 2


def prompt_ids(seed, k):
    rnd = random.Random(seed)
    return [5 + rnd.randrange(1800) for _ in range(k)]


def drain_all_free(w):
    st, _ = request(w, "POST", "/admin/drain", {}, ADMIN)
    m = wait_until(lambda: (lambda m: m if m.get("tandem_drained") == 1 else None)(metrics(w)), 30)
    if not m:
        return False, "not drained: %s" % st
    return (m["tandem_kv_pages_free"] == m["tandem_kv_pages_capacity"],
            "free %s of %s" % (m["tandem_kv_pages_free"], m["tandem_kv_pages_capacity"]))


def kill_all():
    """SIGKILL every worker's process group (nothing of a group may outlive the test)."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass


def finish(term_timeout=15):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=term_timeout)
        except subprocess.TimeoutExpired:
            p.kill()
    kill_all()
    taplib.done()
