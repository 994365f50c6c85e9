#!/bin/sh
# test-serving-bound.sh — bench/serving_bound.py (docs/contracts.md §h gpu_serving.json
# "load_ceiling") on hand-made documents whose ceilings are worked out below: the gap-free
# schedule's steps and rows, the step price at the largest measured batch, the cheapest prompt
# price (the point's own mixed steps included), the refusals. No worker, no timing.
set -u
S=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$S/tests/integration/tap-lib.sh"
command -v python3 > /dev/null || { echo "Bail out! python3 not found"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# mk FILE REQUESTS OUT_TOKENS [EXTRA_PY]: a document whose every request asks for 10 tokens
# (output median 10 clipped to [10, 10]) at concurrency 4; the engine steps 600 us at batch 1 and
# 1000 us at batch 4 (4000 tok/s); prompts 100 tokens at 2 us (engine_mixed.price)
mk() {
    python3 - "$1" "$2" "$3" "${4:-}" <<'PY'
import json, sys
f, n, out, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
d = {"bench": "gpu_serving", "seed": 1,
     "load": {"input_median": 20, "output_median": 10, "input_max": 48, "output_max": 10, "min": 10},
     "calibration": {"tokens_per_word": 1.0, "overhead_tokens": 0.0},
     "concurrency": [
         {"concurrency": 1, "serving": None,
          "engine_decode": {"batch": 1, "ids_step_us": 600.0, "ids_tok_s": 1666.7}},
         {"concurrency": 4,
          "serving": {"point": "conc:4", "requests": n, "total_output_tokens": out,
                      "total_input_tokens": 100, "output_tok_s": 500.0},
          "engine_decode": {"batch": 4, "ids_step_us": 1000.0, "ids_tok_s": 4000.0}}],
     "engine_mixed": {"price": [{"batch": 4, "chunk": 32, "us_per_prompt_token": 2.0}]}}
if extra:
    exec(extra)
json.dump(d, open(f, "w"))
PY
}
# pick FILE EXPR: print a Python expression over p (the c=4 ceiling point) of FILE's load_ceiling
pick() {
    python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['load_ceiling']['points'][0]; print($2)" "$1"
}

# 8 requests of 10 tokens on 4 slots: 20 steps of 4 rows (20 x 1000 us) + 100 x 2 us of prompts
mk "$T/a.json" 8 80
python3 "$S/bench/serving_bound.py" "$T/a.json" --write > /dev/null 2> "$T/a.err"
ok $? "serving_bound.py prices a full schedule ($(cat "$T/a.err"))"
v=$(pick "$T/a.json" '(p["rows_per_step"], p["ceiling_tok_s"], p["full_batch_tok_s"], p["ceiling_vs_engine_decode"], p["serving_vs_ceiling"], p["prompt_share"])')
ok "$([ "$v" = "(4.0, 3960.4, 3960.4, 0.99, 0.126, 0.01)" ]; echo $?)" \
    "8 x 10 tokens on 4 slots: 4 rows a step, 80 / 20200 us = 3960.4 tok/s, 0.99 x engine ($v)"

# the prompt price that would make the ceiling 0.85 x the engine: 80 / (0.85 x 4000) s = 23529.4 us,
# less 20000 us of decode steps, over 100 prompt tokens
v=$(pick "$T/a.json" '(p["target_vs_engine_decode"], p["prompt_us_per_token_for_target"])')
ok "$([ "$v" = "(0.85, 35.294)" ]; echo $?)" "the price for 0.85 x: (23529.4 - 20000) / 100 = 35.294 us ($v)"

# 6 requests: 10 steps of 4 rows, then 10 of 2 rows priced at batch 1's step (the largest
# measured batch <= 2): 10 x 1000 + 10 x 600 + 200 us for 60 tokens
mk "$T/b.json" 6 60
python3 "$S/bench/serving_bound.py" "$T/b.json" --write > /dev/null 2>&1
v=$(pick "$T/b.json" '(p["rows_per_step"], p["ceiling_tok_s"], p["full_batch_tok_s"], p["ceiling_tok_s_range"])')
ok "$([ "$v" = "(3.0, 3703.7, 3947.4, [3703.7, 3703.7])" ]; echo $?)" \
    "the tail's steps at the largest measured batch below them: 60 / 16200 us = 3703.7, full batches 60 / 15200 us ($v)"

# --target 1: the tail's 16000 us of decode steps alone exceed 60 / 4000 s: no price reaches it
python3 "$S/bench/serving_bound.py" "$T/b.json" --target 1 --write > /dev/null 2>&1
v=$(pick "$T/b.json" 'p["prompt_us_per_token_for_target"]')
ok "$([ "$v" = "None" ]; echo $?)" "a target the schedule alone keeps out of reach: no price (null; $v)"
python3 "$S/bench/serving_bound.py" "$T/b.json" --target 1.5 > /dev/null 2>&1
ok "$([ $? = 2 ]; echo $?)" "--target 1.5: usage error (rc 2)"

# the point's own mixed steps are cheaper than the engine's 2 us: (1025 - 1000) us over a decode
# step x 2 mixed iterations / 100 prompt tokens = 0.5 us a token
mk "$T/c.json" 8 80 'd["concurrency"][1]["serving"].update(loop_us_per_iter={"exec_wait_mixed": 1025.0, "exec_wait_decode": 1000.0}, metrics_delta={"tandem_sched_mixed_iterations_total": 2, "tandem_sched_decode_iterations_total": 18})'
python3 "$S/bench/serving_bound.py" "$T/c.json" --write > /dev/null 2>&1
v=$(pick "$T/c.json" '(p["prompt_us_per_token"], p["prompt_price_from"], p["ceiling_tok_s"], p["measured_rows_per_step"])')
ok "$([ "$v" = "(0.5, \"the point's mixed steps\", 3990.0, 4.0)" ]; echo $?)" \
    "the cheapest measured prompt price wins, the point's own included: 80 / 20050 us ($v)"

