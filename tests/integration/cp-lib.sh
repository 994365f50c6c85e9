# tests/integration/cp-lib.sh — sourced by the shell tests that run a real tandemd on a fresh
# database of the test cluster, after tap-lib.sh. The test sets CPL_DB (its database name) first.
#   cpl_require          : bail out (a failure) unless make check's PostgreSQL and tandemd are there
#   cpl_start [ARGS...]  : tandemd on 127.0.0.1:0 (or $cp_port once known) with --state-dir
#                          $CPL_T/state and the database; sets cp_port, url, admin (its token)
#   cpl_stop             : SIGTERM tandemd and reap it
#   cpl_api ARGS...      : curl with the admin token
#   cpl_sql SQL          : one value from the database (psql -tA)
#   cpl_live KIND GROUP  : how many live alerts of KIND name GROUP (any state)
# CPL_T is a fresh directory; EXIT cleans up tandemd, the test's pids in $CPL_PIDS and the
# database.
# shellcheck shell=sh
cpl_require() {
    if [ -z "${TDM_TEST_PGHOST:-}" ] || [ -z "${TDM_TEST_PGPORT:-}" ] || [ -z "${TDM_TEST_PGUSER:-}" ]; then
        echo "Bail out! no test PostgreSQL (TDM_TEST_PGHOST/PORT/USER unset; run under make check)"
        exit 1
    fi
    tap_need_exec "$BUILD/tandemd"
    CPL_T=$(mktemp -d)
    CPL_PIDS=""
    cpl_tpid=""
    cpl_psql -d postgres -c "DROP DATABASE IF EXISTS $CPL_DB WITH (FORCE)" > /dev/null 2>&1
    cpl_psql -d postgres -c "CREATE DATABASE $CPL_DB" > /dev/null || {
        echo "Bail out! cannot create database $CPL_DB"
        exit 1
    }
    cpl_dsn="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=$TDM_TEST_PGUSER dbname=$CPL_DB"
    trap cpl_cleanup EXIT
}

cpl_psql() {
    psql -X -q -v ON_ERROR_STOP=1 -h "$TDM_TEST_PGHOST" -p "$TDM_TEST_PGPORT" -U "$TDM_TEST_PGUSER" "$@"
}

cpl_cleanup() {
    for p in $CPL_PIDS; do kill -9 "$p" 2> /dev/null; done
    [ -n "$cpl_tpid" ] && kill -9 "$cpl_tpid" 2> /dev/null
    cpl_psql -d postgres -c "DROP DATABASE IF EXISTS $CPL_DB WITH (FORCE)" > /dev/null 2>&1
    rm -rf "$CPL_T"
}

cpl_start() {
    rm -f "$CPL_T/ready"
    "$BUILD/tandemd" --listen "127.0.0.1:${cp_port:-0}" --state-dir "$CPL_T/state" \
        --pg-dsn "$cpl_dsn" --ready-file "$CPL_T/ready" "$@" >> "$CPL_T/tandemd.log" 2>&1 &
    cpl_tpid=$!
    i=0
    while [ $i -lt 200 ] && [ ! -s "$CPL_T/ready" ] && kill -0 $cpl_tpid 2> /dev/null; do
        sleep 0.05
        i=$((i + 1))
    done
    cp_port=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$CPL_T/ready" 2> /dev/null)
    url="http://127.0.0.1:$cp_port"
    admin=$(cat "$CPL_T/state/admin.token" 2> /dev/null)
    [ -n "$cp_port" ] && [ -n "$admin" ]
}

cpl_stop() {
    [ -n "$cpl_tpid" ] || return 0
    kill -TERM "$cpl_tpid" 2> /dev/null
    wait "$cpl_tpid" 2> /dev/null
    cpl_tpid=""
}

cpl_api() {
    curl -s -H "Authorization: Bearer $admin" "$@"
}

cpl_sql() {
    cpl_psql -d "$CPL_DB" -tA -c "$1"
}

cpl_live() {
    cpl_api "$url/api/v1/alerts?source=live" | python3 -c '
import json, sys
kind, group = sys.argv[1], sys.argv[2]
print(sum(1 for a in json.load(sys.stdin).get("alerts", [])
          if a.get("kind") == kind and a.get("group") == group))' "$1" "$2"
}
