#!/bin/sh
# test-deb-install.sh — the built package on this machine, as an operator gets it: `apt-get
# install ./tandem_VERSION_ARCH.deb` (local file; every dependency already installed by
# tools/install-deps.sh), then the files, owners and modes, the tandem system user, the conffiles,
# the man pages, `systemd-analyze verify` on the installed units, the installed binaries'
# --version, the installed worker (as user tandem, the unit's command line) serving the demo model
# on a loopback port; then `apt-get purge` leaves nothing behind but the tandem user (Debian policy
# keeps system users). The package is purged at exit whatever happened, and a tandem user this
# test created is removed, so the machine is left as it was found.
#
# Needs root and the package (make deb: build/deb/tandem_*.deb). Without them it skips, unless
# TDM_DEB_REQUIRED=1 (tools/check.sh sets it: there a missing package is a failure). A tandem
# package already installed on the machine is never replaced (not ok, naming it). Runs hold
# /run/lock/tandem-deb-test.lock so two tests (or two checkouts) never install at once.
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/deb-lib.sh"
deb_setup

echo "# installing $(basename "$DEB")"
deb_apt install "$DEB" >"$TMP/install.log" 2>&1
okf $? "apt-get install ./$(basename "$DEB")" "$TMP/install.log"
! grep -q 'schema version\|--migrate' "$TMP/install.log"; ok $? "no database configured: postinst ran no migration"
st=$(dpkg-query -W -f='${Status} ${Version}' tandem 2>/dev/null)
[ "$st" = "install ok installed $DEB_VERSION" ]; ok $? "dpkg: tandem $DEB_VERSION installed ($st)"

# files, owners, modes: "path mode owner:group"
while read -r p m o; do
    got=$(stat -c '%a %U:%G' "$p" 2>/dev/null)
    [ "$got" = "$m $o" ]; ok $? "$p: $m $o (got: ${got:-absent})"
done <<EOF
/usr/bin/tandemd 755 root:root
/usr/bin/tandem-worker 755 root:root
/usr/bin/tandemctl 755 root:root
/lib/systemd/system/tandemd.service 644 root:root
/lib/systemd/system/tandem-worker@.service 644 root:root
/lib/systemd/system/tandem.target 644 root:root
/usr/lib/sysusers.d/tandem.conf 644 root:root
/usr/lib/tmpfiles.d/tandem.conf 644 root:root
/usr/share/polkit-1/rules.d/tandem.rules 644 root:root
/etc/tandem/tandemd.conf 644 root:root
/etc/tandem/workers/demo.conf 644 root:root
/usr/share/tandem/models/demo/config.json 644 root:root
/usr/share/doc/tandem/README.md 644 root:root
/usr/share/doc/tandem/copyright 644 root:root
/var/lib/tandem 750 tandem:tandem
/var/lib/tandem/groups 700 tandem:tandem
/var/lib/tandem/spool 750 tandem:tandem
EOF
[ -n "$(ls /usr/share/tandem/models/demo/*.safetensors 2>/dev/null)" ]
ok $? "the demo model's weights under /usr/share/tandem/models/demo"

# the system user: from sysusers.d, a system uid, no login, home = the state dir
pw=$(getent passwd tandem)
uid=$(echo "$pw" | cut -d: -f3)
[ -n "$pw" ] && [ "$uid" -lt 1000 ] && [ "$(echo "$pw" | cut -d: -f6)" = /var/lib/tandem ] &&
    case $(echo "$pw" | cut -d: -f7) in */nologin | */false) true ;; *) false ;; esac
ok $? "system user tandem (${pw:-absent})"
getent group tandem >/dev/null; ok $? "group tandem"

# conffiles: both default configs, nothing else under /etc missing from the list
cf=$(dpkg-query -W -f='${Conffiles}\n' tandem | awk 'NF { print $1 }' | sort | tr '\n' ' ')
[ "$cf" = "/etc/tandem/tandemd.conf /etc/tandem/workers/demo.conf " ]; ok $? "conffiles: $cf"

for p in tandemd tandem-worker tandemctl; do
    mp=$(man -w "$p" 2>&1)
    [ "$mp" = "/usr/share/man/man1/$p.1.gz" ]; ok $? "man -w $p: $mp"
done
man -P cat tandem-worker 2>/dev/null | grep -q -- '--drain-timeout'
ok $? "man tandem-worker lists --drain-timeout (from --help)"

