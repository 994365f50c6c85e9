#!/bin/sh
# test-idle-hang.sh — a loop that hangs while IDLE, with a request sent to it afterwards, reads as
# holding work (I8, docs/design.md §4 WEDGE). On a TP=2 CPU group of the tiny-llama3 fixture, in both loops
# (overlap and --disable-overlap-schedule):
#   stall_loop on rank 0 for 6 s (POST /admin/faults, after_iter 0: the next iteration, an idle
#   heartbeat plan) → the page shows rank 0's progress standing still with nothing pending, and
#   /health is still 200 (an idle loop is not judged on progress);
#   then one POST /generate → it sits in the scheduler's inbox, which the stalled loop does not
#   read; /health answers 503 within T + 1 s of the send (T = --health-progress-timeout) with the
#   reason naming rank 0, no progress, and the queued request (not merely a stale heartbeat);
#   rank 0's telemetry (a local sink standing in for the control plane) has a sample at the
#   stalled iteration with waiting >= 1 — the input WEDGE needs;
#   after the stall the request completes (200, its 4 tokens) and /health is 200 again.
# The client is tests/integration/test-load; the sink is python3's standard library.
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/worker-lib.sh"
L="$BUILD/tests/integration/test-load"
tap_need_exec "$L"
if ! command -v python3 > /dev/null; then
    echo "Bail out! python3 (the telemetry sink) is missing"
    exit 1
fi
rp=""
echo "h4ng-t0ken" > "$T/token"
TIMEOUT=3
STALL_MS=6000
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
now() { awk '{ print $1 }' /proc/uptime; }

python3 "$SRC/tests/integration/telemetry-sink.py" "$T/sink.jsonl" "$T/sink.port" &
WL_PIDS="$!"
i=0
while [ $i -lt 100 ] && [ ! -s "$T/sink.port" ]; do sleep 0.05; i=$((i + 1)); done
sink_port=$(cat "$T/sink.port" 2> /dev/null)

# rank 0 samples with waiting + running >= 1 at iteration $1, from the sink
queued_samples() {
    python3 - "$T/sink.jsonl" "$1" << 'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    try:
        b = json.loads(line)
    except ValueError:
        continue
    if b.get("rank") != 0:
        continue
    for s in b.get("samples", []):
        if s["iter"] == int(sys.argv[2]) and s["waiting"] + s["running"] >= 1:
            n += 1
print(n)
PY
}

page_rank0() { # → r0 (the page's rank 0 line)
    "$L" page "/dev/shm/tandem-$lp-progress" > "$T/page" 2> /dev/null
    r0=$(grep "^rank=0 " "$T/page")
}

run() { # tag worker-flags...
    tag=$1
    shift
    : > "$T/sink.jsonl"
    worker_start "$T/log-$tag" --tp-size 2 --admin-token-file "$T/token" --enable-fault-injection \
        --health-progress-timeout $TIMEOUT --control-plane "http://127.0.0.1:$sink_port" \
        --group "idle-hang-$tag" "$@"
    if [ -z "$port" ]; then
        ok 1 "$tag: the group starts"
        sed 's/^/# /' "$T/log-$tag" | tail -20
        return
    fi
    i=0 # idle heartbeat plans run
    while [ $i -lt 100 ]; do
        page_rank0
        echo "$r0" | grep -q "^rank=0 iter=[1-9]" && break
        sleep 0.05
        i=$((i + 1))
    done

    "$L" req --port "$port" --token-file "$T/token" POST /admin/faults \
        "{\"name\":\"stall_loop\",\"rank\":0,\"count\":1,\"after_iter\":0,\"duration_ms\":$STALL_MS}" \
        > "$T/arm"
    [ "$(head -1 "$T/arm")" = 200 ]
    ok $? "$tag: stall_loop armed on rank 0 for $STALL_MS ms"
    t_arm=$(now)
    # the stall fires at the next iteration, an idle one: rank 0's page stops with nothing pending
    i=0
    age=0
    while [ $i -lt 100 ]; do
        page_rank0
        age=$(echo "$r0" | sed -n 's/.* age_s=\([0-9.]*\).*/\1/p')
        le 0.5 "${age:-0}" && break
        sleep 0.02
        i=$((i + 1))
    done
    sed 's/^/# /' "$T/page"
    stalled_iter=$(echo "$r0" | sed -n 's/^rank=0 iter=\([0-9]*\).*/\1/p')
    le 0.5 "${age:-0}" && echo "$r0" | grep -q " pending=0 "
    ok $? "$tag: the loop is stalled while idle (rank 0 at iter $stalled_iter, age $age s, nothing pending)"
    "$L" req --port "$port" GET /health > "$T/h-idle"
    [ "$(head -1 "$T/h-idle")" = 200 ]
    ok $? "$tag: /health is 200 while the stalled loop is idle and nothing is sent"

    t_send=$(now)
    "$L" req --port "$port" POST /generate \
        '{"input_ids":[1,5,9,13],"max_new_tokens":4,"ignore_eos":true,"sampling":{"temperature":0}}' \
        > "$T/gen" 2>&1 &
    rp=$!
    "$L" health-wait --port "$port" --limit-s $((2 * (TIMEOUT + 1))) > "$T/hw"
    sed 's/^/# /' "$T/hw"
    after=$(sed -n 's/^after_s=\([-0-9.]*\).*/\1/p' "$T/hw")
    [ "$after" != -1 ] && le "$after" $((TIMEOUT + 1))
    ok $? "$tag: /health 503 within T+1 s of the request (T = $TIMEOUT s; after $after s; stall began $(awk -v a="$t_send" -v b="$t_arm" 'BEGIN { printf "%.2f", a - b + 0 }') s after the arm, the request $age s into it)"
    grep -Eq "rank 0 no progress for [0-9.]+ s \(iter $stalled_iter, idle path; 1 request\(s\) queued" "$T/hw"
    ok $? "$tag: the reason names rank 0, its stalled idle iteration and the queued request"
    i=0
    while [ $i -lt 40 ] && [ "$(queued_samples "$stalled_iter")" = 0 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    q=$(queued_samples "$stalled_iter")
    [ "$q" -gt 0 ]
    ok $? "$tag: rank 0's telemetry shows the request waiting at the stalled iteration $stalled_iter ($q samples)"

    wait $rp
    rp=""
    t_done=$(now)
    awk '{ print "# " $0 }' "$T/gen"
    [ "$(head -1 "$T/gen")" = 200 ] && grep -Eq '"output_ids": *\[[0-9]+, *[0-9]+, *[0-9]+, *[0-9]+\]' "$T/gen"
    ok $? "$tag: the request completes after the stall (200, 4 tokens, $(awk -v a="$t_done" -v b="$t_arm" 'BEGIN { printf "%.2f", a - b }') s after the arm)"
    i=0
    while [ $i -lt 50 ]; do
        "$L" req --port "$port" GET /health > "$T/h-after"
        [ "$(head -1 "$T/h-after")" = 200 ] && break
        sleep 0.1
        i=$((i + 1))
    done
    [ $i -lt 50 ]
    ok $? "$tag: /health is 200 again once the stall has passed"
    kill -TERM $lp
    wait $lp
    ok $? "$tag: SIGTERM: the group exits 0"
    lp=""
    [ $fail = 0 ] || sed 's/^/# /' "$T/log-$tag" | tail -15
}

run overlap
run lockstep --disable-overlap-schedule
tap_done
