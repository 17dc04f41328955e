#!/usr/bin/env bash
# Quick start: the task recipes' own pipeline at a small size, offline.
#   1 corpus    a toy En-De corpus (fairseq_csan.recipes.toy_corpus), or your own from CORPUS
#   2 prepare   each language's tokenisation, joint BPE, fairseq-preprocess
#               (fairseq_csan.recipes.prepare, as examples/*/prepare.sh)
#   3 train     scripts/train.sh: a small ARCH model (fairseq-train --user-dir fairseq_csan)
#   4 evaluate  scripts/evaluate.sh: the last 5 checkpoints averaged, beam 4, BLEU and chrF
#   5 export    a fairseq model folder (fairseq_csan.recipes.export), and one sentence
#               translated with TransformerModel.from_pretrained(folder)
# Each step's command is printed ("+ ...") as it runs; a rerun skips what is done and redoes what
# was made from changed inputs. How long it takes, and what it prints: docs/recipes.md (The quick
# start in detail).
#
# usage: bash examples/quickstart.sh
#        CORPUS=data/multi30k_raw bash examples/quickstart.sh   (Multi30k unpacked as the README says)
#        CORPUS=DIR SRC=fr TGT=en bash examples/quickstart.sh     (any language pair, either direction)
#        bash examples/quickstart.sh --corpus DIR --src fr --tgt en --arch transformer --dry-run
#        bash examples/quickstart.sh --help                       (every setting and its default)
#
# Settings: the environment variables CORPUS, SRC, TGT, WORK, ARCH, MODEL, DEVICE, MAX_UPDATE,
# DIM, MAX_TOKENS, BPE_MERGES, MODEL_FLAGS, TOY_ARGS, FORCE=1 and DRY_RUN=1, or the options of
# the same names (--corpus DIR, ..., --force, --dry-run), which win over them.
# The quick start is fairseq_csan/recipes/quickstart.py (python -m fairseq_csan.recipes.quickstart).
set -euo pipefail
exec python -m fairseq_csan.recipes.quickstart "$@"
