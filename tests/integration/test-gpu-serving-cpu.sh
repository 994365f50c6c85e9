#!/bin/sh
# test-gpu-serving-cpu.sh — bench/gpu-serving.sh and its load generator (bench/loadgen.py) at
# small sizes against a --device cpu worker on models/demo, so make check runs the GPU serving
# bench's every path but the engine ceiling: the concurrency sweep and a Poisson rate in the
# overlap loop, a loop point in lockstep, a point and the decode-heavy point with the lowest-first
# page order (TDM_KV_ALLOC=lowest), the rate point on a prefill + a decode group (PD over
# UCX) beside colocated on the same requests, the usage and /metrics cross-checks, the merged JSON
# (docs/contracts.md §h gpu_serving.json). No timing assertion. Then the cross-check must fail:
# a point measured while another client's tokens flow through the same worker sees /metrics
# grow by more than its own responses' usage and exits 1.
set -u
S=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$S/tests/integration/tap-lib.sh"
tap_need_exec "$BIN"
command -v python3 > /dev/null || { echo "Bail out! python3 not found"; exit 1; }
T=$(mktemp -d)
wp=""
hp=""
trap '[ -n "$hp" ] && kill -9 -- -$hp 2>/dev/null; [ -n "$wp" ] && kill -9 $wp 2>/dev/null; rm -rf "$T"' EXIT
export TDM_CPU_THREADS=1

TDM_SERVE_DEVICE=cpu TDM_SERVE_CONC="1 4" TDM_SERVE_RATES="50" TDM_SERVE_LOOP_CONC="4" \
    TDM_SERVE_NUM=6 TDM_SERVE_IN=20 TDM_SERVE_OUT=8 TDM_SERVE_IN_MAX=48 TDM_SERVE_OUT_MAX=16 \
    TDM_SERVE_DH_CONC=4 TDM_SERVE_DH_IN=6 TDM_SERVE_DH_OUT=24 TDM_SERVE_ALLOC_CONC=4 \
    TDM_BENCH_GIT_SHA=test sh -c "bash '$S/bench/gpu-serving.sh' '$BUILD' '$S' '$T/out.json'" \
    > "$T/tap" 2> "$T/err"
rc=$?
ok $rc "gpu-serving.sh on --device cpu exits 0 (rc $rc)"
{ [ $rc != 0 ] || grep -q '^not ok' "$T/tap"; } && sed 's/^/# /' "$T/tap" "$T/err" | tail -30
ok "$(grep -c '^not ok' "$T/tap" | grep -qx 0; echo $?)" "its TAP has no failure"
python3 - "$T/out.json" > "$T/check" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["bench"] == "gpu_serving" and d["git_sha"] == "test" and d["device"] == "cpu", "header"
assert d["checks_ok"] is True, "checks_ok"
rows = {r["concurrency"]: r for r in d["concurrency"]}
assert sorted(rows) == [1, 4], "concurrency rows %s" % sorted(rows)
for c, r in rows.items():
    s = r["serving"]
    assert s["completed"] == s["requests"] == 6, "c=%d completed %s" % (c, s["completed"])
    m = s["metrics_delta"]
    assert m["tandem_generated_tokens_total"] == s["total_output_tokens"] > 0, "c=%d gen" % c
    assert s["output_tok_s"] > 0 and s["request_throughput"] > 0, "c=%d rates" % c
    for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        for q in ("mean", "p50", "p90", "p99"):
            assert s[k][q] is not None and s[k][q] >= 0, "c=%d %s %s" % (c, k, q)
    assert s["ttft_ms"]["p50"] <= s["e2e_ms"]["p50"], "c=%d ttft > e2e" % c
    lu = s["loop_us_per_iter"]
    assert lu and lu["exec_wait"] > 0 and lu["build"] >= 0 and lu["process"] > 0 and \
        (lu["exec_wait_decode"] or 0) + (lu["exec_wait_mixed"] or 0) > 0, \
        "c=%d loop split %s" % (c, lu)
    assert s["step_ms_mean"] > 0 and m["tandem_sched_decode_iterations_total"] + \
        m["tandem_sched_mixed_iterations_total"] > 0, "c=%d iterations" % c
    # the one-token rows' contexts: every generated token but each request's first is one such
    # row (no retraction, no prompt longer than a chunk, no prefix hit here), a row attends at
    # least its prompt's last position plus one, and an iteration's longest row is no shorter
    # than that iteration's mean row, so the longest rows sum to at least every row's positions
    # over the most rows an iteration holds (c); the mean row over the whole point may be longer
    # than the mean longest row (iterations with more rows weigh more in it)
    dc = s["decode_ctx"]
    assert m["tandem_sched_decode_rows_total"] == s["total_output_tokens"] - s["completed"], \
        "c=%d one-token rows %d for %d tokens" % (c, m["tandem_sched_decode_rows_total"],
                                                  s["total_output_tokens"])
    longest = m["tandem_sched_decode_longest_row_positions_total"]
    assert dc and 2 <= dc["mean"] and 2 <= dc["longest_mean"] and \
        longest * c >= m["tandem_sched_decode_row_positions_total"] and \
        1 <= dc["rows_per_iteration"] <= c, "c=%d decode_ctx %s" % (c, dc)
