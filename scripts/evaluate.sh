#!/usr/bin/env bash
# Evaluate a trained model as the papers do: average the last checkpoints, decode the test
# set with beam 4 and length penalty 0.6, and report tokenised BLEU (and compound-split BLEU
# for En-De), sacreBLEU and chrF with their signatures, decoding speed, and, given the
# baseline's evaluation, paired bootstrap significance of tokenised BLEU and of chrF. --help
# lists the options; see docs/recipes.md.
#
# The kit (fairseq_csan/recipes/evaluate.py) checks the inputs first (the prepared task, the
# reference, test lines the model cannot take), then runs three steps. For
#   scripts/evaluate.sh --data data/wmt14_en_de --checkpoints checkpoints/ende_csan2d --out results/ende_csan2d
# they are:
#   1. the last 5 interval checkpoints (20 for big models) averaged -> results/ende_csan2d/averaged.pt
#      (python -m fairseq_csan.recipes.average_checkpoints does the same on its own)
#   2. fairseq-generate data/wmt14_en_de/data-bin --user-dir fairseq_csan \
#        --path results/ende_csan2d/averaged.pt --source-lang en --target-lang de --gen-subset test \
#        --beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50 --remove-bpe --batch-size 128 --num-workers 0 \
#        > results/ende_csan2d/generate.txt
#      (run by fairseq-generate's own entry point inside the kit's process, which has fairseq loaded)
#   3. scoring (python -m fairseq_csan.recipes.score): hyp.tok, hyp.detok, results.json, results.md
# (decoding settings: fairseq_csan/recipes/decoding.py.) Each command is printed as it runs. A
# rerun keeps the average and the decoding while the checkpoints and the test set are
# unchanged, and redoes them, saying why, when they changed.
set -euo pipefail
exec python -m fairseq_csan.recipes.evaluate "$@"
