#!/usr/bin/env bash
# The capacity search's cost on the mock (issue #25; docs/performance.md). The mock's decode
# step takes 10 + 0.1 n ms with n sequences running (`--decode-ms 0:10,1000:110`, no prefill
# cost), so p99 TPOT <= 40 ms holds up to n = 300: a capacity of 300 concurrent streams that
# can be computed. `bench --search concurrency` from 16 to 1024 must bracket it within 10% in
# at most 8 levels. Prints the search's result block (levels, measurements, search time) and
# the wall time of the whole bench command.
# Usage: scripts/search-mock.sh BINARY [PORT]
set -euo pipefail
bin=$(realpath "${1:?usage: $0 BINARY [PORT]}")
port=${2:-18625}
cd "$(dirname "$0")/.."
. scripts/mock-lib.sh
"$bin" mock-server --port "$port" --preset fixed --decode-ms 0:10,1000:110 2>/dev/null &
mock=$!
trap 'kill "$mock" 2>/dev/null || true; wait "$mock" 2>/dev/null || true' EXIT
wait_for_mock "$port"
start=$(date +%s.%N)
"$bin" bench --base-url "http://127.0.0.1:$port" --model mock-model \
  --tokenizer data/tokenizer/tokenizer.json --random-input-len 16 --random-output-len 8 \
  --ignore-eos --num-prompts 400 --request-timeout 120s --disable-tqdm \
  --search concurrency --search-min 16 --search-max 1024 --search-slo p99:tpot:40ms
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "bench command wall time: %.1f s\n", b - a }'
