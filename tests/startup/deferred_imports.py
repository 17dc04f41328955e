"""scikit-learn and scipy.stats, imported when first used instead of at fairseq's start, in every
Python process of the test suite (tests/startup/sitecustomize.py calls :func:`defer`).

fairseq imports every task and criterion module as it starts, and two of them import from these
packages at their top: ``fairseq/tasks/audio_classification.py`` (``from sklearn import metrics``)
and ``fairseq/criterions/sentence_prediction.py`` (``f1_score`` and ``matthews_corrcoef`` from
``sklearn.metrics``, ``pearsonr`` and ``spearmanr`` from ``scipy.stats``). Importing them takes
about 2 s of the 5.5 s a process that imports fairseq takes to start on 2 cores, and the suite
starts over 300 such processes; none of them runs that task or criterion.

So ``sklearn``, ``sklearn.metrics`` and ``scipy.stats`` stand in ``sys.modules`` as modules that
hold just those names: the two modules, and the four functions as callables that import the real
module when first called. Whatever else is read from a stand-in, an import of another submodule
(``sklearn.utils``), or a call of one of the four, imports the real modules there and then, and
from then on every holder of a stand-in reads the real module's objects. What the code under test
computes is unchanged; only when the import happens differs. Nothing is deferred if a package is
not installed or was imported already.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

# the names fairseq's modules take from each module at fairseq's start
NAMES = {"sklearn": ("metrics",), "sklearn.metrics": ("f1_score", "matthews_corrcoef"),
         "scipy.stats": ("pearsonr", "spearmanr")}
_STANDING = {}  # module name -> its stand-in, while it stands


def resolve():
    """The real modules, imported now in place of every stand-in (all at once: sklearn imports
    scipy.stats); the stand-ins become plain modules with the real modules' contents."""
    if not _STANDING:
        return
    standing = dict(_STANDING)
    _STANDING.clear()
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
    for name, stand_in in standing.items():
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
    for name, stand_in in standing.items():
        real = importlib.import_module(name)
        stand_in.__class__ = types.ModuleType
        vars(stand_in).update(vars(real))


class _StandIn(types.ModuleType):
    def __getattr__(self, attr):  # a name it does not hold: the real module's
        resolve()
        return getattr(sys.modules[self.__name__], attr)


class _Later:
    """A function of a module not imported yet, imported when it is first called or looked into."""

    def __init__(self, module, name):
        self._where = (module, name)

    def _real(self):
        resolve()
        return getattr(sys.modules[self._where[0]], self._where[1])

    def __call__(self, *args, **kwargs):
        return self._real()(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._real(), attr)


class _Imported(importlib.abc.Loader):
    """A module the real package imported as it was imported itself: that module, not a second copy."""

    def create_module(self, spec):
        return sys.modules[spec.name]

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    """An import of another submodule of a stand-in (``import sklearn.utils``): the real package first."""

    def find_spec(self, name, path=None, target=None):
        if not any(name.startswith(prefix + ".") for prefix in _STANDING):
            return None
        resolve()
        return importlib.machinery.ModuleSpec(name, _Imported()) if name in sys.modules else None


def defer():
    """Put the stand-ins in place (see the module's docstring)."""
    specs = {}
    for name in NAMES:
        parent = name.rpartition(".")[0]
        if parent:
            above = specs.get(parent) or importlib.machinery.PathFinder.find_spec(parent)
            spec = above and importlib.machinery.PathFinder.find_spec(name, above.submodule_search_locations)
        else:
            spec = importlib.machinery.PathFinder.find_spec(name)
        if spec is None or name in sys.modules or parent in sys.modules:
            return
        specs[name] = spec
    for name, spec in specs.items():
        stand_in = _StandIn(name)
        stand_in.__spec__, stand_in.__loader__, stand_in.__file__ = spec, spec.loader, spec.origin
        if spec.submodule_search_locations is not None:
            stand_in.__path__ = list(spec.submodule_search_locations)
            stand_in.__package__ = name
        else:
            stand_in.__package__ = name.rpartition(".")[0]
        _STANDING[name] = stand_in
    for name, attrs in NAMES.items():
        for attr in attrs:
            setattr(_STANDING[name], attr, _STANDING.get(f"{name}.{attr}") or _Later(name, attr))
    sys.modules.update(_STANDING)
    sys.meta_path.insert(0, _Finder())
