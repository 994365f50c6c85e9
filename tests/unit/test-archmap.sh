#!/bin/sh
# test-archmap.sh — README.md's "Architecture map" must not lie: every path it lists in backticks
# exists in the source tree. Rules (robust to the table's wording and column count):
#   - a table row whose first cell holds backticked tokens: each of them is a path;
#   - in the other cells, a backticked token that looks like a relative path from the top (two
#     components or more, no spaces, not a URL route or flag) is a path too; a glob needs its
#     directory; a bare `unit/` is prose, not checked;
#   - invariant rows (first cell starts with I1 … I9): each invariant must have a row; its
#     backticked paths must exist; a row without one is "not built yet" and reported as SKIP.
# A path ending in '/' must be a directory. No section, or a section without paths, fails.
# TAP. TDM_SRCDIR (set by make check) is the tree to check; default: this script's checkout.
# Outside a git checkout (make distcheck) it skips unless TDM_ARCHMAP_FORCE=1.
srcdir=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
readme=$srcdir/README.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

# A release tarball holds only the distributed files; the map describes the repository.
if test ! -e "$srcdir/.git" && test -z "${TDM_ARCHMAP_FORCE:-}"; then
    echo "1..0 # SKIP $srcdir is not a git checkout (the map describes the repository)"
    exit 0
fi
if test ! -f "$readme"; then
    echo "1..1"
    echo "not ok 1 - $readme exists"
    exit 1
fi

# Emit "path<TAB>token<TAB>row label" and "inv<TAB>In<TAB>token-or-empty" lines.
awk '
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
function ticks(s, out,   n, t) {   # backticked tokens of s into out[1..n]
    n = 0
    while (match(s, /`[^`]+`/)) {
        t = substr(s, RSTART + 1, RLENGTH - 2)
        out[++n] = t
        s = substr(s, RSTART + RLENGTH)
    }
    return n
}
function pathlike(t) {
    return t ~ /[^\/]\/[^\/]/ && t !~ /^[\/.-]/ && t !~ /[ \t():=,;<>"]/
}
function invpath(t) {   # invariant cells name files or folders: `x.c`, `dataplane/kv/`
    return t !~ /^[\/-]/ && t !~ /[ \t():=,;<>"]/ && (t ~ /\// || t ~ /\.[A-Za-z]+$/)
}
/^#+[ \t]+Architecture map/ { insec = 1; level = index($0, " ") - 1; found = 1; next }
insec && /^#+[ \t]/ { if (index($0, " ") - 1 <= level) insec = 0 }
!insec { next }
/^[ \t]*\|/ {
    line = $0
    sub(/^[ \t]*\|/, "", line); sub(/\|[ \t]*$/, "", line)
    nc = split(line, cell, "|")
    first = trim(cell[1])
    if (first ~ /^:?-+:?$/) next                       # separator row
    if (match(first, /^I[1-9]([^0-9]|$)/)) {           # an invariant row
        inv = substr(first, 1, 2)
        seen[inv] = 1
        k = 0
        for (c = 2; c <= nc; c++) {
            n = ticks(cell[c], tok)
            for (i = 1; i <= n; i++) if (invpath(tok[i])) { print "inv\t" inv "\t" tok[i]; k++ }
        }
        if (!k) print "inv\t" inv "\t"
        next
    }
    n = ticks(first, tok)
    for (i = 1; i <= n; i++) print "path\t" tok[i] "\t" first
    if (n) for (c = 2; c <= nc; c++) {
        m = ticks(cell[c], tok2)
        for (i = 1; i <= m; i++) if (pathlike(tok2[i])) print "path\t" tok2[i] "\t" first
    }
}
END {
    if (!found) print "nosection"
    for (i = 1; i <= 9; i++) if (!(("I" i) in seen)) print "inv\tI" i "\tMISSING"
}' "$readme" >"$tmp"

if grep -q '^nosection' "$tmp"; then
    echo "1..1"
    echo "not ok 1 - README.md has an \"Architecture map\" section"
    exit 1
fi

exists() { # exists TOKEN — a file, a directory (trailing /), or a glob whose directory exists
    case $1 in
    *'*'* | *'?'* | *'['*)
        test -d "$srcdir/$(dirname "$1")" ;;
    */)
        test -d "$srcdir/$1" ;;
    *)
        test -e "$srcdir/$1" ;;
    esac
}

n=0 rc=0
npaths=$(grep -c '^path' "$tmp")
ninv=$(grep -c '^inv' "$tmp")
echo "1..$((npaths + ninv + 1))"
n=1
if test "$npaths" -gt 0; then
    echo "ok 1 - the architecture map lists $npaths paths"
else
    echo "not ok 1 - the architecture map lists paths in backticks"
    rc=1
fi
while IFS="$(printf '\t')" read -r kind a b; do
    case $kind in
    path)
        n=$((n + 1))
        if exists "$a"; then
            echo "ok $n - $a exists"
        else
            echo "not ok $n - $a (listed for $b) does not exist in $srcdir"
            rc=1
        fi
        ;;
    inv)
        n=$((n + 1))
        if test "$b" = MISSING; then
            echo "not ok $n - invariant $a has a row in the architecture map"
            rc=1
        elif test -z "$b"; then
            echo "ok $n # SKIP invariant $a: no file named yet (not built)"
        elif exists "$b"; then
            echo "ok $n - invariant $a: $b exists"
        else
            echo "not ok $n - invariant $a: $b does not exist in $srcdir"
            rc=1
        fi
        ;;
    esac
done <"$tmp"
exit $rc
