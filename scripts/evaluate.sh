#!/usr/bin/env bash
# Evaluate a trained model as the papers do: average the last checkpoints, decode the test
# set with beam 4 and length penalty 0.6 (fairseq-generate; the command is printed as it
# runs), and report tokenised BLEU (and compound-split BLEU for En-De), sacreBLEU and chrF
# with their signatures, decoding speed, and, given the baseline's evaluation, paired
# bootstrap significance of tokenised BLEU and of chrF. A rerun keeps the average and the
# decoding while the checkpoints and the test set are unchanged, and redoes them, saying
# why, when they changed. --help lists the options; see docs/recipes.md.
#
#   scripts/evaluate.sh --data data/wmt14_en_de --checkpoints checkpoints/csan2d --out results/csan2d
set -euo pipefail
exec python -m fairseq_csan.recipes.evaluate "$@"
