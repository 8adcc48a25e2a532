#!/usr/bin/env bash
# Create or refresh the Python venv with the pinned Ray the integration tests run
# (tests/it/ray.rs): `ray start --head`, `ray start --address`, `ray status`, the same CLI a
# vLLM multi-node deployment uses. Idempotent: a quick no-op when the pinned version is installed.
#   ORCHESTRATE_RAY_VENV  where the venv lives (default ~/.cache/orchestrate/ray-venv)
#   RAY_WHEEL_DIR         optional folder with a downloaded ray wheel (pip --find-links)
set -euo pipefail

RAY_VERSION=2.40.0
VENV="${ORCHESTRATE_RAY_VENV:-$HOME/.cache/orchestrate/ray-venv}"

pinned() {
  [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/ray" ] &&
    "$VENV/bin/python" - "$RAY_VERSION" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
import ray  # noqa: F401  (the package `ray status` imports)
sys.exit(0 if version("ray") == sys.argv[1] else 1)
PY
}

if pinned; then
  echo "ray venv up to date: $VENV (ray $RAY_VERSION)"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" || {
    echo "ray-venv: python3 -m venv failed; install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  }
fi
find_links=()
if [ -n "${RAY_WHEEL_DIR:-}" ] && [ -d "$RAY_WHEEL_DIR" ]; then
  find_links=(--find-links "$RAY_WHEEL_DIR")
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "${find_links[@]}" "ray==$RAY_VERSION"

if ! pinned; then
  echo "ray-venv: installed, but ray $RAY_VERSION is not usable in $VENV" >&2
  exit 1
fi
echo "ray venv ready: $VENV (ray $RAY_VERSION)"
