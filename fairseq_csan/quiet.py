"""The known harmless warnings of fairseq, hydra and torch, filtered wherever the plugin is loaded.

fairseq 0.12 drives hydra through APIs that hydra 1.1+ deprecates, and calls torch APIs that
newer torch deprecates; every fairseq-train, fairseq-generate and checkpoint load then prints a
page of warnings that say nothing about the user's run. Importing the plugin (``--user-dir
fairseq_csan`` is imported before fairseq composes its configuration; patches.py lists this
with the plugin's other changes) ignores exactly the messages in ``HARMLESS``, each matched
from its start, with its category. Every other warning stays visible.

The filters go at the end of Python's filter list, so a filter of the user's own comes first:
``PYTHONWARNINGS=default`` (or ``python -W default``) shows them all again.
docs/troubleshooting.md lists them.
"""

import warnings

# (message pattern, category); leading blanks allowed: hydra's messages begin with a newline
HARMLESS = [
    # hydra, on fairseq's configuration (every process, and every checkpoint load)
    (r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental", UserWarning),
    (r"The version_base parameter is not specified", UserWarning),
    (r"In '[^']*': Usage of deprecated keyword in package header", UserWarning),
    (r"'[^']*' is validated against ConfigStore schema with the same name", UserWarning),
    (r"The strict flag in the compose API is deprecated", UserWarning),
    # torch, on what fairseq asks of it: pinned memory without a GPU, the old autocast API, and
    # the decoder's float future mask beside its boolean padding mask (fairseq's own attention)
    (r"'pin_memory' argument is set as true but no accelerator is found", UserWarning),
    (r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", FutureWarning),
    (r"Support for mismatched key_padding_mask and attn_mask is deprecated", UserWarning),
]
# (message pattern, category, module): fairseq GitHub main's source, compiled on its first import
# (`label is not ""` in a speech task that translation never uses)
HARMLESS_IN_MODULE = [
    (r'"is not" with a literal', SyntaxWarning, r".*fairseq[\\/]tasks[\\/]multires_hubert_pretraining"),
]


def filter_known_warnings() -> None:
    """Ignore the messages of HARMLESS, after any filter already set (idempotent)."""
    for pattern, category in HARMLESS:
        warnings.filterwarnings("ignore", message=r"\s*" + pattern, category=category, append=True)
    for pattern, category, module in HARMLESS_IN_MODULE:
        warnings.filterwarnings("ignore", message=pattern, category=category, module=module, append=True)
