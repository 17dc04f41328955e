#!/usr/bin/env bash
# CI's second job: the oldest environment the README promises, as a user has it (Python 3.8,
# torch 1.13.1 with torchaudio 0.13.1, fairseq 0.12.2 from PyPI), then scripts/install.sh as the
# README says. It checks that the user's torch, fairseq, hydra-core and omegaconf are kept, that
# pip check lists nothing new, and runs the fast model tests there with the README's test command
# (docs/environments.md, "What CI runs").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
venv=.venv-py38
py=""  # a python3.8 that runs (pyenv's shim on PATH may not): PATH's, else pyenv's
for candidate in "$(command -v python3.8 || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.8.*/bin/python3.8; do
  if [ -x "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 8)' 2>/dev/null; then
    py=$candidate; break
  fi
done
[ -n "$py" ] || { echo "[ci-py3.8] error: no working python3.8 on PATH or in pyenv's versions" >&2; exit 1; }
echo "[ci-py3.8] the user's environment: $("$py" --version), torch 1.13.1, torchaudio 0.13.1, fairseq 0.12.2"
rm -rf "$venv"
"$py" -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install -q torch==1.13.1 torchaudio==0.13.1 fairseq==0.12.2 2>&1 | grep -v "^WARNING: Location" || true
python -c 'import torch, fairseq' || { echo "[ci-py3.8] error: the user's environment does not import" >&2; exit 1; }
kept() { python -m pip list --format=freeze | grep -i -E "^(torch|torchaudio|fairseq|hydra-core|omegaconf|numpy)==" | sort; }
problems() { python -m pip check 2>&1 | grep -v -i "^no broken requirements" | sort || true; }
before=$(kept) problems_before=$(problems)
echo "[ci-py3.8] the user's versions: $(echo $before)"

echo "[ci-py3.8] bash scripts/install.sh (README: Install, into an environment you already have), after $(( $(date +%s) - start ))s"
bash scripts/install.sh
after=$(kept)
[ "$before" = "$after" ] || { echo "[ci-py3.8] error: install.sh changed the user's versions: $(echo $before) became $(echo $after)" >&2; exit 1; }
new=$(comm -13 <(echo "$problems_before") <(problems) | grep . || true)
[ -z "$new" ] || { echo "[ci-py3.8] error: pip check lists new problems: $new" >&2; exit 1; }
echo "[ci-py3.8] kept: $(echo $after); pip check: nothing new"

echo "[ci-py3.8] the fast model tests (README: Tests), after $(( $(date +%s) - start ))s"
python -m pytest tests/test_models.py tests/test_attention_core.py tests/test_context_gating.py \
  tests/test_checkpoint_reload.py -m "not slow" -n 2 --dist loadfile --no-loadscope-reorder -p no:cacheprovider -q
echo "[ci-py3.8] finished in $(( $(date +%s) - start ))s"
