#!/bin/bash
# device-verify.sh — the GPU verification of a tree in as few device calls as the budget allows
# (docs/cuda.md "Verifying a tree on the device"). Two halves:
#
#   device-verify.sh prepare BUILD_DIR      here: BUILD_DIR is a configured and built tree WITH
#       CUDA and WITHOUT sanitizers. Makes .dev-verify/ (git-ignored): bundle.tar.xz
#       (tools/device-bundle.sh BUILD_DIR, its 40 MiB limit raised since xz shrinks it about 4x)
#       and pg15.tar.xz (tools/device-postgres.sh pack; reused when present). Prints the carry
#       list and the commands for `run`; stops when .dev-verify is over the 64 MiB carry limit.
#   device-verify.sh run PHASE...           there (from the repository root, .dev-verify carried):
#       unpacks the bundle into .device-bundle, starts nothing itself (each phase starts what it
#       needs: the private PostgreSQL through tdm-pg from the unpacked Debian binaries), then runs
#       each PHASE under its own time limit, in the order given:
#         tests    every GPU test, plain and under compute-sanitizer memcheck (tools/device-run.sh,
#                  benchmarks left out);
#         detect   bench/gpu-tp-detect.py: RANK_DIVERGENCE and WEDGE on a TP=2 GPU group through
#                  tandemd's API, /health 503 naming the rank (→ gpu_tp_detect.json);
#         chaos    tests/chaos/chaos.py --device cuda --tp 2 --only 1,2,3,4 --long (→ chaos_gpu.json,
#                  merged later under chaos.json's "gpu");
#         decode   bench/gpu_decode + bench/gpu-decode.sh (the engine and its torch anchors);
#         serving  bench/gpu-serving.sh (→ gpu_serving.json) at the sizes of TDM_SERVE_*; with
#                  decode in the same call, bench/serving_goals.py then puts that call's engine
#                  goals into gpu_serving.json ("engine_goals");
#         price    bench/gpu-mixed-price.sh (→ gpu_mixed_price.json): a mixed step's fixed cost and
#                  price per prompt token, graphs against eager launches, flash-only; page orders,
#                  ragged contexts and balanced attention splits (16 engine runs: 240 s);
#         profile  bench/gpu-step-profile.sh (→ gpu_step_profile.json): one decode or mixed step's
#                  kernels under ncu, by name and role;
#         tp       bench/multi-gpu.sh (test-cuda-tp, the serving faults on a TP=2 GPU group, NCCL's
#                  one-rank figures; → gpu_tp.json, multi_gpu.json);
#         demo     a demo-model candidate trained with torch (tools/demo/device_run.sh, variant
#                  TDM_VERIFY_DEMO_VARIANT (5), TDM_VERIFY_DEMO_SECONDS (400) in all, the model in
#                  15 MiB pieces under $OUT/demo): a call of its own (time, and the files that
#                  come back).
#       Every result file and log goes under $OUT; summary.txt lists each phase's exit status and
#       seconds. Exit status 0 only when every phase passed. Env: TDM_VERIFY_LIMIT_<PHASE>
#       (seconds; defaults below), TDM_VERIFY_MEM_FRACTION (0.05 per worker), TDM_VERIFY_DEVICE
#       (cuda; cpu runs the detect and chaos phases on the CPU: a rehearsal of the call here),
#       TDM_VERIFY_TESTS_SKIP (the tests phase's TDM_DEVICE_SKIP regex; default "^bench ").
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$top/.dev-verify

die() {
    echo "device-verify: $*" >&2
    exit 2
}

