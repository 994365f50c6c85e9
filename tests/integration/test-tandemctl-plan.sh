#!/bin/sh
# test-tandemctl-plan.sh — `tandemctl plan` without a server or a GPU:
#  - `--gpus 8` prints exactly the committed golden (text and --json): prefill TP=4 on GPUs 0-3,
#    decode TP=4 on GPUs 4-7, one P/D pair, units, INI files and enable lines;
#  - every INI it emits (for 2, 4, 8 GPUs, smaller --tp, explicit GPU ranges) is resolved by
#    tandem-worker's own config loader, run with the ExecStart arguments of
#    packaging/systemd/tandem-worker@.service (--config swapped for the emitted file) plus
#    --print-config: each key comes from the file and resolves to the expected value;
#  - the groups of a plan use disjoint GPUs, ports and bootstrap ports and cover their side; each
#    INI lies where the unit's --config reads it; each decode group names a prefill group's
#    bootstrap address (the worker refuses decode without one);
#  - bad layouts and values exit 2 with a message naming the rule, printing nothing on stdout.
# TAP; the checks are done by python3 (standard library only).
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${TDM_BUILDDIR:-.}
for b in tandemctl tandem-worker; do
    if [ ! -x "$BUILD/$b" ]; then
        echo "Bail out! $BUILD/$b not built"
        exit 1
    fi
done
export TDM_CTL="$BUILD/tandemctl" TDM_WORKER="$BUILD/tandem-worker" TDM_SRC="$SRC"
exec python3 - <<'PY'
import json, os, shlex, subprocess, tempfile

CTL, WORKER, SRC = os.environ["TDM_CTL"], os.environ["TDM_WORKER"], os.environ["TDM_SRC"]
GOLD = os.path.join(SRC, "tests/fixtures/plan")
MODEL = "/srv/models/Llama-3.1-8B-Instruct"
n = failed = 0


def ok(cond, msg, diag=None):
    global n, failed
    n += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (n, msg))
    if not cond:
        failed += 1
        for line in str(diag if diag is not None else "").splitlines():
            print("# " + line)
    return cond


def plan(*args):
    # no token, no server: plan must not need either
    env = {k: v for k, v in os.environ.items() if not k.startswith("TDM_")}
    env["TDM_URL"] = "http://127.0.0.1:1"
    env["TDM_STATE_DIR"] = "/nonexistent"
    return subprocess.run([CTL, "plan", *args], capture_output=True, text=True, env=env)


# The unit's own ExecStart, so the test resolves the INI the way systemd would start the worker.
unit = open(os.path.join(SRC, "packaging/systemd/tandem-worker@.service")).read()
exec_start = [l for l in unit.splitlines() if l.startswith("ExecStart=")]
ok(len(exec_start) == 1, "tandem-worker@.service has one ExecStart")
EXEC = shlex.split(exec_start[0][len("ExecStart="):])
UNIT_CONFIG = EXEC[EXEC.index("--config") + 1]  # /etc/tandem/workers/%i.conf
CONF_DIR = "/etc/tandem"
tmp = tempfile.mkdtemp(prefix="tdm-plan-")


def resolve(group):
    """tandem-worker --config <emitted INI> ... --print-config, as the unit runs it."""
    path = os.path.join(tmp, "worker-%s.conf" % group["name"])
    with open(path, "w") as f:
        f.write(group["ini"])
    argv = [WORKER]
    args = [a.replace("%i", group["name"]) for a in EXEC[1:]]
    for i, a in enumerate(args):
        if i > 0 and args[i - 1] == "--config":
            a = path
        elif i > 0 and args[i - 1] in ("--override-config", "--spool-dir"):
            a = os.path.join(tmp, "absent", os.path.basename(a))
        argv.append(a)
    r = subprocess.run(argv + ["--print-config"], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if not k.startswith("TDM_")})
    return r, argv


def same(resolved, text):
    if isinstance(resolved, bool):
        return resolved == (text in ("true", "1", "yes", "on"))
    if isinstance(resolved, (int, float)):
        return abs(float(resolved) - float(text)) < 1e-12
    return resolved == text


