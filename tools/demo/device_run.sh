#!/bin/sh
# device_run.sh [VARIANT] [SECONDS] — one GPU run that makes demo-model candidates: generate and
# pack the training set on every CPU (train.py prep; CONVERSATIONS, default 200000; TOKENIZER
# bundled or train, default bundled: see train.py), train each
# preset of PRESETS (default "small base": 5.2M and 10.1M, side by side on the one GPU; one
# preset gets the whole GPU) for the rest of a SECONDS budget (default 420, counted from the
# start, prep included), then pack each OUTDIR into $OUT/PRESET.tgz.aa, .ab, ... (pieces of
# 15 MiB). Here: cat PRESET.tgz.* | tar xzf - -C DIR, then evaluate DIR/models/demo with
# tools/demo/eval_cpu.py. Needs python3 with torch, transformers, tokenizers, jinja2, numpy.
set -u
VARIANT=${1:-2}
BUDGET=${2:-420}
PRESETS=${PRESETS:-small base}
CONVERSATIONS=${CONVERSATIONS:-200000}
TOKENIZER=${TOKENIZER:-bundled}
OUT=${OUT:?OUT must name the folder the results go to}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=${TMPDIR:-/tmp}/demo-work
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
start=$(date +%s)
python3 "$SRC/tools/demo/train.py" prep "$W" --variant "$VARIANT" \
    --conversations "$CONVERSATIONS" --tokenizer "$TOKENIZER" >"$OUT/prep.log" 2>&1 ||
    { tail -20 "$OUT/prep.log"; exit 1; }
tail -2 "$OUT/prep.log"
# about 60 s after training: save, chat goldens, held-out and frozen evaluations
left=$((BUDGET - ($(date +%s) - start) - 60))
[ "$left" -gt 60 ] || { echo "device_run: no time left to train ($left s)"; exit 1; }
for p in $PRESETS; do
    lr=2e-3
    [ "$p" = small ] && lr=3e-3
    python3 "$SRC/tools/demo/train.py" train "$W" "$W/$p" --preset "$p" --lr "$lr" \
        --train-seconds "$left" >"$OUT/$p.log" 2>&1 &
done
wait
for p in $PRESETS; do
    [ -d "$W/$p" ] && tar czf - -C "$W/$p" . | split -b 15M - "$OUT/$p.tgz."
    grep -h "ms/step\|trained\|heldout\|frozen eval\|FAILED" "$OUT/$p.log"
done
echo "device_run: $(($(date +%s) - start)) s"