# a prompt token's FLOP floor: a 1-layer model of width 100 (q|k|v 3 x 100 x 100, o 100 x 100,
# gate|up|down 3 x 100 x 100) does 2 x 70000 = 140000 FLOP a token: 1.0 us at 0.14 TFLOP/s;
# 80 / (20000 + 100 x 1.0) us = 3980.1 tok/s = 0.995 x; 0.85 needs 35.294 us: reachable
cfg='d["model_config"] = {"num_hidden_layers": 1, "hidden_size": 100, "intermediate_size": 100, "num_attention_heads": 1, "num_key_value_heads": 1}'
mk "$T/p.json" 8 80 "$cfg"
python3 "$S/bench/serving_bound.py" "$T/p.json" --peak-tflops 0.14 --write > /dev/null 2>&1
v=$(pick "$T/p.json" '(p["prompt_gflop_per_token"], p["prompt_us_per_token_at_peak"], p["ceiling_vs_engine_decode_prompts_at_peak"], p["target_needs_prompts_below_peak"])')
ok "$([ "$v" = "(0.0, 1.0, 0.995, False)" ]; echo $?)" \
    "prompts at their FLOPs' peak: 1.0 us, 0.995 x, the target reachable ($v)"
# --target 0.99 needs (80 / 3960 s - 20000 us) / 100 = 2.02 us a token; at 0.05 TFLOP/s the floor is
# 2.8 us: out of reach while prompt work is added (80 / 20280 us = 0.986 x)
python3 "$S/bench/serving_bound.py" "$T/p.json" --peak-tflops 0.05 --target 0.99 --write > /dev/null 2>&1
v=$(pick "$T/p.json" '(p["prompt_us_per_token_for_target"], p["prompt_us_per_token_at_peak"], p["ceiling_vs_engine_decode_prompts_at_peak"], p["target_needs_prompts_below_peak"])')
ok "$([ "$v" = "(2.02, 2.8, 0.986, True)" ]; echo $?)" \
    "a target below the FLOP floor: 2.02 us needed, 2.8 the floor, flagged ($v)"