def check_plan(args, label, expect_groups=None):
    global CONF_DIR
    CONF_DIR = args[args.index("--conf-dir") + 1] if "--conf-dir" in args else "/etc/tandem"
    r = plan(*args, "--json")
    if not ok(r.returncode == 0, "%s: plan exits 0" % label, r.stderr):
        return None
    doc = json.loads(r.stdout)
    groups = doc["groups"]
    if expect_groups is not None:
        ok([(g["name"], g["gpus"]) for g in groups] == expect_groups,
           "%s: groups and GPUs %s" % (label, expect_groups), [(g["name"], g["gpus"]) for g in groups])
    ok(doc["commands"] == ["systemctl enable --now %s" % g["unit"] for g in groups]
       and [g["unit"] for g in groups] == ["tandem-worker@%s.service" % g["name"] for g in groups],
       "%s: one unit and one enable line per group, prefill first" % label, doc["commands"])
    gpus = [x for g in groups for x in g["gpus"]]
    ports = [g["config"]["port"] for g in groups]
    boots = [g["config"]["disaggregation_bootstrap_port"] for g in groups if g["mode"] == "prefill"]
    ok(len(set(gpus)) == len(gpus) and len(set(ports)) == len(ports) and len(set(boots)) == len(boots),
       "%s: groups share no GPU, HTTP port or bootstrap port" % label, (gpus, ports, boots))
    addrs = [g["config"].get("disaggregation_prefill_addr") for g in groups if g["mode"] == "decode"]
    ok(addrs and all(a and a.startswith("127.0.0.1:") and a.split(":")[1] in boots for a in addrs),
       "%s: every decode group bootstraps from one of this plan's prefill groups" % label,
       (addrs, boots))
    ok(all(g["config_path"] == UNIT_CONFIG.replace("%i", g["name"]).replace("/etc/tandem", CONF_DIR)
           for g in groups), "%s: each INI lies where tandem-worker@NAME.service reads it" % label,
       [g["config_path"] for g in groups])
    for g in groups:
        res, argv = resolve(g)
        if not ok(res.returncode == 0, "%s: tandem-worker accepts %s's INI" % (label, g["name"]),
                  " ".join(argv) + "\n" + res.stderr):
            continue
        params = json.loads(res.stdout)["params"]
        bad = [(k, v, params.get(k)) for k, v in g["config"].items()
               if k not in params or params[k]["source"] != "file" or not same(params[k]["value"], v)]
        ok(not bad, "%s: %s resolves every emitted key from the file to its value (%d keys)"
           % (label, g["name"], len(g["config"])), bad)
        first = g["gpus"][0]
        ok(params["tp_size"]["value"] == g["tp"] == len(g["gpus"])
           and params["base_gpu_id"]["value"] == first
           and g["gpus"] == list(range(first, first + g["tp"]))
           and params["disaggregation_mode"]["value"] == g["mode"]
           and params["group"]["value"] == g["name"]
           and params["device"]["value"] == "cuda",
           "%s: %s is TP=%d from GPU %d in %s mode" % (label, g["name"], g["tp"], first, g["mode"]))
    return doc


# --- golden: the seed's layout -------------------------------------------------------------
for ext, extra in (("txt", []), ("json", ["--json"])):
    r = plan("--gpus", "8", "--model", MODEL, *extra)
    want = open(os.path.join(GOLD, "gpus8." + ext)).read()
    ok(r.returncode == 0 and r.stdout == want and r.stderr == "",
       "--gpus 8%s equals tests/fixtures/plan/gpus8.%s" % (" --json" if extra else "", ext),
       r.stderr + "\n--- got:\n" + r.stdout)
txt = plan("--gpus", "8", "--model", MODEL).stdout
doc = json.loads(plan("--gpus", "8", "--model", MODEL, "--json").stdout)
ok(all(("## unit %s\n## file %s\n%s" % (g["unit"], g["config_path"], g["ini"])) in txt
       for g in doc["groups"]), "text and --json carry the same INI files")

d8 = check_plan(["--gpus", "8", "--model", MODEL], "gpus 8",
                [("prefill", [0, 1, 2, 3]), ("decode", [4, 5, 6, 7])])
if d8:
    p, d = d8["groups"]
    ok(p["config_path"] == "/etc/tandem/workers/prefill.conf"
       and d["config_path"] == "/etc/tandem/workers/decode.conf",
       "the INI paths are the ones tandem-worker@.service reads")
    ok(d["config"]["disaggregation_prefill_addr"] == "127.0.0.1:8998",
       "decode's prefill address is the prefill group's bootstrap port on this host")
    ok(p["config"]["port"] == "30001" and d["config"]["port"] == "30000"
       and p["config"]["disaggregation_bootstrap_port"] == "8998"
       and "disaggregation_bootstrap_port" not in d["config"],
       "docs/contracts.md §b ports: prefill 30001 + bootstrap 8998, decode 30000")
    ok(p["config"]["model_path"] == MODEL == d["config"]["model_path"]
       and p["config"]["kv_cache_dtype"] == d["config"]["kv_cache_dtype"],
       "both sides serve the same model with the same (pair-wide) KV dtype")

