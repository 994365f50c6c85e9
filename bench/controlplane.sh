#!/bin/sh
# controlplane.sh BUILDDIR SRCDIR [OUT] — tandemd's ingest and REST reads (docs/contracts.md §h), one run:
#
# 1. A private *durable* PostgreSQL (tdm-pg --durable: fsync and synchronous_commit on, as
#    tandemd's embedded default) and a real tandemd on 127.0.0.1:0 pointed at it.
# 2. ingest, REPS times: empty the telemetry tables; 4 loopback clients POST telemetry v1 batches
#    (bench/controlplane ingest: keep-alive raw HTTP/1.1, one batch in flight each, SAMPLES samples
#    + 4*ROOMS+1 events per batch; by default 1 sample + 509 events, the shape of a loaded rank's
#    reporter batch: one sample per 200 ms tick and every event enqueued since, up to its
#    EVENTS_PER_BATCH cap of 512 — see the JSON "method") until the last {"acked_seq"} (sent only after the batch committed; count(*) must then
#    show every row or the run fails) → ingest_rows_s. Then the same rows are exported (COPY TO),
#    the tables emptied again and `psql -c '\copy … FROM'` loads them into the same partitioned
#    tables with the same indexes, timed by psql's \timing (the three \copy commands; the whole
#    psql run is kept as copy_wall_seconds) → psql_copy_rows_s. Medians of both;
#    ingest_ratio = median ratio of the pairs. Beside them, per-process CPU seconds
#    (tandemd, all postgres processes, the client) of each side, and three diagnostics (one pair
#    each): the same ingest with synchronous_commit=off (what the per-batch commit flush costs),
#    64 samples + 4 rooms per batch (the shape this bench used before) and 1 sample + one room
#    (a quiet rank's batch).
# 3. reads: 1M sample rows (200 ranks x 5000 samples, 200 ms apart: the older 4690 of each rank
#    inserted with SQL, the newest 310 POSTed through tandemd as a live worker sends them) and 300
#    alerts stored; background ingest paced at 4 clients x BG_RATE batches/s; open-loop 1000 req/s
#    (bench/controlplane reads: latency from each request's due time) alternating a rank's last
#    60 s of history (300 samples) and /api/v1/alerts (100 newest) → rest_read_p99_ms, median of
#    READ_REPS runs, plus one run at 100 req/s for the service time without queueing, and one
#    diagnostic run whose history windows lie 10 minutes back (only PostgreSQL holds them).
#
# Writes OUT (default SRCDIR/bench/results/controlplane.json) with git_sha, nproc and load
# averages. Use a build without sanitizers. Env: TDM_BENCH_REPS (5), TDM_BENCH_BATCHES (100 per
# client), TDM_BENCH_SAMPLES (1), TDM_BENCH_ROOMS (127), TDM_BENCH_READ_S (15),
# TDM_BENCH_BG_RATE (50), TDM_BENCH_GIT_SHA, TDM_BENCH_NOTE (a `note` kept in the JSON).
set -eu
BUILD=${1:?usage: controlplane.sh BUILDDIR SRCDIR [OUT]}
SRC=${2:?usage: controlplane.sh BUILDDIR SRCDIR [OUT]}
OUT=${3:-$SRC/bench/results/controlplane.json}
REPS=${TDM_BENCH_REPS:-5}
BATCHES=${TDM_BENCH_BATCHES:-100}
SAMPLES=${TDM_BENCH_SAMPLES:-1}
ROOMS=${TDM_BENCH_ROOMS:-127}
READ_S=${TDM_BENCH_READ_S:-15}
READ_REPS=${TDM_BENCH_READ_REPS:-3}
BG_RATE=${TDM_BENCH_BG_RATE:-50}
SEED_FROM=4690
BENCH=$BUILD/bench/controlplane

