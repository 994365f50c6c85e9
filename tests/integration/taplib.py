"""tests/integration/taplib.py — TAP for the python3 heredocs of the shell integration tests
(imported through sys.path from "$SRC/tests/integration"): ok() numbers and prints one line with
up to 20 diagnostic lines on failure, done() prints the plan and exits 1 if any failed."""
import sys

n = failed = 0


def ok(cond, msg, diag=None):
    global n, failed
    n += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n, msg))
    if not cond:
        failed += 1
        for line in str(diag or "").splitlines()[:20]:
            print("#   " + line)
    sys.stdout.flush()
    return cond


def done():
    print("1..%d" % n)
    sys.exit(1 if failed else 0)
