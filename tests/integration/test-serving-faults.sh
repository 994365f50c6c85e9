#!/bin/sh
# test-serving-faults.sh — the fault acceptance on a TP=2 CPU group (overlap loop) of the
# tiny-llama3 fixture, faults armed through POST /admin/faults (--enable-fault-injection + admin
# token file) while streams are running:
#   rank_idle_path on rank 1 → /health 503 within --health-progress-timeout + 1 s, the reason names
#     a rank and the collective it is stuck in; the recorder's data (progress page dump and
#     /metrics) shows rank 1 on the IDLE path at an iteration where rank 0 waits in an
#     all-reduce; then kill -9 of rank 1 → the group exits non-zero, the launcher names the rank,
#     and its worker_lost event (rank 1, signal 9) reaches the control plane (a local sink that
#     also sees both ranks' telemetry batches);
#   stall_loop on rank 1 for 5 s → 503 within T + 1 s naming a rank, the page shows rank 0 inside
#     a collective and rank 1 outside any (the stalled one), healthy again once the stall ends,
#     and every stream completes.
# The client is tests/integration/test-load; the sink is python3's standard library.
# TDM_FAULTS_DEVICE=cuda runs the same group on the GPU (tests/gpu, bench/multi-gpu.sh: two ranks
# on one device through the host-staged collectives, dataplane/tp/gpu.h), with
# TDM_FAULTS_ARGS added to the worker's flags (e.g. --mem-fraction-static 0.3).
set -u
B=${TDM_BUILDDIR:-.}
S=${TDM_SRCDIR:-.}
W="$B/tandem-worker"
L="$B/tests/integration/test-load"
M="$S/tests/fixtures/models/tiny-llama3"
if [ ! -x "$W" ] || [ ! -x "$L" ] || [ ! -f "$M/config.json" ]; then
    echo "Bail out! tandem-worker, test-load or the fixture model is missing"
    exit 1
fi
if ! command -v python3 > /dev/null; then
    echo "Bail out! python3 (the telemetry sink) is missing"
    exit 1
fi
T=$(mktemp -d)
lp=""
sp=""
cp=""
trap 'for p in $lp $sp $cp; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT
export TDM_CPU_THREADS=1
echo "fau1t-t0ken" > "$T/token"
TIMEOUT=3
n=0
fail=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }

# the control plane's telemetry endpoint, as a sink: one JSON body per line, acked by seq
python3 "$S/tests/integration/telemetry-sink.py" "$T/sink.jsonl" "$T/sink.port" &
sp=$!
i=0
while [ $i -lt 100 ] && [ ! -s "$T/sink.port" ]; do sleep 0.05; i=$((i + 1)); done
sink_port=$(cat "$T/sink.port" 2> /dev/null)

start_group() { # tag extra-flags... → lp, port
    tag=$1
    shift
    rm -f "$T/ready"
    "$W" --model-path "$M" --device "${TDM_FAULTS_DEVICE:-cpu}" --tp-size 2 --port 0 \
        --ready-file "$T/ready" ${TDM_FAULTS_ARGS:-} \
        --admin-token-file "$T/token" --enable-fault-injection \
        --health-progress-timeout $TIMEOUT "$@" > "$T/log-$tag" 2>&1 &
    lp=$!
    i=0
    while [ $i -lt 300 ] && [ ! -s "$T/ready" ] && kill -0 $lp 2> /dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    port=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$T/ready" 2> /dev/null)
}

start_load() { # tag streams max-new limit → cp (background client)
    "$L" load --port "$port" --page "/dev/shm/tandem-$lp-progress" --streams "$2" --seed 3 \
        --abort-pct 0 --max-new "$3" --prompt 4..8 --limit-s "$4" > "$T/load-$1" 2>&1 &
    cp=$!
    i=0 # until tokens flow: rank 0's iteration advances with work pending
    while [ $i -lt 100 ]; do
        "$L" page "/dev/shm/tandem-$lp-progress" > "$T/page" 2> /dev/null
        grep -q "^rank=0 iter=[1-9].* pending=[1-9]" "$T/page" && break
        sleep 0.05
        i=$((i + 1))
    done
}

# ---- rank_idle_path, then kill -9 of the rank ----
start_group idle --control-plane "http://127.0.0.1:$sink_port" --group faults-test
if [ -z "$port" ]; then
    ok 1 "the group starts (rank_idle_path run)"
    sed 's/^/# /' "$T/log-idle" | tail -20
