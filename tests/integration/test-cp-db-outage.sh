#!/bin/sh
# test-cp-db-outage.sh — detection does not depend on the database. A CPU worker of the
# tiny-llama3 fixture reports to a real tandemd whose PostgreSQL (the test's own tdm-pg cluster)
# is stopped for about 12 s:
#   no WORKER_LOST opens on the healthy group during the outage (its samples keep reaching the
#   ring while the stored batches wait for their commit);
#   a wedge injected during the outage (stall_loop on rank 0, then a request) is alerted as WEDGE
#   within 2x the rule's 3 s;
#   an action taken during the outage (resume on the group, an external one of --groups-config)
#   is audited once the database is back, with the id its reply gave;
#   once the database is back every event is stored exactly once (no (instance, rank, batch, idx)
#   twice; the clean stop's shutdown event once), samples taken during the outage are stored,
#   and no WORKER_LOST was stored for the group.
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
T=$(mktemp -d /tmp/cp-db-outage-XXXXXX)
chmod 0755 "$T"
tpid=""
wp=""
trap 'for p in $tpid $wp; do kill -9 $p 2>/dev/null; done; "$BUILD/tdm-pg" destroy "$T/pg" > /dev/null 2>&1; rm -rf "$T"' EXIT
export TDM_CPU_THREADS=1
G=outage-w
echo "0utage-t0ken" > "$T/wtoken"

"$BUILD/tdm-pg" start "$T/pg" > "$T/pg.env" 2>> "$T/pg.log"
ok $? "tdm-pg starts a private cluster"
. "$T/pg.env"
dsn="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=postgres dbname=postgres connect_timeout=2"
sql() { psql -X -q -tA -h "$TDM_TEST_PGHOST" -p "$TDM_TEST_PGPORT" -U postgres -d postgres -c "$1"; }
# the worker first (its group is an external one of tandemd's groups config, at its port), on
# tandemd's port picked beforehand; its reporter waits for tandemd
cp_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$cp_port"
mkdir -p "$T/state"
(umask 077 && echo "tdm_$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$T/state/admin.token")
admin=$(cat "$T/state/admin.token")
live() { # KIND [opened] → how many live alerts of KIND name the group (or the first's opened_us)
    curl -s -m 3 -H "Authorization: Bearer $admin" "$url/api/v1/alerts?source=live" | python3 -c '
import json, sys
a = [a for a in json.load(sys.stdin).get("alerts", []) if a.get("kind") == sys.argv[1] and a.get("group") == sys.argv[2]]
print((a[0]["opened_us"] if a else 0) if len(sys.argv) > 3 else len(a))' "$1" $G "$@" 2> /dev/null || echo 0
}

"$BIN" --model-path "$M" --device cpu --port 0 --ready-file "$T/wready" \
    --control-plane "$url" --control-plane-token-file "$T/state/admin.token" --group $G \
    --admin-token-file "$T/wtoken" --enable-fault-injection --drain-timeout 1 \
    > "$T/worker.log" 2>&1 &
wp=$!
i=0
while [ $i -lt 200 ] && [ ! -s "$T/wready" ]; do sleep 0.1; i=$((i + 1)); done
wport=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$T/wready")
printf '[group.%s]\nurl = http://127.0.0.1:%s\ntoken_file = %s\n' $G "$wport" "$T/wtoken" > "$T/groups.ini"
"$BUILD/tandemd" --listen "127.0.0.1:$cp_port" --state-dir "$T/state" --pg-dsn "$dsn" \
    --ready-file "$T/ready" --groups-config "$T/groups.ini" > "$T/tandemd.log" 2>&1 &
tpid=$!
i=0
while [ $i -lt 200 ] && [ ! -s "$T/ready" ]; do sleep 0.05; i=$((i + 1)); done
n_s=0
while [ $i -lt 150 ]; do
    n_s=$(sql "SELECT count(*) FROM samples WHERE group_name = '$G'" 2> /dev/null)
    [ "${n_s:-0}" -gt 0 ] && break
    sleep 0.1
    i=$((i + 1))
done
[ "${n_s:-0}" -gt 0 ]
ok $? "the worker's samples are stored ($n_s)"

t_out=$(date +%s%6N)
"$BUILD/tdm-pg" stop "$T/pg" > /dev/null 2>> "$T/pg.log"
ok $? "PostgreSQL stopped"
sleep 4
lost=$(live WORKER_LOST)
[ "$lost" = 0 ]
ok $? "4 s into the outage: no WORKER_LOST on the healthy group ($lost)"

