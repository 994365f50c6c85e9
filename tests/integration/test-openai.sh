#!/bin/sh
# test-openai.sh — the OpenAI endpoint end to end: a real
# `tandem-worker --device cpu` serving models/demo with --api-key and --served-model-name, driven
# by the official `openai` npm package (test-openai.mjs: chat, streaming, token-id prompts, stop
# strings, seeded sampling, logprobs, tool calls whole and streamed, errors), then every `curl`
# example of docs/api.md run as printed (only the host:port replaced by the test's), then a
# clean exit on SIGTERM. TAP.
#
# Fails (Bail out!) when tandem-worker is not built, or when node/npm or the
# `openai` package cannot be had (node_modules is installed from package-lock.json on first use).
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${TDM_BUILDDIR:-.}
BIN=${TDM_OAI_WORKER:-$BUILD/tandem-worker}
IT="$SRC/tests/integration"
if [ ! -x "$BIN" ]; then
    echo "Bail out! $BIN not built"
    exit 1
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "Bail out! node/npm not available"
    exit 1
fi
if [ ! -d "$IT/node_modules/openai" ]; then
    # a read-only or distcheck source tree: install next to the build instead
    NM_DIR="$IT"
    if ! [ -w "$IT" ]; then
        NM_DIR="$BUILD/tests/integration/npm"
        mkdir -p "$NM_DIR" && cp "$IT/package.json" "$IT/package-lock.json" "$NM_DIR/"
    fi
    if ! (cd "$NM_DIR" && timeout 300 npm ci --no-audit --no-fund >/dev/null 2>&1); then
        echo "Bail out! cannot install the openai npm package (no registry?): cd tests/integration && npm ci"
        exit 1
    fi
    if [ "$NM_DIR" != "$IT" ]; then
        export NODE_PATH="$NM_DIR/node_modules"
        cp "$IT/test-openai.mjs" "$NM_DIR/"
        IT_RUN="$NM_DIR"
    fi
fi
IT_RUN=${IT_RUN:-$IT}

TMP=$(mktemp -d /tmp/test-openai-XXXXXX)
READY="$TMP/ready.json"
KEY="sk-tandem-test"
"$BIN" --device cpu --model-path "$SRC/models/demo" --served-model-name demo --api-key "$KEY" \
    --port 0 --ready-file "$READY" --page-size 16 >/dev/null 2>"$TMP/stderr.log" &
PID=$!
cleanup() {
    kill "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
i=0
while [ ! -s "$READY" ] && kill -0 "$PID" 2>/dev/null && [ $i -lt 1200 ]; do
    sleep 0.05
    i=$((i + 1))
done
if [ ! -s "$READY" ]; then
    echo "1..1"
    echo "not ok 1 - worker wrote no ready file"
    tail -20 "$TMP/stderr.log" | sed 's/^/#   /'
    exit 1
fi
PORT=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$READY")

TDM_OAI_BASE="http://127.0.0.1:$PORT/v1" TDM_OAI_MODEL=demo TDM_OAI_KEY="$KEY" TDM_SRCDIR="$SRC" \
    node "$IT_RUN/test-openai.mjs" >"$TMP/node.tap" 2>&1
RC=$?
N=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$TMP/node.tap" | tail -1)
grep -v '^1\.\.' "$TMP/node.tap"
N=${N:-0}
FAILED=$([ $RC -eq 0 ] || echo 1)

# The curl examples of docs/api.md and README.md, as printed (host:port replaced)
export TANDEM_API_KEY="$KEY"
mkdir -p "$TMP/ex"
awk -v dir="$TMP/ex" '/^```sh$/{f=1;k++;next} /^```$/{f=0;next} f{print > (dir "/" sprintf("%03d", k) ".sh")}' \
    "$SRC/docs/api.md" "$SRC/README.md"
ex=0
for f in "$TMP"/ex/*.sh; do
    [ -f "$f" ] && grep -q curl "$f" || continue
    ex=$((ex + 1))
    N=$((N + 1))
    sed -i "s#http://localhost:30000#http://127.0.0.1:$PORT#g" "$f"
    out=$(sh "$f" 2>&1)
    if [ $? -eq 0 ] && [ -n "$out" ] && ! printf '%s' "$out" | grep -q '"error"'; then
        echo "ok $N - docs/api.md / README.md curl example $ex"
    else
        echo "not ok $N - docs/api.md / README.md curl example $ex"
        cat "$f" | head -10 | sed 's/^/#   /'
        printf '%s\n' "$out" | head -10 | sed 's/^/#   /'
        FAILED=1
    fi
done

N=$((N + 1))
kill -TERM "$PID"
i=0
while kill -0 "$PID" 2>/dev/null && [ $i -lt 200 ]; do
    sleep 0.05
    i=$((i + 1))
done
if wait "$PID"; then
    echo "ok $N - clean exit on SIGTERM"
else
    echo "not ok $N - clean exit on SIGTERM"
    tail -10 "$TMP/stderr.log" | sed 's/^/#   /'
    FAILED=1
fi
echo "1..$N"
[ -z "$FAILED" ] || exit 1
exit 0
