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

# 3. Worker pair on the demo model: prefill + decode when the PD transfer is wired into the
#    serving runtime (tandem-worker --help lists --disaggregation-prefill-addr), else one
#    colocated worker on the decode port so the demo still serves.
serving=0
if [ -x "$build/tandem-worker" ] && [ -d "$model" ]; then
    cp_flags=""
    if [ -n "$token" ]; then
        cp_flags="--control-plane http://127.0.0.1:$cp_port --control-plane-token-file $state/tandemd/admin.token"
    fi
    common="--model-path $model --served-model-name demo --device cpu $cp_flags"
    if "$build/tandem-worker" --help 2>&1 | grep -q -- --disaggregation-prefill-addr; then
        # shellcheck disable=SC2086
        "$build/tandem-worker" $common --disaggregation-mode prefill --group demo-prefill \
            --port "$prefill_port" --disaggregation-bootstrap-port "$bootstrap_port" \
            >"$state/logs/prefill.log" 2>&1 &
        pids="$pids $!"
        # shellcheck disable=SC2086
        "$build/tandem-worker" $common --disaggregation-mode decode --group demo-decode \
            --port "$decode_port" --disaggregation-prefill-addr "127.0.0.1:$bootstrap_port" \
            >"$state/logs/decode.log" 2>&1 &
        pids="$pids $!"
        say "prefill worker on :$prefill_port (bootstrap :$bootstrap_port), decode worker on :$decode_port"
    else
        # shellcheck disable=SC2086
        "$build/tandem-worker" $common --group demo --port "$decode_port" \
            >"$state/logs/decode.log" 2>&1 &
        pids="$pids $!"
        say "colocated worker on :$decode_port (this build has no PD transfer in the serving runtime)"
    fi
    i=0
    until curl -sf "http://127.0.0.1:$decode_port/ready" >/dev/null 2>&1 || [ $i -ge 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    curl -sf "http://127.0.0.1:$decode_port/ready" >/dev/null 2>&1 && serving=1
    [ $serving = 1 ] || { say "worker did not become ready; see $state/logs/"; tail -5 "$state/logs/decode.log"; }
else
    say "worker or demo model not available: skipping the workers"
fi

echo
[ -n "$token" ] && echo "Console:   http://127.0.0.1:$cp_port/console?token=$token"
[ -n "$token" ] && echo "API token: $token   (curl -H 'Authorization: Bearer $token' http://127.0.0.1:$cp_port/api/v1/groups)"
if [ $serving = 1 ]; then
    cat <<CURL
Inference (a tool call):
  curl -s http://127.0.0.1:$decode_port/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":"demo","messages":[{"role":"user","content":"What is the weather in Paris?"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}'
Inference (plain text):
  curl -s http://127.0.0.1:$decode_port/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":"demo","messages":[{"role":"user","content":"Tell me a fun fact."}]}'
CURL
fi
echo
if [ $smoke = 1 ]; then
    rc=0
    if [ $serving = 1 ]; then
        out=$(curl -s "http://127.0.0.1:$decode_port/v1/chat/completions" -H 'Content-Type: application/json' \
            -d '{"model":"demo","messages":[{"role":"user","content":"Tell me a fun fact."}],"max_tokens":32}')
        echo "$out" | grep -q '"finish_reason"' || rc=1
        say "smoke chat: $out"
    fi
    [ -n "$token" ] && { curl -sf "http://127.0.0.1:$cp_port/health" >/dev/null || rc=1; }
    say "smoke run done (rc=$rc)"
    exit $rc
fi
say "running; Ctrl-C stops everything"
while :; do sleep 3600; done
