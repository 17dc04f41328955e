#!/usr/bin/env bash
# Train and evaluate the window/area sweep of the CSAN paper's Figure 2: 1D-CSAN for each
# window size M, and 2D-CSAN (window fixed, 11 by default) for each number of heads N, each
# scored on the dev set. Plot it with fairseq_csan/recipes/analysis/window_sweep.py --sweep OUT.
# The sweep is fairseq_csan/recipes/sweep.py; --help lists the options.
set -euo pipefail
exec python -m fairseq_csan.recipes.sweep "$@"
