"""torch._dynamo, imported only where something compiles, in every Python process of the test
suite (tests/startup/sitecustomize.py calls :func:`defer`).

torch marks some of its functions with ``torch._compile._disable_dynamo`` (the optimizers'
``add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict``, among others): the
first call of each imports ``torch._dynamo`` and goes through ``torch._dynamo.disable``, so that
``torch.compile`` never traces into it. Every fairseq-train builds an optimizer, so every one
imports ``torch._dynamo``: measured, a tiny run of the En-De fixture took 9.0 to 9.5 s with it
and 7.3 to 7.8 s without, on 2 cores, and the suite starts about 100 such runs. None compiles
anything. (torch's own optimizers import ``torch._dynamo`` in ``step`` as well, whatever this
module does; fairseq's have their own ``step``.)

Before ``torch._dynamo`` is imported nothing can be compiling (``torch.compile`` imports it), and
``disable`` then only switches off a frame hook that nobody has set. So here
``_disable_dynamo`` wraps a function in torch's own wrapper, and the call goes straight to the
function while ``torch._dynamo`` is not in ``sys.modules``, and through torch's wrapper (which
imports it) once it is: what any call computes is unchanged; only whether ``torch._dynamo`` gets
imported for nothing differs. tests/test_startup.py checks both sides, and that a process without
this folder imports ``torch._dynamo`` as before. Nothing is changed if torch is not installed or
was imported already.
"""

import functools
import sys

from after_import import replace_after_import

TARGET = "torch._compile"


def _on_demand(torch_disable):
    """A ``_disable_dynamo`` that calls torch's (``torch_disable``) only once dynamo is imported."""

    def _disable_dynamo(fn=None, recursive=True):
        if fn is None:  # @_disable_dynamo(recursive=False)
            return functools.partial(_disable_dynamo, recursive=recursive)
        wrapped = torch_disable(fn, recursive)

        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if "torch._dynamo" not in sys.modules:
                return fn(*args, **kwargs)
            return wrapped(*args, **kwargs)

        return inner

    return _disable_dynamo


def defer():
    """Put the replacement in place (see the module's docstring)."""
    replace_after_import(TARGET, "_disable_dynamo", _on_demand)
