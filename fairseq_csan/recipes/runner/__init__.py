"""The runner: what every command of the kit goes through to refuse, write, own a file, keep a
record or start a process, each rule in one place.

Every command (prepare, train, evaluate, export, translate, average, sweep, the Multi30k
reproduction, gpu_check, the analyses, ...) parses its options, builds a plan, and carries it out
through this package:

- ``failure.py``: the one failure path (:class:`Refusal`, :class:`Failed`; :func:`as_command`
  turns them into one line and the exit status: 0 done, 2 refused before anything was written,
  1 a step or child failed, 130 interrupted) and the one message printer (:func:`say`);
- ``files.py``: overlaps of outputs with inputs (:func:`refuse_overlaps`), one writer per output
  (:class:`WriterLock`), whole files and folders (:func:`~.files.atomic`, :func:`replace_folder`,
  :func:`save_torch`) under temporaries of this process's own;
- ``records.py``: every JSON the kit keeps (:class:`Kind`), what the kit wrote in each folder
  (:func:`write_file`, :func:`check_owned`), what a model is made from (:func:`made_from`,
  :func:`check_made_from`), and the step stamps that make a rerun redo exactly what changed
  (:class:`Step`);
- ``children.py``: child processes (:func:`run_child`) and progress lines (:class:`Progress`).
"""

from .children import Progress, run_child, shell_words, stop_children  # noqa: F401
from .failure import Failed, Refusal, as_command, say  # noqa: F401
from .files import WriterLock, atomic, check_writable, listing, refuse_overlaps, replace_folder, save_torch  # noqa: F401
from .records import (EVALUATION, EXPORT, RESULTS, RUN, Damaged, Kind, Step, changed_since, check_made_from,  # noqa: F401
                      check_owned, forget_written, made_from, stamped_change, theirs, write_file)
