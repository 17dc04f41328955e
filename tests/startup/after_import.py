"""Replace a function of a module the moment the module's own code has run, before anything else
can take the name from it: the one mechanism of dynamo_on_demand.py and checks_on_demand.py."""

import importlib.abc
import importlib.machinery
import sys


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``module`` as Python would (then steps aside), and has its loader set
    ``module.<name> = wrap(module.<name>)`` once the module has run."""

    def __init__(self, module, name, wrap):
        self.module, self.name, self.wrap = module, name, wrap

    def find_spec(self, name, path=None, target=None):
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if hasattr(module, self.name):  # an older release without it (torch 1.13: no _check_with) is left as it is
                setattr(module, self.name, self.wrap(getattr(module, self.name)))

        spec.loader.exec_module = exec_module
        return spec


def replace_after_import(module: str, name: str, wrap) -> None:
    """``module.<name>`` becomes ``wrap(module.<name>)`` as ``module`` is first imported. Nothing
    is changed if its top-level package is not installed or was imported already."""
    top = module.split(".")[0]
    if top in sys.modules or importlib.machinery.PathFinder.find_spec(top) is None:
        return
    sys.meta_path.insert(0, _Finder(module, name, wrap))
