#!/usr/bin/env bash
# Start from a trained Transformer (docs/recipes.md, Start from a trained Transformer), measured on
# Multi30k En-De: the Transformer's model folder trained on for N updates, and the same folder
# converted to 1D-CSAN, 2D-CSAN and context-aware and fine-tuned the same N updates, each with
# every seed; all scored on test_2016_flickr, before fine-tuning too, with the paired bootstrap of
# each fine-tuned model against the Transformer of its seed, and collected into one table.
#
# usage: bash examples/multi30k/convert.sh --model FOLDER [--raw-dir DIR] [--work DIR]
#            [--updates N] [--seeds "1 2 3"] [--archs "transformer_csan1d ..."] [--cpu] [--dry-run]
# (--help says what each option does; fairseq_csan/recipes/from_transformer.py is the plan.)
# The commands, each printed ("+ ...") before it runs, with W=--work, M=--model, R=--raw-dir
# (scripts/NAME.sh is python -m fairseq_csan.recipes.NAME):
#
#   python -m fairseq_csan.recipes.prepare files --src en --tgt de --train R/train --valid R/val \
#     --test R/test_2016_flickr --out W/task --like M
#   python -m fairseq_csan.recipes.convert --model M --arch ARCH --out W/models/ARCH     # each of --archs
#   bash scripts/evaluate.sh --data W/task --model FOLDER --out W/eval/before/ARCH        # M and each one
#   bash scripts/train.sh --data W/task --arch ARCH --finetune-from FOLDER \
#     --save-dir W/checkpoints/ARCH.seedS --max-update N --seed S --cpu-tiny              # every seed S
#   bash scripts/evaluate.sh --data W/task --checkpoints W/checkpoints/ARCH.seedS \
#     --out W/eval/ARCH.seedS --baseline W/eval/transformer.seedS --cpu
#   python -m fairseq_csan.recipes.collect_results W/eval/... --metric sacrebleu --output W/sacrebleu.md
#
# Without --cpu, train.sh runs on the GPUs (the papers' batch), saving every N/8 updates. Each
# command keeps what it finds done, so a rerun goes on where one stopped.
set -euo pipefail
exec python -m fairseq_csan.recipes.from_transformer "$@"
