#!/bin/sh
# test-cp-super.sh — tandemd's supervisor across restarts (docs/groups.md). On a fresh database,
# with CPU groups of the tiny-llama3 fixture:
#   ports: two supervised groups of one role without `port` are refused at load, naming both and
#   what to write; with their own ports each group listens on its port, and keeps it across an
#   operator's restart and a supervisor's restart after a kill -9;
#   a restarted group killed again opens a new WORKER_LOST and is restarted again;
#   tandemd killed -9 inside a restart, after the new launcher started: the next tandemd re-adopts
#   that launcher (the record names it from its start) and the group is ready on its port;
#   spool: a group that stops while tandemd is down keeps its telemetry in its spool directory
#   (STATE_DIR/groups/NAME/spool), and its next start replays it (the stop's shutdown event and
#   the samples of the time tandemd was away are stored);
#   failed starts: a group whose port another process holds fails to start, is retried after 1 s
#   then 1.5 s (--start-retries 2 --start-backoff-max 1.5; the status shows the failures, the next
#   retry and the reason), then stays failed with WORKER_LOST open naming the reason; once the
#   port is free an operator's restart starts it and the failures are forgotten;
#   crash loop: a group whose rank is killed -9 soon after each /ready (--stable-window 8, with
#   WORKER_LOST=auto remedies racing the supervisor) is restarted at once the first time, after
#   the backoff the second, then stays failed with WORKER_LOST open naming the crash and that the
#   supervisor gave up; ready for
#   the window, its failures are forgotten and a crash after that is restarted at once again.
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/cp-lib.sh"
tap_need_exec "$BIN"
CPL_DB=test_cp_super_$$
cpl_require
M="$SRC/tests/fixtures/models/tiny-llama3"
export TDM_CPU_THREADS=1
# the supervised launchers run in sessions of their own: stop them too
super_cleanup() {
    for r in "$CPL_T"/state/groups/*/record.json "$CPL_T"/dupstate/groups/*/record.json \
        "$CPL_T"/failstate/groups/*/record.json "$CPL_T"/crashstate/groups/*/record.json; do
        [ -f "$r" ] || continue
        p=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$r")
        [ -n "$p" ] && kill -9 "-$p" "$p" 2> /dev/null
    done
    cpl_cleanup
}
trap super_cleanup EXIT
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
group() { # name [key = value lines...]
    printf '[group.%s]\nmodel_path = %s\ndevice = cpu\nkv_cpu_bytes = 4194304\ndrain_timeout = 1\n' "$1" "$M"
    shift
    for kv in "$@"; do printf '%s\n' "$kv"; done
}
status() { # group expr → expr over the group's entry of /api/v1/status
    cpl_api "$url/api/v1/status" | python3 -c '
import json, sys
g = [g for g in json.load(sys.stdin)["groups"] if g["name"] == sys.argv[1]]
print(eval(sys.argv[2], {"g": g[0]}) if g else "")' "$1" "$2" 2> /dev/null
}
wait_ready() { # group... (≤ 60 s)
    i=0
    while [ $i -lt 300 ]; do
        all=1
        for g in "$@"; do
            [ "$(status "$g" "g['ready'] and g['state'] == 'running'")" = True ] || all=0
        done
        [ $all = 1 ] && return 0
        sleep 0.2
        i=$((i + 1))
    done
    return 1
}
rec_pid() { sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$CPL_T/state/groups/$1/record.json" 2> /dev/null; }
url_port() { status "$1" "g['admin_url'].rsplit(':', 1)[-1]"; }

# ---- two groups of one role need ports of their own ----
{
    group p1
    group p2
} > "$CPL_T/dup.ini"
"$BUILD/tandemd" --listen 127.0.0.1:0 --state-dir "$CPL_T/dupstate" --pg-dsn "$cpl_dsn" \
    --groups-config "$CPL_T/dup.ini" --worker-bin "$BIN" > "$CPL_T/dup.log" 2>&1 &
dp=$!
i=0
while [ $i -lt 100 ] && kill -0 $dp 2> /dev/null; do sleep 0.1; i=$((i + 1)); done
kill -0 $dp 2> /dev/null && { kill -9 $dp; echo "# tandemd still running"; }
wait $dp
rc=$?
[ $rc != 0 ] && grep -q 'groups p1 and p2 .*port = N' "$CPL_T/dup.log"
ok $? "two colocated groups without ports are refused at load, naming both (rc $rc: $(grep -o 'groups p1 and p2.*' "$CPL_T/dup.log" | head -c 160))"

# ---- stable ports ----
px=$(free_port)
py=$(free_port)
while [ "$py" = "$px" ]; do py=$(free_port); done
{
    group x "port = $px" "enable_fault_injection = true"
    group y "port = $py"
} > "$CPL_T/groups.ini"
cpl_start --groups-config "$CPL_T/groups.ini" --worker-bin "$BIN"
ok $? "tandemd starts with two colocated groups on ports of their own"
wait_ready x y
ok $? "both supervised groups become ready"
[ $fail = 0 ] || { sed 's/^/# tandemd: /' "$CPL_T/tandemd.log" | tail -15; tap_done; }
[ "$(url_port x)" = "$px" ] && [ "$(url_port y)" = "$py" ]
ok $? "each group listens on its configured port (x $(url_port x) = $px, y $(url_port y) = $py)"

xpid=$(rec_pid x)
cpl_api -X POST -m 120 "$url/api/v1/groups/x/restart" > "$CPL_T/restart"
grep -q '"outcome": *"ok"' "$CPL_T/restart" && wait_ready x && [ "$(rec_pid x)" != "$xpid" ] &&
    [ "$(url_port x)" = "$px" ]
ok $? "an operator's restart of x: a new launcher on the same port ($(url_port x))"

kill_rank() { # group: kill -9 of its rank 0 (the launcher's child)
    lp=$(rec_pid "$1")
    kill -9 "$(pgrep -P "$lp" | head -n 1)" 2> /dev/null
}
lost_ids() { # group → the ids of its live WORKER_LOST alerts, oldest first
    cpl_api "$url/api/v1/alerts?source=live" | python3 -c '
import json, sys
print(" ".join(str(a["id"]) for a in sorted(json.load(sys.stdin).get("alerts", []), key=lambda a: a["id"])
               if a.get("kind") == "WORKER_LOST" and a.get("group") == sys.argv[1]))' "$1" 2> /dev/null
}
restarted() { # group old-pid: a new launcher (≤ 30 s), then ready
    i=0
    while [ $i -lt 150 ] && [ "$(rec_pid "$1")" = "$2" ]; do sleep 0.2; i=$((i + 1)); done
    [ "$(rec_pid "$1")" != "$2" ] && wait_ready "$1"
}
xpid=$(rec_pid x)
kill_rank x
restarted x "$xpid" && [ "$(url_port x)" = "$px" ]
ok $? "kill -9 of x's rank: the supervisor's restart listens on the same port ($(url_port x))"

# ---- a restarted group lost again: a new WORKER_LOST, restarted again ----
# "again" once the restarted group reports: its first samples close the open WORKER_LOST (a kill
# before that is the same loss, still open). Polled, ≤ 30 s.
open_lost() { # group → ids of its open live WORKER_LOST alerts
    cpl_api "$url/api/v1/alerts?source=live" | python3 -c '
import json, sys
print(" ".join(str(a["id"]) for a in json.load(sys.stdin).get("alerts", [])
               if a.get("kind") == "WORKER_LOST" and a.get("group") == sys.argv[1]
               and a.get("state") == "open"))' "$1" 2> /dev/null
}
i=0
while [ $i -lt 300 ] && [ -n "$(open_lost x)" ]; do sleep 0.1; i=$((i + 1)); done
[ -z "$(open_lost x)" ]
ok $? "the restarted x reports: its WORKER_LOST is resolved (open: '$(open_lost x)')"
first=$(lost_ids x)
xpid=$(rec_pid x)
kill_rank x
i=0
while [ $i -lt 100 ] && [ "$(lost_ids x)" = "$first" ]; do sleep 0.1; i=$((i + 1)); done
second=$(lost_ids x)
restarted x "$xpid" && [ -n "$first" ] && [ -n "$second" ] && [ "$second" != "$first" ] &&
    [ "$(url_port x)" = "$px" ]
ok $? "x killed again once restarted: a new WORKER_LOST opens (live ids: '$first' then '$second') and the supervisor restarts it again"

# ---- tandemd killed -9 inside a restart, once the new launcher runs and before it is ready ----
# The record names the new launcher from its start, so the next tandemd re-adopts it; it named the
# launcher just stopped, and the next tandemd started a second one that could not bind the port
# the first held (tests/chaos/chaos.py scenario 7: the group failed for good).
wait_ready x
xpid=$(rec_pid x)
nlog=$(wc -l < "$CPL_T/tandemd.log")
cpl_api -X POST -m 120 "$url/api/v1/groups/x/restart" > /dev/null 2>&1 &
cpid=$!
newpid=""
i=0
while [ $i -lt 600 ] && [ -z "$newpid" ]; do
    newpid=$(tail -n +"$((nlog + 1))" "$CPL_T/tandemd.log" |
        sed -n 's/.*msg="started worker group" group=x pid=\([0-9]*\).*/\1/p' | head -n 1)
    [ -z "$newpid" ] && sleep 0.02
    i=$((i + 1))
done
kill -9 "$cpl_tpid" 2> /dev/null
wait "$cpl_tpid" 2> /dev/null
cpl_tpid=""
wait $cpid 2> /dev/null
early=no
[ -n "$newpid" ] && [ "$(rec_pid x)" = "$newpid" ] && early=yes
cpl_start --groups-config "$CPL_T/groups.ini" --worker-bin "$BIN"
wait_ready x y
ready_rc=$?
launchers=$(pgrep -f -- "$CPL_T/state/groups/x/base.ini" | while read -r p; do
    tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | grep -qv -- "--rank" && echo "$p"; done | wc -l)
[ -n "$newpid" ] && [ "$newpid" != "$xpid" ] && [ $early = yes ] && [ $ready_rc = 0 ] &&
    [ "$(rec_pid x)" = "$newpid" ] && [ "$(url_port x)" = "$px" ] && [ "$launchers" = 1 ] &&
    grep -q "re-adopted worker group\" group=x pid=$newpid " "$CPL_T/tandemd.log"
ok $? "tandemd killed -9 as a restart of x started launcher $newpid (was $xpid): recorded at once ($early), re-adopted by the next tandemd, ready on its port ($(url_port x)), $launchers launcher of x"

# ---- telemetry of a worker that stops while tandemd is down: spooled, replayed ----
cpl_stop
t_down=$(date +%s%6N)
ypid=$(rec_pid y)
sleep 1
kill -TERM "$ypid"
i=0
while [ $i -lt 200 ] && kill -0 "$ypid" 2> /dev/null; do sleep 0.1; i=$((i + 1)); done
t_stop=$(date +%s%6N)
nf=$(find "$CPL_T/state/groups/y" -name '*.tsb' 2> /dev/null | wc -l)
[ "$nf" -gt 0 ]
ok $? "y stopped while tandemd was down: its telemetry is spooled in its state directory ($nf batches)"
cpl_start --groups-config "$CPL_T/groups.ini" --worker-bin "$BIN"
wait_ready x y
i=0
shut=0
while [ $i -lt 100 ]; do
    shut=$(cpl_sql "SELECT count(*) FROM events WHERE group_name = 'y' AND type = 'shutdown' AND ts_us > $t_down")
    [ "${shut:-0}" -ge 1 ] && break
    sleep 0.1
    i=$((i + 1))
done
during=$(cpl_sql "SELECT count(*) FROM samples WHERE group_name = 'y' AND ts_us > $t_down AND ts_us < $t_stop")
[ "$shut" = 1 ] && [ "${during:-0}" -gt 0 ]
ok $? "y's next start replays the spool: the stop's shutdown event ($shut) and the samples taken while tandemd was down ($during) are stored"

# ---- a failed start: retried with backoff, then failed for good with an alert; an operator's
# restart starts over (docs/groups.md "Failed starts") ----
# z's port is held by another process: each start fails (its rank 0 cannot bind). A tandemd of its
# own (--start-retries 2 --start-backoff-max 1.5: retries after 1 s and 1.5 s, then it gives up).
cpl_stop
python3 -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(1)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
time.sleep(600)' "$CPL_T/zport" &
holder=$!
CPL_PIDS="$CPL_PIDS $holder"
i=0
while [ $i -lt 100 ] && [ ! -s "$CPL_T/zport.tmp" ]; do sleep 0.05; i=$((i + 1)); done
pz=$(cat "$CPL_T/zport.tmp")
group z "port = $pz" > "$CPL_T/fail.ini"
rm -f "$CPL_T/fready"
"$BUILD/tandemd" --listen 127.0.0.1:0 --state-dir "$CPL_T/failstate" --pg-dsn "$cpl_dsn" \
    --ready-file "$CPL_T/fready" --groups-config "$CPL_T/fail.ini" --worker-bin "$BIN" \
    --start-retries 2 --start-backoff-max 1.5 > "$CPL_T/fail.log" 2>&1 &
cpl_tpid=$!
i=0
while [ $i -lt 200 ] && [ ! -s "$CPL_T/fready" ]; do sleep 0.05; i=$((i + 1)); done
url="http://127.0.0.1:$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$CPL_T/fready")"
admin=$(cat "$CPL_T/failstate/admin.token" 2> /dev/null)
bind_err="--port $pz: bind: Address already in use (errno 98)"
# while retrying: failed, a failure counted, the next retry in the future, the last reason named
retrying=""
i=0
while [ $i -lt 300 ]; do
    retrying=$(status z "(g['state'], g['retry']['failures'], g['retry']['next_us'] is not None and g['retry']['next_us'] > $(date +%s%6N), g['retry']['last_error'])")
    case "$retrying" in "('failed', 1, True, "*) break ;; esac
    sleep 0.05
    i=$((i + 1))
