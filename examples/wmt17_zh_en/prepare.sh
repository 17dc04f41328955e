#!/usr/bin/env bash
# WMT17 Chinese-English: News Commentary v12 + UN Parallel Corpus v1.0 + CWMT (about 20.6M
# pairs), newsdev2017 (dev) and newstest2017 (test); jieba segmentation of the Chinese,
# Moses tokenisation of the English, 32K BPE merges per language, two dictionaries.
# News Commentary and the dev/test sets download from statmt.org; the UN and CWMT corpora
# must be placed in --raw-dir (or $WMT17_RAW) by hand. See examples/wmt17_zh_en/README.md.
set -euo pipefail
# the task's settings: different scripts: one BPE model and one dictionary per language;
# clean-corpus-n.perl's default ratio 9: jieba words and English words differ in count
# (the steps, and the commands they run, are printed as they run; --help lists the options)
exec python -m fairseq_csan.recipes.prepare wmt17_zh_en --joint-bpe 0 --clean-ratio 9 "$@"
