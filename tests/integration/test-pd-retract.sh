#!/bin/sh
# test-pd-retract.sh — a decode pool too small for its batch: PD requests retracted after their
# commit are recomputed locally and still match colocated output (scenario "retract" of
# test-pd.sh, which says what is checked).
TDM_PD_SCENARIO=retract
export TDM_PD_SCENARIO
exec sh "$(dirname "$0")/test-pd.sh"