done
case "$retrying" in "('failed', 1, True, "*"$bind_err"*) r=0 ;; *) r=1 ;; esac
ok $r "z's start fails (its port $pz taken): failed, 1 failure, the next retry scheduled, the reason named ($retrying)"
# then: 2 retries and no more (≤ 60 s), gave_up with the reason
gave=""
i=0
while [ $i -lt 600 ]; do
    gave=$(status z "(g['state'], g['retry']['failures'], g['retry']['gave_up'], g['retry']['next_us'])")
    [ "$gave" = "('failed', 3, True, None)" ] && break
    sleep 0.1
    i=$((i + 1))
done
[ "$gave" = "('failed', 3, True, None)" ] && grep -q "start failed 3 times in a row: .* group=z err=.*$bind_err" "$CPL_T/fail.log"
ok $? "after --start-retries 2 the supervisor gives up: $gave, logged with the reason"
"$BUILD/tandemctl" --url "$url" --token-file "$CPL_T/failstate/admin.token" status > "$CPL_T/zctl" 2>&1
grep -q "^z: start failed 3 times in a row, no more retries (tandemctl restart z): .*$bind_err" "$CPL_T/zctl"
ok $? "tandemctl status says it: $(grep '^z:' "$CPL_T/zctl" | head -c 160)"
# the attempts, from the audit log: the start, then 2 restarts by the supervisor, each one its
# backoff (1 s, then 1.5 s: the cap) after the previous attempt ended (at most 2x + 0.5 s later)
i=0
while [ $i -lt 100 ]; do
    att=$(cpl_sql "SELECT string_agg(action || ':' || actor || ':' || outcome, ' ' ORDER BY ts_us) FROM actions WHERE target = 'z'")
    [ "$att" = "start:supervisor:failed restart:supervisor:failed restart:supervisor:failed" ] && break
    sleep 0.1
    i=$((i + 1))
