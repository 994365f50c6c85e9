#!/bin/sh
# test-start-fail.sh — a rank that cannot start makes its group fail, never exit cleanly
# (dataplane/worker/worker.h; docs/contracts.md §c `worker_lost`). TP=2 CPU groups of the
# tiny-llama3 fixture that cannot start:
#   rank 0's HTTP port held by another process → the launcher exits 1 with `group failed to start:
#     rank 0: HTTP layer: --host 127.0.0.1 --port P: bind: Address already in use (errno 98)`,
#     writes no ready file, and its worker_lost (rank 0, code 1) reaches the control plane (a local
#     sink) with that reason and data `error`; before the fix the group exited 0, "cleanly";
#   a --chat-template that does not parse (the same path: the HTTP layer refuses to start) → exit
#     1, named (before the fix: 0, "cleanly");
#   prefill's bootstrap port held → exit 1, `transfer engine: bootstrap listener on
#     127.0.0.1:P: bind: Address already in use (errno 98)`;
#   a model directory without weights → exit 1, `group failed to start: rank R: ...`;
#   TDM_KV_ALLOC=newest (a knob value it does not know) → exit 1, named;
#   a flag the launcher itself refuses → exit 2, `group failed to start: ...` (the line tandemd's
#     supervisor reads back from worker.log as the start's reason).
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/worker-lib.sh"
export UCX_TLS=tcp,sm,self UCX_NET_DEVICES=lo

# a process holding a listening TCP port: hold NAME → held_port_NAME in $T/NAME.port, pid in WL_PIDS
hold() {
    python3 -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(600)' "$T/$1.port.tmp" &
    WL_PIDS="$WL_PIDS $!"
    i=0
    while [ $i -lt 100 ] && [ ! -s "$T/$1.port.tmp" ]; do sleep 0.05; i=$((i + 1)); done
    mv "$T/$1.port.tmp" "$T/$1.port"
}

# the control plane's telemetry endpoint, as a sink: one JSON body per line, acked by seq
python3 "$SRC/tests/integration/telemetry-sink.py" "$T/sink.jsonl" "$T/sink.port" &
WL_PIDS="$WL_PIDS $!"
i=0
while [ $i -lt 100 ] && [ ! -s "$T/sink.port" ]; do sleep 0.05; i=$((i + 1)); done
sink_port=$(cat "$T/sink.port" 2> /dev/null)
[ -n "$sink_port" ] || {
    echo "Bail out! the telemetry sink did not start"
    exit 1
}

# run_group TAG FLAGS...: a TP=2 group in the foreground (at most 120 s) → rc; its log in $T/log-TAG
run_group() {
    tag=$1
    shift
    rm -f "$T/ready"
    timeout 120 "$BIN" --device cpu --tp-size 2 --host 127.0.0.1 --ready-file "$T/ready" \
        --kv-cpu-bytes 4194304 "$@" > "$T/log-$tag" 2>&1
    rc=$?
}
failed_line() { # TAG → the launcher's "group failed to start" message
    sed -n 's/.*msg="group failed to start: \(.*\)"$/\1/p' "$T/log-$1" | tail -n 1
}

# ---- rank 0's HTTP port is taken ----
hold http
hp=$(cat "$T/http.port")
run_group http --model-path "$M" --port "$hp" --control-plane "http://127.0.0.1:$sink_port" \
    --group start-fail
why=$(failed_line http)
[ $rc = 1 ] && ! grep -q "group exited cleanly" "$T/log-http" && [ ! -s "$T/ready" ] &&
    printf '%s\n' "$why" | grep -q "^rank 0: HTTP layer: --host 127.0.0.1 --port $hp: bind: Address already in use (errno 98)$"
ok $? "rank 0 cannot bind its HTTP port $hp: the group fails to start (rc $rc, no ready file): '$why'"
grep -q "rank 0 failed to start: HTTP layer: --host 127.0.0.1 --port $hp: bind: Address already in use" "$T/log-http"
ok $? "rank 0 logs its own failed start, naming the port and errno"
i=0 # the launcher waits for the ack before it exits: the event is there
lost=""
while [ $i -lt 50 ]; do
    lost=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    for e in json.loads(line).get("events", []):
        if e.get("type") == "worker_lost":
            d = e.get("data") or {}
            print("%s|%s|%s|%s" % (d.get("rank"), d.get("code"), d.get("error"), e.get("reason")))' "$T/sink.jsonl" 2> /dev/null)
    [ -n "$lost" ] && break
    sleep 0.1
    i=$((i + 1))
done
case "$lost" in
"0|1|rank 0: HTTP layer: --host 127.0.0.1 --port $hp: bind: Address already in use (errno 98)|rank 0 exited (code 1): failed to start: rank 0: HTTP layer: --host 127.0.0.1 --port $hp: bind: Address already in use (errno 98)") r=0 ;;
*) r=1 ;;
esac
ok $r "its worker_lost reaches the control plane: rank 0, code 1, the reason and data.error name the port ('$lost')"

# ---- the HTTP layer refuses to start for another reason: an unusable chat template ----
printf '{%% for %%}\n' > "$T/broken.jinja"
run_group chat --model-path "$M" --port 0 --chat-template "$T/broken.jinja"
why=$(failed_line chat)
[ $rc = 1 ] && ! grep -q "group exited cleanly" "$T/log-chat" &&
    printf '%s\n' "$why" | grep -q "^rank 0: HTTP layer: --chat-template unusable: "
ok $? "an unusable --chat-template fails the start (rc $rc): '$why'"

# ---- prefill's bootstrap port is taken ----
hold boot
bp=$(cat "$T/boot.port")
run_group boot --model-path "$M" --port 0 --disaggregation-mode prefill \
    --disaggregation-bootstrap-port "$bp"
why=$(failed_line boot)
[ $rc = 1 ] && [ ! -s "$T/ready" ] &&
    printf '%s\n' "$why" | grep -q "^rank 0: transfer engine: bootstrap listener on 127.0.0.1:$bp: bind: Address already in use (errno 98)$"
ok $? "prefill's bootstrap port $bp taken: the group fails to start (rc $rc): '$why'"

# ---- a model that cannot be loaded ----
mkdir -p "$T/noweights"
cp "$M/config.json" "$T/noweights/"
run_group model --model-path "$T/noweights" --port 0
why=$(failed_line model)
[ $rc = 1 ] && printf '%s\n' "$why" | grep -Eq "^rank [01]: .+"
ok $? "a model directory without weights fails the start (rc $rc): '$why'"

# ---- a measurement knob with a value it does not know (TDM_KV_ALLOC, docs/contracts.md §h) ----
TDM_KV_ALLOC=newest run_group alloc --model-path "$M" --port 0
why=$(failed_line alloc)
[ $rc = 1 ] && printf '%s\n' "$why" | grep -q "TDM_KV_ALLOC=newest: expected lifo or lowest"
ok $? "TDM_KV_ALLOC=newest fails the start, named (rc $rc): '$why'"

# ---- the launcher's own refusal (a PD flag for another mode): exit 2, in the same words ----
run_group flags --model-path "$M" --port 0 --disaggregation-prefill-addr 127.0.0.1:1
why=$(failed_line flags)
[ $rc = 2 ] && [ "$why" = "--disaggregation-prefill-addr is for --disaggregation-mode decode" ]
ok $? "a flag the launcher refuses: rc $rc, 'group failed to start: $why'"

[ $fail = 0 ] || for f in "$T"/log-*; do tail -n 6 "$f" | sed "s|^|# $(basename "$f"): |"; done
tap_done
