#!/bin/sh
# test-pd-flips.sh — scenario "flips" of test-pd.sh, which says what is checked.
TDM_PD_SCENARIO=flips
export TDM_PD_SCENARIO
exec sh "$(dirname "$0")/test-pd.sh"
