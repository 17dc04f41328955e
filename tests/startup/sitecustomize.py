"""Run at the start of every Python process of the test suite: the pytest workers and every
process a test starts (tests/conftest.py puts this folder first on PYTHONPATH).

Four things, all for speed; nothing a test checks depends on any. First, garbage collection
(nothing depends on when a collection runs).
A process that imports fairseq holds about 290,000 objects the collector tracks, and with
Python's default thresholds it passes over them again and again while they are created, then
again at exit: about 2.5 s of the 7.5 s such a process takes to start and end on 2 cores, and
the suite starts some 330 of them. So collections come less often (every 10,000 new objects, not
every 700), and at exit the objects still alive are frozen (``gc.freeze``): the interpreter
frees them one by one as always, without looking at them for reference cycles first. What is
left in a cycle at exit is then not finalised: a file not closed would lose what it buffered,
which makes such a bug fail here rather than hide.

Second, scikit-learn and scipy.stats are imported when first used instead of at fairseq's start
(about 2 s of each process that imports fairseq): deferred_imports.py beside this file says how.

Third, torch._dynamo is imported only where something compiles, not by every optimizer torch
builds (1.4 to 2 s of each fairseq-train): dynamo_on_demand.py beside this file says how.

Fourth, sympy is imported only for a shape check of torch's that does not plainly hold, not by the
first attention forward (0.4 to 0.6 s of each fairseq-train and each decoding):
checks_on_demand.py beside this file says how.

Should another ``sitecustomize`` be on the path (a distribution's), it runs after this one.
"""

import atexit
import gc
import importlib.machinery
import importlib.util
import os
import sys

gc.set_threshold(10_000, 50, 100)
atexit.register(gc.freeze)  # registered first, so it runs last of the exit handlers

import deferred_imports  # noqa: E402  (this folder is on sys.path: PYTHONPATH)

deferred_imports.defer()

import dynamo_on_demand  # noqa: E402

dynamo_on_demand.defer()

import checks_on_demand  # noqa: E402

checks_on_demand.defer()

_here = os.path.dirname(os.path.abspath(__file__))
_other = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _other is not None and _other.loader is not None:
    _other.loader.exec_module(importlib.util.module_from_spec(_other))