done
gaps=$(cpl_sql "SELECT string_agg(g::text, ' ' ORDER BY t) FROM (SELECT ts_us AS t, round(((ts_us - lag(finished_us) OVER (ORDER BY ts_us)) / 1e6)::numeric, 2) AS g FROM actions WHERE target = 'z') s WHERE g IS NOT NULL")
g1=${gaps%% *}
g2=${gaps##* }
[ "$att" = "start:supervisor:failed restart:supervisor:failed restart:supervisor:failed" ] &&
    awk -v a="$g1" -v b="$g2" 'BEGIN { exit !(a >= 0.9 && a <= 2.5 && b >= 1.4 && b <= 3.5) }'
ok $? "audited attempts: $att; waits between them $gaps s (backoff 1 s then 1.5 s)"
# an absence: no further attempt 2x the last backoff later
sleep 3
n_att=$(cpl_sql "SELECT count(*) FROM actions WHERE target = 'z'")
[ "$n_att" = 3 ]
ok $? "no further attempt once it gave up ($n_att attempts 3 s later)"
# the alert: WORKER_LOST is open on z and names the port's failure
lost_txt=$(cpl_api "$url/api/v1/alerts?source=live" | python3 -c '
import json, sys
print(" ".join(json.dumps(a) for a in json.load(sys.stdin).get("alerts", [])
               if a.get("kind") == "WORKER_LOST" and a.get("group") == "z" and a.get("state") == "open"))' 2> /dev/null)
case "$lost_txt" in *"$bind_err"*) r=0 ;; *) r=1 ;; esac
ok $r "a WORKER_LOST alert is open on z naming the failed start's reason ($(printf '%s' "$lost_txt" | head -c 200))"
# the port freed, an operator's restart: started, ready, the failures forgotten
kill "$holder" 2> /dev/null
wait "$holder" 2> /dev/null
cpl_api -X POST -m 120 "$url/api/v1/groups/z/restart" > "$CPL_T/zrestart"
wait_ready z
after=$(status z "(g['state'], g['ready'], g['retry']['failures'], g['retry']['gave_up'], g['retry']['next_us'])")
grep -q '"outcome": *"ok"' "$CPL_T/zrestart" && [ "$after" = "('running', True, 0, False, None)" ] &&
    [ "$(url_port z)" = "$pz" ]
