#!/usr/bin/env bash
# Install fairseq_csan and everything it needs into the active Python environment.
# usage: bash scripts/install.sh            (run inside a fresh virtual environment)
#   TORCH_SPEC   torch requirement to install first (default: torch==2.13.0, the CPU build
#                this machine keeps on disk; on a GPU machine give a CUDA build's spec)
#   FAIRSEQ_SPEC fairseq distribution (default: fairseq-fixed==0.12.3.1, see the README)
set -euo pipefail

TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
FAIRSEQ_SPEC=${FAIRSEQ_SPEC:-fairseq-fixed==0.12.3.1}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python}

step() { echo "[install] $*"; }

if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CONDA_PREFIX:-}" ]; then
  echo "[install] warning: no virtual environment is active; installing into $($PY -c 'import sys; print(sys.prefix)')" >&2
fi

step "1/4 $TORCH_SPEC, numpy and cython (fairseq builds against them)"
$PY -m pip install "$TORCH_SPEC" numpy cython

if $PY -c "import fairseq" 2>/dev/null; then
  step "2/4 fairseq already importable ($($PY -c 'import fairseq; print(fairseq.__version__)')); skipped"
else
  step "2/4 $FAIRSEQ_SPEC from source, against the torch above (about 4.5 minutes on 2 cores)"
  # --no-build-isolation: build against the installed torch instead of downloading another;
  # --no-deps: skip torchaudio, which fails to load beside torch 2.13 (its other
  # requirements come with step 3, from setup.py).
  $PY -m pip install --no-build-isolation --no-deps "$FAIRSEQ_SPEC"
fi

step "3/4 fairseq_csan (editable) with its requirements and pytest"
$PY -m pip install -e "$ROOT[test]"

step "4/4 checking the installation"
$PY -c "import fairseq, torch, fairseq_csan; print(f'[install] ok: torch {torch.__version__}, fairseq {fairseq.__version__}, fairseq_csan {fairseq_csan.__version__}')"
