#!/bin/sh
# test-cp-netns.sh — a supervised group in a network namespace of its own (docs/groups.md
# "Network namespaces"), the keys' checks (tests/chaos/chaos.py's scenario 8 runs a P/D pair
# in two namespaces end to end):
#   refused at load, naming what to write: netns without host, netns with a loopback host, netns
#   without control_plane_host, a bad netns name, an env word that is not NAME=VALUE, netns in an
#   external group;
#   a namespace that does not exist: that group's start fails with the reason in
#   /api/v1/status (its health) and the audit row, tandemd keeps running and serving;
#   a real namespace: the launcher starts inside it (the /proc/PID/ns/net inode of
#   /var/run/netns/NAME) with the group's env on top of tandemd's and the namespace's own /sys.
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
. "$SRC/tests/integration/cp-lib.sh"
tap_need_exec "$BIN"
CPL_DB=test_cp_netns_$$
cpl_require
NS=tdmt$$
netns_cleanup() {
    for r in "$CPL_T"/state/groups/*/record.json; do
        [ -f "$r" ] || continue
        p=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$r")
        [ -n "$p" ] && kill -9 "-$p" "$p" 2> /dev/null
    done
    # a launcher whose record is not written yet: any process naming this test's directory
    for d in /proc/[0-9]*; do
        grep -q "$CPL_T/" "$d/cmdline" 2> /dev/null && kill -9 "${d#/proc/}" 2> /dev/null
    done
    ip netns del "$NS" 2> /dev/null
    cpl_cleanup
}
trap netns_cleanup EXIT
M="$SRC/tests/fixtures/models/tiny-llama3"
export TDM_CPU_THREADS=1
group() { # name [key = value lines...]
    printf '[group.%s]\nmodel_path = %s\ndevice = cpu\nkv_cpu_bytes = 4194304\nport = 0\n' "$1" "$M"
    shift
    for kv in "$@"; do printf '%s\n' "$kv"; done
}
refused() { # what expected-text ini-lines...
    what=$1
    want=$2
    shift 2
    group g "$@" > "$CPL_T/bad.ini"
    rm -rf "$CPL_T/badstate"
    timeout 20 "$BUILD/tandemd" --listen 127.0.0.1:0 --state-dir "$CPL_T/badstate" \
        --pg-dsn "$cpl_dsn" --groups-config "$CPL_T/bad.ini" --worker-bin "$BIN" > "$CPL_T/bad.log" 2>&1
    rc=$?
    [ $rc != 0 ] && [ $rc != 124 ] && grep -q -- "$want" "$CPL_T/bad.log"
    ok $? "refused at load: $what (rc $rc: $(grep -o "group g.*\|line [0-9]*:.*" "$CPL_T/bad.log" | head -1 | cut -c1-150))"
}
refused "netns without host" "netns = x needs host = " "netns = x" "control_plane_host = 10.0.0.1"
refused "netns with a loopback host" "netns = x needs host = " "netns = x" "host = 127.0.0.1" \
    "control_plane_host = 10.0.0.1"
refused "netns without control_plane_host" "needs control_plane_host = " "netns = x" "host = 10.0.0.2"
refused "a netns name with a slash" 'netns ..a/b..: the name of a namespace' "netns = a/b"
refused "an env word without =" 'env ..UCX_TLS..: expected NAME=VALUE' "env = UCX_TLS"
refused "a control_plane_host with a path" 'control_plane_host ..10.0.0.1/x..: an address' \
    "control_plane_host = 10.0.0.1/x"
printf '[group.ext]\nurl = http://127.0.0.1:1\nnetns = x\n' > "$CPL_T/bad.ini"
timeout 20 "$BUILD/tandemd" --listen 127.0.0.1:0 --state-dir "$CPL_T/badstate" --pg-dsn "$cpl_dsn" \
    --groups-config "$CPL_T/bad.ini" > "$CPL_T/bad.log" 2>&1
rc=$?
[ $rc != 0 ] && [ $rc != 124 ] && grep -q "group ext: netns is for supervised groups" "$CPL_T/bad.log"
ok $? "refused at load: netns in an external group (rc $rc)"

# ---- a namespace that does not exist, and a real one
ip netns add "$NS" || { echo "Bail out! ip netns add $NS: network namespaces are needed"; exit 1; }
ip -n "$NS" link set lo up
# the worker's host inside the namespace: an address on its loopback link; tandemd cannot reach
# it (no link to the namespace), so that group is checked up to its launcher, not /ready
ip -n "$NS" addr add 10.231.251.1/32 dev lo
{
    group gone "netns = tdmnosuch$$" "host = 10.231.250.1" "control_plane_host = 10.231.250.2"
    group inns "netns = $NS" "host = 10.231.251.1" "control_plane_host = 10.231.251.2" \
        "env = TDM_NETNS_MARK=inns$$ UCX_NET_DEVICES=lo"
} > "$CPL_T/groups.ini"
cpl_start --groups-config "$CPL_T/groups.ini" --worker-bin "$BIN" --start-timeout 5
ok $? "tandemd started with a group in a missing namespace and one in $NS"
health() {
    cpl_api "$url/api/v1/status" | python3 -c '
import json, sys
g = [g for g in json.load(sys.stdin)["groups"] if g["name"] == sys.argv[1]]
print("%s|%s" % (g[0]["state"], g[0]["health"]) if g else "")' "$1" 2> /dev/null
}
i=0
h=""
while [ $i -lt 100 ]; do
    h=$(health gone)
    case $h in failed*netns*) break ;; esac
    sleep 0.2
    i=$((i + 1))
done
case $h in
    "failed|netns tdmnosuch$$: /var/run/netns/tdmnosuch$$: No such file or directory"*) r=0 ;;
    *) r=1 ;;
esac
ok $r "a missing namespace: the group is failed, /api/v1/status names why ($h)"
row=$(cpl_sql "SELECT outcome || '|' || detail FROM actions WHERE target = 'gone' ORDER BY ts_us LIMIT 1")
case $row in failed*"netns tdmnosuch$$"*) r=0 ;; *) r=1 ;; esac
ok $r "the start's audit row names it ($row)"
kill -0 "$cpl_tpid" 2> /dev/null && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ]
ok $? "tandemd alive and answering /health"
# the group in the real namespace: its launcher runs in it, with the group's env
i=0
p=""
while [ $i -lt 300 ] && [ -z "$p" ]; do
    p=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$CPL_T/state/groups/inns/record.json" 2> /dev/null)
    sleep 0.1
    i=$((i + 1))
done
[ -n "$p" ] && [ "$(stat -L -c %i "/proc/$p/ns/net" 2> /dev/null)" = "$(stat -L -c %i "/var/run/netns/$NS")" ]
ok $? "the launcher (pid ${p:-none}) runs inside /var/run/netns/$NS"
[ -n "$p" ] && tr '\0' '\n' < "/proc/$p/environ" | grep -qx "TDM_NETNS_MARK=inns$$" &&
    tr '\0' '\n' < "/proc/$p/environ" | grep -qx "UCX_NET_DEVICES=lo"
ok $? "its environment carries the group's env words"
grep -q -- "--control-plane http://10.231.251.2:$cp_port" "/proc/$p/cmdline" 2> /dev/null ||
    tr '\0' ' ' < "/proc/$p/cmdline" | grep -q -- "--control-plane http://10.231.251.2:$cp_port"
ok $? "it reaches tandemd at control_plane_host: --control-plane http://10.231.251.2:$cp_port"
# its /sys is the namespace's (UCX lists its devices there): lo only, none of tandemd's links
nets=$(nsenter -t "$p" -m ls /sys/class/net 2> /dev/null | tr '\n' ' ')
[ "$nets" = "lo " ]
ok $? "its /sys/class/net is the namespace's own ($nets)"
[ $fail = 0 ] || { sed 's/^/# tandemd: /' "$CPL_T/tandemd.log" | tail -15; tail -8 "$CPL_T"/state/groups/*/worker.log | sed 's/^/# /'; }
cpl_stop
tap_done