W=$(mktemp -d /tmp/cpbench-XXXXXX)
TD_PID=
cleanup() {
    [ -n "$TD_PID" ] && kill "$TD_PID" 2>/dev/null && wait "$TD_PID" 2>/dev/null
    "$BUILD/tdm-pg" destroy "$W/pg" >/dev/null 2>&1 || true
    rm -rf "$W"
}
trap cleanup EXIT INT TERM
log() { echo "controlplane bench: $*" >&2; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
"$BUILD/tdm-pg" start "$W/pg" --durable >"$W/pg.env" 2>"$W/pg.log" || { cat "$W/pg.log" >&2; exit 1; }
. "$W/pg.env"
PGPID=$TDM_TEST_PGPID
PSQL="psql -X -h $TDM_TEST_PGHOST -p $TDM_TEST_PGPORT -U $TDM_TEST_PGUSER -v ON_ERROR_STOP=1 -Aqt"
$PSQL -d postgres -c "CREATE DATABASE tandem" >/dev/null
DSN="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=$TDM_TEST_PGUSER dbname=tandem"
PSQL="$PSQL -d tandem"

"$BUILD/tandemd" --listen 127.0.0.1:0 --state-dir "$W/state" --ready-file "$W/ready.json" \
    --pg-dsn "$DSN" >"$W/tandemd.log" 2>&1 &
TD_PID=$!
i=0
until [ -s "$W/ready.json" ] && grep -q "tokens=" "$W/tandemd.log"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$W/tandemd.log" >&2; exit 1; }; sleep 0.1
done
PORT=$(sed 's/.*"http":\([0-9]*\).*/\1/' "$W/ready.json")
TOKEN=$W/state/admin.token

# CPU seconds (user+system) of tandemd, of all postgres processes, as "td pg".
cpu() {
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v tck="$(getconf CLK_TCK)" -v td="$TD_PID" -v pg="$PGPID" '
        { pid = $1; split($0, a, ") "); split(a[2], f, " "); t = (f[12] + f[13]) / tck;
          if (pid == td) tdc += t; else if (pid == pg || f[2] == pg) pgc += t }
        END { printf "%.3f %.3f\n", tdc, pgc }'
}
S_COLS="ts_us, instance_id, rank, group_name, batch_seq, iter, path, plan_hash, coll_seq, coll_hash, in_coll, bs, waiting, running"
T_COLS="ts_us, instance_id, rank, group_name, batch_seq, idx, type, room, from_state, to_state, reason, data"
E_COLS="ts_us, source, instance_id, rank, group_name, batch_seq, idx, type, reason, data"
EMPTY="TRUNCATE samples, transfer_events, events"

# one_pair TAG SAMPLES ROOMS BATCHES LABEL: ingest then \copy of the same rows; appends to pairs.jsonl
one_pair() {
    tag=$1; ns=$2; nr=$3; nb=$4; label=$5
    $PSQL -c "$EMPTY; CHECKPOINT" >/dev/null
    wal0=$($PSQL -c "SELECT count(*) FROM pg_ls_waldir()")
    c0=$(cpu)
    /usr/bin/time -f "%U %S" -o "$W/client.time" "$BENCH" ingest --port "$PORT" --token-file "$TOKEN" \
        --dsn "$DSN" --clients 4 --batches "$nb" --samples "$ns" --rooms "$nr" --tag "$tag" >"$W/ing.json"
    c1=$(cpu)
    like="instance_id >= '$tag' AND instance_id < '$(printf '%016x' $((0x$tag + 4)))'"
    $PSQL -c "\\copy (SELECT $S_COLS FROM samples WHERE $like) TO '$W/s.tsv'" \
          -c "\\copy (SELECT $T_COLS FROM transfer_events WHERE $like) TO '$W/t.tsv'" \
          -c "\\copy (SELECT $E_COLS FROM events WHERE source = 'worker' AND $like) TO '$W/e.tsv'"
    rows=$(cat "$W/s.tsv" "$W/t.tsv" "$W/e.tsv" | wc -l)
    $PSQL -c "$EMPTY; CHECKPOINT" >/dev/null
    c2=$(cpu)
    t0=$(date +%s.%N)
    # \timing: the three \copy commands' own time (psql's start and connect are not counted)
    $PSQL -c '\timing on' -c "\\copy samples ($S_COLS) FROM '$W/s.tsv'" \
          -c "\\copy transfer_events ($T_COLS) FROM '$W/t.tsv'" \
          -c "\\copy events ($E_COLS) FROM '$W/e.tsv'" \
          -c '\timing off' -c "SELECT pg_read_file('/proc/self/stat')" >"$W/copy.out"
    t1=$(date +%s.%N)
    copy_s=$(awk '/^Time: / { t += $2 } END { printf "%.6f", t / 1000 }' "$W/copy.out")
    grep -v '^Time: ' "$W/copy.out" >"$W/copy.stat"
    # the \copy backend exits with psql: its own CPU time, read from inside it
    cb=$(awk -v tck="$(getconf CLK_TCK)" 'NR == 1 { split($0, a, ") "); split(a[2], f, " "); printf "%.3f", (f[12] + f[13]) / tck }' "$W/copy.stat")
    c3=$(cpu)
    got=$($PSQL -c "SELECT (SELECT count(*) FROM samples) + (SELECT count(*) FROM transfer_events) + (SELECT count(*) FROM events WHERE source = 'worker')")
    [ "$got" = "$rows" ] || { log "\\copy loaded $got of $rows rows"; exit 1; }
    echo "{\"label\":\"$label\",\"ingest\":$(cat "$W/ing.json"),\"copy_rows\":$rows,\"copy_seconds\":$copy_s,\"copy_wall_seconds\":$(awk "BEGIN { printf \"%.6f\", $t1 - $t0 }"),\"cpu_ingest\":\"$c0 $c1 $(cat "$W/client.time")\",\"cpu_copy\":\"$c2 $c3 $cb\",\"wal_segments\":\"$wal0 $($PSQL -c "SELECT count(*) FROM pg_ls_waldir()")\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >>"$W/pairs.jsonl"
    log "$label: $(cat "$W/ing.json" | sed 's/.*"rows_s":\([0-9.]*\).*/ingest \1 rows\/s/'), copy $rows rows in $copy_s s (psql wall $(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }") s)"
}

