"""tests/chaos/chaoslib.py — the chaos suite's stack and measurements (docs/design.md §5, the
failure scenarios of tests/chaos/chaos.py).

Stack: a private PostgreSQL cluster (tdm-pg), tandemd on a port picked beforehand (so a
restarted tandemd comes back where the workers post telemetry) with its supervisor and
`--alert-policy all=auto`, a prefill group and a decode group at TP=2 on CPU (the bundled
3.2M-parameter demo model: its greedy answers differ per prompt), faults armed through tandemd's
audited route (POST /api/v1/groups/{g}/faults, docs/contracts.md §e).
On the GPU (device "cuda"): every group `device = cuda` with a share of the free device memory
(mem_fraction_static), `cuda_backend` when the build has backend-cuda.so (a --enable-cuda-module
build), TP as asked (1 on one GPU); the PostgreSQL programs (initdb, pg_ctl, postgres, psql) from
pg_bindir when given (a machine without the server: the Debian packages unpacked with dpkg -x).

Load: client threads sending seeded greedy streaming chat requests through tandemd's /v1 router;
every answer is compared with the fault-free golden of the same seeded request.

Figures come from records (Postgres): detect_s = the alert's opened_us minus the fault action's
finished_us (when the fault took effect); recovered = the group /ready and a fresh request served
within 30 s of the alert; lost = a request with neither tokens nor an error within 60 s (a stream
that never ends is lost too); wrong_tokens_served = an answer, or the tokens streamed before an
error, that is not the golden (or a prefix of it)."""
import http.client as hc
import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time

MODEL_NAME = "chaos"
WORDS = ("the weather in paris is sunny and warm today while the river flows under old bridges "
         "a cat sleeps near the window of a small house as the train leaves the station at noon "
         "numbers one two three four five six seven eight nine ten").split()

_n = [0]
_fail = [0]


def tap(cond, msg, diag=""):
    _n[0] += 1
    print("%sok %d - %s" % ("" if cond else "not ", _n[0], msg), flush=True)
    if not cond:
        _fail[0] += 1
        for line in str(diag).splitlines()[-15:]:
            print("#   " + line, flush=True)
    return cond


