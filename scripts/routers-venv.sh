#!/usr/bin/env bash
# Create or refresh the Python venv with the pinned prefill/decode routers the integration
# tests run (tests/it/routers): sglang-router (python -m sglang_router.launch_router) and
# vllm-router. Idempotent: a quick no-op when the pinned versions are already installed.
#   ORCHESTRATE_ROUTERS_VENV  where the venv lives (default ~/.cache/orchestrate/routers-venv)
set -euo pipefail

SGLANG_ROUTER_VERSION=0.3.2   # the version InferenceX pins
VLLM_ROUTER_VERSION=0.1.17
VENV="${ORCHESTRATE_ROUTERS_VENV:-$HOME/.cache/orchestrate/routers-venv}"

pinned() {
  [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/vllm-router" ] &&
    "$VENV/bin/python" - "$SGLANG_ROUTER_VERSION" "$VLLM_ROUTER_VERSION" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
ok = version("sglang-router") == sys.argv[1] and version("vllm-router") == sys.argv[2]
import sglang_router.launch_router  # noqa: F401  (the module the tests run)
sys.exit(0 if ok else 1)
PY
}

if pinned; then
  echo "routers venv up to date: $VENV (sglang-router $SGLANG_ROUTER_VERSION, vllm-router $VLLM_ROUTER_VERSION)"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" || {
    echo "routers-venv: python3 -m venv failed; install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  }
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "sglang-router==$SGLANG_ROUTER_VERSION" "vllm-router==$VLLM_ROUTER_VERSION"

if ! pinned; then
  echo "routers-venv: installed, but the pinned routers are not usable in $VENV" >&2
  exit 1
fi
echo "routers venv ready: $VENV (sglang-router $SGLANG_ROUTER_VERSION, vllm-router $VLLM_ROUTER_VERSION)"
