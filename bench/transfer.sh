#!/bin/sh
# transfer.sh BUILDDIR SRCDIR [OUT] — KV transfer bandwidth of the engine for one page chunk and
# 1–256 MiB rooms beside `ucx_perftest -t ucp_put_bw` of the same sizes with the same UCX_TLS and
# host memory, in the same run; writes OUT (default SRCDIR/bench/results/transfer.json) with the
# git sha. ratio_vs_ucx_perftest = min over sizes of engine (checksums off) / perftest; the
# checksummed default path is reported beside it, and perftest with -e (peer error handling, the
# engine's endpoint mode) up to 16 MiB. The engine is measured as perftest measures itself, as a
# throughput: TDM_BENCH_WINDOW rooms outstanding (default 16) into the same decode pages (see
# bench/transfer.c); once per size the older one-room rounds run too (engine_rounds_gbps), as a
# same-run A/B of the two protocols. Use a build without sanitizers for numbers.
# Env: TDM_BENCH_PIN (default 1: copier on CPU 0, the rest on CPU 1, perftest alike), TDM_BENCH_SIZES (1..6: how many of 512K,1M,4M,16M,64M,256M), TDM_BENCH_REPEATS (engine +
# perftest pairs per size, default 3; figures are medians), TDM_BENCH_GIT_SHA, TDM_BENCH_NOTE (the
# operator's remark on this run, stored as "note").
set -eu
BUILD=${1:?usage: transfer.sh BUILDDIR SRCDIR [OUT]}
SRC=${2:?usage: transfer.sh BUILDDIR SRCDIR [OUT]}
OUT=${3:-$SRC/bench/results/transfer.json}
N=${TDM_BENCH_SIZES:-6}
REPEATS=${TDM_BENCH_REPEATS:-3}
UCX_TLS=${UCX_TLS:-tcp,sm,self}
UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
TDM_BENCH_WINDOW=${TDM_BENCH_WINDOW:-16}
export UCX_TLS UCX_NET_DEVICES TDM_BENCH_WINDOW
# placement (bench/transfer.c, TDM_BENCH_PIN): the copying side on CPU 0, the other on CPU 1, for
# the engine and for perftest alike (its client copies, its server waits)
PIN0= PIN1=
if [ "${TDM_BENCH_PIN:-1}" != 0 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    PIN0="taskset -c 0" PIN1="taskset -c 1"
fi
runs=$(mktemp)
lcopy=$(mktemp)
floor=$(mktemp)
rounds=$(mktemp)
perf=$(mktemp)
perfe=$(mktemp)
elog=$(mktemp)
loads=$(mktemp)
trap 'rm -f "$runs" "$lcopy" "$floor" "$rounds" "$perf" "$perfe" "$elog" "$loads"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
# perftest put_bw of $1 bytes (extra flags after it) appended to file $2 as "bytes Final: ..."
perftest() {
    b=$1 f=$2
    shift 2
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
    case " $* " in
    *" -e "*) iters=$((33554432 / b)); [ "$iters" -lt 2 ] && iters=2 ;;
    *) iters=$((2147483648 / b)); [ "$iters" -gt 2000 ] && iters=2000; [ "$iters" -lt 8 ] && iters=8 ;;
    esac
    $PIN1 ucx_perftest -p "$port" "$@" >/dev/null 2>&1 &
    srv=$!
    sleep 0.5
    line=$(timeout 120 $PIN0 ucx_perftest 127.0.0.1 -p "$port" "$@" -t ucp_put_bw -s "$b" -n "$iters" 2>/dev/null | grep '^Final:' || true)
    wait "$srv" 2>/dev/null || true
    echo "$b $line" >>"$f"
}
# Size by size, REPEATS times: the engine and right after it ucx_perftest at that size, so that
# both see the same load on a shared host (a whole engine sweep first and perftest after measured
# them minutes apart); each figure is the median of its repeats.
i=0
while [ "$i" -lt "$N" ]; do
rep=0
while [ "$rep" -lt "$REPEATS" ]; do
echo "transfer: size $((i + 1)) of $N, repeat $((rep + 1)) of $REPEATS: engine, then ucx_perftest" >&2
echo "$i $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)" >>"$loads"
# the copy alone (one thread, the same layout, no engine): the engine's ceiling on this host
TDM_BENCH_FROM=$i TDM_BENCH_LAYOUT_COPY=1 "$BUILD/bench/transfer" "$((i + 1))" >>"$lcopy" 2>"$elog" || { cat "$elog" >&2; exit 1; }
TDM_BENCH_FROM=$i "$BUILD/bench/transfer" "$((i + 1))" >>"$runs" 2>"$elog" || { cat "$elog" >&2; exit 1; }
# the page chunk: the same windowed transfer with nothing but the copy, the socket and the wakes
# (bench/transfer_floor.c), at the engine's window and sub-batch, and with batches of 128
if [ "$i" -eq 0 ]; then
    TDM_FLOOR_WINDOW=$TDM_BENCH_WINDOW TDM_FLOOR_SUB=${TDM_BENCH_SUB:-8} "$BUILD/bench/transfer_floor" >>"$floor" 2>"$elog" || { cat "$elog" >&2; exit 1; }
    TDM_FLOOR_WINDOW=128 TDM_FLOOR_SUB=128 "$BUILD/bench/transfer_floor" >>"$floor" 2>"$elog" || { cat "$elog" >&2; exit 1; }
