#!/usr/bin/env bash
# The prefix cache against a real engine: llama.cpp's llama-server (its prompt cache per
# slot, `cache_prompt`), measured by `orchestrate run` on a multi-turn conversation workload
# through the chat endpoint (issue 24). Setup shared with scripts/real-engine.sh
# (scripts/llama-cpp-lib.sh): a random-weight llama GGUF, here a little larger (so prompt
# processing shows in TTFT) and carrying the project tokenizer's chat template
# (data/tokenizer/tokenizer_config.json), served with `--jinja` so server and client render
# the same text.
#
# First it records what the real server sends for a second turn (the streamed chat answer,
# its last event's `usage` and `timings`, and `/metrics`) into $OUT/recorded/, then runs the
# same conversation workload twice, each time on a fresh server started from a task file:
# `cache_prompt` on (llama.cpp's default) and off (`extra_body: {cache_prompt: false}`), and
# prints per point the client-side, server and ideal hit rates, achieved/ideal, and per-turn
# TTFT of the first and last turn.
#
# Usage: scripts/real-engine-prefix.sh [SESSIONS_IN_FLIGHT TURNS REQUESTS]  (default 2 4 16)
# Env: VENV (default ~/.cache/orchestrate/llama-venv), PORT (default 18742), OUT (a temp dir),
# BIN (default target/debug/orchestrate), THREADS (llama-server -t, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
CONC="${1:-2}"; TURNS="${2:-4}"; REQUESTS="${3:-16}"
VENV="${VENV:-$HOME/.cache/orchestrate/llama-venv}"
PORT="${PORT:-18742}"
OUT="${OUT:-$(mktemp -d /tmp/real-engine-prefix.XXXXXX)}"
THREADS="${THREADS:-2}"
TOK=data/tokenizer/tokenizer.json
BIN="${BIN:-target/debug/orchestrate}"
[ -x "$BIN" ] || nice -n 5 cargo build --quiet --bin orchestrate

# shellcheck source=scripts/llama-cpp-lib.sh
. scripts/llama-cpp-lib.sh
MODEL="$OUT/tiny-random-chat.gguf"
MODEL_CHAT_TEMPLATE="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["chat_template"], end="")' data/tokenizer/tokenizer_config.json)" \
  MODEL_EMBD=128 MODEL_FF=256 MODEL_LAYERS=2 MODEL_HEADS=4 llama_model "$MODEL"
# Slots: one per session in flight, each with room for a whole conversation. llama.cpp's
# SentencePiece tokenizer cannot build the vocabulary's "▁word" pieces by pairwise merges (no
# intermediate pieces), so it spells most words in byte tokens: the server counts ~6 tokens
# per word the client's tokenizer counts as one.
ARGS="-m $MODEL --host 127.0.0.1 -c $((CONC * 4096)) -np $CONC -t $THREADS --jinja --metrics"

# What the real server sends: two turns of one conversation, the second's stream recorded
# byte for byte (each recv with its time), and /metrics before and after them.
"$SERVER" $ARGS --port "$PORT" >"$OUT/llama-server.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true; wait $srv 2>/dev/null || true' EXIT
llama_wait $srv "$PORT" "$OUT/llama-server.log"
VERSION="$("$SERVER" --version 2>&1 | grep -m1 version || true)"
echo "llama-server $VERSION; model $MODEL (128 wide, 2 layers, F32); load $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$OUT/recorded"
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/recorded/metrics-before.txt"
python3 - "$PORT" "$OUT/recorded" "$VERSION" <<'PY'
import json, socket, sys, time
port, out, version = int(sys.argv[1]), sys.argv[2], sys.argv[3]
words = "the quick brown fox jumps over the lazy dog and then it runs far away from the old".split()
system = " ".join(words * 3)
def content(ev):
    return "".join(c.get("delta", {}).get("content") or "" for c in ev.get("choices", []))
def pieces(data):
    """`data` cut after the response head and after each whole chunk of the chunked body;
    as it is when it does not parse as whole chunks."""
    out, rest = [], data
    if rest.startswith(b"HTTP/"):
        head, _, rest = rest.partition(b"\r\n\r\n")
        out.append(head + b"\r\n\r\n")
    while rest:
        size, sep, tail = rest.partition(b"\r\n")
        try:
            n = int(size, 16)
        except ValueError:
            return [data]
        end = len(size) + 2 + n + 2
        if not sep or len(rest) < end:
            return [data]
        out.append(rest[:end])
        rest = rest[end:]
    return out