# Warm-up pair (same shape, both sides, not in the medians; kept as the `warmup` diagnostic): the
# first pair on a fresh cluster and tandemd paid for what later pairs find done — WAL segments
# created instead of recycled (see wal_segments_before_after), cold backends and caches — on the
# ingest side only, since the \copy side of a pair runs after it.
one_pair 7ef0000000000000 "$SAMPLES" "$ROOMS" "$BATCHES" warmup
n=0
while [ $n -lt "$REPS" ]; do
    n=$((n + 1))
    one_pair "$(printf '7e%02x000000000000' "$n")" "$SAMPLES" "$ROOMS" "$BATCHES" main
done
# Diagnostics (one pair each): the commit flush, the earlier 64-sample shape, a quiet rank's batches.
$PSQL -c "ALTER SYSTEM SET synchronous_commit = off" -c "SELECT pg_reload_conf()" >/dev/null
one_pair 7ea0000000000000 "$SAMPLES" "$ROOMS" "$BATCHES" sync_commit_off
$PSQL -c "ALTER SYSTEM RESET synchronous_commit" -c "SELECT pg_reload_conf()" >/dev/null
one_pair 7ec0000000000000 64 4 "$BATCHES" samples_64
one_pair 7eb0000000000000 1 1 $((BATCHES * 16)) quiet_rank

