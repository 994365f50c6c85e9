#!/bin/sh
# test-pd-prefix.sh — scenario "prefix" of test-pd.sh (decode-side prefix matching: the room names
# only the prompt pages decode does not hold), which says what is checked.
TDM_PD_SCENARIO=prefix
export TDM_PD_SCENARIO
exec sh "$(dirname "$0")/test-pd.sh"
