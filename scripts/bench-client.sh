#!/usr/bin/env bash
# Client speed and accuracy against the mock server (docs/performance.md).
#
# Builds orchestrate once (release), then for each point starts `orchestrate mock-server` in
# fixed-ITL mode with a ground-truth log, runs `orchestrate bench` against it (closed loop,
# one token per chunk, ignore_eos), and prints what examples/client_accuracy.rs finds:
# TTFT/ITL error against the server's own send times, peak concurrency both sides, client CPU
# per token (getrusage of the bench process / output tokens) and memory per in-flight stream.
#
# Usage: scripts/bench-client.sh [POINT...]   POINT = STREAMS:ITL_MS:OUTPUT_TOKENS:PROMPTS
# Default points: 1024:20:100:2048 4096:80:40:8192 10000:200:20:10000 (a few seconds each).
# PROFILE=dev uses the dev profile (opt-level 1 for orchestrate, 2 for dependencies) instead
# of release, for machines where a release build is too slow. BIN=path runs another
# orchestrate binary (an older build, to compare in one session). PIN=1 pins the mock to
# CPU 1 and the client to CPU 0 (taskset), so the two do not share cores.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/mock-lib.sh
TARGET="${CARGO_TARGET_DIR:-target}"
PORT="${PORT:-18731}"
OUT="${OUT:-$(mktemp -d /tmp/bench-client.XXXXXX)}"
POINTS=("$@")
MOCK_PIN=()
CLIENT_PIN=()
if [ "${PIN:-0}" = 1 ]; then
  MOCK_PIN=(taskset -c 1)
  CLIENT_PIN=(taskset -c 0)
fi
[ ${#POINTS[@]} -gt 0 ] || POINTS=(1024:20:100:2048 4096:80:40:8192 10000:200:20:10000)

PROFILE="${PROFILE:-release}"
DIR=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
cargo build --profile "$PROFILE" --quiet --bin orchestrate --example client_accuracy
BIN="${BIN:-$TARGET/$DIR/orchestrate}"
ACC="$TARGET/$DIR/examples/client_accuracy"
TOK=data/tokenizer/tokenizer.json
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "profile $PROFILE; pinned ${PIN:-0}; nproc $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT"

for point in "${POINTS[@]}"; do
  IFS=: read -r streams itl out prompts <<<"$point"
  truth="$OUT/truth-$streams.jsonl"
  "${MOCK_PIN[@]}" "$BIN" -q mock-server --preset fixed --itl-ms "$itl" --port "$PORT" \
    --ground-truth "$truth" --tokenizer "$TOK" &
  mock=$!
  wait_for_mock "$PORT"
  "${CLIENT_PIN[@]}" "$BIN" -q bench --backend vllm --base-url "http://127.0.0.1:$PORT" --model mock-model \
    --tokenizer "$TOK" --dataset-name random --random-input-len 32 \
    --random-output-len "$out" --ignore-eos --max-concurrency "$streams" \
    --num-prompts "$prompts" --disable-tqdm --save-result --result-dir "$OUT" \
    --result-filename "result-$streams.json" --request-timeout 120s >"$OUT/text-$streams.txt"
  kill "$mock"
  wait "$mock" 2>/dev/null || true
  echo "== $streams streams, server ITL $itl ms, $out tokens/request, $prompts requests"
  "$ACC" "$OUT/result-$streams.requests.jsonl" "$truth" "$OUT/result-$streams.json"
done
