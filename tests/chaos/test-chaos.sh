#!/bin/sh
# test-chaos.sh — the chaos suite's short version in make check (tests/chaos/chaos.py says what
# each scenario checks): one stack, every scenario, detection within 3x the latency targets.
set -u
: "${TDM_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${TDM_BUILDDIR:=$(pwd)}"
for b in tandemd tandem-worker tdm-pg; do
    if [ ! -x "$TDM_BUILDDIR/$b" ]; then
        echo "Bail out! $TDM_BUILDDIR/$b is not built"
        exit 1
    fi
done
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
exec "$PY" "$TDM_SRCDIR/tests/chaos/chaos.py" --build "$TDM_BUILDDIR" --src "$TDM_SRCDIR" ${TDM_CHAOS_ONLY:+--only "$TDM_CHAOS_ONLY"}
