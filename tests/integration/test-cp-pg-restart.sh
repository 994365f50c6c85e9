#!/bin/sh
# test-cp-pg-restart.sh — tandemd across a restart of a private PostgreSQL cluster started the way
# tools/demo.sh starts it (`tdm-pg start DIR`, a DSN naming the printed host and port):
#   the restarted cluster keeps its address (host and port), so tandemd reconnects by itself;
#   /health says "db":"down" while the cluster is down and "up" once tandemd is back;
#   reads right after (GET /api/v1/actions, served by the read pool, whose idle connections all
#   went stale with the restart) are answered 200, none 503 db_unavailable.
# Also: a body over the router's limit gets 413 in the JSON error shape. The cluster is the
# test's own (tdm-pg in a temp directory), so it can be stopped.
set -u
SRC=${TDM_SRCDIR:-.}
. "$SRC/tests/integration/tap-lib.sh"
tap_need_exec "$BUILD/tandemd"
tap_need_exec "$BUILD/tdm-pg"
if [ -z "${TDM_TEST_PGHOST:-}" ]; then
    echo "Bail out! no test PostgreSQL (run under make check)"
    exit 1
fi
T=$(mktemp -d /tmp/cp-pg-restart-XXXXXX)
tpid=""
trap '[ -n "$tpid" ] && kill -9 $tpid 2>/dev/null; "$BUILD/tdm-pg" destroy "$T/pg" > /dev/null 2>&1; rm -rf "$T"' EXIT
chmod 0755 "$T"

pg_start() { # → HOST PORT
    "$BUILD/tdm-pg" start "$T/pg" > "$T/pg.env" 2>> "$T/pg.log" || return 1
    HOST=$(sed -n 's/^TDM_TEST_PGHOST=//p' "$T/pg.env")
    PORT=$(sed -n 's/^TDM_TEST_PGPORT=//p' "$T/pg.env")
}

health_db() { # the "db" member of /health
    curl -s -m 2 "$url/health" | sed -n 's/.*"db":"\([a-z]*\)".*/\1/p'
}

wait_db() { # STATE SECONDS → 0 once /health says STATE
    k=0
    while [ $k -lt $(($2 * 10)) ]; do
        [ "$(health_db)" = "$1" ] && return 0
        sleep 0.1
        k=$((k + 1))
    done
    return 1
}

pg_start
ok $? "tdm-pg starts a private cluster ($HOST port $PORT)"
host1=$HOST
port1=$PORT
dsn="host=$HOST port=$PORT user=postgres dbname=postgres connect_timeout=2"
"$BUILD/tandemd" --listen 127.0.0.1:0 --state-dir "$T/state" --pg-dsn "$dsn" \
    --ready-file "$T/ready" > "$T/tandemd.log" 2>&1 &
tpid=$!
i=0
while [ $i -lt 200 ] && [ ! -s "$T/ready" ]; do
    sleep 0.05
    i=$((i + 1))
done
url="http://127.0.0.1:$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$T/ready")"
wait_db up 20
ok $? "tandemd is connected (/health db up)"

reads() { # how many of 6 reads (distinct limits: none is answered from a cache) get 200
    good=0
    for k in 1 2 3 4 5 6; do
        c=$(curl -s -o /dev/null -w '%{http_code}' -m 10 -H "Authorization: Bearer $admin" \
            "$url/api/v1/actions?limit=$1$k")
        [ "$c" = 200 ] && good=$((good + 1))
    done
    echo $good
}
admin=$(cat "$T/state/admin.token")
# the router's body limit (8 MiB) answers in the JSON error shape, not h2o's plain text
head -c $((8 * 1024 * 1024 + 4096)) /dev/zero | tr '\0' 'a' > "$T/big"
code=$(curl -s -o "$T/big.out" -w '%{http_code}' -m 20 -H 'Content-Type: application/json' \
    --data-binary @"$T/big" "$url/v1/completions")
[ "$code" = 413 ] && grep -q '"error".*"code"' "$T/big.out"
ok $? "a body over the router's limit gets 413 in the JSON error shape ($code: $(head -c 80 "$T/big.out"))"
rm -f "$T/big"
r=$(reads 1)
[ "$r" = 6 ]
ok $? "6 reads before the restart: all 200 ($r)"

"$BUILD/tdm-pg" stop "$T/pg" > /dev/null 2>> "$T/pg.log"
wait_db down 10
ok $? "/health says db down while the cluster is stopped"
pg_start
[ "$HOST" = "$host1" ] && [ "$PORT" = "$port1" ]
ok $? "the restarted cluster keeps its address ($HOST port $PORT; was $host1 port $port1)"
wait_db up 20
ok $? "tandemd reconnects by itself (/health db up)"
r=$(reads 2)
[ "$r" = 6 ]
ok $? "6 reads right after the restart: all 200, none 503 on a stale read connection ($r)"

[ $fail = 0 ] || { sed 's/^/# tandemd: /' "$T/tandemd.log" | tail -15; sed 's/^/# pg: /' "$T/pg.log" | tail -5; }
kill -TERM $tpid
wait $tpid
tpid=""
tap_done
