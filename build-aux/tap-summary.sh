#!/bin/sh
# tap-summary.sh TRS... — count TAP points from Automake's .trs files and print one line
# "N passed, N failed, N skipped". A test program that crashed, broke its plan or never ran
# (missing .trs) counts as failed. For each failed test it first prints the failing points and
# the tail of its log (as '#' lines), so a CI transcript that keeps only the end still says why.
# Exits 1 when anything failed.
pass=0 fail=0 skip=0
for trs in "$@"; do
    if test ! -f "$trs"; then
        echo "# not run: ${trs%.trs}"
        fail=$((fail + 1))
        continue
    fi
    p=$(grep -c '^:test-result: PASS' "$trs")
    f=$(grep -c -E '^:test-result: (FAIL|ERROR|XPASS)' "$trs")
    s=$(grep -c -E '^:test-result: (SKIP|XFAIL)' "$trs")
    if test "$f" -gt 0; then
        log=${trs%.trs}.log
        echo "# failed: ${trs%.trs} (see $log)"
        if test -f "$log"; then
            grep -E '^(not ok|Bail out!)' "$log" | head -n 20 | sed 's/^/#   /'
            echo "#   -- last 25 lines of $log:"
            tail -n 25 "$log" | cut -c1-300 | sed 's/^/#   | /'
        fi
    fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
done
echo "$pass passed, $fail failed, $skip skipped"
test "$fail" -eq 0
