"""The runner: what every command of the kit (prepare, train, evaluate, export, translate, the
Multi30k reproduction, gpu_check, the analyses, ...) goes through to refuse, write, own a file,
keep a record or start a process, each rule in one place:

- ``failure.py``: the one failure path (:class:`Refusal`, :class:`Failed`, :func:`as_command`: one
  line and the exit status) and the one message printer (:func:`say`);
- ``files.py``: overlaps of outputs with inputs (:func:`refuse_overlaps`), one writer per output
  (:class:`WriterLock`), whole files and folders under temporaries of this process's own;
- ``records.py``: every JSON the kit keeps (:class:`Kind`), what the kit wrote in each folder
  (:func:`write_file`, :func:`check_owned`), what a model is made from (:func:`check_made_from`),
  and the step stamps that make a rerun redo exactly what changed (:class:`Step`);
- ``children.py``: child processes (:func:`run_child`) and progress lines (:class:`Progress`).
"""

from .children import Progress, run_child, shell_words, stop_children  # noqa: F401
from .failure import Failed, Refusal, as_command, say  # noqa: F401
from .files import WriterLock, atomic, listing, refuse_overlaps, replace_folder, save_torch  # noqa: F401
from .records import (EVALUATION, EXPORT, RESULTS, RUN, Damaged, Kind, Step, changed_since, check_made_from,  # noqa: F401
                      check_owned, forget_written, made_from, stamped_change, theirs, write_file)
