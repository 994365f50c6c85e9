#!/bin/sh
# test-restart-streams.sh — an operator's restart is planned, not a loss. tandemd supervises a
# TP=2 CPU group of the tiny-llama3 fixture (port of its own, --drain-timeout 0.3); per round, 8
# streamed POST /generate (max_new_tokens 480, ignore_eos) are open and producing tokens on the
# group when `tandemctl restart` runs:
#   tandemctl exits 0 and the group is ready again on its port;
#   every stream ends with `data: [DONE]` after an error event or its finish_reason;
#   no rank of any incarnation dies on a signal (an abort at teardown is signal 6).
# After the rounds (and the silence rule's 2 s), no WORKER_LOST names the group, live or stored:
# a restart's own stop is not a lost worker. 5 rounds in make check; TDM_RESTART_ROUNDS=20 for
# the long form (`make check-reliability-long`).
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/cp-lib.sh"
tap_need_exec "$BIN"
tap_need_exec "$BUILD/tandemctl"
CPL_DB=test_restart_streams_$$
cpl_require
M="$SRC/tests/fixtures/models/tiny-llama3"
export TDM_CPU_THREADS=1
G=rs
super_cleanup() {
    r="$CPL_T/state/groups/$G/record.json"
    p=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$r" 2> /dev/null)
    [ -n "$p" ] && kill -9 "-$p" "$p" 2> /dev/null
    cpl_cleanup
}
trap super_cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '[group.%s]\nport = %s\nmodel_path = %s\ndevice = cpu\ntp_size = 2\nkv_cpu_bytes = 8388608\ndrain_timeout = 0.3\n' \
    $G "$port" "$M" > "$CPL_T/groups.ini"

ready() {
    cpl_api "$url/api/v1/status" | python3 -c '
import json, sys
g = [g for g in json.load(sys.stdin)["groups"] if g["name"] == sys.argv[1]]
print(int(bool(g and g[0]["ready"] and g[0]["state"] == "running")))' $G 2> /dev/null
}
wait_ready() {
    i=0
    while [ $i -lt 300 ]; do
        [ "$(ready)" = 1 ] && return 0
        sleep 0.2
        i=$((i + 1))
    done
    return 1
}

cpl_start --groups-config "$CPL_T/groups.ini" --worker-bin "$BIN"
ok $? "tandemd starts"
wait_ready
ok $? "the supervised TP=2 group is ready"
rounds=${TDM_RESTART_ROUNDS:-5}
r=1
bad_ctl=0
bad_streams=0
no_start=0
while [ $r -le "$rounds" ]; do
    rm -f "$CPL_T/started" "$CPL_T/out"
    python3 "$SRC/tests/integration/streams.py" "$port" "$CPL_T/started" "$CPL_T/out" > "$CPL_T/client-$r" 2>&1 &
    cp=$!
    i=0
    while [ $i -lt 300 ] && [ ! -s "$CPL_T/started" ] && kill -0 $cp 2> /dev/null; do
        sleep 0.05
        i=$((i + 1))
    done
    [ -s "$CPL_T/started" ] || no_start=$((no_start + 1))
    "$BUILD/tandemctl" --url "$url" --token-file "$CPL_T/state/admin.token" restart $G \
        > "$CPL_T/ctl-$r" 2>&1
    rc=$?
    wait $cp
    ended=$(grep -c '\[DONE\]' "$CPL_T/out" 2> /dev/null)
    if [ $rc != 0 ] || ! wait_ready; then
        bad_ctl=$((bad_ctl + 1))
        echo "# round $r: tandemctl restart rc $rc: $(tail -c 300 "$CPL_T/ctl-$r")"
    fi
    if [ "${ended:-0}" != 8 ] || grep -v '\[DONE\]' "$CPL_T/out" | grep -q . ||
        grep '\[DONE\]' "$CPL_T/out" | grep -v -e '"error"' -e '"finish_reason"' | grep -q .; then
        bad_streams=$((bad_streams + 1))
        echo "# round $r: streams ended ${ended:-0}/8:"
        sed 's/^/#   /' "$CPL_T/out" "$CPL_T/client-$r" 2> /dev/null | head -12
    fi
    r=$((r + 1))
done
[ $no_start = 0 ]
ok $? "every round had 8 streams producing tokens before the restart ($no_start rounds short)"
[ $bad_ctl = 0 ]
ok $? "$rounds x tandemctl restart: each exits 0 and the group is ready again ($bad_ctl failed)"
[ $bad_streams = 0 ]
ok $? "every stream of every round ended with an error event or its finish_reason, then [DONE] ($bad_streams rounds not)"
sig=$(grep -c -e 'signal [0-9]' -e 'Assertion' "$CPL_T/state/groups/$G/worker.log")
[ "$sig" = 0 ]
ok $? "no rank died on a signal or an assertion ($sig lines)"
sleep 3 # the silence rule fires 2 s after the last sample
live=$(cpl_live WORKER_LOST $G)
stored=$(cpl_sql "SELECT count(*) FROM alerts WHERE kind = 'WORKER_LOST' AND group_name = '$G'")
[ "$live" = 0 ] && [ "$stored" = 0 ]
ok $? "$rounds planned restarts opened no WORKER_LOST (live $live, stored $stored)"
[ $fail = 0 ] || { sed 's/^/# tandemd: /' "$CPL_T/tandemd.log" | grep -v 'msg="event"' | tail -15; grep -e signal -e Assert -e 'exited' "$CPL_T/state/groups/$G/worker.log" | head -10 | sed 's/^/# worker: /'; }
cpl_stop
tap_done
