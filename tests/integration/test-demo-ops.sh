#!/bin/sh
# test-demo-ops.sh — README command 1's stack driven as an operator would: tools/demo.sh
# --no-build on its own ports in the background (PostgreSQL, tandemd, the supervised demo-prefill +
# demo-decode pair), then
#   - tandemctl's conventions: help on stdout with exit 0 (global, per command, `help CMD`), the
#     version, global flags before or after the command, unknown commands and flags named with
#     exit 2, `drain --help` sending nothing, tables with ages instead of epoch microseconds,
#     `-o json` and its alias --json, `trace ROOM` (the whole timeline; an unknown room exits 1),
#     earlier incarnations hidden unless --all, bash completion;
#   - the acceptance walk: status lists both groups healthy; drain, resume, restart and
#     `set demo-decode overlap off` succeed and are in the audit log; a chat completion through
#     tandemd's /v1 router returns tokens;
#   - `promtool check metrics` on tandemd's and both workers' /metrics;
#   - every line of tandemd's and the workers' logs parses as logfmt with an RFC 3339 timestamp.
set -u
: "${TDM_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${TDM_BUILDDIR:=$(pwd)}"
B=$TDM_BUILDDIR
for p in tandemd tandem-worker tandemctl tdm-pg; do
    [ -x "$B/$p" ] || { echo "Bail out! $p not built"; exit 1; }