# the peak by the card's name; no model_config: no floor (null), never a guess
mk "$T/q.json" 8 80 "$cfg; d['gpu'] = 'NVIDIA H200'"
python3 "$S/bench/serving_bound.py" "$T/q.json" --write > /dev/null 2>&1
v=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['load_ceiling']; print(c['peak_tflops'], c['points'][0]['prompt_us_per_token_at_peak'])" "$T/q.json")
ok "$([ "$v" = "989.4 0.0" ]; echo $?)" "an H200 by name: 989.4 TFLOP/s ($v)"
v=$(pick "$T/a.json" '(p["prompt_us_per_token_at_peak"], p["target_needs_prompts_below_peak"])')
ok "$([ "$v" = "(None, None)" ]; echo $?)" "no model_config and no peak: no floor ($v)"
python3 "$S/bench/serving_bound.py" "$T/a.json" --peak-tflops 0 > /dev/null 2>&1
ok "$([ $? = 2 ]; echo $?)" "--peak-tflops 0: usage error (rc 2)"

# refusals: usage that is not the drawn requests, no engine step at batch 1, no prompt price;
# the file stays as it was
mk "$T/d.json" 8 81
cp "$T/d.json" "$T/d0.json"
python3 "$S/bench/serving_bound.py" "$T/d.json" --write > /dev/null 2> "$T/d.err"
rc=$?
ok "$([ $rc = 1 ] && cmp -s "$T/d.json" "$T/d0.json" && grep -q "sum to 80, the point's usage to 81" "$T/d.err"; echo $?)" \
    "usage of 81 tokens for draws of 80 is refused, file unchanged (rc $rc: $(cat "$T/d.err"))"
mk "$T/e.json" 8 80 'd["concurrency"][0]["engine_decode"] = None'
python3 "$S/bench/serving_bound.py" "$T/e.json" > /dev/null 2> "$T/e.err"
rc=$?
ok "$([ $rc = 1 ] && grep -q "no engine decode step at batch 1" "$T/e.err"; echo $?)" \
    "no step at batch 1 to price the tail: refused (rc $rc)"
mk "$T/f.json" 8 80 'd["engine_mixed"]["price"] = []'
python3 "$S/bench/serving_bound.py" "$T/f.json" > /dev/null 2> "$T/f.err"
rc=$?
ok "$([ $rc = 1 ] && grep -q "no measured prompt price" "$T/f.err"; echo $?)" \
    "no measured prompt price: refused (rc $rc)"
echo '{"concurrency": [' > "$T/g.json"
python3 "$S/bench/serving_bound.py" "$T/g.json" > /dev/null 2> "$T/g.err"
rc=$?
ok "$([ $rc = 1 ] && grep -q "g.json" "$T/g.err"; echo $?)" "a truncated document: a clear error (rc $rc)"
python3 "$S/bench/serving_bound.py" "$T/a.json" --orders 0 > /dev/null 2>&1
ok "$([ $? = 2 ]; echo $?)" "--orders 0: usage error (rc 2)"
# no engine figures at all (a --device cpu run): skipped, with the reason
mk "$T/h.json" 8 80 'd["concurrency"] = [dict(r, engine_decode=None) for r in d["concurrency"]]'
python3 "$S/bench/serving_bound.py" "$T/h.json" --write > /dev/null 2>&1
ok "$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['load_ceiling']; sys.exit(0 if c['points']==[] and c['skipped'] else 1)" "$T/h.json"; echo $?)" \
    "no engine figures: load_ceiling skipped, with its reason"
tap_done
