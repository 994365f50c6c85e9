#!/bin/sh
# test-chat-hf5.sh — a checkpoint exactly as transformers 5 saves it serves chat out of the box:
# `tandem-worker --device cpu` on tests/fixtures/models/tiny-qwen3-hf5 (tokenizer_config.json with
# transformers' default model_max_length beyond 64 bits, the template in chat_template.jinja,
# Qwen3ForCausalLM) answers /v1/chat/completions whole and streamed, with tools (the hermes parser
# picked from the template: a 200 with content or tool_calls, never a 500), then
# --chat-template and --tool-call-parser are honoured, and an unusable --chat-template stops the
# worker with a message. TAP.
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${TDM_BUILDDIR:-.}
BIN=${TDM_OAI_WORKER:-$BUILD/tandem-worker}
MODEL="$SRC/tests/fixtures/models/tiny-qwen3-hf5"
if [ ! -x "$BIN" ]; then
    echo "Bail out! $BIN not built"
    exit 1
fi
if ! command -v curl >/dev/null 2>&1; then
    echo "Bail out! curl not available"
    exit 1
fi
TMP=$(mktemp -d /tmp/test-chat-hf5-XXXXXX)
PID=
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
N=0
FAILED=0
ok() { # ok COND-STATUS DESCRIPTION
    N=$((N + 1))
    if [ "$1" -eq 0 ]; then echo "ok $N - $2"; else echo "not ok $N - $2"; FAILED=1; fi
}

start() { # start EXTRA-FLAGS...: sets PORT
    rm -f "$TMP/ready.json"
    "$BIN" --device cpu --model-path "$MODEL" --port 0 --ready-file "$TMP/ready.json" \
        --page-size 16 "$@" >/dev/null 2>"$TMP/stderr.log" &
    PID=$!
    i=0
    while [ ! -s "$TMP/ready.json" ] && kill -0 "$PID" 2>/dev/null && [ $i -lt 1200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    PORT=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$TMP/ready.json" 2>/dev/null)
}
stop() {
    kill "$PID" 2>/dev/null
    wait "$PID" 2>/dev/null
    PID=
}
chat() { # chat BODY → $TMP/out, prints the HTTP status
    curl -s -o "$TMP/out" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "$1" "http://127.0.0.1:$PORT/v1/chat/completions"
}

start
ok $([ -n "$PORT" ]; echo $?) "the worker starts on a transformers 5 checkpoint"
ok $(grep -q "no chat template" "$TMP/stderr.log"; [ $? -ne 0 ]; echo $?) \
    "its chat template is found (chat_template.jinja; the config's 1e30 model_max_length read)"
code=$(chat '{"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"Hello!"}],"max_tokens":8}')
ok $([ "$code" = 200 ] && grep -q '"role":"assistant"' "$TMP/out"; echo $?) \
    "/v1/chat/completions answers 200 with an assistant message ($code)"
code=$(chat '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}')
ok $([ "$code" = 200 ] && grep -q 'data: \[DONE\]' "$TMP/out"; echo $?) "streamed reply ends with [DONE]"
TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
code=$(chat '{"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":'"$TOOLS"',"max_tokens":12}')
ok $([ "$code" = 200 ] && grep -q '"finish_reason"' "$TMP/out"; echo $?) \
    "tools offered (hermes picked from the template): 200, content or tool_calls ($code)"
code=$(chat '{"messages":[{"role":"user","content":"Weather?"}],"tools":'"$TOOLS"',"tool_choice":"required","max_tokens":12,"stream":true}')
ok $([ "$code" = 200 ] && grep -q 'data: \[DONE\]' "$TMP/out"; echo $?) \
    "tool_choice required, streamed: the forced <tool_call> prefix, never a 500 ($code)"
code=$(chat '{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"21"}],"tools":'"$TOOLS"',"max_tokens":4}')
ok $([ "$code" = 200 ]; echo $?) "a history with a tool call and its result renders ($code)"
stop

printf '{%%- for m in messages %%}{{ m.role }}: {{ m.content }}\n{%% endfor %%}assistant:' >"$TMP/plain.jinja"
start --chat-template "$TMP/plain.jinja" --tool-call-parser mistral
code=$(chat '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":4}')
ok $([ "$code" = 200 ]; echo $?) "--chat-template FILE renders the file's template ($code)"
code=$(chat '{"messages":[{"role":"user","content":"Hello"}],"tools":'"$TOOLS"',"max_tokens":4}')
ok $([ "$code" = 501 ] || [ "$code" = 400 ]; echo $?) \
    "a template that shows no tools refuses a request with tools ($code)"
stop

"$BIN" --device cpu --model-path "$MODEL" --port 0 --chat-template /no/such.jinja \
    >/dev/null 2>"$TMP/stderr.log" &
PID=$!
i=0
while kill -0 "$PID" 2>/dev/null && [ $i -lt 600 ]; do
    sleep 0.05
    i=$((i + 1))
done
alive=$(kill -0 "$PID" 2>/dev/null && echo 1 || echo 0)
[ "$alive" = 1 ] && stop
PID=
ok $([ "$alive" = 0 ] && grep -q "chat-template" "$TMP/stderr.log"; echo $?) \
    "--chat-template naming nothing stops the worker with a message"
echo "1..$N"
exit $FAILED
