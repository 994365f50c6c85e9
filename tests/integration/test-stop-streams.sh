#!/bin/sh
# test-stop-streams.sh — a stop with open streams ends every stream and exits 0. On a TP=2 CPU group
# of the tiny-llama3 fixture (--drain-timeout 0.3), per round: 8 streamed POST /generate
# (max_new_tokens 480, ignore_eos) are open and producing tokens, and 2 keep-alive connections sit
# idle after a finished request (as a router's pool holds them); then SIGTERM to the launcher →
#   every stream ends with `data: [DONE]` after an error event or its finish_reason;
#   the group exits 0 ("group exited cleanly"), no rank dies on a signal (an h2o assertion at
#   teardown aborts with signal 6).
# Three rounds (TDM_STOP_ROUNDS=N for more by hand). Before them, shared files of a dead
# launcher are left in /dev/shm (as kill -9 of a launcher leaves them): a start removes them, not
# those of a running launcher (which holds a lock on its progress file); all of a dead group's
# files go, whatever their suffix (the ranks' -kv<r>, the transfer relay's -xfer). The client
# (tests/integration/streams.py) is python3's standard library.
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/worker-lib.sh"

round() { # round-number
    r=$1
    rm -f "$T/started" "$T/out"
    worker_start "$T/log-$r" --tp-size 2 --drain-timeout 0.3 --group "stop-$r"
    if [ -z "$port" ]; then
        ok 1 "round $r: the group starts"
        sed 's/^/# /' "$T/log-$r" | tail -20
        return
    fi
    python3 "$SRC/tests/integration/streams.py" "$port" "$T/started" "$T/out" \
        --idle 2 --linger 3 --timeout 20 > "$T/client-$r" 2>&1 &
    cp=$!
    wait_file "$T/started" $cp 200 0.05
    [ -s "$T/started" ]
    ok $? "round $r: 8 streams are producing tokens"
    kill -TERM $lp
    wait $lp
    rc=$?
    lp=""
    wait $cp
    sed 's/^/# /' "$T/client-$r"
    [ $rc = 0 ] && grep -q "group exited cleanly" "$T/log-$r"
    ok $? "round $r: SIGTERM with open streams: the group exits 0 (rc $rc)"
    ! grep -q "signal" "$T/log-$r"
    ok $? "round $r: no rank dies on a signal"
    [ $rc = 0 ] || grep -v "msg=\"client" "$T/log-$r" | tail -60 | sed 's/^/# /'
    ended=$(grep -c '\[DONE\]' "$T/out" 2> /dev/null)
    [ "${ended:-0}" = 8 ] && ! grep -v '\[DONE\]' "$T/out" | grep -q . &&
        ! grep '\[DONE\]' "$T/out" | grep -v -e '"error"' -e '"finish_reason"' | grep -q .
    ok $? "round $r: every stream ends with an error event or its finish_reason, then [DONE] (${ended:-0}/8)"
    [ $fail = 0 ] || sed 's/^/# /' "$T/out" 2> /dev/null
}

# a killed launcher leaves its shared files behind: the next start removes those of dead PIDs
# (and only those)
sh -c 'exit 0' &
dead=$!
wait $dead
while kill -0 $dead 2> /dev/null; do dead=$((dead + 7919)); done
for f in progress tensor plan group kv0 kv1 xfer; do # every file of the group, the relay's -xfer too
    : > "/dev/shm/tandem-$dead-$f"
done
# a running launcher's (it holds a lock on its progress file): kept
flock "/dev/shm/tandem-$$-progress" sleep 600 > /dev/null 2>&1 &
holder=$!
r=1
while [ $r -le "${TDM_STOP_ROUNDS:-3}" ]; do # more rounds by hand: TDM_STOP_ROUNDS=20
    round $r
    r=$((r + 1))
done
left=$(ls /dev/shm/tandem-$dead-* 2> /dev/null | wc -l)
[ "$left" = 0 ] && [ -e "/dev/shm/tandem-$$-progress" ]
ok $? "a start removed the shared files a dead launcher (pid $dead) left ($left left), not a running one's"
pkill -P $holder sleep
kill $holder 2> /dev/null
rm -f "/dev/shm/tandem-$dead-"* "/dev/shm/tandem-$$-progress"
tap_done
