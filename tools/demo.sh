#!/bin/sh
# demo.sh — README command 1: install dependencies, build (release), and run the main job:
# a private PostgreSQL cluster, tandemd, and a prefill + decode worker pair on the bundled demo
# model (CPU). Prints the console URL with a login token and a working curl, then stays in the
# foreground until Ctrl-C (or exits after a self-check with --smoke).
#
# State lives in ./.state (PostgreSQL data, tandemd state, worker logs). Ports: tandemd 8470,
# decode HTTP 30000, prefill HTTP 30001, bootstrap 8998 (DESIGN §10b); override with TDM_DEMO_*.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${TDM_BUILD_DIR:-$top/build-demo}
state=${TDM_STATE_DIR:-$top/.state}
smoke=0
[ "${1:-}" = "--smoke" ] && smoke=1
cp_port=${TDM_DEMO_CP_PORT:-8470}
decode_port=${TDM_DEMO_DECODE_PORT:-30000}
prefill_port=${TDM_DEMO_PREFILL_PORT:-30001}
bootstrap_port=${TDM_DEMO_BOOTSTRAP_PORT:-8998}
model=${TDM_DEMO_MODEL:-$top/models/demo}

say() { echo "demo: $*"; }

sh "$top/tools/install-deps.sh"
if [ ! -x "$build/config.status" ]; then
    (cd "$top" && autoreconf -fi >/dev/null)
    mkdir -p "$build"
    (cd "$build" && "$top/configure" >configure.out) || { tail -30 "$build/configure.out"; exit 1; }
fi
make -C "$build" -j"$(nproc)" >"$build/make.out" 2>&1 || { tail -40 "$build/make.out"; exit 1; }
say "built in $build"
mkdir -p "$state/logs"

pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    "$build/tdm-pg" stop "$state/pg" >/dev/null 2>&1 || true
    say "stopped"
}
trap cleanup EXIT INT TERM

# 1. PostgreSQL (private cluster, started as user postgres).
"$build/tdm-pg" start "$state/pg" >"$state/pg.env"
. "$state/pg.env"
dsn="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=$TDM_TEST_PGUSER dbname=postgres"
say "postgres up (socket $TDM_TEST_PGHOST port $TDM_TEST_PGPORT)"

# 2. tandemd.
token=""
if [ -x "$build/tandemd" ]; then
    "$build/tandemd" --listen "127.0.0.1:$cp_port" --state-dir "$state/tandemd" --pg-dsn "$dsn" \
        >"$state/logs/tandemd.log" 2>&1 &
    pids="$pids $!"
    i=0
    while [ ! -s "$state/tandemd/admin.token" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    token=$(cat "$state/tandemd/admin.token" 2>/dev/null || true)
    say "tandemd listening on http://127.0.0.1:$cp_port (log: $state/logs/tandemd.log)"
else
    say "tandemd not built yet: skipping the control plane"
fi

# 3. Worker pair on the demo model.
serving=0
if [ -x "$build/tandem-worker" ] && [ -d "$model" ] && "$build/tandem-worker" --help 2>&1 | grep -q disaggregation-mode; then
    cp_flag=""
    [ -n "$token" ] && cp_flag="--control-plane http://127.0.0.1:$cp_port"
    # shellcheck disable=SC2086
    "$build/tandem-worker" --model-path "$model" --device cpu --disaggregation-mode prefill \
        --port "$prefill_port" --disaggregation-bootstrap-port "$bootstrap_port" $cp_flag \
        >"$state/logs/prefill.log" 2>&1 &
    pids="$pids $!"
    # shellcheck disable=SC2086
    "$build/tandem-worker" --model-path "$model" --device cpu --disaggregation-mode decode \
        --port "$decode_port" $cp_flag >"$state/logs/decode.log" 2>&1 &
    pids="$pids $!"
    serving=1
elif [ -x "$build/tandem-worker" ] && [ -d "$model" ]; then
    say "serving runtime not built yet; one-shot check of the demo model:"
    "$build/tandem-worker" --model-path "$model" --prompt "Hello" --max-tokens 8 --json || true
else
    say "worker or demo model not available yet: skipping the workers"
fi

echo
[ -n "$token" ] && echo "Console:   http://127.0.0.1:$cp_port/console?token=$token"
[ -n "$token" ] && echo "API token: $token   (curl -H 'Authorization: Bearer $token' http://127.0.0.1:$cp_port/api/v1/groups)"
if [ $serving = 1 ]; then
    echo "Inference: curl -s http://127.0.0.1:$decode_port/v1/chat/completions -H 'Content-Type: application/json' \\"
    echo "             -d '{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}]}'"
fi
echo
if [ $smoke = 1 ]; then
    sleep 2
    say "smoke run done"
    exit 0
fi
say "running; Ctrl-C stops everything"
while :; do sleep 3600; done
