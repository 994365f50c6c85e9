#!/bin/sh
# test-http-413.sh — a body over the limit is answered 413 and the client can read it, on both
# daemons' HTTP scaffold (common/httpd.c): 20 MB to a worker's and to tandemd's
# /v1/chat/completions from Node's fetch and from curl (past h2o's own limit: h2o answers at the
# headers and the lingering close drains the rest — without it the client sees ECONNRESET), 9 MB
# (over the 8 MiB route limit, under h2o's: the JSON body_too_large), and the daemon still
# serving afterwards. TAP.
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/cp-lib.sh"
CPL_DB=test_http_413
tap_need_exec "$BIN"
command -v node > /dev/null 2>&1 || {
    echo "Bail out! node not available (the test's HTTP client)"
    exit 1
}
cpl_require
MJS="$SRC/tests/integration/big-body.mjs"
BIG=20000000

# the worker (CPU, demo model)
"$BIN" --device cpu --model-path "$SRC/models/demo" --served-model-name demo --port 0 \
    --ready-file "$CPL_T/wready" --page-size 16 > /dev/null 2> "$CPL_T/worker.log" &
wpid=$!
CPL_PIDS="$wpid"
i=0
while [ ! -s "$CPL_T/wready" ] && kill -0 "$wpid" 2> /dev/null && [ $i -lt 1200 ]; do
    sleep 0.05
    i=$((i + 1))
done
wport=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$CPL_T/wready" 2> /dev/null)
if [ -z "$wport" ]; then
    echo "Bail out! the worker did not start"
    sed 's/^/# /' "$CPL_T/worker.log" | tail -20
    exit 1
fi
cpl_start || {
    echo "Bail out! tandemd did not start"
    sed 's/^/# /' "$CPL_T/tandemd.log" | tail -20
    exit 1
}

big_file="$CPL_T/big.json"
python3 -c '
import sys
n = int(sys.argv[1])
head, tail = "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"", "\"}]}"
sys.stdout.write(head + "x" * (n - len(head) - len(tail)) + tail)' "$BIG" > "$big_file"

check() { # NAME URL
    out=$(node "$MJS" "$2/v1/chat/completions" "$BIG" 2>&1)
    case "$out" in "status 413"*) r=0 ;; *) r=1 ;; esac
    ok $r "$1: Node fetch of a 20 MB body reads the 413 ($out)"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
        --data-binary @"$big_file" "$2/v1/chat/completions")
    [ "$code" = 413 ]
    ok $? "$1: curl of a 20 MB body reads the 413 (got $code)"
    out=$(node "$MJS" "$2/v1/chat/completions" 9000000 2>&1)
    case "$out" in *"status 413"*body_too_large*) r=0 ;; *) r=1 ;; esac
    ok $r "$1: 9 MB (over the route's limit, under h2o's) gets the JSON 413 body_too_large ($out)"
    code=$(curl -s -o /dev/null -w '%{http_code}' "$2/health")
    [ "$code" = 200 ]
    ok $? "$1: /health answers 200 afterwards (got $code)"
}
check worker "http://127.0.0.1:$wport"
check tandemd "$url"

cpl_stop
kill -TERM "$wpid" 2> /dev/null
wait "$wpid"
ok $? "the worker exits cleanly after the lingering closes"
tap_done
