#!/bin/sh
# test-ops-micro-json.sh — bench/ops_micro_json.py on a hand-made test-cuda-ops log and env.txt:
# attention rows by name, tile/cuBLAS GEMM rows paired, the other bench lines kept, the commit and GPU taken from env.txt, and
# the refusals (no bench line, no commit or GPU).
set -u
S=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$S/tests/integration/tap-lib.sh"
command -v python3 > /dev/null || { echo "Bail out! python3 not found"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
J=$S/bench/ops_micro_json.py
printf 'ok 1 - x\n# bench copy d2d 8 MiB: 0.1 ms = 100 GB/s\n# bench attention prefill 2048 flash lean: 153.2 us (112 TFLOP/s causal)\n# bench attention chunk 400 after 400 flash plain: 35.8 us\n' > "$T/ops.log"
printf 'host: Linux\n0, NVIDIA H100 80GB HBM3, 580.1, 81559 MiB\ntandem device bundle\nsource: abc1234\n' > "$T/env.txt"
python3 "$J" "$T/ops.log" "$T/env.txt" "$T/o.json" > /dev/null 2>&1
ok $? "a log and env.txt converted"
v=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['git_sha'], d['gpu'], d['attention_us'], d['other'])" "$T/o.json")
ok "$([ "$v" = "abc1234 NVIDIA H100 80GB HBM3 {'prefill 2048 flash lean': 153.2, 'chunk 400 after 400 flash plain': 35.8} ['copy d2d 8 MiB: 0.1 ms = 100 GB/s']" ]; echo $?)" \
    "rows by name, other lines verbatim, commit and GPU from env.txt ($v)"
printf '# bench cublas qkv n=64 K=2048 M=2560: 8.0 us = 1311 GB/s of weights, 84 TFLOP/s\n# bench tile qkv n=64 K=2048 M=2560: 6.0 us = 1748 GB/s of weights, 112 TFLOP/s\n# bench cublas down n=256 K=5632 M=2048: 20.0 us = 1153 GB/s of weights\n# bench skinny qkv n=8 K=2048 M=2560: 5.0 us = 2097 GB/s of weights\n' > "$T/gemm.log"
python3 "$J" "$T/gemm.log" "$T/env.txt" "$T/g.json" > /dev/null 2>&1
v=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sorted(d['gemm_us'].items()), len(d['other']))" "$T/g.json")
ok "$([ "$v" = "[('down n=256', {'cublas': 20.0}), ('qkv n=64', {'cublas': 8.0, 'tile': 6.0, 'tile_vs_cublas': 0.75})] 1" ]; echo $?)" \
    "tile and cuBLAS rows paired by shape and rows with their ratio, an unpaired one kept, the skinny row under other ($v)"
printf 'ok 1 - x\n' > "$T/none.log"
python3 "$J" "$T/none.log" "$T/env.txt" "$T/n.json" > /dev/null 2> "$T/e1"
rc=$?
ok "$([ $rc = 1 ] && [ ! -e "$T/n.json" ] && grep -q "no '# bench' line" "$T/e1"; echo $?)" "no bench line: refused, nothing written (rc $rc)"
printf 'host: Linux\n' > "$T/env2.txt"
python3 "$J" "$T/ops.log" "$T/env2.txt" "$T/m.json" > /dev/null 2> "$T/e2"
rc=$?
ok "$([ $rc = 1 ] && [ ! -e "$T/m.json" ] && grep -q "no source commit or GPU" "$T/e2"; echo $?)" "no commit or GPU: refused (rc $rc)"
python3 "$J" "$T/ops.log" > /dev/null 2>&1
ok "$([ $? = 2 ]; echo $?)" "missing arguments: usage error (rc 2)"
tap_done
