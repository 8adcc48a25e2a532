#!/usr/bin/env bash
# The GPU sampler's own CPU cost at a 500 ms interval (issue #26; docs/performance.md), from
# /proc/<pid>/stat (utime+stime, and cutime+cstime for what a process reaped):
#  1. the sampler process: the test stand-in (tests/fixtures/telemetry/replay-nvidia-smi.sh,
#     8 GPUs, which forks `date` and `sleep` every sample, so it costs more than nvidia-smi)
#     alone for SECONDS; on a GPU machine, the real `nvidia-smi` query loop too; the framed
#     loop of `--telemetry-tool dcgm` (curl of a local page) where python3 and curl are;
#  2. our reader side: `orchestrate run` of a SECONDS-long point at 0.2 requests/s against the
#     mock server, with the stand-in sampled every 500 ms and without telemetry; orchestrate's
#     own utime+stime (its children not counted) with minus without.
# Usage: scripts/telemetry-cost.sh BINARY [SECONDS]   (default 60)
set -euo pipefail
bin=$(realpath "${1:?usage: $0 BINARY [SECONDS]}")
secs=${2:-60}
cd "$(dirname "$0")/.."
tick=$(getconf CLK_TCK)
replay="$PWD/tests/fixtures/telemetry/replay-nvidia-smi.sh"
recording="$PWD/tests/fixtures/telemetry/nvidia-smi-h200-default-query-loop-500ms.csv"

# Fields 14-17 of /proc/PID/stat: utime stime cutime cstime (after the `(comm)` field).
ticks() { # PID [all|self]
  local rest
  rest=$(sed 's/^.*) //' "/proc/$1/stat")
  set -- "$2" $rest
  if [ "$1" = all ]; then echo $(( ${12} + ${13} + ${14} + ${15} )); else echo $(( ${12} + ${13} )); fi
}
share() { awk -v t="$1" -v hz="$tick" -v s="$2" 'BEGIN { printf "%.3f%% of one core (%d ticks in %s s)", 100 * t / hz / s, t, s }'; }

measure_sampler() { # NAME COMMAND...
  local name=$1; shift
  "$@" >/dev/null 2>&1 &
  local pid=$!
  sleep "$secs"
  local t
  t=$(ticks "$pid" all)
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "sampler $name: $(share "$t" "$secs")"
}

measure_sampler "stand-in (8 GPUs, 500 ms)" sh "$replay" "$recording" 0.5 8
if command -v nvidia-smi >/dev/null; then
  fields=timestamp,index,uuid,power.draw,utilization.gpu,memory.used,memory.total,temperature.gpu,clocks.sm,clocks_throttle_reasons.active
  measure_sampler "nvidia-smi (500 ms)" env TZ=UTC nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits -lms 500
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The framed loop of `--telemetry-tool dcgm` (src/telemetry/framed.rs, `dcgm_script`: date,
# curl and sleep forked every sample) against a local page serving the written DCGM scrape.
if command -v python3 >/dev/null && command -v curl >/dev/null; then
  mkdir -p "$work/page"
  cp tests/fixtures/telemetry/dcgm-h200-written.txt "$work/page/metrics"
  python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$work/page" >"$work/http.log" 2>&1 &
  http=$!
  port=
  for _ in $(seq 50); do
    port=$(sed -n 's/.*port \([0-9]*\).*/\1/p' "$work/http.log" | head -1)
    [ -n "$port" ] && break
    sleep 0.1
  done
  url="http://127.0.0.1:$port/metrics"
  measure_sampler "dcgm loop (curl of a local page, 500 ms)" sh -c \
    "while :; do echo \"#orchestrate-sample dcgm \$(date -u '+%Y/%m/%d %H:%M:%S.%3N')\"; curl -sS --max-time 2 '$url' || true; echo; echo '#orchestrate-end'; sleep 0.500; done"
  kill "$http" 2>/dev/null || true
fi
cat >"$work/cost.yaml" <<YAML
name: telemetry-cost
backend: vllm
model: mock-model
port: auto
commands:
  - "exec {{ orchestrate }} mock-server --port {{ port }} --preset fixed --itl-ms 5"
readiness: {http: /health, timeout: 30s}
benchmark:
  tokenizer: $PWD/data/tokenizer/tokenizer.json
  ignore_eos: true
  dataset: {kind: random, input_len: 16, output_len: 4}
  duration: ${secs}s
  request_rate: 0.2
YAML

measure_run() { # NAME ARGS...
  local name=$1; shift
  ORCHESTRATE_STATE_DIR="$work/state" "$bin" run "$work/cost.yaml" --no-report -q \
    --results "$work/results" "$@" >/dev/null 2>"$work/err" &
  local pid=$! t=0 now
  while kill -0 "$pid" 2>/dev/null; do
    now=$(ticks "$pid" self 2>/dev/null) && t=$now
    sleep 0.2
  done
  wait "$pid" || { cat "$work/err" >&2; exit 1; }
  echo "$t"
}
with=$(measure_run with --telemetry-command "exec sh $replay $recording 0.5 8" --telemetry-interval 500ms)
without=$(measure_run without)
echo "orchestrate with telemetry: $(share "$with" "$secs")"
echo "orchestrate without:        $(share "$without" "$secs")"
echo "reader side (difference):   $(share $(( with - without )) "$secs")"
