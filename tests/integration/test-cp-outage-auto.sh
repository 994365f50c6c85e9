#!/bin/sh
# test-cp-outage-auto.sh — a PostgreSQL outage under the auto policy on supervised groups
# (docs/design.md §5, docs/alerts.md). tandemd (--alert-policy all=auto, its own tdm-pg cluster)
# supervises two CPU groups of the tiny-llama3 fixture, h and w, each on a port of its own; h
# serves a steady load (a /generate every ~0.2 s) throughout. The cluster is stopped for
# TDM_OUTAGE_S seconds (10 in make check; 60 in `make check-reliability-long`):
#   no WORKER_LOST on either group and no action on the healthy group h (the policy would restart
#   it): detection runs from the ring, not the database;
#   a wedge injected on w during the outage (stall_loop, then a request) is alerted as WEDGE
#   within 2x the rule's 3 s, and the policy's remedy (reconfigure overlap=off) runs;
#   h's load is answered 200 throughout;
#   once the database is back: every event stored exactly once, samples taken during the outage
#   stored, the audit log complete (the remedy's row, nothing pending, nothing on h but its
#   start) and no WORKER_LOST stored.
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
tap_need_exec "$BIN"
tap_need_exec "$BUILD/tandemd"
tap_need_exec "$BUILD/tdm-pg"
if [ -z "${TDM_TEST_PGHOST:-}" ]; then
    echo "Bail out! no test PostgreSQL (run under make check)"
    exit 1
