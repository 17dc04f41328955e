#!/usr/bin/env bash
# Train any architecture on a prepared task with the papers' setup: Transformer base or big
# hyper-parameters (Vaswani et al. 2017) on 8 GPUs x 4096 tokens. --help lists the options;
# docs/recipes.md says where every hyper-parameter comes from.
#
# The kit (fairseq_csan/recipes/train.py) checks the options, reads the prepared task and the
# hyper-parameters (fairseq_csan/recipes/hparams.json), and runs fairseq-train; --dry-run
# prints the command. For a prepared En-De task, Transformer base on 8 GPUs, it is:
#
#   fairseq-train data/wmt14_en_de/data-bin --user-dir fairseq_csan --arch transformer_csan2d \
#     --source-lang en --target-lang de --share-all-embeddings \
#     --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
#     --lr-scheduler inverse_sqrt --lr 0.000699 --warmup-updates 4000 --warmup-init-lr 1e-07 \
#     --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
#     --dropout 0.1 --weight-decay 0.0 --clip-norm 0.0 \
#     --max-tokens 4096 --max-update 100000 --distributed-world-size 8 --update-freq 1 --fp16 \
#     --save-dir checkpoints/ende_csan2d --save-interval-updates 1000 --keep-interval-updates 20 \
#     --no-epoch-checkpoints --log-format simple --log-interval 100 --seed 1
#
# (big: --lr 0.000494 --dropout 0.3 --max-update 300000; N GPUs: --update-freq 8/N.) Before it
# runs, the save folder is locked (SAVE/.lock: one training per folder), its run.json must
# name the same run, and a checkpoint_last.pt cut short by a kill is replaced by the newest
# intact checkpoint. The log goes to SAVE/train.log; killing this script ends the trainer.
set -euo pipefail
exec python -m fairseq_csan.recipes.train "$@"
