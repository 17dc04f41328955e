"""fairseq_csan: Convolutional and Context-Aware Self-Attention Networks as a fairseq plugin.

Load it with ``--user-dir fairseq_csan`` (from the repository root; from any folder,
``--user-dir "$(python -m fairseq_csan user-dir)"``) or ``import fairseq_csan``; importing calls
:func:`register`, which registers the models, the named architectures, the self-attention
variants and ``--tokenizer csan_recipe`` in fairseq's registries, and makes the few changes to
fairseq and torch that fairseq's own tools need to be right with them (patches.py lists every
one, and why). The kit's commands (:func:`is_kit_command`), started as ``python -m MODULE``, do
not register on import, so that their options are read and checked, and a refusal or ``--help``
answers, before fairseq is imported; their work calls :func:`register` where it needs the models.
"""

__version__ = "0.1.0"

import os
import sys


def user_dir() -> str:
    """The folder to give fairseq's --user-dir: this package's, wherever it is installed (the
    one place the kit computes it)."""
    return os.path.dirname(os.path.abspath(__file__))


def is_kit_command(module: str) -> bool:
    """Whether ``python -m MODULE`` is one of the kit's commands (``python -m fairseq_csan`` and
    every ``fairseq_csan.recipes.*``): they read and check their options, and refuse, without
    fairseq (about 3 s of a start), and call :func:`register` where their work needs the models."""
    return module == "fairseq_csan" or module.startswith("fairseq_csan.recipes.")


def register() -> None:
    """Register our models, architectures, variants and tokenizer in fairseq's registries and
    make the changes of patches.py (this imports fairseq); once per process. ``record_gates``
    (gate values for the analyses) becomes a name of the package."""
    global record_gates
    from . import patches

    patches.apply()  # first: its warning filters must precede fairseq's first import
    from . import models, tokenizer  # noqa: F401  (registers; the tokenizer's packages load when it is built)
    from .modules.context_gating import record_gates


def _started_as(argv) -> str:
    """The module of ``python [options] -m MODULE ...`` (``sys.orig_argv``), else ''."""
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-m":
            return argv[i + 1] if i + 1 < len(argv) else ""
        if word.startswith("-m"):
            return word[2:]
        if word in ("-W", "-X", "--check-hash-based-pycs"):  # an option with its value apart
            i += 2
            continue
        if word in ("-c", "-") or not word.startswith("-"):  # a command, standard input or a script
            return ""
        i += 1
    return ""


if not is_kit_command(_started_as(getattr(sys, "orig_argv", []))):
    register()
