#!/bin/sh
# test-api.sh — the worker's HTTP surface end to end: a real `tandem-worker --device cpu` on the
# tiny-llama-gqa fixture, port 0 + ready file, then /health, /ready, /metrics, POST /generate
# (greedy ids == the transformers goldens for every golden prompt, whole and streamed), a client
# that disconnects mid-stream (the request is aborted and its KV pages come back), malformed
# requests (400/404/405/413 with docs/design.md §6 error objects), /admin auth, a valid request after all
# that, /admin/drain, and a clean exit on SIGTERM. TAP; python3 standard library only.
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/tap-lib.sh"
tap_need_exec "$BIN"
export TDM_API_BIN="$BIN" TDM_FIXTURES="$SRC/tests/fixtures" \
    TDM_TAPLIB="$SRC/tests/integration"
exec python3 - <<'PY'
import json, os, signal, socket, subprocess, sys, tempfile, time, urllib.request, urllib.error

BIN = os.environ["TDM_API_BIN"]
FX = os.environ["TDM_FIXTURES"]
MODEL = "tiny-llama-gqa"
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.environ["TDM_TAPLIB"])
from taplib import ok, done  # noqa: E402


tmp = tempfile.mkdtemp(prefix="test-api-")
ready = os.path.join(tmp, "ready.json")
tokf = os.path.join(tmp, "admin.token")
with open(tokf, "w") as f:
    f.write("adm1n-t0ken\n")
errlog = open(os.path.join(tmp, "stderr.log"), "w+")
proc = subprocess.Popen([BIN, "--device", "cpu", "--model-path", os.path.join(FX, "models", MODEL),
                         "--port", "0", "--ready-file", ready, "--admin-token-file", tokf,
                         "--max-request-bytes", "65536", "--page-size", "4"],
                        stdout=subprocess.DEVNULL, stderr=errlog)
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists(ready) and proc.poll() is None:
    time.sleep(0.05)
if not os.path.exists(ready):
    errlog.seek(0)
    text = errlog.read()
    proc.kill()
    print("1..1\nnot ok 1 - worker wrote no ready file")
    for line in text.splitlines()[-20:]:
        print("#   " + line)
    sys.exit(1)
port = json.load(open(ready))["http"]
ok(port > 0, "ready file names the bound port %d" % port)
BASE = "http://127.0.0.1:%d" % port