# ---- reads --------------------------------------------------------------------------------------
log "storing 1M sample rows"
NOW=$(date +%s%6N)
$PSQL -c "$EMPTY" -c "INSERT INTO samples SELECT $NOW - (4999 - s) * 200000,
      lpad(to_hex(x'3f00000000000000'::bigint + k), 16, '0'), 0, 'hist-' || (k % 50), 1 + s / 5,
      1000 + s * 7, 'batch', s * 2654435761, s * 56, s * 40503,
      CASE WHEN s % 4 = 1 THEN jsonb_build_object('op', 'all_reduce', 'seq', s * 56 + 3, 'since_us', $NOW - (4999 - s) * 200000 - 150) END,
      8 + s % 24, s % 5, 8 + s % 24
    FROM generate_series(0, 199) k, generate_series(0, $((SEED_FROM - 1))) s" \
  -c "INSERT INTO alerts (kind, group_name, state, summary, evidence, opened_us, resolved_us, resolved_by)
      SELECT (ARRAY['WEDGE','RANK_DIVERGENCE','TRANSFER_STALL','WORKER_LOST'])[1 + i % 4], 'hist-' || (i % 50),
             CASE WHEN i % 3 = 0 THEN 'open' ELSE 'resolved' END, 'bench alert ' || i,
             jsonb_build_object('form', 'record', 'seq', i, 'ranks', jsonb_build_array(0, 1, 2, 3), 'minority', jsonb_build_array(jsonb_build_object('rank', 1, 'op', 'broadcast', 'seq', i))),
             $NOW - (300 - i) * 1000000, CASE WHEN i % 3 = 0 THEN NULL ELSE $NOW - (300 - i) * 1000000 + 5000000 END,
             CASE WHEN i % 3 = 0 THEN NULL ELSE 'auto' END
      FROM generate_series(1, 300) i" -c "ANALYZE samples" -c "ANALYZE alerts" -c "CHECKPOINT" >/dev/null
# The newest SEED_FROM..4999 of every rank (62 s) go through tandemd, as a live worker sends them.
"$BENCH" seed --port "$PORT" --token-file "$TOKEN" --hist-tag 3f00000000000000 --hist-ranks 200 \
    --now-us "$NOW" --from-s "$SEED_FROM" --to-s 4999 >"$W/seed.json" || { cat "$W/seed.json" >&2; exit 1; }
$PSQL -c "ANALYZE samples" -c "CHECKPOINT" >/dev/null
stored=$($PSQL -c "SELECT count(*) FROM samples")
UNTIL=$((NOW + 1)); SINCE=$((UNTIL - 60000000))

one_read() { # RPS SECONDS TAG LABEL SINCE UNTIL
    "$BENCH" ingest --port "$PORT" --token-file "$TOKEN" --clients 4 --samples 1 --rooms 1 \
        --rate "$BG_RATE" --seconds $(($2 + 3)) --tag "$(printf '7c%02x000000000000' "$3")" >"$W/bg.json" &
    bg=$!
    sleep 1
    c0=$(cpu)
    "$BENCH" reads --port "$PORT" --token-file "$TOKEN" --rps "$1" --seconds "$2" --conns 128 \
        --hist-tag 3f00000000000000 --hist-ranks 200 --since-us "$5" --until-us "$6" >"$W/rd.json" || true
    c1=$(cpu)
    wait "$bg" || log "background ingest reported errors"
    echo "{\"label\":\"$4\",\"rps\":$1,\"reads\":$(cat "$W/rd.json"),\"background_ingest\":$(cat "$W/bg.json"),\"cpu\":\"$c0 $c1\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >>"$W/reads.jsonl"
    log "reads ($4) at $1/s: $(cat "$W/rd.json")"
}
n=0
while [ $n -lt "$READ_REPS" ]; do
    n=$((n + 1))
    one_read 1000 "$READ_S" "$n" main "$SINCE" "$UNTIL"
done
one_read 100 10 9 main "$SINCE" "$UNTIL"
# Diagnostic: a 60 s window 10 minutes back, which only the database holds (every history read
# goes to PostgreSQL).
one_read 1000 "$READ_S" 10 db_history $((SINCE - 600000000)) $((UNTIL - 600000000))

