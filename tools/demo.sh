#!/bin/sh
# demo.sh — README command 1: install dependencies, build (release), and run the main job: a
# private PostgreSQL cluster and tandemd, whose supervisor starts a prefill + decode worker pair
# on the bundled demo model (CPU) from a groups config (docs/groups.md). Inference goes through
# tandemd's /v1 router; the console and tandemctl act on the two groups. Prints the console URL
# with a login token and working commands, then stays in the foreground until Ctrl-C or SIGTERM
# (which stop everything at once), or exits after a self-check with --smoke.
#
#   sh tools/demo.sh [--smoke] [--no-build]
#   --no-build  run what TDM_BUILD_DIR already holds (no install-deps, no make)
#
# State lives in ./.state (TDM_STATE_DIR): PostgreSQL data, tandemd's state (its groups/ holds
# each group's config, record and worker.log), logs/. Ports: tandemd 8470 (TDM_DEMO_CP_PORT),
# prefill bootstrap 8998 (TDM_DEMO_BOOTSTRAP_PORT), the workers' HTTP ports 30001 prefill
# (TDM_DEMO_PREFILL_PORT) and 30000 decode (TDM_DEMO_DECODE_PORT), kept across restarts.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${TDM_BUILD_DIR:-$top/build-demo}
state=${TDM_STATE_DIR:-$top/.state}
smoke=0
do_build=1
for a in "$@"; do
    case $a in
    --smoke) smoke=1 ;;
    --no-build) do_build=0 ;;
    -h | --help)
        sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "demo.sh: unknown option $a (try --help)" >&2
        exit 2
        ;;
    esac
done
cp_port=${TDM_DEMO_CP_PORT:-8470}
bootstrap_port=${TDM_DEMO_BOOTSTRAP_PORT:-8998}
prefill_port=${TDM_DEMO_PREFILL_PORT:-30001}
decode_port=${TDM_DEMO_DECODE_PORT:-30000}
model=${TDM_DEMO_MODEL:-$top/models/demo}

say() { echo "demo: $*"; }

if [ $do_build = 1 ]; then
    sh "$top/tools/install-deps.sh"
    if [ ! -x "$build/config.status" ]; then
        (cd "$top" && autoreconf -fi >/dev/null)
        mkdir -p "$build"
        (cd "$build" && "$top/configure" >configure.out) || { tail -30 "$build/configure.out"; exit 1; }
    fi
    make -C "$build" -j"$(nproc)" >"$build/make.out" 2>&1 || { tail -40 "$build/make.out"; exit 1; }
    say "built in $build"
fi
mkdir -p "$state/logs" "$state/tandemd"

tpid=""
spid=""
# tandemd leaves supervised workers running to re-adopt them; the demo stops them too.
stop_all() {
    trap - EXIT INT TERM
    [ -n "$spid" ] && kill "$spid" 2>/dev/null
    [ -n "$tpid" ] && kill "$tpid" 2>/dev/null
    for r in "$state"/tandemd/groups/*/record.json; do
        [ -f "$r" ] || continue
        p=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$r")
        [ -n "$p" ] && kill "$p" 2>/dev/null
    done
    [ -n "$tpid" ] && wait "$tpid" 2>/dev/null
    "$build/tdm-pg" stop "$state/pg" >/dev/null 2>&1 || true
    say "stopped"
}
trap 'stop_all' EXIT
trap 'stop_all; exit 143' TERM
trap 'stop_all; exit 130' INT

# 1. PostgreSQL (private cluster, started as user postgres).
"$build/tdm-pg" start "$state/pg" >"$state/pg.env"
. "$state/pg.env"
dsn="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=$TDM_TEST_PGUSER dbname=postgres"
say "postgres up (socket $TDM_TEST_PGHOST port $TDM_TEST_PGPORT)"

# 2. The groups config: a prefill + decode pair (docs/groups.md; packaging/groups.ini explains
#    every kind of group).
cat >"$state/groups.ini" <<EOF
# written by tools/demo.sh: the demo's prefill + decode pair, started by tandemd's supervisor
[group.demo-prefill]
model_path = $model
served_model_name = demo
device = cpu
kv_cpu_bytes = 33554432
disaggregation_mode = prefill
port = $prefill_port
disaggregation_bootstrap_port = $bootstrap_port
pair = demo-decode
[group.demo-decode]
model_path = $model
served_model_name = demo
device = cpu
kv_cpu_bytes = 33554432
disaggregation_mode = decode
port = $decode_port
disaggregation_prefill_addr = 127.0.0.1:$bootstrap_port
pair = demo-prefill
EOF

# 3. tandemd, which starts the groups.
rm -f "$state/tandemd/ready.json"
"$build/tandemd" --listen "127.0.0.1:$cp_port" --state-dir "$state/tandemd" --pg-dsn "$dsn" \
    --groups-config "$state/groups.ini" --worker-bin "$build/tandem-worker" \
    --ready-file "$state/tandemd/ready.json" >>"$state/logs/tandemd.log" 2>&1 &
tpid=$!
i=0
while [ ! -s "$state/tandemd/ready.json" ] && [ $i -lt 300 ]; do
    kill -0 "$tpid" 2>/dev/null || { say "tandemd exited; see $state/logs/tandemd.log"; tail -5 "$state/logs/tandemd.log"; exit 1; }
    sleep 0.1
    i=$((i + 1))
done
token=$(cat "$state/tandemd/admin.token")
url="http://127.0.0.1:$cp_port"
say "tandemd listening on $url (log: $state/logs/tandemd.log)"
ctl() { "$build/tandemctl" --url "$url" --token "$token" "$@"; }

# Both groups ready (the supervisor starts prefill, then decode, which registers with it).
i=0
ready=0
while [ $i -lt 1200 ]; do
    n=$(ctl status --json 2>/dev/null | grep -o '"ready": true' | wc -l)
    [ "$n" -ge 2 ] && { ready=1; break; }
    sleep 0.25
    i=$((i + 1))
done
if [ $ready = 1 ]; then
    say "demo-prefill and demo-decode are ready (workers' logs: $state/tandemd/groups/*/worker.log)"
else
    say "the groups did not become ready in 300 s; see $state/tandemd/groups/*/worker.log"
    ctl status || true
fi

echo
echo "Console:   $url/console?token=$token"
echo "tandemctl: $build/tandemctl --url $url --token $token status"
echo "           (drain demo-decode, resume demo-decode, restart demo-decode, set demo-decode overlap=off)"
cat <<CURL
Inference through tandemd's router (a tool call):
  curl -s $url/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":"demo","messages":[{"role":"user","content":"What is the weather in Paris?"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}'
Inference (plain text):
  curl -s $url/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":"demo","messages":[{"role":"user","content":"Tell me a fun fact."}]}'
CURL
echo
if [ $smoke = 1 ]; then
    rc=0
    [ $ready = 1 ] || rc=1
    out=$(curl -s "$url/v1/chat/completions" -H 'Content-Type: application/json' \
        -d '{"model":"demo","messages":[{"role":"user","content":"Tell me a fun fact."}],"max_tokens":32}')
    echo "$out" | grep -q '"finish_reason"' || rc=1
    say "smoke chat: $out"
    curl -sf "$url/health" >/dev/null || rc=1
    say "smoke run done (rc=$rc)"
    exit $rc
fi
say "running; Ctrl-C stops everything"
# wait (not a foreground sleep) returns as soon as a trapped signal arrives
while :; do
    sleep 3600 &
    spid=$!
    wait "$spid" || true
done
