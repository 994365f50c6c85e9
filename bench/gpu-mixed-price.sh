#!/bin/bash
# gpu-mixed-price.sh — where a mixed step's time goes (docs/cuda.md "Sampling on the device, and
# the serving bench": the prompts' price is most of what keeps serving at concurrency 64 below
# the engine's decode). bench/gpu_serving_engine on the random TinyLlama-1.1B-shaped checkpoint
# of bench/gpu-serving.sh, three engines, each a step of B decode rows beside one chunk of C
# prompt tokens (C = 0: the decode rows alone, through the decode graphs):
#   graphs      the defaults: decode steps at B = 8, 16, 32, 63, 64; B = 63 and 64 beside C = 1
#               (rows 64 and 65: the GEMMs' row count crossing 64), B = 64 beside C = 1 8 32 64
#               128 192 400 1024;
#   tile        TDM_CUDA_TILE_GEMM=256 (every GEMM of up to 256 rows past the skinny kernel's on
#               the tile kernel, not cuBLAS; kernels/cuda/engine.h): decode at B = 16, 32, 64,
#               B = 64 beside C = 32, 64, 128, 192 (up to 256 rows) and 400, against the graphs
#               run's (cuBLAS);
#   (tuned, TDM_CUDA_GEMM_TUNE=1, and narrow_v1, TDM_CUDA_NARROW_V1=1, ran in earlier calls;
#   bench/merge_mixed_price.py keeps their figures in the committed file);
#   eager       TDM_CUDA_GRAPHS=0 (decode steps launched one kernel at a time, as mixed steps
#               always are): B = 64 beside C = 0, 1, 32, 400;
#   flash_only  TDM_CUDA_MIXED_DECODE=0 (every row of a mixed step through the flash tiles):
#               B = 64 beside C = 1, 32, 400;
#   interleaved decode at B = 64, 160-token prompts, each sequence's pages interleaved with the
#               others' (the order a worker's LIFO allocator hands pages to sequences growing
#               side by side; gpu_serving_engine --page-order);
#   scattered   the same at 160- and 640-token prompts with the pages also 64 apart in a pool
#               64 times larger (the worse case; --kv-spread);
#   ragged      decode at B = 64, 160-token prompts but for 1 (and 8) rows of 1024 (a serving
#               batch's contexts differ: if a step's decode attention lasts as long as its
#               longest row's, one long row costs what eight do; gpu_serving_engine --ragged),
#               and the same with TDM_CUDA_ATTN_BALANCE=256 (ragged_*_balanced: the splits doubled
#               while the longest row's split holds more than 256 positions, engine.h);
#   long        the decode step alone at B = 64 with 640-token prompts (the serving load's longer
#               contexts), with the decode attention's default split policy (one split from 64
#               (row, KV head) pairs on; TDM_CUDA_ATTN_MIN_SPLITS=2 and 4 measured 1839 / 2152
#               against 1870 µs in an earlier run, kept in gpu_mixed_price.json);
#   flash_plain TDM_CUDA_FLASH_PLAIN=1 (the prefill flash attention's plain form, the same bits):
#               B = 64 beside C = 32, 400, 1024, against the graphs run's (the lean default);
#   concurrent  the chunk (C = 64 128 256 512 1024) on a second engine's stream beside the B = 64
#               decode step, both in flight at once, against the same rows and chunk in one mixed
#               call (gpu_serving_engine --concurrent; with the decode stream at the highest
#               priority too): can the GPU hide a chunk under the decode step's weight stream?
# TDM_MIXED_RUNS="name ..." runs only those (default: all); bench/merge_mixed_price.py keeps the
# committed figures of the others.
# Derived: the fixed cost of a mixed step (C = 1 against C = 0), its price per prompt token at
# each C, what the graphs save a decode step (eager C = 0 against graphs C = 0), and how much of
# the fixed cost the eager launches explain.
# Usage: bench/gpu-mixed-price.sh BUILD SRCDIR OUT.json (TDM_MIXED_MODEL: a checkpoint instead of
# the random one; TDM_BENCH_GIT_SHA, else the bundle's MANIFEST, else git). Prints TAP.
set -u
BUILD=${1:?usage: gpu-mixed-price.sh BUILD SRCDIR OUT.json}
SRC=${2:?usage}
OUT=${3:?usage}
. "$SRC/bench/gpu_bench_lib.sh"
gb_init gpu-mixed-price "$BUILD" "$SRC" "${TDM_MIXED_MODEL:-}"
common=(--model "$MODEL" --prompt-len 160 --steps 64 --reps 3)
want() { [ -z "${TDM_MIXED_RUNS:-}" ] || [[ " $TDM_MIXED_RUNS " == *" $1 "* ]]; }
# run NAME FILE DESCRIPTION [VAR=VALUE ...] PROGRAM ARGS...: one engine run into $T/FILE, when
# NAME is wanted
run() {
    local name=$1 f=$2 d=$3
    shift 3
    want "$name" || return 0
    env "$@" > "$T/$f"
    tap $? "$d"
}
long=(--model "$MODEL" --prompt-len 640 --steps 64 --reps 3 --batch "64")
m64=(--batch "64" --mixed-batch "64" --mixed-chunk 1)
# every engine with the decode attention's splits unbalanced (the default balances at 256, which
# changes nothing at 160-token prompts) but the *_balanced rows, so their anchors stay as measured
export TDM_CUDA_ATTN_BALANCE=0
run graphs graphs.json "graphs (defaults)" "$E" "${common[@]}" --batch "8 16 32 63 64" \
    --mixed-batch "63 64" --mixed-chunk 1 --price-chunks "1 8 32 64 128 192 400 1024"
