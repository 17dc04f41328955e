"""Let fairseq checkpoints load on torch >= 2.6 without turning torch's safety off.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``, which only unpickles
tensors, containers and allow-listed classes. A fairseq checkpoint holds one other class,
the ``argparse.Namespace`` of its training flags (``state["args"]``), so fairseq-generate,
fairseq-interactive, the hub interface and resumed training all fail to load it.

Importing this package (``--user-dir fairseq_csan`` does) adds ``argparse.Namespace`` to
torch's allow-list. A Namespace only stores attributes, so this keeps the weights-only
guarantee: nothing in a checkpoint can run code. Checkpoints that hold further classes
still fail with torch's own message.
"""

import argparse

import torch


def allow_fairseq_checkpoints() -> bool:
    """Allow-list what fairseq checkpoints contain; False on torch without the allow-list."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is None:  # torch < 2.4 loads without weights_only by default
        return False
    add_safe_globals([argparse.Namespace])
    return True


allow_fairseq_checkpoints()