check_plan(["--gpus", "2", "--model", MODEL], "gpus 2", [("prefill", [0]), ("decode", [1])])
check_plan(["--gpus", "4", "--model", MODEL], "gpus 4", [("prefill", [0, 1]), ("decode", [2, 3])])
check_plan(["--gpus", "8", "--tp", "2", "--model", MODEL], "gpus 8 tp 2",
           [("prefill-0", [0, 1]), ("prefill-1", [2, 3]), ("decode-0", [4, 5]), ("decode-1", [6, 7])])
check_plan(["--gpus", "8", "--prefill-gpus", "0-1", "--decode-gpus", "2-7", "--tp", "2",
            "--model", MODEL, "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.8",
            "--control-plane", "http://10.0.0.5:8470", "--conf-dir", "/etc/tandem-b"],
           "overrides", [("prefill", [0, 1]), ("decode-0", [2, 3]), ("decode-1", [4, 5]),
                         ("decode-2", [6, 7])])
check_plan(["--prefill-gpus", "4-7", "--decode-gpus", "0-3", "--model", MODEL], "ranges only",
           [("prefill", [4, 5, 6, 7]), ("decode", [0, 1, 2, 3])])

# The resolver really checks: an INI with a key the worker lacks is refused by tandem-worker.
res, _ = resolve({"name": "bogus", "ini": "[worker]\ntp_size = 4\npipeline_parallel_size = 2\n"})
ok(res.returncode != 0 and "pipeline_parallel_size" in res.stderr,
   "control: tandem-worker refuses an INI with an unknown key", res.stderr)

# --- errors: exit 2, a message naming the rule, nothing on stdout ---------------------------
errors = [
    (["--gpus", "1", "--model", MODEL], "at least 2"),
    (["--gpus", "0", "--model", MODEL], "at least 2"),
    (["--gpus", "-4", "--model", MODEL], "at least 2"),
    (["--gpus", "eight", "--model", MODEL], "not an integer"),
    (["--gpus", "5", "--model", MODEL], "does not split"),
    (["--gpus", "8", "--tp", "3", "--model", MODEL], "--tp 3 does not divide the 4 prefill GPUs"),
    (["--gpus", "8", "--tp", "8", "--model", MODEL], "--tp 8 does not divide"),
    (["--gpus", "8", "--tp", "0", "--model", MODEL], "outside 1..64"),
    (["--gpus", "8"], "--model PATH is required"),
    (["--model", MODEL], "give --gpus N"),
    (["--gpus", "8", "--model", MODEL, "--prefill-gpus", "0-4"], "overlap"),
    (["--gpus", "8", "--model", MODEL, "--decode-gpus", "6-9"], "outside the host's 8 GPUs"),
    (["--gpus", "8", "--model", MODEL, "--decode-gpus", "7-4"], "runs backwards"),
    (["--gpus", "8", "--model", MODEL, "--prefill-gpus", "0-2", "--decode-gpus", "4-7", "--tp", "2"],
     "--tp 2 does not divide the 3 prefill GPUs (0-2)"),
    (["--gpus", "8", "--model", MODEL, "--mem-fraction-static", "1.5"], "mem_fraction_static"),
    (["--gpus", "8", "--model", MODEL, "--kv-cache-dtype", "fp4"], "kv_cache_dtype"),
    (["--gpus", "8", "--model", "/srv/a\nport = 1"], "control characters"),
    (["--gpus", "8", "--model", MODEL, "--pp", "2"], "unknown option --pp"),
    (["--gpus", "8", "--model"], "--model needs a value"),
    (["--gpus", "200", "--model", MODEL], "exceed --tp-size's limit of 64"),
    ([], "usage: tandemctl plan"),
]
for args, want in errors:
    r = plan(*args)
    ok(r.returncode == 2 and want in r.stderr and r.stdout == "",
       "error: plan %s -> exit 2, \"%s\"" % (" ".join(args).replace("\n", "\\n"), want),
       "rc=%d stdout=%r stderr=%r" % (r.returncode, r.stdout, r.stderr))

print("1..%d" % n)
raise SystemExit(1 if failed else 0)
PY
