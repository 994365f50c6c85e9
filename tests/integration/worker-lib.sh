# tests/integration/worker-lib.sh — sourced after tap-lib.sh by the shell tests that run CPU
# tandem-worker groups of the tiny-llama3 fixture: M (the model, bail out when it is missing),
# T (a temporary folder, removed at exit, when the group in lp and every pid in WL_PIDS are
# killed), TDM_CPU_THREADS=1, wait_file and worker_start.
# shellcheck shell=sh
tap_need_exec "$BIN"
M="$SRC/tests/fixtures/models/tiny-llama3"
if [ ! -f "$M/config.json" ]; then
    echo "Bail out! the fixture model $M is missing"
    exit 1
fi
T=$(mktemp -d)
lp=""
WL_PIDS=""
trap 'for p in $lp $WL_PIDS; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT
export TDM_CPU_THREADS=1

# wait_file FILE PID TRIES INTERVAL: poll until FILE is non-empty, PID has exited or TRIES polls
# of INTERVAL seconds have passed.
wait_file() {
    wf_i=0
    while [ $wf_i -lt "$3" ] && [ ! -s "$1" ] && kill -0 "$2" 2> /dev/null; do
        sleep "$4"
        wf_i=$((wf_i + 1))
    done
}

# worker_start LOG FLAGS...: "$BIN" --model-path $M --device cpu --port 0 --ready-file $T/ready
# FLAGS in the background (its pid in lp, its output in LOG), then up to 30 s for its ready file;
# port: its HTTP port, empty when it did not become ready.
worker_start() {
    ws_log=$1
    shift
    rm -f "$T/ready"
    "$BIN" --model-path "$M" --device cpu --port 0 --ready-file "$T/ready" "$@" > "$ws_log" 2>&1 &
    lp=$!
    wait_file "$T/ready" $lp 300 0.1
    port=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$T/ready" 2> /dev/null)
}