# systemd-analyze verify on the installed units (the binaries at their installed paths); the
# template is verified as an instance.
mkdir -p "$TMP/units"
cp /lib/systemd/system/tandem-worker@.service "$TMP/units/tandem-worker@demo.service"
systemd-analyze verify --man=no /lib/systemd/system/tandemd.service /lib/systemd/system/tandem.target \
    "$TMP/units/tandem-worker@demo.service" >"$TMP/verify.log" 2>&1
rc=$?
[ $rc = 0 ] && [ ! -s "$TMP/verify.log" ]; okf $? "systemd-analyze verify: the three units (rc $rc)" "$TMP/verify.log"

v=$(/usr/bin/tandemd --version 2>&1)
[ "${v%% (git *}" = "tandemd $PKG_VERSION" ]; ok $? "installed tandemd --version: $v"
v=$(/usr/bin/tandem-worker --version 2>&1)
[ "${v%% (git *}" = "tandem-worker $PKG_VERSION" ]; ok $? "installed tandem-worker --version: $v"
v=$(/usr/bin/tandemctl --version 2>&1)
[ "${v%% (git *}" = "tandemctl $PKG_VERSION" ]; ok $? "installed tandemctl --version: $v"

# The installed worker as tandem-worker@demo.service runs it (user tandem, the unit's flags; the
# override file absent as before any reconfigure), on a free loopback port instead of 30000.
port=$(deb_free_port)
setpriv --reuid=tandem --regid=tandem --init-groups -- env -i PATH=/usr/bin:/bin /usr/bin/tandem-worker \
    --config /etc/tandem/workers/demo.conf --override-config /var/lib/tandem/groups/demo/override.ini \
    --spool-dir /var/lib/tandem/spool/demo --host 127.0.0.1 --port "$port" >"$TMP/worker.log" 2>&1 &
WPID=$!
deb_wait_ready "$port" 60; okf $? "installed worker ready on 127.0.0.1:$port" "$TMP/worker.log"
curl -sS -m 60 -H 'Content-Type: application/json' \
    -d '{"model":"demo","prompt":"The capital of France is","max_tokens":8,"temperature":0}' \
    "http://127.0.0.1:$port/v1/completions" >"$TMP/resp.json" 2>&1
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); t=r["choices"][0]["text"]; assert r["usage"]["completion_tokens"]>0, r; print("# text:", repr(t))' "$TMP/resp.json" 2>/dev/null
rc=$?
cat "$TMP/resp.json" >>"$TMP/worker.log"
okf $rc "installed worker answers /v1/completions on the demo model" "$TMP/worker.log"
kill -TERM "$WPID" 2>/dev/null
deb_wait_exit "$WPID" 30; ok $? "installed worker exits on SIGTERM"
WPID=

# --device cuda without the tandem-cuda package: the worker says what to install, and fails
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
setpriv --reuid=tandem --regid=tandem --init-groups -- env -i PATH=/usr/bin:/bin /usr/bin/tandem-worker \
    --config /etc/tandem/workers/demo.conf --device cuda --host 127.0.0.1 --port 0 >"$TMP/cuda.log" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "GPU backend not installed: install tandem-cuda (/usr/lib/$multiarch/tandem/backend-cuda.so" "$TMP/cuda.log"
okf $? "--device cuda without tandem-cuda: exit $rc, 'GPU backend not installed: install tandem-cuda'" "$TMP/cuda.log"

# tandem-cuda: built wherever configure found nvcc (CI included; TDM_DEB_CUDA=1 in tools/check.sh).
# It installs without a GPU or driver; the worker then says the GPU is absent, and says which
# library is missing when cuBLAS is not on the library path (masked here in a mount namespace).
CUDA_DEB=$(ls "$(dirname "$DEB")"/tandem-cuda_*.deb 2>/dev/null | head -n 1)
nvcc=$(sed -n 's/^NVCC = //p' "$BUILD/Makefile" 2>/dev/null)
if [ -z "$CUDA_DEB" ] && { [ -z "$nvcc" ] || [ "${TDM_DEB_REQUIRED:-0}" != 1 ]; }; then
    for i in 1 2 3 4 5 6; do skip "no tandem-cuda package (configure found no nvcc: ${nvcc:-none})"; done
elif [ -z "$CUDA_DEB" ]; then
    ok 1 "tandem-cuda package built (nvcc $nvcc found, TDM_DEB_REQUIRED=1: make deb TDM_DEB_CUDA=1)"
    for i in 2 3 4 5 6; do ok 1 "tandem-cuda checks (no package)"; done
