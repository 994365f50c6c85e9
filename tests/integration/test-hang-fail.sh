#!/bin/sh
# test-hang-fail.sh — a request ends in tokens or an explicit error, never a hang:
#   a TP=2 CPU group of the tiny-llama3 fixture (--health-progress-timeout T = 1 s) with 2 open
#   streams is deadlocked by rank_idle_path on rank 1 (rank 0 waits in a collective forever):
#   both streams end with an error event naming the lack of progress, and [DONE], within 2T
#   (+ slack) of the arm; a new request to the stuck group is answered 503 at once;
#   a decode group whose prefill group never registered answers a streamed request with 503
#   before any stream starts (not 200 and an SSE error).
# The client is python3's standard library.
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/worker-lib.sh"
echo "h4ng-f41l" > "$T/token"
TIMEOUT=1
now() { awk '{ print $1 }' /proc/uptime; }

start() { # tag flags... → port
    tag=$1
    shift
    worker_start "$T/log-$tag" --admin-token-file "$T/token" "$@"
}

cat > "$T/client.py" << 'PY'
# argv: port token. Opens 2 streams, waits for a token on each, arms rank_idle_path on rank 1,
# reads both to their end; prints "stream i: <seconds after the arm> <last two data lines>", then
# sends one more request and prints "new: <status> <seconds>".
import json, socket, sys, time, urllib.request, urllib.error
port, token = int(sys.argv[1]), open(sys.argv[2]).read().strip()
body = json.dumps({"input_ids": [1, 5, 9, 13], "max_new_tokens": 480, "ignore_eos": True,
                   "stream": True, "sampling": {"temperature": 0}}).encode()
streams = []
for i in range(2):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    streams.append([s, b""])
for st in streams:
    while b"token_id" not in st[1]:
        st[1] += st[0].recv(65536)
req = urllib.request.Request("http://127.0.0.1:%d/admin/faults" % port, method="POST",
                             data=json.dumps({"name": "rank_idle_path", "rank": 1}).encode(),
                             headers={"Authorization": "Bearer " + token})
print("armed: %d" % urllib.request.urlopen(req).status)
t0 = time.time()
for i, st in enumerate(streams):
    try:
        while b"[DONE]" not in st[1]:
            d = st[0].recv(65536)
            if not d:
                break
            st[1] += d
    except OSError as e:
        print("# stream %d: %s" % (i, e))
    lines = [l for l in st[1].decode("utf-8", "replace").split("\n") if l.startswith("data: ")]
    print("stream %d: %.2f %s" % (i, time.time() - t0, " | ".join(lines[-2:])))
t1 = time.time()
try:
    r = urllib.request.urlopen(urllib.request.Request(
        "http://127.0.0.1:%d/generate" % port, data=body.replace(b'"stream": true', b'"stream": false')),
        timeout=10)
    print("new: %d %.2f" % (r.status, time.time() - t1))
except urllib.error.HTTPError as e:
    print("new: %d %.2f %s" % (e.code, time.time() - t1, e.read().decode()[:200]))
except OSError as e:
    print("new: 0 %.2f %s" % (time.time() - t1, e))
PY

start stuck --tp-size 2 --enable-fault-injection --health-progress-timeout $TIMEOUT --drain-timeout 1
if [ -z "$port" ]; then
    ok 1 "the TP=2 group starts"
    sed 's/^/# /' "$T/log-stuck" | tail -20
else
    timeout 60 python3 "$T/client.py" "$port" "$T/token" > "$T/out" 2>&1
    sed 's/^/# /' "$T/out"
    n_err=0
    for i in 0 1; do
        line=$(grep "^stream $i: " "$T/out")
        secs=$(echo "$line" | awk '{ print $3 }')
        echo "$line" | grep -q '"error".*progress.*\[DONE\]' &&
            awk -v s="${secs:-99}" -v t=$TIMEOUT 'BEGIN { exit !(s <= 2 * (2 * t) + 1) }' &&
            n_err=$((n_err + 1))
    done
    [ $n_err = 2 ]
    ok $? "deadlocked group: both open streams end with an error naming the lack of progress, then [DONE], within 2T (+ 2x slack) of the arm ($n_err/2)"
    grep -Eq "^new: 503 [0-2]\." "$T/out"
    ok $? "a new request to the stuck group is answered 503 at once ($(grep '^new:' "$T/out" | cut -c1-60))"
    # the launcher killed -9 inside the deadlock: its ranks get SIGTERM from the kernel, cannot
    # finish a clean stop (rank 0 waits in the collective), and leave by themselves past the
    # drain (1 s) and the orphan bound (10 s) instead of holding the port for good
    t0=$(now)
    kill -9 $lp 2> /dev/null
    wait $lp 2> /dev/null
    lp=""
    i=0
    while [ $i -lt 440 ] && pgrep -f -- "--ready-file $T/ready" > /dev/null; do
        sleep 0.05
        i=$((i + 1))
    done
    left=$(pgrep -f -- "--ready-file $T/ready" | tr '\n' ' ')
    [ -z "$left" ]
    ok $? "launcher killed -9 inside the deadlock: both ranks exit by themselves within 2 x 11 s ($(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'); left: ${left:-none})"
    grep -q "the launcher is gone and the stop did not complete" "$T/log-stuck"
    ok $? "the orphaned ranks say why they exit"
    [ -n "$left" ] && kill -9 $left 2> /dev/null
fi

# a decode group whose prefill never registers (nothing listens at its address)
start decode --disaggregation-mode decode --disaggregation-prefill-addr 127.0.0.1:9 \
    --kv-cpu-bytes 8388608
if [ -z "$port" ]; then
    ok 1 "the decode group starts"
    sed 's/^/# /' "$T/log-decode" | tail -20
else
    code=$(curl -s -o "$T/dec-body" -w '%{http_code}' -m 10 "http://127.0.0.1:$port/generate" \
        -d '{"input_ids":[1,5,9],"max_new_tokens":4,"stream":true}')
    echo "# $(head -c 300 "$T/dec-body")"
    [ "$code" = 503 ] && grep -q '"error"' "$T/dec-body" && ! grep -q '^data:' "$T/dec-body"
    ok $? "decode with no prefill group registered: 503 before the stream starts (got $code)"
    kill -TERM $lp
    wait $lp
    lp=""
fi
tap_done
