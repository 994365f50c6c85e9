#!/bin/sh
# test-units-systemd.sh — the packaged units under a real systemd: a user manager (systemd
# --user) started in a private mount namespace where /run/systemd/system exists (no systemd runs
# as PID 1 here), the units from packaging/systemd with the build tree's binaries and paths under
# a scratch dir. Checks: the worker unit reaches READY ("serving") and answers /health; idle for
# two watchdog periods it is not restarted (the idle scheduler loop feeds the watchdog); after
# kill -STOP of rank 0 (the launcher's child, whose loop sends WATCHDOG=1) the watchdog restarts
# the unit and it serves again; tandemd's unit reaches READY against the test PostgreSQL, and
# restarting or stopping it leaves the worker unit's main process running; stop drains and exits.
# Drop-ins: WatchdogSec=3 for the worker (speed), User= removed (a user manager runs as its own
# user), and the sandboxing this container refuses with status=226/NAMESPACE turned off
# (docs/packaging.md lists it). Root only; skips where a user manager cannot be started.
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/tap-lib.sh"
tap_need_exec "$BIN"
tap_need_exec "$BUILD/tandemd"
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP needs root (a private mount namespace)"; exit 0; }
command -v unshare >/dev/null && command -v nsenter >/dev/null && [ -x /usr/lib/systemd/systemd ] ||
    { echo "1..0 # SKIP unshare, nsenter or /usr/lib/systemd/systemd missing"; exit 0; }