ok $? "the port freed, an operator's restart of z: ready on its port, failures reset ($after)"

# ---- a crash loop: a group that dies soon after each /ready (docs/groups.md "Failed starts") ----
# c, in a tandemd of its own: --start-retries 2 --start-backoff-max 1.5 --stable-window 8, and
# WORKER_LOST=auto (a remedy's restart goes through the same count and backoff). Each kill is
# well inside the window (right after /ready is seen).
cpl_stop
pc=$(free_port)
group c "port = $pc" > "$CPL_T/crash.ini"
rm -f "$CPL_T/cready"
"$BUILD/tandemd" --listen 127.0.0.1:0 --state-dir "$CPL_T/crashstate" --pg-dsn "$cpl_dsn" \
    --ready-file "$CPL_T/cready" --groups-config "$CPL_T/crash.ini" --worker-bin "$BIN" \
    --start-retries 2 --start-backoff-max 1.5 --stable-window 8 --alert-policy WORKER_LOST=auto \
    > "$CPL_T/crash.log" 2>&1 &
cpl_tpid=$!
i=0
while [ $i -lt 200 ] && [ ! -s "$CPL_T/cready" ]; do sleep 0.05; i=$((i + 1)); done
url="http://127.0.0.1:$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$CPL_T/cready")"
admin=$(cat "$CPL_T/crashstate/admin.token" 2> /dev/null)
crec() { sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$CPL_T/crashstate/groups/c/record.json" 2> /dev/null; }
crash_c() { # kill -9 of c's rank; prints the kill's wall time (µs)
    lp=$(crec)
    rk=$(pgrep -P "$lp" | head -n 1)
    date +%s%6N
    kill -9 "$rk" 2> /dev/null
}
first_restart() { # wall µs → seconds from then to c's first restart run after it (≤ 20 s)
    j=0
    while [ $j -lt 200 ]; do
        t=$(cpl_sql "SELECT min(ts_us) FROM actions WHERE target = 'c' AND action = 'restart' AND outcome = 'ok' AND ts_us > $1")
        [ -n "$t" ] && { awk -v a="$t" -v b="$1" 'BEGIN { printf "%.2f", (a - b) / 1e6 }'; return 0; }
        sleep 0.1
        j=$((j + 1))
    done
    echo none
}
wait_ready c
ok $? "c starts and becomes ready"
k1=$(crash_c)
d1=$(first_restart "$k1")
wait_ready c
s1=$(status c "(g['retry']['failures'], g['retry']['cause'], g['retry']['ready_s'] is not None and g['retry']['ready_s'] < 8, g['retry']['gave_up'])")
awk -v a="$d1" 'BEGIN { exit !(a != "none" && a <= 1.5) }' && [ "$s1" = "(1, 'crash', True, False)" ]
ok $? "c killed right after /ready: restarted at once ($d1 s after the kill), counted as a crash ($s1)"
k2=$(crash_c)
d2=$(first_restart "$k2")
wait_ready c
s2=$(status c "(g['retry']['failures'], g['retry']['cause'])")
why2=$(cpl_sql "SELECT actor || ': ' || (params->>'reason') FROM actions WHERE target = 'c' AND action = 'restart' AND outcome = 'ok' AND ts_us > $k2 ORDER BY ts_us LIMIT 1")
awk -v a="$d2" 'BEGIN { exit !(a != "none" && a >= 0.9 && a <= 4) }' && [ "$s2" = "(2, 'crash')" ] &&
    case "$why2" in "supervisor: retry 2 of 2 after a crash soon after ready: crashed after "*) true ;; *) false ;; esac
