#!/usr/bin/env bash
# Installs the peer benchmark tool (GuideLLM) into its own venv, outside the project's venv and
# outside CI: bench/bench_smoke.py compares our numbers with it when it is there. It pulls in
# torch and transformers (a few GB), which the project itself never needs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=$ROOT/.cache/peer-venv
GUIDELLM_VERSION=${GUIDELLM_VERSION:-0.8.1}

command -v python3 >/dev/null || { echo "install_peer.sh: python3 is required" >&2; exit 1; }
[[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet "guidellm==$GUIDELLM_VERSION"
# No hub access: build the tokenizer GuideLLM needs from files its own dependencies ship.
HF_HUB_OFFLINE=1 "$VENV/bin/python" "$ROOT/bench/peer_tokenizer.py" "$ROOT/.cache/peer-tokenizer"
"$VENV/bin/guidellm" --version
