"""Translate a raw text file with a trained model: ``python -m fairseq_csan.recipes.translate``
under its old name (``--help`` lists the options). It starts that command in this process's
place, so that its options are read and checked before fairseq is imported."""

import os
import sys

if __name__ == "__main__":
    os.execv(sys.executable, [sys.executable, "-m", "fairseq_csan.recipes.translate", *sys.argv[1:]])
