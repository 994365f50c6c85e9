#!/bin/bash
# gpu-decode.sh — on the device (tools/device-run.sh runs bench/gpu-*.sh after the bundle's
# benchmarks, so bench/gpu_decode has already written $TDM_BENCH_OUT/gpu_decode_tandem.json):
# measures the anchors (bench/torch_anchor.py) and merges both into
# $TDM_BENCH_OUT/gpu_decode.json in the schema of docs/contracts.md §h. Prints TAP.
# Env: TDM_ANCHOR_TIMEOUT (seconds, default 330).
set -u
out=${TDM_BENCH_OUT:-.}
top=$(cd "$(dirname "$0")/.." && pwd)
echo "1..2"
if test ! -f "$out/gpu_decode_tandem.json"; then
    echo "not ok 1 - no gpu_decode_tandem.json (bench/gpu_decode did not run)"
    echo "not ok 2 - merge"
    exit 1
fi
PYTHONUNBUFFERED=1 timeout "${TDM_ANCHOR_TIMEOUT:-330}" python3 "$top/bench/torch_anchor.py"
rc=$?
if test $rc = 0; then echo "ok 1 - anchors measured"; else echo "not ok 1 - anchors (rc $rc)"; fi
sha=$(sed -n 's/^source: //p' "$top/.device-bundle/MANIFEST" 2>/dev/null | head -1)
python3 - "$out" "${sha:-unknown}" <<'EOF'
import json, os, sys
out, sha = sys.argv[1], sys.argv[2]
t = json.load(open(os.path.join(out, "gpu_decode_tandem.json")))
try:
    a = json.load(open(os.path.join(out, "gpu_decode_anchor.json")))
except Exception:
    a = {}
keys = ["decode_bs1_tok_s", "decode_bs8_tok_s", "decode_bs32_tok_s"]
# long prompts (bench/gpu_decode.c, TAP 8): one call and chunks of the worker's default
# --chunked-prefill-size; null when not measured (or an older gpu_decode_tandem.json)
long_keys = ["prefill_%d%s_%s" % (n, c, u) for n in (8192, 32768) for c in ("", "_chunked")
             for u in ("tok_s", "ms")] + ["prefill_32768_first_chunk_ms",
                                         "prefill_32768_last_chunk_ms",
                                         "prefill_32768_last_chunk_vs_first"]
res = {
    "gpu": a.get("gpu", "unknown"),
    "git_sha": sha,
    "tandem": dict([(k, t[k]) for k in keys + ["prefill_2048_tok_s"]] +
                   [(k, t.get(k)) for k in long_keys + ["prefill_2048_plain_flash_tok_s"]]),
    "hf": a.get("hf", {}),
    "torch_compiled": a.get("torch_compiled", {}),
    "copy_GBps": t["copy_GBps"],
    "roofline_bs1_tok_s": t["roofline_bs1_tok_s"],
    "notes": {
        "weight_bytes_per_token": t["weight_bytes_per_token"],
        "tandem_protocol": "prompt %d, %d greedy steps through the CUDA graphs (plan copy, replay, argmax copy-back per step), median of %d" % (t["prompt"], t["new_tokens"], t["runs"]),
        "hf_protocol": a.get("hf_protocol"),
        "torch_compiled_protocol": a.get("torch_compiled_protocol"),
        "torch_copy_GBps": a.get("copy_GBps"),
        "cpu_match_first_32": t["cpu_match_32"],
        "cpu_first_divergence": t["cpu_first_divergence"],
        "versions": {"torch": a.get("torch"), "transformers": a.get("transformers")},
        "tandem_prefill_long_protocol": "one random prompt of 8192 and one of 32768 tokens on the engine's defaults, prefilled in one call (engine max_tokens = the prompt) and in chunks of %s tokens (the worker's default --chunked-prefill-size; each chunk continues the sequence over its page table); a warm-up, then median of %s; last_chunk_vs_first: the 32768 prompt's last chunk (context 24576..32768) against its first" % (t.get("prefill_chunk"), t.get("prefill_long_runs")),
    },
}
json.dump(res, open(os.path.join(out, "gpu_decode.json"), "w"), indent=1)
print(json.dumps(res, indent=1))
EOF
if test $? = 0; then echo "ok 2 - merged into gpu_decode.json"; else echo "not ok 2 - merge"; fi
