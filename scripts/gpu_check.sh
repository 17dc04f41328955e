#!/usr/bin/env bash
# Every check that needs a GPU, in one offline command that may be stopped and started again
# (fairseq_csan/recipes/gpu_check.py; docs/distributed.md):
#   1. tests/test_gpu.py: each architecture's forward and backward in fp16 and bf16 against fp32,
#      incremental decoding against the full pass, a fairseq-train --fp16 smoke run per family,
#      and two-GPU data parallelism when there are two GPUs;
#   2. the benchmark on the GPU in each precision (docs/speed.md): training and beam-search decoding
#      of every architecture against the Transformer, and the dense/banded CSAN crossover;
#   3. the Multi30k reproduction on the GPU, in pieces of one seed each.
# --rehearse runs it all at toy size on the CPU; --budget-minutes N stops between steps; --help.
set -euo pipefail
exec python -m fairseq_csan.recipes.gpu_check "$@"