run tile tile.json "the tile GEMM up to 256 rows (TDM_CUDA_TILE_GEMM=256)" \
    TDM_CUDA_TILE_GEMM=256 "$E" "${common[@]}" --batch "16 32 64" --mixed-batch "64" \
    --mixed-chunk 1 --price-chunks "32 64 128 192 400"
run eager eager.json "eager (TDM_CUDA_GRAPHS=0)" \
    TDM_CUDA_GRAPHS=0 "$E" "${common[@]}" "${m64[@]}" --price-chunks "1 32 400"
run flash_only flash.json "flash only (TDM_CUDA_MIXED_DECODE=0)" \
    TDM_CUDA_MIXED_DECODE=0 "$E" "${common[@]}" "${m64[@]}" --price-chunks "1 32 400"
run interleaved interleaved.json "pages interleaved (a worker's allocator)" \
    "$E" "${common[@]}" --batch "64" --page-order interleaved
run scattered scattered.json "pages interleaved and 64 apart (a worker's pool)" \
    "$E" "${common[@]}" --batch "64" --page-order interleaved --kv-spread 64
run scattered_long scattered_long.json "long contexts, pages interleaved and 64 apart" \
    "$E" "${long[@]}" --page-order interleaved --kv-spread 64
for k in 1 8; do
    run ragged "ragged$k.json" "$k of 64 rows at 1024-token prompts, the rest at 160" \
        "$E" "${common[@]}" --batch "64" --ragged "$k:1024"
    run ragged "ragged${k}b.json" \
        "$k of 64 rows at 1024-token prompts, attention splits balanced (256)" \
        TDM_CUDA_ATTN_BALANCE=256 "$E" "${common[@]}" --batch "64" --ragged "$k:1024"
done
run long_balanced longb.json "long contexts, attention splits balanced (256)" \
    TDM_CUDA_ATTN_BALANCE=256 "$E" "${long[@]}"
run long_splits_default long0.json "long contexts" "$E" "${long[@]}"
run flash_plain flash_plain.json "the flash attention's plain form (TDM_CUDA_FLASH_PLAIN=1)" \
    TDM_CUDA_FLASH_PLAIN=1 "$E" "${common[@]}" "${m64[@]}" --price-chunks "32 400 1024"
run concurrent concurrent.json "a chunk on a second stream beside the decode step (--concurrent)" \
    "$E" "${common[@]}" "${m64[@]}" --concurrent "64 128 256 512 1024"
gb_ident
python3 - "$T" "$OUT" "$sha" "$gpu" <<'PY'
import json, os, sys, time
T, out, sha, gpu = sys.argv[1:5]
runs = {}
for k, f in (("graphs", "graphs.json"), ("tile", "tile.json"),
             ("eager", "eager.json"),
             ("flash_only", "flash.json"),
             ("long_splits_default", "long0.json"), ("flash_plain", "flash_plain.json"),
             ("interleaved", "interleaved.json"),
             ("scattered", "scattered.json"),
             ("scattered_long", "scattered_long.json"), ("ragged_1", "ragged1.json"),
             ("ragged_8", "ragged8.json"), ("ragged_1_balanced", "ragged1b.json"),
             ("ragged_8_balanced", "ragged8b.json"), ("long_balanced", "longb.json"),
             ("concurrent", "concurrent.json")):
    try:
        runs[k] = json.load(open(os.path.join(T, f)))
    except (OSError, ValueError):
        runs[k] = None


def decode_us(r, bs):
    for row in (r or {}).get("results", []):
        if row["batch"] == bs:
            return row["ids_step_us"]
    return None


