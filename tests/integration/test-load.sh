#!/bin/sh
# test-load.sh — the load acceptance, in both loops, on a TP=2 CPU group of the tiny-llama3
# fixture through the real launcher and HTTP layer: 64 concurrent streamed POST /generate with a
# fixed seed (random prompts 4..120 tokens, 16..64 new tokens, sampled), 25 % of them abandoned by
# the client at a random token. KV is kept short (64 pages, 16 running) so admission queues and
# retraction run too. Every request must end in tokens or an explicit error, none may run over
# 60 s, the minimum iteration over the ranks (progress page, sampled every 20 ms) must never
# stand still for over 3 s while work is pending, and after /admin/drain free pages == total.
# The client is tests/integration/test-load (load subcommand).
set -u
B=${TDM_BUILDDIR:-.}
S=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$S/tests/integration/tap-lib.sh"
W="$B/tandem-worker"
L="$B/tests/integration/test-load"
M="$S/tests/fixtures/models/tiny-llama3"
if [ ! -x "$W" ] || [ ! -x "$L" ] || [ ! -f "$M/config.json" ]; then
    echo "Bail out! tandem-worker, test-load or the fixture model is missing"
    exit 1
fi
T=$(mktemp -d)
lp=""
trap '[ -n "$lp" ] && kill -9 $lp 2>/dev/null; rm -rf "$T"' EXIT
export TDM_CPU_THREADS=1
echo "l0ad-t0ken" > "$T/token"
kv() { sed -n "/^requests=/s/.* $1=\([^ ]*\).*/\1/p" "$2"; } # key file → value (summary line)
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

for loop in overlap lockstep; do
    extra=""
    [ $loop = lockstep ] && extra=--disable-overlap-schedule
    rm -f "$T/ready"
    "$W" --model-path "$M" --device cpu --tp-size 2 --port 0 --ready-file "$T/ready" \
        --admin-token-file "$T/token" --max-running-requests 16 --max-queued-requests 64 \
        --kv-cpu-bytes 524288 --chunked-prefill-size 64 $extra > "$T/log-$loop" 2>&1 &
    lp=$!
    i=0
    while [ $i -lt 300 ] && [ ! -s "$T/ready" ] && kill -0 $lp 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    port=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$T/ready" 2>/dev/null)
    if [ -z "$port" ]; then
        ok 1 "$loop: the group starts and writes its ready file"
        sed 's/^/# /' "$T/log-$loop" | tail -20
        kill -9 $lp 2>/dev/null
        continue
    fi
    "$L" load --port "$port" --page "/dev/shm/tandem-$lp-progress" --streams 64 --seed 7 \
        --abort-pct 25 --max-new 16..64 --prompt 4..120 --limit-s 60 --token-file "$T/token" \
        > "$T/out-$loop"
    sed -n 's/^/# /p' "$T/out-$loop"
    o="$T/out-$loop"
    done_=$(kv completed "$o"); ab=$(kv aborted "$o"); er=$(kv errors "$o"); br=$(kv broken "$o")
    [ "${br:-1}" = 0 ] && [ $((${done_:-0} + ${ab:-0} + ${er:-0})) = 64 ]
    ok $? "$loop: all 64 requests end in tokens ($done_), a client abort ($ab) or an explicit error ($er); none broken"
    [ "${ab:-0}" -ge 8 ] && [ "${done_:-0}" -ge 32 ]
    ok $? "$loop: the fixed seed abandons about a quarter of the streams mid-way ($ab) and the rest complete"
    ! ge "$(kv max_req_s "$o")" 60
    ok $? "$loop: no request ran for 60 s or more (longest $(kv max_req_s "$o") s)"
    ms=$(kv max_stall_s "$o")
    ge "$(kv samples "$o")" 10 && ! ge "${ms:-99}" 3
    ok $? "$loop: the minimum iteration over ranks never stood still > 3 s with work pending (max $ms s)"
    [ "$(kv drained "$o")" = 1 ] && [ "$(kv pages_free "$o")" = "$(kv pages_total "$o")" ] &&
        [ "$(kv pages_total "$o")" != -1 ]
    ok $? "$loop: drained, free pages == total pages ($(kv pages_free "$o")/$(kv pages_total "$o"))"
    "$L" req --port "$port" GET /metrics > "$T/metrics-$loop"
    retr=$(sed -n 's/^tandem_retractions_total \([0-9]*\)$/\1/p' "$T/metrics-$loop")
    abs=$(sed -n 's/^tandem_requests_aborted_total \([0-9]*\)$/\1/p' "$T/metrics-$loop")
    [ "${retr:-0}" -gt 0 ] && [ "${abs:-0}" -gt 0 ]
    ok $? "$loop: the run retracted for lack of pages ($retr) and aborted for gone clients ($abs)"
    kill -TERM $lp
    wait $lp
    rc=$?
    lp=""
    ok $rc "$loop: SIGTERM after the load: the group exits 0"
    [ $rc != 0 ] && sed 's/^/# /' "$T/log-$loop" | tail -20
done
tap_done
