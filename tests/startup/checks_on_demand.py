"""torch's shape checks without importing sympy for a check that holds, in every Python process of
the test suite (tests/startup/sitecustomize.py calls :func:`defer`).

``torch._check_with(error_type, cond, message)`` is the Python side of torch's ``TORCH_CHECK``:
``torch._check``, ``torch._check_index`` and the others call it, and so does
``torch.nn.functional.multi_head_attention_forward`` (the key-padding mask's shape), which fairseq's
attention calls in every forward. Its first call imports
``torch.fx.experimental.symbolic_shapes``, and with it sympy: measured, 0.4 to 0.6 s of every
fairseq-train and every decoding on 2 cores, though the condition is a plain ``True``.

For ``cond is True`` torch's own function returns at once (``expect_true(True)`` is ``True``), so
here ``torch._check_with`` returns at once for it without that import, and passes every other
condition (``False``, a ``SymBool``, anything else) to torch's function, which does what it always
did: what every check decides, and every error it raises, is unchanged; only whether sympy is
imported for a check that holds differs. tests/test_startup.py checks both sides. Nothing is
changed if torch is not installed or was imported already.
"""

from after_import import replace_after_import


def _on_demand(torch_check_with):
    """A ``_check_with`` that returns for a plain ``True`` and calls ``torch_check_with`` otherwise."""

    def _check_with(error_type, cond, message):
        if cond is True:
            return None
        return torch_check_with(error_type, cond, message)

    _check_with.__wrapped__ = torch_check_with
    return _check_with


def defer():
    """Put the replacement in place (see the module's docstring)."""
    replace_after_import("torch", "_check_with", _on_demand)
