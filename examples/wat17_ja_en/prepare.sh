#!/usr/bin/env bash
# WAT17 Japanese-English (ASPEC-JE): train-1 + train-2 (2M pairs), dev and test, from the
# user's own licensed ASPEC-JE folder given as --raw-dir (or $ASPEC_JE); MeCab segmentation
# of the Japanese (fugashi + UniDic-lite), Moses tokenisation of the English, 32K BPE merges
# per language, two dictionaries. See examples/wat17_ja_en/README.md.
set -euo pipefail
TASK=wat17_ja_en SRC=ja TGT=en RAW_ENV=ASPEC_JE
JOINT_BPE=0    # different scripts: one BPE model and one dictionary per language
CLEAN_RATIO=9  # clean-corpus-n.perl's default: MeCab words and English words differ in count
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/prepare_lib.sh"
prepare_main "$@"
