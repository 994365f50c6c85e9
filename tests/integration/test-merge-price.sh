#!/bin/sh
# test-merge-price.sh — bench/merge_mixed_price.py on hand-made documents: the committed figures
# a new call did not measure are kept with their provenance, the new ones win, and the refusals
# (another GPU, not price output, a truncated file) leave the committed file as it was.
set -u
S=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$S/tests/integration/tap-lib.sh"
command -v python3 > /dev/null || { echo "Bail out! python3 not found"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
M=$S/bench/merge_mixed_price.py

cat > "$T/old.json" <<'J'
{"bench": "gpu-mixed-price", "git_sha": "aaa", "gpu": "G", "date": "d0",
 "derived": {"fixed_us": 200.0, "gemm_tune_shapes": [1, 2],
             "long_decode_bs64_us": {"long_splits_default": 1870, "long_min_splits_2": 1839}},
 "runs": {}}
J
cat > "$T/new.json" <<'J'
{"bench": "gpu-mixed-price", "git_sha": "bbb", "gpu": "G", "date": "d1",
 "derived": {"fixed_us": 150.0, "long_decode_bs64_us": {"long_splits_default": 1800}},
 "runs": {}}
J
cp "$T/old.json" "$T/c.json"
python3 "$M" "$T/new.json" "$T/c.json" > "$T/out" 2>&1
ok $? "a new run merged ($(cat "$T/out"))"
v=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['derived']; print(d['fixed_us'], d['long_decode_bs64_us'], d['gemm_tune_shapes'])" "$T/c.json")
ok "$([ "$v" = "150.0 {'long_splits_default': 1800, 'long_min_splits_2': 1839} [1, 2]" ]; echo $?)" \
    "the new figures win; the unmeasured key and sub-key are kept ($v)"
v=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['git_sha'], d['derived']['kept_from_earlier_run'])" "$T/c.json")
ok "$([ "$v" = "bbb [{'git_sha': 'aaa', 'gpu': 'G', 'date': 'd0', 'keys': ['gemm_tune_shapes', 'long_decode_bs64_us.long_min_splits_2']}]" ]; echo $?)" \
    "the kept keys carry the earlier run's provenance ($v)"
# a second merge that again leaves them out: still aaa's, not listed again under bbb
sed 's/"bbb"/"ccc"/; s/"d1"/"d2"/' "$T/new.json" > "$T/new2.json"
python3 "$M" "$T/new2.json" "$T/c.json" > /dev/null 2>&1
v=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); k=d['derived']['kept_from_earlier_run']; print(d['git_sha'], len(k), k[0]['git_sha'], d['derived']['gemm_tune_shapes'])" "$T/c.json")
ok "$([ "$v" = "ccc 1 aaa [1, 2]" ]; echo $?)" \
    "merged again: the kept keys keep their first provenance ($v)"

# refusals leave the committed file unchanged
cp "$T/c.json" "$T/c0.json"
sed 's/"gpu": "G"/"gpu": "H"/' "$T/new.json" > "$T/other.json"
python3 "$M" "$T/other.json" "$T/c.json" > /dev/null 2> "$T/e1"
rc=$?
ok "$([ $rc = 1 ] && cmp -s "$T/c.json" "$T/c0.json" && grep -q "refused" "$T/e1"; echo $?)" \
    "another GPU's run is refused, file unchanged (rc $rc: $(cat "$T/e1"))"
echo '{"bench": "gpu-serving", "derived": {}}' > "$T/wrong.json"
python3 "$M" "$T/wrong.json" "$T/c.json" > /dev/null 2> "$T/e2"
rc=$?
ok "$([ $rc = 1 ] && cmp -s "$T/c.json" "$T/c0.json" && grep -q "not bench/gpu-mixed-price.sh output" "$T/e2"; echo $?)" \
    "a document that is not price output is refused (rc $rc)"
echo '{"bench": "gpu-mixed' > "$T/trunc.json"
python3 "$M" "$T/trunc.json" "$T/c.json" > /dev/null 2> "$T/e3"
rc=$?
ok "$([ $rc = 1 ] && cmp -s "$T/c.json" "$T/c0.json" && grep -q "trunc.json" "$T/e3"; echo $?)" \
    "a truncated document: a clear error, file unchanged (rc $rc)"
python3 "$M" "$T/new.json" > /dev/null 2>&1
ok "$([ $? = 2 ]; echo $?)" "one argument: usage error (rc 2)"
tap_done
