#!/bin/sh
# tests/chaos/chaos.sh BUILD SRC — `make chaos`: the long version of every scenario
# (tests/chaos/chaos.py --long) on a build without sanitizers; writes bench/results/chaos.json
# with git_sha, the host and the scenarios list (docs/contracts.md §h).
set -u
B=$1
S=$2
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
out=$(mktemp)
export UCX_TLS=tcp,sm,self UCX_NET_DEVICES=lo
"$PY" "$S/tests/chaos/chaos.py" --build "$B" --src "$S" --long --out "$out" ${TDM_CHAOS_ONLY:+--only "$TDM_CHAOS_ONLY"}
rc=$?
sha=$(git -C "$S" rev-parse HEAD 2>/dev/null || echo unknown)
# the configure line of the build (the fuzz rule's -fsanitize=fuzzer is in every Makefile)
sanitized=$(grep -c '^  \$ .*configure.*--enable-sanitizers' "$B/config.log" 2>/dev/null)
"$PY" - "$out" "$S/bench/results/chaos.json" "$sha" "$rc" "$sanitized" <<'PY'
import json, os, platform, sys, time
src, dst, sha, rc, san = sys.argv[1:6]
d = json.load(open(src))
d = {"git_sha": sha, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
     "host": {"cpus": os.cpu_count(), "loadavg": os.getloadavg(), "kernel": platform.release()},
     "build": "sanitizers" if san != "0" else "release",
     "command": "make chaos", "suite_exit": int(rc),
     "targets": {"RANK_DIVERGENCE_s": 2, "WEDGE_s": 5, "WORKER_LOST_s": 3, "restart_issued_s": 5,
                 "abort_storm_fresh_s": 0.1, "lost": 0, "wrong_tokens_served": 0},
     "scenarios": d["scenarios"]}
json.dump(d, open(dst, "w"), indent=1)
print("wrote", dst)
PY
rm -f "$out"
exit $rc
