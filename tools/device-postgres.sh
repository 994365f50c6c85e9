#!/bin/sh
# device-postgres.sh — the private PostgreSQL of a device run (docs/contracts.md §h: tandemd on the
# device machine runs against a cluster started there from Debian's postgresql-15 binaries).
#
#   device-postgres.sh pack OUT.tar.xz    here (Debian bookworm, network): apt-get download
#       postgresql-15, postgresql-client-15 and libpq5, dpkg -x them into a staging root, leave
#       out what a test cluster never loads (translations, manuals, JIT bitcode and llvmjit), copy
#       the non-glibc libraries they load (ldd here) beside them into 15/deplib, point every
#       binary's RUNPATH there (patchelf), and write one xz tarball (about 18 MiB, ICU's data most of it).
#   device-postgres.sh setup PACK.tar.xz  there (as root; nothing can be fetched there): unpack
#       under /var/tmp/tdm-pg15 (a path user postgres can reach), create user postgres when
#       missing (initdb and pg_ctl refuse root; common/pgcluster.c runs them as postgres), link
#       /usr/lib/postgresql/15 (the build's TDM_PG_BINDIR) and /usr/share/zoneinfo when absent,
#       check that initdb and postgres run as that user, and print the PATH line to eval (psql).
#
# Nothing is unpacked over existing files: the links are made only where the paths are absent,
# and the libraries stay in the pack's own directory (RUNPATH), never on the system's path.
set -eu
usage() {
    echo "usage: $0 pack OUT.tar.xz | setup PACK.tar.xz" >&2
    exit 2
}
test $# -eq 2 || usage
PGV=15
ROOT=/var/tmp/tdm-pg$PGV

is_elf() {
    test -f "$1" && test ! -L "$1" &&
        test "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46
}

pack() {
    out=$1
    command -v patchelf >/dev/null || {
        echo "device-postgres: patchelf is needed here (apt-get install patchelf)" >&2
        exit 1
    }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/deb" "$tmp/root"
    (cd "$tmp/deb" && apt-get download postgresql-$PGV postgresql-client-$PGV libpq5 >&2)
    for d in "$tmp"/deb/*.deb; do
        dpkg -x "$d" "$tmp/root"
    done
    r=$tmp/root
    pg=$r/usr/lib/postgresql/$PGV
    rm -rf "$r/usr/share/locale" "$r/usr/share/man" "$r/usr/share/doc" "$pg/lib/bitcode" \
        "$pg"/lib/llvmjit*
    # the programs a cluster of common/pgcluster.c and the tests use; the rest stay behind
    for f in "$pg"/bin/*; do
        case $(basename "$f") in
        initdb | pg_ctl | postgres | postmaster | psql | pg_isready | pg_controldata | createdb | dropdb) ;;
        *) rm -f "$f" ;;
        esac
    done
    mkdir -p "$pg/deplib"
    # the libraries: libpq itself and the closure of every ELF file, glibc's own left out
    cp -L "$r"/usr/lib/x86_64-linux-gnu/libpq.so.5 "$pg/deplib/"
    find "$r" -type f | while read -r f; do
        is_elf "$f" || continue
        LD_LIBRARY_PATH=$pg/deplib ldd "$f" 2>/dev/null |
            awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
    done | sort -u | while read -r lib; do
        case $(basename "$lib") in
        ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | \
            libutil.so* | libanl.so* | libnsl.so* | libmvec.so* | libstdc++.so* | libgcc_s.so*)
            continue ;; # the device's own (a newer glibc and C++ runtime)
        esac
        test -f "$pg/deplib/$(basename "$lib")" || cp -L "$lib" "$pg/deplib/"
    done
    find "$r" -type f | while read -r f; do
        is_elf "$f" || continue
        case $f in
        "$pg"/deplib/*) patchelf --set-rpath '$ORIGIN' "$f" ;;
        "$pg"/bin/* | "$pg"/lib/*) patchelf --set-rpath '$ORIGIN/../deplib' "$f" ;;
        *) patchelf --set-rpath "\$ORIGIN/../postgresql/$PGV/deplib" "$f" ;;
        esac
    done
    # the time zones a cluster needs when the device has no tzdata
    mkdir -p "$tmp/root/zoneinfo"
    cp -a /usr/share/zoneinfo/UTC /usr/share/zoneinfo/GMT /usr/share/zoneinfo/Etc \
        "$tmp/root/zoneinfo/" 2>/dev/null || true
    tar -C "$tmp/root" -cf - . | xz -T1 -9e >"$out"
    echo "device-postgres: $(du -h "$out" | cut -f1) in $out ($(ls "$pg/deplib" | wc -l) libraries)" >&2
}

setup() {
    pack=$1
    test "$(id -u)" = 0 || {
        echo "device-postgres: setup runs as root (it creates user postgres)" >&2
        exit 1
    }
    rm -rf "$ROOT"
    mkdir -p "$ROOT"
    xz -dc "$pack" | tar -C "$ROOT" -xf -
    chmod -R a+rX "$ROOT"
    chmod 755 /var/tmp/.. /var/tmp 2>/dev/null || true
    if ! getent passwd postgres >/dev/null; then
        if command -v useradd >/dev/null; then
            useradd --system --no-create-home --home-dir /var/tmp --shell /bin/sh postgres
        else
            echo "postgres:x:1987:1987:PostgreSQL:/var/tmp:/bin/sh" >>/etc/passwd
            echo "postgres:x:1987:" >>/etc/group
        fi
    fi
    mkdir -p /usr/lib/postgresql /usr/share/postgresql
    test -e /usr/lib/postgresql/$PGV || ln -s "$ROOT/usr/lib/postgresql/$PGV" /usr/lib/postgresql/$PGV
    test -e /usr/share/postgresql/$PGV || ln -s "$ROOT/usr/share/postgresql/$PGV" /usr/share/postgresql/$PGV
    if ! test -e /usr/share/zoneinfo/UTC; then
        mkdir -p /usr/share/zoneinfo
        cp -a "$ROOT"/zoneinfo/* /usr/share/zoneinfo/
    fi
    bin=/usr/lib/postgresql/$PGV/bin
    # the checks run as postgres, with a clean environment, as common/pgcluster.c runs them
    for t in initdb pg_ctl postgres psql; do
        v=$(su -s /bin/sh postgres -c "env -i $bin/$t --version" 2>&1) || {
            echo "device-postgres: $t does not run as postgres: $v" >&2
            exit 1
        }
        echo "device-postgres: $v" >&2
    done
    echo "export PATH=$bin:\$PATH"
}

case $1 in
pack) pack "$2" ;;
setup) setup "$2" ;;
*) usage ;;
esac
