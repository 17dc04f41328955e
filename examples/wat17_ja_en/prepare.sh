#!/usr/bin/env bash
# WAT17 Japanese-English (ASPEC-JE): train-1 + train-2 (2M pairs), dev and test, from the
# user's own licensed ASPEC-JE folder given as --raw-dir (or $ASPEC_JE); MeCab segmentation
# of the Japanese (fugashi + UniDic-lite), Moses tokenisation of the English, 32K BPE merges
# per language, two dictionaries. See examples/wat17_ja_en/README.md.
#
# The kit (fairseq_csan/recipes/prepare.py) runs the six steps of examples/wmt14_en_de/prepare.sh
# (MeCab for ja; clean at ratio 9), with one BPE model and one dictionary per language:
#   4. cat tok/train.clean.LANG | subword-nmt learn-bpe -s 32000 > bpe/codes.LANG   (LANG: ja, en)
#   6. fairseq-preprocess --source-lang ja --target-lang en --trainpref bpe/train \
#        --validpref bpe/valid --testpref bpe/test --destdir data-bin --workers N
set -euo pipefail
# the task's settings, kept in its preset (fairseq_csan/recipes/corpora.py): different scripts: one BPE model and one dictionary per language;
# clean-corpus-n.perl's default ratio 9: MeCab words and English words differ in count
exec python -m fairseq_csan.recipes.prepare wat17_ja_en "$@"
