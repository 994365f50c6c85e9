#!/bin/sh
# test-structure.sh — the shape of the tree, with fixed thresholds (TAP):
#   1. no circle between folders: the folder-level graph of #include "…" (and <tdm/…>) across
#      dataplane/*, controlplane/*, common, kernels/*, include has no cycle (an include resolves
#      as the compiler does: beside the including file, then the top, include/,
#      dataplane/model/ and dataplane/tokenizer/; config.h and other generated headers resolve
#      to nothing and draw no arrow);
#   2. dataplane/worker/ exists and the only arrows into it come from the worker's main.c
#      (dataplane/main.c or dataplane/worker/main.c) or from the folder itself;
#   3. at most MAX_LONG (6) tracked source files outside tests/ have more than 800 lines,
#      generated tables excepted (GENERATED below); 14 had at the start of the restructuring;
#   4. no citation of documents outside the repository (the starting design's sections, issue
#      and session numbers, the tool that lends the GPU machine) in sources, scripts, docs and
#      README.md;
#   5. no test that cannot fail: no ok() whose condition is the constant 1 in tests/;
#   6. no circle between the files of controlplane/act/: a file calls another when it names a
#      function that the other defines without `static` (a definition starts in column 0); the
#      file-level graph of those calls has no cycle (helpers shared by the threads and the loop
#      side sit in act_shared.c, below the rest).
# TDM_SRCDIR (set by make check) is the tree to check; default: this script's checkout. It reads
# the files git tracks, so outside a git checkout (make distcheck) it skips unless
# TDM_STRUCTURE_FORCE=1 (then every file below the tree counts).
srcdir=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=/usr/bin/python3

if test ! -e "$srcdir/.git" && test -z "${TDM_STRUCTURE_FORCE:-}"; then
    echo "1..0 # SKIP $srcdir is not a git checkout (the checks describe the repository)"
    exit 0
fi
if test ! -x "$PY"; then
    echo "Bail out! $PY is missing (Debian's python3 runs the include-graph check)"
    exit 1
fi

exec "$PY" - "$srcdir" <<'EOF'
import os, re, subprocess, sys

top = sys.argv[1]
MAX_LINES = 800
MAX_LONG = 6
# Generated files, exempt from the line limit (each names its generator in its header).
GENERATED = {"dataplane/tokenizer/unicode_tables.h"}
SRC_EXT = (".c", ".h", ".cu", ".cuh", ".py", ".sh", ".js", ".css", ".html", ".mk", ".am",
           ".ac", ".sql", ".in")
INC_DIRS = ["", "include", "dataplane/model", "dataplane/tokenizer"]
WORKER = "dataplane/worker"
WORKER_MAINS = {"dataplane/main.c", "dataplane/worker/main.c"}

try:
    files = subprocess.run(["git", "-C", top, "ls-files", "-z"], check=True,
                           capture_output=True).stdout.decode().split("\0")
    files = [f for f in files if f and os.path.isfile(os.path.join(top, f))]
except (OSError, subprocess.CalledProcessError):
    files = []
    for d, dirs, names in os.walk(top):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for n in names:
            files.append(os.path.relpath(os.path.join(d, n), top))
fileset = set(files)

n = 0
failed = 0

def ok(cond, desc, detail=()):
    global n, failed
    n += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (n, desc))
    if not cond:
        failed = 1
        for line in detail:
            print("#   " + line)

def folder(path):
    """The graph node of a source file, or None when it is outside the checked folders."""
    parts = path.split("/")
    if parts[0] in ("dataplane", "controlplane", "kernels"):
        return "/".join(parts[:2]) if len(parts) > 2 else parts[0]
    if parts[0] in ("common", "include"):
        return parts[0]
    return None

def resolve(src, name):
    for base in [os.path.dirname(src)] + INC_DIRS:
        cand = os.path.normpath(os.path.join(base, name)) if base else os.path.normpath(name)
        if cand in fileset:
            return cand
    return None

inc_re = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
edges = {}  # (from folder, to folder) -> [example "file -> header"]
for f in files:
    if not f.endswith((".c", ".h", ".cu", ".cuh")) or folder(f) is None:
        continue
    with open(os.path.join(top, f), errors="replace") as fh:
        for line in fh:
            m = inc_re.match(line)
            if not m:
                continue
            kind, name = m.groups()
            if kind == "<" and not name.startswith("tdm/"):
                continue
            tgt = resolve(f, name)
            if tgt is None or folder(tgt) is None:
                continue
            a, b = folder(f), folder(tgt)
            if a != b:
                edges.setdefault((a, b), []).append("%s -> %s" % (f, tgt))