def send(messages):
    """One streamed chat request on its own connection; each recv is a step (the
    conformance fixture's format: wait, bytes, answer-bearing events it completes)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = json.dumps({"model": "tiny", "messages": messages, "max_tokens": 8, "stream": True,
                       "stream_options": {"include_usage": True}, "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"content-length: %d\r\n\r\n" % len(body) + body)
    steps, events, raw, pending, last = [], [], b"", b"", time.perf_counter()
    while not raw.endswith(b"\r\n0\r\n\r\n"):
        data = s.recv(65536)
        now = time.perf_counter()
        if not data:
            break
        raw += data
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.startswith(b"data: {"):
                ev = json.loads(line[6:])
                events.append(ev)
        wait = round((now - last) * 1e3)
        for piece in pieces(data):
            # Events that arrived together are split at their chunk boundaries (the server
            # writes each as one chunk); the first piece has the wait.
            steps.append({"after_ms": wait, "bytes": piece.decode(), "tokens":
                          sum(bool(content(json.loads(l[6:]))) for l in piece.split(b"\n") if l.startswith(b"data: {"))})
            wait = 0
        last = now
    s.close()
    return steps, events
history = [{"role": "system", "content": system}, {"role": "user", "content": " ".join(words[:8])}]
_, events = send(history)
first_usage = (events[-1].get("usage") or {})
history += [{"role": "assistant", "content": "".join(map(content, events))},
            {"role": "user", "content": " ".join(words[8:])}]
steps, events = send(history)
final = events[-1]
usage = final.get("usage") or {}
timings = final.get("timings") or {}
json.dump({"engine": f"llama.cpp llama-server {version}, /v1/chat/completions, second turn",
           "request_messages": history, "usage": usage, "timings": timings,
           "first_turn_usage": first_usage, "steps": steps},
          open(f"{out}/chat-turn2.json", "w"), indent=1)
print(f"recorded turn 2: usage {json.dumps(usage)}; timings.cache_n {timings.get('cache_n')}, "
      f"timings.prompt_n {timings.get('prompt_n')}")
PY
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/recorded/metrics-after.txt"
echo "recorded /metrics families: $(grep -v '^#' "$OUT/recorded/metrics-after.txt" | cut -d' ' -f1 | tr '\n' ' ')"
kill $srv; wait $srv 2>/dev/null || true
trap - EXIT

# The conversation workload, with the prompt cache on and off, each on a fresh server.
for cache in true false; do
  name="llama-prefix-cache-$cache"
  cat >"$OUT/$name.yaml" <<YAML
name: $name
backend: openai
model: tiny
port: auto
env:
  LD_LIBRARY_PATH: "$LD_LIBRARY_PATH"
commands:
  - "$SERVER $ARGS --port {{ port }}"
readiness: {http: /health, timeout: 120s}
benchmark:
  tokenizer: $PWD/$TOK
  endpoint: chat
  dataset:
    kind: conversation
    num_turns: $((TURNS * 2))
    input_len: 16
    output_len: 8
    system_prompt_len: 32
  # llama.cpp reuses the longest common prefix token by token.
  prefix_block_size: 1
  extra_body: {ignore_eos: true, cache_prompt: $cache}
  num_prompts: $REQUESTS
  concurrency: $CONC
YAML
  ORCHESTRATE_STATE_DIR="$OUT/state" "$BIN" -q run --no-report --results "$OUT/results" \
    "$OUT/$name.yaml" >"$OUT/$name.txt"
  python3 - "$OUT/results/$name/latest" "$cache" <<'PY'
import glob, json, sys
(path,) = glob.glob(sys.argv[1] + "/points/*/summary.json")
r = json.load(open(path))
f = lambda v: "null" if v is None else f"{v:.3f}"
print(f"cache_prompt {sys.argv[2]}: {r['completed']} requests ({r.get('failed', 0)} failed), "
      f"hit rate client {f(r.get('prefix_cache_hit_rate'))}, server {f(r.get('server_prefix_cache_hit_rate'))}, "
      f"ideal {f(r.get('ideal_prefix_cache_hit_rate'))} (block {r.get('prefix_block_tokens')}), "
      f"achieved/ideal {f(r.get('prefix_cache_hit_vs_ideal'))}; median TTFT {r['median_ttft_ms']:.2f} ms")
for t in (r.get("sessions") or {}).get("turns", []):
    print(f"  turn {t['turn']}: {t['completed']} requests, mean input {t['mean_input_tokens']:.1f} tokens, "
          f"median TTFT {t['median_ttft_ms']:.2f} ms, mean TTFT {t['mean_ttft_ms']:.2f} ms, "
          f"hit rate {f(t.get('prefix_cache_hit_rate'))}")
PY
done
echo "results in $OUT"
