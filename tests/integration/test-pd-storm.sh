#!/bin/sh
# test-pd-storm.sh — the abort storm on a real prefill + decode pair (scenario "storm"
# of test-pd.sh, which says what is checked).
TDM_PD_SCENARIO=storm
export TDM_PD_SCENARIO
exec sh "$(dirname "$0")/test-pd.sh"