def price(r, bs):
    """{chunk: step_us} of the price rows (the last mixed batch) and mixed rows at chunk 1"""
    p = {row["chunk"]: row["step_us"] for row in (r or {}).get("price", []) if row["batch"] == bs}
    return p


derived = {}
g, e, fo = runs["graphs"], runs["eager"], runs["flash_only"]
d64 = decode_us(g, 64)
if g and d64:
    p = price(g, 64)
    derived["graphs_decode_bs64_us"] = d64
    derived["graphs_decode_bs63_us"] = decode_us(g, 63)
    derived["fixed_us"] = round(p[1] - d64, 1) if 1 in p else None
    derived["us_per_prompt_token"] = {str(c): round((s - d64) / c, 2) for c, s in sorted(p.items())}
    derived["us_per_prompt_token_after_the_first"] = {
        str(c): round((s - p[1]) / (c - 1), 2) for c, s in sorted(p.items()) if c > 1 and 1 in p}
    m = {row["batch"]: row["step_us"] for row in g.get("mixed", [])}
    derived["mixed_63_plus_1_us"] = m.get(63)  # 64 rows
    derived["mixed_64_plus_1_us"] = m.get(64)  # 65 rows
if e and d64:
    ed = decode_us(e, 64)
    pe = price(e, 64)
    derived["eager_decode_bs64_us"] = ed
    derived["graphs_save_a_decode_step_us"] = round(ed - d64, 1) if ed else None
    if ed and 1 in pe:
        derived["eager_fixed_us"] = round(pe[1] - ed, 1)
if fo and d64:
    pf = price(fo, 64)
    derived["flash_only_us"] = {str(c): s for c, s in sorted(pf.items())}
tr = runs["tile"]
if g and tr:
    pt, pg = price(tr, 64), price(g, 64)
    t = {"decode_bs%d" % b: {"tile": decode_us(tr, b), "cublas": decode_us(g, b)}
         for b in (16, 32, 64)}
    for c in (32, 64, 128, 192, 400):
        t["mixed_64_plus_%d" % c] = {"tile": pt.get(c), "cublas": pg.get(c)}
    derived["tile_vs_cublas_us"] = t
if runs["scattered"] or runs["scattered_long"]:
    derived["scattered_pages_decode_bs64_us"] = {
        "prompt_160": {"together": d64, "interleaved": decode_us(runs["interleaved"], 64),
                       "scattered": decode_us(runs["scattered"], 64)},
        "prompt_640": {"together": decode_us(runs["long_splits_default"], 64),
                       "scattered": decode_us(runs["scattered_long"], 64)}}
if runs["ragged_1"] or runs["ragged_8"]:
    derived["ragged_decode_bs64_us"] = {
        "all_160": d64, "one_at_1024": decode_us(runs["ragged_1"], 64),
        "eight_at_1024": decode_us(runs["ragged_8"], 64),
        "all_640": decode_us(runs["long_splits_default"], 64),
        "balanced_256": {"one_at_1024": decode_us(runs["ragged_1_balanced"], 64),
                         "eight_at_1024": decode_us(runs["ragged_8_balanced"], 64),
                         "all_640": decode_us(runs["long_balanced"], 64)}}
if g and runs["flash_plain"]:
    pp, pg = price(runs["flash_plain"], 64), price(g, 64)
    derived["flash_lean_vs_plain_us"] = {
        "mixed_64_plus_%d" % c: {"lean": pg.get(c), "plain": pp.get(c)} for c in (32, 400, 1024)}
if runs["concurrent"]:
    derived["concurrent_vs_mixed_us"] = {
        "chunk_%d" % r["chunk"]: {k: r[k] for k in ("decode_only_us", "chunk_only_us", "both_us",
                                                    "both_decode_first_us", "mixed_us", "hidden",
                                                    "hidden_decode_first")}
        for r in runs["concurrent"].get("concurrent", [])}
long = {k: decode_us(runs[k], 64) for k in ("long_splits_default",)}
if any(v is not None for v in long.values()):
    derived["long_decode_bs64_us"] = long  # 640-token prompts, 64 steps
doc = {"bench": "gpu-mixed-price", "git_sha": sha, "gpu": gpu,
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "what": "a mixed step's time: B decode rows beside one C-token chunk, graphs / eager / "
               "flash-only engines (bench/gpu-mixed-price.sh header)",
       "derived": derived, "runs": runs}
json.dump(doc, open(out, "w"), indent=1)
open(out, "a").write("\n")
print("# mixed price: %s" % json.dumps(derived))
PY
tap $? "wrote $OUT"
echo "1..$n"
