#!/bin/sh
# test-cp-act.sh — tandemd's actions on real CPU workers it supervises(docs/design.md §5):
# the /v1 router (plain, streaming, unknown model 404, none ready 503 + Retry-After), a drain of
# one of two groups under load with 0 failed requests, reconfigure overlap=off (config version,
# override file, the worker restarts in the lockstep loop), reconfigure hicache on (REST) then off
# (tandemctl): each a drain → restart with the override, the restarted worker's /metrics
# tandem_hicache_enabled follows, config versions stored; restart, kill -9 of a rank →
# WORKER_LOST → supervisor restart, re-adoption after tandemd restarts, every action in the
# audit log with timestamps; then faults → telemetry → detectors → alerts → policy actions
# (stall_loop → WEDGE → reconfigure overlap=off; rank_idle_path on rank 1 → RANK_DIVERGENCE naming
# rank 1 and the op → reconfigure overlap=off → lockstep loop → serving again).
set -u
: "${TDM_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${TDM_BUILDDIR:=$(pwd)}"
if [ -z "${TDM_TEST_PGHOST:-}" ] || [ -z "${TDM_TEST_PGPORT:-}" ] || [ -z "${TDM_TEST_PGUSER:-}" ]; then
    echo "Bail out! no test PostgreSQL (TDM_TEST_PGHOST/PORT/USER unset; run under make check)"
    exit 1
fi
worker="$TDM_BUILDDIR/tandem-worker"
model="$TDM_SRCDIR/models/demo"
if [ ! -x "$worker" ] || [ ! -x "$TDM_BUILDDIR/tandemd" ] || [ ! -f "$model/model.safetensors" ]; then
    echo "Bail out! tandem-worker or tandemd not built, or no demo model in $model"
    exit 1
fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
tmp=$(mktemp -d)
db=test_cp_act_$$
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h "$TDM_TEST_PGHOST" -p "$TDM_TEST_PGPORT" -U "$TDM_TEST_PGUSER" "$@"; }
dsn="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=$TDM_TEST_PGUSER dbname=$db"
tpid=
cleanup() {
    [ -n "$tpid" ] && kill "$tpid" 2>/dev/null && wait "$tpid" 2>/dev/null
    for r in "$tmp"/state/groups/*/record.json; do
        [ -f "$r" ] || continue
        p=$($PY -c "import json,sys;print(json.load(open(sys.argv[1]))['pid'])" "$r")
        kill "$p" 2>/dev/null
    done
    sleep 1
    psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
psql_ -d postgres -c "CREATE DATABASE $db" >/dev/null || { echo "Bail out! cannot create a database"; exit 1; }

echo "1..34"
n=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }
check() { if eval "$1"; then ok 0 "$2"; else ok 1 "$2"; fi; }

# two colocated groups: each on a port of its own (docs/groups.md "Ports"), kept across restarts
set -- $($PY -c "
import socket
ss=[socket.socket() for _ in range(2)]
for s in ss: s.bind(('127.0.0.1',0))
print(' '.join(str(s.getsockname()[1]) for s in ss))")
cat >"$tmp/groups.ini" <<EOF
[group.a]
port = $1
model_path = $model
device = cpu
kv_cpu_bytes = 16777216
enable_fault_injection = true
[group.b]
port = $2
model_path = $model
device = cpu
kv_cpu_bytes = 16777216
tp_size = 2
enable_fault_injection = true
EOF

start_tandemd() {
    rm -f "$tmp/ready"
    # a restarted tandemd comes back on its port, as in production: re-adopted workers keep
    # posting telemetry to the URL they were started with
    "$TDM_BUILDDIR/tandemd" --listen "127.0.0.1:${cp_port:-0}" --state-dir "$tmp/state" --pg-dsn "$dsn" \
        --ready-file "$tmp/ready" --groups-config "$tmp/groups.ini" --worker-bin "$worker" \
        --canary-interval 2 --alert-policy "WEDGE=auto,RANK_DIVERGENCE=auto" >>"$tmp/tandemd.log" 2>&1 &
    tpid=$!
    for _ in $(seq 1 100); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
    cp_port=$($PY -c "import json;print(json.load(open('$tmp/ready'))['http'])")
    url="http://127.0.0.1:$cp_port"
}
j() { $PY -c "import json,sys;d=json.load(sys.stdin);print($1)"; }
api() { curl -s -H "Authorization: Bearer $(cat "$tmp/state/admin.token")" "$@"; }
wait_ready() { # group...
    for _ in $(seq 1 300); do
        all=1
        for g in "$@"; do
            r=$(api "$url/api/v1/status" | j "[x['ready'] and x['state']=='running' for x in d['groups'] if x['name']=='$g'][0]" 2>/dev/null)
            [ "$r" = True ] || all=0
        done
        [ $all = 1 ] && return 0
        sleep 0.2
    done
    return 1
}
complete() { # → http code
    curl -s -o "$tmp/out" -w "%{http_code}" "$url/v1/completions" \
        -d "{\"model\":\"$model\",\"prompt\":\"Hello there\",\"max_tokens\":${1:-8},\"temperature\":0}"
}
sql() { psql_ -d "$db" -At -c "$1"; }
last_start() { # group → its worker.log from the last launch on
    awk '/launching/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' "$tmp/state/groups/$1/worker.log"
}

start_tandemd
check "wait_ready a b" "tandemd starts both supervised groups (TP=1 and TP=2) and they become ready"
check "[ \$(sql \"SELECT count(*) FROM actions WHERE actor='supervisor' AND action='start' AND outcome='ok' AND finished_us >= ts_us\") = 2 ]" \
    "both starts are in the audit log with outcome and timestamps"

# ---- router ----
check "[ \"\$(complete)\" = 200 ] && grep -q '\"text_completion\"' $tmp/out" "router: /v1/completions through tandemd"
curl -sN "$url/v1/chat/completions" -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"stream\":true}" >"$tmp/sse"
check "[ \$(grep -c '^data: {' $tmp/sse) -ge 2 ] && grep -q '^data: \[DONE\]' $tmp/sse" "router: streaming chat completion, chunk by chunk"
code=$(curl -s -o "$tmp/out" -w "%{http_code}" "$url/v1/completions" -d '{"model":"no-such-model","prompt":"x"}')
check "[ $code = 404 ] && grep -q model_not_found $tmp/out" "router: unknown model → 404 model_not_found"
check "curl -s $url/v1/models | grep -q '\"$model\"'" "router: /v1/models lists the served model"

# ---- drain under load: 0 failed requests, and the load provably overlapped the drain ----
# The load generator sends requests back to back until told to stop (after the drain returned),
# one line per request: "<http code> <sent at> <answered at>" (seconds, date +%s.%N).
ts() { date +%s.%N; }
(i=0; while [ ! -e "$tmp/load-stop" ] && [ $i -lt 2000 ]; do
    t0=$(ts); c=$(complete 12); echo "$c $t0 $(ts)"; i=$((i + 1)); done >"$tmp/codes") &
load=$!
for _ in $(seq 1 300); do [ -s "$tmp/codes" ] && break; sleep 0.1; done # the load is under way
drain_start=$(ts)
api -X POST "$url/api/v1/groups/a/drain" >"$tmp/drain"
drain_end=$(ts)
touch "$tmp/load-stop"
wait $load
check "[ \"\$(j \"d['outcome']\" <$tmp/drain)\" = ok ]" "drain of group a completes (tandem_drained)"
# the load spans the drain: its first request was sent before the drain began and its last one
# answered after the drain returned (and how many were answered during the drain is shown)
read -r o_before o_after o_inside <<EOF
$(awk -v a="$drain_start" -v b="$drain_end" '
    NR == 1 { first = $2 } { last = $3; if ($3 > a && $3 < b) inside++ }
    END { printf "%d %d %d\n", (NR > 0 && first < a), (NR > 0 && last > b), inside + 0 }' "$tmp/codes")
EOF
check "[ $o_before = 1 ] && [ $o_after = 1 ]" \
    "the load overlapped the drain: first request sent before it ($o_before), last answered after it ($o_after), $o_inside answered during it"
total=$(wc -l <"$tmp/codes")
ok200=$(grep -c '^200 ' "$tmp/codes")
check "[ $total -ge 2 ] && [ $ok200 = $total ]" \
    "router kept serving through the drain: $ok200/$total requests answered 200, 0 failed"
api -X POST "$url/api/v1/groups/b/drain" >/dev/null
code=$(curl -s -D "$tmp/hdr" -o "$tmp/out" -w "%{http_code}" "$url/v1/completions" -d "{\"model\":\"$model\",\"prompt\":\"x\"}")
check "[ $code = 503 ] && grep -qi '^retry-after' $tmp/hdr" "no ready group → 503 with Retry-After"

# ---- reconfigure, restart ----
api -X POST "$url/api/v1/groups/a/reconfigure" -d '{"overlap":"off"}' >"$tmp/rc"
check "[ \"\$(j \"d['outcome']\" <$tmp/rc)\" = ok ] && grep -q 'disable_overlap_schedule = true' $tmp/state/groups/a/override.ini" \
    "reconfigure overlap=off: override file written, drain → restart ok"
check "last_start a | grep -q 'lockstep loop'" "the restarted worker runs the normal (non-overlap) loop"
check "[ \$(sql \"SELECT config->>'overlap' FROM config_versions WHERE group_name='a' ORDER BY id DESC LIMIT 1\") = off ]" \
    "config version stored in Postgres"
# HiCache on through the REST API, off through tandemctl: drain → restart with the new flags
hc_metric() { # group → tandem_hicache_enabled on the group's worker
    p=$($PY -c "import json;print(json.load(open('$tmp/state/groups/$1/ready.json'))['http'])")
    curl -s "http://127.0.0.1:$p/metrics" | awk '$1 == "tandem_hicache_enabled" { print $2 }'
}
api -X POST "$url/api/v1/groups/a/reconfigure" -d '{"hicache":"on"}' >"$tmp/rc"
check "[ \"\$(j \"d['outcome']\" <$tmp/rc)\" = ok ] && grep -q 'enable_hierarchical_cache = true' $tmp/state/groups/a/override.ini && wait_ready a" \
    "reconfigure hicache=on (REST): override file written, drain → restart ok"
check "[ \"\$(hc_metric a)\" = 1 ] && [ \$(sql \"SELECT config->>'hicache' FROM config_versions WHERE group_name='a' ORDER BY id DESC LIMIT 1\") = on ]" \
    "the restarted worker serves with HiCache on (/metrics tandem_hicache_enabled 1), config version stored"
"$TDM_BUILDDIR/tandemctl" --url "$url" --token-file "$tmp/state/admin.token" set a hicache off >"$tmp/rcoff" 2>&1
check "wait_ready a && grep -q 'enable_hierarchical_cache = false' $tmp/state/groups/a/override.ini && [ \"\$(complete)\" = 200 ]" \
    "tandemctl set a hicache off: drain → restart, serving again"
check "[ \"\$(hc_metric a)\" = 0 ] && [ \$(sql \"SELECT config->>'hicache' FROM config_versions WHERE group_name='a' ORDER BY id DESC LIMIT 1\") = off ]" \
    "the restarted worker serves with HiCache off (/metrics tandem_hicache_enabled 0), config version stored"
api -X POST "$url/api/v1/groups/b/restart" >"$tmp/rs"
check "[ \"\$(j \"d['outcome']\" <$tmp/rs)\" = ok ] && wait_ready a b" "restart of the drained group b; both serve again"
code=$(api -X POST -o /dev/null -w "%{http_code}" "$url/api/v1/groups/a/reconfigure" -d '{"tp_size":4}')
check "[ $code = 400 ]" "reconfigure of a setting that is not reconfigurable → 400"

# ---- kill -9 of a rank → WORKER_LOST → restart ----
bpid=$($PY -c "import json;print(json.load(open('$tmp/state/groups/b/record.json'))['pid'])")
rank=$(pgrep -P "$bpid" | tail -n 1)
kill -9 "$rank"
for _ in $(seq 1 100); do api "$url/api/v1/alerts?source=live" | grep -q WORKER_LOST && break; sleep 0.1; done
check "api '$url/api/v1/alerts?source=live' | grep -q '\"WORKER_LOST\"'" "kill -9 of rank → WORKER_LOST alert"
# the audit row commits on tandemd's DB thread after the worker is ready again: poll it (≤ 10 s)
sup_rows() { sql "SELECT count(*) FROM actions WHERE actor='supervisor' AND action='restart' AND target='b' AND outcome='ok' AND finished_us >= ts_us"; }
wait_ready b && for _ in $(seq 1 100); do [ "$(sup_rows)" -ge 1 ] 2>/dev/null && break; sleep 0.1; done
check "wait_ready b && [ \$(sup_rows) -ge 1 ]" \
    "the supervisor restarted group b (audit row) and it serves again"
check "[ \"\$(complete)\" = 200 ]" "serving after the restart"

# ---- tandemctl ----
ctl() { "$TDM_BUILDDIR/tandemctl" --url "$url" --token-file "$tmp/state/admin.token" "$@"; }
ctl status >"$tmp/st" 2>&1
check "grep -q '^a  *supervised  *null  *running  *ok ' $tmp/st && grep -q '^b  *supervised' $tmp/st" "tandemctl status: table of groups"
ctl --json alerts | $PY -c "import json,sys;d=json.load(sys.stdin);sys.exit(0 if any(a['kind']=='WORKER_LOST' for a in d['alerts']) else 1)"
check "[ $? = 0 ]" "tandemctl --json alerts: JSON with the WORKER_LOST alert"

# ---- tandemd restart: re-adoption ----
apid=$($PY -c "import json;print(json.load(open('$tmp/state/groups/a/record.json'))['pid'])")
kill "$tpid"; wait "$tpid"; tpid=
start_tandemd
check "wait_ready a b && grep -q 're-adopted worker group\" group=a pid=$apid' $tmp/tandemd.log" \
    "a restarted tandemd re-adopts its running workers (same pid)"
check "[ \"\$(complete)\" = 200 ]" "router serves through re-adopted groups"
check "[ \$(sql \"SELECT count(*) FROM actions WHERE outcome='pending' OR finished_us IS NULL\") = 0 ]" \
    "no audit row left pending"

# ---- faults → alerts → actions: the detector chain end to end ----
# Fault bodies are {"name", "rank", "count", "after_iter", "duration_ms"} (docs/contracts.md §e).
# Work goes straight to the faulted group's worker, so the router cannot send it elsewhere.
fresh_ranks() { api "$url/api/v1/status" | j "len([r for r in d['ranks'] if r['age_ms'] < 1000 and r['group'] in ('a','b')])" 2>/dev/null; }
for _ in $(seq 1 50); do [ "$(fresh_ranks)" = 3 ] && break; sleep 0.1; done
check "[ \"\$(fresh_ranks)\" = 3 ]" "telemetry: the three ranks of groups a and b report to tandemd"
tok=$(cat "$tmp/state/admin.token")
arm() { # url body → the worker's answer
    curl -s -H "Authorization: Bearer $tok" "$1/admin/faults" -d "$2"
}
alert_field() { # kind group expr → expr over the newest live alert of that kind on that group
    api "$url/api/v1/alerts?source=live" |
        j "([$3 for a in sorted((x for x in d['alerts'] if x['kind']=='$1' and x['group']=='$2'), key=lambda x: x['id'])][-1:] or [''])[0]" 2>/dev/null
}
policy_done() { # kind group → 1 once the policy's reconfigure (overlap off) is in the audit log, ok, timed
    sql "SELECT count(*) FROM actions WHERE actor='policy:$1' AND target='$2' AND action='reconfigure'
         AND outcome='ok' AND params->>'overlap'='off' AND finished_us >= ts_us AND ts_us > 0"
}
now_us() { $PY -c "import time;print(int(time.time()*1e6))"; }
admin_url() { api "$url/api/v1/status" | j "[x['admin_url'] for x in d['groups'] if x['name']=='$1'][0]"; }
serve() { # group → http code of a /generate on the group's current worker
    curl -s -o /dev/null -w '%{http_code}' "$(admin_url "$1")/generate" -d '{"input_ids":[2,3],"max_new_tokens":4}'
}

# (a) stall_loop on rank 0 of group a while it serves a stream → WEDGE (rule: min iter unchanged
# 3 s with work pending; ≤5 s) → policy auto: reconfigure overlap=off → serving again
aurl=$(admin_url a)
curl -sN -m 60 "$aurl/generate" -d '{"input_ids":[2,3,4,5],"max_new_tokens":2000,"ignore_eos":true,"stream":true}' >"$tmp/gen_a" 2>/dev/null &
gen_a=$!
for _ in $(seq 1 400); do grep -q token_id "$tmp/gen_a" 2>/dev/null && break; sleep 0.05; done
t_arm=$(now_us)
arm "$aurl" '{"name":"stall_loop","rank":0,"count":1,"after_iter":0,"duration_ms":6000}' >"$tmp/arm_a"
check "grep -q '\"armed\":true' $tmp/arm_a && grep -q token_id $tmp/gen_a" "stall_loop armed on rank 0 of group a while it serves a stream"
for _ in $(seq 1 150); do [ -n "$(alert_field WEDGE a "a['opened_us']")" ] && break; sleep 0.1; done
w_open=$(alert_field WEDGE a "a['opened_us']")
w_pend=$(alert_field WEDGE a "a['evidence']['pending']")
echo "# WEDGE opened $(( (${w_open:-0} - t_arm) / 1000 )) ms after the arm: $(alert_field WEDGE a "a['summary']")"
check "[ -n \"$w_open\" ] && [ \$(( $w_open - $t_arm )) -le 10000000 ] && [ \"${w_pend:-0}\" -ge 1 ]" \
    "stall_loop → WEDGE on group a within 5 s (2x slack) of the stall, evidence shows the pending work"
for _ in $(seq 1 150); do [ "$(policy_done WEDGE a)" -ge 1 ] && break; sleep 0.2; done
check "[ \$(policy_done WEDGE a) -ge 1 ] && wait_ready a && last_start a | grep -q 'lockstep loop' && [ \"\$(serve a)\" = 200 ]" \
    "WEDGE → policy reconfigure overlap=off of a (audit row: actor, outcome, timestamps) → lockstep loop → serving again"
wait $gen_a

# (b) rank_idle_path on rank 1 of the TP=2 group b → RANK_DIVERGENCE naming rank 1 and the op
# (≤2 s) → policy auto: reconfigure overlap=off → b restarts in the lockstep loop → serving again
burl=$(admin_url b)
arm "$burl" '{"name":"rank_idle_path","rank":1,"count":0,"after_iter":0}' >"$tmp/arm_b"
t_req=$(now_us)
curl -s -m 60 "$burl/generate" -d '{"input_ids":[2,3,4,5],"max_new_tokens":8}' >/dev/null 2>&1 &
gen_b=$!
for _ in $(seq 1 100); do [ -n "$(alert_field RANK_DIVERGENCE b "a['opened_us']")" ] && break; sleep 0.1; done
d_open=$(alert_field RANK_DIVERGENCE b "a['opened_us']")
d_min=$(alert_field RANK_DIVERGENCE b "a['evidence']['minority_ranks']")
d_op=$(alert_field RANK_DIVERGENCE b "a['evidence']['op']")
echo "# RANK_DIVERGENCE opened $(( (${d_open:-0} - t_req) / 1000 )) ms after the request: $(alert_field RANK_DIVERGENCE b "a['summary']")"
check "grep -q '\"armed\":true' $tmp/arm_b && [ -n \"$d_open\" ] && [ \$(( $d_open - $t_req )) -le 4000000 ] && [ \"$d_min\" = '[1]' ] && echo ' $d_op' | grep -Eq ' (allreduce|allgather|broadcast)$'" \
    "rank_idle_path on rank 1 → RANK_DIVERGENCE within 2 s (+2 s slack) naming rank 1 and the op ($d_op)"
for _ in $(seq 1 200); do [ "$(policy_done RANK_DIVERGENCE b)" -ge 1 ] && break; sleep 0.2; done
check "[ \$(policy_done RANK_DIVERGENCE b) -ge 1 ] && wait_ready b && last_start b | grep -q 'lockstep loop' && [ \"\$(serve b)\" = 200 ]" \
    "RANK_DIVERGENCE → policy reconfigure overlap=off of b (audit row) → restarted in the lockstep loop → serving again"
wait $gen_b
check "[ \$(sql \"SELECT count(*) FROM actions WHERE outcome='pending' OR finished_us IS NULL\") = 0 ]" \
    "every action, the remedies included, finished in the audit log"
echo "# audit log (id|actor|action|target|outcome|started|took ms):"
sql "SELECT id, actor, action, target, outcome, to_char(to_timestamp(ts_us / 1e6), 'HH24:MI:SS.MS'),
     (finished_us - ts_us) / 1000 FROM actions ORDER BY id" | sed 's/^/#   /'
exit 0
