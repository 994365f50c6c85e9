#!/bin/sh
# test-demo-eval-cli.sh — the one-shot CLI on the bundled demo model:
# load + answer one held-out tool prompt (rendered prompt text, as a user would pass it), with
# the greedy answer equal to the transformers reference (the DSML call), in under 2 s wall time
# on a release build (bench numbers). Under `make check` (sanitizer builds, a shared machine):
# the CPU time (user+sys, both engine threads) must fit 2 s of this machine's cores, and the
# best-of-3 wall time gets docs/design.md §7's 2x slack (TDM_DEMO_CLI_LIMIT_S overrides) unless the
# load average exceeds the core count, when a wall clock measures the neighbours, not us.
# TAP; timing and checks by python3 (standard library only).
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/tap-lib.sh"
tap_need_exec "$BIN"
export TDM_ONESHOT_BIN="$BIN" TDM_SRC="$SRC"
exec python3 - <<'PY'
import json, os, resource, subprocess, sys, time

BIN, SRC = os.environ["TDM_ONESHOT_BIN"], os.environ["TDM_SRC"]
rows = [json.loads(l) for l in open(os.path.join(SRC, "tests/fixtures/demo/heldout.jsonl"))]
row = next(r for r in rows if r["kind"] == "tool")
print("1..4")
times, cpus, out = [], [], None
for _ in range(3):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([BIN, "--model-path", os.path.join(SRC, "models/demo"),
                        "--prompt", row["prompt"], "--max-tokens", "96", "--json"],
                       capture_output=True, text=True)
    times.append(time.monotonic() - t0)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    out = p
ok = out.returncode == 0
print("%s 1 - tandem-worker exits 0" % ("ok" if ok else "not ok"))
if not ok:
    print("# " + out.stderr.replace("\n", "\n# "))
res = json.loads(out.stdout.strip().splitlines()[-1]) if ok else {}
# --prompt adds no BOS for this tokenizer (its template text carries <|bos|>): ids as reference.
same = res.get("ids") == row["reference"]["ids"]
print("%s 2 - greedy answer equals the reference: %s" % ("ok" if same else "not ok",
                                                          json.dumps(res.get("text"))))
best, ncpu = min(times), os.cpu_count() or 1
limit = float(os.environ.get("TDM_DEMO_CLI_LIMIT_S", "4.0"))
print("%s 3 - load + answer CPU time %.2f s (best of 3: %s) < 2 s x %d cores" % (
    "ok" if min(cpus) < 2.0 * ncpu else "not ok", min(cpus), ", ".join("%.2f" % t for t in cpus),
    ncpu))
load = os.getloadavg()[0]
walls = ", ".join("%.2f" % t for t in times)
if load > ncpu and "TDM_DEMO_CLI_LIMIT_S" not in os.environ:
    print("ok 4 # SKIP wall %.2f s (best of 3: %s) not asserted: load average %.1f > %d cores" % (
        best, walls, load, ncpu))
else:
    print("%s 4 - load + answer in %.2f s wall (best of 3: %s) < %.1f s" % (
        "ok" if best < limit else "not ok", best, walls, limit))
PY
