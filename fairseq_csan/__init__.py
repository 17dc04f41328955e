"""fairseq_csan: Convolutional and Context-Aware Self-Attention Networks as a fairseq plugin.

Load it with ``--user-dir fairseq_csan`` (from the repository root; from any folder,
``--user-dir "$(python -m fairseq_csan user-dir)"``) or ``import fairseq_csan``; importing
registers the models, the named architectures and the self-attention variants, and applies
our fixes to fairseq (``fairseq_compat``, ``cli_help``); fairseq's known harmless warnings are
filtered (``quiet``). In a process started as one of the kit's commands in ``WITHOUT_FAIRSEQ``
(``python -m fairseq_csan.recipes.prepare``, ...), which need no model in their own process,
fairseq is not imported, and the registration happens when fairseq is imported.
"""

__version__ = "0.1.0"

import logging
import os
import sys


def user_dir() -> str:
    """The folder to give fairseq's --user-dir: this package's, wherever it is installed (the
    one place the kit computes it)."""
    return os.path.dirname(os.path.abspath(__file__))


from .quiet import filter_known_warnings  # noqa: E402

# fairseq's speech-synthesis task logs "Please install tensorboardX" when it is imported (with
# every fairseq task) and tensorboardX is missing; translation never uses it. Silenced where we
# import fairseq first (the kit's commands, the hub interface); the logging extra installs
# tensorboardX, which silences it in fairseq's own commands too.
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
# hydra's and torch's deprecation notices about fairseq's calls (quiet.py lists them)
filter_known_warnings()

# The kit's commands that need no model in their own process (what fairseq work they have, child
# processes do: fairseq-preprocess, the trainer, the evaluation), and `python -m fairseq_csan`
# (its facts for scripts): started as `python -m MODULE`, they do not import fairseq (about 4 s
# of a start); should fairseq be imported in such a process after all, everything below is
# registered the moment it is.
WITHOUT_FAIRSEQ = ("fairseq_csan", *(f"fairseq_csan.recipes.{name}" for name in (
    "prepare", "toy_corpus", "train", "sweep", "multi30k", "gpu_check", "collect_results", "score", "decoding",
    "text", "steps", "corpora", "task", "analysis.ngram_gap", "analysis.length_buckets", "analysis.window_sweep")))


def _register(logging_unset: bool) -> None:
    """Import what registers the models, the architectures, the variants and the tokenizer, and
    apply our fixes to fairseq; fairseq is imported by then. ``record_gates`` (gate values for
    the analyses) and ``help_lists_model_flags`` become names of the package, as they always were."""
    global record_gates, help_lists_model_flags
    from fairseq import options

    if logging_unset and logging.root.handlers:
        # fairseq configured logging itself while it was imported (a speech model calls
        # logging.basicConfig(level=DEBUG)): in a script or the hub one-liner that would print every
        # INFO line of a checkpoint load, the whole configuration included. Warnings only, as Python's
        # own default, unless LOGLEVEL says otherwise (fairseq's commands set up logging before they
        # import the plugin, and keep theirs).
        level = os.environ.get("LOGLEVEL", "WARNING").upper()
        logging.root.setLevel(level if isinstance(logging.getLevelName(level), int) else logging.WARNING)

    from . import fairseq_compat, models  # noqa: F401  (registers everything)
    from . import tokenizer  # noqa: F401  (--tokenizer csan_recipe; its packages load when built)
    from . import model_folder  # noqa: F401  (from_pretrained checks an exported folder's files first)
    from .cli_help import help_lists_model_flags
    from .modules.context_gating import record_gates  # (gate values for analysis)

    # fairseq-train --user-dir fairseq_csan --arch ... --help lists the model's flags (cli_help.py)
    options.parse_args_and_arch = help_lists_model_flags(options.parse_args_and_arch)


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


class _RegisterAfterFairseq:
    """A finder on ``sys.meta_path`` that lets fairseq's own loader run, then registers."""

    def find_spec(self, name, path=None, target=None):
        if name != "fairseq":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            load = spec.loader.exec_module

            def load_then_register(module):
                unset = not logging.root.handlers
                load(module)
                try:
                    _register(unset)
                except ImportError as error:  # fairseq first imported by a module of ours, midway
                    raise ImportError(f"fairseq_csan: {_started_as(sys.orig_argv)} starts without fairseq, and "
                                      f"fairseq was first imported inside one of the plugin's modules ({error}); "
                                      "import fairseq (or fairseq_csan's models) before it") from error

            spec.loader.exec_module = load_then_register
        return spec


if "fairseq" not in sys.modules and _started_as(getattr(sys, "orig_argv", [])) in WITHOUT_FAIRSEQ:
    sys.meta_path.insert(0, _RegisterAfterFairseq())
else:
    _register(not logging.root.handlers)