B=$(cd "$BUILD" && pwd)
T=$(mktemp -d)
X=$T/xdg
U=$X/systemd/user
MPID=
cleanup() {
    if [ -n "$MPID" ]; then
        sdc stop tandemd.service 'tandem-worker@wd.service' >/dev/null 2>&1
        kill -TERM "$MPID" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$MPID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$MPID" 2>/dev/null
    fi
    [ -n "${PGDB:-}" ] && psql_ -d postgres -c "DROP DATABASE IF EXISTS $PGDB WITH (FORCE)" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
sdc() { XDG_RUNTIME_DIR=$X nsenter -t "$MPID" -m systemctl --user "$@"; }
prop() { sdc show -p "$2" --value "$1"; }
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h "$TDM_TEST_PGHOST" -p "$TDM_TEST_PGPORT" -U "$TDM_TEST_PGUSER" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$U" "$T/etc" "$T/state/groups/wd" "$T/state/spool"
chmod 700 "$X"
port=$(free_port)
printf '[worker]\nmodel_path = %s\nserved_model_name = demo\ndevice = cpu\ndisaggregation_mode = null\nport = %s\n' \
    "$SRC/models/demo" "$port" >"$T/etc/wd.conf"
# the packaged units, pointed at the build tree and the scratch dir
sed -e "s|/usr/bin/tandem-worker|$B/tandem-worker|" -e "s|/etc/tandem/workers/%i.conf|$T/etc/%i.conf|g" \
    -e "s|/var/lib/tandem|$T/state|g" "$SRC/packaging/systemd/tandem-worker@.service" >"$U/tandem-worker@.service"
sed -e "s|/usr/bin/tandemd|$B/tandemd|" -e "s|/etc/tandem/tandemd.conf|$T/etc/tandemd.conf|" \
    -e "s|-/etc/default/tandemd|-$T/etc/tandemd.env|" -e "s|/var/lib/tandem|$T/state|g" \
    "$SRC/packaging/systemd/tandemd.service" >"$U/tandemd.service"
cp "$SRC/packaging/systemd/tandem.target" "$U/"
touch "$T/etc/tandemd.conf"
mkdir -p "$U/tandem-worker@wd.service.d" "$U/tandemd.service.d"
printf '[Service]\nUser=\nGroup=\nSupplementaryGroups=\nWatchdogSec=3\nProtectHome=no\n' \
    >"$U/tandem-worker@wd.service.d/test.conf"
printf '[Service]\nUser=\nGroup=\nProtectHome=no\nPrivateTmp=no\nPrivateDevices=no\nProtectKernelTunables=no\nProtectControlGroups=no\n' \
    >"$U/tandemd.service.d/test.conf"

XDG_RUNTIME_DIR=$X setsid unshare -m sh -c 'mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system &&
    exec /usr/lib/systemd/systemd --user --log-target=null' >"$T/manager.log" 2>&1 &
MPID=$!
up=
for _ in $(seq 1 100); do
    # the manager is the shell's exec'd successor: wait for its private socket
    [ -S "$X/systemd/private" ] && st=$(sdc is-system-running 2>/dev/null) &&
        { [ "$st" = running ] || [ "$st" = degraded ]; } && { up=1; break; }
    kill -0 "$MPID" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$up" ]; then
    echo "1..0 # SKIP no systemd user manager here: $(head -c 300 "$T/manager.log" | tr '\n' ' ')"
    exit 0
fi

sdc start 'tandem-worker@wd.service' >"$T/start.log" 2>&1
ok $? "systemctl start tandem-worker@wd (Type=notify: returns after READY=1)"
[ "$(prop 'tandem-worker@wd.service' StatusText)" = serving ]; ok $? "worker unit status: serving"
[ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$port/health")" = 200 ]
ok $? "worker /health 200 on 127.0.0.1:$port"
m0=$(prop 'tandem-worker@wd.service' MainPID)
sleep 6.5
[ "$(prop 'tandem-worker@wd.service' NRestarts)" = 0 ] && [ "$(prop 'tandem-worker@wd.service' MainPID)" = "$m0" ]
ok $? "idle for two watchdog periods: no restart (the idle loop feeds the watchdog)"

r0=$(pgrep -P "$m0" | head -n 1)
[ -n "$r0" ]; ok $? "rank 0 is the launcher's child (pid ${r0:-none})"
kill -STOP "$r0" 2>/dev/null
t0=$(date +%s)
nr=0
for _ in $(seq 1 150); do
    nr=$(prop 'tandem-worker@wd.service' NRestarts)
    [ "$nr" != 0 ] && break
    sleep 0.1
done
dt=$(($(date +%s) - t0))
[ "$nr" = 1 ] && [ "$dt" -le 9 ]; ok $? "kill -STOP of rank 0: the watchdog restarts the unit (after ${dt} s, WatchdogSec=3)"
for _ in $(seq 1 300); do [ "$(prop 'tandem-worker@wd.service' ActiveState)" = active ] && break; sleep 0.1; done
m1=$(prop 'tandem-worker@wd.service' MainPID)
[ "$(prop 'tandem-worker@wd.service' ActiveState)" = active ] && [ "$m1" != "$m0" ] &&
    [ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$port/health")" = 200 ]
ok $? "restarted worker serves again (main pid $m0 -> $m1)"

# tandemd's unit against the test PostgreSQL; a tandemd restart or stop never touches the worker
if [ -n "${TDM_TEST_PGHOST:-}" ] && [ -n "${TDM_TEST_PGPORT:-}" ] && [ -n "${TDM_TEST_PGUSER:-}" ]; then
    PGDB=test_units_systemd
    psql_ -d postgres -c "DROP DATABASE IF EXISTS $PGDB WITH (FORCE)" -c "CREATE DATABASE $PGDB" >/dev/null 2>&1
    printf 'TDM_PG_DSN="host=%s port=%s user=%s dbname=%s"\nTANDEMD_ARGS="--listen 127.0.0.1:%s"\n' \
        "$TDM_TEST_PGHOST" "$TDM_TEST_PGPORT" "$TDM_TEST_PGUSER" "$PGDB" "$(free_port)" >"$T/etc/tandemd.env"
    sdc start tandemd.service >"$T/start.log" 2>&1
    ok $? "systemctl start tandemd (Type=notify)"
    prop tandemd.service StatusText | grep -q 'database up'; ok $? "tandemd status: $(prop tandemd.service StatusText)"
    sdc restart tandemd.service >/dev/null 2>&1
    [ "$(prop tandemd.service ActiveState)" = active ] && [ "$(prop 'tandem-worker@wd.service' MainPID)" = "$m1" ]
    ok $? "systemctl restart tandemd: the worker unit's main process unchanged"
    sdc stop tandemd.service >/dev/null 2>&1
    [ "$(prop 'tandem-worker@wd.service' ActiveState)" = active ] && [ "$(prop 'tandem-worker@wd.service' MainPID)" = "$m1" ]
    ok $? "systemctl stop tandemd: the worker unit keeps running"
else
    echo "# no test PostgreSQL (run under make check): tandemd's unit not started"
fi

sdc stop 'tandem-worker@wd.service' >/dev/null 2>&1
[ "$(prop 'tandem-worker@wd.service' ActiveState)" = inactive ] && [ "$(prop 'tandem-worker@wd.service' Result)" = success ]
ok $? "systemctl stop: SIGTERM drains and the worker exits cleanly (Result=success)"
tap_done
