"""fairseq_csan: Convolutional and Context-Aware Self-Attention Networks as a fairseq plugin.

Load it with ``--user-dir fairseq_csan`` (from the repository root; from any folder,
``--user-dir "$(python -m fairseq_csan user-dir)"``) or ``import fairseq_csan``; importing
registers the models, the named architectures and the self-attention variants, and applies
our fixes to fairseq (``fairseq_compat``, ``cli_help``); fairseq's known harmless warnings are
filtered (``quiet``).
"""

__version__ = "0.1.0"

import logging
import os


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

_logging_unset = not logging.root.handlers
from fairseq import options as _options  # noqa: E402

if _logging_unset and logging.root.handlers:
    # fairseq configured logging itself while it was imported (a speech model calls
    # logging.basicConfig(level=DEBUG)): in a script or the hub one-liner that would print every
    # INFO line of a checkpoint load, the whole configuration included. Warnings only, as Python's
    # own default, unless LOGLEVEL says otherwise (fairseq's commands set up logging before they
    # import the plugin, and keep theirs).
    import os as _os

    _level = _os.environ.get("LOGLEVEL", "WARNING").upper()
    logging.root.setLevel(_level if isinstance(logging.getLevelName(_level), int) else logging.WARNING)

from . import fairseq_compat, models  # noqa: F401,E402  (registers everything)
from . import tokenizer  # noqa: F401,E402  (--tokenizer csan_recipe; its packages load when built)
from . import model_folder  # noqa: F401,E402  (from_pretrained checks an exported folder's files first)
from .cli_help import help_lists_model_flags  # noqa: E402
from .modules.context_gating import record_gates  # noqa: F401,E402  (gate values for analysis)

# fairseq-train --user-dir fairseq_csan --arch ... --help lists the model's flags (cli_help.py)
_options.parse_args_and_arch = help_lists_model_flags(_options.parse_args_and_arch)
