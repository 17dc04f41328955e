#!/usr/bin/env bash
# Install fairseq_csan and everything it needs into the active Python environment.
# usage: bash scripts/install.sh [--dry-run]     (run inside a fresh virtual environment)
#   --dry-run    print the pip commands and install nothing
#   TORCH_SPEC   torch requirement to install first (default: torch==2.13.0, pip's default
#                build of it from pip's configured index)
#   TORCH_INDEX  a package index to take torch from, e.g. PyTorch's CUDA wheel index on a GPU
#                machine: TORCH_INDEX=https://download.pytorch.org/whl/cu128 bash scripts/install.sh
#                (default: none, pip's own index)
#   FAIRSEQ_SPEC fairseq distribution (default: fairseq-fixed==0.12.3.1, see docs/troubleshooting.md)
#   EXTRAS       this package's extras (default: test,logging; the test extra brings the
#                recipes' tokenisers and the analysis plots, logging brings TensorBoard)
set -euo pipefail

TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX=${TORCH_INDEX:-}
FAIRSEQ_SPEC=${FAIRSEQ_SPEC:-fairseq-fixed==0.12.3.1}
EXTRAS=${EXTRAS:-test,logging}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python}
dry_run=0
case "${1:-}" in
  "") ;;
  --dry-run) dry_run=1 ;;
  -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "[install] error: unknown argument '$1' (allowed: --dry-run, --help)" >&2; exit 2 ;;
esac

step() { echo "[install] $*"; }
# run a command, or with --dry-run print it, quoted so that it can be pasted
run() { if [ "$dry_run" = 1 ]; then local q; q=$(printf '%q ' "$@"); echo "${q% }"; else "$@"; fi; }

if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CONDA_PREFIX:-}" ]; then
  echo "[install] warning: no virtual environment is active; installing into $($PY -c 'import sys; print(sys.prefix)')" >&2
fi

step "1/4 $TORCH_SPEC${TORCH_INDEX:+ from $TORCH_INDEX}, then numpy and cython (fairseq builds against them)"
if [ -n "$TORCH_INDEX" ]; then
  # torch alone from its own index; everything else from pip's default index
  run $PY -m pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"
else
  run $PY -m pip install "$TORCH_SPEC"
fi
run $PY -m pip install numpy cython

if [ "$dry_run" = 0 ] && $PY -c "import fairseq" 2>/dev/null; then
  step "2/4 fairseq already importable ($($PY -c 'import fairseq; print(fairseq.__version__)')); skipped"
else
  step "2/4 $FAIRSEQ_SPEC from source, against the torch above (about 4.5 minutes on 2 cores)"
  # --no-build-isolation: build against the installed torch instead of downloading another;
  # --no-deps: skip torchaudio, which fails to load beside torch 2.13 (its other
  # requirements come with step 3, from setup.py).
  run $PY -m pip install --no-build-isolation --no-deps "$FAIRSEQ_SPEC"
fi

step "3/4 fairseq_csan (editable) with its requirements and the extras $EXTRAS"
run $PY -m pip install -e "$ROOT[$EXTRAS]"

step "4/4 checking the installation"
run $PY -c "import fairseq, torch, fairseq_csan; print(f'[install] ok: torch {torch.__version__} (CUDA: {torch.cuda.is_available()}), fairseq {fairseq.__version__}, fairseq_csan {fairseq_csan.__version__}')"
