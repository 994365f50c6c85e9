#!/bin/sh
# test-instance-id.sh — the telemetry of a worker started twice under the same PID is kept
# (docs/contracts.md §c: instance_id). A CPU worker of the tiny-llama3 fixture posts telemetry to
# a real tandemd (fresh database) for 2.5 s, stops, and starts again under the same launcher PID
# for 1.2 s: as PID 1 of a new PID namespace each time (`unshare --pid --fork --mount-proc`), or,
# where the machine refuses that, with the test-only TDM_TEST_LAUNCHER_PID=1 standing in for it.
# Then the two runs have distinct instance ids and the second run's samples are stored (the
# exactly-once check keys on (instance_id, rank, seq): a repeated id drops them as duplicates).
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/cp-lib.sh"
tap_need_exec "$BIN"
CPL_DB=test_instance_id_$$
cpl_require
M="$SRC/tests/fixtures/models/tiny-llama3"
export TDM_CPU_THREADS=1

if unshare --pid --fork --mount-proc true 2> /dev/null; then
    how=unshare
else
    how=hook
fi
echo "# same PID by: $how"

cpl_start
ok $? "tandemd starts on a fresh database"

run() { # seconds → t0 (wall µs at the start), rc
    rm -f "$CPL_T/wready"
    set -- "$1" "$BIN" --model-path "$M" --device cpu --port 0 --ready-file "$CPL_T/wready" \
        --control-plane "$url" --control-plane-token-file "$CPL_T/state/admin.token" \
        --group pid-repeat --drain-timeout 1
    secs=$1
    shift
    t0=$(date +%s%6N)
    if [ $how = unshare ]; then
        unshare --pid --fork --mount-proc "$@" >> "$CPL_T/worker.log" 2>&1 &
    else
        TDM_TEST_LAUNCHER_PID=1 "$@" >> "$CPL_T/worker.log" 2>&1 &
    fi
    up=$!
    CPL_PIDS=$up
    i=0
    while [ $i -lt 200 ] && [ ! -s "$CPL_T/wready" ] && kill -0 $up 2> /dev/null; do
        sleep 0.05
        i=$((i + 1))
    done
    sleep "$secs"
    lpid=$up
    [ $how = unshare ] && lpid=$(ps -o pid= --ppid $up | tr -d ' ' | head -1)
    kill -TERM "$lpid"
    wait $up
    rc=$?
    CPL_PIDS=""
}

run 2.5
t1=$t0
ok $rc "run 1: the worker ran and stopped cleanly (rc $rc)"
sleep 0.5
run 1.2
t2=$t0
ok $rc "run 2: the worker ran and stopped cleanly (rc $rc)"
i=0 # run 2's samples reach the database (at most 20 s)
while [ $i -lt 200 ]; do
    s2=$(cpl_sql "SELECT count(*) FROM samples WHERE group_name = 'pid-repeat' AND ts_us >= $t2")
    [ "${s2:-0}" -gt 0 ] && break
    sleep 0.1
    i=$((i + 1))
done
s1=$(cpl_sql "SELECT count(*) FROM samples WHERE group_name = 'pid-repeat' AND ts_us >= $t1 AND ts_us < $t2")
s2=$(cpl_sql "SELECT count(*) FROM samples WHERE group_name = 'pid-repeat' AND ts_us >= $t2")
ids=$(cpl_sql "SELECT count(DISTINCT instance_id) FROM samples WHERE group_name = 'pid-repeat'")
echo "# samples: run 1 $s1, run 2 $s2; instance ids: $ids ($(cpl_sql "SELECT string_agg(DISTINCT instance_id, ',') FROM samples WHERE group_name = 'pid-repeat'"))"
[ "${s1:-0}" -gt 0 ]
ok $? "run 1's samples are stored ($s1)"
[ "${ids:-0}" = 2 ]
ok $? "the two runs under one PID have distinct instance ids ($ids)"
[ "${s2:-0}" -gt 0 ]
ok $? "run 2's samples are stored, not dropped as duplicates ($s2)"
[ $fail = 0 ] || sed 's/^/# worker: /' "$CPL_T/worker.log" | tail -10
cpl_stop
tap_done
