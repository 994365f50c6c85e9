#!/bin/sh
# device-bundle.sh BUILD_DIR — collect a build's programs, tests and benchmarks plus the
# non-system shared libraries they load into .device-bundle/ (git-ignored), small enough to carry
# to the device machine (<= 40 MiB). Layout mirrors the build dir: top-level programs at the
# root, tests/<kind>/test-*, bench/*; libraries in lib/. With patchelf each binary's RUNPATH
# becomes $ORIGIN/<up>/lib:/usr/local/cuda/lib64 (and each library's $ORIGIN); without it
# tools/device-run.sh sets LD_LIBRARY_PATH, which works as well.
# Left out, because the device has its own: glibc, libstdc++/libgcc_s, the CUDA driver, and the
# large CUDA libraries (cuBLAS, cuDNN, NCCL…). libcudart (0.7 MB) travels.
# Prefer a build without sanitizers (ASan and the CUDA driver disagree about the shadow gap, and
# compute-sanitizer does not run ASan binaries); an ASan build still bundles, with libasan.
# Env: TDM_BUNDLE_KEEP_DEBUG=1 keeps debug info; TDM_BUNDLE_LIMIT_MIB (default 40).
set -eu
if test $# -ne 1 || test ! -f "$1/Makefile"; then
    echo "usage: $0 BUILD_DIR   (a configured and built tandem build directory)" >&2
    exit 2
fi
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
dest=$top/.device-bundle
limit_mib=${TDM_BUNDLE_LIMIT_MIB:-40}

is_elf() {
    test -f "$1" && test "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46
}

# Libraries the device has (or must provide itself): never bundled.
system_lib() {
    case $(basename "$1") in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
        libresolv.so* | libutil.so* | libanl.so* | libnsl.so* | libmvec.so* | \
        libstdc++.so* | libgcc_s.so* | \
        libcuda.so* | libnvidia-*.so* | libcublas*.so* | libcublasLt.so* | libcudnn*.so* | \
        libnccl.so* | libcufft*.so* | libcurand*.so* | libcusparse*.so* | libcusolver*.so* | \
        libnvrtc*.so* | libnvJitLink*.so*)
        return 0 ;;
    esac
    return 1
}

rm -rf "$dest"
mkdir -p "$dest/lib"

# 1. binaries: top-level programs, every test and benchmark executable
bins=$(mktemp)
trap 'rm -f "$bins"' EXIT
for f in "$build"/*; do
    if test -x "$f" && is_elf "$f"; then echo "${f#$build/}"; fi
done >"$bins"
for sub in tests bench tools; do
    test -d "$build/$sub" || continue
    find "$build/$sub" -type f -perm -u+x ! -path '*/.libs/*' ! -path '*/.deps/*' | sort |
        while read -r f; do
            if is_elf "$f"; then echo "${f#$build/}"; fi
        done
done >>"$bins"
if ! test -s "$bins"; then
    echo "device-bundle: no built programs in $build (run make, and make check for the tests)" >&2
    exit 1
fi

nbin=0
while read -r rel; do
    mkdir -p "$dest/$(dirname "$rel")"
    cp "$build/$rel" "$dest/$rel"
    nbin=$((nbin + 1))
done <"$bins"

# 2. their non-system shared libraries (ldd lists the whole closure)
libs=$(mktemp)
trap 'rm -f "$bins" "$libs"' EXIT
while read -r rel; do
    ldd "$build/$rel" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }
                                        $2 == "=>" && $3 == "not" { print "MISSING " $1 }'
done <"$bins" | sort -u >"$libs"
if grep -q '^MISSING' "$libs"; then
    echo "device-bundle: unresolved libraries here:" >&2
    grep '^MISSING' "$libs" >&2
    exit 1
fi
nlib=0
while read -r lib; do
    system_lib "$lib" && continue
    cp -L "$lib" "$dest/lib/$(basename "$lib")"
    nlib=$((nlib + 1))
done <"$libs"

# 3. strip debug info (symbols stay for backtraces), then point RUNPATHs at lib/
if test -z "${TDM_BUNDLE_KEEP_DEBUG:-}" && command -v strip >/dev/null; then
    find "$dest" -type f | while read -r f; do
        is_elf "$f" && strip --strip-debug "$f" 2>/dev/null || true
    done
fi
if command -v patchelf >/dev/null; then
    while read -r rel; do
        up=$(dirname "$rel" | awk -F/ '$0 == "." { print ""; next } { s = ""; for (i = 1; i <= NF; i++) s = s "../"; print s }')
        patchelf --set-rpath "\$ORIGIN/${up}lib:/usr/local/cuda/lib64" "$dest/$rel"
    done <"$bins"
    for f in "$dest"/lib/*; do
        test -f "$f" && patchelf --set-rpath '$ORIGIN' "$f"
    done
    rpath=patchelf
else
    echo "device-bundle: patchelf not found (apt-get install patchelf); device-run.sh will use LD_LIBRARY_PATH" >&2
    rpath=LD_LIBRARY_PATH
fi

# 4. manifest and size limit
{
    echo "tandem device bundle"
    echo "source: $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$top" diff --quiet 2>/dev/null || echo ' (dirty)')"
    echo "build: $build"
    echo "configure: $(sed -n 's/^  \$ //p' "$build/config.log" 2>/dev/null | head -1)"
    echo "created: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
    echo "rpath: $rpath"
    echo "files:"
    (cd "$dest" && find . -type f ! -name MANIFEST | sed 's|^\./||' | sort | while read -r f; do
        printf '  %10d %s\n' "$(wc -c <"$f")" "$f"
    done)
} >"$dest/MANIFEST"
bytes=$(du -sb "$dest" | cut -f1)
mib=$(((bytes + 1048575) / 1048576))
echo "device-bundle: $nbin binaries, $nlib libraries, $mib MiB in $dest (rpath: $rpath)"
if test "$bytes" -gt $((limit_mib * 1048576)); then
    echo "device-bundle: over the ${limit_mib} MiB limit; largest files:" >&2
    (cd "$dest" && find . -type f -exec du -b {} + | sort -rn | head -10) >&2
    exit 1
fi
