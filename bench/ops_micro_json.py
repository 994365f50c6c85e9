#!/usr/bin/env python3
"""ops_micro_json.py OPS_LOG ENV_TXT OUT_JSON — tests/gpu/test-cuda-ops' micro-benchmarks (its
"# bench ..." lines: kernels/cuda/ops.h, one launch timed with CUDA events, median of reps) as
JSON, with the bundle's source commit and the GPU from tools/device-run.sh's env.txt (its
"source:" line and the nvidia-smi line). Attention rows become
{"attention": {"<what>": us}} (e.g. "prefill 2048 flash lean"), the tile GEMM's rows and their
cuBLAS anchors {"gemm_us": {"<shape> n=<rows>": {"tile": us, "tile-1split": us, "tile-shallow":
us, "cublas": us, "tile_vs_cublas": ratio}}}, every other bench line is kept verbatim under "other". Refused (exit 1): no bench line, or no source or GPU in env.txt."""
import json
import re
import sys
import time


def main():
    if len(sys.argv) != 4:
        sys.stderr.write("usage: ops_micro_json.py OPS_LOG ENV_TXT OUT_JSON\n")
        return 2
    try:
        log = open(sys.argv[1]).read().splitlines()
        env = open(sys.argv[2]).read().splitlines()
    except OSError as e:
        sys.stderr.write("ops_micro_json: %s\n" % e)
        return 1
    sha = next((l.split(":", 1)[1].strip() for l in env if l.startswith("source:")), None)
    gpu = next((l.split(",")[1].strip() for l in env
                if re.match(r"^\d+, NVIDIA ", l)), None)
    attn, gemm, other = {}, {}, []
    for l in log:
        m = re.match(r"^# bench attention (.+?): ([0-9.]+) us", l)
        g = re.match(r"^# bench (tile|tile-1split|tile-shallow|cublas) (\S+) n=(\d+) K=\d+ "
                     r"M=\d+: ([0-9.]+) us", l)
        if m:
            attn[m.group(1)] = float(m.group(2))
        elif g and int(g.group(3)) >= 16:
            gemm.setdefault("%s n=%s" % (g.group(2), g.group(3)), {})[g.group(1)] = \
                float(g.group(4))
        elif l.startswith("# bench "):
            other.append(l[len("# bench "):])
    for v in gemm.values():
        if v.get("tile") and v.get("cublas"):
            v["tile_vs_cublas"] = round(v["tile"] / v["cublas"], 3)
    if not attn and not gemm and not other:
        sys.stderr.write("ops_micro_json: refused: no '# bench' line in %s\n" % sys.argv[1])
        return 1
    if not sha or not gpu:
        sys.stderr.write("ops_micro_json: refused: no source commit or GPU in %s\n" % sys.argv[2])
        return 1
    doc = {"bench": "test-cuda-ops micro-benchmarks", "git_sha": sha, "gpu": gpu,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "what": "kernels/cuda/ops.h micro-benchmarks from tests/gpu/test-cuda-ops' log: one "
                   "launch timed with CUDA events, median of reps, device-resident random data "
                   "(bench/ops_micro_json.py header)",
           "attention_us": attn, "gemm_us": gemm, "other": other}
    with open(sys.argv[3], "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("ops_micro_json: %d attention rows, %d GEMM rows, %d other rows (%s, %s)" %
          (len(attn), len(gemm), len(other), sha, gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