fi
M="$SRC/tests/fixtures/models/tiny-llama3"
OUT_S=${TDM_OUTAGE_S:-10}
T=$(mktemp -d /tmp/cp-outage-auto-XXXXXX)
chmod 0755 "$T"
tpid=""
lpid=""
cleanup() {
    for p in $tpid $lpid; do kill -9 $p 2> /dev/null; done
    for r in "$T"/state/groups/*/record.json; do
        [ -f "$r" ] || continue
        p=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$r")
        [ -n "$p" ] && kill -9 "-$p" "$p" 2> /dev/null
    done
    "$BUILD/tdm-pg" destroy "$T/pg" > /dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
export TDM_CPU_THREADS=1
now_us() { date +%s%6N; }

"$BUILD/tdm-pg" start "$T/pg" > "$T/pg.env" 2>> "$T/pg.log"
ok $? "tdm-pg starts a private cluster"
. "$T/pg.env"
dsn="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=postgres dbname=postgres connect_timeout=2"
sql() { psql -X -q -tA -h "$TDM_TEST_PGHOST" -p "$TDM_TEST_PGPORT" -U postgres -d postgres -c "$1"; }
set -- $(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
ph=$1
pw=$2
for g in h w; do
    printf '[group.%s]\nport = %s\nmodel_path = %s\ndevice = cpu\nkv_cpu_bytes = 4194304\ndrain_timeout = 1\nenable_fault_injection = true\n' \
        $g "$([ $g = h ] && echo "$ph" || echo "$pw")" "$M"
done > "$T/groups.ini"
"$BUILD/tandemd" --listen 127.0.0.1:0 --state-dir "$T/state" --pg-dsn "$dsn" \
    --ready-file "$T/ready" --groups-config "$T/groups.ini" --worker-bin "$BIN" \
    --alert-policy all=auto > "$T/tandemd.log" 2>&1 &
tpid=$!
i=0
while [ $i -lt 200 ] && [ ! -s "$T/ready" ]; do sleep 0.05; i=$((i + 1)); done
url="http://127.0.0.1:$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$T/ready")"
admin=$(cat "$T/state/admin.token" 2> /dev/null)
api() { curl -s -m 5 -H "Authorization: Bearer $admin" "$@"; }
ready() { # group → 1 when running and ready
    api "$url/api/v1/status" | python3 -c '
import json, sys
g = [g for g in json.load(sys.stdin)["groups"] if g["name"] == sys.argv[1]]
print(int(bool(g and g[0]["ready"] and g[0]["state"] == "running")))' "$1" 2> /dev/null
}
live() { # KIND GROUP [opened] → how many live alerts of KIND name GROUP (or the newest's opened_us)
    api "$url/api/v1/alerts?source=live" | python3 -c '
import json, sys
a = sorted((a for a in json.load(sys.stdin).get("alerts", []) if a.get("kind") == sys.argv[1] and a.get("group") == sys.argv[2]), key=lambda a: a["id"])
print((a[-1]["opened_us"] if a else 0) if len(sys.argv) > 3 else len(a))' "$@" 2> /dev/null || echo 0
}
i=0
while [ $i -lt 300 ] && { [ "$(ready h)" != 1 ] || [ "$(ready w)" != 1 ]; }; do sleep 0.2; i=$((i + 1)); done
n_s=0
while [ $i -lt 400 ]; do
    n_s=$(sql "SELECT count(DISTINCT group_name) FROM samples" 2> /dev/null)
    [ "${n_s:-0}" = 2 ] && break
    sleep 0.1
    i=$((i + 1))
done
[ "$(ready h)" = 1 ] && [ "$(ready w)" = 1 ] && [ "${n_s:-0}" = 2 ]
ok $? "tandemd starts both supervised groups; their samples are stored"

# steady load on h until $T/stop appears: one code a line
(
    while [ ! -e "$T/stop" ]; do
        curl -s -o /dev/null -w '%{http_code}\n' -m 20 "http://127.0.0.1:$ph/generate" \
            -d '{"input_ids":[1,5,9],"max_new_tokens":8}'
        sleep 0.2
    done
) > "$T/codes" &
lpid=$!

t_out=$(now_us)
"$BUILD/tdm-pg" stop "$T/pg" > /dev/null 2>> "$T/pg.log"
ok $? "PostgreSQL stopped (outage of ${OUT_S} s)"
sleep 3
l=$(($(live WORKER_LOST h) + $(live WORKER_LOST w)))
[ "$l" = 0 ]
ok $? "3 s into the outage: no WORKER_LOST on either group ($l)"

code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H "Authorization: Bearer $admin" \
    "http://127.0.0.1:$pw/admin/faults" \
    -d '{"name":"stall_loop","rank":0,"count":1,"after_iter":0,"duration_ms":6000}')
curl -s -o /dev/null -m 30 "http://127.0.0.1:$pw/generate" -d '{"input_ids":[1,5,9],"max_new_tokens":4}' &
t0=$(now_us)
w=0
while [ $(($(now_us) - t0)) -lt 12000000 ]; do
    w=$(live WEDGE w opened)
    [ "${w:-0}" -gt 0 ] && break
    sleep 0.1
done
dt=$(awk -v a="${w:-0}" -v b="$t0" 'BEGIN { printf "%.1f", (a > 0 ? (a - b) / 1e6 : 99) }')
[ "$code" = 200 ] && [ "${w:-0}" -gt 0 ] && awk -v d="$dt" 'BEGIN { exit !(d <= 6) }'
ok $? "a wedge injected on w during the outage (stall_loop armed: $code) is alerted as WEDGE within 6 s ($dt s)"

# the rest of the outage: the healthy group stays alone
max_lost=0
while [ $(($(now_us) - t_out)) -lt $((OUT_S * 1000000)) ]; do
    l=$(live WORKER_LOST h)
    [ "${l:-0}" -gt "$max_lost" ] && max_lost=$l
    sleep 0.5
done
"$BUILD/tdm-pg" start "$T/pg" > /dev/null 2>> "$T/pg.log"
ok $? "PostgreSQL started again ($(awk -v a="$(now_us)" -v b="$t_out" 'BEGIN { printf "%.1f", (a - b) / 1e6 }') s outage)"
[ "$max_lost" = 0 ] && [ "$(live WORKER_LOST h)" = 0 ] && [ "$(live WORKER_LOST w)" = 0 ]
ok $? "no WORKER_LOST on either group through the outage (h: at most $max_lost)"
i=0
while [ $i -lt 200 ]; do
    curl -s -m 2 "$url/health" | grep -q '"db":"up"' && break
    sleep 0.1
    i=$((i + 1))
done
remedy() {
    sql "SELECT count(*) FROM actions WHERE actor = 'policy:WEDGE' AND target = 'w' AND action = 'reconfigure' AND outcome = 'ok' AND finished_us >= ts_us" 2> /dev/null
}
i=0
while [ $i -lt 300 ] && { [ "$(remedy)" != 1 ] || [ "$(ready w)" != 1 ]; }; do sleep 0.2; i=$((i + 1)); done
[ "$(remedy)" = 1 ] && [ "$(ready w)" = 1 ]
ok $? "the policy's remedy for the wedge (reconfigure overlap=off of w) ran and is in the audit log; w serves again"
sleep 3 # the reporters' waiting batches are acknowledged
touch "$T/stop"
wait $lpid
lpid=""
n_req=$(grep -c . "$T/codes")
n_200=$(grep -c '^200$' "$T/codes")
[ "$n_req" -gt 0 ] && [ "$n_req" = "$n_200" ]
ok $? "the healthy group answered its steady load throughout: $n_200/$n_req requests 200"
on_h=$(sql "SELECT count(*) FROM actions WHERE target = 'h' AND NOT (actor = 'supervisor' AND action = 'start')")
pend=$(sql "SELECT count(*) FROM actions WHERE outcome = 'pending' OR finished_us IS NULL")
[ "$on_h" = 0 ] && [ "$pend" = 0 ]
ok $? "audit log: no action on the healthy group but its start ($on_h), none pending ($pend)"
dup=$(sql "SELECT count(*) - count(DISTINCT (instance_id, rank, batch_seq, idx)) FROM events")
during=$(sql "SELECT count(*) FROM samples WHERE group_name = 'h' AND ts_us > $t_out + 1000000 AND ts_us < $t_out + ($OUT_S - 1) * 1000000")
[ "$dup" = 0 ] && [ "${during:-0}" -gt 0 ]
ok $? "every event stored exactly once ($dup duplicates), h's outage samples stored ($during)"
lost=$(sql "SELECT count(*) FROM alerts WHERE kind = 'WORKER_LOST'")
wedge=$(sql "SELECT count(*) FROM alerts WHERE kind = 'WEDGE' AND group_name = 'w'")
[ "$lost" = 0 ] && [ "$wedge" = 1 ]
ok $? "stored alerts: the WEDGE once ($wedge), no WORKER_LOST ($lost)"
echo "# audit log (actor|action|target|outcome):"
sql "SELECT actor, action, target, outcome FROM actions ORDER BY id" | sed 's/^/#   /'
[ $fail = 0 ] || sed 's/^/# tandemd: /' "$T/tandemd.log" | grep -v -e 'msg="event"' -e 'database connected' | tail -20
kill -TERM $tpid
wait $tpid
tpid=""
tap_done