assert d["engine_mixed"] == {"chunk": None, "rows": [], "price": []}, "no engine on cpu: %s" % d["engine_mixed"]
assert len(d["rates"]) == 1 and d["rates"][0]["request_rate"] == 50, "rates"
assert d["rates"][0]["completed"] == 6, "rate point"
lo = d["overlap_vs_lockstep"]
assert len(lo) == 1 and lo[0]["concurrency"] == 4 and lo[0]["lockstep_output_tok_s"] > 0, "loops"
pd = d["pd_vs_colocated"]
assert [r["point"] for r in pd] == ["rate:50"], "pd points %s" % pd
assert pd[0]["pd"]["completed"] == 6 and pd[0]["colocated"]["completed"] == 6, "pd completed"
assert pd[0]["pd"]["total_input_tokens"] == pd[0]["colocated"]["total_input_tokens"], \
    "PD and colocated were sent other requests"
m = pd[0]["prefill_group_metrics_delta"]
assert (m["prefill_group_tandem_prefill_tokens_total"] +
        m["prefill_group_tandem_prompt_tokens_cached_total"] == pd[0]["pd"]["total_input_tokens"]), \
    "prefill group's counters %s" % m
dh = d["decode_heavy"]
assert len(dh) == 1 and dh[0]["concurrency"] == 4, "decode-heavy points %s" % dh
s = dh[0]["serving"]
assert s["completed"] == 6 and s["metrics_delta"]["tandem_generated_tokens_total"] == \
    s["total_output_tokens"] > 0, "decode-heavy point %s" % s
assert dh[0]["load"]["input_median"] == 6 and dh[0]["load"]["output_median"] == 24, "dh load"
w = rows[4]["serving"]
assert s["total_input_tokens"] * w["total_output_tokens"] < \
    w["total_input_tokens"] * s["total_output_tokens"], \
    "decode-heavy carries no fewer prompt tokens per output token than the sweep's point"
# prompts sized in the served model's tokens (loadgen's calibration): the long concurrency
# point's prompts carry their drawn lengths within 25 % (the shortest draws are below the
# template's own tokens)
cal = d.get("calibration") or {}
assert cal.get("tokens_per_word", 0) > 0 and cal.get("overhead_tokens", -1) >= 0, "calibration %s" % cal
s4 = rows[4]["serving"]
assert abs(s4["total_input_tokens"] / s4["drawn_input_tokens"] - 1) < 0.25, \
    "c=4 prompts %d tokens for %d drawn" % (s4["total_input_tokens"], s4["drawn_input_tokens"])
po = d["page_order"]
assert [(r["load"], r["point"]) for r in po] == [("sweep", "conc:4"), ("decode_heavy", "conc:4")], \
    "page_order rows %s" % po
