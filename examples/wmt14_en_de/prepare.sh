#!/usr/bin/env bash
# WMT14 English-German: Europarl v7 + Common Crawl + News Commentary v9 (about 4.5M pairs),
# newstest2013 (dev) and the full newstest2014 (test); Moses tokenisation of both sides,
# 32K joint BPE merges and one joined dictionary (shared embeddings in training).
# Every corpus is public and downloads from statmt.org unless --raw-dir (or $WMT14_RAW)
# already holds it. See examples/wmt14_en_de/README.md; --help lists the options.
set -euo pipefail
TASK=wmt14_en_de SRC=en TGT=de RAW_ENV=WMT14_RAW
JOINT_BPE=1    # one BPE model and one dictionary for English and German
CLEAN_RATIO=1.5
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/prepare_lib.sh"
prepare_main "$@"
