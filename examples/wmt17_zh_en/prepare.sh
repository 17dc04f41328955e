#!/usr/bin/env bash
# WMT17 Chinese-English: News Commentary v12 + UN Parallel Corpus v1.0 + CWMT (about 20.6M
# pairs), newsdev2017 (dev) and newstest2017 (test); jieba segmentation of the Chinese,
# Moses tokenisation of the English, 32K BPE merges per language, two dictionaries.
# News Commentary and the dev/test sets download from statmt.org; the UN and CWMT corpora
# must be placed in --raw-dir (or $WMT17_RAW) by hand. See examples/wmt17_zh_en/README.md.
set -euo pipefail
TASK=wmt17_zh_en SRC=zh TGT=en RAW_ENV=WMT17_RAW
JOINT_BPE=0    # different scripts: one BPE model and one dictionary per language
CLEAN_RATIO=9  # clean-corpus-n.perl's default: jieba words and English words differ in count
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/prepare_lib.sh"
prepare_main "$@"