for r in po:
    assert r["lowest_output_tok_s"] > 0 and r["lifo_output_tok_s"] > 0 and r["lowest_vs_lifo"] > 0, r
ab = d["attn_balance"]
assert ab["rows"] == [] and ab["balance"] == 256, "cpu: no attention balance points: %s" % ab
lc = d["load_ceiling"]
assert lc["points"] == [] and "no point" in lc["skipped"], "cpu: no engine, ceiling %s" % lc
print("fields ok")
PY
rc=$?
ok $rc "gpu_serving.json: both concurrency points, the rate point, the decode-heavy point, the loop comparison and PD beside colocated, every request and token accounted ($(tail -1 "$T/check"))"

# the engine goals of the same device call merge in (bench/serving_goals.py); another build's
# decode figures are refused and leave the file as it was
cat > "$T/dec.json" <<'J'
{"gpu": "cpu", "git_sha": "test", "roofline_bs1_tok_s": 2047.4,
 "tandem": {"decode_bs1_tok_s": 1200.0, "decode_bs8_tok_s": 6000.0, "decode_bs32_tok_s": 22000.0,
            "prefill_2048_tok_s": 170000.0, "prefill_8192_tok_s": 150000.0,
            "prefill_32768_tok_s": null},
 "torch_compiled": {"decode_bs1_tok_s": 700.0}}
J
sed 's/"git_sha": "test"/"git_sha": "other"/' "$T/dec.json" > "$T/dec-other.json"
cp "$T/out.json" "$T/out-before.json"
python3 "$S/bench/serving_goals.py" "$T/out.json" "$T/dec-other.json" > /dev/null 2> "$T/goals.err"
rc=$?
ok "$([ $rc = 1 ] && cmp -s "$T/out.json" "$T/out-before.json" && grep -q 'git_sha differs' "$T/goals.err"; echo $?)" \
    "serving_goals.py refuses decode figures of another git_sha, file unchanged (rc $rc: $(cat "$T/goals.err"))"
python3 "$S/bench/serving_goals.py" "$T/out.json" "$T/dec.json" > /dev/null &&
    python3 - "$T/out.json" > "$T/goals" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = d["engine_goals"]
assert g["measured"]["decode_bs8_tok_s"] == 6000.0 and g["goals"]["decode_bs1_tok_s"] == 1450, g
assert g["fraction_of_goal"]["prefill_2048_tok_s"] == 0.85, g["fraction_of_goal"]
assert g["prefill_long"] == {"prefill_8192_tok_s": 150000.0}, g.get("prefill_long")
assert d["checks_ok"] is True and len(d["concurrency"]) == 2, "the rest changed"
print("goals ok")
PY
ok $? "serving_goals.py merges the same call's engine goals into gpu_serving.json ($(tail -1 "$T/goals"))"
# two calls of one bundle: --how says so, and "from" no longer claims one call
python3 "$S/bench/serving_goals.py" "$T/out.json" "$T/dec.json" --how "two calls, one bundle" \
    > /dev/null && python3 - "$T/out.json" > "$T/goals2" 2>&1 <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["engine_goals"]
assert g["how"] == "two calls, one bundle", g["how"]
assert "same device call" not in g["from"], g["from"]
print("how ok")
PY
ok $? "serving_goals.py --how: the merge names two calls ($(tail -1 "$T/goals2"))"
python3 "$S/bench/serving_goals.py" "$T/out.json" "$T/dec.json" --how "" > /dev/null 2>&1
ok "$([ $? = 2 ]; echo $?)" "serving_goals.py refuses an empty --how (usage, rc 2)"

# the load ceiling draws each point's requests again: with engine figures put in, the real run's
# points must be reproduced (their output lengths sum to their usage), and a point whose usage
# is off by one token is refused with the file unchanged
python3 - "$T/out.json" "$T/out-eng.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["concurrency"]:
    r["engine_decode"] = {"batch": r["concurrency"], "ids_step_us": 1000.0 + r["concurrency"],
                          "ids_tok_s": r["concurrency"] * 1e6 / (1000.0 + r["concurrency"])}
