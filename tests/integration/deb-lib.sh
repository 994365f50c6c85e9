# tests/integration/deb-lib.sh — sourced by the package tests (test-deb-install.sh,
# test-deb-upgrade.sh) after they set SRC. deb_setup: TAP helpers, root and the built package
# (BUILD/deb/tandem_*.deb, or TDM_DEB_DIR) or a skip (a failure under TDM_DEB_REQUIRED=1), the
# machine-wide lock, a refusal to touch a tandem package installed by someone else, and the exit
# trap that purges whatever these tests installed and removes a tandem user they created.
# Sets DEB (the package file), DEB_VERSION (its version), PKG_VERSION (the upstream version the
# binaries print), TMP (a scratch directory).
# shellcheck shell=sh
. "$SRC/tests/integration/tap-lib.sh"

# okf STATUS DESCRIPTION FILE: ok, and on failure FILE's last lines as TAP comments
okf() {
    ok "$1" "$2"
    [ "$1" = 0 ] || tail -n 30 "$3" 2>/dev/null | sed 's/^/# /'
}

deb_skip_or_fail() {
    if [ "${TDM_DEB_REQUIRED:-0}" = 1 ]; then
        echo "1..1"
        echo "not ok 1 - $1 (TDM_DEB_REQUIRED=1)"
        exit 1
    fi
    echo "1..0 # SKIP $1"
    exit 0
}

# deb_apt install FILE... | purge PKG...: apt-get without prompts, recommends or network use
# (every dependency is installed already), waiting for the dpkg lock rather than failing on it.
deb_apt() {
    verb=$1
    shift
    if [ "$verb" = install ]; then
        set -- $(for f in "$@"; do case $f in /*) echo "$f" ;; *) echo "./$f" ;; esac; done)
    fi
    DEBIAN_FRONTEND=noninteractive apt-get "$verb" -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=300 -o APT::Get::List-Cleanup=false "$@" </dev/null
}

deb_cleanup() {
    [ -n "${WPID:-}" ] && kill -KILL "$WPID" 2>/dev/null
    for p in tandem-cuda tandem; do
        if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -qv 'not-installed'; then
            deb_apt purge "$p" >/dev/null 2>&1 || dpkg --purge "$p" >/dev/null 2>&1
        fi
    done
    [ "${DEB_USER_EXISTED:-1}" = 0 ] && getent passwd tandem >/dev/null && userdel tandem 2>/dev/null
    [ "${DEB_USER_EXISTED:-1}" = 0 ] && getent group tandem >/dev/null && groupdel tandem 2>/dev/null
    [ -n "${DEB_CLEANUP_EXTRA:-}" ] && eval "$DEB_CLEANUP_EXTRA"
    rm -rf "$TMP"
}

deb_setup() {
    [ "$(id -u)" = 0 ] || deb_skip_or_fail "needs root: it installs the package system-wide"
    dir=${TDM_DEB_DIR:-$BUILD/deb}
    DEB=$(ls "$dir"/tandem_*.deb 2>/dev/null | head -n 1)
    [ -n "$DEB" ] || deb_skip_or_fail "no package in $dir (make deb builds it)"
    DEB=$(cd "$(dirname "$DEB")" && pwd)/$(basename "$DEB")
    DEB_VERSION=$(dpkg-deb -f "$DEB" Version)
    PKG_VERSION=$(sed -n 's/^PACKAGE_VERSION = //p' "$BUILD/Makefile" 2>/dev/null)
    TMP=$(mktemp -d)
    exec 9>/run/lock/tandem-deb-test.lock
    flock -w 900 9 || deb_skip_or_fail "another package test held /run/lock/tandem-deb-test.lock for 900 s"
    if dpkg-query -W -f='${Status}' tandem 2>/dev/null | grep -q 'ok installed'; then
        echo "1..1"
        echo "not ok 1 - a tandem package is installed on this machine already; this test would" \
            "replace it: apt-get purge tandem tandem-cuda first"
        exit 1
    fi
    DEB_USER_EXISTED=1
    getent passwd tandem >/dev/null || DEB_USER_EXISTED=0
    trap 'deb_cleanup' EXIT
    trap 'exit 1' INT TERM HUP
}

deb_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# deb_wait_ready PORT SECONDS: the worker's /health answers 200
deb_wait_ready() {
    t=$(($2 * 10))
    while [ $t -gt 0 ]; do
        [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$1/health")" = 200 ] && return 0
        sleep 0.1
        t=$((t - 1))
    done
    return 1
}

# deb_wait_exit PID SECONDS
deb_wait_exit() {
    t=$(($2 * 10))
    while [ $t -gt 0 ]; do
        # a child that exited is a zombie (state Z) until waited for
        if ! [ -r "/proc/$1/stat" ] || [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null)" = Z ]; then
            wait "$1" 2>/dev/null
            return 0
        fi
        sleep 0.1
        t=$((t - 1))
    done
    return 1
}