prepare() {
    local build=${1:-}
    if test -z "$build" || test ! -f "$build/Makefile"; then
        die "usage: $0 prepare BUILD_DIR"
    fi
    grep -q '^#define TDM_HAVE_CUDA 1' "$build/config.h" 2>/dev/null ||
        die "$build was configured without CUDA: nothing to verify on the device"
    if grep -q '^TDM_SAN_CFLAGS = .*fsanitize' "$build/Makefile"; then
        die "$build has sanitizers: compute-sanitizer and the CUDA driver need a plain build"
    fi
    # An nvcc object without its dependency file was compiled before the rule wrote one (nvcc -MD):
    # make cannot know which headers it read, so a changed struct leaves it stale (a bundle with
    # such objects crashed every engine test on the device). Refuse it rather than spend a call.
    local cu o
    for cu in "$top"/kernels/cuda/*.cu; do
        o=$build/kernels/cuda/$(basename "$cu" .cu).o
        if test -f "$o" && test ! -f "$o.d"; then
            die "$o has no $o.d (compiled before nvcc -MD): rm $build/kernels/cuda/*.o and make again"
        fi
    done
    # The GPU tests are check programs: `make` alone leaves them linked against the objects of
    # an earlier build (a bundle of such binaries crashed every engine test while the worker,
    # rebuilt, passed). Build them, and the programs, now.
    make -C "$build" -j"$(nproc)" check TESTS= >/dev/null || die "make check TESTS= failed in $build"
    mkdir -p "$dir"
    (cd "$top" && TDM_BUNDLE_LIMIT_MIB=${TDM_BUNDLE_LIMIT_MIB:-160} sh tools/device-bundle.sh "$build") || die "device-bundle.sh failed"
    # one xz block at -9e: about 30 % smaller than -6 in two threads (15 -> 10 MB), a minute
    tar -C "$top" -cf - .device-bundle | xz -T1 -9e >"$dir/bundle.tar.xz" || die "xz failed"
    if test ! -s "$dir/pg15.tar.xz"; then
        sh "$top/tools/device-postgres.sh" pack "$dir/pg15.tar.xz" || die "device-postgres.sh pack failed"
    fi
    # the run carries the working tree (tracked and untracked-not-ignored files) beside what is
    # named: the limit is on the sum
    local tree bun pg lim=$((64 << 20))
    tree=$(cd "$top" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
        xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
    bun=$(stat -c %s "$dir/bundle.tar.xz")
    pg=$(stat -c %s "$dir/pg15.tar.xz")
    echo "device-verify: tree $((tree >> 20)) MiB, bundle $((bun >> 20)) MiB, pg15 $((pg >> 20)) MiB (limit 64 MiB)"
    if test $((tree + bun + pg)) -lt $lim; then
        echo "carry: [\".dev-verify\"]"
        echo "command: bash tools/device-verify.sh run detect chaos tp tests"
        echo "         (a second call: bash tools/device-verify.sh run decode serving)"
    elif test $((tree + bun)) -lt $lim; then
        echo "carry: [\".dev-verify/bundle.tar.xz\"]  (with pg15.tar.xz the carry is over the limit:"
        echo "       no detect or chaos phase)"
        echo "command: bash tools/device-verify.sh run tests   (or decode serving price tp demo)"
    else
        die "the tree and the bundle alone are over the 64 MiB carry limit"
    fi
}

# phase NAME LIMIT CMD... — one phase, its log and its line in the summary.
phase() {
    local name=$1 limit=$2
    shift 2
    local t0 rc
    t0=$(date +%s)
    echo "== $name (limit $limit s): $*"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    printf '%-8s rc=%-3s %4d s\n' "$name" "$rc" $(($(date +%s) - t0)) | tee -a "$OUT/summary.txt"
    tail -15 "$OUT/$name.log"
    test "$rc" -eq 0 || failed=1
}

run_phases() {
    test $# -ge 1 || die "usage: $0 run PHASE... (tests detect chaos decode serving price profile tp demo)"
    test -s "$dir/bundle.tar.xz" || die "no $dir/bundle.tar.xz: run '$0 prepare BUILD_DIR' here and carry .dev-verify"
    cd "$top" || die "cannot enter $top"
    OUT=${OUT:-$top/device-out}
    mkdir -p "$OUT"
    : >"$OUT/summary.txt"
    rm -rf "$top/.device-bundle"
    xz -dc "$dir/bundle.tar.xz" | tar -C "$top" -xf - || die "cannot unpack the bundle"
    local b=$top/.device-bundle pgbin=""
    export LD_LIBRARY_PATH=$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    export UCX_TLS=${UCX_TLS:-tcp,sm,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
    local need_pg=0 p
    for p in "$@"; do
        case $p in
        detect | chaos) need_pg=1 ;;
        tests | decode | serving | price | profile | tp | demo) ;;
        *) die "unknown phase '$p' (tests detect chaos decode serving price profile tp demo)" ;;
        esac
    done
    if test $need_pg = 1; then
        test -s "$dir/pg15.tar.xz" || die "no $dir/pg15.tar.xz for the detect/chaos phases"
        local line
        line=$(sh "$top/tools/device-postgres.sh" setup "$dir/pg15.tar.xz" | tail -1) ||
            die "device-postgres.sh setup failed"
        pgbin=$(echo "$line" | sed -n 's/^export PATH=\([^:]*\):.*/\1/p')
        test -x "$pgbin/postgres" || die "no postgres in '$pgbin' ($line)"
    fi
    local mf=${TDM_VERIFY_MEM_FRACTION:-0.05} dev=${TDM_VERIFY_DEVICE:-cuda}
    failed=0
    for p in "$@"; do
        case $p in
        tests)
            phase tests "${TDM_VERIFY_LIMIT_TESTS:-420}" env OUT="$OUT/tests" \
                TDM_DEVICE_SKIP="${TDM_VERIFY_TESTS_SKIP:-^bench }" bash "$top/tools/device-run.sh"
            ;;
        detect)
            phase detect "${TDM_VERIFY_LIMIT_DETECT:-180}" python3 "$top/bench/gpu-tp-detect.py" \
                --build "$b" --src "$top" --device "$dev" --pg-bindir "$pgbin" --mem-fraction "$mf" \
                --out "$OUT/gpu_tp_detect.json"
            ;;
        chaos)
            phase chaos "${TDM_VERIFY_LIMIT_CHAOS:-420}" python3 "$top/tests/chaos/chaos.py" \
                --build "$b" --src "$top" --device "$dev" --pg-bindir "$pgbin" --mem-fraction "$mf" \
                --tp 2 --long --only 1,2,3,4 --out "$OUT/chaos_gpu.json"
            ;;
        decode)
            # the host-only benches (no GPU in them) are not what a device call is for
            phase decode "${TDM_VERIFY_LIMIT_DECODE:-420}" env OUT="$OUT/decode" \
                TDM_DEVICE_SKIP="^(test|memcheck) |gpu-serving|gpu-mixed-price|gpu-step-profile|multi-gpu|^bench bench/(checksum_segments|controlplane|cpu_engine|kernels|transfer|transfer_floor)\$" \
                bash "$top/tools/device-run.sh"
            ;;
        demo)
            # a demo-model candidate (tools/demo/device_run.sh; its pieces come back under
            # $OUT/demo: cat base.tgz.* | tar xzf - -C DIR, then tools/demo/eval_cpu.py here)
            mkdir -p "$OUT/demo"
            phase demo "${TDM_VERIFY_LIMIT_DEMO:-420}" env OUT="$OUT/demo" PRESETS=base \
                CONVERSATIONS="${TDM_VERIFY_DEMO_CONVERSATIONS:-400000}" TOKENIZER=train \
                sh "$top/tools/demo/device_run.sh" "${TDM_VERIFY_DEMO_VARIANT:-5}" \
                "${TDM_VERIFY_DEMO_SECONDS:-400}"
            ;;
        serving)
            phase serving "${TDM_VERIFY_LIMIT_SERVING:-300}" bash "$top/bench/gpu-serving.sh" "$b" "$top" \
                "$OUT/gpu_serving.json"
            ;;
        price)
            phase price "${TDM_VERIFY_LIMIT_PRICE:-240}" bash "$top/bench/gpu-mixed-price.sh" "$b" \
                "$top" "$OUT/gpu_mixed_price.json"
            ;;
        profile)
            phase profile "${TDM_VERIFY_LIMIT_PROFILE:-240}" bash "$top/bench/gpu-step-profile.sh" \
                "$b" "$top" "$OUT/gpu_step_profile.json"
            ;;
        tp)
            phase tp "${TDM_VERIFY_LIMIT_TP:-240}" env OUT="$OUT/tp" bash "$top/bench/multi-gpu.sh"
            ;;
        esac
    done
    # the engine goals of this call beside its serving figures (decode's JSON is in its logs)
    if test -s "$OUT/gpu_serving.json" && test -s "$OUT/decode/device-logs.tar.gz"; then
        local gd
        gd=$(mktemp -d)
        if tar -C "$gd" -xzf "$OUT/decode/device-logs.tar.gz" bench/gpu_decode.json 2>/dev/null; then
            python3 "$top/bench/serving_goals.py" "$OUT/gpu_serving.json" "$gd/bench/gpu_decode.json" ||
                failed=1
        else
            echo "device-verify: no bench/gpu_decode.json in the decode phase's logs" | tee -a "$OUT/summary.txt"
            failed=1
        fi
        rm -rf "$gd"
    fi
    echo "== device-verify summary"
    cat "$OUT/summary.txt"
    return $failed
}

case ${1:-} in
prepare)
    shift
    prepare "$@"
    ;;
run)
    shift
    run_phases "$@"
    ;;
*) die "usage: $0 prepare BUILD_DIR | run PHASE..." ;;
esac
