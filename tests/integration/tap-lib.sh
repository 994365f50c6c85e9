# tests/integration/tap-lib.sh — sourced by the shell integration tests after they set SRC (the
# source tree): BUILD (the build tree, TDM_BUILDDIR or .) and BIN (its tandem-worker), the TAP
# failure (Bail out!) when a program is not built, and ok/tap_done for tests that check in the shell.
# shellcheck shell=sh
BUILD=${TDM_BUILDDIR:-.}
BIN="$BUILD/tandem-worker"

# tap_need_exec PATH: bail out (a failure) unless PATH is an executable.
tap_need_exec() {
    if [ ! -x "$1" ]; then
        echo "Bail out! $1 not built"
        exit 1
    fi
}

# ok STATUS DESCRIPTION: one TAP line, STATUS 0 passes; tap_done prints the plan and exits 1 if
# any failed.
n=0
fail=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
tap_done() {
    echo "1..$n"
    exit $fail
}