# 1. cycles: Tarjan's strongly connected components over the folder graph.
def circles(edges):
    """The strongly connected components of more than one node of the graph `edges` draws."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, sccs = {}, {}, [], set(), []
    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return graph, sccs
graph, sccs = circles(edges)
detail = []
for comp in sccs:
    detail.append("circle among: " + ", ".join(comp))
    for (a, b), ex in sorted(edges.items()):
        if a in comp and b in comp:
            detail.append("  %s -> %s (%d includes, e.g. %s)" % (a, b, len(ex), ex[0]))
ok(not sccs, "no circle between folders (%d folders, %d arrows)" % (len(graph), len(edges)),
   detail)

# 2. the worker process's folder: only its main.c reaches into it.
has_worker = any(f.startswith(WORKER + "/") for f in files)
ok(has_worker, WORKER + "/ exists (the worker process: main.c and its phases)")
bad = []
for (a, b), ex in sorted(edges.items()):
    if b == WORKER:
        bad += [e for e in ex if e.split(" -> ")[0] not in WORKER_MAINS]
ok(not bad, "the only arrows into %s/ come from the worker's main.c" % WORKER, bad)

# 3. long files.
long_files = []
for f in files:
    if not f.endswith(SRC_EXT) or f in GENERATED or f.startswith("tests/"):
        continue
    with open(os.path.join(top, f), "rb") as fh:
        lines = fh.read().count(b"\n")
    if lines > MAX_LINES:
        long_files.append("%5d %s" % (lines, f))
ok(len(long_files) <= MAX_LONG,
   "%d source files outside tests/ over %d lines (at most %d; generated excepted: %s)"
   % (len(long_files), MAX_LINES, MAX_LONG, ", ".join(sorted(GENERATED))), sorted(long_files))
for g in sorted(GENERATED):
    ok(g in fileset, "the generated-file exception %s exists" % g)

# 4. citations of documents outside the repository.
cite = re.compile(r"DESIGN \xa7|issue [0-9]|session [0-9]|device\stool", re.I)
DOC_EXT = SRC_EXT + (".md", ".txt", ".service", ".conf", ".ini", ".json.in")
hits = []
for f in files:
    if f.startswith("tests/fixtures/") or f.startswith("models/"):
        continue
    if not (f.endswith(DOC_EXT) or f == "README.md" or "/" not in f and f.isupper()):
        continue
    with open(os.path.join(top, f), errors="replace") as fh:
        for i, line in enumerate(fh, 1):
            if cite.search(line):
                hits.append("%s:%d: %s" % (f, i, line.strip()[:100]))
ok(not hits, "no citation of documents outside the repository (%d found)" % len(hits), hits[:40])

# 5. tests that cannot fail.
okone = []
for f in files:
    if f.startswith("tests/") and f.endswith((".c", ".h", ".cu", ".sh", ".py")):
        with open(os.path.join(top, f), errors="replace") as fh:
            for i, line in enumerate(fh, 1):
                if re.search(r"\bok\(\s*1\s*,", line):
                    okone.append("%s:%d: %s" % (f, i, line.strip()[:100]))
ok(not okone, "no ok() with the constant 1 as its condition in tests (it cannot fail)", okone)

# 6. calls between the files of controlplane/act/.
ACT = "controlplane/act/"
act_src = {}
for f in sorted(files):
    if f.startswith(ACT) and f.endswith(".c") and "/" not in f[len(ACT):]:
        with open(os.path.join(top, f), errors="replace") as fh:
            text = re.sub(r"/\*.*?\*/", " ", fh.read(), flags=re.S)
        act_src[f] = re.sub(r'"(\\.|[^"\\])*"', '""', text)
defined = {}
for f, text in act_src.items():
    for m in re.finditer(r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b(\w+)\(", text, re.M):
        defined.setdefault(m.group(1), f)
calls = {}
for f, text in act_src.items():
    for name, g in defined.items():
        if g != f and re.search(r"\b%s\b" % name, text):
            calls.setdefault((f, g), []).append(name)
_, act_sccs = circles(calls)
detail = []
for comp in act_sccs:
    detail.append("circle among: " + ", ".join(comp))
    for (a, b), names in sorted(calls.items()):
        if a in comp and b in comp:
            detail.append("  %s -> %s (%s)" % (a, b, ", ".join(sorted(names))))
ok(len(act_src) > 1 and not act_sccs,
   "no circle between the files of %s (%d files, %d arrows)" % (ACT, len(act_src), len(calls)),
   detail)

print("1..%d" % n)
sys.exit(failed)
EOF