ok $? "killed again soon after /ready: 2 failures ($s2), restarted after the 1 s backoff ($d2 s after the kill) by the supervisor's retry ($(printf '%s' "$why2" | head -c 120))"
k3=$(crash_c)
gave=""
i=0
while [ $i -lt 200 ]; do
    gave=$(status c "(g['state'], g['retry']['failures'], g['retry']['gave_up'], g['retry']['next_us'], g['retry']['cause'])")
    [ "$gave" = "('failed', 3, True, None, 'crash')" ] && break
    sleep 0.1
    i=$((i + 1))
done
[ "$gave" = "('failed', 3, True, None, 'crash')" ] &&
    grep -q 'failed 3 times in a row: .* group=c err="crashed after [0-9.]* s ready' "$CPL_T/crash.log"
ok $? "a third crash soon after /ready: past --start-retries 2 the supervisor gives up ($gave), logged"
sleep 3
n_after=$(cpl_sql "SELECT count(*) FROM actions WHERE target = 'c' AND action = 'restart' AND outcome <> 'failed' AND ts_us > $k3")
[ "$n_after" = 0 ] && [ -z "$(crec_alive=$(crec); [ -n "$crec_alive" ] && kill -0 "$crec_alive" 2> /dev/null && echo up)" ]
ok $? "no restart once it gave up, the remedy included ($n_after restarts run after the third kill; $(cpl_sql "SELECT string_agg(actor || ':' || outcome, ' ') FROM actions WHERE target = 'c' AND ts_us > $k3"))"
lost_txt=$(cpl_api "$url/api/v1/alerts?source=live" | python3 -c '
import json, sys
print(" ".join(json.dumps(a) for a in json.load(sys.stdin).get("alerts", [])
               if a.get("kind") == "WORKER_LOST" and a.get("group") == "c" and a.get("state") == "open"))' 2> /dev/null)
last=$(status c "g['retry']['last_error']")
case "$lost_txt" in *"rank 0 exited (signal 9)"*"; the supervisor gave up after 3 failures in a row (tandemctl restart c)"*) r=0 ;; *) r=1 ;; esac
case "$last" in "crashed after "*" s ready: "*) ;; *) r=1 ;; esac
ok $r "WORKER_LOST stays open on c naming the crash and that the supervisor gave up ($(printf '%s' "$lost_txt" | head -c 220)); retry.last_error: $last"
# an operator's restart starts over; ready for the window (8 s), the failures are forgotten
cpl_api -X POST -m 120 "$url/api/v1/groups/c/restart" > "$CPL_T/crestart"
wait_ready c
k4=$(crash_c)
d4=$(first_restart "$k4")
wait_ready c
t_ready=$(date +%s%6N)
s4=$(status c "(g['retry']['failures'], g['retry']['gave_up'])")
i=0
while [ $i -lt 400 ] && [ "$(status c "g['retry']['failures']")" != 0 ]; do sleep 0.05; i=$((i + 1)); done
t_reset=$(($(date +%s%6N) - t_ready))
grep -q '"outcome": *"ok"' "$CPL_T/crestart" && [ "$s4" = "(1, False)" ] &&
    awk -v a="$d4" -v r="$t_reset" 'BEGIN { exit !(a != "none" && a <= 1.5 && r >= 6e6 && r <= 16e6) }'
ok $? "after an operator's restart: a crash restarted at once ($d4 s; $s4), the failures forgotten $(awk -v r="$t_reset" 'BEGIN { printf "%.1f", r / 1e6 }') s after /ready (window 8 s)"
k5=$(crash_c)
d5=$(first_restart "$k5")
wait_ready c
s5=$(status c "g['retry']['failures']")
awk -v a="$d5" 'BEGIN { exit !(a != "none" && a <= 1.5) }' && [ "$s5" = 0 ]
ok $? "a crash after a stable run: restarted at once ($d5 s), not counted (failures $s5)"

[ $fail = 0 ] || {
    sed 's/^/# tandemd: /' "$CPL_T/tandemd.log" | tail -15
    sed 's/^/# tandemd(z): /' "$CPL_T/fail.log" | tail -15
    sed 's/^/# tandemd(c): /' "$CPL_T/crash.log" | grep -v 'msg="http' | tail -30
    tail -8 "$CPL_T"/state/groups/*/worker.log "$CPL_T"/failstate/groups/*/worker.log | sed 's/^/# /'
}
cpl_stop
tap_done