else
    deb_apt install "$CUDA_DEB" >"$TMP/cuda-install.log" 2>&1
    okf $? "apt-get install ./$(basename "$CUDA_DEB") (no CUDA toolkit needed by dpkg)" "$TMP/cuda-install.log"
    mod=/usr/lib/$multiarch/tandem/backend-cuda.so
    got=$(stat -c '%a %U:%G' "$mod" 2>/dev/null)
    [ "$got" = "644 root:root" ]; ok $? "$mod: 644 root:root (got: ${got:-absent})"
    needed=$(objdump -p "$mod" 2>/dev/null | awk '$1 == "NEEDED" {print $2}' | tr '\n' ' ')
    case " $needed" in *" libcudart"*) false ;; *libcublas.so.*) true ;; *) false ;; esac
    ok $? "the CUDA runtime is linked in; cuBLAS from the toolkit (NEEDED: $needed)"
    cuda_worker() {
        setpriv --reuid=tandem --regid=tandem --init-groups -- env -i PATH=/usr/bin:/bin \
            /usr/bin/tandem-worker --config /etc/tandem/workers/demo.conf --device cuda \
            --host 127.0.0.1 --port 0
    }
    if nvidia-smi -L >/dev/null 2>&1; then
        skip "a GPU is present: the no-GPU message is not checked here"
    else
        cuda_worker >"$TMP/cuda2.log" 2>&1
        rc=$?
        [ $rc != 0 ] && grep -q "no NVIDIA GPU on this machine" "$TMP/cuda2.log"
        okf $? "tandem-cuda installed, no GPU: exit $rc, 'no NVIDIA GPU on this machine'" "$TMP/cuda2.log"
    fi
    # every directory the linker cache has cuBLAS in, hidden under an empty tmpfs
    dirs=$(ldconfig -p | awk '/libcublas\.so\.[0-9]/ {print $NF}' | xargs -r -n1 dirname | sort -u | tr '\n' ' ')
    if [ -z "$dirs" ]; then
        skip "cuBLAS is not on this machine's library path: nothing to hide"
    else
        export dirs
        unshare -m sh -c 'for d in $dirs; do mount -t tmpfs none "$d" || exit 99; done
            setpriv --reuid=tandem --regid=tandem --init-groups -- env -i PATH=/usr/bin:/bin \
            /usr/bin/tandem-worker --config /etc/tandem/workers/demo.conf --device cuda \
            --host 127.0.0.1 --port 0' >"$TMP/cuda3.log" 2>&1
        rc=$?
        [ $rc != 0 ] && [ $rc != 99 ] && grep -q "needs NVIDIA's cuBLAS 13 (libcublas.so.13" "$TMP/cuda3.log"
        okf $? "cuBLAS hidden ($dirs): exit $rc, the worker names libcublas.so.13" "$TMP/cuda3.log"
    fi
    deb_apt purge tandem-cuda >"$TMP/cuda-purge.log" 2>&1 && [ ! -e "$mod" ]
    okf $? "apt-get purge tandem-cuda removes $mod" "$TMP/cuda-purge.log"
fi

# purge: every file the package listed, the conffiles, /etc/tandem, the state dir, the maintainer
# scripts' state and the units' enablement links are gone; the tandem user stays (policy).
dpkg-query -L tandem >"$TMP/files" 2>/dev/null
deb_apt purge tandem >"$TMP/purge.log" 2>&1
okf $? "apt-get purge tandem" "$TMP/purge.log"
dpkg-query -W -f='${Status}' tandem 2>/dev/null | grep -q installed
[ $? != 0 ]; ok $? "dpkg: tandem no longer known as installed"
# (directories are shared — /lib is even a symlink to usr/lib here — so only files count)
left=$(while read -r f; do [ ! -d "$f" ] && { [ -e "$f" ] || [ -L "$f" ]; } && echo "$f"; done <"$TMP/files")
[ -z "$left" ]; ok $? "no packaged file left after purge${left:+: $left}"
left=$(ls -d /etc/tandem /var/lib/tandem /var/lib/dpkg/info/tandem.* /etc/systemd/system/*.wants/tandem* \
    /var/lib/systemd/deb-systemd-helper-enabled/*tandem* /var/lib/systemd/deb-systemd-helper-enabled/*/*tandem* \
    /usr/share/tandem /usr/share/doc/tandem 2>/dev/null | tr '\n' ' ')
[ -z "$left" ]; ok $? "nothing left under /etc/tandem, /var/lib/tandem, dpkg or systemd state${left:+: $left}"
getent passwd tandem >/dev/null; ok $? "the tandem user stays after purge (Debian policy)"
tap_done
