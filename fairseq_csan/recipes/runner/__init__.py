"""The runner: what every command of the kit (prepare, train, evaluate, export, translate, the
Multi30k reproduction, gpu_check, the analyses, ...) goes through to refuse, write, own a file,
keep a record or start a process, each rule in one place (docs/implementation.md lists which
module holds which rule).
"""

from .children import Progress, run_child, shell_words, stop_children  # noqa: F401
from .failure import Failed, Refusal, as_command, say  # noqa: F401
from .files import WriterLock, atomic, listing, refuse_overlaps, replace_folder, save_torch  # noqa: F401
from .records import (EVALUATION, EXPORT, RESULTS, RUN, Damaged, Kind, Step, changed_since, check_made_from,  # noqa: F401
                      check_owned, forget_written, made_from, stamped_change, theirs, write_file)
