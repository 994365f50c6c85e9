#!/bin/sh
# check.sh — README command 2: install dependencies, build with -Werror and ASan/UBSan, run
# `make check` (unit, integration, chaos-short, browser, fuzz replay). Stage package builds the
# Debian package from `make dist` and lints it (make deb-check); make check's
# package tests then install, upgrade and purge it (TDM_DEB_REQUIRED=1: never skipped here).
# Prints seconds per stage.
# Builds in ./build-check unless TDM_BUILD_DIR is set. Exits non-zero if any stage fails.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${TDM_BUILD_DIR:-$top/build-check}
jobs=$(nproc 2>/dev/null || echo 2)
t_all=$(date +%s)
stage() {
    name=$1; shift
    t0=$(date +%s)
    echo "== stage $name"
    rc=0
    "$@" || rc=$?
    echo "== stage $name: $(( $(date +%s) - t0 )) s (rc=$rc)"
    return $rc
}
stage deps sh "$top/tools/install-deps.sh"
stage autoreconf sh -c "cd '$top' && autoreconf -fi >/dev/null"
mkdir -p "$build"
stage configure sh -c "cd '$build' && '$top/configure' --enable-werror --enable-sanitizers=address,undefined >configure.out || { tail -40 configure.out; exit 1; }; grep -A6 '^  tandem ' configure.out || true"
stage build make -C "$build" -j"$jobs"
stage format-check make -C "$build" format-check
# both packages where configure found nvcc (CI has it): tandem, and tandem-cuda (backend-cuda.so)
deb_cuda=0
test -n "$(sed -n 's/^NVCC = //p' "$build/Makefile")" && deb_cuda=1
stage package make -C "$build" deb-check TDM_DEB_JOBS="$jobs" TDM_DEB_CUDA=$deb_cuda
stage check env TDM_DEB_REQUIRED=1 make -C "$build" -j"$jobs" check
echo "== total: $(( $(date +%s) - t_all )) s"