done
[ -f "$TDM_SRCDIR/models/demo/model.safetensors" ] || { echo "Bail out! no demo model in $TDM_SRCDIR/models/demo"; exit 1; }
command -v promtool >/dev/null 2>&1 || { echo "Bail out! promtool missing (tools/install-deps.sh installs prometheus)"; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
tmp=$(mktemp -d)
chmod 755 "$tmp" # the private PostgreSQL runs as user postgres
dpid=
cleanup() {
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
    [ -n "${TDM_TEST_KEEP:-}" ] && echo "# kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT

n=0
fail=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
check() { if eval "$1"; then ok 0 "$2"; else ok 1 "$2"; fi; }
ctl_bare() { "$B/tandemctl" "$@"; }

# ---- conventions that need no server --------------------------------------------------------
ctl_bare --help >"$tmp/o" 2>"$tmp/e"
check "[ $? = 0 ] && grep -q '^Commands:' $tmp/o && grep -q 'drain GROUP' $tmp/o && [ ! -s $tmp/e ]" \
    "tandemctl --help: the commands on stdout, exit 0, nothing on stderr"
ctl_bare -h >"$tmp/o2" 2>&1 && ctl_bare help >"$tmp/o3" 2>&1
check "[ $? = 0 ] && cmp -s $tmp/o $tmp/o2 && cmp -s $tmp/o $tmp/o3" "-h and help print the same help"
hd=0
for form in "help drain" "drain --help" "drain -h" "--url http://127.0.0.1:1 drain demo-decode --help"; do
    # shellcheck disable=SC2086
    ctl_bare $form >"$tmp/o" 2>"$tmp/e" && grep -q '^usage: tandemctl \[flags\] drain GROUP' "$tmp/o" &&
        [ ! -s "$tmp/e" ] || { hd=1; echo "# '$form' failed:"; sed 's/^/#   /' "$tmp/o" "$tmp/e"; }
done
ok $hd "per-command help: help drain, drain --help, drain -h (even with a group and an unreachable --url)"
ctl_bare set --help | grep -q 'KEY=VALUE or KEY VALUE'
ok $? "set --help explains its arguments"
v=$(ctl_bare --version)
check "echo '$v' | grep -Eq '^tandemctl [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-f]+|unknown\)'" "tandemctl --version: $v"
vv=0
for p in tandemd tandem-worker; do
    "$B/$p" --version | grep -Eq "^$p [0-9]+\.[0-9]+\.[0-9]+ " || vv=1
    "$B/$p" -h | grep -q -- '--log-level {debug|info|warn|error}' || vv=1
done
ok $vv "tandemd and tandem-worker: --version and -h (with --log-level)"
check "'$B/tandemd' --help | grep -q -- '--listen HOST:PORT' && '$B/tandemd' --help | grep -q -- '--state-dir DIR' &&
       '$B/tandem-worker' --help | grep -q -- '--tp-size N' && '$B/tandem-worker' --help | grep -q -- '--model-path DIR' &&
       '$B/tandem-worker' --help | grep -q -- '--health-progress-timeout SECONDS'" \
    "--help names each flag's type (HOST:PORT, DIR, N, SECONDS)"
ctl_bare frobnicate >"$tmp/o" 2>"$tmp/e"
check "[ $? = 2 ] && grep -q 'unknown command \"frobnicate\"' $tmp/e && [ ! -s $tmp/o ]" "an unknown command: exit 2, named"
ctl_bare status --bogus >"$tmp/o" 2>"$tmp/e"
r1=$?
ctl_bare --bogus status >"$tmp/o" 2>>"$tmp/e"
check "[ $r1 = 2 ] && [ $? = 2 ] && [ \$(grep -c 'unknown flag --bogus' $tmp/e) = 2 ]" "an unknown flag before or after the command: exit 2, named"
ctl_bare drain >/dev/null 2>"$tmp/e"
check "[ $? = 2 ] && grep -q 'drain expects GROUP' $tmp/e" "a missing argument: exit 2, says what is expected"
ctl_bare -o yaml status >/dev/null 2>"$tmp/e"
check "[ $? = 2 ] && grep -q 'unknown format \"yaml\"' $tmp/e" "-o with an unknown format: exit 2"
ctl_bare trace NOT-HEX >/dev/null 2>"$tmp/e"
check "[ $? = 2 ] && grep -q 'not lowercase hex' $tmp/e" "trace: a malformed room id is a usage error"
ctl_bare completion bash >"$tmp/comp.bash"
check "[ $? = 0 ] && bash -n $tmp/comp.bash && grep -q 'complete -F _tandemctl tandemctl' $tmp/comp.bash" \
    "tandemctl completion bash: a valid bash script"
got=$(PATH="$B:$PATH" bash -c ". $tmp/comp.bash; COMP_WORDS=(tandemctl dr); COMP_CWORD=1; _tandemctl; echo \${COMPREPLY[*]}")
check "[ '$got' = drain ]" "completion: 'tandemctl dr<TAB>' → drain (got '$got')"

# ---- the stack ------------------------------------------------------------------------------
ports=$($PY -c "
import socket
ss=[socket.socket() for _ in range(4)]
for s in ss: s.bind(('127.0.0.1',0))
print(' '.join(str(s.getsockname()[1]) for s in ss))")
set -- $ports
cp_port=$1
# LeakSanitizer reports h2o's socket buffers still held when a worker exits with connections open
# (tandemd's keep-alive probes) and turns the exit code to 1; that shutdown leak is not what this
# test is about, so the stack runs without leak detection (ASan's other checks stay on)
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
    TDM_BUILD_DIR=$B TDM_STATE_DIR=$tmp/state TDM_DEMO_CP_PORT=$1 TDM_DEMO_BOOTSTRAP_PORT=$2 \
    TDM_DEMO_PREFILL_PORT=$3 TDM_DEMO_DECODE_PORT=$4 \
    sh "$TDM_SRCDIR/tools/demo.sh" --no-build >"$tmp/demo.out" 2>&1 &
dpid=$!
up=1
for _ in $(seq 1 900); do
    grep -q 'running; Ctrl-C' "$tmp/demo.out" && { up=0; break; }
    kill -0 "$dpid" 2>/dev/null || break
    sleep 0.2
done
ok $up "tools/demo.sh --no-build starts PostgreSQL, tandemd and the supervised pair"
[ $up = 0 ] || sed "s/^/# /" "$tmp/demo.out"
url="http://127.0.0.1:$cp_port"
token=$(cat "$tmp/state/tandemd/admin.token" 2>/dev/null)
ctl() { "$B/tandemctl" --url "$url" --token "$token" "$@"; }
j() { $PY -c "import json,sys;d=json.load(sys.stdin);print($1)"; }
wait_healthy() { # → 0 when both groups are running and ok
    for _ in $(seq 1 300); do
        h=$(ctl -o json status 2>/dev/null | j "sorted((g['name'],g['state'],g['health']) for g in d['groups'])" 2>/dev/null)
        [ "$h" = "[('demo-decode', 'running', 'ok'), ('demo-prefill', 'running', 'ok')]" ] && return 0
        sleep 0.2
    done
    echo "# groups: $h"
    return 1
}
chat() { # → the completion's text, through tandemd's router
    curl -s "$url/v1/chat/completions" -H 'Content-Type: application/json' \
        -d '{"model":"demo","messages":[{"role":"user","content":"Tell me a fun fact."}],"max_tokens":8}' |
        j "d['usage']['completion_tokens']" 2>/dev/null
}

check "wait_healthy" "both groups running and healthy (the workers' own /ready verdict)"
ctl status >"$tmp/st" 2>&1
check "grep -Eq '^demo-decode +supervised +decode +running +ok ' $tmp/st && grep -Eq '^demo-prefill +supervised +prefill +running +ok ' $tmp/st" \
    "tandemctl status: a table with both groups running, HEALTH ok"
check "grep -Eq ' [0-9]+[smhd] ago ' $tmp/st && ! grep -Eq '[0-9]{13,}' $tmp/st" "status shows ages ('12s ago'), never epoch microseconds"
"$B/tandemctl" status --url "$url" --token "$token" -o json >"$tmp/j1" 2>&1 &&
    "$B/tandemctl" --json --token="$token" status --url="$url" >"$tmp/j2" 2>&1
check "[ $? = 0 ] && j \"d['groups'][0]['name']\" <$tmp/j1 >/dev/null && j \"d['groups'][0]['name']\" <$tmp/j2 >/dev/null" \
    "global flags after the command, --flag=value, -o json and its alias --json give JSON"
n0=$(ctl -o json actions | j "len(d['actions'])")
ctl drain demo-decode --help >/dev/null 2>&1
n1=$(ctl -o json actions | j "len(d['actions'])")
check "[ '$n0' = '$n1' ] && wait_healthy" "drain --help sends no drain (audit log unchanged, the group still healthy)"

ntok=$(chat)
check "[ \"\${ntok:-0}\" -ge 1 ]" "a chat completion through tandemd's /v1 router returns tokens ($ntok)"

# a room's whole timeline (telemetry lands within a second or two)
room=
for _ in $(seq 1 50); do
    room=$(ctl -o json transfers 2>/dev/null | j "[t['room'] for t in d['transfers'] if t['state']=='SUCCESS'][-1]" 2>/dev/null) && [ -n "$room" ] && break
    sleep 0.2
done
ctl trace "$room" >"$tmp/tr" 2>&1
check "[ -n '$room' ] && grep -q '^room $room' $tmp/tr && [ \$(grep -c 'demo-prefill' $tmp/tr) -ge 1 ] && [ \$(grep -c 'demo-decode' $tmp/tr) -ge 1 ] && grep -q 'SUCCESS' $tmp/tr" \
    "tandemctl trace ROOM: the room's events from both sides, to SUCCESS"
ctl trace 00000000deadbeef >/dev/null 2>"$tmp/e"
check "[ $? = 1 ] && grep -q 'no transfer room 00000000deadbeef' $tmp/e" "trace of an unknown room: exit 1, says so"
ctl transfers >"$tmp/tf" 2>&1
check "grep -q '^ROOM' $tmp/tf && grep -q '$room' $tmp/tf && ! grep -Eq '[0-9]{13,}' $tmp/tf" "tandemctl transfers: a table with ages"

# ---- the acceptance walk: every action succeeds and is audited ------------------------------
act_ok=0
for a in "drain demo-decode" "resume demo-decode" "restart demo-decode" "set demo-decode overlap off"; do
    # shellcheck disable=SC2086
    out=$(ctl $a 2>&1) || act_ok=1
    echo "# tandemctl $a: $out"
    echo "$out" | grep -q ': ok' || act_ok=1
    [ "$a" = "resume demo-decode" ] && { wait_healthy || act_ok=1; }
done
ok $act_ok "tandemctl drain, resume, restart, set demo-decode overlap off: each ends ok"
ctl -o json actions >"$tmp/audit"
check "$PY - $tmp/audit <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))['actions']
got = {r['action'] for r in rows if r['target'] == 'demo-decode' and r['outcome'] == 'ok' and r['finished_us']}
sys.exit(0 if {'drain', 'resume', 'restart', 'reconfigure'} <= got else 1)
EOF" "the four actions are in the audit log with outcome ok and a finish time"
ctl actions >"$tmp/at"
check "grep -Eq '^[0-9]+ +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} .*reconfigure +demo-decode +ok' $tmp/at" "tandemctl actions: local times, who, what, outcome"
check "wait_healthy && [ \"\$(chat)\" -ge 1 ]" "after restart and reconfigure: both healthy, the router serves tokens again"
ctl -o json status | j "[g['config'] for g in d['groups'] if g['name']=='demo-decode'][0]" >"$tmp/cfg"
check "grep -q \"'overlap': 'off'\" $tmp/cfg || grep -q 'disable_overlap_schedule' $tmp/cfg" "demo-decode runs with overlap off"
ctl status >"$tmp/st"
ctl status --all >"$tmp/sta"
dn=$(grep -Ec '^demo-decode +[^ ]+ +0 +[0-9]+ ' "$tmp/st")
da=$(grep -Ec '^demo-decode +[^ ]+ +0 +[0-9]+ ' "$tmp/sta")
check "[ '$dn' = 1 ] && [ '$da' -ge 1 ] && { [ '$da' = 1 ] || grep -q 'earlier incarnations hidden' $tmp/st; }" \
    "status shows the current incarnation's rank only ($dn row; --all: $da)"
got=$(PATH="$B:$PATH" bash -c ". $tmp/comp.bash; COMP_WORDS=(tandemctl --url $url --token $token restart demo-d); COMP_CWORD=6; _tandemctl; echo \${COMPREPLY[*]}")
check "[ '$got' = demo-decode ]" "completion: group names from the server ('$got')"

# ---- metrics: promtool on tandemd's and both workers' /metrics --------------------------------
pm=0
curl -sf -H "Authorization: Bearer $token" "$url/metrics" >"$tmp/m-tandemd" || pm=1
for g in demo-prefill demo-decode; do
    u=$(ctl -o json status | j "[x['admin_url'] for x in d['groups'] if x['name']=='$g'][0]")
    curl -sf "$u/metrics" >"$tmp/m-$g" || pm=1
done
for f in tandemd demo-prefill demo-decode; do
    promtool check metrics <"$tmp/m-$f" >"$tmp/pt-$f" 2>&1 || { pm=1; echo "# promtool on $f:"; sed 's/^/#   /' "$tmp/pt-$f"; }
done
ok $pm "promtool check metrics passes on tandemd's, demo-prefill's and demo-decode's /metrics"
check "grep -q '^tandem_build_info{' $tmp/m-tandemd && grep -q '^tandem_build_info{' $tmp/m-demo-decode &&
       grep -q '^tandem_worker_info{group=\"demo-decode\",role=\"decode\"' $tmp/m-demo-decode &&
       grep -q '^tandem_http_responses_total{code=\"200\"}' $tmp/m-demo-decode &&
       grep -q '^tandem_e2e_request_latency_seconds_bucket' $tmp/m-demo-decode &&
       grep -q '^tandem_xfer_latency_seconds_bucket' $tmp/m-demo-prefill &&
       grep -q '^# TYPE tandem_alerts_open gauge' $tmp/m-tandemd" \
    "build/config info, HTTP responses by code, end-to-end and transfer histograms, alerts by class"

check "$PY - $TDM_SRCDIR/packaging/grafana-tandem.json $tmp/m-tandemd $tmp/m-demo-prefill $tmp/m-demo-decode <<'EOF'
import json, re, sys
d = json.load(open(sys.argv[1]))
exprs = [t['expr'] for p in d['panels'] for t in p['targets']]
names = set(re.findall(r'\\b(tandem_[a-z0-9_]+)', ' '.join(exprs)))
have = set()
for f in sys.argv[2:]:
    for line in open(f):
        if line.startswith('# TYPE '):
            n, t = line.split()[2:4]
            have.add(n)
            if t == 'histogram':
                have |= {n + '_bucket', n + '_sum', n + '_count'}
missing = sorted(names - have)
print('# dashboard metrics not exported:', missing) if missing else None
sys.exit(1 if missing or len(names) < 10 else 0)
EOF" "packaging/grafana-tandem.json: every metric its panels query is exported"

# ---- logs: every line logfmt with an RFC 3339 timestamp ---------------------------------------
curl -s -H 'X-Request-Id: ops-test-42' -o /dev/null -D "$tmp/hdr" "$(ctl -o json status | j "[x['admin_url'] for x in d['groups'] if x['name']=='demo-decode'][0]")/v1/completions" \
    -H 'Content-Type: application/json' -d '{"model":"demo","prompt":"Hi","max_tokens":3}'
check "grep -qi '^x-request-id: ops-test-42' $tmp/hdr" "X-Request-Id is echoed"
for _ in $(seq 1 100); do grep -q 'request_id=ops-test-42' "$tmp/state/tandemd/groups/demo-decode/worker.log" && break; sleep 0.1; done
check "grep -q 'msg=\"request\" method=POST path=\"/v1/completions\" status=200 .*request_id=ops-test-42 prompt_tokens=[0-9]* completion_tokens=[0-9]* ttft_ms=' $tmp/state/tandemd/groups/demo-decode/worker.log" \
    "the worker logs the request: method, path, status, duration, request id, tokens, TTFT"
check "grep -q 'msg=\"action\" action=drain group=demo-decode actor=admin' $tmp/state/logs/tandemd.log &&
       grep -q 'msg=\"action done\" id=[0-9]* action=reconfigure group=demo-decode outcome=ok' $tmp/state/logs/tandemd.log" \
    "tandemd logs every action when it starts and when it ends"
$PY - "$tmp/state/logs/tandemd.log" "$tmp"/state/tandemd/groups/*/worker.log >"$tmp/lf" 2>&1 <<'EOF'
import datetime, re, sys
pair = re.compile(r'([A-Za-z_][A-Za-z0-9_.-]*)=("(?:[^"\\]|\\.)*"|[^ "=]*)( |$)')
bad = total = 0
for path in sys.argv[1:]:
    for no, line in enumerate(open(path, encoding='utf-8', errors='replace'), 1):
        line = line.rstrip('\n')
        total += 1
        pos, keys = 0, []
        while pos < len(line):
            m = pair.match(line, pos)
            if not m:
                break
            keys.append((m.group(1), m.group(2)))
            pos = m.end()
        good = pos == len(line) and len(keys) >= 5 and [k for k, _ in keys[:5]] == ['ts', 'level', 'proc', 'pid', 'sub']
        if good:
            try:
                datetime.datetime.strptime(keys[0][1], '%Y-%m-%dT%H:%M:%S.%fZ')
            except ValueError:
                good = False
        if not good:
            bad += 1
            if bad <= 5:
                print('# %s:%d: %s' % (path, no, line[:200]))
print('# %d lines, %d not logfmt' % (total, bad))
sys.exit(1 if bad or total < 20 else 0)
EOF
r=$?
cat "$tmp/lf"
ok $r "every line of tandemd's and the workers' logs is logfmt: ts (RFC 3339), level, proc, pid, sub, fields"

kill "$dpid"
t0=$(date +%s)
wait "$dpid"
dpid=
check "[ \$((\$(date +%s) - t0)) -le 15 ]" "demo.sh stops everything promptly on SIGTERM"
echo "1..$n"
exit $fail
