# gpu_bench_lib.sh — sourced by bench/gpu-mixed-price.sh and bench/gpu-step-profile.sh (not a
# bench itself: tools/device-run.sh runs bench/gpu-*.sh): the engine bench program, a scratch
# directory, TAP lines, the random TinyLlama-1.1B-shaped checkpoint of bench/gpu-serving.sh and the
# build's git sha and GPU name.
# gb_init NAME BUILD SRC MODEL_ENV_VALUE: sets E (bench/gpu_serving_engine), T (removed at exit),
# MODEL (the given checkpoint, else a random one made under T); bails out (TAP) without them.
gb_init() {
    local name=$1
    GB_BUILD=$2
    GB_SRC=$3
    E=$GB_BUILD/bench/gpu_serving_engine
    T=$(mktemp -d "/tmp/$name.XXXXXX")
    trap 'rm -rf "$T"' EXIT
    n=0
    if [ ! -x "$E" ]; then
        echo "Bail out! no $E (a CUDA build)"
        exit 1
    fi
    MODEL=${4:-}
    if [ -z "$MODEL" ]; then
        MODEL=$T/model
        python3 "$GB_SRC/bench/gen_random_model.py" "$MODEL" --preset tinyllama-demo >&2 ||
            { echo "Bail out! could not make the random-weight checkpoint"; exit 1; }
    fi
}
# tap RC DESCRIPTION — one TAP line, numbered in order
tap() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
# gb_ident: sha (TDM_BENCH_GIT_SHA, else the bundle's MANIFEST, else git) and gpu (nvidia-smi)
gb_ident() {
    sha=${TDM_BENCH_GIT_SHA:-$(sed -n 's/^source: //p' "$GB_BUILD/MANIFEST" 2>/dev/null | head -1)}
    [ -n "$sha" ] || sha=$(git -C "$GB_SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
}
