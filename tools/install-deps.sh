#!/bin/sh
# install-deps.sh — install every Debian 12 package tandem needs to build, test and run.
# Idempotent; run as root (or with sudo). Set TDM_DEPS_MINIMAL=1 to skip the browser test stack.
# patchelf and xz-utils: tools/device-verify.sh prepare (the device bundle and its PostgreSQL).
set -eu
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS="build-essential autoconf automake libtool pkg-config git ca-certificates curl
 libh2o-evloop-dev libpq-dev libucx-dev ucx-utils libsystemd-dev libjansson-dev libxxhash-dev
 libcurl4-openssl-dev libssl-dev postgresql-15 postgresql-client-15 clang libclang-rt-14-dev clang-format
 python3 nghttp2-client procps iproute2 iptables patchelf xz-utils
 debhelper dpkg-dev fakeroot lintian man-db
 prometheus"
if [ "${TDM_DEPS_MINIMAL:-0}" != 1 ]; then
    PKGS="$PKGS chromium chromium-driver"
    command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "install-deps: installing:$missing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
else
    echo "install-deps: all packages present"
fi
# uPlot for the console (web/uplot.pin: version and integrity hash): npm pack from the registry,
# the tarball's sha512 checked, unpacked into $TDM_VENDOR_DIR/uplot; the build embeds it in tandemd.
top=$(cd "$(dirname "$0")/.." && pwd)
vendor=${TDM_VENDOR_DIR:-/usr/local/share/tandem/vendor}
uplot_version=$(sed -n 's/^version //p' "$top/web/uplot.pin")
uplot_integrity=$(sed -n 's/^integrity //p' "$top/web/uplot.pin")
if [ "$(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$vendor/uplot/package.json" 2>/dev/null)" != "$uplot_version" ]; then
    command -v npm >/dev/null 2>&1 || { echo "install-deps: npm is needed for uPlot" >&2; exit 1; }
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "uplot@$uplot_version" >/dev/null)
    got="sha512-$(openssl dgst -sha512 -binary "$tmp/uplot-$uplot_version.tgz" | base64 -w0)"
    if [ "$got" != "$uplot_integrity" ]; then
        echo "install-deps: uplot-$uplot_version.tgz has integrity $got, web/uplot.pin says $uplot_integrity" >&2
        rm -rf "$tmp"
        exit 1
    fi
    $SUDO mkdir -p "$vendor"
    $SUDO rm -rf "$vendor/uplot"
    tar -xzf "$tmp/uplot-$uplot_version.tgz" -C "$tmp"
    $SUDO mv "$tmp/package" "$vendor/uplot"
    rm -rf "$tmp"
    echo "install-deps: uPlot $uplot_version in $vendor/uplot"
fi
# Debian starts a default cluster on port 5432; tandem runs its own private clusters, so the
# packaged one is left as it is.
