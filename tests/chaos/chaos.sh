#!/bin/sh
# tests/chaos/chaos.sh BUILD SRC — `make chaos`: the long version of every scenario
# (tests/chaos/chaos.py --long) on a build without sanitizers; writes bench/results/chaos.json
# with git_sha, the host and the scenarios list (docs/contracts.md §h).
# The GPU run: TDM_CHAOS_DEVICE=cuda (and the other TDM_CHAOS_* knobs of chaos.py's usage;
# TDM_CHAOS_ONLY=1,2,3,4 for scenarios 1-4) stores its figures under "gpu" in the same file,
# keeping the CPU run's; BUILD may be a device bundle (tools/device-bundle.sh: its MANIFEST names
# the configure line). TDM_CHAOS_JSON: another file to write (default SRC/bench/results/chaos.json).
set -u
B=$1
S=$2
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
out=$(mktemp)
dst=${TDM_CHAOS_JSON:-$S/bench/results/chaos.json}
export UCX_TLS=tcp,sm,self UCX_NET_DEVICES=lo
"$PY" "$S/tests/chaos/chaos.py" --build "$B" --src "$S" --long --out "$out" ${TDM_CHAOS_ONLY:+--only "$TDM_CHAOS_ONLY"}
rc=$?
sha=$(git -C "$S" rev-parse HEAD 2>/dev/null || echo unknown)
# the configure line of the build (the fuzz rule's -fsanitize=fuzzer is in every Makefile)
if [ -f "$B/config.log" ]; then
    sanitized=$(grep -c '^  \$ .*configure.*--enable-sanitizers' "$B/config.log")
else
    sanitized=$(grep -c '^configure: .*--enable-sanitizers' "$B/MANIFEST" 2>/dev/null)
fi
"$PY" - "$out" "$dst" "$sha" "$rc" "${sanitized:-0}" "${TDM_CHAOS_DEVICE:-cpu}" <<'PY'
import json, os, platform, sys, time
src, dst, sha, rc, san, device = sys.argv[1:7]
d = json.load(open(src))
run = {"git_sha": sha, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "host": {"cpus": os.cpu_count(), "loadavg": os.getloadavg(), "kernel": platform.release()},
       "build": "sanitizers" if san != "0" else "release", "device": device,
       "command": "make chaos", "suite_exit": int(rc),
       "targets": {"RANK_DIVERGENCE_s": 2, "WEDGE_s": 5, "WORKER_LOST_s": 3, "restart_issued_s": 5,
                   "abort_storm_fresh_s": 0.1, "lost": 0, "wrong_tokens_served": 0},
       "scenarios": d["scenarios"]}
try:
    old = json.load(open(dst))
except (OSError, ValueError):
    old = {}
if device == "cuda":  # the CPU run stays at the top level, the GPU run goes under "gpu"
    old["gpu"] = run
    old.setdefault("git_sha", sha)
    old.setdefault("scenarios", [])
    run = old
elif "gpu" in old:
    run["gpu"] = old["gpu"]
json.dump(run, open(dst, "w"), indent=1)
print("wrote", dst)
PY
rm -f "$out"
exit $rc
