#!/bin/sh
# test-units.sh — the systemd units in packaging/systemd hold the rules docs/packaging.md states:
# both services Type=notify with a watchdog, tandemd hardened (NoNewPrivileges, ProtectSystem=strict,
# its state dir writable, PrivateTmp, StateDirectory) and KillMode=mixed; the worker template reads
# /etc/tandem/workers/%i.conf and the override file tandemd's reconfigure writes, NotifyAccess=all
# (rank 0, the launcher's child, sends READY and WATCHDOG), KillMode=mixed, TimeoutStopSec above
# the worker's drain deadline, and no Requires=/BindsTo=/Requisite= on tandemd (only After=/Wants=).
# The drain deadline is the one the installed demo config resolves to (tandem-worker
# --print-config), so raising the default past the unit's stop timeout fails here.
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/tap-lib.sh"
tap_need_exec "$BIN"
U=$SRC/packaging/systemd
D=$U/tandemd.service
W=$U/tandem-worker@.service
T=$U/tandem.target

# val FILE SECTION KEY: every value of KEY in [SECTION], one a line (systemd's own syntax: a key
# may repeat; whitespace around '=' is ignored; '#' and ';' start comments).
val() {
    awk -v sec="[$2]" -v key="$3" '
        /^[ \t]*[#;]/ { next }
        /^[ \t]*\[/ { cur = $0; gsub(/[ \t]/, "", cur); next }
        cur == sec {
            i = index($0, "="); if (!i) next
            k = substr($0, 1, i - 1); v = substr($0, i + 1)
            gsub(/^[ \t]+|[ \t]+$/, "", k); gsub(/^[ \t]+|[ \t]+$/, "", v)
            if (k == key) print v
        }' "$1"
}
# is FILE SECTION KEY VALUE: the key's last value is VALUE
is() { [ "$(val "$1" "$2" "$3" | tail -n 1)" = "$4" ]; }
# seconds "90" / "1min 30s" / "2min" / "infinity" -> seconds (infinity: a large number)
secs() {
    echo "$1" | awk '{ t = 0
        for (i = 1; i <= NF; i++) { v = $i
            if (v == "infinity") { print 999999999; exit }
            n = v + 0
            if (v ~ /ms$/) t += n / 1000; else if (v ~ /min$/ || v ~ /m$/) t += n * 60;
            else if (v ~ /h$/) t += n * 3600; else t += n }
        print t }'
}

for f in "$D" "$W" "$T"; do
    [ -r "$f" ]; ok $? "$(basename "$f") exists"
done

# tandemd.service
is "$D" Service Type notify; ok $? "tandemd: Type=notify"
wd=$(secs "$(val "$D" Service WatchdogSec | tail -n 1)")
[ -n "$wd" ] && awk -v w="$wd" 'BEGIN { exit !(w > 0) }'; ok $? "tandemd: WatchdogSec set ($wd s)"
is "$D" Service KillMode mixed; ok $? "tandemd: KillMode=mixed"
na=$(val "$D" Service NotifyAccess | tail -n 1)
[ "$na" = main ] || [ "$na" = all ]; ok $? "tandemd: NotifyAccess=main|all ($na)"
is "$D" Service NoNewPrivileges yes; ok $? "tandemd: NoNewPrivileges=yes"
is "$D" Service ProtectSystem strict; ok $? "tandemd: ProtectSystem=strict"
is "$D" Service PrivateTmp yes; ok $? "tandemd: PrivateTmp=yes"
is "$D" Service StateDirectory tandem; ok $? "tandemd: StateDirectory=tandem"
val "$D" Service ReadWritePaths | tr ' ' '\n' | grep -qx /var/lib/tandem
ok $? "tandemd: ReadWritePaths has /var/lib/tandem"
val "$D" Service ExecStart | grep -q '^/usr/bin/tandemd .*--state-dir /var/lib/tandem'
ok $? "tandemd: ExecStart runs /usr/bin/tandemd on /var/lib/tandem"
is "$D" Service User tandem; ok $? "tandemd: runs as the tandem user"

# tandem-worker@.service
is "$W" Service Type notify; ok $? "worker: Type=notify"
wwd=$(secs "$(val "$W" Service WatchdogSec | tail -n 1)")
[ -n "$wwd" ] && awk -v w="$wwd" 'BEGIN { exit !(w > 0) }'; ok $? "worker: WatchdogSec set ($wwd s)"
is "$W" Service NotifyAccess all; ok $? "worker: NotifyAccess=all (rank 0 is the launcher's child)"
is "$W" Service KillMode mixed; ok $? "worker: KillMode=mixed"
is "$W" Service NoNewPrivileges yes; ok $? "worker: NoNewPrivileges=yes"
dep=$(for k in Requires BindsTo Requisite PartOf; do val "$W" Unit $k; done | tr ' ' '\n' |
      grep -x 'tandemd.service')
[ -z "$dep" ]; ok $? "worker: no Requires/BindsTo/Requisite/PartOf on tandemd.service"
val "$W" Unit After | tr ' ' '\n' | grep -qx tandemd.service
ok $? "worker: After=tandemd.service (ordering only)"
ex=$(val "$W" Service ExecStart | tail -n 1)
echo "$ex" | grep -q -- '--config /etc/tandem/workers/%i.conf'
ok $? "worker: ExecStart reads /etc/tandem/workers/%i.conf"
# reconfigure writes <state_dir>/groups/NAME/override.ini (controlplane/act/act_exec.c)
grep -q '"%s/groups/%s/override.ini"' "$SRC/controlplane/act/act_exec.c" &&
    echo "$ex" | grep -q -- '--override-config /var/lib/tandem/groups/%i/override.ini'
ok $? "worker: ExecStart reads the override file tandemd's reconfigure writes"
drain=$("$BIN" --config "$SRC/packaging/workers/demo.conf" --print-config 2>/dev/null |
        sed -n '/"drain_timeout"/,/}/s/.*"value": *\([0-9.]*\).*/\1/p' | head -n 1)
stop=$(secs "$(val "$W" Service TimeoutStopSec | tail -n 1)")
[ -n "$drain" ] && [ -n "$stop" ] && awk -v s="$stop" -v d="$drain" 'BEGIN { exit !(s >= d + 10) }'
ok $? "worker: TimeoutStopSec ($stop s) >= the drain deadline ($drain s) + 10 s"
is "$W" Install WantedBy tandem.target; ok $? "worker: WantedBy=tandem.target"

# tandem.target
val "$T" Unit Wants | tr ' ' '\n' | grep -qx tandemd.service; ok $? "target: Wants=tandemd.service"
tap_done
