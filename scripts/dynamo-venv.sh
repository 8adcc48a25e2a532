#!/usr/bin/env bash
# Create or refresh the Python venv with NVIDIA Dynamo, pinned, for the integration tests
# (tests/it/dynamo.rs): `python -m dynamo.frontend` (the OpenAI HTTP frontend and router) and
# `python -m dynamo.mocker` (Dynamo's own mock engine worker, no GPU). Idempotent: a quick
# no-op when the pinned version is installed.
#   ORCHESTRATE_DYNAMO_VENV  where the venv lives (default ~/.cache/orchestrate/dynamo-venv)
#
# ai-dynamo's own dependency `aisimulate` is only on pypi.nvidia.com and its certifi pin is
# newer than some PyPI mirrors, so ai-dynamo is installed with --no-deps and its other
# dependencies (what the frontend and the mocker import) from the pinned list below.
set -euo pipefail

DYNAMO_VERSION=1.6.1
VENV="${ORCHESTRATE_DYNAMO_VENV:-$HOME/.cache/orchestrate/dynamo-venv}"

pinned() {
  [ -x "$VENV/bin/python" ] &&
    "$VENV/bin/python" - "$DYNAMO_VERSION" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
ok = version("ai-dynamo") == sys.argv[1] and version("ai-dynamo-runtime") == sys.argv[1]
import dynamo.frontend.main, dynamo.mocker.main  # noqa: E401,F401  (what the tests run)
sys.exit(0 if ok else 1)
PY
}

if pinned; then
  echo "dynamo venv up to date: $VENV (ai-dynamo $DYNAMO_VERSION)"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" || {
    echo "dynamo-venv: python3 -m venv failed; install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  }
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# What ai-dynamo 1.6.1 needs besides aisimulate, at the versions this was tested with.
cat >"$work/constraints.txt" <<'EOF'
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
attrs==26.1.0
certifi==2026.10.18
cffi==2.1.1
charset-normalizer==3.5.2
click==8.5.1
cryptography==50.0.2
durationpy==0.11
filelock==4.2.12
frozenlist==1.8.0
fsspec==2026.9.0
google-auth==2.62.2
h11==0.16.0
hf-xet==1.8.0
httpcore2==2.16.2
httpx2==2.16.2
huggingface_hub==2.4.0
idna==3.20
kubernetes==32.0.1
markdown-it-py==4.3.0
mdurl==0.1.2
msgspec==0.22.0
multidict==7.2.1
numpy==2.4.6
oauthlib==4.0.1
packaging==26.3
prometheus_client==0.26.0
propcache==0.5.4
pyasn1==0.6.5
pyasn1_modules==0.4.2
pycparser==3.12
pydantic==2.13.5
pydantic_core==2.46.5
Pygments==2.21.0
python-dateutil==4.0.0
PyYAML==6.0.3
pyzmq==27.3.0
redis==8.1.0
regex==2026.11.15
requests==2.34.2
requests-oauthlib==2.0.0
rich==15.0.0
safetensors==0.8.0
shellingham==1.5.4
six==1.17.0
tokenizers==0.23.3
tqdm==4.70.1
transformers==5.23.0
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
uvloop==0.23.0
websocket-client==1.9.2
yarl==1.25.1
zstandard==0.25.0
EOF
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$work/constraints.txt")
"${pip[@]}" "ai-dynamo-runtime==$DYNAMO_VERSION" packaging "aiohttp<4.0,>=3.14.3" certifi \
  "kubernetes<33.0.0,>=32.0.1" "msgspec>=0.19.0" "prometheus-client<1.0,>=0.23.1" \
  "pyzmq>=26.0.0" "redis<9.0.0,>=6.2.0" tqdm "transformers>=4.56.0" \
  "typing-extensions>=4.10.0" "zstandard<1.0,>=0.23.0"
# Last, and without its dependencies (see the top of this file).
"${pip[@]}" --no-deps "ai-dynamo==$DYNAMO_VERSION"

if ! pinned; then
  echo "dynamo-venv: installed, but dynamo.frontend / dynamo.mocker $DYNAMO_VERSION do not import in $VENV" >&2
  exit 1
fi
echo "dynamo venv ready: $VENV (ai-dynamo $DYNAMO_VERSION)"
