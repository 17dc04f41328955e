#!/usr/bin/env bash
# Multi30k English-German (Elliott et al. 2016, task 1): 29,000 training pairs of image
# captions, val (1,014) as the dev set and test_2016_flickr (1,000) as the test set; Moses
# tokenisation, 8,000 joint BPE merges and one joined dictionary. The raw files are read from
# data/multi30k_raw (where the README unpacks them), or from --raw-dir (or $MULTI30K).
# See examples/multi30k/README.md; --help lists the options.
set -euo pipefail
# the task's settings, kept in its preset (fairseq_csan/recipes/corpora.py): one BPE model and one dictionary for English and German;
# 8000 merges for 29K pairs
# (the steps, and the commands they run, are printed as they run; --help lists the options)
exec python -m fairseq_csan.recipes.prepare multi30k_en_de "$@"