fi
# the older protocol (one room per round, timed on prefill), checksums off, once per size
[ "$rep" -eq 0 ] && { TDM_BENCH_FROM=$i TDM_BENCH_WINDOW=0 TDM_BENCH_CHECKSUMS=0 "$BUILD/bench/transfer" "$((i + 1))" >>"$rounds" 2>"$elog" || { cat "$elog" >&2; exit 1; }; }
# how prefill wrote decode's pool (ucx.c logs it per rank at connect)
if grep -q "writes: copies into decode's mapped shared memory" "$elog"; then
    path="copies into decode's shared memory mapped with ucp_rkey_ptr (decode's pool from ucp_mem_map ALLOCATE), no UCX request per region; rooms up to 16 MiB copied by the sending thread, larger by the transfer thread; rooms of 8 MiB and more with non-temporal stores"
else
    path="ucp_put_nbx per region, ucp_ep_flush_nbx per room"
fi
# perftest at this engine size, and at the round's bytes (size x rooms in flight) when a round
# holds more than one room: the same working set as the engine's round
last=$(tail -n 1 "$runs" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['bytes'], r['bytes'] * r.get('inflight', 1))")
bytes=${last% *}
round=${last#* }
perftest "$bytes" "$perf"
[ "$round" != "$bytes" ] && perftest "$round" "$perf"
# The same put_bw with endpoint error handling (-e), the mode of a remote-peer endpoint: UCX 1.13
# then keeps only transports with peer-failure support (tcp), every put software-emulated; once
# per size up to 16 MiB.
[ "$rep" -eq 0 ] && [ "$bytes" -le 16777216 ] && perftest "$bytes" "$perfe" -e
rep=$((rep + 1))
done
i=$((i + 1))
done
sha=${TDM_BENCH_GIT_SHA:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
dirty=false
[ -z "${TDM_BENCH_GIT_SHA:-}" ] && ! git -C "$SRC" diff --quiet HEAD -- dataplane/xfer bench/transfer.c 2>/dev/null && dirty=true
load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
python3 - "$runs" "$perf" "$perfe" "$OUT" "$sha" "$dirty" "$UCX_TLS" "$load_before" "$path" "$SRC/bench/results/pd.json" "$load_after" "${TDM_BENCH_NOTE:-}" "$loads" "$rounds" "$lcopy" "$floor" <<'PY'
import json, sys, platform, os
runs_p, perf_p, perfe_p, out, sha, dirty, tls, load, path, pd_p, load_after, note, loads_p, rounds_p, lcopy_p, floor_p = sys.argv[1:]
import statistics
runs = [json.loads(l) for l in open(runs_p)]
rounds = {}
for l in open(rounds_p):
    r = json.loads(l)
    rounds[r['bytes']] = r
lcopy = {}
for l in open(lcopy_p):
    r = json.loads(l)
    lcopy.setdefault(r['bytes'], []).append(r['gbps'])
loads = {}
for l in open(loads_p):
    i, v = l.split()
    loads.setdefault(int(i), []).append(float(v))
def final(path):
    d = {}
    for l in open(path):
        f = l.split()
        if len(f) >= 7 and f[1] == 'Final:':
            d.setdefault(int(f[0]), []).append(float(f[6]) * 1048576 / 1e9)  # MB/s (2^20) -> GB/s
    return d
perf = final(perf_p)
perfe = final(perfe_p)
def med(v):
    return statistics.median(v) if v else None
def r3(v):
    return round(v, 3) if v is not None else None
def div(a, b):
    return round(a / b, 3) if a is not None and b else None
sizes = []
for b in sorted(set(r['bytes'] for r in runs)):
    off = [r for r in runs if r['bytes'] == b and r['checksums'] == 0]
    on = [r for r in runs if r['bytes'] == b and r['checksums'] == 1]
    k = off[0].get('inflight', 1)
    e, c = med([r['gbps'] for r in off]), med([r['gbps'] for r in on])
    p, pw = med(perf.get(b, [])), med(perf.get(b * k, []))
    rr = rounds.get(b)
    lc = med(lcopy.get(b, []))
    sizes.append({'bytes': b, 'inflight': k, 'window': off[0].get('window', 0),
                  'rooms': off[0].get('rooms'), 'repeats': len(off),
                  'loadavg_1m': loads.get(len(sizes)),
                  'room_latency_us': r3(med([r['room_latency_us'] for r in off])),
                  'engine_gbps': r3(e),
                  'engine_checksums_gbps': r3(c),
                  'decode_verify_gbps': r3(med([r['verify_gbps'] for r in on])),
                  'ucx_perftest_gbps': r3(p),
                  'ucx_perftest_err_peer_gbps': r3(med(perfe.get(b, []))),
                  'ratio': div(e, p),
                  'ratio_checksums': div(c, p),
                  'layout_copy_gbps': r3(lc),
                  'layout_copy_gbps_repeats': [round(v, 3) for v in lcopy.get(b, [])],
                  'ratio_layout_copy_vs_ucx_perftest': div(lc, p),
                  'engine_vs_layout_copy': div(e, lc),
                  'ucx_perftest_round_bytes_gbps': r3(pw),
                  'ratio_same_working_set': div(e, pw),
                  'engine_gbps_repeats': [round(r['gbps'], 3) for r in off],
                  'ucx_perftest_gbps_repeats': [round(v, 3) for v in perf.get(b, [])],
                  'room_latency_us_repeats': [r['room_latency_us'] for r in off],
                  'engine_rounds_gbps': r3(rr['gbps']) if rr else None,
                  'engine_rounds_room_latency_us': rr['room_latency_us'] if rr else None,
                  'ratio_rounds': div(rr['gbps'], p) if rr else None})
floors = [json.loads(l) for l in open(floor_p)]
if sizes and floors:
    s0 = sizes[0]
    fw = [f for f in floors if f['window'] != 128 or s0['window'] == 128]
    fb = [f for f in floors if f['window'] == 128 and f['sub'] == 128]
    fg = med([f['floor_gbps'] for f in fw])
    bg = med([f['floor_gbps'] for f in fb])
    s0['protocol_floor_gbps'] = r3(fg)
    s0['protocol_floor_gbps_repeats'] = [f['floor_gbps'] for f in fw]
    s0['protocol_floor_copy_gbps'] = r3(med([f['copy_gbps'] for f in floors]))
    s0['ratio_protocol_floor_vs_ucx_perftest'] = div(fg, s0['ucx_perftest_gbps'])
    s0['engine_vs_protocol_floor'] = div(s0['engine_gbps'], fg)
    s0['protocol_floor_batch128_gbps'] = r3(bg)
    s0['ratio_protocol_floor_batch128_vs_ucx_perftest'] = div(bg, s0['ucx_perftest_gbps'])
ratios = [s['ratio'] for s in sizes if s['ratio'] is not None]
rw = [s['ratio_same_working_set'] for s in sizes if s['ratio_same_working_set'] is not None]
rc = [s['ratio_checksums'] for s in sizes if s['ratio_checksums'] is not None]
rr_ = [s['ratio_rounds'] for s in sizes if s['ratio_rounds'] is not None]
doc = {'bench': 'transfer', 'git_sha': sha, 'dirty': dirty == 'true',
       'host': platform.node(), 'cpus': os.cpu_count(), 'loadavg_before': load,
       'loadavg_after': load_after,
       'ucx_tls': tls, 'memory': 'host',
       'geometry': 'bf16, 32 layers, 2 kv heads x 128, page 16 tokens: page chunk 512 KiB = 64 regions',
       'page_chunk_bytes': sizes[0]['bytes'] if sizes else None,
       'anchor': 'ucx_perftest -t ucp_put_bw, same sizes and UCX_TLS, same run (its buffers come from ucp_mem_map ALLOCATE: shared memory the peer maps, so a put is one memcpy)',
       'anchor_err_peer': 'the same with -e (UCP_ERR_HANDLING_MODE_PEER, the mode of a remote-peer endpoint), up to 16 MiB, once per size',
       'processes': 'prefill and decode in two processes (forked before UCX init)',
       'protocol': 'windowed streaming (TDM_BENCH_WINDOW=%s): that many rooms outstanding, every room from the same prefill pages into the same decode pages (as perftest re-puts one buffer into one buffer; the engine leaves page ownership to decode, so rooms in flight may share pages); decode submits a new room (TRANSFER_INFO) as each SUCCESS reaches it, after its commit (checksum verification when on, aux room-id check); prefill sends each room as its TRANSFER_INFO arrives (same-host rooms up to 16 MiB copied by the sending thread, larger by the transfer thread, 8 MiB+ with streaming stores) and releases it at SUCCESS; throughput is measured at decode from its SUCCESS events (STATUS received after prefill fenced/flushed the room: I5): after window+2 warm-up rooms, segments of max(4, 32 MiB/size) rooms, `reps` segments, gbps = the median segment rate; rooms = rooms per size; room_latency_us = mean TRANSFER_INFO to SUCCESS on decode with the window queued ahead. engine_rounds_gbps: the older protocol in the same run, once per size (one room per round, timed on prefill from send to its SUCCESS, the request round trip and decode side outside the timed window)' % os.environ.get('TDM_BENCH_WINDOW', '16'),
       'anchor_window': 'ucx_perftest put_bw with its default -O: over sm (ucp_mem_map ALLOCATE buffers, rkey_ptr) every put is a memcpy into the peer mapping that completes inside ucp_put_nbx, so no put is ever outstanding (-O 1 and -O 16 measured the same on this host); the peer is told nothing per put and one flush ends the run: perftest is a tight copy loop, the engine a copy plus a per-room handshake across two processes',
       'order': 'size by size, `repeats` times: the engine (checksums off, then on) and right after it ucx_perftest at that size, so both see the same load on the shared host; every figure is the median of its repeats (the repeats are listed), ratios are of the medians; loadavg_1m per size: the 1-minute load before each repeat',
       'anchor_same_working_set': 'perftest at the round bytes (size x inflight): perftest re-puts one buffer (source and target stay in cache up to a few MiB), while the engine writes distinct decode pages per room of a round; this anchor moves the same bytes per put as the engine per round',
       'engine_write_path': path,
       'layout_copy': 'the copy alone, right before each engine repeat: one thread memcpy()s the room (every layer and sub-buffer, its pages contiguous per region as the engine coalesces them) between two pools of this layout in one process, room after room into the same pages, median of 9 timings; no engine, no second process, no handshake. Plain memcpy: the engine streams rooms of 8 MiB and more with non-temporal stores, so from there it can beat this figure. ratio_layout_copy_vs_ucx_perftest below 0.8 means no protocol could reach the 0.8 target at that size on this host: a page chunk is 64 regions of 8 KiB, perftest one contiguous buffer',
       'placement': 'TDM_BENCH_PIN=%s: the prefill harness (the thread that copies same-host rooms) on CPU 0, the prefill engine threads and the decode process on CPU 1; perftest client on CPU 0, server on CPU 1 (taskset). Unpinned, the engine at 512 KiB is bimodal on this host (24-44 GB/s by where the scheduler puts the threads)' % os.environ.get('TDM_BENCH_PIN', '1'),
       'protocol_floor': 'bench/transfer_floor, right after each 512 KiB engine repeat: the same windowed transfer (decode keeps the window of rooms outstanding, prefill copies each room\'s 64 regions into decode\'s MAP_SHARED pool of the same layout and reports completions, one socket write per sub-batch) between two single-threaded pinned processes over loopback TCP, with nothing else: no frames, allocations, locks, room states, events or helper threads. At the engine\'s window and sub-batch (protocol_floor_gbps) and with batches of 128 rooms (protocol_floor_batch128_gbps). ratio_protocol_floor_vs_ucx_perftest is what any engine of this shape (two processes, a socket, a copy by the sender) can reach on this host; protocol_floor_copy_gbps the copy alone inside that program',
       'cork': 'the harness corks the engine (tdm_xfer_cork) around its sends, uncorking every TDM_BENCH_SUB rooms (default 8): the STATUS frames of up to 8 rooms (prefill) and TRANSFER_INFO frames (decode) leave in one write, while the peer already works on the previous 8',
       'sizes': sizes,
       'ratio_vs_ucx_perftest': min(ratios) if ratios else None,
       'ratio_vs_ucx_perftest_checksums_on': min(rc) if rc else None,
       'ratio_vs_ucx_perftest_same_working_set': min(rw) if rw else None,
       'ratio_vs_ucx_perftest_rounds': min(rr_) if rr_ else None,
       'page_chunk_layout_copy_vs_ucx_perftest': sizes[0]['ratio_layout_copy_vs_ucx_perftest'] if sizes else None,
       'page_chunk_protocol_floor_vs_ucx_perftest': sizes[0].get('ratio_protocol_floor_vs_ucx_perftest') if sizes else None,
       'page_chunk_protocol_floor_batch128_vs_ucx_perftest': sizes[0].get('ratio_protocol_floor_batch128_vs_ucx_perftest') if sizes else None}
# checksum_ttft_overhead is measured by bench/pd.sh (PD pairs over HTTP); carried here with its
# provenance so the issue's two transfer numbers sit in one file
try:
    pd = json.load(open(pd_p))
    doc['checksum_ttft_overhead'] = pd['checksum_ttft_overhead']
    doc['checksum_ttft_overhead_direct'] = pd.get('checksum_ttft_overhead_direct')
    doc['checksum_ttft_overhead_source'] = 'bench/results/pd.json (bench/pd.sh, git sha %s)' % pd.get('git_sha')
except (OSError, ValueError, KeyError):
    pass
if note:
    doc['note'] = note
json.dump(doc, open(out, 'w'), indent=1)
open(out, 'a').write('\n')
print(json.dumps({k: doc[k] for k in ('ratio_vs_ucx_perftest', 'ratio_vs_ucx_perftest_checksums_on',
                                       'ratio_vs_ucx_perftest_same_working_set',
                                       'ratio_vs_ucx_perftest_rounds',
                                       'page_chunk_layout_copy_vs_ucx_perftest',
                                       'page_chunk_protocol_floor_vs_ucx_perftest',
                                       'page_chunk_protocol_floor_batch128_vs_ucx_perftest')}))
PY
