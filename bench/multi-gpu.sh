#!/bin/bash
# multi-gpu.sh — GPU tensor parallelism figures (docs/design.md §3, §9; dataplane/tp/gpu.h), ready
# for an 8-GPU host and run on whatever the machine has. From the repository root on the device
# machine, over a bundle (tools/device-bundle.sh, carried as .device-bundle/):
#   1. tests/gpu/test-cuda-tp: TP=2 host-staged vs TP=1 (§9 margin rule) on the fixtures and
#      models/demo, the one-rank NCCL communicator bit for bit, the device marks of a stuck rank,
#      the marks' cost on a bs1 decode step (A/B in one process), NCCL's one-rank all-reduce;
#   2. tests/integration/test-serving-faults.sh on --device cuda (TP=2, two ranks on GPU 0 through
#      the host-staged backend): rank_idle_path and stall_loop → /health 503 naming the rank;
#   3. with N >= 2 GPUs: the same at TP=2/4/8 on NCCL (TDM_TP_BACKEND=nccl), one rank per GPU —
#      listed under not_run when the machine has fewer GPUs.
# Writes bench/results/gpu_tp.json (1) and bench/results/multi_gpu.json (everything), each with
# git_sha (TDM_GIT_SHA, else `git rev-parse`), also copied to $OUT when set.
set -u
top=$(pwd)
bundle=$top/.device-bundle
if test ! -x "$bundle/tests/gpu/test-cuda-tp"; then
    echo "multi-gpu: $bundle/tests/gpu/test-cuda-tp missing (tools/device-bundle.sh BUILD_DIR)" >&2
    exit 2
fi
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TDM_SRCDIR=$top TDM_BUILDDIR=$bundle
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
sha=${TDM_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
work=$(mktemp -d)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
res=$top/bench/results
mkdir -p "$res"

TDM_TP_JSON=$work/tp.json timeout 400 "$bundle/tests/gpu/test-cuda-tp" >"$work/tp.log" 2>&1
tp_rc=$?
TDM_FAULTS_DEVICE=cuda TDM_TP_BACKEND=host TDM_FAULTS_ARGS="--mem-fraction-static 0.3" \
    timeout 200 sh tests/integration/test-serving-faults.sh >"$work/faults.log" 2>&1
faults_rc=$?

python3 - "$work" "$sha" "$ngpu" "$tp_rc" "$faults_rc" "$res" <<'PY'
import json, re, sys, datetime
work, sha, ngpu, tp_rc, faults_rc, res = sys.argv[1:7]
ngpu = int(ngpu or 0)
def tap(path):
    lines = open(path, errors="replace").read().splitlines()
    return [l for l in lines if re.match(r"(not )?ok \d+", l)]
try:
    tp = json.load(open(work + "/tp.json"))
except Exception as e:
    tp = {"error": "no figures from test-cuda-tp: %s" % e}
tp_tap, f_tap = tap(work + "/tp.log"), tap(work + "/faults.log")
now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
gpu_tp = {"git_sha": sha, "date": now, "gpus": ngpu, "test_rc": int(tp_rc), "figures": tp,
          "tap": tp_tap,
          "note": "TP=2 on ONE GPU through the host-staged backend (2 processes); one-rank NCCL "
                  "communicator vs TP=1 bit for bit; marks A/B = bs1 decode graph replay, same "
                  "engine, marks on/off alternated 7 times, medians"}
json.dump(gpu_tp, open(res + "/gpu_tp.json", "w"), indent=1)
not_run = []
if ngpu < 2:
    not_run += ["TP=2/4/8 vs TP=1 on NCCL (one rank per GPU): needs >= 2/4/8 GPUs",
                "all-reduce bus bandwidth across ranks (nccl-tests style): needs >= 2 GPUs",
                "prefill TP=4 on GPUs 0-3 + decode TP=4 on GPUs 4-7 through CUDA IPC: needs 8 GPUs",
                "RANK_DIVERGENCE on real NCCL (rank_idle_path, one rank per GPU): needs >= 2 GPUs"]
multi = {"git_sha": sha, "date": now, "gpus": ngpu,
         "nccl_allreduce_1rank": tp.get("nccl_allreduce_1rank"),
         "tp1_decode_through_nccl": {"bs1_replay_us_marks_on": tp.get("marks_ab", {}).get("us_marks_on"),
                                     "bs1_replay_us_no_coll": tp.get("marks_ab", {}).get("us_tp1_no_coll"),
                                     "model": "demo"},
         "tp2_one_gpu_host_staged": tp.get("models"),
         "serving_faults_cuda_tp2_host": {"rc": int(faults_rc), "tap": f_tap},
         "not_run": not_run}
json.dump(multi, open(res + "/multi_gpu.json", "w"), indent=1)
print(json.dumps({"gpu_tp_tap": tp_tap[-8:], "faults_tap": f_tap, "not_run": not_run}, indent=1))
PY
if test -n "${OUT:-}"; then
    mkdir -p "$OUT"
    cp "$res/gpu_tp.json" "$res/multi_gpu.json" "$OUT/"
    tar czf "$OUT/multi-gpu-logs.tar.gz" -C "$work" .
fi
echo "multi-gpu: test-cuda-tp rc=$tp_rc, serving faults (cuda) rc=$faults_rc, $ngpu GPU(s)"
test "$tp_rc" = 0 && test "$faults_rc" = 0
