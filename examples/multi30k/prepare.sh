#!/usr/bin/env bash
# Multi30k English-German (Elliott et al. 2016, task 1): 29,000 training pairs of image
# captions, val (1,014) as the dev set and test_2016_flickr (1,000) as the test set; Moses
# tokenisation, 8,000 joint BPE merges and one joined dictionary. The raw files are read from
# data/multi30k_raw (where the README unpacks them), or from --raw-dir (or $MULTI30K).
# See examples/multi30k/README.md; --help lists the options.
set -euo pipefail
TASK=multi30k_en_de SRC=en TGT=de RAW_ENV=MULTI30K
JOINT_BPE=1    # one BPE model and one dictionary for English and German
CLEAN_RATIO=1.5
DEFAULT_RAW=data/multi30k_raw
DEFAULT_MERGES=8000 DEFAULT_MERGES_WHY=", for 29K training pairs"
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/prepare_lib.sh"
prepare_main "$@"
