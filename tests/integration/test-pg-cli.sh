#!/bin/sh
# test-pg-cli.sh — `tdm-pg` as `make check` uses it: `start` on the shared cluster's directory
# adopts it and prints the same shell-safe TDM_TEST_PG* lines the suite was started with,
# `status` agrees, and misuse gets distinct exit codes (2 usage, 3 not running). TAP.
b=${TDM_BUILDDIR:-.}
pg=$b/tdm-pg
if test ! -x "$pg"; then echo "Bail out! tdm-pg not built in $b"; exit 1; fi
if test -z "$TDM_TEST_PGHOST" || test -z "$TDM_TEST_PGPORT"; then
    echo "Bail out! no test PostgreSQL (run under make check)"; exit 1
fi
echo 1..7
n=0 rc=0
check() { # check DESCRIPTION COMMAND...
    d=$1; shift; n=$((n + 1))
    if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; rc=1; fi
}
out=$("$pg" start "$b/tests/.pg" 2>/dev/null)
check "start adopts the shared cluster (same host)" \
    sh -c 'echo "$1" | grep -qx "TDM_TEST_PGHOST=$2"' _ "$out" "$TDM_TEST_PGHOST"
check "start adopts the shared cluster (same port)" \
    sh -c 'echo "$1" | grep -qx "TDM_TEST_PGPORT=$2"' _ "$out" "$TDM_TEST_PGPORT"
check "the output is valid shell that sets the variables" \
    sh -c 'eval "$1" && test "$TDM_TEST_PGPORT" = "$2" && test "$TDM_TEST_PGUSER" = postgres' \
    _ "$out" "$TDM_TEST_PGPORT"
st=$("$pg" status "$b/tests/.pg" 2>/dev/null)
check "status prints the same lines" test "$st" = "$out"
"$pg" status "$b/tests/no-such-cluster" >/dev/null 2>&1; code=$?
check "status of a directory without a cluster exits 3 (got $code)" test "$code" -eq 3
"$pg" >/dev/null 2>&1; code=$?
check "no arguments is a usage error (got $code)" test "$code" -eq 2
"$pg" frobnicate "$b/tests/.pg" >/dev/null 2>&1; code=$?
check "an unknown command is a usage error (got $code)" test "$code" -eq 2
exit $rc
