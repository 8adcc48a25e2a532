#!/usr/bin/env bash
# Client CPU of two builds in one run (docs/performance.md): the same mock server, then
# `orchestrate bench` with binary A and binary B alternately, printing user/system CPU per
# output token of each. On a noisy machine compare the two columns of one run, not runs.
#
# Usage: scripts/ab-client.sh BIN_A BIN_B [STREAMS ITL_MS OUTPUT_TOKENS PROMPTS ROUNDS]
# Defaults: 1024 20 100 2048 3. The mock is BIN_A's.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/mock-lib.sh
A=$1 B=$2 S=${3:-1024} ITL=${4:-20} OUT=${5:-100} N=${6:-2048} R=${7:-3}
TOK=data/tokenizer/tokenizer.json
PORT="${PORT:-18761}"
DIR=$(mktemp -d /tmp/ab-client.XXXXXX)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
"$A" -q mock-server --preset fixed --itl-ms "$ITL" --port "$PORT" --tokenizer "$TOK" >/dev/null 2>&1 &
mock=$!
trap 'kill $mock 2>/dev/null || true' EXIT
wait_for_mock "$PORT"
echo "load $(cut -d' ' -f1-3 /proc/loadavg); $S streams, step $ITL ms, $OUT tokens x $N requests"
for _ in $(seq "$R"); do
  for bin in "$A" "$B"; do
    /usr/bin/time -f "%U %S" -o "$DIR/time" "$bin" -q bench --backend vllm \
      --base-url "http://127.0.0.1:$PORT" --model mock-model --tokenizer "$TOK" \
      --dataset-name random --random-input-len 32 --random-output-len "$OUT" --ignore-eos \
      --max-concurrency "$S" --num-prompts "$N" --disable-tqdm >"$DIR/out" 2>&1
    read -r user sys <"$DIR/time"
    ok=$(awk '/Successful requests/ {print $3}' "$DIR/out")
    awk -v b="$bin" -v u="$user" -v s="$sys" -v t="$((N * OUT))" -v ok="$ok" 'BEGIN {
      printf "%-40s completed %s  user %.2f us/token  sys %.2f us/token  total %.2f\n",
        b, ok, u * 1e6 / t, s * 1e6 / t, (u + s) * 1e6 / t }'
  done
done
