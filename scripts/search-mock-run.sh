#!/usr/bin/env bash
# `benchmark.search` through `orchestrate run` on the mock (issue #25; docs/performance.md):
# the same server and SLO as scripts/search-mock.sh (decode step 10 + 0.1 n ms, p99 TPOT <=
# 40 ms holds up to n = 300 streams), searched from 16 to 1024 with `repeat_deployments`
# (default 2: both ends of the final interval measured again on a restarted server). Prints
# the result's interval, levels, measurements, deployment starts and the search's time, and
# the wall time of the whole run (server starts and stops included).
# Usage: scripts/search-mock-run.sh BINARY [REPEAT_DEPLOYMENTS]
set -euo pipefail
bin=$(realpath "${1:?usage: $0 BINARY [REPEAT_DEPLOYMENTS]}")
repeat=${2:-2}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/search-mock.yaml" <<YAML
name: search-mock
backend: vllm
model: mock-model
port: auto
commands:
  - "{{ orchestrate }} mock-server --port {{ port }} --preset fixed --decode-ms 0:10,1000:110"
readiness: {http: /health, timeout: 30s}
benchmark:
  tokenizer: $PWD/data/tokenizer/tokenizer.json
  ignore_eos: true
  dataset: {kind: random, input_len: 16, output_len: 8}
  num_prompts: 400
  request_timeout: 120s
  search:
    axis: concurrency
    min: 16
    max: 1024
    slo: ["p99:tpot:40ms"]
    repeat_deployments: $repeat
YAML
start=$(date +%s.%N)
"$bin" run --no-report --results "$work/results" "$work/search-mock.yaml" >/dev/null
end=$(date +%s.%N)
dir="$work/results/search-mock/$(readlink "$work/results/search-mock/latest")"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(f"{d}/manifest.json"))
e = m["deployments"][0]["search"]
r = json.load(open(f"{d}/{e['file']}"))
levels = [str(int(i["level"])) + (" (fresh)" if i["redeploy"] else "") for i in r["iterations"]]
print(f"interval [{r['max_passing']}, {r['first_failing']}], width {r['boundary_summary']['relative_width']:.3f}, "
      f"{r['points']} levels, {r['measurements']} measurements: {', '.join(levels)}; "
      f"{len(e['starts'])} deployment starts; search {r['elapsed_s']:.2f} s; {r['convergence_reason']}")
PY
awk -v a="$start" -v b="$end" 'BEGIN { printf "run command wall time: %.1f s\n", b - a }'
