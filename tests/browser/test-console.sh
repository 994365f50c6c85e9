#!/bin/sh
# test-console.sh — the operator console in a real browser: headless Chromium driven through
# WebDriver (tests/browser/console.mjs, npm selenium-webdriver) against a real tandemd, PostgreSQL
# (with 1M telemetry rows) and a supervised TP=2 group of CPU workers with fault injection. The
# page signs in, shows rank_idle_path's divergence in the lockstep and alert views, restarts the
# group and turns overlap off through its dialogs, keeps up with 64 simulated ranks, and refuses
# actions to a read token. Screenshots of every view go to $TDM_SHOTS (default: the test's
# temporary folder; `make screenshots` writes docs/screenshots/).
set -u
: "${TDM_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${TDM_BUILDDIR:=$(pwd)}"
if [ -z "${TDM_TEST_PGHOST:-}" ]; then echo "Bail out! no test PostgreSQL (run under make check)"; exit 1; fi
chromium=$(command -v chromium || command -v chromium-browser || true)
driver=$(command -v chromedriver || true)
[ -n "$chromium" ] && [ -n "$driver" ] || { echo "Bail out! chromium and chromium-driver are needed (tools/install-deps.sh)"; exit 1; }
command -v node >/dev/null 2>&1 || { echo "Bail out! node is needed (tools/install-deps.sh)"; exit 1; }
BT="$TDM_SRCDIR/tests/browser"
NM="$BT"
if [ ! -d "$NM/node_modules/selenium-webdriver" ]; then
    # a read-only source tree (distcheck) installs into the build tree
    NM="$TDM_BUILDDIR/tests/browser/npm"
    mkdir -p "$NM" && cp "$BT/package.json" "$BT/package-lock.json" "$NM/"
    (cd "$NM" && timeout 300 npm ci --no-audit --no-fund >/dev/null 2>&1) ||
        { echo "Bail out! npm ci of tests/browser (selenium-webdriver) failed"; exit 1; }
    cp "$BT/console.mjs" "$NM/"
fi
tmp=$(mktemp -d /tmp/tdm-console-XXXXXX)
db=console_$$
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h "$TDM_TEST_PGHOST" -p "$TDM_TEST_PGPORT" -U "$TDM_TEST_PGUSER" "$@"; }
tpid=
cleanup() {
    [ -n "$tpid" ] && kill "$tpid" 2>/dev/null && wait "$tpid" 2>/dev/null
    for r in "$tmp"/state/groups/*/record.json; do
        [ -f "$r" ] || continue
        p=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$r")
        [ -n "$p" ] && kill "$p" 2>/dev/null
    done
    sleep 1
    psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
psql_ -d postgres -c "CREATE DATABASE $db" >/dev/null || { echo "Bail out! cannot create a database"; exit 1; }
cat >"$tmp/groups.ini" <<INI
[group.b]
port = 0
model_path = $TDM_SRCDIR/models/demo
device = cpu
kv_cpu_bytes = 16777216
tp_size = 2
enable_fault_injection = true
INI
"$TDM_BUILDDIR/tandemd" --listen 127.0.0.1:0 --state-dir "$tmp/state" --ready-file "$tmp/ready.json" \
    --pg-dsn "host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=$TDM_TEST_PGUSER dbname=$db" \
    --groups-config "$tmp/groups.ini" --worker-bin "$TDM_BUILDDIR/tandem-worker" >"$tmp/tandemd.log" 2>&1 &
tpid=$!
i=0
while [ ! -s "$tmp/ready.json" ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
port=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$tmp/ready.json")
[ -n "$port" ] || { echo "Bail out! tandemd did not start"; cat "$tmp/tandemd.log"; exit 1; }
i=0 # tandemd migrates the database on its own thread
until [ "$(psql_ -d "$db" -At -c "SELECT to_regclass('samples') IS NOT NULL")" = t ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
# 1M rows of history (an older incarnation of a 64-rank group) for the page-load check
now=$(($(date +%s) * 1000000))
psql_ -d "$db" -c "INSERT INTO samples SELECT $now - 3600000000 + (i / 64) * 200000, '00000000000000f0', i % 64, 'old', i / 64, i / 64,
    'batch', 171, i / 64, 2748, NULL, 4, 0, 4 FROM generate_series(0::bigint, 999999) i" >/dev/null ||
    { echo "Bail out! cannot insert the 1M telemetry rows"; exit 1; }
echo "# 1M rows in samples: $(psql_ -d "$db" -At -c 'SELECT count(*) FROM samples')"
URL="http://127.0.0.1:$port" ADMIN=$(cat "$tmp/state/admin.token") SHOTS="${TDM_SHOTS:-$tmp/shots}" \
    CHROMEDRIVER="$driver" CHROMIUM="$chromium" PROFILE="$tmp/profile" \
    NODE_PATH="$NM/node_modules" timeout 600 node "$NM/console.mjs"
rc=$?
[ $rc = 0 ] || { echo "# tandemd log (tail):"; tail -n 30 "$tmp/tandemd.log" | sed 's/^/#   /'; }
exit $rc
