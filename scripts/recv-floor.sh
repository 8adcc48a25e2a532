#!/usr/bin/env bash
# The kernel's floor under the client's CPU per token (docs/performance.md): against one mock
# server, runs examples/recv_floor.rs (one thread, epoll, plain recv; then recvmsg with kernel
# receive timestamps) and `orchestrate bench` at the same streams and tokens, ROUNDS times
# alternating, and prints CPU per streamed event for each. Same session, same mock: compare
# the ratios.
#
# Usage: scripts/recv-floor.sh [STREAMS ITL_MS TOKENS REQUESTS ROUNDS]  (default 1024 20 100 2048 2)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/mock-lib.sh
STREAMS="${1:-1024}"; ITL="${2:-20}"; TOKENS="${3:-100}"; REQUESTS="${4:-2048}"; ROUNDS="${5:-2}"
TARGET="${CARGO_TARGET_DIR:-target}"
PORT="${PORT:-18733}"
OUT="${OUT:-$(mktemp -d /tmp/recv-floor.XXXXXX)}"
cargo build --release --quiet --bin orchestrate --example recv_floor
BIN="${BIN:-$TARGET/release/orchestrate}"
FLOOR="$TARGET/release/examples/recv_floor"
TOK=data/tokenizer/tokenizer.json
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "load $(cut -d' ' -f1-3 /proc/loadavg); $STREAMS streams, server ITL $ITL ms, $TOKENS tokens, $REQUESTS requests"
"$BIN" -q mock-server --preset fixed --itl-ms "$ITL" --port "$PORT" --tokenizer "$TOK" >/dev/null &
mock=$!
trap 'kill $mock 2>/dev/null || true' EXIT
wait_for_mock "$PORT"
for round in $(seq "$ROUNDS"); do
  "$FLOOR" "127.0.0.1:$PORT" "$STREAMS" "$TOKENS" "$REQUESTS"
  "$FLOOR" "127.0.0.1:$PORT" "$STREAMS" "$TOKENS" "$REQUESTS" stamps
  "$BIN" -q bench --backend vllm --base-url "http://127.0.0.1:$PORT" --model mock-model \
    --tokenizer "$TOK" --dataset-name random --random-input-len 32 \
    --random-output-len "$TOKENS" --ignore-eos --max-concurrency "$STREAMS" \
    --num-prompts "$REQUESTS" --disable-tqdm --save-result --result-dir "$OUT" \
    --result-filename "bench-$round.json" >/dev/null
  python3 - "$OUT/bench-$round.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); c = r["self_check"]; t = r["total_output_tokens"]
print(f"orchestrate bench: {r['completed']} requests, {t} tokens | cpu us/token {c['cpu_us_per_output_token']:.2f} (user {c['cpu_user_s']*1e6/t:.2f} + sys {c['cpu_system_s']*1e6/t:.2f})")
PY
done
