"""Translate a raw text file with a trained model: ``python -m fairseq_csan.recipes.translate``
under its old name (``--help`` lists the options)."""

from fairseq_csan.recipes.translate import main

if __name__ == "__main__":
    from fairseq_csan.recipes.runner import as_command

    as_command(main)
