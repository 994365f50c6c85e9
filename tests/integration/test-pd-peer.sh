#!/bin/sh
# test-pd-peer.sh — kill -9 of the prefill worker under PD traffic, then a new prefill on the same
# bootstrap port (scenario "peer" of test-pd.sh, which says what is checked).
TDM_PD_SCENARIO=peer
export TDM_PD_SCENARIO
exec sh "$(dirname "$0")/test-pd.sh"
