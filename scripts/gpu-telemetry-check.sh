#!/usr/bin/env bash
# The real-GPU check of `orchestrate run --telemetry` (issue #26), for a machine with an
# NVIDIA GPU, nvidia-smi and python3, and a built orchestrate binary (no cargo needed). Runs
# tasks/gpu-telemetry-check.yaml (the mock server as the server, two short points) with the
# real nvidia-smi sampled every 500 ms, then copies into OUT: the run's archive (each point's
# telemetry/local.log, gpu_samples.jsonl and summary.json), the run's output, a 5 s recording
# of the sampler's query (a fixture candidate), `orchestrate ps` after the run, any
# nvidia-smi left running, and a digest of the figures (figures.txt). Exits non-zero when the
# run failed, a point has no GPU figures, or a sampler was left running.
#
# Usage: scripts/gpu-telemetry-check.sh BINARY [OUT]   (OUT defaults to $OUT; COST=1 adds
# scripts/telemetry-cost.sh's 30 s measurements, about 2 minutes more)
set -euo pipefail

bin=$(realpath "${1:?usage: $0 BINARY [OUT]}")
out=${2:-${OUT:?give OUT as the second argument or in the environment}}
mkdir -p "$out"
cd "$(dirname "$0")/.."

command -v nvidia-smi >/dev/null || { echo "no nvidia-smi on PATH" >&2; exit 2; }
command -v python3 >/dev/null || { echo "no python3 on PATH" >&2; exit 2; }
nvidia-smi -L | tee "$out/gpus.txt"
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader | tee -a "$out/gpus.txt"

fields=timestamp,index,uuid,power.draw,utilization.gpu,memory.used,memory.total,temperature.gpu,clocks.sm,clocks_throttle_reasons.active
TZ=UTC timeout 5 nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits -lms 500 \
  > "$out/nvidia-smi-default-query-5s.csv" || true

results=$(mktemp -d)
state=$(mktemp -d)
status=0
ORCHESTRATE_STATE_DIR=$state "$bin" run tasks/gpu-telemetry-check.yaml \
  --telemetry --telemetry-interval 500ms --price-per-gpu-hour 2.5 \
  --results "$results" >"$out/run.stdout" 2>"$out/run.stderr" || status=$?
echo "orchestrate run exit: $status" | tee "$out/exit.txt"
cp -r "$results" "$out/results"
ORCHESTRATE_STATE_DIR=$state "$bin" ps >"$out/ps-after.txt" 2>&1 || true
left=$(pgrep -a -f 'nvidia-smi --query-gpu=timestamp' || true)
echo "${left:-none}" >"$out/nvidia-smi-left.txt"

python3 - "$results" "$left" >"$out/figures.txt" <<'PY' || status=1
import json, pathlib, sys
results, left = pathlib.Path(sys.argv[1]), sys.argv[2]
bad = []
for summary in sorted(results.glob("*/*/points/*/summary.json")):
    if summary.parts[-4] == "latest":
        continue
    s = json.loads(summary.read_text())
    t = s.get("telemetry", {})
    keys = ["gpu_count", "gpu_energy_j", "joules_per_token", "joules_per_request",
            "gpu_mean_power_w", "gpu_peak_power_w", "gpu_mean_util_pct",
            "gpu_mean_mem_used_mib", "cost_per_million_output_tokens",
            "output_tokens_per_dollar"]
    print(summary.parent.name, {k: s.get(k) for k in keys},
          "source:", t.get("energy_source"), "notes:", t.get("notes"))
    samples = summary.parent / "gpu_samples.jsonl"
    n = len(samples.read_text().splitlines()) if samples.exists() else 0
    print("  samples:", n, "window:", t.get("window_start_s"), t.get("window_end_s"))
    if s.get("gpu_energy_j") is None or n == 0:
        bad.append(summary.parent.name)
if left.strip():
    bad.append("nvidia-smi left running: " + left)
print("FAILED:" if bad else "OK", bad)
sys.exit(1 if bad else 0)
PY
cat "$out/figures.txt"
# COST=1: also the sampler's own CPU cost (the real nvidia-smi at 500 ms, and our reader
# side), 30 s each (docs/performance.md).
if [ "${COST:-0}" = 1 ]; then
  scripts/telemetry-cost.sh "$bin" 30 | tee "$out/cost.txt" || status=1
fi
exit $status
