#!/bin/sh
# test-cp-migrate.sh — the embedded migrations, applied by `tandemd --migrate` to an empty
# database, produce exactly sql/expected/schema.out (PostgreSQL-regress style diff); a second run
# is a no-op; a database whose schema is newer than the binary is refused.
set -u
: "${TDM_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${TDM_BUILDDIR:=$(pwd)}"
if [ -z "${TDM_TEST_PGHOST:-}" ] || [ -z "${TDM_TEST_PGPORT:-}" ] || [ -z "${TDM_TEST_PGUSER:-}" ]; then
    echo "Bail out! no test PostgreSQL (TDM_TEST_PGHOST/PORT/USER unset; run under make check)"
    exit 1
fi
echo "1..7"
db=test_cp_migrate
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h "$TDM_TEST_PGHOST" -p "$TDM_TEST_PGPORT" -U "$TDM_TEST_PGUSER" "$@"; }
dsn="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=$TDM_TEST_PGUSER dbname=$db"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tandemd="$TDM_BUILDDIR/tandemd"
# the migrations in sql/: their count and the highest version
count=$(ls "$TDM_SRCDIR"/sql/ | grep -c '^[0-9][0-9][0-9][0-9]_[a-z0-9_]*\.sql$')
latest=$(ls "$TDM_SRCDIR"/sql/ | sed -n 's/^0*\([0-9][0-9]*\)_[a-z0-9_]*\.sql$/\1/p' | sort -n | tail -n 1)

psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null 2>"$tmp/err" \
    && echo "ok 1 - fresh database" || { echo "not ok 1 - fresh database"; sed 's/^/# /' "$tmp/err"; }

if "$tandemd" --migrate --state-dir "$tmp/state" --pg-dsn "$dsn" >"$tmp/out" 2>&1 && grep -q "schema version 0 -> $latest" "$tmp/out"; then
    echo "ok 2 - tandemd --migrate applies every migration"
else
    echo "not ok 2 - tandemd --migrate applies every migration"; sed 's/^/# /' "$tmp/out"
fi

psql_ -d "$db" -A -F ' | ' -f "$TDM_SRCDIR/sql/schema.sql" >"$tmp/schema.out" 2>&1
if diff -u "$TDM_SRCDIR/sql/expected/schema.out" "$tmp/schema.out" >"$tmp/diff"; then
    echo "ok 3 - catalog matches sql/expected/schema.out"
else
    echo "not ok 3 - catalog matches sql/expected/schema.out"; sed 's/^/# /' "$tmp/diff"
fi

if "$tandemd" --migrate --state-dir "$tmp/state" --pg-dsn "$dsn" >"$tmp/out" 2>&1 && grep -q "schema version $latest -> $latest" "$tmp/out"; then
    echo "ok 4 - a second --migrate is a no-op"
else
    echo "not ok 4 - a second --migrate is a no-op"; sed 's/^/# /' "$tmp/out"
fi

psql_ -d "$db" -A -F ' | ' -f "$TDM_SRCDIR/sql/schema.sql" >"$tmp/schema2.out" 2>&1
cmp -s "$tmp/schema.out" "$tmp/schema2.out" && echo "ok 5 - schema unchanged by the second run" \
    || echo "not ok 5 - schema unchanged by the second run"

psql_ -d "$db" -c "INSERT INTO schema_migrations VALUES (9999, 'from_the_future', 0)" >/dev/null
if "$tandemd" --migrate --state-dir "$tmp/state" --pg-dsn "$dsn" >"$tmp/out" 2>&1; then
    echo "not ok 6 - a newer schema is refused"
else
    grep -q "newer than this tandemd" "$tmp/out" && echo "ok 6 - a newer schema is refused" \
        || { echo "not ok 6 - a newer schema is refused (wrong message)"; sed 's/^/# /' "$tmp/out"; }
fi
n=$(psql_ -d "$db" -At -c "SELECT count(*) FROM schema_migrations")
[ "$n" = $((count + 1)) ] && echo "ok 7 - the refused run changed nothing" || echo "not ok 7 - the refused run changed nothing (rows=$n)"
psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
exit 0