d["engine_mixed"]["price"] = [{"batch": 4, "chunk": 32, "us_per_prompt_token": 3.0}]
json.dump(d, open(sys.argv[2], "w"))
PY
python3 "$S/bench/serving_bound.py" "$T/out-eng.json" --write > "$T/ceil" 2> "$T/ceil.err" &&
    python3 - "$T/out-eng.json" > "$T/ceil.chk" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
pts = {p["concurrency"]: p for p in d["load_ceiling"]["points"]}
assert sorted(pts) == [1, 4], sorted(pts)
for c, p in pts.items():
    s = [r for r in d["concurrency"] if r["concurrency"] == c][0]["serving"]
    assert p["output_tokens"] == s["total_output_tokens"] and p["requests"] == 6, p
    assert 0 < p["ceiling_tok_s"] <= p["full_batch_tok_s"] and p["rows_per_step"] <= c, p
assert pts[1]["rows_per_step"] == 1.0, pts[1]
print("ceiling ok: c=4 %s tok/s, %s rows a step" % (pts[4]["ceiling_tok_s"], pts[4]["rows_per_step"]))
PY
ok $? "serving_bound.py draws the run's own requests again and prices them ($(tail -1 "$T/ceil.chk"))"
python3 - "$T/out-eng.json" "$T/out-off.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["concurrency"][1]["serving"]["total_output_tokens"] += 1
json.dump(d, open(sys.argv[2], "w"))
PY
cp "$T/out-off.json" "$T/out-off-before.json"
python3 "$S/bench/serving_bound.py" "$T/out-off.json" --write > /dev/null 2> "$T/off.err"
rc=$?
ok "$([ $rc = 1 ] && cmp -s "$T/out-off.json" "$T/out-off-before.json" && grep -q "not the run's requests" "$T/off.err"; echo $?)" \
    "serving_bound.py refuses a point whose usage is not its drawn requests, file unchanged (rc $rc)"

# the cross-check fails when the worker serves tokens the point did not ask for
"$BIN" --model-path "$S/models/demo" --device cpu --port 0 --ready-file "$T/ready" \
    --max-running-requests 8 > "$T/worker.log" 2>&1 &
wp=$!
i=0
while [ $i -lt 600 ] && [ ! -s "$T/ready" ] && kill -0 $wp 2> /dev/null; do
    sleep 0.1
    i=$((i + 1))
done
port=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$T/ready" 2> /dev/null)
[ -n "$port" ] || { echo "Bail out! worker did not start"; tail -5 "$T/worker.log"; exit 1; }
gen() { curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^tandem_generated_tokens_total \([0-9]*\).*/\1/p'; }
setsid python3 "$S/bench/loadgen.py" --url "http://127.0.0.1:$port" --points conc:2 --num-prompts 200 \
    --input-median 16 --output-median 48 --output-max 64 --warmup 0 --seed 7 \
    > /dev/null 2>&1 &
hp=$!
g0=$(gen)
i=0
while [ $i -lt 300 ] && [ "$(gen)" = "$g0" ]; do
    sleep 0.1
    i=$((i + 1))
done
python3 "$S/bench/loadgen.py" --url "http://127.0.0.1:$port" --points conc:1 --num-prompts 3 \
    --input-median 8 --output-median 4 --output-max 6 --warmup 0 --metrics-wait 1 \
    --out "$T/neg.json" > /dev/null 2> "$T/neg.err"
rc=$?
ok "$([ $rc = 1 ] && grep -q 'tandem_generated_tokens_total grew' "$T/neg.json"; echo $?)" \
    "a point with another client's tokens in flight fails the /metrics cross-check (rc $rc)"
kill -9 -- -$hp 2> /dev/null # the load generator's process group: it and its workers
wait $hp 2> /dev/null
hp=""
kill -TERM $wp
wait $wp
ok $? "worker exits cleanly"
wp=""
tap_done