def req(method, path, body=None, headers=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    r = urllib.request.Request(BASE + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(r, timeout=60) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def is_error(status, body, want_status, want_code, what):
    try:
        e = json.loads(body)["error"]
        shape = set(e) == {"code", "message", "type"} and e["code"] == want_code
    except Exception:
        shape = False
    ok(status == want_status and shape, "%s → %d %s" % (what, want_status, want_code),
       "%d %s" % (status, body))


def metrics():
    _, text, _ = req("GET", "/metrics")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


st, body, _ = req("GET", "/health")
ok(st == 200 and body == "ok\n", "/health 200 ok", body)
for _ in range(100):
    st, body, _ = req("GET", "/ready")
    if st == 200:
        break
    time.sleep(0.1)
ok(st == 200, "/ready 200 once loaded", body)
m = metrics()
ok(m.get("tandem_kv_pages_capacity", 0) > 0 and m.get('tandem_resident_weight_bytes{rank="0"}', 0) > 0
   and 'tandem_rank_iter{rank="0"}' in m,
   "/metrics: pages, resident weight bytes and per-rank iter",
   {k: v for k, v in m.items() if "pages" in k or "weight" in k or "iter" in k})

gold = json.load(open(os.path.join(FX, "goldens", MODEL + ".json")))
for i, g in enumerate(gold["generation"]):
    want = g["tokens"]
    st, body, _ = req("POST", "/generate", {"input_ids": g["prompt_ids"],
                                             "max_new_tokens": len(want), "ignore_eos": True,
                                             "sampling": {"temperature": 0}})
    got = json.loads(body).get("output_ids") if st == 200 else None
    ok(got == want, "golden %d: /generate ids == transformers" % i, "%d %s\nwant %s" % (st, body, want))

g = gold["generation"][0]
st, body, hd = req("POST", "/generate", {"input_ids": g["prompt_ids"], "ignore_eos": True,
                                         "max_new_tokens": len(g["tokens"]), "stream": True})
ids = [json.loads(l[6:])["token_id"] for l in body.split("\n") if l.startswith('data: {"index"')]
ok(st == 200 and ids == g["tokens"] and body.endswith("data: [DONE]\n\n"),
   "stream: same ids as the golden, then [DONE]", body[-300:])

# a client that disconnects mid-stream: its request is aborted and its pages come back (free,
# or held only by the prefix cache, which gives them back on demand and on drain)
total = metrics()["tandem_kv_pages_capacity"]
aborted0 = metrics().get("tandem_requests_aborted_total", 0)
s = socket.create_connection(("127.0.0.1", port))
payload = json.dumps({"input_ids": g["prompt_ids"], "max_new_tokens": 200, "ignore_eos": True,
                      "stream": True}).encode()
s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
buf = b""
while buf.count(b'"index"') < 3:
    chunk = s.recv(4096)
    if not chunk:
        break
    buf += chunk
s.close()
ok(buf.count(b'"index"') >= 3, "stream started before the disconnect")
freed = False
for _ in range(100):
    m = metrics()
    if (m.get("tandem_kv_pages_free", 0) + m.get("tandem_kv_pages_cached", 0) == total
            and m.get("tandem_requests_running") == 0):
        freed = True
        break
    time.sleep(0.05)
ok(freed and m.get("tandem_requests_aborted_total", 0) >= aborted0 + 1,
   "after the disconnect the request is aborted and free + cached pages == total pages",
   {k: v for k, v in m.items() if "pages" in k or "requests" in k})

st, body, _ = req("POST", "/generate", raw=b'{"input_ids":[1,2')
is_error(st, body, 400, "invalid_json", "truncated JSON")
st, body, _ = req("POST", "/generate", {"input_ids": []})
is_error(st, body, 400, "invalid_request", "empty prompt")
st, body, _ = req("POST", "/generate", {"input_ids": [1], "max_new_tokens": 1000000})
ok(st == 400 and "error" in json.loads(body), "prompt + max_new_tokens over the context → 400", body)
st, body, _ = req("GET", "/nope")
is_error(st, body, 404, "not_found", "unknown route")
st, body, _ = req("GET", "/generate")
is_error(st, body, 405, "method_not_allowed", "wrong method")
st, body, _ = req("POST", "/generate", raw=b'{"input_ids":[1],"x":"' + b"a" * 70000 + b'"}')
is_error(st, body, 413, "body_too_large", "body over --max-request-bytes")
st, body, _ = req("POST", "/admin/drain")
is_error(st, body, 401, "unauthorized", "/admin without a token")
st, body, _ = req("POST", "/admin/faults", {"name": "stall_loop", "rank": 0},
                  {"Authorization": "Bearer adm1n-t0ken"})
is_error(st, body, 403, "faults_disabled", "faults without --enable-fault-injection")

st, body, _ = req("POST", "/generate", {"input_ids": g["prompt_ids"], "max_new_tokens": 4,
                                         "ignore_eos": True})
ok(st == 200 and json.loads(body)["output_ids"] == g["tokens"][:4],
   "a valid request still succeeds after all that", body)

st, body, _ = req("POST", "/admin/drain", headers={"Authorization": "Bearer adm1n-t0ken"})
ok(st == 200 and json.loads(body)["draining"], "/admin/drain", body)
st, body, _ = req("GET", "/ready")
is_error(st, body, 503, "draining", "/ready while draining")
for _ in range(100):
    m = metrics()
    if m.get("tandem_drained") == 1:
        break
    time.sleep(0.05)
ok(m.get("tandem_drained") == 1 and m.get("tandem_kv_pages_free") == m.get("tandem_kv_pages_capacity")
   and m.get("tandem_kv_pages_cached") == 0,
   "drained: the prefix cache is flushed, free pages == total pages",
   {k: v for k, v in m.items() if "pages" in k or "drain" in k})
st, body, _ = req("POST", "/generate", {"input_ids": [1, 2], "max_new_tokens": 2})
ok(st == 503 and "error" in json.loads(body), "a drained worker refuses new work with 503", body)

proc.send_signal(signal.SIGTERM)
try:
    rc = proc.wait(timeout=20)
except subprocess.TimeoutExpired:
    proc.kill()
    rc = "hung"
errlog.seek(0)
ok(rc == 0, "worker exits 0 on SIGTERM (%s)" % rc, errlog.read()[-2000:])
done()
PY