else
    start_load idle 4 400 40
    "$L" req --port "$port" GET /health > "$T/h0"
    [ "$(head -1 "$T/h0")" = 200 ]
    ok $? "idle_path: /health 200 while streams run"
    "$L" health-wait --port "$port" --limit-s $((TIMEOUT + 5)) --token-file "$T/token" \
        --arm '{"name":"rank_idle_path","rank":1,"count":1}' > "$T/hw"
    grep -q "^armed=200" "$T/hw"
    ok $? "idle_path: POST /admin/faults arms rank_idle_path on rank 1"
    sed 's/^/# /' "$T/hw"
    after=$(sed -n 's/^after_s=\([-0-9.]*\).*/\1/p' "$T/hw")
    [ "$after" != -1 ] && le "$after" $((TIMEOUT + 1))
    ok $? "idle_path: /health 503 within T+1 s of the arm (T = $TIMEOUT s; after $after s)"
    grep -Eq 'rank [01] .*in (allreduce|all_reduce|broadcast|allgather)' "$T/hw"
    ok $? "idle_path: the 503 reason names the rank and the collective it waits in"
    "$L" page "/dev/shm/tandem-$lp-progress" > "$T/page"
    sed 's/^/# /' "$T/page"
    i0=$(sed -n 's/^rank=0 iter=\([0-9]*\).*/\1/p' "$T/page")
    i1=$(sed -n 's/^rank=1 iter=\([0-9]*\).*/\1/p' "$T/page")
    grep -Eq "^rank=1 .* path=idle" "$T/page" && grep -Eq "^rank=0 .* in_coll=all" "$T/page" &&
        [ "${i1:-0}" -gt "${i0:-0}" ]
    ok $? "idle_path: the recorder names rank 1 (idle path at iter $i1) while rank 0 waits in an all-reduce after iter $i0"
    "$L" req --port "$port" GET /metrics > "$T/m-idle"
    grep -q "^tandem_healthy 0" "$T/m-idle" &&
        [ "$(sed -n 's/^tandem_rank_iter{rank="0"} //p' "$T/m-idle")" != \
            "$(sed -n 's/^tandem_rank_iter{rank="1"} //p' "$T/m-idle")" ]
    ok $? "idle_path: /metrics shows unhealthy and the ranks' iterations apart"
    r1=$(pgrep -P $lp | sort -n | tail -1)
    kill -9 "$r1"
    i=0
    while [ $i -lt 100 ] && kill -0 $lp 2> /dev/null; do sleep 0.1; i=$((i + 1)); done
    wait $lp
    rc=$?
    lp=""
    [ $rc != 0 ] && [ $i -lt 100 ]
    ok $? "kill -9 of the wedged rank 1: the group exits non-zero within 10 s (rc $rc)"
    grep -q "rank 1 (pid $r1) exited (signal 9" "$T/log-idle"
    ok $? "kill -9: the launcher names the rank and the signal"
    wait $cp
    cp=""
    grep -q "^requests=4 " "$T/load-idle"
    ok $? "kill -9: the streams end (connection closed) instead of hanging"
    i=0
    while [ $i -lt 40 ] && ! grep -q '"worker_lost"' "$T/sink.jsonl" 2> /dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    grep '"worker_lost"' "$T/sink.jsonl" | grep -q '"rank": *1' &&
        grep '"worker_lost"' "$T/sink.jsonl" | grep -q '"signal": *9'
    ok $? "kill -9: worker_lost (rank 1, signal 9) reached the control plane"
    grep -q '"rank": *0, *"seq"' "$T/sink.jsonl" && grep -q '"rank": *1, *"seq"' "$T/sink.jsonl"
    ok $? "both ranks' reporters sent telemetry batches to the control plane"
    [ $fail = 0 ] || sed 's/^/# /' "$T/log-idle" | tail -15
fi

# ---- stall_loop: unhealthy during the stall, healthy after, every stream completes ----
start_group stall
if [ -z "$port" ]; then
    ok 1 "the group starts (stall_loop run)"
    sed 's/^/# /' "$T/log-stall" | tail -20
else
    start_load stall 16 480 40
    "$L" health-wait --port "$port" --limit-s $((TIMEOUT + 4)) --token-file "$T/token" \
        --arm '{"name":"stall_loop","rank":1,"count":1,"duration_ms":5000}' > "$T/hw2"
    grep -q "^armed=200" "$T/hw2"
    ok $? "stall_loop: armed on rank 1 for 5 s"
    sed 's/^/# /' "$T/hw2"
    after=$(sed -n 's/^after_s=\([-0-9.]*\).*/\1/p' "$T/hw2")
    [ "$after" != -1 ] && le "$after" $((TIMEOUT + 1)) && grep -q "rank [01] " "$T/hw2"
    ok $? "stall_loop: /health 503 within T+1 s, the reason names the rank (after $after s)"
    "$L" page "/dev/shm/tandem-$lp-progress" > "$T/page2"
    sed 's/^/# /' "$T/page2"
    grep -Eq "^rank=0 .* in_coll=(broadcast|allreduce)" "$T/page2" &&
        grep -Eq "^rank=1 .* in_coll=none" "$T/page2"
    ok $? "stall_loop: the recorder shows rank 0 waiting in a collective and rank 1 outside any"
    i=0
    while [ $i -lt 80 ]; do
        "$L" req --port "$port" GET /health > "$T/h2"
        [ "$(head -1 "$T/h2")" = 200 ] && break
        sleep 0.1
        i=$((i + 1))
    done
    [ $i -lt 80 ]
    ok $? "stall_loop: /health is 200 again once the stall has passed"
    wait $cp
    cp=""
    sed 's/^/# /' "$T/load-stall"
    grep -q "^requests=16 completed=16 .* broken=0" "$T/load-stall"
    ok $? "stall_loop: every stream completed"
    ms=$(sed -n 's/^requests=.* max_stall_s=\([0-9.]*\).*/\1/p' "$T/load-stall")
    le 4 "${ms:-0}"
    ok $? "stall_loop: it hit while work was pending (min iter over ranks stood still $ms s)"
    kill -TERM $lp
    wait $lp
    ok $? "stall_loop: SIGTERM: the group exits 0"
    lp=""
fi
echo "1..$n"
exit $fail
