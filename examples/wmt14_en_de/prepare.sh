#!/usr/bin/env bash
# WMT14 English-German: Europarl v7 + Common Crawl + News Commentary v9 (about 4.5M pairs),
# newstest2013 (dev) and the full newstest2014 (test); Moses tokenisation of both sides,
# 32K joint BPE merges and one joined dictionary (shared embeddings in training).
# Every corpus is public and downloads from statmt.org unless --raw-dir (or $WMT14_RAW)
# already holds it. See examples/wmt14_en_de/README.md; --help lists the options.
#
# The kit (fairseq_csan/recipes/prepare.py) runs six steps, each skipped when what it made is
# current, and prints each command as it runs; for --out data/wmt14_en_de they are:
#   1. gather the corpora (fairseq_csan/recipes/corpora.py) -> raw/{train,valid,test}.{en,de}
#   2. tokenise (fairseq_csan/recipes/text.py: Moses normalisation and tokenisation, no
#      escaping) -> tok/
#   3. clean the training pairs: 1-250 tokens, length ratio <= 1.5 -> tok/train.clean.{en,de}
#   4. cat tok/train.clean.en tok/train.clean.de | subword-nmt learn-bpe -s 32000 > bpe/codes
#   5. subword-nmt apply-bpe -c bpe/codes --num-workers N --input tok/SPLIT.LANG --output bpe/SPLIT.LANG
#      (SPLIT: train.clean, valid, test)
#   6. fairseq-preprocess --source-lang en --target-lang de --trainpref bpe/train \
#        --validpref bpe/valid --testpref bpe/test --destdir data-bin --joined-dictionary --workers N
# (N is the --workers option.)
set -euo pipefail
# the task's settings, kept in its preset (fairseq_csan/recipes/corpora.py): one BPE model and one dictionary for English and German
exec python -m fairseq_csan.recipes.prepare wmt14_en_de "$@"
