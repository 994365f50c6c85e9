#!/bin/sh
# test-pd-tp.sh — scenario "tp" of test-pd.sh (PD at --tp-size 2), which says what is checked.
TDM_PD_SCENARIO=tp
export TDM_PD_SCENARIO
exec sh "$(dirname "$0")/test-pd.sh"
