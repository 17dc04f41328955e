#!/usr/bin/env bash
# WAT17 Japanese-English (ASPEC-JE): train-1 + train-2 (2M pairs), dev and test, from the
# user's own licensed ASPEC-JE folder given as --raw-dir (or $ASPEC_JE); MeCab segmentation
# of the Japanese (fugashi + UniDic-lite), Moses tokenisation of the English, 32K BPE merges
# per language, two dictionaries. See examples/wat17_ja_en/README.md.
set -euo pipefail
# the task's settings: different scripts: one BPE model and one dictionary per language;
# clean-corpus-n.perl's default ratio 9: MeCab words and English words differ in count
# (the steps, and the commands they run, are printed as they run; --help lists the options)
exec python -m fairseq_csan.recipes.prepare wat17_ja_en --joint-bpe 0 --clean-ratio 9 "$@"
