#!/bin/sh
# test-pd-faults.sh — scenario "faults" of test-pd.sh, which says what is checked.
TDM_PD_SCENARIO=faults
export TDM_PD_SCENARIO
exec sh "$(dirname "$0")/test-pd.sh"