def note(msg):
    print("# " + msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def now_us():
    return int(time.time() * 1e6)


def stop_launchers(pids, limit=15):
    """Stop group launchers that tandemd no longer supervises: SIGCONT (one may be stopped) and
    SIGTERM (each forwards it to its ranks), then SIGKILL to the process groups still there after
    `limit` seconds."""
    for p in pids:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(p, sig)
            except OSError:
                pass
    wait_until(lambda: not any(os.path.exists("/proc/%d" % p) for p in pids), limit, 0.2)
    for p in pids:
        try:
            os.killpg(p, signal.SIGKILL)
        except OSError:
            pass


def kv_pool_bytes(model, pages, page_size=16):
    """kv_cpu_bytes of a CPU KV pool of `pages` pages on the checkpoint in `model` (bf16 K and V
    of every layer and KV head): pools sized in pages whatever the demo model's shape."""
    with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    kvh = c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return pages * page_size * c["num_hidden_layers"] * 2 * kvh * hd * 2


def wait_until(fn, limit, step=0.1):
    deadline = time.time() + limit
    while True:
        v = fn()
        if v or time.time() >= deadline:
            return v
        time.sleep(step)


def http(port, method, path, body=None, headers=None, timeout=30, raw=None, host="127.0.0.1"):
    """(status, text); -1 and the error on a connection failure."""
    c = hc.HTTPConnection(host, port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        return r.status, r.read().decode(errors="replace")
    except (OSError, hc.HTTPException) as e:
        return -1, str(e)
    finally:
        c.close()


class Stack:
    def __init__(self, build, src, tmp, tp=2, model=None, extra_groups="", device="cpu",
                 cuda_backend="", mem_fraction=0.05, pg_bindir=""):
        self.build, self.src, self.tmp, self.tp = build, src, tmp, tp
        self.device, self.cuda_backend, self.mem_fraction = device, cuda_backend, mem_fraction
        self.pg_bindir = pg_bindir
        self.model = model or os.path.join(src, "models/demo")
        self.extra_groups = extra_groups
        self.listen_host = "127.0.0.1"  # tandemd's --listen host (scenario 8: 0.0.0.0)
        self.cp_port = free_port()
        self.boot_port = free_port()
        self.ports = {g: free_port() for g in ("pre", "dec", "hc")}
        self.tpid = None
        self.pg = {}
        self.state = os.path.join(tmp, "state")
        os.makedirs(self.state, exist_ok=True)

    # ---- PostgreSQL
    def pg_start(self):
        r = subprocess.run([os.path.join(self.build, "tdm-pg"), "start",
                            os.path.join(self.tmp, "pg")] +
                           (["--bindir", self.pg_bindir] if self.pg_bindir else []),
                           capture_output=True, text=True)
        for line in r.stdout.splitlines():
            m = re.match(r"(?:export )?(TDM_TEST_PG\w+)=['\"]?([^'\"]*)", line)
            if m:
                self.pg[m.group(1)] = m.group(2)
        return r.returncode == 0 and "TDM_TEST_PGHOST" in self.pg, r.stderr

    def pg_stop(self):
        return subprocess.run([os.path.join(self.build, "tdm-pg"), "stop",
                               os.path.join(self.tmp, "pg")], capture_output=True).returncode == 0

    def pg_destroy(self):
        subprocess.run([os.path.join(self.build, "tdm-pg"), "destroy", os.path.join(self.tmp, "pg")],
                       capture_output=True)

    def dsn(self):
        return "host=%s port=%s user=%s dbname=postgres connect_timeout=2" % (
            self.pg["TDM_TEST_PGHOST"], self.pg["TDM_TEST_PGPORT"], self.pg["TDM_TEST_PGUSER"])

    def sql(self, q):
        """Rows as lists of strings ([] on an error)."""
        psql = os.path.join(self.pg_bindir, "psql") if self.pg_bindir else "psql"
        r = subprocess.run([psql, "-X", "-q", "-tA", "-F", "\t", "-h", self.pg["TDM_TEST_PGHOST"],
                            "-p", self.pg["TDM_TEST_PGPORT"], "-U", self.pg["TDM_TEST_PGUSER"],
                            "-d", "postgres", "-c", q], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return []
        return [line.split("\t") for line in r.stdout.splitlines() if line]

    def sql1(self, q, default=None):
        rows = self.sql(q)
        return rows[0][0] if rows and rows[0] and rows[0][0] != "" else default

    # ---- tandemd and its groups
    def device_ini(self, cpu_kv_bytes, gpu_extra=""):
        """A group's device lines: the CPU's KV pool bytes, or the GPU's share of free memory."""
        if self.device != "cuda":
            return "device = cpu\nkv_cpu_bytes = %d\n" % cpu_kv_bytes
        return ("device = cuda\nmem_fraction_static = %g\n" % self.mem_fraction +
                ("cuda_backend = %s\n" % self.cuda_backend if self.cuda_backend else "") +
                gpu_extra)

    def worker_device_args(self):
        """The same for a tandem-worker command line."""
        if self.device != "cuda":
            return ["--device", "cpu"]
        return (["--device", "cuda", "--mem-fraction-static", "%g" % self.mem_fraction] +
                (["--cuda-backend", self.cuda_backend] if self.cuda_backend else []))

    def groups_ini(self, hicache=False):
        # chunked prefill of 256 tokens bounds an iteration on a 2-core sanitizer build: a
        # 60-stream storm's 2048-token chunk took over WEDGE's 3 s there
        common = ("model_path = %s\nserved_model_name = %s\n" % (self.model, MODEL_NAME) +
                  self.device_ini(8388608) + "chunked_prefill_size = 256\n"
                  "tp_size = %d\nenable_fault_injection = true\n" % self.tp)
        # each group on a port of its own, kept across restarts (docs/groups.md "Ports")
        return ("[group.pre]\nport = %d\n" % self.ports["pre"] + common +
                "disaggregation_mode = prefill\ndisaggregation_bootstrap_port = %d\npair = dec\n"
                % self.boot_port +
                "[group.dec]\nport = %d\n" % self.ports["dec"] + common +
                "disaggregation_mode = decode\ndisaggregation_prefill_addr = 127.0.0.1:%d\n"
                "pair = pre\n" % self.boot_port +
                # a colocated group with the HiCache host tier under a small device pool
                # (scenario 3), on the demo model as tests/integration/test-hicache.sh (on the
                # GPU one slot, so a 128-page pool, as tests/gpu/test-worker-cuda.sh)
                "[group.hc]\nport = %d\n" % self.ports["hc"] +
                "model_path = %s\nserved_model_name = chaos-hc\n" % os.path.join(
                    self.src, "models/demo") +
                self.device_ini(kv_pool_bytes(os.path.join(self.src, "models/demo"), 32),
                                "max_running_requests = 1\nhicache_ratio = 4\n") +
                "enable_fault_injection = true\n"
                "enable_hierarchical_cache = true\nhicache_verify_rate = 1\nhicache_poison = true\n"
                + self.extra_groups)

    def tandemd_start(self, policy="all=auto"):
        with open(os.path.join(self.tmp, "groups.ini"), "w") as f:
            f.write(self.groups_ini())
        ready = os.path.join(self.tmp, "tandemd.ready")
        if os.path.exists(ready):
            os.unlink(ready)
        log = open(os.path.join(self.tmp, "tandemd.log"), "a")
        env = dict(os.environ, TDM_CPU_THREADS="1")
        p = subprocess.Popen([os.path.join(self.build, "tandemd"), "--listen",
                              "%s:%d" % (self.listen_host, self.cp_port), "--state-dir", self.state,
                              "--pg-dsn", self.dsn(), "--ready-file", ready,
                              "--groups-config", os.path.join(self.tmp, "groups.ini"),
                              "--worker-bin", os.path.join(self.build, "tandem-worker"),
                              "--alert-policy", policy],
                             stdout=log, stderr=log, env=env, start_new_session=True)
        self.tpid = p
        ok = wait_until(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0
                        or p.poll() is not None, 30)
        self.token = open(os.path.join(self.state, "admin.token")).read().strip()
        return bool(ok) and p.poll() is None

    def tandemd_kill(self):
        if self.tpid:
            self.tpid.kill()
            self.tpid.wait()
            self.tpid = None

    def tandemd_stop(self):
        if self.tpid:
            self.tpid.terminate()
            try:
                self.tpid.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.tpid.kill()
            self.tpid = None

    def api(self, method, path, body=None, token=None, timeout=60):
        h = {"Authorization": "Bearer " + (token if token is not None else self.token)}
        st, text = http(self.cp_port, method, path, body, h, timeout=timeout)
        try:
            return st, json.loads(text)
        except ValueError:
            return st, text

    def groups(self):
        st, j = self.api("GET", "/api/v1/status", timeout=5)
        return {g["name"]: g for g in j.get("groups", [])} if st == 200 and isinstance(j, dict) else {}

    def ready(self, names=("pre", "dec", "hc")):
        g = self.groups()
        return all(n in g and g[n].get("ready") and g[n].get("state") == "running" for n in names)

    def admin_url(self, name):
        return self.groups().get(name, {}).get("admin_url", "")

    def worker_port(self, name):
        m = re.search(r":(\d+)$", self.admin_url(name) or "")
        return int(m.group(1)) if m else 0

    def launcher_pid(self, name):
        try:
            return json.load(open(os.path.join(self.state, "groups", name, "record.json")))["pid"]
        except (OSError, ValueError, KeyError):
            return 0

    def fault(self, group, body):
        """(http status, the action's result) of tandemd's audited fault route."""
        return self.api("POST", "/api/v1/groups/%s/faults" % group, body)

    def action_row(self, action_id):
        r = self.sql("SELECT ts_us, finished_us, outcome FROM actions WHERE id = %d" % int(action_id))
        return (int(r[0][0]), int(r[0][1] or 0), r[0][2]) if r else None

    def alert_after(self, kind, group, since_us):
        """(id, opened_us, evidence) of the first stored alert of kind on group opened at or after
        since_us, or None."""
        r = self.sql("SELECT id, opened_us, evidence::text FROM alerts WHERE kind = '%s' AND "
                     "group_name = '%s' AND opened_us >= %d ORDER BY opened_us LIMIT 1"
                     % (kind, group, since_us))
        return (int(r[0][0]), int(r[0][1]), json.loads(r[0][2])) if r else None

    def actions_after(self, since_us, actor_prefix="policy:"):
        return self.sql("SELECT id, actor, action, target, outcome, ts_us, coalesce(finished_us,0) "
                        "FROM actions WHERE ts_us >= %d AND actor LIKE '%s%%' ORDER BY ts_us"
                        % (since_us, actor_prefix))


class Load:
    """Client threads sending seeded greedy streaming chat requests through tandemd's router."""

    def __init__(self, port, n_prompts=12, max_tokens=16, seed=7, model=MODEL_NAME):
        self.port = port
        self.model = model
        rnd = random.Random(seed)
        self.prompts = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randrange(4, 14)))
                        for _ in range(n_prompts)]
        self.max_tokens = max_tokens
        self.golden = {}
        self.records = []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.paused = threading.Event()
        self.threads = []
        self.inflight = {}

    def body(self, k, max_tokens=None):
        return {"model": self.model, "temperature": 0, "stream": True,
                "max_tokens": max_tokens or self.max_tokens,
                "messages": [{"role": "user", "content": self.prompts[k]}]}

    def one(self, k, max_tokens=None, limit=60.0):
        """One streaming request: a record {k, t0, t_first, t_end, text, err, status, lost}."""
        rec = {"k": k, "t0": time.time(), "t_first": None, "t_end": None, "text": "", "err": None,
               "status": None, "lost": False, "done": False}
        deadline = rec["t0"] + limit
        c = hc.HTTPConnection("127.0.0.1", self.port, timeout=limit)
        try:
            c.request("POST", "/v1/chat/completions", body=json.dumps(self.body(k, max_tokens)),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            rec["status"] = r.status
            if r.status != 200:
                rec["err"] = "HTTP %d %s" % (r.status, r.read(300).decode(errors="replace"))
            else:
                while True:
                    c.sock.settimeout(max(0.1, deadline - time.time()))
                    line = r.fp.readline()
                    if not line:
                        if not rec["done"] and rec["err"] is None:
                            rec["err"] = "stream closed without [DONE]"
                        break
                    line = line.decode(errors="replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        rec["done"] = True
                        break
                    try:
                        o = json.loads(data)
                    except ValueError:
                        continue
                    if "error" in o:
                        rec["err"] = json.dumps(o["error"])[:300]
                        continue
                    for ch in o.get("choices", []):
                        t = (ch.get("delta") or {}).get("content")
                        if t:
                            if rec["t_first"] is None:
                                rec["t_first"] = time.time()
                            rec["text"] += t
        except socket.timeout:
            rec["lost"] = True
        except (OSError, hc.HTTPException) as e:
            if rec["err"] is None:
                rec["err"] = "connection: %s" % e
        finally:
            c.close()
        rec["t_end"] = time.time()
        if rec["err"] is None and not rec["done"] and not rec["lost"]:
            rec["lost"] = True
        return rec

    def make_goldens(self):
        for k in range(len(self.prompts)):
            r = self.one(k)
            if r["err"] or not r["done"]:
                return False, "prompt %d: %s" % (k, r["err"])
            self.golden[k] = r["text"]
        return True, ""

    def wrong(self, rec):
        g = self.golden.get(rec["k"])
        if g is None or rec["lost"]:
            return False
        if rec["err"] is None and rec["done"]:
            return rec["text"] != g
        return not g.startswith(rec["text"])  # tokens before an error: a prefix of the golden

    def _run(self, tid):
        rnd = random.Random(1000 + tid)
        while not self.stop_ev.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            k = rnd.randrange(len(self.prompts))
            key = object()
            with self.lock:
                self.inflight[key] = time.time()
            rec = self.one(k)
            with self.lock:
                self.records.append(rec)
                del self.inflight[key]
            if rec["err"]:
                time.sleep(0.2)  # a client backs off after an error

    def start(self, n):
        for i in range(n):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=70)

    def window(self, t_from, t_to):
        """Records that started in [t_from, t_to] (wall seconds)."""
        with self.lock:
            return [r for r in self.records if t_from <= r["t0"] <= t_to]

    def fresh(self, limit=30, max_tokens=None):
        """A fresh request served with the golden (of its first max_tokens tokens: a prefix):
        the time it took, or None."""
        k = 0
        r = self.one(k, max_tokens=max_tokens, limit=limit)
        if r["err"] is None and r["done"] and (self.golden.get(k) or "").startswith(r["text"]) \
                and (max_tokens or r["text"] == self.golden.get(k)):
            return r["t_end"] - r["t0"]
        return None
