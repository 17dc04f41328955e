#!/usr/bin/env bash
# WMT17 Chinese-English: News Commentary v12 + UN Parallel Corpus v1.0 + CWMT (about 20.6M
# pairs), newsdev2017 (dev) and newstest2017 (test); jieba segmentation of the Chinese,
# Moses tokenisation of the English, 32K BPE merges per language, two dictionaries.
# News Commentary and the dev/test sets download from statmt.org; the UN and CWMT corpora
# must be placed in --raw-dir (or $WMT17_RAW) by hand. See examples/wmt17_zh_en/README.md.
#
# The kit (fairseq_csan/recipes/prepare.py) runs the six steps of examples/wmt14_en_de/prepare.sh
# (jieba for zh; clean at ratio 9), with one BPE model and one dictionary per language:
#   4. cat tok/train.clean.LANG | subword-nmt learn-bpe -s 32000 > bpe/codes.LANG   (LANG: zh, en)
#   6. fairseq-preprocess --source-lang zh --target-lang en --trainpref bpe/train \
#        --validpref bpe/valid --testpref bpe/test --destdir data-bin --workers N
set -euo pipefail
# the task's settings, kept in its preset (fairseq_csan/recipes/corpora.py): different scripts: one BPE model and one dictionary per language;
# clean-corpus-n.perl's default ratio 9: jieba words and English words differ in count
exec python -m fairseq_csan.recipes.prepare wmt17_zh_en "$@"