code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H "Authorization: Bearer $(cat "$T/wtoken")" \
    "http://127.0.0.1:$wport/admin/faults" \
    -d '{"name":"stall_loop","rank":0,"count":1,"after_iter":0,"duration_ms":9000}')
curl -s -o /dev/null -m 20 "http://127.0.0.1:$wport/generate" \
    -d '{"input_ids":[1,5,9],"max_new_tokens":4}' &
t0=$(date +%s%6N)
w=0
while [ $(($(date +%s%6N) - t0)) -lt 12000000 ]; do
    w=$(live WEDGE opened)
    [ "$w" -gt 0 ] && break
    sleep 0.1
done
# from the request to the alert's opening (tandemd's clock; not the polling's pace)
dt=$(awk -v a="$w" -v b="$t0" 'BEGIN { printf "%.1f", (a > 0 ? (a - b) / 1e6 : 99) }')
[ "$code" = 200 ] && [ "$w" -gt 0 ] && awk -v d="$dt" 'BEGIN { exit !(d <= 6) }'
ok $? "a wedge injected during the outage (stall_loop armed: $code) is alerted as WEDGE within 6 s of the request (${dt} s)"
lost=$(live WORKER_LOST)
[ "$lost" = 0 ]
ok $? "still no WORKER_LOST on the group ($lost)"

curl -s -m 30 -H "Authorization: Bearer $admin" -X POST "$url/api/v1/groups/$G/resume" > "$T/resume"
aid=$(sed -n 's/.*"action_id": *\([0-9]*\).*/\1/p' "$T/resume")
grep -q '"outcome": *"ok"' "$T/resume"
ok $? "an action during the outage runs (resume: $(head -c 160 "$T/resume"))"
sleep 2
"$BUILD/tdm-pg" start "$T/pg" > /dev/null 2>> "$T/pg.log"
ok $? "PostgreSQL started again ($(awk -v a="$(date +%s%6N)" -v b="$t_out" 'BEGIN { printf "%.1f", (a - b) / 1e6 }') s outage)"
i=0
while [ $i -lt 200 ]; do
    curl -s -m 2 "$url/health" | grep -q '"db":"up"' && break
    sleep 0.1
    i=$((i + 1))
done
sleep 8 # stalled ends; the reporters' waiting batches are acknowledged
kill -TERM $wp
wait $wp
rc=$?
wp=""
ok $rc "the worker stops cleanly (rc $rc)"
i=0 # the shutdown event reaches the database (at most 30 s)
while [ $i -lt 300 ]; do
    [ "$(sql "SELECT count(*) FROM events WHERE group_name = '$G' AND type = 'shutdown'")" -ge 1 ] 2>/dev/null && break
    sleep 0.1
    i=$((i + 1))
done
dup=$(sql "SELECT count(*) - count(DISTINCT (instance_id, rank, batch_seq, idx)) FROM events WHERE group_name = '$G'")
shut=$(sql "SELECT count(*) FROM events WHERE group_name = '$G' AND type = 'shutdown'")
[ "$dup" = 0 ] && [ "$shut" = 1 ]
ok $? "every event stored exactly once ($dup duplicates; shutdown events: $shut)"
during=$(sql "SELECT count(*) FROM samples WHERE group_name = '$G' AND ts_us > $t_out + 1000000 AND ts_us < $t_out + 9000000")
[ "${during:-0}" -gt 0 ]
ok $? "samples taken during the outage are stored once it is over ($during)"
arow=$(sql "SELECT count(*) FROM actions WHERE action = 'resume' AND target = '$G' AND outcome = 'ok' AND id = ${aid:-0}")
[ "$arow" = 1 ]
ok $? "the action taken during the outage is in the audit log, under the id its reply gave (${aid:-none}: $arow row)"
stored_lost=$(sql "SELECT count(*) FROM alerts WHERE kind = 'WORKER_LOST' AND group_name = '$G'")
[ "$stored_lost" = 0 ]
ok $? "no WORKER_LOST stored for the group ($stored_lost)"
[ $fail = 0 ] || { sed 's/^/# tandemd: /' "$T/tandemd.log" | grep -v "msg=\"database connected\"" | tail -12; tail -5 "$T/worker.log" | sed 's/^/# worker: /'; }
kill -TERM $tpid
wait $tpid
tpid=""
tap_done
