#!/usr/bin/env bash
# WMT14 English-German: Europarl v7 + Common Crawl + News Commentary v9 (about 4.5M pairs),
# newstest2013 (dev) and the full newstest2014 (test); Moses tokenisation of both sides,
# 32K joint BPE merges and one joined dictionary (shared embeddings in training).
# Every corpus is public and downloads from statmt.org unless --raw-dir (or $WMT14_RAW)
# already holds it. See examples/wmt14_en_de/README.md; --help lists the options.
set -euo pipefail
# the task's settings: one BPE model and one dictionary for English and German
# (the steps, and the commands they run, are printed as they run; --help lists the options)
exec python -m fairseq_csan.recipes.prepare wmt14_en_de --joint-bpe 1 --clean-ratio 1.5 "$@"