sha=${TDM_BENCH_GIT_SHA:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
dirty=false
[ -z "${TDM_BENCH_GIT_SHA:-}" ] && ! git -C "$SRC" diff --quiet HEAD -- controlplane sql bench/controlplane.c bench/controlplane.sh 2>/dev/null && dirty=true
pgver=$($PSQL -c "SHOW server_version")
python3 - "$W/pairs.jsonl" "$W/reads.jsonl" "$OUT" "$sha" "$dirty" "$load_before" "$pgver" "$stored" \
    "$REPS $BATCHES $SAMPLES $ROOMS $READ_S $READ_REPS $BG_RATE" <<'PY'
import json, os, platform, statistics, sys
pairs_p, reads_p, out, sha, dirty, load_before, pgver, stored, cfg = sys.argv[1:]
reps, batches, samples, rooms, read_s, read_reps, bg_rate = cfg.split()
pairs = [json.loads(l) for l in open(pairs_p)]
reads = [json.loads(l) for l in open(reads_p)]
med = statistics.median

def pair_doc(p):
    i = p['ingest']
    c = [float(x) for x in p['cpu_ingest'].split()]
    k = [float(x) for x in p['cpu_copy'].split()]
    copy_rs = p['copy_rows'] / p['copy_seconds']
    wall_rs = p['copy_rows'] / p['copy_wall_seconds']
    return {'ingest_rows_s': round(i['rows_s']), 'psql_copy_rows_s': round(copy_rs),
            'ratio': round(i['rows_s'] / copy_rs, 3),
            'psql_copy_wall_rows_s': round(wall_rs), 'ratio_vs_psql_wall': round(i['rows_s'] / wall_rs, 3),
            'rows': i['rows_committed'],
            'batches': i['batches'], 'samples_per_batch': i['samples_per_batch'],
            'events_per_batch': i['events_per_batch'], 'ingest_seconds': i['seconds'],
            'copy_seconds': round(p['copy_seconds'], 4),
            'copy_wall_seconds': round(p['copy_wall_seconds'], 4), 'batches_s': i['batches_s'],
            'post_ms_p50': i['post_ms_p50'], 'post_ms_p99': i['post_ms_p99'],
            'cpu_s_ingest': {'tandemd': round(c[2] - c[0], 3), 'postgres': round(c[3] - c[1], 3),
                             'client': round(c[4] + c[5], 3)},
            'cpu_s_copy': {'postgres': round(k[3] - k[1] + k[4], 3)},
            'wal_segments_before_after': [int(x) for x in p.get('wal_segments', '0 0').split()],
            'loadavg_after': p['loadavg']}

main = [pair_doc(p) for p in pairs if p['label'] == 'main']
diag = {p['label']: pair_doc(p) for p in pairs if p['label'] != 'main'}

def read_doc(r):
    c = [float(x) for x in r['cpu'].split()]
    d = dict(r['reads'])
    d['cpu_s'] = {'tandemd': round(c[2] - c[0], 3), 'postgres': round(c[3] - c[1], 3)}
    d['background_ingest'] = r['background_ingest']
    d['loadavg_after'] = r['loadavg']
    return d

r1k = [read_doc(r) for r in reads if r['rps'] == 1000 and r['label'] == 'main']
r100 = [read_doc(r) for r in reads if r['rps'] == 100 and r['label'] == 'main']
rdb = [read_doc(r) for r in reads if r['label'] == 'db_history']
ing = med([m['ingest_rows_s'] for m in main])
cp = med([m['psql_copy_rows_s'] for m in main])
ratio = med([m['ratio'] for m in main])
p99 = med([r['all']['p99_ms'] for r in r1k])
sync_off = diag.get('sync_commit_off')
m_s = med([m['ingest_seconds'] for m in main])
busy = med([(m['cpu_s_ingest']['tandemd'] + m['cpu_s_ingest']['postgres'] + m['cpu_s_ingest']['client'])
            / m['ingest_seconds'] for m in main])
where = {
    'ingest_cpu_busy_cores': round(busy, 3),
    'commit_flush_share': round(1 - sync_off['ingest_seconds'] / m_s, 3) if sync_off else None,
    'note': 'ingest_cpu_busy_cores = (tandemd + postgres + client CPU seconds) / wall seconds of the '
            'ingest side (2 cores exist): below 1 means the path waits, not computes. '
            'commit_flush_share = the part of the ingest time that synchronous_commit=off removes: '
            'tandemd commits the batches queued together (group commit) in one transaction per ingest '
            'connection, two query strings (3 round trips: marks + transfer_events COPY; the '
            'group\'s few samples and events rows as INSERTs + marks raised + COMMIT; 5 with COPYs '
            'when they are more than 64); the group starts with the batches queued and, '
            'while its transfer_events COPY is open (up to 4 ms), the other ranks seen in the last '
            '20 ms join it as they arrive, so PostgreSQL inserts while tandemd still receives and '
            'decodes; psql \\copy flushes once per table. Rows in PostgreSQL\'s binary COPY '
            'format were tried (4bcca7f, reverted in 58817e5): in alternating runs of two tandemds '
            'on one cluster PostgreSQL\'s CPU per ingest run rose from 0.73-0.77 s to 1.00-1.19 s and '
            'rows/s fell about 20%, though a psql COPY of the same rows costs the same in either '
            'format (not explained yet). A second ingest connection '
            '(TDM_CP_DB_INGEST_CONNS=2: each rank bound to one, so one group copies while the other '
            'waits for its WAL flush) was measured on this host in full runs of this bench: median '
            'ratio 0.815, 0.770, 0.774 against 0.706-0.743 with one, but about twice the tandemd '
            'and PostgreSQL CPU per batch for small batches (quiet_rank 11-12k rows/s against '
            '15-20k; smaller groups, a transaction each), so tandemd uses one.'}
doc = {
    'bench': 'controlplane', 'git_sha': sha,
    **({'note': os.environ['TDM_BENCH_NOTE']} if os.environ.get('TDM_BENCH_NOTE') else {}),
    'dirty': dirty == 'true', 'host': platform.node(),
    'nproc': os.cpu_count(), 'loadavg_before': load_before,
    'loadavg_after': open('/proc/loadavg').read().split()[:3],
    'postgres': pgver + ', private cluster, durable (fsync on, synchronous_commit on)',
    'ingest_rows_s': ing, 'psql_copy_rows_s': cp, 'ingest_ratio': ratio,
    'ingest_ratio_target': 0.8, 'ingest_ratio_met': ratio >= 0.8,
    'ingest_ratio_vs_psql_wall': med([m['ratio_vs_psql_wall'] for m in main]),
    'rest_read_p99_ms': p99, 'rest_read_p99_target_ms': 5.0, 'rest_read_p99_met': p99 <= 5.0,
    'rest_read_achieved_rps': med([r['achieved_rps'] for r in r1k]),
    'rest_read_p99_ms_at_100_rps': med([r['all']['p99_ms'] for r in r100]) if r100 else None,
    'rest_read_p50_ms_at_100_rps': med([r['all']['p50_ms'] for r in r100]) if r100 else None,
    'anchors': {
        'ingest': 'psql \\copy of the very rows tandemd committed (exported with COPY TO), into the same '
                  'partitioned tables with the same indexes, emptied before each side, same cluster, same run; '
                  'timed by psql\'s \\timing over the three \\copy commands (psql start and connect not '
                  'counted; copy_wall_seconds has the whole psql run)',
        'reads': 'none external: open-loop latency from each request\'s due time; the 100 req/s run gives '
                 'the service time without queueing'},
    'method': {
        'ingest': '4 loopback clients (one rank each, own group), keep-alive HTTP/1.1, one batch in flight '
                  'per client (as a reporter sends), bodies rendered before the clock; each batch %s '
                  'sample(s) + %s rooms x 4 KVPoll transfer events + 1 output_stats event (+ shutdown '
                  'in the last): with the defaults 1 sample + 509 events, the batch a loaded rank\'s '
                  'reporter sends (dataplane/report: one sample per 200 ms tick plus every event '
                  'enqueued since, at most EVENTS_PER_BATCH = 512 per batch; events pile up to that '
                  'while a batch is in flight, e.g. a PD rank at ~600 transfers/s or catching up '
                  'after a stall); the 64-sample shape used before is the samples_64 diagnostic; '
                  'rows = samples + transfer_events + worker events; end = the last {"acked_seq"} '
                  '(tandemd acknowledges a batch only after its transaction committed), then count(*) '
                  'must equal the rows sent or the run fails; samples 200 ms apart so the 10 Hz '
                  'thinning keeps all' % (samples, rooms),
        'reads': 'open loop at the target rate over up to 128 keep-alive connections; even requests GET '
                 '/api/v1/ranks/<inst>/0/history?since_us&until_us (60 s = 300 samples of one of 200 '
                 'ranks), odd requests GET /api/v1/alerts (100 newest of 300); 1M sample rows stored: '
                 'per rank the older 4690 with SQL, the newest 310 (62 s) POSTed through tandemd as a '
                 'live worker sends them, so tandemd\'s cache of committed rows covers the last 60 s '
                 '(X-Tandem-Source: memory; a window it does not cover goes to PostgreSQL, see '
                 'reads_db_history); background ingest 4 clients x %s batches/s (1 sample + 5 events '
                 'each)' % bg_rate,
        'repeats': 'medians over %s ingest/copy pairs (after one warm-up pair of the same shape, '
                   'both sides, reported as ingest_diagnostics.warmup) and %s read runs of %s s'
                   % (reps, read_reps, read_s)},
    'commands': {
        'make': 'make bench-controlplane (bench/controlplane.sh BUILDDIR SRCDIR)',
        'cluster': 'tdm-pg start DIR --durable',
        'tandemd': 'tandemd --listen 127.0.0.1:0 --state-dir DIR --ready-file F --pg-dsn DSN',
        'ingest': 'bench/controlplane ingest --port P --token-file T --dsn DSN --clients 4 --batches %s '
                  '--samples %s --rooms %s --tag HEX' % (batches, samples, rooms),
        'copy': "psql -c '\\copy samples (...) FROM s.tsv' -c '\\copy transfer_events (...) FROM t.tsv' "
                "-c '\\copy events (...) FROM e.tsv'",
        'reads': 'bench/controlplane reads --port P --token-file T --rps 1000 --seconds %s --conns 128 '
                 '--hist-tag 3f00000000000000 --hist-ranks 200 --since-us A --until-us B' % read_s,
        'background': 'bench/controlplane ingest --clients 4 --samples 1 --rooms 1 --rate %s --seconds D'
                      % bg_rate},
    'where_the_time_goes': where,
    'sample_rows_stored': int(stored),
    'ingest_runs': main, 'ingest_diagnostics': diag,
    'reads_1000_rps': r1k, 'reads_100_rps': r100,
    'reads_db_history': {
        'note': 'diagnostic: the same read mix with every history window 10 minutes back (only '
                'PostgreSQL holds it): what a window the cache does not cover costs',
        'p99_ms': med([r['all']['p99_ms'] for r in rdb]) if rdb else None,
        'history_p99_ms': med([r['history']['p99_ms'] for r in rdb]) if rdb else None,
        'runs': rdb},
}
json.dump(doc, open(out, 'w'), indent=1)
open(out, 'a').write('\n')
print(json.dumps({k: doc[k] for k in ('ingest_rows_s', 'psql_copy_rows_s', 'ingest_ratio', 'rest_read_p99_ms')}))
PY
