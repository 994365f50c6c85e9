#!/bin/sh
# test-clean-stop.sh — a clean stop is not a lost worker (docs/alerts.md: `shutdown`, WORKER_LOST).
# A TP=2 CPU group of the tiny-llama3 fixture posts telemetry to a real tandemd (fresh database);
# once its samples are stored, SIGTERM to the launcher → the group exits 0, each rank's `shutdown`
# event is stored once, and 3 s later (the silence rule fires after 2 s) no WORKER_LOST names
# the group, live or stored.
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/cp-lib.sh"
tap_need_exec "$BIN"
CPL_DB=test_clean_stop_$$
cpl_require
M="$SRC/tests/fixtures/models/tiny-llama3"
export TDM_CPU_THREADS=1

cpl_start
ok $? "tandemd starts on a fresh database"
"$BIN" --model-path "$M" --device cpu --tp-size 2 --port 0 --ready-file "$CPL_T/wready" \
    --control-plane "$url" --control-plane-token-file "$CPL_T/state/admin.token" \
    --group clean-stop --drain-timeout 1 > "$CPL_T/worker.log" 2>&1 &
wp=$!
CPL_PIDS="$wp"
i=0
stored=0
while [ $i -lt 150 ]; do
    stored=$(cpl_sql "SELECT count(DISTINCT rank) FROM samples WHERE group_name = 'clean-stop'")
    [ "${stored:-0}" = 2 ] && break
    sleep 0.1
    i=$((i + 1))
done
[ "${stored:-0}" = 2 ]
ok $? "both ranks' samples are stored ($stored ranks)"
kill -TERM $wp
wait $wp
rc=$?
CPL_PIDS=""
[ $rc = 0 ] && grep -q "group exited cleanly" "$CPL_T/worker.log"
ok $? "SIGTERM: the group exits 0 (rc $rc)"
t_stop=$(date +%s)
i=0 # the shutdown events reach the database (at most 20 s)
while [ $i -lt 200 ]; do
    n_shut=$(cpl_sql "SELECT count(*) FROM events WHERE group_name = 'clean-stop' AND type = 'shutdown'")
    [ "${n_shut:-0}" -ge 2 ] && break
    sleep 0.1
    i=$((i + 1))
done
[ "$n_shut" = 2 ]
ok $? "each rank's shutdown event is stored once ($n_shut)"
# an absence: it holds only once the detector had the time to fire (3.5 s after the stop)
while [ $(($(date +%s) - t_stop)) -lt 4 ]; do sleep 0.1; done
live=$(cpl_live WORKER_LOST clean-stop)
[ "$live" = 0 ]
ok $? "no live WORKER_LOST names the group 4 s after the stop ($live)"
stored=$(cpl_sql "SELECT count(*) FROM alerts WHERE kind = 'WORKER_LOST' AND group_name = 'clean-stop'")
[ "$stored" = 0 ]
ok $? "no stored WORKER_LOST names the group ($stored)"
[ $fail = 0 ] || { sed 's/^/# worker: /' "$CPL_T/worker.log" | tail -10; sed 's/^/# tandemd: /' "$CPL_T/tandemd.log" | tail -10; }
cpl_stop
tap_done
